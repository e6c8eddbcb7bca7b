"""Benchmark: a k x r_max sweep against single classifications, on clustered points.

The sweep computes the distinct-subject neighbour distances once, for the largest
k and the widest search radius, and reads every cell from them. The target (issue
7) is a 4 x 4 sweep on 1e6 records in at most twice the time of one
classification. The script prints one table: wall time (best of ``--repeat``),
the ratio to one classification, peak traced memory, and whether every sweep cell
equals its direct classification.

Run::

    python -m benchmarks.bench_sweep                 # 1e6 points, 4 x 4
    python -m benchmarks.bench_sweep --n 20000       # toy size (CI)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import tracemalloc
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    from benchmarks.synthetic import clustered_points
except ModuleNotFoundError:  # run as a script: put the repository root on the path
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.synthetic import clustered_points
from geokanon.classify import cap_verdict, classify, unit_table
from geokanon.mask import MaskKey, MaskSpec, apply_mask
from geokanon.policy import Label, OutlierPolicy
from geokanon.sweep import parse_list, sweep

#: Clock of the timings: wall time, or CPU time of the process (all threads), which a
#: shared machine's load disturbs less.
CLOCK: Callable[[], float] = time.perf_counter


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Best time of ``repeat`` runs, peak traced memory (MiB) of the first, last result."""
    best = float("inf")
    peak = 0.0
    out = None
    for i in range(repeat):
        gc.collect()
        if i == 0:
            tracemalloc.start()
        t0 = CLOCK()
        out = fn()
        best = min(best, CLOCK() - t0)
        if i == 0:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
    return best, peak, out


def _one_cell(x, y, codes, names, policy):
    """What one ``geokanon classify`` does after reading: labels, unit table, verdict."""
    cls = classify(x, y, policy)
    sup = cls.labels == Label.SUPPRESS
    table = unit_table(sup, codes, names)
    verdict = cap_verdict(sup, cls.labels != Label.OK, table, policy, warn=False)
    return cls.counts(), verdict


#: A fixed mask key, so the benchmark displaces the same way on every run (never a real key).
BENCH_KEY = MaskKey(b"geokanon benchmark mask key, not secret")


def main(argv: list[str] | None = None) -> None:
    """Print the benchmark table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="records (1e6)")
    ap.add_argument("--k", default="3,5,7,10", help="values of k (3,5,7,10)")
    ap.add_argument("--r-max", default="100,250,500,1000", help="values of r_max, m")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; best is kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="wall time or process CPU time"
    )
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    ks = parse_list(args.k, name="--k", kind=int)
    rs = parse_list(args.r_max, name="--r-max")

    x, y, codes = clustered_points(args.n, seed=args.seed)
    names = np.array([str(u) for u in range(int(codes.max()) + 1)], dtype=object)
    base = OutlierPolicy(k=ks[0], r_max_m=rs[0])
    # Compile (numba caches) outside the timings.
    warm = slice(0, min(args.n, 5_000))
    sweep(x[warm], y[warm], ks, rs, base, unit_codes=codes[warm], unit_names=names)
    warnings.simplefilter("ignore")

    rows: list[tuple[str, float, float]] = []
    singles: dict[tuple[int, float], float] = {}
    direct: dict[tuple[int, float], Any] = {}
    for k in ks:
        for r in rs:
            pol = base.replace(k=k, r_max_m=r)
            t, peak, out = _timed(lambda pol=pol: _one_cell(x, y, codes, names, pol), args.repeat)
            singles[(k, r)] = t
            direct[(k, r)] = out
    mid = (ks[(len(ks) - 1) // 2], rs[(len(rs) - 1) // 2])
    big = (ks[-1], rs[-1])
    median = statistics.median(singles.values())

    def run_sweep() -> Any:
        return sweep(x, y, ks, rs, base, unit_codes=codes, unit_names=names)

    def run_cell(cell: tuple[int, float]) -> Any:
        return _one_cell(x, y, codes, names, base.replace(k=cell[0], r_max_m=cell[1]))

    # The machine may be shared: interleave the sweep with the two reference
    # classifications so that a change of load hits all three alike.
    t_sweep, peak_sweep, res = _timed(run_sweep, 1)
    _, peak_big, _ = _timed(lambda: run_cell(big), 1)
    for _ in range(args.repeat):
        for cell in (mid, big):
            singles[cell] = min(singles[cell], _timed(lambda c=cell: run_cell(c), 1)[0])
        t_sweep = min(t_sweep, _timed(run_sweep, 1)[0])
    same = all(
        res.cell(k, r).counts == direct[(k, r)][0]
        and res.cell(k, r).suppressed_share == direct[(k, r)][1].suppressed_share
        and res.cell(k, r).worst_unit_share == direct[(k, r)][1].worst_unit_share
        for k in ks
        for r in rs
    )
    rows.append(
        (f"classify k={mid[0]}, r_max={mid[1]:g} (middle cell)", singles[mid], float("nan"))
    )
    rows.append((f"classify k={big[0]}, r_max={big[1]:g} (largest cell)", singles[big], peak_big))
    rows.append(("classify, median over the cells", median, float("nan")))
    rows.append(
        (f"{len(ks) * len(rs)} separate classifications", sum(singles.values()), float("nan"))
    )
    rows.append((f"sweep {len(ks)} x {len(rs)} (one neighbour search)", t_sweep, peak_sweep))
    t_mask, peak_mask, _ = _timed(
        lambda: apply_mask(x, y, MaskSpec.jitter(sd_m=50.0), key=BENCH_KEY), args.repeat
    )
    rows.append(("keyed jitter mask (apply_mask), one level", t_mask, peak_mask))

    print(
        f"bench_sweep: {args.n:,} clustered points, {names.size} units, k in {ks}, "
        f"r_max in {[f'{r:g}' for r in rs]} m; best of {args.repeat}, {args.clock} clock; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'what':<47}{args.clock + ' s':>9}{'x middle':>10}{'x median':>10}{'x largest':>11}"
        f"{'peak MiB':>10}"
    )
    for what, t, peak in rows:
        mem = "-" if peak != peak else f"{peak:.0f}"
        print(
            f"{what:<47}{t:>9.2f}{t / singles[mid]:>10.2f}{t / median:>10.2f}"
            f"{t / singles[big]:>11.2f}{mem:>10}"
        )
    print(f"every sweep cell equals its direct classification: {'yes' if same else 'NO'}")
    target = t_sweep <= 2.0 * singles[mid]
    print(
        f"target (sweep <= 2 x one classification, middle cell): "
        f"{'met' if target else 'missed'} ({t_sweep / singles[mid]:.2f} x)"
    )


if __name__ == "__main__":
    main()

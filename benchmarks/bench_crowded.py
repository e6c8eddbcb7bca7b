"""The release core on crowded places: many records at one coordinate, and dense spots.

Run from the repository root::

    python benchmarks/bench_crowded.py                                  # 3e4 .. 1e6
    python benchmarks/bench_crowded.py --sizes 3e4 1e5 --before b76bd64 --before-sizes 3e4 1e5
    python benchmarks/bench_crowded.py --markdown

Registers as custodians hold them put many records at one coordinate: a care home's
residents, addresses geocoded to a postcode's centroid, a prison. GPS data put many
distinct places in a few metres (the phones at a stadium, fixes with centimetres of
jitter). The classification's search and the local search's neighbour lists read a
grid cell's points for each of its points, with cells sized for the median record, so
such a crowd cost the square of its size. Three layouts, each with ~1.3 records per
subject:

- ``places``: every record at one of four places within 2 m (the extreme);
- ``centroids``: 40 % of the records at 300 centroids of heavy-tailed sizes (the largest
  holds about a third of them), the rest spread (normal, 8 km);
- ``spot``: a third of the records in a spot of distinct places (normal, 3 m, on a
  centimetre grid), the rest uniform over 20 km x 20 km.

Only :func:`geokanon.pipeline.run_core_on` (classification, grouping, disposals; the caps not
enforced, so that a toy size that breaches them is timed too) is
timed (k = 5, r_max = 300 m), each size in a fresh process after a warm-up call on a
tiny input (numba kernels load from the cache or compile there). "before" runs
revision ``--before`` (its ``src`` extracted with ``git archive``) at ``--before-sizes``
only, with ``--timeout``; "same" says whether both gave the same groups, disposals, isolation,
representatives and classes (a digest of the core's arrays). No timing decides a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
LAYOUTS = ("places", "centroids", "spot")


def layout(name: str, n: int, seed: int = 0) -> tuple[NDArray[np.float64], ...]:
    """``n`` records of layout ``name``: x, y (metres), subject codes (as floats)."""
    rng = np.random.default_rng(seed)
    if name == "places":
        at = rng.integers(0, 4, n)
        x = 150_000.0 + np.array([0.0, 1.0, 0.0, 2.0])[at]
        y = 470_000.0 + np.array([0.0, 0.0, 1.0, 2.0])[at]
    elif name == "centroids":
        x = rng.normal(150_000.0, 8_000.0, n)
        y = rng.normal(470_000.0, 8_000.0, n)
        cx = rng.normal(150_000.0, 8_000.0, 300).round()
        cy = rng.normal(470_000.0, 8_000.0, 300).round()
        w = rng.pareto(1.0, 300) + 1.0
        pick = rng.random(n) < 0.4
        at = rng.choice(300, int(pick.sum()), p=w / w.sum())
        x[pick], y[pick] = cx[at], cy[at]
    elif name == "spot":
        m = n // 3
        x = np.r_[150_000.0 + rng.normal(0.0, 3.0, m), rng.uniform(140_000.0, 160_000.0, n - m)]
        y = np.r_[470_000.0 + rng.normal(0.0, 3.0, m), rng.uniform(460_000.0, 480_000.0, n - m)]
    else:
        raise SystemExit(f"unknown layout {name!r}: one of {', '.join(LAYOUTS)}")
    s = rng.integers(0, max(1, int(n / 1.3)), n).astype(np.float64)
    return np.round(x, 2), np.round(y, 2), s


def _child(name: str, n: int) -> None:
    """Time one core in this process and print a JSON line."""
    import pandas as pd

    from geokanon.io.read import table_from_frame
    from geokanon.pipeline import run_core_on
    from geokanon.policy import OutlierPolicy

    warnings.simplefilter("ignore")
    pol = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.05)

    def table(m: int) -> Any:
        x, y, s = layout(name, m)
        frame = pd.DataFrame({"x": x, "y": y, "s": s.astype(np.int64)})
        return table_from_frame(frame, x="x", y="y", subject="s", crs="EPSG:28992")

    run_core_on(table(2_000), pol, enforce_caps=False)  # warm-up: numba cache / compile
    t = table(n)
    t0 = time.perf_counter()
    core = run_core_on(t, pol, enforce_caps=False)  # timed whatever the caps say
    wall = time.perf_counter() - t0
    digest = hashlib.sha256()
    for v in (core.group_id, core.disposal, core.iota, core.group_x, core.group_y, core.class_id):
        digest.update(np.ascontiguousarray(v).tobytes())
    placed = float((np.asarray(core.group_id) >= 0).mean())
    print(json.dumps({"wall": wall, "placed": placed, "digest": digest.hexdigest()[:12]}))


def run(name: str, n: int, src: Path, timeout: float) -> dict[str, Any] | None:
    """One layout and size in a fresh process with ``src`` first on the path; None on
    timeout."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, str(n)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                             check=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[3e4, 1e5, 1e6])
    ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    ap.add_argument("--before", default=None, help="a revision to run side by side")
    ap.add_argument("--before-sizes", nargs="*", type=float, default=[3e4])
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        _child(a.child[0], int(a.child[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        before_src = None
        if a.before:
            sys.path.insert(0, str(HERE.parent))
            from benchmarks.bench_cold_start import _extract

            before_src = _extract(a.before, Path(tmp))
        small = {int(v) for v in a.before_sizes}
        rows = []
        for name in a.layouts:
            for n in (int(v) for v in a.sizes):
                b = None
                if before_src is not None and n in small:
                    b = run(name, n, before_src, a.timeout) or {"wall": None}
                rows.append((name, n, b, run(name, n, SRC, a.timeout)))

    def secs(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        return f"> {a.timeout:.0f}" if r.get("wall") is None else f"{r['wall']:.2f}"

    before = f"before s ({a.before})" if a.before else "before s"
    head = ["layout", "N", before, "after s", "after s per 1e5", "placed", "same"]
    lines = [
        [
            name,
            f"{n:.0e}",
            secs(b),
            secs(f),
            "-" if f is None else f"{f['wall'] / n * 1e5:.2f}",
            "-" if f is None else f"{f['placed']:.4f}",
            "-"
            if b is None or f is None or "digest" not in b
            else ("yes" if b["digest"] == f["digest"] else "NO"),
        ]
        for name, n, b, f in rows
    ]
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.bench_few_subjects import print_table

    print_table(head, lines, a.markdown)


if __name__ == "__main__":
    main()

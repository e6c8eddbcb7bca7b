"""The release's write and report stages alone, on one captured input, beside a baseline.

``bench_release.py`` times every stage of one release; here the table and the core's
result are made once (the ``bench_scale`` generator and policy of ``bench_release.py``)
and pickled, then each source tree runs only the two stages of
:func:`geokanon.release.write_release` this script is about, in a fresh process per run:
``write`` (:func:`~geokanon.release.build_release_files` and the manifest's checksums)
and ``report`` (:func:`~geokanon.report.html.build_report`). The trees alternate, so
both see the same machine; each process first runs a tiny core, so numba is loaded as in
a release. Printed per run: wall and CPU seconds (all threads) of each stage and the
peak resident memory of the process. With ``--compare`` the files of the first run of
each tree are compared byte for byte.

Usage::

    python benchmarks/bench_write_report.py --n 1e7 --baseline-src /path/to/other/src
    python benchmarks/bench_write_report.py --n 1e6 --baseline d9e595e --repeat 3 --compare
    python benchmarks/bench_write_report.py --quick                 # toy size (CI)

``--baseline REV`` extracts that revision with ``git archive`` (its numba kernels are
compiled in an untimed first run); ``--baseline-src`` uses a tree as it is (its cache
warm). The captured input is pickled by this tree, so the baseline must read this
tree's ``PointTable`` and ``CoreResult`` (true while their fields are unchanged).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_cold_start import _extract  # noqa: E402  (git archive of a revision)

#: What a child process runs: load the capture, run the two stages, print one JSON line.
_CHILD = r"""
import inspect, json, pickle, resource, sys, time, warnings
from pathlib import Path

import numpy as np
import pandas as pd

capture, out = Path(sys.argv[1]), Path(sys.argv[2])
with open(capture, "rb") as fh:
    table, core, policy = pickle.load(fh)
from geokanon.io.read import table_from_frame
from geokanon.pipeline import run_core_on
from geokanon.release import (
    _REPORT_WRITES, ReleaseOptions, _claimed_results, _return_free_memory,
    build_release_files, finish_manifest,
)
from geokanon.report.html import build_report

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    tiny = pd.DataFrame({"x": rng.uniform(0, 3000, 3000), "y": rng.uniform(0, 3000, 3000)})
    run_core_on(table_from_frame(tiny, unit_grid_m=1000.0), policy)  # numba as in a release
    options = ReleaseOptions(local_metres=True)
    _return_free_memory()
    w, c = time.perf_counter(), time.process_time()
    written = {}
    manifest = build_release_files(
        out, table, core, policy, options, version="bench", digests=written
    )
    claimed = _claimed_results(None)
    manifest["verification"] = claimed
    digests = finish_manifest(out, manifest, unchanged=written)
    write = (time.perf_counter() - w, time.process_time() - c)
    _return_free_memory()
    w, c = time.perf_counter(), time.process_time()
    held = {  # what write_release hands the report, where this tree's report takes it
        "group_id": core.group_id, "x_m": table.x, "y_m": table.y,
        "subject": core.subjects, "iota": core.iota,
    }
    takes = "audit_columns" in inspect.signature(build_report).parameters
    build_report(out, verification=claimed, **({"audit_columns": held} if takes else {}))
    finish_manifest(
        out, manifest, unchanged={f: d for f, d in digests.items() if f not in _REPORT_WRITES}
    )
    report = (time.perf_counter() - w, time.process_time() - c)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"write": write, "report": report, "peak_gb": peak}))
"""


def capture(n: int, path: Path) -> None:
    """Pickle the ``bench_release.py`` input of ``n`` records and this tree's core result."""
    from benchmarks.bench_scale import SyntheticPartitions
    from geokanon import OutlierPolicy
    from geokanon.io.read import table_from_frame
    from geokanon.pipeline import run_core_on

    frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, x="x", y="y", unit_grid_m=20000.0)
        del frame
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.05)
        core = run_core_on(table, policy)
    with open(path, "wb") as fh:
        pickle.dump((table, core, policy), fh, protocol=5)


def run(src: Path, capture_path: Path, out: Path) -> dict[str, object]:
    """One child process importing geokanon from ``src``: the stages' figures."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(capture_path), str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the run with {src} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def differing(a: Path, b: Path) -> list[str]:
    """Files under ``a`` and ``b`` (relative paths) that differ or exist in one only."""
    names = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    names |= {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    return sorted(
        n
        for n in names
        if not ((a / n).is_file() and (b / n).is_file() and filecmp.cmp(a / n, b / n, False))
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1e6", help="records (e.g. 1e6, 1e7)")
    ap.add_argument("--baseline", default=None, help="git revision to compare with")
    ap.add_argument("--baseline-src", default=None, help="a source tree to compare with")
    ap.add_argument("--repeat", type=int, default=2, help="runs per tree (alternating)")
    ap.add_argument("--compare", action="store_true", help="compare the files written")
    ap.add_argument("--out", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="toy size (CI)")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else int(float(args.n))
    with tempfile.TemporaryDirectory(dir=args.out) as tmp_name:
        tmp = Path(tmp_name)
        trees = {"this tree": ROOT / "src"}
        if args.baseline_src:
            trees[f"baseline {args.baseline_src}"] = Path(args.baseline_src)
        elif args.baseline:
            trees[f"baseline {args.baseline}"] = _extract(args.baseline, tmp / "baseline")
        cap = tmp / "capture.pkl"
        capture(n, cap)
        if args.baseline and not args.baseline_src:  # compile its kernels, untimed
            run(trees[f"baseline {args.baseline}"], cap, tmp / "warm")
        rows: list[tuple[str, dict[str, object]]] = []
        for i in range(args.repeat):
            for j, (name, src) in enumerate(trees.items()):
                out = tmp / f"run{i}-{j}"
                rows.append((name, run(src, cap, out)))
                if i or not args.compare:
                    shutil.rmtree(out, ignore_errors=True)
        print(f"records {n:,}; cores {os.cpu_count()}; load {os.getloadavg()[0]:.1f} (1 min)")
        head = ("write s", "cpu s", "report s", "cpu s", "peak GB")
        print(f"{'tree':<34} " + " ".join(f"{h:>8}" for h in head))
        for name, r in rows:
            (ww, wc), (rw, rc) = r["write"], r["report"]  # type: ignore[misc]
            figures = (ww, wc, rw, rc, r["peak_gb"])
            print(f"{name:<34} " + " ".join(f"{v:>8.2f}" for v in figures))
        if args.compare and len(trees) > 1:
            diff = differing(tmp / "run0-0", tmp / "run0-1")
            print("files identical" if not diff else f"files that differ: {', '.join(diff)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

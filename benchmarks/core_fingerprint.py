"""The release core's decisions as one sha256, with its CPU and wall seconds.

A change meant to make the core faster must not change what it decides: run this
script on the tree before and after (each with its own ``PYTHONPATH``) and compare the
digests. The digest covers every per-record and per-group output of
:func:`geokanon.pipeline.run_core_on`: the first-pass labels and isolation ratios, the
final labels, dispositions, group ids and representatives, the generalised classes
(ids, levels, units), the per-pass label counts, the cap verdict and the subject codes.

Inputs (``--input``):

- ``synthetic``: ``bench_release.py``'s generator (``--n`` records; ``--subjects`` adds a
  subject column of ~1.25 records per subject, as that script does);
- ``dwellings``: the shared Dutch dwellings (``$GEOKANON_DATA/sdcspatial_dwellings``),
  municipality units, at ``--r-max`` metres.

Usage::

    PYTHONPATH=src python3 benchmarks/core_fingerprint.py --n 3e5
    PYTHONPATH=src python3 benchmarks/core_fingerprint.py --n 3e5 --subjects
    PYTHONPATH=src python3 benchmarks/core_fingerprint.py --input dwellings --r-max 100
    PYTHONPATH=src NUMBA_NUM_THREADS=1 python3 benchmarks/core_fingerprint.py --n 3e5

It prints one line: the input, the digest, the core's wall and CPU seconds (all threads
of this process), its peak resident GB and ``NUMBA_NUM_THREADS``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def synthetic_table(n: int, subjects: bool) -> Any:
    """``bench_release.py``'s input table (the same generator, seed and options)."""
    from benchmarks.bench_scale import SyntheticPartitions
    from geokanon.io.read import table_from_frame

    frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
    rng = np.random.default_rng(1)
    if subjects:
        ids = rng.integers(0, max(1, int(n / 1.25)), n)
        frame["patient"] = np.char.add("P", np.char.zfill(ids.astype(str), 7))
    return table_from_frame(
        frame, x="x", y="y", subject="patient" if subjects else None, unit_grid_m=20000.0
    )


def dwellings_table() -> Any:
    """The shared dwellings, their municipality as unit, the simulated columns kept."""
    import pandas as pd

    from geokanon.io.read import table_from_frame

    data = Path(os.environ.get("GEOKANON_DATA", "/work/shared/data"))
    frame = pd.read_csv(data / "sdcspatial_dwellings" / "dwellings.csv")
    frame = frame.drop(columns=["point_id", "gm_naam"])
    return table_from_frame(frame, x="x", y="y", unit="gm_code", crs="EPSG:28992")


def digest(core: Any) -> str:
    """sha256 of the core's decisions (see the module docstring)."""
    h = hashlib.sha256()
    for name in (
        "first_labels", "iota", "final_labels", "disposal", "group_id", "group_x",
        "group_y", "class_id", "subjects",
    ):  # fmt: skip
        a = np.ascontiguousarray(getattr(core, name))
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(repr((core.class_level, core.class_unit)).encode())
    h.update(repr([p.to_dict() for p in core.passes]).encode())
    h.update(repr(core.verdict).encode())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", choices=("synthetic", "dwellings"), default="synthetic")
    ap.add_argument("--n", default="3e5", help="records of the synthetic input")
    ap.add_argument("--subjects", action="store_true", help="a subject column (synthetic)")
    ap.add_argument("--r-max", type=float, default=300.0, help="r_max in metres")
    args = ap.parse_args()

    import psutil

    from geokanon import OutlierPolicy
    from geokanon.pipeline import run_core_on

    if args.input == "synthetic":
        n = int(float(args.n))
        table = synthetic_table(n, args.subjects)
        what = f"synthetic n={n:,} subjects={'yes' if args.subjects else 'no'}"
    else:
        table = dwellings_table()
        what = "dwellings"
    what += f" r_max={args.r_max:g}"
    policy = OutlierPolicy(k=5, r_max_m=args.r_max, unit_cap=1.0, tau=0.05)
    proc = psutil.Process()
    c0, t0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core = run_core_on(table, policy)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = getattr(proc.memory_info(), "peak_wset", None) or _peak_rss()
    threads = os.environ.get("NUMBA_NUM_THREADS", "default")
    print(
        f"{what} sha256={digest(core)} core_wall={wall:.2f} core_cpu={cpu:.2f} "
        f"peak_gb={peak / 2**30:.2f} numba_threads={threads} "
        f"groups={core.group_x.size:,} load={os.getloadavg()[0]:.2f}"
    )


def _peak_rss() -> int:
    """The process's peak resident set so far (bytes)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


if __name__ == "__main__":
    main()

"""The verifier alone, on releases written once: the release writer's two runs, or Dask's.

Prints one table: records, layout, run, seconds, CPU seconds of this process (all its
threads: on a shared machine wall time mostly measures the wait for a core), peak memory
of this process (resident set, sampled every 0.2 s; Dask workers not included), and the
scaling exponent against the previous size (1.0 is linear). The releases are written
first (not timed) into ``--dir`` and kept there, so the verifier of another checkout can
be timed on the very same files: run this script once with each checkout on
``PYTHONPATH``, side by side.

Single file: ``full`` is :func:`geokanon.verify.verify_release` with every check on the
release and its source table (the writer's first run); ``after report`` is the writer's
second run (the checks that read the report, the other files' checksums carried over),
given the first run's report as ``reuse`` when the verifier accepts it. Partitioned:
:func:`~geokanon.verify.partitioned.verify_partitioned` with the tasks run in this
process (``--dask-workers 0``) or on a local cluster.

Usage::

    python benchmarks/bench_verify.py --single 1e6 --dir /tmp/geokanon-bench-verify
    python benchmarks/bench_verify.py --single "" --partitioned 1e6,3e6 --partition 125000
    python benchmarks/bench_verify.py --single "" --groups-read 1.8e6,1.8e7  # one part's read
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_scale import (
    PeakMemory,
    SyntheticPartitions,
    _full_policy,
    _sizes,
)

#: (records, layout, run, seconds, CPU seconds, peak GB)
_Row = tuple[int, str, str, float, float, float]


def _timed(call: Any) -> tuple[Any, float, float]:
    """(what ``call()`` returns, its wall seconds, its CPU seconds in this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _table(n: int) -> Any:
    from geokanon.io import table_from_frame

    frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
    frame["unit"] = frame["unit"].astype(str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return table_from_frame(frame, unit="unit")


def _policy(k: int, r_max: float) -> Any:
    from geokanon import OutlierPolicy

    return _full_policy(OutlierPolicy(k=k, r_max_m=r_max))


def single(n: int, base: Path, k: int, r_max: float) -> list[_Row]:
    from geokanon.pipeline import release_points
    from geokanon.release import ReleaseOptions
    from geokanon.report.html import RECHECKED
    from geokanon.verify import verify_release

    table = _table(n)
    out = base / f"single-{n}"
    if not (out / "release" / "manifest.json").is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            release_points(
                table, _policy(k, r_max), out, ReleaseOptions(local_metres=True, force=True),
                check_determinism=False,
            )  # fmt: skip
    rows = []
    with PeakMemory() as mem:
        first, dt, cpu = _timed(lambda: verify_release(out, source=table))
    rows.append((n, "single", "full", dt, cpu, mem.peak / 2**30))
    extra: dict[str, Any] = {}
    if "reuse" in inspect.signature(verify_release).parameters:
        extra["reuse"] = first
    unchanged = {
        f: d for f, d in first.digests.items() if f not in ("report.html", "manifest.json")
    }
    with PeakMemory() as mem:
        again, dt, cpu = _timed(
            lambda: verify_release(
                out, source=table, checks=RECHECKED, unchanged=unchanged, **extra
            )
        )
    note = "after report" + (" (reuse)" if extra else "")
    rows.append((n, "single", note, dt, cpu, mem.peak / 2**30))
    assert first.passed and again.passed, (first.failed, again.failed)
    return rows


def partitioned(n: int, base: Path, k: int, r_max: float, part: int, workers: int) -> _Row:
    from geokanon.distributed import Tiling, dask_client, release_partitions
    from geokanon.release import ReleaseOptions

    try:
        from geokanon.verify.partitioned import verify_partitioned
    except ImportError:  # before the verifier became a package
        from geokanon.verify_tiles import verify_partitioned

    parts = max(1, math.ceil(n / part))
    src = SyntheticPartitions(n, parts)
    out = base / f"partitioned-{n}-{parts}"
    pol = _policy(k, r_max)
    if not (out / "release" / "manifest.json").is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            release_partitions(
                src, pol, out, ReleaseOptions(local_metres=True, force=True),
                tiling=Tiling.for_policy(pol, tile_m=20_000.0), n_workers=max(1, workers),
                scratch_dir=base, check_determinism=False,
            )  # fmt: skip
    if workers:
        with dask_client(None, n_workers=workers) as client, PeakMemory() as mem:
            rep, dt, cpu = _timed(
                lambda: verify_partitioned(out, source=src, client=client, scratch_dir=base)
            )
    else:
        with PeakMemory() as mem:
            rep, dt, cpu = _timed(
                lambda: verify_partitioned(out, source=src, client=None, scratch_dir=base)
            )
    assert rep.passed, rep.failed
    how = f"{parts} partitions, " + (f"dask x{workers}" if workers else "in process")
    return (n, "partitioned", how, dt, cpu, mem.peak / 2**30)


def groups_read(n_groups: int, base: Path, per_part: int = 95_000) -> str:
    """One part's read of its rows of a ``groups.parquet`` of ``n_groups`` rows (written as
    the release writes it: zstd, no column statistics): a filtered read of the file, as
    the partitioned verifier did, against the row groups its id range meets."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    table = pa.table({
        "group_id": np.arange(n_groups, dtype=np.int64),
        "n_records": rng.integers(5, 12, n_groups),
        "x": rng.uniform(0, 1e6, n_groups).round(1),
        "y": rng.uniform(0, 1e6, n_groups).round(1),
        "radius_m": rng.uniform(0, 300, n_groups).round(2),
        "unit": pa.array([str(u) for u in rng.integers(0, 9000, n_groups)]),
    })  # fmt: skip
    path = base / f"groups-{n_groups}.parquet"
    pq.write_table(table, path, compression="zstd", write_statistics=False)
    del table
    first = n_groups // 2
    end = first + per_part
    t0 = time.perf_counter()
    a = pq.read_table(path, filters=[("group_id", ">=", first), ("group_id", "<", end)])
    t1 = time.perf_counter()
    try:
        from geokanon.verify.partitioned import _id_range, _id_ranges, _row_groups_of
    except ImportError:
        path.unlink()
        return f"{n_groups:>12,} groups: filtered read {t1 - t0:.2f} s per part"
    ranges = _id_ranges(path, "group_id")
    t2 = time.perf_counter()
    b = _id_range(path, "group_id", first, end, _row_groups_of(ranges, first, end))
    t3 = time.perf_counter()
    assert a.equals(b)
    n_rg = pq.ParquetFile(path).metadata.num_row_groups
    path.unlink()
    parts = max(1, n_groups // per_part)
    return (
        f"{n_groups:>12,} groups, {n_rg} row groups, ~{parts} group parts: filtered read "
        f"{t1 - t0:.2f} s per part ({parts * (t1 - t0):.0f} s in all), its row groups "
        f"{t3 - t2:.2f} s per part ({parts * (t3 - t2):.0f} s), the id ranges once {t2 - t1:.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--single", default="1e6", help="single-file sizes")
    ap.add_argument("--partitioned", default="", help="partitioned sizes")
    ap.add_argument("--partition", type=int, default=2_000_000, help="records per partition")
    ap.add_argument("--dask-workers", type=int, default=0, help="0: tasks in this process")
    ap.add_argument("--dir", default=os.path.join(os.getcwd(), "bench-verify"),
                    help="where the releases are written and kept")  # fmt: skip
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--r-max", type=float, default=300.0)
    ap.add_argument("--groups-read", default="", help="groups.parquet sizes for one part's read")
    args = ap.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    import geokanon

    print(f"geokanon from {Path(geokanon.__file__).parent}")
    rows: list[_Row] = []
    for n in _sizes(args.single):
        rows += single(n, base, args.k, args.r_max)
    for n in _sizes(args.partitioned):
        rows.append(partitioned(n, base, args.k, args.r_max, args.partition, args.dask_workers))
    print(f"\n{'records':>12} {'layout':<12} {'run':<34} {'seconds':>8} {'CPU s':>8} "
          f"{'peak GB':>8} {'scaling':>8}")  # fmt: skip
    prev: dict[tuple[str, str], tuple[int, float]] = {}
    for n, layout, run, dt, cpu, peak in rows:
        key = (layout, run.split(",")[-1])
        scaling = ""
        if key in prev and prev[key][0] != n:
            scaling = f"{math.log(dt / prev[key][1]) / math.log(n / prev[key][0]):.2f}"
        prev[key] = (n, dt)
        print(f"{n:>12,} {layout:<12} {run:<34} {dt:>8.1f} {cpu:>8.1f} {peak:>8.2f} {scaling:>8}")
    for n in _sizes(args.groups_read):
        print(groups_read(n, base))


if __name__ == "__main__":
    main()

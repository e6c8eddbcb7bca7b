"""Release writing and verification: seconds and peak memory per stage (issue 8).

Runs the release core once on clustered synthetic points (the ``bench_scale``
generator: towns plus ~5 % rural scatter, 10 km grid units), then times
:func:`geokanon.release.write_release` stage by stage: ``build`` (the release and
audit files), ``report`` (the HTML report, which states the checks' results before
they run), ``verify`` (every independent check, on the release as published) and
``rename`` (fsync and the atomic rename). Peak memory is the resident set of this
process during the stage (sampled every 0.05 s), which includes the source table and the
core's result held throughout.

Usage::

    python benchmarks/bench_release.py --n 1e6
    python benchmarks/bench_release.py --n 1e7
    python benchmarks/bench_release.py --quick          # toy size (CI)
    python benchmarks/bench_release.py --n 1e6 --subjects --keep   # subject ids, kept column
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_scale import SyntheticPartitions


class StageMemory:
    """Peak resident memory of this process, per stage, sampled in a thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def reset(self) -> int:
        """Start a new stage; return the peak of the previous one."""
        old, self.peak = self.peak, self.rss()
        return max(old, self.peak)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self._interval)

    def __enter__(self) -> StageMemory:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


#: (name, MiB) of the release written by the last :func:`run` (release.gpkg and the whole).
sizes: list[tuple[str, float]] = []
#: CPU seconds (all threads of this process) of each row of the last :func:`run`: on a
#: loaded machine wall time mostly measures the wait for a core, CPU time the work.
cpu: list[float] = []


def run(n: int, *, subjects: bool, keep: bool, out_dir: Path) -> list[tuple[str, float, float]]:
    from geokanon import OutlierPolicy, __version__
    from geokanon.io.read import table_from_frame
    from geokanon.pipeline import run_core_on
    from geokanon.release import ReleaseOptions, write_release

    rows: list[tuple[str, float, float]] = []
    cpu.clear()
    cpu_mark = [time.process_time()]

    def cpu_row() -> None:
        now = time.process_time()
        cpu.append(now - cpu_mark[0])
        cpu_mark[0] = now

    with StageMemory() as mem:
        t0 = time.perf_counter()
        frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
        rng = np.random.default_rng(1)
        if subjects:
            # ~1.25 records per subject, ids of 8 characters
            ids = rng.integers(0, max(1, int(n / 1.25)), n)
            frame["patient"] = np.char.add("P", np.char.zfill(ids.astype(str), 7))
        if keep:
            frame["age"] = rng.integers(0, 100, n)
        table = table_from_frame(
            frame, x="x", y="y", subject="patient" if subjects else None, unit_grid_m=20000.0
        )
        del frame
        rows.append(("input", time.perf_counter() - t0, mem.reset() / 2**30))
        cpu_row()
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.05)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            core = run_core_on(table, policy)
        rows.append(("core", time.perf_counter() - t0, mem.reset() / 2**30))
        cpu_row()
        out = out_dir / f"release{n}"
        shutil.rmtree(out, ignore_errors=True)
        marks: list[tuple[str, float]] = []

        def progress(name: str, step: str | None = None, **_: int | None) -> None:
            if step is not None:  # one row per stage (geokanon._progress); steps are parts
                return
            now = time.perf_counter()
            if marks:
                rows.append((marks[-1][0], now - marks[-1][1], mem.reset() / 2**30))
                cpu_row()
            else:
                mem.reset()
                cpu_mark[0] = time.process_time()
            marks.append((name, now))

        t_all = time.perf_counter()
        options = ReleaseOptions(keep=("age",) if keep else (), local_metres=True)
        write_release(out, table, core, policy, options, version=__version__, progress=progress)
        now = time.perf_counter()
        rows.append((marks[-1][0], now - marks[-1][1], mem.reset() / 2**30))
        cpu_row()
        rows.append(("write_release total", now - t_all, max(r[2] for r in rows[2:])))
        cpu.append(sum(cpu[2:]))
        gpkg = out / "release" / "release.gpkg"
        sizes.append(("release.gpkg MiB", gpkg.stat().st_size / 2**20 if gpkg.is_file() else 0.0))
        files = (out / "release").glob("*")
        sizes.append(("release/ MiB", sum(f.stat().st_size for f in files) / 2**20))
        shutil.rmtree(out, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1e6", help="records (e.g. 1e6, 1e7)")
    ap.add_argument("--subjects", action="store_true", help="a subject id column")
    ap.add_argument("--keep", action="store_true", help="publish one attribute column")
    ap.add_argument("--out", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="toy size (CI)")
    ap.add_argument(
        "--default-heap",
        action="store_true",
        help="leave glibc's defaults (the geokanon command keeps freed memory for reuse: "
        "geokanon._heap)",
    )
    args = ap.parse_args()
    from geokanon._heap import keep_freed_memory

    if not args.default_heap:
        keep_freed_memory()
    n = 20_000 if args.quick else int(float(args.n))
    if args.quick:
        args.subjects = args.keep = True
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        rows = run(n, subjects=args.subjects, keep=args.keep, out_dir=Path(tmp))
    heap = "glibc defaults" if args.default_heap else "kept, as the geokanon command"
    print(f"records {n:,}; subjects {'yes' if args.subjects else 'no'}; "
          f"kept column {'yes' if args.keep else 'no'}; cores {os.cpu_count()}; "
          f"freed memory {heap}")  # fmt: skip
    print(f"{'stage':<22} {'seconds':>8} {'peak GB':>8} {'cpu s':>8}")
    for (name, sec, peak), used in zip(rows, cpu, strict=True):
        print(f"{name:<22} {sec:>8.2f} {peak:>8.2f} {used:>8.2f}")
    for name, mib in sizes:
        print(f"{name:<22} {mib:>8.1f}")


if __name__ == "__main__":
    main()

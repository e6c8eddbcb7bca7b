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
    python benchmarks/bench_release.py --n 1e6 --lonlat            # lon/lat in, a UTM zone
    python benchmarks/bench_release.py --n 1e7 --baseline d39bb7f --repeat 2   # side by side

``--baseline REV`` runs the same script, in a fresh process per run, once with this tree's
``geokanon`` and once with revision ``REV``'s (its ``src`` extracted with ``git archive``,
its numba kernels compiled in an untimed run at 3e5 records first), alternating
``--repeat`` times so that both see the same machine, and prints each tree's stages side by
side with the ratio of the release's seconds (core plus ``write_release``).
``--baseline-src DIR`` uses a source tree as it is. The baseline runs this script's
workload and timing, with its own stages (an older ``write_release`` names other ones).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

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


def run(
    n: int, *, subjects: bool, keep: bool, out_dir: Path, lonlat: bool = False
) -> list[tuple[str, float, float]]:
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
        if lonlat:  # the points as lon/lat (from EPSG:3035 metres in central Europe)
            import pyproj

            to_ll = pyproj.Transformer.from_crs("EPSG:3035", "EPSG:4326", always_xy=True)
            lon, lat = to_ll.transform(frame.pop("x") + 4e6, frame.pop("y") + 3e6)
            frame["lon"], frame["lat"] = lon, lat
        xy: dict[str, Any] = {} if lonlat else {"x": "x", "y": "y"}
        table = table_from_frame(
            frame, **xy, subject="patient" if subjects else None, unit_grid_m=20000.0
        )
        del frame
        rows.append(("input", time.perf_counter() - t0, mem.reset() / 2**30))
        cpu_row()
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.05)
        if lonlat:  # r_max on the ground: the UTM zone's scale (as release_points does)
            from geokanon.pipeline import on_ground

            policy = on_ground(table, policy)
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
        options = ReleaseOptions(keep=("age",) if keep else (), local_metres=not lonlat)
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


#: This tree's sources (the package a run without a baseline imports, installed or not).
_THIS_SRC = Path(__file__).resolve().parent.parent / "src"


def _child(src: Path, args: argparse.Namespace, n: int) -> dict[str, Any]:
    """One run of this script in a fresh process, importing ``geokanon`` from ``src`` (put
    first on the path: an installed copy elsewhere is not taken); its stages as printed
    with ``--json``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--n", str(n), "--json"]
    cmd += ["--subjects"] * args.subjects + ["--keep"] * args.keep + ["--lonlat"] * args.lonlat
    cmd += ["--default-heap"] * args.default_heap
    if args.out:
        cmd += ["--out", args.out]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"a run with {src} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def side_by_side(args: argparse.Namespace, n: int) -> None:
    """``--baseline`` / ``--baseline-src``: both trees, alternating, stages side by side."""
    from benchmarks.bench_cold_start import _extract  # git archive of a revision

    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline_src:
            base_src, name = Path(args.baseline_src).resolve(), str(args.baseline_src)
        else:
            base_src, name = _extract(args.baseline, Path(tmp)), str(args.baseline)
            _child(base_src, args, min(n, 300_000))  # its numba kernels compile: not timed
        _child(_THIS_SRC, args, min(n, 20_000))  # this tree's caches are loaded, untimed
        runs: dict[str, list[dict[str, Any]]] = {"this tree": [], name: []}
        for _ in range(args.repeat):
            runs["this tree"].append(_child(_THIS_SRC, args, n))
            runs[name].append(_child(base_src, args, n))
    stages: list[str] = []
    for tree_runs in runs.values():
        for run_ in tree_runs:
            stages += [str(r[0]) for r in run_["rows"] if r[0] not in stages]
    print(f"records {n:,}; {args.repeat} run(s) of each tree, alternating; seconds "
          f"(peak GB) per run")  # fmt: skip
    for label, tree_runs in runs.items():
        files = sorted({str(r["geokanon"]) for r in tree_runs})
        heaps = sorted({str(r["heap"]) for r in tree_runs})
        print(f"  {label}: geokanon from {', '.join(files)}; freed memory {', '.join(heaps)}")
    width = max(len(s) for s in [*stages, "release (core + write)"]) + 2
    print(f"{'stage':<{width}}" + "".join(f"{t:>32}" for t in runs))
    for stage in stages:
        cells = []
        for tree_runs in runs.values():
            got = []
            for run_ in tree_runs:
                row = {str(r[0]): r for r in run_["rows"]}.get(stage)
                got.append("-" if row is None else f"{row[1]:.2f} ({row[2]:.2f})")
            cells.append(" / ".join(got))
        print(f"{stage:<{width}}" + "".join(f"{c:>32}" for c in cells))
    totals = {t: [float(r["release_s"]) for r in tr] for t, tr in runs.items()}
    cells = [" / ".join(f"{v:.2f}" for v in vs) for vs in totals.values()]
    print(f"{'release (core + write)':<{width}}" + "".join(f"{c:>32}" for c in cells))
    mine, base = totals["this tree"], totals[name]
    ratios = " / ".join(f"{a / b:.3f}" for a, b in zip(mine, base, strict=True))
    print(f"ratio this tree / {name}: {ratios} (run by run; mean "
          f"{sum(mine) / sum(base):.3f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1e6", help="records (e.g. 1e6, 1e7)")
    ap.add_argument("--subjects", action="store_true", help="a subject id column")
    ap.add_argument("--keep", action="store_true", help="publish one attribute column")
    ap.add_argument("--out", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="toy size (CI)")
    ap.add_argument(
        "--lonlat", action="store_true", help="the points as lon/lat (a working UTM zone)"
    )
    ap.add_argument(
        "--default-heap",
        action="store_true",
        help="leave glibc's defaults (the geokanon command keeps freed memory for reuse: "
        "geokanon._heap)",
    )
    ap.add_argument("--baseline", default=None, help="git revision to run side by side")
    ap.add_argument("--baseline-src", default=None, help="a source tree to run side by side")
    ap.add_argument("--repeat", type=int, default=1, help="with a baseline: runs of each tree")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's output
    args = ap.parse_args()
    n = 20_000 if args.quick else int(float(args.n))
    if args.quick:
        args.subjects = args.keep = True
    if args.baseline or args.baseline_src:
        side_by_side(args, n)
        return
    heap = "glibc defaults" if args.default_heap else "kept, as the geokanon command"
    if not args.default_heap:
        try:
            from geokanon._heap import keep_freed_memory
        except ImportError:  # an older baseline: it had no such setting
            heap = "glibc defaults (this geokanon has no geokanon._heap)"
        else:
            keep_freed_memory()
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        rows = run(n, subjects=args.subjects, keep=args.keep, out_dir=Path(tmp), lonlat=args.lonlat)
    if args.json:
        import geokanon

        release_s = sum(r[1] for r in rows if r[0] in ("core", "write_release total"))
        print(json.dumps({"rows": rows, "cpu": cpu, "release_s": release_s, "heap": heap,
                          "geokanon": str(Path(geokanon.__file__).parent)}))  # fmt: skip
        return
    print(f"records {n:,}; subjects {'yes' if args.subjects else 'no'}; "
          f"kept column {'yes' if args.keep else 'no'}; lon/lat {'yes' if args.lonlat else 'no'}; "
          f"cores {os.cpu_count()}; "
          f"freed memory {heap}")  # fmt: skip
    print(f"{'stage':<22} {'seconds':>8} {'peak GB':>8} {'cpu s':>8}")
    for (name, sec, peak), used in zip(rows, cpu, strict=True):
        print(f"{name:<22} {sec:>8.2f} {peak:>8.2f} {used:>8.2f}")
    for name, mib in sizes:
        print(f"{name:<22} {mib:>8.1f}")


if __name__ == "__main__":
    main()

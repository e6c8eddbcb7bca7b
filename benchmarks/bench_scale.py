"""Scale: single machine against the Dask backend, up to 1e8 records never held whole.

Prints one table: records, backend, stage, seconds, peak memory (resident set of
this process and, for Dask, all its worker processes, sampled every 0.2 s),
records per second per core, and the scaling exponent against the previous size
(1.0 is linear). The data are clustered synthetic points at a constant density
(towns plus ~5 % rural scatter; the study area grows with the record count).
Dask partitions are *generated* inside the workers, partition by partition: the
driver never holds the records.

Usage::

    python benchmarks/bench_scale.py                 # 1e6, 1e7 single; 1e7 Dask
    python benchmarks/bench_scale.py --dask 1e7,1e8  # the national-scale run
    python benchmarks/bench_scale.py --quick         # toy size (CI)
    python benchmarks/bench_scale.py --single "" --core "" --dask "" \
        --full 1e7 --full-single 1e6              # the full release (files, verified)
    python benchmarks/bench_scale.py --single "" --core "" --dask "" \
        --full 1e7 --full-single 1e7 --partition 1000000 --repeat 3   # item 4, alternating

With ``--repeat R`` (R > 1), each size given to both ``--full`` and ``--full-single`` is
released R times on each backend, alternating (one machine in a fresh process, then Dask
on a local cluster started and warmed for that run and closed after it, so that the
one-machine run shares the machine with no idle workers and no heap left by a Dask run),
and a line per size gives the Dask / one machine ratio of each round and their mean: two
runs of one release differ by up to 15 % on a shared 2-core machine, more than the
difference the comparison is about.

The "full release" stage writes and verifies the whole release directory: on Dask
with :func:`geokanon.distributed.release_partitions` (partitions generated in the
workers, record and audit parts written by tasks, the partitioned verifier), on one
machine with :func:`geokanon.pipeline.release_points`. Its policy raises the caps
(tau 0.5, unit cap 1.0) so that the synthetic rural scatter never refuses the release.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

#: Records per square kilometre on average (the 1e7 set covers 300 km x 300 km).
DENSITY_PER_KM2 = 1e7 / 300.0**2


@dataclass(frozen=True)
class SyntheticPartitions:
    """``n`` clustered points in ``parts`` partitions, each generated on demand.

    Town centres, sizes and spreads depend only on ``(n, seed)``; partition ``i``
    draws its share of every town and of the rural scatter from its own stream,
    so a partition is the same whoever generates it, and no process holds more
    than one partition.
    """

    n: int
    parts: int
    seed: int = 0

    @property
    def extent_m(self) -> float:
        return 1000.0 * math.sqrt(self.n / DENSITY_PER_KM2)

    def _towns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, 0])
        n_towns = max(10, self.n // 2_000)
        e = self.extent_m
        centres = rng.uniform(0.02 * e, 0.98 * e, (n_towns, 2))
        weights = rng.pareto(1.2, n_towns) + 1.0
        weights /= weights.sum()
        spread = 150.0 + 40.0 * np.sqrt(weights * self.n * 0.95)
        return centres, weights, spread

    def __len__(self) -> int:
        return self.parts

    def size(self, i: int) -> int:
        return self.n // self.parts + (1 if i < self.n % self.parts else 0)

    def load(self, i: int) -> pd.DataFrame:
        centres, weights, spread = self._towns()
        rng = np.random.default_rng([self.seed, 1, i])
        m = self.size(i)
        n_rural = m // 20
        sizes = rng.multinomial(m - n_rural, weights)
        which = np.repeat(np.arange(weights.size), sizes)
        e = self.extent_m
        x = np.empty(m)
        y = np.empty(m)
        t = which.size
        x[:t] = centres[which, 0] + rng.normal(0.0, 1.0, t) * spread[which]
        y[:t] = centres[which, 1] + rng.normal(0.0, 1.0, t) * spread[which]
        x[t:] = rng.uniform(0, e, n_rural)
        y[t:] = rng.uniform(0, e, n_rural)
        np.clip(x, 0, e, out=x)
        np.clip(y, 0, e, out=y)
        # Administrative units: a grid of 10 km cells.
        unit = (x // 10_000).astype(np.int64) * 100_000 + (y // 10_000).astype(np.int64)
        return pd.DataFrame({"x": x, "y": y, "unit": unit})

    def whole(self) -> pd.DataFrame:
        """All partitions in one frame (single-machine runs only)."""
        return pd.concat([self.load(i) for i in range(self.parts)], ignore_index=True)


class PeakMemory:
    """Peak resident memory of this process and all its children, sampled in a thread.

    With :meth:`stage` called as the work moves on, the peaks are also kept per stage:
    the driver (this process), the workers (every child process, summed) and both
    together, each the largest sample taken while that stage was the current one, and
    the CPU seconds (user + system) the driver and the workers spent in the stage, and
    those of the driver's main thread ("main": its own steps, the serial part; the rest
    of the driver's is Dask's scheduler and messages).
    """

    def __init__(self, interval_s: float = 0.2) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval_s
        self.peak = 0
        self._current = "start"
        #: stage -> [driver peak, workers peak, total peak] in bytes, in stage order
        self.stages: dict[str, list[int]] = {}
        #: stage -> [driver CPU s, workers CPU s]
        self.cpu: dict[str, list[float]] = {}
        #: stage -> CPU s of the driver's main thread (its own work; the rest of the
        #: driver's is Dask's scheduler and messages)
        self.main: dict[str, float] = {}
        self._cpu_at = (0.0, 0.0)
        self._main_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def stage(self, name: str) -> None:
        """Charge the samples from now on to stage ``name``."""
        self._charge_cpu()
        with self._lock:
            self._current = name
            self.stages.setdefault(name, [0, 0, 0])
        self._record()

    def _cpu_now(self) -> tuple[float, float]:
        driver = workers = 0.0
        for p in [self._proc, *self._proc.children(recursive=True)]:
            try:
                t = p.cpu_times()
            except Exception:  # a process that just ended
                continue
            if p.pid == self._proc.pid:
                driver = t.user + t.system
            else:
                workers += t.user + t.system
        return driver, workers

    def _charge_cpu(self) -> None:
        main = time.thread_time()  # called on the main thread (stage changes, enter, exit)
        self.main[self._current] = self.main.get(self._current, 0.0) + main - self._main_at
        self._main_at = main
        now = self._cpu_now()
        spent = self.cpu.setdefault(self._current, [0.0, 0.0])
        spent[0] += max(0.0, now[0] - self._cpu_at[0])
        spent[1] += max(0.0, now[1] - self._cpu_at[1])
        self._cpu_at = now

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of the driver and the workers so far."""
        return sum(d + w for d, w in self.cpu.values())

    def _sample(self) -> tuple[int, int]:
        driver = workers = 0
        for p in [self._proc, *self._proc.children(recursive=True)]:
            try:
                rss = p.memory_info().rss
            except Exception:  # a process that just ended
                continue
            if p.pid == self._proc.pid:
                driver = rss
            else:
                workers += rss
        return driver, workers

    def _record(self) -> None:
        driver, workers = self._sample()
        with self._lock:
            self.peak = max(self.peak, driver + workers)
            top = self.stages.setdefault(self._current, [0, 0, 0])
            top[0] = max(top[0], driver)
            top[1] = max(top[1], workers)
            top[2] = max(top[2], driver + workers)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._record()
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakMemory:
        self._cpu_at = self._cpu_now()
        self._main_at = time.thread_time()
        self._record()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._record()
        self._charge_cpu()

    def print_stages(self, title: str) -> None:
        """Print the per-stage peaks (GB) recorded through :meth:`stage`."""
        print(f"  peak memory by stage, {title} (GB; the largest sample while the stage ran)")
        print(f"    {'driver':>7} {'workers':>8} {'total':>7} {'CPU s drv':>9} {'main':>6} "
              f"{'wrk':>7}  stage")  # fmt: skip
        for name, (driver, workers, total) in self.stages.items():
            c_d, c_w = self.cpu.get(name, [0.0, 0.0])
            print(
                f"    {driver / 2**30:7.2f} {workers / 2**30:8.2f} {total / 2**30:7.2f} "
                f"{c_d:9.1f} {self.main.get(name, 0.0):6.1f} {c_w:7.1f}  {name}"
            )


@dataclass
class Row:
    n: int
    backend: str
    stage: str
    seconds: float
    peak_gb: float
    cores: int
    note: str = ""

    @property
    def rate(self) -> float:
        return self.n / self.seconds / self.cores


def _sizes(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def run_single(n: int, policy: Any, core: bool) -> list[Row]:
    from geokanon.classify import classify

    src = SyntheticPartitions(n, max(1, n // 1_000_000))
    frame = src.whole()
    x = frame["x"].to_numpy()
    y = frame["y"].to_numpy()
    del frame
    rows = []
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        cls = classify(x, y, policy)
        dt = time.perf_counter() - t0
    sup = int((cls.labels == 3).sum())
    rows.append(Row(n, "single", "classify", dt, mem.peak / 2**30, os.cpu_count() or 1,
                    f"{sup:,} suppress"))  # fmt: skip
    if core:
        from geokanon.disposal import run_core

        with PeakMemory() as mem, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            res = run_core(x, y, policy, enforce_caps=False)
            dt = time.perf_counter() - t0
        rows.append(Row(n, "single", "release core", dt, mem.peak / 2**30, os.cpu_count() or 1,
                        f"{res.group_x.size:,} groups"))  # fmt: skip
    return rows


def run_dask(n: int, policy: Any, client: Any, workers: int, tile_m: float, parts: int) -> Row:
    from geokanon.distributed import Tiling, classify_partitions

    src = SyntheticPartitions(n, parts)
    tiling = Tiling.for_policy(policy, tile_m=tile_m)
    with tempfile.TemporaryDirectory(prefix="geokanon-bench-") as scratch:
        with PeakMemory() as mem, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            res = classify_partitions(src, policy, tiling=tiling, client=client,
                                      scratch_dir=scratch)  # fmt: skip
            dt = time.perf_counter() - t0
    note = f"{res.tiles} tiles, {parts} partitions, {res.counts['suppress']:,} suppress"
    return Row(n, f"dask x{workers}", "classify", dt, mem.peak / 2**30, workers, note)


def run_dask_core(n: int, policy: Any, client: Any, workers: int, tile_m: float) -> Row:
    from geokanon.distributed import Tiling, run_core_distributed

    frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
    with PeakMemory() as mem, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = run_core_distributed(
            frame["x"], frame["y"], policy, enforce_caps=False,
            tiling=Tiling.for_policy(policy, tile_m=tile_m), client=client,
        )  # fmt: skip
        dt = time.perf_counter() - t0
    return Row(n, f"dask x{workers}", "release core", dt, mem.peak / 2**30, workers,
               f"{res.group_x.size:,} groups")  # fmt: skip


def _full_policy(policy: Any) -> Any:
    import dataclasses

    return dataclasses.replace(policy, tau=0.5, unit_cap=1.0)


def _stage_printer(mem: PeakMemory, t0: float) -> Any:
    """A progress callback: each new stage (or step) starts a stage of ``mem``, printed."""
    last: list[str] = []

    def progress(stage: str, step: str | None = None, **_: Any) -> None:
        name = stage if step is None else f"{stage}: {step}"
        if last and last[-1] == name:
            return  # a done/total update of the current step
        last.append(name)
        mem.stage(name)
        print(f"    {time.perf_counter() - t0:7.1f} s  {name}", flush=True)

    return progress


def run_dask_full(
    n: int,
    policy: Any,
    client: Any,
    workers: int,
    tile_m: float,
    parts: int,
    stage_memory: bool = False,
) -> Row:
    from geokanon.distributed import Tiling, release_partitions
    from geokanon.release import ReleaseOptions

    src = SyntheticPartitions(n, parts)
    pol = _full_policy(policy)
    with tempfile.TemporaryDirectory(prefix="geokanon-bench-") as tmp:
        with PeakMemory() as mem, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            progress = _stage_printer(mem, t0)
            res = release_partitions(
                src, pol, os.path.join(tmp, "out"), ReleaseOptions(local_metres=True),
                tiling=Tiling.for_policy(pol, tile_m=tile_m),
                client=client, scratch_dir=tmp, check_determinism=False, progress=progress,
            )  # fmt: skip
            dt = time.perf_counter() - t0
            mem.stage("done")
        size = sum(
            os.path.getsize(os.path.join(d, f))
            for d, _, fs in os.walk(os.path.join(tmp, "out")) for f in fs
        )  # fmt: skip
    m = res.manifest
    ok = all(m["verification"].values())
    note = (f"{m['groups']:,} groups, {m['record_parts']} parts, {parts} partitions, "
            f"{size / 2**30:.2f} GB written, verified {'ok' if ok else 'FAILED'}, "
            f"{mem.cpu_seconds:,.0f} CPU s")  # fmt: skip
    if stage_memory:
        mem.print_stages(f"dask full release {n:,}")
    return Row(n, f"dask x{workers}", "full release", dt, mem.peak / 2**30, workers, note)


def run_single_full(n: int, policy: Any, stage_memory: bool = False) -> Row:
    from geokanon.io import table_from_frame
    from geokanon.pipeline import release_points
    from geokanon.release import ReleaseOptions

    frame = SyntheticPartitions(n, max(1, n // 1_000_000)).whole()
    frame["unit"] = frame["unit"].astype(str)
    pol = _full_policy(policy)
    with tempfile.TemporaryDirectory(prefix="geokanon-bench-") as tmp:
        with PeakMemory() as mem, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            progress = _stage_printer(mem, t0) if stage_memory else None
            table = table_from_frame(frame, unit="unit")
            local = ReleaseOptions(local_metres=True)  # synthetic x/y: metres, no CRS
            res = release_points(
                table, pol, os.path.join(tmp, "out"), local, check_determinism=False,
                progress=progress,
            )  # fmt: skip
            dt = time.perf_counter() - t0
            mem.stage("done")
    ok = all(res.manifest["verification"].values())
    note = (f"{res.manifest['groups']:,} groups, verified {'ok' if ok else 'FAILED'}, "
            f"{mem.cpu_seconds:,.0f} CPU s")  # fmt: skip
    if stage_memory:
        mem.print_stages(f"single full release {n:,}")
    return Row(n, "single", "full release", dt, mem.peak / 2**30, os.cpu_count() or 1, note)


def print_table(rows: list[Row]) -> None:
    print()
    print(f"{'records':>12} {'backend':<9} {'stage':<13} {'seconds':>8} {'peak GB':>8} "
          f"{'rec/s/core':>11} {'scaling':>8}  note")  # fmt: skip
    prev: dict[tuple[str, str], Row] = {}
    for r in rows:
        key = (r.backend, r.stage)
        scaling = ""
        if key in prev and prev[key].n != r.n:
            p = prev[key]
            scaling = f"{math.log(r.seconds / p.seconds) / math.log(r.n / p.n):.2f}"
        prev[key] = r
        print(f"{r.n:>12,} {r.backend:<9} {r.stage:<13} {r.seconds:>8.1f} {r.peak_gb:>8.2f} "
              f"{r.rate:>11,.0f} {scaling:>8}  {r.note}")  # fmt: skip
    print("scaling: exponent b in time ~ records^b against the previous size (1.00 = linear)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", default="1e6,1e7", help="single-machine sizes")
    ap.add_argument("--dask", default="1e7", help="Dask sizes (1e8: the national run)")
    ap.add_argument("--core", default="1e6", help="sizes for the release core, both backends")
    ap.add_argument("--full", default="", help="sizes for the full release on Dask")
    ap.add_argument("--full-single", default="", help="sizes for the full release, one machine")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="6GiB", help="per Dask worker")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--r-max", type=float, default=300.0)
    ap.add_argument("--tile", type=float, default=20_000.0, help="tile side, m")
    ap.add_argument("--partition", type=int, default=2_000_000, help="records per partition")
    ap.add_argument("--quick", action="store_true", help="toy sizes (CI)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="full releases of a size in both --full and --full-single: rounds, alternating",
    )
    ap.add_argument(
        "--stage-memory",
        action="store_true",
        help="print the full Dask release's peak memory per stage (driver, workers, total)",
    )
    ap.add_argument(
        "--default-heap",
        action="store_true",
        help="leave glibc's defaults in this process and the workers (the geokanon command "
        "and its local cluster keep freed memory for reuse: geokanon._heap)",
    )
    args = ap.parse_args()
    from geokanon._heap import keep_freed_memory

    heap = "glibc defaults" if args.default_heap else "kept for reuse, as the geokanon command"
    if not args.default_heap:
        keep_freed_memory()
    from geokanon.policy import OutlierPolicy

    policy = OutlierPolicy(k=args.k, r_max_m=args.r_max)
    single, dask_sizes, core = _sizes(args.single), _sizes(args.dask), _sizes(args.core)
    full, full_single = _sizes(args.full), _sizes(args.full_single)
    if args.quick:
        single, dask_sizes, core = [50_000], [50_000], [50_000]
        full, full_single = [50_000], [50_000]
        args.tile = 4 * policy.search_radius_m
    print(f"policy k={policy.k}, r_max={policy.r_max_m:g} m (halo {policy.search_radius_m:g} m); "
          f"tiles {args.tile:g} m; {DENSITY_PER_KM2:,.0f} records/km2; "
          f"cores {os.cpu_count()}; freed memory {heap}")  # fmt: skip
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    rows: list[Row] = []
    from geokanon.classify import classify

    classify(np.arange(100.0), np.zeros(100), policy)  # compile (or load) the kernels first
    paired = [n for n in full_single if n in full] if args.repeat > 1 else []
    full_single = [n for n in full_single if n not in paired]
    full = [n for n in full if n not in paired]
    ratios = {n: alternate_full(n, policy, args) for n in paired}
    for n in paired:
        rows += ratios[n][0]
    for n in single:
        rows += run_single(n, policy, core=n in core)
        print(f"  single {n:,}: {rows[-1].seconds:.1f} s", flush=True)
    for n in full_single:
        rows.append(run_single_full(n, policy, args.stage_memory))
        print(f"  single full release {n:,}: {rows[-1].seconds:.1f} s", flush=True)

    with warm_cluster(args, policy) as client:
        for n in core:
            rows.append(run_dask_core(n, policy, client, args.workers, args.tile))
            print(f"  dask core {n:,}: {rows[-1].seconds:.1f} s", flush=True)
        for n in dask_sizes:
            parts = max(args.workers, math.ceil(n / args.partition))
            rows.append(run_dask(n, policy, client, args.workers, args.tile, parts))
            print(f"  dask {n:,}: {rows[-1].seconds:.1f} s", flush=True)
        for n in full:
            parts = max(args.workers, math.ceil(n / args.partition))
            rows.append(
                run_dask_full(n, policy, client, args.workers, args.tile, parts, args.stage_memory)
            )
            print(f"  dask full release {n:,}: {rows[-1].seconds:.1f} s", flush=True)
    order = {("single", "classify"): 0, ("single", "release core"): 1}
    rows.sort(key=lambda r: (order.get((r.backend, r.stage), 2), r.stage, r.n))
    print_table(rows)
    for n, (_, each) in ratios.items():
        by_round = ", ".join(f"{r:.3f}" for r in each)
        print(f"full release {n:,}, Dask / one machine by round: {by_round}; "
              f"mean {sum(each) / len(each):.3f}")  # fmt: skip


@contextlib.contextmanager
def warm_cluster(args: argparse.Namespace, policy: Any) -> Iterator[Any]:
    """The library's own local cluster (one thread per worker, Dask's message log off),
    its workers warmed (numba caches loaded) so that the first run is not charged for it."""
    from geokanon.distributed import dask_client

    with dask_client(
        None,
        n_workers=args.workers,
        memory_limit=args.memory_limit,
        keep_freed_memory=not args.default_heap,
    ) as client:
        run_dask(20_000, policy, client, args.workers, args.tile, 2)
        yield client


def _single_full_fresh(n: int, policy: Any, stage_memory: bool, default_heap: bool) -> Row:
    """:func:`run_single_full` in a fresh process, its heap set as :func:`main` sets it."""
    if not default_heap:
        from geokanon._heap import keep_freed_memory

        keep_freed_memory()
    return run_single_full(n, policy, stage_memory)


def alternate_full(n: int, policy: Any, args: argparse.Namespace) -> tuple[list[Row], list[float]]:
    """``args.repeat`` rounds of the full release of ``n`` records: one machine, then Dask
    on a local cluster of its own (started, warmed, closed around the run); the rows and the
    Dask / one machine ratio of each round."""
    rows: list[Row] = []
    ratios: list[float] = []
    parts = max(args.workers, math.ceil(n / args.partition))
    spawn = multiprocessing.get_context("spawn")
    for i in range(args.repeat):
        # one machine in a fresh process (as the geokanon command runs): this process's heap
        # after a Dask run held 1 GB more at the next release's peak
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            single = pool.submit(
                _single_full_fresh, n, policy, args.stage_memory, args.default_heap
            ).result()
        print(f"  round {i + 1}: single full release {n:,}: {single.seconds:.1f} s", flush=True)
        with warm_cluster(args, policy) as client:
            dask = run_dask_full(
                n, policy, client, args.workers, args.tile, parts, args.stage_memory
            )
        print(f"  round {i + 1}: dask full release {n:,}: {dask.seconds:.1f} s", flush=True)
        rows += [single, dask]
        ratios.append(dask.seconds / single.seconds)
    return rows, ratios


if __name__ == "__main__":
    main()

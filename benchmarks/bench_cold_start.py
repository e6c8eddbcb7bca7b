"""First run on a machine: ``geokanon demo`` with numba's cache empty, then warm.

geokanon's kernels are numba functions compiled on first use and cached on disk. This
script runs the bundled demo twice per source tree in a subprocess, with
``NUMBA_CACHE_DIR`` (and Python's bytecode cache) pointed at a new empty directory: the
first run compiles every kernel it calls ("cold"), the second loads them ("warm"). The
difference is what a new user, a new version or a fresh CI machine pays once. It also
counts the compiled variants numba cached (one ``.nbc`` file per argument types: a
kernel called with a literal ``0`` and with an ``int64`` is compiled twice).

With ``--baseline REV`` the same is done for that git revision (extracted with ``git
archive`` to a temporary directory and imported from there), the trees alternating, so
both see the same machine.

Usage::

    python benchmarks/bench_cold_start.py
    python benchmarks/bench_cold_start.py --baseline 5fb7e44 --repeat 2
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _extract(rev: str, into: Path) -> Path:
    """The source tree of git revision ``rev`` under ``into``; returns its ``src``."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _demo(src: Path, cache: Path, out: Path) -> float:
    """Seconds for ``geokanon demo`` importing geokanon from ``src``, numba caching in
    ``cache``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "NUMBA_CACHE_DIR": str(cache / "numba"),
        "PYTHONPYCACHEPREFIX": str(cache / "pyc"),
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "geokanon", "--quiet", "demo", "--out", str(out), "--force"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"demo failed from {src}:\n{proc.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", metavar="REV", help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm pairs per tree")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="geokanon-cold-") as tmp_s:
        tmp = Path(tmp_s)
        trees = {"this tree": ROOT / "src"}
        if args.baseline:
            trees[args.baseline] = _extract(args.baseline, tmp / "baseline")
        rows: dict[str, list[tuple[float, float, int]]] = {name: [] for name in trees}
        for i in range(args.repeat):
            for name, src in trees.items():
                cache = tmp / f"cache-{i}-{name.replace(' ', '_')}"
                cold = _demo(src, cache, tmp / "out")
                warm = _demo(src, cache, tmp / "out")
                variants = sum(1 for _ in (cache / "numba").rglob("*.nbc"))
                rows[name].append((cold, warm, variants))
                print(f"  {name}: cold {cold:.1f} s, warm {warm:.1f} s", file=sys.stderr)
    print(f"{'tree':<12} {'cold s':>8} {'warm s':>8} {'compile s':>10} {'variants':>9}")
    for name, runs in rows.items():
        for cold, warm, variants in runs:
            print(f"{name:<12} {cold:8.1f} {warm:8.1f} {cold - warm:10.1f} {variants:9d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

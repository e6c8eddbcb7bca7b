"""Grouping time with few subjects and many records each (mobility data), issue 18 item 1.

Run from the repository root::

    python benchmarks/bench_few_subjects.py                       # 2e4 .. 1e6, 50 subjects
    python benchmarks/bench_few_subjects.py --sizes 2e4 1e5 --before-sizes 2e4
    python benchmarks/bench_few_subjects.py --before-src /work/main/src --markdown

Each subject's records are GPS-like tracks: fixes every ~5 m (plus 3 m noise) along
straight trips between hubs. Hubs sit on a square whose area grows with the number
of records (about 1,500 records per hub), so the density of records, and with it
the number of atoms within ``2 r_max`` of a leftover, is the same at every size:
near-linear growth is what a grouping without a step quadratic in the leftovers or
in one subject's records shows. Every trip joins two hubs at most 4 km apart, and
the subjects pick their hubs at random, so subjects meet at hubs and along shared
trips, as commuters do.

Only :func:`geokanon.grouping.group_records` is timed (k = 5, r_max = 500 m), each
size in a fresh process after a warm-up call on a tiny input (numba kernels load
from the cache or compile there). "before" runs the code found at ``--before-src``
(default: ``/work/main/src``, main's quadratic algorithm) at the small sizes given by
``--before-sizes`` only; "after" runs the code of this checkout. No timing decides a
test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def tracks(n: int, subjects: int = 50, seed: int = 0) -> tuple[NDArray[np.float64], ...]:
    """``n`` fixes of ``subjects`` people along trips between hubs (x, y in metres, subject)."""
    rng = np.random.default_rng(seed)
    n_hubs = max(4, n // 1500)
    side = 2000.0 * np.sqrt(n_hubs)
    hubs = rng.uniform(0.0, side, (n_hubs, 2))
    xs, ys, ss = [], [], []
    total = 0
    while total < n:
        s = int(rng.integers(subjects))
        a = hubs[int(rng.integers(n_hubs))]
        b = a + rng.uniform(-4000.0, 4000.0, 2)
        m = min(n - total, max(2, int(np.hypot(*(b - a)) / 5.0)))
        t = np.linspace(0.0, 1.0, m)
        xs.append(a[0] + t * (b[0] - a[0]) + rng.normal(0, 3.0, m))
        ys.append(a[1] + t * (b[1] - a[1]) + rng.normal(0, 3.0, m))
        ss.append(np.full(m, s, dtype=np.int64))
        total += m
    x = np.round(np.concatenate(xs), 1)
    y = np.round(np.concatenate(ys), 1)
    return x, y, np.concatenate(ss).astype(np.float64)


def _child(n: int, subjects: int, seed: int) -> None:
    """Time one grouping in this process and print a JSON line."""
    import time

    from geokanon.grouping import group_records
    from geokanon.policy import OutlierPolicy

    pol = OutlierPolicy(k=5, r_max_m=500.0)
    wx, wy, ws = tracks(2000, subjects, seed + 1)
    group_records(wx, wy, ws.astype(np.int64), pol)  # warm-up: numba cache / compile
    x, y, s = tracks(n, subjects, seed)
    t0 = time.perf_counter()
    g = group_records(x, y, s.astype(np.int64), pol)
    wall = time.perf_counter() - t0
    placed = float((g.group_id >= 0).mean())
    print(json.dumps({"wall": wall, "placed": placed, "groups": g.n_groups}))


def run(n: int, subjects: int, seed: int, src: Path, timeout: float) -> dict | None:
    """One size in a fresh process with ``src`` first on the path; None on timeout."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(n),
           "--subjects", str(subjects), "--seed", str(seed)]  # fmt: skip
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                             check=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_table(head: list[str], lines: list[list[str]], markdown: bool) -> None:
    """Print rows under a header, as a Markdown table or in right-aligned columns."""
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join("---" for _ in head) + " |")
        for r in lines:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
        print("  ".join(h.rjust(w[i]) for i, h in enumerate(head)))
        for r in lines:
            print("  ".join(v.rjust(w[i]) for i, v in enumerate(r)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[2e4, 1e5, 3e5, 1e6])
    ap.add_argument("--before-sizes", nargs="*", type=float, default=[2e4])
    ap.add_argument("--before-src", type=Path, default=Path("/work/main/src"))
    ap.add_argument("--subjects", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        _child(a.child, a.subjects, a.seed)
        return
    rows = []
    for n in (int(v) for v in a.sizes):
        before = run(n, a.subjects, a.seed, a.before_src, a.timeout) if n in {
            int(v) for v in a.before_sizes} else None  # fmt: skip
        after = run(n, a.subjects, a.seed, SRC, a.timeout)
        rows.append((n, before, after))

    def cell(r: dict | None, key: str, fmt: str) -> str:
        return "-" if r is None else format(r[key], fmt)

    head = ["N", "subjects", "before s", "after s", "after s per 1e5", "placed before",
            "placed after", "groups after"]  # fmt: skip
    lines = [
        [
            f"{n:.0e}",
            str(a.subjects),
            cell(b, "wall", ".2f"),
            cell(f, "wall", ".2f"),
            "-" if f is None else f"{f['wall'] / n * 1e5:.2f}",
            cell(b, "placed", ".4f"),
            cell(f, "placed", ".4f"),
            cell(f, "groups", "d"),
        ]
        for n, b, f in rows
    ]
    print_table(head, lines, a.markdown)


if __name__ == "__main__":
    main()

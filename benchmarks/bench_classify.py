"""Classification speed: geokanon against a bare k-d tree query and the design note's sketch.

Run from the repository root::

    python benchmarks/bench_classify.py                         # 1e5, 1e6, 1e7, no subjects
    python benchmarks/bench_classify.py --subjects              # also with a subject column
    python benchmarks/bench_classify.py --sizes 1e5,1e6 --k 5 --r-max 1000
    python benchmarks/bench_classify.py --quick                 # toy size, seconds (CI)
    python benchmarks/bench_classify.py --markdown              # the table as Markdown
    python benchmarks/bench_classify.py --cli --sizes 1e7       # the command line (issue 18)
    python benchmarks/bench_classify.py --cli --sizes 1e6 --baseline-src ../base/src

Data: :func:`benchmarks.synthetic.clustered_points` (towns plus ~5 % rural scatter,
3,000 units, seed 0). With ``--subjects`` a subject column is added: consecutive
records (so mostly within one town) are grouped into subjects of 1, 2 or 3 records
(uniformly), and the subject ids are a random permutation (int64).

Methods (one fresh Python process per size and method)
------------------------------------------------------
``bare cKDTree``
    ``scipy.spatial.cKDTree(np.column_stack((x, y))).query(pts, k=k, workers=-1)``:
    build plus query (the stacking of ``x, y`` included); the notes give the split.
    This is the reference of the ratio column.
``seed sketch``
    The design note's ``classify_outliers`` and ``apply_policy``, as written there:
    a single-threaded ``cKDTree.query(k=k)``, object arrays of label strings, and a
    per-unit loop with one boolean mask (``unit_ids == unit``) per unit. If the loop
    over units would take more than 10 minutes, only a sample of units is looped over
    and the loop time extrapolated (the notes say so; it did not happen here).
``geokanon``
    :func:`geokanon.classify.classify` (labels, isolation ratios) plus
    :func:`geokanon.classify.unit_table` (per-unit records, subjects, suppressed,
    share, worst first), without a subject column.
``geokanon + subjects``
    The same with the subject column (distinct-subject neighbours, distinct subjects
    per unit).

The command line (``--cli``)
----------------------------
A second table times whole processes on a Parquet file (x, y in EPSG:3035 metres, a
text unit column, an int64 subject column; written once per size, not timed):

``read + cKDTree script``
    A fresh ``python`` reading x and y with pyarrow, then the bare cKDTree build and
    query above (interpreter start and imports included). The reference of the ratio.
``geokanon classify (CLI)``
    ``python -m geokanon classify FILE --crs EPSG:3035 --unit unit --k K --r-max R
    --json`` (reading, checks, classification, unit table, the JSON on stdout).
``geokanon classify --subject (CLI)``
    The same with ``--subject subject`` (3 records per subject at most).

The methods run in turn, ``--repeat`` rounds, so all see the same load; the best
of each is reported with its ratio to the script's best. numba kernels are loaded
once on a tiny file first. ``--baseline-src DIR`` adds the same two CLI runs with
``PYTHONPATH=DIR`` (another checkout, e.g. the base of a change), in the same rounds.

Measurements
------------
Wall time: the best of up to ``--repeat`` runs; no further run is started once a
method has used 60 s. numba compilation is excluded: each geokanon process first
classifies a tiny input (which loads or compiles the kernels) and only then times.
Peak memory: the process's peak resident set size (``VmHWM`` from
``/proc/self/status``) over the timed runs, after resetting it (``clear_refs``)
once the data were generated; it therefore *includes* the input arrays (x, y,
unit codes, subjects), and the table also gives that resident size before the
call. Where ``VmHWM`` cannot be reset, ``getrusage(RUSAGE_SELF).ru_maxrss`` is
used instead (the note says so).

Correctness column: without subjects, geokanon's labels are compared with the
cKDTree rule (labels from the bare query's k-th column, the design note's
thresholds) on every record, and the isolation ratios bit for bit wherever the
distance is within ``generalise_ratio * r_max`` (beyond that geokanon reports
``inf`` by design). The seed sketch's string labels are compared the same way.
With subjects there is no k-d tree rule to compare with (a subject's own records
never count), so 2,000 sampled records are checked against an exact cKDTree
oracle that widens ``k`` until it has ``k-1`` distinct other subjects.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.synthetic import clustered_points  # noqa: E402

METHODS = ("ckdtree", "seed", "geokanon", "geokanon_subjects")
#: The bare read-plus-cKDTree script the command line is compared with (``--cli``).
BARE_SCRIPT = """
import sys
import numpy as np
import pyarrow.parquet as pq
from scipy.spatial import cKDTree
t = pq.read_table(sys.argv[1], columns=["x", "y"])
pts = np.column_stack((t["x"].to_numpy(), t["y"].to_numpy()))
d, _ = cKDTree(pts).query(pts, k=int(sys.argv[2]), workers=-1)
print(int((d[:, -1] > 4.0 * float(sys.argv[3])).sum()))
"""
LABEL = {
    "ckdtree": "bare cKDTree query",
    "seed": "seed sketch (1 thread, str labels, unit masks)",
    "geokanon": "geokanon classify + unit table",
    "geokanon_subjects": "geokanon + subjects",
}
#: No further run of a method is started once its runs have taken this long.
_REPEAT_BUDGET_S = 60.0
#: The seed sketch's per-unit loop is sampled only beyond this projected time.
_UNIT_LOOP_CAP_S = 600.0


# ----------------------------------------------------------------------------
# Data and memory
# ----------------------------------------------------------------------------


def make_subjects(n: int, seed: int = 1) -> np.ndarray:
    """Subject ids: consecutive records in subjects of 1-3 records, ids permuted."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, n)
    ids = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)[:n]
    return rng.permutation(int(ids[-1]) + 1)[ids].astype(np.int64)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kb("VmHWM") is not None


def _peak_mb(reset_ok: bool) -> float:
    if reset_ok:
        kb = _status_kb("VmHWM")
        if kb is not None:
            return kb / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ----------------------------------------------------------------------------
# The methods
# ----------------------------------------------------------------------------


def rule_labels(dk: np.ndarray, r_max: float, mr: float = 2.0, gr: float = 4.0) -> np.ndarray:
    """The design note's thresholds on the k-th k-d tree distance, as uint8 codes."""
    iota = dk / r_max
    return ((iota > 1.0).astype(np.uint8) + (iota > mr) + (iota > gr)).astype(np.uint8)


def run_ckdtree(x: np.ndarray, y: np.ndarray, k: int) -> tuple[np.ndarray, dict[str, float]]:
    from scipy.spatial import cKDTree

    t0 = time.perf_counter()
    pts = np.column_stack((x, y))
    tree = cKDTree(pts)
    t1 = time.perf_counter()
    d, _ = tree.query(pts, k=k, workers=-1)
    t2 = time.perf_counter()
    return d[:, -1].copy(), {"build_s": t1 - t0, "query_s": t2 - t1}


def run_seed(
    x: np.ndarray, y: np.ndarray, units: np.ndarray, k: int, r_max: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """``classify_outliers`` and ``apply_policy`` of the design note, unchanged in logic."""
    from scipy.spatial import cKDTree

    merge_ratio, generalise_ratio, max_share = 2.0, 4.0, 0.01
    t0 = time.perf_counter()
    points = np.column_stack((x, y))
    tree = cKDTree(points)
    dists, _ = tree.query(points, k=k)
    d_k = dists[:, -1]
    iota = d_k / r_max
    labels = np.full(len(points), "ok", dtype=object)
    labels[iota > 1.0] = "merge"
    labels[iota > merge_ratio] = "generalise"
    labels[iota > generalise_ratio] = "suppress"
    suppressed = labels == "suppress"
    share = suppressed.mean()
    t1 = time.perf_counter()
    per_unit: dict[str, float] = {}
    unique_units = np.unique(units)
    looped = 0
    loop_t0 = time.perf_counter()
    sampled = False
    for unit in unique_units:
        mask = units == unit
        per_unit[str(unit)] = float(suppressed[mask].mean())
        looped += 1
        if looped == 20 and unique_units.size > 40:
            spent = time.perf_counter() - loop_t0
            if spent / looped * unique_units.size > _UNIT_LOOP_CAP_S:
                sampled = True
                break
    loop_s = time.perf_counter() - loop_t0
    if sampled:
        loop_s = loop_s / looped * unique_units.size
    worst_unit = max(per_unit, key=per_unit.__getitem__) if per_unit else None
    _ = {
        "suppressed_share": float(share),
        "worst_unit": worst_unit,
        "passes_global_cap": bool(share <= max_share),
        "passes_unit_cap": all(v <= 0.10 for v in per_unit.values()),
    }
    codes = np.zeros(len(points), dtype=np.uint8)
    for code, text in enumerate(("ok", "merge", "generalise", "suppress")):
        codes[labels == text] = code
    info: dict[str, Any] = {
        "classify_s": t1 - t0,
        "unit_loop_s": loop_s,
        "units_looped": looped,
        "units": int(unique_units.size),
        "extrapolated": sampled,
        # The loop time is extrapolated when sampled: report it in the total.
        "total_s": (t1 - t0) + loop_s,
    }
    return codes, info


def run_geokanon(
    x: np.ndarray,
    y: np.ndarray,
    units: np.ndarray,
    names: np.ndarray,
    subjects: np.ndarray | None,
    k: int,
    r_max: float,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    from geokanon.classify import classify, unit_table
    from geokanon.policy import Label, OutlierPolicy

    policy = OutlierPolicy(k=k, r_max_m=r_max)
    t0 = time.perf_counter()
    cls = classify(x, y, policy, subjects=subjects)
    t1 = time.perf_counter()
    table = unit_table(cls.labels == Label.SUPPRESS, units, names, subjects)
    t2 = time.perf_counter()
    assert len(table) > 0
    return cls.labels, cls.iota_space, {"classify_s": t1 - t0, "unit_table_s": t2 - t1}


def subject_oracle_check(
    x: np.ndarray,
    y: np.ndarray,
    subjects: np.ndarray,
    iota_space: np.ndarray,
    k: int,
    r_max: float,
    sample: int = 2000,
) -> bool:
    """Exact distinct-subject (k-1)-th distance of sampled records, by a widening cKDTree."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(2)
    idx = rng.choice(x.size, size=min(sample, x.size), replace=False)
    pts = np.column_stack((x, y))
    tree = cKDTree(pts)
    max_d = 4.0 * r_max
    for i in idx:
        kk = 2 * k
        while True:
            kk = min(kk, x.size)
            d, j = tree.query(pts[i], k=kk)
            seen: dict[int, float] = {}
            for dist, jj in zip(np.atleast_1d(d), np.atleast_1d(j), strict=True):
                s = int(subjects[jj])
                if s != subjects[i] and s not in seen:
                    seen[s] = float(dist)
            vals = sorted(seen.values())
            if len(vals) >= k - 1 or kk == x.size or np.atleast_1d(d)[-1] > max_d:
                break
            kk *= 2
        dk = vals[k - 2] if len(vals) >= k - 1 else np.inf
        expected = dk / r_max if dk <= max_d else np.inf
        if iota_space[i] != expected:
            return False
    return True


def worker(args: argparse.Namespace) -> None:
    """Time one method at one size in this process; print one JSON line."""
    n = int(float(args.n))
    x, y, units = clustered_points(n)
    names = np.array([f"U{u:04d}" for u in range(int(units.max()) + 1)], dtype=object)
    subjects = make_subjects(n) if args.method == "geokanon_subjects" else None
    if args.method.startswith("geokanon"):
        # Load (or compile) the numba kernels on a tiny input: not timed.
        xs, ys, us = clustered_points(2000, seed=3)
        wn = np.array([f"U{u:04d}" for u in range(int(us.max()) + 1)], dtype=object)
        run_geokanon(xs, ys, us, wn, None, args.k, args.r_max)
        run_geokanon(xs, ys, us, wn, make_subjects(2000), args.k, args.r_max)
    rss_before = (_status_kb("VmRSS") or 0) / 1024.0
    reset_ok = _reset_peak()
    times: list[float] = []
    info: dict[str, Any] = {}
    labels: np.ndarray | None = None
    iota: np.ndarray | None = None
    dk: np.ndarray | None = None
    spent = 0.0
    while len(times) < args.repeat and (not times or spent < _REPEAT_BUDGET_S):
        t0 = time.perf_counter()
        if args.method == "ckdtree":
            dk, info = run_ckdtree(x, y, args.k)
        elif args.method == "seed":
            labels, info = run_seed(x, y, units, args.k, args.r_max)
        else:
            labels, iota, info = run_geokanon(x, y, units, names, subjects, args.k, args.r_max)
        wall = time.perf_counter() - t0
        if args.method == "seed":
            wall = float(info["total_s"])
        spent += wall
        if not times or wall < min(times):
            best_info = dict(info)
        times.append(wall)
    peak = _peak_mb(reset_ok)
    out = Path(args.out)
    check: bool | None = None
    if args.method == "ckdtree":
        assert dk is not None
        np.save(out / f"ckdtree_{n}.npy", dk)
    else:
        assert labels is not None
        np.save(out / f"{args.method}_{n}_labels.npy", labels)
        if iota is not None and subjects is None:
            np.save(out / f"{args.method}_{n}_iota.npy", iota)
        if subjects is not None and iota is not None:
            check = subject_oracle_check(x, y, subjects, iota, args.k, args.r_max)
    result = {
        "n": n,
        "method": args.method,
        "best_s": min(times),
        "runs": len(times),
        "peak_mb": peak,
        "rss_before_mb": rss_before,
        "peak_method": "VmHWM" if reset_ok else "ru_maxrss",
        "info": best_info,
        "check": check,
    }
    print("RESULT " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------
# The parent: one subprocess per (size, method), then the table
# ----------------------------------------------------------------------------


def _spawn(method: str, n: int, args: argparse.Namespace, out: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        method,
        "--n",
        str(n),
        "--k",
        str(args.k),
        "--r-max",
        str(args.r_max),
        "--repeat",
        str(args.repeat),
        "--out",
        out,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{method} at n={n} failed:\n{proc.stdout}\n{proc.stderr}")


def write_cli_input(n: int, path: Path) -> None:
    """The ``--cli`` input: clustered points in EPSG:3035 metres, text units, int64 subjects."""
    import pandas as pd

    x, y, units = clustered_points(n)
    names = np.array([f"U{u:04d}" for u in range(int(units.max()) + 1)], dtype=object)
    frame = pd.DataFrame(
        {"x": x + 4_000_000.0, "y": y + 3_000_000.0, "unit": names[units],
         "subject": make_subjects(n)}
    )  # fmt: skip
    frame.to_parquet(path, index=False)


def _cli_commands(
    path: Path, args: argparse.Namespace, baseline: str | None
) -> dict[str, tuple[list[str], str]]:
    """Per CLI method: the command and the PYTHONPATH it runs with."""
    own = str(ROOT / "src")
    classify = [
        *(sys.executable, "-m", "geokanon", "classify", str(path), "--crs", "EPSG:3035"),
        *("--unit", "unit", "--k", str(args.k), "--r-max", str(args.r_max), "--json"),
    ]
    script = [sys.executable, "-c", BARE_SCRIPT, str(path), str(args.k), str(args.r_max)]
    cmds = {
        "script": (script, own),
        "cli": (classify, own),
        "cli_subjects": ([*classify, "--subject", "subject"], own),
    }
    if baseline is not None:
        cmds["cli_baseline"] = (classify, baseline)
        cmds["cli_subjects_baseline"] = ([*classify, "--subject", "subject"], baseline)
    return cmds


CLI_LABEL = {
    "script": "read + cKDTree script",
    "cli": "geokanon classify (CLI)",
    "cli_subjects": "geokanon classify --subject (CLI)",
    "cli_baseline": "geokanon classify (CLI), baseline",
    "cli_subjects_baseline": "geokanon classify --subject (CLI), baseline",
}


def _run_cmd(cmd: list[str], pythonpath: str, numba_cache: str | None = None) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath
    if numba_cache is not None:  # the baseline's kernels cached here, not in its checkout
        env["NUMBA_CACHE_DIR"] = numba_cache
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False, env=env, cwd=ROOT)  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:5])} ... failed ({proc.returncode}):\n{proc.stderr}")
    return wall


def run_cli(sizes: list[int], args: argparse.Namespace, out: str) -> list[list[str]]:
    """The ``--cli`` table: whole processes, in turn, ``args.repeat`` rounds per size."""
    warm = Path(out) / "warm.parquet"
    write_cli_input(2000, warm)
    cache = str(Path(out) / "numba-baseline")
    for m, (cmd, pp) in _cli_commands(warm, args, args.baseline_src).items():
        _run_cmd(cmd, pp, cache if m.endswith("baseline") else None)  # kernels cached
    rows = []
    for n in sizes:
        path = Path(out) / f"cli_{n}.parquet"
        write_cli_input(n, path)
        cmds = _cli_commands(path, args, args.baseline_src)
        times: dict[str, list[float]] = {m: [] for m in cmds}
        load = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            for m, (cmd, pp) in cmds.items():
                times[m].append(_run_cmd(cmd, pp, cache if m.endswith("baseline") else None))
                print(f"#   n={_fmt_n(n)} {m}: {times[m][-1]:.2f} s", flush=True)
            load.append(os.getloadavg()[0])
        ref = min(times["script"])
        for m, ts in times.items():
            rows.append([_fmt_n(n), CLI_LABEL[m], f"{min(ts):.2f}", f"{min(ts) / ref:.3f}",
                         f"{len(ts)} runs: " + ", ".join(f"{t:.2f}" for t in ts)
                         + f"; load {min(load):.1f}-{max(load):.1f}"])  # fmt: skip
        path.unlink()
    return rows


CLI_HEADER = ["N", "method", "best wall s", "x read + cKDTree script", "notes"]


def _machine() -> str:
    import numba
    import scipy

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}){mem}; Python {platform.python_version()}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}, numba {numba.__version__} "
        f"({numba.config.NUMBA_NUM_THREADS} threads)"
    )


def _fmt_n(n: int) -> str:
    e = round(float(np.log10(n)))
    return f"1e{e}" if 10**e == n else f"{n:,}"


def _rows(results: list[dict[str, Any]], out: str, args: argparse.Namespace) -> list[list[str]]:
    rows = []
    for res in results:
        n = res["n"]
        ref = next(r for r in results if r["n"] == n and r["method"] == "ckdtree")
        ref_info = ref["info"]
        m = res["method"]
        info = res["info"]
        notes = ""
        check = ""
        if m == "ckdtree":
            notes = f"build {ref_info['build_s']:.2f} s + query {ref_info['query_s']:.2f} s"
            check = "reference"
        elif m == "seed":
            ext = " (extrapolated)" if info["extrapolated"] else ""
            notes = (
                f"classify {info['classify_s']:.2f} s + loop over {info['units']} "
                f"units {info['unit_loop_s']:.2f} s{ext}"
            )
        else:
            notes = f"classify {info['classify_s']:.2f} s + unit table {info['unit_table_s']:.3f} s"
        if m in ("seed", "geokanon"):
            dk = np.load(Path(out) / f"ckdtree_{n}.npy")
            expected = rule_labels(dk, args.r_max)
            labels = np.load(Path(out) / f"{m}_{n}_labels.npy")
            ok = bool(np.array_equal(labels, expected))
            if m == "geokanon":
                iota = np.load(Path(out) / f"{m}_{n}_iota.npy")
                near = dk <= 4.0 * args.r_max
                ok = ok and bool(
                    np.array_equal(iota[near], dk[near] / args.r_max)
                    and np.isinf(iota[~near]).all()
                )
                check = "yes: labels and iota" if ok else "NO"
            else:
                check = "yes: labels" if ok else "NO"
        elif m == "geokanon_subjects":
            check = "yes: 2,000-record oracle" if res["check"] else "NO"
        ratio = res["best_s"] / ref["best_s"]
        ratio_q = res["best_s"] / ref_info["query_s"]
        rows.append(
            [
                _fmt_n(n),
                LABEL[m],
                f"{res['best_s']:.3f}",
                f"{ratio:.3f}",
                f"{ratio_q:.3f}",
                f"{res['peak_mb']:.0f} ({res['rss_before_mb']:.0f})",
                check,
                f"best of {res['runs']}; {notes}",
            ]
        )
    return rows


HEADER = [
    "N",
    "method",
    "wall s",
    "x bare cKDTree",
    "x its query",
    "peak RSS MB (before)",
    "= cKDTree rule",
    "notes",
]


def _print_table(rows: list[list[str]], markdown: bool, header: list[str] = HEADER) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(" --- " for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e5,1e6,1e7", help="comma-separated N (default 1e5,1e6,1e7)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--r-max", type=float, default=1000.0)
    p.add_argument("--subjects", action="store_true", help="also run with a subject column")
    p.add_argument("--quick", action="store_true", help="a toy size (2e4) for CI, in seconds")
    p.add_argument("--repeat", type=int, default=3, help="runs per method (best is reported)")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--cli",
        action="store_true",
        help="time the command line against a read + cKDTree script instead",
    )
    p.add_argument("--baseline-src", help="with --cli: also time the CLI of this src directory")
    p.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--n", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.method = args.worker
        worker(args)
        return 0
    sizes = [20_000] if args.quick else [int(float(s)) for s in args.sizes.split(",")]
    if args.quick:
        args.repeat = min(args.repeat, 2)
    methods = [m for m in METHODS if args.subjects or m != "geokanon_subjects"]
    print(f"# machine: {_machine()}")
    print(f"# load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"# k={args.k}, r_max={args.r_max:g} m; numba compilation excluded (warm-up run first)")
    if args.cli:
        with tempfile.TemporaryDirectory(prefix="bench_classify_cli_") as out:
            cli_rows = run_cli(sizes, args, out)
        print(f"# load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        _print_table(cli_rows, args.markdown, CLI_HEADER)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_classify_") as out:
        for n in sizes:
            for m in methods:
                res = _spawn(m, n, args, out)
                results.append(res)
                print(
                    f"#   n={_fmt_n(n)} {m}: {res['best_s']:.3f} s, peak {res['peak_mb']:.0f} MB",
                    flush=True,
                )
        rows = _rows(results, out, args)
    print(f"# load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    _print_table(rows, args.markdown)
    failed = [r for r in rows if r[6] == "NO"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

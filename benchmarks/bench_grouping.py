"""Grouping quality benchmark: geokanon's core against MDAV, Mondrian and a quadtree.

Run from the repository root::

    python benchmarks/bench_grouping.py                  # issue 19's runs (below)
    python benchmarks/bench_grouping.py --dataset chorley
    python benchmarks/bench_grouping.py --dataset cities  # the six synthetic cities
    python benchmarks/bench_grouping.py --quick          # two small cities, a square (CI)
    python benchmarks/bench_grouping.py --all-records    # issue 3's table (below)

**Issue 19's comparison** (the default). geokanon's core runs on every record; the
records it places at group level (disposal ``grouped`` or ``merged``) are then grouped
by MDAV, Mondrian and the quadtree, *exactly those records*, k = 5, and give the
per-record ideal and, for uniform data, the hexagonal tessellation estimates
(:mod:`benchmarks.mdav` defines MDAV, the ideal and the tessellation). One table per
dataset: mean and p95 displacement, the share of groups wider than r_max (a member
farther than r_max from the group mean), the placed share (records at group level over
all records; the baselines group the same records), time, and geokanon's mean over
MDAV's against the issue's target: at most 0.85 on the clustered real data, at most
1.0 on the dense synthetic data. The placed share's floor is main's at d39bb7f
(:data:`BASE_PLACED`; on the cities and the square main placed every record, at every
size measured, 4,000 to 81,000). MDAV breaks ties by record index; a row gives its
mean over 8 shuffled record orders (min - max), which matters on tied data (Chorley).
Runs: dwellings at r_max 100 m and 300 m, Charleston and Chorley at 500 m, the six
cities of :mod:`benchmarks.cities` (5-NN median 10, 20, 30 m, uniform in blocks or at
addresses, 50,000 records each, r_max 250 m) and a uniform square (20,000 records,
one per 360 m^2, r_max 250 m). Chorley: ``spatstat_chorley/points.csv``, columns
``bng_e``, ``bng_n`` (metres, British National Grid), no units.

**Issue 3's table** (``--all-records``): the baselines on every record, against
Mondrian's targets, with geokanon's first-pass and disposal shares.

Mondrian and the quadtree (numba, no subjects: every record is its own subject)
--------------------------------------------------------------------------------
On every record (issue 3's setting) the definitions below reproduce the figures
quoted in issue 3 exactly (to the printed digit) on ``dwellings.csv`` (k=5,
r_max=100 m) and on Charleston ``population_points.csv`` (k=5, r_max=500 m).

**Mondrian** (strict median partitioning, LeFevre et al. 2006). A node is a set of
records. Its dimensions are ordered by range (``max - min``), the wider first
(ties: x first). For a dimension, the cut value is ``numpy.median`` of the node's
coordinates (the mean of the two middle values when the count is even); the left
half is the records *strictly below* it, the right half the rest (``>=``), so
records sharing the cut coordinate stay together. The cut is allowed when both
halves hold >= k records; if the wider dimension's cut is not allowed, the other
dimension's is tried; when neither is allowed the node is a leaf (a group).
Reproduces: dwellings 3.00 % of groups with a member beyond 100 m, mean
displacement 17.98 m; Charleston 22.90 % of groups beyond 500 m, 257.51 m.
Variants that do *not* reproduce the dwellings figures (Charleston has no tied
coordinates, so it cannot tell them apart): cutting at position ``n // 2`` of the
sorted order, splitting tied records (2.81 %, 17.37 m); ``<=`` median to the left
(3.02 %, 18.27 m); no fall-back to the other dimension (3.14 %, 18.46 m).

**Adaptive quadtree**. The root is the square with lower-left corner
``(min x, min y)`` and side ``max(range x, range y)``. A cell is split at its
centre into four half-open quadrants (a record on a mid-line goes to the upper or
right child, records on the root's far edge stay in the last quadrant) when every
*non-empty* child holds >= k records (empty children are allowed); otherwise it
is a leaf (a group). A cell whose records all share one coordinate is a leaf (it
cannot be split further). Reproduces dwellings: 29.58 % of *records* lie in a
group with a member beyond 100 m (5.14 % of groups), mean displacement 84.80 m.

**Figures** (the same for every method). Representative of a baseline group: the
mean of its members. Displacement: the distance from a record to its group's
published representative; mean and 95th percentile over the records published at
group level (for the baselines: all records; for geokanon: disposal ``grouped``
or ``merged``). "Groups beyond r_max": share of groups with at least one member
farther than r_max (strictly) from the representative; "records in such groups":
share of records at group level that belong to such a group. The issue's
Mondrian "3.0 %" and Charleston "22.9 %" are shares of groups; its quadtree
"29.6 %" is a share of records. Suppressed share: suppressed records over all
records; the first-pass suppress share is the share of records labelled
``suppress`` by the first classification. Exact ceiling: the share of records
labelled ``ok`` or ``merge`` for which some disc of radius r_max covers the record
and k-1 other records (``benchmarks/ceiling.py``, an exact angular sweep;
competition between groups ignored), the most "records at group level" can reach.
Time: wall clock of the grouping call
(geokanon: the whole core, ``run_core``: classify, group, dispose, fixed point)
after a warm-up run on a small input (JIT compilation is not timed). Peak memory:
the process's peak resident set during the call (``VmHWM`` after resetting it,
Linux; includes the input arrays).

geokanon is run with ``OutlierPolicy(k, r_max_m, unit_cap=1.0)`` (the per-unit cap
lifted, so the quality question stands alone). If ``geokanon.disposal.run_core``
cannot be imported the baselines are still printed and the geokanon column says
"geokanon core not available".
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import NDArray

try:
    from benchmarks.ceiling import group_feasible
except ImportError:  # run as a script: python benchmarks/bench_grouping.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.ceiling import group_feasible
from benchmarks.cities import CITIES, CITY_R_MAX_M, city_points, describe
from benchmarks.mdav import (
    hexagon_sample_mean_distance,
    mdav_groups,
    per_record_ideal,
    tessellation_estimate,
)
from benchmarks.synthetic import clustered_points

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
QUICK_N = 20_000
#: Synthetic data: side of the study area (the generator's default) and r_max.
SYNTHETIC_EXTENT_M = 300_000.0
SYNTHETIC_R_MAX_M = 500.0

#: dataset name -> (relative CSV path, x and y columns (metres), unit column or None,
#: default r_max in metres). Chorley's x, y are km; bng_e, bng_n the same in metres.
DATASETS: dict[str, tuple[str, str, str, str | None, float]] = {
    "dwellings": ("sdcspatial_dwellings/dwellings.csv", "x", "y", "gm_code", 100.0),
    "charleston": ("aquadtree_charleston/population_points.csv", "x", "y", "tract_id", 500.0),
    "chorley": ("spatstat_chorley/points.csv", "bng_e", "bng_n", None, 500.0),
}
#: Issue 19's runs: (dataset, r_max); cities and the uniform square follow.
ISSUE19_RUNS: tuple[tuple[str, float], ...] = (
    ("dwellings", 100.0),
    ("dwellings", 300.0),
    ("charleston", 500.0),
    ("chorley", 500.0),
)
#: Issue 19's target for geokanon's mean displacement over MDAV's on the same records.
RATIO_CLUSTERED = 0.85
RATIO_DENSE = 1.0
#: Records geokanon placed at group level on main at d39bb7f (issue 19: "the placed share
#: does not fall below today's"), per (dataset, r_max); the synthetic runs placed all.
BASE_PLACED: dict[tuple[str, float], int] = {
    ("dwellings", 100.0): 90_011,
    ("dwellings", 300.0): 90_567,
    ("charleston", 500.0): 49_253,
    ("chorley", 500.0): 973,
}
#: Cities per default run and per --quick run (records each).
CITY_N = 50_000
QUICK_CITY_N = 4_000
#: The uniform square: the issue's 20,000 points, at a density of one record per 360 m^2.
UNIFORM_N = 20_000
UNIFORM_M2_PER_RECORD = 360.0

#: Issue 3's reference figures for Mondrian's mean displacement (m), for the record.
ISSUE_MONDRIAN_MEAN_M = {"dwellings": 18.0, "charleston": 257.5}

#: Speed and memory targets of issue 3 (synthetic data): n -> (seconds, bytes or None).
SPEED_TARGETS: dict[int, tuple[float, float | None]] = {
    1_000_000: (10.0, None),
    10_000_000: (90.0, 4e9),
}


# --------------------------------------------------------------------------- baselines


@nb.njit(cache=True)
def _select(buf: NDArray[np.float64], m: int, kth: int) -> float:
    """The ``kth`` smallest of ``buf[:m]`` (reorders ``buf[:m]``; Hoare quickselect)."""
    lo = 0
    hi = m - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        a = buf[lo]
        b = buf[mid]
        c = buf[hi]
        pivot = max(min(a, b), min(max(a, b), c))  # median of three
        i = lo
        j = hi
        while i <= j:
            while buf[i] < pivot:
                i += 1
            while buf[j] > pivot:
                j -= 1
            if i <= j:
                t = buf[i]
                buf[i] = buf[j]
                buf[j] = t
                i += 1
                j -= 1
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            return buf[kth]
    return buf[kth]


@nb.njit(cache=True)
def _median_cut(
    key: NDArray[np.float64], lo: int, hi: int, buf: NDArray[np.float64]
) -> tuple[float, int]:
    """``numpy.median`` of ``key[lo:hi]`` and how many values lie strictly below it."""
    m = hi - lo
    for i in range(m):
        buf[i] = key[lo + i]
    half = m >> 1
    upper = _select(buf, m, half)
    if m & 1:
        med = upper
    else:
        lower = buf[0]
        for i in range(1, half):  # after selection buf[:half] holds the smaller values
            lower = max(lower, buf[i])
        med = (lower + upper) / 2.0
    c = 0
    for i in range(lo, hi):
        if key[i] < med:
            c += 1
    return med, c


@nb.njit(cache=True)
def _partition_below(
    key: NDArray[np.float64],
    other: NDArray[np.float64],
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    cut: float,
) -> None:
    """Reorder ``[lo, hi)`` of the three arrays so that ``key < cut`` comes first."""
    i = lo
    j = hi - 1
    while True:
        while i <= j and key[i] < cut:
            i += 1
        while i <= j and key[j] >= cut:
            j -= 1
        if i >= j:
            return
        key[i], key[j] = key[j], key[i]
        other[i], other[j] = other[j], other[i]
        perm[i], perm[j] = perm[j], perm[i]
        i += 1
        j -= 1


@nb.njit(cache=True)
def mondrian_groups(x: NDArray[np.float64], y: NDArray[np.float64], k: int) -> NDArray[np.int64]:
    """Group ids of strict median Mondrian leaves (see the module docstring).

    Parameters
    ----------
    x, y
        Coordinates in metres.
    k
        Minimum records per group.

    Returns
    -------
    numpy.ndarray
        ``int64`` group id per record, ``0 .. n_groups - 1``.
    """
    n = x.size
    # Coordinates travel with the permutation, so every node is a contiguous slice.
    px = x.copy()
    py = y.copy()
    perm = np.arange(n)
    buf = np.empty(n, dtype=np.float64)
    out = np.empty(n, dtype=np.int64)
    # Depth-first with an explicit stack; every split leaves >= k on each side.
    cap = n // max(k, 1) + 64
    st_lo = np.empty(cap, dtype=np.int64)
    st_hi = np.empty(cap, dtype=np.int64)
    st_lo[0] = 0
    st_hi[0] = n
    top = 1
    g = 0
    while top > 0:
        top -= 1
        lo = st_lo[top]
        hi = st_hi[top]
        m = hi - lo
        split = False
        if m >= 2 * k:
            x0 = np.inf
            x1 = -np.inf
            y0 = np.inf
            y1 = -np.inf
            for i in range(lo, hi):
                x0 = min(x0, px[i])
                x1 = max(x1, px[i])
                y0 = min(y0, py[i])
                y1 = max(y1, py[i])
            for attempt in range(2):
                use_x = (x1 - x0 >= y1 - y0) == (attempt == 0)
                key = px if use_x else py
                other = py if use_x else px
                med, c = _median_cut(key, lo, hi, buf)
                if c >= k and m - c >= k:
                    _partition_below(key, other, perm, lo, hi, med)
                    st_lo[top] = lo + c
                    st_hi[top] = hi
                    st_lo[top + 1] = lo
                    st_hi[top + 1] = lo + c
                    top += 2
                    split = True
                    break
        if not split:
            for i in range(lo, hi):
                out[perm[i]] = g
            g += 1
    return out


@nb.njit(cache=True)
def quadtree_groups(x: NDArray[np.float64], y: NDArray[np.float64], k: int) -> NDArray[np.int64]:
    """Group ids of the adaptive quadtree's leaves (see the module docstring).

    Parameters
    ----------
    x, y
        Coordinates in metres.
    k
        Minimum records in every non-empty child for a cell to be split.

    Returns
    -------
    numpy.ndarray
        ``int64`` group id per record, ``0 .. n_groups - 1``.
    """
    n = x.size
    perm = np.arange(n)
    scratch = np.empty(n, dtype=np.int64)
    quad = np.empty(n, dtype=np.int8)
    out = np.empty(n, dtype=np.int64)
    x0 = x.min()
    y0 = y.min()
    side0 = max(x.max() - x0, y.max() - y0)
    cap = 4 * 1100 + 64  # depth is bounded by float halving (~1075) below
    s_lo = np.empty(cap, dtype=np.int64)
    s_hi = np.empty(cap, dtype=np.int64)
    s_x = np.empty(cap, dtype=np.float64)
    s_y = np.empty(cap, dtype=np.float64)
    s_side = np.empty(cap, dtype=np.float64)
    s_lo[0] = 0
    s_hi[0] = n
    s_x[0] = x0
    s_y[0] = y0
    s_side[0] = side0
    top = 1
    g = 0
    cnt = np.zeros(4, dtype=np.int64)
    start = np.zeros(4, dtype=np.int64)
    while top > 0:
        top -= 1
        lo = s_lo[top]
        hi = s_hi[top]
        cx = s_x[top]
        cy = s_y[top]
        h = 0.5 * s_side[top]
        split = False
        if h > 0.0 and hi - lo >= k:
            mx = cx + h
            my = cy + h
            cnt[:] = 0
            for i in range(lo, hi):
                p = perm[i]
                q = (1 if x[p] >= mx else 0) + (2 if y[p] >= my else 0)
                quad[i] = q
                cnt[q] += 1
            ok = True
            nonempty = 0
            for q in range(4):
                if cnt[q] > 0:
                    nonempty += 1
                    if cnt[q] < k:
                        ok = False
            if ok and nonempty == 1:
                # One occupied child: split only if the records can still be told apart.
                p0 = perm[lo]
                same = True
                for i in range(lo + 1, hi):
                    p = perm[i]
                    if x[p] != x[p0] or y[p] != y[p0]:
                        same = False
                        break
                ok = not same
            if ok:
                split = True
                start[0] = lo
                for q in range(1, 4):
                    start[q] = start[q - 1] + cnt[q - 1]
                for i in range(lo, hi):
                    q = quad[i]
                    scratch[start[q]] = perm[i]
                    start[q] += 1
                perm[lo:hi] = scratch[lo:hi]
                b = lo
                for q in range(4):
                    if cnt[q] > 0:
                        s_lo[top] = b
                        s_hi[top] = b + cnt[q]
                        s_x[top] = cx + h * (q & 1)
                        s_y[top] = cy + h * (q >> 1)
                        s_side[top] = h
                        top += 1
                        b += cnt[q]
        if not split:
            for i in range(lo, hi):
                out[perm[i]] = g
            g += 1
    return out


def group_means(
    x: NDArray[np.float64], y: NDArray[np.float64], gid: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean position of each group (the baselines' representative).

    Parameters
    ----------
    x, y
        Coordinates.
    gid
        Group id per record, ``0 .. n_groups - 1``.

    Returns
    -------
    gx, gy
        Representative coordinates indexed by group id.
    """
    n_groups = int(gid.max()) + 1
    cnt = np.bincount(gid, minlength=n_groups).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        gx = np.bincount(gid, weights=x, minlength=n_groups) / cnt
        gy = np.bincount(gid, weights=y, minlength=n_groups) / cnt
    return gx, gy


# --------------------------------------------------------------------------- figures


@dataclass
class Figures:
    """Quality, cost and status of one method on one dataset (shares in [0, 1])."""

    method: str
    available: bool = True
    note: str = ""
    n: int = 0
    groups: int = 0
    smallest_group: int = 0
    share_groups_beyond: float = math.nan
    share_records_beyond: float = math.nan
    max_disp_m: float = math.nan
    mean_disp_m: float = math.nan
    p95_disp_m: float = math.nan
    share_group_level: float = math.nan
    share_first_ok_merge: float = math.nan
    share_ceiling: float = math.nan
    share_suppressed: float = math.nan
    share_first_suppress: float = math.nan
    share_merged: float = math.nan
    share_generalised: float = math.nan
    seconds: float = math.nan
    peak_bytes: float = math.nan
    extra: dict[str, Any] = field(default_factory=dict)


def group_figures(
    fig: Figures,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    gid: NDArray[np.int64],
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    r_max: float,
) -> None:
    """Fill the group-level figures of ``fig`` (records with ``gid < 0`` are not grouped).

    Parameters
    ----------
    fig
        Figures to fill in place.
    x, y
        Source coordinates of all records.
    gid
        Group id per record, ``-1`` for records not published at group level.
    gx, gy
        Published representatives indexed by group id.
    r_max
        Largest tolerated displacement in metres.
    """
    n = x.size
    at = gid >= 0
    g = gid[at]
    fig.n = n
    fig.share_group_level = float(at.sum()) / n if n else math.nan
    if g.size == 0:
        fig.groups = 0
        return
    used = np.unique(g)
    fig.groups = int(used.size)
    sizes = np.bincount(g, minlength=gx.size)
    fig.smallest_group = int(sizes[used].min())
    d = np.hypot(x[at] - gx[g], y[at] - gy[g])
    far = np.zeros(gx.size, dtype=bool)
    far[g[d > r_max]] = True
    fig.share_groups_beyond = float(far[used].sum()) / used.size
    fig.share_records_beyond = float(far[g].sum()) / g.size
    fig.max_disp_m = float(d.max())
    fig.mean_disp_m = float(d.mean())
    fig.p95_disp_m = float(np.percentile(d, 95))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return math.nan


def measured(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``call()`` and return its result, wall seconds and peak resident bytes.

    Parameters
    ----------
    call
        The work to measure.

    Returns
    -------
    result, seconds, peak_bytes
        ``peak_bytes`` is NaN where the peak cannot be reset (not Linux).
    """
    can = _reset_peak()
    t0 = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - t0
    return result, seconds, (_peak_bytes() if can else math.nan)


def run_baseline(
    name: str,
    fn: Callable[[NDArray[np.float64], NDArray[np.float64], int], NDArray[np.int64]],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    k: int,
    r_max: float,
) -> Figures:
    """Group with a baseline, publish group means, and measure.

    Parameters
    ----------
    name
        Column title.
    fn
        :func:`mondrian_groups` or :func:`quadtree_groups`.
    x, y
        Coordinates in metres.
    k
        Minimum group size.
    r_max
        Tolerated displacement in metres (only measured; the baselines ignore it).

    Returns
    -------
    Figures
    """
    fig = Figures(method=name)
    gid, fig.seconds, fig.peak_bytes = measured(lambda: fn(x, y, k))
    gx, gy = group_means(x, y, gid)
    group_figures(fig, x, y, gid, gx, gy, r_max)
    fig.share_suppressed = 0.0
    fig.share_first_suppress = math.nan
    return fig


# --------------------------------------------------------------------------- geokanon


def load_core() -> tuple[Callable[..., Any] | None, str]:
    """Import ``geokanon.disposal.run_core`` if it exists.

    Returns
    -------
    run_core, message
        ``run_core`` is ``None`` (with the reason) when it cannot be imported.
    """
    try:
        from geokanon.disposal import run_core
    except Exception as exc:  # ImportError, or a half-written module
        return None, f"geokanon core not available ({type(exc).__name__}: {exc})"
    return run_core, ""


def run_geokanon(
    run_core: Callable[..., Any] | None,
    why: str,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    unit_codes: NDArray[np.int64] | None,
    unit_names: list[str] | None,
    k: int,
    r_max: float,
) -> Figures:
    """Run geokanon's core with the unit cap lifted and measure it like the baselines.

    Parameters
    ----------
    run_core
        ``geokanon.disposal.run_core`` or ``None``.
    why
        Message shown when ``run_core`` is ``None``.
    x, y
        Coordinates in metres.
    unit_codes, unit_names
        Administrative unit per record (codes ``0 .. len(unit_names) - 1``).
    k, r_max
        Policy parameters.

    Returns
    -------
    Figures
        ``available`` is false (with a note) when the core is missing or raised.
    """
    fig = Figures(method="geokanon", n=x.size)
    if run_core is None:
        fig.available = False
        fig.note = why
        return fig
    from geokanon.policy import Disposal, Label, OutlierPolicy

    policy = OutlierPolicy(k=k, r_max_m=r_max, unit_cap=1.0)
    fig.extra["tau"] = policy.tau
    kwargs: dict[str, Any] = {"unit_codes": unit_codes, "unit_names": unit_names}
    if "enforce_caps" in inspect.signature(run_core).parameters:
        kwargs["enforce_caps"] = False  # measure the figures; tau is judged below
    t0 = time.perf_counter()
    try:
        res, fig.seconds, fig.peak_bytes = measured(lambda: run_core(x, y, policy, **kwargs))
    except Exception as exc:
        fig.available = False
        fig.note = (
            f"run_core raised {type(exc).__name__} after {time.perf_counter() - t0:.1f} s: {exc}"
        )
        traceback.print_exc(file=sys.stderr)
        passes = (getattr(exc, "figures", None) or {}).get("passes") or []
        if passes:  # what the first pass said, and how the passes went
            first_counts = passes[0]["labels"]
            fig.share_first_ok_merge = (first_counts["ok"] + first_counts["merge"]) / x.size
            fig.share_first_suppress = first_counts["suppress"] / x.size
            changed = ", ".join(str(p["changed"]) for p in passes)
            fig.note += f" (labels changed per pass: {changed})"
        return fig
    first = np.asarray(res.first_labels)
    disp = np.asarray(res.disposal)
    gid = np.asarray(res.group_id, dtype=np.int64)
    gx = np.asarray(res.group_x, dtype=np.float64)
    gy = np.asarray(res.group_y, dtype=np.float64)
    n = x.size
    group_figures(fig, x, y, gid, gx, gy, r_max)
    fig.extra["placed"] = gid >= 0
    fig.extra["gid"] = gid
    at_group = (disp == Disposal.GROUPED) | (disp == Disposal.MERGED)
    if not np.array_equal(at_group, gid >= 0):
        fig.note += "group_id >= 0 does not match disposal grouped/merged. "
    if gid.max(initial=-1) >= 0:
        on_member = (x == gx[np.maximum(gid, 0)]) & (y == gy[np.maximum(gid, 0)]) & (gid >= 0)
        if on_member.any():
            fig.note += f"{int(on_member.sum())} representatives equal a member's coordinate. "
    ok_merge = np.isin(first, (Label.OK, Label.MERGE))
    fig.share_first_ok_merge = float(ok_merge.sum()) / n
    # The exact ceiling: ok/merge records that some disc of radius r_max covers with
    # k-1 other records (competition between groups ignored; benchmarks/ceiling.py).
    fig.share_ceiling = float(group_feasible(x, y, ok_merge, k, r_max).sum()) / n
    fig.share_first_suppress = float((first == Label.SUPPRESS).sum()) / n
    fig.share_suppressed = float((disp == Disposal.SUPPRESSED).sum()) / n
    fig.share_merged = float((disp == Disposal.MERGED).sum()) / n
    fig.share_generalised = float((disp == Disposal.GENERALISED).sum()) / n
    verdict = getattr(res, "verdict", None)
    if verdict is not None:
        fig.extra["tau_share"] = float(verdict.suppressed_share)
        fig.extra["tau_met"] = bool(verdict.passes_global_cap)
    if hasattr(res, "passes"):
        fig.extra["passes"] = len(res.passes)
        fig.note += f"{len(res.passes)} classification passes. "
    fig.note = fig.note.strip()
    return fig


# --------------------------------------------------------------------------- table


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100.0 * v:.2f} %"


def _m(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.1f} m"


def _int(v: int) -> str:
    return f"{v:,}" if v else "-"


def _yes(v: bool) -> str:
    return "yes" if v else "no"


def _s(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f} s"


def _mb(v: float) -> str:
    return "-" if math.isnan(v) else f"{v / 1e6:,.0f} MB"


Row = tuple[str, Callable[[Figures], str], str, bool | None]


def table_rows(
    figs: list[Figures], k: int, r_max: float, n: int, synthetic: bool
) -> list[tuple[str, list[str], str, str]]:
    """The table: label, one cell per method, target, and geokanon's verdict.

    Parameters
    ----------
    figs
        Figures per method, geokanon last.
    k, r_max
        Policy parameters.
    n
        Number of records.
    synthetic
        Whether the speed and memory targets apply.

    Returns
    -------
    list of (label, cells, target, verdict)
    """
    mond = next((f for f in figs if f.method == "Mondrian"), None)
    gk = figs[-1]
    ok = gk.available and gk.method == "geokanon"
    tau = float(gk.extra.get("tau", 0.01))

    def verdict(cond: bool) -> str:
        return ("pass" if cond else "FAIL") if ok else "n/a"

    rows: list[tuple[str, list[str], str, str]] = []

    def add(label: str, fmt: Callable[[Figures], str], target: str = "", cond: Any = None) -> None:
        cells = [fmt(f) for f in figs]
        rows.append((label, cells, target, "" if cond is None else verdict(bool(cond))))

    add("groups", lambda f: _int(f.groups))
    add(
        "smallest group (records)",
        lambda f: _int(f.smallest_group),
        f">= {k}",
        gk.smallest_group >= k,
    )
    add(
        f"groups with a member beyond {r_max:g} m",
        lambda f: _pct(f.share_groups_beyond),
        "0",
        gk.share_groups_beyond == 0.0,
    )
    add("records in such groups", lambda f: _pct(f.share_records_beyond))
    add("max displacement", lambda f: _m(f.max_disp_m), f"<= {r_max:g} m", gk.max_disp_m <= r_max)
    mean_target = 0.7 * mond.mean_disp_m if mond is not None else math.nan
    add(
        "mean displacement (group level)",
        lambda f: _m(f.mean_disp_m),
        f"<= {mean_target:.1f} m (0.7x Mondrian)",
        gk.mean_disp_m <= mean_target,
    )
    add("p95 displacement (group level)", lambda f: _m(f.p95_disp_m))
    # Only records that some disc of radius r_max covers with k-1 others can be in a
    # group: at most the exact ceiling (below the first-pass ok or merge share).
    reach = gk.share_ceiling if not math.isnan(gk.share_ceiling) else gk.share_first_ok_merge
    add(
        "records at group level",
        lambda f: _pct(f.share_group_level),
        ">= 98 %" + (f" (at most {_pct(reach)} possible)" if reach < 0.98 else ""),
        gk.share_group_level >= 0.98,
    )
    add("merged (part of group level)", lambda f: _pct(f.share_merged))
    add("generalised", lambda f: _pct(f.share_generalised))
    add("first pass ok or merge", lambda f: _pct(f.share_first_ok_merge))
    add("exact ceiling (a disc of r_max holds k)", lambda f: _pct(f.share_ceiling))
    add("first pass suppress", lambda f: _pct(f.share_first_suppress))
    sup_target = 1.2 * gk.share_first_suppress
    add(
        "suppressed",
        lambda f: _pct(f.share_suppressed),
        f"<= {_pct(sup_target)} (1.2x first pass)",
        gk.share_suppressed <= sup_target + 1e-12,
    )
    add(
        "tau met",
        lambda f: "-" if math.isnan(f.share_suppressed) else _yes(f.share_suppressed <= tau),
        f"<= {100 * tau:g} %",
        gk.extra.get("tau_met", gk.share_suppressed <= tau),
    )
    t_target = SPEED_TARGETS.get(n) if synthetic else None
    add(
        "time",
        lambda f: _s(f.seconds),
        f"< {t_target[0]:g} s" if t_target else "",
        gk.seconds < t_target[0] if t_target else None,
    )
    mem_target = t_target[1] if t_target else None
    add(
        "peak memory (process)",
        lambda f: _mb(f.peak_bytes),
        f"< {mem_target / 1e9:g} GB" if mem_target else "",
        gk.peak_bytes < mem_target if mem_target else None,
    )
    return rows


def render(
    title: str,
    figs: list[Figures],
    rows: list[tuple[str, list[str], str, str]],
    markdown: bool,
) -> str:
    """Format the table as plain text or Markdown.

    Parameters
    ----------
    title
        Heading line.
    figs
        Figures per method (column titles).
    rows
        From :func:`table_rows`.
    markdown
        Markdown pipe table instead of aligned text.

    Returns
    -------
    str
    """
    head = ["figure", *[f.method for f in figs], "target (geokanon)", "geokanon"]
    body = [[label, *cells, target, v] for label, cells, target, v in rows]
    notes = [f"{f.method}: {f.note}" for f in figs if f.note]
    if markdown:
        lines = [f"### {title}", ""]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join([" --- "] + [" ---: "] * (len(head) - 1)) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in body]
        lines += [""] + [f"- {n}" for n in notes]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [title, "-" * len(title)]
    for r in [head, *body]:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    lines += notes
    return "\n".join(lines)


def run_ideal(x: NDArray[np.float64], y: NDArray[np.float64], k: int) -> Figures:
    """The per-record ideal (:func:`benchmarks.mdav.per_record_ideal`) as a column.

    Parameters
    ----------
    x, y
        Coordinates in metres.
    k
        Group size.

    Returns
    -------
    Figures
        Mean and p95 displacement and time only (it is no partition).
    """
    fig = Figures(method="per-record ideal", n=x.size)
    d, fig.seconds, fig.peak_bytes = measured(lambda: per_record_ideal(x, y, k))
    if d.size:
        fig.mean_disp_m = float(d.mean())
        fig.p95_disp_m = float(np.percentile(d, 95))
        fig.max_disp_m = float(d.max())
    return fig


def mdav_orders(
    fig: Figures, x: NDArray[np.float64], y: NDArray[np.float64], k: int, orders: int = 8
) -> None:
    """MDAV's mean displacement with the records shuffled, into ``fig.extra["orders"]``.

    MDAV breaks ties (equal distances) by record index, so on data with many shared or
    gridded coordinates its figure depends on the input's order; this measures how
    much (seeds ``1 .. orders``).

    Parameters
    ----------
    fig
        MDAV's figures.
    x, y
        The records it grouped.
    k
        Group size.
    orders
        Number of shuffled orders.
    """
    means = []
    for seed in range(1, orders + 1):
        perm = np.random.default_rng(seed).permutation(x.size)
        px = np.ascontiguousarray(x[perm])
        py = np.ascontiguousarray(y[perm])
        gid = mdav_groups(px, py, k)
        gx, gy = group_means(px, py, gid)
        means.append(float(np.hypot(px - gx[gid], py - gy[gid]).mean()) if x.size else math.nan)
    fig.extra["orders"] = means


def placed_rows(
    figs: list[Figures],
    k: int,
    r_max: float,
    n: int,
    target_ratio: float | None,
    base_placed: int | None = None,
) -> list[tuple[str, list[str], str, str]]:
    """Issue 19's table: label, one cell per method, target, and geokanon's verdict.

    Parameters
    ----------
    figs
        Figures per method, geokanon first.
    k, r_max
        Policy parameters.
    n
        Number of records of the dataset (the placed share's denominator).
    target_ratio
        Bound on geokanon's mean displacement over MDAV's (``None``: no target).
    base_placed
        Records main placed at d39bb7f (the placed share's floor), if known.

    Returns
    -------
    list of (label, cells, target, verdict)
    """
    gk = figs[0]
    mdav = next((f for f in figs if f.method == "MDAV"), None)
    ok = gk.available and gk.method == "geokanon"
    rows: list[tuple[str, list[str], str, str]] = []

    def add(label: str, fmt: Callable[[Figures], str], target: str = "", cond: Any = None) -> None:
        cells = [fmt(f) for f in figs]
        v = "" if cond is None else (("pass" if cond else "FAIL") if ok else "n/a")
        rows.append((label, cells, target, v))

    add("mean displacement", lambda f: _m(f.mean_disp_m))

    def spread(f: Figures) -> str:
        o = f.extra.get("orders")
        return f"{min(o):.1f} - {max(o):.1f} m" if o else ""

    add(
        f"the same, records shuffled ({len(mdav.extra.get('orders', [])) if mdav else 0} orders)",
        spread,
    )
    add("p95 displacement", lambda f: _m(f.p95_disp_m))
    add("max displacement", lambda f: _m(f.max_disp_m), f"<= {r_max:g} m", gk.max_disp_m <= r_max)
    add(
        f"groups wider than r_max ({r_max:g} m)",
        lambda f: _pct(f.share_groups_beyond),
        "0",
        gk.share_groups_beyond == 0.0,
    )
    add("records in such groups", lambda f: _pct(f.share_records_beyond))
    add("groups", lambda f: _int(f.groups))
    add(
        "smallest group (records)",
        lambda f: _int(f.smallest_group),
        f">= {k}",
        gk.smallest_group >= k,
    )
    floor = f">= {_pct(base_placed / n)} (main d39bb7f)" if base_placed is not None else ""
    add(
        "placed share (records at group level)",
        lambda f: _pct(f.n / n if f.n else math.nan),
        floor,
        None if base_placed is None else gk.n >= base_placed,
    )
    add("time", lambda f: _s(f.seconds))
    ratio = gk.mean_disp_m / mdav.mean_disp_m if mdav is not None and ok else math.nan
    orders = mdav.extra.get("orders") if mdav is not None else None
    target = f"<= {target_ratio:g}" if target_ratio is not None else ""
    cells = [f"{ratio:.3f}" if not math.isnan(ratio) else "-"] + [""] * (len(figs) - 1)
    verdict = ""
    if target_ratio is not None:
        verdict = "n/a" if math.isnan(ratio) else ("pass" if ratio <= target_ratio else "FAIL")
    rows.append(("mean displacement, geokanon / MDAV", cells, target, verdict))
    if orders and ok:
        lo, hi = gk.mean_disp_m / max(orders), gk.mean_disp_m / min(orders)
        rows.append(
            (
                "the same against MDAV shuffled",
                [f"{lo:.3f} - {hi:.3f}"] + [""] * (len(figs) - 1),
                "",
                "",
            )
        )
    return rows


def bench_placed(ds: Dataset, k: int, r_max: float, markdown: bool, skip_core: bool) -> str:
    """Issue 19's comparison on one dataset: the baselines on geokanon's placed records.

    geokanon's core runs on every record; the records it places at group level
    (disposal ``grouped`` or ``merged``) are then grouped by MDAV, Mondrian and the
    quadtree, and give the per-record ideal (and, for uniform data, the tessellation
    estimate at the dataset's density). Without the core (or when it raises) the
    baselines group every record.

    Parameters
    ----------
    ds
        The input.
    k, r_max
        Policy parameters.
    markdown
        Markdown output.
    skip_core
        Do not run geokanon (baselines on every record).

    Returns
    -------
    str
    """
    run_core, why = (None, "skipped (--baselines-only)") if skip_core else load_core()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    version = core_version()  # before the run: the code imported is the code on disk now
    warm_up(run_core, k)
    gk = run_geokanon(run_core, why, ds.x, ds.y, ds.unit_codes, ds.unit_names, k, r_max)
    placed = gk.extra.get("placed")
    if placed is None:
        placed = np.ones(ds.x.size, dtype=bool)
    else:
        gk.n = int(placed.sum())  # the placed share's numerator
    x = np.ascontiguousarray(ds.x[placed])
    y = np.ascontiguousarray(ds.y[placed])
    figs = [gk]
    if "gid" in gk.extra:
        # geokanon's own groups with their mean published (no snap, no re-centring): the
        # grouping's share of the displacement, apart from the representation's.
        gid = np.unique(gk.extra["gid"][placed], return_inverse=True)[1].astype(np.int64)
        own = Figures(method="geokanon groups, mean")
        gx, gy = group_means(x, y, gid)
        group_figures(own, x, y, gid, gx, gy, r_max)
        figs.append(own)
    figs += [
        run_baseline("MDAV", mdav_groups, x, y, k, r_max),
        run_baseline("Mondrian", mondrian_groups, x, y, k, r_max),
        run_baseline("quadtree", quadtree_groups, x, y, k, r_max),
        run_ideal(x, y, k),
    ]
    mdav_orders(next(f for f in figs if f.method == "MDAV"), x, y, k)
    if ds.density is not None:
        # The placed records' density: the dataset's, scaled by the placed share.
        density = ds.density * x.size / ds.x.size
        tess = Figures(method="hex tessellation", n=x.size)
        tess.mean_disp_m = tessellation_estimate(density, k)
        figs.append(tess)
        tess = Figures(method="hex, k points' mean", n=x.size)
        tess.mean_disp_m = hexagon_sample_mean_distance(k / density, k)
        figs.append(tess)
    base = BASE_PLACED.get((ds.name, r_max))
    if base is None and ds.target_ratio == RATIO_DENSE and k == 5:
        base = ds.x.size  # the cities and the square: main placed every record
    rows = placed_rows(figs, k, r_max, ds.x.size, ds.target_ratio, base)
    if len(figs) > 1 and figs[1].method == "geokanon groups, mean":
        figs[1].note = "not a release: the mean is a member's coordinate or the exact centroid"
    which = (
        f"baselines on the {x.size:,} records geokanon placed"
        if "placed" in gk.extra
        else "baselines on every record (no geokanon run)"
    )
    title = (
        f"{ds.name}: n={ds.x.size:,}, k={k}, r_max={r_max:g} m, {which} "
        f"({os.cpu_count()} CPUs, load average {load:.1f} at the start)"
    )
    if run_core is not None:
        gk.note = (gk.note + f" geokanon at {version} (at the start).").strip()
    text = render(title, figs, rows, markdown)
    if ds.info:
        text += ("\n- " if markdown else "\n") + f"data: {ds.info}"
    return text


# --------------------------------------------------------------------------- data


@dataclass
class Dataset:
    """Coordinates, units and parameters of one benchmark input."""

    name: str
    x: NDArray[np.float64]
    y: NDArray[np.float64]
    unit_codes: NDArray[np.int64] | None
    unit_names: list[str] | None
    r_max: float
    #: Records per m^2 where the data are uniform (the tessellation estimate), else None.
    density: float | None = None
    #: Issue 19's bound on geokanon's mean displacement over MDAV's (None: no target).
    target_ratio: float | None = None
    #: A line describing the data, printed under the table.
    info: str = ""


def load_dataset(name: str, data_dir: Path, n: int) -> Dataset | None:
    """Read a real dataset or generate a synthetic one.

    Parameters
    ----------
    name
        ``dwellings``, ``charleston``, ``chorley``, ``synthetic``, ``uniform`` or
        ``city-<median 5-NN m>-<uniform|addresses>`` (:mod:`benchmarks.cities`).
    data_dir
        Directory holding the shared datasets.
    n
        Size of a synthetic set.

    Returns
    -------
    Dataset or None
        ``None`` (after a message) when the data file is absent.
    """
    if name == "synthetic":
        # Below 1e6 the study area shrinks with sqrt(n), so that the density (and the
        # share of outliers) of a toy run resembles the 1e6 run's.
        extent = SYNTHETIC_EXTENT_M * min(1.0, math.sqrt(n / 1e6))
        x, y, units = clustered_points(n, seed=0, extent_m=extent)
        codes, uniq = _factorize(units)
        return Dataset(
            f"synthetic n={n:,}", x, y, codes, [f"u{u}" for u in uniq], SYNTHETIC_R_MAX_M
        )
    if name == "uniform":
        side = math.sqrt(n * UNIFORM_M2_PER_RECORD)
        rng = np.random.default_rng(0)
        x = rng.uniform(0.0, side, n)
        y = rng.uniform(0.0, side, n)
        return Dataset(
            f"uniform square n={n:,}",
            x,
            y,
            None,
            None,
            CITY_R_MAX_M,
            density=1.0 / UNIFORM_M2_PER_RECORD,
            target_ratio=RATIO_DENSE,
            info=f"uniform in a {side:,.0f} m square; {describe(x, y)}",
        )
    if name.startswith("city-"):
        _, nn5, layout = name.split("-")
        x, y, units, density = city_points(n, float(nn5), layout, seed=0)
        codes, uniq = _factorize(units)
        return Dataset(
            f"city {layout} 5-NN {nn5} m n={n:,}",
            x,
            y,
            codes,
            [f"d{u}" for u in uniq],
            CITY_R_MAX_M,
            density=density if layout == "uniform" else None,
            target_ratio=RATIO_DENSE,
            info=f"{describe(x, y)}; {density * 1e6:,.0f} records per km^2 of block",
        )
    import pandas as pd

    rel, xcol, ycol, unit_col, r_max = DATASETS[name]
    path = data_dir / rel
    if not path.is_file():
        print(f"skipping {name}: {path} not found (pass --data-dir)")
        return None
    cols = [xcol, ycol] + ([unit_col] if unit_col else [])
    df = pd.read_csv(path, usecols=cols, dtype={unit_col: str} if unit_col else None)
    codes, names = None, None
    if unit_col:
        codes, uniq = _factorize(df[unit_col].to_numpy())
        names = [str(u) for u in uniq]
    # Writable copies: numba compiles read-only arrays (pandas views) separately.
    x = df[xcol].to_numpy(np.float64, copy=True)
    y = df[ycol].to_numpy(np.float64, copy=True)
    return Dataset(
        name, x, y, codes, names, r_max, target_ratio=RATIO_CLUSTERED, info=describe(x, y)
    )


def _factorize(values: Any) -> tuple[NDArray[np.int64], list[Any]]:
    uniq, codes = np.unique(np.asarray(values), return_inverse=True)
    return codes.astype(np.int64).ravel(), list(uniq)


# --------------------------------------------------------------------------- main


def warm_up(run_core: Callable[..., Any] | None, k: int) -> None:
    """Compile the numba kernels (baselines and geokanon) on a small input."""
    x, y, units = clustered_points(4_000, seed=1)
    mondrian_groups(x, y, k)
    quadtree_groups(x, y, k)
    mdav_groups(x, y, k)
    if run_core is not None:
        from geokanon.policy import OutlierPolicy

        try:
            codes, uniq = _factorize(units)
            run_core(
                x,
                y,
                OutlierPolicy(k=k, r_max_m=250.0, unit_cap=1.0),
                unit_codes=codes,
                unit_names=[f"u{u}" for u in uniq],
            )
        except Exception:
            pass  # the timed run reports the error


def core_version() -> str:
    """The repository commit the geokanon column ran on, and whether ``src`` had edits."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown version"
    return f"commit {head}" + (" with uncommitted changes in src/" if dirty else "")


def bench(ds: Dataset, k: int, r_max: float, markdown: bool, skip_core: bool) -> str:
    """Run every method on one dataset and return the formatted table.

    Parameters
    ----------
    ds
        The input.
    k, r_max
        Policy parameters.
    markdown
        Markdown output.
    skip_core
        Do not run geokanon (baselines only).

    Returns
    -------
    str
    """
    run_core, why = (None, "skipped (--baselines-only)") if skip_core else load_core()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    version = core_version()  # before the run: the code imported is the code on disk now
    warm_up(run_core, k)
    figs = [
        run_baseline("Mondrian", mondrian_groups, ds.x, ds.y, k, r_max),
        run_baseline("quadtree", quadtree_groups, ds.x, ds.y, k, r_max),
        run_geokanon(run_core, why, ds.x, ds.y, ds.unit_codes, ds.unit_names, k, r_max),
    ]
    synthetic = ds.name.startswith("synthetic")
    rows = table_rows(figs, k, r_max, ds.x.size, synthetic)
    title = (
        f"{ds.name}: n={ds.x.size:,}, k={k}, r_max={r_max:g} m, unit_cap=1.0 "
        f"({os.cpu_count()} CPUs, load average {load:.1f} at the start)"
    )
    if run_core is not None:
        figs[-1].note = (figs[-1].note + f" geokanon at {version} (at the start).").strip()
    return render(title, figs, rows, markdown)


def _dataset_name(value: str) -> str:
    """``--dataset``: a known name or ``city-<metres>-<layout>``."""
    import re

    fixed = ("dwellings", "charleston", "chorley", "synthetic", "uniform", "cities")
    if value in fixed or re.fullmatch(r"city-\d+(\.\d+)?-(uniform|addresses)", value):
        return value
    raise argparse.ArgumentTypeError(f"unknown dataset {value!r}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point.

    Parameters
    ----------
    argv
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit code (0).
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--dataset",
        type=_dataset_name,
        help="dwellings, charleston, chorley, synthetic, uniform, cities (all six) or one "
        "city, city-<median 5-NN m>-<uniform|addresses> (default: issue 19's runs, then "
        "the cities and the uniform square)",
    )
    p.add_argument("--n", type=float, help="synthetic size (default 1e6; cities 5e4)")
    p.add_argument("--quick", action="store_true", help="two small cities and a square (CI)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--r-max", type=float, help="metres (default: per dataset)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--baselines-only", action="store_true", help="do not run geokanon")
    p.add_argument(
        "--all-records",
        action="store_true",
        help="issue 3's table: the baselines on every record, against Mondrian's targets",
    )
    args = p.parse_args(argv)
    cities = [f"city-{d:g}-{lay}" for d, lay in CITIES]
    runs: list[tuple[str, float | None, int]]  # (dataset, r_max or default, n)
    if args.quick:
        n = int(args.n) if args.n else QUICK_CITY_N
        runs = [("city-20-uniform", None, n), ("city-20-addresses", None, n), ("uniform", None, n)]
    elif args.dataset == "cities":
        runs = [(c, None, int(args.n) if args.n else CITY_N) for c in cities]
    elif args.dataset:
        default_n = {"synthetic": 1_000_000, "uniform": UNIFORM_N}.get(args.dataset, CITY_N)
        runs = [(args.dataset, None, int(args.n) if args.n else default_n)]
    elif args.all_records:
        runs = [("dwellings", None, 0), ("charleston", None, 0)]
    else:
        runs = [(name, r, 0) for name, r in ISSUE19_RUNS]
        runs += [(c, None, CITY_N) for c in cities] + [("uniform", None, UNIFORM_N)]
    for name, r_default, n in runs:
        ds = load_dataset(name, args.data_dir, n)
        if ds is None:
            continue
        r_max = args.r_max if args.r_max is not None else (r_default or ds.r_max)
        run = bench if args.all_records else bench_placed
        print(run(ds, args.k, r_max, args.markdown, args.baselines_only), flush=True)
        print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())

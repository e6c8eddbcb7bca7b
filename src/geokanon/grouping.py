"""k-anonymous groups whose members all lie within r_max of a snapped representative.

A *group* is published as one representative point. It must hold at least ``k``
distinct subjects, and every member must lie within ``r_max`` (inclusive) of the
published representative, which the rule of ``docs/release-format.md`` places
(:func:`settle_representatives`): the point nearest the group's record-weighted
centroid, within r_max of every member, of a lattice whose step follows the group's
spread (never coarser than ``policy.snap_step_m``), never a member's own coordinate
nor the centroid (nor within a relative 1e-9 of it, which the verifier cannot tell
apart). While groups are formed, their points are kept on the coarsest lattice (step
``policy.snap_step_m``), which every finer one contains.

The grouping works on *atoms*, a subject's records at one place, so that those
records are always disposed of together:

1. Atoms are ordered along a Hilbert curve (ties broken by subject and
   coordinates, so the input's row order never matters).
2. An optimal 1-D partition into runs of ``k .. 2k-1`` atoms minimises the sum
   of squared distances to each run's centroid (dynamic programming, after
   Ghinita et al. 2007). Hilbert jumps are expensive, so runs rarely span them.
3. Every run is checked exactly: distinct subjects, snapped representative,
   every member within r_max. A run that fails is retried around its minimum
   enclosing circle; what still fails is released into a leftover pool.
4. Leftover atoms join the nearest group whose disc can be re-centred to cover
   them and all its members; the rest try to form new groups among themselves,
   then with atoms that groups of more than k subjects can spare.
5. For each atom still left, an angular sweep finds the disc through it that
   covers the most atoms near it (the hard records at sparse edges need a disc
   centred between them and a cluster, not on them); a group is formed there
   with free atoms, spare atoms, and if need be atoms of groups that then fall
   below k, whose other members must find another group. A plan is carried out
   only when it places more records than it displaces.
   Whatever remains cannot be published at group level and is escalated by the
   caller.
6. A local search (:func:`_improve`) moves an atom to a neighbouring group, or swaps
   two atoms of neighbouring groups, when that lowers the records' summed distance
   to their groups' centroids and both groups keep k subjects and a covering point.
   It sweeps fixed pieces of the curve in parallel (the atoms whose groups all lie in
   one piece), then the atoms between pieces, so the groups never depend on the
   number of threads.
   Then pairs of neighbouring groups are re-cut in two where that lowers the same sum,
   under the same checks (:mod:`geokanon._recut`), and one sweep of the local search
   runs near the groups they changed. Last, groups of 2k atoms or more are cut in two,
   and pairs of 3k or more in three, where that lowers the sum (:mod:`geokanon._split`:
   where records are sparse, one group more costs less).
7. Every group's representative is placed by the rule (:func:`settle_representatives`),
   from its final members.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon.neighbours import (
    CROWDED_PAIRS,
    CROWDED_RUN,
    cell_values,
    cells_around,
    face_distance,
    in_runs_above,
    pack_key,
    run_pairs_above,
    sorted_unique,
    stable_argsort,
)
from geokanon.policy import OutlierPolicy

if TYPE_CHECKING:  # scipy.spatial (0.2 s to import) only where a tree is built
    from scipy.spatial import cKDTree

#: A compiled kernel's integer or flag argument: a Python value, or a numpy scalar
#: (``np.int64(0)``, ``np.bool_(True)``). Compiled callers pass the numpy scalar where
#: the value is a constant: numba types a literal ``0`` or ``True`` as a type of its own
#: and compiles the callee once more for it (5 compiles of :func:`_sweep_piece`, ~5 s
#: each, on a first run), while ``np.int64(0)`` is an ``int64`` like any other.
KernelInt: TypeAlias = int | np.int64
KernelBool: TypeAlias = bool | np.bool_

__all__ = [
    "Grouping",
    "group_records",
    "hilbert_keys",
    "repair_groups",
    "representative_step",
    "settle_representatives",
    "snap",
]

_HILBERT_BITS = 21
#: Cost of an infeasible run in the 1-D partition, per record, in units of r_max squared.
PENALTY_FACTOR = 1.0
#: Offset of the snap grid, in steps (a representative is never a short decimal).
OFFSET = 0.0381966011250105


def hilbert_keys(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.int64]:
    """Hilbert-curve index of every point on a ``2**21`` grid over the bounding square.

    Examples
    --------
    >>> import numpy as np
    >>> h = hilbert_keys(np.array([0.0, 0.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0]))
    >>> h.argsort().tolist()
    [0, 1, 2, 3]
    """
    n = x.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    x0, y0 = float(x.min()), float(y.min())
    span = max(float(x.max()) - x0, float(y.max()) - y0, 1e-9)
    return _hilbert(
        np.ascontiguousarray(x), np.ascontiguousarray(y), x0, y0, span, _HILBERT_BITS,
        _HILBERT_STEP[0], _HILBERT_STEP[1], _HILBERT_CHUNK[0], _HILBERT_CHUNK[1],
    )  # fmt: skip


def _hilbert_tables(width: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The Hilbert index of ``width`` levels at once, by table.

    The classic algorithm (quadrant of the top bits; then, in the lower-left and
    lower-right quadrants, the cell's coordinates are reflected and swapped) reads
    the remaining bits through a state: whether x and y are swapped and whether each
    is reflected. For every state and ``width`` bits of x and of y (highest first) the
    tables hold the ``2 * width`` bits of the index and the state after them.
    """
    size = 1 << width
    digits = np.zeros((8, size, size), dtype=np.int64)
    after = np.zeros((8, size, size), dtype=np.int64)
    for state in range(8):
        for bx in range(size):
            for by in range(size):
                swap, fx, fy = state >> 2 & 1, state >> 1 & 1, state & 1
                d = 0
                for level in range(width - 1, -1, -1):
                    ox, oy = bx >> level & 1, by >> level & 1
                    rx = (oy if swap else ox) ^ fx
                    ry = (ox if swap else oy) ^ fy
                    d = 4 * d + ((3 * rx) ^ ry)
                    if ry == 0:
                        if rx == 1:  # reflect both
                            fx, fy = fx ^ 1, fy ^ 1
                        swap, fx, fy = swap ^ 1, fy, fx
                digits[state, bx, by] = d
                after[state, bx, by] = swap << 2 | fx << 1 | fy
    return digits, after


#: One level, and four levels, of the Hilbert index at a time.
_HILBERT_STEP = _hilbert_tables(1)
_HILBERT_CHUNK = _hilbert_tables(4)


@nb.njit(cache=True, inline="always")
def _hilbert_index(
    ix: int,
    iy: int,
    bits: int,
    step_d: NDArray[np.int64],
    step_s: NDArray[np.int64],
    chunk_d: NDArray[np.int64],
    chunk_s: NDArray[np.int64],
) -> int:
    """Hilbert index of cell (ix, iy) of a ``2**bits`` grid: the top ``bits % 4`` levels
    one at a time, then four at a time."""
    head = bits % 4
    d = 0
    state = 0
    for level in range(bits - 1, bits - 1 - head, -1):
        bx = (ix >> level) & 1
        by = (iy >> level) & 1
        d = 4 * d + step_d[state, bx, by]
        state = step_s[state, bx, by]
    for c in range((bits - head) // 4 - 1, -1, -1):
        bx = (ix >> (4 * c)) & 15
        by = (iy >> (4 * c)) & 15
        d = 256 * d + chunk_d[state, bx, by]
        state = chunk_s[state, bx, by]
    return d


@nb.njit(cache=True, parallel=True)
def _hilbert(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    x0: float,
    y0: float,
    span: float,
    bits: int,
    step_d: NDArray[np.int64],
    step_s: NDArray[np.int64],
    chunk_d: NDArray[np.int64],
    chunk_s: NDArray[np.int64],
) -> NDArray[np.int64]:
    side = (1 << bits) - 1
    out = np.empty(x.size, np.int64)
    for i in nb.prange(x.size):
        ix = min(int((x[i] - x0) / span * side), side)
        iy = min(int((y[i] - y0) / span * side), side)
        out[i] = _hilbert_index(ix, iy, bits, step_d, step_s, chunk_d, chunk_s)
    return out


@nb.njit(cache=True)
def _hilbert_cells(
    ix: NDArray[np.int64],
    iy: NDArray[np.int64],
    bits: int,
    step_d: NDArray[np.int64],
    step_s: NDArray[np.int64],
    chunk_d: NDArray[np.int64],
    chunk_s: NDArray[np.int64],
) -> NDArray[np.int64]:
    """:func:`_hilbert_index` of cells given by their integer coordinates (for tests)."""
    out = np.empty(ix.size, np.int64)
    for i in range(ix.size):
        out[i] = _hilbert_index(ix[i], iy[i], bits, step_d, step_s, chunk_d, chunk_s)
    return out


def snap(v: NDArray[np.float64] | float, step: float) -> NDArray[np.float64]:
    """Snap coordinates to the centre of their cell on the representative grid.

    Cell centres sit at ``(j + 0.5 + OFFSET) * step``: the small irrational-looking
    offset keeps a snapped representative off any source coordinate stored with a
    few decimals (integer metres, centimetres), so that no published point is a
    record's location.

    Examples
    --------
    >>> snap(12.0, 5.0).item() == (2 + 0.5 + OFFSET) * 5.0
    True
    """
    return (np.floor(np.asarray(v, dtype=np.float64) / step) + 0.5 + OFFSET) * step


#: Run ends whose candidate runs :func:`_partition` costs at once (in parallel) before
#: its serial recurrence takes them (the cuts do not depend on it; ``hi`` costs of 8
#: bytes per position held).
PARTITION_BLOCK = 1 << 18


@nb.njit(cache=True)
def _partition(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    subj: NDArray[np.int64],
    lo: int,
    hi: int,
    k: int,
    r_eff: float,
    block: int = PARTITION_BLOCK,
) -> NDArray[np.int64]:
    """Optimal cut points of a sequence into runs of lo..hi items.

    The cost of a run is its weighted sum of squared distances to its centroid,
    plus a penalty far larger than any such sum when the run cannot be a group
    (fewer than ``k`` distinct subjects, or a member farther than ``r_eff`` from
    the centroid). The dynamic programme therefore first minimises the number of
    infeasible runs, then the squared displacement. Sums are taken in local
    coordinates of each run, so precision does not degrade with the extent.

    A run's cost depends on its items only: the costs of the runs ending in a block
    of ``block`` positions are computed first, in parallel (:func:`_run_costs`), then
    the recurrence takes the block's positions in order (the cuts do not depend on
    ``block``).

    Returns run start indices (plus n at the end). Where the sequence is too short
    to split, it is one run.
    """
    n = x.size
    inf = np.inf
    penalty = PENALTY_FACTOR * r_eff * r_eff
    f = np.full(n + 1, inf)
    back = np.full(n + 1, -1, np.int64)
    f[0] = 0.0
    costs = np.empty((min(block, n), hi))
    for i0 in range(1, n + 1, block):
        i1 = min(n + 1, i0 + block)
        _run_costs(x, y, w, subj, lo, hi, k, r_eff, penalty, i0, i1, costs)
        for i in range(i0, i1):
            for length in range(lo, hi + 1):
                j = i - length
                if j < 0:
                    break
                if f[j] == inf:
                    continue
                cost = costs[i - i0, length - 1]
                if f[j] + cost < f[i]:
                    f[i] = f[j] + cost
                    back[i] = j
    if n == 0:
        return np.zeros(1, np.int64)
    if f[n] == inf:
        out = np.empty(2, np.int64)
        out[0] = 0
        out[1] = n
        return out
    cuts = []
    i = n
    while i > 0:
        cuts.append(i)
        i = back[i]
    cuts.append(0)
    res = np.empty(len(cuts), np.int64)
    for t in range(len(cuts)):
        res[t] = cuts[len(cuts) - 1 - t]
    return res


@nb.njit(cache=True, parallel=True)
def _run_costs(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    subj: NDArray[np.int64],
    lo: int,
    hi: int,
    k: int,
    r_eff: float,
    penalty: float,
    i0: int,
    i1: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """``out[i - i0, length - 1]``: the cost in :func:`_partition` of the run of ``length``
    items ending before item i, for i in ``[i0, i1)`` and length in ``[lo, hi]`` (runs
    that would start before the first item are not written). Each run on its own."""
    for i in nb.prange(i0, i1):
        ox = x[i - 1]
        oy = y[i - 1]
        sw = 0.0
        sx = 0.0
        sy = 0.0
        sq = 0.0
        distinct = 0
        for length in range(1, hi + 1):
            j = i - length
            if j < 0:
                break
            dx = x[j] - ox
            dy = y[j] - oy
            sw += w[j]
            sx += w[j] * dx
            sy += w[j] * dy
            sq += w[j] * (dx * dx + dy * dy)
            seen = False
            for t in range(j + 1, i):
                if subj[t] == subj[j]:
                    seen = True
                    break
            if not seen:
                distinct += 1
            if length < lo:
                continue
            mx = sx / sw
            my = sy / sw
            cost = sq - sw * (mx * mx + my * my)
            if cost < 0.0:
                cost = 0.0
            feasible = distinct >= k
            if feasible:
                for t in range(j, i):
                    ex = x[t] - ox - mx
                    ey = y[t] - oy - my
                    if ex * ex + ey * ey > r_eff * r_eff:
                        feasible = False
                        break
            if not feasible:
                cost += penalty * sw
            out[i - i0, length - 1] = cost


@nb.njit(cache=True)
def _check_runs(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    subj: NDArray[np.int64],
    starts: NDArray[np.int64],
    k: int,
    r_max: float,
    step: float,
    rep_x: NDArray[np.float64],
    rep_y: NDArray[np.float64],
    ok: NDArray[np.bool_],
) -> None:
    """For every run: snapped weighted centroid, exact coverage check, distinct subjects."""
    for g in range(starts.size - 1):
        a = starts[g]
        b = starts[g + 1]
        # Distinct subjects (runs are short: quadratic is fine).
        distinct = 0
        for i in range(a, b):
            seen = False
            for j in range(a, i):
                if subj[j] == subj[i]:
                    seen = True
                    break
            if not seen:
                distinct += 1
        sw = 0.0
        mx = 0.0
        my = 0.0
        for i in range(a, b):
            sw += w[i]
            mx += w[i] * (x[i] - x[a])
            my += w[i] * (y[i] - y[a])
        px = (np.floor((x[a] + mx / sw) / step) + 0.5 + OFFSET) * step
        py = (np.floor((y[a] + my / sw) / step) + 0.5 + OFFSET) * step
        # Never a member's own coordinate: step off it.
        for _ in range(4):
            clash = False
            for i in range(a, b):
                if x[i] == px and y[i] == py:
                    clash = True
                    break
            if not clash:
                break
            px += step
        good = distinct >= k
        if good:
            for i in range(a, b):
                dx = x[i] - px
                dy = y[i] - py
                if math.sqrt(dx * dx + dy * dy) > r_max:
                    good = False
                    break
            for i in range(a, b):
                if x[i] == px and y[i] == py:
                    good = False
        rep_x[g] = px
        rep_y[g] = py
        ok[g] = good


def _covering_rep(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    w: NDArray[np.float64],
    r_max: float,
    step: float,
    avoid: tuple[float, float] | None = None,
) -> tuple[float, float] | None:
    """A snapped representative within r_max of every point, not equal to any, or None.

    Tries the snap cells around the weighted centroid, then (only if those fail)
    around the centre of the minimum enclosing circle; every candidate is checked
    exactly on the snapped point.
    """
    ax_, ay_ = avoid if avoid is not None else (np.nan, np.nan)
    ok, qx, qy = _covering_rep_nb(
        np.ascontiguousarray(px, dtype=np.float64),
        np.ascontiguousarray(py, dtype=np.float64),
        np.ascontiguousarray(w, dtype=np.float64),
        r_max,
        step,
        ax_,
        ay_,
    )
    return (qx, qy) if ok else None


@nb.njit(cache=True)
def _covering_rep_nb(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    w: NDArray[np.float64],
    r_max: float,
    step: float,
    avoid_x: float,
    avoid_y: float,
) -> tuple[bool, float, float]:
    """:func:`_covering_rep` in numba (it is called for every leftover, often)."""
    sw = 0.0
    sx = 0.0
    sy = 0.0
    for i in range(px.size):
        sw += w[i]
        sx += w[i] * px[i]
        sy += w[i] * py[i]
    ok, qx, qy = _try_cells(px, py, sx / sw, sy / sw, r_max, step, avoid_x, avoid_y)
    if ok:
        return ok, qx, qy
    if _wider_than(px, py, 2.0 * r_max * (1.0 + 1e-9) + 1e-6):
        return False, 0.0, 0.0  # no disc of radius r_max holds them: spare the circle
    # The circle of the hull's vertices is the points' circle; Welzl's incremental form,
    # in the order the points come, is cubic on a long track, not on its few vertices.
    h = _hull_vertices(px, py)
    mx, my, mr = _min_enclosing_circle(px[h], py[h])
    if mr > r_max:
        return False, 0.0, 0.0
    return _try_cells(px, py, mx, my, r_max, step, avoid_x, avoid_y)


@nb.njit(cache=True)
def _hull_vertices(px: NDArray[np.float64], py: NDArray[np.float64]) -> NDArray[np.int64]:
    """Indices of the convex hull's vertices (Andrew's monotone chain), in input order.

    Points on an edge are dropped; with fewer than 3 distinct points or all of them on
    a line, the extreme ones remain.
    """
    n = px.size
    if n <= 3:
        return np.arange(n)
    o = np.argsort(py, kind="mergesort")
    o = o[np.argsort(px[o], kind="mergesort")]
    chain = np.empty(2 * n, np.int64)
    t = 0
    for half in range(2):
        start = t
        for u in range(n):
            i = o[u] if half == 0 else o[n - 1 - u]
            while t >= start + 2:
                a = chain[t - 2]
                b = chain[t - 1]
                cross = (px[b] - px[a]) * (py[i] - py[a]) - (py[b] - py[a]) * (px[i] - px[a])
                if cross > 0:
                    break
                t -= 1
            chain[t] = i
            t += 1
        t -= 1  # the last point of each half starts the other
    keep = np.zeros(n, np.bool_)
    for u in range(t):
        keep[chain[u]] = True
    return np.flatnonzero(keep)


@nb.njit(cache=True)
def _wider_than(px: NDArray[np.float64], py: NDArray[np.float64], width: float) -> bool:
    """Whether the points spread wider than ``width`` along one of 8 directions.

    Their widths along unit vectors every 22.5 degrees are at least 0.98 of their
    diameter, so a set that passes has a diameter below ``width / 0.98``; one that
    fails has a diameter above ``width`` and fits in no disc of diameter ``width``.
    O(n), where the minimum enclosing circle, in the order the points come, can cost
    far more on the long sets of few subjects.
    """
    for e in range(8):
        c = math.cos(e * math.pi / 8)
        s = math.sin(e * math.pi / 8)
        lo = math.inf
        hi = -math.inf
        for i in range(px.size):
            v = px[i] * c + py[i] * s
            lo = min(lo, v)
            hi = max(hi, v)
        if hi - lo > width:
            return True
    return False


@nb.njit(cache=True)
def _try_cells(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    cx: float,
    cy: float,
    r_max: float,
    step: float,
    avoid_x: float,
    avoid_y: float,
) -> tuple[bool, float, float]:
    """The nearest of the 4x4 snap-cell centres around (cx, cy) that covers every point.

    The centres are tried nearest first (ties: row-major from the lower left), each
    found by a scan of those not tried yet: the first or second one usually covers
    the points, so the 16 are not sorted (nor any array allocated)."""
    sx0 = (math.floor(cx / step) + 0.5 + OFFSET) * step
    sy0 = (math.floor(cy / step) + 0.5 + OFFSET) * step
    tried = 0  # bit t: centre t (i = t // 4 - 1, j = t % 4 - 1) was tried
    for _ in range(16):
        o = -1
        best = 0.0
        for t in range(16):
            if (tried >> t) & 1:
                continue
            d = (sx0 + (t // 4 - 1) * step - cx) ** 2 + (sy0 + (t % 4 - 1) * step - cy) ** 2
            if o < 0 or d < best:
                o = t
                best = d
        tried |= 1 << o
        qx = sx0 + (o // 4 - 1) * step
        qy = sy0 + (o % 4 - 1) * step
        if qx == avoid_x and qy == avoid_y:
            continue
        good = True
        for m in range(px.size):
            dx = px[m] - qx
            dy = py[m] - qy
            if math.sqrt(dx * dx + dy * dy) > r_max or (px[m] == qx and py[m] == qy):
                good = False
                break
        if good:
            return True, qx, qy
    return False, 0.0, 0.0


@nb.njit(cache=True)
def _min_enclosing_circle(
    px: NDArray[np.float64], py: NDArray[np.float64]
) -> tuple[float, float, float]:
    """Minimum enclosing circle (Welzl's incremental form, deterministic order)."""
    n = px.size
    cx, cy, r = px[0], py[0], 0.0
    for i in range(1, n):
        if math.hypot(px[i] - cx, py[i] - cy) <= r * (1 + 1e-12) + 1e-9:
            continue
        cx, cy, r = px[i], py[i], 0.0
        for j in range(i):
            if math.hypot(px[j] - cx, py[j] - cy) <= r * (1 + 1e-12) + 1e-9:
                continue
            cx = (px[i] + px[j]) / 2
            cy = (py[i] + py[j]) / 2
            r = math.hypot(px[i] - cx, py[i] - cy)
            for m in range(j):
                if math.hypot(px[m] - cx, py[m] - cy) <= r * (1 + 1e-12) + 1e-9:
                    continue
                cx, cy, r = _circumcircle(px[i], py[i], px[j], py[j], px[m], py[m])
    return cx, cy, r


@nb.njit(cache=True)
def _circumcircle(
    ax: float, ay: float, bx: float, by: float, qx: float, qy: float
) -> tuple[float, float, float]:
    """Circle through three points; for collinear points, the circle on the farthest pair."""
    ux_, uy_ = bx - ax, by - ay
    vx_, vy_ = qx - ax, qy - ay
    d = 2 * (ux_ * vy_ - uy_ * vx_)
    if d == 0:
        d1 = math.hypot(ax - bx, ay - by)
        d2 = math.hypot(ax - qx, ay - qy)
        d3 = math.hypot(bx - qx, by - qy)
        if d1 >= d2 and d1 >= d3:
            p1x, p1y, p2x, p2y = ax, ay, bx, by
        elif d2 >= d3:
            p1x, p1y, p2x, p2y = ax, ay, qx, qy
        else:
            p1x, p1y, p2x, p2y = bx, by, qx, qy
        mx, my = (p1x + p2x) / 2, (p1y + p2y) / 2
        return mx, my, math.hypot(p1x - mx, p1y - my)
    ux = (vy_ * (ux_ * ux_ + uy_ * uy_) - uy_ * (vx_ * vx_ + vy_ * vy_)) / d
    uy = (ux_ * (vx_ * vx_ + vy_ * vy_) - vx_ * (ux_ * ux_ + uy_ * uy_)) / d
    return ux + ax, uy + ay, math.hypot(ux, uy)


@nb.njit(cache=True)
def _sweep_centres(
    px: float,
    py: float,
    qx: NDArray[np.float64],
    qy: NDArray[np.float64],
    r: float,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Per anchor, the disc of radius r through it that covers p and the most points q.

    The centres that cover p form disc(p, r). If some centre covers p and a set T
    of the points, the centres covering ``{p} + T`` are an intersection of discs,
    non-empty and convex, so one of them lies on the circle of radius r around some
    a in ``{p} + T``. Anchor 0 is p, anchor ``1 + i`` is ``q[i]``; for each, the
    centre ``a + r (cos t, sin t)`` is swept over t (every point within 2 r of a
    is covered on a closed arc of t, and p's arc must be active) and the deepest
    position is returned: the number of points q covered (an anchor q counts
    itself) and the centre. Anchors that cannot cover p get depth -1.

    O(m^2 log m) for m points; callers pass few points.
    """
    two_pi = 2.0 * math.pi
    m = qx.size
    depth_out = np.full(m + 1, -1, np.int64)
    cx_out = np.zeros(m + 1)
    cy_out = np.zeros(m + 1)
    ang = np.empty(2 * m + 2)
    who = np.empty(2 * m + 2, np.int64)
    sel = np.empty(2 * m + 2, np.int64)
    for a in range(m + 1):
        if a == 0:
            ax_, ay_ = px, py
        else:
            ax_, ay_ = qx[a - 1], qy[a - 1]
        depth = 0 if a == 0 else 1
        p_active = a == 0
        ne = 0
        # Points: q[0..m-1] (except the anchor), then p (index m) unless p is the anchor.
        for t in range(m + 1):
            if t == a - 1:
                continue
            if t == m:
                if a == 0:
                    continue
                bx, by = px, py
            else:
                bx, by = qx[t], qy[t]
            dx = bx - ax_
            dy = by - ay_
            d = math.sqrt(dx * dx + dy * dy)
            if d > 2.0 * r:
                continue
            if d == 0.0:
                if t == m:
                    p_active = True
                else:
                    depth += 1
                continue
            alpha = math.acos(min(1.0, d / (2.0 * r)))
            s = (math.atan2(dy, dx) - alpha) % two_pi
            e = s + 2.0 * alpha
            if e >= two_pi:
                if t == m:
                    p_active = True
                else:
                    depth += 1
                e -= two_pi
            ang[ne] = s
            who[ne] = t
            ang[m + 1 + ne] = e
            who[m + 1 + ne] = t
            ne += 1
        best = -1
        best_t = 0.0
        if p_active:
            best = depth
        for t in range(ne):
            sel[t] = t
            sel[ne + t] = m + 1 + t
        order = sel[: 2 * ne][np.argsort(ang[sel[: 2 * ne]], kind="mergesort")]
        for o in order:
            if o <= m:  # an arc starts (starts sort before ends at equal angles)
                if who[o] == m:
                    p_active = True
                else:
                    depth += 1
                if p_active and depth > best:
                    best = depth
                    best_t = ang[o]
            elif who[o] == m:
                p_active = False
            else:
                depth -= 1
        depth_out[a] = best
        if best >= 0:
            cx_out[a] = ax_ + r * math.cos(best_t)
            cy_out[a] = ay_ + r * math.sin(best_t)
    return depth_out, cx_out, cy_out


@nb.njit(cache=True)
def _by_group(
    atom_group: NDArray[np.int64], n_groups: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """Atoms with a group (>= 0) ordered by group, then atom; and where each group starts.

    ``order = placed[np.argsort(atom_group[placed], kind="stable")]`` and
    ``start = np.searchsorted(atom_group[order], np.arange(n_groups + 1))`` in two
    passes (groups outside ``[0, n_groups)`` are counted after the last start).
    """
    counts = np.zeros(n_groups + 1, dtype=np.int64)
    m = 0
    for g in atom_group:
        if g >= 0:
            counts[min(g, n_groups)] += 1
            m += 1
    start = np.zeros(n_groups + 2, dtype=np.int64)
    for g in range(n_groups + 1):
        start[g + 1] = start[g] + counts[g]
    pos = start[: n_groups + 1].copy()
    order = np.empty(m, dtype=np.int64)
    for a in range(atom_group.size):
        g = atom_group[a]
        if g >= 0:
            gg = min(g, n_groups)
            order[pos[gg]] = a
            pos[gg] += 1
    return order, start[: n_groups + 1]


class _Members:
    """Atom lists of groups, materialised only for the groups that are touched."""

    def __init__(
        self,
        atom_group: NDArray[np.int64],
        n_groups: int,
        runs: tuple[NDArray[np.int64], NDArray[np.bool_]] | None = None,
    ) -> None:
        # the placed atoms by group, ascending within each: a counting sort, or, when the
        # groups are the valid runs ``starts[i]:starts[i + 1]`` (``runs``: starts, ok) of
        # :func:`_run_groups`, those runs one after another
        if runs is None:
            self._order, self._start = _by_group(atom_group, n_groups)
        else:
            self._order, self._start = _run_lists(*runs)
        self._lists: dict[int, list[int]] = {}
        self._n = n_groups

    def get(self, g: int) -> list[int]:
        if g not in self._lists:
            if g < self._start.size - 1:
                a, b = self._start[g], self._start[g + 1]
                self._lists[g] = self._order[a:b].tolist()
            else:
                self._lists[g] = []
        return self._lists[g]

    def add(self, g: int, atom: int) -> None:
        self.get(g).append(atom)

    def remove(self, g: int, atom: int) -> None:
        self.get(g).remove(atom)

    def new(self, atoms: list[int]) -> None:
        self._lists[self._n] = atoms
        self._n += 1

    def csr(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every group's atoms as they stand, in their lists' order:
        ``order[start[g]:start[g + 1]]``."""
        if not self._lists:
            return self._order, self._start
        n = len(self._lists)
        ids = np.fromiter(self._lists.keys(), np.int64, n)
        lens = np.fromiter(map(len, self._lists.values()), np.int64, n)
        flat = np.fromiter(
            itertools.chain.from_iterable(self._lists.values()), np.int64, int(lens.sum())
        )
        return _merged_lists(self._order, self._start, self._n, ids, lens, flat)


@nb.njit(cache=True)
def _merged_lists(
    order: NDArray[np.int64],
    start: NDArray[np.int64],
    n_groups: int,
    ids: NDArray[np.int64],
    lens: NDArray[np.int64],
    flat: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """The lists ``order[start[g]:start[g + 1]]`` with those of the groups ``ids``
    replaced (their atoms one after another in ``flat``, ``lens`` each), as one list of
    ``n_groups`` groups (a group with neither has none)."""
    at = np.full(n_groups, -1, np.int64)  # where a replaced group's atoms are in flat
    size = np.zeros(n_groups, np.int64)
    for g in range(min(n_groups, start.size - 1)):
        size[g] = start[g + 1] - start[g]
    f = 0
    for i in range(ids.size):
        at[ids[i]] = f
        size[ids[i]] = lens[i]
        f += lens[i]
    out_start = np.zeros(n_groups + 1, np.int64)
    for g in range(n_groups):
        out_start[g + 1] = out_start[g] + size[g]
    out = np.empty(out_start[n_groups], np.int64)
    for g in range(n_groups):
        src = at[g] if at[g] >= 0 else start[g]
        lst = flat if at[g] >= 0 else order
        for j in range(size[g]):
            out[out_start[g] + j] = lst[src + j]
    return out, out_start


@dataclass(frozen=True)
class Grouping:
    """Result of :func:`group_records`.

    Attributes
    ----------
    group_id
        Per input record: its group, or -1 when it could not be placed in a group.
    rep_x, rep_y
        Published representative of every group (snapped, metres).
    """

    group_id: NDArray[np.int64]
    rep_x: NDArray[np.float64]
    rep_y: NDArray[np.float64]

    @property
    def n_groups(self) -> int:
        """Number of groups."""
        return int(self.rep_x.size)


def _canonical_order(
    h: NDArray[np.int64],
    tb: NDArray[np.uint64],
    subj: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
) -> NDArray[np.int64]:
    """``np.lexsort((subj, tb, y, x, h))``, by one integer sort plus a sort of the ties.

    Records sharing a Hilbert key are few (the grid is 2**21 cells wide), so only
    they are ordered by the remaining keys; the result is the lexicographic order.
    Coordinates come before the content key and the content key before the subject
    code (a row number when there is no subject column). The integer sort is
    :func:`~geokanon.neighbours.stable_argsort` (a compiled radix sort on all
    threads), so records equal in every column keep their input order, as in
    ``np.lexsort``.
    """
    order = stable_argsort(h)
    pos = _tied(h, order)
    if pos.size:
        idx = order[pos]
        sub = np.lexsort((subj[idx], tb[idx], y[idx], x[idx], h[idx]))
        order[pos] = idx[sub]
    return order


#: Pieces of the compiled passes over records or atoms that run side by side and
#: then join their parts in order (:func:`_tied`, :func:`_collapse`): fixed, so
#: that nothing depends on the number of threads.
PASS_PIECES = 64


@nb.njit(cache=True, parallel=True)
def _tied(
    h: NDArray[np.int64], order: NDArray[np.int64]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """The places in ``order`` whose key ``h`` equals the one before or after it
    (ascending; counted, then written, piece by piece)."""
    n = order.size
    count = np.zeros(PASS_PIECES + 1, np.int64)
    for piece in nb.prange(PASS_PIECES):
        for i in range(n * piece // PASS_PIECES, n * (piece + 1) // PASS_PIECES):
            if (i > 0 and h[order[i]] == h[order[i - 1]]) or (
                i + 1 < n and h[order[i + 1]] == h[order[i]]
            ):
                count[piece + 1] += 1
    for piece in range(PASS_PIECES):
        count[piece + 1] += count[piece]
    out = np.empty(count[PASS_PIECES], np.int64)
    for piece in nb.prange(PASS_PIECES):
        m = count[piece]
        for i in range(n * piece // PASS_PIECES, n * (piece + 1) // PASS_PIECES):
            if (i > 0 and h[order[i]] == h[order[i - 1]]) or (
                i + 1 < n and h[order[i + 1]] == h[order[i]]
            ):
                out[m] = i
                m += 1
    return out


def _nearest_reps(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    reps_x: list[float],
    reps_y: list[float],
    q: int,
    within: float,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Per point, its ``q`` nearest representatives among those within ``within``,
    nearest first, ties to the smaller index; ``inf`` and ``len(reps_x)`` pad the rows.

    The k-d tree holds only the representatives in the cells (side ``within``) around
    the points' cells, which hold every one within ``within`` of a point: the leftovers
    are few and the groups many (a tree over all 1.8 million representatives at 1e7
    cost about 0.7 s, twice per release, for a few thousand queries).
    """
    n_rep = len(reps_x)
    nq = min(q, n_rep)
    rx = np.asarray(reps_x, dtype=np.float64)
    ry = np.asarray(reps_y, dtype=np.float64)
    side = within * (1.0 + 1e-9) + 1e-9
    ox, oy = float(min(px.min(), rx.min())), float(min(py.min(), ry.min()))
    keys = pack_key(np.floor((px - ox) / side), np.floor((py - oy) / side))
    around = cells_around(keys, 1)
    near = np.flatnonzero(
        cell_values(rx, ry, None, (ox, oy), side, around, np.ones(around.size, np.uint8))
    )
    dist = np.full((px.size, nq), np.inf)
    idx = np.full((px.size, nq), n_rep, dtype=np.int64)
    if near.size == 0:
        return dist, idx
    m = min(nq, near.size)
    from scipy.spatial import cKDTree

    d, i = cKDTree(np.c_[rx[near], ry[near]]).query(np.c_[px, py], k=m)
    d = np.asarray(d).reshape(px.size, m)
    i = np.asarray(i).reshape(px.size, m)
    g = np.where(i < near.size, near[np.minimum(i, near.size - 1)], n_rep)
    order = np.lexsort((g, d), axis=1)
    dist[:, :m] = np.take_along_axis(d, order, axis=1)
    idx[:, :m] = np.take_along_axis(g, order, axis=1)
    return dist, idx


class _LocalTree:
    """A k-d tree over the atoms near some points, answering in global atom indices.

    Holds the atoms in the cells (side ``2 r_max``) within 3 cells of a seed atom.
    A query around a point whose cell lies within 2 cells of a seed sees every atom
    within ``2 r_max`` of it, so radius queries up to ``2 r_max`` (and the feasible
    groups among nearest neighbours) are those of a tree over all atoms; a query
    anywhere else is answered by a tree over all atoms, built on first need.
    """

    def __init__(
        self, ax: NDArray[np.float64], ay: NDArray[np.float64], seeds: NDArray[np.int64],
        r_max: float,
    ) -> None:  # fmt: skip
        self._ax, self._ay = ax, ay
        self._side = 2.0 * r_max * 1.001
        self._ox, self._oy = float(ax.min()), float(ay.min())
        seed_keys = self._cells(ax[seeds], ay[seeds])
        self._safe = cells_around(seed_keys, 2)
        around = cells_around(seed_keys, 3)
        hit = cell_values(ax, ay, None, (self._ox, self._oy), self._side, around,
                          np.ones(around.size, dtype=np.uint8))  # fmt: skip
        self._idx = np.flatnonzero(hit)
        from scipy.spatial import cKDTree

        self._tree = cKDTree(np.c_[ax[self._idx], ay[self._idx]])
        self._full: cKDTree | None = None

    @property
    def atoms(self) -> NDArray[np.int64]:
        """The atoms it holds (ascending): every atom within ``6 r_max`` of a seed."""
        return self._idx

    def _cells(self, x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.int64]:
        return pack_key(
            np.floor((x - self._ox) / self._side), np.floor((y - self._oy) / self._side)
        )

    def _covered(self, pts: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Per point, whether its cell lies within 2 cells of a seed's."""
        keys = self._cells(pts[:, 0], pts[:, 1])
        i = np.minimum(np.searchsorted(self._safe, keys), self._safe.size - 1)
        return self._safe[i] == keys  # _safe is sorted and distinct

    def _whole(self) -> cKDTree:
        if self._full is None:
            from scipy.spatial import cKDTree

            self._full = cKDTree(np.c_[self._ax, self._ay])
        return self._full

    def query_ball_point(self, pt: list[float], r: float) -> list[int]:
        """Indices of the atoms within ``r <= 2 r_max`` of ``pt``."""
        if not self._covered(np.asarray([pt], dtype=np.float64))[0]:
            return list(self._whole().query_ball_point(pt, r=r))
        return self._idx[np.asarray(self._tree.query_ball_point(pt, r=r), dtype=np.int64)].tolist()

    def query(self, pts: ArrayLike, k: int, distance_upper_bound: float = math.inf) -> Any:
        """As ``cKDTree.query``; a missing neighbour is ``len(ax)``, as on the whole tree.

        Each point is answered as it would be alone: by the local tree where its cell
        is covered, else by the tree over all atoms."""
        p = np.atleast_2d(np.asarray(pts, dtype=np.float64))
        single = np.asarray(pts).ndim == 1
        covered = self._covered(p)
        if covered.all():
            d, out = self._local(p, k, distance_upper_bound)
        elif not covered.any():
            d, out = self._far(p, k, distance_upper_bound)
        else:
            d = np.empty((p.shape[0], k))
            out = np.empty((p.shape[0], k), dtype=np.int64)
            d[covered], out[covered] = self._local(p[covered], k, distance_upper_bound)
            d[~covered], out[~covered] = self._far(p[~covered], k, distance_upper_bound)
        if k == 1:
            d, out = d[:, 0], out[:, 0]
        return (d[0], out[0]) if single else (d, out)

    def _local(
        self, p: NDArray[np.float64], k: int, bound: float
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The local tree's answer for points (rows) whose cells are covered."""
        kk = min(k, self._idx.size)
        d, i = self._tree.query(p, k=kk, distance_upper_bound=bound)
        d = np.asarray(d).reshape(p.shape[0], kk)
        i = np.asarray(i).reshape(p.shape[0], kk)
        if kk < k:
            d = np.c_[d, np.full((p.shape[0], k - kk), math.inf)]
            i = np.c_[i, np.full((p.shape[0], k - kk), self._idx.size)]
        out = np.where(i < self._idx.size, self._idx[np.minimum(i, self._idx.size - 1)],
                       self._ax.size)  # fmt: skip
        return d, out

    def _far(
        self, p: NDArray[np.float64], k: int, bound: float
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The whole tree's answer for points (rows)."""
        d, i = self._whole().query(p, k=k, distance_upper_bound=bound)
        return np.asarray(d).reshape(p.shape[0], k), np.asarray(i).reshape(p.shape[0], k)


def _atoms(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subj: NDArray[np.int64],
    tiebreak: NDArray[np.uint64] | None,
) -> tuple[
    NDArray[np.int64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.int64],
    NDArray[np.float64],
]:
    """Collapse records into atoms (one subject at one place), ordered along the Hilbert curve.

    Returns the atom of each record, and per atom x, y, subject and record count,
    in a canonical order that does not depend on the input's row order: ties at
    one place are broken by ``tiebreak`` (a key of each record's content, see
    :func:`geokanon.pipeline.record_tiebreak`) before the subject code.
    """
    h = hilbert_keys(x, y)
    tb = np.zeros(x.size, dtype=np.uint64) if tiebreak is None else tiebreak
    order = _canonical_order(h, tb, subj, x, y)
    del h, tb
    return _collapse(order, np.ascontiguousarray(subj, dtype=np.int64), x, y)


@nb.njit(cache=True, parallel=True)
def _collapse(
    order: NDArray[np.int64],
    subj: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
) -> tuple[
    NDArray[np.int64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.int64],
    NDArray[np.float64],
]:  # pragma: no cover - compiled
    """Runs of ``order`` with the same subject and coordinates as atoms: each record's
    atom, and per atom its x, y, subject and record count. The runs are counted piece by
    piece, then numbered and written piece by piece (each piece from its first run's
    number), so the atoms are those of one pass in order."""
    n = order.size
    count = np.zeros(PASS_PIECES + 1, np.int64)
    for piece in nb.prange(PASS_PIECES):
        for i in range(n * piece // PASS_PIECES, n * (piece + 1) // PASS_PIECES):
            j = order[i]
            if i == 0:
                count[piece + 1] += 1
            else:
                p = order[i - 1]
                if subj[j] != subj[p] or x[j] != x[p] or y[j] != y[p]:
                    count[piece + 1] += 1
    for piece in range(PASS_PIECES):
        count[piece + 1] += count[piece]
    na = count[PASS_PIECES]
    atom_of = np.empty(n, np.int64)
    first = np.empty(na + 1, np.int64)  # each atom's first place in ``order``
    axs = np.empty(na)
    ays = np.empty(na)
    asub = np.empty(na, np.int64)
    for piece in nb.prange(PASS_PIECES):
        m = count[piece] - 1
        for i in range(n * piece // PASS_PIECES, n * (piece + 1) // PASS_PIECES):
            j = order[i]
            new = i == 0
            if not new:
                p = order[i - 1]
                new = subj[j] != subj[p] or x[j] != x[p] or y[j] != y[p]
            if new:
                m += 1
                first[m] = i
                axs[m] = x[j]
                ays[m] = y[j]
                asub[m] = subj[j]
            atom_of[j] = m
    first[na] = n
    counts = np.empty(na)
    for a in nb.prange(na):
        counts[a] = float(first[a + 1] - first[a])
    return atom_of, axs, ays, asub, counts


def group_records(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subjects: NDArray[np.int64],
    policy: OutlierPolicy,
    tiebreak: NDArray[np.uint64] | None = None,
    *,
    subset: NDArray[np.int64] | None = None,
) -> Grouping:
    """Partition records into valid groups; records that cannot be placed get -1.

    Parameters
    ----------
    x, y
        Coordinates in metres of the records eligible for group-level publication.
    subjects
        Subject code per record.
    policy
        Supplies ``k``, ``r_max_m`` and the snapping step.
    tiebreak
        Per record, a row-order-independent key (a hash of the record's content)
        that orders records at one place; with it the grouping does not depend on
        the input's row order even without a subject column.
    subset
        Indices of the records to group (default: all); the result is over
        those records, in that order. (A backend that must not copy the
        arrays, such as :func:`geokanon.distributed.group_tiled`, takes the same
        argument.)

    Returns
    -------
    Grouping
        Every group: >= k distinct subjects, every member within ``r_max_m`` of the
        snapped representative, which equals no member's coordinate.

    Examples
    --------
    >>> import numpy as np
    >>> from geokanon.policy import OutlierPolicy
    >>> x = np.array([0.0, 10, 20, 30, 40, 5000, 5010, 5020])
    >>> g = group_records(x, np.zeros(8), np.arange(8), OutlierPolicy(k=3, r_max_m=100.0))
    >>> g.n_groups, g.group_id.tolist()
    (2, [0, 0, 0, 0, 0, 1, 1, 1])
    """
    if subset is not None:
        x, y, subjects = _take(x, subset), _take(y, subset), _take(subjects, subset)
        tiebreak = None if tiebreak is None else _take(tiebreak, subset)
    n = x.size
    k = policy.k
    r_max = policy.r_work_m  # r_max in working metres: r_max_m on the ground
    step = policy.snap_step_m
    group_id = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return Grouping(group_id, np.zeros(0), np.zeros(0))
    atom_of, ax, ay, asub, aw = _atoms(x, y, subjects, tiebreak)
    na = ax.size
    if na < k:
        return Grouping(group_id, np.zeros(0), np.zeros(0))
    starts = _partition(ax, ay, aw, asub, k, 2 * k - 1, k, r_max - 0.8 * step)
    ng = starts.size - 1
    rep_x = np.empty(ng)
    rep_y = np.empty(ng)
    ok = np.zeros(ng, dtype=np.bool_)
    _check_runs(ax, ay, aw, asub, starts, k, r_max, step, rep_x, rep_y, ok)

    # Runs that fail: retry around the minimum enclosing circle when they hold k subjects.
    for g in np.flatnonzero(~ok):
        a, b = starts[g], starts[g + 1]
        if len(set(asub[a:b].tolist())) < k:
            continue
        rep = _covering_rep(ax[a:b], ay[a:b], aw[a:b], r_max, step)
        if rep is not None:
            rep_x[g], rep_y[g] = rep
            ok[g] = True

    # The valid runs are the groups, numbered 0..m-1 in curve order.
    atom_group = _run_groups(starts, ok)
    reps_x: list[float] = rep_x[ok].tolist()
    reps_y: list[float] = rep_y[ok].tolist()
    members = _Members(atom_group, len(reps_x), runs=(starts, ok))

    leftovers = np.flatnonzero(atom_group < 0)
    if leftovers.size:
        _place_leftovers(
            leftovers, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step
        )
    rx = np.asarray(reps_x, dtype=np.float64)
    ry = np.asarray(reps_y, dtype=np.float64)
    atom_group, rx, ry, _ = _compact(atom_group, rx, ry, None)
    lists: list[NDArray[np.int32]] = []
    _improve_groups(atom_group, rx.size, ax, ay, aw, asub, k, r_max, step, lists=lists)
    # these use this module's exact check
    from geokanon._recut import RECUT_REACH, candidate_pairs, recut_groups
    from geokanon._split import SPLIT_REACH, split_groups

    before = atom_group.copy()
    ng = rx.size
    near, wide = candidate_pairs(
        atom_group, ng, ax, ay, aw, k, (RECUT_REACH, SPLIT_REACH), (0, 3 * k)
    )
    if recut_groups(atom_group, ng, ax, ay, aw, asub, k, r_max, step, pairs=near) and lists:
        _polish_groups(before, atom_group, ng, ax, ay, aw, asub, k, r_max, step, lists[0])
    ng = split_groups(atom_group, ng, ax, ay, aw, asub, k, r_max, step, pairs=wide)
    atom_group, rx, ry = _settled(atom_group, ax, ay, aw, asub, ng, r_max, step)
    return Grouping(_take(atom_group, atom_of), rx, ry)


def repair_groups(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subjects: NDArray[np.int64],
    policy: OutlierPolicy,
    group_id: NDArray[np.int64],
    rep_x: NDArray[np.float64],
    rep_y: NDArray[np.float64],
    tiebreak: NDArray[np.uint64] | None = None,
) -> Grouping:
    """Mend a grouping after some records left it (``group_id == -1``), locally.

    Removing members never moves anyone farther from a representative, so only
    groups left with fewer than k distinct subjects are dissolved; their members,
    like every other record with ``group_id == -1``, then try to join a nearby
    group (re-centred if needed) or to form a new group among themselves. Groups
    that were not touched keep their representative, so the passes of the fixed
    point converge instead of reshuffling the whole map.

    Parameters
    ----------
    x, y, subjects
        The records still meant for group level.
    policy
        Supplies ``k``, ``r_max_m`` and the snapping step.
    group_id
        Current group of each record, -1 for records to place.
    rep_x, rep_y
        Current representatives, indexed by group id.
    tiebreak
        As for :func:`group_records`.

    Returns
    -------
    Grouping
        Valid groups (renumbered: surviving groups in their old order, then new ones).
    """
    n = x.size
    k = policy.k
    r_max = policy.r_work_m  # r_max in working metres: r_max_m on the ground
    step = policy.snap_step_m
    if n == 0:
        return Grouping(np.full(0, -1, dtype=np.int64), np.zeros(0), np.zeros(0))
    atom_of, ax, ay, asub, aw = _atoms(x, y, subjects, tiebreak)
    na = ax.size
    atom_group = np.full(na, -1, dtype=np.int64)
    atom_group[atom_of] = group_id
    ng = rep_x.size
    # Groups left with fewer than k distinct subjects are dissolved.
    placed = atom_group >= 0
    n_subj = int(asub.max()) + 1
    pairs = sorted_unique(atom_group[placed] * n_subj + asub[placed])
    distinct = np.bincount(pairs // n_subj, minlength=ng)
    alive = distinct >= k
    new_id = np.cumsum(alive) - 1
    atom_group = np.where(
        (atom_group >= 0) & alive[np.maximum(atom_group, 0)], new_id[np.maximum(atom_group, 0)], -1
    )
    reps_x: list[float] = rep_x[alive].tolist()
    reps_y: list[float] = rep_y[alive].tolist()
    members = _Members(atom_group, len(reps_x))
    leftovers = np.flatnonzero(atom_group < 0)
    if leftovers.size:
        _place_leftovers(
            leftovers, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step
        )
    rx = np.asarray(reps_x, dtype=np.float64)
    ry = np.asarray(reps_y, dtype=np.float64)
    atom_group, rx, ry, _ = _compact(atom_group, rx, ry, None)
    atom_group, rx, ry = _settled(atom_group, ax, ay, aw, asub, rx.size, r_max, step)
    return Grouping(_take(atom_group, atom_of), rx, ry)


def _join_groups(
    atoms: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    k: int,
    r_max: float,
    step: float,
    check_live: bool = False,
) -> None:
    """Each atom joins the nearest group whose disc covers it (re-centred if one disc can
    cover the members and the atom); joining only adds members, so every group stays
    valid. ``check_live``: skip groups left with fewer than k subjects (after the rescue
    has moved members). The atoms are taken in order in one compiled pass
    (:func:`_join_atoms`); the members and representatives are then brought up to date."""
    if not reps_x or not atoms.size:
        return
    dist, idx = _nearest_reps(ax[atoms], ay[atoms], reps_x, reps_y, 8, 2 * r_max)
    order, start = members.csr()
    rx = np.asarray(reps_x, dtype=np.float64)
    ry = np.asarray(reps_y, dtype=np.float64)
    joined, moved = _join_atoms(
        np.ascontiguousarray(atoms, dtype=np.int64), np.ascontiguousarray(dist),
        np.ascontiguousarray(idx), ax, ay, aw, asub, atom_group, order, start, rx, ry, k,
        float(r_max), float(step), np.bool_(check_live),
    )  # fmt: skip
    for t in np.flatnonzero(joined >= 0).tolist():
        members.add(int(joined[t]), int(atoms[t]))
    for g in moved.tolist():
        reps_x[g], reps_y[g] = float(rx[g]), float(ry[g])


@nb.njit(cache=True)
def _join_atoms(
    atoms: NDArray[np.int64],
    dist: NDArray[np.float64],
    idx: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    order: NDArray[np.int64],
    start: NDArray[np.int64],
    rx: NDArray[np.float64],
    ry: NDArray[np.float64],
    k: int,
    r_max: float,
    step: float,
    check_live: KernelBool,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """:func:`_join_groups`' pass: each atom in turn tries its nearest representatives
    (``dist``, ``idx``: nearest first, within ``2 r_max``), in place on ``atom_group`` and
    the representatives ``rx``, ``ry``. The groups' atoms are ``order[start[g]:start[g +
    1]]`` and, after them, those joined here, in the order they joined.

    Per group, its members extreme in 8 directions (:func:`_extremes`) are kept from
    its first exact check on: an atom farther than 2 r_max from one of them cannot share
    a disc of radius r_max with the group, whatever the centre, so the exact check (which
    costs the group's size) is not needed. Joining only adds members: a group live (>= k
    subjects) stays live, and one that is not gains no member here, so liveness
    (``check_live``) is counted once per group.

    Returns the group each atom joined (-1: none) and the groups re-centred.
    """
    nt = atoms.size
    n_groups = rx.size
    joined = np.full(nt, -1, np.int64)
    # the atoms joined to each group, through their places t in ``atoms``
    x_head = np.full(n_groups, -1, np.int64)
    x_tail = np.full(n_groups, -1, np.int64)
    x_next = np.full(nt, -1, np.int64)
    live = np.full(n_groups, -1, np.int8)
    slot = np.full(n_groups, -1, np.int64)  # the group's extremes, once worked out
    n_slots = 0
    ext_x = np.empty((max(16, nt), 9))
    ext_y = np.empty((max(16, nt), 9))
    ext_n = np.empty(max(16, nt), np.int64)
    recentred = np.zeros(n_groups, np.bool_)
    px = np.empty(64)
    py = np.empty(64)
    pw = np.empty(64)
    reach = 2.0 * r_max * (1.0 + 1e-9) + 1e-6
    for t in range(nt):
        a = atoms[t]
        for u in range(idx.shape[1]):
            d = dist[t, u]
            if not math.isfinite(d) or d > 2 * r_max:
                break
            g = idx[t, u]
            if check_live:
                if live[g] < 0:
                    seen = set()
                    for j in range(start[g], start[g + 1]):
                        seen.add(asub[order[j]])
                    e = x_head[g]
                    while e >= 0:
                        seen.add(asub[atoms[e]])
                        e = x_next[e]
                    live[g] = 1 if len(seen) >= k else 0
                if live[g] == 0:
                    continue  # a group the rescue emptied: not one to join
            dx = ax[a] - rx[g]
            dy = ay[a] - ry[g]
            direct = math.sqrt(dx * dx + dy * dy) <= r_max and not (
                ax[a] == rx[g] and ay[a] == ry[g]
            )
            if not direct:
                # the group's atoms gathered (the buffers grow as needed; one more place
                # for this atom)
                m = start[g + 1] - start[g]
                e = x_head[g]
                while e >= 0:
                    m += 1
                    e = x_next[e]
                if m + 1 > px.size:
                    px = np.empty(2 * (m + 1))
                    py = np.empty(2 * (m + 1))
                    pw = np.empty(2 * (m + 1))
                i = 0
                for j in range(start[g], start[g + 1]):
                    b = order[j]
                    px[i], py[i], pw[i] = ax[b], ay[b], aw[b]
                    i += 1
                e = x_head[g]
                while e >= 0:
                    b = atoms[e]
                    px[i], py[i], pw[i] = ax[b], ay[b], aw[b]
                    i += 1
                    e = x_next[e]
                if slot[g] < 0:
                    if n_slots == ext_n.size:
                        ext_x = np.concatenate((ext_x, np.empty_like(ext_x)))
                        ext_y = np.concatenate((ext_y, np.empty_like(ext_y)))
                        ext_n = np.concatenate((ext_n, np.empty_like(ext_n)))
                    slot[g] = n_slots
                    n_slots += 1
                    ext_n[slot[g]] = _extremes(px, py, m, ext_x[slot[g]], ext_y[slot[g]])
                s = slot[g]
                far = False
                for j in range(ext_n[s]):
                    if (ext_x[s, j] - ax[a]) ** 2 + (ext_y[s, j] - ay[a]) ** 2 > reach * reach:
                        far = True
                        break
                if far:
                    continue
                px[m], py[m], pw[m] = ax[a], ay[a], aw[a]
                ok, qx, qy = _covering_rep_nb(
                    px[: m + 1], py[: m + 1], pw[: m + 1], r_max, step, np.nan, np.nan
                )
                if not ok:
                    continue
                rx[g] = qx
                ry[g] = qy
                recentred[g] = True
            # a joins g
            joined[t] = g
            atom_group[a] = g
            if x_tail[g] >= 0:
                x_next[x_tail[g]] = t
            else:
                x_head[g] = t
            x_tail[g] = t
            s = slot[g]
            if s >= 0:  # its extremes with the atom
                n_e = ext_n[s]
                ext_x[s, n_e] = ax[a]
                ext_y[s, n_e] = ay[a]
                ext_n[s] = _extremes(ext_x[s], ext_y[s], n_e + 1, ext_x[s], ext_y[s])
            break
    return joined, np.flatnonzero(recentred)


@nb.njit(cache=True)
def _extremes(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    m: int,
    out_x: NDArray[np.float64],
    out_y: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    """The points ``(px[:m], py[:m])`` extreme in x, y, x + y and x - y, both ways (the
    first of equal ones), written to ``out_x``, ``out_y`` (which may be ``px``, ``py``);
    all of them when they are 8 or fewer. Returns how many were written.

    The extremes of a set and one more point are among the extremes of the set and
    that point, so they are kept up to date as a group grows.
    """
    if m <= 8:
        for i in range(m):
            out_x[i] = px[i]
            out_y[i] = py[i]
        return m
    pick = np.zeros(8, np.int64)  # argmax x, argmin x, argmax y, argmin y, then of u, v
    for i in range(1, m):
        u = px[i] + py[i]
        v = px[i] - py[i]
        if px[i] > px[pick[0]]:
            pick[0] = i
        if px[i] < px[pick[1]]:
            pick[1] = i
        if py[i] > py[pick[2]]:
            pick[2] = i
        if py[i] < py[pick[3]]:
            pick[3] = i
        if u > px[pick[4]] + py[pick[4]]:
            pick[4] = i
        if u < px[pick[5]] + py[pick[5]]:
            pick[5] = i
        if v > px[pick[6]] - py[pick[6]]:
            pick[6] = i
        if v < px[pick[7]] - py[pick[7]]:
            pick[7] = i
    ex = np.empty(8)
    ey = np.empty(8)
    for j in range(8):
        ex[j] = px[pick[j]]
        ey[j] = py[pick[j]]
    for j in range(8):
        out_x[j] = ex[j]
        out_y[j] = ey[j]
    return 8


@nb.njit(cache=True)
def _seed_groups(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    sub: NDArray[np.int64],
    k: int,
    r_max: float,
    step: float,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Step 2 of :func:`_place_leftovers`: new groups among the leftover atoms.

    In order, every atom t still free is a seed: the free atoms within ``2 r_max``
    of it, nearest first (ties by index), up to the first atom of the k-th distinct
    subject, form a group if one snapped representative covers them. ``sub`` holds
    subject codes ``0 .. S-1``. The atoms near a seed are found on a grid of cells of
    side ``2 r_max`` and the cut is found from each subject's nearest atom, so a seed
    costs the atoms within its 3 x 3 cells, never a sort of all of them; a set wider
    than ``2 r_max`` in one of 8 directions cannot fit in a disc of radius r_max and
    is refused before the exact check. Returns the members of every group formed
    (indices into x, group g at ``starts[g]:starts[g + 1]``) and its representative.
    """
    n = x.size
    r2 = 4.0 * r_max * r_max
    side = 2.0 * r_max * 1.001
    ox = x.min()
    oy = y.min()
    cx = np.empty(n, np.int64)
    cy = np.empty(n, np.int64)
    for i in range(n):
        cx[i] = math.floor((x[i] - ox) / side) + 1
        cy[i] = math.floor((y[i] - oy) / side) + 1
    wy = cy.max() + 2
    key = cx * wy + cy
    order = np.argsort(key, kind="mergesort")
    skey = key[order]
    n_sub = sub.max() + 1
    best_d = np.full(n_sub, np.inf)
    best_j = np.full(n_sub, -1, np.int64)
    touched = np.empty(n_sub, np.int64)
    cand = np.empty(n, np.int64)
    cd = np.empty(n)
    # Unit vectors every 22.5 degrees: a set's width along them is at least 0.98 of its
    # diameter, and a set of diameter above 2 r_max fits no disc of radius r_max.
    dirs = np.empty((8, 2))
    for e in range(8):
        dirs[e, 0] = math.cos(e * math.pi / 8)
        dirs[e, 1] = math.sin(e * math.pi / 8)
    lo = np.empty(8)
    hi = np.empty(8)
    width = 2.0 * r_max * (1.0 + 1e-9) + 1e-6
    free = np.ones(n, np.bool_)
    out_mem = np.empty(n, np.int64)
    out_start = np.zeros(n + 1, np.int64)
    gxs = np.empty(n)
    gys = np.empty(n)
    ng = 0
    for t in range(n):
        if not free[t]:
            continue
        nc = 0
        nt = 0
        for ddx in range(-1, 2):
            for ddy in range(-1, 2):
                kk = (cx[t] + ddx) * wy + cy[t] + ddy
                a = np.searchsorted(skey, kk)
                while a < n and skey[a] == kk:
                    j = order[a]
                    a += 1
                    if not free[j]:
                        continue
                    d2 = (x[j] - x[t]) ** 2 + (y[j] - y[t]) ** 2
                    if d2 > r2:
                        continue
                    cand[nc] = j
                    cd[nc] = d2
                    nc += 1
                    s = sub[j]
                    if best_j[s] < 0:
                        touched[nt] = s
                        nt += 1
                        best_d[s] = d2
                        best_j[s] = j
                    elif d2 < best_d[s] or (d2 == best_d[s] and j < best_j[s]):
                        best_d[s] = d2
                        best_j[s] = j
        if nt >= k:
            # The k-th subject's nearest atom, in (distance, index) order, is the cut.
            td = np.empty(nt)
            tj = np.empty(nt, np.int64)
            for u in range(nt):
                td[u] = best_d[touched[u]]
                tj[u] = best_j[touched[u]]
            o = _by_distance_then_index(td, tj)
            cut_d = td[o[k - 1]]
            cut_j = tj[o[k - 1]]
        for u in range(nt):
            best_d[touched[u]] = np.inf
            best_j[touched[u]] = -1
        if nt < k:
            continue
        m = 0
        lo[:] = np.inf
        hi[:] = -np.inf
        for u in range(nc):
            if cd[u] < cut_d or (cd[u] == cut_d and cand[u] <= cut_j):
                j = cand[u]
                cand[m] = j
                cd[m] = cd[u]
                m += 1
                for e in range(dirs.shape[0]):
                    v = x[j] * dirs[e, 0] + y[j] * dirs[e, 1]
                    lo[e] = min(lo[e], v)
                    hi[e] = max(hi[e], v)
        # Wider, in some direction, than a disc of radius r_max (with a margin for the
        # rounding of the exact check): no centre covers the set.
        if np.any(hi - lo > width):
            continue
        jj = cand[:m].copy()
        dd = cd[:m].copy()
        mem = jj[_by_distance_then_index(dd, jj)]
        ok, qx, qy = _covering_rep_nb(x[mem], y[mem], w[mem], r_max, step, np.nan, np.nan)
        if not ok:
            continue
        a = out_start[ng]
        out_mem[a : a + m] = mem
        out_start[ng + 1] = a + m
        gxs[ng] = qx
        gys[ng] = qy
        ng += 1
        for j in mem:
            free[j] = False
    return out_mem[: out_start[ng]], out_start[: ng + 1], gxs[:ng], gys[:ng]


@nb.njit(cache=True)
def _by_distance_then_index(d: NDArray[np.float64], j: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.lexsort((j, d))`` (numba has no lexsort): stable sort by j, then by d."""
    o = np.argsort(j, kind="mergesort")
    return o[np.argsort(d[o], kind="mergesort")]


def _place_leftovers(
    leftovers: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    k: int,
    r_max: float,
    step: float,
) -> None:
    """Attach leftover atoms to nearby groups, then form new groups among the rest."""

    # 1. Join an existing group whose disc can cover the atom.
    _join_groups(leftovers, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step)
    # 2. New groups among what is left: seed, nearest leftovers, check the disc.
    rest = leftovers[atom_group[leftovers] < 0]
    if rest.size < k:
        return
    _, sub_code = np.unique(asub[rest], return_inverse=True)
    gmem, gstart, gx, gy = _seed_groups(
        np.ascontiguousarray(ax[rest]), np.ascontiguousarray(ay[rest]),
        np.ascontiguousarray(aw[rest]), sub_code.astype(np.int64), k, r_max, step,
    )  # fmt: skip
    for g in range(gx.size):
        mem = rest[gmem[gstart[g] : gstart[g + 1]]]
        reps_x.append(float(gx[g]))
        reps_y.append(float(gy[g]))
        members.new([int(a) for a in mem])
        atom_group[mem] = len(reps_x) - 1
    # 3. What is still left may borrow members from groups that have more than k subjects.
    rest = leftovers[atom_group[leftovers] < 0]
    if rest.size == 0 or not reps_x:
        return
    tree = _LocalTree(ax, ay, rest, r_max)
    _borrow(rest, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step,
            tree.atoms)  # fmt: skip
    # 4. The rest: a group where the best disc through the atom lies, taking members
    # from groups only when everyone displaced finds another group.
    rest = rest[atom_group[rest] < 0]
    if rest.size:
        _rescue(rest, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step, tree)


def _borrow(
    leftovers: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    k: int,
    r_max: float,
    step: float,
    local: NDArray[np.int64] | None = None,
) -> None:
    """Form groups around leftover atoms with the nearest atoms that can be spared.

    An atom can be spared when it is free, or when its group would keep at least k
    distinct subjects without it (taking members away never moves the rest farther
    from their representative). Groups that lose members keep their representative;
    exact-centroid coincidences are mended afterwards.

    ``local``: the atoms (ascending indices) among which every atom within
    ``2 r_max`` of a leftover is (default all): only they are numbered and put on
    the grid, so the cost follows the leftovers' neighbourhoods, not every atom.
    """
    rest = leftovers[atom_group[leftovers] < 0]
    if rest.size == 0:
        return
    loc = np.arange(ax.size, dtype=np.int64) if local is None else local
    lx, ly = np.ascontiguousarray(ax[loc]), np.ascontiguousarray(ay[loc])
    at = np.searchsorted(loc, rest)  # the leftovers' places in loc
    assert bool((loc[np.minimum(at, loc.size - 1)] == rest).all())
    # Atoms per subject of every group touched, counted on first touch.
    subjects_of: dict[int, dict[int, int]] = {}
    # Every local atom's (group, subject) pair as a number, free atoms as group -1; a
    # new group's atoms get new numbers (each is its subject's only atom there). Only
    # equality of the numbers matters, and of the subject codes.
    _, scode = np.unique(asub[loc], return_inverse=True)
    scode = scode.astype(np.int64).ravel()
    _, pair_of = np.unique((atom_group[loc] + 1) * (int(scode.max()) + 1) + scode,
                           return_inverse=True)  # fmt: skip
    pair_of = pair_of.astype(np.int64).ravel()
    next_pair = int(pair_of.max()) + 1
    grid = _Grid(lx, ly, 2.0 * r_max)
    best_d = np.full(next_pair + loc.size, np.inf)
    best_j = np.full(next_pair + loc.size, -1, dtype=np.int64)
    touched = np.empty(next_pair + loc.size, dtype=np.int64)
    r2 = 4.0 * r_max * r_max

    def tally(g: int) -> dict[int, int]:
        c = subjects_of.get(g)
        if c is None:
            c = {}
            for a in members.get(g):
                c[int(asub[a])] = c.get(int(asub[a]), 0) + 1
            subjects_of[g] = c
        return c

    for p, pl in zip(rest.tolist(), at.tolist(), strict=True):
        if atom_group[p] >= 0:
            continue
        # local places, nearest first (ties by index: loc is ascending)
        near_l = _pairs_near(pl, lx, ly, scode, pair_of, grid.order, grid.keys, grid.cx,
                             grid.cy, grid.wy, r2, best_d, best_j, touched)  # fmt: skip
        near = loc[near_l]
        chosen = [int(p)]
        chosen_l = [int(pl)]
        seen = {int(asub[p])}
        taken: dict[int, int] = {}  # subjects taken so far from each group
        for j, jl in zip(near.tolist(), near_l.tolist(), strict=True):
            if int(asub[j]) in seen:
                continue
            g = int(atom_group[j])
            if g >= 0:
                counts = tally(g)
                lost = taken.get(g, 0)
                if counts[int(asub[j])] == 1 and len(counts) - lost - 1 < k:
                    continue
                taken[g] = lost + 1
            chosen.append(int(j))
            chosen_l.append(int(jl))
            seen.add(int(asub[j]))
            if len(seen) >= k:
                break
        if len(seen) < k:
            continue
        mem = np.asarray(chosen, dtype=np.int64)
        rep = _covering_rep(ax[mem], ay[mem], aw[mem], r_max, step)
        if rep is None:
            continue
        new = len(reps_x)
        reps_x.append(rep[0])
        reps_y.append(rep[1])
        for j, jl in zip(chosen, chosen_l, strict=True):
            g = int(atom_group[j])
            if g >= 0:
                members.remove(g, j)
                counts = tally(g)
                counts[int(asub[j])] -= 1
                if counts[int(asub[j])] == 0:
                    del counts[int(asub[j])]
            atom_group[j] = new
            pair_of[jl] = next_pair
            next_pair += 1
        members.new(chosen)
        tally(new)


class _Grid:
    """Atoms sorted by cells of a given side (with a ring of empty cells around)."""

    def __init__(self, x: NDArray[np.float64], y: NDArray[np.float64], side: float) -> None:
        side *= 1.001
        self.cx = np.floor((x - x.min()) / side).astype(np.int64) + 1
        self.cy = np.floor((y - y.min()) / side).astype(np.int64) + 1
        self.wy = int(self.cy.max()) + 2
        key = self.cx * self.wy + self.cy
        self.order = stable_argsort(key)
        self.keys = key[self.order]


@nb.njit(cache=True)
def _pairs_near(
    p: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    scode: NDArray[np.int64],
    pair_of: NDArray[np.int64],
    order: NDArray[np.int64],
    keys: NDArray[np.int64],
    cx: NDArray[np.int64],
    cy: NDArray[np.int64],
    wy: int,
    r2: float,
    best_d: NDArray[np.float64],
    best_j: NDArray[np.int64],
    touched: NDArray[np.int64],
) -> NDArray[np.int64]:
    """The atoms that :func:`_borrow` may take for seed p, nearest first (ties by index).

    Of the atoms within ``sqrt(r2)`` of p (found in the 3 x 3 cells of a grid whose
    side is at least that) whose subject is not p's, only the nearest of each
    (group, subject) pair: a free atom can always be taken, and a group's atom is
    refused only when it is its subject's last in the group, so there is no second
    one to try. The seed's loop is then as long as the pairs near it, not the atoms,
    and the atoms are scanned once, in compiled code. ``best_d``, ``best_j`` (one
    entry per pair number, ``inf`` and -1) and ``touched`` are scratch, left as found.
    """
    n = order.size
    px = ax[p]
    py = ay[p]
    sp = scode[p]
    nt = 0
    for ddx in range(-1, 2):
        for ddy in range(-1, 2):
            kk = (cx[p] + ddx) * wy + cy[p] + ddy
            a = np.searchsorted(keys, kk)
            while a < n and keys[a] == kk:
                j = order[a]
                a += 1
                if scode[j] == sp:
                    continue
                d2 = (ax[j] - px) ** 2 + (ay[j] - py) ** 2
                if d2 > r2:
                    continue
                q = pair_of[j]
                if best_j[q] < 0:
                    touched[nt] = q
                    nt += 1
                    best_d[q] = d2
                    best_j[q] = j
                elif d2 < best_d[q] or (d2 == best_d[q] and j < best_j[q]):
                    best_d[q] = d2
                    best_j[q] = j
    out_j = np.empty(nt, np.int64)
    out_d = np.empty(nt)
    for u in range(nt):
        q = touched[u]
        out_j[u] = best_j[q]
        out_d[u] = best_d[q]
        best_d[q] = np.inf
        best_j[q] = -1
    return out_j[_by_distance_then_index(out_d, out_j)]


#: Candidate centres tried per leftover atom by :func:`_rescue`, deepest first.
RESCUE_TRIES = 1
#: Nearest atoms within 2 r_max of a leftover that :func:`_rescue` sweeps over.
RESCUE_NEIGHBOURS = 32


def _rescue(
    rest: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    k: int,
    r_max: float,
    step: float,
    tree: _LocalTree,
) -> None:
    """Form a group around each leftover atom where the best disc through it lies.

    For a leftover atom p, the discs of radius ``r_max - 0.8 step`` (so that the
    snapped representative still covers everyone) that cover p and the most other
    atoms are found by an angular sweep (:func:`_sweep_centres`) over the atoms
    near p, whatever their group. For each of the deepest few, a plan
    (:func:`_plan`): the members are p, every free atom in the disc, then atoms
    their groups can spare (the group keeps k distinct subjects), then, nearest
    first, atoms of groups that would fall below k; such a group is dissolved and
    each of its other atoms joins the new group (inside the disc), or another group
    (re-centred if needed), or is lost. The plan that places the most records net
    is carried out if it places more records than it loses; lost atoms are tried
    again later. Every carried-out plan raises the number of records placed, so the
    loop ends. Emptied groups keep their index until :func:`_compact`.
    """
    r_eff = r_max - 0.8 * step
    # The nearest atoms of every leftover, once (positions never change; groups do).
    nq = min(RESCUE_NEIGHBOURS + 1, ax.size)
    _, nbrs = tree.query(np.c_[ax[rest], ay[rest]], k=nq, distance_upper_bound=2 * r_eff)
    nbrs = nbrs.reshape(rest.size, nq)
    row = {int(a): t for t, a in enumerate(rest.tolist())}
    near_cache: dict[int, NDArray[np.int64]] = {}
    queue = rest.tolist()
    head = 0
    while head < len(queue):
        p = queue[head]
        head += 1
        if atom_group[p] >= 0:
            continue
        sp = int(asub[p])
        if p in row:
            cand_j = nbrs[row[p]]
            cand_j = cand_j[cand_j < ax.size]
        else:  # an atom a plan left without a group
            _, cand_j = tree.query([ax[p], ay[p]], k=nq, distance_upper_bound=2 * r_eff)
            cand_j = np.atleast_1d(cand_j)
            cand_j = cand_j[cand_j < ax.size]
        nb_ = cand_j[asub[cand_j] != sp]
        if len(set(asub[nb_].tolist())) < k - 1:
            continue
        depth, cx, cy = _sweep_centres(float(ax[p]), float(ay[p]), ax[nb_], ay[nb_], r_eff)
        cand = np.flatnonzero(depth >= k - 1)
        if cand.size == 0:
            continue
        cand = cand[np.lexsort((cand, -depth[cand]))][:RESCUE_TRIES]
        best: _Plan | None = None
        for c in cand:
            plan = _plan(
                p, float(cx[c]), float(cy[c]), nb_, ax, ay, aw, asub, atom_group, members,
                reps_x, reps_y, k, r_max, r_eff, step, tree, near_cache,
            )  # fmt: skip
            if plan is not None and plan.net > 0 and (best is None or plan.net > best.net):
                best = plan
                if not plan.lost:
                    break
        if best is not None:
            queue.extend(_apply(best, atom_group, members, reps_x, reps_y))
    # What is still left may join a group formed or re-centred since step 1 tried it.
    left = rest[atom_group[rest] < 0]
    _join_groups(left, ax, ay, aw, asub, atom_group, members, reps_x, reps_y, k, r_max, step, True)


@dataclass
class _Plan:
    """A new group of :func:`_rescue` and what it costs the groups around it."""

    chosen: list[int]
    rep: tuple[float, float]
    taken: dict[int, list[int]]
    adds: dict[int, list[int]]
    new_reps: dict[int, tuple[float, float]]
    lost: list[int]
    net: float


def _subjects_of(atoms: list[int], asub: NDArray[np.int64]) -> set[int]:
    return {int(asub[a]) for a in atoms}


def _plan(
    p: int,
    cx: float,
    cy: float,
    near: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    k: int,
    r_max: float,
    r_eff: float,
    step: float,
    tree: _LocalTree,
    near_cache: dict[int, NDArray[np.int64]],
) -> _Plan | None:
    """The group of :func:`_rescue` around centre (cx, cy), or None; changes nothing."""
    # The sweep's centre lies on the rim of the discs that define it: allow rounding.
    r_in = r_eff * (1.0 + 1e-9)
    d2 = (ax[near] - cx) ** 2 + (ay[near] - cy) ** 2
    hit = d2 <= r_in * r_in
    inside = near[hit]
    inside = inside[np.lexsort((inside, d2[hit]))].tolist()
    chosen = [p] + [j for j in inside if atom_group[j] < 0]
    gain = float(aw[chosen].sum())
    seen = _subjects_of(chosen, asub)
    taken: dict[int, list[int]] = {}
    # Per touched group: records left per subject once the taken atoms are gone.
    left: dict[int, dict[int, int]] = {}

    def left_of(g: int) -> dict[int, int]:
        if g not in left:
            c: dict[int, int] = {}
            for a in members.get(g):
                sa = int(asub[a])
                c[sa] = c.get(sa, 0) + 1
            left[g] = c
        return left[g]

    # Spare atoms first (their group keeps k subjects), then atoms that break a group.
    for breaking in (False, True):
        for j in inside:
            if len(seen) >= k:
                break
            g = int(atom_group[j])
            sj = int(asub[j])
            if g < 0 or sj in seen or j in taken.get(g, ()):
                continue
            c = left_of(g)
            if not breaking and c[sj] == 1 and len(c) <= k:
                continue
            taken.setdefault(g, []).append(j)
            c[sj] -= 1
            if c[sj] == 0:
                del c[sj]
            chosen.append(j)
            seen.add(sj)
    if len(seen) < k:
        return None
    broken = [g for g in sorted(taken) if len(left[g]) < k]
    # The other atoms of a broken group: inside the disc they join the new group,
    # elsewhere another group, or they are lost.
    adds: dict[int, list[int]] = {}
    new_reps: dict[int, tuple[float, float]] = {}
    lost: list[int] = []
    donors = set(taken)
    for g in broken:
        gone = set(taken[g])
        # the nearest atoms of those that must find another group, asked for at once
        ask = [a for a in members.get(g) if a not in gone and a not in near_cache
               and (ax[a] - cx) ** 2 + (ay[a] - cy) ** 2 > r_in * r_in]  # fmt: skip
        if ask:
            found = tree.query(np.column_stack((ax[ask], ay[ask])), k=min(24, ax.size))[1]
            for a, nb_a in zip(ask, np.asarray(found).reshape(len(ask), -1), strict=True):
                near_cache[a] = nb_a[nb_a < ax.size]  # a local tree may hold fewer than 24
        for a in members.get(g):
            if a in gone:
                continue
            taken[g].append(a)
            if (ax[a] - cx) ** 2 + (ay[a] - cy) ** 2 <= r_in * r_in:
                chosen.append(a)
                continue
            nb_a = near_cache[a]
            homes = sorted({int(g) for g in atom_group[nb_a]} - donors - {-1})
            h = _rehome(a, ax, ay, aw, members, reps_x, reps_y, r_max, step, homes, adds,
                        new_reps)  # fmt: skip
            if h < 0:
                lost.append(a)
                if float(aw[lost].sum()) >= gain:
                    return None  # places no more than it loses
            else:
                adds.setdefault(h, []).append(a)
    net = gain - float(aw[lost].sum()) if lost else gain
    if net <= 0:
        return None
    mem = np.asarray(chosen, dtype=np.int64)
    rep = _covering_rep(ax[mem], ay[mem], aw[mem], r_max, step)
    if rep is None:
        return None
    return _Plan(chosen, rep, taken, adds, new_reps, lost, net)


def _apply(
    plan: _Plan,
    atom_group: NDArray[np.int64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
) -> list[int]:
    """Carry out a plan of :func:`_plan`; returns the atoms it left without a group."""
    for g, atoms in plan.taken.items():
        for a in atoms:
            members.remove(g, a)
    for a in plan.lost:
        atom_group[a] = -1
    for h, atoms in plan.adds.items():
        for a in atoms:
            members.add(h, a)
            atom_group[a] = h
        reps_x[h], reps_y[h] = plan.new_reps.get(h, (reps_x[h], reps_y[h]))
    new = len(reps_x)
    reps_x.append(plan.rep[0])
    reps_y.append(plan.rep[1])
    members.new(plan.chosen)
    atom_group[np.asarray(plan.chosen, dtype=np.int64)] = new
    return plan.lost


def _rehome(
    a: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    members: _Members,
    reps_x: list[float],
    reps_y: list[float],
    r_max: float,
    step: float,
    homes: list[int],
    adds: dict[int, list[int]],
    new_reps: dict[int, tuple[float, float]],
) -> int:
    """A group of ``homes`` (the groups of a's nearest atoms) that atom a can join, or -1.

    Nearest representative first.

    Updates ``new_reps`` with the re-centred representative; the caller records
    the atom in ``adds``.
    """
    cands = []
    for h in homes:
        hx, hy = new_reps.get(h, (reps_x[h], reps_y[h]))
        d2 = (ax[a] - hx) ** 2 + (ay[a] - hy) ** 2
        if d2 <= 4 * r_max * r_max:
            cands.append((d2, h, hx, hy))
    cands.sort()
    for d2, h, hx, hy in cands[:8]:
        if math.sqrt(d2) <= r_max and not (ax[a] == hx and ay[a] == hy):
            return h
        m = np.asarray([*members.get(h), *adds.get(h, []), a], dtype=np.int64)
        rep = _covering_rep(ax[m], ay[m], aw[m], r_max, step)
        if rep is not None:
            new_reps[h] = rep
            return h
    return -1


def _compact(
    atom_group: NDArray[np.int64],
    rx: NDArray[np.float64],
    ry: NDArray[np.float64],
    members: _Members | None,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], _Members | None]:
    """Drop groups left without members (by :func:`_rescue`); the others keep their order.

    The members are those of the groups returned (``None`` when given ``None``: not
    needed)."""
    used = _used(atom_group, rx.size)
    if used.all():
        return atom_group, rx, ry, members
    atom_group = _renumbered(atom_group, used)
    rx, ry = rx[used], ry[used]
    return atom_group, rx, ry, None if members is None else _Members(atom_group, rx.size)


@nb.njit(cache=True)
def _used(atom_group: NDArray[np.int64], n_groups: int) -> NDArray[np.bool_]:  # pragma: no cover
    """Whether each of ``n_groups`` groups has an atom (``bincount(placed) > 0``)."""
    used = np.zeros(n_groups, np.bool_)
    for g in atom_group:
        if g >= 0:
            used[g] = True
    return used


@nb.njit(cache=True, parallel=True)
def _renumbered(
    atom_group: NDArray[np.int64], keep: NDArray[np.bool_]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """The groups kept renumbered 0..m-1 in their order, the others' atoms -1:
    ``np.where(g >= 0 & keep[g], (np.cumsum(keep) - 1)[g], -1)``, in one pass (each
    atom on its own)."""
    new_id = np.empty(keep.size, np.int64)
    m = 0
    for g in range(keep.size):
        new_id[g] = m if keep[g] else -1
        if keep[g]:
            m += 1
    out = np.empty(atom_group.size, np.int64)
    for a in nb.prange(atom_group.size):
        g = atom_group[a]
        out[a] = new_id[g] if g >= 0 else -1
    return out


@nb.njit(cache=True, parallel=True)
def _run_lists(
    starts: NDArray[np.int64], ok: NDArray[np.bool_]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """:func:`_by_group` of :func:`_run_groups`' answer: the atoms of the valid runs
    (``ok``) one after another, and where each run's atoms start (each run on its own)."""
    n_runs = starts.size - 1
    start = np.zeros(n_runs + 1, np.int64)  # over the valid runs, then cut to their number
    at = np.empty(n_runs, np.int64)  # each valid run's number
    m = 0
    for i in range(n_runs):
        at[i] = m
        if ok[i]:
            start[m + 1] = start[m] + starts[i + 1] - starts[i]
            m += 1
    order = np.empty(start[m], np.int64)
    for i in nb.prange(n_runs):
        if ok[i]:
            b = start[at[i]]
            for a in range(starts[i], starts[i + 1]):
                order[b + a - starts[i]] = a
    return order, start[: m + 1].copy()


@nb.njit(cache=True)
def _run_groups(
    starts: NDArray[np.int64], ok: NDArray[np.bool_]
) -> NDArray[np.int64]:  # pragma: no cover
    """Per atom, its run's number among the valid runs (``ok``), in order; -1 in a run
    that is not valid (the runs: ``starts[i]:starts[i + 1]``)."""
    out = np.empty(starts[-1], np.int64)
    m = 0
    for i in range(starts.size - 1):
        v = m if ok[i] else -1
        if ok[i]:
            m += 1
        for a in range(starts[i], starts[i + 1]):
            out[a] = v
    return out


def _take(values: NDArray[Any], idx: NDArray[np.integer[Any]]) -> NDArray[Any]:
    """``values[idx]`` for a 1-d array and indices (by a compiled gather on every thread
    when they are all in range, else by numpy, which refuses them as it would)."""
    v = np.asarray(values)
    i = np.asarray(idx)
    if (
        v.ndim == 1 and i.ndim == 1 and i.dtype.kind in "iu" and i.size
        and v.dtype.kind in "iufb" and int(i.min()) >= 0 and int(i.max()) < v.size
    ):  # fmt: skip
        return _gather(v, i)
    return v[i]


@nb.njit(cache=True, parallel=True)
def _gather(
    values: NDArray[Any], idx: NDArray[np.integer[Any]]
) -> NDArray[Any]:  # pragma: no cover
    """``values[idx]``, the indices in range (each element on its own)."""
    out = np.empty(idx.size, values.dtype)
    for t in nb.prange(idx.size):
        out[t] = values[idx[t]]
    return out


# --------------------------------------------------------------------------- the rule

#: The finest lattice step a representative is ever snapped to, in metres.
SNAP_FLOOR_M = 1.0
#: The coarsest ladder rung: ``S / 2**MAX_HALVINGS`` for the policy's snap step S.
MAX_HALVINGS = 16


@nb.njit(cache=True)
def representative_step(hide: float, step: float) -> float:
    """The lattice step of a group whose representative must hide ``hide`` metres.

    The coarsest rung ``step / 2**m`` (m >= 0) of the ladder below the policy's
    snap step that is still at least ``max(hide, SNAP_FLOOR_M)``; ``step`` itself when
    that is already below. ``hide`` is the group's RMS radius times its largest
    subject's share of its records (see :func:`settle_representatives`).

    Examples
    --------
    >>> representative_step(0.0, 5.0), representative_step(3.0, 5.0), representative_step(9.0, 5.0)
    (1.25, 5.0, 5.0)
    >>> representative_step(2.0, 15.0)
    3.75
    """
    need = max(hide, SNAP_FLOOR_M)
    s = step
    for _ in range(MAX_HALVINGS):
        if s * 0.5 < need:
            break
        s *= 0.5
    return s


@nb.njit(cache=True)
def _rule_point(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    cx: float,
    cy: float,
    r: float,
    s: float,
    o: float,
    ex: float,
    ey: float,
) -> tuple[bool, float, float]:
    """The lattice point ``o + s (i, j)`` nearest (cx, cy) within r of every point.

    Excluded: a point equal to one of the points, or within a relative 1e-9 of (ex, ey)
    on both axes (``|x - ex|, |y - ey| <= 1e-9 max(1, |ex|, |ey|)``: the verifier
    cannot tell such a point from (ex, ey), the centroid, and refuses it). Ties in distance
    go to the smaller y, then the smaller x. Rows of the lattice are scanned
    outward from the centre's row until a row is farther than the best point found;
    in each row the points within r of everyone form an interval, and only its
    lattice points nearest the centre are checked exactly (``sqrt(dx^2 + dy^2) <=
    r``, the check every group's members pass).
    """
    n = px.size
    near = 1e-9 * max(1.0, abs(ex), abs(ey))
    ylo = -math.inf
    yhi = math.inf
    for t in range(n):
        ylo = max(ylo, py[t] - r)
        yhi = min(yhi, py[t] + r)
    if ylo > yhi + 1e-9 * max(1.0, abs(yhi)):
        return False, 0.0, 0.0
    jlo = math.ceil((ylo - o) / s) - 1
    jhi = math.floor((yhi - o) / s) + 1
    j0 = min(max(round((cy - o) / s), jlo), jhi)
    best = math.inf
    bx = 0.0
    by = 0.0
    found = False
    up = j0
    down = j0 - 1
    while up <= jhi or down >= jlo:
        # the next row nearest the centre
        if up > jhi:
            j = down
            down -= 1
        elif down < jlo:
            j = up
            up += 1
        elif abs(o + up * s - cy) <= abs(o + down * s - cy):
            j = up
            up += 1
        else:
            j = down
            down -= 1
        y = o + j * s
        ddy = (y - cy) * (y - cy)
        if ddy > best:
            if up > jhi or abs(o + up * s - cy) ** 2 > best:
                if down < jlo or abs(o + down * s - cy) ** 2 > best:
                    break
            continue
        lo = -math.inf
        hi = math.inf
        empty = False
        for t in range(n):
            h2 = r * r - (y - py[t]) * (y - py[t])
            if h2 < -1e-9 * r * r:
                empty = True
                break
            hw = math.sqrt(max(h2, 0.0))
            lo = max(lo, px[t] - hw)
            hi = min(hi, px[t] + hw)
        if empty or lo > hi + 1e-9 * max(1.0, abs(hi)):
            continue
        ilo = math.ceil((lo - o) / s) - 1
        ihi = math.floor((hi - o) / s) + 1
        i0 = min(max(round((cx - o) / s), ilo), ihi)
        # candidates outward from i0: i0, then the nearer of each side
        left = i0
        right = i0 + 1
        while left >= ilo or right <= ihi:
            if right > ihi:
                i = left
                left -= 1
            elif left < ilo:
                i = right
                right += 1
            elif cx - (o + left * s) <= (o + right * s) - cx:
                i = left
                left -= 1
            else:
                i = right
                right += 1
            x = o + i * s
            d = (x - cx) * (x - cx) + ddy
            if d > best:
                if (left < ilo or (cx - (o + left * s)) ** 2 + ddy > best) and (
                    right > ihi or ((o + right * s) - cx) ** 2 + ddy > best
                ):
                    break
                continue
            if abs(x - ex) <= near and abs(y - ey) <= near:
                continue
            good = True
            for t in range(n):
                dx = px[t] - x
                dy = py[t] - y
                if math.sqrt(dx * dx + dy * dy) > r or (px[t] == x and py[t] == y):
                    good = False
                    break
            if not good:
                continue
            if d < best or (d == best and (y < by or (y == by and x < bx))):
                best = d
                bx = x
                by = y
                found = True
            break
    return found, bx, by


@nb.njit(cache=True, parallel=True)
def _settle(
    order: NDArray[np.int64],
    starts: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    r: float,
    step: float,
    rx: NDArray[np.float64],
    ry: NDArray[np.float64],
    ok: NDArray[np.bool_],
) -> None:
    """:func:`settle_representatives` over groups given as runs of ``order`` (each group on
    its own: in parallel, in chunks of groups with their own scratch, the same answer
    whatever the threads)."""
    o = (0.5 + OFFSET) * step
    n_groups = starts.size - 1
    chunk = 4096
    for ch in nb.prange((n_groups + chunk - 1) // chunk):
        size = 64
        sx_ = np.empty(size)
        sy_ = np.empty(size)
        sw_ = np.empty(size)
        ss_ = np.empty(size, np.int64)
        for g in range(ch * chunk, min(n_groups, (ch + 1) * chunk)):
            a = starts[g]
            b = starts[g + 1]
            m = b - a
            if m == 0:
                ok[g] = False
                continue
            if m > size:
                size = 2 * m
                sx_ = np.empty(size)
                sy_ = np.empty(size)
                sw_ = np.empty(size)
                ss_ = np.empty(size, np.int64)
            for t in range(m):
                e = order[a + t]
                sx_[t] = ax[e]
                sy_[t] = ay[e]
                sw_[t] = aw[e]
                ss_[t] = asub[e]
            px = sx_[:m]
            py = sy_[:m]
            w = sw_[:m]
            # centroid, in coordinates local to the first member
            x0 = px[0]
            y0 = py[0]
            sw = 0.0
            sx = 0.0
            sy = 0.0
            for t in range(m):
                sw += w[t]
                sx += w[t] * (px[t] - x0)
                sy += w[t] * (py[t] - y0)
            mx = sx / sw
            my = sy / sw
            cx = x0 + mx
            cy = y0 + my
            sq = 0.0
            for t in range(m):
                ex = px[t] - x0 - mx
                ey = py[t] - y0 - my
                sq += w[t] * (ex * ex + ey * ey)
            # the largest subject's records (each subject's summed in member order)
            wmax = 0.0
            for t in range(m):
                first = True
                for u in range(t):
                    if ss_[u] == ss_[t]:
                        first = False
                        break
                if not first:
                    continue
                run = 0.0
                for u in range(t, m):
                    if ss_[u] == ss_[t]:
                        run += w[u]
                        wmax = max(wmax, run)
            hide = math.sqrt(sq / sw) * wmax / sw
            s = representative_step(hide, step)
            good, qx, qy = _rule_point(px, py, cx, cy, r, s, o, cx, cy)
            ok[g] = good
            rx[g] = qx
            ry[g] = qy


def settle_representatives(
    group_of: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    weight: NDArray[np.float64],
    subjects: NDArray[np.int64],
    n_groups: int,
    r_work: float,
    step: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Every group's representative by the rule of ``docs/release-format.md``.

    For a group of W records with centroid c, RMS radius sigma (records' distances
    to c) and a largest subject of w records, the lattice step is
    :func:`representative_step` of ``sigma * w / W`` (never coarser than ``step``,
    never finer than ``SNAP_FLOOR_M`` unless ``step`` is); the representative is the
    point of that lattice (origin ``(0.5 + OFFSET) * step`` on both axes) nearest c that lies within
    ``r_work`` of every member, equal to no member's coordinate, and neither c nor within
    a relative 1e-9 of c on both axes (ties: the smaller y, then x). A group that holds
    a point of the coarsest lattice within ``r_work`` of everyone (every group this
    module forms) always has one.

    Parameters
    ----------
    group_of
        Group of every point (atom or record), -1 for none.
    x, y, weight, subjects
        Working coordinates, record count and subject code of every point.
    n_groups
        Number of groups.
    r_work, step
        The radius in working metres and the policy's snap step.

    Returns
    -------
    rep_x, rep_y, ok
        Per group; ``ok`` is false for a group with no such point.

    Examples
    --------
    >>> import numpy as np
    >>> one = np.zeros(5, np.int64)
    >>> rx, ry, ok = settle_representatives(
    ...     one, np.arange(5.0), np.zeros(5), np.ones(5), np.arange(5), 1, 100.0, 5.0
    ... )
    >>> bool(ok[0]), round(float(rx[0]), 6), round(float(ry[0]), 6)
    (True, 1.440983, 0.190983)
    """
    # the placed points by group, ascending within each (a counting sort)
    order, starts = _by_group(np.ascontiguousarray(group_of, dtype=np.int64), n_groups)
    rx = np.zeros(n_groups)
    ry = np.zeros(n_groups)
    ok = np.zeros(n_groups, dtype=np.bool_)
    _settle(
        np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64),
        np.ascontiguousarray(weight, dtype=np.float64),
        np.ascontiguousarray(subjects, dtype=np.int64), float(r_work), float(step), rx, ry, ok,
    )  # fmt: skip
    return rx, ry, ok


def _settled(
    atom_group: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    n_groups: int,
    r_work: float,
    step: float,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Every group's representative by the rule (:func:`settle_representatives`).

    The steps above keep each representative on the coarsest lattice and within
    r_max of every member, but not necessarily where the rule puts it (a group that
    lost or gained members keeps its point). The rule always finds a point for such
    a group; one that has none (its only covering points are members' coordinates or
    its exact centroid) is dissolved: its atoms are left without a group, and the groups
    after it are renumbered.
    """
    rx, ry, ok = settle_representatives(atom_group, ax, ay, aw, asub, n_groups, r_work, step)
    if not ok.all():
        new_id = np.cumsum(ok) - 1
        keep = (atom_group >= 0) & ok[np.maximum(atom_group, 0)]
        atom_group = np.where(keep, new_id[np.maximum(atom_group, 0)], -1)
        rx, ry = rx[ok], ry[ok]
    return atom_group, rx, ry


# --------------------------------------------------------------------------- local search

#: Sweeps of :func:`_improve` over the atoms at most.
IMPROVE_SWEEPS = 3
#: Groups of more than this many times k atoms are left alone by the local search and
#: the re-cuts (their changes cost the most and gain the least).
CAP_K = 4
#: Nearest atoms of other groups, per atom, whose groups :func:`_improve` tries.
IMPROVE_NEIGHBOURS = 12
#: Side of the grid the neighbours are found on, in median group RMS radii.
CELL_RADII = 2.0
#: How far from an atom its candidate neighbours are sought, in its group's RMS radii.
REACH_RADII = 2.0
#: A change is costed exactly only when its gain with the centroids held is above
#: ``-SCREEN`` times the distances involved.
SCREEN = 0.3
#: Atoms per piece of the sweep: the pieces' inner atoms are visited in parallel. Fixed,
#: so that the groups never depend on the number of threads.
IMPROVE_PIECE = 1 << 17


@nb.njit(cache=True)
def _cost_of(
    g: KernelInt,
    drop: KernelInt,
    extra: KernelInt,
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    sw: float,
    sx: float,
    sy: float,
) -> float:
    """Sum of weighted distances to the centroid ``(sx, sy) / sw`` of group g's atoms
    without atom ``drop`` and with atom ``extra`` (-1: none)."""
    cx = sx / sw
    cy = sy / sw
    d = 0.0
    a = head[g]
    while a >= 0:
        if a != drop:
            d += aw[a] * math.sqrt((ax[a] - cx) ** 2 + (ay[a] - cy) ** 2)
        a = nxt[a]
    if extra >= 0:
        d += aw[extra] * math.sqrt((ax[extra] - cx) ** 2 + (ay[extra] - cy) ** 2)
    return d


@nb.njit(cache=True)
def _slope_of(
    g: KernelInt,
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    cx: float,
    cy: float,
) -> tuple[float, float, float]:
    """Sum of weighted distances of group g's atoms to the point ``(cx, cy)``, and its
    gradient there (a subgradient: an atom at the point adds nothing)."""
    d = 0.0
    gx = 0.0
    gy = 0.0
    a = head[g]
    while a >= 0:
        e = math.sqrt((ax[a] - cx) ** 2 + (ay[a] - cy) ** 2)
        d += aw[a] * e
        if e > 0.0:
            gx += aw[a] * (cx - ax[a]) / e
            gy += aw[a] * (cy - ay[a]) / e
        a = nxt[a]
    return d, gx, gy


@nb.njit(cache=True, inline="always")
def _below(
    f: float,
    gx: float,
    gy: float,
    cx: float,
    cy: float,
    out_w: float,
    out_x: float,
    out_y: float,
    out_d: float,
    in_w: float,
    in_x: float,
    in_y: float,
    in_d: float,
    nx: float,
    ny: float,
) -> tuple[float, float]:
    """A lower bound on a group's cost after one atom leaves (weight ``out_w``, at
    ``(out_x, out_y)``, ``out_d`` from the centroid; weight 0: none) and one joins
    (``in_*``), measured to its new centroid ``(nx, ny)``, and the magnitude of the
    terms summed (for the rounding slack).

    ``f`` and ``(gx, gy)`` are the group's summed distance to its centroid ``(cx, cy)``
    and its gradient there (:func:`_slope_of`). The summed distance is convex in the
    point, so the new members' sum at the old centroid plus its gradient times the
    centroid's shift is below their sum at the new centroid (exact in real arithmetic;
    the caller allows for rounding)."""
    f2 = f - out_w * out_d + in_w * in_d
    hx = gx
    hy = gy
    if out_d > 0.0:
        hx -= out_w * (cx - out_x) / out_d
        hy -= out_w * (cy - out_y) / out_d
    if in_d > 0.0:
        hx += in_w * (cx - in_x) / in_d
        hy += in_w * (cy - in_y) / in_d
    lin = hx * (nx - cx) + hy * (ny - cy)
    return f2 + lin, abs(f) + out_w * out_d + in_w * in_d + abs(lin)


@nb.njit(cache=True)
def _feasible(
    g: int,
    drop: int,
    extra: int,
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    bx: NDArray[np.float64],
    by: NDArray[np.float64],
    bw: NDArray[np.float64],
    bs: NDArray[np.int64],
    k: int,
    r: float,
    step: float,
) -> bool:
    """Whether group g without atom ``drop`` and with atom ``extra`` (-1: none) holds k
    distinct subjects and a point of the coarsest lattice within r of everyone, as
    every group must (``bx``, ``by``, ``bw``, ``bs``: scratch of the group's size + 2).

    The subjects are counted by comparing each with those before it: a group holds at
    most ``cap + 1`` atoms, and no table indexed by subject is shared, so threads can
    run this on groups of their own."""
    m = 0
    a = head[g]
    while a >= 0:
        if a != drop:
            bx[m] = ax[a]
            by[m] = ay[a]
            bw[m] = aw[a]
            bs[m] = asub[a]
            m += 1
        a = nxt[a]
    if extra >= 0:
        bx[m] = ax[extra]
        by[m] = ay[extra]
        bw[m] = aw[extra]
        bs[m] = asub[extra]
        m += 1
    if not has_k_distinct(bs, m, k):
        return False
    ok, _, _ = _covering_rep_nb(bx[:m], by[:m], bw[:m], r, step, np.nan, np.nan)
    return ok


@nb.njit(cache=True, inline="always")
def has_k_distinct(values: NDArray[np.int64], m: int, k: int) -> bool:
    """Whether ``values[:m]`` hold at least k distinct values, each compared with those
    before it (for the few atoms of a group; no table indexed by value, so threads can
    run it side by side)."""
    distinct = 0
    for t in range(m):
        if distinct >= k:
            return True
        new = True
        for u in range(t):
            if values[u] == values[t]:
                new = False
                break
        if new:
            distinct += 1
    return distinct >= k


@nb.njit(cache=True, inline="always")
def _unchanged(
    a: int,
    atom_group: NDArray[np.int64],
    changed: NDArray[np.int64],
    seen_at: NDArray[np.int64],
    nbr: NDArray[np.int32],
) -> bool:
    """Whether neither a's group nor any of its neighbours' groups changed since a's last
    visit (``changed``: per group, the time it last changed; ``seen_at``: per atom, the
    time of its last visit, -1 for none)."""
    last = seen_at[a]
    if last < 0 or changed[atom_group[a]] > last:
        return False
    for q in range(nbr.shape[1]):
        b = nbr[a, q]
        if b >= 0 and atom_group[b] >= 0 and changed[atom_group[b]] > last:
            return False
    return True


@nb.njit(cache=True)
def _sweep_piece(
    p: KernelInt,
    piece: KernelInt,
    now: KernelInt,
    rest: KernelBool,
    inner: NDArray[np.bool_],
    home: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    prv: NDArray[np.int64],
    size: NDArray[np.int64],
    sw: NDArray[np.float64],
    sx: NDArray[np.float64],
    sy: NDArray[np.float64],
    cost: NDArray[np.float64],
    slope: NDArray[np.float64],
    changed: NDArray[np.int64],
    seen_at: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    nbr: NDArray[np.int32],
    k: int,
    r: float,
    step: float,
    cap: int,
    screen: float,
    bound: KernelBool,
    order: NDArray[np.int64] | None = None,
    lo: int = 0,
    hi: int = 0,
) -> int:
    """One phase of a sweep of :func:`_improve` from time ``now``; returns the changes made.

    ``rest`` False: piece p marks its inner atoms in ``inner`` and visits them in index
    order, reading and writing only its own atoms and the groups whose ``home`` is p.
    ``rest`` True: the atoms not marked inner are visited, in index order.

    In a visit an atom takes its best change. What it decides depends only on the state
    of its group and of its neighbours' groups: ``changed[g]`` is the time group g last
    changed and ``seen_at[a]`` the time atom a was last visited (-1: never), and an atom
    none of whose groups changed since its last visit (which made no change) is skipped.

    A change's gain is the groups' summed distance before (``cost``) less their summed
    distances after, each a walk over a group (:func:`_cost_of`). With ``bound``, a
    change is first bounded in O(1): ``slope[g]`` holds group g's summed distance to its
    centroid and its gradient there (:func:`_slope_of`), from which :func:`_below` gives
    a lower bound on each group's summed distance after the change. A change whose gain
    cannot exceed the threshold even so (with a margin for rounding far above it) is
    not costed: the walk would have refused it, so the decisions are those without
    ``bound``, only cheaper.
    """
    na = atom_group.size
    nq = nbr.shape[1]
    no_atom = np.int64(-1)  # typed, not literal: one compiled _cost_of
    bx = np.empty(cap + 2)
    by = np.empty(cap + 2)
    bw = np.empty(cap + 2)
    bs = np.empty(cap + 2, np.int64)
    c_gain = np.empty(2 * nq)
    c_h = np.empty(2 * nq, np.int64)
    c_b = np.empty(2 * nq, np.int64)
    c_g = np.empty(2 * nq)
    c_hh = np.empty(2 * nq)
    c_tried = np.zeros(2 * nq, np.bool_)
    t = int(now)
    p_lo = int(p * piece)  # piece p's atoms: p_lo <= b < p_hi
    p_hi = int((p + 1) * piece)
    if order is None:
        lo = 0 if rest else p_lo
        hi = na if rest else min(na, p_hi)
    for i in range(lo, hi):
        if order is None:
            a = i
        else:
            a = order[i]
        g = atom_group[a]
        if order is not None:
            pass
        elif rest:
            if inner[a]:
                continue
        else:
            ok = g >= 0 and home[g] == p
            if ok:
                for q in range(nq):
                    b = nbr[a, q]
                    if b < 0:
                        continue
                    # b's piece first: another piece's atoms are not read
                    if b < p_lo or b >= p_hi or (atom_group[b] >= 0 and home[atom_group[b]] != p):
                        ok = False
                        break
            inner[a] = ok
            if not ok:
                continue
        if g < 0 or size[g] > cap or _unchanged(a, atom_group, changed, seen_at, nbr):
            continue
        seen_at[a] = t
        wa = aw[a]
        nc = 0
        cg_move = -1.0
        for q in range(nq):
            b = np.int64(nbr[a, q])  # int64, as c_b: one compiled _cost_of
            if b < 0:
                continue
            h = atom_group[b]
            if h < 0 or h == g or size[h] >= cap:
                continue
            base = cost[g] + cost[h]
            eps = 1e-9 * (1.0 + base)
            # first-order gains (centroids held): only promising changes are costed
            dag = math.sqrt((ax[a] - sx[g] / sw[g]) ** 2 + (ay[a] - sy[g] / sw[g]) ** 2)
            dah = math.sqrt((ax[a] - sx[h] / sw[h]) ** 2 + (ay[a] - sy[h] / sw[h]) ** 2)
            dbg = math.sqrt((ax[b] - sx[g] / sw[g]) ** 2 + (ay[b] - sy[g] / sw[g]) ** 2)
            dbh = math.sqrt((ax[b] - sx[h] / sw[h]) ** 2 + (ay[b] - sy[h] / sw[h]) ** 2)
            move_hint = wa * (dag - dah) > -screen * (dag + dah) * wa
            swap_hint = wa * (dag - dah) + aw[b] * (dbh - dbg) > -screen * (
                wa * (dag + dah) + aw[b] * (dbg + dbh)
            )
            cxg = sx[g] / sw[g]
            cyg = sy[g] / sw[g]
            cxh = sx[h] / sw[h]
            cyh = sy[h] / sw[h]
            # the bounds' margins for rounding: of the walks (per atom) and of the
            # centroids (per coordinate)
            rel = 1e-12 * (size[g] + size[h] + 16)
            off = 1e-14 * (sw[g] + sw[h] + wa + aw[b]) * (abs(cxg) + abs(cyg) + abs(cxh) + abs(cyh))
            # move a to h (once per h; g must keep k atoms to keep k subjects)
            seen = False
            for q2 in range(q):
                b2 = nbr[a, q2]
                if b2 >= 0 and atom_group[b2] == h:
                    seen = True
                    break
            if move_hint and not seen and size[g] - 1 >= k and bound:
                lg, mg = _below(slope[g, 0], slope[g, 1], slope[g, 2], cxg, cyg, wa, ax[a],
                                ay[a], dag, 0.0, 0.0, 0.0, 0.0, (sx[g] - wa * ax[a]) / (sw[g] - wa),
                                (sy[g] - wa * ay[a]) / (sw[g] - wa))  # fmt: skip
                lh, mh = _below(slope[h, 0], slope[h, 1], slope[h, 2], cxh, cyh, 0.0, 0.0, 0.0,
                                0.0, wa, ax[a], ay[a], dah, (sx[h] + wa * ax[a]) / (sw[h] + wa),
                                (sy[h] + wa * ay[a]) / (sw[h] + wa))  # fmt: skip
                if base - lg - lh + rel * (1.0 + base + mg + mh) + off <= eps:
                    move_hint = False
            if move_hint and not seen and size[g] - 1 >= k:
                # g without a: the same for every h, costed once per atom
                if cg_move < 0.0:
                    cg_move = _cost_of(g, a, no_atom, head, nxt, ax, ay, aw, sw[g] - wa,
                                       sx[g] - wa * ax[a], sy[g] - wa * ay[a])  # fmt: skip
                cg = cg_move
                ch = _cost_of(h, no_atom, a, head, nxt, ax, ay, aw, sw[h] + wa, sx[h] + wa * ax[a],
                              sy[h] + wa * ay[a])  # fmt: skip
                if base - cg - ch > eps:
                    c_gain[nc], c_h[nc], c_b[nc], c_g[nc], c_hh[nc] = base - cg - ch, h, -1, cg, ch
                    nc += 1
            # swap a and b
            if not swap_hint:
                continue
            wb = aw[b]
            if bound:
                lg, mg = _below(slope[g, 0], slope[g, 1], slope[g, 2], cxg, cyg, wa, ax[a],
                                ay[a], dag, wb, ax[b], ay[b], dbg,
                                (sx[g] - wa * ax[a] + wb * ax[b]) / (sw[g] - wa + wb),
                                (sy[g] - wa * ay[a] + wb * ay[b]) / (sw[g] - wa + wb))  # fmt: skip
                lh, mh = _below(slope[h, 0], slope[h, 1], slope[h, 2], cxh, cyh, wb, ax[b],
                                ay[b], dbh, wa, ax[a], ay[a], dah,
                                (sx[h] - wb * ax[b] + wa * ax[a]) / (sw[h] - wb + wa),
                                (sy[h] - wb * ay[b] + wa * ay[a]) / (sw[h] - wb + wa))  # fmt: skip
                if base - lg - lh + rel * (1.0 + base + mg + mh) + off <= eps:
                    continue
            cg = _cost_of(g, a, b, head, nxt, ax, ay, aw, sw[g] - wa + wb,
                          sx[g] - wa * ax[a] + wb * ax[b],
                          sy[g] - wa * ay[a] + wb * ay[b])  # fmt: skip
            ch = _cost_of(h, b, a, head, nxt, ax, ay, aw, sw[h] - wb + wa,
                          sx[h] - wb * ax[b] + wa * ax[a],
                          sy[h] - wb * ay[b] + wa * ay[a])  # fmt: skip
            if base - cg - ch > eps:
                c_gain[nc], c_h[nc], c_b[nc], c_g[nc], c_hh[nc] = base - cg - ch, h, b, cg, ch
                nc += 1
        if nc == 0:
            continue
        # the best valid change (ties: the first found), the greatest gain first
        pick = -1
        c_tried[:nc] = False
        for _ in range(nc):
            o = -1
            for e in range(nc):
                if not c_tried[e] and (o < 0 or c_gain[e] > c_gain[o]):
                    o = e
            c_tried[o] = True
            h = c_h[o]
            b = c_b[o]
            if _feasible(g, a, b, head, nxt, ax, ay, aw, asub, bx, by, bw, bs, k, r, step) and (
                _feasible(h, b, a, head, nxt, ax, ay, aw, asub, bx, by, bw, bs, k, r, step)
            ):
                pick = o
                break
        if pick < 0:
            continue
        h = c_h[pick]
        # a leaves g for h; b (if any) leaves h for g
        _move_atom(a, g, h, head, nxt, prv, atom_group, aw, ax, ay, sw, sx, sy, size)
        b = c_b[pick]
        if b >= 0:
            _move_atom(b, h, g, head, nxt, prv, atom_group, aw, ax, ay, sw, sx, sy, size)
        cost[g] = c_g[pick]
        cost[h] = c_hh[pick]
        for e in (g, h):
            slope[e, 0], slope[e, 1], slope[e, 2] = _slope_of(
                e, head, nxt, ax, ay, aw, sx[e] / sw[e], sy[e] / sw[e]
            )
        changed[g] = t + 1
        changed[h] = t + 1
        t += 1
    return int(t - now)


@nb.njit(cache=True)
def _group_lists(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
) -> tuple[
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
]:  # pragma: no cover - compiled
    """The local search's group lists: per group its first atom (``head``, -1: empty),
    per atom the next and previous atom of its group (in index order), per group its
    atoms, weight and weighted coordinate sums (summed in index order)."""
    head, nxt, size, sw, sx, sy = _group_links(atom_group, n_groups, ax, ay, aw)
    return head, nxt, _prev_links(nxt), size, sw, sx, sy


@nb.njit(cache=True, parallel=True)
def _group_links(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
) -> tuple[
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
]:  # pragma: no cover - compiled
    """:func:`_group_lists` without the previous atoms (``head``, ``nxt``, ``size`` and
    the sums, each group's summed along its list: in index order)."""
    na = ax.size
    head = np.full(n_groups, -1, np.int64)
    nxt = np.full(na, -1, np.int64)
    size = np.zeros(n_groups, np.int64)
    sw = np.zeros(n_groups)
    sx = np.zeros(n_groups)
    sy = np.zeros(n_groups)
    for a in range(na - 1, -1, -1):
        g = atom_group[a]
        if g < 0:
            continue
        nxt[a] = head[g]
        head[g] = a
        size[g] += 1
    for g in nb.prange(n_groups):
        a = head[g]
        while a >= 0:
            sw[g] += aw[a]
            sx[g] += aw[a] * ax[a]
            sy[g] += aw[a] * ay[a]
            a = nxt[a]
    return head, nxt, size, sw, sx, sy


@nb.njit(cache=True, parallel=True)
def _prev_links(nxt: NDArray[np.int64]) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Per atom, the atom before it in its group's list (-1: the first), from ``nxt``
    (each atom on its own: no two point to the same next atom)."""
    prv = np.full(nxt.size, -1, np.int64)
    for a in nb.prange(nxt.size):
        if nxt[a] >= 0:
            prv[nxt[a]] = a
    return prv


@nb.njit(cache=True, parallel=True)
def _group_costs(
    need: NDArray[np.bool_],
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    sw: NDArray[np.float64],
    sx: NDArray[np.float64],
    sy: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:  # pragma: no cover - compiled
    """Per group marked in ``need`` (and not empty), its cost (summed distance to its
    centroid) and the slope bound of :func:`_slope_of`; 0 for the others. Each group on
    its own, so the threads' order does not matter."""
    n_groups = head.size
    cost = np.zeros(n_groups)
    slope = np.zeros((n_groups, 3))
    no_atom = np.int64(-1)  # typed, not literal: one compiled _cost_of (see _sweep_piece)
    for i in nb.prange(n_groups):
        gi = np.int64(i)
        if need[gi] and head[gi] >= 0:
            cost[gi] = _cost_of(gi, no_atom, no_atom, head, nxt, ax, ay, aw, sw[gi], sx[gi],
                                sy[gi])  # fmt: skip
            slope[gi, 0], slope[gi, 1], slope[gi, 2] = _slope_of(
                gi, head, nxt, ax, ay, aw, sx[gi] / sw[gi], sy[gi] / sw[gi]
            )
    return cost, slope


@nb.njit(cache=True)
def _improve(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    nbr: NDArray[np.int32],
    k: int,
    r: float,
    step: float,
    cap: int,
    sweeps: int,
    screen: float,
    piece: int,
    bound: bool = True,
) -> int:
    """1-opt local search: move an atom to a neighbouring group, or swap two atoms of
    neighbouring groups, when it lowers the sum of records' distances to their group's
    centroid and both groups stay valid (>= k distinct subjects, a lattice point within
    r of every member). Each atom takes its best change; groups of more than ``cap``
    atoms are left alone. Returns the number of changes made.

    The atoms are cut into pieces of ``piece`` consecutive atoms (along the curve). In
    each sweep, first every piece visits, in index order, its *inner* atoms: those whose
    group and whose neighbours' groups lie wholly in the piece. A change an inner atom
    makes touches only groups of its piece, and the groups of a piece are read only by
    its own inner atoms, so the pieces run in parallel and each decides exactly as if it
    ran alone. Then the other atoms are visited, in index order: as the components of
    the groups they touch are independent, each component's atoms in index order, the
    components side by side (:func:`_by_component`; the same groups as one thread
    visiting them all in index order). The result depends on ``piece``, never on the
    number of threads; with one piece it is the plain sweep in index order.

    ``bound`` (the default) skips, without costing them, the changes an O(1) lower
    bound on their cost shows cannot gain (see :func:`_sweep_piece`); the groups are
    those of ``bound`` False.
    """
    head, nxt, prv, size, sw, sx, sy = _group_lists(atom_group, n_groups, ax, ay, aw)
    return _improve_on(atom_group, n_groups, head, nxt, prv, size, sw, sx, sy, ax, ay, aw, asub,
                       nbr, k, r, step, cap, sweeps, screen, piece, np.bool_(bound))  # fmt: skip


@nb.njit(cache=True, parallel=True)
def _improve_on(
    atom_group: NDArray[np.int64],
    n_groups: int,
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    prv: NDArray[np.int64],
    size: NDArray[np.int64],
    sw: NDArray[np.float64],
    sx: NDArray[np.float64],
    sy: NDArray[np.float64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    nbr: NDArray[np.int32],
    k: int,
    r: float,
    step: float,
    cap: int,
    sweeps: int,
    screen: float,
    piece: int,
    bound: KernelBool,
) -> int:
    """:func:`_improve` given the group lists of :func:`_group_lists` (changed in place)."""
    na = ax.size
    cost, slope = _group_costs(np.ones(n_groups, np.bool_), head, nxt, ax, ay, aw, sw, sx, sy)
    changed = np.zeros(n_groups, np.int64)
    seen_at = np.full(na, -1, np.int64)
    n_pieces = max(1, (na + piece - 1) // piece)
    inner = np.zeros(na, np.bool_)
    home = np.empty(n_groups, np.int64)  # the piece holding all of a group, else -1
    made_in = np.zeros(n_pieces, np.int64)
    changes = 0
    now = np.int64(1)
    # typed values, not literals: numba compiles a callee once per argument types, and
    # a literal 0 or True is a type of its own (five compiles of _sweep_piece, ~5 s each)
    first = np.int64(0)
    pieces = np.bool_(False)
    others = np.bool_(True)
    bounded = np.bool_(bound)
    for _sweep in range(sweeps):
        home[:] = -2
        for a in range(na):
            g = atom_group[a]
            if g >= 0:
                pa = a // piece
                if home[g] == -2:
                    home[g] = pa
                elif home[g] != pa:
                    home[g] = -1
        for pi in nb.prange(n_pieces):
            made_in[pi] = _sweep_piece(np.int64(pi), piece, now, pieces, inner, home, atom_group,
                                       head, nxt, prv, size, sw, sx, sy, cost, slope, changed,
                                       seen_at, ax, ay, aw, asub, nbr, k, r, step, cap, screen,
                                       bounded)  # fmt: skip
        made = int(made_in.sum())
        now += int(made_in.max()) + 1
        # the atoms between pieces (those of a group: the others are never visited), by
        # components side by side (:func:`_by_component`)
        between = np.flatnonzero(~inner & (atom_group >= 0))
        order, bounds = _by_component(between, atom_group, nbr, n_groups,
                                      np.zeros(n_groups, np.bool_))  # fmt: skip
        made_by = np.zeros(max(1, bounds.size - 1), np.int64)
        for j in nb.prange(bounds.size - 1):
            made_by[j] = _sweep_piece(first, piece, now, others, inner, home, atom_group, head,
                                      nxt, prv, size, sw, sx, sy, cost, slope, changed, seen_at,
                                      ax, ay, aw, asub, nbr, k, r, step, cap, screen, bounded,
                                      order, bounds[j], bounds[j + 1])  # fmt: skip
        now += int(made_by.max()) + 1
        made += int(made_by.sum())
        changes += made
        if made == 0:
            break
    return changes


#: Sweeps of :func:`_polish` (the local search again, after the re-cuts, over the atoms
#: near a re-cut group).
POLISH_SWEEPS = 1


#: Pieces of :func:`_polish`'s work (sets of whole components, about equal in atoms)
#: shared out among the threads; the groups do not depend on it.
POLISH_CHUNKS = 64


@nb.njit(cache=True)
def _root(parent: NDArray[np.int64], g: int) -> int:
    """The representative of g's set in the union-find forest ``parent`` (halving the
    path on the way)."""
    while parent[g] != g:
        parent[g] = parent[parent[g]]
        g = parent[g]
    return g


@nb.njit(cache=True, parallel=True)
def _polish(
    atom_group: NDArray[np.int64],
    before: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    nbr: NDArray[np.int32],
    k: int,
    r: float,
    step: float,
    cap: int,
    screen: float,
) -> int:
    """One sweep of the local search after the re-cuts, over the atoms they may have
    given a new change: those of a group the re-cuts changed (``before``: the groups
    before them) and those with one of their neighbours in such a group.

    The moves, swaps, bounds and exact checks are :func:`_improve`'s (:func:`_sweep_piece`),
    with the neighbour lists the local search used (``nbr``: atoms of other groups
    then; an atom of the same group now is passed over). A visited atom takes a change
    only when it lowers the summed distance to the centroids and both groups stay
    valid, so the guarantee holds and the objective never rises. Returns the number of
    changes made.

    The groups are those of visiting the atoms one after another in index order, on
    any number of threads. A visit reads and changes only the atom's group and its
    neighbours' groups, and a change moves an atom between two of them: so, with the
    groups joined into components wherever a visited atom's group and a neighbour's
    group are both placed (before the sweep), every atom stays in a group of its first
    component, and a visit reads and writes only groups of its atom's component and the
    atoms in them. The components are independent: each visits its own atoms in index
    order, as the single sweep would, and they are shared out among the threads in
    pieces of whole components (:data:`POLISH_CHUNKS`). Each visit sees exactly the
    state it would have seen in the single sweep.
    """
    na = ax.size
    nq = nbr.shape[1]
    dirty = np.zeros(n_groups, np.bool_)
    n_dirty = 0
    for a in range(na):
        g = atom_group[a]
        if g != before[a]:
            for e in (g, before[a]):
                if e >= 0 and not dirty[e]:
                    dirty[e] = True
                    n_dirty += 1
    if n_dirty == 0:
        return 0
    # the atoms to visit, each on its own
    visit = np.zeros(na, np.bool_)
    for a in nb.prange(na):
        g = atom_group[a]
        if g < 0:
            continue
        v = dirty[g]
        if not v:
            for q in range(nq):
                b = nbr[a, q]
                if b >= 0 and atom_group[b] >= 0 and dirty[atom_group[b]]:
                    v = True
                    break
        visit[a] = v
    # the groups whose costs the visits read, and the visits in pieces of components
    need = np.zeros(n_groups, np.bool_)
    order, bounds = _by_component(np.flatnonzero(visit), atom_group, nbr, n_groups, need)
    n_chunks = bounds.size - 1
    head, nxt, prv, size, sw, sx, sy = _group_lists(atom_group, n_groups, ax, ay, aw)
    cost, slope = _group_costs(need, head, nxt, ax, ay, aw, sw, sx, sy)
    # every atom as if visited at time 0, the re-cut groups changed at time 1
    changed = np.zeros(n_groups, np.int64)
    for gi in range(n_groups):
        if dirty[gi]:
            changed[gi] = 1
    seen_at = np.zeros(na, np.int64)
    made = np.zeros(n_chunks, np.int64)
    home = np.full(n_groups, -1, np.int64)  # not read by a listed phase
    first = np.int64(0)  # typed values, not literals: see _improve
    one = np.int64(1)
    listed = np.bool_(True)
    bounded = np.bool_(True)
    for j in nb.prange(n_chunks):
        made[j] = _sweep_piece(first, one, one, listed, visit, home, atom_group, head, nxt,
                               prv, size, sw, sx, sy, cost, slope, changed, seen_at, ax, ay, aw,
                               asub, nbr, k, r, step, cap, screen, bounded, order, bounds[j],
                               bounds[j + 1])  # fmt: skip
    return int(made.sum())


@nb.njit(cache=True)
def _by_component(
    atoms: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    nbr: NDArray[np.int32],
    n_groups: int,
    need: NDArray[np.bool_],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """Atoms to visit (ascending), put together by component, for visits side by side.

    A visit (:func:`_sweep_piece`) reads and changes only its atom's group and its
    neighbours' groups, and a change moves an atom between two of them: so, with the
    groups joined into components wherever an atom's group and a neighbour's group are
    both placed, every atom stays in a group of its first component, and the visits of
    one component read and write only its groups and their atoms. Each component's atoms
    visited in index order are the visits in index order of all of them, whatever the
    components' order.

    Returns the atoms, component by component (numbered in order of their first atom)
    and in index order within each, and where each piece of whole components starts
    (about ``atoms.size / POLISH_CHUNKS`` atoms each) and the last ends. ``need`` is set
    for the groups the visits read."""
    nq = nbr.shape[1]
    parent = np.arange(n_groups)
    for a in atoms:
        g = atom_group[a]
        need[g] = True
        for q in range(nq):
            b = nbr[a, q]
            if b >= 0 and atom_group[b] >= 0:
                h = atom_group[b]
                need[h] = True
                rg = _root(parent, g)
                rh = _root(parent, h)
                if rg != rh:
                    parent[max(rg, rh)] = min(rg, rh)
    # the components numbered in order of their first atom, their atoms listed together
    # in index order
    comp = np.full(n_groups, -1, np.int64)
    of = np.empty(atoms.size, np.int64)
    n_comp = 0
    for i in range(atoms.size):
        rg = _root(parent, atom_group[atoms[i]])
        if comp[rg] < 0:
            comp[rg] = n_comp
            n_comp += 1
        of[i] = comp[rg]
    start = np.zeros(n_comp + 1, np.int64)
    for i in range(atoms.size):
        start[of[i] + 1] += 1
    for c in range(n_comp):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    order = np.empty(atoms.size, np.int64)
    for i in range(atoms.size):
        order[fill[of[i]]] = atoms[i]
        fill[of[i]] += 1
    # pieces of whole components, about atoms.size / POLISH_CHUNKS atoms each
    n_chunks = min(POLISH_CHUNKS, n_comp)
    bounds = np.empty(n_chunks + 1, np.int64)
    bounds[0] = 0
    c = 0
    for j in range(1, n_chunks):
        while c < n_comp and start[c] * n_chunks < j * atoms.size:
            c += 1
        bounds[j] = max(start[c], bounds[j - 1])
    bounds[n_chunks] = atoms.size
    return order, bounds


@nb.njit(cache=True)
def _move_atom(a: int, g: int, h: int, head: NDArray[np.int64], nxt: NDArray[np.int64],
               prv: NDArray[np.int64], atom_group: NDArray[np.int64], aw: NDArray[np.float64],
               ax: NDArray[np.float64], ay: NDArray[np.float64], sw: NDArray[np.float64],
               sx: NDArray[np.float64], sy: NDArray[np.float64],
               size: NDArray[np.int64]) -> None:  # fmt: skip
    """Atom ``a`` leaves group ``g`` for ``h``: its list links and the groups' sums."""
    w = aw[a]
    _unlink(a, g, head, nxt, prv)
    _link(a, h, head, nxt, prv)
    atom_group[a] = h
    sw[g] -= w
    sx[g] -= w * ax[a]
    sy[g] -= w * ay[a]
    sw[h] += w
    sx[h] += w * ax[a]
    sy[h] += w * ay[a]
    size[g] -= 1
    size[h] += 1


@nb.njit(cache=True)
def _unlink(a: int, g: int, head: NDArray[np.int64], nxt: NDArray[np.int64],
            prv: NDArray[np.int64]) -> None:  # fmt: skip
    if prv[a] >= 0:
        nxt[prv[a]] = nxt[a]
    else:
        head[g] = nxt[a]
    if nxt[a] >= 0:
        prv[nxt[a]] = prv[a]
    nxt[a] = -1
    prv[a] = -1


@nb.njit(cache=True)
def _link(a: int, g: int, head: NDArray[np.int64], nxt: NDArray[np.int64],
          prv: NDArray[np.int64]) -> None:  # fmt: skip
    # kept in index order, so sums and scans never depend on the order of changes
    b = head[g]
    if b < 0 or b > a:
        nxt[a] = b
        prv[a] = -1
        if b >= 0:
            prv[b] = a
        head[g] = a
        return
    while nxt[b] >= 0 and nxt[b] < a:
        b = nxt[b]
    nxt[a] = nxt[b]
    prv[a] = b
    if nxt[b] >= 0:
        prv[nxt[b]] = a
    nxt[b] = a


def _improve_groups(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    k: int,
    r_work: float,
    step: float,
    *,
    lists: list[NDArray[np.int32]] | None = None,
) -> int:
    """Run :func:`_improve` over the placed atoms (in place on ``atom_group``).

    ``lists``, when given, receives the neighbour lists the search used (for
    :func:`_polish_groups`; nothing when there was no search)."""
    placed = np.flatnonzero(atom_group >= 0)
    if placed.size <= k or n_groups < 2:
        return 0
    ax = np.ascontiguousarray(ax, dtype=np.float64)
    ay = np.ascontiguousarray(ay, dtype=np.float64)
    aw = np.ascontiguousarray(aw, dtype=np.float64)
    # the group lists the search runs on, and from them the groups' spread (the links
    # back are made after the neighbour lists, which need the most memory)
    head, nxt, size, sw, sx, sy = _group_links(atom_group, n_groups, ax, ay, aw)
    d2 = _spread_of(head, nxt, ax, ay, aw, sw, sx, sy)
    # Cells about the size of a group: the median of the groups' RMS radii.
    radius = np.sqrt(d2[sw > 0] / sw[sw > 0])
    side = max(float(np.median(radius)) * CELL_RADII, r_work / 64.0, 1e-3)
    reach = np.where(sw > 0, REACH_RADII * np.sqrt(d2 / np.maximum(sw, 1e-300)), 0.0)
    nbr = _near_atoms(ax, ay, atom_group, side, IMPROVE_NEIGHBOURS, reach)
    if lists is not None:
        lists.append(nbr)
    sub = np.ascontiguousarray(asub, dtype=np.int64).ravel()  # compared by value only
    return int(
        _improve_on(
            atom_group, n_groups, head, nxt, _prev_links(nxt), size, sw, sx, sy, ax, ay, aw, sub,
            nbr, k, r_work, step, CAP_K * k, IMPROVE_SWEEPS, SCREEN, IMPROVE_PIECE, np.bool_(True),
        )
    )  # fmt: skip


@nb.njit(cache=True, parallel=True)
def _spread_of(
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    sw: NDArray[np.float64],
    sx: NDArray[np.float64],
    sy: NDArray[np.float64],
) -> NDArray[np.float64]:  # pragma: no cover - compiled
    """Per group (lists and sums of :func:`_group_lists`), its atoms' weighted summed
    squared distance to its centroid ``(sx, sy) / max(sw, 1e-300)``, summed along its list
    (in index order): the numbers ``np.bincount`` gives for the placed atoms
    (``bincount(g, w * ((x - mx[g]) ** 2 + (y - my[g]) ** 2))``), each group on its own."""
    n_groups = head.size
    d2 = np.zeros(n_groups)
    for g in nb.prange(n_groups):
        m = max(sw[g], 1e-300)
        mx = sx[g] / m
        my = sy[g] / m
        a = head[g]
        while a >= 0:
            dx = ax[a] - mx
            dy = ay[a] - my
            d2[g] += aw[a] * (dx * dx + dy * dy)
            a = nxt[a]
    return d2


def _polish_groups(
    before: NDArray[np.int64],
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    k: int,
    r_work: float,
    step: float,
    nbr: NDArray[np.int32],
) -> int:
    """Run :func:`_polish` (in place on ``atom_group``; ``before``: the groups before the
    re-cuts, ``nbr``: the local search's neighbour lists)."""
    if n_groups < 2:
        return 0
    return int(
        _polish(
            atom_group, np.ascontiguousarray(before, dtype=np.int64), n_groups,
            np.ascontiguousarray(ax, dtype=np.float64), np.ascontiguousarray(ay, dtype=np.float64),
            np.ascontiguousarray(aw, dtype=np.float64),
            np.ascontiguousarray(asub, dtype=np.int64).ravel(), nbr, k, r_work, step, CAP_K * k,
            SCREEN,
        )
    )  # fmt: skip


def _near_atoms(
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    atom_group: NDArray[np.int64],
    side: float,
    q: int,
    reach: NDArray[np.float64],
) -> NDArray[np.int32]:
    """Per placed atom, its ``q`` nearest atoms of other groups in the cells of a grid of
    the given side within ``reach[g]`` of its cell (g its group; at least the 3 x 3
    cells around it, at most 9 x 9), ties to the smaller index, -1 padding.

    The atoms' positions, groups and indices are copied into cell order once, and the
    atoms are answered cell by cell: a cell's neighbouring cells are found once for all
    its atoms, by pointers that only move forward as the cells are taken in key order
    (no table look-up per atom), and are read nearest ring first, so that a cell whose
    nearest point is farther than the q-th distance found is not read (its atoms would
    all be refused: the answer is the same). Each atom's answer depends on the
    positions and groups only, so the threads' order does not matter. The answer is
    int32 (half the memory of int64: it is the local search's largest array).

    The atoms are put in cell order (ties by index) by :func:`stable_argsort`, a
    compiled radix sort on all threads (0.2-0.25 s at 1e7; it was a compiled merge
    sort, one thread, 4-6 s, then numpy's sort of packed keys in two halves, 0.76 s).
    """
    if ax.size == 0:
        return np.full((0, q), -1, np.int32)
    key, wy = _cell_keys(ax, ay, side)
    order = stable_argsort(key)
    skey = _gather(key, order)  # the keys in cell order; the others go before the scan
    del key
    listed = np.ones(0, np.bool_)  # every atom may be listed
    done = np.ones(0, np.bool_)  # and every atom is answered by the scan
    answers = np.empty((0, q), np.int32)
    if run_pairs_above(skey, CROWDED_RUN) > CROWDED_PAIRS:
        crowded = in_runs_above(skey, CROWDED_RUN)
        listed = _listed_by_place(ax, ay, atom_group, q, order, crowded)
        done, answers = _near_in_crowds(
            ax, ay, atom_group, side, q, reach, order, skey, wy, crowded, listed
        )
    out = _near_atoms_sorted(ax, ay, atom_group, side, q, reach, skey, wy, order, listed, done)
    if answers.size:
        out[order[done]] = answers
    return out


#: Neighbours beyond the q an atom lists that :func:`_near_in_crowds` asks for (room for
#: its own group's atoms among the nearest; an atom whose group holds more of them is
#: answered by the scan).
_OWN_ROOM = 12
#: ... and this many when it asks again for those it could not answer.
_OWN_ROOM_MAX = 64
#: Atoms :func:`_near_in_crowds` answers at a time (its arrays are (atoms, q + room)).
_CROWD_CHUNK = 1 << 17


def _near_in_crowds(
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    atom_group: NDArray[np.int64],
    side: float,
    q: int,
    reach: NDArray[np.float64],
    order: NDArray[np.int64],
    skey: NDArray[np.int64],
    wy: int,
    crowded: NDArray[np.bool_],
    listed: NDArray[np.bool_],
) -> tuple[NDArray[np.bool_], NDArray[np.int32]]:
    """The atoms near crowded cells (``crowded``, in cell order) answered by a k-d tree:
    per cell position, whether it is answered here, and the answers of those (in cell
    order).

    Every atom that may read a crowded cell (its cell within 4 cells of one) asks a
    k-d tree of the listed atoms of a group within 8 cells of a crowded cell for its
    ``q +`` :data:`_OWN_ROOM` nearest. Its ``q`` nearest of other groups (exact squared
    distances, ties to the smaller index, as :func:`_near_atoms_sorted` orders them) are
    its answer when the q-th is nearer than the outside of the cells its reach reads
    (its cell's edge plus its rings): every atom those cells hold, and no other, lies
    nearer, so the scan's answer is the same. The answer is taken only when every atom
    as near as the q-th is among those returned. The others (with many atoms of their own
    group about, or with their neighbours far) are left to the scan. A dense spot of
    distinct places (phones at a stadium, GPS fixes with centimetres of jitter) would
    otherwise cost each of its atoms and each atom around it the whole crowd.
    """
    from scipy.spatial import cKDTree

    done = np.zeros(order.size, np.bool_)
    cells = np.unique(skey[crowded])

    def within(rings: int) -> NDArray[np.bool_]:
        # the cells at most ``rings`` columns and rows from a crowded cell (a key past the
        # grid's margin may stand for a cell of the next column: a few atoms more)
        step = np.arange(-rings, rings + 1)
        near = ((cells // wy)[:, None, None] + step[None, :, None]) * wy
        near = near + (cells % wy)[:, None, None] + step[None, None, :]
        return np.isin(skey, np.unique(near))

    asking = within(4)
    pos = np.flatnonzero(asking)
    atoms = order[pos]
    grp = atom_group[atoms]
    pos, atoms, grp = pos[grp >= 0], atoms[grp >= 0], grp[grp >= 0]
    near = within(8)
    if listed.size:
        near &= listed
    cand = order[near]
    cand = np.sort(cand[atom_group[cand] >= 0])
    kq = min(cand.size, q + _OWN_ROOM)
    if kq < q or pos.size == 0:
        return done, np.empty((0, q), np.int32)
    tree = cKDTree(np.column_stack((ax[cand], ay[cand])))
    ox, oy = float(ax.min()), float(ay.min())
    margin = 1e-9 * (abs(ox) + abs(oy) + side + float(np.abs(ax).max() + np.abs(ay).max()))
    # how far each asking atom's reach reads: its cell's edge, then its rings of cells
    read = np.minimum(face_distance(ax[atoms], ox, side), face_distance(ay[atoms], oy, side))
    read += np.clip(np.ceil(reach[grp] / side), 1, 4) * side - margin
    answers = np.empty((pos.size, q), np.int32)
    ok = np.zeros(pos.size, np.bool_)

    def ask(which: NDArray[np.int64], kq: int) -> None:
        chunk = max(1, _CROWD_CHUNK * 24 // kq)  # about the memory of the first round
        for a in range(0, which.size, chunk):
            part = which[a : a + chunk]
            took = np.empty((part.size, q), np.int32)
            ok[part] = _tree_answers(tree, cand, atoms[part], grp[part], read[part], kq, q, ax,
                                     ay, atom_group, took)  # fmt: skip
            answers[part] = took

    ask(np.arange(pos.size), kq)
    # those with more atoms of their own group about than the room, or more atoms as near
    # as their q-th (places on a grid of centimetres): asked again for more
    more = min(cand.size, q + _OWN_ROOM_MAX)
    again = np.flatnonzero(~ok)
    if again.size and more > kq:
        ask(again, more)
    done[pos[ok]] = True
    return done, answers[ok]


def _tree_answers(
    tree: Any,
    cand: NDArray[np.int64],
    at: NDArray[np.int64],
    grp: NDArray[np.int64],
    read: NDArray[np.float64],
    kq: int,
    q: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    atom_group: NDArray[np.int64],
    out: NDArray[np.int32],
) -> NDArray[np.bool_]:
    """For the atoms ``at`` (of groups ``grp``), their ``q`` nearest atoms of other groups
    among the tree's (``cand``, ascending), asked for ``kq``, written to ``out``; whether
    each answer holds: the q-th is nearer than ``read`` and every atom as near as it was
    returned (see :func:`_near_in_crowds`)."""
    px, py = ax[at], ay[at]
    dist, idx = tree.query(np.column_stack((px, py)), k=kq)
    dist, idx = dist.reshape(at.size, kq), idx.reshape(at.size, kq)
    j = cand[np.minimum(idx, cand.size - 1)]
    d2 = (ax[j] - px[:, None]) ** 2 + (ay[j] - py[:, None]) ** 2
    other = (idx < cand.size) & (atom_group[j] != grp[:, None])
    d2[~other] = np.inf
    j[~other] = np.iinfo(np.int64).max
    by = np.argsort(j, axis=1, kind="stable")  # by index, then stably by distance
    d2, j = np.take_along_axis(d2, by, 1), np.take_along_axis(j, by, 1)
    by = np.argsort(d2, axis=1, kind="stable")
    d2, j = np.take_along_axis(d2, by, 1), np.take_along_axis(j, by, 1)
    qth = np.sqrt(d2[:, q - 1])
    # every atom as near as the q-th was returned: the farthest returned is farther
    every = (dist[:, -1] > qth * (1.0 + 1e-9)) | (kq == cand.size)
    ok = np.isfinite(qth) & every & (qth < read)
    out[ok] = j[ok, :q]
    return ok


def _listed_by_place(
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    atom_group: NDArray[np.int64],
    q: int,
    order: NDArray[np.int64],
    crowded: NDArray[np.bool_],
) -> NDArray[np.bool_]:
    """Per atom in cell order, whether :func:`_near_atoms_sorted` lists it as a neighbour:
    in crowded cells (``crowded``, in cell order) only the first atoms of a place (equal
    coordinates), in index order, until for every group they hold ``q`` atoms of other
    groups (:func:`_first_at_places`); elsewhere every atom.

    The atoms of one place lie at one distance from any atom, and ties go to the smaller
    index, so an atom lists at most the ``q`` first atoms of other groups of a place, and
    those are listed still: the answers are the same. Without this, many atoms at one
    place (a care home's residents, records at a postcode's centroid) cost the square of
    their number."""
    listed = np.ones(order.size, np.bool_)
    pos = np.flatnonzero(crowded)
    atoms = order[pos]
    by_place = np.lexsort((atoms, ay[atoms], ax[atoms]))
    pos = pos[by_place]
    atoms = atoms[by_place]
    listed[pos] = _first_at_places(ax[atoms], ay[atoms], atom_group[atoms], q)
    return listed


@nb.njit(cache=True)
def _first_at_places(
    px: NDArray[np.float64], py: NDArray[np.float64], pg: NDArray[np.int64], q: int
) -> NDArray[np.bool_]:  # pragma: no cover - compiled
    """Atoms sorted by place, then index: per place, its atoms of a group (``pg >= 0``) from
    the first until, for every group, ``q`` of them are of other groups."""
    n = px.size
    out = np.zeros(n, np.bool_)
    grp = np.empty(n, np.int64)  # the groups a place's kept atoms are of, and how many
    cnt = np.empty(n, np.int64)
    i = 0
    while i < n:
        j = i
        while j < n and px[j] == px[i] and py[j] == py[i]:
            j += 1
        kept = 0
        top = 0  # the most kept atoms of one group
        ng = 0
        for t in range(i, j):
            if kept - top >= q:
                break
            g = pg[t]
            if g < 0:
                continue
            out[t] = True
            kept += 1
            u = 0
            while u < ng and grp[u] != g:
                u += 1
            if u == ng:
                grp[ng] = g
                cnt[ng] = 0
                ng += 1
            cnt[u] += 1
            top = max(top, cnt[u])
        i = j
    return out


@nb.njit(cache=True, parallel=True)
def _cell_keys(
    ax: NDArray[np.float64], ay: NDArray[np.float64], side: float
) -> tuple[NDArray[np.int64], int]:  # pragma: no cover - compiled
    """Every atom's cell key on the grid of :func:`_near_atoms`, and the column width."""
    n = ax.size
    ox = ax.min()
    oy = ay.min()
    key = np.empty(n, np.int64)
    cy = np.empty(n, np.int64)
    for i in nb.prange(n):
        cy[i] = int((ay[i] - oy) / side) + 5
    # a margin of 5 cells each side (rings reach 4), so a cell beyond the top or bottom
    # row never shares a key with one of the next column
    wy = cy.max() + 6
    for i in nb.prange(n):
        key[i] = (int((ax[i] - ox) / side) + 5) * wy + cy[i]
    return key, wy


@nb.njit(cache=True, parallel=True)
def _near_atoms_sorted(
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    atom_group: NDArray[np.int64],
    side: float,
    q: int,
    reach: NDArray[np.float64],
    skey: NDArray[np.int64],
    wy: int,
    order: NDArray[np.int64],
    listed: NDArray[np.bool_],
    done: NDArray[np.bool_],
) -> NDArray[np.int32]:  # pragma: no cover - compiled
    """:func:`_near_atoms` given the atoms' order by cell key, then index, and their keys in
    that order (``skey``); ``listed`` (in that order; empty: all) the atoms that may be
    listed (:func:`_listed_by_place`), ``done`` (likewise; empty: none) the atoms answered
    already (:func:`_near_in_crowds`: their rows are left unset).

    Per cell, the atoms of the cells around it are copied once, nearest ring first,
    into one run (position, group, index); each of the cell's atoms then works out its
    squared distance to every atom of its rings in one pass (an atom of its own group,
    or of none, at ``inf``: refused, as it is never listed) and keeps the q nearest
    (distance, then index) in a second."""
    n = ax.size
    every = listed.size == 0
    none_done = done.size == 0
    out = np.empty((n, q), np.int32)  # every row is written below
    # the scanned data in cell order (groups as int32: fewer than 2**31 atoms)
    px = np.empty(n)
    py = np.empty(n)
    pg = np.empty(n, np.int32)
    for t in nb.prange(n):  # a gather: 0.25 s at 1e7 on one thread
        j = order[t]
        px[t] = ax[j]
        py[t] = ay[j]
        pg[t] = atom_group[j]
    # the occupied cells: key and first position (a cell's atoms end where the next starts)
    n_cells = 1
    for t in range(1, n):
        if skey[t] != skey[t - 1]:
            n_cells += 1
    ukey = np.empty(n_cells, np.int64)
    ustart = np.empty(n_cells + 1, np.int64)
    c = 0
    for t in range(n):
        if t == 0 or skey[t] != skey[t - 1]:
            ukey[c] = skey[t]
            ustart[c] = t
            c += 1
    ustart[n_cells] = n
    chunk = 2048
    n_chunks = (n_cells + chunk - 1) // chunk
    for ch in nb.prange(n_chunks):
        bd = np.empty(q)
        bj = np.empty(q, np.int64)
        # per column offset -4..4, the first cell at or after the column's lowest row
        ptr = np.empty(9, np.int64)
        c0 = ch * chunk
        col0 = ukey[c0] // wy
        row0 = ukey[c0] % wy
        for dx in range(-4, 5):
            ptr[dx + 4] = np.searchsorted(ukey, (col0 + dx) * wy + row0 - 4)
        tmp_cell = np.empty(81, np.int64)
        tmp_ring = np.empty(81, np.int64)
        ring_end = np.empty(5, np.int64)  # the run's end after each ring
        # the run of the atoms around a cell (grown as needed) and one atom's distances
        rx = np.empty(256)
        ry = np.empty(256)
        rg = np.empty(256, np.int64)
        rj = np.empty(256, np.int64)
        rd = np.empty(256)
        for c in range(c0, min(n_cells, c0 + chunk)):
            col = ukey[c] // wy
            row = ukey[c] % wy
            big = 0
            for t in range(ustart[c], ustart[c + 1]):
                g = pg[t]
                if g < 0:
                    out[order[t], :] = -1  # an atom without a group has no neighbours
                    continue
                if not none_done and done[t]:
                    continue  # answered already: reads nothing
                span = reach[g] / side
                rings = int(span)
                if rings < span:
                    rings += 1
                big = max(big, min(max(1, rings), 4))
            m = 0
            for dx in range(-4, 5):
                lo = (col + dx) * wy + row - 4
                u = ptr[dx + 4]
                while u < n_cells and ukey[u] < lo:
                    u += 1
                ptr[dx + 4] = u
                if big == 0 or abs(dx) > big:
                    continue
                hi = (col + dx) * wy + row + big
                lo_big = lo + 4 - big
                while u < n_cells and ukey[u] < lo_big:
                    u += 1
                while u < n_cells and ukey[u] <= hi:
                    dy = ukey[u] % wy - row
                    tmp_cell[m] = u
                    tmp_ring[m] = max(abs(dx), abs(dy))
                    m += 1
                    u += 1
            if big == 0:
                continue
            # the run, ring by ring (each ring's cells in key order)
            size = 0
            for e in range(m):
                size += ustart[tmp_cell[e] + 1] - ustart[tmp_cell[e]]
            if size > rx.size:
                rx = np.empty(2 * size)
                ry = np.empty(2 * size)
                rg = np.empty(2 * size, np.int64)
                rj = np.empty(2 * size, np.int64)
                rd = np.empty(2 * size)
            nr = 0
            for ring in range(big + 1):
                for e in range(m):
                    if tmp_ring[e] == ring:
                        cc = tmp_cell[e]
                        for s in range(ustart[cc], ustart[cc + 1]):
                            if every or listed[s]:
                                rx[nr] = px[s]
                                ry[nr] = py[s]
                                rg[nr] = pg[s]
                                rj[nr] = order[s]
                                nr += 1
                ring_end[ring] = nr
            for t in range(ustart[c], ustart[c + 1]):
                g = pg[t]
                if g < 0 or (not none_done and done[t]):
                    continue
                a = order[t]
                xa = px[t]
                ya = py[t]
                span = reach[g] / side
                rings = int(span)
                if rings < span:
                    rings += 1
                rings = min(max(1, rings), 4)
                lim = ring_end[rings]
                for s in range(lim):
                    d = (rx[s] - xa) ** 2 + (ry[s] - ya) ** 2
                    rd[s] = np.inf if rg[s] < 0 or rg[s] == g else d
                for u in range(q):
                    bd[u] = np.inf
                    bj[u] = -1
                filled = 0  # bd[filled:] are inf, bj[filled:] -1
                for s in range(lim):
                    d = rd[s]
                    if d > bd[q - 1]:
                        continue
                    j = rj[s]
                    if d == bd[q - 1] and j > bj[q - 1]:
                        continue
                    # the empty slots hold inf: a new entry moves down from the first
                    u = min(filled, q - 1)
                    filled += 1
                    while u > 0 and (d < bd[u - 1] or (d == bd[u - 1] and j < bj[u - 1])):
                        bd[u] = bd[u - 1]
                        bj[u] = bj[u - 1]
                        u -= 1
                    bd[u] = d
                    bj[u] = j
                for u in range(q):
                    out[a, u] = bj[u]
    return out

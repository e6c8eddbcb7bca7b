"""The ``representation`` check: no representative gives a member away.

The rule, exactly as implemented
--------------------------------
``representation``
    No published representative equals (exactly, or within ``tolerance_m``
    when that is > 0) a member's coordinate: the audit's working
    coordinates, the source's coordinates when the source is given, compared
    in the output CRS (members transformed forward with pyproj when the CRSs
    differ). A representative that is the exact mean of its members'
    working coordinates (a group with no synthetic records) fails too: k-1
    known members would then give away the k-th.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import NDArray

from geokanon.verify._arrays import argsort_stable, positions_in
from geokanon.verify._derived import audit_holds, member_groups, rep_arrays
from geokanon.verify._reader import ReleaseReader
from geokanon.verify._results import CheckResult


def check_representation(rel: ReleaseReader) -> CheckResult:
    gids, gx, gy = rep_arrays(rel)
    rows, gi = member_groups(rel)
    if (gi < 0).any():  # members of no published group: extent says so
        rows, gi = rows[gi >= 0], gi[gi >= 0]
    rows, starts = _in_group_order(rows, gi, gids.size)
    # member i is audit row rows[i]: its working coordinates are read where they are
    xm, ym = (np.ascontiguousarray(v, dtype=np.float64) for v in rel.xy_m)
    # in the output CRS: the members' working coordinates (sent forward when the CRSs
    # differ, member by member), and the source's own when the source is given
    forward = rel.to_output
    fx = fy = _NONE
    if forward is not None:
        fx, fy = (np.ascontiguousarray(v, dtype=np.float64) for v in forward(xm[rows], ym[rows]))
    src = rel.source
    srows = rel.source_rows
    sx = sy = _NONE
    s_at = _NO_ROWS
    if (
        srows is not None
        and src.x is not None
        and src.y is not None
        and not (forward is None and audit_holds(rel, src.x, src.y))
    ):
        sx, sy = (np.ascontiguousarray(v, dtype=np.float64) for v in (src.x, src.y))
        s_at = np.ascontiguousarray(srows, dtype=np.int64)
    # within the tolerance, in the working CRS
    wx, wy = (gx, gy) if rel.to_working is None else rel.to_working(gx, gy)
    wx, wy = (np.ascontiguousarray(v, dtype=np.float64) for v in (wx, wy))
    subj = np.ascontiguousarray(rel.subjects, dtype=np.int64)
    equal, cnt, mx, my, moments = _member_pass(
        xm, ym, subj, rows, starts, np.ascontiguousarray(gx, dtype=np.float64),
        np.ascontiguousarray(gy, dtype=np.float64), wx, wy, fx, fy, forward is None, sx, sy,
        s_at, float(rel.tolerance_m),
    )  # fmt: skip
    problems: list[str] = []
    n_equal = int(np.count_nonzero(equal))
    if n_equal:
        problems.append(f"{n_equal} group representatives equal a member's coordinate")
    # the exact centroid of the members (groups without synthetic records): the members'
    # mean offset from the representative is 0
    n_centroid = 0
    if rows.size:
        has = cnt > 0
        mx = np.where(has, mx / np.maximum(cnt, 1), np.nan)
        my = np.where(has, my / np.maximum(cnt, 1), np.nan)
        scale = np.maximum(1.0, np.maximum(np.abs(wx + mx), np.abs(wy + my)))
        at_mean = has & (np.abs(mx) <= 1e-9 * scale) & (np.abs(my) <= 1e-9 * scale)
        syn_g = positions_in(gids, rel.syn_gid[rel.syn_gid >= 0])
        at_mean[syn_g[syn_g >= 0]] = False
        n_centroid = int(np.count_nonzero(at_mean))
    if n_centroid:
        problems.append(f"{n_centroid} representatives are the exact centroid of their members")
    # the rule the writer follows (docs/release-format.md)
    step, r = _rule_step_of(rel)
    off = _rule_breaches(xm, ym, rows, starts, moments, wx, wy, step, r, forward, (gx, gy))
    n_off = int(np.count_nonzero(off))
    if n_off:
        problems.append(
            f"{n_off} representatives are not where the rule puts them (the lattice point "
            "nearest the members' centroid within r_max of every member)"
        )
    if problems:
        return CheckResult("representation", False, "; ".join(problems))
    return CheckResult(
        "representation",
        True,
        f"{gids.size} representatives follow the rule and differ from every member's "
        "coordinate and centroid",
    )


#: An absent coordinate array or row array of the compiled passes.
_NONE = np.zeros(0, dtype=np.float64)
_NO_ROWS = np.zeros(0, dtype=np.int64)


def _in_group_order(
    rows: NDArray[np.int64], gi: NDArray[np.int64], ng: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(the members' rows ordered by group, stably; where each group's members start, and
    the end): members ``starts[g]:starts[g + 1]`` are group ``g``'s."""
    if gi.size and (gi[1:] < gi[:-1]).any():  # members not yet in group order
        by = argsort_stable(gi)
        rows, gi = rows[by], gi[by]
    starts = np.zeros(ng + 1, dtype=np.int64)
    np.cumsum(np.bincount(gi, minlength=ng)[:ng], out=starts[1:])
    return np.ascontiguousarray(rows, dtype=np.int64), starts


#: Per group, what the members make: (members, centroid x, y, RMS radius about it, the
#: most records one subject has in it), as :func:`_member_pass` works it out.
Moments = tuple[
    NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
    NDArray[np.float64],
]  # fmt: skip


@nb.njit(cache=True, nogil=True)
def _member_pass(
    xm: NDArray[np.float64],
    ym: NDArray[np.float64],
    subj: NDArray[np.int64],
    rows: NDArray[np.int64],
    starts: NDArray[np.int64],
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    fx: NDArray[np.float64],
    fy: NDArray[np.float64],
    as_working: bool,
    sx: NDArray[np.float64],
    sy: NDArray[np.float64],
    s_at: NDArray[np.int64],
    tol: float,
) -> tuple[
    NDArray[np.bool_], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
    tuple[
        NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
        NDArray[np.float64],
    ],
]:  # fmt: skip
    """One pass over each group's members (members ``starts[g]:starts[g + 1]``, member
    ``i`` audit row ``rows[i]``, read once into a buffer of the group's).

    Per group: whether a member's coordinate equals its published representative
    ``(gx, gy)`` in the output CRS (its working coordinate when ``as_working``, else
    ``(fx[i], fy[i])`` sent forward; and its source coordinate ``(sx, sy)[s_at[row]]``
    when ``s_at`` is given) or, with ``tol`` > 0, lies within ``tol`` of the
    representative ``(wx, wy)`` in the working CRS; the members; the sums of the
    members' offsets from ``(wx, wy)``, added in member order (as ``numpy.bincount``
    adds its weights); and the :data:`Moments`: the centroid ``x0 + sum(x - x0) / n``
    with ``x0`` its first member's (the sum in member order), the RMS radius about it
    and the most records one subject (``subj[row]``) has in it. A group without members
    has count 0, the centroid of the member at its start (clipped to the last), radius
    0, 0.
    """
    ng = starts.size - 1
    m = rows.size
    equal = np.zeros(ng, dtype=np.bool_)
    cnt = np.zeros(ng, dtype=np.int64)
    mx = np.zeros(ng)
    my = np.zeros(ng)
    members = np.zeros(ng)
    cx = np.zeros(ng)
    cy = np.zeros(ng)
    sigma = np.zeros(ng)
    wmax = np.zeros(ng)
    longest = 0
    for g in range(ng):
        longest = max(longest, starts[g + 1] - starts[g])
    bx = np.empty(longest)
    by = np.empty(longest)
    ss = np.empty(longest, dtype=np.int64)  # one group's subjects, sorted
    with_source = s_at.size > 0
    for g in range(ng):
        a = starts[g]
        b = starts[g + 1]
        k = b - a
        for j in range(k):
            i = a + j
            r = rows[i]
            x = xm[r]
            y = ym[r]
            bx[j] = x
            by[j] = y
            ss[j] = subj[r]
            if as_working:
                hit = x == gx[g] and y == gy[g]
            else:
                hit = fx[i] == gx[g] and fy[i] == gy[g]
            if with_source:
                s = s_at[r]
                hit = hit or (sx[s] == gx[g] and sy[s] == gy[g])
            dx = x - wx[g]
            dy = y - wy[g]
            if tol > 0.0 and math.sqrt(dx * dx + dy * dy) <= tol:
                hit = True
            if hit:
                equal[g] = True
            cnt[g] += 1
            mx[g] += dx
            my[g] += dy
        if m == 0:
            continue
        # count, centroid (local to the first member, for precision), RMS radius
        f = rows[min(a, m - 1)]
        x0 = xm[f]
        y0 = ym[f]
        n = max(float(k), 1.0)
        sx0 = 0.0
        sy0 = 0.0
        for j in range(k):
            sx0 += bx[j] - x0
            sy0 += by[j] - y0
        ox = sx0 / n
        oy = sy0 / n
        cx[g] = x0 + ox
        cy[g] = y0 + oy
        sq = 0.0
        for j in range(k):
            ex = bx[j] - x0 - ox
            ey = by[j] - y0 - oy
            sq += ex * ex + ey * ey
        sigma[g] = math.sqrt(sq / n)
        members[g] = float(k)
        if k > 0:  # the largest subject's records: its subjects sorted
            if k > 64:
                ss[:k].sort()
            else:  # a few members: sorted by insertion
                for i in range(1, k):
                    v = ss[i]
                    j = i
                    while j > 0 and ss[j - 1] > v:
                        ss[j] = ss[j - 1]
                        j -= 1
                    ss[j] = v
            best = 1
            run = 1
            for i in range(1, k):
                run = run + 1 if ss[i] == ss[i - 1] else 1
                best = max(best, run)
            wmax[g] = float(best)
    return equal, cnt, mx, my, (members, cx, cy, sigma, wmax)


# --------------------------------------------------------------------------- the rule

#: Offset of the representative lattice, in snap steps (the release format's constant).
LATTICE_OFFSET = 0.0381966011250105
#: The finest lattice step (metres) and the most halvings of the snap step.
STEP_FLOOR_M = 1.0
MAX_HALVINGS = 16
#: Float slack of the rule's comparisons (metres): lattice membership, distances to the
#: centroid and to members after a CRS round trip.
RULE_TOLERANCE_M = 1e-6


def _ladder(need: NDArray[np.float64], step: float) -> NDArray[np.float64]:
    """Per group, the coarsest ``step / 2**m`` (m = 0..16) still >= ``need`` (``step``
    when ``need`` is larger)."""
    return _halvings(np.ascontiguousarray(need, dtype=np.float64), float(step), MAX_HALVINGS)


@nb.njit(cache=True, nogil=True)
def _halvings(need: NDArray[np.float64], step: float, times: int) -> NDArray[np.float64]:
    """:func:`_ladder`, element by element: ``times`` rounds of halving ``s`` (from
    ``step``) while the half is still >= ``need`` (a NaN need halves never)."""
    out = np.empty(need.size)
    for i in range(need.size):
        s = step
        for _ in range(times):
            if s * 0.5 >= need[i]:
                s = s * 0.5
        out[i] = s
    return out


@nb.njit(cache=True, nogil=True)
def _nearer_admissible(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    rows: NDArray[np.int64],
    starts: NDArray[np.int64],
    cx: NDArray[np.float64],
    cy: NDArray[np.float64],
    ex: NDArray[np.float64],
    ey: NDArray[np.float64],
    dist: NDArray[np.float64],
    s: NDArray[np.float64],
    o: float,
    r: float,
    tol: float,
    slack: float,
    todo: NDArray[np.int64],
) -> NDArray[np.bool_]:
    """For each group in ``todo`` (members ``starts[g]:starts[g + 1]``, member ``m`` at
    ``(px, py)[rows[m]]``): is there a lattice point ``o + s (i, j)`` nearer (cx, cy)
    than ``dist - slack`` that lies within ``r - tol`` of every member and is no
    member's coordinate nor, within 1e-9 relative, (ex, ey)? The lattice rows within
    that distance are scanned; in each, the lattice points in the intersection of the
    members' discs and the centre's disc are checked one by one."""
    out = np.zeros(todo.size, np.bool_)
    for t in range(todo.size):
        g = todo[t]
        a = starts[g]
        b = starts[g + 1]
        lim = dist[g] - slack
        if lim <= 0.0:
            continue
        sg = s[g]
        rr = r - tol
        jlo = math.ceil((cy[g] - lim - o) / sg)
        jhi = math.floor((cy[g] + lim - o) / sg)
        hit = False
        for j in range(jlo, jhi + 1):
            y = o + j * sg
            dy2 = (y - cy[g]) ** 2
            if dy2 >= lim * lim:
                continue
            half = math.sqrt(lim * lim - dy2)
            lo = cx[g] - half
            hi = cx[g] + half
            for m in range(a, b):
                h2 = rr * rr - (y - py[rows[m]]) ** 2
                if h2 < 0.0:
                    lo = 1.0
                    hi = 0.0
                    break
                h = math.sqrt(h2)
                lo = max(lo, px[rows[m]] - h)
                hi = min(hi, px[rows[m]] + h)
            if lo > hi:
                continue
            for i in range(math.ceil((lo - o) / sg), math.floor((hi - o) / sg) + 1):
                x = o + i * sg
                if (x - cx[g]) ** 2 + dy2 >= lim * lim:
                    continue
                scale = 1e-9 * max(1.0, abs(ex[g]), abs(ey[g]))
                if abs(x - ex[g]) <= scale and abs(y - ey[g]) <= scale:
                    continue
                good = True
                for m in range(a, b):
                    fx = px[rows[m]] - x
                    fy = py[rows[m]] - y
                    if math.sqrt(fx * fx + fy * fy) > rr or (fx == 0.0 and fy == 0.0):
                        good = False
                        break
                if good:
                    hit = True
                    break
            if hit:
                break
        out[t] = hit
    return out


def _rule_step_of(rel: ReleaseReader) -> tuple[float, float]:
    """(snap step S, radius held in working metres) of the release."""
    r_max = rel.r_max_m
    pol = rel.manifest.get("policy")
    snap = pol.get("snap_m") if isinstance(pol, dict) else None
    step = float(snap) if isinstance(snap, int | float) and snap > 0 else r_max / 20.0
    r_work = rel.audit.get("r_work_m")
    r = float(r_work) if isinstance(r_work, int | float) and 0 < r_work <= r_max else r_max
    return step, r


def rule_violations(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    rows: NDArray[np.int64],
    subj: NDArray[np.int64],
    gi: NDArray[np.int64],
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    step: float,
    r: float,
    forward: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    published: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
) -> NDArray[np.bool_]:
    """Per group, whether its representative (``wx, wy``, working CRS) breaks the rule.

    With ``forward`` (working to output CRS), the representative was published as
    ``published``: a lattice point sent forward, which the inverse transformation
    brings back only to within a fraction of a millimetre; the nearest lattice point
    sent forward again must then give the published coordinates (to 1e-12 relative).

    Members are records (member ``i``: working coordinates ``(px, py)[rows[i]]``, subject
    code ``subj[rows[i]]``) of the groups ``gi`` (0 .. G-1). The rule of
    ``docs/release-format.md``: with W records, centroid c, RMS radius sigma and a
    largest subject of w records, the step is the coarsest ``step / 2**m`` (m = 0..16)
    still >= max(sigma * w / W, 1 m) (the snap step when that is larger); the
    representative is the point of the lattice
    ``(0.5 + LATTICE_OFFSET) * step + s * (i, j)`` nearest c among those within r of
    every member that are no member's coordinate and not c. Slack:
    ``RULE_TOLERANCE_M`` in the lattice test, in the covering test and in the distance
    to c (a point that covers by less, or is nearer by less, is not held against the
    release), and a sigma * w / W within 1e-9 of a rung is judged on both rungs.
    """
    ng = wx.size
    if gi.size == 0:
        return np.zeros(ng, dtype=bool)
    rows, starts = _in_group_order(rows, gi, ng)
    px = np.ascontiguousarray(px, dtype=np.float64)
    py = np.ascontiguousarray(py, dtype=np.float64)
    # per group, in one pass over its members: count, centroid (in coordinates local to
    # its first member, for precision), RMS radius and its largest subject's records
    zero = np.zeros(ng)
    *_, moments = _member_pass(
        px, py, np.ascontiguousarray(subj, dtype=np.int64), rows, starts, zero, zero, zero,
        zero, _NONE, _NONE, True, _NONE, _NONE, _NO_ROWS, 0.0,
    )  # fmt: skip
    wx = np.ascontiguousarray(wx, dtype=np.float64)
    wy = np.ascontiguousarray(wy, dtype=np.float64)
    return _rule_breaches(px, py, rows, starts, moments, wx, wy, step, r, forward, published)


def _rule_breaches(
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    rows: NDArray[np.int64],
    starts: NDArray[np.int64],
    moments: Moments,
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    step: float,
    r: float,
    forward: Callable[[Any, Any], tuple[Any, Any]] | None,
    published: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
) -> NDArray[np.bool_]:
    """:func:`rule_violations` of members already in group order (``rows``, ``starts``)
    whose :data:`Moments` are at hand."""
    ng = wx.size
    if rows.size == 0:
        return np.zeros(ng, dtype=bool)
    cnt, cx, cy, sigma, wmax = moments
    has = cnt > 0
    n = np.maximum(cnt, 1.0)
    need = np.maximum(sigma * wmax / n, STEP_FLOOR_M)
    o = (0.5 + LATTICE_OFFSET) * step
    bad = np.zeros(ng, dtype=bool)
    rungs = [_ladder(need * (1 + 1e-9), step), _ladder(need * (1 - 1e-9), step)]
    ok_any = np.zeros(ng, dtype=bool)
    for s in rungs:
        # the lattice point the representative stands for
        qx = o + np.round((wx - o) / s) * s
        qy = o + np.round((wy - o) / s) * s
        if forward is None:
            on = (np.abs(qx - wx) <= RULE_TOLERANCE_M) & (np.abs(qy - wy) <= RULE_TOLERANCE_M)
        else:  # published in another CRS: the lattice point sent forward, as the writer did
            assert published is not None
            fx, fy = forward(qx, qy)
            gx, gy = published
            on = (np.abs(np.asarray(fx) - gx) <= 1e-12 * np.maximum(1.0, np.abs(gx))) & (
                np.abs(np.asarray(fy) - gy) <= 1e-12 * np.maximum(1.0, np.abs(gy))
            )
        dist = np.hypot(qx - cx, qy - cy)
        # a nearer admissible lattice point is a breach (the extent and member checks
        # judge the representative's own admissibility)
        todo = np.flatnonzero(on & has & ~ok_any)
        nearer = _nearer_admissible(
            px, py, rows, starts, cx, cy, cx, cy, dist, s, o, r,
            RULE_TOLERANCE_M, RULE_TOLERANCE_M, todo.astype(np.int64),
        )  # fmt: skip
        good = np.zeros(ng, dtype=bool)
        good[todo[~nearer]] = True
        ok_any |= good
    bad = has & ~ok_any
    return bad

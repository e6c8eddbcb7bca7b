"""The exact ceiling of "records at group level", ignoring competition between groups.

A record p can be published at group level only if some disc of radius ``r_max``
covers p and at least ``k - 1`` other distinct subjects (the centre may lie
anywhere; the snapped-representative rule only shrinks this set). This module
decides that, exactly, for every record, by the classic angular sweep of "the
most points in a circle of radius r":

* the centres that cover p form disc(p, r); a centre c covers q iff
  ``|c - q| <= r``;
* if some centre covers p and a set T of others, the centres covering
  ``{p} + T`` form a non-empty compact convex set (an intersection of discs), so
  one of them lies on the boundary of disc(a, r) for some a in ``{p} + T``: a
  disc through a, with a on its rim;
* so for every anchor a (p and each other record within 2 r of p), sweep the
  centre ``a + r (cos t, sin t)`` over t: every b within 2 r of a is covered on a
  closed arc of t, p's arc must be active, and the deepest point of the
  arrangement is where the most others are covered.

Records are their own subjects here (the benchmark passes no subject column), so
"others" are other records, and coincident records count separately. Distances are
compared with a relative slack of 1e-9, so the ceiling is an upper bound even at
exact ties. Cost: O(m^2 log m) per record with m records within 2 r, and only
records with fewer than ``k - 1`` others within r need the sweep (a disc centred on
the record covers the rest); the sweep stops as soon as it finds ``k - 1`` others.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

__all__ = ["group_feasible"]

_SLACK = 1e-9


@nb.njit(cache=True)
def _sweep_reaches(
    ax: float,
    ay: float,
    px: float,
    py: float,
    p_is_anchor: bool,
    qx: NDArray[np.float64],
    qy: NDArray[np.float64],
    r: float,
    need: int,
    base: int,
) -> bool:
    """Whether a centre on the circle of radius r around anchor a covers p and ``need`` others.

    ``qx, qy`` are the other records (the anchor itself excluded and counted in
    ``base``: 1 when the anchor is one of the others, 0 when it is p).
    """
    two_pi = 2.0 * math.pi
    m = qx.size
    # Starts in the first half, ends in the second: a stable sort by angle then
    # puts starts before ends at equal angles (closed arcs).
    ang = np.empty(2 * m + 2)
    who = np.empty(2 * m + 2, np.int64)  # 1 for p's arc, 0 for an other's
    depth = base
    p_active = p_is_anchor
    ne = 0
    lim = 2.0 * r * (1.0 + _SLACK)
    for t in range(m + (0 if p_is_anchor else 1)):
        if t < m:
            bx, by, isp = qx[t], qy[t], 0
        else:
            bx, by, isp = px, py, 1
        dx = bx - ax
        dy = by - ay
        d = math.sqrt(dx * dx + dy * dy)
        if d > lim:
            continue
        if d == 0.0:  # coincident with the anchor: covered on the whole circle
            if isp:
                p_active = True
            else:
                depth += 1
            continue
        alpha = math.acos(min(1.0, d / (2.0 * r))) + _SLACK
        phi = math.atan2(dy, dx)
        s = (phi - alpha) % two_pi
        e = s + 2.0 * alpha
        if e >= two_pi:  # wraps: active at angle 0
            if isp:
                p_active = True
            else:
                depth += 1
            e -= two_pi
        ang[ne] = s
        who[ne] = isp
        ang[m + 1 + ne] = e
        who[m + 1 + ne] = isp
        ne += 1
    if p_active and depth >= need:
        return True
    half = m + 1
    sel = np.empty(2 * ne, np.int64)
    for t in range(ne):
        sel[t] = t
        sel[ne + t] = half + t
    order = sel[np.argsort(ang[sel], kind="mergesort")]
    for o in order:
        if o < half:
            if who[o] == 1:
                p_active = True
            else:
                depth += 1
            if p_active and depth >= need:
                return True
        elif who[o] == 1:
            p_active = False
        else:
            depth -= 1
    return False


@nb.njit(cache=True)
def _feasible_one(
    px: float, py: float, qx: NDArray[np.float64], qy: NDArray[np.float64], r: float, need: int
) -> bool:
    if qx.size < need:
        return False
    if _sweep_reaches(px, py, px, py, True, qx, qy, r, need, 0):
        return True
    m = qx.size
    rest_x = np.empty(m - 1)
    rest_y = np.empty(m - 1)
    for a in range(m):
        t = 0
        for b in range(m):
            if b != a:
                rest_x[t] = qx[b]
                rest_y[t] = qy[b]
                t += 1
        if _sweep_reaches(qx[a], qy[a], px, py, False, rest_x, rest_y, r, need, 1):
            return True
    return False


def group_feasible(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    candidates: NDArray[np.bool_],
    k: int,
    r_max: float,
) -> NDArray[np.bool_]:
    """Per record: does a disc of radius r_max cover it and k-1 other records?

    Parameters
    ----------
    x, y
        Coordinates in metres of every record (each its own subject).
    candidates
        Records to decide (the others are reported ``False``); every record may
        be one of the k-1 others.
    k
        Group size.
    r_max
        Disc radius in metres.

    Returns
    -------
    NDArray[bool]
        Feasible records (competition between groups ignored).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([0.0, 150.0, 150.0, 150.0, 150.0])
    >>> y = np.array([0.0, -50.0, -25.0, 25.0, 50.0])
    >>> group_feasible(x, y, np.ones(5, bool), 5, 100.0).tolist()
    [True, True, True, True, True]
    >>> group_feasible(x, y, np.ones(5, bool), 5, 70.0).tolist()
    [False, False, False, False, False]
    """
    n = x.size
    out = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(candidates)
    if idx.size == 0 or n < k:
        return out
    pts = np.c_[x, y]
    tree = cKDTree(pts)
    # A disc centred on the record covers it and its k-1 nearest others.
    d, _ = tree.query(pts[idx], k=k)
    d = d.reshape(idx.size, k)
    easy = d[:, k - 1] <= r_max * (1.0 + _SLACK)
    out[idx[easy]] = True
    hard = idx[~easy]
    for i in hard:
        near = np.asarray(tree.query_ball_point(pts[i], 2.0 * r_max * (1.0 + _SLACK)))
        near = np.sort(near[near != i])
        out[i] = _feasible_one(
            float(x[i]),
            float(y[i]),
            np.ascontiguousarray(x[near]),
            np.ascontiguousarray(y[near]),
            r_max,
            k - 1,
        )
    return out

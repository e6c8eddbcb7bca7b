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

import numpy as np
from numpy.typing import NDArray

from geokanon.verify._arrays import _nunique, _positions
from geokanon.verify._derived import _audit_holds, _members, _rep_arrays
from geokanon.verify._reader import _Release
from geokanon.verify._results import CheckResult


def check_representation(rel: _Release) -> CheckResult:
    gids, gx, gy = _rep_arrays(rel)
    rows, mg = _members(rel)
    gi = _positions(gids, mg)
    rows, gi = rows[gi >= 0], gi[gi >= 0]
    xm, ym = rel.xy_m
    equal = np.zeros(rows.size, dtype=bool)
    # in the output CRS
    candidates: list[tuple[NDArray[np.float64], NDArray[np.float64]]] = []
    if rel.to_output is None:
        candidates.append((xm[rows], ym[rows]))
    else:
        ox, oy = rel.to_output(xm[rows], ym[rows])
        candidates.append((ox, oy))
    src = rel.source
    srows = rel.source_rows
    if (
        srows is not None
        and src.x is not None
        and src.y is not None
        and not (rel.to_output is None and _audit_holds(rel, src.x, src.y))
    ):
        candidates.append((src.x[srows[rows]], src.y[srows[rows]]))
    for cx, cy in candidates:
        equal |= (cx == gx[gi]) & (cy == gy[gi])
    # within the tolerance, in the working CRS
    wx, wy = (gx, gy) if rel.to_working is None else rel.to_working(gx, gy)
    if rel.tolerance_m > 0:
        dx, dy = xm[rows] - wx[gi], ym[rows] - wy[gi]
        equal |= np.sqrt(dx * dx + dy * dy) <= rel.tolerance_m
    problems: list[str] = []
    if equal.any():
        problems.append(f"{_nunique(gi[equal])} group representatives equal a member's coordinate")
    # the exact centroid of the members (groups without synthetic records)
    n_centroid = 0
    if rows.size:
        # members' mean offset from the representative (exact mean: offset 0)
        cnt = np.bincount(gi, minlength=gids.size)
        mx = np.bincount(gi, weights=xm[rows] - wx[gi], minlength=gids.size)
        my = np.bincount(gi, weights=ym[rows] - wy[gi], minlength=gids.size)
        has = cnt > 0
        mx = np.where(has, mx / np.maximum(cnt, 1), np.nan)
        my = np.where(has, my / np.maximum(cnt, 1), np.nan)
        scale = np.maximum(1.0, np.maximum(np.abs(wx + mx), np.abs(wy + my)))
        at_mean = has & (np.abs(mx) <= 1e-9 * scale) & (np.abs(my) <= 1e-9 * scale)
        syn_g = _positions(gids, rel.syn_gid[rel.syn_gid >= 0])
        at_mean[syn_g[syn_g >= 0]] = False
        n_centroid = int(np.count_nonzero(at_mean))
    if n_centroid:
        problems.append(f"{n_centroid} representatives are the exact centroid of their members")
    if problems:
        return CheckResult("representation", False, "; ".join(problems))
    return CheckResult(
        "representation",
        True,
        f"{gids.size} representatives differ from every member's coordinate and centroid",
    )

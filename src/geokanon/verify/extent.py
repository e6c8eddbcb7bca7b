"""The ``extent`` check: every member lies within the radius of its representative.

The rule, exactly as implemented
--------------------------------
``extent``
    Every member of every group lies within ``min(r_max_m, radius_m) +
    tolerance_m`` of the published representative, distances
    ``sqrt(dx*dx + dy*dy)`` in float64 on the working coordinates (``x_m``,
    ``y_m``), the representative transformed from the output CRS into the
    working CRS with pyproj when they differ. When an unmasked source in the
    working CRS is given, the members' source coordinates are measured too (a
    lon/lat source file: its own coordinates, carried into the working CRS).
    A published ``radius_m`` above ``r_max_m`` fails. The limit holds on the
    ground too: for a named working CRS (UTM for lon/lat input, or the input's
    projected CRS), a pair within the limit on the map is measured again on the
    CRS's ellipsoid (geodesic, pyproj ``Geod.inv``, from the members' lon/lat,
    the source's own for a lon/lat source file, to the published
    representative), unless its planar distance is at most the limit times a
    lower bound of the CRS's scale factor over the pairs' box, which the check
    finds itself (see ``Ground``); an unnamed metric CRS is planar only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from geokanon.verify._derived import audit_holds, group_positions, member_groups, rep_arrays
from geokanon.verify._reader import ReleaseReader, same_crs
from geokanon.verify._results import CheckResult

#: Nodes a side of the grid on which :meth:`Ground.scale_floor` evaluates the scale.
_GROUND_NODES = 33

#: Relative width kept, at least, of the band of planar distances re-measured on the
#: ellipsoid below the limit (the scale floor is lowered by this much at least).
_GROUND_BAND = 1e-4


@dataclass(frozen=True)
class Ground:
    """Geodesic distances on the ellipsoid of a named working CRS.

    ``extent`` holds every member within the limit on the ground, not only on the map.
    Measuring every pair on the ellipsoid costs ~0.4 us a pair (pyproj ``Geod.inv``),
    so the planar distances decide first: for a straight segment inside a box over
    which every scale factor of the CRS is at least ``s``, the geodesic between its
    ends is at most ``planar / s`` long (the segment is the image of a curve no longer
    than that). So a pair whose planar distance is at most ``limit * s`` is within the
    limit on the ground, and only the pairs above it (and within the planar limit,
    the others already fail) are measured with ``Geod.inv``. ``s`` is found here, not
    read from the release: the smallest semi-minor axis of Tissot's indicatrix
    (:meth:`pyproj.Proj.get_factors`) on a 33 x 33 grid over the pairs' box, lowered
    by the largest change between neighbouring nodes and by 1e-4 at least; where the
    scale cannot be evaluated, every pair is measured.
    """

    crs: Any  # pyproj.CRS of the working coordinates
    geod: Any  # pyproj.Geod of its ellipsoid
    to_lonlat: Any  # pyproj.Transformer, working -> its geographic CRS
    out_to_lonlat: Any  # pyproj.Transformer, output -> that geographic CRS, or None (same)

    @classmethod
    def of(cls, working: str | None, output: str | None) -> Ground | None:
        if working is None:
            return None
        from pyproj import CRS, Transformer

        try:
            crs = CRS.from_user_input(working)
            geo = crs.geodetic_crs
        except Exception:  # pyproj's CRSError; an unknown CRS cannot be measured on the ground
            return None
        if geo is None or not crs.is_projected:
            return None
        out_tr = None
        if output is not None and not same_crs(output, geo.to_string()):
            out_tr = Transformer.from_crs(CRS.from_user_input(output), geo, always_xy=True)
        return cls(
            crs=crs,
            geod=geo.get_geod(),
            to_lonlat=Transformer.from_crs(crs, geo, always_xy=True),
            out_to_lonlat=out_tr,
        )

    def scale_floor(self, *coords: NDArray[np.float64]) -> float:
        """A lower bound of the CRS's scale, in any direction, over the box of the points.

        ``coords`` are x and y arrays in turn (``x1, y1, x2, y2, ...``); no copy is made.
        """
        from pyproj import Proj

        xs, ys = coords[0::2], coords[1::2]
        with np.errstate(all="ignore"):
            bounds = [
                (float(np.nanmin(v)), float(np.nanmax(v))) if v.size else (np.inf, -np.inf)
                for v in (*xs, *ys)
            ]
        x_lo = min(b[0] for b in bounds[: len(xs)])
        x_hi = max(b[1] for b in bounds[: len(xs)])
        y_lo = min(b[0] for b in bounds[len(xs) :])
        y_hi = max(b[1] for b in bounds[len(xs) :])
        if not all(math.isfinite(v) for v in (x_lo, x_hi, y_lo, y_hi)):
            return 0.0
        gx, gy = np.meshgrid(
            np.linspace(x_lo, x_hi, _GROUND_NODES), np.linspace(y_lo, y_hi, _GROUND_NODES)
        )
        try:
            with np.errstate(all="ignore"):
                lon, lat = self.to_lonlat.transform(gx.ravel(), gy.ravel())
                f = Proj(self.crs).get_factors(np.asarray(lon), np.asarray(lat), errcheck=False)
        except Exception:  # pyproj errors: measure every pair
            return 0.0
        v = np.asarray(f.tissot_semiminor, dtype=np.float64).reshape(gx.shape)
        if not np.isfinite(v).all() or (v <= 0).any():
            return 0.0
        change = max(
            float(np.abs(np.diff(v, axis=0)).max()), float(np.abs(np.diff(v, axis=1)).max())
        )
        return float(v.min()) - max(change, _GROUND_BAND)

    def lonlat_out(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Output-CRS coordinates as longitude/latitude of the working CRS's datum."""
        if self.out_to_lonlat is None:
            return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        lon, lat = self.out_to_lonlat.transform(x, y)
        return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)

    def beyond(
        self,
        mx: NDArray[np.float64],
        my: NDArray[np.float64],
        at: NDArray[np.int64],
        rx: NDArray[np.float64],
        ry: NDArray[np.float64],
        gi: NDArray[np.int64],
        d: NDArray[np.float64],
        allowed: NDArray[np.float64],
        *,
        rep_out: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
        member_out: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """Pairs within ``allowed`` on the map but beyond it on the ellipsoid, and their
        geodesic distances (NaN where the planar distance settled it).

        Pair ``i`` is member ``at[i]`` of ``mx, my`` (working-CRS metres) and
        representative ``gi[i]`` of ``rx, ry`` (working-CRS metres), ``d[i]`` their
        planar distance; nothing is copied per pair but the pairs measured. The
        geodesic is measured from the published representative (``rep_out``:
        output-CRS coordinates, indexed like ``rx``) when given, else from ``rx, ry``;
        and from the members' own output-CRS coordinates (``member_out``, indexed like
        ``mx``; e.g. a lon/lat source) when given, else from ``mx, my``. The scale bound
        is taken over the box of all of ``mx, my, rx, ry`` (a larger box only lowers it).
        """
        out = np.zeros(d.size, dtype=bool)
        ground = np.full(d.size, np.nan)
        if d.size == 0:
            return out, ground
        s = self.scale_floor(mx, my, rx, ry)
        near = np.flatnonzero((d <= allowed) & ~(d <= allowed * s))
        if near.size == 0:
            return out, ground
        m, g = at[near], gi[near]
        if member_out is not None:
            mlon, mlat = self.lonlat_out(member_out[0][m], member_out[1][m])
        else:
            mlon, mlat = self._lonlat(mx[m], my[m])
        if rep_out is not None:
            rlon, rlat = self.lonlat_out(rep_out[0][g], rep_out[1][g])
        else:
            rlon, rlat = self._lonlat(rx[g], ry[g])
        _, _, dg = self.geod.inv(mlon, mlat, rlon, rlat)
        ground[near] = dg
        out[near] = ~(ground[near] <= allowed[near])
        return out, ground

    def _lonlat(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        lon, lat = self.to_lonlat.transform(x, y)
        return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)


@nb.njit(cache=True, nogil=True)
def _planar_distances(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    at: NDArray[np.int64],
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    gi: NDArray[np.int64],
) -> NDArray[np.float64]:
    """The planar distance ``sqrt(dx * dx + dy * dy)`` of member ``at[i]`` of ``xs, ys``
    from representative ``gi[i]`` of ``wx, wy``, pair by pair in one pass (as numpy's
    gathers and element-wise arithmetic give it)."""
    _check_indices(at, min(xs.size, ys.size), gi, 0, min(wx.size, wy.size))
    d = np.empty(at.size)
    for i in range(at.size):
        d[i] = _distance(xs, ys, at[i], wx, wy, gi[i])
    return d


@nb.njit(cache=True, nogil=True)
def _check_indices(at: NDArray[np.int64], n: int, gi: NDArray[np.int64], lo: int, ng: int) -> None:
    """Raise when a member index ``at`` is not in ``0..n-1`` or a representative index
    ``gi`` not in ``lo..ng-1``."""
    for i in range(at.size):
        if not 0 <= at[i] < n:
            raise IndexError("a member or representative index out of range")
    for i in range(gi.size):
        if not lo <= gi[i] < ng:
            raise IndexError("a member or representative index out of range")


@nb.njit(cache=True, nogil=True, inline="always")
def _distance(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    a: int,
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    g: int,
) -> float:
    """``sqrt(dx * dx + dy * dy)`` of member ``a`` of ``xs, ys`` from representative ``g``
    of ``wx, wy`` (the indices checked before: :func:`_check_indices`)."""
    dx = xs[a] - wx[g]
    dy = ys[a] - wy[g]
    return math.sqrt(dx * dx + dy * dy)


@nb.njit(cache=True, nogil=True)
def _beyond_limit(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    at: NDArray[np.int64],
    wx: NDArray[np.float64],
    wy: NDArray[np.float64],
    gi: NDArray[np.int64],
    limit: NDArray[np.float64],
    tol: float,
    bad_group: NDArray[np.bool_],
) -> tuple[int, float, bool]:
    """Members beyond their group's limit on the map, in one pass: member ``i`` is
    ``(xs, ys)[at[i]]`` (``at`` empty: row ``i``) of group ``gi[i]`` (representative
    ``(wx, wy)[gi[i]]``; -1: no member), beyond unless :func:`_planar_distances`'
    distance is <= ``limit[gi[i]] + tol``. Returns (members beyond, the largest distance
    over the limit among them ignoring NaN, whether any of those is finite) and marks
    their groups in ``bad_group``."""
    in_place = at.size == 0
    n_members = min(xs.size, ys.size)
    if in_place and gi.size > n_members:
        raise IndexError("a member or representative index out of range")
    _check_indices(at, n_members, gi, -1, min(wx.size, wy.size))  # -1: no member
    n = 0
    worst = -np.inf
    finite = False
    for i in range(gi.size):
        g = gi[i]
        if g < 0:
            continue
        d = _distance(xs, ys, i if in_place else at[i], wx, wy, g)
        if d <= limit[g] + tol:
            continue
        n += 1
        bad_group[g] = True
        over = d - limit[g]
        if over == over:
            worst = max(worst, over)
            finite = finite or math.isfinite(over)
    return n, worst, finite


_NO_ROWS = np.zeros(0, dtype=np.int64)


def check_extent(rel: ReleaseReader) -> CheckResult:
    r_max = rel.r_max_m
    gids, gx, gy = rep_arrays(rel)
    problems: list[str] = []
    if not (np.isfinite(gx).all() and np.isfinite(gy).all()):
        problems.append(f"{int((~(np.isfinite(gx) & np.isfinite(gy))).sum())} groups lack x, y")
    limit = np.full(gids.size, r_max)
    if "radius_m" in rel.groups:
        rad = pd.to_numeric(rel.groups["radius_m"]).to_numpy(dtype=np.float64)
        over = ~(rad <= r_max)
        if over.any():
            problems.append(f"{int(over.sum())} groups publish radius_m above r_max_m")
        limit = np.minimum(limit, np.where(np.isfinite(rad), rad, r_max))
    wx, wy = gx, gy
    if rel.to_working is not None:
        wx, wy = rel.to_working(gx, gy)
    ground = rel.ground
    if ground is None:
        # on the map only: the members in audit order (each row's group's position, -1
        # for none), read in place; the order of the members changes no figure below
        rows, gi = _NO_ROWS, group_positions(rel)
        n_orphans = int(np.count_nonzero((gi < 0) & (rel.gid >= 0)))
        n_members = int(np.count_nonzero(gi >= 0))
    else:
        rows, gi = member_groups(rel)
        n_orphans = int(np.count_nonzero(gi < 0))
        if n_orphans:
            rows, gi = rows[gi >= 0], gi[gi >= 0]
        n_members = rows.size
    if n_orphans:
        problems.append(f"{n_orphans} members belong to no published group")
    # (name, member x, y in working metres, members' own output-CRS coordinates or None)
    coords: list[tuple[str, Any, Any, Any]] = [("working", *rel.xy_m, None)]
    src = rel.source
    unmasked = rel.source_rows is not None and rel.audit.get("mask") in (None, "", "none")
    if (
        src.x_work is not None
        and src.y_work is not None
        and unmasked
        and not audit_holds(rel, src.x_work, src.y_work)  # else: the same distances again
    ):
        coords.append(("source", src.x_work, src.y_work, None))
    elif (
        src.x_work is None
        and src.x is not None
        and src.y is not None
        and unmasked
        and ground is not None
        and rel.to_working is not None
    ):
        # a lon/lat source file: its own coordinates, on the map and on the ellipsoid
        sx, sy = rel.to_working(src.x, src.y)
        coords.append(("source", sx, sy, (src.x, src.y)))
    worst_over = 0.0
    n_bad = 0
    n_ground = 0
    bad_groups: set[int] = set()
    bad_group = np.zeros(gids.size, dtype=np.bool_)  # planar only: groups with a member beyond
    for _name, xs, ys, own in coords:
        at = rows
        if _name == "source":
            assert rel.source_rows is not None
            at = rel.source_rows if ground is None else rel.source_rows[rows]
        if ground is None:  # on the map only: one compiled pass, no distances kept
            n, worst_here, finite = _beyond_limit(
                np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), at,
                np.asarray(wx, dtype=np.float64), np.asarray(wy, dtype=np.float64), gi,
                limit, float(rel.tolerance_m), bad_group,
            )  # fmt: skip
            if n:
                n_bad = max(n_bad, int(n))
                worst_over = max(worst_over, float(worst_here) if finite else 0)
            continue
        d = _planar_distances(
            np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), at,
            np.asarray(wx, dtype=np.float64), np.asarray(wy, dtype=np.float64), gi,
        )  # fmt: skip
        allowed = limit[gi] + rel.tolerance_m
        beyond = ~(d <= allowed)
        if ground is not None:
            on_ground, dg = ground.beyond(
                xs, ys, at, wx, wy, gi, d, allowed, rep_out=(gx, gy), member_out=own
            )
            n_ground = max(n_ground, int(on_ground.sum()))
            beyond |= on_ground
            d = np.where(on_ground, dg, d)
        if beyond.any():
            n_bad = max(n_bad, int(beyond.sum()))
            bad_groups |= set(gi[beyond].tolist())
            over = d[beyond] - limit[gi][beyond]
            worst_over = max(worst_over, float(np.nanmax(over)) if np.isfinite(over).any() else 0)
    if n_bad:
        where = f", {n_ground} of them only on the ellipsoid" if n_ground else ""
        n_groups = len(bad_groups) + int(np.count_nonzero(bad_group))
        problems.append(
            f"{n_bad} members in {n_groups} groups beyond r_max{where} "
            f"(worst {worst_over:.2f} m over)"
        )
    if problems:
        return CheckResult("extent", False, "; ".join(problems))
    on = " on the map and on the ellipsoid" if ground is not None else ""
    return CheckResult(
        "extent",
        True,
        f"{n_members} members of {gids.size} groups within {r_max:g} m of their representative{on}",
    )

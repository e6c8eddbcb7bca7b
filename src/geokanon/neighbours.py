"""Exact distinct-subject neighbour distances, in space and in time.

``d_j(p)`` is the distance from record ``p`` to the ``j``-th nearest *other
subject*, where the distance to a subject is the distance to that subject's
nearest record. Records of ``p``'s own subject never count, so a "group of
five" that is one person five times is never mistaken for a crowd.

The search is a multi-level cell grid compiled with numba. Level ``j`` has cells
of side ``c * 4**j``; a record is resolved at the first level where either its
``k-1`` nearest other subjects all lie inside the square of cells already
scanned (so nothing outside can be nearer), or the scanned square already
contains the whole disc of radius ``max_distance``. Records in dense towns are
resolved at level 0 after scanning a handful of small cells; rural records move
up a few coarse levels. Every answer is exact: the stopping rule compares the
candidate distance with the exact distance from the record to the edge of the
scanned square, minus a margin for rounding.

Distances are computed as ``sqrt(dx*dx + dy*dy)`` in float64, the same
arithmetic as :class:`scipy.spatial.cKDTree` with ``p=2``, so labels derived
from them match a cKDTree-based rule bit for bit.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon.errors import InputError

__all__ = ["subject_codes", "subject_neighbour_distances", "subject_time_gaps"]

#: Rings of cells scanned at one level before a record moves up a level.
_MAX_RINGS = 3
#: Growth of the cell side from one level to the next.
_LEVEL_FACTOR = 4.0
#: Records per query processed by one parallel task.
_CHUNK = 4096


def subject_codes(subjects: ArrayLike | None, n: int) -> NDArray[np.int64]:
    """Dense int64 subject codes; ``None`` makes every record its own subject.

    Parameters
    ----------
    subjects
        One subject id per record (any hashable dtype), or ``None``.
    n
        Number of records.

    Returns
    -------
    numpy.ndarray
        ``int64`` codes in ``[0, number of subjects)``.

    Examples
    --------
    >>> subject_codes(["a", "b", "a"], 3).tolist()
    [0, 1, 0]
    """
    if subjects is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(subjects)
    if arr.shape != (n,):
        raise InputError(f"subjects must hold one id per record ({n}), got shape {arr.shape}")
    if arr.dtype.kind in "iu":
        _, codes = np.unique(arr, return_inverse=True)
    else:
        import pandas as pd

        codes, _ = pd.factorize(pd.Series(arr, copy=False), sort=True, use_na_sentinel=True)
        if (codes < 0).any():
            raise InputError(
                f"{int((codes < 0).sum())} records have an empty subject id; "
                "give every record a subject or drop the subject column"
            )
    return np.ascontiguousarray(codes, dtype=np.int64)


# ----------------------------------------------------------------------------
# The grid: points sorted by cell key, one contiguous run of points per cell.
# ----------------------------------------------------------------------------


class _Grid:
    """Points bucketed into square cells of side ``cell``, sorted by cell key."""

    def __init__(
        self,
        x: NDArray[np.float64],
        y: NDArray[np.float64],
        subj: NDArray[np.int64],
        cell: float,
        x0: float,
        y0: float,
    ) -> None:
        self.cell = float(cell)
        self.x0 = x0
        self.y0 = y0
        cx = np.floor((x - x0) / cell).astype(np.int64)
        cy = np.floor((y - y0) / cell).astype(np.int64)
        self.ny = int(cy.max()) + 1 if cy.size else 1
        self.nx = int(cx.max()) + 1 if cx.size else 1
        keys = cx * self.ny + cy
        order = np.argsort(keys, kind="stable")
        self.order = order
        skeys = keys[order]
        self.xs = np.ascontiguousarray(x[order])
        self.ys = np.ascontiguousarray(y[order])
        self.ss = np.ascontiguousarray(subj[order])
        starts = np.flatnonzero(np.r_[True, skeys[1:] != skeys[:-1]]) if skeys.size else np.zeros(0)
        self.cell_keys = np.ascontiguousarray(skeys[starts])
        self.cell_start = np.ascontiguousarray(np.r_[starts, skeys.size].astype(np.int64))


def _choose_cell(x: NDArray[np.float64], y: NDArray[np.float64], target: float) -> float:
    """Side of the finest grid: about ``target`` points in the cell of a typical record.

    Estimated on a fixed subsample (deterministic), as the record-weighted mean
    occupancy ``sum(count**2) / n`` scaled to the full data.
    """
    n = x.size
    span = max(float(x.max() - x.min()), float(y.max() - y.min()), 1e-9)
    if n <= 1:
        return span + 1.0
    step = max(1, n // 200_000)
    xs, ys = x[::step], y[::step]
    m = xs.size
    scale = n / m
    cell = span
    x0, y0 = float(x.min()), float(y.min())
    for _ in range(40):
        cx = np.floor((xs - x0) / cell).astype(np.int64)
        cy = np.floor((ys - y0) / cell).astype(np.int64)
        _, counts = np.unique(cx * (int(cy.max()) + 1) + cy, return_counts=True)
        occupancy = scale * float((counts.astype(np.float64) ** 2).sum()) / m
        if occupancy <= target:
            break
        cell /= 2.0
    return max(cell, 1e-6)


@nb.njit(cache=True, inline="always")
def _lower_bound(a: NDArray[np.int64], value: int) -> int:
    lo, hi = 0, a.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True, inline="always")
def _offer(
    best_d: NDArray[np.float64], best_s: NDArray[np.int64], filled: int, d: float, s: int
) -> int:
    """Offer (d, subject s) to the sorted top list of distinct subjects; return new fill."""
    m = best_d.size
    # Already listed: keep the smaller distance and restore the order.
    for t in range(filled):
        if best_s[t] == s:
            if d < best_d[t]:
                u = t
                while u > 0 and best_d[u - 1] > d:
                    best_d[u] = best_d[u - 1]
                    best_s[u] = best_s[u - 1]
                    u -= 1
                best_d[u] = d
                best_s[u] = s
            return filled
    if filled < m:
        u = filled
        filled += 1
    elif d < best_d[m - 1]:
        u = m - 1
    else:
        return filled
    while u > 0 and best_d[u - 1] > d:
        best_d[u] = best_d[u - 1]
        best_s[u] = best_s[u - 1]
        u -= 1
    best_d[u] = d
    best_s[u] = s
    return filled


@nb.njit(cache=True, inline="always")
def _scan_run(
    lo: int,
    hi: int,
    px: float,
    py: float,
    ps: int,
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ss: NDArray[np.int64],
    max_d: float,
    best_d: NDArray[np.float64],
    best_s: NDArray[np.int64],
    filled: int,
) -> int:
    m = best_d.size
    for j in range(lo, hi):
        s = ss[j]
        if s == ps:
            continue
        dx = xs[j] - px
        dy = ys[j] - py
        d = math.sqrt(dx * dx + dy * dy)
        if d > max_d:
            continue
        if filled == m and d >= best_d[m - 1]:
            continue
        filled = _offer(best_d, best_s, filled, d, s)
    return filled


@nb.njit(cache=True, inline="always")
def _cells_run(
    keys: NDArray[np.int64], start: NDArray[np.int64], key_lo: int, key_hi: int
) -> tuple[int, int]:
    """Point range covering all cells with key in [key_lo, key_hi]."""
    a = _lower_bound(keys, key_lo)
    b = _lower_bound(keys, key_hi + 1)
    return start[a], start[b]


@nb.njit(cache=True, parallel=True)
def _knn_level(
    qx: NDArray[np.float64],
    qy: NDArray[np.float64],
    qs: NDArray[np.int64],
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ss: NDArray[np.int64],
    keys: NDArray[np.int64],
    start: NDArray[np.int64],
    nx: int,
    ny: int,
    cell: float,
    x0: float,
    y0: float,
    m: int,
    max_d: float,
    max_rings: int,
    out: NDArray[np.float64],
    resolved: NDArray[np.bool_],
) -> None:
    nq = qx.size
    nchunks = (nq + 4095) // 4096
    margin = 1e-9 * (abs(x0) + abs(y0) + cell) + 1e-9
    for c in nb.prange(nchunks):
        best_d = np.empty(m, np.float64)
        best_s = np.empty(m, np.int64)
        for i in range(c * 4096, min(nq, (c + 1) * 4096)):
            px = qx[i]
            py = qy[i]
            ps = qs[i]
            ux = (px - x0) / cell
            uy = (py - y0) / cell
            cx = math.floor(ux)
            cy = math.floor(uy)
            filled = 0
            done = False
            for r in range(max_rings + 1):
                for gx in range(cx - r, cx + r + 1):
                    if gx < 0:
                        continue
                    base = gx * ny
                    if gx == cx - r or gx == cx + r:
                        ylo = max(cy - r, 0)
                        yhi = min(cy + r, ny - 1)
                        if ylo <= yhi:
                            lo, hi = _cells_run(keys, start, base + ylo, base + yhi)
                            filled = _scan_run(
                                lo, hi, px, py, ps, xs, ys, ss, max_d, best_d, best_s, filled
                            )
                    else:
                        if cy - r >= 0 and cy - r <= ny - 1:
                            lo, hi = _cells_run(keys, start, base + cy - r, base + cy - r)
                            filled = _scan_run(
                                lo, hi, px, py, ps, xs, ys, ss, max_d, best_d, best_s, filled
                            )
                        if cy + r <= ny - 1 and cy + r >= 0:
                            lo, hi = _cells_run(keys, start, base + cy + r, base + cy + r)
                            filled = _scan_run(
                                lo, hi, px, py, ps, xs, ys, ss, max_d, best_d, best_s, filled
                            )
                # Exact distance from the record to the outside of the scanned square.
                bx = min(ux - (cx - r), (cx + r + 1) - ux)
                by = min(uy - (cy - r), (cy + r + 1) - uy)
                bound = min(bx, by) * cell - margin
                covers_all = cx - r <= 0 and cy - r <= 0 and cx + r >= nx - 1 and cy + r >= ny - 1
                if covers_all or bound >= max_d or (filled == m and best_d[m - 1] <= bound):
                    done = True
                    break
            if done:
                resolved[i] = True
                for t in range(m):
                    out[i, t] = best_d[t] if t < filled else np.inf


def subject_neighbour_distances(
    x: ArrayLike,
    y: ArrayLike,
    subjects: ArrayLike | None = None,
    *,
    count: int,
    max_distance: float = math.inf,
) -> NDArray[np.float64]:
    """Distances to the 1st..``count``-th nearest other subject of every record.

    Parameters
    ----------
    x, y
        Coordinates in metres (a projected CRS).
    subjects
        Subject id per record, or ``None`` (every record its own subject).
        Integer codes from :func:`subject_codes` are used as they are.
    count
        How many distinct other subjects to find (``k - 1``).
    max_distance
        Subjects farther than this are not searched for; their slots are ``inf``.
        Pass ``generalise_ratio * r_max_m``: no label depends on anything farther.

    Returns
    -------
    numpy.ndarray
        ``(n, count)`` float64, each row sorted ascending, ``inf`` where fewer than
        ``count`` other subjects lie within ``max_distance``.

    Examples
    --------
    >>> d = subject_neighbour_distances([0, 3, 0, 10], [0, 4, 1, 0], ["a", "b", "a", "c"], count=2)
    >>> d[0].tolist()
    [5.0, 10.0]
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if ya.shape != xa.shape or xa.ndim != 1:
        raise InputError(f"x and y must be 1-D of equal length, got {xa.shape} and {ya.shape}")
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise InputError(f"count must be an integer >= 1, got {count!r}")
    if not (max_distance > 0):
        raise InputError(f"max_distance must be > 0, got {max_distance!r}")
    out = np.full((n, int(count)), np.inf)
    if n == 0:
        return out
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        bad = int((~(np.isfinite(xa) & np.isfinite(ya))).sum())
        raise InputError(f"{bad} records have NaN or infinite coordinates; drop or fix them")
    subj = (
        np.arange(n, dtype=np.int64)
        if subjects is None
        else (
            np.ascontiguousarray(subjects, dtype=np.int64)
            if np.asarray(subjects).dtype.kind in "iu"
            else subject_codes(subjects, n)
        )
    )
    x0, y0 = float(xa.min()), float(ya.min())
    span = max(float(xa.max()) - x0, float(ya.max()) - y0)
    cell = _choose_cell(xa, ya, target=2.0 * (count + 1))
    pending = np.arange(n, dtype=np.int64)
    while pending.size:
        last = cell * _MAX_RINGS >= max_distance or cell > 2 * span + 1.0
        grid = _Grid(xa, ya, subj, cell, x0, y0)
        # Query in grid order for locality.
        rank = np.empty(n, dtype=np.int64)
        rank[grid.order] = np.arange(n, dtype=np.int64)
        q = pending[np.argsort(rank[pending], kind="stable")]
        qx, qy, qs = xa[q], ya[q], subj[q]
        part = np.full((q.size, int(count)), np.inf)
        resolved = np.zeros(q.size, dtype=np.bool_)
        rings = _MAX_RINGS
        if last:
            reach = min(max_distance, 2 * span + 2 * cell)
            rings = max(_MAX_RINGS, math.ceil(reach / cell) + 1)
        _knn_level(
            qx, qy, qs, grid.xs, grid.ys, grid.ss, grid.cell_keys, grid.cell_start,
            grid.nx, grid.ny, grid.cell, x0, y0, int(count), float(max_distance), rings,
            part, resolved,
        )  # fmt: skip
        out[q[resolved]] = part[resolved]
        pending = q[~resolved]
        cell *= _LEVEL_FACTOR
        if last and pending.size:  # pragma: no cover - guarded by the stopping rule
            raise RuntimeError("neighbour search did not resolve every record")
    return out


# ----------------------------------------------------------------------------
# Time: the (k-1)-th smallest time gap to other subjects within r_max.
# ----------------------------------------------------------------------------


@nb.njit(cache=True, parallel=True)
def _time_gaps(
    qx: NDArray[np.float64],
    qy: NDArray[np.float64],
    qs: NDArray[np.int64],
    qt: NDArray[np.float64],
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ss: NDArray[np.int64],
    ts: NDArray[np.float64],
    keys: NDArray[np.int64],
    start: NDArray[np.int64],
    ny: int,
    cell: float,
    x0: float,
    y0: float,
    m: int,
    radius: float,
    period: float,
    out: NDArray[np.float64],
) -> None:
    nq = qx.size
    nchunks = (nq + 4095) // 4096
    rings = math.ceil(radius / cell)
    for c in nb.prange(nchunks):
        best_d = np.empty(m, np.float64)
        best_s = np.empty(m, np.int64)
        for i in range(c * 4096, min(nq, (c + 1) * 4096)):
            px = qx[i]
            py = qy[i]
            ps = qs[i]
            pt = qt[i]
            cx = math.floor((px - x0) / cell)
            cy = math.floor((py - y0) / cell)
            filled = 0
            for gx in range(max(cx - rings, 0), cx + rings + 1):
                ylo = max(cy - rings, 0)
                yhi = min(cy + rings, ny - 1)
                if ylo > yhi:
                    continue
                lo, hi = _cells_run(keys, start, gx * ny + ylo, gx * ny + yhi)
                for j in range(lo, hi):
                    s = ss[j]
                    if s == ps:
                        continue
                    dx = xs[j] - px
                    dy = ys[j] - py
                    if math.sqrt(dx * dx + dy * dy) > radius:
                        continue
                    g = abs(ts[j] - pt)
                    if period > 0.0:
                        g = g % period
                        g = min(g, period - g)
                    if filled == m and g >= best_d[m - 1]:
                        continue
                    filled = _offer(best_d, best_s, filled, g, s)
            for t in range(m):
                out[i, t] = best_d[t] if t < filled else np.inf


def subject_time_gaps(
    x: ArrayLike,
    y: ArrayLike,
    t: ArrayLike,
    subjects: ArrayLike | None = None,
    *,
    count: int,
    radius: float,
    period: float | None = None,
) -> NDArray[np.float64]:
    """Smallest time gaps to the 1st..``count``-th other subject within ``radius``.

    The gap to a subject is the smallest ``|t_p - t_q|`` over that subject's
    records ``q`` within ``radius`` metres of ``p``; with ``period`` (86,400 for
    time of day) gaps wrap around the clock.

    Parameters
    ----------
    x, y
        Coordinates in metres.
    t
        Times in seconds (epoch seconds, or seconds since midnight).
    subjects
        Subject per record, or ``None``.
    count
        ``k - 1``.
    radius
        Spatial radius in metres (``r_max_m``), inclusive.
    period
        Clock period in seconds for cyclic gaps, or ``None``.

    Returns
    -------
    numpy.ndarray
        ``(n, count)`` float64 sorted gaps, ``inf`` where fewer subjects are near.

    Examples
    --------
    >>> g = subject_time_gaps([0, 1, 2], [0, 0, 0], [0, 60, 7200], count=2, radius=10)
    >>> g[0].tolist()
    [60.0, 7200.0]
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    ta = np.ascontiguousarray(t, dtype=np.float64)
    n = xa.size
    if ta.shape != xa.shape:
        raise InputError(f"t must hold one time per record ({n}), got shape {ta.shape}")
    if not np.isfinite(ta).all():
        raise InputError(f"{int((~np.isfinite(ta)).sum())} records have a missing time")
    out = np.full((n, int(count)), np.inf)
    if n == 0:
        return out
    subj = (
        np.arange(n, dtype=np.int64)
        if subjects is None
        else np.ascontiguousarray(subject_codes(subjects, n))
    )
    x0, y0 = float(xa.min()), float(ya.min())
    cell = float(radius)
    grid = _Grid(xa, ya, subj, cell, x0, y0)
    ts = np.ascontiguousarray(ta[grid.order])
    _time_gaps(
        xa, ya, subj, ta, grid.xs, grid.ys, grid.ss, ts, grid.cell_keys, grid.cell_start,
        grid.ny, cell, x0, y0, int(count), float(radius), float(period or 0.0), out,
    )  # fmt: skip
    return out

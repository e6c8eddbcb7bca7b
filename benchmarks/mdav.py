"""MDAV microaggregation, the per-record ideal and the hexagonal tessellation estimate.

Three references for ``bench_grouping.py`` (issue 19), all on plane coordinates in
metres, every record its own subject, the group mean as representative.

**MDAV** (maximum distance to average vector; Domingo-Ferrer & Mateo-Sanz 2002, the
fixed-size variant that sdcMicro's ``microaggregation(method = "mdav")`` uses by
default). ``R`` is the set of records not yet grouped, at first all of them. Distances
are Euclidean; "farthest" and "nearest" are decided on the squared distance
``dx * dx + dy * dy`` computed in float64, ties to the lowest record index.

1. While ``|R| >= 3k``: ``c`` = the centroid of ``R`` (the mean of its coordinates);
   ``r`` = the record of ``R`` farthest from ``c``; the group ``r`` plus the ``k - 1``
   records of ``R \\ {r}`` nearest to ``r`` leaves ``R``; ``s`` = the record of
   (the new) ``R`` farthest from ``r``; the group ``s`` plus the ``k - 1`` records of
   ``R \\ {s}`` nearest to ``s`` leaves ``R``.
2. If ``2k <= |R| < 3k``: ``c`` = the centroid of ``R``, ``r`` = the record farthest
   from it; ``r`` and its ``k - 1`` nearest form a group, and the rest (``k .. 2k - 1``
   records) another.
3. If ``0 < |R| < 2k``: ``R`` is one group (smaller than ``k`` only when the whole
   input is).

Groups are numbered in the order they are formed. :func:`mdav_groups` runs this
exactly (the same groups as the quadratic loop written out in
``tests/unit/test_bench_mdav.py``) with a KD-tree whose nodes keep the count and the
bounding box of their records still in ``R``: a record leaving ``R`` refreshes its
leaf's box and the boxes of the leaf's ancestors; a farthest-record query descends the
subtree with the larger box-to-query maximum first and skips a node whose maximum is
below the best found, a nearest query skips a node whose minimum is above the worst
of the current ``m`` best. The centroid is a running sum (exact for integer
coordinates, as in the test). Cost about ``O(n log n)``: 1e5 records in well under a
second.

**Per-record ideal.** For each record ``i`` of the set: ``N_i`` = ``i`` and the
``k - 1`` other records nearest to it (``scipy.spatial.cKDTree.query`` with ``k``
neighbours, which returns ``i`` itself at distance 0; with more than ``k`` records at
``i``'s coordinate, ``k`` of them, the same centroid); ``c_i`` = the mean of ``N_i``;
the ideal displacement of ``i`` is ``|i - c_i|``. The figure is the mean over the
records. It is what a record would be moved if it could have its own best group of
``k``; no partition reaches it (a record's group is shared with ``k - 1`` others whose
own nearest differ), so it bounds what a partition of these records can do from below
only loosely.

**Tessellation estimate** (for uniform data). A perfect tiling of the plane by regular
hexagons, each holding ``k`` records, at the data's density ``rho``: each hexagon has
area ``A = k / rho`` and its centre as representative. The mean distance from a
uniform point of a regular hexagon to its centre is, with apothem
``a = sqrt(A / (2 sqrt 3))`` (twelve right triangles of angle pi/6 at the centre,
``int sec^3``)::

    mean = a * (2 / sqrt 3) * (1/3 + ln(3) / 4) = 0.70204 a = 0.377 195 sqrt(A)

(:func:`hexagon_mean_distance`; ``tests/unit/test_bench_mdav.py`` checks it against a
direct numerical integration). A disc of the same area, the best cell shape, gives
``(2/3) sqrt(A / pi) = 0.376 126 sqrt(A)``, 0.28 % less.

This is the continuous figure (a cell's centre as representative). It is *not* a lower
bound for groups of ``k`` actual records with their *mean* as representative: the mean
of ``k`` points is nearer to them than the cell's centre (the mean squared distance
shrinks by ``(k - 1) / k``), and a partition adapts to where the records fell; MDAV on
uniform points does better than it (``GROUPING.md``). :func:`hexagon_sample_mean_distance`
gives the figure with the sample mean: ``k`` points uniform in the same hexagon, the
mean distance from one of them to their mean (Monte Carlo, fixed seed, ``cells``
hexagons; relative standard error about ``0.7 / sqrt(cells k)``).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import NDArray

#: Records per KD-tree leaf.
LEAF_SIZE = 8
#: Mean distance to the centre of a regular hexagon of unit area (see the docstring).
HEX_UNIT_MEAN = (
    (2.0 / math.sqrt(3.0)) * (1.0 / 3.0 + math.log(3.0) / 4.0) / math.sqrt(2.0 * math.sqrt(3.0))
)


# --------------------------------------------------------------------------- KD-tree


@nb.njit(cache=True)
def _build(
    x: NDArray[np.float64], y: NDArray[np.float64], leaf_size: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """A balanced KD-tree in heap layout (children of node ``i``: ``2i+1``, ``2i+2``).

    Returns ``perm`` (records in leaf order), ``lo``/``hi`` (each node's slice of
    ``perm``; ``lo = hi = 0`` for an unused heap slot) and ``leaf_of`` (the leaf
    holding each record). A node of at most ``leaf_size`` records is a leaf; otherwise
    its records are sorted on the wider dimension of their box and cut in halves.
    """
    n = x.size
    depth = 0
    while (n >> depth) > leaf_size:
        depth += 1
    n_nodes = (1 << (depth + 2)) - 1
    lo = np.zeros(n_nodes, dtype=np.int64)
    hi = np.zeros(n_nodes, dtype=np.int64)
    perm = np.arange(n)
    leaf_of = np.empty(n, dtype=np.int64)
    stack = np.empty(2 * depth + 8, dtype=np.int64)
    stack[0] = 0
    top = 1
    hi[0] = n
    while top > 0:
        top -= 1
        node = stack[top]
        a = lo[node]
        b = hi[node]
        if b - a <= leaf_size:
            for i in range(a, b):
                leaf_of[perm[i]] = node
            hi[node] = b
            continue
        x0 = np.inf
        x1 = -np.inf
        y0 = np.inf
        y1 = -np.inf
        for i in range(a, b):
            p = perm[i]
            x0 = min(x0, x[p])
            x1 = max(x1, x[p])
            y0 = min(y0, y[p])
            y1 = max(y1, y[p])
        seg = perm[a:b].copy()
        key = x[seg] if x1 - x0 >= y1 - y0 else y[seg]
        perm[a:b] = seg[np.argsort(key, kind="mergesort")]
        mid = (a + b) // 2
        left = 2 * node + 1
        lo[left] = a
        hi[left] = mid
        lo[left + 1] = mid
        hi[left + 1] = b
        stack[top] = left + 1
        stack[top + 1] = left
        top += 2
    return perm, lo, hi, leaf_of


@nb.njit(cache=True)
def _refresh_leaf(
    node: int,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    perm: NDArray[np.int64],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    alive: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    box: NDArray[np.float64],
) -> None:
    c = 0
    x0 = np.inf
    x1 = -np.inf
    y0 = np.inf
    y1 = -np.inf
    for i in range(lo[node], hi[node]):
        p = perm[i]
        if alive[p]:
            c += 1
            x0 = min(x0, x[p])
            x1 = max(x1, x[p])
            y0 = min(y0, y[p])
            y1 = max(y1, y[p])
    cnt[node] = c
    box[node, 0] = x0
    box[node, 1] = x1
    box[node, 2] = y0
    box[node, 3] = y1


@nb.njit(cache=True)
def _refresh_inner(node: int, cnt: NDArray[np.int64], box: NDArray[np.float64]) -> None:
    a = 2 * node + 1
    b = a + 1
    cnt[node] = cnt[a] + cnt[b]
    box[node, 0] = min(box[a, 0], box[b, 0])
    box[node, 1] = max(box[a, 1], box[b, 1])
    box[node, 2] = min(box[a, 2], box[b, 2])
    box[node, 3] = max(box[a, 3], box[b, 3])


@nb.njit(cache=True)
def _remove(
    p: int,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    perm: NDArray[np.int64],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    leaf_of: NDArray[np.int64],
    alive: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    box: NDArray[np.float64],
) -> None:
    """Take record ``p`` out of ``R``: its leaf and the leaf's ancestors are refreshed."""
    alive[p] = False
    node = leaf_of[p]
    _refresh_leaf(node, x, y, perm, lo, hi, alive, cnt, box)
    while node > 0:
        node = (node - 1) >> 1
        _refresh_inner(node, cnt, box)


@nb.njit(cache=True)
def _farthest(
    qx: float,
    qy: float,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    perm: NDArray[np.int64],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    leaf_of: NDArray[np.int64],
    alive: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    box: NDArray[np.float64],
    stack: NDArray[np.int64],
) -> int:
    """The record of ``R`` farthest from ``(qx, qy)`` (ties: the lowest index)."""
    best_d = -1.0
    best = -1
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        node = stack[top]
        if cnt[node] == 0:
            continue
        dx = max(abs(qx - box[node, 0]), abs(qx - box[node, 1]))
        dy = max(abs(qy - box[node, 2]), abs(qy - box[node, 3]))
        if dx * dx + dy * dy < best_d:
            continue
        a = 2 * node + 1
        if a >= lo.size or hi[a] == 0:  # a leaf
            for i in range(lo[node], hi[node]):
                p = perm[i]
                if alive[p]:
                    ex = x[p] - qx
                    ey = y[p] - qy
                    d = ex * ex + ey * ey
                    if d > best_d or (d == best_d and p < best):
                        best_d = d
                        best = p
            continue
        # Push the child with the larger maximum last (visited first).
        ma = _max_d2(qx, qy, box, a) if cnt[a] > 0 else -1.0
        mb = _max_d2(qx, qy, box, a + 1) if cnt[a + 1] > 0 else -1.0
        if ma >= mb:
            stack[top] = a + 1
            stack[top + 1] = a
        else:
            stack[top] = a
            stack[top + 1] = a + 1
        top += 2
    return best


@nb.njit(cache=True)
def _max_d2(qx: float, qy: float, box: NDArray[np.float64], node: int) -> float:
    dx = max(abs(qx - box[node, 0]), abs(qx - box[node, 1]))
    dy = max(abs(qy - box[node, 2]), abs(qy - box[node, 3]))
    return dx * dx + dy * dy


@nb.njit(cache=True)
def _min_d2(qx: float, qy: float, box: NDArray[np.float64], node: int) -> float:
    dx = max(box[node, 0] - qx, 0.0, qx - box[node, 1])
    dy = max(box[node, 2] - qy, 0.0, qy - box[node, 3])
    return dx * dx + dy * dy


@nb.njit(cache=True)
def _nearest(
    qx: float,
    qy: float,
    m: int,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    perm: NDArray[np.int64],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    alive: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    box: NDArray[np.float64],
    stack: NDArray[np.int64],
    out: NDArray[np.int64],
    out_d: NDArray[np.float64],
) -> int:
    """The ``m`` records of ``R`` nearest to ``(qx, qy)`` into ``out`` (ties: lowest index).

    ``out[:found]`` is sorted by (distance, index); returns ``found`` (< ``m`` only
    when ``R`` holds fewer).
    """
    found = 0
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        node = stack[top]
        if cnt[node] == 0:
            continue
        if found == m and _min_d2(qx, qy, box, node) > out_d[m - 1]:
            continue
        a = 2 * node + 1
        if a >= lo.size or hi[a] == 0:  # a leaf
            for i in range(lo[node], hi[node]):
                p = perm[i]
                if not alive[p]:
                    continue
                ex = x[p] - qx
                ey = y[p] - qy
                d = ex * ex + ey * ey
                if found == m and (d > out_d[m - 1] or (d == out_d[m - 1] and p > out[m - 1])):
                    continue
                # Insert (d, p) into the sorted list, dropping the last when full.
                j = found if found < m else m - 1
                while j > 0 and (out_d[j - 1] > d or (out_d[j - 1] == d and out[j - 1] > p)):
                    out_d[j] = out_d[j - 1]
                    out[j] = out[j - 1]
                    j -= 1
                out_d[j] = d
                out[j] = p
                if found < m:
                    found += 1
            continue
        ma = _min_d2(qx, qy, box, a) if cnt[a] > 0 else np.inf
        mb = _min_d2(qx, qy, box, a + 1) if cnt[a + 1] > 0 else np.inf
        if ma <= mb:  # the nearer child visited first
            stack[top] = a + 1
            stack[top + 1] = a
        else:
            stack[top] = a
            stack[top + 1] = a + 1
        top += 2
    return found


# --------------------------------------------------------------------------- MDAV


@nb.njit(cache=True)
def mdav_groups(x: NDArray[np.float64], y: NDArray[np.float64], k: int) -> NDArray[np.int64]:
    """Group ids of fixed-size MDAV (see the module docstring).

    Parameters
    ----------
    x, y
        Coordinates in metres.
    k
        Group size (every group has ``k`` records, one has ``k .. 2k - 1``; fewer
        only when the input has fewer than ``k``).

    Returns
    -------
    numpy.ndarray
        ``int64`` group id per record, ``0 .. n_groups - 1`` in the order formed.
    """
    n = x.size
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    perm, lo, hi, leaf_of = _build(x, y, LEAF_SIZE)
    n_nodes = lo.size
    alive = np.ones(n, dtype=np.bool_)
    cnt = np.zeros(n_nodes, dtype=np.int64)
    box = np.empty((n_nodes, 4), dtype=np.float64)
    box[:, 0] = np.inf
    box[:, 1] = -np.inf
    box[:, 2] = np.inf
    box[:, 3] = -np.inf
    # Boxes and counts bottom-up (children have larger heap indices).
    for node in range(n_nodes - 1, -1, -1):
        a = 2 * node + 1
        if hi[node] == 0 and node > 0:
            continue  # unused slot
        if a >= n_nodes or hi[a] == 0:
            _refresh_leaf(node, x, y, perm, lo, hi, alive, cnt, box)
        else:
            _refresh_inner(node, cnt, box)
    stack = np.empty(4 * 64 + 8, dtype=np.int64)
    near = np.empty(max(k, 1), dtype=np.int64)
    near_d = np.empty(max(k, 1), dtype=np.float64)
    sx = 0.0
    sy = 0.0
    for i in range(n):
        sx += x[i]
        sy += y[i]
    left = n
    g = 0
    while left > 0:
        if left < 2 * k:  # step 3: the rest is one group
            for i in range(n):
                if alive[i]:
                    out[i] = g
            g += 1
            break
        # Steps 1 and 2 both start from the record farthest from the centroid.
        cx = sx / left
        cy = sy / left
        rounds = 2 if left >= 3 * k else 1
        seed = _farthest(cx, cy, x, y, perm, lo, hi, leaf_of, alive, cnt, box, stack)
        first = seed
        for rnd in range(rounds):
            if rnd == 1:  # the record farthest from the first seed
                seed = _farthest(
                    x[first], y[first], x, y, perm, lo, hi, leaf_of, alive, cnt, box, stack
                )
            first = seed
            _remove(seed, x, y, perm, lo, hi, leaf_of, alive, cnt, box)
            out[seed] = g
            sx -= x[seed]
            sy -= y[seed]
            found = _nearest(
                x[seed], y[seed], k - 1, x, y, perm, lo, hi, alive, cnt, box, stack, near, near_d
            )
            for j in range(found):
                p = near[j]
                _remove(p, x, y, perm, lo, hi, leaf_of, alive, cnt, box)
                out[p] = g
                sx -= x[p]
                sy -= y[p]
            left -= found + 1
            g += 1
        if rounds == 1:  # step 2: the k .. 2k - 1 left form the last group
            for i in range(n):
                if alive[i]:
                    out[i] = g
            g += 1
            break
    return out


# --------------------------------------------------------------------------- ideal


def per_record_ideal(x: NDArray[np.float64], y: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """Per record, the distance to the centroid of itself and its ``k - 1`` nearest.

    Parameters
    ----------
    x, y
        Coordinates in metres.
    k
        Group size.

    Returns
    -------
    numpy.ndarray
        ``float64`` per record (see the module docstring; its mean is the figure).
    """
    from scipy.spatial import cKDTree

    n = x.size
    if n == 0:
        return np.zeros(0)
    m = min(k, n)
    pts = np.column_stack([x, y])
    _, idx = cKDTree(pts).query(pts, k=m)
    idx = np.asarray(idx).reshape(n, m)
    cx = x[idx].mean(axis=1)
    cy = y[idx].mean(axis=1)
    return np.asarray(np.hypot(x - cx, y - cy))


def hexagon_mean_distance(area: float) -> float:
    """Mean distance from a uniform point of a regular hexagon of ``area`` to its centre.

    Parameters
    ----------
    area
        Hexagon area (m^2).

    Returns
    -------
    float
        ``0.377195 * sqrt(area)`` (see the module docstring).
    """
    return HEX_UNIT_MEAN * math.sqrt(area)


def hexagon_points(rng: np.random.Generator, count: int, area: float) -> NDArray[np.float64]:
    """``count`` points uniform in a regular hexagon of ``area`` centred at the origin.

    Parameters
    ----------
    rng
        Random generator.
    count
        Number of points.
    area
        Hexagon area (m^2); vertices at ``(+-side, 0)``.

    Returns
    -------
    numpy.ndarray
        ``(count, 2)``.
    """
    side = math.sqrt(2.0 * area / (3.0 * math.sqrt(3.0)))  # = the circumradius
    apo = side * math.sqrt(3.0) / 2.0
    out = np.empty((0, 2))
    while out.shape[0] < count:  # rejection from the bounding box (acceptance 3/4)
        cand = rng.uniform(-1.0, 1.0, (2 * count + 8, 2)) * (side, apo)
        u = np.abs(cand)
        inside = (u[:, 1] <= apo) & (math.sqrt(3.0) * u[:, 0] + u[:, 1] <= math.sqrt(3.0) * side)
        out = np.concatenate([out, cand[inside]])
    return out[:count]


def hexagon_sample_mean_distance(area: float, k: int, cells: int = 200_000) -> float:
    """Mean distance from ``k`` uniform points of a regular hexagon to their own mean.

    Parameters
    ----------
    area
        Hexagon area (m^2).
    k
        Points per hexagon.
    cells
        Monte Carlo sample size (hexagons; seed 0).

    Returns
    -------
    float
        Metres (see the module docstring).
    """
    pts = hexagon_points(np.random.default_rng(0), cells * k, area)
    pts = pts.reshape(cells, k, 2)
    dev = pts - pts.mean(axis=1, keepdims=True)
    return float(np.hypot(dev[..., 0], dev[..., 1]).mean())


def tessellation_estimate(density: float, k: int) -> float:
    """Mean displacement of a hexagonal tiling with ``k`` records per cell at ``density``.

    Parameters
    ----------
    density
        Records per m^2.
    k
        Records per cell.

    Returns
    -------
    float
        Metres.
    """
    return hexagon_mean_distance(k / density)

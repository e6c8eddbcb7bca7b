"""Splits: a group cut in two, or a pair of neighbouring groups cut in three.

The local search (:func:`geokanon.grouping._improve`) and the pair re-cuts
(:mod:`geokanon._recut`) never change the number of groups. A group of 2k atoms or more,
or a pair of neighbouring groups of 3k atoms or more, can often be divided into one group
more at a lower cost: where records are sparse, the groups the 1-D partition and the
leftover placement leave are wide, and a wide group of ten records costs far more than two
groups of five. Here such a pool of atoms is cut along a few directions (for three parts:
one part cut off, then the rest cut in two) and the cut is taken when it lowers the
records' summed distance to their groups' centroids and every part passes the grouping's
exact check (k distinct subjects and a point of the coarsest lattice within r of every
member, :func:`geokanon.grouping._covering_rep_nb`).

No atom is placed or unplaced, so the placed share is kept; the new groups take the
numbers after the existing ones.

Determinism: every candidate's best cut is computed from the starting groups (in parallel,
each candidate on its own), then the cuts are applied one after another, by falling gain
(ties: candidate order), skipping a candidate one of whose groups already changed; new
groups are numbered in that order. The result depends only on the input, not on the
number of threads.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import NDArray

from geokanon._recut import _group_costs, _pool_cost, _pool_valid, candidate_pairs
from geokanon.grouping import CAP_K, KernelInt

__all__ = ["split_groups"]

#: Directions the pool is sorted along (evenly spaced over a half-turn for a cut in two;
#: over a full turn for the first cut of a pair in three, so that the part cut off may
#: lie on either side). Even.
SPLIT_DIRECTIONS = 4
#: Cuts per candidate costed exactly: the best by squared distances.
SPLIT_EXACT = 2
#: Pairs cut in three: neighbours on the re-cuts' Hilbert curves
#: (:func:`geokanon._recut.candidate_pairs`) whose centroids are at most this many times
#: the sum of the two groups' radii apart (farther than the re-cuts' pairs: a wide pair
#: of sparse groups is what gains).
SPLIT_REACH = 1.5
#: Candidates per parallel task.
_CHUNK = 512


def split_groups(
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
    pairs: NDArray[np.int64] | None = None,
) -> int:
    """Cut groups in two and pairs of groups in three, in place on ``atom_group``.

    Parameters
    ----------
    atom_group
        Group of every atom (-1: none); changed in place.
    n_groups
        Number of groups.
    ax, ay, aw, asub
        Working coordinates, record count and subject code of every atom.
    k, r_work, step
        Distinct subjects per group, the radius in working metres, the coarsest
        lattice's step.
    pairs
        The pairs of neighbouring groups that may be cut in three (rows ``(g, h)``), as
        :func:`geokanon._recut.candidate_pairs` gives them at :data:`SPLIT_REACH` (the
        default); those holding fewer than 3k atoms, or a group of fewer than k or more
        than ``CAP_K * k``, are passed over. Every group of 2k to ``CAP_K * k`` atoms
        may be cut in two.

    Returns
    -------
    int
        The number of groups after the splits (``n_groups`` plus one per split).
    """
    placed = np.flatnonzero(atom_group >= 0)
    if placed.size < 2 * k or n_groups < 1:
        return n_groups
    ax = np.ascontiguousarray(ax, dtype=np.float64)
    ay = np.ascontiguousarray(ay, dtype=np.float64)
    aw = np.ascontiguousarray(aw, dtype=np.float64)
    if pairs is None:
        pairs = candidate_pairs(atom_group, n_groups, ax, ay, aw, k, (SPLIT_REACH,), (3 * k,))[0]
    sub = np.ascontiguousarray(asub, dtype=np.int64).ravel()
    return int(
        _split_all(
            atom_group, n_groups, ax, ay, aw, sub, np.ascontiguousarray(pairs, dtype=np.int64),
            k, float(r_work), float(step), CAP_K * k, SPLIT_DIRECTIONS, SPLIT_EXACT,
        )
    )  # fmt: skip


@nb.njit(cache=True)
def _sorted_along(ux: NDArray[np.float64], uy: NDArray[np.float64], n: int, ang: float,
                  proj: NDArray[np.float64], order: NDArray[np.int64]) -> None:  # fmt: skip
    """``order[:n]``: the pool sorted by projection on the direction ``ang`` (ties:
    pool position)."""
    cd = math.cos(ang)
    sd = math.sin(ang)
    for t in range(n):
        v = ux[t] * cd + uy[t] * sd
        u = t
        while u > 0 and proj[u - 1] > v:
            proj[u] = proj[u - 1]
            order[u] = order[u - 1]
            u -= 1
        proj[u] = v
        order[u] = t


@nb.njit(cache=True, inline="always")
def _sse(w: float, x: float, y: float, q: float) -> float:
    """Weighted sum of squared distances to the centroid from the sums of weights,
    weighted coordinates and weighted squared norms."""
    return q - (x * x + y * y) / w


@nb.njit(cache=True)
def _keep_best(v: float, code: int, top_v: NDArray[np.float64], top_c: NDArray[np.int64],
               m: int) -> None:  # fmt: skip
    """Insert ``(v, code)`` into the ``m`` lowest scores kept in ascending order (a
    later equal score goes after the earlier ones)."""
    if v >= top_v[m - 1]:
        return
    u = m - 1
    while u > 0 and top_v[u - 1] > v:
        top_v[u] = top_v[u - 1]
        top_c[u] = top_c[u - 1]
        u -= 1
    top_v[u] = v
    top_c[u] = code


@nb.njit(cache=True)
def _best_split(
    g: int,
    h: int,
    base: float,
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    k: int,
    r: float,
    step: float,
    n_dir: int,
    m_exact: int,
    buf_i: NDArray[np.int64],
    buf_f: NDArray[np.float64],
    orders: NDArray[np.int64],
    top_v: NDArray[np.float64],
    top_c: NDArray[np.int64],
) -> tuple[float, int]:
    """The best valid division of group g (``h`` -1) in two, or of the pair (g, h) in
    three, whose summed cost now is ``base``.

    The pool is sorted along ``n_dir`` directions (from the x axis; ties: pool
    position). In two: every cut of every direction over a half-turn leaving k atoms a
    side. In three: every first part cut off along a direction over a full turn (k atoms
    or more, 2k left), and every cut in two of the rest along the half-turn's directions.
    Cuts are scored by squared distances, the ``m_exact`` best are costed exactly, and
    the cheapest of those below ``base`` whose parts all pass the exact check is the
    answer. Returns its gain (0: none) and the pool's size; ``buf_i[5]`` then holds each
    pooled atom's part (0, 1, 2) and ``buf_i[0]`` the pooled atoms.
    """
    mem = buf_i[0]
    us = buf_i[1]
    order = buf_i[2]
    tmp = buf_i[3]
    part = buf_i[4]
    side = buf_i[5]
    ux = buf_f[0]
    uy = buf_f[1]
    uw = buf_f[2]
    proj = buf_f[3]
    bx = buf_f[4]
    by = buf_f[5]
    bw = buf_f[6]
    n = 0
    for e in (g, h):
        if e < 0:
            continue
        a = head[e]
        while a >= 0:
            mem[n] = a
            n += 1
            a = nxt[a]
    ox = ax[mem[0]]
    oy = ay[mem[0]]
    tw = 0.0
    tx = 0.0
    ty = 0.0
    tq = 0.0
    for t in range(n):
        ux[t] = ax[mem[t]] - ox
        uy[t] = ay[mem[t]] - oy
        uw[t] = aw[mem[t]]
        us[t] = asub[mem[t]]
        tw += uw[t]
        tx += uw[t] * ux[t]
        ty += uw[t] * uy[t]
        tq += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
    parts = 2 if h < 0 else 3
    # orders[d]: along direction d of the half-turn; then, for a first part cut off along
    # direction d of the full turn (an even n_dir: the half-turn's direction 2d, or its
    # reverse from n_dir / 2 on), the same order or its reverse
    for d in range(n_dir):
        _sorted_along(ux, uy, n, math.pi * d / n_dir, proj, order)
        orders[d, :n] = order[:n]
    n_turn = n_dir if parts == 3 else 0
    for d in range(n_turn):
        e = (2 * d) % n_dir
        if 2 * d < n_dir:
            orders[n_dir + d, :n] = orders[e, :n]
        else:
            for i in range(n):
                orders[n_dir + d, i] = orders[e, n - 1 - i]
    top_v[:m_exact] = np.inf
    top_c[:m_exact] = -1
    nn = n + 1
    if parts == 2:
        for d in range(n_dir):
            pw = 0.0
            px = 0.0
            py = 0.0
            pq = 0.0
            for c in range(1, n - k + 1):
                t = orders[d, c - 1]
                pw += uw[t]
                px += uw[t] * ux[t]
                py += uw[t] * uy[t]
                pq += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
                if c >= k:
                    v = _sse(pw, px, py, pq) + _sse(tw - pw, tx - px, ty - py, tq - pq)
                    _keep_best(v, d * nn + c, top_v, top_c, m_exact)
    else:
        for d1 in range(n_turn):
            aw_ = 0.0
            ax_ = 0.0
            ay_ = 0.0
            aq_ = 0.0
            for t in range(n):
                part[t] = 1
            for c1 in range(1, n - 2 * k + 1):
                t = orders[n_dir + d1, c1 - 1]
                part[t] = 0
                aw_ += uw[t]
                ax_ += uw[t] * ux[t]
                ay_ += uw[t] * uy[t]
                aq_ += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
                if c1 < k:
                    continue
                first = _sse(aw_, ax_, ay_, aq_)
                rw = tw - aw_
                rx = tx - ax_
                ry = ty - ay_
                rq = tq - aq_
                m = n - c1
                for d2 in range(n_dir):
                    pw = 0.0
                    px = 0.0
                    py = 0.0
                    pq = 0.0
                    c2 = 0
                    for i in range(n):
                        t = orders[d2, i]
                        if part[t] == 0:
                            continue
                        c2 += 1
                        if c2 > m - k:
                            break
                        pw += uw[t]
                        px += uw[t] * ux[t]
                        py += uw[t] * uy[t]
                        pq += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
                        if c2 >= k:
                            v = first + _sse(pw, px, py, pq) + _sse(
                                rw - pw, rx - px, ry - py, rq - pq)  # fmt: skip
                            _keep_best(v, (d1 * nn + c1) * n_dir * nn + d2 * nn + c2,
                                       top_v, top_c, m_exact)  # fmt: skip
    zero = np.int64(0)  # typed, not literal: numba compiles a callee once per arg types
    limit = base - 1e-9 * (1.0 + base)
    best_v = limit
    best_code = -1
    for i in range(m_exact):
        code = top_c[i]
        if code < 0:
            break
        _parts_of(np.int64(code), np.int64(n), n_dir, parts, orders, part)
        v = 0.0
        for p in range(parts):
            c = 0
            for t in range(n):
                if part[t] == p:
                    order[c] = t
                    c += 1
            v += _pool_cost(ux, uy, uw, order, zero, np.int64(c))
        if v >= best_v:
            continue
        ok = True
        for p in range(parts):
            c = 0
            for t in range(n):
                if part[t] == p:
                    order[c] = t
                    c += 1
            if not _pool_valid(order, zero, np.int64(c), ux, uy, uw, us, ox, oy, tmp, bx, by, bw,
                               k, r, step):  # fmt: skip
                ok = False
                break
        if ok:
            best_v = v
            best_code = code
    if best_code < 0:
        return 0.0, n
    _parts_of(np.int64(best_code), np.int64(n), n_dir, parts, orders, side)
    return base - best_v, n


@nb.njit(cache=True)
def _parts_of(code: KernelInt, n: KernelInt, n_dir: int, parts: int, orders: NDArray[np.int64],
              part: NDArray[np.int64]) -> None:  # fmt: skip
    """``part[:n]``: each pooled atom's part under the cut ``code`` (see
    :func:`_best_split`)."""
    nn = n + 1
    if parts == 2:
        d = code // nn
        c = code % nn
        for i in range(n):
            part[orders[d, i]] = 0 if i < c else 1
        return
    inner = code % (n_dir * nn)
    outer = code // (n_dir * nn)
    d1 = outer // nn
    c1 = outer % nn
    d2 = inner // nn
    c2 = inner % nn
    for i in range(n):
        part[orders[n_dir + d1, i]] = 0 if i < c1 else 1
    seen = 0
    for i in range(n):
        t = orders[d2, i]
        if part[t] == 0:
            continue
        seen += 1
        part[t] = 1 if seen <= c2 else 2


@nb.njit(cache=True)
def _scratch(
    big: int, n_dir: int, m_exact: int
) -> tuple[
    NDArray[np.int64], NDArray[np.float64], NDArray[np.int64], NDArray[np.float64],
    NDArray[np.int64],
]:  # fmt: skip
    """Scratch buffers of :func:`_best_split` for pools of up to ``big`` atoms."""
    return (
        np.empty((6, big), np.int64),
        np.empty((7, big)),
        np.empty((2 * n_dir, big), np.int64),
        np.empty(m_exact),
        np.empty(m_exact, np.int64),
    )


@nb.njit(cache=True, parallel=True)
def _propose(
    cand: NDArray[np.int64],
    cost: NDArray[np.float64],
    head: NDArray[np.int64],
    nxt: NDArray[np.int64],
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    k: int,
    r: float,
    step: float,
    cap: int,
    n_dir: int,
    m_exact: int,
    gain: NDArray[np.float64],
    part: NDArray[np.int8],
) -> None:
    """Every candidate's best division against the starting groups, each on its own
    (so in parallel, in chunks of :data:`_CHUNK` candidates with their own scratch):
    ``gain[j]`` (0: none) and, when it gains, ``part[j]`` the part of each pooled atom
    (the atoms of g then h, each in index order)."""
    big = 2 * cap + 2
    m = cand.shape[0]
    n_chunks = (m + _CHUNK - 1) // _CHUNK
    for ci in nb.prange(n_chunks):
        buf_i, buf_f, orders, top_v, top_c = _scratch(big, n_dir, m_exact)
        for j in range(ci * _CHUNK, min(m, (ci + 1) * _CHUNK)):
            g = cand[j, 0]
            h = cand[j, 1]
            gain[j] = 0.0
            base = cost[g] + (cost[h] if h >= 0 else 0.0)
            gain[j], n = _best_split(g, h, base, head, nxt, ax, ay, aw, asub, k, r, step, n_dir,
                                     m_exact, buf_i, buf_f, orders, top_v, top_c)  # fmt: skip
            if gain[j] > 0.0:
                for t in range(n):
                    part[j, t] = buf_i[5, t]


@nb.njit(cache=True)
def _split_all(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    asub: NDArray[np.int64],
    pairs: NDArray[np.int64],
    k: int,
    r: float,
    step: float,
    cap: int,
    n_dir: int,
    m_exact: int,
) -> int:
    """The candidates (every group of 2k to ``cap`` atoms, in index order, then the
    pairs of 3k atoms or more, neither of more than ``cap`` nor fewer than k, in their
    order), their proposals (:func:`_propose`), then their application one after
    another by falling gain (ties: candidate order), each only when none of its groups
    changed before; the new group of each takes the next number. Returns the number of
    groups after."""
    na = ax.size
    head = np.full(n_groups, -1, np.int64)
    nxt = np.full(na, -1, np.int64)
    size = np.zeros(n_groups, np.int64)
    for a in range(na - 1, -1, -1):
        g = atom_group[a]
        if g >= 0:
            nxt[a] = head[g]
            head[g] = a
            size[g] += 1
    m = 0
    for g in range(n_groups):
        if 2 * k <= size[g] <= cap:
            m += 1
    for p in range(pairs.shape[0]):
        g = pairs[p, 0]
        h = pairs[p, 1]
        if k <= size[g] <= cap and k <= size[h] <= cap and size[g] + size[h] >= 3 * k:
            m += 1
    cand = np.empty((m, 2), np.int64)
    need = np.zeros(n_groups, np.bool_)
    m = 0
    for g in range(n_groups):
        if 2 * k <= size[g] <= cap:
            cand[m, 0] = g
            cand[m, 1] = -1
            need[g] = True
            m += 1
    for p in range(pairs.shape[0]):
        g = pairs[p, 0]
        h = pairs[p, 1]
        if k <= size[g] <= cap and k <= size[h] <= cap and size[g] + size[h] >= 3 * k:
            cand[m, 0] = g
            cand[m, 1] = h
            need[g] = True
            need[h] = True
            m += 1
    if m == 0:
        return n_groups
    cost = _group_costs(need, head, nxt, ax, ay, aw)
    gain = np.empty(m)
    part = np.empty((m, 2 * cap + 2), np.int8)
    _propose(cand, cost, head, nxt, ax, ay, aw, asub, k, r, step, cap, n_dir, m_exact,
             gain, part)  # fmt: skip
    touched = np.zeros(n_groups, np.bool_)
    ng = n_groups
    for j in np.argsort(-gain, kind="mergesort"):
        if gain[j] <= 0.0:
            break
        g = cand[j, 0]
        h = cand[j, 1]
        if touched[g] or (h >= 0 and touched[h]):
            continue
        # neither group changed since the proposal: its parts, in the pool's order
        t = 0
        for e in (g, h):
            if e < 0:
                continue
            a = head[e]
            while a >= 0:
                p = part[j, t]
                if p == 0:
                    atom_group[a] = g
                elif p == 1 and h >= 0:
                    atom_group[a] = h
                else:
                    atom_group[a] = ng
                t += 1
                a = nxt[a]
        ng += 1
        touched[g] = True
        if h >= 0:
            touched[h] = True
    return ng

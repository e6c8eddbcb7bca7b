"""Re-cuts of pairs of neighbouring groups, after the grouping's local search.

The 1-opt local search of :func:`geokanon.grouping._improve` changes one or two atoms at a
time. A pair of neighbouring groups whose best division differs from theirs by several
atoms at once (a group that reaches into its neighbour's cluster, an outlier shared badly)
is out of its reach. Here the atoms of such a pair are pooled and cut in two along a few
directions; the cut replaces the pair when it lowers the records' summed distance to their
groups' centroids and both parts pass the grouping's exact check (k distinct subjects and a
point of the coarsest lattice within r of every member, :func:`_covering_rep_nb`).

The number of groups and the placed atoms never change, so the placed share is kept.

Determinism: in each round every candidate pair's best cut is computed from the round's
starting groups (in parallel, each pair on its own), then the cuts are applied one after
another, by falling gain (ties: pair order), skipping a pair one of whose groups already
changed in the round. The result depends only on the input, not on the number of threads.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from numpy.typing import NDArray

from geokanon.grouping import (
    CAP_K,
    KernelInt,
    _covering_rep_nb,
    has_k_distinct,
    hilbert_keys,
)
from geokanon.neighbours import sorted_unique, stable_argsort

__all__ = ["candidate_pairs", "recut_groups"]

#: Pairs are taken among groups at most this many places apart along a Hilbert curve
#: of the groups' centroids (one curve per entry of :data:`RECUT_SHIFTS`).
RECUT_WINDOW = 8
#: Where each curve's square starts, in units of the centroids' extent to the lower left
#: of their bounding box: a second curve over a shifted square has its seams elsewhere.
RECUT_SHIFTS = ((0.0, 0.0), (0.37, 0.29))
#: Pairs whose centroids are at most this many times the sum of the two groups' radii
#: (a group's radius: its farthest atom's distance to its centroid) apart are re-cut;
#: pairs farther apart rarely gain (the groups' discs are disjoint).
RECUT_REACH = 0.8
#: Directions a pair's union is cut along (evenly spaced over a half-turn from the axis
#: through the two centroids).
RECUT_DIRECTIONS = 4
#: Cuts per pair costed exactly: the best by squared distances over all directions.
RECUT_EXACT = 2
#: Rounds at most (later ones only over pairs with a group changed in the round before).
RECUT_ROUNDS = 4
#: Pairs per parallel task (a task's scratch buffers are allocated once).
_CHUNK = 2048
#: Pieces of :func:`_window_pairs`' scan, each counted and then written on its own.
_WINDOW_PIECES = 64


def recut_groups(
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
    """Re-cut pairs of neighbouring groups in two, in place on ``atom_group``.

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
        The candidate pairs (rows ``(g, h)``, ``g < h``, ascending), as
        :func:`candidate_pairs` gives them at :data:`RECUT_REACH` (the default).

    Returns
    -------
    int
        The number of pairs re-cut.
    """
    placed = np.flatnonzero(atom_group >= 0)
    if placed.size < 2 * k or n_groups < 2:
        return 0
    ax = np.ascontiguousarray(ax, dtype=np.float64)
    ay = np.ascontiguousarray(ay, dtype=np.float64)
    aw = np.ascontiguousarray(aw, dtype=np.float64)
    cap = CAP_K * k  # as the local search: larger groups are left alone
    if pairs is None:
        pairs = candidate_pairs(atom_group, n_groups, ax, ay, aw, k, (RECUT_REACH,))[0]
    if pairs.shape[0] == 0:
        return 0
    sub = np.ascontiguousarray(asub, dtype=np.int64).ravel()
    return int(
        _recut_pairs(
            atom_group, n_groups, ax, ay, aw, sub, pairs, k, float(r_work), float(step), cap,
            RECUT_DIRECTIONS, RECUT_EXACT, RECUT_ROUNDS,
        )
    )  # fmt: skip


def candidate_pairs(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
    k: int,
    reaches: tuple[float, ...],
    min_atoms: tuple[int, ...] | None = None,
) -> list[NDArray[np.int64]]:
    """Pairs of neighbouring groups: at most :data:`RECUT_WINDOW` places apart on one of
    the Hilbert curves of the groups' centroids (:data:`RECUT_SHIFTS`), whose centroids
    are at most ``reach`` times the sum of their radii apart and which hold at least
    ``min_atoms`` atoms together (default: any), for each of ``reaches``.

    Groups of fewer than k or more than ``CAP_K * k`` atoms are left out. Each answer
    holds rows ``(g, h)``, ``g < h``, ascending, without repeats.
    """
    least = (0,) * len(reaches) if min_atoms is None else min_atoms
    ax = np.ascontiguousarray(ax, dtype=np.float64)
    ay = np.ascontiguousarray(ay, dtype=np.float64)
    aw = np.ascontiguousarray(aw, dtype=np.float64)
    mx, my, rad, size = _group_stats(atom_group, n_groups, ax, ay, aw)
    ids = np.flatnonzero((size >= k) & (size <= CAP_K * k))
    if ids.size < 2:
        return [np.zeros((0, 2), np.int64) for _ in reaches]
    cx = mx[ids]
    cy = my[ids]
    span = max(float(cx.max() - cx.min()), float(cy.max() - cy.min()), 1e-9)
    found: list[list[NDArray[np.int64]]] = [[] for _ in reaches]
    for sx, sy in RECUT_SHIFTS:
        # the corner point widens the curve's square to the lower left (then dropped)
        hx = np.r_[cx, cx.min() - sx * span]
        hy = np.r_[cy, cy.min() - sy * span]
        order = ids[stable_argsort(hilbert_keys(hx, hy)[:-1])]
        for i, reach in enumerate(reaches):
            found[i].append(_window_pairs(order, mx, my, rad, size, RECUT_WINDOW, reach, least[i]))
    out = []
    for f in found:
        both = np.concatenate(f)
        key = sorted_unique(both[:, 0] * np.int64(n_groups) + both[:, 1])
        out.append(np.column_stack([key // n_groups, key % n_groups]).astype(np.int64))
    return out


@nb.njit(cache=True)
def _pool_cost(
    ux: NDArray[np.float64],
    uy: NDArray[np.float64],
    uw: NDArray[np.float64],
    order: NDArray[np.int64],
    lo: KernelInt,
    hi: KernelInt,
) -> float:
    """Summed weighted distance of the pooled atoms ``order[lo:hi]`` to their centroid."""
    sw = 0.0
    sx = 0.0
    sy = 0.0
    for i in range(lo, hi):
        t = order[i]
        sw += uw[t]
        sx += uw[t] * ux[t]
        sy += uw[t] * uy[t]
    cx = sx / sw
    cy = sy / sw
    d = 0.0
    for i in range(lo, hi):
        t = order[i]
        d += uw[t] * math.sqrt((ux[t] - cx) ** 2 + (uy[t] - cy) ** 2)
    return d


@nb.njit(cache=True)
def _distinct_at_least(us: NDArray[np.int64], order: NDArray[np.int64], lo: KernelInt,
                       hi: KernelInt, k: int, tmp: NDArray[np.int64]) -> bool:  # fmt: skip
    """Whether the pooled atoms ``order[lo:hi]`` hold at least k distinct subjects."""
    for i in range(lo, hi):
        tmp[i - lo] = us[order[i]]
    return has_k_distinct(tmp, int(hi - lo), k)


@nb.njit(cache=True)
def _pool_valid(
    order: NDArray[np.int64],
    lo: KernelInt,
    hi: KernelInt,
    ux: NDArray[np.float64],
    uy: NDArray[np.float64],
    uw: NDArray[np.float64],
    us: NDArray[np.int64],
    ox: float,
    oy: float,
    tmp: NDArray[np.int64],
    bx: NDArray[np.float64],
    by: NDArray[np.float64],
    bw: NDArray[np.float64],
    k: int,
    r: float,
    step: float,
) -> bool:
    """Whether the pooled atoms ``order[lo:hi]`` would be a valid group: k distinct
    subjects and a point of the coarsest lattice within r of every member (the
    grouping's exact check, :func:`_covering_rep_nb`, on absolute coordinates)."""
    if not _distinct_at_least(us, order, lo, hi, k, tmp):
        return False
    m = hi - lo
    for i in range(m):
        t = order[lo + i]
        bx[i] = ux[t] + ox
        by[i] = uy[t] + oy
        bw[i] = uw[t]
    ok, _, _ = _covering_rep_nb(bx[:m], by[:m], bw[:m], r, step, np.nan, np.nan)
    return ok


@nb.njit(cache=True)
def _sort_along(ux: NDArray[np.float64], uy: NDArray[np.float64], n: int, cd: float, sd: float,
                proj: NDArray[np.float64], order: NDArray[np.int64]) -> None:  # fmt: skip
    """``order[:n]``: the pool sorted by projection on ``(cd, sd)`` (ties: pool position)."""
    for t in range(n):
        v = ux[t] * cd + uy[t] * sd
        u = t
        while u > 0 and proj[u - 1] > v:
            proj[u] = proj[u - 1]
            order[u] = order[u - 1]
            u -= 1
        proj[u] = v
        order[u] = t


@nb.njit(cache=True)
def _gather(g: int, h: int, head: NDArray[np.int64], nxt: NDArray[np.int64],
            ax: NDArray[np.float64], ay: NDArray[np.float64], aw: NDArray[np.float64],
            asub: NDArray[np.int64], mem: NDArray[np.int64], ux: NDArray[np.float64],
            uy: NDArray[np.float64], uw: NDArray[np.float64],
            us: NDArray[np.int64]) -> tuple[int, int, float, float]:  # fmt: skip
    """Pool the atoms of g then h (each in index order) in local coordinates."""
    n = 0
    a = head[g]
    while a >= 0:
        mem[n] = a
        n += 1
        a = nxt[a]
    n1 = n
    a = head[h]
    while a >= 0:
        mem[n] = a
        n += 1
        a = nxt[a]
    # local coordinates: precision does not depend on the extent
    ox = ax[mem[0]]
    oy = ay[mem[0]]
    for t in range(n):
        ux[t] = ax[mem[t]] - ox
        uy[t] = ay[mem[t]] - oy
        uw[t] = aw[mem[t]]
        us[t] = asub[mem[t]]
    return n, n1, ox, oy


@nb.njit(cache=True)
def _group_cost(g: int, head: NDArray[np.int64], nxt: NDArray[np.int64],
                ax: NDArray[np.float64], ay: NDArray[np.float64],
                aw: NDArray[np.float64]) -> float:  # fmt: skip
    """Summed weighted distance of group g's atoms to its centroid (local coordinates)."""
    a = head[g]
    if a < 0:
        return 0.0
    ox = ax[a]
    oy = ay[a]
    sw = 0.0
    sx = 0.0
    sy = 0.0
    while a >= 0:
        sw += aw[a]
        sx += aw[a] * (ax[a] - ox)
        sy += aw[a] * (ay[a] - oy)
        a = nxt[a]
    cx = sx / sw
    cy = sy / sw
    d = 0.0
    a = head[g]
    while a >= 0:
        d += aw[a] * math.sqrt((ax[a] - ox - cx) ** 2 + (ay[a] - oy - cy) ** 2)
        a = nxt[a]
    return d


@nb.njit(cache=True, parallel=True)
def _group_costs(need: NDArray[np.bool_], head: NDArray[np.int64], nxt: NDArray[np.int64],
                 ax: NDArray[np.float64], ay: NDArray[np.float64],
                 aw: NDArray[np.float64]) -> NDArray[np.float64]:  # fmt: skip
    """:func:`_group_cost` of every group marked in ``need`` (0 for the others), each
    group on its own."""
    cost = np.zeros(head.size)
    for g in nb.prange(head.size):
        if need[g]:
            cost[g] = _group_cost(g, head, nxt, ax, ay, aw)
    return cost


@nb.njit(cache=True)
def _best_cut(
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
    cand_v: NDArray[np.float64],
    cand_i: NDArray[np.int64],
) -> tuple[float, int]:
    """The best valid cut of the pair (g, h), whose summed cost now is ``base``.

    The pool is sorted along ``n_dir`` directions (evenly spaced over a half-turn from
    the axis through the two centroids; ties: pool position); every cut leaving at least
    k atoms a side is scored by squared distances (prefix sums), the ``m_exact`` best
    scores are costed exactly, and the cheapest of those below ``base`` that passes the
    exact check on both sides is the answer. Returns its gain (0: none) and the pool's
    size; ``buf_i[0]`` holds the pooled atoms and ``buf_i[5]`` each one's side (0: g).
    """
    mem = buf_i[0]
    us = buf_i[1]
    order = buf_i[2]
    tmp = buf_i[3]
    side = buf_i[5]
    zero = np.int64(0)  # typed, not literal: numba compiles a callee once per arg types
    ux = buf_f[0]
    uy = buf_f[1]
    uw = buf_f[2]
    proj = buf_f[3]
    bx = buf_f[4]
    by = buf_f[5]
    bw = buf_f[6]
    ex_v = buf_f[7]
    ex_c = buf_i[6]
    n, n1, ox, oy = _gather(g, h, head, nxt, ax, ay, aw, asub, mem, ux, uy, uw, us)
    limit = base - 1e-9 * (1.0 + base)
    gx = 0.0
    gy = 0.0
    gw = 0.0
    hx = 0.0
    hy = 0.0
    hw = 0.0
    tq = 0.0
    for t in range(n):
        if t < n1:
            gx += uw[t] * ux[t]
            gy += uw[t] * uy[t]
            gw += uw[t]
        else:
            hx += uw[t] * ux[t]
            hy += uw[t] * uy[t]
            hw += uw[t]
        tq += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
    tw = gw + hw
    tx = gx + hx
    ty = gy + hy
    theta = math.atan2(hy / hw - gy / gw, hx / hw - gx / gw)
    # every cut of every direction scored by squared distances
    nc = 0
    for d in range(n_dir):
        ang = theta + math.pi * d / n_dir
        _sort_along(ux, uy, n, math.cos(ang), math.sin(ang), proj, order)
        pw = 0.0
        px = 0.0
        py = 0.0
        pq = 0.0
        for c in range(1, n - k + 1):
            t = order[c - 1]
            pw += uw[t]
            px += uw[t] * ux[t]
            py += uw[t] * uy[t]
            pq += uw[t] * (ux[t] * ux[t] + uy[t] * uy[t])
            if c < k:
                continue
            rw = tw - pw
            cand_v[nc] = pq - (px * px + py * py) / pw + (tq - pq) - (
                (tx - px) ** 2 + (ty - py) ** 2) / rw  # fmt: skip
            cand_i[nc] = d * (n + 1) + c
            nc += 1
    # the m_exact best scores (ties: the first found) costed exactly
    ne = 0
    for _ in range(min(m_exact, nc)):
        bi = -1
        for i in range(nc):
            if cand_v[i] != np.inf and (bi < 0 or cand_v[i] < cand_v[bi]):
                bi = i
        cand_v[bi] = np.inf
        code = cand_i[bi]
        d = code // (n + 1)
        c = code % (n + 1)
        ang = theta + math.pi * d / n_dir
        _sort_along(ux, uy, n, math.cos(ang), math.sin(ang), proj, order)
        v = _pool_cost(ux, uy, uw, order, zero, np.int64(c)) + _pool_cost(
            ux, uy, uw, order, np.int64(c), np.int64(n)
        )
        if v < limit:
            ex_v[ne] = v
            ex_c[ne] = code
            ne += 1
    # the cheapest valid one (ties: the first costed)
    for _ in range(ne):
        o = -1
        for i in range(ne):
            if ex_v[i] != np.inf and (o < 0 or ex_v[i] < ex_v[o]):
                o = i
        v = ex_v[o]
        ex_v[o] = np.inf
        code = ex_c[o]
        d = code // (n + 1)
        c = code % (n + 1)
        ang = theta + math.pi * d / n_dir
        _sort_along(ux, uy, n, math.cos(ang), math.sin(ang), proj, order)
        ok = _pool_valid(order, zero, np.int64(c), ux, uy, uw, us, ox, oy, tmp, bx, by, bw, k,
                         r, step)  # fmt: skip
        if ok:
            ok = _pool_valid(order, np.int64(c), np.int64(n), ux, uy, uw, us, ox, oy, tmp, bx,
                             by, bw, k, r, step)  # fmt: skip
        if ok:
            for i in range(n):
                side[order[i]] = 0 if i < c else 1
            return base - v, n
    return 0.0, n


@nb.njit(cache=True, parallel=True)
def _propose(
    active: NDArray[np.int64],
    pairs: NDArray[np.int64],
    size: NDArray[np.int64],
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
    cut: NDArray[np.int64],
) -> None:
    """Every active pair's best cut against the current groups, each pair on its own
    (so in parallel, in chunks of :data:`_CHUNK` pairs with their own scratch): its gain
    and, when it gains, its sides as bits (``cut[j]``: bit t of word t // 63 set when
    the pool's t-th atom, g's then h's in index order, goes to h)."""
    big = 2 * cap + 2
    n_chunks = (active.size + _CHUNK - 1) // _CHUNK
    for ci in nb.prange(n_chunks):
        buf_i = np.empty((7, big), np.int64)
        buf_f = np.empty((8, big))
        cand_v = np.empty(n_dir * big)
        cand_i = np.empty(n_dir * big, np.int64)
        side = buf_i[5]
        for j in range(ci * _CHUNK, min(active.size, (ci + 1) * _CHUNK)):
            p = active[j]
            g = pairs[p, 0]
            h = pairs[p, 1]
            gain[j] = 0.0
            if size[g] > cap or size[h] > cap or size[g] < k or size[h] < k:
                continue
            gain[j], n = _best_cut(g, h, cost[g] + cost[h], head, nxt, ax, ay, aw, asub, k, r,
                                   step, n_dir, m_exact, buf_i, buf_f, cand_v, cand_i)  # fmt: skip
            if gain[j] > 0.0:
                cut[j, :] = 0
                for t in range(n):
                    if side[t] != 0:
                        cut[j, t // 63] |= np.int64(1) << (t % 63)


@nb.njit(cache=True)
def _recut_pairs(
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
    rounds: int,
) -> int:
    """Rounds of proposals (:func:`_propose`, every pair against the round's starting
    groups) and their application one after another, by falling gain (ties: pair
    order), each only when neither of its groups changed earlier in the round; the next
    round proposes again for the pairs with a group changed. Pairs with a group of more
    than ``cap`` atoms are left alone. Returns the number of pairs re-cut."""
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
    cost = _group_costs(np.ones(n_groups, np.bool_), head, nxt, ax, ay, aw)
    big = 2 * cap + 2
    words = (big + 62) // 63  # a pool's sides as bits, 63 to a word
    mem = np.empty(big, np.int64)
    side = np.empty(big, np.int64)
    stamp = np.zeros(n_groups, np.int64)
    active = np.arange(pairs.shape[0])
    changes = 0
    for rnd in range(1, rounds + 1):
        m = active.size
        if m == 0:
            break
        gain = np.empty(m)
        cut = np.empty((m, words), np.int64)
        _propose(active, pairs, size, cost, head, nxt, ax, ay, aw, asub, k, r, step, cap,
                 n_dir, m_exact, gain, cut)  # fmt: skip
        made = 0
        for j in np.argsort(-gain, kind="mergesort"):
            if gain[j] <= 0.0:
                break
            p = active[j]
            g = pairs[p, 0]
            h = pairs[p, 1]
            if stamp[g] == rnd or stamp[h] == rnd:
                continue
            # neither group changed since the proposal: its cut, on the same pool
            n = 0
            for e in (g, h):
                a = head[e]
                while a >= 0:
                    mem[n] = a
                    side[n] = (cut[j, n // 63] >> (n % 63)) & 1
                    n += 1
                    a = nxt[a]
            n0 = 0
            for t in range(n):
                if side[t] == 0:
                    n0 += 1
            first = np.empty(n0, np.int64)
            second = np.empty(n - n0, np.int64)
            i0 = 0
            i1 = 0
            for t in range(n):
                if side[t] == 0:
                    first[i0] = mem[t]
                    i0 += 1
                else:
                    second[i1] = mem[t]
                    i1 += 1
            # the two parts, each linked in index order
            first = np.sort(first)
            second = np.sort(second)
            head[g] = -1
            head[h] = -1
            for i in range(first.size - 1, -1, -1):
                a = first[i]
                atom_group[a] = g
                nxt[a] = head[g]
                head[g] = a
            for i in range(second.size - 1, -1, -1):
                a = second[i]
                atom_group[a] = h
                nxt[a] = head[h]
                head[h] = a
            size[g] = first.size
            size[h] = second.size
            cost[g] = _group_cost(g, head, nxt, ax, ay, aw)
            cost[h] = _group_cost(h, head, nxt, ax, ay, aw)
            stamp[g] = rnd
            stamp[h] = rnd
            made += 1
        changes += made
        if made == 0:
            break
        keep = np.zeros(pairs.shape[0], np.bool_)
        for p in range(pairs.shape[0]):
            keep[p] = stamp[pairs[p, 0]] == rnd or stamp[pairs[p, 1]] == rnd
        active = np.flatnonzero(keep)
    return changes


@nb.njit(cache=True)
def _group_stats(
    atom_group: NDArray[np.int64],
    n_groups: int,
    ax: NDArray[np.float64],
    ay: NDArray[np.float64],
    aw: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Per group: centroid, radius (its farthest atom's distance to the centroid) and
    number of atoms."""
    na = ax.size
    sw = np.zeros(n_groups)
    sx = np.zeros(n_groups)
    sy = np.zeros(n_groups)
    size = np.zeros(n_groups, np.int64)
    for a in range(na):
        g = atom_group[a]
        if g >= 0:
            sw[g] += aw[a]
            sx[g] += aw[a] * ax[a]
            sy[g] += aw[a] * ay[a]
            size[g] += 1
    mx = np.zeros(n_groups)
    my = np.zeros(n_groups)
    for g in range(n_groups):
        if sw[g] > 0.0:
            mx[g] = sx[g] / sw[g]
            my[g] = sy[g] / sw[g]
    rad = np.zeros(n_groups)
    for a in range(na):
        g = atom_group[a]
        if g >= 0:
            d = math.sqrt((ax[a] - mx[g]) ** 2 + (ay[a] - my[g]) ** 2)
            if d > rad[g]:
                rad[g] = d
    return mx, my, rad, size


@nb.njit(cache=True, parallel=True)
def _window_pairs(
    order: NDArray[np.int64],
    mx: NDArray[np.float64],
    my: NDArray[np.float64],
    rad: NDArray[np.float64],
    size: NDArray[np.int64],
    window: int,
    reach: float,
    least: int,
) -> NDArray[np.int64]:
    """Pairs (lo, hi) of groups at most ``window`` apart in ``order`` whose centroids
    are at most ``reach`` times the sum of their radii apart and which hold at least
    ``least`` atoms together (in order of their first place; counted, then written,
    piece by piece)."""
    m = order.size
    pieces = _WINDOW_PIECES
    count = np.zeros(pieces + 1, np.int64)
    out = np.empty((0, 2), np.int64)
    for phase in range(2):
        if phase == 1:
            for c in range(pieces):
                count[c + 1] += count[c]
            out = np.empty((count[pieces], 2), np.int64)
        for c in nb.prange(pieces):
            at = count[c] if phase == 1 else 0
            for i in range(m * c // pieces, m * (c + 1) // pieces):
                g = order[i]
                for j in range(i + 1, min(m, i + window + 1)):
                    h = order[j]
                    if size[g] + size[h] < least:
                        continue
                    d = math.sqrt((mx[g] - mx[h]) ** 2 + (my[g] - my[h]) ** 2)
                    if d <= reach * (rad[g] + rad[h]):
                        if phase == 1:
                            out[at, 0] = min(g, h)
                            out[at, 1] = max(g, h)
                        at += 1
            if phase == 0:
                count[c + 1] = at
    return out

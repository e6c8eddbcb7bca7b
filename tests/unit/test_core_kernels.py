"""Issue 19 item 3: the compiled and parallel steps of the grouping give the numbers of
the plain steps they replace.

``_polish`` visits independent components of groups on several threads: the groups and
the count of changes are those of one sweep over the visited atoms in index order (the
local search's own sweep, :func:`geokanon.grouping._sweep_piece`). ``_partition`` costs
its candidate runs block by block: the cuts do not depend on the block, and are those
of the plain recurrence. The compiled glue (``_group_lists`` with ``_spread_of``,
``_run_groups`` with ``_run_lists``, ``_renumbered``, ``_used``, ``_take``) equals the
numpy expressions it replaced, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import geokanon._recut as recut
import geokanon.grouping as grouping
from geokanon.policy import OutlierPolicy
from tests.local_search_inputs import local_search_input


def _single_sweep(
    before: np.ndarray, ag: np.ndarray, ng: int, ax: np.ndarray, ay: np.ndarray,
    aw: np.ndarray, asub: np.ndarray, k: int, r: float, step: float, nbr: np.ndarray,
) -> int:  # fmt: skip
    """The sweep after the re-cuts as one pass in index order on one thread (in place)."""
    moved = ag != before
    dirty = np.zeros(ng, bool)
    dirty[ag[moved & (ag >= 0)]] = True
    dirty[before[moved & (before >= 0)]] = True
    if not dirty.any():
        return 0
    nbr_group = np.where(nbr >= 0, ag[np.maximum(nbr, 0)], -1)
    near_dirty = ((nbr_group >= 0) & dirty[np.maximum(nbr_group, 0)]).any(axis=1)
    visit = (ag >= 0) & (dirty[np.maximum(ag, 0)] | near_dirty)
    need = np.zeros(ng, bool)
    need[ag[visit]] = True
    read = nbr_group[visit]
    need[read[read >= 0]] = True
    head, nxt, prv, size, sw, sx, sy = grouping._group_lists(ag, ng, ax, ay, aw)
    cost, slope = grouping._group_costs(need, head, nxt, ax, ay, aw, sw, sx, sy)
    changed = dirty.astype(np.int64)
    seen_at = np.zeros(ax.size, np.int64)
    home = np.full(ng, -1, np.int64)
    return int(
        grouping._sweep_piece(
            0, max(ax.size, 1), 1, True, ~visit, home, ag, head, nxt, prv, size, sw, sx, sy,
            cost, slope, changed, seen_at, ax, ay, aw, asub, nbr, k, r, step,
            grouping.CAP_K * k, grouping.SCREEN, True,
        )
    )  # fmt: skip


@pytest.mark.parametrize("every", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_polish_by_components_is_the_single_sweep(seed: int, every: bool) -> None:
    # several clusters far apart (several components) of tied points, few subjects
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(600, 2500))
    centres = rng.uniform(0, 20000, (int(rng.integers(3, 12)), 2))
    p = centres[rng.integers(0, centres.shape[0], n)] + rng.normal(0, 60, (n, 2))
    p = np.round(p / 5.0) * 5.0 + [150000.0, 450000.0]
    subj = rng.integers(0, int(rng.integers(20, 400)), n).astype(np.int64)
    k = int(rng.integers(2, 6))
    policy = OutlierPolicy(k=k, r_max_m=float(rng.choice([60.0, 100.0, 150.0])))
    s = local_search_input(p[:, 0].copy(), p[:, 1].copy(), subj, policy)
    if not s:
        pytest.skip("no local search")
    ag = np.asarray(s["atom_group"]).copy()
    ng = int(s["n_groups"])  # type: ignore[call-overload]
    ax, ay, aw = (np.asarray(s[c]) for c in ("ax", "ay", "aw"))
    asub = np.ascontiguousarray(np.asarray(s["asub"]), dtype=np.int64).ravel()
    r, step = float(s["r_work"]), float(s["step"])  # type: ignore[arg-type]
    lists: list[np.ndarray] = []
    grouping._improve_groups(ag, ng, ax, ay, aw, asub, k, r, step, lists=lists)
    if not lists:
        pytest.skip("no local search")
    before = ag.copy()
    recut.recut_groups(ag, ng, ax, ay, aw, asub, k, r, step)
    if every:
        before = np.where(ag >= 0, -1, ag)
    want = ag.copy()
    made_want = _single_sweep(before, want, ng, ax, ay, aw, asub, k, r, step, lists[0])
    made = grouping._polish_groups(before, ag, ng, ax, ay, aw, asub, k, r, step, lists[0])
    assert made == made_want
    assert np.array_equal(ag, want)
    if every:
        assert made > 0  # the comparison is not an empty one


def _plain_partition(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, subj: np.ndarray, lo: int, hi: int, k: int,
    r_eff: float,
) -> list[int]:  # fmt: skip
    """The cut recurrence of ``_partition`` as it was, one run end after another."""
    n = x.size
    penalty = grouping.PENALTY_FACTOR * r_eff * r_eff
    f = [math.inf] * (n + 1)
    back = [-1] * (n + 1)
    f[0] = 0.0
    for i in range(1, n + 1):
        ox, oy = x[i - 1], y[i - 1]
        sw = sx = sy = sq = 0.0
        distinct = 0
        for length in range(1, hi + 1):
            j = i - length
            if j < 0:
                break
            dx, dy = x[j] - ox, y[j] - oy
            sw += w[j]
            sx += w[j] * dx
            sy += w[j] * dy
            sq += w[j] * (dx * dx + dy * dy)
            if subj[j] not in subj[j + 1 : i]:
                distinct += 1
            if length < lo or f[j] == math.inf:
                continue
            mx, my = sx / sw, sy / sw
            cost = max(sq - sw * (mx * mx + my * my), 0.0)
            feasible = distinct >= k and all(
                (x[t] - ox - mx) ** 2 + (y[t] - oy - my) ** 2 <= r_eff * r_eff for t in range(j, i)
            )
            if not feasible:
                cost += penalty * sw
            if f[j] + cost < f[i]:
                f[i] = f[j] + cost
                back[i] = j
    if n == 0:
        return [0]
    if f[n] == math.inf:
        return [0, n]
    cuts = [n]
    while cuts[-1] > 0:
        cuts.append(back[cuts[-1]])
    return cuts[::-1]


@pytest.mark.parametrize("seed", range(30))
def test_partition_in_blocks_is_the_plain_recurrence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 90))
    k = int(rng.integers(1, 5))
    x = np.round(rng.normal(0, 40, n))
    y = np.round(rng.normal(0, 40, n))
    w = rng.integers(1, 3, n).astype(np.float64)
    subj = rng.integers(0, int(rng.integers(2, 12)), n).astype(np.int64)
    want = _plain_partition(x, y, w, subj, k, 2 * k - 1, k, 50.0)
    for block in (1, 2, 7, 64, 1 << 18):
        got = grouping._partition(x, y, w, subj, k, 2 * k - 1, k, 50.0, block)
        assert got.tolist() == want, block


def test_spread_is_the_bincounts() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        ng = int(rng.integers(1, 40))
        g = rng.integers(-1, ng, n).astype(np.int64)
        x = rng.normal(3e5, 200, n)
        y = rng.normal(5e6, 200, n)
        w = rng.integers(1, 4, n).astype(np.float64)
        p = np.flatnonzero(g >= 0)
        gp, wp = g[p], w[p]
        sw = np.bincount(gp, wp, ng)
        mx = np.bincount(gp, wp * x[p], ng) / np.maximum(sw, 1e-300)
        my = np.bincount(gp, wp * y[p], ng) / np.maximum(sw, 1e-300)
        d2 = np.bincount(gp, wp * ((x[p] - mx[gp]) ** 2 + (y[p] - my[gp]) ** 2), ng)
        head, nxt, _, _, got_sw, sx, sy = grouping._group_lists(g, ng, x, y, w)
        got_d2 = grouping._spread_of(head, nxt, x, y, w, got_sw, sx, sy)
        assert np.array_equal(got_sw, sw) and np.array_equal(got_d2, d2)


def test_run_groups_renumbered_and_used_are_the_numpy_expressions() -> None:
    rng = np.random.default_rng(8)
    for _ in range(50):
        runs = rng.integers(1, 6, int(rng.integers(1, 30)))
        starts = np.r_[0, np.cumsum(runs)].astype(np.int64)
        ok = rng.random(runs.size) < 0.7
        run_of_atom = np.repeat(np.arange(runs.size), runs)
        g = np.where(ok[run_of_atom], run_of_atom, -1)
        want = np.where(g >= 0, (np.cumsum(ok) - 1)[np.maximum(g, 0)], -1)
        assert np.array_equal(grouping._run_groups(starts, ok), want)
        # the members of those groups listed from the runs, as the counting sort lists them
        by_runs = grouping._run_lists(starts, ok)
        by_sort = grouping._by_group(want, int(ok.sum()))
        assert all(np.array_equal(a, b) for a, b in zip(by_runs, by_sort, strict=True))
        ng = runs.size
        used = np.bincount(g[g >= 0], minlength=ng) > 0
        assert np.array_equal(grouping._used(g, ng), used)
        keep = rng.random(ng) < 0.6
        want = np.where(
            (g >= 0) & keep[np.maximum(g, 0)], (np.cumsum(keep) - 1)[np.maximum(g, 0)], -1
        )
        assert np.array_equal(grouping._renumbered(g, keep), want)


def test_take_is_numpy_indexing_and_refuses_what_numpy_refuses() -> None:
    rng = np.random.default_rng(9)
    v = rng.normal(size=50)
    s = rng.integers(0, 9, 50)
    u = rng.integers(0, 2**63, 50, dtype=np.uint64)
    for idx in (rng.integers(0, 50, 80).astype(np.int32), np.arange(50)[::-3], np.zeros(0, int)):
        for arr in (v, s, u):
            got = grouping._take(arr, idx)
            assert got.dtype == arr.dtype and np.array_equal(got, arr[idx])
    with pytest.raises(IndexError):
        grouping._take(v, np.array([0, 50]))
    assert np.array_equal(grouping._take(v, np.array([-1])), v[[-1]])  # numpy's meaning

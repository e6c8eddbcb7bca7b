"""The rescue of hard records at sparse edges (grouping step 5) and its angular sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geokanon.grouping as grouping
from geokanon.grouping import _compact, _Members, _sweep_centres, group_records
from geokanon.policy import OutlierPolicy

R = 100.0


def brute_best(px, py, qx, qy, r, slack=1e-7):
    """Most points q a disc of radius r covering p can hold (centres through pairs, points)."""
    sx = np.r_[px, qx]
    sy = np.r_[py, qy]
    centres = [(float(a), float(b)) for a, b in zip(sx, sy, strict=True)]
    for i in range(sx.size):
        for j in range(i + 1, sx.size):
            dx, dy = sx[j] - sx[i], sy[j] - sy[i]
            d = math.hypot(dx, dy)
            if d == 0 or d > 2 * r:
                continue
            h = math.sqrt(max(0.0, r * r - d * d / 4))
            mx, my = (sx[i] + sx[j]) / 2, (sy[i] + sy[j]) / 2
            centres += [(mx - dy / d * h, my + dx / d * h), (mx + dy / d * h, my - dx / d * h)]
    best = -1
    lim = r * (1 + slack)
    for cx, cy in centres:
        if math.hypot(px - cx, py - cy) > lim:
            continue
        best = max(best, int((np.hypot(qx - cx, qy - cy) <= lim).sum()))
    return best


def check_groups(x, y, subj, g, k, r=R):
    """Every group: >= k subjects, every member within r of a representative off the members."""
    for gi in range(g.n_groups):
        m = g.group_id == gi
        assert m.any(), "an empty group was published"
        assert np.unique(subj[m]).size >= k
        d = np.hypot(x[m] - g.rep_x[gi], y[m] - g.rep_y[gi])
        assert (d <= r).all()
        assert not ((x[m] == g.rep_x[gi]) & (y[m] == g.rep_y[gi])).any()


@pytest.mark.parametrize("seed", range(40))
def test_sweep_finds_the_deepest_disc_through_p(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 14))
    px, py = 0.0, 0.0
    qx = rng.uniform(-2 * R, 2 * R, m)
    qy = rng.uniform(-2 * R, 2 * R, m)
    depth, cx, cy = _sweep_centres(px, py, qx, qy, R)
    assert depth.max() == brute_best(px, py, qx, qy, R)
    for a in np.flatnonzero(depth >= 0):
        # The centre returned covers p and as many points as it claims.
        lim = R * (1 + 1e-9)
        assert math.hypot(px - cx[a], py - cy[a]) <= lim
        assert int((np.hypot(qx - cx[a], qy - cy[a]) <= lim).sum()) >= depth[a]


def test_sweep_counts_coincident_points_and_needs_p():
    # Three points on one spot 150 m away: a disc of radius 100 covers p and all three.
    depth, _, _ = _sweep_centres(0.0, 0.0, np.full(3, 150.0), np.zeros(3), R)
    assert depth.max() == 3
    # Farther than 2 r: no disc covers p and any of them.
    depth, _, _ = _sweep_centres(0.0, 0.0, np.full(3, 250.0), np.zeros(3), R)
    assert depth.max() == 0


# A merge record (atom 4: no two others within 100 m) that only a disc centred between
# it and the cluster can cover, where the cluster is already partitioned into groups of
# k = 3: the rescue takes two atoms of one group and moves the third to the other group.
CASE_X = np.array([141.0, 149.0, 106.0, 142.0, -44.0, 315.0, 199.0, 140.0])
CASE_Y = np.array([-22.0, -40.0, -4.0, 12.0, 55.0, -80.0, 101.0, -40.0])


def test_merge_record_between_it_and_a_partitioned_cluster_is_grouped(monkeypatch):
    subj = np.arange(CASE_X.size)
    policy = OutlierPolicy(k=3, r_max_m=R)
    d = np.hypot(CASE_X - CASE_X[4], CASE_Y - CASE_Y[4])
    assert (d <= R).sum() - 1 < 2  # a merge record, not ok
    g = group_records(CASE_X, CASE_Y, subj, policy)
    check_groups(CASE_X, CASE_Y, subj, g, 3)
    assert g.group_id[4] >= 0
    assert (g.group_id >= 0).sum() == 7
    # Without the new step it stays out (the case needs it).
    monkeypatch.setattr(grouping, "_rescue", lambda *a, **kw: None)
    g0 = group_records(CASE_X, CASE_Y, subj, policy)
    assert g0.group_id[4] == -1
    assert (g0.group_id >= 0).sum() == 6


def test_rescue_on_a_prepared_partition_moves_the_remnant():
    # p at the origin; group 0 = {a, b, c}, group 1 = {d, e, f}. No existing group
    # can take p, and group 0 cannot spare a member; the rescue forms {p, a, b}
    # and c joins group 1.
    ax = np.array([0.0, 150.0, 156.0, 296.0, 380.0, 385.0, 390.0])
    ay = np.array([0.0, 0.0, 5.0, 0.0, 0.0, 3.0, -3.0])
    asub = np.arange(ax.size)
    aw = np.ones(ax.size)
    atom_group = np.array([-1, 0, 0, 0, 1, 1, 1])
    members = _Members(atom_group, 2)
    step = R / 20
    reps_x = [float(grouping.snap(223.0, step)), float(grouping.snap(385.0, step))]
    reps_y = [float(grouping.snap(1.0, step)), float(grouping.snap(0.0, step))]
    from scipy.spatial import cKDTree

    grouping._rescue(
        np.array([0]), ax, ay, aw, asub, atom_group, members, reps_x, reps_y, 3, R, step,
        cKDTree(np.c_[ax, ay]),
    )  # fmt: skip
    assert atom_group[0] >= 0
    assert atom_group[3] == 1  # the remnant of the broken group moved
    rx, ry = np.asarray(reps_x), np.asarray(reps_y)
    ag, rx, ry, _ = _compact(atom_group, rx, ry, members)
    assert rx.size == 2  # group 0 emptied and dropped
    g = grouping.Grouping(ag, rx, ry)
    check_groups(ax, ay, asub, g, 3)


def test_compact_drops_empty_groups_in_order():
    ag = np.array([2, -1, 0, 2, 0])
    rx = np.array([1.0, 2.0, 3.0])
    ry = np.array([4.0, 5.0, 6.0])
    out, nx, ny, members = _compact(ag, rx, ry, _Members(ag, 3))
    assert out.tolist() == [1, -1, 0, 1, 0]
    assert nx.tolist() == [1.0, 3.0] and ny.tolist() == [4.0, 6.0]
    assert sorted(members.get(1)) == [0, 3]


@st.composite
def edge_scenes(draw):
    """Tight clusters with records scattered around them at 1-2 r_max (merge-like)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xs, ys = [], []
    for _ in range(draw(st.integers(1, 3))):
        cx, cy = rng.uniform(0, 1500, 2)
        m = draw(st.integers(2, 12))
        xs += list(cx + rng.normal(0, 30, m))
        ys += list(cy + rng.normal(0, 30, m))
        e = draw(st.integers(0, 6))
        ang = rng.uniform(0, 2 * math.pi, e)
        rad = rng.uniform(R, 2 * R, e)
        xs += list(cx + rad * np.cos(ang))
        ys += list(cy + rad * np.sin(ang))
    x = np.round(np.array(xs), 1)
    y = np.round(np.array(ys), 1)
    n_subj = max(1, x.size - draw(st.integers(0, 3)))
    subj = rng.integers(0, n_subj, x.size).astype(np.int64)
    return x, y, subj


@settings(max_examples=60, deadline=None)
@given(edge_scenes(), st.integers(2, 5), st.randoms(use_true_random=False))
def test_rescue_never_breaks_a_group_nor_loses_records(scene, k, rnd):
    x, y, subj = scene
    policy = OutlierPolicy(k=k, r_max_m=R)
    g = group_records(x, y, subj, policy)
    check_groups(x, y, subj, g, k)
    # A subject's records at one place share one fate.
    fate: dict[tuple[int, float, float], set[int]] = {}
    for i in range(x.size):
        fate.setdefault((int(subj[i]), float(x[i]), float(y[i])), set()).add(int(g.group_id[i]))
    assert all(len(v) == 1 for v in fate.values())
    # Row order does not matter.
    perm = np.array(rnd.sample(range(x.size), x.size))
    g2 = group_records(x[perm], y[perm], subj[perm], policy)
    np.testing.assert_array_equal(g2.group_id, g.group_id[perm])
    np.testing.assert_array_equal(g2.rep_x, g.rep_x)
    # The rescue only ever adds records at group level.
    original = grouping._rescue
    try:
        grouping._rescue = lambda *a, **kw: None
        g0 = group_records(x, y, subj, policy)
    finally:
        grouping._rescue = original
    assert (g.group_id >= 0).sum() >= (g0.group_id >= 0).sum()


def _classic_hilbert(ix: int, iy: int, bits: int) -> int:
    """The textbook xy-to-index loop, one level at a time (the oracle of the tables)."""
    side = (1 << bits) - 1
    d = 0
    s = 1 << (bits - 1)
    while s > 0:
        rx = 1 if ix & s else 0
        ry = 1 if iy & s else 0
        d += s * s * ((3 * rx) ^ ry)
        if ry == 0:
            if rx == 1:
                ix, iy = side - ix, side - iy
            ix, iy = iy, ix
        s >>= 1
    return d


def test_hilbert_index_by_tables_is_the_classic_loop() -> None:
    from geokanon import grouping as G

    tables = (*G._HILBERT_STEP, *G._HILBERT_CHUNK)
    for bits in range(1, 10):  # every cell: a permutation of 0..4**bits-1, as the loop gives
        n = 1 << bits
        ix, iy = (a.ravel().astype(np.int64) for a in np.meshgrid(np.arange(n), np.arange(n)))
        got = G._hilbert_cells(ix, iy, bits, *tables)
        want = [_classic_hilbert(a, b, bits) for a, b in zip(ix.tolist(), iy.tolist(), strict=True)]
        assert got.tolist() == want, bits
    rng = np.random.default_rng(5)
    for bits in (21, 20, 13):
        ix = rng.integers(0, 1 << bits, 3_000)
        iy = rng.integers(0, 1 << bits, 3_000)
        ix[:4], iy[:4] = [0, (1 << bits) - 1, 0, (1 << bits) - 1], [0, 0, (1 << bits) - 1, 5]
        got = G._hilbert_cells(ix, iy, bits, *tables)
        want = [_classic_hilbert(a, b, bits) for a, b in zip(ix.tolist(), iy.tolist(), strict=True)]
        assert got.tolist() == want, bits


def test_nearest_reps_equals_a_tree_over_every_representative() -> None:
    """``_nearest_reps`` (a tree over the representatives near the points) gives a tree
    over all of them within the range, ties to the smaller index."""
    import math

    from scipy.spatial import cKDTree

    from geokanon.grouping import _nearest_reps

    rng = np.random.default_rng(3)
    rx = rng.uniform(0, 50_000, 20_000)
    ry = rng.uniform(0, 50_000, 20_000)
    px = rng.uniform(0, 50_000, 300)
    py = rng.uniform(0, 50_000, 300)
    within = 600.0
    d, i = _nearest_reps(px, py, rx.tolist(), ry.tolist(), 8, within)
    full_d, full_i = cKDTree(np.c_[rx, ry]).query(np.c_[px, py], k=8)
    for t in range(px.size):
        keep = full_d[t] <= within
        got = d[t] <= within
        assert np.array_equal(full_i[t][keep], i[t][got])
        assert np.allclose(full_d[t][keep], d[t][got])
    # ties (two representatives at one distance) go to the smaller index
    d, i = _nearest_reps(np.array([0.0]), np.array([0.0]), [5.0, -5.0, 3.0], [0.0, 0.0, 4.0], 3,
                         10.0)  # fmt: skip
    assert i[0].tolist() == [0, 1, 2] and all(math.isclose(v, 5.0) for v in d[0])

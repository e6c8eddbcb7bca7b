"""Many records at one place: the searches reduce crowded cells by place, and every
answer stays the brute force's.

A care home's residents, or a register geocoded to postcode centroids, puts thousands of
records at one coordinate. The classification's search and the local search's neighbour
lists read a cell's points for each of its points, so such a place cost the square of its
records: 100,000 records at four places took 343 s to release (18 s at 30,000). Crowded
cells are now reduced by place first (``neighbours._search_by_place``,
``grouping._listed_by_place``). The tests force the reduction on small inputs (the
thresholds at zero) and compare with brute-force oracles, and count what a large place
costs instead of timing it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geokanon.grouping as grouping
import geokanon.neighbours as neighbours
from geokanon.neighbours import subject_neighbour_distances, subject_spacetime_ratios
from tests.unit.test_local_search import _brute
from tests.unit.test_neighbours import oracle_distances, oracle_spacetime


@st.composite
def crowded_records(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """Records at a few places (many at each, some moved off by a fraction), with few or
    many subjects, or none."""
    n_places = draw(st.integers(1, 6))
    places = np.array(
        draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=n_places,
                      max_size=n_places)),
        dtype=np.float64,
    ) * 2.5  # fmt: skip
    n = draw(st.integers(1, 90))
    at = np.array(draw(st.lists(st.integers(0, n_places - 1), min_size=n, max_size=n)))
    off = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.4, 1.1]), min_size=n,
                                 max_size=n)))  # fmt: skip
    x = places[at, 0] + off
    y = places[at, 1].copy()
    many = draw(st.sampled_from([None, 3, 12, 60]))
    subj = None
    if many is not None:
        subj = np.array(draw(st.lists(st.integers(0, many), min_size=n, max_size=n)))
    return x, y, subj, draw(st.integers(1, 5))


def _forced(monkeypatch: pytest.MonkeyPatch, module: object) -> None:
    """Every cell counts as crowded: the reduction runs on the smallest input."""
    monkeypatch.setattr(module, "CROWDED_RUN", 0)
    monkeypatch.setattr(module, "CROWDED_PAIRS", -1)


@given(crowded_records(), st.sampled_from([np.inf, 2.0, 0.3]), st.booleans())
@settings(max_examples=150, deadline=None)
def test_search_reduced_by_place_equals_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int], max_d: float, last: bool
) -> None:
    x, y, subj, count = case
    with pytest.MonkeyPatch.context() as mp:
        _forced(mp, neighbours)
        got = subject_neighbour_distances(x, y, subj, count=count, max_distance=max_d,
                                          last_only=last)  # fmt: skip
    ids = np.arange(x.size) if subj is None else subj
    want = oracle_distances(x, y, ids, count, max_d)
    np.testing.assert_array_equal(got, want[:, -1:] if last else want)


@given(crowded_records(), st.integers(1, 12), st.integers(0, 1_000_000))
@settings(max_examples=150, deadline=None)
def test_near_atoms_listed_by_place_equal_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int], q: int, seed: int
) -> None:
    x, y, _, _ = case
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 30))
    g = rng.integers(-1, n_groups, x.size)
    reach = rng.random(n_groups) * 4.0 * 5.0
    with pytest.MonkeyPatch.context() as mp:
        _forced(mp, grouping)
        got = grouping._near_atoms(x, y, g, 5.0, q, reach)
    np.testing.assert_array_equal(got.astype(np.int64), _brute(x, y, g, 5.0, q, reach))


def test_records_at_few_places_search_their_places_not_their_square(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 200,000 records at three places, every one a subject of its own or one of 150,000
    rng = np.random.default_rng(3)
    n = 200_000
    at = rng.integers(0, 3, n)
    x = np.array([0.0, 1.0, 0.0])[at]
    y = np.array([0.0, 0.0, 1.0])[at]
    searched: list[int] = []
    inner = neighbours._search

    def spy(xa: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        searched.append(xa.size)
        return inner(xa, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(neighbours, "_search", spy)
    for subj in (None, rng.integers(0, 150_000, n)):
        searched.clear()
        d = subject_neighbour_distances(x, y, subj, count=4)
        assert (d == 0.0).all()  # four other subjects at every place
        # the records, then one record of each of five subjects per place
        assert searched == [n, 3 * 5]


def test_atoms_at_few_places_list_few_of_them() -> None:
    # 60,000 atoms in groups of 5 at three places, among 600 others spread about
    rng = np.random.default_rng(5)
    crowd = 60_000
    at = rng.integers(0, 3, crowd)
    x = np.r_[np.array([0.0, 3.0, 0.0])[at], rng.random(600) * 400.0]
    y = np.r_[np.array([0.0, 0.0, 3.0])[at], rng.random(600) * 400.0]
    g = np.arange(x.size) // 5
    reach = np.full(g.max() + 1, 12.0)
    side, q = 10.0, 12
    key, _ = grouping._cell_keys(x, y, side)
    order = grouping.stable_argsort(key)
    skey = key[order]
    assert grouping.run_pairs_above(skey, grouping.CROWDED_RUN) > grouping.CROWDED_PAIRS
    listed = grouping._listed_by_place(
        x, y, g, q, order, grouping.in_runs_above(skey, grouping.CROWDED_RUN)
    )
    # per place its first atoms until 12 are of other groups than any one group's: 12 + 5
    # at most (groups of 5), where every atom was listed before
    listed_atoms = order[listed]
    assert 3 * q <= int((listed_atoms < crowd).sum()) <= 3 * (q + 5)
    got = grouping._near_atoms(x, y, g, side, q, reach)
    # rows checked against the brute force on the atoms of their own reach
    for a in rng.choice(x.size, 40, replace=False):
        cx = np.floor((x - x.min()) / side)
        cy = np.floor((y - y.min()) / side)
        near = (np.abs(cx - cx[a]) <= 2) & (np.abs(cy - cy[a]) <= 2)
        ok = near & (g != g[a])
        j = np.flatnonzero(ok)
        d = (x[j] - x[a]) ** 2 + (y[j] - y[a]) ** 2
        want = j[np.lexsort((j, d))][:q]
        np.testing.assert_array_equal(got[a, : want.size], want)


@st.composite
def dense_spots(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """A spot of distinct places far denser than the rest (on a grid of tenths, or not),
    with records scattered about it; few or many subjects, or none."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_rest, n_spot = draw(st.integers(5, 120)), draw(st.integers(5, 250))
    spread = draw(st.sampled_from([0.02, 0.3, 2.0]))
    cx, cy = rng.uniform(0.0, 60.0, 2)
    x = np.r_[rng.uniform(0.0, 60.0, n_rest), cx + rng.normal(0.0, spread, n_spot)]
    y = np.r_[rng.uniform(0.0, 60.0, n_rest), cy + rng.normal(0.0, spread, n_spot)]
    if draw(st.booleans()):
        x, y = np.round(x, 1), np.round(y, 1)
    many = draw(st.sampled_from([None, 4, 40, 400]))
    subj = None if many is None else rng.integers(0, many, x.size)
    return x, y, subj, draw(st.integers(1, 5))


@given(dense_spots(), st.integers(2, 24), st.sampled_from([np.inf, 4.0, 0.2]), st.booleans())
@settings(max_examples=150, deadline=None)
def test_search_of_a_dense_spot_on_its_own_grid_equals_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int],
    crowd: int,
    max_d: float,
    last: bool,
) -> None:
    x, y, subj, count = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(neighbours, "CROWDED_RUN", crowd)
        mp.setattr(neighbours, "CROWDED_PAIRS", 0)
        got = subject_neighbour_distances(x, y, subj, count=count, max_distance=max_d,
                                          last_only=last)  # fmt: skip
    ids = np.arange(x.size) if subj is None else subj
    want = oracle_distances(x, y, ids, count, max_d)
    np.testing.assert_array_equal(got, want[:, -1:] if last else want)


@given(dense_spots(), st.integers(2, 24), st.integers(1, 12), st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_near_atoms_of_a_dense_spot_by_tree_equal_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int], crowd: int, q: int, seed: int
) -> None:
    x, y, _, _ = case
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, max(2, x.size // 3)))
    g = rng.integers(-1, n_groups, x.size)
    reach = rng.random(n_groups) * 4.0 * 5.0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grouping, "CROWDED_RUN", crowd)
        mp.setattr(grouping, "CROWDED_PAIRS", 0)
        got = grouping._near_atoms(x, y, g, 5.0, q, reach)
    np.testing.assert_array_equal(got.astype(np.int64), _brute(x, y, g, 5.0, q, reach))


def test_a_dense_spot_is_searched_on_its_own_grid() -> None:
    # 30,000 distinct places within a few metres, among 100,000 spread over 20 km (the
    # median record's density sets the grid)
    rng = np.random.default_rng(8)
    spot, rest = 30_000, 100_000
    x = np.r_[rng.normal(0.0, 3.0, spot), rng.uniform(-1e4, 1e4, rest)].round(3)
    y = np.r_[rng.normal(0.0, 3.0, spot), rng.uniform(-1e4, 1e4, rest)].round(3)
    subj = rng.integers(0, 120_000, x.size)
    asked: list[int] = []
    inner = neighbours._search_crowded

    def spy(xa: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        asked.append(int(np.asarray(args[5]).size))  # the crowd
        return inner(xa, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(neighbours, "_search_crowded", spy)
        got = subject_neighbour_distances(x, y, subj, count=4, last_only=True)
    assert asked and asked[0] >= spot // 2  # the spot was searched on a grid of its own
    rows = rng.choice(x.size, 60, replace=False)
    for i in rows:  # against the brute force, row by row
        d = np.sqrt((x - x[i]) ** 2 + (y - y[i]) ** 2)  # as the search measures
        other = subj != subj[i]
        best = {}
        for s_, d_ in zip(subj[other], d[other], strict=True):
            best[s_] = min(best.get(s_, np.inf), d_)
        assert got[i, 0] == sorted(best.values())[3]


def test_atoms_about_a_dense_spot_are_answered_by_the_tree() -> None:
    rng = np.random.default_rng(9)
    spot, rest = 40_000, 4_000
    x = np.r_[rng.normal(0.0, 2.0, spot), rng.uniform(-2e3, 2e3, rest)].round(2)
    y = np.r_[rng.normal(0.0, 2.0, spot), rng.uniform(-2e3, 2e3, rest)].round(2)
    g = np.arange(x.size) // 5
    reach = np.full(g.max() + 1, 60.0)
    side, q = 50.0, 12
    answered: list[int] = []
    inner = grouping._near_in_crowds

    def spy(*args: object) -> tuple[np.ndarray, np.ndarray]:
        done, answers = inner(*args)  # type: ignore[arg-type]
        answered.append(int(done.sum()))
        return done, answers

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grouping, "_near_in_crowds", spy)
        got = grouping._near_atoms(x, y, g, side, q, reach)
    assert answered and answered[0] >= spot * 0.99
    cx = np.floor((x - x.min()) / side)
    cy = np.floor((y - y.min()) / side)
    for a in rng.choice(x.size, 40, replace=False):
        near = (np.abs(cx - cx[a]) <= 2) & (np.abs(cy - cy[a]) <= 2) & (g != g[a])
        j = np.flatnonzero(near)
        d = (x[j] - x[a]) ** 2 + (y[j] - y[a]) ** 2
        want = j[np.lexsort((j, d))][:q]
        np.testing.assert_array_equal(got[a, : want.size], want)


@given(
    crowded_records(),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 86_400.0]),
    st.sampled_from([np.inf, 3.0]),
)
@settings(max_examples=120, deadline=None)
def test_spacetime_reduced_by_place_and_time_equals_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int],
    seed: int,
    period: float | None,
    limit: float,
) -> None:
    # records dated by the day, or at a few times of day: many at one place and time
    x, y, subj, count = case
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 3, x.size) * float(rng.choice([3_600.0, 86_400.0]))
    with pytest.MonkeyPatch.context() as mp:
        _forced(mp, neighbours)
        got = subject_spacetime_ratios(
            x, y, t, subj, count=count, r_max_m=2.0, t_max_s=7_200.0, period=period,
            max_distance=limit * 2.0, max_gap=limit * 7_200.0,
        )  # fmt: skip
    ids = np.arange(x.size) if subj is None else subj
    want = oracle_spacetime(x, y, t, ids, count, 2.0, 7_200.0, period, limit * 2.0,
                            limit * 7_200.0)  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_records_at_one_place_and_day_search_their_places(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(4)
    n = 100_000
    at = rng.integers(0, 2, n)
    x, y = np.array([0.0, 1.0])[at], np.zeros(n)
    t = rng.integers(0, 3, n) * 86_400.0  # dated by the day
    subj = rng.integers(0, 90_000, n)
    searched: list[int] = []
    inner = neighbours._spacetime_search

    def spy(xa: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        searched.append(xa.size)
        return inner(xa, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(neighbours, "_spacetime_search", spy)
    d = subject_spacetime_ratios(x, y, t, subj, count=4, r_max_m=100.0, t_max_s=3_600.0)
    assert (d == 0.0).all()
    assert searched == [n, 2 * 3 * 5]  # then 5 subjects at each place and day


@given(
    dense_spots(),
    st.integers(2, 24),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 86_400.0]),
    st.sampled_from([np.inf, 3.0]),
)
@settings(max_examples=120, deadline=None)
def test_spacetime_dense_spot_on_its_own_grid_equals_brute_force(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None, int],
    crowd: int,
    seed: int,
    period: float | None,
    limit: float,
) -> None:
    # the spot's records within minutes of one time of day, the others over three days
    x, y, subj, count = case
    rng = np.random.default_rng(seed)
    spot = np.hypot(x - np.median(x), y - np.median(y)) < 10.0
    t = np.where(
        spot, 40_000.0 + rng.normal(0.0, 300.0, x.size), rng.uniform(0, 3 * 86_400, x.size)
    )
    t = np.round(t, int(rng.integers(-1, 2)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(neighbours, "CROWDED_RUN", crowd)
        mp.setattr(neighbours, "CROWDED_PAIRS", 0)
        got = subject_spacetime_ratios(
            x, y, t, subj, count=count, r_max_m=5.0, t_max_s=1_800.0, period=period,
            max_distance=limit * 5.0, max_gap=limit * 1_800.0,
        )  # fmt: skip
    ids = np.arange(x.size) if subj is None else subj
    want = oracle_spacetime(x, y, t, ids, count, 5.0, 1_800.0, period, limit * 5.0,
                            limit * 1_800.0)  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_a_dense_spot_in_space_and_time_is_searched_on_its_own_grid() -> None:
    # 20,000 GPS fixes within a few metres and minutes, among 60,000 over 20 km and a month
    rng = np.random.default_rng(12)
    spot, rest = 20_000, 60_000
    x = np.r_[rng.normal(0.0, 3.0, spot), rng.uniform(-1e4, 1e4, rest)].round(2)
    y = np.r_[rng.normal(0.0, 3.0, spot), rng.uniform(-1e4, 1e4, rest)].round(2)
    t = np.r_[rng.normal(4e4, 300.0, spot), rng.uniform(0.0, 30 * 86_400.0, rest)].round()
    subj = rng.integers(0, 70_000, x.size)
    asked: list[int] = []
    inner = neighbours._spacetime_crowded

    def spy(*args: object, **kwargs: object) -> np.ndarray:
        asked.append(int(np.asarray(args[11]).size))  # the crowd
        return inner(*args, **kwargs)  # type: ignore[arg-type]

    kw = {"count": 4, "r_max_m": 300.0, "t_max_s": 3_600.0, "last_only": True}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(neighbours, "_spacetime_crowded", spy)
        got = subject_spacetime_ratios(x, y, t, subj, **kw)  # type: ignore[arg-type]
    assert asked and asked[0] >= spot // 2
    for i in rng.choice(x.size, 40, replace=False):  # against the brute force, row by row
        d = np.sqrt((x - x[i]) ** 2 + (y - y[i]) ** 2)
        ratio = np.maximum(d / 300.0, np.abs(t - t[i]) / 3_600.0)
        other = subj != subj[i]
        best: dict[int, float] = {}
        for s_, v in zip(subj[other], ratio[other], strict=True):
            best[s_] = min(best.get(s_, np.inf), v)
        assert got[i, 0] == sorted(best.values())[3]

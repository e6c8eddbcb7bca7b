"""The fast neighbour search against a brute-force oracle."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree

from geokanon.errors import InputError
from geokanon.neighbours import subject_neighbour_distances, subject_spacetime_ratios
from tests.cases import CASES


def oracle_distances(x, y, subj, count, max_d=math.inf):
    """All pairwise distances; per other subject its nearest record; sorted."""
    n = len(x)
    out = np.full((n, count), np.inf)
    for i in range(n):
        best: dict[int, float] = {}
        for j in range(n):
            if subj[j] == subj[i]:
                continue
            dx, dy = x[j] - x[i], y[j] - y[i]
            d = math.sqrt(dx * dx + dy * dy)
            if d <= max_d and d < best.get(subj[j], math.inf):
                best[subj[j]] = d
        vals = sorted(best.values())[:count]
        out[i, : len(vals)] = vals
    return out


coords = st.integers(min_value=-40, max_value=40).map(lambda v: v * 2.5)


@st.composite
def point_sets(draw):
    n = draw(st.integers(min_value=1, max_value=40))
    x = draw(st.lists(coords, min_size=n, max_size=n))
    y = draw(st.lists(coords, min_size=n, max_size=n))
    n_subj = draw(st.integers(min_value=1, max_value=n))
    subj = draw(st.lists(st.integers(0, n_subj - 1), min_size=n, max_size=n))
    spread = draw(st.sampled_from([1.0, 10.0, 1000.0]))
    return np.array(x) * spread, np.array(y) * spread, np.array(subj, dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(point_sets(), st.integers(1, 6), st.sampled_from([math.inf, 30.0, 400.0]))
def test_matches_oracle_with_subjects(pts, count, max_d):
    x, y, subj = pts
    got = subject_neighbour_distances(x, y, subj, count=count, max_distance=max_d)
    np.testing.assert_array_equal(got, oracle_distances(x, y, subj, count, max_d))


@settings(max_examples=100, deadline=None)
@given(point_sets(), st.integers(1, 6))
def test_without_subjects_equals_ckdtree(pts, count):
    x, y, _ = pts
    got = subject_neighbour_distances(x, y, None, count=count)
    k = min(count + 1, len(x))
    d, _ = cKDTree(np.c_[x, y]).query(np.c_[x, y], k=k)
    d = np.atleast_2d(d.T).T if d.ndim == 1 else d
    expected = np.full((len(x), count), np.inf)
    expected[:, : k - 1] = d[:, 1:k]
    np.testing.assert_array_equal(got, expected)


def test_clustered_large_matches_ckdtree():
    rng = np.random.default_rng(7)
    centres = rng.uniform(0, 50_000, (30, 2))
    pts = np.concatenate([c + rng.normal(0, 150, (1500, 2)) for c in centres])
    pts = np.concatenate([pts, rng.uniform(0, 50_000, (2000, 2))])
    got = subject_neighbour_distances(pts[:, 0], pts[:, 1], count=4, max_distance=3000.0)
    d, _ = cKDTree(pts).query(pts, k=5)
    expected = np.where(d[:, 1:] <= 3000.0, d[:, 1:], np.inf)
    np.testing.assert_array_equal(got, expected)


def test_one_subject_many_points_has_no_neighbours():
    x, y, s = CASES["one_subject_many_points"]
    got = subject_neighbour_distances(x, y, s, count=2)
    assert np.isinf(got).all()


def test_household_counts_once():
    x, y, s = CASES["household"]
    got = subject_neighbour_distances(x, y, s, count=3)
    # The household member at 0 sees a, b, c at 50, 60, 70 - never its own household.
    assert got[0].tolist() == [50.0, 60.0, 70.0]


def test_all_identical_and_empty():
    x, y, _ = CASES["all_identical"]
    assert (subject_neighbour_distances(x, y, count=4) == 0).all()
    assert subject_neighbour_distances([], [], count=3).shape == (0, 3)


def test_nan_refused_with_count_only():
    x, y, _ = CASES["nan"]
    with pytest.raises(InputError, match="1 records") as info:
        subject_neighbour_distances(x, y, count=2)
    assert "nan" not in str(info.value).split("NaN")[0].lower()


def oracle_spacetime(x, y, t, subj, count, r, tmax, period=None, max_d=math.inf, max_g=math.inf):
    """Every pair: max(distance / r, gap / tmax); per other subject its nearest record."""
    n = len(x)
    out = np.full((n, count), np.inf)
    tt = np.mod(t, period) if period else np.asarray(t, dtype=float)
    for i in range(n):
        best: dict[int, float] = {}
        for j in range(n):
            if subj[j] == subj[i]:
                continue
            dx, dy = x[j] - x[i], y[j] - y[i]
            d = math.sqrt(dx * dx + dy * dy)
            g = abs(tt[j] - tt[i])
            if period:
                g = min(g, period - g)
            if d > max_d or g > max_g:
                continue
            best[subj[j]] = min(best.get(subj[j], math.inf), max(d / r, g / tmax))
        vals = sorted(best.values())[:count]
        out[i, : len(vals)] = vals
    return out


@settings(max_examples=80, deadline=None)
@given(
    point_sets(),
    st.integers(1, 4),
    st.sampled_from([None, 86_400.0]),
    st.sampled_from([60.0, 1800.0, 43_200.0]),
    st.sampled_from([math.inf, 4.0]),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_spacetime_ratios_match_oracle(pts, count, period, tmax, limit, own, rnd):
    x, y, subj = pts
    # Times on a coarse clock (many ties), over three days, from the epoch's 2008 or 0.
    start = rnd.choice([0.0, 1.2e9, -3_600.0])
    t = np.array([start + rnd.randrange(0, 3 * 86_400, 600) for _ in range(len(x))], dtype=float)
    s = None if own else subj
    oracle_s = np.arange(len(x)) if own else subj
    got = subject_spacetime_ratios(
        x, y, t, s, count=count, r_max_m=100.0, t_max_s=tmax, period=period,
        max_distance=limit * 100.0, max_gap=limit * tmax,
    )  # fmt: skip
    expected = oracle_spacetime(
        x, y, t, oracle_s, count, 100.0, tmax, period, limit * 100.0, limit * tmax
    )
    np.testing.assert_array_equal(got, expected)
    last = subject_spacetime_ratios(
        x, y, t, s, count=count, r_max_m=100.0, t_max_s=tmax, period=period,
        max_distance=limit * 100.0, max_gap=limit * tmax, last_only=True,
    )  # fmt: skip
    np.testing.assert_array_equal(last[:, 0], expected[:, -1])


def _spacetime_brute(x, y, t, subj, count, r, tmax, max_d, max_g, period=None):
    """The oracle vectorised by rows, for a few thousand points."""
    n = x.size
    tt = np.mod(t, period) if period else t
    out = np.full((n, count), np.inf)
    for i in range(n):
        dx, dy = x - x[i], y - y[i]
        d = np.sqrt(dx * dx + dy * dy)
        g = np.abs(tt - tt[i])
        if period:
            g = np.minimum(g, period - g)
        ok = (subj != subj[i]) & (d <= max_d) & (g <= max_g)
        v = pd.Series(np.maximum(d / r, g / tmax)[ok]).groupby(subj[ok]).min()
        vals = np.sort(v.to_numpy())[:count]
        out[i, : vals.size] = vals
    return out


@pytest.mark.parametrize("period", [None, 86_400.0])
def test_spacetime_clustered_matches_brute_force(period):
    # Towns of repeat visitors at rush hour, a few at night, and a sparse countryside:
    # records resolve at many levels of the search.
    rng = np.random.default_rng(11)
    centres = rng.uniform(0, 30_000, (8, 2))
    town = np.concatenate([c + rng.normal(0, 120, (250, 2)) for c in centres])
    rural = rng.uniform(0, 30_000, (300, 2))
    pts = np.concatenate([town, rural])
    n = len(pts)
    day = rng.integers(0, 30, n) * 86_400.0
    hour = np.where(rng.random(n) < 0.9, rng.normal(8.5, 0.5, n), rng.uniform(0, 24, n))
    t = 1.2e9 + day + hour * 3600.0
    subj = rng.integers(0, n // 4, n)
    x, y = pts[:, 0], pts[:, 1]
    got = subject_spacetime_ratios(
        x, y, t, subj, count=4, r_max_m=150.0, t_max_s=1800.0, period=period,
        max_distance=600.0, max_gap=7200.0,
    )  # fmt: skip
    expected = _spacetime_brute(x, y, t, subj, 4, 150.0, 1800.0, 600.0, 7200.0, period)
    np.testing.assert_array_equal(got, expected)
    assert np.isfinite(got[:, -1]).mean() > 0.3 and np.isinf(got[:, -1]).any()


def test_spacetime_long_t_max_keeps_every_spatial_ratio_above_one():
    # Every gap is at most t_max: where the spatial ratio exceeds 1 the joint one is it,
    # bit for bit; where it is at most 1 the joint one is at most 1 too.
    rng = np.random.default_rng(5)
    x, y = rng.normal(0, 400, 3000), rng.normal(0, 400, 3000)
    t = rng.uniform(1.2e9, 1.2e9 + 5e7, 3000)
    subj = rng.integers(0, 600, 3000)
    d = subject_neighbour_distances(x, y, subj, count=2, max_distance=400.0)[:, -1] / 100.0
    joint = subject_spacetime_ratios(
        x, y, t, subj, count=2, r_max_m=100.0, t_max_s=5e7, max_distance=400.0, max_gap=2e8
    )[:, -1]  # fmt: skip
    far = d > 1.0
    assert far.any() and (~far).any()
    np.testing.assert_array_equal(joint[far], d[far])
    assert (joint[~far] <= 1.0).all()


def test_spacetime_refuses_bad_input_without_values():
    with pytest.raises(InputError, match="1 records have a missing time"):
        subject_spacetime_ratios([0, 1], [0, 0], [0, math.nan], count=1, r_max_m=1, t_max_s=1)
    with pytest.raises(InputError, match="t_max_s"):
        subject_spacetime_ratios([0, 1], [0, 0], [0, 1], count=1, r_max_m=1, t_max_s=0)
    empty = subject_spacetime_ratios([], [], [], count=2, r_max_m=1, t_max_s=1)
    assert empty.shape == (0, 2)


def _ckdtree_rows(pts, count, max_d=math.inf):
    d, _ = cKDTree(pts).query(pts, k=count + 1)
    return np.where(d[:, 1:] <= max_d, d[:, 1:], np.inf)


@pytest.mark.parametrize("count", [1, 4, 8, 9, 12])
def test_any_count_and_last_only_match_ckdtree(count):
    # counts above 8 use the general (in-memory) selection instead of the register network
    rng = np.random.default_rng(count)
    pts = np.concatenate([rng.normal(0, 80, (3000, 2)), rng.uniform(-5000, 5000, (300, 2))])
    got = subject_neighbour_distances(pts[:, 0], pts[:, 1], count=count, max_distance=2500.0)
    np.testing.assert_array_equal(got, _ckdtree_rows(pts, count, 2500.0))
    last = subject_neighbour_distances(
        pts[:, 0], pts[:, 1], count=count, max_distance=2500.0, last_only=True
    )
    assert last.shape == (len(pts), 1)
    np.testing.assert_array_equal(last[:, 0], got[:, -1])


def test_last_only_with_subjects_is_the_last_column():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 200, 4000), rng.normal(0, 200, 4000)
    subj = rng.integers(0, 1500, 4000)
    full = subject_neighbour_distances(x, y, subj, count=4, max_distance=600.0)
    last = subject_neighbour_distances(x, y, subj, count=4, max_distance=600.0, last_only=True)
    np.testing.assert_array_equal(last[:, 0], full[:, -1])
    some = rng.choice(4000, 60, replace=False)
    expected = oracle_distances(x, y, subj, 4, 600.0)
    np.testing.assert_array_equal(full[some], expected[some])


def test_heavy_duplicates_and_a_vast_extent():
    # 2,000 records at one address, a dense town and far scatter: a coarse cell table,
    # many levels, and the early stop on zero distances.
    rng = np.random.default_rng(11)
    pts = np.concatenate(
        [
            np.full((2000, 2), 1234.5),
            rng.normal(5000, 30, (5000, 2)),
            rng.uniform(-2e6, 2e6, (500, 2)),
        ]
    )
    for max_d in (math.inf, 800.0):
        got = subject_neighbour_distances(pts[:, 0], pts[:, 1], count=4, max_distance=max_d)
        np.testing.assert_array_equal(got, _ckdtree_rows(pts, 4, max_d))


def test_integer_subject_codes_equal_unique_inverse():
    from geokanon.neighbours import subject_codes

    rng = np.random.default_rng(5)
    for ids in (
        rng.integers(-50, 50, 500),
        rng.integers(0, 10**15, 500),
        rng.integers(0, 2**63, 100, dtype=np.uint64),
        np.array([7, 7, 3], dtype=np.uint8),
    ):
        expected = np.unique(ids, return_inverse=True)[1]
        np.testing.assert_array_equal(subject_codes(ids, ids.size), expected)


def test_sort_helpers_are_numpys() -> None:
    from geokanon.neighbours import in_sorted, sorted_unique, stable_argsort

    rng = np.random.default_rng(21)
    for trial in range(400):
        n = int(rng.integers(0, 600))
        v = (
            rng.integers(-5, 5, n),  # many ties
            rng.integers(0, 2**42, n),  # Hilbert keys: two digits
            rng.integers(-(2**62), 2**62, n),  # too wide for the keys
            rng.integers(0, 3, n).astype(np.int32),
            rng.integers(0, 2**63 - 1, n, dtype=np.uint64),
        )[trial % 5]
        assert stable_argsort(v).tolist() == np.argsort(v, kind="stable").tolist()
        assert sorted_unique(v).tolist() == np.unique(v).tolist()
        table = np.unique(rng.choice(v, min(n, 40))) if n else v[:0]
        assert in_sorted(v, table).tolist() == np.isin(v, table).tolist()
    v = rng.integers(0, 2**42, 300_000)
    assert (stable_argsort(v) == np.argsort(v, kind="stable")).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_radix_argsort_is_numpys_stable_argsort(threads) -> None:
    """The compiled radix sort (from RADIX_MIN values on) gives numpy's stable order:
    ties, negative values, bytes that are the same in every value (skipped passes),
    the widest span it takes, unsigned and narrow types, on one thread or two."""
    import numba as nb

    from geokanon.neighbours import RADIX_MIN, stable_argsort

    rng = np.random.default_rng(22)
    n = RADIX_MIN + 999
    before = nb.get_num_threads()
    nb.set_num_threads(min(threads, nb.config.NUMBA_NUM_THREADS))
    try:
        for v in (
            rng.integers(-5, 5, n),  # many ties
            rng.integers(0, 2**42, 200_003),  # Hilbert keys
            rng.integers(-(2**61), 2**61, n),  # span just below 2**62
            rng.integers(0, 2**40, n) << 16 | 0xAB,  # the two low bytes the same everywhere
            np.full(n, 7),  # every byte the same: no pass moves anything
            rng.integers(0, 2**63 - 1, n, dtype=np.uint64) >> np.uint64(2),
            rng.integers(0, 3, n).astype(np.int32),
            rng.integers(0, 255, n).astype(np.uint8),
        ):
            assert np.array_equal(stable_argsort(v), np.argsort(v, kind="stable"))
    finally:
        nb.set_num_threads(before)

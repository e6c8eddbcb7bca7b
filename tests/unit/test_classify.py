"""Labels, the design note's rule, the per-unit table and the caps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree

from geokanon import InputError, Label, OutlierPolicy
from geokanon.classify import cap_verdict, classify, labels_from_ratios, unit_table
from tests.cases import CASES


def seed_rule(points: np.ndarray, k: int, r_max: float, mr: float, gr: float) -> np.ndarray:
    """The design note's classify_outliers, verbatim in logic (strings mapped to codes)."""
    tree = cKDTree(points)
    dists, _ = tree.query(points, k=k)
    iota = dists[:, -1] / r_max
    labels = np.full(len(points), "ok", dtype=object)
    labels[iota > 1.0] = "merge"
    labels[iota > mr] = "generalise"
    labels[iota > gr] = "suppress"
    return np.array([Label[s.upper()].value for s in labels], dtype=np.uint8)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-60, 60), st.integers(-60, 60)), min_size=6, max_size=60),
    st.integers(2, 6),
    st.sampled_from([5.0, 10.0, 12.5, 25.0]),
)
def test_equals_design_note_rule_without_subjects(pts, k, r_max):
    arr = np.array(pts, dtype=float) * 2.0
    if len(arr) < k:
        return
    policy = OutlierPolicy(k=k, r_max_m=r_max)
    got = classify(arr[:, 0], arr[:, 1], policy).labels
    np.testing.assert_array_equal(got, seed_rule(arr, k, r_max, 2.0, 4.0))


def test_thresholds_are_inclusive_upper_bounds():
    pol = OutlierPolicy(k=2, r_max_m=10.0)
    # Pairs at exactly 10, 20, 40 m and just beyond 40 m.
    assert labels_from_ratios(np.array([10, 20, 40, 40.0001]) / 10.0, pol).tolist() == [0, 1, 2, 3]
    x = [0.0, 10.0, 1000.0, 1020.0, 5000.0, 5040.0]
    labels = classify(x, [0.0] * 6, pol).labels
    assert labels.tolist() == [0, 0, 1, 1, 2, 2]


def test_repeat_visitor_is_not_a_crowd():
    x, y, s = CASES["one_subject_many_points"]
    x = [*list(x), 500.0]
    y = [*list(y), 0.0]
    s = [*list(s), "other"]
    with pytest.raises(InputError, match="2 distinct subjects"):
        classify(x, y, OutlierPolicy(k=3, r_max_m=100.0), subjects=s)
    # Without the subject column the same points would look like a crowd.
    assert classify(x, y, OutlierPolicy(k=3, r_max_m=100.0)).counts()["ok"] == 10


@pytest.mark.parametrize("name", ["empty", "k_minus_1_points"])
def test_too_few_records_is_a_clear_error(name):
    x, y, _ = CASES[name]
    with pytest.raises(InputError, match=r"records|subjects"):
        classify(x, y, OutlierPolicy(k=5, r_max_m=10.0))


def test_time_makes_a_crowded_point_an_outlier():
    # Five subjects at one place: four at noon, one at 4 a.m.
    x = [0.0, 1, 2, 3, 4]
    y = [0.0] * 5
    t = [12 * 3600.0, 12 * 3600 + 60, 12 * 3600 + 120, 12 * 3600 + 180, 4 * 3600.0]
    pol = OutlierPolicy(k=3, r_max_m=50.0, t_max_s=1800.0, time_mode="time_of_day")
    cls = classify(x, y, pol, times=t)
    assert cls.labels[-1] == Label.SUPPRESS
    assert (cls.labels[:4] == Label.OK).all()
    assert (cls.iota_space[-1] <= 1.0) and cls.iota_time is not None
    with pytest.raises(InputError, match="no times"):
        classify(x, y, pol)


def test_unit_table_worst_first_and_distinct_subjects():
    sup = np.array([True, True, False, False, True, False])
    units = np.array([0, 0, 0, 1, 1, 2])
    subj = np.array([7, 7, 8, 9, 10, 11])
    t = unit_table(sup, units, ["A", "B", "C"], subj)
    rows = t.rows()
    # A and B tie at one suppressed subject of two: the name breaks the tie.
    assert [r["unit"] for r in rows] == ["A", "B", "C"]
    a = rows[0]
    assert (a["records"], a["subjects"], a["suppressed"], a["suppressed_subjects"]) == (3, 2, 2, 1)
    assert a["share"] == 0.5


def test_unit_table_empty_units_dropped_and_verdict():
    sup = np.array([False, True])
    t = unit_table(sup, [0, 2], ["A", "B", "C"])
    assert [r["unit"] for r in t.rows()] == ["C", "A"]
    pol = OutlierPolicy(k=2, r_max_m=1.0, tau=0.4)
    with pytest.warns(Warning, match="disposal"):
        v = cap_verdict(sup, sup, t, pol)
    assert v.units_over_cap == ("C",)
    assert not v.passes_unit_cap and not v.passes_global_cap
    assert v.worst_unit == "C"

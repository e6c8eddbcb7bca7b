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
    assert cls.iota_space[-1] <= 1.0 and cls.space_labels is not None
    # Eight hours from the others on the clock: 16 t_max, beyond the generalise ratio.
    assert np.isinf(cls.iota[-1])
    assert cls.because_of_time().tolist() == [False] * 4 + [True]
    assert cls.time_counts() == {"ok": 0, "merge": 0, "generalise": 0, "suppress": 1}
    with pytest.raises(InputError, match="no times"):
        classify(x, y, pol)


def _villages(seed: int):
    """A town, villages 1-4 r_max from it and from each other, one lone farm; 60 subjects
    with repeat visits over two years."""
    rng = np.random.default_rng(seed)
    town = rng.normal(0, 30, (80, 2))
    villages = np.concatenate(
        [c + rng.normal(0, 5, (3, 2)) for c in ([250, 0], [0, 320], [-600, 0], [0, -900])]
    )
    farm = np.array([[5000.0, 5000.0]])
    pts = np.concatenate([town, villages, farm])
    subj = np.r_[rng.integers(0, 50, 80), np.repeat(np.arange(50, 54), 3), [59]]
    t = 1.2e9 + rng.uniform(0, 2 * 365 * 86_400, len(pts))
    return pts[:, 0], pts[:, 1], subj, t


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t_max_longer_than_the_data_changes_no_label(seed):
    # SPEC: a t_max longer than the data's whole time span changes no label at all;
    # where the spatial ratio exceeds 1 the joint ratio is exactly the spatial one.
    x, y, subj, t = _villages(seed)
    pol = OutlierPolicy(k=3, r_max_m=100.0)
    space = classify(x, y, pol, subjects=subj)
    assert {Label.MERGE, Label.GENERALISE, Label.SUPPRESS} <= set(space.labels.tolist())
    span = float(t.max() - t.min())
    for t_max in (span, 10 * 365 * 86_400.0):
        joint = classify(x, y, pol.replace(t_max_s=t_max), subjects=subj, times=t)
        np.testing.assert_array_equal(joint.labels, space.labels)
        far = space.iota > 1.0
        np.testing.assert_array_equal(joint.iota[far], space.iota[far])
        assert joint.time_counts() == {"ok": 0, "merge": 0, "generalise": 0, "suppress": 0}
    # Half a day on the 24 h clock is the longest gap there is: no label changes either.
    tod = classify(
        x, y, pol.replace(t_max_s=43_200.0, time_mode="time_of_day"), subjects=subj, times=t
    )
    np.testing.assert_array_equal(tod.labels, space.labels)


def test_space_and_time_are_judged_together():
    # p's nearest subjects: q1 at 0.5 r_max and the same time, q2 at 0.5 r_max but 3 t_max
    # later, q3 at 1.5 r_max and the same time. Together, q1 and q3 are the two nearest
    # (ratios 0.5 and 1.5): p is a merge record, not a generalise one (the earlier rule
    # took space's 0.5 and the gap to q2, 3).
    x = [0.0, 50.0, 0.0, -150.0]
    y = [0.0, 0.0, 50.0, 0.0]
    t = [0.0, 0.0, 3 * 3600.0, 0.0]
    pol = OutlierPolicy(k=3, r_max_m=100.0, t_max_s=3600.0)
    cls = classify(x, y, pol, times=t)
    assert cls.iota.tolist() == [1.5, 2.0, 3.0, 2.0]
    assert cls.labels.tolist() == [Label.MERGE, Label.MERGE, Label.GENERALISE, Label.MERGE]
    assert cls.space_labels is not None
    assert cls.space_labels.tolist() == [Label.OK, Label.OK, Label.OK, Label.MERGE]
    assert cls.time_counts() == {"ok": 0, "merge": 2, "generalise": 1, "suppress": 0}


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

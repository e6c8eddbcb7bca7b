"""Invariants of the release core over random point sets (Hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon import Disposal, Label, OutlierPolicy
from geokanon.classify import classify
from geokanon.disposal import run_core
from geokanon.grouping import group_records

R_MAX = 100.0


@st.composite
def scenes(draw):
    """Random towns, chains at spacing r_max/3, households, one subject with many records."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xs, ys, subj = [], [], []
    next_subject = 0
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["town", "chain", "household", "repeat", "scatter"]))
        cx, cy = rng.uniform(0, 3000, 2)
        m = draw(st.integers(1, 25))
        if kind == "town":
            px, py = cx + rng.normal(0, 40, m), cy + rng.normal(0, 40, m)
            s = list(range(next_subject, next_subject + m))
        elif kind == "chain":
            px, py = cx + np.arange(m) * R_MAX / 3, np.full(m, cy)
            s = list(range(next_subject, next_subject + m))
        elif kind == "household":
            px, py = np.full(m, cx), np.full(m, cy)
            s = list(range(next_subject, next_subject + m))
        elif kind == "repeat":
            px, py = cx + rng.normal(0, 10, m), cy + rng.normal(0, 10, m)
            s = [next_subject] * m
        else:
            px, py = rng.uniform(0, 3000, m), rng.uniform(0, 3000, m)
            s = list(range(next_subject, next_subject + m))
        next_subject = max(s) + 1
        xs.extend(np.round(px, 1))
        ys.extend(np.round(py, 1))
        subj.extend(s)
    return np.array(xs), np.array(ys), np.array(subj, dtype=np.int64)


def check_groups(x, y, subj, group_id, rep_x, rep_y, k):
    for g in range(rep_x.size):
        m = group_id == g
        assert np.unique(subj[m]).size >= k
        d = np.sqrt((x[m] - rep_x[g]) ** 2 + (y[m] - rep_y[g]) ** 2)
        assert (d <= R_MAX).all()
        assert not ((x[m] == rep_x[g]) & (y[m] == rep_y[g])).any()


@settings(max_examples=80, deadline=None)
@given(scenes(), st.integers(2, 6))
def test_grouping_invariants(scene, k):
    x, y, subj = scene
    policy = OutlierPolicy(k=k, r_max_m=R_MAX)
    g = group_records(x, y, subj, policy)
    assert g.group_id.shape == x.shape
    check_groups(x, y, subj, g.group_id, g.rep_x, g.rep_y, k)
    # A subject's records at one place share one fate.
    key = {}
    for i in range(x.size):
        key.setdefault((subj[i], x[i], y[i]), set()).add(int(g.group_id[i]))
    assert all(len(v) == 1 for v in key.values())


@settings(max_examples=60, deadline=None)
@given(scenes(), st.integers(2, 5), st.randoms(use_true_random=False))
def test_core_accounts_for_every_record_and_ignores_row_order(scene, k, rnd):
    x, y, subj = scene
    if np.unique(subj).size < k:
        return
    policy = OutlierPolicy(k=k, r_max_m=R_MAX, tau=0.99, unit_cap=1.0)
    res = run_core(x, y, policy, subjects=subj, enforce_caps=False)
    n = x.size
    assert res.disposal.shape == (n,)
    at_group = res.group_id >= 0
    generalised = res.class_id >= 0
    suppressed = res.disposal == Disposal.SUPPRESSED
    # Exactly one fate per record.
    assert (at_group.astype(int) + generalised.astype(int) + suppressed.astype(int) == 1).all()
    check_groups(x, y, subj, res.group_id, res.group_x, res.group_y, k)
    for c in range(len(res.class_level)):
        assert np.unique(subj[res.class_id == c]).size >= k
    assert res.passes[-1].changed == 0 and len(res.passes) <= 5
    # The fixed point holds on a full re-classification (later passes re-classify only
    # the records near those that left): group-level labels are the final labels.
    kept = np.flatnonzero(at_group)
    if np.unique(subj[kept]).size >= k:
        full = classify(x[kept], y[kept], policy, subjects=subj[kept]).labels
        np.testing.assert_array_equal(full, res.final_labels[kept])
    # merge-labelled records are merged wherever a group's disc covers them.
    merged = res.disposal == Disposal.MERGED
    assert (res.final_labels[merged] == Label.MERGE).all()
    # Permuting the rows changes nothing.
    perm = np.array(rnd.sample(range(n), n))
    res2 = run_core(x[perm], y[perm], policy, subjects=subj[perm], enforce_caps=False)
    np.testing.assert_array_equal(res2.disposal, res.disposal[perm])
    # Group ids may be renumbered only if the grouping is the same; here they are canonical.
    np.testing.assert_array_equal(res2.group_id, res.group_id[perm])
    np.testing.assert_array_equal(res2.group_x, res.group_x)
    assert math.isfinite(res.verdict.suppressed_share)


@settings(max_examples=40, deadline=None)
@given(
    scenes(),
    st.integers(2, 4),
    st.sampled_from(["absolute", "time_of_day"]),
    st.sampled_from([600.0, 3600.0, 14_400.0]),
    st.randoms(use_true_random=False),
)
def test_core_with_times_reaches_its_fixed_point(scene, k, mode, t_max, rnd):
    # Times over three days, many in one morning hour: space and time judged together.
    x, y, subj = scene
    if np.unique(subj).size < k:
        return
    t = np.array(
        [
            1.2e9 + rnd.randrange(3) * 86_400 + (8 * 3600 + rnd.randrange(3600))
            if rnd.random() < 0.7
            else 1.2e9 + rnd.randrange(3 * 86_400)
            for _ in range(x.size)
        ],
        dtype=float,
    )
    base = OutlierPolicy(k=k, r_max_m=R_MAX, tau=0.99, unit_cap=1.0)
    policy = base.replace(t_max_s=t_max, time_mode=mode)
    res = run_core(x, y, policy, subjects=subj, times=t, enforce_caps=False)
    assert res.passes[-1].changed == 0 and len(res.passes) <= 5
    check_groups(x, y, subj, res.group_id, res.group_x, res.group_y, k)
    kept = np.flatnonzero(res.group_id >= 0)
    if np.unique(subj[kept]).size >= k:
        full = classify(x[kept], y[kept], policy, subjects=subj[kept], times=t[kept]).labels
        np.testing.assert_array_equal(full, res.final_labels[kept])
    # Judged together, time can only make a record's label worse than space's.
    space = run_core(x, y, base, subjects=subj, enforce_caps=False)
    assert (res.first_labels >= space.first_labels).all()
    # A t_max longer than the whole time span changes nothing at all.
    span = base.replace(t_max_s=float(t.max() - t.min()) + 1.0)
    same = run_core(x, y, span, subjects=subj, times=t, enforce_caps=False)
    np.testing.assert_array_equal(same.disposal, space.disposal)
    np.testing.assert_array_equal(same.group_id, space.group_id)
    np.testing.assert_array_equal(same.final_labels, space.final_labels)

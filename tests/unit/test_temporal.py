"""Temporal outliers end to end, and repeat visitors (issue 7)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from geokanon import Disposal, Label, OutlierPolicy
from geokanon.disposal import run_core
from geokanon.timebins import bin_labels, time_bins

NOON = 12 * 3600.0


def test_only_record_at_4am_is_not_published_with_the_crowd():
    # Eight subjects at one street corner around noon, one more there at 4 a.m.
    n = 9
    x = 1000.0 + np.arange(n) * 3.0
    y = np.full(n, 2000.0)
    t = np.r_[NOON + np.arange(8) * 120.0, 4 * 3600.0] + 10 * 86_400
    pol = OutlierPolicy(k=3, r_max_m=100.0, t_max_s=1800.0, time_mode="time_of_day",
                        tau=0.5, unit_cap=1.0)  # fmt: skip
    res = run_core(x, y, pol, times=t)
    assert res.first_labels[-1] == Label.SUPPRESS
    assert (res.first_labels[:8] == Label.OK).all()
    assert res.disposal[-1] == Disposal.SUPPRESSED
    assert (res.group_id[:8] >= 0).all()
    # Without the time dimension the 4 a.m. record would hide in the crowd.
    res_space = run_core(x, y, pol.replace(t_max_s=None), times=None)
    assert res_space.disposal[-1] in (Disposal.GROUPED, Disposal.MERGED)


def test_one_subject_five_points_in_a_valley():
    town_x = np.arange(12) * 5.0
    valley_x = 50_000 + np.arange(5) * 4.0
    x = np.r_[town_x, valley_x]
    y = np.zeros(x.size)
    subjects = np.r_[np.arange(12), np.full(5, 99)]
    pol = OutlierPolicy(k=4, r_max_m=100.0, tau=0.5, unit_cap=1.0)
    res = run_core(x, y, pol, subjects=subjects)
    valley = res.disposal[12:]
    assert (res.first_labels[12:] == Label.SUPPRESS).all()
    assert (valley == Disposal.SUPPRESSED).all()
    # Counted by record, the five would have looked like a group.
    res_rec = run_core(x, y, pol)
    assert (res_rec.disposal[12:] == Disposal.GROUPED).all()


def test_time_bins_hold_k_subjects_per_class_and_bin():
    rng = np.random.default_rng(4)
    n = 400
    cls = rng.integers(0, 20, n)
    t = rng.uniform(0, 30 * 86_400, n)
    subj = rng.integers(0, 150, n)
    width, index = time_bins(cls, t, subj, 3)
    frame = pd.DataFrame({"c": cls, "w": width, "i": index, "s": subj})
    assert (frame.groupby("c")["w"].nunique() == 1).all()
    distinct = frame.drop_duplicates().groupby(["c", "w", "i"]).size()
    assert (distinct >= 3).all()
    labels = bin_labels(width, index)
    assert all(isinstance(v, str) for v in labels)


def test_time_of_day_bins_wrap_the_clock():
    t = np.array([3600.0 * 4 + 86_400 * d for d in range(5)])
    width, index = time_bins(np.zeros(5, np.int64), t, np.arange(5), 5, time_of_day=True)
    assert width.tolist() == [900] * 5 and index.tolist() == [16] * 5
    assert bin_labels(width, index, time_of_day=True)[0] == "04:00-04:15 UTC"

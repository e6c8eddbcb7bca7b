"""The passes' fixed point with times: a cascade is followed to its end (SPEC "The disposals").

Removing records only raises the others' ratios, so the labels of the group-level records
never fall back and the passes cannot oscillate; what used to exhaust the 5 passes was a
cascade (records that each had just k-1 others within r_max and t_max, the chain peeled
one ring per pass). Each pass now classifies what remains until no record leaves.
"""

from __future__ import annotations

import numpy as np
import pytest

import geokanon.disposal as disposal
from geokanon.classify import classify
from geokanon.disposal import run_core, unsettled_advice
from geokanon.errors import Unsatisfiable
from geokanon.policy import Label, OutlierPolicy

T_MAX = 3_600.0


def _policy(k: int = 3, r_max: float = 100.0, t_max: float | None = T_MAX) -> OutlierPolicy:
    return OutlierPolicy(k=k, r_max_m=r_max, t_max_s=t_max, tau=0.99, unit_cap=1.0)


def _time_chain(n: int = 14) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` subjects at one address, seen 1.5 t_max apart: the two ends are ``generalise``
    (their second other subject is 3 t_max away), every other record ``merge``; each end
    that leaves makes its neighbour the new end."""
    x = np.full(n, 1_000.0)
    y = np.full(n, 2_000.0)
    t = np.arange(n) * 1.5 * T_MAX
    return x, y, t


def _assert_settled(res, x, y, t, policy, subj=None) -> None:
    assert res.passes[-1].changed == 0 and len(res.passes) <= disposal.MAX_PASSES
    at = res.group_id >= 0
    if at.sum() == 0:
        return
    # Re-classifying the group-level records among themselves gives their final labels.
    again = classify(
        x[at], y[at], policy, subjects=None if subj is None else subj[at],
        times=None if t is None else t[at],
    ) if len(np.unique(res.subjects[at])) >= policy.k else None  # fmt: skip
    if again is not None:
        assert np.array_equal(again.labels, res.final_labels[at])
    assert (res.final_labels[at] <= Label.MERGE).all()


def test_a_cascade_in_time_settles_in_one_pass():
    # On d39bb7f/de4ade2 this chain needed one pass per record peeled from each end and was
    # refused: "did not settle within 5 passes ... raise r_max_m or lower k".
    x, y, t = _time_chain()
    pol = _policy()
    res = run_core(x, y, pol, times=t)
    _assert_settled(res, x, y, t, pol)
    assert res.passes[1].changed > 0 and len(res.passes) <= 3
    assert int((res.group_id >= 0).sum()) == 0  # the whole chain peels away


def test_the_refusal_names_t_max_when_time_is_what_breaks_the_passes(monkeypatch):
    # With the pass limit at 2, pass 2's changes refuse; every record that left has k-1
    # other subjects at its own address, so the advice is a wider t_max, and that helps.
    monkeypatch.setattr(disposal, "MAX_PASSES", 2)
    x, y, t = _time_chain()
    with pytest.raises(Unsatisfiable) as err:
        run_core(x, y, _policy(), times=t)
    msg = str(err.value)
    assert "raise t_max_s (--t-max)" in msg and "r_max_m" not in msg
    assert "leave only because of the time gap" in msg
    res = run_core(x, y, _policy(t_max=2 * T_MAX), times=t)  # the advised change settles
    assert res.passes[-1].changed == 0


def test_unsettled_advice_follows_the_majority_of_the_records_that_left():
    # Records that left with k-1 others within r_max in space alone point to t_max; the
    # others to r_max (or k).
    assert unsettled_advice(4, 2).startswith("raise t_max_s (--t-max)")
    assert unsettled_advice(4, 1).startswith("raise r_max_m (--r-max)")
    assert "3 of the 4" in unsettled_advice(4, 1)
    assert unsettled_advice(0, 0).startswith("raise r_max_m (--r-max)")


def test_the_passes_settle_on_small_random_space_time_inputs_with_ties():
    # Brute force: coordinates on a 50 m lattice, times on a half-t_max lattice (many
    # exact ties in space, time and ratio), repeat subjects; every input settles, and the
    # group-level records re-classified among themselves keep their final labels.
    rng = np.random.default_rng(2026)
    for _ in range(150):
        n = int(rng.integers(6, 40))
        k = int(rng.integers(2, 5))
        x = rng.integers(0, 8, n) * 50.0
        y = rng.integers(0, 3, n) * 50.0
        t = rng.integers(0, 12, n) * 0.5 * T_MAX
        subj = rng.integers(0, max(k, int(n * 0.7)), n)
        if len(np.unique(subj)) < k:
            continue
        pol = _policy(k=k)
        res = run_core(x, y, pol, subjects=subj, times=t, enforce_caps=False)
        _assert_settled(res, x, y, t, pol, subj)

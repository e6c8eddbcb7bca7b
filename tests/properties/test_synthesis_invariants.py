"""Invariants of opt-in synthesis over random point sets (Hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon import Disposal, OutlierPolicy
from geokanon.disposal import group_units, run_core
from tests.properties.test_core_invariants import R_MAX, scenes


@settings(max_examples=50, deadline=None)
@given(scenes(), st.integers(2, 5), st.integers(1, 4), st.randoms(use_true_random=False))
def test_one_stand_in_per_suppressed_subject_in_a_class_of_its_unit(scene, k, n_units, rnd):
    x, y, subj = scene
    if np.unique(subj).size < k:
        return
    units = np.clip((x // (3000.0 / n_units)).astype(np.int64), 0, n_units - 1)
    names = np.array([f"u{i}" for i in range(n_units)], dtype=object)
    kw = {"subjects": subj, "unit_codes": units, "unit_names": names, "enforce_caps": False}
    policy = OutlierPolicy(k=k, r_max_m=R_MAX, tau=0.99, unit_cap=1.0, allow_synthetic=True)
    res = run_core(x, y, policy, **kw)
    plain = run_core(x, y, OutlierPolicy(k=k, r_max_m=R_MAX, tau=0.99, unit_cap=1.0), **kw)
    # Synthesis changes no decision about real records.
    np.testing.assert_array_equal(res.disposal, plain.disposal)
    np.testing.assert_array_equal(res.group_id, plain.group_id)
    syn = res.synthetic
    sup = res.disposal == Disposal.SUPPRESSED
    gu = group_units(res.group_id, units, res.group_x.size, names)
    unit_class = {
        res.class_unit[c]: c for c in range(len(res.class_level)) if res.class_level[c] == "unit"
    }
    for u in range(n_units):
        has_class = names[u] in unit_class or (gu == u).any()
        want = np.unique(subj[sup & (units == u)]).size if has_class else 0
        assert int((syn.unit == u).sum()) == want
    for g, c, u, r in zip(syn.group_id, syn.class_id, syn.unit, syn.stands_for, strict=True):
        assert sup[r] and units[r] == u
        assert (g >= 0) != (c >= 0)
        if c >= 0:
            assert res.class_level[c] == "unit" and res.class_unit[c] == names[u]
            # placed where k real subjects already are
            assert np.unique(subj[res.class_id == c]).size >= k
        else:
            assert gu[g] == u and np.unique(subj[res.group_id == g]).size >= k
            if names[u] in unit_class:
                raise AssertionError("a unit with its own class takes the stand-in there")
    # Row order changes nothing.
    n = x.size
    perm = np.array(rnd.sample(range(n), n))
    kw2 = {**kw, "subjects": subj[perm], "unit_codes": units[perm]}
    res2 = run_core(x[perm], y[perm], policy, **kw2)
    np.testing.assert_array_equal(res2.synthetic.group_id, syn.group_id)
    np.testing.assert_array_equal(res2.synthetic.class_id, syn.class_id)
    np.testing.assert_array_equal(res2.synthetic.unit, syn.unit)

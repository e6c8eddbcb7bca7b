"""Geomasks: keyed determinism, row-order independence, bounds, containment."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon.errors import InputError, PrivacyRiskWarning
from geokanon.mask import MaskSpec, apply_mask, mask_keys
from tests.cases import CASES


def _points(n=500, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 10_000, n), rng.uniform(0, 10_000, n)


def _shift(x, y, mx, my):
    return np.hypot(mx - np.asarray(x), my - np.asarray(y))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"kind": "blur", "sd_m": 1.0}, "kind"),
        ({"kind": "jitter"}, "sd_m"),
        ({"kind": "jitter", "sd_m": 0.0}, "sd_m"),
        ({"kind": "jitter", "sd_m": math.nan}, "sd_m"),
        ({"kind": "jitter", "sd_m": True}, "sd_m"),
        ({"kind": "jitter", "sd_m": 5.0, "min_m": 2.0}, "min_m"),
        ({"kind": "jitter", "sd_m": 5.0, "max_m": -1.0}, "max_m"),
        ({"kind": "donut", "max_m": 10.0, "sd_m": 3.0}, "sd_m"),
        ({"kind": "donut", "min_m": 5.0}, "max_m"),
        ({"kind": "donut", "min_m": -1.0, "max_m": 10.0}, "min_m"),
        ({"kind": "donut", "min_m": 10.0, "max_m": 10.0}, "max_m"),
        ({"kind": "donut", "max_m": math.inf}, "max_m"),
        ({"kind": "donut", "max_m": 10.0, "contain": "yes"}, "contain"),
        ({"kind": "donut", "max_m": 10.0, "max_tries": 0}, "max_tries"),
        ({"kind": "donut", "max_m": 10.0, "key_precision_m": 0}, "key_precision_m"),
    ],
)
def test_spec_validation_names_the_parameter(kwargs, name):
    with pytest.raises(InputError, match=name):
        MaskSpec(**kwargs)


def test_spec_is_frozen_and_keyword_only():
    spec = MaskSpec.donut(min_m=1.0, max_m=2.0)
    with pytest.raises(AttributeError):
        spec.max_m = 3.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        MaskSpec("jitter", 5.0)  # type: ignore[misc]


@pytest.mark.parametrize("spec", [MaskSpec.jitter(sd_m=50.0), MaskSpec.donut(min_m=20, max_m=80)])
def test_same_seed_same_noise_other_seed_other_noise(spec):
    x, y = _points()
    a = apply_mask(x, y, spec, seed=11)
    b = apply_mask(x, y, spec, seed=11)
    c = apply_mask(x, y, spec, seed=12)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.allclose(a[0], c[0])


@pytest.mark.parametrize("spec", [MaskSpec.jitter(sd_m=50.0), MaskSpec.donut(min_m=20, max_m=80)])
def test_row_order_does_not_matter(spec):
    x, y = _points()
    subj = np.array([f"s{i % 97}" for i in range(x.size)])
    perm = np.random.default_rng(3).permutation(x.size)
    mx, my = apply_mask(x, y, spec, seed=5, subjects=subj)
    px, py = apply_mask(x[perm], y[perm], spec, seed=5, subjects=subj[perm])
    assert np.array_equal(px, mx[perm]) and np.array_equal(py, my[perm])


def test_noise_of_a_record_does_not_depend_on_the_other_records():
    x, y = _points()
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=30.0), seed=1)
    sx, sy = apply_mask(x[:10], y[:10], MaskSpec.jitter(sd_m=30.0), seed=1)
    assert np.array_equal(sx, mx[:10]) and np.array_equal(sy, my[:10])


def test_one_subject_at_one_place_shares_one_displacement():
    x = np.array([100.0, 100.0, 100.0, 100.0, 300.0])
    y = np.array([50.0, 50.0, 50.0, 50.0, 50.0])
    subj = ["a", "a", "b", "b", "a"]
    mx, my = apply_mask(x, y, MaskSpec.donut(min_m=10, max_m=40), seed=2, subjects=subj)
    dx, dy = mx - x, my - y
    # Same subject, same place: one displacement (averaging cannot remove the noise).
    assert (dx[0], dy[0]) == (dx[1], dy[1])
    assert (dx[2], dy[2]) == (dx[3], dy[3])
    # Another subject at the same place, or the same subject elsewhere: other noise.
    assert (dx[0], dy[0]) != (dx[2], dy[2])
    assert (dx[0], dy[0]) != (dx[4], dy[4])


def test_without_subjects_colocated_records_share_a_displacement():
    x, y = [7.0, 7.0, 9.0], [3.0, 3.0, 3.0]
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=10.0), seed=0)
    assert mx[0] == mx[1] and my[0] == my[1]
    assert mx[0] - 7.0 != mx[2] - 9.0


def test_integer_and_text_subject_ids_key_the_same_noise():
    x, y = _points(50)
    a = apply_mask(x, y, MaskSpec.jitter(sd_m=10.0), seed=0, subjects=np.arange(50))
    b = apply_mask(x, y, MaskSpec.jitter(sd_m=10.0), seed=0, subjects=[str(i) for i in range(50)])
    assert np.array_equal(a[0], b[0])


def test_key_rounding_absorbs_tiny_coordinate_differences():
    k1 = mask_keys([1000.0], [2000.0], seed=4)
    k2 = mask_keys([1000.0 + 1e-4], [2000.0 - 1e-4], seed=4)
    k3 = mask_keys([1000.02], [2000.0], seed=4)
    assert k1[0] == k2[0] != k3[0]


def test_donut_bounds_and_uniform_by_area():
    x, y = _points(20_000, seed=1)
    mx, my = apply_mask(x, y, MaskSpec.donut(min_m=100.0, max_m=300.0), seed=9)
    d = _shift(x, y, mx, my)
    assert d.min() >= 100.0 - 1e-6 and d.max() <= 300.0 + 1e-6
    # Uniform over the ring's area: the share inside radius 200 is (200^2-100^2)/(300^2-100^2).
    assert abs((d <= 200.0).mean() - 3 / 8) < 0.02


def test_jitter_has_the_requested_spread_and_no_bias():
    x, y = _points(20_000, seed=2)
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=50.0), seed=3)
    dx, dy = mx - x, my - y
    assert abs(dx.std() / 50.0 - 1) < 0.03 and abs(dy.std() / 50.0 - 1) < 0.03
    assert abs(dx.mean()) < 2.0 and abs(dy.mean()) < 2.0


def test_truncated_jitter_never_exceeds_its_cap():
    x, y = _points(5_000)
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=50.0, max_m=60.0), seed=3)
    assert _shift(x, y, mx, my).max() <= 60.0 + 1e-9


def test_containment_needs_polygons_not_just_codes():
    with pytest.raises(InputError, match="needs unit polygons"):
        apply_mask([0.0], [0.0], MaskSpec.jitter(sd_m=5.0, contain=True), seed=0, unit_codes=[0])


def _grid_units(side=1000.0, n=3):
    """n x n square units of the given side; code = ix * n + iy."""
    return [
        shapely.box(ix * side, iy * side, (ix + 1) * side, (iy + 1) * side)
        for ix in range(n)
        for iy in range(n)
    ]


def test_contained_records_stay_inside_their_unit():
    rng = np.random.default_rng(4)
    x, y = rng.uniform(1, 2999, 3_000), rng.uniform(1, 2999, 3_000)
    codes = (x // 1000).astype(int) * 3 + (y // 1000).astype(int)
    units = _grid_units()
    spec = MaskSpec.donut(min_m=50.0, max_m=250.0, contain=True)
    mx, my = apply_mask(x, y, spec, seed=1, unit_polygons=units, unit_codes=codes)
    inside = shapely.contains_xy(np.asarray(units, dtype=object)[codes], mx, my)
    assert inside.all()
    d = _shift(x, y, mx, my)
    assert d.min() >= 50.0 - 1e-6 and d.max() <= 250.0 + 1e-6
    # Without containment some of these points leave their square.
    ux, uy = apply_mask(x, y, MaskSpec.donut(min_m=50.0, max_m=250.0), seed=1)
    assert not shapely.contains_xy(np.asarray(units, dtype=object)[codes], ux, uy).all()


def test_narrow_unit_falls_back_to_a_smaller_displacement_and_says_so():
    # A 4 m wide strip: a 100 m jitter almost never lands inside it.
    strip = shapely.box(0, 0, 4, 10_000)
    x = np.full(20, 2.0)
    y = np.linspace(1000, 9000, 20)
    spec = MaskSpec.jitter(sd_m=100.0, contain=True)
    with pytest.warns(PrivacyRiskWarning, match="smaller displacement"):
        mx, my = apply_mask(x, y, spec, seed=0, unit_polygons=[strip], unit_codes=np.zeros(20))
    assert shapely.contains_xy(strip, mx, my).all()


def test_impossible_containment_keeps_bounds_and_warns():
    # A donut of at least 50 m cannot stay inside a 10 m square.
    tiny = shapely.box(0, 0, 10, 10)
    spec = MaskSpec.donut(min_m=50.0, max_m=60.0, contain=True)
    with pytest.warns(UserWarning, match="could not be kept inside"):
        mx, my = apply_mask([5.0], [5.0], spec, seed=0, unit_polygons=[tiny], unit_codes=[0])
    assert 50.0 - 1e-6 <= _shift([5.0], [5.0], mx, my)[0] <= 60.0 + 1e-6


def test_missing_polygon_for_a_used_unit_is_refused():
    with pytest.raises(InputError, match="no polygon"):
        apply_mask(
            [1.0, 2.0], [1.0, 2.0], MaskSpec.jitter(sd_m=1.0, contain=True), seed=0,
            unit_polygons=[shapely.box(0, 0, 5, 5), None], unit_codes=[0, 1],
        )  # fmt: skip


@pytest.mark.parametrize("name", ["empty", "one_point", "all_identical", "nan"])
def test_catalogue_cases(name):
    x, y, subj = CASES[name]
    spec = MaskSpec.donut(min_m=1.0, max_m=2.0)
    if name == "nan":
        with pytest.raises(InputError, match="NaN"):
            apply_mask(x, y, spec, seed=0, subjects=subj)
        return
    mx, _my = apply_mask(x, y, spec, seed=0, subjects=subj)
    assert mx.shape == (len(x),)
    if name == "all_identical":
        # Co-located records without a subject column move together.
        assert np.unique(mx).size == 1


def test_bad_seed_and_shapes_are_refused():
    with pytest.raises(InputError, match="seed"):
        apply_mask([0.0], [0.0], MaskSpec.jitter(sd_m=1.0), seed=-1)
    with pytest.raises(InputError, match="equal length"):
        apply_mask([0.0, 1.0], [0.0], MaskSpec.jitter(sd_m=1.0), seed=0)
    with pytest.raises(InputError, match="subjects"):
        apply_mask([0.0, 1.0], [0.0, 1.0], MaskSpec.jitter(sd_m=1.0), seed=0, subjects=["a"])


_coords = st.lists(
    st.tuples(
        st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
        st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    pts=_coords,
    lo=st.floats(0, 500, allow_nan=False),
    width=st.floats(0.5, 500, allow_nan=False),
    seed=st.integers(0, 2**63 - 1),
)
def test_property_every_donut_displacement_within_bounds(pts, lo, width, seed):
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    spec = MaskSpec.donut(min_m=lo, max_m=lo + width)
    mx, my = apply_mask(x, y, spec, seed=seed)
    d = _shift(x, y, mx, my)
    tol = 1e-9 * (np.abs(x).max() + np.abs(y).max() + lo + width) + 1e-6
    assert (d >= lo - tol).all() and (d <= lo + width + tol).all()


@settings(max_examples=60, deadline=None)
@given(
    pts=_coords,
    sd=st.floats(0.1, 300, allow_nan=False),
    cap=st.floats(0.1, 300, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_property_truncated_jitter_within_cap(pts, sd, cap, seed):
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=sd, max_m=cap), seed=seed)
    tol = 1e-9 * (np.abs(x).max() + np.abs(y).max() + cap) + 1e-6
    assert (_shift(x, y, mx, my) <= cap + tol).all()

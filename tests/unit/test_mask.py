"""Geomasks: keyed determinism, row-order independence, bounds, containment."""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon.errors import InputError, PrivacyRiskWarning
from geokanon.mask import MaskKey, MaskSpec, apply_mask, mask_keys
from tests.cases import CASES


def _key(i):
    """A fixed test key (a real one comes from MaskKey.generate() or a key file)."""
    return MaskKey(hashlib.sha256(str(i).encode()).hexdigest().encode(), origin="test")


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
def test_same_key_same_noise_other_key_other_noise(spec):
    x, y = _points()
    a = apply_mask(x, y, spec, key=_key(11))
    b = apply_mask(x, y, spec, key=_key(11))
    c = apply_mask(x, y, spec, key=_key(12))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.allclose(a[0], c[0])


@pytest.mark.parametrize("spec", [MaskSpec.jitter(sd_m=50.0), MaskSpec.donut(min_m=20, max_m=80)])
def test_row_order_does_not_matter(spec):
    x, y = _points()
    subj = np.array([f"s{i % 97}" for i in range(x.size)])
    perm = np.random.default_rng(3).permutation(x.size)
    mx, my = apply_mask(x, y, spec, key=_key(5), subjects=subj)
    px, py = apply_mask(x[perm], y[perm], spec, key=_key(5), subjects=subj[perm])
    assert np.array_equal(px, mx[perm]) and np.array_equal(py, my[perm])


def test_noise_of_a_record_does_not_depend_on_the_other_records():
    x, y = _points()
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=30.0), key=_key(1))
    sx, sy = apply_mask(x[:10], y[:10], MaskSpec.jitter(sd_m=30.0), key=_key(1))
    assert np.array_equal(sx, mx[:10]) and np.array_equal(sy, my[:10])


def test_one_subject_at_one_place_shares_one_displacement():
    x = np.array([100.0, 100.0, 100.0, 100.0, 300.0])
    y = np.array([50.0, 50.0, 50.0, 50.0, 50.0])
    subj = ["a", "a", "b", "b", "a"]
    mx, my = apply_mask(x, y, MaskSpec.donut(min_m=10, max_m=40), key=_key(2), subjects=subj)
    dx, dy = mx - x, my - y
    # Same subject, same place: one displacement (averaging cannot remove the noise).
    assert (dx[0], dy[0]) == (dx[1], dy[1])
    assert (dx[2], dy[2]) == (dx[3], dy[3])
    # Another subject at the same place, or the same subject elsewhere: other noise.
    assert (dx[0], dy[0]) != (dx[2], dy[2])
    assert (dx[0], dy[0]) != (dx[4], dy[4])


def test_without_subjects_colocated_records_share_a_displacement():
    x, y = [7.0, 7.0, 9.0], [3.0, 3.0, 3.0]
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=10.0), key=_key(0))
    assert mx[0] == mx[1] and my[0] == my[1]
    assert mx[0] - 7.0 != mx[2] - 9.0


def test_integer_and_text_subject_ids_key_the_same_noise():
    x, y = _points(50)
    a = apply_mask(x, y, MaskSpec.jitter(sd_m=10.0), key=_key(0), subjects=np.arange(50))
    b = apply_mask(
        x, y, MaskSpec.jitter(sd_m=10.0), key=_key(0), subjects=[str(i) for i in range(50)]
    )
    assert np.array_equal(a[0], b[0])


def test_key_rounding_absorbs_tiny_coordinate_differences():
    k1 = mask_keys([1000.0], [2000.0], key=_key(4))
    k2 = mask_keys([1000.0 + 1e-4], [2000.0 - 1e-4], key=_key(4))
    k3 = mask_keys([1000.02], [2000.0], key=_key(4))
    assert k1[0] == k2[0] != k3[0]


def test_donut_bounds_and_uniform_by_area():
    x, y = _points(20_000, seed=1)
    mx, my = apply_mask(x, y, MaskSpec.donut(min_m=100.0, max_m=300.0), key=_key(9))
    d = _shift(x, y, mx, my)
    assert d.min() >= 100.0 - 1e-6 and d.max() <= 300.0 + 1e-6
    # Uniform over the ring's area: the share inside radius 200 is (200^2-100^2)/(300^2-100^2).
    assert abs((d <= 200.0).mean() - 3 / 8) < 0.02


def test_jitter_has_the_requested_spread_and_no_bias():
    x, y = _points(20_000, seed=2)
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=50.0), key=_key(3))
    dx, dy = mx - x, my - y
    assert abs(dx.std() / 50.0 - 1) < 0.03 and abs(dy.std() / 50.0 - 1) < 0.03
    assert abs(dx.mean()) < 2.0 and abs(dy.mean()) < 2.0


def test_truncated_jitter_never_exceeds_its_cap():
    x, y = _points(5_000)
    mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=50.0, max_m=60.0), key=_key(3))
    assert _shift(x, y, mx, my).max() <= 60.0 + 1e-9


def test_containment_needs_polygons_not_just_codes():
    with pytest.raises(InputError, match="needs unit polygons"):
        apply_mask(
            [0.0], [0.0], MaskSpec.jitter(sd_m=5.0, contain=True), key=_key(0), unit_codes=[0]
        )


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
    mx, my = apply_mask(x, y, spec, key=_key(1), unit_polygons=units, unit_codes=codes)
    inside = shapely.contains_xy(np.asarray(units, dtype=object)[codes], mx, my)
    assert inside.all()
    d = _shift(x, y, mx, my)
    assert d.min() >= 50.0 - 1e-6 and d.max() <= 250.0 + 1e-6
    # Without containment some of these points leave their square.
    ux, uy = apply_mask(x, y, MaskSpec.donut(min_m=50.0, max_m=250.0), key=_key(1))
    assert not shapely.contains_xy(np.asarray(units, dtype=object)[codes], ux, uy).all()


def test_narrow_unit_falls_back_to_a_smaller_displacement_and_says_so():
    # A 4 m wide strip: a 100 m jitter almost never lands inside it.
    strip = shapely.box(0, 0, 4, 10_000)
    x = np.full(20, 2.0)
    y = np.linspace(1000, 9000, 20)
    spec = MaskSpec.jitter(sd_m=100.0, contain=True)
    with pytest.warns(PrivacyRiskWarning, match="smaller displacement"):
        mx, my = apply_mask(x, y, spec, key=_key(0), unit_polygons=[strip], unit_codes=np.zeros(20))
    assert shapely.contains_xy(strip, mx, my).all()


def test_impossible_containment_keeps_bounds_and_warns():
    # A donut of at least 50 m cannot stay inside a 10 m square.
    tiny = shapely.box(0, 0, 10, 10)
    spec = MaskSpec.donut(min_m=50.0, max_m=60.0, contain=True)
    with pytest.warns(UserWarning, match="could not be kept inside"):
        mx, my = apply_mask([5.0], [5.0], spec, key=_key(0), unit_polygons=[tiny], unit_codes=[0])
    assert 50.0 - 1e-6 <= _shift([5.0], [5.0], mx, my)[0] <= 60.0 + 1e-6


def test_missing_polygon_for_a_used_unit_is_refused():
    with pytest.raises(InputError, match="no polygon"):
        apply_mask(
            [1.0, 2.0], [1.0, 2.0], MaskSpec.jitter(sd_m=1.0, contain=True), key=_key(0),
            unit_polygons=[shapely.box(0, 0, 5, 5), None], unit_codes=[0, 1],
        )  # fmt: skip


@pytest.mark.parametrize("name", ["empty", "one_point", "all_identical", "nan"])
def test_catalogue_cases(name):
    x, y, subj = CASES[name]
    spec = MaskSpec.donut(min_m=1.0, max_m=2.0)
    if name == "nan":
        with pytest.raises(InputError, match="NaN"):
            apply_mask(x, y, spec, key=_key(0), subjects=subj)
        return
    mx, _my = apply_mask(x, y, spec, key=_key(0), subjects=subj)
    assert mx.shape == (len(x),)
    if name == "all_identical":
        # Co-located records without a subject column move together.
        assert np.unique(mx).size == 1


def test_bad_key_and_shapes_are_refused():
    # an integer seed (published in the manifest) cannot key a mask
    with pytest.raises(InputError, match="MaskKey"):
        apply_mask([0.0], [0.0], MaskSpec.jitter(sd_m=1.0), key=873104)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="equal length"):
        apply_mask([0.0, 1.0], [0.0], MaskSpec.jitter(sd_m=1.0), key=_key(0))
    with pytest.raises(InputError, match="subjects"):
        apply_mask([0.0, 1.0], [0.0, 1.0], MaskSpec.jitter(sd_m=1.0), key=_key(0), subjects=["a"])


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
    mx, my = apply_mask(x, y, spec, key=_key(seed))
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
        mx, my = apply_mask(x, y, MaskSpec.jitter(sd_m=sd, max_m=cap), key=_key(seed))
    tol = 1e-9 * (np.abs(x).max() + np.abs(y).max() + cap) + 1e-6
    assert (_shift(x, y, mx, my) <= cap + tol).all()


# ---- the key ----------------------------------------------------------------------------


def _siphash_reference(key: bytes, msg: bytes) -> int:
    """SipHash-2-4 as the paper writes it, in plain Python integers."""
    m64 = (1 << 64) - 1

    def rotl(x, b):
        return ((x << b) | (x >> (64 - b))) & m64

    def sip_round(v0, v1, v2, v3):
        v0 = (v0 + v1) & m64
        v1 = rotl(v1, 13) ^ v0
        v0 = rotl(v0, 32)
        v2 = (v2 + v3) & m64
        v3 = rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & m64
        v3 = rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & m64
        v1 = rotl(v1, 17) ^ v2
        return v0, v1, rotl(v2, 32), v3

    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:16], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261,
         k1 ^ 0x7465646279746573]  # fmt: skip
    end = len(msg) - len(msg) % 8
    words = [int.from_bytes(msg[i : i + 8], "little") for i in range(0, end, 8)]
    words.append(((len(msg) & 0xFF) << 56) | int.from_bytes(msg[end:], "little"))
    for m in words:
        v[3] ^= m
        v = list(sip_round(*sip_round(*v)))
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(4):
        v = list(sip_round(*v))
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def test_record_streams_are_siphash_of_subject_and_rounded_place():
    import pandas as pd

    # the reference against the paper's test vector (key 00..0f, message 00..0e)
    assert _siphash_reference(bytes(range(16)), bytes(range(15))) == 0xA129CA6149BE45E5
    key = _key(3)
    k0, k1 = key.words
    sip_key = k0.to_bytes(8, "little") + k1.to_bytes(8, "little")
    x, y = [1234.5, -17.25, 0.0], [99.0, 5e5, -3.0]
    subj = ["a", "b", "c"]
    got = mask_keys(x, y, key=key, subjects=subj)
    s_hash = pd.util.hash_array(np.array(subj, dtype=object))
    for i in range(3):
        parts = [int(s_hash[i]), round(x[i] / 0.01), round(y[i] / 0.01)]
        msg = b"".join((v & ((1 << 64) - 1)).to_bytes(8, "little") for v in parts)
        assert int(got[i]) == _siphash_reference(sip_key, msg)


def test_generated_keys_differ_and_carry_256_bits():
    a, b = MaskKey.generate(), MaskKey.generate()
    assert a != b and a.words != b.words
    assert len(bytes.fromhex(a.material.decode())) == 32
    x, y = _points(200)
    spec = MaskSpec.donut(min_m=20.0, max_m=60.0)
    assert not np.allclose(apply_mask(x, y, spec, key=a)[0], apply_mask(x, y, spec, key=b)[0])
    assert "secret" in repr(a) and a.material.decode() not in repr(a)


def test_key_file_round_trip_and_validation(tmp_path):
    key = MaskKey.generate()
    path = tmp_path / "mask_key"
    key.write(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert MaskKey.from_file(path) == key  # the trailing newline is not part of the key
    (tmp_path / "with_spaces").write_bytes(b"  " + key.material + b"\r\n")
    assert MaskKey.from_file(tmp_path / "with_spaces") == key
    secret = b"abcdefgh12345"  # 13 bytes: too short
    (tmp_path / "short").write_bytes(secret)
    cases = [
        (tmp_path / "missing", "does not exist"),
        (tmp_path, "not a regular file"),
        (tmp_path / "short", "at least 16 bytes"),
    ]
    (tmp_path / "regular").write_bytes(b"ab" * 20)
    cases.append((tmp_path / "regular", "distinct byte values"))
    for bad, message in cases:
        with pytest.raises(InputError, match=message) as info:
            MaskKey.from_file(bad)
        assert str(bad) in str(info.value)
        assert secret.decode() not in str(info.value) and "abab" not in str(info.value)

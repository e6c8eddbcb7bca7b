"""The verifier's fast array paths give what the direct computation gives, fallbacks too.

Each fast path (a sort in two parts side by side, a presence table instead of
hashing, a per-numbering cache of the subjects with one row, a compiled majority per
group, a compiled lookup, distinct texts looked up once, a compiled ladder) is compared
with a plain reference on inputs that take it and on inputs that must fall back (values
far apart or beyond 2**53, nulls, unsigned 64-bit integers, subjects with several rows,
large groups, ties, other integer widths, non-text columns).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from geokanon.verify._arrays import (
    _single_rows,
    dense_codes,
    distinct_counts,
    distinct_values,
    positions_in,
    sort_floats,
    text_codes,
)
from geokanon.verify.counts import group_units
from geokanon.verify.leak_rules import _arrow_numeric, _Numbers, _short_range_distinct
from geokanon.verify.representation import MAX_HALVINGS, _ladder


def _hashed(arr: pa.Array) -> np.ndarray:
    """The distinct numbers of an Arrow column as the hashing path finds them."""
    return distinct_values(_arrow_numeric(pc.unique(arr)))


@pytest.mark.parametrize(
    "arr",
    [
        pa.array([5, 3, 3, None, 9, 5, 4], type=pa.int64()),
        pa.array(list(range(1000)) * 3, type=pa.int32()),
        pa.array([2**60, 2**60 + 1, 2**60 + 2, 2**60 + 2], type=pa.int64()),  # > 2**53
        pa.array([-(2**62), 0, 2**62], type=pa.int64()),  # far apart: hashed
        pa.array([None, None], type=pa.int64()),
        pa.array([1, 2, 2**64 - 1], type=pa.uint64()),  # unsigned 64-bit: hashed
        pa.array([7, 7, 250], type=pa.uint8()),
        pa.array([1.5, 2.0, None, 1.5]),  # not integers: hashed
    ],
)
def test_distinct_numbers_as_hashing_finds_them(arr: pa.Array) -> None:
    got = _Numbers(rows=_arrow_numeric(arr), arrow=arr).distinct()
    np.testing.assert_array_equal(got, _hashed(arr))
    if pa.types.is_floating(arr.type) or arr.type == pa.uint64():
        assert _short_range_distinct(arr) is None


def test_short_range_beyond_2_53_merges_as_the_cast_does() -> None:
    arr = pa.array([2**53, 2**53 + 1, 2**53 + 2], type=pa.int64())
    got = _short_range_distinct(arr)
    assert got is not None
    np.testing.assert_array_equal(got, _hashed(arr))
    assert got.size < 3  # 2**53 + 1 reads as 2**53


def _distinct_reference(ids: np.ndarray, subjects: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    for i in range(size):
        out[i] = np.unique(subjects[ids == i]).size
    return out


@pytest.mark.parametrize("repeats", [False, True])
def test_distinct_counts_with_a_numbering_at_hand(repeats: bool) -> None:
    rng = np.random.default_rng(3)
    n = 500
    subjects = rng.integers(0, 300, n) if repeats else rng.permutation(n) * 7 + 11
    dense = dense_codes(subjects)
    for _ in range(5):
        ids = rng.integers(-2, 40, n)
        got = distinct_counts(ids, subjects, 40, dense)
        np.testing.assert_array_equal(got, _distinct_reference(ids, subjects, 40))
        np.testing.assert_array_equal(got, distinct_counts(ids, subjects, 40))
    single, every = _single_rows(dense[0], dense[1])
    assert every is not repeats
    assert single is _single_rows(dense[0], dense[1])[0]  # worked out once per numbering
    other = dense[0].copy()  # another array: its own answer
    assert _single_rows(other, dense[1])[0] is not single


def test_distinct_counts_subject_alone_among_ids_but_not_overall() -> None:
    subjects = np.array([1, 1, 2, 3, 4, 5])
    ids = np.array([0, -1, 0, 0, 1, 1])
    dense = dense_codes(subjects)
    np.testing.assert_array_equal(distinct_counts(ids, subjects, 2, dense), [3, 2])
    ids = np.array([0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(distinct_counts(ids, subjects, 2, dense), [2, 3])


def _group_units_reference(
    gid: np.ndarray,
    ucode: np.ndarray,
    syn_gid: np.ndarray,
    syn_ucode: np.ndarray,
    nu: int,
    pub_gid: np.ndarray,
    pub_ucode: np.ndarray,
) -> tuple[int, np.ndarray]:
    major: dict[int, int] = {}
    for g in np.unique(gid):
        units, counts = np.unique(ucode[gid == g], return_counts=True)
        major[int(g)] = int(units[np.flatnonzero(counts == counts.max())[0]])
    wrong = sum(
        1 for g, u in zip(pub_gid.tolist(), pub_ucode.tolist(), strict=True)
        if g in major and major[g] != u
    )  # fmt: skip
    released = np.zeros(nu + 1, dtype=np.int64)
    for g in gid.tolist():
        released[major[g]] += 1
    for g in syn_gid.tolist():
        released[major.get(int(g), nu)] += 1
    return wrong, released


@pytest.mark.parametrize("seed", range(6))
def test_group_majority_units(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nu = int(rng.integers(1, 5))
    n_groups = 2 if seed % 2 else 30  # large groups (> 64 members) are sorted, not scanned
    n = 400
    gid = rng.integers(0, n_groups, n) * 5 + 2
    ucode = rng.integers(0, nu, n)
    syn_gid = np.r_[rng.integers(0, n_groups, 6) * 5 + 2, 999]  # one with no members
    syn_ucode = rng.integers(-1, nu, syn_gid.size)
    pub_gid = np.unique(np.r_[gid, 997])
    pub_ucode = rng.integers(-1, nu, pub_gid.size)
    got = group_units(gid, ucode, syn_gid, syn_ucode, nu, pub_gid, pub_ucode)
    want = _group_units_reference(gid, ucode, syn_gid, syn_ucode, nu, pub_gid, pub_ucode)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])


def test_group_majority_tie_goes_to_the_first_unit() -> None:
    gid = np.array([4, 4, 4, 4, 8, 8])
    ucode = np.array([2, 1, 1, 2, 0, 3])
    none = np.zeros(0, dtype=np.int64)
    wrong, released = group_units(gid, ucode, none, none, 4, np.array([4, 8]), np.array([1, 0]))
    assert wrong == 0
    np.testing.assert_array_equal(released, [2, 4, 0, 0, 0])
    wrong, _ = group_units(gid, ucode, none, none, 4, np.array([4, 8]), np.array([2, 3]))
    assert wrong == 2


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_positions_lookup(dtype: type) -> None:
    rng = np.random.default_rng(5)
    table = rng.permutation(200)[:120].astype(np.int64) + 3
    values = rng.integers(0, 260, 1000).astype(dtype)
    got = positions_in(table, values)
    where = {int(v): i for i, v in enumerate(table.tolist())}
    np.testing.assert_array_equal(got, [where.get(int(v), -1) for v in values.tolist()])
    extreme = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, int(table[0])])
    np.testing.assert_array_equal(positions_in(table, extreme), [-1, -1, 0])


@pytest.mark.parametrize(
    "dtype", ["str", "string", pd.ArrowDtype(pa.large_string()), object, "category"]
)
def test_text_codes_of_a_text_column(dtype: object) -> None:
    names = np.array(sorted(["a", "b", "nan", "None", "<NA>", "7"]), dtype=object)
    rng = np.random.default_rng(2)
    words = np.array(["a", "b", "c", None, "7", "nan"], dtype=object)
    texts = pd.Series(words[rng.integers(0, words.size, 6000)], dtype=dtype)
    got = text_codes(texts, names)
    # the rule row by row (a list takes the path that looks up every cell)
    want = text_codes(texts.astype(object).tolist(), names)
    np.testing.assert_array_equal(got, want)
    assert (got >= 0).any() and (got == -1).any()


def test_ladder_halves_as_the_rule_says() -> None:
    need = np.array([0.0, 0.4, 1.0, 2.0, 3.0, 7.5, 15.0, 20.0, np.nan, np.inf, -1.0])
    want = []
    for v in need.tolist():
        s = 15.0
        for _ in range(MAX_HALVINGS):
            if s * 0.5 >= v:
                s *= 0.5
        want.append(s)
    np.testing.assert_array_equal(_ladder(need, 15.0), want)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 4097])
def test_sort_in_two_parts_gives_the_sorted_values(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # the split threshold lowered, so that small arrays take the two-part path; ties,
    # signed zeros and values already in order or reversed among them
    import geokanon.verify._arrays as arrays

    rng = np.random.default_rng(n)
    v = np.round(rng.normal(0.0, 50.0, n), 1)
    if n >= 7:
        v[:3] = [0.0, -0.0, 0.0]
        v[n // 2 :] = np.sort(v[n // 2 :])[::-1]
    for least in (1 << 21, 2):
        monkeypatch.setattr(arrays, "_SORT_SPLIT_MIN", least)
        got = v.copy()
        out = sort_floats(got)
        assert out is got  # in place
        np.testing.assert_array_equal(got, np.sort(v))
        assert np.all(got[1:] >= got[:-1])


def test_sort_in_two_parts_raises_what_its_thread_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # a part the thread failed to sort would hide values from every search: the error
    # comes back to the caller instead of an array half sorted
    from concurrent.futures import Future

    import geokanon.verify._arrays as arrays

    class Failing:
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> Failing:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def submit(self, *_: object) -> Future[None]:
            done: Future[None] = Future()
            done.set_exception(MemoryError("no room to sort"))
            return done

    monkeypatch.setattr(arrays, "_SORT_SPLIT_MIN", 2)
    monkeypatch.setattr(arrays, "ThreadPoolExecutor", Failing)
    with pytest.raises(MemoryError):
        sort_floats(np.array([3.0, 1.0, 2.0, 0.5]))

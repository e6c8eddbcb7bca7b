"""Array helpers shared by the checks (dense codes, distinct counts, sorted membership)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from geokanon.verify._results import Unreadable


def is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def first_unequal(have: NDArray[np.uint8], want: NDArray[np.uint8]) -> int:
    """The first position where the bytes ``have`` and ``want`` differ (one ending first:
    its length), or -1 where they are equal."""
    if have.size == want.size and np.array_equal(have, want):
        return -1
    same = min(have.size, want.size)
    unequal = have[:same] != want[:same]
    return int(np.argmax(unequal)) if unequal.any() else same


def first_other_line(have: bytes, want: bytes) -> int | None:
    """The line (1: the first) of ``have`` where it first differs from ``want``, or None
    where the two are the same bytes: what the byte-for-byte rules name (never a value)."""
    if have == want:
        return None
    at = first_unequal(np.frombuffer(have, np.uint8), np.frombuffer(want, np.uint8))
    return have[:at].count(b"\n") + 1


def factorize_text(series: pd.Series) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """(code per row, text per code sorted): the column as ``astype(str)`` reads it."""
    codes, uniques = pd.factorize(series, sort=False, use_na_sentinel=False)
    names = pd.Index(uniques).astype(str).to_numpy(dtype=object)
    order = np.argsort(names.astype(str), kind="stable")
    names = names[order]
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    # equal texts of different values (1 and "1") share one code
    _, first = np.unique(names.astype(str), return_index=True)
    same = np.searchsorted(names[first].astype(str), names.astype(str))
    remap = first[same]
    return remap[rank[codes]].astype(np.int64), names


def text_values(series: pd.Series) -> NDArray[np.object_]:
    """The column as ``astype(str)`` reads it, an object array of texts (each distinct
    value turned into text once, by :func:`factorize_text`)."""
    codes, names = factorize_text(series)
    return names[codes] if codes.size else np.zeros(0, dtype=object)


def dict_indices(arr: pa.DictionaryArray) -> NDArray[np.int64]:
    """The codes of a dictionary array as int64, -1 for a null."""
    ind = arr.indices
    if ind.null_count:
        ind = ind.fill_null(-1)
    return np.asarray(ind.to_numpy(zero_copy_only=False), dtype=np.int64)


def arrow_text_codes(arr: pa.Array) -> tuple[NDArray[np.int64], list[str]]:
    """Dictionary codes of a text array and the text of every code (a null reads as
    pandas' ``astype(str)`` reads it: ``"None"``)."""
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    idx = dict_indices(arr)
    texts = [str(v) for v in arr.dictionary.to_pylist()]
    if (idx < 0).any():
        idx = np.where(idx < 0, len(texts), idx)
        texts.append("None")
    return idx, texts


def factorize_arrow(col: pa.ChunkedArray) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """As :func:`factorize_text`, for an Arrow column (dictionary-encoded, no Python rows)."""
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
            or pa.types.is_dictionary(col.type)):  # fmt: skip
        return factorize_text(col.to_pandas())
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    idx, texts = arrow_text_codes(arr)
    names = np.array(texts, dtype=object)
    # one code per distinct text, numbered in sorted order
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    return inverse.reshape(-1)[idx].astype(np.int64), uniq.astype(object)


def arrow_ids(col: pa.ChunkedArray, what: str) -> NDArray[np.int64]:
    """An id column as int64, nulls as -1 (as :func:`int_ids`, without pandas)."""
    import pyarrow.compute as pc

    if not pa.types.is_integer(col.type):
        return int_ids(col.to_pandas(), what)
    out = np.asarray(col.fill_null(-1).to_numpy(), dtype=np.int64)
    smallest = pc.min(col).as_py()  # of the values that are not null
    if smallest is not None and smallest < 0:
        raise Unreadable(f"{what} has negative ids")
    return out


def _bitmap(arr: pa.Array) -> NDArray[np.uint8]:
    """An array's validity bitmap as bytes (empty: no nulls); bit ``arr.offset + i`` is
    row ``i``'s."""
    buf = arr.buffers()[0]
    if arr.null_count == 0 or buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _values_of(arr: pa.Array, dtype: Any) -> NDArray[Any]:
    """A primitive array's values buffer as numpy (its rows, nulls' slots as they are)."""
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=dtype)[arr.offset : arr.offset + len(arr)]


def ids_into(arr: pa.Array, what: str, out: NDArray[np.int64]) -> None:
    """``out[:] = arrow_ids(arr, what)`` of a non-chunked id array, read from its buffers in
    one compiled pass when it is int64 (nulls -1; a negative id refused)."""
    if arr.type != pa.int64():
        out[:] = arrow_ids(pa.chunked_array([arr]), what)
        return
    if _ids_from_buffers(_values_of(arr, np.int64), _bitmap(arr), arr.offset, out):
        raise Unreadable(f"{what} has negative ids")


@nb.njit(cache=True, nogil=True)
def _ids_from_buffers(
    values: NDArray[np.int64], bits: NDArray[np.uint8], offset: int, out: NDArray[np.int64]
) -> bool:
    """``out[i] = values[i]``, -1 where bit ``offset + i`` of ``bits`` is clear (``bits``
    empty: no nulls); whether some value that is not null is negative."""
    negative = False
    with_nulls = bits.size > 0
    for i in range(values.size):
        if with_nulls and not (bits[(offset + i) >> 3] >> ((offset + i) & 7)) & 1:
            out[i] = -1
            continue
        v = values[i]
        negative = negative or v < 0
        out[i] = v
    return negative


def codes_into(arr: pa.DictionaryArray, local: NDArray[np.int64], out: NDArray[np.int64]) -> None:
    """``out[:] = local[codes]`` of a dictionary array's codes (a null's code is
    ``local[-1]``, as :func:`arrow_text_codes` numbers it), in one compiled pass when its
    codes are int32."""
    ind = arr.indices
    if ind.type != pa.int32():
        idx, _ = arrow_text_codes(arr)
        out[:] = local[idx] if idx.size else idx
        return
    _codes_from_buffers(_values_of(ind, np.int32), _bitmap(ind), ind.offset, local, out)


@nb.njit(cache=True, nogil=True)
def _codes_from_buffers(
    codes: NDArray[np.int32],
    bits: NDArray[np.uint8],
    offset: int,
    local: NDArray[np.int64],
    out: NDArray[np.int64],
) -> None:
    """``out[i] = local[codes[i]]``, ``local[-1]`` where bit ``offset + i`` of ``bits`` is
    clear (``bits`` empty: no nulls)."""
    with_nulls = bits.size > 0
    null = local[local.size - 1]
    for i in range(codes.size):
        if with_nulls and not (bits[(offset + i) >> 3] >> ((offset + i) & 7)) & 1:
            out[i] = null
        else:
            out[i] = local[codes[i]]


def renumber(codes: NDArray[np.int64], new: NDArray[np.int64]) -> None:
    """``codes[:] = new[codes]``, in place, in one compiled pass."""
    _renumber(codes, np.ascontiguousarray(new, dtype=np.int64))


@nb.njit(cache=True, nogil=True)
def _renumber(codes: NDArray[np.int64], new: NDArray[np.int64]) -> None:
    for i in range(codes.size):
        codes[i] = new[codes[i]]


def nunique(values: NDArray[Any]) -> int:
    """Distinct values of an array (by counting integers that span a short range, else by
    sorting: numpy's hashing unique is slow)."""
    if values.size == 0:
        return 0
    if values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo <= 4 * values.size + 1024:
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[values - lo] = True
            return int(np.count_nonzero(present))
    v = np.sort(values, kind="stable" if values.dtype.kind == "O" else None)
    return int(np.count_nonzero(v[1:] != v[:-1])) + 1


def sorted_distinct(values: NDArray[Any]) -> NDArray[Any]:
    """``np.unique(values)`` of an integer array, by sorting (numpy's hashing unique is far
    slower on large integer arrays)."""
    v = np.sort(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def dense_codes(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """(code per value in 0..m-1, m): values numbered in sorted order.

    Values that are already ``0..m-1``, every one present, are their own codes (the
    array itself is returned: do not change it).
    """
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * values.size + 1024 and values.dtype.kind in "iu":
        v = np.ascontiguousarray(values, dtype=np.int64)
        code, m = _dense_small(v, np.int64(lo), np.int64(hi - lo + 1))
        if code.size == 0:  # every value of lo..hi present: its offset is its code
            code = v if lo == 0 else v - lo
        return code, int(m)
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(uniq.size)


@nb.njit(cache=True, nogil=True)
def _dense_small(
    v: NDArray[np.int64], lo: np.int64, span: np.int64
) -> tuple[NDArray[np.int64], int]:
    """:func:`dense_codes` of values in ``lo .. lo + span - 1``: (codes, m), or (an empty
    array, span) when every value of the range is present (each is then its offset)."""
    code = np.zeros(span, dtype=np.int64)
    for i in range(v.size):
        code[v[i] - lo] = 1
    m = 0
    for j in range(span):
        present = code[j]
        code[j] = m
        m += present
    if m == span:
        return np.zeros(0, dtype=np.int64), m
    out = np.empty(v.size, dtype=np.int64)
    for i in range(v.size):
        out[i] = code[v[i] - lo]
    return out, m


@nb.njit(cache=True, nogil=True)
def _count_ids(ids: NDArray[np.int64], size: int) -> tuple[NDArray[np.int64], bool]:
    """(rows per id in ``0..size-1``, ids < 0 left out; whether every id is below ``size``:
    else the counts are incomplete)."""
    out = np.zeros(size, dtype=np.int64)
    for i in range(ids.size):
        d = ids[i]
        if d >= size:
            return out, False
        if d >= 0:
            out[d] += 1
    return out, True


def count_ids(ids: NDArray[np.int64], size: int) -> NDArray[np.int64]:
    """``np.bincount(ids[ids >= 0], minlength=size)`` (int64), in one compiled pass."""
    if ids.dtype == np.int64:
        out, whole = _count_ids(np.ascontiguousarray(ids), int(size))
        if whole:
            return out
    return np.bincount(ids[ids >= 0], minlength=size).astype(np.int64)


#: ``id(codes)`` -> (weak reference to ``codes``, :func:`_single_rows` of it)
_SINGLE: dict[int, tuple[weakref.ref[NDArray[np.int64]], NDArray[np.bool_], bool]] = {}


def _single_rows(codes: NDArray[np.int64], span: int) -> tuple[NDArray[np.bool_], bool]:
    """(per row, whether its code occurs in no other row; whether that holds for every
    row) of codes ``0..span-1``, kept while ``codes`` lives (it must not be changed)."""
    key = id(codes)
    hit = _SINGLE.get(key)
    if hit is not None and hit[0]() is codes and hit[1].size == codes.size:
        return hit[1], hit[2]
    tally = np.bincount(codes, minlength=span)
    every = bool(tally.size == 0 or int(tally.max()) <= 1)
    single = np.ones(codes.size, dtype=bool) if every else tally[codes] == 1

    def _forget(_ref: object, k: int = key) -> None:
        _SINGLE.pop(k, None)

    ref = weakref.ref(codes, _forget)
    _SINGLE[key] = (ref, single, every)
    return single, every


def distinct_counts(
    ids: NDArray[np.int64],
    subjects: NDArray[np.int64],
    size: int,
    dense: tuple[NDArray[np.int64], int] | None = None,
) -> NDArray[np.int64]:
    """Distinct subjects per id in ``0..size-1`` (ids < 0 ignored).

    ``dense``: ``dense_codes(subjects)`` when it is at hand (any one-to-one numbering will do).
    """
    if dense is not None:
        # whether each row's subject has no other row at all is worked out once per
        # numbering (several checks count over the same subjects); a subject with one
        # row among the ids' rows but more elsewhere takes the sorted path below
        single, every = _single_rows(dense[0], dense[1])
        if every:  # one row per subject: each row counts once where it is
            return count_ids(ids, size)
    ok = ids >= 0
    i = ids[ok]
    if i.size == 0:
        return np.zeros(size, dtype=np.int64)
    if dense is None:
        s, span = dense_codes(subjects[ok])
        once = np.bincount(s, minlength=span)[s] == 1
    else:
        s, span = dense[0][ok], dense[1]
        once = single[ok]
    # a subject with one row counts once where that row is; only the (id, subject)
    # pairs of subjects with more rows need sorting
    out = np.bincount(i[once], minlength=size).astype(np.int64)
    if not once.all():
        more = ~once
        key = np.sort(i[more] * np.int64(span) + s[more])
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        out += np.bincount(key[first] // span, minlength=size).astype(np.int64)
    return out


def argsort_stable(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.argsort(values, kind="stable")`` of integers, by one sort of int64 keys that
    hold each value (less the smallest) in the high bits and its position in the low bits.
    """
    v = np.asarray(values)
    n = v.size
    if n < 2 or v.dtype.kind not in "iu":
        return np.argsort(v, kind="stable").astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo <= 4 * n + 1024:  # a short range (group ids, codes): counted, not sorted
        return _counting_order(v.astype(np.int64, copy=False), lo, hi - lo + 1)
    shift = (n - 1).bit_length()
    if hi - lo >= 1 << (62 - shift):  # does not fit in one key
        return np.argsort(v, kind="stable").astype(np.int64)
    key = (v.astype(np.int64) - lo) << shift
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    key &= (1 << shift) - 1
    return key


@nb.njit(cache=True, nogil=True)
def _counting_order(v: NDArray[np.int64], lo: int, span: int) -> NDArray[np.int64]:
    """The stable order of ``v`` (values in ``lo .. lo + span - 1``), by counting."""
    at = np.zeros(span + 1, dtype=np.int64)
    for i in range(v.size):
        at[v[i] - lo + 1] += 1
    for j in range(span):
        at[j + 1] += at[j]
    out = np.empty(v.size, dtype=np.int64)
    for i in range(v.size):
        k = v[i] - lo
        out[at[k]] = i
        at[k] += 1
    return out


#: The bits of the NaN a missing point reads as.
_NAN_BITS = np.float64(np.nan).view(np.uint64)


@nb.njit(cache=True, nogil=True)
def _wkb_point_bits(
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    valid: NDArray[np.bool_],
    xs: NDArray[np.uint64],
    ys: NDArray[np.uint64],
    nan_bits: np.uint64,
) -> bool:
    """The x and y bits of every valid row of a WKB column whose values all are
    little-endian 2-D points (21 bytes: byte order 1, type 1 as a little-endian uint32,
    then x and y as little-endian float64); a row that is not valid reads as NaN. False
    (the arrays half filled) as soon as a valid row is anything else."""
    for i in range(xs.size):
        if not valid[i]:
            xs[i] = nan_bits
            ys[i] = nan_bits
            continue
        s = offsets[i]
        if offsets[i + 1] - s != 21 or s < 0 or s + 21 > data.size:
            return False
        if data[s] != 1 or data[s + 1] != 1 or data[s + 2] != 0 or data[s + 3] != 0:
            return False
        if data[s + 4] != 0:
            return False
        bx = np.uint64(0)
        by = np.uint64(0)
        for j in range(7, -1, -1):
            bx = (bx << np.uint64(8)) | np.uint64(data[s + 5 + j])
            by = (by << np.uint64(8)) | np.uint64(data[s + 13 + j])
        xs[i] = bx
        ys[i] = by
    return True


def wkb_points(
    offsets: NDArray[Any], data: NDArray[np.uint8], valid: NDArray[np.bool_]
) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    """(x, y) of each row of a WKB column given as its Arrow buffers (``offsets``: n + 1
    byte offsets into ``data``; ``valid``: the rows that are not null), when every valid
    row is a little-endian 2-D point; a null row reads as NaN. None: some valid row is
    another geometry, another byte order, or cut short (read it another way)."""
    n = valid.size
    if offsets.size != n + 1:
        return None
    xs = np.empty(n, dtype=np.uint64)
    ys = np.empty(n, dtype=np.uint64)
    ok = _wkb_point_bits(
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.ascontiguousarray(data, dtype=np.uint8),
        np.ascontiguousarray(valid, dtype=np.bool_),
        xs,
        ys,
        _NAN_BITS,
    )
    if not ok:
        return None
    return xs.view(np.float64), ys.view(np.float64)


@nb.njit(cache=True, nogil=True)
def _within(values: NDArray[np.int64], hi: int) -> bool:
    """Whether every value lies in ``-1 .. hi`` (-1: no id, absent, its own answer)."""
    for i in range(values.size):
        if values[i] < -1 or values[i] > hi:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _looked_up(look: NDArray[np.int64], values: NDArray[np.int64], lo: int) -> NDArray[np.int64]:
    """``look[v - lo]`` for each value ``v`` in ``lo .. lo + look.size - 1``, else -1."""
    out = np.empty(values.size, dtype=np.int64)
    span = look.size
    for i in range(values.size):
        d = values[i] - lo
        out[i] = look[d] if 0 <= d < span else -1
    return out


class IdLookup:
    """Positions in ``table`` (unique ids) of the values looked up, prepared once for many
    lookups: a table of positions when the ids span a short range and none repeats, else
    the ids sorted. When the ids are ``0 .. n-1`` in order (the writer numbers groups and
    classes so), each id is its own position: values all within are returned as they are
    (the array itself: do not change it)."""

    def __init__(self, table: NDArray[np.int64]) -> None:
        self.size = int(table.size)
        self.table = table
        self.look: NDArray[np.int64] | None = None
        self.lo = self.hi = 0
        self.order: NDArray[np.int64] | None = None
        self.sorted: NDArray[np.int64] | None = None
        self.identity = False
        if table.size == 0:
            return
        if table.dtype.kind in "iu":
            lo, hi = int(table.min()), int(table.max())
            span = hi - lo + 1
            # ids in a short range: a lookup table, unless an id repeats (then the first
            # of its rows is the answer, as below)
            if (
                span <= 4 * table.size + 1024
                and int(np.bincount(table - lo, minlength=span).max()) == 1
            ):
                look = np.full(span, -1, dtype=np.int64)
                look[table - lo] = np.arange(table.size, dtype=np.int64)
                self.look, self.lo, self.hi = look, lo, hi
                self.identity = lo == 0 and bool((look == np.arange(span)).all())

    def __call__(self, values: NDArray[np.int64]) -> NDArray[np.int64]:
        """Position of each value, -1 where it is absent."""
        if self.size == 0:
            return np.full(values.size, -1, dtype=np.int64)
        if self.look is not None and values.dtype.kind in "iu":
            if values.dtype == np.int64 and self.lo >= 0:
                if self.identity and values.size and _within(values, self.hi):
                    return values  # every id is its own position (-1: absent)
                return _looked_up(self.look, np.ascontiguousarray(values), self.lo)
            inside = (values >= self.lo) & (values <= self.hi)
            return np.where(inside, self.look[np.where(inside, values - self.lo, 0)], -1)
        if self.order is None or self.sorted is None:
            self.order = argsort_stable(self.table)
            self.sorted = self.table[self.order]
        st = self.sorted
        at = np.minimum(np.searchsorted(st, values), st.size - 1)
        return np.where(st[at] == values, self.order[at], -1).astype(np.int64)


def positions_in(table: NDArray[np.int64], values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Position of each value in ``table`` (unique ids), -1 where it is absent."""
    return IdLookup(table)(values)


def text_codes(texts: Iterable[object], names: NDArray[np.object_]) -> NDArray[np.int64]:
    """Code of each text in the sorted ``names`` (-1: not there)."""
    if (
        isinstance(texts, pd.Series)
        and len(texts) > 4096
        and texts.dtype != object
        and pd.api.types.is_string_dtype(texts.dtype)
    ):
        # a text column: the rule below applied to its distinct texts (a text's code
        # depends on it alone), then read back row by row
        rows, uniq = pd.factorize(texts, use_na_sentinel=False)
        per = text_codes(pd.Series(np.asarray(uniq, dtype=object), dtype=object), names)
        return np.asarray(per, dtype=np.int64)[rows]
    arr = pd.Series(texts if isinstance(texts, pd.Series) else list(texts), dtype=object)
    if arr.size == 0 or names.size == 0:
        return np.full(arr.size, -1, dtype=np.int64)
    look = pd.Index([str(n) for n in names.tolist()])
    # each distinct text looked up once
    codes, uniq = pd.factorize(arr.astype(str), use_na_sentinel=False)
    return np.asarray(look.get_indexer(pd.Index(uniq)), dtype=np.int64)[codes]


def int_ids(series: pd.Series, what: str) -> NDArray[np.int64]:
    try:
        v = pd.to_numeric(series, errors="raise").astype("Float64")
    except (ValueError, TypeError):
        raise Unreadable(f"{what} is not an integer column") from None
    arr = v.to_numpy(dtype=np.float64, na_value=np.nan)
    out = np.full(arr.size, -1, dtype=np.int64)
    ok = ~np.isnan(arr)
    out[ok] = arr[ok].astype(np.int64)
    if (out[ok] < 0).any():
        raise Unreadable(f"{what} has negative ids")
    return out


def sorted_finite(values: NDArray[np.float64]) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    return np.sort(v[np.isfinite(v)])


#: Float arrays at least this long are sorted in two parts side by side (:func:`sort_floats`).
_SORT_SPLIT_MIN = 1 << 21


def sort_floats(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sort a float64 array of finite values in place, and return it.

    A long array (:data:`_SORT_SPLIT_MIN`) is first split in place about its middle
    value (``ndarray.partition``: every value before the middle position is at most
    every value after it), then its two parts are sorted side by side, one on a
    thread of its own (numpy's sort runs without the GIL). The values come out in
    ascending order, as from ``ndarray.sort`` (values that compare equal, such as
    ``0.0`` and ``-0.0``, may stand in another order): 0.9 s for 2e7 source
    coordinates on two cores, against 1.4-1.6 s for one sort, and no copy. What the
    thread raises is raised here: a part left unsorted would hide values from the
    searches."""
    n = values.size
    if n < _SORT_SPLIT_MIN:
        values.sort()
        return values
    mid = n // 2
    values.partition(mid)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sort-floats") as pool:
        first = pool.submit(values[:mid].sort)
        values[mid:].sort()
        first.result()
    return values


#: Sorted float tables at least this long (the source's coordinates) are looked up
#: through a bit filter first.
_FILTER_MIN = 1 << 22
#: ``id(table)`` -> (weak reference to ``table``, its bit filter, its size)
_FILTERS: dict[int, tuple[weakref.ref[NDArray[np.float64]], NDArray[np.uint64], int]] = {}
_FILTER_LOCK = threading.Lock()
_NEG_ZERO = np.uint64(0x8000000000000000)


def _filter_of(table: NDArray[Any]) -> NDArray[np.uint64] | None:
    """The bit filter of a long sorted float64 ``table`` (made once while it lives; it
    must not be changed): 8 bits per value, two set per value in one 64-bit word (one
    memory access per value), so about 6 % of the values that are not in the table pass
    it (and are then searched for)."""
    if table.size < _FILTER_MIN or table.dtype != np.float64 or not table.flags.c_contiguous:
        return None
    key = id(table)
    hit = _FILTERS.get(key)
    if hit is None or hit[0]() is not table or hit[2] != table.size:
        with _FILTER_LOCK:  # one filter per table, whichever thread asks first
            hit = _FILTERS.get(key)
            if hit is None or hit[0]() is not table or hit[2] != table.size:
                words = 1 << max(10, (8 * table.size - 1).bit_length() - 6)
                bits = _bit_filter(table.view(np.uint64), words)

                def _forget(_ref: object, k: int = key) -> None:
                    _FILTERS.pop(k, None)

                hit = (weakref.ref(table, _forget), bits, table.size)
                _FILTERS[key] = hit
    return hit[1]


@nb.njit(cache=True, nogil=True, inline="always")
def _bit_spots(b: np.uint64, mask: np.uint64) -> tuple[np.uint64, np.uint64]:
    """(the word of a filter of ``mask + 1`` words, its two bits) a float's bit pattern
    ``b`` (-0.0 read as 0.0) sets."""
    if b == _NEG_ZERO:
        b = np.uint64(0)
    b ^= b >> np.uint64(30)
    b *= _MIX_A
    b ^= b >> np.uint64(27)
    b *= _MIX_B
    b ^= b >> np.uint64(31)
    one = np.uint64(1)
    two = (one << ((b >> np.uint64(52)) & np.uint64(63))) | (
        one << ((b >> np.uint64(58)) & np.uint64(63))
    )
    return b & mask, two


@nb.njit(cache=True, nogil=True)
def _bit_filter(table: NDArray[np.uint64], words: int) -> NDArray[np.uint64]:
    """A filter of ``words`` 64-bit words (a power of two) with two bits of one word set
    per value of ``table`` (float64 bit patterns)."""
    bits = np.zeros(words, dtype=np.uint64)
    mask = np.uint64(words - 1)
    for i in range(table.size):
        w, two = _bit_spots(table[i], mask)
        bits[w] |= two
    return bits


@nb.njit(cache=True, nogil=True)
def _member_filtered(
    table: NDArray[np.float64], bits: NDArray[np.uint64], values: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Per value: whether the sorted ``table`` holds it (``==``; NaN never), the values that
    pass its bit filter ``bits`` searched for."""
    out = np.zeros(values.size, dtype=np.bool_)
    mask = np.uint64(bits.size - 1)
    vb = values.view(np.uint64)
    n = table.size
    for i in range(values.size):
        v = values[i]
        if v != v:
            continue
        w, two = _bit_spots(vb[i], mask)
        if bits[w] & two != two:
            continue
        at = _first_not_below(table, v, 0, n)
        out[i] = at < n and table[at] == v
    return out


@nb.njit(cache=True, nogil=True, inline="always")
def _first_not_below(table: NDArray[Any], v: Any, lo: int, hi: int) -> int:
    """The first place in ``lo .. hi`` of the sorted ``table`` whose value is not below
    ``v`` (``hi``: none), by bisection."""
    while lo < hi:
        mid = (lo + hi) // 2
        if table[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def in_sorted(table: NDArray[Any], values: NDArray[Any]) -> NDArray[np.bool_]:
    """Exact membership of ``values`` in the sorted array ``table``."""
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    bits = _filter_of(table) if values.dtype == np.float64 else None
    if bits is not None:
        return _member_filtered(table, bits, np.ascontiguousarray(values))
    i = np.searchsorted(table, values)
    np.minimum(i, table.size - 1, out=i)
    return np.asarray(table[i] == values, dtype=bool)


def near_sorted(table: NDArray[np.float64], values: NDArray[Any], band: float) -> NDArray[np.bool_]:
    """Whether each of ``values`` has a value of the sorted array ``table`` within
    ``band`` of it (:func:`in_sorted` within a tolerance)."""
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    at = np.searchsorted(table, values - band, side="left")
    inside = at < table.size
    got = np.zeros(values.size, dtype=bool)
    got[inside] = table[at[inside]] <= values[inside] + band
    return got


def in_sorted_ascending(table: NDArray[Any], values: NDArray[Any]) -> NDArray[np.bool_]:
    """:func:`in_sorted` of ``values`` that are sorted too (NaN last, as ``np.sort`` puts
    it): one merge-like compiled pass that gallops through ``table`` from the last value's
    place, so many values cost little more than a few."""
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    if values.dtype == np.float64 and _filter_of(table) is not None:
        return in_sorted(table, values)
    kind = table.dtype.kind + values.dtype.kind
    if kind == "ff":
        dtype: Any = np.float64
    elif kind in ("ii", "iu", "ui", "uu") and table.dtype == values.dtype == np.int64:
        dtype = np.int64
    else:
        return in_sorted(table, values)
    return _member_ascending(
        np.ascontiguousarray(table, dtype=dtype), np.ascontiguousarray(values, dtype=dtype)
    )


@nb.njit(cache=True, nogil=True)
def _member_ascending(table: NDArray[Any], values: NDArray[Any]) -> NDArray[np.bool_]:
    """Per value of the ascending ``values``: whether the ascending ``table`` holds it."""
    n = table.size
    out = np.zeros(values.size, dtype=np.bool_)
    lo = 0
    for i in range(values.size):
        if lo >= n:
            break
        v = values[i]
        if table[lo] >= v:
            pos = lo
        else:  # table[lo] < v: gallop, then bisect, for the first place >= v
            prev = lo
            step = 1
            cur = lo + 1
            while cur < n and table[cur] < v:
                prev = cur
                step *= 2
                cur = prev + step
            pos = _first_not_below(table, v, prev + 1, min(cur, n))
        lo = pos
        out[i] = pos < n and table[pos] == v
    return out


def distinct_values(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sorted distinct finite values."""
    v = sorted_finite(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def isin(values: NDArray[Any], table: NDArray[Any]) -> NDArray[np.bool_]:
    """Membership of every value in the sorted array ``table`` (NaN is never a member).

    The distinct values are looked up (a sort, then a merge-like search), and only
    the values found are matched back to the rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    if values.size <= 4096 or _filter_of(table) is not None:
        return in_sorted(table, values)
    uq = distinct_values(values)
    found = uq[in_sorted_ascending(table, uq)]
    if found.size == 0:
        return np.zeros(values.size, dtype=bool)
    return in_sorted(found, values)


def same_values(a: NDArray[np.float64], b: NDArray[np.float64]) -> bool:
    """``np.array_equal(a, b, equal_nan=True)`` of two float arrays, in one compiled pass."""
    if a.shape != b.shape or a.dtype != np.float64 or b.dtype != np.float64:
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(_same_values(np.ascontiguousarray(a), np.ascontiguousarray(b)))


@nb.njit(cache=True, nogil=True)
def _same_values(a: NDArray[np.float64], b: NDArray[np.float64]) -> bool:
    for i in range(a.size):
        if a[i] != b[i] and not (a[i] != a[i] and b[i] != b[i]):
            return False
    return True


def finite_extent(x: NDArray[np.float64], y: NDArray[np.float64]) -> list[float] | None:
    """[xmin, ymin, xmax, ymax] of the rows where both ``x`` and ``y`` are finite (None:
    no such row), in one compiled pass."""
    found, x0, y0, x1, y1 = _finite_extent(
        np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64)
    )
    return [float(x0), float(y0), float(x1), float(y1)] if found else None


@nb.njit(cache=True, nogil=True)
def _finite_extent(
    x: NDArray[np.float64], y: NDArray[np.float64]
) -> tuple[bool, float, float, float, float]:
    found = False
    x0 = y0 = np.inf
    x1 = y1 = -np.inf
    for i in range(min(x.size, y.size)):
        if np.isfinite(x[i]) and np.isfinite(y[i]):
            found = True
            x0 = min(x0, x[i])
            y0 = min(y0, y[i])
            x1 = max(x1, x[i])
            y1 = max(y1, y[i])
    return found, x0, y0, x1, y1


def np_bool(arr: Any) -> NDArray[np.bool_]:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def value_counts(ids: NDArray[np.int64]) -> pd.Series:
    """Rows per id (int64 index, sorted): by counting when the ids are dense, else by sorting."""
    ids = ids.astype(np.int64, copy=False)
    lo = int(ids.min()) if ids.size else 0
    if ids.size and int(ids.max()) - lo <= 4 * ids.size + 1024:
        tally = np.bincount(ids - lo)
        uniq = np.flatnonzero(tally) + lo
        counts = tally[uniq - lo]
    else:
        uniq, counts = np.unique(ids, return_counts=True)
    return pd.Series(counts.astype(np.int64), index=pd.Index(uniq.astype(np.int64)))


# ---- keyed hashes of values, and order-free sums of them (the records files' checks)

_U64 = np.uint64
_MIX_A = _U64(0xBF58476D1CE4E5B9)
_MIX_B = _U64(0x94D049BB133111EB)
_EXP = _U64(0x7FF0000000000000)
_MANT = _U64(0x000FFFFFFFFFFFFF)


@nb.njit(cache=True, nogil=True)
def _mix_kernel(
    v: NDArray[np.uint64], salt: np.uint64, nan_bits: np.uint64, floats: bool
) -> NDArray[np.uint64]:
    """splitmix64's finaliser of ``v ^ salt``, element by element (uint64 arithmetic wraps);
    ``floats``: ``v`` holds float64 bits, and every NaN is first the one NaN ``nan_bits``."""
    out = np.empty(v.size, dtype=np.uint64)
    for i in range(v.size):
        out[i] = _mix_one(v[i], salt, nan_bits, floats)
    return out


@nb.njit(cache=True, nogil=True, inline="always")
def _mix_one(x: np.uint64, salt: np.uint64, nan_bits: np.uint64, floats: bool) -> np.uint64:
    """:func:`_mix_kernel` of one value."""
    if floats and (x & _EXP) == _EXP and (x & _MANT) != np.uint64(0):
        x = nan_bits
    x ^= salt
    x ^= x >> np.uint64(30)
    x *= _MIX_A
    x ^= x >> np.uint64(27)
    x *= _MIX_B
    x ^= x >> np.uint64(31)
    return x


@nb.njit(cache=True, nogil=True)
def _tied_mix(
    v: NDArray[np.uint64],
    salt: np.uint64,
    nan_bits: np.uint64,
    floats: bool,
    valid: NDArray[np.bool_],
    null: np.uint64,
    positions: NDArray[np.uint64],
) -> np.uint64:
    """The sum of ``_mix_one(v[i]) * positions[i]`` (``null`` for a row ``valid`` marks
    as not valid, when given), modulo 2**64: hashed and tied without an array of hashes."""
    total = np.uint64(0)
    some_null = valid.size > 0
    for i in range(v.size):
        h = null if some_null and not valid[i] else _mix_one(v[i], salt, nan_bits, floats)
        total += h * positions[i]
    return total


_NO_SALT = _U64(0)
_NO_BOOLS = np.zeros(0, dtype=np.bool_)


def _mix(v: NDArray[np.uint64], salt: np.uint64 = _NO_SALT) -> NDArray[np.uint64]:
    """splitmix64's finaliser of ``v ^ salt``, element-wise, in one compiled pass."""
    return _mix_kernel(np.ascontiguousarray(v, dtype=np.uint64), _U64(salt), _NAN_BITS, False)


def _mix_floats(f: NDArray[np.float64], salt: np.uint64) -> NDArray[np.uint64]:
    """:func:`_mix` of the bits of ``f``, every NaN (and so every null) one NaN."""
    bits = np.ascontiguousarray(f, dtype=np.float64).view(np.uint64)
    return _mix_kernel(bits, _U64(salt), _NAN_BITS, True)


def _storage_ints(arr: pa.Array, wide: pa.DataType) -> pa.Array:
    """An integer, boolean or temporal column as the integers ``wide``; a temporal one by
    the integers it stores (pyarrow casts no ``date32`` to ``int64``: days since 1970)."""
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_temporal(t):
        arr = arr.view(pa.int32() if t.bit_width == 32 else pa.int64())
    return pc.cast(arr, wide)


class RowHasher:
    """Keyed 64-bit hashes of values, drawn afresh for every verification, so a release
    cannot be made to collide with them.

    Equal values of one Arrow type hash equally whatever their encoding (plain or
    dictionary text, ``string`` or ``large_string``); a float's null and NaN hash alike
    (a CSV cannot tell them apart).
    """

    def __init__(self) -> None:
        import secrets

        self.key = secrets.token_hex(8)  # pandas' SipHash key: 16 characters
        self.salt = [_U64(secrets.randbits(64)) for _ in range(5)]

    def values(self, arr: pa.Array | pa.ChunkedArray) -> NDArray[np.uint64]:
        """One hash per value of ``arr``."""
        import pyarrow.compute as pc

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        t = arr.type
        null = self.salt[0]
        if pa.types.is_dictionary(t):
            look = np.append(self.values(arr.dictionary), null)
            idx = dict_indices(arr)
            return look[np.where(idx < 0, look.size - 1, idx)]
        if pa.types.is_floating(t):
            f = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
            return _mix_floats(f, self.salt[1])  # one NaN, and a null is a NaN
        if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
            wide = pa.uint64() if pa.types.is_uint64(t) else pa.int64()
            ints = _storage_ints(arr, wide).fill_null(0)
            v = np.asarray(ints.to_numpy(zero_copy_only=False)).view(np.uint64)
            h = _mix(v, self.salt[2])
            if arr.null_count:
                h[~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)] = null
            return h
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            try:
                arr = pc.cast(arr, pa.large_string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                text = pd.Series(arr.to_pylist(), dtype=object).map(repr)
                arr = pa.array(text.to_numpy(dtype=object), type=pa.large_string())
        if len(arr) == 0:
            return np.zeros(0, dtype=np.uint64)
        enc = arr.dictionary_encode()
        words = np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
        look = np.asarray(pd.util.hash_array(words, hash_key=self.key, categorize=False))
        look = np.append(look.astype(np.uint64) ^ self.salt[3], null)
        idx = dict_indices(enc)
        return look[np.where(idx < 0, look.size - 1, idx)]

    def values_tied_sum(
        self, arr: pa.Array | pa.ChunkedArray, positions: NDArray[np.uint64]
    ) -> int:
        """``tied_sum(values(arr), positions)``, for numbers and dictionary text in one
        compiled pass (no array of the hashes)."""
        import pyarrow.compute as pc

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        t = arr.type
        at = np.ascontiguousarray(positions)
        if pa.types.is_dictionary(t):
            look = self.values(arr.dictionary)
            return self.tied_sum_coded(look, dict_indices(arr), self.salt[0], at)
        if pa.types.is_floating(t):  # one NaN, and a null is a NaN (as values hashes them)
            f = np.ascontiguousarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False))
            bits = f.view(np.uint64)
            return int(_tied_mix(bits, self.salt[1], _NAN_BITS, True, _NO_BOOLS, _NO_SALT, at))
        if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
            wide = pa.uint64() if pa.types.is_uint64(t) else pa.int64()
            ints = _storage_ints(arr, wide).fill_null(0)
            v = np.ascontiguousarray(
                np.asarray(ints.to_numpy(zero_copy_only=False)).view(np.uint64)
            )
            valid = _NO_BOOLS
            if arr.null_count:
                valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
            return int(_tied_mix(v, self.salt[2], _NAN_BITS, False, valid, self.salt[0], at))
        return self.tied_sum(self.values(arr), at)

    def ids_tied_sum(self, ids: NDArray[np.int64], positions: NDArray[np.uint64]) -> int:
        """:meth:`values_tied_sum` of a signed integer id column (not ``uint64``) read by
        :func:`arrow_ids` (nulls -1, no other value negative), from those ids."""
        v = np.ascontiguousarray(ids, dtype=np.int64).view(np.uint64)
        at = np.ascontiguousarray(positions)
        return int(_tied_mix_ids(v, self.salt[2], self.salt[0], at))

    def rows(self, columns: Sequence[NDArray[np.uint64]], n: int) -> NDArray[np.uint64]:
        """One hash per row of the columns' value hashes, in column order."""
        h = np.full(n, self.salt[4], dtype=np.uint64)
        for c in columns:
            h = _mix(h ^ c)
        return h

    def positions(self, start: int, n: int) -> NDArray[np.uint64]:
        """Odd hashes of the row numbers ``start .. start + n - 1`` (for :meth:`at`)."""
        return _mix(np.arange(start, start + n, dtype=np.uint64), self.salt[1]) | _U64(1)

    def at(self, values: NDArray[np.uint64], positions: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """The hashes tied to their rows (``positions``: :meth:`positions` of them): times an
        odd number, a bijection modulo 2**64, so a changed value always changes the sum."""
        return values * positions

    def tied_sum(self, values: NDArray[np.uint64], positions: NDArray[np.uint64]) -> int:
        """``sum_u64(self.at(values, positions))`` in one compiled pass (no array of the
        products)."""
        return int(_tied_sum(np.ascontiguousarray(values), np.ascontiguousarray(positions)))

    def tied_sum_coded(
        self,
        look: NDArray[np.uint64],
        codes: NDArray[np.int64],
        null: np.uint64,
        positions: NDArray[np.uint64],
    ) -> int:
        """:meth:`tied_sum` of ``look[codes]`` (``null`` where a code is -1), not gathered."""
        if look.size == 0 or codes.size == 0 or codes.max() >= look.size or codes.min() < -1:
            full = np.append(look, null)
            return self.tied_sum(full[np.where(codes < 0, full.size - 1, codes)], positions)
        return int(
            _tied_sum_coded(
                np.ascontiguousarray(look),
                np.ascontiguousarray(codes, dtype=np.int64),
                _U64(null),
                np.ascontiguousarray(positions),
            )
        )

    def keyed(self, values: NDArray[np.uint64], keys: NDArray[np.int64]) -> NDArray[np.uint64]:
        """The hashes tied to their group or class keys."""
        return _mix(values ^ _mix(keys.astype(np.uint64), self.salt[2]))


@nb.njit(cache=True, nogil=True)
def _tied_sum(values: NDArray[np.uint64], positions: NDArray[np.uint64]) -> np.uint64:
    total = np.uint64(0)
    for i in range(values.size):
        total += values[i] * positions[i]
    return total


@nb.njit(cache=True, nogil=True)
def _tied_sum_coded(
    look: NDArray[np.uint64],
    codes: NDArray[np.int64],
    null: np.uint64,
    positions: NDArray[np.uint64],
) -> np.uint64:
    total = np.uint64(0)
    for i in range(codes.size):
        c = codes[i]
        total += (null if c < 0 else look[c]) * positions[i]
    return total


@nb.njit(cache=True, nogil=True)
def _tied_mix_ids(
    v: NDArray[np.uint64], salt: np.uint64, null: np.uint64, positions: NDArray[np.uint64]
) -> np.uint64:
    """:func:`_tied_mix` of ids whose null is -1 (all ones): that row hashes as ``null``."""
    total = np.uint64(0)
    none = ~np.uint64(0)
    for i in range(v.size):
        h = null if v[i] == none else _mix_one(v[i], salt, _NAN_BITS, False)
        total += h * positions[i]
    return total


def sum_u64(values: NDArray[np.uint64]) -> int:
    """The sum of ``values`` modulo 2**64."""
    return int(np.sum(values, dtype=np.uint64)) if values.size else 0


def sums_per(keys: NDArray[np.int64], values: NDArray[np.uint64], size: int) -> NDArray[np.uint64]:
    """Per key in ``0..size-1``, the sum of ``values`` modulo 2**64 (keys < 0 left out): an
    order-free hash of each key's multiset of values (``np.add.at`` wraps uint64 sums)."""
    ok = keys >= 0
    k, v = (keys, values) if ok.all() else (keys[ok], values[ok])
    out = np.zeros(size, dtype=np.uint64)
    np.add.at(out, k, v)
    return out


def value_runs(values: NDArray[Any]) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """(distinct values, how often each occurs) of a sorted array."""
    if values.size == 0:
        return values, np.zeros(0, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[first], np.diff(np.r_[first, values.size]).astype(np.int64)


#: Records per chunk when the report sample's hash is computed (bounded temporaries).
_SAMPLE_CHUNK = 1 << 20


def sample_hash(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.uint64]:
    """The hash of each record's working coordinates that picks the report sample's
    records outside the sampled groups (``docs/release-format.md``, "The report
    sample"): ``h = a * 0x9E3779B97F4A7C15 ^ (b + 0x632BE59BD9B4E019)`` of the
    coordinates' float64 bit patterns ``a``, ``b``, then ``h ^= h >> 31``,
    ``h *= 0xBF58476D1CE4E5B9``, ``h ^= h >> 29`` (modulo 2**64). Written here from the
    format's statement, not imported from the writer."""
    with np.errstate(over="ignore"):
        a = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
        b = np.ascontiguousarray(y, dtype=np.float64).view(np.uint64)
        h = (a * np.uint64(0x9E3779B97F4A7C15)) ^ (b + np.uint64(0x632BE59BD9B4E019))
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(29)
    return h


def sample_records(
    gid: NDArray[np.int64], x: NDArray[np.float64], y: NDArray[np.float64], every: int
) -> int:
    """How many of these audit rows the report sample of 1 in ``every`` holds: the members
    of groups whose id is a multiple of ``every``, and the records in no group (``gid``
    < 0) whose :func:`sample_hash` is a multiple of ``every``."""
    n = 0
    m = np.uint64(every)
    for a in range(0, gid.size, _SAMPLE_CHUNK):
        g = gid[a : a + _SAMPLE_CHUNK]
        in_group = g >= 0
        n += int(np.count_nonzero(in_group & (g % every == 0)))
        out = ~in_group
        if out.any():
            h = sample_hash(x[a : a + _SAMPLE_CHUNK][out], y[a : a + _SAMPLE_CHUNK][out])
            n += int(np.count_nonzero(h % m == 0))
    return n

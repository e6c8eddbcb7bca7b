"""Array helpers shared by the checks (dense codes, distinct counts, sorted membership)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from geokanon.verify._results import _Unreadable


def _is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def _factorize_text(series: pd.Series) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
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


def _indices(arr: pa.DictionaryArray) -> NDArray[np.int64]:
    """The codes of a dictionary array as int64, -1 for a null."""
    ind = arr.indices
    if ind.null_count:
        ind = ind.fill_null(-1)
    return np.asarray(ind.to_numpy(zero_copy_only=False), dtype=np.int64)


def _arrow_text_codes(arr: pa.Array) -> tuple[NDArray[np.int64], list[str]]:
    """Dictionary codes of a text array and the text of every code (a null reads as
    pandas' ``astype(str)`` reads it: ``"None"``)."""
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    idx = _indices(arr)
    texts = [str(v) for v in arr.dictionary.to_pylist()]
    if (idx < 0).any():
        idx = np.where(idx < 0, len(texts), idx)
        texts.append("None")
    return idx, texts


def _factorize_arrow(col: pa.ChunkedArray) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """As :func:`_factorize_text`, for an Arrow column (dictionary-encoded, no Python rows)."""
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
            or pa.types.is_dictionary(col.type)):  # fmt: skip
        return _factorize_text(col.to_pandas())
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    idx, texts = _arrow_text_codes(arr)
    names = np.array(texts, dtype=object)
    # one code per distinct text, numbered in sorted order
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    return inverse.reshape(-1)[idx].astype(np.int64), uniq.astype(object)


def _arrow_ids(col: pa.ChunkedArray, what: str) -> NDArray[np.int64]:
    """An id column as int64, nulls as -1 (as :func:`_ids`, without pandas)."""
    import pyarrow.compute as pc

    if not pa.types.is_integer(col.type):
        return _ids(col.to_pandas(), what)
    out = np.asarray(col.fill_null(-1).to_numpy(), dtype=np.int64)
    smallest = pc.min(col).as_py()  # of the values that are not null
    if smallest is not None and smallest < 0:
        raise _Unreadable(f"{what} has negative ids")
    return out


def _nunique(values: NDArray[Any]) -> int:
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


def _sorted_distinct(values: NDArray[Any]) -> NDArray[Any]:
    """``np.unique(values)`` of an integer array, by sorting (numpy's hashing unique is far
    slower on large integer arrays)."""
    v = np.sort(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def _dense(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """(code per value in 0..m-1, m): values numbered in sorted order."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * values.size + 1024:
        at = values - lo if lo else values
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[at] = True
        code = np.cumsum(present, dtype=np.int64)
        code -= 1
        return code[at], int(code[-1]) + 1
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(uniq.size)


def _distinct_counts(
    ids: NDArray[np.int64],
    subjects: NDArray[np.int64],
    size: int,
    dense: tuple[NDArray[np.int64], int] | None = None,
) -> NDArray[np.int64]:
    """Distinct subjects per id in ``0..size-1`` (ids < 0 ignored).

    ``dense``: ``_dense(subjects)`` when it is at hand (any one-to-one numbering will do).
    """
    ok = ids >= 0
    i = ids[ok]
    if i.size == 0:
        return np.zeros(size, dtype=np.int64)
    if dense is None:
        s, span = _dense(subjects[ok])
    else:
        s, span = dense[0][ok], dense[1]
    # a subject with one row counts once where that row is; only the (id, subject)
    # pairs of subjects with more rows need sorting
    once = np.bincount(s, minlength=span)[s] == 1
    out = np.bincount(i[once], minlength=size).astype(np.int64)
    if not once.all():
        more = ~once
        key = np.sort(i[more] * np.int64(span) + s[more])
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        out += np.bincount(key[first] // span, minlength=size).astype(np.int64)
    return out


def _argsort_stable(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.argsort(values, kind="stable")`` of integers, by one sort of int64 keys that
    hold each value (less the smallest) in the high bits and its position in the low bits.
    """
    v = np.asarray(values)
    n = v.size
    if n < 2 or v.dtype.kind not in "iu":
        return np.argsort(v, kind="stable").astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    shift = (n - 1).bit_length()
    if hi - lo >= 1 << (62 - shift):  # does not fit in one key
        return np.argsort(v, kind="stable").astype(np.int64)
    key = (v.astype(np.int64) - lo) << shift
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    key &= (1 << shift) - 1
    return key


def _positions(table: NDArray[np.int64], values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Position of each value in ``table`` (unique ids), -1 where it is absent."""
    if table.size == 0:
        return np.full(values.size, -1, dtype=np.int64)
    if table.dtype.kind in "iu" and values.dtype.kind in "iu":
        lo, hi = int(table.min()), int(table.max())
        span = hi - lo + 1
        if span <= 4 * table.size + 1024:
            # ids in a short range: a lookup table, unless an id repeats (then the
            # first of its rows is the answer, as below)
            if int(np.bincount(table - lo, minlength=span).max()) == 1:
                look = np.full(span, -1, dtype=np.int64)
                look[table - lo] = np.arange(table.size, dtype=np.int64)
                inside = (values >= lo) & (values <= hi)
                return np.where(inside, look[np.where(inside, values - lo, 0)], -1)
    order = _argsort_stable(table)
    st = table[order]
    at = np.minimum(np.searchsorted(st, values), st.size - 1)
    return np.where(st[at] == values, order[at], -1).astype(np.int64)


def _text_codes(texts: Iterable[object], names: NDArray[np.object_]) -> NDArray[np.int64]:
    """Code of each text in the sorted ``names`` (-1: not there)."""
    arr = pd.Series(texts if isinstance(texts, pd.Series) else list(texts), dtype=object)
    if arr.size == 0 or names.size == 0:
        return np.full(arr.size, -1, dtype=np.int64)
    look = pd.Index([str(n) for n in names.tolist()])
    # each distinct text looked up once
    codes, uniq = pd.factorize(arr.astype(str), use_na_sentinel=False)
    return np.asarray(look.get_indexer(pd.Index(uniq)), dtype=np.int64)[codes]


def _ids(series: pd.Series, what: str) -> NDArray[np.int64]:
    try:
        v = pd.to_numeric(series, errors="raise").astype("Float64")
    except (ValueError, TypeError):
        raise _Unreadable(f"{what} is not an integer column") from None
    arr = v.to_numpy(dtype=np.float64, na_value=np.nan)
    out = np.full(arr.size, -1, dtype=np.int64)
    ok = ~np.isnan(arr)
    out[ok] = arr[ok].astype(np.int64)
    if (out[ok] < 0).any():
        raise _Unreadable(f"{what} has negative ids")
    return out


def _sorted_finite(values: NDArray[np.float64]) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    return np.sort(v[np.isfinite(v)])


def _in_sorted(table: NDArray[Any], values: NDArray[Any]) -> NDArray[np.bool_]:
    """Exact membership of ``values`` in the sorted array ``table``."""
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    i = np.searchsorted(table, values)
    np.minimum(i, table.size - 1, out=i)
    return np.asarray(table[i] == values, dtype=bool)


def _distinct(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sorted distinct finite values."""
    v = _sorted_finite(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def _isin(values: NDArray[Any], table: NDArray[Any]) -> NDArray[np.bool_]:
    """Membership of every value in the sorted array ``table`` (NaN is never a member).

    The distinct values are looked up (a sort, then a merge-like search), and only
    the values found are matched back to the rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    if values.size <= 4096:
        return _in_sorted(table, values)
    uq = _distinct(values)
    found = uq[_in_sorted(table, uq)]
    if found.size == 0:
        return np.zeros(values.size, dtype=bool)
    return _in_sorted(found, values)


def _np_bool(arr: Any) -> NDArray[np.bool_]:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _value_counts(ids: NDArray[np.int64]) -> pd.Series:
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

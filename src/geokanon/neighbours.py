"""Exact distinct-subject neighbour distances, in space and in time.

``d_j(p)`` is the distance from record ``p`` to the ``j``-th nearest *other
subject*, where the distance to a subject is the distance to that subject's
nearest record. Records of ``p``'s own subject never count, so a "group of
five" that is one person five times is never mistaken for a crowd.

The spatial search is a multi-level cell grid compiled with numba. The points are
sorted once along a Z-order (Morton) curve of fine cells of side ``c0``; a cell of
level ``j`` (side ``c0 * 2**j``) is then one contiguous run of that order, so every
level shares the one sort. Records are processed a cell at a time: the records of
one cell scan the 3 x 3 block of cells around it, and a record is resolved at the
first level where either its ``k-1`` nearest other subjects are no farther than
the exact distance to the outside of the block (so nothing outside can be nearer),
or the block already contains the whole disc of radius ``max_distance``; the rest
move up one level. Records in dense towns are resolved at level 0; rural records
move up a few coarser levels. Every answer is exact: the stopping rule compares
the candidate distance with the exact distance to the edge of the block, minus a
margin far above any rounding, and the cell size only affects the speed.

Distances are computed as ``sqrt(dx*dx + dy*dy)`` in float64, the same
arithmetic as :class:`scipy.spatial.cKDTree` with ``p=2``, so labels derived
from them match a cKDTree-based rule bit for bit.

With times, :func:`subject_spacetime_ratios` measures space and time together:
the ratio between two records is ``max(distance / r_max, gap / t_max)`` (gaps on
a 24-hour clock wrap), and a record's ratio to a subject is the smallest over
that subject's records. Its search is the same idea in three dimensions: cells
of side ``h * 2**j`` in units of ``(r_max, t_max)`` (one sort of the points per
level, row-major keys, the time slots wrapping with the clock), the 3 x 3 x 3
block around each record's cell, and a record resolved when its ``k-1``-th
ratio is no larger than the exact combined distance to the outside of the
block. The spatial part of the ratio uses the arithmetic above, so where every
gap is within ``t_max`` a ratio above 1 is the spatial ratio exactly.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon.errors import InputError

__all__ = [
    "cell_values",
    "cells_around",
    "count_distinct",
    "factorize_subject_ids",
    "in_sorted",
    "integer_codes",
    "is_dense_codes",
    "maybe_repeated",
    "normalise_subject_id",
    "pack_key",
    "sorted_unique",
    "stable_argsort",
    "subject_codes",
    "subject_neighbour_distances",
    "subject_spacetime_ratios",
    "unpack_key",
]

#: Offset that keeps cell indices non-negative in a packed cell key.
_KEY_BIAS = 1 << 30


def pack_key(ix: ArrayLike, iy: ArrayLike) -> NDArray[np.int64]:
    """Pack a cell's column and row (each in ``[-2**30, 2**30)``) into one int64 key.

    Examples
    --------
    >>> unpack_key(pack_key(np.array([-3]), np.array([7])))
    (array([-3]), array([7]))
    """
    return ((np.asarray(ix, np.int64) + _KEY_BIAS) << 31) | (np.asarray(iy, np.int64) + _KEY_BIAS)


def unpack_key(key: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Inverse of :func:`pack_key`."""
    k = np.asarray(key, np.int64)
    return (k >> 31) - _KEY_BIAS, (k & ((1 << 31) - 1)) - _KEY_BIAS


def in_sorted(values: ArrayLike, ref: ArrayLike) -> NDArray[np.bool_]:
    """``np.isin(values, ref)`` for a sorted ``ref``, by binary search (``values`` unsorted,
    no temporaries beyond the result's size).

    Examples
    --------
    >>> in_sorted(np.array([5, 1, 9]), np.array([1, 2, 5])).tolist()
    [True, True, False]
    """
    v = np.asarray(values)
    r = np.asarray(ref)
    if r.size == 0:
        return np.zeros(v.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(r, v), r.size - 1)
    return r[pos] == v


def cell_values(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    idx: NDArray[np.integer] | None,
    origin: tuple[float, float],
    side: float,
    keys: NDArray[np.int64],
    values: NDArray[np.uint8],
) -> NDArray[np.uint8]:
    """Per point ``idx`` (``None``: every point), the value of its cell among the sorted,
    distinct ``keys``, 0 for a cell not among them.

    A point's cell is ``pack_key(floor((x - ox) / side), floor((y - oy) / side))``. By a
    table over the keys' bounding box, in one compiled pass, when that box is not much
    larger than the points (a binary search of every point's key costs about 1 s per
    1e7 points); else by :func:`in_sorted`, in chunks.

    Examples
    --------
    >>> keys = pack_key(np.array([0, 2]), np.array([0, 0]))
    >>> cell_values(np.array([0.5, 1.5, 2.5]), np.zeros(3), None, (0.0, 0.0), 1.0, keys,
    ...             np.array([7, 9], dtype=np.uint8)).tolist()
    [7, 0, 9]
    """
    ox, oy = origin
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    ia = np.arange(0)
    if idx is not None:  # int32 indices stay narrow (no int64 copy of them)
        narrow = np.asarray(idx).dtype in (np.int32, np.int64)
        ia = np.ascontiguousarray(idx, dtype=None if narrow else np.int64)
    n = xa.size if idx is None else ia.size
    out = np.zeros(n, dtype=np.uint8)
    if keys.size == 0 or n == 0:
        return out
    kx, ky = unpack_key(keys)
    x0, y0 = int(kx.min()), int(ky.min())
    w, h = int(kx.max()) - x0 + 1, int(ky.max()) - y0 + 1
    if w * h <= 4 * n + (1 << 20):
        table = np.zeros((w, h), dtype=np.uint8)
        table[kx - x0, ky - y0] = values
        _table_lookup(xa, ya, ia, idx is None, ox, oy, side, x0, y0, table, out)
        return out
    chunk = 1 << 20
    for a in range(0, n, chunk):
        sel = np.arange(a, min(n, a + chunk)) if idx is None else ia[a : a + chunk]
        cells = pack_key(np.floor((xa[sel] - ox) / side), np.floor((ya[sel] - oy) / side))
        pos = np.minimum(np.searchsorted(keys, cells), keys.size - 1)
        out[a : a + chunk] = np.where(keys[pos] == cells, values[pos], 0)
    return out


@nb.njit(cache=True, parallel=True)
def _table_lookup(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    idx: NDArray[np.integer],
    every: bool,
    ox: float,
    oy: float,
    side: float,
    x0: int,
    y0: int,
    table: NDArray[np.uint8],
    out: NDArray[np.uint8],
) -> None:  # pragma: no cover - compiled
    """:func:`cell_values` by the table (row ``floor((x - ox) / side) - x0``, ...)."""
    w, h = table.shape
    for t in nb.prange(out.size):
        i = np.int64(t)
        if not every:
            i = idx[t]
        cx = np.floor((x[i] - ox) / side) - x0
        cy = np.floor((y[i] - oy) / side) - y0
        if 0 <= cx < w and 0 <= cy < h:
            out[t] = table[int(cx), int(cy)]


def cells_around(keys: ArrayLike, width: int) -> NDArray[np.int64]:
    """Sorted distinct keys of every cell within ``width`` cells (in x and y) of ``keys``.

    Examples
    --------
    >>> k = cells_around(pack_key(np.array([0]), np.array([0])), 1)
    >>> k.size, sorted(unpack_key(k)[0].tolist())[:3]
    (9, [-1, -1, -1])
    """
    cx, cy = unpack_key(sorted_unique(np.asarray(keys, np.int64)))
    d = np.arange(-width, width + 1)
    dx, dy = np.meshgrid(d, d)
    return sorted_unique(
        pack_key((cx[:, None] + dx.ravel()).ravel(), (cy[:, None] + dy.ravel()).ravel())
    )


def sorted_unique(values: ArrayLike) -> NDArray[Any]:
    """``np.unique(values)`` of integers, by one sort.

    numpy 2's ``np.unique`` hashes when it returns only the values, which is many
    times slower than sorting on large integer arrays.

    Examples
    --------
    >>> sorted_unique(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    """
    v = np.sort(np.asarray(values))
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def stable_argsort(values: ArrayLike) -> NDArray[np.int64]:
    """``np.argsort(values, kind="stable")`` of integers, by a compiled radix sort.

    The values less the smallest are sorted 8 bits at a time, lowest byte first
    (a least-significant-digit radix sort, stable by construction, so the order is
    ``np.argsort(values, kind="stable")``'s exactly). Each pass counts the bytes
    of contiguous pieces side by side, then moves every piece's values to their
    places side by side; a byte that is the same in every value is skipped. At 1e7
    40-bit keys this takes 0.2-0.25 s on two cores, against 0.5-1.1 s for numpy's
    sort of packed keys in two halves (the method it replaces). Small inputs and
    values spanning 2**62 or more go to numpy.

    Examples
    --------
    >>> stable_argsort(np.array([3, 1, 3, 2, 1])).tolist()
    [1, 4, 3, 0, 2]
    """
    v = np.asarray(values)
    n = v.size
    if n < RADIX_MIN or v.dtype.kind not in "iu":
        return np.argsort(v, kind="stable").astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi >= 1 << 63 or hi - lo >= 1 << 62:
        return np.argsort(v, kind="stable").astype(np.int64)
    rest = v.astype(np.int64) - lo if lo else np.ascontiguousarray(v, dtype=np.int64)
    bits = max(1, (hi - lo).bit_length())
    parts = max(1, nb.get_num_threads())
    return _radix_argsort(rest, bits, parts)


#: Values from which :func:`stable_argsort` runs its compiled radix sort (below, numpy).
RADIX_MIN = 1 << 12
#: Bits sorted per pass of :func:`_radix_argsort` (256 counters per piece fit in L1).
_RADIX_BITS = 8


@nb.njit(cache=True, parallel=True)
def _radix_argsort(
    rest: NDArray[np.int64], bits: int, parts: int
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Stable argsort of ``rest`` (all in ``[0, 2**bits)``): LSD radix, 8 bits a pass,
    ``parts`` pieces counted and moved side by side (piece order keeps it stable)."""
    n = rest.size
    radix = 1 << _RADIX_BITS
    mask = radix - 1
    # the first pass that moves anything reads ``rest`` and the positions themselves
    keys = np.empty(n, np.int64)
    order = np.empty(n, np.int64)
    keys2 = np.empty(n, np.int64)
    order2 = np.empty(n, np.int64)
    counts = np.zeros((parts, radix), np.int64)
    first = True
    shift = 0
    while shift < bits:
        for p in nb.prange(parts):
            c = counts[p]
            c[:] = 0
            for i in range(n * p // parts, n * (p + 1) // parts):
                c[((rest[i] if first else keys[i]) >> shift) & mask] += 1
        total = 0
        single = False
        for d in range(radix):
            here = 0
            for p in range(parts):
                c = counts[p, d]
                counts[p, d] = total
                total += c
                here += c
            if here == n:
                single = True  # every value has this byte: the pass would move nothing
        if not single:
            for p in nb.prange(parts):
                off = counts[p]
                for i in range(n * p // parts, n * (p + 1) // parts):
                    kv = rest[i] if first else keys[i]
                    d = (kv >> shift) & mask
                    j = off[d]
                    off[d] = j + 1
                    keys2[j] = kv
                    order2[j] = i if first else order[i]
            keys, keys2 = keys2, keys
            order, order2 = order2, order
            first = False
        shift += _RADIX_BITS
    if first:  # every byte the same in every value: the order is the input's
        for i in nb.prange(n):
            order[i] = i
    return order


def _dense_integer_codes(arr: NDArray[np.integer]) -> NDArray[np.int64]:
    """Ranks of integer ids among the distinct ids: ``np.unique(arr, return_inverse=True)[1]``.

    Without a sort when the ids span a range not much larger than their number.
    """
    return integer_codes(arr)[0]


def integer_codes(arr: NDArray[np.integer]) -> tuple[NDArray[np.int64], NDArray[np.integer]]:
    """``np.unique(arr, return_inverse=True)`` of integers, reversed: (ranks, distinct values).

    Without a sort when the values span a range not much larger than their number
    (a table of the values present), else by :func:`stable_argsort` (far faster
    than numpy's hashing or sorting unique).

    Examples
    --------
    >>> codes, values = integer_codes(np.array([40, 7, 40, -3]))
    >>> codes.tolist(), values.tolist()
    ([2, 1, 2, 0], [-3, 7, 40])
    """
    n = arr.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), arr[:0].copy()
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo > 4 * n + (1 << 20):
        order = stable_argsort(arr)
        ordered = arr[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        codes = np.empty(n, dtype=np.int64)
        codes[order] = np.cumsum(new) - 1
        return codes, ordered[new]
    if arr.dtype == np.int64:  # compiled: a table of the values present, then the ranks
        a64 = arr.astype(np.int64, copy=False)
        present = _present_values(a64, lo, hi - lo + 1)
        if present.all():  # every value of the range: the ranks are the offsets
            # (codes already dense, as a table's subjects: no table of ranks to build)
            return a64 - lo, np.arange(lo, hi + 1, dtype=np.int64)
        rank = np.cumsum(present, dtype=np.int64)
        rank -= 1
        values = np.flatnonzero(present).astype(np.int64)
        values += lo
        return _ranks_of(a64, lo, rank), values
    if arr.dtype.kind == "u":
        offset = (arr - arr.dtype.type(lo)).astype(np.int64, copy=False)
    else:
        offset = arr.astype(np.int64, copy=False)
        if lo:
            offset = offset - lo
    present = np.zeros(hi - lo + 1, dtype=np.int64)
    present[offset] = 1
    values = np.flatnonzero(present).astype(arr.dtype) + arr.dtype.type(lo)
    rank = np.cumsum(present)
    rank -= 1
    return rank[offset], values


@nb.njit(cache=True, parallel=True)
def _present_values(
    arr: NDArray[np.int64], lo: int, size: int
) -> NDArray[np.uint8]:  # pragma: no cover - compiled
    """1 at ``v - lo`` for every value ``v`` of ``arr`` (all in ``[lo, lo + size)``), else 0
    (threads may write the same 1 to one place: the table is the same in any order)."""
    present = np.zeros(size, np.uint8)
    for i in nb.prange(arr.size):
        present[arr[i] - lo] = 1
    return present


@nb.njit(cache=True, parallel=True)
def _ranks_of(
    arr: NDArray[np.int64], lo: int, rank: NDArray[np.int64]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """``rank[arr - lo]`` (each element on its own)."""
    out = np.empty(arr.size, np.int64)
    for i in nb.prange(arr.size):
        out[i] = rank[arr[i] - lo]
    return out


#: The bits of -0.0 (a key takes 0.0's: the two are one coordinate).
_NEG_ZERO_BITS = np.uint64(1 << 63)
#: The multiplier of :func:`pair_keys` (2**64 / golden ratio).
_PAIR_MIX = np.uint64(0x9E3779B97F4A7C15)


def pair_keys(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.uint64]:
    """One 64-bit key per coordinate pair: ``bits(a) * 0x9E3779B97F4A7C15 ^ bits(b)``
    (mod 2**64), -0.0 keyed as 0.0; equal pairs have equal keys.

    Examples
    --------
    >>> k = pair_keys(np.array([1.0, -0.0, 1.0]), np.array([2.0, 3.0, 2.0]))
    >>> bool(k[0] == k[2]), bool(k[1] == pair_keys(np.array([0.0]), np.array([3.0]))[0])
    (True, True)
    """
    av = np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)
    bv = np.ascontiguousarray(b, dtype=np.float64).view(np.uint64)
    return _pair_keys(av, bv)


@nb.njit(cache=True, parallel=True)
def _pair_keys(
    av: NDArray[np.uint64], bv: NDArray[np.uint64]
) -> NDArray[np.uint64]:  # pragma: no cover - compiled
    out = np.empty(av.size, np.uint64)
    for i in nb.prange(av.size):
        x = av[i]
        y = bv[i]
        if x == _NEG_ZERO_BITS:
            x = np.uint64(0)
        if y == _NEG_ZERO_BITS:
            y = np.uint64(0)
        out[i] = (x * _PAIR_MIX) ^ y
    return out


#: The multiplier that spreads a pair key over :func:`maybe_repeated`'s table (its high
#: bits depend on every bit of the key, unlike the key's low bits, which are all 0 for
#: round coordinates).
_SLOT_MIX = np.uint64(0xD6E8FEB86659FD93)


def maybe_repeated(keys: NDArray[np.uint64]) -> NDArray[np.bool_]:
    """True for every key that occurs more than once, and for some others (1 in 8 to 1 in 5).

    A table of one small counter per slot (``2**bits`` slots, 4 to 8 per key, at most
    2**28) is filled with each key's slot (the high bits of ``key * 0xD6E8FEB86659FD93``);
    a key is flagged when its slot was hit twice. Equal keys share a slot, so no repeated
    key is missed; different keys that share one are flagged too, and the caller compares
    the flagged keys in full. Two passes over the keys, no sort: the threads fill disjoint
    ranges of the table.

    Examples
    --------
    >>> maybe_repeated(np.array([7, 3, 7], dtype=np.uint64)).tolist()[::2]
    [True, True]
    """
    k = np.ascontiguousarray(keys, dtype=np.uint64)
    bits = max(10, min(28, k.size.bit_length() + 2))
    parts = max(1, nb.get_num_threads())
    return _slot_hit_twice(k, _slot_counts(k, bits, parts), bits)


@nb.njit(cache=True, parallel=True)
def _slot_counts(
    keys: NDArray[np.uint64], bits: int, parts: int
) -> NDArray[np.uint8]:  # pragma: no cover - compiled
    """Per slot, the number of keys in it, capped at 2 (thread ``p`` fills range ``p``)."""
    shift = np.uint64(64 - bits)
    size = np.int64(1) << bits
    count = np.zeros(size, np.uint8)
    for p in nb.prange(parts):
        lo = size * p // parts
        hi = size * (p + 1) // parts
        for i in range(keys.size):
            h = np.int64((keys[i] * _SLOT_MIX) >> shift)
            if lo <= h < hi and count[h] < 2:
                count[h] += 1
    return count


@nb.njit(cache=True, parallel=True)
def _slot_hit_twice(
    keys: NDArray[np.uint64], count: NDArray[np.uint8], bits: int
) -> NDArray[np.bool_]:  # pragma: no cover - compiled
    shift = np.uint64(64 - bits)
    out = np.empty(keys.size, np.bool_)
    for i in nb.prange(keys.size):
        out[i] = count[np.int64((keys[i] * _SLOT_MIX) >> shift)] >= 2
    return out


def count_distinct(codes: ArrayLike) -> int:
    """Number of distinct integers: ``np.unique(codes).size``, by a table when they are dense.

    Examples
    --------
    >>> count_distinct(np.array([5, 1, 5, 2]))
    3
    """
    v = np.asarray(codes)
    if v.size == 0:
        return 0
    if v.dtype.kind not in "iu":
        return int(np.unique(v).size)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 4 * v.size + (1 << 20):
        s = np.sort(v)
        return int(np.count_nonzero(s[1:] != s[:-1])) + 1
    present = np.zeros(hi - lo + 1, dtype=np.bool_)
    present[v - lo if lo else v] = True
    return int(np.count_nonzero(present))


def normalise_subject_id(text: str) -> str:
    """The form in which subject ids are compared: NFKC, case folded, surrounding space removed.

    Ids that differ only in case, surrounding whitespace or Unicode form (fullwidth
    letters, ligatures, composed or decomposed accents) are one subject. The text is
    NFKC-normalised, case folded and normalised again (case folding can leave a
    non-NFKC string), then stripped of surrounding whitespace (``str.isspace``).

    Examples
    --------
    >>> [normalise_subject_id(s) for s in ("P001", " p001", "P001\t", "\uff30\uff10\uff10\uff11")]
    ['p001', 'p001', 'p001', 'p001']
    >>> normalise_subject_id("Stra\u00dfe") == normalise_subject_id("STRASSE")
    True
    """
    nfkc = unicodedata.normalize("NFKC", text)
    return unicodedata.normalize("NFKC", nfkc.casefold()).strip()


def factorize_subject_ids(
    ids: ArrayLike,
) -> tuple[NDArray[np.int64], NDArray[np.object_], int]:
    """Subject codes of ids compared in their normalised form (:func:`normalise_subject_id`).

    Only the distinct ids are normalised (factorised first, then the distinct
    texts are normalised and factorised again), so the cost grows with the number
    of distinct ids, not of records. Numeric ids (integers, floats) are taken as
    they are: nothing is merged.

    Parameters
    ----------
    ids
        One subject id per record (text, numbers or objects; objects are compared
        by their text, ``str(id)``). Missing ids (``None``, ``NaN``, ``NA``) get
        code -1.

    Returns
    -------
    codes
        ``int64`` codes in ``[0, number of subjects)``, in the sort order of the
        normalised texts (-1 for a missing id).
    texts
        The normalised text of each code (``str`` of the id for numbers).
    merged
        Distinct ids merged into another one: distinct ids minus distinct subjects.

    Examples
    --------
    >>> codes, texts, merged = factorize_subject_ids(["P001", " p001", "b", "P001 "])
    >>> codes.tolist(), texts.tolist(), merged
    ([1, 1, 0, 1], ['b', 'p001'], 2)
    """
    import pandas as pd

    ser = ids if isinstance(ids, pd.Series) else pd.Series(np.asarray(ids), copy=False)
    if isinstance(ser.dtype, np.dtype) and ser.dtype.kind in "iu":
        codes, values = integer_codes(ser.to_numpy())
        return codes, values.astype(str).astype(object), 0
    if pd.api.types.is_numeric_dtype(ser.dtype):
        codes, uniq = pd.factorize(ser, sort=True)
        texts = pd.Series(uniq).astype(str).to_numpy(dtype=object)
        return np.asarray(codes, dtype=np.int64), texts, 0
    raw_codes, uniq = pd.factorize(ser, sort=False)
    norm = np.empty(len(uniq), dtype=object)
    norm[:] = [
        normalise_subject_id(u if isinstance(u, str) else str(u))
        for u in np.asarray(uniq, dtype=object)
    ]
    codes_of_uniq, texts = _sorted_text_codes(norm)
    to_code = np.append(codes_of_uniq, -1)  # a missing id (-1) stays -1
    codes = to_code[np.asarray(raw_codes, dtype=np.int64)]
    return codes, texts, int(len(uniq) - len(texts))


def _sorted_text_codes(texts: NDArray[np.object_]) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """Rank of each text among the distinct texts (code point order), and the distinct texts.

    Arrow sorts the strings in C++ (UTF-8 byte order is code point order, Python's
    ``str`` order); a sort of Python objects would compare them one pair at a time.
    """
    n = texts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    try:
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = pa.array(texts, type=pa.large_string())
        order = np.asarray(pc.array_sort_indices(arr), dtype=np.int64)
        ordered = arr.take(pa.array(order))
        same = pc.equal(ordered.slice(1), ordered.slice(0, n - 1))
        first = np.r_[True, ~np.asarray(same, dtype=bool)]
    except (ImportError, ValueError, TypeError, UnicodeError):  # e.g. lone surrogates
        distinct, inverse = np.unique(texts, return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1), np.asarray(distinct, dtype=object)
    codes = np.empty(n, dtype=np.int64)
    codes[order] = np.cumsum(first) - 1
    return codes, texts[order[first]]


def is_dense_codes(subjects: ArrayLike | None, n: int) -> bool:
    """Whether ``subjects`` is already what :func:`subject_codes` would make of it.

    That is an int64 array of ``n`` codes in ``[0, m)`` with every code present: its
    ranks among the distinct values are the values themselves, so it can be used
    without the copy :func:`subject_codes` makes.

    Examples
    --------
    >>> is_dense_codes(np.array([1, 0, 1]), 3), is_dense_codes(np.array([2, 0, 2]), 3)
    (True, False)
    """
    if not isinstance(subjects, np.ndarray) or subjects.dtype != np.int64:
        return False
    if subjects.shape != (n,) or not subjects.flags.c_contiguous or n == 0:
        return False
    lo, hi = int(subjects.min()), int(subjects.max())
    if lo != 0 or hi >= n:
        return False
    present = np.zeros(hi + 1, dtype=bool)
    present[subjects] = True
    return bool(present.all())


def subject_codes(subjects: ArrayLike | None, n: int) -> NDArray[np.int64]:
    """Dense int64 subject codes; ``None`` makes every record its own subject.

    Text ids are compared in their normalised form (:func:`factorize_subject_ids`):
    ``"P001"`` and ``" p001"`` are one subject.

    Parameters
    ----------
    subjects
        One subject id per record (any hashable dtype), or ``None``.
    n
        Number of records.

    Returns
    -------
    numpy.ndarray
        ``int64`` codes in ``[0, number of subjects)``.

    Examples
    --------
    >>> subject_codes(["a", "b", "a"], 3).tolist()
    [0, 1, 0]
    """
    if subjects is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(subjects)
    if arr.shape != (n,):
        raise InputError(f"subjects must hold one id per record ({n}), got shape {arr.shape}")
    if arr.dtype.kind in "iu":
        codes = _dense_integer_codes(arr)
    else:
        # text ids are compared normalised (NFKC, case folded, stripped): one subject
        codes, _, _ = factorize_subject_ids(arr)
        if (codes < 0).any():
            raise InputError(
                f"{int((codes < 0).sum())} records have an empty subject id; "
                "give every record a subject or drop the subject column"
            )
    return np.ascontiguousarray(codes, dtype=np.int64)


# ----------------------------------------------------------------------------
# Sorted cell keys: the points of a run of cells are one contiguous range.
# ----------------------------------------------------------------------------


@nb.njit(cache=True, inline="always")
def _lower_bound(a: NDArray[np.int64], value: int) -> int:
    lo, hi = 0, a.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True, inline="always")
def _cells_run(
    keys: NDArray[np.int64], start: NDArray[np.int64], key_lo: int, key_hi: int
) -> tuple[int, int]:
    """Point range covering all cells with key in [key_lo, key_hi]."""
    a = _lower_bound(keys, key_lo)
    b = _lower_bound(keys, key_hi + 1)
    return start[a], start[b]


# ----------------------------------------------------------------------------
# Space: one sort of the points along a Z-order (Morton) curve of fine cells.
# ----------------------------------------------------------------------------

#: Largest number of fine cells per side (keys are 2 * _MAX_BITS bits).
_MAX_BITS = 29
#: Entries of the cell-start table may reach _TABLE_MIN + n * _TABLE_PER_POINT.
_TABLE_MIN = 1 << 12
_TABLE_PER_POINT = 2
#: Target number of points in the level-0 cell of a typical record, per neighbour sought.
_POINTS_PER_CELL = 0.6
#: The 3 x 3 block of cells, the query's own cell first, then edges, then corners.
_DX = np.array([0, -1, 1, 0, 0, -1, -1, 1, 1], dtype=np.int64)
_DY = np.array([0, 0, 0, -1, 1, -1, 1, -1, 1], dtype=np.int64)
#: Level-0 cells (query groups) processed by one parallel task.
_GROUPS_PER_TASK = 64


@nb.njit(cache=True, inline="always")
def _spread_bits(v: int) -> int:
    """Spread the low 31 bits of ``v`` to the even bit positions of an int64."""
    v &= 0x7FFFFFFF
    v = (v | (v << 16)) & 0x0000FFFF0000FFFF
    v = (v | (v << 8)) & 0x00FF00FF00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v << 2)) & 0x3333333333333333
    v = (v | (v << 1)) & 0x5555555555555555
    return v


@nb.njit(cache=True, inline="always")
def _morton(cx: int, cy: int) -> int:
    return (_spread_bits(cx) << 1) | _spread_bits(cy)


@nb.njit(cache=True, parallel=True)
def _fine_keys(
    x: NDArray[np.float64], y: NDArray[np.float64], x0: float, y0: float, c0: float
) -> NDArray[np.int64]:
    """Morton key of every point's level-0 cell ``floor((x - x0) / c0)``."""
    n = x.size
    keys = np.empty(n, np.int64)
    for i in nb.prange(n):
        cx = math.floor((x[i] - x0) / c0)
        cy = math.floor((y[i] - y0) / c0)
        keys[i] = _morton(cx, cy)
    return keys


@nb.njit(cache=True, parallel=True)
def _sorted_starts(
    keys: NDArray[np.int64], order: NDArray[np.int64], low_bits: int, top_buckets: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The keys in ``order`` (their stable sort), and where each top digit's run starts:
    points of top bucket ``b`` (``key >> low_bits``, ``< top_buckets``) are
    ``start[b]:start[b + 1]`` of the sorted keys."""
    n = keys.size
    skeys = np.empty(n, np.int64)
    for i in nb.prange(n):
        skeys[i] = keys[order[i]]
    start = np.empty(top_buckets + 1, np.int64)
    b = 0  # every bucket up to the current key's starts here
    for i in range(n):
        top = skeys[i] >> low_bits
        while b <= top:
            start[b] = i
            b += 1
    while b <= top_buckets:
        start[b] = n
        b += 1
    return skeys, start


@nb.njit(cache=True, parallel=True)
def _gather(
    order: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    s: NDArray[np.int64],
    with_subjects: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    n = order.size
    xs = np.empty(n, np.float64)
    ys = np.empty(n, np.float64)
    ss = np.empty(n if with_subjects else 0, np.int64)
    for i in nb.prange(n):
        o = order[i]
        xs[i] = x[o]
        ys[i] = y[o]
        if with_subjects:
            ss[i] = s[o]
    return xs, ys, ss


@nb.njit(cache=True)
def _group_starts(
    skeys: NDArray[np.int64], qpos: NDArray[np.int64], shift: int
) -> NDArray[np.int64]:
    """Boundaries of runs of queries (sorted positions) sharing one cell at ``shift``."""
    nq = qpos.size
    ng = 0
    prev = -1
    for t in range(nq):
        k = skeys[qpos[t]] >> shift
        if t == 0 or k != prev:
            ng += 1
            prev = k
    out = np.empty(ng + 1, np.int64)
    g = 0
    for t in range(nq):
        k = skeys[qpos[t]] >> shift
        if t == 0 or k != prev:
            out[g] = t
            g += 1
            prev = k
    out[ng] = nq
    return out


@nb.njit(cache=True, inline="always")
def _cell_range(
    key: int,
    level: int,
    skeys: NDArray[np.int64],
    start: NDArray[np.int64],
    table_level: int,
) -> tuple[int, int]:
    """Sorted positions ``[lo, hi)`` of the points of cell ``key`` at ``level``."""
    if level >= table_level:
        sh = 2 * (level - table_level)
        return start[key << sh], start[(key + 1) << sh]
    sh = 2 * (table_level - level)
    parent = key >> sh
    a = start[parent]
    b = start[parent + 1]
    lo_key = key << (2 * level)
    hi_key = (key + 1) << (2 * level)
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) >> 1
        if skeys[mid] < lo_key:
            lo = mid + 1
        else:
            hi = mid
    first = lo
    hi = b
    while lo < hi:
        mid = (lo + hi) >> 1
        if skeys[mid] < hi_key:
            lo = mid + 1
        else:
            hi = mid
    return first, lo


@nb.njit(cache=True, parallel=True)
def _search_level(
    level: int,
    qpos: NDArray[np.int64],
    gstart: NDArray[np.int64],
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ss: NDArray[np.int64],
    with_subjects: bool,
    skeys: NDArray[np.int64],
    start: NDArray[np.int64],
    table_level: int,
    bits: int,
    max_cx: int,
    max_cy: int,
    x0: float,
    y0: float,
    c0: float,
    m: int,
    max_d: float,
    margin: float,
    order: NDArray[np.int64],
    last_only: bool,
    out: NDArray[np.float64],
    resolved: NDArray[np.bool_],
) -> None:
    """Scan the 3 x 3 block of ``level`` cells around each query's cell.

    A query is resolved when its ``m``-th distinct other subject is no farther
    than the exact distance to the outside of the block (so nothing unscanned
    can be nearer), or when the block holds the whole disc of radius ``max_d``.
    Resolved queries write their row of ``out`` (at the original index).
    """
    ngroups = gstart.size - 1
    ntasks = (ngroups + _GROUPS_PER_TASK - 1) // _GROUPS_PER_TASK
    side = np.int64(1) << (bits - level)  # cells per side of the key space at this level
    ncx = (max_cx >> level) + 1
    ncy = (max_cy >> level) + 1
    scale = 1.0 / (1 << level)
    cj = c0 * (1 << level)
    for task in nb.prange(ntasks):
        best_d = np.empty(m, np.float64)
        best_s = np.empty(m, np.int64)
        spare = np.empty(m + 1, np.float64)
        lo_r = np.empty(9, np.int64)
        hi_r = np.empty(9, np.int64)
        g_end = min(ngroups, (task + 1) * _GROUPS_PER_TASK)
        for g in range(task * _GROUPS_PER_TASK, g_end):
            a = gstart[g]
            b = gstart[g + 1]
            p0 = qpos[a]
            cx = math.floor((xs[p0] - x0) / c0) >> level
            cy = math.floor((ys[p0] - y0) / c0) >> level
            nr = 0
            if with_subjects:
                # The own cell first, then the edge cells, then the corners: near points
                # come first, so the branchy distinct-subject insertion settles early.
                for o in range(9):
                    gx = cx + _DX[o]
                    gy = cy + _DY[o]
                    if gx < 0 or gx >= side or gy < 0 or gy >= side:
                        continue
                    lo, hi = _cell_range(_morton(gx, gy), level, skeys, start, table_level)
                    if hi > lo:
                        lo_r[nr] = lo
                        hi_r[nr] = hi
                        nr += 1
            else:
                # The network does not care about the order: merge runs adjacent in memory.
                for gx in range(cx - 1, cx + 2):
                    if gx < 0 or gx >= side:
                        continue
                    for gy in range(cy - 1, cy + 2):
                        if gy < 0 or gy >= side:
                            continue
                        lo, hi = _cell_range(_morton(gx, gy), level, skeys, start, table_level)
                        if hi > lo:
                            if nr > 0 and hi_r[nr - 1] == lo:
                                hi_r[nr - 1] = hi
                            else:
                                lo_r[nr] = lo
                                hi_r[nr] = hi
                                nr += 1
            # Sides of the block beyond the data's extent hide nothing.
            open_left = cx - 1 <= 0
            open_right = cx + 1 >= ncx - 1
            open_down = cy - 1 <= 0
            open_up = cy + 1 >= ncy - 1
            for t in range(a, b):
                i = qpos[t]
                px = xs[i]
                py = ys[i]
                if with_subjects:
                    _nearest_subjects(xs, ys, ss, px, py, ss[i], lo_r, hi_r, nr, m, best_d, best_s)
                elif m < 9:
                    _nearest_records_9(xs, ys, px, py, lo_r, hi_r, nr, m, best_d)
                else:
                    _nearest_records(xs, ys, px, py, lo_r, hi_r, nr, m, best_d, spare)
                ux = (px - x0) / c0 * scale
                uy = (py - y0) / c0 * scale
                bound = np.inf
                if not open_left:
                    bound = min(bound, ux - (cx - 1))
                if not open_right:
                    bound = min(bound, (cx + 2) - ux)
                if not open_down:
                    bound = min(bound, uy - (cy - 1))
                if not open_up:
                    bound = min(bound, (cy + 2) - uy)
                bound = bound * cj - margin
                worst = math.sqrt(best_d[m - 1])
                if bound >= max_d or worst <= bound:
                    resolved[t] = True
                    o = order[i]
                    if last_only:
                        out[o, 0] = worst if worst <= max_d else np.inf
                    else:
                        for u in range(m):
                            v = math.sqrt(best_d[u])
                            out[o, u] = v if v <= max_d else np.inf
                else:
                    resolved[t] = False


@nb.njit(cache=True, inline="always")
def _nearest_subjects(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ss: NDArray[np.int64],
    px: float,
    py: float,
    ps: int,
    lo_r: NDArray[np.int64],
    hi_r: NDArray[np.int64],
    nr: int,
    m: int,
    best_d: NDArray[np.float64],
    best_s: NDArray[np.int64],
) -> None:
    """Squared distances to the ``m`` nearest distinct subjects other than ``ps``."""
    for u in range(m):
        best_d[u] = np.inf
        best_s[u] = -1
    worst = np.inf
    for r in range(nr):
        for c in range(lo_r[r], hi_r[r]):
            dx = xs[c] - px
            dy = ys[c] - py
            d2 = dx * dx + dy * dy
            if d2 < worst:
                s = ss[c]
                if s != ps:
                    _offer2(best_d, best_s, m, d2, s, True)
                    worst = best_d[m - 1]
        if worst == 0.0:
            break


@nb.njit(cache=True, inline="always")
def _nearest_records_9(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    px: float,
    py: float,
    lo_r: NDArray[np.int64],
    hi_r: NDArray[np.int64],
    nr: int,
    m: int,
    best_d: NDArray[np.float64],
) -> None:
    """Squared distances to the ``m <= 8`` nearest other records, branch-free.

    The nine smallest squared distances to all scanned records, the query's
    own record included, are kept in registers by a sorting network. The query
    itself is at exactly 0, the smallest possible value, so dropping the first
    slot leaves the ``m`` nearest *other* records (a duplicate point also at 0
    stays, as in a k-d tree query for ``m + 1`` neighbours).
    """
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = np.inf
    for r in range(nr):
        for c in range(lo_r[r], hi_r[r]):
            dx = xs[c] - px
            dy = ys[c] - py
            v = dx * dx + dy * dy
            t = min(b0, v)
            v = max(b0, v)
            b0 = t
            t = min(b1, v)
            v = max(b1, v)
            b1 = t
            t = min(b2, v)
            v = max(b2, v)
            b2 = t
            t = min(b3, v)
            v = max(b3, v)
            b3 = t
            t = min(b4, v)
            v = max(b4, v)
            b4 = t
            t = min(b5, v)
            v = max(b5, v)
            b5 = t
            t = min(b6, v)
            v = max(b6, v)
            b6 = t
            t = min(b7, v)
            v = max(b7, v)
            b7 = t
            b8 = min(b8, v)
        worst = (b1, b2, b3, b4, b5, b6, b7, b8)[m - 1]
        if worst == 0.0:
            break
    best_d[0] = b1
    if m > 1:
        best_d[1] = b2
    if m > 2:
        best_d[2] = b3
    if m > 3:
        best_d[3] = b4
    if m > 4:
        best_d[4] = b5
    if m > 5:
        best_d[5] = b6
    if m > 6:
        best_d[6] = b7
    if m > 7:
        best_d[7] = b8


@nb.njit(cache=True, inline="always")
def _nearest_records(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    px: float,
    py: float,
    lo_r: NDArray[np.int64],
    hi_r: NDArray[np.int64],
    nr: int,
    m: int,
    best_d: NDArray[np.float64],
    spare: NDArray[np.float64],
) -> None:
    """As :func:`_nearest_records_9` for any ``m``, with the network in memory."""
    for u in range(m + 1):
        spare[u] = np.inf
    for r in range(nr):
        for c in range(lo_r[r], hi_r[r]):
            dx = xs[c] - px
            dy = ys[c] - py
            v = dx * dx + dy * dy
            if v < spare[m]:
                for u in range(m + 1):
                    w = spare[u]
                    spare[u] = min(w, v)
                    v = max(w, v)
        if spare[m] == 0.0:
            break
    for u in range(m):
        best_d[u] = spare[u + 1]


@nb.njit(cache=True, inline="always")
def _offer2(
    best_d: NDArray[np.float64],
    best_s: NDArray[np.int64],
    m: int,
    d: float,
    s: int,
    distinct: bool,
) -> None:
    """Offer ``(d, s)`` with ``d < best_d[m-1]`` to the sorted list of distinct subjects."""
    u = m - 1
    if distinct:
        for t in range(m):
            if best_s[t] == s:
                if d >= best_d[t]:
                    return
                u = t
                break
    while u > 0 and best_d[u - 1] > d:
        best_d[u] = best_d[u - 1]
        best_s[u] = best_s[u - 1]
        u -= 1
    best_d[u] = d
    best_s[u] = s


#: Points of :func:`_level0_cell`'s density sample: at most, and at least (when there are
#: as many).
_DENSITY_SAMPLE = 20_000
_DENSITY_SAMPLE_MIN = 2_048


def _level0_cell(x: NDArray[np.float64], y: NDArray[np.float64], count: int, span: float) -> float:
    """Side of the level-0 cells: about ``_POINTS_PER_CELL * (count + 1)`` points in the
    cell of the median record.

    The local density of the median record is estimated from the distance to
    the 8th neighbour within a fixed (deterministic) subsample: up to 20,000 points,
    fewer below 1.28 million (a 64th of them, at least 2,048), so that a Dask tile's
    estimate does not cost about what its search does. Only the speed depends on this
    choice, never the result.
    """
    n = x.size
    if n < 3 or span <= 0.0:
        return max(span, 1.0)
    from scipy.spatial import cKDTree

    step = max(1, n // min(_DENSITY_SAMPLE, max(_DENSITY_SAMPLE_MIN, n // 64)))
    pts = np.column_stack((x[::step], y[::step]))
    m = pts.shape[0]
    q = min(8, m - 1)
    probe = pts[:: max(1, m // 1024)]
    d, _ = cKDTree(pts).query(probe, k=q + 1)
    r = float(np.median(d[:, q]))
    # Density near the median record: q * (n / m) / (pi r^2) full-data points per m^2.
    target = _POINTS_PER_CELL * (count + 1)
    cell = r * math.sqrt(target * math.pi * m / (q * n))
    return max(cell, span * 2.0 ** (1 - _MAX_BITS))


def _search(
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    subj: NDArray[np.int64] | None,
    count: int,
    max_distance: float,
    last_only: bool,
    at_places: bool = True,
    depth: int = 0,
    queries: NDArray[np.int64] | None = None,
) -> NDArray[np.float64]:
    """The level-by-level search (inputs validated, ``n >= 1``).

    Where level-0 cells hold so many points that scanning them would cost more than
    :data:`CROWDED_PAIRS` pairs (the cells are sized for the median record's density, so
    a dense spot shares one), their points are first reduced by place
    (:func:`_search_by_place`, with ``at_places``): many records at one coordinate (a
    care home, a postcode's centroid) would otherwise cost the square of their number.
    Then, if the cells are still crowded (many distinct places close together), the
    crowded cells' points are searched among themselves on a grid of their own
    (:func:`_search_crowded`, ``depth`` such searches deep at most).

    ``queries``: the rows to answer (the others' rows of the result are left unset);
    ``None``: every row."""
    n = xa.size
    out = np.empty((n, 1 if last_only else count), dtype=np.float64)
    x0, x1 = float(xa.min()), float(xa.max())
    y0, y1 = float(ya.min()), float(ya.max())
    span = max(x1 - x0, y1 - y0)
    c0 = _level0_cell(xa, ya, count, span)
    while True:
        max_cx = math.floor((x1 - x0) / c0)
        max_cy = math.floor((y1 - y0) / c0)
        if max(max_cx, max_cy) < (1 << _MAX_BITS):
            break
        c0 *= 2.0
    bits = max(max_cx, max_cy).bit_length()
    limit = _TABLE_MIN + n * _TABLE_PER_POINT
    table_level = 0
    while 4 ** (bits - table_level) > limit:
        table_level += 1
    keys = _fine_keys(xa, ya, x0, y0, c0)
    order = stable_argsort(keys)  # compiled radix sort: 0.2-0.25 s at 1e7
    skeys, start = _sorted_starts(keys, order, 2 * table_level, 4 ** (bits - table_level))
    del keys
    if queries is None and run_pairs_above(skeys, CROWDED_RUN) > CROWDED_PAIRS:
        crowded = order[in_runs_above(skeys, CROWDED_RUN)]
        if at_places:
            del skeys, start, order

            def among(rows: NDArray[np.int64]) -> NDArray[np.float64]:
                return _search(
                    xa[rows], ya[rows], None if subj is None else subj[rows], count,
                    max_distance, last_only, at_places=False, depth=depth,
                )  # fmt: skip

            return _search_by_place((xa, ya), subj, count, crowded, among)
        if depth < _CROWDED_DEPTH and crowded.size < n:
            del skeys, start, order
            return _search_crowded(
                xa, ya, subj, count, max_distance, last_only, crowded, (x0, y0, c0), depth
            )
    with_subjects = subj is not None
    xs, ys, ss = _gather(
        order, xa, ya, subj if subj is not None else np.empty(0, np.int64), with_subjects
    )
    # Rounding of coordinates and distances is far below this margin.
    margin = 1e-9 * (max(abs(x0), abs(x1)) + max(abs(y0), abs(y1))) + 1e-9
    if queries is None:
        qpos = np.arange(n, dtype=np.int64)
    else:  # the queries' sorted positions, in order
        where = np.empty(n, dtype=np.int64)
        where[order] = np.arange(n, dtype=np.int64)
        qpos = np.sort(where[queries])
        del where
    level = 0
    while qpos.size:
        if level > bits:  # pragma: no cover - the top level holds every point
            raise RuntimeError("neighbour search did not resolve every record")
        gstart = _group_starts(skeys, qpos, 2 * level)
        resolved = np.empty(qpos.size, dtype=np.bool_)
        with nb.parallel_chunksize(1):
            _search_level(
                level, qpos, gstart, xs, ys, ss, with_subjects, skeys, start, table_level,
                bits, max_cx, max_cy, x0, y0, c0, int(count), float(max_distance),
                margin + 1e-9 * c0 * 2.0**level, order, last_only, out, resolved,
            )  # fmt: skip
        qpos = qpos[~resolved]
        level += 1
    return out


#: Level-0 cells of more points than this are candidates for :func:`_search_by_place`
#: and :func:`_search_crowded`.
CROWDED_RUN = 256
#: ... and they are reduced by place when the squares of their point counts sum to more
#: than this (the pairs a scan of them would cost: about a tenth of a second).
CROWDED_PAIRS = 50_000_000


@nb.njit(cache=True)
def run_pairs_above(skeys: NDArray[np.int64], least: int) -> int:
    """The sum of the squared lengths of the runs of equal ``skeys`` longer than ``least``."""
    n = skeys.size
    work = 0
    a = 0
    for i in range(1, n + 1):
        if i == n or skeys[i] != skeys[a]:
            if i - a > least:
                work += (i - a) * (i - a)
            a = i
    return work


@nb.njit(cache=True)
def in_runs_above(skeys: NDArray[np.int64], least: int) -> NDArray[np.bool_]:
    """Per sorted position, whether its run of equal ``skeys`` is longer than ``least``."""
    n = skeys.size
    out = np.zeros(n, np.bool_)
    a = 0
    for i in range(1, n + 1):
        if i == n or skeys[i] != skeys[a]:
            if i - a > least:
                out[a:i] = True
            a = i
    return out


#: Grids within grids :func:`_search_crowded` may lay at most (a spot within a spot ...).
_CROWDED_DEPTH = 4


def _search_crowded(
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    subj: NDArray[np.int64] | None,
    count: int,
    max_distance: float,
    last_only: bool,
    crowd: NDArray[np.int64],
    grid: tuple[float, float, float],
    depth: int,
) -> NDArray[np.float64]:
    """:func:`_search` where the rows ``crowd`` fill crowded level-0 cells of ``grid``
    (origin x, origin y, side).

    They are searched among themselves first, on the finer grid their own density gives.
    A row whose answer (its ``count``-th distance, or ``max_distance``) is closer than
    the outside of its own cell has its answer: every other record lies outside, farther.
    The others, and every row outside the crowded cells, are then searched among all
    records. A dense spot of distinct places (the phones at a stadium, fixes with
    centimetres of jitter) would otherwise cost the square of its records.
    """
    n = xa.size
    crowd = np.sort(crowd)
    inner = _search(
        xa[crowd], ya[crowd], None if subj is None else subj[crowd], count, max_distance,
        last_only, at_places=False, depth=depth + 1,
    )  # fmt: skip
    x0, y0, c0 = grid
    cx, cy = xa[crowd], ya[crowd]
    inside = np.minimum(face_distance(cx, x0, c0), face_distance(cy, y0, c0))
    # rounding of coordinates and of the cell's edges is far below this margin
    margin = 1e-9 * (abs(x0) + abs(y0) + c0 + float(np.abs(cx).max()) + float(np.abs(cy).max()))
    done = np.minimum(inner[:, -1], max_distance) < inside - margin

    def rest(todo: NDArray[np.int64]) -> NDArray[np.float64]:
        return _search(xa, ya, subj, count, max_distance, last_only, at_places=False,
                       depth=_CROWDED_DEPTH, queries=todo)  # fmt: skip

    return _kept_then_rest(n, crowd, done, inner, rest)


def face_distance(v: NDArray[np.float64], origin: float, side: float) -> NDArray[np.float64]:
    """Per value, its distance to the nearer face of its cell on a grid of ``side`` from
    ``origin`` (cell ``floor((v - origin) / side)``, as the searches' grids cut them)."""
    low = origin + np.floor((v - origin) / side) * side
    return np.minimum(v - low, low + side - v)


def _kept_then_rest(
    n: int,
    crowd: NDArray[np.int64],
    done: NDArray[np.bool_],
    inner: NDArray[np.float64],
    rest: Callable[[NDArray[np.int64]], NDArray[np.float64]],
) -> NDArray[np.float64]:
    """The answers of :func:`_search_crowded` and :func:`_spacetime_crowded`: the crowd's
    rows ``done`` keep their answers among the crowd (``inner``); every other row of the
    ``n`` is answered by ``rest(rows)`` (a search among all records of those rows)."""
    out = np.empty((n, inner.shape[1]), dtype=np.float64)
    out[crowd[done]] = inner[done]
    left = np.ones(n, dtype=np.bool_)
    left[crowd[done]] = False
    todo = np.flatnonzero(left)
    if todo.size:
        out[todo] = rest(todo)[todo]
    return out


def _search_by_place(
    coords: tuple[NDArray[np.float64], ...],
    subj: NDArray[np.int64] | None,
    count: int,
    heavy: NDArray[np.int64],
    search: Callable[[NDArray[np.int64]], NDArray[np.float64]],
) -> NDArray[np.float64]:
    """A search (``search(rows)``: the answers of those rows among themselves) with the
    records ``heavy`` (those of crowded cells) reduced by place: equal ``coords`` (x, y,
    and the time where time counts).

    Every record at one place of one subject has the same answer, so one of them is
    searched for all. A place with ``count + 1`` distinct subjects or more answers 0 for
    each of its records (``count`` other subjects lie at distance 0), and only
    ``count + 1`` of its subjects (one record each) stay as neighbours of the others.
    That leaves every answer as it was: within any distance that reaches a reduced place,
    ``count`` other subjects are still found at it, and within any other nothing was
    taken away. Without subjects every record is a subject of its own. The search then
    costs the places' subjects, not the square of their records.
    """
    n = coords[0].size
    hs = heavy if subj is None else subj[heavy]
    at = [c[heavy] for c in coords]
    o = np.lexsort((heavy, hs, *reversed(at)))
    rows, hs = heavy[o], hs[o]
    at = [c[o] for c in at]
    new_place = np.zeros(rows.size, dtype=np.bool_)
    new_place[:1] = True
    for c in at:
        new_place[1:] |= c[1:] != c[:-1]
    new_pair = new_place.copy()
    new_pair[1:] |= hs[1:] != hs[:-1]
    place = np.cumsum(new_place) - 1
    pair = np.cumsum(new_pair) - 1
    # each pair's rank among its place's subjects, and each place's number of subjects
    rank = pair - pair[new_place][place]
    subjects_at = np.bincount(place, weights=new_pair).astype(np.int64)
    full = subjects_at[place] >= count + 1
    kept = new_pair & (rank < count + 1)
    light = np.ones(n, dtype=np.bool_)
    light[heavy] = False
    searched = np.concatenate([np.flatnonzero(light), rows[kept]])
    found = search(searched)
    out = np.empty((n, found.shape[1]), dtype=np.float64)
    n_light = searched.size - int(kept.sum())
    out[searched[:n_light]] = found[:n_light]
    # every heavy record: its pair's searched record (the pair's first), or 0 at a full place
    at_pair = np.empty(int(pair[-1]) + 1 if pair.size else 0, dtype=np.int64)
    at_pair[pair[kept]] = np.arange(n_light, searched.size)
    answer = np.zeros((rows.size, found.shape[1]), dtype=np.float64)
    open_ = ~full
    answer[open_] = found[at_pair[pair[open_]]]
    out[rows] = answer
    return out


def subject_neighbour_distances(
    x: ArrayLike,
    y: ArrayLike,
    subjects: ArrayLike | None = None,
    *,
    count: int,
    max_distance: float = math.inf,
    last_only: bool = False,
) -> NDArray[np.float64]:
    """Distances to the 1st..``count``-th nearest other subject of every record.

    Parameters
    ----------
    x, y
        Coordinates in metres (a projected CRS).
    subjects
        Subject id per record, or ``None`` (every record its own subject).
        Integer codes from :func:`subject_codes` are used as they are.
    count
        How many distinct other subjects to find (``k - 1``).
    max_distance
        Subjects farther than this are not searched for; their slots are ``inf``.
        Pass ``generalise_ratio * r_max_m``: no label depends on anything farther.
    last_only
        Return only the ``count``-th column, as an ``(n, 1)`` array (what the
        labels need; the same values as the last column of the full result).

    Returns
    -------
    numpy.ndarray
        ``(n, count)`` float64 (``(n, 1)`` with ``last_only``), each row sorted
        ascending, ``inf`` where fewer than ``count`` other subjects lie within
        ``max_distance``.

    Examples
    --------
    >>> d = subject_neighbour_distances([0, 3, 0, 10], [0, 4, 1, 0], ["a", "b", "a", "c"], count=2)
    >>> d[0].tolist()
    [5.0, 10.0]
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if ya.shape != xa.shape or xa.ndim != 1:
        raise InputError(f"x and y must be 1-D of equal length, got {xa.shape} and {ya.shape}")
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise InputError(f"count must be an integer >= 1, got {count!r}")
    if not (max_distance > 0):
        raise InputError(f"max_distance must be > 0, got {max_distance!r}")
    if n == 0:
        return np.full((0, 1 if last_only else int(count)), np.inf)
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        bad = int((~(np.isfinite(xa) & np.isfinite(ya))).sum())
        raise InputError(f"{bad} records have NaN or infinite coordinates; drop or fix them")
    subj = (
        None
        if subjects is None
        else (
            np.ascontiguousarray(subjects, dtype=np.int64)
            if np.asarray(subjects).dtype.kind in "iu"
            else subject_codes(subjects, n)
        )
    )
    return _search(xa, ya, subj, int(count), float(max_distance), last_only)


# ----------------------------------------------------------------------------
# Space and time together: the (k-1)-th smallest max(distance / r_max, gap / t_max).
# ----------------------------------------------------------------------------

#: Bounds of the side of the level-0 space-time cells, in units of (r_max, t_max).
_ST_CELL_MIN = 2.0**-10
_ST_CELL_MAX = 8.0
#: Queries processed by one parallel task of the space-time search.
_ST_QUERIES_PER_TASK = 256


@nb.njit(cache=True, inline="always")
def _st_cell(
    px: float, py: float, pt: float, x0: float, y0: float, t0: float,
    cj: float, ctj: float, nt: int, periodic: bool,
) -> tuple[int, int, int]:  # fmt: skip
    """Cell ``(column, row, time slot)`` of a point at one level."""
    cx = math.floor((px - x0) / cj)
    cy = math.floor((py - y0) / cj)
    ct = math.floor((pt - t0) / ctj)
    if periodic and ct >= nt:  # a time just below the period, rounded up
        ct = nt - 1
    return cx, cy, ct


@nb.njit(cache=True, parallel=True)
def _st_keys(
    x: NDArray[np.float64], y: NDArray[np.float64], t: NDArray[np.float64],
    x0: float, y0: float, t0: float, cj: float, ctj: float, ny: int, nt: int, periodic: bool,
) -> NDArray[np.int64]:  # fmt: skip
    """Row-major key ``(column * ny + row) * nt + slot`` of every point's cell."""
    n = x.size
    keys = np.empty(n, np.int64)
    for i in nb.prange(n):
        cx, cy, ct = _st_cell(x[i], y[i], t[i], x0, y0, t0, cj, ctj, nt, periodic)
        keys[i] = (cx * ny + cy) * nt + ct
    return keys


@nb.njit(cache=True, parallel=True)
def _st_level(
    queries: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    t: NDArray[np.float64],
    s: NDArray[np.int64],
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    ts: NDArray[np.float64],
    ss: NDArray[np.int64],
    cell_keys: NDArray[np.int64],
    cell_start: NDArray[np.int64],
    x0: float,
    y0: float,
    t0: float,
    cj: float,
    ctj: float,
    nx: int,
    ny: int,
    nt: int,
    periodic: bool,
    period: float,
    r: float,
    tmax: float,
    m: int,
    max_d: float,
    max_g: float,
    margin_m: float,
    margin_t: float,
    last_only: bool,
    out: NDArray[np.float64],
    resolved: NDArray[np.bool_],
) -> None:
    """Scan the 3 x 3 x 3 block of cells around each query's cell at one level.

    A query is resolved when its ``m``-th distinct other subject (in the
    combined measure) is no farther than the exact combined distance to the
    outside of the block, or when the block holds every point within ``max_d``
    metres and ``max_g`` seconds of it. Resolved queries write their row of ``out``.
    """
    nq = queries.size
    ntasks = (nq + _ST_QUERIES_PER_TASK - 1) // _ST_QUERIES_PER_TASK
    for task in nb.prange(ntasks):
        best_d = np.empty(m, np.float64)
        best_s = np.empty(m, np.int64)
        tlo = np.empty(2, np.int64)
        thi = np.empty(2, np.int64)
        for q in range(task * _ST_QUERIES_PER_TASK, min(nq, (task + 1) * _ST_QUERIES_PER_TASK)):
            i = queries[q]
            px = x[i]
            py = y[i]
            pt = t[i]
            ps = s[i]
            cx, cy, ct = _st_cell(px, py, pt, x0, y0, t0, cj, ctj, nt, periodic)
            # The time slots ct-1..ct+1 as one or two runs of keys (the clock wraps).
            if not periodic:
                tlo[0] = max(ct - 1, 0)
                thi[0] = min(ct + 1, nt - 1)
                nr = 1
            elif nt <= 3:
                tlo[0] = 0
                thi[0] = nt - 1
                nr = 1
            elif ct == 0:
                tlo[0] = 0
                thi[0] = 1
                tlo[1] = nt - 1
                thi[1] = nt - 1
                nr = 2
            elif ct == nt - 1:
                tlo[0] = nt - 2
                thi[0] = nt - 1
                tlo[1] = 0
                thi[1] = 0
                nr = 2
            else:
                tlo[0] = ct - 1
                thi[0] = ct + 1
                nr = 1
            for u in range(m):
                best_d[u] = np.inf
                best_s[u] = -1
            worst = np.inf
            for gx in range(max(cx - 1, 0), min(cx + 1, nx - 1) + 1):
                for gy in range(max(cy - 1, 0), min(cy + 1, ny - 1) + 1):
                    base = (gx * ny + gy) * nt
                    for rr in range(nr):
                        lo, hi = _cells_run(cell_keys, cell_start, base + tlo[rr], base + thi[rr])
                        for j in range(lo, hi):
                            sj = ss[j]
                            if sj == ps:
                                continue
                            dx = xs[j] - px
                            dy = ys[j] - py
                            d = math.sqrt(dx * dx + dy * dy)
                            if d > max_d:
                                continue
                            ds = d / r
                            if ds >= worst:
                                continue
                            g = abs(ts[j] - pt)
                            if periodic:
                                g = min(g, period - g)
                            if g > max_g:
                                continue
                            v = max(ds, g / tmax)
                            if v < worst:
                                _offer2(best_d, best_s, m, v, sj, True)
                                worst = best_d[m - 1]
                                if worst == 0.0:  # nothing can be nearer
                                    break
                        if worst == 0.0:
                            break
                    if worst == 0.0:
                        break
                if worst == 0.0:
                    break
            # Exact distance (space, then time) from the point to the outside of the
            # block; sides beyond the data's extent hide nothing.
            ux = (px - x0) / cj
            uy = (py - y0) / cj
            bs = np.inf
            if cx - 1 > 0:
                bs = min(bs, ux - (cx - 1))
            if cx + 1 < nx - 1:
                bs = min(bs, (cx + 2) - ux)
            if cy - 1 > 0:
                bs = min(bs, uy - (cy - 1))
            if cy + 1 < ny - 1:
                bs = min(bs, (cy + 2) - uy)
            bs = bs * cj - margin_m
            ut = (pt - t0) / ctj
            bt = np.inf
            if periodic:
                if nt > 3:
                    bt = min(ut - (ct - 1), (ct + 2) - ut)
            else:
                if ct - 1 > 0:
                    bt = min(bt, ut - (ct - 1))
                if ct + 1 < nt - 1:
                    bt = min(bt, (ct + 2) - ut)
            bt = bt * ctj - margin_t
            if (bs >= max_d and bt >= max_g) or worst <= min(bs / r, bt / tmax):
                resolved[q] = True
                if last_only:
                    out[i, 0] = worst
                else:
                    for u in range(m):
                        out[i, u] = best_d[u]
            else:
                resolved[q] = False


def _spacetime_cell(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    t: NDArray[np.float64],
    r: float,
    tmax: float,
    count: int,
) -> float:
    """Side of the level-0 cells in units of ``(r, tmax)``: about
    ``_POINTS_PER_CELL * (count + 1)`` points in the cell of the median record.

    As in :func:`_level0_cell`, from the 8th neighbour (Chebyshev, scaled
    units) within a fixed subsample; only the speed depends on it.
    """
    n = x.size
    if n < 3:
        return 1.0
    from scipy.spatial import cKDTree

    step = max(1, n // 20_000)
    pts = np.column_stack((x[::step] / r, y[::step] / r, t[::step] / tmax))
    m = pts.shape[0]
    q = min(8, m - 1)
    probe = pts[:: max(1, m // 1024)]
    d, _ = cKDTree(pts).query(probe, k=q + 1, p=np.inf)
    rho = float(np.median(d[:, q]))
    target = _POINTS_PER_CELL * (count + 1)
    side = 2.0 * rho * (target * m / (q * n)) ** (1.0 / 3.0)
    if not math.isfinite(side):
        return 1.0
    return min(max(side, _ST_CELL_MIN), _ST_CELL_MAX)


def _spacetime_crowded(
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    ta: NDArray[np.float64],
    subj: NDArray[np.int64],
    count: int,
    r: float,
    tmax: float,
    period: float | None,
    max_d: float,
    max_g: float,
    last_only: bool,
    crowd: NDArray[np.int64],
    grid: tuple[float, float, float, float, float, int],
    depth: int,
) -> NDArray[np.float64]:
    """:func:`_spacetime_search` where the rows ``crowd`` fill crowded cells of the first
    level searched (``grid``: its origin x, y, t, cell side, time slot, slots).

    As :func:`_search_crowded`, in space and time: the crowd is searched among itself
    first, on the finer grid its own density gives. A record outside a row's cell lies
    beyond the cell's nearest face, in space (its distance over ``r``) or in time (its
    gap over ``tmax``; around the clock with ``period``), so a row whose ratio is below
    that has its answer; so has a row with fewer than ``count`` subjects in reach whose
    faces all lie beyond ``max_d`` and ``max_g``. The others, and every row outside the
    crowd, are then searched among all records.
    """
    n = xa.size
    crowd = np.sort(crowd)
    inner = _spacetime_search(
        xa[crowd], ya[crowd], ta[crowd], subj[crowd], count, r, tmax, period, max_d, max_g,
        last_only, at_places=False, depth=depth + 1,
    )  # fmt: skip
    x0, y0, t0, cj, ctj, nt = grid
    cx, cy = xa[crowd], ya[crowd]
    ct = ta[crowd] if period is None else np.mod(ta[crowd], period)
    if period is not None:
        ct[ct >= period] = 0.0  # as the search takes a time just below 0

    dx = np.minimum(face_distance(cx, x0, cj), face_distance(cy, y0, cj))
    if period is not None:
        slot = np.minimum(np.floor(ct / ctj), nt - 1)
        low = slot * ctj
        high = np.where(slot == nt - 1, period, low + ctj)
        dt = np.minimum(ct - low, high - ct) if nt > 1 else np.full(ct.size, np.inf)
    else:
        dt = face_distance(ct, t0, ctj)
    # rounding of coordinates, times and the cells' faces is far below these margins
    m_d = 1e-9 * (float(np.abs(cx).max() + np.abs(cy).max()) + cj) + 1e-9
    m_t = 1e-9 * (float(np.abs(ct).max()) + ctj) + 1e-9
    ratio = inner[:, -1]
    beyond = np.minimum((dx - m_d) / r, (dt - m_t) / tmax)
    done = np.where(np.isfinite(ratio), ratio < beyond, (dx - m_d > max_d) & (dt - m_t > max_g))

    def rest(todo: NDArray[np.int64]) -> NDArray[np.float64]:
        return _spacetime_search(
            xa, ya, ta, subj, count, r, tmax, period, max_d, max_g, last_only, at_places=False,
            depth=_CROWDED_DEPTH, rows=todo,
        )  # fmt: skip

    return _kept_then_rest(n, crowd, done, inner, rest)


def _spacetime_search(
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    ta: NDArray[np.float64],
    subj: NDArray[np.int64],
    count: int,
    r: float,
    tmax: float,
    period: float | None,
    max_d: float,
    max_g: float,
    last_only: bool,
    at_places: bool = True,
    depth: int = 0,
    rows: NDArray[np.int64] | None = None,
) -> NDArray[np.float64]:
    """The level-by-level space-time search (inputs validated, ``n >= 1``).

    Level ``j`` has cells of side ``h * 2**j`` in units of ``(r, tmax)``; each
    level sorts the points by cell once and the unresolved records scan the
    3 x 3 x 3 block of cells around their own.

    ``at_places``: where the first level's cells hold so many records that scanning them
    would cost more than :data:`CROWDED_PAIRS` pairs, those records are first reduced by
    place and time (:func:`_search_by_place`): many records at one place and time (a
    register that dates its records by the day) would otherwise cost the square of
    their number. Then, if the cells are still crowded, the crowded cells' records are
    searched among themselves on a grid of their own (:func:`_spacetime_crowded`,
    ``depth`` such searches deep at most).

    ``rows``: the rows to answer (the others' rows of the result are left unset);
    ``None``: every row.
    """
    n = xa.size
    out = np.empty((n, 1 if last_only else count), dtype=np.float64)
    periodic = period is not None
    if periodic:
        assert period is not None
        t = np.mod(ta, period)
        t[t >= period] = 0.0  # np.mod of a tiny negative time may give the period itself
        t0, t1, p = 0.0, float(period), float(period)
    else:
        t = ta
        t0, t1, p = float(ta.min()), float(ta.max()), 0.0
    x0, x1 = float(xa.min()), float(xa.max())
    y0, y1 = float(ya.min()), float(ya.max())
    # Rounding of coordinates, times and distances is far below these margins.
    margin_m = 1e-9 * (max(abs(x0), abs(x1)) + max(abs(y0), abs(y1))) + 1e-9
    margin_t = 1e-9 * max(abs(t0), abs(t1)) + 1e-9
    h = _spacetime_cell(xa, ya, t, r, tmax, count)
    crowd_check = rows is None
    if rows is None:
        queries = np.arange(n, dtype=np.int64)
        pending = np.ones(n, dtype=bool)
    else:
        queries = np.sort(rows)
        pending = np.zeros(n, dtype=bool)
        pending[queries] = True
    level = 0
    while queries.size:
        if level > 2000:  # pragma: no cover - a level of three cells a side resolves all
            raise RuntimeError("space-time neighbour search did not resolve every record")
        side = h * 2.0**level
        level += 1
        cj = side * r
        if periodic:
            nt = max(1, math.floor(p / (side * tmax)))
            ctj = p / nt
        else:
            ctj = side * tmax
            nt = math.floor((t1 - t0) / ctj) + 1
        nx = math.floor((x1 - x0) / cj) + 1
        ny = math.floor((y1 - y0) / cj) + 1
        if nx * ny * nt >= 2**62:
            continue  # too many cells for one int64 key: a coarser level
        keys = _st_keys(xa, ya, t, x0, y0, t0, cj, ctj, ny, nt, periodic)
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        del keys
        starts = np.flatnonzero(np.r_[True, skeys[1:] != skeys[:-1]])
        cell_keys = np.ascontiguousarray(skeys[starts])
        cell_start = np.r_[starts, n].astype(np.int64)
        del skeys
        if crowd_check:  # the first level searched: are its cells crowded?
            crowd_check = False
            runs = np.diff(cell_start)
            crowd = runs[runs > CROWDED_RUN]
            if int(np.dot(crowd, crowd)) > CROWDED_PAIRS:
                crowded = order[np.repeat(runs > CROWDED_RUN, runs)]
                if at_places:

                    def among(some: NDArray[np.int64]) -> NDArray[np.float64]:
                        return _spacetime_search(
                            xa[some], ya[some], ta[some], subj[some], count, r, tmax, period,
                            max_d, max_g, last_only, at_places=False, depth=depth,
                        )  # fmt: skip

                    return _search_by_place((xa, ya, t), subj, count, crowded, among)
                if depth < _CROWDED_DEPTH and crowded.size < n:
                    return _spacetime_crowded(
                        xa, ya, ta, subj, count, r, tmax, period, max_d, max_g, last_only,
                        crowded, (x0, y0, t0, cj, ctj, nt), depth,
                    )  # fmt: skip
        # Queries in cell order: neighbouring queries scan the same cells.
        q_sorted = np.ascontiguousarray(order[pending[order]])
        resolved = np.empty(q_sorted.size, dtype=np.bool_)
        _st_level(
            q_sorted, xa, ya, t, subj, np.ascontiguousarray(xa[order]),
            np.ascontiguousarray(ya[order]), np.ascontiguousarray(t[order]),
            np.ascontiguousarray(subj[order]), cell_keys, cell_start, x0, y0, t0, cj, ctj,
            nx, ny, nt, periodic, p, r, tmax, int(count), max_d, max_g,
            margin_m + 1e-9 * cj, margin_t + 1e-9 * ctj, last_only, out, resolved,
        )  # fmt: skip
        pending[q_sorted[resolved]] = False
        queries = q_sorted[~resolved]
    return out


def subject_spacetime_ratios(
    x: ArrayLike,
    y: ArrayLike,
    t: ArrayLike,
    subjects: ArrayLike | None = None,
    *,
    count: int,
    r_max_m: float,
    t_max_s: float,
    period: float | None = None,
    max_distance: float = math.inf,
    max_gap: float = math.inf,
    last_only: bool = False,
) -> NDArray[np.float64]:
    """Combined space-time ratios to the 1st..``count``-th nearest other subject.

    The ratio between records ``p`` and ``q`` is
    ``max(dist(p, q) / r_max_m, |t_p - t_q| / t_max_s)``; the ratio to a subject
    is the smallest over its records; records of ``p``'s own subject never
    count. With ``period`` (86,400 for time of day) gaps wrap around the clock.
    The search is exact: the result equals a brute-force computation bit for
    bit, and ``dist`` uses the arithmetic of :func:`subject_neighbour_distances`,
    so where every gap is at most ``t_max_s`` a ratio above 1 equals the
    spatial ratio ``d / r_max_m`` exactly.

    Parameters
    ----------
    x, y
        Coordinates in metres.
    t
        Times in seconds (epoch seconds, or seconds since midnight).
    subjects
        Subject per record, or ``None`` (every record its own subject).
    count
        How many distinct other subjects to find (``k - 1``).
    r_max_m, t_max_s
        The scales of space (metres) and time (seconds), both > 0.
    period
        Clock period in seconds for cyclic gaps, or ``None``.
    max_distance, max_gap
        Records farther than ``max_distance`` metres or ``max_gap`` seconds are
        not searched for (pass ``generalise_ratio`` times ``r_max_m`` and
        ``t_max_s``: no label depends on anything farther).
    last_only
        Return only the ``count``-th column, as an ``(n, 1)`` array.

    Returns
    -------
    numpy.ndarray
        ``(n, count)`` float64 (``(n, 1)`` with ``last_only``), each row sorted
        ascending, ``inf`` where fewer than ``count`` other subjects lie within
        both limits.

    Examples
    --------
    >>> r = subject_spacetime_ratios(
    ...     [0, 10, 20], [0, 0, 0], [0, 0, 7200], count=2, r_max_m=100.0, t_max_s=3600.0
    ... )
    >>> r[0].tolist()
    [0.1, 2.0]
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    ta = np.ascontiguousarray(t, dtype=np.float64)
    n = xa.size
    if ya.shape != xa.shape or xa.ndim != 1:
        raise InputError(f"x and y must be 1-D of equal length, got {xa.shape} and {ya.shape}")
    if ta.shape != xa.shape:
        raise InputError(f"t must hold one time per record ({n}), got shape {ta.shape}")
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise InputError(f"count must be an integer >= 1, got {count!r}")
    for name, value in (("r_max_m", r_max_m), ("t_max_s", t_max_s)):
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    if period is not None and not (math.isfinite(period) and period > 0):
        raise InputError(f"period must be a finite number > 0, got {period!r}")
    if not (max_distance > 0 and max_gap > 0):
        raise InputError(f"max_distance and max_gap must be > 0, got {max_distance!r}, {max_gap!r}")
    if n == 0:
        return np.full((0, 1 if last_only else int(count)), np.inf)
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        bad = int((~(np.isfinite(xa) & np.isfinite(ya))).sum())
        raise InputError(f"{bad} records have NaN or infinite coordinates; drop or fix them")
    if not np.isfinite(ta).all():
        raise InputError(f"{int((~np.isfinite(ta)).sum())} records have a missing time")
    subj = (
        np.arange(n, dtype=np.int64)
        if subjects is None
        else (
            np.ascontiguousarray(subjects, dtype=np.int64)
            if np.asarray(subjects).dtype.kind in "iu"
            else subject_codes(subjects, n)
        )
    )
    return _spacetime_search(
        xa, ya, ta, subj, int(count), float(r_max_m), float(t_max_s),
        None if period is None else float(period), float(max_distance), float(max_gap), last_only,
    )  # fmt: skip

"""``counts``' rule on the order of a group's or class's rows (``verify._records._RowOrder``).

Within a run of rows of one key, the published (time bin, kept values) tuples must not go
down, a missing value (null or a float NaN) first, -0.0 before 0.0. The rule is compared
with a brute-force oracle on rows cut into batches at every place, and the writer's order
of ties is checked to satisfy it (a float NaN before minus infinity, -0.0 before 0.0, a
category by its value).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon import release
from geokanon.verify._records import _RowOrder

_FLOATS = st.one_of(
    st.none(), st.sampled_from([math.nan, -math.inf, math.inf, -0.0, 0.0, 1.5, -2.0])
)
_TEXTS = st.one_of(st.none(), st.sampled_from(["", "a", "B", "b", "ä", "ab", "Ω"]))
_ROWS = st.lists(
    st.tuples(st.integers(-1, 2), _TEXTS, _FLOATS, st.one_of(st.none(), st.integers(-2, 2))),
    max_size=14,
)


def _rank(v: Any) -> tuple[int, Any]:
    """The oracle's order of one value: missing (None, NaN) first, then by value, -0.0
    before 0.0 (they publish apart)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return (0, 0)
    if isinstance(v, float):
        return (1, (v, math.copysign(1.0, v)))
    return (1, v)


def _oracle(rows: list[tuple[Any, ...]]) -> int:
    """Rows (key first) that follow a row of their key (>= 0) with a larger tuple."""
    down = 0
    for a, b in itertools.pairwise(rows):
        if a[0] == b[0] and a[0] >= 0:
            down += [_rank(v) for v in a[1:]] > [_rank(v) for v in b[1:]]
    return down


def _columns(rows: list[tuple[Any, ...]], dictionary: bool) -> dict[str, pa.Array]:
    text = pa.array([r[1] for r in rows], type=pa.large_string())
    if dictionary:
        text = text.dictionary_encode()
    return {
        "time_bin": text,
        "score": pa.array([r[2] for r in rows], type=pa.float64(), from_pandas=False),
        "age": pa.array([r[3] for r in rows], type=pa.int64()),
    }


@settings(max_examples=300, deadline=None)
@given(rows=_ROWS, cuts=st.lists(st.integers(0, 14), max_size=3), dictionary=st.booleans())
def test_rows_going_down_are_counted_as_the_oracle_counts_them(
    rows: list[tuple[Any, ...]], cuts: list[int], dictionary: bool
) -> None:
    names = ["group_id", "class_id", "x", "y", "time_bin", "score", "age"]
    order = _RowOrder(names)
    assert order.columns == ["time_bin", "score", "age"]
    order.start()
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    for lo, hi in itertools.pairwise(bounds):
        part = rows[lo:hi]
        order.add(_columns(part, dictionary), np.array([r[0] for r in part], dtype=np.int64))
    assert order.down == _oracle(rows)


def test_a_new_file_starts_afresh() -> None:
    order = _RowOrder(["group_id", "class_id", "score"])
    rows_a = [(0, None, 3.0, None)]
    rows_b = [(0, None, 1.0, None)]
    order.start()
    order.add({"score": pa.array([r[2] for r in rows_a])}, np.array([0]))
    order.start()  # the next part: its first row follows no row
    order.add({"score": pa.array([r[2] for r in rows_b])}, np.array([0]))
    assert order.down == 0


def test_a_column_arrow_cannot_compare_ends_the_tuple() -> None:
    order = _RowOrder(["group_id", "class_id", "score", "tags", "age"])
    cols = {
        "score": pa.array([1.0, 1.0, 2.0]),
        "tags": pa.array([[1], [2], [3]]),  # lists: no order
        "age": pa.array([3, 1, 0]),
    }
    order.start()
    order.add(cols, np.array([0, 0, 0]))
    assert order.columns == ["score"]
    assert order.down == 0


def test_the_writers_order_of_ties_satisfies_the_rule() -> None:
    rng = np.random.default_rng(5)
    n = 400
    score = rng.integers(0, 3, n).astype(float)
    score[rng.random(n) < 0.25] = np.nan
    score[rng.random(n) < 0.25] = -np.inf
    tag = pd.Categorical(rng.choice(["b", "ä", "a", "B"], n), categories=["b", "ä", "a", "B"])
    key = rng.integers(0, 5, n)
    ties = pd.DataFrame({"_key": key, "score": score, "tag": tag})
    order = release._tie_order(ties)
    rows = [(int(key[i]), float(score[i]), str(tag[i])) for i in order]
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    # the oracle's tuples: (key, score, tag) with the tag as its text
    down = 0
    for a, b in itertools.pairwise(rows):
        if a[0] == b[0]:
            down += [_rank(v) for v in a[1:]] > [_rank(v) for v in b[1:]]
    assert down == 0
    # and the verifier's rule agrees
    rule = _RowOrder(["group_id", "class_id", "score", "tag"])
    rule.start()
    cols = {
        "score": pa.array([r[1] for r in rows], type=pa.float64()),
        "tag": pa.array([r[2] for r in rows]).dictionary_encode(),
    }
    rule.add(cols, np.array([r[0] for r in rows], dtype=np.int64))
    assert rule.down == 0


def test_tie_order_puts_a_missing_float_before_minus_infinity() -> None:
    ties = pd.DataFrame({"_key": [0, 0, 0, 0, 0], "f": [-np.inf, np.nan, 1.0, -np.inf, np.nan]})
    assert release._tie_order(ties).tolist() == [1, 4, 0, 3, 2]
    # pandas' sort of several columns ties NaN with -inf (leaving them in the source's
    # order): the writer does not use it
    by_pandas = ties.sort_values(["_key", "f"], kind="stable", na_position="first")
    assert by_pandas.index.tolist() == [0, 1, 3, 4, 2]


def test_tie_order_with_too_many_ranks_for_one_key_sorts_the_ranks() -> None:
    rng = np.random.default_rng(9)
    n = 300
    wide = pd.DataFrame({"_key": rng.integers(0, 3, n)})
    for i in range(8):  # 300**8 > 2**63: np.lexsort of the ranks
        col = rng.integers(0, n, n).astype(float)
        col[rng.random(n) < 0.1] = np.nan
        col[rng.random(n) < 0.1] = -np.inf
        wide[f"c{i}"] = col
    order = release._tie_order(wide)
    rows = [tuple(_rank(v) for v in wide.iloc[i]) for i in order]
    assert sorted(range(n), key=lambda i: tuple(_rank(v) for v in wide.iloc[i])) == order.tolist()
    assert rows == sorted(rows)


def test_tie_order_puts_minus_zero_before_zero() -> None:
    # equal as numbers, but published apart: tied, their order would be the source's
    ties = pd.DataFrame({"_key": [0, 0, 0, 0], "f": [0.0, -0.0, 0.0, -0.0]})
    order = release._tie_order(ties).tolist()
    assert order == [1, 3, 0, 2]
    rule = _RowOrder(["group_id", "class_id", "f"])
    rule.start()
    rule.add({"f": pa.array([0.0, -0.0])}, np.array([0, 0]))
    assert rule.down == 1

"""The ``deterministic`` rule: decisions equal up to exchanging rows identical in every column."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd
import pytest

from geokanon.io.read import identical_rows, table_from_frame
from geokanon.pipeline import record_tiebreak, run_core_on
from geokanon.policy import OutlierPolicy
from geokanon.verify import decisions_agree


def _frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    # few places and few attribute values: many rows identical in every column
    return pd.DataFrame(
        {
            "x": 155_000.0 + 10.0 * rng.integers(0, 4, n),
            "y": 463_000.0 + 10.0 * rng.integers(0, 3, n),
            "a": rng.integers(0, 2, n),
            "u": rng.choice(["A", "B"], n),
        }
    )


def _table(frame: pd.DataFrame, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return table_from_frame(frame, x="x", y="y", unit="u", crs="EPSG:28992", **kw)


def test_identical_rows_are_the_classes_pandas_finds():
    rng = np.random.default_rng(1)
    for n in (1, 2, 17, 300):
        frame = _frame(rng, n)
        cls = identical_rows(_table(frame))
        want = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()
        # same partition, labelled by the first row of each class
        first = pd.Series(np.arange(n)).groupby(want).transform("min").to_numpy()
        assert cls.tolist() == first.tolist()


def test_decisions_agree_up_to_exchanging_identical_rows_only():
    rng = np.random.default_rng(2)
    frame = _frame(rng, 200)
    cls = identical_rows(_table(frame))
    decision = rng.integers(0, 5, frame.shape[0])
    perm = rng.permutation(frame.shape[0])
    assert decisions_agree({"d": decision}, {"d": decision[perm]}, perm, cls)
    # exchange the decisions of two rows of one class: still the same release
    members = np.flatnonzero(cls == cls[np.argmax(np.bincount(cls))])
    i, j = members[:2]
    swapped = decision.copy()
    swapped[[i, j]] = np.r_[1, 2]
    again = swapped.copy()
    again[[i, j]] = np.r_[2, 1]
    assert decisions_agree({"d": swapped}, {"d": again[perm]}, perm, cls)
    # ... but not across two classes, nor for a row that is unlike any other
    other = np.flatnonzero(cls != cls[i])[0]
    across = swapped.copy()
    across[[i, other]] = np.r_[1, 2]
    crossed = swapped.copy()
    crossed[[i, other]] = np.r_[2, 1]
    assert not decisions_agree({"d": across}, {"d": crossed[perm]}, perm, cls)
    unique = np.arange(5)
    assert not decisions_agree({"d": unique}, {"d": unique[::-1]}, np.arange(5), np.arange(5))
    # names and lengths must match
    assert not decisions_agree({"d": decision}, {"e": decision}, perm, cls)
    assert not decisions_agree({"d": decision}, {"d": decision[:-1]}, perm, cls)


@pytest.mark.parametrize("column", ["t", "u"])
def test_the_tiebreak_tells_apart_records_that_differ_in_time_or_unit(column):
    frame = pd.DataFrame(
        {"x": [155_000.0] * 3, "y": [463_000.0] * 3, "t": [0.0, 0.0, 60.0], "u": ["A", "A", "A"]}
    )
    frame.loc[2, "u"] = "B" if column == "u" else "A"
    if column == "u":
        frame["t"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = table_from_frame(frame, time="t", unit="u", crs="EPSG:28992")
    key = record_tiebreak(t)
    assert key is not None
    assert key[0] == key[1] and key[0] != key[2]


def test_core_on_permuted_rows_agrees_up_to_identical_rows():
    rng = np.random.default_rng(4)
    frame = _frame(rng, 400)
    table = _table(frame)
    policy = OutlierPolicy(k=3, r_max_m=50.0, tau=0.5, unit_cap=1.0)
    perm = rng.permutation(len(table))
    shuffled = dataclasses.replace(
        table, x=table.x[perm], y=table.y[perm], unit_codes=table.unit_codes[perm],
        attributes=table.attributes.iloc[perm].reset_index(drop=True),
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = run_core_on(table, policy), run_core_on(shuffled, policy)
    fields = ("disposal", "group_id", "class_id")
    assert decisions_agree(
        {f: getattr(a, f) for f in fields}, {f: getattr(b, f) for f in fields}, perm,
        identical_rows(table),
    )  # fmt: skip
    assert np.array_equal(a.group_x, b.group_x) and np.array_equal(a.group_y, b.group_y)

"""Hypothesis strategies for point sets that look like the data geokanon is for.

Importing this module imports Hypothesis (``pip install hypothesis``);
:mod:`geokanon.testing` itself does not. Every strategy draws a
:class:`pandas.DataFrame` with columns ``x``, ``y`` (metres, rounded to the
centimetre like a real source), ``subject`` (string ids, unique per person) and
``unit`` (a grid-cell id), ready for
``geokanon.io.table_from_frame(df, subject="subject", unit="unit", crs=...)``.

Sizes, counts and spreads are drawn by Hypothesis (so they shrink); positions
come from a NumPy generator seeded by a drawn integer, which keeps drawing fast
for hundreds of points.

- :func:`towns`: a few dense clusters (the easy, ``ok`` records);
- :func:`rural_scatter`: points spread thinly over the whole area (the outliers);
- :func:`households`: several subjects at one address (co-located, distinct);
- :func:`repeat_visitors`: one subject with many records around one place (a
  group of five that is one person five times is not a group);
- :func:`point_sets`: a mixture of all four, the shape of a real release input.

Examples
--------
>>> from hypothesis import given, settings
>>> from geokanon.testing.strategies import point_sets
>>> @settings(max_examples=5, deadline=None)
... @given(point_sets(max_records=60))
... def test_subjects_are_strings(df):
...     assert df["subject"].map(type).eq(str).all()
>>> test_subjects_are_strings()
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only without hypothesis
    raise ImportError(
        "geokanon.testing.strategies needs Hypothesis: pip install hypothesis"
    ) from exc

__all__ = ["households", "point_sets", "repeat_visitors", "rural_scatter", "towns"]

#: Side of the grid cells that make the ``unit`` column, metres.
UNIT_CELL_M = 5_000.0


def _frame(
    x: np.ndarray, y: np.ndarray, subjects: list[str], unit_cell_m: float = UNIT_CELL_M
) -> pd.DataFrame:
    x = np.round(np.asarray(x, dtype=np.float64), 2)
    y = np.round(np.asarray(y, dtype=np.float64), 2)
    ix = np.floor(x / unit_cell_m).astype(np.int64)
    iy = np.floor(y / unit_cell_m).astype(np.int64)
    unit = [f"U{a}_{b}" for a, b in zip(ix.tolist(), iy.tolist(), strict=True)]
    return pd.DataFrame({"x": x, "y": y, "subject": subjects, "unit": unit})


def _disc(rng: np.random.Generator, n: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    r = radius * np.sqrt(rng.random(n))
    a = 2 * np.pi * rng.random(n)
    return r * np.cos(a), r * np.sin(a)


_SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def towns(
    draw: Any,
    *,
    min_towns: int = 1,
    max_towns: int = 4,
    min_size: int = 5,
    max_size: int = 60,
    spread_m: float = 300.0,
    extent_m: float = 20_000.0,
    prefix: str = "t",
) -> pd.DataFrame:
    """Dense clusters: each town ``min_size..max_size`` people within ``spread_m`` of a centre.

    Parameters
    ----------
    min_towns, max_towns
        How many towns.
    min_size, max_size
        People per town (one record each).
    spread_m
        Town radius, metres (points are uniform over the disc).
    extent_m
        Side of the square the town centres are drawn in, metres.
    prefix
        Prefix of the subject ids (keep parts of one set distinct).

    Returns
    -------
    SearchStrategy of DataFrame
    """
    n_towns = draw(st.integers(min_towns, max_towns))
    sizes = [draw(st.integers(min_size, max_size)) for _ in range(n_towns)]
    rng = np.random.default_rng(draw(_SEEDS))
    xs, ys = [], []
    for size in sizes:
        cx, cy = rng.random(2) * extent_m
        dx, dy = _disc(rng, size, spread_m)
        xs.append(cx + dx)
        ys.append(cy + dy)
    x = np.concatenate(xs) if xs else np.zeros(0)
    y = np.concatenate(ys) if ys else np.zeros(0)
    return _frame(x, y, [f"{prefix}{i}" for i in range(x.size)])


@st.composite
def rural_scatter(
    draw: Any,
    *,
    min_size: int = 1,
    max_size: int = 30,
    extent_m: float = 20_000.0,
    prefix: str = "r",
) -> pd.DataFrame:
    """People spread uniformly and thinly over the area: the isolated farmsteads.

    Parameters
    ----------
    min_size, max_size
        How many people (one record each).
    extent_m
        Side of the square, metres.
    prefix
        Prefix of the subject ids.

    Returns
    -------
    SearchStrategy of DataFrame
    """
    n = draw(st.integers(min_size, max_size))
    rng = np.random.default_rng(draw(_SEEDS))
    x, y = rng.random(n) * extent_m, rng.random(n) * extent_m
    return _frame(x, y, [f"{prefix}{i}" for i in range(n)])


@st.composite
def households(
    draw: Any,
    *,
    min_households: int = 1,
    max_households: int = 10,
    max_members: int = 6,
    extent_m: float = 20_000.0,
    prefix: str = "h",
) -> pd.DataFrame:
    """Households: 1..``max_members`` distinct subjects sharing one exact address.

    Parameters
    ----------
    min_households, max_households
        How many addresses.
    max_members
        Most people at one address.
    extent_m
        Side of the square, metres.
    prefix
        Prefix of the subject ids.

    Returns
    -------
    SearchStrategy of DataFrame
    """
    n = draw(st.integers(min_households, max_households))
    members = [draw(st.integers(1, max_members)) for _ in range(n)]
    rng = np.random.default_rng(draw(_SEEDS))
    ax, ay = rng.random(n) * extent_m, rng.random(n) * extent_m
    x = np.repeat(ax, members)
    y = np.repeat(ay, members)
    return _frame(x, y, [f"{prefix}{i}" for i in range(x.size)])


@st.composite
def repeat_visitors(
    draw: Any,
    *,
    min_subjects: int = 1,
    max_subjects: int = 5,
    min_visits: int = 2,
    max_visits: int = 10,
    spread_m: float = 30.0,
    extent_m: float = 20_000.0,
    prefix: str = "v",
) -> pd.DataFrame:
    """Repeat visitors: each subject has ``min_visits..max_visits`` records near one place.

    Parameters
    ----------
    min_subjects, max_subjects
        How many people.
    min_visits, max_visits
        Records per person.
    spread_m
        How far a visit lies from the person's place, metres (0: exactly there).
    extent_m
        Side of the square, metres.
    prefix
        Prefix of the subject ids.

    Returns
    -------
    SearchStrategy of DataFrame
    """
    n = draw(st.integers(min_subjects, max_subjects))
    visits = [draw(st.integers(min_visits, max_visits)) for _ in range(n)]
    rng = np.random.default_rng(draw(_SEEDS))
    px, py = rng.random(n) * extent_m, rng.random(n) * extent_m
    total = int(sum(visits))
    dx, dy = _disc(rng, total, spread_m)
    x = np.repeat(px, visits) + dx
    y = np.repeat(py, visits) + dy
    subjects = [f"{prefix}{i}" for i, v in enumerate(visits) for _ in range(v)]
    return _frame(x, y, subjects)


@st.composite
def point_sets(
    draw: Any,
    *,
    max_records: int = 400,
    extent_m: float = 20_000.0,
    min_subjects: int = 2,
) -> pd.DataFrame:
    """A mixture of towns, rural scatter, households and repeat visitors.

    Parameters
    ----------
    max_records
        Upper bound on the records drawn (parts are sized to fit).
    extent_m
        Side of the study area, metres.
    min_subjects
        At least this many distinct subjects (so that ``k`` up to it is valid).

    Returns
    -------
    SearchStrategy of DataFrame
        Rows in a drawn order (a release must not depend on it).

    Examples
    --------
    >>> df = point_sets(max_records=50).example()  # doctest: +SKIP
    >>> sorted(df.columns)  # doctest: +SKIP
    ['subject', 'unit', 'x', 'y']
    """
    budget = max(max_records, 8)
    town_max = max(5, budget // 8)
    parts = [
        draw(towns(max_towns=3, max_size=town_max, extent_m=extent_m)),
        draw(rural_scatter(min_size=0, max_size=max(1, budget // 10), extent_m=extent_m)),
        draw(households(min_households=0, max_households=max(1, budget // 40),
                        extent_m=extent_m)),
        draw(repeat_visitors(min_subjects=0, max_subjects=max(1, budget // 80),
                             extent_m=extent_m)),
    ]  # fmt: skip
    frame = pd.concat(parts, ignore_index=True)
    if len(frame) > budget:
        frame = frame.iloc[:budget]
    if frame["subject"].nunique() < min_subjects:
        extra = draw(rural_scatter(min_size=min_subjects, max_size=min_subjects, prefix="e"))
        frame = pd.concat([frame, extra], ignore_index=True)
    order = draw(st.permutations(range(len(frame))))
    return frame.iloc[list(order)].reset_index(drop=True)

"""The ``deterministic`` rule (the release writer runs it with a second build).

The rule, exactly as implemented
--------------------------------
``deterministic``
    Needs a second build, so the release writer runs it (the core again on the
    input's rows in a seeded random order) and it is reported here as not
    checked (:attr:`VerificationReport.skipped`). The two runs' per-group and
    per-class outcomes (representatives, class levels and units) must be equal,
    and their per-record decisions equal up to exchanging records identical in
    every column (:func:`geokanon.io.read.identical_rows`): for every class of
    identical records, the multiset of (label, final label, disposal, group id,
    class id) is the same in both runs (:func:`decisions_agree`). The release
    files are written from published values only, so they are then
    byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def decisions_agree(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    perm: Any,
    classes: Any,
) -> bool:
    """The ``deterministic`` rule for the per-record decisions of two runs.

    Parameters
    ----------
    first, second
        Per-record decision arrays by name (e.g. ``disposal``, ``group_id``); the
        same names in both. ``second`` is from a run on the first run's input with
        its rows reordered: its record ``i`` is the first run's record ``perm[i]``.
    perm
        The reordering, a permutation of ``0..n-1``.
    classes
        Per record of the first run's input, a class id shared exactly by the
        records identical in every column (:func:`geokanon.io.read.identical_rows`).

    Returns
    -------
    bool
        Whether every record's decisions agree, up to exchanging records of one
        class: for every class, the multiset of decision tuples is the same in
        both runs. A record unlike any other must keep exactly its decisions.

    Examples
    --------
    >>> import numpy as np
    >>> perm = np.array([1, 0, 2])  # the second run saw rows 1, 0, 2
    >>> same = np.array([0, 0, 2])  # rows 0 and 1 are identical in every column
    >>> decisions_agree({"g": np.array([4, 5, 6])}, {"g": np.array([4, 5, 6])}, perm, same)
    True
    >>> decisions_agree({"g": np.array([4, 5, 6])}, {"g": np.array([4, 6, 5])}, perm, same)
    False
    """
    cls = np.asarray(classes)
    p = np.asarray(perm)
    n = cls.size
    if set(first) != set(second) or p.shape != (n,):
        return False
    if not np.array_equal(np.sort(p), np.arange(n)):
        return False
    names = sorted(first)
    a = [np.asarray(first[name]) for name in names]
    b = [np.asarray(second[name]) for name in names]
    if any(v.shape != (n,) for v in (*a, *b)):
        return False
    cls_b = cls[p]
    # Both runs' records sorted by (class, decisions): equal sequences exactly when every
    # class holds the same multiset of decisions in both.
    order_a = np.lexsort((*a[::-1], cls))
    order_b = np.lexsort((*b[::-1], cls_b))
    return bool(
        np.array_equal(cls[order_a], cls_b[order_b])
        and all(np.array_equal(u[order_a], v[order_b]) for u, v in zip(a, b, strict=True))
    )

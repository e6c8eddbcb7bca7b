"""The arrays the local search starts from, captured from a real grouping (for tests of
:func:`geokanon.grouping._improve` and its parts)."""

from __future__ import annotations

import numpy as np

import geokanon.grouping as grouping
from geokanon.policy import OutlierPolicy


def local_search_input(
    x: np.ndarray, y: np.ndarray, subjects: np.ndarray, policy: OutlierPolicy
) -> dict[str, object]:
    """The arguments :func:`geokanon.grouping.group_records` passes to
    ``_improve_groups`` (the groups the construction made, before the local search)."""
    seen: dict[str, object] = {}

    def capture(atom_group, n_groups, ax, ay, aw, asub, k, r_work, step, **_):  # type: ignore[no-untyped-def]
        seen.update(atom_group=atom_group.copy(), n_groups=n_groups, ax=ax, ay=ay, aw=aw,
                    asub=asub, k=k, r_work=r_work, step=step)  # fmt: skip
        return 0

    orig = grouping._improve_groups
    grouping._improve_groups = capture
    try:
        grouping.group_records(x, y, subjects, policy)
    finally:
        grouping._improve_groups = orig
    return seen

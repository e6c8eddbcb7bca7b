"""What several checks derive from a release (members, representatives, unit rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from geokanon.verify._arrays import (
    IdLookup,
    argsort_stable,
    distinct_counts,
    nunique,
)
from geokanon.verify._once import once
from geokanon.verify._reader import WITHHELD, ReleaseReader, cell_value
from geokanon.verify._results import Unreadable


def group_members(rel: ReleaseReader) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(row indices of group members sorted by group, their group ids)."""

    def make() -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        gid = rel.gid
        hi = int(gid.max(initial=-1))
        if gid.dtype == np.int64 and hi < 4 * gid.size + 1024:  # ids in a short range
            return _members_by_counting(np.ascontiguousarray(gid), hi + 1)
        idx = np.flatnonzero(gid >= 0)
        order = idx[argsort_stable(gid[idx])]
        return order, gid[order]

    return once(rel, "_members", make)


@nb.njit(cache=True, nogil=True)
def _members_by_counting(
    gid: NDArray[np.int64], span: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """:func:`group_members` of group ids in ``0 .. span - 1`` (-1: none), by counting: the
    rows of each group in row order, groups in id order (a stable sort by id)."""
    at = np.zeros(span + 1, dtype=np.int64)
    for i in range(gid.size):
        if gid[i] >= 0:
            at[gid[i] + 1] += 1
    for j in range(span):
        at[j + 1] += at[j]
    order = np.empty(at[span], dtype=np.int64)
    ids = np.empty(at[span], dtype=np.int64)
    for j in range(span):
        ids[at[j] : at[j + 1]] = j
    for i in range(gid.size):
        g = gid[i]
        if g >= 0:
            order[at[g]] = i
            at[g] += 1
    return order, ids


def member_groups(rel: ReleaseReader) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(:func:`group_members`' rows, each one's position in :func:`rep_arrays`' groups, -1
    for a group that is not published); the lookup is prepared once per reader, the
    positions (one per member) are not held."""
    look = once(rel, "_group_lookup", lambda: IdLookup(rep_arrays(rel)[0]))
    rows, mg = group_members(rel)
    return rows, look(mg)


def group_positions(rel: ReleaseReader) -> NDArray[np.int64]:
    """Each audit row's group's position in :func:`rep_arrays`' groups (-1: in no group,
    or in one that is not published); the lookup is prepared once per reader (ids 0..G-1
    in order: the audit's own group ids, as they are)."""
    look = once(rel, "_group_lookup", lambda: IdLookup(rep_arrays(rel)[0]))
    return look(rel.gid)


def rep_arrays(
    rel: ReleaseReader,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """(group ids, x, y) of ``groups.parquet`` (read once per reader; a file that fails
    is refused again at every call)."""
    return once(rel, "_rep_arrays", lambda: _rep_arrays(rel))


def _rep_arrays(
    rel: ReleaseReader,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    g = rel.groups
    gids = rel.group_ids
    if (gids < 0).any() or nunique(gids) != gids.size:
        raise Unreadable("groups.parquet group_id has nulls or duplicates")
    gx = pd.to_numeric(g["x"]).to_numpy(dtype=np.float64)
    gy = pd.to_numeric(g["y"]).to_numpy(dtype=np.float64)
    return gids, gx, gy


def audit_holds(rel: ReleaseReader, xs: NDArray[np.float64], ys: NDArray[np.float64]) -> bool:
    """Whether the audit's working coordinates are exactly ``xs``, ``ys`` (source rows)
    row by row: then every check of one is a check of the other."""

    def make() -> tuple[Any, Any, bool]:
        rows = rel.source_rows
        same = False
        if rows is not None and xs.size == rows.size and ys.size == rows.size:
            xm, ym = rel.xy_m
            same = bool(np.array_equal(xs[rows], xm) and np.array_equal(ys[rows], ym))
        return xs, ys, same

    # kept with the arrays themselves, so their ids name them while it is kept
    held = once(rel, f"_audit_holds {id(xs)} {id(ys)}", make)
    return held[2] if held[0] is xs and held[1] is ys else make()[2]


def suppressed_subjects(rel: ReleaseReader) -> tuple[int, int]:
    """(distinct subjects suppressed, distinct subjects), worked out once per release."""

    def make() -> tuple[int, int]:
        subj = rel.subjects
        return nunique(subj[rel.is_disposal("suppressed")]), nunique(subj)

    return once(rel, "_suppressed_subjects", make)


def unit_subjects(
    rel: ReleaseReader,
) -> tuple[NDArray[np.object_], NDArray[np.int64], NDArray[np.int64]]:
    """(unit ids, distinct subjects per unit, distinct suppressed subjects per unit), once.

    A subject counts in every unit it has records in. The partitioned verifier fills
    this (and :func:`suppressed_subjects`) from its tasks' distinct triples, so the
    checks that read only these figures are the same code for both layouts.
    """

    def make() -> tuple[NDArray[np.object_], NDArray[np.int64], NDArray[np.int64]]:
        ucode, names = rel.unit_codes
        sup = rel.is_disposal("suppressed")
        subj = rel.subjects
        size = distinct_counts(ucode, subj, names.size, rel.subject_codes)
        n_sup = distinct_counts(ucode[sup], subj[sup], names.size)
        return names, size, n_sup

    return once(rel, "_unit_subjects", make)


def _unit_class_records(rel: ReleaseReader) -> dict[str, int]:
    """Records of each unit's own (``unit``-level) class, by unit id."""
    classes = rel.classes
    out: dict[str, int] = {}
    if len(classes) and "level" in classes and "unit" in classes:
        unit_level = classes["level"].astype(str) == "unit"
        for u, size in zip(
            classes.loc[unit_level, "unit"].astype(str),
            pd.to_numeric(classes.loc[unit_level, "n_records"]),
            strict=True,
        ):
            out[str(u)] = out.get(str(u), 0) + int(size)
    return out


def _synthetic_cell(raw: object) -> int | str:
    """A unit's published synthetic count (units.csv ``synthetic``, else the manifest's)."""
    value = cell_value(raw)
    if value is None:
        return 0
    if value == WITHHELD:
        raise Unreadable("a unit's synthetic count must be an integer or '<k'")
    return value


def unit_rows(rel: ReleaseReader) -> list[dict[str, Any]]:
    """units.csv's rows as the checks read them (worked out once per reader; each call
    has its own copies)."""
    return [dict(r) for r in once(rel, "_unit_rows", lambda: _unit_rows(rel))]


def _unit_rows(rel: ReleaseReader) -> list[dict[str, Any]]:
    t = rel.units_table
    syn = rel.manifest.get("synthetic") or {}
    per_unit = syn.get("per_unit") if isinstance(syn, Mapping) else None
    per_unit = per_unit if isinstance(per_unit, Mapping) else {}
    class_records = _unit_class_records(rel)
    n = len(t)
    units = t["unit"].tolist()

    def column(name: str) -> list[Any]:
        return t[name].tolist() if name in t.columns else [None] * n

    syn_cells = (
        t["synthetic"].tolist()
        if "synthetic" in t.columns
        else [per_unit.get(str(u), 0) for u in units]
    )
    rows: list[dict[str, Any]] = []
    for u, rel_cell, sup_cell, total_cell, up_cell, syn_cell in zip(
        units, t["released"].tolist(), t["suppressed"].tolist(), column("source_total"),
        column("generalised_up"), syn_cells, strict=True,
    ):  # fmt: skip
        released = cell_value(rel_cell)
        if not isinstance(released, int):
            raise Unreadable("units.csv released must be an integer in every row")
        sup = cell_value(sup_cell)
        if sup is None:
            raise Unreadable("units.csv suppressed is empty in some row")
        total = cell_value(total_cell)
        up = cell_value(up_cell)
        rows.append(
            {
                "unit": str(u),
                "released": released,
                "suppressed": sup,
                "generalised_up": up,
                "source_total": total,
                "synthetic": _synthetic_cell(syn_cell),
                "class_records": class_records.get(str(u), 0),
            }
        )
    return rows

"""The ``counts`` check: every published count is what the audit assigns.

The rule, exactly as implemented
--------------------------------
``counts``
    Group and class sizes (real plus synthetic rows), the set of groups and
    classes, ``records.parquet``/``records.csv`` row counts and rows per group
    and class, each group's ``unit`` (the unit holding most of its members,
    ties to the first unit id in sort order), each unit's ``released`` (the
    records of the groups whose ``unit`` it is, plus its ``unit``-level class;
    by the members' own units when ``groups.parquet`` has no ``unit``),
    ``suppressed`` and ``generalised_up`` (the integer, or ``<k`` exactly when
    1..k-1 subjects, or ``withheld``), ``source_total`` (records in the unit;
    ``<k`` exactly when the unit has 1..k-1 subjects, or ``withheld``),
    the manifest's ``counts`` (records per disposal; ``suppressed`` may read
    ``<k`` exactly when 1..k-1 subjects, or ``withheld``) and
    ``suppressed_share`` (within 5e-7 of the subject or the record share) all
    equal what the audit assigns; the audit is self-consistent (a group id
    exactly for grouped/merged rows, a class id exactly for generalised rows)
    and agrees with the source (rows, subjects, units). With the source, the
    manifest's ``subject_ids_merged`` equals the distinct source ids minus the
    distinct subjects. ``release.gpkg`` (when present) has exactly the declared layers,
    each in the manifest's ``crs``, each identical to its file (:mod:`.gpkg`), and every
    group extent is the circumscribed polygon of its group's disc, vertex by vertex.

    The records files, row by row (:mod:`~geokanon.verify._records`, one streaming
    pass): every row of ``records.parquet`` belongs to exactly one published group
    or class; a group row's ``level`` is ``group``, its ``unit`` null, its ``x``,
    ``y`` and point geometry exactly its group's representative in
    ``groups.parquet``; a class row's ``level`` and ``unit`` are its class's in
    ``classes.parquet``, its ``x``, ``y`` and geometry null. Per group and per
    class, the multiset of published (``time_bin``, kept columns) tuples equals its
    members' (the audit's ``time_bin``; the source's kept values at their
    ``source_row``, read as the published column's type; kept values only with the
    source given), by keyed 64-bit multiset hashes a column at a time, then whole
    tuples; with synthetic records, every member's tuple is published at least as
    often as the members hold it and every other one is a member's. A column of
    the records that is no source column fails. ``records.csv`` has
    ``records.parquet``'s columns less ``geometry``, in order, and row by row the
    same values (read with the Parquet file's column types; an integer may read
    ``3.0``), by keyed hashes tied to the row number. In each records file (each part
    of a partitioned release) the rows of one group or class stand together and go by
    their (time bin, kept values) tuple, never down (each column ascending, a missing
    value or float NaN first, -0.0 before 0.0), so that the rows' order cannot tell
    which source record a row is.

One set of rules for both layouts
---------------------------------
The rules above that a partitioned release can be held to are functions of
per-partition tallies (:func:`audit_tally`, :func:`id_tally`, :func:`group_units`,
:func:`class_units`), merged by adding them up and judged by :func:`audit_problems`,
:func:`id_problems`, :func:`records_total_problems`, :func:`unit_problems` and
:func:`manifest_count_problems`. :func:`check_counts` is one partition's tallies judged;
:mod:`geokanon.verify.partitioned` merges those of every source partition and release
part and calls the same functions (same messages). A part's id and majority-unit
tallies are taken from a reader of the part by the functions that take a single-file
release's (:func:`id_tallies`, :func:`group_unit_tally`). The records files' row-by-row pass is
:mod:`~geokanon.verify._records`' in both layouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from geokanon.verify._arrays import (
    dense_codes,
    distinct_counts,
    first_other_line,
    in_sorted,
    int_ids,
    nunique,
    positions_in,
    sorted_distinct,
    text_codes,
    value_counts,
)
from geokanon.verify._derived import group_members, suppressed_subjects, unit_rows
from geokanon.verify._once import once
from geokanon.verify._reader import (
    LESS_THAN_K,
    WITHHELD,
    ReleaseReader,
    audit_filter,
    cell_value,
    read_options,
)
from geokanon.verify._records import RecordRows, record_rows
from geokanon.verify._results import CheckResult
from geokanon.verify.gpkg import (
    geoparquet_bbox_problems,
    gpkg_count_problems,
    point_file_problems,
)

#: The disposals an audit row may carry.
DISPOSALS = ("grouped", "merged", "generalised", "suppressed")


# ----------------------------------------------------------------------------
# The counts rules as functions of per-partition aggregates.
#
# A release is read partition by partition (a single-file release is one partition):
# each partition gives its tallies (``audit_tally``, ``id_tally``, ``group_units``,
# ``class_units``), the tallies are merged (``merge``: added up; distinct subjects per
# unit are counted on the merged (unit, subject) pairs), and the merged tallies are
# judged (``audit_problems``, ``id_problems``, ``records_total_problems``,
# ``unit_problems``, ``manifest_count_problems``, ``subject_ids_merged_problems``).
# ``check_counts`` and ``geokanon.verify.partitioned`` call the same functions.
# ----------------------------------------------------------------------------


@dataclass
class AuditTally:
    """The audit's rows against their own rules and the source's units, in one partition.

    Attributes
    ----------
    unknown, group_mismatch, class_mismatch
        Rows with an unknown disposal; rows whose group id is set other than exactly for
        ``grouped``/``merged``; rows whose class id is set other than exactly for
        ``generalised``.
    wrong_unit
        Rows whose unit is not the source's (0 when the source's units are not known).
    disposals
        Rows per disposal of :data:`DISPOSALS`.
    """

    unknown: int = 0
    group_mismatch: int = 0
    class_mismatch: int = 0
    wrong_unit: int = 0
    disposals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DISPOSALS, 0))

    def merge(self, other: AuditTally) -> AuditTally:
        """The tally of both partitions (added up)."""
        return AuditTally(
            self.unknown + other.unknown,
            self.group_mismatch + other.group_mismatch,
            self.class_mismatch + other.class_mismatch,
            self.wrong_unit + other.wrong_unit,
            {d: self.disposals[d] + other.disposals[d] for d in DISPOSALS},
        )


def audit_tally(
    is_disposal: Callable[..., NDArray[np.bool_]],
    gid: NDArray[np.int64],
    cid: NDArray[np.int64],
    wrong_unit: int = 0,
) -> AuditTally:
    """The :class:`AuditTally` of one partition's audit rows.

    ``is_disposal(*names)`` is the mask of the rows whose disposal is one of ``names``;
    ``gid`` and ``cid`` their group and class ids (-1: none).
    """
    in_group = is_disposal("grouped", "merged")
    return AuditTally(
        unknown=int(np.count_nonzero(~is_disposal(*DISPOSALS))),
        group_mismatch=int(np.count_nonzero((gid >= 0) != in_group)),
        class_mismatch=int(np.count_nonzero((cid >= 0) != is_disposal("generalised"))),
        wrong_unit=wrong_unit,
        disposals={d: int(np.count_nonzero(is_disposal(d))) for d in DISPOSALS},
    )


def audit_problems(t: AuditTally) -> list[str]:
    """What the merged :class:`AuditTally` shows wrong."""
    problems = []
    if t.unknown:
        problems.append(f"{t.unknown} audit rows have an unknown disposal")
    if t.group_mismatch:
        problems.append(f"{t.group_mismatch} audit rows: group id and disposal disagree")
    if t.class_mismatch:
        problems.append(f"{t.class_mismatch} audit rows: class id and disposal disagree")
    if t.wrong_unit:
        problems.append(f"{t.wrong_unit} audit rows carry a unit other than the source's")
    return problems


def subject_ids_merged_problems(manifest: Mapping[str, Any], merged: int | None) -> list[str]:
    """The manifest's ``subject_ids_merged`` against the source's (``merged``: distinct
    source ids less distinct subjects, over every partition; ``None``: not known)."""
    shown = manifest.get("subject_ids_merged")
    if shown is None or merged is None or shown == merged:
        return []
    return [
        f"manifest subject_ids_merged is {shown!r}; the source's ids merge {merged} (ids "
        "differing only by case, spacing or Unicode form are one subject)"
    ]


@dataclass
class IdTally:
    """Published groups (or classes) against the audit's, in one partition of their ids.

    Attributes
    ----------
    repeated
        Published rows whose id another row has too.
    missing, extra
        Audit ids not published; published ids without audit records.
    wrong_size
        Ids whose ``n_records`` is not their audit and synthetic records.
    rows_differ
        Partitions whose records rows per id differ from the audit's.
    """

    repeated: int = 0
    missing: int = 0
    extra: int = 0
    wrong_size: int = 0
    rows_differ: int = 0

    def merge(self, other: IdTally) -> IdTally:
        """The tally of both partitions (added up)."""
        return IdTally(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def id_tally(
    expected: pd.Series,
    pub_ids: NDArray[np.int64],
    pub_sizes: NDArray[np.int64],
    rows_per_id: pd.Series | None,
) -> IdTally:
    """The :class:`IdTally` of one partition.

    ``expected``: records per id (audit and synthetic; :func:`value_counts`);
    ``pub_ids``/``pub_sizes``: the published table's ids and ``n_records``;
    ``rows_per_id``: the records files' rows per id, as :func:`value_counts` counts
    them (``None``: not read).
    """
    published = pd.Series(pub_sizes, index=pub_ids)
    # a repeated id (counted in ``repeated``): its first row's size is compared
    published = published[~published.index.duplicated()]
    # the distinct ids of either side missing from the other (sorted, not hashed)
    exp_ids = expected.index.to_numpy(dtype=np.int64)
    pub_set = sorted_distinct(pub_ids)
    common = expected.index.intersection(published.index)
    return IdTally(
        repeated=int(pub_ids.size - nunique(pub_ids)),
        missing=int(np.count_nonzero(~in_sorted(pub_set, exp_ids))),
        extra=int(np.count_nonzero(~in_sorted(exp_ids, pub_set))),
        wrong_size=int((expected[common].to_numpy() != published[common].to_numpy()).sum()),
        rows_differ=int(rows_per_id is not None and not rows_per_id.equals(expected)),
    )


def id_problems(what: str, t: IdTally, records: str = "records.parquet") -> list[str]:
    """What the merged :class:`IdTally` of ``what`` (``group`` or ``class``) shows wrong;
    ``records`` names the records files in the messages."""
    problems = []
    if t.repeated:
        problems.append(f"{what} ids repeat in the release")
    if t.missing:
        problems.append(f"{t.missing} audit {what}s are not published")
    if t.extra:
        problems.append(f"{t.extra} published {what}s have no audit records")
    if t.wrong_size:
        problems.append(f"{t.wrong_size} {what}s publish a wrong n_records")
    if t.rows_differ:
        problems.append(f"{records} rows per {what} differ from the audit")
    return problems


def records_total_problems(rows: int, released: int, records: str = "records.parquet") -> list[str]:
    """The records files' rows (summed over partitions) against the records the audit
    releases (every disposal but ``suppressed``, and the synthetic records)."""
    if rows == released:
        return []
    return [f"{records} has {rows} rows, the audit releases {released}"]


@nb.njit(cache=True, nogil=True)
def _majority_units(
    g: NDArray[np.int64], u: NDArray[np.int64], ids: NDArray[np.int64], m: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per group code ``0..m-1`` of the rows (``g``: each row's group code, ``u``: its unit
    code, ``ids``: its group id): the unit code most rows of the group hold, the smallest
    of those tied (-1: no row), the group's rows, and its id (0: no row). The rows are
    ordered by group by counting; a group's units are counted directly (a few rows) or
    sorted and counted in runs."""
    at = np.zeros(m + 1, dtype=np.int64)
    gid_of = np.zeros(m, dtype=np.int64)
    for i in range(g.size):
        at[g[i] + 1] += 1
        gid_of[g[i]] = ids[i]
    for j in range(m):
        at[j + 1] += at[j]
    units = np.empty(g.size, dtype=np.int64)
    fill = at[:m].copy()
    for i in range(g.size):
        units[fill[g[i]]] = u[i]
        fill[g[i]] += 1
    major, size = _majority_in_runs(units, at)
    return major, size, gid_of


@nb.njit(cache=True, nogil=True)
def _majority_in_runs(
    units: NDArray[np.int64], at: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per run ``units[at[j]:at[j + 1]]`` (a group's members' unit codes): the unit most of
    them hold, the smallest of those tied (-1: an empty run), and the run's length. A
    run's units are counted directly (a few) or sorted and counted in runs."""
    m = at.size - 1
    major = np.full(m, -1, dtype=np.int64)
    size = np.zeros(m, dtype=np.int64)
    for j in range(m):
        a = at[j]
        b = at[j + 1]
        size[j] = b - a
        if b <= a:
            continue
        best = units[a]
        most = 0
        if b - a <= 64:  # a few members: each unit counted directly
            for i in range(a, b):
                count = 0
                for h in range(a, b):
                    if units[h] == units[i]:
                        count += 1
                if count > most or (count == most and units[i] < best):
                    most = count
                    best = units[i]
        else:
            run = np.sort(units[a:b])
            count = 0
            for i in range(run.size):
                count = count + 1 if i > 0 and run[i] == run[i - 1] else 1
                if count > most:  # strictly more: the smallest unit of a tie stays
                    most = count
                    best = run[i]
        major[j] = best
    return major, size


def group_units(
    gid: NDArray[np.int64],
    ucode: NDArray[np.int64],
    syn_gid: NDArray[np.int64],
    syn_ucode: NDArray[np.int64],
    n_units: int,
    pub_gid: NDArray[np.int64],
    pub_ucode: NDArray[np.int64] | None,
) -> tuple[int, NDArray[np.int64]]:
    """Each group's unit, and the records it releases per unit, in one partition.

    Every group counts whole in the unit holding most of its members (ties: the first
    unit id in sort order). A group's members are in one partition (a partitioned
    release routes them to the part of their group), so the majority is judged here.

    Parameters
    ----------
    gid, ucode
        Every group member's group id and unit code; codes ``0..n_units-1`` number the
        units in sort order.
    syn_gid, syn_ucode
        The synthetic records' group ids and unit codes (-1: unknown).
    n_units
        The number of unit codes.
    pub_gid, pub_ucode
        The published groups' ids and the code of each one's ``unit`` (-1: a unit no
        record has); ``pub_ucode`` ``None``: the table has no ``unit``, and every record
        counts in its own unit.

    Returns
    -------
    tuple
        (groups that name a unit other than their members' majority, records released
        per unit code: ``n_units + 1`` entries, the last for an unknown unit).
    """
    nu = n_units
    if pub_ucode is None:
        return 0, _unit_tallies(ucode, nu) + _unit_tallies(syn_ucode, nu)
    gcode, m = dense_codes(np.concatenate([gid, syn_gid]))
    n_members = gid.size
    g_members = gcode[:n_members]
    # per group: the unit code of the most members (ties: the smallest; -1: no
    # members), its members and its id
    major, size, gid_of = _majority_units(
        np.ascontiguousarray(g_members, dtype=np.int64),
        np.ascontiguousarray(ucode, dtype=np.int64),
        np.ascontiguousarray(gid, dtype=np.int64),
        m,
    )
    return _group_units_judged(
        major, size, gid_of, major[gcode[n_members:]], nu, pub_gid, pub_ucode
    )


def _unit_tallies(codes: NDArray[np.int64], nu: int) -> NDArray[np.int64]:
    """Records per unit code ``0..nu-1``, and (the last entry) of an unknown unit (-1)."""
    return np.bincount(np.where(codes >= 0, codes, nu), minlength=nu + 1).astype(np.int64)


def _group_units_judged(
    major: NDArray[np.int64],
    size: NDArray[np.int64],
    gid_of: NDArray[np.int64],
    syn_major: NDArray[np.int64],
    nu: int,
    pub_gid: NDArray[np.int64],
    pub_ucode: NDArray[np.int64],
) -> tuple[int, NDArray[np.int64]]:
    """:func:`group_units`' result from each group's majority unit ``major``, members
    ``size`` and id ``gid_of``, and each synthetic record's group's majority unit
    ``syn_major`` (-1: its group has no members)."""
    has_members = size > 0
    at = positions_in(pub_gid, gid_of[has_members])
    named = at >= 0
    wrong = int(np.count_nonzero(pub_ucode[at[named]] != major[has_members][named]))
    # every member counts in its group's unit (a group with members has one)
    released = np.zeros(nu + 1, dtype=np.int64)
    released[: max(nu, 0)] += np.bincount(
        major[has_members], weights=size[has_members], minlength=nu
    ).astype(np.int64)[:nu]
    return wrong, released + _unit_tallies(syn_major, nu)


def class_units(
    cid: NDArray[np.int64],
    syn_cid: NDArray[np.int64],
    classes: pd.DataFrame,
    unames: NDArray[np.object_],
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The records the ``unit``-level classes release per unit, in one partition.

    ``cid``/``syn_cid``: the class ids of the audit's and the synthetic records (-1:
    none); ``classes``: ``classes.parquet``; ``unames``: the unit ids of the codes.

    Returns
    -------
    tuple
        (records per unit code, ``unames.size + 1`` entries, the last for a class whose
        unit is unknown; the mask of the audit's records generalised above their unit,
        i.e. into a class that is not ``unit``-level).
    """
    nu = unames.size
    unit_class: dict[int, str] = {}
    if len(classes) and "level" in classes and "unit" in classes:
        for c, lvl, u in zip(
            int_ids(classes["class_id"], "class id").tolist(),
            classes["level"].astype(str),
            classes["unit"].astype(str),
            strict=True,
        ):
            if lvl == "unit":
                unit_class[c] = u
    released = np.zeros(nu + 1, dtype=np.int64)

    def add_codes(codes: NDArray[np.int64]) -> None:
        released[:] += np.bincount(np.where(codes >= 0, codes, nu), minlength=nu + 1)

    # records of the unit-level classes, in the class's unit
    cls_known = np.array(list(unit_class), dtype=np.int64)
    cls_unit_code = text_codes(list(unit_class.values()), unames)
    # unknown: dropped (the last entry: no unit-level class)
    cls_unit_code = np.append(np.where(cls_unit_code >= 0, cls_unit_code, nu), nu)
    at_c = np.full(cid.size, -1, dtype=np.int64)
    in_class = np.flatnonzero(cid >= 0)
    if cls_known.size:
        at_c[in_class] = positions_in(cls_known, cid[in_class])
    add_codes(cls_unit_code[at_c[at_c >= 0]])
    syn_at = positions_in(cls_known, syn_cid) if cls_known.size else np.full(syn_cid.size, -1)
    syn_at = np.where(syn_cid >= 0, syn_at, -1)
    add_codes(cls_unit_code[syn_at[syn_at >= 0]])
    return released, (cid >= 0) & (at_c < 0)


@dataclass
class UnitTally:
    """Per unit id, what ``units.csv`` must publish (merged over the partitions).

    Attributes
    ----------
    released
        Records released: its groups' (:func:`group_units`) and its ``unit``-level
        classes' (:func:`class_units`), added up over the partitions.
    totals
        The audit's records in the unit (only units that have some).
    suppressed, up
        Distinct subjects suppressed, and generalised above the unit (counted on the
        merged (unit, subject) pairs: a subject in two partitions is one).
    synthetic
        Synthetic records per unit (empty: none, or their units unknown).
    wrong_group_units
        Groups naming a unit other than their members' majority (:func:`group_units`,
        added up).
    """

    released: dict[str, int]
    totals: dict[str, int]
    suppressed: dict[str, int]
    up: dict[str, int]
    synthetic: dict[str, int] = field(default_factory=dict)
    wrong_group_units: int = 0


def units_csv_writing_problems(path: Path, table: pd.DataFrame) -> list[str]:
    """``units.csv`` byte for byte as the format writes the cells it holds (``table``, its
    cells as text): a header row, then a line per unit, a cell quoted only when it holds a
    comma, a double quote or a line break (Python's ``csv``, as pandas writes it), ``\\n``
    line ends, nothing else. A reader of cells takes ``"550"``, a blank line or a
    ``\\r\\n`` line end as the same table: a bit each that the checks of values would
    not see."""
    import csv
    import io

    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([str(c) for c in table.columns])
    writer.writerows(table.astype(str).itertuples(index=False, name=None))
    line = first_other_line(path.read_bytes(), text.getvalue().encode("utf-8"))
    if line is None:
        return []
    return [
        "units.csv holds its cells but not as the format writes them (a cell quoted only "
        f"when it must be, one line break per row); the first other byte is on line {line}"
    ]


def unit_problems(
    k: int,
    rows: list[dict[str, Any]],
    units_table: pd.DataFrame,
    manifest: Mapping[str, Any],
    t: UnitTally,
) -> list[str]:
    """``units.csv`` (its parsed ``rows``) against the merged :class:`UnitTally`."""
    problems: list[str] = []
    if t.wrong_group_units:
        problems.append(
            f"{t.wrong_group_units} groups name a unit other than their members' majority"
        )
    published = {str(r["unit"]): r for r in rows}
    audit_units = set(t.totals)
    if len(published) != len(rows):
        problems.append("units.csv repeats a unit")
    missing = audit_units - set(published)
    extra = set(published) - audit_units
    if missing:
        problems.append(f"{len(missing)} units of the audit are absent from units.csv")
    if extra:
        problems.append(f"{len(extra)} units in units.csv have no audit records")
    bad_rel = bad_sup = bad_tot = bad_up = bad_syn = 0
    syn_m = manifest.get("synthetic")
    per_unit_m = syn_m.get("per_unit") if isinstance(syn_m, Mapping) else None
    if "synthetic" in units_table.columns and isinstance(per_unit_m, Mapping):
        shown = {str(r["unit"]): r["synthetic"] for r in rows if r["synthetic"] != 0}
        if shown != {str(u): cell_value(v) for u, v in per_unit_m.items() if v != 0}:
            problems.append("units.csv synthetic differs from the manifest's synthetic.per_unit")

    def wrong(published_value: object, true: int) -> bool:
        if published_value == LESS_THAN_K:
            return not 0 < true < k
        if published_value == WITHHELD:
            # a sensitive figure reads '<k' ('withheld' owes nothing in `holes`)
            return 0 < true < k
        return published_value is not None and published_value != true

    for u in sorted(audit_units & set(published)):
        r = published[u]
        if r["released"] != t.released.get(u, 0):
            bad_rel += 1
        bad_sup += wrong(r["suppressed"], int(t.suppressed.get(u, 0)))
        bad_up += wrong(r["generalised_up"], int(t.up.get(u, 0)))
        bad_syn += wrong(r["synthetic"], int(t.synthetic.get(u, 0)))
        t_pub = r["source_total"]
        if isinstance(t_pub, int) and t_pub != int(t.totals[u]):
            bad_tot += 1
    if bad_rel:
        problems.append(f"{bad_rel} units publish a wrong released count")
    if bad_sup:
        problems.append(f"{bad_sup} units publish a wrong suppressed count")
    if bad_up:
        problems.append(f"{bad_up} units publish a wrong generalised_up count")
    if bad_syn:
        problems.append(f"{bad_syn} units publish a wrong synthetic count")
    if bad_tot:
        problems.append(f"{bad_tot} units publish a wrong source_total")
    return problems


def manifest_count_problems(
    manifest: Mapping[str, Any],
    k: int,
    disposals: Mapping[str, int],
    *,
    n: int,
    n_syn: int,
    s_subj: int,
    n_subj: int,
    syn_pooled: int,
) -> list[str]:
    """The manifest's ``counts``, ``synthetic`` and ``suppressed_share`` against the merged
    figures: records per disposal (``disposals``), audit records ``n``, synthetic records
    ``n_syn`` (``syn_pooled`` of them above unit level), distinct subjects suppressed
    ``s_subj`` of ``n_subj``."""
    problems: list[str] = []
    counts = manifest.get("counts")
    if not isinstance(counts, Mapping):
        return ["manifest counts missing"]
    for name in ("grouped", "merged", "generalised"):
        if counts.get(name) != disposals[name]:
            problems.append(f"manifest counts.{name} differs from the audit")
    sup = counts.get("suppressed")
    n_sup = disposals["suppressed"]
    if sup == LESS_THAN_K:
        if not 0 < s_subj < k:
            problems.append("manifest counts.suppressed reads '<k' but is 0 or >= k subjects")
    elif sup == WITHHELD:
        pass
    elif sup != n_sup:
        what = " (it is the subject count; counts are records)" if sup == s_subj else ""
        problems.append(f"manifest counts.suppressed differs from the audit{what}")
    syn_m = manifest.get("synthetic")
    syn_m = syn_m if isinstance(syn_m, Mapping) else {}
    for where, value in (("counts.synthetic", counts.get("synthetic")),
                         ("synthetic.total", syn_m.get("total"))):  # fmt: skip
        if value is None or value == WITHHELD:
            continue
        if value == LESS_THAN_K:
            if not 0 < n_syn < k:
                problems.append(f"manifest {where} reads '<k' but is 0 or >= k")
        elif value != n_syn:
            problems.append(f"manifest {where} differs from the audit")
    if "pooled" in syn_m and syn_m.get("pooled") != syn_pooled:
        problems.append("manifest synthetic.pooled differs from the audit")
    share = manifest.get("suppressed_share")
    if share == WITHHELD:
        pass
    elif share == LESS_THAN_K:
        if not 0 < s_subj < k:
            problems.append("manifest suppressed_share reads '<k' but is 0 or >= k subjects")
    elif isinstance(share, int | float) and not isinstance(share, bool):
        options = [s_subj / n_subj if n_subj else 0.0, n_sup / n if n else 0.0]
        if min(abs(float(share) - o) for o in options) > 5e-7:
            problems.append("manifest suppressed_share matches neither share in the audit")
    elif share is not None:
        problems.append("manifest suppressed_share is not a number, '<k' or 'withheld'")
    return problems


def id_tallies(rel: ReleaseReader, rows: RecordRows) -> dict[str, IdTally]:
    """The groups' and the classes' :class:`IdTally` of one partition's reader.

    ``rel`` reads a single-file release (one partition: the whole release) or one part
    of a partitioned one (:mod:`geokanon.verify.partitioned`: the part's rows of
    ``groups.parquet`` or ``classes.parquet`` as the tables, its routed members as the
    audit); ``rows`` is the records pass over its records files.
    """
    read = rows.unreadable is None
    out = {}
    for what, table, pub_ids, got in (
        ("group", rel.groups, rel.group_ids, rows.per_group),
        ("class", rel.classes, rel.class_ids, rows.per_class),
    ):
        expected = _members_per_id(rel, what)
        sizes = pd.to_numeric(table["n_records"]).to_numpy(dtype=np.int64)
        out[what] = id_tally(expected, pub_ids, sizes, got if read else None)
    return out


def _members_per_id(rel: ReleaseReader, what: str) -> pd.Series:
    """The audit's (and the synthetic records') rows per group or class id (``what``:
    ``group`` or ``class``): counted once per reader (:func:`warm_counts` may have counted
    them already)."""

    def count() -> pd.Series:
        ids, syn = (rel.gid, rel.syn_gid) if what == "group" else (rel.cid, rel.syn_cid)
        return value_counts(np.concatenate([ids[ids >= 0], syn[syn >= 0]]))

    return once(rel, f"_members_per_{what}", count)


def warm_counts(rel: ReleaseReader) -> None:
    """Count ahead what ``counts`` counts from the audit alone: the rows per group and
    class id and the per-unit tally (kept on the reader, :mod:`geokanon.verify._once`).

    The single-file verifier calls it in the lane whose checks end first, while
    ``no_leak`` (which ``counts`` waits for) still reads the records files: the same
    values, counted sooner. Nothing read from ``release/`` but the tables is used.
    """
    _members_per_id(rel, "group")
    _members_per_id(rel, "class")
    _single_unit_tally(rel)


def group_unit_tally(rel: ReleaseReader) -> tuple[int, dict[str, int]]:
    """(groups naming a unit other than their members' majority, records its groups
    release per unit id) of one partition's reader (as :func:`id_tallies`), by
    :func:`group_units`."""
    ucode, unames = rel.unit_codes
    nu = unames.size
    syn = rel.synthetic
    syn_code = (
        text_codes(syn["unit"].astype(str), unames)
        if len(syn) and "unit" in syn
        else np.full(len(syn), -1, dtype=np.int64)
    )
    syn_g = rel.syn_gid >= 0
    pub_ucode = (
        text_codes(rel.groups["unit"].astype(str), unames) if "unit" in rel.groups.columns
        else None
    )  # fmt: skip
    if pub_ucode is None:
        at_group = rel.gid >= 0
        wrong, released = group_units(
            rel.gid[at_group], ucode[at_group], rel.syn_gid[syn_g], syn_code[syn_g], nu,
            np.zeros(0, dtype=np.int64), None,
        )  # fmt: skip
    else:
        # group_units' rule, on the members already in group order (group_members)
        rows, ids = group_members(rel)
        starts = np.zeros(1, dtype=np.int64)  # where each group's members start, and the end
        if ids.size:
            starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1], [True]]))
        gid_of = ids[starts[:-1]]
        major, size = _majority_in_runs(
            np.ascontiguousarray(ucode[rows], dtype=np.int64), starts.astype(np.int64)
        )
        at = positions_in(gid_of, rel.syn_gid[syn_g])
        syn_major = np.where(at >= 0, major[np.maximum(at, 0)], -1) if major.size else at
        wrong, released = _group_units_judged(
            major, size, gid_of, syn_major, nu, rel.group_ids, pub_ucode
        )
    return wrong, {str(u): int(released[i]) for i, u in enumerate(unames.tolist())}


@nb.njit(cache=True, nogil=True)
def _one_to_one(ca: NDArray[np.int64], cs: NDArray[np.int64], na: int) -> bool:
    """Whether every row of audit subject code ``ca[i]`` has the one source subject code
    ``cs[i]`` (the last row of each audit code read as its subject, then every row
    compared with it)."""
    one = np.zeros(na, dtype=np.int64)
    for i in range(ca.size):
        one[ca[i]] = cs[i]
    for i in range(ca.size):
        if one[ca[i]] != cs[i]:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _other_units(
    as_audit: NDArray[np.int64],
    src_unit: NDArray[np.int64],
    rows: NDArray[np.int64],
    ucode: NDArray[np.int64],
) -> int:
    """Audit rows whose unit code ``ucode[i]`` is not their source row's unit
    (``as_audit[src_unit[rows[i]]]``: the source's unit code as the audit numbers it)."""
    n = 0
    for i in range(rows.size):
        if as_audit[src_unit[rows[i]]] != ucode[i]:
            n += 1
    return n


def check_counts(rel: ReleaseReader) -> CheckResult:
    """The ``counts`` check of a single-file release: one partition's tallies, judged."""
    k = rel.k
    problems: list[str] = []
    n = rel.n_audit
    # source agreement
    src = rel.source
    wrong_unit = 0
    source_problems: list[str] = []
    if src.n_rows is not None:
        if rel.source_rows is None:
            source_problems.append(
                f"audit has {n} rows with source_row not a permutation of the "
                f"{src.n_rows} source records"
            )
        else:
            audit_subj = rel.audit_subjects
            if src.subjects is not None:
                ca, na = dense_codes(audit_subj)
                cs, ns = rel.subject_codes
                # one to one: each audit code meets one source subject, and as many of them
                if not (na == ns and _one_to_one(ca, np.ascontiguousarray(cs, np.int64), na)):
                    source_problems.append(
                        "audit subject codes disagree with the source's subjects"
                    )
            source_problems += subject_ids_merged_problems(rel.manifest, src.subject_ids_merged)
            if src.unit_codes is not None and src.unit_names is not None:
                ucode, unames = rel.unit_codes
                as_audit = text_codes(src.unit_names, unames)
                wrong_unit = int(
                    _other_units(
                        np.ascontiguousarray(as_audit, dtype=np.int64),
                        np.ascontiguousarray(src.unit_codes, dtype=np.int64),
                        rel.source_rows,
                        np.ascontiguousarray(ucode, dtype=np.int64),
                    )
                )
    audit = audit_tally(rel.is_disposal, rel.gid, rel.cid, wrong_unit)
    problems += audit_problems(audit)
    problems += source_problems
    # groups and classes, and the records files row by row
    rows = record_rows(rel)
    for what, tally in id_tallies(rel, rows).items():
        problems += id_problems(what, tally)
    n_syn = len(rel.synthetic)
    if rows.unreadable is not None:
        problems.append(rows.unreadable)
    else:
        problems += records_total_problems(rows.rows, n - audit.disposals["suppressed"] + n_syn)
        problems += rows.problems
    # units
    problems += unit_problems(
        k, unit_rows(rel), rel.units_table, rel.manifest, _single_unit_tally(rel)
    )
    problems += units_csv_writing_problems(rel.rel / "units.csv", rel.units_table)
    problems += _input_filter_problems(rel)
    problems += gpkg_count_problems(rel)
    problems += geoparquet_bbox_problems(rel.rel / "classes.parquet")
    problems += point_file_problems(rel.rel / "groups.parquet")
    # manifest counts
    s_subj, n_subj = suppressed_subjects(rel)
    problems += manifest_count_problems(
        rel.manifest, k, audit.disposals, n=n, n_syn=n_syn, s_subj=s_subj, n_subj=n_subj,
        syn_pooled=_synthetic_pooled(rel),
    )  # fmt: skip
    if problems:
        return CheckResult("counts", False, "; ".join(problems))
    compared = ", ".join(rows.compared)
    by_row = f" ({compared} per group and class)" if compared else ""
    return CheckResult(
        "counts",
        True,
        f"{n} audit records, {len(rel.groups)} groups, {len(rel.classes)} classes, "
        f"{len(rel.units_table)} units agree with the release; records.parquet and "
        f"records.csv row by row{by_row}",
    )


def _synthetic_pooled(rel: ReleaseReader) -> int:
    """Synthetic records in classes that are not ``unit``-level."""
    classes = rel.classes
    unit_ids = (
        int_ids(classes.loc[classes["level"].astype(str) == "unit", "class_id"], "class id")
        if len(classes) and "level" in classes
        else np.zeros(0, dtype=np.int64)
    )
    syn_c = rel.syn_cid
    return int(((syn_c >= 0) & ~np.isin(syn_c, unit_ids)).sum())


def _csv_rows(path: Path) -> int:
    """Data rows of a CSV file (blank lines skipped), as pandas counts them."""
    import pyarrow.csv as pacsv

    try:
        with pacsv.open_csv(path) as reader:
            first = reader.schema.names[0]
        t = pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=[first], column_types={first: pa.string()}
            ),
        )
        return t.num_rows
    except (OSError, pa.ArrowException, ValueError, IndexError):
        return len(pd.read_csv(path, dtype=str, keep_default_na=False))


def _input_filter_problems(rel: ReleaseReader) -> list[str]:
    """Units left out, records clipped and units merged: audit, manifest and source agree.

    The manifest publishes what the audit records (counts of 1..k-1 as ``<k``); the
    read options name the same units; a merged unit is named by its source units joined
    with ``+``; and, where the source file has its unit column, the records the verifier
    itself dropped match the audit's counts, every source unit with fewer than N
    distinct subjects was merged (or is listed as having no neighbour), and every unit
    after merging holds N (or is listed).
    """
    audit = audit_filter(rel.audit)
    opts = read_options(rel.audit)
    raw_pub = rel.manifest.get("input_filter")
    if (
        not audit
        and raw_pub is None
        and not (opts.get("exclude_units") or opts.get("clip") or opts.get("merge_small_units"))
    ):
        return []
    pub = dict(raw_pub) if isinstance(raw_pub, Mapping) else {}
    k = rel.k
    problems: list[str] = []
    if not pub:
        problems.append("manifest lacks input_filter (units left out, clipped, merged)")
        return problems

    def masked(v: object) -> object:
        return LESS_THAN_K if isinstance(v, int) and 0 < v < k else v

    for name in ("excluded_units", "unit_merges", "units_left_small", "merge_small_units"):
        if pub.get(name) != audit.get(name):
            problems.append(f"manifest input_filter.{name} differs from the audit")
    for name in ("excluded_records", "clipped_records"):
        if pub.get(name) != masked(audit.get(name)):
            problems.append(f"manifest input_filter.{name} differs from the audit")
    excl = opts.get("exclude_units") or []
    if sorted(str(u) for u in excl) != sorted(audit.get("excluded_units") or []):
        problems.append("the units left out differ from the read options' exclude_units")
    if opts.get("merge_small_units") != audit.get("merge_small_units"):
        problems.append("input_filter.merge_small_units differs from the read options")
    merges: dict[str, str] = dict(audit.get("unit_merges") or {})
    into: dict[str, list[str]] = {}
    for a, b in merges.items():
        into.setdefault(str(b), []).append(str(a))
    bad = [b for b, srcs in into.items() if b != "+".join(sorted(srcs))]
    if bad:
        problems.append(f"{len(bad)} merged units are not named by their source units")
    src = rel.source
    for rule, name in (("excluded", "excluded_records"), ("clipped", "clipped_records")):
        if rule in src.dropped and src.dropped[rule] != audit.get(name):
            problems.append(
                f"the source holds {src.dropped[rule]} records {rule}, the audit says "
                f"{audit.get(name)}"
            )
    n_min = audit.get("merge_small_units")
    if isinstance(n_min, int) and src.source_units is not None:
        subj = src.subjects
        if subj is None or subj.size != src.source_units.size:
            subj = np.arange(src.source_units.size, dtype=np.int64)
        left = set(audit.get("units_left_small") or [])
        pairs = pd.DataFrame({"u": src.source_units, "s": subj}).drop_duplicates()
        per_source = pairs.groupby("u").size()
        unmerged = [
            str(u) for u, c in per_source.items()
            if c < n_min and str(u) not in merges and str(u) not in left and u != "unassigned"
        ]  # fmt: skip
        if unmerged:
            problems.append(
                f"{len(unmerged)} units with fewer than {n_min} subjects were not merged: "
                + ", ".join(sorted(unmerged)[:5])
            )
        final = pd.DataFrame({"u": src.units, "s": subj}).drop_duplicates().groupby("u").size()
        small = [
            str(u) for u, c in final.items() if c < n_min and str(u) not in left
            and u != "unassigned"
        ]  # fmt: skip
        if small:
            problems.append(
                f"{len(small)} units hold fewer than {n_min} subjects after merging: "
                + ", ".join(sorted(small)[:5])
            )
    return problems


def _single_unit_tally(rel: ReleaseReader) -> UnitTally:
    """The :class:`UnitTally` of a single-file release (one partition), worked out once per
    reader."""
    return once(rel, "_unit_tally", lambda: _unit_tally(rel))


def _unit_tally(rel: ReleaseReader) -> UnitTally:
    """The :class:`UnitTally` of a single-file release (one partition)."""
    ucode, unames = rel.unit_codes
    nu = unames.size
    subj = rel.subjects
    syn = rel.synthetic
    syn_code = (
        text_codes(syn["unit"].astype(str), unames)
        if len(syn) and "unit" in syn
        else np.full(len(syn), -1, dtype=np.int64)
    )
    syn_known = not len(syn) or "unit" in syn
    wrong, by_groups = group_unit_tally(rel)
    cls_released, up = class_units(rel.cid, rel.syn_cid, rel.classes, unames)
    up_subj_c = distinct_counts(np.where(up, ucode, -1), subj, nu, rel.subject_codes)
    sup = rel.is_disposal("suppressed")
    sup_subj_c = distinct_counts(np.where(sup, ucode, -1), subj, nu, rel.subject_codes)
    totals_c = np.bincount(ucode, minlength=nu)
    syn_per_c = np.bincount(np.where(syn_code >= 0, syn_code, nu), minlength=nu + 1)
    names_l = [str(u) for u in unames.tolist()]
    return UnitTally(
        released={u: by_groups[u] + int(cls_released[i]) for i, u in enumerate(names_l)},
        totals={names_l[i]: int(totals_c[i]) for i in range(nu) if totals_c[i]},
        suppressed={names_l[i]: int(sup_subj_c[i]) for i in range(nu)},
        up={names_l[i]: int(up_subj_c[i]) for i in range(nu)},
        synthetic={names_l[i]: int(syn_per_c[i]) for i in range(nu)} if syn_known else {},
        wrong_group_units=wrong,
    )

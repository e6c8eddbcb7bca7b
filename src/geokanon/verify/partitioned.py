"""Independent verification of a partitioned release, in tasks, reduced on the driver.

:func:`verify_partitioned` checks a release written by
:func:`geokanon.distributed.release_partitions` (``release/records/part-NNNNN.parquet``,
``audit/assignment/part-NNNNN.parquet``; see "Partitioned layout" in
``docs/release-format.md``). Like :mod:`geokanon.verify` it imports no algorithm
module (only :mod:`geokanon.errors`, :mod:`geokanon.policy` and the
:mod:`geokanon.verify` package; Dask lazily, through
the client it is given): every figure is recomputed from the written files and
from the source rows, re-read from the source partitions (never from the
core's arrays).

Two rounds of tasks:

*Source round* (one task per source partition ``i``): re-read partition ``i`` and
``audit/assignment/part-i``; check the audit against the source (row count,
``source_row``, unit, coordinates, a group id exactly for grouped and merged
rows, a class id exactly for generalised rows); count records per disposal and
per unit; collect the distinct ``(unit, subject, suppressed)`` triples (with a
subject column; subjects are the ids as :func:`geokanon.verify.subject_id_text`
compares them, so the spellings of one id are one subject) and the distinct raw
ids' hashes (their number less the subjects must be the manifest's
``subject_ids_merged``); scan the small release files (manifest, notes, report,
``units.csv``, ``classes.parquet``, ``groups.parquet``'s metadata) for this
partition's coordinates, subject ids and row columns with :mod:`geokanon.verify`'s
own scanners and rules (:func:`_strict_secrets`); and route, to scratch
pieces, every group member's and class member's source coordinates, subject,
unit and kept values to the release part that publishes its group or class (by the id ranges
in ``audit.json``), and every record's coordinates to the group part whose
tiles hold it (so a representative equal to any source point meets that point).
The small files are scanned last, with what they say (the manifest's ``k``, the
release's figures and the numbers and ids it publishes) read by the driver once they
are final: the release writer writes its report while the tasks check and route
(``before_scan``), and the tasks wait for it without holding a worker's thread.

*Part round* (one task per release part): from the part file, the part's rows
of ``groups.parquet``/``classes.parquet`` and the routed source rows:
``k_subjects`` (distinct subjects per group and class), ``extent`` (every member
within ``min(r_max_m, radius_m)`` of the published representative, inclusive, on
the map and, for a named CRS, on its ellipsoid),
``representation`` (the single-file rule), ``counts`` (the part's tallies of
:mod:`geokanon.verify.counts`: group and class sizes, rows per group and class, each
group's majority unit and the records it releases per unit; every group and class of the
id range present once; and the single-file records pass: each row against its group or
class, each group's and class's kept values against its members' source values, routed
with them) and
``no_leak`` (the part file and its ``groups.parquet`` rows against the
coordinates routed to it and its members' subject ids, by the single-file rules:
:func:`_strict_secrets`).

*Driver* (the reduce): the tasks' results fill a :class:`_PartitionedRelease`, a
:class:`~geokanon.verify._reader.ReleaseReader` of the partitioned layout whose derived
figures (distinct subjects and suppressed subjects, overall and per unit, from the
distinct triples; the source's checksum) come from the tasks. ``tau``,
``unit_cap``, ``fixed_point``, ``report_safety`` and ``manifest`` are then the
check modules' own functions, the same code as for a single-file release;
``holes`` is :func:`geokanon.verify.holes.holes_check` over the same unit rows
(every figure of every release file); ``counts`` merges the source partitions' and the
parts' tallies and judges them with :mod:`geokanon.verify.counts`' functions, the same
rules and messages as for a single file (which is one partition).

What is narrower than :func:`geokanon.verify.verify_release` is stated in
:data:`SCOPE` and written into the manifest (``verification_scope``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.errors import InputError
from geokanon.verify._arrays import distinct_values, sample_records
from geokanon.verify._derived import unit_rows
from geokanon.verify._reader import (
    PartRows,
    ReleaseReader,
    Source,
    _arrow_backed,
    encodings_in_background,
    frame_source,
    text_file,
)
from geokanon.verify._records import RECORD_FORMAT_COLUMNS, record_rows
from geokanon.verify._results import (
    CHECKS,
    CheckResult,
    Unreadable,
    VerificationReport,
    run_checks,
)
from geokanon.verify.caps import check_tau, check_unit_cap
from geokanon.verify.containers import parquet_container_problems
from geokanon.verify.counts import (
    AuditTally,
    IdTally,
    UnitTally,
    audit_problems,
    audit_tally,
    class_units,
    group_unit_tally,
    id_problems,
    id_tallies,
    manifest_count_problems,
    records_total_problems,
    subject_ids_merged_problems,
    unit_problems,
    units_csv_writing_problems,
)
from geokanon.verify.extent import check_extent
from geokanon.verify.fixed_point import check_fixed_point
from geokanon.verify.gpkg import geoparquet_bbox_problems, point_file_problems
from geokanon.verify.holes import holes_check
from geokanon.verify.k_subjects import check_k_subjects
from geokanon.verify.leak_rules import (
    LEVELS,
    ROW_NAMES,
    STRUCTURAL,
    Secrets,
    column_rules,
    published_values,
    sample_phrase_findings,
    scan_file,
    scan_frame,
    scan_parquet,
    strict_secrets,
    without_declared_crs,
    without_geography,
)
from geokanon.verify.manifest import _sha256, check_manifest
from geokanon.verify.report_safety import check_report_safety
from geokanon.verify.representation import check_representation

__all__ = ["SCOPE", "verify_partitioned"]

#: Where a partitioned check covers less than the single-machine check, and why.

#: The small files of ``release/`` every source task scans for its partition's values
#: (``groups.parquet``'s rows are scanned by the parts, its metadata by the source tasks).
SMALL_FILES = ("manifest.json", "units.csv", "RELEASE_NOTES.md", "report.html", "classes.parquet")

SCOPE: dict[str, str] = {
    "no_leak": "release parts are scanned against the source records routed to them (their "
    "members, and every source record in the part's tiles, so a representative equal to any "
    "source point is found), by the single-file rules; the small files are scanned against "
    "every source partition. A value equal to the coordinate of a source record outside the "
    "part (in a kept column it is no member's value: counts fails it), a kept column copying "
    "coordinates or ids beyond the part's members, and the rule 'half of a column's values "
    "are source coordinates' across partitions, are not checked. Times are not published by "
    "the partitioned release.",
    "counts": "the audit is compared with the source partition by partition; the per-record "
    "subject codes of the audit are not compared with the source (subjects are always taken "
    "from the source).",
}

_BIAS = 1 << 30
_MAX_NOTES = 5


def _tile_key(
    x: NDArray[np.float64], y: NDArray[np.float64], tiling: Mapping[str, float]
) -> NDArray[np.int64]:
    """The writer's tile key of every point (the same floor and packing, recomputed here;
    ``floor((v - origin) / tile_m)``, in place: two temporaries, not eight)."""
    side = float(tiling["tile_m"])
    key = _floor_index(x, float(tiling["origin_x"]), side)
    key += _BIAS
    key <<= 31
    key |= _floor_index(y, float(tiling["origin_y"]), side) + _BIAS
    return key


def _floor_index(v: NDArray[np.float64], origin: float, side: float) -> NDArray[np.int64]:
    """``floor((v - origin) / side)`` as int64."""
    t = np.subtract(v, origin)
    t /= side
    np.floor(t, out=t)
    return t.astype(np.int64)


def _by_part(
    part: NDArray[np.integer[Any]],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Rows in the order of their part (stable), the distinct parts ascending, and where
    each one's rows start in that order (and, last, the number of rows): what
    ``np.unique(part[order], return_index=True)`` gives, with a radix sort of 16-bit part
    numbers when they fit (parts are few)."""
    small = part.size > 0 and int(part.min()) >= 0 and int(part.max()) < 2**15
    order = np.argsort(part.astype(np.int16) if small else part, kind="stable")
    ordered = part[order]
    starts = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1] if part.size else order
    return order, ordered[starts].astype(np.int64), np.r_[starts, part.size].astype(np.int64)


def _strict_secrets(
    root: Path,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    raw_ids: NDArray[np.object_] | None,
    kept: Mapping[str, pd.Series],
    *,
    k: int,
    bad_names: frozenset[str],
    figures: Mapping[str, float],
    unit_texts: frozenset[str],
    published: NDArray[np.float64],
    crs: str | None,
) -> Secrets:
    """What a part task looks for, judged by the single-file rules (``strict``): every
    source coordinate routed to it (whole metres included) and every subject id of its
    members (any length), wherever it appears outside the columns that legitimately hold
    it; what each column holds is :func:`geokanon.verify.leak_rules.column_rules`' rule,
    worked out on the release's own figures (``figures``: its ``groups``, ``classes``
    and ``records``, the count columns' bound; ``r_max_m``) and the members' kept values.

    ``x``, ``y`` and ``raw_ids`` lead with the members (aligned with ``kept``).
    """
    ok = np.isfinite(x) & np.isfinite(y)
    ids: frozenset[str] = frozenset()
    if raw_ids is not None and raw_ids.size:
        ids = frozenset(str(s).strip() for s in pd.unique(raw_ids))
    n_mem = len(next(iter(kept.values()))) if kept else 0
    src = Source(
        x=x[:n_mem] if kept else None, y=y[:n_mem] if kept else None,
        subject_raw=pd.Series(raw_ids[:n_mem]) if raw_ids is not None and kept else None,
        columns={c: v.reset_index(drop=True) for c, v in kept.items()},
    )  # fmt: skip
    view = ReleaseReader.of_figures(
        root, groups=int(figures["groups"]), classes=int(figures["classes"]),
        records=int(figures["records"]), r_max_m=float(figures["r_max_m"]),
    )  # fmt: skip
    return strict_secrets(
        ((x[ok], y[ok]),), ids, k=k, bad_names=bad_names, published=published,
        published_texts=unit_texts, legit=column_rules(view, src, unit_texts),
        know_columns=True, crs=crs,
    )  # fmt: skip


# ----------------------------------------------------------------------------
# Source round
# ----------------------------------------------------------------------------


def _source_task(
    source: Any,
    i: int,
    offset: int,
    root: str,
    route: dict[str, Any] | None,
    scratch: str,
    bad_names: frozenset[str],
    kept: Sequence[str],
    unit_classes: pd.DataFrame | None,
    small: Mapping[str, Any] | None,
    wait: str | None = None,
) -> dict[str, Any]:
    """Check audit part ``i`` against source partition ``i``; count, route and scan.

    The counts are this partition's tallies of :mod:`geokanon.verify.counts`
    (:func:`~geokanon.verify.counts.audit_tally`; the records of ``unit``-level classes
    per unit and the records generalised above their unit,
    :func:`~geokanon.verify.counts.class_units`, with ``unit_classes``: the rows of
    ``classes.parquet`` whose level is ``unit``), merged on the driver.

    ``small`` is what the small files say (:func:`_small_files`): the files to scan (with
    ``no_leak``'s single-file rules), ``k``, the release's figures and what it publishes
    (its numbers, unit ids and CRS: :func:`_published`), which set what they may hold, and
    the manifest's ``report_sample.every``. ``wait``: the name of a Dask ``Variable`` the
    driver sets to ``small`` once the small files are final (the release writer writes
    its report meanwhile, :func:`verify_partitioned`'s ``before_scan``): the task does all
    else first, then waits for it seceded from its worker's threads (other tasks run
    meanwhile) and scans last; ``None`` set there: the verification was given up, and
    the task returns without scanning.

    ``kept`` are the kept columns the release parts publish: every member's source
    values of them travel with it to its part (the part compares its groups' and
    classes' kept values with its members', as for a single file).

    The partition's records the report sample's rule draws
    (:func:`~geokanon.verify._arrays.sample_records`) are counted, summed on the driver
    for ``manifest``.
    """
    f = source.load(i)
    # read as a single-file source's rows are (one partition): the partition's columns
    # are the roles' (x, y in the release's one CRS, subject, unit)
    src = frame_source(
        f, xcol="x", ycol="y", scol="subject" if "subject" in f.columns else None,
        ucol="unit" if "unit" in f.columns else None, tcol=None, in_crs=None,
        output_crs=None, working_crs=None,
    )  # fmt: skip
    n = len(f)
    if src.x is None or src.y is None:
        raise InputError(f"source partition {i} has no x and y columns")
    x, y = src.x, src.y
    sid = src.subject_table
    has_subject = sid is not None
    subj = None if sid is None else sid.row_texts  # the raw ids (what no_leak looks for)
    out: dict[str, Any] = {"n": n, "problems": [], "leaks": [], "has_subject": has_subject}
    if sid is not None:
        # hashes of the distinct raw ids: their global number, less the subjects, is the
        # number of ids merged
        out["raw_ids"] = np.unique(pd.util.hash_array(sid.written.astype(str)))
    if src.unit_codes is not None and src.unit_names is not None:  # pd.factorize(src.units)
        ucode, unames = src.unit_codes, src.unit_names
    else:  # no unit column: every record in the one unit "all"
        ucode, unames = pd.factorize(np.full(n, "all", dtype=object))
        unames = np.asarray(unames, dtype=object)
    sha = source.file_sha256(i) if hasattr(source, "file_sha256") else None
    out["sha256"] = sha
    attrs = _kept_values(source, f, i, kept, out["problems"])
    del f
    # the audit part is read by the single-file reader (one partition: its audit file is
    # the part, its source the partition's rows)
    audit_path = Path(root) / "audit" / "assignment" / f"part-{i:05d}.parquet"
    view = ReleaseReader.of_source_partition(
        Path(root), Source(n_rows=n), audit_path, f"audit part {i}"
    )
    _audit_part(
        out, view, i, offset, x, y, ucode, unames, sid, attrs, route, scratch, unit_classes
    )  # fmt: skip
    # held for the report sample's count (when the audit part was read), then only what
    # the scan needs: a task that waits holds no more
    basis = (view.gid, *view.xy_m) if "audit" in out else None
    del view, src, sid, ucode
    if wait is not None:
        small = _when_final(wait)
    if small is None:
        return out
    if small["sample_every"] >= 2 and basis is not None:
        out["sample_records"] = sample_records(*basis, small["sample_every"])
    del basis
    published = small["published"]
    texts = published["texts"] | {str(u) for u in unames}
    sec = _strict_secrets(
        Path(root), x, y, subj, attrs, k=small["k"], bad_names=bad_names,
        figures=small["figures"], unit_texts=frozenset(texts), published=published["numbers"],
        crs=published["crs"],
    )  # fmt: skip
    for rel_name, path in small["leak_files"]:
        found = scan_file(Path(path), sec)
        if found:
            out["leaks"].append(f"{rel_name}: " + ", ".join(dict.fromkeys(found)))
    return out


def _when_final(name: str) -> Mapping[str, Any] | None:
    """In a task: wait, seceded from the worker's threads, for the Dask ``Variable``
    ``name`` (a future of what the small files say, or ``None``), and return its value."""
    from distributed import Variable, rejoin, secede

    secede()
    try:
        got = Variable(name).get()
        return None if got is None else dict(got.result())
    finally:
        rejoin()


def _audit_part(
    out: dict[str, Any],
    view: ReleaseReader,
    i: int,
    offset: int,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    ucode: NDArray[np.integer[Any]],
    unames: NDArray[Any],
    sid: Any,
    attrs: Mapping[str, pd.Series],
    route: dict[str, Any] | None,
    scratch: str,
    unit_classes: pd.DataFrame | None,
) -> None:
    """:func:`_source_task`'s check of audit part ``i`` against its source partition, its
    tallies and the routing of its records to the release parts, into ``out``.

    ``ucode``, ``unames``: each record's unit as a code and the code's text; ``sid``: the
    partition's subject table (``None``: no subject column)."""
    problems = out["problems"]
    n = x.size
    try:
        rows = view.audit_source_rows
        if view.n_audit != n:
            problems.append(f"audit part {i} has {view.n_audit} rows for {n} source rows")
            return
        if not np.array_equal(rows, offset + np.arange(n)):
            problems.append(f"audit part {i}: source_row is not the source order")
        xm, ym = view.xy_m
        if not (np.array_equal(xm, x) and np.array_equal(ym, y)):
            problems.append(f"audit part {i}: x_m/y_m differ from the source coordinates")
        # a value that is no id is refused by name, as for a single file
        gid, cid = view.gid, view.cid
        ucode_a, unames_a = view.unit_codes
        is_disposal = view.is_disposal
        is_disposal("grouped")  # an unreadable disposal column is found here
    except Unreadable as exc:
        problems.append(str(exc))
        return
    # the single-file rules' tally of this partition (counts.audit_tally), merged on the
    # driver
    audit_units = unames_a[ucode_a] if ucode_a.size else np.zeros(0, dtype=object)
    unit = unames[ucode] if ucode.size else np.zeros(0, dtype=object)
    tally = audit_tally(
        is_disposal, gid, cid, wrong_unit=int(np.count_nonzero(audit_units != unit))
    )
    out["audit"] = tally
    at_group = is_disposal("grouped", "merged")
    generalised = is_disposal("generalised")
    sup = is_disposal("suppressed")
    out["disposals"] = tally.disposals
    out["unit_records"] = pd.Series(np.bincount(ucode, minlength=unames.size), index=unames)
    sup_u = np.bincount(ucode[sup], minlength=unames.size)
    out["unit_suppressed_records"] = pd.Series(sup_u[sup_u > 0], index=unames[sup_u > 0])
    classes = unit_classes if unit_classes is not None else pd.DataFrame({"class_id": []})
    cls_released, up = class_units(cid, np.zeros(0, dtype=np.int64), classes, unames)
    out["class_released"] = pd.Series(cls_released[:-1], index=unames.astype(str))
    up_u = np.bincount(ucode[up], minlength=unames.size)
    out["unit_up_records"] = pd.Series(up_u[up_u > 0], index=unames[up_u > 0])
    if sid is not None:
        # the distinct (unit, subject, suppressed, up) rows, found on codes: only they
        # are turned into text
        four = pd.DataFrame({"u": ucode, "s": sid.codes, "sup": sup, "up": up}).drop_duplicates()
        out["triples"] = pd.DataFrame(
            {
                "unit": unames[four["u"].to_numpy()],
                "subject": sid.keys[four["s"].to_numpy()],
                "sup": four["sup"].to_numpy(),
                "up": four["up"].to_numpy(),
            }
        )
    if route is None:
        return
    # Route members (with their kept values) and coordinates to the release parts.
    # Without a subject column every record is its own subject: its row number stands
    # for it. Units travel as dictionary codes (the part reads them back as text).
    # the ids as subjects are compared (subject_id_text: spellings are one), and as written
    if sid is not None:
        own = sid.keys[sid.codes] if sid.codes.size else np.zeros(0, dtype=object)
        raw_own = sid.row_texts
    else:
        own = raw_own = offset + np.arange(n, dtype=np.int64)
    unit_dict = pa.array(unames.astype(str), type=pa.string())
    # every record's group part by its tile (-1: none): a member routed to that part is
    # not routed to it again with the coordinates (the part takes both as one set)
    lo = np.asarray(route["group"]["tile_lo"], dtype=np.int64)
    hi = np.asarray(route["group"]["tile_hi"], dtype=np.int64)
    in_part = np.full(n, -1, dtype=np.int64)
    if lo.size:
        key = _tile_key(x, y, route["tiling"])
        p = np.searchsorted(lo, key, side="right") - 1
        okp = (p >= 0) & (key <= hi[np.maximum(p, 0)])
        in_part[okp] = p[okp]
    routed = np.zeros(n, dtype=bool)
    for kind, ids_, mask in (("group", gid, at_group), ("class", cid, generalised)):
        sel = np.flatnonzero(mask & (ids_ >= 0))
        first = np.asarray(route[kind]["first"], dtype=np.int64)
        end = np.asarray(route[kind]["end"], dtype=np.int64)
        index = np.asarray(route[kind]["index"], dtype=np.int64)
        p = np.searchsorted(first, ids_[sel], side="right") - 1
        okp = (p >= 0) & (ids_[sel] < end[np.maximum(p, 0)]) if first.size else p < -1
        if (~okp).any():
            problems.append(f"audit part {i}: {int((~okp).sum())} {kind} ids outside every part")
        sel, p = sel[okp], p[okp]
        if kind == "group":
            routed[sel] = in_part[sel] == p
        codes = pa.array(ucode[sel], type=pa.int32())
        cols = {
            "id": pa.array(ids_[sel]),
            "x": pa.array(x[sel]),
            "y": pa.array(y[sel]),
            "subject": pa.array(own[sel], from_pandas=True),
            "raw_subject": pa.array(raw_own[sel], from_pandas=True),
            "unit": pa.DictionaryArray.from_arrays(codes, unit_dict),
        }
        piece = pa.table(cols)
        if attrs:
            values = pd.DataFrame({_KEPT + c: v.iloc[sel].reset_index(drop=True)
                                   for c, v in attrs.items()})  # fmt: skip
            extra = pa.Table.from_pandas(values, preserve_index=False)
            for name in extra.column_names:
                piece = piece.append_column(name, extra.column(name))
        _write_pieces(scratch, index[p], f"m{i:06d}", piece)
    sel = np.flatnonzero((in_part >= 0) & ~routed)
    if sel.size:
        index = np.asarray(route["group"]["index"], dtype=np.int64)
        coords = pa.table({"x": pa.array(x[sel]), "y": pa.array(y[sel])})
        _write_pieces(scratch, index[in_part[sel]], f"c{i:06d}", coords)


#: Prefix of a member piece's column holding a kept column's source values.
_KEPT = "kept:"


def _members_kept(members: pd.DataFrame) -> dict[str, pd.Series]:
    """The kept columns' source values routed with a part's members, by column name."""
    return {c[len(_KEPT) :]: members[c] for c in members.columns if c.startswith(_KEPT)}


def _kept_values(
    source: Any, frame: pd.DataFrame, i: int, kept: Sequence[str], problems: list[str]
) -> dict[str, pd.Series]:
    """The source's values of the kept columns in partition ``i`` (those it has: a
    published column the source lacks is found by the part's records pass)."""
    if not kept:
        return {}
    here = [c for c in kept if c in frame.columns]
    found = {c: frame[c].reset_index(drop=True) for c in here}
    rest = [c for c in kept if c not in frame.columns]
    if rest and hasattr(source, "other_columns") and hasattr(source, "load_attributes"):
        have = set(source.other_columns(i))
        rest = [c for c in rest if c in have]
        if rest:
            extra = source.load_attributes(i, rest)
            if len(extra) != len(frame):
                problems.append(f"source partition {i}: its columns have unequal lengths")
                return found
            found.update({c: extra[c].reset_index(drop=True) for c in rest})
    return found


def _write_pieces(scratch: str, part: NDArray[np.int64], name: str, table: pa.Table) -> None:
    """Row ``r`` of ``table`` to the scratch piece ``name`` of part ``part[r]``."""
    import pyarrow.feather as feather

    if not part.size:
        return
    order, up, bounds = _by_part(part)
    table = table.take(order)  # one copy, sliced by part below
    for t, p in enumerate(up):
        d = Path(scratch) / f"v{int(p):05d}"
        d.mkdir(parents=True, exist_ok=True)
        rows = table.slice(int(bounds[t]), int(bounds[t + 1] - bounds[t]))
        feather.write_feather(rows, d / f"{name}.arrow", compression="uncompressed")


# ----------------------------------------------------------------------------
# Part round
# ----------------------------------------------------------------------------


def _read_pieces(d: Path, prefix: str, columns: Sequence[str]) -> pd.DataFrame:
    import pyarrow.feather as feather

    files = sorted(d.glob(f"{prefix}*.arrow")) if d.is_dir() else []
    if not files:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    # the kept columns of source partitions may differ in type (int in one, float or
    # null in another): unified as Arrow promotes them
    tables = [feather.read_table(p) for p in files]
    table = pa.concat_tables(tables, promote_options="permissive")
    for j, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):  # units, sent as codes: read as text
            table = table.set_column(j, field.name, pc.cast(table.column(j), pa.string()))
    return table.to_pandas()


def _id_ranges(path: Path, id_col: str) -> list[tuple[int, int] | None]:
    """(smallest, largest) id of every row group of a Parquet file (``None``: no id).

    The release files are written without column statistics, so a filtered read
    cannot skip a row group by itself: every part task would decode the whole file,
    and the partitioned verifier would grow with parts x groups. The driver reads the
    id column once, row group by row group, and gives each part task the row groups
    its id range can meet.
    """
    pf = pq.ParquetFile(path)
    out: list[tuple[int, int] | None] = []
    for i in range(pf.num_row_groups):
        col = pf.read_row_group(i, columns=[id_col]).column(0)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            out.append((-(1 << 62), 1 << 62))  # not ids: let every part read it (and fail)
            continue
        mm = pc.min_max(col).as_py()
        lo, hi = mm["min"], mm["max"]
        out.append(None if lo is None else (math.floor(lo), math.ceil(hi)))
    return out


def _row_groups_of(ranges: Sequence[tuple[int, int] | None], first: int, end: int) -> list[int]:
    """The row groups whose ids can fall in ``first <= id < end``."""
    return [i for i, r in enumerate(ranges) if r is not None and r[0] < end and r[1] >= first]


def _id_range(
    path: Path, id_col: str, first: int, end: int, row_groups: list[int] | None
) -> pa.Table:
    """The rows of a Parquet file with ``first <= id < end`` (as a filtered read gives
    them: rows with a missing id are not among them), from ``row_groups`` only."""
    pf = pq.ParquetFile(path)
    table = pf.read() if row_groups is None else pf.read_row_groups(row_groups)
    ids = table.column(id_col)
    keep = pc.and_(pc.greater_equal(ids, first), pc.less(ids, end))
    return table.filter(keep)


#: The single-file checks a part task runs on a reader of its part (see _part_checks).
_PART_CHECKS: dict[str, Callable[[ReleaseReader], CheckResult]] = {
    "k_subjects": check_k_subjects,
    "extent": check_extent,
    "representation": check_representation,
}


def _part_checks(
    root: Path,
    kind: str,
    published: pd.DataFrame,
    members: pd.DataFrame,
    has_subject: bool,
    k: int,
    r_max: float,
    tolerance_m: float,
    crs: str | None,
    path: Path | None = None,
) -> tuple[dict[str, CheckResult], dict[str, Any]]:
    """``k_subjects`` (and, for a group part, ``extent`` and ``representation``) of one part,
    and its ``counts`` tallies.

    With the part's file (``path``), the records pass reads it too
    (:mod:`~geokanon.verify._records`): ``k_subjects`` then checks the part's published
    groups or classes as the records hold them, and ``counts`` each row's level, unit,
    representative, geometry and bbox against this part's rows of the table.

    A single file is one partition: the checks are the single-file ones
    (:mod:`~geokanon.verify.k_subjects`, ...), run on a :class:`ReleaseReader` that holds
    this part only: its rows of ``groups.parquet`` (or ``classes.parquet``) as the
    published table, and its members (routed from every source partition: their
    source coordinates, which the source round found equal to the audit's, and
    subjects) as the audit; ``manifest.json`` and ``audit.json`` are the release's own.
    Working and published CRS are the release's one CRS.

    The part's ``counts`` tallies are taken from that reader by the functions that take
    a single-file release's (:func:`geokanon.verify.counts.id_tallies`,
    :func:`~geokanon.verify.counts.group_unit_tally`): ``ids`` (per kind), ``records``
    (the part's rows), ``wrong_units`` and ``released`` (records per unit id).
    """
    ids = members["id"].to_numpy(dtype=np.int64)
    subjects = members["subject"]
    if has_subject:
        codes = pd.factorize(subjects, use_na_sentinel=False)[0].astype(np.int64)
    else:  # every record is its own subject: its source row stands for it
        codes = subjects.to_numpy(dtype=np.int64)
    part_rows = PartRows(
        kind=kind, ids=ids, x=members["x"].to_numpy(dtype=np.float64),
        y=members["y"].to_numpy(dtype=np.float64), subjects=codes, units=members["unit"],
        kept=_members_kept(members),
    )  # fmt: skip
    view = ReleaseReader.of_part(
        root, part_rows, published, k=k, r_max_m=r_max, crs=crs, tolerance_m=tolerance_m,
        record_file=path,
    )  # fmt: skip
    names = list(_PART_CHECKS) if kind == "group" else ["k_subjects"]
    out = {r.name: r for r in run_checks(_PART_CHECKS, view, names)}
    tallies: dict[str, Any] = {}
    if path is not None:
        try:
            rows = record_rows(view)
            found = [*([rows.unreadable] if rows.unreadable else []), *rows.problems]
            tallies["ids"] = id_tallies(view, rows)
            if rows.unreadable is None:
                tallies["records"] = rows.rows
            tallies["wrong_units"], tallies["released"] = group_unit_tally(view)
        except Unreadable as exc:
            found = [f"cannot check: {exc}"]
        out["counts"] = CheckResult("counts", not found, "; ".join(found))
    return out, tallies


def _part_task(
    root: str,
    j: int,
    part: dict[str, Any],
    scratch: str,
    k: int,
    r_max: float,
    tolerance_m: float,
    tiling: Mapping[str, float],
    has_subject: bool,
    bad_names: frozenset[str],
    scan: bool,
    crs: str | None = None,
    row_groups: list[int] | None = None,
    figures: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Every per-group (or per-class) check of one release part.

    ``figures`` are the release's ``groups``, ``classes``, ``records`` (the bound of a
    count column) and ``r_max_m``, which set what a structural column may hold
    (``no_leak``).

    ``row_groups`` are the row groups of ``groups.parquet`` (or ``classes.parquet``)
    that can hold the part's ids (:func:`_row_groups_of`); ``None``: all of them.

    ``crs`` is the release's CRS (working and published): when it is named, a member
    within r_max on the map is measured again on its ellipsoid, as in
    :func:`geokanon.verify.verify_release` (``extent``).
    """
    rel = Path(root) / "release"
    d = Path(scratch) / f"v{j:05d}"
    figures = dict(figures or {"groups": 0, "classes": 0, "records": 0, "r_max_m": r_max})
    probs: dict[str, list[str]] = {
        "k_subjects": [], "extent": [], "representation": [], "counts": [], "no_leak": []
    }  # fmt: skip
    out: dict[str, Any] = {"problems": probs, "released": {}, "rows": 0}
    path = rel / str(part["file"])
    name = str(part["file"])
    try:
        pq.ParquetFile(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        probs["counts"].append(f"{name} is unreadable ({type(exc).__name__})")
        return out
    # the part's encoding (no_leak), re-encoded in a thread of its own beside this task's
    # own reads and checks (pyarrow's work, mostly outside the interpreter lock)
    encoding = encodings_in_background([path] if scan else []).get(path)
    out["sha256"] = _sha256(path)  # for manifest, on the driver
    members = _read_pieces(d, "m", ["id", "x", "y", "subject", "raw_subject", "unit"])
    mx = members["x"].to_numpy(dtype=np.float64)
    my = members["y"].to_numpy(dtype=np.float64)
    first, end = int(part["first"]), int(part["end"])
    kind = part["kind"]
    table = "groups.parquet" if kind == "group" else "classes.parquet"
    id_col = "group_id" if kind == "group" else "class_id"
    try:
        # geometry and bbox kept in Arrow, as the single-file reader keeps groups.parquet's
        rows = _id_range(rel / table, id_col, first, end, row_groups).to_pandas(
            types_mapper=_arrow_backed
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        probs["counts"].append(f"{table} is unreadable ({type(exc).__name__})")
        return out
    out["rows"] = len(rows)
    ids = rows[id_col].to_numpy(dtype=np.int64)
    if not np.array_equal(np.sort(ids), np.arange(first, end)):  # (so each id once, too)
        probs["counts"].append(f"{table}: ids {first}..{end - 1} are not each present once")
    published = rows
    rows = rows.drop_duplicates(id_col).set_index(id_col)
    # k_subjects, and for groups extent and representation: the single-file checks, on
    # a reader of this part (its rows of the table, its members); the records pass
    # gives the part's rows per group and class
    # and this part's tallies of the single-file counts rules (geokanon.verify.counts),
    # merged and judged on the driver
    out["checks"], tallies = _part_checks(
        Path(root), kind, published, members, has_subject, k, r_max, tolerance_m, crs, path
    )
    out.update(tallies)
    if kind == "group":
        rx = pd.to_numeric(rows["x"]).to_numpy(dtype=np.float64)
        ry = pd.to_numeric(rows["y"]).to_numpy(dtype=np.float64)
        key = _tile_key(rx, ry, tiling)
        if ((key < int(part["tile_lo"])) | (key > int(part["tile_hi"]))).any():
            probs["no_leak"].append(
                f"{name}: representatives outside the part's tiles (not every source point "
                "near them was compared)"
            )
    # each row's representative, level and unit: the records pass (_part_checks)
    if scan:
        coords = _read_pieces(d, "c", ["x", "y"])
        sx = np.concatenate([mx, coords["x"].to_numpy(dtype=np.float64)])
        sy = np.concatenate([my, coords["y"].to_numpy(dtype=np.float64)])
        ids_ = members["raw_subject"].to_numpy(dtype=object) if has_subject else None
        kept = _members_kept(members)
        # the distinct texts only (str of each distinct value: the same set)
        texts = {str(u) for u in pd.unique(members["unit"])} | set(LEVELS)
        if "unit" in rows.columns:
            texts |= {str(u) for u in pd.unique(rows["unit"])}
        numbers = [np.array([float(v) for v in figures.values()], dtype=np.float64)]
        if kind == "group":
            numbers += [pd.to_numeric(rows[c]).to_numpy(dtype=np.float64) for c in ("x", "y")]
        sec = _strict_secrets(
            Path(root), sx, sy, ids_, kept, k=k, bad_names=bad_names, figures=figures,
            unit_texts=frozenset(texts), published=distinct_values(np.concatenate(numbers)),
            crs=crs,
        )  # fmt: skip
        found = scan_parquet(path, sec, None if encoding is None else encoding.result())
        if kind == "group":
            found += [f"groups.parquet rows: {f}" for f in scan_frame(rows.reset_index(), sec)]
        if found:
            probs["no_leak"].append(f"{name}: " + ", ".join(dict.fromkeys(found)))
    return out


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------


def _figures(rel: Path, records: int, r_max: float) -> dict[str, float]:
    """The release's numbers of groups and classes (its tables' rows), its source
    records and ``r_max_m``: what its structural columns may hold (``no_leak``)."""
    out = {"groups": 0.0, "classes": 0.0, "records": float(records), "r_max_m": r_max}
    for name, table in (("groups", "groups.parquet"), ("classes", "classes.parquet")):
        with contextlib.suppress(OSError, pa.ArrowException):
            out[name] = float(pq.ParquetFile(rel / table).metadata.num_rows)
    return out


def _sample_every(manifest: Mapping[str, Any]) -> int:
    """The manifest's ``report_sample.every`` when it is an integer >= 2, else 0 (then
    ``manifest`` says what is wrong with it)."""
    entry = manifest.get("report_sample")
    every = entry.get("every") if isinstance(entry, Mapping) else None
    if isinstance(every, int) and not isinstance(every, bool) and every >= 2:
        return every
    return 0


def _metadata_text(path: Path, meta: Mapping[bytes, bytes], crs: str | None) -> str:
    """``groups.parquet``'s key-value metadata as the single-file scan reads it: the
    GeoParquet CRS definition of the release's own CRS left out (its numbers are the
    CRS's), and a ``bbox`` left out when it is exactly the extent of the published
    representatives (read row group by row group)."""
    texts = []
    for key, value in meta.items():
        decoded = value.decode("utf-8", errors="replace")
        if key == b"geo":
            extent = None
            with contextlib.suppress(OSError, KeyError, pa.ArrowException):
                pf = pq.ParquetFile(path)
                lo = [math.inf, math.inf]
                hi = [-math.inf, -math.inf]
                for i in range(pf.num_row_groups):
                    t = pf.read_row_group(i, columns=["x", "y"])
                    for j in range(2):
                        mm = pc.min_max(t.column(j)).as_py()
                        if mm["min"] is not None:
                            lo[j], hi[j] = min(lo[j], mm["min"]), max(hi[j], mm["max"])
                extent = [lo[0], lo[1], hi[0], hi[1]]
            if extent is not None and math.isfinite(extent[0]):
                decoded = without_geography(decoded, extent)
            decoded = without_declared_crs(decoded, crs)
        texts.append(decoded)
    return "\n".join(texts)


def _published(
    root: Path, k: int, figures: Mapping[str, float], *, own_subjects: bool
) -> dict[str, Any]:
    """What the small files publish as figures and structure: the single-file
    :func:`geokanon.verify.leak_rules.published_values` on the small files (the numbers
    ``holes`` reads from them, with ``groups.parquet`` left to the part tasks, which add
    their representatives), the release's own figures, and the unit ids of
    ``units.csv`` and ``classes.parquet``. A number of the prose equal to one of them is
    that figure, a text one of them no subject id."""
    view = ReleaseReader(root, None, 0.0)
    units: set[str] = set()
    with contextlib.suppress(Unreadable, OSError, ValueError, KeyError, TypeError):
        units |= {str(u) for u in view.units_table["unit"].tolist()}
    with contextlib.suppress(Unreadable, OSError, ValueError, KeyError, TypeError):
        if "unit" in view.classes:
            units |= {str(u) for u in view.classes["unit"].tolist()}

    def system_inputs(rel: ReleaseReader) -> dict[str, Any]:
        # as holes_check is called on the driver (_check_holes): groups are in the parts
        return {
            "k": k, "manifest": rel.manifest, "rows": unit_rows(rel), "groups": None,
            "classes": rel.classes, "own_subjects": own_subjects,
            "record_bound": int(figures["records"]), "groups_by_majority_unit": True,
            "records_rows": None, "notes": text_file(rel.rel / "RELEASE_NOTES.md"),
            "report": text_file(rel.rel / "report.html"),
        }  # fmt: skip

    numbers, texts = published_values(view, system_inputs, frozenset(units))
    own = np.array([float(v) for v in figures.values()], dtype=np.float64)
    return {
        "numbers": distinct_values(np.concatenate([numbers, own])),
        "texts": texts,
        "root": str(root),
    }


def _unit_classes(rel: Path) -> pd.DataFrame:
    """The rows of ``classes.parquet`` whose level is ``unit`` (``class_id``, ``level``,
    ``unit``): the source tasks count their records per unit (an unreadable table: none,
    and the checks that read it fail)."""
    with contextlib.suppress(OSError, ValueError, KeyError, pa.ArrowException):
        c = pd.read_parquet(rel / "classes.parquet")
        if {"class_id", "level", "unit"} <= set(c.columns):
            c = c.loc[c["level"].astype(str) == "unit", ["class_id", "level", "unit"]]
            if pd.to_numeric(c["class_id"], errors="coerce").notna().all():
                return c.reset_index(drop=True)
    return pd.DataFrame({"class_id": pd.Series(dtype=np.int64)})


def _kept_columns(rel: Path, parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The kept columns of the release parts: every column of any part's schema that the
    format does not define (a part that cannot be read says so in its own task)."""
    found: dict[str, None] = {}
    for p in parts:
        with contextlib.suppress(OSError, pa.ArrowException):
            for name in pq.read_schema(rel / str(p["file"])).names:
                if name not in RECORD_FORMAT_COLUMNS:
                    found[str(name)] = None
    return list(found)


def _run_tasks(client: Any, func: Callable[..., Any], payloads: list[tuple[Any, ...]]) -> list[Any]:
    if client is None:
        return [func(*p) for p in payloads]
    futures = [client.submit(func, *p, pure=False) for p in payloads]
    try:
        return list(client.gather(futures))
    finally:
        for fut in futures:
            fut.release()


def _small_files(
    root: Path, scratch: Path, records: int, *, working: Any, own_subjects: bool
) -> dict[str, Any]:
    """What the small files say, read once they are final: the files ``no_leak`` scans
    against every source partition (``groups.parquet``'s metadata as text in
    ``scratch``), the manifest's ``k``, ``r_max_m`` and ``report_sample.every``, the
    release's figures (:func:`_figures`) and what it publishes (:func:`_published`, with
    the release's CRS: the audit's working CRS ``working``, else the manifest's)."""
    rel = root / "release"
    manifest = _json(rel / "manifest.json")
    k = int(manifest.get("k", 0) or 0)
    r_max = float(manifest.get("r_max_m", 0.0) or 0.0)
    crs = working or manifest.get("crs") or None
    crs = None if crs is None else str(crs)
    scan = [(s, str(rel / s)) for s in SMALL_FILES if (rel / s).is_file()]
    if (rel / "groups.parquet").is_file():
        meta = pq.read_schema(rel / "groups.parquet").metadata or {}
        meta_file = scratch / "groups-metadata.txt"
        meta_file.write_text(_metadata_text(rel / "groups.parquet", meta, crs))
        scan.append(("groups.parquet (metadata)", str(meta_file)))
    figures = _figures(rel, records, r_max)
    published = _published(root, k, figures, own_subjects=own_subjects)
    published["crs"] = crs
    return {
        "leak_files": scan, "k": k, "r_max": r_max, "figures": figures,
        "published": published, "sample_every": _sample_every(manifest),
    }  # fmt: skip


def _source_round_beside(
    client: Any,
    payloads: list[tuple[Any, ...]],
    before_scan: Callable[[], None],
    small_files: Callable[[], dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The source tasks, submitted before ``before_scan`` runs here: they check and route
    their partitions meanwhile, then wait (:func:`_when_final`) for what the small files
    say, read here (``small_files``) once it has returned, and scan them. Returns their
    results and what the small files say.

    If ``before_scan`` or the reading fails, the tasks are told (``None``) and return
    unscanned; every task has returned before this does (they write to the scratch
    directory the caller removes, and read the ``Variable`` this deletes)."""
    from distributed import Variable, wait

    var = Variable(f"geokanon-small-files-{uuid.uuid4().hex}", client=client)
    futures = [client.submit(_source_task, *p, None, var.name, pure=False) for p in payloads]
    held: list[Any] = []
    try:
        try:
            before_scan()
            small = small_files()
        except BaseException:
            var.set(None)
            raise
        held = client.scatter([small], hash=False)  # once, not once per task
        var.set(held[0])
        return list(client.gather(futures)), small
    finally:
        wait(futures)
        var.delete()
        for fut in [*futures, *held]:
            fut.release()


def _result(name: str, problems: Sequence[str], ok_detail: str) -> CheckResult:
    if problems:
        more = f" (and {len(problems) - _MAX_NOTES} more)" if len(problems) > _MAX_NOTES else ""
        return CheckResult(name, False, "; ".join(problems[:_MAX_NOTES]) + more)
    return CheckResult(name, True, ok_detail)


def _json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path.name} is missing or unreadable ({type(exc).__name__})") from None


def verify_partitioned(
    directory: str | Path,
    *,
    source: Any,
    client: Any = None,
    scratch_dir: str | Path | None = None,
    tolerance_m: float = 0.0,
    checks: Sequence[str] | None = None,
    before_scan: Callable[[], None] | None = None,
) -> VerificationReport:
    """Run every check of :data:`geokanon.verify.CHECKS` on a partitioned release.

    Parameters
    ----------
    directory
        The directory holding ``release/`` and ``audit/`` (final or being built).
    source
        The source partitions the release was made from (a
        :class:`geokanon.distributed.ParquetPartitions` or any object with
        ``__len__`` and ``load(i)``), re-read here.
    client
        A ``distributed.Client`` (tasks on the cluster), or ``None`` (here, one
        after the other).
    scratch_dir
        Where the routed pieces go (every worker must read and write it);
        removed afterwards.
    tolerance_m
        Slack added to ``r_max_m`` in ``extent`` (and the distance at which a
        representative counts as a member's coordinate).
    checks
        Run only these checks (default: all).
    before_scan
        Writes the small files (the release writer's report, notes and final manifest),
        called here once the source tasks are submitted: they check and route their
        partitions meanwhile and read what the small files say (and scan them) only
        once it has returned. Without a client it is called first.

    Returns
    -------
    geokanon.verify.VerificationReport
    """
    root = Path(directory)
    rel, aud = root / "release", root / "audit"
    if not rel.is_dir() or not aud.is_dir():
        raise InputError(
            f"{str(root)!r} is not a release directory: it must hold release/ and audit/"
        )
    names = tuple(CHECKS if checks is None else checks)
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        raise InputError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    if before_scan is not None and client is None:
        before_scan()  # nothing runs beside it
        before_scan = None
    audit = _json(aud / "audit.json")
    info = audit.get("partitioned")
    if not isinstance(info, Mapping):
        raise InputError(
            f"{str(root)!r} is not a partitioned release (no audit.json 'partitioned'); "
            "verify it with geokanon.verify.verify_release"
        )
    sizes = [int(s) for s in info.get("rows_per_source_part", [])]
    if len(source) != len(sizes):
        raise InputError(
            f"the source has {len(source)} partitions; the release was made from {len(sizes)}"
        )
    parts: list[dict[str, Any]] = [dict(p) for p in info.get("parts", [])]
    tiling = dict(info.get("tiling", {}))
    roles = dict(audit.get("read_options", {}))
    bad = set(ROW_NAMES) | {str(roles[c]) for c in ("subject", "time") if roles.get(c)}
    bad_names = frozenset({b.lower() for b in bad} - STRUCTURAL)
    need_parts = any(
        c in names for c in ("k_subjects", "extent", "representation", "counts", "no_leak")
    )
    route: dict[str, Any] | None = None
    if need_parts:
        route = {"tiling": tiling}
        for kind in ("group", "class"):
            sel = [(j, p) for j, p in enumerate(parts) if p.get("kind") == kind]
            route[kind] = {
                "index": [j for j, _ in sel],
                "first": [int(p["first"]) for _, p in sel],
                "end": [int(p["end"]) for _, p in sel],
                "tile_lo": [int(p.get("tile_lo", 0)) for _, p in sel],
                "tile_hi": [int(p.get("tile_hi", 0)) for _, p in sel],
            }
    # groups.parquet's encoding, worked out here while the tasks run
    groups = [rel / "groups.parquet"] if "no_leak" in names else []
    encodings = encodings_in_background([p for p in groups if p.is_file()])
    base = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
    scratch = base / f"geokanon-verify-{uuid.uuid4().hex[:12]}"
    scratch.mkdir(parents=True)
    try:
        offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        kept = _kept_columns(rel, parts) if need_parts else []
        unit_classes = _unit_classes(rel)
        payloads = [
            (source, i, int(offsets[i]), str(root), route, str(scratch), bad_names, kept,
             unit_classes)
            for i in range(len(sizes))
        ]  # fmt: skip

        def small_files() -> dict[str, Any]:
            return _small_files(
                root, scratch, int(offsets[-1]), working=audit.get("working_crs"),
                own_subjects=not roles.get("subject"),
            )  # fmt: skip

        if before_scan is None:
            small = small_files()
            r1 = _run_tasks(client, _source_task, [(*p, small) for p in payloads])
        else:
            r1, small = _source_round_beside(client, payloads, before_scan, small_files)
        k, r_max, figures = small["k"], small["r_max"], small["figures"]
        working = small["published"]["crs"]
        has_subject = bool(r1[0]["has_subject"]) if r1 else False
        r2: list[dict[str, Any]] = []
        if need_parts:
            ranges = {}
            for kind, table, id_col in (
                ("group", "groups.parquet", "group_id"),
                ("class", "classes.parquet", "class_id"),
            ):
                try:
                    ranges[kind] = _id_ranges(rel / table, id_col)
                except (OSError, KeyError, pa.ArrowException):
                    pass  # unreadable: every part reads it, and says so
            r2 = _run_tasks(
                client, _part_task,
                [(str(root), j, p, str(scratch), k, r_max, tolerance_m, tiling, has_subject,
                  bad_names, "no_leak" in names, working,
                  _row_groups_of(ranges[p["kind"]], int(p["first"]), int(p["end"]))
                  if p.get("kind") in ranges else None, figures)
                 for j, p in enumerate(parts)],
            )  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reader = _PartitionedRelease(root, parts, r1, r2, has_subject)
    reader.encodings.update(encodings)
    # each part's sha256, taken by its task from the file's bytes (``manifest`` reads
    # them as the single-file check reads the digests of what no_leak read whole)
    for j, r in enumerate(r2):
        if r.get("sha256"):
            reader.read_digests[rel / str(parts[j]["file"])] = r["sha256"]
    results = run_checks(_CHECK_FUNCS, reader, names)
    return VerificationReport(results, digests=dict(reader.digests))


class _PartitionedRelease(ReleaseReader):
    """A partitioned release as the driver's checks read it.

    The small files (``manifest.json``, ``audit.json``, ``units.csv``,
    ``classes.parquet``, the notes and the report) are read as :class:`ReleaseReader` reads
    them. What a single-file release derives from its audit's per-record arrays is
    reduced here from the tasks' results: distinct subjects and suppressed subjects
    (overall and per unit, from the distinct ``(unit, subject, suppressed)`` triples),
    the source's checksum, records per unit and per disposal. So ``tau``,
    ``unit_cap``, ``fixed_point``, ``report_safety`` and ``manifest`` run as the
    same code (:mod:`~geokanon.verify.caps`, ...) in both layouts.
    """

    def __init__(
        self,
        root: Path,
        parts: list[dict[str, Any]],
        r1: list[dict[str, Any]],
        r2: list[dict[str, Any]],
        has_subject: bool,
    ) -> None:
        super().__init__(root, None, 0.0)
        self.parts, self.r1, self.r2 = parts, r1, r2
        self.has_subject = has_subject
        self.n = int(sum(r["n"] for r in r1))
        full = [r for r in r1 if "disposals" in r]
        self.complete = len(full) == len(r1)
        self.unit_records = (
            pd.concat([r["unit_records"] for r in full]).groupby(level=0).sum()
            if full
            else pd.Series(dtype=np.int64)
        )
        if has_subject and full:
            # distinct subjects per unit: counted on the merged (unit, subject) pairs
            t = pd.concat([r["triples"] for r in full], ignore_index=True)
            per = t.groupby(["unit", "subject"], sort=True)[["sup", "up"]].any().reset_index()
            unit_subjects = per.groupby("unit")["sup"].size()
            self.unit_sup = per.groupby("unit")["sup"].sum()
            self.unit_up = per.groupby("unit")["up"].sum()
            subj = t.groupby("subject")["sup"].any()
            subjects, sup_subjects = int(subj.size), int(subj.sum())
            raw_ids = np.unique(np.concatenate([r["raw_ids"] for r in full]))
            self.subject_ids_merged = int(raw_ids.size) - subjects
        else:
            sup, up = (
                pd.concat([r[f] for r in full]).groupby(level=0).sum()
                if full
                else pd.Series(dtype=np.int64)
                for f in ("unit_suppressed_records", "unit_up_records")
            )
            unit_subjects = self.unit_records
            self.unit_sup = sup.reindex(self.unit_records.index, fill_value=0)
            self.unit_up = up.reindex(self.unit_records.index, fill_value=0)
            subjects = self.n
            sup_subjects = int(self.unit_sup.sum())
            self.subject_ids_merged = 0
        self.n_subjects, self.sup_subjects = subjects, sup_subjects
        self.audit_tally = functools.reduce(
            AuditTally.merge, [r["audit"] for r in full], AuditTally()
        )
        self.disposals = self.audit_tally.disposals
        names = np.asarray([str(u) for u in unit_subjects.index], dtype=object)
        n_sup = self.unit_sup.reindex(unit_subjects.index, fill_value=0)
        # the figures the shared checks read (see geokanon.verify._derived)
        self.__dict__["_suppressed_subjects"] = (sup_subjects, subjects)
        self.__dict__["_unit_subjects"] = (
            names,
            unit_subjects.to_numpy(dtype=np.int64),
            n_sup.to_numpy(dtype=np.int64),
        )
        self.__dict__["own_subjects"] = not has_subject
        shas = [r.get("sha256") for r in r1]
        combined = ""
        if shas and all(shas):
            combined = hashlib.sha256("\n".join(str(x) for x in shas).encode()).hexdigest()
        self.__dict__["source"] = Source(sha256=combined)
        self.sampled = (
            int(sum(r["sample_records"] for r in r1))
            if r1 and all("sample_records" in r for r in r1)
            else None
        )

    def report_sample_basis(self, every: int) -> tuple[int, int]:
        """(the source's records, the records the report sample of 1 in ``every``
        draws: the source tasks' counts, summed; each counted the manifest's ``every``)."""
        if self.sampled is None or every != _sample_every(self.manifest):
            raise Unreadable("the audit parts' report sample could not be counted")
        return self.n, self.sampled

    @cached_property
    def groups(self) -> pd.DataFrame:
        """``groups.parquet`` as the driver's checks read it: one row per group, with its
        ``radius_m`` only (``manifest`` compares it with ``r_max_m``). Every other column
        is checked by the part tasks, each on its own row groups; read whole here, its
        geometry and ``bbox`` cost gigabytes at 1e8 records. A missing column that the
        format requires fails as in :class:`~geokanon.verify._reader.ReleaseReader`."""
        path = self.rel / "groups.parquet"
        if not path.is_file():
            raise Unreadable("release/groups.parquet is missing")
        try:
            schema = pq.read_schema(path)
            for c in ("group_id", "n_records", "x", "y"):
                if c not in schema.names:
                    raise Unreadable(f"groups.parquet lacks column {c!r}")
            if "radius_m" in schema.names:
                return pq.read_table(path, columns=["radius_m"]).to_pandas()
            return pd.DataFrame(index=pd.RangeIndex(pq.ParquetFile(path).metadata.num_rows))
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"groups.parquet is unreadable ({type(exc).__name__})") from None


def _part_problems(rel: _PartitionedRelease, name: str) -> list[str]:
    """The part tasks' findings for check ``name``: their own, and the failed results of
    the single-file check each ran on its part (named by the part's file)."""
    out = [p for r in rel.r2 for p in r["problems"][name]]
    for j, r in enumerate(rel.r2):  # no part round: none
        result = r.get("checks", {}).get(name)
        if result is not None and not result.passed:
            out.append(f"{rel.parts[j]['file']}: {result.detail}")
    return out


def _scope(rel: _PartitionedRelease) -> str:
    return f"{len(rel.parts)} parts, {len(rel.r1)} source partitions"


def _check_holes(rel: _PartitionedRelease) -> CheckResult:
    # the same system as the single-machine verifier: every figure of every release file
    # (the groups are in the parts: their sizes enter through the manifest's counts)
    return holes_check(
        k=rel.k, manifest=rel.manifest, rows=unit_rows(rel),
        units_table=rel.units_table, groups=None, classes=rel.classes,
        own_subjects=rel.own_subjects, record_bound=rel.n,
        groups_by_majority_unit=True, records_rows=None,
        notes=text_file(rel.rel / "RELEASE_NOTES.md"),
        report=text_file(rel.rel / "report.html"),
    )  # fmt: skip


def _check_k_subjects(rel: _PartitionedRelease) -> CheckResult:
    n_groups = int(rel.manifest.get("groups", 0) or 0)
    return _result(
        "k_subjects", _part_problems(rel, "k_subjects"),
        f"{n_groups} groups and {len(rel.classes)} classes hold >= {rel.k} distinct "
        f"subjects ({_scope(rel)})",
    )  # fmt: skip


def _check_extent(rel: _PartitionedRelease) -> CheckResult:
    return _result(
        "extent", _part_problems(rel, "extent"),
        f"every member within r_max of its representative ({_scope(rel)})",
    )  # fmt: skip


def _check_representation(rel: _PartitionedRelease) -> CheckResult:
    return _result(
        "representation", _part_problems(rel, "representation"),
        "no representative equals a member's coordinate or its members' mean",
    )  # fmt: skip


def _check_no_leak(rel: _PartitionedRelease) -> CheckResult:
    problems = [leak for r in rel.r1 for leak in r["leaks"]]
    # the same finding from several partitions once
    problems = list(dict.fromkeys(problems))
    problems += _part_problems(rel, "no_leak")
    problems += sample_phrase_findings(rel, SMALL_FILES)
    # groups.parquet's container (its rows are the parts', its metadata text the source
    # tasks'); its encoding as worked out while the tasks ran
    path = rel.rel / "groups.parquet"
    if path.is_file():
        found = parquet_container_problems(path, rel.encoding_findings(path))
        problems += [f"groups.parquet: {', '.join(found)}"] if found else []
    listed = {str(p["file"]) for p in rel.parts}
    scanned_small = {*SMALL_FILES, "groups.parquet"}  # groups.parquet: its rows in the parts
    for p in sorted(rel.rel.rglob("*")):
        name = p.relative_to(rel.rel).as_posix()
        if p.is_file() and name not in listed and name not in scanned_small:
            problems.append(f"{name}: a file no check scans")
    return _result(
        "no_leak", problems,
        f"{len(rel.parts)} parts and the small files scanned for source coordinates, "
        "subject ids and row numbers (scope: see the manifest's verification_scope)",
    )  # fmt: skip


def _unit_tally(rel: _PartitionedRelease) -> UnitTally:
    """The parts' and source partitions' unit figures, merged (:class:`UnitTally`)."""
    pieces = [pd.Series(r["released"], dtype=np.int64) for r in rel.r2 if r["released"]]
    pieces += [r["class_released"] for r in rel.r1 if "class_released" in r]
    released = pd.concat(pieces).groupby(level=0).sum() if pieces else pd.Series(dtype=np.int64)

    def by_name(series: pd.Series) -> dict[str, int]:
        return {str(u): int(v) for u, v in series.items()}

    return UnitTally(
        released=by_name(released),
        totals={u: v for u, v in by_name(rel.unit_records).items() if v},
        suppressed=by_name(rel.unit_sup),
        up=by_name(rel.unit_up),
        wrong_group_units=int(sum(r.get("wrong_units", 0) for r in rel.r2)),
    )


#: How the messages name a partitioned release's records files.
_PART_FILES = "records/part-*.parquet"


def _check_counts(rel: _PartitionedRelease) -> CheckResult:
    """``counts`` by the single-file rules (:mod:`geokanon.verify.counts`): every part's
    and source partition's tallies merged, then judged by the same functions; plus what
    the layout adds (the audit parts against the source partitions, each part's id range
    present once, the parts covering ``groups.parquet`` and ``classes.parquet``)."""
    problems = [p for r in rel.r1 for p in r["problems"]]
    m = rel.manifest
    k = rel.k
    if not rel.complete:
        return _result("counts", problems or ["the audit could not be read"], "")
    problems += audit_problems(rel.audit_tally)
    problems += subject_ids_merged_problems(m, rel.subject_ids_merged)
    for kind in ("group", "class"):
        # a class part's group tally is empty, and a group part's class tally
        tallies = [r["ids"][kind] for r in rel.r2 if "ids" in r]
        merged = functools.reduce(IdTally.merge, tallies, IdTally())
        problems += id_problems(kind, merged, _PART_FILES)
    rows_total = int(sum(r.get("records", 0) for r in rel.r2))
    released = rel.n - rel.disposals["suppressed"]
    problems += records_total_problems(rows_total, released, _PART_FILES)
    problems += _part_problems(rel, "counts")
    if m.get("records_published") != rows_total:
        problems.append("manifest records_published differs from the parts' rows")
    n_groups = sum(r["rows"] for j, r in enumerate(rel.r2) if rel.parts[j]["kind"] == "group")
    group_rows = len(pd.read_parquet(rel.rel / "groups.parquet", columns=["group_id"]))
    if n_groups != group_rows or m.get("groups") != group_rows:
        problems.append("groups.parquet rows are not all covered by the parts")
    class_rows = sum(r["rows"] for j, r in enumerate(rel.r2) if rel.parts[j]["kind"] == "class")
    if class_rows != len(rel.classes) or m.get("classes") != len(rel.classes):
        problems.append("classes.parquet rows are not all covered by the parts")
    t = rel.units_table
    problems += unit_problems(k, unit_rows(rel), t, m, _unit_tally(rel))
    problems += units_csv_writing_problems(rel.rel / "units.csv", t)
    problems += geoparquet_bbox_problems(rel.rel / "classes.parquet")
    problems += point_file_problems(rel.rel / "groups.parquet")
    # the partitioned layout publishes no synthetic records (the writer refuses them)
    problems += manifest_count_problems(
        m, k, rel.disposals, n=rel.n, n_syn=0, s_subj=rel.sup_subjects,
        n_subj=rel.n_subjects, syn_pooled=0,
    )  # fmt: skip
    return _result(
        "counts", problems,
        f"{rows_total} published records, {group_rows} groups, {len(rel.classes)} classes "
        f"and {len(t)} unit rows equal what the audit assigns",
    )  # fmt: skip


#: Every check by name: the per-part checks reduced from the tasks, the rest shared.
_CHECK_FUNCS: dict[str, Callable[[_PartitionedRelease], CheckResult]] = {
    "k_subjects": _check_k_subjects,
    "extent": _check_extent,
    "tau": check_tau,
    "unit_cap": check_unit_cap,
    "holes": _check_holes,
    "no_leak": _check_no_leak,
    "representation": _check_representation,
    "counts": _check_counts,
    "fixed_point": check_fixed_point,
    "report_safety": check_report_safety,
    "manifest": check_manifest,
}

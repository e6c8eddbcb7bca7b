"""The records files read row by row against the release's tables, the audit and the source.

One streaming pass (:class:`_RecordsPass`, cached per release by :func:`record_rows`)
serves ``counts`` (each row's group or class, representative, level and unit; each group's
and class's multiset of time bins and kept values against its members'; ``records.csv``
against ``records.parquet``) and ``k_subjects`` (the published (group or class, time bin)
cells). It reads ``records.parquet``, or a partitioned release's parts in order, in
batches, and keeps nothing per row beyond a batch. ``records.csv`` is compared with
``records.parquet`` when ``counts`` asks (:func:`record_rows`), from ``no_leak``'s read
of the file when that came first (:class:`_CsvTap`: the file is parsed once), else read
here with the Parquet file's column types.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.verify import _reader
from geokanon.verify._arrays import (
    IdLookup,
    RowHasher,
    arrow_ids,
    dict_indices,
    factorize_arrow,
    first_unequal,
    in_sorted,
    positions_in,
    sums_per,
    value_counts,
    value_runs,
)
from geokanon.verify._derived import rep_arrays
from geokanon.verify._once import once
from geokanon.verify._reader import ReleaseReader, read_ahead
from geokanon.verify._results import Unreadable
from geokanon.verify.leak_rules import CSV_NA, ParquetScan, wkb_xy

#: Columns of the records files that the format defines; any other is a kept column.
RECORD_FORMAT_COLUMNS = (
    "group_id", "class_id", "level", "unit", "x", "y", "time_bin", "geometry", "bbox"
)  # fmt: skip
#: Columns of ``records.parquet`` that ``records.csv`` does not have.
_PARQUET_ONLY = ("geometry", "bbox")
_MEMBER_ROWS = 1 << 20


def _text_positions(arr: pa.Array, look: pd.Index) -> NDArray[np.int64]:
    """Each text's position in ``look`` (-1: another text, -2: null), by its dictionary."""
    if pa.types.is_null(arr.type):
        return np.full(len(arr), -2, dtype=np.int64)
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    words = [str(w) for w in arr.dictionary.to_pylist()]
    pos = np.append(np.asarray(look.get_indexer(pd.Index(words)), dtype=np.int64), -2)
    idx = dict_indices(arr)
    return pos[np.where(idx < 0, pos.size - 1, idx)]


def _float_column(col: pa.Array) -> NDArray[np.float64] | None:
    """A numeric column as float64, NaN where null (None: not numbers); read-only."""
    import pyarrow.compute as pc

    try:
        return np.asarray(pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False), np.float64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _as_type(values: pd.Series, t: pa.DataType, *, text: bool) -> pa.Array | None:
    """A source column as values of the published column's Arrow type ``t`` (None: it
    cannot be read so).

    ``text``: the column is a CSV file's cells (read with no missing-value markers),
    parsed as the release read them: pandas' markers are missing values, numbers as
    ``pandas.to_numeric`` reads them, ``True``/``False`` as booleans.
    """
    import pyarrow.compute as pc

    if text:
        cells = values.astype(object).where(~values.isin(CSV_NA), None)
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            num = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64)
            try:
                return pc.cast(pa.array(num, from_pandas=True), t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        if pa.types.is_boolean(t):
            words = {"True": True, "TRUE": True, "true": True,
                     "False": False, "FALSE": False, "false": False}  # fmt: skip
            return pa.array(cells.map(words).to_numpy(dtype=object), type=pa.bool_())
        values = cells
    try:
        arr = pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError):
        arr = pa.array(values.astype(str).to_numpy(dtype=object), type=pa.large_string())
    if arr.type == t:
        return arr
    try:
        return pc.cast(arr, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _csv_column(col: pa.Array, t: pa.DataType) -> pa.Array:
    """A ``records.csv`` column read as text, as ``records.parquet``'s type ``t``: an integer
    column may be written as whole floats (``3.0``, as pandas writes nullable integers)."""
    import pyarrow.compute as pc

    try:
        return pc.cast(col, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if not pa.types.is_integer(t):
            raise
        return pc.cast(pc.cast(col, pa.float64()), t)  # safe: 2.5 does not pass


@dataclass
class RecordRows:
    """What one pass over the records files found (:func:`record_rows`)."""

    #: ``counts``' findings
    problems: list[str] = field(default_factory=list)
    #: why the files could not be read (then the figures below are incomplete)
    unreadable: str | None = None
    rows: int = 0
    #: rows per group id and per class id (ids as published)
    per_group: pd.Series | None = None
    per_class: pd.Series | None = None
    #: the published (group or class, time bin) cells: ``key * stride + bin code`` (a
    #: time bin the audit never assigns has code ``stride - 1``), and the rows in each
    cells: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cell_rows: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stride: int = 1
    #: rows of no published group or class (or of both a group and a class)
    orphans: int = 0
    #: what was compared per group and class, for the detail line
    compared: tuple[str, ...] = ()
    #: whether the records were read (see :func:`_rows_apply`)
    read: bool = True
    #: per column of ``records.parquet`` (less ``geometry``, ``bbox``), the sum of its
    #: values' keyed hashes tied to their rows (what ``records.csv`` must sum to)
    column_sums: dict[str, int] = field(default_factory=dict, repr=False)
    #: whether ``records.csv`` is still to be compared with ``records.parquet`` (a
    #: single-file release whose records were read; its findings go to ``problems``)
    csv_due: bool = False


def _text_columns(schema: pa.Schema) -> list[str]:
    """The text columns of a records file (read as dictionaries: each distinct text once)."""
    text = (pa.types.is_string, pa.types.is_large_string)
    return [f.name for f in schema if any(t(f.type) for t in text)]


def record_paths(rel: ReleaseReader) -> list[Path]:
    """The records files of ``rel``: ``record_files`` when a reader of one part of a
    partitioned release names its own, else ``records.parquet``, else every part."""
    given = rel.record_files
    if given is not None:
        return list(given)
    single = rel.rel / "records.parquet"
    if single.is_file() or not (rel.rel / "records").is_dir():
        return [single]
    return sorted((rel.rel / "records").glob("part-*.parquet"))


def _rows_apply(rel: ReleaseReader) -> bool:
    """Whether the records pass reads ``rel``'s records: a single-file release, or a
    reader that names its part (``record_files``). A partitioned release's driver
    holds no audit rows to compare its parts with."""
    return rel.record_files is not None or not (
        (rel.rel / "records").is_dir() and not (rel.rel / "records.parquet").is_file()
    )


def audit_time_bins(rel: ReleaseReader) -> tuple[NDArray[np.int64], NDArray[np.object_]] | None:
    """(code per audit row, label per code, sorted) when the audit has time bins."""

    def make() -> tuple[NDArray[np.int64], NDArray[np.object_]] | None:
        tb = rel.time_bins
        return None if tb is None else factorize_arrow(tb.cast(pa.string()).fill_null(""))

    return once(rel, "_audit_time_bins", make)


def _published_ids(rel: ReleaseReader) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(ids of ``groups.parquet``, ids of ``classes.parquet``): a group's key is its
    position, a class's the number of groups plus its position."""
    return rel.group_ids, rel.class_ids


def audit_keys(rel: ReleaseReader) -> NDArray[np.int64]:
    """Each audit row's key (numbered as :func:`_published_ids` says; -1: in no group
    or class, or in one that is not published)."""

    def make() -> NDArray[np.int64]:
        gids, cids = _published_ids(rel)
        key = np.where(rel.gid >= 0, positions_in(gids, rel.gid), -1)
        cpos = positions_in(cids, rel.cid)
        at_class = (rel.gid < 0) & (rel.cid >= 0) & (cpos >= 0)
        key[at_class] = gids.size + cpos[at_class]
        return key

    return once(rel, "_audit_keys", make)


def record_rows(rel: ReleaseReader, *, csv: bool = True) -> RecordRows:
    """The records files read once, row by row, against the release's tables, the audit
    and the source (see :class:`_RecordsPass`); cached on ``rel``.

    ``csv``: compare ``records.csv`` with ``records.parquet`` too (once). Without it the
    comparison waits, so that ``no_leak``'s read of ``records.csv``, when it comes first,
    serves it too (:func:`csv_tap`).
    """

    def make() -> RecordRows:
        out = RecordRows(read=_rows_apply(rel))
        try:
            if out.read:
                _RecordsPass(rel, out).run()
        except Unreadable as exc:
            out.unreadable = str(exc)
        return out

    found = once(rel, "_record_rows", make)
    if csv and found.csv_due:
        once(rel, "_records_csv_compared", lambda: _compare_csv(rel, found))
    return found


def _row_hasher(rel: ReleaseReader) -> RowHasher:
    """The keyed hashes of one verification's records pass and of its comparison of
    ``records.csv`` with ``records.parquet`` (drawn once per reader)."""
    return once(rel, "_row_hasher", RowHasher)


def _csv_compare(rel: ReleaseReader) -> _CsvCompare | None:
    """``records.csv``'s comparison with ``records.parquet`` of a single-file release (made
    once per reader, before or after the records pass; None: a part's reader, or a
    ``records.parquet`` missing or unreadable, which the pass says)."""

    def make() -> _CsvCompare | None:
        path = rel.rel / "records.parquet"
        if rel.record_files is not None or record_paths(rel) != [path]:
            return None
        try:
            return _CsvCompare(rel, pq.read_schema(path))
        except (OSError, pa.ArrowException):
            return None

    return once(rel, "_csv_compare", make)


def _compare_csv(rel: ReleaseReader, rows: RecordRows) -> bool:
    """Compare ``records.csv`` with the records pass's ``records.parquet`` (its problems
    go to ``rows.problems``)."""
    cmp = _csv_compare(rel)
    if cmp is None:  # not so when the pass read the file
        return False
    cmp.compare(rows)
    return True


class _RecordsPass:
    """One streaming pass over ``records.parquet`` (or a partitioned release's parts),
    then ``records.csv``.

    Every row must belong to exactly one published group or class. A group row's
    ``level`` is ``group``, its ``unit`` null, its ``x``, ``y`` and point geometry
    exactly its group's representative in ``groups.parquet``; a class row's ``level``
    and ``unit`` are its class's in ``classes.parquet``, its ``x``, ``y`` and geometry
    null. Per group and per class, the multiset of published (time bin, kept values)
    tuples equals its members' in the audit (their ``time_bin``, and the source's
    values of the kept columns at their ``source_row``, read as the published column's
    type), compared by keyed 64-bit multiset hashes a column at a time and then whole
    tuples; where a group or class holds synthetic records, every member's tuple is
    published at least as often as the members hold it, and every other published
    tuple is one of its members'. ``records.csv`` has the same columns (less
    ``geometry``) and, row by row, the same values as ``records.parquet``, read with
    the Parquet file's column types and compared a column at a time by keyed hashes
    tied to the row number. In each records file, the rows of one group or class stand
    together (one run of rows each), and within it go by their published (time bin,
    kept values) tuples, never down (:class:`_RowOrder`): the rows' order then says
    nothing about which source record a row is (rows in the register's order would tie
    each listed person to a group, and to their kept values). Files are read in
    batches; nothing per row is kept beyond a batch but the rows of groups and classes
    that hold synthetic records.
    """

    def __init__(self, rel: ReleaseReader, out: RecordRows) -> None:
        self.rel = rel
        self.out = out
        self.paths = record_paths(rel)
        if not self.paths[0].is_file():
            raise Unreadable("release/records.parquet is missing")
        self.gids, self.cids = _published_ids(rel)
        self.gid_at, self.cid_at = IdLookup(self.gids), IdLookup(self.cids)
        self.n_groups = self.gids.size
        self.n_keys = self.gids.size + self.cids.size
        _, self.gx, self.gy = rep_arrays(rel)
        classes = rel.classes
        n_c = self.cids.size
        lv = classes["level"].astype(str).tolist() if "level" in classes else [None] * n_c
        un = classes["unit"].astype(str).tolist() if "unit" in classes else [None] * n_c
        # each row's level and unit, as positions in these (classes': the key's)
        self.level_look = pd.Index(sorted({"group", *map(str, lv)}))
        self.level_code = np.asarray(
            self.level_look.get_indexer(pd.Index(["group", *lv])), np.int64
        )
        self.unit_look = pd.Index(sorted(set(map(str, un))))
        self.unit_code = np.asarray(self.unit_look.get_indexer(pd.Index(un)), np.int64).reshape(-1)
        # a single-file release's schema as records.csv's comparison read it
        cmp = _csv_compare(rel)
        try:
            self.schema = pq.read_schema(self.paths[0]) if cmp is None else cmp.schema
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{self.paths[0].name} is unreadable ({type(exc).__name__})") from None
        self.csv_due = cmp is not None
        self.names = [str(n) for n in self.schema.names]
        #: text columns, read as dictionaries (each distinct text handled once)
        self.text_columns = _text_columns(self.schema)
        lacking = [c for c in RECORD_FORMAT_COLUMNS[:6] if c not in self.names]
        if lacking:
            raise Unreadable(f"records.parquet lacks columns {lacking}")
        self.hasher = _row_hasher(rel)
        self.bins = audit_time_bins(rel)
        has_bins = "time_bin" in self.names
        if has_bins and self.bins is None:
            out.problems.append("records.parquet has time bins; the audit assigns none")
        elif self.bins is not None and not has_bins:
            out.problems.append("the audit assigns time bins; records.parquet has none")
        self.with_bins = has_bins and self.bins is not None
        self.bin_names = pa.array(
            [] if self.bins is None else [str(v) for v in self.bins[1].tolist()],
            type=pa.large_string(),
        )
        out.stride = len(self.bin_names) + 1
        self.source_columns = self._source_columns()
        self.compared = (["time_bin"] if self.with_bins else []) + list(self.source_columns)
        out.compared = tuple(self.compared)
        # per key, the multiset hash of each compared column, then of whole tuples
        self.sums = np.zeros((len(self.compared) + 1, self.n_keys), dtype=np.uint64)
        self.synthetic = np.zeros(self.n_keys, dtype=bool)
        sg = self.gid_at(rel.syn_gid[rel.syn_gid >= 0])
        sc = self.cid_at(rel.syn_cid[rel.syn_cid >= 0])
        self.synthetic[sg[sg >= 0]] = True
        self.synthetic[self.n_groups + sc[sc >= 0]] = True
        self.syn_rows: list[NDArray[np.uint64]] = []
        self.column_sums = dict.fromkeys((n for n in self.names if n not in _PARQUET_ONLY), 0)
        # rows per published group and class (by position), and ids no table publishes
        self.group_rows = np.zeros(self.n_groups, dtype=np.int64)
        self.class_rows = np.zeros(self.cids.size, dtype=np.int64)
        self.other_groups: list[NDArray[np.int64]] = []
        self.other_classes: list[NDArray[np.int64]] = []
        #: rows per key (the cells when there are no time bins)
        self.key_rows = np.zeros(self.n_keys, dtype=np.int64)
        self.cells: list[tuple[NDArray[np.int64], NDArray[np.int64]]] = []
        #: the rows found wrong, by :data:`_ROW_FAULTS`
        self.faults = np.zeros(len(_ROW_FAULTS), dtype=np.int64)
        #: the file being read: its keys seen (the last slot: rows of no key), the runs
        #: of rows of one key so far and the last row's key (:meth:`_runs`)
        self.seen = np.zeros(self.n_keys + 1, dtype=np.bool_)
        self.runs = 0
        self.last = -1
        self.order = _RowOrder(self.names)

    def _source_columns(self) -> dict[str, pa.Array]:
        """The kept columns of the source, as the published columns' types (source order)."""
        kept = [c for c in self.names if c not in RECORD_FORMAT_COLUMNS]
        src = self.rel.source
        if not kept or src.attributes is None or self.rel.source_rows is None:
            return {}
        found: dict[str, pa.Array] = {}
        for c in kept:
            t = self.schema.field(c).type
            if c not in src.attributes.columns:
                self.out.problems.append(f"records.parquet column {c!r} is no source column")
                continue
            arr = _as_type(src.attributes[c], t, text=src.attributes_text)
            if arr is None:
                self.out.problems.append(f"the source's {c!r} does not read as {t}")
                continue
            found[c] = arr
        return found

    def run(self) -> None:
        start = 0
        for path in self.paths:
            self.seen[:] = False
            self.runs, self.last = 0, -1
            self.order.start()
            tap = _parquet_tap(self.rel, path, self.schema, self.text_columns)
            try:
                pf = pq.ParquetFile(path, read_dictionary=self.text_columns or None)
                if [str(n) for n in pf.schema_arrow.names] != self.names:
                    self.out.problems.append(f"{path.name} has other columns than the first part")
                    continue
                batches = pf.iter_batches(batch_size=_reader.SCAN_ROWS, use_threads=True)
                with contextlib.closing(read_ahead(batches)) as ahead:
                    for batch in ahead:
                        self._batch(batch, start)
                        tap = _tap_batch(tap, batch)
                        start += batch.num_rows
            except (OSError, pa.ArrowException) as exc:
                raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
            _tap_done(self.rel, path, tap)
            held = int(np.count_nonzero(self.seen))
            if self.runs > held:
                self.out.problems.append(
                    f"{path.name} does not list each group's or class's rows together "
                    f"({self.runs} runs of rows for {held} groups and classes): the order "
                    "of its rows could tell which source record a row is"
                )
            if self.order.down:
                self.out.problems.append(
                    f"{path.name} lists {self.order.down} rows after a row of their group or "
                    f"class with a larger ({', '.join(self.order.columns)}): within a group or "
                    "class rows go by time bin, then kept values, missing first, so that "
                    "their order could not tell which source record a row is"
                )
        out = self.out
        out.rows = start
        out.per_group = _rows_per_id(self.gids, self.group_rows, self.other_groups)
        out.per_class = _rows_per_id(self.cids, self.class_rows, self.other_classes)
        bad = dict(zip(_ROW_FAULTS, self.faults.tolist(), strict=True))
        out.orphans = bad.pop("orphans")
        if not self.with_bins:  # a cell is a key
            out.cells = np.flatnonzero(self.key_rows).astype(np.int64)
            out.cell_rows = self.key_rows[out.cells]
        elif self.cells:
            cell = np.concatenate([c for c, _ in self.cells])
            rows = np.concatenate([r for _, r in self.cells])
            order = np.argsort(cell, kind="stable")
            cell, rows = cell[order], rows[order]
            first = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
            out.cells = cell[first]
            out.cell_rows = np.add.reduceat(rows, first).astype(np.int64)
        said = {
            "both": "rows name both a group and a class",
            "level": "rows publish a level other than their group's or class's",
            "unit": "rows publish a unit other than their class's (null for a group row)",
            "xy": "group rows publish an x, y other than their group's representative",
            "class_xy": "class rows publish an x, y (a class has no representative)",
            "bbox": "rows publish a bbox other than their point's (null for a class row)",
            "geometry": "rows publish a geometry other than their group's representative "
            "point (null for a class row)",
        }
        for what, n in bad.items():
            if n:
                out.problems.append(f"{n} records.parquet {said[what]}")
        if out.orphans - bad["both"] > 0:
            out.problems.append(
                f"{out.orphans - bad['both']} records.parquet rows belong to no "
                "published group or class"
            )
        if self.compared:
            self._members()
        # records.csv is compared when a check needs it (``counts``), from no_leak's
        # read of the file when that came first (:func:`csv_tap`)
        out.column_sums = self.column_sums
        out.csv_due = self.csv_due

    def _batch(self, batch: pa.RecordBatch, start: int) -> None:
        import pyarrow.compute as pc

        out = self.out
        n = batch.num_rows
        col = dict(zip(self.names, batch.columns, strict=True))
        g = arrow_ids(col["group_id"], "records group_id")
        c = arrow_ids(col["class_id"], "records class_id")
        gpos, cpos = self.gid_at(g), self.cid_at(c)
        level = _text_positions(col["level"], self.level_look)
        unit = _text_positions(col["unit"], self.unit_look)
        # the representative, as x, y, as the geometry and as its bbox
        xs, ys = _float_column(col["x"]), _float_column(col["y"])
        has_xy = xs is not None and ys is not None
        rx, ry = (xs, ys) if xs is not None and ys is not None else (_NO_FLOATS, _NO_FLOATS)
        geo_state, gx_, gy_ = 0, _NO_FLOATS, _NO_FLOATS
        if "geometry" in col:
            gx_, gy_ = wkb_xy(col["geometry"])
            geo_state = 1 if gx_.size == n else 2
        box_state, box = 0, (_NO_BOOLS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS)
        if "bbox" in col:
            fields = _box_fields(col["bbox"])
            box_state = 2 if fields is None else 1
            box = box if fields is None else fields
        key = np.empty(n, dtype=np.int64)
        _check_rows(
            g, c, gpos, cpos, self.n_groups, level, self.level_code, unit, self.unit_code,
            np.ascontiguousarray(rx), np.ascontiguousarray(ry), has_xy, self.gx,
            self.gy, geo_state, np.ascontiguousarray(gx_, dtype=np.float64),
            np.ascontiguousarray(gy_, dtype=np.float64), box_state, *box, key,
            self.group_rows, self.class_rows, self.key_rows, self.faults,
        )  # fmt: skip
        self._runs(key)
        self.order.add(col, key)
        if self.faults[_OTHER_GROUP]:
            self.other_groups.append(g[(g >= 0) & (gpos < 0)])
            self.faults[_OTHER_GROUP] = 0
        if self.faults[_OTHER_CLASS]:
            self.other_classes.append(c[(c >= 0) & (cpos < 0)])
            self.faults[_OTHER_CLASS] = 0
        known = key >= 0
        # every column, tied to the row numbers (records.csv must hold the same)
        hashes: dict[str, NDArray[np.uint64]] = {}
        at = self.hasher.positions(start, n)
        ids = {"group_id": g, "class_id": c}  # read already (nulls -1, none negative)
        for name in self.column_sums:
            t = col[name].type
            if name in self.compared:  # its hashes are wanted per group and class too
                h = hashes[name] = self.hasher.values(col[name])
                self.column_sums[name] += self.hasher.tied_sum(h, at)
            elif name in ids and pa.types.is_signed_integer(t):
                self.column_sums[name] += self.hasher.ids_tied_sum(ids[name], at)
            else:
                self.column_sums[name] += self.hasher.values_tied_sum(col[name], at)
        # per group and class: the multisets of the compared columns and tuples
        if self.compared:
            parts = [hashes[name] for name in self.compared]
            whole = self.hasher.rows(parts, n)
            for j, h in enumerate([*parts, whole]):
                self.sums[j] += sums_per(key, h, self.n_keys)
            syn = known & self.synthetic[np.where(known, key, 0)]
            if syn.any():
                self.syn_rows.append(self.hasher.keyed(whole[syn], key[syn]))
        # the (group or class, time bin) cells (without time bins, counted per key)
        if not self.with_bins:
            return
        tb = pc.index_in(pc.cast(col["time_bin"], pa.large_string()), value_set=self.bin_names)
        code = np.asarray(tb.fill_null(out.stride - 1).to_numpy(zero_copy_only=False), np.int64)
        cell = key[known] * np.int64(out.stride) + code[known]
        if cell.size:
            if not (cell[1:] >= cell[:-1]).all():  # rows come sorted: runs, unless not
                cell = np.sort(cell)
            self.cells.append(value_runs(cell))

    def _runs(self, key: NDArray[np.int64]) -> None:
        """Count the runs of rows of one key in a batch (continuing the file's last run)
        and note the keys seen (rows of no key as one more)."""
        if key.size == 0:
            return
        k = np.where(key >= 0, key, self.n_keys)
        self.runs += int(np.count_nonzero(k[1:] != k[:-1])) + int(int(k[0]) != self.last)
        self.last = int(k[-1])
        self.seen[k] = True

    def _members(self) -> None:
        """The members' tuples, from the audit and the source, against the published ones."""
        rel, out, hasher = self.rel, self.out, self.hasher
        keys = audit_keys(rel)
        rows = rel.source_rows
        bin_hash = codes = None
        if self.with_bins and self.bins is not None:
            codes = self.bins[0]
            bin_hash = hasher.values(pa.array([str(v) for v in self.bins[1].tolist()]))
        sums = np.zeros_like(self.sums)
        syn_members: list[NDArray[np.uint64]] = []
        for a in range(0, keys.size, _MEMBER_ROWS):
            kk = keys[a : a + _MEMBER_ROWS]
            parts = []
            for name in self.compared:
                if name == "time_bin" and bin_hash is not None and codes is not None:
                    parts.append(bin_hash[codes[a : a + kk.size]])
                elif rows is not None:
                    at = pa.array(rows[a : a + kk.size])
                    parts.append(hasher.values(self.source_columns[name].take(at)))
            whole = hasher.rows(parts, kk.size)
            for j, h in enumerate([*parts, whole]):
                sums[j] += sums_per(kk, h, self.n_keys)
            syn = (kk >= 0) & self.synthetic[np.where(kk >= 0, kk, 0)]
            if syn.any():
                syn_members.append(hasher.keyed(whole[syn], kk[syn]))
        plain = ~self.synthetic
        n_groups = self.n_groups
        for j, name in enumerate([*self.compared, ""]):
            differ = plain & (sums[j] != self.sums[j])
            if not differ.any():
                continue
            ng = int(np.count_nonzero(differ[:n_groups]))
            nc = int(np.count_nonzero(differ[n_groups:]))
            if name == "time_bin":
                what = "time bins other than their members' (the audit's)"
            elif name:
                what = f"{name!r} values other than their members' (the source's)"
            else:
                what = f"({', '.join(self.compared)}) tuples other than their members'"
            out.problems.append(f"{ng} groups and {nc} classes publish {what}")
            if name:  # a column that differs: the combinations differ too, said once
                break
        if syn_members or self.syn_rows:
            published = np.sort(np.concatenate(self.syn_rows or [np.zeros(0, np.uint64)]))
            members = np.sort(np.concatenate(syn_members or [np.zeros(0, np.uint64)]))
            pv, p_count = value_runs(published)
            mv, m_count = value_runs(members)
            short = np.ones(mv.size, dtype=bool)
            if mv.size and pv.size:
                at = np.minimum(np.searchsorted(pv, mv), pv.size - 1)
                short = (pv[at] != mv) | (p_count[at] < m_count)
            n_bad = int(np.count_nonzero(short)) + int(np.count_nonzero(~in_sorted(mv, pv)))
            if n_bad:
                out.problems.append(
                    f"{n_bad} (time bin, kept values) tuples of groups or classes with "
                    "synthetic records are not their members' (a stand-in copies a member's)"
                )


class _RowOrder:
    """Rows of one group or class, as a records file lists them, must not go down in
    their published (time bin, kept values) tuple: the time bin first, then the kept
    columns in the file's order, each compared as Arrow compares its type (numbers by
    value, text by code point, times in time order; floats in IEEE 754's total order,
    so -0.0 before 0.0), a missing value (null, or a float NaN) before every other. Rows
    with equal tuples publish the same values, so the order this leaves free says
    nothing.

    :meth:`start` at each file, then :meth:`add` each batch with its rows' keys (a
    row's group or class; negative: none, never compared); :attr:`down` counts the
    rows of the file that follow a larger tuple of their key. A column Arrow cannot
    compare ends the tuple there (it and the columns after it are not checked).
    """

    def __init__(self, names: list[str]) -> None:
        kept = [n for n in names if n not in RECORD_FORMAT_COLUMNS]
        #: the tuple's columns, in the order they decide
        self.columns = (["time_bin"] if "time_bin" in names else []) + kept
        self.down = 0
        self._key = -1
        self._row: list[pa.Array] = []

    def start(self) -> None:
        """A new file: its count starts at zero, and its first row follows no row."""
        self.down = 0
        self._key = -1
        self._row = []

    def add(self, col: dict[str, pa.Array], key: NDArray[np.int64]) -> None:
        """Count the rows of a batch (columns by name, keys per row) that go down."""
        import pyarrow.compute as pc

        n = key.size
        if not self.columns or n == 0:
            return
        values = [_comparable(col[name]) for name in self.columns]
        for j, v in enumerate(values):  # a column Arrow cannot compare ends the tuple
            try:
                pc.less(v.slice(0, 0), v.slice(0, 0))
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                self.columns, values = self.columns[:j], values[:j]
                self._row = self._row[:j]
                break
        if not values:
            return
        if n > 1:
            same = (key[1:] == key[:-1]) & (key[1:] >= 0)
            if same.any():
                up = _not_down([v.slice(0, n - 1) for v in values], [v.slice(1) for v in values])
                self.down += int(np.count_nonzero(same & ~up))
        if self._row and int(key[0]) == self._key and self._key >= 0:
            self.down += int(not _not_down(self._row, [v.slice(0, 1) for v in values])[0])
        self._key = int(key[-1])
        self._row = [v.slice(n - 1, 1) for v in values]


def _not_down(before: list[pa.Array], after: list[pa.Array]) -> NDArray[np.bool_]:
    """Per pair of rows, whether ``after``'s tuple is at least ``before``'s
    (lexicographic, a column at a time; missing first)."""
    import pyarrow.compute as pc

    ok = np.ones(len(before[0]), dtype=np.bool_)  # all columns equal: not down
    for a, b in reversed(list(zip(before, after, strict=True))):
        if pa.types.is_floating(a.type):
            (ka, a_null), (kb, b_null) = _float_order(a), _float_order(b)
            lt = (ka < kb) & ~a_null & ~b_null
            eq = (ka == kb) & ~a_null & ~b_null
        else:
            a_null = _bools(a.is_null())
            b_null = _bools(b.is_null())
            lt = _bools(pc.fill_null(pc.less(a, b), False))
            eq = _bools(pc.fill_null(pc.equal(a, b), False))
        lt |= a_null & ~b_null
        eq |= a_null & b_null
        ok = lt | (eq & ok)
    return ok


def _float_order(arr: pa.Array) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Floats as integers in IEEE 754's total order (-0.0 before 0.0: they publish
    apart), and where they are missing (null or NaN)."""
    values = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
    bits = values.view(np.int64)
    return np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits), np.isnan(values)


def _comparable(arr: pa.Array) -> pa.Array:
    """A column as :class:`_RowOrder` compares it: text from its dictionary."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _bools(arr: pa.Array) -> NDArray[np.bool_]:
    """An Arrow boolean array without nulls as numpy booleans."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.bool_)


class _CsvCompare:
    """``records.csv`` against ``records.parquet``, column by column and row by row (see
    :class:`_RecordsPass`): from a :class:`_CsvTap` that saw the whole file, else read
    here with the Parquet file's column types."""

    def __init__(self, rel: ReleaseReader, schema: pa.Schema) -> None:
        self.rel, self.hasher = rel, _row_hasher(rel)
        self.path = rel.rel / "records.csv"
        self.schema = schema
        self.names = [str(n) for n in schema.names]
        self.text_columns = _text_columns(schema)
        #: the columns ``records.csv`` must have, in order
        self.want = [n for n in self.names if n not in _PARQUET_ONLY]
        #: (header, sums, rows) as :meth:`_csv_sums` has them, from a tap's read
        self.tapped: tuple[list[str], dict[str, int], int] | None = None

    def compare(self, out: RecordRows) -> None:
        """``records.csv`` against the records pass's ``out`` (its findings go there)."""
        path, want = self.path, self.want
        if not path.is_file():
            out.problems.append("release/records.csv is missing")
            return
        read = self.tapped
        if read is None:
            types = {n: self.schema.field(n).type for n in want}
            text = {n: pa.dictionary(pa.int32(), pa.string()) for n in self.text_columns}
            ints = [n for n, t in types.items() if pa.types.is_integer(t)]
            try:
                try:
                    read = self._csv_sums(path, {**types, **text}, [])
                except pa.ArrowInvalid:  # an integer written as a float (3.0): as text, cast
                    as_text = dict.fromkeys(ints, pa.string())
                    read = self._csv_sums(path, {**types, **text, **as_text}, ints)
            except (OSError, pa.ArrowException, ValueError) as exc:
                out.problems.append(
                    f"records.csv does not read with records.parquet's column types "
                    f"({type(exc).__name__})"
                )
                return
        header, sums, rows = read
        if header != want:
            extra = sorted(set(header) - set(want))
            lacks = sorted(set(want) - set(header))
            out.problems.append(
                "records.csv has other columns than records.parquet"
                + (f" (extra {extra})" if extra else "")
                + (f" (lacking {lacks})" if lacks else "")
                + ("" if extra or lacks else " (in another order)")
            )
            return
        self.rel.csv_rows.setdefault(path, rows)
        if rows != out.rows:
            out.problems.append(f"records.csv has {rows} rows, records.parquet {out.rows}")
            return
        mask = (1 << 64) - 1
        differ = [n for n in want if (sums[n] - out.column_sums[n]) & mask]
        if differ:
            out.problems.append(
                f"records.csv differs from records.parquet in column(s) {', '.join(differ)}"
            )
            return
        line = _first_uncanonical_line(path, self.rel.rel / "records.parquet", want)
        if line is not None:
            out.problems.append(
                f"records.csv holds records.parquet's values but not as the format writes "
                f"them (pyarrow's CSV: text quoted, numbers in shortest form, no spaces, "
                f"one line break); the first other byte is on line {line}"
            )

    def _csv_sums(
        self, path: Path, types: dict[str, pa.DataType], cast: list[str]
    ) -> tuple[list[str], dict[str, int], int]:
        """(header, per column the sum of its values' hashes tied to their rows, rows);
        the ``cast`` columns are read as text and cast to their Parquet type. Nothing is
        read past a header that is not ``records.parquet``'s."""
        import pyarrow.csv as pacsv

        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=True, block_size=_reader.CSV_BLOCK),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        with reader:
            header = [str(n) for n in reader.schema.names]
            sums = dict.fromkeys(header, 0)
            start = 0
            if header != self.want:
                return header, sums, start
            parquet_types = {n: self.schema.field(n).type for n in header}
            for batch in reader:
                at = self.hasher.positions(start, batch.num_rows)
                for name, c in zip(header, batch.columns, strict=True):
                    c = _csv_column(c, parquet_types[name]) if name in cast else c
                    sums[name] += self.hasher.values_tied_sum(c, at)
                start += batch.num_rows
        return header, sums, start


#: Rows of ``records.parquet`` compared with ``records.csv`` at a time by
#: :func:`_first_uncanonical_line`.
_CANONICAL_ROWS = 1 << 18
#: The format's writing of ``records.csv`` (pyarrow's CSV writer).
_CANONICAL_CSV = {"quoting_style": "needed"}


def _first_uncanonical_line(csv_path: Path, parquet_path: Path, names: list[str]) -> int | None:
    """The first line (1: the header) where ``records.csv`` is not byte for byte pyarrow's
    CSV writing of ``records.parquet``'s columns ``names`` (a header row, text and names
    in double quotes, a missing value empty, numbers in their shortest round-trip form,
    ``\\n`` line ends), or None where it is.

    The comparison of values (:class:`_CsvCompare`) leaves the writing free: a number in
    quotes, with a sign or a space before it, a line ending ``\\r\\n``, an unquoted text
    read the same, each a bit per cell that could carry what the release must not. The
    format fixes one writing (docs/release-format.md), so the file is compared with it,
    batch by batch, without holding either whole. Rows equal to the row before in every
    column (floats by their bits: ``-0.0`` is written apart from ``0.0``) are written
    alike, so only the first of each run is written here and its line repeated (a group's
    rows are such runs: at 1e7 records one row in about seven is written); a batch whose
    lines do not split at line breaks (a text holding one) is written whole.
    """
    import pyarrow.csv as pacsv

    pf = pq.ParquetFile(parquet_path)
    schema = pa.schema([pf.schema_arrow.field(n) for n in names])

    def written(table: pa.Table, header: bool) -> NDArray[np.uint8]:
        sink = pa.BufferOutputStream()
        options = pacsv.WriteOptions(include_header=header, **_CANONICAL_CSV)
        pacsv.write_csv(table, sink, options)
        return np.frombuffer(sink.getvalue(), dtype=np.uint8)

    def writings() -> Iterator[NDArray[np.uint8]]:
        """The header, then each batch's rows, as the format writes them."""
        yield written(schema.empty_table(), True)
        for batch in pf.iter_batches(batch_size=_CANONICAL_ROWS, columns=names):
            rows = pa.Table.from_batches([batch])
            heads = np.flatnonzero(~_same_as_before(rows))
            lines = written(rows.take(pa.array(heads)), False)
            ends = np.flatnonzero(lines == ord("\n")) + 1
            if ends.size != heads.size:  # a text holds a line break: every row written
                yield written(rows, False)
                continue
            # each head's line, repeated over its run (Arrow's take copies the bytes)
            offsets = np.concatenate([[0], ends]).astype(np.int64)
            each = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), heads.size, [None, pa.py_buffer(offsets), pa.py_buffer(lines)]
            )
            run = np.repeat(np.arange(heads.size), np.diff(np.append(heads, rows.num_rows)))
            taken = each.take(pa.array(run))
            size = int(np.frombuffer(taken.buffers()[1], np.int64, rows.num_rows + 1)[-1])
            yield np.frombuffer(taken.buffers()[2], np.uint8, size)

    buf = np.empty(0, dtype=np.uint8)  # the file's bytes, read batch by batch into it
    with open(csv_path, "rb") as file:
        at = 0  # bytes of the file compared so far
        for want in writings():
            if buf.size < want.size:
                buf = np.empty(want.size, dtype=np.uint8)
            have = buf[: file.readinto(buf[: want.size].data)]
            bad = first_unequal(have, want)
            if bad >= 0:
                return _line_at(file, at + bad)
            at += want.size
        if file.read(1):  # bytes past the writing
            return _line_at(file, at)
    return None


def _same_as_before(table: pa.Table) -> NDArray[np.bool_]:
    """Per row, whether every column holds what the row before holds, as a CSV writes it
    (a null apart from every value; floats by their bits; the first row: False)."""
    import pyarrow.compute as pc

    n = table.num_rows
    same = np.ones(n, dtype=np.bool_)
    if n:
        same[0] = False
    if n < 2:
        return same
    for col in table.columns:
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        if pa.types.is_floating(arr.type):
            bits = np.asarray(
                pc.cast(arr, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
            ).view(np.uint64)
            equal = bits[1:] == bits[:-1]
        else:
            try:
                eq = pc.equal(arr.slice(1), arr.slice(0, n - 1)).fill_null(False)
            except pa.ArrowNotImplementedError:  # a type Arrow does not compare: no runs
                equal = np.zeros(n - 1, dtype=np.bool_)
            else:
                equal = np.asarray(eq.to_numpy(zero_copy_only=False), dtype=np.bool_)
        both_valid = valid[1:] & valid[:-1]
        both_null = ~(valid[1:] | valid[:-1])
        same[1:] &= (both_valid & equal) | both_null
    return same


def _line_at(file: Any, offset: int) -> int:
    """The line (1: the first) that holds byte ``offset`` of ``file``."""
    file.seek(0)
    return file.read(offset).count(b"\n") + 1


#: What pyarrow's CSV reader reads as booleans (its default ``true_values``, ``false_values``).
_CSV_TRUE = pa.array(["1", "True", "TRUE", "true"], type=pa.string())
_CSV_FALSE = pa.array(["0", "False", "FALSE", "false"], type=pa.string())


def _tap_reads(t: pa.DataType) -> bool:
    """Whether :class:`_CsvTap` reads a column of Parquet type ``t`` as the typed read does."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


class _CsvTap:
    """``records.csv`` as ``no_leak`` reads it (every column as dictionary text, an
    unquoted empty cell null), hashed as :meth:`_CsvCompare._csv_sums` hashes the file
    read with ``records.parquet``'s column types, so that the file is parsed once.

    A text column is what the typed read has. A number column's distinct texts are
    trimmed of spaces and tabs (as pyarrow's CSV reader trims a number) and cast to the
    Parquet type; a boolean's are the reader's words. When a text does not cast (an
    integer written as a float among them), the tap gives up and the typed read, which
    says what it is, reads the file.
    """

    def __init__(self, cmp: _CsvCompare) -> None:
        self.cmp = cmp
        self.header: list[str] = []
        self.sums: dict[str, int] = {}
        self.rows = 0
        self.ok = True
        self.types = {n: cmp.schema.field(n).type for n in cmp.want}

    def start(self, names: list[str]) -> None:
        """The file's header (its columns are read only when it is ``cmp.want``)."""
        self.header = list(names)
        self.sums = dict.fromkeys(self.header, 0)

    def add(self, batch: pa.RecordBatch) -> None:
        """The next rows of the file."""
        if not self.ok or self.header != self.cmp.want:
            return
        hasher = self.cmp.hasher
        try:
            at = hasher.positions(self.rows, batch.num_rows)
            for name, col in zip(self.header, batch.columns, strict=True):
                self.sums[name] += self._tied_sum(col, self.types[name], at)
        except (pa.ArrowException, ValueError, TypeError):
            self.ok = False
            return
        self.rows += batch.num_rows

    def finish(self) -> None:
        """The file was read to its end: its sums serve the comparison."""
        if self.ok:
            self.cmp.tapped = (self.header, self.sums, self.rows)

    def _tied_sum(self, col: pa.Array, t: pa.DataType, at: NDArray[np.uint64]) -> int:
        """The column's hashes, as the typed column's, tied to their rows and summed."""
        import pyarrow.compute as pc

        hasher = self.cmp.hasher
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return hasher.values_tied_sum(col, at)
        words = col.dictionary
        if pa.types.is_boolean(t):
            yes = np.asarray(pc.is_in(words, value_set=_CSV_TRUE).to_numpy(zero_copy_only=False))
            no = np.asarray(pc.is_in(words, value_set=_CSV_FALSE).to_numpy(zero_copy_only=False))
            if not (yes | no).all():
                raise ValueError("a cell is no boolean")
            typed = pa.array(yes, type=pa.bool_())
        else:
            typed = pc.cast(pc.utf8_trim(words, characters=" \t"), t)
        # each cell's hash as the typed column's (a null's as a null of that type)
        null = hasher.values(pa.array([None], type=t))[0]
        return hasher.tied_sum_coded(hasher.values(typed), dict_indices(col), null, at)


def _parquet_tap(
    rel: ReleaseReader, path: Path, schema: pa.Schema, text_columns: list[str]
) -> ParquetScan | None:
    """``no_leak``'s scan of ``records.parquet`` (a single-file release's), fed the batches
    the records pass reads, so that the file is read once: when ``no_leak`` runs in this
    verification (``rel.checks``), scans the file (it is not among ``rel.unchanged``) and
    reads it as the pass does (the same columns as dictionaries, in batches)."""
    from geokanon.verify.leak_rules import (
        ParquetScan,
        parquet_read_whole,
        parquet_text_columns,
    )
    from geokanon.verify.no_leak import leak_secrets

    if (
        "no_leak" not in rel.checks
        or rel.record_files is not None
        or path != rel.rel / "records.parquet"
        or "records.parquet" in rel.unchanged
        or parquet_read_whole(schema)
        or sorted(parquet_text_columns(schema)) != sorted(text_columns)
    ):
        return None
    try:
        sec, _ = leak_secrets(rel)
        return ParquetScan(schema, sec)
    except Exception:  # no_leak meets it again when it scans the file itself
        return None


def _tap_batch(tap: ParquetScan | None, batch: pa.RecordBatch) -> ParquetScan | None:
    """``tap`` fed ``batch``; None once it failed (``no_leak`` then scans the file itself
    and meets what failed in its own right)."""
    if tap is None:
        return None
    try:
        tap.add(batch)
    except Exception:
        return None
    return tap


def _tap_done(rel: ReleaseReader, path: Path, tap: ParquetScan | None) -> None:
    """Note the findings of a tap that saw the whole file, for ``no_leak``."""
    if tap is None:
        return
    try:
        rel.parquet_scans[path] = tap.findings()
    except Exception:
        return


def scanned_records(rel: ReleaseReader, path: Path) -> list[str] | None:
    """``no_leak``'s findings in ``records.parquet`` from the records pass's read of it, when
    a check that reads the records runs in this verification (the pass is run here when
    none has yet); None: scan the file."""
    if path != rel.rel / "records.parquet" or not {"k_subjects", "counts"} & rel.checks:
        return None
    if rel.record_files is not None:
        return None
    record_rows(rel, csv=False)
    return rel.parquet_scans.get(path)


def csv_tap(rel: ReleaseReader, path: Path) -> _CsvTap | None:
    """A tap for ``no_leak``'s read of ``path`` when it is the ``records.csv`` of a
    single-file release whose comparison with ``records.parquet`` is still to come
    (``counts`` runs in this verification: ``rel.checks``; :func:`record_rows`) and every
    column's type is one the tap reads. The records pass may come before or after."""
    if "counts" not in rel.checks or "_records_csv_compared" in rel.__dict__:
        return None
    cmp = _csv_compare(rel)
    if cmp is None or cmp.tapped is not None or path != cmp.path:
        return None
    if not all(_tap_reads(cmp.schema.field(n).type) for n in cmp.want):
        return None
    return _CsvTap(cmp)


def _box_fields(
    col: pa.Array,
) -> tuple[
    NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
    NDArray[np.float64],
] | None:  # fmt: skip
    """A GeoParquet ``bbox`` column as (valid, xmin, ymin, xmax, ymax); None when it is no
    struct of those four numbers (then no row's box is right)."""
    fields = ("xmin", "ymin", "xmax", "ymax")
    if not pa.types.is_struct(col.type) or any(col.type.get_field_index(f) < 0 for f in fields):
        return None
    xmin, ymin, xmax, ymax = (_float_column(col.field(f)) for f in fields)
    if xmin is None or ymin is None or xmax is None or ymax is None:
        return None
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return valid, xmin, ymin, xmax, ymax


#: What :func:`_check_rows` counts, in its order: rows of a group and a class at once,
#: rows with another level, another unit, another x, y than their group's representative,
#: class rows with an x, y, rows with another geometry, another bbox; rows in no
#: published group or class; rows naming a group or class id no table publishes.
_ROW_FAULTS = (
    "both", "level", "unit", "xy", "class_xy", "geometry", "bbox", "orphans", "other group",
    "other class",
)  # fmt: skip
_OTHER_GROUP = _ROW_FAULTS.index("other group")
_OTHER_CLASS = _ROW_FAULTS.index("other class")
_NO_FLOATS = np.zeros(0, dtype=np.float64)
_NO_BOOLS = np.zeros(0, dtype=np.bool_)


@nb.njit(cache=True, nogil=True)
def _check_rows(
    g: NDArray[np.int64],
    c: NDArray[np.int64],
    gpos: NDArray[np.int64],
    cpos: NDArray[np.int64],
    n_groups: int,
    level: NDArray[np.int64],
    level_code: NDArray[np.int64],
    unit: NDArray[np.int64],
    unit_code: NDArray[np.int64],
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    has_xy: bool,
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    geo_state: int,
    geo_x: NDArray[np.float64],
    geo_y: NDArray[np.float64],
    box_state: int,
    box_valid: NDArray[np.bool_],
    xmin: NDArray[np.float64],
    ymin: NDArray[np.float64],
    xmax: NDArray[np.float64],
    ymax: NDArray[np.float64],
    key: NDArray[np.int64],
    group_rows: NDArray[np.int64],
    class_rows: NDArray[np.int64],
    key_rows: NDArray[np.int64],
    faults: NDArray[np.int64],
) -> None:
    """One batch of records rows against the published tables, in one pass.

    Row ``i`` names group ``g[i]`` and class ``c[i]`` (-1: none), at positions ``gpos[i]``,
    ``cpos[i]`` of the tables (-1: not published). Its key (``key[i]``: the group's
    position, the number of groups plus the class's, -1 for a row of both or of none
    published) must hold: a group row's level is ``level_code[0]`` (``group``), its unit
    -2 (null), its x, y (``has_xy``: read as numbers, else every group row is wrong), its
    geometry's point (``geo_state`` 1; 2: not points, every row wrong) and its bbox
    (``box_state`` 1: fields, valid; 2: no such struct, every row wrong) its
    representative ``(gx, gy)``; a class row's level and unit are its class's
    (``level_code[1 + j]``, ``unit_code[j]``), its x, y, geometry and box null or NaN.
    Adds to ``faults`` (by :data:`_ROW_FAULTS`), to the rows per group and class position
    (``group_rows``, ``class_rows``; ids at no position are counted as faults) and per
    key (``key_rows``).
    """
    for i in range(g.size):
        gi = g[i]
        ci = c[i]
        if gi >= 0:
            if gpos[i] >= 0:
                group_rows[gpos[i]] += 1
            else:
                faults[8] += 1
        if ci >= 0:
            if cpos[i] >= 0:
                class_rows[cpos[i]] += 1
            else:
                faults[9] += 1
        k = -1
        if gi >= 0 and ci >= 0:
            faults[0] += 1
        elif gi >= 0:
            k = gpos[i]
        elif ci >= 0 and cpos[i] >= 0:
            k = n_groups + cpos[i]
        key[i] = k
        if k < 0:
            faults[7] += 1
            continue
        key_rows[k] += 1
        is_g = k < n_groups
        want_level = level_code[0] if is_g else level_code[k - n_groups + 1]
        if level[i] != want_level:
            faults[1] += 1
        want_unit = -2 if is_g or unit_code.size == 0 else unit_code[k - n_groups]
        if unit[i] != want_unit:
            faults[2] += 1
        rx = gx[k] if is_g else 0.0
        ry = gy[k] if is_g else 0.0
        if not has_xy:
            if is_g:
                faults[3] += 1
        elif is_g:
            if not (xs[i] == rx and ys[i] == ry):
                faults[3] += 1
        elif not (np.isnan(xs[i]) and np.isnan(ys[i])):
            faults[4] += 1
        if geo_state == 2:
            faults[5] += 1
        elif geo_state == 1:
            if is_g:
                ok = geo_x[i] == rx and geo_y[i] == ry
            else:
                ok = np.isnan(geo_x[i]) and np.isnan(geo_y[i])
            if not ok:
                faults[5] += 1
        if box_state == 2:
            faults[6] += 1
        elif box_state == 1:
            if is_g:
                ok = (
                    box_valid[i]
                    and xmin[i] == rx
                    and xmax[i] == rx
                    and ymin[i] == ry
                    and ymax[i] == ry
                )
            else:
                ok = not box_valid[i] or (
                    np.isnan(xmin[i]) and np.isnan(ymin[i]) and np.isnan(xmax[i])
                    and np.isnan(ymax[i])
                )  # fmt: skip
            if not ok:
                faults[6] += 1


def _rows_per_id(
    table: NDArray[np.int64], at_position: NDArray[np.int64], others: list[NDArray[np.int64]]
) -> pd.Series:
    """Rows per id (int64 index, sorted), as :func:`value_counts` of every row's id counts
    them: those at a position of the published ids ``table``, and ``others``."""
    held = np.flatnonzero(at_position)
    ids = table[held]
    counts = at_position[held]
    if others:
        more = value_counts(np.concatenate(others))
        ids = np.concatenate([ids, more.index.to_numpy(dtype=np.int64)])
        counts = np.concatenate([counts, more.to_numpy(dtype=np.int64)])
    order = np.argsort(ids, kind="stable")
    return pd.Series(counts[order].astype(np.int64), index=pd.Index(ids[order].astype(np.int64)))

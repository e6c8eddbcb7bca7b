"""The verifier's reader of a release directory, its audit and its source."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import unicodedata
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.io.read import (
    CSV_SUFFIXES,
    DatabaseInput,
    PointTable,
    read_source_frame,
    sha256_file,
)
from geokanon.verify._arrays import (
    codes_into,
    dense_codes,
    factorize_arrow,
    factorize_text,
    ids_into,
    int_ids,
    is_text_type,
    renumber,
    sample_records,
    text_values,
)
from geokanon.verify._once import cached, once
from geokanon.verify._results import CHECKS, Unreadable

if TYPE_CHECKING:
    from geokanon.verify.extent import Ground


LESS_THAN_K = "<k"


WITHHELD = "withheld"


def cell_value(raw: object) -> int | str | None:
    """Parse a published figure: an int, ``"<k"``, ``"withheld"``, or None (absent)."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise Unreadable("a published count is a boolean")
    if isinstance(raw, int | np.integer):
        return int(raw)
    if isinstance(raw, float | np.floating):
        if math.isnan(raw):
            return None
        if float(raw).is_integer():
            return int(raw)
        raise Unreadable("a published count is not an integer")
    text = str(raw).strip()
    if text == "":
        return None
    if text in (LESS_THAN_K, WITHHELD):
        return text
    try:
        return int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise Unreadable(f"a published count reads {text[:12]!r}") from None
        if f.is_integer():
            return int(f)
        raise Unreadable("a published count is not an integer") from None


def decimal_fraction(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unreadable(f"manifest {name} is not a number")
    return Fraction(repr(float(value))) if isinstance(value, float) else Fraction(value)


@dataclass(frozen=True)
class PartRows:
    """The members of one part of a release (:meth:`ReleaseReader.of_part`), aligned: the
    group (``kind == "group"``) or class id each is assigned, its working coordinates,
    its subject code, its unit and its source values of the kept columns."""

    kind: str
    ids: NDArray[np.int64]
    x: NDArray[np.float64]
    y: NDArray[np.float64]
    subjects: NDArray[np.int64]
    units: pd.Series
    kept: dict[str, pd.Series]


@dataclass
class Source:
    """What the verifier knows about the source, all aligned with the input rows."""

    x: NDArray[np.float64] | None = None  # in the output CRS (raw file) when known
    y: NDArray[np.float64] | None = None
    x_work: NDArray[np.float64] | None = None  # in the working CRS (PointTable)
    y_work: NDArray[np.float64] | None = None
    subjects: NDArray[np.int64] | None = None
    #: ``subjects`` is each row's own number (no subject column: every record its own
    #: subject), so a row's subject code is its source row
    own_subjects: bool = False
    units: NDArray[np.object_] | None = None
    unit_codes: NDArray[np.int64] | None = None  # with unit_names: the units, compactly
    unit_names: NDArray[np.object_] | None = None
    subject_ids: frozenset[str] = frozenset()
    subject_column: str | None = None
    #: distinct source ids minus distinct subjects (spellings merged); None when unknown
    subject_ids_merged: int | None = None
    time_column: str | None = None
    epoch_s: NDArray[np.float64] | None = None
    wall_s: NDArray[np.float64] | None = None
    id_columns: frozenset[str] = frozenset()
    n_rows: int | None = None
    sha256: str = ""
    notes: list[str] = field(default_factory=list)
    # the file's own unit per kept row before --merge-small-units, and what the raw
    # re-read dropped for --exclude-units / --clip (records per rule)
    source_units: NDArray[np.object_] | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    # the file's own coordinates of the records left out (no_leak looks for them too)
    left_out_x: NDArray[np.float64] | None = None
    left_out_y: NDArray[np.float64] | None = None
    #: the source's other columns (attributes a release may keep), aligned with the rows
    columns: dict[str, pd.Series] = field(default_factory=dict)
    #: the subject column as read, aligned with the rows (no_leak: does a column copy it?)
    subject_raw: pd.Series | None = None
    # the attribute columns, aligned with the rows (kept columns are compared with them);
    # ``attributes_text``: a CSV file's cells as text, not yet parsed
    attributes: pd.DataFrame | None = None
    attributes_text: bool = False
    #: the subject column as :func:`subject_ids` read it (codes, compared keys, ids)
    subject_table: SubjectIds | None = None


def wallclock_seconds(texts: Iterable[str]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(wall-clock seconds ignoring any offset, UTC seconds where an offset is given)."""
    s = pd.Series(list(texts), dtype="string").str.strip().str.replace("/", "-", regex=False)
    tz = re.compile(r"(?:Z|[+-]\d{2}:?\d{2})$")
    naive = s.str.replace(tz.pattern, "", regex=True)
    wall = pd.to_datetime(naive, errors="coerce", format="ISO8601")
    wall_s = ns_to_s(wall)
    has_tz = s.str.contains(tz.pattern, regex=True).fillna(False).to_numpy(dtype=bool)
    utc_s = np.full(len(s), np.nan)
    if has_tz.any():
        utc = pd.to_datetime(s[has_tz], errors="coerce", utc=True, format="ISO8601")
        utc_s[has_tz] = ns_to_s(utc)
    return wall_s, utc_s


def ns_to_s(stamps: pd.Series) -> NDArray[np.float64]:
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    ns = stamps.astype("datetime64[ns]").to_numpy()
    out = ns.astype("int64").astype(np.float64) / 1e9
    out[np.isnat(ns)] = np.nan
    return out


_T = TypeVar("_T")


def read_ahead(items: Iterator[_T]) -> Generator[_T, None, None]:
    """The items of ``items``, the next one fetched in a thread while this one is used.

    Arrow reads, decompresses and parses without holding the GIL, so the next batch
    of a file is read while the checks work on this one. An error fetching an item is
    raised where that item is taken.
    """
    done = object()

    def fetch() -> object:
        return next(items, done)

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(fetch)
        while True:
            item = pending.result()
            if item is done:
                return
            pending = pool.submit(fetch)
            yield item  # type: ignore[misc]


def encodings_in_background(paths: Iterable[Path]) -> dict[Path, Future[list[str]]]:
    """Each file's :func:`~geokanon.verify.containers.encoding_problems`, worked out one
    after the other in a thread of their own (pyarrow's work, mostly outside the interpreter
    lock), beside whatever the caller does meanwhile; the caller waits for each result."""
    from geokanon.verify.containers import encoding_problems

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-encoding")
    futures = {path: pool.submit(encoding_problems, path) for path in paths}
    pool.shutdown(wait=False)  # the files queued still run
    return futures


#: The shape columns of ``groups.parquet`` (the representative's point and its box):
#: :attr:`ReleaseReader.groups` leaves them out.
_SHAPES = ("geometry", "bbox")


#: The audit's columns the checks read, in two sets read apart: where each record is and
#: whose it is, and what became of it (with ``time_bin`` when the audit has one).
AUDIT_COLUMNS: dict[str, tuple[str, ...]] = {
    "places": ("source_row", "subject", "x_m", "y_m"),
    "labels": ("disposal", "group_id", "class_id", "unit"),
}


class ReleaseReader:
    """Lazy, cached reader of one release directory."""

    def __init__(
        self,
        root: Path,
        source: PointTable | Path | DatabaseInput | None,
        tolerance_m: float,
        source_file: Path | DatabaseInput | None = None,
    ) -> None:
        self.root = root
        self.rel = root / "release"
        self.aud = root / "audit"
        self.tolerance_m = float(tolerance_m)
        self._source_arg = source
        self._source_file = source_file
        #: release file -> sha256 of files a previous full run verified, unchanged since
        self.unchanged: dict[str, str] = {}
        #: release file -> sha256 as ``manifest`` found it
        self.digests: dict[str, str] = {}
        #: CSV file -> data rows, noted by ``no_leak`` when it reads one to the end
        self.csv_rows: dict[Path, int] = {}
        #: release file -> sha256 of the bytes ``no_leak`` read, when it read all of them
        self.read_digests: dict[Path, str] = {}
        #: release file -> ``no_leak``'s findings in it, from another check's read of it
        #: (``records.parquet``: the records pass)
        self.parquet_scans: dict[Path, list[str]] = {}
        #: the writer's first run, before ``report.html`` is written (it is not required
        #: then); None: a release whose manifest records no verification results is one
        self.before_report: bool | None = None
        #: the audit's per-record file, and how messages name it (a source partition's
        #: reader reads its audit part: :meth:`of_source_partition`)
        self.audit_file = self.aud / "assignment.parquet"
        self.audit_label = "assignment"
        #: the checks this verification runs (a read that one check makes for a later
        #: one, such as no_leak's of records.csv for counts, is made only when it runs)
        self.checks: frozenset[str] = frozenset(CHECKS)
        #: the records files this reader checks: None, the release's own
        #: (``records.parquet``); a reader of one part names that part's file
        self.record_files: list[Path] | None = None
        #: release Parquet file -> its encoding's findings, worked out in a thread of
        #: their own (:meth:`start_encodings`)
        self.encodings: dict[Path, Future[list[str]]] = {}

    def start_encodings(self) -> None:
        """Start re-encoding the release's Parquet files (largest first) in a thread of its
        own, for ``no_leak`` (:func:`~geokanon.verify.containers.encoding_problems`): it is
        pyarrow's work, mostly outside the interpreter lock, and runs beside the checks'
        lanes instead of after ``no_leak``'s scan of each file."""
        files = sorted(self.rel.glob("*.parquet"), key=lambda p: (-p.stat().st_size, p.name))
        self.encodings.update(encodings_in_background(files))

    def encoding_findings(self, path: Path) -> list[str] | None:
        """The findings :meth:`start_encodings` worked out for ``path`` (None: not started)."""
        future = self.encodings.get(path)
        return None if future is None else future.result()

    # ---- readers of one part ----------------------------------------------------------

    @classmethod
    def of_part(
        cls,
        root: Path,
        rows: PartRows,
        published: pd.DataFrame,
        *,
        k: int,
        r_max_m: float,
        crs: str | None,
        tolerance_m: float,
        record_file: Path | None,
    ) -> ReleaseReader:
        """A reader of one part of a release: a single file is one part, read from its
        files; a part of a partitioned release is read from what its tasks gathered.

        ``published`` is the part's rows of ``groups.parquet`` (``rows.kind ==
        "group"``) or ``classes.parquet``; ``rows`` its members, which stand for the
        audit and the source (member ``i`` is audit row and source row ``i``);
        ``record_file`` the part's records file (``None``: no records pass). The
        working and published CRS are the release's one ``crs``. What the reader
        would read from ``audit/`` or the source is taken from ``rows``; the release's
        small files (``manifest.json``, ``audit.json``) are read from ``root``.
        """
        n = rows.ids.size
        none = np.full(n, -1, dtype=np.int64)
        no_groups = pd.DataFrame({c: pd.Series(dtype=np.float64) for c in ("n_records", "x", "y")})
        no_groups.insert(0, "group_id", pd.Series(dtype=np.int64))
        no_classes = pd.DataFrame(
            {"class_id": pd.Series(dtype=np.int64), "n_records": pd.Series(dtype=np.int64)}
        )
        view = cls(root, None, tolerance_m)
        grouped = rows.kind == "group"
        view.__dict__.update(
            k=k, r_max_m=r_max_m, output_crs=crs, working_crs=crs,
            _audit_columns={"": n}, n_audit=n,
            # the members' kept values: row i is member i (its "source row")
            source=Source(n_rows=n, attributes=pd.DataFrame(rows.kept, index=pd.RangeIndex(n))),
            source_rows=np.arange(n, dtype=np.int64),
            groups=published if grouped else no_groups,
            classes=no_classes if grouped else published,
            gid=rows.ids if grouped else none, cid=none if grouped else rows.ids,
            xy_m=(rows.x, rows.y), subjects=rows.subjects,
            syn_gid=np.zeros(0, dtype=np.int64), syn_cid=np.zeros(0, dtype=np.int64),
            synthetic=pd.DataFrame({"group_id": [], "class_id": [], "unit": []}),
            unit_codes=factorize_text(rows.units),  # codes in sort order
        )  # fmt: skip
        view.record_files = None if record_file is None else [record_file]
        return view

    @classmethod
    def of_source_partition(
        cls, root: Path, source: Source, audit_file: Path, label: str
    ) -> ReleaseReader:
        """A reader of one source partition and its audit part (``audit_file``; messages
        name it ``label``): the audit is read as a single file's is (:attr:`gid`,
        :attr:`cid`, :meth:`is_disposal`, :attr:`unit_codes`, :attr:`xy_m`, ...) and
        ``source`` is the partition's rows (``source_row`` counts from the partition's
        first row: see :attr:`source_rows`)."""
        view = cls(root, None, 0.0)
        view.audit_file, view.audit_label = audit_file, label
        view.__dict__["source"] = source
        return view

    @classmethod
    def of_figures(
        cls, root: Path, *, groups: int, classes: int, records: int, r_max_m: float
    ) -> ReleaseReader:
        """A reader that knows only a release's figures (its numbers of groups, classes and
        source records, and ``r_max_m``): what a structural column may hold
        (:func:`geokanon.verify.leak_rules.column_rules`), for a task that reads no table."""
        view = cls(root, None, 0.0)
        view.__dict__.update(
            groups=pd.DataFrame(index=pd.RangeIndex(groups)),
            classes=pd.DataFrame(index=pd.RangeIndex(classes)),
            n_audit=records, r_max_m=r_max_m,
            synthetic=pd.DataFrame({"group_id": [], "class_id": [], "unit": []}),
        )  # fmt: skip
        return view

    # ---- what a later run over the same release may re-use ---------------------------

    #: Cached values derived from the audit and the source only (never from a release
    #: file or the manifest), which a later run over the same audit and source re-uses.
    _CARRIED = (
        "audit", "_audit_schema", "_audit_places", "_audit_labels", "n_audit", "gid", "cid",
        "_disposal_codes", "disposal", "_is_disposal", "xy_m", "source", "subjects",
        "subject_codes", "audit_subjects", "source_rows", "unit_codes", "units", "synthetic",
        "syn_gid", "syn_cid", "working_crs", "_members", "_suppressed_subjects",
        "_unit_subjects", "_no_leak_secrets",
    )  # fmt: skip

    def _inputs_key(self) -> tuple[Any, ...]:
        """What the carried values rest on: the audit's files as on disk, the source."""

        def stat(p: Path) -> tuple[str, int, int]:
            st = p.stat()
            return (p.as_posix(), st.st_size, st.st_mtime_ns)

        def ident(x: object) -> object:
            # a file by its state on disk; a table or a database input by identity (the
            # same object: the caller's promise that it holds the same records)
            return stat(x) if isinstance(x, Path) else (id(x), x)

        files = sorted(p for p in self.aud.rglob("*") if p.is_file())
        raw = None if self._source_file is None else ident(self._source_file)
        src = ident(self._source_arg)
        return (self.root.resolve(), tuple(stat(p) for p in files), src, raw)

    def carry(self) -> _Carry:
        """The values this run derived from the audit and the source (see :meth:`adopt`)."""
        values = {n: self.__dict__[n] for n in self._CARRIED if n in self.__dict__}
        return _Carry(self._inputs_key(), self._source_arg, self.tolerance_m, values)

    def adopt(self, carry: object) -> bool:
        """Take over what an earlier run derived, when it rests on the same audit files
        (paths, sizes, modification times), the same source object or file and the same
        tolerance; else nothing (every value is derived again)."""
        if not isinstance(carry, _Carry):
            return False
        src = self._source_arg
        if not (carry.source is src or (isinstance(src, Path) and carry.source == src)):
            return False
        if carry.tolerance_m != self.tolerance_m:
            return False
        try:
            same = carry.key == self._inputs_key()
        except OSError:
            return False
        if same:
            self.__dict__.update(carry.values)
        return same

    # ---- raw files -------------------------------------------------------------------

    def _parquet(
        self, path: Path, *, arrow_objects: bool = False, columns: list[str] | None = None
    ) -> pd.DataFrame:
        """A Parquet file (its ``columns``, default all) as a pandas frame.
        ``arrow_objects``: binary and struct columns (WKB geometry, GeoParquet's ``bbox``)
        stay Arrow-backed (``pd.ArrowDtype``), not a Python object per row; their values
        read the same (``bytes``, ``dict``)."""
        if not path.is_file():
            raise Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            table = pq.read_table(path, columns=columns)
            if arrow_objects:
                return table.to_pandas(types_mapper=_arrow_backed)
            return table.to_pandas()
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None

    def _json(self, path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise Unreadable(f"{path.name} is not a JSON object")
        return data

    @cached
    def manifest(self) -> dict[str, Any]:
        return self._json(self.rel / "manifest.json")

    @cached
    def audit(self) -> dict[str, Any]:
        return self._json(self.aud / "audit.json")

    @cached
    def k(self) -> int:
        k = self.manifest.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise Unreadable("manifest k is not an integer >= 2")
        return k

    @cached
    def r_max_m(self) -> float:
        r = self.manifest.get("r_max_m")
        if isinstance(r, bool) or not isinstance(r, int | float) or not r > 0:
            raise Unreadable("manifest r_max_m is not a positive number")
        return float(r)

    @cached
    def assignment(self) -> pd.DataFrame:
        """The whole audit as a pandas frame (for other readers; the checks do not use it)."""
        self._audit_arrays  # noqa: B018  (raises Unreadable as the checks would)
        return self._parquet(self.audit_file)

    @property
    def _audit_arrays(self) -> dict[str, Any]:
        """The audit's columns the checks use (:data:`AUDIT_COLUMNS`), read once with
        pyarrow in batches of rows into what the checks use (numbers, codes), so no Arrow
        copy of the audit is held: ``""`` is its number of rows. Its two sets of columns
        are read apart (:meth:`_audit_set`), so two lanes of checks read them side by side;
        either that cannot be read fails both.

        A column that cannot be turned holds its exception, raised where it is used.
        """
        held = self.__dict__.get("_audit_columns")  # a part's reader sets what it holds
        if held is not None:
            return held
        places, labels = self._audit_set("places"), self._audit_set("labels")
        return {**places, **labels}

    @cached
    def _audit_schema(self) -> tuple[int, list[str]]:
        """(rows, column names) of the audit file; refused when it lacks a column."""
        path = self.audit_file
        if not path.is_file():
            raise Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            pf = pq.ParquetFile(path)
            names = [str(n) for n in pf.schema_arrow.names]
            n = int(pf.metadata.num_rows)
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{self._audit_name} is unreadable ({type(exc).__name__})") from None
        missing = [c for sets in AUDIT_COLUMNS.values() for c in sets if c not in names]
        if missing:
            raise Unreadable(f"{self._audit_name} lacks columns {missing}")
        return n, names

    def _audit_set(self, which: str) -> dict[str, Any]:
        """One set of :data:`AUDIT_COLUMNS` (``places``, or ``labels`` with ``time_bin``
        when the audit has one), read once (whichever check asks first)."""
        return once(self, f"_audit_{which}", lambda: self._read_audit(which))

    def _read_audit(self, which: str) -> dict[str, Any]:
        n, names = self._audit_schema
        path = self.audit_file
        cols = list(AUDIT_COLUMNS[which])
        if which == "labels" and "time_bin" in names:
            cols.append("time_bin")
        keep = {c: _AuditColumn(c, n, self.audit_label) for c in cols}
        try:
            pf = pq.ParquetFile(path)
            # text kept as codes is read as dictionaries (no Python strings per row)
            schema = pf.schema_arrow
            as_dict = [
                c
                for c in cols
                if keep[c].kind == "codes"
                and (pa.types.is_string(schema.field(c).type)
                     or pa.types.is_large_string(schema.field(c).type))
            ]  # fmt: skip
            if as_dict:
                pf = pq.ParquetFile(path, read_dictionary=as_dict)
            batches = pf.iter_batches(batch_size=SCAN_ROWS, columns=cols, use_threads=True)
            with contextlib.closing(read_ahead(batches)) as ahead:
                for batch in ahead:
                    for i, c in enumerate(cols):
                        keep[c].add(batch.column(i))
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{self._audit_name} is unreadable ({type(exc).__name__})") from None
        out: dict[str, Any] = {"": n}
        out.update({c: keep[c].result() for c in cols})
        return out

    @property
    def _audit_name(self) -> str:
        """The audit file as messages name it (``assignment.parquet``, ``audit part 3``)."""
        return self.audit_file.name if self.audit_label == "assignment" else self.audit_label

    def _audit(self, name: str) -> Any:
        held = self.__dict__.get("_audit_columns")
        if held is not None:
            value = held[name]
        else:  # its set, and the other (the audit fails whole when either cannot be read)
            which = "places" if name in AUDIT_COLUMNS["places"] else "labels"
            value = self._audit_set(which)[name]
            self._audit_set("labels" if which == "places" else "places")
        if isinstance(value, _Failed):
            raise value.exc
        return value

    @cached
    def n_audit(self) -> int:
        return int(self._audit_columns_count())

    def _audit_columns_count(self) -> int:
        held = self.__dict__.get("_audit_columns")
        return int(held[""]) if held is not None else int(self._audit_arrays[""])

    @property
    def time_bins(self) -> pa.ChunkedArray | None:
        """The audit's ``time_bin`` column, when it has one."""
        return self._audit("time_bin") if "time_bin" in self._audit_arrays else None

    @cached
    def gid(self) -> NDArray[np.int64]:
        return self._audit("group_id")

    @cached
    def cid(self) -> NDArray[np.int64]:
        return self._audit("class_id")

    @cached
    def _disposal_codes(self) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
        return self._audit("disposal")

    @cached
    def disposal(self) -> NDArray[np.object_]:
        codes, names = self._disposal_codes
        return names[codes]

    def is_disposal(self, *names: str) -> NDArray[np.bool_]:
        """Rows whose disposal is one of ``names`` (kept: do not write to it)."""
        memo: dict[tuple[str, ...], NDArray[np.bool_]] = self.__dict__.setdefault(
            "_is_disposal", {}
        )
        if names not in memo:
            codes, cats = self._disposal_codes
            hit = np.array([str(c) in names for c in cats], dtype=bool)
            memo[names] = hit[codes] if hit.size else np.zeros(codes.size, dtype=bool)
        return memo[names]

    @cached
    def xy_m(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self._audit("x_m"), self._audit("y_m")

    def report_sample_basis(self, every: int) -> tuple[int, int]:
        """(the audit's records, how many of them the report sample of 1 in ``every``
        draws: :func:`~geokanon.verify._arrays.sample_records` of the audit's group ids
        and working coordinates)."""
        return self.n_audit, sample_records(self.gid, *self.xy_m, every)

    @cached
    def source(self) -> Source:
        out, work = self.output_crs, self.working_crs
        src = _load_source(self._source_arg, self.audit, out, work)
        if self._source_file is None:
            return src
        raw = _load_source(self._source_file, self.audit, out, work)
        if raw.n_rows != src.n_rows:
            raise Unreadable("source_file and source hold different numbers of records")
        # the table's decisions (subjects, units, working coordinates) with the file's
        # own values (raw coordinates, subject ids, timestamps, id columns, checksum)
        return dataclasses.replace(
            src,
            x=raw.x if raw.x is not None else src.x,
            y=raw.y if raw.y is not None else src.y,
            subject_ids=raw.subject_ids,
            subject_column=raw.subject_column,
            time_column=raw.time_column,
            epoch_s=src.epoch_s if src.epoch_s is not None else raw.epoch_s,
            wall_s=raw.wall_s,
            id_columns=raw.id_columns,
            sha256=raw.sha256,
            source_units=raw.source_units,
            dropped=raw.dropped,
            left_out_x=raw.left_out_x,
            left_out_y=raw.left_out_y,
            columns=raw.columns or src.columns,
            subject_raw=raw.subject_raw,
        )

    @cached
    def subjects(self) -> NDArray[np.int64]:
        """Subject code per assignment row: the source's when it is given and aligned."""
        src = self.source
        rows = self.source_rows
        if src.subjects is not None and rows is not None:
            # every record its own subject: its code is its source row (the array itself)
            return rows if src.own_subjects else src.subjects[rows]
        return self.audit_subjects

    @cached
    def subject_codes(self) -> tuple[NDArray[np.int64], int]:
        """:attr:`subjects` numbered densely (``dense_codes``), worked out once."""
        return dense_codes(self.subjects)

    @cached
    def audit_subjects(self) -> NDArray[np.int64]:
        return self._audit("subject")

    @property
    def audit_source_rows(self) -> NDArray[np.int64]:
        """The audit's ``source_row`` column as written (see :attr:`source_rows`)."""
        rows: NDArray[np.int64] = self._audit("source_row")
        return rows

    @cached
    def source_rows(self) -> NDArray[np.int64] | None:
        """Source row per assignment row when the source is given and the rows line up."""
        n = self.source.n_rows
        if n is None:
            return None
        rows = self.audit_source_rows
        if rows.size != n or (rows.size and (rows.min() < 0 or rows.max() >= n)):
            return None
        if np.count_nonzero(np.bincount(rows, minlength=n)) != n:
            return None
        return rows

    @cached
    def unit_codes(self) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
        """(code per assignment row, unit id per code, sorted)."""
        return self._audit("unit")

    @cached
    def units(self) -> NDArray[np.object_]:
        """Unit id per audit row (for other readers; the checks use :attr:`unit_codes`)."""
        codes, names = self.unit_codes
        return names[codes]

    @cached
    def synthetic(self) -> pd.DataFrame:
        path = self.aud / "synthetic.parquet"
        if not path.is_file():
            return pd.DataFrame({"group_id": [], "class_id": [], "unit": []})
        return self._parquet(path)

    @cached
    def syn_gid(self) -> NDArray[np.int64]:
        s = self.synthetic
        return (
            int_ids(s["group_id"], "synthetic group_id") if "group_id" in s else np.array([], int)
        )

    @cached
    def syn_cid(self) -> NDArray[np.int64]:
        s = self.synthetic
        return (
            int_ids(s["class_id"], "synthetic class_id") if "class_id" in s else np.array([], int)
        )

    @cached
    def groups(self) -> pd.DataFrame:
        # the checks read its numbers, ids and units; geometry and bbox are read from the
        # file itself (no_leak) or compared by name only (:attr:`group_columns`): left
        # out; any other binary or struct column is kept in Arrow (a million Python
        # objects per column cost seconds)
        path = self.rel / "groups.parquet"
        names = self.group_columns
        g = self._parquet(path, arrow_objects=True, columns=[c for c in names if c not in _SHAPES])
        for c in ("group_id", "n_records", "x", "y"):
            if c not in g.columns:
                raise Unreadable(f"groups.parquet lacks column {c!r}")
        return g

    @cached
    def group_columns(self) -> list[str]:
        """``groups.parquet``'s column names (:attr:`groups` holds all but the shapes)."""
        path = self.rel / "groups.parquet"
        if not path.is_file():
            raise Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            return [str(n) for n in pq.read_schema(path).names]
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None

    def groups_column(self, column: str) -> Iterator[pd.Series]:
        """``groups.parquet``'s ``column``, :data:`SCAN_ROWS` rows at a time (nothing when
        the file has no such column), read as :attr:`groups` reads it and refused as it
        refuses the file (missing, unreadable, lacking a column it requires); from
        :attr:`groups` when that is loaded already, else streamed (the partitioned driver
        never holds the whole file)."""
        if "groups" in self.__dict__ and column not in _SHAPES:
            if column in self.groups:
                yield self.groups[column]
            return
        path = self.rel / "groups.parquet"
        if not path.is_file():
            raise Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            for c in ("group_id", "n_records", "x", "y"):
                if c not in names:
                    raise Unreadable(f"groups.parquet lacks column {c!r}")
            if column not in names:
                return
            for batch in pf.iter_batches(batch_size=SCAN_ROWS, columns=[column]):
                table = pa.Table.from_batches([batch])
                yield table.to_pandas(types_mapper=_arrow_backed)[column]
        except (OSError, pa.ArrowException) as exc:
            raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None

    @cached
    def group_ids(self) -> NDArray[np.int64]:
        """``groups.parquet``'s ``group_id`` as ids (-1: missing), read once for every check."""
        return int_ids(self.groups["group_id"], "groups group_id")

    @cached
    def class_ids(self) -> NDArray[np.int64]:
        """``classes.parquet``'s ``class_id`` as ids (-1: missing), read once for every check."""
        return int_ids(self.classes["class_id"], "classes class_id")

    @cached
    def classes(self) -> pd.DataFrame:
        path = self.rel / "classes.parquet"
        if not path.is_file():
            if (self.cid >= 0).any():
                raise Unreadable("release/classes.parquet is missing")
            return pd.DataFrame({"class_id": [], "level": [], "unit": [], "n_records": []})
        c = self._parquet(path)
        for col in ("class_id", "n_records"):
            if col not in c.columns:
                raise Unreadable(f"classes.parquet lacks column {col!r}")
        return c

    @cached
    def units_table(self) -> pd.DataFrame:
        path = self.rel / "units.csv"
        if not path.is_file():
            raise Unreadable("release/units.csv is missing")
        try:
            t = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise Unreadable(f"units.csv is unreadable ({type(exc).__name__})") from None
        for col in ("unit", "released", "suppressed"):
            if col not in t.columns:
                raise Unreadable(f"units.csv lacks column {col!r}")
        return t

    @cached
    def working_crs(self) -> str | None:
        v = self.audit.get("working_crs")
        return None if v in (None, "") else str(v)

    @cached
    def output_crs(self) -> str | None:
        v = self.manifest.get("crs", self.audit.get("output_crs"))
        return None if v in (None, "") else str(v)

    @cached
    def to_working(self) -> Callable[[Any, Any], tuple[Any, Any]] | None:
        """Transform output-CRS coordinates to the working CRS, or None when they are the same."""
        return _transformer(self.output_crs, self.working_crs)

    @cached
    def to_output(self) -> Callable[[Any, Any], tuple[Any, Any]] | None:
        return _transformer(self.working_crs, self.output_crs)

    @cached
    def ground(self) -> Ground | None:
        """Ellipsoidal distances in the working CRS's datum (``None``: unnamed metric CRS)."""
        from geokanon.verify.extent import Ground  # the extent check's measure

        return Ground.of(self.working_crs, self.output_crs)

    @cached
    def own_subjects(self) -> bool:
        col = self.audit.get("subject_column")
        if col is None:
            col = read_options(self.audit).get("subject")
        return col in (None, "")

    def release_files(self) -> list[Path]:
        return sorted(p for p in self.rel.rglob("*") if p.is_file())


@dataclass(frozen=True)
class _Carry:
    """What one run over a release derived from its audit and its source."""

    key: tuple[Any, ...]
    source: object
    tolerance_m: float
    values: dict[str, Any]


@dataclass(frozen=True)
class _Failed:
    """An audit column that could not be read as the checks need it."""

    exc: Exception


def _audit_numbers(
    col: pa.ChunkedArray, name: str, dtype: Any, label: str = "assignment"
) -> NDArray[Any]:
    """A numeric audit column as a numpy array (nulls: an error)."""
    try:
        if col.null_count:
            raise Unreadable(f"{label} {name} has nulls")
        return np.asarray(col.to_numpy(), dtype=dtype)
    except (pa.ArrowException, TypeError, ValueError):
        return pd.to_numeric(col.to_pandas()).to_numpy(dtype=dtype)


#: How each audit column is kept: numbers (nulls an error), ids (nulls -1) or text codes;
#: any other column stays an Arrow column.
_AUDIT_KINDS: dict[str, tuple[str, Any]] = {
    "source_row": ("numbers", np.int64),
    "disposal": ("codes", None),
    "group_id": ("ids", None),
    "class_id": ("ids", None),
    "unit": ("codes", None),
    "subject": ("numbers", np.int64),
    "x_m": ("numbers", np.float64),
    "y_m": ("numbers", np.float64),
}


class _AuditColumn:
    """One audit column, filled batch by batch into a numpy array.

    The result is what the whole column would give: :func:`_audit_numbers`,
    :func:`arrow_ids` and :func:`factorize_arrow` work value by value, and text is
    numbered in order of first sight, then in sorted order (as ``numpy.unique`` of the
    texts sorts them) once every batch is in: the rows are numbered again only when the
    two orders differ.
    """

    def __init__(self, name: str, n: int, label: str = "assignment") -> None:
        self.name = name
        self.label = label  # how messages name the audit file ("assignment", "audit part 3")
        self.kind, self.arg = _AUDIT_KINDS.get(name, ("arrow", None))
        dtype = self.arg if self.kind == "numbers" else np.int64
        self.values: NDArray[Any] = np.empty(n if self.kind != "arrow" else 0, dtype=dtype)
        self.at = 0
        self.failed: Exception | None = None
        self.chunks: list[pa.Array] = []  # arrow columns, and text that is not a string type
        self.texts: dict[str, int] = {}  # text -> number in order of first sight

    def add(self, arr: pa.Array) -> None:
        start, self.at = self.at, self.at + len(arr)
        if self.kind == "numbers" and arr.null_count:
            # nulls anywhere are the error, whatever else went wrong
            self.failed = Unreadable(f"{self.label} {self.name} has nulls")
        if self.failed is not None:
            return
        try:
            if self.kind == "numbers":
                self.values[start : self.at] = _audit_numbers(
                    pa.chunked_array([arr]), self.name, self.arg, self.label
                )
            elif self.kind == "ids":
                ids_into(arr, f"{self.label} {self.name}", self.values[start : self.at])
            elif self.kind == "codes" and is_text_type(arr.type) and not self.chunks:
                if not pa.types.is_dictionary(arr.type):
                    arr = arr.dictionary_encode()
                # a text as numpy reads it (trailing NULs dropped), as the result sorts it;
                # a null reads "None" (as arrow_text_codes reads it)
                texts = [str(v).rstrip("\x00") for v in arr.dictionary.to_pylist()]
                number = [self.texts.setdefault(t, len(self.texts)) for t in texts]
                null = self.texts.setdefault("None", len(self.texts)) if arr.null_count else -1
                local = np.array([*number, null], dtype=np.int64)
                codes_into(arr, local, self.values[start : self.at])
            else:
                self.chunks.append(arr)
        except Exception as exc:  # raised again where the column is used
            self.failed = exc

    def result(self) -> Any:
        if self.failed is not None:
            return _Failed(self.failed)
        try:
            if self.kind == "arrow":
                return pa.chunked_array(
                    self.chunks, type=self.chunks[0].type if self.chunks else None
                )
            if self.kind != "codes":
                return self.values
            if self.chunks:  # not text as Arrow reads it: the whole column at once
                return factorize_arrow(pa.chunked_array(self.chunks))
            # the texts numbered in sorted order (the rows again only when that differs)
            names = sorted(self.texts)
            sight = np.array([self.texts[t] for t in names], dtype=np.int64)
            codes = self.values
            if (sight != np.arange(sight.size)).any():
                rank = np.empty(sight.size, dtype=np.int64)
                rank[sight] = np.arange(sight.size)
                renumber(codes, rank)  # in place: the column is this reader's own
            return codes, np.array(names, dtype=object)
        except Exception as exc:
            return _Failed(exc)


def _arrow_backed(t: pa.DataType) -> pd.ArrowDtype | None:
    """``to_pandas`` types mapper: binary and struct columns as Arrow-backed columns."""
    binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    return pd.ArrowDtype(t) if binary or pa.types.is_struct(t) else None


def same_crs(a: str | None, b: str | None) -> bool:
    if a is None or b is None or a == b:
        return True
    from pyproj import CRS

    try:
        return bool(CRS.from_user_input(a) == CRS.from_user_input(b))
    except Exception:  # pyproj raises its own CRSError; unknown CRS: treat as different
        return False


def _transformer(src: str | None, dst: str | None) -> Callable[[Any, Any], tuple[Any, Any]] | None:
    if same_crs(src, dst):
        return None
    from pyproj import Transformer

    t = Transformer.from_crs(src, dst, always_xy=True)

    def apply(x: Any, y: Any) -> tuple[Any, Any]:
        xx, yy = t.transform(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        return np.asarray(xx, dtype=np.float64), np.asarray(yy, dtype=np.float64)

    return apply


def subject_id_text(text: str) -> str:
    """A subject id as subjects are compared: NFKC, case folded (and NFKC again), stripped.

    The verifier's own copy of the rule (it imports no algorithm module): ids that
    differ only in case, surrounding whitespace or Unicode form are one subject.

    Examples
    --------
    >>> {subject_id_text(s) for s in ("P001", " P001", "p001", "P001 ", "\uff30\uff10\uff10\uff11")}
    {'p001'}
    """
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()).strip()


@dataclass(frozen=True)
class SubjectIds:
    """A subject column's ids as subjects are compared (:func:`subject_id_text`).

    ``codes``: the dense subject code of every row (the spellings of one id share it);
    ``keys``: the compared text of every code; ``written``: every distinct id as written
    (``str`` of the value, as ``astype(str)`` reads it; a missing id reads ``"nan"``),
    so ``len(written) - len(keys)`` ids were merged into another; ``row_texts``: the id
    of every row as written, a missing id left missing (what ``no_leak`` looks for).
    One reading for a single-file source and for a source partition alike.
    """

    codes: NDArray[np.int64]
    keys: NDArray[np.object_]
    written: NDArray[np.object_]
    row_texts: NDArray[np.object_]

    @property
    def merged(self) -> int:
        """Distinct ids merged into another (distinct ids minus distinct subjects)."""
        return int(self.written.size - self.keys.size)

    def present(self) -> frozenset[str]:
        """The ids as written, stripped, without missing or blank ones."""
        if not self.row_texts.size:
            return frozenset()
        texts = pd.unique(self.row_texts[pd.notna(self.row_texts)])
        return frozenset(s for s in (str(t).strip() for t in texts) if s)


def subject_ids(ids: pd.Series) -> SubjectIds:
    """Read a subject column: only its distinct values are turned into text and
    normalised (:class:`SubjectIds`).

    Examples
    --------
    >>> s = subject_ids(pd.Series(["Ann", " ann", "Bo", "Bo"]))
    >>> s.codes.tolist(), s.keys.tolist(), s.merged
    ([0, 0, 1, 1], ['ann', 'bo'], 1)
    """
    rows, uniq = pd.factorize(ids, use_na_sentinel=False)
    values = np.asarray(uniq, dtype=object)
    missing = pd.isna(values) if values.size else np.zeros(0, dtype=bool)
    texts = np.empty(values.size, dtype=object)
    texts[:] = [str(v) for v in values.tolist()]
    # values whose texts are equal (1 and "1") are one id, as astype(str) reads them
    same, written = pd.factorize(texts, sort=False)
    kept = texts.copy()
    kept[missing] = np.nan
    keys = np.empty(len(written), dtype=object)
    keys[:] = [subject_id_text(str(t)) for t in np.asarray(written, dtype=object).tolist()]
    # any one-to-one numbering will do here (the order of codes is never compared)
    key_code, names = pd.factorize(keys, sort=False)
    dense = np.asarray(key_code, dtype=np.int64)[same]
    rows = np.asarray(rows, dtype=np.int64)
    return SubjectIds(
        codes=dense[rows] if rows.size else rows,
        keys=np.asarray(names, dtype=object),
        written=np.asarray(written, dtype=object),
        row_texts=kept[rows] if rows.size else np.zeros(0, dtype=object),
    )


def subject_codes_of_ids(ids: pd.Series) -> tuple[NDArray[np.int64], int]:
    """Dense subject codes of text ids compared by :func:`subject_id_text`, and the merges
    (:func:`subject_ids`' ``codes`` and ``merged``).

    Examples
    --------
    >>> codes, merged = subject_codes_of_ids(pd.Series(["Ann", " ann", "Bo"]))
    >>> codes.tolist(), merged
    ([0, 0, 1], 1)
    """
    s = subject_ids(ids)
    return s.codes, s.merged


def read_options(audit: Mapping[str, Any]) -> dict[str, Any]:
    """Column names the source was read with: ``audit["read_options"]`` or top-level keys."""
    opts = audit.get("read_options")
    out: dict[str, Any] = dict(opts) if isinstance(opts, Mapping) else {}
    for key in ("x", "y", "lon", "lat", "subject", "unit", "time", "crs"):
        if key not in out:
            for alt in (f"{key}_column", key):
                if alt in audit and not isinstance(audit[alt], Mapping | list):
                    out[key] = audit[alt]
                    break
    return out


def _load_source(
    arg: PointTable | Path | DatabaseInput | None,
    audit: Mapping[str, Any],
    output_crs: str | None,
    working_crs: str | None,
) -> Source:
    src = Source()
    if arg is None:
        return src
    if isinstance(arg, PointTable):
        n = len(arg)
        src.n_rows = n
        src.sha256 = arg.source_sha256
        table_working = getattr(arg, "working_crs", None) or arg.crs
        if same_crs(table_working, working_crs):
            src.x_work, src.y_work = arg.x, arg.y
            # x, y are the input's own values when nothing projected or scaled them
            raw = same_crs(arg.crs, table_working) and getattr(arg, "coord_scale", 1.0) == 1.0
            if raw and same_crs(working_crs, output_crs):
                src.x, src.y = arg.x, arg.y
        # the input's own values, kept by the table when it projected them (lon/lat input)
        held = getattr(arg, "input_xy", None)
        if src.x is None and held is not None and same_crs(arg.crs, output_crs):
            src.x, src.y = held
        src.subjects = arg.subjects if arg.subjects is not None else np.arange(n, dtype=np.int64)
        src.own_subjects = arg.subjects is None
        src.subject_ids_merged = int(getattr(arg, "subject_ids_merged", 0))
        src.unit_codes = np.asarray(arg.unit_codes, dtype=np.int64)
        src.unit_names = np.asarray(arg.unit_names, dtype=object)
        if arg.times is not None:
            src.epoch_s = arg.times
        attrs = getattr(arg, "attributes", None)
        if isinstance(attrs, pd.DataFrame) and len(attrs) == n:
            src.columns = {str(c): attrs[c] for c in attrs.columns}
        src.attributes = arg.attributes
        return src
    path = arg if isinstance(arg, DatabaseInput) else Path(arg)
    opts = read_options(audit)
    # every format the release reads (CSV as text, .csv.gz, GeoParquet, GeoPackage, ...,
    # a database table or query: its checksum is taken in the same read)
    source_frame = read_source_frame(path)
    raw = source_frame.frame
    drop = np.zeros(len(raw), dtype=bool)
    if opts.get("drop_duplicates"):
        # The release removed exact copies first: so does the verifier, by the file's own
        # cells (a row repeating an earlier one cell for cell). Rows equal only once parsed
        # ("1" and "1.0") are left, and the record counts then disagree: a failed check.
        # (copies: pandas' copy-on-write hands out read-only views, and the rows the
        # release left out are marked in this array below)
        try:
            drop = raw.duplicated().to_numpy(dtype=bool, copy=True)
        except TypeError:  # unhashable cells (lists from Parquet): compared as text
            drop = raw.astype(str).duplicated().to_numpy(dtype=bool, copy=True)
    ucol = opts.get("unit") or audit.get("unit_column")
    copies = drop.copy()
    dropped = _filtered_rows(raw, opts, audit, ucol, drop)
    left_out = raw.loc[drop & ~copies]
    if drop.any():
        raw = raw.loc[~drop].reset_index(drop=True)
    geom = source_frame.geometry_xy
    named = opts.get("x") or opts.get("lon")
    if geom is not None and not named:
        xcol, ycol = geom
    else:
        xcol = named or ("x" if "x" in raw else "lon")
        ycol = opts.get("y") or opts.get("lat") or ("y" if "y" in raw else "lat")
    in_crs = source_frame.crs or opts.get("crs")
    in_crs = None if in_crs in (None, "") else str(in_crs)
    merges = audit_filter(audit).get("unit_merges") or {}
    src = frame_source(
        raw, xcol=xcol, ycol=ycol, scol=opts.get("subject") or audit.get("subject_column"),
        ucol=ucol, tcol=opts.get("time") or audit.get("time_column"), in_crs=in_crs,
        output_crs=output_crs, working_crs=working_crs,
        unit_merges=merges if opts.get("merge_small_units") is not None or merges else None,
    )  # fmt: skip
    src.sha256 = sha256_file(path) if isinstance(path, Path) else str(source_frame.sha256)
    src.attributes_text = isinstance(path, Path) and path.name.lower().endswith(CSV_SUFFIXES)
    if src.x is not None and len(left_out):
        src.left_out_x = pd.to_numeric(left_out[xcol], errors="coerce").to_numpy(dtype=np.float64)
        src.left_out_y = pd.to_numeric(left_out[ycol], errors="coerce").to_numpy(dtype=np.float64)
    src.dropped = dropped
    return src


def frame_source(
    raw: pd.DataFrame,
    *,
    xcol: str,
    ycol: str,
    scol: str | None,
    ucol: str | None,
    tcol: str | None,
    in_crs: str | None,
    output_crs: str | None,
    working_crs: str | None,
    unit_merges: Mapping[str, str] | None = None,
) -> Source:
    """What the verifier knows of source rows ``raw`` (a single-file source as read and
    filtered, or one source partition: one reading for both), by column name.

    Coordinates are the output CRS's (``x``, ``y``) when ``in_crs`` is it, and the working
    CRS's when it is that and the columns are not lon/lat. The subject column is read by
    :func:`subject_ids` (``subject_table``); units as text (``astype(str)``), mapped by
    ``unit_merges`` (``--merge-small-units``: the audit's mapping, applied to the file's
    own units, which are kept as ``source_units``); a time column as epoch seconds
    (numbers) or ISO 8601 text (wall clock, and UTC where an offset is given).
    """
    src = Source(n_rows=len(raw), attributes=raw)
    if xcol in raw and ycol in raw:
        xs = pd.to_numeric(raw[xcol], errors="coerce").to_numpy(dtype=np.float64)
        ys = pd.to_numeric(raw[ycol], errors="coerce").to_numpy(dtype=np.float64)
        if same_crs(in_crs, output_crs):
            src.x, src.y = xs, ys
        if same_crs(in_crs, working_crs) and not {xcol.lower(), ycol.lower()} & {"lon", "lat"}:
            src.x_work, src.y_work = xs, ys
    else:
        src.notes.append("source coordinate columns not found")
    if scol and scol in raw:
        sid = subject_ids(raw[scol])
        src.subject_table = sid
        src.subjects, src.subject_ids_merged = sid.codes, sid.merged
        src.subject_column = str(scol)
        # every id, whatever its length: the structural columns' values are known, so a
        # short id is told from a group id or a count by the column it sits in
        src.subject_ids = sid.present()
        src.subject_raw = raw[scol]
    elif not scol:
        src.subject_ids_merged = 0  # every record its own subject: nothing merged
    if ucol and ucol in raw:
        src.units = text_values(raw[ucol])
        if unit_merges is not None:
            src.source_units = src.units
            src.units = np.asarray(
                [unit_merges.get(u, u) for u in src.units.tolist()], dtype=object
            )
        codes_u, names_u = pd.factorize(src.units, sort=False)
        src.unit_codes = codes_u.astype(np.int64)
        src.unit_names = np.asarray(names_u, dtype=object)
    if tcol and tcol in raw:
        src.time_column = str(tcol)
        t = raw[tcol]
        num = pd.to_numeric(t, errors="coerce")
        if num.notna().all():
            src.epoch_s = num.to_numpy(dtype=np.float64)
        else:
            wall, utc = wallclock_seconds(t.astype(str))
            src.wall_s = wall
            src.epoch_s = np.where(np.isnan(utc), wall, utc)
    used = {xcol, ycol, scol, ucol, tcol}
    src.id_columns = frozenset(str(c) for c in raw.columns if c not in used and _is_id(raw[c]))
    src.columns = {str(c): raw[c] for c in raw.columns if c not in used}
    return src


def audit_filter(audit: Mapping[str, Any]) -> dict[str, Any]:
    entry = audit.get("input_filter")
    return dict(entry) if isinstance(entry, Mapping) else {}


def _filtered_rows(
    raw: pd.DataFrame,
    opts: Mapping[str, Any],
    audit: Mapping[str, Any],
    ucol: str | None,
    drop: NDArray[np.bool_],
) -> dict[str, int]:
    """Mark in ``drop`` the rows the release left out (``--clip``, ``--exclude-units``).

    Excluded units are found in the file's own unit column when there is one; clipped
    rows (and excluded rows of polygon units) are the audit's rows of the file. Returns
    the records each rule removed beyond the ones already in ``drop``.
    """
    filt = audit_filter(audit)
    out: dict[str, int] = {}
    n = len(raw)

    def rows(name: str) -> NDArray[np.bool_]:
        mask = np.zeros(n, dtype=bool)
        idx = np.asarray(filt.get(name) or [], dtype=np.int64)
        idx = idx[(idx >= 0) & (idx < n)]
        mask[idx] = True
        return mask

    if opts.get("clip"):
        clipped = rows("clipped_rows")
        out["clipped"] = int(np.count_nonzero(clipped & ~drop))
        drop |= clipped
    excl = opts.get("exclude_units")
    if excl:
        ids = [excl] if isinstance(excl, str) else list(excl)
        ids = [u.strip() for i in ids for u in str(i).split(",") if u.strip()]
        if ucol and ucol in raw:
            gone = raw[ucol].astype(str).isin(ids).to_numpy(dtype=bool)
        else:
            gone = rows("excluded_rows")
        out["excluded"] = int(np.count_nonzero(gone & ~drop))
        drop |= gone
    return out


_ID_NAME = re.compile(r"(?:^|[_\W])(?:id|fid|key|uuid|guid|row|index|idx|nr|no|num|number)$", re.I)


def _is_id(col: pd.Series) -> bool:
    """A per-record identifier: unique per row, and named like an id or a run of integers."""
    n = len(col)
    if n < 2 or col.nunique() != n:
        return False
    if _ID_NAME.search(str(col.name)):
        return True
    num = pd.to_numeric(col, errors="coerce")
    if num.isna().any():
        return False
    v = num.to_numpy(dtype=np.float64)
    return bool((v == np.floor(v)).all() and v.max() - v.min() == n - 1)


def text_file(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise Unreadable(f"{path.name} is unreadable") from None


# Batch sizes of the readers (tests set them small to cut files into many batches).

#: Rows per batch when the audit or (``no_leak``) a Parquet file is read.
SCAN_ROWS = 1 << 20
#: Bytes per block (one batch of rows) when ``no_leak`` reads a CSV file.
CSV_BLOCK = 1 << 24

"""Read point records into arrays in metres, with clear errors.

Formats: CSV (also ``.tsv``, ``.txt``, ``.csv.gz``), Parquet and GeoParquet (read in
chunks with pyarrow), GeoPackage, GeoJSON and Shapefile (pyogrio). Coordinates come
from coordinate columns (``--x/--y`` in a projected CRS, ``--lon/--lat`` in degrees)
or from point geometry. Longitude/latitude are projected to a local metric CRS
(:mod:`geokanon.projection`); degrees are never used as metres.

Nothing here prints or logs a coordinate, a subject id or a timestamp: errors and
warnings give counts and 1-based row numbers only (row 1 is the first record after
the header).
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import json
import math
import re
import warnings
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyproj
from numpy.typing import NDArray

from geokanon._progress import Progress, silent
from geokanon.errors import InputError, PrivacyRiskWarning
from geokanon.io._names import closest_name
from geokanon.io.postgis import DatabaseInput, is_database_url, open_query, wkb_hex_points
from geokanon.neighbours import (
    count_distinct,
    factorize_subject_ids,
    in_sorted,
    integer_codes,
    maybe_repeated,
    pair_keys,
)
from geokanon.projection import (
    UTM_MAX_SCALE_ERROR,
    Projection,
    choose_metric_crs,
    crs_to_string,
    frame_crs,
    is_geographic,
    is_metric,
    parse_crs,
    transformer,
)

__all__ = [
    "DatabaseInput",
    "PointTable",
    "ReadOptions",
    "SourceFrame",
    "check_r_max",
    "identical_rows",
    "read_points",
    "read_source_frame",
    "same_rows",
    "sha256_file",
    "table_from_frame",
]

_LON_NAMES = ("lon", "longitude", "lng", "long")
_LAT_NAMES = ("lat", "latitude")
_LONLAT_NAMES = {*_LON_NAMES, *_LAT_NAMES}
_GEOM_A, _GEOM_B = "__geometry_x__", "__geometry_y__"
#: Coordinates spanning fewer units than this under a metric CRS look like kilometres.
MIN_METRIC_SPAN = 100.0
#: ... when they are also smaller than this (40,000 km is the Earth's circumference).
MAX_KM_MAGNITUDE = 40_000.0
#: Margin (degrees) around a CRS's area of use within which points are accepted silently.
AREA_MARGIN_DEG = 0.5
CSV_SUFFIXES = (".csv", ".txt", ".tsv", ".csv.gz", ".tsv.gz", ".txt.gz")
PARQUET_SUFFIXES = (".parquet", ".pq", ".geoparquet")
VECTOR_SUFFIXES = (".gpkg", ".geojson", ".json", ".shp", ".fgb")


@dataclass(frozen=True, eq=False)
class PointTable:
    """Records as arrays, ready for the stages.

    Attributes
    ----------
    x, y
        Coordinates in metres (float64) of :attr:`working_crs`.
    subjects
        Dense int64 subject codes, or ``None`` (every record its own subject). Ids
        are compared normalised (NFKC, case folded, stripped): ``"P001"``,
        ``" p001"`` and ``P001`` in fullwidth letters are one subject.
    times
        Seconds since 1970-01-01 UTC (float64), or ``None``.
    time_zone
        The zone (``--timezone``) the times were read in when they were written as
        wall-clock readings without a UTC offset; ``None`` otherwise.
    unit_codes, unit_names
        Administrative unit code per record and the name of each code; a
        single unit named ``all`` when no unit was given.
    attributes
        Other columns, in input order, for ``--keep`` and the bias check.
    crs
        CRS of the input coordinates (``"EPSG:4326"`` for lon/lat), or ``None`` for
        an unnamed metric CRS.
    source_sha256
        Checksum of the input file (or of the frame's bytes).
    working_crs
        Metric CRS of :attr:`x`/:attr:`y`: the input CRS when it is projected in
        metres, the chosen local CRS (e.g. ``"EPSG:32650"``) for lon/lat input.
    output_crs
        CRS published coordinates are written in (default: :attr:`crs`).
    coord_scale
        Factor applied to the input coordinates (``--coord-scale``; 1.0 when none).
    n_unassigned
        Records in no unit polygon (put in the ``unassigned`` unit).
    notes
        The warnings issued while reading, for the release notes (no values in them).
    duplicates
        Records of the input that repeat an earlier record in every column (exact
        copies: coordinates, subject, time, unit and every other column).
    duplicates_dropped
        Whether those copies were removed on reading (``drop_duplicates``); the
        table then holds the first record of each set of copies, in input order.
    excluded
        ``(unit, records)`` for each unit left out with ``exclude_units`` (its
        records were dropped on reading).
    clipped
        Records outside the study area dropped on reading (``clip``).
    clipped_rows, excluded_rows
        Their 0-based rows in the input, and those of the excluded units (custodian
        only: kept in the audit so the verifier drops the same rows; never published).
    unit_merges
        ``(source unit, merged unit)`` for every unit merged into a neighbour with
        ``merge_small_units``; :attr:`unit_names` are the merged units.
    merge_threshold
        The ``merge_small_units`` threshold N, or ``None``.
    units_left_small
        Units still below N after merging because they had no neighbour.
    subject_ids
        Each subject code's id as read (the integer, or the normalised text), or
        ``None``; :attr:`subject_keys` hashes them when it is first asked for.
    subject_ids_merged
        Distinct subject ids merged into another because they differ from it only by
        case, surrounding whitespace or Unicode form (distinct ids minus distinct
        subjects; 0 without a subject column or with numeric ids).
    input_xy
        The input's own coordinates in :attr:`crs` (after :attr:`coord_scale`), one pair
        per record, when :attr:`x`/:attr:`y` are not those (lon/lat input, or a
        ``working_crs``); ``None`` otherwise. The verifier compares the published pairs
        with them exactly (custodian only: never published).

    Examples
    --------
    >>> t = table_from_frame(pd.DataFrame({"lon": [116.30, 116.31], "lat": [39.9, 39.91]}))
    >>> t.crs, t.working_crs, len(t)
    ('EPSG:4326', 'EPSG:32650', 2)
    >>> lon, lat = t.to_output(t.x, t.y)
    >>> [round(v, 6) for v in lon.tolist()]
    [116.3, 116.31]
    """

    x: NDArray[np.float64]
    y: NDArray[np.float64]
    subjects: NDArray[np.int64] | None
    times: NDArray[np.float64] | None
    unit_codes: NDArray[np.int64]
    unit_names: NDArray[np.object_]
    attributes: pd.DataFrame = field(repr=False)
    crs: str | None = None
    source_sha256: str = ""
    working_crs: str | None = None
    output_crs: str | None = None
    coord_scale: float = 1.0
    n_unassigned: int = 0
    notes: tuple[str, ...] = ()
    subject_ids: NDArray[Any] | None = field(default=None, repr=False)
    duplicates: int = 0
    duplicates_dropped: bool = False
    excluded: tuple[tuple[str, int], ...] = ()
    clipped: int = 0
    clipped_rows: tuple[int, ...] = field(default=(), repr=False)
    excluded_rows: tuple[int, ...] = field(default=(), repr=False)
    unit_merges: tuple[tuple[str, str], ...] = ()
    merge_threshold: int | None = None
    units_left_small: tuple[str, ...] = ()
    subject_ids_merged: int = 0
    time_zone: str | None = None
    input_xy: tuple[NDArray[np.float64], NDArray[np.float64]] | None = field(
        default=None, repr=False
    )

    def __len__(self) -> int:
        return int(self.x.size)

    @functools.cached_property
    def subject_keys(self) -> NDArray[np.uint64] | None:
        """A 64-bit hash of each record's normalised subject id (keys the mask noise), or
        ``None`` without subject ids.

        Made on first use (a release's tie-breaks and masks need it, a classification
        does not: 0.17 s at 1e7 records), from the distinct ids, so every spelling of an
        id has the same key and adding subjects shifts no one's.
        """
        if self.subjects is None or self.subject_ids is None:
            return None
        from geokanon.mask import text_hashes

        if self.subjects.size and int(self.subjects.max()) >= self.subject_ids.size:
            raise ValueError(
                f"subject codes reach {int(self.subjects.max())} but subject_ids holds "
                f"{self.subject_ids.size} ids: replace subjects and subject_ids together"
            )
        return text_hashes(self.subject_ids)[self.subjects]

    @property
    def n_subjects(self) -> int:
        """Number of distinct subjects."""
        if self.subjects is None:
            return len(self)
        return count_distinct(self.subjects)

    @property
    def projection(self) -> Projection:
        """Recipe from the working metres back to the output CRS."""
        return Projection(source_crs=self.output_crs or self.crs, working_crs=self.working_crs)

    def to_output(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Working-CRS metres (e.g. group representatives) in :attr:`output_crs`."""
        return self.projection.from_metric(x, y)


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How to read records: column roles, CRSs, units, times. Validated on construction.

    Parameters
    ----------
    x, y
        Projected coordinate columns (default ``x``/``y`` when present).
    lon, lat
        Longitude/latitude columns in degrees (default ``lon``/``lat`` and common
        spellings, used when there is no ``x``/``y``).
    subject, time, unit
        Subject id, time and unit id columns.
    crs
        CRS of the input coordinates when the file does not name one.
    units, unit_id
        Polygon file of units and its id column (spatial join).
    unit_grid_m
        Side of square grid cells (metres) used as units.
    timezone
        IANA time zone of naive timestamps, e.g. ``Europe/Amsterdam``.
    coord_scale
        Multiply projected coordinates by this to get the CRS's units (``1000`` for km).
    chunksize
        Records per chunk when reading CSV and Parquet.
    working_crs
        Metric CRS for distance work instead of the automatic choice (lon/lat input).
    output_crs
        CRS of published coordinates (default: the input's).
    study_area
        Polygon file of the declared study area: records outside it are refused.
    drop_duplicates
        Remove the records that repeat an earlier record in every column (exact
        copies) before anything else; the first of each set of copies stays.
    clip
        With ``study_area``: drop the records outside it and count them, instead of
        refusing them.
    exclude_units
        Unit ids whose records are dropped (counted, and named in the release).
    merge_small_units
        N >= 2: a unit with fewer than N distinct subjects joins a neighbour (by polygon
        adjacency with ``units``, else the nearest unit), until every unit holds N.

    Examples
    --------
    >>> ReadOptions(lon="lng", lat="lat", timezone="Europe/Amsterdam").lon
    'lng'
    >>> ReadOptions(unit="gm_code", unit_grid_m=5000)
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: give one way to form units: --unit COL, --units FILE with \
--unit-id COL, or --unit-grid M (got --unit, --unit-grid)
    """

    x: str | None = None
    y: str | None = None
    lon: str | None = None
    lat: str | None = None
    subject: str | None = None
    time: str | None = None
    unit: str | None = None
    crs: str | None = None
    units: str | Path | None = None
    unit_id: str | None = None
    unit_grid_m: float | None = None
    timezone: str | None = None
    coord_scale: float | None = None
    chunksize: int = 500_000
    working_crs: str | None = None
    output_crs: str | None = None
    study_area: str | Path | None = None
    drop_duplicates: bool = False
    clip: bool = False
    exclude_units: tuple[str, ...] | None = None
    merge_small_units: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.exclude_units, str):
            ids = tuple(u.strip() for u in self.exclude_units.split(",") if u.strip())
            object.__setattr__(self, "exclude_units", ids or None)
        elif self.exclude_units is not None:
            ids = tuple(str(u).strip() for u in self.exclude_units if str(u).strip())
            object.__setattr__(self, "exclude_units", ids or None)
        has_units = self.unit is not None or self.units is not None or self.unit_grid_m is not None
        if self.exclude_units is not None and not has_units:
            raise InputError(
                "--exclude-units needs units to name: give --unit COL, --units FILE with "
                "--unit-id COL, or --unit-grid M"
            )
        if self.merge_small_units is not None:
            n = self.merge_small_units
            if isinstance(n, bool) or not isinstance(n, int) or n < 2:
                raise InputError(f"--merge-small-units must be an integer >= 2, got {n!r}")
            if not has_units:
                raise InputError(
                    "--merge-small-units needs units to merge: give --unit COL, --units FILE "
                    "with --unit-id COL, or --unit-grid M"
                )
        if not isinstance(self.clip, bool):
            raise InputError(f"clip must be true or false, got {self.clip!r}")
        if self.clip and self.study_area is None:
            raise InputError(
                "--clip needs --study-area FILE: it drops the records outside the study area"
            )
        for one, other, f1, f2 in (
            (self.x, self.y, "--x", "--y"),
            (self.lon, self.lat, "--lon", "--lat"),
        ):
            if (one is None) != (other is None):
                given, need = (f1, f2) if one is not None else (f2, f1)
                raise InputError(f"{given} needs {need} too: name both coordinate columns")
        if self.x is not None and self.lon is not None:
            raise InputError("give --x/--y (projected metres) or --lon/--lat (degrees), not both")
        ways = [
            flag
            for flag, v in (
                ("--unit", self.unit),
                ("--units", self.units),
                ("--unit-grid", self.unit_grid_m),
            )
            if v is not None
        ]
        if len(ways) > 1:
            raise InputError(
                "give one way to form units: --unit COL, --units FILE with --unit-id COL, "
                f"or --unit-grid M (got {', '.join(ways)})"
            )
        if (self.units is None) != (self.unit_id is None):
            raise InputError(
                "--units FILE and --unit-id COL go together: name the polygon file and the "
                "column of unit ids in it"
            )
        if self.unit_grid_m is not None and not (
            isinstance(self.unit_grid_m, int | float)
            and not isinstance(self.unit_grid_m, bool)
            and math.isfinite(self.unit_grid_m)
            and self.unit_grid_m > 0
        ):
            raise InputError(
                f"--unit-grid must be a finite cell size > 0 in metres, got {self.unit_grid_m}"
            )
        if self.coord_scale is not None and not (
            isinstance(self.coord_scale, int | float)
            and not isinstance(self.coord_scale, bool)
            and math.isfinite(self.coord_scale)
            and self.coord_scale > 0
        ):
            raise InputError(
                f"--coord-scale must be a finite factor > 0 (1000 turns km into m), "
                f"got {self.coord_scale}"
            )
        if self.coord_scale is not None and self.lon is not None:
            raise InputError(
                "--coord-scale applies to projected x/y only; longitude/latitude are "
                "degrees and are projected to metres automatically"
            )
        if not isinstance(self.drop_duplicates, bool):
            raise InputError(f"drop_duplicates must be true or false, got {self.drop_duplicates!r}")
        if not (isinstance(self.chunksize, int) and self.chunksize >= 1):
            raise InputError(f"chunksize must be an integer >= 1, got {self.chunksize}")
        if self.timezone is not None:
            _zone(self.timezone)
        for flag, value in (
            ("--crs", self.crs),
            ("--working-crs", self.working_crs),
            ("--output-crs", self.output_crs),
        ):
            if value is not None:
                parse_crs(value, flag=flag)
        if self.working_crs is not None and not is_metric(parse_crs(self.working_crs)):
            raise InputError(
                f"--working-crs {self.working_crs!r} is not a projected CRS in metres; give "
                "one such as a UTM zone (EPSG:326xx)"
            )


def _zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise InputError(
            f"--timezone {name!r} is not a time zone name; give an IANA name such as "
            "Europe/Amsterdam, Asia/Shanghai or UTC"
        ) from None


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    return _sha256_and_lines(path)[0]


def _sha256_and_lines(path: str | Path) -> tuple[str, int]:
    """Hex sha256 of a file's bytes and its number of lines (a last line without a newline
    counts), in one pass of 1 MiB blocks."""
    h = hashlib.sha256()
    lines = 0
    last = b"\n"
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
    return h.hexdigest(), lines + (last != b"\n")


def _hash_aside(p: Path, kind: str) -> Callable[[], str]:
    """Start the sha256 of ``p`` on a thread; the returned call waits for it (an unreadable
    file raises there as :func:`read_points` would)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="geokanon-sha256")
    future = pool.submit(_sha256_and_lines, p)
    pool.shutdown(wait=False)

    def checksum() -> str:
        try:
            return future.result()[0]
        except OSError as exc:
            raise _read_error(p.name, kind, exc) from None

    return checksum


def _missing_column(name: str, columns: list[str], role: str, flag: str) -> InputError:
    close = closest_name(name, columns)
    hint = f"; did you mean {close!r}?" if close else "."
    return InputError(
        f"{role} column {name!r} is not in the input{hint} Give the right name with {flag} "
        f"(the input has {len(columns)} columns: {', '.join(map(repr, columns[:12]))})"
    )


def _row_list(mask: NDArray[np.bool_], limit: int = 10) -> str:
    idx = np.flatnonzero(mask)
    rows = (idx[:limit] + 1).tolist()
    more = " ..." if idx.size > limit else ""
    return ", ".join(map(str, rows)) + more


# --------------------------------------------------------------------------- sources


@dataclass
class _Source:
    """An opened input: its columns, the CRS its metadata names, and a chunk iterator."""

    name: str
    columns: list[str]
    crs: str | None
    geometry: bool
    chunks: Iterator[pd.DataFrame]
    # the records the file holds, for the count of records read only: Parquet says; a
    # plain CSV's lines less the header (more than its records if values hold line breaks)
    rows: int | None = None
    # a stream's checksum, known once its chunks are read (a database input)
    checksum: Callable[[], str] | None = None


def _suffix(p: Path) -> str:
    name = p.name.lower()
    for s in (*CSV_SUFFIXES, *PARQUET_SUFFIXES, *VECTOR_SUFFIXES):
        if name.endswith(s):
            return s
    return p.suffix.lower()


def _read_error(name: str, kind: str, exc: BaseException) -> InputError:
    if isinstance(exc, UnicodeDecodeError):
        return InputError(
            f"input {name!r} is not UTF-8 text (it holds a byte that starts no UTF-8 "
            "character: a file saved as Latin-1 or Windows-1252, as spreadsheets often do); "
            'save it as UTF-8 (a spreadsheet\'s "CSV UTF-8", or iconv -f latin1 -t utf-8)'
        )
    detail = type(exc).__name__
    m = re.search(r"line (\d+)", str(exc))
    if isinstance(exc, pd.errors.ParserError) and m:
        detail = (
            f"the rows break near line {m.group(1)}: a row has more fields than the header "
            "(decimal commas, or a separator inside an unquoted value?)"
        )
    quote = re.search(r"EOF inside string starting at row (\d+)", str(exc))
    if isinstance(exc, pd.errors.ParserError) and quote:
        row = int(quote.group(1))  # the parser counts the header as row 0
        detail = (
            f"the quote opened in row {row}, line {row + 1} of the file, is never closed, so "
            "every later line is read as one value: close that quote or remove it"
        )
    return InputError(
        f"input {name!r} could not be read as {kind} ({detail}); check that the file is "
        "complete and of the type its name says"
    )


def _sniff_csv(p: Path, suffix: str) -> str:
    opener: Any = gzip.open if suffix.endswith(".gz") else open
    try:
        with opener(p, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise _read_error(p.name, "CSV", exc) from None
    if not head.strip():
        raise InputError(f"input {p.name!r} is empty; nothing to do")
    if b"\x00" in head:
        raise InputError(
            f"input {p.name!r} is not a text file although its name says CSV; give a CSV, "
            "Parquet, GeoPackage, GeoJSON or Shapefile with the matching file name"
        )
    first = head.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    if suffix.startswith(".tsv"):
        return "\t"
    counts = {sep: first.count(sep) for sep in (",", ";", "\t", "|")}
    if counts[","] == 0 and max(counts.values()) > 0:
        return max(counts, key=lambda s: counts[s])
    return ","


def _open_csv(p: Path, suffix: str, opts: ReadOptions) -> _Source:
    sep = _sniff_csv(p, suffix)
    try:
        header = pd.read_csv(p, sep=sep, nrows=0)
    except pd.errors.EmptyDataError:
        raise InputError(f"input {p.name!r} is empty; nothing to do") from None
    except (OSError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        raise _read_error(p.name, "CSV", exc) from None
    columns = [str(c) for c in header.columns]
    as_text = {c: "string" for c in (opts.subject, opts.unit, opts.time) if c in columns}

    def chunks() -> Iterator[pd.DataFrame]:
        reader = pd.read_csv(p, sep=sep, chunksize=opts.chunksize, dtype=as_text, index_col=False)
        with reader:
            yield from reader

    return _Source(name=p.name, columns=columns, crs=None, geometry=False, chunks=chunks())


def _open_parquet(p: Path, opts: ReadOptions) -> _Source:
    import pyarrow.parquet as pq
    import shapely

    try:
        pf = pq.ParquetFile(p)
        meta = pf.schema_arrow.metadata or {}
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError on non-Parquet bytes
        raise _read_error(p.name, "Parquet", exc) from None
    columns = [str(c) for c in pf.schema_arrow.names]
    crs: str | None = None
    geom_col: str | None = None
    encoding = "WKB"
    if b"geo" in meta:
        try:
            geo = json.loads(meta[b"geo"])
            geom_col = str(geo["primary_column"])
            col_meta = geo["columns"][geom_col]
            encoding = str(col_meta.get("encoding", "WKB"))
        except (ValueError, KeyError, TypeError):
            raise InputError(
                f"input {p.name!r} has broken GeoParquet metadata; rewrite it with a "
                "GeoParquet writer (e.g. geopandas)"
            ) from None
        if "crs" not in col_meta:
            crs = "OGC:CRS84"
        elif col_meta["crs"] is not None:
            try:
                crs = crs_to_string(pyproj.CRS.from_json_dict(col_meta["crs"]))
            except (pyproj.exceptions.CRSError, TypeError, ValueError):
                raise InputError(
                    f"the CRS in {p.name!r}'s GeoParquet metadata is not readable; "
                    "give it with --crs"
                ) from None
        if encoding.upper() not in ("WKB", "POINT"):
            raise InputError(
                f"input {p.name!r} stores {encoding!r} geometry; geokanon reads points (WKB or "
                "point encoding)"
            )
        columns = [c for c in columns if c != geom_col]
    unit = opts.unit
    if unit in columns and _is_text(pf.schema_arrow.field(unit).type):
        # the unit column read as its dictionary: each batch's units as codes into their
        # distinct texts (a categorical), numbered once (_unit_codes), not hashed per row
        pf = pq.ParquetFile(p, read_dictionary=[unit])

    def chunks() -> Iterator[pd.DataFrame]:
        for batch in pf.iter_batches(batch_size=opts.chunksize):
            frame = batch.to_pandas()
            if geom_col is not None:
                raw = frame.pop(geom_col)
                if encoding.upper() == "WKB":
                    try:
                        geoms = shapely.from_wkb(raw.to_numpy(dtype=object), on_invalid="raise")
                    except Exception:
                        raise InputError(
                            f"input {p.name!r} holds unreadable geometry (broken WKB)"
                        ) from None
                    frame[_GEOM_A], frame[_GEOM_B] = _point_xy(geoms, p.name)
                else:
                    frame[_GEOM_A] = [v["x"] if v is not None else np.nan for v in raw]
                    frame[_GEOM_B] = [v["y"] if v is not None else np.nan for v in raw]
            yield frame

    return _Source(
        name=p.name, columns=columns, crs=crs, geometry=geom_col is not None, chunks=chunks(),
        rows=int(pf.metadata.num_rows),
    )  # fmt: skip


def _point_xy(
    geoms: NDArray[np.object_], name: str, offset: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    import shapely

    missing = np.asarray(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    types = shapely.get_type_id(geoms)
    not_point = ~missing & (types != 0)
    if not_point.any():
        rows = ", ".join(str(offset + i + 1) for i in np.flatnonzero(not_point)[:10])
        raise InputError(
            f"{int(not_point.sum())} features of {name!r} are not points (rows {rows}"
            f"{' ...' if not_point.sum() > 10 else ''}); geokanon reads point records: give a "
            "file of points, or coordinate columns with --x/--y or --lon/--lat"
        )
    a = np.full(geoms.size, np.nan)
    b = np.full(geoms.size, np.nan)
    ok = ~missing
    a[ok] = shapely.get_x(geoms[ok])
    b[ok] = shapely.get_y(geoms[ok])
    return a, b


def _open_vector(p: Path) -> _Source:
    import pyogrio

    try:
        layers = pyogrio.list_layers(p)
        frame = pyogrio.read_dataframe(p)
    except Exception as exc:  # DataSourceError / DataLayerError (RuntimeError subclasses)
        raise _read_error(p.name, p.suffix[1:], exc) from None
    if len(layers) > 1:
        warnings.warn(
            f"{p.name!r} has {len(layers)} layers; the first one is read",
            UserWarning,
            stacklevel=3,
        )
    return _frame_source(p.name, frame, frame_crs(frame))


def _open_database(src: DatabaseInput, opts: ReadOptions, progress: Progress) -> _Source:
    """A table or query of a PostgreSQL database, streamed in chunks (geokanon.io.postgis)."""
    stream = open_query(
        src, chunksize=opts.chunksize, text_columns=(opts.subject, opts.unit, opts.time),
        progress=progress,
    )  # fmt: skip
    return _Source(
        name=stream.name, columns=stream.columns, crs=stream.crs,
        geometry=stream.geometry is not None, chunks=_open_database_text(stream),
        rows=stream.rows, checksum=stream.sha256,
    )  # fmt: skip


def _database_input(
    path: str | Path | DatabaseInput, table: str | None, query: str | None
) -> DatabaseInput | None:
    """The database input ``path`` names (a URL with ``table``/``query``), else ``None``."""
    if isinstance(path, DatabaseInput):
        if table is not None or query is not None:
            if (table, query) != (path.table, path.query):
                raise InputError("--table/--query differ from the database input's own")
        return path
    if is_database_url(str(path)):
        return DatabaseInput(str(path), table=table, query=query)
    if table is not None or query is not None:
        flag = "--table" if table is not None else "--query"
        raise InputError(
            f"{flag} reads from a database: give INPUT as postgresql://[user@]host[:port]/db "
            "(a file input takes no --table or --query)"
        )
    return None


def _frame_source(name: str, frame: pd.DataFrame, crs: str | None) -> _Source:
    names = [str(c) for c in frame.columns]
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise InputError(
            f"column names repeat in the input ({', '.join(map(repr, repeated[:5]))}); give "
            "every column its own name"
        )
    geom_name = getattr(frame, "_geometry_column_name", None)
    if geom_name is None or geom_name not in frame.columns:
        if names != list(frame.columns):
            frame = frame.set_axis(names, axis=1)
        return _Source(name, names, crs, False, iter([frame]))
    geoms = np.asarray(frame[geom_name].values, dtype=object)
    plain = pd.DataFrame(frame.drop(columns=[geom_name]))
    plain[_GEOM_A], plain[_GEOM_B] = _point_xy(geoms, name)
    columns = [str(c) for c in plain.columns if c not in (_GEOM_A, _GEOM_B)]
    return _Source(name, columns, crs, True, iter([plain]))


# --------------------------------------------------------------------------- roles


@dataclass(frozen=True)
class _Roles:
    a: str
    b: str
    geographic: bool
    crs: str | None  # CRS of the coordinates as given (after coord_scale)
    label_a: str
    label_b: str


def _lonlat_columns(columns: list[str]) -> tuple[str, str] | None:
    low = {c.lower().strip(): c for c in columns}
    lon = next((low[n] for n in _LON_NAMES if n in low), None)
    lat = next((low[n] for n in _LAT_NAMES if n in low), None)
    return (lon, lat) if lon is not None and lat is not None else None


def _resolve_roles(src: _Source, opts: ReadOptions, units_crs: str | None) -> _Roles:
    cols = src.columns
    file_crs = src.crs
    given = opts.crs
    if given is not None and file_crs is not None:
        if not parse_crs(given).equals(parse_crs(file_crs), ignore_axis_order=True):
            raise InputError(
                f"{src.name!r} names its CRS ({file_crs}) and --crs says {given}; drop --crs "
                "or fix the file's metadata"
            )
    crs_text = file_crs or (crs_to_string(parse_crs(given)) if given is not None else None)
    # columns the user named must exist
    for opt, role, flag in (
        (opts.x, "x", "--x"),
        (opts.y, "y", "--y"),
        (opts.lon, "longitude", "--lon"),
        (opts.lat, "latitude", "--lat"),
        (opts.subject, "subject", "--subject"),
        (opts.time, "time", "--time"),
        (opts.unit, "unit", "--unit"),
    ):
        if opt is not None and opt not in cols:
            raise _missing_column(opt, cols, role, flag)
    geographic_crs = crs_text is not None and is_geographic(parse_crs(crs_text))
    if opts.lon is not None and opts.lat is not None:
        if crs_text is not None and not geographic_crs:
            raise InputError(
                f"--lon/--lat name degrees but the CRS is {crs_text}, a projected CRS: use "
                "--x/--y for projected coordinates, or give a geographic CRS (e.g. EPSG:4326)"
            )
        return _Roles(opts.lon, opts.lat, True, crs_text or "EPSG:4326", opts.lon, opts.lat)
    if opts.x is not None and opts.y is not None:
        if crs_text is None and units_crs is not None:
            crs_text = _adopt_units_crs(units_crs)
            geographic_crs = is_geographic(parse_crs(crs_text))
        return _Roles(opts.x, opts.y, geographic_crs, crs_text, opts.x, opts.y)
    if src.geometry:
        if crs_text is None and units_crs is not None:
            crs_text = _adopt_units_crs(units_crs)
        geo = crs_text is not None and is_geographic(parse_crs(crs_text))
        return _Roles(_GEOM_A, _GEOM_B, geo, crs_text, "geometry x", "geometry y")
    if "x" in cols and "y" in cols:
        if crs_text is None and units_crs is not None:
            crs_text = _adopt_units_crs(units_crs)
        return _Roles("x", "y", geographic_crs, crs_text, "x", "y")
    found = _lonlat_columns(cols)
    if found is not None:
        if crs_text is not None and not geographic_crs:
            raise InputError(
                f"the input has lon/lat columns ({found[0]!r}, {found[1]!r}) and no x/y, but "
                f"the CRS is {crs_text}, a projected CRS: drop --crs (lon/lat are taken as "
                "EPSG:4326) or name the projected columns with --x/--y"
            )
        return _Roles(found[0], found[1], True, crs_text or "EPSG:4326", found[0], found[1])
    if "x" in cols or "y" in cols:
        raise _missing_column("x" if "x" not in cols else "y", cols, "coordinate", "--x/--y")
    err = _missing_column("x", cols, "x", "--x/--y (projected) or --lon/--lat (degrees)")
    raise InputError(
        str(err).replace("is not in the input", "is not in the input, nor are lon/lat columns")
    )


def _adopt_units_crs(units_crs: str) -> str:
    warnings.warn(
        f"no CRS given for the points: taken as the unit polygon file's CRS, {units_crs} "
        "(name it with --crs)",
        UserWarning,
        stacklevel=4,
    )
    return units_crs


# --------------------------------------------------------------------------- columns


def _numeric(
    raw: pd.Series, label: str, offset: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.bool_], bool]:
    """Float values, the mask of non-numeric text, and whether it looks like decimal commas."""
    if pd.api.types.is_bool_dtype(raw.dtype):
        vals = np.full(len(raw), np.nan)
        return vals, np.asarray(raw.notna()), False
    if pd.api.types.is_numeric_dtype(raw.dtype):
        vals = raw.to_numpy(dtype=np.float64, na_value=np.nan)
        return vals, np.zeros(len(raw), dtype=bool), False
    num = pd.to_numeric(raw, errors="coerce")
    vals = np.asarray(num.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    bad_text = np.asarray(raw.notna()) & np.isnan(vals)
    comma = False
    if bad_text.any():
        sample = raw[bad_text].astype(str)
        comma = bool(sample.str.fullmatch(r"\s*-?\d+,\d+\s*").any())
    return vals, bad_text, comma


@dataclass
class _Collected:
    a: list[NDArray[np.float64]] = field(default_factory=list)
    b: list[NDArray[np.float64]] = field(default_factory=list)
    bad_a: list[NDArray[np.bool_]] = field(default_factory=list)
    bad_b: list[NDArray[np.bool_]] = field(default_factory=list)
    comma_a: bool = False
    comma_b: bool = False
    subject: list[pd.Series] = field(default_factory=list)
    time: list[pd.Series] = field(default_factory=list)
    unit: list[pd.Series] = field(default_factory=list)
    attrs: list[pd.DataFrame] = field(default_factory=list)
    n: int = 0


def _collect(
    src: _Source, roles: _Roles, opts: ReadOptions, kind: str, progress: Progress = silent
) -> _Collected:
    out = _Collected()
    used = {roles.a, roles.b, opts.subject, opts.time, opts.unit, _GEOM_A, _GEOM_B}
    try:
        with warnings.catch_warnings():
            # a row with more fields than the header would be cut silently: refuse it
            warnings.simplefilter("error", pd.errors.ParserWarning)
            _collect_chunks(src, roles, opts, out, used, progress)
    except InputError:
        raise
    except pd.errors.ParserWarning:
        raise InputError(
            f"input {src.name!r} has rows with more fields than the header (decimal commas, "
            "or a separator inside an unquoted value?); quote such values or write decimals "
            "with a point"
        ) from None
    except pd.errors.EmptyDataError:
        raise InputError(f"input {src.name!r} is empty; nothing to do") from None
    except (OSError, ValueError, UnicodeDecodeError, csv.Error, OverflowError) as exc:
        raise _read_error(src.name, kind, exc) from None
    return out


def _collect_chunks(
    src: _Source,
    roles: _Roles,
    opts: ReadOptions,
    out: _Collected,
    used: set[str | None],
    progress: Progress = silent,
) -> None:
    progress("rows", done=0, total=src.rows)
    for chunk in src.chunks:
        if len(chunk) == 0:
            continue
        a, bad_a, ca = _numeric(chunk[roles.a], roles.label_a)
        b, bad_b, cb = _numeric(chunk[roles.b], roles.label_b)
        out.a.append(a)
        out.b.append(b)
        out.bad_a.append(bad_a)
        out.bad_b.append(bad_b)
        out.comma_a |= ca
        out.comma_b |= cb
        for role, store in (
            (opts.subject, out.subject),
            (opts.time, out.time),
            (opts.unit, out.unit),
        ):
            if role is not None:
                store.append(chunk[role].reset_index(drop=True))
        attrs = chunk[[c for c in chunk.columns if c not in used]]
        out.attrs.append(attrs.reset_index(drop=True))
        out.n += len(chunk)
        progress("rows", done=out.n, total=src.rows)


def _concat(parts: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _series(parts: list[pd.Series]) -> pd.Series:
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _is_text(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _unit_series(parts: list[pd.Series]) -> pd.Series:
    """The unit column's chunks as one column; categorical chunks (a Parquet file's
    dictionary) as one categorical over all their texts."""
    if len(parts) > 1 and all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
        from pandas.api.types import union_categoricals

        return pd.Series(union_categoricals(parts))
    return _series(parts)


def _unit_codes(raw: pd.Series) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """Unit codes and names: ``pd.factorize(raw.astype(str), sort=True)`` (the units
    present, in sorted order); a categorical column from its categories, without
    hashing a text per record (0.1 s against 0.5 s at 1e7 records of 3,000 units)."""
    if not isinstance(raw.dtype, pd.CategoricalDtype):
        codes, names = pd.factorize(raw.astype(str), sort=True)
        return np.asarray(codes, dtype=np.int64), np.asarray(names, dtype=object)
    texts = np.asarray(raw.cat.categories.astype(str), dtype=object)
    at = np.asarray(raw.cat.codes.to_numpy(), dtype=np.int64)  # no missing unit here
    present = np.flatnonzero(np.bincount(at, minlength=texts.size))
    order = np.argsort(texts[present], kind="stable")
    rank = np.full(texts.size, -1, dtype=np.int64)
    rank[present[order]] = np.arange(order.size, dtype=np.int64)
    return rank[at], texts[present[order]]


# --------------------------------------------------------------------------- validation


def _check_numbers(
    vals: NDArray[np.float64], bad_text: NDArray[np.bool_], comma: bool, label: str
) -> None:
    if bad_text.any():
        fix = "write decimals with a point, not a comma" if comma else "fix or drop these rows"
        raise InputError(
            f"column {label!r} has {int(bad_text.sum())} non-numeric values "
            f"(rows {_row_list(bad_text)}); {fix}"
        )


def _in_area(lon: NDArray[np.float64], lat: NDArray[np.float64], crs: pyproj.CRS) -> Any:
    area = crs.area_of_use
    if area is None:
        return None
    m = AREA_MARGIN_DEG
    west, south, east, north = area.west, area.south, area.east, area.north
    lat_ok = (lat >= south - m) & (lat <= north + m)
    if west <= east:
        lon_ok = (lon >= west - m) & (lon <= east + m)
    else:  # area crosses the antimeridian
        lon_ok = (lon >= west - m) | (lon <= east + m)
    return np.asarray(lat_ok & lon_ok & np.isfinite(lon) & np.isfinite(lat))


def _area_box(crs: pyproj.CRS, crs_text: str) -> tuple[float, float, float, float] | None:
    """The area of use (plus the margin) as a box in the CRS's own coordinates, if it has one."""
    area = crs.area_of_use
    if area is None or area.west > area.east or not crs.is_projected:
        return None
    m = AREA_MARGIN_DEG
    try:
        with np.errstate(all="ignore"):
            box = transformer("EPSG:4326", crs_text).transform_bounds(
                max(area.west - m, -180.0),
                max(area.south - m, -90.0),
                min(area.east + m, 180.0),
                min(area.north + m, 90.0),
                densify_pts=21,
            )
    except pyproj.exceptions.ProjError:
        return None
    if not all(math.isfinite(v) for v in box):
        return None
    return (float(box[0]), float(box[1]), float(box[2]), float(box[3]))


def _to_lonlat(
    a: NDArray[np.float64], b: NDArray[np.float64], crs: str
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    with np.errstate(all="ignore"):
        lon, lat = transformer(crs, "EPSG:4326").transform(a, b)
    return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)


def _check_area_of_use(
    a: NDArray[np.float64], b: NDArray[np.float64], crs_text: str, notes: list[str]
) -> None:
    """Refuse points outside the CRS's area of use where its metres are distorted; warn else."""
    crs = parse_crs(crs_text)
    if crs.area_of_use is None:
        return
    box = _area_box(crs, crs_text)
    if box is not None:  # fast: compare in the CRS's own units; transform only the outsiders
        xmin, ymin, xmax, ymax = box
        out = ~((a >= xmin) & (a <= xmax) & (b >= ymin) & (b <= ymax))
        if not out.any():
            return
        lon = np.full(a.size, np.nan)
        lat = np.full(a.size, np.nan)
        lon[out], lat[out] = _to_lonlat(a[out], b[out], crs_text)
    else:
        lon, lat = _to_lonlat(a, b, crs_text)
        inside = _in_area(lon, lat, crs)
        if inside is None or inside.all():
            return
        out = ~inside
    n_out, n = int(out.sum()), int(a.size)
    name = f"{crs_text} ({crs.name})"
    if n_out / n > 0.9:
        step = max(1, n // 10_000)
        sl, st = _to_lonlat(b[::step], a[::step], crs_text)
        sw = _in_area(sl, st, crs)
        if sw is not None and sw.mean() > 0.9:
            raise InputError(
                f"{n_out} of {n} records lie outside the area of use of {name}, and with x and "
                "y exchanged they would lie inside: the coordinate columns look swapped; "
                "exchange --x and --y"
            )
    idx = np.flatnonzero(out & np.isfinite(lon) & np.isfinite(lat))
    sample = idx[:: max(1, idx.size // 10_000)]
    error = math.inf
    if sample.size:
        try:
            f = pyproj.Proj(crs).get_factors(lon[sample], lat[sample])
            scales = np.concatenate([np.asarray(f.meridional_scale), np.asarray(f.parallel_scale)])
            error = float(np.max(np.abs(scales - 1.0))) if np.isfinite(scales).all() else math.inf
        except Exception:  # projections without factors: treat as unknown distortion
            error = math.inf
    if error > UTM_MAX_SCALE_ERROR:
        raise InputError(
            f"{n_out} of {n} records (rows {_row_list(out)}) lie outside the area of use of "
            f"{name}, where its metres are off by more than {100 * UTM_MAX_SCALE_ERROR:.0f}%: "
            "name the CRS the coordinates are really in with --crs, check that x and y are not "
            "swapped, or give --coord-scale if they are not in the CRS's units"
        )
    msg = (
        f"{n_out} of {n} records lie outside the area of use of {name}; distances there are "
        f"within {100 * error:.1f}% of true, so they are used, but check that --crs names the "
        "CRS the coordinates are in"
    )
    notes.append(msg)
    warnings.warn(msg, UserWarning, stacklevel=4)


def _check_projected(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    roles: _Roles,
    opts: ReadOptions,
    notes: list[str],
) -> None:
    # one pass each for the extremes (the largest magnitude and the span follow from them)
    a_lo, a_hi, b_lo, b_hi = (float(f(v)) for v in (a, b) for f in (np.min, np.max))
    if (
        roles.a.lower() in _LONLAT_NAMES
        or roles.b.lower() in _LONLAT_NAMES
        or (
            opts.coord_scale is None
            and max(-a_lo, a_hi) <= 180
            and max(-b_lo, b_hi) <= 90
            and a_hi - a_lo < 5
            and b_hi - b_lo < 5
        )
    ):
        raise InputError(
            "the coordinates look like degrees (longitude/latitude), not metres; distances "
            "are never measured in degrees: name the columns with --lon/--lat (geokanon then "
            "projects them to a local metric CRS), or project the input to a metric CRS first"
        )
    span = max(a_hi - a_lo, b_hi - b_lo)
    size = max(-a_lo, a_hi, -b_lo, b_hi)
    if opts.coord_scale is None and 0 < span < MIN_METRIC_SPAN and size < MAX_KM_MAGNITUDE:
        raise InputError(
            f"the coordinates span only {span:.3g} units, though they are taken as metres: they "
            "look like kilometres (or another unit), not metres; give --coord-scale 1000 if "
            "they are km (--coord-scale 1 if they really are metres)"
        )
    if roles.crs is None:
        msg = (
            "no CRS given: x/y are taken as metres in an unnamed projected CRS (name it with "
            "--crs; a release refuses it unless --local-metres says they are local metres)"
        )
        notes.append(msg)
        warnings.warn(msg, UserWarning, stacklevel=4)
        return
    _check_area_of_use(a, b, roles.crs, notes)


def _check_geographic(lon: NDArray[np.float64], lat: NDArray[np.float64], roles: _Roles) -> None:
    bad_lat = np.abs(lat) > 90
    if bad_lat.any():
        systematic = bad_lat.mean() > 0.5
        swapped = systematic and bool((np.abs(lon[bad_lat]) <= 90).all())
        if swapped:
            fix = "; the columns look swapped: exchange --lon and --lat"
        elif systematic and bool((np.abs(lat[bad_lat]) > 360).any()):
            fix = "; these look like projected metres: give them with --x/--y and --crs"
        else:
            fix = "; fix or drop these rows"
        raise InputError(
            f"{int(bad_lat.sum())} records have a latitude outside [-90, 90] in "
            f"{roles.label_b!r} (rows {_row_list(bad_lat)}){fix}"
        )
    bad_lon = (lon < -180) | (lon > 360)
    if bad_lon.any():
        raise InputError(
            f"{int(bad_lon.sum())} records have a longitude outside [-180, 360] in "
            f"{roles.label_a!r} (rows {_row_list(bad_lon)}); these look like projected metres: "
            "give them with --x/--y and --crs"
        )


def _subjects(
    raw: pd.Series, col: str, notes: list[str]
) -> tuple[NDArray[np.int64], NDArray[Any], int]:
    """Subject codes, each code's id (:attr:`PointTable.subject_ids`) and the number of
    ids merged by normalisation.

    Ids are compared normalised (NFKC, case folded, stripped:
    :func:`geokanon.neighbours.normalise_subject_id`): the spellings of one id are
    one subject. Only the distinct ids are looked at (cheap for millions of records).
    """
    if isinstance(raw.dtype, np.dtype) and raw.dtype.kind in "iu":
        # Integer ids: nothing to normalise (their keys hash their text without a
        # Python string per id: the same keys as for the ids' text).
        codes, values = integer_codes(raw.to_numpy())
        return codes, values, 0
    if not pd.api.types.is_numeric_dtype(raw.dtype):
        raw = raw.astype("string")
    codes, texts, merged = factorize_subject_ids(raw)
    empty_id = texts == ""
    empty = (codes < 0) | empty_id[np.maximum(codes, 0)] if empty_id.size else codes < 0
    if empty.any():
        raise InputError(
            f"{int(empty.sum())} records have an empty subject id in {col!r} "
            f"(rows {_row_list(empty)}); give every record a subject"
        )
    if merged:
        msg = (
            f"{merged} subject ids in {col!r} differ from another only by case, surrounding "
            "space or Unicode form; they are merged into one subject each (ids are compared "
            "NFKC-normalised, case folded and stripped)"
        )
        notes.append(msg)
        warnings.warn(msg, UserWarning, stacklevel=4)
    # each code's normalised text: its hash keys the subject (PointTable.subject_keys)
    return codes, texts, merged


_OFFSET = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s*(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$")
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")


def _times(
    raw: pd.Series, col: str, timezone: str | None, notes: list[str]
) -> tuple[NDArray[np.float64], str | None]:
    """The times of ``col`` in seconds since the epoch (UTC), and the zone they were read
    in where they were written as wall-clock readings without an offset (else ``None``)."""
    miss = np.asarray(raw.isna(), dtype=bool)
    if miss.any():
        raise InputError(
            f"{int(miss.sum())} records have no time in {col!r} (rows {_row_list(miss)}); "
            "fill them or drop those rows"
        )
    if pd.api.types.is_datetime64_any_dtype(raw.dtype):
        if getattr(raw.dt, "tz", None) is None:
            return _seconds(_localise(raw, col, timezone)), timezone
        if timezone is not None:
            _ignore_timezone(col, notes)
        return _seconds(raw), None
    if pd.api.types.is_bool_dtype(raw.dtype):
        raise InputError(f"times in {col!r} are true/false values; give ISO 8601 or epoch seconds")
    if pd.api.types.is_numeric_dtype(raw.dtype):
        return _epoch(raw.to_numpy(dtype=np.float64), col), None
    text = raw.astype("string").str.strip()
    num = pd.to_numeric(text, errors="coerce")
    is_num = np.asarray(num.notna(), dtype=bool)
    if is_num.all():
        return _epoch(num.to_numpy(dtype=np.float64, na_value=np.nan), col), None
    if is_num.any():
        raise InputError(
            f"{int(is_num.sum())} times in {col!r} are numbers and {int((~is_num).sum())} are "
            f"text (numbers at rows {_row_list(is_num)}); give one form throughout"
        )
    has_offset = np.asarray(text.str.contains(_OFFSET).fillna(False), dtype=bool)
    if has_offset.any() and not has_offset.all():
        raise InputError(
            f"{int((~has_offset).sum())} times in {col!r} carry no UTC offset while the others "
            f"do (rows {_row_list(~has_offset)}); give every time with an offset, or none and "
            "--timezone"
        )
    if has_offset.all():
        if timezone is not None:
            _ignore_timezone(col, notes)
    elif timezone is None:
        raise InputError(
            f"times in {col!r} carry no time zone; give --timezone (e.g. --timezone "
            "Europe/Amsterdam, or UTC), or write them with an offset such as 'Z' or '+02:00'"
        )
    try:
        if has_offset.all():
            parsed = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
        else:
            parsed = pd.to_datetime(text, format="ISO8601", errors="coerce")
    except (ValueError, OverflowError, TypeError):
        parsed = pd.Series(pd.NaT, index=text.index)
    bad = np.asarray(parsed.isna(), dtype=bool)
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} times in {col!r} are not ISO 8601 or epoch seconds "
            f"(rows {_row_list(bad)}); write them like YYYY-MM-DDThh:mm:ssZ"
        )
    if has_offset.all():
        return _seconds(parsed), None
    return _seconds(_localise(parsed, col, timezone)), timezone


def _ignore_timezone(col: str, notes: list[str]) -> None:
    msg = f"--timezone is ignored for {col!r}: its times carry their own UTC offsets"
    notes.append(msg)
    warnings.warn(msg, UserWarning, stacklevel=5)


def _localise(parsed: pd.Series, col: str, timezone: str | None) -> pd.Series:
    if timezone is None:
        raise InputError(
            f"times in {col!r} carry no time zone; give --timezone (e.g. --timezone "
            "Europe/Amsterdam, or UTC), or store them with an offset"
        )
    _zone(timezone)
    local = parsed.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
    bad = np.asarray(local.isna(), dtype=bool)
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} times in {col!r} fall in a daylight-saving change of "
            f"{timezone} (an hour that does not exist or happens twice; rows {_row_list(bad)}); "
            "give those times with an explicit UTC offset"
        )
    return local


def _seconds(parsed: pd.Series) -> NDArray[np.float64]:
    delta = parsed.dt.tz_convert("UTC") - _EPOCH
    return np.asarray(delta.dt.total_seconds().to_numpy(dtype=np.float64), dtype=np.float64)


def _epoch(vals: NDArray[np.float64], col: str) -> NDArray[np.float64]:
    bad = ~np.isfinite(vals)
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} times in {col!r} are NaN or infinite (rows {_row_list(bad)})"
        )
    if vals.size and float(np.median(np.abs(vals))) > 1e11:
        raise InputError(
            f"the numeric times in {col!r} look like milliseconds or finer, not epoch seconds; "
            "divide them by 1000 (or give ISO 8601 times)"
        )
    return np.ascontiguousarray(vals, dtype=np.float64)


def _repeated_pairs(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.int64]:
    """Indices of the records whose coordinate pair occurs more than once (and a few more).

    One 64-bit key per pair; a table of slot counts flags every repeated key and about
    1 in 5 others at most (:func:`~geokanon.neighbours.maybe_repeated`), and only the flagged
    keys are sorted to find the repeated ones (far faster than sorting or hashing 1e7
    keys). A key collision only adds candidates, which the caller compares in full.
    """
    if a.size < 2:
        return np.zeros(0, dtype=np.int64)
    key = pair_keys(a, b)
    rows = np.flatnonzero(maybe_repeated(key))
    key = key[rows]
    ordered = np.sort(key)
    again = ordered[1:][ordered[1:] == ordered[:-1]]
    if not again.size:
        return np.zeros(0, dtype=np.int64)
    return rows[in_sorted(key, again)]


def _first_of_class(parts: dict[str, Any]) -> NDArray[np.int64]:
    """Per row of ``parts`` (equal-length columns), the first row equal to it in every column."""
    frame = pd.DataFrame(parts)
    try:
        cls = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
    except TypeError:  # unhashable cells (lists from Parquet): compared as their text
        text = frame.astype(str)
        cls = text.groupby(list(text.columns), sort=False, dropna=False).ngroup().to_numpy()
    first = np.full(int(cls.max()) + 1 if cls.size else 0, -1, dtype=np.int64)
    rows = np.arange(cls.size, dtype=np.int64)
    first[cls[::-1]] = rows[::-1]  # the lowest row of each class wins
    return first[cls]


def _duplicates(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    columns: list[pd.Series],
    notes: list[str],
    *,
    drop: bool = False,
    subject: bool = False,
) -> NDArray[np.bool_] | None:
    """Records equal to an earlier one in every column (coordinates compared first).

    Returns the mask of those copies (``None`` when there are none) and warns: a
    copy counts as a record and, without a subject column, as a subject of its own,
    so copies of one person can make up a group of k on their own.
    """
    idx = _repeated_pairs(a, b)
    if not idx.size:
        return None
    parts: dict[str, Any] = {"a": a[idx], "b": b[idx]}
    for i, col in enumerate(columns):
        parts[f"c{i}"] = col.iloc[idx].reset_index(drop=True)
    first = _first_of_class(parts)
    dup = np.zeros(a.size, dtype=bool)
    dup[idx[first != np.arange(idx.size)]] = True
    if not dup.any():
        return None
    n = int(dup.sum())
    rows = f"{n} records repeat an earlier record in every column (rows {_row_list(dup)})"
    if drop:
        msg = f"{rows}; they are removed before anything else (--drop-duplicates)"
    elif subject:
        msg = (
            f"{rows}; they are kept and each counts as a record (of its subject); "
            "pass --drop-duplicates if they are copies"
        )
    else:
        msg = (
            f"{rows}; they are kept and, with no --subject column, each copy counts as a "
            "subject of its own: 5 copies of one person would make a group of 5, so a "
            "published group or class may hold fewer than k people. Name the subject "
            "column with --subject, or pass --drop-duplicates if they are copies"
        )
    notes.append(msg)
    warnings.warn(msg, PrivacyRiskWarning if not (drop or subject) else UserWarning, stacklevel=4)
    return dup


def identical_rows(table: PointTable) -> NDArray[np.int64]:
    """Classes of records identical in every column of ``table``: a row number per record.

    Records are identical when they agree in their coordinates, subject id, time,
    unit and every attribute; each record gets the (0-based) position of the first
    record identical to it, so a record unlike any other gets its own position.
    Such records are interchangeable: no row-order-free rule can tell them apart,
    so the determinism check compares decisions up to exchanging them.

    Examples
    --------
    >>> t = table_from_frame(pd.DataFrame({"x": [0.0, 500.0, 0.0, 0.0], "y": [0.0] * 4,
    ...                                    "a": [1, 1, 1, 2]}))
    >>> identical_rows(t).tolist()
    [0, 1, 0, 3]
    """
    columns: dict[str, Any] = {
        "subject": table.subject_keys if table.subject_keys is not None else table.subjects,
        "time": table.times,
        "unit": table.unit_codes,
    }
    for i, col in enumerate(table.attributes.columns):
        columns[f"a{i}"] = table.attributes[col]
    return same_rows(table.x, table.y, columns)


def same_rows(
    x: NDArray[np.float64], y: NDArray[np.float64], columns: dict[str, Any]
) -> NDArray[np.int64]:
    """As :func:`identical_rows`, over coordinates and any per-record columns (None: absent).

    Examples
    --------
    >>> same_rows(np.zeros(3), np.zeros(3), {"unit": np.array([2, 1, 2]), "t": None}).tolist()
    [0, 1, 0]
    """
    cls = np.arange(x.size, dtype=np.int64)
    idx = _repeated_pairs(x, y)
    if not idx.size:
        return cls
    parts: dict[str, Any] = {"x": x[idx] + 0.0, "y": y[idx] + 0.0}
    for name, col in columns.items():
        if col is None:
            continue
        if isinstance(col, pd.Series):
            parts[f"c_{name}"] = col.iloc[idx].reset_index(drop=True)
        else:
            parts[f"c_{name}"] = np.asarray(col)[idx]
    cls[idx] = idx[_first_of_class(parts)]
    return cls


# --------------------------------------------------------------------------- assembly


def _assemble(
    src: _Source, opts: ReadOptions, source_sha256: str, kind: str, progress: Progress = silent
) -> PointTable:
    from geokanon.io.units import check_study_area, grid_units, polygon_units, units_file_crs

    units_crs = units_file_crs(opts.units) if opts.units is not None else None
    roles = _resolve_roles(src, opts, units_crs)
    got = _collect(src, roles, opts, kind, progress)
    if src.checksum is not None:  # a stream is hashed as it is read
        source_sha256 = src.checksum()
    n_read = got.n  # the stage's count stays full from here
    progress("check coordinates", done=n_read, total=n_read)
    if got.n == 0:
        raise InputError("the input has no records (empty or header only); nothing to do")
    notes: list[str] = []
    a = _concat(got.a, np.float64)
    b = _concat(got.b, np.float64)
    _check_numbers(a, _concat(got.bad_a, bool), got.comma_a, roles.label_a)
    _check_numbers(b, _concat(got.bad_b, bool), got.comma_b, roles.label_b)
    scale = 1.0 if opts.coord_scale is None else float(opts.coord_scale)
    if scale != 1.0:
        with np.errstate(over="ignore"):
            a = a * scale
            b = b * scale
    bad = ~(np.isfinite(a) & np.isfinite(b))
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} records have missing, NaN or infinite coordinates "
            f"(rows {_row_list(bad)}); drop or fix them"
        )
    if roles.geographic:
        _check_geographic(a, b, roles)
    else:
        _check_projected(a, b, roles, opts, notes)
    source = roles.crs
    outside = None
    if opts.study_area is not None:
        outside = check_study_area(a, b, points_crs=source, path=opts.study_area, clip=opts.clip)
    # the metric working CRS
    if source is None or (is_metric(parse_crs(source)) and opts.working_crs is None):
        working = source
        x, y = a, b
    else:
        if roles.geographic:
            lon, lat = _to_lonlat(a, b, source) if source not in ("EPSG:4326",) else (a, b)
        else:
            lon, lat = _to_lonlat(a, b, source)
        if opts.working_crs is not None:
            working = crs_to_string(parse_crs(opts.working_crs))
        else:
            working = crs_to_string(choose_metric_crs(lon, lat))
        x, y = Projection(source_crs=source, working_crs=working).to_metric(a, b)
    # the input's own values, when x/y are projected ones (PointTable.input_xy)
    held = None if x is a else (a, b)
    subjects = None
    subject_ids = None
    subject_ids_merged = 0
    if opts.subject is not None:
        progress("subjects", done=n_read, total=n_read)
        subjects, subject_ids, subject_ids_merged = _subjects(
            _series(got.subject), opts.subject, notes
        )
    times = None
    time_zone = None
    if opts.time is not None:
        progress("times", done=n_read, total=n_read)
        times, time_zone = _times(_series(got.time), opts.time, opts.timezone, notes)
    n_unassigned = 0
    progress("units", done=n_read, total=n_read)
    raw_u = None
    if opts.unit is not None:
        raw_u = _unit_series(got.unit)
        miss = np.asarray(raw_u.isna(), dtype=bool)
        if miss.any():
            raise InputError(
                f"{int(miss.sum())} records have no unit in {opts.unit!r} (rows "
                f"{_row_list(miss)}); fill them or use a unit polygon file (--units)"
            )
        unit_codes, unit_names = _unit_codes(raw_u)
    elif opts.units is not None and opts.unit_id is not None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ua = polygon_units(a, b, points_crs=source, path=opts.units, unit_id=opts.unit_id)
        for w in caught:
            notes.append(str(w.message))
            warnings.warn(str(w.message), w.category, stacklevel=3)
        unit_codes, unit_names, n_unassigned = ua.codes, ua.names, ua.n_unassigned
    elif opts.unit_grid_m is not None:
        ug = grid_units(x, y, float(opts.unit_grid_m))
        unit_codes, unit_names = ug.codes, ug.names
    else:
        unit_codes = np.zeros(a.size, dtype=np.int64)
        unit_names = np.asarray(["all"], dtype=object)
    _check_unit_names(unit_codes, unit_names, opts)
    attributes = pd.concat(got.attrs, ignore_index=True) if len(got.attrs) > 1 else got.attrs[0]
    id_columns = [_series(v) for v in (got.subject, got.time) if v]
    if raw_u is not None:
        id_columns.append(raw_u)
    progress("exact copies", done=n_read, total=n_read)
    dup = _duplicates(
        a, b, [*id_columns, *(attributes[c] for c in attributes.columns)], notes,
        drop=opts.drop_duplicates, subject=opts.subject is not None,
    )  # fmt: skip
    n_duplicates = 0 if dup is None else int(dup.sum())
    drop = np.zeros(a.size, dtype=bool)
    if dup is not None and opts.drop_duplicates:
        # Exact copies leave before any stage sees them; every subject and unit keeps
        # its first record, so subject and unit codes stay as they are.
        drop |= dup
    n_clipped = 0
    clipped_rows: tuple[int, ...] = ()
    if outside is not None:
        n_clipped = int(outside.sum())
        clipped_rows = tuple(np.flatnonzero(outside).tolist())
        msg = (
            f"{n_clipped} of {a.size} records lie outside the study area "
            f"{Path(opts.study_area).name!r}; they are dropped and counted (--clip)"  # type: ignore[arg-type]
        )
        notes.append(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)
        drop |= outside
    excluded: tuple[tuple[str, int], ...] = ()
    excluded_rows: tuple[int, ...] = ()
    if opts.exclude_units is not None:
        excl = _excluded_units(opts.exclude_units, unit_names)
        gone = np.isin(unit_codes, excl)
        counts = np.bincount(unit_codes[gone & ~drop], minlength=unit_names.size)
        excluded = tuple((str(unit_names[c]), int(counts[c])) for c in excl)
        excluded_rows = tuple(np.flatnonzero(gone & ~drop).tolist())
        drop |= gone
    if drop.any():
        if drop.all():
            raise InputError(
                "no records are left after --clip, --exclude-units and --drop-duplicates; "
                "nothing to do"
            )
        keep = np.flatnonzero(~drop)
        x, y, unit_codes = x[keep], y[keep], unit_codes[keep]
        held = None if held is None else (held[0][keep], held[1][keep])
        subjects = None if subjects is None else subjects[keep]
        times = None if times is None else times[keep]
        attributes = attributes.iloc[keep].reset_index(drop=True)
        if subjects is not None:  # dense again (a subject may have left entirely)
            used_ids, subjects = np.unique(subjects, return_inverse=True)
            subjects = subjects.astype(np.int64)
            subject_ids = None if subject_ids is None else subject_ids[used_ids]
        used, unit_codes = np.unique(unit_codes, return_inverse=True)
        unit_codes = unit_codes.astype(np.int64)
        unit_names = np.asarray(unit_names[used], dtype=object)
        if n_unassigned:
            from geokanon.io.units import UNASSIGNED

            n_unassigned = int(np.count_nonzero(unit_names[unit_codes] == UNASSIGNED))
    unit_merges: tuple[tuple[str, str], ...] = ()
    left_small: tuple[str, ...] = ()
    if opts.merge_small_units is not None:
        from geokanon.io.units import merge_small_units, unit_adjacency

        adjacency = (
            unit_adjacency(opts.units, opts.unit_id)
            if opts.units is not None and opts.unit_id is not None
            else None
        )
        merge = merge_small_units(
            unit_codes, unit_names, subjects, x, y, opts.merge_small_units, adjacency=adjacency
        )
        unit_codes, unit_names = merge.codes, merge.names
        unit_merges = tuple(sorted(merge.merged.items()))
        left_small = merge.left_small
        if unit_merges:
            notes.append(
                f"{len(unit_merges)} units with fewer than {opts.merge_small_units} subjects "
                "were merged into a neighbour (--merge-small-units): "
                + ", ".join(f"{a} -> {b}" for a, b in unit_merges[:10])
                + (" ..." if len(unit_merges) > 10 else "")
            )
    output = crs_to_string(parse_crs(opts.output_crs)) if opts.output_crs is not None else source
    if output is not None and working is None:
        raise InputError(
            "--output-crs needs the input's CRS: name it with --crs so the coordinates can be "
            "transformed"
        )
    return PointTable(
        x=np.ascontiguousarray(x, dtype=np.float64),
        y=np.ascontiguousarray(y, dtype=np.float64),
        subjects=subjects,
        subject_ids=subject_ids,
        times=times,
        time_zone=time_zone,
        unit_codes=unit_codes,
        unit_names=unit_names,
        attributes=attributes,
        crs=source,
        source_sha256=source_sha256,
        working_crs=working,
        output_crs=output,
        coord_scale=scale,
        n_unassigned=n_unassigned,
        notes=tuple(notes),
        duplicates=n_duplicates,
        duplicates_dropped=bool(opts.drop_duplicates and n_duplicates),
        excluded=excluded,
        clipped=n_clipped,
        clipped_rows=clipped_rows,
        excluded_rows=excluded_rows,
        unit_merges=unit_merges,
        merge_threshold=opts.merge_small_units,
        units_left_small=left_small,
        subject_ids_merged=subject_ids_merged,
        input_xy=held,
    )


def _check_unit_names(
    codes: NDArray[np.int64], names: NDArray[np.object_], opts: ReadOptions
) -> None:
    """Refuse unit names holding a carriage return: ``units.csv`` (written as pandas
    writes it, lines ending in ``\\n``) leaves it unquoted, so the file would not read back
    as the units it lists."""
    bad = np.fromiter(("\r" in str(n) for n in names.tolist()), dtype=bool, count=names.size)
    if not bad.any():
        return
    rows = bad[codes]
    where = f"{opts.unit!r}" if opts.unit is not None else f"{opts.unit_id!r} of {opts.units}"
    raise InputError(
        f"{int(rows.sum())} records have a unit in {where} holding a carriage return "
        f"(\\r, in {int(bad.sum())} of the names; rows {_row_list(rows)}), which units.csv cannot "
        "hold; remove it from the names in the input (usually a Windows line end left in "
        "a cell)"
    )


def _excluded_units(ids: tuple[str, ...], names: NDArray[np.object_]) -> NDArray[np.int64]:
    """Codes of the units ``--exclude-units`` names; an id that is no unit is refused."""
    index = {str(n): i for i, n in enumerate(names.tolist())}
    unknown = [u for u in ids if u not in index]
    if unknown:
        close = closest_name(unknown[0], index)
        hint = f"; did you mean {close!r}?" if close else ""
        raise InputError(
            f"--exclude-units names {len(unknown)} units that hold no record: "
            f"{', '.join(map(repr, unknown[:5]))}{hint} (the input has {len(index)} units, e.g. "
            f"{', '.join(map(repr, sorted(index)[:6]))})"
        )
    return np.asarray(sorted({index[u] for u in ids}), dtype=np.int64)


def table_from_frame(
    frame: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    subject: str | None = None,
    time: str | None = None,
    unit: str | None = None,
    crs: str | None = None,
    source_sha256: str = "",
    **options: Any,
) -> PointTable:
    """Build a :class:`PointTable` from a DataFrame (or a GeoDataFrame of points).

    Parameters
    ----------
    frame
        One row per record. A GeoDataFrame's point geometry and CRS are used when no
        coordinate columns are named.
    x, y
        Projected coordinate columns (default ``x``/``y``; lon/lat columns are used
        when there are none).
    subject, time, unit
        Optional subject id, time (ISO string or epoch seconds) and unit id columns.
    crs
        CRS of the coordinates, if known.
    source_sha256
        Checksum of the source, for the manifest.
    **options
        Any other :class:`ReadOptions` field (``lon``, ``lat``, ``units``, ``unit_id``,
        ``unit_grid_m``, ``timezone``, ``coord_scale``, ``working_crs``, ``output_crs``,
        ``study_area``).

    Returns
    -------
    PointTable

    Raises
    ------
    InputError
        Empty input, missing columns, NaN/inf or non-numeric coordinates, coordinates
        that look like degrees or kilometres under a metric CRS, coordinates outside the
        CRS's area of use, empty subject ids, bad times (see ``docs/inputs.md``).

    Examples
    --------
    >>> import pandas as pd
    >>> t = table_from_frame(pd.DataFrame({"x": [0.0, 500.0], "y": [1.0, 2.0]}))
    >>> len(t), t.unit_names.tolist()
    (2, ['all'])
    """
    opts = ReadOptions(x=x, y=y, subject=subject, time=time, unit=unit, crs=crs, **options)
    src = _frame_source("input", frame, frame_crs(frame))
    return _assemble(src, opts, source_sha256, "frame")


def read_points(
    path: str | Path | DatabaseInput,
    *,
    x: str | None = None,
    y: str | None = None,
    subject: str | None = None,
    time: str | None = None,
    unit: str | None = None,
    crs: str | None = None,
    lon: str | None = None,
    lat: str | None = None,
    units: str | Path | None = None,
    unit_id: str | None = None,
    unit_grid_m: float | None = None,
    timezone: str | None = None,
    coord_scale: float | None = None,
    chunksize: int = 500_000,
    working_crs: str | None = None,
    output_crs: str | None = None,
    study_area: str | Path | None = None,
    drop_duplicates: bool = False,
    clip: bool = False,
    exclude_units: str | tuple[str, ...] | list[str] | None = None,
    merge_small_units: int | None = None,
    progress: Progress | None = None,
    table: str | None = None,
    query: str | None = None,
) -> PointTable:
    """Read a file of point records into a :class:`PointTable` in metres.

    Parameters
    ----------
    path
        CSV (``.csv``, ``.tsv``, ``.txt``, ``.csv.gz``), Parquet or GeoParquet
        (``.parquet``), GeoPackage (``.gpkg``), GeoJSON (``.geojson``) or Shapefile
        (``.shp``); or a PostgreSQL URL ``postgresql://[user@]host[:port]/db`` (also
        ``?host=/socket/dir``) with ``table`` or ``query``, or a
        :class:`~geokanon.io.postgis.DatabaseInput`.
    x, y
        Projected coordinate columns, in the units of ``crs`` (default ``x``/``y``).
    lon, lat
        Longitude/latitude columns in degrees; projected to a local metric CRS
        (default: ``lon``/``lat`` or common spellings when there is no ``x``/``y``).
    subject, time, unit
        Subject id, time (ISO 8601 or epoch seconds) and unit id columns.
    crs
        CRS of the coordinates when the file names none (a file's own CRS wins; a
        conflicting ``crs`` is refused).
    units, unit_id
        Unit polygons and their id column: units by spatial join.
    unit_grid_m
        Square grid cells of this side (metres) as units.
    timezone
        IANA time zone of naive timestamps.
    coord_scale
        Factor turning the file's coordinates into the CRS's units (``1000`` for km).
    chunksize
        Records read at a time from CSV and Parquet.
    working_crs
        Metric CRS for distance work, instead of the automatic choice.
    output_crs
        CRS for published coordinates (default: the input's).
    study_area
        Polygon file of the declared study area; records outside it are refused.
    drop_duplicates
        Remove exact copies (records repeating an earlier record in every column)
        before anything else; :attr:`PointTable.duplicates` counts them.
    clip
        With ``study_area``: drop the records outside it and count them
        (:attr:`PointTable.clipped`) instead of refusing them.
    exclude_units
        Unit ids (a list, or one comma-separated string) whose records are dropped
        and counted (:attr:`PointTable.excluded`).
    merge_small_units
        N: merge every unit with fewer than N distinct subjects into a neighbour
        (:func:`geokanon.io.units.merge_small_units`; :attr:`PointTable.unit_merges`).
    progress
        Hears the steps: ``checksum``, ``rows`` (records read, of the file's count
        where it names one), ``check coordinates``, ``subjects``, ``times``,
        ``units``, ``exact copies`` (:mod:`geokanon._progress`); a database input
        reports ``connect`` before ``rows``.
    table, query
        With a database URL: ``SCHEMA.TABLE``, or a ``SELECT`` whose rows are the
        records. A point geometry column (its CRS from its SRID) or the usual
        coordinate columns hold the locations.

    Returns
    -------
    PointTable

    Raises
    ------
    InputError
        Unreadable, empty or unsupported file, or any problem with the records; the
        message names the rows (1-based) and the fix, never a value. For a database:
        an unreachable server, bad credentials, a missing table or a failing query
        (the URL shown without its credentials).

    Examples
    --------
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "gps.csv")
    >>> _ = open(f, "w").write("lon,lat,user\\n116.30,39.90,a\\n116.31,39.91,b\\n")
    >>> t = read_points(f, subject="user")
    >>> t.working_crs, t.n_subjects
    ('EPSG:32650', 2)
    """
    opts = ReadOptions(
        x=x, y=y, lon=lon, lat=lat, subject=subject, time=time, unit=unit, crs=crs,
        units=units, unit_id=unit_id, unit_grid_m=unit_grid_m, timezone=timezone,
        coord_scale=coord_scale, chunksize=chunksize, working_crs=working_crs,
        output_crs=output_crs, study_area=study_area, drop_duplicates=drop_duplicates,
        clip=clip, exclude_units=exclude_units,  # type: ignore[arg-type]
        merge_small_units=merge_small_units,
    )  # fmt: skip
    say = progress if progress is not None else silent
    database = _database_input(path, table, query)
    if database is not None:
        return _assemble(_open_database(database, opts, say), opts, "", "database", say)
    assert not isinstance(path, DatabaseInput)
    p = Path(path)
    if not p.exists():
        raise InputError(f"input file {str(p)!r} does not exist")
    if p.is_dir():
        raise InputError(
            f"input {str(p)!r} is a directory; give a CSV, Parquet, GeoPackage, GeoJSON or "
            "Shapefile"
        )
    suffix = _suffix(p)
    if suffix in CSV_SUFFIXES:
        src, kind = _open_csv(p, suffix, opts), "CSV"
    elif suffix in PARQUET_SUFFIXES:
        src, kind = _open_parquet(p, opts), "Parquet"
    elif suffix in VECTOR_SUFFIXES:
        src, kind = _open_vector(p), suffix[1:]
    else:
        hint = "; save it as CSV" if suffix in (".xlsx", ".xls", ".ods") else ""
        raise InputError(
            f"input {p.name!r} has an unsupported type {suffix or '(none)'!r}{hint}; give a "
            ".csv, .parquet, .gpkg, .geojson or .shp file"
        )
    say("checksum")
    if kind == "CSV" and not suffix.endswith(".gz"):
        try:
            checksum, lines = _sha256_and_lines(p)
        except OSError as exc:
            raise _read_error(p.name, kind, exc) from None
        src.rows = max(lines - 1, 0)  # for the count only: quoted line breaks make it more
        return _assemble(src, opts, checksum, kind, say)
    # The file's count of records comes from its own metadata: the checksum is taken on a
    # thread while the records are read (hashlib and Arrow both release the GIL).
    src.checksum = _hash_aside(p, kind)
    return _assemble(src, opts, "", kind, say)


@dataclass(frozen=True)
class SourceFrame:
    """A source file's records as the file holds them, for independent checks.

    Attributes
    ----------
    frame
        Every attribute column (CSV: as text, empty cells ``""``); point geometry,
        when the file has it, as two float columns named by ``geometry_xy``.
    geometry_xy
        The names of the geometry's x and y columns in ``frame``, or ``None``.
    crs
        The CRS the file's own metadata names (GeoParquet, GeoPackage, ...), or ``None``.
    sha256
        The checksum of a database input's stream (read in the same pass), or ``None``
        for a file (:func:`sha256_file`).
    """

    frame: pd.DataFrame
    geometry_xy: tuple[str, str] | None
    crs: str | None
    sha256: str | None = None


def read_source_frame(
    path: str | Path | DatabaseInput, *, table: str | None = None, query: str | None = None
) -> SourceFrame:
    """Read every record and column of a source file, in any format :func:`read_points` reads.

    No role is resolved and nothing is projected: :mod:`geokanon.verify` compares a
    release with the file's own values.

    Parameters
    ----------
    path
        CSV (``.csv``, ``.tsv``, ``.txt``, ``.csv.gz``; the separator sniffed as by
        :func:`read_points`), Parquet/GeoParquet, GeoPackage, GeoJSON or Shapefile; or a
        database (URL with ``table``/``query``, or a ``DatabaseInput``), read as text
        like a CSV, its point geometry as two float columns.
    table, query
        With a database URL, as in :func:`read_points`.

    Returns
    -------
    SourceFrame

    Raises
    ------
    InputError
        Missing, empty, unreadable or unsupported file.

    Examples
    --------
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "gps.csv.gz")
    >>> pd.DataFrame({"lon": [116.3], "lat": [39.9], "user": ["007"]}).to_csv(f, index=False)
    >>> s = read_source_frame(f)
    >>> s.frame["user"].tolist(), s.geometry_xy
    (['007'], None)
    """
    database = _database_input(path, table, query)
    if database is not None:
        stream = open_query(database, all_text=True)
        parts = list(_open_database_text(stream))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        xy = (_GEOM_A, _GEOM_B) if stream.geometry is not None else None
        return SourceFrame(frame, xy, stream.crs, stream.sha256())
    assert not isinstance(path, DatabaseInput)
    p = Path(path)
    if not p.exists():
        raise InputError(f"source file {str(p)!r} does not exist")
    if p.is_dir():
        raise InputError(f"source {str(p)!r} is a directory; give the file the release read")
    suffix = _suffix(p)
    geometry = False
    crs: str | None = None
    if suffix in CSV_SUFFIXES:
        sep = _sniff_csv(p, suffix)
        try:
            frame = pd.read_csv(
                p, sep=sep, dtype=str, keep_default_na=False, low_memory=False, index_col=False
            )
        except pd.errors.EmptyDataError:
            raise InputError(f"source {p.name!r} is empty") from None
        except (OSError, ValueError, UnicodeDecodeError, csv.Error) as exc:
            raise _read_error(p.name, "CSV", exc) from None
    elif suffix in PARQUET_SUFFIXES or suffix in VECTOR_SUFFIXES:
        if suffix in PARQUET_SUFFIXES:
            src = _open_parquet(p, ReadOptions())
        else:
            src = _open_vector(p)
        parts = list(src.chunks)
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        geometry, crs = src.geometry, src.crs
    else:
        raise InputError(
            f"source {p.name!r} has an unsupported type {suffix or '(none)'!r}; give the "
            "file the release read (.csv, .csv.gz, .parquet, .gpkg, .geojson or .shp)"
        )
    return SourceFrame(frame, (_GEOM_A, _GEOM_B) if geometry else None, crs)


def _open_database_text(stream: Any) -> Iterator[pd.DataFrame]:
    """A database stream's chunks with its point geometry as two float columns."""
    offset = 0
    for frame in stream.chunks:
        if stream.geometry is not None:
            geoms = wkb_hex_points(frame.pop(stream.geometry))
            frame[_GEOM_A], frame[_GEOM_B] = _point_xy(geoms, stream.name, offset)
        offset += len(frame)
        yield frame


def check_r_max(table: PointTable, r_max_m: float) -> None:
    """Refuse an r_max that makes no sense in metres for this table.

    Below 1 m it is read as degrees or kilometres by mistake; above 20,000 km it is
    more than half the Earth's circumference.

    Raises
    ------
    InputError
        With the likely intended value.

    Examples
    --------
    >>> t = table_from_frame(pd.DataFrame({"lon": [116.30, 116.31], "lat": [39.9, 39.91]}))
    >>> check_r_max(t, 200.0)
    >>> check_r_max(t, 0.002)
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: --r-max 0.002 is in metres of the working CRS EPSG:32650; \
0.002 km is 2 m, 0.002 degrees would be about 222 m: give r_max in metres (e.g. --r-max 2 \
for kilometres, --r-max 222 for degrees)
    """
    if not math.isfinite(r_max_m) or r_max_m <= 0:
        return  # the policy refuses these with its own message
    where = f"the working CRS {table.working_crs}" if table.working_crs else "the input's CRS"
    if r_max_m < 1.0:
        # kilometres first: the likelier slip (--r-max 0.5 for 500 m)
        km_m = float(f"{r_max_m * 1000:.6g}")
        deg_m = r_max_m * 111_195.0
        raise InputError(
            f"--r-max {r_max_m:g} is in metres of {where}; {r_max_m:g} km is {km_m:,g} m, "
            f"{r_max_m:g} degrees would be about {deg_m:,.0f} m: give r_max in metres (e.g. "
            f"--r-max {km_m:g} for kilometres, --r-max {deg_m:.0f} for degrees)"
        )
    if r_max_m > 2.0e7:
        raise InputError(
            f"--r-max {r_max_m:g} m is more than half the Earth's circumference; give r_max in "
            "metres (is it in millimetres or centimetres?)"
        )

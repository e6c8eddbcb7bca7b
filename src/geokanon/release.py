"""The release artefacts, written atomically, verified before they appear.

:func:`write_release` turns a :class:`~geokanon.disposal.CoreResult` into the
directory described in ``docs/release-format.md``:

- ``DIR/release/`` (publishable): ``records.parquet``, ``groups.parquet`` and
  ``classes.parquet`` (GeoParquet 1.1), ``records.csv``, ``units.csv``, ``release.gpkg``
  (the same as map layers with QGIS styles, :mod:`geokanon.io.gis`), ``manifest.json``,
  ``RELEASE_NOTES.md``, ``report.html`` (:mod:`geokanon.report.html`);
- ``DIR/audit/`` (custodian only): ``assignment.parquet``, ``audit.json``.

Everything is built in the private build area ``PARENT/.geokanon-build/`` beside
``DIR`` (:mod:`geokanon._outdir`), fsynced, checked by the independent verifier
(:mod:`geokanon.verify`), and only then swapped into place in one step. An existing
``DIR`` is replaced only with ``force=True``, and holds an intact release at every
instant. A failure at any point leaves no ``DIR/release`` and no build; a killed run's
build is removed by the next geokanon run into the same parent.

Figures about suppressed records are published only where they rest on 0 or at
least ``k`` subjects (``<k`` otherwise), and the global suppressed figure is
withheld when, together with the per-unit figures, it would narrow a hidden
``<k`` count (complementary suppression). With ``totals="complementary"`` the
per-unit source totals are published with primary and secondary suppressions
(:mod:`geokanon.complementary`).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from geokanon._heap import trim
from geokanon._outdir import claim
from geokanon._progress import Progress, silent, within
from geokanon.disposal import CoreResult, group_units
from geokanon.encoding import ROW_GROUP_ROWS, parquet_options, parquet_writer, write_parquet
from geokanon.errors import InputError, ReleaseRefused, VerificationFailed
from geokanon.io._names import closest_name
from geokanon.io.gis import (
    BBOX_TYPE,
    GpkgLayer,
    as_multipolygons,
    crs_projjson,
    disc_rings,
    geo_table,
    geoparquet_metadata,
    point_bbox,
    ring_wkb,
    unit_geometries,
    wkb_points,
    write_geopackage,
)
from geokanon.io.read import PointTable
from geokanon.neighbours import count_distinct, stable_argsort
from geokanon.policy import Disposal, Label, OutlierPolicy
from geokanon.projection import scale_factor_range
from geokanon.published import layer_styles

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from geokanon.verify import VerificationReport

__all__ = [
    "LOCAL_METRES_NOTE",
    "TOTALS_MODES",
    "ReleaseOptions",
    "check_coordinate_frame",
    "mask_small",
    "write_release",
]

TOTALS_MODES = ("released", "complementary", "withhold")
#: Release files the report stage may write (their checksums are taken again after it).
_REPORT_WRITES = frozenset({"report.html", "RELEASE_NOTES.md"})
LT_K = "<k"
WITHHELD = "withheld"
FORMAT = "geokanon-release/1"
#: How synthetic records are placed (stated in the manifest; the verifier's holes check
#: uses it: a unit's synthetic count equals its suppressed subjects wherever it is not 0).
#: What the manifest says of the mask's key (the key itself is never in ``release/``).
MASK_KEY_NOTE = (
    "secret: kept by the custodian (audit/mask_key), never published; the seed does not "
    "reproduce the mask"
)
#: What the manifest (``crs_note``), the notes and the report say of coordinates released
#: with ``local_metres`` (no CRS).
LOCAL_METRES_NOTE = (
    "local metres: x and y are metres in a local projected frame that the custodian did not "
    "name (no CRS); distances between published points are in metres, but the points cannot "
    "be placed on a map or joined with other data without that frame's definition"
)
SYNTHESIS_RULE = (
    "one synthetic record per suppressed subject and unit, placed in that unit's own "
    "generalised class, else in the nearest group counted in that unit, else not at all"
)


#: ``ReleaseOptions.gpkg_records`` and ``gpkg_groups`` (CLI ``--gpkg-records``,
#: ``--gpkg-groups``).
GPKG_RECORDS_MODES = ("auto", "yes", "no")
#: With ``"auto"``, the largest release (published records) whose GeoPackage has the
#: per-record and per-group layers (``records``; ``groups`` and ``group_extents``); the
#: small layers (``units``, ``classes``) are always written. Measured
#: (benchmarks/README.md): at 1e6 records the records layer is ~100 MB and 2.3-2.6 s of
#: CPU to write, the two group layers ~95 MB and ~1.1 s, all linear in the records; at 1e7
#: the group layers alone were 968 MiB, ~11 s to write and ~11 s to verify.
GPKG_RECORDS_AUTO_MAX = 1_000_000


@dataclass(frozen=True, kw_only=True)
class ReleaseOptions:
    """How the release is written.

    Parameters
    ----------
    keep
        Attribute columns published with each record (nothing else passes through).
    totals
        ``released`` (totals of released records only), ``complementary`` (also
        source totals per unit where they reveal no hidden count) or ``withhold``
        (no source totals and no global suppressed figure).
    force
        Replace an existing output directory (the old one stays intact until the
        new one is complete).
    output_crs
        CRS of published coordinates (default: the input's).
    read_options
        How the source was read (column names, CRS, ...), recorded in the audit so
        that ``geokanon verify`` can re-read the source the same way.
    mask
        A :class:`geokanon.mask.MaskSpec` applied before classification (``None``:
        no mask). Classification, grouping and every check then use the masked
        coordinates, never the originals.
    mask_key
        The mask's secret :class:`geokanon.mask.MaskKey` (``None``: see
        :func:`geokanon.pipeline.resolve_mask_key`). It is written to
        ``audit/mask_key``, never to ``release/``.
    local_metres
        The coordinates have no CRS and are metres in a local frame (CLI
        ``--local-metres``). Without it, a release whose coordinates have no CRS is
        refused (:func:`check_coordinate_frame`); with it, the manifest, the notes
        and the report say so (:data:`LOCAL_METRES_NOTE`).
    gpkg_records
        Whether ``release.gpkg`` has a ``records`` layer: ``auto`` (when at most
        :data:`GPKG_RECORDS_AUTO_MAX` records are published: above, it would be most of
        the GeoPackage's size and of the release's writing time, and ``groups.parquet``
        draws the same map), ``yes`` or ``no`` (CLI ``--gpkg-records``). The
        manifest's ``gpkg_layers`` lists the layers written.
    gpkg_groups
        Whether ``release.gpkg`` has the ``groups`` and ``group_extents`` layers, by the
        same rule: ``auto`` (when at most :data:`GPKG_RECORDS_AUTO_MAX` records are
        published), ``yes`` or ``no`` (CLI ``--gpkg-groups``). ``units`` and
        ``classes`` are always written.
    """

    keep: tuple[str, ...] = ()
    totals: str = "released"
    force: bool = False
    output_crs: str | None = None
    read_options: tuple[tuple[str, Any], ...] = ()
    mask: Any = None
    mask_key: Any = None
    local_metres: bool = False
    gpkg_records: str = "auto"
    gpkg_groups: str = "auto"
    database: Any = None

    def __post_init__(self) -> None:
        for name in ("gpkg_records", "gpkg_groups"):
            value = getattr(self, name)
            if value not in GPKG_RECORDS_MODES:
                raise InputError(
                    f"{name} must be one of {', '.join(GPKG_RECORDS_MODES)}, got {value!r}"
                )
        if self.totals not in TOTALS_MODES:
            raise InputError(
                f"totals must be one of {', '.join(TOTALS_MODES)}, got {self.totals!r}"
            )
        if self.mask_key is not None:
            from geokanon.mask import MaskKey

            if self.mask is None:
                raise InputError("a mask key needs a mask (--mask jitter or --mask donut)")
            if not isinstance(self.mask_key, MaskKey):
                raise InputError(
                    f"mask_key must be a MaskKey (MaskKey.from_file(path)), got "
                    f"{type(self.mask_key).__name__}"
                )


def check_coordinate_frame(crs: str | None, options: ReleaseOptions) -> str | None:
    """Refuse a release whose coordinates say nothing of their frame.

    A release states what its coordinates are: a CRS, or, with
    ``options.local_metres``, the statement that they are metres in an unnamed local
    frame. Anything else would publish a GeoParquet file and a manifest with a null
    CRS that no reader can interpret.

    Parameters
    ----------
    crs
        The CRS of the published coordinates (``None``: none named).
    options
        The release options (``local_metres``).

    Returns
    -------
    str or None
        :data:`LOCAL_METRES_NOTE` for a local-metres release, ``None`` when a CRS is named.

    Raises
    ------
    InputError
        No CRS and no ``local_metres``; or ``local_metres`` together with a CRS.

    Examples
    --------
    >>> check_coordinate_frame("EPSG:28992", ReleaseOptions()) is None
    True
    >>> check_coordinate_frame(None, ReleaseOptions(local_metres=True)) == LOCAL_METRES_NOTE
    True
    """
    if crs is None:
        if not options.local_metres:
            raise InputError(
                "the coordinates have no CRS, so the release would not say what they are "
                "(GeoParquet and manifest with a null CRS); name it with --crs (e.g. "
                "--crs EPSG:28992), or, if x/y really are metres in a local frame with no "
                "EPSG code, say so with --local-metres (local_metres=True in the API)"
            )
        return LOCAL_METRES_NOTE
    if options.local_metres:
        raise InputError(
            f"--local-metres says the coordinates have no CRS, but they are in {crs}; "
            "drop --local-metres (or drop --crs if x/y really are local metres)"
        )
    return None


def published_crs(table: PointTable, options: ReleaseOptions) -> str | None:
    """The CRS the release publishes coordinates in (``None``: none named)."""
    working = getattr(table, "working_crs", None) or table.crs
    target = options.output_crs or getattr(table, "output_crs", None) or table.crs
    return target if target is not None else working


def mask_small(value: int, k: int) -> int | str:
    """A count of subjects as published: exact when 0 or >= k, else ``<k``.

    Examples
    --------
    >>> mask_small(0, 5), mask_small(3, 5), mask_small(7, 5)
    (0, '<k', 7)
    """
    return int(value) if value == 0 or value >= k else LT_K


#: Why synthesis can narrow hidden figures, and what to do (the writer's refusal and the
#: command line's hint when ``holes`` fails with synthesis say it alike).
SYNTHESIS_PUBLIC = (
    "the stand-ins' number is public (the published records minus the real ones the counts "
    "give), and each stands for one suppressed person of its unit, so where few units have "
    "stand-ins it narrows those units' '<k' figures (three units of one stand-in each are "
    "each pinned to 1). Release without --allow-synthetic"
)


def _hidden_cells_safe(published_total: int, shown: Sequence[int | str], k: int) -> bool:
    """Whether publishing ``published_total`` narrows none of the ``<k`` cells.

    Each hidden cell lies in ``[1, k-1]``. With ``m`` hidden cells summing to
    ``H`` (the total minus the published cells), a cell's feasible range is
    ``[max(1, H-(m-1)(k-1)), min(k-1, H-(m-1))]``; it is not narrowed when
    ``H >= k-1+(m-1)`` and ``H <= (m-1)(k-1)+1``.
    """
    hidden = [v for v in shown if v == LT_K]
    if not hidden:
        return True
    m = len(hidden)
    h = published_total - sum(int(v) for v in shown if v != LT_K)
    return h >= (k - 1) + (m - 1) and h <= (m - 1) * (k - 1) + 1


#: What the manifest's per-pass counts count (``passes[].scope``).
PASS_SCOPE = "records published at group level"


def source_totals(
    units: pd.DataFrame,
    classes: pd.DataFrame,
    records: Sequence[int] | np.ndarray,
    subjects: Sequence[int] | np.ndarray,
    *,
    k: int,
    published: dict[str, Any],
    own_subjects: bool,
    n_records: int,
) -> list[int | str]:
    """``units.csv``'s ``source_total`` column for ``--totals complementary``.

    Primary and secondary suppressions chosen by
    :func:`geokanon.complementary.choose_complementary_totals` against the system the
    verifier builds from the same figures (``published``: the manifest's ``counts``,
    ``synthetic`` and ``passes`` as they will be written). Both writers call this.
    """
    from geokanon.complementary import choose_complementary_totals
    from geokanon.verify import holes_system

    unit_class = classes[classes["level"] == "unit"]
    class_records: dict[str, int] = {}
    for u, size in zip(unit_class["unit"], unit_class["n_records"], strict=True):
        class_records[str(u)] = class_records.get(str(u), 0) + int(size)
    syn_col = units["synthetic"] if "synthetic" in units.columns else [0] * len(units)
    rows = [
        {
            "unit": str(u),
            "released": int(rel),
            "suppressed": sup,
            "generalised_up": None,
            "synthetic": syn,
            "class_records": class_records.get(str(u), 0),
        }
        for u, rel, sup, syn in zip(
            units["unit"], units["released"], units["suppressed"], syn_col, strict=True
        )
    ]
    system = holes_system(
        published, classes, k=k, own_subjects=own_subjects, record_bound=n_records,
        groups_by_majority_unit=True,
    )  # fmt: skip
    chosen = choose_complementary_totals(rows, records, subjects, k=k, system=system)
    return list(chosen.totals)


def _published_pass(entry: dict[str, Any], k: int) -> dict[str, Any]:
    """A fixed-point pass as published: counted over the records published at group level.

    Counts over all records (the first pass labels every one of them) tie the input
    size, and with it the suppressed mass, to the released counts: even rounded to a
    multiple of k they leave the suppressed total a window of fewer than k values,
    which pins small ``<k`` cells. Every published record took part in every pass, so
    the same passes counted over them alone show how the labels settled and add up to
    ``grouped + merged`` in every pass: no figure here rests on a record that is not
    published. The counts over all records stay in the audit (``passes_exact``).
    """
    if entry.get("group_level") is None:
        raise ValueError("a pass without its group-level counts cannot be published")
    out: dict[str, Any] = {
        "pass": int(entry["pass"]),
        "scope": PASS_SCOPE,
        "labels": {lab: int(v) for lab, v in entry["group_level"].items()},
        "changed": int(entry["group_level_changed"]),
    }
    if entry.get("group_level_because_of_time") is not None:
        # Of those records, the ones labelled so only because of time (pass 1, with times).
        out["because_of_time"] = {
            lab: int(v) for lab, v in entry["group_level_because_of_time"].items()
        }
    return out


def _published_mask_risk(risk: dict[str, Any] | None) -> dict[str, Any] | None:
    """The mask's risk summary as published: no record count, shares to 3 decimals.

    Its ``records`` is the input size, and a share of the input records at full
    precision gives that size away too (the denominator of the float); both would let
    the released counts pin the suppressed mass. The audit keeps the exact summary.
    """
    if risk is None:
        return None
    out = {key: v for key, v in risk.items() if key != "records"}
    for key in ("share_below_k", "worst_case_share_below_k"):
        if isinstance(out.get(key), float):
            out[key] = round(out[key], 3)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (numpy's hashing unique is far slower on large arrays)."""
    v = np.sort(values)
    if v.size:
        keep = np.ones(v.size, dtype=bool)
        keep[1:] = v[1:] != v[:-1]
        v = v[keep]
    return v


def _tie_order(ties: pd.DataFrame) -> np.ndarray:
    """Row order of a stable sort by ``ties``' columns in turn, missing values first.

    This is the order the verifier's ``counts`` demands within a group or class: each
    column ascending, a missing value (``None``, ``NA``, a float NaN) before every other
    (a NaN before minus infinity, where pandas' sort of several columns ties them), -0.0
    before 0.0, a categorical column by its values (not its categories' order); ties keep
    the given order, and tied rows publish the same values. Each column is ranked (:func:`_ranks`)
    and the ranks are combined into one integer key for
    :func:`~geokanon.neighbours.stable_argsort` when they fit in 64 bits; otherwise
    ``np.lexsort`` sorts the ranks.
    """
    n = len(ties)
    ranks = [_ranks(ties[name]) for name in ties.columns]
    combined = np.zeros(n, dtype=np.int64)
    span = 1
    for rank, width in ranks:
        if span > (np.iinfo(np.int64).max // max(n, 1)) // (width + 1):
            return np.lexsort([r for r, _ in reversed(ranks)]).astype(np.int64)
        combined = combined * width + rank
        span *= width
    return stable_argsort(combined)


def _ranks(col: pd.Series) -> tuple[np.ndarray, int]:
    """Each value's rank among the column's distinct values (0 for a missing one, which
    sorts first), and the number of ranks."""
    n = len(col)
    if isinstance(col.dtype, pd.CategoricalDtype):  # by its value, as published
        col = col.astype(col.dtype.categories.dtype)
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in "fiub":
        values = col.to_numpy()
        lo = values.min() if n and values.dtype.kind in "iub" else 0
        if n and values.dtype.kind in "iub" and int(values.max()) - int(lo) < 4 * n:
            # a few values: their offsets from the smallest
            if values.dtype.kind == "u":
                rank = (values - lo).astype(np.int64)
            else:
                rank = values.astype(np.int64) - np.int64(lo)
            return rank, int(rank.max()) + 1
        missing = np.zeros(n, dtype=bool)
        if values.dtype.kind == "f":
            missing = np.isnan(values)
            # ranked by their bits in IEEE 754's total order: -0.0 before 0.0 (equal as
            # numbers, but published apart: tied, their order would be the source's)
            bits = values.astype(np.float64).view(np.int64)
            values = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
        _, found = np.unique(values[~missing], return_inverse=True)
        rank = np.zeros(n, dtype=np.int64)
        rank[~missing] = found.reshape(-1) + 1
        return rank, int(rank.max()) + 1 if n else 1
    cat = pd.Categorical(col, ordered=True)
    return cat.codes.astype(np.int64) + 1, len(cat.categories) + 1


def _coded_text(codes: np.ndarray, names: Sequence[str], *, large: bool = False) -> pa.Array:
    """Text per row from integer codes into ``names`` (null where a code is negative), as
    a plain Arrow ``string`` column (``large_string`` with ``large``).

    One code throughout (a chunk of group-level records: ``group``, and no unit) gives
    the column from its one value, without a cast.
    """
    codes = np.asarray(codes)
    kind = pa.large_string() if large else pa.string()
    n = codes.size
    if n and codes[0] == codes[-1] and (codes == codes[0]).all():
        if codes[0] < 0:
            return pa.nulls(n, kind)
        word = str(names[int(codes[0])]).encode("utf-8")
        offsets = np.arange(n + 1, dtype=np.int64 if large else np.int32) * len(word)
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(word * n)])
    missing = codes < 0 if codes.dtype.kind == "i" else None
    if missing is not None and not missing.any():
        missing = None
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32), mask=missing), pa.array([str(v) for v in names], kind)
    ).cast(kind)


@contextlib.contextmanager
def _atomic_directory(out: Path, force: bool) -> Iterator[Path]:
    """Yield a private build directory; it replaces ``out`` in one step on success.

    The lock, the build area and the exchange are :mod:`geokanon._outdir`'s (shared by
    every writer of an output directory).
    """
    with claim(out, force=force) as held, held.build() as build:
        yield build.path


def _return_free_memory() -> None:
    """Give memory freed by the last stage back to the system (pyarrow's pool, glibc's heap).

    Each stage of :func:`write_release` then starts from the data still held rather than
    from the previous stage's peak. Cycles are collected first: the report's figures
    (matplotlib objects refer to each other) hold their arrays until then.
    """
    gc.collect()
    pa.default_memory_pool().release_unused()
    trim()


def _write_parquet(frame: pd.DataFrame, path: Path, geo: dict[str, Any] | None = None) -> None:
    _write_arrow_parquet(pa.Table.from_pandas(frame, preserve_index=False), path, geo)


def _write_arrow_parquet(table: pa.Table, path: Path, geo: dict[str, Any] | None = None) -> None:
    if geo is not None:
        meta = dict(table.schema.metadata or {})
        meta[b"geo"] = json.dumps(geo, sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
    write_parquet(table, path)  # the release's one encoding (geokanon.encoding)


def _points_extent(x: np.ndarray, y: np.ndarray) -> list[float] | None:
    """``[xmin, ymin, xmax, ymax]`` of finite points (``None``: none)."""
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        return None
    return [float(x[ok].min()), float(y[ok].min()), float(x[ok].max()), float(y[ok].max())]


_wkb_points = wkb_points  # the partitioned writer's name for it


#: Rows per chunk of the per-record files: the release's row group (geokanon.encoding), so
#: each chunk is one row group and no whole-file table is held.
_CHUNK_ROWS = ROW_GROUP_ROWS
_CSV_OPTIONS = {"quoting_style": "needed"}
#: zstd level of ``assignment.parquet``: its coordinates and ratios hardly compress, and the
#: fast level writes it in about half the time for ~6 % more bytes.
_AUDIT_ZSTD = -1
#: Columns of ``records.parquet`` other than kept attributes.
_RECORD_COLUMNS = ("group_id", "class_id", "level", "unit", "x", "y", "time_bin", "geometry")


def check_keep(keep: Sequence[str], table: PointTable, *, times: bool = True) -> None:
    """Refuse ``--keep`` names that are not attribute columns of ``table`` (or clash), and
    kept columns that hold a record's time (with ``times``; see :func:`_kept_record_times`).

    Run before any work by :func:`geokanon.pipeline.release_points` and by ``release
    --dry-run``, so a plan that prints is a plan that runs; the writer checks the names
    again.

    Raises
    ------
    InputError
        Naming the missing columns, the likely intended name and the available ones; or
        the kept column holding records' times, in how many rows, and the fix.
    """
    columns = list(map(str, table.attributes.columns))
    missing = [c for c in keep if c not in columns]
    if missing:
        close = {c: closest_name(c, columns) for c in missing}
        hints = [f"{m!r} for {c!r}" for c, m in close.items() if m is not None]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        raise InputError(
            f"--keep names columns that are not attributes of the input: {missing}{hint}; "
            f"available: {columns[:20]}"
        )
    clash = [c for c in keep if c in _RECORD_COLUMNS]
    if clash:
        raise InputError(
            f"--keep names columns that the release publishes itself: {clash}; "
            "rename them in the input"
        )
    if times and table.times is not None and keep:
        for col in keep:
            n = _kept_record_times(table.attributes[col], table)
            if n:
                rows = "row" if n == 1 else "rows"
                raise InputError(
                    f"--keep {col!r} holds the time of a record (as the --time column gives "
                    f"it) in {n:,} {rows}: the release publishes times only in bins, and the "
                    f"verifier's no_leak refuses a kept copy. Drop {col!r} from --keep, or "
                    "round it in the input to a coarser step than the --time column's "
                    "(whole days, say) so that no value is a record's time"
                )


#: A kept text column is read as times when its first value starts like a date.
_DATE_START = r"^\s*[+-]?\d{4}-\d{2}-\d{2}"


def _kept_record_times(column: pd.Series, table: PointTable) -> int:
    """Rows of a kept ``column`` whose value is the time of a record of ``table``.

    A time is compared in each way the verifier reads one: a timestamp or date (one
    without a zone read as UTC), a number as epoch seconds, a text starting like a date
    both as its wall-clock reading and as the instant its offset gives. The records'
    times are their instants and, for times written without an offset and read in a
    ``--timezone``, their wall-clock readings too. Equal to the microsecond (the
    verifier compares exactly, so this refuses whatever it would)."""
    assert table.times is not None
    readings = _time_readings(column)
    if not readings:
        return 0
    known = [table.times]
    if table.time_zone is not None:
        utc = pd.to_datetime(table.times, unit="s", utc=True)
        wall = pd.DatetimeIndex(utc).tz_convert(table.time_zone).tz_localize(None)
        known.append(_seconds_of(pd.Series(wall)))
    record_us = np.concatenate([_microseconds(k) for k in known])
    hit = np.zeros(len(column), dtype=bool)
    for secs in readings:
        us = _microseconds(secs)
        # a hash table: np.isin and np.unique are many times slower on 1e7 int64s
        hit |= pd.Series(us).isin(record_us).to_numpy() & (us != _NO_TIME)
    return int(np.count_nonzero(hit))


#: :func:`_microseconds` of a missing or out-of-range time.
_NO_TIME = np.iinfo(np.int64).min


def _microseconds(secs: NDArray[np.float64]) -> NDArray[np.int64]:
    ok = np.isfinite(secs) & (np.abs(secs) < 9e12)
    out = np.full(secs.size, _NO_TIME, dtype=np.int64)
    out[ok] = np.round(secs[ok] * 1e6).astype(np.int64)
    return out


def _seconds_of(stamps: pd.Series) -> NDArray[np.float64]:
    """Seconds since the epoch of timestamps (UTC where they carry a zone; NaN missing)."""
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    ns = stamps.astype("datetime64[ns]").to_numpy()
    out = ns.astype(np.int64).astype(np.float64) / 1e9
    out[np.isnat(ns)] = np.nan
    return out


def _time_readings(column: pd.Series) -> list[NDArray[np.float64]]:
    """The ways a kept column's values read as times, in epoch seconds (none: no times)."""
    if pd.api.types.is_bool_dtype(column.dtype):
        return []
    if pd.api.types.is_numeric_dtype(column.dtype):
        return [pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)]
    if pd.api.types.is_datetime64_any_dtype(column.dtype):
        return [_seconds_of(column)]
    kind = pd.api.types.infer_dtype(column, skipna=True)
    if kind in ("date", "datetime", "datetime64"):
        stamps = pd.to_datetime(column, errors="coerce", utc=kind != "date")
        return [_seconds_of(pd.Series(stamps))]
    if kind != "string":
        return []
    text = column.astype("string").str.strip()
    first = text.dropna()
    if first.empty or not first.iloc[:1].str.match(_DATE_START).all():
        return []
    wall = pd.to_datetime(
        text.str.replace(r"(Z|[+-]\d{2}:?\d{2})$", "", regex=True),
        errors="coerce", format="ISO8601",
    )  # fmt: skip
    utc = pd.to_datetime(text, errors="coerce", format="ISO8601", utc=True)
    return [_seconds_of(pd.Series(wall)), _seconds_of(pd.Series(utc))]


@nb.njit(cache=True, nogil=True)
def _chunk_values(
    g: np.ndarray, c: np.ndarray, gx: np.ndarray, gy: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The published values of rows of groups ``g`` and classes ``c`` (-1: none) that are
    not ids, in one pass: the level's code (0 ``group``, ``1 + class`` generalised, -1
    none), the representative ``x``, ``y`` (NaN without a group), and whether each row
    starts a run of rows of one group and class."""
    n = g.size
    level = np.full(n, -1, dtype=np.int64)
    x = np.full(n, np.nan)
    y = np.full(n, np.nan)
    new = np.ones(n, dtype=np.bool_)
    for i in range(n):
        gi, ci = g[i], c[i]
        if gi >= 0:
            level[i] = 0
            if gx.size:
                x[i] = gx[gi]
                y[i] = gy[gi]
        elif ci >= 0:
            level[i] = 1 + ci
        if i > 0:
            new[i] = gi != g[i - 1] or ci != c[i - 1]
    return level, x, y, new


@dataclass(frozen=True)
class _RecordColumns:
    """What the published columns of ``records.parquet``/``records.csv`` are made from.

    Each published row (real or synthetic) takes its values from one source row: its
    group or class (``g``, ``c``: -1 for none, in published row order), the group's
    representative, and the row's time bin and kept columns (``extra``, in published
    row order too).
    """

    g: np.ndarray
    c: np.ndarray
    gx: np.ndarray
    gy: np.ndarray
    level_names: list[str]
    class_units: list[str]
    extra: pa.Table | None
    schema: pa.Schema  # without geometry; the pandas metadata of the equivalent frame

    def chunk(self, start: int, stop: int) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
        """Published rows ``start:stop``.

        Returns the table as published; where each run of identical consecutive rows
        starts (rows of one group, or of one class, are identical unless time bins or
        kept columns tell them apart); and ``x``, ``y`` (NaN where null) for the geometry.
        """
        g, c = self.g[start:stop], self.c[start:stop]
        size = g.size
        level_code, x, y, new = _chunk_values(g, c, self.gx, self.gy)
        rest = [] if self.extra is None else self.extra.slice(start, size).columns
        table = pa.Table.from_arrays(
            [
                pa.array(g, mask=g < 0),
                pa.array(c, mask=c < 0),
                _coded_text(level_code, self.level_names, large=True),
                _coded_text(c, self.class_units, large=True),
                pa.array(x, from_pandas=True),
                pa.array(y, from_pandas=True),
                *rest,
            ],
            schema=self.schema,
        )
        for col in rest:
            if size < 2:
                break
            try:
                differs = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, size - 1)), True)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                new[1:] = True  # no comparison for this type: every row its own run
                break
            new[1:] |= np.asarray(differs.to_numpy(zero_copy_only=False), dtype=bool)
        return table, np.flatnonzero(new), x, y


def _record_columns(
    published: tuple[np.ndarray, np.ndarray],
    result: CoreResult,
    gx: np.ndarray,
    gy: np.ndarray,
    extra: pd.DataFrame | None,
) -> _RecordColumns:
    """The recipe of the published columns; ``extra`` holds time bins and kept columns."""
    names = ["group_id", "class_id", "level", "unit", "x", "y"]
    like = pd.DataFrame(
        {
            "group_id": pd.array([1], dtype="Int64"),
            "class_id": pd.array([1], dtype="Int64"),
            "level": pd.Series(["group"], dtype="str"),
            "unit": pd.Series(["u"], dtype="string"),
            "x": np.zeros(1),
            "y": np.zeros(1),
        }
    )
    fixed = pa.Table.from_pandas(like, preserve_index=False)
    meta = json.loads(fixed.schema.metadata[b"pandas"])
    fields = list(fixed.schema)
    extra_table = None
    if extra is not None:
        extra_table = pa.Table.from_pandas(extra, preserve_index=False)
        meta["columns"] += json.loads(extra_table.schema.metadata[b"pandas"])["columns"]
        fields += list(extra_table.schema)
        extra_table = extra_table.replace_schema_metadata(None)
    schema = pa.schema(fields, metadata={b"pandas": json.dumps(meta).encode("utf8")})
    assert schema.names[:6] == names
    return _RecordColumns(
        g=published[0],
        c=published[1],
        gx=np.asarray(gx, dtype=np.float64),
        gy=np.asarray(gy, dtype=np.float64),
        level_names=["group", *map(str, result.class_level)],
        class_units=[str(u) for u in result.class_unit],
        extra=extra_table,
        schema=schema,
    )


def _parquet_writer(
    path: Path, schema: pa.Schema, *, zstd_level: int | None = None
) -> pq.ParquetWriter:
    """A writer of a per-record file: zstd, dictionary pages for text only.

    Numbers (ids, coordinates) are stored plain: they compress better so (sorted ids,
    repeated representatives) and are written about twice as fast. Without ``zstd_level``
    this is the release's one encoding (:func:`geokanon.encoding.parquet_writer`: write it
    whole row groups); an audit file (not published) takes a faster level. Statistics are
    written for the GeoParquet ``bbox`` covering column only (what a reader filters row
    groups by).
    """
    if zstd_level is None:
        return parquet_writer(path, schema)
    options = {**parquet_options(schema), "compression_level": zstd_level}
    return pq.ParquetWriter(path, schema, **options)


def _csv_text(table: pa.Table, header: bool, starts: np.ndarray | None = None) -> list[pa.Buffer]:
    """CSV text of ``table`` (pyarrow: strings quoted, numbers in shortest round-trip form),
    as buffers to write one after the other.

    With ``starts`` (where each run of identical consecutive rows starts), only the first
    row of each run is turned into text, and its line repeated by pyarrow's ``take`` (no
    Python object per line, and without the interpreter lock): the same text. That pays
    when runs are long (rows of a group); with at least one run per two rows (a kept
    column that tells the members apart) every row is turned into text.
    """
    import pyarrow.csv as pacsv

    def text(t: pa.Table) -> pa.Buffer:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(t, sink, pacsv.WriteOptions(include_header=header, **_CSV_OPTIONS))
        return sink.getvalue()

    n = table.num_rows
    if starts is None or n == 0 or 2 * starts.size > n:
        return [text(table)]
    firsts = text(table.take(starts))
    # one past the end of every line (each ends with a line break)
    ends = np.flatnonzero(np.frombuffer(firsts, dtype=np.uint8) == ord("\n")) + 1
    if ends.size != starts.size + int(header):  # a value or name holds a line break
        return [text(table)]
    head = int(ends[0]) if header else 0
    offsets = np.concatenate([[head], ends[int(header) :]]).astype(np.int64) - head
    lines = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), starts.size, [None, pa.py_buffer(offsets), firsts.slice(head)]
    )
    runs = np.repeat(np.arange(starts.size, dtype=np.int64), np.diff(np.append(starts, n)))
    body = lines.take(pa.array(runs))
    size = int(np.frombuffer(body.buffers()[1], dtype=np.int64, count=n + 1)[n])
    return [firsts.slice(0, head), body.buffers()[2].slice(0, size)]


def _write_records(
    rel: Path,
    columns: _RecordColumns,
    geo: dict[str, Any],
    progress: Callable[[int], None] | None = None,
) -> dict[str, str]:
    """Write ``records.parquet`` and ``records.csv`` chunk by chunk; return their sha256.

    ``progress`` is called with the rows written so far after each chunk.

    Each chunk's CSV text is made, hashed and written in a second thread while the main
    one writes the chunk's row group (pyarrow and hashlib release the interpreter lock).
    Columns pyarrow cannot write as text (rare attribute types) fall back to pandas for
    the CSV.
    """
    meta = dict(columns.schema.metadata or {})
    meta[b"geo"] = json.dumps(geo, sort_keys=True).encode()
    schema = (
        columns.schema.append(pa.field("geometry", pa.binary()))
        .append(pa.field("bbox", BBOX_TYPE))
        .with_metadata(meta)
    )
    csv_path = rel / "records.csv"
    csv_hash: Any = hashlib.sha256()
    csv_failed = threading.Event()
    with (
        open(csv_path, "wb") as fh,
        ThreadPoolExecutor(max_workers=1) as text_pool,
        _parquet_writer(rel / "records.parquet", schema) as writer,
    ):

        def csv_chunk(table: pa.Table, header: bool, starts: np.ndarray) -> None:
            if csv_failed.is_set():
                return
            try:
                buffers = _csv_text(table, header, starts)
            except (pa.ArrowException, TypeError, ValueError):
                csv_failed.set()
                return
            for buf in buffers:
                csv_hash.update(buf)
                fh.write(buf)

        pending: deque[Future[None]] = deque()
        n = columns.g.size
        for start in range(0, max(n, 1), _CHUNK_ROWS):
            table, starts, x, y = columns.chunk(start, start + _CHUNK_ROWS)
            pending.append(text_pool.submit(csv_chunk, table, start == 0, starts))
            geometry = _wkb_points(x, y)
            writer.write_table(
                table.append_column(schema.field("geometry"), geometry).append_column(
                    schema.field("bbox"), point_bbox(x, y)
                )
            )
            del table, geometry
            while len(pending) > 1:  # at most two chunks' text in hand
                pending.popleft().result()
            if progress is not None:
                progress(min(start + _CHUNK_ROWS, n))
        while pending:
            pending.popleft().result()
    digests = {"records.parquet": _sha256(rel / "records.parquet")}
    if csv_failed.is_set():
        whole = pa.concat_tables(
            columns.chunk(a, a + _CHUNK_ROWS)[0] for a in range(0, max(n, 1), _CHUNK_ROWS)
        )
        whole.to_pandas().to_csv(csv_path, index=False, lineterminator="\n")
        digests["records.csv"] = _sha256(csv_path)
    else:
        digests["records.csv"] = csv_hash.hexdigest()
    return digests


def _output_coordinates(
    table: PointTable, gx: np.ndarray, gy: np.ndarray, options: ReleaseOptions
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Representatives in the output CRS (default: the input's)."""
    working = getattr(table, "working_crs", None) or table.crs
    target = options.output_crs or getattr(table, "output_crs", None) or table.crs
    if target is None or working is None or target == working:
        return gx, gy, target if target is not None else working
    from pyproj import CRS, Transformer

    tr = Transformer.from_crs(
        CRS.from_user_input(working), CRS.from_user_input(target), always_xy=True
    )
    ox, oy = tr.transform(gx, gy)
    return np.asarray(ox), np.asarray(oy), target


def _mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a well-spread ``uint64`` hash of integers."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _synthetic_donors(
    group_id: np.ndarray, class_id: np.ndarray, result: CoreResult, seed: int
) -> np.ndarray:
    """Per synthetic record, the published row it copies.

    The copied row (its published values only: group or class, representative,
    time bin, kept attributes) is a real member of the same group or class,
    chosen by a hash of the seed and the synthetic record's ordinal, so the
    synthetic row is indistinguishable from the release's real rows.
    ``group_id``/``class_id`` are those of the published rows (-1 where none), which
    must be sorted by group, then class.
    """
    syn = result.synthetic
    n_groups = result.group_x.size
    key = np.where(group_id >= 0, group_id, n_groups + class_id)
    want = np.where(syn.group_id >= 0, syn.group_id, n_groups + syn.class_id)
    if key.size > 1 and (np.diff(key) < 0).any():
        raise AssertionError("published rows are not sorted by group, then class")
    lo = np.searchsorted(key, want, side="left")
    hi = np.searchsorted(key, want, side="right")
    if (hi <= lo).any():
        raise AssertionError("a synthetic record's class has no real published row")
    ordinal = np.arange(want.size, dtype=np.uint64) + np.uint64(seed) * np.uint64(1 << 32)
    return lo + (_mix64(ordinal) % (hi - lo).astype(np.uint64)).astype(np.int64)


_crs_projjson = crs_projjson


def _assignment_chunk(
    a: int,
    b: int,
    table: PointTable,
    result: CoreResult,
    ucodes: np.ndarray,
    unit_names: list[str],
    time_bin: np.ndarray | None,
) -> dict[str, pa.Array]:
    """Columns of ``assignment.parquet`` for source rows ``a:b``.

    Arrow columns (text from integer codes, no per-row Python objects).
    """
    g = np.asarray(result.group_id[a:b]).astype(np.int64, copy=False)
    c = np.asarray(result.class_id[a:b]).astype(np.int64, copy=False)
    columns: dict[str, pa.Array] = {
        "source_row": pa.array(np.arange(a, b, dtype=np.int64)),
        "label": _coded_text(np.asarray(result.first_labels[a:b]), [v.text for v in Label]),
        "disposal": _coded_text(np.asarray(result.disposal[a:b]), [d.text for d in Disposal]),
        "group_id": pa.array(g, mask=g < 0),
        "class_id": pa.array(c, mask=c < 0),
        "unit": _coded_text(ucodes[a:b], unit_names),
        "subject": pa.array(np.asarray(result.subjects[a:b], dtype=np.int64)),
        "x_m": pa.array(np.asarray(table.x[a:b], dtype=np.float64)),
        "y_m": pa.array(np.asarray(table.y[a:b], dtype=np.float64)),
        "iota": pa.array(np.asarray(result.iota[a:b])),
    }
    if time_bin is not None:
        columns["time_bin"] = pa.array(pd.array(time_bin[a:b], dtype="string"))
    return columns


def _write_assignment(
    path: Path,
    table: PointTable,
    result: CoreResult,
    ucodes: np.ndarray,
    unames: np.ndarray,
    time_bin: np.ndarray | None,
    stop: threading.Event,
) -> None:
    """Write ``audit/assignment.parquet`` one row group at a time (stops when ``stop`` is set).

    The pandas metadata is that of the equivalent frame, so pandas reads the same dtypes.
    """
    n = len(table)
    names = [str(u) for u in unames]
    first = _assignment_chunk(0, min(n, _CHUNK_ROWS), table, result, ucodes, names, time_bin)
    if not n:
        with _parquet_writer(path, pa.table(first).schema, zstd_level=_AUDIT_ZSTD) as writer:
            writer.write_table(pa.table(first))
        return
    like = pd.DataFrame(
        {
            name: (
                pd.array([1], dtype="Int64")
                if name in ("group_id", "class_id")
                else pd.array(["a"], dtype="string")
                if name == "time_bin"
                else np.array(["a"], dtype=object)
                if pa.types.is_string(arr.type)
                else arr.slice(0, 1).to_numpy(zero_copy_only=False)
            )
            for name, arr in first.items()
        }
    )
    meta = pa.Table.from_pandas(like, preserve_index=False).schema.metadata
    schema = pa.table(first).schema.with_metadata(meta)
    with _parquet_writer(path, schema, zstd_level=_AUDIT_ZSTD) as writer:
        writer.write_table(pa.table(first, schema=schema))
        del first
        for a in range(_CHUNK_ROWS, n, _CHUNK_ROWS):
            if stop.is_set():
                return
            b = min(n, a + _CHUNK_ROWS)
            chunk = _assignment_chunk(a, b, table, result, ucodes, names, time_bin)
            writer.write_table(pa.table(chunk, schema=schema))


def class_geometries(classes: pd.DataFrame, unit_shapes: dict[str, Any]) -> np.ndarray:
    """Each class's geometry: its unit's polygon for a unit-level class (``None`` otherwise,
    and for a unit without a polygon: no geometry is made up)."""
    out = np.full(len(classes), None, dtype=object)
    for i, (level, unit) in enumerate(zip(classes["level"], classes["unit"], strict=True)):
        if str(level) == "unit":
            out[i] = unit_shapes.get(str(unit))
    return out


#: The release files that hold coordinates (all in the manifest's ``crs``): ``file_crs``.
COORDINATE_FILES = (
    "records.parquet", "records.csv", "groups.parquet", "classes.parquet", "release.gpkg"
)  # fmt: skip
#: Layers of ``release.gpkg`` with their geometry types (see docs/release-format.md).
GPKG_LAYER_TYPES = (
    ("records", "Point"),
    ("groups", "Point"),
    ("group_extents", "Polygon"),
    ("units", "MultiPolygon"),
    ("classes", "MultiPolygon"),
)
#: Rows per batch of the records layer, streamed from ``records.parquet``.
_GPKG_BATCH = 65536


def _wkb_column(geoms: np.ndarray) -> pa.Array:
    import shapely

    raw = shapely.to_wkb(geoms, byte_order=1) if len(geoms) else np.zeros(0, dtype=object)
    return pa.array(list(raw), type=pa.binary())


def _write_gpkg(
    rel: Path,
    out_crs: str | None,
    working_crs: str | None,
    groups: pa.Table,
    classes: pd.DataFrame,
    unit_shapes: dict[str, Any],
    group_work: tuple[np.ndarray, np.ndarray],
    policy: OutlierPolicy,
    with_records: bool = True,
    with_groups: bool = True,
) -> list[str]:
    """``release/release.gpkg``: the release files as map layers, in the output CRS.

    Every value is read from the files just written (``records.parquet`` streamed,
    ``units.csv`` as text), so each layer repeats its file exactly; x and y are the
    geometry. The group extents are discs of ``r_max_m`` built in the working CRS.
    """
    rec = pq.ParquetFile(rel / "records.parquet")
    columns = [c for c in rec.schema_arrow.names if c not in ("x", "y", "bbox")]

    def record_batches() -> Iterator[pa.RecordBatch]:
        yield from rec.iter_batches(batch_size=_GPKG_BATCH, columns=columns)

    rec_schema = pa.schema([rec.schema_arrow.field(c) for c in columns])
    grp = groups.select(["group_id", "n_records", "radius_m", "unit"]).replace_schema_metadata(None)
    gx, gy = (groups.column(v).to_numpy().astype(np.float64, copy=False) for v in ("x", "y"))

    def discs() -> pa.Array:
        wx, wy = group_work
        return ring_wkb(disc_rings(wx, wy, policy.r_max_m, working_crs, out_crs))

    units_text = pd.read_csv(rel / "units.csv", dtype=str, keep_default_na=False)
    unit_cols = {
        c: pa.array(units_text[c].astype(np.int64)) if c == "released" else pa.array(units_text[c])
        for c in units_text.columns
    }
    unit_geoms = np.array([unit_shapes.get(u) for u in units_text["unit"]], dtype=object)
    cls = pa.Table.from_pandas(classes, preserve_index=False).replace_schema_metadata(None)
    layers = [
        *(
            [GpkgLayer("records", "Point", batches=(rec_schema, record_batches()))]
            if with_records
            else []
        ),
        *(
            [
                GpkgLayer("groups", "Point", grp.append_column("geometry", wkb_points(gx, gy))),
                GpkgLayer("group_extents", "Polygon", grp.append_column("geometry", discs())),
            ]
            if with_groups
            else []
        ),
        GpkgLayer(
            "units",
            "MultiPolygon",
            pa.table(unit_cols).append_column(
                "geometry", _wkb_column(as_multipolygons(unit_geoms))
            ),
        ),
        GpkgLayer(
            "classes",
            "MultiPolygon",
            cls.append_column(
                "geometry", _wkb_column(as_multipolygons(class_geometries(classes, unit_shapes)))
            ),
        ),
    ]
    write_geopackage(
        rel / "release.gpkg", layers, out_crs,
        layer_styles(policy.unit_cap, [layer.name for layer in layers]),
    )  # fmt: skip
    return [layer.name for layer in layers]


def _published_rows(
    result: CoreResult,
    table: PointTable,
    options: ReleaseOptions,
    time_bin: np.ndarray | None,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame | None]:
    """The published rows in published order: the source row each takes its values
    from, its group and its class (-1: none), and its time bin and kept columns
    (``None`` without either).

    Group-level records first, then generalised ones, sorted by published values only:
    one integer key orders them as (level rank, group id, class id) would (group-level
    records by group id, generalised ones by the level rank and id of their class), then
    time bin and kept columns; synthetic records copy a donor's row and sort with it.
    A row's group and class follow from its key (a record is in a group or in a class,
    never both), so they are read off the sorted keys, not gathered from the source rows.
    """
    g = result.group_id
    c = result.class_id
    n_groups = result.group_x.size
    n_classes = len(result.class_level)
    rank_of = {"group": 0, "unit": 1, "parent": 2, "area": 3}
    class_rank = np.array([rank_of.get(str(v), -1) for v in result.class_level], dtype=np.int64)
    class_pos = np.empty(n_classes, dtype=np.int64)
    class_order = np.lexsort((np.arange(n_classes), class_rank))
    class_pos[class_order] = np.arange(n_classes)
    unknown = class_rank < 0  # an unknown level sorts first, as a missing rank would
    sort_key = g.astype(np.int64)
    sort_key[g < 0] = -1 - n_classes
    sort_key += n_classes
    # generalised records (a few): after the groups, by their class's rank and id
    gen = np.flatnonzero((c >= 0) & (g < 0))
    if gen.size:
        cg = c[gen]
        sort_key[gen] = np.where(unknown[cg], class_pos[cg], n_classes + n_groups + class_pos[cg])
    pub = np.flatnonzero(sort_key >= 0)

    def order_of(keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if time_bin is None and not options.keep:
            order = stable_argsort(keys)
            return order, keys[order]
        ties = pd.DataFrame({"_key": keys})
        if time_bin is not None:
            ties["time_bin"] = pd.array(time_bin[rows], dtype="string")
        for col in options.keep:
            ties[col] = table.attributes[col].to_numpy()[rows]
        order = _tie_order(ties)
        return order, keys[order]

    order, keys = order_of(sort_key[pub], pub)
    # Every published row (real or synthetic) takes its values from one source row:
    # ``rows`` lists them in published order.
    rows = pub[order]
    if len(result.synthetic):
        donor = _synthetic_donors(g[rows], c[rows], result, seed)
        order, keys = order_of(np.concatenate([keys, keys[donor]]), np.r_[rows, rows[donor]])
        rows = np.concatenate([rows, rows[donor]])[order]
    del sort_key
    if ((g >= 0) & (c >= 0)).any():  # not a core result: the key does not say the class
        pub_g, pub_c = (v[rows].astype(np.int64, copy=False) for v in (g, c))
    else:
        pub_g = keys - n_classes
        in_class = np.flatnonzero((pub_g < 0) | (pub_g >= n_groups))
        pub_g[in_class] = -1
        pub_c = np.full(rows.size, -1, dtype=np.int64)
        pos = keys[in_class]
        pub_c[in_class] = class_order[np.where(pos < n_classes, pos, pos - n_classes - n_groups)]
    extra = None
    if time_bin is not None or options.keep:
        extra = pd.DataFrame(index=pd.RangeIndex(rows.size))
        if time_bin is not None:
            extra["time_bin"] = pd.array(time_bin[rows], dtype="string")
        for col in options.keep:
            extra[col] = table.attributes[col].to_numpy()[rows]
    return rows, pub_g, pub_c, extra


def _write_groups(
    path: Path,
    result: CoreResult,
    ucodes: np.ndarray,
    unames: np.ndarray,
    xy: tuple[np.ndarray, np.ndarray],
    crs: str | None,
    r_max_m: float,
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Write ``groups.parquet`` (GeoParquet: the representative ``xy`` in the output CRS
    as the geometry); return each group's unit code and records (synthetic ones
    included), and its table without the geometry.

    The table has the pandas metadata of the equivalent frame (ids, records, x, y,
    radius, unit text), so pandas reads the same dtypes; it is built from arrays (no
    Python string per group).
    """
    g = result.group_id
    n_groups = result.group_x.size
    # ties go to the first unit id in sort order (as documented and verified)
    group_unit = group_units(g, ucodes, n_groups, unames)
    group_sizes = np.bincount(g[g >= 0], minlength=n_groups)
    syn_g = result.synthetic.group_id
    if (syn_g >= 0).any():
        group_sizes += np.bincount(syn_g[syn_g >= 0], minlength=n_groups)
    gx, gy = (np.asarray(v, dtype=np.float64) for v in xy)
    groups = groups_table(group_sizes, gx, gy, r_max_m, group_unit, [str(u) for u in unames])
    _write_arrow_parquet(geo_table(groups, (gx, gy), crs), path)
    return group_unit, group_sizes, groups


def groups_table(
    sizes: np.ndarray,
    gx: np.ndarray,
    gy: np.ndarray,
    r_max_m: float,
    group_unit: np.ndarray,
    names: Sequence[str],
) -> pa.Table:
    """``groups.parquet``'s table without the geometry: per group its id, records
    (``sizes``), representative (``gx``, ``gy``), radius and unit text
    (``names[group_unit]``), with the pandas metadata of the equivalent frame, so pandas
    reads the same dtypes; built from arrays (no Python string per group). Both layouts
    write it."""
    n_groups = group_unit.size
    columns = {
        "group_id": np.arange(n_groups, dtype=np.int64),
        "n_records": np.asarray(sizes, dtype=np.int64),
        "x": np.asarray(gx, dtype=np.float64),
        "y": np.asarray(gy, dtype=np.float64),
        "radius_m": np.full(n_groups, r_max_m, dtype=np.float64),
    }
    if n_groups:
        like = pd.DataFrame({**{k: v[:1] for k, v in columns.items()}, "unit": [names[0]]})
        return pa.Table.from_arrays(
            [*map(pa.array, columns.values()), _coded_text(group_unit, names)],
            schema=pa.Table.from_pandas(like, preserve_index=False).schema,
        )
    empty = pd.DataFrame({**columns, "unit": np.zeros(0, dtype=str)})
    return pa.Table.from_pandas(empty, preserve_index=False)


def build_release_files(
    root: Path,
    table: PointTable,
    result: CoreResult,
    policy: OutlierPolicy,
    options: ReleaseOptions,
    *,
    version: str,
    verification: dict[str, bool] | None = None,
    mask_risk: dict[str, Any] | None = None,
    digests: dict[str, str] | None = None,
    mask_key: Any = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``root/release`` and ``root/audit``; return the manifest (without checksums).

    ``digests``, when given, receives the sha256 of the release files hashed as they
    were written (for :func:`finish_manifest`'s ``unchanged``). ``mask_key`` (the
    mask's secret key) goes to ``audit/mask_key`` only. ``progress`` hears the steps
    (``order records``, ``records`` with rows written of all, ``groups``, ``units``,
    ``audit``, ``notes``).
    """
    say = progress if progress is not None else silent
    rel = root / "release"
    aud = root / "audit"
    rel.mkdir(parents=True, exist_ok=True)
    aud.mkdir(parents=True, exist_ok=True)
    k = policy.k
    n = len(table)
    say("order records")
    check_keep(options.keep, table, times=False)  # the times: before the core
    unames = np.asarray(table.unit_names, dtype=object)
    ucodes = np.asarray(table.unit_codes, dtype=np.int64)
    gx, gy, out_crs = _output_coordinates(table, result.group_x, result.group_y, options)
    crs_note = check_coordinate_frame(out_crs, options)
    g = result.group_id
    c = result.class_id
    at_group = g >= 0
    generalised = c >= 0
    n_groups = result.group_x.size
    n_classes = len(result.class_level)
    syn = result.synthetic
    time_bin = None
    if table.times is not None:
        from geokanon.timebins import bin_labels, time_bins

        key = np.where(at_group, g, np.where(generalised, n_groups + c, -1))
        tod = str(policy.time_mode) == "time_of_day"
        width, index = time_bins(key, table.times, result.subjects, k, time_of_day=tod)
        time_bin = bin_labels(width, index, time_of_day=tod)

    # The custodian's assignment and groups.parquet are written in two other threads
    # meanwhile (pyarrow encodes without the interpreter lock).
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        assignment = pool.submit(
            _write_assignment, aud / "assignment.parquet", table, result, ucodes, unames,
            time_bin, stop,
        )  # fmt: skip
        grouped = pool.submit(
            _write_groups, rel / "groups.parquet", result, ucodes, unames, (gx, gy), out_crs,
            policy.r_max_m,
        )  # fmt: skip
        try:
            rows, pub_g, pub_c, extra = _published_rows(
                result, table, options, time_bin, policy.seed
            )
            # every published point is a group's representative: the file's extent is theirs
            geo = geoparquet_metadata(out_crs, ["Point"], _points_extent(gx, gy))
            say("records", done=0, total=int(rows.size))
            written = _write_records(
                rel, _record_columns((pub_g, pub_c), result, gx, gy, extra), geo,
                progress=lambda i: say("records", done=i, total=int(rows.size)),
            )  # fmt: skip
            del pub_g, pub_c
        except BaseException:
            stop.set()
            raise
        del extra
        say("audit assignment", done=int(rows.size), total=int(rows.size))
        assignment.result()
        say("groups and classes")
        group_unit, group_sizes, groups = grouped.result()
    if digests is not None:
        digests.update(written)

    # --- classes.
    syn_c = syn.class_id[syn.class_id >= 0]
    working_crs = getattr(table, "working_crs", None) or table.crs
    unit_shapes = dict(
        zip(
            (str(u) for u in unames),
            unit_geometries(
                [str(u) for u in unames], dict(options.read_options), working_crs, out_crs
            ),
            strict=True,
        )
    )
    classes = pd.DataFrame(
        {
            "class_id": np.arange(n_classes, dtype=np.int64),
            "level": list(result.class_level),
            "unit": list(result.class_unit),
            "n_records": np.bincount(np.r_[c[generalised], syn_c], minlength=n_classes).astype(
                np.int64
            ),
        }
    )
    _write_arrow_parquet(
        geo_table(
            pa.Table.from_pandas(classes, preserve_index=False),
            class_geometries(classes, unit_shapes),
            out_crs,
        ),
        rel / "classes.parquet",
    )

    # --- per-unit figures.
    say("units")
    nu = unames.size
    released = np.bincount(group_unit, weights=group_sizes, minlength=nu).astype(np.int64)
    unit_index = {str(u): i for i, u in enumerate(unames)}
    unit_class_sizes = classes[classes["level"] == "unit"]
    for u, size in zip(unit_class_sizes["unit"], unit_class_sizes["n_records"], strict=True):
        released[unit_index[u]] += int(size)
    subj = result.subjects
    suppressed = result.disposal == Disposal.SUPPRESSED
    n_subj = int(subj.max()) + 1

    def distinct(mask: np.ndarray) -> np.ndarray:
        pairs = _sorted_unique(ucodes[mask] * n_subj + subj[mask])
        return np.bincount(pairs // n_subj, minlength=nu)

    sup_u = distinct(suppressed)
    present = np.bincount(ucodes, minlength=nu) > 0
    order = np.argsort(unames.astype(str), kind="stable")
    order = order[present[order]]
    sup_shown = [mask_small(int(sup_u[i]), k) for i in order]
    # No per-unit count of records pooled to parent or area classes is published: with
    # the class sizes it would pin down small hidden counts.
    units = pd.DataFrame(
        {
            "unit": unames[order].astype(str),
            "released": released[order],
            "suppressed": sup_shown,
        }
    )
    # Synthetic records per unit: each stands in for one suppressed subject of the unit
    # and is counted in its released figure; shown like the suppressed subjects.
    syn_u = np.bincount(syn.unit, minlength=nu)
    syn_shown = [mask_small(int(syn_u[i]), k) for i in order]
    syn_total: int | str = int(syn_u.sum())
    syn_hidden = sum(v == LT_K for v in syn_shown)
    if syn_hidden:
        syn_total = WITHHELD  # a total over hidden per-unit values would narrow them
    if syn_hidden and not _hidden_cells_safe(int(syn_u.sum()), syn_shown, k):
        # Withheld or not, the total is public: the published records minus the real
        # ones the counts give. Each stand-in is one suppressed subject of its unit.
        raise ReleaseRefused(
            f"synthesis would give hidden figures away: {syn_hidden} "
            f"{'unit has' if syn_hidden == 1 else 'units have'} 1..{k - 1} stand-ins each; "
            f"{SYNTHESIS_PUBLIC} (allow_synthetic=False)"
        )
    if policy.allow_synthetic:
        units["synthetic"] = syn_shown
    total_sup_subjects = count_distinct(subj[suppressed])
    total_subjects = count_distinct(subj)
    global_shown: int | str = mask_small(total_sup_subjects, k)
    n_hidden_units = sum(v == LT_K for v in sup_shown)
    if (
        options.totals == "withhold"
        or (global_shown != LT_K and not _hidden_cells_safe(int(global_shown), sup_shown, k))
        # A global "<k" over two or more "<k" units pins each unit below k-1.
        or (global_shown == LT_K and n_hidden_units >= 2)
        # The stand-ins' number is public and counts the suppressed subjects of their
        # units: a global figure would give the rest's sum (three units of 2 stand-ins and
        # a global 7 pin the fourth to 1).
        or syn_hidden > 0
    ):
        global_shown = WITHHELD
    counts_exact = result.counts()
    counts: dict[str, int | str] = dict(counts_exact)
    # Suppressed records, shown only where the suppressed subjects are shown.
    counts["suppressed"] = (
        counts_exact["suppressed"] if isinstance(global_shown, int) else global_shown
    )
    counts["synthetic"] = syn_total
    published_passes = [_published_pass(p.to_dict(), k) for p in result.passes]
    if options.totals == "complementary":
        src = np.bincount(ucodes, minlength=nu)
        unit_subjects = distinct(np.ones(n, dtype=bool))
        units["source_total"] = source_totals(
            units, classes, src[order], unit_subjects[order], k=k,
            published={"counts": counts, "synthetic": {"total": syn_total, "pooled": 0},
                       "passes": published_passes},
            own_subjects=table.subjects is None, n_records=n,
        )  # fmt: skip
    units.to_csv(rel / "units.csv", index=False, lineterminator="\n")

    # --- the analyst's GeoPackage: the files above as map layers, styled.
    say("geopackage")
    small_release = rows.size <= GPKG_RECORDS_AUTO_MAX
    with_records, with_groups = (
        mode == "yes" or (mode == "auto" and small_release)
        for mode in (options.gpkg_records, options.gpkg_groups)
    )
    gpkg_layers = _write_gpkg(
        rel, out_crs, working_crs, groups, classes, unit_shapes,
        (result.group_x, result.group_y), policy, with_records, with_groups,
    )  # fmt: skip

    # --- audit (custodian only): assignment.parquet is written above.
    say("audit")
    stands_for = syn.stands_for
    synthetic_audit = pd.DataFrame(
        {
            "group_id": pd.array(np.where(syn.group_id >= 0, syn.group_id, 0), dtype="Int64"),
            "class_id": pd.array(np.where(syn.class_id >= 0, syn.class_id, 0), dtype="Int64"),
            "unit": unames[syn.unit].astype(str) if len(syn) else np.zeros(0, dtype=str),
            "stands_for_row": stands_for.astype(np.int64),
        }
    )
    synthetic_audit.loc[syn.group_id < 0, "group_id"] = pd.NA
    synthetic_audit.loc[syn.class_id < 0, "class_id"] = pd.NA
    _write_parquet(synthetic_audit, aud / "synthetic.parquet")
    share: float | str = (
        total_sup_subjects / total_subjects if isinstance(global_shown, int) else global_shown
    )
    scale = scale_factor_range(
        table.x, table.y, getattr(table, "working_crs", None) or table.crs, pad_m=policy.r_max_m
    )
    audit = {
        "working_crs": getattr(table, "working_crs", None) or table.crs,
        # the working CRS's scale over the data's (10 km-snapped) box, and the radius the
        # core held on the map so that r_max_m holds on the ellipsoid
        "scale_factor_range": [scale.low, scale.high],
        "r_work_m": policy.r_work_m,
        "output_crs": out_crs,
        "read_options": dict(options.read_options),
        "counts": counts_exact,
        "suppressed_subjects": total_sup_subjects,
        "subjects": total_subjects,
        "per_unit": result.units.rows(),
        "passes": published_passes,
        "passes_exact": [p.to_dict() for p in result.passes],
        "mask": None if options.mask is None else options.mask.to_dict(),
        "mask_risk": mask_risk,
        "mask_key": None,
        "input_filter": input_filter_entry(table, None),
    }
    if options.mask is not None:
        if mask_key is None:
            raise InputError("a masked release needs its mask key (to keep it in the audit)")
        # The key is secret: the audit keeps it (owner-only); release/ never holds it.
        mask_key.write(aud / "mask_key")
        audit["mask_key"] = {"file": "mask_key", "origin": mask_key.origin}
    (aud / "audit.json").write_text(json.dumps(audit, indent=2, sort_keys=True) + "\n")
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": version,
        "k": k,
        "r_max_m": policy.r_max_m,
        "tau": policy.tau,
        "unit_cap": policy.unit_cap,
        "policy": policy.to_dict(),
        "seed": policy.seed,
        "crs": out_crs,
        **({"crs_note": crs_note} if crs_note is not None else {}),
        # the CRS of every file that holds coordinates (text files included)
        "file_crs": dict.fromkeys(COORDINATE_FILES, out_crs),
        # the layers of release.gpkg (records, groups, group_extents only up to
        # GPKG_RECORDS_AUTO_MAX published records by default)
        "gpkg_layers": gpkg_layers,
        "local_metres": options.local_metres,
        "input_sha256": table.source_sha256,
        # spellings of one subject id (case, spacing, Unicode form) taken as one subject
        "subject_ids_merged": int(getattr(table, "subject_ids_merged", 0)),
        "totals": options.totals,
        "keep": list(options.keep),
        "records_published": int(rows.size),
        "groups": int(n_groups),
        "classes": int(n_classes),
        "counts": counts,
        "suppressed_share": share,
        "synthetic": {
            "allowed": policy.allow_synthetic,
            "total": syn_total,
            "per_unit": {
                str(u): v for u, v in zip(units["unit"], syn_shown, strict=True) if v != 0
            },
            "pooled": 0,
            "rule": SYNTHESIS_RULE,
        },
        "mask": None if options.mask is None else {**options.mask.to_dict(), "key": MASK_KEY_NOTE},
        "mask_risk": _published_mask_risk(mask_risk),
        "passes": published_passes,
        "verification": dict(verification or {}),
        "duplicates": duplicates_entry(table),
        "input_filter": input_filter_entry(table, k),
    }
    from geokanon.report.notes import release_notes

    say("bias and release notes")
    findings = []
    if options.keep:  # nothing to compare otherwise (and no per-record unit labels to build)
        from geokanon.bias import compare_suppressed

        findings = compare_suppressed(
            table.attributes[list(options.keep)], suppressed, subj, unames[ucodes], k
        )
    manifest["bias"] = [f.to_dict() for f in findings]
    sentences = [f.sentence for f in findings if f.significant]
    if options.keep and not sentences:
        overall = [f.sentence for f in findings if f.stratum == "all"]
        sentences = overall or ["No attribute was compared."]
    (rel / "RELEASE_NOTES.md").write_text(release_notes(manifest, units, policy, sentences))
    return manifest


def duplicates_entry(table: Any) -> dict[str, Any]:
    """The manifest's ``duplicates``: exact copies in the input, and what became of them.

    ``copies``: records repeating an earlier record in every column; ``removed``:
    whether they were removed before anything else (``--drop-duplicates``); else each
    counted as a record and, with no ``subject_column``, as a subject of its own.
    """
    return {
        "copies": int(getattr(table, "duplicates", 0)),
        "removed": bool(getattr(table, "duplicates_dropped", False)),
        "subject_column": getattr(table, "subjects", None) is not None,
    }


def input_filter_entry(table: Any, k: int | None) -> dict[str, Any]:
    """The records and units left out or merged on reading, for the manifest or the audit.

    ``excluded_units`` (ids, ``--exclude-units``) and ``excluded_records``;
    ``clipped_records`` (outside the study area, ``--clip``); ``merge_small_units``
    (N or ``None``), ``unit_merges`` (source unit -> merged unit) and
    ``units_left_small`` (below N with no neighbour). Unit ids are public geography; with
    ``k`` (the manifest) a count of 1..k-1 records reads ``<k``, and the audit (``k``
    ``None``) keeps exact counts and the clipped rows. No coordinate or id of a record.
    """
    excluded = tuple(getattr(table, "excluded", ()) or ())
    n_excluded = sum(int(n) for _, n in excluded)
    clipped = int(getattr(table, "clipped", 0) or 0)
    entry: dict[str, Any] = {
        "excluded_units": [str(u) for u, _ in excluded],
        "excluded_records": n_excluded if k is None else mask_small(n_excluded, k),
        "clipped_records": clipped if k is None else mask_small(clipped, k),
        "merge_small_units": getattr(table, "merge_threshold", None),
        "unit_merges": {str(a): str(b) for a, b in getattr(table, "unit_merges", ()) or ()},
        "units_left_small": [str(u) for u in getattr(table, "units_left_small", ()) or ()],
    }
    if k is None:
        entry["excluded_per_unit"] = {str(u): int(n) for u, n in excluded}
        entry["clipped_rows"] = [int(r) for r in getattr(table, "clipped_rows", ()) or ()]
        entry["excluded_rows"] = [int(r) for r in getattr(table, "excluded_rows", ()) or ()]
    return entry


def finish_manifest(
    root: Path, manifest: dict[str, Any], unchanged: dict[str, str] | None = None
) -> dict[str, str]:
    """Add the checksum of every release file and write ``manifest.json``.

    ``unchanged`` maps release files (relative paths) not written since their sha256 was
    taken to that sha256; they are not read again. Returns the checksums.
    """
    rel = root / "release"
    known = unchanged or {}
    files: dict[str, str] = {}
    for p in sorted(rel.rglob("*")):
        if not p.is_file() or p.name == "manifest.json":
            continue
        name = p.relative_to(rel).as_posix()
        files[name] = known[name] if name in known else _sha256(p)
    manifest["files"] = files
    (rel / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return dict(files)


def _claimed_results(deterministic: bool | None) -> dict[str, bool]:
    """The results a writer records in the manifest and the report before its one
    verification run: every check of :data:`geokanon.verify.CHECKS` passed, and
    ``deterministic`` as found (absent when it was not run)."""
    from geokanon.verify import CHECKS

    claimed = {name: True for name in CHECKS}
    if deterministic is not None:
        claimed["deterministic"] = bool(deterministic)
    return claimed


def _confirm_results(
    report: VerificationReport,
    claimed: Mapping[str, bool],
    deterministic: bool | None,
    *,
    details: bool,
) -> dict[str, bool]:
    """The verification's results (``report``, a :class:`geokanon.verify.VerificationReport`,
    with ``deterministic``), required to be exactly the ``claimed`` ones the release
    states; else :class:`VerificationFailed` naming every check that did not pass (with
    each failed check's detail when ``details``: figures only) and nothing is written."""
    checks: dict[str, bool] = report.as_dict()
    if deterministic is not None:
        checks["deterministic"] = bool(deterministic)
    if checks != dict(claimed):
        failed = [n for n in {**claimed, **checks} if not (checks.get(n) and claimed.get(n))]
        said = ""
        if details:
            said = "; ".join(f"{r.name}: {r.detail}" for r in report.checks if not r.passed)
            said = f" ({said})"
        raise VerificationFailed(
            f"the release failed the independent checks {failed}; nothing was written{said}",
            checks,
        )
    return checks


def write_release(
    out: str | Path,
    table: PointTable,
    result: CoreResult,
    policy: OutlierPolicy,
    options: ReleaseOptions,
    *,
    version: str,
    deterministic: bool | None = None,
    source: PointTable | None = None,
    mask_risk: dict[str, Any] | None = None,
    progress: Progress | None = None,
    mask_key: Any = None,
) -> dict[str, Any]:
    """Write the release directory atomically, verified before it appears.

    Parameters
    ----------
    out
        Output directory ``DIR`` (gets ``release/`` and ``audit/``).
    table
        The source records.
    result
        The release core's decisions for ``table``.
    policy, options
        The policy and the writing options.
    version
        Software version recorded in the manifest.
    deterministic
        Result of the determinism check done by the caller (``None``: not checked).
    source
        The unmasked source when ``table`` holds masked coordinates: the leak and
        representation checks search for the true locations.
    mask_risk
        Summary of the mask's spatial k-anonymity, for the manifest.
    mask_key
        The mask's secret key (required with ``options.mask``), kept in
        ``audit/mask_key``; ``no_leak`` fails a release that holds it.
    progress
        Reports the stages ``write`` (steps: records with a count of rows, groups,
        units, audit, notes, checksums), ``report``, ``verify`` (one step per check,
        counted) and ``rename`` (:mod:`geokanon._progress`).

    Returns
    -------
    dict
        The manifest as written.

    Raises
    ------
    VerificationFailed
        An independent check failed; nothing was written.
    InputError
        ``out`` exists and ``force`` is off, another run is writing ``out``, or ``keep``
        names unknown columns.
    WriteError
        ``out`` could not be written (read-only or full filesystem, no permission).
    """
    from geokanon.report.html import build_report, preload_plotting
    from geokanon.verify import verify_release

    def stage(name: str) -> Progress | None:
        # each stage starts from what is held: also the first, as the core's threads leave
        # freed memory in their own arenas (the halves of a sort: +1.1 GB at 1e7)
        _return_free_memory()
        return within(progress, name)

    # (geokanon._outdir, as _atomic_directory; the Build for a database load's commit)
    with claim(Path(out), force=options.force) as held, held.build() as build:
        tmp = build.path
        steps = stage("write")
        # the report's plotting modules load while the files are written (after the stage
        # has handed back what the core freed: a thread started before it kept 0.8 GB more)
        preload_plotting()
        written: dict[str, str] = {}
        manifest = build_release_files(
            tmp, table, result, policy, options, version=version, mask_risk=mask_risk,
            digests=written, mask_key=mask_key, progress=steps,
        )  # fmt: skip
        if steps is not None:
            steps("checksums")
        # The manifest and the report state the checks' results before the checks run:
        # the release is checked once, in its final bytes (report and manifest included),
        # and it is written only if every result is the one stated.
        claimed = _claimed_results(deterministic)
        manifest["verification"] = claimed
        digests = finish_manifest(tmp, manifest, unchanged=written)
        # the audit columns the report draws, as they were just written to assignment.parquet
        audit_columns = {
            "group_id": result.group_id, "x_m": table.x, "y_m": table.y,
            "subject": result.subjects, "iota": result.iota,
        }  # fmt: skip
        build_report(
            tmp, verification=claimed, progress=stage("report"), audit_columns=audit_columns
        )
        # the report writes report.html (and the notes may be rewritten): hash those again
        finish_manifest(
            tmp,
            manifest,
            unchanged={f: d for f, d in digests.items() if f not in _REPORT_WRITES},
        )
        truth = source if source is not None else table
        report = verify_release(tmp, source=truth, progress=stage("verify"), before_report=False)
        _confirm_results(report, claimed, deterministic, details=True)
        if options.database is not None:
            # Loaded into a temporary schema and renamed in one transaction, committed
            # only once DIR (audit and files) is in place: a failure leaves both as they were.
            from geokanon.io.postgis import load_release

            pending = load_release(options.database, tmp / "release", progress=stage("database"))
            build.cleanup.append(pending.close)
            build.after_install.append(pending.commit)
        stage("rename")
    return manifest

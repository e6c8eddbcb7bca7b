"""The partitioned release on Dask: no process ever holds a frame of all records.

:func:`release_partitions` runs the whole release over a partitioned source (a
directory of Parquet files, a Dask DataFrame, or any object with ``__len__`` and
``load(i)``, see :class:`geokanon.distributed.ParquetPartitions`):

1. *Gather* (one task per source partition): each task reads its partition and
   sends back compact per-record arrays only: ``x``, ``y`` (float64), a 64-bit
   hash of the normalised subject id (NFKC, case folded, stripped: the spellings
   of one id are one subject; the distinct raw ids' hashes count the merges), the
   unit codes of the partition and their names, and a
   hash of the kept attributes (the tiebreak). Row ids are implicit: partitions
   are concatenated in their order, so a record's ``source_row`` is its
   partition's offset plus its position.
2. *Core*: :func:`geokanon.distributed.run_core_distributed` on those arrays
   (neighbour searches and grouping as tile tasks, the passes and caps on the
   driver).
3. *Write* (two rounds of tasks). Groups are numbered by the tile of their
   published representative; the published records are cut into parts: every
   part holds whole groups of a contiguous run of tiles (about
   ``records_per_part`` records), or whole generalised classes. Each source
   partition task gets only its slice of the decisions, writes
   ``audit/assignment/part-NNNNN.parquet`` (one per source partition, input
   order) and sends its published rows (with the kept columns) to scratch pieces
   of their part; each part task sorts its pieces and writes
   ``release/records/part-NNNNN.parquet``. The part a record lands in depends on
   published values only (its group's representative, or its class), never on
   where the record is. The small files (``groups.parquet``,
   ``classes.parquet``, ``units.csv``, ``manifest.json``, ``RELEASE_NOTES.md``,
   ``report.html``) are written by the driver from arrays of one entry per
   group, class or unit.
4. *Verify*: :func:`geokanon.verify.partitioned.verify_partitioned`, which re-reads
   the source partitions and the written parts and shares no code with the
   algorithm. It runs once over the final bytes: the manifest and the report (which
   state every check as passed) are written while its source tasks check and route
   their partitions, and those tasks scan the small files only once they are written.
   Any other result refuses the release.
   Everything is built in a hidden sibling directory and renamed into place only
   when every check passed (all or nothing).

Not supported yet (refused with a clear message): masks, times (``t_max_s`` or
published time bins), synthetic records (``allow_synthetic``), an output CRS other
than the input's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import types
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon._outdir import Claim, claim
from geokanon._progress import Progress, within
from geokanon.disposal import CoreResult
from geokanon.distributed import (
    RECORDS_PER_PART,
    Tiling,
    _check_halo,
    _remap,
    _run,
    _single_thread_numba,
    dask_client,
    run_core_distributed,
)
from geokanon.encoding import write_parquet
from geokanon.errors import InputError, ReleaseRefused
from geokanon.io.gis import geo_table, geoparquet_metadata, point_bbox
from geokanon.neighbours import factorize_subject_ids
from geokanon.policy import Disposal, Label, OutlierPolicy
from geokanon.projection import scale_factor_range
from geokanon.release import (
    _AUDIT_ZSTD,
    _REPORT_WRITES,
    FORMAT,
    LT_K,
    WITHHELD,
    ReleaseOptions,
    _atomic_directory,
    _claimed_results,
    _confirm_results,
    _hidden_cells_safe,
    _parquet_writer,
    _points_extent,
    _published_pass,
    _return_free_memory,
    _sha256,
    _tie_order,
    _wkb_points,
    _write_arrow_parquet,
    check_coordinate_frame,
    finish_manifest,
    groups_table,
    mask_small,
    source_totals,
)
from geokanon.verify.partitioned import _by_part  # rows by part, as the verifier routes them

__all__ = ["PartitionedRelease", "release_partitions"]

#: Inputs up to this size get the determinism check (the core re-run on shuffled rows).
DETERMINISM_CHECK_MAX = 250_000
#: Records per chunk of the driver's whole-array steps (bounds their temporaries).
CHUNK = 1_000_000
#: Up to this many records the report's distributions use every record; above, a sample.
REPORT_SAMPLE_MAX = 2_000_000
#: Up to this many records the bias comparison uses every retained record; above, a sample.
BIAS_SAMPLE_MAX = 1_000_000
LEVELS = ("group", "unit", "parent", "area")


@dataclass(frozen=True)
class PartitionedRelease:
    """A written partitioned release: where it is, the core's decisions, the manifest."""

    out: Path
    core: CoreResult
    manifest: dict[str, Any]

    @property
    def counts(self) -> dict[str, int]:
        """Records per final disposal (exact, for the custodian)."""
        return self.core.counts()


@nb.njit(cache=True)
def _mix_bits(a: np.uint64, b: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """The hash of :func:`_mix` of one record (``a``, ``b``: its coordinates' bits)."""
    h = a * np.uint64(0x9E3779B97F4A7C15) ^ (b + np.uint64(0x632BE59BD9B4E019))
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


@nb.njit(cache=True)
def _mix_all(
    a: NDArray[np.uint64], b: NDArray[np.uint64]
) -> NDArray[np.uint64]:  # pragma: no cover - compiled
    """:func:`_mix_bits` of every record (``a``, ``b``: the coordinates' bits)."""
    out = np.empty(a.size, np.uint64)
    for i in range(a.size):
        out[i] = _mix_bits(a[i], b[i])
    return out


def _mix(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.uint64]:
    """A hash of each record's coordinates: a sample independent of rows and partitions."""
    a = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    b = np.ascontiguousarray(y, dtype=np.float64).view(np.uint64)
    return _mix_all(a, b)


# ----------------------------------------------------------------------------
# 1. Gather compact arrays
# ----------------------------------------------------------------------------


def _text_codes(values: pd.Series) -> tuple[NDArray[np.object_], NDArray[np.int64]]:
    """Sorted distinct texts of ``values`` and each value's code, as ``np.unique`` of the
    texts gives them, but converting only the distinct values to text."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    texts = np.asarray([str(v) for v in uniques], dtype=object)
    names, merged = np.unique(texts, return_inverse=True)  # values equal as text merge
    return names.astype(object), merged.astype(np.int64)[codes]


def _raw_texts(values: pd.Series) -> NDArray[np.object_]:
    """The text of each distinct value (``str``), as ids are hashed."""
    uniq = pd.unique(values)
    return np.asarray([str(u) for u in uniq], dtype=object)


def _gather_task(source: Any, i: int, keep: tuple[str, ...]) -> dict[str, Any]:
    """Compact arrays of source partition ``i`` (never a subject id, only its hash)."""
    _single_thread_numba()
    f = source.load(i)
    n = len(f)
    x = f["x"].to_numpy(dtype=np.float64)
    y = f["y"].to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(x) & np.isfinite(y))
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} records of partition {i} have missing, NaN or infinite "
            "coordinates; drop or fix them"
        )
    subj = raw_ids = None
    if "subject" in f.columns:
        raw = f["subject"]
        if raw.isna().any():
            raise InputError(
                f"{int(raw.isna().sum())} records of partition {i} have no subject id; "
                "fill them or drop the subject column"
            )
        # the hash of each id's normalised text (the spellings of one id are one subject),
        # and the hashes of the distinct raw ids (how many were merged)
        codes, texts, _ = factorize_subject_ids(raw)
        subj = np.asarray(pd.util.hash_array(texts), dtype=np.uint64)[codes]
        raw_ids = np.unique(pd.util.hash_array(_raw_texts(raw)))
    if "unit" in f.columns:
        if f["unit"].isna().any():
            raise InputError(
                f"{int(f['unit'].isna().sum())} records of partition {i} have no unit; "
                "fill them or drop the unit column"
            )
        names, codes = _text_codes(f["unit"])
        cr = np.asarray(["\r" in str(u) for u in names.tolist()], dtype=bool)
        if cr.any():  # units.csv leaves it unquoted: the file would not read back
            raise InputError(
                f"{int(cr[codes].sum())} records of partition {i} have a unit holding a "
                "carriage return (\\r), which units.csv cannot hold; remove it from the "
                "names (usually a Windows line end left in a cell)"
            )
    else:
        names, codes = np.asarray(["all"], dtype=object), np.zeros(n, dtype=np.int64)
    tiebreak = None
    # Records at one place are ordered by a hash of their attributes (as on one machine),
    # so the outcome never depends on the order of rows or partitions.
    others = source.other_columns(i) if hasattr(source, "other_columns") else keep
    if keep and not set(keep) <= set(others):
        source.load_attributes(i, keep)  # raises InputError naming the missing columns
    if others:
        attrs = source.load_attributes(i, tuple(others))
        tiebreak = pd.util.hash_pandas_object(attrs, index=False).to_numpy(dtype=np.uint64)
    sha = source.file_sha256(i) if hasattr(source, "file_sha256") else None
    return {
        "n": n, "x": x, "y": y, "subject": subj, "raw_ids": raw_ids,
        "unit_names": names.astype(object),
        "unit_codes": codes.astype(np.int32), "tiebreak": tiebreak, "sha256": sha,
    }  # fmt: skip


@dataclass
class _Gathered:
    sizes: NDArray[np.int64]
    x: NDArray[np.float64]
    y: NDArray[np.float64]
    subjects: NDArray[np.int64] | None
    unit_codes: NDArray[np.int32]
    unit_names: NDArray[np.object_]
    tiebreak: NDArray[np.uint64] | None
    fingerprint: str | None
    subject_ids_merged: int = 0


def _combine(parts: list[dict[str, Any]]) -> _Gathered:
    import hashlib

    sizes = np.asarray([p["n"] for p in parts], dtype=np.int64)
    if int(sizes.sum()) == 0:
        raise InputError("the input has no records; nothing to release")

    def joined(name: str) -> NDArray[Any]:
        # One field at a time, each part's copy dropped as soon as it is joined.
        out = np.concatenate([p[name] for p in parts])
        for p in parts:
            p[name] = None
        return out

    x = joined("x")
    y = joined("y")
    names = np.unique(np.concatenate([p["unit_names"] for p in parts]).astype(str)).astype(object)
    codes = np.empty(x.size, dtype=np.int32)  # fewer units than 2**31
    at = 0
    for p in parts:
        to_global = np.searchsorted(names, p["unit_names"].astype(str))
        codes[at : at + p["n"]] = to_global[p["unit_codes"]]
        at += p["n"]
        p["unit_codes"] = None
    with_subject = [p["subject"] is not None for p in parts]
    if any(with_subject) and not all(with_subject):
        raise InputError("some partitions have the subject column and some do not")
    subject_hash = joined("subject") if all(with_subject) else None
    # the distinct raw ids, to count the spellings merged into one subject
    raw_ids = np.unique(joined("raw_ids")) if all(with_subject) else None
    tb = None
    if parts[0]["tiebreak"] is not None:
        tb = joined("tiebreak")
    # The partitions' copies are dropped: their memory goes back before the key's temporaries.
    _return_free_memory()
    # The content key of every record, as on one machine (attributes, subject id, unit).
    from geokanon.pipeline import content_tiebreak

    tb = content_tiebreak(tb, subject_hash, None, codes)
    subjects = None
    if subject_hash is not None:
        _, subjects = np.unique(subject_hash, return_inverse=True)
        subjects = subjects.astype(np.int64).reshape(-1)
    del subject_hash
    merged = 0
    if raw_ids is not None and subjects is not None:
        merged = int(raw_ids.size) - (int(subjects.max()) + 1 if subjects.size else 0)
    fingerprint = None
    if all(p["sha256"] for p in parts):
        fingerprint = hashlib.sha256("\n".join(p["sha256"] for p in parts).encode()).hexdigest()
    return _Gathered(sizes, x, y, subjects, codes, names, tb, fingerprint, merged)


# ----------------------------------------------------------------------------
# 3. The layout: groups numbered by the tile of their representative
# ----------------------------------------------------------------------------


@dataclass
class _Layout:
    new_of_old: NDArray[np.int64]  # old group id -> published group id
    order: NDArray[np.int64]  # published group id -> old group id
    parts: list[dict[str, Any]]
    group_starts: NDArray[np.int64]  # first group id of every group part
    class_starts: NDArray[np.int64]  # first class id of every class part
    group_sizes: NDArray[np.int64]  # records per published group id
    class_sizes: NDArray[np.int64]  # records per class id


def _plan_parts(core: CoreResult, tiling: Tiling, records_per_part: int) -> _Layout:
    ng = core.group_x.size
    tkey = tiling.tile_keys(core.group_x, core.group_y) if ng else np.zeros(0, np.int64)
    order = np.lexsort((np.arange(ng), tkey)).astype(np.int64)
    new_of_old = np.empty(ng, dtype=np.int64)
    new_of_old[order] = np.arange(ng, dtype=np.int64)
    tkey = tkey[order]
    sizes = np.zeros(ng, dtype=np.int64)
    _count_members(np.asarray(core.group_id), new_of_old, sizes)
    parts: list[dict[str, Any]] = []
    if ng:
        ukeys, start = np.unique(tkey, return_index=True)
        bounds = np.r_[start, ng]
        per_tile = np.add.reduceat(sizes, start) if start.size else np.zeros(0, np.int64)
        first_t = 0
        acc = 0
        for t in range(ukeys.size):
            acc += int(per_tile[t])
            if acc >= records_per_part or t == ukeys.size - 1:
                parts.append({
                    "kind": "group", "first": int(bounds[first_t]), "end": int(bounds[t + 1]),
                    "tile_lo": int(ukeys[first_t]), "tile_hi": int(ukeys[t]), "records": acc,
                })  # fmt: skip
                first_t, acc = t + 1, 0
    c = core.class_id
    nc = len(core.class_level)
    csizes = np.bincount(c[c >= 0], minlength=nc)  # a record has a group or a class, never both
    first_c, acc = 0, 0
    for j in range(nc):
        acc += int(csizes[j])
        if acc >= records_per_part or j == nc - 1:
            parts.append({"kind": "class", "first": first_c, "end": j + 1, "records": acc})
            first_c, acc = j + 1, 0
    for i, p in enumerate(parts):
        p["file"] = f"records/part-{i:05d}.parquet"
    return _Layout(
        new_of_old=new_of_old,
        order=order,
        parts=parts,
        group_starts=np.asarray([p["first"] for p in parts if p["kind"] == "group"], np.int64),
        class_starts=np.asarray([p["first"] for p in parts if p["kind"] == "class"], np.int64),
        group_sizes=sizes,
        class_sizes=csizes.astype(np.int64),
    )


#: The per-record arrays of the core's outcome that the write round reads back.
SPILLED = ("first_labels", "iota", "final_labels", "disposal", "group_id", "class_id", "subjects")
#: The dtype each of these is spilled as when the (compact) core holds it narrower.
WIDE: dict[str, type[np.integer[Any]]] = {
    "group_id": np.int64,
    "class_id": np.int64,
    "subjects": np.int64,
}


class _Spilled:
    """Per-record arrays in scratch ``.npy`` files, read back a slice at a time.

    Once the core has decided, the driver keeps no per-record array in memory:
    each is written here, and every later step (the write tasks, the per-group
    and per-unit tables) reads the slices it needs. A slice is read through a
    map that is closed at once, so no process keeps the pages of a whole array.
    """

    def __init__(self, root: str | Path, n: int) -> None:
        self.root, self.n = Path(root), n

    def put(
        self, name: str, values: NDArray[Any], dtype: type[np.generic] | None = None
    ) -> NDArray[Any]:
        """Write ``values`` (as ``dtype``, converted a chunk at a time, when given and
        different); return a read-only map of the file (no page is read)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{name}.npy"
        if isinstance(values, np.memmap) and Path(str(values.filename)) == path.resolve():
            return values  # already spilled here (the core's iota)
        if dtype is None or values.dtype == dtype or values.ndim != 1:
            np.save(path, values)
        else:  # numpy's own .npy writer, filled a chunk at a time (no wide copy held)
            out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=values.shape)
            for a in range(0, values.size, CHUNK):
                out[a : a + CHUNK] = values[a : a + CHUNK]
            out.flush()
            del out
        return np.load(self.root / f"{name}.npy", mmap_mode="r")

    def get(self, name: str, a: int, b: int) -> NDArray[Any]:
        """A copy of rows ``a:b`` of array ``name``, read into a new array (one read call:
        faster than copying from a map, whose every page is a fault, and nothing stays
        mapped)."""
        with open(self.root / f"{name}.npy", "rb") as fh:
            major, _ = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(fh)
            if fortran and len(shape) > 1:  # never written so here; read it as numpy does
                return np.array(np.load(fh.name, mmap_mode="r")[a:b])
            a, b = min(max(a, 0), shape[0]), min(max(b, 0), shape[0])
            out = np.empty((max(b - a, 0), *shape[1:]), dtype=dtype)
            if out.nbytes:
                fh.seek(fh.tell() + a * (out.nbytes // out.shape[0]))
                got = fh.readinto(out.reshape(-1).view(np.uint8).data)
                if got != out.nbytes:
                    raise OSError(f"scratch file {name}.npy is shorter than its header says")
            return out

    def chunks(self, *names: str) -> Iterator[tuple[int, tuple[NDArray[Any], ...]]]:
        """``(first row, arrays)`` over all rows, ``CHUNK`` rows at a time."""
        for a in range(0, self.n, CHUNK):
            yield a, tuple(self.get(name, a, a + CHUNK) for name in names)


@nb.njit(cache=True)
def _count_members(
    gi: NDArray[np.integer[Any]], new_of_old: NDArray[np.int64], sizes: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """``sizes[new_of_old[g]] += 1`` for every record's group ``g`` (>= 0), in one pass: a
    ``bincount`` of length ``sizes.size`` per chunk of records cost groups x chunks
    (6.6 s at 1e8 records, 18 million groups)."""
    for r in range(gi.size):
        g = gi[r]
        if g >= 0:
            sizes[new_of_old[g]] += 1


def _renumbered(core: CoreResult, layout: _Layout) -> CoreResult:
    """The core with groups numbered as published (by tile): ids rewritten in place."""
    if layout.new_of_old.size:
        _remap(core.group_id, layout.new_of_old)
    return dataclasses.replace(
        core, group_x=core.group_x[layout.order], group_y=core.group_y[layout.order]
    )


#: The dtype pandas gives a column built from an object array of texts (``str``, held in
#: Arrow, under pandas 3; ``object`` before), and the ``"string"`` dtype.
_STR = pd.DataFrame({"t": np.asarray(["t"], dtype=object)})["t"].dtype
_STRING = pd.StringDtype()


def _texts(
    names: NDArray[Any],
    codes: NDArray[np.integer[Any]],
    *,
    missing: NDArray[np.bool_] | None = None,
    dtype: Any = _STR,
) -> Any:
    """``names[codes]`` (rows ``missing``: missing) as the column pandas builds of that
    object array as ``dtype``: the same column, made by one Arrow take when pandas holds
    its texts in Arrow (no Python string per row)."""
    if not (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"):
        col = pd.Series(names[codes], dtype=dtype)
        return col if missing is None else col.where(~missing)
    values = pa.array([str(t) for t in names.tolist()], type=pa.large_string())
    return pd.Series(values.take(pa.array(codes, mask=missing)), dtype=dtype)


def _ids(values: NDArray[np.integer[Any]], present: NDArray[np.bool_]) -> Any:
    """``values`` as a nullable ``Int64`` column, missing where not ``present``."""
    return pd.arrays.IntegerArray(np.where(present, values, 0).astype(np.int64), ~present)


def _published_frame(
    g: NDArray[np.int64],
    c: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    class_level: tuple[str, ...],
    class_unit: tuple[str, ...],
) -> pd.DataFrame:
    """The published columns of records with group ids ``g`` and class ids ``c`` (-1:
    none; a record has one or the other) and coordinates ``x``, ``y`` (NaN for a class):
    the frame every record part is written from."""
    gp, cp = g >= 0, c >= 0
    nc = len(class_level)
    # a group's level is "group"; a class's its own (codes into the classes, then "group")
    levels = np.asarray((*class_level, "group"), dtype=object)
    cunits = np.asarray(class_unit or ("",), dtype=object)
    return pd.DataFrame(
        {
            "group_id": _ids(g, gp),
            "class_id": _ids(c, cp),
            "level": _texts(levels, np.where(gp, nc, c)),
            "unit": _texts(cunits, np.where(cp, c, 0), missing=~cp, dtype=_STRING),
            "x": x,
            "y": y,
        }
    )


def _write_source_part(
    source: Any,
    i: int,
    offset: int,
    n: int,
    pub_xy: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
    state: str,
    meta: dict[str, Any],
    scratch: str,
    audit_dir: str,
) -> dict[str, Any]:
    """Audit part ``i``, and with kept columns the published rows of source partition
    ``i`` as scratch pieces of their record parts; the partition's published count.

    The partition's decisions and coordinates (as gathered) are read from the spilled
    state (its ``n`` rows from ``offset`` on): the partition itself is read again only
    for its kept columns. Its published coordinates (``pub_xy``) come with the task when
    its rows are routed to the record parts (``meta["route"]``)."""
    _single_thread_numba()
    spilled = _Spilled(state, offset + n)
    names = (*SPILLED, "unit_codes", "x", "y")
    sl = {name: spilled.get(name, offset, offset + n) for name in names}
    x, y = sl["x"], sl["y"]
    g, c = sl["group_id"], sl["class_id"]
    at_group, generalised = g >= 0, c >= 0
    unames = meta["unit_names"]
    first_text = np.asarray([lab.text for lab in Label], dtype=object)
    disp_text = np.asarray([d.text for d in Disposal], dtype=object)
    assignment = pd.DataFrame(
        {
            "source_row": offset + np.arange(n, dtype=np.int64),
            "label": _texts(first_text, sl["first_labels"]),
            "disposal": _texts(disp_text, sl["disposal"]),
            "group_id": _ids(g, at_group),
            "class_id": _ids(c, generalised),
            "unit": _texts(unames, sl["unit_codes"]),
            "subject": sl["subjects"],
            "x_m": x,
            "y_m": y,
            "iota": sl["iota"],
        }
    )
    # as the single-file audit is written: text in dictionary pages, numbers plain, fast zstd
    table = pa.Table.from_pandas(assignment, preserve_index=False)
    del assignment
    with _parquet_writer(
        Path(audit_dir) / f"part-{i:05d}.parquet", table.schema, zstd_level=_AUDIT_ZSTD
    ) as writer:
        writer.write_table(table)
    del table
    keep: tuple[str, ...] = meta["keep"]
    attrs = source.load_attributes(i, keep) if keep else None
    if attrs is not None and len(attrs) != n:
        raise InputError(f"partition {i} changed while the release ran; run it again")
    pub = np.flatnonzero(at_group | generalised)
    if not meta["route"]:
        # no kept column: the record parts are made from the groups' and classes' sizes
        # (_generated_part), this partition's published rows are only counted
        return {"n": n, "published": int(pub.size), "bias": None}
    assert pub_xy is not None  # routed rows come with their coordinates
    gp = at_group[pub]
    frame = _published_frame(
        g[pub], c[pub], np.where(gp, pub_xy[0][pub], np.nan),
        np.where(gp, pub_xy[1][pub], np.nan), meta["class_level"], meta["class_unit"],
    )  # fmt: skip
    if attrs is not None:
        for col in keep:
            frame[col] = attrs[col].to_numpy()[pub]
    gs, cs = meta["group_starts"], meta["class_starts"]
    part = np.where(
        at_group[pub],
        np.searchsorted(gs, g[pub], side="right") - 1,
        gs.size + np.searchsorted(cs, c[pub], side="right") - 1,
    )
    if pub.size:
        import pyarrow.feather as feather

        order, up, bounds = _by_part(part)
        # one copy in part order, sliced by part
        table = pa.Table.from_pandas(frame, preserve_index=False).take(order)
        del frame
        for t, p in enumerate(up):
            d = Path(scratch) / f"r{int(p):05d}"
            d.mkdir(parents=True, exist_ok=True)
            rows = table.slice(int(bounds[t]), int(bounds[t + 1] - bounds[t]))
            feather.write_feather(rows, d / f"s{i:06d}.arrow", compression="uncompressed")
    bias = None
    if attrs is not None:
        sup = sl["disposal"] == Disposal.SUPPRESSED
        take = sup | (_mix(x, y) % np.uint64(meta["bias_modulus"]) == 0)
        bias = attrs.loc[take].reset_index(drop=True)
        bias["_sup"] = sup[take]
        bias["_subject"] = sl["subjects"][take]
        bias["_unit"] = unames[sl["unit_codes"][take]].astype(str)
    return {"n": n, "published": int(pub.size), "bias": bias}


def _assemble_part(
    piece_dir: str, out_file: str, keep: tuple[str, ...], geo: dict[str, Any]
) -> tuple[int, str]:
    """Sort one part's pieces by published values and write ``records/part-NNNNN.parquet``;
    its rows and sha256."""
    _single_thread_numba()
    import pyarrow.feather as feather

    pieces = sorted(Path(piece_dir).glob("s*.arrow"))
    # sorted as Arrow: the pieces' columns (and pandas metadata) are the ones the source
    # tasks' frames gave, so the part is what their pandas frame would write
    table = pa.concat_tables([feather.read_table(p) for p in pieces])
    level = table.column("level")
    at = pc.index_in(level, value_set=pa.array(LEVELS, type=level.type))
    rank = pc.fill_null(at, 0).to_numpy().astype(np.int8)
    # Missing ids sort first (as na_position="first"): ids are >= 0.
    gid = pc.fill_null(table.column("group_id"), -1).to_numpy().astype(np.int64, copy=False)
    cid = pc.fill_null(table.column("class_id"), -1).to_numpy().astype(np.int64, copy=False)
    if keep:  # then by kept values, missing first (the order counts demands)
        keys = pd.DataFrame({"_rank": rank, "_g": gid, "_c": cid})
        kept = table.select(list(keep)).to_pandas()
        for col in keep:
            keys[col] = kept[col]
        order = _tie_order(keys)
    else:
        order = np.lexsort((cid, gid, rank))
    table = table.take(order)
    x = table.column("x").to_numpy().astype(np.float64, copy=False)
    y = table.column("y").to_numpy().astype(np.float64, copy=False)
    table = table.append_column("geometry", _wkb_points(x, y)).append_column(
        "bbox", point_bbox(x, y)
    )
    _write_part(table, Path(out_file), geo, x, y)
    # its checksum for the manifest, taken here (in parallel) rather than by the driver
    return int(table.num_rows), _sha256(Path(out_file))


def _write_part(
    table: pa.Table, path: Path, geo: dict[str, Any], x: NDArray[np.float64], y: NDArray[np.float64]
) -> None:
    """A record part, stored as the single-file ``records.parquet`` (numbers plain, text
    in dictionary pages: written about twice as fast as with every column in one), its
    ``geo`` bbox the extent of its own points (``x``, ``y``), as GeoParquet defines it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(table.schema.metadata or {})
    own = {**geo["columns"]["geometry"]}
    own.pop("bbox", None)
    box = _points_extent(x, y)
    if box is not None:
        own["bbox"] = box
    geo = {**geo, "columns": {"geometry": own}}
    meta[b"geo"] = json.dumps(geo, sort_keys=True).encode()
    write_parquet(table.replace_schema_metadata(meta), path)


def _generated_part(
    part: dict[str, Any],
    sizes: NDArray[np.int64],
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    class_level: tuple[str, ...],
    class_unit: tuple[str, ...],
    out_file: str,
    geo: dict[str, Any],
) -> tuple[int, str]:
    """Write record part ``part`` (no kept column) from its groups' or classes' sizes
    (``sizes``: per group or class of the part, in id order; ``gx``, ``gy``: the groups'
    representatives, empty for a class part); its rows and sha256.

    Without a kept column every record of a group (or class) publishes the same row, so
    the part is each group's (class's) row repeated as many times as it has records, in
    the order :func:`_assemble_part` sorts the routed rows into (level, group id, class
    id): the same file, without routing a row."""
    _single_thread_numba()
    first, end = int(part["first"]), int(part["end"])
    ids = np.arange(first, end, dtype=np.int64)
    if part["kind"] == "group":
        g, c = np.repeat(ids, sizes), np.full(int(sizes.sum()), -1, np.int64)
        x, y = np.repeat(gx, sizes), np.repeat(gy, sizes)
    else:
        level = [class_level[i] for i in range(first, end)]
        rank = np.asarray([LEVELS.index(v) if v in LEVELS else 0 for v in level], np.int64)
        order = np.lexsort((ids, rank))
        ids, sizes = ids[order], sizes[order]
        c, g = np.repeat(ids, sizes), np.full(int(sizes.sum()), -1, np.int64)
        x = y = np.full(c.size, np.nan)
    table = pa.Table.from_pandas(
        _published_frame(g, c, x, y, class_level, class_unit), preserve_index=False
    )
    table = table.append_column("geometry", _wkb_points(x, y)).append_column(
        "bbox", point_bbox(x, y)
    )
    _write_part(table, Path(out_file), geo, x, y)
    return int(table.num_rows), _sha256(Path(out_file))


# ----------------------------------------------------------------------------
# The small files, on the driver (one entry per group, class or unit)
# ----------------------------------------------------------------------------


@nb.njit(cache=True)
def _unit_range(
    gi: NDArray[np.integer[Any]],
    uc: NDArray[np.integer[Any]],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    """Each group's smallest and largest unit code so far (``np.minimum.at`` and
    ``np.maximum.at`` over the records with a group, in one pass)."""
    for r in range(gi.size):
        g = gi[r]
        if g >= 0:
            u = np.int64(uc[r])
            if u < lo[g]:
                lo[g] = u
            if u > hi[g]:
                hi[g] = u


def _group_units(
    chunks: Callable[[], Iterable[tuple[NDArray[Any], ...]]], ng: int
) -> NDArray[np.int64]:
    """Majority unit code of every group (ties: the lowest code, i.e. the first unit id).

    ``chunks()`` yields ``(group ids, unit codes)`` of consecutive runs of records
    (it is called twice). Without sorting every record: a group whose members all
    lie in one unit (almost all of them) gets it from a running minimum and
    maximum; only the members of the other groups are counted pair by pair.
    """
    out = np.zeros(ng, dtype=np.int64)
    if ng == 0:
        return out
    lo = np.full(ng, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ng, -1, dtype=np.int64)
    for gi, uc in chunks():
        _unit_range(gi, uc, lo, hi)
    out[hi >= 0] = lo[hi >= 0]
    mixed = (hi >= 0) & (lo != hi)
    if not mixed.any():
        return out
    pg_parts, pu_parts = [], []
    for gi, uc in chunks():
        sel = np.flatnonzero(gi >= 0)
        sel = sel[mixed[gi[sel]]]
        pg_parts.append(gi[sel])
        pu_parts.append(uc[sel].astype(np.int64))
    g, u = np.concatenate(pg_parts), np.concatenate(pu_parts)
    nu = int(u.max()) + 1
    pairs, counts = np.unique(g * nu + u, return_counts=True)
    pg, pu = pairs // nu, pairs % nu
    order = np.lexsort((pu, -counts, pg))
    first = np.r_[True, pg[order][1:] != pg[order][:-1]]
    out[pg[order][first]] = pu[order][first]
    return out


def _units_frame(
    g: _Gathered,
    state: _Spilled,
    group_unit: NDArray[np.int64],
    group_sizes: NDArray[np.int64],
    classes: pd.DataFrame,
    policy: OutlierPolicy,
    totals: str,
    *,
    counts_exact: dict[str, int] | None = None,
    passes: Sequence[dict[str, Any]] = (),
) -> tuple[pd.DataFrame, int | str, int, int]:
    """``units.csv`` (as the single-machine writer), the global figure, and subject totals;
    per-record arrays read from the spilled state a chunk at a time.

    ``counts_exact`` and ``passes`` (the manifest's published passes) are the figures
    the complementary totals are chosen against (:func:`geokanon.release.source_totals`).
    """
    k = policy.k
    unames = g.unit_names
    nu = unames.size
    released = np.bincount(group_unit, weights=group_sizes, minlength=nu).astype(np.int64)
    unit_index = {str(u): i for i, u in enumerate(unames)}
    unit_level = classes[classes["level"] == "unit"]
    for u, size in zip(unit_level["unit"], unit_level["n_records"], strict=True):
        released[unit_index[u]] += int(size)
    records = np.zeros(nu, dtype=np.int64)
    n_subj = 0
    sup_u_parts: list[NDArray[np.int64]] = []
    sup_s_parts: list[NDArray[np.int64]] = []
    for _, (subj, ucodes, disp) in state.chunks("subjects", "unit_codes", "disposal"):
        records += np.bincount(ucodes, minlength=nu)
        n_subj = max(n_subj, int(subj.max()) + 1)
        sup = disp == Disposal.SUPPRESSED
        sup_u_parts.append(ucodes[sup].astype(np.int64))
        sup_s_parts.append(subj[sup])
    sup_codes = np.concatenate(sup_u_parts)
    sup_subj = np.concatenate(sup_s_parts)
    sup_u = np.bincount(np.unique(sup_codes * n_subj + sup_subj) // n_subj, minlength=nu)
    present = records > 0
    order = np.argsort(unames.astype(str), kind="stable")
    order = order[present[order]]
    sup_shown = [mask_small(int(sup_u[i]), k) for i in order]
    units = pd.DataFrame(
        {"unit": unames[order].astype(str), "released": released[order], "suppressed": sup_shown}
    )
    total_sup = int(np.unique(sup_subj).size)
    seen = np.zeros(n_subj, dtype=bool)  # codes: dense, >= 0
    for _, (subj,) in state.chunks("subjects"):
        seen[subj] = True
    total_subjects = int(np.count_nonzero(seen))
    global_shown: int | str = mask_small(total_sup, k)
    n_hidden = sum(v == LT_K for v in sup_shown)
    if (
        totals == "withhold"
        or (global_shown != LT_K and not _hidden_cells_safe(int(global_shown), sup_shown, k))
        or (global_shown == LT_K and n_hidden >= 2)
    ):
        global_shown = WITHHELD
    if totals == "complementary":
        # distinct (unit, subject) pairs, merged chunk by chunk
        pairs = np.zeros(0, dtype=np.int64)
        for _, (subj, ucodes) in state.chunks("subjects", "unit_codes"):
            pairs = np.union1d(pairs, ucodes.astype(np.int64) * n_subj + subj)
        unit_subjects = np.bincount(pairs // n_subj, minlength=nu)
        counts: dict[str, int | str] = dict(counts_exact or {})
        counts["suppressed"] = (
            int(sup_codes.size) if isinstance(global_shown, int) else global_shown
        )
        units["source_total"] = source_totals(
            units, classes, records[order], unit_subjects[order], k=k,
            published={"counts": counts, "synthetic": {"total": 0, "pooled": 0},
                       "passes": list(passes)},
            own_subjects=g.subjects is None, n_records=int(records.sum()),
        )  # fmt: skip
    return units, global_shown, total_sup, total_subjects


def _bias(
    frames: Sequence[pd.DataFrame | None], keep: tuple[str, ...], k: int, n: int
) -> tuple[list[Any], str | None]:
    got = [f for f in frames if f is not None and len(f)]
    if not keep or not got:
        return [], None
    from geokanon.bias import compare_suppressed  # (scipy.stats: 0.8 s to import)

    sample = pd.concat(got, ignore_index=True)
    findings = compare_suppressed(
        sample[list(keep)],
        sample["_sup"].to_numpy(dtype=bool),
        sample["_subject"].to_numpy(dtype=np.int64),
        sample["_unit"].to_numpy(dtype=object),
        k,
    )
    note = None
    if n > BIAS_SAMPLE_MAX:
        note = (
            "every suppressed record against a deterministic sample of the retained records "
            f"(1 in {max(1, n // BIAS_SAMPLE_MAX)}: the input's records divided by "
            f"{BIAS_SAMPLE_MAX:,}, rounded down, at least 1; chosen by a hash of the coordinates)"
        )
    return findings, note


def _report_sample(
    gid: NDArray[np.int64], x: NDArray[np.float64], y: NDArray[np.float64], m: int
) -> NDArray[np.int64]:
    """Rows of the report's sample: members of 1 in ``m`` groups (by id), and 1 in ``m``
    other records (by a hash of the coordinates, :func:`_mix`); one compiled pass, no
    temporary per record."""
    return _sample_rows(
        np.ascontiguousarray(gid, dtype=np.int64),
        np.ascontiguousarray(x, dtype=np.float64).view(np.uint64),
        np.ascontiguousarray(y, dtype=np.float64).view(np.uint64),
        np.int64(m),
    )


@nb.njit(cache=True)
def _sample_rows(
    gid: NDArray[np.int64], xb: NDArray[np.uint64], yb: NDArray[np.uint64], m: np.int64
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    out = np.empty(gid.size, np.int64)
    um = np.uint64(m)
    n = 0
    for i in range(gid.size):
        g = gid[i]
        if (g >= 0 and g % m == 0) or (g < 0 and _mix_bits(xb[i], yb[i]) % um == 0):
            out[n] = i
            n += 1
    return out[:n].copy()


@dataclass
class _ReportSample:
    table: pa.Table  # the assignment rows the report is drawn from
    picked: NDArray[np.int64] | None  # the sampled groups (None: every group)
    note: str
    #: the manifest's ``report_sample`` (None: the report is drawn from every record)
    entry: dict[str, int] | None = None


def _take_report_sample(state: _Spilled, ng: int) -> _ReportSample:
    """The records the report is drawn from (every one up to :data:`REPORT_SAMPLE_MAX`,
    else a deterministic sample), read from the spilled state a chunk at a time."""
    n = state.n
    note = "every record"
    picked = None
    m = 1
    if n > REPORT_SAMPLE_MAX:
        m = max(2, n // REPORT_SAMPLE_MAX)
        picked = np.flatnonzero(np.arange(ng) % m == 0)
        note = (
            # not the input size itself: with the released counts it would give the
            # suppressed total; m is a bucket of it (docs/release-format.md)
            f"a deterministic sample of {{size:,}} records (every member of 1 in {m} groups, "
            "chosen by group id, and 1 in that many other records, chosen by a hash of the "
            f"coordinates: the input's records divided by {REPORT_SAMPLE_MAX:,}, rounded down, "
            "at least 2; the map shows the sampled groups); record counts in the histograms "
            "are the sample's"
        )
    cols: dict[str, list[NDArray[Any]]] = {
        k: [] for k in ("group_id", "subject", "x_m", "y_m", "iota", "disposal")
    }
    names = ("group_id", "subjects", "x", "y", "iota", "disposal")
    for _, (gi, subj, x, y, iota, disp) in state.chunks(*names):
        take = _report_sample(gi, x, y, m) if m > 1 else slice(None)
        for key, v in zip(cols, (gi, subj, x, y, iota, disp), strict=True):
            cols[key].append(v[take])
    joined = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    gid = joined["group_id"].astype(np.int64)
    if picked is not None:
        # the sampled groups, numbered 0.. in the report's own copy of groups.parquet
        renumber = np.full(ng, -1, dtype=np.int64)
        renumber[picked] = np.arange(picked.size)
        gid = np.where(gid >= 0, renumber[np.maximum(gid, 0)], -1)
    # as Arrow columns (the report reads them so: no pandas frame of the sample's rows)
    disposal = pa.array(["published", "suppressed"], type=pa.large_string())
    table = pa.table(
        {
            "group_id": pa.array(gid, mask=gid < 0),
            "subject": joined["subject"].astype(np.int64, copy=False),
            "x_m": joined["x_m"].astype(np.float64, copy=False),
            "y_m": joined["y_m"].astype(np.float64, copy=False),
            "iota": joined["iota"].astype(np.float64, copy=False),
            # the report's isolation ratios leave suppressed records out when their number
            # is hidden (a histogram of every record would bound it)
            "disposal": disposal.take((joined["disposal"] == Disposal.SUPPRESSED).astype(np.int8)),
        }
    )
    entry = None
    if picked is not None:
        # what the verifier recomputes from the audit (docs/release-format.md)
        entry = {"records": table.num_rows, "every": m, "divisor": REPORT_SAMPLE_MAX}
    return _ReportSample(table, picked, note.format(size=table.num_rows), entry)


def _rows_of(path: Path, rows: NDArray[np.int64]) -> pa.Table:
    """Rows ``rows`` (ascending positions) of a Parquet file, read one row group at a time:
    only one row group and the rows taken are held (not the whole file, whose ``bbox``
    structs and WKB geometry would become a Python object per row in pandas)."""
    pf = pq.ParquetFile(path)
    pieces = []
    start = 0
    for i in range(pf.metadata.num_row_groups):
        size = pf.metadata.row_group(i).num_rows
        a, b = np.searchsorted(rows, [start, start + size])
        if b > a:
            pieces.append(pf.read_row_group(i).take(pa.array(rows[a:b] - start)))
        start += size
    return pa.concat_tables(pieces) if pieces else pf.schema_arrow.empty_table()


def _scratch_parquet(table: pa.Table, path: Path) -> None:
    """``table`` as a Parquet file the report reads (not published): uncompressed, no
    statistics, only its text columns dictionary-encoded (fastest to write and to read
    back; the values and types read are the same)."""
    texts = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    pq.write_table(table, path, compression="none", use_dictionary=texts, write_statistics=False)


def _report(root: Path, sample: _ReportSample, checks: dict[str, bool], scratch: Path) -> None:
    """``report.html`` from the sample taken by :func:`_take_report_sample`, with
    :func:`geokanon.report.html.build_report`."""
    from geokanon.report.html import build_report

    work = scratch / "report"
    (work / "release").mkdir(parents=True)
    (work / "audit").mkdir()
    names = ["manifest.json", "units.csv", "classes.parquet"]
    if sample.picked is None:
        names.append("groups.parquet")
    for name in names:
        shutil.copyfile(root / "release" / name, work / "release" / name)
    shutil.copyfile(root / "audit" / "audit.json", work / "audit" / "audit.json")
    if sample.picked is not None:
        # the sampled groups' rows, numbered 0.. (as Arrow: no Python object per
        # geometry and bbox)
        groups = _rows_of(root / "release" / "groups.parquet", sample.picked)
        at = groups.schema.get_field_index("group_id")
        ids = pa.array(np.arange(sample.picked.size, dtype=np.int64))
        _scratch_parquet(
            groups.set_column(at, "group_id", ids), work / "release" / "groups.parquet"
        )
        del groups
    _scratch_parquet(sample.table, work / "audit" / "assignment.parquet")
    path = build_report(work, verification=checks)
    text = path.read_text(encoding="utf-8")
    para = (
        '<p class="mute" id="partitioned-note">This release was written in parts on a Dask '
        f"cluster. The distributions below are computed from {sample.note}, held as compact "
        "arrays by the driver; the per-unit table and the counts use every record.</p>"
    )
    text = text.replace("<h2>Distributions</h2>", para + "<h2>Distributions</h2>", 1)
    (root / "release" / "report.html").write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------
# The whole release
# ----------------------------------------------------------------------------


def release_partitions(
    source: Any,
    policy: OutlierPolicy,
    out: str | Path,
    options: ReleaseOptions | None = None,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    roles: dict[str, str | None] | None = None,
    crs: str | None = None,
    scratch_dir: str | Path | None = None,
    records_per_part: int = RECORDS_PER_PART,
    check_determinism: bool | None = None,
    progress: Progress | None = None,
) -> PartitionedRelease:
    """See :func:`geokanon.distributed.release_partitions` (the documented entry point)."""
    from geokanon.distributed import _is_dask_frame, frame_source

    options = options or ReleaseOptions()
    out = Path(out)
    if _is_dask_frame(source):
        source = frame_source(source, roles or {})
    if options.mask is not None:
        raise InputError("the partitioned release does not apply masks yet; mask the input first")
    if getattr(policy, "allow_synthetic", False):
        raise InputError(
            "the partitioned release does not synthesise records yet; drop allow_synthetic, "
            "or release one file with --backend local"
        )
    if policy.uses_time or getattr(source, "time", None) is not None:
        raise InputError(
            "the partitioned release does not handle times yet (t_max_s, published time bins); "
            "drop the time column, or release one file with --backend local"
        )
    if options.output_crs is not None and options.output_crs != crs:
        raise InputError("the partitioned release publishes in the input's CRS; drop --output-crs")
    check_coordinate_frame(crs, options)  # before any work: a CRS or local metres
    if isinstance(records_per_part, bool) or records_per_part < 1:
        raise InputError(f"records_per_part must be >= 1, got {records_per_part!r}")
    # Held from the start: a second run to ``out`` stops at once, and the parent's
    # leftovers of killed runs are removed before anything else (geokanon._outdir).
    with claim(out, force=options.force, what="release (partitioned)") as held:
        return _release_held(
            held, source, policy, out, options, tiling=tiling, client=client,
            scheduler=scheduler, n_workers=n_workers, crs=crs, scratch_dir=scratch_dir,
            records_per_part=records_per_part, check_determinism=check_determinism,
            progress=progress,
        )  # fmt: skip


def _release_held(
    held: Claim,
    source: Any,
    policy: OutlierPolicy,
    out: Path,
    options: ReleaseOptions,
    *,
    tiling: Tiling | None,
    client: Any,
    scheduler: str | None,
    n_workers: int | None,
    crs: str | None,
    scratch_dir: str | Path | None,
    records_per_part: int,
    check_determinism: bool | None,
    progress: Progress | None,
) -> PartitionedRelease:
    """:func:`release_partitions` once ``out`` is held."""
    from geokanon import __version__
    from geokanon.io.read import same_rows
    from geokanon.pipeline import _same_decisions, _write_refusal
    from geokanon.report.html import preload_plotting
    from geokanon.report.notes import release_notes
    from geokanon.verify.partitioned import SCOPE, verify_partitioned

    # the report's plotting modules load on the driver while the workers run the core
    preload_plotting()
    say = progress or (lambda _stage: None)
    tiling = tiling or Tiling.for_policy(policy)
    _check_halo(tiling, policy)
    keep = tuple(options.keep)
    # The spilled state holds the true coordinates: by default it lives in the private
    # build area beside ``out``, which the next run tidies if this one is killed.
    if scratch_dir is None:
        scratch = held.private_dir("scratch")
    else:
        scratch = Path(scratch_dir) / f"geokanon-release-{uuid.uuid4().hex[:12]}"
        scratch.mkdir(parents=True)
    try:
        with (
            dask_client(client, scheduler=scheduler, n_workers=n_workers) as c,
            _frozen_heap(),
        ):
            say(f"gather compact arrays from {len(source)} partitions")
            g = _combine(_run(c, _gather_task, [(source, i, keep) for i in range(len(source))]))
            _return_free_memory()  # the partitions' copies, joined: the core starts lower
            n = g.x.size
            # r_max on the ground: the named CRS's smallest scale over the data (the
            # halo, from the policy's larger search radius before this, stays wide enough)
            low = scale_factor_range(g.x, g.y, crs, pad_m=policy.r_max_m).low
            if low < policy.scale_factor_min:
                policy = policy.replace(scale_factor_min=low)
            if check_determinism is None:
                check_determinism = n <= DETERMINISM_CHECK_MAX
            # Without the determinism check nothing here needs the tiebreak after the core:
            # it is handed over, and the core lets it go before generalising.
            tiebreak = g.tiebreak
            if not check_determinism:
                g.tiebreak = None
            held_tb = [tiebreak]
            del tiebreak
            try:
                core = run_core_distributed(
                    g.x, g.y, policy, subjects=g.subjects, unit_codes=g.unit_codes,
                    unit_names=g.unit_names, tiebreak=held_tb.pop(), tiling=tiling, client=c,
                    progress=within(progress, "release core on tiles"),
                    spill_dir=scratch / "state", compact=True,
                )  # fmt: skip
            except ReleaseRefused as exc:
                _write_refusal(out, exc, types.SimpleNamespace(source_sha256=g.fingerprint), policy)  # type: ignore[arg-type]
                raise
            deterministic = None
            if check_determinism:
                perm = np.random.default_rng(policy.seed).permutation(n)
                again = run_core_distributed(
                    g.x[perm], g.y[perm], policy,
                    subjects=None if g.subjects is None else g.subjects[perm],
                    unit_codes=g.unit_codes[perm], unit_names=g.unit_names,
                    tiebreak=None if g.tiebreak is None else g.tiebreak[perm],
                    tiling=tiling, client=c,
                    progress=within(progress, "determinism check (shuffled rows)"),
                )  # fmt: skip
                # records equal in every column: coordinates and the content key (which
                # holds the subject id, the unit and the attributes)
                same = same_rows(g.x, g.y, {"key": g.tiebreak, "subject": g.subjects})
                deterministic = _same_decisions(core, again, perm, same)
                del again, same
            layout = _plan_parts(core, tiling, records_per_part)
            core = _renumbered(core, layout)
            layout.new_of_old = layout.order = np.zeros(0, dtype=np.int64)
            counts_exact = core.counts()
            # From here on the driver holds no per-record array: each is written to scratch
            # and read back a slice at a time (the returned core maps the files, unread).
            state = _Spilled(scratch / "state", n)  # holds the core's iota already
            # the compact core's int32 ids are written as int64 (the files, the audit
            # columns and the returned core as without ``compact``)
            maps: dict[str, Any] = {
                name: state.put(name, getattr(core, name), WIDE.get(name)) for name in SPILLED
            }
            core = dataclasses.replace(core, **maps)
            if g.subjects is not None:
                g.subjects = core.subjects  # the same codes (dense already), mapped
            g.unit_codes = state.put("unit_codes", g.unit_codes)
            state.put("x", g.x)
            state.put("y", g.y)
            g.x = g.y = np.zeros(0)
            g.tiebreak = None
            _return_free_memory()
            with _atomic_directory(out, options.force) as tmp:
                manifest, sample, part_digests = _write_all(
                    tmp, c, source, g, core, counts_exact, state, layout, policy, options,
                    tiling, scratch, crs=crs, version=__version__, say=say, notes=release_notes,
                )  # fmt: skip
                if sample.entry is not None:
                    manifest["report_sample"] = sample.entry
                _return_free_memory()
                # The manifest and the report state the checks' results before the checks
                # run: the release is checked once, in its final bytes (report and manifest
                # included), and written only if every result is the one stated.
                claimed = _claimed_results(deterministic)
                manifest["verification"] = claimed
                manifest["verification_scope"] = dict(SCOPE)
                if deterministic is None:
                    manifest["verification_not_run"] = {
                        # not the input size itself: with the released counts it would
                        # give the suppressed total (see docs/release-format.md)
                        "deterministic": f"the input has more than {DETERMINISM_CHECK_MAX:,} "
                        "records: the second core run on shuffled rows is skipped (pass "
                        "check_determinism=True to run it)"
                    }
                # every file is hashed once; the report's files again after it
                digests = finish_manifest(tmp, manifest, unchanged=part_digests)

                def write_report() -> None:
                    say("report")
                    _report(tmp, sample, claimed, scratch)
                    finish_manifest(
                        tmp,
                        manifest,
                        unchanged={f: d for f, d in digests.items() if f not in _REPORT_WRITES},
                    )
                    say("verify the parts against the source partitions")

                # the report is written while the verification's source tasks check and
                # route their partitions (they scan the small files once it is written)
                report = verify_partitioned(
                    tmp, source=source, client=c, scratch_dir=scratch, before_scan=write_report
                )
                _confirm_results(report, claimed, deterministic, details=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with contextlib.suppress(Exception):
        from geokanon.pipeline import _remove_refusal

        _remove_refusal(out)
    return PartitionedRelease(out=out, core=core, manifest=manifest)


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """The objects alive now (modules, the cluster's client and scheduler: some 200,000)
    left out of Python's cyclic garbage collection while the block runs (``gc.freeze``).

    A full collection otherwise traverses every one of them each time, about 0.1 CPU s
    here, and the driver runs many (its message threads allocate, and the writer collects
    cycles between stages); with them frozen a collection sees only what the release made.
    Nothing is lost: objects that die meanwhile are collected once the block ends. A
    caller's own freeze is left as it is."""
    import gc

    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _write_all(
    root: Path,
    c: Any,
    source: Any,
    g: _Gathered,
    core: CoreResult,
    counts_exact: dict[str, int],
    state: _Spilled,
    layout: _Layout,
    policy: OutlierPolicy,
    options: ReleaseOptions,
    tiling: Tiling,
    scratch: Path,
    *,
    crs: str | None,
    version: str,
    say: Callable[[str], None],
    notes: Callable[..., str],
) -> tuple[dict[str, Any], _ReportSample, dict[str, str]]:
    """Every file of the release under ``root`` (a hidden build directory) but
    ``manifest.json`` and the report; returns the manifest's content (the caller adds
    the results the verifier must confirm, then writes it with every file's checksum),
    the report's sample, and the record parts' checksums (taken by the tasks that wrote
    them). The core's per-record arrays are read from ``state`` (with groups numbered as
    published)."""
    keep = tuple(options.keep)
    rel, aud = root / "release", root / "audit"
    (rel / "records").mkdir(parents=True)
    (aud / "assignment").mkdir(parents=True)
    n = state.n
    gx, gy = core.group_x, core.group_y
    ng = gx.size
    offsets = np.r_[0, np.cumsum(g.sizes)]
    meta = {
        "unit_names": g.unit_names,
        "class_level": tuple(core.class_level),
        "class_unit": tuple(core.class_unit),
        "group_starts": layout.group_starts,
        "class_starts": layout.class_starts,
        "keep": keep,
        "bias_modulus": max(1, n // BIAS_SAMPLE_MAX),
        # kept columns tell a group's records apart: their rows are routed to the parts
        "route": bool(keep),
    }
    pieces = scratch / "pieces"

    def payload(i: int) -> tuple[Any, ...]:
        # Built when its task is submitted: the driver never holds every partition's slice.
        # The task reads the partition's decisions from the spilled state itself.
        a, b = int(offsets[i]), int(offsets[i + 1])
        pub = None
        if keep:
            gi = state.get("group_id", a, b)
            pub = (
                np.where(gi >= 0, gx[np.maximum(gi, 0)] if ng else np.nan, np.nan),
                np.where(gi >= 0, gy[np.maximum(gi, 0)] if ng else np.nan, np.nan),
            )
        return (
            source, i, a, b - a, pub, str(state.root), meta, str(pieces), str(aud / "assignment")
        )  # fmt: skip

    # GeoParquet 1.1; every published point is a group's representative: their extent
    geo = geoparquet_metadata(crs, ["Point"], _points_extent(gx, gy))
    part_tasks: list[tuple[Any, ...]]
    if keep:
        part_func: Callable[..., tuple[int, str]] = _assemble_part
        part_tasks = [(str(pieces / f"r{j:05d}"), str(rel / p["file"]), keep, geo)
                      for j, p in enumerate(layout.parts)]  # fmt: skip
        say(f"write {len(g.sizes)} audit parts and route published records")
    else:
        part_func = _generated_part
        part_tasks = [_generated_payload(p, layout, core, str(rel / p["file"]), geo)
                      for p in layout.parts]  # fmt: skip
        say(f"write {len(g.sizes)} audit parts and {len(layout.parts)} record parts")
    # A payload is a whole partition's slice of the decisions: one in flight per worker, plus one.
    window = None if c is None else len(c.scheduler_info().get("workers", {})) + 1
    # The rounds of tasks run beside the driver's own steps (the files of one row per
    # group, class or unit; the report's sample), which need neither round's output.
    # Record parts made from the sizes alone (no kept column) need nothing of the audit
    # round either: the two rounds run at once.
    with contextlib.ExitStack() as rounds:
        audits = (payload(i) for i in range(len(g.sizes)))
        audit_round = rounds.enter_context(_beside(_run, c, _write_source_part, audits, window))
        part_round = None
        if not keep:
            part_round = rounds.enter_context(_beside(_run, c, part_func, part_tasks))
        sample = _take_report_sample(state, ng)
        group_unit, classes = _group_and_class_files(
            rel, g, core, state, layout, policy, crs
        )  # fmt: skip
        written = audit_round.result()
        if part_round is None:
            say(f"write {len(layout.parts)} record parts")
            part_round = rounds.enter_context(_beside(_run, c, part_func, part_tasks))
        manifest = _small_files(
            rel, aud, g, core, counts_exact, state, layout, policy, options, tiling,
            written, group_unit, classes,
            roles=dict(getattr(source, "roles", lambda: {})()), crs=crs, version=version,
            notes=notes,
        )  # fmt: skip
        rows_and_digests = part_round.result()
    shutil.rmtree(pieces, ignore_errors=True)
    manifest["records_published"] = int(sum(r for r, _ in rows_and_digests))
    if manifest["records_published"] != sum(w["published"] for w in written):
        raise RuntimeError(  # the parts' sizes and the records' decisions disagree: a bug
            "the record parts hold another number of rows than the records published"
        )
    digests = {str(p["file"]): d for p, (_, d) in zip(layout.parts, rows_and_digests, strict=True)}
    return manifest, sample, digests


def _generated_payload(
    part: dict[str, Any], layout: _Layout, core: CoreResult, out_file: str, geo: dict[str, Any]
) -> tuple[Any, ...]:
    """The arguments of :func:`_generated_part` for ``part``."""
    a, b = int(part["first"]), int(part["end"])
    if part["kind"] == "group":
        sizes, gx, gy = layout.group_sizes[a:b], core.group_x[a:b], core.group_y[a:b]
    else:
        sizes, gx, gy = layout.class_sizes[a:b], np.zeros(0), np.zeros(0)
    return (part, sizes, gx, gy, tuple(core.class_level), tuple(core.class_unit), out_file, geo)


@contextlib.contextmanager
def _beside(func: Callable[..., Any], *args: Any) -> Iterator[Future[Any]]:
    """``func(*args)`` in a thread while the block runs (the driver's own steps, while
    the workers run a round of tasks); leaving the block waits for it, also on an error
    (no task writes into a scratch directory that is being removed)."""
    with ThreadPoolExecutor(1, thread_name_prefix="geokanon-round") as pool:
        future = pool.submit(func, *args)
        try:
            yield future
        finally:
            wait([future])


def _group_and_class_files(
    rel: Path,
    g: _Gathered,
    core: CoreResult,
    state: _Spilled,
    layout: _Layout,
    policy: OutlierPolicy,
    crs: str | None,
) -> tuple[NDArray[np.int64], pd.DataFrame]:
    """``groups.parquet`` and ``classes.parquet`` (the sizes are the layout's); each group's
    majority unit, and the classes' table (for ``units.csv``)."""
    gx, gy = core.group_x, core.group_y
    ng = gx.size
    nc = len(core.class_level)
    group_sizes, class_sizes = layout.group_sizes, layout.class_sizes
    group_unit = _group_units(
        lambda: (pair for _, pair in state.chunks("group_id", "unit_codes")), ng
    )
    groups = groups_table(
        group_sizes, gx, gy, policy.r_max_m, group_unit, [str(u) for u in g.unit_names]
    )
    # GeoParquet: the representative as the geometry (the layout publishes in its own CRS)
    _write_arrow_parquet(geo_table(groups, (gx, gy), crs), rel / "groups.parquet")
    del groups
    classes = pd.DataFrame(
        {
            "class_id": np.arange(nc, dtype=np.int64),
            "level": list(core.class_level),
            "unit": list(core.class_unit),
            "n_records": class_sizes,
        }
    )
    # the layout takes units from a column: no unit polygons, so no class geometry
    _write_arrow_parquet(
        geo_table(
            pa.Table.from_pandas(classes, preserve_index=False),
            np.full(nc, None, dtype=object),
            crs,
        ),
        rel / "classes.parquet",
    )
    return group_unit, classes


def _small_files(
    rel: Path,
    aud: Path,
    g: _Gathered,
    core: CoreResult,
    counts_exact: dict[str, int],
    state: _Spilled,
    layout: _Layout,
    policy: OutlierPolicy,
    options: ReleaseOptions,
    tiling: Tiling,
    written: list[dict[str, Any]],
    group_unit: NDArray[np.int64],
    classes: pd.DataFrame,
    *,
    roles: dict[str, Any],
    crs: str | None,
    version: str,
    notes: Callable[..., str],
) -> dict[str, Any]:
    """``units.csv``, ``audit.json`` and ``RELEASE_NOTES.md``; the manifest's content
    (but ``records_published``, the record parts' rows)."""
    k = policy.k
    keep = tuple(options.keep)
    crs_note = check_coordinate_frame(crs, options)
    n = state.n
    ng = core.group_x.size
    nc = len(core.class_level)
    published_passes = [_published_pass(p.to_dict(), k) for p in core.passes]
    units, global_shown, total_sup, total_subjects = _units_frame(
        g, state, group_unit, layout.group_sizes, classes, policy, options.totals,
        counts_exact=dict(counts_exact), passes=published_passes,
    )  # fmt: skip
    units.to_csv(rel / "units.csv", index=False, lineterminator="\n")

    counts: dict[str, int | str] = dict(counts_exact)
    counts["suppressed"] = (
        counts_exact["suppressed"] if isinstance(global_shown, int) else global_shown
    )
    counts["synthetic"] = 0
    share: float | str = (
        total_sup / total_subjects if isinstance(global_shown, int) else global_shown
    )
    audit = {
        "working_crs": crs,
        "output_crs": crs,
        "read_options": {**roles, **({"crs": crs} if crs else {})},
        "counts": counts_exact,
        "suppressed_subjects": total_sup,
        "subjects": total_subjects,
        "per_unit": core.units.rows(),
        "passes": published_passes,
        "passes_exact": [p.to_dict() for p in core.passes],
        "mask": None,
        "mask_risk": None,
        "partitioned": {
            "source_parts": len(g.sizes),
            "rows_per_source_part": [int(s) for s in g.sizes],
            "tiling": {
                "tile_m": tiling.tile_m,
                "halo_m": tiling.halo_m,
                "origin_x": tiling.origin_x,
                "origin_y": tiling.origin_y,
            },
            "parts": layout.parts,
        },
    }
    (aud / "audit.json").write_text(json.dumps(audit, indent=2, sort_keys=True) + "\n")
    findings, bias_note = _bias([w["bias"] for w in written], keep, k, n)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "layout": "partitioned",
        "version": version,
        "k": k,
        "r_max_m": policy.r_max_m,
        "tau": policy.tau,
        "unit_cap": policy.unit_cap,
        "policy": policy.to_dict(),
        "seed": policy.seed,
        "crs": crs,
        **({"crs_note": crs_note} if crs_note is not None else {}),
        # the CRS of every file that holds coordinates (the parts under records/)
        "file_crs": dict.fromkeys(("records/", "groups.parquet", "classes.parquet"), crs),
        "local_metres": options.local_metres,
        "input_sha256": g.fingerprint,
        "subject_ids_merged": g.subject_ids_merged,
        "totals": options.totals,
        "keep": list(keep),
        "record_parts": len(layout.parts),
        "groups": int(ng),
        "classes": int(nc),
        "counts": counts,
        "suppressed_share": share,
        "synthetic": {"total": 0, "per_unit": {}},
        "mask": None,
        "mask_risk": None,
        "passes": published_passes,
        "verification": {},
        "bias": [f.to_dict() for f in findings],
    }
    if bias_note is not None:
        manifest["bias_sample"] = bias_note
    sentences = [f.sentence for f in findings if f.significant]
    if keep and not sentences:
        overall = [f.sentence for f in findings if f.stratum == "all"]
        sentences = overall or ["No attribute was compared."]
    (rel / "RELEASE_NOTES.md").write_text(notes(manifest, units, policy, sentences))
    return manifest

"""The value-scanning rules of ``no_leak``, shared by both layouts.

What a source value is (:class:`Secrets`), what each published column legitimately
holds (:func:`column_rules`), the numbers a release publishes (:func:`published_values`)
and the scanners of each kind of file (:func:`scan_parquet`, :func:`scan_csv`,
:func:`scan_text`, :func:`scan_html`, ...). The check itself, for a single-file
release, is :func:`geokanon.verify.no_leak.check_no_leak` (whose docstring states the
rule); the partitioned driver (:mod:`geokanon.verify.partitioned`) builds its
:class:`Secrets` per part and runs the same scanners.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import html
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.published import GPKG_OWN_COLUMNS, GPKG_STYLE_COLUMNS
from geokanon.verify import _reader
from geokanon.verify._arrays import (
    count_ids,
    dict_indices,
    distinct_values,
    finite_extent,
    in_sorted,
    in_sorted_ascending,
    isin,
    near_sorted,
    np_bool,
    same_values,
    sort_floats,
    wkb_points,
)
from geokanon.verify._once import cached
from geokanon.verify._reader import (
    LESS_THAN_K,
    WITHHELD,
    ReleaseReader,
    Source,
    audit_filter,
    ns_to_s,
    read_ahead,
    wallclock_seconds,
)
from geokanon.verify._results import Unreadable
from geokanon.verify.containers import gpkg_container_problems, parquet_container_problems
from geokanon.verify.holes import holes_system_and_published, release_system_inputs

# ---- no_leak ---------------------------------------------------------------------------
#
# Membership tests sort instead of hashing: the sets of secrets are sorted once, and the
# values a file holds are sorted and de-duplicated before they are looked up, so each
# column costs one sort. Text columns are judged value by value on their distinct
# values (Parquet stores them dictionary-encoded) and weighted by how often each occurs.
# Parquet and CSV files are read in batches of rows: every finding is a count over rows
# or a property of a column's set of distinct values, so the figures of the batches add
# up to those of the whole file, and memory stays that of one batch.

ROW_NAMES = frozenset(
    {
        "source_row",
        "row",
        "row_id",
        "row_number",
        "rownum",
        "record_id",
        "point_id",
        "fid",
        "index",
        "level_0",
        "__index_level_0__",
    }
)


STRUCTURAL = frozenset(
    {
        "x",
        "y",
        "geometry",
        "group_id",
        "class_id",
        "n_records",
        "radius_m",
        "released",
        "suppressed",
        "source_total",
        "level",
        "unit",
    }
)


#: Column names the release format itself gives (its tables', release.gpkg's own and its
#: ``layer_styles``' QGIS columns): never judged by their name, however a source column is
#: called (a subject column named ``owner`` or an id column ``fid``); their values still are.
FORMAT_NAMES = frozenset(
    n.lower() for n in (*STRUCTURAL, "time_bin", "bbox", *GPKG_OWN_COLUMNS, *GPKG_STYLE_COLUMNS)
)


_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w]|\.\d)")


_DATETIME = re.compile(
    r"\d{4}[-/]\d{2}[-/]\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)

#: Published time bins (``2008-10-23T02:00Z/PT3600S``): epoch-aligned bin starts are
#: boundaries, not raw times, and are removed before timestamps are searched.
_TIME_BIN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z/PT\d+S")


TOKEN_SPLIT = re.compile(r"[\s,;|<>\"'=(){}\[\]]+")


def _sig_digits(text: str) -> int:
    t = text.strip().lstrip("+-")
    mant = re.split(r"[eE]", t, maxsplit=1)[0]
    return len(mant.replace(".", "").strip("0"))


@dataclass
class Secrets:
    """Sensitive values to look for, in comparable form."""

    px: NDArray[np.float64]  # source (x, y) pairs in the output CRS, exact
    py: NDArray[np.float64]
    coords: NDArray[np.float64]  # every source x and y value (of finite pairs), sorted
    subject_ids: frozenset[str]
    spaced_ids: tuple[str, ...]
    epoch: NDArray[np.float64]  # source times, epoch seconds, sorted
    wall: NDArray[np.float64]  # source times, wall-clock seconds, sorted
    bad_names: frozenset[str]
    n_k: int
    near: Any = None  # cKDTree of transformed source pairs when exact ones are unknown
    near_tol: float = 0.0
    #: the non-integral values of ``coords`` (not needed: a value of ``coords`` is one of
    #: them exactly when it is not integral itself)
    frac_coords: NDArray[np.float64] | None = None
    #: the source pairs as (x, y) arrays, in place of ``px``/``py`` (no copy is made)
    pair_sources: tuple[tuple[NDArray[np.float64], NDArray[np.float64]], ...] = ()
    #: the mask key in every text form a file could hold it (see :func:`mask_key_forms`)
    key_forms: tuple[str, ...] = ()
    #: the key's 64-bit words, signed and unsigned, as an integer column could hold them
    key_ints: tuple[int, ...] = ()
    #: the key's own bytes (and those its hex text spells) and its SipHash key, raw
    key_raw: tuple[bytes, ...] = ()
    #: why the release could not be searched for the mask key (None: it was, or no mask)
    key_missing: str | None = None
    #: judge by the source's values whatever their form (whole numbers, short ids), each
    #: published column by what it legitimately holds (:attr:`legit`); False: the rules
    #: of the partitioned verifier (non-integral coordinates, ids of >= 4 characters)
    strict: bool = False
    #: the subject ids that read as numbers, sorted (a numeric column can hold them)
    id_numbers: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    #: the numbers the release publishes as figures, parameters, unit ids and
    #: representatives, sorted: a number of the prose equal to one of them is that figure
    published: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    #: texts the release publishes as structure (unit ids, levels): never a subject id
    published_texts: frozenset[str] = frozenset()
    #: published column name (lower case) -> what it legitimately holds
    legit: Mapping[str, _Legit] = field(default_factory=dict)
    #: whether the source's own columns are known (a column not among them holds none)
    know_columns: bool = False
    #: the manifest's CRS (its definition in the GeoParquet metadata is no leak)
    crs: str | None = None

    @cached
    def ids_arrow(self) -> pa.Array:
        return pa.array(sorted(self.subject_ids), type=pa.string())

    def legit_for(self, name: str) -> _Legit:
        """What the column ``name`` legitimately holds (nothing, for an unknown column)."""
        got = self.legit.get(name.lower())
        if got is not None:
            return got
        return _NO_COLUMN if self.know_columns else _UNKNOWN_COLUMN

    @cached
    def key_min_len(self) -> int:
        return min((len(f) for f in self.key_forms), default=0)

    @cached
    def times(self) -> NDArray[np.float64]:
        return np.sort(np.concatenate([self.wall, self.epoch]))

    @cached
    def near_axes(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The x and the y values of :attr:`near`'s pairs, each sorted: a pair within
        :attr:`near_tol` of one of them has its x within that of one x, its y of one y."""
        data = np.asarray(self.near.data, dtype=np.float64)
        return np.sort(data[:, 0]), np.sort(data[:, 1])

    @cached
    def has_pairs(self) -> bool:
        # coords holds both values of every finite source pair
        return self.coords.size > 0 or self.near is not None

    @cached
    def _pairs(self) -> tuple[tuple[tuple[NDArray[np.float64], NDArray[np.float64]], ...], int]:
        """(the source pair arrays, bits for a row number across them)."""
        sources = self.pair_sources or ((self.px, self.py),)
        total = sum(int(x.size) for x, _ in sources)
        return sources, max(1, (total - 1).bit_length())

    @cached
    def pair_keys(self) -> NDArray[np.uint64]:
        """Every finite source pair as one sorted key: a hash of the pair in the high bits,
        the pair's row number (across :attr:`pair_sources`) in the low bits. Built on first use.
        """
        sources, shift = self._pairs
        low = np.uint64((1 << shift) - 1)
        parts: list[NDArray[np.uint64]] = []
        offset = 0
        for x, y in sources:
            for start in range(0, x.size, _reader.SCAN_ROWS):
                xs, ys = (
                    x[start : start + _reader.SCAN_ROWS],
                    y[start : start + _reader.SCAN_ROWS],
                )
                ok = np.flatnonzero(np.isfinite(xs) & np.isfinite(ys))
                key = _pair_hash(xs[ok], ys[ok]) & ~low
                key |= (ok + (offset + start)).astype(np.uint64)
                parts.append(key)
            offset += x.size
        keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        keys.sort()
        return keys

    def known_pairs(self, a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Which finite pairs ``(a[i], b[i])`` equal a source pair exactly."""
        keys = self.pair_keys
        _, shift = self._pairs
        low = np.uint64((1 << shift) - 1)
        out = np.zeros(a.size, dtype=bool)
        if keys.size == 0 or a.size == 0:
            return out
        head = _pair_hash(a, b) & ~low
        lo = np.searchsorted(keys, head, side="left")
        hi = np.searchsorted(keys, head | low, side="right")
        hit = np.flatnonzero(hi > lo)
        if hit.size == 0:
            return out
        # the first key of each run: the pair itself unless another pair has its hash
        rows = (keys[lo[hit]] & low).astype(np.int64)
        sx, sy = self._pair_at(rows)
        same = (sx == a[hit]) & (sy == b[hit])
        out[hit[same]] = True
        for i in hit[~same].tolist():  # hash collisions: every key of the run
            runs = (keys[lo[i] : hi[i]] & low).astype(np.int64)
            rx, ry = self._pair_at(runs)
            out[i] = bool(((rx == a[i]) & (ry == b[i])).any())
        return out

    def _pair_at(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        sources, _ = self._pairs
        xs = np.empty(rows.size)
        ys = np.empty(rows.size)
        offset = 0
        for x, y in sources:
            at = (rows >= offset) & (rows < offset + x.size)
            xs[at], ys[at] = x[rows[at] - offset], y[rows[at] - offset]
            offset += x.size
        return xs, ys


class _Legit:
    """What one published column legitimately holds: values that equal a source value by
    chance there are no leak (a group id 1042 that is also subject 1042's id).

    ``kind`` is one of

    * ``pairs``: ``x``, ``y``, ``geometry`` (the representatives): any number, judged as
      coordinate pairs only;
    * ``range``: the integers ``lo..hi`` and the texts ``texts`` (group and class ids
      ``0..n-1``; counts ``0..N`` and ``<k``, ``withheld``);
    * ``values``: the numbers ``numbers`` and the texts ``texts`` (``radius_m`` is
      ``r_max_m``; ``level``; ``unit`` the audit's unit ids);
    * ``source``: the source column of that name's own values (a kept attribute),
      unless the column copies a source coordinate or the subject id row by row on at
      least half its rows (then nothing);
    * ``markup``: a style document (``layer_styles``' ``styleQML``, ``styleSLD``), judged
      as HTML markup is (:func:`scan_html`);
    * ``bins``: published time bins (``2008-10-23T02:00Z/PT3600S``, the whole cell);
    * ``none``: nothing (a column the source does not have);
    * ``unknown``: a column whose source values are not known (no source given): judged
      as the partitioned verifier judges every column.
    """

    def __init__(
        self,
        kind: str,
        *,
        lo: float = 0.0,
        hi: float = -1.0,
        numbers: NDArray[np.float64] | None = None,
        texts: frozenset[str] = frozenset(),
        series: pd.Series | None = None,
        copies: Callable[[pd.Series], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.lo, self.hi = float(lo), float(hi)
        self.numbers = np.empty(0) if numbers is None else np.asarray(numbers, dtype=np.float64)
        self.texts = texts
        self.series = series
        self._copies = copies

    @cached
    def copies_secret(self) -> bool:
        """Whether the source column repeats a record's own coordinate or id (row by row)."""
        if self.series is None or self._copies is None:
            return False
        return bool(self._copies(self.series))

    @cached
    def _source_numbers(self) -> NDArray[np.float64]:
        assert self.series is not None
        s = self.series
        if s.dtype == bool or str(s.dtype) == "boolean":
            s = s.astype("float64")
        return distinct_values(
            pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        )

    @cached
    def _source_texts(self) -> frozenset[str]:
        assert self.series is not None
        if pd.api.types.is_numeric_dtype(self.series.dtype):
            return frozenset()  # its values are numbers: an entry is compared as one
        s = self.series.dropna()
        return frozenset(str(v).strip() for v in pd.unique(s.astype(str)))

    @cached
    def _texts_arrow(self) -> pa.Array:
        texts = self._source_texts if self.kind == "source" else self.texts
        return pa.array(sorted(texts), type=pa.string())

    def numbers_ok(self, values: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Per value: whether the column legitimately holds it (as a number)."""
        v = np.asarray(values, dtype=np.float64)
        if self.kind == "pairs":
            return np.isfinite(v)
        if self.kind == "range":
            return (v == np.floor(v)) & (v >= self.lo) & (v <= self.hi)
        if self.kind == "values":
            return isin(v, np.sort(self.numbers))
        if self.kind == "source" and not self.copies_secret:
            return isin(v, self._source_numbers)
        return np.zeros(v.size, dtype=bool)

    def entries_ok(self, col: _TextColumn, which: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Per entry of a text column: whether the column legitimately holds it (computed
        for the entries ``which`` only; the others read False)."""
        out = np.zeros(col.texts.size, dtype=bool)
        idx = np.flatnonzero(which)
        if idx.size == 0 or self.kind in ("none", "unknown"):
            return out
        if self.kind == "source" and self.copies_secret:
            return out
        if self.kind == "bins":
            return out | (col.matching(_TIME_BIN_CELL) & col.ascii & which)
        value_set = self._texts_arrow
        if len(value_set):
            import pyarrow.compute as pc

            taken = pc.utf8_trim_whitespace(col.arrow.take(pa.array(idx)))
            out[idx] = np_bool(pc.is_in(taken, value_set=value_set))
        num = col.numeric[idx]
        finite = np.isfinite(num)
        if finite.any():
            out[idx[finite]] |= self.numbers_ok(num[finite])
        return out


#: A published time bin, the whole cell.
_TIME_BIN_CELL = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z/PT\d+S$"
_NO_COLUMN = _Legit("none")
_UNKNOWN_COLUMN = _Legit("unknown")


def _pair_hash(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.uint64]:
    """A 64-bit hash of each pair (equal pairs, -0.0 and 0.0 included, hash equally)."""
    hx = (np.asarray(x, dtype=np.float64) + 0.0).view(np.uint64)  # + 0.0: -0.0 -> 0.0
    hy = (np.asarray(y, dtype=np.float64) + 0.0).view(np.uint64)
    h = hx * np.uint64(0x9E3779B97F4A7C15)
    h ^= hy * np.uint64(0xC2B2AE3D27D4EB4F)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return h


#: Count columns: integers 0..N (N: the records of the audit and the synthetic ones), or
#: ``<k`` / ``withheld``.
_COUNT_COLUMNS = ("n_records", "released", "suppressed", "source_total", "generalised_up")
LEVELS = frozenset({"group", "unit", "parent", "area"})
#: Columns holding style documents (GeoPackage ``layer_styles``), judged as HTML markup.
_STYLE_COLUMNS = ("styleqml", "stylesld")


def published_values(
    rel: ReleaseReader,
    system_inputs: Callable[[ReleaseReader], Mapping[str, Any]] = release_system_inputs,
    units: frozenset[str] | None = None,
) -> tuple[NDArray[np.float64], frozenset[str]]:
    """The numbers the release publishes (sorted) and its structural texts.

    The numbers are those ``holes`` holds (every figure and parameter of the manifest,
    the units' cells, the tables' sums, k, ...), the numbers of groups, classes, units
    and records, the group representatives' ``x`` and ``y`` (the GeoParquet bbox is made
    of them) and the unit ids that read as numbers. The texts are the unit ids (as the
    audit and the merges name them), ``area`` and the levels.

    ``system_inputs(rel)`` gives the arguments of
    :func:`~geokanon.verify.holes.holes_system_and_published` (default: a single-file
    release's, :func:`~geokanon.verify.holes.release_system_inputs`); the representatives
    and the number of groups are its ``groups`` (``None``: the partitioned driver, which
    never reads all of ``groups.parquet``; each part task adds its part's
    representatives). ``units``: the unit ids the release names (default: the audit's,
    ``rel.unit_codes``).
    """
    known: set[float] = set()
    texts: set[str] = set(LEVELS)
    parts: list[NDArray[np.float64]] = []
    if units is not None:
        texts |= units
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, AttributeError):
        if units is None:
            _, names = rel.unit_codes
            texts |= {str(u) for u in names.tolist()}
    filt = audit_filter(rel.audit)
    merges = filt.get("unit_merges") or rel.audit.get("unit_merges") or {}
    if isinstance(merges, Mapping):
        texts |= {str(u) for u in merges} | {str(u) for u in merges.values()}
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, AttributeError):
        c = rel.classes
        if "unit" in c and "level" in c:
            texts |= {str(u) for u in c["unit"][c["level"].astype(str) == "parent"].tolist()}
        known.add(float(len(c)))
    inputs: Mapping[str, Any] | None = None
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, AttributeError, OSError):
        inputs = system_inputs(rel)
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, AttributeError):
        g = rel.groups if inputs is None else inputs["groups"]
        if g is not None:
            known.add(float(len(g)))
            for col in ("x", "y"):
                parts.append(pd.to_numeric(g[col], errors="coerce").to_numpy(dtype=np.float64))
    if inputs is not None:  # else nothing of holes is known
        with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, AttributeError):
            if inputs["records_rows"] is not None:
                known.add(float(inputs["records_rows"]))
            _, pub = holes_system_and_published(**inputs)
            known |= pub.known
            known.add(float(inputs["record_bound"]))
    for t in texts:
        if WHOLE_NUMBER_RE.match(t):
            known.add(float(t))
    known |= _sample_sizes(rel)
    parts.append(np.array(sorted(known), dtype=np.float64))
    return distinct_values(np.concatenate(parts)), frozenset(texts)


def _declared_sample(manifest: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The manifest's ``report_sample`` as ``(records, every, divisor)`` when it has that
    form (``manifest`` checks that it follows the writer's rule), else None."""
    entry = manifest.get("report_sample")
    if not isinstance(entry, Mapping):
        return None
    values = [entry.get(f) for f in ("records", "every", "divisor")]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != 3:
        return None
    return ints[0], ints[1], ints[2]


def _sample_sizes(rel: ReleaseReader) -> set[float]:
    """The figures of the manifest's ``report_sample`` (the records of the report's
    sample, 1 in ``every``, ``divisor``): published counts and parameters, which
    ``manifest`` checks against the writer's rule and the audit, not source values."""
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, OSError):
        declared = _declared_sample(rel.manifest)
        if declared is not None:
            return {float(v) for v in declared}
    return set()


#: The files whose prose may state the report sample's size.
_SAMPLE_FILES = ("report.html", "RELEASE_NOTES.md")


def sample_phrase_findings(rel: ReleaseReader, names: Iterable[str]) -> list[str]:
    """The sample-size phrases ("a deterministic sample of N records",
    :data:`geokanon.published.SAMPLE_SIZE_PHRASE`) of ``report.html`` and
    ``RELEASE_NOTES.md`` (those of them in ``names``: the files scanned) whose N is not
    the manifest's ``report_sample.records``: the phrase states that figure and no
    other, and only when the manifest declares a sample (``holes`` leaves the phrase
    out, so nothing else judges its number)."""
    from geokanon.published import SAMPLE_SIZE_PHRASE

    wanted = set(names)
    declared = None
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError, OSError):
        declared = _declared_sample(rel.manifest)
    out = []
    for name in _SAMPLE_FILES:
        path = rel.rel / name
        if name not in wanted or not path.is_file():
            continue
        text = html.unescape(path.read_text(encoding="utf-8", errors="replace"))
        bad = sum(
            1
            for hit in re.finditer(SAMPLE_SIZE_PHRASE, text)
            if declared is None or int(re.sub(r"[^\d]", "", hit.group(0))) != declared[0]
        )
        if bad and declared is None:
            out.append(f"{name}: {bad} sample sizes ('a deterministic sample of N records') "
                       "where the manifest declares no report_sample")  # fmt: skip
        elif bad:
            out.append(f"{name}: {bad} sample sizes ('a deterministic sample of N records') "
                       "that are not the manifest's report_sample records")  # fmt: skip
    return out


def strict_secrets(
    pairs: Sequence[tuple[NDArray[np.float64], NDArray[np.float64]]],
    subject_ids: frozenset[str],
    *,
    k: int,
    bad_names: frozenset[str],
    published: NDArray[np.float64],
    published_texts: frozenset[str],
    legit: Mapping[str, _Legit],
    know_columns: bool,
    crs: str | None,
    epoch: NDArray[np.float64] | None = None,
    wall: NDArray[np.float64] | None = None,
    near: Any = None,
    near_tol: float = 0.0,
    key: tuple[tuple[str, ...], tuple[int, ...], tuple[bytes, ...]] = ((), (), ()),
    key_missing: str | None = None,
) -> Secrets:
    """What ``no_leak`` looks for, by the single-file rules (``strict``), in either layout.

    ``pairs``: the source coordinate pairs as (x, y) arrays (kept, not copied); every x
    and y of a finite pair is looked for on its own (:attr:`Secrets.coords`, sorted
    here). ``subject_ids``: every id as the source spells it (trimmed); those that read
    as numbers and those with separators are derived here. ``epoch``, ``wall``: the
    source times, sorted. ``key``: :func:`mask_key_forms` of the mask key. The rest is
    as :class:`Secrets` states it.
    """
    parts: list[NDArray[np.float64]] = []
    for x, y in pairs:
        ok = np.isfinite(x) & np.isfinite(y)
        parts += [x, y] if ok.all() else [x[ok], y[ok]]
    coords = sort_floats(np.concatenate(parts) if parts else np.array([]))
    id_numbers = distinct_values(
        np.array([float(t) for t in subject_ids if WHOLE_NUMBER_RE.match(t)], dtype=np.float64)
    )
    return Secrets(
        px=np.empty(0),
        py=np.empty(0),
        coords=coords,
        strict=True,
        id_numbers=id_numbers,
        published=published,
        published_texts=published_texts,
        legit=legit,
        know_columns=know_columns,
        crs=crs,
        subject_ids=subject_ids,
        spaced_ids=tuple(t for t in subject_ids if TOKEN_SPLIT.search(t)),
        epoch=np.empty(0) if epoch is None else epoch,
        wall=np.empty(0) if wall is None else wall,
        bad_names=bad_names,
        n_k=k,
        near=near,
        near_tol=near_tol,
        pair_sources=tuple(pairs),
        key_forms=key[0],
        key_ints=key[1],
        key_raw=key[2],
        key_missing=key_missing,
    )


def column_rules(rel: ReleaseReader, src: Source, unit_texts: frozenset[str]) -> dict[str, _Legit]:
    """What every published column legitimately holds, by (lower-case) name."""
    rules: dict[str, _Legit] = {}
    for name in ("geometry", *_COORDINATE_COLUMNS):
        rules[name] = _Legit("pairs")
    n_groups = n_classes = 0
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError):
        n_groups = len(rel.groups)
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError):
        n_classes = len(rel.classes)
    rules["group_id"] = _Legit("range", lo=0, hi=n_groups - 1)
    rules["class_id"] = _Legit("range", lo=0, hi=n_classes - 1)
    n_max = 0
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError):
        n_max = rel.n_audit + len(rel.synthetic)
    hidden = frozenset({LESS_THAN_K, WITHHELD})
    for name in (*_COUNT_COLUMNS, "synthetic"):
        rules[name] = _Legit("range", lo=0, hi=n_max, texts=hidden)
    with contextlib.suppress(Unreadable, ValueError, KeyError, TypeError):
        rules["radius_m"] = _Legit("values", numbers=np.array([rel.r_max_m]))
    rules["level"] = _Legit("values", texts=LEVELS)
    unit_numbers = np.array(
        [float(t) for t in unit_texts if WHOLE_NUMBER_RE.match(t)], dtype=np.float64
    )
    rules["unit"] = _Legit("values", numbers=unit_numbers, texts=unit_texts)
    rules["time_bin"] = _Legit("bins")
    for name in _STYLE_COLUMNS:  # release.gpkg's layer_styles: QGIS and SLD documents
        rules[name] = _Legit("markup")

    def copies(series: pd.Series) -> bool:
        """Whether ``series`` repeats its own record's coordinate or subject id on at
        least half of its rows (a copy of a secret column, not a chance equality)."""
        n = len(series)
        filled = int(series.notna().sum())
        if filled == 0:
            return False
        num = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        for a in (src.x, src.y, src.x_work, src.y_work):
            if a is not None and a.size == n and 2 * int(np.count_nonzero(num == a)) >= filled:
                return True
        sid = src.subject_raw
        if sid is not None and len(sid) == n:
            same = (
                series.astype(str).str.strip().to_numpy() == sid.astype(str).str.strip().to_numpy()
            )
            if 2 * int(np.count_nonzero(same & series.notna().to_numpy())) >= filled:
                return True
        return False

    for name, series in src.columns.items():
        key = name.lower()
        if key not in rules:
            rules[key] = _Legit("source", series=series, copies=copies)
    return rules


#: BLAKE2b personalisation of the mask key derivation (as :class:`geokanon.mask.MaskKey`).
_MASK_KEY_PERSON = b"geokanon-mask/1"

#: Shorter forms of the key are not searched for (a chance match would be likely).
_MASK_KEY_MIN_FORM = 12


def mask_key_forms(data: bytes) -> tuple[tuple[str, ...], tuple[int, ...], tuple[bytes, ...]]:
    """Every text form of the mask key ``data`` (a key file's bytes), its integer words, raw bytes.

    The key's own bytes (as text, hex, base64, big- and little-endian decimal; for a
    hex-text key also the bytes it spells), and the same of the 128-bit SipHash key
    derived from it and of its two 64-bit words (decimal signed and unsigned, hex),
    which is all that keys the noise. Derived here as :class:`geokanon.mask.MaskKey`
    derives it (BLAKE2b-128, personalised), without importing it.
    """
    import base64

    material = data.strip()
    derived = hashlib.blake2b(material, digest_size=16, person=_MASK_KEY_PERSON).digest()
    raws = [material, derived]
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        raws.append(bytes.fromhex(material.decode("ascii")))
    forms: set[str] = set()
    with contextlib.suppress(UnicodeDecodeError):
        forms.add(material.decode("utf-8"))
    for raw in raws:
        forms |= {raw.hex(), raw.hex().upper()}
        forms.add(base64.b64encode(raw).decode("ascii").rstrip("="))
        forms.add(base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="))
        forms |= {str(int.from_bytes(raw, "big")), str(int.from_bytes(raw, "little"))}
    ints: set[int] = set()
    for w in (int.from_bytes(derived[:8], "little"), int.from_bytes(derived[8:], "little")):
        signed = w - (1 << 64) if w >= 1 << 63 else w
        ints |= {w, signed}
        forms |= {str(w), str(signed), f"{w:016x}", f"{w:016X}"}
    kept = tuple(sorted(f for f in forms if len(f) >= _MASK_KEY_MIN_FORM))
    return kept, tuple(sorted(ints)), tuple(raws)


def key_count(text: str, sec: Secrets) -> int:
    """Occurrences of the mask key (any of its forms) in ``text``."""
    if not sec.key_forms or len(text) < sec.key_min_len:
        return 0
    return sum(text.count(f) for f in sec.key_forms)


def _key_cells(col: _TextColumn, sec: Secrets) -> int:
    """Rows of a text column whose cell holds the mask key (in any of its forms)."""
    if not sec.key_forms or col.texts.size == 0:
        return 0
    import pyarrow.compute as pc

    length = np.asarray(pc.utf8_length(col.arrow).to_numpy(zero_copy_only=False))
    counts = col.counts
    long = np.flatnonzero((length >= sec.key_min_len) & (counts > 0))
    return sum(int(counts[i]) for i in long.tolist() if key_count(col.texts[i], sec))


def _key_ints_in(arr: pa.ChunkedArray | pa.Array, sec: Secrets) -> int:
    """Values of a 64-bit integer column equal to a word of the mask key."""
    t = arr.type
    if not sec.key_ints or not pa.types.is_integer(t) or t.bit_width != 64:
        return 0
    import pyarrow.compute as pc

    lo, hi = (0, 1 << 64) if pa.types.is_unsigned_integer(t) else (-(1 << 63), 1 << 63)
    values = pa.array([v for v in sec.key_ints if lo <= v < hi], type=t)
    return int(pc.sum(pc.cast(pc.is_in(arr, value_set=values), pa.int64())).as_py() or 0)


def _sig_counts(values: NDArray[np.float64]) -> NDArray[np.int64]:
    """Per value: ``_sig_digits(repr(float(v)))``.

    A whole number below 1e15 is written as its digits and ``.0``: its significant
    digits are those left when the trailing zeros are dropped, counted without text.
    Any other value is written out (once per distinct value) and counted.
    """
    v = np.asarray(values, dtype=np.float64)
    out = np.zeros(v.size, dtype=np.int64)
    a = np.abs(v)
    whole = (a < 1e15) & (a == np.floor(a))
    m = a[whole].astype(np.int64)
    for _ in range(16):  # drop trailing zeros (none is left after 15 digits)
        z = (m != 0) & (m % 10 == 0)
        if not z.any():
            break
        m[z] //= 10
    digits = np.zeros(m.size, dtype=np.int64)
    for p in range(16):
        digits += m >= 10**p
    out[whole] = digits
    rest = np.flatnonzero(~whole)
    if rest.size:
        uq, inverse = np.unique(v[rest], return_inverse=True)
        per = np.array([_sig_digits(repr(float(x))) for x in uq.tolist()], dtype=np.int64)
        out[rest] = per[inverse.reshape(-1)]
    return out


def _has_sig_digits(values: NDArray[np.float64], n: int) -> NDArray[np.bool_]:
    """Per value: ``_sig_digits(repr(float(v))) >= n``."""
    return np.asarray(_sig_counts(values) >= n, dtype=bool)


def _sig_at_least(values: NDArray[np.float64], mask: NDArray[np.bool_], n: int = 4) -> int:
    """How many of ``values[mask]`` have >= n significant digits (computed on hits only)."""
    hits = values[mask]
    if hits.size == 0:
        return 0
    uq, counts = np.unique(hits, return_counts=True)
    return int(counts[_has_sig_digits(uq, n)].sum())


def _pair_hits(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    sec: Secrets,
    a_in: NDArray[np.bool_] | None = None,
    b_in: NDArray[np.bool_] | None = None,
) -> int:
    """Rows where ``(a, b)`` is a source pair with >= 4 significant digits between them.

    ``a_in``/``b_in``: ``a``/``b`` in ``sec.coords``, when already known. A pair can
    only be a source pair when both values are source coordinates; those rows are
    then matched against the source pairs exactly.
    """
    if a.size == 0:
        return 0
    if sec.near is not None:
        # Only rows whose x is near some pair's x and whose y is near some pair's y can
        # be near a pair: found by two sorted searches (a slightly wider band than the
        # tolerance, so rounding drops none), the tree asked for those rows only. Asking
        # it for every row of every pair of columns took minutes at 1e6 records.
        xs, ys = sec.near_axes
        band = sec.near_tol * 1.001
        idx = np.flatnonzero(np.isfinite(a) & np.isfinite(b))
        idx = idx[near_sorted(xs, a[idx], band)]
        if idx.size:
            idx = idx[near_sorted(ys, b[idx], band)]
        if idx.size == 0:
            return 0
        dist, _ = sec.near.query(np.column_stack([a[idx], b[idx]]), k=1)
        return int((dist <= sec.near_tol).sum())
    if sec.coords.size == 0:
        return 0
    if a_in is None:
        a_in = isin(a, sec.coords)
    if not a_in.any():
        return 0
    if b_in is None:
        b_in = isin(b, sec.coords)
    cand = np.flatnonzero(a_in & b_in & np.isfinite(a) & np.isfinite(b))
    if cand.size == 0:
        return 0
    ca, cb = a[cand], b[cand]
    # 4 significant digits between them, then an exact source pair
    enough = _sig_counts(ca) + _sig_counts(cb) >= 4
    if not enough.any():
        return 0
    return int(np.count_nonzero(sec.known_pairs(ca[enough], cb[enough])))


def _frac_hits(values: NDArray[np.float64], sec: Secrets) -> NDArray[np.bool_]:
    """Values equal to a non-integral source coordinate."""
    v = np.asarray(values, dtype=np.float64)
    return isin(v, sec.coords) & (v != np.floor(v))


def _number_findings(
    vals: NDArray[np.float64],
    sec: Secrets,
    *,
    pairs: bool,
    single_values: bool,
    weights: NDArray[np.int64] | None = None,
) -> list[str]:
    """Coordinate pairs, coordinate values and epoch times among numbers of a text.

    ``vals`` are the numbers in text order (or, with ``weights``, distinct numbers and
    how often each occurs; then no pairs).
    """
    counts = _number_counts(vals, sec, pairs=pairs, single_values=single_values, weights=weights)
    return [f"{n} {what}" for what, n in counts.items()]


def _number_counts(
    vals: NDArray[np.float64],
    sec: Secrets,
    *,
    pairs: bool,
    single_values: bool,
    weights: NDArray[np.int64] | None = None,
    any_precision: bool = False,
) -> dict[str, int]:
    """As :func:`_number_findings`: what -> how many (non-zero only, in report order).

    ``any_precision``: a single value is any source coordinate (a table's text cell, with
    :attr:`Secrets.strict`), not only a non-integral one with >= 4 significant digits.
    """
    found: dict[str, int] = {}
    if vals.size == 0:
        return found
    if pairs and vals.size > 1:
        n = _pair_hits(vals[:-1], vals[1:], sec)
        if n:
            found["coordinate pairs"] = n

    def count(hit: NDArray[np.bool_]) -> int:
        if weights is None:
            return _sig_at_least(vals, hit)
        return int(weights[hit][_has_sig_digits(vals[hit], 4)].sum())

    if single_values:
        if any_precision:  # a text cell's number: any source coordinate, whatever its digits
            hit = isin(vals, sec.coords)
            n = int(hit.sum()) if weights is None else int(weights[hit].sum())
        else:
            n = count(_frac_hits(vals, sec))
        if n:
            found["coordinate values"] = n
    n = count(isin(vals, sec.epoch))
    if n:
        found["epoch times"] = n
    return found


def _numbers(tokens: Sequence[str]) -> NDArray[np.float64]:
    return np.array(tokens, dtype=str).astype(np.float64) if tokens else np.empty(0)


def scan_text(
    text: str, sec: Secrets, *, single_values: bool = True, prose: bool = True
) -> list[str]:
    """Coordinate pairs, single coordinates, epoch times, timestamps, subject ids and the
    mask key in a text.

    With :attr:`Secrets.strict` and ``prose``, a number of the text (read as ``holes``
    reads the prose: number words as digits, declared phrases left out) is a leak when it
    equals a source coordinate or a numeric subject id, whatever its digits, unless it is
    a number the release publishes (:attr:`Secrets.published`). Not ``prose`` (markup,
    CSV text): single coordinates only when non-integral with >= 4 significant digits, and
    subject ids only as tokens that are not numbers.
    """
    strict_prose = sec.strict and prose and single_values
    found = _number_findings(
        _numbers(_NUMBER.findall(text)), sec, pairs=True,
        single_values=single_values and not strict_prose,
    )  # fmt: skip
    if strict_prose:
        found += _prose_number_findings(text, sec)
    found += _stamp_and_id_findings(text, sec, numeric_ids=not sec.strict)
    return found


def _prose_number_findings(text: str, sec: Secrets) -> list[str]:
    """Numbers of prose equal to a source coordinate or a numeric subject id, not published."""
    from geokanon.published import prose_numbers

    if not (sec.coords.size or sec.id_numbers.size):
        return []
    read = prose_numbers(text)
    if not read:
        return []
    vals = np.array([v for _, v in read], dtype=np.float64)
    free = ~isin(vals, sec.published)
    found: list[str] = []
    n = int(np.count_nonzero(free & isin(vals, sec.coords)))
    if n:
        found.append(f"{n} coordinate values")
    n = int(np.count_nonzero(free & isin(vals, sec.id_numbers)))
    if n:
        found.append(f"{n} subject ids")
    return found


#: Characters a token of prose may carry around an id ("a7.", "`a7`", "(a7)").
_TOKEN_TRIM = ".:!?`*_'\"()[]"


def _id_tokens(text: str, sec: Secrets, *, numeric_ids: bool = True) -> int:
    """Tokens of ``text`` that are a subject id (``numeric_ids``: number tokens too)."""
    ids = sec.subject_ids
    n = 0
    for t in TOKEN_SPLIT.split(text):
        if not t:
            continue
        if t not in ids:
            if not sec.strict:
                continue
            t = t.strip(_TOKEN_TRIM)
            if not t or t not in ids:
                continue
        if not numeric_ids and WHOLE_NUMBER_RE.match(t):
            continue  # judged as a number (a published figure may equal it)
        if sec.strict and t in sec.published_texts:
            continue  # a unit id or a level the release publishes as such
        n += 1
    return n


def _stamp_and_id_findings(
    text: str, sec: Secrets, weight: int = 1, *, numeric_ids: bool = True
) -> list[str]:
    found: list[str] = []
    if sec.epoch.size or sec.wall.size:
        stamps = _DATETIME.findall(_TIME_BIN.sub(" ", text))
        if stamps:
            n = _timestamp_hits(stamps, sec)
            if n:
                found.append(f"{n * weight} timestamps")
    if sec.subject_ids:
        n = _id_tokens(text, sec, numeric_ids=numeric_ids)
        n += sum(1 for s in sec.spaced_ids if s in text)
        if n:
            found.append(f"{n * weight} subject ids")
    n = key_count(text, sec)
    if n:
        found.append(f"{n * weight} copies of the mask key")
    return found


def _timestamp_hits(stamps: Sequence[str], sec: Secrets) -> int:
    wall, utc = wallclock_seconds(stamps)
    hit = isin(wall, sec.times) | isin(utc, sec.times)
    return int(hit.sum())


#: Columns of published coordinates (representatives), judged as pairs only: x, y, the
#: WKB geometry's and the GeoParquet ``bbox`` covering column's fields.
_COORDINATE_COLUMNS = frozenset(
    {"x", "y", "geometry.x", "geometry.y", "bbox.xmin", "bbox.ymin", "bbox.xmax", "bbox.ymax"}
)


def _numeric_column_hits(
    name: str, vals: NDArray[np.float64], sec: Secrets, *, ids: bool = True
) -> list[str]:
    """A column's distinct numbers against the source's (``ids``: numeric subject ids too;
    a text column's ids are found as text)."""
    found: list[str] = []
    if name.lower() in _COORDINATE_COLUMNS:
        return found  # published representatives: judged as pairs only
    uniq = distinct_values(vals)
    if uniq.size == 0:
        return found
    in_coords = isin(uniq, sec.coords)
    legit = sec.legit_for(name) if sec.strict else _UNKNOWN_COLUMN
    if legit.kind == "pairs":
        return found
    if legit.kind in ("unknown", "markup"):
        # the column's own source values are not known (or it is a style document):
        # non-integral coordinates only
        n = _sig_at_least(uniq, in_coords & (uniq != np.floor(uniq)))
    else:
        # any source coordinate or numeric subject id the column does not hold by right
        in_ids = (
            isin(uniq, sec.id_numbers) if ids and sec.id_numbers.size else np.zeros(uniq.size, bool)
        )
        ok = np.zeros(uniq.size, dtype=bool)
        hit = in_coords | in_ids
        if hit.any():
            ok[hit] = legit.numbers_ok(uniq[hit])
        n = int(np.count_nonzero(in_coords & ~ok))
        n_ids = int(np.count_nonzero(in_ids & ~ok))
        if n_ids:
            found.append(f"column {name!r}: {n_ids} subject ids")
    if n:
        found.append(f"column {name!r}: {n} coordinate values")
    elif name.lower() not in STRUCTURAL:
        n_hit = _sig_at_least(uniq, in_coords)
        if n_hit:
            n_el = _sig_at_least(uniq, np.ones(uniq.size, dtype=bool))
            if n_el >= sec.n_k and 2 * n_hit >= n_el:
                found.append(f"column {name!r}: {n_hit} of {n_el} values are coordinates")
    n = _sig_at_least(uniq, isin(uniq, sec.epoch))
    if n:
        found.append(f"column {name!r}: {n} epoch times")
    return found


_NOT_PAIRS = frozenset(
    {"group_id", "class_id", "n_records", "released", "suppressed", "source_total", "radius_m"}
    | {"generalised_up"}
)

#: A cell that is exactly one number token as ``_NUMBER`` reads it (ASCII only).
_WHOLE_NUMBER = r"^[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$"
WHOLE_NUMBER_RE = re.compile(_WHOLE_NUMBER)


_NO_DIGIT = r"^[^0-9]*$"


@dataclass
class _TextColumn:
    """A text column as its distinct values: ``texts[codes]`` is the column (-1: null)."""

    texts: NDArray[np.object_]
    codes: NDArray[np.int64]

    @cached
    def counts(self) -> NDArray[np.int64]:
        return count_ids(self.codes, self.texts.size)

    @cached
    def arrow(self) -> pa.Array:
        return pa.array(self.texts.tolist(), type=pa.string())

    #: what depends on the texts alone (not on the codes)
    _PER_ENTRY = frozenset(
        {"arrow", "ascii", "whole_number", "no_digit", "other", "other_tokens", "parsed", "numeric"}
    )

    @cached
    def ascii(self) -> NDArray[np.bool_]:
        import pyarrow.compute as pc

        return np_bool(pc.string_is_ascii(self.arrow))

    @cached
    def whole_number(self) -> NDArray[np.bool_]:
        """Entries that are exactly one number token (so they read as that number)."""
        import pyarrow.compute as pc

        return np_bool(pc.match_substring_regex(self.arrow, _WHOLE_NUMBER)) & self.ascii

    @cached
    def no_digit(self) -> NDArray[np.bool_]:
        import pyarrow.compute as pc

        return np_bool(pc.match_substring_regex(self.arrow, _NO_DIGIT)) & self.ascii

    @cached
    def other(self) -> NDArray[np.int64]:
        """Entries neither empty of digits nor one number: read with the regex."""
        return np.flatnonzero(~self.no_digit & ~self.whole_number)

    @cached
    def other_tokens(self) -> dict[int, list[str]]:
        return {int(i): _NUMBER.findall(self.texts[i]) for i in self.other.tolist()}

    @cached
    def parsed(self) -> NDArray[np.float64]:
        """Each entry that is one number token, as that number (else NaN)."""
        out = np.full(self.texts.size, np.nan)
        simple = self.whole_number
        if simple.any():
            import pyarrow.compute as pc

            try:  # Arrow parses decimal text correctly rounded, as numpy does
                num = pc.cast(self.arrow.filter(pa.array(simple)), pa.float64())
                out[simple] = num.to_numpy(zero_copy_only=False)
            except (pa.ArrowException, ValueError):
                out[simple] = np.array(self.texts[simple].tolist(), dtype=str).astype(np.float64)
        return out

    def single_tokens(self) -> tuple[NDArray[np.float64], NDArray[np.bool_]] | None:
        """(the token of every entry, whether it has one); None: some entry has several."""
        value = self.parsed.copy()
        has = self.whole_number.copy()
        for i, toks in self.other_tokens.items():
            if len(toks) > 1:
                return None
            if toks:
                value[i] = float(toks[0])
                has[i] = True
        return value, has

    @cached
    def numeric(self) -> NDArray[np.float64]:
        """Each entry read as a number the way ``pd.to_numeric(errors='coerce')`` does."""
        out = self.parsed.copy()
        rest = self.other
        if rest.size:
            out[rest] = pd.to_numeric(
                pd.Series(self.texts[rest].tolist(), dtype=object), errors="coerce"
            ).to_numpy(dtype=np.float64, na_value=np.nan)
        # text without digits can read as a number ("inf", "nan") but never a finite one
        return out

    def matching(self, pattern: str) -> NDArray[np.bool_]:
        """Entries that may match ``pattern`` (ASCII regex); non-ASCII entries always."""
        import pyarrow.compute as pc

        return np_bool(pc.match_substring_regex(self.arrow, pattern)) | ~self.ascii

    def hits(self, coords: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Which entries' :attr:`numeric` values are in the sorted ``coords`` (kept for them)."""
        cached = self.__dict__.get("_hits")
        if cached is None or cached[0] is not coords:
            cached = self.__dict__["_hits"] = (coords, isin(self.numeric, coords))
        hit: NDArray[np.bool_] = cached[1]
        return hit

    def without(self, drop: NDArray[np.bool_]) -> _TextColumn:
        """The column with the rows of the ``drop`` entries read as empty (null) cells.

        No row is rewritten: a dropped entry counts no rows and reads as no number,
        which is all a null cell is to the checks.
        """
        out = _TextColumn(texts=self.texts, codes=self.codes)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k in self._PER_ENTRY})
        out.__dict__["counts"] = np.where(drop, 0, self.counts)
        out.__dict__["numeric"] = np.where(drop, np.nan, self.numeric)
        return out


def text_column(arr: pa.ChunkedArray | pa.Array) -> _TextColumn:
    """Distinct values and codes of an Arrow string/binary/dictionary column."""
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        arr = arr.unify_dictionaries() if isinstance(arr, pa.ChunkedArray) else arr
    if isinstance(arr, pa.Array):
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        chunks = [arr]
    else:
        chunks = list(arr.chunks)
    if not chunks:
        return _TextColumn(texts=np.array([], dtype=object), codes=np.zeros(0, np.int64))
    dictionary = chunks[0].dictionary
    idx = np.concatenate([dict_indices(c) for c in chunks])
    binary = pa.types.is_binary(dictionary.type) or pa.types.is_large_binary(dictionary.type)
    if binary:
        texts = [None if v is None else bytes(v).decode("utf-8", "replace")
                 for v in dictionary.to_pylist()]  # fmt: skip
    elif dictionary.null_count == 0:
        # the usual case (CSV and Parquet text): the entries as they are, and the Arrow
        # array of them that the per-entry rules read (:attr:`_TextColumn.arrow`)
        as_text = dictionary.cast(pa.string())
        texts_arr = np.asarray(as_text.to_numpy(zero_copy_only=False), dtype=object)
        col = _TextColumn(texts=texts_arr, codes=idx)
        col.__dict__["arrow"] = as_text
        return col
    else:
        texts = [None if v is None else str(v) for v in dictionary.cast(pa.string()).to_pylist()]
    null_entries = np.array([t is None for t in texts], dtype=bool)
    if null_entries.any():
        idx[(idx >= 0) & null_entries[np.maximum(idx, 0)]] = -1
    texts_arr = np.array([t if t is not None else "" for t in texts], dtype=object)
    if binary:  # bytes that decode to the same text share one entry
        _, first, inverse = np.unique(texts_arr.astype(str), return_index=True, return_inverse=True)
        if first.size != texts_arr.size:
            texts_arr = texts_arr[first]
            idx = np.where(idx >= 0, inverse.reshape(-1)[np.maximum(idx, 0)], -1)
    return _TextColumn(texts=texts_arr, codes=idx)


_DATE_HINT = r"[0-9]{4}[-/][0-9]{2}[-/][0-9]{2}"


_SPLIT_CHARS = r"[\s,;|<>\"'=(){}\[\]]"


def _text_findings(col: _TextColumn, sec: Secrets, *, single_values: bool) -> list[str]:
    """Numbers (no pairs), timestamps and subject ids in every cell, as the joined text reads.

    Counts are per occurrence: an entry's findings count as often as it occurs.
    """
    return [f"{n} {what}" for what, n in text_counts(col, sec, single_values).items()]


def text_counts(
    col: _TextColumn, sec: Secrets, single_values: bool, legit: _Legit | None = None
) -> dict[str, int]:
    """As :func:`_text_findings`: what -> how many (non-zero only, in report order).

    ``legit``: what the column holds by right; when something is found, the entries it
    holds by right are taken out and the column counted again.
    """
    if sec.strict and legit is not None and legit.kind == "markup":
        return _text_counts_of(col, sec, single_values, markup=True)
    found = _text_counts_of(col, sec, single_values)
    if found and sec.strict and legit is not None and legit.kind not in ("none", "unknown"):
        ok = legit.entries_ok(col, col.counts > 0)
        if ok.any():
            found = _text_counts_of(col.without(ok), sec, single_values)
    return found


def _text_counts_of(
    col: _TextColumn, sec: Secrets, single_values: bool, *, markup: bool = False
) -> dict[str, int]:
    """``markup``: the cells are a style document (judged as HTML markup is)."""
    if markup:
        sec = _markup_secrets(sec)
    counts = col.counts
    present = counts > 0
    one = col.whole_number & present
    vals = [col.parsed[one]]
    weights = [counts[one]]
    for i, toks in col.other_tokens.items():
        if present[i] and toks:
            vals.append(_numbers(toks))
            weights.append(np.full(len(toks), counts[i], dtype=np.int64))
    found = _number_counts(
        np.concatenate(vals), sec, pairs=False, single_values=single_values,
        weights=np.concatenate(weights), any_precision=sec.strict and not markup,
    )  # fmt: skip
    n_stamp = n_id = 0
    if sec.epoch.size or sec.wall.size:
        for i in np.flatnonzero(present & col.matching(_DATE_HINT)).tolist():
            stamps = _DATETIME.findall(_TIME_BIN.sub(" ", col.texts[i]))
            if stamps:
                n_stamp += _timestamp_hits(stamps, sec) * int(counts[i])
    if sec.subject_ids:
        import pyarrow.compute as pc

        split = col.matching(_SPLIT_CHARS)
        whole = np_bool(pc.is_in(col.arrow, value_set=sec.ids_arrow))
        n_id += int(counts[present & ~split & whole].sum())
        for i in np.flatnonzero(present & split).tolist():
            n_id += _id_tokens(col.texts[i], sec, numeric_ids=not markup) * int(counts[i])
    if n_stamp:
        found["timestamps"] = n_stamp
    if n_id:
        found["subject ids"] = n_id
    return found


def _cell_findings(name: str, col: _TextColumn, sec: Secrets) -> list[str]:
    """Subject ids and timestamps as whole (stripped) cells of a text column."""
    return [f"column {name!r}: {n} {what}" for what, n in _cell_counts(col, sec).items()]


def _cell_counts(col: _TextColumn, sec: Secrets, legit: _Legit | None = None) -> dict[str, int]:
    """As :func:`_cell_findings`: what -> how many (non-zero only, in report order).

    ``legit``: what the column holds by right; an entry it holds by right is no subject id.
    """
    found: dict[str, int] = {}
    counts = col.counts
    present = counts > 0
    if sec.strict and legit is not None and legit.kind == "markup":
        sec = _markup_secrets(sec)
    if sec.subject_ids:
        import pyarrow.compute as pc

        stripped = pc.utf8_trim_whitespace(col.arrow)
        whole = np_bool(pc.is_in(stripped, value_set=sec.ids_arrow))
        # Python's str.strip() also strips a few characters utf8_trim does not
        odd = ~col.ascii & present
        for i in np.flatnonzero(odd).tolist():
            whole[i] = col.texts[i].strip() in sec.subject_ids
        if sec.strict and legit is not None and (present & whole).any():
            whole &= ~legit.entries_ok(col, present & whole)
        n = int(counts[present & whole].sum())
        if n:
            found["subject ids"] = n
    if sec.epoch.size or sec.wall.size:
        hits = 0
        for i in np.flatnonzero(present & col.matching(_DATE_HINT)).tolist():
            stamps = _DATETIME.findall(_TIME_BIN.sub(" ", col.texts[i]))
            if stamps:
                hits += _timestamp_hits(stamps, sec) * int(counts[i])
        if hits:
            found["timestamps"] = hits
    n = _key_cells(col, sec)
    if n:
        found["copies of the mask key"] = n
    return found


def _arrow_numeric(arr: pa.ChunkedArray | pa.Array) -> NDArray[np.float64]:
    import pyarrow.compute as pc

    if pa.types.is_boolean(arr.type):
        return np.full(len(arr), np.nan)
    return (
        np.asarray(
            pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64
        ).copy()
        if len(arr)
        else np.empty(0)
    )


def _short_range_distinct(arr: pa.ChunkedArray | pa.Array) -> NDArray[np.float64] | None:
    """``distinct_values(_arrow_numeric(pc.unique(arr)))`` of a signed integer column whose
    values span a short range (ids, counts), by marking the values present instead of
    hashing them; None: another column (then hash it)."""
    t = arr.type
    if not (pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32())):
        return None
    valid = arr.drop_null()
    if len(valid) == 0:
        return None
    v = np.asarray(valid.to_numpy(), dtype=np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 4 * v.size + 1024:
        return None
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[v - lo] = True
    # the distinct integers in order, as numbers (float64, as _arrow_numeric reads them:
    # exact up to 2**53; beyond, neighbours the cast merges are merged again)
    out = (np.flatnonzero(present) + lo).astype(np.float64)
    return out if max(-lo, hi) <= 2**53 else distinct_values(out)


class _Numbers:
    """One column of a batch read as numbers; the array of one value per row is made
    only when asked.

    A text column is its distinct entries (:class:`_TextColumn`): their numbers, and
    which of them are source coordinates, answer for every row that uses them.
    """

    def __init__(
        self,
        rows: NDArray[np.float64] | None = None,
        text: _TextColumn | None = None,
        arrow: pa.ChunkedArray | pa.Array | None = None,
    ) -> None:
        self._rows = rows
        self.text = text
        self.arrow = arrow  # the numeric Arrow column ``rows`` was read from
        self._distinct: NDArray[np.float64] | None = None
        self._found: NDArray[np.float64] | None = None  # distinct values among the coordinates
        self._member: NDArray[np.bool_] | None = None

    def rows(self) -> NDArray[np.float64]:
        """The number of every row (NaN: none)."""
        if self._rows is None:
            col = self.text
            assert col is not None
            per_entry = col.numeric
            if per_entry.size:
                self._rows = np.where(col.codes >= 0, per_entry[np.maximum(col.codes, 0)], np.nan)
            else:
                self._rows = np.full(col.codes.size, np.nan)
        return self._rows

    def any_value(self) -> bool:
        """Whether some row holds a value (NaN is none; an infinity is one)."""
        col = self.text
        if col is None:
            return not np.isnan(self.rows()).all()
        return bool((~np.isnan(col.numeric) & (col.counts > 0)).any())

    def distinct(self) -> NDArray[np.float64]:
        """Sorted distinct finite values of the rows."""
        if self._distinct is None:
            col = self.text
            if col is not None:
                self._distinct = distinct_values(col.numeric[col.counts > 0])
            else:
                self._distinct = self._hashed_distinct()
                if self._distinct is None:
                    self._distinct = distinct_values(self.rows())
        return self._distinct

    def _hashed_distinct(self) -> NDArray[np.float64] | None:
        """The Arrow column's distinct values (by hashing) as numbers; None: not hashable."""
        if self.arrow is None:
            return None
        import pyarrow.compute as pc

        try:
            ints = _short_range_distinct(self.arrow)
            if ints is not None:
                return ints
            return distinct_values(_arrow_numeric(pc.unique(self.arrow)))
        except (pa.ArrowException, TypeError):
            return None

    def _entry_hits(self, coords: NDArray[np.float64]) -> NDArray[np.bool_]:
        col = self.text
        assert col is not None
        return col.hits(coords)

    def found(self, coords: NDArray[np.float64]) -> bool:
        """Whether some row's value is one of the sorted ``coords``."""
        col = self.text
        if col is not None:
            return bool((self._entry_hits(coords) & (col.counts > 0)).any())
        if self._found is None:
            uq = self.distinct()
            self._found = uq[in_sorted_ascending(coords, uq)]
        return bool(self._found.size)

    def member(self, coords: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Per row: whether the value is one of the sorted ``coords`` (NaN never is)."""
        if self._member is None:
            col = self.text
            if col is not None:
                hit = self._entry_hits(coords)
                if hit.size == 0:
                    self._member = np.zeros(col.codes.size, dtype=bool)
                else:
                    self._member = (col.codes >= 0) & hit[np.maximum(col.codes, 0)]
            else:
                self.found(coords)
                assert self._found is not None
                self._member = in_sorted(self._found, self.rows())
        return self._member


#: A GeoParquet point's ``bbox`` fields and the coordinate column each repeats.
_POINT_BOX = {"bbox.xmin": "x", "bbox.xmax": "x", "bbox.ymin": "y", "bbox.ymax": "y"}


#: Seconds from 1970 that ``datetime64[ns]`` holds (about 1677-09-21 to 2262-04-11).
_NS_SECONDS = (2**63 - 1) / 1e9


def _stamp_seconds(arr: pa.Array | pa.ChunkedArray) -> NDArray[np.float64]:
    """A timestamp or date column's times as :func:`~geokanon.verify._reader.ns_to_s` gives
    them (NaN where missing). A time beyond ``datetime64[ns]``'s range (``9999-12-31``,
    a register's "no end") is NaN too: no source time, read in nanoseconds, is one."""
    if isinstance(arr, pa.ChunkedArray):  # a GeoPackage layer's column
        arr = arr.combine_chunks()
    if pa.types.is_date(arr.type):  # pandas reads dates as Python objects: as times
        arr = arr.cast(pa.timestamp("ms"))
    t = arr.type
    per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[t.unit]
    raw = np.asarray(arr.view(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    inside = np.abs(raw / per_second) < _NS_SECONDS
    if not inside.all():
        import pyarrow.compute as pc

        arr = pc.if_else(pa.array(inside), arr, pa.nulls(len(arr), type=t))
    return ns_to_s(pd.Series(arr.to_pandas()))


class TableScan:
    """Table-level checks of one file (columns as values), fed one batch of rows at a time.

    Every finding adds up over the batches: column names come from the schema, counts
    are per row, a column's coordinate and epoch values are judged on the union of its
    distinct values, and pairs are per row. One exception: the WKB ``geometry`` column
    is left out of the pairs when it repeats the ``x``/``y`` columns exactly, which is
    known only at the end, so its pairs are counted apart. With ``one_batch`` the file
    arrives whole (duplicate column names, say) and that is decided at once.

    A row holds a source pair only where both of its columns hold a source coordinate:
    the rows of a batch are paired only between columns that hold one somewhere in it.
    """

    def __init__(self, names: Sequence[str], sec: Secrets, *, one_batch: bool = False) -> None:
        self.names = [str(n) for n in names]
        self.sec = sec
        self.one_batch = one_batch
        n = len(self.names)
        self.stamps = [False] * n  # a timestamp column holds a source time
        self.cells: list[dict[str, int]] = [{} for _ in range(n)]
        # each batch's distinct finite values per column, merged for the findings
        self._values: list[list[NDArray[np.float64]]] = [[] for _ in range(n)]
        self.present: set[str] = set()  # columns with a value (what a pair may be made of)
        self.pairs = 0
        self.geo_pairs = 0  # pairs with a geometry coordinate (multi-batch only)
        self.geo_seen = False
        self.geo_same = True  # the geometry repeats x, y in every batch so far
        self.n_rows = 0
        self.text_cols: set[int] = set()  # columns read as text (their ids are found as text)
        #: the extent of the geometry's points so far (xmin, ymin, xmax, ymax), or None
        self.geo_extent: list[float] | None = None

    def _extend(self, gx: NDArray[np.float64], gy: NDArray[np.float64]) -> None:
        box = finite_extent(gx, gy)
        if box is None:
            return
        if self.geo_extent is None:
            self.geo_extent = [float(v) for v in box]
        else:
            e = self.geo_extent
            self.geo_extent = [
                min(e[0], box[0]),
                min(e[1], box[1]),
                max(e[2], box[2]),
                max(e[3], box[3]),
            ]

    def values(self, i: int) -> NDArray[np.float64] | None:
        """Distinct finite values of column ``i`` (None: it held no value)."""
        parts = self._values[i]
        if not parts:
            return None
        if len(parts) > 1:
            parts[:] = [distinct_values(np.concatenate(parts))]
        return parts[0]

    def add(
        self,
        columns: Sequence[tuple[str, pa.ChunkedArray | pa.Array]],
        text_cells: Mapping[str, _TextColumn] | None = None,
    ) -> None:
        """Scan one batch: the columns in schema order (``text_cells``: by name, when known)."""
        sec = self.sec
        text_cells = text_cells if text_cells is not None else {}
        if columns:
            name, arr = columns[0]
            self.n_rows += len(text_cells[name].codes) if name in text_cells else len(arr)
        numeric: dict[str, _Numbers] = {}  # what pairs are made of
        every: dict[str, _Numbers] = {}  # every column read as numbers so far
        geo_keys: set[str] = set()
        for i, (name, arr) in enumerate(columns):
            t = arr.type
            if name == "geometry":
                gx, gy = wkb_xy(arr)
                self._extend(gx, gy)
                if self.one_batch:
                    same = (
                        "x" in numeric
                        and "y" in numeric
                        and same_values(gx, numeric["x"].rows())
                        and same_values(gy, numeric["y"].rows())
                    )
                    if gx.size and not same:
                        numeric["geometry.x"], numeric["geometry.y"] = _Numbers(gx), _Numbers(gy)
                    continue
                same = (
                    "x" in every
                    and "y" in every
                    and same_values(gx, every["x"].rows())
                    and same_values(gy, every["y"].rows())
                )
                if gx.size:
                    self.geo_seen = True
                    self.geo_same &= same
                    if same:  # the very values of x, y row by row (so the same coordinates)
                        numeric["geometry.x"], numeric["geometry.y"] = every["x"], every["y"]
                    else:
                        numeric["geometry.x"], numeric["geometry.y"] = _Numbers(gx), _Numbers(gy)
                    geo_keys = {"geometry.x", "geometry.y"}
                continue
            if pa.types.is_timestamp(t) or pa.types.is_date(t):
                secs = _stamp_seconds(arr)
                if (isin(secs, sec.epoch) | isin(secs, sec.wall)).any():
                    self.stamps[i] = True
                continue
            if pa.types.is_boolean(t) or pa.types.is_null(t):
                continue
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
                n_key = _key_ints_in(arr, sec)
                if n_key:
                    cell = self.cells[i]
                    cell["copies of the mask key"] = cell.get("copies of the mask key", 0) + n_key
                rows = _arrow_numeric(arr)
                twin = every.get(_POINT_BOX.get(name, ""))
                if twin is not None and same_values(rows, twin.rows()):
                    nums = twin  # a point's box repeats its x or y: the same values, row by row
                else:
                    nums = _Numbers(rows=rows, arrow=arr)
                has = nums.any_value()
            else:
                col = text_cells.get(name)
                if col is None:
                    col = text_column(arr)
                legit = sec.legit_for(name) if sec.strict else None
                for what, n in _cell_counts(col, sec, legit).items():
                    self.cells[i][what] = self.cells[i].get(what, 0) + n
                self.text_cols.add(i)
                finite = bool(np.isfinite(col.numeric).any())
                if not finite and self.one_batch:
                    continue
                nums = _Numbers(text=col)
                has = finite and nums.any_value()
            every[name] = nums
            if not has:
                continue
            self.present.add(name)
            if name.lower() not in _COORDINATE_COLUMNS:
                # judged on its distinct values (x, y: as pairs only); a text column's
                # are the numbers of the entries its rows use
                self._values[i].append(nums.distinct())
            if name.lower() not in _NOT_PAIRS:
                numeric[name] = nums
        if not (sec.has_pairs and len(numeric) >= 2):
            return
        names = list(numeric)
        if sec.near is None:
            # a pair needs a source coordinate in both columns of a row
            names = [key for key in names if numeric[key].found(sec.coords)]
        for a in names:
            for b in names:
                if a == b:
                    continue
                na, nb = numeric[a], numeric[b]
                if sec.near is None:
                    n = _pair_hits(
                        na.rows(), nb.rows(), sec, na.member(sec.coords), nb.member(sec.coords)
                    )
                else:
                    n = _pair_hits(na.rows(), nb.rows(), sec)
                self.pairs += n
                if a in geo_keys or b in geo_keys:
                    self.geo_pairs += n

    def findings(self) -> list[str]:
        """Everything found, in column order, then the pairs."""
        sec = self.sec
        found: list[str] = []
        for i, name in enumerate(self.names):
            if name.lower() in sec.bad_names:
                found.append(f"column {name!r} names a source id, subject, time or row number")
            if key_count(name, sec):
                found.append(f"column {name!r}: its name holds the mask key")
            if self.stamps[i]:
                found.append(f"column {name!r}: source timestamps")
            # as _cell_findings orders them
            for what in ("subject ids", "timestamps", "copies of the mask key"):
                if self.cells[i].get(what):
                    found.append(f"column {name!r}: {self.cells[i][what]} {what}")
            values = self.values(i)
            if values is not None:
                found += _numeric_column_hits(name, values, sec, ids=i not in self.text_cols)
        n_pairs = self.pairs
        if not self.one_batch and self.geo_seen and self.geo_same and {"x", "y"} <= self.present:
            n_pairs -= self.geo_pairs  # the geometry repeats x, y: not pairs of its own
        if n_pairs:
            found.append(f"{n_pairs} rows hold a source coordinate pair")
        return found


def _scan_columns(
    columns: Sequence[tuple[str, pa.ChunkedArray | pa.Array]],
    sec: Secrets,
    *,
    text_cells: dict[str, _TextColumn] | None = None,
) -> list[str]:
    """Table-level checks (columns as values) of a whole table; the caller also scans the text.

    A struct column (GeoParquet's ``bbox``) is scanned as its fields.
    """
    columns = _flat_columns([n for n, _ in columns], [a for _, a in columns])
    scan = TableScan([n for n, _ in columns], sec, one_batch=True)
    scan.add(columns, text_cells)
    return scan.findings()


def scan_frame(frame: pd.DataFrame, sec: Secrets) -> list[str]:
    """Table-level checks of a pandas frame (columns as values)."""
    cols: list[tuple[str, pa.Array]] = []
    for c in frame.columns:
        s = frame[c]
        try:
            arr = pa.array(s, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError):
            arr = pa.array(s.astype(str).tolist(), type=pa.string())
        cols.append((str(c), arr))
    return _scan_columns(cols, sec)


#: WKB of a 2-D point, little-endian: byte order 1, type 1, x, y.
_WKB_POINT_LE = b"\x01\x01\x00\x00\x00"


def wkb_xy(
    arr: pa.ChunkedArray | pa.Array | pd.Series,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Point coordinates of a WKB column (NaN for nulls, empty and non-point geometries).

    Little-endian 2-D points (21 bytes each) are read directly; any other geometry
    sends the whole column through shapely. The column read last is remembered (with its
    buffers, so their addresses stay its own): the records pass and ``no_leak``'s scan
    read the same column of a batch. The arrays returned must not be changed.
    """
    if isinstance(arr, pd.Series):
        arr = pa.array(
            [bytes(v) if isinstance(v, bytes | bytearray | memoryview) else None for v in arr],
            type=pa.binary(),
        )
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        return np.array([]), np.array([])
    if n == 0:
        return np.full(0, np.nan), np.full(0, np.nan)
    global _LAST_WKB
    buffers = arr.buffers()
    key = (str(arr.type), arr.offset, n, *(0 if b is None else b.address for b in buffers))
    last = _LAST_WKB
    if last is not None and last[0] == key:
        return last[2]
    xy = _wkb_xy(arr, n)
    _LAST_WKB = (key, buffers, xy)
    return xy


#: (key, buffers, points) of the WKB column :func:`wkb_xy` read last
_LAST_WKB: (
    tuple[tuple[Any, ...], list[Any], tuple[NDArray[np.float64], NDArray[np.float64]]] | None
) = None


def _wkb_xy(arr: pa.Array, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`wkb_xy` of a binary array of ``n`` > 0 rows."""
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
    data = arr.buffers()[2]
    data_np = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    direct = wkb_points(offsets, data_np, valid)
    if direct is not None:  # little-endian 2-D points (or nulls) only: read directly
        return direct
    xs = np.full(n, np.nan)
    ys = np.full(n, np.nan)
    if not valid.any():
        return xs, ys
    import shapely

    raw_obj = np.array([v if v is None else bytes(v) for v in arr.to_pylist()], dtype=object)
    try:
        geoms = shapely.from_wkb(raw_obj, on_invalid="ignore")
    except Exception:  # shapely's GEOSException: not geometries, nothing to compare
        return np.array([]), np.array([])
    empty = shapely.is_missing(geoms) | shapely.is_empty(geoms)
    points = ~empty & (shapely.get_type_id(geoms) == 0)
    xs[points] = shapely.get_x(geoms[points])
    ys[points] = shapely.get_y(geoms[points])
    return xs, ys


def parquet_text_columns(schema: pa.Schema) -> list[str]:
    """The columns ``no_leak`` reads from a Parquet file as dictionaries (text, and binary
    other than the geometry: each distinct value is judged once)."""
    return [
        f.name
        for f in schema
        if pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
        or (pa.types.is_binary(f.type) and f.name != "geometry")
    ]


def parquet_read_whole(schema: pa.Schema) -> bool:
    """Whether ``no_leak`` reads a Parquet file as one table: repeated column names (or a
    column named like the geometry's coordinates) make the table-level checks depend on
    whole columns."""
    names = [str(n) for n in schema.names]
    return len(set(names)) != len(names) or bool({"geometry.x", "geometry.y"} & set(names))


def _parquet_batches(path: Path) -> tuple[pa.Schema, bool, Iterator[pa.Table | pa.RecordBatch]]:
    """(schema, whether read whole, the file in batches of rows); text columns as dictionaries.

    Repeated column names (or a column named like the geometry's coordinates) make the
    table-level checks depend on whole columns: such a file comes as one table.
    """

    def unreadable(exc: Exception) -> Unreadable:
        return Unreadable(f"{path.name} is unreadable ({type(exc).__name__})")

    try:
        schema = pq.ParquetFile(path).schema_arrow
        text_cols = parquet_text_columns(schema)
        whole = parquet_read_whole(schema)
        if whole:
            tables = iter([pq.read_table(path, read_dictionary=text_cols or None)])
            return schema, True, tables
        pf = pq.ParquetFile(path, read_dictionary=text_cols or None)
        it = pf.iter_batches(batch_size=_reader.SCAN_ROWS, use_threads=True)
    except (OSError, pa.ArrowException) as exc:
        raise unreadable(exc) from None

    def batches() -> Iterator[pa.RecordBatch]:
        with contextlib.closing(read_ahead(it)) as ahead:
            while True:
                try:
                    batch = next(ahead)
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as exc:
                    raise unreadable(exc) from None
                yield batch

    return schema, False, batches()


def _flat_columns(
    names: Sequence[str], columns: Sequence[pa.ChunkedArray | pa.Array]
) -> list[tuple[str, pa.ChunkedArray | pa.Array]]:
    """Columns with every struct column (the GeoParquet ``bbox``) as its fields, ``bbox.xmin``."""
    out: list[tuple[str, pa.ChunkedArray | pa.Array]] = []
    for name, arr in zip(names, columns, strict=True):
        if not pa.types.is_struct(arr.type):
            out.append((name, arr))
            continue
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        for sub, child in zip(arr.type, arr.flatten(), strict=True):
            out += _flat_columns([f"{name}.{sub.name}"], [child])
    return out


def _unit_geography(meta: Mapping[bytes, bytes]) -> bool:
    """Whether a GeoParquet file's geometry is polygons only (classes.parquet: unit polygons,
    from the ``--units`` file or the grid, made from no record)."""
    try:
        geo = json.loads(meta.get(b"geo", b"{}"))
        col = geo["columns"][geo["primary_column"]]
        types = {str(t).removesuffix(" Z") for t in col.get("geometry_types", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(types) and types <= {"Polygon", "MultiPolygon"}


def without_geography(decoded: str, extent: Sequence[float] | None = None) -> str:
    """GeoParquet metadata without the file's ``bbox``.

    With ``extent`` None: every column's ``bbox`` goes (the unit polygons' extent, unit
    geography). With the extent of the points the file's geometry holds (scanned as
    pairs like every coordinate): a ``bbox`` goes only when it is exactly that extent,
    so it holds nothing of its own; any other ``bbox`` stays and is searched.
    """
    try:
        geo = json.loads(decoded)
        for col in geo.get("columns", {}).values():
            box = col.get("bbox")
            if extent is None or (
                isinstance(box, list)
                and len(box) == 4
                and [float(v) for v in box] == [float(v) for v in extent]
            ):
                col.pop("bbox", None)
        return json.dumps(geo)
    except (ValueError, AttributeError, TypeError):
        return decoded


def _bbox_is(decoded: str, extent: Sequence[float] | None) -> bool:
    """Every ``bbox`` of GeoParquet metadata ``decoded`` is exactly ``extent`` (none where
    the file has no point): a point file's box is the extent of its points, no more."""
    try:
        geo = json.loads(decoded)
        boxes = [c.get("bbox") for c in geo.get("columns", {}).values()]
    except (ValueError, AttributeError, TypeError):
        return True  # not GeoParquet: the container rules say so
    want = None if extent is None else [float(v) for v in extent]
    for box in boxes:
        if box is None:
            continue
        if want is None or not (
            isinstance(box, list) and len(box) == 4 and [float(v) for v in box] == want
        ):
            return False
    return True


class ParquetScan:
    """``no_leak``'s checks of one Parquet file (its ``schema``, ``whole``: read as one
    table), fed its batches of rows (:meth:`add`; struct columns as they are read, text
    as dictionaries): table-level checks of every column, the text of every string
    column, then its key-value metadata (:meth:`findings`). :func:`scan_parquet` reads
    the file for it; the records pass of ``records.parquet`` feeds it the batches it reads
    (:func:`geokanon.verify._records.parquet_tap`), so that file is read once."""

    def __init__(self, schema: pa.Schema, sec: Secrets, *, whole: bool = False) -> None:
        self.schema, self.sec = schema, sec
        self.top = [str(n) for n in schema.names]
        # Unit geography (polygons: their vertices and boxes are the unit file's or the
        # grid's, checked against the geometry by ``counts``) is not searched for
        # coordinates.
        self.geography = _unit_geography(schema.metadata or {})
        self.skip = (
            {f"bbox.{f}" for f in ("xmin", "ymin", "xmax", "ymax")} if self.geography else set()
        )
        # the struct fields' names too
        names = [
            n
            for n, _ in _flat_columns(self.top, [pa.nulls(0, f.type) for f in schema])
            if n not in self.skip
        ]
        self.scan = TableScan(names, sec, one_batch=whole)
        self.text: dict[str, dict[str, int]] = {}

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """The next rows of the file."""
        sec = self.sec
        cols = [
            (n, arr)
            for n, arr in _flat_columns(self.top, [batch.column(i) for i in range(len(self.top))])
            if n not in self.skip
        ]
        cells = {
            n: text_column(arr)
            for n, arr in cols
            if n != "geometry"
            and (
                pa.types.is_dictionary(arr.type)
                or pa.types.is_string(arr.type)
                or pa.types.is_large_string(arr.type)
            )
        }
        self.scan.add(cols, text_cells=cells)
        # the text of every string column: numbers, timestamps and subject ids
        for n, col in cells.items():
            legit = sec.legit_for(n) if sec.strict else None
            add_counts(self.text.setdefault(n, {}), text_counts(col, sec, True, legit))

    def findings(self) -> list[str]:
        """Everything found, once every batch has been added."""
        sec, scan = self.sec, self.scan
        found: list[str] = []
        meta = self.schema.metadata or {}
        for key, value in meta.items():
            decoded = value.decode("utf-8", errors="replace")
            if key == b"pandas":
                try:
                    info = json.loads(decoded)
                except ValueError:
                    info = {}
                for idx in info.get("index_columns", []):
                    if not (isinstance(idx, Mapping) and idx.get("kind") == "range"):
                        found.append("a stored pandas index (row numbers)")
            if key == b"geo" and not self.geography and not _bbox_is(decoded, scan.geo_extent):
                found.append("metadata: a geo bbox other than the extent of the file's points")
            if key == b"geo" and self.geography:
                decoded = without_geography(decoded)
            elif key == b"geo" and scan.geo_extent is not None:
                # a point file's bbox is the extent of its points (the published points)
                decoded = without_geography(decoded, scan.geo_extent)
            if key == b"geo" and sec.strict:
                decoded = without_declared_crs(decoded, sec.crs)
            found += [f"metadata: {f}" for f in scan_text(decoded, sec)]
        found += scan.findings()
        text_found = [f for counts in self.text.values() for f in ordered_counts(counts)]
        found += [f"text: {f}" for f in merge_counts(text_found)]
        return found


def scan_parquet(path: Path, sec: Secrets, encoding: list[str] | None = None) -> list[str]:
    """A Parquet file's findings (:class:`ParquetScan`), read in batches of rows, and its
    container's (``encoding``: its encoding's findings, when worked out already)."""
    schema, whole, batches = _parquet_batches(path)
    scan = ParquetScan(schema, sec, whole=whole)
    for batch in batches:
        scan.add(batch)
    return scan.findings() + parquet_container_problems(path, encoding)


#: The order in which a text's findings are reported.
_TEXT_ORDER = ("coordinate pairs", "coordinate values", "epoch times", "timestamps", "subject ids")


def add_counts(total: dict[str, int], more: Mapping[str, int]) -> None:
    for what, n in more.items():
        total[what] = total.get(what, 0) + n


def ordered_counts(counts: Mapping[str, int]) -> list[str]:
    """``{"subject ids": 2}`` -> ``["2 subject ids"]``, in report order, zeros left out."""
    return [f"{counts[what]} {what}" for what in _TEXT_ORDER if counts.get(what)]


def merge_counts(findings: list[str]) -> list[str]:
    """``["2 subject ids", "3 subject ids"]`` -> ``["5 subject ids"]`` (order kept)."""
    totals: dict[str, int] = {}
    for f in findings:
        n, what = f.split(" ", 1)
        totals[what] = totals.get(what, 0) + int(n)
    return [f"{n} {what}" for what, n in totals.items()]


class _HashingFile(io.RawIOBase):
    """A file read front to back and hashed (sha256) as it is read."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._fh = open(path, "rb")  # closed with this object
        self._hash = hashlib.sha256()
        self.at_end = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._fh.readinto(buffer)
        if n:
            self._hash.update(memoryview(buffer)[:n])
        else:
            self.at_end = True
        return n

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        self._fh.close()
        super().close()


class _BatchTap(Protocol):
    """What else reads a CSV file's batches as :func:`_csv_batches` reads them (so that the
    file is parsed once): the header, then every batch, then ``finish`` at the end."""

    def start(self, names: list[str]) -> None: ...

    def add(self, batch: pa.RecordBatch) -> None: ...

    def finish(self) -> None: ...


def _csv_batches(
    path: Path, digests: dict[Path, str] | None = None, tap: _BatchTap | None = None
) -> tuple[list[str], Iterator[list[_TextColumn]]] | None:
    """A CSV file's header and its rows in batches, every column as text.

    None, or a batch of None, when it is not a regular CSV (read it raw instead).
    ``digests``: where to note the file's sha256, taken from the bytes as they are
    read, when the batches are read to the end. ``tap``: given every batch as read
    (dictionary text; with a tap an unquoted empty cell is null, a quoted one ``""``,
    which the scan reads alike: an empty cell holds no number and is a missing value),
    and told when the file was read to its end.
    """
    import pyarrow.csv as pacsv

    source: _HashingFile | None = None
    try:
        with pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=1 << 16)) as reader:
            names = [str(n) for n in reader.schema.names]
        if len(set(names)) != len(names) or not names:
            return None
        source = _HashingFile(path)
        reader = pacsv.open_csv(
            source,
            read_options=pacsv.ReadOptions(use_threads=True, block_size=_reader.CSV_BLOCK),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.dictionary(pa.int32(), pa.string()) for n in names},
                null_values=[""] if tap is not None else [],
                strings_can_be_null=tap is not None,
                quoted_strings_can_be_null=False,
            ),
        )
    except (OSError, pa.ArrowException, ValueError):
        if source is not None:
            source.close()
        return None
    file = source
    if tap is not None:
        tap.start(names)

    def blocks() -> Iterator[pa.RecordBatch]:
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return

    def batches() -> Iterator[list[_TextColumn]]:
        # the next block is parsed while this one is scanned (and stops before the file closes)
        with file, reader, contextlib.closing(read_ahead(blocks())) as ahead:
            while True:
                try:
                    batch = next(ahead)
                except StopIteration:
                    if digests is not None and file.at_end:
                        digests[path] = file.hexdigest()
                    if tap is not None:
                        tap.finish()
                    return
                except (OSError, pa.ArrowException, ValueError):
                    raise _NotRegular from None
                if tap is not None:
                    tap.add(batch)
                    yield [_empty_not_null(text_column(c)) for c in batch.columns]
                else:
                    yield [text_column(batch.column(i)) for i in range(batch.num_columns)]

    return names, batches()


def _empty_not_null(col: _TextColumn) -> _TextColumn:
    """A CSV column read with empty cells as nulls, as read without: an empty text."""
    null = col.codes < 0
    if not null.any():
        return col
    at = np.flatnonzero(col.texts == "")
    texts = col.texts if at.size else np.append(col.texts, np.array([""], dtype=object))
    empty = int(at[0]) if at.size else texts.size - 1
    return _TextColumn(texts=texts, codes=np.where(null, empty, col.codes))


class _NotRegular(Exception):
    """A CSV file turned out not to be a regular table part way through."""


#: pandas' default missing-value markers (``read_csv(keep_default_na=True)``).
CSV_NA = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
     "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)  # fmt: skip


_CSV_NA_ARROW = pa.array(sorted(CSV_NA), type=pa.string())


def scan_csv(
    path: Path,
    sec: Secrets,
    rows: dict[Path, int] | None = None,
    digests: dict[Path, str] | None = None,
    tap: _BatchTap | None = None,
) -> list[str] | None:
    """A CSV file, cell by cell: as text (pairs across the whole text) and as a table.

    Every cell's number tokens are those ``_NUMBER`` finds in the raw text (cells are
    separated by characters no token contains), so the token stream of the file is
    the header's then every row's, cell by cell. None: the file needs the raw scan.
    The file is read in batches of rows; the token stream runs on across them.
    ``rows``: where to note the file's number of data rows (when it is read to the end);
    ``digests``: its sha256, likewise; ``tap``: see :func:`_csv_batches`.
    """
    import pyarrow.compute as pc

    if sec.spaced_ids:
        return None  # an id with separators may span cells: search the raw text
    parsed = _csv_batches(path, digests, tap)
    if parsed is None:
        return None
    names, batches = parsed
    head = _numbers(_NUMBER.findall(",".join(names)))
    n_pairs = _pair_hits(head[:-1], head[1:], sec) if head.size > 1 else 0
    prev_val: NDArray[np.float64] = head
    prev_in: NDArray[np.bool_] = isin(head, sec.coords)
    text: list[dict[str, int]] = [{} for _ in names]
    scan = TableScan(names, sec)
    try:
        for cols in batches:
            # one token at most per cell, or the raw scan
            per_cell: list[tuple[NDArray[np.float64], NDArray[np.bool_]]] = []
            for col in cols:
                single = col.single_tokens()
                if single is None:
                    return None
                per_cell.append(single)
            # the token stream, row-major, and each token's membership in the source
            # coordinates
            entry_in = [isin(v, sec.coords) for v, _ in per_cell] if sec.near is None else None
            used = [(has & (col.counts > 0)) for col, (_, has) in zip(cols, per_cell, strict=True)]
            if entry_in is not None and not any(
                (hit & u).any() for hit, u in zip(entry_in, used, strict=True)
            ):
                # no token of the batch is a source coordinate: it makes no pair, and its
                # last token (when it has one) makes none with the next batch's first
                if any(u.any() for u in used):
                    prev_val, prev_in = np.array([np.nan]), np.zeros(1, dtype=bool)
            else:
                n_rows = cols[0].codes.size if cols else 0
                shape = (n_rows, len(cols))
                vals_m = np.full(shape, np.nan)
                has_m = np.zeros(shape, dtype=bool)
                in_m = np.zeros(shape, dtype=bool)
                for j, (col, (value, has)) in enumerate(zip(cols, per_cell, strict=True)):
                    safe = np.maximum(col.codes, 0)
                    vals_m[:, j] = value[safe]
                    has_m[:, j] = has[safe] & (col.codes >= 0)
                    if entry_in is not None:
                        in_m[:, j] = entry_in[j][safe]
                flat = has_m.ravel()
                vals = np.concatenate([prev_val[-1:], vals_m.ravel()[flat]])
                ins = np.concatenate([prev_in[-1:], in_m.ravel()[flat]])
                if vals.size > 1:
                    n_pairs += _pair_hits(
                        vals[:-1], vals[1:], sec, None if entry_in is None else ins[:-1],
                        None if entry_in is None else ins[1:],
                    )  # fmt: skip
                if vals.size:
                    prev_val, prev_in = vals[-1:], ins[-1:]
            # numbers as text (epoch times only: single values are judged per column)
            for j, col in enumerate(cols):
                legit = sec.legit_for(names[j]) if sec.strict else None
                add_counts(text[j], text_counts(col, sec, False, legit))
            # as a table (pandas' reading: default missing-value markers are empty)
            cells: dict[str, _TextColumn] = {}
            for name, col in zip(names, cols, strict=True):
                na = (
                    np_bool(pc.is_in(col.arrow, value_set=_CSV_NA_ARROW))
                    if len(col.texts)
                    else None
                )
                cells[name] = col.without(na) if na is not None and na.any() else col
            scan.add([(n, pa.array([], type=pa.string())) for n in names], text_cells=cells)
    except _NotRegular:
        return None
    if rows is not None:
        rows[path] = scan.n_rows
    found: list[str] = []
    if n_pairs:
        found.append(f"{n_pairs} coordinate pairs")
    text_found: list[str] = _number_findings(head, sec, pairs=False, single_values=False)
    text_found += _stamp_and_id_findings(",".join(names), sec)
    for counts in text:
        text_found += ordered_counts(counts)
    found += merge_counts(text_found)
    found += scan.findings()
    return found


def without_declared_crs(geo: str, crs: str | None) -> str:
    """GeoParquet ``geo`` metadata without the CRS definitions that define the manifest's
    ``crs`` (their numbers are the CRS's own: a false easting of 155000 is no dwelling).

    A definition that is not the manifest's CRS stays, and is scanned like any text.
    """
    try:
        info = json.loads(geo)
    except ValueError:
        return geo
    columns = info.get("columns") if isinstance(info, dict) else None
    if not isinstance(columns, dict) or crs is None:
        return geo
    try:
        from pyproj import CRS

        declared = CRS.from_user_input(crs)
    except Exception:  # pyproj's CRSError: nothing to compare with
        return geo
    for meta in columns.values():
        if not isinstance(meta, dict) or not isinstance(meta.get("crs"), dict):
            continue
        try:
            same = CRS.from_json_dict(meta["crs"]) == declared
        except Exception:  # not a CRS definition: scanned as text
            same = False
        if same:
            meta["crs"] = None
    return json.dumps(info)


_DATA_URI = re.compile(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=\s]+")
_SCRIPT_STYLE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<[^>]*>", re.S)
_ATTR = re.compile(r"([\w:.-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
#: Attributes whose values are the page's own machinery (names, styles, sources).
_MARKUP_ATTRS = frozenset(
    {"class", "id", "style", "src", "href", "lang", "charset", "http-equiv", "name",
     "content", "type", "rel", "width", "height", "viewbox", "d", "points", "transform",
     "fill", "stroke", "xmlns", "colspan", "rowspan", "scope", "role", "for", "dir"}
)  # fmt: skip


#: Subject ids shorter than this are not looked for in HTML markup, whose own words
#: (``h1``, ``td``, ``px``) they could be; everywhere else every id is.
_MARKUP_ID_MIN = 4


def _markup_secrets(sec: Secrets) -> Secrets:
    """``sec`` with the ids markup is searched for (made once per ``sec``)."""
    cached = sec.__dict__.get("_markup")
    if cached is not None:
        return cached
    ids = frozenset(i for i in sec.subject_ids if len(i) >= _MARKUP_ID_MIN)
    out = sec
    if len(ids) != len(sec.subject_ids):
        spaced = tuple(i for i in sec.spaced_ids if i in ids)
        out = dataclasses.replace(sec, subject_ids=ids, spaced_ids=spaced)
    sec.__dict__["_markup"] = out
    return out


def scan_html(text: str, sec: Secrets) -> list[str]:
    """An HTML page: the text a reader sees as prose, the markup as drawing instructions.

    The text (outside tags, ``<script>`` and ``<style>``) and the values of attributes
    that carry content (``title``, ``alt``, ``data-*``, ...: any but those of
    :data:`_MARKUP_ATTRS`) are judged as prose (:func:`scan_text`). The markup (tag and
    attribute names, styles, scripts, classes, element ids, sizes, path data) is the
    page's own machinery: its numbers are pixel sizes, colours and path coordinates and
    its words are tag names (``h1``), whole numbers and short words that cannot be told
    from a whole-number coordinate or a short id; there, coordinate pairs, non-integral
    coordinates, epoch times, timestamps, the mask key and the subject ids of at least
    :data:`_MARKUP_ID_MIN` characters that are not numbers are looked for. Embedded
    images (``data:`` URIs) are image bytes, searched for the mask key only.
    """
    payloads = _DATA_URI.findall(text)
    rest = _DATA_URI.sub(" ", text)
    blocks = [m.group(0) for m in _SCRIPT_STYLE.finditer(rest)]
    rest = _SCRIPT_STYLE.sub(" ", rest)
    tags = _TAG.findall(rest)
    shown: list[str] = []
    machinery: list[str] = []
    for tag in tags:
        values = _ATTR.findall(tag)
        for name, a, b in values:
            (machinery if name.lower() in _MARKUP_ATTRS else shown).append(a or b)
        machinery.append(_ATTR.sub(" ", tag))
    visible = html.unescape(" ".join([_TAG.sub(" ", rest), *shown]))
    found = scan_text(visible, sec)
    found += scan_text(" ".join([*blocks, *machinery]), _markup_secrets(sec), prose=False)
    n_key = sum(key_count(p, sec) for p in payloads)
    if n_key:
        found.append(f"{n_key} copies of the mask key")
    return merge_counts(found)


def scan_csv_raw(path: Path, sec: Secrets) -> list[str]:
    """A CSV file as raw text, then as a table read by pandas (any CSV, slowly)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    # a CSV's single values are judged column by column (published x, y may
    # coincide with one source ordinate); pairs, ids and times in its text too
    found = scan_text(text, sec, single_values=False, prose=False)
    try:
        frame = pd.read_csv(path, keep_default_na=True, low_memory=False)
    except (ValueError, pd.errors.ParserError):
        frame = None
    if frame is not None:
        found += scan_frame(frame, sec)
    return found


def scan_file(path: Path, sec: Secrets, rel: ReleaseReader | None = None) -> list[str]:
    """One release file's findings, by its kind, for both layouts: Parquet column by
    column; ``release.gpkg`` as tables and text (:mod:`.gpkg`; with ``rel``); CSV as text
    and a table (with ``rel``: its rows and sha256 noted, and ``records.csv``'s read
    serving the comparison with ``records.parquet``), else as raw text; HTML as page and
    markup (``sec.strict``); JSON, Markdown, text, SVG and GeoJSON as text; any other
    file's bytes for the mask key. The single-file check scans every release file with
    it, the partitioned source tasks the small files (no ``rel``: a task holds none)."""
    suffix = path.suffix.lower()
    found: list[str] | None = []
    if suffix in (".parquet", ".pq"):
        from geokanon.verify._records import scanned_records

        # records.parquet: the records pass's read of it serves the scan too
        found = scanned_records(rel, path) if rel is not None else None
        encoding = rel.encoding_findings(path) if rel is not None else None
        if found is None:
            found = scan_parquet(path, sec, encoding)
        else:
            found += parquet_container_problems(path, encoding)
    elif suffix == ".gpkg" and rel is not None:
        from geokanon.verify.gpkg import gpkg_leaks

        crs = rel.manifest.get("crs")
        found = gpkg_leaks(path, sec, rel)
        found += gpkg_container_problems(path, None if crs in (None, "") else str(crs))
        if sec.key_forms:  # and its bytes, for the mask key
            data = path.read_bytes()
            n = key_count(data.decode("latin-1"), sec) + sum(data.count(r) for r in sec.key_raw)
            found += [f"{n} copies of the mask key"] if n else []
    elif suffix == ".csv":
        from geokanon.verify._records import csv_tap

        # records.csv: the same read serves its comparison with records.parquet
        tap = csv_tap(rel, path) if rel is not None else None
        rows = rel.csv_rows if rel is not None else None
        digests = rel.read_digests if rel is not None else None
        found = scan_csv(path, sec, rows=rows, digests=digests, tap=tap)
        if found is None:
            found = scan_csv_raw(path, sec)
    elif suffix in (".html", ".htm") and sec.strict:
        found = scan_html(path.read_text(encoding="utf-8", errors="replace"), sec)
    elif suffix in (".json", ".md", ".html", ".htm", ".txt", ".svg", ".geojson"):
        text = path.read_text(encoding="utf-8", errors="replace")
        found = scan_text(text, sec)
    elif sec.key_forms:  # any other file: its bytes, for the mask key
        data = path.read_bytes()
        n = key_count(data.decode("latin-1"), sec) + sum(data.count(r) for r in sec.key_raw)
        found = [f"{n} copies of the mask key"] if n else []
    return found or []

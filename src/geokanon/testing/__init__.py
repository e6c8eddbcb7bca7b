"""Guarantees a downstream project can test: assertions over a written release.

A pipeline that publishes geokanon releases can block on them in its own test
suite::

    from geokanon.testing import (
        assert_group_extents, assert_k_anonymous, assert_no_recoverable_hole,
        assert_release_verifies, assert_unit_caps, load_release,
    )

    def test_release_is_safe():
        release = load_release("out/dwellings")
        assert_k_anonymous(release, 5)
        assert_group_extents(release, 300.0)
        assert_unit_caps(release, 0.10)
        assert_no_recoverable_hole(release.tables())
        assert_release_verifies("out/dwellings", "dwellings.csv")

With the pytest plugin (:mod:`geokanon.testing_plugin`) the ``geokanon_release``
fixture loads the directory named by ``--geokanon-release DIR`` or the
``geokanon_release`` ini value. Hypothesis strategies for point sets are in
:mod:`geokanon.testing.strategies` (imported on demand: this module does not
need Hypothesis, nor pytest).

What the objects are
--------------------
``release``
    A :class:`Release`, loaded by :func:`load_release` from a release directory
    (``DIR`` holding ``release/`` and, for the custodian, ``audit/``; see
    ``docs/release-format.md``): the manifest, the published ``groups``,
    ``classes`` and ``units`` tables, and the audit's per-record ``assignment``
    when ``audit/`` is present. Files are read lazily by the verifier's own
    readers (:mod:`geokanon.verify`), so an assertion and ``geokanon verify``
    never disagree about what a file says.
``tables``
    A :class:`PublishedTables`: every published figure a reader could combine to
    recover a hidden count (the ``units.csv`` rows, the class sizes pooled above
    unit level, the manifest's counts and input size), as
    :func:`geokanon.verify.hidden_ranges` takes them. :meth:`Release.tables`
    builds it from a release; a project that publishes its own tables can build
    one by hand.

Messages name the failing group (by its published ``group_id``), class or unit
and say by how much it fails. They never hold a coordinate, a subject id, a
timestamp or a source row.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from geokanon.errors import InputError
from geokanon.io.read import PointTable

__all__ = [
    "PublishedTables",
    "Release",
    "assert_group_extents",
    "assert_k_anonymous",
    "assert_no_recoverable_hole",
    "assert_release_verifies",
    "assert_unit_caps",
    "load_release",
]

#: How many failing groups or units a message lists before "... and N more".
_SHOWN = 10


def _more(items: Sequence[str], total: int) -> str:
    text = ", ".join(items[:_SHOWN])
    if total > _SHOWN:
        text += f", ... and {total - _SHOWN:,} more"
    return text


class Release:
    """A release directory, read lazily (construct with :func:`load_release`).

    Attributes
    ----------
    root
        The directory holding ``release/`` and (optionally) ``audit/``.
    has_audit
        Whether the custodian's ``audit/`` is present. Distinct subjects,
        member distances and per-unit suppression need it; without it only the
        published figures can be checked.
    """

    def __init__(
        self, root: Path, source: PointTable | Path | None = None, *, has_audit: bool
    ) -> None:
        from geokanon.verify._reader import ReleaseReader

        self.root = root
        self.has_audit = has_audit
        self._reader = ReleaseReader(root, source, 0.0)

    def __repr__(self) -> str:
        return f"Release({str(self.root)!r}, has_audit={self.has_audit})"

    def _read(self, what: str) -> Any:
        from geokanon.verify._results import Unreadable

        try:
            return getattr(self._reader, what)
        except Unreadable as exc:
            raise InputError(f"release {str(self.root)!r} cannot be read: {exc}") from None

    def _need_audit(self, purpose: str) -> None:
        if not self.has_audit:
            raise InputError(
                f"{purpose} needs the custodian's audit/ folder, which {str(self.root)!r} "
                "does not hold"
            )

    @property
    def manifest(self) -> dict[str, Any]:
        """``release/manifest.json``."""
        return dict(self._read("manifest"))

    @property
    def k(self) -> int:
        """The release's k (manifest)."""
        return int(self._read("k"))

    @property
    def r_max_m(self) -> float:
        """The release's r_max in metres (manifest)."""
        return float(self._read("r_max_m"))

    @property
    def unit_cap(self) -> float:
        """The release's unit cap (manifest)."""
        return float(self.manifest["unit_cap"])

    @property
    def groups(self) -> pd.DataFrame:
        """``release/groups.parquet``: ``group_id``, ``n_records``, ``x``, ``y``, ``radius_m``."""
        return self._read("groups")

    @property
    def classes(self) -> pd.DataFrame:
        """``release/classes.parquet``: ``class_id``, ``level``, ``unit``, ``n_records``."""
        return self._read("classes")

    @property
    def units(self) -> pd.DataFrame:
        """``release/units.csv`` as text (``<k`` and ``withheld`` cells kept as they read)."""
        return self._read("units_table")

    @property
    def assignment(self) -> pd.DataFrame | None:
        """``audit/assignment.parquet`` (one row per input record), or None without the audit."""
        return self._read("assignment") if self.has_audit else None

    @cached_property
    def _subjects(self) -> np.ndarray:
        return np.asarray(self._read("subjects"), dtype=np.int64)

    def tables(self) -> PublishedTables:
        """Every published figure, ready for :func:`assert_no_recoverable_hole`.

        Returns
        -------
        PublishedTables
        """
        from geokanon.verify import LESS_THAN_K, WITHHELD
        from geokanon.verify._derived import unit_rows
        from geokanon.verify._reader import cell_value
        from geokanon.verify._results import Unreadable
        from geokanon.verify.holes import published_input_size

        rel = self._reader
        try:
            rows = unit_rows(rel)
            counts = rel.manifest.get("counts") or {}
            g = cell_value(counts.get("suppressed")) if isinstance(counts, Mapping) else None
            classes = rel.classes
            groups = rel.groups
        except Unreadable as exc:
            raise InputError(f"release {str(self.root)!r} cannot be read: {exc}") from None
        pooled = 0
        if len(classes) and "level" in classes:
            up = classes["level"].astype(str) != "unit"
            pooled = int(pd.to_numeric(classes.loc[up, "n_records"]).sum())
        syn = rel.manifest.get("synthetic") or {}
        syn_total = int(syn.get("total", 0) or 0) if isinstance(syn, Mapping) else 0
        total, released = published_input_size(rel.manifest)
        own = rel.own_subjects if self.has_audit else False
        return PublishedTables(
            units=tuple(rows),
            k=self.k,
            global_suppressed=None if g == WITHHELD else g,
            own_subjects=own,
            pooled_records=pooled,
            pooled_synthetic_max=min(syn_total, pooled),
            record_bound=total,
            groups_by_majority_unit="unit" in groups.columns,
            total_records=total,
            released_records=released,
            hidden_labels=(LESS_THAN_K, WITHHELD),
        )


def load_release(
    directory: str | os.PathLike[str] | Release,
    *,
    source: PointTable | str | os.PathLike[str] | None = None,
) -> Release:
    """Load a release directory for the assertions.

    Parameters
    ----------
    directory
        The directory passed to ``geokanon release --out`` (holding ``release/``
        and, for the custodian, ``audit/``), or its ``release/`` folder alone
        (then only published figures can be checked). A :class:`Release` is
        returned unchanged.
    source
        The source records (file path or :class:`~geokanon.io.read.PointTable`):
        distinct subjects are then taken from the source, as ``geokanon verify``
        does, so a wrong subject code in the audit cannot inflate a group.

    Returns
    -------
    Release

    Raises
    ------
    InputError
        The directory holds no ``release/`` folder, or the source file is missing.

    Examples
    --------
    >>> load_release("no-such-dir")
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: 'no-such-dir' is not a release directory: ...
    """
    if isinstance(directory, Release):
        return directory
    root = Path(directory)
    if root.name == "release" and not (root / "release").is_dir():
        root = root.parent
    if not (root / "release").is_dir():
        raise InputError(
            f"{str(directory)!r} is not a release directory: it must hold release/ "
            "(give the directory passed to 'geokanon release --out')"
        )
    src: PointTable | Path | None
    if source is None or isinstance(source, PointTable):
        src = source
    else:
        src = Path(source)
        if not src.is_file():
            raise InputError(f"source file {str(src)!r} does not exist")
    return Release(root, src, has_audit=(root / "audit" / "assignment.parquet").is_file())


# --------------------------------------------------------------------------------------
# k-anonymity
# --------------------------------------------------------------------------------------


def _distinct(ids: np.ndarray, subjects: np.ndarray) -> dict[int, int]:
    from geokanon.verify.k_subjects import distinct_per

    return distinct_per(np.asarray(ids, dtype=np.int64), subjects)


def _published_ids(frame: pd.DataFrame, column: str) -> list[int]:
    if column not in frame.columns or not len(frame):
        return []
    return pd.to_numeric(frame[column]).astype(np.int64).tolist()


def assert_k_anonymous(release: Release | str | os.PathLike[str], k: int | None = None) -> None:
    """Every published group and generalised class holds at least ``k`` distinct subjects.

    Parameters
    ----------
    release
        A :class:`Release` (or a directory to load). With the audit, distinct
        subjects are counted from it (real records only: synthetic ones never
        count); without it, only the published ``n_records`` can be checked, a
        weaker test that the message says it is.
    k
        The k to require (default: the release's own).

    Raises
    ------
    AssertionError
        Naming each group or class below k (published ids) and how many subjects
        it is short.

    Examples
    --------
    >>> assert_k_anonymous(load_release("out/dwellings"), 5)  # doctest: +SKIP
    >>> assert_k_anonymous(load_release("out/dwellings"), 10)  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    AssertionError: 15,834 of 15,843 groups hold fewer than k=10 distinct subjects: ...
    """
    __tracebackhide__ = True
    rel = load_release(release)
    k = rel.k if k is None else int(k)
    what = "distinct subjects" if rel.has_audit else "records (no audit/: subjects unknown)"
    problems: list[str] = []
    for kind, frame, id_col, attr in (
        ("groups", rel.groups, "group_id", "gid"),
        ("classes", rel.classes, "class_id", "cid"),
    ):
        published = _published_ids(frame, id_col)
        if rel.has_audit:
            counts = _distinct(rel._read(attr), rel._subjects)
            ids = sorted(set(published) | set(counts))
        else:
            sizes = (
                pd.to_numeric(frame["n_records"]).astype(np.int64).tolist() if len(frame) else []
            )
            counts = dict(zip(published, sizes, strict=True))
            ids = sorted(counts)
        short = [(i, counts.get(i, 0)) for i in ids if counts.get(i, 0) < k]
        if short:
            short.sort(key=lambda t: (t[1], t[0]))
            one = kind[:-2] if kind == "classes" else kind[:-1]
            items = [f"{one} {i} has {n} ({k - n} short)" for i, n in short]
            problems.append(
                f"{len(short):,} of {len(ids):,} {kind} hold fewer than k={k} {what}: "
                + _more(items, len(short))
            )
    if problems:
        raise AssertionError("; ".join(problems))


# --------------------------------------------------------------------------------------
# Extents
# --------------------------------------------------------------------------------------


def assert_group_extents(
    release: Release | str | os.PathLike[str], r_max_m: float | None = None
) -> None:
    """Every member of every group lies within ``r_max_m`` (inclusive) of its representative.

    Distances are measured as ``geokanon verify`` measures them: on the audit's
    working coordinates (masked ones where a mask was applied), with the
    published representative transformed into the working CRS, and for a named
    working CRS on its ellipsoid too (r_max is a distance on the ground). Every group's
    published ``radius_m`` must not exceed ``r_max_m`` either.

    Parameters
    ----------
    release
        A :class:`Release` (or a directory to load). Without the audit only the
        published radii can be checked.
    r_max_m
        The largest tolerated displacement in metres (default: the release's own).

    Raises
    ------
    AssertionError
        Naming each group with a member beyond ``r_max_m``, by how many metres
        its farthest member is beyond, and how many members are.

    Examples
    --------
    >>> assert_group_extents(load_release("out/dwellings"), 300.0)  # doctest: +SKIP
    """
    __tracebackhide__ = True
    from geokanon.verify._derived import group_members, rep_arrays
    from geokanon.verify._results import Unreadable

    rel = load_release(release)
    limit = rel.r_max_m if r_max_m is None else float(r_max_m)
    if not limit > 0:
        raise InputError(f"r_max_m must be a number > 0, got {r_max_m!r}")
    groups = rel.groups
    problems: list[str] = []
    if rel.has_audit and len(groups):
        reader = rel._reader
        try:
            gid_arr, gx, gy = rep_arrays(reader)
            ox, oy = gx, gy  # as published (output CRS)
            if reader.to_working is not None:
                gx, gy = reader.to_working(gx, gy)
            rows, mg = group_members(reader)
            xs, ys = reader.xy_m
        except Unreadable as exc:
            raise InputError(f"release {str(rel.root)!r} cannot be read: {exc}") from None
        pos = pd.Series(np.arange(gid_arr.size), index=gid_arr)
        gi_f = pos.reindex(mg).to_numpy(dtype=np.float64)
        orphan = np.isnan(gi_f)
        if orphan.any():
            problems.append(f"{int(orphan.sum()):,} members belong to no published group")
        rows, gi = rows[~orphan], gi_f[~orphan].astype(np.int64)
        d = np.hypot(xs[rows] - gx[gi], ys[rows] - gy[gi])
        beyond = ~(d <= limit)
        if reader.ground is not None:  # and on the ellipsoid of a named working CRS
            on_ground, dg = reader.ground.beyond(
                xs, ys, rows, gx, gy, gi, d, np.full(d.size, limit), rep_out=(ox, oy)
            )
            beyond |= on_ground
            d = np.where(on_ground, dg, d)
        if beyond.any():
            frame = pd.DataFrame({"g": gid_arr[gi[beyond]], "over": d[beyond] - limit})
            per = frame.groupby("g")["over"].agg(["max", "size"])
            per = per.sort_values(["max", "size"], ascending=False)
            items = [
                f"group {int(g)} by {float(mx):.2f} m ({int(n)} member{'s' if n != 1 else ''})"
                for g, mx, n in zip(per.index, per["max"], per["size"], strict=True)
            ]
            problems.append(
                f"{len(per):,} of {gid_arr.size:,} groups have members beyond r_max={limit:g} m "
                f"of their representative: " + _more(items, len(per))
            )
    if "radius_m" in groups.columns and len(groups):
        rad = pd.to_numeric(groups["radius_m"]).to_numpy(dtype=np.float64)
        gids = _published_ids(groups, "group_id")
        over = np.flatnonzero(~(rad <= limit))
        if over.size:
            which = _more([f"group {gids[i]}" for i in over], int(over.size))
            problems.append(
                f"{over.size:,} groups publish a radius above r_max={limit:g} m "
                f"(largest {float(np.nanmax(rad[over])):g} m): {which}"
            )
    if problems:
        raise AssertionError("; ".join(problems))


# --------------------------------------------------------------------------------------
# Unit caps
# --------------------------------------------------------------------------------------


def assert_unit_caps(
    release: Release | str | os.PathLike[str], unit_cap: float | None = None
) -> None:
    """In every unit, suppressed distinct subjects / distinct subjects <= ``unit_cap``.

    Shares are compared as exact fractions (``0.1`` is exactly 1/10). A subject
    counts as suppressed in a unit when any of its records there is suppressed,
    and counts in every unit it has records in (as ``geokanon verify`` does).

    Parameters
    ----------
    release
        A :class:`Release` with its audit (or a directory to load).
    unit_cap
        The cap, a share in (0, 1] (default: the release's own).

    Raises
    ------
    AssertionError
        Naming each unit over the cap, its suppressed share, its size in
        subjects and how many percentage points it is over.
    InputError
        The release has no audit (per-unit suppression is not published exactly).

    Examples
    --------
    >>> assert_unit_caps(load_release("out/dwellings"), 0.10)  # doctest: +SKIP
    """
    __tracebackhide__ = True
    rel = load_release(release)
    rel._need_audit("assert_unit_caps")
    cap_value = rel.unit_cap if unit_cap is None else unit_cap
    if isinstance(cap_value, bool) or not 0 < float(cap_value) <= 1:
        raise InputError(f"unit_cap must be a share in (0, 1], got {cap_value!r}")
    cap = Fraction(repr(float(cap_value)))
    frame = pd.DataFrame(
        {
            "unit": rel._read("units"),
            "subject": rel._subjects,
            "sup": rel._read("disposal") == "suppressed",
        }
    )
    per = frame.groupby(["unit", "subject"], sort=True)["sup"].any().reset_index()
    table = per.groupby("unit", sort=True)["sup"].agg(["size", "sum"])
    over = []
    for unit, row in table.iterrows():
        s, n = int(row["sum"]), int(row["size"])
        if Fraction(s, n) > cap:
            over.append((s / n, str(unit), n))
    if over:
        over.sort(key=lambda t: (-t[0], t[1]))
        items = [
            f"{u} {100 * share:.2f}% of {n:,} subjects suppressed "
            f"({100 * (share - float(cap)):.2f} points over)"
            for share, u, n in over
        ]
        raise AssertionError(
            f"{len(over):,} of {len(table):,} units over the unit cap {100 * float(cap):g}%: "
            + _more(items, len(over))
        )


# --------------------------------------------------------------------------------------
# Holes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PublishedTables:
    """Every published figure a reader could combine (see :func:`geokanon.verify.hidden_ranges`).

    Parameters
    ----------
    units
        One mapping per unit: ``unit`` (id), ``released`` (int), ``suppressed``
        (int, ``"<k"`` or ``"withheld"``), and optionally ``generalised_up``,
        ``source_total``, ``synthetic``, ``class_records``.
    k
        The release's k.
    global_suppressed
        The published global suppressed count: an int, ``"<k"``, or None
        (withheld).
    own_subjects
        Every record is its own subject (no subject column). False is the
        cautious default for tables built by hand: records and subjects are then
        separate unknowns.
    pooled_records, pooled_synthetic_max, record_bound, groups_by_majority_unit,
    total_records, released_records
        As for :func:`geokanon.verify.hidden_ranges`.
    hidden_labels
        The cell texts that mean "hidden" (informational).

    Examples
    --------
    Two hidden units and a published global suppressed count that pins both:

    >>> t = PublishedTables(k=5, own_subjects=True, global_suppressed=2, units=(
    ...     {"unit": "a", "released": 9, "suppressed": "<k"},
    ...     {"unit": "b", "released": 7, "suppressed": "<k"}))
    >>> assert_no_recoverable_hole(t)
    Traceback (most recent call last):
    ...
    AssertionError: 2 of 2 hidden figures can be narrowed from the published tables: ...
    """

    units: tuple[Mapping[str, Any], ...]
    k: int
    global_suppressed: int | str | None = None
    own_subjects: bool = False
    pooled_records: int = 0
    pooled_synthetic_max: int = 0
    record_bound: int | None = None
    groups_by_majority_unit: bool = False
    total_records: int | None = None
    released_records: int | None = None
    hidden_labels: tuple[str, ...] = field(default=("<k", "withheld"))

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise InputError(f"k must be an integer >= 2, got {self.k!r}")
        object.__setattr__(self, "units", tuple(self.units))


def assert_no_recoverable_hole(tables: PublishedTables | Release | str | os.PathLike[str]) -> None:
    """No ``<k`` figure is determined or narrowed by the published ones.

    Every hidden cell is bounded with linear programs over all published figures
    together (:func:`geokanon.verify.hidden_ranges`): a ``<k`` cell must still
    admit every value 1..k-1 (in integers too); a ``withheld`` one is a secondary
    suppression and owes nothing of its own.

    Parameters
    ----------
    tables
        A :class:`PublishedTables`, or a :class:`Release` / directory (its
        :meth:`Release.tables` are used).

    Raises
    ------
    AssertionError
        Naming each recoverable cell (unit id and figure) and the range it is
        narrowed to, or saying the published figures contradict each other.

    Examples
    --------
    >>> t = PublishedTables(k=5, own_subjects=True, units=(
    ...     {"unit": "a", "released": 9, "suppressed": "<k"},
    ...     {"unit": "b", "released": 7, "suppressed": 0}))
    >>> assert_no_recoverable_hole(t)
    """
    __tracebackhide__ = True
    from geokanon.verify import hidden_ranges

    if not isinstance(tables, PublishedTables):
        tables = load_release(tables).tables()
    try:
        ranges = hidden_ranges(
            [dict(u) for u in tables.units],
            k=tables.k,
            global_suppressed=tables.global_suppressed,
            own_subjects=tables.own_subjects,
            pooled_records=tables.pooled_records,
            pooled_synthetic_max=tables.pooled_synthetic_max,
            record_bound=tables.record_bound,
            groups_by_majority_unit=tables.groups_by_majority_unit,
            total_records=tables.total_records,
            released_records=tables.released_records,
            exact=False,
        )
    except ValueError as exc:
        raise AssertionError(f"the published figures contradict each other: {exc}") from None
    problems = [p for h in ranges if (p := h.problem(tables.k)) is not None]
    if problems:
        raise AssertionError(
            f"{len(problems):,} of {len(ranges):,} hidden figures can be narrowed from the "
            "published tables: " + _more(problems, len(problems))
        )


# --------------------------------------------------------------------------------------
# The whole verifier
# --------------------------------------------------------------------------------------


def assert_release_verifies(
    release_dir: str | os.PathLike[str] | Release,
    source: PointTable | str | os.PathLike[str] | None = None,
    *,
    checks: Sequence[str] | None = None,
) -> None:
    """Every check of ``geokanon verify`` passes on the release and its source.

    Parameters
    ----------
    release_dir
        The release directory (with ``release/`` and ``audit/``), or a :class:`Release`.
    source
        The source file (or :class:`~geokanon.io.read.PointTable`) the release was
        built from; ``None`` checks against the audit alone (weaker: ``no_leak``
        cannot look for source values).
    checks
        Only these checks (default: all of :data:`geokanon.verify.CHECKS`).

    Raises
    ------
    AssertionError
        Listing every failed check with the verifier's detail line.

    Examples
    --------
    >>> assert_release_verifies("out/dwellings", "dwellings.csv")  # doctest: +SKIP
    """
    __tracebackhide__ = True
    from geokanon.verify import verify_release

    root = release_dir.root if isinstance(release_dir, Release) else release_dir
    report = verify_release(root, source=source, checks=checks)
    if not report.passed:
        failed = [c for c in report.checks if not c.passed]
        raise AssertionError(
            f"release does not verify: {len(failed)} of {len(report.checks)} checks fail: "
            + "; ".join(f"{c.name}: {c.detail}" for c in failed)
        )

"""Independent verification of a written release.

:func:`verify_release` re-reads a release directory (``DIR/release`` and
``DIR/audit``, see ``docs/release-format.md``) and, optionally, the source, and
runs every check by name. It imports no algorithm module: sizes, distinct
subjects, distances, shares and totals are recomputed here from the files, so
a bug in grouping or disposal cannot hide itself.

The rules, exactly as implemented
---------------------------------
``k_subjects``
    Every group in ``groups.parquet`` and every class in ``classes.parquet``
    (and every group or class id an audit row or a published record names)
    holds >= k distinct subjects among the real records of the audit.
    Synthetic records never count. Subjects are taken from the source when it
    is given (so a wrong subject code in the audit cannot inflate a group),
    else from the audit's ``subject`` column. Source ids are compared normalised
    (:func:`subject_id_text`: NFKC, case folded, stripped), by the verifier's own
    copy of the rule: five spellings of one id are one subject, never five.
``extent``
    Every member of every group lies within ``min(r_max_m, radius_m) +
    tolerance_m`` of the published representative, distances
    ``sqrt(dx*dx + dy*dy)`` in float64 on the working coordinates (``x_m``,
    ``y_m``), the representative transformed from the output CRS into the
    working CRS with pyproj when they differ. When an unmasked source in the
    working CRS is given, the members' source coordinates are measured too (a
    lon/lat source file: its own coordinates, carried into the working CRS).
    A published ``radius_m`` above ``r_max_m`` fails. The limit holds on the
    ground too: for a named working CRS (UTM for lon/lat input, or the input's
    projected CRS), a pair within the limit on the map is measured again on the
    CRS's ellipsoid (geodesic, pyproj ``Geod.inv``, from the members' lon/lat,
    the source's own for a lon/lat source file, to the published
    representative), unless its planar distance is at most the limit times a
    lower bound of the CRS's scale factor over the pairs' box, which the check
    finds itself (see ``_Ground``); an unnamed metric CRS is planar only.
``tau`` / ``unit_cap``
    Suppressed subjects are distinct subjects with at least one suppressed
    record (within the unit, for ``unit_cap``; a subject counts in every unit
    it has records in). Shares are compared as exact fractions against the
    shortest decimal that round-trips the published float (``0.01`` is
    exactly 1/100), so there is no rounding at all.
``holes``
    Every number of every release file is turned into one linear system: the
    ``units.csv`` rows, and the figures :func:`geokanon.published.collect` reads
    by the release format's declared schema from the manifest (counts, the
    passes by their ``scope``, rounded counts as intervals, the mask's record
    count, ...), the group and class tables, ``records.parquet``'s rows, and the
    notes' and report's tables and cards; any other number in the notes and the
    report must be a value the system holds, and a number in a field or column
    the format does not declare fails. Every hidden cell (``<k``, ``withheld``)
    is bounded with :func:`scipy.optimize.linprog` (min and max). See
    :func:`hidden_ranges` for the variables and identities.
    A ``<k`` cell (a sensitive figure: one resting on 1..k-1 subjects) fails
    when its feasible range does not contain both 1 and k-1 (so with k = 2 a
    ``<k`` cell always fails: it reveals exactly 1), and when some value
    1..k-1 has no integer solution (:func:`scipy.optimize.milp`: aggregate
    programs, then one per value left, at most :data:`INTEGER_CHECK_MAX`; the
    detail line says when values were left to the LP range). A ``withheld``
    figure is a complementary (secondary) suppression: it owes nothing of its
    own, however narrow its range. Mutually inconsistent published figures
    fail too. An attacker who can place groups inside units from their
    geometry is not modelled (per-unit group shifts are free, summing to 0).
``no_leak``
    Every file in ``release/`` is scanned (text files as text and, for CSV, as
    a table too; Parquet column by column, plus its key-value metadata):

    * source coordinate pairs: two consecutive numbers in text, or two numeric
      columns of one table row (WKB geometry decoded; id and count columns
      left out), equal as float64 to a source ``(x, y)`` pair in the output
      CRS with >= 4 significant digits between them. Source pairs are the
      file's own values (``source`` or ``source_file`` a path), else the
      table's or the audit's coordinates when no CRS change happened, else the
      audit's coordinates carried to the output CRS, matched within a relative
      1e-9 (transform round-off);
    * single source coordinates: a number equal to a *non-integral* source
      coordinate with >= 4 significant digits, in free text or in any column
      but the published ``x``/``y`` (CSV text is judged column by column); and
      any other non-structural numeric column in which at least half of >= k
      distinct values (>= 4 significant digits) are source coordinates;
    * subject ids (only when the source file is given and has a subject
      column): a text token or a string cell equal to a raw id of >= 4
      characters, or a column named like the subject column;
    * raw timestamps: a date-time in text or a string cell (ISO 8601 or
      ``YYYY/MM/DD hh:mm[:ss]``) equal, as wall-clock or UTC, to a source
      time; a timestamp column value or a number equal to a source time in
      epoch seconds (>= 4 significant digits); a column named like the time
      column;
    * the mask's secret key (``audit/mask_key``; fails when a mask was applied
      and the audit holds no key): its bytes as text, hex, base64 or decimal,
      and the same of the SipHash key derived from it and of that key's two
      64-bit words (also as values of a 64-bit integer column), in free text,
      in any text cell or column name, and in the bytes of any other file;
    * source row numbers: a column named ``source_row``, ``row``, ``row_id``,
      ``row_number``, ``rownum``, ``record_id``, ``point_id``, ``fid``,
      ``index``, ``level_0`` or ``__index_level_0__``, a column named like a
      source column that is an id (unique per record, and named like an id or
      a run of consecutive integers), or a stored pandas index that is not a
      range.

    "Significant digits" are the digits of a number's text with leading and
    trailing zeros and the decimal point removed (``149700`` has 4,
    ``2000.0`` has 1).
``representation``
    No published representative equals (exactly, or within ``tolerance_m``
    when that is > 0) a member's coordinate: the audit's working
    coordinates, the source's coordinates when the source is given, compared
    in the output CRS (members transformed forward with pyproj when the CRSs
    differ). A representative that is the exact mean of its members'
    working coordinates (a group with no synthetic records) fails too: k-1
    known members would then give away the k-th.
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
    distinct subjects.
``fixed_point``
    ``passes`` is a non-empty list of at most :data:`~geokanon.policy.MAX_PASSES`
    entries, the last with ``changed == 0``, equal to the audit's passes when
    the audit has them. Re-classifying at the published positions is implied
    by ``k_subjects``: every group-level record shares its position (and, with
    times, its published time bin: ``k_subjects`` counts every group x time bin
    class) with >= k-1 other subjects, so its isolation ratio is 0, in space
    alone or in space and time together.
``report_safety``
    In ``RELEASE_NOTES.md`` (markdown tables) and ``report.html`` (HTML tables:
    the first all-``<th>`` row, else the first row, is the header), every cell in
    a column whose header mentions "suppress" or "generalise"/"generalize" must
    not be an integer 1..k-1 (it must read ``<k``); nor may a phrase such as
    "suppressed: 3" or "3 records were suppressed" carry such a figure.
    ``units.csv``'s ``suppressed`` and ``generalised_up`` must not be integers
    1..k-1, a ``source_total`` must read ``<k`` for a unit of 1..k-1 subjects
    (and only then), and the manifest's ``counts.suppressed`` and ``suppressed_share``
    must be ``"<k"`` (or ``"withheld"``) when 1..k-1 subjects were suppressed;
    no pass's ``labels.suppress`` in the manifest may be an integer 1..k-1.
``manifest``
    Every file under ``release/`` except ``manifest.json`` is listed in
    ``files`` with its sha256, no listed file is missing, and the manifest's
    ``input_sha256`` matches the source when the source is given.

``deterministic``
    Needs a second build, so the release writer runs it (the core again on the
    input's rows in a seeded random order) and it is reported here as not
    checked (:attr:`VerificationReport.skipped`). The two runs' per-group and
    per-class outcomes (representatives, class levels and units) must be equal,
    and their per-record decisions equal up to exchanging records identical in
    every column (:func:`geokanon.io.read.identical_rows`): for every class of
    identical records, the multiset of (label, final label, disposal, group id,
    class id) is the same in both runs (:func:`decisions_agree`). The release
    files are written from published values only, so they are then
    byte-identical.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import html.parser
import io
import json
import math
import os
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.errors import InputError
from geokanon.io.read import CSV_SUFFIXES, PointTable, read_source_frame, sha256_file
from geokanon.policy import MAX_PASSES
from geokanon.published import Figure, Published

__all__ = [
    "CHECKS",
    "NOT_CHECKED_HERE",
    "CheckResult",
    "HiddenRange",
    "VerificationReport",
    "decisions_agree",
    "format_report",
    "hidden_ranges",
    "holes_system",
    "verify_release",
]

#: The checks :func:`verify_release` runs, in report order.
CHECKS: tuple[str, ...] = (
    "k_subjects",
    "extent",
    "tau",
    "unit_cap",
    "holes",
    "no_leak",
    "representation",
    "counts",
    "fixed_point",
    "report_safety",
    "manifest",
)

#: Checks that need more than the written release (the release writer runs them).
NOT_CHECKED_HERE: tuple[str, ...] = ("deterministic",)


def decisions_agree(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    perm: Any,
    classes: Any,
) -> bool:
    """The ``deterministic`` rule for the per-record decisions of two runs.

    Parameters
    ----------
    first, second
        Per-record decision arrays by name (e.g. ``disposal``, ``group_id``); the
        same names in both. ``second`` is from a run on the first run's input with
        its rows reordered: its record ``i`` is the first run's record ``perm[i]``.
    perm
        The reordering, a permutation of ``0..n-1``.
    classes
        Per record of the first run's input, a class id shared exactly by the
        records identical in every column (:func:`geokanon.io.read.identical_rows`).

    Returns
    -------
    bool
        Whether every record's decisions agree, up to exchanging records of one
        class: for every class, the multiset of decision tuples is the same in
        both runs. A record unlike any other must keep exactly its decisions.

    Examples
    --------
    >>> import numpy as np
    >>> perm = np.array([1, 0, 2])  # the second run saw rows 1, 0, 2
    >>> same = np.array([0, 0, 2])  # rows 0 and 1 are identical in every column
    >>> decisions_agree({"g": np.array([4, 5, 6])}, {"g": np.array([4, 5, 6])}, perm, same)
    True
    >>> decisions_agree({"g": np.array([4, 5, 6])}, {"g": np.array([4, 6, 5])}, perm, same)
    False
    """
    cls = np.asarray(classes)
    p = np.asarray(perm)
    n = cls.size
    if set(first) != set(second) or p.shape != (n,):
        return False
    if not np.array_equal(np.sort(p), np.arange(n)):
        return False
    names = sorted(first)
    a = [np.asarray(first[name]) for name in names]
    b = [np.asarray(second[name]) for name in names]
    if any(v.shape != (n,) for v in (*a, *b)):
        return False
    cls_b = cls[p]
    # Both runs' records sorted by (class, decisions): equal sequences exactly when every
    # class holds the same multiset of decisions in both.
    order_a = np.lexsort((*a[::-1], cls))
    order_b = np.lexsort((*b[::-1], cls_b))
    return bool(
        np.array_equal(cls[order_a], cls_b[order_b])
        and all(np.array_equal(u[order_a], v[order_b]) for u, v in zip(a, b, strict=True))
    )


LESS_THAN_K = "<k"
WITHHELD = "withheld"
_DISPOSALS = ("grouped", "merged", "generalised", "suppressed")
_ROW_NAMES = frozenset(
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
_STRUCTURAL = frozenset(
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
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w]|\.\d)")
_DATETIME = re.compile(
    r"\d{4}[-/]\d{2}[-/]\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
#: Published time bins (``2008-10-23T02:00Z/PT3600S``): epoch-aligned bin starts are
#: boundaries, not raw times, and are removed before timestamps are searched.
_TIME_BIN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z/PT\d+S")
_TOKEN_SPLIT = re.compile(r"[\s,;|<>\"'=(){}\[\]]+")
_SUPPRESSED_PHRASES = (
    re.compile(r"suppress\w*[^|\n\d<]{0,20}?:\s*(\d[\d,]*)(?![\d.%])", re.IGNORECASE),
    re.compile(
        r"(?<![\d.,])(\d[\d,]*)\s+(?:records?|subjects?|people|persons?|points?|patients?)\s+"
        r"(?:were\s+|was\s+|are\s+|is\s+)?suppress",
        re.IGNORECASE,
    ),
)
_EPS = 1e-6
#: Integer programs :func:`hidden_ranges` solves at most to show that every value
#: 1..k-1 of every ``<k`` cell has an integer solution (beyond, the LP range only).
INTEGER_CHECK_MAX = 256
#: Seconds :func:`hidden_ranges` spends at most on integer programs (then as above).
INTEGER_CHECK_S = 120.0
#: Table columns whose cells are per-unit hidden figures (must read "<k" below k).
_HIDDEN_HEADER = re.compile(r"suppress|generali[sz]", re.IGNORECASE)


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one named check.

    Attributes
    ----------
    name
        Check name (one of :data:`CHECKS`).
    passed
        Whether the check holds.
    detail
        Figures only (counts, shares, distances, file and unit names); never a
        coordinate, a subject id or a timestamp.
    """

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class VerificationReport:
    """All check results of one release.

    Attributes
    ----------
    checks
        One result per check that was run, in :data:`CHECKS` order.
    skipped
        Checks not run here (``deterministic`` needs a second build).
    digests
        Release file -> sha256 as the ``manifest`` check read it from disk (empty
        when it did not run); a later run can pass them as ``unchanged``.
    """

    checks: tuple[CheckResult, ...]
    skipped: tuple[str, ...] = NOT_CHECKED_HERE
    digests: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        """Whether every check that was run passed."""
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the failed checks."""
        return tuple(c.name for c in self.checks if not c.passed)

    def as_dict(self) -> dict[str, bool]:
        """Check name -> passed, for the manifest's ``verification`` (skipped checks absent)."""
        return {c.name: c.passed for c in self.checks}

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)


def format_report(report: VerificationReport) -> str:
    """One line per check: ``PASS name  detail``, ``FAIL ...``, ``SKIP ...``.

    Parameters
    ----------
    report
        The result of :func:`verify_release`.

    Returns
    -------
    str
        The lines joined with newlines (no trailing newline).

    Examples
    --------
    >>> r = VerificationReport((CheckResult("extent", False, "1 member beyond r_max"),))
    >>> print(format_report(r))
    FAIL extent         1 member beyond r_max
    SKIP deterministic  not checked here (needs a second build; the release writer runs it)
    """
    width = max([len(c.name) for c in report.checks] + [len(s) for s in report.skipped] + [13])
    lines = [
        f"{'PASS' if c.passed else 'FAIL'} {c.name:<{width}}  {c.detail}".rstrip()
        for c in report.checks
    ]
    lines += [
        f"SKIP {name:<{width}}  not checked here (needs a second build; the release writer runs it)"
        for name in report.skipped
    ]
    return "\n".join(lines)


class _Unreadable(Exception):
    """A release file is missing or malformed; the message is safe to show."""


# --------------------------------------------------------------------------------------
# Holes: the linear system of published figures
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HiddenRange:
    """Feasible range of one hidden published figure.

    Attributes
    ----------
    cell
        Which figure (``"unit U suppressed"``, ``"unit U source_total"``,
        ``"global suppressed"``).
    kind
        ``"<k"`` or ``"withheld"``.
    low, high
        Bounds of the LP relaxation (``high`` may be ``inf``).
    """

    cell: str
    kind: str
    low: float
    high: float
    #: values in 1..k-1 inside ``[low, high]`` that no integer solution reaches
    gaps: tuple[int, ...] = ()
    #: values in 1..k-1 not solved for in integers (beyond :data:`INTEGER_CHECK_MAX`
    #: programs or :data:`INTEGER_CHECK_S` seconds): for them the LP range stands
    unsolved: int = 0

    def problem(self, k: int) -> str | None:
        """Why this range discloses too much, or ``None`` when it is safe.

        Only a ``<k`` cell owes anything: it must admit every value 1..k-1. A
        ``withheld`` figure protects others (a secondary suppression) and owes
        nothing of its own.
        """
        if self.kind != LESS_THAN_K:
            return None
        if k <= 2:
            return f"{self.cell}: with k=2 '<k' means exactly 1"
        if self.low > 1 + _EPS or self.high < k - 1 - _EPS:
            return f"{self.cell}: '<k' narrowed to [{_fmt(self.low)}, {_fmt(self.high)}]"
        if self.gaps:
            shown = ", ".join(map(str, self.gaps))
            return f"{self.cell}: '<k' cannot be {shown} in integers"
        return None


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4g}"


def _cell_value(raw: object) -> int | str | None:
    """Parse a published figure: an int, ``"<k"``, ``"withheld"``, or None (absent)."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise _Unreadable("a published count is a boolean")
    if isinstance(raw, int | np.integer):
        return int(raw)
    if isinstance(raw, float | np.floating):
        if math.isnan(raw):
            return None
        if float(raw).is_integer():
            return int(raw)
        raise _Unreadable("a published count is not an integer")
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
            raise _Unreadable(f"a published count reads {text[:12]!r}") from None
        if f.is_integer():
            return int(f)
        raise _Unreadable("a published count is not an integer") from None


def hidden_ranges(
    units: Sequence[Mapping[str, Any]],
    *,
    k: int,
    global_suppressed: int | str | None,
    own_subjects: bool,
    pooled_records: int = 0,
    pooled_synthetic_max: int = 0,
    synthetic_total: int | None = None,
    record_bound: int | None = None,
    groups_by_majority_unit: bool = False,
    total_records: int | None = None,
    released_records: int | None = None,
    exact: bool = True,
    figures: Sequence[Figure] = (),
    integer: bool = True,
    integer_seconds: float | None = INTEGER_CHECK_S,
) -> list[HiddenRange]:
    """Feasible ranges of every hidden figure, given all published figures together.

    Variables, per unit ``u``:

    * ``s_u`` suppressed subjects: fixed when published as an integer, ``[1, k-1]``
      for ``<k``, ``[0, inf)`` for ``withheld``;
    * ``r_u`` suppressed records: ``r_u = s_u`` when records are their own
      subjects, else ``s_u <= r_u <= N s_u``;
    * ``g_u`` subjects generalised beyond the unit (``generalised_up``, when
      published; bounds as for ``s_u``) and ``p_u`` their records (``p_u = g_u``,
      or ``g_u <= p_u <= N g_u``; free ``>= 0`` when ``generalised_up`` is not
      published);
    * ``T_u`` the source total (fixed, or ``[0, inf)`` when withheld; ``<k``: the
      unit rests on ``sigma_u`` in ``[1, k-1]`` subjects, ``s_u <= sigma_u``, and
      ``T_u`` are their records, as ``r_u`` are of ``s_u``);
    * ``d_u`` the unit's own group-level records minus the group records counted
      in it (0 when groups are counted by their members' units; free with
      ``d_u >= -(released_u - C_u)`` and ``sum_u d_u = 0`` when every group is
      counted whole in its majority unit).

    Identities:

    * ``T_u = released_u - synthetic_u + d_u + r_u + p_u`` for every unit with a
      ``source_total`` column, where a unit's ``synthetic_u`` published as ``<k`` is
      its suppressed subjects ``s_u`` (the manifest's placement rule: one synthetic
      record per suppressed subject of a unit that has a class of its own);
    * ``sum_u synthetic_u = synthetic_total`` when that total is published;
    * ``pooled_records - pooled_synthetic_max <= sum_u p_u <= pooled_records``;
    * ``sum_u r_u = R`` when the global suppressed record count ``R`` is a number,
      and ``sum_u r_u = N - released`` when the input's record count ``N`` and the
      real records published at group or class level are known;
    * ``sum_u T_u = N`` when ``N`` is known;
    * with a global ``<k``: the global suppressed subjects ``S`` lie in
      ``[1, k-1]``, with ``S = sum_u s_u`` when records are their own subjects,
      else ``max_u s_u <= S <= sum_u s_u``.

    Parameters
    ----------
    units
        One mapping per unit with ``unit`` (id), ``released`` (int),
        ``suppressed`` (int, ``"<k"`` or ``"withheld"``) and optional
        ``generalised_up`` (int or ``"<k"``), ``source_total`` (int, ``"<k"`` or
        ``"withheld"``), ``synthetic`` (int or ``"<k"``) and ``class_records`` (``C_u``, the
        records of the unit's own class included in ``released``).
    k
        The release's k.
    global_suppressed
        The manifest's ``counts.suppressed``: an int, ``"<k"`` or None (withheld).
    own_subjects
        True when there is no subject column (every record its own subject).
    pooled_records
        Records in classes above unit level (parent and area classes).
    pooled_synthetic_max
        Upper bound of synthetic records among those.
    synthetic_total
        The published number of synthetic records, when it is a number.
    record_bound
        An upper bound of records per unit (``N`` above); default: unbounded.
    groups_by_majority_unit
        ``released`` counts every group whole in one unit (``groups.parquet``
        ``unit``), so a unit's own group-level records are not published.
    total_records
        The input's record count ``N`` when it is published (the first pass's
        ``records`` in the manifest).
    released_records
        Real records published at group or class level (the manifest's grouped,
        merged and generalised counts).
    exact
        Bound every hidden cell with its own pair of programs. When False, two
        aggregate programs first find an interval inside every cell's range, and
        only cells that interval does not already clear are bounded exactly: the
        ranges of safe cells are then inner intervals, those of unsafe cells exact.
    figures
        Published figures over the release's aggregate quantities (see
        :mod:`geokanon.published`), each a constraint ``low <= sum(c q) <= high``;
        a ``hidden`` one is a sensitive figure of its own. Every quantity is a count
        (``>= 0``); ``suppressed_records`` is ``sum_u r_u`` and, when the units
        publish a ``source_total`` column, ``records`` is ``sum_u T_u``.
    integer
        Also solve, in integers, for every value 1..k-1 of every ``<k`` cell whose
        LP range holds them (aggregate integer programs first, then at most
        :data:`INTEGER_CHECK_MAX` programs for single values); the values with no
        integer solution are the range's ``gaps``, those not reached ``unsolved``.
    integer_seconds
        Wall-clock budget of the integer programs; None: none (the outcome then
        depends on the figures only, as the release writer needs for byte-identical
        releases).

    Returns
    -------
    list of HiddenRange
        One per hidden figure.

    Raises
    ------
    ValueError
        The published figures are mutually inconsistent (no solution).

    Examples
    --------
    Two hidden units whose sum is published as 2, with k = 5: both are pinned to 1.

    >>> rows = [{"unit": "a", "released": 9, "suppressed": "<k"},
    ...         {"unit": "b", "released": 7, "suppressed": "<k"}]
    >>> [(h.low, h.high) for h in hidden_ranges(rows, k=5, global_suppressed=2,
    ...                                         own_subjects=True)]
    [(1.0, 1.0), (1.0, 1.0)]
    """
    names: list[str] = []
    lo: list[float] = []
    hi: list[float] = []

    def var(name: str, low: float, high: float) -> int:
        names.append(name)
        lo.append(low)
        hi.append(high)
        return len(names) - 1

    hidden: list[tuple[str, str, int]] = []
    eq_rows: list[dict[int, float]] = []
    eq_rhs: list[float] = []
    ub_rows: list[dict[int, float]] = []
    ub_rhs: list[float] = []
    big = float(record_bound) if record_bound is not None else None

    def subject_cell(label: str, value: object) -> int:
        if value == LESS_THAN_K:
            i = var(label, 1.0, float(k - 1))
            hidden.append((label, LESS_THAN_K, i))
        elif value == WITHHELD:
            i = var(label, 0.0, math.inf)
            hidden.append((label, WITHHELD, i))
        else:
            i = var(label, float(value), float(value))  # type: ignore[arg-type]
        return i

    def records_of(label: str, si: int) -> int:
        if own_subjects:
            return si
        ri = var(label, 0.0, math.inf)
        ub_rows.append({si: 1.0, ri: -1.0})  # subjects <= records
        ub_rhs.append(0.0)
        if big is not None:
            ub_rows.append({ri: 1.0, si: -big})  # records <= N subjects
            ub_rhs.append(0.0)
        return ri

    has_totals = any(u.get("source_total") is not None for u in units)
    has_up = any(u.get("generalised_up") is not None for u in units)
    s_idx: list[int] = []
    r_idx: list[int] = []
    p_idx: list[int] = []
    d_idx: list[int] = []
    t_idx: list[int] = []
    syn_row: dict[int, float] = {}
    syn_const = 0
    for u in units:
        uid = str(u["unit"])
        si = subject_cell(f"unit {uid} suppressed", u["suppressed"])
        s_idx.append(si)
        ri = records_of(f"unit {uid} suppressed records", si)
        r_idx.append(ri)
        syn_v = u.get("synthetic", 0)
        syn_hidden = syn_v == LESS_THAN_K
        if syn_hidden:
            _add(syn_row, si, 1.0)  # a hidden synthetic count is the unit's s_u
        else:
            syn_const += int(syn_v or 0)
        pi: int | None = None
        g = u.get("generalised_up")
        if g is not None:
            gi = subject_cell(f"unit {uid} generalised_up", g)
            pi = records_of(f"unit {uid} generalised_up records", gi)
        elif has_totals and (pooled_records > 0 or has_up):
            pi = var(f"unit {uid} pooled", 0.0, math.inf)
        if pi is not None:
            p_idx.append(pi)
        if not has_totals:
            continue
        t = u.get("source_total")
        if t == WITHHELD:
            ti = var(f"unit {uid} source_total", 0.0, math.inf)
            hidden.append((f"unit {uid} source_total", WITHHELD, ti))
        elif t == LESS_THAN_K:
            # the unit rests on 1..k-1 subjects: its subjects are the sensitive figure
            ui = subject_cell(f"unit {uid} source_total", LESS_THAN_K)
            ti = records_of(f"unit {uid} source_total records", ui)
            ub_rows.append({si: 1.0, ui: -1.0})  # suppressed subjects <= the unit's
            ub_rhs.append(0.0)
        elif t is None:
            ti = var(f"unit {uid} source_total", 0.0, math.inf)
        else:
            ti = var(f"unit {uid} source_total", float(t), float(t))
        t_idx.append(ti)
        row: dict[int, float] = {ti: 1.0}
        _add(row, ri, -1.0)
        if pi is not None:
            _add(row, pi, -1.0)
        released = int(u["released"])
        if groups_by_majority_unit:
            group_part = released - int(u.get("class_records", 0) or 0)
            di = var(f"unit {uid} group shift", -float(max(group_part, 0)), math.inf)
            d_idx.append(di)
            _add(row, di, -1.0)
        if syn_hidden:
            _add(row, si, 1.0)  # T_u - ... + s_u = released_u
            eq_rhs.append(float(released))
        else:
            eq_rhs.append(float(released - int(syn_v or 0)))
        eq_rows.append(row)
    if d_idx:
        eq_rows.append(dict.fromkeys(d_idx, 1.0))
        eq_rhs.append(0.0)
    if synthetic_total is not None and syn_row:
        eq_rows.append(syn_row)
        eq_rhs.append(float(synthetic_total - syn_const))
    if p_idx:
        ub_rows.append(dict.fromkeys(p_idx, 1.0))
        ub_rhs.append(float(pooled_records))
        ub_rows.append(dict.fromkeys(p_idx, -1.0))
        ub_rhs.append(-float(pooled_records - pooled_synthetic_max))
    if total_records is not None and t_idx:
        eq_rows.append(dict.fromkeys(t_idx, 1.0))  # the unit totals add up to the input
        eq_rhs.append(float(total_records))
    if total_records is not None and released_records is not None:
        row = {}
        for ri in r_idx:
            _add(row, ri, 1.0)
        eq_rows.append(row)  # input - released = suppressed records
        eq_rhs.append(float(total_records - released_records))
    if isinstance(global_suppressed, int):
        row = {}
        for ri in r_idx:
            _add(row, ri, 1.0)
        eq_rows.append(row)
        eq_rhs.append(float(global_suppressed))
    elif global_suppressed == LESS_THAN_K:
        gi = var("global suppressed", 1.0, float(k - 1))
        hidden.append(("global suppressed", LESS_THAN_K, gi))
        row = {gi: 1.0}
        for si in s_idx:
            _add(row, si, -1.0)
        if own_subjects:
            eq_rows.append(row)
            eq_rhs.append(0.0)
        else:
            ub_rows.append(row)  # S <= sum s_u
            ub_rhs.append(0.0)
            for si in s_idx:
                ub_rows.append({si: 1.0, gi: -1.0})  # s_u <= S
                ub_rhs.append(0.0)
    qvar: dict[str, int] = {}

    def quantity(name: str) -> int:
        if name not in qvar:
            qvar[name] = var(name, 0.0, math.inf)
        return qvar[name]

    hidden_q: set[int] = set()
    for f in figures:
        row = {}
        for q, coef in f.terms:
            _add(row, quantity(q), coef)
        if f.hidden and len(f.terms) == 1 and qvar[f.terms[0][0]] not in hidden_q:
            hidden_q.add(qvar[f.terms[0][0]])
            hidden.append((f.where, LESS_THAN_K, qvar[f.terms[0][0]]))
        if f.low == f.high:
            eq_rows.append(row)
            eq_rhs.append(float(f.low))
            continue
        if math.isfinite(f.high):
            ub_rows.append(row)
            ub_rhs.append(float(f.high))
        if math.isfinite(f.low):
            ub_rows.append({j: -v for j, v in row.items()})
            ub_rhs.append(-float(f.low))
    if "suppressed_records" in qvar and r_idx:
        row = {qvar["suppressed_records"]: 1.0}
        for ri in r_idx:
            _add(row, ri, -1.0)
        eq_rows.append(row)  # the units' suppressed records add up to the suppressed total
        eq_rhs.append(0.0)
    if "records" in qvar and t_idx:
        row = {qvar["records"]: 1.0}
        for ti in t_idx:
            _add(row, ti, -1.0)
        eq_rows.append(row)  # the unit totals add up to the input
        eq_rhs.append(0.0)
    if not hidden:
        return []
    n = len(names)
    from scipy.optimize import linprog  # imported only when there is something to bound
    from scipy.sparse import csr_matrix

    def matrix(rows: list[dict[int, float]]) -> csr_matrix | None:
        if not rows:
            return None
        ri = [i for i, r in enumerate(rows) for _ in r]
        ci = [j for r in rows for j in r]
        vals = [v for r in rows for v in r.values()]
        return csr_matrix((vals, (ri, ci)), shape=(len(rows), n))

    a_eq, a_ub = matrix(eq_rows), matrix(ub_rows)
    b_eq = np.asarray(eq_rhs) if eq_rows else None
    b_ub = np.asarray(ub_rhs) if ub_rows else None
    bounds = [(lo[i], None if math.isinf(hi[i]) else hi[i]) for i in range(n)]

    def solve(c: NDArray[np.float64], bnds: Sequence[tuple[float, float | None]]) -> Any:
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bnds)
        if res.status == 2:
            raise ValueError("the published figures are mutually inconsistent")
        if res.status not in (0, 3):
            raise ValueError(f"the linear program failed ({res.message})")
        return res

    # Two aggregate programs give, by convexity, an interval inside every cell's range
    # (its values at a lowest and at a highest feasible point); only cells whose witness
    # interval is not already wide enough are bounded one by one.
    witness: dict[int, tuple[float, float]] = {}
    if not exact:
        idx_all = [i for _, _, i in hidden]
        capped = [(b[0], b[1] if b[1] is not None else b[0] + 1e9) for b in bounds]
        c = np.zeros(n)
        c[idx_all] = 1.0
        low = solve(c, bounds)
        high = solve(-c, capped)
        if low.status == 0 and high.status == 0:
            for i in idx_all:
                witness[i] = (float(low.x[i]), float(high.x[i]))
            lt_cells = [i for _, kd, i in hidden if kd == LESS_THAN_K]
            _more_witnesses(witness, lt_cells, k, lambda c: solve(c, bounds), n)
    out: list[HiddenRange] = []
    for label, kind, idx in hidden:
        if idx in witness:
            inner = HiddenRange(label, kind, *witness[idx])
            if inner.problem(k) is None:
                out.append(inner)
                continue
        ends: list[float] = []
        for sign in (1.0, -1.0):
            c = np.zeros(n)
            c[idx] = sign
            res = solve(c, bounds)
            if res.status == 3:
                ends.append(math.inf if sign < 0 else -math.inf)
            else:
                ends.append(float(res.x[idx]))
        out.append(HiddenRange(label, kind, ends[0], ends[1]))
    if not integer or k <= 2:
        return out
    # The LP relaxation's range of a cell is an interval (the projection of a convex
    # set), but an integer value inside it may have no integer solution: each value
    # 1..k-1 of each '<k' cell is solved for in integers. Every solution found crosses
    # off the values it gives all cells; first the cells' sums are minimised and
    # maximised in integers (round after round over the cells still short, as for the
    # LP), then each value left is solved for alone, up to INTEGER_CHECK_MAX programs.
    todo = {
        idx: set(range(1, k))
        for (_, kind, idx), h in zip(hidden, out, strict=True)
        if kind == LESS_THAN_K and h.problem(k) is None
    }
    if not todo:
        return out
    from scipy.optimize import Bounds, LinearConstraint, milp

    constraints = []
    if a_eq is not None:
        constraints.append(LinearConstraint(a_eq, b_eq, b_eq))
    if a_ub is not None:
        constraints.append(LinearConstraint(a_ub, -np.inf, b_ub))
    low_b, high_b = np.asarray(lo), np.asarray(hi)
    every = np.ones(n)

    deadline = math.inf if integer_seconds is None else time.monotonic() + integer_seconds
    infeasible = False  # of the last program

    def limit() -> dict[str, float]:
        return {} if math.isinf(deadline) else {"time_limit": max(deadline - time.monotonic(), 0.1)}

    def integer_point(
        c: NDArray[np.float64], lb: NDArray[np.float64], ub: NDArray[np.float64]
    ) -> NDArray[np.float64] | None:
        nonlocal infeasible
        res = milp(
            c, integrality=every, bounds=Bounds(lb, ub), constraints=constraints,
            options=limit(),
        )  # fmt: skip
        infeasible = res.status == 2
        return res.x if res.status == 0 and res.x is not None else None

    def cross_off(x: NDArray[np.float64]) -> None:
        for other, rest in todo.items():
            rest.discard(round(float(x[other])))

    def nearest_point(short: list[int], value: int) -> NDArray[np.float64] | None:
        """An integer point with the cells ``short`` as near ``value`` as they can be
        together: minimise the sum of extra variables ``e_j >= |x_j - value|``."""
        from scipy.sparse import csr_matrix, hstack

        m = len(short)
        j = np.arange(m)
        both = np.r_[j, j + m]
        cells = csr_matrix(
            (np.r_[np.ones(m), -np.ones(m)], (both, np.r_[short, short])), (2 * m, n)
        )
        extra = csr_matrix((-np.ones(2 * m), (both, np.r_[j, j])), (2 * m, m))
        cons = [
            LinearConstraint(
                hstack([cells, extra]), -np.inf, np.r_[np.full(m, value), np.full(m, -value)]
            )
        ]
        for con in constraints:
            pad = csr_matrix((con.A.shape[0], m))
            cons.append(LinearConstraint(hstack([con.A, pad]), con.lb, con.ub))
        res = milp(
            np.r_[np.zeros(n), np.ones(m)], integrality=np.r_[every, np.zeros(m)],
            bounds=Bounds(np.r_[low_b, np.zeros(m)], np.r_[high_b, np.full(m, np.inf)]),
            constraints=cons, options=limit(),
        )  # fmt: skip
        return res.x[:n] if res.status == 0 and res.x is not None else None

    for value in range(1, k):
        short = [i for i, rest in todo.items() if value in rest]
        while len(short) > 1 and time.monotonic() < deadline:
            if value in (1, k - 1):  # the cells' bounds: their sum is enough
                c = np.zeros(n)
                c[short] = 1.0 if value == 1 else -1.0
                x = integer_point(c, low_b, high_b)
            else:
                x = nearest_point(short, value)
            if x is None:
                break
            cross_off(x)
            still = [i for i in short if value in todo[i]]
            if len(still) == len(short):
                break
            short = still
    gaps: dict[int, list[int]] = {idx: [] for idx in todo}
    unsolved: dict[int, int] = dict.fromkeys(todo, 0)
    solves = 0
    for idx, values in todo.items():
        while values:
            v = min(values)
            values.discard(v)
            if solves >= INTEGER_CHECK_MAX or time.monotonic() >= deadline:
                unsolved[idx] += 1
                continue
            solves += 1
            lb, ub = low_b.copy(), high_b.copy()
            lb[idx] = ub[idx] = v
            x = integer_point(np.zeros(n), lb, ub)
            if x is not None:
                cross_off(x)
            elif infeasible:
                gaps[idx].append(v)
            else:  # not decided in time: the LP range stands
                unsolved[idx] += 1
    return [
        dataclasses.replace(h, gaps=tuple(gaps[i]), unsolved=unsolved[i]) if i in todo else h
        for (_, _, i), h in zip(hidden, out, strict=True)
    ]


def _more_witnesses(
    witness: dict[int, tuple[float, float]],
    cells: Sequence[int],
    k: int,
    solve: Callable[[NDArray[np.float64]], Any],
    n: int,
) -> None:
    """Widen the witness intervals of ``<k`` cells the two aggregate points left short.

    The ``<k`` cells not yet seen at 1 are minimised together (their sum), then those
    not yet seen at k-1 maximised together, round after round over the cells still
    short, while a round reaches a new one: every optimum is a feasible point, so a
    cell it puts at 1 (or k-1) can take that value. The cells left short are bounded
    one by one afterwards, as before. One program per round instead of two per cell.
    """
    for sign, reached in ((1.0, lambda v: v <= 1 + _EPS), (-1.0, lambda v: v >= k - 1 - _EPS)):
        side = 0 if sign > 0 else 1
        todo = [i for i in cells if not reached(witness[i][side])]
        while len(todo) > 1:
            c = np.zeros(n)
            c[todo] = sign
            res = solve(c)
            if res.status != 0:
                return
            done = [i for i in todo if reached(float(res.x[i]))]
            if not done:
                break
            for i in done:
                lo_w, hi_w = witness[i]
                v = float(res.x[i])
                witness[i] = (min(lo_w, v), hi_w) if side == 0 else (lo_w, max(hi_w, v))
            todo = [i for i in todo if not reached(float(res.x[i]))]


def _add(row: dict[int, float], j: int, v: float) -> None:
    row[j] = row.get(j, 0.0) + v


# --------------------------------------------------------------------------------------
# Reading the release
# --------------------------------------------------------------------------------------


def _decimal_fraction(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unreadable(f"manifest {name} is not a number")
    return Fraction(repr(float(value))) if isinstance(value, float) else Fraction(value)


def _sig_digits(text: str) -> int:
    t = text.strip().lstrip("+-")
    mant = re.split(r"[eE]", t, maxsplit=1)[0]
    return len(mant.replace(".", "").strip("0"))


@dataclass
class _Source:
    """What the verifier knows about the source, all aligned with the input rows."""

    x: NDArray[np.float64] | None = None  # in the output CRS (raw file) when known
    y: NDArray[np.float64] | None = None
    x_work: NDArray[np.float64] | None = None  # in the working CRS (PointTable)
    y_work: NDArray[np.float64] | None = None
    subjects: NDArray[np.int64] | None = None
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
    # the attribute columns, aligned with the rows (kept columns are compared with them);
    # ``attributes_text``: a CSV file's cells as text, not yet parsed
    attributes: pd.DataFrame | None = None
    attributes_text: bool = False


def _wallclock_seconds(texts: Iterable[str]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(wall-clock seconds ignoring any offset, UTC seconds where an offset is given)."""
    s = pd.Series(list(texts), dtype="string").str.strip().str.replace("/", "-", regex=False)
    tz = re.compile(r"(?:Z|[+-]\d{2}:?\d{2})$")
    naive = s.str.replace(tz.pattern, "", regex=True)
    wall = pd.to_datetime(naive, errors="coerce", format="ISO8601")
    wall_s = _ns_to_s(wall)
    has_tz = s.str.contains(tz.pattern, regex=True).fillna(False).to_numpy(dtype=bool)
    utc_s = np.full(len(s), np.nan)
    if has_tz.any():
        utc = pd.to_datetime(s[has_tz], errors="coerce", utc=True, format="ISO8601")
        utc_s[has_tz] = _ns_to_s(utc)
    return wall_s, utc_s


def _ns_to_s(stamps: pd.Series) -> NDArray[np.float64]:
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    ns = stamps.astype("datetime64[ns]").to_numpy()
    out = ns.astype("int64").astype(np.float64) / 1e9
    out[np.isnat(ns)] = np.nan
    return out


_T = TypeVar("_T")


def _read_ahead(items: Iterator[_T]) -> Generator[_T, None, None]:
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


class _Release:
    """Lazy, cached reader of one release directory."""

    def __init__(
        self,
        root: Path,
        source: PointTable | Path | None,
        tolerance_m: float,
        source_file: Path | None = None,
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
        #: the writer's first run, before ``report.html`` is written (it is not required)
        self.before_report = False

    # ---- raw files -------------------------------------------------------------------

    def _parquet(self, path: Path) -> pd.DataFrame:
        if not path.is_file():
            raise _Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            return pq.read_table(path).to_pandas()
        except (OSError, pa.ArrowException) as exc:
            raise _Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None

    def _json(self, path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise _Unreadable(f"{path.parent.name}/{path.name} is missing")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise _Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise _Unreadable(f"{path.name} is not a JSON object")
        return data

    @cached_property
    def manifest(self) -> dict[str, Any]:
        return self._json(self.rel / "manifest.json")

    @cached_property
    def audit(self) -> dict[str, Any]:
        return self._json(self.aud / "audit.json")

    @cached_property
    def k(self) -> int:
        k = self.manifest.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise _Unreadable("manifest k is not an integer >= 2")
        return k

    @cached_property
    def r_max_m(self) -> float:
        r = self.manifest.get("r_max_m")
        if isinstance(r, bool) or not isinstance(r, int | float) or not r > 0:
            raise _Unreadable("manifest r_max_m is not a positive number")
        return float(r)

    @cached_property
    def assignment(self) -> pd.DataFrame:
        """The whole audit as a pandas frame (for other readers; the checks do not use it)."""
        self._audit_arrays  # noqa: B018  (raises _Unreadable as the checks would)
        return self._parquet(self.aud / "assignment.parquet")

    @cached_property
    def _audit_arrays(self) -> dict[str, Any]:
        """The audit's columns the checks use, read once with pyarrow in batches of rows
        into what the checks use (numbers, codes), so no Arrow copy of the audit is held.

        A column that cannot be turned holds its exception, raised where it is used.
        """
        path = self.aud / "assignment.parquet"
        if not path.is_file():
            raise _Unreadable(f"{path.parent.name}/{path.name} is missing")
        need = ["source_row", "disposal", "group_id", "class_id", "unit", "subject", "x_m", "y_m"]
        try:
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            missing = [c for c in need if c not in names]
            if missing:
                raise _Unreadable(f"assignment.parquet lacks columns {missing}")
            cols = need + (["time_bin"] if "time_bin" in names else [])
            n = int(pf.metadata.num_rows)
            keep = {c: _AuditColumn(c, n) for c in cols}
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
            batches = pf.iter_batches(batch_size=_SCAN_ROWS, columns=cols, use_threads=True)
            with contextlib.closing(_read_ahead(batches)) as ahead:
                for batch in ahead:
                    for i, c in enumerate(cols):
                        keep[c].add(batch.column(i))
        except (OSError, pa.ArrowException) as exc:
            raise _Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
        out: dict[str, Any] = {"": n}
        out.update({c: keep[c].result() for c in cols})
        return out

    def _audit(self, name: str) -> Any:
        value = self._audit_arrays[name]
        if isinstance(value, _Failed):
            raise value.exc
        return value

    @cached_property
    def n_audit(self) -> int:
        return int(self._audit_arrays[""])

    @property
    def time_bins(self) -> pa.ChunkedArray | None:
        """The audit's ``time_bin`` column, when it has one."""
        return self._audit("time_bin") if "time_bin" in self._audit_arrays else None

    @cached_property
    def gid(self) -> NDArray[np.int64]:
        return self._audit("group_id")

    @cached_property
    def cid(self) -> NDArray[np.int64]:
        return self._audit("class_id")

    @cached_property
    def _disposal_codes(self) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
        return self._audit("disposal")

    @cached_property
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

    @cached_property
    def xy_m(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self._audit("x_m"), self._audit("y_m")

    @cached_property
    def source(self) -> _Source:
        out, work = self.output_crs, self.working_crs
        src = _load_source(self._source_arg, self.audit, out, work)
        if self._source_file is None:
            return src
        raw = _load_source(self._source_file, self.audit, out, work)
        if raw.n_rows != src.n_rows:
            raise _Unreadable("source_file and source hold different numbers of records")
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
        )

    @cached_property
    def subjects(self) -> NDArray[np.int64]:
        """Subject code per assignment row: the source's when it is given and aligned."""
        src = self.source
        rows = self.source_rows
        if src.subjects is not None and rows is not None:
            return src.subjects[rows]
        return self.audit_subjects

    @cached_property
    def subject_codes(self) -> tuple[NDArray[np.int64], int]:
        """:attr:`subjects` numbered densely (``_dense``), worked out once."""
        return _dense(self.subjects)

    @cached_property
    def audit_subjects(self) -> NDArray[np.int64]:
        return self._audit("subject")

    @cached_property
    def source_rows(self) -> NDArray[np.int64] | None:
        """Source row per assignment row when the source is given and the rows line up."""
        n = self.source.n_rows
        if n is None:
            return None
        rows: NDArray[np.int64] = self._audit("source_row")
        if rows.size != n or (rows.size and (rows.min() < 0 or rows.max() >= n)):
            return None
        if np.count_nonzero(np.bincount(rows, minlength=n)) != n:
            return None
        return rows

    @cached_property
    def unit_codes(self) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
        """(code per assignment row, unit id per code, sorted)."""
        return self._audit("unit")

    @cached_property
    def units(self) -> NDArray[np.object_]:
        """Unit id per audit row (for other readers; the checks use :attr:`unit_codes`)."""
        codes, names = self.unit_codes
        return names[codes]

    @cached_property
    def synthetic(self) -> pd.DataFrame:
        path = self.aud / "synthetic.parquet"
        if not path.is_file():
            return pd.DataFrame({"group_id": [], "class_id": [], "unit": []})
        return self._parquet(path)

    @cached_property
    def syn_gid(self) -> NDArray[np.int64]:
        s = self.synthetic
        return _ids(s["group_id"], "synthetic group_id") if "group_id" in s else np.array([], int)

    @cached_property
    def syn_cid(self) -> NDArray[np.int64]:
        s = self.synthetic
        return _ids(s["class_id"], "synthetic class_id") if "class_id" in s else np.array([], int)

    @cached_property
    def groups(self) -> pd.DataFrame:
        g = self._parquet(self.rel / "groups.parquet")
        for c in ("group_id", "n_records", "x", "y"):
            if c not in g.columns:
                raise _Unreadable(f"groups.parquet lacks column {c!r}")
        return g

    @cached_property
    def classes(self) -> pd.DataFrame:
        path = self.rel / "classes.parquet"
        if not path.is_file():
            if (self.cid >= 0).any():
                raise _Unreadable("release/classes.parquet is missing")
            return pd.DataFrame({"class_id": [], "level": [], "unit": [], "n_records": []})
        c = self._parquet(path)
        for col in ("class_id", "n_records"):
            if col not in c.columns:
                raise _Unreadable(f"classes.parquet lacks column {col!r}")
        return c

    @cached_property
    def units_table(self) -> pd.DataFrame:
        path = self.rel / "units.csv"
        if not path.is_file():
            raise _Unreadable("release/units.csv is missing")
        try:
            t = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise _Unreadable(f"units.csv is unreadable ({type(exc).__name__})") from None
        for col in ("unit", "released", "suppressed"):
            if col not in t.columns:
                raise _Unreadable(f"units.csv lacks column {col!r}")
        return t

    @cached_property
    def working_crs(self) -> str | None:
        v = self.audit.get("working_crs")
        return None if v in (None, "") else str(v)

    @cached_property
    def output_crs(self) -> str | None:
        v = self.manifest.get("crs", self.audit.get("output_crs"))
        return None if v in (None, "") else str(v)

    @cached_property
    def to_working(self) -> Callable[[Any, Any], tuple[Any, Any]] | None:
        """Transform output-CRS coordinates to the working CRS, or None when they are the same."""
        return _transformer(self.output_crs, self.working_crs)

    @cached_property
    def to_output(self) -> Callable[[Any, Any], tuple[Any, Any]] | None:
        return _transformer(self.working_crs, self.output_crs)

    @cached_property
    def ground(self) -> _Ground | None:
        """Ellipsoidal distances in the working CRS's datum (``None``: unnamed metric CRS)."""
        return _Ground.of(self.working_crs, self.output_crs)

    @cached_property
    def own_subjects(self) -> bool:
        col = self.audit.get("subject_column")
        if col is None:
            col = _read_options(self.audit).get("subject")
        return col in (None, "")

    def release_files(self) -> list[Path]:
        return sorted(p for p in self.rel.rglob("*") if p.is_file())


@dataclass(frozen=True)
class _Failed:
    """An audit column that could not be read as the checks need it."""

    exc: Exception


def _audit_numbers(col: pa.ChunkedArray, name: str, dtype: Any) -> NDArray[Any]:
    """A numeric audit column as a numpy array (nulls: an error)."""
    try:
        if col.null_count:
            raise _Unreadable(f"assignment {name} has nulls")
        return np.asarray(col.to_numpy(), dtype=dtype)
    except (pa.ArrowException, TypeError, ValueError):
        return pd.to_numeric(col.to_pandas()).to_numpy(dtype=dtype)


#: How each audit column is kept: numbers (nulls an error), ids (nulls -1) or text codes;
#: any other column stays an Arrow column.
_AUDIT_KINDS: dict[str, tuple[str, Any]] = {
    "source_row": ("numbers", np.int64),
    "disposal": ("codes", None),
    "group_id": ("ids", "assignment group_id"),
    "class_id": ("ids", "assignment class_id"),
    "unit": ("codes", None),
    "subject": ("numbers", np.int64),
    "x_m": ("numbers", np.float64),
    "y_m": ("numbers", np.float64),
}


class _AuditColumn:
    """One audit column, filled batch by batch into a numpy array.

    The result is what the whole column would give: :func:`_audit_numbers`,
    :func:`_arrow_ids` and :func:`_factorize_arrow` work value by value, and text is
    numbered in sorted order once every batch is in.
    """

    def __init__(self, name: str, n: int) -> None:
        self.name = name
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
            self.failed = _Unreadable(f"assignment {self.name} has nulls")
        if self.failed is not None:
            return
        try:
            if self.kind == "numbers":
                self.values[start : self.at] = _audit_numbers(
                    pa.chunked_array([arr]), self.name, self.arg
                )
            elif self.kind == "ids":
                self.values[start : self.at] = _arrow_ids(pa.chunked_array([arr]), self.arg)
            elif self.kind == "codes" and _is_text_type(arr.type) and not self.chunks:
                idx, texts = _arrow_text_codes(arr)
                local = np.array([self.texts.setdefault(t, len(self.texts)) for t in texts])
                self.values[start : self.at] = local[idx] if idx.size else idx
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
                return _factorize_arrow(pa.chunked_array(self.chunks))
            # number the texts in sorted order
            names = np.array(list(self.texts), dtype=object)
            uniq, inverse = np.unique(names.astype(str), return_inverse=True)
            codes = (
                inverse.reshape(-1).astype(np.int64)[self.values]
                if self.values.size
                else self.values
            )
            return codes, uniq.astype(object)
        except Exception as exc:
            return _Failed(exc)


def _is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def _factorize_text(series: pd.Series) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """(code per row, text per code sorted): the column as ``astype(str)`` reads it."""
    codes, uniques = pd.factorize(series, sort=False, use_na_sentinel=False)
    names = pd.Index(uniques).astype(str).to_numpy(dtype=object)
    order = np.argsort(names.astype(str), kind="stable")
    names = names[order]
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    # equal texts of different values (1 and "1") share one code
    _, first = np.unique(names.astype(str), return_index=True)
    same = np.searchsorted(names[first].astype(str), names.astype(str))
    remap = first[same]
    return remap[rank[codes]].astype(np.int64), names


def _indices(arr: pa.DictionaryArray) -> NDArray[np.int64]:
    """The codes of a dictionary array as int64, -1 for a null."""
    ind = arr.indices
    if ind.null_count:
        ind = ind.fill_null(-1)
    return np.asarray(ind.to_numpy(zero_copy_only=False), dtype=np.int64)


def _arrow_text_codes(arr: pa.Array) -> tuple[NDArray[np.int64], list[str]]:
    """Dictionary codes of a text array and the text of every code (a null reads as
    pandas' ``astype(str)`` reads it: ``"None"``)."""
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    idx = _indices(arr)
    texts = [str(v) for v in arr.dictionary.to_pylist()]
    if (idx < 0).any():
        idx = np.where(idx < 0, len(texts), idx)
        texts.append("None")
    return idx, texts


def _factorize_arrow(col: pa.ChunkedArray) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """As :func:`_factorize_text`, for an Arrow column (dictionary-encoded, no Python rows)."""
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
            or pa.types.is_dictionary(col.type)):  # fmt: skip
        return _factorize_text(col.to_pandas())
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    idx, texts = _arrow_text_codes(arr)
    names = np.array(texts, dtype=object)
    # one code per distinct text, numbered in sorted order
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    return inverse.reshape(-1)[idx].astype(np.int64), uniq.astype(object)


def _arrow_ids(col: pa.ChunkedArray, what: str) -> NDArray[np.int64]:
    """An id column as int64, nulls as -1 (as :func:`_ids`, without pandas)."""
    import pyarrow.compute as pc

    if not pa.types.is_integer(col.type):
        return _ids(col.to_pandas(), what)
    out = np.asarray(col.fill_null(-1).to_numpy(), dtype=np.int64)
    smallest = pc.min(col).as_py()  # of the values that are not null
    if smallest is not None and smallest < 0:
        raise _Unreadable(f"{what} has negative ids")
    return out


def _nunique(values: NDArray[Any]) -> int:
    """Distinct values of an array (by counting integers that span a short range, else by
    sorting: numpy's hashing unique is slow)."""
    if values.size == 0:
        return 0
    if values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo <= 4 * values.size + 1024:
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[values - lo] = True
            return int(np.count_nonzero(present))
    v = np.sort(values, kind="stable" if values.dtype.kind == "O" else None)
    return int(np.count_nonzero(v[1:] != v[:-1])) + 1


def _sorted_distinct(values: NDArray[Any]) -> NDArray[Any]:
    """``np.unique(values)`` of an integer array, by sorting (numpy's hashing unique is far
    slower on large integer arrays)."""
    v = np.sort(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def _dense(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """(code per value in 0..m-1, m): values numbered in sorted order."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * values.size + 1024:
        at = values - lo if lo else values
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[at] = True
        code = np.cumsum(present, dtype=np.int64)
        code -= 1
        return code[at], int(code[-1]) + 1
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(uniq.size)


def _distinct_counts(
    ids: NDArray[np.int64],
    subjects: NDArray[np.int64],
    size: int,
    dense: tuple[NDArray[np.int64], int] | None = None,
) -> NDArray[np.int64]:
    """Distinct subjects per id in ``0..size-1`` (ids < 0 ignored).

    ``dense``: ``_dense(subjects)`` when it is at hand (any one-to-one numbering will do).
    """
    ok = ids >= 0
    i = ids[ok]
    if i.size == 0:
        return np.zeros(size, dtype=np.int64)
    if dense is None:
        s, span = _dense(subjects[ok])
    else:
        s, span = dense[0][ok], dense[1]
    # a subject with one row counts once where that row is; only the (id, subject)
    # pairs of subjects with more rows need sorting
    once = np.bincount(s, minlength=span)[s] == 1
    out = np.bincount(i[once], minlength=size).astype(np.int64)
    if not once.all():
        more = ~once
        key = np.sort(i[more] * np.int64(span) + s[more])
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        out += np.bincount(key[first] // span, minlength=size).astype(np.int64)
    return out


def _argsort_stable(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.argsort(values, kind="stable")`` of integers, by one sort of int64 keys that
    hold each value (less the smallest) in the high bits and its position in the low bits.
    """
    v = np.asarray(values)
    n = v.size
    if n < 2 or v.dtype.kind not in "iu":
        return np.argsort(v, kind="stable").astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    shift = (n - 1).bit_length()
    if hi - lo >= 1 << (62 - shift):  # does not fit in one key
        return np.argsort(v, kind="stable").astype(np.int64)
    key = (v.astype(np.int64) - lo) << shift
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    key &= (1 << shift) - 1
    return key


def _positions(table: NDArray[np.int64], values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Position of each value in ``table`` (unique ids), -1 where it is absent."""
    if table.size == 0:
        return np.full(values.size, -1, dtype=np.int64)
    if table.dtype.kind in "iu" and values.dtype.kind in "iu":
        lo, hi = int(table.min()), int(table.max())
        span = hi - lo + 1
        if span <= 4 * table.size + 1024:
            # ids in a short range: a lookup table, unless an id repeats (then the
            # first of its rows is the answer, as below)
            if int(np.bincount(table - lo, minlength=span).max()) == 1:
                look = np.full(span, -1, dtype=np.int64)
                look[table - lo] = np.arange(table.size, dtype=np.int64)
                inside = (values >= lo) & (values <= hi)
                return np.where(inside, look[np.where(inside, values - lo, 0)], -1)
    order = _argsort_stable(table)
    st = table[order]
    at = np.minimum(np.searchsorted(st, values), st.size - 1)
    return np.where(st[at] == values, order[at], -1).astype(np.int64)


def _text_codes(texts: Iterable[object], names: NDArray[np.object_]) -> NDArray[np.int64]:
    """Code of each text in the sorted ``names`` (-1: not there)."""
    arr = pd.Series(texts if isinstance(texts, pd.Series) else list(texts), dtype=object)
    if arr.size == 0 or names.size == 0:
        return np.full(arr.size, -1, dtype=np.int64)
    look = pd.Index([str(n) for n in names.tolist()])
    # each distinct text looked up once
    codes, uniq = pd.factorize(arr.astype(str), use_na_sentinel=False)
    return np.asarray(look.get_indexer(pd.Index(uniq)), dtype=np.int64)[codes]


def _ids(series: pd.Series, what: str) -> NDArray[np.int64]:
    try:
        v = pd.to_numeric(series, errors="raise").astype("Float64")
    except (ValueError, TypeError):
        raise _Unreadable(f"{what} is not an integer column") from None
    arr = v.to_numpy(dtype=np.float64, na_value=np.nan)
    out = np.full(arr.size, -1, dtype=np.int64)
    ok = ~np.isnan(arr)
    out[ok] = arr[ok].astype(np.int64)
    if (out[ok] < 0).any():
        raise _Unreadable(f"{what} has negative ids")
    return out


def _same_crs(a: str | None, b: str | None) -> bool:
    if a is None or b is None or a == b:
        return True
    from pyproj import CRS

    try:
        return bool(CRS.from_user_input(a) == CRS.from_user_input(b))
    except Exception:  # pyproj raises its own CRSError; unknown CRS: treat as different
        return False


def _transformer(src: str | None, dst: str | None) -> Callable[[Any, Any], tuple[Any, Any]] | None:
    if _same_crs(src, dst):
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


def subject_codes_of_ids(ids: pd.Series) -> tuple[NDArray[np.int64], int]:
    """Dense subject codes of text ids compared by :func:`subject_id_text`, and the merges.

    Only the distinct ids are normalised. Returns the codes and the number of
    distinct ids merged into another (distinct ids minus distinct subjects).

    Examples
    --------
    >>> codes, merged = subject_codes_of_ids(pd.Series(["Ann", " ann", "Bo"]))
    >>> codes.tolist(), merged
    ([0, 0, 1], 1)
    """
    codes, uniq = pd.factorize(ids.astype(str), sort=False)
    texts = np.empty(len(uniq), dtype=object)
    texts[:] = [subject_id_text(str(u)) for u in np.asarray(uniq, dtype=object)]
    # any one-to-one numbering will do here (the order of codes is never compared)
    inverse, names = pd.factorize(texts, sort=False)
    dense = np.asarray(inverse, dtype=np.int64)[codes] if codes.size else codes
    return np.asarray(dense, dtype=np.int64), int(len(uniq) - len(names))


def _read_options(audit: Mapping[str, Any]) -> dict[str, Any]:
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
    arg: PointTable | Path | None,
    audit: Mapping[str, Any],
    output_crs: str | None,
    working_crs: str | None,
) -> _Source:
    src = _Source()
    if arg is None:
        return src
    if isinstance(arg, PointTable):
        n = len(arg)
        src.n_rows = n
        src.sha256 = arg.source_sha256
        table_working = getattr(arg, "working_crs", None) or arg.crs
        if _same_crs(table_working, working_crs):
            src.x_work, src.y_work = arg.x, arg.y
            # x, y are the input's own values when nothing projected or scaled them
            raw = _same_crs(arg.crs, table_working) and getattr(arg, "coord_scale", 1.0) == 1.0
            if raw and _same_crs(working_crs, output_crs):
                src.x, src.y = arg.x, arg.y
        src.subjects = arg.subjects if arg.subjects is not None else np.arange(n, dtype=np.int64)
        src.subject_ids_merged = int(getattr(arg, "subject_ids_merged", 0))
        src.unit_codes = np.asarray(arg.unit_codes, dtype=np.int64)
        src.unit_names = np.asarray(arg.unit_names, dtype=object)
        if arg.times is not None:
            src.epoch_s = arg.times
        src.attributes = arg.attributes
        return src
    path = Path(arg)
    opts = _read_options(audit)
    # every format the release reads (CSV as text, .csv.gz, GeoParquet, GeoPackage, ...)
    source_frame = read_source_frame(path)
    raw = source_frame.frame
    drop = np.zeros(len(raw), dtype=bool)
    if opts.get("drop_duplicates"):
        # The release removed exact copies first: so does the verifier, by the file's own
        # cells (a row repeating an earlier one cell for cell). Rows equal only once parsed
        # ("1" and "1.0") are left, and the record counts then disagree: a failed check.
        try:
            drop = raw.duplicated().to_numpy(dtype=bool)
        except TypeError:  # unhashable cells (lists from Parquet): compared as text
            drop = raw.astype(str).duplicated().to_numpy(dtype=bool)
    ucol = opts.get("unit") or audit.get("unit_column")
    copies = drop.copy()
    dropped = _filtered_rows(raw, opts, audit, ucol, drop)
    left_out = raw.loc[drop & ~copies]
    if drop.any():
        raw = raw.loc[~drop].reset_index(drop=True)
    src.n_rows = len(raw)
    src.sha256 = sha256_file(path)
    src.attributes = raw
    src.attributes_text = path.name.lower().endswith(CSV_SUFFIXES)
    geom = source_frame.geometry_xy
    named = opts.get("x") or opts.get("lon")
    if geom is not None and not named:
        xcol, ycol = geom
    else:
        xcol = named or ("x" if "x" in raw else "lon")
        ycol = opts.get("y") or opts.get("lat") or ("y" if "y" in raw else "lat")
    if xcol in raw and ycol in raw:
        xs = pd.to_numeric(raw[xcol], errors="coerce").to_numpy(dtype=np.float64)
        ys = pd.to_numeric(raw[ycol], errors="coerce").to_numpy(dtype=np.float64)
        in_crs = source_frame.crs or opts.get("crs")
        in_crs = None if in_crs in (None, "") else str(in_crs)
        if _same_crs(in_crs, output_crs):
            src.x, src.y = xs, ys
            if len(left_out):
                src.left_out_x = pd.to_numeric(left_out[xcol], errors="coerce").to_numpy(
                    dtype=np.float64
                )
                src.left_out_y = pd.to_numeric(left_out[ycol], errors="coerce").to_numpy(
                    dtype=np.float64
                )
        if _same_crs(in_crs, working_crs) and not {xcol.lower(), ycol.lower()} & {"lon", "lat"}:
            src.x_work, src.y_work = xs, ys
    else:
        src.notes.append("source coordinate columns not found")
    scol = opts.get("subject") or audit.get("subject_column")
    if scol and scol in raw:
        ids = raw[scol].astype(str)
        src.subjects, src.subject_ids_merged = subject_codes_of_ids(ids)
        src.subject_column = str(scol)
        src.subject_ids = frozenset(s.strip() for s in ids.unique() if len(s.strip()) >= 4)
    elif not scol:
        src.subject_ids_merged = 0  # every record its own subject: nothing merged
    src.dropped = dropped
    if ucol and ucol in raw:
        src.units = raw[ucol].astype(str).to_numpy(dtype=object)
        merges = _audit_filter(audit).get("unit_merges") or {}
        if opts.get("merge_small_units") is not None or merges:
            # the audit's mapping, applied to the file's own units (and checked in counts)
            src.source_units = src.units
            src.units = np.asarray([merges.get(u, u) for u in src.units.tolist()], dtype=object)
        codes_u, names_u = pd.factorize(src.units, sort=False)
        src.unit_codes = codes_u.astype(np.int64)
        src.unit_names = np.asarray(names_u, dtype=object)
    tcol = opts.get("time") or audit.get("time_column")
    if tcol and tcol in raw:
        src.time_column = str(tcol)
        t = raw[tcol]
        num = pd.to_numeric(t, errors="coerce")
        if num.notna().all():
            src.epoch_s = num.to_numpy(dtype=np.float64)
        else:
            wall, utc = _wallclock_seconds(t.astype(str))
            src.wall_s = wall
            src.epoch_s = np.where(np.isnan(utc), wall, utc)
    used = {xcol, ycol, scol, ucol, tcol}
    src.id_columns = frozenset(str(c) for c in raw.columns if c not in used and _is_id(raw[c]))
    return src


def _audit_filter(audit: Mapping[str, Any]) -> dict[str, Any]:
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
    filt = _audit_filter(audit)
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


# --------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------


def _members(rel: _Release) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(row indices of group members sorted by group, their group ids)."""
    cached = rel.__dict__.get("_members")
    if cached is None:
        idx = np.flatnonzero(rel.gid >= 0)
        order = idx[_argsort_stable(rel.gid[idx])]
        cached = rel.__dict__["_members"] = (order, rel.gid[order])
    return cached


def _distinct_per(ids: NDArray[np.int64], subjects: NDArray[np.int64]) -> dict[int, int]:
    """Distinct subjects per id (ids < 0 ignored), as a dict (for :mod:`geokanon.testing`)."""
    ok = ids >= 0
    code, m = _dense(ids[ok])
    full = np.full(ids.size, -1, dtype=np.int64)
    full[ok] = code
    counts = _distinct_counts(full, subjects, m)
    uniq = np.zeros(m, dtype=np.int64)
    uniq[code] = ids[ok]
    return dict(zip(uniq.tolist(), counts.tolist(), strict=True))


def _check_k_subjects(rel: _Release) -> CheckResult:
    k = rel.k
    subj = rel.subjects
    bad: list[str] = []
    worst: int | None = None
    n_ids: dict[str, int] = {}
    for what, ids, published in (
        ("groups", rel.gid, rel.groups["group_id"]),
        ("classes", rel.cid, rel.classes["class_id"]),
    ):
        pub = _ids(published, f"{what} id")
        pub = pub[pub >= 0]
        # every published id and every id the audit names, numbered densely
        code, m = _dense(np.concatenate([ids[ids >= 0], pub]))
        member_code = np.full(ids.size, -1, dtype=np.int64)
        member_code[ids >= 0] = code[: int(np.count_nonzero(ids >= 0))]
        distinct = _distinct_counts(member_code, subj, m, rel.subject_codes)
        n_ids[what] = int(np.count_nonzero(np.bincount(member_code[member_code >= 0], minlength=m)))
        small = distinct < k
        if small.any():
            mn = int(distinct[small].min())
            worst = mn if worst is None else min(worst, mn)
            bad.append(f"{int(small.sum())} of {m} {what} have < k={k} distinct subjects")
    time_bins = rel.time_bins
    if time_bins is not None:
        tb_codes, _ = _factorize_arrow(time_bins.cast(pa.string()).fill_null(""))
        n_tb = int(tb_codes.max()) + 1 if tb_codes.size else 1
        for what, ids in (
            ("group x time bin classes", rel.gid),
            ("class x time bin classes", rel.cid),
        ):
            sel = ids >= 0
            code, m = _dense(ids[sel] * np.int64(n_tb) + tb_codes[sel])
            cell = np.full(ids.size, -1, dtype=np.int64)
            cell[sel] = code
            distinct_tb = _distinct_counts(cell, subj, m, rel.subject_codes)
            small_tb = distinct_tb[distinct_tb < k]
            if small_tb.size:
                m_tb = int(small_tb.min())
                worst = m_tb if worst is None else min(worst, m_tb)
                bad.append(f"{small_tb.size} of {m} {what} have < k={k} subjects")
    published = _published_cell_problems(rel, subj)
    if bad or published:
        said = "; ".join(bad) + f" (smallest {worst})" if bad else ""
        return CheckResult("k_subjects", False, "; ".join([*([said] if said else []), *published]))
    ng, nc = n_ids["groups"], n_ids["classes"]
    cells = _record_rows(rel)
    in_cells = (
        f"; the published records' {cells.cells.size} (group or class, time bin) cells too"
        if cells.stride > 1
        else ""
    )
    return CheckResult(
        "k_subjects",
        True,
        f"{ng} groups and {nc} classes, each with >= {k} distinct subjects{in_cells}",
    )


def _rep_arrays(
    rel: _Release,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    g = rel.groups
    gids = _ids(g["group_id"], "groups group_id")
    if (gids < 0).any() or _nunique(gids) != gids.size:
        raise _Unreadable("groups.parquet group_id has nulls or duplicates")
    gx = pd.to_numeric(g["x"]).to_numpy(dtype=np.float64)
    gy = pd.to_numeric(g["y"]).to_numpy(dtype=np.float64)
    return gids, gx, gy


def _audit_holds(rel: _Release, xs: NDArray[np.float64], ys: NDArray[np.float64]) -> bool:
    """Whether the audit's working coordinates are exactly ``xs``, ``ys`` (source rows)
    row by row: then every check of one is a check of the other."""
    memo: dict[tuple[int, int], tuple[Any, Any, bool]] = rel.__dict__.setdefault("_audit_holds", {})
    key = (id(xs), id(ys))
    if key not in memo or memo[key][0] is not xs or memo[key][1] is not ys:
        rows = rel.source_rows
        same = False
        if rows is not None and xs.size == rows.size and ys.size == rows.size:
            xm, ym = rel.xy_m
            same = bool(np.array_equal(xs[rows], xm) and np.array_equal(ys[rows], ym))
        memo[key] = (xs, ys, same)
    return memo[key][2]


#: Nodes a side of the grid on which :meth:`_Ground.scale_floor` evaluates the scale.
_GROUND_NODES = 33
#: Relative width kept, at least, of the band of planar distances re-measured on the
#: ellipsoid below the limit (the scale floor is lowered by this much at least).
_GROUND_BAND = 1e-4


@dataclass(frozen=True)
class _Ground:
    """Geodesic distances on the ellipsoid of a named working CRS.

    ``extent`` holds every member within the limit on the ground, not only on the map.
    Measuring every pair on the ellipsoid costs ~0.4 us a pair (pyproj ``Geod.inv``),
    so the planar distances decide first: for a straight segment inside a box over
    which every scale factor of the CRS is at least ``s``, the geodesic between its
    ends is at most ``planar / s`` long (the segment is the image of a curve no longer
    than that). So a pair whose planar distance is at most ``limit * s`` is within the
    limit on the ground, and only the pairs above it (and within the planar limit,
    the others already fail) are measured with ``Geod.inv``. ``s`` is found here, not
    read from the release: the smallest semi-minor axis of Tissot's indicatrix
    (:meth:`pyproj.Proj.get_factors`) on a 33 x 33 grid over the pairs' box, lowered
    by the largest change between neighbouring nodes and by 1e-4 at least; where the
    scale cannot be evaluated, every pair is measured.
    """

    crs: Any  # pyproj.CRS of the working coordinates
    geod: Any  # pyproj.Geod of its ellipsoid
    to_lonlat: Any  # pyproj.Transformer, working -> its geographic CRS
    out_to_lonlat: Any  # pyproj.Transformer, output -> that geographic CRS, or None (same)

    @classmethod
    def of(cls, working: str | None, output: str | None) -> _Ground | None:
        if working is None:
            return None
        from pyproj import CRS, Transformer

        try:
            crs = CRS.from_user_input(working)
            geo = crs.geodetic_crs
        except Exception:  # pyproj's CRSError; an unknown CRS cannot be measured on the ground
            return None
        if geo is None or not crs.is_projected:
            return None
        out_tr = None
        if output is not None and not _same_crs(output, geo.to_string()):
            out_tr = Transformer.from_crs(CRS.from_user_input(output), geo, always_xy=True)
        return cls(
            crs=crs,
            geod=geo.get_geod(),
            to_lonlat=Transformer.from_crs(crs, geo, always_xy=True),
            out_to_lonlat=out_tr,
        )

    def scale_floor(self, *coords: NDArray[np.float64]) -> float:
        """A lower bound of the CRS's scale, in any direction, over the box of the points.

        ``coords`` are x and y arrays in turn (``x1, y1, x2, y2, ...``); no copy is made.
        """
        from pyproj import Proj

        xs, ys = coords[0::2], coords[1::2]
        with np.errstate(all="ignore"):
            bounds = [
                (float(np.nanmin(v)), float(np.nanmax(v))) if v.size else (np.inf, -np.inf)
                for v in (*xs, *ys)
            ]
        x_lo = min(b[0] for b in bounds[: len(xs)])
        x_hi = max(b[1] for b in bounds[: len(xs)])
        y_lo = min(b[0] for b in bounds[len(xs) :])
        y_hi = max(b[1] for b in bounds[len(xs) :])
        if not all(math.isfinite(v) for v in (x_lo, x_hi, y_lo, y_hi)):
            return 0.0
        gx, gy = np.meshgrid(
            np.linspace(x_lo, x_hi, _GROUND_NODES), np.linspace(y_lo, y_hi, _GROUND_NODES)
        )
        try:
            with np.errstate(all="ignore"):
                lon, lat = self.to_lonlat.transform(gx.ravel(), gy.ravel())
                f = Proj(self.crs).get_factors(np.asarray(lon), np.asarray(lat), errcheck=False)
        except Exception:  # pyproj errors: measure every pair
            return 0.0
        v = np.asarray(f.tissot_semiminor, dtype=np.float64).reshape(gx.shape)
        if not np.isfinite(v).all() or (v <= 0).any():
            return 0.0
        change = max(
            float(np.abs(np.diff(v, axis=0)).max()), float(np.abs(np.diff(v, axis=1)).max())
        )
        return float(v.min()) - max(change, _GROUND_BAND)

    def lonlat_out(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Output-CRS coordinates as longitude/latitude of the working CRS's datum."""
        if self.out_to_lonlat is None:
            return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        lon, lat = self.out_to_lonlat.transform(x, y)
        return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)

    def beyond(
        self,
        mx: NDArray[np.float64],
        my: NDArray[np.float64],
        at: NDArray[np.int64],
        rx: NDArray[np.float64],
        ry: NDArray[np.float64],
        gi: NDArray[np.int64],
        d: NDArray[np.float64],
        allowed: NDArray[np.float64],
        *,
        rep_out: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
        member_out: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """Pairs within ``allowed`` on the map but beyond it on the ellipsoid, and their
        geodesic distances (NaN where the planar distance settled it).

        Pair ``i`` is member ``at[i]`` of ``mx, my`` (working-CRS metres) and
        representative ``gi[i]`` of ``rx, ry`` (working-CRS metres), ``d[i]`` their
        planar distance; nothing is copied per pair but the pairs measured. The
        geodesic is measured from the published representative (``rep_out``:
        output-CRS coordinates, indexed like ``rx``) when given, else from ``rx, ry``;
        and from the members' own output-CRS coordinates (``member_out``, indexed like
        ``mx``; e.g. a lon/lat source) when given, else from ``mx, my``. The scale bound
        is taken over the box of all of ``mx, my, rx, ry`` (a larger box only lowers it).
        """
        out = np.zeros(d.size, dtype=bool)
        ground = np.full(d.size, np.nan)
        if d.size == 0:
            return out, ground
        s = self.scale_floor(mx, my, rx, ry)
        near = np.flatnonzero((d <= allowed) & ~(d <= allowed * s))
        if near.size == 0:
            return out, ground
        m, g = at[near], gi[near]
        if member_out is not None:
            mlon, mlat = self.lonlat_out(member_out[0][m], member_out[1][m])
        else:
            mlon, mlat = self._lonlat(mx[m], my[m])
        if rep_out is not None:
            rlon, rlat = self.lonlat_out(rep_out[0][g], rep_out[1][g])
        else:
            rlon, rlat = self._lonlat(rx[g], ry[g])
        _, _, dg = self.geod.inv(mlon, mlat, rlon, rlat)
        ground[near] = dg
        out[near] = ~(ground[near] <= allowed[near])
        return out, ground

    def _lonlat(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        lon, lat = self.to_lonlat.transform(x, y)
        return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)


def _check_extent(rel: _Release) -> CheckResult:
    r_max = rel.r_max_m
    gids, gx, gy = _rep_arrays(rel)
    problems: list[str] = []
    if not (np.isfinite(gx).all() and np.isfinite(gy).all()):
        problems.append(f"{int((~(np.isfinite(gx) & np.isfinite(gy))).sum())} groups lack x, y")
    limit = np.full(gids.size, r_max)
    if "radius_m" in rel.groups:
        rad = pd.to_numeric(rel.groups["radius_m"]).to_numpy(dtype=np.float64)
        over = ~(rad <= r_max)
        if over.any():
            problems.append(f"{int(over.sum())} groups publish radius_m above r_max_m")
        limit = np.minimum(limit, np.where(np.isfinite(rad), rad, r_max))
    wx, wy = gx, gy
    if rel.to_working is not None:
        wx, wy = rel.to_working(gx, gy)
    rows, mg = _members(rel)
    gi = _positions(gids, mg)
    orphans = gi < 0
    if orphans.any():
        problems.append(f"{int(orphans.sum())} members belong to no published group")
        rows, gi = rows[~orphans], gi[~orphans]
    ground = rel.ground
    # (name, member x, y in working metres, members' own output-CRS coordinates or None)
    coords: list[tuple[str, Any, Any, Any]] = [("working", *rel.xy_m, None)]
    src = rel.source
    unmasked = rel.source_rows is not None and rel.audit.get("mask") in (None, "", "none")
    if (
        src.x_work is not None
        and src.y_work is not None
        and unmasked
        and not _audit_holds(rel, src.x_work, src.y_work)  # else: the same distances again
    ):
        coords.append(("source", src.x_work, src.y_work, None))
    elif (
        src.x_work is None
        and src.x is not None
        and src.y is not None
        and unmasked
        and ground is not None
        and rel.to_working is not None
    ):
        # a lon/lat source file: its own coordinates, on the map and on the ellipsoid
        sx, sy = rel.to_working(src.x, src.y)
        coords.append(("source", sx, sy, (src.x, src.y)))
    worst_over = 0.0
    n_bad = 0
    n_ground = 0
    bad_groups: set[int] = set()
    for _name, xs, ys, own in coords:
        at = rows
        if _name == "source":
            assert rel.source_rows is not None
            at = rel.source_rows[rows]
        dx = xs[at] - wx[gi]
        dy = ys[at] - wy[gi]
        d = np.sqrt(dx * dx + dy * dy)
        allowed = limit[gi] + rel.tolerance_m
        beyond = ~(d <= allowed)
        if ground is not None:
            on_ground, dg = ground.beyond(
                xs, ys, at, wx, wy, gi, d, allowed, rep_out=(gx, gy), member_out=own
            )
            n_ground = max(n_ground, int(on_ground.sum()))
            beyond |= on_ground
            d = np.where(on_ground, dg, d)
        if beyond.any():
            n_bad = max(n_bad, int(beyond.sum()))
            bad_groups |= set(gi[beyond].tolist())
            over = d[beyond] - limit[gi][beyond]
            worst_over = max(worst_over, float(np.nanmax(over)) if np.isfinite(over).any() else 0)
    if n_bad:
        where = f", {n_ground} of them only on the ellipsoid" if n_ground else ""
        problems.append(
            f"{n_bad} members in {len(bad_groups)} groups beyond r_max{where} "
            f"(worst {worst_over:.2f} m over)"
        )
    if problems:
        return CheckResult("extent", False, "; ".join(problems))
    on = " on the map and on the ellipsoid" if ground is not None else ""
    return CheckResult(
        "extent",
        True,
        f"{rows.size} members of {gids.size} groups within {r_max:g} m of their representative{on}",
    )


def _suppressed_subjects(rel: _Release) -> tuple[int, int]:
    """(distinct subjects suppressed, distinct subjects), worked out once per release."""
    cached = rel.__dict__.get("_suppressed_subjects")
    if cached is None:
        subj = rel.subjects
        sup = rel.is_disposal("suppressed")
        cached = rel.__dict__["_suppressed_subjects"] = (_nunique(subj[sup]), _nunique(subj))
    return cached


def _check_tau(rel: _Release) -> CheckResult:
    tau = _decimal_fraction(rel.manifest.get("tau"), "tau")
    s, n = _suppressed_subjects(rel)
    if n == 0:
        return CheckResult("tau", False, "the audit holds no subjects")
    share = Fraction(s, n)
    ok = share <= tau
    detail = f"{_share_text(s, n, rel.k)} suppressed (tau {float(tau):g})"
    return CheckResult("tau", ok, detail)


def _share_text(s: int, n: int, k: int) -> str:
    """A share that never states a count of 1..k-1 subjects."""
    if 0 < s < k:
        return f"<k of {n} subjects"
    return f"{s} of {n} subjects ({s / n:.4%})"


def _check_unit_cap(rel: _Release) -> CheckResult:
    cap = _decimal_fraction(rel.manifest.get("unit_cap"), "unit_cap")
    ucode, names = rel.unit_codes
    nu = names.size
    sup = rel.is_disposal("suppressed")
    subj = rel.subjects
    size = _distinct_counts(ucode, subj, nu, rel.subject_codes)
    n_sup = _distinct_counts(ucode[sup], subj[sup], nu)
    present = np.flatnonzero(size > 0)
    breaches = [
        str(names[u]) for u in present.tolist() if Fraction(int(n_sup[u]), int(size[u])) > cap
    ]
    if breaches:
        return CheckResult(
            "unit_cap",
            False,
            f"{len(breaches)} of {present.size} units above the unit cap {float(cap):g}: "
            + ", ".join(breaches[:10])
            + (" ..." if len(breaches) > 10 else ""),
        )
    shares = n_sup[present] / size[present]
    worst = float(shares.max()) if shares.size else 0.0
    return CheckResult(
        "unit_cap",
        True,
        f"{present.size} units within the unit cap {float(cap):g} (worst {worst:.4g})",
    )


def _unit_class_records(rel: _Release) -> dict[str, int]:
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


def _synthetic_cell(row: pd.Series, per_unit: Mapping[str, Any]) -> int | str:
    """A unit's published synthetic count (units.csv ``synthetic``, else the manifest)."""
    raw = row["synthetic"] if "synthetic" in row.index else per_unit.get(str(row["unit"]), 0)
    value = _cell_value(raw)
    if value is None:
        return 0
    if value == WITHHELD:
        raise _Unreadable("a unit's synthetic count must be an integer or '<k'")
    return value


def _unit_rows(rel: _Release) -> list[dict[str, Any]]:
    t = rel.units_table
    syn = rel.manifest.get("synthetic") or {}
    per_unit = syn.get("per_unit") if isinstance(syn, Mapping) else None
    per_unit = per_unit if isinstance(per_unit, Mapping) else {}
    class_records = _unit_class_records(rel)
    rows: list[dict[str, Any]] = []
    for _, r in t.iterrows():
        released = _cell_value(r["released"])
        if not isinstance(released, int):
            raise _Unreadable("units.csv released must be an integer in every row")
        sup = _cell_value(r["suppressed"])
        if sup is None:
            raise _Unreadable("units.csv suppressed is empty in some row")
        total = _cell_value(r["source_total"]) if "source_total" in t.columns else None
        up = _cell_value(r["generalised_up"]) if "generalised_up" in t.columns else None
        rows.append(
            {
                "unit": str(r["unit"]),
                "released": released,
                "suppressed": sup,
                "generalised_up": up,
                "source_total": total,
                "synthetic": _synthetic_cell(r, per_unit),
                "class_records": class_records.get(str(r["unit"]), 0),
            }
        )
    return rows


def _published_input_size(manifest: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(input records from the first pass's ``records``, grouped + merged + generalised)."""
    passes = manifest.get("passes")
    total = None
    if isinstance(passes, list) and passes and isinstance(passes[0], Mapping):
        n = passes[0].get("records")
        total = n if isinstance(n, int) and not isinstance(n, bool) else None
    counts = manifest.get("counts")
    released = None
    if isinstance(counts, Mapping):
        parts = [counts.get(d) for d in ("grouped", "merged", "generalised")]
        ints = [v for v in parts if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(parts):
            released = sum(ints)
    return total, released


#: Columns of units.csv, groups.parquet and classes.parquet the release format declares
#: (any other column holding numbers is a figure the holes system cannot account for).
UNIT_FILE_COLUMNS = frozenset({"unit", "released", "suppressed", "generalised_up",
                               "source_total", "synthetic"})  # fmt: skip
GROUP_FILE_COLUMNS = frozenset({"group_id", "n_records", "x", "y", "radius_m", "unit", "geometry"})
CLASS_FILE_COLUMNS = frozenset({"class_id", "level", "unit", "n_records"})


def _undeclared_columns(name: str, frame: pd.DataFrame, declared: frozenset[str]) -> list[str]:
    out = []
    for col in frame.columns:
        if str(col) in declared:
            continue
        values = frame[col]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if not numeric:
            text = values.astype(str).str.strip()
            numeric = bool(text.str.fullmatch(r"[+-]?\d[\d,]*(\.\d+)?|<k").any())
        if numeric:
            out.append(
                f"{name} column {str(col)[:24]!r}: a figure the release format does not declare"
            )
    return out


def _text_file(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise _Unreadable(f"{path.name} is unreadable") from None


def _holes_system(
    *,
    k: int,
    manifest: Mapping[str, Any],
    rows: list[dict[str, Any]],
    groups: pd.DataFrame | None,
    classes: pd.DataFrame,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    records_rows: int | None = None,
    notes: str | None = None,
    report: str | None = None,
) -> tuple[dict[str, Any], Published]:
    """The keyword arguments of :func:`hidden_ranges` besides the unit rows, and what
    :func:`geokanon.published.collect` read from every file given."""
    from geokanon.published import collect

    cells: dict[tuple[str, str], object] = {}
    for r in rows:
        for col in ("released", "suppressed", "generalised_up", "source_total", "synthetic"):
            if r.get(col) is not None:
                cells[(r["unit"], col)] = r[col]
    pooled = 0
    class_total = None
    if len(classes) and "n_records" in classes:
        sizes = pd.to_numeric(classes["n_records"])
        class_total = int(sizes.sum())
        if "level" in classes:
            pooled = int(sizes[classes["level"].astype(str) != "unit"].sum())
    elif not len(classes):
        class_total = 0
    group_total = None
    if groups is not None and "n_records" in groups:
        group_total = int(pd.to_numeric(groups["n_records"]).sum())
    pub = collect(
        manifest, k=k, unit_cells=cells, group_records=group_total, class_records=class_total,
        records_rows=records_rows, notes=notes, report=report,
        extra_known=[MAX_PASSES, len(rows)],
    )  # fmt: skip
    counts = manifest.get("counts") or {}
    g = _cell_value(counts.get("suppressed")) if isinstance(counts, Mapping) else None
    if g == WITHHELD or isinstance(g, int):
        g = LESS_THAN_K if pub.global_less_than_k else None  # an int is one of the figures
    syn = manifest.get("synthetic") or {}
    syn = syn if isinstance(syn, Mapping) else {}
    raw_total = _cell_value(syn.get("total", 0))
    syn_total = raw_total if isinstance(raw_total, int) else None
    raw_pooled = _cell_value(syn.get("pooled"))
    # Synthetic records above unit level: as published, else at most all of them.
    pooled_syn = (
        raw_pooled if isinstance(raw_pooled, int) else (pooled if syn_total is None else syn_total)
    )
    system = {
        "global_suppressed": g,
        "own_subjects": own_subjects,
        "pooled_records": pooled,
        "pooled_synthetic_max": min(pooled_syn, pooled),
        "synthetic_total": syn_total,
        "record_bound": record_bound,
        "groups_by_majority_unit": groups_by_majority_unit,
        "figures": pub.figures,
    }
    return system, pub


def holes_system(
    manifest: Mapping[str, Any],
    classes: pd.DataFrame,
    *,
    k: int,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    groups: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The figures besides ``units.csv`` that :func:`hidden_ranges` combines with it.

    The same system ``holes`` builds (every figure the manifest and the group and class
    tables publish, by the format's declared schema), for the release writer, which
    chooses its complementary suppressions against it before the notes and the report
    exist (their tables repeat figures of these files; ``holes`` reads them too).

    Parameters
    ----------
    manifest
        The manifest (``counts``, ``synthetic``, ``passes``, ... are read).
    classes
        ``classes.parquet`` (``level``, ``n_records``).
    k
        The release's k.
    own_subjects, record_bound, groups_by_majority_unit
        As for :func:`hidden_ranges`.
    groups
        ``groups.parquet`` (``n_records``), when known.

    Returns
    -------
    dict
        Keyword arguments of :func:`hidden_ranges` (all but ``units``, ``k``,
        ``exact`` and ``integer``).
    """
    system, _ = _holes_system(
        k=k,
        manifest=manifest,
        rows=[],
        groups=groups,
        classes=classes,
        own_subjects=own_subjects,
        record_bound=record_bound,
        groups_by_majority_unit=groups_by_majority_unit,
    )
    return system


def holes_check(
    *,
    k: int,
    manifest: Mapping[str, Any],
    rows: list[dict[str, Any]],
    units_table: pd.DataFrame,
    groups: pd.DataFrame | None,
    classes: pd.DataFrame,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    records_rows: int | None,
    notes: str | None,
    report: str | None,
) -> CheckResult:
    """``holes`` over every figure of every release file (both verifiers run this).

    ``rows`` are the units.csv rows as :func:`hidden_ranges` takes them; the other
    files' figures are read by :func:`geokanon.published.collect`.
    """
    problems = _undeclared_columns("units.csv", units_table, UNIT_FILE_COLUMNS)
    if groups is not None:
        problems += _undeclared_columns("groups.parquet", groups, GROUP_FILE_COLUMNS)
    problems += _undeclared_columns("classes.parquet", classes, CLASS_FILE_COLUMNS)
    system, pub = _holes_system(
        k=k,
        manifest=manifest,
        rows=rows,
        groups=groups,
        classes=classes,
        own_subjects=own_subjects,
        record_bound=record_bound,
        groups_by_majority_unit=groups_by_majority_unit,
        records_rows=records_rows,
        notes=notes,
        report=report,
    )
    problems += pub.problems
    for (unit, col), value in pub.unit_values.items():
        for r in rows:
            if r["unit"] == unit:
                r[col] = value
    try:
        ranges = hidden_ranges(rows, k=k, exact=False, **system)
    except ValueError as exc:
        return CheckResult("holes", False, "; ".join([*problems, f"{exc} (see counts)"][:6]))
    narrowed = [p for h in ranges if (p := h.problem(k)) is not None]
    if narrowed:
        problems = [
            f"{len(narrowed)} of {len(ranges)} hidden figures recoverable: " + narrowed[0],
            *narrowed[1:],
            *problems,
        ]
    if problems:
        return CheckResult(
            "holes", False, "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "")
        )
    return CheckResult(
        "holes",
        True,
        holes_summary(ranges, k, len(rows))
        + f"; {len(pub.figures)} published figures of the manifest, notes, report and tables",
    )


def holes_summary(ranges: Sequence[HiddenRange], k: int, n_rows: int) -> str:
    """The ``holes`` detail line of a passing system."""
    sensitive = sum(h.kind == LESS_THAN_K for h in ranges)
    unsolved = sum(h.unsolved for h in ranges)
    how = (
        "in integers"
        if not unsolved
        else f"in integers but {unsolved} values, LP range only: integer programs capped"
    )
    return (
        f"{sensitive} '<k' figures keep every value 1..k-1 ({how}) given the {n_rows} unit "
        f"rows and totals; {len(ranges) - sensitive} withheld figures owe nothing of their own"
    )


def _check_holes(rel: _Release) -> CheckResult:
    path = rel.rel / "records.parquet"
    rows_n = None
    if path.is_file():
        try:
            rows_n = int(pq.ParquetFile(path).metadata.num_rows)
        except (OSError, pa.ArrowException):
            raise _Unreadable("records.parquet is unreadable") from None
    return holes_check(
        k=rel.k,
        manifest=rel.manifest,
        rows=_unit_rows(rel),
        units_table=rel.units_table,
        groups=rel.groups,
        classes=rel.classes,
        own_subjects=rel.own_subjects,
        record_bound=rel.n_audit,
        groups_by_majority_unit="unit" in rel.groups.columns,
        records_rows=rows_n,
        notes=_text_file(rel.rel / "RELEASE_NOTES.md"),
        report=_text_file(rel.rel / "report.html"),
    )


# ---- no_leak ---------------------------------------------------------------------------
#
# Membership tests sort instead of hashing: the sets of secrets are sorted once, and the
# values a file holds are sorted and de-duplicated before they are looked up, so each
# column costs one sort. Text columns are judged value by value on their distinct
# values (Parquet stores them dictionary-encoded) and weighted by how often each occurs.
# Parquet and CSV files are read in batches of rows: every finding is a count over rows
# or a property of a column's set of distinct values, so the figures of the batches add
# up to those of the whole file, and memory stays that of one batch.

#: Rows per batch when ``no_leak`` reads a Parquet file.
_SCAN_ROWS = 1 << 20
#: Bytes per block (one batch of rows) when ``no_leak`` reads a CSV file.
_CSV_BLOCK = 1 << 24


@dataclass
class _Secrets:
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
    #: the mask key in every text form a file could hold it (see :func:`_mask_key_forms`)
    key_forms: tuple[str, ...] = ()
    #: the key's 64-bit words, signed and unsigned, as an integer column could hold them
    key_ints: tuple[int, ...] = ()
    #: the key's own bytes (and those its hex text spells) and its SipHash key, raw
    key_raw: tuple[bytes, ...] = ()
    #: why the release could not be searched for the mask key (None: it was, or no mask)
    key_missing: str | None = None

    @cached_property
    def key_min_len(self) -> int:
        return min((len(f) for f in self.key_forms), default=0)

    @cached_property
    def times(self) -> NDArray[np.float64]:
        return np.sort(np.concatenate([self.wall, self.epoch]))

    @cached_property
    def has_pairs(self) -> bool:
        # coords holds both values of every finite source pair
        return self.coords.size > 0 or self.near is not None

    @cached_property
    def _pairs(self) -> tuple[tuple[tuple[NDArray[np.float64], NDArray[np.float64]], ...], int]:
        """(the source pair arrays, bits for a row number across them)."""
        sources = self.pair_sources or ((self.px, self.py),)
        total = sum(int(x.size) for x, _ in sources)
        return sources, max(1, (total - 1).bit_length())

    @cached_property
    def pair_keys(self) -> NDArray[np.uint64]:
        """Every finite source pair as one sorted key: a hash of the pair in the high bits,
        the pair's row number (across :attr:`pair_sources`) in the low bits. Built on first use.
        """
        sources, shift = self._pairs
        low = np.uint64((1 << shift) - 1)
        parts: list[NDArray[np.uint64]] = []
        offset = 0
        for x, y in sources:
            for start in range(0, x.size, _SCAN_ROWS):
                xs, ys = x[start : start + _SCAN_ROWS], y[start : start + _SCAN_ROWS]
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


def _sorted_finite(values: NDArray[np.float64]) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    return np.sort(v[np.isfinite(v)])


def _secrets(rel: _Release) -> tuple[_Secrets, list[str]]:
    src = rel.source
    scanned: list[str] = []
    xs_list: list[NDArray[np.float64]] = []
    ys_list: list[NDArray[np.float64]] = []

    def add(x: NDArray[np.float64], y: NDArray[np.float64]) -> None:
        # the same values twice add nothing to look for
        for ox, oy in zip(xs_list, ys_list, strict=True):
            if ox is x and oy is y:
                return
            if ox.shape == x.shape and np.array_equal(ox, x) and np.array_equal(oy, y):
                return
        xs_list.append(np.asarray(x, dtype=np.float64))
        ys_list.append(np.asarray(y, dtype=np.float64))

    if src.x is not None and src.y is not None:
        add(src.x, src.y)
        scanned.append("source coordinates")
    if src.left_out_x is not None and src.left_out_y is not None:
        add(src.left_out_x, src.left_out_y)  # records left out must not appear either
        scanned.append("coordinates of the records left out")
    if src.x_work is not None and src.y_work is not None and src.x_work is not src.x:
        add(src.x_work, src.y_work)
        scanned.append("working coordinates")
    near = None
    near_tol = 0.0
    if rel.to_output is None:
        add(*rel.xy_m)
        if not scanned:
            scanned.append("audit coordinates")
    elif src.x is None:
        # the output CRS differs and the source's own values are unknown (a PointTable
        # of lon/lat input): compare with the working coordinates carried to the output
        # CRS, within a relative 1e-9 (transform round-off, far below any precision)
        from scipy.spatial import cKDTree

        ox, oy = rel.to_output(*rel.xy_m)
        ok_o = np.isfinite(ox) & np.isfinite(oy)
        if ok_o.any():
            pts = np.column_stack([ox[ok_o], oy[ok_o]])
            near = cKDTree(pts)
            near_tol = 1e-9 * max(1.0, float(np.abs(pts).max()))
            scanned.append("transformed coordinates")
    # every x and y of a finite pair, sorted (the pairs themselves stay where they are)
    parts: list[NDArray[np.float64]] = []
    for x, y in zip(xs_list, ys_list, strict=True):
        ok = np.isfinite(x) & np.isfinite(y)
        parts += [x, y] if ok.all() else [x[ok], y[ok]]
    coords = np.concatenate(parts) if parts else np.array([])
    coords.sort()
    epoch = np.empty(0)
    wall = np.empty(0)
    if src.epoch_s is not None:
        epoch = _sorted_finite(src.epoch_s)
        scanned.append("times")
    if src.wall_s is not None:
        wall = _sorted_finite(src.wall_s)
    if src.subject_ids:
        scanned.append("subject ids")
    bad_names = set(_ROW_NAMES) | set(src.id_columns)
    for col in (src.subject_column, src.time_column):
        if col:
            bad_names.add(col)
    bad_names = {n.lower() for n in bad_names} - _STRUCTURAL
    scanned.append("row-number columns")
    spaced = tuple(s for s in src.subject_ids if _TOKEN_SPLIT.search(s))
    key_forms: tuple[str, ...] = ()
    key_ints: tuple[int, ...] = ()
    key_raw: tuple[bytes, ...] = ()
    key_missing = None
    key_file = rel.aud / "mask_key"
    if key_file.is_file():
        key_forms, key_ints, key_raw = _mask_key_forms(key_file.read_bytes())
        scanned.append("the mask key")
    elif rel.audit.get("mask") not in (None, "", "none"):
        key_missing = (
            "a mask was applied but audit/mask_key is missing, so the release cannot be "
            "searched for the mask's secret key"
        )
    return (
        _Secrets(
            px=np.empty(0),
            py=np.empty(0),
            coords=coords,
            subject_ids=src.subject_ids,
            spaced_ids=spaced,
            epoch=epoch,
            wall=wall,
            bad_names=frozenset(bad_names),
            n_k=rel.k,
            near=near,
            near_tol=near_tol,
            pair_sources=tuple(zip(xs_list, ys_list, strict=True)),
            key_forms=key_forms,
            key_ints=key_ints,
            key_raw=key_raw,
            key_missing=key_missing,
        ),
        scanned,
    )


#: BLAKE2b personalisation of the mask key derivation (as :class:`geokanon.mask.MaskKey`).
_MASK_KEY_PERSON = b"geokanon-mask/1"
#: Shorter forms of the key are not searched for (a chance match would be likely).
_MASK_KEY_MIN_FORM = 12


def _mask_key_forms(data: bytes) -> tuple[tuple[str, ...], tuple[int, ...], tuple[bytes, ...]]:
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


def _key_count(text: str, sec: _Secrets) -> int:
    """Occurrences of the mask key (any of its forms) in ``text``."""
    if not sec.key_forms or len(text) < sec.key_min_len:
        return 0
    return sum(text.count(f) for f in sec.key_forms)


def _key_cells(col: _TextColumn, sec: _Secrets) -> int:
    """Rows of a text column whose cell holds the mask key (in any of its forms)."""
    if not sec.key_forms or col.texts.size == 0:
        return 0
    import pyarrow.compute as pc

    length = np.asarray(pc.utf8_length(col.arrow).to_numpy(zero_copy_only=False))
    counts = col.counts
    long = np.flatnonzero((length >= sec.key_min_len) & (counts > 0))
    return sum(int(counts[i]) for i in long.tolist() if _key_count(col.texts[i], sec))


def _key_ints_in(arr: pa.ChunkedArray | pa.Array, sec: _Secrets) -> int:
    """Values of a 64-bit integer column equal to a word of the mask key."""
    t = arr.type
    if not sec.key_ints or not pa.types.is_integer(t) or t.bit_width != 64:
        return 0
    import pyarrow.compute as pc

    lo, hi = (0, 1 << 64) if pa.types.is_unsigned_integer(t) else (-(1 << 63), 1 << 63)
    values = pa.array([v for v in sec.key_ints if lo <= v < hi], type=t)
    return int(pc.sum(pc.cast(pc.is_in(arr, value_set=values), pa.int64())).as_py() or 0)


def _in_sorted(table: NDArray[Any], values: NDArray[Any]) -> NDArray[np.bool_]:
    """Exact membership of ``values`` in the sorted array ``table``."""
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    i = np.searchsorted(table, values)
    np.minimum(i, table.size - 1, out=i)
    return np.asarray(table[i] == values, dtype=bool)


def _distinct(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sorted distinct finite values."""
    v = _sorted_finite(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def _isin(values: NDArray[Any], table: NDArray[Any]) -> NDArray[np.bool_]:
    """Membership of every value in the sorted array ``table`` (NaN is never a member).

    The distinct values are looked up (a sort, then a merge-like search), and only
    the values found are matched back to the rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if table.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    if values.size <= 4096:
        return _in_sorted(table, values)
    uq = _distinct(values)
    found = uq[_in_sorted(table, uq)]
    if found.size == 0:
        return np.zeros(values.size, dtype=bool)
    return _in_sorted(found, values)


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
    sec: _Secrets,
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
        ok = np.isfinite(a) & np.isfinite(b)
        if not ok.any():
            return 0
        dist, _ = sec.near.query(np.column_stack([a[ok], b[ok]]), k=1)
        return int((dist <= sec.near_tol).sum())
    if sec.coords.size == 0:
        return 0
    if a_in is None:
        a_in = _isin(a, sec.coords)
    if not a_in.any():
        return 0
    if b_in is None:
        b_in = _isin(b, sec.coords)
    cand = np.flatnonzero(a_in & b_in & np.isfinite(a) & np.isfinite(b))
    if cand.size == 0:
        return 0
    ca, cb = a[cand], b[cand]
    # 4 significant digits between them, then an exact source pair
    enough = _sig_counts(ca) + _sig_counts(cb) >= 4
    if not enough.any():
        return 0
    return int(np.count_nonzero(sec.known_pairs(ca[enough], cb[enough])))


def _frac_hits(values: NDArray[np.float64], sec: _Secrets) -> NDArray[np.bool_]:
    """Values equal to a non-integral source coordinate."""
    v = np.asarray(values, dtype=np.float64)
    return _isin(v, sec.coords) & (v != np.floor(v))


def _number_findings(
    vals: NDArray[np.float64],
    sec: _Secrets,
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
    sec: _Secrets,
    *,
    pairs: bool,
    single_values: bool,
    weights: NDArray[np.int64] | None = None,
) -> dict[str, int]:
    """As :func:`_number_findings`: what -> how many (non-zero only, in report order)."""
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
        n = count(_frac_hits(vals, sec))
        if n:
            found["coordinate values"] = n
    n = count(_isin(vals, sec.epoch))
    if n:
        found["epoch times"] = n
    return found


def _numbers(tokens: Sequence[str]) -> NDArray[np.float64]:
    return np.array(tokens, dtype=str).astype(np.float64) if tokens else np.empty(0)


def _scan_text(text: str, sec: _Secrets, *, single_values: bool = True) -> list[str]:
    found = _number_findings(
        _numbers(_NUMBER.findall(text)), sec, pairs=True, single_values=single_values
    )
    found += _stamp_and_id_findings(text, sec)
    return found


def _stamp_and_id_findings(text: str, sec: _Secrets, weight: int = 1) -> list[str]:
    found: list[str] = []
    if sec.epoch.size or sec.wall.size:
        stamps = _DATETIME.findall(_TIME_BIN.sub(" ", text))
        if stamps:
            n = _timestamp_hits(stamps, sec)
            if n:
                found.append(f"{n * weight} timestamps")
    if sec.subject_ids:
        n = sum(1 for t in _TOKEN_SPLIT.split(text) if t in sec.subject_ids)
        n += sum(1 for s in sec.spaced_ids if s in text)
        if n:
            found.append(f"{n * weight} subject ids")
    n = _key_count(text, sec)
    if n:
        found.append(f"{n * weight} copies of the mask key")
    return found


def _timestamp_hits(stamps: Sequence[str], sec: _Secrets) -> int:
    wall, utc = _wallclock_seconds(stamps)
    hit = _isin(wall, sec.times) | _isin(utc, sec.times)
    return int(hit.sum())


def _numeric_column_hits(name: str, vals: NDArray[np.float64], sec: _Secrets) -> list[str]:
    found: list[str] = []
    if name.lower() in ("x", "y", "geometry.x", "geometry.y"):
        return found  # published representatives: judged as pairs only
    uniq = _distinct(vals)
    if uniq.size == 0:
        return found
    in_coords = _isin(uniq, sec.coords)
    n = _sig_at_least(uniq, in_coords & (uniq != np.floor(uniq)))
    if n:
        found.append(f"column {name!r}: {n} coordinate values")
    elif name.lower() not in _STRUCTURAL:
        n_hit = _sig_at_least(uniq, in_coords)
        if n_hit:
            n_el = _sig_at_least(uniq, np.ones(uniq.size, dtype=bool))
            if n_el >= sec.n_k and 2 * n_hit >= n_el:
                found.append(f"column {name!r}: {n_hit} of {n_el} values are coordinates")
    n = _sig_at_least(uniq, _isin(uniq, sec.epoch))
    if n:
        found.append(f"column {name!r}: {n} epoch times")
    return found


_NOT_PAIRS = frozenset(
    {"group_id", "class_id", "n_records", "released", "suppressed", "source_total", "radius_m"}
    | {"generalised_up"}
)
#: A cell that is exactly one number token as ``_NUMBER`` reads it (ASCII only).
_WHOLE_NUMBER = r"^[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$"
_NO_DIGIT = r"^[^0-9]*$"


@dataclass
class _TextColumn:
    """A text column as its distinct values: ``texts[codes]`` is the column (-1: null)."""

    texts: NDArray[np.object_]
    codes: NDArray[np.int64]

    @cached_property
    def counts(self) -> NDArray[np.int64]:
        ok = self.codes >= 0
        return np.bincount(self.codes[ok], minlength=self.texts.size).astype(np.int64)

    @cached_property
    def arrow(self) -> pa.Array:
        return pa.array(self.texts.tolist(), type=pa.string())

    #: what depends on the texts alone (not on the codes)
    _PER_ENTRY = frozenset(
        {"arrow", "ascii", "whole_number", "no_digit", "other", "other_tokens", "parsed", "numeric"}
    )

    @cached_property
    def ascii(self) -> NDArray[np.bool_]:
        import pyarrow.compute as pc

        return _np_bool(pc.string_is_ascii(self.arrow))

    @cached_property
    def whole_number(self) -> NDArray[np.bool_]:
        """Entries that are exactly one number token (so they read as that number)."""
        import pyarrow.compute as pc

        return _np_bool(pc.match_substring_regex(self.arrow, _WHOLE_NUMBER)) & self.ascii

    @cached_property
    def no_digit(self) -> NDArray[np.bool_]:
        import pyarrow.compute as pc

        return _np_bool(pc.match_substring_regex(self.arrow, _NO_DIGIT)) & self.ascii

    @cached_property
    def other(self) -> NDArray[np.int64]:
        """Entries neither empty of digits nor one number: read with the regex."""
        return np.flatnonzero(~self.no_digit & ~self.whole_number)

    @cached_property
    def other_tokens(self) -> dict[int, list[str]]:
        return {int(i): _NUMBER.findall(self.texts[i]) for i in self.other.tolist()}

    @cached_property
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

    @cached_property
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

        return _np_bool(pc.match_substring_regex(self.arrow, pattern)) | ~self.ascii

    def hits(self, coords: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Which entries' :attr:`numeric` values are in the sorted ``coords`` (kept for them)."""
        cached = self.__dict__.get("_hits")
        if cached is None or cached[0] is not coords:
            cached = self.__dict__["_hits"] = (coords, _isin(self.numeric, coords))
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


def _np_bool(arr: Any) -> NDArray[np.bool_]:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _text_column(arr: pa.ChunkedArray | pa.Array) -> _TextColumn:
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
    idx = np.concatenate([_indices(c) for c in chunks])
    binary = pa.types.is_binary(dictionary.type) or pa.types.is_large_binary(dictionary.type)
    if binary:
        texts = [None if v is None else bytes(v).decode("utf-8", "replace")
                 for v in dictionary.to_pylist()]  # fmt: skip
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


def _text_findings(col: _TextColumn, sec: _Secrets, *, single_values: bool) -> list[str]:
    """Numbers (no pairs), timestamps and subject ids in every cell, as the joined text reads.

    Counts are per occurrence: an entry's findings count as often as it occurs.
    """
    return [f"{n} {what}" for what, n in _text_counts(col, sec, single_values).items()]


def _text_counts(col: _TextColumn, sec: _Secrets, single_values: bool) -> dict[str, int]:
    """As :func:`_text_findings`: what -> how many (non-zero only, in report order)."""
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
        weights=np.concatenate(weights),
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
        whole = _np_bool(pc.is_in(col.arrow, value_set=pa.array(sorted(sec.subject_ids))))
        n_id += int(counts[present & ~split & whole].sum())
        for i in np.flatnonzero(present & split).tolist():
            text = col.texts[i]
            n = sum(1 for t in _TOKEN_SPLIT.split(text) if t in sec.subject_ids)
            n_id += n * int(counts[i])
    if n_stamp:
        found["timestamps"] = n_stamp
    if n_id:
        found["subject ids"] = n_id
    return found


def _cell_findings(name: str, col: _TextColumn, sec: _Secrets) -> list[str]:
    """Subject ids and timestamps as whole (stripped) cells of a text column."""
    return [f"column {name!r}: {n} {what}" for what, n in _cell_counts(col, sec).items()]


def _cell_counts(col: _TextColumn, sec: _Secrets) -> dict[str, int]:
    """As :func:`_cell_findings`: what -> how many (non-zero only, in report order)."""
    found: dict[str, int] = {}
    counts = col.counts
    present = counts > 0
    if sec.subject_ids:
        import pyarrow.compute as pc

        stripped = pc.utf8_trim_whitespace(col.arrow)
        whole = _np_bool(pc.is_in(stripped, value_set=pa.array(sorted(sec.subject_ids))))
        # Python's str.strip() also strips a few characters utf8_trim does not
        odd = ~col.ascii & present
        for i in np.flatnonzero(odd).tolist():
            whole[i] = col.texts[i].strip() in sec.subject_ids
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
                self._distinct = _distinct(col.numeric[col.counts > 0])
            else:
                self._distinct = self._hashed_distinct()
                if self._distinct is None:
                    self._distinct = _distinct(self.rows())
        return self._distinct

    def _hashed_distinct(self) -> NDArray[np.float64] | None:
        """The Arrow column's distinct values (by hashing) as numbers; None: not hashable."""
        if self.arrow is None:
            return None
        import pyarrow.compute as pc

        try:
            return _distinct(_arrow_numeric(pc.unique(self.arrow)))
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
            self._found = uq[_in_sorted(coords, uq)]
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
                self._member = _in_sorted(self._found, self.rows())
        return self._member


class _TableScan:
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

    def __init__(self, names: Sequence[str], sec: _Secrets, *, one_batch: bool = False) -> None:
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

    def values(self, i: int) -> NDArray[np.float64] | None:
        """Distinct finite values of column ``i`` (None: it held no value)."""
        parts = self._values[i]
        if not parts:
            return None
        if len(parts) > 1:
            parts[:] = [_distinct(np.concatenate(parts))]
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
                gx, gy = _wkb_xy(arr)
                if self.one_batch:
                    same = (
                        "x" in numeric
                        and "y" in numeric
                        and np.array_equal(gx, numeric["x"].rows(), equal_nan=True)
                        and np.array_equal(gy, numeric["y"].rows(), equal_nan=True)
                    )
                    if gx.size and not same:
                        numeric["geometry.x"], numeric["geometry.y"] = _Numbers(gx), _Numbers(gy)
                    continue
                same = (
                    "x" in every
                    and "y" in every
                    and np.array_equal(gx, every["x"].rows(), equal_nan=True)
                    and np.array_equal(gy, every["y"].rows(), equal_nan=True)
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
                secs = _ns_to_s(pd.Series(arr.to_pandas()))
                if (_isin(secs, sec.epoch) | _isin(secs, sec.wall)).any():
                    self.stamps[i] = True
                continue
            if pa.types.is_boolean(t) or pa.types.is_null(t):
                continue
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
                n_key = _key_ints_in(arr, sec)
                if n_key:
                    cell = self.cells[i]
                    cell["copies of the mask key"] = cell.get("copies of the mask key", 0) + n_key
                nums = _Numbers(rows=_arrow_numeric(arr), arrow=arr)
                has = nums.any_value()
            else:
                col = text_cells.get(name)
                if col is None:
                    col = _text_column(arr)
                for what, n in _cell_counts(col, sec).items():
                    self.cells[i][what] = self.cells[i].get(what, 0) + n
                finite = bool(np.isfinite(col.numeric).any())
                if not finite and self.one_batch:
                    continue
                nums = _Numbers(text=col)
                has = finite and nums.any_value()
            every[name] = nums
            if not has:
                continue
            self.present.add(name)
            if name.lower() not in ("x", "y", "geometry.x", "geometry.y"):
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
            if _key_count(name, sec):
                found.append(f"column {name!r}: its name holds the mask key")
            if self.stamps[i]:
                found.append(f"column {name!r}: source timestamps")
            # as _cell_findings orders them
            for what in ("subject ids", "timestamps", "copies of the mask key"):
                if self.cells[i].get(what):
                    found.append(f"column {name!r}: {self.cells[i][what]} {what}")
            values = self.values(i)
            if values is not None:
                found += _numeric_column_hits(name, values, sec)
        n_pairs = self.pairs
        if not self.one_batch and self.geo_seen and self.geo_same and {"x", "y"} <= self.present:
            n_pairs -= self.geo_pairs  # the geometry repeats x, y: not pairs of its own
        if n_pairs:
            found.append(f"{n_pairs} rows hold a source coordinate pair")
        return found


def _scan_columns(
    columns: Sequence[tuple[str, pa.ChunkedArray | pa.Array]],
    sec: _Secrets,
    *,
    text_cells: dict[str, _TextColumn] | None = None,
) -> list[str]:
    """Table-level checks (columns as values) of a whole table; the caller also scans the text."""
    scan = _TableScan([n for n, _ in columns], sec, one_batch=True)
    scan.add(columns, text_cells)
    return scan.findings()


def _scan_frame(frame: pd.DataFrame, sec: _Secrets) -> list[str]:
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


def _wkb_xy(
    arr: pa.ChunkedArray | pa.Array | pd.Series,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Point coordinates of a WKB column (NaN for nulls, empty and non-point geometries).

    Little-endian 2-D points (21 bytes each) are read directly; any other geometry
    sends the whole column through shapely.
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
    xs = np.full(n, np.nan)
    ys = np.full(n, np.nan)
    if n == 0:
        return xs, ys
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
    data = arr.buffers()[2]
    data_np = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    starts = offsets[:-1].astype(np.int64)
    fast = bool(((lengths == 21) | ~valid).all())
    if fast and valid.any():
        rows = np.flatnonzero(valid)
        if (lengths[~valid] == 0).all():
            # the points lie back to back: view them as rows of 21 bytes, no gather
            first = int(starts[rows[0]])
            raw = data_np[first : first + 21 * rows.size].reshape(rows.size, 21)
        else:
            raw = np.empty((rows.size, 21), dtype=np.uint8)
            for j in range(21):
                raw[:, j] = data_np[starts[rows] + j]
        fast = bool((raw[:, :5] == np.frombuffer(_WKB_POINT_LE, dtype=np.uint8)).all())
        if fast:
            xy = np.ascontiguousarray(raw[:, 5:]).view("<f8").reshape(-1, 2)
            xs[rows], ys[rows] = xy[:, 0], xy[:, 1]
            return xs, ys
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


def _parquet_batches(path: Path) -> tuple[pa.Schema, bool, Iterator[pa.Table | pa.RecordBatch]]:
    """(schema, whether read whole, the file in batches of rows); text columns as dictionaries.

    Repeated column names (or a column named like the geometry's coordinates) make the
    table-level checks depend on whole columns: such a file comes as one table.
    """

    def unreadable(exc: Exception) -> _Unreadable:
        return _Unreadable(f"{path.name} is unreadable ({type(exc).__name__})")

    try:
        schema = pq.ParquetFile(path).schema_arrow
        text_cols = [
            f.name
            for f in schema
            if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)
            or (pa.types.is_binary(f.type) and f.name != "geometry")
        ]
        names = [str(n) for n in schema.names]
        whole = len(set(names)) != len(names) or bool({"geometry.x", "geometry.y"} & set(names))
        if whole:
            tables = iter([pq.read_table(path, read_dictionary=text_cols or None)])
            return schema, True, tables
        pf = pq.ParquetFile(path, read_dictionary=text_cols or None)
        it = pf.iter_batches(batch_size=_SCAN_ROWS, use_threads=True)
    except (OSError, pa.ArrowException) as exc:
        raise unreadable(exc) from None

    def batches() -> Iterator[pa.RecordBatch]:
        with contextlib.closing(_read_ahead(it)) as ahead:
            while True:
                try:
                    batch = next(ahead)
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as exc:
                    raise unreadable(exc) from None
                yield batch

    return schema, False, batches()


def _scan_parquet(path: Path, sec: _Secrets) -> list[str]:
    schema, whole, batches = _parquet_batches(path)
    names = [str(n) for n in schema.names]
    scan = _TableScan(names, sec, one_batch=whole)
    text: dict[str, dict[str, int]] = {}
    for batch in batches:
        cols = [(n, batch.column(i)) for i, n in enumerate(names)]
        cells = {
            n: _text_column(arr)
            for n, arr in cols
            if n != "geometry"
            and (
                pa.types.is_dictionary(arr.type)
                or pa.types.is_string(arr.type)
                or pa.types.is_large_string(arr.type)
            )
        }
        scan.add(cols, text_cells=cells)
        # the text of every string column: numbers, timestamps and subject ids
        for n, col in cells.items():
            _add_counts(text.setdefault(n, {}), _text_counts(col, sec, True))
    found: list[str] = []
    meta = schema.metadata or {}
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
        found += [f"metadata: {f}" for f in _scan_text(decoded, sec)]
    found += scan.findings()
    text_found = [f for counts in text.values() for f in _ordered_counts(counts)]
    found += [f"text: {f}" for f in _merge_counts(text_found)]
    return found


#: The order in which a text's findings are reported.
_TEXT_ORDER = ("coordinate pairs", "coordinate values", "epoch times", "timestamps", "subject ids")


def _add_counts(total: dict[str, int], more: Mapping[str, int]) -> None:
    for what, n in more.items():
        total[what] = total.get(what, 0) + n


def _ordered_counts(counts: Mapping[str, int]) -> list[str]:
    """``{"subject ids": 2}`` -> ``["2 subject ids"]``, in report order, zeros left out."""
    return [f"{counts[what]} {what}" for what in _TEXT_ORDER if counts.get(what)]


def _merge_counts(findings: list[str]) -> list[str]:
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


def _csv_batches(
    path: Path, digests: dict[Path, str] | None = None
) -> tuple[list[str], Iterator[list[_TextColumn]]] | None:
    """A CSV file's header and its rows in batches, every column as text.

    None, or a batch of None, when it is not a regular CSV (read it raw instead).
    ``digests``: where to note the file's sha256, taken from the bytes as they are
    read, when the batches are read to the end.
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
            read_options=pacsv.ReadOptions(use_threads=True, block_size=_CSV_BLOCK),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.dictionary(pa.int32(), pa.string()) for n in names},
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (OSError, pa.ArrowException, ValueError):
        if source is not None:
            source.close()
        return None
    file = source

    def blocks() -> Iterator[pa.RecordBatch]:
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return

    def batches() -> Iterator[list[_TextColumn]]:
        # the next block is parsed while this one is scanned (and stops before the file closes)
        with file, reader, contextlib.closing(_read_ahead(blocks())) as ahead:
            while True:
                try:
                    batch = next(ahead)
                except StopIteration:
                    if digests is not None and file.at_end:
                        digests[path] = file.hexdigest()
                    return
                except (OSError, pa.ArrowException, ValueError):
                    raise _NotRegular from None
                yield [_text_column(batch.column(i)) for i in range(batch.num_columns)]

    return names, batches()


class _NotRegular(Exception):
    """A CSV file turned out not to be a regular table part way through."""


#: pandas' default missing-value markers (``read_csv(keep_default_na=True)``).
_CSV_NA = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
     "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)  # fmt: skip
_CSV_NA_ARROW = pa.array(sorted(_CSV_NA), type=pa.string())


def _scan_csv(
    path: Path,
    sec: _Secrets,
    rows: dict[Path, int] | None = None,
    digests: dict[Path, str] | None = None,
) -> list[str] | None:
    """A CSV file, cell by cell: as text (pairs across the whole text) and as a table.

    Every cell's number tokens are those ``_NUMBER`` finds in the raw text (cells are
    separated by characters no token contains), so the token stream of the file is
    the header's then every row's, cell by cell. None: the file needs the raw scan.
    The file is read in batches of rows; the token stream runs on across them.
    ``rows``: where to note the file's number of data rows (when it is read to the end);
    ``digests``: its sha256, likewise.
    """
    import pyarrow.compute as pc

    if sec.spaced_ids:
        return None  # an id with separators may span cells: search the raw text
    parsed = _csv_batches(path, digests)
    if parsed is None:
        return None
    names, batches = parsed
    head = _numbers(_NUMBER.findall(",".join(names)))
    n_pairs = _pair_hits(head[:-1], head[1:], sec) if head.size > 1 else 0
    prev_val: NDArray[np.float64] = head
    prev_in: NDArray[np.bool_] = _isin(head, sec.coords)
    text: list[dict[str, int]] = [{} for _ in names]
    scan = _TableScan(names, sec)
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
            entry_in = [_isin(v, sec.coords) for v, _ in per_cell] if sec.near is None else None
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
                _add_counts(text[j], _text_counts(col, sec, False))
            # as a table (pandas' reading: default missing-value markers are empty)
            cells: dict[str, _TextColumn] = {}
            for name, col in zip(names, cols, strict=True):
                na = (
                    _np_bool(pc.is_in(col.arrow, value_set=_CSV_NA_ARROW))
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
        text_found += _ordered_counts(counts)
    found += _merge_counts(text_found)
    found += scan.findings()
    return found


def _check_no_leak(rel: _Release) -> CheckResult:
    sec, scanned = _secrets(rel)
    all_files = rel.release_files()
    # files a previous full run scanned, unchanged since (their sha256 is checked by
    # ``manifest``): not scanned again
    files = [p for p in all_files if p.relative_to(rel.rel).as_posix() not in rel.unchanged]
    leaks: list[str] = [sec.key_missing] if sec.key_missing else []
    for path in files:
        rel_name = path.relative_to(rel.rel).as_posix()
        suffix = path.suffix.lower()
        found: list[str] | None = []
        if suffix in (".parquet", ".pq"):
            found = _scan_parquet(path, sec)
        elif suffix == ".csv":
            found = _scan_csv(path, sec, rows=rel.csv_rows, digests=rel.read_digests)
            if found is None:
                found = _scan_csv_raw(path, sec)
        elif suffix in (".json", ".md", ".html", ".htm", ".txt", ".svg", ".geojson"):
            text = path.read_text(encoding="utf-8", errors="replace")
            found = _scan_text(text, sec)
        elif sec.key_forms:  # any other file: its bytes, for the mask key
            data = path.read_bytes()
            n = _key_count(data.decode("latin-1"), sec) + sum(data.count(r) for r in sec.key_raw)
            found = [f"{n} copies of the mask key"] if n else []
        if found:
            leaks.append(f"{rel_name}: " + ", ".join(dict.fromkeys(found)))
    if leaks:
        return CheckResult("no_leak", False, "; ".join(leaks))
    again = (
        f" ({len(all_files) - len(files)} unchanged since the previous run)"
        if (len(files) != len(all_files))
        else ""
    )
    return CheckResult(
        "no_leak",
        True,
        f"{len(files)} files scanned for {', '.join(scanned) or 'nothing'}{again}",
    )


def _scan_csv_raw(path: Path, sec: _Secrets) -> list[str]:
    """A CSV file as raw text, then as a table read by pandas (any CSV, slowly)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    # a CSV's single values are judged column by column (published x, y may
    # coincide with one source ordinate); pairs, ids and times in its text too
    found = _scan_text(text, sec, single_values=False)
    try:
        frame = pd.read_csv(path, keep_default_na=True, low_memory=False)
    except (ValueError, pd.errors.ParserError):
        frame = None
    if frame is not None:
        found += _scan_frame(frame, sec)
    return found


def _check_representation(rel: _Release) -> CheckResult:
    gids, gx, gy = _rep_arrays(rel)
    rows, mg = _members(rel)
    gi = _positions(gids, mg)
    rows, gi = rows[gi >= 0], gi[gi >= 0]
    xm, ym = rel.xy_m
    equal = np.zeros(rows.size, dtype=bool)
    # in the output CRS
    candidates: list[tuple[NDArray[np.float64], NDArray[np.float64]]] = []
    if rel.to_output is None:
        candidates.append((xm[rows], ym[rows]))
    else:
        ox, oy = rel.to_output(xm[rows], ym[rows])
        candidates.append((ox, oy))
    src = rel.source
    srows = rel.source_rows
    if (
        srows is not None
        and src.x is not None
        and src.y is not None
        and not (rel.to_output is None and _audit_holds(rel, src.x, src.y))
    ):
        candidates.append((src.x[srows[rows]], src.y[srows[rows]]))
    for cx, cy in candidates:
        equal |= (cx == gx[gi]) & (cy == gy[gi])
    # within the tolerance, in the working CRS
    wx, wy = (gx, gy) if rel.to_working is None else rel.to_working(gx, gy)
    if rel.tolerance_m > 0:
        dx, dy = xm[rows] - wx[gi], ym[rows] - wy[gi]
        equal |= np.sqrt(dx * dx + dy * dy) <= rel.tolerance_m
    problems: list[str] = []
    if equal.any():
        problems.append(f"{_nunique(gi[equal])} group representatives equal a member's coordinate")
    # the exact centroid of the members (groups without synthetic records)
    n_centroid = 0
    if rows.size:
        # members' mean offset from the representative (exact mean: offset 0)
        cnt = np.bincount(gi, minlength=gids.size)
        mx = np.bincount(gi, weights=xm[rows] - wx[gi], minlength=gids.size)
        my = np.bincount(gi, weights=ym[rows] - wy[gi], minlength=gids.size)
        has = cnt > 0
        mx = np.where(has, mx / np.maximum(cnt, 1), np.nan)
        my = np.where(has, my / np.maximum(cnt, 1), np.nan)
        scale = np.maximum(1.0, np.maximum(np.abs(wx + mx), np.abs(wy + my)))
        at_mean = has & (np.abs(mx) <= 1e-9 * scale) & (np.abs(my) <= 1e-9 * scale)
        syn_g = _positions(gids, rel.syn_gid[rel.syn_gid >= 0])
        at_mean[syn_g[syn_g >= 0]] = False
        n_centroid = int(np.count_nonzero(at_mean))
    if n_centroid:
        problems.append(f"{n_centroid} representatives are the exact centroid of their members")
    if problems:
        return CheckResult("representation", False, "; ".join(problems))
    return CheckResult(
        "representation",
        True,
        f"{gids.size} representatives differ from every member's coordinate and centroid",
    )


# --------------------------------------------------------------------------------------
# The records files, row by row (``counts`` and ``k_subjects`` report what this finds)
# --------------------------------------------------------------------------------------

#: Columns of the records files that the format defines; any other is a kept column.
RECORD_FORMAT_COLUMNS = ("group_id", "class_id", "level", "unit", "x", "y", "time_bin", "geometry")
_U64 = np.uint64
_MIX_A = _U64(0xBF58476D1CE4E5B9)
_MIX_B = _U64(0x94D049BB133111EB)
_MEMBER_ROWS = 1 << 20


def _mix(v: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser, element-wise (uint64 arithmetic wraps)."""
    v = v ^ (v >> _U64(30))
    v = v * _MIX_A
    v ^= v >> _U64(27)
    v = v * _MIX_B
    v ^= v >> _U64(31)
    return v


class _RowHasher:
    """Keyed 64-bit hashes of values, drawn afresh for every verification, so a release
    cannot be made to collide with them.

    Equal values of one Arrow type hash equally whatever their encoding (plain or
    dictionary text, ``string`` or ``large_string``); a float's null and NaN hash alike
    (a CSV cannot tell them apart).
    """

    def __init__(self) -> None:
        import secrets

        self.key = secrets.token_hex(8)  # pandas' SipHash key: 16 characters
        self.salt = [_U64(secrets.randbits(64)) for _ in range(5)]

    def values(self, arr: pa.Array | pa.ChunkedArray) -> NDArray[np.uint64]:
        """One hash per value of ``arr``."""
        import pyarrow.compute as pc

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        t = arr.type
        null = self.salt[0]
        if pa.types.is_dictionary(t):
            look = np.append(self.values(arr.dictionary), null)
            idx = _indices(arr)
            return look[np.where(idx < 0, look.size - 1, idx)]
        if pa.types.is_floating(t):
            f = np.array(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), np.float64)
            f[np.isnan(f)] = np.nan  # one NaN, and a null is a NaN
            return _mix(f.view(np.uint64) ^ self.salt[1])
        if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
            wide = pa.uint64() if pa.types.is_uint64(t) else pa.int64()
            ints = pc.cast(arr, wide).fill_null(0)
            v = np.asarray(ints.to_numpy(zero_copy_only=False)).view(np.uint64)
            h = _mix(v ^ self.salt[2])
            if arr.null_count:
                h[~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)] = null
            return h
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            try:
                arr = pc.cast(arr, pa.large_string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                text = pd.Series(arr.to_pylist(), dtype=object).map(repr)
                arr = pa.array(text.to_numpy(dtype=object), type=pa.large_string())
        if len(arr) == 0:
            return np.zeros(0, dtype=np.uint64)
        enc = arr.dictionary_encode()
        words = np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
        look = np.asarray(pd.util.hash_array(words, hash_key=self.key, categorize=False))
        look = np.append(look.astype(np.uint64) ^ self.salt[3], null)
        idx = _indices(enc)
        return look[np.where(idx < 0, look.size - 1, idx)]

    def rows(self, columns: Sequence[NDArray[np.uint64]], n: int) -> NDArray[np.uint64]:
        """One hash per row of the columns' value hashes, in column order."""
        h = np.full(n, self.salt[4], dtype=np.uint64)
        for c in columns:
            h = _mix(h ^ c)
        return h

    def at(self, values: NDArray[np.uint64], start: int) -> NDArray[np.uint64]:
        """The hashes tied to their row numbers ``start, start + 1, ...``."""
        pos = np.arange(start, start + values.size, dtype=np.uint64)
        return _mix(values ^ _mix(pos ^ self.salt[1]))

    def keyed(self, values: NDArray[np.uint64], keys: NDArray[np.int64]) -> NDArray[np.uint64]:
        """The hashes tied to their group or class keys."""
        return _mix(values ^ _mix(keys.astype(np.uint64) ^ self.salt[2]))


def _sum_u64(values: NDArray[np.uint64]) -> int:
    """The sum of ``values`` modulo 2**64."""
    return int(np.sum(values, dtype=np.uint64)) if values.size else 0


def _sums_per(keys: NDArray[np.int64], values: NDArray[np.uint64], size: int) -> NDArray[np.uint64]:
    """Per key in ``0..size-1``, the sum of ``values`` modulo 2**64 (keys < 0 left out): an
    order-free hash of each key's multiset of values (16-bit limbs, summed exactly in
    float64 by ``np.bincount``)."""
    ok = keys >= 0
    k, v = (keys, values) if ok.all() else (keys[ok], values[ok])
    out = np.zeros(size, dtype=np.uint64)
    for shift in (0, 16, 32, 48):
        limb = ((v >> _U64(shift)) & _U64(0xFFFF)).astype(np.float64)
        out += np.bincount(k, weights=limb, minlength=size).astype(np.uint64) << _U64(shift)
    return out


def _same_text(a: pa.Array, b: pa.Array) -> NDArray[np.bool_]:
    """Row by row: both null, or the same text."""
    import pyarrow.compute as pc

    a = pc.cast(a, pa.large_string())
    b = pc.cast(b, pa.large_string())
    same = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(same, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def _float_column(col: pa.Array) -> NDArray[np.float64] | None:
    """A numeric column as float64, NaN where null (None: not numbers)."""
    import pyarrow.compute as pc

    try:
        return np.array(pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False), np.float64)
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
        cells = values.astype(object).where(~values.isin(_CSV_NA), None)
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
class _RecordRows:
    """What one pass over the records files found (:func:`_record_rows`)."""

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


def _record_paths(rel: _Release) -> list[Path]:
    """``records.parquet``, or the parts of a partitioned release."""
    single = rel.rel / "records.parquet"
    if single.is_file() or not (rel.rel / "records").is_dir():
        return [single]
    return sorted((rel.rel / "records").glob("part-*.parquet"))


def _audit_time_bins(rel: _Release) -> tuple[NDArray[np.int64], NDArray[np.object_]] | None:
    """(code per audit row, label per code, sorted) when the audit has time bins."""
    if "_audit_time_bins" not in rel.__dict__:
        tb = rel.time_bins
        rel.__dict__["_audit_time_bins"] = (
            None if tb is None else _factorize_arrow(tb.cast(pa.string()).fill_null(""))
        )
    found: tuple[NDArray[np.int64], NDArray[np.object_]] | None = rel.__dict__["_audit_time_bins"]
    return found


def _published_ids(rel: _Release) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(ids of ``groups.parquet``, ids of ``classes.parquet``): a group's key is its
    position, a class's the number of groups plus its position."""
    return (
        _ids(rel.groups["group_id"], "groups group_id"),
        _ids(rel.classes["class_id"], "classes class_id"),
    )


def _audit_keys(rel: _Release) -> NDArray[np.int64]:
    """Each audit row's key (numbered as :func:`_published_ids` says; -1: in no group
    or class, or in one that is not published)."""
    if "_audit_keys" not in rel.__dict__:
        gids, cids = _published_ids(rel)
        key = np.where(rel.gid >= 0, _positions(gids, rel.gid), -1)
        cpos = _positions(cids, rel.cid)
        at_class = (rel.gid < 0) & (rel.cid >= 0) & (cpos >= 0)
        key[at_class] = gids.size + cpos[at_class]
        rel.__dict__["_audit_keys"] = key
    keys: NDArray[np.int64] = rel.__dict__["_audit_keys"]
    return keys


def _record_rows(rel: _Release) -> _RecordRows:
    """The records files read once, row by row, against the release's tables, the audit
    and the source (see :class:`_RecordsPass`); cached on ``rel``."""
    if "_record_rows" not in rel.__dict__:
        out = _RecordRows()
        try:
            _RecordsPass(rel, out).run()
        except _Unreadable as exc:
            out.unreadable = str(exc)
        rel.__dict__["_record_rows"] = out
    found: _RecordRows = rel.__dict__["_record_rows"]
    return found


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
    tied to the row number. Files are read in batches; nothing per row is kept beyond
    a batch but the rows of groups and classes that hold synthetic records.
    """

    def __init__(self, rel: _Release, out: _RecordRows) -> None:
        self.rel = rel
        self.out = out
        self.paths = _record_paths(rel)
        if not self.paths[0].is_file():
            raise _Unreadable("release/records.parquet is missing")
        self.gids, self.cids = _published_ids(rel)
        self.n_groups = self.gids.size
        self.n_keys = self.gids.size + self.cids.size
        _, self.gx, self.gy = _rep_arrays(rel)
        classes = rel.classes
        n_c = self.cids.size
        lv = classes["level"].astype(str).tolist() if "level" in classes else [None] * n_c
        un = classes["unit"].astype(str).tolist() if "unit" in classes else [None] * n_c
        self.level_of = pa.array(["group", *lv], type=pa.large_string())
        self.unit_of = pa.array(un, type=pa.large_string())
        try:
            self.schema = pq.read_schema(self.paths[0])
        except (OSError, pa.ArrowException) as exc:
            raise _Unreadable(
                f"{self.paths[0].name} is unreadable ({type(exc).__name__})"
            ) from None
        self.names = [str(n) for n in self.schema.names]
        lacking = [c for c in RECORD_FORMAT_COLUMNS[:6] if c not in self.names]
        if lacking:
            raise _Unreadable(f"records.parquet lacks columns {lacking}")
        self.hasher = _RowHasher()
        self.bins = _audit_time_bins(rel)
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
        sg = _positions(self.gids, rel.syn_gid[rel.syn_gid >= 0])
        sc = _positions(self.cids, rel.syn_cid[rel.syn_cid >= 0])
        self.synthetic[sg[sg >= 0]] = True
        self.synthetic[self.n_groups + sc[sc >= 0]] = True
        self.syn_rows: list[NDArray[np.uint64]] = []
        self.column_sums = dict.fromkeys((n for n in self.names if n != "geometry"), 0)
        self.per_group: list[pd.Series] = []
        self.per_class: list[pd.Series] = []
        self.cells: list[tuple[NDArray[np.int64], NDArray[np.int64]]] = []
        self.bad = dict.fromkeys(("both", "level", "unit", "xy", "class_xy", "geometry"), 0)

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
            try:
                pf = pq.ParquetFile(path)
                if [str(n) for n in pf.schema_arrow.names] != self.names:
                    self.out.problems.append(f"{path.name} has other columns than the first part")
                    continue
                batches = pf.iter_batches(batch_size=_SCAN_ROWS, use_threads=True)
                with contextlib.closing(_read_ahead(batches)) as ahead:
                    for batch in ahead:
                        self._batch(batch, start)
                        start += batch.num_rows
            except (OSError, pa.ArrowException) as exc:
                raise _Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
        out = self.out
        out.rows = start
        out.per_group = _summed(self.per_group)
        out.per_class = _summed(self.per_class)
        if self.cells:
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
            "geometry": "rows publish a geometry other than their group's representative "
            "point (null for a class row)",
        }
        for what, n in self.bad.items():
            if n:
                out.problems.append(f"{n} records.parquet {said[what]}")
        if out.orphans - self.bad["both"] > 0:
            out.problems.append(
                f"{out.orphans - self.bad['both']} records.parquet rows belong to no "
                "published group or class"
            )
        if self.compared:
            self._members()
        if self.paths[0].name == "records.parquet":
            self._csv(start)

    def _batch(self, batch: pa.RecordBatch, start: int) -> None:
        import pyarrow.compute as pc

        out = self.out
        n = batch.num_rows
        col = dict(zip(self.names, batch.columns, strict=True))
        g = _arrow_ids(col["group_id"], "records group_id")
        c = _arrow_ids(col["class_id"], "records class_id")
        self.per_group.append(_value_counts(g[g >= 0]))
        self.per_class.append(_value_counts(c[c >= 0]))
        both = (g >= 0) & (c >= 0)
        key = np.where(g >= 0, _positions(self.gids, g), -1)
        at_c = (g < 0) & (c >= 0)
        cpos = _positions(self.cids, c)
        key[at_c] = np.where(cpos[at_c] >= 0, self.n_groups + cpos[at_c], -1)
        key[both] = -1
        self.bad["both"] += int(np.count_nonzero(both))
        known = key >= 0
        out.orphans += int(np.count_nonzero(~known))
        is_g = known & (key < self.n_groups)
        is_c = known & ~is_g
        # level and unit
        at = np.where(is_g, 0, key - self.n_groups + 1)
        want = self.level_of.take(pa.array(np.where(known, at, 0), mask=~known))
        self.bad["level"] += int(np.count_nonzero(known & ~_same_text(col["level"], want)))
        unit = self.unit_of.take(pa.array(np.where(is_c, key - self.n_groups, 0), mask=~is_c))
        self.bad["unit"] += int(np.count_nonzero(known & ~_same_text(col["unit"], unit)))
        # the representative, as x, y and as the geometry
        gi = np.where(is_g, key, 0)
        rx, ry = (self.gx[gi], self.gy[gi]) if self.n_groups else (np.zeros(n), np.zeros(n))
        xs, ys = _float_column(col["x"]), _float_column(col["y"])
        if xs is None or ys is None:
            self.bad["xy"] += int(np.count_nonzero(is_g))
        else:
            self.bad["xy"] += int(np.count_nonzero(is_g & ~((xs == rx) & (ys == ry))))
            self.bad["class_xy"] += int(np.count_nonzero(is_c & ~(np.isnan(xs) & np.isnan(ys))))
        if "geometry" in col:
            wx, wy = _wkb_xy(col["geometry"])
            if wx.size != n:
                self.bad["geometry"] += int(np.count_nonzero(known))
            else:
                ok = np.where(is_g, (wx == rx) & (wy == ry), np.isnan(wx) & np.isnan(wy))
                self.bad["geometry"] += int(np.count_nonzero(known & ~ok))
        # every column, tied to the row numbers (records.csv must hold the same)
        hashes: dict[str, NDArray[np.uint64]] = {}
        for name in self.column_sums:
            h = hashes[name] = self.hasher.values(col[name])
            self.column_sums[name] += _sum_u64(self.hasher.at(h, start))
        # per group and class: the multisets of the compared columns and tuples
        if self.compared:
            parts = [hashes[name] for name in self.compared]
            whole = self.hasher.rows(parts, n)
            for j, h in enumerate([*parts, whole]):
                self.sums[j] += _sums_per(key, h, self.n_keys)
            syn = known & self.synthetic[np.where(known, key, 0)]
            if syn.any():
                self.syn_rows.append(self.hasher.keyed(whole[syn], key[syn]))
        # the (group or class, time bin) cells
        code = np.zeros(n, dtype=np.int64)
        if self.with_bins:
            tb = pc.index_in(pc.cast(col["time_bin"], pa.large_string()), value_set=self.bin_names)
            code = np.asarray(tb.fill_null(out.stride - 1).to_numpy(zero_copy_only=False), np.int64)
        cell = key[known] * np.int64(out.stride) + code[known]
        if cell.size:
            uniq, count = np.unique(cell, return_counts=True)
            self.cells.append((uniq, count.astype(np.int64)))

    def _members(self) -> None:
        """The members' tuples, from the audit and the source, against the published ones."""
        rel, out, hasher = self.rel, self.out, self.hasher
        keys = _audit_keys(rel)
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
                sums[j] += _sums_per(kk, h, self.n_keys)
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
            pv, p_count = _runs(published)
            mv, m_count = _runs(members)
            short = np.ones(mv.size, dtype=bool)
            if mv.size and pv.size:
                at = np.minimum(np.searchsorted(pv, mv), pv.size - 1)
                short = (pv[at] != mv) | (p_count[at] < m_count)
            n_bad = int(np.count_nonzero(short)) + int(np.count_nonzero(~_in_sorted(mv, pv)))
            if n_bad:
                out.problems.append(
                    f"{n_bad} (time bin, kept values) tuples of groups or classes with "
                    "synthetic records are not their members' (a stand-in copies a member's)"
                )

    def _csv(self, n_rows: int) -> None:
        """``records.csv`` against ``records.parquet``, column by column and row by row."""
        import pyarrow.csv as pacsv

        out = self.out
        path = self.rel.rel / "records.csv"
        if not path.is_file():
            out.problems.append("release/records.csv is missing")
            return
        want = [n for n in self.names if n != "geometry"]
        types = {n: self.schema.field(n).type for n in want}
        as_text = {n: pa.large_string() for n, t in types.items() if pa.types.is_integer(t)}
        sums = dict.fromkeys(want, 0)
        start = 0
        try:
            reader = pacsv.open_csv(
                path,
                read_options=pacsv.ReadOptions(use_threads=True, block_size=_CSV_BLOCK),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types={**types, **as_text},
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                ),
            )
            with reader:
                header = [str(n) for n in reader.schema.names]
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
                for batch in reader:
                    for name, c in zip(header, batch.columns, strict=True):
                        c = _csv_column(c, types[name]) if name in as_text else c
                        h = self.hasher.values(c)
                        sums[name] += _sum_u64(self.hasher.at(h, start))
                    start += batch.num_rows
        except (OSError, pa.ArrowException, ValueError) as exc:
            out.problems.append(
                f"records.csv does not read with records.parquet's column types "
                f"({type(exc).__name__})"
            )
            return
        self.rel.csv_rows.setdefault(path, start)
        if start != n_rows:
            out.problems.append(f"records.csv has {start} rows, records.parquet {n_rows}")
            return
        mask = (1 << 64) - 1
        differ = [n for n in want if (sums[n] - self.column_sums[n]) & mask]
        if differ:
            out.problems.append(
                f"records.csv differs from records.parquet in column(s) {', '.join(differ)}"
            )


def _runs(values: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    """(distinct values, how often each occurs) of a sorted array."""
    if values.size == 0:
        return values, np.zeros(0, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[first], np.diff(np.r_[first, values.size]).astype(np.int64)


def _summed(parts: list[pd.Series]) -> pd.Series:
    """The per-id counts of the batches, added up (int64 index, sorted)."""
    if not parts:
        return pd.Series(np.zeros(0, dtype=np.int64), index=pd.Index([], dtype=np.int64))
    both = pd.concat(parts)
    return both.groupby(level=0).sum().astype(np.int64).sort_index()


def _published_cell_problems(rel: _Release, subj: NDArray[np.int64]) -> list[str]:
    """``k_subjects`` over the published records: each (group or class, time bin) cell of
    the records files holds >= k rows, and the audit's records of that group or class
    and time bin hold >= k distinct subjects."""
    k = rel.k
    rr = _record_rows(rel)
    if rr.unreadable is not None:
        return [f"the published records cannot be read ({rr.unreadable})"]
    problems: list[str] = []
    if rr.orphans:
        problems.append(f"{rr.orphans} published records are in no published group or class")
    if rr.cells.size == 0:
        return problems
    keys = _audit_keys(rel)
    bins = _audit_time_bins(rel)
    codes = bins[0] if bins is not None and rr.stride > 1 else np.zeros(keys.size, np.int64)
    sel = keys >= 0
    cell_a = keys[sel] * np.int64(rr.stride) + codes[sel]
    code, m = _dense(cell_a)
    full = np.full(keys.size, -1, dtype=np.int64)
    full[sel] = code
    distinct = _distinct_counts(full, subj, m, rel.subject_codes)
    table = np.zeros(m, dtype=np.int64)
    table[code] = cell_a
    at = _positions(table, rr.cells)
    held = np.where(at >= 0, distinct[np.maximum(at, 0)], 0)
    what = "(group or class, time bin) cells" if rr.stride > 1 else "groups and classes"
    few = held < k
    if few.any():
        problems.append(
            f"{int(np.count_nonzero(few))} of {rr.cells.size} {what} of the published records "
            f"have < k={k} distinct subjects among the audit's records of that cell "
            f"(smallest {int(held[few].min())})"
        )
    short = rr.cell_rows < k
    if short.any():
        problems.append(
            f"{int(np.count_nonzero(short))} of {rr.cells.size} {what} of the published "
            f"records hold < k={k} rows (smallest {int(rr.cell_rows[short].min())})"
        )
    return problems


def _check_counts(rel: _Release) -> CheckResult:
    k = rel.k
    problems: list[str] = []
    n = rel.n_audit
    unknown = ~rel.is_disposal(*_DISPOSALS)
    if unknown.any():
        problems.append(f"{int(unknown.sum())} audit rows have an unknown disposal")
    in_group = rel.is_disposal("grouped", "merged")
    if ((rel.gid >= 0) != in_group).any():
        problems.append(
            f"{int(((rel.gid >= 0) != in_group).sum())} audit rows: group id and disposal disagree"
        )
    gen = rel.is_disposal("generalised")
    if ((rel.cid >= 0) != gen).any():
        problems.append(
            f"{int(((rel.cid >= 0) != gen).sum())} audit rows: class id and disposal disagree"
        )
    # source agreement
    src = rel.source
    if src.n_rows is not None:
        if rel.source_rows is None:
            problems.append(
                f"audit has {n} rows with source_row not a permutation of the "
                f"{src.n_rows} source records"
            )
        else:
            audit_subj = rel.audit_subjects
            if src.subjects is not None:
                ca, na = _dense(audit_subj)
                cs, ns = rel.subject_codes
                # one to one: each audit code meets one source subject, and as many of them
                one = np.zeros(na, dtype=np.int64)
                one[ca] = cs
                if not (na == ns and np.array_equal(one[ca], cs)):
                    problems.append("audit subject codes disagree with the source's subjects")
            merged = rel.manifest.get("subject_ids_merged")
            if (
                merged is not None
                and src.subject_ids_merged is not None
                and merged != src.subject_ids_merged
            ):
                problems.append(
                    f"manifest subject_ids_merged is {merged!r}; the source's ids merge "
                    f"{src.subject_ids_merged} (ids differing only by case, spacing or "
                    "Unicode form are one subject)"
                )
            if src.unit_codes is not None and src.unit_names is not None:
                ucode, unames = rel.unit_codes
                as_audit = _text_codes(src.unit_names, unames)
                src_code = as_audit[src.unit_codes[rel.source_rows]]
                diff = int(np.count_nonzero(src_code != ucode))
                if diff:
                    problems.append(f"{diff} audit rows carry a unit other than the source's")
    # groups and classes
    expected_rows: dict[str, pd.Series] = {}  # records per id, audit and synthetic
    for what, ids, syn_ids, table, col in (
        ("group", rel.gid, rel.syn_gid, rel.groups, "group_id"),
        ("class", rel.cid, rel.syn_cid, rel.classes, "class_id"),
    ):
        expected = expected_rows[what] = _value_counts(
            np.concatenate([ids[ids >= 0], syn_ids[syn_ids >= 0]])
        )
        pub_ids = _ids(table[col], f"{what} id")
        if _nunique(pub_ids) != pub_ids.size:
            problems.append(f"{what} ids repeat in the release")
        published = pd.Series(
            pd.to_numeric(table["n_records"]).to_numpy(dtype=np.int64), index=pub_ids
        )
        # the distinct ids of either side missing from the other (sorted, not hashed)
        exp_ids = expected.index.to_numpy(dtype=np.int64)
        pub_set = _sorted_distinct(pub_ids)
        missing = int(np.count_nonzero(~_in_sorted(pub_set, exp_ids)))
        extra = int(np.count_nonzero(~_in_sorted(exp_ids, pub_set)))
        if missing:
            problems.append(f"{missing} audit {what}s are not published")
        if extra:
            problems.append(f"{extra} published {what}s have no audit records")
        common = expected.index.intersection(published.index)
        wrong = int((expected[common].to_numpy() != published[common].to_numpy()).sum())
        if wrong:
            problems.append(f"{wrong} {what}s publish a wrong n_records")
    # records, row by row
    n_syn = len(rel.synthetic)
    n_released = n - int(rel.is_disposal("suppressed").sum())
    rows = _record_rows(rel)
    if rows.unreadable is not None:
        problems.append(rows.unreadable)
    else:
        if rows.rows != n_released + n_syn:
            problems.append(
                f"records.parquet has {rows.rows} rows, the audit releases {n_released + n_syn}"
            )
        for what, got in (("group", rows.per_group), ("class", rows.per_class)):
            if got is not None and not got.equals(expected_rows[what]):
                problems.append(f"records.parquet rows per {what} differ from the audit")
        problems += rows.problems
    # units
    problems += _unit_count_problems(rel)
    problems += _input_filter_problems(rel)
    # manifest counts
    counts = rel.manifest.get("counts")
    if not isinstance(counts, Mapping):
        problems.append("manifest counts missing")
    else:
        s_subj, n_subj = _suppressed_subjects(rel)
        for name in ("grouped", "merged", "generalised"):
            if counts.get(name) != int(rel.is_disposal(name).sum()):
                problems.append(f"manifest counts.{name} differs from the audit")
        sup = counts.get("suppressed")
        n_sup = int(rel.is_disposal("suppressed").sum())
        if sup == LESS_THAN_K:
            if not 0 < s_subj < k:
                problems.append("manifest counts.suppressed reads '<k' but is 0 or >= k subjects")
        elif sup == WITHHELD:
            pass
        elif sup != n_sup:
            what = " (it is the subject count; counts are records)" if sup == s_subj else ""
            problems.append(f"manifest counts.suppressed differs from the audit{what}")
        syn_m = rel.manifest.get("synthetic")
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
        if "pooled" in syn_m:
            classes = rel.classes
            unit_ids = (
                _ids(classes.loc[classes["level"].astype(str) == "unit", "class_id"], "class id")
                if len(classes) and "level" in classes
                else np.zeros(0, dtype=np.int64)
            )
            syn_c = rel.syn_cid
            n_up = int(((syn_c >= 0) & ~np.isin(syn_c, unit_ids)).sum())
            if syn_m.get("pooled") != n_up:
                problems.append("manifest synthetic.pooled differs from the audit")
        share = rel.manifest.get("suppressed_share")
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
    if problems:
        return CheckResult("counts", False, "; ".join(problems))
    compared = ", ".join(rows.compared)
    by_row = (
        f"; records.parquet and records.csv row by row ({compared} per group and class)"
        if compared
        else "; records.parquet and records.csv row by row"
    )
    return CheckResult(
        "counts",
        True,
        f"{n} audit records, {len(rel.groups)} groups, {len(rel.classes)} classes, "
        f"{len(rel.units_table)} units agree with the release{by_row}",
    )


def _value_counts(ids: NDArray[np.int64]) -> pd.Series:
    """Rows per id (int64 index, sorted): by counting when the ids are dense, else by sorting."""
    ids = ids.astype(np.int64, copy=False)
    lo = int(ids.min()) if ids.size else 0
    if ids.size and int(ids.max()) - lo <= 4 * ids.size + 1024:
        tally = np.bincount(ids - lo)
        uniq = np.flatnonzero(tally) + lo
        counts = tally[uniq - lo]
    else:
        uniq, counts = np.unique(ids, return_counts=True)
    return pd.Series(counts.astype(np.int64), index=pd.Index(uniq.astype(np.int64)))


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


def _input_filter_problems(rel: _Release) -> list[str]:
    """Units left out, records clipped and units merged: audit, manifest and source agree.

    The manifest publishes what the audit records (counts of 1..k-1 as ``<k``); the
    read options name the same units; a merged unit is named by its source units joined
    with ``+``; and, where the source file has its unit column, the records the verifier
    itself dropped match the audit's counts, every source unit with fewer than N
    distinct subjects was merged (or is listed as having no neighbour), and every unit
    after merging holds N (or is listed).
    """
    audit = _audit_filter(rel.audit)
    opts = _read_options(rel.audit)
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


def _unit_count_problems(rel: _Release) -> list[str]:
    k = rel.k
    problems: list[str] = []
    rows = _unit_rows(rel)
    ucode, unames = rel.unit_codes
    nu = unames.size
    subj = rel.subjects
    classes = rel.classes
    unit_class: dict[int, str] = {}
    if len(classes) and "level" in classes and "unit" in classes:
        for cid, lvl, u in zip(
            _ids(classes["class_id"], "class id").tolist(),
            classes["level"].astype(str),
            classes["unit"].astype(str),
            strict=True,
        ):
            if lvl == "unit":
                unit_class[cid] = u
    at_group = rel.gid >= 0
    # records per unit code (the last slot: a unit id the audit does not know)
    released = np.zeros(nu + 1, dtype=np.int64)

    def add_codes(codes: NDArray[np.int64]) -> None:
        released[:] += np.bincount(np.where(codes >= 0, codes, nu), minlength=nu + 1)

    syn = rel.synthetic
    syn_code = (
        _text_codes(syn["unit"].astype(str), unames)
        if len(syn) and "unit" in syn
        else np.full(len(syn), -1, dtype=np.int64)
    )
    syn_known = not len(syn) or "unit" in syn
    if "unit" in rel.groups.columns:
        # every group counts whole in the unit holding most of its members (ties: the
        # first unit id in sort order; unit codes are numbered in that order)
        gcode, m = _dense(np.concatenate([rel.gid[at_group], rel.syn_gid[rel.syn_gid >= 0]]))
        n_members = int(np.count_nonzero(at_group))
        g_members = gcode[:n_members]
        key = np.sort(g_members * np.int64(nu) + ucode[at_group])
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        tally = np.diff(np.append(starts, key.size))
        pair = key[starts]
        pg, pu = pair // nu, pair % nu
        major = np.full(m, -1, dtype=np.int64)
        if pg.size:
            # the pairs are in (group, unit) order: per group, its first pair of the most
            # members
            g_first = np.flatnonzero(np.concatenate(([True], pg[1:] != pg[:-1])))
            most = np.maximum.reduceat(tally, g_first)
            top = np.flatnonzero(tally == np.repeat(most, np.diff(np.append(g_first, pg.size))))
            lead = top[np.concatenate(([True], pg[top][1:] != pg[top][:-1]))]
            major[pg[lead]] = pu[lead]
        gid_of = np.zeros(m, dtype=np.int64)
        gid_of[gcode] = np.concatenate([rel.gid[at_group], rel.syn_gid[rel.syn_gid >= 0]])
        pub_g = _ids(rel.groups["group_id"], "groups group_id")
        pub_u = _text_codes(rel.groups["unit"].astype(str), unames)
        has_members = np.zeros(m, dtype=bool)
        has_members[g_members] = True
        at = _positions(pub_g, gid_of[has_members])
        named = at >= 0
        wrong_unit = int(np.count_nonzero(pub_u[at[named]] != major[has_members][named]))
        if wrong_unit:
            problems.append(f"{wrong_unit} groups name a unit other than their members' majority")
        add_codes(major[g_members])
        add_codes(major[gcode[n_members:]])
    else:
        add_codes(np.where(at_group, ucode, -1)[at_group])
        add_codes(syn_code[rel.syn_gid >= 0])
    # records of the unit-level classes, in the class's unit
    cls_known = np.array(list(unit_class), dtype=np.int64)
    cls_unit_code = _text_codes(list(unit_class.values()), unames)
    # unknown: dropped (the last entry: no unit-level class)
    cls_unit_code = np.append(np.where(cls_unit_code >= 0, cls_unit_code, nu), nu)
    at_c = np.full(rel.cid.size, -1, dtype=np.int64)
    in_class = np.flatnonzero(rel.cid >= 0)
    if cls_known.size:
        at_c[in_class] = _positions(cls_known, rel.cid[in_class])
    add_codes(cls_unit_code[at_c[at_c >= 0]])
    syn_at = _positions(cls_known, rel.syn_cid) if cls_known.size else np.full(rel.syn_cid.size, -1)
    syn_at = np.where(rel.syn_cid >= 0, syn_at, -1)
    add_codes(cls_unit_code[syn_at[syn_at >= 0]])
    up = (rel.cid >= 0) & (at_c < 0)
    up_subj_c = _distinct_counts(np.where(up, ucode, -1), subj, nu, rel.subject_codes)
    sup = rel.is_disposal("suppressed")
    sup_subj_c = _distinct_counts(np.where(sup, ucode, -1), subj, nu, rel.subject_codes)
    totals_c = np.bincount(ucode, minlength=nu)
    syn_per_c = np.bincount(np.where(syn_code >= 0, syn_code, nu), minlength=nu + 1)
    names_l = [str(u) for u in unames.tolist()]
    expected_released = {names_l[i]: int(released[i]) for i in range(nu)}
    up_subj = {names_l[i]: int(up_subj_c[i]) for i in range(nu)}
    sup_subj = {names_l[i]: int(sup_subj_c[i]) for i in range(nu)}
    totals = {names_l[i]: int(totals_c[i]) for i in range(nu) if totals_c[i]}
    syn_per_unit = {names_l[i]: int(syn_per_c[i]) for i in range(nu)} if syn_known else {}
    published = {str(r["unit"]): r for r in rows}
    audit_units = set(totals)
    if len(published) != len(rows):
        problems.append("units.csv repeats a unit")
    missing = audit_units - set(published)
    extra = set(published) - audit_units
    if missing:
        problems.append(f"{len(missing)} units of the audit are absent from units.csv")
    if extra:
        problems.append(f"{len(extra)} units in units.csv have no audit records")
    bad_rel = bad_sup = bad_tot = bad_up = bad_syn = 0
    syn_m = rel.manifest.get("synthetic")
    per_unit_m = syn_m.get("per_unit") if isinstance(syn_m, Mapping) else None
    if "synthetic" in rel.units_table.columns and isinstance(per_unit_m, Mapping):
        shown = {str(r["unit"]): r["synthetic"] for r in rows if r["synthetic"] != 0}
        if shown != {str(u): _cell_value(v) for u, v in per_unit_m.items() if v != 0}:
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
        if r["released"] != expected_released.get(u, 0):
            bad_rel += 1
        bad_sup += wrong(r["suppressed"], int(sup_subj.get(u, 0)))
        bad_up += wrong(r["generalised_up"], int(up_subj.get(u, 0)))
        bad_syn += wrong(r["synthetic"], int(syn_per_unit.get(u, 0)))
        t_pub = r["source_total"]
        if isinstance(t_pub, int) and t_pub != int(totals[u]):
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


def _check_fixed_point(rel: _Release) -> CheckResult:
    passes = rel.manifest.get("passes")
    if not isinstance(passes, list) or not passes:
        return CheckResult("fixed_point", False, "manifest passes is missing or empty")
    if len(passes) > MAX_PASSES:
        return CheckResult(
            "fixed_point", False, f"{len(passes)} passes exceed the limit of {MAX_PASSES}"
        )
    last = passes[-1]
    changed = last.get("changed") if isinstance(last, Mapping) else None
    if isinstance(changed, bool) or not isinstance(changed, int):
        return CheckResult("fixed_point", False, "the last pass has no integer 'changed'")
    if changed != 0:
        return CheckResult(
            "fixed_point", False, f"the last of {len(passes)} passes changed {changed} labels"
        )
    audit_passes = rel.audit.get("passes")
    if audit_passes is not None and audit_passes != passes:
        return CheckResult("fixed_point", False, "manifest passes differ from the audit's")
    return CheckResult(
        "fixed_point",
        True,
        f"fixed point after {len(passes)} passes (last changed 0); group positions hold >= k",
    )


class _TableParser(html.parser.HTMLParser):
    """Collects HTML tables as lists of rows of (text, is_header)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[tuple[str, bool]]]] = []
        self._stack: list[list[list[tuple[str, bool]]]] = []
        self._cell: list[str] | None = None
        self._header = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._stack.append([])
        elif tag == "tr" and self._stack:
            self._stack[-1].append([])
        elif tag in ("td", "th") and self._stack:
            if not self._stack[-1]:
                self._stack[-1].append([])
            self._cell = []
            self._header = tag == "th"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._stack:
            self._stack[-1][-1].append(("".join(self._cell).strip(), self._header))
            self._cell = None
        elif tag == "table" and self._stack:
            self.tables.append(self._stack.pop())

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _small_int(cell: str, k: int) -> bool:
    text = re.sub(r"[*_`\s]", "", cell).replace(",", "")
    return text.isdigit() and 1 <= int(text) <= k - 1


def _table_problems(rows: list[list[str]], header: list[str], k: int) -> int:
    cols = [i for i, h in enumerate(header) if _HIDDEN_HEADER.search(h)]
    return sum(1 for r in rows for i in cols if i < len(r) and _small_int(r[i], k))


def _markdown_tables(text: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        s = line.strip()
        if s.startswith("|"):
            block.append([c.strip() for c in s.strip("|").split("|")])
            continue
        if block:
            header, body = block[0], block[1:]
            if body and all(re.fullmatch(r":?-{2,}:?", c or "--") for c in body[0]):
                body = body[1:]
            yield header, body
            block = []


def _phrase_problems(text: str, k: int) -> int:
    n = 0
    for pat in _SUPPRESSED_PHRASES:
        for m in pat.finditer(text):
            if _small_int(m.group(1), k):
                n += 1
    return n


def _check_report_safety(rel: _Release) -> CheckResult:
    k = rel.k
    problems: list[str] = []
    scanned: list[str] = []
    notes = rel.rel / "RELEASE_NOTES.md"
    if notes.is_file():
        text = notes.read_text(encoding="utf-8", errors="replace")
        scanned.append(notes.name)
        n = sum(_table_problems(body, header, k) for header, body in _markdown_tables(text))
        n += _phrase_problems(text, k)
        if n:
            problems.append(f"RELEASE_NOTES.md: {n} suppressed figures of 1..k-1")
    else:
        problems.append("release/RELEASE_NOTES.md is missing")
    for page in sorted(rel.rel.glob("*.htm*")):
        text = page.read_text(encoding="utf-8", errors="replace")
        scanned.append(page.name)
        parser = _TableParser()
        parser.feed(text)
        parser.close()
        n = 0
        for table in parser.tables:
            if not table:
                continue
            head_i = next((i for i, r in enumerate(table) if r and all(h for _, h in r)), None)
            header = [t for t, _ in table[head_i]] if head_i is not None else []
            if not header:
                # no <th> row: take the first row as the header
                header = [t for t, _ in table[0]]
                head_i = 0
            body = [[t for t, _ in r] for i, r in enumerate(table) if i != head_i]
            n += _table_problems(body, header, k)
        plain = re.sub(r"<[^>]+>", " ", text)
        n += _phrase_problems(plain, k)
        if n:
            problems.append(f"{page.name}: {n} suppressed figures of 1..k-1")
    units = rel.units_table
    for col in ("suppressed", "generalised_up"):
        if col in units.columns:
            n_units = int(sum(_small_int(str(v), k) for v in units[col]))
            if n_units:
                problems.append(f"units.csv: {n_units} units publish 1..k-1 {col} subjects")
    if "source_total" in units.columns:
        ucode, unames = rel.unit_codes
        subjects = _distinct_counts(ucode, rel.subjects, unames.size, rel.subject_codes)
        small_units = {str(unames[i]) for i in np.flatnonzero((subjects > 0) & (subjects < k))}
        shown = [
            (u, _cell_value(t))
            for u, t in zip(units["unit"].astype(str), units["source_total"], strict=True)
        ]
        # A unit of 1..k-1 subjects is itself a sensitive figure: its total reads '<k'
        # (a 'withheld' figure owes nothing in `holes`, so it would not be protected).
        n_small = sum(1 for u, t in shown if u in small_units and t != LESS_THAN_K)
        if n_small:
            problems.append(
                f"units.csv: {n_small} source totals rest on 1..k-1 subjects and do not read <k"
            )
        n_false = sum(1 for u, t in shown if u not in small_units and t == LESS_THAN_K)
        if n_false:
            problems.append(f"units.csv: {n_false} source totals read <k for 0 or >= k subjects")
    scanned.append("units.csv")
    passes = rel.manifest.get("passes")
    if isinstance(passes, list):
        small = sum(
            1
            for p in passes
            if isinstance(p, Mapping)
            and isinstance(p.get("labels"), Mapping)
            and _small_int(str(p["labels"].get("suppress", "")), k)
        )
        if small:
            problems.append(f"manifest passes: {small} 'suppress' label counts of 1..k-1")
    s_subj, _ = _suppressed_subjects(rel)
    if 0 < s_subj < k:
        counts = rel.manifest.get("counts") or {}
        hidden = (LESS_THAN_K, WITHHELD)
        if isinstance(counts, Mapping) and counts.get("suppressed") not in hidden:
            problems.append("manifest counts.suppressed should read '<k'")
        if rel.manifest.get("suppressed_share", LESS_THAN_K) not in hidden:
            problems.append("manifest suppressed_share should read '<k'")
    if problems:
        return CheckResult("report_safety", False, "; ".join(problems))
    return CheckResult(
        "report_safety",
        True,
        f"no suppressed figure of 1..k-1 in {', '.join(scanned)} or the manifest",
    )


def _check_manifest(rel: _Release) -> CheckResult:
    files = rel.manifest.get("files")
    if not isinstance(files, Mapping):
        return CheckResult("manifest", False, "manifest files is missing")
    on_disk = {
        p.relative_to(rel.rel).as_posix(): p
        for p in rel.release_files()
        if p.relative_to(rel.rel).as_posix() != "manifest.json"
    }
    unlisted = sorted(set(on_disk) - set(files))
    missing = sorted(set(files) - set(on_disk))
    digests = {
        name: rel.unchanged[name]
        if name in rel.unchanged
        else rel.read_digests.get(path) or _sha256(path)
        for name, path in sorted(on_disk.items())
    }
    rel.digests.update(digests)
    wrong = sorted(
        name for name in set(on_disk) & set(files) if str(files[name]).lower() != digests[name]
    )
    problems: list[str] = []
    if unlisted:
        problems.append(f"{len(unlisted)} files not listed: {', '.join(unlisted[:5])}")
    if missing:
        problems.append(f"{len(missing)} listed files missing: {', '.join(missing[:5])}")
    if wrong:
        problems.append(f"{len(wrong)} sha256 mismatches: {', '.join(wrong[:5])}")
    src_sha = rel.source.sha256
    if src_sha and rel.manifest.get("input_sha256") != src_sha:
        problems.append("input_sha256 differs from the source's checksum")
    problems += _promised_file_problems(rel, set(on_disk))
    problems += _parameter_problems(rel)
    if problems:
        return CheckResult("manifest", False, "; ".join(problems))
    extra = " and the input checksum" if src_sha else ""
    n_same = len(set(on_disk) & set(rel.unchanged))
    same = f" ({n_same} unchanged since the previous run)" if n_same else ""
    return CheckResult("manifest", True, f"{len(on_disk)} files match their sha256{extra}{same}")


#: The files every release holds (paths in ``release/``, ``manifest.json`` aside), by layout.
PROMISED_FILES: dict[str, tuple[str, ...]] = {
    "single": ("records.parquet", "records.csv", "groups.parquet", "classes.parquet",
               "units.csv", "RELEASE_NOTES.md", "report.html"),
    "partitioned": ("groups.parquet", "classes.parquet", "units.csv", "RELEASE_NOTES.md",
                    "report.html"),
}  # fmt: skip


def _promised_file_problems(rel: _Release, present: set[str]) -> list[str]:
    """Every file the format promises is in ``release/`` (``report.html`` only once the
    report is written: the writer's first run, ``before_report``, comes before it)."""
    layout = "partitioned" if rel.manifest.get("layout") == "partitioned" else "single"
    want = [f for f in PROMISED_FILES[layout] if not (rel.before_report and f == "report.html")]
    missing = [f for f in want if f not in present]
    problems = []
    if layout == "partitioned":
        parts = sorted(f for f in present if f.startswith("records/part-"))
        promised = rel.manifest.get("record_parts")
        if not parts:
            missing.append("records/part-*.parquet")
        elif (
            isinstance(promised, int) and not isinstance(promised, bool) and promised != len(parts)
        ):
            problems.append(f"the manifest promises {promised} record parts, release/ holds "
                            f"{len(parts)}")  # fmt: skip
    if missing:
        problems.insert(0, f"{len(missing)} files the format promises are missing: "
                           f"{', '.join(missing)}")  # fmt: skip
    return problems


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _parameter_problems(rel: _Release) -> list[str]:
    """The manifest's parameters agree with its ``policy``, ``groups.parquet``, the audit and
    the records' GeoParquet metadata: ``k``, ``r_max_m``, ``tau``, ``unit_cap`` and ``seed``
    equal the policy's; no ``radius_m`` is below ``r_max_m`` (above it fails ``extent``;
    the format has them equal); the audit's ``r_work_m`` is
    ``r_max_m * min(1, policy.scale_factor_min)``; ``crs`` is the audit's ``output_crs``
    and the CRS of every records file's geometry (null for null)."""
    m = rel.manifest
    problems: list[str] = []
    policy = m.get("policy")
    policy = policy if isinstance(policy, Mapping) else {}
    for name in ("k", "r_max_m", "tau", "unit_cap", "seed"):
        if name in policy and name in m and policy[name] != m[name]:
            problems.append(f"manifest {name} is {m[name]!r}, its policy's {policy[name]!r}")
    r_max = _number(m.get("r_max_m"))
    groups = rel.groups
    if r_max is not None and "radius_m" in groups and len(groups):
        radius = pd.to_numeric(groups["radius_m"], errors="coerce").to_numpy(dtype=np.float64)
        # above r_max_m fails extent; the format has them equal
        off = int(np.count_nonzero(~(radius >= r_max)))
        if off:
            problems.append(f"{off} groups publish a radius_m below r_max_m (it equals r_max_m)")
    r_work = _number(rel.audit.get("r_work_m"))
    scale = _number(policy.get("scale_factor_min"))
    if r_max is not None and r_work is not None:
        expected = r_max * min(1.0, scale) if scale is not None else None
        if r_work > r_max or (
            expected is not None and abs(r_work - expected) > 1e-9 * max(1.0, r_max)
        ):
            problems.append("the audit's r_work_m does not follow from the manifest's r_max_m")
    if "crs" in m:
        crs = m.get("crs")
        crs = None if crs in (None, "") else str(crs)
        out = rel.audit.get("output_crs")
        if "output_crs" in rel.audit and not _crs_agree(crs, None if out in (None, "") else out):
            problems.append("manifest crs is not the audit's output_crs")
        for path in _record_paths(rel):
            if not path.is_file():
                continue
            try:
                meta = pq.read_schema(path).metadata or {}
            except (OSError, pa.ArrowException):
                continue  # counts says the file is unreadable
            if b"geo" not in meta:
                continue
            try:
                geo = json.loads(meta[b"geo"])
                column = geo["columns"][geo["primary_column"]]
            except (ValueError, KeyError, TypeError):
                problems.append(f"{path.name} has unreadable GeoParquet metadata")
                continue
            # GeoParquet: a missing crs is OGC:CRS84, a null one is "undefined"
            if not _crs_agree(crs, column.get("crs", "OGC:CRS84")):
                problems.append(f"manifest crs is not {path.name}'s GeoParquet CRS")
                break
    return problems


def _crs_agree(a: str | None, b: object) -> bool:
    """Whether two CRSs (a string, PROJJSON or None) are the same; None only equals None."""
    if a is None or b is None:
        return a is None and b is None
    from pyproj import CRS

    try:
        other = CRS.from_json_dict(b) if isinstance(b, Mapping) else CRS.from_user_input(b)
        return bool(CRS.from_user_input(a) == other)
    except Exception:  # pyproj's CRSError: an unreadable CRS agrees with nothing
        return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_CHECK_FUNCS: dict[str, Callable[[_Release], CheckResult]] = {
    "k_subjects": _check_k_subjects,
    "extent": _check_extent,
    "tau": _check_tau,
    "unit_cap": _check_unit_cap,
    "holes": _check_holes,
    "no_leak": _check_no_leak,
    "representation": _check_representation,
    "counts": _check_counts,
    "fixed_point": _check_fixed_point,
    "report_safety": _check_report_safety,
    "manifest": _check_manifest,
}


def _return_free_memory() -> None:
    """Give the memory a check freed back to the system (pyarrow's pool, glibc's heap), so
    that the next check starts from what is still held, not from the last one's peak."""
    pa.default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


#: Checks that read whole files in batches: the memory they churned is returned after them.
_CHURNING = frozenset({"no_leak"})


def _run(name: str, rel: _Release) -> CheckResult:
    try:
        if name in _CHURNING:
            try:
                return _CHECK_FUNCS[name](rel)
            finally:
                _return_free_memory()
        return _CHECK_FUNCS[name](rel)
    except _Unreadable as exc:
        return CheckResult(name, False, f"cannot check: {exc}")
    except InputError:
        raise
    except Exception as exc:  # a malformed release must fail the check, not crash verify
        return CheckResult(name, False, f"cannot check: {type(exc).__name__} while reading")


def _existing_file(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"source file {str(p)!r} does not exist")
    return p


def verify_release(
    directory: str | os.PathLike[str],
    *,
    source: PointTable | str | os.PathLike[str] | None = None,
    source_file: str | os.PathLike[str] | None = None,
    tolerance_m: float = 0.0,
    checks: Sequence[str] | None = None,
    unchanged: Mapping[str, str] | None = None,
    progress: Callable[..., None] | None = None,
    before_report: bool = False,
) -> VerificationReport:
    """Re-read a written release and run every check by name.

    Parameters
    ----------
    directory
        The directory that holds ``release/`` and ``audit/`` (a final release
        or the writer's temporary build directory). The ``release/`` folder
        itself is accepted too.
    source
        The source records: a :class:`~geokanon.io.read.PointTable`, or the
        path of the source file (CSV or Parquet), re-read raw with the column
        names in ``audit.json`` so subject ids and timestamps can be searched
        for. ``None``: the audit's coordinates and subject codes are used.
    source_file
        With a :class:`~geokanon.io.read.PointTable` as ``source``: the file it
        was read from (CSV or Parquet), re-read raw so that ``no_leak`` can look
        for the raw subject ids, timestamps, id columns and coordinates as
        written, while subjects and units come from the table.
    tolerance_m
        Slack in metres added to ``r_max_m`` in ``extent``; when > 0, a
        representative within this distance of a member fails
        ``representation``.
    checks
        Run only these checks (default: all of :data:`CHECKS`).
    unchanged
        Release files (path relative to ``release/`` -> sha256) that an earlier run
        of every check over the same release verified and that the caller has not
        changed since (the release writer's second run, after it wrote only the
        report): ``no_leak`` does not scan them again and ``manifest`` compares the
        manifest's checksums with these instead of reading them again. Every other
        file is checked in full.
    progress
        Called as ``progress(name, done=i, total=n)`` as each check starts (the
        protocol of ``geokanon._progress``; a callable, so no module is imported);
        ``source`` first, when the source file is read.
    before_report
        The release writer's first run, before it writes ``report.html`` (which
        shows these results): ``manifest`` does not yet require the report. Every
        other caller leaves it off, and a release without its report fails.

    Returns
    -------
    VerificationReport
        One :class:`CheckResult` per check; ``deterministic`` is listed as skipped.

    Raises
    ------
    InputError
        The directory holds no ``release/`` and ``audit/``, a check name is
        unknown, or the source file cannot be read.

    Examples
    --------
    >>> report = verify_release("out/dwellings", source="dwellings.csv")  # doctest: +SKIP
    >>> report.passed, report.as_dict()["extent"]  # doctest: +SKIP
    (True, True)
    >>> verify_release("no-such-release")
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: 'no-such-release' is not a release directory: ...
    """
    root = Path(directory)
    if (
        root.name == "release"
        and not (root / "release").is_dir()
        and (root.parent / "audit").is_dir()
    ):
        root = root.parent
    if not (root / "release").is_dir() or not (root / "audit").is_dir():
        raise InputError(
            f"{str(root)!r} is not a release directory: it must hold release/ and audit/ "
            "(give the directory passed to 'geokanon release --out')"
        )
    if not math.isfinite(tolerance_m) or tolerance_m < 0:
        raise InputError(f"tolerance_m must be a finite number >= 0, got {tolerance_m!r}")
    names = tuple(CHECKS if checks is None else checks)
    unknown = [n for n in names if n not in _CHECK_FUNCS]
    if unknown:
        raise InputError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    src: PointTable | Path | None
    if source is None or isinstance(source, PointTable):
        src = source
    else:
        src = _existing_file(source)
    raw = None if source_file is None else _existing_file(source_file)
    if raw is not None and src is None:
        src, raw = raw, None
    rel = _Release(root, src, tolerance_m, raw)
    rel.unchanged = {str(k): str(v).lower() for k, v in (unchanged or {}).items()}
    rel.before_report = bool(before_report)
    if isinstance(src, Path) or raw is not None:
        if progress is not None:
            progress("source")
        try:
            _ = rel.source  # a bad source file is an input error, raised here
        except _Unreadable:
            pass
    todo = [n for n in CHECKS if n in names]
    done = []
    for i, name in enumerate(todo):
        if progress is not None:
            progress(name, done=i, total=len(todo))
        done.append(_run(name, rel))
    results = tuple(done)
    return VerificationReport(results, digests=dict(rel.digests))

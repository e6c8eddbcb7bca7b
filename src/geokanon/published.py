"""Every figure a release publishes, read from every release file: the inputs of ``holes``.

The release format declares here, in one place, which field of which release file
carries which quantity (:data:`QUANTITIES`, :data:`MANIFEST_FIELDS`,
:data:`UNIT_COLUMNS`, :data:`PASS_COLUMNS`, :data:`CARDS`). The ``holes`` check of
:mod:`geokanon.verify` (and of :mod:`geokanon.verify.partitioned`) builds one linear
system from all of them together with the identities that tie the quantities to each
other (:func:`identities`), and bounds every sensitive figure in it.

A figure is one linear constraint ``low <= sum(c * quantity) <= high`` on the
quantities: a published integer fixes its quantity, a count rounded to a multiple of
k (``*_rounding`` beside it) bounds it to the values that round to it, ``<k`` makes
it a sensitive figure in ``[1, k-1]``, ``withheld`` leaves it free. A number in a
release file that the format does not declare is a problem of its own: an
undeclared figure cannot be put in the system, so it cannot be shown harmless.

The notes and the report are text: their tables are read by their column headings
(a unit's ``released``, ``suppressed``, ...; a pass's label counts), their cards by
their captions, and every other number in them must be a value the system already
holds (a published figure, a parameter, a structural value such as a pass number)
or sit in one of the declared non-count phrases (:data:`TEXT_PHRASES`); any other
number fails ``holes``. A number 1..k-1 of prose fails unless it sits in one of the
writer's phrases (:data:`SMALL_PHRASES`), whatever value it equals: a hidden figure is
such a number, and it equals some published value more often than not.

``release.gpkg``'s ``layer_styles`` rows are the format's too (:func:`layer_styles`,
from the unit cap and the layers written): a style document is text a GIS shows (rule
labels, a legend), so ``holes`` holds every row to these, column for column.

This module imports no other geokanon module (the verifier must not import the
writer or an algorithm).
"""

from __future__ import annotations

import functools
import html
import html.parser
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PASS_SCOPE",
    "Figure",
    "Published",
    "collect",
    "identities",
    "layer_styles",
    "rounded_interval",
]

LESS_THAN_K = "<k"
WITHHELD = "withheld"
#: ``passes[].scope`` of the passes the writer publishes: counted over the records
#: published at group level only (their labels add up to ``grouped + merged``).
PASS_SCOPE = "records published at group level"
LABELS = ("ok", "merge", "generalise", "suppress")

#: The quantities of the system (besides the per-unit cells of ``units.csv``).
QUANTITIES: dict[str, str] = {
    "records": "input records",
    "grouped": "real records published in groups, label ok",
    "merged": "real records published in groups, merged in",
    "generalised": "real records published in a generalised class",
    "suppressed_records": "records suppressed (the sum of the units' suppressed records)",
    "synthetic": "synthetic records published",
    "group_synthetic": "synthetic records in groups",
    "class_synthetic": "synthetic records in classes",
    "group_records": "records in groups (groups.parquet n_records, synthetic included)",
    "class_records": "records in classes (classes.parquet n_records, synthetic included)",
    "records_published": "rows of records.parquet",
    "pass{p}.records": "records a pass classified (all records in pass 1)",
    "pass{p}.{label}": "records with that label in pass p (over the pass's scope)",
    "pass{p}.changed": "records whose label changed in pass p (over the pass's scope)",
}

#: Manifest fields whose numbers are parameters, statistics or identifiers, not counts
#: (bias: rank-test medians and p-values of suppressed vs retained records).
PARAMETER_FIELDS = frozenset(
    {"format", "version", "k", "r_max_m", "tau", "unit_cap", "policy", "seed", "crs",
     "input_sha256", "totals", "keep", "mask", "verification", "files", "bias", "layout",
     "record_parts", "file_crs", "gpkg_layers"}
)  # fmt: skip
#: Manifest fields of text (the partitioned release's): their numbers are read by the
#: declared phrases of :data:`MANIFEST_PHRASES`, any other number in them must be known.
TEXT_FIELDS = frozenset({"verification_scope", "verification_not_run", "bias_sample"})
#: Phrases of the manifest's text fields that bound the input records: (pattern, kind) with
#: kind ``"above"`` (more than v records) or ``"per_million"`` (the bias sample's 1 in
#: ``N // 1,000,000``).
MANIFEST_PHRASES = ((r"the input has more than ([\d,]+) records", "above"),)
#: A sample of 1 in m records, m the input's records divided by D, rounded down, at least
#: m0 (the partitioned release's bias sample and report sample): a bucket of the input size.
SAMPLE_PHRASE = (
    r"1 in ([\d,]+)\b[^;:()]{0,120}?: the input's records divided by ([\d,]+), rounded "
    r"down, at least (\d+)"
)
#: The size of such a sample: a count over records chosen by a hash, tied to no other count.
SAMPLE_SIZE_PHRASE = r"a deterministic sample of [\d,]+ records"
#: Manifest fields that carry counts, with the quantity of each count.
MANIFEST_FIELDS: dict[str, str] = {
    "records_published": "records_published",
    "counts.grouped": "grouped",
    "counts.merged": "merged",
    "counts.generalised": "generalised",
    "counts.suppressed": "suppressed_records",
    "counts.synthetic": "synthetic",
    "synthetic.total": "synthetic",
    "mask_risk.records": "records",
}
#: Manifest fields read by the per-unit part of the system or structural. ``duplicates``
#: counts input rows that repeat another row in every column: a count of input rows
#: that no identity ties to a disposal (the input size itself is never published);
#: ``subject_ids_merged`` (distinct ids minus distinct subjects) likewise counts spellings
#: of ids, tied to no count of records or subjects the release publishes; and
#: ``input_filter``: records dropped on reading (units left out, records outside the
#: study area; 1..k-1 read ``<k``) are in no quantity of the system, and its other
#: numbers are the merge threshold N.
OTHER_FIELDS = frozenset(
    {"groups", "classes", "duplicates", "subject_ids_merged", "input_filter",
     "suppressed_share", "synthetic.allowed", "synthetic.per_unit", "synthetic.pooled",
     "synthetic.rule", "passes", "mask_risk.mask",
     "mask_risk.share_below_k", "mask_risk.worst_case_share_below_k", "mask_risk.min",
     "mask_risk.p5", "mask_risk.median"}
)  # fmt: skip
#: units.csv columns (and the notes' and report's per-unit table headings) -> cell.
UNIT_COLUMNS: dict[str, str] = {
    "released": "released",
    "released records": "released",
    "suppressed": "suppressed",
    "suppressed (subjects)": "suppressed",
    "generalised_up": "generalised_up",
    "generalised to a coarser level (subjects)": "generalised_up",
    "source_total": "source_total",
    "source total": "source_total",
    "synthetic": "synthetic",
}
#: Per-unit table columns that are not counts (share bands relative to the unit cap).
UNIT_BANDS = frozenset({"suppressed share"})
#: The report's bands of a unit's suppressed share, as fractions of the unit cap: the
#: band's upper edges (the last band is "> cap").
BAND_EDGES = (0.1, 0.25, 0.5, 1.0)
#: Pass table headings -> field of a pass.
PASS_COLUMNS: dict[str, str] = {
    **{lab: lab for lab in LABELS},
    "changed": "changed",
    "labels changed": "changed",
    "records": "records",
}
#: ``release.gpkg``: each map layer repeats the rows of one release file (x and y as its
#: geometry; ``group_extents`` the groups' rows with their r_max discs), so its figures are
#: that file's and add nothing to the system. ``counts`` checks that they are identical
#: (``units``: every cell as ``units.csv`` writes it, ``<k`` and ``withheld`` included), and
#: ``holes`` fails a layer with a column its file does not have, or a units cell that
#: differs from ``units.csv``. ``layer_styles`` holds the QGIS styles (text, no figures).
GPKG_FILE = "release.gpkg"
GPKG_LAYERS: dict[str, str] = {
    "records": "records.parquet",
    "groups": "groups.parquet",
    "group_extents": "groups.parquet",
    "units": "units.csv",
    "classes": "classes.parquet",
}
#: Layers written only up to a size by default (``--gpkg-records``, ``--gpkg-groups``; the
#: manifest's ``gpkg_layers`` lists those written); the others are always there.
GPKG_SIZED_LAYERS = ("records", "groups", "group_extents")
GPKG_STYLES = "layer_styles"
#: The date GDAL writes into ``gpkg_contents.last_change`` and the style rows'
#: ``update_time``: fixed, so that the same release gives the same bytes.
GPKG_DATE = "2000-01-01T00:00:00.000Z"
#: The GeoPackage's geometry column (the GDAL default).
GPKG_GEOMETRY = "geom"
#: Columns of a layer besides its file's that hold no figure: the GeoPackage's own.
GPKG_OWN_COLUMNS = frozenset({"fid", "geom"})
#: Columns of ``layer_styles`` (the QGIS convention).
GPKG_STYLE_COLUMNS = (
    "f_table_catalog", "f_table_schema", "f_table_name", "f_geometry_column", "styleName",
    "styleQML", "styleSLD", "useAsDefault", "description", "owner", "ui", "update_time",
)  # fmt: skip
#: Report cards: caption prefix -> quantity terms (``suppressed`` follows the manifest's
#: ``counts.suppressed``; ``share`` is the suppressed share).
CARDS: dict[str, tuple[tuple[str, float], ...] | str] = {
    "records published at group level": (("grouped", 1.0), ("merged", 1.0)),
    "of them joined a group from the edge": (("merged", 1.0),),
    "records generalised to a unit or the whole area": (("generalised", 1.0),),
    "suppressed subjects": "suppressed",
    "suppressed share": "share",
    "synthetic records": (("synthetic", 1.0),),
}
#: The notes' and the report's own sentences that give a count of input records with a verb
#: of loss ("removed", "dropped", "left out"): exact copies removed on reading
#: (``--drop-duplicates``), records of units left out (``--exclude-units``) and records
#: outside the study area (``--clip``). They count input rows no disposal touched (the
#: manifest's ``duplicates`` and ``input_filter``), so a small figure there is no hidden
#: cell; ``report_safety`` takes them out before it reads a loss verb with a count
#: 1..k-1 as a hidden figure. Any other such sentence is read as one.
FILTER_PHRASES = (
    r"exact copies removed first: [\d,]+ records of the input repeated another record in "
    r"every column and were removed before anything else",
    r"[\d,]+, removed before anything else \(--drop-duplicates\)",
    r"units left out \(--exclude-units\)[^;\n]*?;? their (?:[\d,]+|<k|None) records were "
    r"dropped before anything else",
    r"units left out \(--exclude-units\)\s+[^\n]*?: (?:[\d,]+|<k|None) records",
    r"records outside the study area dropped \(--clip\): (?:[\d,]+|<k)",
)
#: The notes' own sentence on synthetic records as it read before 2026-12-06 ("Each stands
#: in for one suppressed person", numbers in digits): a ratio of one to one, not a count.
#: ``report_safety`` takes it out, with :data:`FILTER_PHRASES`, before it reads figures.
RATIO_PHRASES = (r"each\s+stands\s+in\s+for\s+1\s+suppressed\s+person",)
#: Phrases of the notes and the report whose numbers are not counts of records:
#: distances and the share of group-level records near their representative (they rest
#: on >= k subjects and enter no count), fractions of r_max, version and format numbers,
#: checksums, the range ``1..k-1``, and bands of the unit cap.
TEXT_PHRASES = (
    r"Mean [\d,.]+ m, median [\d,.]+ m; [\d.]+ % of these records lie within r_max/4",
    r"r_max/\d+",
    r"\b2 r_max\b",
    r"1\.\.k-1",
    r"\d+ of \d+ independent checks passed",  # the report's verdict
    r"\d+ comparisons with no significant difference",  # bias findings listed
    r"centres of [\d.,]+ m grid cells",  # the snap grid of the representatives
    r"\(at most [\d.,]+ m, at least [\d.,]+ m;",  # the representatives' grid steps
    r"(?:square cells of|records per) [\d.,]+ k?m\b",  # the map's raster
    r"more than [\d,]+ groups would not read as dots",
    r"\b\d+(?:\.\d+){2,}\b",  # versions
    r"\b[0-9a-f]{16,}\b",  # checksums
    r"geokanon-release/\d+",
    r"records/part-\d{5}\.parquet",  # the partitioned layout's part files, by number
    # the radius held on the map so that r_max holds on the ellipsoid (a CRS property)
    r"[\d.,]+ m \(the working CRS's (?:smallest scale factor over the data is [\d.]+|scale)",
    r"shortens them by up to [\d.]+%",
    r"held to [\d.,]+ m on the map",
    r"[\d.]+[–-][\d.]+ %",  # share bands
)
#: Where a number 1..k-1 may stand in the notes', the report's and the manifest's prose
#: (:func:`small_numbers`; numbers in words read as digits, so "the one nearest" reads
#: "the 1 nearest"). ``holes`` cannot tell which quantity a number of prose counts: a count
#: below k equal to some published value ("One household in the smallest unit was left out")
#: would state a hidden figure and still be "a value the system holds". So a number 1..k-1
#: of prose must sit in one of these phrases of the writer: a measurement (metres, seconds,
#: a share), a parameter given by its name, "one" as a pronoun in the writer's sentences,
#: and the published counts no disposal hides (records merged or generalised, groups, exact
#: copies, subject ids merged, synthetic records: figures of the system). A table of the
#: report other than the per-unit and per-pass ones is read a row at a time, its cells
#: joined by `` | `` (the parameter table's rows below).
SMALL_PHRASES = (
    # the report's parameter table, a row at a time
    r"^(?:seed|k|tau \(global cap\)|unit cap) \| [\d,.]+$",
    r"^merge / generalise ratios \| [\d,.]+ / [\d,.]+$",
    r"^subject ids merged \([^)|]*\) \| [\d,]+$",
    r"^records outside the study area \(--clip\) \| [\d,]+$",
    r"^units merged \(--merge-small-units [\d,]+\) \|",
    r"^exact copies in the input \| [\d,]+, (?:removed|kept)",
    # "one" as a pronoun
    r"would reveal a smaller 1\b",
    r"the 1 nearest the group's centroid",
    r"part of 1 system",
    r"the only 1 in the district",
    r"each result is the 1 shown here",
    r"the passes end with 1 that changed nothing, within \d+ passes",
    r"(?:the working CRS's scale )?is at least 1 over the data\)",
    r"the row under pass 1 counts",
    r"^1: only because of time(?: \|(?: (?:[\d,]+|<k|withheld))?)*$",
    # published counts no disposal hides (figures of the system: holes bounds them)
    r"published at group level: [\d,]+ records in [\d,]+ groups \([\d,]+ of them joined",
    r"generalised to an administrative unit or the whole area: [\d,]+",
    r"exact copies kept: [\d,]+ records of the input",
    r"the input held [\d,]+ exact copies of records",
    r"a group or class of [\d,]+ may stand for fewer than [\d,]+ people",
    r"[\d,]+ ids were spellings of another id",
    r"synthetic records: [\d,]+\.",
    r"at least [\d,]+ other people were within",
    r"records published at group level, in [\d,]+ groups",
    # the mask's risk sentence (a median over records, not a count of people)
    r"fewer than k-1 = [\d,]+ such records \(median [-+\d.eE]+\)",
    r"at least k = [\d,]+ subjects",
    # the bias findings: medians of a kept attribute, test statistics
    r"median [-+\d.,eE]+ vs [-+\d.,eE]+",
    r"\bp=[-+\d.eE]+",
    r"standardised difference [-+\d.]+",
    r"Cramer's V [\d.]+",
    r"takes 1 value only",
    # "single ... out", a verb: the notes' caveat on kept attributes, the mask's risk sentence
    r"\b(?:can single a person|could single those) out\b",
    r"initial-scale=1\b",  # the page's viewport
    r"small units merged \(--merge-small-units [\d,]+\): a unit with fewer than [\d,]+ people",
    # parameters by name: the notes' policy line, the report's policy sentence
    r"\b(?:k|seed|r_max|tau|unit cap|global cap tau)\s*=\s*[\d,.]+",
    r"\bk-1\b",
    # measurements (last: the phrases above hold some)
    r"[\d,.]+\s*(?:%|(?:k?m|s)\b)",
)
#: Where the notes and the report name units (a unit named by a number, ``3``, is read there
#: as a name, not as a count: :func:`small_numbers`): the bias findings (``... in {unit}
#: have ...``), and the lists of units left out, merged or left small.
_UNIT_LISTS = (
    r"\bin (?P<u>.{1,200}?)"
    r"(?= have | differ in |: too few | \((?:rank test|chi-square) p=| takes (?:1|one) value)",
    r"units left out \(--exclude-units\)(?:: | \| )(?P<u>[^;:|]+)",
    r"every figure is for the merged unit: (?P<u>.+)$",
    r"^units merged \(--merge-small-units [\d,]+\) \| (?P<u>.+)$",
    r"units (?:still )?below the (?:merge )?threshold,? (?:with )?no neighbour(?: to join)?"
    r"(?::| \|) (?P<u>.+)$",
)
_NUMBER = re.compile(r"(?<![\w.,/])([+-]?\d[\d,]*(?:\.\d+)?)(?![\w])")
#: Words that state a small count without a digit or a number word: "a single household",
#: "both dwellings", "a couple of records". :func:`small_numbers` counts them as the numbers
#: they state (Roman numerals, ordinals and "a household" are not read: see the README's
#: limitations).
COUNT_WORDS: dict[str, int] = {
    "single": 1, "sole": 1, "lone": 1, "solitary": 1, "both": 2,
    "a couple of": 2, "a pair of": 2,
    # Dutch and German: "beide woningen", "der einzige Haushalt"
    "beide": 2, "beiden": 2, "einzige": 1, "einzigen": 1, "einziger": 1, "einziges": 1,
}  # fmt: skip
_COUNT_WORD = re.compile(
    r"(?<![\w-])("
    + "|".join(w.replace(" ", r"\s+") for w in sorted(COUNT_WORDS, key=len, reverse=True))
    + r")(?![\w-])",
    re.IGNORECASE,
)
#: Where a bias finding names a kept column or one of its categories (``{name}``,
#: ``{category}``): names, not counts, for :data:`COUNT_WORDS`.
_NAMED_SPANS = (
    r"Suppressed records(?: in \S+)? differ in .+?: .+? makes up",
    r"Suppressed records(?: in \S+)? have (?:higher|lower) .+? than retained ones",
    r"No significant difference in .+? \((?:rank test|chi-square)",
    r"^.+? takes (?:1|one) value only",
    r"^.+?: too few suppressed records to compare",
)
_ROUNDING = re.compile(r"nearest multiple of k=(\d+)")


@dataclass(frozen=True)
class Figure:
    """One published figure: ``low <= sum(c * quantity for quantity, c in terms) <= high``.

    ``hidden`` marks a sensitive figure (published as ``<k``): its single quantity
    must keep every value from 1 to k-1.
    """

    where: str
    terms: tuple[tuple[str, float], ...]
    low: float
    high: float
    hidden: bool = False


@dataclass
class Published:
    """What :func:`collect` found: figures, corrections to the unit rows, problems."""

    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: (unit, cell) -> integer published for it outside units.csv
    unit_values: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the global suppressed figure read as ``<k`` somewhere (card), when the manifest hid it
    global_less_than_k: bool = False
    known: set[float] = field(default_factory=set)


def rounded_interval(shown: int, k: int) -> tuple[float, float]:
    """The counts that round to ``shown`` as the nearest multiple of ``k`` (halves up).

    Examples
    --------
    >>> rounded_interval(300, 5), rounded_interval(0, 5), rounded_interval(8, 4)
    ((298.0, 302.0), (0.0, 2.0), (6.0, 9.0))
    """
    low = shown - k // 2
    return float(max(low, 0)), float(low + k - 1)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _parse_cell(text: str) -> int | str | None:
    """A table cell as a count: an int, ``<k``, ``withheld``, or None (not a count)."""
    t = text.strip()
    if t in (LESS_THAN_K, WITHHELD):
        return t
    t = t.replace(",", "").replace("\u202f", "").replace(" ", "")
    if re.fullmatch(r"[+-]?\d+", t):
        return int(t)
    return None


def _numbers(value: Any) -> Iterator[float]:
    """Every number in a JSON value (numbers inside strings too)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, str):
        for m in _NUMBER.finditer(value):
            with_comma = m.group(1).replace(",", "")
            try:
                yield float(with_comma)
            except ValueError:
                continue
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _numbers(v)


def _has_number(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, Mapping):
        return any(_has_number(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_number(v) for v in value)
    return False


def _count_figure(
    where: str,
    terms: tuple[tuple[str, float], ...],
    value: object,
    k: int,
    rounding: int | None = None,
) -> Figure | str | None:
    """A published count as a figure (None: withheld; a string: why it is unreadable)."""
    if value == WITHHELD or value is None:
        return None
    if value == LESS_THAN_K:
        return Figure(where, terms, 1.0, float(k - 1), hidden=len(terms) == 1)
    v = _int(value)
    if v is None:
        return f"{where}: {str(value)[:16]!r} is not a count"
    if rounding is not None:
        lo, hi = rounded_interval(v, rounding)
        return Figure(where, terms, lo, hi)
    return Figure(where, terms, float(v), float(v))


def _rounding(entry: Mapping[str, Any], name: str, where: str, problems: list[str]) -> int | None:
    rule = entry.get(f"{name}_rounding")
    if rule is None:
        return None
    m = _ROUNDING.fullmatch(str(rule).strip())
    if m is None:
        problems.append(f"{where}_rounding: an undeclared rounding rule {str(rule)[:40]!r}")
        return None
    return int(m.group(1))


def _manifest(m: Mapping[str, Any], k: int, out: Published) -> None:
    def add(fig: Figure | str | None) -> None:
        if isinstance(fig, str):
            out.problems.append(fig)
        elif fig is not None:
            out.figures.append(fig)

    for key, value in m.items():
        if key in PARAMETER_FIELDS or key in OTHER_FIELDS or key in MANIFEST_FIELDS:
            continue
        if key in TEXT_FIELDS:
            continue  # read by _manifest_text
        if key == "report_sample":
            add(_report_sample_figure(value))
            continue
        if key in ("counts", "synthetic", "mask_risk") and isinstance(value, Mapping):
            for sub, v in value.items():
                name = f"{key}.{sub}"
                if sub.endswith("_rounding"):
                    continue
                if (
                    name not in MANIFEST_FIELDS
                    and name not in OTHER_FIELDS
                    and (_has_number(v) or _parse_cell(str(v)) == LESS_THAN_K)
                ):
                    out.problems.append(
                        f"manifest {name}: a figure the release format does not declare"
                    )
            continue
        if _has_number(value) or value == LESS_THAN_K:
            out.problems.append(f"manifest {key}: a figure the release format does not declare")
    for name, quantity in MANIFEST_FIELDS.items():
        parent, _, sub = name.rpartition(".")
        holder = m.get(parent) if parent else m
        if not isinstance(holder, Mapping) or sub not in holder:
            continue
        value = holder[sub]
        if name == "counts.suppressed" and value == LESS_THAN_K:
            continue  # the global '<k' (subjects) is a cell of its own in hidden_ranges
        rounding = _rounding(holder, sub, f"manifest {name}", out.problems)
        add(_count_figure(f"manifest {name}", ((quantity, 1.0),), value, k, rounding))
    risk = m.get("mask_risk")
    if isinstance(risk, Mapping):
        for key in ("share_below_k", "worst_case_share_below_k"):
            v = risk.get(key)
            if isinstance(v, float) and round(v, 3) != v:
                out.problems.append(
                    f"manifest mask_risk.{key}: a share of the input records to more than 3 "
                    "decimals gives their number away (the share's denominator)"
                )
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.known.add(100.0 * float(v))  # the report shows it as a percentage
    share = m.get("suppressed_share")
    sup = (
        (m.get("counts") or {}).get("suppressed") if isinstance(m.get("counts"), Mapping) else None
    )
    if isinstance(share, int | float) and not isinstance(share, bool) and _int(sup) is None:
        out.problems.append(
            "manifest suppressed_share: a share of a suppressed figure that is itself hidden"
        )
    passes = m.get("passes")
    if isinstance(passes, list):
        _passes(passes, k, out)


def _passes(passes: list[Any], k: int, out: Published) -> None:
    n = len(passes)
    for i, entry in enumerate(passes):
        where = f"manifest passes[{i}]"
        if not isinstance(entry, Mapping):
            out.problems.append(f"{where}: not an object")
            continue
        p = _int(entry.get("pass")) or i + 1
        scope = entry.get("scope")
        for key, value in entry.items():
            if key in ("pass", "scope", "labels", "changed", "records") or key.endswith(
                "_rounding"
            ):
                continue
            if key == "because_of_time" and isinstance(value, Mapping):
                # of the pass's records per label, those with it only because of time:
                # at most that label's count, over the same scope
                for lab, v in value.items():
                    count = _int(v)
                    if count is None or count < 0 or lab not in LABELS:
                        out.problems.append(f"{where}.because_of_time.{lab}: not a count")
                        continue
                    out.figures.append(
                        Figure(f"{where}.because_of_time.{lab}", ((f"pass{p}.{lab}", 1.0),),
                               float(count), math.inf)
                    )  # fmt: skip
                continue
            if _has_number(value):
                out.problems.append(f"{where}.{key}: a figure the release format does not declare")
        labels = entry.get("labels") or {}
        rounding = _rounding(entry, "labels", where + ".labels", out.problems)
        if isinstance(labels, Mapping):
            for lab, v in labels.items():
                fig = _count_figure(
                    f"{where}.labels.{lab}", ((f"pass{p}.{lab}", 1.0),), v, k, rounding
                )
                if isinstance(fig, str):
                    out.problems.append(fig)
                elif fig is not None:
                    out.figures.append(fig)
        for name in ("changed", "records"):
            if name not in entry:
                continue
            r = _rounding(entry, name, f"{where}.{name}", out.problems)
            if r is None and name == "changed" and p == 1 and scope != PASS_SCOPE:
                r = rounding  # the first pass's changed was rounded like its labels
            fig = _count_figure(f"{where}.{name}", ((f"pass{p}.{name}", 1.0),), entry[name], k, r)
            if isinstance(fig, str):
                out.problems.append(fig)
            elif fig is not None:
                out.figures.append(fig)
    out.figures.extend(identities(passes))
    out.known.update(float(i) for i in range(n + 1))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _manifest_text(m: Mapping[str, Any], out: Published) -> list[str]:
    """Figures of the manifest's text fields; the text left for the free-number check."""
    rest: list[str] = []
    for key in sorted(TEXT_FIELDS):
        for text in _strings(m.get(key)):
            for pattern, _kind in MANIFEST_PHRASES:
                for hit in re.finditer(pattern, text):
                    v = int(hit.group(1).replace(",", ""))
                    out.figures.append(
                        Figure(f"manifest {key}", (("records", 1.0),), v + 1.0, math.inf)
                    )
                text = re.sub(pattern, " ", text)
            rest.append(_samples(text, f"manifest {key}", out))
    return rest


def _report_sample_figure(entry: object) -> Figure | str | None:
    """The manifest's ``report_sample`` (the partitioned report's sample: ``records``,
    1 in ``every``, ``divisor``): ``every`` and ``divisor`` bound the input records as the
    report's :data:`SAMPLE_PHRASE` does (a sample only above ``divisor`` records,
    ``every = max(2, N // divisor)``); ``records`` is the sample's size, a count over
    records chosen by a hash tied to no other count (as :data:`SAMPLE_SIZE_PHRASE`).
    ``None``: no sample."""
    if entry is None:
        return None
    fields = ("records", "every", "divisor")
    if not isinstance(entry, Mapping) or set(entry) != set(fields):
        return "manifest report_sample: a figure the release format does not declare"
    every, divisor = entry["every"], entry["divisor"]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (every, divisor)):
        return "manifest report_sample: a figure the release format does not declare"
    lo = divisor + 1 if every <= 2 else every * divisor
    return Figure("manifest report_sample", (("records", 1.0),), float(lo),
                  float((every + 1) * divisor - 1))  # fmt: skip


def _samples(text: str, where: str, out: Published) -> str:
    """Figures of the sample phrases in ``text`` (input records in m's bucket); the rest."""
    for hit in re.finditer(SAMPLE_PHRASE, text):
        m, d, m0 = (int(g.replace(",", "")) for g in hit.groups())
        # a sample is drawn only above d records; m = max(m0, N // d)
        lo = d + 1 if m <= m0 else m * d
        out.figures.append(Figure(f"{where} sample", (("records", 1.0),), float(lo),
                                  float((m + 1) * d - 1)))  # fmt: skip
    text = re.sub(SAMPLE_PHRASE, " ", text)
    return re.sub(SAMPLE_SIZE_PHRASE, " ", text)


def identities(passes: Sequence[Any] = ()) -> list[Figure]:
    """The relations every release's quantities obey (each a figure of value 0).

    The counts per disposal add up to the input; groups and classes hold the grouped,
    merged and generalised records plus the synthetic ones; and the passes, by their
    ``scope``: counted over the records published at group level (:data:`PASS_SCOPE`)
    each pass's labels add up to ``grouped + merged``; counted over all records (any
    other scope, the worst reading), the first pass's labels and ``changed`` add up
    to the input, each later pass's labels to the records it classified, which never
    grow from pass to pass and end at ``grouped + merged``.
    """
    out = [
        Figure("records = grouped + merged + generalised + suppressed",
               (("records", 1.0), ("grouped", -1.0), ("merged", -1.0), ("generalised", -1.0),
                ("suppressed_records", -1.0)), 0.0, 0.0),
        Figure("groups hold grouped + merged + synthetic records",
               (("group_records", 1.0), ("grouped", -1.0), ("merged", -1.0),
                ("group_synthetic", -1.0)), 0.0, 0.0),
        Figure("classes hold generalised + synthetic records",
               (("class_records", 1.0), ("generalised", -1.0), ("class_synthetic", -1.0)),
               0.0, 0.0),
        Figure("synthetic = in groups + in classes",
               (("synthetic", 1.0), ("group_synthetic", -1.0), ("class_synthetic", -1.0)),
               0.0, 0.0),
        Figure("records published = in groups + in classes",
               (("records_published", 1.0), ("group_records", -1.0), ("class_records", -1.0)),
               0.0, 0.0),
    ]  # fmt: skip
    at_group = (("grouped", 1.0), ("merged", 1.0))
    n = len(passes)
    for i, entry in enumerate(passes):
        if not isinstance(entry, Mapping):
            continue
        p = _int(entry.get("pass")) or i + 1
        labels = entry.get("labels")
        listed = list(labels) if isinstance(labels, Mapping) else []
        whole = set(LABELS) <= set(listed)
        sums = tuple((f"pass{p}.{lab}", 1.0) for lab in listed)
        if entry.get("scope") == PASS_SCOPE:
            scope: tuple[tuple[str, float], ...] = at_group
        else:
            scope = ((f"pass{p}.records", 1.0),)
            if p == 1:
                out.append(
                    Figure(
                        "pass 1 classifies every record",
                        (("pass1.records", 1.0), ("records", -1.0)),
                        0.0,
                        0.0,
                    )
                )
            elif i > 0:
                prev = (
                    _int(passes[i - 1].get("pass")) if isinstance(passes[i - 1], Mapping) else None
                )
                out.append(
                    Figure(
                        f"pass {p} classifies no more records than pass {prev or i}",
                        ((f"pass{p}.records", 1.0), (f"pass{prev or i}.records", -1.0)),
                        -math.inf,
                        0.0,
                    )
                )
            last = i == n - 1  # the last pass classifies exactly the group-level records
            out.append(
                Figure(
                    f"pass {p} classifies the group-level records at least",
                    ((f"pass{p}.records", 1.0), ("grouped", -1.0), ("merged", -1.0)),
                    0.0,
                    0.0 if last else math.inf,
                )
            )
        neg = tuple((q, -c) for q, c in scope)
        if sums:
            out.append(Figure(f"pass {p} labels add up to its records", sums + neg,
                              -math.inf if not whole else 0.0, 0.0))  # fmt: skip
        if p == 1:
            out.append(
                Figure(
                    "pass 1 labels every record for the first time",
                    ((f"pass{p}.changed", 1.0), *neg),
                    0.0,
                    0.0,
                )
            )
        else:
            out.append(
                Figure(
                    f"pass {p} changes no more labels than it has records",
                    ((f"pass{p}.changed", 1.0), *neg),
                    -math.inf,
                    0.0,
                )
            )
    return out


# ---- the notes and the report --------------------------------------------------------


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    #: (column, cell text, ``data-v``) of the cells that carry a sort key
    sort_keys: list[tuple[int, str, str]] = field(default_factory=list)


#: The report's style sheet and script (the page's machinery), as the format declares them:
#: every ``<style>`` and ``<script>`` block of ``report.html`` is one of these, byte for byte
#: (a CSS comment or a ``content:`` string would carry text no other rule reads), and no
#: element has a ``style`` or ``on...`` attribute.
REPORT_STYLE = """
:root { --ok: #007a57; --bad: #b3261e; --ink: #1d1d1f; --mute: #5f6368; --line: #dadce0; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       margin: 0; background: #f7f7f8; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 28px 40px; }
h1 { font-size: 1.5em; margin: 0 0 2px; }
h2 { font-size: 1.15em; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; }
p { margin: 6px 0; } .mute { color: var(--mute); font-size: 0.9em; }
.verdict { display: flex; gap: 18px; align-items: center; padding: 14px 18px; border-radius: 8px;
           color: white; margin: 10px 0 12px; }
.verdict.ok { background: var(--ok); } .verdict.bad { background: var(--bad); }
.verdict .big { font-size: 1.6em; font-weight: 700; letter-spacing: 0.02em; }
.verdict p { margin: 2px 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 10px; }
.card { background: white; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.card .n { font-size: 1.3em; font-weight: 650; } .card .t { color: var(--mute); font-size: 0.85em; }
table { border-collapse: collapse; background: white; font-size: 0.9em; }
th, td { border: 1px solid var(--line); padding: 4px 9px; text-align: right;
         vertical-align: top; }
th { background: #eef0f2; font-weight: 600; }
td.l, th.l { text-align: left; }
table.checks td.r { font-weight: 700; white-space: nowrap; }
td.pass { color: var(--ok); } td.fail { color: var(--bad); }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: " \\2195"; color: #999; font-size: 0.8em; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 14px; }
.panel { background: white; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.panel h3 { font-size: 0.95em; margin: 2px 0 4px; }
img.plot, img.map { width: 100%; height: auto; display: block; }
#plot-units-over img { max-width: 760px; }
.scroll { max-height: 520px; overflow: auto; display: inline-block; }
code { font-size: 0.9em; }
table.params td.hash code { font-size: 0.78em; word-break: break-all; }
table.params { width: 100%; } table.params td.hash { max-width: 30em; } .sig { font-weight: 600; }
ul { margin: 4px 0; padding-left: 22px; }
"""
REPORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'desc' ? 1 : -1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v;
        var nx = parseFloat(x), ny = parseFloat(y);
        if (!isNaN(nx) && !isNaN(ny)) { return dir * (nx - ny); }
        return dir * String(x).localeCompare(String(y));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""
#: Attributes whose text a browser shows or reads out (tooltips, images' text): read as
#: prose, as are comments.
_TEXT_ATTRIBUTES = frozenset(
    {"alt", "title", "aria-label", "aria-description", "placeholder", "content"}
)


class _HtmlParts(html.parser.HTMLParser):
    """Tables (header cells and rows), cards (number, caption) and the other text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[_Table] = []
        self.cards: list[tuple[str, str]] = []
        self.text: list[str] = []
        self._skip = 0
        self._table: _Table | None = None
        self._depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._header_row = False
        self._card: list[list[str]] | None = None
        self._card_depth = 0
        self._div_depth = 0
        self._card_part: list[str] | None = None
        self._sort_key: str | None = None
        #: ``data-*`` attributes other than a table cell's ``data-v`` (the sort key)
        self.stray_data = 0
        #: ``(tag, text)`` of every ``<style>`` and ``<script>`` block; ``style`` and
        #: ``on...`` attributes (machinery outside them)
        self.blocks: list[tuple[str, str]] = []
        self.inline_machinery = 0
        self._block: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        data = {a: v or "" for a, v in attrs if a.startswith("data-")}
        if tag in ("td", "th") and self._row is not None:
            self._sort_key = data.pop("data-v", None)
        self.stray_data += len(data)
        # text a browser shows or reads out of an attribute (a tooltip, an image's text)
        self.text.extend(v for a, v in attrs if a in _TEXT_ATTRIBUTES and v)
        self.inline_machinery += sum(1 for a, _ in attrs if a == "style" or a.startswith("on"))
        if tag in ("style", "script"):
            self._skip += 1
            self._block = []
        elif tag == "table":
            self._depth += 1
            if self._depth == 1:
                self._table = _Table([], [])
        elif tag == "tr" and self._table is not None:
            self._row, self._header_row = [], True
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            if tag == "td":
                self._header_row = False
        elif tag == "div":
            self._div_depth += 1
            if "card" in cls.split() and self._card is None:
                self._card, self._card_depth = [], self._div_depth
            elif self._card is not None:
                self._card_part = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script"):
            self._skip = max(0, self._skip - 1)
            if self._block is not None:
                self.blocks.append((tag, "".join(self._block)))
                self._block = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            text = "".join(self._cell).strip()
            if self._sort_key is not None and self._table is not None:
                self._table.sort_keys.append((len(self._row), text, self._sort_key))
            self._sort_key = None
            self._row.append(text)
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._header_row and not self._table.header and not self._table.rows:
                self._table.header = self._row
            else:
                self._table.rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._depth -= 1
            if self._depth == 0 and self._table is not None:
                self.tables.append(self._table)
                self._table = None
        elif tag == "div":
            if self._card is not None and self._card_part is not None:
                self._card.append(self._card_part)
                self._card_part = None
            elif self._card is not None and self._div_depth == self._card_depth:
                parts = ["".join(p).strip() for p in self._card]
                if len(parts) >= 2:
                    self.cards.append((parts[0], parts[1]))
                else:
                    self.text.extend(parts)
                self._card = None
            self._div_depth -= 1

    def handle_comment(self, data: str) -> None:
        self.text.append(data)  # published bytes all the same

    def unknown_decl(self, data: str) -> None:
        self.text.append(data)  # <![CDATA[ ... ]]>

    def handle_pi(self, data: str) -> None:
        self.text.append(data)

    def handle_data(self, data: str) -> None:
        if self._skip:
            if self._block is not None:
                self._block.append(data)
            return
        if self._cell is not None:
            self._cell.append(data)
        elif self._card_part is not None:
            self._card_part.append(data)
        elif self._table is None:
            self.text.append(data)


def _markdown_parts(text: str) -> tuple[list[_Table], list[str]]:
    tables: list[_Table] = []
    other: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", nxt):
            header = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            tables.append(_Table(header, rows))
            continue
        other.append(lines[i])
        i += 1
    return tables, other


def share_band_labels(cap: float) -> list[str]:
    """The report's labels of the suppressed-share bands of ``cap``, in rank order from 2
    (rank 0 is ``0``, rank 1 ``<k`` or ``withheld``)."""

    def pct(x: float) -> str:
        return f"{100 * x:.3g}"

    labels, low = [], 0.0
    for edge in BAND_EDGES:
        labels.append(f"{pct(low)}–{pct(edge * cap)} %")
        low = edge * cap
    return [*labels, f"> {pct(cap)} %"]


def sort_key(text: str, column: str, cap: float | None) -> str | None:
    """The ``data-v`` (sort key) the report gives a table cell of ``text``: its number
    without separators, ``0.5`` for ``<k``, ``-1`` for ``withheld``, the text itself
    otherwise; in the suppressed-share column the band's rank (``None``: no such band).
    """
    t = html.unescape(text).strip()
    if column in UNIT_BANDS:
        ranks = {"0": 0, LESS_THAN_K: 1, WITHHELD: 1}
        if cap is not None:
            ranks.update({label: 2 + i for i, label in enumerate(share_band_labels(cap))})
        return str(ranks[t]) if t in ranks else None
    if t == LESS_THAN_K:
        return "0.5"
    if t == WITHHELD:
        return "-1"
    if re.fullmatch(r"\d[\d,]*", t):
        return str(int(t.replace(",", "")))
    return t


def _sort_key_problems(tables: Iterable[_Table], cap: float | None) -> int:
    """Table cells whose sort key is not the one their text gives (:func:`sort_key`): a
    browser orders the rows by it, and the page's source shows it."""
    bad = 0
    for t in tables:
        head = [h.strip().lower() for h in t.header]
        for i, text, key in t.sort_keys:
            column = head[i] if i < len(head) else ""
            bad += key != sort_key(text, column, cap)
    return bad


def _pass_rounding(passes: Any) -> dict[tuple[int, str], int]:
    """(pass, field) -> k of the manifest's rounding (the report shows those values)."""
    out: dict[tuple[int, str], int] = {}
    if not isinstance(passes, list):
        return out
    for i, e in enumerate(passes):
        if not isinstance(e, Mapping):
            continue
        p = _int(e.get("pass")) or i + 1
        for fld in ("labels", "changed", "records"):
            m = _ROUNDING.fullmatch(str(e.get(f"{fld}_rounding", "")).strip())
            if m is not None:
                out[(p, fld)] = int(m.group(1))
        if (p, "labels") in out and p == 1 and e.get("scope") != PASS_SCOPE:
            out.setdefault((p, "changed"), out[(p, "labels")])
    return out


def _tables(
    tables: Iterable[_Table],
    name: str,
    k: int,
    unit_cells: Mapping[tuple[str, str], object],
    rounding: Mapping[tuple[int, str], int],
    out: Published,
) -> list[str]:
    """Figures of the per-unit and per-pass tables; the text of every other table."""
    free: list[str] = []
    for t in tables:
        head = [h.strip().lower() for h in t.header]
        if head and head[0] == "unit":
            for row in t.rows:
                if not row:
                    continue
                unit = html.unescape(row[0]).strip()
                for h, cell in zip(head[1:], row[1:], strict=False):
                    col = _unit_column(h)
                    if col is None:
                        if h not in UNIT_BANDS:
                            free.append(cell)
                        continue
                    _unit_cell(name, unit, col, cell, k, unit_cells, out)
        elif head and head[0] == "pass":
            for row in t.rows:
                p = _parse_cell(row[0]) if row else None
                if not isinstance(p, int):
                    free.append(" | ".join(row))
                    continue
                for h, cell in zip(head[1:], row[1:], strict=False):
                    fld = PASS_COLUMNS.get(h)
                    value = _parse_cell(cell)
                    if fld is None or value is None:
                        free.append(cell)
                        continue
                    r = rounding.get((p, "labels" if fld in LABELS else fld))
                    fig = _count_figure(
                        f"{name} pass {p} {h}", ((f"pass{p}.{fld}", 1.0),), value, k, r
                    )
                    if isinstance(fig, Figure):
                        out.figures.append(fig)
        else:
            # a row at a time, its cells joined (SMALL_PHRASES read the parameter rows)
            free.extend(" | ".join(row) for row in (t.header, *t.rows) if row)
    return free


def _unit_column(heading: str) -> str | None:
    """The units.csv cell a per-unit table column shows (by its heading), or None."""
    h = heading.strip().lower()
    if h in UNIT_COLUMNS:
        return UNIT_COLUMNS[h]
    if h in UNIT_BANDS or "share" in h:
        return None
    for word, col in (("synthetic", "synthetic"), ("generalis", "generalised_up"),
                      ("generaliz", "generalised_up"), ("suppress", "suppressed"),
                      ("total", "source_total"), ("released", "released")):  # fmt: skip
        if word in h:
            return col
    return None


def _unit_cell(
    name: str,
    unit: str,
    col: str,
    cell: str,
    k: int,
    unit_cells: Mapping[tuple[str, str], object],
    out: Published,
) -> None:
    value = _parse_cell(cell)
    if value is None:
        out.problems.append(f"{name}: unit {unit} {col} reads {cell[:16]!r}")
        return
    if (unit, "released") not in unit_cells:
        out.problems.append(f"{name}: unit {unit} is in no row of units.csv")
        return
    known = unit_cells.get((unit, col))
    if value in (LESS_THAN_K, WITHHELD) or value == known:
        return
    if known == LESS_THAN_K:
        out.problems.append(f"unit {unit} {col}: '<k' in units.csv but {value} in {name}")
    elif isinstance(known, int):
        out.problems.append(f"unit {unit} {col}: {known} in units.csv but {value} in {name}")
    else:  # withheld or not in units.csv: published here
        assert isinstance(value, int)
        prev = out.unit_values.get((unit, col))
        if prev is not None and prev != value:
            out.problems.append(f"unit {unit} {col}: {prev} and {value} in the notes and report")
        out.unit_values[(unit, col)] = value


def _cards(
    cards: Iterable[tuple[str, str]], k: int, suppressed_published: bool, out: Published
) -> list[str]:
    free: list[str] = []
    for number, caption in cards:
        cap = caption.strip().lower()
        key = next((c for c in CARDS if cap.startswith(c)), None)
        free.append(caption)
        if key is None:
            free.append(number)
            continue
        terms = CARDS[key]
        where = f"report.html card {key!r}"
        if terms == "share":
            if re.search(r"\d", number) and not suppressed_published:
                out.problems.append(f"{where}: a share of a suppressed figure that is hidden")
            continue
        value_cell = _parse_cell(number)
        if value_cell is None:
            out.problems.append(f"{where}: {number[:16]!r} is not a count")
            continue
        if terms == "suppressed":
            if value_cell == LESS_THAN_K:
                out.global_less_than_k = True
                continue
            terms = (("suppressed_records", 1.0),)
        assert not isinstance(terms, str)
        fig = _count_figure(where, terms, value_cell, k)
        if isinstance(fig, Figure):
            out.figures.append(fig)
    return free


#: Number words of prose, as :func:`words_as_digits` reads them.
_UNITS_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALE_WORDS = {
    "dozen": 12, "hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 10**9
}  # fmt: skip
#: Dutch and German number words 1..19 (notes written in a register's own language: "twee
#: woningen", "zwei Haushalte"). The articles "een", "ein", "eine" are left out (a count
#: only where the sentence says so, as "a" in English); "vier", "acht" and "elf" are both
#: languages' (and "elf" an English word: rare in a release's prose).
_DUTCH_GERMAN_WORDS = {
    "één": 1, "eén": 1, "twee": 2, "drie": 3, "vier": 4, "vijf": 5, "zes": 6, "zeven": 7,
    "acht": 8, "negen": 9, "tien": 10, "elf": 11, "twaalf": 12, "dertien": 13,
    "veertien": 14, "vijftien": 15, "zestien": 16, "zeventien": 17, "achttien": 18,
    "negentien": 19,
    "eins": 1, "zwei": 2, "drei": 3, "fünf": 5, "sechs": 6, "sieben": 7, "neun": 9,
    "zehn": 10, "zwölf": 12, "dreizehn": 13, "vierzehn": 14, "fünfzehn": 15,
    "sechzehn": 16, "siebzehn": 17, "achtzehn": 18, "neunzehn": 19,
}  # fmt: skip
NUMBER_WORDS: dict[str, int] = {
    **{w: i for i, w in enumerate(_UNITS_WORDS)},
    **{w: 20 + 10 * i for i, w in enumerate(_TENS_WORDS)},
    **_DUTCH_GERMAN_WORDS,
}
_WORD = r"(?:" + "|".join(sorted([*NUMBER_WORDS, *_SCALE_WORDS], key=len, reverse=True)) + r")"
#: A run of number words ("two", "twenty-three", "two hundred and five", "a dozen").
_NUMBER_WORDS = re.compile(
    r"(?<![\w-])(?:an?\s+(?=(?:dozen|hundred|thousand|million|billion)\b))?"
    + _WORD
    + r"(?:(?:\s+and\s+|[\s-]+)"
    + _WORD
    + r")*(?![\w-])",
    re.IGNORECASE,
)


def _words_value(words: str) -> int | None:
    """The number a run of number words spells (None: not one number)."""
    total = current = 0
    seen = False
    for w in re.split(r"[\s-]+", words.lower()):
        if w in ("and", ""):
            continue
        if w in ("a", "an"):
            current = current or 1
            continue
        if w in _SCALE_WORDS:
            scale = _SCALE_WORDS[w]
            current = max(current, 1) * scale
            if scale >= 1_000:
                total += current
                current = 0
        elif w in NUMBER_WORDS:
            current += NUMBER_WORDS[w]
        else:
            return None
        seen = True
    return total + current if seen else None


def words_as_digits(text: str) -> str:
    """``text`` with every number written in words put in digits ("two dwellings" ->
    "2 dwellings", "Twenty-three" -> "23", "a dozen" -> "12"; Dutch and German 1..19 too:
    "twee woningen" -> "2 woningen").

    Prose counts as numbers however it spells them: the ``holes`` check reads every
    number of the notes and the report this way, and ``report_safety`` judges the
    suppressed figures of their phrases this way.

    Examples
    --------
    >>> words_as_digits("Two dwellings were suppressed; twenty-three were not (one unit).")
    '2 dwellings were suppressed; 23 were not (1 unit).'
    """

    def digits(m: re.Match[str]) -> str:
        v = _words_value(m.group(0))
        return m.group(0) if v is None else str(v)

    return _NUMBER_WORDS.sub(digits, text)


def prose_numbers(text: str) -> list[tuple[str, float]]:
    """Every number of a piece of prose that is not in a declared phrase, as ``holes`` reads it.

    The text is unescaped (HTML entities), its number words are put in digits
    (:func:`words_as_digits`) and the declared non-count phrases (:data:`TEXT_PHRASES`)
    are removed; then every number (``6,000`` is one number) is read. Returns
    ``(text as written, value)`` pairs.
    """
    t = words_as_digits(html.unescape(text))
    for phrase in TEXT_PHRASES:
        t = re.sub(phrase, " ", t)
    out: list[tuple[str, float]] = []
    for m in _NUMBER.finditer(t):
        raw = m.group(1)
        try:
            out.append((raw, float(raw.replace(",", ""))))
        except ValueError:
            continue
    return out


@functools.lru_cache(maxsize=8)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``names`` as a whole (longest first)."""
    listed = sorted((n for n in names if n.strip()), key=len, reverse=True)
    if not listed:
        return None
    return re.compile(r"(?<![\w-])(?:" + "|".join(map(re.escape, listed)) + r")(?![\w-])")


def units_out(text: str, units: Iterable[str]) -> str:
    """``text`` (whitespace runs as one space) with the names of ``units`` taken out where
    the writer names units (:data:`_UNIT_LISTS`: the bias findings, the lists of units left
    out, merged or left small): a unit called ``3`` or "Three Rivers" is no number.

    Examples
    --------
    >>> units_out("consumption in Three Rivers: too few suppressed records to compare "
    ...           "(<k).", ["Three Rivers"])
    'consumption in  : too few suppressed records to compare (<k).'
    """
    alt = _names_pattern(frozenset(units))
    if alt is None:
        return text

    def unnamed(m: re.Match[str]) -> str:
        a, b = m.start("u") - m.start(), m.end("u") - m.start()
        whole = m.group(0)
        return whole[:a] + alt.sub(" ", m.group("u")) + whole[b:]

    for pattern in _UNIT_LISTS:
        text = re.sub(pattern, unnamed, text, flags=re.IGNORECASE)
    return text


def small_numbers(
    text: str, k: int, parameters: Iterable[str] = (), units: Iterable[str] = ()
) -> int:
    """How many numbers 1..k-1 of a piece of prose stand outside the writer's phrases.

    The text is read as :func:`prose_numbers` reads it (entities unescaped, number words
    in digits, :data:`TEXT_PHRASES` out); the input-filter and ratio phrases
    (:data:`FILTER_PHRASES`, :data:`RATIO_PHRASES`), :data:`SMALL_PHRASES` and a
    parameter of ``parameters`` given as a JSON member (``"merge_ratio": 2.0``) are taken
    out, and so is a name of ``units`` where a bias finding or the list of units merged
    names a unit; every integer 1..k-1 left counts, and so does a word of
    :data:`COUNT_WORDS` that states one ("a single household", "both homes").

    Examples
    --------
    >>> small_numbers("One household in the smallest unit was left out.", 5)
    1
    >>> small_numbers("- group representatives are grid points: the one nearest the "
    ...               "group's centroid (at most 15 m, at least 1 m;", 5)
    0
    """
    if k <= 1:
        return 0
    names_of = frozenset(units)
    # units named in the writer's lists and findings: their names are no count (taken
    # out before number words are read: "Three Rivers" is a name, not 3)
    t = words_as_digits(units_out(re.sub(r"\s+", " ", html.unescape(text)).strip(), names_of))
    for phrase in (*TEXT_PHRASES, *FILTER_PHRASES, *RATIO_PHRASES, *SMALL_PHRASES):
        t = re.sub(phrase, " ", t, flags=re.IGNORECASE)
    names = "|".join(re.escape(p) for p in parameters)
    if names:
        t = re.sub(rf'"(?:{names})":\s*[-+\d.eE]+', " ", t)
    n = 0
    for m in _NUMBER.finditer(t):
        try:
            v = float(m.group(1).replace(",", ""))
        except ValueError:
            continue
        n += v.is_integer() and 1 <= v <= k - 1
    return n + _count_words(t, k)


def _count_words(text: str, k: int) -> int:
    """How many words of :data:`COUNT_WORDS` in ``text`` (the writer's phrases and the
    units' names, :func:`units_out`, taken out) state a number 1..k-1; a kept column's name
    or category where a bias finding names it is no count."""
    t = text
    for pattern in _NAMED_SPANS:
        t = re.sub(pattern, " ", t, flags=re.IGNORECASE)
    n = 0
    for m in _COUNT_WORD.finditer(t):
        v = COUNT_WORDS[re.sub(r"\s+", " ", m.group(1).lower())]
        n += 1 <= v <= k - 1
    return n


def _free_numbers(
    texts: Iterable[str],
    name: str,
    out: Published,
    k: int,
    parameters: Iterable[str] = (),
    units: Iterable[str] = (),
) -> None:
    """Every number left in the text must be a value the system holds; one of 1..k-1 must
    also sit in a phrase of the writer (:func:`small_numbers`)."""
    texts = list(texts)
    params, unit_names = list(parameters), frozenset(units)
    bad: list[str] = []
    for text in texts:
        # a unit's name where the writer names units is no number ("Three Rivers")
        named = units_out(re.sub(r"\s+", " ", html.unescape(text)).strip(), unit_names)
        for raw, v in prose_numbers(named):
            if not any(math.isclose(v, w, rel_tol=1e-9, abs_tol=1e-9) for w in out.known):
                bad.append(raw)
    if bad:  # not quoted: such a number may be anything, a coordinate too
        out.problems.append(
            f"{name}: {len(bad)} numbers that are no published figure of the release; "
            "every number shown must be part of the holes system"
        )
    small = sum(small_numbers(text, k, params, unit_names) for text in texts)
    if small:  # not quoted either: it may be the hidden figure itself
        out.problems.append(
            f"{name}: {small} numbers of 1..k-1 outside the release's own phrases; a count "
            "below k in prose may state a hidden figure, whatever published value it equals"
        )


def collect(
    manifest: Mapping[str, Any],
    *,
    k: int,
    unit_cells: Mapping[tuple[str, str], object],
    group_records: int | None = None,
    class_records: int | None = None,
    records_rows: int | None = None,
    notes: str | None = None,
    report: str | None = None,
    extra_known: Iterable[float] = (),
) -> Published:
    """Every figure of a release's files, as figures of one system.

    Parameters
    ----------
    manifest
        ``manifest.json``.
    k
        The release's k.
    unit_cells
        ``units.csv`` by ``(unit, column)``: int, ``<k`` or ``withheld``.
    group_records, class_records
        Sums of ``n_records`` in ``groups.parquet`` and ``classes.parquet``.
    records_rows
        Rows of ``records.parquet``.
    notes, report
        ``RELEASE_NOTES.md`` and ``report.html`` text, when present.
    extra_known
        Other values the files publish (group and class counts, unit totals).

    Returns
    -------
    Published

    Examples
    --------
    The first pass's count over all records, rounded to a multiple of k, is a figure
    on the input size:

    >>> m = {"k": 5, "counts": {"grouped": 300, "merged": 0, "generalised": 0},
    ...      "passes": [{"pass": 1, "labels": {"ok": 300}, "changed": 300,
    ...                  "labels_rounding": "nearest multiple of k=5"}]}
    >>> pub = collect(m, k=5, unit_cells={})
    >>> [(f.where, f.low, f.high) for f in pub.figures if f.where.endswith("changed")]
    [('manifest passes[0].changed', 298.0, 302.0)]
    """
    out = Published()
    _manifest(manifest, k, out)
    for where, q, v in (
        ("groups.parquet n_records", "group_records", group_records),
        ("classes.parquet n_records", "class_records", class_records),
        ("records.parquet rows", "records_published", records_rows),
    ):
        if v is not None:
            out.figures.append(Figure(where, ((q, 1.0),), float(v), float(v)))
    # the vocabulary of the text: every number the other files publish, the parameters
    known = out.known
    manifest_text = _manifest_text(manifest, out)
    policy = manifest.get("policy")
    parameters = [str(key) for key in policy] if isinstance(policy, Mapping) else []
    units = {str(unit) for unit, _ in unit_cells}
    filtered = manifest.get("input_filter")
    if isinstance(filtered, Mapping):  # the units left out, merged away or left small
        merges = filtered.get("unit_merges")
        for key in ("excluded_units", "units_left_small"):
            units.update(str(u) for u in filtered.get(key) or ())
        if isinstance(merges, Mapping):
            units.update(str(u) for pair in merges.items() for u in pair)
    for key, value in manifest.items():
        if key not in ("files", "input_sha256") and key not in TEXT_FIELDS:
            known.update(_numbers(value))
    for key in ("tau", "unit_cap", "suppressed_share"):
        v = manifest.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            known.add(100.0 * float(v))
    known.update(float(v) for v in unit_cells.values() if isinstance(v, int))
    for f in out.figures:
        if f.low == f.high and math.isfinite(f.low):
            known.add(f.low)
    known.update(float(v) for v in extra_known)
    known.update({0.0, 1.0, float(k), float(k - 1)})
    _free_numbers(manifest_text, "manifest.json text", out, k, parameters, units)
    rounding = _pass_rounding(manifest.get("passes"))
    for name, text in (("RELEASE_NOTES.md", notes), ("report.html", report)):
        if text is None:
            continue
        if name.endswith(".md"):
            tables, other = _markdown_parts(text)
            free = _tables(tables, name, k, unit_cells, rounding, out) + other
        else:
            parts = _HtmlParts()
            parts.feed(text)
            parts.close()
            free = _tables(parts.tables, name, k, unit_cells, rounding, out)
            cap = manifest.get("unit_cap")
            cap = float(cap) if isinstance(cap, int | float) and not isinstance(cap, bool) else None
            bad_keys = _sort_key_problems(parts.tables, cap) + parts.stray_data
            if bad_keys:  # not quoted: a sort key may be the hidden figure itself
                out.problems.append(
                    f"{name}: {bad_keys} sort keys (data-*) other than their cells' own "
                    "values; a browser sorts by them and the page's source shows them"
                )
            declared = {"style": REPORT_STYLE, "script": REPORT_SCRIPT}
            machinery = parts.inline_machinery + sum(
                text != declared[tag] for tag, text in parts.blocks
            )
            if machinery:
                out.problems.append(
                    f"{name}: {machinery} style or script blocks or attributes other than "
                    "the release format's (geokanon.published.REPORT_STYLE, REPORT_SCRIPT)"
                )
            counts = manifest.get("counts")
            sup = counts.get("suppressed") if isinstance(counts, Mapping) else None
            free += _cards(parts.cards, k, _int(sup) is not None, out) + parts.text
        _free_numbers(
            [_samples(html.unescape(t), name, out) for t in free], name, out, k, parameters, units
        )
    out.figures = [f for f in out.figures if f.terms]
    return out


# --------------------------------------------------------------------------------------
# release.gpkg's QGIS styles (the layer_styles convention): the format's, row for row
# --------------------------------------------------------------------------------------


def _option(parent: ET.Element, name: str | None, value: Any, kind: str = "QString") -> ET.Element:
    attrs = {"type": kind, "value": str(value)}
    if name is not None:
        attrs = {"name": name, **attrs}
    return ET.SubElement(parent, "Option", attrs)


def _symbol_layer(
    symbol: ET.Element, cls: str, props: Mapping[str, Any], defined: Mapping[str, str] = {}
) -> None:
    layer = ET.SubElement(
        symbol, "layer", {"class": cls, "enabled": "1", "pass": "0", "locked": "0"}
    )
    opts = ET.SubElement(layer, "Option", {"type": "Map"})
    for k, v in props.items():
        _option(opts, k, v)
    ddp = ET.SubElement(layer, "data_defined_properties")
    coll = ET.SubElement(ddp, "Option", {"type": "Map"})
    _option(coll, "name", "")
    props_map = ET.SubElement(coll, "Option", {"name": "properties", "type": "Map"})
    for prop, expression in defined.items():
        p = ET.SubElement(props_map, "Option", {"name": prop, "type": "Map"})
        _option(p, "active", "true", "bool")
        _option(p, "expression", expression)
        _option(p, "type", 3, "int")
    _option(coll, "type", "collection")


def _symbol(parent: ET.Element, kind: str, name: str) -> ET.Element:
    return ET.SubElement(
        parent, "symbol",
        {"type": kind, "name": name, "alpha": "1", "clip_to_extent": "1", "force_rhr": "0"},
    )  # fmt: skip


@dataclass(frozen=True)
class _Rule:
    label: str
    filter: str
    fill: str  # r,g,b,a
    style: str = "solid"  # SimpleFill brush: solid, b_diagonal, ...


def _qml(renderer: ET.Element, geometry: str) -> str:
    root = ET.Element("qgis", {"version": "3.28.0", "styleCategories": "Symbology"})
    root.append(renderer)
    ET.SubElement(root, "layerGeometryType").text = {"point": "0", "polygon": "2"}[geometry]
    body = ET.tostring(root, encoding="unicode")
    return "<!DOCTYPE qgis PUBLIC 'http://mrcc.com/qgis.dtd' 'SYSTEM'>\n" + body + "\n"


def _marker_qml(color: str, size: float, size_expression: str | None = None) -> str:
    r = ET.Element(
        "renderer-v2",
        {"type": "singleSymbol", "symbollevels": "0", "enableorderby": "0", "forceraster": "0"},
    )
    sym = _symbol(ET.SubElement(r, "symbols"), "marker", "0")
    _symbol_layer(
        sym, "SimpleMarker",
        {"name": "circle", "color": color, "outline_color": "255,255,255,255",
         "outline_width": "0.2", "size": f"{size:g}", "size_unit": "MM"},
        {"size": size_expression} if size_expression else {},
    )  # fmt: skip
    return _qml(r, "point")


def _fill_qml(rules: Sequence[_Rule]) -> str:
    r = ET.Element(
        "renderer-v2",
        {"type": "RuleRenderer", "symbollevels": "0", "enableorderby": "0", "forceraster": "0"},
    )
    root_rule = ET.SubElement(r, "rules", {"key": "root"})
    symbols = ET.SubElement(r, "symbols")
    for i, rule in enumerate(rules):
        ET.SubElement(
            root_rule, "rule",
            {"key": f"rule{i}", "symbol": str(i), "label": rule.label, "filter": rule.filter},
        )  # fmt: skip
        sym = _symbol(symbols, "fill", str(i))
        _symbol_layer(
            sym, "SimpleFill",
            {"color": rule.fill, "style": rule.style, "outline_color": "80,80,80,255",
             "outline_width": "0.26", "outline_style": "solid"},
        )  # fmt: skip
    return _qml(r, "polygon")


def _sld(layer: str, geometry: str, fill: str) -> str:
    """A plain SLD of the layer (one symbol; the QML carries the full style)."""
    ns = "http://www.opengis.net/sld"
    ET.register_namespace("se", "http://www.opengis.net/se")
    ET.register_namespace("", ns)
    root = ET.Element(f"{{{ns}}}StyledLayerDescriptor", {"version": "1.1.0"})
    named = ET.SubElement(root, f"{{{ns}}}NamedLayer")
    se = "http://www.opengis.net/se"
    ET.SubElement(named, f"{{{se}}}Name").text = layer
    style = ET.SubElement(named, f"{{{ns}}}UserStyle")
    fts = ET.SubElement(style, f"{{{se}}}FeatureTypeStyle")
    rule = ET.SubElement(fts, f"{{{se}}}Rule")
    r, g, b, _ = (int(v) for v in fill.split(","))
    hexcol = f"#{r:02x}{g:02x}{b:02x}"
    if geometry == "point":
        sym = ET.SubElement(rule, f"{{{se}}}PointSymbolizer")
        graphic = ET.SubElement(sym, f"{{{se}}}Graphic")
        mark = ET.SubElement(graphic, f"{{{se}}}Mark")
        ET.SubElement(mark, f"{{{se}}}WellKnownName").text = "circle"
        f = ET.SubElement(mark, f"{{{se}}}Fill")
        ET.SubElement(f, f"{{{se}}}SvgParameter", {"name": "fill"}).text = hexcol
    else:
        sym = ET.SubElement(rule, f"{{{se}}}PolygonSymbolizer")
        f = ET.SubElement(sym, f"{{{se}}}Fill")
        ET.SubElement(f, f"{{{se}}}SvgParameter", {"name": "fill"}).text = hexcol
        ET.SubElement(f, f"{{{se}}}SvgParameter", {"name": "fill-opacity"}).text = "0.5"
    return ET.tostring(root, encoding="unicode") + "\n"


def layer_styles(unit_cap: float, layers: Iterable[str]) -> list[dict[str, Any]]:
    """One default QGIS style per layer: the rows of ``layer_styles``.

    - ``records``: small dots; ``groups``: dots sized by ``n_records``
      (``scale_linear`` between the layer's smallest and largest group);
    - ``group_extents``: outlined discs, lightly filled;
    - ``units``: shaded by the suppressed share against the unit cap, estimated from the
      published figures as ``suppressed / (released + suppressed)`` (the exact share rests
      on subject totals the release does not publish), ``<k`` hatched, units with no
      suppression light;
    - ``classes``: lightly filled outlines.
    """
    cap = float(unit_cap)
    share = 'to_real("suppressed") / ("released" + to_real("suppressed"))'
    number = "regexp_match(\"suppressed\", '^[0-9]+$')"
    unit_rules = [
        _Rule("suppressed <k (hatched)", "\"suppressed\" = '<k'", "120,120,120,255", "b_diagonal"),
        _Rule("withheld", "\"suppressed\" = 'withheld'", "200,200,200,255", "dense6"),
        _Rule("none suppressed", "\"suppressed\" = '0'", "237,248,233,255"),
        _Rule(
            "suppressed share up to half the unit cap",
            f"{number} AND \"suppressed\" <> '0' AND {share} <= {cap / 2!r}",
            "253,204,138,255",
        ),
        _Rule(
            "suppressed share up to the unit cap",
            f"{number} AND {share} > {cap / 2!r} AND {share} <= {cap!r}",
            "252,141,89,255",
        ),
        _Rule(
            "suppressed share above the unit cap",
            f"{number} AND {share} > {cap!r}",
            "215,48,31,255",
        ),
    ]
    qml = {
        "records": (_marker_qml("31,120,180,255", 1.2), "point", "31,120,180,255"),
        "groups": (
            _marker_qml(
                "227,26,28,255",
                2.0,
                'scale_linear("n_records", minimum("n_records"), maximum("n_records"), 1.5, 8)',
            ),
            "point",
            "227,26,28,255",
        ),
        "group_extents": (
            _fill_qml([_Rule("group extent (r_max disc)", "ELSE", "227,26,28,40")]),
            "polygon",
            "227,26,28,255",
        ),
        "units": (_fill_qml(unit_rules), "polygon", "252,141,89,255"),
        "classes": (
            _fill_qml([_Rule("generalised class", "ELSE", "106,61,154,60")]),
            "polygon",
            "106,61,154,255",
        ),
    }
    rows = []
    for name in layers:
        if name not in qml:
            continue
        text, kind, fill = qml[name]
        rows.append(
            {
                "f_table_catalog": "",
                "f_table_schema": "",
                "f_table_name": name,
                "f_geometry_column": GPKG_GEOMETRY,
                "styleName": f"geokanon {name}",
                "styleQML": text,
                "styleSLD": _sld(name, kind, fill),
                "useAsDefault": True,
                "description": f"geokanon default style of the {name} layer",
                "owner": "",
                "ui": "",
                "update_time": GPKG_DATE,
            }
        )
    return rows

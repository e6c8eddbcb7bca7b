"""The ``report_safety`` check: the notes and the report show no small hidden figure.

The rule, exactly as implemented
--------------------------------
``report_safety``
    In ``RELEASE_NOTES.md`` (markdown tables) and ``report.html`` (HTML tables:
    the first all-``<th>`` row, else the first row, is the header), every cell in
    a column whose header mentions "suppress" or "generalise"/"generalize" must
    not be an integer 1..k-1 (it must read ``<k``); nor may a phrase such as
    "suppressed: 3", "3 records were suppressed", "2 dwellings in Baarn were
    suppressed", "held 1 suppressed record" (a count, up to three words, an optional
    verb, "suppress...") or "suppressed 2 records", "the suppression of 2" ("suppress...",
    an optional "of"/"only"/"just", the count) carry such a figure. The same holds, in the
    prose (the notes' lines outside tables, the page's text outside tables, figures,
    styles and scripts), for the verbs of loss: "GM0203 lost 1 record", "one record was
    withheld", "2 dwellings were removed", "dropped 3", "left out: 2" (lost, withheld,
    removed, dropped, deleted, omitted, excluded, left out, taken out, kept out, held
    back, not published, not released, not shown, missing), once the release's own input-filter
    sentences (:data:`geokanon.published.FILTER_PHRASES`: exact copies removed, units
    left out, records clipped; counts of input rows, not of people hidden) are taken
    out. Numbers written as words count as numbers, in cells and phrases alike ("two
    dwellings were suppressed" reads as 2: :func:`geokanon.published.words_as_digits`,
    also used by ``holes``), and so does the article before a past loss or suppression
    ("a household was left out", "an address has been suppressed": 1).
    ``units.csv``'s ``suppressed`` and ``generalised_up`` must not be integers
    1..k-1, a ``source_total`` must read ``<k`` for a unit of 1..k-1 subjects
    (and only then), and the manifest's ``counts.suppressed`` and ``suppressed_share``
    must be ``"<k"`` (or ``"withheld"``) when 1..k-1 subjects were suppressed;
    no pass's ``labels.suppress`` in the manifest may be an integer 1..k-1. Nor may
    a figure of the ``units`` layer of ``release.gpkg``.
"""

from __future__ import annotations

import html.parser
import re
from collections.abc import Iterator, Mapping

import numpy as np

from geokanon.published import FILTER_PHRASES, RATIO_PHRASES, words_as_digits
from geokanon.verify._derived import suppressed_subjects, unit_subjects
from geokanon.verify._reader import LESS_THAN_K, WITHHELD, ReleaseReader, cell_value
from geokanon.verify._results import CheckResult

_SUPPRESSED_PHRASES = (
    re.compile(r"suppress\w*[^|\n\d<]{0,20}?:\s*(\d[\d,]*)(?![\d.%])", re.IGNORECASE),
    # "3 records were suppressed", "2 dwellings in Baarn were suppressed", "held 1
    # suppressed record": a count, up to three words naming what it counts, then the verb
    # (whatever the things are called)
    re.compile(
        r"(?<![\d.,])(\d[\d,]*)\s+(?:[^\W\d][\w'-]*\s+){0,3}?"
        r"(?:(?:were|was|are|is|have\s+been|has\s+been|had\s+been|been|got|get|be)\s+)?suppress",
        re.IGNORECASE,
    ),
    # "suppressed 2 records", "the suppression of 2 dwellings", "suppressing only 3"
    re.compile(
        r"suppress\w*\s+(?:(?:of|only|just|a\s+further|another)\s+)?(\d[\d,]*)(?!\s*[\d.,%])",
        re.IGNORECASE,
    ),
)

#: Verbs of loss other than "suppress": a sentence added by hand such as "GM0203 lost 1
#: record" or "one record was withheld" states a hidden figure as plainly.
_LOSS = (
    r"(?:lost|los(?:e|es|ing)|withh(?:eld|old|olds|olding)|remov(?:ed|es|ing|e)"
    r"|dropp(?:ed|ing)|drops?|delet(?:ed|es|ing|e)|omit(?:ted|ting|s)?|exclud(?:ed|es|ing|e)"
    r"|(?:left|leaves?|leaving|taken|takes?|taking|kept|keeps?|keeping)\s+out"
    r"|held\s+back|holds?\s+back|not\s+(?:published|released|shown)|missing)"
)
_AUX = r"(?:were|was|are|is|have\s+been|has\s+been|had\s+been|been|got|get|be|went|go)"
_LOSS_PHRASES = (
    # "left out: 2", "withheld in the north: 3"
    re.compile(rf"\b{_LOSS}\b[^|\n\d<]{{0,20}}?:\s*(\d[\d,]*)(?![\d.%])", re.IGNORECASE),
    # "1 dwelling was removed", "one record was withheld", "3 records in Baarn were lost"
    # (a count of its own: not the digits closing a unit code such as "GM0003 lost")
    re.compile(
        rf"(?<![\w.,])(\d[\d,]*)\s+(?:[^\W\d][\w'-]*\s+){{0,3}}?(?:{_AUX}\s+)?{_LOSS}\b",
        re.IGNORECASE,
    ),
    # "GM0203 lost 1 record", "we dropped only 2"
    re.compile(
        rf"\b{_LOSS}\s+(?:(?:of|only|just|a\s+further|another)\s+)?(\d[\d,]*)(?!\s*[\d.,%])",
        re.IGNORECASE,
    ),
)
#: "A household was left out", "an address in the smallest town has been suppressed": the
#: article as the count 1 where a past loss or suppression follows in the same clause (up
#: to five words, none of them starting a clause of its own, then "was", "has been", "had
#: been", "got" or "went"). A rule stated in the present ("a record is suppressed when
#: ...") is no count; nor is "a missing dot that their record was suppressed" (the
#: notes' caveat on membership).
_ARTICLE_AS_ONE = re.compile(
    r"(?<![\w'-])an?\s+"
    r"(?:(?!(?:that|which|who|whom|whose|where|when|if|because|and|or|but)\b)"
    r"[^\W\d][\w'-]*\s+){1,5}?"
    rf"(?:was|has\s+been|had\s+been|got|went)\s+(?:{_LOSS}\b|suppress)",
    re.IGNORECASE,
)
#: The release's own sentences whose numbers are no hidden figure: counts of input rows
#: removed on reading, and the synthetic records' one-to-one ratio.
_DECLARED = re.compile(
    "|".join(f"(?:{p})" for p in (*FILTER_PHRASES, *RATIO_PHRASES)), re.IGNORECASE
)
#: HTML blocks that are not prose: tables (read by header), figures, styles, scripts.
_NOT_PROSE = re.compile(r"<(table|svg|style|script)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)

#: Table columns whose cells are per-unit hidden figures (must read "<k" below k).
_HIDDEN_HEADER = re.compile(r"suppress|generali[sz]", re.IGNORECASE)


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


def small_int(cell: str, k: int) -> bool:
    """Whether a cell reads as an integer 1..k-1 (in digits or in words: "two")."""
    text = re.sub(r"[*_`\s]", "", words_as_digits(cell)).replace(",", "")
    return text.isdigit() and 1 <= int(text) <= k - 1


def _table_problems(rows: list[list[str]], header: list[str], k: int) -> int:
    cols = [i for i, h in enumerate(header) if _HIDDEN_HEADER.search(h)]
    return sum(1 for r in rows for i in cols if i < len(r) and small_int(r[i], k))


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


def _phrase_problems(text: str, k: int, prose: str | None = None) -> int:
    """Phrases that give a suppressed figure of 1..k-1 (numbers in words read as digits):
    "suppress..." phrases in ``text``, loss verbs in ``prose`` (default: ``text``), once the
    release's own sentences that carry no hidden figure (:data:`_DECLARED`) are taken out."""
    text = words_as_digits(html.unescape(text))
    plain = text if prose is None else words_as_digits(html.unescape(prose))
    plain = _DECLARED.sub(" ", re.sub(r"\s+", " ", plain))
    text = _DECLARED.sub(" ", text)
    return sum(
        1
        for pats, t in ((_SUPPRESSED_PHRASES, text), (_LOSS_PHRASES, plain))
        for pat in pats
        for m in pat.finditer(t)
        if small_int(m.group(1), k)
    ) + (k > 1) * sum(1 for _ in _ARTICLE_AS_ONE.finditer(plain))


def _markdown_prose(text: str) -> str:
    """The notes without their table lines (tables are read by their headers)."""
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("|"))


def _html_prose(text: str) -> str:
    """The page's text outside tables, figures, styles and scripts, tags as spaces."""
    return re.sub(r"<[^>]+>", " ", _NOT_PROSE.sub(" ", text))


def check_report_safety(rel: ReleaseReader) -> CheckResult:
    k = rel.k
    problems: list[str] = []
    scanned: list[str] = []
    notes = rel.rel / "RELEASE_NOTES.md"
    if notes.is_file():
        text = notes.read_text(encoding="utf-8", errors="replace")
        scanned.append(notes.name)
        n = sum(_table_problems(body, header, k) for header, body in _markdown_tables(text))
        n += _phrase_problems(text, k, _markdown_prose(text))
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
        n += _phrase_problems(plain, k, _html_prose(text))
        if n:
            problems.append(f"{page.name}: {n} suppressed figures of 1..k-1")
    units = rel.units_table
    for col in ("suppressed", "generalised_up"):
        if col in units.columns:
            n_units = int(sum(small_int(str(v), k) for v in units[col]))
            if n_units:
                problems.append(f"units.csv: {n_units} units publish 1..k-1 {col} subjects")
    if "source_total" in units.columns:
        unames, subjects, _ = unit_subjects(rel)
        small_units = {str(unames[i]) for i in np.flatnonzero((subjects > 0) & (subjects < k))}
        shown = [
            (u, cell_value(t))
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
    from geokanon.verify.gpkg import gpkg_path, gpkg_safety_problems

    if gpkg_path(rel) is not None:
        problems += gpkg_safety_problems(rel)
        scanned.append("release.gpkg")
    passes = rel.manifest.get("passes")
    if isinstance(passes, list):
        small = sum(
            1
            for p in passes
            if isinstance(p, Mapping)
            and isinstance(p.get("labels"), Mapping)
            and small_int(str(p["labels"].get("suppress", "")), k)
        )
        if small:
            problems.append(f"manifest passes: {small} 'suppress' label counts of 1..k-1")
    s_subj, _ = suppressed_subjects(rel)
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

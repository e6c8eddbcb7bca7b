"""``holes`` over every figure of every release file (issue 15, item 1).

The reproduction: three towns of 100 records (units A, B, C) and one isolated record
beside B and one beside C, k = 5. B and C read ``<k``; 300 records are grouped. A
first-pass count over all records, even rounded to a multiple of k (300 for 302), puts
the suppressed total in a window of fewer than k values, which pins each hidden cell to
exactly 1. The writer must not publish such a figure, and the verifier must catch it
wherever it is published: in the manifest (a pass count, a rounded count, the mask's
record count, an undeclared field), units.csv, the group and class tables, the notes
and the report.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon import OutlierPolicy
from geokanon.io import table_from_frame
from geokanon.pipeline import release_points, run_core_on
from geokanon.verify import VerificationReport, format_report, verify_release
from tests.release_fixtures import (
    GROUP_LEVEL,
    Written,
    edit_audit,
    edit_csv,
    edit_manifest,
    edit_parquet,
    minimal_scene,
    refresh_manifest,
    write_release,
)

POLICY = OutlierPolicy(k=5, r_max_m=500.0, tau=0.05, unit_cap=1.0)


def _towns() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for unit, cx in zip("ABC", (150_000.0, 170_000.0, 190_000.0), strict=True):
        for _ in range(100):
            rows.append((cx + rng.uniform(-100, 100), 460_000.0 + rng.uniform(-100, 100), unit))
    rows.append((170_000.25, 470_000.5, "B"))  # isolated, beside B
    rows.append((190_000.25, 470_000.5, "C"))  # isolated, beside C
    return pd.DataFrame(rows, columns=["x", "y", "unit"]).round(2)


def _table() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return table_from_frame(_towns(), unit="unit", crs="EPSG:28992")


@pytest.fixture(scope="module")
def towns(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("towns") / "out"
    table = _table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release_points(table, POLICY, out, check_determinism=False)
    return out, table


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def failed(report: VerificationReport) -> set[str]:
    return {c.name for c in report.checks if not c.passed}


def _all_records_passes(audit: dict[str, Any], k: int) -> list[dict[str, Any]]:
    """The passes as e5f9f34 published them: over all records, rounded to multiples of k."""

    def rounded(v: int) -> int:
        return (v + k // 2) // k * k

    return [
        {
            "pass": p["pass"],
            "labels": {lab: rounded(v) for lab, v in p["labels"].items()},
            "labels_rounding": f"nearest multiple of k={k}",
            "changed": p["changed"] if p["pass"] > 1 else rounded(p["changed"]),
        }
        for p in audit["passes_exact"]
    ]


# ---- the reproduction ----------------------------------------------------------------


def test_towns_release_publishes_no_pass_figure_over_all_records(towns) -> None:
    out, table = towns
    rel = out / "release"
    units = pd.read_csv(rel / "units.csv", dtype=str)
    assert dict(zip(units["unit"], units["suppressed"], strict=True)) == {
        "A": "0",
        "B": "<k",
        "C": "<k",
    }
    manifest = json.loads((rel / "manifest.json").read_text())
    audit = json.loads((out / "audit" / "audit.json").read_text())
    assert audit["passes_exact"][0]["changed"] == 302  # the exact figure stays in the audit
    c = manifest["counts"]
    at_group = c["grouped"] + c["merged"]
    assert at_group == 300
    for p in manifest["passes"]:
        # every per-pass figure counts records published at group level only
        assert p["scope"] == GROUP_LEVEL
        assert sum(p["labels"].values()) == at_group
        assert "records" not in p
    assert manifest["passes"][0]["changed"] == at_group
    report = verify_release(out, source=table)
    assert report.passed, format_report(report)
    assert "1 hidden figures" not in report["holes"].detail  # B and C are both bounded


def test_the_all_records_pass_count_planted_back_fails_holes(towns, tmp_path) -> None:
    out, table = towns
    root = _copy(out, tmp_path / "planted")
    audit = json.loads((root / "audit" / "audit.json").read_text())
    passes = _all_records_passes(audit, POLICY.k)
    assert passes[0]["changed"] == 300  # round(302): the figure main published
    edit_manifest(root, lambda m: m.update(passes=passes))
    edit_audit(root, lambda a: a.update(passes=passes))  # so fixed_point agrees
    # a page without the report's pass table (the new figures are not in it); every
    # release has its report, so it is not deleted
    (root / "release" / "report.html").write_text("<!doctype html><html><body></body></html>")
    refresh_manifest(root)
    report = verify_release(root, source=table)
    assert failed(report) == {"holes"}, format_report(report)
    detail = report["holes"].detail
    assert "unit B suppressed: '<k' narrowed to [1, 1]" in detail
    assert "unit C suppressed" in detail


# ---- each kind of figure, planted in a valid hand-made release ------------------------
#
# minimal_scene: 12 records, 10 at group level (5 in north, 5 in south), one suppressed
# subject in each unit, both '<k'. Any figure that gives the input size (12) pins both.


@pytest.fixture
def valid(tmp_path: Path) -> Written:
    return write_release(tmp_path / "out", minimal_scene())


def _holes_only(root: Path) -> str:
    report = verify_release(root)
    assert failed(report) == {"holes"}, format_report(report)
    return report["holes"].detail


def test_valid_hand_made_release_passes(valid: Written) -> None:
    report = verify_release(valid.root)
    assert report.passed, format_report(report)


def test_a_pass_count_over_all_records_fails_holes(tmp_path: Path) -> None:
    # no scope: the first pass counts every record, so 'changed' is the input size
    passes = (
        {"pass": 1, "labels": {}, "changed": 12},
        {"pass": 2, "scope": GROUP_LEVEL, "labels": {}, "changed": 0},
    )
    w = write_release(tmp_path / "out", minimal_scene().with_(passes=passes))
    assert "narrowed to [1, 1]" in _holes_only(w.root)


def test_a_rounded_count_in_the_manifest_fails_holes(tmp_path: Path) -> None:
    # ok = 10 rounded to a multiple of 5 is 8..12, and so is the first pass's 'changed':
    # with 10 released and two suppressed subjects at least, the input is exactly 12
    passes = (
        {"pass": 1, "labels": {"ok": 10, "merge": 0, "generalise": 0, "suppress": 0},
         "labels_rounding": "nearest multiple of k=5", "changed": 10},
        {"pass": 2, "scope": GROUP_LEVEL, "labels": {"ok": 10}, "changed": 0},
    )  # fmt: skip
    w = write_release(tmp_path / "out", minimal_scene().with_(passes=passes))
    assert "narrowed to [1, 1]" in _holes_only(w.root)


def test_the_mask_record_count_in_the_manifest_fails_holes(valid: Written) -> None:
    edit_manifest(valid.root, lambda m: m.update(mask_risk={"records": 12, "min": 3}))
    refresh_manifest(valid.root)
    assert "narrowed to [1, 1]" in _holes_only(valid.root)


def test_an_undeclared_manifest_figure_fails_holes(valid: Written) -> None:
    edit_manifest(valid.root, lambda m: m["counts"].update(input=12))
    refresh_manifest(valid.root)
    assert "manifest counts.input: a figure the release format does not declare" in _holes_only(
        valid.root
    )


def test_a_figure_in_units_csv_fails_holes(valid: Written) -> None:
    edit_csv(valid.root, "units.csv", lambda f: f.assign(records=["6", "6"]))
    assert "units.csv column 'records'" in _holes_only(valid.root)


def test_a_group_table_total_fails_holes(valid: Written) -> None:
    edit_parquet(valid.root, "groups.parquet", lambda f: f.assign(unit_records=[6, 6]))
    assert "groups.parquet column 'unit_records'" in _holes_only(valid.root)


def test_a_class_table_total_fails_holes(valid: Written) -> None:
    def add_total(f: pd.DataFrame) -> pd.DataFrame:
        return f.assign(area_records=pd.Series([12] * len(f), dtype="int64"))

    # the minimal scene has no class: a class table with a total column and no rows
    # still declares the column; give it one published class row's worth of columns
    edit_parquet(valid.root, "classes.parquet", add_total)
    detail = verify_release(valid.root)["holes"].detail
    assert "classes.parquet column 'area_records'" in detail


def test_a_number_in_the_notes_fails_holes(tmp_path: Path) -> None:
    notes = "# Release notes\n\nThe input held 12 records.\n"
    w = write_release(tmp_path / "out", minimal_scene(), notes=notes)
    assert "RELEASE_NOTES.md: 1 numbers that are no published figure" in _holes_only(w.root)


def test_a_unit_figure_in_the_notes_fails_holes(tmp_path: Path) -> None:
    notes = "| unit | source total |\n|---|---|\n| north | 6 |\n| south | 6 |\n"
    w = write_release(tmp_path / "out", minimal_scene(), notes=notes)
    assert "narrowed to [1, 1]" in _holes_only(w.root)


def test_a_number_in_the_report_fails_holes(tmp_path: Path) -> None:
    page = "<html><body><p>The input held 12 records.</p></body></html>"
    w = write_release(tmp_path / "out", minimal_scene(), report_html=page)
    assert "report.html: 1 numbers that are no published figure" in _holes_only(w.root)


def test_a_card_in_the_report_fails_holes(tmp_path: Path) -> None:
    page = (
        '<html><body><div class="cards"><div class="card"><div class="n">2</div>'
        '<div class="t">suppressed subjects (published figure)</div></div></div></body></html>'
    )
    w = write_release(tmp_path / "out", minimal_scene(), report_html=page)
    # the card publishes the suppressed records, 2: one in each '<k' unit
    report = verify_release(w.root)
    assert "holes" in failed(report), format_report(report)
    assert "narrowed to [1, 1]" in report["holes"].detail


def test_a_pass_table_in_the_report_is_read_by_its_headings(tmp_path: Path) -> None:
    # the report's pass table shows the first pass over all records: 12 records
    page = (
        "<html><body><table><thead><tr><th>pass</th><th>records</th></tr></thead>"
        "<tbody><tr><td>1</td><td>12</td></tr></tbody></table></body></html>"
    )
    passes = (
        {"pass": 1, "labels": {"ok": 10}, "changed": "withheld", "records": "withheld"},
        {"pass": 2, "scope": GROUP_LEVEL, "labels": {"ok": 10}, "changed": 0},
    )
    w = write_release(tmp_path / "out", minimal_scene().with_(passes=passes), report_html=page)
    assert "narrowed to [1, 1]" in _holes_only(w.root)


# ---- the pieces -------------------------------------------------------------------------


def test_rounded_interval_holds_exactly_the_counts_that_round_to_it() -> None:
    from geokanon.published import rounded_interval

    for k in (2, 3, 4, 5, 10):
        for shown in range(0, 60, k):
            lo, hi = rounded_interval(shown, k)
            hits = [v for v in range(0, 80) if (v + k // 2) // k * k == shown]
            assert (lo, hi) == (float(min(hits)), float(max(hits))), (k, shown)


def test_collect_reads_legacy_passes_as_counts_over_all_records() -> None:
    from geokanon.published import PASS_SCOPE, collect

    m = {"k": 5, "counts": {"grouped": 300, "merged": 0, "generalised": 0},
         "passes": [{"pass": 1, "labels": {"ok": 300}, "changed": 300,
                     "labels_rounding": "nearest multiple of k=5"}]}  # fmt: skip
    pub = collect(m, k=5, unit_cells={})
    wheres = {f.where for f in pub.figures}
    assert "pass 1 classifies every record" in wheres
    m["passes"][0]["scope"] = PASS_SCOPE
    pub = collect(m, k=5, unit_cells={})
    assert "pass 1 classifies every record" not in {f.where for f in pub.figures}


def test_group_level_pass_counts_add_up_to_the_group_level_records() -> None:
    table = _table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core = run_core_on(table, POLICY)
    at_group = core.group_id >= 0
    for p in core.passes:
        assert sum(p.group_level.values()) == int(at_group.sum())
    first = core.passes[0].group_level
    labels = np.bincount(core.first_labels[at_group], minlength=4)
    assert [first[name] for name in ("ok", "merge", "generalise", "suppress")] == list(labels)
    last = core.passes[-1]
    assert last.group_level == last.labels and last.group_level_changed == 0


def test_report_isolation_histogram_counts_published_records_only(tmp_path, monkeypatch) -> None:
    # The lone records 1.5 km from B and C are 'generalise'-labelled (iota about 3, below
    # the generalise ratio 4) and suppressed (no class of 5 can hold them). Drawn over
    # every record, the histogram's bars would add up to 302, the input size: with 300
    # grouped, both '<k' cells would read 1. Only published records are drawn.
    import geokanon.report.html as report

    frame = _towns()
    frame.loc[frame.index[-2:], "y"] = 461_500.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, unit="unit", crs="EPSG:28992")
        release_points(table, POLICY, tmp_path / "out", check_determinism=False)
    units = pd.read_csv(tmp_path / "out" / "release" / "units.csv", dtype=str)
    assert list(units["suppressed"]) == ["0", "<k", "<k"]
    audit = json.loads((tmp_path / "out" / "audit" / "audit.json").read_text())
    assert audit["passes_exact"][0]["labels"]["generalise"] == 2
    seen: list[int] = []
    counted = report._iota_bins

    def spy(iota, subj, manifest):
        seen.append(int((~np.isnan(iota) & (iota <= 4.0)).sum()))
        return counted(iota, subj, manifest)

    monkeypatch.setattr(report, "_iota_bins", spy)
    report.report_html(tmp_path / "out")
    assert seen == [300]


# ---- a number 1..k-1 of prose must sit in a phrase of the writer ----------------------


@pytest.mark.parametrize(
    ("text", "units", "small"),
    [
        # a hidden figure that equals a published value (1, k-1) still fails
        ("One household in the smallest unit was left out (1 records).", (), 2),
        ("In the smallest unit, 4 households are not in this release.", (), 1),
        # the writer's own: a parameter by name, a measurement, "one" as a pronoun
        ("Policy: k=5, r_max=300 m, tau=1.00%, unit cap=10%, seed=3; geokanon 0.1.0.", (), 0),
        ("- group representatives are grid points: the one nearest the group's centroid", (), 0),
        ("merge / generalise ratios | 2.0 / 4.0", (), 0),
        ("households lost | 2", (), 1),
        ('{"k": 5, "merge_ratio": 2.0, "seed": 3}', (), 0),
        ('{"k": 5, "households_lost": 2}', (), 1),
        # a unit named by a number is a name where the writer names units
        ("consumption in 3: too few suppressed records to compare (<k).", ("3",), 0),
        ("consumption in 3: too few suppressed records to compare (<k).", (), 1),
        ("units merged (--merge-small-units 8) | 2 -> 7, 3 -> 7", ("2", "3", "7"), 0),
        ("units merged (--merge-small-units 8) | 2 -> 7, 3 -> 7", ("7",), 2),
        # a small count stated without a digit or a number word
        ("A single household in the smallest unit was left out.", (), 1),
        ("Both dwellings of GM0203 are missing; a couple of farms in GM0267 too.", (), 2),
        ("The sole  farm of the valley and a pair of homes were suppressed.", (), 2),
        # in the register's own language (Dutch, German); the articles are no count
        ("Twee woningen in de kleinste gemeente zijn weggelaten.", (), 1),
        ("Één huishouden ontbreekt; beide boerderijen ook.", (), 2),
        ("Zwei Haushalte fehlen, der einzige Hof auch.", (), 2),
        ("Een woning ontbreekt; ein Haus fehlt.", (), 0),
        # ... but a unit's or a kept category's name is no count
        ("Lone Pine: too few suppressed records to compare (<k).", ("Lone Pine",), 0),
        (
            "Suppressed records differ in status: single makes up 40% of them vs 20% of "
            "retained records (chi-square p=0.01, Cramer's V 0.20).",
            (),
            0,
        ),
    ],
)
def test_small_numbers_of_prose_stand_in_the_writer_s_phrases(text, units, small) -> None:
    from geokanon.published import small_numbers

    parameters = ("k", "merge_ratio", "seed")
    assert small_numbers(text, 5, parameters, units) == small


def test_both_is_no_count_below_k_at_k_2() -> None:
    from geokanon.published import small_numbers

    assert small_numbers("Both dwellings are missing.", 3) == 1
    assert small_numbers("Both dwellings are missing.", 2) == 0  # 2 is no figure below k


def test_a_count_below_k_in_the_notes_fails_holes_whatever_it_equals(tmp_path: Path) -> None:
    """1 and k-1 are values every release holds: ``holes``' rule that a number of prose be a
    value of the system let a hidden figure through as either of them."""
    for n, words in ((1, "One"), (4, "Four")):
        notes = f"# Notes\n\n{words} household of the smallest unit was left out ({n} records).\n"
        w = write_release(tmp_path / str(n), minimal_scene(), notes=notes)
        report = verify_release(w.root, checks=["holes"])
        assert not report.passed, format_report(report)
        assert "numbers of 1..k-1 outside the release's own phrases" in report.checks[0].detail


# ---- a unit's name is no number, whatever it reads as ---------------------------------

_NAME_WORDS = st.sampled_from(
    ["Three", "Rivers", "One", "Tree", "Hill", "3", "2", "Ward", "Lone", "Pine", "single",
     "both", "Twee", "Bruggen", "Zwei", "(North)", "St.", "Mary's", "Upper-Dunning", "12"]
)  # fmt: skip
_NAMES = st.lists(st.lists(_NAME_WORDS, min_size=1, max_size=3).map(" ".join), min_size=2,
                  max_size=4, unique=True)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(names=_NAMES)
def test_unit_names_in_the_writer_s_sentences_are_no_count(names: list[str]) -> None:
    """Whatever the units are called (number words, digits, count words, brackets), the
    writer's sentences that name them hold no number 1..k-1 of their own."""
    from geokanon.published import small_numbers

    a, b, *rest = names
    sentences = [
        f"consumption in {a}: too few suppressed records to compare (<k).",
        f"Suppressed records in {a} have higher consumption than retained ones: median 310 "
        "vs 250 (rank test p=0.0031, standardised difference +0.42).",
        f"Suppressed records in {b} differ in tenure: rented makes up 61% of them vs 38% of "
        "retained records (chi-square p=0.012, Cramer's V 0.21).",
        f"No significant difference in consumption in {b} (rank test p=0.41).",
        f"consumption in {a} takes one value only; nothing to compare.",
        "- small units merged (--merge-small-units 8): a unit with fewer than 8 people "
        f"joined its neighbour, and every figure is for the merged unit: {a} = "
        + " + ".join(sorted([b, *rest])),
        f"units merged (--merge-small-units 8) | {a} = {' + '.join([b, *rest])}",
        "- units still below the merge threshold, with no neighbour to join: " + ", ".join(names),
        "- units left out (--exclude-units): " + ", ".join(names) + "; their 12 records were "
        "dropped before anything else and are in no figure here",
    ]
    for sentence in sentences:
        assert small_numbers(sentence, 20, ("k",), names) == 0, sentence

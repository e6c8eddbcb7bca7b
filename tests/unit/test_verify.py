"""The independent verifier: a hand-made valid release passes, each mutant fails its check."""

from __future__ import annotations

import ast
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.errors import InputError
from geokanon.io.read import read_points
from geokanon.verify import (
    CHECKS,
    CheckResult,
    VerificationReport,
    format_report,
    hidden_ranges,
    verify_release,
)
from tests.release_fixtures import (
    GROUP_LEVEL,
    Scene,
    Written,
    edit_audit,
    edit_csv,
    edit_manifest,
    edit_parquet,
    minimal_scene,
    refresh_manifest,
    write_release,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def valid(tmp_path: Path) -> Written:
    return write_release(tmp_path / "out", minimal_scene())


def failed(report: VerificationReport) -> set[str]:
    return {c.name for c in report.checks if not c.passed}


def assert_only(report: VerificationReport, *names: str) -> None:
    assert failed(report) == set(names), format_report(report)


# ---- the valid release ---------------------------------------------------------------


def test_valid_release_passes_every_check_without_source(valid: Written) -> None:
    report = verify_release(valid.root)
    assert report.passed, format_report(report)
    assert tuple(c.name for c in report.checks) == CHECKS
    assert report.skipped == ("deterministic",)
    assert set(report.as_dict()) == set(CHECKS)


def test_valid_release_passes_with_source_file_and_point_table(valid: Written) -> None:
    report = verify_release(valid.root, source=valid.source)
    assert report.passed, format_report(report)
    assert "subject ids" in report["no_leak"].detail
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        table = read_points(valid.source, subject="subject", unit="unit")
    assert verify_release(valid.root, source=table).passed


def test_the_release_folder_itself_is_accepted(valid: Written) -> None:
    assert verify_release(valid.root / "release").passed


def test_not_a_release_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a release directory"):
        verify_release(tmp_path)


def test_unknown_check_name_is_an_input_error(valid: Written) -> None:
    with pytest.raises(InputError, match="unknown checks"):
        verify_release(valid.root, checks=["extent", "nonsense"])


def test_missing_file_fails_the_checks_that_need_it(valid: Written) -> None:
    (valid.root / "release" / "groups.parquet").unlink()
    refresh_manifest(valid.root)
    report = verify_release(valid.root)
    assert {"k_subjects", "extent", "representation", "counts"} <= failed(report)
    assert "groups.parquet is missing" in report["extent"].detail


def _geokanon_imports(module: str) -> set[str]:
    tree = ast.parse((ROOT / "src" / "geokanon" / module).read_text(encoding="utf-8"))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            if node.module == "geokanon":  # from geokanon import verify
                modules |= {f"geokanon.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
    return {m for m in modules if m.startswith("geokanon") and m != "geokanon"}


def _verify_modules() -> list[str]:
    return sorted(
        p.relative_to(ROOT / "src" / "geokanon").as_posix()
        for p in (ROOT / "src" / "geokanon" / "verify").rglob("*.py")
    )


def test_verify_imports_no_algorithm_module() -> None:
    modules = _verify_modules()
    assert "verify/__init__.py" in modules and "verify/no_leak.py" in modules
    for module in modules:
        outside = {m for m in _geokanon_imports(module) if not m.startswith("geokanon.verify")}
        assert outside <= {
            "geokanon.errors",
            "geokanon.policy",
            "geokanon.io.read",
            "geokanon.published",  # the release format's declared figures; imports nothing
            "geokanon.encoding",  # the release's Parquet encoding; imports nothing
        }, module
    assert _geokanon_imports("published.py") == set()
    assert _geokanon_imports("encoding.py") == set()


def test_partitioned_verifier_imports_no_algorithm_module() -> None:
    # grouping, disposal, classify and distributed must never be imported by the checker
    outside = {
        m for m in _geokanon_imports("verify/partitioned.py") if not m.startswith("geokanon.verify")
    }
    assert outside <= {
        "geokanon.errors",
        "geokanon.policy",
        "geokanon.neighbours",
        "geokanon.published",
    }


# ---- one mutant per check ------------------------------------------------------------


def test_group_with_k_minus_1_subjects_fails_k_subjects(tmp_path: Path) -> None:
    scene = minimal_scene().set("subjects", 4, "subj-0003")  # one person twice in group 0
    w = write_release(tmp_path / "out", scene)
    report = verify_release(w.root, source=w.source)
    assert_only(report, "k_subjects")
    assert "1 of 2 groups" in report["k_subjects"].detail
    # and the published records' group (no time bins: each group and class is a cell)
    assert (
        "1 of 2 groups and classes of the published records have < k=5 distinct subjects "
        "among the audit's records of that cell (smallest 4)"
    ) in report["k_subjects"].detail, report["k_subjects"].detail


def test_subject_codes_come_from_the_source_not_the_audit(tmp_path: Path) -> None:
    scene = minimal_scene().set("subjects", 4, "subj-0003")
    w = write_release(tmp_path / "out", scene)
    # the audit lies: it gives the repeat visitor a fresh code
    edit_parquet(w.root, "assignment.parquet", lambda f: f.assign(subject=np.arange(len(f))))
    assert "k_subjects" not in failed(verify_release(w.root))
    report = verify_release(w.root, source=w.source)
    assert {"k_subjects", "counts"} <= failed(report)


def test_member_one_metre_beyond_r_max_fails_extent(tmp_path: Path) -> None:
    scene = minimal_scene()
    rx, ry = scene.reps[0]
    scene = scene.set("x", 0, rx - (scene.r_max_m + 1.0)).set("y", 0, ry)
    w = write_release(tmp_path / "out", scene)
    report = verify_release(w.root, source=w.source)
    # the moved member moves the centroid too: the representative is off the rule
    assert_only(report, "extent", "representation")
    assert "1 members in 1 groups beyond r_max (worst 1.00 m over)" in report["extent"].detail
    assert verify_release(w.root, tolerance_m=1.0)["extent"].passed


def test_member_beyond_r_max_in_the_source_fails_extent_when_the_audit_lies(
    tmp_path: Path,
) -> None:
    # the audit moves the far member onto its representative: the source still has it
    # beyond r_max (and a representative on a member's audit coordinate)
    scene = minimal_scene()
    rx, ry = scene.reps[0]
    scene = scene.set("x", 0, rx - (scene.r_max_m + 1.0)).set("y", 0, ry)
    w = write_release(tmp_path / "out", scene)

    def move(f: pd.DataFrame) -> pd.DataFrame:
        at = f["source_row"] == 0
        return f.assign(x_m=np.where(at, rx, f["x_m"]), y_m=np.where(at, ry, f["y_m"]))

    edit_parquet(w.root, "assignment.parquet", move)
    report = verify_release(w.root, source=w.source)
    assert "1 members in 1 groups beyond r_max (worst 1.00 m over)" in report["extent"].detail
    assert "extent" not in failed(verify_release(w.root))  # the audit alone cannot tell


def test_member_exactly_at_r_max_passes_extent(tmp_path: Path) -> None:
    scene = minimal_scene()
    rx, ry = scene.reps[0]
    scene = scene.set("x", 0, rx - scene.r_max_m).set("y", 0, ry)
    w = write_release(tmp_path / "out", scene)
    # (the moved member moves the centroid: only the rule of the representative fails)
    assert failed(verify_release(w.root, source=w.source)) == {"representation"}


def test_published_radius_above_r_max_fails_extent(valid: Written) -> None:
    edit_parquet(valid.root, "groups.parquet", lambda f: f.assign(radius_m=f["radius_m"] + 1))
    assert_only(verify_release(valid.root), "extent")


def test_tau_breach_and_exact_boundary(tmp_path: Path) -> None:
    # 2 of 20 subjects suppressed: tau = 0.1 holds exactly (read as 1/10, not as the float)
    w = write_release(tmp_path / "a", _class_scene(8).with_(tau=0.1))
    assert verify_release(w.root).passed
    w = write_release(tmp_path / "b", _class_scene(8).with_(tau=0.0999))
    assert_only(verify_release(w.root), "tau")


def test_unit_cap_breach(tmp_path: Path) -> None:
    w = write_release(tmp_path / "out", minimal_scene().with_(unit_cap=0.1))
    report = verify_release(w.root)
    assert_only(report, "unit_cap")
    assert "2 of 2 units" in report["unit_cap"].detail


def test_per_unit_suppressed_count_of_one_fails_report_safety(valid: Written) -> None:
    # north really has 1 suppressed subject: publishing it is true (counts) but unsafe
    def publish_one(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "north", "suppressed"] = "1"
        return f

    edit_csv(valid.root, "units.csv", publish_one)
    report = verify_release(valid.root)
    assert_only(report, "report_safety")
    assert "units.csv: 1 units" in report["report_safety"].detail


def test_small_suppressed_figure_in_notes_or_report_fails_report_safety(tmp_path: Path) -> None:
    notes = (
        "# Notes\n\n| unit | released | Suppressed subjects |\n|---|---|---|\n| north | 5 | 1 |\n"
    )
    w = write_release(tmp_path / "a", minimal_scene(), notes=notes)
    # holes too: the '<k' cell of units.csv reads 1 in the notes
    assert_only(verify_release(w.root), "report_safety", "holes")
    html = (
        "<html><body><table><tr><th>unit</th><th>suppressed</th></tr>"
        "<tr><td>north</td><td>&lt;k</td></tr><tr><td>south</td><td>3</td></tr>"
        "</table></body></html>"
    )
    w = write_release(tmp_path / "b", minimal_scene(), report_html=html)
    report = verify_release(w.root)
    assert_only(report, "report_safety", "holes")
    assert "report.html: 1" in report["report_safety"].detail
    w = write_release(tmp_path / "c", minimal_scene(), notes="In all, 2 records were suppressed.\n")
    # holes too: a number 1..k-1 in a sentence that is none of the writer's
    report = verify_release(w.root)
    assert_only(report, "report_safety", "holes")
    assert "numbers of 1..k-1 outside the release's own phrases" in report["holes"].detail
    safe = "| unit | suppressed |\n|---|---|\n| north | <k |\n| south | <k |\n\nk is 5.\n"
    w = write_release(tmp_path / "d", minimal_scene(), notes=safe)
    assert verify_release(w.root).passed
    # "12 records" is the input size: with the 10 released it pins both '<k' units to 1
    w = write_release(tmp_path / "e", minimal_scene(), notes=safe + "In all, 12 records.\n")
    report = verify_release(w.root)
    assert_only(report, "holes")
    assert "RELEASE_NOTES.md: 1 numbers that are no published figure" in report["holes"].detail


def _three_unit_scene() -> Scene:
    """Group of 5 in 'north'; 5 suppressed subjects in 'east'; 2 suppressed in 'south'."""
    base = minimal_scene()
    x = [*base.x[:5], *(3000.5 + 17.25 * i for i in range(5)), 9001.5, 9403.25]
    y = [*base.y[:5], *(6000.5 + 11.75 * i for i in range(5)), 201.5, 803.25]
    units = ["north"] * 5 + ["east"] * 5 + ["south"] * 2
    return base.with_(
        x=tuple(x),
        y=tuple(y),
        units=tuple(units),
        disposal=("grouped",) * 5 + ("suppressed",) * 7,
        group_id=(0,) * 5 + (None,) * 7,
        reps={0: base.reps[0]},
        tau=0.6,
        unit_cap=1.0,
    )


def test_grand_total_revealing_one_hidden_unit_fails_holes(tmp_path: Path) -> None:
    # 7 suppressed subjects is >= k, so the grand total is published as 7; east publishes
    # 5 (>= k), so south's '<k' is 7 - 5 = 2: the seed's single-unit hole
    w = write_release(tmp_path / "out", _three_unit_scene())
    report = verify_release(w.root, source=w.source)
    assert_only(report, "holes")
    assert "unit south suppressed" in report["holes"].detail


def test_two_hidden_units_whose_sum_is_published_fail_holes(valid: Written) -> None:
    # both units read '<k'; a grand total of 2 pins each to exactly 1
    def publish_two(m: dict) -> None:
        m["counts"]["suppressed"] = 2

    edit_manifest(valid.root, publish_two)
    report = verify_release(valid.root)
    assert "holes" in failed(report)
    assert "2 of 2 hidden figures recoverable" in report["holes"].detail
    assert "narrowed to [1, 1]" in report["holes"].detail


def test_input_size_in_the_passes_reveals_the_suppressed_total(tmp_path: Path) -> None:
    # the first pass's record count is the input size: 12 - 10 released = 2 suppressed,
    # which pins both '<k' units to 1
    passes = (
        {"pass": 1, "records": 12, "labels": {}, "changed": 12},
        {"pass": 2, "records": 10, "labels": {}, "changed": 0},
    )
    w = write_release(tmp_path / "out", minimal_scene().with_(passes=passes))
    report = verify_release(w.root)
    assert_only(report, "holes")
    assert "narrowed to [1, 1]" in report["holes"].detail


def test_source_total_of_a_small_unit_fails_report_safety(tmp_path: Path) -> None:
    # unit 'east' holds 3 people, all generalised into the area class: a published
    # source total of 3 rests on 3 subjects
    scene = _area_scene(subjects=True)
    w = write_release(tmp_path / "out", scene, totals="complementary")

    def withhold_hidden(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["suppressed"] == "<k", "source_total"] = "withheld"
        f.loc[f["generalised_up"] == "<k", "source_total"] = "withheld"
        return f

    edit_csv(w.root, "units.csv", withhold_hidden)
    # withheld owes nothing in `holes`, so a unit of 1..k-1 subjects (west, east) must
    # read '<k'
    report = verify_release(w.root)
    assert "report_safety" in failed(report)
    assert "2 source totals rest on 1..k-1 subjects and do not read <k" in (
        report["report_safety"].detail
    )

    def small_units(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"].isin(["west", "east"]), "source_total"] = "<k"
        return f

    edit_csv(w.root, "units.csv", small_units)
    assert "report_safety" not in failed(verify_release(w.root))

    def publish_east(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "east", "source_total"] = "3"
        return f

    edit_csv(w.root, "units.csv", publish_east)
    report = verify_release(w.root)
    assert "report_safety" in failed(report)
    assert "1 source totals rest on 1..k-1 subjects" in report["report_safety"].detail


def test_small_suppress_label_count_in_the_passes_fails_report_safety(tmp_path: Path) -> None:
    passes = (
        {"pass": 1, "labels": {"ok": 10, "suppress": 2}, "changed": 12},
        {"pass": 2, "labels": {"ok": 10, "suppress": 2}, "changed": 0},
    )
    w = write_release(tmp_path / "out", minimal_scene().with_(passes=passes))
    report = verify_release(w.root)
    # counted over all records, the first pass's labels also give the input size: 12
    assert_only(report, "report_safety", "holes")
    assert "2 'suppress' label counts" in report["report_safety"].detail


def test_complementary_totals_reveal_a_hidden_cell(tmp_path: Path) -> None:
    w = write_release(tmp_path / "out", minimal_scene(), totals="complementary")
    report = verify_release(w.root)
    # source_total - released gives each '<k' cell exactly
    assert_only(report, "holes")

    def withhold(f: pd.DataFrame) -> pd.DataFrame:
        f["source_total"] = "withheld"
        return f

    edit_csv(w.root, "units.csv", withhold)
    assert verify_release(w.root).passed


def test_representative_on_a_member_fails_representation(tmp_path: Path) -> None:
    scene = minimal_scene()
    scene = scene.with_(reps={0: (scene.x[2], scene.y[2]), 1: scene.reps[1]})
    w = write_release(tmp_path / "out", scene)
    report = verify_release(w.root, source=w.source)
    assert "representation" in failed(report)
    # the member's coordinate is published, so it is a leak too
    assert failed(report) <= {"representation", "no_leak"}


def test_representative_at_the_members_centroid_fails_representation(tmp_path: Path) -> None:
    scene = minimal_scene()
    gx = np.array(scene.x[:5])
    gy = np.array(scene.y[:5])
    scene = scene.with_(reps={0: (float(gx.mean()), float(gy.mean())), 1: scene.reps[1]})
    w = write_release(tmp_path / "out", scene)
    report = verify_release(w.root)
    assert_only(report, "representation")
    assert "centroid" in report["representation"].detail


def test_tampered_file_fails_manifest(valid: Written) -> None:
    with open(valid.root / "release" / "RELEASE_NOTES.md", "a", encoding="utf-8") as fh:
        fh.write("edited after the build\n")
    report = verify_release(valid.root)
    assert_only(report, "manifest")
    assert "1 sha256 mismatches: RELEASE_NOTES.md" in report["manifest"].detail


def test_unlisted_and_missing_files_fail_manifest(valid: Written) -> None:
    (valid.root / "release" / "extra.txt").write_text("hello\n", encoding="utf-8")
    edit_manifest(valid.root, lambda m: m["files"].update({"gone.csv": "0" * 64}))
    detail = verify_release(valid.root)["manifest"].detail
    assert "1 files not listed: extra.txt" in detail
    assert "1 listed files missing: gone.csv" in detail


def test_input_checksum_mismatch_fails_manifest(valid: Written) -> None:
    edit_manifest(valid.root, lambda m: m.update(input_sha256="0" * 64))
    assert verify_release(valid.root).passed  # nothing to compare without the source
    assert_only(verify_release(valid.root, source=valid.source), "manifest")


def test_subject_id_in_records_csv_fails_no_leak(valid: Written) -> None:
    edit_csv(valid.root, "records.csv", lambda f: f.assign(note="subj-0007"))
    report = verify_release(valid.root, source=valid.source)
    assert_only(report, "no_leak", "counts")  # counts: the files' columns differ
    assert "records.csv" in report["no_leak"].detail
    assert "subject ids" in report["no_leak"].detail
    assert "subj-0007" not in format_report(report)


def test_point_table_with_its_source_file_scans_raw_ids(valid: Written) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        table = read_points(valid.source, subject="subject", unit="unit")
    report = verify_release(valid.root, source=table, source_file=valid.source)
    assert report.passed, format_report(report)
    assert "subject ids" in report["no_leak"].detail
    edit_csv(valid.root, "records.csv", lambda f: f.assign(note="subj-0003"))
    assert verify_release(valid.root, source=table)["no_leak"].passed  # codes only
    report = verify_release(valid.root, source=table, source_file=valid.source)
    assert_only(report, "no_leak", "counts")  # counts: the files' columns differ


def test_source_coordinates_in_a_kept_column_fail_no_leak(valid: Written) -> None:
    xs = list(minimal_scene().x[:10])
    edit_parquet(valid.root, "records.parquet", lambda f: f.assign(easting=xs))
    report = verify_release(valid.root)  # audit coordinates suffice
    assert_only(report, "no_leak", "counts")  # counts: the files' columns differ
    assert "records.parquet" in report["no_leak"].detail


def test_coordinate_pair_in_the_notes_fails_no_leak(tmp_path: Path) -> None:
    scene = minimal_scene()
    notes = f"# Notes\n\nThe farthest record sits at ({scene.x[11]}, {scene.y[11]}).\n"
    w = write_release(tmp_path / "out", scene, notes=notes)
    report = verify_release(w.root)
    # the numbers are no figure of the release either: holes fails too
    assert_only(report, "no_leak", "holes")
    assert "RELEASE_NOTES.md: 1 coordinate pairs" in report["no_leak"].detail
    assert str(scene.x[11]) not in format_report(report)


def test_row_number_column_fails_no_leak(valid: Written) -> None:
    edit_csv(valid.root, "records.csv", lambda f: f.assign(source_row=range(len(f))))
    assert_only(verify_release(valid.root), "no_leak", "counts")  # counts: columns differ


def test_raw_timestamp_fails_no_leak(tmp_path: Path) -> None:
    times = tuple(f"2008-10-23T02:{m:02d}:04Z" for m in range(12))
    scene = minimal_scene().with_(times=times)
    w = write_release(tmp_path / "a", scene)
    assert verify_release(w.root, source=w.source).passed
    notes = "# Notes\n\nLast fix: 2008-10-23 02:07:04.\n"
    w = write_release(tmp_path / "b", scene, notes=notes)
    report = verify_release(w.root, source=w.source)
    assert_only(report, "no_leak", "holes")  # its numbers are no figure of the release
    assert "1 timestamps" in report["no_leak"].detail


def test_passes_without_a_final_unchanged_pass_fail_fixed_point(tmp_path: Path) -> None:
    at_group = {"scope": GROUP_LEVEL, "labels": {}}
    passes = ({"pass": 1, **at_group, "changed": 10}, {"pass": 2, **at_group, "changed": 1})
    w = write_release(tmp_path / "a", minimal_scene().with_(passes=passes))
    report = verify_release(w.root)
    assert_only(report, "fixed_point")
    assert "changed 1" in report["fixed_point"].detail
    six = tuple(
        {"pass": i, **at_group, "changed": 10 if i == 1 else 0 if i == 6 else 1}
        for i in range(1, 7)
    )
    w = write_release(tmp_path / "b", minimal_scene().with_(passes=six))
    assert_only(verify_release(w.root), "fixed_point")


def test_manifest_passes_must_match_the_audit(valid: Written) -> None:
    edit_audit(valid.root, lambda a: a["passes"].pop(0))
    assert_only(verify_release(valid.root), "fixed_point")


def test_group_size_mismatch_fails_counts(valid: Written) -> None:
    edit_parquet(valid.root, "groups.parquet", lambda f: f.assign(n_records=f["n_records"] + 1))
    report = verify_release(valid.root)
    # the group sizes no longer add up to the published counts: holes finds them inconsistent
    assert_only(report, "counts", "holes")
    assert "2 groups publish a wrong n_records" in report["counts"].detail


def test_manifest_count_and_unit_row_mismatches_fail_counts(valid: Written) -> None:
    edit_manifest(valid.root, lambda m: m["counts"].update(grouped=9))
    assert_only(verify_release(valid.root), "counts", "holes")  # 9 contradicts the groups' 10


def test_wrong_released_count_fails_counts(tmp_path: Path) -> None:
    w = write_release(tmp_path / "out", minimal_scene())

    def bump(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "south", "released"] = "6"
        return f

    edit_csv(w.root, "units.csv", bump)
    report = verify_release(w.root)
    assert_only(report, "counts", "holes")  # the notes' table still reads 5
    assert "1 units publish a wrong released count" in report["counts"].detail


# ---- generalised classes ---------------------------------------------------------------


def _class_scene(n_class: int) -> Scene:
    """Groups as in the minimal scene plus ``n_class`` generalised records in unit 'west'."""
    base = minimal_scene()
    extra = n_class
    x = (*base.x, *(8000.25 + 97.5 * i for i in range(extra)))
    y = (*base.y, *(1000.75 + 53.25 * i for i in range(extra)))
    subjects = tuple(f"subj-{i:04d}" for i in range(12 + extra))
    return base.with_(
        x=x,
        y=y,
        subjects=subjects,
        units=(*base.units, *("west",) * extra),
        disposal=(*base.disposal, *("generalised",) * extra),
        group_id=(*base.group_id, *(None,) * extra),
        class_id=(*base.class_id, *(0,) * extra),
        classes={0: ("unit", "west")},
    )


def test_generalised_class_passes_with_k_and_fails_with_k_minus_1(tmp_path: Path) -> None:
    w = write_release(tmp_path / "a", _class_scene(5))
    report = verify_release(w.root, source=w.source)
    assert report.passed, format_report(report)
    w = write_release(tmp_path / "b", _class_scene(4))
    report = verify_release(w.root, source=w.source)
    assert_only(report, "k_subjects")
    assert "classes" in report["k_subjects"].detail


def test_group_counted_whole_in_its_majority_unit(tmp_path: Path) -> None:
    # group 0 straddles: 3 members in north, 2 in south; units.csv counts it in north
    scene = minimal_scene().set("units", 3, "south").set("units", 4, "south")
    scene = scene.with_(unit_cap=0.25)  # north: 1 of 4 subjects suppressed
    w = write_release(tmp_path / "out", scene)
    units = pd.read_csv(w.root / "release" / "units.csv")
    assert units.set_index("unit")["released"].to_dict() == {"north": 5, "south": 5}
    report = verify_release(w.root, source=w.source)
    assert report.passed, format_report(report)
    edit_parquet(w.root, "groups.parquet", lambda f: f.assign(unit=["south", "south"]))
    report = verify_release(w.root)
    assert "counts" in failed(report)
    assert "1 groups name a unit other than their members' majority" in report["counts"].detail


def _area_scene(subjects: bool) -> Scene:
    """Minimal groups, 1 suppressed (north), and an area class of 3 west + 3 east records."""
    base = minimal_scene()
    x = (*base.x[:11], *(8000.25 + 97.5 * i for i in range(6)))
    y = (*base.y[:11], *(1000.75 + 53.25 * i for i in range(6)))
    ids = tuple(f"subj-{i:04d}" for i in range(17))
    return base.with_(
        x=x,
        y=y,
        subjects=ids if subjects else None,
        units=(*base.units[:11], "west", "west", "west", "east", "east", "east"),
        disposal=(*base.disposal[:11], *("generalised",) * 6),
        group_id=(*base.group_id[:11], *(None,) * 6),
        class_id=(*base.class_id[:11], *(0,) * 6),
        classes={0: ("area", "area")},
    )


def test_generalised_up_cells_summing_to_a_published_class_fail_holes(tmp_path: Path) -> None:
    # with subject ids the area class's 6 records bound the two '<k' cells only loosely
    w = write_release(tmp_path / "a", _area_scene(subjects=True))
    report = verify_release(w.root, source=w.source)
    assert report.passed, format_report(report)
    # records as their own subjects: west + east = 6 published in classes.parquet, so
    # each '<k' is in [2, 4]: 1 is excluded
    w = write_release(tmp_path / "b", _area_scene(subjects=False))
    report = verify_release(w.root, source=w.source)
    assert_only(report, "holes")
    assert "generalised_up: '<k' narrowed to [2, 4]" in report["holes"].detail


def _projected_scene() -> Scene:
    base = minimal_scene()
    return base.with_(
        x=tuple(v + 150000.0 for v in base.x),
        y=tuple(v + 450000.0 for v in base.y),
        reps={g: (rx + 150000.0, ry + 450000.0) for g, (rx, ry) in base.reps.items()},
    )


def test_representatives_are_transformed_into_the_working_crs(tmp_path: Path) -> None:
    crs = {"working_crs": "EPSG:28992", "output_crs": "EPSG:4326"}
    w = write_release(tmp_path / "a", _projected_scene(), **crs)
    lon = pd.read_parquet(w.root / "release" / "groups.parquet")["x"]
    assert lon.between(3, 8).all()  # published in degrees
    report = verify_release(w.root, source=w.source)
    assert report.passed, format_report(report)
    scene = _projected_scene()
    rx, ry = scene.reps[0]
    scene = scene.set("x", 0, rx - (scene.r_max_m + 1.0)).set("y", 0, ry)
    w = write_release(tmp_path / "b", scene, **crs)
    report = verify_release(w.root)
    assert_only(report, "extent", "representation")  # the centroid moved with the member
    assert "(worst 1.00 m over)" in report["extent"].detail
    # a representative that is a member's coordinate, transformed the same way
    scene = _projected_scene()
    scene = scene.with_(reps={0: (scene.x[2], scene.y[2]), 1: scene.reps[1]})
    w = write_release(tmp_path / "c", scene, **crs)
    assert "representation" in failed(verify_release(w.root))


def test_lonlat_output_is_scanned_for_transformed_source_pairs(tmp_path: Path) -> None:
    from pyproj import Transformer

    scene = _projected_scene()
    tr = Transformer.from_crs("EPSG:28992", "EPSG:4326", always_xy=True)
    lon, lat = tr.transform(scene.x[11], scene.y[11])
    notes = f"# Notes\n\nOne record sits at {lon!r}, {lat!r}.\n"
    crs = {"working_crs": "EPSG:28992", "output_crs": "EPSG:4326"}
    w = write_release(tmp_path / "out", scene, notes=notes, **crs)
    report = verify_release(w.root)
    # the numbers are no figure of the release either: holes fails too
    assert_only(report, "no_leak", "holes")
    assert "RELEASE_NOTES.md: 1 coordinate pairs" in report["no_leak"].detail


# ---- the linear system behind `holes` ---------------------------------------------------


def _unit(name: str, suppressed: int | str, released: int = 10, total: object = None) -> dict:
    return {"unit": name, "released": released, "suppressed": suppressed, "source_total": total}


def test_hidden_ranges_single_hidden_unit_is_determined_by_the_total() -> None:
    rows = [_unit("a", 0), _unit("b", 6), _unit("c", "<k")]
    (h,) = hidden_ranges(rows, k=5, global_suppressed=9, own_subjects=True)
    assert (h.low, h.high) == (3.0, 3.0)
    assert h.problem(5) is not None


def test_hidden_ranges_two_hidden_units_summing_to_two_are_pinned() -> None:
    rows = [_unit("a", "<k"), _unit("b", "<k")]
    ranges = hidden_ranges(rows, k=5, global_suppressed=2, own_subjects=True)
    assert [(h.low, h.high) for h in ranges] == [(1.0, 1.0), (1.0, 1.0)]
    # with subject ids, a subject may have several records: the total only bounds the sum
    ranges = hidden_ranges(rows, k=5, global_suppressed=2, own_subjects=False)
    assert all(h.high <= 2 and h.problem(5) for h in ranges)


def test_hidden_ranges_safe_when_the_total_is_hidden_too() -> None:
    rows = [_unit("a", "<k"), _unit("b", "<k"), _unit("c", 0)]
    ranges = hidden_ranges(rows, k=5, global_suppressed="<k", own_subjects=False)
    assert [h.cell for h in ranges] == [
        "unit a suppressed",
        "unit b suppressed",
        "global suppressed",
    ]
    assert all(h.problem(5) is None for h in ranges)
    # records as their own subjects: a + b = global <= 4, so a and b are each <= 3
    ranges = hidden_ranges(rows, k=5, global_suppressed="<k", own_subjects=True)
    assert [(h.low, h.high) for h in ranges[:2]] == [(1.0, 3.0), (1.0, 3.0)]
    assert ranges[0].problem(5)
    assert "[2, 4]" in str(ranges[2].problem(5))  # the global is known to be >= 2
    # a unit publishing 7 contradicts a global '<k'
    with pytest.raises(ValueError, match="inconsistent"):
        hidden_ranges([*rows[:2], _unit("c", 7)], k=5, global_suppressed="<k", own_subjects=False)


def test_hidden_ranges_withheld_cells() -> None:
    rows = [_unit("a", "withheld"), _unit("b", "withheld"), _unit("c", 5)]
    ranges = hidden_ranges(rows, k=5, global_suppressed=12, own_subjects=True)
    # a + b = 7: each in [0, 7]
    assert [(h.low, h.high) for h in ranges] == [(0.0, 7.0), (0.0, 7.0)]
    assert all(h.problem(5) is None for h in ranges)
    # a + b = 3: 4 values; a withheld figure owes nothing of its own (SPEC `holes`)
    ranges = hidden_ranges(rows, k=5, global_suppressed=8, own_subjects=True)
    assert [(h.low, h.high) for h in ranges] == [(0.0, 3.0), (0.0, 3.0)]
    assert all(h.problem(5) is None for h in ranges)
    # no published total: unbounded
    (h,) = hidden_ranges([_unit("a", "withheld")], k=5, global_suppressed=None, own_subjects=True)
    assert h.high == math.inf and h.problem(5) is None


def test_hidden_ranges_totals_and_pooled_records() -> None:
    rows = [_unit("a", "<k", released=10, total=13), _unit("b", 0, released=4, total=4)]
    (h, _) = hidden_ranges(rows, k=5, global_suppressed="<k", own_subjects=True)
    assert h.cell == "unit a suppressed" and (h.low, h.high) == (3.0, 3.0)
    rows[1]["source_total"] = 9
    # 5 records went to a parent class; b's row (9 - 4 = 5) accounts for all of them, so
    # a's gap is still 13 - 10 = 3
    (h, _) = hidden_ranges(rows, k=5, global_suppressed="<k", own_subjects=True, pooled_records=5)
    assert (h.low, h.high) == (3.0, 3.0)
    # b's total withheld, 8 pooled: a's gap of 3 is suppressed or pooled in any mix, and
    # b's withheld total is 4 + (6..8) (a keeps at least 1 suppressed): 3 possible values,
    # and it owes nothing (a secondary suppression); a's '<k' is narrowed to 1..3
    rows[1]["source_total"] = "withheld"
    ha, hb, _ = hidden_ranges(
        rows, k=5, global_suppressed="<k", own_subjects=True, pooled_records=8
    )
    assert (ha.low, ha.high) == (1.0, 3.0) and ha.problem(5) is not None
    assert hb.cell == "unit b source_total" and (hb.low, hb.high) == (10.0, 12.0)
    assert hb.problem(5) is None


def test_hidden_ranges_fast_mode_flags_the_same_cells_as_exact_mode() -> None:
    rng = np.random.default_rng(7)
    k = 5
    compared = 0
    for _ in range(15):
        rows = []
        pooled = 0
        for u in range(int(rng.integers(2, 6))):
            s_true = int(rng.choice([0, 1, 2, 3, 6]))
            g_true = int(rng.choice([0, 1, 2, 5]))
            pooled += g_true
            released = int(rng.integers(5, 30))
            shown = "<k" if 0 < s_true < k else s_true
            up = "<k" if 0 < g_true < k else g_true
            total = "withheld" if "<k" in (shown, up) else released + s_true + g_true
            rows.append(
                {
                    "unit": f"u{u}",
                    "released": released,
                    "suppressed": shown,
                    "generalised_up": up,
                    "source_total": total,
                }
            )
        kwargs = {
            "k": k,
            "global_suppressed": None if rng.random() < 0.5 else "<k",
            "own_subjects": True,
            "pooled_records": pooled,
            "record_bound": 1000,
        }
        try:
            exact = hidden_ranges(rows, exact=True, **kwargs)
        except ValueError:
            continue  # e.g. a global '<k' with 6 suppressed in one unit
        fast = hidden_ranges(rows, exact=False, **kwargs)
        assert [h.cell for h in fast] == [h.cell for h in exact]
        assert [h.problem(k) for h in fast] == [h.problem(k) for h in exact]
        compared += 1
    assert compared >= 6


def test_hidden_ranges_k2_less_than_k_always_reveals() -> None:
    (h, _) = hidden_ranges([_unit("a", "<k")], k=2, global_suppressed="<k", own_subjects=True)
    assert h.problem(2) is not None


# ---- the report ------------------------------------------------------------------------


def test_format_report_one_line_per_check() -> None:
    report = VerificationReport(
        (
            CheckResult("k_subjects", True, "2 groups"),
            CheckResult("extent", False, "3 members in 2 groups beyond r_max (worst 1.00 m over)"),
        )
    )
    lines = format_report(report).splitlines()
    assert lines[0].startswith("PASS k_subjects")
    assert lines[1].startswith("FAIL extent") and lines[1].endswith("(worst 1.00 m over)")
    assert lines[2].startswith("SKIP deterministic")
    assert not report.passed and report.failed == ("extent",)
    assert report.as_dict() == {"k_subjects": True, "extent": False}


def test_details_hold_no_coordinates_or_ids(tmp_path: Path) -> None:
    scene = minimal_scene()
    rx, ry = scene.reps[0]
    scene = scene.set("x", 0, rx - 101.0).set("y", 0, ry).set("subjects", 4, "subj-0003")
    w = write_release(tmp_path / "out", scene)
    text = format_report(verify_release(w.root, source=w.source))
    for value in (*scene.x, *scene.y):
        assert repr(value) not in text
    assert "subj-" not in text
    json.dumps(verify_release(w.root).as_dict())

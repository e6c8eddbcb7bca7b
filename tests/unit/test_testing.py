"""geokanon.testing: the assertions pass on a valid release and name what fails on mutants."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings

from geokanon.errors import InputError
from geokanon.testing import (
    PublishedTables,
    assert_group_extents,
    assert_k_anonymous,
    assert_no_recoverable_hole,
    assert_release_verifies,
    assert_unit_caps,
    load_release,
)
from geokanon.testing.strategies import (
    households,
    point_sets,
    repeat_visitors,
    rural_scatter,
    towns,
)
from tests.release_fixtures import edit_manifest, minimal_scene, write_release

# minimal_scene: 12 records, k = 5, r_max 100 m; group 0 (5 subjects, unit north),
# group 1 (5, south), one suppressed record in each unit (unit share 1/6).
SECRETS = ("1003.25", "1011.5", "subj-")


def no_secret(message: str) -> None:
    for s in SECRETS:
        assert s not in message, f"message leaks {s!r}"


@pytest.fixture
def valid(tmp_path):
    return write_release(tmp_path / "out", minimal_scene())


def test_everything_passes_on_a_valid_release(valid):
    rel = load_release(valid.root, source=valid.source)
    assert rel.has_audit and rel.k == 5 and rel.r_max_m == 100.0
    assert_k_anonymous(rel, 5)
    assert_group_extents(rel, 100.0)
    assert_unit_caps(rel, 0.2)
    assert_no_recoverable_hole(rel.tables())
    assert_release_verifies(valid.root, valid.source)
    # the defaults are the release's own parameters; a path works as well as a Release
    assert_k_anonymous(valid.root)
    assert_group_extents(valid.root)


def test_k_anonymous_names_the_group_and_the_shortfall(tmp_path):
    scene = minimal_scene().set("subjects", 4, "subj-0003")  # group 0: 4 distinct subjects
    w = write_release(tmp_path / "out", scene)
    with pytest.raises(AssertionError) as err:
        assert_k_anonymous(load_release(w.root, source=w.source), 5)
    msg = str(err.value)
    assert msg == "1 of 2 groups hold fewer than k=5 distinct subjects: group 0 has 4 (1 short)"
    no_secret(msg)
    # a stricter k fails every group, smallest first
    with pytest.raises(AssertionError) as err:
        assert_k_anonymous(w.root, 6)
    assert str(err.value) == (
        "2 of 2 groups hold fewer than k=6 distinct subjects: group 0 has 4 (2 short), "
        "group 1 has 5 (1 short)"
    )


def test_k_anonymous_without_the_audit_checks_published_sizes(valid):
    shutil.rmtree(valid.root / "audit")
    rel = load_release(valid.root)
    assert not rel.has_audit
    assert_k_anonymous(rel, 5)
    with pytest.raises(AssertionError, match=r"records \(no audit/: subjects unknown\)"):
        assert_k_anonymous(rel, 6)
    with pytest.raises(InputError, match="needs the custodian's audit"):
        assert_unit_caps(rel, 0.1)


def test_group_extents_names_the_group_and_the_metres(tmp_path):
    # record 0 moved west, beyond r_max of its group's representative (the rule's point)
    scene = minimal_scene().set("x", 0, 918.5)
    w = write_release(tmp_path / "out", scene)
    rx, ry = scene.reps[0]
    over = math.hypot(scene.x[0] - rx, scene.y[0] - ry) - 100.0
    assert over > 0.5
    with pytest.raises(AssertionError) as err:
        assert_group_extents(load_release(w.root), 100.0)
    msg = str(err.value)
    assert msg == (
        "1 of 2 groups have members beyond r_max=100 m of their representative: "
        f"group 0 by {over:.2f} m (1 member)"
    )
    no_secret(msg)
    # a tighter r_max: the published radius itself is too large, and members are beyond it
    with pytest.raises(AssertionError, match=r"2 groups publish a radius above r_max=10 m"):
        assert_group_extents(w.root, 10.0)


def test_unit_caps_name_the_unit_and_the_points_over(valid):
    assert_unit_caps(valid.root, 0.17)  # 1/6 of each unit suppressed
    with pytest.raises(AssertionError) as err:
        assert_unit_caps(valid.root, 0.1)
    msg = str(err.value)
    assert msg == (
        "2 of 2 units over the unit cap 10%: north 16.67% of 6 subjects suppressed "
        "(6.67 points over), south 16.67% of 6 subjects suppressed (6.67 points over)"
    )
    with pytest.raises(InputError, match="unit_cap must be a share"):
        assert_unit_caps(valid.root, 0)


def test_hole_through_a_published_global_count(valid):
    # both units publish '<k'; publishing the global count 2 pins each to exactly 1
    edit_manifest(valid.root, lambda m: m["counts"].update(suppressed=2))
    with pytest.raises(AssertionError) as err:
        assert_no_recoverable_hole(load_release(valid.root).tables())
    msg = str(err.value)
    assert msg.startswith("2 of 2 hidden figures can be narrowed from the published tables: ")
    assert "unit north suppressed" in msg and "[1, 1]" in msg


def test_hole_on_hand_built_tables():
    rows = (
        {"unit": "a", "released": 9, "suppressed": "<k", "source_total": 10},
        {"unit": "b", "released": 7, "suppressed": 0, "source_total": 7},
    )
    # a total beside a '<k' cell gives it away: 10 - 9 = 1
    with pytest.raises(AssertionError, match=r"unit a suppressed: '<k' narrowed to \[1, 1\]"):
        assert_no_recoverable_hole(PublishedTables(units=rows, k=5, own_subjects=True))
    # withheld, that total lies in 10..13 (4 < k values), but it owes nothing of its own
    # (a secondary suppression): a's '<k' is free again
    withheld = ({**rows[0], "source_total": "withheld"}, rows[1])
    assert_no_recoverable_hole(PublishedTables(units=withheld, k=5, own_subjects=True))
    # no source totals at all: nothing to subtract from
    safe = tuple({k: v for k, v in r.items() if k != "source_total"} for r in rows)
    assert_no_recoverable_hole(PublishedTables(units=safe, k=5, own_subjects=True))
    with pytest.raises(InputError, match="k must be an integer"):
        PublishedTables(units=rows, k=1)


def test_release_verifies_lists_the_failed_checks(valid):
    path = valid.root / "release" / "units.csv"
    # tampered: a blank line (not the format's writing) and the checksum no longer matches
    path.write_text(path.read_text() + "\n")
    with pytest.raises(AssertionError) as err:
        assert_release_verifies(valid.root, valid.source)
    msg = str(err.value)
    assert msg.startswith("release does not verify: 2 of 11 checks fail: counts: units.csv ")
    assert "; manifest: 1 sha256 mismatches: units.csv" in msg
    no_secret(msg)


def test_load_release_refuses_what_is_not_a_release(tmp_path):
    with pytest.raises(InputError, match="is not a release directory"):
        load_release(tmp_path)
    (tmp_path / "release").mkdir()
    with pytest.raises(InputError, match="source file"):
        load_release(tmp_path, source=tmp_path / "missing.csv")


def test_importing_geokanon_testing_needs_neither_hypothesis_nor_pytest():
    code = (
        "import sys, geokanon.testing\n"
        "assert 'hypothesis' not in sys.modules and 'pytest' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- strategies --------------------------------------------------------------------------


def _check_frame(df: pd.DataFrame) -> None:
    assert list(df.columns) == ["x", "y", "subject", "unit"]
    assert df["x"].notna().all() and df["y"].notna().all()
    assert (df["x"].round(2) == df["x"]).all()


@settings(max_examples=15, deadline=None)
@given(towns(), rural_scatter(), households(), repeat_visitors())
def test_part_strategies(t, r, h, v):
    for df in (t, r, h, v):
        _check_frame(df)
    assert len(t) >= 5
    # households: one address per household, subjects distinct
    assert h["subject"].is_unique
    assert h.groupby(["x", "y"]).size().max() <= 6
    # repeat visitors: every subject has >= 2 records
    assert v.groupby("subject").size().min() >= 2


@settings(max_examples=15, deadline=None)
@given(point_sets(max_records=120, min_subjects=5))
def test_point_sets_mix(df):
    _check_frame(df)
    assert df["subject"].nunique() >= 5
    assert len(df) <= 120 + 5


@settings(max_examples=5, deadline=None)
@given(point_sets(max_records=80, min_subjects=3))
def test_point_sets_feed_the_pipeline(df):
    from geokanon.io import table_from_frame
    from geokanon.pipeline import classify_points
    from geokanon.policy import OutlierPolicy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unnamed CRS, many disposals: expected here
        table = table_from_frame(df, subject="subject", unit="unit")
        result = classify_points(table, OutlierPolicy(k=3, r_max_m=300.0))
    assert sum(result.counts.values()) == len(df)


def test_downstream_project_files_exist():
    root = Path(__file__).resolve().parents[1] / "downstream"
    assert (root / "pytest.ini").is_file()

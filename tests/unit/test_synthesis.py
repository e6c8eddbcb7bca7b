"""Opt-in synthesis: one stand-in per suppressed subject and unit, in a class of its unit."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.disposal import group_units, run_core
from geokanon.io.read import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import Disposal, OutlierPolicy
from geokanon.verify import format_report, verify_release
from tests.release_fixtures import edit_csv, edit_manifest, edit_parquet

POLICY = OutlierPolicy(k=5, r_max_m=500.0, tau=0.2, unit_cap=1.0, allow_synthetic=True)


def _scene(farms: int = 1) -> pd.DataFrame:
    """Unit a: a town and a far farm; b: a village and a farm; c: only a farm;
    d: a scattered hamlet that can only be generalised (its own class) and a farm.

    With ``farms=2`` units a, b and d have a second farm, as far from everything: six
    stand-ins then, whose number (public: the published records minus the real ones)
    leaves each hidden unit every value 1..4. With one farm each, three stand-ins pin
    each of the three hidden units to 1, and the release is refused."""
    rng = np.random.default_rng(3)
    town = rng.normal(0, 120, (60, 2))
    village = rng.normal(0, 60, (12, 2)) + np.array([8000.0, 0.0])
    hamlet = np.array([[0, 0], [900, 0], [0, 900], [900, 900], [450, 450], [1800, 0.0]])
    hamlet += [0, 30_000]
    far = np.array([[20000.0, 0], [8000, 9000], [-30000, 100], [0, 40000.0]])
    second = np.array([[20000.0, 6000], [8000, 16000], [7000, 40000.0]])[: 3 * (farms - 1)]
    xy = np.r_[town, village, hamlet, far, second]
    unit = ["a"] * 60 + ["b"] * 12 + ["d"] * 6 + ["a", "b", "c", "d"]
    unit += ["a", "b", "d"][: len(second)]
    ages = rng.integers(1, 90, len(xy))
    return pd.DataFrame(
        {"x": xy[:, 0] + 500_000, "y": xy[:, 1] + 5_000_000, "unit": unit, "age": ages}
    )


def _table(frame: pd.DataFrame | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return table_from_frame(_scene() if frame is None else frame, unit="unit",
                                crs="EPSG:32631")  # fmt: skip


def _core(policy: OutlierPolicy = POLICY):
    t = _table()
    return t, run_core(t.x, t.y, policy, unit_codes=t.unit_codes, unit_names=t.unit_names)


def test_group_units_majority_and_ties():
    g = np.array([0, 0, 0, 1, 1, 2, -1])
    u = np.array([4, 1, 4, 2, 1, 3, 0])
    assert group_units(g, u, 4).tolist() == [4, 1, 3, 0]
    # With names, a tie goes to the id first in sort order, not the lowest code:
    # group 1 ties between codes 2 ("a") and 1 ("b").
    names = np.array(["z", "b", "a", "c", "y"], dtype=object)
    assert group_units(g, u, 4, names).tolist() == [4, 2, 3, 0]


def test_one_stand_in_per_suppressed_subject_in_a_class_of_its_unit():
    t, res = _core()
    names = np.asarray(t.unit_names, dtype=str)
    sup = np.flatnonzero(res.disposal == Disposal.SUPPRESSED)
    assert sup.size == 4  # the four farms
    syn = res.synthetic
    # c has no published class of its own: its farm gets no stand-in.
    assert sorted(names[syn.unit]) == ["a", "b", "d"]
    assert set(syn.stands_for.tolist()) <= set(sup.tolist())
    gu = group_units(res.group_id, t.unit_codes, res.group_x.size, t.unit_names)
    for gid, cid, unit in zip(syn.group_id, syn.class_id, syn.unit, strict=True):
        if cid >= 0:
            assert res.class_level[cid] == "unit" and res.class_unit[cid] == names[unit]
        else:
            assert gu[gid] == unit
    # d's hamlet forms a unit-level class: the stand-in goes there, not to a group.
    d = int(np.flatnonzero(names == "d")[0])
    assert syn.class_id[syn.unit == d][0] >= 0
    # a's stand-in joins the group nearest the farm.
    a = int(np.flatnonzero(names == "a")[0])
    farm = syn.stands_for[syn.unit == a][0]
    ga = np.flatnonzero(gu == a)
    dist = np.hypot(res.group_x[ga] - t.x[farm], res.group_y[ga] - t.y[farm])
    assert syn.group_id[syn.unit == a][0] == ga[np.argmin(dist)]


def test_synthesis_changes_no_disposal_and_no_cap_figure():
    _, with_syn = _core()
    _, without = _core(OutlierPolicy(k=5, r_max_m=500.0, tau=0.2, unit_cap=1.0))
    assert np.array_equal(with_syn.disposal, without.disposal)
    assert np.array_equal(with_syn.group_id, without.group_id)
    assert with_syn.units.rows() == without.units.rows()
    assert len(without.synthetic) == 0


def test_no_synthesis_without_suppression():
    x = np.arange(20.0) * 10
    res = run_core(x, np.zeros(20), POLICY)
    assert len(res.synthetic) == 0


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("syn") / "out"
    from geokanon.release import ReleaseOptions

    release_points(_table(_scene(2)), POLICY, out, ReleaseOptions(keep=("age",)))
    return out


def _source():
    return _table(_scene(2))


def test_release_publishes_stand_ins_and_verifies(released: Path):
    manifest = json.loads((released / "release" / "manifest.json").read_text())
    assert all(manifest["verification"].values())
    syn = pd.read_parquet(released / "audit" / "synthetic.parquet")
    assert len(syn) == 6 and sorted(syn["unit"]) == ["a", "a", "b", "b", "d", "d"]
    records = pd.read_parquet(released / "release" / "records.parquet")
    assignment = pd.read_parquet(released / "audit" / "assignment.parquet")
    assert len(records) == int((assignment["disposal"] != "suppressed").sum()) + 6
    units = pd.read_csv(released / "release" / "units.csv", dtype=str)
    assert "synthetic" in units.columns
    # Every per-unit synthetic figure is 0 or hidden like the suppressed figure beside it.
    assert set(units["synthetic"]) <= {"0", "<k"}
    hidden = units["synthetic"] == "<k"
    assert (units.loc[hidden, "suppressed"] == "<k").all()
    assert manifest["synthetic"]["allowed"] is True
    assert manifest["counts"]["synthetic"] == "withheld"  # a sum of hidden cells
    # A synthetic row copies a real row of its class: no row is unlike the real ones.
    real = records.drop(columns="geometry").astype(str).drop_duplicates()
    assert len(real.merge(records.drop(columns="geometry").astype(str))) >= len(records)
    notes = (released / "release" / "RELEASE_NOTES.md").read_text()
    assert "synthetic records" in notes


def test_release_with_synthesis_is_independent_of_row_order(tmp_path: Path):
    frame = _scene(2)
    a = tmp_path / "a"
    b = tmp_path / "b"
    release_points(_table(frame), POLICY, a)
    release_points(_table(frame.sample(frac=1.0, random_state=7).reset_index(drop=True)),
                   POLICY, b)  # fmt: skip
    for name in ("records.parquet", "records.csv", "groups.parquet", "classes.parquet",
                 "units.csv"):  # fmt: skip
        assert (a / "release" / name).read_bytes() == (b / "release" / name).read_bytes(), name


def _copy(released: Path, tmp_path: Path) -> Path:
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(released, root)
    return root


def test_counting_synthetic_records_towards_k_is_caught(released: Path, tmp_path: Path):
    # Mark real members of a group as synthetic in the audit: the group keeps its
    # published size but no longer has k real subjects.
    root = _copy(released, tmp_path)
    assignment = pd.read_parquet(root / "audit" / "assignment.parquet")
    g = int(assignment["group_id"].dropna().astype(int).value_counts().idxmin())
    members = assignment.index[assignment["group_id"] == g]
    syn = pd.read_parquet(root / "audit" / "synthetic.parquet")
    extra = pd.DataFrame({"group_id": pd.array([g], dtype="Int64"),
                          "class_id": pd.array([None], dtype="Int64"),
                          "unit": [str(assignment.loc[members[0], "unit"])],
                          "stands_for_row": [0]})  # fmt: skip
    pd.concat([syn, extra]).to_parquet(root / "audit" / "synthetic.parquet", index=False)
    assignment.loc[members[:1], ["group_id", "disposal"]] = [pd.NA, "suppressed"]
    assignment.to_parquet(root / "audit" / "assignment.parquet", index=False)
    report = verify_release(root, source=_source())
    assert not report["k_subjects"].passed, format_report(report)


def test_wrong_per_unit_synthetic_count_fails_counts(released: Path, tmp_path: Path):
    root = _copy(released, tmp_path)

    def zero(f: pd.DataFrame) -> pd.DataFrame:
        f["synthetic"] = "0"
        return f

    edit_csv(root, "units.csv", zero)
    edit_manifest(root, lambda m: m["synthetic"].update(per_unit={}))
    report = verify_release(root, source=_source())
    assert not report["counts"].passed
    assert "wrong synthetic count" in report["counts"].detail


def test_stand_ins_whose_number_pins_hidden_units_are_refused(tmp_path: Path, capsys):
    """Three hidden units of one stand-in each: the stand-ins' number is the published
    records minus the real ones the counts give (3), so each unit's '<k' is exactly 1,
    published total or not. Before 2026-12-07 such a release was written and verified."""
    from geokanon.cli import main
    from geokanon.errors import ReleaseRefused

    with pytest.raises(ReleaseRefused, match="synthesis would give hidden figures away"):
        release_points(_table(), POLICY, tmp_path / "api")
    assert not (tmp_path / "api" / "release").exists()
    csv = tmp_path / "in.csv"
    _scene().to_csv(csv, index=False)
    code = main(["--quiet", "release", str(csv), "--k", "5", "--r-max", "500", "--unit", "unit",
                 "--crs", "EPSG:32631", "--tau", "0.2", "--unit-cap", "1", "--allow-synthetic",
                 "--out", str(tmp_path / "cli")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "Release without --allow-synthetic" in err, err
    assert not (tmp_path / "cli" / "release").exists()


def test_holes_ties_the_hidden_stand_ins_to_their_public_number(tmp_path: Path, monkeypatch):
    """The verifier finds the same on its own: with the writer's refusal switched off, the
    release fails ``holes`` (each hidden unit narrowed to exactly 1) and nothing is written."""
    from geokanon import release as writer
    from geokanon.errors import VerificationFailed

    monkeypatch.setattr(writer, "_hidden_cells_safe", lambda *a, **kw: True)
    with pytest.raises(VerificationFailed, match=r"holes: 3 of 4 hidden figures recoverable"):
        release_points(_table(), POLICY, tmp_path / "out")
    assert not (tmp_path / "out" / "release").exists()


def test_a_published_synthetic_total_that_differs_fails_holes(released: Path, tmp_path: Path):
    # The stand-ins' number is a figure of the release already: a total that differs from
    # it is inconsistent with the other figures.
    root = _copy(released, tmp_path)
    edit_manifest(root, lambda m: (m["counts"].update(synthetic=3),
                                   m["synthetic"].update(total=3)))  # fmt: skip
    report = verify_release(root, source=_source())
    assert not report["holes"].passed, format_report(report)


def test_synthetic_rows_in_records_must_match_the_audit(released: Path, tmp_path: Path):
    root = _copy(released, tmp_path)
    edit_parquet(root, "records.parquet", lambda f: f.iloc[:-1])
    report = verify_release(root, source=_source())
    assert not report["counts"].passed


def test_cli_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from geokanon.cli import main

    csv = tmp_path / "in.csv"
    _scene(2).to_csv(csv, index=False)
    code = main(["--quiet", "release", str(csv), "--k", "5", "--r-max", "500", "--unit", "unit",
                 "--crs", "EPSG:32631", "--tau", "0.2", "--unit-cap", "1", "--allow-synthetic",
                 "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "6 synthetic stand-ins" in out


def test_a_kept_value_no_member_has_fails_counts_where_stand_ins_are(
    released: Path, tmp_path: Path
):
    # A group or class with a stand-in publishes its members' values and copies of them:
    # an age that none of its members has is caught (in both records files alike).
    root = _copy(released, tmp_path)
    syn = pd.read_parquet(root / "audit" / "synthetic.parquet")
    cid = int(syn["class_id"].dropna().iloc[0])

    def older(f: pd.DataFrame) -> pd.DataFrame:
        at = f.index[pd.to_numeric(f["class_id"], errors="coerce") == cid][0]
        f.loc[at, "age"] = 1000 if f["age"].dtype.kind in "iuf" else "1000"
        return f

    report = verify_release(root, source=_source())
    assert report["counts"].passed, format_report(report)
    edit_parquet(root, "records.parquet", older, refresh=False)
    edit_csv(root, "records.csv", older)
    report = verify_release(root, source=_source())
    assert report.failed == ("counts",), format_report(report)
    assert "synthetic records are not their members'" in report["counts"].detail

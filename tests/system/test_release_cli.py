"""Whole ``geokanon release`` / ``verify`` runs: the product as a custodian uses it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from geokanon.cli import main

DW_ARGS = ["--k", "5", "--unit", "gm_code", "--crs", "EPSG:28992"]


def release_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "release").iterdir())}


@pytest.fixture(scope="module")
def dwellings_release(tmp_path_factory, request):
    from tests.conftest import data_file

    src = data_file("sdcspatial_dwellings", "dwellings.csv")
    out = tmp_path_factory.mktemp("dw") / "out"
    code = main(
        ["release", str(src), *DW_ARGS, "--r-max", "300", "--keep", "consumption,unemployed",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return src, out


def test_release_written_and_verifies(dwellings_release, capsys):
    src, out = dwellings_release
    rel = out / "release"
    for name in (
        "records.parquet",
        "records.csv",
        "groups.parquet",
        "classes.parquet",
        "units.csv",
        "manifest.json",
        "RELEASE_NOTES.md",
    ):
        assert (rel / name).exists(), name
    assert (out / "audit" / "assignment.parquet").exists()
    manifest = json.loads((rel / "manifest.json").read_text())
    for key in (
        "k",
        "r_max_m",
        "tau",
        "unit_cap",
        "crs",
        "counts",
        "suppressed_share",
        "passes",
        "verification",
        "seed",
        "input_sha256",
        "version",
        "files",
    ):
        assert key in manifest, key
    assert manifest["crs"] == "EPSG:28992"
    assert all(manifest["verification"].values())
    assert manifest["verification"]["deterministic"] is True
    assert set(manifest["files"]) == {p.name for p in rel.iterdir()} - {"manifest.json"}
    groups = pd.read_parquet(rel / "groups.parquet")
    assert {"group_id", "n_records", "x", "y"} <= set(groups.columns)
    assignment = pd.read_parquet(out / "audit" / "assignment.parquet")
    assert {"source_row", "label", "disposal", "group_id", "unit"} <= set(assignment.columns)
    assert len(assignment) == 90603
    # Only the kept attributes pass through; no ids, no source rows.
    records = pd.read_csv(rel / "records.csv")
    assert "point_id" not in records.columns and "source_row" not in records.columns
    assert {"consumption", "unemployed"} <= set(records.columns)
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for check in (
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
    ):
        assert any(check in line for line in lines), check


def test_release_is_deterministic_and_row_order_free(dwellings_release, tmp_path):
    src, out = dwellings_release
    shuffled = tmp_path / "shuffled.csv"
    frame = pd.read_csv(src)
    frame.sample(frac=1.0, random_state=3).to_csv(shuffled, index=False)
    out2 = tmp_path / "again"
    code = main(
        ["release", str(shuffled), *DW_ARGS, "--r-max", "300", "--keep", "consumption,unemployed",
         "--out", str(out2)]
    )  # fmt: skip
    assert code == 0
    a, b = release_files(out), release_files(out2)
    # The manifest differs only in the input checksum (the file's bytes differ).
    ma, mb = json.loads(a.pop("manifest.json")), json.loads(b.pop("manifest.json"))
    assert a == b
    assert ma["input_sha256"] != mb["input_sha256"]
    ma.pop("input_sha256"), mb.pop("input_sha256")
    assert ma == mb


def test_refused_at_100m_names_units_and_writes_nothing(dwellings_csv, tmp_path, capsys):
    out = tmp_path / "refused"
    code = main(["release", str(dwellings_csv), *DW_ARGS, "--r-max", "100", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3
    assert "GM0313" in err and "GM0203" in err and "unit cap" in err
    assert not out.exists()
    # Only the refusal report, outside any release directory; no temporary files.
    assert [p.name for p in tmp_path.iterdir()] == ["refused.refusal.html"]


def test_existing_directory_needs_force(dwellings_release, capsys):
    src, out = dwellings_release
    before = release_files(out)
    code = main(["release", str(src), *DW_ARGS, "--r-max", "300", "--out", str(out)])
    assert code == 2 and "--force" in capsys.readouterr().err
    assert release_files(out) == before


def test_verify_fails_on_tampering(dwellings_release, tmp_path, capsys):
    import shutil

    src, out = dwellings_release
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    path = copy / "release" / "units.csv"
    path.write_text(path.read_text().replace(",0\n", ",1\n", 1))
    assert main(["verify", str(copy), "--source", str(src)]) == 4
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.slow
def test_sigkill_never_leaves_a_partial_release(dwellings_csv, tmp_path):
    rng = random.Random(11)
    for attempt in range(3):
        out = tmp_path / f"k{attempt}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "geokanon", "release", str(dwellings_csv), *DW_ARGS,
             "--r-max", "300", "--out", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(rng.uniform(2.0, 12.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        rel = out / "release"
        if rel.exists():
            # Only a complete release may exist: the manifest lists every file.
            manifest = json.loads((rel / "manifest.json").read_text())
            assert set(manifest["files"]) == {p.name for p in rel.iterdir()} - {"manifest.json"}
            assert all(manifest["verification"].values())


def test_describe_and_dry_run_write_nothing(dwellings_csv, tmp_path, capsys):
    assert main(["describe", str(dwellings_csv), *DW_ARGS, "--r-max", "300"]) == 0
    text = capsys.readouterr().out
    assert "EPSG:28992" in text and "GM0307" in text and "k=5" in text
    out = tmp_path / "dry"
    argv = ["release", str(dwellings_csv), *DW_ARGS, "--r-max", "300", "--out", str(out)]
    assert main([*argv, "--dry-run"]) == 0
    assert "stages" in capsys.readouterr().out
    assert not out.exists()


def test_geolife_subjects_and_times_end_to_end(tmp_path, capsys):
    from tests.conftest import data_file

    src = data_file("geolife_trackintel_11users", "positionfixes.csv")
    out = tmp_path / "geo"
    argv = ["release", str(src), "--lon", "lon", "--lat", "lat", "--subject", "user_id",
            "--time", "tracked_at_utc", "--k", "3", "--r-max", "200", "--t-max", "3600",
            "--membership-sensitive", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    records = pd.read_csv(out / "release" / "records.csv")
    assert "time_bin" in records.columns and "user_id" not in records.columns
    assert records["time_bin"].notna().all()
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert manifest["crs"] == "EPSG:4326"
    assert all(manifest["verification"].values())


@pytest.mark.parametrize(
    ("given", "hinted"), [("lonlat", False), ("xy", False), ("xy-output-crs", True)]
)
def test_a_no_leak_refusal_of_carried_coordinates_says_how_to_compare_exactly(
    tmp_path, capsys, monkeypatch, given: str, hinted: bool
):
    """A release published in a CRS other than the input's (--output-crs) has only the
    records' coordinates carried there, so its own no_leak matches pairs within the
    transformation's round-off (about 2 mm between RD and lon/lat): a
    refusal says so and how to compare exactly. Lon/lat input published as lon/lat keeps
    the input's values and x/y input publishes its own: nothing is added."""
    import geokanon.pipeline
    from geokanon.errors import VerificationFailed

    def refuse(*_a: object, **_k: object) -> None:
        raise VerificationFailed(
            "the release failed the independent checks ['no_leak']; nothing was written",
            {"no_leak": False},
        )

    monkeypatch.setattr(geokanon.pipeline, "release_points", refuse)
    rows = [(5.40 + i * 1e-3, 52.15 + (i % 7) * 1e-3, f"p{i}") for i in range(40)]
    frame = pd.DataFrame(rows, columns=["lon", "lat", "who"])
    if given == "lonlat":
        args = ["--lon", "lon", "--lat", "lat"]
    else:
        frame = frame.rename(columns={"lon": "x", "lat": "y"})
        frame[["x", "y"]] = frame[["x", "y"]] * 1e4 + [100_000, 400_000]
        args = ["--x", "x", "--y", "y", "--crs", "EPSG:28992"]
        if given == "xy-output-crs":
            args += ["--output-crs", "EPSG:4326"]
    src = tmp_path / "in.csv"
    frame.to_csv(src, index=False)
    capsys.readouterr()
    code = main(["--quiet", "release", str(src), *args, "--subject", "who", "--k", "3",
                 "--r-max", "500", "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 4
    assert "['no_leak']" in err
    assert ("drop --output-crs" in err) is hinted
    assert not (tmp_path / "out").exists()


def test_keep_given_several_times_publishes_every_column():
    """``--keep a --keep b,c`` keeps all three (argparse would keep the last alone)."""
    from geokanon.cli import _kept_columns, build_parser

    args = build_parser().parse_args(
        ["release", "in.csv", "--k", "5", "--r-max", "300", "--out", "o",
         "--keep", "age", "--keep", " score,tag ", "--keep", "age"]
    )  # fmt: skip
    assert _kept_columns(args.keep) == ("age", "score", "tag")
    args = build_parser().parse_args(
        ["release", "in.csv", "--k", "5", "--r-max", "3", "--out", "o"]
    )
    assert _kept_columns(args.keep) == ()


def test_keep_names_a_column_whose_name_holds_a_comma(tmp_path, capsys):
    """A --keep value that is exactly a column's name is that column, commas and padding
    included; it was split at the comma and refused as two missing columns."""
    from geokanon.cli import _kept_columns, main

    columns = ['dose, mg "daily"', " padded ", "age", "score"]
    assert _kept_columns(['dose, mg "daily"', "age,score", " padded "], columns) == (
        'dose, mg "daily"', "age", "score", " padded ",
    )  # fmt: skip
    assert _kept_columns(["age, score"], columns) == ("age", "score")
    import numpy as np

    rng = np.random.default_rng(8)
    xy = rng.normal(0.0, 120.0, (200, 2)) + np.array([155_000.0, 463_000.0])
    frame = pd.DataFrame(xy, columns=["x", "y"])
    frame['dose, mg "daily"'] = rng.integers(0, 4, 200)
    frame.to_parquet(tmp_path / "in.parquet")
    argv = ["--quiet", "release", str(tmp_path / "in.parquet"), "--crs", "EPSG:28992",
            "--k", "5", "--r-max", "150", "--tau", "0.2", "--unit-cap", "1",
            "--keep", 'dose, mg "daily"', "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    header = (tmp_path / "out" / "release" / "records.csv").read_text().splitlines()[0]
    assert header.endswith('"dose, mg ""daily"""')

"""Issue 16, item 3: every command reads every input, with the same options.

``verify`` and ``risk`` read a source in any format ``release`` reads (GeoPackage,
GeoJSON, ``.csv.gz``, GeoParquet, a ``;``-separated CSV) and take the input and policy
options ``release`` took: a value given must agree with the release's record (else
exit 2 naming both values), a value left out is the release's. ``--help`` marks the
required options.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest

from geokanon.cli import build_parser, main
from geokanon.verify._reader import _load_source

N = 400


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(16)
    return pd.DataFrame(
        {
            "x": (155_000 + rng.normal(0, 250, N)).round(2),
            "y": (463_000 + rng.normal(0, 250, N)).round(2),
            "person": [f"P{i % 260:04d}" for i in range(N)],
            "zone": ["A" if i % 2 else "B" for i in range(N)],
        }
    )


def _as_points(frame: pd.DataFrame) -> gpd.GeoDataFrame:
    return gpd.GeoDataFrame(
        frame.drop(columns=["x", "y"]),
        geometry=gpd.points_from_xy(frame["x"], frame["y"]),
        crs="EPSG:28992",
    )


RELEASE = ["--subject", "person", "--unit", "zone", "--k", "5", "--r-max", "150"]
CAPS = ["--tau", "0.5", "--unit-cap", "1"]


@pytest.fixture(scope="module")
def gpkg_release(tmp_path_factory) -> tuple[Path, Path, str]:
    """A release whose source is a GeoPackage (its CRS in the file, no --crs)."""
    root = tmp_path_factory.mktemp("gpkg")
    src = root / "points.gpkg"
    _as_points(_frame()).to_file(src)
    out = root / "out"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["release", str(src), *RELEASE, *CAPS, "--out", str(out)]) == 0
    return src, out, buf.getvalue()


def test_verify_reads_a_geopackage_source(gpkg_release, capsys):
    src, out, _ = gpkg_release
    assert main(["verify", str(out), "--source", str(src)]) == 0
    text = capsys.readouterr().out
    assert "PASS no_leak" in text and "PASS manifest" in text


def test_verify_and_risk_take_the_release_options_that_agree(gpkg_release, capsys):
    src, out, _ = gpkg_release
    agree = [*RELEASE, *CAPS, "--time-mode", "absolute", "--seed", "0"]
    assert main(["verify", str(out), "--source", str(src), *agree]) == 0
    assert "PASS k_subjects" in capsys.readouterr().out
    assert main(["risk", str(out), "--source", str(src), *agree, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 5


@pytest.mark.parametrize("command", ["verify", "risk"])
@pytest.mark.parametrize(
    ("given", "both"),
    [
        (["--k", "4"], ("--k 4 given", "k=5")),
        (["--r-max", "200"], ("--r-max 200.0 given", "r_max_m=150.0")),
        (["--tau", "0.4"], ("--tau 0.4 given", "tau=0.5")),
        (["--unit", "person"], ("--unit person given", "--unit zone")),
        (["--subject", "zone"], ("--subject zone given", "--subject person")),
        (["--crs", "EPSG:4326"], ("--crs EPSG:4326 given", "without --crs")),
        (["--t-max", "600"], ("--t-max 600.0 given", "without t_max_s")),
        (["--drop-duplicates"], ("--drop-duplicates given", "without --drop-duplicates")),
    ],
)
def test_an_option_that_disagrees_exits_2_naming_both(gpkg_release, capsys, command, given, both):
    src, out, _ = gpkg_release
    assert main([command, str(out), "--source", str(src), *given]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in both), err


def test_config_values_must_agree_too(gpkg_release, tmp_path, capsys):
    src, out, _ = gpkg_release
    cfg = tmp_path / "policy.toml"
    cfg.write_text("k = 5\nr_max_m = 150.0\ntau = 0.5\nunit_cap = 1.0\n")
    assert main(["verify", str(out), "--source", str(src), "--config", str(cfg)]) == 0
    capsys.readouterr()
    cfg.write_text("k = 5\nunit_cap = 0.2\n")
    assert main(["verify", str(out), "--source", str(src), "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "unit_cap in --config 0.2 given" in err and "unit_cap=1.0" in err


def test_release_ends_by_naming_the_report(gpkg_release):
    _, out, text = gpkg_release
    last = text.strip().splitlines()[-1]
    assert str(out / "release" / "report.html") in last
    assert (out / "release" / "report.html").exists()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_help_marks_every_required_option():
    required = []
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if action.required and action.option_strings:
                required.append(name)
                assert "(required" in (action.help or ""), (name, action.option_strings)
    assert {"release", "verify", "risk"} <= set(required)
    release = _subparsers(build_parser())["release"].format_help()
    assert "--k K" in release and "(required, or set in --config)" in release


# ---- verify's own reading of the source file, format by format ------------------------


def _write(frame: pd.DataFrame, path: Path) -> Path:
    name = path.name
    if name.endswith(".csv.gz"):
        frame.to_csv(path, index=False, compression="gzip")
    elif name.endswith(".tsv"):
        frame.to_csv(path, index=False, sep="\t")
    elif name.endswith("semicolon.csv"):
        frame.to_csv(path, index=False, sep=";")
    elif name.endswith(".parquet"):
        _as_points(frame).to_parquet(path)  # GeoParquet: geometry, CRS in the metadata
    else:
        _as_points(frame).to_file(path)
    return path


@pytest.mark.parametrize(
    "name", ["p.csv.gz", "p.tsv", "semicolon.csv", "geo.parquet", "p.gpkg", "p.geojson"]
)
def test_verify_reads_the_source_file_in_every_format(tmp_path, name):
    frame = _frame()
    path = _write(frame, tmp_path / name)
    audit = {"read_options": {"subject": "person", "unit": "zone"}}
    src = _load_source(path, audit, "EPSG:28992", "EPSG:28992")
    assert src.n_rows == N
    assert src.x is not None and src.y is not None
    np.testing.assert_allclose(src.x, frame["x"].to_numpy())
    np.testing.assert_allclose(src.y, frame["y"].to_numpy())
    assert src.subject_column == "person" and src.subjects is not None
    assert len(set(src.subjects.tolist())) == frame["person"].nunique()
    assert src.unit_names is not None and sorted(src.unit_names) == ["A", "B"]

"""A release says what its coordinates are: a CRS, or explicitly local metres.

Projected x/y with no ``--crs`` used to be released with a null CRS in the GeoParquet
file and the manifest, saying nothing. ``release`` now refuses that (exit 2) unless
``--local-metres`` (API: ``ReleaseOptions(local_metres=True)``) says they are metres in
a local frame; the manifest, the notes and the report then state it. ``classify`` and
``describe`` only warn.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main
from geokanon.errors import InputError
from geokanon.io import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.release import ReleaseOptions


def _frame() -> pd.DataFrame:
    """Two towns of 60 people, 4 km apart, in plain local metres."""
    rng = np.random.default_rng(616)
    xs, ys, units = [], [], []
    for i, (cx, cy) in enumerate([(1_000.0, 1_000.0), (5_000.0, 1_000.0)]):
        r = 120 * np.sqrt(rng.random(60))
        a = 2 * np.pi * rng.random(60)
        xs.append(np.round(cx + r * np.cos(a), 2))
        ys.append(np.round(cy + r * np.sin(a), 2))
        units += [f"T{i}"] * 60
    return pd.DataFrame({"x": np.concatenate(xs), "y": np.concatenate(ys), "unit": units})


@pytest.fixture
def points(tmp_path):
    path = tmp_path / "points.csv"
    _frame().to_csv(path, index=False)
    return path


ARGS = ["--k", "5", "--r-max", "250", "--unit", "unit"]


def test_release_without_a_crs_is_refused(points, tmp_path, capsys):
    out = tmp_path / "rel"
    assert main(["-q", "release", str(points), *ARGS, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no CRS" in err and "--crs" in err and "--local-metres" in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [points]  # no refusal report, no temporary files


def test_local_metres_release_states_it_everywhere(points, tmp_path):
    out = tmp_path / "rel"
    args = ["release", str(points), *ARGS, "--out", str(out), "--local-metres"]
    assert main(["-q", *args]) == 0
    rel = out / "release"
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["crs"] is None
    assert manifest["local_metres"] is True
    assert "local metres" in manifest["crs_note"]
    geo = json.loads(pq.read_schema(rel / "records.parquet").metadata[b"geo"])
    assert geo["columns"]["geometry"]["crs"] is None  # GeoParquet: null = undefined CRS
    notes = (rel / "RELEASE_NOTES.md").read_text()
    assert "coordinates: local metres, no CRS" in notes
    report = (rel / "report.html").read_text()
    assert "local metres" in report
    assert "CRS unnamed" not in report
    assert main(["verify", str(out), "--source", str(points)]) == 0


def test_a_named_crs_needs_no_statement_and_contradicts_local_metres(tmp_path, capsys):
    frame = _frame()
    frame["x"] += 150_000.0  # near Amersfoort in EPSG:28992
    frame["y"] += 450_000.0
    points = tmp_path / "rd.csv"
    frame.to_csv(points, index=False)
    out = tmp_path / "rel"
    named = ["release", str(points), *ARGS, "--crs", "EPSG:28992", "--out", str(out)]
    assert main(["-q", *named, "--local-metres"]) == 2
    assert "--local-metres says the coordinates have no CRS" in capsys.readouterr().err
    assert not out.exists()
    assert main(["-q", *named]) == 0
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert manifest["crs"] == "EPSG:28992"
    assert manifest["local_metres"] is False and "crs_note" not in manifest
    assert "local metres" not in (out / "release" / "RELEASE_NOTES.md").read_text()


def test_classify_and_describe_only_warn(points, capsys):
    assert main(["classify", str(points), *ARGS]) == 0
    assert "no CRS given" in capsys.readouterr().err
    assert main(["describe", str(points), *ARGS]) == 0
    assert "no CRS given" in capsys.readouterr().err


def test_api_release_applies_the_same_rule(tmp_path):
    with pytest.warns(UserWarning, match="no CRS given"):
        table = table_from_frame(_frame(), unit="unit")
    policy = OutlierPolicy(k=5, r_max_m=250.0)
    with pytest.raises(InputError, match="local_metres=True"):
        release_points(table, policy, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    res = release_points(table, policy, tmp_path / "b", ReleaseOptions(local_metres=True))
    assert res.manifest["local_metres"] is True and res.manifest["crs"] is None


def test_partitioned_release_applies_the_same_rule(tmp_path):
    pytest.importorskip("distributed")
    from geokanon.distributed import ParquetPartitions, release_partitions

    parts = tmp_path / "parts"
    parts.mkdir()
    _frame().to_parquet(parts / "part-0.parquet", index=False)
    source = ParquetPartitions.from_path(parts, unit="unit")
    with pytest.raises(InputError, match="--local-metres"):
        release_partitions(source, OutlierPolicy(k=5, r_max_m=250.0), tmp_path / "out")
    assert not (tmp_path / "out").exists()

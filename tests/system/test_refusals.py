"""Refusals a user can act on (issue 16, item 4).

A refusal at the unit cap ("the study area may be too broad") names options the command
line has: ``--merge-small-units N``, ``--exclude-units A,B`` and ``--study-area FILE
--clip``; and it prints one complete ``geokanon release ...`` command that passes. The
input is the dwellings' thin edge: every dwelling east of x = 159,500 m or north of
y = 468,700 m (8,352 dwellings; Barneveld GM0203 with 3 and Bunschoten GM0313 with 48 are
over the unit cap at k=5, r_max=100 m, as in the whole file).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest

from geokanon.cli import main

ARGS = ["--k", "5", "--r-max", "100", "--unit", "gm_code", "--crs", "EPSG:28992"]


@pytest.fixture(scope="module")
def edge(tmp_path_factory) -> Path:
    from tests.conftest import data_file

    d = pd.read_csv(data_file("sdcspatial_dwellings", "dwellings.csv"))
    part = d[(d.x >= 159_500) | (d.y >= 468_700)].reset_index(drop=True)
    path = tmp_path_factory.mktemp("edge") / "edge.csv"
    part.to_csv(path, index=False)
    return path


def _manifest(out: Path) -> dict:
    return json.loads((out / "release" / "manifest.json").read_text())


def _release(edge: Path, out: Path, *extra: str) -> int:
    return main(["-q", "release", str(edge), *ARGS, "--out", str(out), *extra])


def test_refusal_prints_a_command_that_passes(edge, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "refused"
    assert _release(edge, out) == 3
    err = capsys.readouterr().err
    assert "GM0203" in err and "GM0313" in err
    assert "--exclude-units GM0203,GM0313" in err and "--merge-small-units" in err
    commands = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("geokanon ")]
    assert len(commands) == 1, err
    argv = shlex.split(commands[0])
    # the user's own command with one option changed: here merging the small units,
    # since neither k=4 nor 1.5 x r_max passes (both tried first and named)
    assert argv[1 : 1 + 9] == ["-q", "release", str(edge), *ARGS[:6]]
    assert "k=4" in err and "r_max_m=150" in err
    assert "--merge-small-units" in argv
    # the refusal report beside DIR says the same
    assert commands[0] in (tmp_path / "refused.refusal.html").read_text()
    assert main(argv[1:]) == 0
    assert (out / "release" / "manifest.json").is_file()
    assert all(_manifest(out)["verification"].values())


def test_merge_small_units_releases_and_lists_every_merge(edge, tmp_path, capsys):
    out = tmp_path / "merged"
    assert _release(edge, out, "--merge-small-units", "49") == 0
    m = _manifest(out)
    merges = m["input_filter"]["unit_merges"]
    # every unit with fewer than 49 dwellings joined the nearest unit (no polygons given)
    assert {"GM0203", "GM0313", "GM0351"} <= set(merges)
    assert merges["GM0313"] == "GM0307+GM0313"
    assert m["input_filter"]["merge_small_units"] == 49
    units = pd.read_csv(out / "release" / "units.csv", dtype=str)
    assert set(merges.values()) <= set(units["unit"])
    assert not {"GM0203", "GM0313", "GM0351"} & set(units["unit"])
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "--merge-small-units 49" in notes and "GM0307+GM0313 = GM0307 + GM0313" in notes
    assert "GM0307 -&gt; GM0307+GM0313" in (out / "release" / "report.html").read_text()
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(edge)]) == 0
    # the verifier checks the published mapping against the audit's and the source's
    path = out / "release" / "manifest.json"
    doc = json.loads(path.read_text())
    del doc["input_filter"]["unit_merges"]["GM0313"]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert main(["verify", str(out), "--source", str(edge)]) == 4
    assert "unit_merges differs" in capsys.readouterr().out
    # audit and manifest agreeing on a mapping that leaves Bunschoten (48) alone: the
    # verifier counts the source's own units and finds it unmerged
    audit_path = out / "audit" / "audit.json"
    audit = json.loads(audit_path.read_text())
    for entry in (audit["input_filter"], doc["input_filter"]):
        entry["unit_merges"].pop("GM0313", None)
        entry["unit_merges"].pop("GM0307", None)
    audit_path.write_text(json.dumps(audit))
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert main(["verify", "--source", str(edge), str(out)]) == 4
    assert "with fewer than 49 subjects were not merged: GM0313" in capsys.readouterr().out


def test_merge_small_units_with_polygons_follows_adjacency(edge, tmp_path, capsys):
    from geokanon.io.units import unit_adjacency
    from tests.conftest import data_file

    polygons = data_file("sdcspatial_dwellings", "municipalities_2017_subset_epsg28992.gpkg")
    out = tmp_path / "poly"
    code = main(
        ["-q", "release", str(edge), "--k", "5", "--r-max", "100", "--crs", "EPSG:28992",
         "--units", str(polygons), "--unit-id", "gm_code", "--merge-small-units", "49",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    merges = _manifest(out)["input_filter"]["unit_merges"]
    assert {"GM0203", "GM0313", "GM0351"} <= set(merges)
    # every merged unit is a connected set of municipalities that share a border
    touching = unit_adjacency(polygons, "gm_code")
    for merged in set(merges.values()):
        parts = merged.split("+")
        assert parts == sorted(parts) and len(parts) >= 2
        reached, todo = {parts[0]}, [parts[0]]
        while todo:
            u = todo.pop()
            for v in parts:
                if v not in reached and (min(u, v), max(u, v)) in touching:
                    reached.add(v)
                    todo.append(v)
        assert reached == set(parts), merged
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(edge)]) == 0


def test_exclude_units_drops_and_counts_their_records(edge, tmp_path, capsys):
    out = tmp_path / "excluded"
    assert _release(edge, out, "--exclude-units", "GM0203,GM0313") == 0
    m = _manifest(out)
    f = m["input_filter"]
    assert f["excluded_units"] == ["GM0203", "GM0313"]
    assert f["excluded_records"] == 51
    units = pd.read_csv(out / "release" / "units.csv", dtype=str)
    assert not {"GM0203", "GM0313"} & set(units["unit"])
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "units left out (--exclude-units): GM0203, GM0313; their 51 records" in notes
    audit = pd.read_parquet(out / "audit" / "assignment.parquet")
    assert len(audit) == 8352 - 51
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(edge)]) == 0
    assert "coordinates of the records left out" in capsys.readouterr().out
    # a left-out record's coordinates in a release file are a leak like any other
    frame = pd.read_csv(edge)
    x, y = frame.loc[frame.gm_code == "GM0313", ["x", "y"]].iloc[0]
    notes_path = out / "release" / "RELEASE_NOTES.md"
    notes_path.write_text(notes + f"\nlast seen at {x} {y}\n")
    assert main(["verify", str(out), "--source", str(edge)]) == 4
    assert "FAIL no_leak" in capsys.readouterr().out
    notes_path.write_text(notes)
    # an exclusion the manifest under-reports fails the recount
    path = out / "release" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["input_filter"]["excluded_records"] = 48
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert main(["verify", str(out), "--source", str(edge)]) == 4


def test_exclude_units_refuses_an_unknown_unit(edge, tmp_path, capsys):
    assert _release(edge, tmp_path / "x", "--exclude-units", "GM0204") == 2
    err = capsys.readouterr().err
    assert "'GM0204'" in err and "did you mean 'GM0203'" in err


def test_study_area_clip_drops_and_counts_points_outside(edge, tmp_path, capsys):
    import geopandas as gpd
    import shapely

    area = tmp_path / "area.geojson"
    # everything but the eastern strip (x > 161,300 m): Barneveld's and Woudenberg's edge
    gpd.GeoDataFrame(
        geometry=[shapely.box(140_000, 450_000, 161_300, 480_000)], crs="EPSG:28992"
    ).to_file(area)
    frame = pd.read_csv(edge)
    n_out = int((frame.x > 161_300).sum())
    assert 0 < n_out < len(frame)
    capsys.readouterr()
    assert _release(edge, tmp_path / "refused", "--study-area", str(area)) == 2
    assert "--clip" in capsys.readouterr().err
    out = tmp_path / "clipped"
    extra = ("--study-area", str(area), "--clip", "--merge-small-units", "49")
    assert _release(edge, out, *extra) == 0
    m = _manifest(out)
    assert m["input_filter"]["clipped_records"] == (n_out if n_out >= 5 else "<k")
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "records outside the study area dropped (--clip)" in notes
    assert len(pd.read_parquet(out / "audit" / "assignment.parquet")) == len(frame) - n_out
    audit = json.loads((out / "audit" / "audit.json").read_text())
    assert audit["read_options"]["clip"] is True
    assert audit["input_filter"]["clipped_records"] == n_out
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(edge)]) == 0
    assert main(["risk", str(out), "--source", str(edge), "--json"]) == 0

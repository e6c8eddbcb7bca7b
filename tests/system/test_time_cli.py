"""Times on the command line: space and time judged together (SPEC "Isolation ratio")."""

from __future__ import annotations

import json

import pytest

from geokanon.cli import main
from tests.conftest import data_file

TEN_YEARS_S = 10 * 365 * 86_400
GEOLIFE = ["--subject", "user_id", "--k", "3", "--r-max", "500", "--unit-grid", "5000"]


def _classify(capsys, *args: str) -> dict:
    assert main(["classify", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_geolife_t_max_longer_than_the_data_changes_no_label(capsys):
    # GeoLife's stay points span about a year: with t_max ten years no record has a gap
    # larger than t_max, so the labels are space's (the earlier rule turned every merge
    # and generalise record into suppress here).
    src = str(data_file("geolife_trackintel_11users", "staypoints.csv"))
    space = _classify(capsys, src, *GEOLIFE)
    assert space["counts"]["merge"] > 0 and space["counts"]["generalise"] > 0
    joint = _classify(capsys, src, *GEOLIFE, "--time", "started_at", "--t-max", str(TEN_YEARS_S))
    assert joint["counts"] == space["counts"]
    assert space["because_of_time"] is None
    assert joint["because_of_time"] == {"ok": 0, "merge": 0, "generalise": 0, "suppress": 0}
    # A realistic t_max on the 24 h clock: some records are outliers only because of time,
    # and the text table says how many per label.
    argv = [src, *GEOLIFE, "--time", "started_at", "--t-max", "3600", "--time-mode", "time_of_day"]
    hour = _classify(capsys, *argv)
    by_time = hour["because_of_time"]
    assert by_time["ok"] == 0 and sum(by_time.values()) > 0
    for label, n in by_time.items():
        assert n <= hour["counts"][label]
    assert hour["counts"]["ok"] <= space["counts"]["ok"]
    assert main(["classify", *argv]) == 0
    text = capsys.readouterr().out
    assert "by time" in text
    assert f"{by_time['generalise']:>8,}" in text.splitlines()[4]


def test_geolife_release_with_times_reaches_its_fixed_point(tmp_path, capsys):
    src = str(data_file("geolife_trackintel_11users", "staypoints.csv"))
    space = _classify(capsys, src, *GEOLIFE)
    out = tmp_path / "geo"
    argv = ["release", src, *GEOLIFE, "--time", "started_at", "--t-max", str(TEN_YEARS_S),
            "--tau", "0.99", "--unit-cap", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert all(manifest["verification"].values())
    passes = json.loads((out / "audit" / "audit.json").read_text())["passes_exact"]
    assert passes[-1]["changed"] == 0 and len(passes) <= 5
    # The first pass with a ten-year t_max is the spatial classification.
    assert passes[0]["labels"] == space["counts"]
    assert passes[0]["because_of_time"] == {"ok": 0, "merge": 0, "generalise": 0, "suppress": 0}
    assert manifest["counts"]["merged"] + manifest["counts"]["generalised"] > 0
    # An hour on the 24 h clock: merges settle too, and the report says how many records
    # are outliers only because of time (counted over the records published at group
    # level, as the pass counts: exact, and resting on no record that is not published).
    hour = tmp_path / "hour"
    argv = ["release", src, *GEOLIFE, "--time", "started_at", "--t-max", "3600", "--time-mode",
            "time_of_day", "--tau", "0.99", "--unit-cap", "1", "--out", str(hour)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    manifest = json.loads((hour / "release" / "manifest.json").read_text())
    assert all(manifest["verification"].values())
    exact = json.loads((hour / "audit" / "audit.json").read_text())["passes_exact"]
    assert exact[-1]["changed"] == 0 and exact[0]["because_of_time"]["merge"] > 0
    published = manifest["passes"][0]["because_of_time"]
    assert published == exact[0]["group_level_because_of_time"] and published["merge"] > 0
    # group-level records were ok or merge in pass 1; time's share is within each label
    assert published["generalise"] == published["suppress"] == 0
    first = manifest["passes"][0]["labels"]
    assert all(published[lab] <= first[lab] for lab in first)
    assert "1: only because of time" in (hour / "release" / "report.html").read_text()


@pytest.mark.parametrize(
    "command",
    [["classify"], ["describe"], ["sweep"], ["release", "--out", "OUT"], ["classify", "--json"]],
)
def test_time_without_t_max_is_an_input_error(tmp_path, capsys, command):
    src = tmp_path / "visits.csv"
    rows = [f"{155_000 + i * 10.0},{463_000 + i * 3.0},2008-10-23T0{i}:00:00Z" for i in range(6)]
    src.write_text("x,y,t\n" + "\n".join(rows) + "\n")
    command = [str(tmp_path / "out") if c == "OUT" else c for c in command]
    argv = [command[0], str(src), *command[1:], "--k", "3", "--r-max", "50", "--time", "t",
            "--crs", "EPSG:28992"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--time 't' needs --t-max SECONDS" in err and "2008" not in err
    assert not (tmp_path / "out").exists()
    # With t_max in a config file the same command runs.
    config = tmp_path / "policy.toml"
    config.write_text("t_max_s = 86400.0\n")
    assert main([*argv, "--config", str(config)]) == 0

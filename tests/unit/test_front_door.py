"""The front door: where the tests find the shared data, and what CI runs.

A missing dataset skips its tests with a message naming the path, except under CI
(``CI=true``), where it fails them; ``.ci/run`` sets ``CI=true`` and
``GEOKANON_DATA=../shared/data`` and runs the README's test command verbatim.
"""

from __future__ import annotations

import re
import shlex
import tomllib

import pytest

from tests.conftest import ROOT, data_file


def test_missing_dataset_fails_under_ci_naming_the_path(monkeypatch, tmp_path):
    monkeypatch.setenv("GEOKANON_DATA", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        data_file("sdcspatial_dwellings", "dwellings.csv")
    text = str(failed.value)
    assert str(tmp_path / "sdcspatial_dwellings" / "dwellings.csv") in text
    assert "CI=true" in text


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_missing_dataset_skips_outside_ci_naming_the_path(monkeypatch, tmp_path, ci):
    monkeypatch.setenv("GEOKANON_DATA", str(tmp_path))
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as skipped:
        data_file("aquadtree_charleston", "population_points.csv")
    assert str(tmp_path / "aquadtree_charleston" / "population_points.csv") in str(skipped.value)


def test_present_dataset_is_found_and_relative_paths_start_at_the_checkout(monkeypatch, tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "f.csv").write_text("x,y\n")
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GEOKANON_DATA", str(tmp_path))
    assert data_file("set", "f.csv") == tmp_path / "set" / "f.csv"
    from tests.conftest import data_root

    monkeypatch.setenv("GEOKANON_DATA", "../shared/data")
    assert data_root().resolve() == (ROOT.parent / "shared" / "data").resolve()
    monkeypatch.delenv("GEOKANON_DATA")
    assert data_root() == ROOT.parent / "shared" / "data"


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"^(python3 -m pip install .*&& python3 -m pytest)\s*$", readme, re.M)
    assert len(found) == 1, found
    return found[0]


def test_ci_runs_the_readme_command_on_the_shared_data_and_fails_on_missing_data():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [
        ln.strip() for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    exports = {}
    for ln in lines:
        if ln.startswith("export "):
            for word in shlex.split(ln)[1:]:
                name, _, value = word.partition("=")
                exports[name] = value
    assert exports.get("GEOKANON_DATA") == "../shared/data"
    assert exports.get("CI") == "true"
    # The last line is the README's test command, unchanged.
    assert lines[-1] == _readme_test_command()
    # Nothing is installed that the suite does not use: the only pip install is the
    # README's (its test extra holds playwright and psycopg), and the only system packages
    # are the Chromium the browser test drives (through playwright: no chromedriver) and
    # the PostgreSQL + PostGIS the database tests start a throwaway cluster of.
    pip = [ln for ln in lines if re.search(r"\bpip install\b", ln)]
    assert pip == [lines[-1]]
    apt = [ln for ln in lines if "apt-get install" in ln]
    assert len(apt) == 1
    packages = [
        w for w in shlex.split(apt[0].split("apt-get install", 1)[1]) if not w.startswith("-")
    ]
    assert packages == ["chromium", "postgresql", "postgis", "postgresql-postgis"]
    # installed only when missing: a second run is quick and needs no package index
    check = [ln for ln in lines if ln.startswith("if ! dpkg -s ")]
    assert len(check) == 1 and shlex.split(check[0])[4:8] == packages
    browser = (ROOT / "tests" / "system" / "test_report_browser.py").read_text(encoding="utf-8")
    assert "executable_path=" in browser  # playwright drives the system Chromium itself
    cluster = (ROOT / "tests" / "pg_cluster.py").read_text(encoding="utf-8")
    assert "initdb" in cluster and "pytest.fail" in cluster  # CI fails, never skips, them
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    test_extra = extras["project"]["optional-dependencies"]["test"]
    assert any(d.startswith("psycopg") for d in test_extra)  # the README's install has it

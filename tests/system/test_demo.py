"""``geokanon demo``: the front door runs the full release on the bundled example."""

from __future__ import annotations

import json

from geokanon.cli import main


def test_demo_runs_full_release(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per unit" in text and "The story" in text
    assert str(out / "release") in text
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert manifest["k"] == 5 and manifest["r_max_m"] == 2000.0
    assert all(manifest["verification"].values())
    # the way on to one's own data: a release command line, with the options it needs
    own = [line.strip() for line in text.splitlines() if line.strip().startswith("geokanon ")]
    assert any(
        line.startswith("geokanon release ") and "--out" in line and "--k" in line for line in own
    ), own


def test_demo_refuses_to_replace_its_output_without_force(tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "mine.txt").write_text("not the demo's")
    assert main(["demo", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "already exists" in captured.err and "--force" in captured.err
    assert "The story" not in captured.out  # refused before any work
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]

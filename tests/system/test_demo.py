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

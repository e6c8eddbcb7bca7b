"""The release writer checks the release once, as published (report and manifest in place).

The manifest's ``verification`` and ``report.html`` state every check as passed before the
verifier runs; the one run reads every file as it will be published, and a result other
than the stated one refuses the release with nothing written. So a page that leaks a
source value is refused by that run: there is no second, narrower run over the report.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

import geokanon.report.html as html
import geokanon.verify as verify
from geokanon.cli import main
from tests.conftest import data_file

ARGS = [
    "--k", "5", "--r-max", "300", "--unit", "gm_code", "--crs", "EPSG:28992",
    "--subject", "subject",
]  # fmt: skip


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    frame = pd.read_csv(data_file("sdcspatial_dwellings", "dwellings.csv"))
    # Barneveld's 3 dwellings would breach the unit cap on their own
    frame = frame[frame["gm_code"] != "GM0203"].iloc[:900].drop(columns=["point_id"])
    frame = frame.reset_index(drop=True)
    frame["subject"] = [f"owner-{i // 2}" for i in range(len(frame))]
    path = tmp_path_factory.mktemp("once") / "dwellings.csv"
    frame.to_csv(path, index=False)
    return path, frame


def _release(src: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["--quiet", "release", str(src), *ARGS, "--out", str(out)])
    return code, capsys.readouterr().err


def test_the_writer_verifies_once_and_the_manifest_states_what_that_run_found(
    source, tmp_path, monkeypatch, capsys
):
    src, _ = source
    calls: list[tuple[str, object]] = []
    real = verify.verify_release

    def counted(directory, **kwargs):
        calls.append((str(directory), kwargs.get("checks")))
        return real(directory, **kwargs)

    monkeypatch.setattr(verify, "verify_release", counted)
    out = tmp_path / "out"
    code, err = _release(src, out, capsys)
    assert code == 0, err
    assert len(calls) == 1 and calls[0][1] is None  # one run, every check
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    again = real(out, source=src, before_report=False)
    assert again.passed
    stated = dict(manifest["verification"])
    assert stated.pop("deterministic") is True
    assert stated == again.as_dict()
    page = (out / "release" / "report.html").read_text(encoding="utf-8")
    assert "ran again" not in page and "as published" in page


def test_a_page_that_leaks_a_source_coordinate_is_refused_and_nothing_is_written(
    source, tmp_path, monkeypatch, capsys
):
    src, frame = source
    counts = frame["x"].value_counts()
    x = int(counts.index[counts == 1][0])  # a whole-metre x that one dwelling has
    real = html.report_html

    def leaky(*args, **kwargs):
        return real(*args, **kwargs).replace("</body>", f"<p>near {x}</p></body>")

    monkeypatch.setattr(html, "report_html", leaky)
    out = tmp_path / "out"
    code, err = _release(src, out, capsys)
    assert code == 4, err
    assert "no_leak" in err and "nothing was written" in err
    assert str(x) not in err  # the message names the check, never the value
    assert not out.exists()
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir() if p.is_dir())

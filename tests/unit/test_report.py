"""The release report and the refusal report: what they show and what they never hold."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main
from geokanon.io import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.release import ReleaseOptions
from geokanon.report.html import (
    CHECK_TEXT,
    masked_histogram,
    refusal_report_path,
    share_band,
)
from geokanon.verify import CHECKS, verify_release

K = 3


def small_frame() -> pd.DataFrame:
    """A town and three moors with lone farms far out (suppressed), raw ids and timestamps.

    The moors lose 2, 2 and 1 farms: each per-unit figure reads ``<k`` and the
    global one (5 >= k) is a number that pins none of them.
    """
    rng = np.random.default_rng(7)
    xs, ys, units = [rng.uniform(0, 150, 520)], [rng.uniform(0, 150, 520)], ["Town"] * 520
    for i, (name, farms) in enumerate((("Moor A", 2), ("Moor B", 2), ("Moor C", 1))):
        ox, oy = 3000.0 * (i + 1), 2000.0
        xs.append(ox + rng.uniform(0, 50, 40))
        ys.append(oy + rng.uniform(0, 50, 40))
        xs.append(ox + 400.0 + 517.371 * np.arange(1, farms + 1))
        ys.append(oy + 433.129 * np.arange(1, farms + 1))
        units += [name] * (40 + farms)
    x, y = np.concatenate(xs), np.concatenate(ys)
    n = x.size
    return pd.DataFrame(
        {
            "x": 431_000.0 + x,
            "y": 5_210_000.0 + y,
            "unit": units,
            "pid": [f"PAT{9000 + i:05d}" for i in range(n)],
            "seen": [f"2024-03-{1 + i % 28:02d}T{i % 24:02d}:17:43" for i in range(n)],
            "age": rng.integers(20, 90, n),
        }
    )


@pytest.fixture(scope="module")
def small_release(tmp_path_factory):
    frame = small_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, subject="pid", unit="unit", crs="EPSG:32631")
        out = tmp_path_factory.mktemp("rep") / "out"
        refusal_report_path(out).write_text("a stale refusal of an earlier run")
        result = release_points(
            table, OutlierPolicy(k=K, r_max_m=25.0), out, ReleaseOptions(keep=("age",))
        )
    return frame, table, out, result


def _numbers(text: str) -> set[float]:
    return {float(t) for t in re.findall(r"(?<![\w.])\d+\.\d+(?![\w])", text)}


# --------------------------------------------------------------------------------------
# Masking rules
# --------------------------------------------------------------------------------------


def test_masked_histogram_bins_hold_zero_or_k_subjects():
    rng = np.random.default_rng(3)
    values = np.r_[rng.uniform(0, 1, 200), [3.1, 3.2, 5.5, 7.9, 9.99]]
    subjects = np.arange(values.size)
    edges = np.arange(0.0, 10.5, 0.5)
    bins = masked_histogram(values, subjects, edges, 5)
    assert sum(b.records for b in bins) == values.size
    for b in bins:
        inside = (values >= b.low) & ((values < b.high) | (b.high == edges[-1]))
        assert b.records == 0 or np.unique(subjects[inside]).size >= 5
    assert bins[0].low == 0.0 and bins[-1].high == edges[-1]
    # contiguous, and the five outliers (1..k-1 per bin) ended up together
    assert all(a.high == b.low for a, b in itertools.pairwise(bins))
    assert not any(0 < b.records < 5 for b in bins)


def test_masked_histogram_counts_subjects_not_records():
    # 6 records of one subject in one bin are not a publishable bin at k=3
    values = np.r_[np.full(6, 0.5), np.linspace(1.1, 1.9, 10)]
    subjects = np.r_[np.zeros(6, dtype=np.int64), np.arange(1, 11)]
    bins = masked_histogram(values, subjects, [0.0, 1.0, 2.0], 3)
    assert [(b.low, b.high, b.records) for b in bins] == [(0.0, 2.0, 16)]


def test_share_band_publishes_bands_only_for_numbers():
    assert share_band("<k", 0.5, 0.1) == (1, "<k")
    assert share_band(0, 0.0, 0.1) == (0, "0")
    rank, text = share_band(40, 0.08, 0.1)
    assert rank == 5 and text == "5–10 %"
    assert share_band(40, 0.001, 0.1)[1] == "0–1 %"


# --------------------------------------------------------------------------------------
# The release report
# --------------------------------------------------------------------------------------


def test_report_is_written_listed_and_verified(small_release):
    _, table, out, result = small_release
    page = out / "release" / "report.html"
    assert page.is_file()
    assert not refusal_report_path(out).exists()  # a release removes a stale refusal report
    manifest = result.manifest
    assert "report.html" in manifest["files"]
    assert all(manifest["verification"].values())
    again = verify_release(out, source=table)
    assert again.passed, again.failed


def test_report_shows_verdict_every_check_and_figures(small_release):
    _, _, out, _ = small_release
    text = (out / "release" / "report.html").read_text()
    assert text.index("RELEASED") < text.index("Checks") < text.index("Map")
    for name in (*CHECKS, "deterministic"):
        assert f"<code>{name}</code>" in text, name
        assert CHECK_TEXT[name].split()[0] in text
    for anchor in ("map-groups", "map-units", "plot-iota", "plot-diameter", "plot-displacement",
                   "plot-passes"):  # fmt: skip
        assert f'id="{anchor}"' in text, anchor
    assert text.count("data:image/svg+xml;base64,") >= 4
    assert "data:image/png;base64," in text
    assert "no unit outlines are drawn" in text  # made with a unit column, not polygons


def test_report_is_self_contained(small_release):
    _, _, out, _ = small_release
    text = (out / "release" / "report.html").read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    for ref in re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", text):
        assert ref.startswith(("data:", "#")), ref
    bare = re.sub(r'xmlns(?::\w+)?="[^"]*"', "", text)
    assert "http://" not in bare and "https://" not in bare


def test_report_and_notes_hold_no_coordinate_id_or_timestamp(small_release):
    frame, _, out, _ = small_release
    for name in ("report.html", "RELEASE_NOTES.md"):
        text = (out / "release" / name).read_text()
        coords = set(frame["x"]) | set(frame["y"])
        assert not (_numbers(text) & coords), name
        for pid in frame["pid"]:
            assert pid not in text, name
        for stamp in frame["seen"]:
            assert stamp not in text and stamp.replace("T", " ") not in text, name


def test_small_suppressed_figures_read_lt_k(small_release):
    _, _, out, result = small_release
    assert result.counts["suppressed"] >= 1
    text = (out / "release" / "report.html").read_text()
    rows = re.findall(r'<tr><td class="l" data-v="([\w ]+)">.*?</tr>', text)
    assert "Moor A" in rows
    moor = re.search(r'<tr><td class="l" data-v="Moor A">(.*?)</tr>', text).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", moor)
    assert cells[-2:] == ["&lt;k", "&lt;k"]  # suppressed subjects and the share band
    # no suppressed figure of 1..k-1 anywhere: the verifier's own scan agrees
    report = verify_release(out, checks=("report_safety", "no_leak"))
    assert report.passed, [c.detail for c in report.checks]


def test_report_command_rebuilds_and_updates_checksums(small_release, tmp_path, capsys):
    import shutil

    _, _, out, _ = small_release
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    page = copy / "release" / "report.html"
    before = page.read_bytes()
    page.write_text("<html>stale</html>")
    assert main(["report", str(copy)]) == 0
    assert page.read_bytes() == before  # deterministic: the same release, the same page
    assert "PASS manifest" in capsys.readouterr().out
    assert verify_release(copy, checks=("manifest",)).passed


def test_report_command_refuses_a_directory_that_is_no_release(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a geokanon release directory" in capsys.readouterr().err


def test_core_never_imports_matplotlib():
    code = (
        "import sys, geokanon.pipeline, geokanon.release, geokanon.verify, geokanon.cli\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported by the core'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------
# The refusal report
# --------------------------------------------------------------------------------------


def test_refusal_report_path_is_beside_the_directory(tmp_path):
    assert refusal_report_path(tmp_path / "out") == tmp_path / "out.refusal.html"


def test_refused_run_writes_refusal_report_and_no_release(dwellings_csv, tmp_path, capsys):
    out = tmp_path / "refused"
    args = ["release", str(dwellings_csv), "--k", "5", "--unit", "gm_code", "--crs", "EPSG:28992"]
    code = main([*args, "--r-max", "100", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3
    page = refusal_report_path(out)
    assert sorted(tmp_path.iterdir()) == [page]  # no DIR, no temporary files
    assert str(page) in err
    text = page.read_text()
    assert "REFUSED" in text and "GM0203" in text and "GM0313" in text
    assert "unit cap" in text and "What if" in text
    assert "Content-Security-Policy" in text
    # no coordinates: no number of the source's coordinate magnitude at all
    src = pd.read_csv(dwellings_csv, usecols=["x", "y"])
    numbers = {float(t) for t in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])", text)}
    assert not numbers & (set(src["x"]) | set(src["y"]))


def test_report_draws_unit_polygons_when_the_release_has_them(tmp_path):
    import geopandas as gpd
    from shapely.geometry import box

    frame = small_frame().drop(columns="unit")
    x0, y0 = 431_000.0, 5_210_000.0
    polygons = gpd.GeoDataFrame(
        {"uid": ["Town", "Moors"]},
        geometry=[box(x0 - 100, y0 - 100, x0 + 1000, y0 + 1000),
                  box(x0 + 1000, y0 + 1000, x0 + 12_000, y0 + 4_000)],
        crs="EPSG:32631",
    )  # fmt: skip
    path = tmp_path / "units.geojson"
    polygons.to_file(path, driver="GeoJSON")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(
            frame, subject="pid", crs="EPSG:32631", units=str(path), unit_id="uid"
        )
        options = ReleaseOptions(read_options=(("units", str(path)), ("unit_id", "uid")))
        release_points(table, OutlierPolicy(k=K, r_max_m=25.0), tmp_path / "out", options)
    text = (tmp_path / "out" / "release" / "report.html").read_text()
    assert "Unit outlines from units.geojson" in text
    units_panel = text[text.index('id="map-units"') :]
    assert units_panel.index("data:image/png;base64,") < units_panel.index("</div>")


def test_refusal_report_of_an_unsettled_fixed_point(tmp_path):
    from geokanon.report.html import write_refusal_report

    passes = [
        {"pass": i, "records": 900, "labels": {"ok": 880, "merge": 20, "generalise": 0,
                                               "suppress": 0}, "changed": 9 - i}
        for i in range(1, 6)
    ]  # fmt: skip
    page = write_refusal_report(
        tmp_path / "out", "the classification did not settle within 5 passes",
        {"passes": passes, "tau": 0.01, "unit_cap": 0.1}, policy={"k": 5, "r_max_m": 50.0},
    )  # fmt: skip
    assert page == tmp_path / "out.refusal.html" and not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.refusal.html"]
    text = page.read_text()
    assert "Labels per pass" in text and "kept changing" in text
    assert "BREACHED" not in text  # no share was measured: no verdict on tau

"""The release report as a reader sees it: headless Chromium, offline, no console error.

Needs Chromium (the Debian package ``chromium``, at ``/usr/bin/chromium``) and the
``playwright`` Python package (a test extra; it drives that Chromium through
``executable_path``: no browser download, no chromedriver). CI installs both (``.ci/run``); the
test skips with a clear message when either is missing. The full-page
screenshot is kept as ``test-artifacts/report.png``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from geokanon.cli import main
from geokanon.verify import CHECKS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """The Chromium binary, or skip the test saying what to install."""
    for cand in (os.environ.get("GEOKANON_CHROMIUM"), "/usr/bin/chromium", "chromium"):
        if cand and (found := shutil.which(cand)):
            return found
    pytest.skip(
        "no Chromium installed: apt-get install -y chromium "
        "(or set GEOKANON_CHROMIUM to a Chromium binary)"
    )


@pytest.fixture(scope="module")
def dwellings_report(tmp_path_factory) -> Path:
    from tests.conftest import data_file

    src = data_file("sdcspatial_dwellings", "dwellings.csv")
    out = tmp_path_factory.mktemp("browser") / "dw"
    code = main(
        ["release", str(src), "--k", "5", "--r-max", "300", "--unit", "gm_code",
         "--crs", "EPSG:28992", "--keep", "consumption,unemployed", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out / "release" / "report.html"


def test_report_opens_offline_with_verdict_checks_map_and_plots(dwellings_report, tmp_path):
    exe = chromium_path()
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (it drives the system Chromium)"
    )
    requests: list[str] = []
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a new, empty profile
            executable_path=exe,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
            offline=True,
        )
        try:
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(dwellings_report.as_uri(), wait_until="load")

            # Nothing but the page itself (and its inline data: images) was requested.
            assert requests, "the page itself was not requested"
            assert all(u.startswith(("file://", "data:")) for u in requests), requests
            assert problems == []

            # The verdict comes first and is visible.
            verdict = page.locator("#verdict")
            assert verdict.is_visible()
            assert "RELEASED" in verdict.inner_text()
            first = page.locator("main > *").nth(2).get_attribute("id")
            assert first == "verdict"

            # Every check, by name, with its result.
            table = page.locator("table.checks")
            for name in (*CHECKS, "deterministic"):
                cell = table.locator("code", has_text=name).first
                assert cell.is_visible(), name
                row = table.locator("tr", has=page.locator(f"code:text-is('{name}')"))
                assert "passed" in row.inner_text(), name

            # The map and the plots: inline data: images, decoded, shown with a size.
            for panel in ("map-groups", "plot-iota", "plot-diameter", "plot-displacement",
                          "plot-passes"):  # fmt: skip
                img = page.locator(f"#{panel} img")
                assert img.is_visible(), panel
                assert img.evaluate("i => i.complete && i.naturalWidth > 100"), panel
                box = img.bounding_box()
                assert box is not None and box["width"] > 200 and box["height"] > 80, panel
            assert page.locator("#map-units").is_visible()

            # The per-unit table sorts when a heading is clicked.
            units = page.locator("table.units tbody tr td:first-child")
            page.locator("table.units th", has_text="unit").first.click()
            names = units.all_inner_texts()
            page.locator("table.units th", has_text="unit").first.click()
            assert units.all_inner_texts() == names[::-1]
            assert sorted(names) in (names, names[::-1])

            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            context.close()
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000

"""The dwellings, k = 5, r_max = 100 m, unit cap 1.0: GM0203 (3 dwellings) keeps its range.

GM0203's suppressed subjects read ``<k``. The per-pass counts e5f9f34 published (over
all records, rounded to multiples of k) narrowed it to {2, 3, 4}; the release now
publishes none of them, and the verifier catches them when they are planted back.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pandas as pd
import pytest

from geokanon import OutlierPolicy
from geokanon.io.read import read_points
from geokanon.pipeline import release_points
from geokanon.verify import format_report, verify_release
from tests.release_fixtures import edit_audit, edit_manifest, refresh_manifest
from tests.unit.test_holes_figures import _all_records_passes


@pytest.fixture(scope="module")
def dwellings(tmp_path_factory):
    from tests.conftest import data_file

    src = data_file("sdcspatial_dwellings", "dwellings.csv")
    out = tmp_path_factory.mktemp("dw_holes") / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = read_points(src, unit="gm_code", crs="EPSG:28992")
        release_points(
            table, OutlierPolicy(k=5, r_max_m=100.0, unit_cap=1.0), out, check_determinism=False
        )
    return out, table


def test_gm0203_keeps_its_whole_range(dwellings, tmp_path):
    out, table = dwellings
    units = pd.read_csv(out / "release" / "units.csv", dtype=str).set_index("unit")
    assert units.loc["GM0203", "suppressed"] == "<k"
    report = verify_release(out, source=table)
    assert report.passed, format_report(report)
    # the figures main published, planted back (and in the audit, so only holes can tell)
    root = tmp_path / "planted"
    shutil.copytree(out, root)
    audit = json.loads((root / "audit" / "audit.json").read_text())
    passes = _all_records_passes(audit, 5)
    edit_manifest(root, lambda m: m.update(passes=passes))
    edit_audit(root, lambda a: a.update(passes=passes))
    # a page without the report's pass table (the new figures are not in it); every
    # release has its report, so it is not deleted
    (root / "release" / "report.html").write_text("<!doctype html><html><body></body></html>")
    refresh_manifest(root)
    report = verify_release(root, source=table)
    assert {c.name for c in report.checks if not c.passed} == {"holes"}, format_report(report)
    assert "unit GM0203 suppressed: '<k' narrowed to [2, 4]" in report["holes"].detail

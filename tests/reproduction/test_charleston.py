"""The design note's Charleston story (issues 2 and 7), reproduced.

``../shared/data/aquadtree_charleston/population_points.csv`` (54,619 people in census
tracts), k=5, r_max=500 m, units ``tract_id``.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from geokanon.cli import main
from tests.conftest import data_file


@pytest.fixture(scope="module")
def classified() -> dict:
    src = data_file("aquadtree_charleston", "population_points.csv")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["classify", str(src), "--k", "5", "--r-max", "500", "--unit", "tract_id",
                     "--crs", "EPSG:26978", "--json"])  # fmt: skip
    assert code == 0
    return json.loads(buf.getvalue())


def test_88_suppressed_016_percent(classified):
    assert classified["records"] == 54_619
    assert classified["counts"]["suppress"] == 88
    assert round(100 * classified["suppressed_share"], 2) == 0.16
    assert classified["passes_global_cap"] is True


def test_worst_tract_loses_14_3_percent(classified):
    worst = classified["per_unit"][0]
    assert classified["worst_unit"] == worst["unit"]
    assert round(100 * worst["share"], 1) == 14.3
    assert classified["passes_unit_cap"] is False

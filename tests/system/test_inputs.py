"""Inputs as people have them: the shared datasets read through every route.

Skipped cleanly (with the reason) when ``../shared/data`` is absent.
"""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pytest

from geokanon.cli import main
from geokanon.io import read_points
from tests.conftest import data_file


def _names(table):
    return table.unit_names[table.unit_codes]


def _read(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_points(path, **kw)


@functools.cache
def _charleston_by_column():
    csv = data_file("aquadtree_charleston", "population_points.csv")
    return _read(csv, unit="tract_id", crs="EPSG:26978")


def test_dwellings_polygon_join_matches_the_unit_column():
    csv = data_file("sdcspatial_dwellings", "dwellings.csv")
    gpkg = data_file("sdcspatial_dwellings", "municipalities_2017_subset_epsg28992.gpkg")
    by_column = _read(csv, unit="gm_code", crs="EPSG:28992")
    by_polygon = _read(csv, units=gpkg, unit_id="gm_code", crs="EPSG:28992")
    agree = float(np.mean(_names(by_column) == _names(by_polygon)))
    assert agree >= 0.99, agree
    assert by_polygon.n_unassigned == 0
    assert set(by_polygon.unit_names) <= set(by_column.unit_names) | {"unassigned"}


def test_dwellings_swapped_columns_refused_with_the_fix(capsys):
    csv = data_file("sdcspatial_dwellings", "dwellings.csv")
    code = main(["classify", str(csv), "--x", "y", "--y", "x", "--crs", "EPSG:28992",
                 "--k", "5", "--r-max", "100"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "look swapped; exchange --x and --y" in err


@pytest.mark.parametrize(
    "polygons", ["census_tracts_epsg26978.gpkg", "census_tracts_epsg4326.geojson"]
)
def test_charleston_tract_polygons(polygons):
    csv = data_file("aquadtree_charleston", "population_points.csv")
    tracts = data_file("aquadtree_charleston", polygons)
    by_column = _charleston_by_column()
    by_polygon = _read(csv, units=tracts, unit_id="tract_id", crs="EPSG:26978")
    agree = float(np.mean(_names(by_column) == _names(by_polygon)))
    assert agree >= 0.99, agree
    assert len(by_polygon.unit_names) >= 110


def test_charleston_kansas_crs_warns_about_area_of_use():
    csv = data_file("aquadtree_charleston", "population_points.csv")
    with pytest.warns(UserWarning, match="outside the area of use of EPSG:26978"):
        t = read_points(csv, unit="tract_id", crs="EPSG:26978")
    assert any("area of use" in n for n in t.notes)


def test_geolife_lonlat_projects_to_utm_50n_and_classifies(capsys):
    fixes = data_file("geolife_trackintel_11users", "positionfixes.csv")
    t = _read(fixes, lon="lon", lat="lat", subject="user_id", time="tracked_at_utc")
    assert t.crs == "EPSG:4326"
    assert t.working_crs == "EPSG:32650"
    assert t.n_subjects == 11
    assert t.times is not None and 1.17e9 < float(np.median(t.times)) < 1.25e9  # 2007-2009
    code = main(["classify", str(fixes), "--lon", "lon", "--lat", "lat", "--subject", "user_id",
                 "--time", "tracked_at_utc", "--t-max", "3600", "--k", "3", "--r-max", "200",
                 "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    d = json.loads(out)
    assert sum(d["counts"].values()) == 164_531


def test_chorley_km_refused_then_accepted_with_coord_scale(tmp_path, capsys):
    points = data_file("spatstat_chorley", "points.csv")
    base = ["classify", str(points), "--crs", "EPSG:27700", "--k", "3", "--r-max", "500"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "look like kilometres" in err and "--coord-scale 1000" in err
    assert main([*base, "--coord-scale", "1000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["records"] == 1036
    # the km columns scaled equal the metre columns the dataset also carries
    km = _read(points, crs="EPSG:27700", coord_scale=1000)
    m = _read(points, x="bng_e", y="bng_n", crs="EPSG:27700")
    np.testing.assert_allclose(km.x, m.x)
    np.testing.assert_allclose(km.y, m.y)

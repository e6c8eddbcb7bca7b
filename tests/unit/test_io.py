"""Reading inputs: formats, CRS rules, units, times, and every bad-input case.

Each refusal asserts the message (the rule, the rows, the fix), that no raw value is
quoted, and that nothing was written next to the input.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
import pytest
import shapely

from geokanon.cli import main
from geokanon.errors import InputError, PrivacyRiskWarning
from geokanon.io import PointTable, ReadOptions, check_r_max, read_points, table_from_frame
from geokanon.io.units import UNASSIGNED, grid_units
from geokanon.projection import Projection, choose_metric_crs, crs_to_string
from tests.cases import CASES

# a small cluster of addresses in Amersfoort (RD New metres) and the same in lon/lat
RD_X = [155000.0, 155040.0, 155090.0, 155130.0, 155210.0, 155260.0]
RD_Y = [463000.0, 463020.0, 462980.0, 463050.0, 463010.0, 462960.0]


def rd_frame(**extra) -> pd.DataFrame:
    frame = pd.DataFrame({"x": RD_X, "y": RD_Y, "user": ["a", "b", "c", "d", "e", "f"]})
    for k, v in extra.items():
        frame[k] = v
    return frame


def lonlat_frame() -> pd.DataFrame:
    lon, lat = pyproj.Transformer.from_crs("EPSG:28992", "EPSG:4326", always_xy=True).transform(
        RD_X, RD_Y
    )
    return pd.DataFrame({"lon": lon, "lat": lat, "user": list("abcdef")})


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def refuse(tmp_path: Path, text: str | bytes, message: str, name: str = "in.csv", **kw) -> str:
    """Write ``text`` to a file, read it, assert an InputError with ``message``; no writes."""
    f = tmp_path / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    before = listing(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError) as info:
            read_points(f, **kw)
    msg = str(info.value)
    assert message in msg, msg
    assert listing(tmp_path) == before
    return msg


# ------------------------------------------------------------------ refusals (CSV text)

CSV_CASES = [
    ("empty", "", {}, "is empty"),
    ("header_only", "x,y,user\n", {}, "no records (empty or header only)"),
    ("misspelt_x", "x,y\n155000,463000\n", {"x": "xx", "y": "y"}, "did you mean 'x'?"),
    (
        "misspelt_subject",
        "x,y,user\n155000,463000,a\n",
        {"subject": "usr"},
        "subject column 'usr' is not in the input; did you mean 'user'?",
    ),
    ("no_coordinates", "a,b\n1,2\n", {}, "nor are lon/lat columns"),
    (
        "nan",
        "x,y\n155000,463000\nnan,463000\n155200,inf\n",
        {},
        "2 records have missing, NaN or infinite coordinates (rows 2, 3)",
    ),
    (
        "non_numeric",
        "x,y\n155000,463000\nabc,463000\n",
        {},
        "column 'x' has 1 non-numeric values (rows 2); fix or drop these rows",
    ),
    (
        "decimal_comma_semicolon",
        "x;y\n155000,5;463000,5\n155100,5;463100,5\n",
        {},
        "write decimals with a point, not a comma",
    ),
    ("decimal_comma_quoted", 'x,y\n"155000,5",463000\n', {}, "write decimals with a point"),
    ("decimal_comma_unquoted", "x,y\n155000,5,463000\n", {}, "more fields than the header"),
    (
        "lat_out_of_range",
        "lon,lat\n5.38,52.15\n5.39,152.15\n",
        {},
        "1 records have a latitude outside [-90, 90] in 'lat' (rows 2); fix or drop these rows",
    ),
    (
        "lonlat_swapped",
        "lon,lat\n39.90,116.30\n39.91,116.31\n39.92,116.32\n",
        {},
        "3 records have a latitude outside [-90, 90] in 'lat' (rows 1, 2, 3); the columns look "
        "swapped: exchange --lon and --lat",
    ),
    (
        "lon_is_metres",
        "lon,lat\n155000,46\n155100,46\n",
        {},
        "longitude outside [-180, 360]",
    ),
    (
        "degrees_under_metric_crs",
        "x,y\n5.38,52.15\n5.39,52.16\n",
        {"crs": "EPSG:28992"},
        "look like degrees",
    ),
    (
        "km_under_metric_crs",
        "x,y\n353.2,428.0\n353.1,422.3\n360.0,415.0\n",
        {"crs": "EPSG:27700"},
        "give --coord-scale 1000 if they are km",
    ),
    (
        "xy_swapped",
        "x,y\n463000,155000\n463020,155040\n462980,155090\n",
        {"crs": "EPSG:28992"},
        "the coordinate columns look swapped; exchange --x and --y",
    ),
    (
        "far_outside_area_of_use",
        "x,y\n9155000,463000\n9155100,463100\n",
        {"crs": "EPSG:28992"},
        "outside the area of use of EPSG:28992",
    ),
    ("unknown_crs", "x,y\n155000,463000\n", {"crs": "EPSG:999999"}, "is not a coordinate"),
    (
        "lonlat_with_projected_crs",
        "lon,lat\n5.38,52.15\n",
        {"crs": "EPSG:28992"},
        "the input has lon/lat columns ('lon', 'lat') and no x/y, but the CRS is EPSG:28992",
    ),
    (
        "empty_subject",
        "x,y,user\n155000,463000,a\n155100,463100,\n",
        {"subject": "user"},
        "1 records have an empty subject id in 'user' (rows 2)",
    ),
    (
        "naive_times",
        "x,y,t\n155000,463000,2024-03-01 10:00:00\n155100,463100,2024-03-01 11:00:00\n",
        {"time": "t"},
        "carry no time zone; give --timezone",
    ),
    (
        "dst_gap",
        "x,y,t\n155000,463000,2024-03-31 02:30:00\n155100,463100,2024-03-31 04:00:00\n",
        {"time": "t", "timezone": "Europe/Amsterdam"},
        "1 times in 't' fall in a daylight-saving change of Europe/Amsterdam",
    ),
    (
        "mixed_offsets",
        "x,y,t\n155000,463000,2024-03-01T10:00:00Z\n155100,463100,2024-03-01 11:00:00\n",
        {"time": "t"},
        "1 times in 't' carry no UTC offset while the others do (rows 2)",
    ),
    (
        "bad_times",
        "x,y,t\n155000,463000,2024-03-01T10:00:00Z\n155100,463100,2024-13-45T10:00:00Z\n",
        {"time": "t"},
        "not ISO 8601 or epoch seconds",
    ),
    (
        "epoch_milliseconds",
        "x,y,t\n155000,463000,1709287200000\n155100,463100,1709287260000\n",
        {"time": "t"},
        "look like milliseconds",
    ),
    (
        "missing_unit",
        "x,y,u\n155000,463000,A\n155100,463100,\n",
        {"unit": "u"},
        "1 records have no unit in 'u' (rows 2)",
    ),
    ("binary_named_csv", b"PK\x03\x04\x00\x00binary", {}, "is not a text file"),
]


@pytest.mark.parametrize(
    ("case", "text", "kw", "message"), CSV_CASES, ids=[c[0] for c in CSV_CASES]
)
def test_refusal(tmp_path, case, text, kw, message):
    msg = refuse(tmp_path, text, message, **kw)
    for value in ("155000", "463000", "52.15", "2024-03", "1709287200000"):
        assert value not in msg, f"{case}: a raw value leaked into the message"


def test_row_numbers_are_global_across_chunks(tmp_path):
    rows = [f"{155000 + 10 * i},{463000 + 10 * i}" for i in range(10)]
    rows[7] = "nan,463000"
    refuse(tmp_path, "x,y\n" + "\n".join(rows) + "\n", "(rows 8)", chunksize=3)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("in.xlsx", "x", "unsupported type '.xlsx'; save it as CSV"),
        ("in.parquet", "x,y\n1,2\n", "could not be read as Parquet"),
        ("in.gpkg", "not a geopackage", "could not be read as gpkg"),
    ],
)
def test_wrong_file_types(tmp_path, name, content, message):
    refuse(tmp_path, content, message, name=name)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_points(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="is a directory"):
        read_points(tmp_path)
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"x": "x"}, "--x needs --y too"),
        ({"x": "x", "y": "y", "lon": "lon", "lat": "lat"}, "not both"),
        ({"unit": "u", "unit_grid_m": 5000}, "give one way to form units"),
        ({"units": "u.gpkg"}, "--units FILE and --unit-id COL go together"),
        ({"unit_grid_m": -5.0}, "--unit-grid must be a finite cell size > 0"),
        ({"coord_scale": 0.0}, "--coord-scale must be a finite factor > 0"),
        ({"lon": "lon", "lat": "lat", "coord_scale": 1000.0}, "applies to projected x/y only"),
        ({"timezone": "Mars/Olympus"}, "is not a time zone name"),
        ({"working_crs": "EPSG:4326"}, "is not a projected CRS in metres"),
        ({"crs": "not a crs"}, "is not a coordinate reference system"),
    ],
)
def test_bad_options_refused_before_reading(tmp_path, kw, message):
    with pytest.raises(InputError) as info:
        ReadOptions(**kw)
    assert message in str(info.value)
    # the same through read_points on a file that does not even exist: options come first
    with pytest.raises(InputError) as info2:
        read_points(tmp_path / "absent.csv", **kw)
    assert message in str(info2.value)


# ------------------------------------------------------------------ warnings


def test_duplicate_rows_warn_with_count(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("x,y\n155000,463000\n155100,463100\n155000,463000\n155000,463000\n")
    with pytest.warns(UserWarning, match=r"2 records repeat an earlier record .*rows 3, 4"):
        t = read_points(f, crs="EPSG:28992")
    assert len(t) == 4
    assert any("repeat an earlier record" in n for n in t.notes)


def test_duplicate_rows_are_those_pandas_finds():
    # repeated coordinates with and without repeated other columns, -0.0 beside 0.0
    from geokanon.io.read import _duplicates

    rng = np.random.default_rng(3)
    for trial in range(50):
        n = int(rng.integers(2, 400))
        a = rng.integers(0, 1 + trial % 7 * 20, n).astype(np.float64)
        b = rng.integers(0, 3, n).astype(np.float64)
        a[a == 0] = -0.0 if trial % 2 else 0.0
        other = pd.Series(rng.integers(0, 2, n))
        notes: list[str] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _duplicates(a, b, [other], notes)
        want = int(pd.DataFrame({"a": a + 0.0, "b": b, "c": other}).duplicated().sum())
        if want:
            assert notes and notes[0].startswith(f"{want} records repeat an earlier record")
        else:
            assert notes == []


def test_subject_ids_differing_by_case_or_space_are_merged(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text(
        "x,y,u\n155000,463000,Ann\n155100,463100,ann\n155200,463200, ann \n155300,463300,b\n"
    )
    with pytest.warns(UserWarning, match="2 subject ids in 'u' differ from another only") as w:
        t = read_points(f, subject="u", crs="EPSG:28992")
    assert "Ann" not in str(w[0].message) and "ann" not in str(w[0].message)
    assert t.n_subjects == 2 and t.subject_ids_merged == 2  # one subject, as the warning says
    assert t.subjects.tolist() == [0, 0, 0, 1]


def test_no_crs_warns_unnamed(tmp_path):
    f = tmp_path / "n.csv"
    f.write_text("x,y\n155000,463000\n155100,463100\n")
    with pytest.warns(UserWarning, match="unnamed projected CRS"):
        t = read_points(f)
    assert t.crs is None and t.working_crs is None


# ------------------------------------------------------------------ lon/lat and CRS


def test_lonlat_projected_to_utm_and_back(tmp_path):
    f = tmp_path / "ll.csv"
    lonlat_frame().to_csv(f, index=False)
    t = read_points(f, subject="user")
    assert (t.crs, t.working_crs, t.output_crs) == ("EPSG:4326", "EPSG:32631", "EPSG:4326")
    # distances in the working CRS agree with the RD New distances to well under 0.1 %
    d_utm = math.hypot(t.x[5] - t.x[0], t.y[5] - t.y[0])
    d_rd = math.hypot(RD_X[5] - RD_X[0], RD_Y[5] - RD_Y[0])
    assert abs(d_utm / d_rd - 1) < 1e-3
    lon, lat = t.to_output(t.x, t.y)
    np.testing.assert_allclose(lon, lonlat_frame()["lon"], atol=1e-9)
    np.testing.assert_allclose(lat, lonlat_frame()["lat"], atol=1e-9)


def test_lonlat_column_spellings_and_explicit_names():
    frame = lonlat_frame().rename(columns={"lon": "Longitude", "lat": "Latitude"})
    assert table_from_frame(frame).working_crs == "EPSG:32631"
    frame = lonlat_frame().rename(columns={"lon": "px", "lat": "py"})
    assert table_from_frame(frame, lon="px", lat="py").working_crs == "EPSG:32631"


def test_antimeridian_cluster_stays_a_cluster():
    frame = pd.DataFrame({"lon": [179.999, -179.999, 179.998], "lat": [-17.0, -17.0, -17.001]})
    t = table_from_frame(frame)
    assert t.working_crs in ("EPSG:32760", "EPSG:32701")
    assert math.hypot(t.x[1] - t.x[0], t.y[1] - t.y[0]) < 300  # ~213 m, not ~38,000 km


def test_wide_area_gets_equal_area_and_hemisphere_refused():
    crs = choose_metric_crs(np.array([-10.0, 30.0, 10.0]), np.array([36.0, 70.0, 50.0]))
    assert "+proj=laea" in crs_to_string(crs)
    with pytest.raises(InputError, match="split the input by region"):
        choose_metric_crs(np.array([-120.0, 0.0, 120.0]), np.array([0.0, 10.0, -10.0]))


def test_working_and_output_crs_options():
    t = table_from_frame(lonlat_frame(), working_crs="EPSG:28992", output_crs="EPSG:3035")
    np.testing.assert_allclose(t.x, RD_X, atol=1e-3)
    assert t.output_crs == "EPSG:3035"
    e, n = t.to_output(t.x, t.y)
    assert 3.9e6 < e[0] < 4.1e6 and 3.1e6 < n[0] < 3.3e6


def test_projected_input_is_identity():
    t = table_from_frame(rd_frame(), crs="EPSG:28992")
    assert t.working_crs == t.crs == "EPSG:28992"
    np.testing.assert_array_equal(t.x, RD_X)
    assert Projection(source_crs="EPSG:28992", working_crs="EPSG:28992").is_identity


def test_coord_scale_km_to_m(tmp_path):
    f = tmp_path / "km.csv"
    f.write_text("x,y\n353.2,428.0\n353.1,422.3\n360.0,415.0\n")
    t = read_points(f, crs="EPSG:27700", coord_scale=1000)
    np.testing.assert_allclose(t.x, [353200.0, 353100.0, 360000.0])
    assert t.coord_scale == 1000.0


def test_outside_area_of_use_but_metric_warns(tmp_path):
    # the Charleston case: Kansas South parameters used for South Carolina points
    f = tmp_path / "c.csv"
    f.write_text("x,y\n2125689.56,144123.14\n2094007.41,191867.2\n")
    with pytest.warns(UserWarning, match="outside the area of use of EPSG:26978"):
        t = read_points(f, crs="EPSG:26978")
    assert t.working_crs == "EPSG:26978"


def test_file_crs_conflicting_with_crs_option(tmp_path):
    f = tmp_path / "p.geojson"
    gpd.GeoDataFrame(
        {"id": [1, 2]}, geometry=gpd.points_from_xy([5.38, 5.39], [52.15, 52.16]), crs=4326
    ).to_file(f)
    refuse_kw = {"crs": "EPSG:28992"}
    before = listing(tmp_path)
    with pytest.raises(InputError, match="drop --crs or fix the file's metadata"):
        read_points(f, **refuse_kw)
    assert listing(tmp_path) == before


def test_check_r_max():
    t = table_from_frame(lonlat_frame())
    check_r_max(t, 200.0)
    with pytest.raises(InputError, match="degrees would be about 222 m"):
        check_r_max(t, 0.002)
    with pytest.raises(InputError, match="half the Earth"):
        check_r_max(t, 3e7)


# ------------------------------------------------------------------ formats


def _points_gdf(crs="EPSG:28992") -> gpd.GeoDataFrame:
    return gpd.GeoDataFrame(
        {"user": list("abcdef"), "v": np.arange(6)},
        geometry=gpd.points_from_xy(RD_X, RD_Y),
        crs=crs,
    )


@pytest.mark.parametrize("name", ["p.gpkg", "p.geojson", "p.shp", "p.parquet", "plain.parquet"])
def test_vector_and_parquet_formats(tmp_path, name):
    f = tmp_path / name
    gdf = _points_gdf()
    if name == "plain.parquet":
        pd.DataFrame({"x": RD_X, "y": RD_Y, "user": list("abcdef")}).to_parquet(f)
        t = read_points(f, subject="user", crs="EPSG:28992", chunksize=4)
    else:
        if name.endswith(".parquet"):
            gdf.to_parquet(f)
        else:
            gdf.to_file(f)
        t = read_points(f, subject="user", chunksize=4)
    assert isinstance(t, PointTable)
    np.testing.assert_allclose(t.x, RD_X)
    np.testing.assert_allclose(t.y, RD_Y)
    assert t.crs == "EPSG:28992" and t.n_subjects == 6
    assert "geometry" not in t.attributes.columns


def test_geojson_lonlat_points_are_projected(tmp_path):
    f = tmp_path / "ll.geojson"
    ll = lonlat_frame()
    gpd.GeoDataFrame(ll, geometry=gpd.points_from_xy(ll.lon, ll.lat), crs=4326).drop(
        columns=["lon", "lat"]
    ).to_file(f)
    t = read_points(f)
    assert t.crs == "EPSG:4326" and t.working_crs == "EPSG:32631"


def test_non_point_geometry_refused(tmp_path):
    f = tmp_path / "poly.gpkg"
    gpd.GeoDataFrame({"a": [1]}, geometry=[shapely.box(0, 0, 1, 1)], crs=28992).to_file(f)
    before = listing(tmp_path)
    with pytest.raises(InputError, match=r"1 features of 'poly\.gpkg' are not points"):
        read_points(f)
    assert listing(tmp_path) == before


def test_chunked_csv_equals_whole(tmp_path):
    f = tmp_path / "many.csv"
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "x": 155000 + rng.uniform(0, 5000, 50),
            "y": 463000 + rng.uniform(0, 5000, 50),
            "user": [f"u{i % 7:03d}" for i in range(50)],
            "t": 1_700_000_000 + np.arange(50) * 60,
            "note": ["n"] * 50,
        }
    )
    frame.to_csv(f, index=False)
    whole = read_points(f, subject="user", time="t", crs="EPSG:28992")
    parts = read_points(f, subject="user", time="t", crs="EPSG:28992", chunksize=7)
    np.testing.assert_array_equal(whole.x, parts.x)
    np.testing.assert_array_equal(whole.subjects, parts.subjects)
    np.testing.assert_array_equal(whole.times, parts.times)
    pd.testing.assert_frame_equal(whole.attributes, parts.attributes)
    assert whole.n_subjects == 7


# ------------------------------------------------------------------ times


def test_times_iso_offsets_epoch_and_timezone():
    base = rd_frame()
    iso = table_from_frame(base.assign(t=["2024-03-01T10:00:00Z"] * 6), time="t", crs="EPSG:28992")
    off = table_from_frame(
        base.assign(t=["2024-03-01T11:00:00+01:00"] * 6), time="t", crs="EPSG:28992"
    )
    naive = table_from_frame(
        base.assign(t=["2024-03-01 11:00:00"] * 6),
        time="t",
        crs="EPSG:28992",
        timezone="Europe/Amsterdam",
    )
    epoch = table_from_frame(base.assign(t=[1709287200] * 6), time="t", crs="EPSG:28992")
    for t in (iso, off, naive, epoch):
        assert t.times is not None
        assert t.times[0] == 1709287200.0


# ------------------------------------------------------------------ units


@pytest.fixture
def unit_file(tmp_path) -> Path:
    f = tmp_path / "units" / "u.gpkg"
    f.parent.mkdir()
    bowtie = shapely.Polygon(
        [(155100, 462900), (155300, 463100), (155300, 462900), (155100, 463100)]
    )
    gpd.GeoDataFrame(
        {"code": ["W", "E", "Z"]},
        geometry=[shapely.box(154900, 462900, 155100, 463100), bowtie, shapely.box(0, 0, 1, 1)],
        crs=28992,
    ).to_file(f)
    return f


def test_polygon_units_with_repair_and_unassigned(unit_file):
    frame = rd_frame()
    frame.loc[5, ["x", "y"]] = [155500.0, 463500.0]  # in no polygon
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = table_from_frame(frame, crs="EPSG:28992", units=unit_file, unit_id="code")
    texts = [str(w.message) for w in caught]
    assert any("1 unit polygons in 'u.gpkg' were invalid and were repaired" in m for m in texts)
    assert any("1 records fall in no polygon of 'u.gpkg' (rows 6)" in m for m in texts)
    names = t.unit_names[t.unit_codes].tolist()
    assert names[:3] == ["W", "W", "W"] and names[5] == UNASSIGNED
    assert t.n_unassigned == 1
    assert "Z" not in t.unit_names.tolist()  # a unit without records is no unit of the table


def test_polygon_units_in_another_crs(unit_file, tmp_path):
    g = gpd.read_file(unit_file).to_crs(4326)
    f = tmp_path / "u4326.geojson"
    g.to_file(f)
    t = table_from_frame(rd_frame(), crs="EPSG:28992", units=f, unit_id="code")
    assert t.unit_names[t.unit_codes].tolist()[:3] == ["W", "W", "W"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"unit_id": "cod"}, "unit id column 'cod' is not in 'u.gpkg'; did you mean 'code'?"),
        ({"unit_id": "code", "shift": 1e5}, "fall in no polygon of 'u.gpkg'"),
    ],
)
def test_polygon_unit_refusals(unit_file, kw, message):
    shift = kw.pop("shift", 0.0)
    frame = rd_frame()
    frame["x"] += shift
    before = listing(unit_file.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError) as info:
            table_from_frame(frame, crs="EPSG:28992", units=unit_file, **kw)
    assert message in str(info.value)
    assert listing(unit_file.parent) == before


def test_grid_units():
    t = table_from_frame(rd_frame(), crs="EPSG:28992", unit_grid_m=100)
    assert t.unit_names[t.unit_codes][0] == "E155000_N463000"
    u = grid_units(np.array([-1.0, 1.0]), np.array([0.5, 0.5]), 1.0)
    assert u.names[u.codes].tolist() == ["E-1_N0", "E1_N0"]


@pytest.mark.parametrize("spread", [3e4, 1e9])  # a dense cell range (presence table), a sparse one
def test_grid_units_codes_are_the_sorted_cells(spread):
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-spread, spread, 500), rng.uniform(-spread, spread, 500)
    # points on cell edges, either side of zero (floor, not truncation)
    edges = np.array([-2000.0, -1000.0, -999.999, -0.0, 0.0, 999.999, 1000.0, 2000.0])
    x = np.concatenate([x, edges, np.roll(edges, 3)])
    y = np.concatenate([y, np.roll(edges, 5), edges])
    u = grid_units(x, y, 1000.0)
    cells = list(
        zip(np.floor(x / 1000.0).astype(int), np.floor(y / 1000.0).astype(int), strict=True)
    )
    order = sorted(set(cells))
    assert u.codes.tolist() == [order.index(c) for c in cells]
    assert u.names.tolist() == [f"E{i * 1000}_N{j * 1000}" for i, j in order]


# ------------------------------------------------------------------ command line


def test_cli_lonlat_classify_and_refusal(tmp_path, capsys):
    f = tmp_path / "ll.csv"
    lonlat_frame().to_csv(f, index=False)
    code = main(["classify", str(f), "--lon", "lon", "--lat", "lat", "--k", "3", "--r-max", "200",
                 "--subject", "user", "--json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    g = tmp_path / "beijing.csv"
    g.write_text("lon,lat\n116.30,39.90\n116.31,39.91\n116.32,39.92\n")
    before = listing(tmp_path)
    code = main(["classify", str(g), "--lon", "lat", "--lat", "lon", "--k", "3", "--r-max", "200"])
    assert code == 2
    assert "look swapped" in capsys.readouterr().err
    code = main(["classify", str(f), "--k", "3", "--r-max", "0.002"])
    assert code == 2
    assert "degrees would be about 222 m" in capsys.readouterr().err
    assert listing(tmp_path) == before


def test_study_area_refuses_points_outside_and_spots_swapped_lonlat(tmp_path):
    area = tmp_path / "area" / "amersfoort.geojson"
    area.parent.mkdir()
    gpd.GeoDataFrame(geometry=[shapely.box(5.2, 52.0, 5.6, 52.3)], crs=4326).to_file(area)
    ll = lonlat_frame()
    assert len(table_from_frame(ll, study_area=area)) == 6
    before = listing(tmp_path)
    swapped = ll.rename(columns={"lon": "lat", "lat": "lon"})  # both still valid degrees
    with pytest.raises(InputError) as info:
        table_from_frame(swapped, study_area=area)
    assert "6 of 6 records lie outside the study area 'amersfoort.geojson'" in str(info.value)
    assert "look swapped" in str(info.value)
    rd = rd_frame()
    rd.loc[2, "x"] += 100_000
    with pytest.raises(InputError, match=r"1 of 6 records .* \(rows 3\); check --crs"):
        table_from_frame(rd, crs="EPSG:28992", study_area=area)
    assert listing(tmp_path) == before


def test_frames_with_repeated_or_non_string_column_names():
    with pytest.raises(InputError, match="column names repeat in the input"):
        table_from_frame(pd.DataFrame([[155000.0, 463000.0, 1.0]], columns=["x", "x", "y"]))
    frame = pd.DataFrame({0: RD_X, 1: RD_Y})
    assert len(table_from_frame(frame, x="0", y="1", crs="EPSG:28992")) == 6


@pytest.mark.parametrize("name", sorted(CASES))
def test_canonical_cases_read_or_refuse_cleanly(name):
    x, y, subjects = CASES[name]
    frame = pd.DataFrame({"x": x, "y": y})
    if subjects is not None:
        frame["s"] = subjects
    kw = {"subject": "s"} if subjects is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("empty", "nan"):
            with pytest.raises(InputError, match=r"no records|NaN"):
                table_from_frame(frame, coord_scale=1.0, **kw)
            return
        t = table_from_frame(frame, coord_scale=1.0, **kw)  # "these really are metres"
    assert len(t) == len(x)
    np.testing.assert_array_equal(t.x, x)


def test_duplicate_warning_says_what_copies_mean_without_subjects(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("x,y,p\n155000,463000,a\n155100,463100,b\n155000,463000,a\n")
    with pytest.warns(PrivacyRiskWarning, match=r"each copy counts as a subject of its own") as w:
        read_points(f, crs="EPSG:28992")
    text = str(w[0].message)
    assert "--subject" in text and "--drop-duplicates" in text and "group of 5" in text
    with pytest.warns(UserWarning, match=r"each counts as a record \(of its subject\)"):
        t = read_points(f, crs="EPSG:28992", subject="p")
    assert t.duplicates == 1 and not t.duplicates_dropped


def test_drop_duplicates_removes_copies_first(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text(
        "x,y,p,v\n155000,463000,a,1\n155100,463100,b,2\n155000,463000,a,1\n"
        "155000,463000,a,3\n155100,463100,b,2\n"
    )
    with pytest.warns(UserWarning, match=r"2 records .*rows 3, 5.*removed before anything"):
        t = read_points(f, crs="EPSG:28992", subject="p", drop_duplicates=True)
    assert len(t) == 3 and t.duplicates == 2 and t.duplicates_dropped
    assert t.attributes["v"].tolist() == [1, 2, 3]  # the first of each set stays, in order
    assert t.subjects is not None and t.subjects.tolist() == [0, 1, 0]
    with pytest.raises(InputError, match="drop_duplicates"):
        ReadOptions(drop_duplicates="yes")  # type: ignore[arg-type]


# ---- --merge-small-units, --exclude-units, --clip (issue 16 item 4) ----------------------


def test_merge_small_units_follows_polygon_adjacency_not_the_nearest_centre() -> None:
    from geokanon.io.units import merge_small_units

    # A (2 records) lies nearest C's records, but its polygon touches only B.
    codes = np.array([0, 0, 1, 1, 1, 2, 2, 2])
    names = np.array(["A", "B", "C"], dtype=object)
    x = np.array([0.0, 1, -500, -501, -502, 20, 21, 22])
    y = np.zeros(8)
    nearest = merge_small_units(codes, names, None, x, y, 3)
    assert nearest.merged == {"A": "A+C", "C": "A+C"}
    adjacent = merge_small_units(codes, names, None, x, y, 3, adjacency=frozenset({("A", "B")}))
    assert adjacent.merged == {"A": "A+B", "B": "A+B"}
    assert adjacent.names.tolist() == ["A+B", "C"]
    alone = merge_small_units(codes, names, None, x, y, 3, adjacency=frozenset())
    assert alone.merged == {} and alone.left_small == ("A",)


def test_merge_small_units_does_not_depend_on_row_order() -> None:
    from geokanon.io.units import merge_small_units

    rng = np.random.default_rng(4)
    codes = rng.integers(0, 30, 400)
    names = np.array([f"U{i:02d}" for i in range(30)], dtype=object)
    x, y = rng.normal(0, 1000, 400), rng.normal(0, 1000, 400)
    a = merge_small_units(codes, names, None, x, y, 16)
    perm = rng.permutation(400)
    b = merge_small_units(codes[perm], names, None, x[perm], y[perm], 16)
    assert a.merged == b.merged and a.merged
    assert np.array_equal(a.names[a.codes][perm], b.names[b.codes])
    sizes = np.bincount(a.codes)
    assert sizes.min() >= 16


def test_input_filter_options_are_validated() -> None:
    from geokanon.io.read import ReadOptions

    with pytest.raises(InputError, match="--clip needs --study-area FILE"):
        ReadOptions(clip=True)
    with pytest.raises(InputError, match="--merge-small-units must be an integer >= 2, got 1"):
        ReadOptions(unit="u", merge_small_units=1)
    with pytest.raises(InputError, match="--exclude-units needs units"):
        ReadOptions(exclude_units="A")
    assert ReadOptions(unit="u", exclude_units="A, B").exclude_units == ("A", "B")
    assert ReadOptions(unit="u", exclude_units=["A"]).exclude_units == ("A",)


def test_exclude_units_drops_records_and_recodes_subjects_and_units() -> None:
    frame = pd.DataFrame(
        {"x": [155e3, 155001, 155002, 156e3], "y": [463e3] * 4, "u": ["a", "b", "a", "c"],
         "s": ["p", "q", "r", "q"]}
    )  # fmt: skip
    t = table_from_frame(frame, unit="u", subject="s", crs="EPSG:28992", exclude_units="b")
    assert len(t) == 3 and t.excluded == (("b", 1),)
    assert t.unit_names.tolist() == ["a", "c"] and t.unit_codes.tolist() == [0, 0, 1]
    assert sorted(t.subjects.tolist()) == [0, 1, 2] and t.n_subjects == 3
    with pytest.raises(InputError, match="did you mean 'b'"):
        table_from_frame(frame, unit="u", crs="EPSG:28992", exclude_units="bb")


def test_repeated_pairs_finds_every_record_of_a_repeated_coordinate_pair():
    from geokanon.io.read import _repeated_pairs

    rng = np.random.default_rng(3)
    for n, repeats in ((0, 0), (1, 0), (2, 1), (5000, 40), (200_000, 5000)):
        a = rng.normal(0, 1e4, n).round(1)
        b = rng.normal(0, 1e4, n).round(1)
        if repeats:
            src = rng.integers(0, n, repeats)
            dst = rng.integers(0, n, repeats)
            a[dst], b[dst] = a[src], b[src]
        pairs = np.stack([a, b], axis=1) if n else np.zeros((0, 2))
        _, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
        want = np.flatnonzero(counts[inverse.reshape(-1)] > 1)
        got = _repeated_pairs(a, b)
        # every repeated pair is found, ascending; a key collision may add a few candidates
        # (the caller compares them in full)
        assert np.all(np.diff(got) > 0)
        assert np.isin(want, got).all()
        assert got.size - want.size <= n // 200


def test_parquet_text_units_read_as_their_dictionary_number_as_from_csv(tmp_path):
    """A Parquet text unit column is read as its dictionary (a categorical per batch,
    each row group its own texts in first-seen order); the units' codes and names are
    those the same column gives from a CSV (sorted texts, only those present), and a
    missing unit is refused with the same message."""
    rng = np.random.default_rng(4)
    n = 5_000
    names = np.array(["GM0344", "gm0001", "GM0010", "Zeist", "Ämstelveen", "GM0010 "])
    frame = pd.DataFrame(
        {"x": rng.uniform(150_000, 160_000, n).round(1), "y": rng.uniform(450_000, 460_000, n),
         "unit": names[rng.integers(0, names.size - 1, n)]}  # the last name never occurs
    )  # fmt: skip
    frame.loc[frame.index[-700:], "unit"] = "GM0344"  # a row group of one text
    frame.to_parquet(tmp_path / "u.parquet", row_group_size=1_000)
    frame.to_csv(tmp_path / "u.csv", index=False)
    opts = {"x": "x", "y": "y", "unit": "unit", "crs": "EPSG:28992", "chunksize": 1_500}
    from_parquet = read_points(tmp_path / "u.parquet", **opts)
    from_csv = read_points(tmp_path / "u.csv", **opts)
    assert from_parquet.unit_names.tolist() == from_csv.unit_names.tolist()
    assert sorted(from_csv.unit_names.tolist()) == from_csv.unit_names.tolist()
    assert np.array_equal(from_parquet.unit_codes, from_csv.unit_codes)
    frame.loc[frame.index[[7, 2_500]], "unit"] = None
    frame.to_parquet(tmp_path / "m.parquet", row_group_size=1_000)
    with pytest.raises(InputError, match=r"2 records have no unit in 'unit' \(rows 8, 2501\)"):
        read_points(tmp_path / "m.parquet", **opts)


def test_a_unit_holding_a_carriage_return_is_refused_with_its_rows(tmp_path):
    """units.csv (lines ending in \\n, as pandas writes it) leaves a carriage return
    unquoted, so it would not read back as the units it lists: the release crashed in
    writing its GeoPackage. A line break and every other character read back, and pass."""
    frame = pd.DataFrame(
        {"x": np.arange(6) * 400.0, "y": np.zeros(6), "unit": ["A", "B\r", "A", "B\r", "C\n", "D"]}
    )
    frame.to_parquet(tmp_path / "u.parquet")
    opts = {"x": "x", "y": "y", "unit": "unit", "crs": "EPSG:28992"}
    with pytest.raises(
        InputError, match=r"2 records have a unit in 'unit' holding a carriage return .*rows 2, 4"
    ):
        read_points(tmp_path / "u.parquet", **opts)
    frame["unit"] = frame["unit"].str.replace("\r", "", regex=False)
    frame.to_parquet(tmp_path / "u.parquet")
    assert read_points(tmp_path / "u.parquet", **opts).unit_names.tolist() == ["A", "B", "C\n", "D"]


def test_a_csv_not_in_utf8_says_so_and_how_to_convert(tmp_path):
    """A register saved as Latin-1 by a spreadsheet was "could not be read as CSV
    (UnicodeDecodeError); check that the file is complete and of the type its name says":
    it is both. A UTF-8 file with a byte-order mark reads."""
    frame = pd.DataFrame({"x": [155_000.0, 155_400.0], "y": [463_000.0] * 2, "u": ["Bünnik"] * 2})
    frame.to_csv(tmp_path / "latin.csv", index=False, encoding="latin-1")
    with pytest.raises(InputError, match=r"'latin.csv' is not UTF-8 text .* save it as UTF-8"):
        read_points(tmp_path / "latin.csv", x="x", y="y", unit="u", crs="EPSG:28992")
    frame.to_csv(tmp_path / "bom.csv", index=False, encoding="utf-8-sig")
    table = read_points(tmp_path / "bom.csv", x="x", y="y", unit="u", crs="EPSG:28992")
    assert table.unit_names.tolist() == ["Bünnik"]

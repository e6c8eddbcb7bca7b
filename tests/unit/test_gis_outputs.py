"""A release GIS software opens as it is (issue 20): GeoParquet 1.1 and release.gpkg.

One small release made through the CLI (two towns, a scattered hamlet that is generalised
to its unit, a few records outside every unit polygon) is read back with geopandas and
pyogrio; tampered copies of its GeoPackage must fail ``verify`` (exit 4) naming the check.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import struct
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pyogrio
import pytest
import shapely
from pyproj import CRS, Transformer

from geokanon import OutlierPolicy
from geokanon.cli import main
from geokanon.encoding import settle_sqlite
from geokanon.errors import InputError
from geokanon.io import table_from_frame
from geokanon.io.gis import DISC_VERTICES
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, build_release_files, finish_manifest
from geokanon.verify import verify_release
from tests.release_fixtures import refresh_manifest

CRS_RD = "EPSG:28992"
LAYERS = ("records", "groups", "group_extents", "units", "classes")


def _points() -> pd.DataFrame:
    rng = np.random.default_rng(20)
    hamlet = np.array([[0, 0], [300, 0], [0, 300], [300, 300], [150, 150], [600, 0.0]])
    xy = np.r_[
        rng.normal(0, 60, (60, 2)) + np.array([152_000.0, 463_000.0]),  # west town
        rng.normal(0, 50, (40, 2)) + np.array([157_000.0, 463_000.0]),  # east town
        hamlet + np.array([158_000.0, 466_000.0]),  # east, scattered: generalised to its unit
        rng.normal(0, 20, (4, 2)) + np.array([162_000.0, 463_000.0]),  # in no polygon: "unassigned"
    ]
    return pd.DataFrame({"x": xy[:, 0].round(1), "y": xy[:, 1].round(1)})


def _units(path: Path) -> None:
    gpd.GeoDataFrame(
        {"code": ["west", "east"]},
        geometry=[
            shapely.box(148_000, 458_000, 155_000, 468_000),
            shapely.box(155_000, 458_000, 161_000, 468_000),
        ],
        crs=CRS_RD,
    ).to_file(path)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the release directory, the source CSV)."""
    d = tmp_path_factory.mktemp("gis")
    src = d / "points.csv"
    _points().to_csv(src, index=False)
    _units(d / "units.gpkg")
    out = d / "out"
    args = [
        "--quiet", "release", str(src), "--x", "x", "--y", "y", "--crs", CRS_RD, "--k", "3",
        "--r-max", "200", "--units", str(d / "units.gpkg"), "--unit-id", "code",
        "--tau", "0.5", "--unit-cap", "1", "--out", str(out),
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 0
    return out, src


def _copy(made: tuple[Path, Path], tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(made[0], out)
    return out


def test_gpkg_layers_read_back_with_their_crs_and_counts(made: tuple[Path, Path]) -> None:
    rel = made[0] / "release"
    gpkg = rel / "release.gpkg"
    listed = dict(pyogrio.list_layers(gpkg).tolist())
    assert set(listed) == {*LAYERS, "layer_styles"}
    assert listed["records"] == "Point" and listed["group_extents"] == "Polygon"
    assert listed["layer_styles"] is None  # an attribute table
    layer = {name: gpd.read_file(gpkg, layer=name) for name in LAYERS}
    for name, frame in layer.items():
        assert frame.crs is not None and frame.crs.to_epsg() == 28992, name
    records = pq.read_table(rel / "records.parquet").to_pandas()
    groups = pd.read_parquet(rel / "groups.parquet")
    classes = pd.read_parquet(rel / "classes.parquet")
    units = pd.read_csv(rel / "units.csv", dtype=str, keep_default_na=False)
    assert len(layer["records"]) == len(records) > 0
    assert len(layer["groups"]) == len(layer["group_extents"]) == len(groups) > 0
    assert len(layer["classes"]) == len(classes) > 0
    assert len(layer["units"]) == len(units)
    # groups: representatives with n_records and unit, at the published x, y
    g = layer["groups"]
    assert g["n_records"].tolist() == groups["n_records"].tolist()
    assert g["unit"].tolist() == groups["unit"].tolist()
    assert np.array_equal(g.geometry.x.to_numpy(), groups["x"].to_numpy())
    # records: points at the representatives, none for generalised rows
    r = layer["records"]
    at_group = records["group_id"].notna().to_numpy()
    assert r.geometry.isna().to_numpy().tolist() == (~at_group).tolist()
    assert np.array_equal(r.geometry.x.to_numpy()[at_group], records["x"].to_numpy()[at_group])


def test_units_layer_repeats_units_csv_and_invents_no_geometry(made: tuple[Path, Path]) -> None:
    rel = made[0] / "release"
    units = pd.read_csv(rel / "units.csv", dtype=str, keep_default_na=False)
    layer = gpd.read_file(rel / "release.gpkg", layer="units")
    for col in units.columns:
        assert [str(v) for v in layer[col]] == units[col].tolist(), col
    shapes = dict(zip(layer["unit"], layer.geometry, strict=True))
    assert set(shapes) == {"east", "west", "unassigned"}
    assert shapes["unassigned"] is None  # no polygon: no geometry, not a made-up one
    assert shapes["west"].equals(shapely.box(148_000, 458_000, 155_000, 468_000))


def test_group_extents_hold_every_member(made: tuple[Path, Path]) -> None:
    out = made[0]
    extents = gpd.read_file(out / "release" / "release.gpkg", layer="group_extents")
    audit = pd.read_parquet(out / "audit" / "assignment.parquet")
    grouped = audit[audit["group_id"].notna()]
    disc = dict(zip(extents["group_id"], extents.geometry, strict=True))
    inside = [
        disc[int(g)].covers(shapely.Point(x, y))
        for g, x, y in zip(grouped["group_id"], grouped["x_m"], grouped["y_m"], strict=True)
    ]
    assert inside and all(inside)
    # the disc of r_max (200 m) and not much more: area of the circumscribed n-gon
    area = extents.geometry.area.to_numpy()
    n = DISC_VERTICES
    assert n >= 16 and np.allclose(area, n * 200.0**2 * np.tan(np.pi / n))


def test_parquet_files_are_geoparquet_1_1(made: tuple[Path, Path]) -> None:
    rel = made[0] / "release"
    for name, kinds in (
        ("records.parquet", ["Point"]),
        ("groups.parquet", ["Point"]),
        ("classes.parquet", ["MultiPolygon", "Polygon"]),
    ):
        geo = json.loads(pq.read_schema(rel / name).metadata[b"geo"])
        assert geo["version"] == "1.1.0", name
        col = geo["columns"]["geometry"]
        assert col["encoding"] == "WKB"
        assert set(col["geometry_types"]) <= set(kinds) and col["geometry_types"], name
        assert CRS.from_json_dict(col["crs"]) == CRS.from_user_input(CRS_RD)
        assert col["covering"]["bbox"]["xmin"] == ["bbox", "xmin"]
        frame = gpd.read_parquet(rel / name)  # "Missing geo metadata" before
        assert frame.crs.to_epsg() == 28992
        b = frame.geometry.bounds
        xmin, ymin, xmax, ymax = col["bbox"]
        assert (xmin, ymin, xmax, ymax) == (b.minx.min(), b.miny.min(), b.maxx.max(), b.maxy.max())
    groups = gpd.read_parquet(rel / "groups.parquet")
    assert np.array_equal(groups.geometry.x.to_numpy(), groups["x"].to_numpy())
    # the covering column filters rows: only the west town's groups
    west = gpd.read_parquet(rel / "groups.parquet", bbox=(148_000, 458_000, 155_000, 468_000))
    assert 0 < len(west) < len(groups) and (west["x"] < 155_000).all()
    # records: generalised rows have no geometry
    records = gpd.read_parquet(rel / "records.parquet")
    assert records.geometry.isna().sum() == records["group_id"].isna().sum() > 0
    # classes: a unit-level class is its unit's polygon
    classes = gpd.read_parquet(rel / "classes.parquet")
    east = classes[(classes["level"] == "unit") & (classes["unit"] == "east")]
    assert len(east) == 1
    assert east.geometry.iloc[0].equals(shapely.box(155_000, 458_000, 161_000, 468_000))


def test_manifest_and_notes_name_every_coordinate_file_crs(made: tuple[Path, Path]) -> None:
    rel = made[0] / "release"
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["file_crs"] == {
        f: CRS_RD
        for f in (
            "records.parquet",
            "records.csv",
            "groups.parquet",
            "classes.parquet",
            "release.gpkg",
        )
    }
    notes = (rel / "RELEASE_NOTES.md").read_text()
    line = next(s for s in notes.splitlines() if s.startswith("- coordinates:"))
    assert "`records.csv`" in line and CRS_RD in line and "`units.csv`" in line


def test_layer_styles_hold_a_default_qgis_style_per_layer(made: tuple[Path, Path]) -> None:
    gpkg = made[0] / "release" / "release.gpkg"
    styles = pyogrio.read_dataframe(gpkg, layer="layer_styles")
    expected = [
        "f_table_catalog", "f_table_schema", "f_table_name", "f_geometry_column", "styleName",
        "styleQML", "styleSLD", "useAsDefault", "description", "owner", "ui", "update_time",
    ]  # fmt: skip
    assert [c for c in styles.columns if c != "geometry"] == expected
    assert sorted(styles["f_table_name"]) == sorted(LAYERS)
    assert styles["useAsDefault"].all()
    geom = pyogrio.read_info(gpkg, layer="groups")["geometry_name"]
    assert (styles["f_geometry_column"] == geom).all()
    qml = {}
    for name, text, sld in zip(
        styles["f_table_name"], styles["styleQML"], styles["styleSLD"], strict=True
    ):
        root = ET.fromstring(text.split("\n", 1)[1])  # after the DOCTYPE line
        assert root.tag == "qgis" and root.find("renderer-v2") is not None, name
        assert ET.fromstring(sld).tag.endswith("StyledLayerDescriptor")
        qml[name] = root
    # groups sized by records
    exprs = [o.get("value") for o in qml["groups"].iter("Option") if o.get("name") == "expression"]
    assert any('"n_records"' in (e or "") for e in exprs)
    # units: rule-based, <k hatched, shares against the cap
    rules = {r.get("label"): r for r in qml["units"].iter("rule")}
    hatched = rules["suppressed <k (hatched)"]
    assert "'<k'" in hatched.get("filter", "")
    sym = next(s for s in qml["units"].iter("symbol") if s.get("name") == hatched.get("symbol"))
    style = [o.get("value") for o in sym.iter("Option") if o.get("name") == "style"]
    assert style == ["b_diagonal"]
    assert any("unit cap" in label for label in rules)


def test_records_layer_left_out_above_the_limit_and_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the size limit the per-record and per-group layers are left out by default
    (``auto``), each forced in or out by its option; units and classes are always there,
    the manifest lists what was written and the release verifies."""
    import geokanon.release as release

    frame = _points()
    policy = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0)
    monkeypatch.setattr(release, "GPKG_RECORDS_AUTO_MAX", 50)  # the scene publishes more
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, crs=CRS_RD, unit_grid_m=2000.0)
        core = run_core_on(table, policy)
        cases = (
            ("auto", "auto", False, False),
            ("yes", "auto", True, False),
            ("auto", "yes", False, True),
            ("no", "no", False, False),
            ("yes", "yes", True, True),
        )
        for records, groups, has_records, has_groups in cases:
            root = tmp_path / f"{records}-{groups}"
            options = ReleaseOptions(
                read_options=(("unit_grid_m", 2000.0),), gpkg_records=records, gpkg_groups=groups
            )
            manifest = build_release_files(root, table, core, policy, options, version="t")
            finish_manifest(root, manifest)
            layers = dict(pyogrio.list_layers(root / "release" / "release.gpkg").tolist())
            assert ("records" in layers) is has_records, (records, groups)
            assert ("records" in manifest["gpkg_layers"]) is has_records
            for name in ("groups", "group_extents"):
                assert (name in layers) is has_groups, (records, groups, name)
                assert (name in manifest["gpkg_layers"]) is has_groups
            assert {"units", "classes"} <= set(layers) & set(manifest["gpkg_layers"])
            notes = (root / "release" / "RELEASE_NOTES.md").read_text(encoding="utf-8")
            line = next(x for x in notes.splitlines() if "`release.gpkg` holds the layers" in x)
            assert ("left out" in line) is not (has_records and has_groups), line
            assert ("--gpkg-groups yes" in line) is not (has_records and has_groups)
            report = verify_release(root, source=table)
            assert report.passed, (records, groups, report)
    # below the limit, every layer by default
    monkeypatch.setattr(release, "GPKG_RECORDS_AUTO_MAX", 10**6)
    root = tmp_path / "small"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = ReleaseOptions(read_options=(("unit_grid_m", 2000.0),))
        manifest = build_release_files(root, table, core, policy, options, version="t")
    assert manifest["gpkg_layers"] == list(LAYERS)
    with pytest.raises(InputError):
        ReleaseOptions(gpkg_records="sometimes")
    with pytest.raises(InputError):
        ReleaseOptions(gpkg_groups="sometimes")


def test_gpkg_without_the_group_layers_fails_when_the_manifest_lists_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest that leaves out one group layer but not the other, or a GeoPackage that
    lacks a layer the manifest lists, fails ``counts``."""
    import geokanon.release as release
    from tests.release_fixtures import edit_manifest

    frame = _points()
    policy = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0)
    monkeypatch.setattr(release, "GPKG_RECORDS_AUTO_MAX", 50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, crs=CRS_RD, unit_grid_m=2000.0)
        core = run_core_on(table, policy)
        root = tmp_path / "r"
        options = ReleaseOptions(read_options=(("unit_grid_m", 2000.0),))
        manifest = build_release_files(root, table, core, policy, options, version="t")
        finish_manifest(root, manifest)
    assert verify_release(root, source=table, checks=["counts"])["counts"].passed
    edit_manifest(root, lambda m: m.update(gpkg_layers=[*m["gpkg_layers"], "groups"]))
    assert not verify_release(root, source=table, checks=["counts"])["counts"].passed
    edit_manifest(root, lambda m: m.update(gpkg_layers=[*m["gpkg_layers"], "group_extents"]))
    result = verify_release(root, source=table, checks=["counts"])["counts"]
    assert not result.passed and "layers" in result.detail


def test_same_release_same_geopackage_bytes(tmp_path: Path) -> None:
    frame = _points()
    _units(tmp_path / "u.gpkg")
    ro = {"units": str(tmp_path / "u.gpkg"), "unit_id": "code"}
    policy = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0)
    digests = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, crs=CRS_RD, **ro)
        core = run_core_on(table, policy)
        for name in ("a", "b"):
            root = tmp_path / name
            options = ReleaseOptions(read_options=tuple(ro.items()))
            manifest = build_release_files(root, table, core, policy, options, version="t")
            finish_manifest(root, manifest)
            digests.append(
                hashlib.sha256((root / "release" / "release.gpkg").read_bytes()).hexdigest()
            )
    assert digests[0] == digests[1]


def test_lonlat_extents_built_in_the_working_crs_and_carried_to_the_output(
    tmp_path: Path,
) -> None:
    frame = _points()
    to_ll = Transformer.from_crs(CRS_RD, "EPSG:4326", always_xy=True)
    lon, lat = to_ll.transform(frame["x"].to_numpy(), frame["y"].to_numpy())
    ll = pd.DataFrame({"lon": np.round(lon, 7), "lat": np.round(lat, 7)})
    policy = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(ll, lon="lon", lat="lat", unit_grid_m=5000.0)
        core = run_core_on(table, policy)
        options = ReleaseOptions(read_options=(("unit_grid_m", 5000.0),))
        manifest = build_release_files(tmp_path, table, core, policy, options, version="t")
        finish_manifest(tmp_path, manifest)
        report = verify_release(tmp_path, source=table)
    assert manifest["crs"] == "EPSG:4326"
    failed = {c.name: c.detail for c in report.checks if not c.passed and c.name != "deterministic"}
    assert not failed
    gpkg = tmp_path / "release" / "release.gpkg"
    extents = gpd.read_file(gpkg, layer="group_extents")
    assert extents.crs.to_epsg() == 4326
    audit = json.loads((tmp_path / "audit" / "audit.json").read_text())
    back = Transformer.from_crs("EPSG:4326", audit["working_crs"], always_xy=True)
    groups = pd.read_parquet(tmp_path / "release" / "groups.parquet")
    for poly, x, y in zip(extents.geometry, groups["x"], groups["y"], strict=True):
        vx, vy = back.transform(*np.asarray(poly.exterior.coords).T)
        cx, cy = back.transform(x, y)
        reach = np.hypot(np.asarray(vx) - cx, np.asarray(vy) - cy)
        assert np.allclose(reach, 200.0 / np.cos(np.pi / DISC_VERTICES), rtol=1e-6)
    # grid cells carried to lon/lat are the units' polygons; every unit has one
    units = gpd.read_file(gpkg, layer="units")
    assert units.geometry.notna().all() and units.crs.to_epsg() == 4326


# ---- tampered GeoPackages fail verify -------------------------------------------------


def _gpkg_sql(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run ``sql`` on the GeoPackage (its R-tree triggers dropped: they need GDAL's SQL),
    then lay it out again as the writer does: the pages freed and the space left in them
    would fail ``no_leak`` on their own."""
    con = sqlite3.connect(path)
    names = con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for (name,) in names:
        con.execute(f'DROP TRIGGER "{name}"')
    con.execute(sql, params)
    con.commit()
    con.close()
    settled = path.with_name("settled.gpkg")
    settle_sqlite(path, settled)
    settled.replace(path)


def _set_point(path: Path, layer: str, fid: int, xy: tuple[float, float] | None = None) -> None:
    """Move the point of feature ``fid`` (1 m east, or to ``xy``)."""
    con = sqlite3.connect(path)
    blob = con.execute(f'SELECT geom FROM "{layer}" WHERE fid = ?', (fid,)).fetchone()[0]
    con.close()
    envelope = {0: 0, 1: 32, 2: 48, 3: 48, 4: 64}[(blob[3] >> 1) & 7]
    head = 8 + envelope
    assert blob[head] == 1  # little-endian WKB
    x, y = struct.unpack("<dd", blob[head + 5 : head + 21])
    new = blob[:head] + struct.pack("<BIdd", 1, 1, *(xy if xy is not None else (x + 1.0, y)))
    _gpkg_sql(path, f'UPDATE "{layer}" SET geom = ? WHERE fid = ?', (new, fid))


def _move_vertex(path: Path, fid: int, vertex: int, dx: float) -> None:
    """Move one vertex of a group_extents polygon ``dx`` east (the ring stays closed)."""
    con = sqlite3.connect(path)
    blob = con.execute("SELECT geom FROM group_extents WHERE fid = ?", (fid,)).fetchone()[0]
    con.close()
    envelope = {0: 0, 1: 32, 2: 48, 3: 48, 4: 64}[(blob[3] >> 1) & 7]
    at = 8 + envelope + 1 + 4 + 4 + 4 + 16 * vertex  # order, type, rings, points, vertices
    (x,) = struct.unpack("<d", blob[at : at + 8])
    new = blob[:at] + struct.pack("<d", x + dx) + blob[at + 8 :]
    _gpkg_sql(path, "UPDATE group_extents SET geom = ? WHERE fid = ?", (new, fid))


def _verify(out: Path, src: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["verify", str(out), "--source", str(src)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _failed(text: str) -> set[str]:
    return {line.split()[1] for line in text.splitlines() if line.startswith("FAIL")}


def test_untouched_release_verifies(
    made: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _verify(made[0], made[1], capsys)
    assert code == 0, text


def test_point_moved_in_records_layer_fails_counts(
    made: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(made, tmp_path)
    _set_point(out / "release" / "release.gpkg", "records", 1)
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    assert _failed(text) == {"counts"}, text
    assert "records layer differs from records.parquet" in text


def test_extra_row_in_records_layer_fails_counts_at_a_batch_boundary(
    made: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A records layer with one row more than records.parquet fails ``counts`` also when
    records.parquet ends exactly where a batch of the layer ends."""
    import geokanon.verify.gpkg as vg

    out = _copy(made, tmp_path)
    n = pq.ParquetFile(out / "release" / "records.parquet").metadata.num_rows
    monkeypatch.setattr(vg, "_GPKG_ROWS", n)  # the layer's first batch is the whole file
    gpkg = out / "release" / "release.gpkg"
    con = sqlite3.connect(gpkg)
    cols = [r[1] for r in con.execute('PRAGMA table_info("records")') if r[1] != "fid"]
    con.close()
    names = ", ".join(f'"{c}"' for c in cols)
    _gpkg_sql(gpkg, f"INSERT INTO records ({names}) SELECT {names} FROM records WHERE fid = 1")
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    assert "counts" in _failed(text), text
    assert "records layer has not the" in text


def test_units_figure_changed_in_gpkg_fails(
    made: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(made, tmp_path)
    _gpkg_sql(
        out / "release" / "release.gpkg", "UPDATE units SET suppressed = '2' WHERE unit = 'west'"
    )
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    # not units.csv's figure (counts, holes), and one of 1..k-1 (report_safety)
    assert _failed(text) == {"counts", "holes", "report_safety"}, text
    assert "units layer differs from units.csv" in text


def test_source_coordinate_added_to_gpkg_fails_no_leak(
    made: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(made, tmp_path)
    first = pd.read_csv(made[1]).iloc[7]
    gpkg = out / "release" / "release.gpkg"
    _gpkg_sql(
        gpkg,
        "UPDATE layer_styles SET description = ? WHERE f_table_name = 'groups'",
        (f"see {first['x']} {first['y']}",),
    )
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    # found by no_leak; holes fails it too (a style other than the format's)
    assert _failed(text) == {"no_leak", "holes"}, text
    assert "release.gpkg" in text
    # a group's point moved onto a source record: no_leak (and counts: not groups.parquet's)
    _set_point(gpkg, "groups", 1, (float(first["x"]), float(first["y"])))
    _gpkg_sql(
        gpkg,
        "UPDATE layer_styles SET description = 'geokanon default style of the groups layer' "
        "WHERE f_table_name = 'groups'",
    )
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    assert _failed(text) == {"no_leak", "counts"}, text


@pytest.mark.parametrize(
    "sql",
    [
        # a legend label that states a hidden figure (the unit's <k is 1 household)
        "UPDATE layer_styles SET styleQML = replace(styleQML, 'suppressed &lt;k (hatched)', "
        "'suppressed &lt;k (hatched; 1 household)') WHERE f_table_name = 'units'",
        # a rule that draws the units with 1 suppressed as if none were
        "UPDATE layer_styles SET styleQML = replace(styleQML, "
        "'&quot;suppressed&quot; = ''0''', '&quot;suppressed&quot; = ''1''') "
        "WHERE f_table_name = 'units'",
        "UPDATE layer_styles SET styleSLD = replace(styleSLD, '0.5', '0.1') "
        "WHERE f_table_name = 'units'",
        "UPDATE layer_styles SET ui = '1' WHERE f_table_name = 'classes'",
        "UPDATE layer_styles SET update_time = '2000-01-02T00:00:00.000Z' WHERE id = 1",
        "DELETE FROM layer_styles WHERE f_table_name = 'classes'",
        "INSERT INTO layer_styles (f_table_name, styleName, styleQML, useAsDefault) "
        "VALUES ('units', 'second', '<qgis/>', 0)",
        "UPDATE layer_styles SET id = 9 WHERE id = 1",
    ],
    ids=["label", "rule", "sld", "ui", "time", "deleted", "added", "id"],
)
def test_style_other_than_the_formats_fails_holes(
    made: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str
) -> None:
    """release.gpkg's styles are the format's (geokanon.published.layer_styles), row for
    row: a label, a rule, a row more or less is text a GIS shows that no check derives."""
    out = _copy(made, tmp_path)
    gpkg = out / "release" / "release.gpkg"
    before = sqlite3.connect(gpkg).execute("SELECT * FROM layer_styles").fetchall()
    _gpkg_sql(gpkg, sql)
    assert sqlite3.connect(gpkg).execute("SELECT * FROM layer_styles").fetchall() != before
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    assert "holes" in _failed(text), text
    assert "layer_styles: " in text and "rows other than the release format's styles" in text
    assert "household" not in text  # a style's text is not quoted


def test_extent_vertex_moved_fails_counts(
    made: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(made, tmp_path)
    _move_vertex(out / "release" / "release.gpkg", 2, 3, 0.5)
    refresh_manifest(out)
    code, text = _verify(out, made[1], capsys)
    assert code == 4
    assert _failed(text) == {"counts"}, text
    assert "extents are not the r_max disc of their group" in text

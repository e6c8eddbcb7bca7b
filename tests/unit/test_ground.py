"""r_max holds on the ground: lon/lat input projected to UTM, where the map understates.

On a transverse Mercator's central meridian the scale is k0 = 0.9996: a member
249.97 m from its representative in UTM metres is 250.07 m from it on the WGS 84
ellipsoid. The release must keep every member within r_max on the ellipsoid, and
the verifier must measure there.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pyproj
import pytest

from geokanon.io import read_points, table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.testing import assert_group_extents
from geokanon.verify import verify_release
from tests.release_fixtures import edit_csv, edit_parquet

R_MAX = 250.0
#: Offset of the snap grid, in steps (as in geokanon.grouping): the grid the
#: representatives are snapped to, so a triangle can be centred on a snap point.
OFFSET = 0.0381966011250105
GEOD = pyproj.Geod(ellps="WGS84")


def _utm(epsg: int) -> tuple[pyproj.Transformer, pyproj.Transformer]:
    fwd = pyproj.Transformer.from_crs("EPSG:4326", f"EPSG:{epsg}", always_xy=True)
    back = pyproj.Transformer.from_crs(f"EPSG:{epsg}", "EPSG:4326", always_xy=True)
    return fwd, back


def _triangles(lon0: float, lat0: float, epsg: int, radius: float) -> pd.DataFrame:
    """Triangles of three records on a circle of ``radius`` UTM metres around a snap point.

    The triangle is acute, so the only discs of radius ~``radius`` that cover it are
    centred near the snap point: the grouping either uses that point (members at
    ``radius`` UTM metres) or cannot group them. Clusters of five records 20 m
    apart sit beside each triangle, so there are groups either way.
    """
    fwd, back = _utm(epsg)
    x0, y0 = fwd.transform(lon0, lat0)
    step = R_MAX / 20
    xs: list[float] = []
    ys: list[float] = []
    for i in range(4):
        for j in range(3):
            cx = (math.floor((x0 + 4000 * i) / step) + 0.5 + OFFSET) * step
            cy = (math.floor((y0 + 4000 * j) / step) + 0.5 + OFFSET) * step
            for a in (0.0, 100.0, 220.0):
                t = math.radians(a + 7 * i + 3 * j)
                xs.append(cx + radius * math.cos(t))
                ys.append(cy + radius * math.sin(t))
            for m in range(5):
                xs.append(cx + 1500.0 + 20.0 * m)
                ys.append(cy + 7.0 * m)
    lon, lat = back.transform(np.asarray(xs), np.asarray(ys))
    return pd.DataFrame({"lon": lon, "lat": lat})


def _release(frame: pd.DataFrame, out: Path, k: int = 3) -> Path:
    release_points(table_from_frame(frame), OutlierPolicy(k=k, r_max_m=R_MAX), out)
    return out


def _ground_distances(root: Path, frame: pd.DataFrame) -> np.ndarray:
    """Geodesic distance (WGS 84) of every group member from its published representative."""
    a = pd.read_parquet(root / "audit" / "assignment.parquet")
    a = a[a["group_id"].notna()]
    g = pd.read_parquet(root / "release" / "groups.parquet").set_index("group_id")
    rep = g.loc[a["group_id"].astype(int).to_numpy()]
    rows = a["source_row"].to_numpy(dtype=np.int64)
    _, _, d = GEOD.inv(
        frame["lon"].to_numpy()[rows],
        frame["lat"].to_numpy()[rows],
        rep["x"].to_numpy(dtype=np.float64),
        rep["y"].to_numpy(dtype=np.float64),
    )
    return np.asarray(d)


def test_release_near_the_central_meridian_keeps_r_max_on_the_ellipsoid(tmp_path: Path) -> None:
    # zone 30 (central meridian 3 W): scale 0.9996, the map understates ground distance
    frame = _triangles(-2.999, 53.6, 32630, radius=249.97)
    root = _release(frame, tmp_path / "cm")
    d = _ground_distances(root, frame)
    assert d.size >= 5 * 12  # the clusters are grouped
    assert d.max() <= R_MAX, f"a member is {d.max():.3f} m from its representative on the ground"


def test_release_far_from_the_central_meridian_still_groups_at_r_max(tmp_path: Path) -> None:
    # 2.9 degrees from the central meridian near the equator: scale ~1.0008 > 1, the map
    # overstates ground distance, so r_max on the map is the binding limit, and the
    # triangles 249.97 m (map) from their centre are grouped (not over-shrunk)
    frame = _triangles(-5.9, 5.0, 32630, radius=249.97)
    root = _release(frame, tmp_path / "edge")
    d = _ground_distances(root, frame)
    assert d.size == len(frame)
    assert d.max() <= R_MAX


def test_scale_factor_range_brackets_the_scale_over_the_box() -> None:
    from geokanon.projection import scale_factor_range

    fwd, _ = _utm(32630)
    for lon in (-3.004, -5.5):  # across the central meridian, and far from it
        x, y = fwd.transform(np.array([lon, lon + 0.3]), np.array([53.5, 53.8]))
        s = scale_factor_range(x, y, "EPSG:32630", pad_m=R_MAX)
        # brute force over the data's box: the range must contain every point's scale
        gx, gy = np.meshgrid(np.linspace(x.min(), x.max(), 301), np.linspace(y.min(), y.max(), 7))
        glon, glat = _utm(32630)[1].transform(gx.ravel(), gy.ravel())
        f = pyproj.Proj("EPSG:32630").get_factors(glon, glat)
        assert s.low <= np.min(f.tissot_semiminor) and np.max(f.tissot_semimajor) <= s.high
        # and not much wider: the box is snapped outward to 10 km (2.5 cm in 250 m)
        assert np.min(f.tissot_semiminor) - s.low < 1e-4
    assert s.low > 1.0 or s.radius_m(R_MAX) < R_MAX
    none = scale_factor_range(x, y, None, pad_m=R_MAX)
    assert (none.low, none.high) == (1.0, 1.0)


def _wkb(x: float, y: float) -> bytes:
    return b"\x01\x01\x00\x00\x00" + struct.pack("<dd", x, y)


@pytest.mark.filterwarnings("ignore:.*repeat an earlier record")
def test_verifier_measures_extent_on_the_ellipsoid(tmp_path: Path) -> None:
    """A representative moved to 249.97 m (UTM) from its members is 250.07 m on the ground."""
    fwd, back = _utm(32630)
    x0, y0 = fwd.transform(-2.999, 53.6)
    # clusters of three records at one place, 3 km apart (each a group of k=3)
    xs = np.repeat(x0 + 3000.0 * np.arange(6), 3)
    ys = np.full(xs.size, y0)
    lon, lat = back.transform(xs, ys)
    frame = pd.DataFrame({"lon": lon, "lat": lat})
    src = tmp_path / "points.csv"
    frame.to_csv(src, index=False, float_format="%.12f")
    root = tmp_path / "rel"
    release_points(read_points(src), OutlierPolicy(k=3, r_max_m=R_MAX), root)
    assert verify_release(root, source=src).passed
    assert_group_extents(root)
    # move group 0's representative to 249.97 m (UTM) east of its members
    a = pd.read_parquet(root / "audit" / "assignment.parquet")
    rows = a.loc[a["group_id"] == 0, "source_row"].to_numpy(dtype=np.int64)
    assert rows.size == 3 and np.unique(xs[rows]).size == 1
    new_lon, new_lat = back.transform(xs[rows[0]] + 249.97, ys[rows[0]])
    _, _, ground = GEOD.inv(lon[rows[0]], lat[rows[0]], new_lon, new_lat)
    assert R_MAX < ground < R_MAX + 0.1  # what the tampered release hides

    def move(f: pd.DataFrame) -> pd.DataFrame:
        at = f["group_id"] == 0
        f.loc[at, "x"] = new_lon
        f.loc[at, "y"] = new_lat
        if "geometry" in f:
            f["geometry"] = [
                _wkb(new_lon, new_lat) if hit else g
                for hit, g in zip(at, f["geometry"], strict=True)
            ]
        return f

    edit_parquet(root, "groups.parquet", move, refresh=False)
    edit_parquet(root, "records.parquet", move, refresh=False)

    def move_csv(f: pd.DataFrame) -> pd.DataFrame:
        at = f["group_id"] == "0"
        f.loc[at, "x"] = repr(new_lon)
        f.loc[at, "y"] = repr(new_lat)
        return f

    edit_csv(root, "records.csv", move_csv)  # refreshes the manifest's checksums
    for source in (src, None):  # the lon/lat file itself, and the audit's working metres
        report = verify_release(root, source=source)
        # (the moved point is off the representatives' rule too)
        # release.gpkg still holds the old point, so counts sees the files disagree too
        assert {"extent", "representation"} <= set(report.failed), report.failed
        assert set(report.failed) <= {"extent", "representation", "counts"}, report.failed
        assert "on the ellipsoid" in report["extent"].detail
    with pytest.raises(AssertionError, match="beyond r_max"):
        assert_group_extents(root)  # the downstream assertion measures on the ground too


@pytest.mark.parametrize("code", ["EPSG:27700"])
def test_named_projected_crs_is_measured_on_its_ellipsoid(code: str, tmp_path: Path) -> None:
    """x/y in the British National Grid near its central meridian (scale 0.99960)."""
    x0, y0 = 400_000.0, 400_000.0  # on the central meridian, 2 W
    step = R_MAX / 20
    xs, ys = [], []
    for i in range(4):
        cx = (math.floor((x0 + 4000 * i) / step) + 0.5 + OFFSET) * step
        cy = (math.floor(y0 / step) + 0.5 + OFFSET) * step
        for a in (0.0, 100.0, 220.0):
            t = math.radians(a + 7 * i)
            xs.append(cx + 249.97 * math.cos(t))
            ys.append(cy + 249.97 * math.sin(t))
        for m in range(5):
            xs.append(cx + 1500.0 + 20.0 * m)
            ys.append(cy)
    frame = pd.DataFrame({"x": xs, "y": ys})
    table = table_from_frame(frame, crs=code)
    root = tmp_path / "bng"
    release_points(table, OutlierPolicy(k=3, r_max_m=R_MAX), root)
    a = pd.read_parquet(root / "audit" / "assignment.parquet")
    a = a[a["group_id"].notna()]
    g = pd.read_parquet(root / "release" / "groups.parquet").set_index("group_id")
    rep = g.loc[a["group_id"].astype(int).to_numpy()]
    crs = pyproj.CRS(code)
    to_geo = pyproj.Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True)
    rows = a["source_row"].to_numpy(dtype=np.int64)
    mlon, mlat = to_geo.transform(frame["x"].to_numpy()[rows], frame["y"].to_numpy()[rows])
    rlon, rlat = to_geo.transform(rep["x"].to_numpy(), rep["y"].to_numpy())
    _, _, d = crs.geodetic_crs.get_geod().inv(mlon, mlat, rlon, rlat)
    assert len(a) >= 20 and np.max(d) <= R_MAX


def test_ground_prefilter_finds_every_pair_beyond_the_limit_on_the_ellipsoid() -> None:
    """Planar distances settle most pairs; those left are exactly the ones over on the ground."""
    from geokanon.verify.extent import Ground

    ground = Ground.of("EPSG:32630", "EPSG:4326")
    assert ground is not None
    fwd, back = _utm(32630)
    rng = np.random.default_rng(5)
    n = 20_000
    # members over a box across the central meridian and 150 km east of it
    x0, y0 = fwd.transform(-3.2, 53.4)
    mx = x0 + rng.uniform(0, 170_000, n)
    my = y0 + rng.uniform(0, 40_000, n)
    t = rng.uniform(0, 2 * np.pi, n)
    dist = rng.uniform(248.5, 250.5, n)
    rx, ry = mx + dist * np.cos(t), my + dist * np.sin(t)
    rlon, rlat = back.transform(rx, ry)
    d = np.hypot(mx - rx, my - ry)
    allowed = np.full(n, R_MAX)
    pairs = np.arange(n)
    bad, dg = ground.beyond(mx, my, pairs, rx, ry, pairs, d, allowed, rep_out=(rlon, rlat))
    mlon, mlat = back.transform(mx, my)
    _, _, truth = GEOD.inv(mlon, mlat, rlon, rlat)
    want = (d <= R_MAX) & (truth > R_MAX)
    assert want.sum() > 100  # the map understates near the central meridian
    np.testing.assert_array_equal(bad, want)
    measured = np.isfinite(dg)
    np.testing.assert_allclose(dg[measured], truth[measured], rtol=0, atol=1e-6)
    assert measured.sum() < n / 2  # the planar distance settled the rest

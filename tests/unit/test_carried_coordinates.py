"""Lon/lat input: a representative millimetres from a record releases; copies still fail.

A lon/lat register is projected to a UTM zone, grouped there, and its representatives
(lattice points in metres) are carried back to lon/lat. Two near misses used to refuse
such a release although nothing was copied:

- ``no_leak`` had only the working coordinates carried back, so it matched published
  pairs within a relative 1e-9 (about 5 mm in degrees): a lattice point that close to
  any record failed as that record's coordinate. The table now keeps the input's own
  lon/lat (``PointTable.input_xy``), so pairs are compared exactly, with the input's
  values and with the working coordinates carried as a representative is carried.
- ``representation`` counts a point within a relative 1e-9 of the members' centroid
  (about 6 mm at a UTM northing) as the centroid; the writer's rule skipped only the
  exact centroid. It now skips the same points the verifier refuses.

Each case is built so that it happens (a record or the centroid placed 2 mm from the
representative the rule gives); the copies a leak would make are planted in a release's
notes and must still fail ``no_leak``.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyproj import Transformer

from geokanon.grouping import OFFSET, representative_step, settle_representatives
from geokanon.io.read import PointTable, read_points, table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.release import ReleaseOptions
from geokanon.verify import verify_release
from tests.release_fixtures import refresh_manifest

POLICY = OutlierPolicy(k=5, r_max_m=300.0)


def _frame(extra_lon: list[float], extra_lat: list[float]) -> pd.DataFrame:
    """300 scattered records, and 2 km east a cluster of 6 (its own group), plus extras."""
    rng = np.random.default_rng(1)
    lon = np.r_[5.40 + rng.uniform(0, 0.01, 300), 5.44 + rng.uniform(0, 0.0002, 6), extra_lon]
    lat = np.r_[52.15 + rng.uniform(0, 0.006, 300), 52.153 + rng.uniform(0, 0.0001, 6), extra_lat]
    return pd.DataFrame({"lon": lon, "lat": lat, "who": [f"s{i}" for i in range(lon.size)]})


def _table(frame: pd.DataFrame) -> PointTable:
    return table_from_frame(frame, subject="who", lon="lon", lat="lat")


def _release(table: PointTable, out: Path, at: int = 300) -> np.ndarray:
    """Release ``table`` to ``out``; the representative of record ``at``'s group (working
    CRS; 300: the cluster's)."""
    shutil.rmtree(out, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = release_points(table, POLICY, out, ReleaseOptions())
    g = result.core.group_id[at]
    return np.array([result.core.group_x[g], result.core.group_y[g]])


@pytest.fixture(scope="module")
def near_member(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, PointTable]:
    """A lon/lat release whose cluster's representative lies 2 mm from one of its members.

    Two records are added to the cluster symmetrically about its centroid, one of them
    2 mm from the representative, so that the centroid (and the representative) stay.
    """
    tmp = tmp_path_factory.mktemp("carried")
    table = _table(_frame([], []))
    rep = _release(table, tmp / "first")
    cluster = np.arange(300, 306)
    centre = np.array([table.x[cluster].mean(), table.y[cluster].mean()])
    q1 = rep + np.array([0.002, 0.001])
    q2 = 2 * centre - q1
    back = Transformer.from_crs(table.working_crs, "EPSG:4326", always_xy=True)
    lon, lat = back.transform([q1[0], q2[0]], [q1[1], q2[1]])
    frame = _frame(list(lon), list(lat))
    src = tmp / "near.csv"
    frame.to_csv(src, index=False)
    table = read_points(src, subject="who", lon="lon", lat="lat")
    out = tmp / "near"
    assert np.array_equal(_release(table, out), rep)  # the same point, now 2 mm off a member
    return src, out, table


def test_a_representative_millimetres_from_a_member_releases_and_verifies(near_member) -> None:
    src, out, table = near_member
    assert table.input_xy is not None
    published = pd.read_parquet(out / "release" / "groups.parquet")
    px, py = published["x"].to_numpy(), published["y"].to_numpy()
    lon, lat = table.input_xy
    tol = 1e-9 * max(1.0, float(np.abs(np.r_[lon, lat]).max()))
    # the case happened: a published pair within the old tolerance of a record's lon/lat
    dx, dy = np.abs(px[:, None] - lon[None, :]), np.abs(py[:, None] - lat[None, :])
    close = (dx <= tol) & (dy <= tol)
    assert close.any()
    # and no pair is any record's own
    assert not ((px[:, None] == lon[None, :]) & (py[:, None] == lat[None, :])).any()
    # the release verified itself (it was written); so does the file, read again
    assert verify_release(out, source=table).passed
    assert verify_release(out, source=src).passed


def test_a_centroid_millimetres_from_a_lattice_point_releases(tmp_path: Path) -> None:
    """Six records at one place 2 mm from the lattice point the rule would take."""
    table = _table(_frame([5.44] * 6, [52.16] * 6))
    rep = _release(table, tmp_path / "first", at=-1)
    back = Transformer.from_crs(table.working_crs, "EPSG:4326", always_xy=True)
    lon, lat = back.transform(rep[0] + 0.002, rep[1] + 0.001)
    table = _table(_frame([lon] * 6, [lat] * 6))
    moved = _release(table, tmp_path / "near", at=-1)
    # the point 2 mm from the block (its centroid) was skipped for the next one
    assert np.hypot(moved[0] - table.x[-1], moved[1] - table.y[-1]) > 0.5
    assert verify_release(tmp_path / "near", source=table).passed


def test_the_rule_skips_a_lattice_point_within_1e_9_of_the_centroid() -> None:
    """Members at one place 2 mm from a lattice point, at a UTM northing (1e-9 of it is 5.8 mm)."""
    step = 15.0
    s = representative_step(0.0, step)  # co-located members hide nothing: the finest rung
    o = (0.5 + OFFSET) * step
    lattice = np.array([o + s * 266_667, o + s * 3_093_333])  # near (500 km, 5,800 km)
    x = np.full(5, lattice[0] + 0.002)
    y = np.full(5, lattice[1] + 0.001)
    rx, ry, ok = settle_representatives(
        np.zeros(5, np.int64), x, y, np.ones(5), np.arange(5), 1, 100.0, step
    )
    assert ok[0]
    assert (rx[0], ry[0]) != (lattice[0], lattice[1])
    scale = 1e-9 * max(1.0, abs(x[0]), abs(y[0]))
    assert abs(rx[0] - x[0]) > scale or abs(ry[0] - y[0]) > scale
    # a centroid farther than that keeps its nearest lattice point
    rx, ry, ok = settle_representatives(
        np.zeros(5, np.int64), x + 0.01, y, np.ones(5), np.arange(5), 1, 100.0, step
    )
    assert ok[0] and (rx[0], ry[0]) == (lattice[0], lattice[1])


def _plant(root: Path, pair: tuple[float, float]) -> None:
    """Write a coordinate pair into the release's notes (checksums recomputed)."""
    notes = root / "release" / "RELEASE_NOTES.md"
    notes.write_text(
        notes.read_text(encoding="utf-8") + f"\nSee {pair[0]!r} {pair[1]!r}.\n", encoding="utf-8"
    )
    refresh_manifest(root)


@pytest.mark.parametrize("source", ["table", "file", "none"])
@pytest.mark.parametrize("copy", ["input", "carried"])
def test_a_copied_coordinate_still_fails_no_leak(near_member, tmp_path, source, copy) -> None:
    """A record's own lon/lat, or its working coordinate carried as a representative is,
    written into the notes: ``no_leak`` finds either exactly."""
    src, out, table = near_member
    root = tmp_path / "mutant"
    shutil.copytree(out, root)
    assert table.input_xy is not None
    lon, lat = table.input_xy
    fwd = Transformer.from_crs(table.working_crs, "EPSG:4326", always_xy=True)
    cx, cy = (np.asarray(v) for v in fwd.transform(table.x, table.y))
    # a record whose lon/lat do not survive the trip to metres and back to the last bit
    i = int(np.flatnonzero((cx != lon) & (cy != lat))[0])
    if copy == "input":
        pair = (float(lon[i]), float(lat[i]))
    else:
        pair = (float(cx[i]), float(cy[i]))
    _plant(root, pair)
    given = {"table": table, "file": src, "none": None}[source]
    report = verify_release(root, source=given)
    assert not report["no_leak"].passed, report["no_leak"].detail


def test_without_the_source_a_representative_millimetres_from_a_member_verifies(near_member):
    """``geokanon verify DIR`` with no source: the pairs are matched within the
    transformation's own round-off (a UTM zone's: 1e-12 of the largest ordinate), not
    within 5 mm, so the representative 2 mm from a member is no leak."""
    _, out, _ = near_member
    report = verify_release(out)
    assert report.passed, [c for c in report.checks if not c.passed]


class _Carry:
    """The two transformations of a release reader, for ``_round_off``."""

    def __init__(self, working: str, output: str) -> None:
        fwd = Transformer.from_crs(working, output, always_xy=True)
        back = Transformer.from_crs(output, working, always_xy=True)
        self.to_output = lambda x, y: tuple(np.asarray(v) for v in fwd.transform(x, y))
        self.to_working = lambda x, y: tuple(np.asarray(v) for v in back.transform(x, y))


@pytest.mark.parametrize(
    ("working", "output", "box", "low", "high"),
    [
        # lon/lat through a UTM zone: the floor, 1e-12 of the largest ordinate
        ("EPSG:32631", "EPSG:4326", (3.0, 7.0, 50.7, 53.6), 1e-12 * 53.5, 1e-12 * 53.6),
        # RD through UTM 31N (a datum shift without grids): a round trip of ~0.5 mm
        ("EPSG:32631", "EPSG:28992", (20_000, 270_000, 310_000, 610_000), 1e-4, 5e-3),
    ],
)
def test_the_tolerance_of_carried_pairs_is_the_transformation_s_own(working, output, box, low,
                                                                     high) -> None:  # fmt: skip
    from geokanon.verify.no_leak import _round_off

    rng = np.random.default_rng(3)
    ox = rng.uniform(box[0], box[1], 50_000)
    oy = rng.uniform(box[2], box[3], 50_000)
    carry = _Carry(working, output)
    ox, oy = carry.to_output(*carry.to_working(ox, oy))  # carried, as the audit's are
    tol = _round_off(carry, ox, oy)  # type: ignore[arg-type]
    assert low <= tol <= high

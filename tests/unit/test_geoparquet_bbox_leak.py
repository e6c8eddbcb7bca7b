"""The GeoParquet file-level ``bbox`` of a point file: legitimate when it is exactly the
extent of the file's points, searched like any text otherwise.

A representative on the snap lattice may share one coordinate value with a source
record (BNG x/y on the lattice, say); the file's ``bbox`` then repeats that value. It
holds nothing of its own while it equals the extent of the published points (which
``no_leak`` scans as pairs); a ``bbox`` edited to hold a source coordinate is a leak.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from geokanon.io import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.verify import verify_release
from tests.release_fixtures import refresh_manifest


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    rng = np.random.default_rng(4)
    # BNG coordinates to the centimetre in six tight clusters, 2 km apart
    cx = np.repeat(400_000.0 + 2000.0 * np.arange(6), 6)
    xs = np.round(cx + rng.normal(0, 15, cx.size), 2)
    ys = np.round(400_000.0 + rng.normal(0, 15, cx.size), 2)
    frame = pd.DataFrame({"x": xs, "y": ys})
    root = tmp_path_factory.mktemp("bbox") / "rel"
    release_points(table_from_frame(frame, crs="EPSG:27700"), OutlierPolicy(k=3, r_max_m=100), root)
    return root, frame


def _set_bbox(path: Path, box: list[float]) -> None:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata or {})
    geo = json.loads(meta[b"geo"])
    geo["columns"][geo["primary_column"]]["bbox"] = box
    meta[b"geo"] = json.dumps(geo).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def test_a_bbox_holding_a_source_coordinate_fails_no_leak(release, tmp_path):
    root, frame = release
    assert verify_release(root, source=table_from_frame(frame, crs="EPSG:27700")).passed
    import shutil

    copy = tmp_path / "rel"
    shutil.copytree(root, copy)
    path = copy / "release" / "groups.parquet"
    geo = json.loads(pq.read_table(path).schema.metadata[b"geo"])
    box = list(geo["columns"][geo["primary_column"]]["bbox"])
    box[0] = float(frame["x"].iloc[7])  # a source x
    _set_bbox(path, box)
    refresh_manifest(copy)
    report = verify_release(copy, source=table_from_frame(frame, crs="EPSG:27700"))
    assert "no_leak" in report.failed, report.failed
    assert "groups.parquet: metadata" in report["no_leak"].detail

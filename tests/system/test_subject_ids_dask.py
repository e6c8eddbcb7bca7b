"""The Dask paths merge the spellings of one subject id as one machine does (SPEC, "Subjects").

The five spellings of one person sit in two different source partitions: the
partitioned classification and release must still take them for one subject (an
outlier 10 km from everyone, never a group of five), count the ids merged, and the
partitioned verifier must count subjects on the normalised ids too.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from geokanon.distributed import (  # noqa: E402
    ParquetPartitions,
    Tiling,
    classify_partitions,
    release_partitions,
)
from geokanon.policy import OutlierPolicy  # noqa: E402
from geokanon.verify.partitioned import verify_partitioned  # noqa: E402
from tests.unit.test_subject_ids import SPELLINGS, register  # noqa: E402

POLICY = OutlierPolicy(k=5, r_max_m=100.0, tau=0.05)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    )
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture
def partitions(tmp_path):
    frame = pd.read_csv(register(tmp_path), dtype={"person": str}, keep_default_na=False)
    d = tmp_path / "parts"
    d.mkdir()
    # two spellings in the first partition, three in the second, the crowd split too
    first = np.r_[np.arange(30), [60, 61]]
    second = np.setdiff1d(np.arange(len(frame)), first)
    for i, rows in enumerate((first, second)):
        frame.iloc[rows].to_parquet(d / f"part-{i}.parquet", index=False)
    return ParquetPartitions.from_path(d, subject="person")


def test_partitioned_classification_takes_the_spellings_for_one_subject(client, partitions):
    src = partitions
    res = classify_partitions(src, POLICY, client=client, return_labels=True)
    d = res.to_dict()
    assert d["counts"]["suppress"] == 5 and d["counts"]["ok"] == 60
    assert (d["subjects"], d["subject_ids_merged"]) == (61, 4)


def test_partitioned_release_does_not_group_the_spellings(client, partitions, tmp_path):
    src = partitions
    out = tmp_path / "out"
    tiling = Tiling.for_policy(POLICY, tile_m=2000.0)
    result = release_partitions(src, POLICY, out, tiling=tiling, client=client, crs="EPSG:28992")
    audit = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("*.parquet"))]
    )
    far = audit[audit["x_m"] > 160000]
    assert len(far) == 5 and (far["disposal"] == "suppressed").all()
    assert far["group_id"].isna().all()
    m = result.manifest
    assert all(m["verification"].values()), m["verification"]
    assert m["subject_ids_merged"] == 4
    assert (
        "4 ids were spellings of another id" in (out / "release" / "RELEASE_NOTES.md").read_text()
    )
    for f in (out / "release").rglob("*"):
        if f.is_file():
            text = f.read_bytes().decode("utf-8", errors="replace")
            assert not any(s.strip() in text for s in SPELLINGS), f.name
    # the partitioned verifier recounts the merges from the source partitions
    path = out / "release" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["subject_ids_merged"] = 0
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    report = verify_partitioned(out, source=src, checks=("counts",))
    assert report.failed == ("counts",)
    assert "subject_ids_merged" in report.checks[0].detail

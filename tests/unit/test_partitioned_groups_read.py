"""The partitioned verifier's driver reads only ``radius_m`` of ``groups.parquet``.

Its ``manifest`` check compares every group's ``radius_m`` with ``r_max_m``; the other
columns are the part tasks'. Reading the whole table there held a Python object per
group for the geometry and the bbox (gigabytes at 1e8 records). The check still sees every
group, a short radius still fails it, and a missing required column still fails.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from geokanon.verify._results import Unreadable
from geokanon.verify.manifest import _parameter_problems
from geokanon.verify.partitioned import _PartitionedRelease


def _reader(root):
    rel = _PartitionedRelease.__new__(_PartitionedRelease)
    rel.root, rel.rel, rel.aud = root, root / "release", root / "audit"
    rel.__dict__["manifest"] = {"r_max_m": 300.0, "k": 5}
    rel.__dict__["audit"] = {}
    return rel


def _groups(root, radius, drop=()):
    (root / "release").mkdir(parents=True, exist_ok=True)
    n = radius.size
    frame = pd.DataFrame(
        {
            "group_id": np.arange(n),
            "n_records": np.full(n, 5),
            "x": np.arange(n, dtype=float),
            "y": np.zeros(n),
            "radius_m": radius,
            "geometry": [b"\x01" * 21] * n,
        }
    ).drop(columns=list(drop))
    frame.to_parquet(root / "release" / "groups.parquet", index=False)


def test_driver_reads_radius_only_and_every_group(tmp_path):
    _groups(tmp_path, np.full(7, 300.0))
    rel = _reader(tmp_path)
    assert list(rel.groups.columns) == ["radius_m"] and len(rel.groups) == 7
    assert not any("radius_m" in p for p in _parameter_problems(rel))


def test_short_radius_still_fails_manifest(tmp_path):
    radius = np.full(7, 300.0)
    radius[[2, 5]] = 299.0
    _groups(tmp_path, radius)
    problems = _parameter_problems(_reader(tmp_path))
    assert any("2 groups publish a radius_m below r_max_m" in p for p in problems)


def test_missing_required_column_is_unreadable(tmp_path):
    _groups(tmp_path, np.full(3, 300.0), drop=("x",))
    with pytest.raises(Unreadable, match="lacks column 'x'"):
        _ = _reader(tmp_path).groups


def test_without_radius_the_rows_are_still_counted(tmp_path):
    _groups(tmp_path, np.full(4, 300.0), drop=("radius_m",))
    g = _reader(tmp_path).groups
    assert len(g) == 4 and "radius_m" not in g

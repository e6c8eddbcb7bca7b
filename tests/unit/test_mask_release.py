"""Masks are applied before classification: the release is judged on masked coordinates."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd

from geokanon import Disposal, OutlierPolicy
from geokanon.io import table_from_frame
from geokanon.mask import MaskKey, MaskSpec
from geokanon.pipeline import release_points
from geokanon.release import ReleaseOptions


def small_table():
    # A town of 40 subjects, and an exact-k group of 5 subjects 2 km away, 10 m apart.
    rng = np.random.default_rng(2)
    x = np.r_[155_000 + rng.normal(0, 20, 40), 157_000 + np.arange(5) * 10.0]
    y = np.r_[463_000 + rng.normal(0, 20, 40), np.full(5, 463_000.0)]
    frame = pd.DataFrame({"x": x.round(2), "y": y.round(2), "age": np.arange(45) % 90})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return table_from_frame(frame, crs="EPSG:28992")


def test_mask_that_isolates_a_member_redisposes_it(tmp_path):
    table = small_table()
    policy = OutlierPolicy(k=5, r_max_m=60.0, tau=0.5, unit_cap=1.0, seed=7)
    plain = release_points(table, policy, tmp_path / "plain")
    assert (plain.core.disposal[40:] == Disposal.GROUPED).all()
    # A donut of 150-400 m scatters the five far beyond r_max of each other.
    mask = MaskSpec.donut(min_m=150.0, max_m=400.0)
    key = MaskKey(b"a fixed key: the test must not depend on chance")
    options = ReleaseOptions(mask=mask, mask_key=key)
    masked = release_points(table, policy, tmp_path / "masked", options)
    assert (masked.core.group_id[40:] < 0).any()
    assert (masked.core.disposal[40:] != Disposal.GROUPED).any()
    manifest = json.loads((tmp_path / "masked" / "release" / "manifest.json").read_text())
    assert manifest["verification"]["fixed_point"] is True
    assert all(manifest["verification"].values())
    assert manifest["mask"]["kind"] == "donut"
    risk = manifest["mask_risk"]
    # no record count (it is the input size), shares to 3 decimals; the audit has it all
    assert "records" not in risk and 0.0 <= risk["share_below_k"] <= 1.0
    assert round(risk["share_below_k"], 3) == risk["share_below_k"]
    audit = json.loads((tmp_path / "masked" / "audit" / "audit.json").read_text())
    assert audit["mask_risk"]["records"] == 45
    # The audit holds the masked coordinates that classification used, not the originals.
    audit = pd.read_parquet(tmp_path / "masked" / "audit" / "assignment.parquet")
    assert not np.allclose(audit["x_m"].to_numpy(), table.x)
    report = (tmp_path / "masked" / "release" / "report.html").read_text()
    assert "The mask" in report and "Re-identification check after masking" in report


def test_mask_noise_keyed_by_raw_ids_survives_new_subjects(tmp_path):
    from geokanon.io import read_points

    rng = np.random.default_rng(5)
    n = 60
    frame = pd.DataFrame(
        {
            "x": (155_000 + rng.normal(0, 30, n)).round(2),
            "y": (463_000 + rng.normal(0, 30, n)).round(2),
            "person": [f"P{i:03d}" for i in range(n)],
        }
    )
    grown = pd.concat(
        [pd.DataFrame({"x": [155_010.0], "y": [463_010.0], "person": ["A000"]}), frame],
        ignore_index=True,
    )
    frame.to_csv(tmp_path / "a.csv", index=False)
    grown.to_csv(tmp_path / "b.csv", index=False)
    policy = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0, seed=11)
    mask = MaskSpec.jitter(sd_m=20.0)
    options = ReleaseOptions(mask=mask, mask_key=MaskKey(b"one key for both releases"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta = read_points(tmp_path / "a.csv", subject="person", crs="EPSG:28992")
        tb = read_points(tmp_path / "b.csv", subject="person", crs="EPSG:28992")
    # The new subject sorts first, so every dense subject code shifts by one.
    assert (tb.subjects[1:] == ta.subjects + 1).all()
    release_points(ta, policy, tmp_path / "ra", options)
    release_points(tb, policy, tmp_path / "rb", options)
    xa = pd.read_parquet(tmp_path / "ra" / "audit" / "assignment.parquet")["x_m"].to_numpy()
    xb = pd.read_parquet(tmp_path / "rb" / "audit" / "assignment.parquet")["x_m"].to_numpy()
    np.testing.assert_array_equal(xa, xb[1:])

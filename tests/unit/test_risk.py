"""Re-identification risk: hand-computed figures on a 10-record release, and the mask measure."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main
from geokanon.errors import InputError
from geokanon.mask import MaskSpec
from geokanon.risk import mask_anonymity, release_risk, risk_counts, summarise_risk
from tests.release_fixtures import GROUP_LEVEL, Scene, write_release

# The 10-record example, k = 3.
#   group 0: records 0-3, subjects A, A, B, C  -> 3 distinct subjects
#   group 1: records 4-6, subjects D, E, F     -> 3
#   class 0 (unit "south"): records 7-8, subjects G, H -> 2 (< k: a broken release on purpose)
#   record 9 (subject I) suppressed
# First-pass labels: 5 merge, 7 generalise, 9 suppress, the rest ok.
# Counts: 3 x 7, 2 x 2, nan. Published 9; below k 2/9; min 2.
# Total risk = 7/3 + 2/2 = 10/3. Outliers: record 5 (1/3) + record 7 (1/2) = 5/6
# (record 9 is not published: 0), so the outliers' share is (5/6) / (10/3) = 1/4.
LABELS = ["ok", "ok", "ok", "ok", "ok", "merge", "ok", "generalise", "ok", "suppress"]
EXPECTED_COUNTS = [3, 3, 3, 3, 3, 3, 3, 2, 2, math.nan]


def ten_point_scene() -> Scene:
    return Scene(
        x=(1003.25, 1011.5, 1027.75, 1034.5, 2004.5, 2031.25, 2012.75, 5003.75, 5107.5, 7001.5),
        y=(1001.75, 1038.25, 1012.5, 1029.75, 3003.5, 3009.75, 3036.25, 5007.25, 5021.5, 903.5),
        subjects=("A", "A", "B", "C", "D", "E", "F", "G", "H", "I"),
        units=("north",) * 4 + ("south",) * 6,
        disposal=("grouped",) * 4 + ("grouped", "merged", "grouped")
        + ("generalised",) * 2 + ("suppressed",),
        group_id=(0, 0, 0, 0, 1, 1, 1, None, None, None),
        class_id=(None,) * 7 + (0, 0, None),
        reps={0: (1020.0, 1020.0), 1: (2020.0, 3020.0)},
        classes={0: ("unit", "south")},
        k=3,
        passes=(
            {"pass": 1, "scope": GROUP_LEVEL,
             "labels": {"ok": 6, "merge": 1, "generalise": 0, "suppress": 0}, "changed": 7},
            {"pass": 2, "scope": GROUP_LEVEL,
             "labels": {"ok": 6, "merge": 1, "generalise": 0, "suppress": 0}, "changed": 0},
        ),
    )  # fmt: skip


def _set_assignment(root: Path, **columns: pa.Array) -> None:
    path = root / "audit" / "assignment.parquet"
    table = pq.read_table(path)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, values)
    pq.write_table(table, path)


@pytest.fixture
def ten(tmp_path: Path):
    written = write_release(tmp_path / "out", ten_point_scene())
    _set_assignment(written.root, label=pa.array(LABELS))
    return written


def test_counts_on_arrays_match_the_hand_computation():
    gid = [0, 0, 0, 0, 1, 1, 1, -1, -1, -1]
    cid = [-1] * 7 + [0, 0, -1]
    subj = [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    counts = risk_counts(gid, cid, subj)
    np.testing.assert_array_equal(counts, EXPECTED_COUNTS)
    r = summarise_risk(k=3, group_id=gid, class_id=cid, subjects=subj, label=LABELS)
    assert r.min_count == 2
    assert r.n_published == 9
    assert Fraction(r.share_below_k).limit_denominator(100) == Fraction(2, 9)
    assert r.total_risk == pytest.approx(10 / 3, abs=1e-12)
    assert r.outlier_risk == pytest.approx(5 / 6, abs=1e-12)
    assert r.outlier_share == pytest.approx(0.25, abs=1e-12)


def test_release_risk_reads_the_written_release(ten):
    r = release_risk(ten.root, source=ten.source)
    np.testing.assert_array_equal(r.count, EXPECTED_COUNTS)
    assert r.level.tolist() == ["group"] * 7 + ["unit", "unit", "suppressed"]
    d = r.to_dict()
    assert d["records"] == 10 and d["published"] == 9 and d["records_below_k"] == 2
    assert d["min_count"] == 2
    assert d["total_risk"] == pytest.approx(10 / 3, abs=1e-12)
    assert d["outlier_share"] == pytest.approx(0.25, abs=1e-12)
    by_label = {row["label"]: row for row in d["by_label"]}
    assert by_label["suppress"]["published"] == 0 and by_label["suppress"]["risk"] == 0
    assert by_label["merge"]["risk_share"] == pytest.approx(0.1, abs=1e-12)  # (1/3)/(10/3)
    assert d["mask"] is None and d["mask_note"] == "no mask applied"


def test_subjects_come_from_the_source(ten):
    """A forged audit subject code cannot inflate a group: the source decides."""
    subj = pq.read_table(ten.root / "audit" / "assignment.parquet")["subject"].to_numpy().copy()
    subj[0] = 99  # record 0 shares subject A with record 1 in the source
    _set_assignment(ten.root, subject=pa.array(subj, type=pa.int64()))
    assert release_risk(ten.root).count[0] == 4  # audit alone: fooled
    assert release_risk(ten.root, source=ten.source).count[0] == 3


def test_cli_table_and_json(ten, capsys):
    assert main(["risk", str(ten.root), "--source", str(ten.source), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["min_count"] == 2 and d["records_below_k"] == 2
    assert main(["risk", str(ten.root), "--source", str(ten.source)]) == 0
    out = capsys.readouterr().out
    assert "smallest count 2" in out and "25.00 % of it" in out
    for secret in ("1003.25", "subj", "A,"):  # no coordinate, no subject id
        assert secret not in out


def test_not_a_release(tmp_path):
    with pytest.raises(InputError, match="not a release directory"):
        release_risk(tmp_path)


# ---- the mask measure -------------------------------------------------------------------

XS = [0.0, 10.0, 20.0, 30.0, 40.0]


def test_mask_anonymity_by_hand():
    # record 0 moved from 0 to 15: others at 5, 5, 15 (a tie counts), 25 m from it
    m = mask_anonymity(XS, [0.0] * 5, [15.0, 10, 20, 30, 40], [0.0] * 5)
    assert m.nearest.tolist() == [4, 1, 1, 1, 1]
    assert m.worst_case.tolist() == [4, 1, 1, 1, 1]
    # a donut of 10-20 m: the two subjects 5 m away could not have produced the point
    donut = MaskSpec.donut(min_m=10.0, max_m=20.0)
    m = mask_anonymity(XS, [0.0] * 5, [15.0, 10, 20, 30, 40], [0.0] * 5, mask=donut)
    assert int(m.nearest[0]) == 4 and int(m.worst_case[0]) == 2
    assert (m.worst_case <= m.nearest).all()


def test_mask_anonymity_counts_subjects_not_records():
    # subject 1 has two records near the masked point: it counts once
    m = mask_anonymity(
        [0.0, 10.0, 11.0, 40.0], [0.0] * 4, [15.0, 10.0, 11.0, 40.0], [0.0] * 4,
        subjects=[0, 1, 1, 2],
    )  # fmt: skip
    assert int(m.nearest[0]) == 2
    # co-located household: same address, every member as close as the true one
    m = mask_anonymity([0.0, 0.0, 0.0], [0.0] * 3, [5.0, 0.0, 0.0], [0.0] * 3)
    assert int(m.nearest[0]) == 3


def test_mask_section_of_a_masked_release(ten):
    """A release built on masked coordinates: the mask is measured against the source."""
    x_m = np.array(ten_point_scene().x)
    x_m[8] = 5003.75 + 30.0  # record 8 moved 73.75 m west, toward record 7
    _set_assignment(ten.root, x_m=pa.array(x_m, type=pa.float64()))
    audit_path = ten.root / "audit" / "audit.json"
    audit = json.loads(audit_path.read_text())
    audit["mask"] = MaskSpec.jitter(sd_m=50.0).to_dict()
    audit_path.write_text(json.dumps(audit))
    r = release_risk(ten.root, source=ten.source)
    assert r.mask is not None
    # record 8's true place is 73.75 m from its masked point; record 7 only 33.2 m
    assert int(r.mask.nearest[8]) == 2
    assert r.mask.nearest[[0, 1, 2, 3, 4, 5, 6, 7, 9]].tolist() == [1] * 9
    assert r.to_dict()["mask"]["nearest"]["min"] == 1
    # without the source, the true coordinates are unknown
    assert release_risk(ten.root).mask is None


def test_masked_release_end_to_end(tmp_path):
    """A release built with ``mask=``: counts stay the groups', the mask is measured alone."""
    import warnings

    import pandas as pd

    from geokanon.io import table_from_frame
    from geokanon.pipeline import release_points
    from geokanon.policy import OutlierPolicy
    from geokanon.release import ReleaseOptions

    rng = np.random.default_rng(5)
    n = 200
    frame = pd.DataFrame(
        {
            "x": np.round(150_000 + 400 * rng.random(n), 2),
            "y": np.round(450_000 + 400 * rng.random(n), 2),
            "unit": np.where(rng.random(n) < 0.5, "a", "b"),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, unit="unit", crs="EPSG:28992")
        spec = MaskSpec.donut(min_m=5.0, max_m=40.0)
        release_points(
            table, OutlierPolicy(k=4, r_max_m=150.0), tmp_path / "out",
            ReleaseOptions(mask=spec), check_determinism=False,
        )  # fmt: skip
    r = release_risk(tmp_path / "out", source=table)
    assert r.min_count is not None and r.min_count >= 4
    assert r.mask is not None and r.mask.mask == "donut 5-40 m"
    assert r.mask.nearest.size == n
    assert (r.mask.worst_case <= r.mask.nearest).all() and (r.mask.worst_case >= 1).all()
    # the same figures as measuring the mask by hand on the audit's masked coordinates
    a = pq.read_table(tmp_path / "out" / "audit" / "assignment.parquet").to_pandas()
    by_hand = mask_anonymity(table.x, table.y, a["x_m"], a["y_m"], mask=spec)
    np.testing.assert_array_equal(r.mask.worst_case, by_hand.worst_case)

"""The vectorised checks catch their mutants in a release of thousands of groups.

The verifier's checks work on integer codes and sorted arrays (no per-row Python);
these mutants are planted in one group among thousands of a real release, so the
array paths (dense id numbering, sort-based distinct counts, id lookup by sorted
search, per-group sums) are the ones that must find them.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon import OutlierPolicy, __version__
from geokanon.io.read import table_from_frame
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, write_release
from geokanon.verify import verify_release
from tests.release_fixtures import edit_csv, edit_parquet

N = 30_000


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    towns = rng.uniform(0, 60_000, (40, 2))
    at = rng.integers(0, 40, N)
    xy = towns[at] + rng.normal(0, 400, (N, 2))
    frame = pd.DataFrame({"x": np.round(xy[:, 0], 2), "y": np.round(xy[:, 1], 2)})
    frame["patient"] = [f"P{i:07d}" for i in rng.integers(0, int(N / 1.3), N)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, x="x", y="y", subject="patient", unit_grid_m=20_000.0)
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.5)
        core = run_core_on(table, policy)
    out = tmp_path_factory.mktemp("scale") / "rel"
    write_release(out, table, core, policy, ReleaseOptions(local_metres=True), version=__version__)
    return out


@pytest.fixture
def copy(built: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "rel"
    shutil.copytree(built, dst)
    return dst


def _failed(root: Path) -> set[str]:
    return {c.name for c in verify_release(root).checks if not c.passed}


def _big_group(root: Path) -> tuple[int, pd.DataFrame]:
    a = pd.read_parquet(root / "audit" / "assignment.parquet")
    sizes = a["group_id"].value_counts()
    assert len(sizes) > 500  # thousands of groups: the array paths are exercised
    return int(sizes.index[len(sizes) // 2]), a


def test_the_release_passes(copy: Path) -> None:
    assert _failed(copy) == set()


def test_member_one_metre_beyond_r_max(copy: Path) -> None:
    g, a = _big_group(copy)
    groups = pd.read_parquet(copy / "release" / "groups.parquet")
    gx, gy = groups.loc[groups["group_id"] == g, ["x", "y"]].to_numpy()[0]
    row = int(np.flatnonzero(a["group_id"].to_numpy(na_value=-1) == g)[0])

    def move(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[row, "x_m"] = gx + 301.0
        f.loc[row, "y_m"] = gy
        return f

    edit_parquet(copy, "assignment.parquet", move)
    report = verify_release(copy)
    assert not report["extent"].passed
    assert "1 members in 1 groups beyond r_max (worst 1.00 m over)" in report["extent"].detail


def test_representative_on_a_member(copy: Path) -> None:
    g, a = _big_group(copy)
    row = int(np.flatnonzero(a["group_id"].to_numpy(na_value=-1) == g)[0])
    mx, my = float(a.loc[row, "x_m"]), float(a.loc[row, "y_m"])

    def put(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["group_id"] == g, "x"] = mx
        f.loc[f["group_id"] == g, "y"] = my
        return f

    edit_parquet(copy, "groups.parquet", put)
    report = verify_release(copy)
    assert not report["representation"].passed
    assert "1 group representatives equal a member's coordinate" in report["representation"].detail


def test_representative_at_the_members_mean(copy: Path) -> None:
    g, a = _big_group(copy)
    members = a[a["group_id"] == g]
    syn = pd.read_parquet(copy / "audit" / "synthetic.parquet")
    assert g not in set(syn["group_id"].dropna().astype(int))

    def put(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["group_id"] == g, "x"] = float(members["x_m"].mean())
        f.loc[f["group_id"] == g, "y"] = float(members["y_m"].mean())
        return f

    edit_parquet(copy, "groups.parquet", put)
    report = verify_release(copy)
    assert "1 representatives are the exact centroid" in report["representation"].detail


def test_group_of_k_minus_1_subjects(copy: Path) -> None:
    g, a = _big_group(copy)
    rows = np.flatnonzero(a["group_id"].to_numpy(na_value=-1) == g)
    subjects = a["subject"].to_numpy()
    others = np.unique(subjects[rows])
    assert others.size >= 5

    def merge(f: pd.DataFrame) -> pd.DataFrame:
        # the group's subjects collapsed to 4 (k-1) distinct codes
        s = f["subject"].to_numpy().copy()
        s[rows] = others[np.arange(rows.size) % 4]
        f["subject"] = s
        return f

    edit_parquet(copy, "assignment.parquet", merge)
    report = verify_release(copy)
    assert not report["k_subjects"].passed
    assert "1 of" in report["k_subjects"].detail and "(smallest 4)" in report["k_subjects"].detail


def test_group_counted_in_a_unit_other_than_its_majority(copy: Path) -> None:
    g, _ = _big_group(copy)
    units = pd.read_csv(copy / "release" / "units.csv", dtype=str)
    groups = pd.read_parquet(copy / "release" / "groups.parquet")
    now = groups.loc[groups["group_id"] == g, "unit"].iloc[0]
    other = next(u for u in units["unit"] if u != now)

    def move(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["group_id"] == g, "unit"] = other
        return f

    edit_parquet(copy, "groups.parquet", move)
    report = verify_release(copy)
    assert "1 groups name a unit other than their members' majority" in report["counts"].detail


def test_wrong_released_unit_count(copy: Path) -> None:
    def bump(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[len(f) // 2, "released"] = str(int(f.loc[len(f) // 2, "released"]) + 1)
        return f

    edit_csv(copy, "units.csv", bump)
    report = verify_release(copy)
    assert "1 units publish a wrong released count" in report["counts"].detail

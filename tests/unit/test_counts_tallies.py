"""The ``counts`` rules as functions of per-partition tallies (issue 17 item 4 (c)).

A single-file release is one partition; a partitioned release gives one tally per part
or source partition. Computing the tallies per partition, merging them and judging the
merged tallies must give exactly what the whole release in one partition gives, with
the single-file messages.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from geokanon.verify._arrays import value_counts
from geokanon.verify._reader import ReleaseReader
from geokanon.verify.counts import (
    AuditTally,
    IdTally,
    UnitTally,
    audit_problems,
    audit_tally,
    class_units,
    group_units,
    id_problems,
    id_tally,
    unit_problems,
)
from geokanon.verify.holes import release_system_inputs
from geokanon.verify.leak_rules import published_values
from tests.release_fixtures import minimal_scene, write_release


def _groups(seed: int, n: int = 3_000, ng: int = 200, nu: int = 5):
    rng = np.random.default_rng(seed)
    gid = rng.integers(0, ng, n)
    # few units per group and many ties (members of 2..3 units in equal numbers)
    ucode = (gid + rng.integers(0, 2, n)) % nu
    return gid.astype(np.int64), ucode.astype(np.int64), ng, nu


def _brute_majority(gid, ucode, ng, nu):
    out = np.full(ng, -1, dtype=np.int64)
    for g in range(ng):
        m = ucode[gid == g]
        if m.size:
            c = np.bincount(m, minlength=nu)
            out[g] = int(np.flatnonzero(c == c.max())[0])  # a tie: the first in sort order
    return out


def test_group_units_is_the_majority_with_ties_to_the_first_unit():
    gid, ucode, ng, nu = _groups(3)
    major = _brute_majority(gid, ucode, ng, nu)
    pub_gid = np.arange(ng, dtype=np.int64)
    pub_u = major.copy()
    pub_u[[4, 17, 90]] = (pub_u[[4, 17, 90]] + 1) % nu  # three groups name another unit
    none = np.zeros(0, dtype=np.int64)
    wrong, released = group_units(gid, ucode, none, none, nu, pub_gid, pub_u)
    assert wrong == 3
    sizes = np.bincount(gid, minlength=ng)
    want = np.bincount(major[major >= 0], weights=sizes[major >= 0], minlength=nu + 1)
    assert released.tolist() == want.astype(np.int64).tolist()
    assert sum(released) == gid.size
    # without a unit column every record counts in its own unit
    assert group_units(gid, ucode, none, none, nu, pub_gid, None)[1][:nu].tolist() == (
        np.bincount(ucode, minlength=nu).tolist()
    )


def test_group_units_per_partition_merged_is_the_whole():
    gid, ucode, ng, nu = _groups(5)
    pub_gid = np.arange(ng, dtype=np.int64)
    pub_u = (_brute_majority(gid, ucode, ng, nu) + (pub_gid % 7 == 0)) % nu
    none = np.zeros(0, dtype=np.int64)
    whole = group_units(gid, ucode, none, none, nu, pub_gid, pub_u)
    wrong, released = 0, np.zeros(nu + 1, dtype=np.int64)
    for lo, hi in ((0, 60), (60, 61), (61, ng)):  # every group whole in one partition
        m = (gid >= lo) & (gid < hi)
        p = (pub_gid >= lo) & (pub_gid < hi)
        w, r = group_units(gid[m], ucode[m], none, none, nu, pub_gid[p], pub_u[p])
        wrong, released = wrong + w, released + r
    assert wrong == whole[0] > 0
    assert released.tolist() == whole[1].tolist()


def test_id_tally_per_partition_merged_is_the_whole_with_the_single_file_messages():
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 500, 4_000).astype(np.int64)
    expected = value_counts(ids)
    pub_ids = expected.index.to_numpy(dtype=np.int64).copy()
    sizes = expected.to_numpy().copy()
    sizes[[3, 50]] += 1  # two wrong n_records
    keep = np.ones(pub_ids.size, dtype=bool)
    keep[100] = False  # one audit group not published
    pub_ids, sizes = pub_ids[keep], sizes[keep]
    pub_ids = np.append(pub_ids, [600, 7])  # one published group without records; 7 twice
    sizes = np.append(sizes, [5, int(expected[7])])
    rows = expected.copy()
    rows.iloc[0] += 1
    whole = id_tally(expected, pub_ids, sizes, rows)
    assert whole == IdTally(repeated=1, missing=1, extra=1, wrong_size=2, rows_differ=1)
    tallies = []
    for lo, hi in ((0, 250), (250, 1_000)):
        e = expected[(expected.index >= lo) & (expected.index < hi)]
        p = (pub_ids >= lo) & (pub_ids < hi)
        r = rows[(rows.index >= lo) & (rows.index < hi)]
        tallies.append(id_tally(e, pub_ids[p], sizes[p], r))
    merged = functools.reduce(IdTally.merge, tallies, IdTally())
    assert merged == whole
    assert id_problems("group", merged) == [
        "group ids repeat in the release",
        "1 audit groups are not published",
        "1 published groups have no audit records",
        "2 groups publish a wrong n_records",
        "records.parquet rows per group differ from the audit",
    ]
    assert id_problems("group", id_tally(expected, *_exact(expected), expected)) == []


def _exact(expected: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    return expected.index.to_numpy(dtype=np.int64), expected.to_numpy(dtype=np.int64)


def test_audit_tally_per_partition_merged_is_the_whole():
    rng = np.random.default_rng(2)
    n = 2_000
    names = np.array(["grouped", "merged", "generalised", "suppressed", "lost"], dtype=object)
    disp = names[rng.choice(5, n, p=[0.5, 0.2, 0.15, 0.149, 0.001])]
    gid = np.where(np.isin(disp, ["grouped", "merged"]), rng.integers(0, 50, n), -1)
    cid = np.where(disp == "generalised", rng.integers(0, 4, n), -1)
    gid[[5, 9]] = -1  # grouped or merged rows without a group id (or set on others)
    cid[11] = 2

    def tally(sl: slice) -> AuditTally:
        d = disp[sl]
        return audit_tally(lambda *ns: np.isin(d, ns), gid[sl], cid[sl])

    whole = tally(slice(None))
    merged = functools.reduce(
        AuditTally.merge, [tally(slice(0, 700)), tally(slice(700, 701)), tally(slice(701, n))]
    )
    assert merged == whole
    assert sum(whole.disposals.values()) + whole.unknown == n
    problems = audit_problems(merged)
    assert f"{whole.unknown} audit rows have an unknown disposal" in problems
    assert any(p.endswith("audit rows: group id and disposal disagree") for p in problems)
    assert any(p.endswith("audit rows: class id and disposal disagree") for p in problems)


def test_class_units_counts_unit_level_classes_in_their_unit():
    classes = pd.DataFrame(
        {"class_id": [0, 1, 2], "level": ["unit", "unit", "parent"], "unit": ["b", "a", "p"]}
    )
    unames = np.array(["a", "b"], dtype=object)
    cid = np.array([0, 0, 1, 2, 2, -1], dtype=np.int64)
    released, up = class_units(cid, np.array([1], dtype=np.int64), classes, unames)
    assert released.tolist() == [2, 2, 0]  # a: one record and one synthetic; b: two
    assert up.tolist() == [False, False, False, True, True, False]


def test_unit_problems_judge_the_merged_figures():
    rows = [
        {"unit": "a", "released": 4, "suppressed": 0, "generalised_up": None,
         "source_total": 5, "synthetic": 0},
        {"unit": "b", "released": 3, "suppressed": "<k", "generalised_up": None,
         "source_total": None, "synthetic": 0},
    ]  # fmt: skip
    table = pd.DataFrame(rows)[["unit", "released", "suppressed"]]
    parts = [{"a": 4, "b": 1}, {"b": 2}]  # two partitions' released records, added up
    released = {u: sum(p.get(u, 0) for p in parts) for u in ("a", "b")}
    good = UnitTally(released, {"a": 5, "b": 4}, {"a": 0, "b": 1}, {}, {})
    assert unit_problems(3, rows, table, {}, good) == []
    bad = UnitTally({"a": 4, "b": 2}, {"a": 6, "b": 4}, {"a": 0, "b": 3}, {}, {}, 2)
    assert unit_problems(3, rows, table, {}, bad) == [
        "2 groups name a unit other than their members' majority",
        "1 units publish a wrong released count",
        "1 units publish a wrong suppressed count",
        "1 units publish a wrong source_total",
    ]


def test_published_values_leaves_the_representatives_to_the_parts(tmp_path: Path) -> None:
    w = write_release(tmp_path / "out", minimal_scene())
    rel = ReleaseReader(w.root, None, 0.0)
    reps = pd.read_parquet(w.root / "release" / "groups.parquet")[["x", "y"]].to_numpy()
    whole, texts = published_values(rel)
    assert np.isin(reps.ravel(), whole).all()
    assert {"north", "south", "group"} <= texts

    def without_groups(r: ReleaseReader) -> dict:
        return {**release_system_inputs(r), "groups": None}

    parted, parted_texts = published_values(rel, without_groups, frozenset({"north", "south"}))
    assert not np.isin(reps.ravel(), parted).any()  # each part task adds its own
    assert parted_texts == texts
    # every other number is the same
    assert set(whole) - set(parted) <= set(reps.ravel()) | {float(len(reps))}

"""The Dask release core's first grouping, made in the first classification's tile tasks.

``geokanon.distributed.run_core_distributed`` has each tile task of the first
classification also group the tile's records labelled ok or merge
(``_classify_group_task``), and the first group pass takes those groupings in place of
its own tile tasks. These tests hold that to the core that sends the tiles again (the
reuse switched off): the same decisions, groups and representatives, with and without
subjects and a tiebreak; and they check that the reuse happens. ``_batches`` (tiles sent
several to a task) is checked on its own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import geokanon.distributed as D
from geokanon.distributed import Tiling, run_core_distributed
from geokanon.policy import OutlierPolicy

POLICY = OutlierPolicy(k=3, r_max_m=40.0, tau=0.5, unit_cap=1.0)


def _towns(seed: int, n: int = 3_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 2_000, (12, 2))
    which = rng.integers(0, len(centres), n)
    x = centres[which, 0] + rng.normal(0, 60, n)
    y = centres[which, 1] + rng.normal(0, 60, n)
    x[: n // 20] = rng.uniform(0, 2_000, n // 20)  # scatter: suppressed and generalised
    x, y = np.round(x, 1), np.round(y, 1)
    # records at one place (ordered by the tiebreak, then the subject code)
    x[n // 20 :: 4], y[n // 20 :: 4] = x[n // 20 + 1 :: 4], y[n // 20 + 1 :: 4]
    return x, y


def _core(x, y, subjects, tiebreak, compact):
    tiling = Tiling.for_policy(POLICY, tile_m=500.0)
    units = (np.clip(x, 0, None) // 700).astype(np.int64)
    return run_core_distributed(
        x, y, POLICY, subjects=subjects, unit_codes=units, tiebreak=tiebreak,
        enforce_caps=False, tiling=tiling, compact=compact,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("with_subjects", "with_tiebreak", "compact"),
    [(False, False, False), (True, True, True)],
)
def test_first_grouping_in_the_classification_tasks_changes_nothing(
    monkeypatch, first_grouping_reuse, with_subjects, with_tiebreak, compact
):
    x, y = _towns(3)
    rng = np.random.default_rng(4)
    subjects = rng.integers(0, 2_000, x.size) if with_subjects else None
    tiebreak = rng.integers(0, 2**63, x.size).astype(np.uint64) if with_tiebreak else None
    reused = first_grouping_reuse
    fused = _core(x, y, subjects, None if tiebreak is None else tiebreak.copy(), compact)
    assert reused and reused[0]  # the first group pass took the tasks' groupings
    monkeypatch.setattr(D, "_made_with", lambda *args: False)
    again = _core(x, y, subjects, None if tiebreak is None else tiebreak.copy(), compact)
    for f in dataclasses.fields(fused):
        a, b = getattr(fused, f.name), getattr(again, f.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), f.name
    assert fused.counts() == again.counts()
    assert fused.group_x.size > 10 and fused.counts()["grouped"] > x.size // 2


def test_first_grouping_is_not_taken_for_other_records():
    x, y = _towns(5, 800)
    first = D._FirstGroups(None, None, local=np.zeros(x.size, np.int32), sizes={0: 5})
    tiling = Tiling.for_policy(POLICY, tile_m=500.0)
    keys, codes = D._owner_codes(tiling, x, y, np.arange(10))
    # other sizes per tile than the subset's: the tile tasks run
    assert not D._made_with(first, keys, codes, np.arange(10), np.arange(x.size), None)


def test_batches_keep_every_payload_once_in_order(monkeypatch):
    monkeypatch.setattr(D, "TASK_RECORDS", 100)
    sizes = [30, 80, 5, 200, 1, 1, 1, 99, 1]
    payloads = [(np.zeros(s),) for s in sizes]
    got = list(D._batches(iter(payloads), D._payload_records))
    assert [first for first, _ in got] == [0, 2, 4, 8]
    flat = [p for _, batch in got for p in batch]
    assert [p[0].size for p in flat] == sizes
    # without a size: one payload a task
    assert [first for first, _ in D._batches(iter(payloads), None)] == list(range(len(sizes)))


def test_same_values_sees_through_views_and_copies():
    a = np.arange(10, dtype=np.uint64)
    assert D._same_values(a, a)
    assert D._same_values(a, a.view())  # another object over the same memory
    assert D._same_values(a, a.copy())  # equal values
    assert D._same_values(None, None)
    assert not D._same_values(a, None) and not D._same_values(None, a)
    b = a.copy()
    b[7] += 1
    assert not D._same_values(a, b)
    assert not D._same_values(a, a[:9])
    assert not D._same_values(a, a[::-1])  # the same memory seen another way


@pytest.mark.parametrize(
    ("subjects", "times", "group_by", "tiebreak"),
    [
        (np.int32, False, "same", np.uint64),
        (np.int64, True, np.int64, None),
        (None, False, None, None),
        (None, False, np.int32, np.uint64),
    ],
)
def test_the_workers_warm_up_on_a_tile_shaped_like_the_real_ones(
    monkeypatch, subjects, times, group_by, tiebreak
):
    # _warm_workers runs this payload with errors swallowed (a warm-up never fails the
    # release), so it is run here in the open: it must be a valid tile task, with the
    # real payload's dtypes, that reaches the grouping's leftover placement
    policy = dataclasses.replace(POLICY, t_max_s=3_600.0) if times else POLICY
    subj = None if subjects is None else np.zeros(4, dtype=subjects)
    by = subj if group_by == "same" else None if group_by is None else np.zeros(4, group_by)
    like = (
        subj,
        np.zeros(4) if times else None,
        by,
        None if tiebreak is None else np.zeros(4, dtype=tiebreak),
    )
    payload = D._warm_payload(policy, like)
    x, y, n_owned, pol, s, t, rows, tb = payload
    assert x.dtype == y.dtype == np.float64 and pol is policy and 0 < n_owned < x.size
    assert (s is None) == (subj is None) and (s is None or s.dtype == subjects)
    assert (t is None) == (not times)
    # the owned records' grouping subjects, as classify_tiled's payloads pick them
    if group_by == "same":
        assert rows is None
    elif group_by is None:
        assert rows is not None and rows.dtype == np.int64
    else:
        assert rows is not None and rows.dtype == group_by and rows.size == n_owned
    assert (tb is None) == (tiebreak is None) and (tb is None or tb.size == n_owned)
    import geokanon.grouping as G

    placed: list[int] = []
    place = G._place_leftovers
    monkeypatch.setattr(
        G, "_place_leftovers", lambda left, *a: placed.append(left.size) or place(left, *a)
    )
    cls, grouping = D._classify_group_task(*payload)
    counts = cls.counts()
    assert counts["ok"] and counts["merge"] and counts["generalise"] and counts["suppress"]
    assert grouping is not None and grouping.rep_x.size > 0 and placed and placed[0] > 0

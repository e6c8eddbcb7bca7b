"""benchmarks/mdav.py and benchmarks/cities.py against direct computations on tiny inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.cities import city_points, nn5_median
from benchmarks.mdav import (
    hexagon_mean_distance,
    hexagon_points,
    hexagon_sample_mean_distance,
    mdav_groups,
    per_record_ideal,
    tessellation_estimate,
)


def reference_mdav(x, y, k):
    """Fixed-size MDAV written out with O(n^2) scans (the module docstring's steps)."""
    n = x.size
    out = np.full(n, -1)
    rest = np.ones(n, dtype=bool)
    g = 0

    def farthest(qx, qy):
        idx = np.flatnonzero(rest)
        d = (x[idx] - qx) * (x[idx] - qx) + (y[idx] - qy) * (y[idx] - qy)
        return idx[np.lexsort((idx, -d))[0]]  # largest distance, then lowest index

    def take(seed):
        nonlocal g
        rest[seed] = False
        idx = np.flatnonzero(rest)
        d = (x[idx] - x[seed]) * (x[idx] - x[seed]) + (y[idx] - y[seed]) * (y[idx] - y[seed])
        near = idx[np.lexsort((idx, d))[: k - 1]]  # smallest distance, then lowest index
        rest[near] = False
        out[seed] = g
        out[near] = g
        g += 1

    def centroid():
        idx = np.flatnonzero(rest)
        return x[idx].sum() / idx.size, y[idx].sum() / idx.size

    while rest.sum() >= 3 * k:
        r = farthest(*centroid())
        take(r)
        take(farthest(x[r], y[r]))
    if rest.sum() >= 2 * k:
        take(farthest(*centroid()))
    if rest.any():
        out[rest] = g
    return out


@pytest.mark.parametrize("seed", range(40))
def test_mdav_equals_the_quadratic_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    k = int(rng.integers(2, 8))
    side = int(rng.choice([4, 12, 40, 1000]))  # small grids: many ties and duplicates
    x = rng.integers(0, side, n).astype(np.float64)
    y = rng.integers(0, side, n).astype(np.float64)
    got = mdav_groups(x, y, k)
    assert np.array_equal(got, reference_mdav(x, y, k))
    sizes = np.bincount(got)
    if n >= k:
        assert sizes.min() >= k and sizes.max() <= 2 * k - 1


def test_mdav_on_a_known_line():
    # 14 points on a line, k = 3: the ends first ({0,1,2}, the farthest from 0: {11,12,13});
    # 8 left (2k <= 8 < 3k): 3 (farthest from their centroid 6.5, tie 3/10 to the lower
    # index) with its 2 nearest, then the 5 left form the last group.
    x = np.arange(14, dtype=np.float64)
    got = mdav_groups(x, np.zeros(14), 3)
    assert list(got) == [0, 0, 0, 2, 2, 2, 3, 3, 3, 3, 3, 1, 1, 1]
    assert list(mdav_groups(x[:10], np.zeros(10), 3)) == [0, 0, 0, 2, 2, 2, 2, 1, 1, 1]


def test_per_record_ideal_is_the_direct_figure():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 20, 60).astype(np.float64)
    y = rng.uniform(0, 20, 60)
    k = 4
    got = per_record_ideal(x, y, k)
    for i in range(x.size):
        d = np.hypot(x - x[i], y - y[i])
        near = np.argsort(d, kind="stable")[:k]
        # Ties at the k-th distance may pick other records: only when no tie, compare.
        if np.sum(d <= d[near[-1]]) == k:
            assert got[i] == pytest.approx(math.hypot(x[i] - x[near].mean(), y[i] - y[near].mean()))
    assert got.mean() > 0


def test_hexagon_mean_distance_matches_a_numerical_integral():
    from scipy.integrate import dblquad

    area = 7.0
    a = math.sqrt(area / (2.0 * math.sqrt(3.0)))  # apothem
    t = math.tan(math.pi / 6.0)
    # One of the twelve right triangles: 0 <= x <= a, 0 <= y <= x tan(pi/6).
    num, _ = dblquad(lambda yy, xx: math.hypot(xx, yy), 0.0, a, 0.0, lambda xx: xx * t)
    tri_area = a * a * t / 2.0
    assert hexagon_mean_distance(area) == pytest.approx(num / tri_area, rel=1e-9)
    assert tessellation_estimate(0.5, 5) == pytest.approx(hexagon_mean_distance(10.0))


def test_hexagon_sampler_and_the_sample_mean_figure():
    area = 10.0
    side = math.sqrt(2.0 * area / (3.0 * math.sqrt(3.0)))
    pts = hexagon_points(np.random.default_rng(5), 400_000, area)
    r = np.hypot(pts[:, 0], pts[:, 1])
    assert r.max() <= side
    # Uniform in the hexagon: its mean distance to the centre and polar moment (5 s^2 / 12).
    assert r.mean() == pytest.approx(hexagon_mean_distance(area), rel=3e-3)
    assert (r * r).mean() == pytest.approx(5.0 * side * side / 12.0, rel=3e-3)
    # k = 2: the distance to the pair's mean is half the distance between the two points.
    pairs = pts.reshape(-1, 2, 2)
    half = 0.5 * np.hypot(*(pairs[:, 0] - pairs[:, 1]).T).mean()
    assert hexagon_sample_mean_distance(area, 2) == pytest.approx(half, rel=1e-2)
    # The mean of k points is nearer to them than the cell centre.
    assert hexagon_sample_mean_distance(area, 5) < hexagon_mean_distance(area)


@pytest.mark.parametrize("layout", ["uniform", "addresses"])
def test_city_hits_its_5nn_median(layout):
    x, y, units, density = city_points(4000, 20.0, layout, seed=0)
    assert x.size == 4000 and units.size == 4000 and density > 0
    assert nn5_median(x, y) == pytest.approx(20.0, rel=0.1)
    shared = np.unique(np.column_stack([x, y]), axis=0).shape[0] < x.size
    assert shared == (layout == "addresses")


def test_bench_placed_runs_the_baselines_on_exactly_the_placed_records(monkeypatch):
    from types import SimpleNamespace

    from benchmarks import bench_grouping as bg
    from geokanon.policy import Disposal, Label

    rng = np.random.default_rng(2)
    x = rng.uniform(0, 2000, 400)
    y = rng.uniform(0, 2000, 400)
    placed = np.zeros(400, dtype=bool)
    placed[rng.choice(400, 250, replace=False)] = True  # a stand-in core places 250

    def fake_core(xx, yy, policy, **kwargs):
        gid = np.full(xx.size, -1)
        gid[placed] = np.arange(250) // 5
        gx = np.bincount(gid[placed], xx[placed]) / 5 + 0.5
        gy = np.bincount(gid[placed], yy[placed]) / 5 + 0.5
        disp = np.where(placed, Disposal.GROUPED, Disposal.SUPPRESSED)
        return SimpleNamespace(
            first_labels=np.full(xx.size, Label.OK), disposal=disp, group_id=gid,
            group_x=gx, group_y=gy,
        )  # fmt: skip

    monkeypatch.setattr(bg, "load_core", lambda: (fake_core, ""))
    monkeypatch.setattr(bg, "warm_up", lambda run_core, k: None)
    ds = bg.Dataset("toy", x, y, None, None, 250.0, target_ratio=1.0)
    text = bg.bench_placed(ds, 5, 250.0, markdown=True, skip_core=False)
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in
            text.splitlines() if r.startswith("| ")}  # fmt: skip
    head = rows["figure"]
    groups = dict(zip(head, rows["groups"], strict=True))
    assert groups["MDAV"] == "50"  # 250 placed records, k = 5: MDAV makes 50 groups of 5
    assert set(rows["placed share (records at group level)"][:5]) == {"62.50 %"}
    ref = reference_mdav(x[placed], y[placed], 5)
    gx = np.bincount(ref, x[placed]) / np.bincount(ref)
    gy = np.bincount(ref, y[placed]) / np.bincount(ref)
    want = np.hypot(x[placed] - gx[ref], y[placed] - gy[ref]).mean()
    assert dict(zip(head, rows["mean displacement"], strict=True))["MDAV"] == f"{want:.1f} m"

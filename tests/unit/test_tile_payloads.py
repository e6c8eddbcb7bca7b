"""The driver's compiled tile enumeration equals the NumPy steps it replaces.

``geokanon.distributed._owner_codes`` (tile keys and each record's code),
``_owned_by_tile`` (each tile's records, ascending) and ``Tiling._all_halo_pairs`` (the
halo test of ``Tiling.halo_pairs``) run compiled passes over the records when the tile
grid is small; these tests hold them to the NumPy definitions on random inputs with
records on tile edges, negative coordinates, offset origins, subsets and several
batches, and check the fallbacks (non-finite coordinates, a grid too wide).
"""

from __future__ import annotations

import numpy as np
import pytest

import geokanon.distributed as D
from geokanon.distributed import Tiling, _largest_abs, _owned_by_tile, _owner_codes


def _reference_codes(tiling, x, y, at=None):
    k = tiling.tile_keys(x, y) if at is None else tiling.tile_keys(x[at], y[at])
    keys = np.unique(k)
    return keys, np.searchsorted(keys, k).astype(np.int32)


def _inputs(rng, trial):
    n = int(rng.integers(1, 4_000))
    scale = (10.0, 1e3, 1e6)[trial % 3]
    x = rng.normal(0.0, scale, n) - (trial % 2) * scale
    y = rng.uniform(-scale, scale, n) + (trial % 2) * 3 * scale
    side = 5.0 * (1 + trial % 5)
    edge = n // 5  # records exactly on tile edges, and one metre either side
    x[:edge] = np.round(x[:edge] / side) * side + rng.choice([-1.0, 0.0, 1.0], edge)
    tiling = Tiling(tile_m=side, halo_m=1.0 + trial % 3, origin_x=0.5 * (trial % 3), origin_y=-2.5)
    return x, y, tiling


@pytest.mark.parametrize("trial", range(24))
def test_owner_codes_equal_sorted_keys(trial):
    rng = np.random.default_rng([7, trial])
    x, y, tiling = _inputs(rng, trial)
    subset = np.sort(rng.choice(x.size, max(1, x.size // 2), replace=False))
    for at in (None, subset.astype(np.int32), subset.astype(np.int64)):
        keys, codes = _owner_codes(tiling, x, y, at)
        ref_keys, ref_codes = _reference_codes(tiling, x, y, at)
        assert codes.dtype == np.int32
        assert np.array_equal(keys, ref_keys)
        assert np.array_equal(codes, ref_codes)


def test_owner_codes_fall_back_on_wide_grids_and_non_finite(monkeypatch):
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0, 1e4, 500), rng.uniform(0, 1e4, 500)
    tiling = Tiling(tile_m=10.0, halo_m=1.0)
    ref = _reference_codes(tiling, x, y)
    monkeypatch.setattr(D, "_DENSE_TILES", 4)  # the occupied range is wider: sorted keys
    keys, codes = _owner_codes(tiling, x, y)
    assert np.array_equal(keys, ref[0]) and np.array_equal(codes, ref[1])
    monkeypatch.undo()
    x[3] = np.nan  # never reaches the compiled passes (no out-of-range cell)
    with np.errstate(invalid="ignore"):
        keys, codes = _owner_codes(tiling, x, y)
        assert np.array_equal(keys, _reference_codes(tiling, x, y)[0])


@pytest.mark.parametrize("n_tiles", [1, 7, 300])
def test_owned_by_tile_is_a_stable_sort(n_tiles, monkeypatch):
    rng = np.random.default_rng(n_tiles)
    codes = rng.integers(0, n_tiles, 50_000).astype(np.int32)
    monkeypatch.setattr(D, "_CHUNK", 1_000)  # several batches
    order = np.argsort(codes, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(codes, minlength=n_tiles))]
    got = list(_owned_by_tile(codes, n_tiles))
    assert [t for t, _ in got] == list(range(n_tiles))
    for t, idx in got:
        assert idx.dtype == np.int64
        assert np.array_equal(idx, order[bounds[t] : bounds[t + 1]])


@pytest.mark.parametrize("trial", range(24))
def test_compiled_halo_pairs_equal_halo_pairs(trial):
    rng = np.random.default_rng([11, trial])
    x, y, tiling = _inputs(rng, trial)
    extent = _largest_abs(x) + _largest_abs(y)
    r1, k1 = tiling._all_halo_pairs(x, y, extent)
    r2, k2 = tiling.halo_pairs(x, y, extent=extent)
    o1, o2 = np.lexsort((r1, k1)), np.lexsort((r2, k2))
    assert r1.size == r2.size
    assert np.array_equal(r1[o1], r2[o2]) and np.array_equal(k1[o1], k2[o2])


def test_contexts_unchanged_by_the_compiled_passes(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.uniform(-5_000, 25_000, 5_000)
    y = rng.uniform(-5_000, 25_000, 5_000)
    tiles = Tiling(tile_m=4_000.0, halo_m=600.0)
    fast = tiles.contexts(x, y)
    # the NumPy paths: a dense grid never fits, and the halo test in chunks
    monkeypatch.setattr(D, "_DENSE_TILES", 0)
    monkeypatch.setattr(D, "_owner_codes_fit", lambda *a: False)
    slow = tiles.contexts(x, y)
    assert [k for k, _, _ in fast] == [k for k, _, _ in slow]
    for (_, o1, h1), (_, o2, h2) in zip(fast, slow, strict=True):
        assert np.array_equal(o1, o2) and np.array_equal(h1, h2)

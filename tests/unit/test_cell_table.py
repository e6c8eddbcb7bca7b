"""The cell table lookup (``neighbours.cell_values``) and the atoms' one-pass collapse
(``grouping._atoms``) against their plain numpy definitions."""

from __future__ import annotations

import numpy as np
import pytest

from geokanon.grouping import _atoms, _canonical_order, hilbert_keys
from geokanon.neighbours import cell_values, cells_around, in_sorted, pack_key


def _by_search(x, y, idx, origin, side, keys, values):
    sel = np.arange(x.size) if idx is None else idx
    cells = pack_key(np.floor((x[sel] - origin[0]) / side), np.floor((y[sel] - origin[1]) / side))
    pos = np.minimum(np.searchsorted(keys, cells), keys.size - 1)
    return np.where(in_sorted(cells, keys), values[pos], 0).astype(np.uint8)


@pytest.mark.parametrize("spread", [1e3, 1e7])  # a dense box (table) and a sparse one (search)
@pytest.mark.parametrize("with_idx", [False, True])
def test_cell_values_equal_the_binary_search(spread: float, with_idx: bool) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(-spread, spread, 20_000)
    y = rng.uniform(-spread, spread, 20_000)
    x[:50] = np.floor(x[:50])  # points on cell edges
    side = 37.0
    origin = (-spread - 3.0, -spread - 1.0)
    seeds = pack_key(np.floor((x[:40] - origin[0]) / side), np.floor((y[:40] - origin[1]) / side))
    keys = cells_around(seeds, 2)
    values = (1 + in_sorted(keys, cells_around(seeds, 1))).astype(np.uint8)
    idx = rng.permutation(x.size)[:7_000] if with_idx else None
    got = cell_values(x, y, idx, origin, side, keys, values)
    assert got.tolist() == _by_search(x, y, idx, origin, side, keys, values).tolist()
    assert (got == 2).sum() >= 40 or with_idx


def _atoms_numpy(x, y, subj, tb):
    h = hilbert_keys(x, y)
    order = np.lexsort((subj, tb, y, x, h))
    ss, xs, ys = subj[order], x[order], y[order]
    new = np.r_[True, (ss[1:] != ss[:-1]) | (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])]
    atom_of = np.empty(x.size, dtype=np.int64)
    atom_of[order] = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    return atom_of, xs[first], ys[first], ss[first], np.diff(np.r_[first, x.size]).astype(float)


def test_atoms_equal_the_lexicographic_definition() -> None:
    rng = np.random.default_rng(11)
    n = 30_000
    x = np.round(rng.normal(0, 300, n))  # many shared places
    y = np.round(rng.normal(0, 300, n))
    subj = rng.integers(-50, 4000, n).astype(np.int64)  # negative codes, repeats
    tb = rng.integers(0, 3, n).astype(np.uint64)
    x[:500] = x[500:1000]  # exact duplicates of other records
    y[:500] = y[500:1000]
    subj[:500] = subj[500:1000]
    tb[:500] = tb[500:1000]
    for got, want in zip(_atoms(x, y, subj, tb), _atoms_numpy(x, y, subj, tb), strict=True):
        assert got.tolist() == want.tolist()
    h = hilbert_keys(x, y)
    order = _canonical_order(h, tb, subj, x, y)
    key = np.c_[h, x, y, tb.astype(float), subj][order]
    assert np.array_equal(key, key[np.lexsort(key.T[::-1])])  # lexicographic: h, x, y, tb, subj

"""The local search's neighbour lists (``grouping._near_atoms``) against a brute force,
and its bounded costing of moves and swaps against the full walk.

The lists are read from a grid cell by cell (the occupied cells in key order, in
chunks), in rings of cells outward, skipping a cell
whose nearest point is farther than the q-th distance found so far; the answer must
still be exactly the q nearest atoms of other groups (ties to the smaller index)
among the cells within each atom's reach.
"""

from __future__ import annotations

import numpy as np
import pytest

import geokanon.grouping as grouping
from geokanon.grouping import _near_atoms
from geokanon.policy import OutlierPolicy
from tests.local_search_inputs import local_search_input


def _brute(
    ax: np.ndarray, ay: np.ndarray, g: np.ndarray, side: float, q: int, reach: np.ndarray
) -> np.ndarray:
    cx = ((ax - ax.min()) / side).astype(np.int64)
    cy = ((ay - ay.min()) / side).astype(np.int64)
    out = np.full((ax.size, q), -1, np.int64)
    for a in range(ax.size):
        if g[a] < 0:
            continue
        span = reach[g[a]] / side
        rings = min(max(1, int(np.ceil(span))), 4)
        ok = (g >= 0) & (g != g[a]) & (np.abs(cx - cx[a]) <= rings) & (np.abs(cy - cy[a]) <= rings)
        j = np.flatnonzero(ok)
        d = (ax[j] - ax[a]) ** 2 + (ay[j] - ay[a]) ** 2
        best = j[np.lexsort((j, d))][:q]
        out[a, : best.size] = best
    return out


@pytest.mark.parametrize("seed", range(6))
def test_near_atoms_equal_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 600
    # a lattice of few values: many exact distance ties, and atoms on cell borders
    ax = rng.integers(0, 40, n).astype(np.float64) * 2.5
    ay = rng.integers(0, 40, n).astype(np.float64) * 2.5
    if seed % 2:
        ax += rng.random(n) * 0.1
    g = rng.integers(-1, 90, n)
    reach = rng.random(90) * 4.0 * 5.0
    side, q = 5.0, 12
    got = _near_atoms(ax, ay, g, side, q, reach)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.astype(np.int64), _brute(ax, ay, g, side, q, reach))


def test_near_atoms_sparse_cells_fill_from_outer_rings() -> None:
    # few atoms per cell: the q-th distance stays infinite until the outer rings
    rng = np.random.default_rng(7)
    n = 200
    ax = rng.random(n) * 400.0
    ay = rng.random(n) * 400.0
    g = np.arange(n) // 2
    reach = np.full(n, 30.0)
    got = _near_atoms(ax, ay, g, 10.0, 12, reach)
    np.testing.assert_array_equal(got.astype(np.int64), _brute(ax, ay, g, 10.0, 12, reach))


def test_near_atoms_many_cells_across_chunks() -> None:
    # more occupied cells than one chunk of cells: each chunk finds its first cells'
    # neighbours on its own; groups of many sizes, reach of 1 to 4 rings
    rng = np.random.default_rng(11)
    n = 7000
    ax = np.round(rng.random(n) * 1200.0, 1)
    ay = np.round(rng.random(n) * 900.0, 1)
    g = rng.integers(-1, 1500, n)
    reach = rng.random(1500) * 20.0
    got = _near_atoms(ax, ay, g, 5.0, 12, reach)
    np.testing.assert_array_equal(got.astype(np.int64), _brute(ax, ay, g, 5.0, 12, reach))


def _search_input(seed: int, n: int = 5000) -> dict[str, object]:
    """Points on a coarse lattice (many tied distances, atoms of several records), and
    the groups the construction gives them before the local search."""
    rng = np.random.default_rng(seed)
    centres = rng.random((30, 2)) * 2000.0
    pts = centres[rng.integers(0, 30, n)] + rng.normal(0.0, 35.0, (n, 2))
    x = np.round(pts[:, 0] / 2.5) * 2.5
    y = np.round(pts[:, 1] / 2.5) * 2.5
    subjects = rng.integers(0, int(n * 0.7), n)
    return local_search_input(x, y, subjects, OutlierPolicy(k=4, r_max_m=50.0))


def _search(s: dict[str, object], bound: bool) -> tuple[np.ndarray, int]:
    ag = np.asarray(s["atom_group"]).copy()
    orig = grouping._improve

    def forced(*args: object) -> int:
        return int(orig(*args, bound))  # type: ignore[arg-type]

    grouping._improve = forced  # type: ignore[assignment]
    try:
        made = grouping._improve_groups(ag, s["n_groups"], s["ax"], s["ay"], s["aw"], s["asub"],  # type: ignore[arg-type]
                                        s["k"], s["r_work"], s["step"])  # type: ignore[arg-type]  # fmt: skip
    finally:
        grouping._improve = orig
    return ag, made


@pytest.mark.parametrize("seed", range(3))
def test_bounded_costing_decides_as_the_full_walk(seed: int) -> None:
    # The sweep skips, without walking the groups, the moves and swaps an O(1) lower
    # bound on their cost shows cannot gain; every decision must be the walk's.
    s = _search_input(seed)
    full, made_full = _search(s, bound=False)
    fast, made_fast = _search(s, bound=True)
    assert made_full > 0
    assert made_fast == made_full
    np.testing.assert_array_equal(fast, full)

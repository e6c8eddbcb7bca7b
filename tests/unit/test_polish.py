"""Issue 19 item 1: the local search's sweep after the pair re-cuts (``grouping._polish``).

After :func:`geokanon._recut.recut_groups` the atoms of a re-cut group and those with a
neighbour in one are visited once more by the local search's moves and swaps. These
tests check that the sweep takes an improving move next to a re-cut group and leaves
alone the atoms far from every re-cut group; and, on many small tied inputs against a
brute force, that it never makes a group invalid (fewer than k distinct subjects, no
point of the coarsest lattice within r of every member), never changes which atoms are
placed and never raises the summed distance to the centroids.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import geokanon._recut as recut
import geokanon.grouping as grouping
from geokanon.grouping import OFFSET
from geokanon.policy import OutlierPolicy
from tests.local_search_inputs import local_search_input


def _cost(g: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Summed weighted distance of the placed atoms to their group's centroid."""
    m = g >= 0
    g, x, y, w = g[m], x[m], y[m], w[m]
    sw = np.bincount(g, w)
    cx = np.bincount(g, w * x) / np.maximum(sw, 1e-300)
    cy = np.bincount(g, w * y) / np.maximum(sw, 1e-300)
    return float((w * np.hypot(x - cx[g], y - cy[g])).sum())


def _covered_by_brute_force(px: np.ndarray, py: np.ndarray, r: float, step: float) -> bool:
    """Whether some point of the coarsest lattice lies within r of every point and on none
    (every lattice point of the points' bounding box widened by r is tried)."""
    o = (0.5 + OFFSET) * step
    xs = np.arange(math.floor((px.min() - r - o) / step), math.ceil((px.max() + r - o) / step) + 1)
    ys = np.arange(math.floor((py.min() - r - o) / step), math.ceil((py.max() + r - o) / step) + 1)
    qx, qy = np.meshgrid(xs * step + o, ys * step + o)
    qx = qx.ravel()[:, None]
    qy = qy.ravel()[:, None]
    d = np.sqrt((px[None, :] - qx) ** 2 + (py[None, :] - qy) ** 2)
    on = (px[None, :] == qx) & (py[None, :] == qy)
    return bool(((d <= r).all(axis=1) & ~on.any(axis=1)).any())


def _lists(g: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The local search's neighbour lists for these groups (wide reach: every atom)."""
    reach = np.full(int(g.max()) + 1, 1e6)
    return grouping._near_atoms(x, y, g, 50.0, grouping.IMPROVE_NEIGHBOURS, reach)


def _four_groups() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # groups 0 and 1 side by side near the origin, 2 and 3 the same 10 km away; in each
    # pair the last atom of the first group sits among the second group's atoms
    base = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 30.0, 31.0, 32.0, 33.0, 34.0, 29.0])
    x = np.r_[base, base + 10000.0] + 150000.0
    y = np.full(24, 450000.0)
    g = np.array([0] * 6 + [1] * 6 + [2] * 6 + [3] * 6, dtype=np.int64)
    g[5] = 1  # the atom at 5 m in group 1 (its cluster is 0's), and the atom at 29 m in 0
    g[11] = 0
    g[17] = 3
    g[23] = 2
    return x, y, g


def test_the_sweep_changes_atoms_next_to_re_cut_groups_only() -> None:
    x, y, g = _four_groups()
    w = np.ones(x.size)
    s = np.arange(x.size, dtype=np.int64)
    nbr = _lists(g, x, y)
    # as if the re-cuts had changed groups 0 and 1 (an atom swapped between them and back)
    before = g.copy()
    before[0], before[6] = 1, 0
    start = _cost(g, x, y, w)
    made = grouping._polish_groups(before, g, 4, x, y, w, s, 3, 100.0, 5.0, nbr)
    assert made >= 1
    assert set(g[:6].tolist()) != set(g[6:12].tolist())  # the first pair's atoms sorted
    assert g[5] == g[0] and g[11] == g[6]
    assert (g[12:] == np.array([2] * 5 + [3] + [3] * 5 + [2])).all()  # far pair untouched
    assert _cost(g, x, y, w) < start


def test_no_re_cut_no_change() -> None:
    x, y, g = _four_groups()
    w = np.ones(x.size)
    before = g.copy()
    made = grouping._polish_groups(before, g, 4, x, y, w, np.arange(x.size, dtype=np.int64),
                                   3, 100.0, 5.0, _lists(g, x, y))  # fmt: skip
    assert made == 0
    assert np.array_equal(g, before)


@pytest.mark.parametrize("every", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_the_sweep_keeps_every_group_valid_and_never_costs_more(seed: int, every: bool) -> None:
    # small tied inputs (coordinates on a coarse grid, few subjects, repeated places):
    # the construction's groups, the local search, the re-cuts, then the sweep, checked
    # against a brute force of the rule and the cost; ``every``: as if the re-cuts had
    # changed every group (every atom visited)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 220))
    centres = rng.uniform(0, 600, (int(rng.integers(2, 6)), 2))
    p = centres[rng.integers(0, centres.shape[0], n)] + rng.normal(0, 40, (n, 2))
    p = np.round(p / 5.0) * 5.0 + [150000.0, 450000.0]  # ties
    subj = rng.integers(0, int(rng.integers(6, 30)), n).astype(np.int64)
    k = int(rng.integers(2, 6))
    policy = OutlierPolicy(k=k, r_max_m=float(rng.choice([60.0, 100.0, 150.0])))
    s = local_search_input(p[:, 0].copy(), p[:, 1].copy(), subj, policy)
    if not s:
        pytest.skip("no local search")
    ag = np.asarray(s["atom_group"]).copy()
    ng = int(s["n_groups"])  # type: ignore[call-overload]
    ax, ay, aw = (np.asarray(s[c]) for c in ("ax", "ay", "aw"))
    asub = np.asarray(s["asub"])
    r, step = float(s["r_work"]), float(s["step"])  # type: ignore[arg-type]
    lists: list[np.ndarray] = []
    grouping._improve_groups(ag, ng, ax, ay, aw, asub, k, r, step, lists=lists)
    if not lists:
        pytest.skip("no local search")
    before = ag.copy()
    recut.recut_groups(ag, ng, ax, ay, aw, asub, k, r, step)
    if every:
        before = np.where(ag >= 0, -1, ag)
    placed = ag >= 0
    sizes = np.bincount(ag[placed], minlength=ng)
    start = _cost(ag, ax, ay, aw)
    grouping._polish_groups(before, ag, ng, ax, ay, aw, asub, k, r, step, lists[0])
    assert np.array_equal(ag >= 0, placed)  # the same atoms placed
    assert np.bincount(ag[placed], minlength=ng).min() >= min(k, sizes.min())
    assert _cost(ag, ax, ay, aw) <= start + 1e-6 * (1.0 + start)
    for gi in range(ng):
        sel = ag == gi
        if not sel.any():
            continue
        assert np.unique(asub[sel]).size >= k
        assert _covered_by_brute_force(ax[sel], ay[sel], r, step)

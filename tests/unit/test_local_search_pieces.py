"""The local search's sweep in pieces (``grouping._improve``): pieces whose inner atoms
are visited in parallel, then the rest on one thread.

The groups must stay valid (>= k distinct subjects, a lattice point within r_max of
every member), the summed distance to the groups' centroids must not rise, and the
result must not depend on the number of threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import geokanon.grouping as grouping
from geokanon.policy import OutlierPolicy
from tests.local_search_inputs import local_search_input

K = 5
R_MAX = 60.0


def _start(seed: int, n: int = 6000) -> dict[str, object]:
    """Clustered points, the groups the construction gives them before the local search."""
    rng = np.random.default_rng(seed)
    centres = rng.random((40, 2)) * 3000.0
    pts = centres[rng.integers(0, 40, n)] + rng.normal(0.0, 40.0, (n, 2))
    # some records of one subject at one place, some subjects with several places
    x = np.round(pts[:, 0], 1)
    y = np.round(pts[:, 1], 1)
    subjects = rng.integers(0, int(n * 0.8), n)
    return local_search_input(x, y, subjects, OutlierPolicy(k=K, r_max_m=R_MAX))


def _run(s: dict[str, object], piece: int) -> np.ndarray:
    ag = np.asarray(s["atom_group"]).copy()
    old = grouping.IMPROVE_PIECE
    grouping.IMPROVE_PIECE = piece
    try:
        grouping._improve_groups(ag, s["n_groups"], s["ax"], s["ay"], s["aw"], s["asub"],  # type: ignore[arg-type]
                                 s["k"], s["r_work"], s["step"])  # type: ignore[arg-type]  # fmt: skip
    finally:
        grouping.IMPROVE_PIECE = old
    return ag


def _cost(s: dict[str, object], ag: np.ndarray) -> float:
    ax, ay, aw = (np.asarray(s[c]) for c in ("ax", "ay", "aw"))
    p = ag >= 0
    g, w = ag[p], aw[p]
    sw = np.bincount(g, w)
    mx = np.bincount(g, w * ax[p]) / np.maximum(sw, 1e-300)
    my = np.bincount(g, w * ay[p]) / np.maximum(sw, 1e-300)
    return float(np.sum(w * np.hypot(ax[p] - mx[g], ay[p] - my[g])))


@pytest.mark.parametrize(("seed", "piece"), [(0, 128), (1, 512), (2, 97)])
def test_sweep_in_pieces_keeps_groups_valid_and_lowers_the_cost(seed: int, piece: int) -> None:
    s = _start(seed)
    before = np.asarray(s["atom_group"])
    after = _run(s, piece)
    assert np.array_equal(before >= 0, after >= 0)  # no atom placed or dropped
    assert not np.array_equal(before, after)  # the search changed something
    assert _cost(s, after) < _cost(s, before)
    ax, ay, aw, asub = (np.asarray(s[c]) for c in ("ax", "ay", "aw", "asub"))
    r, step = float(s["r_work"]), float(s["step"])  # type: ignore[arg-type]
    for g in np.unique(after[after >= 0]):
        m = np.flatnonzero(after == g)
        assert np.unique(asub[m]).size >= K
        assert grouping._covering_rep(ax[m], ay[m], aw[m], r, step) is not None


def test_pieces_change_the_order_only_where_atoms_cross_a_piece() -> None:
    # with one piece the sweep is the plain one in index order; smaller pieces visit the
    # atoms near a piece's edge later, so the result may differ, but only a little
    s = _start(3)
    whole = _run(s, 1 << 30)
    assert np.array_equal(whole, _run(s, 6000))  # all atoms in one piece: the same
    pieces = _run(s, 256)
    assert abs(_cost(s, pieces) / _cost(s, whole) - 1.0) < 0.01


_SCRIPT = """
import hashlib, sys
sys.path.insert(0, {root!r})
from tests.unit.test_local_search_pieces import _run, _start
print(hashlib.sha256(_run(_start(4), 200).tobytes()).hexdigest())
"""


def test_sweep_in_pieces_does_not_depend_on_the_number_of_threads() -> None:
    root = str(Path(__file__).resolve().parents[2])
    src = str(Path(grouping.__file__).resolve().parents[1])
    out = []
    for threads in ("1", "2"):
        env = dict(os.environ, NUMBA_NUM_THREADS=threads,
                   PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))  # fmt: skip
        res = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=root)], env=env,
                             capture_output=True, text=True, check=True)  # fmt: skip
        out.append(res.stdout.strip().splitlines()[-1])
    assert out[0] == out[1]

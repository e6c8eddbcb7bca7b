"""The extent check's compiled member-to-representative distances (branch vspeed2)."""

from __future__ import annotations

import numpy as np
import pytest

from geokanon.verify.extent import _planar_distances


def test_planar_distances_are_numpys_and_refuse_a_bad_index() -> None:
    rng = np.random.default_rng(7)
    xs, ys = rng.uniform(-1e6, 1e6, 500), rng.uniform(-1e6, 1e6, 500)
    wx, wy = rng.uniform(-1e6, 1e6, 40), rng.uniform(-1e6, 1e6, 40)
    at = rng.integers(0, 500, 3000)
    gi = rng.integers(0, 40, 3000)
    dx, dy = xs[at] - wx[gi], ys[at] - wy[gi]
    assert np.array_equal(_planar_distances(xs, ys, at, wx, wy, gi), np.sqrt(dx * dx + dy * dy))
    for bad_at, bad_gi in (([500], [0]), ([0], [40]), ([-1], [0])):
        with pytest.raises(IndexError):
            _planar_distances(xs, ys, np.array(bad_at), wx, wy, np.array(bad_gi))

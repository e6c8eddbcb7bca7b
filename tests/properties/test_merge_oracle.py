"""A merge record is generalised only when no group's disc could take it (brute-force oracle).

SPEC: a ``merge`` record is placed in a group whose disc (radius r_max around a possibly
re-centred representative) covers it and all the group's members; only if none can does it
escalate. The oracle: for every record that ends generalised with a ``merge`` label, the
smallest enclosing circle of any group's members plus that record (computed here by brute
force over pairs and triples) must be too wide to fit inside r_max with room for the snap
grid. Representatives are snapped to a grid of step s, so a circle of radius up to
``r_max - s / sqrt(2)`` always has a snapped centre that covers it; wider ones may not.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon import Disposal, Label, OutlierPolicy
from geokanon.disposal import run_core
from tests.properties.test_core_invariants import R_MAX, scenes


def enclosing_radius(px: np.ndarray, py: np.ndarray) -> float:
    """Radius of the smallest circle holding every point (brute force, small sets)."""
    pts = np.unique(np.c_[px, py], axis=0)
    if len(pts) == 1:
        return 0.0
    best = math.inf

    def covers(cx: float, cy: float, r: float) -> bool:
        return bool((np.hypot(pts[:, 0] - cx, pts[:, 1] - cy) <= r * (1 + 1e-12) + 1e-9).all())

    for a, b in itertools.combinations(pts, 2):
        cx, cy = (a + b) / 2
        r = math.hypot(*(a - b)) / 2
        if r < best and covers(cx, cy, r):
            best = r
    for a, b, c in itertools.combinations(pts, 3):
        d = 2 * (a[0] * (b[1] - c[1]) + b[0] * (c[1] - a[1]) + c[0] * (a[1] - b[1]))
        if abs(d) < 1e-12:
            continue
        ux = ((a @ a) * (b[1] - c[1]) + (b @ b) * (c[1] - a[1]) + (c @ c) * (a[1] - b[1])) / d
        uy = ((a @ a) * (c[0] - b[0]) + (b @ b) * (a[0] - c[0]) + (c @ c) * (b[0] - a[0])) / d
        r = math.hypot(a[0] - ux, a[1] - uy)
        if r < best and covers(ux, uy, r):
            best = r
    return best


@settings(max_examples=40, deadline=None)
@given(scenes(), st.integers(2, 4))
def test_generalised_merge_records_fit_no_group(scene, k):
    x, y, subj = scene
    if np.unique(subj).size < k:
        return
    policy = OutlierPolicy(k=k, r_max_m=R_MAX, tau=0.99, unit_cap=1.0)
    res = run_core(x, y, policy, subjects=subj, enforce_caps=False)
    slack = R_MAX - policy.snap_step_m / math.sqrt(2)
    stranded = np.flatnonzero(
        (res.disposal == Disposal.GENERALISED) & (res.final_labels == Label.MERGE)
    )
    for p in stranded:
        for g in range(res.group_x.size):
            if math.hypot(res.group_x[g] - x[p], res.group_y[g] - y[p]) > 2 * R_MAX:
                continue
            m = np.flatnonzero(res.group_id == g)
            if m.size > 12:
                continue  # brute force stays small
            r = enclosing_radius(np.r_[x[m], x[p]], np.r_[y[m], y[p]])
            assert r > slack, (int(p), g, r)

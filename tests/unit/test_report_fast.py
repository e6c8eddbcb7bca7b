"""The report's fast paths (issue 8) give what the plain definitions give."""

from __future__ import annotations

import base64
import re
import shutil
import warnings

import numpy as np
import pyarrow as pa
import pytest

import geokanon.report.html as report
from geokanon.io import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.release import ReleaseOptions
from geokanon.report.html import Bin, build_report, masked_histogram
from geokanon.verify import verify_release


def _naive_histogram(values, subjects, edges, k):
    """The masking rule of docs/report.md, walked bin by bin with Python sets."""
    e = np.asarray(edges, dtype=float)
    nb = e.size - 1
    per_bin: list[list[tuple[int, int]]] = [[] for _ in range(nb)]
    for v, s in zip(values, subjects, strict=True):
        if np.isnan(v):
            continue
        i = int(np.clip(np.searchsorted(e, v, side="right") - 1, 0, nb - 1))
        per_bin[i].append((int(s), 1))
    out: list[list[int]] = []
    i = 0
    while i < nb:
        if not per_bin[i]:
            out.append([i, i])
            i += 1
            continue
        j, subj = i, {s for s, _ in per_bin[i]}
        while j < nb - 1 and len(subj) < k:
            j += 1
            subj |= {s for s, _ in per_bin[j]}
        if len(subj) < k:
            last = next((n for n in range(len(out) - 1, -1, -1) if per_bin[out[n][0]]), None)
            if last is None:
                out.append([i, j])
            else:
                out[last][1] = j
                out = out[: last + 1]
            break
        out.append([i, j])
        i = j + 1
    return [
        Bin(float(e[a]), float(e[b + 1]), sum(len(per_bin[c]) for c in range(a, b + 1)))
        for a, b in out
    ]


@pytest.mark.parametrize("seed", range(12))
def test_masked_histogram_matches_the_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    values = rng.lognormal(0.0, 1.5, n)
    values[rng.random(n) < 0.1] = np.nan
    if seed % 3 == 0:
        subjects = np.arange(n) * 7 + 3  # one record each, sparse codes
    elif seed % 3 == 1:
        subjects = rng.integers(0, max(1, n // 3), n)  # several records per subject
    else:
        subjects = rng.integers(-(2**40), 2**40, n)  # codes far apart and negative
    edges = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, np.inf]
    k = int(rng.integers(2, 9))
    assert masked_histogram(values, subjects, edges, k) == _naive_histogram(
        values, subjects, edges, k
    )


def _brute_diameters(gid, x, y, n):
    out = np.zeros(n)
    for g in np.unique(gid[gid >= 0]):
        p = np.column_stack([x[gid == g], y[gid == g]])
        out[g] = np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)).max()
    return out


def test_group_diameters_are_exact_for_small_and_large_groups():
    rng = np.random.default_rng(5)
    gid = rng.integers(0, 400, 4000)
    gid[rng.random(gid.size) < 0.2] = -1
    gid[:60] = 900  # larger than the pairwise limit: the convex hull's pairs
    gid[60:80] = 901
    gid[80] = 902  # a group of one
    x = rng.normal(size=gid.size) * 100.0
    y = rng.normal(size=gid.size) * 100.0
    got = report._group_diameters(gid, x, y, 905)
    assert np.array_equal(got, _brute_diameters(gid, x, y, 905))
    assert np.bincount(gid[gid >= 0]).max() > report._PAIRWISE_MAX


def test_fill_null_reads_integer_columns_with_nulls():
    a = pa.array([1, None, 3, None, 5, 6, 7, 8, 9, None], type=pa.int64())
    assert report._fill_null(a, -1).tolist() == [1, -1, 3, -1, 5, 6, 7, 8, 9, -1]
    assert report._fill_null(a.slice(3), -1).tolist() == [-1, 5, 6, 7, 8, 9, -1]
    assert report._fill_null(pa.array([None, 2], type=pa.uint32()), -1).tolist() == [-1, 2]


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory):
    import pandas as pd

    rng = np.random.default_rng(11)
    n = 3000
    frame = pd.DataFrame(
        {
            "x": 431_000.0 + rng.uniform(0, 4000, n),
            "y": 5_210_000.0 + rng.uniform(0, 3000, n),
            "pid": [f"P{i // 2:05d}" for i in range(n)],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, subject="pid", unit_grid_m=1000.0, crs="EPSG:32631")
        out = tmp_path_factory.mktemp("fast") / "out"
        release_points(table, OutlierPolicy(k=3, r_max_m=60.0), out, ReleaseOptions())
    return out


def _map_png(text: str) -> bytes:
    m = re.search(
        r'id="map-groups"><img class="map" alt="[^"]*" src="data:image/png;base64,([^"]+)"', text
    )
    assert m is not None
    return base64.b64decode(m.group(1))


def test_raster_map_above_the_threshold_is_stated_safe_and_deterministic(
    release_dir, tmp_path, monkeypatch
):
    work = tmp_path / "rel"
    shutil.copytree(release_dir, work)
    dots = (work / "release" / "report.html").read_text(encoding="utf-8")
    assert "Each dot is a published group representative" in dots
    monkeypatch.setattr(report, "RASTER_MIN_GROUPS", 10)
    first = build_report(work).read_bytes()
    assert build_report(work).read_bytes() == first  # byte-identical
    text = first.decode("utf-8")
    assert "The map bins the" in text and "square cells of" in text
    assert "Each dot is" not in text
    png = _map_png(text)
    assert png.startswith(b"\x89PNG") and b"tIME" not in png and b"Software" not in png
    import json

    from geokanon.release import finish_manifest

    finish_manifest(work, json.loads((work / "release" / "manifest.json").read_text()))
    checks = verify_release(work, checks=("no_leak", "report_safety", "manifest")).as_dict()
    assert all(checks.values()), checks


def test_pass_table_shows_group_level_counts_as_published():
    # Counts over the records published at group level are exact in the manifest; a small
    # one shown as "<k" in the report read as a hidden figure the manifest pins, and every
    # release with a pass of 1..k-1 merge records failed `holes` (a register with times).
    from geokanon.published import PASS_SCOPE
    from geokanon.report.html import _pass_rows, _time_row

    manifest = {
        "counts": {"suppressed": "withheld"},
        "passes": [
            {"pass": 1, "scope": PASS_SCOPE, "labels": {"ok": 96, "merge": 4}, "changed": 100,
             "because_of_time": {"ok": 0, "merge": 3, "generalise": 0, "suppress": 0}},
            {"pass": 2, "scope": PASS_SCOPE, "labels": {"ok": 96, "merge": 4}, "changed": 0},
        ],
    }  # fmt: skip
    rows = _pass_rows(manifest, 5)
    assert [r["merge"] for r in rows] == [4, 4]
    assert rows[0]["suppress"] == 0
    time_row = _time_row(manifest, 5)
    assert time_row is not None and time_row["merge"] == 3


def test_report_from_the_writers_columns_equals_the_report_read_from_the_audit(
    release_dir, tmp_path
):
    # The writer hands the report the audit columns it holds; read back from
    # audit/assignment.parquet they give the same page, byte for byte.
    work = tmp_path / "rel"
    shutil.copytree(release_dir, work)
    written = (work / "release" / "report.html").read_bytes()
    assert build_report(work).read_bytes() == written
    assert b"plot-iota" in written and b"plot-displacement" in written


def test_plotting_preloaded_in_a_thread_loads_the_modules_and_leaves_the_settings() -> None:
    """``preload_plotting`` imports the report's plotting modules beside the release's
    files (in a fresh interpreter, where they are not loaded yet), changes no setting of
    matplotlib's, and does nothing once they are loaded."""
    import subprocess
    import sys

    script = """
import sys
import matplotlib
before = {k: repr(v) for k, v in matplotlib.rcParams.items()}
from geokanon.report.html import _PLOTTING, preload_plotting
missing = [n for n in _PLOTTING if n not in sys.modules]
assert "matplotlib.backends.backend_svg" in missing, "loaded before the preload"
thread = preload_plotting()
assert thread is not None and thread.daemon
thread.join(60)
assert not thread.is_alive()
assert all(n in sys.modules for n in _PLOTTING), [n for n in _PLOTTING if n not in sys.modules]
after = {k: repr(v) for k, v in matplotlib.rcParams.items()}
assert after == before, sorted(k for k in after if after[k] != before.get(k))
assert preload_plotting() is None
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

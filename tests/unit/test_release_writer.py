"""The release writer's per-record files: chunked, threaded, and the same as written whole."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import geokanon.release as release
from geokanon import OutlierPolicy
from geokanon.errors import InputError
from geokanon.io import table_from_frame
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, build_release_files, finish_manifest

HAMLET = np.array([0.0, 40_000.0])
POLICY = OutlierPolicy(k=3, r_max_m=200.0, tau=0.5, unit_cap=1.0, allow_synthetic=True)


def _scene() -> pd.DataFrame:
    """Two towns, a village, farms, a hamlet; text attributes with quotes, commas, nulls."""
    rng = np.random.default_rng(4)
    xy = np.r_[
        rng.normal(0, 60, (40, 2)),
        rng.normal(0, 40, (15, 2)) + np.array([3000.0, 0.0]),
        rng.normal(0, 20, (4, 2)) + np.array([0.0, 6000.0]),
        [[20000.0, 0.0], [0.0, 25000.0], [-9000.0, -9000.0]],
        # a scattered hamlet: generalised to its unit
        np.array([[0, 0], [300, 0], [0, 300], [300, 300], [150, 150], [600, 0.0]]) + HAMLET,
    ]
    n = len(xy)
    words = np.array(['a "quoted" word', "comma, inside", "plain", None], dtype=object)
    return pd.DataFrame(
        {
            "x": (155_000 + xy[:, 0]).round(1),
            "y": (463_000 + xy[:, 1]).round(1),
            "unit": np.where(xy[:, 0] > 1500, "east", "west"),
            "age": rng.integers(0, 4, n),
            "note": words[rng.integers(0, 4, n)],
        }
    )


def _release(root: Path, keep: tuple[str, ...]) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(_scene(), unit="unit", crs="EPSG:28992")
        core = run_core_on(table, POLICY)
    written: dict[str, str] = {}
    manifest = build_release_files(
        root, table, core, POLICY, ReleaseOptions(keep=keep), version="test", digests=written
    )
    finish_manifest(root, manifest, unchanged=written)
    return written


@pytest.mark.parametrize("keep", [(), ("age",), ("age", "note")])
def test_chunked_files_equal_whole_ones(tmp_path, monkeypatch, keep):
    whole = tmp_path / "whole"
    _release(whole, keep)
    monkeypatch.setattr(release, "_CHUNK_ROWS", 7)  # many row groups, several CSV chunks
    chunked = tmp_path / "chunked"
    written = _release(chunked, keep)
    for name in ("release/records.parquet", "audit/assignment.parquet"):
        a, b = pq.read_table(whole / name), pq.read_table(chunked / name)
        assert a.equals(b, check_metadata=True), name
    assert pq.ParquetFile(chunked / "release" / "records.parquet").num_row_groups > 1
    csv = (chunked / "release" / "records.csv").read_bytes()
    assert csv == (whole / "release" / "records.csv").read_bytes()
    # The CSV is pyarrow's text of the published table, and hashed as written.
    table = pq.read_table(whole / "release" / "records.parquet").drop_columns(["geometry", "bbox"])
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(quoting_style="needed"))
    assert csv == sink.getvalue().to_pybytes()
    import hashlib

    assert written["records.csv"] == hashlib.sha256(csv).hexdigest()
    if keep:
        records = pd.read_parquet(whole / "release" / "records.parquet")
        # as main has always written them: kept columns, then geometry (and its bbox)
        assert list(records.columns[-len(keep) - 2 : -2]) == list(keep)
        assert records["group_id"].dtype == "Int64" and records["unit"].dtype == "string"


def test_csv_runs_give_the_same_text():
    table = pa.table(
        {
            "g": pa.array([1, 1, 1, 2, None, None, 3, 3], pa.int64()),
            "t": pa.array(["a", "a", "a", 'b"q', None, None, "line\nbreak", "line\nbreak"]),
            "x": pa.array([0.1 + 0.2] * 3 + [2000.0, None, None, 1e22, 1e22]),
        }
    )

    def text(*args: object) -> tuple[int, bytes]:
        buffers = release._csv_text(*args)
        return len(buffers), b"".join(bytes(b) for b in buffers)

    starts = np.array([0, 3, 4, 6])
    plain = text(table, True)
    assert plain[0] == 1
    assert text(table, True, starts) == plain  # a line break: falls back to every row
    head = table.slice(0, 6)
    for header in (True, False):
        parts, runs = text(head, header, starts[:3])
        assert parts == 2  # the runs were used: the header, then the repeated lines
        assert runs == text(head, header)[1]
        assert runs.count(b"\n") == 6 + header
    # as many runs as rows: every row is turned into text
    assert text(head, True, np.arange(6)) == text(head, True)
    assert text(head.slice(0, 0), True, np.zeros(0, dtype=np.int64)) == text(head.slice(0, 0), True)


def test_stable_order_equals_stable_argsort():
    from geokanon.neighbours import stable_argsort

    rng = np.random.default_rng(1)
    for keys in (
        rng.integers(-5, 50, 1000),
        rng.integers(0, 2**40, 1000),
        np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max, 0]),
        np.zeros(0, dtype=np.int64),
        np.array([7]),
    ):
        assert np.array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_tie_order_equals_pandas_sort():
    rng = np.random.default_rng(2)
    n = 500
    floats = rng.integers(0, 5, n).astype(float)
    floats[rng.random(n) < 0.2] = np.nan
    floats[:3] = [-np.inf, -0.0, 0.0]
    words = np.array(["b", "a", None, "ab", 'q"'], dtype=object)[rng.integers(0, 5, n)]
    ties = pd.DataFrame({"_key": rng.integers(0, 20, n)})
    ties["time_bin"] = pd.array(words, dtype="string")
    ties["age"] = rng.integers(0, 4, n)
    ties["income"] = floats
    ties["flag"] = rng.random(n) < 0.5
    ties["big"] = (np.uint64(2**63) + rng.integers(0, 3, n).astype(np.uint64)).astype(np.uint64)
    ties["small"] = rng.integers(-100, 100, n).astype(np.int8)
    ties["nullable"] = pd.array(np.where(rng.random(n) < 0.3, None, rng.integers(0, 3, n)), "Int64")
    ties["word"] = words
    expected = ties.sort_values(list(ties.columns), kind="stable", na_position="first")
    assert np.array_equal(release._tie_order(ties), expected.index.to_numpy())
    # too many distinct values for one 64-bit key: pandas sorts
    wide = pd.DataFrame({"_key": rng.integers(0, n, n)})
    for i in range(8):  # 500**8 > 2**63
        wide[f"c{i}"] = rng.random(n)
    expected = wide.sort_values(list(wide.columns), kind="stable", na_position="first")
    assert np.array_equal(release._tie_order(wide), expected.index.to_numpy())


def test_wkb_points_are_shapely_bytes():
    shapely = pytest.importorskip("shapely")
    x = np.array([155000.5, np.nan, -1e-7, 3.0])
    y = np.array([463000.25, np.nan, 2.0, np.inf])
    got = release._wkb_points(x, y).to_pylist()
    assert got[1] is None
    for i in (0, 2, 3):
        assert got[i] == shapely.to_wkb(shapely.points(x[i], y[i]))
    full = release._wkb_points(x[[0, 2]], y[[0, 2]])
    assert full.null_count == 0 and full.to_pylist() == [got[0], got[2]]


def test_keep_of_a_published_column_is_refused(tmp_path):
    frame = _scene().rename(columns={"note": "level"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, unit="unit", crs="EPSG:28992")
        core = run_core_on(table, POLICY)
    with pytest.raises(InputError, match="publishes itself"):
        build_release_files(
            tmp_path, table, core, POLICY, ReleaseOptions(keep=("level",)), version="test"
        )


@pytest.mark.parametrize("overlap", [False, True])
def test_published_rows_read_group_and_class_off_the_sorted_keys(overlap):
    from types import SimpleNamespace

    rng = np.random.default_rng(11)
    n, n_groups = 5000, 700
    levels = ("unit", "area", "unit", "odd", "parent")  # "odd": an unknown level, first
    g = rng.integers(-1, n_groups, n)
    c = np.where(g < 0, rng.integers(-1, len(levels), n), -1)
    if overlap:  # not a core result: a record in a group and a class
        c[:40] = 1
    result = SimpleNamespace(
        group_id=g, class_id=c, group_x=np.zeros(n_groups), class_level=levels,
        synthetic=np.zeros(0),  # no synthetic records
    )  # fmt: skip
    rows, pub_g, pub_c, extra = release._published_rows(result, None, ReleaseOptions(), None, 0)
    assert extra is None
    assert np.array_equal(pub_g, g[rows]) and np.array_equal(pub_c, c[rows])
    # group-level rows by group id, then the classes by level rank (unknown first), then id
    rank = {"odd": -1, "unit": 1, "parent": 2, "area": 3}
    key = [
        (0, int(g[r]), 0, r) if g[r] >= 0 else (1, rank[levels[c[r]]], int(c[r]), r)
        for r in np.flatnonzero((g >= 0) | (c >= 0))
    ]
    unknown_first = sorted(key, key=lambda t: (t[0] if t[1] != -1 else -1, t[1:]))
    assert rows.tolist() == [t[3] for t in unknown_first]


@pytest.mark.parametrize("large", [False, True])
def test_coded_text_is_the_text_of_each_code(large):
    kind = pa.large_string() if large else pa.string()
    cases = [
        (np.array([0, 1, 0, -1, 2]), ["group", "unit", "é"]),  # mixed, a null
        (np.zeros(6, dtype=np.int64), ["group"]),  # one code throughout
        (np.full(4, -1), ["a"]),  # all null
        (np.full(3, 1, dtype=np.uint8), ["a", ""]),  # one empty text throughout
        (np.zeros(0, dtype=np.int64), ["a"]),
    ]
    for codes, names in cases:
        got = release._coded_text(codes, names, large=large)
        got.validate(full=True)
        want = pa.array([names[c] if c >= 0 else None for c in codes.tolist()], kind)
        assert got.equals(want), (codes, names)

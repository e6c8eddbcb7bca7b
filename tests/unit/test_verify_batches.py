"""The verifier reads big files in batches of rows: its findings must not depend on them.

``no_leak`` reads Parquet files in batches of ``_SCAN_ROWS`` rows and CSV files in
blocks of ``_CSV_BLOCK`` bytes, and the audit is read in batches too. Every finding
is a count over rows or a property of a column's distinct values, so a release
verified in many small batches must give the very report it gives in one batch.
These leaks are planted where small batches split them (first rows, last rows,
every few hundred rows), and the helpers that replace numpy's slow paths are
checked against numpy.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapely

import geokanon.verify as V
from geokanon import OutlierPolicy, __version__
from geokanon.io.read import read_points
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, write_release
from geokanon.verify import format_report, verify_release

N = 6_000


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, pd.DataFrame]:
    rng = np.random.default_rng(11)
    towns = rng.uniform(0, 30_000, (12, 2))
    xy = towns[rng.integers(0, 12, N)] + rng.normal(0, 300, (N, 2))
    src = pd.DataFrame({"x": np.round(xy[:, 0], 2), "y": np.round(xy[:, 1], 2)})
    src["patient"] = [f"P{i:07d}" for i in rng.integers(0, int(N / 1.3), N)]
    start = pd.Timestamp("2008-10-23T00:00:00Z")
    src["time"] = [
        (start + pd.Timedelta(seconds=int(s))).strftime("%Y-%m-%dT%H:%M:%SZ")
        for s in rng.integers(0, 86_400 * 30, N)
    ]
    tmp = tmp_path_factory.mktemp("batches")
    source = tmp / "source.csv"
    src.to_csv(source, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = read_points(source, x="x", y="y", subject="patient", unit_grid_m=10_000.0)
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.5)
        core = run_core_on(table, policy)
    out = tmp / "rel"
    write_release(out, table, core, policy, ReleaseOptions(), version=__version__)
    return out, source, src


def _records_parquet(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    path = root / "release" / "records.parquet"
    pq.write_table(change(pq.read_table(path)), path, row_group_size=1_000)


def _records_csv(root: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    path = root / "release" / "records.csv"
    change(pd.read_csv(path, dtype=str, keep_default_na=False)).to_csv(path, index=False)


def _set(t: pa.Table, name: str, values: object) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, pa.array(values))


def _plant(kind: str, root: Path, src: pd.DataFrame) -> None:
    sx, sy = src["x"].to_numpy(), src["y"].to_numpy()
    if kind == "kept coordinates and pairs":

        def parquet(t: pa.Table) -> pa.Table:
            e = np.full(t.num_rows, 1.5)
            n = np.full(t.num_rows, 2.5)
            at = np.r_[0:7, t.num_rows - 9 : t.num_rows, 500:4000:333]
            e[at], n[at] = sx[at], sy[at]
            return t.append_column("e", pa.array(e)).append_column("n", pa.array(n))

        def csv(f: pd.DataFrame) -> pd.DataFrame:
            e = np.full(len(f), "", dtype=object)
            e[-40:] = [repr(float(v)) for v in sx[:40]]
            e[::997] = "NA"
            return f.assign(e=e)

        _records_parquet(root, parquet)
        _records_csv(root, csv)
    elif kind == "representatives on source pairs, geometry too":

        def parquet(t: pa.Table) -> pa.Table:
            x = t.column("x").to_numpy().copy()
            y = t.column("y").to_numpy().copy()
            at = np.r_[3:3000:211]
            x[at], y[at] = sx[at], sy[at]
            x[4000:4100] = np.nan  # x, y all NaN in some batches
            y[4000:4100] = np.nan
            t = _set(_set(t, "x", x), "y", y)
            return _set(t, "geometry", list(shapely.to_wkb(shapely.points(x, y))))

        _records_parquet(root, parquet)
    elif kind == "geometry apart from x, y in one batch":

        def parquet(t: pa.Table) -> pa.Table:
            x = t.column("x").to_numpy().copy()
            y = t.column("y").to_numpy().copy()
            at = np.r_[5200:5600:37]
            x[at], y[at] = sx[at], sy[at]
            return _set(t, "geometry", list(shapely.to_wkb(shapely.points(x, y))))

        _records_parquet(root, parquet)
    elif kind == "ids, times and row numbers":

        def parquet(t: pa.Table) -> pa.Table:
            m = t.num_rows
            note = np.array([None] * m, dtype=object)
            note[10:40] = src["patient"].to_numpy()[10:40]
            note[-5:] = [
                f"seen {p} at {w}" for p, w in zip(src["patient"][:5], src["time"][:5], strict=True)
            ]
            when = np.full(m, "n/a", dtype=object)
            when[-30:] = src["time"].to_numpy()[:30]
            return (
                t.append_column("note", pa.array(note, type=pa.string()))
                .append_column("when", pa.array(when, type=pa.string()))
                .append_column("source_row", pa.array(np.arange(m)))
            )

        def csv(f: pd.DataFrame) -> pd.DataFrame:
            note = np.full(len(f), "", dtype=object)
            note[100:140] = src["patient"].to_numpy()[100:140]
            when = np.full(len(f), "x", dtype=object)
            when[-30:] = src["time"].to_numpy()[:30]
            return f.assign(note=note, when=when)

        _records_parquet(root, parquet)
        _records_csv(root, csv)
    elif kind == "numbers in free text":

        def csv(f: pd.DataFrame) -> pd.DataFrame:
            txt = np.full(len(f), "a", dtype=object)
            txt[-10:] = [f"at {a} {b}" for a, b in zip(sx[:10], sy[:10], strict=True)]
            return f.assign(txt=txt)

        _records_csv(root, csv)


PLANTS = (
    "none",
    "kept coordinates and pairs",
    "representatives on source pairs, geometry too",
    "geometry apart from x, y in one batch",
    "ids, times and row numbers",
    "numbers in free text",
)


@pytest.mark.parametrize("kind", PLANTS)
def test_small_batches_give_the_report_of_one_batch(
    kind: str,
    built: tuple[Path, Path, pd.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, source, src = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    _plant(kind, rel, src)
    reports = []
    for rows, block in ((1 << 30, 1 << 30), (700, 1 << 14), (97, 5_000)):
        monkeypatch.setattr(V, "_SCAN_ROWS", rows)
        monkeypatch.setattr(V, "_CSV_BLOCK", block)
        reports.append(format_report(verify_release(rel, source=source)))
    assert reports[1] == reports[0]
    assert reports[2] == reports[0]
    no_leak = next(line for line in reports[0].splitlines() if " no_leak " in line)
    assert no_leak.startswith("PASS" if kind == "none" else "FAIL"), no_leak


def test_the_planted_leaks_are_found_with_their_counts(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, source, src = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    _plant("representatives on source pairs, geometry too", rel, src)
    monkeypatch.setattr(V, "_SCAN_ROWS", 500)
    detail = verify_release(rel, source=source, checks=["no_leak"])["no_leak"].detail
    # x, y and the geometry that repeats them: each row once, not three times
    assert "records.parquet: 15 rows hold a source coordinate pair" in detail
    rel2 = tmp_path / "rel2"
    shutil.copytree(root, rel2)
    _plant("geometry apart from x, y in one batch", rel2, src)
    detail = verify_release(rel2, source=source, checks=["no_leak"])["no_leak"].detail
    # the geometry is a column of its own: its pairs with itself, x and y all count
    assert "records.parquet: 11 rows hold a source coordinate pair" in detail


def test_records_csv_rows_noted_by_no_leak_are_counted_as_counts_counts_them(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path
) -> None:
    root, source, _ = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    path = rel / "release" / "records.csv"
    _records_csv(rel, lambda f: f.iloc[:-1])  # one row short of records.parquet
    reader = V._Release(rel, source, 0.0)
    assert V._check_no_leak(reader).passed
    assert reader.csv_rows[path] == V._csv_rows(path)
    counts = V._check_counts(reader)
    assert not counts.passed
    n = len(pq.read_table(rel / "release" / "records.parquet", columns=["group_id"]))
    assert f"records.csv has {n - 1} rows, records.parquet {n}" in counts.detail
    # counts alone (no_leak did not read the file) says the same
    assert verify_release(rel, source=source, checks=["counts"])["counts"].detail == counts.detail


def test_argsort_stable_is_numpys() -> None:
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(0, 2_000))
        v = (
            rng.integers(-5, 5, n),
            rng.integers(-(2**62), 2**62, n),
            rng.integers(0, 10**6, n).astype(np.int32),
            rng.integers(0, 2**40, n),
        )[trial % 4]
        assert (V._argsort_stable(v) == np.argsort(v, kind="stable")).all()


def test_value_counts_is_uniques() -> None:
    rng = np.random.default_rng(4)
    for v in (rng.integers(-1, 50, 1_000), rng.integers(0, 2**50, 1_000), np.zeros(0, np.int64)):
        uniq, counts = np.unique(v, return_counts=True)
        got = V._value_counts(v)
        assert got.index.tolist() == uniq.tolist()
        assert got.tolist() == counts.tolist()


def _secrets(sources: tuple[tuple[np.ndarray, np.ndarray], ...]) -> V._Secrets:
    values = np.concatenate([np.r_[x, y] for x, y in sources])
    return V._Secrets(
        px=np.empty(0), py=np.empty(0), coords=np.sort(values[np.isfinite(values)]),
        subject_ids=frozenset(), spaced_ids=(), epoch=np.empty(0), wall=np.empty(0),
        bad_names=frozenset(), n_k=5, pair_sources=sources,
    )  # fmt: skip


@pytest.mark.parametrize("collide", [False, True])
def test_known_pairs_are_exact(collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if collide:  # every pair in one of three buckets: the exact comparison decides
        monkeypatch.setattr(
            V, "_pair_hash", lambda x, y: (np.floor(np.abs(x)) % 3).astype(np.uint64) << 60
        )
    rng = np.random.default_rng(5)
    x = np.round(rng.uniform(-50, 50, 2_000), 1)
    y = np.round(rng.uniform(-50, 50, 2_000), 1)
    x[:3] = -0.0
    x[rng.random(x.size) < 0.05] = np.nan
    sources = ((x, y), (y[:40].copy(), x[:40].copy()))
    sec = _secrets(sources)
    a = np.r_[rng.choice(x, 300), y[:20], rng.uniform(-50, 50, 300).round(1), 0.0]
    b = np.r_[rng.choice(y, 300), x[:20], rng.uniform(-50, 50, 300).round(1), y[0]]
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    pairs = {(float(p), float(q)) for xs, ys in sources for p, q in zip(xs, ys, strict=True)}
    want = [(float(p), float(q)) in pairs for p, q in zip(a, b, strict=True)]
    assert sec.known_pairs(a, b).tolist() == want
    assert any(want)


def test_unpublished_and_unknown_groups_are_counted(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path
) -> None:
    root, source, _ = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    path = rel / "release" / "groups.parquet"
    groups = pq.read_table(path).to_pandas()
    # two groups dropped, three made up
    extra = groups.iloc[:3].assign(group_id=groups["group_id"].max() + np.arange(1, 4))
    edited = pd.concat([groups.iloc[2:], extra], ignore_index=True)
    pq.write_table(pa.Table.from_pandas(edited, preserve_index=False), path)
    detail = verify_release(rel, source=source, checks=["counts"])["counts"].detail
    assert "2 audit groups are not published" in detail
    assert "3 published groups have no audit records" in detail

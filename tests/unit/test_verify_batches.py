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

import dataclasses
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
from hypothesis import given, settings
from hypothesis import strategies as st

import geokanon.verify.leak_rules as leak_rules_module
from geokanon import OutlierPolicy, __version__
from geokanon.io.read import read_points
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, write_release
from geokanon.verify import _reader, format_report, verify_release
from geokanon.verify._arrays import (
    argsort_stable,
    distinct_counts,
    nunique,
    positions_in,
    text_codes,
    value_counts,
)
from geokanon.verify._reader import ReleaseReader
from geokanon.verify.counts import _csv_rows, check_counts
from geokanon.verify.leak_rules import (
    CSV_NA,
    Secrets,
    TableScan,
    _cell_counts,
    _Numbers,
    _sig_counts,
    _sig_digits,
    _TextColumn,
    scan_csv,
    text_column,
)
from geokanon.verify.manifest import _sha256, check_manifest
from geokanon.verify.no_leak import check_no_leak

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
    write_release(out, table, core, policy, ReleaseOptions(local_metres=True), version=__version__)
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
        monkeypatch.setattr(_reader, "SCAN_ROWS", rows)
        monkeypatch.setattr(_reader, "CSV_BLOCK", block)
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
    monkeypatch.setattr(_reader, "SCAN_ROWS", 500)
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
    reader = ReleaseReader(rel, source, 0.0)
    assert check_no_leak(reader).passed
    assert reader.csv_rows[path] == _csv_rows(path)
    counts = check_counts(reader)
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
        assert (argsort_stable(v) == np.argsort(v, kind="stable")).all()


def test_value_counts_is_uniques() -> None:
    rng = np.random.default_rng(4)
    for v in (rng.integers(-1, 50, 1_000), rng.integers(0, 2**50, 1_000), np.zeros(0, np.int64)):
        uniq, counts = np.unique(v, return_counts=True)
        got = value_counts(v)
        assert got.index.tolist() == uniq.tolist()
        assert got.tolist() == counts.tolist()


def _secrets(sources: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Secrets:
    values = np.concatenate([np.r_[x, y] for x, y in sources])
    return Secrets(
        px=np.empty(0), py=np.empty(0), coords=np.sort(values[np.isfinite(values)]),
        subject_ids=frozenset(), spaced_ids=(), epoch=np.empty(0), wall=np.empty(0),
        bad_names=frozenset(), n_k=5, pair_sources=sources,
    )  # fmt: skip


@pytest.mark.parametrize("collide", [False, True])
def test_known_pairs_are_exact(collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if collide:  # every pair in one of three buckets: the exact comparison decides
        monkeypatch.setattr(
            leak_rules_module,
            "_pair_hash",
            lambda x, y: (np.floor(np.abs(x)) % 3).astype(np.uint64) << 60,
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


# ---- the fast paths: what they skip is known to hold nothing ----------------------------


def _cross_row_pairs(root: Path, src: pd.DataFrame, rows: range) -> int:
    """Source pairs split over two rows of records.csv (``y`` of a row, ``group_id`` of
    the next), at every row of ``rows``; returns how many were planted."""
    sx, sy = src["x"].to_numpy(), src["y"].to_numpy()

    def csv(f: pd.DataFrame) -> pd.DataFrame:
        f = f.copy()
        for r in rows:
            f.loc[r, "y"] = repr(float(sx[r]))
            f.loc[r + 1, "group_id"] = repr(float(sy[r]))
        return f

    _records_csv(root, csv)
    return len(rows)


@pytest.mark.parametrize("block", [1 << 30, 1 << 14, 2_000, 700])
def test_pairs_across_rows_and_blocks_are_counted_whatever_the_blocks(
    block: int,
    built: tuple[Path, Path, pd.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A block whose tokens hold no source coordinate is not paired token by token; the
    # pair of its last token and the next block's first must still be found when it
    # is one (blocks of 700 bytes end on most of these rows).
    root, source, src = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    planted = _cross_row_pairs(rel, src, range(40, 4_000, 61))
    monkeypatch.setattr(_reader, "CSV_BLOCK", block)
    detail = verify_release(rel, source=source, checks=["no_leak"])["no_leak"].detail
    assert f"records.csv: {planted} coordinate pairs" in detail


def test_one_pair_in_one_row_of_many_batches_is_found(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every other batch has no source coordinate at all: the one that has must be paired
    root, source, src = built
    sx, sy = src["x"].to_numpy(), src["y"].to_numpy()
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)

    def csv(f: pd.DataFrame) -> pd.DataFrame:
        f = f.copy()
        f.loc[2_345, "x"], f.loc[2_345, "y"] = repr(float(sx[9])), repr(float(sy[9]))
        return f

    def parquet(t: pa.Table) -> pa.Table:
        x = t.column("x").to_numpy().copy()
        y = t.column("y").to_numpy().copy()
        x[4_321], y[4_321] = sx[3], sy[3]
        t = _set(_set(t, "x", x), "y", y)
        return _set(t, "geometry", list(shapely.to_wkb(shapely.points(x, y))))

    _records_csv(rel, csv)
    _records_parquet(rel, parquet)
    monkeypatch.setattr(_reader, "CSV_BLOCK", 1 << 12)
    monkeypatch.setattr(_reader, "SCAN_ROWS", 300)
    detail = verify_release(rel, source=source, checks=["no_leak"])["no_leak"].detail
    assert "records.csv: 1 coordinate pairs, 1 rows hold a source coordinate pair" in detail
    # x, y and the geometry that repeats them: the row once
    assert "records.parquet: 1 rows hold a source coordinate pair" in detail


def test_missing_value_cells_are_dropped_as_rewriting_the_rows_would(
    built: tuple[Path, Path, pd.DataFrame],
) -> None:
    # pandas reads these cells as empty: the table scan must not count them, while the
    # text scan still reads them
    _, _, src = built
    ids = src["patient"].to_numpy()
    texts = np.array([*sorted(CSV_NA), ids[0], ids[1], "12.5", "x 3"], dtype=object)
    rng = np.random.default_rng(8)
    codes = rng.integers(-1, texts.size, 5_000)
    col = _TextColumn(texts=texts, codes=codes)
    na = np.isin(texts, sorted(CSV_NA))
    dropped = col.without(na)
    rewritten = _TextColumn(
        texts=texts, codes=np.where((codes >= 0) & ~na[np.maximum(codes, 0)], codes, -1)
    )
    sec = Secrets(
        px=np.empty(0), py=np.empty(0), coords=np.array([12.5]),
        subject_ids=frozenset([ids[0], ids[1], *CSV_NA]), spaced_ids=(),
        epoch=np.empty(0), wall=np.empty(0), bad_names=frozenset(), n_k=5,
    )  # fmt: skip
    assert dropped.counts.tolist() == rewritten.counts.tolist()
    assert np.array_equal(_Numbers(text=dropped).rows(), _Numbers(text=rewritten).rows(),
                          equal_nan=True)  # fmt: skip
    assert _cell_counts(dropped, sec) == _cell_counts(rewritten, sec)
    scans = []
    for c in (dropped, rewritten):
        scan = TableScan(["a", "b"], sec)
        scan.add([("a", pa.array([], type=pa.string())), ("b", pa.array([]))], {"a": c, "b": c})
        scans.append(scan.findings())
    assert scans[0] == scans[1]
    # no missing-value marker reads as a finite number (so dropping one drops no number)
    assert not np.isfinite(text_column(pa.array(sorted(CSV_NA))).numeric).any()


def test_rows_are_members_exactly_when_their_value_is_a_coordinate() -> None:
    rng = np.random.default_rng(9)
    coords = np.sort(np.r_[rng.uniform(0, 100, 50).round(2), 0.0])
    vals = np.r_[rng.choice(coords, 300), rng.uniform(0, 100, 3_000).round(2), np.nan, -0.0]
    rng.shuffle(vals)
    want = np.isin(vals, coords)
    nums = _Numbers(rows=vals, arrow=pa.array(vals))
    assert nums.found(coords) == bool(want.any())
    assert nums.member(coords).tolist() == want.tolist()
    text = text_column(pa.array([repr(float(v)) if v == v else "" for v in vals]))
    tnums = _Numbers(text=text)
    assert tnums.found(coords) == bool(want.any())
    assert tnums.member(coords).tolist() == want.tolist()
    none = _Numbers(rows=vals[~want], arrow=pa.array(vals[~want]))
    assert not none.found(coords)
    assert not none.member(coords).any()


def test_records_csv_checksum_is_taken_while_no_leak_reads_it(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path
) -> None:
    root, source, _ = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    path = rel / "release" / "records.csv"
    reader = ReleaseReader(rel, source, 0.0)
    assert check_no_leak(reader).passed
    assert reader.read_digests[path] == _sha256(path)
    # a changed byte is a mismatch, whether no_leak or manifest reads the file
    data = bytearray(path.read_bytes())
    data[-3] = ord("9") if data[-3] != ord("9") else ord("8")
    path.write_bytes(bytes(data))
    report = verify_release(rel, source=source)
    assert not report["manifest"].passed
    assert "sha256 mismatches: records.csv" in report["manifest"].detail
    alone = verify_release(rel, source=source, checks=["manifest"])["manifest"]
    assert alone.detail == report["manifest"].detail


def test_distinct_subjects_per_id_and_distinct_values() -> None:
    rng = np.random.default_rng(10)
    for trial in range(300):
        n = int(rng.integers(0, 400))
        ids = rng.integers(-1, 12, n)
        subj = (rng.integers(0, max(1, n // (1 + trial % 4)), n), rng.integers(0, 2**40, n))[
            trial % 2
        ]
        want = [len({s for i, s in zip(ids, subj, strict=True) if i == g}) for g in range(12)]
        assert distinct_counts(ids, subj, 12).tolist() == want
        assert nunique(subj) == np.unique(subj).size
        assert nunique(subj.astype(np.float64)) == np.unique(subj).size


def test_positions_are_the_first_row_of_each_id() -> None:
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(0, 300))
        table = (
            rng.permutation(n) + 7,  # a short range: the lookup table
            rng.integers(0, max(1, n // 2), n),  # repeated ids
            rng.integers(-(2**40), 2**40, n),  # a wide range
        )[trial % 3]
        values = rng.integers(-20, n + 20, 200)
        first = {}
        for i, t in enumerate(table.tolist()):
            first.setdefault(t, i)
        want = [first.get(v, -1) for v in values.tolist()]
        assert positions_in(table, values).tolist() == want


def test_significant_digits_counted_as_the_text_would() -> None:
    rng = np.random.default_rng(12)
    values = np.r_[
        rng.integers(-(10**16), 10**16, 2_000).astype(np.float64),
        rng.integers(-(10**5), 10**5, 2_000).astype(np.float64),
        np.arange(0.0, 10_000.0, 10.0), rng.normal(0, 1e5, 500), rng.normal(0, 1e5, 500).round(2),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e15, 1e16, 999.0, 1000.0, 12300.0, 5e-324, 0.1],
    ]  # fmt: skip
    want = [_sig_digits(repr(float(v))) for v in values]
    assert _sig_counts(values).tolist() == want


def test_text_codes_look_each_text_up() -> None:
    texts = pd.Series(["a", None, float("nan"), 1, "b", "a", "None"], dtype=object)
    for names in (np.array(["a", "b"], dtype=object), np.array(["1", "None", "a"], dtype=object)):
        look = pd.Index([str(n) for n in names])
        want = look.get_indexer(pd.Index(texts.astype(str))).tolist()
        assert text_codes(texts, names).tolist() == want


def test_a_block_without_coordinates_breaks_the_token_stream(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the two halves of a source pair, many blocks apart: no pair, however the file
    # is cut (a block with no source coordinate must not carry the one before it on)
    root, source, src = built
    sx, sy = src["x"].to_numpy(), src["y"].to_numpy()
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)

    def csv(f: pd.DataFrame) -> pd.DataFrame:
        f = f.copy()
        for r in range(100, 5_000, 700):
            f.loc[r, "y"] = repr(float(sx[r]))
            f.loc[r + 90, "group_id"] = repr(float(sy[r]))
        return f

    _records_csv(rel, csv)
    details = []
    for block in (1 << 30, 1 << 12, 900):
        monkeypatch.setattr(_reader, "CSV_BLOCK", block)
        details.append(verify_release(rel, source=source, checks=["no_leak"])["no_leak"].detail)
    assert "coordinate pairs" not in details[0]
    assert "records.csv: column 'group_id'" in details[0]
    assert details[1] == details[0]
    assert details[2] == details[0]


def test_geometry_pairs_count_when_another_batch_has_its_own_geometry(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rows 17 and 18: x, y and the geometry (the same values) are source pairs; rows
    # 5200.. (another batch): the geometry alone. The geometry is then a column of its
    # own everywhere, and its pairs in the first batch count too.
    root, source, src = built
    sx, sy = src["x"].to_numpy(), src["y"].to_numpy()
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)

    def parquet(t: pa.Table) -> pa.Table:
        x = t.column("x").to_numpy().copy()
        y = t.column("y").to_numpy().copy()
        x[17:19], y[17:19] = sx[17:19], sy[17:19]
        gx, gy = x.copy(), y.copy()
        at = np.r_[5200:5600:37]
        gx[at], gy[at] = sx[at], sy[at]
        t = _set(_set(t, "x", x), "y", y)
        return _set(t, "geometry", list(shapely.to_wkb(shapely.points(gx, gy))))

    _records_parquet(rel, parquet)
    details = []
    for rows in (1 << 30, 1_000, 97):
        monkeypatch.setattr(_reader, "SCAN_ROWS", rows)
        details.append(verify_release(rel, source=source, checks=["no_leak"])["no_leak"].detail)
    # rows 17, 18: (x, y), (x, geometry.y), (geometry.x, y), (geometry.x, geometry.y)
    assert f"records.parquet: {2 * 4 + 11} rows hold a source coordinate pair" in details[0]
    assert details[1] == details[0]
    assert details[2] == details[0]


def test_a_csv_read_raw_is_hashed_by_manifest(
    built: tuple[Path, Path, pd.DataFrame], tmp_path: Path
) -> None:
    root, source, _ = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    _records_csv(rel, lambda f: f.assign(note=["a 1 2"] * len(f)))  # cells of two numbers
    reader = ReleaseReader(rel, source, 0.0)
    check_no_leak(reader)
    assert rel / "release" / "records.csv" not in reader.read_digests  # read raw, not in batches
    detail = check_manifest(reader).detail
    assert "sha256 mismatches: records.csv" in detail


def test_a_block_without_coordinates_ends_the_pair_of_the_block_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one column: a run of one half of a source pair, a run of other numbers, a run of
    # the other half. No two neighbouring tokens make the pair, wherever the blocks end
    # (some end exactly where the runs do, with blocks of other numbers between).
    a, b = 1234.5, 6789.5
    x, y = np.array([a, 1.0]), np.array([b, 2.0])
    sec = Secrets(
        px=np.empty(0), py=np.empty(0), coords=np.sort(np.r_[x, y]), subject_ids=frozenset(),
        spaced_ids=(), epoch=np.empty(0), wall=np.empty(0), bad_names=frozenset(), n_k=5,
        pair_sources=((x, y),),
    )  # fmt: skip
    monkeypatch.setattr(_reader, "CSV_BLOCK", 64)
    path = tmp_path / "v.csv"
    for first in range(5, 30):
        for gap in range(9, 30, 2):
            path.write_text("v\n" + f"{a}\n" * first + "1111.5\n" * gap + f"{b}\n" * 20)
            found = scan_csv(path, sec)
            assert found is not None
            assert not [f for f in found if "coordinate pairs" in f], (first, gap)
        # cells without a number between the runs: the runs' ends are neighbours
        for gap in range(0, 30, 3):
            path.write_text("v\n" + f"{a}\n" * first + "abcdef\n" * gap + f"{b}\n" * 20)
            found = scan_csv(path, sec)
            assert found is not None
            assert "1 coordinate pairs" in found, (first, gap)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1.0, 50.0, 5e6]))
def test_pairs_near_transformed_sources_as_the_tree_finds_them(seed: int, scale: float) -> None:
    """Without the source's own values (lon/lat input, the audit's coordinates carried to
    the output CRS), a published pair is a source pair within ``near_tol``. The rows are
    sifted by two sorted searches before the tree is asked: the count is the tree's on
    every row, at, just inside and just outside the tolerance, with NaN and inf rows."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    src = rng.uniform(0.9, 1.1, (3_000, 2)) * scale
    tree = cKDTree(src)
    tol = 1e-9 * float(np.abs(src).max())
    pub = rng.uniform(0.9, 1.1, (2_000, 2)) * scale
    pick = rng.integers(0, src.shape[0], 600)
    angle = rng.uniform(0, 2 * np.pi, 600)
    step = tol * rng.choice([0.0, 0.5, 0.999, 1.001, 2.0], 600)
    pub[:600] = src[pick] + np.column_stack([np.cos(angle), np.sin(angle)]) * step[:, None]
    pub[600:610, 0] = np.nan
    pub[610:615, 1] = np.inf
    sec = dataclasses.replace(_secrets(((src[:, 0], src[:, 1]),)), near=tree, near_tol=tol)
    ok = np.isfinite(pub).all(axis=1)
    dist, _ = tree.query(pub[ok], k=1)
    want = int((dist <= tol).sum())
    assert want >= 100  # the exact and half-tolerance moves at least
    assert leak_rules_module._pair_hits(pub[:, 0], pub[:, 1], sec) == want

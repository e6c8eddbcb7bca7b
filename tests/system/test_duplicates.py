"""Real registers hold exact copies and many records at one place: they release (issue 16).

Rows identical in every column are interchangeable, so the determinism check compares
decisions up to exchanging them; every other record keeps exactly its decisions, and the
release files stay byte-identical under any row order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main

ARGS = ["--k", "5", "--r-max", "300", "--unit", "gm_code", "--crs", "EPSG:28992"]


def _window(half_m: float = 1000.0) -> pd.DataFrame:
    """The dwellings of a square in Amersfoort (all columns), as the shared file has them."""
    from tests.conftest import data_file

    d = pd.read_csv(data_file("sdcspatial_dwellings", "dwellings.csv"))
    near = ((d.x - 155_500).abs() < half_m) & ((d.y - 463_500).abs() < half_m)
    return d[near].reset_index(drop=True)


@pytest.fixture(scope="module")
def with_copies(tmp_path_factory) -> tuple[Path, pd.DataFrame, int]:
    """The window plus 1 % of its dwellings again as exact copies (shuffled in)."""
    frame = _window()
    rng = np.random.default_rng(16)
    copies = frame.iloc[rng.choice(len(frame), len(frame) // 100, replace=False)]
    out = pd.concat([frame, copies], ignore_index=True)
    out = out.iloc[rng.permutation(len(out))].reset_index(drop=True)
    path = tmp_path_factory.mktemp("dup") / "dwellings_copies.csv"
    out.to_csv(path, index=False)
    return path, out, int(out.duplicated().sum())


@pytest.fixture(scope="module")
def copies_release(with_copies, tmp_path_factory) -> Path:
    path, _, _ = with_copies
    out = tmp_path_factory.mktemp("rel") / "out"
    assert main(["release", str(path), *ARGS, "--out", str(out)]) == 0
    return out


def _manifest(out: Path) -> dict:
    return json.loads((out / "release" / "manifest.json").read_text())


def test_exact_copies_release_verify_and_are_counted(with_copies, copies_release, capsys):
    path, frame, n_copies = with_copies
    assert n_copies > 0
    m = _manifest(copies_release)
    assert all(m["verification"].values()) and m["verification"]["deterministic"] is True
    assert m["duplicates"] == {"copies": n_copies, "removed": False, "subject_column": False}
    assert sum(m["counts"][d] for d in ("grouped", "merged", "generalised")) <= len(frame)
    notes = (copies_release / "release" / "RELEASE_NOTES.md").read_text()
    assert f"exact copies kept: {n_copies:,}" in notes
    assert "counted as a person of its own" in notes
    capsys.readouterr()
    assert main(["verify", str(copies_release), "--source", str(path)]) == 0


def test_drop_duplicates_removes_copies_first_and_counts_them(with_copies, tmp_path, capsys):
    path, frame, n_copies = with_copies
    out = tmp_path / "dropped"
    capsys.readouterr()
    assert main(["release", str(path), *ARGS, "--drop-duplicates", "--out", str(out)]) == 0
    assert f"{n_copies} records repeat an earlier record" in capsys.readouterr().err
    m = _manifest(out)
    assert m["duplicates"] == {"copies": n_copies, "removed": True, "subject_column": False}
    kept = len(frame) - n_copies
    assert sum(int(v) for d, v in m["counts"].items() if d != "synthetic") == kept
    assignment = pd.read_parquet(out / "audit" / "assignment.parquet")
    assert len(assignment) == kept
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert f"exact copies removed first: {n_copies:,} records" in notes
    report = (out / "release" / "report.html").read_text()
    assert f"{n_copies:,}, removed before anything else" in report
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(path)]) == 0
    assert "FAIL" not in capsys.readouterr().out


def _class_of_identical_rows(frame: pd.DataFrame) -> np.ndarray:
    return frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()


def test_permuted_rows_give_the_same_files_and_decisions_up_to_copies(
    with_copies, copies_release, tmp_path
):
    _, frame, _ = with_copies
    perm = np.random.default_rng(7).permutation(len(frame))
    shuffled = tmp_path / "shuffled.csv"
    frame.iloc[perm].to_csv(shuffled, index=False)
    out = tmp_path / "again"
    assert main(["release", str(shuffled), *ARGS, "--out", str(out)]) == 0

    def files(root: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((root / "release").iterdir())}

    a, b = files(copies_release), files(out)
    ma, mb = json.loads(a.pop("manifest.json")), json.loads(b.pop("manifest.json"))
    assert a == b
    ma.pop("input_sha256"), mb.pop("input_sha256")
    assert ma == mb
    # Audit rows: the shuffled run's source_row j is the original's row perm[j]. Every
    # class of identical rows holds the same multiset of decisions in both runs.
    cls = _class_of_identical_rows(frame)
    cols = ["label", "disposal", "group_id", "unit"]
    first = pd.read_parquet(copies_release / "audit" / "assignment.parquet")
    second = pd.read_parquet(out / "audit" / "assignment.parquet")
    rows_a = first["source_row"].to_numpy()
    rows_b = perm[second["source_row"].to_numpy()]  # as rows of the first input
    first = first.assign(cls=cls[rows_a])[["cls", *cols]].set_index(rows_a).sort_index()
    second = second.assign(cls=cls[rows_b])[["cls", *cols]].set_index(rows_b).sort_index()

    def canonical(t: pd.DataFrame) -> pd.DataFrame:
        t = t.astype({"group_id": "float64"}).astype({c: str for c in ("label", "disposal")})
        return t.sort_values(["cls", *cols]).reset_index(drop=True)

    pd.testing.assert_frame_equal(canonical(first), canonical(second))
    # ... and a record unlike any other keeps exactly its decisions.
    single = np.bincount(cls)[cls] == 1
    assert single.sum() > len(frame) // 2
    pd.testing.assert_frame_equal(first[single], second[single])


def test_many_records_clipped_onto_one_point_release_and_verify(tmp_path, capsys):
    # 50 records with nothing but a place and a unit, clipped onto the window's corner:
    # identical in every column, as clipping to a study area's border makes them.
    frame = _window(1500.0)[["x", "y", "gm_code"]].copy()
    frame.loc[frame.index[:50], ["x", "y"]] = [frame.x.min(), frame.y.min()]
    src = tmp_path / "clipped.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / "out"
    assert main(["release", str(src), *ARGS, "--out", str(out)]) == 0
    assert _manifest(out)["verification"]["deterministic"] is True
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(src)]) == 0


def test_benchmark_generator_releases(tmp_path):
    # The benchmarks' towns-and-scatter points: clipping piles records onto the corners.
    from benchmarks.bench_scale import SyntheticPartitions

    frame = SyntheticPartitions(20_000, 1).whole()
    assert frame.duplicated().sum() > 0
    src = tmp_path / "bench.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / "out"
    code = main(
        ["release", str(src), "--k", "5", "--r-max", "300", "--unit-grid", "20000",
         "--tau", "0.05", "--unit-cap", "1.0", "--local-metres", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert _manifest(out)["verification"]["deterministic"] is True


def test_records_at_one_place_are_ordered_by_their_times(tmp_path):
    # No subject, no attribute: 40 records at one place told apart only by their times.
    # Which of them share a group (and so a published time bin) must not follow the rows.
    rng = np.random.default_rng(5)
    n = 40
    frame = pd.DataFrame(
        {
            "x": np.r_[np.full(n, 155_000.0), 155_000.0 + rng.uniform(-200, 200, 200)].round(),
            "y": np.r_[np.full(n, 463_000.0), 463_000.0 + rng.uniform(-200, 200, 200)].round(),
            "t": 1.6e9 + 3600.0 * rng.permutation(n + 200),
        }
    )
    assert not frame.duplicated().any()
    outs = []
    for i, f in enumerate((frame, frame.sample(frac=1.0, random_state=2))):
        src = tmp_path / f"t{i}.csv"
        f.to_csv(src, index=False)
        out = tmp_path / f"out{i}"
        args = ["--k", "5", "--r-max", "300", "--crs", "EPSG:28992", "--time", "t",
                "--t-max", "315360000"]  # fmt: skip
        assert main(["release", str(src), *args, "--out", str(out)]) == 0
        outs.append(out)
    a, b = (
        {p.name: p.read_bytes() for p in sorted((o / "release").iterdir()) if p.suffix != ".json"}
        for o in outs
    )
    assert a == b


def test_partitioned_release_with_copies(with_copies, tmp_path):
    # The Dask path: the same rule for copies spread over partitions.
    pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    from geokanon.distributed import ParquetPartitions, release_partitions
    from geokanon.policy import OutlierPolicy

    _, frame, _ = with_copies
    frame = frame[((frame.x - 155_500).abs() < 600) & ((frame.y - 463_500).abs() < 600)]
    assert frame.duplicated().any()
    d = tmp_path / "parts"
    d.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(frame)), 3)):
        frame.iloc[idx].to_parquet(d / f"part-{i}.parquet", index=False)
    source = ParquetPartitions.from_path(d, unit="gm_code")
    policy = OutlierPolicy(k=5, r_max_m=300.0)
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        result = release_partitions(
            source, policy, tmp_path / "out", client=client, crs="EPSG:28992"
        )
    assert result.manifest["verification"]["deterministic"] is True


def test_two_copies_removed_are_no_hidden_figure_but_a_sentence_saying_so_is(tmp_path, capsys):
    """The notes and the report say how many exact copies were removed on reading, even 2
    (a count of input rows, not of people hidden): the release verifies. The same figure in a
    sentence of one's own with a verb of loss is read as a hidden figure (exit 4)."""
    from tests.release_fixtures import refresh_manifest

    frame = _window(700.0)
    out_rows = pd.concat([frame, frame.iloc[[3, 40]]], ignore_index=True)
    path = tmp_path / "two_copies.csv"
    out_rows.to_csv(path, index=False)
    out = tmp_path / "out"
    args = ["--quiet", "release", str(path), *ARGS, "--drop-duplicates", "--out", str(out)]
    assert main(args) == 0
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "exact copies removed first: 2 records" in notes
    assert "2, removed before anything else" in (out / "release" / "report.html").read_text()
    capsys.readouterr()
    assert main(["--quiet", "verify", str(out), "--source", str(path)]) == 0
    (out / "release" / "RELEASE_NOTES.md").write_text(notes + "\nThe north lost 2 records.\n")
    refresh_manifest(out)
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(path)]) == 4
    assert "FAIL report_safety" in capsys.readouterr().out

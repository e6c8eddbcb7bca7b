"""``records.csv`` is parsed once: ``no_leak``'s text read serves its row-by-row
comparison with ``records.parquet`` (``counts``) too.

Every report must be the one the verifier gives when ``counts`` reads the file itself
with ``records.parquet``'s column types, whatever was done to the file: numbers padded
with spaces (the typed read trims them), an integer written as a float (the typed read
alone catches it: the shared read gives up), a quoted empty text (not a null), a value
changed, a row dropped, the header changed.

Every edit here writes the file again with Python's ``csv`` module (text unquoted), so
even where the values agree ``counts`` fails, on the file's writing alone (the format
fixes pyarrow's): where they agree that is its only finding.
"""

from __future__ import annotations

import csv
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import geokanon.verify._records as records_module
from geokanon import OutlierPolicy, __version__
from geokanon.io.read import read_points
from geokanon.pipeline import run_core_on
from geokanon.release import ReleaseOptions, write_release
from geokanon.verify import verify_release

N = 3_000
CHECKS = ["k_subjects", "no_leak", "counts"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    rng = np.random.default_rng(5)
    towns = rng.uniform(0, 20_000, (8, 2))
    xy = towns[rng.integers(0, 8, N)] + rng.normal(0, 300, (N, 2))
    src = pd.DataFrame({"x": np.round(xy[:, 0], 2), "y": np.round(xy[:, 1], 2)})
    src["patient"] = [f"P{i:06d}" for i in rng.integers(0, int(N / 1.3), N)]
    src["visits"] = rng.integers(0, 9, N)
    src["flag"] = rng.integers(0, 2, N).astype(bool)
    src["ward"] = [f"w{i}" for i in rng.integers(0, 5, N)]
    tmp = tmp_path_factory.mktemp("csvtap")
    source = tmp / "source.csv"
    src.to_csv(source, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = read_points(source, x="x", y="y", subject="patient", unit_grid_m=10_000.0)
        policy = OutlierPolicy(k=5, r_max_m=300.0, unit_cap=1.0, tau=0.5)
        core = run_core_on(table, policy)
    out = tmp / "rel"
    opts = ReleaseOptions(local_metres=True, keep=("visits", "flag", "ward"))
    write_release(out, table, core, policy, opts, version=__version__)
    return out, source


Rows = list[list[str]]


def _edit(path: Path, change: Callable[[Rows], tuple[Rows, set[tuple[int, int]]]]) -> None:
    """Rewrite ``records.csv`` (header first) with ``change``; the (row, column) cells it
    names are quoted."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    rows, quoted = change(rows)
    with open(path, "w", newline="") as fh:
        for i, row in enumerate(rows):
            cells = []
            for j, cell in enumerate(row):
                if (i, j) in quoted or any(c in cell for c in ',"\n'):
                    cell = '"' + cell.replace('"', '""') + '"'
                cells.append(cell)
            fh.write(",".join(cells) + "\n")


def _col(rows: Rows, name: str) -> int:
    return rows[0].index(name)


def _pad(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    for name in ("x", "group_id", "visits"):
        j = _col(rows, name)
        for row in rows[1::7]:
            if row[j]:
                row[j] = f" {row[j]}\t"
    return rows, set()


def _int_as_float(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    j = _col(rows, "visits")
    for row in rows[1::5]:
        row[j] = f"{row[j]}.0"
    return rows, set()


def _half(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    rows[3][_col(rows, "visits")] = "2.5"
    return rows, set()


def _quoted_empty(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    j = _col(rows, "unit")
    at = next(i for i, row in enumerate(rows) if i and row[j] == "")
    return rows, {(at, j)}


def _quoted_number(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    j = _col(rows, "x")
    return rows, {(i, j) for i in range(1, len(rows), 3)}


def _changed(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    j = _col(rows, "ward")
    rows[-1][j] = "w9"
    return rows, set()


def _bool_word(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    j = _col(rows, "flag")
    rows[2][j] = "tRue"
    return rows, set()


def _short(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    return rows[:-1], set()


def _header(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    rows[0][_col(rows, "ward")] = "wards"
    return rows, set()


def _none(rows: Rows) -> tuple[Rows, set[tuple[int, int]]]:
    return rows, set()


@pytest.mark.parametrize(
    ("change", "tapped", "values_agree"),
    [
        (_none, True, True),
        (_pad, True, True),
        (_quoted_number, True, True),
        (_int_as_float, False, True),
        (_half, False, False),
        (_quoted_empty, True, False),
        (_changed, True, False),
        (_bool_word, False, False),
        (_short, True, False),
        (_header, True, False),
    ],
)
def test_records_csv_read_once_reports_as_the_typed_read(
    built: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Rows], tuple[Rows, set[tuple[int, int]]]],
    tapped: bool,
    values_agree: bool,
) -> None:
    root, source = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    _edit(rel / "release" / "records.csv", change)
    typed_reads: list[int] = []
    typed = records_module._CsvCompare._csv_sums

    def counted(self: records_module._CsvCompare, *args: object) -> object:
        typed_reads.append(1)
        return typed(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(records_module._CsvCompare, "_csv_sums", counted)
    shared = verify_release(rel, source=source, checks=CHECKS)
    assert bool(typed_reads) is not tapped  # the typed read only when the shared one gave up
    monkeypatch.setattr(records_module, "csv_tap", lambda rel, path: None)
    typed_reads.clear()
    alone = verify_release(rel, source=source, checks=CHECKS)
    assert typed_reads
    for name in CHECKS:
        assert shared[name].passed == alone[name].passed, name
        assert shared[name].detail == alone[name].detail, name
    counts = shared["counts"]
    assert not counts.passed
    # values that agree fail on the writing alone; values that differ on the values
    assert ("not as the format writes them" in counts.detail) is values_agree, counts.detail
    assert shared["no_leak"].passed, shared["no_leak"].detail

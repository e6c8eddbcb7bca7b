"""A kept date column (Parquet ``date32``, some ``9999-12-31``): released, verified, and its
values checked.

The verifier hashed temporal values by casting them to int64, which pyarrow does not do
for ``date32``, and read dates through pandas as Python objects: a release keeping a date
column was refused by its own verification (``k_subjects``, ``no_leak``, ``counts``
"cannot check"), whatever its values; then ``no_leak`` could not read a date beyond
``datetime64[ns]``'s range (2262), such as the ``9999-12-31`` registers write for "no end".
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main
from tests.release_fixtures import refresh_manifest


def _source(path: Path) -> Path:
    rng = np.random.default_rng(11)
    n = 400
    xy = rng.normal(0.0, 120.0, (n, 2)) + np.array([155_000.0, 463_000.0])
    start = datetime.date(2025, 1, 1)
    days = [start + datetime.timedelta(days=int(d)) for d in rng.integers(0, 400, n)]
    for i in range(5, n, 37):  # a register's "no end": beyond datetime64[ns]'s range
        days[i] = datetime.date(9999, 12, 31)
    frame = pd.DataFrame({"x": np.round(xy[:, 0], 1), "y": np.round(xy[:, 1], 1)})
    table = pa.Table.from_pandas(frame, preserve_index=False).append_column(
        "visit", pa.array(days, type=pa.date32())
    )
    mask = np.zeros(n, dtype=bool)
    mask[::9] = True  # some missing dates
    table = table.set_column(2, "visit", pa.array(days, type=pa.date32(), mask=mask))
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("dates")
    src = _source(base / "visits.parquet")
    out = base / "out"
    argv = ["--quiet", "release", str(src), "--crs", "EPSG:28992", "--k", "5",
            "--r-max", "150", "--tau", "0.2", "--unit-cap", "1", "--keep", "visit",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out, src


def test_a_kept_date_column_is_released_and_verifies(released, capsys):
    out, src = released
    records = pq.read_table(out / "release" / "records.parquet")
    assert records.schema.field("visit").type == pa.date32()
    assert records.column("visit").null_count > 0
    capsys.readouterr()
    assert main(["--quiet", "verify", str(out), "--source", str(src)]) == 0


def test_a_changed_date_fails_counts(released, tmp_path, capsys):
    out, src = released
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(out, root)
    # one published date a day later, in both records files alike
    path = root / "release" / "records.parquet"
    table = pq.read_table(path)
    days = table.column("visit").to_pylist()
    at = next(i for i, d in enumerate(days) if d is not None)
    days[at] = days[at] + datetime.timedelta(days=1)
    idx = table.schema.get_field_index("visit")
    table = table.set_column(idx, "visit", pa.array(days, type=pa.date32()))
    pq.write_table(table, path)
    csv = root / "release" / "records.csv"
    import pyarrow.csv as pacsv

    pacsv.write_csv(
        table.drop_columns(["geometry", "bbox"]), csv, pacsv.WriteOptions(quoting_style="needed")
    )
    refresh_manifest(root)
    capsys.readouterr()
    assert main(["--quiet", "verify", str(root), "--source", str(src)]) == 4
    said = capsys.readouterr().out
    assert "FAIL counts" in said

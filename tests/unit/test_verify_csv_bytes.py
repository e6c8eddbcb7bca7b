"""``records.csv`` byte for byte: the verifier's own writing of ``records.parquet``
(:func:`geokanon.verify._records._first_uncanonical_line`) against files written by
pyarrow, and against the same files written another way."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geokanon.verify._records import _first_uncanonical_line


def _pair(tmp_path: Path, table: pa.Table) -> tuple[Path, Path, list[str]]:
    pq.write_table(table, tmp_path / "records.parquet")
    pacsv.write_csv(table, tmp_path / "records.csv", pacsv.WriteOptions(quoting_style="needed"))
    return tmp_path / "records.csv", tmp_path / "records.parquet", table.column_names


def _runs_table() -> pa.Table:
    """Runs of equal rows beside rows that differ only where a CSV tells them apart
    (-0.0 and 0.0, NaN and a missing value, an empty text and a missing one)."""
    nan = float("nan")
    return pa.table(
        {
            "group_id": pa.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 4, 4, 5, 5], pa.int64()),
            "level": pa.array(["group"] * 7 + ["unit", "unit", None] + ["g"] * 4),
            "x": pa.array(
                [1.5, 1.5, 1.5, -0.0, 0.0, 0.0, -0.0, None, nan, 2.0, -0.0, 0.0, nan, None]
            ),
            "note": pa.array(["a", "a", "a", "", None, None, "", "b", "b", "c"] + ["d"] * 4),
            "n": pa.array([1, 1, 1, None, None, 2, 2, 3, 3, None, 7, 7, 7, 7], pa.int64()),
        }
    )


def test_files_written_by_pyarrow_pass(tmp_path):
    csv, parquet, names = _pair(tmp_path, _runs_table())
    assert _first_uncanonical_line(csv, parquet, names) is None


def test_a_text_holding_a_line_break_is_written_whole(tmp_path):
    table = _runs_table().set_column(3, "note", pa.array(["a\nb"] * 14))
    csv, parquet, names = _pair(tmp_path, table)
    assert _first_uncanonical_line(csv, parquet, names) is None


def test_a_table_without_rows_is_its_header(tmp_path):
    csv, parquet, names = _pair(tmp_path, _runs_table().slice(0, 0))
    assert _first_uncanonical_line(csv, parquet, names) is None
    csv.write_bytes(csv.read_bytes() + b"\n")
    assert _first_uncanonical_line(csv, parquet, names) == 2


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (b"1.5,", b"1.50,", 2),  # the same number, another form
        (b'"a",1', b"a,1", 2),  # an unquoted text
        (b"\n", b"\r\n", 1),  # a line end
        (b",-0,", b",0,", 5),  # -0.0 written as 0.0
        (b'"c",', b'"c" ,', 11),  # a space after a text
    ],
)
def test_another_writing_names_its_first_line(tmp_path, old, new, line):
    csv, parquet, names = _pair(tmp_path, _runs_table())
    data = csv.read_bytes()
    assert old in data
    csv.write_bytes(data.replace(old, new, 1))
    assert _first_uncanonical_line(csv, parquet, names) == line


def test_a_file_cut_short_or_longer_fails(tmp_path):
    csv, parquet, names = _pair(tmp_path, _runs_table())
    data = csv.read_bytes()
    csv.write_bytes(data[:-3])
    assert _first_uncanonical_line(csv, parquet, names) == 15
    csv.write_bytes(data + b"0")
    assert _first_uncanonical_line(csv, parquet, names) == 16


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1),
            st.sampled_from([0.0, -0.0, float("nan"), None, 1e300]),
            st.sampled_from(["a", None, 'q"uote']),
        ),
        max_size=40,
    ),
    st.integers(1, 4),
)
def test_runs_of_any_rows_pass_as_pyarrow_writes_them(tmp_path_factory, rows, rows_per_batch):
    """Whatever the runs, the verifier's writing (first row of each run, repeated) is
    pyarrow's writing of every row; batches cut anywhere."""
    import geokanon.verify._records as records

    tmp = tmp_path_factory.mktemp("bytes")
    table = pa.table(
        {
            "group_id": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.float64()),
            "tag": pa.array([r[2] for r in rows], pa.large_string()),
        }
    )
    csv, parquet, names = _pair(tmp, table)
    old = records._CANONICAL_ROWS
    records._CANONICAL_ROWS = rows_per_batch
    try:
        assert _first_uncanonical_line(csv, parquet, names) is None
    finally:
        records._CANONICAL_ROWS = old

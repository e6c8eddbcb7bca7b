"""One reader for both layouts: a source partition and its audit part read as a single file's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from geokanon.verify._reader import ReleaseReader, Source, frame_source, subject_ids


def test_subject_ids_merges_spellings_and_counts_them():
    ids = pd.Series(
        ["P001", " p001", "P002", "P001", "\uff30\uff10\uff10\uff12", "7"], dtype=object
    )
    s = subject_ids(ids)
    # P001 / " p001" are one subject; P002 and its full-width spelling are one
    assert s.codes.tolist() == [0, 0, 1, 0, 1, 2]
    assert s.merged == 2
    assert s.present() == frozenset({"P001", "p001", "P002", "\uff30\uff10\uff10\uff12", "7"})


def test_subject_ids_reads_each_value_as_its_text():
    # an integer 7 and the text "7" are one id as written; a missing id reads "nan" as a
    # subject but is no id no_leak looks for
    ids = pd.Series([7, "7", np.nan, "8"], dtype=object)
    s = subject_ids(ids)
    assert s.codes[0] == s.codes[1]
    assert s.written.tolist() == ["7", "nan", "8"]
    assert s.merged == 0
    assert pd.isna(s.row_texts[2])
    assert s.present() == frozenset({"7", "8"})
    assert len({s.codes[0], s.codes[2], s.codes[3]}) == 3


def test_a_partition_is_read_as_a_single_file_source():
    frame = pd.DataFrame(
        {
            "x": [1.5, 2.5, 3.5],
            "y": [4.0, 5.0, 6.0],
            "subject": ["a", "A ", "b"],
            "unit": [10, 10, 20],
        }
    )
    src = frame_source(
        frame, xcol="x", ycol="y", scol="subject", ucol="unit", tcol=None, in_crs=None,
        output_crs=None, working_crs=None,
    )  # fmt: skip
    assert src.n_rows == 3
    assert src.x is not None and src.x.tolist() == [1.5, 2.5, 3.5]
    assert src.x_work is not None  # same CRS, not lon/lat: the working coordinates too
    assert src.subjects is not None and src.subjects.tolist() == [0, 0, 1]
    assert src.subject_ids_merged == 1
    assert src.units is not None and src.units.tolist() == ["10", "10", "20"]
    assert src.subject_table is not None and src.subject_table.keys.tolist() == ["a", "b"]


@pytest.mark.parametrize("label", ["assignment", "audit part 3"])
def test_an_audit_part_is_read_by_the_single_file_reader(tmp_path, label):
    (tmp_path / "release").mkdir()
    (tmp_path / "audit").mkdir()
    part = tmp_path / "audit" / "part.parquet"
    pd.DataFrame(
        {
            "source_row": [10, 11, 12],
            "disposal": ["grouped", "suppressed", "generalised"],
            "group_id": pd.array([0, None, None], dtype="Int64"),
            "class_id": pd.array([None, None, 4], dtype="Int64"),
            "unit": ["u", "u", "v"],
            "subject": [0, 1, 2],
            "x_m": [1.0, 2.0, 3.0],
            "y_m": [4.0, 5.0, 6.0],
        }
    ).to_parquet(part, index=False)
    view = ReleaseReader.of_source_partition(tmp_path, Source(n_rows=3), part, label)
    assert view.gid.tolist() == [0, -1, -1]
    assert view.cid.tolist() == [-1, -1, 4]
    assert view.is_disposal("suppressed").tolist() == [False, True, False]
    codes, names = view.unit_codes
    assert names[codes].tolist() == ["u", "u", "v"]
    t = pd.read_parquet(part)
    t["group_id"] = t["group_id"].astype("string")
    t.loc[0, "group_id"] = "seven"
    t.to_parquet(part, index=False)
    view = ReleaseReader.of_source_partition(tmp_path, Source(n_rows=3), part, label)
    with pytest.raises(Exception, match=f"{label} group_id is not an integer column"):
        _ = view.gid

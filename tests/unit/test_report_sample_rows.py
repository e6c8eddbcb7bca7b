"""The partitioned report's sampled groups are read a row group at a time
(``release_tiles._rows_of``): the same rows as reading the whole file and taking them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from geokanon.release_tiles import _rows_of


def test_rows_of_equals_whole_read_then_take(tmp_path):
    rng = np.random.default_rng(0)
    n = 10_000
    frame = pd.DataFrame(
        {
            "group_id": np.arange(n),
            "x": rng.uniform(0, 1e5, n),
            "unit": rng.integers(0, 50, n).astype(str),
            "bbox": [{"xmin": float(i), "ymin": 0.0} for i in range(n)],
        }
    )
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=777)
    for rows in (
        np.arange(0, n, 7),
        np.array([0, 776, 777, 778, n - 1]),
        np.zeros(0, np.int64),
        np.arange(n),
    ):
        got = _rows_of(path, rows).to_pandas()
        want = pd.read_parquet(path).iloc[rows].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)

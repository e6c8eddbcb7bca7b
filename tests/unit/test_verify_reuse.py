"""A second verification of one release re-uses what the first derived (issue 17, item 5).

The release writer verifies twice: every check, then (once the report is written) the
checks that read the report. The second run takes over the first run's decoded audit,
the source as read and the sorted values ``no_leak`` searches for, instead of deriving
them again; it never re-uses them when the audit or the source changed.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from geokanon.io import table_from_frame
from geokanon.pipeline import release_points
from geokanon.policy import OutlierPolicy
from geokanon.release import ReleaseOptions
from geokanon.report.html import RECHECKED
from geokanon.verify import _reader, format_report, no_leak, verify_release
from tests.release_fixtures import edit_parquet, minimal_scene, write_release


def _forbid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the source again or building no_leak's secrets again fails the test."""

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("derived again")

    monkeypatch.setattr(_reader, "_load_source", never)
    monkeypatch.setattr(no_leak, "_secrets", never)


def test_the_second_run_takes_over_the_source_audit_and_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = write_release(tmp_path / "out", minimal_scene())
    first = verify_release(w.root, source=w.source)
    assert first.passed, format_report(first)
    _forbid(monkeypatch)
    again = verify_release(w.root, source=w.source, checks=RECHECKED, reuse=first)
    assert again.passed, format_report(again)
    assert [c.name for c in again.checks] == [c for c in first.as_dict() if c in RECHECKED]
    # the same figures as a run that derives everything itself
    monkeypatch.undo()
    fresh = verify_release(w.root, source=w.source, checks=RECHECKED)
    assert format_report(again) == format_report(fresh)


def test_a_changed_audit_or_another_source_is_derived_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = write_release(tmp_path / "out", minimal_scene())
    first = verify_release(w.root)  # subjects from the audit
    assert first.passed, format_report(first)

    def one_subject(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["group_id"] == 0, "subject"] = f.loc[f["group_id"] == 0, "subject"].iloc[0]
        return f

    edit_parquet(w.root, "assignment.parquet", one_subject)
    # the audit's file changed: its columns are decoded again, and the group fails
    again = verify_release(w.root, checks=["k_subjects"], reuse=first)
    assert not again.passed, format_report(again)
    # another source (a file the first run did not read) is read, not taken over
    first = verify_release(w.root, source=w.source, checks=["manifest"])
    copy = tmp_path / "copy.csv"
    copy.write_bytes(Path(w.source).read_bytes())
    _forbid(monkeypatch)
    with pytest.raises(AssertionError, match="derived again"):
        verify_release(w.root, source=copy, checks=["manifest"], reuse=first)


def test_the_release_writer_reads_the_source_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    load = _reader._load_source

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return load(*args, **kwargs)

    monkeypatch.setattr(_reader, "_load_source", counted)
    rng = np.random.default_rng(3)
    n = 600
    frame = pd.DataFrame(
        {
            "x": 431_000.0 + rng.uniform(0, 1500, n),
            "y": 5_210_000.0 + rng.uniform(0, 1500, n),
            "pid": [f"P{i // 2:05d}" for i in range(n)],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, subject="pid", unit_grid_m=1000.0, crs="EPSG:32631")
        res = release_points(
            table, OutlierPolicy(k=3, r_max_m=60.0), tmp_path / "out", ReleaseOptions()
        )
    assert all(res.manifest["verification"].values())
    assert len(calls) == 1  # the check after the report re-used the first run's source

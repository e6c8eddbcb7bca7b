"""A kept column that repeats records' times is refused before any work, naming the column.

A release publishes times only in bins (``--time``); a kept column holding a record's time
(a copy of the time column, an end time that sometimes equals another record's start) is
refused by the verifier's ``no_leak``. The release found that out only at the end, after
the whole core and the writing, and said no more than "failed the independent checks
['no_leak']". Now ``--keep`` is checked against the records' times first, in every form
the verifier reads a time in (timestamps with and without a zone, dates, epoch numbers,
ISO text with and without an offset, and the wall clock of a ``--timezone``), and the
verifier's own refusal names what it found.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import geokanon.release
from geokanon.cli import main

START = pd.Timestamp("2025-03-01 00:00:00")


def _frame(form: str, *, repeat: bool) -> pd.DataFrame:
    """Records at whole minutes; ``kept`` repeats some of their times (``repeat``) or
    lies 30 s off every one of them, written in ``form``."""
    rng = np.random.default_rng(5)
    n = 300
    xy = rng.normal(0.0, 120.0, (n, 2)) + np.array([155_000.0, 463_000.0])
    t = pd.Series(START + pd.to_timedelta(rng.integers(0, 20 * 24 * 60, n) * 60, unit="s"))
    t = t.where(np.arange(n) % 50 != 7, START)  # some records at midnight
    kept = t + pd.Timedelta(seconds=30)
    if repeat:
        kept = kept.where(np.arange(n) % 10 != 3, t.to_numpy()[::-1])  # other records' times
    frame = pd.DataFrame({"x": np.round(xy[:, 0], 1), "y": np.round(xy[:, 1], 1), "t": t})
    if form == "naive":
        frame["kept"] = kept
    elif form == "utc":
        frame["kept"] = kept.dt.tz_localize("UTC")
    elif form == "date":  # a record at midnight is that date's time
        frame["kept"] = [d.date() if repeat and d == START else datetime.date(2031, 1, 1)
                         for d in t]  # fmt: skip
    elif form == "epoch":
        frame["kept"] = (kept - pd.Timestamp("1970-01-01")).dt.total_seconds()
    elif form == "text":
        frame["kept"] = kept.dt.strftime("%Y-%m-%dT%H:%M:%S")
    elif form == "offset":
        frame["kept"] = kept.dt.strftime("%Y-%m-%dT%H:%M:%S+00:00")
    else:
        raise AssertionError(form)
    return frame


def _release(frame: pd.DataFrame, base: Path, zone: str, suffix: str) -> list[str]:
    src = base / f"src{suffix}"
    if suffix == ".csv":
        frame.to_csv(src, index=False)
    else:
        frame.to_parquet(src)
    return ["--quiet", "release", str(src), "--crs", "EPSG:28992", "--k", "5",
            "--r-max", "150", "--tau", "0.2", "--unit-cap", "1", "--time", "t",
            "--t-max", "86400", "--timezone", zone, "--keep", "kept",
            "--out", str(base / "out")]  # fmt: skip


FORMS = [
    ("naive", ".parquet", "UTC"),
    ("utc", ".parquet", "UTC"),
    ("date", ".parquet", "UTC"),
    ("epoch", ".parquet", "UTC"),
    ("text", ".csv", "UTC"),
    ("offset", ".csv", "UTC"),
]


@pytest.mark.parametrize(("form", "suffix", "zone"), FORMS)
def test_a_kept_copy_of_record_times_is_refused_before_any_work(
    tmp_path, capsys, form, suffix, zone
):
    argv = _release(_frame(form, repeat=True), tmp_path, zone, suffix)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--keep 'kept' holds the time of a record" in err
    assert "Drop 'kept' from --keep" in err
    assert "2025-" not in err  # no time of a record in the message
    assert not (tmp_path / "out").exists()


def test_the_wall_clock_of_a_timezone_is_a_record_time(tmp_path, capsys):
    """Times written without an offset and read in Europe/Amsterdam are published by a
    kept copy as their wall-clock readings: an hour off their instants, refused all the
    same."""
    frame = _frame("naive", repeat=False)
    frame["kept"] = frame["t"]  # the wall clock as written
    argv = _release(frame, tmp_path, "Europe/Amsterdam", ".parquet")
    assert main(argv) == 2
    assert "holds the time of a record (as the --time column gives it) in 300 rows" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(("form", "suffix", "zone"), [FORMS[0], FORMS[3], FORMS[5]])
def test_kept_times_off_every_record_time_are_released(tmp_path, capsys, form, suffix, zone):
    argv = _release(_frame(form, repeat=False), tmp_path, zone, suffix)
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("form", "suffix", "zone"), [FORMS[0], FORMS[2], FORMS[4]])
def test_without_the_check_the_verifier_refuses_and_says_where(
    tmp_path, capsys, monkeypatch, form, suffix, zone
):
    """The check refuses what the verifier would: switched off, the release is refused by
    ``no_leak``, whose refusal names the column (and no value), and nothing is written."""
    monkeypatch.setattr(geokanon.release, "_kept_record_times", lambda *_a: 0)
    argv = _release(_frame(form, repeat=True), tmp_path, zone, suffix)
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "failed the independent checks ['no_leak']" in err
    assert "column 'kept'" in err
    assert "2025-" not in err
    assert not (tmp_path / "out").exists()


def test_a_dry_run_refuses_it_too(tmp_path, capsys):
    argv = _release(_frame("naive", repeat=True), tmp_path, "UTC", ".parquet")
    assert main([*argv, "--dry-run"]) == 2
    assert "--keep 'kept' holds the time of a record" in capsys.readouterr().err

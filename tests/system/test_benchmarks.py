"""Benchmarks are not tests; CI runs each at a toy size only to prove it still works."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

CASES = {
    "classify": (["bench_classify.py", "--quick"], "geokanon classify"),
    "classify_cli": (
        ["bench_classify.py", "--quick", "--cli", "--repeat", "1"],
        "geokanon classify --subject (CLI)",
    ),
    "grouping": (["bench_grouping.py", "--quick"], "mean displacement"),
    "sweep": (["bench_sweep.py", "--n", "20000", "--repeat", "1"], "every sweep cell equals"),
    "scale": (["bench_scale.py", "--quick"], "release core"),
    "scale_alternating": (
        ["bench_scale.py", "--quick", "--single", "", "--core", "", "--dask", "", "--repeat", "2"],
        "Dask / one machine by round",
    ),
    "release": (["bench_release.py", "--quick"], "write_release total"),
    "release_lonlat": (["bench_release.py", "--quick", "--lonlat"], "lon/lat yes"),
    "release_baseline": (
        ["bench_release.py", "--quick", "--baseline-src", "src"],
        "ratio this tree / src",
    ),
    "write_report": (["bench_write_report.py", "--quick", "--repeat", "1"], "report s"),
    "crowded": (["bench_crowded.py", "--sizes", "3000"], "after s per 1e5"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_runs_at_toy_size(name):
    if name.startswith("scale"):
        pytest.importorskip("distributed", reason="bench_scale needs the dask extra")
    args, expected = CASES[name]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout

"""ruff and mypy are part of the suite, so CI and the README command enforce them."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "cmd",
    [
        ["ruff", "check", "src", "tests", "benchmarks"],
        ["ruff", "format", "--check", "src", "tests", "benchmarks"],
        [sys.executable, "-m", "mypy", "src"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_is_clean(cmd):
    if cmd[0] == "ruff" and shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

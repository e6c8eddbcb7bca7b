"""Shared fixtures: the public datasets in ../shared/data (skipped cleanly when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GEOKANON_DATA", ROOT.parent / "shared" / "data"))


def data_file(*parts: str) -> Path:
    """Path of a shared dataset file; skips the test with a clear message when it is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"shared dataset {'/'.join(parts)} not found under {DATA} "
            "(set GEOKANON_DATA to the shared/data folder to run this test)"
        )
    return path


@pytest.fixture
def dwellings_csv() -> Path:
    return data_file("sdcspatial_dwellings", "dwellings.csv")


@pytest.fixture
def charleston_csv() -> Path:
    return data_file("aquadtree_charleston", "population_points.csv")

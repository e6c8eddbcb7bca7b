"""Shared fixtures: the public datasets in ../shared/data.

Every test finds the shared data through :func:`data_file`: under ``GEOKANON_DATA``
(a relative path is taken from the checkout), else ``../shared/data`` beside the
checkout. A missing dataset skips the test with a message naming the path, except
under CI (``CI=true``, as ``.ci/run`` sets it), where it fails the test: CI must
never pass by skipping the tests on real data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    """The shared data: ``GEOKANON_DATA`` (relative: from the checkout), else ../shared/data."""
    given = os.environ.get("GEOKANON_DATA")
    if not given:
        return ROOT.parent / "shared" / "data"
    path = Path(given).expanduser()
    return path if path.is_absolute() else ROOT / path


def in_ci() -> bool:
    """Whether the suite runs under CI (``CI`` set to true, 1 or yes, as CI services do)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


#: The shared data folder as resolved when the suite starts.
DATA = data_root()


def data_file(*parts: str) -> Path:
    """Path of a shared dataset file.

    When it is absent the test is skipped with a message naming the path, or, under CI
    (``CI=true``), failed: a CI run must not pass by skipping the tests on real data.
    """
    root = data_root()
    path = root.joinpath(*parts)
    if not path.exists():
        msg = (
            f"shared dataset {'/'.join(parts)} not found: {path} does not exist "
            f"(GEOKANON_DATA={os.environ.get('GEOKANON_DATA', '<unset>')}; set it to the "
            "shared/data folder, or put shared/data beside the checkout)"
        )
        if in_ci():
            pytest.fail(f"{msg}; CI=true, so a missing dataset fails the run", pytrace=False)
        pytest.skip(msg)
    return path


@pytest.fixture
def dwellings_csv() -> Path:
    return data_file("sdcspatial_dwellings", "dwellings.csv")


@pytest.fixture
def charleston_csv() -> Path:
    return data_file("aquadtree_charleston", "population_points.csv")


@pytest.fixture
def first_grouping_reuse(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each group pass of the Dask core decided: whether it took the first
    classification's tile groupings (``geokanon.distributed._made_with``), in call order."""
    import geokanon.distributed as D

    reused: list[bool] = []
    made_with = D._made_with

    def spy(*args: object) -> bool:
        reused.append(made_with(*args))
        return reused[-1]

    monkeypatch.setattr(D, "_made_with", spy)
    return reused

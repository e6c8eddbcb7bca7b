"""A source column named like a column the release format gives itself (a subject column
``owner``, as in release.gpkg's ``layer_styles``; an id column ``fid``, as in every
GeoPackage layer) is no leak by its name: ``geokanon verify`` passes such a release."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from geokanon.cli import main
from tests.conftest import data_file


@pytest.fixture(scope="module")
def register(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = data_file("sdcspatial_dwellings", "dwellings.csv")
    d = pd.read_csv(path).head(3000)
    d["owner"] = [f"P{i % 1400:04d}" for i in range(len(d))]
    d = d.rename(columns={"point_id": "fid"})
    out = tmp_path_factory.mktemp("names") / "register.csv"
    d.to_csv(out, index=False)
    return out


def test_subject_named_owner_and_id_named_fid_verify(register: Path, tmp_path: Path) -> None:
    opts = ["--crs", "EPSG:28992", "--subject", "owner", "--unit", "gm_code", "--k", "5",
            "--r-max", "300", "--unit-cap", "1.0"]  # fmt: skip
    out = tmp_path / "out"
    assert main(["release", str(register), *opts, "--out", str(out)]) == 0
    assert (out / "release" / "release.gpkg").is_file()
    assert main(["verify", str(out), "--source", str(register), *opts]) == 0

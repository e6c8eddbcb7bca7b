"""Issue 16, item 8: the smaller things seen on the way, each with the message it needs.

``--dry-run`` checks ``--keep``; an unterminated CSV quote names its row; shares given
as percentages say that 1 % is 0.01; ``--r-max`` below 1 m gives the kilometre reading
first; "did you mean" prefers a name that differs only in case (``ZIP`` for ``zip``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import geopandas as gpd
import pandas as pd
import pytest
import shapely

from geokanon.cli import main
from geokanon.errors import InputError
from geokanon.io import check_r_max, read_points, table_from_frame
from geokanon.policy import OutlierPolicy

RD = {"x": [155_000.0 + 40 * i for i in range(12)], "y": [463_000.0 + 30 * i for i in range(12)]}


def _csv(tmp_path: Path, **extra: list[str]) -> Path:
    frame = pd.DataFrame({**RD, "person": [f"P{i:03d}" for i in range(12)], **extra})
    path = tmp_path / "points.csv"
    frame.to_csv(path, index=False)
    return path


def _read(path: Path, **kw) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read_points(path, crs="EPSG:28992", **kw)


# ---- --dry-run checks the --keep names ------------------------------------------------


def test_dry_run_refuses_keep_names_that_are_not_columns(tmp_path, capsys):
    src = _csv(tmp_path, age=[str(30 + i) for i in range(12)])
    args = ["release", str(src), "--crs", "EPSG:28992", "--k", "2", "--r-max", "100"]
    out = tmp_path / "out"
    assert main([*args, "--keep", "age", "--out", str(out), "--dry-run"]) == 0
    capsys.readouterr()
    assert main([*args, "--keep", "age,agee", "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--keep" in err and "'agee'" in err and "did you mean 'age'" in err
    assert not out.exists()


# ---- did you mean: a case-only difference wins -----------------------------------------


def test_did_you_mean_prefers_the_case_only_match_for_unit(tmp_path):
    src = _csv(tmp_path, ZIP=["3811"] * 12, zipcode=["3811AB"] * 12)
    with pytest.raises(InputError, match="did you mean 'ZIP'"):
        _read(src, unit="zip")


def test_did_you_mean_prefers_the_case_only_match_for_unit_id(tmp_path):
    src = _csv(tmp_path)
    poly = gpd.GeoDataFrame(
        {"ZIP": ["3811"], "zipcode": ["3811AB"]},
        geometry=[shapely.box(154_000, 462_000, 157_000, 465_000)],
        crs="EPSG:28992",
    )
    units = tmp_path / "zips.gpkg"
    poly.to_file(units)
    with pytest.raises(InputError, match="did you mean 'ZIP'") as info:
        _read(src, units=units, unit_id="zip")
    assert "zipcode" not in str(info.value).split("?")[0]


def test_did_you_mean_for_keep(tmp_path, capsys):
    src = _csv(tmp_path, ZIP=["3811"] * 12, zipcode=["3811AB"] * 12)
    args = ["release", str(src), "--crs", "EPSG:28992", "--k", "2", "--r-max", "100"]
    assert main([*args, "--keep", "zip", "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert "did you mean 'ZIP' for 'zip'" in capsys.readouterr().err


# ---- an unterminated quote names its row ----------------------------------------------


@pytest.mark.parametrize("record", [1, 7, 12])
def test_unterminated_quote_names_the_row(tmp_path, record):
    lines = ["x,y,person"] + [f"{155_000 + 40 * i},{463_000 + 30 * i},P{i:03d}" for i in range(12)]
    lines[record] = lines[record].rsplit(",", 1)[0] + ',"P-broken'
    path = tmp_path / "quote.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as info:
        _read(path, subject="person", chunksize=4)
    msg = str(info.value)
    assert f"row {record}," in msg and f"line {record + 1} of the file" in msg
    assert "quote" in msg and "P-broken" not in msg


# ---- shares are not percentages -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [("tau", 1, "1 % is 0.01"), ("unit_cap", 10, "10 % is 0.1"), ("tau", 5.0, "5 % is 0.05")],
)
def test_share_given_as_a_percentage_says_so(name, value, hint):
    with pytest.raises(InputError, match=f"{name} must be a share") as info:
        OutlierPolicy(k=5, r_max_m=100.0, **{name: value})
    assert hint in str(info.value)


def test_share_cli_message(tmp_path, capsys):
    src = _csv(tmp_path)
    args = ["classify", str(src), "--crs", "EPSG:28992", "--k", "2", "--r-max", "100"]
    assert main([*args, "--tau", "1"]) == 2
    assert "1 % is 0.01" in capsys.readouterr().err
    assert main([*args, "--unit-cap", "10"]) == 2
    assert "10 % is 0.1" in capsys.readouterr().err


def test_share_out_of_range_but_not_a_percentage_has_no_hint():
    with pytest.raises(InputError) as info:
        OutlierPolicy(k=5, r_max_m=100.0, tau=-0.5)
    assert "%" not in str(info.value)


# ---- --r-max below 1: the kilometre reading first -------------------------------------


def test_r_max_below_one_reads_kilometres_first():
    t = table_from_frame(pd.DataFrame({"lon": [116.30, 116.31], "lat": [39.9, 39.91]}))
    with pytest.raises(InputError) as info:
        check_r_max(t, 0.5)
    msg = str(info.value)
    assert "0.5 km is 500 m" in msg and "55,598 m" in msg
    assert msg.index("km is") < msg.index("degrees")
    assert msg.index("--r-max 500 ") < msg.index("--r-max 55598")

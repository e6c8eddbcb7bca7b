"""Mutants of a valid release that only a row-by-row check can catch (issue 17, item 1).

A small real release (subjects, times, two kept columns, a generalised class) is written
once with the command line; each test copies it, plants one mutant, recomputes the
manifest's sha256 (so only the semantic checks can tell), and expects ``geokanon verify``
to exit 4 naming the check that owns the broken rule. Two controls (the copy untouched,
and ``records.csv`` rewritten by pandas with the same values) must still pass.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import shapely

from geokanon.cli import main
from tests.release_fixtures import edit_csv, edit_manifest, refresh_manifest

K = 5
R_MAX = 300.0
DAY_S = 86_400


def _source(path: Path) -> Path:
    """Two towns and a thin rural unit; repeat subjects, times over three days, two
    attributes (an integer and a float, some of it missing, -inf, -0.0 or 0.0) to keep."""
    rng = np.random.default_rng(17)
    parts = []
    for cx, cy, unit, n, sd in (
        (155_000.0, 463_000.0, "GM1", 600, 150.0),
        (160_000.0, 465_000.0, "GM2", 400, 120.0),
        (152_000.0, 458_000.0, "GM3", 60, 900.0),
    ):
        xy = rng.normal(0.0, sd, (n, 2)) + np.array([cx, cy])
        parts.append(
            pd.DataFrame({"x": np.round(xy[:, 0], 2), "y": np.round(xy[:, 1], 2), "unit": unit})
        )
    frame = pd.concat(parts, ignore_index=True)
    n = len(frame)
    frame["subject"] = [f"P{s:05d}" for s in rng.integers(0, int(n * 0.8), n)]
    start = np.datetime64("2024-03-01T00:00:00")
    frame["t"] = [f"{start + np.timedelta64(int(s), 's')}Z" for s in rng.integers(0, 3 * DAY_S, n)]
    frame["age"] = rng.integers(1, 95, n)
    frame["score"] = np.round(rng.normal(50.0, 10.0, n), 1)
    # missing, minus-infinite and signed-zero scores: the release of such a register must
    # verify (counts checks the rows' order within a group: missing, -inf, -0.0, 0.0, ...)
    pick = rng.random(n)
    frame.loc[pick < 0.04, "score"] = np.nan
    frame.loc[(pick >= 0.04) & (pick < 0.08), "score"] = -np.inf
    frame.loc[(pick >= 0.08) & (pick < 0.14), "score"] = -0.0
    frame.loc[(pick >= 0.14) & (pick < 0.20), "score"] = 0.0
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("mutants")
    src = _source(base / "source.csv")
    out = base / "out"
    argv = ["--quiet", "release", str(src), "--crs", "EPSG:28992", "--subject", "subject",
            "--unit", "unit", "--time", "t", "--t-max", str(DAY_S), "--k", str(K),
            "--r-max", str(R_MAX), "--tau", "0.2", "--unit-cap", "0.5",
            "--keep", "age,score", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out, src


@pytest.fixture
def release(built: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    out, src = built
    root = tmp_path / "copy"
    shutil.copytree(out, root)
    return root, src


def _verify(capsys: pytest.CaptureFixture[str], root: Path, src: Path) -> tuple[int, set[str]]:
    code, failed = _verify_details(capsys, root, src)
    return code, set(failed)


def _verify_details(
    capsys: pytest.CaptureFixture[str], root: Path, src: Path
) -> tuple[int, dict[str, str]]:
    """``geokanon verify``'s exit code and, per failed check, its detail line."""
    capsys.readouterr()
    code = main(["--quiet", "verify", str(root), "--source", str(src)])
    lines = capsys.readouterr().out.splitlines()
    failed = {}
    for ln in lines:
        if ln.startswith("FAIL "):
            _, name, detail = ln.split(maxsplit=2)
            failed[name] = detail
    return code, failed


# ---- editing the records files as a mutant would (the manifest's sha256 refreshed) ----


def _frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper=pd.ArrowDtype)


def _table(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False).cast(schema)


Edit = Callable[[pd.DataFrame], pd.DataFrame]


def _edit_parquet(root: Path, change: Edit) -> None:
    """``records.parquet`` through ``change`` (geometry and GeoParquet bbox redrawn from
    x, y; metadata kept)."""
    path = root / "release" / "records.parquet"
    table = pq.read_table(path)
    schema = table.schema
    drawn = [c for c in ("geometry", "bbox") if c in schema.names]
    body = table.drop_columns(drawn)
    new = _table(change(_frame(body)), body.schema)
    x = new.column("x").to_numpy(zero_copy_only=False)
    y = new.column("y").to_numpy(zero_copy_only=False)
    missing = np.isnan(x)
    points = zip(x, y, missing, strict=True)
    geom = [None if m else shapely.to_wkb(shapely.Point(px, py)) for px, py, m in points]
    new = new.append_column("geometry", pa.array(geom, type=pa.binary()))
    if "bbox" in drawn:
        ax, ay = pa.array(x, mask=missing), pa.array(y, mask=missing)
        box = pa.StructArray.from_arrays(
            [ax, ay, ax, ay], names=["xmin", "ymin", "xmax", "ymax"], mask=pa.array(missing)
        )
        new = new.append_column("bbox", box)
    pq.write_table(new.select(schema.names).cast(schema), path, compression="zstd")
    refresh_manifest(root)


def _edit_csv(root: Path, change: Edit) -> None:
    """``records.csv`` through ``change``, read with the Parquet file's column types and
    written back as the writer writes it (pyarrow, text quoted)."""
    path = root / "release" / "records.csv"
    schema = pq.read_schema(root / "release" / "records.parquet")
    types = {f.name: f.type for f in schema if f.name != "geometry"}
    table = pacsv.read_csv(
        path,
        convert_options=pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )
    new = _table(change(_frame(table)), table.schema)
    pacsv.write_csv(new, path, pacsv.WriteOptions(quoting_style="needed"))
    refresh_manifest(root)


def _edit_both(root: Path, change: Edit) -> None:
    _edit_parquet(root, change)
    _edit_csv(root, change)


def _interleave(frame: pd.DataFrame) -> pd.DataFrame:
    """One row of group 1 moved between two rows of group 0 (the same rows, another
    order): the order of rows a writer keeping the register's order would give."""
    g0 = frame.index[frame["group_id"] == 0]
    g1 = frame.index[frame["group_id"] == 1]
    assert len(g0) >= 2 and len(g1) >= 1
    order = [i for i in frame.index if i != g1[0]]
    at = order.index(g0[0]) + 1
    order.insert(at, g1[0])
    return frame.loc[order].reset_index(drop=True)


def _reverse_within_group(frame: pd.DataFrame) -> pd.DataFrame:
    """Group 0's rows (the same rows, in place) in the reverse order: by time bin and kept
    values going down, as a writer keeping the register's order within a group might."""
    g0 = frame.index[frame["group_id"] == 0]
    cols = ["time_bin", "age", "score"]
    assert len(g0) >= 2 and len(frame.loc[g0, cols].drop_duplicates()) >= 2
    order = list(frame.index)
    order[g0[0] : g0[-1] + 1] = list(g0[::-1])
    return frame.loc[order].reset_index(drop=True)


def _move_group(frame: pd.DataFrame) -> pd.DataFrame:
    """Group 0's representative, 400 m east, on its rows only."""
    rows = frame["group_id"] == 0
    assert rows.sum() >= K
    frame.loc[rows, "x"] = frame.loc[rows, "x"] + 400.0
    return frame


def _change_one_kept_value(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[frame.index[3], "age"] = frame["age"].iloc[3] + 1
    return frame


def _swap_between_groups(frame: pd.DataFrame) -> pd.DataFrame:
    """One row of group 0 and one of group 1 exchange their kept values and time bins:
    each record sits in the other's group, the group sizes stay."""
    a = frame.index[frame["group_id"] == 0][0]
    b = frame.index[frame["group_id"] == 1][-1]
    cols = ["time_bin", "age", "score"]
    assert tuple(frame.loc[a, cols]) != tuple(frame.loc[b, cols])
    va, vb = frame.loc[a, cols].copy(), frame.loc[b, cols].copy()
    frame.loc[a, cols] = vb.to_numpy()
    frame.loc[b, cols] = va.to_numpy()
    return frame


def _class_rows(frame: pd.DataFrame) -> pd.Series:
    rows = frame["class_id"].notna()
    assert rows.sum() >= K
    return rows


def _class_unit(frame: pd.DataFrame) -> pd.DataFrame:
    rows = _class_rows(frame)
    assert set(frame.loc[rows, "unit"]) == {"GM3"}
    frame.loc[rows, "unit"] = "GM1"
    return frame


def _class_level(frame: pd.DataFrame) -> pd.DataFrame:
    rows = _class_rows(frame)
    assert set(frame.loc[rows, "level"]) == {"unit"}
    frame.loc[rows, "level"] = "area"
    return frame


def _narrow_time_bin(frame: pd.DataFrame) -> pd.DataFrame:
    """One group-level record's time bin narrowed to the 15 minutes of a day's bin."""
    row = frame.index[frame["group_id"].notna()][0]
    start = str(frame.loc[row, "time_bin"]).split("/")[0]
    frame.loc[row, "time_bin"] = f"{start}/PT900S"
    return frame


def _lone_time_bin(frame: pd.DataFrame) -> pd.DataFrame:
    """One record of group 0 moved to another of the release's time bins, which no
    other record of group 0 has: that (group, time bin) holds one record."""
    g0 = frame["group_id"] == 0
    bins = set(frame.loc[g0, "time_bin"])
    other = sorted(set(frame["time_bin"]) - bins)
    assert other
    frame.loc[frame.index[g0][0], "time_bin"] = other[0]
    return frame


def _delete_report(root: Path) -> None:
    (root / "release" / "report.html").unlink()
    edit_manifest(root, lambda m: m["files"].pop("report.html"))


def _record_a_failed_check(root: Path) -> None:
    edit_manifest(root, lambda m: m["verification"].update(extent=False))


def _record_no_holes_result(root: Path) -> None:
    edit_manifest(root, lambda m: m["verification"].pop("holes"))


def _raise_r_max(root: Path) -> None:
    edit_manifest(root, lambda m: m.update(r_max_m=3000.0))
    refresh_manifest(root)


# mutant -> (how it is planted, the check that must fail, what its detail says: the rule
# that caught it, not another file's agreement such as release.gpkg's records layer)
MUTANTS: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "the rows of two groups interleaved in both records files": (
        lambda r: _edit_both(r, _interleave),
        "counts",
        "records.parquet does not list each group's or class's rows together",
    ),
    "one group's rows in the reverse order in both records files": (
        lambda r: _edit_both(r, _reverse_within_group),
        "counts",
        "records.parquet lists",
    ),
    "records.parquet representatives moved 400 m": (
        lambda r: _edit_parquet(r, _move_group),
        "counts",
        "group rows publish an x, y other than their group's representative",
    ),
    "both records files moved 400 m": (
        lambda r: _edit_both(r, _move_group),
        "counts",
        "group rows publish an x, y other than their group's representative",
    ),
    "only records.csv moved 400 m": (
        lambda r: _edit_csv(r, _move_group),
        "counts",
        "records.csv differs from records.parquet in column(s) x",
    ),
    "one kept value changed in records.csv only": (
        lambda r: _edit_csv(r, _change_one_kept_value),
        "counts",
        "records.csv differs from records.parquet in column(s) age",
    ),
    "two records swapped between groups": (
        lambda r: _edit_both(r, _swap_between_groups),
        "counts",
        "values other than their members' (the source's)",
    ),
    "unit changed on class rows": (
        lambda r: _edit_both(r, _class_unit),
        "counts",
        "rows publish a unit other than their class's",
    ),
    "level changed on class rows": (
        lambda r: _edit_both(r, _class_level),
        "counts",
        "rows publish a level other than their group's or class's",
    ),
    "one time bin narrowed to 15 minutes": (
        lambda r: _edit_both(r, _narrow_time_bin),
        "counts",
        "publish time bins other than their members' (the audit's)",
    ),
    "a (group, time bin) holding one record": (
        lambda r: _edit_both(r, _lone_time_bin),
        "k_subjects",
        "(group or class, time bin) cells of the published records hold < k=5 rows",
    ),
    "r_max_m raised to 3000, radius_m 300": (
        _raise_r_max,
        "manifest",
        "manifest r_max_m is 3000.0, its policy's 300.0",
    ),
    "report.html deleted with its manifest entry": (
        _delete_report,
        "manifest",
        "files the format promises are missing: report.html",
    ),
    "manifest records extent as failed": (
        _record_a_failed_check,
        "manifest",
        "manifest verification records extent as not passed",
    ),
    "manifest records no holes result": (
        _record_no_holes_result,
        "manifest",
        "manifest verification does not record holes",
    ),
}


def test_the_copy_and_a_rewrite_of_records_csv_as_the_format_writes_it_pass(
    release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, src = release
    assert _verify(capsys, root, src) == (0, set())
    # read and written again as the format writes it (pyarrow): the same bytes, it passes
    _edit_csv(root, lambda f: f)
    assert _verify(capsys, root, src) == (0, set())
    # the same values written by pandas (no quotes, other float forms): other bytes
    edit_csv(root, "records.csv", lambda f: f)
    code, failed = _verify_details(capsys, root, src)
    assert code == 4 and set(failed) == {"counts"}, failed
    assert "holds records.parquet's values but not as the format writes them" in failed["counts"]


def _reformat_csv(root: Path, column: str, how: Callable[[str], str], *, every: int = 3) -> None:
    """``records.csv`` with one column's cells, on every ``every``-th data line, written
    another way that reads as the same value (a bit per line a reader of values misses);
    the manifest's sha256 refreshed."""
    path = root / "release" / "records.csv"
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    header = lines[0].split(",")
    at = header.index(f'"{column}"')
    for i in range(1, len(lines), every):
        cells = lines[i].split(",")
        if len(cells) == len(header) and cells[at] not in ("", '""'):
            cells[at] = how(cells[at])
            lines[i] = ",".join(cells)
    path.write_bytes("\n".join(lines).encode("utf-8"))
    refresh_manifest(root)


def _crlf(root: Path, lines: int) -> None:
    """The first ``lines`` lines of ``records.csv`` ending ``\\r\\n`` (read alike)."""
    path = root / "release" / "records.csv"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n", lines))
    refresh_manifest(root)


#: records.csv written another way with the same values: each must fail ``counts``
REWRITES: dict[str, Callable[[Path], None]] = {
    "a number in quotes": lambda r: _reformat_csv(r, "age", lambda c: f'"{c}"'),
    "a plus sign": lambda r: _reformat_csv(r, "age", lambda c: f"+{c}"),
    "a space before a number": lambda r: _reformat_csv(r, "age", lambda c: f" {c}"),
    "a zero after a decimal number": lambda r: _reformat_csv(
        r, "score", lambda c: c + "0" if "." in c and "inf" not in c else c
    ),
    "a text without its quotes": lambda r: _reformat_csv(r, "level", lambda c: c.strip('"')),
    "lines ending in CR LF": lambda r: _crlf(r, 5),
}


@pytest.mark.parametrize("name", list(REWRITES))
def test_records_csv_written_another_way_fails_counts(
    name: str, release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every byte of records.csv is the format's: the values alone leave the writing free,
    and each of these writings could carry a bit per cell past a check of values."""
    root, src = release
    before = (root / "release" / "records.csv").read_bytes()
    REWRITES[name](root)
    assert (root / "release" / "records.csv").read_bytes() != before
    code, failed = _verify_details(capsys, root, src)
    assert code == 4 and "counts" in failed, f"{name}: exit {code}, failed {failed}"
    assert "not as the format writes them" in failed["counts"], failed["counts"]


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_fails_its_check(
    name: str, release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, src = release
    plant, check, said = MUTANTS[name]
    before = json.loads((root / "release" / "manifest.json").read_text())["files"]
    plant(root)
    after = json.loads((root / "release" / "manifest.json").read_text())["files"]
    # the checksums were refreshed (a mutant of the manifest's own fields changes none)
    assert before != after or name.startswith(("r_max_m", "manifest records"))
    code, failed = _verify_details(capsys, root, src)
    assert code == 4, f"{name}: exit {code}, failed {failed}"
    assert check in failed, f"{name}: failed {failed}, expected {check}"
    assert said in failed[check], failed[check]


def test_the_report_is_required_once_the_release_is_finished(
    release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from geokanon.verify import verify_release

    root, src = release
    _delete_report(root)
    # the writer's own first run comes before the report: it does without it
    assert verify_release(root, source=src, checks=["manifest"], before_report=True).passed
    assert not verify_release(root, source=src, checks=["manifest"]).passed
    # a manifest stripped of its results no longer says the release is finished, but
    # ``geokanon verify`` still wants every file the format promises
    edit_manifest(root, lambda m: m.update(verification={}))
    refresh_manifest(root)
    assert verify_release(root, source=src, checks=["manifest"]).passed
    code, failed = _verify(capsys, root, src)
    assert (code, failed) == (4, {"manifest"})


def _units_csv(root: Path, change: Callable[[list[bytes]], list[bytes]]) -> None:
    """``units.csv``'s lines through ``change`` (its cells unchanged); sha256 refreshed."""
    path = root / "release" / "units.csv"
    path.write_bytes(b"\n".join(change(path.read_bytes().split(b"\n"))))
    refresh_manifest(root)


def _quote_second_cell(lines: list[bytes]) -> list[bytes]:
    cells = lines[1].split(b",")
    cells[1] = b'"' + cells[1] + b'"'
    return [lines[0], b",".join(cells), *lines[2:]]


#: units.csv written another way with the same cells: each must fail ``counts``
UNITS_REWRITES: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "a count in quotes": _quote_second_cell,
    "a blank line": lambda lines: [*lines[:2], b"", *lines[2:]],
    "a line ending in CR LF": lambda lines: [lines[0] + b"\r", *lines[1:]],
}


@pytest.mark.parametrize("name", list(UNITS_REWRITES))
def test_units_csv_written_another_way_fails_counts(
    name: str, release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, src = release
    _units_csv(root, UNITS_REWRITES[name])
    code, failed = _verify_details(capsys, root, src)
    assert code == 4 and "counts" in failed, f"{name}: exit {code}, failed {failed}"
    assert "units.csv holds its cells but not as the format writes them" in failed["counts"]


#: manifest.json written another way with the same values: each must fail ``manifest``
MANIFEST_REWRITES: dict[str, Callable[[str], str]] = {
    "keys unsorted": lambda text: json.dumps(dict(reversed(json.loads(text).items())), indent=2),
    "four-space indents": lambda text: (
        json.dumps(json.loads(text), indent=4, sort_keys=True) + "\n"
    ),
    "a space before a colon": lambda text: text.replace('"k":', '"k" :', 1),
    "a key given twice": lambda text: text.replace('{\n  "bias"', '{\n  "k": 1,\n  "bias"', 1),
    "no final line break": lambda text: text.rstrip("\n"),
}


@pytest.mark.parametrize("name", list(MANIFEST_REWRITES))
def test_manifest_written_another_way_fails_manifest(
    name: str, release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Spaces, key order or a key given twice read as the same manifest (a repeated key:
    its last value), and each could carry bits past the checks of its values."""
    root, src = release
    path = root / "release" / "manifest.json"
    text = path.read_text(encoding="utf-8")
    new = MANIFEST_REWRITES[name](text)
    assert new != text and json.loads(new) == json.loads(text)
    path.write_text(new, encoding="utf-8")
    code, failed = _verify_details(capsys, root, src)
    assert code == 4 and "manifest" in failed, f"{name}: exit {code}, failed {failed}"
    assert "manifest.json holds its values but not as the format writes them" in failed["manifest"]

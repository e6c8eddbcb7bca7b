"""Release files' containers hold nothing the format does not declare, nor do a point
file's copies of its points.

A Parquet file's key-value metadata and a GeoPackage's SQLite schema hold bytes that are
no value of any row. The whole source, compressed, under a metadata key of its own
(``records.parquet``), or as a blob in a table no layer lists (``release.gpkg``), passed
every check (exit 0): ``no_leak`` searched only readable text there. Each mutant below is
planted in a copy of a valid release, the manifest's checksums recomputed, and
``geokanon verify`` must exit 4 naming the check; the copy untouched, and
``records.parquet`` written again by pyarrow from its own table, pass. ``groups.parquet``'s
geometry and ``bbox`` repeat each group's ``x``, ``y``; moved within the file's extent they
passed too (only ``x``, ``y`` were checked): now ``counts`` compares them bit for bit.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main
from geokanon.encoding import parquet_options, settle_sqlite, write_parquet
from tests.release_fixtures import refresh_manifest


def _source(path: Path) -> Path:
    rng = np.random.default_rng(23)
    xy = rng.normal(0.0, 200.0, (900, 2)) + np.array([155_000.0, 463_000.0])
    frame = pd.DataFrame({"x": np.round(xy[:, 0], 1), "y": np.round(xy[:, 1], 1)})
    frame["unit"] = np.where(frame["x"] > 155_000.0, "GM1", "GM2")
    frame["age"] = rng.integers(1, 95, len(frame))
    frame.to_parquet(path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("containers")
    src = _source(base / "source.parquet")
    out = base / "out"
    argv = ["--quiet", "release", str(src), "--crs", "EPSG:28992", "--unit", "unit",
            "--k", "5", "--r-max", "150", "--tau", "0.2", "--unit-cap", "0.5",
            "--keep", "age", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out, src


def _payload(src: Path) -> bytes:
    """The source's coordinates, compressed: what no text search finds."""
    frame = pd.read_parquet(src)
    return base64.b64encode(zlib.compress(frame[["x", "y"]].to_numpy().tobytes()))


def _with_metadata(path: Path, change: Callable[[dict[bytes, bytes]], None]) -> None:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata or {})
    change(meta)
    write_parquet(table.replace_schema_metadata(meta), path)  # as the writer encodes


def _json_member(key: bytes, edit: Callable[[dict], None]) -> Callable[[dict], None]:
    def change(meta: dict[bytes, bytes]) -> None:
        obj = json.loads(meta[key])
        edit(obj)
        meta[key] = json.dumps(obj).encode()

    return change


def _geo_column(edit: Callable[[dict], None]) -> Callable[[dict], None]:
    return _json_member(b"geo", lambda geo: edit(geo["columns"]["geometry"]))


def _sql(path: Path, *statements: str, params: tuple = ()) -> None:
    con = sqlite3.connect(path)
    for i, statement in enumerate(statements):
        con.execute(statement, params if i == 0 else ())
    con.commit()
    con.close()


def _field_metadata(path: Path, src: Path) -> None:
    table = pq.read_table(path)
    i = table.schema.get_field_index("age")
    field = table.schema.field(i).with_metadata({b"note": _payload(src)[:64]})
    write_parquet(table.cast(table.schema.set(i, field)), path)


def _interior(t: pa.Table) -> np.ndarray:
    """Rows of ``t`` inside its extent (so moving them keeps the file's bbox)."""
    x, y = t.column("x").to_numpy(), t.column("y").to_numpy()
    inside = (x > x.min()) & (x < x.max()) & (y > y.min()) & (y < y.max())
    return np.flatnonzero(inside)[:5]


def _moved_geometry(path: Path, src: Path) -> None:
    import shapely

    t = pq.read_table(path)
    x = t.column("x").to_numpy().copy()
    x[_interior(t)] += 0.25  # bits of a payload, inside the extent
    i = t.schema.get_field_index("geometry")
    wkb = pa.array(shapely.to_wkb(shapely.points(x, t.column("y").to_numpy())), pa.binary())
    write_parquet(t.set_column(i, t.schema.field(i), wkb), path)


def _moved_box(path: Path, src: Path) -> None:
    t = pq.read_table(path)
    box = t.column("bbox").combine_chunks()
    xmax = box.field("xmax").to_numpy(zero_copy_only=False).copy()
    xmax[_interior(t)] += 0.25
    sides = [box.field("xmin"), box.field("ymin"), pa.array(xmax), box.field("ymax")]
    new = pa.StructArray.from_arrays(sides, names=["xmin", "ymin", "xmax", "ymax"])
    i = t.schema.get_field_index("bbox")
    write_parquet(t.set_column(i, t.schema.field(i), new), path)


def _junk_before_footer(path: Path, src: Path) -> None:
    """The source's coordinates between the last column chunk and the footer: the footer
    still points at every chunk, so every reader reads the file as before."""
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    path.write_bytes(data[:start] + _payload(src) + data[start:])


def _varint(v: int) -> bytes:
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def _footer_field(path: Path, src: Path) -> None:
    """A field of its own (id 100, binary: the payload) added to the footer's Thrift
    struct, which every reader skips: the file reads as before."""
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    footer = data[start : start + length]
    payload = _payload(src)
    # compact protocol: type 8 (binary) with the id given in full (zigzag 100 = 200)
    field = bytes([0x08]) + _varint(200) + _varint(len(payload)) + payload
    footer = footer[:-1] + field + b"\x00"  # before the struct's stop byte
    path.write_bytes(data[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    assert pq.read_table(path).num_rows > 0


def _row_group_sizes(path: Path, src: Path) -> None:
    """The payload's first bytes as the sizes of row groups (100 + each byte): every
    reader reads the same rows, values and metadata."""
    t = pq.read_table(path)
    at = 0
    with pq.ParquetWriter(path, t.schema, **parquet_options(t.schema)) as writer:
        for b in _payload(src)[:3]:
            writer.write_table(t.slice(at, 100 + b))
            at += 100 + b
        writer.write_table(t.slice(at))


def _rewritten(**options: object) -> Callable[[Path, Path], None]:
    """The file written again from its own table with other writer options (each a
    choice a writer can make per column and per file: bits)."""

    def plant(path: Path, src: Path) -> None:
        t = pq.read_table(path)
        pq.write_table(t, path, **{**parquet_options(t.schema), **options})

    return plant


def _creator(path: Path, src: Path) -> None:
    """The footer's creator string replaced by coordinates of the same length: the
    footer is still exactly the serialisation of the metadata it holds."""
    data = path.read_bytes()
    created = pq.read_metadata(path).created_by.encode()
    digits = _payload(src)[: len(created)]
    assert data.count(created) == 1
    path.write_bytes(data.replace(created, digits))
    assert pq.read_metadata(path).created_by.encode() == digits


def _unused_page_space(path: Path, src: Path) -> None:
    """The payload written into the largest unused space of a b-tree page (between its
    cell pointers and its cells): no row holds it, every reader reads the same rows, and
    the file has no free page."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    best = (0, 0)
    for page in range(len(data) // size):
        at = page * size + (100 if page == 0 else 0)
        kind = data[at]
        if kind not in (2, 5, 10, 13):
            continue
        cells = int.from_bytes(data[at + 3 : at + 5], "big")
        content = int.from_bytes(data[at + 5 : at + 7], "big") or 65536
        start = at + (12 if kind in (2, 5) else 8) + 2 * cells
        end = page * size + content
        best = max(best, (end - start, start))
    room, start = best
    payload = _payload(src)[: room - 8]
    assert len(payload) > 100
    data[start + 4 : start + 4 + len(payload)] = payload
    path.write_bytes(bytes(data))


MUTANTS: dict[str, tuple[str, Callable[[Path, Path], None], str, str]] = {
    # name: (file, plant(path, source), check, words of the finding)
    "parquet key": (
        "records.parquet",
        lambda p, s: _with_metadata(p, lambda m: m.__setitem__(b"note", _payload(s))),
        "no_leak", "metadata key 'note' the format does not declare",
    ),
    "parquet key, groups": (
        "groups.parquet",
        lambda p, s: _with_metadata(p, lambda m: m.__setitem__(b"qgis", b"x" * 40)),
        "no_leak", "metadata key 'qgis'",
    ),
    "pandas attributes": (
        "records.parquet",
        lambda p, s: _with_metadata(p, _json_member(
            b"pandas", lambda o: o.__setitem__("attributes", {"n": _payload(s).decode()}))),
        "no_leak", "pandas metadata: attributes of the frame",
    ),
    "pandas member": (
        "groups.parquet",
        lambda p, s: _with_metadata(p, _json_member(
            b"pandas", lambda o: o.__setitem__("history", "x"))),
        "no_leak", "pandas metadata: members the format does not declare",
    ),
    "pandas spacing": (
        "records.parquet",
        lambda p, s: _with_metadata(p, lambda m: m.__setitem__(
            b"pandas", json.dumps(json.loads(m[b"pandas"]), indent=1).encode())),
        "no_leak", "pandas metadata: not written as json.dumps writes it",
    ),
    "pandas column type": (
        "records.parquet",
        lambda p, s: _with_metadata(p, _json_member(
            b"pandas", lambda o: o["columns"][0].__setitem__("numpy_type", "int64 " * 20))),
        "no_leak", "pandas metadata: the entry of column 'group_id' is not of the declared form",
    ),
    "geo member": (
        "records.parquet",
        lambda p, s: _with_metadata(p, _geo_column(lambda c: c.__setitem__("note", "x"))),
        "no_leak", "geo metadata: column 'geometry' has members GeoParquet does not define",
    ),
    "geo bbox": (
        "groups.parquet",
        lambda p, s: _with_metadata(p, _geo_column(
            lambda c: c.__setitem__("bbox", [v + 0.5 for v in c["bbox"]]))),
        "no_leak", "a geo bbox other than the extent of the file's points",
    ),
    "geo crs remarks": (
        "groups.parquet",
        lambda p, s: _with_metadata(p, _geo_column(
            lambda c: c["crs"].__setitem__("remarks", _payload(s)[:80].decode()))),
        "manifest", "is not this machine's PROJJSON of the manifest's CRS",
    ),
    "field metadata": (
        "records.parquet", _field_metadata, "no_leak", "field metadata on column 'age'",
    ),
    "groups geometry": (
        "groups.parquet", _moved_geometry,
        "counts", "5 groups.parquet rows have a geometry other than their x, y",
    ),
    "groups bbox": (
        "groups.parquet", _moved_box,
        "counts", "5 groups.parquet rows have a bbox other than their point's",
    ),
    "parquet junk": (
        "records.parquet", _junk_before_footer,
        "no_leak", "bytes between or around its column chunks that no reader reads",
    ),
    "parquet footer field": (
        "records.parquet", _footer_field,
        "no_leak", "a footer holding more than the metadata it declares",
    ),
    "parquet row group sizes": (
        "records.parquet", _row_group_sizes,
        "no_leak", "4 row groups of other sizes than the release's encoding writes",
    ),
    "parquet creator": (
        "records.parquet", _creator,
        "no_leak", "bytes other than the release's encoding of its own values",
    ),
    "parquet compression level": (
        "records.parquet", _rewritten(compression_level=19),
        "no_leak", "bytes other than the release's encoding of its own values",
    ),
    "parquet dictionary pages": (
        "groups.parquet", _rewritten(use_dictionary=True),
        "no_leak", "bytes other than the release's encoding of its own values",
    ),
    "parquet statistics": (
        "groups.parquet", _rewritten(write_statistics=True),
        "no_leak", "bytes other than the release's encoding of its own values",
    ),
    "parquet page size": (
        "records.parquet", _rewritten(data_page_size=64, write_batch_size=64),
        "no_leak", "bytes other than the release's encoding of its own values",
    ),
    "gpkg unused page space": (
        "release.gpkg", _unused_page_space,
        "no_leak", "bytes other than SQLite's own layout of its rows",
    ),
    "gpkg table": (
        "release.gpkg",
        lambda p, s: _sql(p, "CREATE TABLE payload (b BLOB)",
                          "INSERT INTO payload VALUES (x'00')"),
        "no_leak", "1 tables, indexes or triggers GDAL does not write for its layers",
    ),
    "gpkg blob": (
        "release.gpkg",
        lambda p, s: (
            _sql(p, "CREATE TABLE rtree_payload (b BLOB)"),
            _sql(p, "INSERT INTO rtree_payload VALUES (?)", params=(_payload(s),)),
        ),
        "no_leak", "('rtree_payload')",
    ),
    "gpkg layer": (
        "release.gpkg",
        lambda p, s: _sql(
            p, "CREATE TABLE notes (fid INTEGER PRIMARY KEY, t TEXT)",
            "INSERT INTO gpkg_contents (table_name, data_type, identifier, description, "
            "last_change, srs_id) VALUES ('notes', 'attributes', 'notes', '', "
            "'2000-01-01T00:00:00.000Z', 0)",
        ),
        "no_leak", "1 layers the format does not declare ('notes')",
    ),
    "gpkg description": (
        "release.gpkg",
        lambda p, s: _sql(
            p, "UPDATE gpkg_contents SET description = ? WHERE table_name = 'groups'",
            params=(_payload(s)[:200].decode(),),
        ),
        "no_leak", "gpkg_contents names a layer other than as itself, or describes one",
    ),
    "gpkg comment": (
        "release.gpkg",
        lambda p, s: _sql(p, "CREATE TRIGGER trigger_insert_feature_count_x AFTER INSERT ON "
                          "groups BEGIN SELECT 1; /* 154961.5 462431.5 */ END"),
        "no_leak", "SQL comments in its schema",
    ),
    "gpkg srs description": (
        "release.gpkg",
        lambda p, s: _sql(
            p, "UPDATE gpkg_spatial_ref_sys SET description = ? WHERE srs_id = 28992",
            params=(_payload(s)[:300].decode(),),
        ),
        "no_leak", "1 reference systems in gpkg_spatial_ref_sys not as PROJ defines them",
    ),
    "gpkg srs name in wkt": (
        "release.gpkg",
        lambda p, s: _sql(
            p, "UPDATE gpkg_spatial_ref_sys SET definition = replace(definition, "
            "'PROJCS[\"Amersfoort / RD New\"', 'PROJCS[\"Amersfoort / RD New 154961.5\"') "
            "WHERE srs_id = 28992",
        ),
        "no_leak", "1 reference systems in gpkg_spatial_ref_sys not as PROJ defines them",
    ),
    "gpkg srs row": (
        "release.gpkg",
        lambda p, s: _sql(
            p, "INSERT INTO gpkg_spatial_ref_sys VALUES ('x', 3035, 'EPSG', 3035, ?, NULL)",
            params=(_payload(s)[:300].decode(),),
        ),
        "no_leak", "1 reference systems in gpkg_spatial_ref_sys not as PROJ defines them",
    ),
    "gpkg date": (
        "release.gpkg",
        lambda p, s: _sql(p, "UPDATE gpkg_contents SET last_change = "
                          "'2000-01-01T00:00:00.154Z' WHERE table_name = 'units'"),
        "no_leak", "gpkg_contents dates other than 2000-01-01T00:00:00.000Z",
    ),
    "gpkg extension": (
        "release.gpkg",
        lambda p, s: _sql(p, "INSERT INTO gpkg_extensions VALUES ('units', NULL, 'x_note', ?, "
                          "'read-write')", params=(_payload(s)[:300].decode(),)),
        "no_leak", "gpkg_extensions rows other than the layers' R-trees",
    ),
    "gpkg feature count": (
        "release.gpkg",
        lambda p, s: _sql(p, "UPDATE gpkg_ogr_contents SET feature_count = 154961 "
                          "WHERE table_name = 'groups'"),
        "no_leak", "gpkg_ogr_contents counts other than the layers' rows",
    ),
    "gpkg sequence": (
        "release.gpkg",
        lambda p, s: _sql(p, "UPDATE sqlite_sequence SET seq = 462431 WHERE name = 'units'"),
        "no_leak", "sqlite_sequence values other than the layers' last row ids",
    ),
    "gpkg free pages": (
        "release.gpkg",
        lambda p, s: (
            _sql(p, "CREATE TABLE scratch (b BLOB)"),
            _sql(p, "INSERT INTO scratch VALUES (?)", params=(bytes(200_000),)),
            _sql(p, "DROP TABLE scratch"),
        ),
        "no_leak", "free pages (bytes no table holds)",
    ),
}  # fmt: skip


#: The GeoPackage mutants that are the layout itself (laying the file out again undoes them).
_LAID_OUT = ("gpkg free pages", "gpkg unused page space")


def _copy(built: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    out, src = built
    root = tmp_path / "copy"
    shutil.copytree(out, root)
    return root, src


def _verify(root: Path, src: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", str(root), "--source", str(src)])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("name", list(MUTANTS))
def test_a_container_holding_what_the_format_does_not_declare_fails(built, tmp_path, capsys, name):
    root, src = _copy(built, tmp_path)
    file, plant, check, words = MUTANTS[name]
    plant(root / "release" / file, src)
    if file == "release.gpkg" and name not in _LAID_OUT:
        # laid out again as the writer lays it out: only what was put in the tables differs
        again = root / "release" / "settled.gpkg"
        settle_sqlite(root / "release" / file, again)
        again.replace(root / "release" / file)
    refresh_manifest(root)
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    line = next(ln for ln in text.splitlines() if ln.startswith(f"FAIL {check}"))
    assert words in line
    assert file in line or check == "manifest"
    failed = [ln.split()[1] for ln in text.splitlines() if ln.startswith("FAIL")]
    # the container alone (an extra layer is also a layer counts does not know)
    assert failed == [check] or (name == "gpkg layer" and set(failed) == {check, "counts"})


def test_controls_pass(built, tmp_path, capsys):
    root, src = _copy(built, tmp_path)
    assert _verify(root, src, capsys)[0] == 0
    # written again from its own table in the release's encoding: the same bytes
    path = root / "release" / "records.parquet"
    before = path.read_bytes()
    write_parquet(pq.read_table(path), path)
    assert path.read_bytes() == before
    code, text = _verify(root, src, capsys)
    assert code == 0, text
    # written by pyarrow's defaults (another compression, numbers in dictionary pages): the
    # same values, other bytes, which the format does not write
    pq.write_table(pq.read_table(path), path)
    refresh_manifest(root)
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    assert "records.parquet: bytes other than the release's encoding" in text


def test_the_writer_declares_only_what_the_rules_allow(built):
    """Every Parquet file of the release holds the three declared keys and no field
    metadata; the GeoPackage holds only GDAL's tables for the declared layers."""
    from geokanon.verify.containers import gpkg_container_problems, parquet_container_problems

    out, _ = built
    rel = out / "release"
    for path in sorted(rel.rglob("*.parquet")):
        meta = pq.read_metadata(path).metadata
        assert set(meta) == {b"ARROW:schema", b"geo", b"pandas"}, path.name
        assert parquet_container_problems(path) == [], path.name
        assert not any(f.metadata for f in pq.read_schema(path))
    assert gpkg_container_problems(rel / "release.gpkg") == []
    assert pa.ipc.read_schema(
        pa.py_buffer(base64.b64decode(pq.read_metadata(rel / "records.parquet").metadata[
            b"ARROW:schema"]))
    ).names == pq.read_schema(rel / "records.parquet").names  # fmt: skip


@pytest.mark.parametrize(
    "frame_args",
    [
        ["--crs", "+proj=laea +lat_0=52 +lon_0=10 +x_0=4321000 +y_0=3210000 +ellps=GRS80 "
         "+units=m +no_defs"],
        ["--local-metres"],
    ],
    ids=["a CRS with no code", "local metres"],
)  # fmt: skip
def test_gdal_s_own_reference_systems_pass(tmp_path, capsys, frame_args):
    """GDAL writes a CRS with no EPSG code as a system of its own (id 100000, named as PROJ
    names it) and local metres as its undefined system (99999): both as declared."""
    rng = np.random.default_rng(3)
    xy = rng.normal(0.0, 200.0, (300, 2)) + np.array([4_321_000.0, 3_210_000.0])
    pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1]}).to_csv(tmp_path / "in.csv", index=False)
    argv = ["--quiet", "release", str(tmp_path / "in.csv"), *frame_args, "--k", "5",
            "--r-max", "150", "--tau", "0.3", "--unit-cap", "1",
            "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err


def test_the_encoding_is_worked_out_once_beside_the_checks(built, tmp_path, capsys, monkeypatch):
    """Each Parquet file is re-encoded once, in a thread of its own started with the
    verification, and no_leak reports what that thread found."""
    import threading

    from geokanon.verify import containers

    root, src = _copy(built, tmp_path)
    _row_group_sizes(root / "release" / "records.parquet", src)
    refresh_manifest(root)
    seen: list[tuple[str, str]] = []
    real = containers.encoding_problems

    def spy(path: Path) -> list[str]:
        seen.append((path.name, threading.current_thread().name))
        return real(path)

    monkeypatch.setattr(containers, "encoding_problems", spy)
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    assert "records.parquet: 4 row groups of other sizes" in text
    assert sorted(name for name, _ in seen) == [
        "classes.parquet", "groups.parquet", "records.parquet"
    ]  # fmt: skip
    assert all(thread.startswith("verify-encoding") for _, thread in seen)

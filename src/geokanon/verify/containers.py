"""What a release file's container holds besides its rows: nothing the format does not declare.

``no_leak`` reads a release's values; a Parquet file's key-value metadata and a GeoPackage's
SQLite schema hold bytes that are no value of any row, and any bytes fit there: the whole
source, compressed, under a metadata key of its own, or as a blob in a table no layer lists,
passed every check while only readable text was searched. So these containers are held to
what the format declares (``docs/release-format.md``, "Containers"), and anything else is a
finding of ``no_leak`` (a count or a name, never a value):

- **Parquet key-value metadata**: the keys ``ARROW:schema``, ``geo`` and ``pandas`` only.
  ``ARROW:schema`` is exactly the Arrow serialisation of the schema it holds, and that schema
  carries the file's other metadata and no field metadata. ``pandas`` and ``geo`` are JSON
  written as ``json.dumps`` writes them (so no spacing or repeated key can carry bits) and
  hold only the members pyarrow and GeoParquet 1.1 define, each of the declared form: no
  stored index, no ``attributes`` of the frame, a column entry per field and named like it,
  a creator and versions that are version numbers, a geometry column of the file's, WKB
  encoding, known geometry types and a ``covering`` naming the file's ``bbox`` struct. (The
  ``bbox`` against the points is :class:`~geokanon.verify.leak_rules.ParquetScan`'s; the
  ``crs`` against the manifest is :mod:`~geokanon.verify.manifest`'s and its PROJJSON is
  this machine's PROJ's for that CRS, checked by :func:`geo_crs_problems`.)
- **GeoPackage**: every table, index and trigger is one GDAL writes for the declared
  layers (its system tables, each layer's table, R-tree and feature-count triggers), with
  no SQL comment; no free page; ``gpkg_contents`` names each layer as itself with no
  description and the format's fixed date; ``gpkg_spatial_ref_sys``, ``gpkg_extensions``,
  ``gpkg_ogr_contents`` and ``sqlite_sequence`` hold GDAL's defaults and the layers' own
  systems, R-trees, counts and row ids; the SQLite header reserves no bytes.

This module imports no writer code: the rules are the formats' own.
"""

from __future__ import annotations

import base64
import filecmp
import json
import re
import sqlite3
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from geokanon.encoding import (
    ROW_GROUP_ROWS,
    SCHEMA_COOKIE,
    parquet_writer,
    row_group_sizes,
    settle_sqlite,
)
from geokanon.published import GPKG_DATE, GPKG_LAYERS, GPKG_STYLES

__all__ = [
    "encoding_problems",
    "geo_crs_problems",
    "gpkg_container_problems",
    "parquet_container_problems",
    "sqlite_layout_problems",
]

#: The key-value metadata a release's Parquet file may hold.
PARQUET_KEYS = (b"ARROW:schema", b"geo", b"pandas")

_VERSION = re.compile(r"^\d{1,3}\.\d{1,3}(\.\d{1,4})?([.+-]?[a-z0-9]{1,12})?$")
_PANDAS_TYPE = re.compile(r"^[a-z0-9\[\]]{1,24}$")
_NUMPY_TYPE = re.compile(r"^[A-Za-z0-9\[\]_, :/+-]{1,64}$")
#: Members of a column's ``metadata`` in ``pandas`` (timestamps, decimals, categoricals).
_COLUMN_METADATA = frozenset(
    {"timezone", "unit", "precision", "scale", "num_categories", "ordered"}
)
_PANDAS_MEMBERS = frozenset(
    {"index_columns", "column_indexes", "columns", "attributes", "creator", "pandas_version"}
)
_COLUMN_MEMBERS = frozenset({"name", "field_name", "pandas_type", "numpy_type", "metadata"})
_GEO_MEMBERS = frozenset({"columns", "primary_column", "version"})
_GEO_COLUMN_MEMBERS = frozenset({"encoding", "geometry_types", "bbox", "covering", "crs"})
_SIMPLE_TYPES = ("Point", "LineString", "Polygon", "MultiPoint", "MultiLineString")
_GEOMETRY_TYPES = frozenset(
    t + z for t in (*_SIMPLE_TYPES, "MultiPolygon", "GeometryCollection") for z in ("", " Z")
)


def parquet_container_problems(path: Path, encoding: list[str] | None = None) -> list[str]:
    """What ``path``'s container holds beyond what the format declares (``encoding``: the
    findings of :func:`encoding_problems` when they were worked out already)."""
    try:
        file_meta = pq.read_metadata(path)
        meta = dict(file_meta.metadata or {})
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return []  # unreadable: the checks that read it say so
    problems = _layout_problems(path, file_meta)
    problems += encoding_problems(path) if encoding is None else encoding
    problems += [
        f"metadata key {key.decode('utf-8', 'replace')[:40]!r} the format does not declare"
        for key in meta
        if key not in PARQUET_KEYS
    ]
    if b"ARROW:schema" in meta:
        problems += _arrow_schema_problems(meta)
    for field in _fields(schema):
        if field.metadata:
            problems.append(f"field metadata on column {field.name[:40]!r}")
    if b"pandas" in meta:
        geo = _geo_columns(meta.get(b"geo"))
        problems += [
            f"pandas metadata: {p}" for p in _pandas_problems(meta[b"pandas"], schema, geo)
        ]
    if b"geo" in meta:
        problems += [f"geo metadata: {p}" for p in _geo_problems(meta[b"geo"], schema)]
    return problems


def _layout_problems(path: Path, meta: pq.FileMetaData) -> list[str]:
    """The file is ``PAR1``, its column chunks end to end, its footer and ``PAR1``: no byte
    between or after the chunks (a reader reads only where the footer points), a footer
    that is exactly the serialisation of the metadata it holds (no field a reader skips).
    Column statistics are left free: pyarrow writes them as the values' own minimum and
    maximum, and only a writer of its own could put other bits there (16 bytes a chunk)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(4)
        fh.seek(max(size - 8, 0))
        tail = fh.read(8)
        length = int.from_bytes(tail[:4], "little")
        start = size - 8 - length
        if head != b"PAR1" or tail[4:] != b"PAR1" or start < 4:
            return ["not framed as Parquet (PAR1, the footer's length, PAR1)"]
        fh.seek(start)
        footer = fh.read(length)
    problems = []
    sink = pa.BufferOutputStream()
    meta.write_metadata_file(sink)
    if sink.getvalue().to_pybytes()[4:-8] != footer:
        problems.append("a footer holding more than the metadata it declares")
    spans = []
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        for c in range(group.num_columns):
            chunk = group.column(c)
            first = chunk.data_page_offset  # a dictionary page comes first where there is one
            if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
                first = chunk.dictionary_page_offset
            if chunk.total_compressed_size:  # an empty column of no rows holds no byte
                spans.append((int(first), int(first) + int(chunk.total_compressed_size)))
    at = 4
    for a, b in sorted(spans):
        if a != at:
            problems.append("bytes between or around its column chunks that no reader reads")
            break
        at = b
    else:
        if at != start:
            problems.append("bytes between or around its column chunks that no reader reads")
    return problems


class _SameBytes:
    """A writable file that holds nothing: it compares what is written with ``path``'s
    bytes at the same place, and stops the writer (:class:`_Differs`) at the first
    difference."""

    def __init__(self, path: Path) -> None:
        self._fh = path.open("rb")
        self.written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self._fh.read(view.nbytes) != view:
            raise _Differs
        self.written += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self._fh.close()
        self.closed = True


class _Differs(Exception):
    """The re-encoding left the file's bytes."""


def encoding_problems(path: Path) -> list[str]:
    """``path`` must be exactly the release's encoding of its own values
    (:mod:`geokanon.encoding`): its values read back, a row group at a time, and written
    again, byte for byte. Row group and page sizes, encodings, compression, statistics,
    page headers and the creator string are then all the format's, and none can carry
    bits (a reader skips what it does not need, so any of them could)."""
    try:
        pf = pq.ParquetFile(path)
        sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
    except (OSError, pa.ArrowException):
        return []  # unreadable: the checks that read it say so
    if sizes != row_group_sizes(pf.metadata.num_rows):
        return [
            f"{len(sizes)} row groups of other sizes than the release's encoding writes for "
            f"{pf.metadata.num_rows} rows (row groups of {ROW_GROUP_ROWS} rows)"
        ]
    sink = _SameBytes(path)
    try:
        with parquet_writer(pa.PythonFile(sink, mode="w"), pf.schema_arrow) as writer:
            for i in range(pf.num_row_groups):
                writer.write_table(pf.read_row_group(i))
        same = sink.written == path.stat().st_size
    except (_Differs, OSError, pa.ArrowException):
        same = False
    finally:
        sink.close()
    if same:
        return []
    # the creator is free text: compared, never shown
    other = pf.metadata.created_by != f"parquet-cpp-arrow version {pa.__version__}"
    return [
        "bytes other than the release's encoding of its own values (row group, page, "
        "encoding, compression, statistics or creator bytes that pyarrow "
        f"{pa.__version__} does not write: geokanon.encoding)"
        + (
            "; its creator string is not this pyarrow's: a release written with another "
            "pyarrow verifies with that version"
            if other
            else ""
        )
    ]


def _fields(schema: pa.Schema) -> Iterable[pa.Field]:
    stack = list(schema)
    while stack:
        field = stack.pop()
        yield field
        if pa.types.is_struct(field.type):
            stack.extend(field.type.field(i) for i in range(field.type.num_fields))
        elif pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            stack.append(field.type.value_field)


def _geo_columns(value: bytes | None) -> set[str]:
    """The geometry columns GeoParquet metadata ``value`` names, with their coverings."""
    try:
        columns = json.loads(value)["columns"] if value is not None else {}
        out = set(map(str, columns))
        for col in columns.values():
            for side in col.get("covering", {}).get("bbox", {}).values():
                out.add(str(side[0]))
        return out
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return set()


def _arrow_schema_problems(meta: Mapping[bytes, bytes]) -> list[str]:
    """``ARROW:schema`` is the serialisation of a schema carrying the file's other metadata,
    byte for byte (so no padding or unused table of the message holds anything)."""
    value = meta[b"ARROW:schema"]
    try:
        raw = base64.b64decode(value, validate=True)
        held = pa.ipc.read_schema(pa.py_buffer(raw))
        again = base64.b64encode(held.serialize().to_pybytes())
    except (ValueError, pa.ArrowException):
        return ["ARROW:schema is not an Arrow schema"]
    problems = []
    if again != value:
        problems.append("ARROW:schema is not the Arrow serialisation of the schema it holds")
    others = {k: v for k, v in meta.items() if k != b"ARROW:schema"}
    if dict(held.metadata or {}) != others:
        problems.append("ARROW:schema holds metadata other than the file's")
    if any(f.metadata for f in _fields(held)):
        problems.append("ARROW:schema holds field metadata")
    return problems


def _json(value: bytes) -> tuple[Any, list[str]]:
    """The parsed JSON and, unless ``value`` is exactly ``json.dumps`` of it, a problem."""
    try:
        obj = json.loads(value)
    except ValueError:
        return None, ["not JSON"]
    if json.dumps(obj).encode() != value:
        return obj, ["not written as json.dumps writes it"]
    return obj, []


def _version(value: Any) -> bool:
    return isinstance(value, str) and bool(_VERSION.match(value))


def _pandas_problems(value: bytes, schema: pa.Schema, geo_columns: set[str]) -> list[str]:
    obj, problems = _json(value)
    if not isinstance(obj, dict):
        return problems or ["not an object"]
    extra = set(obj) - _PANDAS_MEMBERS
    if extra:
        problems.append(f"members the format does not declare ({len(extra)})")
    if obj.get("index_columns") != [] or obj.get("column_indexes", []) != []:
        problems.append("a stored index")
    if obj.get("attributes", {}) != {}:
        problems.append("attributes of the frame")
    creator = obj.get("creator", {"library": "pyarrow", "version": "0.0"})
    if not (
        isinstance(creator, dict)
        and set(creator) == {"library", "version"}
        and creator["library"] == "pyarrow"
        and _version(creator["version"])
    ):
        problems.append("a creator other than a pyarrow version")
    if "pandas_version" in obj and not _version(obj["pandas_version"]):
        problems.append("a pandas_version that is no version number")
    columns = obj.get("columns")
    names = list(schema.names)
    if not isinstance(columns, list) or len(columns) > len(names):
        return [*problems, "not one column entry per column"]
    # the frame's columns, then the geometry and its covering (added by GeoParquet)
    if not set(names[len(columns) :]) <= geo_columns:
        problems.append("not one column entry per column")
    for entry, name in zip(columns, names, strict=False):
        if not _pandas_column_ok(entry, name):
            problems.append(f"the entry of column {name[:40]!r} is not of the declared form")
    return problems


def _pandas_column_ok(entry: Any, name: str) -> bool:
    if not (isinstance(entry, dict) and set(entry) == _COLUMN_MEMBERS):
        return False
    if entry["name"] != name or entry["field_name"] != name:
        return False
    if not (isinstance(entry["pandas_type"], str) and _PANDAS_TYPE.match(entry["pandas_type"])):
        return False
    if not (isinstance(entry["numpy_type"], str) and _NUMPY_TYPE.match(entry["numpy_type"])):
        return False
    meta = entry["metadata"]
    if meta is None:
        return True
    return (
        isinstance(meta, dict)
        and set(meta) <= _COLUMN_METADATA
        and all(
            isinstance(v, bool | int) or (isinstance(v, str) and _NUMPY_TYPE.match(v))
            for v in meta.values()
        )
    )


def _geo_problems(value: bytes, schema: pa.Schema) -> list[str]:
    obj, problems = _json(value)
    if not isinstance(obj, dict):
        return problems or ["not an object"]
    if set(obj) != _GEO_MEMBERS:
        problems.append("members other than columns, primary_column and version")
    if not (_version(obj.get("version")) and str(obj.get("version")).startswith("1.")):
        problems.append("a version other than a GeoParquet 1.x")
    columns = obj.get("columns")
    if not isinstance(columns, dict) or obj.get("primary_column") not in (columns or {}):
        return [*problems, "no primary geometry column"]
    names = set(schema.names)
    for name, col in columns.items():
        label = f"column {str(name)[:40]!r}"
        if name not in names or not isinstance(col, dict):
            problems.append(f"{label} is not a column of the file")
            continue
        if set(col) - _GEO_COLUMN_MEMBERS:
            problems.append(f"{label} has members GeoParquet does not define")
        if col.get("encoding") != "WKB":
            problems.append(f"{label} is not WKB")
        types = col.get("geometry_types")
        if not (isinstance(types, list) and all(t in _GEOMETRY_TYPES for t in types)):
            problems.append(f"{label} has geometry types GeoParquet does not define")
        box = col.get("bbox")
        if box is not None and not (
            isinstance(box, list)
            and len(box) == 4
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)
        ):
            problems.append(f"{label} has a bbox that is not four numbers")
        if "covering" in col and not _covering_ok(col["covering"], schema):
            problems.append(f"{label} has a covering other than the file's bbox columns")
    return problems


def _covering_ok(covering: Any, schema: pa.Schema) -> bool:
    if not (isinstance(covering, dict) and set(covering) == {"bbox"}):
        return False
    box = covering["bbox"]
    sides = ("xmin", "ymin", "xmax", "ymax")
    if not (isinstance(box, dict) and set(box) == set(sides)):
        return False
    column = {v[0] if isinstance(v, list) and len(v) == 2 else None for v in box.values()}
    if len(column) != 1 or None in column:
        return False
    (name,) = column
    if name not in schema.names or not pa.types.is_struct(schema.field(name).type):
        return False
    struct = schema.field(name).type
    members = {struct.field(i).name for i in range(struct.num_fields)}
    return all(box[s] == [name, s] and s in members for s in sides)


def geo_crs_problems(path: Path, crs: str | None) -> list[str]:
    """The ``crs`` of ``path``'s GeoParquet columns is exactly the PROJJSON this machine's
    PROJ writes for the manifest's ``crs`` (absent or null where that is none): PROJJSON
    has free text (names, remarks) that an equivalent CRS would not show.

    A release verified with another PROJ than it was written with may differ here in
    PROJJSON's own version; the finding says so."""
    try:
        meta = pq.read_metadata(path).metadata or {}
        geo = json.loads(meta[b"geo"]) if b"geo" in meta else None
    except (OSError, pa.ArrowException, ValueError):
        return []
    if not isinstance(geo, dict) or not isinstance(geo.get("columns"), dict):
        return []
    want: Any = None
    if crs is not None:
        from pyproj import CRS
        from pyproj.exceptions import CRSError

        try:
            want = CRS.from_user_input(crs).to_json_dict()
        except CRSError:
            return []  # manifest says the CRS is unreadable
    problems = []
    for name, col in geo["columns"].items():
        if not isinstance(col, dict):
            continue
        given = col.get("crs", "OGC:CRS84" if crs is not None else None)
        if crs is None and given is None:
            continue
        if given != want:
            problems.append(
                f"geo metadata: the crs of column {str(name)[:40]!r} is not this machine's "
                f"PROJJSON of the manifest's CRS (PROJ "
                f"{_proj_version()}; a release written with another PROJ may differ here)"
            )
    return problems


def _proj_version() -> str:
    import pyproj

    return str(pyproj.proj_version_str)


#: GeoPackage system tables GDAL writes.
_GPKG_SYSTEM = frozenset(
    {"gpkg_contents", "gpkg_extensions", "gpkg_geometry_columns", "gpkg_ogr_contents",
     "gpkg_spatial_ref_sys", "gpkg_tile_matrix", "gpkg_tile_matrix_set", "sqlite_sequence"}
)  # fmt: skip
_TILE_MATRIX_TRIGGER = re.compile(
    r"^gpkg_tile_matrix_(zoom_level|matrix_width|matrix_height|pixel_x_size|pixel_y_size)"
    r"_(insert|update)$"
)


def gpkg_container_problems(path: Path, crs: str | None = None) -> list[str]:
    """What ``path``'s SQLite schema and GeoPackage tables hold beyond GDAL's GeoPackage of
    its layers (in the manifest's ``crs``), read through one connection."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return []
    try:
        entries = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        free = int(con.execute("PRAGMA freelist_count").fetchone()[0])
        contents = con.execute(
            "SELECT table_name, identifier, description, last_change, srs_id FROM gpkg_contents"
        ).fetchall()
        geometry = dict(
            con.execute("SELECT table_name, column_name FROM gpkg_geometry_columns").fetchall()
        )
        layers = {str(row[0]) for row in contents}
        problems = _gpkg_table_problems(con, contents, layers, geometry, crs)
    except sqlite3.Error:
        return ["its GeoPackage tables are unreadable"]
    finally:
        con.close()
    undeclared = sorted(layers - set(GPKG_LAYERS) - {GPKG_STYLES})
    if undeclared:
        problems.append(
            f"{len(undeclared)} layers the format does not declare "
            f"({', '.join(repr(n[:40]) for n in undeclared[:3])})"
        )
    allowed = _gpkg_names(layers, geometry)
    odd = sorted(str(name) for _, name, _, _ in entries if not _gpkg_entry_ok(str(name), allowed))
    if odd:
        problems.append(
            f"{len(odd)} tables, indexes or triggers GDAL does not write for its layers "
            f"({', '.join(repr(n[:40]) for n in odd[:3])}{', ...' if len(odd) > 3 else ''})"
        )
    if any(sql is not None and ("--" in sql or "/*" in sql) for _, _, _, sql in entries):
        problems.append("SQL comments in its schema")
    if free:
        problems.append(f"{free} free pages (bytes no table holds)")
    if any(ident != table or desc not in ("", None) for table, ident, desc, _, _ in contents):
        problems.append("gpkg_contents names a layer other than as itself, or describes one")
    with path.open("rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or header[20] != 0 or any(header[72:92]):
        problems.append("reserved bytes in its SQLite header")
    return problems + sqlite_layout_problems(path)


def sqlite_layout_problems(path: Path) -> list[str]:
    """``path`` must be laid out as SQLite lays out its rows (:mod:`geokanon.encoding`,
    :func:`~geokanon.encoding.settle_sqlite`): settled again, it is the same bytes. Unused
    space inside a page (between a page's cells, a deleted cell's freeblock), the pages'
    order and the header's counters then hold nothing the rows do not."""
    with tempfile.TemporaryDirectory(prefix="geokanon-verify-") as tmp:
        settled = Path(tmp) / "settled.gpkg"
        try:
            settle_sqlite(path, settled)
        except (sqlite3.Error, OSError):
            return ["its SQLite pages could not be laid out again"]
        if filecmp.cmp(path, settled, shallow=False):
            return []
    return [
        "bytes other than SQLite's own layout of its rows (VACUUM INTO with SQLite "
        f"{sqlite3.sqlite_version}, schema cookie {SCHEMA_COOKIE}: unused space in a page, or "
        "pages or header bytes laid out otherwise); a release written with another SQLite "
        "verifies with that version"
    ]


#: The reference systems GDAL writes on its own (srs_id: name, organization, organization's
#: id, definition, description): three in every GeoPackage, and its undefined one for
#: layers without a CRS; EPSG:4326's definition is PROJ's WKT1 (GDAL flavour).
_GPKG_DEFAULT_SRS = {
    -1: ("Undefined Cartesian SRS", "NONE", -1, "undefined",
         "undefined Cartesian coordinate reference system"),
    0: ("Undefined geographic SRS", "NONE", 0, "undefined",
        "undefined geographic coordinate reference system"),
    4326: ("WGS 84 geodetic", "EPSG", 4326, None,
           "longitude/latitude coordinates in decimal degrees on the WGS 84 spheroid"),
    # layers in local metres (no CRS: --local-metres)
    99999: ("Undefined SRS", "GDAL", 99999,
            'LOCAL_CS["Undefined SRS",LOCAL_DATUM["unknown",32767],UNIT["unknown",0],'
            'AXIS["Easting",EAST],AXIS["Northing",NORTH]]',
            "Custom undefined coordinate reference system"),
}  # fmt: skip
_RTREE = ("gpkg_rtree_index", "http://www.geopackage.org/spec120/#extension_rtree", "write-only")


def _gpkg_table_problems(
    con: sqlite3.Connection,
    contents: list[tuple[Any, ...]],
    layers: set[str],
    geometry: Mapping[str, str],
    crs: str | None,
) -> list[str]:
    """The GeoPackage's own tables hold only what GDAL writes for the layers: the fixed
    date, reference systems as PROJ defines them (their WKT's names are free text),
    R-tree extensions, and feature counts and sequences that are the layers' own."""
    problems = []
    dates = {row[3] for row in contents}
    used = {int(row[4]) for row in contents}
    srs = con.execute(
        "SELECT srs_id, srs_name, organization, organization_coordsys_id, definition, "
        "description FROM gpkg_spatial_ref_sys"
    ).fetchall()
    extensions = con.execute(
        "SELECT table_name, column_name, extension_name, definition, scope FROM gpkg_extensions"
    ).fetchall()
    counts = dict(con.execute("SELECT table_name, feature_count FROM gpkg_ogr_contents"))
    sequences = dict(con.execute("SELECT name, seq FROM sqlite_sequence"))
    own = {
        layer: con.execute(f'SELECT count(*), max(rowid) FROM "{layer}"').fetchone()
        for layer in sorted(layers)
    }
    if dates - {GPKG_DATE}:
        problems.append(f"gpkg_contents dates other than {GPKG_DATE}")
    bad_srs = [i for i, *rest in srs if not _srs_ok(int(i), tuple(rest), used, crs)]
    if bad_srs:
        problems.append(
            f"{len(bad_srs)} reference systems in gpkg_spatial_ref_sys not as PROJ defines "
            "them, or not used"
        )
    want = {(t, c, *_RTREE) for t, c in geometry.items()}
    if not set(extensions) <= want:
        problems.append("gpkg_extensions rows other than the layers' R-trees")
    if set(counts) - layers or any(counts[t] != own[t][0] for t in counts if t in own):
        problems.append("gpkg_ogr_contents counts other than the layers' rows")
    if set(sequences) - layers or any(
        sequences[t] != (own[t][1] or 0) for t in sequences if t in own
    ):
        problems.append("sqlite_sequence values other than the layers' last row ids")
    return problems


_AXIS = re.compile(r'AXIS\["(Latitude|Longitude|Easting|Northing|X|Y)",(NORTH|SOUTH|EAST|WEST)\],?')


def _same_wkt(definition: Any, wkt: str) -> bool:
    """``definition`` is PROJ's WKT1 (GDAL flavour) ``wkt``, up to the two axes GDAL adds
    to a geographic system (``AXIS["Latitude",NORTH]``...: named from a short list)."""
    if not isinstance(definition, str):
        return False
    if definition == wkt:
        return True
    axes = _AXIS.findall(definition)
    return 0 < len(axes) <= 2 and _AXIS.sub("", definition) == wkt


def _srs_ok(srs_id: int, row: tuple[Any, ...], used: set[int], crs: str | None) -> bool:
    """A ``gpkg_spatial_ref_sys`` row (name, organization, id, definition, description)
    is GDAL's default one, or the system a layer uses as PROJ writes it: an EPSG one by
    its code, another (GDAL numbers those from 100000) as the manifest's ``crs``."""
    from pyproj import CRS
    from pyproj.enums import WktVersion
    from pyproj.exceptions import CRSError

    name, org, org_id, definition, description = row
    default = _GPKG_DEFAULT_SRS.get(srs_id)
    if default is not None and srs_id != 4326:
        return row == default
    if srs_id not in used and default is None:
        return False
    if org_id != srs_id:
        return False
    try:
        if str(org).upper() == "EPSG":
            system = CRS.from_epsg(srs_id)
        elif str(org).upper() == "NONE" and srs_id >= 100_000 and crs is not None:
            system = CRS.from_user_input(crs)
        else:
            return False
    except CRSError:
        return False
    wkt = system.to_wkt(WktVersion.WKT1_GDAL)
    if not _same_wkt(definition, wkt) or name != (
        default[0] if default is not None else system.name
    ):
        return False
    return description in (None, "") or (default is not None and description == default[4])


def _gpkg_names(layers: set[str], geometry: Mapping[str, str]) -> set[str]:
    names = set(_GPKG_SYSTEM) | layers
    for layer in layers:
        names |= {f"trigger_{op}_feature_count_{layer}" for op in ("insert", "delete")}
        column = geometry.get(layer)
        if column is None:
            continue
        rtree = f"rtree_{layer}_{column}"
        names |= {rtree, f"{rtree}_node", f"{rtree}_parent", f"{rtree}_rowid"}
        names |= {f"{rtree}_{op}" for op in ("insert", "delete")}
        names |= {f"{rtree}_update{i}" for i in range(1, 8)}
    return names


def _gpkg_entry_ok(name: str, allowed: set[str]) -> bool:
    if name in allowed or _TILE_MATRIX_TRIGGER.match(name):
        return True
    auto = re.match(r"^sqlite_autoindex_(.+)_\d+$", name)
    return bool(auto and auto.group(1) in allowed)

"""GIS formats of a release: GeoParquet 1.1 columns and metadata, and the analyst's GeoPackage.

- :func:`geoparquet_metadata`, :func:`point_bbox`, :func:`geometry_bbox`, :func:`geo_table`:
  the ``geo`` metadata (GeoParquet 1.1: PROJJSON CRS, geometry types, the file's bbox and
  the ``bbox`` covering column) and the columns that go with it, built from arrays (no
  per-row Python objects for points).
- :func:`unit_geometries`, :func:`disc_extents`: polygons of the published units (from the
  ``--units`` file, or the cells of ``--unit-grid``) and of the groups' extents, in the
  output CRS.
- :func:`write_geopackage`: ``release.gpkg`` (layers written with pyogrio, then the rows of
  ``layer_styles``, the convention QGIS reads on load; the styles themselves are the
  release format's, :func:`geokanon.published.layer_styles`).

Nothing here decides what is published: the writer (:mod:`geokanon.release`) hands over
published values only.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import shapely
from numpy.typing import NDArray

from geokanon.encoding import settle_sqlite
from geokanon.published import GPKG_DATE, GPKG_GEOMETRY, GPKG_STYLES

__all__ = [
    "BBOX_FIELDS",
    "GEOPARQUET_VERSION",
    "GpkgLayer",
    "disc_extents",
    "disc_rings",
    "geo_table",
    "geometry_bbox",
    "geoparquet_metadata",
    "point_bbox",
    "ring_wkb",
    "unit_geometries",
    "write_geopackage",
]

GEOPARQUET_VERSION = "1.1.0"
#: Fields of the ``bbox`` covering column (GeoParquet 1.1), in order.
BBOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
#: Vertices of the polygon of a group's extent disc (circumscribed: it holds the disc).
DISC_VERTICES = 16
#: GDAL configuration while release.gpkg is written. The file is built in the release's
#: private build area, which is fsynced as a whole before it is renamed into place and
#: discarded if anything fails; so SQLite's own journal and fsync after each layer buy
#: nothing (the bytes are the same without them; measured: ~0.1 s of waiting per layer).
GPKG_WRITE_CONFIG = {
    "OGR_CURRENT_DATE": GPKG_DATE,
    "OGR_SQLITE_SYNCHRONOUS": "OFF",
    "OGR_SQLITE_JOURNAL": "OFF",
}


def crs_projjson(crs: str | None) -> dict[str, Any] | None:
    """PROJJSON of ``crs`` (``None``: no CRS, GeoParquet's "undefined").

    Examples
    --------
    >>> crs_projjson("EPSG:28992")["id"]
    {'authority': 'EPSG', 'code': 28992}
    >>> crs_projjson(None) is None
    True
    """
    if crs is None:
        return None
    from pyproj import CRS

    try:
        return dict(CRS.from_user_input(crs).to_json_dict())
    except Exception:  # an unnamed frame the writer refused earlier: say "undefined"
        return None


def geoparquet_metadata(
    crs: str | None,
    geometry_types: Sequence[str],
    bbox: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The ``geo`` metadata of a GeoParquet 1.1 file with a WKB ``geometry`` column.

    ``crs`` goes in as PROJJSON (``null`` when ``None``: the coordinates have no CRS);
    ``bbox`` (the file's extent, ``[xmin, ymin, xmax, ymax]``) is left out when ``None``
    (no geometry at all); the ``bbox`` covering column holds every row's box.

    Examples
    --------
    >>> m = geoparquet_metadata("EPSG:28992", ["Point"], [0.0, 1.0, 2.0, 3.0])
    >>> m["version"], m["columns"]["geometry"]["covering"]["bbox"]["xmin"]
    ('1.1.0', ['bbox', 'xmin'])
    """
    column: dict[str, Any] = {
        "encoding": "WKB",
        "geometry_types": list(geometry_types),
        "crs": crs_projjson(crs),
        "covering": {"bbox": {f: ["bbox", f] for f in BBOX_FIELDS}},
    }
    if bbox is not None and all(math.isfinite(v) for v in bbox):
        column["bbox"] = [float(v) for v in bbox]
    return {
        "version": GEOPARQUET_VERSION,
        "primary_column": "geometry",
        "columns": {"geometry": column},
    }


BBOX_TYPE = pa.struct([pa.field(f, pa.float64()) for f in BBOX_FIELDS])


def point_bbox(x: NDArray[np.float64], y: NDArray[np.float64]) -> pa.StructArray:
    """The covering ``bbox`` of points (null where ``x`` is NaN), without copies per row.

    Examples
    --------
    >>> point_bbox(np.array([1.0, np.nan]), np.array([2.0, np.nan])).to_pylist()
    [{'xmin': 1.0, 'ymin': 2.0, 'xmax': 1.0, 'ymax': 2.0}, None]
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    missing = np.isnan(x)
    ax, ay = pa.array(x), pa.array(y)
    return pa.StructArray.from_arrays(
        [ax, ay, ax, ay], fields=list(BBOX_TYPE), mask=pa.array(missing) if missing.any() else None
    )


def geometry_bbox(geoms: NDArray[np.object_]) -> pa.StructArray:
    """The covering ``bbox`` of shapely geometries (null where missing or empty)."""
    b = shapely.bounds(geoms) if len(geoms) else np.zeros((0, 4))
    missing = np.isnan(b[:, 0])
    cols = [pa.array(b[:, i]) for i in range(4)]
    return pa.StructArray.from_arrays(
        cols, fields=list(BBOX_TYPE), mask=pa.array(missing) if missing.any() else None
    )


_TYPE_NAMES = {0: "Point", 1: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString",
               6: "MultiPolygon", 7: "GeometryCollection"}  # fmt: skip


def geometry_types(geoms: NDArray[np.object_]) -> list[str]:
    """The GeoParquet ``geometry_types`` of shapely geometries (sorted; nulls left out)."""
    ids = shapely.get_type_id(geoms) if len(geoms) else np.zeros(0, dtype=int)
    return sorted({_TYPE_NAMES[int(i)] for i in np.unique(ids) if int(i) in _TYPE_NAMES})


def extent(bboxes: pa.StructArray) -> list[float] | None:
    """``[xmin, ymin, xmax, ymax]`` over a covering column (``None`` when all null)."""
    import pyarrow.compute as pc

    if bboxes.null_count == len(bboxes):
        return None
    parts = bboxes.flatten()
    lo = [pc.min(parts[i]).as_py() for i in (0, 1)]
    hi = [pc.max(parts[i]).as_py() for i in (2, 3)]
    return [float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])]


def geo_table(
    table: pa.Table,
    geometry: NDArray[np.object_] | tuple[NDArray[np.float64], NDArray[np.float64]],
    crs: str | None,
) -> pa.Table:
    """``table`` with ``geometry`` (WKB) and ``bbox`` appended and its GeoParquet metadata.

    ``geometry`` is either shapely geometries (``None`` for a row without one) or the
    ``(x, y)`` of points (NaN for none).
    """
    if isinstance(geometry, tuple):
        x, y = geometry
        wkb = wkb_points(x, y)
        bbox = point_bbox(x, y)
        types = ["Point"]
    else:
        geoms = np.asarray(geometry, dtype=object)
        raw = shapely.to_wkb(geoms, byte_order=1) if len(geoms) else np.zeros(0, dtype=object)
        wkb = pa.array(list(raw), type=pa.binary())
        bbox = geometry_bbox(geoms)
        types = geometry_types(geoms)
    out = table.append_column("geometry", wkb).append_column("bbox", bbox)
    meta = dict(table.schema.metadata or {})
    meta[b"geo"] = json.dumps(
        geoparquet_metadata(crs, types, extent(bbox)), sort_keys=True
    ).encode()
    return out.replace_schema_metadata(meta)


#: One little-endian WKB point: byte order, geometry type, x, y (21 bytes, unaligned).
_WKB_POINT = np.dtype([("order", "u1"), ("kind", "<u4"), ("x", "<f8"), ("y", "<f8")])


def wkb_points(x: NDArray[np.float64], y: NDArray[np.float64]) -> pa.Array:
    """2-D points as little-endian WKB (21 bytes each; null where x is NaN).

    The bytes are those of ``shapely.to_wkb(shapely.points(x, y))``.

    Examples
    --------
    >>> a = wkb_points(np.array([1.0, np.nan]), np.array([2.0, np.nan]))
    >>> shapely.from_wkb(a.to_pylist()[0]).wkt, a.null_count
    ('POINT (1 2)', 1)
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    valid = ~np.isnan(x)
    n_valid = int(np.count_nonzero(valid))
    raw = np.empty(n_valid, dtype=_WKB_POINT)
    raw["order"] = 1
    raw["kind"] = 1
    if n_valid == n:
        raw["x"] = x
        raw["y"] = y
        offsets = np.arange(0, 21 * (n + 1), 21, dtype=np.int32)
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)], null_count=0
        )
    raw["x"] = x[valid]
    raw["y"] = y[valid]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(valid * np.int32(21), out=offsets[1:])
    bitmap = pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(
        pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(raw)],
        null_count=n - n_valid,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# Polygons: units and group extents, in the output CRS
# --------------------------------------------------------------------------------------


def _transform(geoms: NDArray[np.object_], src: str | None, dst: str | None) -> NDArray[np.object_]:
    if src is None or dst is None or src == dst or not len(geoms):
        return geoms
    from geokanon.projection import transformer

    tr = transformer(src, dst)

    def apply(xy: NDArray[np.float64]) -> NDArray[np.float64]:
        ox, oy = tr.transform(xy[:, 0], xy[:, 1])
        return np.column_stack([np.asarray(ox), np.asarray(oy)])

    return np.asarray(shapely.transform(geoms, apply), dtype=object)


def disc_rings(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    radius_m: float,
    working_crs: str | None,
    output_crs: str | None,
) -> NDArray[np.float64]:
    """Each group's extent as a closed ring, ``(groups, n + 1, 2)``, in the output CRS.

    ``x``, ``y`` are the representatives in the working (metric) CRS. The polygon is built
    there: the regular :data:`DISC_VERTICES`-gon circumscribing the disc of ``radius_m``
    (vertex j at angle 2 pi j / n, ``radius_m / cos(pi / n)`` away: its edges touch the
    circle, so every point within ``radius_m`` lies inside it); then it is carried to the
    output CRS vertex by vertex.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = DISC_VERTICES
    angle = 2 * np.pi * (np.arange(n + 1) % n) / n  # closed: the last vertex is the first
    reach = radius_m / math.cos(math.pi / n)
    ring = np.empty((x.size, n + 1, 2))
    ring[:, :, 0] = x[:, None] + reach * np.cos(angle)[None, :]
    ring[:, :, 1] = y[:, None] + reach * np.sin(angle)[None, :]
    if working_crs is not None and output_crs is not None and working_crs != output_crs:
        from geokanon.projection import transformer

        ox, oy = transformer(working_crs, output_crs).transform(ring[:, :, 0], ring[:, :, 1])
        ring[:, :, 0], ring[:, :, 1] = ox, oy
    return ring


def disc_extents(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    radius_m: float,
    working_crs: str | None,
    output_crs: str | None,
) -> NDArray[np.object_]:
    """:func:`disc_rings` as shapely polygons.

    Examples
    --------
    >>> d = disc_extents(np.array([0.0]), np.array([0.0]), 100.0, None, None)
    >>> bool(shapely.contains(d[0], shapely.Point(0, 99.99))), len(d[0].exterior.coords)
    (True, 17)
    """
    ring = disc_rings(x, y, radius_m, working_crs, output_crs)
    return np.asarray(shapely.polygons(ring), dtype=object)


def ring_wkb(ring: NDArray[np.float64]) -> pa.Array:
    """Polygons of one ring each, ``(polygons, points, 2)``, as little-endian WKB.

    The bytes are those of ``shapely.to_wkb(shapely.polygons(ring))``, made without a
    geometry object per polygon.

    Examples
    --------
    >>> r = disc_rings(np.array([5.0]), np.array([1.0]), 2.0, None, None)
    >>> ring_wkb(r).to_pylist()[0] == shapely.to_wkb(shapely.polygons(r)[0])
    True
    """
    g, n_points = ring.shape[0], ring.shape[1]
    head = (
        b"\x01" + (3).to_bytes(4, "little") + (1).to_bytes(4, "little")
        + n_points.to_bytes(4, "little")
    )  # fmt: skip
    size = 13 + 16 * n_points
    raw = np.empty((g, size), dtype=np.uint8)
    raw[:, :13] = np.frombuffer(head, dtype=np.uint8)
    raw[:, 13:] = np.ascontiguousarray(ring, dtype="<f8").reshape(g, -1).view(np.uint8)
    offsets = np.arange(0, size * (g + 1), size, dtype=np.int64)
    return pa.Array.from_buffers(
        pa.large_binary(), g, [None, pa.py_buffer(offsets), pa.py_buffer(raw)], null_count=0
    ).cast(pa.binary())


_GRID_NAME = re.compile(r"E(-?\d+)_N(-?\d+)")


def _grid_cells(names: Sequence[str], cell_m: float) -> NDArray[np.object_]:
    out = np.full(len(names), None, dtype=object)
    for i, name in enumerate(names):
        m = _GRID_NAME.fullmatch(name)
        if m is None:
            continue
        # the name is the lower-left corner printed to the metre: recover the cell index
        ix, iy = round(float(m.group(1)) / cell_m), round(float(m.group(2)) / cell_m)
        x0, y0 = ix * cell_m, iy * cell_m
        out[i] = shapely.box(x0, y0, x0 + cell_m, y0 + cell_m)
    filled = np.array([g is not None for g in out], dtype=bool)
    if filled.any():
        # edges bend when carried to another CRS: give them vertices every 1/16 of a side
        out[filled] = shapely.segmentize(out[filled], cell_m / 16)
    return out


def _polygon_file(
    path: Path, unit_id: str
) -> tuple[NDArray[np.object_], NDArray[np.object_], str | None]:
    """(unit ids, geometries, CRS) of a polygon file, invalid polygons repaired."""
    from geokanon.projection import frame_crs

    if path.suffix.lower() in (".parquet", ".geoparquet", ".pq"):
        import geopandas as gpd

        frame = gpd.read_parquet(path, columns=[unit_id, "geometry"])
    else:
        import pyogrio

        frame = pyogrio.read_dataframe(path, columns=[unit_id])
    geoms = np.asarray(frame.geometry.values, dtype=object)
    invalid = ~np.asarray(shapely.is_valid(geoms)) & ~np.asarray(shapely.is_missing(geoms))
    if invalid.any():
        geoms = geoms.copy()
        geoms[invalid] = shapely.make_valid(
            geoms[invalid], method="structure", keep_collapsed=False
        )
    ids = frame[unit_id].astype(str).str.strip().to_numpy(dtype=object)
    return ids, geoms, frame_crs(frame)


def unit_geometries(
    unit_names: Sequence[str],
    read_options: Mapping[str, Any],
    working_crs: str | None,
    output_crs: str | None,
) -> NDArray[np.object_]:
    """Polygon of each published unit in the output CRS (``None``: the unit has none).

    From the ``--units`` file (``units``/``unit_id`` of ``read_options``; the features of
    one id joined; a unit merged by ``--merge-small-units``, named ``A+B``, is the union
    of its source units), or the square cells of ``--unit-grid`` (``unit_grid_m``, cells in
    the working CRS). A unit id with no polygon (``unassigned``, a ``--unit`` column, a file
    that cannot be read again) gets none: no geometry is made up.
    """
    names = [str(u) for u in unit_names]
    out = np.full(len(names), None, dtype=object)
    if not names:
        return out
    grid = read_options.get("unit_grid_m")
    if grid:
        cells = _grid_cells(names, float(grid))
        return _transform(cells, working_crs, output_crs)
    path, unit_id = read_options.get("units"), read_options.get("unit_id")
    if not path or not unit_id:
        return out
    try:
        ids, geoms, file_crs = _polygon_file(Path(str(path)), str(unit_id))
    except Exception:  # moved or unreadable since it was read: no geometry, not a made-up one
        return out
    by_id: dict[str, list[Any]] = {}
    for uid, geom in zip(ids, geoms, strict=True):
        if geom is not None and not shapely.is_empty(geom):
            by_id.setdefault(str(uid), []).append(geom)
    for i, name in enumerate(names):
        parts = [name] if name in by_id else name.split("+")
        if not all(p in by_id for p in parts):
            continue
        pieces = [g for p in parts for g in by_id[p]]
        out[i] = pieces[0] if len(pieces) == 1 else shapely.union_all(pieces)
    filled = np.array([g is not None for g in out], dtype=bool)
    if filled.any():
        out[filled] = _transform(out[filled], file_crs or working_crs, output_crs)
    return out


def as_multipolygons(geoms: NDArray[np.object_]) -> NDArray[np.object_]:
    """Polygons as MultiPolygons (one geometry type per GeoPackage layer); others as they are."""
    out = np.asarray(geoms, dtype=object).copy()
    for i, g in enumerate(out):
        if g is None:
            continue
        if shapely.get_type_id(g) == 3:
            out[i] = shapely.MultiPolygon([g])
        elif shapely.get_type_id(g) == 7:  # a repaired polygon with lines: keep its areas
            polys = [p for p in shapely.get_parts(g) if shapely.get_type_id(p) in (3, 6)]
            out[i] = (
                shapely.MultiPolygon(
                    [
                        q
                        for p in polys
                        for q in (shapely.get_parts(p) if p.geom_type != "Polygon" else [p])
                    ]
                )
                if polys
                else None
            )
    return out


# --------------------------------------------------------------------------------------
# The GeoPackage
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpkgLayer:
    """One layer: its attribute columns (Arrow), geometry (WKB) and geometry type.

    ``batches`` (instead of ``table``) streams a large layer.
    """

    name: str
    geometry_type: str
    table: pa.Table | None = None
    batches: tuple[pa.Schema, Iterator[pa.RecordBatch]] | None = None
    spatial_index: bool = True


def write_geopackage(
    path: Path, layers: Sequence[GpkgLayer], crs: str | None, styles: Sequence[dict[str, Any]]
) -> None:
    """Write ``path`` with ``layers`` (geometry column ``geometry``, WKB) in ``crs``, then
    ``layer_styles`` (an attribute table). The dates GDAL writes are fixed
    (:data:`GPKG_DATE`), so the same layers give the same bytes; GDAL's file is then laid
    out as the release's one layout (:func:`geokanon.encoding.settle_sqlite`).
    """
    import pyogrio

    drafted = path.with_name(f"{path.stem}.draft{path.suffix}")  # GDAL wants .gpkg
    drafted.unlink(missing_ok=True)
    before = {name: pyogrio.get_gdal_config_option(name) for name in GPKG_WRITE_CONFIG}
    pyogrio.set_gdal_config_options(GPKG_WRITE_CONFIG)
    try:
        with warnings.catch_warnings():
            # no CRS is what --local-metres means (the manifest's crs_note says so)
            warnings.filterwarnings("ignore", message="'crs' was not provided")
            for layer in layers:
                _write_layer(drafted, layer, crs)
        if styles:
            _write_styles(drafted, styles)
    finally:
        pyogrio.set_gdal_config_options(before)
    path.unlink(missing_ok=True)
    try:
        settle_sqlite(drafted, path)
    finally:
        drafted.unlink(missing_ok=True)


def _write_layer(path: Path, layer: GpkgLayer, crs: str | None) -> None:
    import pyogrio

    data: Any = layer.table
    if layer.batches is not None:
        schema, it = layer.batches
        data = pa.RecordBatchReader.from_batches(schema, it)
    pyogrio.write_arrow(
        data, path, layer=layer.name, driver="GPKG", geometry_name="geometry",
        geometry_type=layer.geometry_type, crs=crs, append=path.exists(),
        layer_options={"GEOMETRY_NAME": GPKG_GEOMETRY, "FID": "fid",
                       "SPATIAL_INDEX": "YES" if layer.spatial_index else "NO"},
    )  # fmt: skip


def _write_styles(path: Path, styles: Sequence[dict[str, Any]]) -> None:
    import pyogrio

    def column(name: str) -> pa.Array:
        values = [s[name] for s in styles]
        if name == "useAsDefault":
            return pa.array([bool(v) for v in values])
        if name == "update_time":
            stamps = np.array([str(v).rstrip("Z") for v in values], dtype="datetime64[ms]")
            return pa.array(stamps).cast(pa.timestamp("ms", tz="UTC"))
        return pa.array([str(v) for v in values], type=pa.string())

    table = pa.table({name: column(name) for name in styles[0]})
    pyogrio.write_arrow(
        table, path, layer=GPKG_STYLES, driver="GPKG", append=True, geometry_type=None,
        layer_options={"FID": "id"},
    )  # fmt: skip

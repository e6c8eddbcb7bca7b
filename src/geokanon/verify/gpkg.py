"""``release.gpkg``, the analyst's GeoPackage, as the checks read it.

It repeats release files as map layers (:data:`geokanon.published.GPKG_LAYERS`) and is read
here with pyogrio (never through the writer): ``counts`` checks that every layer is
identical to its file and that each extent is its group's disc, ``no_leak`` scans every
layer as a table, ``holes`` that no layer carries a figure its file does not and that
``layer_styles`` holds the format's styles row for row, ``report_safety`` that the units
layer shows no 1..k-1 figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.published import (
    GPKG_FILE,
    GPKG_LAYERS,
    GPKG_OWN_COLUMNS,
    GPKG_SIZED_LAYERS,
    GPKG_STYLE_COLUMNS,
    GPKG_STYLES,
    layer_styles,
)
from geokanon.verify._arrays import is_text_type
from geokanon.verify._reader import ReleaseReader, same_crs
from geokanon.verify._results import Unreadable
from geokanon.verify.leak_rules import (
    Secrets,
    TableScan,
    add_counts,
    merge_counts,
    ordered_counts,
    text_column,
    text_counts,
    wkb_xy,
)

#
# The analyst's GeoPackage repeats release files as map layers (geokanon.published
# GPKG_LAYERS). It is read here with pyogrio (never through the writer): ``counts`` checks
# that every layer is identical to its file (and the extents are the groups' discs),
# ``no_leak`` scans every layer as a table and every vertex of the group and class
# polygons, ``holes`` that no layer carries a figure its file does not, ``report_safety``
# that the units layer shows no 1..k-1 figure. The units layer's polygons are the unit
# geography (the ``--units`` file's, or the grid's cells), made from no record; only its
# attributes are scanned.

_T = TypeVar("_T")

#: Rows per batch when the records layer is read.
_GPKG_ROWS = 1 << 18


def gpkg_path(rel: ReleaseReader) -> Path | None:
    path = rel.rel / GPKG_FILE
    return path if path.is_file() else None


def _gpkg_geometry_name(meta: Mapping[str, Any]) -> str:
    return str(meta.get("geometry_name") or "wkb_geometry")


def _cache(rel: ReleaseReader | None) -> dict[Any, Any]:
    """What the checks of one verification have read of release.gpkg (its layer list, its
    small layers), so that each is read once: keyed by the file's path, size and mtime."""
    if rel is None:
        return {}
    held: dict[Any, Any] = rel.__dict__.setdefault("_gpkg_read", {})  # one dict, whoever asks
    return held


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


#: Layers small enough to keep for the other checks (one row per unit or class).
_KEPT_LAYERS = frozenset({"units", "classes"})


def _gpkg_layer(
    path: Path, layer: str, rel: ReleaseReader | None = None, geometry: bool = True
) -> tuple[dict[str, Any], pa.Table]:
    """One layer whole: (pyogrio's metadata, the table; geometry as WKB named ``geometry``,
    left out when ``geometry`` is false). The units and classes layers are read once per
    verification of ``rel``."""
    held = _cache(rel)
    key = ("layer", _stamp(path), layer)
    if layer in _KEPT_LAYERS and key in held:
        meta, table = held[key]
        if not geometry and "geometry" in table.column_names:
            table = table.drop_columns(["geometry"])
        return meta, table
    if layer in _KEPT_LAYERS and rel is not None:
        geometry = True  # kept whole for the checks that want the geometry
    import pyogrio

    try:
        meta, table = pyogrio.read_arrow(path, layer=layer, read_geometry=geometry)
    except Exception as exc:  # pyogrio's DataSourceError, DataLayerError, ...
        raise Unreadable(
            f"{path.name} layer {layer!r} is unreadable ({type(exc).__name__})"
        ) from None
    out = (dict(meta), _gpkg_geometry_renamed(table, meta))
    if layer in _KEPT_LAYERS and rel is not None:
        held[key] = out
        if not geometry:
            return out[0], out[1].drop_columns(["geometry"])
    return out


def _gpkg_geometry_renamed(table: pa.Table | pa.RecordBatch, meta: Mapping[str, Any]) -> Any:
    names = list(table.schema.names)
    geo = _gpkg_geometry_name(meta)
    if geo in names:
        i = names.index(geo)
        col = table.column(i)
        plain = col.cast(pa.binary()) if not pa.types.is_binary(col.type) else col
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        table = table.set_column(i, "geometry", plain)
    return table


def _gpkg_batches(path: Path, layer: str) -> Iterator[pa.Table]:
    """The records layer in batches of rows (geometry as WKB named ``geometry``)."""
    import pyogrio

    try:
        with pyogrio.open_arrow(path, layer=layer, batch_size=_GPKG_ROWS, use_pyarrow=True) as (
            meta,
            reader,
        ):
            for batch in reader:
                yield _gpkg_geometry_renamed(batch, meta)
    except Unreadable:
        raise
    except Exception as exc:
        raise Unreadable(
            f"{path.name} layer {layer!r} is unreadable ({type(exc).__name__})"
        ) from None


def _gpkg_layer_names(path: Path, rel: ReleaseReader | None = None) -> dict[str, str | None]:
    held = _cache(rel)
    key = ("names", _stamp(path))
    if key in held:
        return dict(held[key])
    import pyogrio

    try:
        names = {str(n): (None if t is None else str(t)) for n, t in pyogrio.list_layers(path)}
    except Exception as exc:
        raise Unreadable(f"{path.name} is unreadable ({type(exc).__name__})") from None
    held[key] = dict(names)
    return names


def _same_values(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> bool:
    """Equal values and nulls (``b`` cast to ``a``'s type; text compared as text)."""
    if len(a) != len(b):
        return False
    try:
        if pa.types.is_dictionary(a.type):
            a = a.cast(a.type.value_type)
        if pa.types.is_dictionary(b.type):
            b = b.cast(b.type.value_type)
        if is_text_type(a.type) or is_text_type(b.type):
            a, b = a.cast(pa.large_string()), b.cast(pa.large_string())
        elif a.type != b.type:
            b = b.cast(a.type)
        same = pc.equal(a, b)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        ok = pc.or_(pc.fill_null(same, False), both_null)
        if pa.types.is_floating(a.type):
            ok = pc.or_(ok, pc.and_(pc.is_nan(a), pc.is_nan(b)))
        return bool(pc.all(ok).as_py() in (True, None))
    except (pa.ArrowException, TypeError, ValueError):
        return False


def _same_points(
    geometry: pa.ChunkedArray | pa.Array, x: NDArray[np.float64], y: NDArray[np.float64]
) -> bool:
    gx, gy = wkb_xy(geometry)
    return (
        gx.size == x.size
        and np.array_equal(gx, x, equal_nan=True)
        and np.array_equal(gy, y, equal_nan=True)
    )


def _parquet_slices(path: Path, columns: list[str]) -> Callable[[int], pa.Table]:
    """A reader of ``path`` that hands out the next ``n`` rows on each call."""
    file = pq.ParquetFile(path)
    schema = pa.schema([file.schema_arrow.field(c) for c in columns])
    it = file.iter_batches(batch_size=_GPKG_ROWS, columns=columns)
    held: list[pa.RecordBatch] = []
    have = 0

    def take(n: int) -> pa.Table:
        nonlocal have
        while have < n:
            batch = next(it, None)
            if batch is None:
                break
            held.append(batch)
            have += batch.num_rows
        table = pa.Table.from_batches(held, schema=held[0].schema) if held else schema.empty_table()
        out, rest = table.slice(0, n), table.slice(n)
        held.clear()
        held.extend(rest.to_batches())
        have = rest.num_rows
        return out

    return take


def _gpkg_records_problems(rel: ReleaseReader, path: Path) -> list[str]:
    """The records layer is ``records.parquet`` row by row (x, y as its points).

    ``no_leak`` reads the layer first and compares it on the way (:func:`_records_read`);
    its result is taken here instead of reading the layer a second time."""
    held = _cache(rel)
    key = ("records compared", _stamp(path))
    if key in held:
        return list(held[key])
    problems: list[str] = []
    for _ in _compared_records(rel, path, problems):
        pass
    return problems


def _records_read(rel: ReleaseReader | None, path: Path) -> Iterator[pa.Table]:
    """The records layer's batches, compared with ``records.parquet`` as they pass (for
    ``counts``, kept once every batch has been read)."""
    if rel is None:
        yield from _gpkg_batches(path, "records")
        return
    problems: list[str] = []
    yield from _compared_records(rel, path, problems)
    _cache(rel)[("records compared", _stamp(path))] = problems


def _compared_records(rel: ReleaseReader, path: Path, problems: list[str]) -> Iterator[pa.Table]:
    """Every batch of the records layer; ``problems`` receives how it differs from
    ``records.parquet`` (compared up to the first difference)."""
    rec_path = rel.rel / "records.parquet"
    if not rec_path.is_file():  # counts says records.parquet is missing
        yield from _gpkg_batches(path, "records")
        return
    names = [
        n for n in pq.ParquetFile(rec_path).schema_arrow.names if n not in ("geometry", "bbox")
    ]
    take = _parquet_slices(rec_path, names)
    attrs = [n for n in names if n not in ("x", "y")]
    n_rows = 0
    comparing = True
    for batch in _gpkg_batches(path, "records"):
        if comparing:
            comparing = _compare_records(batch, take, attrs, n_rows == 0, path, problems)
        n_rows += batch.num_rows
        yield batch
    total = int(pq.ParquetFile(rec_path).metadata.num_rows)
    if not problems and n_rows != total:
        problems.append(f"{path.name} records layer has not the {total} rows of records.parquet")


def _compare_records(
    batch: pa.Table,
    take: Callable[[int], pa.Table],
    attrs: list[str],
    first: bool,
    path: Path,
    problems: list[str],
) -> bool:
    """Whether ``batch`` is the next rows of records.parquet (else ``problems`` says how,
    or the file has no more rows)."""
    cols = set(batch.column_names) - {"geometry"} - _gpkg_own_columns()
    if first and cols != set(attrs):
        problems.append(
            f"{path.name} records layer has the columns {sorted(cols)[:8]}, "
            f"records.parquet {sorted(attrs)[:8]}"
        )
        return False
    part = take(batch.num_rows)
    if part.num_rows != batch.num_rows:
        return False  # more rows than records.parquet: the count says so
    bad = [c for c in attrs if not _same_values(part.column(c), batch.column(c))]
    x = part.column("x").to_numpy(zero_copy_only=False).astype(np.float64)
    y = part.column("y").to_numpy(zero_copy_only=False).astype(np.float64)
    if not _same_points(batch.column("geometry"), x, y):
        bad.append("geometry (x, y)")
    if bad:
        problems.append(f"{path.name} records layer differs from records.parquet in {bad[:4]}")
        return False
    return True


def _gpkg_own_columns() -> frozenset[str]:
    return GPKG_OWN_COLUMNS


def _gpkg_table_problems(
    name: str, table: pa.Table, frame: pd.DataFrame, columns: Sequence[str], where: str
) -> list[str]:
    """A layer's attribute columns equal to ``columns`` of ``frame`` (same rows, same order)."""
    got = set(table.column_names) - {"geometry"} - _gpkg_own_columns()
    if got != set(columns):
        return [
            f"release.gpkg {name} layer has the columns {sorted(got)[:8]}, "
            f"{where} {sorted(columns)}"
        ]
    if table.num_rows != len(frame):
        return [f"release.gpkg {name} layer has {table.num_rows} rows, {where} {len(frame)}"]
    bad = []
    for c in columns:
        try:
            ref = pa.array(frame[c], from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError):
            ref = pa.array(frame[c].astype(str).tolist())
        if not _same_values(ref, table.column(c)):
            bad.append(c)
    return [f"release.gpkg {name} layer differs from {where} in {bad[:4]}"] if bad else []


def _ring_vertices(
    geometry: pa.ChunkedArray | pa.Array,
) -> tuple[NDArray[np.uint8], int] | None:
    """The WKB of polygons that all have one ring of one length, as a byte matrix
    ``(polygons, bytes)`` over the array's own buffer (no copy) and the ring's vertex
    count (``None``: any other shape). Rows ``a:b`` give their vertices with
    :func:`_ring_block`."""
    import pyarrow.compute as pc

    arr = geometry.combine_chunks() if isinstance(geometry, pa.ChunkedArray) else geometry
    if not len(arr) or arr.null_count or not pa.types.is_binary(arr.type):
        return None
    lengths = pc.binary_length(arr).to_numpy()
    size = int(lengths[0])
    if (lengths != size).any() or size < 13 + 16 * 4 or (size - 13) % 16:
        return None
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr)]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    start = int(offsets[0])
    raw = data[start : start + size * len(arr)].reshape(len(arr), size)
    n_points = (size - 13) // 16
    head = np.frombuffer(
        b"\x01" + (3).to_bytes(4, "little") + (1).to_bytes(4, "little")
        + n_points.to_bytes(4, "little"), dtype=np.uint8,
    )  # fmt: skip
    for a in range(0, len(arr), _RING_BLOCK):
        if not (raw[a : a + _RING_BLOCK, :13] == head).all():
            return None
    return raw, n_points


def _ring_block(raw: NDArray[np.uint8], n_points: int, a: int, b: int) -> NDArray[np.float64]:
    """The vertices of polygons ``a:b`` of :func:`_ring_vertices`'s byte matrix, as an
    array ``(polygons, vertices, 2)``."""
    return np.ascontiguousarray(raw[a:b, 13:]).view("<f8").reshape(b - a, n_points, 2)


#: Polygons compared at a time (bounds the memory of the extent check: a few MB a block).
_RING_BLOCK = 1 << 15


def _gpkg_extent_problems(
    rel: ReleaseReader,
    table: pa.Table,
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    radius: NDArray[np.float64],
) -> list[str]:
    """Each extent is its group's disc as the release format draws it: in the working CRS,
    the regular n-gon circumscribing the disc of ``radius_m`` around the representative
    (vertex j at angle 2 pi j / n, ``radius_m / cos(pi / n)`` away), every vertex within
    1e-6 of its place (relative to the radius). So it holds every member, and it holds no
    number of its own. Compared in blocks of polygons (bounded memory)."""
    if not table.num_rows:
        return []
    ringed = _ring_vertices(table.column("geometry"))
    if ringed is None or ringed[1] < 5:
        return ["release.gpkg group_extents: a polygon that is not its group's disc"]
    raw, n_points = ringed
    n = n_points - 1  # a closed ring repeats its first vertex
    angle = 2 * np.pi * (np.arange(n + 1) % n) / n
    cos_a, sin_a = np.cos(angle)[None, :], np.sin(angle)[None, :]
    rx, ry = gx, gy
    if rel.to_working is not None:
        rx, ry = rel.to_working(gx, gy)
    rx, ry = np.asarray(rx), np.asarray(ry)
    n_off = 0
    for a in range(0, raw.shape[0], _RING_BLOCK):
        b = min(a + _RING_BLOCK, raw.shape[0])
        rings = _ring_block(raw, n_points, a, b)
        wx, wy = rings[:, :, 0], rings[:, :, 1]
        if rel.to_working is not None:
            tx, ty = rel.to_working(wx.ravel(), wy.ravel())
            wx, wy = np.asarray(tx).reshape(wx.shape), np.asarray(ty).reshape(wy.shape)
        rad = radius[a:b]
        reach = (rad / np.cos(np.pi / n))[:, None]
        ex = rx[a:b, None] + reach * cos_a
        ey = ry[a:b, None] + reach * sin_a
        off = (np.hypot(wx - ex, wy - ey) > 1e-6 * rad[:, None] + 1e-6).any(axis=1)
        n_off += int(off.sum())
    if n_off:
        return [
            f"release.gpkg group_extents: {n_off} extents are not the r_max disc of their group"
        ]
    return []


def gpkg_count_problems(rel: ReleaseReader) -> list[str]:
    """``counts`` over release.gpkg: its layers, their CRS, and each layer against its file."""
    path = gpkg_path(rel)
    if path is None:
        return []
    layers = _gpkg_layer_names(path, rel)
    problems = []
    declared = rel.manifest.get("gpkg_layers")
    want = set(GPKG_LAYERS)
    if isinstance(declared, list):
        # the per-record and per-group layers may be left out (--gpkg-records,
        # --gpkg-groups: both group layers or neither); every other one is there
        want = {str(v) for v in declared}
        if not (set(GPKG_LAYERS) - set(GPKG_SIZED_LAYERS) <= want <= set(GPKG_LAYERS)) or (
            ("groups" in want) != ("group_extents" in want)
        ):
            problems.append(f"manifest gpkg_layers {sorted(want)} are not the format's layers")
    want |= {GPKG_STYLES}
    if set(layers) != want:
        problems.append(
            f"{path.name} has the layers {sorted(layers)}, the release format {sorted(want)}"
        )
    crs = rel.manifest.get("crs")
    for name in GPKG_LAYERS:
        if name not in layers:
            continue
        if name == "records":
            problems += _gpkg_records_problems(rel, path)
            meta, _ = _gpkg_layer_meta(path, name)
        else:
            meta, table = _gpkg_layer(path, name, rel)
            problems += _gpkg_layer_problems(rel, name, table)
            del table
        got = meta.get("crs")
        if (crs is None) != (got is None) or not same_crs(got, crs):
            problems.append(f"{path.name} {name} layer is in {got}, the manifest's crs is {crs}")
    return problems


def _gpkg_layer_meta(path: Path, layer: str) -> tuple[dict[str, Any], None]:
    import pyogrio

    try:
        return dict(pyogrio.read_info(path, layer=layer)), None
    except Exception as exc:
        raise Unreadable(
            f"{path.name} layer {layer!r} is unreadable ({type(exc).__name__})"
        ) from None


def _gpkg_layer_problems(rel: ReleaseReader, name: str, table: pa.Table) -> list[str]:
    if name in ("groups", "group_extents"):
        g = rel.groups
        cols = [c for c in g.columns if c not in ("x", "y", "geometry", "bbox")]
        problems = _gpkg_table_problems(name, table, g, cols, "groups.parquet")
        if problems:
            return problems
        gx = pd.to_numeric(g["x"]).to_numpy(dtype=np.float64)
        gy = pd.to_numeric(g["y"]).to_numpy(dtype=np.float64)
        if name == "groups":
            ok = _same_points(table.column("geometry"), gx, gy)
            return [] if ok else ["release.gpkg groups layer: points differ from x, y"]
        radius = (
            pd.to_numeric(g["radius_m"]).to_numpy(dtype=np.float64)
            if "radius_m" in g
            else np.full(len(g), rel.r_max_m)
        )
        return _gpkg_extent_problems(rel, table, gx, gy, radius)
    if name == "units":
        u = rel.units_table
        return _gpkg_units_problems(table, u)
    if name == "classes":
        c = rel.classes
        cols = [col for col in c.columns if col not in ("geometry", "bbox")]
        problems = _gpkg_table_problems(name, table, c, cols, "classes.parquet")
        if problems or "geometry" not in c:
            return problems
        import shapely

        mine = shapely.from_wkb(np.array(table.column("geometry").to_pylist(), dtype=object))
        theirs = shapely.from_wkb(
            np.array([None if v is None else bytes(v) for v in c["geometry"]], dtype=object)
        )
        missing = shapely.is_missing(mine) != shapely.is_missing(theirs)
        both = ~shapely.is_missing(mine) & ~shapely.is_missing(theirs)
        differ = missing.copy()
        differ[both] = ~shapely.equals(mine[both], theirs[both])
        if differ.any():
            return [
                f"release.gpkg classes layer: {int(differ.sum())} geometries differ from "
                "classes.parquet"
            ]
        return []
    return []


def _gpkg_units_problems(table: pa.Table, units: pd.DataFrame) -> list[str]:
    """The units layer's cells, as text, are those of units.csv (``<k``, ``withheld`` too)."""
    got = set(table.column_names) - {"geometry"} - _gpkg_own_columns()
    if got != set(units.columns):
        return [
            f"release.gpkg units layer has the columns {sorted(got)[:8]}, units.csv "
            f"{sorted(map(str, units.columns))}"
        ]
    if table.num_rows != len(units):
        return [f"release.gpkg units layer has {table.num_rows} rows, units.csv {len(units)}"]
    bad = []
    for c in units.columns:
        mine = ["" if v is None else str(v) for v in table.column(str(c)).to_pylist()]
        if mine != [str(v) for v in units[c]]:
            bad.append(str(c))
    return [f"release.gpkg units layer differs from units.csv in {bad[:4]}"] if bad else []


def _scan_arrow_batches(
    names: Sequence[str],
    batches: Iterable[Sequence[tuple[str, pa.ChunkedArray | pa.Array]]],
    sec: Secrets,
) -> list[str]:
    """Table-level checks and the text of every text column, batch by batch (as Parquet)."""
    scan = TableScan(list(names), sec)
    text: dict[str, dict[str, int]] = {}
    for cols in batches:
        cells = {
            n: text_column(arr)
            for n, arr in cols
            if n != "geometry" and (pa.types.is_dictionary(arr.type) or is_text_type(arr.type))
        }
        scan.add(cols, text_cells=cells)
        for n, col in cells.items():
            legit = sec.legit_for(n) if sec.strict else None  # what the column holds by right
            add_counts(text.setdefault(n, {}), text_counts(col, sec, True, legit))
    found = scan.findings()
    text_found = [f for counts in text.values() for f in ordered_counts(counts)]
    return found + [f"text: {f}" for f in merge_counts(text_found)]


def gpkg_leaks(path: Path, sec: Secrets, rel: ReleaseReader | None = None) -> list[str]:
    """``no_leak`` over release.gpkg: every layer's columns and text, points decoded.

    Polygons are not searched: an extent's vertices are fixed by its published
    representative and ``radius_m`` (``counts`` checks every vertex), and the units' and
    classes' polygons are the unit geography. (A vertex lying within the tolerance of one
    of many source points by chance, as dense GPS fixes do, would fail a sound release.)
    """
    found: list[str] = []
    for name, kind in _gpkg_layer_names(path, rel).items():
        polygonal = kind is not None and "Polygon" in kind
        if name == "records":  # compared with records.parquet on the way, for counts
            tables: Iterable[pa.Table] = _records_read(rel, path)
        else:  # a polygon layer's geometry is not scanned: not read either
            tables = [_gpkg_layer(path, name, rel, geometry=not polygonal)[1]]
        names: list[str] = []
        it = _gpkg_columns(tables, polygonal, names)
        first = next(it, None)
        if first is None:
            continue
        layer_found = _scan_arrow_batches(names, _chain_first(first, it), sec)
        if layer_found:
            found.append(f"layer {name}: " + ", ".join(dict.fromkeys(layer_found)))
    return found


def _gpkg_columns(
    tables: Iterable[pa.Table], polygonal: bool, names: list[str]
) -> Iterator[list[tuple[str, Any]]]:
    """Each table's columns to scan (a polygon layer's without its geometry); ``names``
    receives the column names."""
    for t in tables:
        cols = [(n, t.column(n)) for n in t.column_names if not (polygonal and n == "geometry")]
        if not names:
            names.extend(n for n, _ in cols)
        yield cols


def _chain_first(first: _T, rest: Iterator[_T]) -> Iterator[_T]:
    yield first
    yield from rest


def _gpkg_style_problems(rel: ReleaseReader, path: Path, layers: Iterable[str]) -> list[str]:
    """``layer_styles`` holds :func:`geokanon.published.layer_styles` of the manifest's unit
    cap and the layers present, row for row and column for column (ids 1..n in order).

    A style is text a GIS shows (rule labels in the legend, a description) and rules it
    runs, so a figure could be written into one; the styles depend on nothing but the unit
    cap and the layers, so nothing else is accepted. Values are not quoted.
    """
    import datetime as dt

    import pyogrio

    cap = rel.manifest.get("unit_cap")
    if not isinstance(cap, int | float) or isinstance(cap, bool):
        return [f"{path.name} {GPKG_STYLES}: no unit cap in the manifest to check the styles by"]
    want = layer_styles(float(cap), [name for name in GPKG_LAYERS if name in layers])
    try:
        _, table = pyogrio.read_arrow(path, layer=GPKG_STYLES, return_fids=True)
    except Exception as exc:
        raise Unreadable(
            f"{path.name} layer {GPKG_STYLES!r} is unreadable ({type(exc).__name__})"
        ) from None
    names = [n for n in table.column_names if n != "id"]
    if names != list(GPKG_STYLE_COLUMNS):
        return [
            f"{path.name} {GPKG_STYLES}: columns other than the release format's "
            f"{list(GPKG_STYLE_COLUMNS)}"
        ]
    got = table.to_pylist()
    ids = [row.pop("id", None) for row in got]
    bad = abs(len(got) - len(want)) + (ids != list(range(1, len(got) + 1)))
    for have, row in zip(got, want, strict=False):
        expected = dict(row)
        expected["update_time"] = dt.datetime.fromisoformat(str(row["update_time"]))
        expected["useAsDefault"] = bool(row["useAsDefault"])
        bad += have != expected
    if bad:
        return [
            f"{path.name} {GPKG_STYLES}: {bad} rows other than the release format's styles "
            "(geokanon.published.layer_styles of the unit cap and the layers written); a "
            "style's labels and rules are text a GIS shows"
        ]
    return []


def gpkg_holes_problems(rel: ReleaseReader) -> list[str]:
    """Every layer's columns are its file's (no figure of its own); units cells as units.csv;
    the styles are the format's."""
    path = gpkg_path(rel)
    if path is None:
        return []
    layers = _gpkg_layer_names(path, rel)
    problems = _gpkg_style_problems(rel, path, layers) if GPKG_STYLES in layers else []
    for name, source in GPKG_LAYERS.items():
        if name not in layers:
            continue
        if name == "units":
            _, table = _gpkg_layer(path, name, rel)
            problems += [
                p + " (its figures must be units.csv's)"
                for p in _gpkg_units_problems(table, rel.units_table)
            ]
            continue
        # the other layers' values are their files' (``counts``): here, their columns
        info, _ = _gpkg_layer_meta(path, name)
        fields = {str(f) for f in info.get("fields", [])}
        if name == "records":
            rec = rel.rel / source
            own = set(pq.ParquetFile(rec).schema_arrow.names) if rec.is_file() else set()
            extra = fields - own - _gpkg_own_columns()
            if extra:
                problems.append(
                    f"release.gpkg records layer: columns {sorted(extra)[:4]} are figures the "
                    "release format does not declare"
                )
            continue
        columns = rel.group_columns if source == "groups.parquet" else rel.classes.columns
        extra = fields - set(map(str, columns)) - _gpkg_own_columns()
        if extra:
            problems.append(
                f"release.gpkg {name} layer: columns {sorted(extra)[:4]} are figures the "
                "release format does not declare"
            )
    return problems


def gpkg_safety_problems(rel: ReleaseReader) -> list[str]:
    """The units layer shows no figure of 1..k-1 (as units.csv)."""
    from geokanon.verify.report_safety import small_int

    path = gpkg_path(rel)
    if path is None or "units" not in _gpkg_layer_names(path, rel):
        return []
    _, table = _gpkg_layer(path, "units", rel)
    n = 0
    for col in ("suppressed", "generalised_up", "synthetic", "source_total"):
        if col in table.column_names:
            n += sum(
                small_int(str(v), rel.k) for v in table.column(col).to_pylist() if v is not None
            )
    return [f"release.gpkg units layer: {n} figures of 1..k-1"] if n else []


def point_file_problems(path: Path) -> list[str]:
    """``counts`` over a point file's own copies of its points (``groups.parquet``): each
    row's ``geometry`` is the point (``x``, ``y``) and its ``bbox`` that point's box, bit for
    bit. ``x``, ``y`` are what the other checks judge; the copies are what a GIS shows,
    and any other bits in them (a payload within the file's extent) no search would find.
    Read in batches of rows (a partitioned release's ``groups.parquet`` is large)."""
    if not path.is_file():
        return []
    try:
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        if not {"x", "y"} <= names:
            return []  # the checks that read x, y say so
        cols = ["x", "y", *(c for c in ("geometry", "bbox") if c in names)]
        off_geometry = off_box = 0
        for batch in pf.iter_batches(batch_size=_GPKG_ROWS, columns=cols):
            x = _bits(batch.column("x"))
            y = _bits(batch.column("y"))
            if "geometry" in cols:
                gx, gy = wkb_xy(batch.column("geometry"))
                same = (_bits(gx) == x) & (_bits(gy) == y)
                off_geometry += int(np.count_nonzero(~same))
            if "bbox" in cols:
                box = batch.column("bbox")
                valid = np.asarray(box.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
                sides = {f.name: _bits(box.field(f.name)) for f in box.type}
                same = valid & (len(sides) == 4)
                for side, want in (("xmin", x), ("ymin", y), ("xmax", x), ("ymax", y)):
                    same &= sides.get(side, want + 1) == want
                off_box += int(np.count_nonzero(~same))
    except (OSError, pa.ArrowException, ValueError, TypeError, KeyError):
        return [f"{path.name} is unreadable"]
    problems = []
    if off_geometry:
        problems.append(f"{off_geometry} {path.name} rows have a geometry other than their x, y")
    if off_box:
        problems.append(f"{off_box} {path.name} rows have a bbox other than their point's")
    return problems


def _bits(values: pa.Array | pa.ChunkedArray | NDArray[np.float64]) -> NDArray[np.int64]:
    """The float64 values as their 64 bits (null: NaN's), so equal means the same bits."""
    if not isinstance(values, np.ndarray):
        floats = pc.fill_null(pc.cast(values, pa.float64()), np.nan)
        values = np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.ascontiguousarray(values, dtype=np.float64).view(np.int64)


def geoparquet_bbox_problems(path: Path) -> list[str]:
    """``counts`` over the GeoParquet boxes of the polygon file (``classes.parquet``,
    ``path``): each row's ``bbox`` is its geometry's bounds, and the file's ``bbox`` their
    extent, so the boxes (which ``no_leak`` does not search: unit geography) hold nothing
    of their own."""
    import json

    import shapely

    if not path.is_file():
        return []
    table = pq.read_table(path)
    if "bbox" not in table.column_names or "geometry" not in table.column_names:
        return []
    raw = [None if v is None else bytes(v) for v in table.column("geometry").to_pylist()]
    geoms = shapely.from_wkb(np.array(raw, dtype=object))
    bounds = shapely.bounds(geoms) if len(geoms) else np.zeros((0, 4))
    boxes = table.column("bbox").combine_chunks()
    got = np.full((len(raw), 4), np.nan)
    valid = np.asarray(boxes.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    for i, child in enumerate(boxes.flatten()):
        got[:, i] = np.where(valid, child.to_numpy(zero_copy_only=False).astype(np.float64), np.nan)
    if not np.array_equal(got, bounds, equal_nan=True):
        return ["classes.parquet bbox differs from its geometries' bounds"]
    try:
        geo = json.loads((table.schema.metadata or {}).get(b"geo", b"{}"))
        file_box = geo["columns"]["geometry"].get("bbox")
    except (ValueError, KeyError, TypeError):
        return ["classes.parquet has no readable GeoParquet metadata"]
    ok = np.isfinite(bounds[:, 0])
    want = (
        None
        if not ok.any()
        else [bounds[ok, 0].min(), bounds[ok, 1].min(), bounds[ok, 2].max(), bounds[ok, 3].max()]
    )
    if (file_box is None) != (want is None) or (
        want is not None and [float(v) for v in file_box] != [float(v) for v in want]
    ):
        return ["classes.parquet GeoParquet bbox is not its geometries' extent"]
    return []

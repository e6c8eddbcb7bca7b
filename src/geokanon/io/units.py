"""Administrative units for records: from a polygon file (spatial join) or a regular grid.

Polygons are read with pyogrio, repaired with :func:`shapely.make_valid` when invalid,
and joined to the points with a :class:`shapely.STRtree`. A point on a shared border
or in an overlap goes to the first matching polygon in file order. Points in no
polygon go to an explicit ``unassigned`` unit, with a warning and the count.

Messages give counts, unit ids and 1-based row numbers, never a coordinate.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import shapely
from numpy.typing import NDArray

from geokanon.errors import InputError
from geokanon.io._names import closest_name
from geokanon.projection import crs_to_string, frame_crs, parse_crs, transformer

__all__ = [
    "UNASSIGNED",
    "UnitAssignment",
    "check_study_area",
    "grid_units",
    "polygon_units",
    "units_file_crs",
]

#: Name of the unit that collects points in no polygon.
UNASSIGNED = "unassigned"

#: Share of points in no polygon above which the points and polygons are taken not to match.
MAX_UNASSIGNED_SHARE = 0.5


@dataclass(frozen=True, eq=False)
class UnitAssignment:
    """Unit code per record and the name of each code.

    Attributes
    ----------
    codes
        Dense int64 code per record.
    names
        Unit id of each code (object array of str), sorted.
    n_unassigned
        Records in no polygon (in the ``unassigned`` unit); 0 for a grid.
    n_repaired
        Invalid polygons repaired with ``make_valid``.
    """

    codes: NDArray[np.int64]
    names: NDArray[np.object_]
    n_unassigned: int = 0
    n_repaired: int = 0


def _rows(mask: NDArray[np.bool_], limit: int = 10) -> str:
    idx = np.flatnonzero(mask)
    return ", ".join(str(i + 1) for i in idx[:limit]) + (" ..." if idx.size > limit else "")


def _open_info(path: Path) -> dict[str, object]:
    import pyogrio

    if not path.exists():
        raise InputError(f"unit polygon file {str(path)!r} does not exist")
    if path.is_dir() and path.suffix.lower() != ".gdb":
        raise InputError(f"unit polygon file {str(path)!r} is a directory; give a polygon file")
    try:
        info: dict[str, object] = pyogrio.read_info(path)
    except Exception as exc:  # pyogrio raises DataSourceError/DataLayerError (RuntimeError)
        raise InputError(
            f"unit polygon file {path.name!r} could not be read ({type(exc).__name__}); give a "
            "GeoPackage, GeoJSON, Shapefile or GeoParquet file of polygons"
        ) from None
    return info


def units_file_crs(path: str | Path) -> str | None:
    """CRS named in a polygon file's metadata (``None`` when it names none).

    Examples
    --------
    >>> units_file_crs("missing.gpkg")
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: unit polygon file 'missing.gpkg' does not exist
    """
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".geoparquet", ".pq"):
        frame = _read_geoparquet(p, None)
        return frame_crs(frame)
    crs = _open_info(p).get("crs")
    return crs_to_string(parse_crs(str(crs))) if crs else None


def _read_geoparquet(path: Path, column: str | None) -> pd.DataFrame:
    import geopandas as gpd

    if not path.exists():
        raise InputError(f"unit polygon file {str(path)!r} does not exist")
    try:
        return gpd.read_parquet(path)
    except Exception as exc:
        raise InputError(
            f"unit polygon file {path.name!r} could not be read as GeoParquet "
            f"({type(exc).__name__})"
        ) from None


def polygon_units(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    *,
    points_crs: str | None,
    path: str | Path,
    unit_id: str,
) -> UnitAssignment:
    """Assign each point the id of the polygon it lies in.

    Parameters
    ----------
    a, b
        Point coordinates (x/lon first) in ``points_crs``.
    points_crs
        CRS of the points; ``None`` means the polygon file's CRS.
    path
        Polygon file (GeoPackage, GeoJSON, Shapefile, GeoParquet).
    unit_id
        Column of the polygon file holding the unit id.

    Returns
    -------
    UnitAssignment

    Raises
    ------
    InputError
        Missing or unreadable file, unknown id column (the closest name is suggested),
        polygons without id or not polygonal, or most points in no polygon (the points
        and polygons are in different places: wrong CRS, or x/y swapped).

    Examples
    --------
    >>> import numpy as np, geopandas as gpd, shapely, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> f = os.path.join(d, "u.gpkg")
    >>> gpd.GeoDataFrame({"code": ["A", "B"]}, geometry=[shapely.box(0, 0, 10, 10),
    ...     shapely.box(10, 0, 20, 10)], crs="EPSG:28992").to_file(f)
    >>> u = polygon_units(np.array([1.0, 15, 3]), np.array([1.0, 5, 2]),
    ...                   points_crs="EPSG:28992", path=f, unit_id="code")
    >>> u.names[u.codes].tolist(), u.n_unassigned
    (['A', 'B', 'A'], 0)
    """
    import pyogrio

    p = Path(path)
    if p.suffix.lower() in (".parquet", ".geoparquet", ".pq"):
        frame = _read_geoparquet(p, unit_id)
        fields = [str(c) for c in frame.columns if c != frame.geometry.name]
    else:
        info = _open_info(p)
        fields = [str(f) for f in np.asarray(info.get("fields", []), dtype=object)]
        if unit_id in fields:
            try:
                frame = pyogrio.read_dataframe(p, columns=[unit_id])
            except Exception as exc:
                raise InputError(
                    f"unit polygon file {p.name!r} could not be read ({type(exc).__name__})"
                ) from None
    if unit_id not in fields:
        close = closest_name(unit_id, fields)
        hint = f"; did you mean {close!r}?" if close else "."
        raise InputError(
            f"unit id column {unit_id!r} is not in {p.name!r}{hint} Give it with --unit-id "
            f"(the file has {len(fields)} columns: {', '.join(map(repr, fields[:12]))})"
        )
    if len(frame) == 0:
        raise InputError(f"unit polygon file {p.name!r} has no features; give a file of polygons")
    geoms = np.asarray(frame.geometry.values, dtype=object)
    ids = frame[unit_id]
    no_id = np.asarray(ids.isna() | (ids.astype(str).str.strip() == ""))
    missing = np.asarray(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    if no_id.any():
        raise InputError(
            f"{int(no_id.sum())} polygons in {p.name!r} have no id in {unit_id!r} "
            f"(features {_rows(no_id)}); give every polygon an id"
        )
    types = shapely.get_type_id(geoms)
    not_poly = ~missing & ~np.isin(types, (3, 6))  # Polygon, MultiPolygon
    if not_poly.any():
        raise InputError(
            f"{int(not_poly.sum())} features of {p.name!r} are not polygons "
            f"(features {_rows(not_poly)}); --units takes a file of unit polygons"
        )
    names_str = ids.astype(str).str.strip().to_numpy(dtype=object)
    if UNASSIGNED in set(names_str):
        raise InputError(
            f"{p.name!r} has a unit called {UNASSIGNED!r}, the name geokanon gives to points in "
            "no polygon; rename that unit"
        )
    invalid = ~missing & ~np.asarray(shapely.is_valid(geoms))
    n_repaired = int(invalid.sum())
    if n_repaired:
        fixed = shapely.make_valid(geoms[invalid], method="structure", keep_collapsed=False)
        geoms = geoms.copy()
        geoms[invalid] = fixed
        warnings.warn(
            f"{n_repaired} unit polygons in {p.name!r} were invalid and were repaired with "
            "make_valid (features " + _rows(invalid) + ")",
            UserWarning,
            stacklevel=3,
        )
    poly_crs = frame_crs(frame)
    if points_crs is not None and poly_crs is not None and points_crs != poly_crs:
        with np.errstate(all="ignore"):
            pa, pb = transformer(points_crs, poly_crs).transform(a, b)
        pa, pb = np.asarray(pa, dtype=np.float64), np.asarray(pb, dtype=np.float64)
    else:
        pa, pb = a, b
    poly_index = _first_match(pa, pb, geoms, missing)
    outside = poly_index < 0
    n_out = int(outside.sum())
    n = int(a.size)
    if n and n_out / n > MAX_UNASSIGNED_SHARE:
        swapped = (
            int((_first_match(pb, pa, geoms, missing) >= 0).sum())
            if points_crs == poly_crs or points_crs is None or poly_crs is None
            else _swapped_hits(a, b, points_crs, poly_crs, geoms, missing)
        )
        hint = (
            "; with x and y exchanged most of them would fall inside: the coordinate columns "
            "look swapped (exchange --x/--y or --lon/--lat)"
            if swapped > n - n_out
            else ": check --crs (and the polygon file's CRS) and that x/y are not swapped"
        )
        raise InputError(
            f"{n_out} of {n} records ({100 * n_out / n:.1f}%) fall in no polygon of {p.name!r}; "
            f"the points and the unit polygons are not in the same place{hint}"
        )
    # only units that hold a record: an empty unit is no class and has no share
    codes_in, uniq = pd.factorize(pd.Series(names_str[poly_index[~outside]]), sort=True)
    names = np.asarray(uniq, dtype=object)
    codes = np.full(n, -1, dtype=np.int64)
    codes[~outside] = codes_in
    if n_out:
        names = np.append(names, UNASSIGNED).astype(object)
        codes[outside] = names.size - 1
        warnings.warn(
            f"{n_out} records fall in no polygon of {p.name!r} (rows {_rows(outside)}); they "
            f"form the unit {UNASSIGNED!r}",
            UserWarning,
            stacklevel=3,
        )
    return UnitAssignment(codes=codes, names=names, n_unassigned=n_out, n_repaired=n_repaired)


def _swapped_hits(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    points_crs: str,
    poly_crs: str,
    geoms: NDArray[np.object_],
    missing: NDArray[np.bool_],
) -> int:
    with np.errstate(all="ignore"):
        sa, sb = transformer(points_crs, poly_crs).transform(b, a)
    sa, sb = np.asarray(sa, dtype=np.float64), np.asarray(sb, dtype=np.float64)
    ok = np.isfinite(sa) & np.isfinite(sb)
    return int((_first_match(sa[ok], sb[ok], geoms, missing) >= 0).sum())


def _first_match(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    geoms: NDArray[np.object_],
    missing: NDArray[np.bool_],
) -> NDArray[np.int64]:
    """Index of the first polygon (file order) each point intersects, -1 for none."""
    out = np.full(a.size, -1, dtype=np.int64)
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return out
    valid_idx = np.flatnonzero(~missing)
    tree = shapely.STRtree(geoms[valid_idx])
    pts = shapely.points(a[finite], b[finite])
    pairs = tree.query(pts, predicate="intersects")
    if pairs.shape[1] == 0:
        return out
    pt, poly = pairs[0], valid_idx[pairs[1]]
    order = np.lexsort((poly, pt))
    pt, poly = pt[order], poly[order]
    first = np.ones(pt.size, dtype=bool)
    first[1:] = pt[1:] != pt[:-1]
    sub = np.full(int(finite.sum()), -1, dtype=np.int64)
    sub[pt[first]] = poly[first]
    out[finite] = sub
    return out


def grid_units(x: NDArray[np.float64], y: NDArray[np.float64], cell_m: float) -> UnitAssignment:
    """Assign each point the square grid cell of side ``cell_m`` metres it lies in.

    Cells are aligned on multiples of ``cell_m`` in the working metric CRS; a cell is
    named by its lower-left corner, e.g. ``E155000_N460000`` for 5 km cells.

    Examples
    --------
    >>> import numpy as np
    >>> u = grid_units(np.array([155100.0, 159999.0, 160001.0]), np.full(3, 461000.0), 5000)
    >>> u.names[u.codes].tolist()
    ['E155000_N460000', 'E155000_N460000', 'E160000_N460000']
    """
    if not (math.isfinite(cell_m) and cell_m > 0):
        raise InputError(f"--unit-grid must be a finite cell size > 0 in metres, got {cell_m}")
    ix = np.floor(np.asarray(x) / cell_m).astype(np.int64)
    iy = np.floor(np.asarray(y) / cell_m).astype(np.int64)
    if ix.size == 0:
        return UnitAssignment(codes=np.zeros(0, dtype=np.int64), names=np.zeros(0, dtype=object))
    # One integer per cell, ordered as (ix, iy): factorised without tuples.
    x0, y0 = int(ix.min()), int(iy.min())
    span = int(iy.max()) - y0 + 1
    codes, uniq = pd.factorize((ix - x0) * span + (iy - y0), sort=True)
    ux, uy = uniq // span + x0, uniq % span + y0
    cells = zip(ux.tolist(), uy.tolist(), strict=True)
    names = np.asarray([f"E{i * cell_m:.0f}_N{j * cell_m:.0f}" for i, j in cells], dtype=object)
    return UnitAssignment(codes=codes.astype(np.int64), names=names)


def check_study_area(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    *,
    points_crs: str | None,
    path: str | Path,
) -> None:
    """Refuse records outside the declared study area (any polygon of the file).

    Parameters
    ----------
    a, b
        Point coordinates (x/lon first) in ``points_crs``.
    points_crs
        CRS of the points; ``None`` means the study-area file's CRS.
    path
        Polygon file of the study area.

    Raises
    ------
    InputError
        Records outside every polygon: the count, the rows and the likely cause
        (swapped columns when exchanging them would put the points inside).

    Examples
    --------
    >>> import numpy as np, geopandas as gpd, shapely, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "area.gpkg")
    >>> gpd.GeoDataFrame(geometry=[shapely.box(0, 0, 100, 50)], crs="EPSG:28992").to_file(f)
    >>> check_study_area(np.array([10.0]), np.array([20.0]), points_crs="EPSG:28992", path=f)
    >>> check_study_area(np.array([20.0]), np.array([70.0]), points_crs="EPSG:28992", path=f)
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: 1 of 1 records lie outside the study area 'area.gpkg' (rows 1); \
with x and y exchanged they would lie inside: the coordinate columns look swapped (exchange \
--x/--y or --lon/--lat)
    """
    import pyogrio

    p = Path(path)
    if p.suffix.lower() in (".parquet", ".geoparquet", ".pq"):
        frame = _read_geoparquet(p, None)
    else:
        _open_info(p)
        try:
            frame = pyogrio.read_dataframe(p, columns=[])
        except Exception as exc:
            raise InputError(
                f"study area file {p.name!r} could not be read ({type(exc).__name__})"
            ) from None
    if len(frame) == 0:
        raise InputError(f"study area file {p.name!r} has no features; give a polygon file")
    geoms = np.asarray(frame.geometry.values, dtype=object)
    missing = np.asarray(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    types = shapely.get_type_id(geoms)
    if (~missing & ~np.isin(types, (3, 6))).any():
        raise InputError(f"the study area file {p.name!r} holds features that are not polygons")
    invalid = ~missing & ~np.asarray(shapely.is_valid(geoms))
    if invalid.any():
        geoms = geoms.copy()
        geoms[invalid] = shapely.make_valid(
            geoms[invalid], method="structure", keep_collapsed=False
        )
    area_crs = frame_crs(frame)
    if points_crs is not None and area_crs is not None and points_crs != area_crs:
        with np.errstate(all="ignore"):
            pa, pb = transformer(points_crs, area_crs).transform(a, b)
        pa, pb = np.asarray(pa, dtype=np.float64), np.asarray(pb, dtype=np.float64)
    else:
        pa, pb = a, b
    outside = _first_match(pa, pb, geoms, missing) < 0
    if not outside.any():
        return
    n_out, n = int(outside.sum()), int(a.size)
    if points_crs is not None and area_crs is not None and points_crs != area_crs:
        swapped = _swapped_hits(a[outside], b[outside], points_crs, area_crs, geoms, missing)
    else:
        swapped = int((_first_match(pb[outside], pa[outside], geoms, missing) >= 0).sum())
    hint = (
        "with x and y exchanged they would lie inside: the coordinate columns look swapped "
        "(exchange --x/--y or --lon/--lat)"
        if swapped > n_out / 2
        else "check --crs and the study area file, or drop these records"
    )
    raise InputError(
        f"{n_out} of {n} records lie outside the study area {p.name!r} (rows {_rows(outside)}); "
        f"{hint}"
    )

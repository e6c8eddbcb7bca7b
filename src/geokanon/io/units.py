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

from geokanon._cells import cell_range, dense_cells, remap
from geokanon.errors import InputError
from geokanon.io._names import closest_name
from geokanon.projection import crs_to_string, frame_crs, parse_crs, transformer

__all__ = [
    "UNASSIGNED",
    "UnitAssignment",
    "UnitMerge",
    "check_study_area",
    "grid_units",
    "merge_small_units",
    "polygon_units",
    "unit_adjacency",
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
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    if xa.size == 0:
        return UnitAssignment(codes=np.zeros(0, dtype=np.int64), names=np.zeros(0, dtype=object))
    # One integer per cell, ordered as (ix, iy): factorised without tuples. Compiled
    # passes (geokanon._cells, as the Dask tiles' codes): the cells' range, then each
    # point's cell on the dense grid of that range, ranked through the occupied cells.
    none = np.zeros(0, np.int64)
    x0, x1, y0, y1, ok = cell_range(xa, ya, none, False, 0.0, 0.0, float(cell_m))
    span = y1 - y0 + 1
    n_keys = (x1 - x0 + 1) * span
    if ok and n_keys <= 4 * xa.size:
        codes = np.empty(xa.size, dtype=np.int64)
        present = dense_cells(
            xa, ya, none, False, 0.0, 0.0, float(cell_m), x0, y0, x1 - x0 + 1, span, codes
        )
        uniq = np.flatnonzero(present)
        remap(codes, np.cumsum(present, dtype=np.int64) - 1)
    else:
        ix = np.floor(xa / cell_m).astype(np.int64)
        iy = np.floor(ya / cell_m).astype(np.int64)
        x0, y0 = int(ix.min()), int(iy.min())
        span = int(iy.max()) - y0 + 1
        codes, uniq = pd.factorize((ix - x0) * span + (iy - y0), sort=True)
    ux, uy = uniq // span + x0, uniq % span + y0
    cells = zip(ux.tolist(), uy.tolist(), strict=True)
    names = np.asarray([f"E{i * cell_m:.0f}_N{j * cell_m:.0f}" for i, j in cells], dtype=object)
    return UnitAssignment(codes=np.asarray(codes, dtype=np.int64), names=names)


def check_study_area(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    *,
    points_crs: str | None,
    path: str | Path,
    clip: bool = False,
) -> NDArray[np.bool_] | None:
    """Refuse (or, with ``clip``, mark) records outside the declared study area.

    Parameters
    ----------
    a, b
        Point coordinates (x/lon first) in ``points_crs``.
    points_crs
        CRS of the points; ``None`` means the study-area file's CRS.
    path
        Polygon file of the study area (a record inside any of its polygons is inside).
    clip
        Return the records outside instead of refusing them (``--clip``). Still refused:
        every record outside, or most of them when exchanging x and y would put them
        inside (swapped columns are a mistake to fix, not records to drop).

    Returns
    -------
    numpy.ndarray or None
        With ``clip``, the mask of records outside (``None`` when there are none);
        without, ``None``.

    Raises
    ------
    InputError
        Records outside every polygon (without ``clip``): the count, the rows and the
        likely cause (swapped columns when exchanging them would put the points inside).

    Examples
    --------
    >>> import numpy as np, geopandas as gpd, shapely, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "area.gpkg")
    >>> gpd.GeoDataFrame(geometry=[shapely.box(0, 0, 100, 50)], crs="EPSG:28992").to_file(f)
    >>> check_study_area(np.array([10.0]), np.array([20.0]), points_crs="EPSG:28992", path=f)
    >>> check_study_area(np.array([10.0, 500.0]), np.array([20.0, 20.0]),
    ...                  points_crs="EPSG:28992", path=f, clip=True).tolist()
    [False, True]
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
        return None
    n_out, n = int(outside.sum()), int(a.size)
    if points_crs is not None and area_crs is not None and points_crs != area_crs:
        swapped = _swapped_hits(a[outside], b[outside], points_crs, area_crs, geoms, missing)
    else:
        swapped = int((_first_match(pb[outside], pa[outside], geoms, missing) >= 0).sum())
    hint = (
        "with x and y exchanged they would lie inside: the coordinate columns look swapped "
        "(exchange --x/--y or --lon/--lat)"
        if swapped > n_out / 2
        else "check --crs and the study area file, or drop these records (--clip drops them "
        "and counts them)"
    )
    if clip and n_out < n and swapped <= n_out / 2:
        return outside
    if clip and swapped <= n_out / 2:
        hint = "nothing is left to clip to: check --crs and the study area file"
    raise InputError(
        f"{n_out} of {n} records lie outside the study area {p.name!r} (rows {_rows(outside)}); "
        f"{hint}"
    )


def unit_adjacency(path: str | Path, unit_id: str) -> frozenset[tuple[str, str]]:
    """Pairs of units whose polygons share a border (or overlap), each pair sorted.

    Two units are neighbours when any of their polygons intersect (a shared edge or
    corner, or an overlap from imperfect digitising); the polygons are compared in the
    file's own CRS, so no reprojection opens gaps between them.

    Examples
    --------
    >>> import geopandas as gpd, shapely, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "u.gpkg")
    >>> gpd.GeoDataFrame({"code": ["A", "B", "C"]}, geometry=[shapely.box(0, 0, 10, 10),
    ...     shapely.box(10, 0, 20, 10), shapely.box(50, 0, 60, 10)], crs="EPSG:28992").to_file(f)
    >>> sorted(unit_adjacency(f, "code"))
    [('A', 'B')]
    """
    import pyogrio

    p = Path(path)
    if p.suffix.lower() in (".parquet", ".geoparquet", ".pq"):
        frame = _read_geoparquet(p, unit_id)
    else:
        _open_info(p)
        frame = pyogrio.read_dataframe(p, columns=[unit_id])
    geoms = np.asarray(frame.geometry.values, dtype=object)
    ids = frame[unit_id].astype(str).str.strip().to_numpy(dtype=object)
    ok = ~np.asarray(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    geoms, ids = geoms[ok], ids[ok]
    invalid = ~np.asarray(shapely.is_valid(geoms))
    if invalid.any():
        geoms = geoms.copy()
        geoms[invalid] = shapely.make_valid(
            geoms[invalid], method="structure", keep_collapsed=False
        )
    tree = shapely.STRtree(geoms)
    left, right = tree.query(geoms, predicate="intersects")
    pairs = set()
    for i, j in zip(ids[left].tolist(), ids[right].tolist(), strict=True):
        if i != j:
            pairs.add((min(i, j), max(i, j)))
    return frozenset(pairs)


@dataclass(frozen=True, eq=False)
class UnitMerge:
    """Units after merging the small ones into neighbours (``--merge-small-units N``).

    Attributes
    ----------
    codes, names
        Unit code per record and the (sorted) name of each code after merging. A
        merged unit is named by its source units joined with ``+`` in sorted order
        (``GM0203+GM0307``), so its name says which units it stands for.
    merged
        Source unit -> merged unit, for every source unit that was merged.
    left_small
        Units (after merging) still below the threshold that had no neighbour to join.
    """

    codes: NDArray[np.int64]
    names: NDArray[np.object_]
    merged: dict[str, str]
    left_small: tuple[str, ...] = ()


def _exact_sums(
    values: NDArray[np.float64], order: NDArray[np.intp], starts: list[int]
) -> list[float]:
    """Per-unit sums, exact (``math.fsum``), so they do not depend on the rows' order."""
    v = values[order]
    ends = [*starts[1:], v.size]
    return [math.fsum(v[a:b].tolist()) for a, b in zip(starts, ends, strict=True)]


def merge_small_units(
    codes: NDArray[np.int64],
    names: NDArray[np.object_],
    subjects: NDArray[np.int64] | None,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    min_subjects: int,
    *,
    adjacency: frozenset[tuple[str, str]] | None = None,
) -> UnitMerge:
    """Merge every unit with fewer than ``min_subjects`` distinct subjects into a neighbour.

    Repeatedly, the unit with the fewest subjects below the threshold (ties: the
    smaller name) joins its neighbour: with ``adjacency`` (unit polygons), among the
    units whose polygons touch it; without, among all units; of those, the one whose
    centre of records is nearest (ties: the smaller name). Merging stops when every
    unit holds ``min_subjects`` or the small ones left have no neighbour. The
    ``unassigned`` unit (points in no polygon) has no place and is never merged. The
    centres are computed from the records (custodian-only; never published) with exact
    sums, so the outcome does not depend on the input's row order.

    Parameters
    ----------
    codes, names
        Unit code per record and the name of each code.
    subjects
        Dense subject code per record (``None``: every record its own subject).
    x, y
        Working coordinates, metres.
    min_subjects
        The threshold N: units with fewer distinct subjects are merged.
    adjacency
        Pairs of neighbouring units (:func:`unit_adjacency`), or ``None``.

    Returns
    -------
    UnitMerge

    Examples
    --------
    >>> import numpy as np
    >>> u = merge_small_units(np.array([0, 0, 0, 1, 2, 2]), np.array(["A", "B", "C"], dtype=object),
    ...                       None, np.array([0.0, 1, 2, 3, 90, 91]), np.zeros(6), 2)
    >>> u.names.tolist(), u.merged
    (['A+B', 'C'], {'A': 'A+B', 'B': 'A+B'})
    """
    codes = np.asarray(codes, dtype=np.int64)
    names = np.asarray(names, dtype=object)
    if not (isinstance(min_subjects, int) and not isinstance(min_subjects, bool)):
        raise InputError(f"--merge-small-units must be an integer >= 2, got {min_subjects!r}")
    if min_subjects < 2:
        raise InputError(f"--merge-small-units must be an integer >= 2, got {min_subjects}")
    n_units = int(names.size)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=n_units)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
    sx = _exact_sums(np.asarray(x, dtype=np.float64), order, starts)
    sy = _exact_sums(np.asarray(y, dtype=np.float64), order, starts)
    subj = np.arange(codes.size) if subjects is None else np.asarray(subjects)
    members: dict[int, list[str]] = {}
    people: dict[int, NDArray[np.int64]] = {}
    ends = [*starts[1:], codes.size]
    sorted_subj = subj[order]
    for u in range(n_units):
        members[u] = [str(names[u])]
        people[u] = np.unique(sorted_subj[starts[u] : ends[u]])
    cnt = {u: int(counts[u]) for u in range(n_units)}
    cx, cy = dict(enumerate(sx)), dict(enumerate(sy))
    neighbours: dict[int, set[int]] | None = None
    if adjacency is not None:
        index = {str(nm): u for u, nm in enumerate(names.tolist())}
        neighbours = {u: set() for u in range(n_units)}
        for a, b in adjacency:
            if a in index and b in index:
                neighbours[index[a]].add(index[b])
                neighbours[index[b]].add(index[a])
    alive = {u for u in range(n_units) if str(names[u]) != UNASSIGNED and cnt[u] > 0}
    owner = np.arange(n_units)  # source unit -> the live unit holding it
    stuck: set[int] = set()

    def label(u: int) -> str:
        return "+".join(sorted(members[u]))

    while True:
        small = [u for u in alive - stuck if people[u].size < min_subjects]
        if not small:
            break
        u = min(small, key=lambda v: (people[v].size, label(v)))
        cand = (alive - {u}) if neighbours is None else (neighbours[u] & alive)
        if not cand:
            stuck.add(u)
            continue
        ux, uy = cx[u] / cnt[u], cy[u] / cnt[u]
        v = min(
            cand, key=lambda w: ((cx[w] / cnt[w] - ux) ** 2 + (cy[w] / cnt[w] - uy) ** 2, label(w))
        )
        # v absorbs u
        members[v] += members[u]
        people[v] = np.union1d(people[v], people[u])
        cnt[v] += cnt[u]
        cx[v] += cx[u]
        cy[v] += cy[u]
        if neighbours is not None:
            neighbours[v] |= neighbours[u]
            neighbours[v] -= {u, v}
            for w in neighbours[u]:
                neighbours[w].discard(u)
                if w != v:
                    neighbours[w].add(v)
        owner[owner == u] = v
        alive.discard(u)
        stuck.discard(v)  # a bigger unit may have new neighbours
    final = np.asarray([label(int(o)) for o in owner], dtype=object)
    existing = {str(nm) for nm in names.tolist()}
    merged = {str(names[u]): str(final[u]) for u in range(n_units) if final[u] != names[u]}
    clash = sorted({m for m in merged.values() if m in existing})
    if clash:
        raise InputError(
            f"merging small units would name a merged unit {clash[0]!r}, which is already the "
            "id of a unit; rename the units so that no id contains '+'"
        )
    new_names, inverse = np.unique(final, return_inverse=True)
    left = tuple(sorted(label(u) for u in stuck if u in alive))
    return UnitMerge(
        codes=np.asarray(inverse, dtype=np.int64)[codes],
        names=np.asarray(new_names, dtype=object),
        merged=merged,
        left_small=left,
    )

"""Choose and apply a metric CRS: every distance geokanon measures is in metres.

Longitude/latitude input is projected to a local metric CRS chosen from the data:
the UTM zone of the data's median longitude when that keeps every distance within
:data:`UTM_MAX_SCALE_ERROR` of true, otherwise a Lambert azimuthal equal-area
projection centred on the data (within :data:`LAEA_MAX_SCALE_ERROR`), otherwise a
refusal. Data that straddle the antimeridian are centred across it, so a cluster at
longitudes 179.9 and -179.9 is one cluster.

What crosses a process boundary is the small frozen recipe, :class:`Projection`
(CRS strings); the expensive :class:`pyproj.Transformer` objects are built once per
pair of CRSs and cached.

Examples
--------
>>> import numpy as np
>>> crs = choose_metric_crs(np.array([116.3, 116.4]), np.array([39.9, 40.0]))
>>> crs_to_string(crs)
'EPSG:32650'
>>> p = Projection(source_crs="EPSG:4326", working_crs="EPSG:32650")
>>> x, y = p.to_metric(np.array([116.3]), np.array([39.9]))
>>> lon, lat = p.from_metric(x, y)
>>> bool(abs(lon[0] - 116.3) < 1e-9 and abs(lat[0] - 39.9) < 1e-9)
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pyproj
from numpy.typing import NDArray

from geokanon.errors import InputError

__all__ = [
    "LAEA_MAX_SCALE_ERROR",
    "SCALE_GRID_M",
    "UTM_MAX_SCALE_ERROR",
    "Projection",
    "ScaleRange",
    "choose_metric_crs",
    "crs_to_string",
    "frame_crs",
    "from_metric",
    "is_geographic",
    "is_metric",
    "parse_crs",
    "scale_factor_range",
    "to_metric",
    "transformer",
]

#: Largest relative distance error accepted from the UTM zone of the median longitude.
UTM_MAX_SCALE_ERROR = 0.02
#: Largest relative distance error accepted from a data-centred equal-area projection.
LAEA_MAX_SCALE_ERROR = 0.05
#: The region over which :func:`scale_factor_range` is taken is snapped outward to
#: multiples of this many working metres, so the range says nothing finer about where
#: the extreme records are.
SCALE_GRID_M = 10_000.0
#: Grid nodes per axis at most over that region.
_SCALE_NODES_MAX = 65
#: Published scale factors are rounded outward to this many decimals.
_SCALE_DECIMALS = 7

FloatArray = NDArray[np.float64]


def parse_crs(text: str | pyproj.CRS, *, flag: str = "--crs") -> pyproj.CRS:
    """Parse a CRS name (``EPSG:28992``, WKT, PROJ string) or raise :class:`InputError`.

    Examples
    --------
    >>> parse_crs("EPSG:28992").is_projected
    True
    """
    if isinstance(text, pyproj.CRS):
        return text
    try:
        return pyproj.CRS.from_user_input(text)
    except (pyproj.exceptions.CRSError, TypeError, ValueError):
        raise InputError(
            f"{flag} {text!r} is not a coordinate reference system pyproj knows; "
            "give an authority code such as EPSG:28992 (projected, metres) or EPSG:4326 (lon/lat)"
        ) from None


def crs_to_string(crs: pyproj.CRS) -> str:
    """Short, re-readable name of a CRS: ``AUTH:CODE`` when it has one, else its PROJ string or WKT.

    Examples
    --------
    >>> crs_to_string(pyproj.CRS("epsg:4326"))
    'EPSG:4326'
    """
    auth = crs.to_authority(min_confidence=100)
    if auth is not None:
        return f"{auth[0]}:{auth[1]}"
    if crs.srs.startswith("+proj"):
        return str(crs.srs)
    return str(crs.to_wkt())


def frame_crs(frame: object) -> str | None:
    """The CRS of a GeoDataFrame as a string (``None`` for a plain frame or no CRS).

    Examples
    --------
    >>> import pandas as pd
    >>> frame_crs(pd.DataFrame({"a": [1]})) is None
    True
    """
    crs = getattr(frame, "crs", None)
    if crs is None or not hasattr(frame, "_geometry_column_name"):
        return None
    return crs_to_string(pyproj.CRS.from_user_input(crs))


def is_geographic(crs: pyproj.CRS) -> bool:
    """True when the CRS's coordinates are angles (longitude/latitude); never raises."""
    try:
        return bool(crs.is_geographic)
    except Exception:  # pragma: no cover - defensive: predicates never raise
        return False


def is_metric(crs: pyproj.CRS) -> bool:
    """True when the CRS is projected with both horizontal axes in metres; never raises.

    Examples
    --------
    >>> is_metric(pyproj.CRS("EPSG:28992")), is_metric(pyproj.CRS("EPSG:2230"))
    (True, False)
    """
    try:
        axes = crs.axis_info[:2]
        return bool(crs.is_projected) and all(
            a.unit_name in ("metre", "meter") and a.unit_conversion_factor == 1.0 for a in axes
        )
    except Exception:  # pragma: no cover
        return False


@functools.lru_cache(maxsize=32)
def transformer(source: str, target: str) -> pyproj.Transformer:
    """The (cached) transformer between two CRSs, axis order always x/lon first.

    Built once per pair of CRS strings: building a transformer is the expensive part.
    """
    return pyproj.Transformer.from_crs(source, target, always_xy=True)


def _wrap(lon: FloatArray) -> FloatArray:
    """Longitudes wrapped to [-180, 180)."""
    return np.asarray((lon + 180.0) % 360.0 - 180.0, dtype=np.float64)


def _centre_lon(lon: FloatArray) -> float:
    """Median longitude, taken across the antimeridian when the data straddle it."""
    w = _wrap(lon)
    shifted = w % 360.0  # [0, 360): contiguous across the antimeridian
    if np.ptp(shifted) < np.ptp(w):
        return float(_wrap(np.asarray([np.median(shifted)]))[0])
    return float(np.median(w))


def _utm_scale_error(lon: FloatArray, lat: FloatArray, lon_0: float) -> float:
    """Largest |k - 1| of a transverse Mercator (k0 0.9996) at the points (spherical formula)."""
    dlam = np.radians(_wrap(lon - lon_0))
    b = np.cos(np.radians(lat)) * np.sin(dlam)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = 0.9996 / np.sqrt(1.0 - b * b)
    k = np.where(np.isfinite(k), k, np.inf)
    return float(np.max(np.abs(k - 1.0)))


def _angular_distance(lon: FloatArray, lat: FloatArray, lon_0: float, lat_0: float) -> FloatArray:
    """Great-circle angle (radians) from the centre to each point."""
    p1, p2 = np.radians(lat_0), np.radians(lat)
    dl = np.radians(_wrap(lon - lon_0))
    c = np.sin(p1) * np.sin(p2) + np.cos(p1) * np.cos(p2) * np.cos(dl)
    return np.asarray(np.arccos(np.clip(c, -1.0, 1.0)), dtype=np.float64)


def choose_metric_crs(lon: FloatArray, lat: FloatArray) -> pyproj.CRS:
    """A metric CRS in which distances between these points are close to true.

    The UTM zone (WGS 84) of the median longitude, hemisphere from the median latitude,
    when every point's scale error there is at most :data:`UTM_MAX_SCALE_ERROR`;
    otherwise a Lambert azimuthal equal-area projection centred on the data (centre
    rounded to 0.1 degree, so no record's coordinate is published in the CRS name) when
    its error stays within :data:`LAEA_MAX_SCALE_ERROR`. The antimeridian is handled:
    points on either side of it are centred across it.

    Parameters
    ----------
    lon, lat
        Degrees (WGS 84 or any geographic CRS close to it), finite, lat in [-90, 90].

    Returns
    -------
    pyproj.CRS

    Raises
    ------
    InputError
        No points, or points spread so widely that no single metric CRS keeps distances
        within the tolerance (split the input by region).

    Examples
    --------
    >>> import numpy as np
    >>> crs_to_string(choose_metric_crs(np.array([4.9, 5.1]), np.array([52.3, 52.1])))
    'EPSG:32631'
    >>> choose_metric_crs(np.array([179.8, 179.9, -179.9]), np.full(3, -17.0)).name
    'WGS 84 / UTM zone 60S'
    >>> choose_metric_crs(np.array([-10.0, 30.0]), np.array([36.0, 70.0])).name
    'unknown'
    """
    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    if lon.size == 0:
        raise InputError("no points to choose a metric CRS for")
    lon_c = _centre_lon(lon)
    lat_c = float(np.median(lat))
    zone = math.floor((lon_c + 180.0) / 6.0) % 60 + 1
    zone_lon_0 = -183.0 + 6.0 * zone
    if abs(lat_c) <= 84.0 and _utm_scale_error(lon, lat, zone_lon_0) <= UTM_MAX_SCALE_ERROR:
        return pyproj.CRS.from_epsg((32600 if lat_c >= 0 else 32700) + zone)
    # equal-area, centred on the middle of the data's extent (rounded: no record's coordinate)
    w = _wrap(lon)
    shifted = w % 360.0
    span_lon = shifted if np.ptp(shifted) < np.ptp(w) else w
    lon_0 = round(float(_wrap(np.asarray([(span_lon.min() + span_lon.max()) / 2]))[0]), 1)
    lat_0 = round(float((lat.min() + lat.max()) / 2), 1)
    c = float(np.max(_angular_distance(lon, lat, lon_0, lat_0)))
    error = 1.0 / math.cos(c / 2.0) - 1.0 if c < math.pi else math.inf
    if error > LAEA_MAX_SCALE_ERROR:
        raise InputError(
            f"the points spread {math.degrees(c):.0f} degrees from their centre: no single "
            f"metric CRS keeps distances within {100 * LAEA_MAX_SCALE_ERROR:.0f}% of true; "
            "split the input by region, or name a metric CRS with --working-crs"
        )
    return pyproj.CRS.from_proj4(
        f"+proj=laea +lat_0={lat_0:g} +lon_0={lon_0:g} +x_0=0 +y_0=0 +datum=WGS84 +units=m "
        "+no_defs +type=crs"
    )


def to_metric(
    a: FloatArray, b: FloatArray, source: str, working: str
) -> tuple[FloatArray, FloatArray]:
    """Coordinates of ``source`` (x/lon first) in the metric CRS ``working``.

    Raises
    ------
    InputError
        Some points cannot be transformed (outside the projection's domain).

    Examples
    --------
    >>> import numpy as np
    >>> x, y = to_metric(np.array([5.387]), np.array([52.155]), "EPSG:4326", "EPSG:28992")
    >>> round(float(x[0]) / 1000), round(float(y[0]) / 1000)
    (155, 463)
    """
    return _apply(transformer(source, working), a, b, source, working)


def from_metric(
    x: FloatArray, y: FloatArray, working: str, target: str
) -> tuple[FloatArray, FloatArray]:
    """Metric coordinates of ``working`` back in ``target`` (x/lon first).

    Examples
    --------
    >>> import numpy as np
    >>> lon, lat = from_metric(np.array([155000.0]), np.array([463000.0]), "EPSG:28992",
    ...                        "EPSG:4326")
    >>> round(float(lon[0]), 2), round(float(lat[0]), 2)
    (5.39, 52.16)
    """
    return _apply(transformer(working, target), x, y, working, target)


def _apply(
    t: pyproj.Transformer, a: FloatArray, b: FloatArray, source: str, target: str
) -> tuple[FloatArray, FloatArray]:
    if source == target:
        return np.asarray(a, dtype=np.float64).copy(), np.asarray(b, dtype=np.float64).copy()
    with np.errstate(all="ignore"):
        u, v = t.transform(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    bad = ~(np.isfinite(u) & np.isfinite(v))
    if bad.any():
        rows = ", ".join(str(i + 1) for i in np.flatnonzero(bad)[:10])
        raise InputError(
            f"{int(bad.sum())} records cannot be transformed from {_short(source)} to "
            f"{_short(target)} (rows {rows}{' ...' if bad.sum() > 10 else ''}): they lie "
            "outside the projection's domain; check the CRS and that x/y are not swapped"
        )
    return u, v


def _short(crs: str) -> str:
    return crs if len(crs) <= 60 else crs[:57] + "..."


@dataclass(frozen=True)
class Projection:
    """The recipe between the input's CRS and the metric CRS of distance work.

    Picklable (two strings); the transformers are looked up from a cache when used.

    Parameters
    ----------
    source_crs
        CRS of the input coordinates (after ``--coord-scale``), or ``None`` when the
        input is in an unnamed metric CRS.
    working_crs
        Metric CRS in which geokanon measures distances; equal to ``source_crs`` for
        projected input in metres.

    Examples
    --------
    >>> import numpy as np
    >>> p = Projection(source_crs="EPSG:28992", working_crs="EPSG:28992")
    >>> p.is_identity
    True
    >>> p.to_metric(np.array([1.0]), np.array([2.0]))[0].tolist()
    [1.0]
    """

    source_crs: str | None
    working_crs: str | None

    @property
    def is_identity(self) -> bool:
        """True when input coordinates are already the working metres."""
        return self.source_crs is None or self.source_crs == self.working_crs

    def to_metric(self, a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Input coordinates to working metres."""
        if self.is_identity or self.working_crs is None or self.source_crs is None:
            return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return to_metric(a, b, self.source_crs, self.working_crs)

    def from_metric(
        self, x: FloatArray, y: FloatArray, target: str | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Working metres to ``target`` (default: the input's CRS)."""
        target = target or self.source_crs
        if target is None or self.working_crs is None or target == self.working_crs:
            return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        return from_metric(x, y, self.working_crs, target)


@dataclass(frozen=True)
class ScaleRange:
    """Smallest and largest point scale factor of a working CRS over a region.

    Projected distance = scale x ground distance, so for two points whose straight
    segment (working CRS) lies in the region, the ground (geodesic) distance ``d_g``
    and the projected distance ``d_p`` satisfy ``d_g <= d_p / low``: the segment is
    the image of a curve on the ellipsoid no longer than ``d_p / low`` (``low`` bounds
    the scale in every direction: the semi-minor axis of Tissot's indicatrix), and the
    geodesic is no longer than any curve between its ends. So ``d_p <= r_max * low``
    implies ``d_g <= r_max``. Where ``low < 1`` (UTM near its central meridian,
    ``k0 = 0.9996``) the map understates ground distances: a projected 249.97 m is
    250.07 m on the ellipsoid on the central meridian.

    Attributes
    ----------
    low, high
        The range, rounded outward to 7 decimals (``1.0, 1.0`` for an unnamed CRS).

    Examples
    --------
    >>> ScaleRange(0.9996, 1.0001).radius_m(250.0)
    249.9
    >>> ScaleRange(1.0002, 1.0004).radius_m(250.0)
    250.0
    """

    low: float
    high: float

    def radius_m(self, r_max_m: float) -> float:
        """The working-CRS radius ``r_max_m * min(1, low)`` that keeps ``r_max_m`` on the ground."""
        return float(r_max_m) * min(1.0, self.low)


@functools.lru_cache(maxsize=16)
def _factors_recipe(working: str) -> tuple[pyproj.Transformer, pyproj.Proj]:
    crs = pyproj.CRS.from_user_input(working)
    geodetic = crs.geodetic_crs
    if geodetic is None:
        raise InputError(f"the working CRS {_short(working)} has no geodetic datum")
    inverse = pyproj.Transformer.from_crs(crs, geodetic, always_xy=True)
    return inverse, pyproj.Proj(crs)


def scale_factor_range(
    x: FloatArray,
    y: FloatArray,
    working: str | None,
    *,
    pad_m: float,
    grid_m: float = SCALE_GRID_M,
) -> ScaleRange:
    """The working CRS's point scale factors over the region the data's groups can span.

    Groups are measured in working-CRS metres, but ``r_max`` is a promise on the
    ground: projected distance = scale x ground distance, and a transverse Mercator
    (UTM, British National Grid) has scale ``k0 = 0.9996 < 1`` on its central
    meridian (a projected 249.97 m is 250.07 m on the ellipsoid there) and up to
    ``~1.0008`` at a zone's edge. With ``low`` the smallest scale in any direction
    over the region, a member within ``r_max * min(1, low)`` of its representative
    in the working CRS is within ``r_max`` on the ellipsoid (see :class:`ScaleRange`),
    and within ``r_max`` on the map too (the ``min(1, .)``: where every scale exceeds 1
    the map distance is the longer one, and it stays within ``r_max``).

    The region is the data's bounding box (working metres) widened by ``pad_m`` (a
    representative lies within ``r_max`` of its members, so every member-to-
    representative segment lies inside), then snapped outward to multiples of
    ``grid_m``: the range is a property of the CRS and a coarse box, and says
    nothing about any record finer than ``grid_m`` (it may be published). The scale
    (the semi-axes of Tissot's indicatrix, :meth:`pyproj.Proj.get_factors`) is
    evaluated on a grid of nodes over the region (every ``grid_m``, at most 65 a
    side); in each grid cell the smallest corner is lowered by the largest change
    along the edges of that cell and its eight neighbours (the scale of a projection
    varies smoothly and slowly over any region where it is usable, so a dip inside a
    cell is smaller than the change across the cells around it), the maximum likewise
    raised, and the range is rounded outward to 7 decimals. The range is a function
    of the snapped box alone.

    Parameters
    ----------
    x, y
        Working-CRS coordinates (metres) of the records.
    working
        The working CRS (``None``: an unnamed metric CRS, taken as true to scale).
    pad_m
        Widening of the bounding box, metres (``r_max``).
    grid_m
        Snapping step of the region, metres.

    Returns
    -------
    ScaleRange

    Raises
    ------
    InputError
        The working CRS's scale cannot be evaluated anywhere over the region.

    Examples
    --------
    >>> import numpy as np
    >>> x, y = to_metric(np.array([-3.0, -2.99]), np.array([53.6, 53.61]), "EPSG:4326",
    ...                  "EPSG:32630")
    >>> s = scale_factor_range(x, y, "EPSG:32630", pad_m=250.0)
    >>> bool(0.99959 < s.low <= 0.9996 < s.high < 0.99961)
    True
    >>> scale_factor_range(x, y, None, pad_m=250.0)
    ScaleRange(low=1.0, high=1.0)
    """
    if working is None:
        return ScaleRange(1.0, 1.0)
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.size == 0:
        return ScaleRange(1.0, 1.0)
    step = float(grid_m)
    x0 = math.floor((float(xa.min()) - pad_m) / step) * step
    x1 = math.ceil((float(xa.max()) + pad_m) / step) * step
    y0 = math.floor((float(ya.min()) - pad_m) / step) * step
    y1 = math.ceil((float(ya.max()) + pad_m) / step) * step
    nx = min(_SCALE_NODES_MAX, round((x1 - x0) / step) + 1)
    ny = min(_SCALE_NODES_MAX, round((y1 - y0) / step) + 1)
    gx, gy = np.meshgrid(np.linspace(x0, x1, nx), np.linspace(y0, y1, ny))
    inverse, proj = _factors_recipe(working)
    with np.errstate(all="ignore"):
        lon, lat = inverse.transform(gx.ravel(), gy.ravel())
        f = proj.get_factors(np.asarray(lon), np.asarray(lat), errcheck=False)
    lo = np.asarray(f.tissot_semiminor, dtype=np.float64).reshape(ny, nx)
    hi = np.asarray(f.tissot_semimajor, dtype=np.float64).reshape(ny, nx)
    lo = np.where(np.isfinite(lo) & (lo > 0), lo, np.nan)
    hi = np.where(np.isfinite(hi) & (hi > 0), hi, np.nan)
    low = float(np.nanmin(_cell_bounds(lo))) if np.isfinite(lo).any() else math.nan
    high = -float(np.nanmin(_cell_bounds(-hi))) if np.isfinite(hi).any() else math.nan
    if not (math.isfinite(low) and math.isfinite(high)):
        raise InputError(
            f"the scale factor of the working CRS {_short(working)} cannot be evaluated over "
            "the data; name another metric CRS with --working-crs"
        )
    q = 10.0**_SCALE_DECIMALS
    return ScaleRange(math.floor(low * q) / q, math.ceil(high * q) / q)


def _cell_bounds(v: FloatArray) -> FloatArray:
    """A lower bound of a smooth field in each grid cell, from its corner nodes.

    The smallest corner, lowered by the largest change along any edge of the cell
    or of the eight cells around it: a smooth field that dips inside a cell rises
    again towards its neighbours by at least as much as it dipped. Cells with a
    corner outside the projection's domain (NaN) give NaN.
    """
    corners = np.minimum(np.minimum(v[:-1, :-1], v[1:, :-1]), np.minimum(v[:-1, 1:], v[1:, 1:]))
    ex = np.abs(np.diff(v, axis=1))  # (ny, nx - 1)
    ey = np.abs(np.diff(v, axis=0))  # (ny - 1, nx)
    edge = np.fmax(np.fmax(ex[:-1], ex[1:]), np.fmax(ey[:, :-1], ey[:, 1:]))
    pad = np.pad(edge, 1, constant_values=np.nan)
    ny, nx = edge.shape
    local = edge.copy()
    for di in (0, 1, 2):
        for dj in (0, 1, 2):
            local = np.fmax(local, pad[di : di + ny, dj : dj + nx])
    return np.asarray(corners - local, dtype=np.float64)

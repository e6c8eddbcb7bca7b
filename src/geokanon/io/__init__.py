"""Reading point records from files into a :class:`PointTable`, and schema checks.

- :mod:`geokanon.io.read` - CSV, Parquet/GeoParquet, GeoPackage, GeoJSON, Shapefile
  into a :class:`PointTable` in metres; every bad-input case is an ``InputError``.
- :mod:`geokanon.io.units` - units from a polygon file (spatial join) or a grid.
- :mod:`geokanon.io.gis` - GeoParquet 1.1 metadata and columns, unit and extent polygons,
  and ``release.gpkg`` (layers and QGIS styles) of a release.
- :mod:`geokanon.io.postgis` - records from a PostgreSQL/PostGIS table or query
  (``postgresql://`` INPUT), releases loaded into a schema, and read back for ``verify``.
"""

from geokanon.io.read import PointTable, ReadOptions, check_r_max, read_points, table_from_frame

__all__ = ["PointTable", "ReadOptions", "check_r_max", "read_points", "table_from_frame"]

"""Reading point records from files into a :class:`PointTable`, and schema checks."""

from geokanon.io.read import PointTable, read_points, table_from_frame

__all__ = ["PointTable", "read_points", "table_from_frame"]

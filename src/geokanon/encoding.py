"""The one encoding of a release's Parquet files and GeoPackage, for the writer and verifier.

A Parquet file holds more than its values. The sizes of its row groups and pages, each
column's encodings and compression, the statistics, the page headers and the creator
string are all the writer's choice, and every reader skips what it does not need: a
file whose row groups were cut to sizes that spell out a source coordinate, or whose
pages carry a zstd frame no decoder returns, reads back with exactly the published
values. So a release's Parquet files have one encoding, this module's:

- zstd at pyarrow's default level; dictionary pages for text columns only (numbers plain);
- statistics for the GeoParquet ``bbox`` covering's fields only (what a reader filters row
  groups by);
- row groups of :data:`ROW_GROUP_ROWS` rows (the last holds the rest; a file of no rows has
  one empty row group);
- everything else as pyarrow writes it by default (its page sizes, its encodings, its
  creator string, the Arrow schema stored).

The writers write every published Parquet file with :func:`write_parquet` or
:func:`parquet_writer`; the verifier reads each file back and writes its values again with
the same functions, and the file must be exactly those bytes
(:mod:`geokanon.verify.containers`). A file written by another pyarrow version can differ
in bytes it does not choose (its creator string, at least); the verifier's finding names the
version it encodes with.

``release.gpkg`` likewise has one layout: GDAL's GeoPackage of the layers as SQLite's
``VACUUM INTO`` lays it out (:func:`settle_sqlite`: every page rebuilt from the rows, no free
page, no unused space in a page holding anything but zeros) with the schema cookie, a
counter of schema changes that any value satisfies, set to 1. A settled file settles to
itself, which is the verifier's rule.

This module imports no other geokanon module (the verifier imports it: the encoding is part
of the format, not of the algorithm).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "ROW_GROUP_ROWS",
    "SCHEMA_COOKIE",
    "parquet_options",
    "parquet_writer",
    "row_group_sizes",
    "row_slices",
    "settle_sqlite",
    "write_parquet",
]

#: Rows per row group (pyarrow's default): a file written in slices of this many rows has
#: the bytes of one written whole.
ROW_GROUP_ROWS = 1024 * 1024
#: The schema cookie (bytes 40-43 of an SQLite header) of a settled file.
SCHEMA_COOKIE = 1
#: The fields of the GeoParquet ``bbox`` covering column, the only ones with statistics.
_BBOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """The :class:`pyarrow.parquet.ParquetWriter` options of a file of ``schema``."""
    text = [
        f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    stats: list[str] | bool = (
        [f"bbox.{f}" for f in _BBOX_FIELDS] if "bbox" in schema.names else False
    )
    return {"compression": "zstd", "write_statistics": stats, "use_dictionary": text}


def parquet_writer(where: str | Path | Any, schema: pa.Schema) -> pq.ParquetWriter:
    """A writer of the release's encoding to ``where`` (a path or a writable file);
    write whole row groups to it (:func:`row_slices`, or :func:`write_parquet`)."""
    return pq.ParquetWriter(where, schema, **parquet_options(schema))


def row_group_sizes(n_rows: int) -> list[int]:
    """The rows of each row group of a file of ``n_rows`` rows."""
    full, rest = divmod(n_rows, ROW_GROUP_ROWS)
    return [ROW_GROUP_ROWS] * full + ([rest] if rest or not full else [])


def row_slices(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` cut into the row groups of :func:`row_group_sizes`."""
    at = 0
    for size in row_group_sizes(table.num_rows):
        yield table.slice(at, size)
        at += size


def write_parquet(table: pa.Table, where: str | Path | Any) -> None:
    """Write ``table`` (its schema's metadata included) in the release's encoding."""
    with parquet_writer(where, table.schema) as writer:
        for piece in row_slices(table):
            writer.write_table(piece)


def settle_sqlite(path: Path, into: Path) -> None:
    """Write ``into`` (which must not exist): the SQLite database ``path`` as ``VACUUM
    INTO`` lays it out, its schema cookie set to :data:`SCHEMA_COOKIE`. ``path`` is opened
    read-only and left as it is."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        con.execute("VACUUM INTO ?", (str(into),))
    finally:
        con.close()
    with into.open("r+b") as fh:  # the cookie only tells connections the schema changed
        fh.seek(40)
        fh.write(SCHEMA_COOKIE.to_bytes(4, "big"))

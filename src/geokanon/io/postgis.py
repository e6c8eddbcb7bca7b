"""PostgreSQL/PostGIS: records read from a table or query, releases written to a schema.

An input or output named by a URL ``postgresql://[user@]host[:port]/db`` (also
``?host=/socket/dir``) is a database. Credentials come from the URL, the ``PG*``
environment variables or ``~/.pgpass`` (libpq's own rules); no message, log line or
release file ever holds a password or a user name: every URL shown goes through
:func:`redact`.

Reading
    :func:`open_query` streams ``--table SCHEMA.TABLE`` or ``--query "SELECT ..."`` in
    chunks through psycopg 3: one read-only, repeatable-read transaction, one
    ``COPY (SELECT ...) TO STDOUT (FORMAT csv)``, parsed chunk by chunk. Point geometry
    is sent as WKB (``ST_AsBinary``); its CRS is the column's SRID (looked up in
    ``spatial_ref_sys``). The session settings that shape the text (time zone UTC, ISO
    dates, shortest exact floats, hex bytea) are fixed, so the byte stream is canonical:
    its SHA-256 is the source checksum (the manifest's ``input_sha256``), which the
    verifier recomputes by reading the same table or query again.
Writing
    :func:`load_release` loads a built, verified release directory into a fresh
    temporary schema inside one transaction and renames it to the target schema; the
    transaction is committed by the caller only once everything else has succeeded.
    :func:`export_release` reads the release files back for ``geokanon verify``, and
    :func:`compare_tables` checks that the database's rows equal those files.

This module imports no algorithm module (``geokanon.verify`` may use it).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from geokanon._progress import Progress, silent
from geokanon.errors import InputError, WriteError

__all__ = [
    "DatabaseInput",
    "DatabaseTarget",
    "PendingLoad",
    "QueryStream",
    "check_target",
    "compare_tables",
    "export_release",
    "is_database_url",
    "load_release",
    "open_query",
    "redact",
]

_SCHEMES = ("postgresql://", "postgres://")
#: Query parameters of a URL that are secrets (never shown).
_SECRET_PARAMS = frozenset({"password", "sslpassword", "user"})
#: Session settings that fix the text form of every value COPY sends.
_CANONICAL = (
    "SET LOCAL TimeZone = 'UTC'",
    "SET LOCAL DateStyle = 'ISO, YMD'",
    "SET LOCAL IntervalStyle = 'iso_8601'",
    "SET LOCAL extra_float_digits = 1",
    "SET LOCAL bytea_output = 'hex'",
    # the rows in the same order every time: a scan starts at the table's first block (not
    # where a concurrent scan is), and no parallel workers interleave their rows
    "SET LOCAL synchronize_seqscans = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
)
#: Tables written from the release's Parquet files and CSV files (file -> table).
PARQUET_TABLES = {"records.parquet": "records", "groups.parquet": "groups",
                  "classes.parquet": "classes"}  # fmt: skip
CSV_TABLES = {"units.csv": "units"}
#: The release.gpkg layers loaded as tables of their own where the release has them (the
#: other layers are the Parquet files' rows): the groups' discs, and the units with polygons.
GPKG_LAYERS = {"group_extents": "group_extents", "units": "unit_areas"}
FILES_TABLE = "release_files"
#: The first column of every release table: the row of the file it came from (from 1).
FID = "fid"
MANIFEST_TABLE = "manifest"
_BOOL_OID = 16
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def is_database_url(value: object) -> bool:
    """Whether ``value`` names a PostgreSQL database (``postgresql://`` or ``postgres://``).

    Examples
    --------
    >>> is_database_url("postgresql://me@db.example/register"), is_database_url("a.csv")
    (True, False)
    """
    return isinstance(value, str | DatabaseInput) and str(
        value.url if isinstance(value, DatabaseInput) else value
    ).lower().startswith(_SCHEMES)


def redact(url: str) -> str:
    """The URL without its user name, password or secret parameters, for messages.

    Examples
    --------
    >>> redact("postgresql://ann:s3cret@db.example:5433/reg?host=/run/pg&password=x")
    'postgresql://db.example:5433/reg?host=/run/pg'
    >>> redact("postgresql:///reg?host=/tmp/s")
    'postgresql:///reg?host=/tmp/s'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "postgresql://(unreadable URL)"
    netloc = parts.netloc.rpartition("@")[2]
    query = [
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if k.lower() not in _SECRET_PARAMS
    ]
    text = f"{parts.scheme}://{netloc}{parts.path}"
    return text + (f"?{urllib.parse.urlencode(query, safe='/')}" if query else "")


def _secrets(url: str) -> list[str]:
    """The user name and password a URL holds (to scrub from server messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
        found = [parts.username or "", parts.password or ""]
        for k, v in urllib.parse.parse_qsl(parts.query):
            if k.lower() in _SECRET_PARAMS:
                found.append(v)
    except ValueError:
        return []
    return [urllib.parse.unquote(s) for s in found if s and len(s) >= 2]


def _scrub(text: str, url: str) -> str:
    """A driver's message, first line only, with the URL's secrets blanked."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    for secret in _secrets(url):
        line = line.replace(secret, "***")
    return line.replace(url, redact(url))


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise InputError(
            "reading or writing PostgreSQL needs psycopg 3: pip install 'geokanon[postgis]'"
        ) from None
    return psycopg


def connect(url: str, *, what: str = "database") -> Any:
    """A psycopg connection (autocommit off), or :class:`InputError` with a redacted URL."""
    psycopg = _driver()
    try:
        return psycopg.connect(url, connect_timeout=10, application_name="geokanon")
    except psycopg.Error as exc:
        raise InputError(
            f"cannot connect to the {what} {redact(url)}: {_scrub(str(exc), url)}; check the "
            "URL, that the server runs, and the credentials (URL, PG* variables or ~/.pgpass)"
        ) from None
    except Exception:  # a URL libpq cannot parse
        raise InputError(
            f"the {what} URL {redact(url)} cannot be read; give postgresql://[user@]host"
            "[:port]/database (or ?host=/socket/dir)"
        ) from None


def _qualified(name: str, flag: str) -> tuple[str | None, str]:
    """``SCHEMA.TABLE`` or ``TABLE`` split into its parts (quotes allowed around each)."""
    parts = [p.strip() for p in re.findall(r'"(?:[^"]|"")+"|[^.]+', name)]
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise InputError(f"{flag} {name!r} is not a table name; give SCHEMA.TABLE or TABLE")
    clean = [p[1:-1].replace('""', '"') if p.startswith('"') else p for p in parts]
    return (clean[0], clean[1]) if len(clean) == 2 else (None, clean[0])


@dataclass(frozen=True)
class DatabaseInput:
    """Records in a PostgreSQL database: ``url`` with a ``table`` or a ``query``.

    Attributes
    ----------
    url
        ``postgresql://[user@]host[:port]/db`` (also ``?host=/socket/dir``).
    table
        ``SCHEMA.TABLE`` (or ``TABLE`` on the search path).
    query
        A ``SELECT`` whose rows are the records.
    """

    url: str
    table: str | None = None
    query: str | None = None

    def __post_init__(self) -> None:
        if not is_database_url(self.url):
            raise InputError(f"{redact(self.url)} is not a postgresql:// URL")
        if (self.table is None) == (self.query is None):
            raise InputError(
                f"a database input ({redact(self.url)}) needs --table SCHEMA.TABLE or "
                '--query "SELECT ...", one of them'
            )
        if self.table is not None:
            _qualified(self.table, "--table")
        if self.query is not None and not self.query.strip().rstrip(";").strip():
            raise InputError("--query is empty; give a SELECT whose rows are the records")

    @property
    def name(self) -> str:
        """How messages name the input (never with credentials)."""
        what = f"table {self.table}" if self.table is not None else "--query"
        return f"{what} in {redact(self.url)}"

    def __str__(self) -> str:
        return self.name


@dataclass
class QueryStream:
    """An opened database input: its columns, CRS, row count and chunks.

    ``chunks`` yields DataFrames of the non-geometry columns plus, when there is a
    point geometry, its WKB as hex text in the column named ``geometry``; once they
    are all read, :meth:`sha256` is the checksum of the whole stream.
    """

    name: str
    columns: list[str]
    geometry: str | None
    crs: str | None
    rows: int | None
    chunks: Iterator[pd.DataFrame]
    _hash: Any
    _done: list[bool]

    def sha256(self) -> str:
        """The SHA-256 of the COPY stream (only once every chunk has been read)."""
        if not self._done[0]:
            raise RuntimeError("the checksum of a database input is known once it is read")
        return str(self._hash.hexdigest())


class _CopyReader(io.RawIOBase):
    """The COPY stream as a binary file for pandas, hashed as it is read."""

    def __init__(self, blocks: Iterator[Any], digest: Any) -> None:
        self._blocks = blocks
        self._digest = digest
        self._buf = bytearray()
        self.finished = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        want = len(b)
        while len(self._buf) < want and not self.finished:
            block = next(self._blocks, None)
            if block is None:
                self.finished = True
                break
            self._digest.update(block)
            self._buf += block
        n = min(want, len(self._buf))
        b[:n] = self._buf[:n]
        del self._buf[:n]
        return n


def _base_query(conn: Any, src: DatabaseInput) -> Any:
    from psycopg import sql

    if src.table is not None:
        schema, table = _qualified(src.table, "--table")
        ident = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        found = conn.execute("SELECT to_regclass(%s)", [ident.as_string(conn)]).fetchone()[0]
        if found is None:
            names = [
                f"{r[0]}.{r[1]}"
                for r in conn.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables WHERE "
                    "table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2 "
                    "LIMIT 200"
                ).fetchall()
            ]
            from geokanon.io._names import closest_name

            near = closest_name(src.table, names)
            hint = f"; did you mean {near!r}?" if near else ""
            shown = ", ".join(names[:8]) or "none"
            raise InputError(
                f"table {src.table!r} does not exist in {redact(src.url)} (or is not readable)"
                f"{hint} (tables there: {shown}{' ...' if len(names) > 8 else ''})"
            )
        return sql.SQL("SELECT * FROM {}").format(ident)
    text = str(src.query).strip().rstrip(";").strip()
    return sql.SQL(text)


def _geometry_oids(conn: Any) -> dict[int, str]:
    rows = conn.execute(
        "SELECT oid, typname FROM pg_type WHERE typname IN ('geometry', 'geography')"
    ).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def _srid_crs(conn: Any, srid: int, name: str) -> str | None:
    if srid <= 0:
        return None
    row = conn.execute(
        "SELECT auth_name, auth_srid, srtext FROM spatial_ref_sys WHERE srid = %s", [srid]
    ).fetchone()
    if row is None:
        raise InputError(f"the geometry of {name} has SRID {srid}, which spatial_ref_sys lacks")
    if row[0] and row[1]:
        return f"{row[0]}:{row[1]}"
    return str(row[2])


def open_query(
    src: DatabaseInput,
    *,
    chunksize: int = 500_000,
    text_columns: tuple[str | None, ...] = (),
    all_text: bool = False,
    progress: Progress = silent,
) -> QueryStream:
    """Open ``src`` for reading in chunks (one transaction, one COPY).

    Parameters
    ----------
    src
        The database, and the table or query.
    chunksize
        Rows per chunk.
    text_columns
        Columns parsed as text (subject, unit and time columns, as the CSV reader does).
    all_text
        Parse every column as text, empty cells ``""`` (the verifier's raw view).
    progress
        Hears ``connect`` while the query is described.

    Returns
    -------
    QueryStream

    Raises
    ------
    InputError
        Unreachable server, bad credentials, missing table, a failing query, more than
        one SRID in the geometry, or a geometry with an SRID the database does not know.
    """
    from psycopg import sql

    psycopg = _driver()
    progress("connect")
    conn = connect(src.url)
    try:
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        for stmt in _CANONICAL:
            conn.execute(stmt)
        base = _base_query(conn, src)
        cur = conn.cursor()
        try:
            cur.execute(sql.SQL("SELECT * FROM ({}) AS geokanon_input LIMIT 0").format(base))
        except psycopg.Error as exc:
            raise InputError(f"{src.name} cannot be read: {_scrub(str(exc), src.url)}") from None
        desc = cur.description or []
        names = [str(d.name) for d in desc]
        repeated = sorted({c for c in names if names.count(c) > 1})
        if repeated:
            raise InputError(
                f"column names repeat in {src.name} ({', '.join(map(repr, repeated[:5]))}); "
                "give every column its own name (AS ...)"
            )
        geo_oids = _geometry_oids(conn)
        geoms = [(i, d.name) for i, d in enumerate(desc) if int(d.type_code) in geo_oids]
        geom_col: str | None = None
        crs: str | None = None
        if geoms:
            import warnings

            i, geom_col = geoms[0]
            if len(geoms) > 1:
                warnings.warn(
                    f"{src.name} has {len(geoms)} geometry columns; the first, {geom_col!r}, "
                    "is read",
                    UserWarning,
                    stacklevel=3,
                )
            kind = geo_oids[int(desc[i].type_code)]
            fmod = int(cur.pgresult.fmod(i)) if cur.pgresult is not None else -1
            srid = (((fmod & 0x0FFFFF00) - (fmod & 0x10000000)) >> 8) if fmod > 0 else 0
            if srid == 0 and kind == "geometry":
                found = conn.execute(
                    sql.SQL(
                        "SELECT DISTINCT ST_SRID({g}) FROM ({b}) AS geokanon_input "
                        "WHERE {g} IS NOT NULL LIMIT 2"
                    ).format(g=sql.Identifier(geom_col), b=base)
                ).fetchall()
                if len(found) > 1:
                    raise InputError(
                        f"the geometry column {geom_col!r} of {src.name} mixes SRIDs; give one "
                        "CRS (ST_Transform in --query)"
                    )
                srid = int(found[0][0]) if found else 0
            if kind == "geography" and srid == 0:
                srid = 4326
            crs = _srid_crs(conn, srid, src.name)
        rows: int | None = None
        if src.table is not None:
            rows = int(
                conn.execute(
                    sql.SQL("SELECT count(*) FROM ({}) AS geokanon_input").format(base)
                ).fetchone()[0]
            )
        select = sql.SQL(", ").join(
            sql.SQL("ST_AsBinary({0}::geometry) AS {0}").format(sql.Identifier(n))
            if n == geom_col
            else sql.Identifier(n)
            for n in names
        )
        copy_sql = sql.SQL(
            "COPY (SELECT {cols} FROM ({b}) AS geokanon_input) TO STDOUT (FORMAT csv, HEADER true)"
        ).format(cols=select, b=base)
    except BaseException:
        conn.close()
        raise
    digest = hashlib.sha256()
    done = [False]
    columns = [n for n in names if n != geom_col]
    # booleans come as t/f: read back as booleans (as a CSV's TRUE/FALSE are)
    booleans = [
        d.name for d in desc if int(d.type_code) == _BOOL_OID and d.name not in text_columns
    ]
    text = {c: "string" for c in text_columns if c in names}
    text.update(dict.fromkeys(booleans, "string"))
    if geom_col is not None:
        text[geom_col] = "string"

    def chunks() -> Iterator[pd.DataFrame]:
        try:
            with conn.cursor() as c, c.copy(copy_sql) as copy:
                reader = _CopyReader(iter(copy), digest)
                stream = io.BufferedReader(reader, buffer_size=1 << 20)
                if all_text:
                    kw: dict[str, Any] = {"dtype": str, "keep_default_na": False}
                else:
                    kw = {"dtype": text}
                parts = pd.read_csv(stream, chunksize=chunksize, index_col=False, **kw)
                with parts:
                    for part in parts:
                        if not all_text:
                            for b in booleans:
                                part[b] = part[b].map({"t": True, "f": False}).astype("boolean")
                        yield part
                while stream.read(1 << 20):  # the rest of the stream (none: a header only)
                    pass
            conn.rollback()  # read only: nothing to keep
            done[0] = True
        except psycopg.Error as exc:
            # a failure while rows are sent may quote a value: its kind only, never its text
            raise InputError(
                f"{src.name} failed while its rows were read ({type(exc).__name__}, SQLSTATE "
                f"{getattr(exc, 'sqlstate', None) or 'unknown'}); run the query in psql to see "
                "which row"
            ) from None
        except pd.errors.EmptyDataError:
            done[0] = True
        finally:
            conn.close()

    return QueryStream(src.name, columns, geom_col, crs, rows, chunks(), digest, done)


def wkb_hex_points(values: pd.Series) -> np.ndarray:
    """Geometries from the hex WKB text COPY sends for ``ST_AsBinary`` (``\\x0101...``)."""
    import shapely

    text = values.astype(object)
    present = np.asarray(text.notna(), dtype=bool)
    raw = np.full(len(text), None, dtype=object)
    raw[present] = text[present].astype(str).str.slice(2).to_numpy(dtype=object)
    raw[present & (raw == "")] = None
    try:
        return np.asarray(shapely.from_wkb(raw, on_invalid="raise"), dtype=object)
    except Exception:
        raise InputError("the database input holds unreadable geometry (broken WKB)") from None


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class DatabaseTarget:
    """Where ``release --out postgresql://... --out-schema NAME`` loads the release."""

    url: str
    schema: str
    force: bool = False

    def __post_init__(self) -> None:
        if not is_database_url(self.url):
            raise InputError(f"{redact(self.url)} is not a postgresql:// URL")
        if not _IDENT.match(self.schema) or self.schema.startswith("pg_"):
            raise InputError(
                f"--out-schema {self.schema!r} is not a plain schema name (letters, digits, "
                "_; not pg_...)"
            )

    @property
    def name(self) -> str:
        return f"schema {self.schema} in {redact(self.url)}"


def check_target(target: DatabaseTarget) -> None:
    """Before any work: the database is reachable, has PostGIS, and may take the schema.

    Raises
    ------
    InputError
        Unreachable server, no PostGIS, no right to create schemas, or an existing
        schema without ``force``.
    """
    conn = connect(target.url)
    try:
        ext = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'postgis'").fetchone()
        if ext is None:
            raise InputError(
                f"the database {redact(target.url)} has no PostGIS: run CREATE EXTENSION "
                "postgis there first"
            )
        can = conn.execute(
            "SELECT has_database_privilege(current_database(), 'CREATE')"
        ).fetchone()[0]
        if not can:
            raise InputError(
                f"the database user may not create schemas in {redact(target.url)}; grant "
                "CREATE on the database"
            )
        exists = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", [target.schema]
        ).fetchone()
        if exists is not None and not target.force:
            raise InputError(
                f"{target.name} already exists; choose another --out-schema or pass --force "
                "to replace it"
            )
    finally:
        conn.close()


def _pg_type(t: Any) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytea"
    if pa.types.is_dictionary(t):
        return _pg_type(t.value_type)
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return "json"  # e.g. GeoParquet 1.1's bbox covering column {xmin, ymin, xmax, ymax}
    return "text"


def _geo_columns(table: Any) -> dict[str, tuple[int, str]]:
    """GeoParquet geometry columns of an Arrow table: SRID (0: no EPSG code), geometry type."""
    meta = table.schema.metadata or {}
    if b"geo" not in meta:
        return {}
    try:
        geo = json.loads(meta[b"geo"])
        cols = dict(geo["columns"])
    except (ValueError, KeyError, TypeError):
        return {}
    out = {}
    for name, spec in cols.items():
        srid = 4326
        crs = spec.get("crs", "OGC:CRS84") if isinstance(spec, dict) else None
        if crs is None:
            srid = 0
        elif crs != "OGC:CRS84":
            import pyproj

            try:
                c = pyproj.CRS.from_user_input(crs if isinstance(crs, str) else json.dumps(crs))
                srid = int(c.to_epsg() or 0)
                if c.equals(pyproj.CRS("OGC:CRS84")):
                    srid = 4326
            except pyproj.exceptions.CRSError:
                srid = 0
        types = spec.get("geometry_types") if isinstance(spec, dict) else None
        kind = str(types[0]) if isinstance(types, list) and len(types) == 1 else "Geometry"
        out[str(name)] = (srid, kind if re.fullmatch(r"[A-Za-z]+", kind) else "Geometry")
    return out


def _create_and_copy(
    cur: Any, schema: str, name: str, table: Any, geo: dict[str, tuple[int, str]]
) -> None:
    """One release table: ``fid`` (the file's row, from 1; the primary key GIS wants), then
    the file's columns; geometry columns as PostGIS geometry with the file's SRID."""
    from psycopg import sql

    cols = [sql.SQL("{} bigint PRIMARY KEY").format(sql.Identifier(FID))]
    for field in table.schema:
        pg = "bytea" if field.name in geo else _pg_type(field.type)
        cols.append(sql.SQL("{} {}").format(sql.Identifier(field.name), sql.SQL(pg)))
    ident = sql.Identifier(schema, name)
    cur.execute(sql.SQL("CREATE TABLE {} ({})").format(ident, sql.SQL(", ").join(cols)))
    names = sql.SQL(", ").join(sql.Identifier(n) for n in [FID, *table.column_names])
    fid = 0
    as_json = [_pg_type(f.type) == "json" and f.name not in geo for f in table.schema]
    with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(ident, names)) as copy:
        for batch in table.to_batches(max_chunksize=50_000):
            columns = [
                [None if v is None else json.dumps(v, allow_nan=False) for v in arr.to_pylist()]
                if j
                else arr.to_pylist()
                for arr, j in zip(batch.columns, as_json, strict=True)
            ]
            for row in zip(*columns, strict=True):
                fid += 1
                copy.write_row((fid, *row))
    for col, (srid, kind) in geo.items():
        cur.execute(
            sql.SQL(
                "ALTER TABLE {t} ALTER COLUMN {c} TYPE geometry({k}, {s}) USING "
                "ST_SetSRID(ST_GeomFromWKB({c}), {s})"
            ).format(t=ident, c=sql.Identifier(col), k=sql.SQL(kind), s=sql.Literal(srid))
        )


def _release_tables(release: Path) -> Iterator[tuple[str, Any, dict[str, tuple[int, str]]]]:
    """(table name, Arrow table, geometry columns) for each release table that exists."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    for file, name in PARQUET_TABLES.items():
        p = release / file
        if p.exists():
            t = pq.read_table(p)
            yield name, t, _geo_columns(t)
    for file, name in CSV_TABLES.items():
        p = release / file
        if p.exists():
            header = pacsv.read_csv(
                p, read_options=pacsv.ReadOptions(block_size=1 << 16)
            ).column_names
            t = pacsv.read_csv(
                p,
                convert_options=pacsv.ConvertOptions(
                    column_types=dict.fromkeys(header, pa.string()),
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            yield name, t, {}
    gpkg = release / "release.gpkg"
    if gpkg.exists():
        import pyogrio

        layers = {str(r[0]) for r in pyogrio.list_layers(gpkg)}
        for layer, name in GPKG_LAYERS.items():
            if layer in layers:
                meta, t = pyogrio.read_arrow(gpkg, layer=layer)
                srid = 0
                if meta.get("crs"):
                    import pyproj

                    srid = int(pyproj.CRS.from_user_input(meta["crs"]).to_epsg() or 0)
                geom = meta.get("geometry_name") or "wkb_geometry"
                kind = str(meta.get("geometry_type") or "Geometry")
                kind = kind if re.fullmatch(r"[A-Za-z]+", kind) else "Geometry"
                yield name, pa.table(t), {str(geom): (srid, kind)}


@dataclass
class PendingLoad:
    """A release loaded into the database, in a transaction not yet committed."""

    conn: Any
    target: DatabaseTarget

    def commit(self) -> None:
        """Make the schema appear (the old one, with ``force``, goes in the same step)."""
        psycopg = _driver()
        try:
            self.conn.commit()
        except psycopg.Error as exc:
            raise WriteError(
                f"the release could not be committed to {self.target.name}: "
                f"{_scrub(str(exc), self.target.url)}; the database is as it was"
            ) from None
        finally:
            self.conn.close()

    def close(self) -> None:
        """Roll back (when not committed) and close."""
        with contextlib.suppress(Exception):
            self.conn.close()


def load_release(
    target: DatabaseTarget, release: str | Path, *, progress: Progress | None = None
) -> PendingLoad:
    """Load a built release directory into ``target``'s schema, uncommitted.

    Everything goes into a new schema ``geokanon_tmp_<hex>`` (one table per release table
    plus ``manifest`` and ``release_files``), which is renamed to ``target.schema`` (the
    existing one dropped first when ``target.force``) in the same transaction. Call
    :meth:`PendingLoad.commit` to make it appear, or :meth:`PendingLoad.close` to drop
    it all.

    Raises
    ------
    InputError
        The schema exists and ``force`` is off (checked again under a lock).
    WriteError
        The database refused a statement; nothing was changed.
    """
    from psycopg import sql

    psycopg = _driver()
    say = progress if progress is not None else silent
    rel = Path(release)
    conn = connect(target.url)
    tmp = f"geokanon_tmp_{uuid.uuid4().hex[:12]}"
    try:
        cur = conn.cursor()
        # one writer per schema name at a time
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"geokanon:{target.schema}"])
        exists = cur.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", [target.schema]
        ).fetchone()
        if exists is not None and not target.force:
            raise InputError(
                f"{target.name} already exists; choose another --out-schema or pass --force"
            )
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(tmp)))
        tables = list(_release_tables(rel))
        for i, (name, table, geo) in enumerate(tables):
            say("tables", name, done=i, total=len(tables) + 2)
            _create_and_copy(cur, tmp, name, table, geo)
        manifest_text = (rel / "manifest.json").read_text(encoding="utf-8")
        cur.execute(
            sql.SQL("CREATE TABLE {} (manifest json NOT NULL)").format(
                sql.Identifier(tmp, MANIFEST_TABLE)
            )
        )
        cur.execute(
            sql.SQL("INSERT INTO {} VALUES (%s::json)").format(sql.Identifier(tmp, MANIFEST_TABLE)),
            [manifest_text],
        )
        say("tables", FILES_TABLE, done=len(tables) + 1, total=len(tables) + 2)
        cur.execute(
            sql.SQL(
                "CREATE TABLE {} (name text PRIMARY KEY, sha256 text NOT NULL, "
                "content bytea NOT NULL)"
            ).format(sql.Identifier(tmp, FILES_TABLE))
        )
        with cur.copy(
            sql.SQL("COPY {} (name, sha256, content) FROM STDIN").format(
                sql.Identifier(tmp, FILES_TABLE)
            )
        ) as copy:
            for p in sorted(rel.rglob("*")):
                if p.is_file():
                    data = p.read_bytes()
                    rel_name = p.relative_to(rel).as_posix()
                    copy.write_row((rel_name, hashlib.sha256(data).hexdigest(), data))
        if exists is not None:
            cur.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(target.schema)))
        cur.execute(
            sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                sql.Identifier(tmp), sql.Identifier(target.schema)
            )
        )
        say("tables", done=len(tables) + 2, total=len(tables) + 2)
    except psycopg.Error as exc:
        conn.close()
        raise WriteError(
            f"the release could not be written to {target.name}: "
            f"{_scrub(str(exc), target.url)}; the database is as it was"
        ) from None
    except BaseException:
        conn.close()
        raise
    return PendingLoad(conn, target)


# --------------------------------------------------------------------------- verifying


def export_release(url: str, schema: str, into: Path) -> list[str]:
    """Write the release files held in ``schema``'s ``release_files`` table into ``into``.

    Returns
    -------
    list of str
        The file names written.

    Raises
    ------
    InputError
        Unreachable server, or no geokanon release in that schema.
    """
    from psycopg import sql

    conn = connect(url)
    try:
        found = conn.execute(
            "SELECT to_regclass(%s)", [sql.Identifier(schema, FILES_TABLE).as_string(conn)]
        ).fetchone()[0]
        if found is None:
            raise InputError(
                f"schema {schema} in {redact(url)} holds no geokanon release (no "
                f"{FILES_TABLE} table)"
            )
        rows = conn.execute(
            sql.SQL("SELECT name, content FROM {} ORDER BY name").format(
                sql.Identifier(schema, FILES_TABLE)
            )
        ).fetchall()
    finally:
        conn.close()
    names = []
    for name, content in rows:
        p = into / str(name)
        if ".." in Path(str(name)).parts or Path(str(name)).is_absolute():
            raise InputError(f"schema {schema} names a release file outside the release")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes(content))
        names.append(str(name))
    return names


def _same_values(a: Any, b: Any) -> bool:
    """Two Arrow columns hold the same values (NaN equal to NaN)."""
    import pyarrow as pa

    if len(a) != len(b):
        return False
    la, lb = a.to_pylist(), b.to_pylist()
    for x, y in zip(la, lb, strict=True):
        if x is None or y is None:
            if (x is None) != (y is None):
                return False
        elif isinstance(x, float) and isinstance(y, float):
            if not (x == y or (x != x and y != y)):
                return False
        elif x != y:
            return False
    del pa
    return True


def compare_tables(url: str, schema: str, release: Path) -> list[str]:
    """How the tables in ``schema`` differ from the (verified) release files; ``[]``: equal.

    Each table must hold the rows of its file in the file's order, column by column:
    numbers and text equal, timestamps equal, geometry equal as WKB (PostGIS's
    ``ST_AsBinary``); ``manifest`` must hold ``manifest.json``'s JSON.
    """
    from psycopg import sql

    problems: list[str] = []
    conn = connect(url)
    try:
        for name, table, geo in _release_tables(release):
            ident = sql.Identifier(schema, name)
            if (
                conn.execute("SELECT to_regclass(%s)", [ident.as_string(conn)]).fetchone()[0]
                is None
            ):
                problems.append(f"table {name} is missing")
                continue
            cols = [
                str(r[0])
                for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND "
                    "attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    [ident.as_string(conn)],
                ).fetchall()
            ]
            if cols != [FID, *table.column_names]:
                problems.append(f"table {name} has columns {cols}, the file {table.column_names}")
                continue
            cols = cols[1:]
            select = sql.SQL(", ").join(
                sql.SQL("ST_AsBinary({0}) AS {0}").format(sql.Identifier(c))
                if c in geo
                else sql.Identifier(c)
                for c in cols
            )
            rows = conn.execute(
                sql.SQL("SELECT {} FROM {} ORDER BY {}").format(select, ident, sql.Identifier(FID))
            ).fetchall()
            if len(rows) != table.num_rows:
                problems.append(f"table {name} holds {len(rows)} rows, the file {table.num_rows}")
                continue
            import pyarrow as pa

            for j, c in enumerate(cols):
                db = [r[j] for r in rows]
                col = table.column(c)
                if c in geo:
                    import shapely

                    fa = shapely.from_wkb(np.asarray(col.to_pylist(), dtype=object))
                    fb = shapely.from_wkb(
                        np.asarray([None if v is None else bytes(v) for v in db], dtype=object)
                    )
                    same = bool(
                        np.all(
                            (shapely.is_missing(fa) & shapely.is_missing(fb))
                            | shapely.equals_exact(fa, fb, tolerance=0.0)
                        )
                    )
                elif _pg_type(col.type) == "bytea":
                    same = [None if v is None else bytes(v) for v in db] == col.to_pylist()
                elif _pg_type(col.type) == "json":
                    same = db == col.to_pylist()
                else:
                    try:
                        same = _same_values(col, pa.array(db, type=col.type))
                    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                        same = False
                if not same:
                    problems.append(f"column {c} of table {name} differs from the file")
        stored = conn.execute(
            sql.SQL("SELECT manifest::text FROM {}").format(sql.Identifier(schema, MANIFEST_TABLE))
        ).fetchall()
        want = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
        if len(stored) != 1 or json.loads(stored[0][0]) != want:
            problems.append("table manifest does not hold manifest.json")
    except _driver().Error as exc:
        problems.append(f"the schema could not be read: {_scrub(str(exc), url)}")
    finally:
        conn.close()
    return problems

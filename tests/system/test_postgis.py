"""Releases read from and written to PostGIS, against a real throwaway cluster.

The cluster (``tests/pg_cluster.py``) holds the shared dwellings as a PostGIS table
(``register.dwellings``: attributes and a ``geometry(Point, 28992)`` column, no x/y
columns) and a few smaller tables. Without PostgreSQL binaries, PostGIS or psycopg the
tests skip saying what is missing, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from geokanon.cli import main

#: ~2,200 dwellings of three small municipalities: a release in seconds.
SUBSET = "gm_code IN ('GM0342', 'GM0308', 'GM0313')"
QUERY = f"SELECT point_id, consumption, gm_code, geom FROM register.dwellings WHERE {SUBSET}"
POLICY = ["--k", "5", "--r-max", "300", "--unit", "gm_code"]
PASSWORD = "s3cret-Pw-7731"


@pytest.fixture(scope="module")
def cluster():
    from tests.conftest import data_file
    from tests.pg_cluster import start_cluster

    csv_path = data_file("sdcspatial_dwellings", "dwellings.csv")
    c = start_cluster()
    try:
        import psycopg

        with psycopg.connect(c.url(), autocommit=True) as conn:
            conn.execute("CREATE SCHEMA register")
            conn.execute(
                "CREATE TABLE register.raw (point_id bigint, x double precision, y double "
                "precision, consumption double precision, unemployed boolean, gm_code text, "
                "gm_naam text)"
            )
            with (
                conn.cursor().copy("COPY register.raw FROM STDIN (FORMAT csv, HEADER true)") as cp,
                open(csv_path, "rb") as fh,
            ):
                while block := fh.read(1 << 20):
                    cp.write(block)
            conn.execute(
                "CREATE TABLE register.dwellings AS SELECT point_id, consumption, unemployed, "
                "gm_code, gm_naam, ST_SetSRID(ST_MakePoint(x, y), 28992)::geometry(Point, 28992)"
                " AS geom FROM register.raw ORDER BY point_id"
            )
            conn.execute(
                f"CREATE TABLE register.small AS SELECT * FROM register.dwellings WHERE {SUBSET} "
                "ORDER BY point_id"
            )
            conn.execute(
                "CREATE TABLE register.no_geometry AS SELECT point_id, consumption, gm_code "
                "FROM register.small"
            )
            conn.execute("DROP TABLE register.raw")
        yield c
    finally:
        c.stop()


def _rows(c, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(c.url(), autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(["--quiet", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_dwellings_table_read_with_crs_from_srid(cluster):
    from geokanon.io import read_points

    t = read_points(cluster.url(), table="register.dwellings", unit="gm_code")
    assert len(t) == _rows(cluster, "SELECT count(*) FROM register.dwellings")[0][0]
    assert t.crs == "EPSG:28992"
    assert "geom" not in t.attributes.columns
    first = _rows(cluster, "SELECT ST_X(geom), ST_Y(geom) FROM register.dwellings LIMIT 1")[0]
    assert (t.x[0], t.y[0]) == first
    again = read_points(cluster.url(), table="register.dwellings", unit="gm_code", chunksize=7000)
    assert again.source_sha256 == t.source_sha256  # the checksum does not depend on chunks


def test_release_from_and_to_postgis_verifies_and_catches_an_edit(cluster, tmp_path, capsys):
    url = cluster.url(password=PASSWORD)  # trust: the password is ignored, but must not show
    audit = tmp_path / "audit-dir"
    code, said = _run(
        capsys, "release", url, "--query", QUERY, *POLICY, "--keep", "consumption",
        "--out", url, "--out-schema", "rel_q", "--audit", str(audit),
    )  # fmt: skip
    assert code == 0, said
    assert PASSWORD not in said and "geokanon:" + PASSWORD not in said
    assert "schema rel_q" in said
    # the audit stays local; the database holds the release's tables
    assert (audit / "audit" / "audit.json").exists()
    tables = {
        r[0] for r in _rows(cluster, "SELECT tablename FROM pg_tables WHERE schemaname = 'rel_q'")
    }
    assert {"records", "groups", "classes", "units", "manifest", "release_files"} <= tables
    assert not any("audit" in t or "assignment" in t for t in tables)
    files = {r[0] for r in _rows(cluster, "SELECT name FROM rel_q.release_files")}
    assert "assignment.parquet" not in files and "mask_key" not in files
    rel = audit / "release"
    n_records = pq.read_metadata(rel / "records.parquet").num_rows
    assert _rows(cluster, "SELECT count(*) FROM rel_q.records")[0][0] == n_records
    geo = _rows(
        cluster,
        "SELECT srid, type FROM geometry_columns WHERE f_table_schema = 'rel_q' AND "
        "f_table_name = 'records'",
    )
    assert geo == [(28992, "POINT")]
    manifest = json.loads((rel / "manifest.json").read_text())
    assert (
        _rows(cluster, "SELECT manifest->>'input_sha256' FROM rel_q.manifest")[0][0]
        == (manifest["input_sha256"])
    )
    # no credential anywhere in what was written
    for p in [*audit.rglob("*")]:
        if p.is_file():
            assert PASSWORD.encode() not in p.read_bytes(), p
    # verify: the schema's files, the audit, the source read again from the database
    code, said = _run(
        capsys, "verify", url, "--out-schema", "rel_q", "--audit", str(audit), "--source", url
    )
    assert code == 0, said
    assert "PASS tables" in said and PASSWORD not in said
    # a row edited in the database fails the table comparison (exit 4)
    _rows(
        cluster, "UPDATE rel_q.records SET consumption = consumption + 1 WHERE fid = 1 RETURNING 1"
    )
    code, said = _run(
        capsys, "verify", url, "--out-schema", "rel_q", "--audit", str(audit), "--source", url
    )
    assert code == 4 and "consumption of table records differs" in said
    # the source changed since the release: its checksum no longer matches (exit 4)
    _rows(
        cluster, "UPDATE rel_q.records SET consumption = consumption - 1 WHERE fid = 1 RETURNING 1"
    )
    code, said = _run(
        capsys, "verify", url, "--out-schema", "rel_q", "--audit", str(audit), "--source", url,
        "--query", QUERY.replace("consumption,", "consumption * 2 AS consumption,"),
    )  # fmt: skip
    assert code == 2 and "--query" in said  # another query than the release's is refused


def test_release_from_table_to_files_and_existing_schema_needs_force(cluster, tmp_path, capsys):
    url = cluster.url()
    out = tmp_path / "out"
    code, said = _run(
        capsys, "release", url, "--table", "register.small", *POLICY, "--out", str(out)
    )
    assert code == 0, said
    code, said = _run(capsys, "verify", str(out), "--source", url)  # --table from the audit
    assert code == 0, said
    # every command that reads records takes the database too
    for argv in (
        ["risk", str(out), "--source", url],
        ["classify", url, "--table", "register.small", *POLICY],
        ["describe", url, "--table", "register.small", *POLICY],
        ["sweep", url, "--query", QUERY, "--k", "3,5", "--r-max", "300", "--unit", "gm_code"],
    ):
        code, said = _run(capsys, *argv)
        assert code == 0, (argv[0], said)
        if argv[0] == "describe":  # the plan names the table, the URL without its user
            assert "release table register.small in postgresql:///postgres?host=" in said
    audit_doc = json.loads((out / "audit" / "audit.json").read_text())
    assert audit_doc["read_options"]["table"] == "register.small"
    assert "postgresql" not in json.dumps(audit_doc)  # the URL is never recorded
    # to a schema that exists: refused without --force, the database as it was
    _rows(cluster, "CREATE SCHEMA taken; CREATE TABLE taken.mine (a int)")
    audit = tmp_path / "a"
    code, said = _run(
        capsys, "release", url, "--table", "register.small", *POLICY, "--out", url,
        "--out-schema", "taken", "--audit", str(audit),
    )  # fmt: skip
    assert code == 2 and "taken" in said and "--force" in said
    assert not audit.exists()
    assert _rows(cluster, "SELECT tablename FROM pg_tables WHERE schemaname = 'taken'") == [
        ("mine",)
    ]
    code, said = _run(
        capsys, "release", url, "--table", "register.small", *POLICY, "--out", url,
        "--out-schema", "taken", "--audit", str(audit), "--force",
    )  # fmt: skip
    assert code == 0, said
    got = {
        r[0] for r in _rows(cluster, "SELECT tablename FROM pg_tables WHERE schemaname = 'taken'")
    }
    assert "mine" not in got and "records" in got


def test_failed_commit_leaves_database_and_audit_as_they_were(
    cluster, tmp_path, capsys, monkeypatch
):
    from geokanon.errors import WriteError
    from geokanon.io import postgis

    def refuse(self):
        self.close()
        raise WriteError("commit refused (test)")

    monkeypatch.setattr(postgis.PendingLoad, "commit", refuse)
    url = cluster.url()
    audit = tmp_path / "a"
    code, said = _run(
        capsys, "release", url, "--table", "register.small", *POLICY, "--out", url,
        "--out-schema", "never", "--audit", str(audit),
    )  # fmt: skip
    assert code == 5, said
    assert not audit.exists()
    assert not (tmp_path / ".geokanon-build").exists() or not any(
        p.name.startswith("build") for p in (tmp_path / ".geokanon-build").rglob("*")
    )
    names = {r[0] for r in _rows(cluster, "SELECT nspname FROM pg_namespace")}
    assert "never" not in names and not any(n.startswith("geokanon_tmp") for n in names)


def test_refused_release_leaves_the_database_as_it_was(cluster, tmp_path, capsys):
    url = cluster.url()
    audit = tmp_path / "a"
    # GM0313 (48 dwellings) cannot keep 99.9 % of its records at k=40 within 50 m
    code, said = _run(
        capsys, "release", url, "--table", "register.small", "--k", "40", "--r-max", "50",
        "--unit", "gm_code", "--unit-cap", "0.001", "--out", url, "--out-schema", "refused",
        "--audit", str(audit),
    )  # fmt: skip
    assert code == 3, said
    assert not (audit / "audit").exists()
    names = {r[0] for r in _rows(cluster, "SELECT nspname FROM pg_namespace")}
    assert "refused" not in names and not any(n.startswith("geokanon_tmp") for n in names)


@pytest.mark.parametrize(
    ("table", "needle"),
    [("register.nosuch", "register.nosuch"), ("register.no_geometry", "lon/lat")],
)
def test_bad_tables_exit_2_writing_nothing(cluster, tmp_path, capsys, table, needle):
    out = tmp_path / "out"
    code, said = _run(
        capsys, "release", cluster.url(), "--table", table, *POLICY, "--out", str(out)
    )
    assert code == 2 and needle in said, said
    assert not out.exists()


def test_group_extents_layer_of_release_gpkg_is_loaded_as_polygons(cluster, tmp_path, capsys):
    """The release's ``release.gpkg`` layers load as PostGIS tables (extents as polygons).

    The GeoParquet 1.1 ``bbox`` covering column (a struct) goes in as json.
    """
    import pyogrio

    from geokanon.io.postgis import DatabaseTarget, compare_tables, load_release

    url = cluster.url()
    out = tmp_path / "out"
    code, said = _run(
        capsys, "release", url, "--table", "register.small", *POLICY, "--out", str(out)
    )
    assert code == 0, said
    rel = out / "release"
    layers = {name for name, _ in pyogrio.list_layers(rel / "release.gpkg")}
    assert "group_extents" in layers, layers
    pending = load_release(DatabaseTarget(url, "with_extents"), rel)
    pending.commit()
    geo = _rows(
        cluster,
        "SELECT srid, type FROM geometry_columns WHERE f_table_schema = 'with_extents' AND "
        "f_table_name = 'group_extents'",
    )
    assert geo == [(28992, "POLYGON")]
    assert compare_tables(url, "with_extents", rel) == []
    kind = _rows(
        cluster,
        "SELECT data_type FROM information_schema.columns WHERE table_schema = 'with_extents' "
        "AND table_name = 'groups' AND column_name = 'bbox'",
    )
    assert kind == [("json",)]
    _rows(cluster, "UPDATE with_extents.group_extents SET n_records = 1 WHERE fid = 2 RETURNING 1")
    assert compare_tables(url, "with_extents", rel) == [
        "column n_records of table group_extents differs from the file"
    ]


def test_a_query_failing_on_a_row_names_no_value(cluster, tmp_path, capsys):
    out = tmp_path / "out"
    bad = "SELECT point_id, gm_code, gm_naam::int AS n, geom FROM register.small"  # Baarn: no int
    code, said = _run(capsys, "release", cluster.url(), "--query", bad, *POLICY, "--out", str(out))
    assert code == 2 and "SQLSTATE 22P02" in said, said
    assert "Baarn" not in said and "invalid input syntax" not in said and not out.exists()

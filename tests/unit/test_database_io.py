"""Database inputs and outputs without a server: URLs, redaction, flags, unreachable servers.

The round trip against a real cluster is tests/system/test_postgis.py.
"""

from __future__ import annotations

import pytest

from geokanon.cli import main
from geokanon.errors import InputError

PASSWORD = "pw-Zr81-secret"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"postgresql://custodian:{PASSWORD}@db.example:5433/reg",
            "postgresql://db.example:5433/reg",
        ),
        ("postgresql://custodian@db.example/reg", "postgresql://db.example/reg"),
        (
            f"postgres:///reg?host=/run/pg&user=custodian&password={PASSWORD}",
            "postgres:///reg?host=/run/pg",
        ),
    ],
)
def test_urls_are_shown_without_user_or_password(url, shown):
    from geokanon.io.postgis import DatabaseInput, is_database_url, redact

    assert is_database_url(url)
    assert redact(url) == shown
    assert PASSWORD not in str(DatabaseInput(url, table="s.t"))


def test_a_database_input_needs_one_of_table_and_query():
    from geokanon.io.postgis import DatabaseInput, DatabaseTarget

    url = "postgresql:///reg?host=/tmp"
    with pytest.raises(InputError, match=r"--table SCHEMA\.TABLE or --query"):
        DatabaseInput(url)
    with pytest.raises(InputError, match="one of them"):
        DatabaseInput(url, table="a.b", query="SELECT 1")
    with pytest.raises(InputError, match="not a table name"):
        DatabaseInput(url, table="a.b.c")
    with pytest.raises(InputError, match="not a plain schema name"):
        DatabaseTarget(url, "rel; DROP TABLE x")


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(["--quiet", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_table_with_a_file_input_is_refused(tmp_path, capsys):
    src = tmp_path / "r.csv"
    src.write_text("x,y\n1000,2000\n1100,2100\n")
    code, said = _run(
        capsys, "release", str(src), "--table", "s.t", "--k", "2", "--r-max", "300",
        "--crs", "EPSG:28992", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2 and "--table reads from a database" in said
    assert not (tmp_path / "out").exists()


def test_database_out_needs_schema_and_audit(tmp_path, capsys):
    src = tmp_path / "r.csv"
    src.write_text("x,y\n1000,2000\n1100,2100\n")
    url = f"postgresql://custodian:{PASSWORD}@/reg?host={tmp_path}"
    base = ["release", str(src), "--k", "2", "--r-max", "300", "--crs", "EPSG:28992"]
    code, said = _run(capsys, *base, "--out", url, "--audit", str(tmp_path / "a"))
    assert code == 2 and "--out-schema NAME" in said
    code, said = _run(capsys, *base, "--out", url, "--out-schema", "rel")
    assert code == 2 and "--audit DIR" in said and "never goes to the database" in said
    assert PASSWORD not in said


def test_unreachable_server_exits_2_naming_no_credential(tmp_path, capsys):
    pytest.importorskip("psycopg")
    dead = tmp_path / "no-server"
    dead.mkdir()
    url = f"postgresql://custodian-q7:{PASSWORD}@/postgres?host={dead}"
    src = tmp_path / "r.csv"
    src.write_text("x,y\n1000,2000\n1100,2100\n")
    out = tmp_path / "out"
    policy = ["--k", "2", "--r-max", "300"]
    for argv in (
        ["release", url, "--table", "register.small", *policy, "--out", str(out)],
        ["classify", url, "--query", "SELECT 1 AS x, 2 AS y", *policy],
        ["release", str(src), "--crs", "EPSG:28992", *policy, "--out", url,
         "--out-schema", "s", "--audit", str(out)],
    ):  # fmt: skip
        code, said = _run(capsys, *argv)
        assert code == 2 and "cannot connect" in said, said
        assert PASSWORD not in said and "custodian-q7" not in said
        assert not out.exists()

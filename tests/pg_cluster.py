"""A throwaway PostgreSQL + PostGIS cluster for the database tests.

:func:`start_cluster` runs ``initdb`` and ``pg_ctl start`` on a fresh directory under
the system's temp dir, listening on a Unix socket in that directory only (no TCP port,
so nothing collides with another server on the machine), with ``trust`` authentication
for one superuser, ``geokanon``. :meth:`Cluster.stop` stops it and removes the
directory.

The binaries: ``GEOKANON_PG_BINDIR`` when set, else ``initdb`` on PATH, else the newest
``/usr/lib/postgresql/*/bin`` (Debian's packages ``postgresql``, ``postgis`` and
``postgresql-postgis``; ``.ci/run`` installs them). initdb refuses to run as root: as
root the server runs as the ``postgres`` system user (``runuser -u postgres``), who owns
the cluster directory; the tests, still root, connect through the socket.

When something is missing the tests are skipped with a message saying what, except
under CI (``CI=true``), where they fail: CI must run the database round trip.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import in_ci

SUPERUSER = "geokanon"


def _missing(what: str) -> None:
    msg = (
        f"PostgreSQL tests need {what}; install Debian's postgresql, postgis and "
        "postgresql-postgis (as .ci/run does) and pip install 'psycopg[binary]' (the test "
        "extra), or set GEOKANON_PG_BINDIR to the directory of initdb and pg_ctl"
    )
    if in_ci():
        pytest.fail(f"{msg}; CI=true, so a missing database fails the run", pytrace=False)
    pytest.skip(msg)


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or ``None``."""
    given = os.environ.get("GEOKANON_PG_BINDIR")
    if given:
        return Path(given) if (Path(given) / "initdb").exists() else None
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


@dataclass
class Cluster:
    """A running throwaway cluster."""

    root: Path
    bindir: Path
    runas: list[str]

    @property
    def socket_dir(self) -> Path:
        return self.root

    def url(self, db: str = "postgres", *, password: str | None = None) -> str:
        """``postgresql://geokanon@/db?host=SOCKET_DIR`` (a password, when given, is ignored
        by the trust authentication: for the redaction tests)."""
        who = SUPERUSER if password is None else f"{SUPERUSER}:{password}"
        return f"postgresql://{who}@/{db}?host={self.socket_dir}"

    def stop(self) -> None:
        subprocess.run(
            [*self.runas, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m",
             "immediate", "-w", "stop"],
            capture_output=True, check=False, timeout=60,
        )  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> Cluster:
    """Start a cluster with PostGIS in database ``postgres`` (skip or fail when missing)."""
    try:
        import psycopg
    except ImportError:
        _missing("the psycopg package")
    bindir = find_bindir()
    if bindir is None or not (bindir / "pg_ctl").exists():
        _missing("PostgreSQL server binaries (initdb, pg_ctl)")
    assert bindir is not None
    runas: list[str] = []
    # /tmp: short enough for the socket path, and reachable by the postgres user (a root
    # TMPDIR under /root is not)
    root = Path(
        tempfile.mkdtemp(prefix="geokanon-pg-", dir="/tmp" if os.path.isdir("/tmp") else None)
    )
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            _missing("the 'postgres' system user (initdb refuses root)")
        os.chown(root, user.pw_uid, user.pw_gid)
        runas = ["runuser", "-u", "postgres", "--"]
    root.chmod(0o755)
    cluster = Cluster(root, bindir, runas)
    data = root / "data"
    try:
        subprocess.run(
            [*runas, str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER,
             "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        opts = f"-k {root} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
        subprocess.run(
            [*runas, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"),
             "-o", opts, "-w", "-t", "60", "start"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log = (
            (root / "server.log").read_text(errors="replace")
            if (root / "server.log").exists()
            else ""
        )
        out = getattr(exc, "stderr", b"") or b""
        cluster.stop()
        pytest.fail(f"the test cluster did not start: {out.decode(errors='replace')}{log}")
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(cluster.url(), autocommit=True) as conn:
                try:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
                except psycopg.Error:
                    cluster.stop()
                    _missing("the PostGIS extension (Debian's postgresql-postgis)")
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                cluster.stop()
                raise
            time.sleep(0.2)
    return cluster

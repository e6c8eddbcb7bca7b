"""pytest plugin: fixtures that load a geokanon release for a downstream project's tests.

Registered through the ``pytest11`` entry point ``geokanon`` (or by hand with
``-p geokanon.testing_plugin``). It adds:

- the command-line options ``--geokanon-release=DIR`` and ``--geokanon-source=FILE``
  (write them with ``=``: pytest picks its root directory from the arguments before
  a plugin named with ``-p`` has declared its options, and would take a separate
  ``DIR`` for a test path);
- the ini values ``geokanon_release`` and ``geokanon_source`` (paths relative to
  the ini file's directory);
- the environment variables ``GEOKANON_RELEASE`` and ``GEOKANON_SOURCE``
  (the option wins over the ini value, which wins over the environment);
- the session fixtures ``geokanon_release`` (a loaded
  :class:`geokanon.testing.Release`; the test fails with a message saying how to
  name the directory when none is named) and ``geokanon_source`` (the source path,
  or ``None``).

Examples
--------
A downstream ``pytest.ini``::

    [pytest]
    geokanon_release = out/dwellings
    geokanon_source = data/dwellings.csv

and a test::

    from geokanon.testing import assert_k_anonymous

    def test_k(geokanon_release):
        assert_k_anonymous(geokanon_release, 5)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the library is imported only when a fixture is used
    from geokanon.testing import Release

__all__ = ["geokanon_release", "geokanon_source"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--geokanon-release``/``--geokanon-source`` and the matching ini values."""
    group = parser.getgroup("geokanon", "geokanon releases")
    group.addoption(
        "--geokanon-release",
        dest="geokanon_release",
        metavar="DIR",
        help="release directory (holding release/ and audit/) for the geokanon_release fixture",
    )
    group.addoption(
        "--geokanon-source",
        dest="geokanon_source",
        metavar="FILE",
        help="source file of that release, for the geokanon_source fixture",
    )
    parser.addini("geokanon_release", "release directory for the geokanon_release fixture")
    parser.addini("geokanon_source", "source file of the release (geokanon_source fixture)")


def _configured(config: pytest.Config, name: str) -> Path | None:
    value = config.getoption(name)
    if value:
        return Path(value).expanduser().resolve()
    ini: Any = config.getini(name)
    if ini:
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return (base / Path(str(ini)).expanduser()).resolve()
    env = os.environ.get(name.upper())
    if env:
        return Path(env).expanduser().resolve()
    return None


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the release under test in pytest's header."""
    path = _configured(config, "geokanon_release")
    return None if path is None else f"geokanon release: {path}"


@pytest.fixture(scope="session")
def geokanon_source(pytestconfig: pytest.Config) -> Path | None:
    """The source file named by ``--geokanon-source`` / ``geokanon_source``, or None."""
    path = _configured(pytestconfig, "geokanon_source")
    if path is not None and not path.is_file():
        pytest.fail(f"geokanon source file {str(path)!r} does not exist", pytrace=False)
    return path


@pytest.fixture(scope="session")
def geokanon_release(pytestconfig: pytest.Config, geokanon_source: Path | None) -> Release:
    """The release under test, loaded once per session (subjects from the source when given)."""
    path = _configured(pytestconfig, "geokanon_release")
    if path is None:
        pytest.fail(
            "no geokanon release named: pass --geokanon-release DIR, set geokanon_release "
            "in the ini file, or set GEOKANON_RELEASE",
            pytrace=False,
        )
    from geokanon.testing import load_release

    try:
        return load_release(path, source=geokanon_source)
    except ValueError as exc:  # InputError
        pytest.fail(str(exc), pytrace=False)

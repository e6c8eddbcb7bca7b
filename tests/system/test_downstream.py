"""The pytest plugin as a downstream project meets it: installed into a fresh virtual environment.

The test copies ``tests/downstream`` (a tiny project whose ``check_release.py`` uses the
``geokanon_release`` fixture and the assertions), creates a venv that sees the packages of
the Python running the suite (no downloads), installs geokanon into it with
``pip install --no-deps --no-build-isolation -e <repo>``, builds a small release and runs
the project's tests with the venv's Python: one must pass, the other fail with the
expected message.

``--system-site-packages`` alone is not enough: it shows the *base* interpreter's
site-packages, so when the suite itself runs in a virtual environment (the README's
command run inside a fresh venv) the new venv would see none of that venv's packages
(no pandas). :func:`see_running_site_packages` adds them.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOWNSTREAM = ROOT / "tests" / "downstream"


def small_points(path: Path) -> Path:
    """Four towns of 60 people, 300 m across, 3 km apart; deterministic."""
    rng = np.random.default_rng(20260)
    xs, ys, units = [], [], []
    for i, (cx, cy) in enumerate([(150_000, 450_000), (153_000, 450_000),
                                  (150_000, 453_000), (153_000, 453_000)]):  # fmt: skip
        r = 150 * np.sqrt(rng.random(60))
        a = 2 * np.pi * rng.random(60)
        xs.append(np.round(cx + r * np.cos(a), 2))
        ys.append(np.round(cy + r * np.sin(a), 2))
        units += [f"U{i}"] * 60
    frame = pd.DataFrame({"x": np.concatenate(xs), "y": np.concatenate(ys), "unit": units})
    frame.to_csv(path, index=False)
    return path


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def see_running_site_packages(py: Path, env: dict[str, str]) -> None:
    """Make the venv of ``py`` see the site-packages of the Python running the tests.

    A ``.pth`` file in the venv's own site-packages adds each of this interpreter's
    site directories (with their own ``.pth`` files) after the venv's, unless the venv
    sees it already (the interpreter is the base one).
    """
    dirs = [p for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"]) if p]
    own = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    # One line, run by site.py (no comprehension: it would not see the line's names).
    line = (
        "import itertools, site, sys; list(map(site.addsitedir, "
        f"itertools.filterfalse(sys.path.__contains__, {list(dict.fromkeys(dirs))!r})))\n"
    )
    (Path(own) / "zz_running_site_packages.pth").write_text(line, encoding="utf-8")


@pytest.mark.slow
def test_plugin_in_a_fresh_venv(tmp_path):
    if not DOWNSTREAM.is_dir():
        pytest.fail("tests/downstream is missing")
    # the release the downstream project checks
    source = small_points(tmp_path / "points.csv")
    out = tmp_path / "release"
    args = ["release", str(source), "--k", "5", "--r-max", "300", "--unit", "unit",
            "--crs", "EPSG:28992", "--out", str(out)]  # fmt: skip
    assert main(["-q", *args]) == 0

    # a fresh virtual environment with geokanon installed from this repository
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
        check=True, capture_output=True,
    )  # fmt: skip
    py = _venv_python(venv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GEOKANON_"))}
    see_running_site_packages(py, env)
    deps = subprocess.run(
        [str(py), "-c", "import numpy, pandas, pyarrow, pytest"], capture_output=True,
        text=True, env=env,
    )  # fmt: skip
    assert deps.returncode == 0, f"the venv does not see the suite's packages: {deps.stderr}"
    pip = [str(py), "-m", "pip", "install", "--no-deps", "-e", str(ROOT)]
    # with the build tools of the system site-packages: nothing is fetched ...
    install = subprocess.run(
        [*pip, "--no-build-isolation"], capture_output=True, text=True, env=env
    )
    if install.returncode != 0 and "bdist_wheel" in install.stdout + install.stderr:
        # ... unless 'wheel' is missing there: then pip builds in isolation, fetching
        # setuptools and wheel from the configured index (a local mirror on the CI machine)
        install = subprocess.run(pip, capture_output=True, text=True, env=env)
    assert install.returncode == 0, (install.stdout + install.stderr)[-2000:]
    where = subprocess.run(
        [str(py), "-c", "import geokanon, sys; print(geokanon.__file__); print(sys.prefix)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert str(ROOT / "src" / "geokanon") in where.stdout
    assert str(venv) in where.stdout

    # the plugin comes from the pytest11 entry point once pyproject.toml declares it;
    # until then it is named with -p (naming it both ways would register it twice)
    probe = subprocess.run(
        [str(py), "-c", "from importlib.metadata import entry_points as e; "
         "print(any(p.value == 'geokanon.testing_plugin' for p in e(group='pytest11')))"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    plugin = [] if probe.stdout.strip() == "True" else ["-p", "geokanon.testing_plugin"]

    project = tmp_path / "downstream"
    shutil.copytree(DOWNSTREAM, project)
    run = subprocess.run(
        [str(py), "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
         f"--geokanon-release={out}", f"--geokanon-source={source}"],
        cwd=project, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    text = run.stdout + run.stderr
    assert run.returncode == 1, text  # 1: some tests failed (not a usage or collection error)
    assert "1 failed, 1 passed" in text, text
    assert "FAILED check_release.py::test_demands_k_8" in text, text
    assert "test_release_is_safe" not in text  # it passed, so -ra does not list it
    # the message names the groups below k and by how much, never a coordinate
    assert "groups hold fewer than k=8 distinct subjects: group " in text, text
    assert "short)" in text
    coords = pd.read_csv(source)
    for value in [*coords["x"].head(20), *coords["y"].head(20)]:
        assert f"{value:.2f}" not in text

    # without a release named, the fixture says how to name one
    bare = subprocess.run(
        [str(py), "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
         "check_release.py::test_demands_k_8"],
        cwd=project, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert bare.returncode == 1
    assert "no geokanon release named: pass --geokanon-release DIR" in bare.stdout + bare.stderr

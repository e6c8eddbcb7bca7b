"""Output directories: killed runs, concurrent runs, --force replacement, write errors.

Issue 15, items 4, 5 and 8 (SPEC "Secrets that never leave the audit"): a killed run's
audit never waits beside the release for a later run to a different ``--out``; two runs to
one ``--out`` never both succeed; ``DIR`` holds an intact release at every instant of a
``--force`` replacement; a read-only or full filesystem ends in exit 5 with the directory
and the system's error named, the old release intact and nothing left behind.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import geokanon
from geokanon.cli import main
from geokanon.release import finish_manifest

ARGS = ["--unit", "unit", "--crs", "EPSG:28992", "--k", "3", "--r-max", "300"]
#: The source tree of the geokanon under test (the child processes import the same one).
SRC = str(Path(geokanon.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> Path:
    """5,000 records in 30 towns: a release that takes about a second to write."""
    rng = np.random.default_rng(15)
    n = 5000
    town = rng.integers(0, 30, n)
    cx, cy = rng.uniform(0, 20_000, 30), rng.uniform(0, 20_000, 30)
    path = tmp_path_factory.mktemp("input") / "points.csv"
    pd.DataFrame(
        {
            "x": (150_000 + cx[town] + rng.normal(0, 80, n)).round(1),
            "y": (450_000 + cy[town] + rng.normal(0, 80, n)).round(1),
            "unit": np.where(cx[town] > 10_000, "east", "west"),
        }
    ).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def first_release(points, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first") / "a"
    assert main(["--quiet", "release", str(points), *ARGS, "--out", str(out)]) == 0
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _listing(parent: Path) -> set[str]:
    """Everything under ``parent``, hidden entries included."""
    return {p.relative_to(parent).as_posix() for p in parent.rglob("*")}


def _spawn(argv: list[str], prelude: str = "") -> subprocess.Popen[bytes]:
    """``geokanon ARGV`` in a child process, after running ``prelude`` there."""
    code = prelude + "\nimport sys\nfrom geokanon.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen(
        [sys.executable, "-c", code, "--quiet", *argv],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _wait_for(parent: Path, proc: subprocess.Popen[bytes], pattern: str) -> Path:
    """Poll until a file ``pattern`` appears anywhere under ``parent`` (hidden too)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            found = list(parent.rglob(pattern))
        except OSError:  # a directory vanished while it was listed: look again
            found = []
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    raise AssertionError(f"no {pattern} under {parent}")


def test_killed_release_leaves_no_audit_for_a_run_to_another_out(points, tmp_path, capsys):
    """Item 4: SIGKILL mid-build; the next run into the parent (any --out) removes it."""
    parent = tmp_path / "p"
    proc = _spawn(["release", str(points), *ARGS, "--out", str(parent / "a")])
    audit = _wait_for(parent, proc, "assignment.parquet")  # the audit is being written
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (parent / "a").exists()
    # the killed run's build, audit included, is in the private build area
    assert audit.exists() and parent / ".geokanon-build" in audit.parents
    assert (parent / ".geokanon-build").stat().st_mode & 0o777 == 0o700
    assert main(["--quiet", "release", str(points), *ARGS, "--out", str(parent / "c")]) == 0
    assert "removed what a killed run to 'a' left" in capsys.readouterr().err
    assert {p.split("/")[0] for p in _listing(parent)} == {"c"}
    assert [p.relative_to(parent).as_posix() for p in parent.rglob("assignment.parquet")] == [
        "c/audit/assignment.parquet"
    ]


def test_second_run_to_the_same_out_exits_2_naming_the_first(points, tmp_path, capsys):
    """Item 5: two runs to one --out: the second stops at once and names the running one."""
    out = tmp_path / "p" / "a"
    proc = _spawn(["release", str(points), *ARGS, "--out", str(out)])
    try:
        _wait_for(out.parent, proc, "assignment.parquet")
        os.kill(proc.pid, signal.SIGSTOP)  # the first run holds --out, mid-build
        code = main(["--quiet", "release", str(points), *ARGS, "--out", str(out), "--force"])
        err = capsys.readouterr().err
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=120) == 0, proc.communicate()
    assert code == 2
    assert f"pid {proc.pid}, started " in err and "being written by another geokanon run" in err
    assert (out / "release" / "manifest.json").is_file()
    assert {p.split("/")[0] for p in _listing(out.parent)} == {"a"}


# Kill the run (os._exit: no clean-up runs) at the instant just after the old release at
# OUT was first moved (renamed away, or exchanged with the new one).
KILL_AFTER_MOVING_OUT = """
import os, pathlib
OUT = os.path.realpath(os.environ["KILL_OUT"])
def killing(rename):
    def wrapped(src, dst, *a, **k):
        rename(src, dst, *a, **k)
        if os.path.realpath(src) == OUT:
            os._exit(9)
    return wrapped
os.rename, os.replace = killing(os.rename), killing(os.replace)
try:
    import geokanon._outdir as outdir
except ImportError:
    outdir = None
if outdir is not None:
    exchange = outdir._renameat2
    def renameat2(src, dst, flags):
        if os.environ.get("NO_EXCHANGE") and flags == 2:
            raise OSError(38, "Function not implemented")
        exchange(src, dst, flags)
        if os.path.realpath(dst) == OUT and flags == 2:
            os._exit(9)
    outdir._renameat2 = renameat2
"""


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_force_killed_while_replacing_keeps_a_release(
    points, first_release, tmp_path, capsys, exchange
):
    """Item 5: a --force run killed while replacing never leaves OUT without a release.

    With the exchange, OUT holds the new release at the instant of the kill and the next
    run removes the old one; with two renames (a system without the exchange) the next
    run puts the old release back.
    """
    out = tmp_path / "p" / "a"
    shutil.copytree(first_release, out)
    before = _tree(out)
    env = {"KILL_OUT": str(out), **({} if exchange else {"NO_EXCHANGE": "1"})}
    os.environ.update(env)
    try:
        proc = _spawn(
            ["release", str(points), *ARGS, "--out", str(out), "--force", "--seed", "7"],
            prelude=KILL_AFTER_MOVING_OUT,
        )
        proc.wait(timeout=120)
    finally:
        for key in env:
            os.environ.pop(key)
    assert proc.returncode == 9, proc.communicate()
    if exchange:  # an intact release at OUT at the instant of the kill: the new one
        assert (out / "release" / "manifest.json").is_file() and _tree(out) != before
    assert main(["--quiet", "release", str(points), *ARGS, "--out", str(out.parent / "c")]) == 0
    err = capsys.readouterr().err
    if not exchange:
        assert "restored the previous release of 'a'" in err
        assert _tree(out) == before
    assert {p.split("/")[0] for p in _listing(out.parent)} == {"a", "c"}
    assert main(["verify", str(out), "--source", str(points)]) == 0


def _copy_parent(first_release: Path, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    out = tmp_path / "p" / "a"
    shutil.copytree(first_release, out)
    return out, _tree(out)


@pytest.mark.parametrize("case", ["ENOSPC write", "ENOSPC fsync", "EROFS"])
def test_write_error_exits_5_and_leaves_the_old_release(
    points, first_release, tmp_path, monkeypatch, capsys, case
):
    """Item 8: a full or read-only filesystem: exit 5, directory and error named, no trace."""
    out, before = _copy_parent(first_release, tmp_path)
    parent = out.parent
    listing = _listing(parent)
    inside = str(parent)
    if case == "ENOSPC write":  # the manifest, written with a file name
        write_text = pathlib.Path.write_text

        def full(self, *a, **k):
            if str(self).startswith(inside):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
            return write_text(self, *a, **k)

        monkeypatch.setattr(pathlib.Path, "write_text", full)
    elif case == "ENOSPC fsync":  # as pyarrow raises it: an errno, no file name
        monkeypatch.setattr(
            os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "Error writing"))
        )
    else:  # read-only: nothing can be created under the parent
        mkdir, open_ = os.mkdir, os.open

        def ro_mkdir(path, *a, **k):
            if str(path).startswith(inside) and not os.path.exists(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return mkdir(path, *a, **k)

        def ro_open(path, flags, *a, **k):
            if str(path).startswith(inside) and flags & os.O_CREAT:
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return open_(path, flags, *a, **k)

        monkeypatch.setattr(os, "mkdir", ro_mkdir)
        monkeypatch.setattr(os, "open", ro_open)
    code = main(["--quiet", "release", str(points), *ARGS, "--out", str(out), "--force"])
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert code == 5, err
    reason = os.strerror(errno.EROFS if case == "EROFS" else errno.ENOSPC)
    assert f"could not write {str(out)!r}: {reason}" in err and "Traceback" not in err
    assert _tree(out) == before
    assert _listing(parent) == listing


def test_sweep_out_on_a_full_filesystem_exits_5(points, tmp_path, monkeypatch, capsys):
    """Item 8 for ``sweep --out``: the same exit, the same message, nothing left."""
    out = tmp_path / "p" / "sw"
    out.mkdir(parents=True)
    (out / "mine.txt").write_text("the user's own file")
    inside = str(out.parent)
    write_text = pathlib.Path.write_text

    def full(self, *a, **k):
        if str(self).startswith(inside):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    argv = ["sweep", str(points), *ARGS[:4], "--k", "3", "--r-max", "300", "--out", str(out)]
    code = main(["--quiet", *argv])
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert code == 5, err
    assert f"could not write {str(out)!r}: {os.strerror(errno.ENOSPC)}" in err
    assert _listing(out.parent) == {"sw", "sw/mine.txt"}


def test_report_rebuild_replaces_page_and_manifest_together(points, first_release, tmp_path):
    """``report DIR`` goes through the same build-and-exchange: DIR is never half-updated."""
    out, _ = _copy_parent(first_release, tmp_path)
    page = out / "release" / "report.html"  # an older page: the rebuild changes it
    page.write_text(page.read_text().replace("</body>", "<p>an older page</p></body>"))
    finish_manifest(out, json.loads((out / "release" / "manifest.json").read_text()))
    before = _tree(out)
    script = textwrap.dedent(
        """
        import os, sys
        import geokanon.release as release
        finish = release.finish_manifest
        def killed(*a, **k):  # the page is rebuilt; die before the manifest is written
            os._exit(9)
        release.finish_manifest = killed
        """
    )
    proc = _spawn(["report", str(out)], prelude=script)
    assert proc.wait(timeout=120) == 9, proc.communicate()
    assert _tree(out) == before
    assert main(["--quiet", "report", str(out)]) == 0
    assert {p.split("/")[0] for p in _listing(out.parent)} == {"a"}
    assert "an older page" not in page.read_text()
    assert main(["verify", str(out), "--source", str(points)]) == 0

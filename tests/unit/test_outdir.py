"""The output-directory machinery on its own: lock, tidy, exchange, all-or-none files."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import geokanon
from geokanon import _outdir
from geokanon._outdir import BUILD_AREA, claim, remove_stale
from geokanon.errors import InputError, WriteError

SRC = str(Path(geokanon.__file__).resolve().parents[1])

HOLD = """
import sys, time
from geokanon._outdir import claim
with claim(sys.argv[1], force=True) as held, held.build() as build:
    (build.path / "audit.txt").write_text("true coordinates")
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], env={**os.environ, "PYTHONPATH": SRC},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_live_run_keeps_its_build_and_lock(tmp_path):
    """Another run into the parent tidies only what dead runs left; the live one's is kept."""
    parent = tmp_path / "p"
    proc = _holder(parent / "a")
    try:
        with claim(parent / "b", force=False) as held, held.build() as build:
            (build.path / "x").write_text("b")
        assert list(parent.glob(f"{BUILD_AREA}/a/build-*/audit.txt"))
        with pytest.raises(InputError, match=rf"another geokanon run \(pid {proc.pid}, started"):
            with claim(parent / "a", force=True):
                pass
    finally:
        proc.kill()
        proc.wait()
    assert remove_stale(parent / "b") == ["removed what a killed run to 'a' left in its build area"]
    assert sorted(os.listdir(parent)) == ["b"]


def test_build_area_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        with claim(tmp_path / "a", force=False) as held:
            assert (tmp_path / BUILD_AREA).stat().st_mode & 0o777 == 0o700
            assert held.slot.stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)
    assert sorted(os.listdir(tmp_path)) == []


def test_exchange_replaces_in_one_step_and_nested_claims_share_the_lock(tmp_path):
    out = tmp_path / "a"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with claim(out, force=True) as held:
        with claim(out, force=True) as again:  # the pipeline, then the writer
            assert again is held
            with again.build() as build:
                (build.path / "new.txt").write_text("new")
        assert sorted(os.listdir(out)) == ["new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["a"]


def test_legacy_leftovers_of_older_versions(tmp_path):
    """``.NAME.build-PID-HEX`` of a dead PID is removed; ``.NAME.old-...`` is put back."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    build = tmp_path / f".x.build-{dead}-0123abcd"
    (build / "audit").mkdir(parents=True)
    old = tmp_path / f".y.old-{dead}-89abcdef"
    (old / "release").mkdir(parents=True)
    notes = remove_stale(tmp_path / "z")
    assert sorted(os.listdir(tmp_path)) == ["y"] and (tmp_path / "y" / "release").is_dir()
    assert any("restored the previous release of 'y'" in n for n in notes)


def test_files_are_written_all_or_none(tmp_path):
    out = tmp_path / "sw"
    out.mkdir()

    def full(path: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    with pytest.raises(WriteError, match=r"could not write .*No space left on device \(ENOSPC\)"):
        with claim(out, force=True) as held:
            held.replace_files({"one.txt": lambda p: p.write_text("1"), "two.txt": full})
    assert sorted(os.listdir(tmp_path)) == ["sw"] and os.listdir(out) == []


def test_without_the_exchange_two_renames_and_a_warning(tmp_path, monkeypatch):
    def unsupported(src: Path, dst: Path, flags: int) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(_outdir, "_renameat2", unsupported)
    out = tmp_path / "a"
    out.mkdir()
    with pytest.warns(UserWarning, match="cannot exchange two directories in one step"):
        with claim(out, force=True) as held, held.build() as build:
            (build.path / "new.txt").write_text("new")
    assert os.listdir(out) == ["new.txt"] and sorted(os.listdir(tmp_path)) == ["a"]


def test_a_waiting_tidier_is_not_reported_as_a_run(tmp_path):
    """A run that meets the lock held by a tidying run waits for it instead of failing."""
    slot = tmp_path / BUILD_AREA / "a"
    fd = _outdir._lock(slot, "a", f"geokanon {_outdir._TIDYING}")
    start = time.monotonic()
    import threading

    threading.Timer(0.3, lambda: _outdir._unlock(slot, fd)).start()
    with claim(tmp_path / "a", force=False):
        pass
    assert time.monotonic() - start >= 0.25


def test_a_build_area_that_is_not_our_own_directory_is_refused(tmp_path):
    """A link planted at ``.geokanon-build`` would hand the audit to whoever made it."""
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir()
    parent = tmp_path / "p"
    parent.mkdir()
    (parent / BUILD_AREA).symlink_to(elsewhere)
    with pytest.raises(InputError, match="is not a directory of this user"):
        with claim(parent / "a", force=False):
            pass
    assert os.listdir(elsewhere) == [] and sorted(os.listdir(parent)) == [BUILD_AREA]


@pytest.mark.parametrize("exchange", [True, False])
@pytest.mark.parametrize("existed", [True, False])
def test_a_failing_after_install_step_puts_out_back(tmp_path, monkeypatch, exchange, existed):
    """A step run once the build is in place (a database commit) fails: ``out`` as it was."""
    if not exchange:

        def unsupported(src: Path, dst: Path, flags: int) -> None:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

        monkeypatch.setattr(_outdir, "_renameat2", unsupported)
    out = tmp_path / "a"
    if existed:
        out.mkdir()
        (out / "old.txt").write_text("old")
    seen: list[list[str]] = []
    cleaned: list[bool] = []

    def commit() -> None:
        seen.append(sorted(os.listdir(out)))  # the new build is in place when it runs
        raise WriteError("the commit failed")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the two renames' warning
        with pytest.raises(WriteError, match="commit failed"):
            with claim(out, force=True) as held, held.build() as build:
                (build.path / "new.txt").write_text("new")
                build.after_install.append(commit)
                build.cleanup.append(lambda: cleaned.append(True))
    assert seen == [["new.txt"]] and cleaned == [True]
    if existed:
        assert os.listdir(out) == ["old.txt"]
    else:
        assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == (["a"] if existed else [])

"""One writer per output directory: a lock, a private build area, a replacement in one step.

Every geokanon command that writes a directory (``release``, the partitioned release,
``demo``, ``report DIR``, ``sweep --out``) goes through :func:`claim`:

1. **Tidy first.** The parent's private build area ``PARENT/.geokanon-build/`` (mode
   0700, on the same filesystem as ``DIR``) is swept before anything else: whatever a run
   that no longer holds its lock left there is removed (unfinished builds with their audit,
   scratch files), an old release moved aside by a killed run is put back at its ``DIR``
   when ``DIR`` is missing (else removed), and the ``.DIR.build-PID-*`` / ``.DIR.old-PID-*``
   siblings of geokanon versions before this scheme are treated the same way. This happens
   for every ``DIR`` in the parent, not only the one being written, and each action is
   reported as a warning.
2. **Lock.** An exclusive ``fcntl.flock`` on ``PARENT/.geokanon-build/NAME/lock`` is held
   for the whole run. A second run to the same ``DIR`` fails at once (:class:`InputError`,
   exit 2) naming the running one by its PID and start time; the lock file holds nothing
   else. The kernel drops the lock when its holder dies, so a killed run never blocks the
   next one.
3. **Build, then exchange.** New content is built in ``PARENT/.geokanon-build/NAME/build-*``,
   fsynced, and swapped with ``DIR`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so
   ``DIR`` holds an intact release at every instant; the old one, now in the build area, is
   then removed. Where the exchange is not supported (not Linux, an old kernel, a filesystem
   without it) two renames are used and a warning says so: the old release waits in the
   build area between them, and the next run restores it if the second rename never came.
4. **Write errors.** An ``OSError`` from writing ``DIR`` or its build area (read-only or
   full filesystem, no permission) becomes :class:`~geokanon.errors.WriteError` (exit 5)
   naming the directory and the system's error; the build is removed first and ``DIR`` is
   untouched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geokanon.errors import InputError, WriteError

__all__ = ["BUILD_AREA", "Claim", "claim", "remove_stale", "replace_file", "write_error"]

#: The private build area beside every output directory (one per parent directory).
BUILD_AREA = ".geokanon-build"
#: Builds and old releases of geokanon versions before the build area: ``.NAME.build-PID-HEX``.
_LEGACY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>build|old)-(?P<pid>\d+)-[0-9a-f]{8}$")
#: errno values that only writing can raise (an OSError without a file name counts as ours).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
#: renameat2 errno values meaning "this system or filesystem cannot do that flag".
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_TIDYING = "tidying up"

_held: dict[Path, Claim] = {}
_held_lock = threading.Lock()


@dataclass
class Claim:
    """An output directory this process holds the lock of.

    Attributes
    ----------
    out
        The directory (absolute, symlinks resolved).
    shown
        The directory as the caller named it (for messages).
    slot
        ``PARENT/.geokanon-build/NAME``: this run's private build area.
    """

    out: Path
    shown: str
    slot: Path
    fd: int
    depth: int = field(default=1)
    _old: list[Path] = field(default_factory=list)

    def private_dir(self, kind: str, mode: int = 0o700) -> Path:
        """A new directory in the build area (removed by the next run if left there).

        The area itself is 0700, so whatever ``mode`` a directory in it has, only its
        owner reaches it; a build keeps the usual mode (``0o777`` less the umask), which
        ``DIR`` then has.
        """
        path = self.slot / f"{kind}-{uuid.uuid4().hex[:12]}"
        path.mkdir(mode=mode)
        return path

    @contextlib.contextmanager
    def build(self, *, seed: frozenset[str] | None = None) -> Iterator[Build]:
        """Yield a build directory; on success it replaces ``out`` in one step.

        Parameters
        ----------
        seed
            When given, the build starts as a copy of ``out`` (files hard-linked where the
            filesystem allows), except that the relative paths in ``seed`` are real copies:
            only those may be written in place in the build; any other file must be
            replaced (written anew), never modified, since it is shared with ``out``.
        """
        b = Build(self.private_dir("build", mode=0o777))
        previous = signal.getsignal(signal.SIGTERM)
        try:
            with contextlib.suppress(ValueError):  # not in the main thread: keep the handler
                signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
            if seed is not None:
                _link_tree(self.out, b.path, copy=seed)
            yield b
            if b.install:
                _fsync_tree(b.path)
                undo = self._install(b.path)
                try:
                    for hook in b.after_install:
                        hook()
                except BaseException:
                    undo()  # ``out`` as it was: the build (or nothing) back in the build area
                    raise
        finally:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, previous)
            for step in b.cleanup:
                with contextlib.suppress(Exception):
                    step()
            shutil.rmtree(b.path, ignore_errors=True)
            while self._old:  # the two-renames fallback's old release
                shutil.rmtree(self._old.pop(), ignore_errors=True)

    def _install(self, tmp: Path) -> Callable[[], None]:
        """Put ``tmp`` at ``out``; returns how to undo it (before the build area is swept)."""
        out = self.out
        if not os.path.lexists(out):
            try:
                _renameat2(tmp, out, _RENAME_NOREPLACE)
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise InputError(
                        f"output directory {self.shown!r} appeared while this run wrote it; "
                        "nothing was replaced: choose another --out or pass --force"
                    ) from None
                if exc.errno not in _UNSUPPORTED:
                    raise
                os.rename(tmp, out)
            _fsync_dir(out.parent)
            return functools.partial(os.rename, out, tmp)
        try:
            _renameat2(tmp, out, _RENAME_EXCHANGE)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            warnings.warn(
                f"this system cannot exchange two directories in one step "
                f"(renameat2 RENAME_EXCHANGE: {os.strerror(exc.errno or 0)}); {self.shown!r} "
                "was replaced by two renames: a run killed between them leaves the old "
                f"release in {BUILD_AREA}/, and the next geokanon run there puts it back",
                stacklevel=4,
            )
            old = self.slot / f"old-{uuid.uuid4().hex[:12]}"
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)
                raise
            _fsync_dir(out.parent)

            def undo_renames() -> None:
                os.rename(out, tmp)
                os.rename(old, out)

            self._old.append(old)
            return undo_renames
        # ``tmp`` now holds the old release; the caller's ``finally`` removes it.
        _fsync_dir(out.parent)
        return functools.partial(_renameat2, tmp, out, _RENAME_EXCHANGE)

    def replace_files(self, writers: dict[str, Callable[[Path], Any]]) -> dict[str, Path]:
        """Write files into ``out`` all or none: each to a private temporary file first.

        Parameters
        ----------
        writers
            File name in ``out`` -> function writing that file's content to a given path.
            Only when every one has written (and been fsynced) are they renamed into place.
        """
        tmp = {name: self.slot / f"tmp-{uuid.uuid4().hex[:12]}-{name}" for name in writers}
        try:
            for name, write in writers.items():
                write(tmp[name])
                _fsync_file(tmp[name])
            for name, path in tmp.items():
                os.replace(path, self.out / name)
        finally:
            for path in tmp.values():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        _fsync_dir(self.out)
        return {name: self.out / name for name in writers}


@dataclass
class Build:
    """A build directory; set ``install = False`` to drop it instead of installing it.

    ``after_install`` runs once the build is at ``out`` (e.g. a database commit); if one
    raises, ``out`` is put back as it was. ``cleanup`` runs at the end in any case.
    """

    path: Path
    install: bool = True
    after_install: list[Callable[[], None]] = field(default_factory=list)
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def claim(out: str | os.PathLike[str], *, force: bool, what: str = "release") -> Iterator[Claim]:
    """Tidy the parent, lock ``out`` for this run and yield the :class:`Claim`.

    Nested claims of the same directory in one process share the first one (the
    pipeline claims its output, then the release writer claims it again).

    Parameters
    ----------
    out
        The output directory.
    force
        Whether an existing ``out`` may be replaced (else :class:`InputError`).
    what
        The command, written into the lock file with the PID and start time.

    Raises
    ------
    InputError
        ``out`` exists and ``force`` is off, or another run holds its lock.
    WriteError
        The parent or the build area cannot be written.
    """
    shown = str(out)
    path = Path(out).resolve()
    if path.name == BUILD_AREA or not path.name:
        raise InputError(f"--out {shown!r} names geokanon's build area; choose another --out")
    with _held_lock:
        held = _held.get(path)
        if held is not None:
            held.depth += 1
    if held is not None:
        try:
            yield held
        finally:
            held.depth -= 1
        return
    for note in remove_stale(path):  # first of all, even when the run stops just below
        warnings.warn(note, stacklevel=3)
    if path.exists() and not force:
        raise InputError(
            f"output directory {path.name!r} already exists; choose another --out or pass --force"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(shown, exc, what) from exc
    slot = path.parent / BUILD_AREA / path.name
    try:
        fd = _lock(slot, shown, f"geokanon {what}")
    except OSError as exc:
        _drop_slot(slot)
        raise write_error(shown, exc, what) from exc
    c = Claim(out=path, shown=shown, slot=slot, fd=fd)
    try:
        if path.exists() and not force:  # written by a run that ended since the check above
            raise InputError(
                f"output directory {path.name!r} already exists; choose another --out or "
                "pass --force"
            )
        with _held_lock:
            _held[path] = c
        yield c
    except OSError as exc:
        if isinstance(exc, WriteError) or not _is_ours(exc, path):
            raise
        raise write_error(shown, exc, what) from exc
    finally:
        with _held_lock:
            _held.pop(path, None)
        _unlock(slot, fd)


def write_error(shown: str, exc: OSError, what: str = "release") -> WriteError:
    """The :class:`WriteError` for an ``OSError`` met while writing directory ``shown``."""
    code = exc.errno
    reason = os.strerror(code) if code else str(exc).splitlines()[0]
    name = errno.errorcode.get(code, "") if code else ""
    elsewhere = (
        "copy the release to a writable place and rebuild the report there"
        if what == "report"
        else "choose another --out"
    )
    fix = {
        errno.ENOSPC: f"free space on that filesystem or {elsewhere}",
        errno.EDQUOT: f"free space within your quota or {elsewhere}",
        errno.EROFS: f"the filesystem is read-only: {elsewhere}",
        errno.EACCES: f"you may not write there: {elsewhere}",
        errno.EPERM: f"you may not write there: {elsewhere}",
    }.get(code or 0, elsewhere)
    return WriteError(
        f"could not write {shown!r}: {reason}{f' ({name})' if name else ''}; {fix}. Any "
        "earlier release there is unchanged and no build data was left behind",
        code,
    )


def _is_ours(exc: OSError, out: Path) -> bool:
    """Whether ``exc`` came from writing ``out`` or its build area (not reading an input).

    By its file name where it has one (the parent itself, ``out`` or the build area and
    anything under them); else by an errno only writing raises, or by naming one of them.
    """
    roots = (out, out.parent / BUILD_AREA)
    names = [n for n in (exc.filename, getattr(exc, "filename2", None)) if n is not None]
    if names:
        for name in names:
            p = Path(os.path.abspath(os.fsdecode(name)))
            if p == out.parent or any(p == r or r in p.parents for r in roots):
                return True
        return False
    return exc.errno in _WRITE_ERRNOS or any(str(r) in str(exc) for r in roots)


# --------------------------------------------------------------------------------------
# Lock
# --------------------------------------------------------------------------------------


def _lock(slot: Path, shown: str, what: str, *, tidy: bool = False) -> int:
    """Create ``slot`` and hold the exclusive lock on ``slot/lock``; return its descriptor."""
    area = slot.parent
    lock = slot / "lock"
    deadline = time.monotonic() + 5.0
    for _attempt in range(1000):
        area.mkdir(mode=0o700, exist_ok=True)  # the parent is there (FileNotFoundError if not)
        _private(area)
        try:
            slot.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # another run removed the area just now: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", errors="replace").strip()
            os.close(fd)
            if tidy:
                raise
            if (not holder or _TIDYING in holder) and time.monotonic() < deadline:
                time.sleep(0.05)  # a run tidying the parent holds it for a moment
                continue
            raise InputError(
                f"output directory {shown!r} is being written by another geokanon run "
                f"({holder or 'starting'}); wait for it to end, or choose another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the file was removed by its previous holder after we opened it
            os.close(fd)
            continue
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {started}, {what}\n".encode(), 0)
        return fd
    raise OSError(errno.EAGAIN, "the build area kept changing while it was locked", str(lock))


def _unlock(slot: Path, fd: int) -> None:
    """Remove the lock file and the empty slot and area while still holding the lock."""
    with contextlib.suppress(OSError):
        (slot / "lock").unlink()
    _drop_slot(slot)
    os.close(fd)


def _drop_slot(slot: Path) -> None:
    for d in (slot, slot.parent):
        with contextlib.suppress(OSError):
            d.rmdir()


def _private(area: Path) -> None:
    """Make sure ``area`` is this user's own directory, closed to others (0700).

    A link, a file, or another user's directory there could hand the audit to someone
    else: refused.
    """
    st = os.lstat(area)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise InputError(
            f"{str(area)!r} is not a directory of this user (a link, a file, or another "
            "user's): geokanon builds releases there; remove it, or choose another --out"
        )
    if st.st_mode & 0o077:
        os.chmod(area, 0o700)


# --------------------------------------------------------------------------------------
# Tidy
# --------------------------------------------------------------------------------------


def remove_stale(out: str | os.PathLike[str]) -> list[str]:
    """Remove what killed runs left beside ``out`` (and every sibling); return what was done.

    Best effort: what cannot be removed (a read-only filesystem) is left, silently.

    Parameters
    ----------
    out
        Any output directory; its parent is tidied.

    Returns
    -------
    list of str
        One sentence per action (removed builds, restored or removed old releases).
    """
    parent = Path(out).resolve().parent
    notes: list[str] = []
    area = parent / BUILD_AREA
    if not parent.is_dir():
        return notes
    with contextlib.suppress(OSError):
        st = os.lstat(area)  # another user's area (or a link) is never tidied, nor trusted
        mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
        slots = sorted(p for p in area.iterdir() if p.is_dir()) if mine else []
        for slot in slots:
            target = parent / slot.name
            with _held_lock:
                if target in _held:  # this process's own run
                    continue
            try:
                fd = _lock(slot, str(target), f"geokanon {_TIDYING}", tidy=True)
            except OSError:  # a live run holds it (or it vanished): leave it
                continue
            try:
                notes += _tidy_slot(slot, target)
            finally:
                _unlock(slot, fd)
    with contextlib.suppress(OSError):
        for p in sorted(parent.iterdir()):
            m = _LEGACY.match(p.name)
            if m is None or not p.is_dir() or _alive(int(m["pid"])):
                continue
            notes += _tidy_one(p, m["kind"], parent / m["name"])
    return notes


def _tidy_slot(slot: Path, target: Path) -> list[str]:
    notes: list[str] = []
    entries = sorted(slot.iterdir())
    for p in entries:
        if p.name != "lock" and not p.name.startswith("old-"):
            notes += _tidy_one(p, "build", target)
    for p in entries:
        if p.name.startswith("old-"):
            notes += _tidy_one(p, "old", target)
    return notes


def _tidy_one(p: Path, kind: str, target: Path) -> list[str]:
    try:
        if kind == "old" and not os.path.lexists(target):
            os.rename(p, target)
            _fsync_dir(target.parent)
            return [
                f"restored the previous release of {target.name!r}, which a run killed while "
                "replacing it had left aside"
            ]
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    except OSError:
        return []
    if kind == "old":
        return [f"removed the previous release of {target.name!r} that a killed run left aside"]
    return [f"removed what a killed run to {target.name!r} left in its build area"]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------------------
# Files and renames
# --------------------------------------------------------------------------------------


def replace_file(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``path`` whole or not at all (temporary file, then a rename).

    The temporary file goes to the build area of a directory this process holds in
    the same parent (so a killed run leaves nothing beside it), else beside ``path``.
    """
    path = Path(path)
    folder = path.parent
    with _held_lock:
        mine = [c for c in _held.values() if c.out.parent == folder.resolve()]
    place = mine[0].slot if mine else folder
    tmp = place / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


@functools.cache
def _libc_renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc before 2.28, or another libc
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _renameat2(src: Path, dst: Path, flags: int) -> None:
    """``renameat2(src, dst, flags)``; ``OSError(ENOSYS)`` where there is none."""
    fn = _libc_renameat2()
    if fn is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), str(src))
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(src), None, str(dst))


def _link_tree(src: Path, dst: Path, *, copy: frozenset[str]) -> None:
    """Fill ``dst`` with the tree ``src``: hard links, real copies for the ``copy`` paths."""
    for dirpath, dirnames, files in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        for sub in dirnames:
            here = Path(dirpath) / sub
            if here.is_symlink():  # os.walk does not enter it
                os.symlink(os.readlink(here), dst / rel / sub)
            else:
                (dst / rel / sub).mkdir()
        for name in files:
            s, d, key = Path(dirpath) / name, dst / rel / name, (rel / name).as_posix()
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
                continue
            if key not in copy:
                try:
                    os.link(s, d)
                    continue
                except OSError:  # no hard links here: copy
                    pass
            shutil.copy2(s, d)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        _fsync_file(path)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            _fsync_file(Path(dirpath) / name)
        _fsync_dir(Path(dirpath))

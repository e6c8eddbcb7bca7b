"""How the process's C heap hands memory back: kept for reuse instead of unmapped at once.

A release allocates and frees arrays of tens of megabytes thousands of times. glibc's
malloc serves each of them with a fresh ``mmap`` and gives it back with ``munmap`` on
free, so every array starts on pages the kernel has to find and zero again. Where the
machine is a virtual machine that reports free pages to its host (free page
reporting, common on cloud and sandbox VMs), such a page also costs a fault on the
host: on the 2-core VM of ``benchmarks/README.md`` that took 13 of the 1e7 release's
63 CPU seconds. Serving large arrays from the heap, and not trimming its top at every
free, lets a freed array's pages serve the next one.

:func:`keep_freed_memory` does this for the running process (the ``geokanon`` command
calls it before anything else; a library call never changes the process's allocator);
:data:`WORKER_ENVIRON` does it for the processes of a local Dask cluster, whose driver
goes back to glibc's handling while it runs (:func:`freed_memory_unmapped`). The stages
that give memory back on purpose (``malloc_trim`` between the release's stages) still
do, so the peak does not grow: only the churn within a stage is kept warm.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

#: ``mallopt`` parameters (glibc's ``malloc.h``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

#: Free memory at the heap's top beyond which glibc trims it on its own (bytes): 1 GiB,
#: so that a stage's arrays are reused within it; ``malloc_trim`` still returns it.
TRIM_THRESHOLD = 1 << 30

#: glibc heaps ("arenas") the threads of the command share: 1e7 release's write stage
#: peaked at 3.56-3.58 GB with one per thread, 3.42-3.45 GB with 1 or 2; with 1, the GeoLife
#: fixes' release took 44 s against 42 s (the threads waited on one heap's lock).
ARENAS = 2

#: Environment of a local Dask cluster's worker processes (read by glibc as it starts
#: them): large arrays from the heap, and the heap trimmed only past
#: :data:`TRIM_THRESHOLD` (Dask's own default trims at 64 KiB).
WORKER_ENVIRON: dict[str, str] = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}


#: glibc's own values of the two settings (``malloc.h``, ``mallopt(3)``).
_GLIBC_MMAP_MAX = 65536
_GLIBC_TRIM_THRESHOLD = 128 * 1024

#: Whether :func:`keep_freed_memory` set this process (read by :func:`freed_memory_unmapped`).
_kept = False


def _mallopt(settings: dict[int, int]) -> bool:
    """``mallopt`` each (parameter, value); True when glibc took them all."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to set
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return all(int(libc.mallopt(key, value)) == 1 for key, value in settings.items())
    return False


def trim() -> None:
    """glibc's ``malloc_trim(0)``: the heap's free memory back to the system (nothing off
    glibc). The verifier keeps its own copy: it imports nothing of the writer's."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for reuse in this process; True when it was set.

    Large blocks come from the heap rather than from their own mappings, the heap's top
    is trimmed only past :data:`TRIM_THRESHOLD`, and the threads share at most
    :data:`ARENAS` heaps (so that what one thread freed serves another's arrays, and the
    peak does not grow with a heap per thread; one heap for all made the threads of the
    compiled kernels wait for each other). Nothing happens on a system without glibc.

    Examples
    --------
    >>> isinstance(keep_freed_memory(), bool)
    True
    """
    global _kept
    _kept = _mallopt({_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: TRIM_THRESHOLD, _M_ARENA_MAX: ARENAS})
    return _kept


@contextlib.contextmanager
def freed_memory_unmapped() -> Iterator[None]:
    """glibc's own handling of large blocks while the block runs (then kept again), when
    :func:`keep_freed_memory` set this process; otherwise nothing.

    For a Dask driver: it holds the tasks' results, many arrays of many sizes arriving
    in any order, and a heap that keeps what they freed grows with the gaps between
    them (at 1e8, 7.0 GB against 6.0 GB), for no gain in time (its work is a small share).

    Examples
    --------
    >>> with freed_memory_unmapped():
    ...     pass
    """
    if not _kept:
        yield
        return
    _mallopt({_M_MMAP_MAX: _GLIBC_MMAP_MAX, _M_TRIM_THRESHOLD: _GLIBC_TRIM_THRESHOLD})
    trim()  # what the heap kept goes back, so that large blocks are mapped again
    try:
        yield
    finally:
        _mallopt({_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: TRIM_THRESHOLD})

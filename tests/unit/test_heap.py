"""geokanon._heap: the command keeps freed memory for reuse; a library call does not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geokanon import _heap

#: In a child process (the setting is process-wide): where an 80 MB array's data lies,
#: in the heap or in a mapping of its own.
_WHERE = """
import sys
import numpy as np
from geokanon._heap import freed_memory_unmapped, keep_freed_memory
def where():
    a = np.ones(10_000_000)  # held while the maps are read
    at = a.ctypes.data
    for line in open("/proc/self/maps"):
        span, rest = line.split(" ", 1)
        lo, hi = (int(v, 16) for v in span.split("-"))
        if lo <= at < hi:
            return "heap" if rest.rstrip().endswith("[heap]") else "own mapping"
with freed_memory_unmapped():  # nothing was kept: nothing changes
    seen = [where()]
if sys.argv[1] == "keep":
    assert keep_freed_memory()
    seen.append(where())
    with freed_memory_unmapped():
        seen.append(where())
seen.append(where())
print(", ".join(seen))
"""


def _where(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _WHERE, mode], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt only")
def test_keep_freed_memory_serves_large_arrays_from_the_heap():
    assert _where("default") == "own mapping, own mapping"  # glibc: mmap'd, unmapped on free
    # kept, then glibc's own within freed_memory_unmapped (a Dask driver), then kept again
    assert _where("keep") == "own mapping, heap, own mapping, heap"


def test_worker_environ_is_read_by_glibc_as_numbers():
    assert set(_heap.WORKER_ENVIRON) == {"MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"}
    assert _heap.WORKER_ENVIRON["MALLOC_MMAP_MAX_"] == "0"
    assert int(_heap.WORKER_ENVIRON["MALLOC_TRIM_THRESHOLD_"]) == _heap.TRIM_THRESHOLD > 0


def test_the_process_entry_sets_it_and_main_does_not(monkeypatch):
    """``run`` (the ``geokanon`` script) sets it before ``main``; ``main``, which tests and
    library users call in their own process, leaves the allocator alone."""
    from geokanon import cli

    calls: list[str] = []
    monkeypatch.setattr(_heap, "keep_freed_memory", lambda: calls.append("heap") or True)
    monkeypatch.setattr(cli, "main", lambda argv=None: calls.append("main") or 0)
    assert cli.run([]) == 0
    assert calls == ["heap", "main"]

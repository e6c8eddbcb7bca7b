"""Whether numba's cache holds the compiled kernels, so a first run can say why it is slow.

geokanon's hot loops are numba functions compiled on first use and cached on disk
(``cache=True``: beside the module, or in ``NUMBA_CACHE_DIR``). On a machine where they
were never compiled (a fresh install, a new version, another CPU) the first release
spends about two minutes compiling before any work shows progress; later runs load
them in well under a second. :func:`kernels_cached` lets the command line say so before
it starts, instead of sitting silently in the release core.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

__all__ = ["COMPILE_NOTE", "kernels_cached"]

#: What the command line prints when :func:`kernels_cached` is False.
COMPILE_NOTE = (
    "geokanon: the numeric kernels are not compiled on this machine yet (a first run, "
    "or a new version): compiling them takes about 2 minutes, once; later runs load them "
    "from numba's cache (NUMBA_CACHE_DIR, else beside the installed modules)"
)


def _cached(dispatcher: Any) -> bool | None:
    """Whether ``dispatcher``'s cache index exists and was made from this source; None
    when this numba keeps its cache some other way (then nothing is claimed)."""
    try:
        cache_file = dispatcher._cache._cache_file
        index = Path(cache_file._index_path)
        stamp = cache_file._source_stamp
    except AttributeError:
        return None
    if not index.is_file():
        return False
    try:
        with index.open("rb") as fh:
            pickle.load(fh)  # the numba version that wrote it
            saved, overloads = pickle.loads(fh.read())
    except Exception:  # unreadable: numba will compile again
        return False
    return bool(saved == stamp and overloads)


def kernels_cached() -> bool:
    """Whether the largest kernels of classification and grouping are in numba's cache.

    False when either of them would be compiled on its first call: their cache index is
    missing, unreadable or made from other source. True when both are cached, or when
    this numba's cache cannot be inspected (nothing is claimed then).

    Examples
    --------
    >>> isinstance(kernels_cached(), bool)
    True
    """
    from geokanon.grouping import _sweep_piece
    from geokanon.neighbours import _search_level

    states = [_cached(d) for d in (_search_level, _sweep_piece)]
    return all(s is not False for s in states)

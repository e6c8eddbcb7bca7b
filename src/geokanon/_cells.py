"""Points on a square grid, compiled: each point's cell ``floor((v - origin) / side)``.

The cells' range, each point's index on the dense grid of that range, and a remapping of
such indices in place. Shared by the Dask tiling (:mod:`geokanon.distributed`: tile codes)
and the input's ``--unit-grid`` units (:func:`geokanon.io.units.grid_units`), so both
take a point's column and row by the same floating-point steps.
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np
from numpy.typing import NDArray

__all__ = ["KEY_LIMIT", "cell_range", "dense_cells", "remap"]

#: Cell columns and rows that pack into a key (``[-2**30, 2**30)``; geokanon.distributed's
#: ``pack_key``).
KEY_LIMIT = 2**30


@nb.njit(cache=True)
def cell_range(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    at: NDArray[np.integer],
    use_at: bool,
    ox: float,
    oy: float,
    side: float,
) -> tuple[int, int, int, int, bool]:  # pragma: no cover - compiled
    """Smallest and largest cell column and row of the records (``at``: those rows), and
    whether every one is finite and packable."""
    n = at.size if use_at else x.size
    lo_x = lo_y = np.inf
    hi_x = hi_y = -np.inf
    for r in range(n):
        i = at[r] if use_at else r
        fx = np.floor((x[i] - ox) / side)
        fy = np.floor((y[i] - oy) / side)
        if np.isnan(fx) or np.isnan(fy):
            return 0, 0, 0, 0, False
        lo_x, hi_x = min(lo_x, fx), max(hi_x, fx)
        lo_y, hi_y = min(lo_y, fy), max(hi_y, fy)
    lim = float(KEY_LIMIT)
    ok = n > 0 and lo_x >= -lim and lo_y >= -lim and hi_x < lim and hi_y < lim
    if not ok:
        return 0, 0, 0, 0, False
    return int(lo_x), int(hi_x), int(lo_y), int(hi_y), True


@nb.njit(cache=True)
def dense_cells(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    at: NDArray[np.integer],
    use_at: bool,
    ox: float,
    oy: float,
    side: float,
    lo_x: int,
    lo_y: int,
    nx: int,
    ny: int,
    out: NDArray[np.integer[Any]],
) -> NDArray[np.bool_]:  # pragma: no cover - compiled
    """Each record's cell ``(column - lo_x) * ny + row - lo_y`` into ``out`` (int32 for
    the tiles, int64 for the units); which cells hold a record."""
    n = out.size
    for r in range(n):
        i = at[r] if use_at else r
        cx = np.int64(np.floor((x[i] - ox) / side)) - lo_x
        cy = np.int64(np.floor((y[i] - oy) / side)) - lo_y
        out[r] = cx * ny + cy
    occupied = np.zeros(nx * ny, dtype=np.bool_)
    for r in range(n):
        occupied[out[r]] = True
    return occupied


@nb.njit(cache=True)
def remap(
    codes: NDArray[np.integer[Any]], rank: NDArray[np.integer[Any]]
) -> None:  # pragma: no cover - compiled
    """``codes[r] = rank[codes[r]]`` where ``codes[r] >= 0`` (in place, no temporaries)."""
    for r in range(codes.size):
        c = codes[r]
        if c >= 0:
            codes[r] = rank[c]

"""Clustered synthetic points for benchmarks: towns plus about 5 % rural scatter.

Generated in blocks so that 1e7 points never need more than the final arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def clustered_points(
    n: int, *, seed: int = 0, n_units: int = 3000, extent_m: float = 300_000.0
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """``n`` points in metres: a mixture of towns and ~5 % rural scatter, with unit codes.

    Parameters
    ----------
    n
        Number of points.
    seed
        Seed of the generator (same seed, same points).
    n_units
        Number of administrative units (a square grid of about this many cells).
    extent_m
        Side of the square study area in metres.

    Returns
    -------
    x, y, unit_codes
    """
    rng = np.random.default_rng(seed)
    n_rural = n // 20
    n_town = n - n_rural
    n_towns = max(10, n // 2_000)
    centres = rng.uniform(0.05 * extent_m, 0.95 * extent_m, (n_towns, 2))
    # Town sizes follow a heavy tail; spreads grow with size.
    weights = rng.pareto(1.2, n_towns) + 1.0
    weights /= weights.sum()
    sizes = rng.multinomial(n_town, weights)
    spread = 150.0 + 40.0 * np.sqrt(sizes)
    which = np.repeat(np.arange(n_towns), sizes)
    x = np.empty(n)
    y = np.empty(n)
    x[:n_town] = centres[which, 0] + rng.normal(0, 1, n_town) * spread[which]
    y[:n_town] = centres[which, 1] + rng.normal(0, 1, n_town) * spread[which]
    x[n_town:] = rng.uniform(0, extent_m, n_rural)
    y[n_town:] = rng.uniform(0, extent_m, n_rural)
    np.clip(x, 0, extent_m, out=x)
    np.clip(y, 0, extent_m, out=y)
    side = max(1, round(np.sqrt(n_units)))
    cell = extent_m / side
    ux = np.minimum((x / cell).astype(np.int64), side - 1)
    uy = np.minimum((y / cell).astype(np.int64), side - 1)
    return x, y, ux * side + uy

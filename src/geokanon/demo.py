"""The bundled example: a deterministic synthetic health-service dataset.

Modelled on the design note's worked example: about 84,200 patient home
locations, a dense city of wards, a ring of market towns, and thin rural
districts of hamlets and lone farmsteads at the edge of the map, where the
outliers are. Coordinates are metres in ETRS89 / LAEA Europe (EPSG:3035); the
records carry a patient id, an age and a deprivation quintile, and the name of
their district. Nothing here describes real people.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["DEMO_CRS", "DEMO_K", "DEMO_R_MAX_M", "demo_frame"]

DEMO_CRS = "EPSG:3035"
DEMO_K = 5
DEMO_R_MAX_M = 2000.0

_CENTRE = (4_020_000.0, 3_180_000.0)
_CITY_WARDS = 12
_RURAL = ("Fenholt", "Marrow Vale", "Kestle", "Upper Dunning", "Carrock", "Sallow Moor")


def _ward_of(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    angle = np.mod(np.arctan2(dy, dx), 2 * np.pi)
    return np.minimum((angle / (2 * np.pi) * _CITY_WARDS).astype(int), _CITY_WARDS - 1)


def demo_frame(seed: int = 20_260_401) -> pd.DataFrame:
    """The demo records as a DataFrame (identical for a given seed).

    Parameters
    ----------
    seed
        Seed of the generator; the default is the bundled example.

    Returns
    -------
    pandas.DataFrame
        Columns ``patient_id``, ``x``, ``y`` (EPSG:3035 metres), ``age``,
        ``deprivation`` (1 least .. 5 most deprived) and ``district``.

    Examples
    --------
    >>> df = demo_frame()
    >>> len(df) > 80_000, sorted(df.columns)[:3]
    (True, ['age', 'deprivation', 'district'])
    """
    rng = np.random.default_rng(seed)
    cx, cy = _CENTRE
    parts: list[pd.DataFrame] = []

    # The city: neighbourhood clusters around a dense core (about 71,000 patients).
    n_hoods = 163
    hood_r = np.abs(rng.normal(0, 4200, n_hoods))
    hood_a = rng.uniform(0, 2 * np.pi, n_hoods)
    hood_n = rng.integers(250, 640, n_hoods)
    hx = np.repeat(cx + hood_r * np.cos(hood_a), hood_n)
    hy = np.repeat(cy + hood_r * np.sin(hood_a), hood_n)
    spread = np.repeat(rng.uniform(180, 520, n_hoods), hood_n)
    x = hx + rng.normal(0, 1, hx.size) * spread
    y = hy + rng.normal(0, 1, hy.size) * spread
    ward = _ward_of(x - cx, y - cy)
    parts.append(
        pd.DataFrame(
            {
                "x": x,
                "y": y,
                "age": np.clip(rng.normal(41, 17, x.size), 0, 101).round(),
                "deprivation": rng.integers(1, 6, x.size),
                "district": [f"City Ward {w + 1:02d}" for w in ward],
            }
        )
    )

    # Market towns in a ring (about 9,000 patients), each its own district.
    for i, name in enumerate(("Ashby", "Brindle", "Coldharbour", "Dunmere", "Elstow", "Fairwick")):
        a = 2 * np.pi * (i + 0.5) / 6
        n = int(rng.integers(1200, 1800))
        tx, ty = cx + 19_000 * np.cos(a), cy + 19_000 * np.sin(a)
        parts.append(
            pd.DataFrame(
                {
                    "x": tx + rng.normal(0, 700, n),
                    "y": ty + rng.normal(0, 700, n),
                    "age": np.clip(rng.normal(45, 18, n), 0, 101).round(),
                    "deprivation": rng.integers(1, 6, n),
                    "district": name,
                }
            )
        )

    # Rural districts: hamlets of a few households and lone farmsteads, older and
    # more deprived than the city (so the bias check has something to find). The
    # last two are the thin upland districts where the outliers live.
    for i, name in enumerate(_RURAL):
        upland = i >= len(_RURAL) - 2
        a0 = 2 * np.pi * i / len(_RURAL)
        width = 2 * np.pi / len(_RURAL)
        n_hamlets = int(rng.integers(14, 20)) if upland else int(rng.integers(45, 70))
        ha = a0 + rng.uniform(0, width, n_hamlets)
        hr = rng.uniform(27_000, 42_000 if not upland else 60_000, n_hamlets)
        hn = rng.integers(4, 14, n_hamlets) if not upland else rng.integers(8, 26, n_hamlets)
        hx = np.repeat(cx + hr * np.cos(ha), hn) + rng.normal(0, 350, hn.sum())
        hy = np.repeat(cy + hr * np.sin(ha), hn) + rng.normal(0, 350, hn.sum())
        n_farms = int(rng.integers(95, 105)) if upland else int(rng.integers(8, 22))
        fa = a0 + rng.uniform(0, width, n_farms)
        fr = np.sqrt(
            rng.uniform(*((55_000**2, 95_000**2) if upland else (42_000**2, 50_000**2)), n_farms)
        )
        x = np.r_[hx, cx + fr * np.cos(fa)]
        y = np.r_[hy, cy + fr * np.sin(fa)]
        parts.append(
            pd.DataFrame(
                {
                    "x": x,
                    "y": y,
                    "age": np.clip(rng.normal(58, 15, x.size), 0, 101).round(),
                    "deprivation": np.clip(rng.integers(2, 7, x.size), 1, 5),
                    "district": name,
                }
            )
        )

    frame = pd.concat(parts, ignore_index=True)
    frame["x"] = frame["x"].round(1)
    frame["y"] = frame["y"].round(1)
    frame["age"] = frame["age"].astype(np.int64)
    frame["deprivation"] = frame["deprivation"].astype(np.int64)
    frame.insert(0, "patient_id", [f"P{i:06d}" for i in range(len(frame))])
    return frame

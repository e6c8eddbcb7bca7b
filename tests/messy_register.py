"""A messy register as a custodian holds it, built from the shared dwellings (deterministic).

From 6,000 of the sdcSpatial dwellings (RD New metres, ``../shared/data``): an ``owner``
column (subject ids, 20 % of the records spelled in lower case and 10 % padded with
spaces, the same owner under several spellings), a ``seen`` timestamp (ISO 8601, UTC), 81
records at one coordinate, 60 exact duplicate rows appended, and the kept column
``consumption``. The data are read from the shared folder, never copied into the
repository; :func:`write_messy_register` writes the register where a test asks.

Run as a script to write one: ``python3 -m tests.messy_register OUT.csv``.
"""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

#: Records drawn from the dwellings, before the duplicates are appended.
N_RECORDS = 6_000
#: Records moved onto one coordinate (an apartment block's address point).
N_AT_ONE_POINT = 81
#: Exact copies of earlier rows appended at the end.
N_DUPLICATES = 60
#: Distinct owners (some own several dwellings).
N_OWNERS = 4_500
#: The days over which the records are seen.
SPAN_DAYS = 30
COLUMNS = ("point_id", "x", "y", "consumption", "gm_code", "owner", "seen")


def messy_rows(dwellings_csv: Path, seed: int = 1) -> list[dict[str, str]]:
    """The register's rows, in file order.

    Parameters
    ----------
    dwellings_csv
        ``sdcspatial_dwellings/dwellings.csv`` of the shared data.
    seed
        Seed of every random choice (the same seed, the same register).

    Returns
    -------
    list of dict
        One mapping per row, the values as the CSV holds them.
    """
    with dwellings_csv.open(newline="") as fh:
        source = list(csv.DictReader(fh))
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(source), size=N_RECORDS, replace=False))
    owners = rng.integers(0, N_OWNERS, size=N_RECORDS)
    spelling = rng.random(N_RECORDS)
    start = datetime(2026, 3, 1, tzinfo=UTC)
    seconds = rng.integers(0, SPAN_DAYS * 86_400, size=N_RECORDS)
    block = rng.choice(N_RECORDS, size=N_AT_ONE_POINT, replace=False)
    anchor = source[int(picked[block[0]])]
    rows: list[dict[str, str]] = []
    for i, j in enumerate(picked):
        src = source[int(j)]
        owner = f"OWNER-{int(owners[i]):05d}"
        if spelling[i] < 0.2:
            owner = owner.lower()
        elif spelling[i] < 0.3:
            owner = f"  {owner} "
        seen = start + timedelta(seconds=int(seconds[i]))
        rows.append(
            {
                "point_id": src["point_id"],
                "x": src["x"],
                "y": src["y"],
                "consumption": src["consumption"],
                "gm_code": src["gm_code"],
                "owner": owner,
                "seen": seen.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    for i in block:
        rows[int(i)]["x"] = anchor["x"]
        rows[int(i)]["y"] = anchor["y"]
        rows[int(i)]["gm_code"] = anchor["gm_code"]
    for i in rng.choice(N_RECORDS, size=N_DUPLICATES, replace=False):
        rows.append(dict(rows[int(i)]))
    return rows


def write_messy_register(dwellings_csv: Path, out: Path, seed: int = 1) -> Path:
    """Write the register to ``out`` (CSV) and return ``out``."""
    rows = messy_rows(dwellings_csv, seed)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return out


if __name__ == "__main__":  # pragma: no cover - a helper for looking at the register by hand
    from tests.conftest import data_file

    write_messy_register(data_file("sdcspatial_dwellings", "dwellings.csv"), Path(sys.argv[1]))

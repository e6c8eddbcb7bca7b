"""Read point records (CSV, Parquet) into arrays in metres, with clear errors.

Nothing here prints or logs a coordinate, a subject id or a timestamp: errors
give counts and 1-based row numbers only.
"""

from __future__ import annotations

import difflib
import hashlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from geokanon.errors import InputError, PrivacyRiskWarning

__all__ = ["PointTable", "read_points", "sha256_file", "table_from_frame"]

_LONLAT_NAMES = {"lon", "lat", "longitude", "latitude", "lng"}


@dataclass(frozen=True, eq=False)
class PointTable:
    """Records as arrays, ready for the stages.

    Attributes
    ----------
    x, y
        Coordinates in metres (float64).
    subjects
        Dense int64 subject codes, or ``None`` (every record its own subject).
    times
        Seconds (float64), or ``None``.
    unit_codes, unit_names
        Administrative unit code per record and the name of each code; a
        single unit named ``all`` when no unit column was given.
    attributes
        Other columns, in input order, for ``--keep`` and the bias check.
    crs
        CRS string, or ``None`` for an unnamed metric CRS.
    source_sha256
        Checksum of the input file (or of the frame's bytes).
    """

    x: NDArray[np.float64]
    y: NDArray[np.float64]
    subjects: NDArray[np.int64] | None
    times: NDArray[np.float64] | None
    unit_codes: NDArray[np.int64]
    unit_names: NDArray[np.object_]
    attributes: pd.DataFrame = field(repr=False)
    crs: str | None = None
    source_sha256: str = ""

    def __len__(self) -> int:
        return int(self.x.size)

    @property
    def n_subjects(self) -> int:
        """Number of distinct subjects."""
        return len(self) if self.subjects is None else int(np.unique(self.subjects).size)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _missing_column(name: str, columns: list[str], role: str, flag: str) -> InputError:
    close = difflib.get_close_matches(name, columns, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(
        f"{role} column {name!r} is not in the input{hint} Give the right name with {flag} "
        f"(the input has {len(columns)} columns: {', '.join(map(repr, columns[:12]))})"
    )


def _row_list(mask: NDArray[np.bool_], limit: int = 10) -> str:
    rows = (np.flatnonzero(mask)[:limit] + 1).tolist()
    more = " ..." if mask.sum() > limit else ""
    return ", ".join(map(str, rows)) + more


def _numeric(frame: pd.DataFrame, col: str) -> NDArray[np.float64]:
    raw = frame[col]
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad_text = np.asarray(raw.notna()) & np.isnan(vals)
    if bad_text.any():
        sample = raw[bad_text].astype(str)
        comma = bool(sample.str.fullmatch(r"-?\d+,\d+").any())
        fix = "write decimals with a point, not a comma" if comma else "fix or drop these rows"
        raise InputError(
            f"column {col!r} has {int(bad_text.sum())} non-numeric values "
            f"(rows {_row_list(bad_text)}); {fix}"
        )
    return vals


def table_from_frame(
    frame: pd.DataFrame,
    *,
    x: str = "x",
    y: str = "y",
    subject: str | None = None,
    time: str | None = None,
    unit: str | None = None,
    crs: str | None = None,
    source_sha256: str = "",
) -> PointTable:
    """Build a :class:`PointTable` from a DataFrame with projected coordinates.

    Parameters
    ----------
    frame
        One row per record.
    x, y
        Coordinate columns, in metres of a projected CRS.
    subject, time, unit
        Optional subject id, time (ISO string or epoch seconds) and unit id columns.
    crs
        Name of the projected CRS, if known.
    source_sha256
        Checksum of the source, for the manifest.

    Returns
    -------
    PointTable

    Raises
    ------
    InputError
        Empty input, missing columns, NaN/inf or non-numeric coordinates,
        coordinates that look like degrees, empty subject ids.

    Examples
    --------
    >>> import pandas as pd
    >>> t = table_from_frame(pd.DataFrame({"x": [0.0, 5.0], "y": [1.0, 2.0]}))
    >>> len(t), t.unit_names.tolist()
    (2, ['all'])
    """
    if len(frame) == 0:
        raise InputError("the input has no records (empty or header only); nothing to do")
    columns = [str(c) for c in frame.columns]
    for name, role, flag in ((x, "x", "--x"), (y, "y", "--y")):
        if name not in frame.columns:
            if name in ("x", "y") and _LONLAT_NAMES & {c.lower() for c in columns}:
                raise InputError(
                    "the input has lon/lat columns but no projected x/y; geokanon needs "
                    "coordinates in metres: project the input to a metric CRS first, "
                    "or name the projected columns with --x/--y"
                )
            raise _missing_column(name, columns, role, flag)
    for opt, role, flag in (
        (subject, "subject", "--subject"),
        (time, "time", "--time"),
        (unit, "unit", "--unit"),
    ):
        if opt is not None and opt not in frame.columns:
            raise _missing_column(opt, columns, role, flag)
    xs = _numeric(frame, x)
    ys = _numeric(frame, y)
    bad = ~(np.isfinite(xs) & np.isfinite(ys))
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} records have missing, NaN or infinite coordinates "
            f"(rows {_row_list(bad)}); drop or fix them"
        )
    if (
        x.lower() in _LONLAT_NAMES
        or y.lower() in _LONLAT_NAMES
        or (
            np.abs(xs).max() <= 180 and np.abs(ys).max() <= 90 and np.ptp(xs) < 5 and np.ptp(ys) < 5
        )
    ):
        raise InputError(
            "the coordinates look like degrees (longitude/latitude), not metres; distances "
            "are never measured in degrees: project the input to a metric CRS first"
        )
    if crs is None:
        warnings.warn(
            "no CRS given: x/y are taken as metres in an unnamed projected CRS "
            "(name it with --crs)",
            UserWarning,
            stacklevel=2,
        )
    subjects = None
    if subject is not None:
        raw = frame[subject]
        text = raw.astype("string").str.strip()
        empty = np.asarray(raw.isna() | (text == "").fillna(True))
        if empty.any():
            raise InputError(
                f"{int(empty.sum())} records have an empty subject id in {subject!r} "
                f"(rows {_row_list(empty)}); give every record a subject"
            )
        folded = text.str.casefold()
        if folded.nunique() != raw.astype("string").nunique():
            warnings.warn(
                f"some subject ids in {subject!r} differ only by case or surrounding space; "
                "they are counted as different subjects, which overstates group sizes if "
                "they are the same person: clean the ids",
                PrivacyRiskWarning,
                stacklevel=2,
            )
        codes, _ = pd.factorize(raw, sort=True)
        subjects = codes.astype(np.int64)
    times = None
    if time is not None:
        times = _times(frame[time], time)
    if unit is not None:
        raw_u = frame[unit]
        if raw_u.isna().any():
            miss = np.asarray(raw_u.isna())
            raise InputError(
                f"{int(miss.sum())} records have no unit in {unit!r} (rows {_row_list(miss)}); "
                "fill them or use a unit polygon file"
            )
        ucodes, unames = pd.factorize(raw_u.astype(str), sort=True)
        unit_codes = ucodes.astype(np.int64)
        unit_names = np.asarray(unames, dtype=object)
    else:
        unit_codes = np.zeros(len(frame), dtype=np.int64)
        unit_names = np.asarray(["all"], dtype=object)
    used = {x, y, subject, time, unit} - {None}
    attributes = frame[[c for c in frame.columns if c not in used]].reset_index(drop=True)
    return PointTable(
        x=np.ascontiguousarray(xs),
        y=np.ascontiguousarray(ys),
        subjects=subjects,
        times=times,
        unit_codes=unit_codes,
        unit_names=unit_names,
        attributes=attributes,
        crs=crs,
        source_sha256=source_sha256,
    )


def _times(raw: pd.Series, col: str) -> NDArray[np.float64]:
    if raw.isna().any():
        miss = np.asarray(raw.isna())
        raise InputError(
            f"{int(miss.sum())} records have no time in {col!r} (rows {_row_list(miss)})"
        )
    if pd.api.types.is_numeric_dtype(raw):
        return raw.to_numpy(dtype=np.float64)
    parsed = pd.to_datetime(raw, errors="coerce", utc=False, format="ISO8601")
    bad = np.asarray(parsed.isna())
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} times in {col!r} are not ISO 8601 or epoch seconds "
            f"(rows {_row_list(bad)})"
        )
    if parsed.dt.tz is None:
        raise InputError(
            f"times in {col!r} carry no time zone; give them with an offset (e.g. 'Z') "
            "or convert them to epoch seconds"
        )
    ns = parsed.dt.tz_convert("UTC").astype("int64").to_numpy()
    return ns.astype(np.float64) / 1e9


def read_points(
    path: str | Path,
    *,
    x: str = "x",
    y: str = "y",
    subject: str | None = None,
    time: str | None = None,
    unit: str | None = None,
    crs: str | None = None,
) -> PointTable:
    """Read a CSV or Parquet file of records with projected coordinates.

    Parameters
    ----------
    path
        ``.csv`` or ``.parquet`` file.
    x, y, subject, time, unit, crs
        As for :func:`table_from_frame`.

    Returns
    -------
    PointTable

    Raises
    ------
    InputError
        Unreadable or unsupported file, or any problem :func:`table_from_frame` finds.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"input file {str(p)!r} does not exist")
    if p.is_dir():
        raise InputError(f"input {str(p)!r} is a directory; give a CSV or Parquet file")
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".txt"):
            frame = pd.read_csv(p, low_memory=False)
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(p)
        else:
            raise InputError(
                f"input {p.name!r} has an unsupported type {suffix!r}; give a .csv or .parquet file"
            )
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError(f"input {p.name!r} is empty; nothing to do") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(
            f"input {p.name!r} could not be read as {suffix[1:]} ({type(exc).__name__}); "
            "check that the file is complete and of the type its name says"
        ) from None
    return table_from_frame(
        frame, x=x, y=y, subject=subject, time=time, unit=unit, crs=crs,
        source_sha256=sha256_file(p),
    )  # fmt: skip

"""Published times: bins wide enough that every (class, time bin) holds k subjects.

A record's time is never published as it is. Each published class (a group, or
a generalised unit class) gets one bin width from a fixed ladder (15 minutes up
to a year, then "any time"): the narrowest width at which every non-empty bin
of that class holds at least k distinct subjects. A class's records are then
published with the bin their time falls in.

Rules, documented for consumers:

- Absolute times are binned in UTC on bins aligned to the Unix epoch (a day bin
  runs from 00:00 to 24:00 UTC). Daylight saving time never creates or removes a
  bin, because UTC has none; readers in a local zone shift the bin edges by
  their offset.
- Time-of-day mode bins the 24-hour UTC clock (``time_mode="time_of_day"``); its
  widest bin before "any time" is the whole day.
- With no time column nothing is published about time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

__all__ = ["ABSOLUTE_LADDER_S", "TIME_OF_DAY_LADDER_S", "bin_labels", "time_bins"]

_H = 3600
#: Bin widths tried for absolute times, narrowest first (seconds); 0 means "any time".
ABSOLUTE_LADDER_S = (900, 1800, _H, 2 * _H, 3 * _H, 6 * _H, 12 * _H, 24 * _H, 7 * 24 * _H,
                     30 * 24 * _H, 365 * 24 * _H, 0)  # fmt: skip
#: Bin widths tried on the 24-hour clock; 0 means "any time of day".
TIME_OF_DAY_LADDER_S = (900, 1800, _H, 2 * _H, 3 * _H, 4 * _H, 6 * _H, 8 * _H, 12 * _H, 0)


def time_bins(
    class_of: NDArray[np.int64],
    times: NDArray[np.float64],
    subjects: NDArray[np.int64],
    k: int,
    *,
    time_of_day: bool = False,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Bin width per class and bin index per record.

    Parameters
    ----------
    class_of
        Class of each record (group or generalised class, any integer key); -1 for
        records that are not published.
    times
        Seconds (UTC epoch, or any time for time-of-day mode).
    subjects
        Subject code per record.
    k
        Distinct subjects every (class, bin) must hold.
    time_of_day
        Bin the 24-hour clock instead of the time line.

    Returns
    -------
    width, index
        Per record: the bin width in seconds (0: any time) and the bin index
        (``floor(t / width)``; 0 when the width is 0). -1 for unpublished records.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.array([0.0, 60, 120, 180, 240, 7200])
    >>> w, i = time_bins(np.zeros(6, np.int64), t, np.arange(6), 3)
    >>> w.tolist()
    [10800, 10800, 10800, 10800, 10800, 10800]
    """
    n = class_of.size
    width = np.full(n, -1, dtype=np.int64)
    index = np.full(n, -1, dtype=np.int64)
    pub = np.flatnonzero(class_of >= 0)
    if pub.size == 0:
        return width, index
    t = np.asarray(times, dtype=np.float64)[pub]
    if time_of_day:
        t = np.mod(t, 86_400.0)
    ladder = TIME_OF_DAY_LADDER_S if time_of_day else ABSOLUTE_LADDER_S
    cls = class_of[pub]
    subj = subjects[pub]
    classes, cls_code = np.unique(cls, return_inverse=True)
    chosen = np.full(classes.size, -1, dtype=np.int64)
    for w in ladder:
        open_ = chosen < 0
        if not open_.any():
            break
        if w == 0:
            chosen[open_] = 0
            break
        b = np.floor(t / w).astype(np.int64)
        frame = pd.DataFrame({"c": cls_code, "b": b, "s": subj})
        distinct = frame.drop_duplicates().groupby(["c", "b"], sort=False).size()
        small = distinct[distinct < k].index.get_level_values("c").unique().to_numpy()
        good = np.ones(classes.size, dtype=bool)
        good[small] = False
        chosen[open_ & good] = w
    width[pub] = chosen[cls_code]
    wsafe = np.where(width[pub] > 0, width[pub], 1)
    index[pub] = np.where(width[pub] > 0, np.floor(t / wsafe).astype(np.int64), 0)
    return width, index


def bin_labels(
    width: NDArray[np.int64], index: NDArray[np.int64], *, time_of_day: bool = False
) -> NDArray[np.object_]:
    """Readable bin labels: ``2008-10-23T02:00Z/PT1H``, ``04:00-05:00 UTC`` or ``any time``.

    Examples
    --------
    >>> import numpy as np
    >>> bin_labels(np.array([3600, 0]), np.array([1, 0])).tolist()
    ['1970-01-01T01:00Z/PT3600S', 'any time']
    >>> bin_labels(np.array([3600]), np.array([4]), time_of_day=True).tolist()
    ['04:00-05:00 UTC']
    """
    frame = pd.DataFrame({"w": width, "i": index})
    keys = frame.drop_duplicates().reset_index(drop=True)
    labels: list[str | None] = []
    for w, i in zip(keys["w"].tolist(), keys["i"].tolist(), strict=True):
        if w < 0:
            labels.append(None)
        elif w == 0:
            labels.append("any time of day" if time_of_day else "any time")
        elif time_of_day:
            a, b = i * w, (i + 1) * w
            labels.append(f"{_clock(a)}-{_clock(b)} UTC")
        else:
            start = pd.Timestamp(i * w, unit="s", tz="UTC").strftime("%Y-%m-%dT%H:%MZ")
            labels.append(f"{start}/PT{w}S")
    keys["label"] = pd.Series(labels, dtype=object)
    merged = frame.merge(keys, on=["w", "i"], how="left", sort=False)
    return merged["label"].to_numpy(dtype=object)


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"

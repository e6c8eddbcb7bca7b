"""A catalogue of tiny canonical point sets, shared by every test file.

Each case is ``(x, y, subjects)`` with ``subjects`` ``None`` or a list.
"""

from __future__ import annotations

import math

CASES: dict[str, tuple[list[float], list[float], list[str] | None]] = {
    "empty": ([], [], None),
    "one_point": ([0.0], [0.0], None),
    "k_minus_1_points": ([0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0], None),
    "all_identical": ([5.0] * 8, [5.0] * 8, None),
    "collinear": ([float(i) * 10 for i in range(12)], [0.0] * 12, None),
    "one_subject_many_points": ([float(i) for i in range(10)], [0.0] * 10, ["s"] * 10),
    "nan": ([0.0, math.nan, 2.0, 3.0, 4.0], [0.0] * 5, None),
    "household": (
        [0.0, 0.0, 0.0, 0.0, 50.0, 60.0, 70.0],
        [0.0] * 7,
        ["h1", "h1", "h1", "h1", "a", "b", "c"],
    ),
}

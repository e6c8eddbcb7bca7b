"""Frozen, keyword-only options and the small enums shared by every stage.

The names here are the names everywhere: the Python API, the command line
(``--r-max`` is ``r_max_m``), the TOML config file, the manifest and the report.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from geokanon.errors import InputError

#: Passes of classify-then-dispose allowed before the parameters are declared unsatisfiable.
MAX_PASSES = 5


class Label(enum.IntEnum):
    """First-class outlier labels, stored as ``uint8`` codes (upper bounds inclusive).

    ``OK``: iota <= 1; ``MERGE``: 1 < iota <= merge_ratio; ``GENERALISE``:
    merge_ratio < iota <= generalise_ratio; ``SUPPRESS``: above.
    """

    OK = 0
    MERGE = 1
    GENERALISE = 2
    SUPPRESS = 3

    @property
    def text(self) -> str:
        """Lower-case name used in tables, JSON and files."""
        return self.name.lower()


class Disposal(enum.IntEnum):
    """What finally happened to a record, stored as ``uint8`` codes."""

    GROUPED = 0
    MERGED = 1
    GENERALISED = 2
    SUPPRESSED = 3

    @property
    def text(self) -> str:
        """Lower-case name used in tables, JSON and files."""
        return self.name.lower()


class TimeMode(enum.StrEnum):
    """How time gaps are measured: on the absolute time line or on the 24-hour clock."""

    ABSOLUTE = "absolute"
    TIME_OF_DAY = "time_of_day"


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class OutlierPolicy:
    """What the release may tolerate, validated on construction.

    Parameters
    ----------
    k
        Minimum number of distinct subjects in every published class (integer >= 2).
    r_max_m
        Largest spatial generalisation tolerated, in metres: no record is
        published farther than this from its own location.
    merge_ratio, generalise_ratio
        Isolation-ratio thresholds between ``merge``/``generalise`` and
        ``generalise``/``suppress`` (1 < merge_ratio < generalise_ratio).
    tau
        Global cap on the suppressed share of distinct subjects, in (0, 1).
    unit_cap
        Cap on the suppressed share within any administrative unit, in (0, 1].
    disposal_warning_share
        Share of records needing any disposal above which a
        :class:`~geokanon.errors.ParameterWarning` says the parameters are the problem.
    t_max_s
        Largest tolerated time generalisation in seconds (``None``: no time dimension).
    time_mode
        ``absolute`` or ``time_of_day`` (cyclic, 24 h).
    membership_sensitive
        When membership in the dataset is itself sensitive, suppression is
        replaced by generalisation to the whole study area.
    allow_synthetic
        Opt in to documented synthesis of neighbour records.
    seed
        Seed of every random choice (snapping noise, masks, bias tests).
    snap_m
        Coarsest grid step to which group representatives are snapped (``None``:
        r_max_m / 20); a group whose members are close together is snapped to a finer
        power-of-two fraction of it, never below 1 m (docs/release-format.md, "Group
        representatives").
    scale_factor_min
        Smallest scale factor (projected metres per ground metre, in any direction) of
        the working CRS over the data. ``r_max_m`` is a promise on the ground; every
        distance the stages measure is in working-CRS metres and is held to
        :attr:`r_work_m` ``= r_max_m * min(1, scale_factor_min)`` instead, so that a
        member within it of its representative is within ``r_max_m`` on the ellipsoid
        too. The pipeline sets it from the data
        (:func:`geokanon.projection.scale_factor_range`); a value given here can only
        lower it. 1 for an unnamed metric CRS.

    Examples
    --------
    >>> OutlierPolicy(k=5, r_max_m=2000.0).tau
    0.01
    >>> OutlierPolicy(k=1, r_max_m=100.0)
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: k must be an integer >= 2, got 1; ...
    """

    k: int
    r_max_m: float
    merge_ratio: float = 2.0
    generalise_ratio: float = 4.0
    tau: float = 0.01
    unit_cap: float = 0.10
    disposal_warning_share: float = 0.05
    t_max_s: float | None = None
    time_mode: TimeMode = TimeMode.ABSOLUTE
    membership_sensitive: bool = False
    allow_synthetic: bool = False
    seed: int = 0
    snap_m: float | None = None
    scale_factor_min: float = 1.0

    def __post_init__(self) -> None:
        k = self.k
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise InputError(
                f"k must be an integer >= 2, got {k!r}; "
                "k is the number of distinct subjects every published class must hold"
            )
        _positive_finite("r_max_m", self.r_max_m)
        for name in ("merge_ratio", "generalise_ratio"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value):
                raise InputError(f"{name} must be a finite number, got {value!r}")
        if not 1.0 < self.merge_ratio < self.generalise_ratio:
            raise InputError(
                "the ratios must satisfy 1 < merge_ratio < generalise_ratio, got "
                f"merge_ratio={self.merge_ratio!r}, generalise_ratio={self.generalise_ratio!r}"
            )
        _share("tau", self.tau, upper_inclusive=False)
        _share("unit_cap", self.unit_cap, upper_inclusive=True)
        _share("disposal_warning_share", self.disposal_warning_share, upper_inclusive=True)
        if self.t_max_s is not None:
            _positive_finite("t_max_s", self.t_max_s)
        try:
            object.__setattr__(self, "time_mode", TimeMode(self.time_mode))
        except ValueError:
            raise InputError(
                f"time_mode must be one of {[m.value for m in TimeMode]}, got {self.time_mode!r}"
            ) from None
        if (
            self.time_mode is TimeMode.TIME_OF_DAY
            and self.t_max_s is not None
            and self.t_max_s > 43200
        ):
            raise InputError(
                f"t_max_s={self.t_max_s!r} exceeds 12 h, the largest gap on a 24-hour clock; "
                "use time_mode='absolute' or a smaller t_max_s"
            )
        for name in ("membership_sensitive", "allow_synthetic"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"seed must be a non-negative integer, got {self.seed!r}")
        _positive_finite("scale_factor_min", self.scale_factor_min)
        if self.snap_m is not None:
            _positive_finite("snap_m", self.snap_m)
            if self.snap_m > self.r_max_m / 4:
                raise InputError(
                    f"snap_m={self.snap_m!r} is more than a quarter of r_max_m={self.r_max_m!r}; "
                    "snapping would use up the displacement budget: choose a smaller snap_m"
                )

    @property
    def snap_step_m(self) -> float:
        """Coarsest grid step of published representatives, in metres."""
        return self.snap_m if self.snap_m is not None else self.r_max_m / 20.0

    @property
    def r_work_m(self) -> float:
        """``r_max_m`` in working-CRS metres: ``r_max_m * min(1, scale_factor_min)``.

        Every stage measures against it (labels, groups, merges), so what holds in the
        working CRS holds on the ground. Where the scale exceeds 1 everywhere, the map
        distance is the longer one, and the radius stays ``r_max_m``.

        Examples
        --------
        >>> OutlierPolicy(k=5, r_max_m=250.0, scale_factor_min=0.9996).r_work_m
        249.9
        """
        return self.r_max_m * min(1.0, self.scale_factor_min)

    @property
    def search_radius_m(self) -> float:
        """Distance beyond which no neighbour can change a label (generalise_ratio x r_work_m)."""
        return self.generalise_ratio * self.r_work_m

    @property
    def uses_time(self) -> bool:
        """Whether the temporal isolation ratio is part of the label."""
        return self.t_max_s is not None

    def replace(self, **changes: Any) -> OutlierPolicy:
        """Return a copy with some fields changed (validated again).

        Examples
        --------
        >>> OutlierPolicy(k=5, r_max_m=100.0).replace(k=4).k
        4
        """
        values = self.to_dict()
        values.update(changes)
        return OutlierPolicy(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping of the policy, with the policy's own names."""
        out = asdict(self)
        out["time_mode"] = str(self.time_mode)
        return out

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names accepted by the constructor (and by the TOML config file)."""
        return tuple(f.name for f in fields(cls))


def _positive_finite(name: str, value: object) -> None:
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        raise InputError(f"{name} must be a finite number > 0, got {value!r}")


def _share(name: str, value: object, *, upper_inclusive: bool) -> None:
    ok = _is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = v > 0 and (v <= 1 if upper_inclusive else v < 1)
    if not ok:
        bound = "(0, 1]" if upper_inclusive else "(0, 1)"
        hint = ""
        if _is_real(value) and 1 <= float(value) <= 100:  # type: ignore[arg-type]
            pct = float(value)  # type: ignore[arg-type]
            hint = f"; a share, not a percentage: {pct:g} % is {pct / 100:g}"
        raise InputError(f"{name} must be a share in {bound}, got {value!r}{hint}")

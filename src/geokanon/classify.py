"""Isolation ratios, outlier labels, and the per-unit suppression table.

A record's isolation ratio is ``iota = d_{k-1} / r_max`` where ``d_{k-1}`` is the
distance to its ``(k-1)``-th nearest other subject (see
:mod:`geokanon.neighbours`), both in working-CRS metres (``r_max`` is
:attr:`~geokanon.policy.OutlierPolicy.r_work_m`, so that an ``ok`` label promises
k-1 other subjects within r_max on the ground, the labels saying what the groups
can achieve). With a time column space and time are judged
together: ``iota`` is the ``(k-1)``-th smallest, over the other subjects, of
``max(distance / r_max, time gap / t_max)`` (a subject's nearest record in that
measure), so ``iota <= 1`` means ``k-1`` other subjects within ``r_max`` *and*
``t_max`` at once, and a ``t_max`` longer than the data's time span changes no
label. Labels are :class:`~geokanon.policy.Label` codes (``uint8``), upper
bounds inclusive.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon.errors import InputError, ParameterWarning
from geokanon.neighbours import (
    count_distinct,
    subject_codes,
    subject_neighbour_distances,
    subject_spacetime_ratios,
)
from geokanon.policy import Label, OutlierPolicy, TimeMode

__all__ = [
    "CapVerdict",
    "Classification",
    "UnitTable",
    "cap_verdict",
    "classify",
    "labels_from_ratios",
    "spacetime_ratios",
    "unit_table",
]

_DAY_S = 86_400.0


@dataclass(frozen=True)
class Classification:
    """Labels of one classification pass.

    Attributes
    ----------
    labels
        ``uint8`` :class:`~geokanon.policy.Label` codes, one per record.
    iota
        Isolation ratio that decided the label (space and time together where
        the policy has ``t_max_s``); ``inf`` where no ``k-1`` other subjects lie
        within the search limits.
    iota_space
        Spatial ratio ``d_{k-1} / r_max`` (the same array as ``iota`` without times).
    space_labels
        The labels the spatial ratio alone gives, or ``None`` without a time
        dimension. Never milder than ``labels``: a record whose label is worse
        is an outlier (or a worse one) only because of time.
    """

    labels: NDArray[np.uint8]
    iota: NDArray[np.float64]
    iota_space: NDArray[np.float64]
    space_labels: NDArray[np.uint8] | None = None

    def counts(self) -> dict[str, int]:
        """Records per label; every label is present, ``ok`` to ``suppress``."""
        c = np.bincount(self.labels, minlength=len(Label))
        return {lab.text: int(c[lab]) for lab in Label}

    def because_of_time(self) -> NDArray[np.bool_]:
        """Per record: its label is worse than the spatial ratio alone would give."""
        if self.space_labels is None:
            return np.zeros(self.labels.shape, dtype=bool)
        return self.labels > self.space_labels

    def time_counts(self) -> dict[str, int] | None:
        """Per label, the records that have it only because of time (``None`` without times).

        ``ok`` is always 0; e.g. ``suppress: 3`` means three records are labelled
        ``suppress`` whose spatial ratio alone would give a milder label.
        """
        if self.space_labels is None:
            return None
        c = np.bincount(self.labels[self.because_of_time()], minlength=len(Label))
        return {lab.text: int(c[lab]) for lab in Label}


def labels_from_ratios(iota: ArrayLike, policy: OutlierPolicy) -> NDArray[np.uint8]:
    """Label codes from isolation ratios, with the design note's inclusive upper bounds.

    Parameters
    ----------
    iota
        Isolation ratios.
    policy
        Supplies ``merge_ratio`` and ``generalise_ratio``.

    Returns
    -------
    numpy.ndarray
        ``uint8`` codes of :class:`~geokanon.policy.Label`.

    Examples
    --------
    >>> from geokanon.policy import OutlierPolicy
    >>> labels_from_ratios([0.5, 1.0, 1.5, 2.0, 4.0, 4.1], OutlierPolicy(k=5, r_max_m=1.0)).tolist()
    [0, 0, 1, 1, 2, 3]
    """
    a = np.asarray(iota, dtype=np.float64)
    labels = np.zeros(a.shape, dtype=np.uint8)
    labels[a > 1.0] = Label.MERGE
    labels[a > policy.merge_ratio] = Label.GENERALISE
    labels[a > policy.generalise_ratio] = Label.SUPPRESS
    return labels


def spacetime_ratios(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subj: NDArray[np.int64] | None,
    times: ArrayLike,
    policy: OutlierPolicy,
    *,
    count: int | None = None,
    r_max_m: float | None = None,
    last_only: bool = True,
) -> NDArray[np.float64]:
    """The joint space-time ratios of the policy: ``(n, 1)``, or ``(n, count)``.

    Records farther than the search radius (``generalise_ratio * r_max_m``) or
    ``generalise_ratio * t_max_s`` apart are not searched for: no label
    depends on them. ``r_max_m`` overrides the policy's (the sweep's cells).
    """
    assert policy.t_max_s is not None
    r = policy.r_work_m if r_max_m is None else float(r_max_m)
    return subject_spacetime_ratios(
        x, y, np.asarray(times, dtype=np.float64), subj,
        count=policy.k - 1 if count is None else count, r_max_m=r, t_max_s=policy.t_max_s,
        period=_DAY_S if policy.time_mode is TimeMode.TIME_OF_DAY else None,
        max_distance=policy.generalise_ratio * r,
        max_gap=policy.generalise_ratio * policy.t_max_s, last_only=last_only,
    )  # fmt: skip


def classify(
    x: ArrayLike,
    y: ArrayLike,
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
) -> Classification:
    """Label every record ``ok``, ``merge``, ``generalise`` or ``suppress``.

    Parameters
    ----------
    x, y
        Coordinates in metres of a projected CRS.
    policy
        The outlier policy (k, r_max_m, ratios, time settings).
    subjects
        Subject id per record; ``None`` makes every record its own subject, in
        which case the labels equal the design note's rule exactly.
    times
        Times in seconds, required when ``policy.t_max_s`` is set.

    Returns
    -------
    Classification

    Raises
    ------
    InputError
        Fewer distinct subjects than ``k``, mismatched lengths, missing times.

    Examples
    --------
    >>> import numpy as np
    >>> from geokanon.policy import OutlierPolicy
    >>> pol = OutlierPolicy(k=3, r_max_m=10.0)
    >>> classify([0, 1, 2, 100], [0, 0, 0, 0], pol).counts()
    {'ok': 3, 'merge': 0, 'generalise': 0, 'suppress': 1}
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if n == 0:
        raise InputError("the input has no records; nothing to classify")
    subj = None if subjects is None else subject_codes(subjects, n)
    n_subjects = n if subj is None else int(subj.max()) + 1
    if n_subjects < policy.k:
        raise InputError(
            f"the input holds {n_subjects} distinct subjects, fewer than k={policy.k}; "
            "no class of k subjects can exist: lower k or add records"
        )
    if policy.uses_time and times is None:
        raise InputError(
            "t_max_s is set but no times were given; pass a time column or drop t_max_s"
        )
    # Only the (k-1)-th distance decides the label: the search keeps just that column.
    d = subject_neighbour_distances(
        xa, ya, subj, count=policy.k - 1, max_distance=policy.search_radius_m, last_only=True
    )
    # The same arithmetic as the design note (d / r_max, then compare ratios), with r_max
    # in working-CRS metres (policy.r_work_m: r_max on the ground, see OutlierPolicy).
    iota_space = d[:, 0] / policy.r_work_m
    if not policy.uses_time:
        return Classification(
            labels=labels_from_ratios(iota_space, policy), iota=iota_space, iota_space=iota_space
        )
    assert times is not None
    iota = spacetime_ratios(xa, ya, subj, times, policy)[:, 0]
    return Classification(
        labels=labels_from_ratios(iota, policy),
        iota=iota,
        iota_space=iota_space,
        space_labels=labels_from_ratios(iota_space, policy),
    )


@dataclass(frozen=True)
class UnitTable:
    """Per-unit records, subjects and suppression, worst unit first.

    ``share`` is suppressed distinct subjects over distinct subjects in the
    unit (a subject counts as suppressed in a unit when any of its records
    there is suppressed); without a subject column it is the record share.
    """

    unit: NDArray[np.object_]
    records: NDArray[np.int64]
    subjects: NDArray[np.int64]
    suppressed: NDArray[np.int64]
    suppressed_subjects: NDArray[np.int64]
    share: NDArray[np.float64] = field(repr=False)

    def __len__(self) -> int:
        return int(self.unit.size)

    def rows(self) -> list[dict[str, object]]:
        """One plain dict per unit, worst first."""
        return [
            {
                "unit": str(self.unit[i]),
                "records": int(self.records[i]),
                "subjects": int(self.subjects[i]),
                "suppressed": int(self.suppressed[i]),
                "suppressed_subjects": int(self.suppressed_subjects[i]),
                "share": float(self.share[i]),
            }
            for i in range(len(self))
        ]


def _distinct_pairs_per_group(
    group: NDArray[np.int64], subj: NDArray[np.int64] | None, n_groups: int
) -> NDArray[np.int64]:
    if subj is None:
        return np.bincount(group, minlength=n_groups).astype(np.int64)
    n_subj = int(subj.max()) + 1 if subj.size else 1
    pairs = np.unique(group.astype(np.int64) * n_subj + subj)
    return np.bincount(pairs // n_subj, minlength=n_groups).astype(np.int64)


def _subjects_per_unit(
    codes: NDArray[np.int64],
    subj: NDArray[np.int64],
    sup: NDArray[np.bool_],
    n_units: int,
    n_subjects: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Distinct subjects, and distinct suppressed subjects, per unit in O(n + units + subjects)
    (:func:`_subjects_per_unit_ranges`, one range of subjects per thread)."""
    parts = max(1, min(nb.get_num_threads(), n_subjects // 100_000))
    n_subj, n_sup = _subjects_per_unit_ranges(codes, subj, sup, n_units, n_subjects, parts)
    return n_subj.sum(axis=0), n_sup.sum(axis=0)


@nb.njit(cache=True, parallel=True)
def _subjects_per_unit_ranges(
    codes: NDArray[np.int64],
    subj: NDArray[np.int64],
    sup: NDArray[np.bool_],
    n_units: int,
    n_subjects: int,
    parts: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """Per range of subjects (``parts`` equal ranges, each on its own), distinct subjects and
    distinct suppressed subjects per unit.

    A range's records are counting-sorted by subject; walking one subject's records, a
    unit counts the subject once (``last[unit]`` remembers the last subject seen).
    """
    n = codes.size
    n_subj = np.zeros((parts, n_units), np.int64)
    n_sup = np.zeros((parts, n_units), np.int64)
    for part in nb.prange(parts):
        lo = n_subjects * part // parts
        hi = n_subjects * (part + 1) // parts
        start = np.zeros(hi - lo + 1, np.int32)  # fewer than 2**31 records (unit_table)
        for i in range(n):
            s = subj[i]
            if lo <= s < hi:
                start[s - lo + 1] += 1
        for s in range(hi - lo):
            start[s + 1] += start[s]
        pos = start[: hi - lo].copy()
        by_code = np.empty(start[hi - lo], np.int32)
        by_sup = np.empty(start[hi - lo], np.bool_)
        for i in range(n):
            s = subj[i]
            if lo <= s < hi:
                p = pos[s - lo]
                pos[s - lo] = p + 1
                by_code[p] = codes[i]
                by_sup[p] = sup[i]
        last = np.full(n_units, -1, np.int64)
        last_sup = np.full(n_units, -1, np.int64)
        for s in range(hi - lo):
            for t in range(start[s], start[s + 1]):
                u = by_code[t]
                if last[u] != s:
                    last[u] = s
                    n_subj[part, u] += 1
                if by_sup[t] and last_sup[u] != s:
                    last_sup[u] = s
                    n_sup[part, u] += 1
    return n_subj, n_sup


def unit_table(
    suppressed: ArrayLike,
    unit_codes: ArrayLike,
    unit_names: ArrayLike,
    subjects: ArrayLike | None = None,
) -> UnitTable:
    """Per-unit suppression in one sort, no loop over units.

    Parameters
    ----------
    suppressed
        Boolean per record.
    unit_codes
        Integer code per record in ``[0, len(unit_names))``.
    unit_names
        Name of every unit code.
    subjects
        Subject codes per record (``None``: every record its own subject).

    Returns
    -------
    UnitTable
        Sorted by share (descending), then suppressed subjects, then unit name.

    Examples
    --------
    >>> t = unit_table([True, False, False, True], [0, 0, 1, 1], ["A", "B"])
    >>> t.rows()[0]["share"]
    0.5
    """
    sup = np.asarray(suppressed, dtype=bool)
    codes = np.asarray(unit_codes)
    if codes.dtype not in (np.int32, np.int64):  # int32 codes are counted without a copy
        codes = codes.astype(np.int64)
    names = np.asarray(unit_names, dtype=object)
    nu = names.size
    subj = None if subjects is None else np.asarray(subjects, dtype=np.int64)
    records = np.bincount(codes, minlength=nu).astype(np.int64)
    n_sup = np.bincount(codes[sup], minlength=nu).astype(np.int64)
    if subj is None:
        n_subj = records
        sup_subj = n_sup
    elif (
        subj.size
        and int(subj.min()) >= 0
        and int(subj.max()) <= 4 * subj.size + (1 << 20)
        and subj.size < 2**31  # the kernel's positions and unit codes are int32
        and nu < 2**31
        and int(codes.min()) >= 0
        and int(codes.max()) < nu
    ):
        n_subj, sup_subj = _subjects_per_unit(
            codes.astype(np.int64, copy=False), subj, sup, nu, int(subj.max()) + 1
        )
    else:
        n_subj = _distinct_pairs_per_group(codes, subj, nu)
        sup_subj = _distinct_pairs_per_group(codes[sup], subj[sup], nu)
    share = np.divide(sup_subj, n_subj, out=np.zeros(nu, dtype=np.float64), where=n_subj > 0)
    keep = records > 0
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((names[idx].astype(str), -sup_subj[idx], -share[idx]))]
    return UnitTable(
        unit=names[order],
        records=records[order],
        subjects=n_subj[order],
        suppressed=n_sup[order],
        suppressed_subjects=sup_subj[order],
        share=share[order],
    )


@dataclass(frozen=True)
class CapVerdict:
    """Global and per-unit cap verdicts of a suppression outcome."""

    suppressed_records: int
    suppressed_subjects: int
    subjects: int
    suppressed_share: float
    disposal_share: float
    passes_global_cap: bool
    passes_unit_cap: bool
    units_over_cap: tuple[str, ...]
    worst_unit: str | None
    worst_unit_share: float
    many_disposals: bool

    def to_dict(self) -> dict[str, object]:
        """JSON-ready mapping."""
        return {
            "suppressed_records": self.suppressed_records,
            "suppressed_subjects": self.suppressed_subjects,
            "subjects": self.subjects,
            "suppressed_share": self.suppressed_share,
            "disposal_share": self.disposal_share,
            "passes_global_cap": self.passes_global_cap,
            "passes_unit_cap": self.passes_unit_cap,
            "units_over_cap": list(self.units_over_cap),
            "worst_unit": self.worst_unit,
            "worst_unit_share": self.worst_unit_share,
            "many_disposals": self.many_disposals,
        }


def cap_verdict(
    suppressed: ArrayLike,
    disposed: ArrayLike,
    table: UnitTable,
    policy: OutlierPolicy,
    subjects: ArrayLike | None = None,
    *,
    warn: bool = True,
) -> CapVerdict:
    """Compare suppression with the caps, and warn when many records need a disposal.

    Parameters
    ----------
    suppressed
        Boolean per record: removed from the release.
    disposed
        Boolean per record: needed any disposal (label other than ``ok``).
    table
        The per-unit table of the same outcome.
    policy
        Supplies ``tau``, ``unit_cap`` and ``disposal_warning_share``.
    subjects
        Subject codes per record, or ``None``.
    warn
        Emit a :class:`~geokanon.errors.ParameterWarning` above the disposal share.

    Returns
    -------
    CapVerdict
    """
    sup = np.asarray(suppressed, dtype=bool)
    n = sup.size
    if subjects is None:
        n_subj = n
        sup_subj = int(sup.sum())
    else:
        s = np.asarray(subjects, dtype=np.int64)
        n_subj = count_distinct(s)
        sup_subj = count_distinct(s[sup])
    share = sup_subj / n_subj if n_subj else 0.0
    disposal_share = float(np.asarray(disposed, dtype=bool).mean()) if n else 0.0
    over = tuple(
        str(u) for u, sh in zip(table.unit, table.share, strict=True) if sh > policy.unit_cap
    )
    many = disposal_share > policy.disposal_warning_share
    if many and warn:
        warnings.warn(
            f"{disposal_share:.1%} of records need a disposal (warning above "
            f"{policy.disposal_warning_share:.0%}): the parameters, not the points, look like "
            "the problem; consider a lower k or a wider r_max_m",
            ParameterWarning,
            stacklevel=2,
        )
    return CapVerdict(
        suppressed_records=int(sup.sum()),
        suppressed_subjects=sup_subj,
        subjects=n_subj,
        suppressed_share=share,
        disposal_share=disposal_share,
        passes_global_cap=share <= policy.tau,
        passes_unit_cap=not over,
        units_over_cap=over,
        worst_unit=str(table.unit[0]) if len(table) else None,
        worst_unit_share=float(table.share[0]) if len(table) else 0.0,
        many_disposals=many,
    )


def finite_or_none(value: float) -> float | None:
    """JSON-safe float: ``None`` for infinities and NaN."""
    return value if math.isfinite(value) else None

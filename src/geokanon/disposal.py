"""The disposals, the fixed point and the caps: what is published, and at what level.

One pass:

1. classify the records still meant for group-level publication;
2. ``ok`` and ``merge`` records are grouped (:func:`geokanon.grouping.group_records`);
   a ``merge`` record joins a group whose disc can be re-centred to cover it;
3. records that cannot be placed in a group, and ``generalise`` records, are
   generalised: published only as a count in their unit when the unit's
   generalised records hold >= k distinct subjects; smaller pools move up to the
   parent unit, then to the whole study area ("somewhere in the area"); only an
   area pool of fewer than k subjects is suppressed;
4. ``suppress`` records are removed (with ``membership_sensitive`` they join the
   area pool instead, because a missing dot tells a lone valley-dweller that
   they are in the data);
5. with ``allow_synthetic``, every suppressed subject is stood in for, in each
   unit where it was suppressed, by one synthetic record placed in a published
   class of that unit (see :func:`synthesise`), so the unit's released count has
   no hole where the person was. Synthetic records never count towards k and
   never change a cap figure: the suppressed subjects stay suppressed.

The next pass re-classifies the records published at group level, among
themselves (removing records changes the neighbour structure). Passes repeat
until no label changes; after :data:`~geokanon.policy.MAX_PASSES` the parameters
are declared unsatisfiable. Finally the suppressed mass is compared with the
global cap ``tau`` and the per-unit cap; a breach raises
:class:`~geokanon.errors.ReleaseRefused` with a diagnosis.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon._progress import Progress
from geokanon.classify import (
    CapVerdict,
    Classification,
    UnitTable,
    cap_verdict,
    classify,
    unit_table,
)
from geokanon.errors import InputError, PrivacyRiskWarning, ReleaseRefused, Unsatisfiable
from geokanon.grouping import Grouping, group_records, repair_groups
from geokanon.neighbours import (
    cell_values,
    cells_around,
    in_sorted,
    is_dense_codes,
    pack_key,
    subject_codes,
)
from geokanon.policy import MAX_PASSES, Disposal, Label, OutlierPolicy

__all__ = [
    "CoreResult",
    "PassRecord",
    "Synthesis",
    "diagnose",
    "group_units",
    "run_core",
    "synthesise",
]

#: Class levels of generalised records.
LEVELS = ("unit", "parent", "area")
#: Records per chunk of whole-array steps over the kept records (bounds their temporaries).
_CHUNK = 1_000_000


@dataclass(frozen=True)
class PassRecord:
    """Label counts of one classification pass over the records meant for group level.

    ``group_level`` and ``group_level_changed`` count the same pass over the records
    that end at group level only (the release publishes those: every one of its
    figures is then a count of published records, see docs/release-format.md).
    """

    number: int
    records: int
    labels: dict[str, int]
    changed: int
    #: With times, per label the records that have it only because of time (their
    #: spatial ratio alone gives a milder label); ``None`` without times.
    because_of_time: dict[str, int] | None = None
    group_level: dict[str, int] | None = None
    group_level_changed: int | None = None
    #: ``because_of_time`` over the records that end at group level (pass 1 only).
    group_level_because_of_time: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (``because_of_time`` only where there is one)."""
        out: dict[str, Any] = {
            "pass": self.number,
            "records": self.records,
            "labels": dict(self.labels),
            "changed": self.changed,
        }
        if self.because_of_time is not None:
            out["because_of_time"] = dict(self.because_of_time)
        if self.group_level is not None:
            out["group_level"] = dict(self.group_level)
            out["group_level_changed"] = self.group_level_changed
        if self.group_level_because_of_time is not None:
            out["group_level_because_of_time"] = dict(self.group_level_because_of_time)
        return out


def _group_level_passes(
    passes: list[PassRecord],
    undo: list[tuple[NDArray[np.int64], NDArray[np.uint8]]],
    final_labels: NDArray[np.uint8],
    at_group: NDArray[np.bool_],
) -> list[PassRecord]:
    """``passes`` with each pass counted again over the records that end at group level.

    Those records took part in every pass (groups only lose records), so their label in
    pass ``p`` is their final label with the changes of the later passes undone.
    """
    # Every record's label (one byte a record, no index of the group-level records), the
    # changes undone in place; only the group-level records are counted.
    lab = final_labels.copy()
    n_at = int(np.count_nonzero(at_group))
    counts: list[tuple[dict[str, int], int]] = []
    for p in range(len(passes), 0, -1):
        c = np.zeros(len(Label), dtype=np.int64)
        for a in range(0, lab.size, _CHUNK):
            c += np.bincount(lab[a : a + _CHUNK][at_group[a : a + _CHUNK]], minlength=len(Label))
        by_label = {lab_.text: int(c[lab_]) for lab_ in Label}
        if p == 1:
            counts.append((by_label, n_at))  # every record labelled for the first time
            break
        idx, old = undo[p - 2]
        keep = at_group[idx]
        counts.append((by_label, int(keep.sum())))
        lab[idx[keep]] = old[keep]
    counts.reverse()
    return [
        dataclasses.replace(rec, group_level=c, group_level_changed=ch)
        for rec, (c, ch) in zip(passes, counts, strict=True)
    ]


@dataclass(frozen=True, eq=False)
class Synthesis:
    """Synthetic records: each stands in for one suppressed subject in one unit.

    Attributes
    ----------
    group_id
        Group that publishes the synthetic record, else -1.
    class_id
        Generalised (``unit``-level) class that publishes it, else -1.
    unit
        Unit code of the suppressed subject it stands in for (the unit whose
        released count it is part of).
    stands_for
        Index of one suppressed record of that subject in that unit (audit only).
    """

    group_id: NDArray[np.int64]
    class_id: NDArray[np.int64]
    unit: NDArray[np.int64]
    stands_for: NDArray[np.int64]

    @classmethod
    def empty(cls) -> Synthesis:
        """No synthetic records."""
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.copy(), z.copy(), z.copy())

    def __len__(self) -> int:
        return int(self.unit.size)


def group_units(
    group_id: NDArray[np.int64],
    unit_codes: NDArray[np.int64],
    n_groups: int,
    unit_names: ArrayLike | None = None,
) -> NDArray[np.int64]:
    """Unit holding most of each group's members (ties: the first unit id in sort order).

    A group is counted whole in that unit in every per-unit figure, so no
    per-unit count splits a group into parts smaller than k. Ties go to the unit
    whose id (``unit_names[code]`` as text) sorts first, which is what the release
    format documents and the verifier recomputes; without names, to the lowest code.

    Examples
    --------
    >>> import numpy as np
    >>> group_units(np.array([0, 0, 0, 1, 1, -1]), np.array([2, 1, 2, 3, 0, 5]), 2).tolist()
    [2, 0]
    >>> names = np.array(["b", "a", "c", "d"], dtype=object)
    >>> group_units(np.array([0, 0]), np.array([0, 1]), 1, names).tolist()
    [1]
    """
    out = np.zeros(n_groups, dtype=np.int64)
    m = group_id >= 0
    if n_groups == 0 or not m.any():
        return out
    g = group_id[m]
    u = np.asarray(unit_codes, dtype=np.int64)[m]
    back = None
    if unit_names is not None:
        names = np.asarray(unit_names, dtype=object).astype(str)
        back = np.argsort(names, kind="stable")  # rank -> code
        rank = np.empty(back.size, dtype=np.int64)
        rank[back] = np.arange(back.size)
        u = rank[u]
    # Per group: the largest count first, then the lowest unit code (or rank).
    pick = _majority_units(g.astype(np.int64, copy=False), u, n_groups)
    has = pick >= 0
    out[has] = pick[has] if back is None else back[pick[has]]
    return out


@nb.njit(cache=True)
def _majority_units(
    g: NDArray[np.int64], u: NDArray[np.int64], n_groups: int
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Per group ``0..n_groups-1``: the value of ``u`` most frequent among its records,
    the lowest on a tie; -1 for a group without records. A counting sort by group, then
    a sort of each group's values."""
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for v in g:
        start[v + 1] += 1
    for i in range(n_groups):
        start[i + 1] += start[i]
    pos = start[:n_groups].copy()
    vals = np.empty(g.size, dtype=np.int64)
    for r in range(g.size):
        vals[pos[g[r]]] = u[r]
        pos[g[r]] += 1
    out = np.full(n_groups, -1, dtype=np.int64)
    for i in range(n_groups):
        a, b = start[i], start[i + 1]
        if a == b:
            continue
        run = vals[a:b]
        if run.size > 32:
            run.sort()
        else:  # an insertion sort in place: most groups hold a few records
            for j in range(1, run.size):
                v = run[j]
                i2 = j - 1
                while i2 >= 0 and run[i2] > v:
                    run[i2 + 1] = run[i2]
                    i2 -= 1
                run[i2 + 1] = v
        best, best_n, n = run[0], 1, 1
        for j in range(1, run.size):
            n = n + 1 if run[j] == run[j - 1] else 1
            if n > best_n:
                best, best_n = run[j], n
        out[i] = best
    return out


def synthesise(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subj: NDArray[np.int64],
    ucodes: NDArray[np.int64],
    unames: NDArray[np.object_],
    disposal: NDArray[np.uint8],
    group_id: NDArray[np.int64],
    group_x: NDArray[np.float64],
    group_y: NDArray[np.float64],
    class_level: Sequence[str],
    class_unit: Sequence[str],
    tiebreak: NDArray[np.uint64] | None = None,
) -> Synthesis:
    """One synthetic record per suppressed subject and unit, in a class of that unit.

    The suppressed subject's data stay suppressed (they count as suppressed in
    every cap figure); the synthetic record only keeps the unit's released count
    free of a hole shaped like the person. It is placed, in order of preference:

    1. in the unit's own generalised class (``unit`` level), if there is one: the
       suppressed record's plausible stand-in is "somewhere in this unit";
    2. else in the group counted in that unit (:func:`group_units`) whose
       representative is nearest to the suppressed record (ties: lowest group id);
    3. else nowhere: a unit with no published class of its own gets no synthetic
       record, because any other placement would move its mass into another unit.

    Synthetic records are placed only in classes that already hold >= k distinct
    real subjects, never count towards k, and are indistinguishable in the release;
    their number is published globally and per unit. The result is ordered by unit
    code, then by the stand-in record's coordinates: never by the input's row order.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.r_[np.arange(5.0), 9_000.0]
    >>> units = np.zeros(6, dtype=np.int64)
    >>> disposal = np.array([0, 0, 0, 0, 0, 3], dtype=np.uint8)
    >>> groups = np.r_[np.zeros(5, dtype=np.int64), -1]
    >>> syn = synthesise(
    ...     x, np.zeros(6), np.arange(6), units, np.array(["u"], dtype=object), disposal,
    ...     groups, np.array([2.05]), np.array([0.05]), (), (),
    ... )
    >>> syn.group_id.tolist(), syn.stands_for.tolist()
    ([0], [5])
    """
    sup = np.flatnonzero(disposal == Disposal.SUPPRESSED)
    if sup.size == 0:
        return Synthesis.empty()
    # One stand-in record per (unit, subject): the one first in coordinate order.
    keys = [np.zeros(sup.size, dtype=np.uint64) if tiebreak is None else tiebreak[sup]]
    order = np.lexsort((*keys, y[sup], x[sup], subj[sup], ucodes[sup]))
    s = sup[order]
    first = np.r_[True, (ucodes[s][1:] != ucodes[s][:-1]) | (subj[s][1:] != subj[s][:-1])]
    stand = s[first]
    # The published order: by unit, then by the stand-in's coordinates (subject codes
    # are row numbers when there is no subject column).
    tb_stand = [np.zeros(stand.size, dtype=np.uint64) if tiebreak is None else tiebreak[stand]]
    stand = stand[np.lexsort((*tb_stand, y[stand], x[stand], ucodes[stand]))]
    unit = ucodes[stand]
    n_groups = group_x.size
    gid = np.full(stand.size, -1, dtype=np.int64)
    cid = np.full(stand.size, -1, dtype=np.int64)
    name_of_unit_class = {
        str(u): c
        for c, (lvl, u) in enumerate(zip(class_level, class_unit, strict=True))
        if lvl == "unit"
    }
    unit_class = np.array(
        [name_of_unit_class.get(str(unames[u]), -1) for u in range(unames.size)], dtype=np.int64
    )
    cid[:] = unit_class[unit]
    need = np.flatnonzero(cid < 0)
    if need.size and n_groups:
        gu = group_units(group_id, ucodes, n_groups, unames)
        by_unit = np.argsort(gu, kind="stable")
        starts = np.searchsorted(gu[by_unit], np.arange(unames.size + 1))
        for i in need:
            u = int(unit[i])
            cand = by_unit[starts[u] : starts[u + 1]]
            if cand.size == 0:
                continue
            d = np.hypot(group_x[cand] - x[stand[i]], group_y[cand] - y[stand[i]])
            gid[i] = int(cand[np.argmin(d)])  # argmin: the first (lowest id) of equal ones
    placed = (gid >= 0) | (cid >= 0)
    return Synthesis(gid[placed], cid[placed], unit[placed], stand[placed])


@dataclass(frozen=True, eq=False)
class CoreResult:
    """Everything the release core decided, per record and per group or class.

    Attributes
    ----------
    first_labels
        First-pass :class:`~geokanon.policy.Label` codes.
    iota
        First-pass isolation ratios.
    final_labels
        Label of each record in the last pass it took part in.
    disposal
        Final :class:`~geokanon.policy.Disposal` codes.
    group_id
        Group of each record published at group level, else -1.
    group_x, group_y
        Published representative of each group (metres, working CRS).
    class_id
        Generalised class of each generalised record, else -1.
    class_level, class_unit
        Per class: level (``unit``, ``parent``, ``area``) and unit name.
    passes
        Per-pass label counts; the last one changed nothing.
    units
        Per-unit suppression table of the final outcome.
    verdict
        Cap verdicts of the final outcome.
    subjects
        Subject code per record.
    synthetic
        The synthetic records (empty unless ``allow_synthetic``).
    """

    first_labels: NDArray[np.uint8]
    iota: NDArray[np.float64]
    final_labels: NDArray[np.uint8]
    disposal: NDArray[np.uint8]
    group_id: NDArray[np.int64]
    group_x: NDArray[np.float64]
    group_y: NDArray[np.float64]
    class_id: NDArray[np.int64]
    class_level: tuple[str, ...]
    class_unit: tuple[str, ...]
    passes: tuple[PassRecord, ...]
    units: UnitTable
    verdict: CapVerdict
    subjects: NDArray[np.int64] = field(repr=False)
    synthetic: Synthesis = field(default_factory=lambda: Synthesis.empty(), repr=False)

    def counts(self) -> dict[str, int]:
        """Records per final disposal."""
        c = np.bincount(self.disposal, minlength=len(Disposal))
        return {d.text: int(c[d]) for d in Disposal}

    def displacement(self, x: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
        """Distance of every group-level record to its representative (NaN elsewhere)."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        out = np.full(xa.size, np.nan)
        g = self.group_id
        m = g >= 0
        dx = xa[m] - self.group_x[g[m]]
        dy = ya[m] - self.group_y[g[m]]
        out[m] = np.sqrt(dx * dx + dy * dy)
        return out


def _generalise(
    pool: NDArray[np.bool_],
    subj: NDArray[np.int64],
    levels: list[tuple[str, NDArray[np.int64], NDArray[np.object_]]],
    k: int,
    area_only: NDArray[np.bool_] | None = None,
    id_dtype: type[np.integer[Any]] = np.int64,
) -> tuple[NDArray[np.int64], list[str], list[str], NDArray[np.bool_]]:
    """Pool generalised records bottom-up into classes of >= k distinct subjects.

    ``area_only`` records skip the finer levels (membership-sensitive suppression).
    Returns the class of each record (-1 if none; of ``id_dtype``), class levels and
    unit names, and the records left over (suppressed).
    """
    n = subj.size
    class_id = np.full(n, -1, dtype=id_dtype)
    class_level: list[str] = []
    class_unit: list[str] = []
    remaining = pool.copy()
    for level_name, codes, names in levels:
        eligible = (
            remaining if area_only is None or level_name == "area" else remaining & ~area_only
        )
        idx = np.flatnonzero(eligible)
        if idx.size == 0:
            break
        c = codes[idx].astype(np.int64)
        n_subj = int(subj.max()) + 1
        pairs = np.unique(c * n_subj + subj[idx])
        distinct = np.bincount(pairs // n_subj, minlength=names.size)
        good_units = np.flatnonzero(distinct >= k)
        # Deterministic class numbering: by level, then unit name.
        good_units = good_units[np.argsort(names[good_units].astype(str), kind="stable")]
        new_ids = np.full(names.size, -1, dtype=np.int64)
        new_ids[good_units] = np.arange(len(class_level), len(class_level) + good_units.size)
        class_level.extend([level_name] * good_units.size)
        class_unit.extend(str(u) for u in names[good_units])
        assigned = new_ids[c]
        hit = assigned >= 0
        class_id[idx[hit]] = assigned[hit]
        remaining[idx[hit]] = False
    # An area pool of 1..k-1 subjects: dissolve the smallest finer classes into it
    # (their records become "somewhere in the area") rather than suppress anyone.
    if remaining.any() and np.unique(subj[remaining]).size < k and class_level:
        member = np.flatnonzero(class_id >= 0)
        n_subj = int(subj.max()) + 1
        pairs = np.unique(class_id[member].astype(np.int64) * n_subj + subj[member])
        sizes = np.bincount(pairs // n_subj, minlength=len(class_level))
        order = np.lexsort((np.asarray(class_unit, dtype=str), sizes))
        for c in order:
            if class_level[c] == "area":
                continue
            moved = class_id == c
            class_id[moved] = -1
            remaining |= moved
            if np.unique(subj[remaining]).size >= k:
                break
    if remaining.any() and np.unique(subj[remaining]).size >= k:
        class_level.append("area")
        class_unit.append("area")
        class_id[remaining] = len(class_level) - 1
        remaining[:] = False
    if not class_level:
        return class_id, class_level, class_unit, remaining
    # Renumber the classes that still hold records: 0..m-1 in creation order.
    used = np.unique(class_id[class_id >= 0])
    remap = np.full(len(class_level), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    placed = np.flatnonzero(class_id >= 0)  # in place: no whole-array temporaries
    class_id[placed] = remap[class_id[placed]]
    class_level = [class_level[i] for i in used]
    class_unit = [class_unit[i] for i in used]
    return class_id, class_level, class_unit, remaining


def run_core(
    x: ArrayLike,
    y: ArrayLike,
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
    unit_codes: ArrayLike | None = None,
    unit_names: ArrayLike | None = None,
    parent_codes: ArrayLike | None = None,
    parent_names: ArrayLike | None = None,
    tiebreak: ArrayLike | None = None,
    enforce_caps: bool = True,
    progress: Progress | None = None,
    classifier: Callable[..., Classification] | None = None,
    grouper: Callable[..., Grouping] | None = None,
    compact: bool = False,
    spill_dir: str | Path | None = None,
) -> CoreResult:
    """Classify, group, dispose and iterate to the fixed point; then check the caps.

    Parameters
    ----------
    x, y
        Coordinates in metres (masked ones, where a mask is applied).
    policy
        The outlier policy.
    subjects
        Subject per record (``None``: every record its own subject).
    times
        Times in seconds, when the policy has ``t_max_s``.
    unit_codes, unit_names
        Administrative unit of every record (``None``: one unit, ``all``).
    parent_codes, parent_names
        Optional parent unit of every record (a coarser level for pooling).
    tiebreak
        Per record, a key independent of row order (a hash of the record's
        content) that orders records at one place, so the outcome never depends
        on the input's row order.
    enforce_caps
        Raise :class:`~geokanon.errors.ReleaseRefused` when a cap is breached.
    progress
        Hears each step as it starts (``classify pass 1``, ``group pass 1``, ...,
        ``generalise and suppress``, ``synthesise``; :mod:`geokanon._progress`).
    classifier, grouper
        Replacements for :func:`~geokanon.classify.classify` and
        :func:`~geokanon.grouping.group_records` with the same signatures (the Dask
        backend passes its tiled versions; the grouper is called with the whole
        arrays and ``subset=``, the indices of the records to group); the passes,
        fixed point, generalisation, suppression and caps stay this function's.
    compact
        Hold less per record (the partitioned release's driver): the group and class
        ids, and the subject codes made here when ``subjects`` is None, are int32
        (when the records number fewer than 2**31); subject codes given already dense
        (integers ``0..m-1``, each present) are used as they are, not copied; and the
        tiebreak is let go before generalisation (unless synthetic records are made).
        The decisions are the same; only those arrays of the result are narrower. The
        caller keeps no reference to ``tiebreak`` for it to be freed.
    spill_dir
        With ``compact``: a scratch directory where the tiebreak waits
        (``tiebreak.npy``) from the first grouping on, read back only by the passes
        that mend groups (8 bytes a record less held while the later passes run).

    Returns
    -------
    CoreResult

    Raises
    ------
    InputError
        Bad input (see :func:`geokanon.classify.classify`).
    Unsatisfiable
        The labels did not settle within the pass limit.
    ReleaseRefused
        A cap is breached (with ``enforce_caps``).

    Examples
    --------
    >>> import numpy as np
    >>> from geokanon.policy import OutlierPolicy
    >>> x = np.r_[np.arange(10.0) * 10, 90_000.0]
    >>> res = run_core(x, np.zeros(11), OutlierPolicy(k=3, r_max_m=100.0, tau=0.5, unit_cap=1.0))
    >>> res.counts()
    {'grouped': 10, 'merged': 0, 'generalised': 0, 'suppressed': 1}
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if n == 0:
        raise InputError("the input has no records; nothing to release")
    # int32 ids where they fit (compact): there are fewer groups, classes and subjects
    # than records
    id_dtype: type[np.integer[Any]] = np.int32 if compact and n < 2**31 else np.int64
    if subjects is None:
        subj = np.arange(n, dtype=id_dtype)
    elif compact and is_dense_codes(subjects, n):
        subj = np.asarray(subjects)  # already dense codes: no copy
    else:
        subj = subject_codes(subjects, n)
    ta = None if times is None else np.asarray(times, dtype=np.float64)
    tb = None if tiebreak is None else np.asarray(tiebreak, dtype=np.uint64)
    del tiebreak  # only ``tb`` refers to it here (compact lets it go before generalising)
    if unit_codes is None:
        ucodes = np.zeros(n, dtype=np.int64)
        unames = np.asarray(["all"], dtype=object)
    else:
        ucodes = np.asarray(unit_codes)
        if ucodes.dtype not in (np.int32, np.int64):  # int32 codes stay narrow (no copy)
            ucodes = ucodes.astype(np.int64)
        unames = np.asarray(
            unit_names if unit_names is not None else np.unique(ucodes).astype(str), dtype=object
        )
    levels: list[tuple[str, NDArray[np.int64], NDArray[np.object_]]] = [("unit", ucodes, unames)]
    if parent_codes is not None:
        pnames = np.asarray(
            parent_names if parent_names is not None else np.unique(parent_codes).astype(str),
            dtype=object,
        )
        levels.append(("parent", np.asarray(parent_codes, dtype=np.int64), pnames))
    # every record's area code is 0: one value seen n times (no array of n zeros)
    area = np.broadcast_to(np.zeros(1, dtype=np.int64), (n,))
    levels.append(("area", area, np.asarray(["area"], dtype=object)))

    # Pass 1 on every record.
    say = progress or (lambda _stage: None)
    classify_ = classifier or classify
    group_ = grouper or group_records
    say("classify pass 1")
    first = classify_(xa, ya, policy, subjects=None if subjects is None else subj, times=ta)
    first_labels, first_iota = first.labels, first.iota
    first_by_time = first.time_counts()
    # which records have their first-pass label only because of time (with times)
    first_time = first.because_of_time() if first_by_time is not None else None
    del first  # the other per-record arrays of the classification are not needed
    final_labels = first_labels.copy()
    active = _indices(first_labels <= Label.MERGE)
    first_counts = {lab.text: int((first_labels == lab).sum()) for lab in Label}
    passes = [PassRecord(1, n, first_counts, n, because_of_time=first_by_time)]
    gx = np.zeros(0)
    gy = np.zeros(0)
    # Group what is meant for group level; what cannot be placed leaves.
    say("group pass 1")
    grouping = group_(xa, ya, subj, policy, tb, subset=active)  # type: ignore[arg-type]  # int32
    # allocated once the grouping is back (not held while the grouper runs)
    group_id = np.full(n, -1, dtype=id_dtype)
    group_id[active] = grouping.group_id
    gx, gy = grouping.rep_x, grouping.rep_y
    del grouping, active
    tb_file = None
    if compact and spill_dir is not None and tb is not None:
        # only the repairs read it from here on: it waits in scratch, not in memory
        tb_file = Path(spill_dir) / "tiebreak.npy"
        tb_file.parent.mkdir(parents=True, exist_ok=True)
        np.save(tb_file, tb)
        tb = None
    changed_any = True
    last_left = last_by_time = 0  # records that left in the last pass, and because of time
    # The records the last classification ran over (pass 1: all of them).
    last_set = np.ones(n, dtype=bool)
    # Per pass from the second: the records whose label changed and their earlier label
    # (to count each pass again over the records that end at group level).
    undo: list[tuple[NDArray[np.int64], NDArray[np.uint8]]] = []
    for number in range(2, MAX_PASSES + 1):
        # Re-classify the group-level records among themselves. A label depends only on
        # the records within the search radius (see geokanon.distributed), so only the
        # records near one that left since the last classification can change: they are
        # re-classified with their neighbourhood as context; the others keep their label.
        kept_mask = group_id >= 0
        kept = _indices(kept_mask)
        labels = final_labels[kept].copy()
        removed = last_set & ~kept_mask
        if (kept_mask & ~last_set).any():
            removed = np.ones(n, dtype=bool)  # never happens: groups only lose records
        # The pass's classification runs on what remains, to its own end: a record that
        # leaves (generalise/suppress) is gone for its neighbours in the same pass, so a
        # cascade (records that had just k-1 others within r_max and t_max, one after
        # another) is followed to its end in one pass instead of one ring per pass.
        # Removal only raises the ratios, so the rounds are monotone and end.
        alive = np.ones(kept.size, dtype=bool)  # over kept: not left in this pass
        by_time = np.zeros(kept.size, dtype=bool)  # left in this pass because of time
        gone = np.flatnonzero(removed)  # records that left since the last classification
        del removed
        rounds = 0
        while gone.size:
            rounds += 1
            here = _indices(alive)
            # every kept record still in (the first round): ``kept`` itself, no copy
            redo, context = _near_removed(
                xa, ya, kept if here.size == kept.size else kept[here], gone, policy
            )
            ctx = kept[here[context]]
            tail = "" if rounds == 1 else f", round {rounds}"
            say(f"classify pass {number} ({int(redo.sum()):,} of {here.size:,} records{tail})")
            at = here[redo]
            if _distinct_at_least(subj[ctx], policy.k):
                cls = classify_(
                    xa[ctx], ya[ctx], policy,
                    subjects=None if subjects is None else subj[ctx],
                    times=None if ta is None else ta[ctx],
                )  # fmt: skip
                labels[at] = cls.labels[redo[context]]
                if cls.space_labels is not None:
                    by_time[at] = cls.space_labels[redo[context]] <= Label.MERGE
            else:
                labels[at] = Label.SUPPRESS
            leave = at[labels[at] > Label.MERGE]
            alive[leave] = False
            gone = kept[leave].astype(np.int64)
            del here, redo, context, ctx, at, leave
        del alive, gone
        # What this classification ran over, without the records it let go (their
        # neighbours' labels already account for their leaving).
        last_set = kept_mask
        last_set[kept[labels > Label.MERGE]] = False
        flips = labels != final_labels[kept]
        changed = int(flips.sum())
        undo.append((kept[flips], final_labels[kept[flips]].copy()))
        del flips
        final_labels[kept] = labels
        passes.append(
            PassRecord(
                number,
                int(kept.size),
                {lab.text: int((labels == lab).sum()) for lab in Label},
                changed,
            )
        )
        if changed == 0:
            changed_any = False
            break
        leaving = labels > Label.MERGE
        last_left = int(leaving.sum())
        last_by_time = int((leaving & by_time).sum())
        del by_time
        if not leaving.any():
            continue  # only ok/merge flips: the next pass confirms the same labels
        # Records now labelled generalise/suppress leave; their groups are mended locally.
        group_id[kept[leaving]] = -1
        stay = kept[~leaving]
        say(f"repair groups pass {number}")
        tb_all = tb if tb_file is None else np.load(tb_file)
        mended = repair_groups(
            xa[stay], ya[stay], subj[stay].astype(np.int64, copy=False), policy,
            group_id[stay].astype(np.int64, copy=False), gx, gy,
            None if tb_all is None else tb_all[stay],
        )  # fmt: skip
        del tb_all
        group_id[stay] = mended.group_id
        gx, gy = mended.rep_x, mended.rep_y
    if changed_any:
        last = passes[-1]
        raise Unsatisfiable(
            f"the classification did not settle within {MAX_PASSES} passes "
            f"({last.changed} labels changed in pass {last.number}: "
            f"{', '.join(f'{v} {k}' for k, v in last.labels.items())}); the parameters are "
            f"unsatisfiable: {unsettled_advice(last_left, last_by_time)}",
            {"passes": [p.to_dict() for p in passes]},
        )

    # The last pass's per-record temporaries are not needed any more.
    del kept, kept_mask, labels, last_set
    passes = _group_level_passes(passes, undo, final_labels, group_id >= 0)
    del undo
    if first_time is not None:
        # Published records only: their first-pass labels (time's share of them) rest on
        # no record that is not published.
        by_time = first_labels[first_time & (group_id >= 0)]
        c = np.bincount(by_time, minlength=len(Label))
        passes[0] = dataclasses.replace(
            passes[0], group_level_because_of_time={lab.text: int(c[lab]) for lab in Label}
        )
    del first_time
    if compact and not policy.allow_synthetic:
        tb = None  # only the passes and the synthesis order records by it
    elif tb_file is not None:
        tb = np.load(tb_file)  # the synthesis orders records by it
    say("generalise and suppress")
    at_group = group_id >= 0
    # Everything not at group level and not labelled suppress is generalised.
    suppress_label = (final_labels == Label.SUPPRESS) & ~at_group
    pool = ~at_group & ~suppress_label
    if policy.membership_sensitive:
        pool |= suppress_label
    # Suppress-labelled records join only the area level when membership is sensitive.
    class_id, class_level, class_unit, left = _generalise_with_sensitivity(
        pool, suppress_label, subj, levels, policy, id_dtype
    )
    suppressed = (suppress_label & (class_id < 0)) | left
    if policy.membership_sensitive and suppressed.any():
        warnings.warn(
            f"{int(suppressed.sum())} records could not be generalised into any class of "
            f"{policy.k} subjects and are suppressed although membership is sensitive",
            PrivacyRiskWarning,
            stacklevel=2,
        )
    disposal = np.full(n, Disposal.SUPPRESSED, dtype=np.uint8)
    disposal[at_group & (final_labels == Label.OK)] = Disposal.GROUPED
    disposal[at_group & (final_labels == Label.MERGE)] = Disposal.MERGED
    disposal[class_id >= 0] = Disposal.GENERALISED
    units = unit_table(suppressed, ucodes, unames, None if subjects is None else subj)
    verdict = cap_verdict(
        suppressed, first_labels != Label.OK, units, policy,
        None if subjects is None else subj, warn=False,
    )  # fmt: skip
    synthetic = Synthesis.empty()
    if policy.allow_synthetic:
        say("synthesise")
        codes64 = np.asarray(ucodes, dtype=np.int64)
        synthetic = synthesise(
            xa, ya, np.asarray(subj, dtype=np.int64), codes64, unames, disposal,
            np.asarray(group_id, dtype=np.int64), gx, gy, class_level, class_unit, tb,
        )  # fmt: skip
    result = CoreResult(
        first_labels=first_labels,
        iota=first_iota,
        final_labels=final_labels,
        disposal=disposal,
        group_id=group_id,
        group_x=gx,
        group_y=gy,
        class_id=class_id,
        class_level=tuple(class_level),
        class_unit=tuple(class_unit),
        passes=tuple(passes),
        units=units,
        verdict=verdict,
        subjects=subj,
        synthetic=synthetic,
    )
    if enforce_caps and not (verdict.passes_global_cap and verdict.passes_unit_cap):
        codes64 = np.asarray(ucodes, dtype=np.int64)
        wide = dataclasses.replace(
            result,
            group_id=np.asarray(group_id, dtype=np.int64),
            class_id=np.asarray(class_id, dtype=np.int64),
            subjects=np.asarray(subj, dtype=np.int64),
        )  # as without ``compact``
        raise ReleaseRefused(*diagnose(wide, xa, ya, policy, subjects, ta, codes64, unames))
    return result


def unsettled_advice(left: int, by_time: int) -> str:
    """What to change when the passes did not settle: the parameter the last pass points to.

    Parameters
    ----------
    left
        Records that left group level (labelled ``generalise`` or ``suppress``) in the
        last pass.
    by_time
        Of those, the records that have ``k-1`` other subjects within ``r_max`` in space
        alone: they left only because of the time gap, so a wider ``t_max`` keeps them.

    Returns
    -------
    str
        Advice naming the policy key and the command-line option.

    Examples
    --------
    >>> unsettled_advice(3, 2).split(":")[0]
    'raise t_max_s (--t-max) or lower k (--k)'
    >>> unsettled_advice(3, 0).split(":")[0]
    'raise r_max_m (--r-max) or lower k (--k)'
    """
    if left and 2 * by_time >= left:
        return (
            f"raise t_max_s (--t-max) or lower k (--k): {by_time} of the {left} records that "
            "left group level in the last pass have k-1 other subjects within r_max in space "
            "and leave only because of the time gap"
        )
    if left:
        share = f"{left - by_time} of the {left}" if by_time else f"{left}"
        return (
            f"raise r_max_m (--r-max) or lower k (--k): the {share} records that left group "
            "level in the last pass lack k-1 other subjects within r_max in space"
        )
    return (
        "raise r_max_m (--r-max) or lower k (--k): the last pass only moved records between "
        "ok and merge, or its groups could not be mended"
    )


def _indices(mask: NDArray[np.bool_]) -> NDArray[np.integer]:
    """``np.flatnonzero(mask)``, as int32 when the indices fit (half the memory), built
    in chunks (no int64 array of every index on the way)."""
    if mask.size >= 2**31:
        return np.flatnonzero(mask)
    out = np.empty(int(np.count_nonzero(mask)), dtype=np.int32)
    at = 0
    for a in range(0, mask.size, _CHUNK):
        idx = np.flatnonzero(mask[a : a + _CHUNK])
        out[at : at + idx.size] = idx + a
        at += idx.size
    return out


def _distinct_at_least(subjects: NDArray[np.int64], k: int) -> bool:
    """Whether ``subjects`` (dense non-negative codes) hold at least ``k`` distinct values."""
    if subjects.size < k:
        return False
    return int(np.count_nonzero(np.bincount(subjects))) >= k


def _near_removed(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    kept: NDArray[np.integer],
    removed: NDArray[np.int64],
    policy: OutlierPolicy,
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Which kept records may change label, and the context that decides them.

    Cells of side slightly above the search radius ``R``: a kept record within ``R``
    of a removed one lies in the same or an adjacent cell (``redo``, a superset), and
    every record within ``R`` of a ``redo`` record lies one ring further
    (``context``). Both are masks over ``kept``.
    """
    side = policy.search_radius_m * 1.001
    ox = oy = 0.0
    if kept.size:
        ox = min(float(x[kept[a : a + _CHUNK]].min()) for a in range(0, kept.size, _CHUNK))
        oy = min(float(y[kept[a : a + _CHUNK]].min()) for a in range(0, kept.size, _CHUNK))
        ox, oy = min(ox, 0.0), min(oy, 0.0)

    seeds = pack_key(np.floor((x[removed] - ox) / side), np.floor((y[removed] - oy) / side))
    near, ring = cells_around(seeds, 1), cells_around(seeds, 2)  # sorted, distinct
    # 2: a cell within one of a removed record's, 1: within two
    level = cell_values(x, y, kept, (ox, oy), side, ring,
                        (1 + in_sorted(ring, near)).astype(np.uint8))  # fmt: skip
    return level == 2, level >= 1


def _generalise_with_sensitivity(
    pool: NDArray[np.bool_],
    suppress_label: NDArray[np.bool_],
    subj: NDArray[np.int64],
    levels: list[tuple[str, NDArray[np.int64], NDArray[np.object_]]],
    policy: OutlierPolicy,
    id_dtype: type[np.integer[Any]] = np.int64,
) -> tuple[NDArray[np.int64], list[str], list[str], NDArray[np.bool_]]:
    """Generalise the pool; suppress-labelled records go straight to the area when sensitive."""
    area_only = suppress_label if policy.membership_sensitive else None
    return _generalise(pool, subj, levels, policy.k, area_only, id_dtype)


def diagnose(
    result: CoreResult,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    policy: OutlierPolicy,
    subjects: ArrayLike | None,
    times: NDArray[np.float64] | None,
    unit_codes: NDArray[np.int64],
    unit_names: NDArray[np.object_],
) -> tuple[str, dict[str, Any]]:
    """Explain a cap breach: the rule, the figures, the units, and what would pass.

    The what-ifs are first-pass classifications (cheap) at ``k - 1`` and at
    ``1.5 x r_max``: they say whether k is too high or r_max too tight; when the
    units over the cap hold a tiny share of the records, the study area is too broad.
    """
    v = result.verdict
    subj = None if subjects is None else result.subjects
    figures: dict[str, Any] = {
        "suppressed_share": v.suppressed_share,
        "tau": policy.tau,
        "unit_cap": policy.unit_cap,
        "units_over_cap": [
            {"unit": r["unit"], "subjects": r["subjects"], "share": r["share"]}
            for r in result.units.rows()
            if r["unit"] in set(v.units_over_cap)
        ],
    }
    what_if: dict[str, dict[str, Any]] = {}
    trials: list[tuple[str, OutlierPolicy]] = []
    if policy.k > 2:
        trials.append((f"k={policy.k - 1}", policy.replace(k=policy.k - 1)))
    trials.append(
        (f"r_max_m={1.5 * policy.r_max_m:g}", policy.replace(r_max_m=1.5 * policy.r_max_m))
    )
    for name, trial in trials:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cls = classify(x, y, trial, subjects=subj, times=times)
        except InputError:
            continue
        sup = cls.labels == Label.SUPPRESS
        table = unit_table(sup, unit_codes, unit_names, subj)
        tv = cap_verdict(sup, cls.labels != Label.OK, table, trial, subj, warn=False)
        what_if[name] = {
            "suppressed_share": tv.suppressed_share,
            "units_over_cap": len(tv.units_over_cap),
            "passes": tv.passes_global_cap and tv.passes_unit_cap,
        }
    figures["what_if_first_pass"] = what_if
    parts = []
    if not v.passes_global_cap:
        parts.append(
            f"suppression would remove {v.suppressed_share:.2%} of subjects "
            f"(cap tau {policy.tau:.2%})"
        )
    if not v.passes_unit_cap:
        over = figures["units_over_cap"]
        listed = ", ".join(f"{u['unit']} ({u['share']:.1%} of {u['subjects']})" for u in over[:8])
        more = f" and {len(over) - 8} more" if len(over) > 8 else ""
        parts.append(
            f"{len(over)} units would lose more than the unit cap {policy.unit_cap:.0%}: "
            f"{listed}{more}"
        )
    advice = []
    for name, fig in what_if.items():
        if fig["passes"]:
            advice.append(
                f"at {name} the first pass would suppress {fig['suppressed_share']:.2%} "
                "and breach no cap"
            )
    over_subjects = sum(u["subjects"] for u in figures["units_over_cap"])
    if not v.passes_unit_cap and over_subjects < 0.01 * max(v.subjects, 1):
        advice.append(
            f"the units over the cap hold only {over_subjects} of {v.subjects} subjects: "
            "the study area may be too broad (leave them out with --exclude-units "
            + ",".join(sorted(str(u["unit"]) for u in figures["units_over_cap"]))
            + ", or merge each with a neighbour with --merge-small-units N)"
        )
    if not advice:
        advice.append("lower k (and add noise) rather than widening r_max: see `geokanon sweep`")
    message = (
        "release refused: " + "; ".join(parts) + ". What the figures say: " + "; ".join(advice)
    )
    return message, figures

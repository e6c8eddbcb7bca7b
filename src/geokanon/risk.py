"""Re-identification risk of a written release: how many subjects each published record hides among.

:func:`release_risk` reads a release directory (``DIR/release`` and the custodian's
``DIR/audit``) with the verifier's own readers (:mod:`geokanon.verify`; no algorithm
module is imported) and, per input record, counts the distinct subjects that are
consistent with the location the record is published at:

* **group level**: the distinct (real) subjects of its group, all published at the
  same representative;
* **generalised** (unit, parent or area class): the distinct subjects of its class,
  all published as "somewhere in this unit";
* **suppressed**: not published, so no count (``nan``); suppressed records are left
  out of every share below.

From the counts:

* ``share_below_k``: published records whose count is < k, over published records;
* ``total_risk``: the sum over published records of ``1 / count`` (the expected
  number of records an adversary who picks one candidate at random per record
  re-identifies);
* ``outlier_share``: the part of ``total_risk`` contributed by records the first
  pass labelled ``merge``, ``generalise`` or ``suppress`` (the outliers).

Masks
-----
When the release was built on geomasked coordinates (``audit.json`` names a
``mask``), :func:`mask_anonymity` also measures the mask on its own, as the
geomasking literature does (Allshouse et al. 2010; Hampton et al. 2010): a
record's masked point is compared with every subject's *true* location (the
source) and

* ``nearest``: 1 + the number of *other* subjects whose true location is as close
  or closer to the masked point than the record's own true location (the
  literature's spatial k-anonymity K, plus one so that a record the
  nearest-address attack finds first counts 1, like a group of one);
* ``worst_case``: what an adversary who knows the true address of everyone else
  and the mask's kind and parameters (not its key) can achieve: 1 + the other
  subjects at least as likely as the true one to have produced the masked point.
  A Gaussian jitter's density falls with distance, so these are the subjects as
  close or closer (the same as ``nearest``); a donut's density is flat on the ring
  between ``min_m`` and ``max_m`` and zero elsewhere, so these are the subjects on
  that ring. The adversary uses whichever ranking leaves fewer candidates, so
  ``worst_case = min(nearest, likelihood count)`` <= ``nearest``.

Ties count against the adversary (a co-located household is as close as the
true record). Containment of a mask inside units is ignored (it only shrinks the
support). Messages and reports hold counts and unit ids only, never a
coordinate, subject id or timestamp.

Examples
--------
>>> import numpy as np
>>> counts = risk_counts(np.array([0, 0, 0, -1]), np.array([-1, -1, -1, -1]),
...                      np.array([10, 11, 11, 12]))
>>> counts.tolist()[:3], bool(np.isnan(counts[3]))
([2.0, 2.0, 2.0], True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from geokanon.errors import InputError
from geokanon.io.read import PointTable

__all__ = [
    "OUTLIER_LABELS",
    "MaskAnonymity",
    "ReleaseRisk",
    "format_risk",
    "mask_anonymity",
    "release_risk",
    "risk_counts",
    "summarise_risk",
]

#: First-pass labels whose records are the outliers.
OUTLIER_LABELS: tuple[str, ...] = ("merge", "generalise", "suppress")
_LEVEL_ORDER = ("group", "unit", "parent", "area", "suppressed")


def risk_counts(
    group_id: ArrayLike, class_id: ArrayLike, subjects: ArrayLike
) -> NDArray[np.float64]:
    """Distinct subjects consistent with each record's published location.

    Parameters
    ----------
    group_id
        Group of each record (>= 0), or a negative number when the record is not
        published at group level.
    class_id
        Generalised class of each record (>= 0), or negative.
    subjects
        Subject code of each record (records without a subject column: one code
        per record).

    Returns
    -------
    ndarray of float64
        Per record, the distinct subjects of its group (or, when it has none, its
        class); ``nan`` for a record in neither (suppressed: not published).

    Examples
    --------
    Group 0 holds subjects 1, 1, 2 (two distinct), class 0 holds three subjects.

    >>> risk_counts([0, 0, 0, -1, -1, -1, -1], [-1, -1, -1, 0, 0, 0, -1],
    ...             [1, 1, 2, 3, 4, 5, 6]).tolist()[:6]
    [2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    """
    gid = np.asarray(group_id, dtype=np.int64)
    cid = np.asarray(class_id, dtype=np.int64)
    subj = np.asarray(subjects, dtype=np.int64)
    if not (gid.shape == cid.shape == subj.shape) or gid.ndim != 1:
        raise InputError("group_id, class_id and subjects must be 1-D arrays of one length")
    out = np.full(gid.size, np.nan)
    for ids, use in ((gid, gid >= 0), (cid, (gid < 0) & (cid >= 0))):
        if not use.any():
            continue
        frame = pd.DataFrame({"id": ids[use], "s": subj[use]})
        distinct = frame.groupby("id", sort=False)["s"].transform("nunique")
        out[use] = distinct.to_numpy(dtype=np.float64)
    return out


@dataclass(frozen=True)
class MaskAnonymity:
    """Spatial k-anonymity of a geomask, per masked record (see the module notes).

    Attributes
    ----------
    nearest
        1 + other subjects whose true location is as close or closer to the
        masked point than the record's own (the nearest-address attack's rank).
    worst_case
        The fewest candidates an adversary who knows everyone else's true
        address and the mask's distribution is left with (<= ``nearest``).
    mask
        The mask's description (``"jitter sd 50 m"``, ``"unknown mask"``).
    """

    nearest: NDArray[np.int64]
    worst_case: NDArray[np.int64]
    mask: str

    def summary(self, k: int) -> dict[str, Any]:
        """Minimum, median and share below ``k`` of both measures."""
        out: dict[str, Any] = {"mask": self.mask, "records": int(self.nearest.size)}
        for name, v in (("nearest", self.nearest), ("worst_case", self.worst_case)):
            out[name] = {
                "min": int(v.min()) if v.size else None,
                "median": float(np.median(v)) if v.size else None,
                "share_below_k": float((v < k).mean()) if v.size else 0.0,
            }
        return out


def _mask_parameters(mask: Any) -> tuple[str, str, float, float]:
    """(kind, label, min_m, max_m) of a :class:`~geokanon.mask.MaskSpec` or its dict."""
    if mask is None:
        return "unknown", "unknown mask", 0.0, math.inf
    spec = mask.to_dict() if hasattr(mask, "to_dict") else mask
    if not isinstance(spec, Mapping):
        return "unknown", str(mask), 0.0, math.inf
    kind = str(spec.get("kind", "unknown"))
    lo = float(spec.get("min_m") or 0.0)
    hi_raw = spec.get("max_m")
    hi = math.inf if hi_raw is None else float(hi_raw)
    if kind == "donut":
        label = f"donut {lo:g}-{hi:g} m"
    elif kind == "jitter":
        label = f"jitter sd {float(spec.get('sd_m') or 0):g} m" + (
            f" (truncated at {hi:g} m)" if math.isfinite(hi) else ""
        )
    else:
        label = f"{kind} mask"
    return kind, label, lo, hi


def _distinct_others_within(
    tree: Any,
    px: NDArray[np.float64],
    py: NDArray[np.float64],
    radius: NDArray[np.float64],
    subjects: NDArray[np.int64] | None,
    own: NDArray[np.int64],
    *,
    inner: NDArray[np.float64] | None = None,
    chunk: int = 20_000,
) -> NDArray[np.int64]:
    """Per query point, distinct subjects other than ``own`` with a record within ``radius``.

    With ``inner``, only records at distance >= ``inner`` count (a ring).
    """
    out = np.zeros(px.size, dtype=np.int64)
    data = tree.data
    for start in range(0, px.size, chunk):
        stop = min(start + chunk, px.size)
        pts = np.column_stack([px[start:stop], py[start:stop]])
        if subjects is None and inner is None:
            n = tree.query_ball_point(pts, radius[start:stop], return_length=True)
            # the record itself is the only record of its own subject
            out[start:stop] = np.asarray(n, dtype=np.int64) - 1
            continue
        hits = tree.query_ball_point(pts, radius[start:stop])
        for j, idx in enumerate(hits):
            i = start + j
            if not idx:
                continue
            arr = np.asarray(idx, dtype=np.int64)
            if inner is not None and inner[i] > 0:
                d = np.hypot(data[arr, 0] - px[i], data[arr, 1] - py[i])
                arr = arr[d >= inner[i]]
            subj = arr if subjects is None else subjects[arr]
            subj = subj[subj != own[i]]
            out[i] = int(np.unique(subj).size)
    return out


def mask_anonymity(
    true_x: ArrayLike,
    true_y: ArrayLike,
    masked_x: ArrayLike,
    masked_y: ArrayLike,
    subjects: ArrayLike | None = None,
    *,
    mask: Any = None,
) -> MaskAnonymity:
    """Spatial k-anonymity of masked points against every subject's true location.

    Parameters
    ----------
    true_x, true_y
        True locations of all records, metres.
    masked_x, masked_y
        The masked (published) location of each record, metres, same CRS.
    subjects
        Subject code per record (default: every record its own subject). A
        subject's distance to a point is its nearest record's.
    mask
        The mask's :class:`~geokanon.mask.MaskSpec` or its ``to_dict()``; decides
        the worst case (a donut's flat ring). ``None``: the worst case equals the
        nearest-address count.

    Returns
    -------
    MaskAnonymity

    Examples
    --------
    Five people in a row 10 m apart; the first is moved 15 m to the right. Three
    others are as close or closer to its masked point (5, 5 and 15 m) than its true
    location (15 m), so the nearest-address attack needs 4 guesses:

    >>> xs = [0, 10, 20, 30, 40]
    >>> m = mask_anonymity(xs, [0] * 5, [15, 10, 20, 30, 40], [0] * 5)
    >>> int(m.nearest[0]), int(m.worst_case[0]), m.nearest[1:].tolist()
    (4, 4, [1, 1, 1, 1])

    An adversary who knows the mask was a donut of 10-20 m rules out the two
    subjects 5 m from the masked point: only the true one and the one 15 m away
    remain.

    >>> from geokanon.mask import MaskSpec
    >>> m = mask_anonymity(xs, [0] * 5, [15, 10, 20, 30, 40], [0] * 5,
    ...                    mask=MaskSpec.donut(min_m=10.0, max_m=20.0))
    >>> int(m.nearest[0]), int(m.worst_case[0])
    (4, 2)
    """
    from scipy.spatial import cKDTree

    tx = np.asarray(true_x, dtype=np.float64)
    ty = np.asarray(true_y, dtype=np.float64)
    mx = np.asarray(masked_x, dtype=np.float64)
    my = np.asarray(masked_y, dtype=np.float64)
    n = tx.size
    if not (ty.size == mx.size == my.size == n):
        raise InputError("true and masked coordinates must have one length")
    if not (np.isfinite(tx).all() and np.isfinite(ty).all()):
        raise InputError("true coordinates must be finite")
    if not (np.isfinite(mx).all() and np.isfinite(my).all()):
        raise InputError("masked coordinates must be finite")
    subj = None if subjects is None else np.asarray(subjects, dtype=np.int64)
    if subj is not None and subj.size != n:
        raise InputError("subjects must have one entry per record")
    kind, label, lo, hi = _mask_parameters(mask)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return MaskAnonymity(empty, empty, label)
    own = np.arange(n, dtype=np.int64) if subj is None else subj
    tree = cKDTree(np.column_stack([tx, ty]))
    d = np.hypot(mx - tx, my - ty)
    # inclusive: a hair of slack so the record's own true location is always inside
    slack = 1e-9 * np.maximum(1.0, np.abs(np.column_stack([tx, ty, mx, my])).max(axis=1))
    nearest = 1 + _distinct_others_within(tree, mx, my, d + slack, subj, own)
    if kind == "donut":
        ring = 1 + _distinct_others_within(
            tree, mx, my, np.full(n, hi) + slack, subj, own, inner=np.full(n, lo) - slack
        )
        worst = np.minimum(nearest, ring)
    else:
        worst = nearest.copy()
    return MaskAnonymity(nearest=nearest, worst_case=worst, mask=label)


@dataclass(frozen=True)
class ReleaseRisk:
    """Re-identification risk of one release, per record and in summary.

    Attributes
    ----------
    k
        The release's k.
    count
        Per input record (audit order): distinct subjects consistent with its
        published location; ``nan`` when the record is suppressed.
    level
        Per record: ``group``, ``unit``, ``parent``, ``area`` or ``suppressed``.
    label
        Per record: the first-pass label.
    unit
        Per record: its own unit id.
    mask
        The mask's own spatial k-anonymity when the release was built on masked
        coordinates and the true ones are known, else ``None``.
    mask_note
        Why there is no mask section (``"no mask applied"``, ...).
    """

    k: int
    count: NDArray[np.float64]
    level: NDArray[np.object_]
    label: NDArray[np.object_]
    unit: NDArray[np.object_]
    mask: MaskAnonymity | None = None
    mask_note: str = "no mask applied"

    @property
    def published(self) -> NDArray[np.bool_]:
        """Records published in some form (not suppressed)."""
        return ~np.isnan(self.count)

    @property
    def n_published(self) -> int:
        """Number of published records."""
        return int(self.published.sum())

    @property
    def min_count(self) -> int | None:
        """Smallest count over published records (``None`` when nothing is published)."""
        c = self.count[self.published]
        return int(c.min()) if c.size else None

    @property
    def share_below_k(self) -> float:
        """Published records whose count is < k, over published records."""
        c = self.count[self.published]
        return float((c < self.k).mean()) if c.size else 0.0

    @property
    def total_risk(self) -> float:
        """Sum over published records of ``1 / count``."""
        c = self.count[self.published]
        return float((1.0 / c).sum())

    @property
    def outlier_risk(self) -> float:
        """The part of :attr:`total_risk` from records labelled merge/generalise/suppress."""
        use = self.published & np.isin(self.label, OUTLIER_LABELS)
        return float((1.0 / self.count[use]).sum())

    @property
    def outlier_share(self) -> float:
        """:attr:`outlier_risk` over :attr:`total_risk` (0 when nothing is published)."""
        total = self.total_risk
        return self.outlier_risk / total if total > 0 else 0.0

    @property
    def outlier_record_share(self) -> float:
        """Published outlier records over published records (to read the risk share against)."""
        n = self.n_published
        use = self.published & np.isin(self.label, OUTLIER_LABELS)
        return float(use.sum()) / n if n else 0.0

    def by_level(self) -> list[dict[str, Any]]:
        """One row per publication level: records, min and median count, share below k, risk."""
        rows = []
        for lev in _LEVEL_ORDER:
            use = self.level == lev
            if not use.any():
                continue
            c = self.count[use]
            pub = ~np.isnan(c)
            rows.append(
                {
                    "level": lev,
                    "records": int(use.sum()),
                    "min_count": int(c[pub].min()) if pub.any() else None,
                    "median_count": float(np.median(c[pub])) if pub.any() else None,
                    "share_below_k": float((c[pub] < self.k).mean()) if pub.any() else None,
                    "risk": float((1.0 / c[pub]).sum()) if pub.any() else 0.0,
                }
            )
        return rows

    def by_label(self) -> list[dict[str, Any]]:
        """One row per first-pass label: records, published, min count, risk and its share."""
        total = self.total_risk
        rows = []
        for lab in ("ok", *OUTLIER_LABELS):
            use = self.label == lab
            if not use.any():
                continue
            c = self.count[use]
            pub = ~np.isnan(c)
            risk = float((1.0 / c[pub]).sum()) if pub.any() else 0.0
            rows.append(
                {
                    "label": lab,
                    "records": int(use.sum()),
                    "published": int(pub.sum()),
                    "min_count": int(c[pub].min()) if pub.any() else None,
                    "risk": risk,
                    "risk_share": risk / total if total > 0 else 0.0,
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The ``geokanon risk --json`` object (no per-record rows)."""
        return {
            "k": self.k,
            "records": int(self.count.size),
            "published": self.n_published,
            "min_count": self.min_count,
            "share_below_k": self.share_below_k,
            "records_below_k": int((self.count[self.published] < self.k).sum()),
            "total_risk": self.total_risk,
            "outlier_risk": self.outlier_risk,
            "outlier_share": self.outlier_share,
            "outlier_record_share": self.outlier_record_share,
            "by_level": self.by_level(),
            "by_label": self.by_label(),
            "mask": None if self.mask is None else self.mask.summary(self.k),
            "mask_note": self.mask_note,
        }


def summarise_risk(
    *,
    k: int,
    group_id: ArrayLike,
    class_id: ArrayLike,
    subjects: ArrayLike,
    label: ArrayLike,
    level: ArrayLike | None = None,
    unit: ArrayLike | None = None,
) -> ReleaseRisk:
    """Risk of a release given as per-record arrays (what :func:`release_risk` reads).

    Parameters
    ----------
    k
        The release's k.
    group_id, class_id, subjects
        As for :func:`risk_counts`.
    label
        First-pass label per record (``ok``, ``merge``, ``generalise``, ``suppress``).
    level
        Publication level per record (default: ``group`` for records with a group,
        ``unit`` for records with a class, else ``suppressed``).
    unit
        Own unit per record (default: empty).

    Returns
    -------
    ReleaseRisk

    Examples
    --------
    Four records in one group of two subjects, one of them labelled merge:

    >>> r = summarise_risk(k=2, group_id=[0, 0, 0, 0], class_id=[-1] * 4,
    ...                    subjects=[1, 1, 2, 2], label=["ok", "ok", "ok", "merge"])
    >>> r.min_count, r.total_risk, r.outlier_share
    (2, 2.0, 0.25)
    """
    gid = np.asarray(group_id, dtype=np.int64)
    cid = np.asarray(class_id, dtype=np.int64)
    count = risk_counts(gid, cid, subjects)
    if level is None:
        lev = np.where(gid >= 0, "group", np.where(cid >= 0, "unit", "suppressed"))
        level_arr = lev.astype(object)
    else:
        level_arr = np.asarray(level, dtype=object)
    unit_arr = (
        np.full(gid.size, "", dtype=object) if unit is None else np.asarray(unit, dtype=object)
    )
    return ReleaseRisk(
        k=int(k),
        count=count,
        level=level_arr,
        label=np.asarray(label, dtype=object).astype(str).astype(object),
        unit=unit_arr,
    )


def release_risk(
    directory: str | os.PathLike[str],
    *,
    source: PointTable | str | os.PathLike[str] | None = None,
) -> ReleaseRisk:
    """Re-identification risk of a written release, per record.

    Parameters
    ----------
    directory
        The release directory (holding ``release/`` and the custodian's ``audit/``).
    source
        The source records (a :class:`~geokanon.io.read.PointTable` or a file path),
        as for :func:`geokanon.verify.verify_release`: subjects are taken from the
        source when it is given, and the true coordinates a mask is measured
        against come from it.

    Returns
    -------
    ReleaseRisk

    Raises
    ------
    InputError
        The directory is not a release directory or a file is unreadable.

    Examples
    --------
    >>> risk = release_risk("out/dwellings", source="dwellings.csv")  # doctest: +SKIP
    >>> risk.min_count >= risk.k, f"{risk.share_below_k:.1%}"  # doctest: +SKIP
    (True, '0.0%')
    """
    from geokanon.verify._reader import ReleaseReader
    from geokanon.verify._results import Unreadable

    root = Path(directory)
    if root.name == "release" and (root.parent / "audit").is_dir():
        root = root.parent
    if not (root / "release").is_dir() or not (root / "audit").is_dir():
        raise InputError(
            f"{str(root)!r} is not a release directory: it must hold release/ and audit/ "
            "(risk needs the custodian's audit; give the directory passed to --out)"
        )
    src: PointTable | Path | None
    if source is None or isinstance(source, PointTable):
        src = source
    else:
        src = Path(source)
        if not src.is_file():
            raise InputError(f"source file {str(src)!r} does not exist")
    rel = ReleaseReader(root, src, 0.0)
    try:
        k = rel.k
        subjects = rel.subjects
        gid, cid = rel.gid, rel.cid
        a = rel.assignment
        label = (
            a["label"].astype(str).to_numpy(dtype=object)
            if "label" in a.columns
            else np.full(len(a), "ok", dtype=object)
        )
        level = np.full(len(a), "suppressed", dtype=object)
        level[gid >= 0] = "group"
        classes = rel.classes
        if len(classes) and "level" in classes.columns:
            cmap = dict(
                zip(
                    pd.to_numeric(classes["class_id"]).astype(np.int64).tolist(),
                    classes["level"].astype(str).tolist(),
                    strict=True,
                )
            )
            in_class = (gid < 0) & (cid >= 0)
            level[in_class] = [cmap.get(int(c), "unit") for c in cid[in_class]]
        else:
            level[(gid < 0) & (cid >= 0)] = "unit"
        units = rel.units
        mask_spec = rel.audit.get("mask")
    except Unreadable as exc:
        raise InputError(f"release {str(root)!r} cannot be read: {exc}") from None
    count = risk_counts(gid, cid, subjects)
    mask: MaskAnonymity | None = None
    note = "no mask applied"
    if mask_spec not in (None, "", "none"):
        src_data = rel.source
        rows = rel.source_rows
        if src_data.x_work is None or src_data.y_work is None or rows is None:
            note = "a mask was applied, but the true coordinates are unknown (give --source)"
        else:
            mx, my = rel.xy_m
            mask = mask_anonymity(
                src_data.x_work[rows], src_data.y_work[rows], mx, my, subjects, mask=mask_spec
            )
            note = ""
    return ReleaseRisk(
        k=k,
        count=count,
        level=level,
        label=label,
        unit=units,
        mask=mask,
        mask_note=note,
    )


def format_risk(risk: ReleaseRisk) -> str:
    """The ``geokanon risk`` table: summary lines, per level and per first-pass label.

    Parameters
    ----------
    risk
        The result of :func:`release_risk`.

    Returns
    -------
    str
        Lines joined with newlines (no trailing newline); counts only.

    Examples
    --------
    >>> r = summarise_risk(k=2, group_id=[0, 0, -1], class_id=[-1, -1, -1],
    ...                    subjects=[1, 2, 3], label=["ok", "ok", "suppress"])
    >>> print(format_risk(r).splitlines()[0])
    re-identification risk, k=2: 2 of 3 records published; smallest count 2
    """
    d = risk.to_dict()
    k = risk.k
    lines = [
        f"re-identification risk, k={k}: {d['published']:,} of {d['records']:,} records "
        f"published; smallest count {d['min_count'] if d['min_count'] is not None else '-'}",
        f"records below k: {d['records_below_k']:,} ({100 * d['share_below_k']:.2f} % of "
        "published)",
        f"total risk (sum of 1/count): {d['total_risk']:,.2f}; outliers (first-pass merge, "
        f"generalise, suppress) carry {100 * d['outlier_share']:.2f} % of it with "
        f"{100 * d['outlier_record_share']:.2f} % of the published records",
        "",
        f"  {'level':<12}{'records':>10}{'min':>7}{'median':>9}{'<k':>9}{'risk':>12}",
    ]
    for r in d["by_level"]:
        below = "-" if r["share_below_k"] is None else f"{100 * r['share_below_k']:.2f}%"
        lines.append(
            f"  {r['level']:<12}{r['records']:>10,}"
            f"{'-' if r['min_count'] is None else r['min_count']:>7}"
            f"{'-' if r['median_count'] is None else format(r['median_count'], 'g'):>9}"
            f"{below:>9}{r['risk']:>12,.2f}"
        )
    lines += [
        "",
        f"  {'first pass':<12}{'records':>10}{'published':>11}{'min':>7}{'risk share':>12}",
    ]
    for r in d["by_label"]:
        lines.append(
            f"  {r['label']:<12}{r['records']:>10,}{r['published']:>11,}"
            f"{'-' if r['min_count'] is None else r['min_count']:>7}"
            f"{100 * r['risk_share']:>11.2f}%"
        )
    m = d["mask"]
    lines.append("")
    if m is None:
        lines.append(f"mask: {d['mask_note']}")
    else:
        lines.append(f"mask ({m['mask']}), {m['records']:,} masked records, measured alone:")
        for name, text in (
            ("nearest", "spatial k-anonymity (nearest-address attack)"),
            ("worst_case", "worst case (adversary knows everyone else's address)"),
        ):
            v = m[name]
            lines.append(
                f"  {text}: smallest {v['min']}, median {v['median']:g}, "
                f"{100 * v['share_below_k']:.2f} % below k"
            )
    return "\n".join(lines)

"""Run the stages on one machine: classification summaries now, the release later.

The library never prints: every function returns a result object that the
command line (or a notebook) renders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
import pandas as pd

from geokanon._outdir import claim
from geokanon._progress import Progress, within
from geokanon.classify import (
    CapVerdict,
    Classification,
    UnitTable,
    cap_verdict,
    classify,
    finite_or_none,
    unit_table,
)
from geokanon.disposal import CoreResult, run_core
from geokanon.errors import ReleaseRefused
from geokanon.io.read import PointTable, identical_rows
from geokanon.policy import Label, OutlierPolicy
from geokanon.release import (
    ReleaseOptions,
    check_coordinate_frame,
    check_keep,
    published_crs,
    write_release,
)

__all__ = [
    "ClassifyResult",
    "Plan",
    "ReleaseResult",
    "Trial",
    "classify_points",
    "on_ground",
    "release_points",
    "run_core_on",
    "what_would_pass",
]


@dataclass(frozen=True)
class ClassifyResult:
    """First-pass classification of a point table, with per-unit suppression and cap verdicts."""

    policy: OutlierPolicy
    classification: Classification
    units: UnitTable
    verdict: CapVerdict
    n_records: int
    n_subjects: int
    #: Distinct subject ids merged into another (they differ only by case, surrounding
    #: whitespace or Unicode form): distinct ids minus distinct subjects.
    subject_ids_merged: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """Records per label."""
        return self.classification.counts()

    def to_dict(self) -> dict[str, Any]:
        """The ``classify --json`` object (see the README for every field)."""
        iota = self.classification.iota
        finite = iota[np.isfinite(iota)]
        return {
            "k": self.policy.k,
            "r_max_m": self.policy.r_max_m,
            "tau": self.policy.tau,
            "unit_cap": self.policy.unit_cap,
            "records": self.n_records,
            "subjects": self.n_subjects,
            "subject_ids_merged": self.subject_ids_merged,
            "counts": self.counts,
            # Per label, records that have it only because of time (null without times).
            "because_of_time": self.classification.time_counts(),
            "suppressed_share": self.verdict.suppressed_share,
            "disposal_share": self.verdict.disposal_share,
            "per_unit": self.units.rows(),
            "worst_unit": self.verdict.worst_unit,
            "worst_unit_share": self.verdict.worst_unit_share,
            "units_over_cap": list(self.verdict.units_over_cap),
            "passes_global_cap": self.verdict.passes_global_cap,
            "passes_unit_cap": self.verdict.passes_unit_cap,
            "many_disposals": self.verdict.many_disposals,
            # finite is a fresh copy: the median may partition it in place
            "iota_median": (
                finite_or_none(float(np.median(finite, overwrite_input=True)))
                if finite.size
                else None
            ),
        }


def on_ground(
    table: PointTable, policy: OutlierPolicy, *, pad_m: float | None = None
) -> OutlierPolicy:
    """The policy with the working CRS's smallest scale factor over the table's data.

    ``r_max_m`` holds on the ground; the stages measure in working-CRS metres against
    :attr:`~geokanon.policy.OutlierPolicy.r_work_m`, which this sets (see
    :func:`geokanon.projection.scale_factor_range`: the region is the data's bounding
    box widened by ``pad_m``, default ``r_max_m``, and snapped outward to 10 km).
    An unnamed metric CRS keeps scale 1. A smaller ``scale_factor_min`` already on the
    policy is kept.

    Examples
    --------
    >>> import pandas as pd
    >>> from geokanon.io import table_from_frame
    >>> t = table_from_frame(pd.DataFrame({"lon": [-3.0, -3.001], "lat": [53.6, 53.6]}))
    >>> pol = on_ground(t, OutlierPolicy(k=2, r_max_m=250.0))
    >>> t.working_crs, bool(249.89 < pol.r_work_m < 249.9)
    ('EPSG:32630', True)
    """
    from geokanon.projection import scale_factor_range

    working = getattr(table, "working_crs", None) or table.crs
    pad = policy.r_max_m if pad_m is None else float(pad_m)
    low = scale_factor_range(table.x, table.y, working, pad_m=pad).low
    if low >= policy.scale_factor_min:
        return policy
    return policy.replace(scale_factor_min=low)


def classify_points(
    table: PointTable, policy: OutlierPolicy, *, progress: Progress | None = None
) -> ClassifyResult:
    """Classify a point table and summarise suppression per unit (first pass only).

    Parameters
    ----------
    table
        Records in metres (see :func:`geokanon.io.read_points`).
    policy
        The outlier policy.
    progress
        Reports the stage ``classify`` (:mod:`geokanon._progress`).

    Returns
    -------
    ClassifyResult

    Examples
    --------
    >>> import pandas as pd
    >>> from geokanon.io import table_from_frame
    >>> frame = pd.DataFrame({"x": [155e3, 155001, 155002, 155900], "y": [463e3] * 4})
    >>> t = table_from_frame(frame, crs="EPSG:28992")
    >>> classify_points(t, OutlierPolicy(k=3, r_max_m=10.0)).counts["suppress"]
    1
    """
    policy = on_ground(table, policy)
    if progress is not None:
        progress("classify", "distinct-subject neighbour distances")
    cls = classify(table.x, table.y, policy, subjects=table.subjects, times=table.times)
    if progress is not None:
        progress("classify", "per-unit table")
    return summarise_classification(table, policy, cls)


def summarise_classification(
    table: PointTable, policy: OutlierPolicy, cls: Classification
) -> ClassifyResult:
    """Per-unit suppression and cap verdicts of a first-pass classification of ``table``."""
    suppressed = cls.labels == Label.SUPPRESS
    units = unit_table(suppressed, table.unit_codes, table.unit_names, table.subjects)
    verdict = cap_verdict(
        suppressed, cls.labels != Label.OK, units, policy, table.subjects, warn=True
    )
    return ClassifyResult(
        policy=policy,
        classification=cls,
        units=units,
        verdict=verdict,
        n_records=len(table),
        n_subjects=table.n_subjects,
        subject_ids_merged=int(getattr(table, "subject_ids_merged", 0)),
    )


@dataclass(frozen=True)
class Trial:
    """One change of a refused release, judged on its first-pass classification.

    Attributes
    ----------
    change
        The change in the policy's or the reader's own names (``k=4``,
        ``r_max_m=150``, ``merge_small_units=49``, ``membership_sensitive``).
    option, value
        The command-line option that makes it (``--k``, ``"4"``; a flag has ``None``).
    suppressed_share
        Suppressed subjects over all subjects in the first pass.
    units_over_cap
        Units whose first-pass suppressed share exceeds the unit cap.
    passes
        Whether the first pass breaches no cap.
    """

    change: str
    option: str
    value: str | None
    suppressed_share: float
    units_over_cap: int
    passes: bool


def _trial(
    change: str,
    option: str,
    value: str | None,
    suppressed: np.ndarray,
    labels: np.ndarray,
    codes: np.ndarray,
    names: np.ndarray,
    policy: OutlierPolicy,
    subjects: np.ndarray | None,
) -> Trial:
    units = unit_table(suppressed, codes, names, subjects)
    v = cap_verdict(suppressed, labels != Label.OK, units, policy, subjects, warn=False)
    return Trial(
        change=change, option=option, value=value, suppressed_share=v.suppressed_share,
        units_over_cap=len(v.units_over_cap),
        passes=bool(v.passes_global_cap and v.passes_unit_cap),
    )  # fmt: skip


def what_would_pass(
    table: PointTable,
    policy: OutlierPolicy,
    *,
    adjacency: frozenset[tuple[str, str]] | None = None,
    max_merge_trials: int = 8,
) -> list[Trial]:
    """Try the changes that can make a refused release pass, smallest first; stop at one.

    The changes, in this order: ``k - 1``; ``1.5 x r_max``; merging small units into
    their neighbours (``merge_small_units`` N, in ascending order among k and one more
    than the subjects of each unit over the unit cap, at most ``max_merge_trials``
    values: the smallest N that passes); and
    membership-sensitive mode (suppression becomes generalisation to the whole area).
    Each is judged on a first-pass classification only (no release is run): fast, and
    what the refusal's own figures rest on. Merging cannot lower the global share, so
    it is tried only when the global cap holds.

    Parameters
    ----------
    table
        The records as read for the refused release.
    policy
        The refused policy.
    adjacency
        Neighbouring unit pairs (:func:`geokanon.io.units.unit_adjacency`) when the
        units are polygons; else units merge into the nearest unit.
    max_merge_trials
        How many thresholds N to try for merging.

    Returns
    -------
    list of Trial
        Every change tried, in order; the last one passes, unless none does.

    Examples
    --------
    >>> import pandas as pd
    >>> from geokanon.io import table_from_frame
    >>> xs = [155000.0 + i for i in range(10)] + [160000.0]
    >>> frame = pd.DataFrame({"x": xs, "y": [463000.0] * 11, "u": ["a"] * 10 + ["b"]})
    >>> t = table_from_frame(frame, unit="u", crs="EPSG:28992")
    >>> policy = OutlierPolicy(k=3, r_max_m=10.0, tau=0.5)
    >>> [(x.change, x.passes) for x in what_would_pass(t, policy)]
    [('k=2', False), ('r_max_m=15', False), ('merge_small_units=2', True)]
    """
    from geokanon.io.units import merge_small_units

    subj = table.subjects
    trials: list[Trial] = []
    candidates: list[tuple[str, str, str, OutlierPolicy]] = []
    if policy.k > 2:
        candidates.append(
            (f"k={policy.k - 1}", "--k", str(policy.k - 1), policy.replace(k=policy.k - 1))
        )
    r = 1.5 * policy.r_max_m
    candidates.append((f"r_max_m={r:g}", "--r-max", f"{r:g}", policy.replace(r_max_m=r)))
    for change, option, value, trial_policy in candidates:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls = classify(table.x, table.y, trial_policy, subjects=subj, times=table.times)
        sup = cls.labels == Label.SUPPRESS
        trials.append(
            _trial(change, option, value, sup, cls.labels, table.unit_codes, table.unit_names,
                   trial_policy, subj)
        )  # fmt: skip
        if trials[-1].passes:
            return trials
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls = classify(table.x, table.y, policy, subjects=subj, times=table.times)
    sup = cls.labels == Label.SUPPRESS
    base = unit_table(sup, table.unit_codes, table.unit_names, subj)
    verdict = cap_verdict(sup, cls.labels != Label.OK, base, policy, subj, warn=False)
    if verdict.passes_global_cap and len(table.unit_names) > 1:
        over = set(verdict.units_over_cap)
        sizes = sorted({int(str(r["subjects"])) + 1 for r in base.rows() if r["unit"] in over})
        floor = max(2, (table.merge_threshold or 0) + 1)
        thresholds = sorted({n for n in (policy.k, *sizes) if n >= floor})[:max_merge_trials]
        for n in thresholds:
            merged = merge_small_units(
                table.unit_codes, table.unit_names, subj, table.x, table.y, n, adjacency=adjacency
            )
            trials.append(
                _trial(f"merge_small_units={n}", "--merge-small-units", str(n), sup, cls.labels,
                       merged.codes, merged.names, policy, subj)
            )  # fmt: skip
            if trials[-1].passes:
                return trials
    if not policy.membership_sensitive:
        # suppression becomes generalisation to the whole area: no one is removed
        none = np.zeros(sup.size, dtype=bool)
        trials.append(
            _trial("membership_sensitive", "--membership-sensitive", None, none, cls.labels,
                   table.unit_codes, table.unit_names, policy, subj)
        )  # fmt: skip
    return trials


@dataclass(frozen=True)
class ReleaseResult:
    """A written release: where it is, what the core decided, and the manifest."""

    out: Path
    core: CoreResult
    manifest: dict[str, Any]

    @property
    def counts(self) -> dict[str, int]:
        """Records per final disposal (exact, for the custodian)."""
        return self.core.counts()


def run_core_on(
    table: PointTable,
    policy: OutlierPolicy,
    *,
    enforce_caps: bool = True,
    progress: Progress | None = None,
) -> CoreResult:
    """Run the release core (classify, group, dispose, fixed point, caps) on a point table.

    Parameters
    ----------
    table
        Records in metres.
    policy
        The outlier policy.
    enforce_caps
        Raise :class:`~geokanon.errors.ReleaseRefused` on a cap breach.

    Returns
    -------
    CoreResult
    """
    policy = on_ground(table, policy)
    return run_core(
        table.x, table.y, policy,
        subjects=table.subjects, times=table.times,
        unit_codes=table.unit_codes, unit_names=table.unit_names,
        tiebreak=record_tiebreak(table), enforce_caps=enforce_caps, progress=progress,
    )  # fmt: skip


def record_tiebreak(table: PointTable) -> np.ndarray | None:
    """A key of each record's content that orders records at one place independently of rows.

    Every column but the coordinates goes into it (see :func:`content_tiebreak`): the
    attributes, the subject id, the time and the unit. Records that are equal in
    every column get equal keys (and are interchangeable); any two others differ.
    ``None`` when there is nothing but coordinates and one unit.
    """
    attrs = None
    if len(table.attributes.columns):
        attrs = np.asarray(
            pd.util.hash_pandas_object(table.attributes, index=False).to_numpy(), dtype=np.uint64
        )
    subject = table.subject_keys if table.subject_keys is not None else table.subjects
    return content_tiebreak(attrs, subject, table.times, table.unit_codes)


def _describe_scale(table: PointTable, policy: OutlierPolicy) -> str:
    """The plan's line on the working CRS's scale and the radius held on the map."""
    from geokanon.projection import scale_factor_range

    working = getattr(table, "working_crs", None) or table.crs
    s = scale_factor_range(table.x, table.y, working, pad_m=policy.r_max_m)
    held = policy.replace(scale_factor_min=min(s.low, policy.scale_factor_min)).r_work_m
    return (
        f"  scale factor of the working CRS over the data: {s.low:.7g} to {s.high:.7g}; "
        f"r_max {policy.r_max_m:g} m on the ground is held as {held:.6g} m on the map"
    )


@nb.njit(cache=True, inline="always")
def _fmix64(h: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """MurmurHash3's 64-bit finaliser: a bijection of uint64 that maps 0 to 0."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@nb.njit(cache=True, parallel=True)
def _mixed(
    part: np.ndarray, mult: np.uint64, add: np.uint64, key: np.ndarray, with_key: bool | np.bool_
) -> np.ndarray:  # pragma: no cover - compiled
    """Per record, ``fmix64(part * mult + add)`` (wrapping), folded into ``key`` by
    ``fmix64(key ^ mixed)`` when ``with_key``; each record on its own."""
    out = np.empty(part.size, np.uint64)
    for i in nb.prange(part.size):
        h = _fmix64(part[i] * mult + add)
        out[i] = _fmix64(key[i] ^ h) if with_key else h
    return out


def content_tiebreak(
    attributes: np.ndarray | None,
    subjects: np.ndarray | None,
    times: np.ndarray | None,
    unit_codes: np.ndarray | None,
) -> np.ndarray | None:
    """One 64-bit key per record from the hashes or values of its non-coordinate columns.

    Parameters
    ----------
    attributes
        A hash of each record's attributes (``pandas.util.hash_pandas_object``), or None.
    subjects
        A hash of each raw subject id (or the subject codes), or None.
    times
        Times in seconds, or None.
    unit_codes
        Unit codes (sorted unit names, so independent of row order), or None.

    Returns
    -------
    numpy.ndarray or None
        The key per record (both backends use this, so they order records alike);
        None when no column is given and all unit codes are 0.

    Examples
    --------
    >>> import numpy as np
    >>> key = content_tiebreak(None, None, None, np.array([0, 1, 0]))
    >>> bool(key[0] == key[2]), bool(key[0] == key[1])
    (True, False)
    """
    key: np.ndarray | None = None
    parts: list[np.ndarray] = []
    if subjects is not None:
        parts.append(np.asarray(subjects).astype(np.uint64, copy=False))
    if times is not None:
        parts.append((np.asarray(times, dtype=np.float64) + 0.0).view(np.uint64))
    if unit_codes is not None:
        codes = np.asarray(unit_codes)
        if codes.size and codes.any():
            parts.append(codes.astype(np.uint64))
    if attributes is not None:
        key = np.array(attributes, dtype=np.uint64)
    for i, part in enumerate(parts):
        # a different odd multiplier per column, so equal values in two columns do not cancel
        key = _mixed(
            np.ascontiguousarray(part, dtype=np.uint64), np.uint64(2 * i + 3), np.uint64(i + 1),
            np.zeros(0, np.uint64) if key is None else key, np.bool_(key is not None),
        )  # fmt: skip
    return key


def _same_decisions(a: CoreResult, b: CoreResult, perm: np.ndarray, classes: np.ndarray) -> bool:
    """The ``deterministic`` rule (:func:`geokanon.verify.decisions_agree`) for two core runs.

    ``b`` ran on the rows ``perm`` of ``a``'s input; ``classes`` are the input's
    classes of records identical in every column (:func:`geokanon.io.read.identical_rows`).
    Groups and classes must be the same; per-record decisions the same up to
    exchanging identical records.
    """
    from geokanon.verify import decisions_agree

    fields = ("first_labels", "final_labels", "disposal", "group_id", "class_id")
    return bool(
        np.array_equal(a.group_x, b.group_x)
        and np.array_equal(a.group_y, b.group_y)
        and list(a.class_unit) == list(b.class_unit)
        and list(a.class_level) == list(b.class_level)
        and decisions_agree(
            {f: getattr(a, f) for f in fields}, {f: getattr(b, f) for f in fields}, perm, classes
        )
    )


def _write_refusal(
    out: Path, exc: ReleaseRefused, table: PointTable, policy: OutlierPolicy
) -> None:
    """Write the refusal report beside ``out`` and name it in the exception's notes."""
    from geokanon import __version__

    try:
        from geokanon.report.html import write_refusal_report

        path = write_refusal_report(
            out, str(exc), exc.figures, policy=policy.to_dict(), version=__version__,
            input_sha256=getattr(table, "source_sha256", None),
        )  # fmt: skip
    except (OSError, ImportError) as err:  # the refusal itself must still be raised
        exc.add_note(f"the refusal report could not be written: {type(err).__name__}")
        return
    exc.add_note(f"refusal report: {path}")


def _remove_refusal(out: Path) -> None:
    """A release that is not refused removes the refusal report of an earlier run."""
    from geokanon.report.html import refusal_report_path

    with contextlib.suppress(OSError):
        refusal_report_path(out).unlink(missing_ok=True)


#: Inputs up to this size get the determinism check (a second core run on shuffled rows).
DETERMINISM_CHECK_MAX = 250_000


def release_points(
    table: PointTable,
    policy: OutlierPolicy,
    out: str | Path,
    options: ReleaseOptions | None = None,
    *,
    check_determinism: bool | None = None,
    progress: Progress | None = None,
    core_runner: Callable[..., CoreResult] | None = None,
    on_refusal: Callable[[ReleaseRefused, PointTable], None] | None = None,
) -> ReleaseResult:
    """The whole pipeline: core, release files, independent verification, atomic rename.

    Parameters
    ----------
    table
        The source records.
    policy
        The outlier policy.
    out
        Output directory; gets ``release/`` (publishable) and ``audit/`` (custodian).
    options
        Writing options (kept columns, totals mode, force, output CRS).
    check_determinism
        Re-run the core on the rows in a shuffled order (seeded) and require the
        same decisions; default: on up to 250,000 records.
    progress
        Reports the stages (``mask``, ``release core``, ``determinism check ...``, then
        :func:`~geokanon.release.write_release`'s ``write``, ``report``, ``verify``,
        ``rename``) and their steps (:mod:`geokanon._progress`); the
        library never prints.
    core_runner
        Runs the release core: ``core_runner(table, policy, progress=...)`` returning a
        :class:`~geokanon.disposal.CoreResult` (default :func:`run_core_on`; the Dask
        backend passes its tiled core, see :mod:`geokanon.distributed`).
    on_refusal
        Called with the :class:`~geokanon.errors.ReleaseRefused` and the table the core
        ran on (masked, with a mask) before the refusal report is written, while ``out``
        is still held: it may add to the message (the command line adds the command
        that would pass).

    Returns
    -------
    ReleaseResult

    Raises
    ------
    ReleaseRefused
        A cap is breached or no fixed point; no release is written, only the
        refusal report ``<out>.refusal.html`` beside ``out`` (see ``docs/report.md``).
    VerificationFailed
        An independent check failed; nothing is written.
    InputError
        Bad input or options, an existing ``out`` without ``force``, or another run
        writing ``out`` (its PID and start time are named); nothing is written.
    WriteError
        ``out`` could not be written (read-only or full filesystem, no permission):
        the build is removed and an earlier release at ``out`` is unchanged.
    """
    options = options or ReleaseOptions()
    # Before any work: a release must say what its coordinates are (a CRS or local metres).
    check_coordinate_frame(published_crs(table, options), options)
    check_keep(options.keep, table)
    out = Path(out)
    # Held from the start: a second run to ``out`` stops at once, and the parent's
    # leftovers of killed runs are removed before anything else (geokanon._outdir).
    with claim(out, force=options.force):
        return _release_points(
            table, policy, out, options, check_determinism=check_determinism,
            progress=progress, core_runner=core_runner, on_refusal=on_refusal,
        )  # fmt: skip


def _release_points(
    table: PointTable,
    policy: OutlierPolicy,
    out: Path,
    options: ReleaseOptions,
    *,
    check_determinism: bool | None,
    progress: Progress | None,
    core_runner: Callable[..., CoreResult] | None,
    on_refusal: Callable[[ReleaseRefused, PointTable], None] | None = None,
) -> ReleaseResult:
    source = table
    mask_risk = None
    mask_key = None
    if options.mask is not None:
        from geokanon.mask import apply_mask

        mask_key = resolve_mask_key(out, options)
        if progress is not None:
            progress("mask", "classification and checks run on the masked coordinates")
        # Noise is keyed by the raw subject ids (their hash) where known, so adding
        # subjects to a later release draws no fresh noise for anyone already in it.
        keys = table.subject_keys if table.subject_keys is not None else table.subjects
        mx, my = apply_mask(table.x, table.y, options.mask, key=mask_key, subjects=keys)
        mask_risk = summarise_mask_anonymity(table, mx, my, options.mask, policy.k)
        table = dataclasses.replace(table, x=mx, y=my)
    # r_max on the ground: the working CRS's scale over the (masked) data sets r_work_m
    policy = on_ground(table, policy)
    runner = core_runner or run_core_on
    try:
        core = runner(table, policy, progress=within(progress, "release core"))
    except ReleaseRefused as exc:
        if on_refusal is not None:
            on_refusal(exc, table)
        if progress is not None:
            progress("refusal report")
        _write_refusal(out, exc, table, policy)
        raise
    deterministic = None
    if check_determinism is None:
        check_determinism = len(table) <= DETERMINISM_CHECK_MAX
    if check_determinism:
        perm = np.random.default_rng(policy.seed).permutation(len(table))
        shuffled = dataclasses.replace(
            table,
            x=table.x[perm],
            y=table.y[perm],
            subjects=None if table.subjects is None else table.subjects[perm],
            times=None if table.times is None else table.times[perm],
            unit_codes=table.unit_codes[perm],
            unit_names=table.unit_names,
            attributes=table.attributes.iloc[perm].reset_index(drop=True),
            input_xy=None
            if table.input_xy is None
            else (table.input_xy[0][perm], table.input_xy[1][perm]),
        )
        again = runner(
            shuffled, policy, progress=within(progress, "determinism check (shuffled rows)")
        )
        deterministic = _same_decisions(core, again, perm, identical_rows(table))
        del shuffled, perm, again  # not held while the release is written and verified
    from geokanon import __version__

    manifest = write_release(
        out, table, core, policy, options, version=__version__, deterministic=deterministic,
        source=source, mask_risk=mask_risk, mask_key=mask_key, progress=progress,
    )  # fmt: skip
    _remove_refusal(out)
    return ReleaseResult(out=out, core=core, manifest=manifest)


def resolve_mask_key(out: str | Path, options: ReleaseOptions) -> Any:
    """The secret key of the release's mask, never derived from the published seed.

    ``options.mask_key`` when given; else, when ``out`` is replaced (``force``) and
    its audit holds a key, that key (so re-publishing draws no fresh noise that
    could be averaged away); else a new key from the operating system's random
    source. The release keeps it in ``audit/mask_key``.

    Returns
    -------
    geokanon.mask.MaskKey
    """
    from geokanon.mask import MaskKey

    if options.mask_key is not None:
        return options.mask_key
    previous = Path(out) / "audit" / "mask_key"
    if options.force and previous.is_file():
        return MaskKey.from_file(previous, origin="kept from the release it replaced")
    return MaskKey.generate()


def summarise_mask_anonymity(
    table: PointTable, mx: np.ndarray, my: np.ndarray, mask: Any, k: int
) -> dict[str, Any]:
    """The mask's spatial k-anonymity for the manifest (aggregates only).

    Per record, :func:`geokanon.risk.mask_anonymity` counts the distinct subjects
    (the record's own included) at least as close to its masked location as its
    true location is, and the count left to an adversary who also knows the mask.

    Returns
    -------
    dict
        ``records``; ``share_below_k`` and ``worst_case_share_below_k`` (counts
        below k); ``min``, ``p5``, ``median`` of the other subjects that close.
    """
    from geokanon.risk import mask_anonymity

    m = mask_anonymity(table.x, table.y, mx, my, table.subjects, mask=mask)
    others = m.nearest - 1
    n = int(others.size)
    return {
        "records": n,
        "share_below_k": float((m.nearest < k).mean()) if n else 0.0,
        "worst_case_share_below_k": float((m.worst_case < k).mean()) if n else 0.0,
        "min": int(others.min()) if n else 0,
        "p5": float(np.percentile(others, 5)) if n else 0.0,
        "median": float(np.median(others)) if n else 0.0,
    }


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a run will do, frozen and printable before it runs (``describe``, ``--dry-run``).

    A plan is a small picklable recipe: the policy, how the source is read, and how
    the release is written. Both backends run a plan; workers receive the plan,
    not live objects.

    Examples
    --------
    >>> plan = Plan.from_policy(OutlierPolicy(k=5, r_max_m=300.0), source="dwellings.csv")
    >>> print(plan.describe().splitlines()[0])
    plan: release dwellings.csv with k=5, r_max=300 m
    """

    policy: OutlierPolicy
    source: str
    read_options: tuple[tuple[str, Any], ...] = ()
    release: ReleaseOptions | None = None
    out: str | None = None

    @classmethod
    def from_policy(
        cls,
        policy: OutlierPolicy,
        *,
        source: str,
        read_options: tuple[tuple[str, Any], ...] = (),
        release: ReleaseOptions | None = None,
        out: str | None = None,
    ) -> Plan:
        """Build a plan from a validated policy and the reading and writing options."""
        return cls(
            policy=policy, source=source, read_options=read_options, release=release, out=out
        )

    def describe(self, table: PointTable | None = None) -> str:
        """The resolved plan in plain text; with the read table, also CRS, subjects, units."""
        p = self.policy
        lines = [f"plan: release {self.source} with k={p.k}, r_max={p.r_max_m:g} m"]
        if table is not None:
            p = on_ground(table, p)  # the radius the stages will measure against
            working = getattr(table, "working_crs", None) or table.crs
            output = getattr(table, "output_crs", None) or table.crs
            lines += [
                f"  records: {len(table):,}; subjects: {table.n_subjects:,}"
                + ("" if table.subjects is not None else " (each record its own subject)")
                + (
                    f" ({table.subject_ids_merged:,} ids merged: case, spacing or Unicode form)"
                    if getattr(table, "subject_ids_merged", 0)
                    else ""
                ),
                f"  CRS: input {table.crs or 'unnamed metric'}; distances in "
                f"{working or 'unnamed metric'}; published in {output or 'unnamed metric'}",
                _describe_scale(table, p),
                f"  units: {len(table.unit_names):,} ("
                + ", ".join(map(str, table.unit_names[:6]))
                + (", ..." if len(table.unit_names) > 6 else "")
                + ")",
                f"  times: {'yes' if table.times is not None else 'no'}",
            ]
            copies = int(getattr(table, "duplicates", 0))
            if copies:
                fate = (
                    "removed before anything else"
                    if getattr(table, "duplicates_dropped", False)
                    else "kept, each a record"
                    + ("" if table.subjects is not None else " and a subject of its own")
                )
                lines.append(f"  exact copies of records: {copies:,} ({fate})")
            excluded = tuple(getattr(table, "excluded", ()) or ())
            if excluded:
                lines.append(
                    f"  units left out: {', '.join(u for u, _ in excluded)} "
                    f"({sum(n for _, n in excluded):,} records dropped)"
                )
            if getattr(table, "clipped", 0):
                lines.append(f"  records outside the study area dropped: {table.clipped:,}")
            merges = tuple(getattr(table, "unit_merges", ()) or ())
            if merges:
                lines.append(
                    f"  units merged (fewer than {table.merge_threshold} subjects): "
                    + ", ".join(f"{a} -> {b}" for a, b in merges[:8])
                    + (" ..." if len(merges) > 8 else "")
                )
        lines += [
            f"  labels: ok iota<=1, merge <={p.merge_ratio:g}, "
            f"generalise <={p.generalise_ratio:g}, suppress above "
            f"(neighbour search radius {p.search_radius_m:g} m)",
            f"  caps: tau {p.tau:.2%} of subjects; unit cap {p.unit_cap:.0%}; warning above "
            f"{p.disposal_warning_share:.0%} disposals",
            f"  time: t_max {p.t_max_s:g} s, {p.time_mode}" if p.t_max_s else "  time: not used",
            f"  representatives on grids of at most {p.snap_step_m:g} m, finer for tight groups; "
            f"seed {p.seed}",
            f"  membership-sensitive: {'yes' if p.membership_sensitive else 'no'}; "
            f"synthetic stand-ins for suppressed subjects: "
            f"{'yes' if p.allow_synthetic else 'no'}",
        ]
        if self.release is not None:
            r = self.release
            lines += [
                f"  release to {self.out}/release (publishable) and {self.out}/audit (custodian)",
                f"  kept columns: {', '.join(r.keep) if r.keep else 'none'}; totals: {r.totals}",
            ]
            if r.mask is not None:
                origin = (
                    r.mask_key.origin
                    if r.mask_key is not None
                    else "drawn from the operating system's random source (kept from "
                    "DIR/audit/mask_key when --force replaces a masked release)"
                )
                lines.append(
                    f"  mask: {r.mask.label}, before classification; secret key {origin}, "
                    f"kept in {self.out}/audit/mask_key, never published"
                )
        lines.append(
            "  stages: read -> classify -> group/dispose (<= 5 passes) -> caps -> write -> "
            "verify -> rename"
        )
        return "\n".join(lines)

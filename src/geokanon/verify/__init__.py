"""Independent verification of a written release.

:func:`verify_release` re-reads a release directory (``DIR/release`` and
``DIR/audit``, see ``docs/release-format.md``) and, optionally, the source, and
runs every check by name. It imports no algorithm module: sizes, distinct
subjects, distances, shares and totals are recomputed here from the files, so
a bug in grouping or disposal cannot hide itself.

Each check is a module of this package, which states its rule exactly as
implemented: :mod:`~geokanon.verify.k_subjects`, :mod:`~geokanon.verify.extent`,
:mod:`~geokanon.verify.caps` (``tau`` and ``unit_cap``), :mod:`~geokanon.verify.holes`,
:mod:`~geokanon.verify.no_leak`, :mod:`~geokanon.verify.representation`,
:mod:`~geokanon.verify.counts`, :mod:`~geokanon.verify.fixed_point`,
:mod:`~geokanon.verify.report_safety`, :mod:`~geokanon.verify.manifest` and
:mod:`~geokanon.verify.deterministic` (run by the release writer). They share one
reader (:mod:`~geokanon.verify._reader`), the array helpers of
:mod:`~geokanon.verify._arrays` and what :mod:`~geokanon.verify._derived` derives.
:mod:`~geokanon.verify.partitioned` verifies a partitioned release with the same check
functions: per part for ``k_subjects``, ``extent`` and ``representation``, on the reduced
figures for ``tau``, ``unit_cap``, ``fixed_point``, ``report_safety`` and ``manifest``.
A single file is one partition: its reader is the part's and the release's; a part of a
partitioned release gets its reader from
:meth:`~geokanon.verify._reader.ReleaseReader.of_part`, and one loop
(:func:`~geokanon.verify._results.run_checks`) runs the checks in both layouts (see "One
design for both layouts" in ``docs/release-format.md``). A single-file release's checks
run in two lanes side by side (:data:`~geokanon.verify._results.LANES`: the audit's and
tables' checks; ``no_leak`` with ``counts`` and ``manifest``, which take over what it
read), over one reader whose values are computed once whichever lane asks first
(:mod:`~geokanon.verify._once`): the report is the one a single lane gives.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from geokanon.errors import InputError
from geokanon.io.read import DatabaseInput, PointTable
from geokanon.verify import _results
from geokanon.verify._reader import (
    LESS_THAN_K,
    WITHHELD,
    ReleaseReader,
    subject_codes_of_ids,
    subject_id_text,
)
from geokanon.verify._results import (
    CHECKS,
    NOT_CHECKED_HERE,
    CheckResult,
    Unreadable,
    VerificationReport,
    format_report,
    run_checks,
)
from geokanon.verify.caps import check_tau, check_unit_cap
from geokanon.verify.counts import check_counts, warm_counts
from geokanon.verify.deterministic import decisions_agree
from geokanon.verify.extent import check_extent
from geokanon.verify.fixed_point import check_fixed_point
from geokanon.verify.holes import (
    HiddenRange,
    check_holes,
    hidden_ranges,
    holes_check,
    holes_summary,
    holes_system,
)
from geokanon.verify.k_subjects import check_k_subjects
from geokanon.verify.manifest import check_manifest
from geokanon.verify.no_leak import check_no_leak
from geokanon.verify.report_safety import check_report_safety
from geokanon.verify.representation import check_representation

__all__ = [
    "CHECKS",
    "LESS_THAN_K",
    "NOT_CHECKED_HERE",
    "WITHHELD",
    "CheckResult",
    "HiddenRange",
    "VerificationReport",
    "decisions_agree",
    "format_report",
    "hidden_ranges",
    "holes_check",
    "holes_summary",
    "holes_system",
    "subject_codes_of_ids",
    "subject_id_text",
    "verify_release",
]


_CHECK_FUNCS: dict[str, Callable[[ReleaseReader], CheckResult]] = {
    "k_subjects": check_k_subjects,
    "extent": check_extent,
    "tau": check_tau,
    "unit_cap": check_unit_cap,
    "holes": check_holes,
    "no_leak": check_no_leak,
    "representation": check_representation,
    "counts": check_counts,
    "fixed_point": check_fixed_point,
    "report_safety": check_report_safety,
    "manifest": check_manifest,
}

#: What a check's values are worked out ahead by, in a lane of its own
#: (:data:`geokanon.verify._results.LANE_TAILS`).
_WARMS: dict[str, Callable[[ReleaseReader], None]] = {"counts": warm_counts}


def _existing_file(path: str | os.PathLike[str] | DatabaseInput) -> Path | DatabaseInput:
    if isinstance(path, DatabaseInput):  # a database table or query: read by the source
        return path
    p = Path(path)
    if not p.is_file():
        raise InputError(f"source file {str(p)!r} does not exist")
    return p


def verify_release(
    directory: str | os.PathLike[str],
    *,
    source: PointTable | str | os.PathLike[str] | None = None,
    source_file: str | os.PathLike[str] | DatabaseInput | None = None,
    tolerance_m: float = 0.0,
    checks: Sequence[str] | None = None,
    unchanged: Mapping[str, str] | None = None,
    progress: Callable[..., None] | None = None,
    before_report: bool | None = None,
    reuse: VerificationReport | None = None,
) -> VerificationReport:
    """Re-read a written release and run every check by name.

    Parameters
    ----------
    directory
        The directory that holds ``release/`` and ``audit/`` (a final release
        or the writer's temporary build directory). The ``release/`` folder
        itself is accepted too.
    source
        The source records: a :class:`~geokanon.io.read.PointTable`, or the
        path of the source file (CSV or Parquet), re-read raw with the column
        names in ``audit.json`` so subject ids and timestamps can be searched
        for. ``None``: the audit's coordinates and subject codes are used.
    source_file
        With a :class:`~geokanon.io.read.PointTable` as ``source``: the file it
        was read from (CSV or Parquet), re-read raw so that ``no_leak`` can look
        for the raw subject ids, timestamps, id columns and coordinates as
        written, while subjects and units come from the table.
    tolerance_m
        Slack in metres added to ``r_max_m`` in ``extent``; when > 0, a
        representative within this distance of a member fails
        ``representation``.
    checks
        Run only these checks (default: all of :data:`CHECKS`).
    unchanged
        Release files (path relative to ``release/`` -> sha256) that an earlier run
        of every check over the same release verified and that the caller has not
        changed since (the release writer's second run, after it wrote only the
        report): ``no_leak`` does not scan them again and ``manifest`` compares the
        manifest's checksums with these instead of reading them again. Every other
        file is checked in full.
    progress
        Called as ``progress(name, done=i, total=n)`` for each check in :data:`CHECKS`
        order, from this thread, once the checks before it are done (the protocol of
        ``geokanon._progress``; a callable, so no module is imported); ``source``
        first, when the source file is read.
    before_report
        ``True``: the release writer's first run, before it writes ``report.html``
        (which shows these results), so ``manifest`` does not require the report
        yet. ``False`` (``geokanon verify``): a release without its report fails.
        ``None``: the report is required once the manifest records verification
        results (the writer records them just before it writes the report).
    reuse
        The report of an earlier run over the same release and source (the release
        writer's first run, before it writes the report): what that run derived from
        the audit and the source (decoded audit columns, the source as read, the
        sorted values ``no_leak`` searches for) is taken over instead of derived again,
        when the audit's files (paths, sizes, modification times), the source (the
        same table object, or the same file) and ``tolerance_m`` are the same; else
        it is ignored. Everything read from ``release/`` is read again.

    Returns
    -------
    VerificationReport
        One :class:`CheckResult` per check; ``deterministic`` is listed as skipped.

    Raises
    ------
    InputError
        The directory holds no ``release/`` and ``audit/``, a check name is
        unknown, or the source file cannot be read.

    Examples
    --------
    >>> report = verify_release("out/dwellings", source="dwellings.csv")  # doctest: +SKIP
    >>> report.passed, report.as_dict()["extent"]  # doctest: +SKIP
    (True, True)
    >>> verify_release("no-such-release")
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: 'no-such-release' is not a release directory: ...
    """
    root = Path(directory)
    if (
        root.name == "release"
        and not (root / "release").is_dir()
        and (root.parent / "audit").is_dir()
    ):
        root = root.parent
    if not (root / "release").is_dir() or not (root / "audit").is_dir():
        raise InputError(
            f"{str(root)!r} is not a release directory: it must hold release/ and audit/ "
            "(give the directory passed to 'geokanon release --out')"
        )
    if not math.isfinite(tolerance_m) or tolerance_m < 0:
        raise InputError(f"tolerance_m must be a finite number >= 0, got {tolerance_m!r}")
    names = tuple(CHECKS if checks is None else checks)
    unknown = [n for n in names if n not in _CHECK_FUNCS]
    if unknown:
        raise InputError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    src: PointTable | Path | DatabaseInput | None
    if source is None or isinstance(source, PointTable):
        src = source
    else:
        src = _existing_file(source)
    raw = None if source_file is None else _existing_file(source_file)
    if raw is not None and src is None:
        src, raw = raw, None
    rel = ReleaseReader(root, src, tolerance_m, raw)
    rel.unchanged = {str(k): str(v).lower() for k, v in (unchanged or {}).items()}
    rel.before_report = None if before_report is None else bool(before_report)
    rel.checks = frozenset(names)
    if "no_leak" in rel.checks:
        rel.start_encodings()  # beside the source's read and the checks
    if reuse is not None:
        rel.adopt(reuse.derived)
    if isinstance(src, Path | DatabaseInput) or raw is not None:
        if progress is not None:
            progress("source")
        try:
            _ = rel.source  # a bad source file is an input error, raised here
        except Unreadable:
            pass
    first = {check: partial(getattr, rel, read) for check, read in _results.LANE_READS.items()}
    then = {
        lane: partial(_WARMS[check], rel)
        for lane, check in _results.LANE_TAILS.items()
        if check in names
    }
    results = run_checks(
        _CHECK_FUNCS, rel, names, progress, lanes=_results.LANES, first=first, then=then
    )
    return VerificationReport(results, digests=dict(rel.digests), derived=rel.carry())

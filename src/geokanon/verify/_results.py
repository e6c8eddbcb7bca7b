"""Results of the checks: :class:`CheckResult`, :class:`VerificationReport` and the check names."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from geokanon.errors import InputError

#: The checks :func:`verify_release` runs, in report order.
CHECKS: tuple[str, ...] = (
    "k_subjects",
    "extent",
    "tau",
    "unit_cap",
    "holes",
    "no_leak",
    "representation",
    "counts",
    "fixed_point",
    "report_safety",
    "manifest",
)


#: Checks that need more than the written release (the release writer runs them).
NOT_CHECKED_HERE: tuple[str, ...] = ("deterministic",)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one named check.

    Attributes
    ----------
    name
        Check name (one of :data:`CHECKS`).
    passed
        Whether the check holds.
    detail
        Figures only (counts, shares, distances, file and unit names); never a
        coordinate, a subject id or a timestamp.
    """

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class VerificationReport:
    """All check results of one release.

    Attributes
    ----------
    checks
        One result per check that was run, in :data:`CHECKS` order.
    skipped
        Checks not run here (``deterministic`` needs a second build).
    digests
        Release file -> sha256 as the ``manifest`` check read it from disk (empty
        when it did not run); a later run can pass them as ``unchanged``.
    derived
        What the run derived from the audit and the source (decoded audit columns,
        the source as read, the sorted secrets ``no_leak`` searches for), handed to a
        later run as ``reuse``; not part of the result (not compared, not shown).
    """

    checks: tuple[CheckResult, ...]
    skipped: tuple[str, ...] = NOT_CHECKED_HERE
    digests: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: what the run derived from the audit and the source (a private carry object), for
    #: a later run over the same release: ``verify_release(..., reuse=report)``
    derived: Any = field(default=None, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        """Whether every check that was run passed."""
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the failed checks."""
        return tuple(c.name for c in self.checks if not c.passed)

    def as_dict(self) -> dict[str, bool]:
        """Check name -> passed, for the manifest's ``verification`` (skipped checks absent)."""
        return {c.name: c.passed for c in self.checks}

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)


def format_report(report: VerificationReport) -> str:
    """One line per check: ``PASS name  detail``, ``FAIL ...``, ``SKIP ...``.

    Parameters
    ----------
    report
        The result of :func:`verify_release`.

    Returns
    -------
    str
        The lines joined with newlines (no trailing newline).

    Examples
    --------
    >>> r = VerificationReport((CheckResult("extent", False, "1 member beyond r_max"),))
    >>> print(format_report(r))
    FAIL extent         1 member beyond r_max
    SKIP deterministic  not checked here (needs a second build; the release writer runs it)
    """
    width = max([len(c.name) for c in report.checks] + [len(s) for s in report.skipped] + [13])
    lines = [
        f"{'PASS' if c.passed else 'FAIL'} {c.name:<{width}}  {c.detail}".rstrip()
        for c in report.checks
    ]
    lines += [
        f"SKIP {name:<{width}}  not checked here (needs a second build; the release writer runs it)"
        for name in report.skipped
    ]
    return "\n".join(lines)


class Unreadable(Exception):
    """A release file is missing or malformed; the message is safe to show."""


_R = TypeVar("_R")


def _return_free_memory() -> None:
    """Give the memory a check freed back to the system (pyarrow's pool, glibc's heap), so
    that the next check starts from what is still held, not from the last one's peak."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


#: Checks that read whole files in batches: the memory they churned is returned after them.
_CHURNING = frozenset({"no_leak"})

#: The single-file verifier's checks in two lanes that run side by side, each in
#: :data:`CHECKS` order (see :func:`run_checks`): the audit's and the tables' checks,
#: and ``no_leak``'s scans of every file with the checks that take over what it read
#: (``counts`` the records.csv it hashed on the way, ``manifest`` the checksums it took).
#: ``None``: one after the other. :func:`~geokanon.verify.verify_release` has a lane
#: that starts with ``k_subjects`` read the audit's labels first and one that starts
#: with ``no_leak`` its places (:data:`LANE_READS`).
LANES: tuple[tuple[str, ...], ...] | None = (
    ("k_subjects", "extent", "tau", "unit_cap", "holes", "representation", "fixed_point",
     "report_safety"),
    ("no_leak", "counts", "manifest"),
)  # fmt: skip


#: The reader's value a lane of :data:`LANES` that starts with the check reads first (the
#: audit's two sets of columns: each lane reads one while the other reads the other).
LANE_READS: dict[str, str] = {"k_subjects": "gid", "no_leak": "xy_m"}

#: The check whose values a lane of :data:`LANES` that starts with the key works out after
#: its own checks: the audit's checks end first, and ``counts`` (last but one of the other
#: lane, after ``no_leak``'s scans) then finds its tallies of the audit made
#: (:func:`geokanon.verify.counts.warm_counts`) and only judges what ``no_leak`` read.
LANE_TAILS: dict[str, str] = {"k_subjects": "counts"}


def _run_one(funcs: Mapping[str, Callable[[_R], CheckResult]], rel: _R, name: str) -> CheckResult:
    """One check's result; a release that cannot be read as the check needs fails it, an
    :class:`~geokanon.errors.InputError` is raised (see :func:`run_checks`)."""
    try:
        try:
            return funcs[name](rel)
        finally:
            if name in _CHURNING:
                _return_free_memory()
    except Unreadable as exc:
        return CheckResult(name, False, f"cannot check: {exc}")
    except InputError:
        raise
    except Exception as exc:  # a malformed release must fail the check, not crash verify
        return CheckResult(name, False, f"cannot check: {type(exc).__name__} while reading")


def run_checks(
    funcs: Mapping[str, Callable[[_R], CheckResult]],
    rel: _R,
    names: Sequence[str],
    progress: Callable[..., None] | None = None,
    lanes: Sequence[Sequence[str]] | None = None,
    first: Mapping[str, Callable[[], object]] | None = None,
    then: Mapping[str, Callable[[], object]] | None = None,
) -> tuple[CheckResult, ...]:
    """Run the checks ``names`` on the reader ``rel``, in :data:`CHECKS` order: the one loop
    of both layouts (a single-file release's reader, a partitioned release's reduced one).

    A release that cannot be read as a check needs fails that check (``cannot check:
    ...``, naming the exception's type only, never a value), so a malformed release never
    crashes verify; an :class:`~geokanon.errors.InputError` (a bad source, a bad argument)
    is raised: the first in :data:`CHECKS` order.

    ``lanes``: run the checks of each lane one after the other in a thread of its own,
    the lanes side by side (a check in no lane joins the first); ``first[name]``, when
    given, is called in the lane whose first check is ``name`` before its checks (a read
    the lane starts with, so that the lanes read apart: what it raises is left to the
    checks); ``then[name]`` likewise after its checks (values a check of another lane
    will need, worked out while that lane is still busy). The reader computes each
    value once, whichever lane asks first (:mod:`geokanon.verify._once`); a check's result
    depends on the release alone, so the results, their details and their order are those
    of one lane. ``progress(name, done=i, total=n)`` is called, in :data:`CHECKS` order,
    as each check starts (with lanes: once the checks before it are done; from this
    thread only).
    """
    todo = [n for n in CHECKS if n in names]
    plan = [[n for n in lane if n in todo] for lane in lanes or ()]
    plan = [lane for lane in plan if lane]
    if len(plan) < 2:
        done = []
        for i, name in enumerate(todo):
            if progress is not None:
                progress(name, done=i, total=len(todo))
            done.append(_run_one(funcs, rel, name))
        return tuple(done)
    planned = {n for lane in plan for n in lane}
    plan[0] += [n for n in todo if n not in planned]
    results: dict[str, Future[CheckResult]] = {n: Future() for n in todo}

    def run_lane(
        lane: list[str], warm: Callable[[], object] | None, after: Callable[[], object] | None
    ) -> None:
        if warm is not None:
            with contextlib.suppress(Exception):
                warm()
        for name in lane:
            out = results[name]
            try:
                out.set_result(_run_one(funcs, rel, name))
            except BaseException as exc:  # an InputError (or worse): raised in order below
                out.set_exception(exc)
        if after is not None:
            with contextlib.suppress(Exception):  # the check meets it again, and says so
                after()

    with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="verify") as pool:
        running = [
            pool.submit(run_lane, lane, (first or {}).get(lane[0]), (then or {}).get(lane[0]))
            for lane in plan
        ]
        ordered = []
        for i, name in enumerate(todo):
            if progress is not None:
                progress(name, done=i, total=len(todo))
            ordered.append(results[name].result())
        for lane in running:
            lane.result()
    return tuple(ordered)

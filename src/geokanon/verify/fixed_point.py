"""The ``fixed_point`` check: the passes reached a fixed point.

The rule, exactly as implemented
--------------------------------
``fixed_point``
    ``passes`` is a non-empty list of at most :data:`~geokanon.policy.MAX_PASSES`
    entries, the last with ``changed == 0``, equal to the audit's passes when
    the audit has them. Re-classifying at the published positions is implied
    by ``k_subjects``: every group-level record shares its position (and, with
    times, its published time bin: ``k_subjects`` counts every group x time bin
    class) with >= k-1 other subjects, so its isolation ratio is 0, in space
    alone or in space and time together.
"""

from __future__ import annotations

from collections.abc import Mapping

from geokanon.policy import MAX_PASSES
from geokanon.verify._reader import ReleaseReader
from geokanon.verify._results import CheckResult


def check_fixed_point(rel: ReleaseReader) -> CheckResult:
    passes = rel.manifest.get("passes")
    if not isinstance(passes, list) or not passes:
        return CheckResult("fixed_point", False, "manifest passes is missing or empty")
    if len(passes) > MAX_PASSES:
        return CheckResult(
            "fixed_point", False, f"{len(passes)} passes exceed the limit of {MAX_PASSES}"
        )
    last = passes[-1]
    changed = last.get("changed") if isinstance(last, Mapping) else None
    if isinstance(changed, bool) or not isinstance(changed, int):
        return CheckResult("fixed_point", False, "the last pass has no integer 'changed'")
    if changed != 0:
        return CheckResult(
            "fixed_point", False, f"the last of {len(passes)} passes changed {changed} labels"
        )
    audit_passes = rel.audit.get("passes")
    if audit_passes is not None and audit_passes != passes:
        return CheckResult("fixed_point", False, "manifest passes differ from the audit's")
    return CheckResult(
        "fixed_point",
        True,
        f"fixed point after {len(passes)} passes (last changed 0); group positions hold >= k",
    )

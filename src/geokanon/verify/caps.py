"""The ``tau`` and ``unit_cap`` checks: the suppressed shares, overall and per unit.

The rule, exactly as implemented
--------------------------------
``tau`` / ``unit_cap``
    Suppressed subjects are distinct subjects with at least one suppressed
    record (within the unit, for ``unit_cap``; a subject counts in every unit
    it has records in). Shares are compared as exact fractions against the
    shortest decimal that round-trips the published float (``0.01`` is
    exactly 1/100), so there is no rounding at all.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from geokanon.verify._derived import suppressed_subjects, unit_subjects
from geokanon.verify._reader import ReleaseReader, decimal_fraction
from geokanon.verify._results import CheckResult


def check_tau(rel: ReleaseReader) -> CheckResult:
    tau = decimal_fraction(rel.manifest.get("tau"), "tau")
    s, n = suppressed_subjects(rel)
    if n == 0:
        return CheckResult("tau", False, "the audit holds no subjects")
    share = Fraction(s, n)
    ok = share <= tau
    detail = f"{_share_text(s, n, rel.k)} suppressed (tau {float(tau):g})"
    return CheckResult("tau", ok, detail)


def _share_text(s: int, n: int, k: int) -> str:
    """A share that never states a count of 1..k-1 subjects."""
    if 0 < s < k:
        return f"<k of {n} subjects"
    return f"{s} of {n} subjects ({s / n:.4%})"


def check_unit_cap(rel: ReleaseReader) -> CheckResult:
    cap = decimal_fraction(rel.manifest.get("unit_cap"), "unit_cap")
    names, size, n_sup = unit_subjects(rel)
    present = np.flatnonzero(size > 0)
    breaches = [
        str(names[u]) for u in present.tolist() if Fraction(int(n_sup[u]), int(size[u])) > cap
    ]
    if breaches:
        return CheckResult(
            "unit_cap",
            False,
            f"{len(breaches)} of {present.size} units above the unit cap {float(cap):g}: "
            + ", ".join(breaches[:10])
            + (" ..." if len(breaches) > 10 else ""),
        )
    shares = n_sup[present] / size[present]
    worst = float(shares.max()) if shares.size else 0.0
    return CheckResult(
        "unit_cap",
        True,
        f"{present.size} units within the unit cap {float(cap):g} (worst {worst:.4g})",
    )

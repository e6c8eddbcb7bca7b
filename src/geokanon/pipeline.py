"""Run the stages on one machine: classification summaries now, the release later.

The library never prints: every function returns a result object that the
command line (or a notebook) renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from geokanon.classify import (
    CapVerdict,
    Classification,
    UnitTable,
    cap_verdict,
    classify,
    finite_or_none,
    unit_table,
)
from geokanon.io.read import PointTable
from geokanon.policy import Label, OutlierPolicy

__all__ = ["ClassifyResult", "classify_points"]


@dataclass(frozen=True)
class ClassifyResult:
    """First-pass classification of a point table, with per-unit suppression and cap verdicts."""

    policy: OutlierPolicy
    classification: Classification
    units: UnitTable
    verdict: CapVerdict
    n_records: int
    n_subjects: int

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
            "counts": self.counts,
            "suppressed_share": self.verdict.suppressed_share,
            "disposal_share": self.verdict.disposal_share,
            "per_unit": self.units.rows(),
            "worst_unit": self.verdict.worst_unit,
            "worst_unit_share": self.verdict.worst_unit_share,
            "units_over_cap": list(self.verdict.units_over_cap),
            "passes_global_cap": self.verdict.passes_global_cap,
            "passes_unit_cap": self.verdict.passes_unit_cap,
            "many_disposals": self.verdict.many_disposals,
            "iota_median": finite_or_none(float(np.median(finite))) if finite.size else None,
        }


def classify_points(table: PointTable, policy: OutlierPolicy) -> ClassifyResult:
    """Classify a point table and summarise suppression per unit (first pass only).

    Parameters
    ----------
    table
        Records in metres (see :func:`geokanon.io.read_points`).
    policy
        The outlier policy.

    Returns
    -------
    ClassifyResult

    Examples
    --------
    >>> import pandas as pd
    >>> from geokanon.io import table_from_frame
    >>> t = table_from_frame(pd.DataFrame({"x": [0.0, 1, 2, 900], "y": [0.0, 0, 0, 0]}), crs="x")
    >>> classify_points(t, OutlierPolicy(k=3, r_max_m=10.0)).counts["suppress"]
    1
    """
    cls = classify(table.x, table.y, policy, subjects=table.subjects, times=table.times)
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
    )

"""Who paid for the release: suppressed versus retained records, attribute by attribute.

Outliers are not random: they are rural, older, poorer or richer. For every kept
attribute the suppressed records are compared with the retained ones, globally
and per unit:

- numeric attributes: the Mann-Whitney rank test and the standardised
  difference of means;
- categorical attributes: the chi-square test of the contingency table.

A stratum with fewer than k suppressed subjects is reported as "too few to
compare" and no distribution is printed for it. A significant difference
(p < ``alpha``) becomes one plain sentence for the release notes. Everything is
deterministic (the tests have no random component).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import stats

__all__ = ["BiasFinding", "compare_suppressed"]


@dataclass(frozen=True)
class BiasFinding:
    """One comparison of suppressed against retained records.

    Attributes
    ----------
    attribute, stratum
        The attribute compared and the stratum (``all`` or a unit id).
    test
        ``mann-whitney``, ``chi-square`` or ``none`` (too few to compare).
    p_value
        The test's p-value (``None`` when not compared).
    effect
        Standardised difference of means (numeric) or Cramer's V (categorical).
    significant
        Whether ``p_value < alpha``.
    sentence
        The plain-language statement for the release notes.
    """

    attribute: str
    stratum: str
    test: str
    p_value: float | None
    effect: float | None
    significant: bool
    sentence: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready mapping."""
        return {
            "attribute": self.attribute,
            "stratum": self.stratum,
            "test": self.test,
            "p_value": self.p_value,
            "effect": self.effect,
            "significant": self.significant,
            "sentence": self.sentence,
        }


def _numeric(name: str, stratum: str, sup: pd.Series, ret: pd.Series, alpha: float) -> BiasFinding:
    a = sup.to_numpy(dtype=np.float64)
    b = ret.to_numpy(dtype=np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    pooled = np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2) if a.size > 1 and b.size > 1 else 0.0
    d = float((a.mean() - b.mean()) / pooled) if pooled > 0 else 0.0
    where = "" if stratum == "all" else f" in {stratum}"
    if p < alpha:
        direction = "higher" if np.median(a) > np.median(b) else "lower"
        sentence = (
            f"Suppressed records{where} have {direction} {name} than retained ones: median "
            f"{np.median(a):.4g} vs {np.median(b):.4g} (rank test p={p:.2g}, "
            f"standardised difference {d:+.2f})."
        )
    else:
        sentence = f"No significant difference in {name}{where} (rank test p={p:.2g})."
    return BiasFinding(name, stratum, "mann-whitney", p, d, p < alpha, sentence)


def _categorical(
    name: str, stratum: str, sup: pd.Series, ret: pd.Series, alpha: float
) -> BiasFinding:
    sup_t, ret_t = sup.astype(str), ret.astype(str)
    cats = sorted(set(sup_t) | set(ret_t))
    table = np.array(
        [[int((sup_t == c).sum()) for c in cats], [int((ret_t == c).sum()) for c in cats]]
    )
    where = "" if stratum == "all" else f" in {stratum}"
    if table.shape[1] < 2:
        return BiasFinding(
            name, stratum, "chi-square", None, None, False,
            f"{name}{where} takes one value only; nothing to compare.",
        )  # fmt: skip
    res = stats.chi2_contingency(table)
    p = float(res.pvalue)
    n = table.sum()
    v = float(np.sqrt(res.statistic / (n * (min(table.shape) - 1)))) if n else 0.0
    if p < alpha:
        share_s = table[0] / table[0].sum()
        share_r = table[1] / table[1].sum()
        i = int(np.argmax(share_s - share_r))
        sentence = (
            f"Suppressed records{where} differ in {name}: {cats[i]} makes up "
            f"{share_s[i]:.0%} of them vs {share_r[i]:.0%} of retained records "
            f"(chi-square p={p:.2g}, Cramer's V {v:.2f})."
        )
    else:
        sentence = f"No significant difference in {name}{where} (chi-square p={p:.2g})."
    return BiasFinding(name, stratum, "chi-square", p, v, p < alpha, sentence)


def compare_suppressed(
    attributes: pd.DataFrame,
    suppressed: NDArray[np.bool_],
    subjects: NDArray[np.int64],
    unit_labels: NDArray[np.object_],
    k: int,
    *,
    alpha: float = 0.01,
) -> list[BiasFinding]:
    """Compare suppressed and retained records on every attribute, globally and per unit.

    Parameters
    ----------
    attributes
        The kept attribute columns, one row per record.
    suppressed
        Boolean per record.
    subjects
        Subject code per record.
    unit_labels
        Unit id per record (strings).
    k
        Strata with fewer than k suppressed subjects are not compared.
    alpha
        Significance level.

    Returns
    -------
    list of BiasFinding
        Global findings first, then per unit in unit order.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> ages = pd.DataFrame({"age": np.r_[np.full(50, 70.0), np.arange(200.0) % 60]})
    >>> sup = np.r_[np.ones(50, bool), np.zeros(200, bool)]
    >>> f = compare_suppressed(ages, sup, np.arange(250), np.array(["u"] * 250, object), 5)
    >>> f[0].significant, f[0].sentence.split(":")[0]
    (True, 'Suppressed records have higher age than retained ones')
    """
    findings: list[BiasFinding] = []
    strata: list[tuple[str, NDArray[np.bool_]]] = [("all", np.ones(suppressed.size, dtype=bool))]
    units = np.asarray(unit_labels, dtype=object)
    for u in sorted(set(units[suppressed].astype(str))):
        strata.append((u, units.astype(str) == u))
    for stratum, m in strata:
        sup_m = m & suppressed
        n_sup_subj = int(np.unique(subjects[sup_m]).size)
        for col in attributes.columns:
            name = str(col)
            if n_sup_subj < k:
                where = "" if stratum == "all" else f" in {stratum}"
                findings.append(
                    BiasFinding(
                        name,
                        stratum,
                        "none",
                        None,
                        None,
                        False,
                        f"{name}{where}: too few suppressed records to compare (<k).",
                    )
                )
                continue
            series = attributes[col]
            sup_s = series[sup_m].dropna()
            ret_s = series[m & ~suppressed].dropna()
            if ret_s.empty or sup_s.empty:
                continue
            if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
                findings.append(_categorical(name, stratum, sup_s, ret_s, alpha))
            else:
                findings.append(_numeric(name, stratum, sup_s, ret_s, alpha))
    return findings

"""Complementary (secondary) suppression of the per-unit source totals.

With ``--totals complementary`` the release publishes, beside each unit's released
and suppressed counts, the unit's source record count ``T_u``. Every sensitive
figure (one resting on 1..k-1 subjects, published as ``<k``) must still admit every
value 1..k-1 given all published figures together (``holes``). Two kinds of units
withhold their total because of their own figures (primary suppressions):

* a unit whose suppressed count reads ``<k``: ``T_u - released_u`` is its
  suppressed mass (``withheld``);
* a unit of 1..k-1 subjects: its total is itself a sensitive figure (``<k``).

Those are not always enough. The published figures tie the units together (the
class sizes give the records pooled above unit level, the groups counted whole in
one unit shift records between units, the global suppressed figure where it is
published), so a lone hidden total can be the published sum minus the others. As
statistics offices do for tables (tau-ARGUS), further totals are then withheld
(secondary suppressions) so that every ``<k`` figure keeps its whole range,
withholding as few as possible:

1. start from the primary suppressions; the judge is the verifier's own linear
   system (:func:`geokanon.verify.hidden_ranges` over :func:`geokanon.verify.holes_system`);
2. while some ``<k`` figure is narrowed, withhold the published total that
   narrows them least, over all candidates (ties: the unit with fewer records,
   i.e. the smaller loss of information, then the unit id; above
   :data:`BEST_OF_MAX` candidates, the first that narrows them less);
3. prune: try publishing each secondary again, in the order chosen, and keep it
   published whenever every ``<k`` figure still holds its range;
4. the same again with integer programs (every value 1..k-1 solved for in
   integers), should an integer gap remain.

The programs run without a wall-clock limit, so the same figures always give the
same choice (releases are byte-identical). A withheld total protects others and owes
nothing of its own: it may be narrow.
When no choice of totals protects a figure (the hole is in figures other than the
totals), every total is withheld, which is what ``--totals released`` publishes,
and the verifier judges the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

LT_K = "<k"
WITHHELD = "withheld"
#: As the verifier's tolerance: a bound within this of 1 or k-1 holds it.
_EPS = 1e-6
#: Above this many candidate totals, each step takes the first (cheapest) total that
#: helps rather than the one that helps most (one program per candidate and step).
BEST_OF_MAX = 64

__all__ = ["ComplementaryTotals", "choose_complementary_totals"]


@dataclass(frozen=True)
class ComplementaryTotals:
    """The chosen ``source_total`` column and how it was reached.

    Attributes
    ----------
    totals
        One per unit row: the record count, ``"<k"`` (1..k-1 subjects) or ``"withheld"``.
    primary
        Totals hidden because of the unit's own figures (``<k`` suppressed, or 1..k-1
        subjects).
    secondary
        Totals withheld only to protect ``<k`` figures elsewhere.
    programs
        Evaluations of the linear system the choice took.
    """

    totals: tuple[int | str, ...]
    primary: int
    secondary: int
    programs: int


def _shortfall(ranges: Sequence[Any], k: int) -> float:
    """How far the ``<k`` figures fall short of 1..k-1 (0 when every one holds it)."""
    out = 0.0
    for h in ranges:
        if h.kind != LT_K:
            continue
        below, above = h.low - 1.0, (k - 1.0) - h.high
        out += (below if below > _EPS else 0.0) + (above if above > _EPS else 0.0)
        out += len(h.gaps)
    return out


def choose_complementary_totals(
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[int] | NDArray[np.int64],
    subjects: Sequence[int] | NDArray[np.int64],
    *,
    k: int,
    system: Mapping[str, Any],
) -> ComplementaryTotals:
    """Choose which unit source totals to publish, withhold or show as ``<k``.

    Parameters
    ----------
    rows
        The unit rows as the verifier reads them from ``units.csv`` (``unit``,
        ``released``, ``suppressed``, ``synthetic``, ``class_records``), without
        ``source_total``.
    records, subjects
        Each unit's source records and distinct subjects, aligned with ``rows``.
    k
        The release's k.
    system
        The other published figures, as :func:`geokanon.verify.holes_system` gives
        them for the release being written.

    Returns
    -------
    ComplementaryTotals

    Examples
    --------
    Unit ``a`` holds 3 people, all generalised to the area class of 4 records;
    ``b`` sent the fourth there. With ``b``'s and ``c``'s totals published, ``a``'s
    is 3 (the pooled 4 minus ``b``'s 1). Withholding ``c`` leaves ``a`` in 1..3;
    withholding ``b`` gives it 1..4 = 1..k-1:

    >>> rows = [{"unit": u, "released": rel, "suppressed": 0, "synthetic": 0,
    ...          "class_records": 0} for u, rel in (("a", 0), ("b", 20), ("c", 12))]
    >>> system = {"global_suppressed": 0, "own_subjects": True, "pooled_records": 4,
    ...           "groups_by_majority_unit": False}
    >>> chosen = choose_complementary_totals(rows, [3, 21, 12], [3, 21, 12], k=5,
    ...                                      system=system)
    >>> chosen.totals, chosen.primary, chosen.secondary
    (('<k', 'withheld', 12), 1, 1)
    """
    from geokanon.verify import hidden_ranges

    n = len(rows)
    base: list[int | str] = []
    primary = 0
    for i, r in enumerate(rows):
        if 0 < int(subjects[i]) < k:
            base.append(LT_K)
        elif r["suppressed"] == LT_K:
            base.append(WITHHELD)
        else:
            base.append(int(records[i]))
            continue
        primary += 1
    candidates = sorted(
        (i for i in range(n) if base[i] not in (LT_K, WITHHELD)),
        key=lambda i: (int(records[i]), str(rows[i]["unit"])),
    )
    programs = 0

    def score(withheld: frozenset[int], integer: bool) -> float:
        nonlocal programs
        programs += 1
        trial = [
            {**r, "source_total": WITHHELD if i in withheld else base[i]}
            for i, r in enumerate(rows)
        ]
        ranges = hidden_ranges(
            trial, k=k, exact=False, integer=integer, integer_seconds=None, **system
        )
        return _shortfall(ranges, k)

    chosen: list[int] = []
    if primary and k > 2:
        for integer in (False, True):
            before = len(chosen)
            current = score(frozenset(chosen), integer)
            while current > 0:
                best: tuple[float, int] | None = None
                for c in candidates:
                    if c in chosen:
                        continue
                    s = score(frozenset([*chosen, c]), integer)
                    if s < current and (best is None or s < best[0]):
                        best = (s, c)
                        if s == 0 or len(candidates) > BEST_OF_MAX:
                            break  # candidates come cheapest first
                if best is None:  # no total helps: the hole is elsewhere
                    chosen = list(candidates)
                    break
                chosen.append(best[1])
                current = best[0]
            if len(chosen) == len(candidates):
                break  # nothing more to withhold
            if len(chosen) == before:
                continue  # nothing added in this phase: nothing to prune
            for c in list(chosen):
                rest = frozenset(x for x in chosen if x != c)
                if score(rest, integer) == 0:
                    chosen.remove(c)
    totals = tuple(WITHHELD if i in set(chosen) else base[i] for i in range(n))
    return ComplementaryTotals(totals, primary, len(chosen), programs)

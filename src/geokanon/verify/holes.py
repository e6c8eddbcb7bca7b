"""The ``holes`` check: no hidden figure can be narrowed from the published ones.

The rule, exactly as implemented
--------------------------------
``holes``
    Every number of every release file is turned into one linear system: the
    ``units.csv`` rows, and the figures :func:`geokanon.published.collect` reads
    by the release format's declared schema from the manifest (counts, the
    passes by their ``scope``, rounded counts as intervals, the mask's record
    count, ...), the group and class tables, ``records.parquet``'s rows, and the
    notes' and report's tables and cards; any other number in the notes and the
    report must be a value the system holds, and a number in a field or column
    the format does not declare fails. A number 1..k-1 of their prose (and of the
    manifest's text fields) must also sit in a phrase of the writer
    (:data:`geokanon.published.SMALL_PHRASES`: a measurement, a parameter by name,
    "one" as a pronoun, a published count no disposal hides, a unit's name where
    the writer lists units), whatever value it equals: the check cannot tell what a
    number of prose counts, and 1 and k-1 are values of every release. The
    page's comments and shown attributes (``title``, ``alt``, ...) are prose; a
    table cell's sort key (``data-v``) must be the one its text gives, and no
    other ``data-*`` attribute is allowed; every ``<style>`` and ``<script>`` block
    is the format's (:data:`geokanon.published.REPORT_STYLE`, ``REPORT_SCRIPT``) and
    no element has a ``style`` or ``on...`` attribute. Every
    hidden cell (``<k``, ``withheld``) is bounded with
    :func:`scipy.optimize.linprog` (min and max). See
    :func:`hidden_ranges` for the variables and identities.
    A ``<k`` cell (a sensitive figure: one resting on 1..k-1 subjects) fails
    when its feasible range does not contain both 1 and k-1 (so with k = 2 a
    ``<k`` cell always fails: it reveals exactly 1), and when some value
    1..k-1 has no integer solution (:func:`scipy.optimize.milp`: aggregate
    programs, then one per value left, at most :data:`INTEGER_CHECK_MAX`; the
    detail line says when values were left to the LP range). A ``withheld``
    figure is a complementary (secondary) suppression: it owes nothing of its
    own, however narrow its range. Mutually inconsistent published figures
    fail too. An attacker who can place groups inside units from their
    geometry is not modelled (per-unit group shifts are free, summing to 0).
    ``release.gpkg`` adds no figure: a layer with a column its file lacks, or a
    ``units`` cell that differs from ``units.csv``, fails (:mod:`.gpkg`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from geokanon.policy import MAX_PASSES
from geokanon.published import Figure, Published
from geokanon.verify._derived import unit_rows
from geokanon.verify._reader import LESS_THAN_K, WITHHELD, ReleaseReader, cell_value, text_file
from geokanon.verify._results import CheckResult, Unreadable

_EPS = 1e-6

#: Integer programs :func:`hidden_ranges` solves at most to show that every value
#: 1..k-1 of every ``<k`` cell has an integer solution (beyond, the LP range only).
INTEGER_CHECK_MAX = 256

#: Seconds :func:`hidden_ranges` spends at most on integer programs (then as above).
INTEGER_CHECK_S = 120.0


@dataclass(frozen=True)
class HiddenRange:
    """Feasible range of one hidden published figure.

    Attributes
    ----------
    cell
        Which figure (``"unit U suppressed"``, ``"unit U source_total"``,
        ``"global suppressed"``).
    kind
        ``"<k"`` or ``"withheld"``.
    low, high
        Bounds of the LP relaxation (``high`` may be ``inf``).
    """

    cell: str
    kind: str
    low: float
    high: float
    #: values in 1..k-1 inside ``[low, high]`` that no integer solution reaches
    gaps: tuple[int, ...] = ()
    #: values in 1..k-1 not solved for in integers (beyond :data:`INTEGER_CHECK_MAX`
    #: programs or :data:`INTEGER_CHECK_S` seconds): for them the LP range stands
    unsolved: int = 0

    def problem(self, k: int) -> str | None:
        """Why this range discloses too much, or ``None`` when it is safe.

        Only a ``<k`` cell owes anything: it must admit every value 1..k-1. A
        ``withheld`` figure protects others (a secondary suppression) and owes
        nothing of its own.
        """
        if self.kind != LESS_THAN_K:
            return None
        if k <= 2:
            return f"{self.cell}: with k=2 '<k' means exactly 1"
        if self.low > 1 + _EPS or self.high < k - 1 - _EPS:
            return f"{self.cell}: '<k' narrowed to [{_fmt(self.low)}, {_fmt(self.high)}]"
        if self.gaps:
            shown = ", ".join(map(str, self.gaps))
            return f"{self.cell}: '<k' cannot be {shown} in integers"
        return None


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4g}"


def hidden_ranges(
    units: Sequence[Mapping[str, Any]],
    *,
    k: int,
    global_suppressed: int | str | None,
    own_subjects: bool,
    pooled_records: int = 0,
    pooled_synthetic_max: int = 0,
    synthetic_total: int | None = None,
    record_bound: int | None = None,
    groups_by_majority_unit: bool = False,
    total_records: int | None = None,
    released_records: int | None = None,
    exact: bool = True,
    figures: Sequence[Figure] = (),
    integer: bool = True,
    integer_seconds: float | None = INTEGER_CHECK_S,
) -> list[HiddenRange]:
    """Feasible ranges of every hidden figure, given all published figures together.

    Variables, per unit ``u``:

    * ``s_u`` suppressed subjects: fixed when published as an integer, ``[1, k-1]``
      for ``<k``, ``[0, inf)`` for ``withheld``;
    * ``r_u`` suppressed records: ``r_u = s_u`` when records are their own
      subjects, else ``s_u <= r_u <= N s_u``;
    * ``g_u`` subjects generalised beyond the unit (``generalised_up``, when
      published; bounds as for ``s_u``) and ``p_u`` their records (``p_u = g_u``,
      or ``g_u <= p_u <= N g_u``; free ``>= 0`` when ``generalised_up`` is not
      published);
    * ``T_u`` the source total (fixed, or ``[0, inf)`` when withheld; ``<k``: the
      unit rests on ``sigma_u`` in ``[1, k-1]`` subjects, ``s_u <= sigma_u``, and
      ``T_u`` are their records, as ``r_u`` are of ``s_u``);
    * ``d_u`` the unit's own group-level records minus the group records counted
      in it (0 when groups are counted by their members' units; free with
      ``d_u >= -(released_u - C_u)`` and ``sum_u d_u = 0`` when every group is
      counted whole in its majority unit).

    Identities:

    * ``T_u = released_u - synthetic_u + d_u + r_u + p_u`` for every unit with a
      ``source_total`` column, where a unit's ``synthetic_u`` published as ``<k`` is
      its suppressed subjects ``s_u`` (the manifest's placement rule: one synthetic
      record per suppressed subject of a unit that has a class of its own);
    * ``sum_u synthetic_u = synthetic_total`` when that total is published; and,
      published or not, the format's ``synthetic`` quantity (the published records
      minus the real ones) is the units' synthetic counts plus at most the pooled
      stand-ins;
    * ``pooled_records - pooled_synthetic_max <= sum_u p_u <= pooled_records``;
    * ``sum_u r_u = R`` when the global suppressed record count ``R`` is a number,
      and ``sum_u r_u = N - released`` when the input's record count ``N`` and the
      real records published at group or class level are known;
    * ``sum_u T_u = N`` when ``N`` is known;
    * with a global ``<k``: the global suppressed subjects ``S`` lie in
      ``[1, k-1]``, with ``S = sum_u s_u`` when records are their own subjects,
      else ``max_u s_u <= S <= sum_u s_u``.

    Parameters
    ----------
    units
        One mapping per unit with ``unit`` (id), ``released`` (int),
        ``suppressed`` (int, ``"<k"`` or ``"withheld"``) and optional
        ``generalised_up`` (int or ``"<k"``), ``source_total`` (int, ``"<k"`` or
        ``"withheld"``), ``synthetic`` (int or ``"<k"``) and ``class_records`` (``C_u``, the
        records of the unit's own class included in ``released``).
    k
        The release's k.
    global_suppressed
        The manifest's ``counts.suppressed``: an int, ``"<k"`` or None (withheld).
    own_subjects
        True when there is no subject column (every record its own subject).
    pooled_records
        Records in classes above unit level (parent and area classes).
    pooled_synthetic_max
        Upper bound of synthetic records among those.
    synthetic_total
        The published number of synthetic records, when it is a number.
    record_bound
        An upper bound of records per unit (``N`` above); default: unbounded.
    groups_by_majority_unit
        ``released`` counts every group whole in one unit (``groups.parquet``
        ``unit``), so a unit's own group-level records are not published.
    total_records
        The input's record count ``N`` when it is published (the first pass's
        ``records`` in the manifest).
    released_records
        Real records published at group or class level (the manifest's grouped,
        merged and generalised counts).
    exact
        Bound every hidden cell with its own pair of programs. When False, two
        aggregate programs first find an interval inside every cell's range, and
        only cells that interval does not already clear are bounded exactly: the
        ranges of safe cells are then inner intervals, those of unsafe cells exact.
    figures
        Published figures over the release's aggregate quantities (see
        :mod:`geokanon.published`), each a constraint ``low <= sum(c q) <= high``;
        a ``hidden`` one is a sensitive figure of its own. Every quantity is a count
        (``>= 0``); ``suppressed_records`` is ``sum_u r_u`` and, when the units
        publish a ``source_total`` column, ``records`` is ``sum_u T_u``.
    integer
        Also solve, in integers, for every value 1..k-1 of every ``<k`` cell whose
        LP range holds them (aggregate integer programs first, then at most
        :data:`INTEGER_CHECK_MAX` programs for single values); the values with no
        integer solution are the range's ``gaps``, those not reached ``unsolved``.
    integer_seconds
        Wall-clock budget of the integer programs; None: none (the outcome then
        depends on the figures only, as the release writer needs for byte-identical
        releases).

    Returns
    -------
    list of HiddenRange
        One per hidden figure.

    Raises
    ------
    ValueError
        The published figures are mutually inconsistent (no solution).

    Examples
    --------
    Two hidden units whose sum is published as 2, with k = 5: both are pinned to 1.

    >>> rows = [{"unit": "a", "released": 9, "suppressed": "<k"},
    ...         {"unit": "b", "released": 7, "suppressed": "<k"}]
    >>> [(h.low, h.high) for h in hidden_ranges(rows, k=5, global_suppressed=2,
    ...                                         own_subjects=True)]
    [(1.0, 1.0), (1.0, 1.0)]
    """
    names: list[str] = []
    lo: list[float] = []
    hi: list[float] = []

    def var(name: str, low: float, high: float) -> int:
        names.append(name)
        lo.append(low)
        hi.append(high)
        return len(names) - 1

    hidden: list[tuple[str, str, int]] = []
    eq_rows: list[dict[int, float]] = []
    eq_rhs: list[float] = []
    ub_rows: list[dict[int, float]] = []
    ub_rhs: list[float] = []
    big = float(record_bound) if record_bound is not None else None

    def subject_cell(label: str, value: object) -> int:
        if value == LESS_THAN_K:
            i = var(label, 1.0, float(k - 1))
            hidden.append((label, LESS_THAN_K, i))
        elif value == WITHHELD:
            i = var(label, 0.0, math.inf)
            hidden.append((label, WITHHELD, i))
        else:
            i = var(label, float(value), float(value))  # type: ignore[arg-type]
        return i

    def records_of(label: str, si: int) -> int:
        if own_subjects:
            return si
        ri = var(label, 0.0, math.inf)
        ub_rows.append({si: 1.0, ri: -1.0})  # subjects <= records
        ub_rhs.append(0.0)
        if big is not None:
            ub_rows.append({ri: 1.0, si: -big})  # records <= N subjects
            ub_rhs.append(0.0)
        return ri

    has_totals = any(u.get("source_total") is not None for u in units)
    has_up = any(u.get("generalised_up") is not None for u in units)
    s_idx: list[int] = []
    r_idx: list[int] = []
    p_idx: list[int] = []
    d_idx: list[int] = []
    t_idx: list[int] = []
    syn_row: dict[int, float] = {}
    syn_const = 0
    for u in units:
        uid = str(u["unit"])
        si = subject_cell(f"unit {uid} suppressed", u["suppressed"])
        s_idx.append(si)
        ri = records_of(f"unit {uid} suppressed records", si)
        r_idx.append(ri)
        syn_v = u.get("synthetic", 0)
        syn_hidden = syn_v == LESS_THAN_K
        if syn_hidden:
            _add(syn_row, si, 1.0)  # a hidden synthetic count is the unit's s_u
        else:
            syn_const += int(syn_v or 0)
        pi: int | None = None
        g = u.get("generalised_up")
        if g is not None:
            gi = subject_cell(f"unit {uid} generalised_up", g)
            pi = records_of(f"unit {uid} generalised_up records", gi)
        elif has_totals and (pooled_records > 0 or has_up):
            pi = var(f"unit {uid} pooled", 0.0, math.inf)
        if pi is not None:
            p_idx.append(pi)
        if not has_totals:
            continue
        t = u.get("source_total")
        if t == WITHHELD:
            ti = var(f"unit {uid} source_total", 0.0, math.inf)
            hidden.append((f"unit {uid} source_total", WITHHELD, ti))
        elif t == LESS_THAN_K:
            # the unit rests on 1..k-1 subjects: its subjects are the sensitive figure
            ui = subject_cell(f"unit {uid} source_total", LESS_THAN_K)
            ti = records_of(f"unit {uid} source_total records", ui)
            ub_rows.append({si: 1.0, ui: -1.0})  # suppressed subjects <= the unit's
            ub_rhs.append(0.0)
        elif t is None:
            ti = var(f"unit {uid} source_total", 0.0, math.inf)
        else:
            ti = var(f"unit {uid} source_total", float(t), float(t))
        t_idx.append(ti)
        row: dict[int, float] = {ti: 1.0}
        _add(row, ri, -1.0)
        if pi is not None:
            _add(row, pi, -1.0)
        released = int(u["released"])
        if groups_by_majority_unit:
            group_part = released - int(u.get("class_records", 0) or 0)
            di = var(f"unit {uid} group shift", -float(max(group_part, 0)), math.inf)
            d_idx.append(di)
            _add(row, di, -1.0)
        if syn_hidden:
            _add(row, si, 1.0)  # T_u - ... + s_u = released_u
            eq_rhs.append(float(released))
        else:
            eq_rhs.append(float(released - int(syn_v or 0)))
        eq_rows.append(row)
    if d_idx:
        eq_rows.append(dict.fromkeys(d_idx, 1.0))
        eq_rhs.append(0.0)
    if synthetic_total is not None and syn_row:
        eq_rows.append(syn_row)
        eq_rhs.append(float(synthetic_total - syn_const))
    if p_idx:
        ub_rows.append(dict.fromkeys(p_idx, 1.0))
        ub_rhs.append(float(pooled_records))
        ub_rows.append(dict.fromkeys(p_idx, -1.0))
        ub_rhs.append(-float(pooled_records - pooled_synthetic_max))
    if total_records is not None and t_idx:
        eq_rows.append(dict.fromkeys(t_idx, 1.0))  # the unit totals add up to the input
        eq_rhs.append(float(total_records))
    if total_records is not None and released_records is not None:
        row = {}
        for ri in r_idx:
            _add(row, ri, 1.0)
        eq_rows.append(row)  # input - released = suppressed records
        eq_rhs.append(float(total_records - released_records))
    if isinstance(global_suppressed, int):
        row = {}
        for ri in r_idx:
            _add(row, ri, 1.0)
        eq_rows.append(row)
        eq_rhs.append(float(global_suppressed))
    elif global_suppressed == LESS_THAN_K:
        gi = var("global suppressed", 1.0, float(k - 1))
        hidden.append(("global suppressed", LESS_THAN_K, gi))
        row = {gi: 1.0}
        for si in s_idx:
            _add(row, si, -1.0)
        if own_subjects:
            eq_rows.append(row)
            eq_rhs.append(0.0)
        else:
            ub_rows.append(row)  # S <= sum s_u
            ub_rhs.append(0.0)
            for si in s_idx:
                ub_rows.append({si: 1.0, gi: -1.0})  # s_u <= S
                ub_rhs.append(0.0)
    qvar: dict[str, int] = {}

    def quantity(name: str) -> int:
        if name not in qvar:
            qvar[name] = var(name, 0.0, math.inf)
        return qvar[name]

    hidden_q: set[int] = set()
    for f in figures:
        row = {}
        for q, coef in f.terms:
            _add(row, quantity(q), coef)
        if f.hidden and len(f.terms) == 1 and qvar[f.terms[0][0]] not in hidden_q:
            hidden_q.add(qvar[f.terms[0][0]])
            hidden.append((f.where, LESS_THAN_K, qvar[f.terms[0][0]]))
        if f.low == f.high:
            eq_rows.append(row)
            eq_rhs.append(float(f.low))
            continue
        if math.isfinite(f.high):
            ub_rows.append(row)
            ub_rhs.append(float(f.high))
        if math.isfinite(f.low):
            ub_rows.append({j: -v for j, v in row.items()})
            ub_rhs.append(-float(f.low))
    if "suppressed_records" in qvar and r_idx:
        row = {qvar["suppressed_records"]: 1.0}
        for ri in r_idx:
            _add(row, ri, -1.0)
        eq_rows.append(row)  # the units' suppressed records add up to the suppressed total
        eq_rhs.append(0.0)
    if "records" in qvar and t_idx:
        row = {qvar["records"]: 1.0}
        for ti in t_idx:
            _add(row, ti, -1.0)
        eq_rows.append(row)  # the unit totals add up to the input
        eq_rhs.append(0.0)
    if "synthetic" in qvar and syn_row:
        # The synthetic records, however the manifest shows their total, are the published
        # records minus the real ones: the units' hidden synthetic counts (their s_u) add
        # up to them, less the units' published ones and at most the pooled stand-ins.
        row = {qvar["synthetic"]: 1.0}
        for si, coef in syn_row.items():
            _add(row, si, -coef)
        ub_rows.append(row)
        ub_rhs.append(float(syn_const + pooled_synthetic_max))
        ub_rows.append({j: -v for j, v in row.items()})
        ub_rhs.append(-float(syn_const))
    if not hidden:
        return []
    n = len(names)
    from scipy.optimize import linprog  # imported only when there is something to bound
    from scipy.sparse import csr_matrix

    def matrix(rows: list[dict[int, float]]) -> csr_matrix | None:
        if not rows:
            return None
        ri = [i for i, r in enumerate(rows) for _ in r]
        ci = [j for r in rows for j in r]
        vals = [v for r in rows for v in r.values()]
        return csr_matrix((vals, (ri, ci)), shape=(len(rows), n))

    a_eq, a_ub = matrix(eq_rows), matrix(ub_rows)
    b_eq = np.asarray(eq_rhs) if eq_rows else None
    b_ub = np.asarray(ub_rhs) if ub_rows else None
    bounds = [(lo[i], None if math.isinf(hi[i]) else hi[i]) for i in range(n)]

    def solve(c: NDArray[np.float64], bnds: Sequence[tuple[float, float | None]]) -> Any:
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bnds)
        if res.status == 2:
            raise ValueError("the published figures are mutually inconsistent")
        if res.status not in (0, 3):
            raise ValueError(f"the linear program failed ({res.message})")
        return res

    # Two aggregate programs give, by convexity, an interval inside every cell's range
    # (its values at a lowest and at a highest feasible point); only cells whose witness
    # interval is not already wide enough are bounded one by one.
    witness: dict[int, tuple[float, float]] = {}
    if not exact:
        idx_all = [i for _, _, i in hidden]
        capped = [(b[0], b[1] if b[1] is not None else b[0] + 1e9) for b in bounds]
        c = np.zeros(n)
        c[idx_all] = 1.0
        low = solve(c, bounds)
        high = solve(-c, capped)
        if low.status == 0 and high.status == 0:
            for i in idx_all:
                witness[i] = (float(low.x[i]), float(high.x[i]))
            lt_cells = [i for _, kd, i in hidden if kd == LESS_THAN_K]
            _more_witnesses(witness, lt_cells, k, lambda c: solve(c, bounds), n)
    out: list[HiddenRange] = []
    for label, kind, idx in hidden:
        if idx in witness:
            inner = HiddenRange(label, kind, *witness[idx])
            if inner.problem(k) is None:
                out.append(inner)
                continue
        ends: list[float] = []
        for sign in (1.0, -1.0):
            c = np.zeros(n)
            c[idx] = sign
            res = solve(c, bounds)
            if res.status == 3:
                ends.append(math.inf if sign < 0 else -math.inf)
            else:
                ends.append(float(res.x[idx]))
        out.append(HiddenRange(label, kind, ends[0], ends[1]))
    if not integer or k <= 2:
        return out
    # The LP relaxation's range of a cell is an interval (the projection of a convex
    # set), but an integer value inside it may have no integer solution: each value
    # 1..k-1 of each '<k' cell is solved for in integers. Every solution found crosses
    # off the values it gives all cells; first the cells' sums are minimised and
    # maximised in integers (round after round over the cells still short, as for the
    # LP), then each value left is solved for alone, up to INTEGER_CHECK_MAX programs.
    todo = {
        idx: set(range(1, k))
        for (_, kind, idx), h in zip(hidden, out, strict=True)
        if kind == LESS_THAN_K and h.problem(k) is None
    }
    if not todo:
        return out
    from scipy.optimize import Bounds, LinearConstraint, milp

    constraints = []
    if a_eq is not None:
        constraints.append(LinearConstraint(a_eq, b_eq, b_eq))
    if a_ub is not None:
        constraints.append(LinearConstraint(a_ub, -np.inf, b_ub))
    low_b, high_b = np.asarray(lo), np.asarray(hi)
    every = np.ones(n)

    deadline = math.inf if integer_seconds is None else time.monotonic() + integer_seconds
    infeasible = False  # of the last program

    def limit() -> dict[str, float]:
        return {} if math.isinf(deadline) else {"time_limit": max(deadline - time.monotonic(), 0.1)}

    def integer_point(
        c: NDArray[np.float64], lb: NDArray[np.float64], ub: NDArray[np.float64]
    ) -> NDArray[np.float64] | None:
        nonlocal infeasible
        res = milp(
            c, integrality=every, bounds=Bounds(lb, ub), constraints=constraints,
            options=limit(),
        )  # fmt: skip
        infeasible = res.status == 2
        return res.x if res.status == 0 and res.x is not None else None

    def cross_off(x: NDArray[np.float64]) -> None:
        for other, rest in todo.items():
            rest.discard(round(float(x[other])))

    def nearest_point(short: list[int], value: int) -> NDArray[np.float64] | None:
        """An integer point with the cells ``short`` as near ``value`` as they can be
        together: minimise the sum of extra variables ``e_j >= |x_j - value|``."""
        from scipy.sparse import csr_matrix, hstack

        m = len(short)
        j = np.arange(m)
        both = np.r_[j, j + m]
        cells = csr_matrix(
            (np.r_[np.ones(m), -np.ones(m)], (both, np.r_[short, short])), (2 * m, n)
        )
        extra = csr_matrix((-np.ones(2 * m), (both, np.r_[j, j])), (2 * m, m))
        cons = [
            LinearConstraint(
                hstack([cells, extra]), -np.inf, np.r_[np.full(m, value), np.full(m, -value)]
            )
        ]
        for con in constraints:
            pad = csr_matrix((con.A.shape[0], m))
            cons.append(LinearConstraint(hstack([con.A, pad]), con.lb, con.ub))
        res = milp(
            np.r_[np.zeros(n), np.ones(m)], integrality=np.r_[every, np.zeros(m)],
            bounds=Bounds(np.r_[low_b, np.zeros(m)], np.r_[high_b, np.full(m, np.inf)]),
            constraints=cons, options=limit(),
        )  # fmt: skip
        return res.x[:n] if res.status == 0 and res.x is not None else None

    for value in range(1, k):
        short = [i for i, rest in todo.items() if value in rest]
        while len(short) > 1 and time.monotonic() < deadline:
            if value in (1, k - 1):  # the cells' bounds: their sum is enough
                c = np.zeros(n)
                c[short] = 1.0 if value == 1 else -1.0
                x = integer_point(c, low_b, high_b)
            else:
                x = nearest_point(short, value)
            if x is None:
                break
            cross_off(x)
            still = [i for i in short if value in todo[i]]
            if len(still) == len(short):
                break
            short = still
    gaps: dict[int, list[int]] = {idx: [] for idx in todo}
    unsolved: dict[int, int] = dict.fromkeys(todo, 0)
    solves = 0
    for idx, values in todo.items():
        while values:
            v = min(values)
            values.discard(v)
            if solves >= INTEGER_CHECK_MAX or time.monotonic() >= deadline:
                unsolved[idx] += 1
                continue
            solves += 1
            lb, ub = low_b.copy(), high_b.copy()
            lb[idx] = ub[idx] = v
            x = integer_point(np.zeros(n), lb, ub)
            if x is not None:
                cross_off(x)
            elif infeasible:
                gaps[idx].append(v)
            else:  # not decided in time: the LP range stands
                unsolved[idx] += 1
    return [
        dataclasses.replace(h, gaps=tuple(gaps[i]), unsolved=unsolved[i]) if i in todo else h
        for (_, _, i), h in zip(hidden, out, strict=True)
    ]


def _more_witnesses(
    witness: dict[int, tuple[float, float]],
    cells: Sequence[int],
    k: int,
    solve: Callable[[NDArray[np.float64]], Any],
    n: int,
) -> None:
    """Widen the witness intervals of ``<k`` cells the two aggregate points left short.

    The ``<k`` cells not yet seen at 1 are minimised together (their sum), then those
    not yet seen at k-1 maximised together, round after round over the cells still
    short, while a round reaches a new one: every optimum is a feasible point, so a
    cell it puts at 1 (or k-1) can take that value. The cells left short are bounded
    one by one afterwards, as before. One program per round instead of two per cell.
    """
    for sign, reached in ((1.0, lambda v: v <= 1 + _EPS), (-1.0, lambda v: v >= k - 1 - _EPS)):
        side = 0 if sign > 0 else 1
        todo = [i for i in cells if not reached(witness[i][side])]
        while len(todo) > 1:
            c = np.zeros(n)
            c[todo] = sign
            res = solve(c)
            if res.status != 0:
                return
            done = [i for i in todo if reached(float(res.x[i]))]
            if not done:
                break
            for i in done:
                lo_w, hi_w = witness[i]
                v = float(res.x[i])
                witness[i] = (min(lo_w, v), hi_w) if side == 0 else (lo_w, max(hi_w, v))
            todo = [i for i in todo if not reached(float(res.x[i]))]


def _add(row: dict[int, float], j: int, v: float) -> None:
    row[j] = row.get(j, 0.0) + v


def published_input_size(manifest: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(input records from the first pass's ``records``, grouped + merged + generalised)."""
    passes = manifest.get("passes")
    total = None
    if isinstance(passes, list) and passes and isinstance(passes[0], Mapping):
        n = passes[0].get("records")
        total = n if isinstance(n, int) and not isinstance(n, bool) else None
    counts = manifest.get("counts")
    released = None
    if isinstance(counts, Mapping):
        parts = [counts.get(d) for d in ("grouped", "merged", "generalised")]
        ints = [v for v in parts if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(parts):
            released = sum(ints)
    return total, released


#: Columns of units.csv, groups.parquet and classes.parquet the release format declares
#: (any other column holding numbers is a figure the holes system cannot account for).
UNIT_FILE_COLUMNS = frozenset({"unit", "released", "suppressed", "generalised_up",
                               "source_total", "synthetic"})  # fmt: skip


GROUP_FILE_COLUMNS = frozenset(
    {"group_id", "n_records", "x", "y", "radius_m", "unit", "geometry", "bbox"}
)


CLASS_FILE_COLUMNS = frozenset({"class_id", "level", "unit", "n_records", "geometry", "bbox"})


def _undeclared_columns(name: str, frame: pd.DataFrame, declared: frozenset[str]) -> list[str]:
    out = []
    for col in frame.columns:
        if str(col) in declared:
            continue
        values = frame[col]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if not numeric:
            text = values.astype(str).str.strip()
            numeric = bool(text.str.fullmatch(r"[+-]?\d[\d,]*(\.\d+)?|<k").any())
        if numeric:
            out.append(
                f"{name} column {str(col)[:24]!r}: a figure the release format does not declare"
            )
    return out


def holes_system_and_published(
    *,
    k: int,
    manifest: Mapping[str, Any],
    rows: list[dict[str, Any]],
    groups: pd.DataFrame | None,
    classes: pd.DataFrame,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    records_rows: int | None = None,
    notes: str | None = None,
    report: str | None = None,
) -> tuple[dict[str, Any], Published]:
    """The keyword arguments of :func:`hidden_ranges` besides the unit rows, and what
    :func:`geokanon.published.collect` read from every file given."""
    from geokanon.published import collect

    cells: dict[tuple[str, str], object] = {}
    for r in rows:
        for col in ("released", "suppressed", "generalised_up", "source_total", "synthetic"):
            if r.get(col) is not None:
                cells[(r["unit"], col)] = r[col]
    pooled = 0
    class_total = None
    if len(classes) and "n_records" in classes:
        sizes = pd.to_numeric(classes["n_records"])
        class_total = int(sizes.sum())
        if "level" in classes:
            pooled = int(sizes[classes["level"].astype(str) != "unit"].sum())
    elif not len(classes):
        class_total = 0
    group_total = None
    if groups is not None and "n_records" in groups:
        group_total = int(pd.to_numeric(groups["n_records"]).sum())
    pub = collect(
        manifest, k=k, unit_cells=cells, group_records=group_total, class_records=class_total,
        records_rows=records_rows, notes=notes, report=report,
        extra_known=[MAX_PASSES, len(rows)],
    )  # fmt: skip
    counts = manifest.get("counts") or {}
    g = cell_value(counts.get("suppressed")) if isinstance(counts, Mapping) else None
    if g == WITHHELD or isinstance(g, int):
        g = LESS_THAN_K if pub.global_less_than_k else None  # an int is one of the figures
    syn = manifest.get("synthetic") or {}
    syn = syn if isinstance(syn, Mapping) else {}
    raw_total = cell_value(syn.get("total", 0))
    syn_total = raw_total if isinstance(raw_total, int) else None
    raw_pooled = cell_value(syn.get("pooled"))
    # Synthetic records above unit level: as published, else at most all of them.
    pooled_syn = (
        raw_pooled if isinstance(raw_pooled, int) else (pooled if syn_total is None else syn_total)
    )
    system = {
        "global_suppressed": g,
        "own_subjects": own_subjects,
        "pooled_records": pooled,
        "pooled_synthetic_max": min(pooled_syn, pooled),
        "synthetic_total": syn_total,
        "record_bound": record_bound,
        "groups_by_majority_unit": groups_by_majority_unit,
        "figures": pub.figures,
    }
    return system, pub


def holes_system(
    manifest: Mapping[str, Any],
    classes: pd.DataFrame,
    *,
    k: int,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    groups: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The figures besides ``units.csv`` that :func:`hidden_ranges` combines with it.

    The same system ``holes`` builds (every figure the manifest and the group and class
    tables publish, by the format's declared schema), for the release writer, which
    chooses its complementary suppressions against it before the notes and the report
    exist (their tables repeat figures of these files; ``holes`` reads them too).

    Parameters
    ----------
    manifest
        The manifest (``counts``, ``synthetic``, ``passes``, ... are read).
    classes
        ``classes.parquet`` (``level``, ``n_records``).
    k
        The release's k.
    own_subjects, record_bound, groups_by_majority_unit
        As for :func:`hidden_ranges`.
    groups
        ``groups.parquet`` (``n_records``), when known.

    Returns
    -------
    dict
        Keyword arguments of :func:`hidden_ranges` (all but ``units``, ``k``,
        ``exact`` and ``integer``).
    """
    system, _ = holes_system_and_published(
        k=k,
        manifest=manifest,
        rows=[],
        groups=groups,
        classes=classes,
        own_subjects=own_subjects,
        record_bound=record_bound,
        groups_by_majority_unit=groups_by_majority_unit,
    )
    return system


def holes_check(
    *,
    k: int,
    manifest: Mapping[str, Any],
    rows: list[dict[str, Any]],
    units_table: pd.DataFrame,
    groups: pd.DataFrame | None,
    classes: pd.DataFrame,
    own_subjects: bool,
    record_bound: int | None,
    groups_by_majority_unit: bool,
    records_rows: int | None,
    notes: str | None,
    report: str | None,
) -> CheckResult:
    """``holes`` over every figure of every release file (both verifiers run this).

    ``rows`` are the units.csv rows as :func:`hidden_ranges` takes them; the other
    files' figures are read by :func:`geokanon.published.collect`.
    """
    problems = _undeclared_columns("units.csv", units_table, UNIT_FILE_COLUMNS)
    if groups is not None:
        problems += _undeclared_columns("groups.parquet", groups, GROUP_FILE_COLUMNS)
    problems += _undeclared_columns("classes.parquet", classes, CLASS_FILE_COLUMNS)
    system, pub = holes_system_and_published(
        k=k,
        manifest=manifest,
        rows=rows,
        groups=groups,
        classes=classes,
        own_subjects=own_subjects,
        record_bound=record_bound,
        groups_by_majority_unit=groups_by_majority_unit,
        records_rows=records_rows,
        notes=notes,
        report=report,
    )
    problems += pub.problems
    for (unit, col), value in pub.unit_values.items():
        for r in rows:
            if r["unit"] == unit:
                r[col] = value
    try:
        ranges = hidden_ranges(rows, k=k, exact=False, **system)
    except ValueError as exc:
        return CheckResult("holes", False, "; ".join([*problems, f"{exc} (see counts)"][:6]))
    narrowed = [p for h in ranges if (p := h.problem(k)) is not None]
    if narrowed:
        problems = [
            f"{len(narrowed)} of {len(ranges)} hidden figures recoverable: " + narrowed[0],
            *narrowed[1:],
            *problems,
        ]
    if problems:
        return CheckResult(
            "holes", False, "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "")
        )
    return CheckResult(
        "holes",
        True,
        holes_summary(ranges, k, len(rows))
        + f"; {len(pub.figures)} published figures of the manifest, notes, report and tables",
    )


def holes_summary(ranges: Sequence[HiddenRange], k: int, n_rows: int) -> str:
    """The ``holes`` detail line of a passing system."""
    sensitive = sum(h.kind == LESS_THAN_K for h in ranges)
    unsolved = sum(h.unsolved for h in ranges)
    how = (
        "in integers"
        if not unsolved
        else f"in integers but {unsolved} values, LP range only: integer programs capped"
    )
    return (
        f"{sensitive} '<k' figures keep every value 1..k-1 ({how}) given the {n_rows} unit "
        f"rows and totals; {len(ranges) - sensitive} withheld figures owe nothing of their own"
    )


def release_system_inputs(rel: ReleaseReader) -> dict[str, Any]:
    """The arguments of :func:`holes_system_and_published` a written release gives (its tables, unit
    rows and records.parquet's row count), shared by ``holes`` and ``no_leak``."""
    path = rel.rel / "records.parquet"
    rows_n = None
    if path.is_file():
        try:
            rows_n = int(pq.ParquetFile(path).metadata.num_rows)
        except (OSError, pa.ArrowException):
            raise Unreadable("records.parquet is unreadable") from None
    return {
        "k": rel.k,
        "manifest": rel.manifest,
        "rows": unit_rows(rel),
        "groups": rel.groups,
        "classes": rel.classes,
        "own_subjects": rel.own_subjects,
        "record_bound": rel.n_audit,
        "groups_by_majority_unit": "unit" in rel.groups.columns,
        "records_rows": rows_n,
    }


def check_holes(rel: ReleaseReader) -> CheckResult:
    result = holes_check(
        **release_system_inputs(rel),
        units_table=rel.units_table,
        notes=text_file(rel.rel / "RELEASE_NOTES.md"),
        report=text_file(rel.rel / "report.html"),
    )
    from geokanon.verify.gpkg import gpkg_holes_problems

    gpkg = gpkg_holes_problems(rel)
    if not gpkg:
        return result
    detail = [*gpkg, *([] if result.passed else [result.detail])]
    return CheckResult("holes", False, "; ".join(detail))

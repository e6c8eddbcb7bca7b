"""The parameter sweep: which (k, r_max, mask) cells pass both suppression caps.

The neighbour structure is computed once per mask level, for the largest k and
the widest search radius (``generalise_ratio * max(r_maxs)``); every cell then
reads its labels from one column of that table. A cell's labels equal what
:func:`geokanon.classify.classify` gives for the same k and r_max bit for bit:
the ``(k-1)``-th distinct-subject distance does not depend on how many further
neighbours were looked for, and a distance beyond one cell's own search radius
is beyond ``generalise_ratio * r_max`` either way.

With a mask, every cell classifies the *masked* coordinates (the design note:
classify after the mask, never before), which is how the sweep shows the note's
advice that lowering k and adding noise often beats raising r_max.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon._progress import Progress, silent
from geokanon.classify import labels_from_ratios, spacetime_ratios
from geokanon.errors import InputError
from geokanon.mask import MaskKey, MaskSpec, apply_mask
from geokanon.neighbours import subject_codes, subject_neighbour_distances
from geokanon.policy import Label, OutlierPolicy

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SweepCell", "SweepResult", "parse_list", "sweep"]


@dataclass(frozen=True)
class SweepCell:
    """First-pass figures of one (mask, k, r_max) combination.

    Attributes
    ----------
    mask
        Label of the mask level (``"none"`` without a mask).
    k, r_max_m
        The cell's parameters.
    counts
        Records per first-pass label.
    suppressed_share
        Suppressed distinct subjects over all distinct subjects.
    worst_unit, worst_unit_share
        The unit with the largest suppressed share, and that share.
    units_over_cap
        Number of units whose suppressed share exceeds the unit cap.
    passes_global_cap, passes_unit_cap
        The two cap verdicts.
    disposal_share
        Share of records with any label other than ``ok``.
    mask_mean_m
        Mean displacement the mask gave the records (0 without a mask).
    mean_displacement_m
        With ``full``: mean distance from a grouped record's true location to
        its group's published representative (``None`` when not computed,
        ``NaN`` when the release core found no fixed point or no group).
    fixed_point
        With ``full``: whether the release core reached its fixed point within
        the pass limit (``False``: the release would be refused as unsatisfiable).
    subjects_over_caps
        The cell's distance to passing: how many suppressed subjects would have to
        be kept for both caps to hold, ``max(global excess, sum of unit excesses)``.
        The global excess is the suppressed subjects beyond the most that ``tau``
        allows; a unit's excess is its suppressed subjects beyond the most that the
        unit cap allows in that unit. ``0`` exactly when the cell passes; ``None``
        for a cell built without it.
    """

    mask: str
    mask_index: int
    k: int
    r_max_m: float
    counts: dict[str, int]
    suppressed_share: float
    worst_unit: str | None
    worst_unit_share: float
    units_over_cap: int
    passes_global_cap: bool
    passes_unit_cap: bool
    disposal_share: float
    mask_mean_m: float
    mean_displacement_m: float | None = None
    fixed_point: bool | None = None
    subjects_over_caps: int | None = None

    @property
    def passes(self) -> bool:
        """Both caps hold."""
        return self.passes_global_cap and self.passes_unit_cap

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON/CSV-ready mapping (shares as fractions)."""
        n = sum(self.counts.values()) or 1
        row: dict[str, Any] = {"mask": self.mask, "k": self.k, "r_max_m": self.r_max_m}
        for label, c in self.counts.items():
            row[f"{label}_share"] = c / n
        row.update(
            {
                "suppressed_share": self.suppressed_share,
                "worst_unit": self.worst_unit,
                "worst_unit_share": self.worst_unit_share,
                "units_over_cap": self.units_over_cap,
                "passes_global_cap": self.passes_global_cap,
                "passes_unit_cap": self.passes_unit_cap,
                "passes": self.passes,
                "subjects_over_caps": self.subjects_over_caps,
                "disposal_share": self.disposal_share,
                "mask_mean_m": self.mask_mean_m,
                "mean_displacement_m": self.mean_displacement_m,
                "fixed_point": self.fixed_point,
            }
        )
        return row


@dataclass(frozen=True)
class SweepResult:
    """Every cell of a sweep, with the policy the caps came from."""

    policy: OutlierPolicy
    ks: tuple[int, ...]
    r_maxs: tuple[float, ...]
    masks: tuple[str, ...]
    cells: tuple[SweepCell, ...]
    n_records: int
    n_subjects: int

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per cell, in (mask, k, r_max) order."""
        return [c.to_dict() for c in self.cells]

    def to_frame(self) -> pd.DataFrame:
        """The rows as a :class:`pandas.DataFrame`."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def cell(self, k: int, r_max_m: float, mask: int = 0) -> SweepCell:
        """The cell of one combination (``mask`` is the index of the mask level)."""
        for c in self.cells:
            if c.k == k and c.r_max_m == r_max_m and c.mask_index == mask:
                return c
        raise KeyError((k, r_max_m, mask))

    def best_per_k(self, mask: int | None = None) -> dict[tuple[int, int], SweepCell | None]:
        """For each (mask index, k): the passing cell with the smallest r_max, or ``None``."""
        out: dict[tuple[int, int], SweepCell | None] = {}
        for m in range(len(self.masks)) if mask is None else [mask]:
            for k in self.ks:
                passing = [c for c in self.cells if c.mask_index == m and c.k == k and c.passes]
                out[(m, k)] = min(passing, key=lambda c: c.r_max_m) if passing else None
        return out

    def best(self) -> SweepCell | None:
        """The passing cell with the smallest r_max; ties: larger k, then less noise."""
        passing = [c for c in self.cells if c.passes]
        if not passing:
            return None
        return min(passing, key=lambda c: (c.r_max_m, -c.k, c.mask_index))

    def nearest(self) -> SweepCell | None:
        """The failing cell nearest to passing, when no cell passes (else ``None``).

        Nearest means fewest :attr:`SweepCell.subjects_over_caps` (the suppressed
        subjects that would have to be kept for both caps to hold; a cell without
        that figure ranks last). Ties go to the cell that loses less information:
        the smaller mean displacement (with ``full``; a cell with no fixed point
        last), then the smaller r_max, the smaller mask shift, the smaller share
        of records disposed of, and the smaller k.

        Examples
        --------
        >>> import numpy as np
        >>> x = np.r_[5 * (np.arange(50.0) % 10), 5000.0, 9000.0]  # a town, 5 m apart,
        >>> y = np.r_[5 * (np.arange(50.0) // 10), 0.0, 0.0]  # and two lone farms
        >>> units = np.r_[np.zeros(50, dtype=int), 1, 1]
        >>> res = sweep(x, y, [3, 5], [1.0, 10.0], OutlierPolicy(k=3, r_max_m=10.0),
        ...             unit_codes=units, unit_names=["town", "farms"])
        >>> near = res.nearest()
        >>> near.k, near.r_max_m, near.subjects_over_caps
        (3, 10.0, 2)
        """
        if any(c.passes for c in self.cells) or not self.cells:
            return None

        def loss(c: SweepCell) -> tuple[float, ...]:
            d = c.mean_displacement_m
            shift = 0.0 if d is None else (math.inf if c.fixed_point is False or d != d else d)
            return (shift, c.r_max_m, c.mask_mean_m, c.disposal_share, c.k)

        def distance(c: SweepCell) -> float:
            return math.inf if c.subjects_over_caps is None else c.subjects_over_caps

        return min(self.cells, key=lambda c: (distance(c), *loss(c)))

    def recommendation(self) -> str:
        """Plain-language recommendation: per k the smallest passing r_max, then overall.

        Examples
        --------
        >>> import numpy as np
        >>> x = np.r_[np.arange(50.0) % 10, 5000.0]
        >>> y = np.r_[np.arange(50.0) // 10, 0.0]
        >>> pol = OutlierPolicy(k=3, r_max_m=10.0, tau=0.05)
        >>> res = sweep(x, y, [3, 5], [10.0, 100.0], pol)
        >>> print(res.recommendation().splitlines()[-1])
        recommended: k=5, r_max=10 m (suppressed 1.96 %, worst unit 1.96 %)
        """
        lines = []
        caps = f"tau {_pct(self.policy.tau)}, unit cap {_pct(self.policy.unit_cap)}"
        for (m, k), c in self.best_per_k().items():
            where = ""
            if len(self.masks) > 1:
                where = " without a mask" if self.masks[m] == "none" else f" with {self.masks[m]}"
            if c is None:
                lines.append(f"k={k}{where}: no r_max in the sweep passes both caps ({caps})")
            else:
                lines.append(f"k={k}{where}: smallest passing r_max is {c.r_max_m:g} m")
        trade = self._noise_trade_off()
        if trade:
            lines.append(trade)
        best = self.best()
        if best is not None:
            noise = f" with {best.mask}" if best.mask != "none" else ""
            lines.append(
                f"recommended: k={best.k}, r_max={best.r_max_m:g} m{noise} "
                f"(suppressed {_pct(best.suppressed_share)}, worst unit "
                f"{_pct(best.worst_unit_share)})"
            )
            return "\n".join(lines)
        lines.append(self._none_passes(caps))
        return "\n".join(lines)

    def _noise_trade_off(self) -> str | None:
        """The note's advice in figures: a lower k plus noise against a higher k alone.

        Compares against the smallest k for which such a cell exists.
        """
        if "none" not in self.masks or len(self.masks) < 2:
            return None
        m0 = self.masks.index("none")
        plain_best = self.best_per_k(m0)
        for target in sorted(self.ks):
            plain = plain_best[(m0, target)]
            limit = math.inf if plain is None else plain.r_max_m
            options = [
                c
                for c in self.cells
                if c.mask != "none" and c.k < target and c.passes and c.r_max_m < limit
            ]
            if options:
                break
        else:
            return None
        o = min(options, key=lambda c: (c.r_max_m, -c.k, c.mask_index))
        needs = (
            f"needs r_max {plain.r_max_m:g} m"
            if plain is not None
            else "passes at no r_max in the sweep"
        )
        low = plain_best[(m0, o.k)]
        low_text = f"r_max {low.r_max_m:g} m" if low is not None else "no r_max in the sweep"
        return (
            f"lower k plus noise: k={o.k} with {o.mask} (mean shift {o.mask_mean_m:.0f} m) "
            f"passes at r_max {o.r_max_m:g} m, where k={target} without noise {needs} "
            f"(k={o.k} without noise: {low_text})"
        )

    def _none_passes(self, caps: str) -> str:
        """Say plainly that nothing passes, which cell came nearest and what would help."""

        near = self.nearest()
        assert near is not None
        why = []
        if not near.passes_global_cap:
            why.append(f"suppressed {_pct(near.suppressed_share)} > {_pct(self.policy.tau)}")
        if not near.passes_unit_cap:
            why.append(
                f"{near.units_over_cap} units over the {_pct(self.policy.unit_cap)} cap, worst "
                f"{near.worst_unit} at {_pct(near.worst_unit_share)}"
            )
        fixes = []
        if near.k > 2:
            fixes.append(f"a k below {near.k}")
        fixes.append(f"an r_max above {max(self.r_maxs):g} m")
        if near.mask == "none":
            fixes.append("adding noise before classifying (--mask-sd) with a lower k")
        fixes.append("a narrower study area")
        over = (
            f"{near.subjects_over_caps:,} suppressed subjects over the caps: "
            if near.subjects_over_caps is not None
            else ""
        )
        return (
            f"recommended: none - no cell of the sweep passes both caps ({caps}). Nearest: "
            f"k={near.k}, r_max={near.r_max_m:g} m"
            + (f" with {near.mask}" if near.mask != "none" else "")
            + f" ({over}{'; '.join(why)}). Try {', '.join(fixes[:-1])} or {fixes[-1]}."
        )


def _pct(share: float) -> str:
    return f"{100 * share:.2f} %"


def parse_list(text: str, *, name: str, kind: type = float) -> list[Any]:
    """Parse a comma-separated list of numbers (``"100,250,500"``), sorted and deduplicated.

    Parameters
    ----------
    text
        The list as typed on the command line.
    name
        Option name used in error messages.
    kind
        ``int`` or ``float``.

    Examples
    --------
    >>> parse_list("10, 3,5,3", name="--k", kind=int)
    [3, 5, 10]
    """
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise InputError(f"{name} needs at least one value, e.g. {name} 3,5,10")
    out = []
    for t in items:
        try:
            v = kind(t)
        except ValueError:
            raise InputError(
                f"{name} must be a comma-separated list of "
                f"{'integers' if kind is int else 'numbers'}, got {t!r}"
            ) from None
        out.append(v)
    return sorted(set(out))


def _mask_mean(x: NDArray[np.float64], y: NDArray[np.float64], mx: Any, my: Any) -> float:
    return float(np.hypot(mx - x, my - y).mean()) if x.size else 0.0


def sweep(
    x: ArrayLike,
    y: ArrayLike,
    ks: Sequence[int],
    r_maxs: Sequence[float],
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
    unit_codes: ArrayLike | None = None,
    unit_names: ArrayLike | None = None,
    masks: Sequence[MaskSpec | None] | None = None,
    mask_subjects: ArrayLike | None = None,
    unit_polygons: Sequence[Any] | None = None,
    full: bool = False,
    mask_key: MaskKey | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """First-pass label shares and cap verdicts for every (mask, k, r_max) combination.

    Parameters
    ----------
    x, y
        Coordinates in metres of a projected CRS.
    ks
        Values of k (integers >= 2).
    r_maxs
        Values of r_max in metres.
    policy
        Supplies the ratios, ``tau``, ``unit_cap`` and time settings; its own ``k``
        and ``r_max_m`` are not used (nor its ``seed``: it does not key the masks).
    subjects
        Subject id per record (``None``: every record its own subject).
    times
        Times in seconds, when ``policy.t_max_s`` is set.
    unit_codes, unit_names
        Administrative unit code per record and the name of each code
        (default: one unit named ``all``).
    masks
        Mask levels; ``None`` in the list (or no list) is the unmasked data.
    mask_subjects
        Subject ids keying the mask noise (default ``subjects``). Pass the raw ids
        so that the noise does not change when other subjects are added.
    unit_polygons
        One polygon per unit code, for masks with ``contain=True``.
    full
        Also run the release core per cell (caps not enforced) and report the mean
        displacement of grouped records from their true location (``NaN`` when the
        core finds no fixed point).
    mask_key
        The secret :class:`~geokanon.mask.MaskKey` of every mask level (a release's
        ``audit/mask_key`` shows exactly what that release did); default: a new
        random key per call, so masked cells vary slightly between calls.
    progress
        Hears each step (neighbour distances per mask level, then each cell) with
        the cells done of all (:mod:`geokanon._progress`).

    Returns
    -------
    SweepResult

    Raises
    ------
    InputError
        Bad lists, fewer distinct subjects than the largest k, ``full`` without
        the release core.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.uniform(0, 1000, 200), rng.uniform(0, 1000, 200)
    >>> res = sweep(x, y, [3, 5], [50.0, 100.0], OutlierPolicy(k=3, r_max_m=50.0))
    >>> len(res.cells), res.cell(5, 50.0).counts == res.cell(5, 50.0).counts
    (4, True)
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if n == 0:
        raise InputError("the input has no records; nothing to sweep")
    k_list = sorted(set(ks))
    r_list = sorted(set(float(r) for r in r_maxs))
    if not k_list or not r_list:
        raise InputError("the sweep needs at least one k and one r_max")
    # Validate every value through the policy's own rules.
    cell_policies = {(k, r): policy.replace(k=k, r_max_m=r) for k in k_list for r in r_list}
    subj = None if subjects is None else subject_codes(subjects, n)
    n_subjects = n if subj is None else int(subj.max()) + 1
    if n_subjects < max(k_list):
        raise InputError(
            f"the input holds {n_subjects} distinct subjects, fewer than the largest "
            f"k={max(k_list)}; drop the larger values of k"
        )
    if policy.uses_time and times is None:
        raise InputError("t_max_s is set but no times were given; pass a time column")
    if unit_codes is None:
        codes = np.zeros(n, dtype=np.int64)
        names = np.asarray(["all"], dtype=object)
    else:
        codes = np.asarray(unit_codes, dtype=np.int64)
        if codes.shape != (n,):
            raise InputError(f"unit_codes must hold one code per record ({n}), got {codes.shape}")
        names = np.asarray(
            unit_names if unit_names is not None else np.arange(codes.max() + 1).astype(str),
            dtype=object,
        )
        if codes.min() < 0 or codes.max() >= names.size:
            raise InputError(
                f"unit_codes must lie in [0, {names.size}), one per unit name; "
                "give the codes and names of the same unit table"
            )
    mask_levels: list[MaskSpec | None] = list(masks) if masks else [None]
    if mask_key is None and any(m is not None for m in mask_levels):
        mask_key = MaskKey.generate()
    run_core = _release_core() if full else None
    t_arr = None if times is None else np.asarray(times, dtype=np.float64)
    count = max(k_list) - 1
    units = _UnitSuppression(codes, names, subj)
    cells: list[SweepCell] = []
    say = progress if progress is not None else silent
    n_cells = len(mask_levels) * len(k_list) * len(r_list)
    for m, spec in enumerate(mask_levels):
        if spec is None:
            mx, my = xa, ya
        else:
            assert mask_key is not None
            mx, my = apply_mask(
                xa, ya, spec, key=mask_key,
                subjects=subjects if mask_subjects is None else mask_subjects,
                unit_polygons=unit_polygons, unit_codes=codes,
            )  # fmt: skip
        label = "none" if spec is None else spec.label
        mask_mean = 0.0 if spec is None else _mask_mean(xa, ya, mx, my)
        where = "" if spec is None else f" (mask {label})"
        say(f"neighbour distances{where}", done=len(cells), total=n_cells)
        d = subject_neighbour_distances(
            mx, my, subj, count=count, max_distance=policy.generalise_ratio * r_list[-1]
        )
        # Per k: the (k-1)-th distances as one contiguous column; a cell compares it
        # with the exact distance bounds of its three ratio thresholds.
        columns = {k: np.ascontiguousarray(d[:, k - 2]) for k in k_list}
        for r in r_list:
            # r_max in working metres (r on the ground), as the classification measures it
            rw = cell_policies[(k_list[0], r)].r_work_m
            joint = None
            if policy.uses_time:
                # Space and time together: the ratios depend on r, one search per r.
                assert t_arr is not None
                joint = spacetime_ratios(
                    mx, my, subj, t_arr, policy, count=count, r_max_m=rw, last_only=False
                )
            for k in k_list:
                say(f"k={k}, r_max={r:g} m{where}", done=len(cells), total=n_cells)
                pol = cell_policies[(k, r)]
                if joint is None:
                    counts, sup_idx = _cell_labels(columns[k], rw, pol)
                else:
                    labels = labels_from_ratios(joint[:, k - 2], pol)
                    counts = np.bincount(labels, minlength=len(Label))
                    sup_idx = np.flatnonzero(labels == Label.SUPPRESS)
                v = units.verdict(sup_idx, pol)
                displacement = fixed = None
                if run_core is not None:
                    displacement, fixed = _mean_displacement(
                        run_core, xa, ya, mx, my, pol, subj, t_arr, codes, names
                    )
                cells.append(
                    SweepCell(
                        mask=label,
                        mask_index=m,
                        k=k,
                        r_max_m=r,
                        counts={lab.text: int(counts[lab]) for lab in Label},
                        suppressed_share=v.suppressed_share,
                        worst_unit=v.worst_unit,
                        worst_unit_share=v.worst_unit_share,
                        units_over_cap=v.units_over_cap,
                        passes_global_cap=v.suppressed_share <= pol.tau,
                        passes_unit_cap=v.units_over_cap == 0,
                        disposal_share=(n - int(counts[Label.OK])) / n,
                        mask_mean_m=mask_mean,
                        mean_displacement_m=displacement,
                        fixed_point=fixed,
                        subjects_over_caps=v.subjects_over_caps,
                    )
                )
    cells.sort(key=lambda c: (c.mask_index, c.k, c.r_max_m))
    return SweepResult(
        policy=policy,
        ks=tuple(k_list),
        r_maxs=tuple(r_list),
        masks=tuple("none" if s is None else s.label for s in mask_levels),
        cells=tuple(cells),
        n_records=n,
        n_subjects=n_subjects,
    )


def _first_above(t: float, r_max_m: float) -> float:
    """Smallest float64 ``d`` whose rounded ratio ``d / r_max_m`` exceeds ``t``.

    Rounded division is monotone in ``d``, so ``d / r_max_m > t`` holds exactly
    when ``d >= _first_above(t, r_max_m)``: comparing distances with this bound
    gives the labels of :func:`geokanon.classify.labels_from_ratios` bit for bit,
    without dividing a million distances per cell.

    Examples
    --------
    >>> b = _first_above(1.0, 3.0)
    >>> b / 3.0 > 1.0, math.nextafter(b, 0.0) / 3.0 > 1.0
    (True, False)
    """
    d = t * r_max_m
    while d > 0 and d / r_max_m > t:
        d = math.nextafter(d, -math.inf)
    while not d / r_max_m > t:
        d = math.nextafter(d, math.inf)
    return d


def _cell_labels(
    col: NDArray[np.float64], r_max_m: float, policy: OutlierPolicy
) -> tuple[NDArray[np.int64], NDArray[np.intp]]:
    """Label counts and suppressed records of one cell from its distance column."""
    n = col.size
    above = [
        int(np.count_nonzero(col >= _first_above(t, r_max_m))) for t in (1.0, policy.merge_ratio)
    ]
    sup_idx = np.flatnonzero(col >= _first_above(policy.generalise_ratio, r_max_m))
    gt1, gtm, gtg = above[0], above[1], int(sup_idx.size)
    counts = np.array([n - gt1, gt1 - gtm, gtm - gtg, gtg], dtype=np.int64)
    return counts, sup_idx


@dataclass(frozen=True)
class _CellVerdict:
    suppressed_share: float
    worst_unit: str | None
    worst_unit_share: float
    units_over_cap: int
    subjects_over_caps: int


def _most_allowed(n: NDArray[np.int64], cap: float) -> NDArray[np.int64]:
    """Per entry, the largest count ``a <= n`` whose share ``a / n`` is at most ``cap``.

    The share is the float division the caps are judged with, so ``s <= a`` holds
    exactly when ``s / n <= cap`` (``n == 0``: 0).

    Examples
    --------
    >>> _most_allowed(np.array([100, 7, 0, 3]), 0.1).tolist()
    [10, 0, 0, 0]
    """
    n = np.asarray(n, dtype=np.int64)
    a = np.clip(np.floor(cap * n), 0, n).astype(np.int64)
    d = np.maximum(n, 1).astype(np.float64)
    for _ in range(2):  # the product is off by at most one count either way
        a = np.where((a > 0) & (a / d > cap), a - 1, a)
        a = np.where((a < n) & ((a + 1) / d <= cap), a + 1, a)
    return a


class _UnitSuppression:
    """Per-unit suppression of many cells, with the per-unit constants computed once.

    Gives the figures of :func:`geokanon.classify.unit_table` and
    :func:`geokanon.classify.cap_verdict` (same shares, same worst unit, same
    tie-breaking), working only on each cell's suppressed records.
    """

    def __init__(
        self, codes: NDArray[np.int64], names: NDArray[np.object_], subj: NDArray[np.int64] | None
    ) -> None:
        self.codes = codes
        self.names = names
        self.subj = subj
        nu = names.size
        records = np.bincount(codes, minlength=nu)
        if subj is None:
            self.n_subj_u = records.astype(np.int64)
            self.n_subjects = int(codes.size)
            self.n_codes = 1
        else:
            self.n_codes = int(subj.max()) + 1
            pairs = np.unique(codes * self.n_codes + subj)
            self.n_subj_u = np.bincount(pairs // self.n_codes, minlength=nu).astype(np.int64)
            self.n_subjects = int(np.unique(subj).size)
        self.keep = np.flatnonzero(records > 0)
        rank = np.empty(self.keep.size, dtype=np.int64)
        rank[np.argsort(names[self.keep].astype(str), kind="stable")] = np.arange(self.keep.size)
        self.name_rank = rank

    def verdict(self, sup_idx: NDArray[np.intp], policy: OutlierPolicy) -> _CellVerdict:
        nu = self.names.size
        c = self.codes[sup_idx]
        if self.subj is None:
            sup_u = np.bincount(c, minlength=nu).astype(np.int64)
            sup_subjects = int(sup_idx.size)
        else:
            s = self.subj[sup_idx]
            pairs = np.unique(c * self.n_codes + s)
            sup_u = np.bincount(pairs // self.n_codes, minlength=nu).astype(np.int64)
            sup_subjects = int(np.unique(s).size)
        share = np.divide(
            sup_u, self.n_subj_u, out=np.zeros(nu, dtype=np.float64), where=self.n_subj_u > 0
        )
        keep = self.keep
        worst, worst_share = None, 0.0
        if keep.size:
            first = keep[np.lexsort((self.name_rank, -sup_u[keep], -share[keep]))[0]]
            worst, worst_share = str(self.names[first]), float(share[first])
        # Distance to passing: the suppressed subjects beyond what each cap allows.
        over_global = sup_subjects - int(_most_allowed(np.array([self.n_subjects]), policy.tau)[0])
        over_units = sup_u[keep] - _most_allowed(self.n_subj_u[keep], policy.unit_cap)
        return _CellVerdict(
            suppressed_share=sup_subjects / self.n_subjects if self.n_subjects else 0.0,
            worst_unit=worst,
            worst_unit_share=worst_share,
            units_over_cap=int((share[keep] > policy.unit_cap).sum()),
            subjects_over_caps=max(0, over_global, int(np.maximum(over_units, 0).sum())),
        )


def _release_core() -> Any:
    """The release core's entry point, or a clear error when it is not available."""
    import importlib

    try:
        run_core = importlib.import_module("geokanon.disposal").run_core
    except (ImportError, AttributeError):
        raise InputError(
            "--full needs the release core (geokanon.disposal.run_core), which this "
            "installation does not have; run the sweep without --full"
        ) from None
    return run_core


def _mean_displacement(
    run_core: Any,
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    mx: NDArray[np.float64],
    my: NDArray[np.float64],
    policy: OutlierPolicy,
    subj: NDArray[np.int64] | None,
    times: NDArray[np.float64] | None,
    codes: NDArray[np.int64],
    names: NDArray[np.object_],
) -> tuple[float, bool]:
    """Mean distance from each grouped record's true location to its representative.

    Also whether the core reached its fixed point (``NaN, False`` when it did not).
    """
    from geokanon.errors import Unsatisfiable

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            core = run_core(
                mx, my, policy, subjects=subj, times=times, unit_codes=codes,
                unit_names=names, enforce_caps=False,
            )  # fmt: skip
        except Unsatisfiable:
            return math.nan, False
    gid = np.asarray(core.group_id, dtype=np.int64)
    grouped = gid >= 0
    if not grouped.any():
        return math.nan, True
    gx = np.asarray(core.group_x, dtype=np.float64)[gid[grouped]]
    gy = np.asarray(core.group_y, dtype=np.float64)[gid[grouped]]
    return float(np.hypot(x[grouped] - gx, y[grouped] - gy).mean()), True

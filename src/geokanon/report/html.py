"""``release/report.html`` and the refusal report: one self-contained page each.

The release report reads the files of a release directory (``release/`` and
``audit/``) and writes ``release/report.html``: the verdict and every check, a
map of the published groups, the per-unit suppressed share, the distributions
behind the release (isolation ratios, displacement, group diameters, labels per
pass), the per-unit table, the bias findings and the parameters and checksums.

The page is publishable, so what it shows is limited to what the release
publishes, plus histograms aggregated from the audit under a masking rule:

- histograms of records (isolation ratio, displacement) merge adjacent bins until
  every shown bin holds 0 or at least ``k`` distinct subjects (a small remainder at
  the end joins the bin before it); bin edges are fixed in advance, never fitted
  to the data;
- when the release hides its global suppressed figure (``<k`` or ``withheld``),
  the isolation ratios are those of the published records only (over every record
  the bars would add up to the input size less the records above the generalise
  threshold, a bound of the hidden suppressed total), those above the generalise
  threshold are one hatched bar with no height, and per-pass ``suppress`` label
  counts over all records read ``withheld``;
- per-pass label counts are the manifest's, counted over the records published at
  group level;
- per-pass label counts of 1..k-1 records read ``<k``;
- per-unit suppressed shares are published as bands relative to the unit cap,
  and only where the unit's suppressed figure is published as a number;
- a histogram of groups (diameters) needs no masking: every group holds at least
  ``k`` distinct subjects;
- maps show group representatives (published) and unit polygons read from the
  ``--units`` file; no source coordinate, no hull of members, no axis ticks. Above
  :data:`RASTER_MIN_GROUPS` groups the representatives are binned into square cells
  (the records of their groups summed per cell) and the page says so.

The audit's columns are read one at a time with pyarrow, each when it is needed,
and every figure is computed with numpy over whole columns (no per-record Python),
so a release of 1e7 records gets its page in seconds and a few hundred MB.

Every figure is rendered with matplotlib (Agg, deterministic SVG for plots, PNG for
maps) and embedded as a ``data:`` image; the page loads nothing from anywhere (a
Content-Security-Policy forbids it), so it opens from a USB stick.

The refusal report (:func:`write_refusal_report`) holds the figures of a
:class:`~geokanon.errors.ReleaseRefused` and its diagnosis, and no coordinate.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numba as nb
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from geokanon.published import BAND_EDGES, REPORT_SCRIPT, REPORT_STYLE, share_band_labels

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from geokanon.verify import VerificationReport

__all__ = [
    "CHECK_TEXT",
    "build_report",
    "masked_histogram",
    "rebuild_report",
    "refusal_report_path",
    "share_band",
    "write_refusal_report",
]

LT_K = "<k"
WITHHELD = "withheld"
#: ``passes[].scope`` of per-pass counts over the records published at group level
#: (the value :data:`geokanon.published.PASS_SCOPE`).
PASS_SCOPE = "records published at group level"

#: What every check establishes, in the words of the specification.
CHECK_TEXT: dict[str, str] = {
    "k_subjects": "every published group and generalised class holds at least k distinct "
    "subjects (synthetic records never count)",
    "extent": "every member of every group lies within r_max of its published representative",
    "tau": "the suppressed share of all subjects is within the global cap tau",
    "unit_cap": "in every unit, the suppressed share is within the unit cap",
    "holes": "no hidden figure (a '<k' or withheld cell) can be worked out, or narrowed, "
    "from the published figures taken together",
    "no_leak": "no release file holds a source coordinate, a subject id, a raw timestamp "
    "or a source row number",
    "representation": "no published representative equals a member's coordinate or the "
    "exact centroid of its members",
    "counts": "every published count equals what the audit assigns",
    "fixed_point": "the passes end with one that changed nothing, within 5 passes",
    "report_safety": "no figure in the notes or this report rests on 1..k-1 subjects",
    "deterministic": "the same input, policy and seed give the same release; the row order "
    "of the input does not matter",
    "manifest": "every release file is listed in manifest.json with a matching sha256",
}
#: The checks that read this page: what :func:`rebuild_report` runs again with a new page.
RECHECKED = ("holes", "no_leak", "report_safety", "manifest")

#: Okabe-Ito colours of the four labels, and the groups.
LABEL_COLOURS = {
    "ok": "#009E73",
    "merge": "#56B4E9",
    "generalise": "#E69F00",
    "suppress": "#D55E00",
}
GROUP_COLOUR = "#0072B2"
#: Share bands (fractions of the unit cap: the format's, geokanon.published) and their
#: colours (light to dark).
BAND_COLOURS = ("#fee8c8", "#fdbb84", "#ef6548", "#b30000")
ZERO_COLOUR = "#f2f2f2"
LTK_COLOUR = "#bdbdbd"


# --------------------------------------------------------------------------------------
# Masking rules
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bin:
    """One published histogram bin: ``[low, high)`` and its record count."""

    low: float
    high: float
    records: int


def masked_histogram(
    values: NDArray[np.float64],
    subjects: NDArray[np.int64],
    edges: Sequence[float] | NDArray[np.float64],
    k: int,
) -> list[Bin]:
    """Histogram whose every bin holds 0 or at least ``k`` distinct subjects.

    Bins are the fixed ``edges`` (the last bin is closed on the right and also
    takes values beyond it); adjacent bins are merged, left to right, until the
    merged bin holds 0 or >= k distinct subjects; a remainder of 1..k-1 subjects
    at the end joins the last published non-empty bin.

    Parameters
    ----------
    values
        One value per record (NaN: not counted).
    subjects
        Subject code per record.
    edges
        Increasing bin edges.
    k
        The release's k.

    Returns
    -------
    list of Bin

    Examples
    --------
    >>> v = np.array([0.5, 1.5, 1.6, 2.5, 2.6, 2.7])
    >>> [(b.low, b.high, b.records) for b in masked_histogram(v, np.arange(6), [0, 1, 2, 3], 3)]
    [(0.0, 2.0, 3), (2.0, 3.0, 3)]
    """
    e = np.asarray(edges, dtype=np.float64)
    nb = e.size - 1
    # bin of every record (-1: NaN, not counted) and the records per bin, in one pass
    idx = np.empty(values.size, dtype=np.int32)
    recs = _bin_records(np.asarray(values, dtype=np.float64), e, idx)
    out: list[tuple[int, int]] = []  # (first bin, last bin) of each published bin
    i = 0

    # Subjects with one counted record count once in its bin; only the records of
    # subjects with more than one need the distinct (bin, subject) pairs, by bin (a
    # run of bins is a slice of them).
    s = _dense_codes(subjects)
    if not s.size or not _repeats(s, int(s.max()) + 1):  # one record per subject
        single_cum = np.concatenate([[0], np.cumsum(recs)])
        pair_subj = np.zeros(0, dtype=np.int64)
        bin_start = np.zeros(nb + 1, dtype=np.int64)
    else:
        counted = idx >= 0
        per_subject = np.bincount(s)
        multi = counted & (per_subject[np.where(counted, s, 0)] > 1)
        single = counted & ~multi
        single_cum = np.concatenate([[0], np.cumsum(np.bincount(idx[single], minlength=nb))])
        del single
        n_subj = int(s.max()) + 1
        pairs = _distinct_sorted(idx[multi].astype(np.int64) * n_subj + s[multi].astype(np.int64))
        pair_subj = pairs % n_subj
        bin_start = np.searchsorted(pairs // n_subj, np.arange(nb + 1))
        del pairs, multi, counted, per_subject
    del idx, s

    def subjects_in(a: int, b: int) -> int:
        sl = pair_subj[bin_start[a] : bin_start[b + 1]]
        once = int(single_cum[b + 1] - single_cum[a])
        return once + int(sl.size if a == b else _distinct_sorted(sl).size)

    while i < nb:
        if recs[i] == 0:
            out.append((i, i))
            i += 1
            continue
        j = i
        while j < nb - 1 and subjects_in(i, j) < k:
            j += 1
        if subjects_in(i, j) < k:  # remainder at the end: join the last non-empty bin
            last = next((n for n in range(len(out) - 1, -1, -1) if recs[out[n][0]] > 0), None)
            if last is None:
                out.append((i, j))
            else:
                out[last] = (out[last][0], j)
                out = out[: last + 1]
            break
        out.append((i, j))
        i = j + 1
    return [Bin(float(e[a]), float(e[b + 1]), int(recs[a : b + 1].sum())) for a, b in out]


@nb.njit(cache=True, nogil=True)
def _bin_records(
    values: NDArray[np.float64], edges: NDArray[np.float64], idx: NDArray[np.int32]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Fill ``idx`` with each value's bin of ``edges`` (``np.searchsorted(edges, v,
    side="right") - 1`` clipped to the bins: the last bin takes the values beyond it, the
    first those below; -1 for NaN) and return the values per bin."""
    n_bins = edges.size - 1
    recs = np.zeros(n_bins, dtype=np.int64)
    for i in range(values.size):
        v = values[i]
        if np.isnan(v):
            idx[i] = -1
            continue
        lo, hi = 0, edges.size  # the number of edges <= v, by bisection
        while lo < hi:
            mid = (lo + hi) // 2
            if edges[mid] <= v:
                lo = mid + 1
            else:
                hi = mid
        b = min(max(lo - 1, 0), n_bins - 1)
        idx[i] = b
        recs[b] += 1
    return recs


@nb.njit(cache=True, nogil=True)
def _repeats(codes: NDArray[np.int64], size: int) -> bool:  # pragma: no cover - compiled
    """Whether a code in ``0..size-1`` occurs twice in ``codes``."""
    seen = np.zeros(size, dtype=np.bool_)
    for v in codes:
        if seen[v]:
            return True
        seen[v] = True
    return False


def _distinct_sorted(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.unique(values)`` of integers, by sorting (numpy's hashing unique is far slower)."""
    v = np.sort(values)
    if v.size > 1:
        v = v[np.concatenate(([True], v[1:] != v[:-1]))]
    return v


def _dense_codes(s: NDArray[np.int64]) -> NDArray[np.int64]:
    """Subject codes as small non-negative integers (the same partition of records)."""
    if not s.size:
        return s.astype(np.int64)
    lo, hi = int(s.min()), int(s.max())
    if lo >= 0 and hi <= 4 * s.size + 1024:
        return s
    return np.unique(s, return_inverse=True)[1].astype(np.int64).reshape(-1)


def share_band(suppressed: object, share: float, cap: float) -> tuple[int, str]:
    """Published band of a unit's suppressed share: ``(rank, text)``.

    ``rank`` orders the bands (higher is worse; ``<k`` units rank 1, zero 0). The
    band is shown only when the unit's suppressed figure is a number >= k.

    Examples
    --------
    >>> share_band(0, 0.0, 0.1), share_band("<k", 0.3, 0.1), share_band(12, 0.03, 0.1)
    ((0, '0'), (1, '<k'), (4, '2.5–5 %'))
    """
    if str(suppressed) == "0":
        return 0, "0"
    if str(suppressed) in (LT_K, WITHHELD):
        return 1, str(suppressed)
    labels = share_band_labels(cap)
    for n, edge in enumerate(BAND_EDGES):
        if share <= edge * cap + 1e-12:
            return n + 2, labels[n]
    return len(BAND_EDGES) + 2, labels[-1]


def _pct_g(x: float) -> str:
    return f"{100 * x:.3g}"


def _mask_count(v: int, k: int) -> int | str:
    return int(v) if v == 0 or v >= k else LT_K


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return str(v)


def _esc(v: object) -> str:
    return html.escape(_fmt(v))


def _crs_text(manifest: Mapping[str, Any]) -> str:
    """What the release's coordinates are: the CRS, or local metres (no CRS)."""
    if manifest.get("crs"):
        return str(manifest["crs"])
    if manifest.get("local_metres"):
        return "none: local metres (x/y in metres of a frame the custodian did not name)"
    return "unnamed"


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------


def _svg(fig: Figure, alt: str = "plot") -> str:
    """The figure as an SVG ``data:`` image (vector, and its drawing numbers stay out of
    the page's text, where the leak scan would otherwise compare glyph and path
    coordinates with source coordinates)."""
    from geokanon.report.sweep_page import _svg_text

    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", _svg_text(fig), flags=re.S)
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def _png(fig: Figure, alt: str, dpi: int = 100) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="map" alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _figure(w: float, h: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def _style(ax: Axes) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=8)
    ax.grid(axis="y", color="#e5e5e5", lw=0.6)
    ax.set_axisbelow(True)


def _hist_bars(ax: Axes, bins: list[Bin], colour_of: Any, x_of: Any = None) -> None:
    """Draw published bins as bars (``x_of`` maps a value to the axis; empty bins: nothing)."""
    fx = x_of or (lambda v: v)
    for b in bins:
        if b.records:
            lo, hi = fx(b.low), fx(b.high)
            ax.bar(
                lo,
                b.records,
                width=hi - lo,
                align="edge",
                color=colour_of(b),
                lw=0.4,
                edgecolor="white",
            )


_IOTA_EDGES = tuple([0.0] + [2.0**e for e in np.arange(-6.0, 5.0, 0.5)] + [math.inf])


def _iota_hidden(m: Mapping[str, Any]) -> bool:
    """Whether the release hides its global suppressed figure (then the isolation ratios
    above the generalise threshold are not counted)."""
    return not isinstance((m.get("counts") or {}).get("suppressed"), int)


def _iota_bins(
    iota: NDArray[np.float64], subj: NDArray[np.int64], m: Mapping[str, Any]
) -> list[Bin]:
    """The published bins of the isolation ratios (log-spaced edges; an infinite ratio in
    the last bin; above the generalise threshold nothing when :func:`_iota_hidden`)."""
    gr = float(m.get("policy", {}).get("generalise_ratio", 4.0))
    edges: list[float] = list(_IOTA_EDGES)
    values = iota  # an infinite ratio falls in the last bin, as every ratio beyond it
    if _iota_hidden(m):  # nothing above the generalise threshold is counted, not even merged
        edges = [e for e in edges if e < gr] + [gr]
        values = np.where(iota > gr, np.nan, iota)
    return masked_histogram(values, subj, edges, int(m["k"]))


def _iota_figure(bins: list[Bin], m: Mapping[str, Any]) -> str:
    from matplotlib.patches import Patch

    pol = m.get("policy", {})
    mr = float(pol.get("merge_ratio", 2.0))
    gr = float(pol.get("generalise_ratio", 4.0))
    hidden = _iota_hidden(m)
    lo_edge, hi_edge = _IOTA_EDGES[1], _IOTA_EDGES[-2]

    def x_of(v: float) -> float:  # log2 axis; the outer bins get one half step each
        if v <= 0:
            return math.log2(lo_edge) - 0.5
        if math.isinf(v):
            return math.log2(hi_edge) + 0.5
        return math.log2(v)

    bounds = (1.0, mr, gr)

    def colour(b: Bin) -> str:
        if any(b.low < t < b.high for t in bounds):
            return "#999999"  # a merged bin across a threshold
        if b.high <= 1:
            return LABEL_COLOURS["ok"]
        if b.high <= mr:
            return LABEL_COLOURS["merge"]
        if b.high <= gr:
            return LABEL_COLOURS["generalise"]
        return LABEL_COLOURS["suppress"]

    fig = _figure(6.2, 3.0)
    ax = fig.subplots()
    _hist_bars(ax, bins, colour, x_of)
    if hidden:
        _hidden_region(ax, x_of(gr), x_of(math.inf))
    ax.set_yscale("log")
    for t in bounds:
        ax.axvline(math.log2(t), color="#333333", lw=0.8, ls="--")
    ticks = [1 / 64, 1 / 16, 1 / 4, 1, mr, gr, 16]
    ax.set_xticks([math.log2(t) for t in ticks], [f"{t:g}" for t in ticks])
    ax.set_xlim(x_of(0), x_of(math.inf))
    ax.set_ylim(0.8, None)
    handles = [Patch(color=c, label=lab) for lab, c in LABEL_COLOURS.items()]
    handles.append(Patch(color="#999999", label="bin across a threshold"))
    ax.legend(
        handles=handles,
        fontsize=6.5,
        ncols=5,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
        handlelength=1.2,
    )
    ax.set_xlabel("isolation ratio iota (first pass; log scale; outer bins open-ended)", fontsize=8)
    ax.set_ylabel("records per bin", fontsize=8)
    _style(ax)
    return _svg(
        fig, "histogram of isolation ratios with the merge, generalise and suppress thresholds"
    )


def _hidden_region(ax: Axes, lo: float, hi: float) -> None:
    """A hatched band with no height: counts withheld there."""
    ax.axvspan(lo, hi, fill=False, hatch="///", edgecolor="#999999", lw=0.6)
    ax.text(
        (lo + hi) / 2,
        0.5,
        "withheld",
        transform=ax.get_xaxis_transform(),
        ha="center",
        va="center",
        rotation=90,
        fontsize=7,
        color="#555555",
    )


def _displacement_bins(
    d: NDArray[np.float64], subj: NDArray[np.int64], r_max: float, k: int
) -> list[Bin]:
    """The published bins of the displacements (r_max/40 wide before merging)."""
    return masked_histogram(d, subj, np.linspace(0.0, r_max, 41), k)


def _displacement_figure(bins: list[Bin], r_max: float) -> str:
    fig = _figure(6.2, 2.6)
    ax = fig.subplots()
    _hist_bars(ax, bins, lambda b: GROUP_COLOUR)
    ax.axvline(r_max, color="#D55E00", lw=1.2, ls="--")
    ax.text(
        r_max,
        1.0,
        "r_max ",
        transform=ax.get_xaxis_transform(),
        ha="right",
        va="top",
        fontsize=7,
        color="#D55E00",
    )
    ax.set_xlim(0, r_max * 1.04)
    ax.set_xlabel("distance from a record to its group's published representative (m)", fontsize=8)
    ax.set_ylabel("records per bin", fontsize=8)
    _style(ax)
    return _svg(fig, "histogram of displacements with r_max marked")


def _displacement_summary(
    d: NDArray[np.float64], subj: NDArray[np.int64], r_max: float, k: int
) -> str:
    ok = ~np.isnan(d)
    if not _at_least_distinct(subj, ok, k):
        return "Too few records at group level to summarise (&lt;k)."
    v = d[ok]
    mean = v.mean()
    within = np.mean(v <= r_max / 4)
    median = np.median(v, overwrite_input=True)  # v is a copy: partitioned in place
    return (
        f"Mean {mean:.0f} m, median {median:.0f} m; "
        f"{100 * within:.1f} % of these records lie within r_max/4 of their "
        "representative. Bins are r_max/40 wide before merging."
    )


def _at_least_distinct(values: NDArray[np.int64], where: NDArray[np.bool_], k: int) -> bool:
    """Whether ``values[where]`` holds at least ``k`` distinct values (a small ``k``: the
    first values usually settle it, else all of them are counted)."""
    head = 64 * max(k, 1)
    if _distinct_sorted(values[:head][where[:head]]).size >= k:
        return True
    return values.size > head and _distinct_sorted(values[where]).size >= k


def _diameter_figure(diam: NDArray[np.float64], r_max: float) -> str:
    ratio = diam / r_max
    edges = np.linspace(0.0, 2.0, 21)
    counts, _ = np.histogram(np.clip(ratio, 0, 2.0), bins=edges)
    fig = _figure(6.2, 2.6)
    ax = fig.subplots()
    ax.bar(
        edges[:-1],
        counts,
        width=np.diff(edges),
        align="edge",
        color=GROUP_COLOUR,
        lw=0.4,
        edgecolor="white",
    )
    for t, name in ((1.0, "r_max"), (2.0, "2 r_max (limit)")):
        ax.axvline(t, color="#D55E00", lw=1.2, ls="--")
        ax.text(
            t,
            1.0,
            f"{name} ",
            transform=ax.get_xaxis_transform(),
            ha="right",
            va="top",
            fontsize=7,
            color="#D55E00",
        )
    ax.set_xlim(0, 2.08)
    ax.set_xlabel("group diameter (largest distance between two members) / r_max", fontsize=8)
    ax.set_ylabel("groups", fontsize=8)
    _style(ax)
    return _svg(fig, "histogram of group diameters relative to r_max")


def _passes_figure(rows: list[dict[str, int | str]], k: int) -> str:
    from matplotlib.patches import Patch, Rectangle

    labels = list(LABEL_COLOURS)
    fig = _figure(6.2, 2.6)
    ax = fig.subplots()
    w = 0.2
    for i, row in enumerate(rows):
        for j, lab in enumerate(labels):
            v = row[lab]
            x = i + (j - 1.5) * w
            if isinstance(v, int):
                if v > 0:
                    ax.bar(x, v, width=w, color=LABEL_COLOURS[lab], align="center")
            else:  # "<k" or withheld: an outline with no height
                top = k - 1 if v == LT_K else 10
                ax.add_patch(
                    Rectangle(
                        (x - w / 2, 1),
                        w,
                        top - 1 if top > 1 else 1,
                        fill=False,
                        hatch="///",
                        edgecolor=LABEL_COLOURS[lab],
                        lw=0.6,
                    )
                )
    ax.set_yscale("log")
    ax.set_ylim(0.8, None)
    ax.set_xticks(range(len(rows)), [f"pass {r['pass']}" for r in rows])
    ax.set_ylabel("records", fontsize=8)
    handles = [Patch(color=LABEL_COLOURS[lab], label=lab) for lab in labels]
    handles.append(Patch(fill=False, hatch="///", edgecolor="#777777", label="<k / withheld"))
    ax.legend(
        handles=handles,
        fontsize=7,
        ncols=5,
        loc="upper center",
        bbox_to_anchor=(0.5, 1.18),
        frameon=False,
    )
    _style(ax)
    return _svg(fig, "label counts per fixed-point pass")


def _scale_bar(ax: Axes, x0: float, x1: float, y0: float, y1: float) -> None:
    span = (x1 - x0) / 5
    if span <= 0 or not math.isfinite(span):
        return
    p = 10 ** math.floor(math.log10(span))
    length = max(s * p for s in (1, 2, 5) if s * p <= span)
    bx, by = x0 + 0.04 * (x1 - x0), y0 + 0.04 * (y1 - y0)
    ax.plot([bx, bx + length], [by, by], color="black", lw=2.5, solid_capstyle="butt")
    text = f"{length / 1000:g} km" if length >= 1000 else f"{length:g} m"
    ax.text(bx + length / 2, by + 0.015 * (y1 - y0), text, ha="center", va="bottom", fontsize=8)


def _map_axes(ax: Axes, x0: float, x1: float, y0: float, y1: float) -> None:
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_color("#cccccc")
    _scale_bar(ax, x0, x1, y0, y1)


def _map_figure(ext: tuple[float, float, float, float]) -> Figure:
    x0, x1, y0, y1 = ext
    ratio = (y1 - y0) / max(x1 - x0, 1e-9)
    return _figure(5.6, float(np.clip(5.6 * ratio, 3.0, 7.5)) + 0.35)


def _extent(
    gx: NDArray[np.float64], gy: NDArray[np.float64], outlines: Any
) -> tuple[float, float, float, float]:
    if outlines is not None and len(outlines):
        x0, y0, x1, y1 = (float(v) for v in outlines.total_bounds)
    elif gx.size:
        x0, x1, y0, y1 = float(gx.min()), float(gx.max()), float(gy.min()), float(gy.max())
    else:
        x0, x1, y0, y1 = 0.0, 1.0, 0.0, 1.0
    pad = 0.03 * max(x1 - x0, y1 - y0, 1.0)
    return x0 - pad, x1 + pad, y0 - pad, y1 + pad


#: Above this many groups the map bins the representatives into square cells (a
#: raster) instead of drawing one dot per group.
RASTER_MIN_GROUPS = 5000
#: About this many raster cells across the map (each cell a few screen pixels wide,
#: so none is lost when the image is drawn).
RASTER_CELLS = 200


def _nice_length(x: float) -> float:
    """The smallest of 1, 2, 5 x 10^n that is at least ``x``."""
    p = 10.0 ** math.floor(math.log10(x))
    return next(s * p for s in (1.0, 2.0, 5.0, 10.0) if s * p >= x)


def _length_text(v: float) -> str:
    return f"{v / 1000:g} km" if v >= 1000 else f"{v:g} m"


def _groups_map(
    gx: NDArray[np.float64], gy: NDArray[np.float64], n: NDArray[np.int64], outlines: Any, k: int
) -> tuple[str, str]:
    """The map of the published groups and the page's sentence on what it draws.

    Up to :data:`RASTER_MIN_GROUPS` groups: one dot per representative, its area
    proportional to the group's records. More: the representatives binned into
    square cells, each cell coloured by the records of the groups whose
    representative lies in it (a sum of published counts; computed with numpy).
    """
    ext = _extent(gx, gy, outlines)
    fig = _map_figure(ext)
    ax = fig.subplots()
    if outlines is not None:
        outlines.boundary.plot(ax=ax, color="#666666", lw=0.6)
    if gx.size > RASTER_MIN_GROUPS:
        x0, x1, y0, y1 = ext
        cell = _nice_length(max(x1 - x0, y1 - y0, 1.0) / RASTER_CELLS)
        nx = max(1, math.ceil((x1 - x0) / cell))
        ny = max(1, math.ceil((y1 - y0) / cell))
        ix = np.clip(((gx - x0) // cell).astype(np.int64), 0, nx - 1)
        iy = np.clip(((gy - y0) // cell).astype(np.int64), 0, ny - 1)
        grid = np.bincount(iy * nx + ix, weights=n, minlength=nx * ny).reshape(ny, nx)
        shown = np.ma.masked_equal(grid, 0.0)
        _raster(ax, fig, shown, (x0, x0 + nx * cell, y0, y0 + ny * cell), cell)
        title = f"published groups: records per {_length_text(cell)} cell"
        alt = (
            "map of the published group representatives binned into square cells, "
            "coloured by the records of their groups"
        )
        note = (
            "The map bins the published group representatives into square cells "
            f"of {_length_text(cell)} (more than {RASTER_MIN_GROUPS:,} groups would not read "
            "as dots): a cell's colour is the sum of the records of the groups whose "
            "representative (the centre of a grid cell, never a member's location) lies in "
            "it; a white cell holds no representative."
        )
    else:
        if gx.size:
            order = np.argsort(-n, kind="stable")
            size = 1.5 + 6.0 * (n[order] / max(k, 1)) ** 0.5
            ax.scatter(gx[order], gy[order], s=size, color=GROUP_COLOUR, alpha=0.45, lw=0)
            for v in sorted({k, int(np.median(n)), int(n.max())}):
                ax.scatter(
                    [],
                    [],
                    s=1.5 + 6.0 * (v / max(k, 1)) ** 0.5,
                    color=GROUP_COLOUR,
                    alpha=0.6,
                    lw=0,
                    label=f"{v} records",
                )
            ax.legend(
                fontsize=7,
                loc="upper right",
                frameon=True,
                framealpha=0.85,
                title="group of",
                title_fontsize=7,
            )
        title = "published groups (representatives, sized by records)"
        alt = "map of the published group representatives, sized by their record counts"
        note = (
            "Each dot is a published group representative (the centre of a grid cell, "
            "never a member's location)."
        )
    _map_axes(ax, *ext)
    ax.set_title(title, fontsize=9)
    return _png(fig, alt), note


def _raster(
    ax: Axes,
    fig: Figure,
    grid: np.ma.MaskedArray[Any, Any],
    extent: tuple[float, float, float, float],
    cell: float,
) -> None:
    """Draw binned record counts (masked where 0) on a log colour scale, with a colour bar."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap, LogNorm

    cmap = ListedColormap(colormaps["YlGnBu"](np.linspace(0.3, 1.0, 256))).with_extremes(
        bad=(0.0, 0.0, 0.0, 0.0)
    )
    lo = float(grid.min())
    hi = max(float(grid.max()), lo * 1.01)
    image = ax.imshow(
        grid,
        origin="lower",
        extent=extent,
        cmap=cmap,
        norm=LogNorm(vmin=lo, vmax=hi),
        interpolation="nearest",
        zorder=0,
    )
    bar = fig.colorbar(image, ax=ax, shrink=0.6, pad=0.01)
    bar.set_label(f"records per {_length_text(cell)} cell", fontsize=7)
    bar.ax.tick_params(labelsize=7)


def _choropleth(
    outlines: Any, id_col: str, bands: Mapping[str, tuple[int, str]], cap: float
) -> str:
    from matplotlib.patches import Patch

    fig = _map_figure(_extent(np.zeros(0), np.zeros(0), outlines))
    ax = fig.subplots()
    colours = []
    for uid in outlines[id_col].astype(str):
        rank, _ = bands.get(uid, (-1, ""))
        if rank == -1:
            colours.append("white")
        elif rank == 0:
            colours.append(ZERO_COLOUR)
        elif rank == 1:
            colours.append(LTK_COLOUR)
        else:
            colours.append(BAND_COLOURS[min(rank - 2, len(BAND_COLOURS) - 1)])
    outlines.plot(ax=ax, color=colours, edgecolor="#555555", lw=0.6)
    _map_axes(ax, *_extent(np.zeros(0), np.zeros(0), outlines))
    handles = [Patch(facecolor=ZERO_COLOUR, edgecolor="#555555", label="0 suppressed")]
    handles.append(Patch(facecolor=LTK_COLOUR, edgecolor="#555555", label="<k suppressed"))
    for label, col in zip(share_band_labels(cap)[: len(BAND_EDGES)], BAND_COLOURS, strict=True):
        handles.append(Patch(facecolor=col, edgecolor="#555555", label=label))
    handles.append(Patch(facecolor="white", edgecolor="#555555", label="no records"))
    ax.legend(
        handles=handles,
        fontsize=7,
        loc="upper right",
        framealpha=0.85,
        title=f"suppressed share\n(unit cap {_pct_g(cap)} %)",
        title_fontsize=7,
    )
    ax.set_title("suppressed share per unit (the darkest band ends at the unit cap)", fontsize=9)
    return _png(fig, "map of the units coloured by their band of suppressed share")


def _band_chart(bands: Mapping[str, tuple[int, str]], cap: float) -> str:
    names = ["0", "<k", *share_band_labels(cap)[: len(BAND_EDGES)]]
    counts = np.zeros(len(names), dtype=int)
    for rank, _ in bands.values():
        counts[min(rank, len(names) - 1)] += 1
    fig = _figure(5.6, 2.6)
    ax = fig.subplots()
    colours = [ZERO_COLOUR, LTK_COLOUR, *BAND_COLOURS]
    ax.bar(range(len(names)), counts, color=colours, edgecolor="#555555", lw=0.6)
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.axvline(len(names) - 0.5, color="#D55E00", lw=1.2, ls="--")
    ax.text(
        len(names) - 0.5,
        1.0,
        f"unit cap {_pct_g(cap)} % ",
        transform=ax.get_xaxis_transform(),
        ha="right",
        va="top",
        fontsize=7,
        color="#D55E00",
    )
    ax.set_ylabel("units", fontsize=8)
    ax.set_xlabel("suppressed share of the unit's subjects", fontsize=8)
    _style(ax)
    return _svg(fig, "number of units per band of suppressed share, with the unit cap marked")


# --------------------------------------------------------------------------------------
# Reading a release
# --------------------------------------------------------------------------------------


def _transformer(src: str | None, dst: str | None) -> Any:
    if not src or not dst or src == dst:
        return None
    from pyproj import CRS, Transformer

    try:
        a, b = CRS.from_user_input(src), CRS.from_user_input(dst)
    except Exception:  # an unnamed CRS: assume the same
        return None
    if a == b:
        return None
    return Transformer.from_crs(a, b, always_xy=True)


#: Groups of up to this many members get their diameter from all pairs of members
#: (vectorised over the groups of one size); larger ones from their convex hull.
_PAIRWISE_MAX = 16


def _group_diameters(
    gid: NDArray[np.int64], x: NDArray[np.float64], y: NDArray[np.float64], n_groups: int
) -> NDArray[np.float64]:
    """Largest distance between two members of every group (:func:`_members_figures`)."""
    return _members_figures(gid, x, y, n_groups)[0]


def _members_figures(
    gid: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    n_groups: int,
    published: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every group's diameter and, with the ``published`` representatives (x, y and group
    id of each), every record's displacement, from one pass over the groups' members.

    Diameters: small groups from every pair of members (compiled, after a counting sort
    of the rows by group); groups larger than :data:`_PAIRWISE_MAX` from the pairs of
    their convex hull's vertices; both the exact largest pairwise distance. A record's
    displacement is its distance to its group's representative (NaN: no published
    group; an empty array without ``published``).
    """
    order, start = _members_by_group(gid, n_groups)
    pos = np.full(n_groups, -1, dtype=np.int64)  # position among the published groups
    rx = ry = np.zeros(0)
    if published is not None:
        rx, ry, ids = published
        pos[ids] = np.arange(ids.size)
    disp = np.full(gid.size if published is not None else 0, np.nan)
    out = _pairwise_diameters(order, start, x, y, _PAIRWISE_MAX, rx, ry, pos, disp)
    sizes = np.diff(start)
    big = np.flatnonzero(sizes > _PAIRWISE_MAX)
    if big.size:
        owner = np.repeat(np.arange(big.size), sizes[big])
        offset = np.cumsum(sizes[big]) - sizes[big]
        members = order[np.repeat(start[big], sizes[big]) + np.arange(owner.size) - offset[owner]]
        out[big] = _hull_diameters(owner, x[members], y[members])
    return out, disp


@nb.njit(cache=True, nogil=True)
def _members_by_group(
    gid: NDArray[np.int64], n_groups: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # pragma: no cover - compiled
    """Rows of every group ``0..n_groups-1``, ascending, and where each group starts.

    A counting sort: the rows with ``gid >= 0`` ordered by (group, row), and
    ``start`` of length ``n_groups + 1``.
    """
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for g in gid:
        if g >= 0:
            start[g + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    pos = start[:n_groups].copy()
    order = np.empty(start[n_groups], dtype=np.int64)
    for r in range(gid.size):
        g = gid[r]
        if g >= 0:
            order[pos[g]] = r
            pos[g] += 1
    return order, start


@nb.njit(cache=True, nogil=True)
def _pairwise_diameters(
    order: NDArray[np.int64],
    start: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    max_size: int,
    rx: NDArray[np.float64],
    ry: NDArray[np.float64],
    pos: NDArray[np.int64],
    disp: NDArray[np.float64],
) -> NDArray[np.float64]:  # pragma: no cover - compiled
    """Largest distance between two members of every group of 2..``max_size`` members
    (all pairs; 0 for the other groups); with a ``disp`` of one value per record, each
    member's distance ``sqrt(dx*dx + dy*dy)`` to its group's representative
    ``rx[pos[g]]``, ``ry[pos[g]]`` filled in on the way (left where ``pos[g]`` is -1)."""
    n_groups = start.size - 1
    out = np.zeros(n_groups)
    for g in range(n_groups):
        a, b = start[g], start[g + 1]
        if disp.size and pos[g] >= 0:
            gx, gy = rx[pos[g]], ry[pos[g]]
            for i in range(a, b):
                dx = x[order[i]] - gx
                dy = y[order[i]] - gy
                disp[order[i]] = math.sqrt(dx * dx + dy * dy)
        if b - a < 2 or b - a > max_size:
            continue
        best = 0.0
        for i in range(a, b - 1):
            xi, yi = x[order[i]], y[order[i]]
            for j in range(i + 1, b):
                dx = xi - x[order[j]]
                dy = yi - y[order[j]]
                d2 = dx * dx + dy * dy
                if d2 > best:
                    best = d2
        out[g] = math.sqrt(best)
    return out


def _hull_diameters(
    g: NDArray[np.int64], xs: NDArray[np.float64], ys: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Largest distance between two points of each of the groups ``0..g.max()`` (``g``
    sorted; every group present): all pairs of its convex hull's vertices."""
    import shapely

    n = int(g[-1]) + 1
    hulls = shapely.convex_hull(shapely.multipoints(np.column_stack([xs, ys]), indices=g))
    coords, index = shapely.get_coordinates(hulls, return_index=True)
    starts = np.searchsorted(index, np.arange(n + 1))
    sizes = np.diff(starts)
    out = np.zeros(n)
    # every pair of hull vertices within a group, a block of groups at a time
    block = 1 << 22
    j0 = 0
    while j0 < n:
        pairs = np.cumsum(sizes[j0:] ** 2)
        j1 = j0 + max(1, int(np.searchsorted(pairs, block, side="right")))
        h = sizes[j0:j1]
        first = np.repeat(np.arange(j0, j1), h * h)
        within = np.arange(first.size) - np.repeat(np.cumsum(h * h) - h * h, h * h)
        hh = np.repeat(h, h * h)
        a = starts[first] + within // hh
        b = starts[first] + within % hh
        d = coords[a] - coords[b]
        dist = np.sqrt((d * d).sum(axis=1))
        best = np.zeros(j1 - j0)
        np.maximum.at(best, first - j0, dist)
        out[j0:j1] = best
        j0 = j1
    return out


def _displacements(
    gid: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    published_ids: NDArray[np.int64],
    n_ids: int,
) -> NDArray[np.float64]:
    """Distance from each record to its group's published representative (NaN: the
    record is in no published group; :func:`_members_figures`)."""
    return _members_figures(gid, x, y, n_ids, (gx, gy, published_ids))[1]


def _read_columns(path: Path, columns: list[str]) -> dict[str, NDArray[Any]]:
    """Columns of a parquet file as numpy arrays (nulls of an integer column read -1),
    read one column at a time with pyarrow (no pandas frame, no other column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    out: dict[str, NDArray[Any]] = {}
    for name in columns:
        col = pf.read(columns=[name]).column(0)
        if col.null_count and pa.types.is_integer(col.type):
            out[name] = _fill_null(col.combine_chunks(), -1)
        else:
            out[name] = col.to_numpy()
        del col
    pa.default_memory_pool().release_unused()
    return out


def _suppressed_rows(path: Path) -> NDArray[np.bool_]:
    """Whether each audit row's ``disposal`` is ``suppressed`` (read as a dictionary
    column: its codes are compared with the code of ``suppressed``, not every text)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.ParquetFile(path, read_dictionary=["disposal"]).read(columns=["disposal"])[0]
    parts = []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            code = chunk.dictionary.index("suppressed").as_py()
            hit = pc.equal(chunk.indices, code) if code >= 0 else pa.nulls(len(chunk), pa.bool_())
        else:
            hit = pc.equal(chunk, "suppressed")
        parts.append(pc.fill_null(hit, False).to_numpy(zero_copy_only=False))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _fill_null(arr: Any, fill: int) -> NDArray[Any]:
    """An integer arrow array as numpy with ``fill`` where null (from its buffers: the
    values and the validity bitmap, without a pass through pyarrow's compute)."""
    validity, data = arr.buffers()[:2]
    dtype = np.dtype(arr.type.to_pandas_dtype())
    values = np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    bits = np.frombuffer(validity, dtype=np.uint8)
    valid = np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset :]
    return np.where(valid.view(bool), values.astype(np.int64, copy=False), fill)


def _unit_outlines(audit: Mapping[str, Any], crs: str | None) -> tuple[Any, str | None, str]:
    """(GeoDataFrame in ``crs`` or None, id column, note for the page)."""
    opts = audit.get("read_options") or {}
    path = opts.get("units")
    if not path:
        return (
            None,
            None,
            "The release was made with a unit column, not unit polygons (--units FILE), so no "
            "unit outlines are drawn (outlines are never made up from the members' locations).",
        )
    try:
        import geopandas as gpd

        frame = gpd.read_file(path)
        if crs and frame.crs is not None:
            frame = frame.to_crs(crs)
    except Exception:  # a moved or unreadable file: say so
        return (
            None,
            None,
            f"The unit polygon file {Path(str(path)).name!r} could not be read, "
            "so no unit outlines are drawn.",
        )
    id_col = opts.get("unit_id")
    if not id_col or id_col not in frame.columns:
        cols = [c for c in frame.columns if c != "geometry"]
        id_col = cols[0] if cols else None
    if id_col is None:
        return None, None, "The unit polygon file has no id column, so no outlines are drawn."
    return frame, str(id_col), f"Unit outlines from {Path(str(path)).name}."


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------


_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)


def _page(title: str, body: list[str], script: bool = False) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{REPORT_STYLE}</style></head><body><main>",
        *body,
        "</main>",
    ]
    if script:
        parts.append(f"<script>{REPORT_SCRIPT}</script>")
    parts += ["</body></html>", ""]
    return "\n".join(parts)


def _card(n: object, text: str) -> str:
    return f'<div class="card"><div class="n">{_esc(n)}</div><div class="t">{text}</div></div>'


def _checks_table(results: list[tuple[str, bool | None]]) -> str:
    rows = []
    for name, ok in results:
        cls, text = ("pass", "passed") if ok else ("fail", "FAILED")
        if ok is None:
            cls, text = "fail", "not checked"
        rows.append(
            f'<tr><td class="l"><code>{html.escape(name)}</code></td>'
            f'<td class="r {cls}">{text}</td>'
            f'<td class="l">{html.escape(CHECK_TEXT.get(name, ""))}</td></tr>'
        )
    return (
        '<table class="checks"><thead><tr><th class="l">check</th><th>result</th>'
        '<th class="l">holds when</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>"
    )


def _check_results(
    manifest: Mapping[str, Any],
    verification: VerificationReport | Mapping[str, bool] | None,
    deterministic: bool | None,
) -> list[tuple[str, bool | None]]:
    from geokanon.verify import CHECKS, VerificationReport

    if isinstance(verification, VerificationReport):
        got: dict[str, bool] = verification.as_dict()
    elif verification is not None:
        got = dict(verification)
    else:
        got = dict(manifest.get("verification") or {})
    if deterministic is not None:
        got["deterministic"] = bool(deterministic)
    names = [*CHECKS[:-1], "deterministic", CHECKS[-1]]
    names += [n for n in got if n not in names]
    return [(n, got.get(n)) for n in names]


def _unit_rows(
    units: pd.DataFrame, audit: Mapping[str, Any], cap: float
) -> tuple[list[dict[str, Any]], dict[str, tuple[int, str]]]:
    share = {str(r["unit"]): float(r.get("share") or 0.0) for r in audit.get("per_unit", [])}
    rows = []
    bands: dict[str, tuple[int, str]] = {}
    records: list[dict[str, Any]] = [
        {str(c): v for c, v in r.items()} for r in units.to_dict("records")
    ]
    for r in records:
        uid = str(r["unit"])
        band = share_band(r["suppressed"], share.get(uid, 0.0), cap)
        bands[uid] = band
        rows.append({**r, "unit": uid, "_band": band})

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        s = str(r["suppressed"])
        sv = 0.5 if s == LT_K else (float(s) if s.isdigit() else 0.0)
        g = str(r.get("generalised_up", 0))
        gv = 0.5 if g == LT_K else (float(g) if g.isdigit() else 0.0)
        return (-r["_band"][0], -sv, -gv, r["unit"])

    rows.sort(key=key)
    return rows, bands


def _sort_value(v: object) -> str:
    s = str(v)
    if s == LT_K:
        return "0.5"
    if s == WITHHELD:
        return "-1"
    return s


def _units_table(rows: list[dict[str, Any]], has_total: bool, has_up: bool) -> str:
    head = ["unit", "released records", "suppressed (subjects)", "suppressed share"]
    if has_up:
        head.insert(2, "generalised to a coarser level (subjects)")
    if has_total:
        head.insert(1, "source total")
    th = "".join(
        f'<th class="{"l" if i == 0 else ""}">{html.escape(h)}</th>' for i, h in enumerate(head)
    )
    body = []
    for r in rows:
        cells = [f'<td class="l" data-v="{html.escape(r["unit"])}">{html.escape(r["unit"])}</td>']
        if has_total:
            t = r.get("source_total")
            cells.append(f'<td data-v="{_sort_value(t)}">{_esc(t)}</td>')
        for col in ("released", "generalised_up", "suppressed"):
            if col == "generalised_up" and not has_up:
                continue
            raw = r.get(col)
            v: object = int(str(raw)) if str(raw).isdigit() else raw
            cells.append(f'<td data-v="{_sort_value(v)}">{_esc(v)}</td>')
        rank, text = r["_band"]
        cells.append(f'<td data-v="{rank}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="scroll"><table class="sortable units"><thead><tr>{th}</tr></thead><tbody>'
        + "".join(body)
        + "</tbody></table></div>"
    )


def _pass_rows(manifest: Mapping[str, Any], k: int) -> list[dict[str, int | str]]:
    hidden = not isinstance((manifest.get("counts") or {}).get("suppressed"), int)
    rows: list[dict[str, int | str]] = []
    for p in manifest.get("passes", []):
        labels = p.get("labels", {})
        row: dict[str, int | str] = {"pass": int(p.get("pass", len(rows) + 1))}
        over_published = p.get("scope") == PASS_SCOPE  # counts of published records only
        for lab in LABEL_COLOURS:
            raw = labels.get(lab) or 0
            if lab == "suppress" and hidden and not over_published:
                row[lab] = WITHHELD  # even 0: the column would give the hidden figure away
            elif isinstance(raw, int | float) and not isinstance(raw, bool):
                # Counts of published records are published exactly in the manifest; shown
                # as "<k" here they would read as a hidden figure the manifest pins.
                row[lab] = int(raw) if over_published else _mask_count(int(raw), k)
            else:
                row[lab] = str(raw)  # already masked in the manifest
        changed = p.get("changed", 0)
        row["changed"] = int(changed) if isinstance(changed, int | float) else str(changed)
        rows.append(row)
    return rows


def _passes_note(manifest: Mapping[str, Any]) -> str:
    passes = manifest.get("passes", [])
    if passes and all(p.get("scope") == PASS_SCOPE for p in passes):
        return (
            '<p class="mute">Each pass counted over the records published at group level '
            "only (they took part in every pass): counts over all records would give the "
            "number of input records, and with it the suppressed ones.</p>"
        )
    rounding = {str(p.get("labels_rounding")) for p in passes} - {"None"}
    if not rounding:
        return ""
    return (
        f'<p class="mute">Label counts per pass as published in the manifest: '
        f"{html.escape(', '.join(sorted(rounding)))}.</p>"
    )


def _time_row(manifest: Mapping[str, Any], k: int) -> dict[str, int | str] | None:
    """Pass 1's records per label that have it only because of time, as published."""
    passes = manifest.get("passes") or []
    first = passes[0] if passes and isinstance(passes[0], Mapping) else {}
    by_time = first.get("because_of_time")
    if not isinstance(by_time, Mapping):
        return None
    hidden = not isinstance((manifest.get("counts") or {}).get("suppressed"), int)
    over_published = first.get("scope") == PASS_SCOPE  # counts of published records only
    row: dict[str, int | str] = {"pass": "1: only because of time", "changed": ""}
    for lab in LABEL_COLOURS:
        raw = by_time.get(lab) or 0
        if lab == "suppress" and hidden and not over_published:
            row[lab] = WITHHELD
        elif isinstance(raw, int | float) and not isinstance(raw, bool):
            row[lab] = int(raw) if over_published else _mask_count(int(raw), k)
        else:
            row[lab] = str(raw)
    return row


def _passes_table(
    rows: list[dict[str, int | str]], time_row: dict[str, int | str] | None = None
) -> str:
    head = ["pass", "ok", "merge", "generalise", "suppress", "labels changed"]
    th = "".join(f"<th>{h}</th>" for h in head)
    shown = rows[:1] + ([time_row] if time_row is not None else []) + rows[1:]
    body = "".join(
        "<tr>"
        + "".join(f"<td>{_esc(r[c])}</td>" for c in ("pass", *LABEL_COLOURS, "changed"))
        + "</tr>"
        for r in shown
    )
    table = f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    if time_row is None:
        return table
    return table + (
        '<p class="mute">With times, space and time are judged together (k-1 other subjects '
        "within r_max and t_max at once); the row under pass 1 counts the records whose label "
        "is worse than their spatial ratio alone gives.</p>"
    )


def _bias_section(manifest: Mapping[str, Any]) -> list[str]:
    findings = list(manifest.get("bias") or [])
    if not findings:
        return [
            "<p>No attribute was compared (no attribute columns were kept with --keep), so "
            "nothing can be said about who the suppressed and generalised records were.</p>"
        ]
    sig = [f for f in findings if f.get("significant")]
    rest = [f for f in findings if not f.get("significant")]
    out = []
    if sig:
        out.append("<p>Suppressed records differ from the retained ones:</p><ul>")
        out += [
            f'<li class="sig">{html.escape(str(f.get("sentence", "")))}'
            f' <span class="mute">({html.escape(str(f.get("stratum", "all")))})</span></li>'
            for f in sig
        ]
        out.append("</ul>")
    else:
        out.append("<p>No significant difference between suppressed and retained records.</p>")
    if rest:
        out.append(
            f"<details><summary>{len(rest)} comparisons with no significant difference "
            "or too few records to compare</summary><ul>"
        )
        out += [f"<li>{html.escape(str(f.get('sentence', '')))}</li>" for f in rest]
        out.append("</ul></details>")
    return out


def _mask_section(manifest: Mapping[str, Any]) -> list[str]:
    """The geomask and its spatial k-anonymity (aggregates only), when a mask was applied."""
    mask = manifest.get("mask")
    risk = manifest.get("mask_risk")
    if not mask or not isinstance(risk, Mapping):
        return []
    kind = html.escape(str(mask.get("kind", "")))
    if mask.get("kind") == "jitter":
        what = f"a Gaussian jitter of {float(mask.get('sd_m') or 0):g} m standard deviation"
    else:
        what = (
            f"a donut mask of {float(mask.get('min_m') or 0):g} to "
            f"{float(mask.get('max_m') or 0):g} m"
        )
    k = int(manifest.get("k", 0))
    share = float(risk.get("share_below_k", 0.0))
    return [
        "<h2>The mask</h2>",
        f"<p>Every record was displaced by {html.escape(what)} ({kind}) before classification; "
        "grouping and every check used the masked locations. Re-identification check after "
        "masking: for each record, the number of other subjects whose true location is as "
        "close to its masked location as its own true location is, or closer. "
        f"{share:.1%} of records have fewer than k-1 = {k - 1} such records (median "
        f"{float(risk.get('median', 0)):g}); an adversary who knew everyone else's true "
        "address could single those out from the mask alone. The published groups add the "
        f"group's protection on top (at least k = {k} subjects per published location).</p>",
        "<p>The mask's key is secret: the custodian keeps it with the audit and it is not "
        "published. The seed shown below only breaks ties; it cannot redraw or undo the "
        "mask.</p>",
    ]


def _held_text(manifest: Mapping[str, Any], pol: Mapping[str, Any]) -> str:
    """The radius groups were held to in working-CRS metres, and the scale behind it."""
    try:
        r = float(manifest.get("r_max_m") or 0.0)
        s = float(pol.get("scale_factor_min", 1.0))
    except (TypeError, ValueError):
        return "not stated"
    if s >= 1.0:
        return f"{r:g} m (the working CRS's scale is at least 1 over the data)"
    return f"{r * s:.2f} m (the working CRS's smallest scale factor over the data is {s:.7g})"


def _duplicates_text(dup: Any) -> str:
    """The manifest's ``duplicates`` in words: how many exact copies, and their fate."""
    if not isinstance(dup, Mapping):
        return "not checked"
    if not dup.get("copies"):
        return "none"
    n = f"{int(dup['copies']):,}"
    if dup.get("removed"):
        return f"{n}, removed before anything else (--drop-duplicates)"
    if dup.get("subject_column"):
        return f"{n}, kept (each a record of its subject)"
    return f"{n}, kept (no subject ids: each counted as a subject of its own)"


def _input_filter_rows(entry: Any) -> list[tuple[str, object]]:
    """Parameter rows for the units left out, the records clipped and the units merged."""
    if not isinstance(entry, Mapping):
        return []
    rows: list[tuple[str, object]] = []
    if entry.get("excluded_units"):
        rows.append(
            (
                "units left out (--exclude-units)",
                f"{', '.join(entry['excluded_units'])}: {entry.get('excluded_records')} records",
            )
        )
    if entry.get("clipped_records") not in (None, 0):
        rows.append(("records outside the study area (--clip)", entry.get("clipped_records")))
    merges = entry.get("unit_merges") or {}
    if merges:
        listed = ", ".join(f"{a} -> {b}" for a, b in sorted(merges.items()))
        rows.append(
            (f"units merged (--merge-small-units {entry.get('merge_small_units')})", listed)
        )
    if entry.get("units_left_small"):
        rows.append(
            ("units below the threshold, no neighbour", ", ".join(entry["units_left_small"]))
        )
    return rows


def _params_section(manifest: Mapping[str, Any]) -> list[str]:
    pol = dict(manifest.get("policy") or {})
    rows: list[tuple[str, object]] = [
        ("software", f"geokanon {manifest.get('version', '?')}"),
        ("format", manifest.get("format", "")),
        ("seed", manifest.get("seed")),
        ("k", manifest.get("k")),
        ("r_max", f"{manifest.get('r_max_m')} m"),
        ("r_max held on the map (it holds on the ground)", _held_text(manifest, pol)),
        ("tau (global cap)", manifest.get("tau")),
        ("unit cap", manifest.get("unit_cap")),
        ("merge / generalise ratios", f"{pol.get('merge_ratio')} / {pol.get('generalise_ratio')}"),
        ("CRS of published coordinates", _crs_text(manifest)),
        ("totals", manifest.get("totals", "")),
        ("kept attributes", ", ".join(manifest.get("keep") or []) or "none"),
        ("exact copies in the input", _duplicates_text(manifest.get("duplicates"))),
        (
            "subject ids merged (spellings of another id: case, spacing, Unicode form)",
            manifest.get("subject_ids_merged", "not recorded"),
        ),
        *_input_filter_rows(manifest.get("input_filter")),
    ]
    par = "".join(
        f'<tr><td class="l">{html.escape(a)}</td><td class="l"><code>{_esc(b)}</code></td></tr>'
        for a, b in rows
    )
    files = manifest.get("files") or {}
    fr = "".join(
        f'<tr><td class="l"><code>{html.escape(str(n))}</code></td>'
        f'<td class="l hash"><code>{html.escape(str(h))}</code></td></tr>'
        for n, h in sorted(files.items())
        if n != "report.html"
    )
    policy = html.escape(json.dumps(pol, sort_keys=True))
    return [
        '<div class="grid2"><div>',
        '<table class="params"><thead><tr><th class="l">parameter</th><th class="l">value</th>'
        f"</tr></thead><tbody>{par}</tbody></table>",
        f"<details><summary>full policy</summary><p><code>{policy}</code></p></details></div><div>",
        '<table class="params"><thead><tr><th class="l">file</th><th class="l">sha256</th></tr>'
        f"</thead><tbody>{fr}</tbody></table>",
        "<p class=\"mute\">This page's own checksum and the input file's checksum "
        "(<code>input_sha256</code>) are in manifest.json: a page cannot hold its own checksum, "
        "and the page does not depend on the input's row order or file bytes, only on the "
        "release.</p></div></div>",
    ]


SYNTHETIC_CARD = (
    "synthetic records standing in for suppressed subjects (in the released counts; "
    "never towards k)"
)


@dataclass(frozen=True)
class _Distributions:
    """What the report draws of the audit's records: published histogram bins, the
    published groups' diameters and the displacement summary."""

    iota_bins: list[Bin]
    diameters: NDArray[np.float64]
    displacement_bins: list[Bin]
    displacement_summary: str


def _distributions(
    pool: ThreadPoolExecutor,
    assignment: Path,
    gx: NDArray[np.float64],
    gy: NDArray[np.float64],
    published_ids: NDArray[np.int64],
    manifest: Mapping[str, Any],
    held: Mapping[str, NDArray[Any]],
) -> Callable[[], _Distributions]:
    """Start reading the audit's columns (each when it is needed) and counting what the
    distribution figures show, in ``pool`` (two threads: the displacements and diameters
    of the groups' members in one, the isolation ratios in the other); return what waits
    for the result. ``gx``, ``gy``: the published representatives in the working CRS, in
    the order of ``published_ids``; ``held``: audit columns the caller holds (not read)."""
    k = int(manifest["k"])
    r_max = float(manifest["r_max_m"])

    def column(name: str, dtype: type) -> NDArray[Any]:
        if name in held:
            return np.asarray(held[name]).astype(dtype, copy=False)
        return _read_columns(assignment, [name])[name].astype(dtype, copy=False)

    subjects = pool.submit(column, "subject", np.int64)

    def of_groups() -> tuple[NDArray[np.float64], list[Bin], str]:
        gid = column("group_id", np.int64)
        xm, ym = column("x_m", np.float64), column("y_m", np.float64)
        n_ids = max(
            int(gid.max()) + 1 if gid.size else 0,
            int(published_ids.max()) + 1 if published_ids.size else 0,
        )
        diam, disp = _members_figures(gid, xm, ym, n_ids, (gx, gy, published_ids))
        diam = diam[published_ids]
        del gid, xm, ym
        subj = subjects.result()
        return (
            diam,
            _displacement_bins(disp, subj, r_max, k),
            _displacement_summary(disp, subj, r_max, k),
        )

    def of_iota() -> list[Bin]:
        iota = column("iota", np.float64)
        if _iota_hidden(manifest):
            # Over all records, the bars would add up to the input size less the records
            # above the generalise threshold: with the released counts a lower bound of the
            # hidden suppressed total (exact when no record is above it). Only published
            # records count.
            iota = np.where(_suppressed_rows(assignment), np.nan, iota)
        return _iota_bins(iota, subjects.result(), manifest)

    groups = pool.submit(of_groups)
    iota = pool.submit(of_iota)

    def result() -> _Distributions:
        diam, displacement_bins, summary = groups.result()
        return _Distributions(iota.result(), diam, displacement_bins, summary)

    return result


def report_html(
    directory: str | os.PathLike[str],
    *,
    verification: VerificationReport | Mapping[str, bool] | None = None,
    deterministic: bool | None = None,
    progress: Callable[..., None] | None = None,
    audit_columns: Mapping[str, NDArray[Any]] | None = None,
) -> str:
    """The release report of a release directory, as HTML text.

    Parameters
    ----------
    directory
        A release directory (``release/`` and ``audit/``), final or being built.
    verification
        The checks' results (a :class:`~geokanon.verify.VerificationReport` or
        name -> passed); default: the manifest's ``verification``.
    deterministic
        Result of the determinism check, when it was run.
    progress
        Hears the steps (``geokanon._progress``): ``read release``, ``displacements
        and diameters``, ``units and map``, ``charts and page``.
    audit_columns
        Columns of ``audit/assignment.parquet`` (``group_id`` with -1 for none,
        ``x_m``, ``y_m``, ``subject``, ``iota``) that the caller holds in memory as it
        wrote them (the release writer): used instead of reading them back.

    Returns
    -------
    str
        A self-contained HTML page.
    """
    say = progress if progress is not None else (lambda *_a, **_k: None)
    say("read release")
    root = Path(directory)
    rel, aud = root / "release", root / "audit"
    manifest = json.loads((rel / "manifest.json").read_text(encoding="utf-8"))
    audit = json.loads((aud / "audit.json").read_text(encoding="utf-8"))
    units = pd.read_csv(rel / "units.csv", dtype=str, keep_default_na=False)
    groups = _read_columns(rel / "groups.parquet", ["group_id", "n_records", "x", "y"])
    assignment = aud / "assignment.parquet"
    k = int(manifest["k"])
    r_max = float(manifest["r_max_m"])
    cap = float(manifest["unit_cap"])
    tau = float(manifest["tau"])
    counts = manifest.get("counts") or {}
    syn = manifest.get("synthetic") or {}
    working = audit.get("working_crs") or manifest.get("crs")
    output = audit.get("output_crs") or manifest.get("crs")

    # Working-CRS positions of the representatives (maps and displacement are in metres).
    gx = groups["x"].astype(np.float64, copy=False)
    gy = groups["y"].astype(np.float64, copy=False)
    tr = _transformer(output, working)
    if tr is not None and gx.size:
        gx, gy = (np.asarray(a, dtype=np.float64) for a in tr.transform(gx, gy))
    n_rec = groups["n_records"].astype(np.int64, copy=False)
    published_ids = groups["group_id"].astype(np.int64, copy=False)
    # The distributions are read from the audit and counted in a second thread (pyarrow
    # and the compiled kernels release the interpreter lock) while this one draws the maps.
    pool = ThreadPoolExecutor(max_workers=2)
    numbers = _distributions(pool, assignment, gx, gy, published_ids, manifest, audit_columns or {})
    pool.shutdown(wait=False)

    results = _check_results(manifest, verification, deterministic)
    all_ok = all(ok for _, ok in results if ok is not None) and all(
        ok is not None for n, ok in results if n != "deterministic"
    )
    say("units and map")
    unit_rows, bands = _unit_rows(units, audit, cap)
    outlines, id_col, outline_note = _unit_outlines(audit, working)
    if outlines is not None and id_col is not None:
        mine = outlines[outlines[id_col].astype(str).isin(set(units["unit"]))]
        if len(mine):
            import shapely

            box = shapely.box(*mine.total_bounds)
            outlines = outlines[outlines.intersects(box)]
            outlines = outlines.clip(box) if len(outlines) > len(mine) else outlines
    groups_map, groups_note = _groups_map(gx, gy, n_rec, outlines, k)
    del gx, gy, n_rec
    if outlines is not None and id_col is not None:
        units_map = _choropleth(outlines, id_col, bands, cap)
    else:
        units_map = f"<h3>Units by suppressed share</h3>{_band_chart(bands, cap)}"
    passes_figure = _passes_figure(_pass_rows(manifest, k), k)
    say("displacements and diameters")
    dist = numbers()
    sup = counts.get("suppressed", 0)
    share = manifest.get("suppressed_share")
    share_text = f"{100 * share:.2f} %" if isinstance(share, int | float) else str(share)
    grouped = int(counts.get("grouped", 0)) + int(counts.get("merged", 0))

    say("charts and page")
    body: list[str] = [
        "<h1>geokanon release report</h1>",
        f'<p class="mute">geokanon {_esc(manifest.get("version", "?"))} · seed '
        f"{_esc(manifest.get('seed'))} · CRS {_esc(_crs_text(manifest))}</p>",
    ]
    verdict = "RELEASED" if all_ok else "NOT VERIFIED"
    body += [
        f'<section class="verdict {"ok" if all_ok else "bad"}" id="verdict">'
        f'<div class="big">{verdict}</div><div>',
        f"<p>Policy: k = {k} distinct subjects per published group or class, r_max = "
        f"{r_max:g} m, global cap tau = {100 * tau:g} %, unit cap = {100 * cap:g} %.</p>",
        f"<p>{sum(1 for _, ok in results if ok)} of {len(results)} independent checks passed."
        + ("" if all_ok else " A release that fails a check must not be published.")
        + "</p></div></section>",
        '<div class="cards">',
        _card(
            grouped,
            f"records published at group level, in {_fmt(manifest.get('groups', 0))} groups",
        ),
        _card(counts.get("merged", 0), "of them joined a group from the edge (merged)"),
        _card(counts.get("generalised", 0), "records generalised to a unit or the whole area"),
        _card(sup, "suppressed subjects (published figure)"),
        _card(share_text, f"suppressed share (cap {100 * tau:g} %)"),
        *([_card(syn.get("total", 0), SYNTHETIC_CARD)] if syn.get("allowed") else []),
        "</div>",
        "<h2>Checks</h2>",
        _checks_table(results),
        '<p class="mute">Figures below k read <code>&lt;k</code>; <code>withheld</code> marks '
        "a figure that, with the others, would reveal a smaller one. The checks ran on the "
        "release files with this page and the manifest in place, as published (the release "
        "is not written unless each result is the one shown here).</p>",
        "<h2>Map</h2>",
        '<div class="grid2">',
        f'<div class="panel" id="map-groups">{groups_map}</div>',
    ]
    body.append(f'<div class="panel" id="map-units">{units_map}</div>')
    n_gen = counts.get("generalised", 0)
    body += [
        "</div>",
        f'<p class="mute">{html.escape(outline_note)} {html.escape(groups_note)} '
        f"Generalised records ({_esc(n_gen)}) are published only as counts of their unit or "
        "the whole area and suppressed records are not published: neither is drawn "
        "anywhere. Shares are shown as bands of the unit cap, and only where the unit's "
        "suppressed figure is a published number.</p>",
        "<h2>Distributions</h2>",
        '<div class="grid2">',
        '<div class="panel" id="plot-iota"><h3>Isolation ratios and the thresholds'
        + ("" if isinstance(counts.get("suppressed"), int) else " (published records)")
        + "</h3>"
        f"{_iota_figure(dist.iota_bins, manifest)}</div>",
        '<div class="panel" id="plot-diameter"><h3>Group diameters against r_max</h3>'
        f"{_diameter_figure(dist.diameters, r_max)}</div>",
        '<div class="panel" id="plot-displacement"><h3>Displacement of records published at '
        f"group level</h3>{_displacement_figure(dist.displacement_bins, r_max)}"
        f'<p class="mute">{dist.displacement_summary}</p></div>',
        '<div class="panel" id="plot-passes"><h3>Labels per fixed-point pass</h3>'
        f"{passes_figure}"
        f"{_passes_table(_pass_rows(manifest, k), _time_row(manifest, k))}"
        f"{_passes_note(manifest)}</div>",
        "</div>",
        '<p class="mute">Histograms of records merge adjacent bins until each holds 0 or at '
        f"least k = {k} distinct subjects; group diameters are counted in groups (each holds "
        "at least k subjects). See docs/report.md.</p>",
        "<h2>Per unit (worst first; click a heading to sort)</h2>",
        _units_table(unit_rows, "source_total" in units.columns, "generalised_up" in units.columns),
        "<h2>Who is missing</h2>",
        *_bias_section(manifest),
        *_mask_section(manifest),
        "<h2>Parameters and checksums</h2>",
        *_params_section(manifest),
    ]
    return _page("geokanon release report", body, script=True)


def _write_atomic(path: Path, text: str) -> None:
    from geokanon._outdir import replace_file

    replace_file(path, text)


#: The plotting modules the report draws with (a figure, its text and patches, and the
#: SVG and PNG backends ``savefig`` picks), imported ahead by :func:`preload_plotting`.
_PLOTTING = (
    "matplotlib.figure", "matplotlib.patches", "matplotlib.colors",
    "matplotlib.backends.backend_svg", "matplotlib.backends.backend_agg",
)  # fmt: skip


def preload_plotting() -> threading.Thread | None:
    """Import the plotting modules the report draws with in a daemon thread, while the
    release's files are made: the report, which comes after them, finds them loaded
    (some 0.25 s of imports, otherwise on the report's own path).

    Only modules are imported: no figure is drawn and matplotlib's settings are not
    touched (the report sets them while it draws), so the page is the same with or
    without it. An import that fails here is left to the report, which meets it itself.

    Returns
    -------
    threading.Thread or None
        The thread (already started), or ``None`` when the modules are loaded already.
    """
    if all(name in sys.modules for name in _PLOTTING):
        return None

    def load() -> None:
        import importlib

        for name in _PLOTTING:
            try:
                importlib.import_module(name)
            except Exception:  # the report imports it again, and meets the error itself
                return

    thread = threading.Thread(target=load, name="geokanon-preload-plotting", daemon=True)
    thread.start()
    return thread


def build_report(
    directory: str | os.PathLike[str],
    *,
    verification: VerificationReport | Mapping[str, bool] | None = None,
    deterministic: bool | None = None,
    progress: Callable[..., None] | None = None,
    audit_columns: Mapping[str, NDArray[Any]] | None = None,
) -> Path:
    """Write ``release/report.html`` of a release directory.

    Parameters
    ----------
    directory
        The directory holding ``release/`` and ``audit/`` (the writer's temporary
        build directory or a finished release).
    verification
        The checks' results; default: the manifest's recorded ``verification``.
    deterministic
        Result of the determinism check, when it was run.
    progress
        Hears the steps of :func:`report_html` (``geokanon._progress``).
    audit_columns
        Audit columns the caller holds as it wrote them (:func:`report_html`).

    Returns
    -------
    Path
        The page written.

    Examples
    --------
    >>> build_report("out/dwellings")  # doctest: +SKIP
    PosixPath('out/dwellings/release/report.html')
    """
    import matplotlib

    path = Path(directory) / "release" / "report.html"
    with matplotlib.rc_context({"font.size": 8, "hatch.linewidth": 0.6}):
        text = report_html(
            directory, verification=verification, deterministic=deterministic,
            progress=progress, audit_columns=audit_columns,
        )  # fmt: skip
    _write_atomic(path, text)
    return path


#: Files ``rebuild_report`` writes (copied into its build, never hard-linked).
_REBUILT = ("report.html", "RELEASE_NOTES.md", "manifest.json")


def rebuild_report(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, bool]]:
    """Rebuild ``release/report.html`` of a finished release and update its checksums.

    The page shows the checks recorded in the manifest. The checks that read the
    page (``no_leak``, ``report_safety``, ``manifest``) run again on the audit (no
    source is needed); when one fails, the previous page and manifest are put back.

    Parameters
    ----------
    directory
        The release directory (``release/`` and ``audit/``).

    Returns
    -------
    tuple
        The page's path and the rerun checks' results (name -> passed).

    Raises
    ------
    InputError
        ``directory`` is not a release directory.
    """
    from geokanon.errors import InputError
    from geokanon.release import finish_manifest
    from geokanon.verify import verify_release

    root = Path(directory)
    rel = root / "release"
    needed = [rel / "manifest.json", root / "audit" / "audit.json", rel / "units.csv"]
    if not all(p.is_file() for p in needed):
        raise InputError(
            f"{str(root)!r} is not a geokanon release directory (needs release/manifest.json, "
            "release/units.csv and audit/audit.json)"
        )
    from geokanon._outdir import claim

    # The page and the manifest change together: they are written into a build that
    # starts as hard links of the release (real copies of the files written here) and
    # replaces it in one step; a failed check or a killed run leaves the release as it was.
    with claim(root, force=True, what="report") as held:
        with held.build(seed=frozenset(f"release/{n}" for n in _REBUILT)) as build:
            tmp = build.path
            manifest = json.loads((tmp / "release" / "manifest.json").read_bytes())
            build_report(tmp)
            finish_manifest(tmp, manifest)
            results = verify_release(tmp, checks=RECHECKED).as_dict()
            build.install = all(results.values())
    return rel / "report.html", results


# --------------------------------------------------------------------------------------
# Refusal report
# --------------------------------------------------------------------------------------


def refusal_report_path(out: str | os.PathLike[str]) -> Path:
    """Where the refusal report of a release to ``out`` goes: ``<out>.refusal.html`` beside it.

    Examples
    --------
    >>> refusal_report_path("runs/dwellings").as_posix()
    'runs/dwellings.refusal.html'
    """
    p = Path(out)
    return p.parent / f"{p.name}.refusal.html"


def _units_over_figure(over: list[Mapping[str, Any]], cap: float) -> str:
    rows = sorted(over, key=lambda u: (-float(u.get("share", 0)), str(u.get("unit"))))[:30]
    fig = _figure(6.4, max(1.6, 0.28 * len(rows) + 1.0))
    ax = fig.subplots()
    names = [str(u.get("unit")) for u in rows][::-1]
    shares = [100 * float(u.get("share", 0)) for u in rows][::-1]
    ax.barh(range(len(rows)), shares, color="#D55E00")
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.axvline(100 * cap, color="black", lw=1.2, ls="--")
    ax.text(
        100 * cap,
        1.0,
        f" unit cap {_pct_g(cap)} %",
        transform=ax.get_xaxis_transform(),
        fontsize=7,
        va="bottom",
    )
    ax.set_xlabel("suppressed share of the unit's subjects (%)", fontsize=8)
    ax.set_xlim(0, max([*shares, 100 * cap]) * 1.1)
    _style(ax)
    return _svg(fig, "suppressed share of each unit over the unit cap")


def refusal_html(
    message: str,
    figures: Mapping[str, Any],
    *,
    policy: Mapping[str, Any] | None = None,
    version: str = "",
    input_sha256: str | None = None,
) -> str:
    """The refusal report as HTML text (figures and diagnosis, no coordinates).

    Parameters
    ----------
    message
        The refusal's diagnosis (``str(ReleaseRefused)``).
    figures
        ``ReleaseRefused.figures``: ``suppressed_share``, ``tau``, ``unit_cap``,
        ``units_over_cap`` (``unit``, ``subjects``, ``share``), ``what_if_first_pass``.
    policy
        The policy (``OutlierPolicy.to_dict()``).
    version, input_sha256
        Software version and input checksum, for the record.

    Returns
    -------
    str
    """
    pol = dict(policy or {})
    tau = figures.get("tau", pol.get("tau"))
    cap = figures.get("unit_cap", pol.get("unit_cap"))
    share = figures.get("suppressed_share")
    over = list(figures.get("units_over_cap") or [])
    body = [
        "<h1>geokanon: release refused</h1>",
        f'<p class="mute">geokanon {html.escape(version)}'
        + (
            f" · input sha256 <code>{html.escape(input_sha256[:16])}…</code>"
            if input_sha256
            else ""
        )
        + " · for the data custodian: the unit figures below are exact, do not publish "
        "this page.</p>",
        '<section class="verdict bad" id="verdict"><div class="big">REFUSED</div><div>'
        f"<p>{html.escape(message)}</p></div></section>",
        '<div class="cards">',
    ]
    if isinstance(share, int | float):
        body.append(_card(f"{100 * share:.2f} %", "suppressed share of subjects"))
    if isinstance(tau, int | float):
        text = "global cap tau"
        if isinstance(share, int | float):
            text += " (met)" if share <= tau else " (BREACHED)"
        body.append(_card(f"{100 * tau:g} %", text))
    if isinstance(cap, int | float):
        text = "unit cap"
        if "units_over_cap" in figures:
            text += f" ({len(over)} units over it)"
        body.append(_card(f"{100 * cap:g} %", text))
    for key in ("k", "r_max_m"):
        if key in pol:
            body.append(_card(pol[key], key))
    body.append("</div>")
    if over and isinstance(cap, int | float):
        body += [
            "<h2>Units over the unit cap</h2>",
            f'<div class="panel" id="plot-units-over">{_units_over_figure(over, float(cap))}</div>',
            '<table><thead><tr><th class="l">unit</th><th>subjects</th>'
            "<th>suppressed share</th></tr></thead><tbody>",
            *(
                f'<tr><td class="l">{html.escape(str(u.get("unit")))}</td>'
                f"<td>{_esc(u.get('subjects'))}</td>"
                f"<td>{100 * float(u.get('share', 0)):.1f} %</td></tr>"
                for u in sorted(over, key=lambda u: -float(u.get("share", 0)))
            ),
            "</tbody></table>",
        ]
    what_if = figures.get("what_if_first_pass") or {}
    if what_if:
        rows = "".join(
            f'<tr><td class="l"><code>{html.escape(str(name))}</code></td>'
            f"<td>{100 * float(f.get('suppressed_share', 0)):.2f} %</td>"
            f"<td>{_esc(f.get('units_over_cap'))}</td>"
            f'<td class="{"pass" if f.get("passes") else "fail"}">'
            f"{'passes' if f.get('passes') else 'breaches a cap'}</td></tr>"
            for name, f in what_if.items()
        )
        body += [
            "<h2>What if (first-pass classification only)</h2>",
            '<table><thead><tr><th class="l">change</th><th>share labelled suppress</th>'
            f"<th>units over the cap</th><th>caps</th></tr></thead><tbody>{rows}</tbody></table>",
            '<p class="mute">A first pass is cheap and only indicative: the release core may '
            "still generalise or suppress more. <code>geokanon sweep</code> shows the whole "
            "trade-off.</p>",
        ]
    passes = figures.get("passes")
    if isinstance(passes, list) and passes and all(isinstance(q, Mapping) for q in passes):
        head = ["pass", "records", *LABEL_COLOURS, "labels changed"]
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{_esc(q.get(c) if c in ('pass', 'records') else q.get('labels', {}).get(c))}"
                "</td>"
                for c in head[:-1]
            )
            + f"<td>{_esc(q.get('changed'))}</td></tr>"
            for q in passes
        )
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        body += [
            "<h2>Labels per pass</h2>",
            f"<table><thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table>",
        ]
        if passes[-1].get("changed"):
            body.append(
                '<p class="mute">The labels kept changing: the last pass still changed some. A '
                "larger r_max or a smaller k gives the merges room to settle.</p>"
            )
    other = {
        k: v
        for k, v in figures.items()
        if k
        not in (
            "suppressed_share",
            "tau",
            "unit_cap",
            "units_over_cap",
            "what_if_first_pass",
            "passes",
        )
    }
    if other:
        rows = "".join(
            f'<tr><td class="l">{html.escape(str(a))}</td>'
            f'<td class="l"><code>{html.escape(json.dumps(b, default=str)[:400])}</code></td></tr>'
            for a, b in sorted(other.items())
        )
        body += ["<h2>Other figures</h2>", f"<table><tbody>{rows}</tbody></table>"]
    if pol:
        rows = "".join(
            f'<tr><td class="l">{html.escape(str(a))}</td><td class="l"><code>{_esc(b)}</code>'
            "</td></tr>"
            for a, b in sorted(pol.items())
        )
        body += ["<h2>Policy</h2>", f"<table><tbody>{rows}</tbody></table>"]
    body.append(
        '<p class="mute">No release directory was written. Fix the parameters (or the '
        "study area) and run the release again; this page is replaced or removed by the "
        "next run.</p>"
    )
    return _page("geokanon: release refused", body)


def write_refusal_report(
    out: str | os.PathLike[str],
    message: str,
    figures: Mapping[str, Any],
    *,
    policy: Mapping[str, Any] | None = None,
    version: str = "",
    input_sha256: str | None = None,
) -> Path:
    """Write the refusal report of a refused release to ``out`` (beside it, never inside).

    Parameters
    ----------
    out
        The release directory that was requested (it is not created).
    message, figures, policy, version, input_sha256
        See :func:`refusal_html`.

    Returns
    -------
    Path
        ``<out>.refusal.html`` (:func:`refusal_report_path`).
    """
    import matplotlib

    path = refusal_report_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"font.size": 8}):
        text = refusal_html(
            message, figures, policy=policy, version=version, input_sha256=input_sha256
        )
    _write_atomic(path, text)
    return path

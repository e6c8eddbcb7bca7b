"""The sweep's tau-frontier plot, CSV and self-contained HTML page.

The plot is one panel per mask level: k down the side, r_max along the bottom,
each cell coloured by which caps it passes, annotated with the global and the
worst unit's suppressed share, and the frontier (per k, the smallest passing
r_max) drawn as a line. The recommended cell has a solid outline; when no cell
passes, the cell nearest to passing (:meth:`~geokanon.sweep.SweepResult.nearest`)
has a dashed one. The HTML page embeds the SVG inline, so it is a single
file that opens anywhere and holds no link to anything outside it.

Outputs are deterministic: the same sweep gives byte-identical files.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geokanon import __version__
from geokanon.sweep import SweepCell, SweepResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["frontier_figure", "sweep_html", "write_sweep_outputs"]

#: Colours of the three outcomes (colour-blind safe, Okabe-Ito).
COLOURS = {"pass": "#009E73", "unit": "#F0E442", "global": "#D55E00"}
LEGEND = {
    "pass": "passes both caps",
    "unit": "a unit over the unit cap",
    "global": "global cap breached",
}


def _status(c: SweepCell) -> str:
    if not c.passes_global_cap:
        return "global"
    return "pass" if c.passes_unit_cap else "unit"


def _pct(share: float) -> str:
    return f"{100 * share:.2f} %"


def frontier_figure(result: SweepResult) -> Figure:
    """The tau-frontier figure: which (k, r_max) cells pass both caps, per mask level.

    Parameters
    ----------
    result
        A finished sweep.

    Returns
    -------
    matplotlib.figure.Figure
        Built with the Agg backend (no display needed).

    Examples
    --------
    >>> import numpy as np
    >>> from geokanon.policy import OutlierPolicy
    >>> from geokanon.sweep import sweep
    >>> rng = np.random.default_rng(0)
    >>> res = sweep(rng.uniform(0, 900, 300), rng.uniform(0, 900, 300), [3, 5], [30.0, 90.0],
    ...             OutlierPolicy(k=3, r_max_m=30.0))
    >>> len(frontier_figure(res).axes)
    1
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    ks, rs = result.ks, result.r_maxs
    n_masks = len(result.masks)
    width = max(5.0, 1.35 * len(rs) + 2.0)
    height = max(2.8, 0.75 * len(ks) + 1.8)
    fig = Figure(figsize=(width, height * n_masks), layout="constrained")
    axes = fig.subplots(n_masks, 1, squeeze=False)[:, 0]
    best = result.best()
    nearest = result.nearest()  # only when no cell passes
    frontier = result.best_per_k()
    for m, ax in enumerate(axes):
        for c in result.cells:
            if c.mask_index != m:
                continue
            i, j = ks.index(c.k), rs.index(c.r_max_m)
            ax.add_patch(
                Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=COLOURS[_status(c)], alpha=0.85)
            )
            ax.text(
                j, i,
                f"{_pct(c.suppressed_share)}\nworst {_pct(c.worst_unit_share)}",
                ha="center", va="center", fontsize=7.5, color="black",
            )  # fmt: skip
            if c is best or c is nearest:  # solid: recommended; dashed: nearest to passing
                style = "-" if c is best else "--"
                ax.add_patch(
                    Rectangle(
                        (j - 0.47, i - 0.47),
                        0.94,
                        0.94,
                        fill=False,
                        lw=2.5,
                        ls=style,
                        edgecolor="black",
                    )
                )
        # The frontier: the left edge of each k's smallest passing r_max, as a staircase.
        xs: list[float] = []
        ys: list[float] = []
        for i, k in enumerate(ks):
            cell = frontier[(m, k)]
            if cell is not None:
                edge = rs.index(cell.r_max_m) - 0.5
                xs += [edge, edge]
                ys += [i - 0.5, i + 0.5]
        if xs:
            ax.plot(xs, ys, color="black", lw=1.5, ls="--")
        ax.set_xlim(-0.5, len(rs) - 0.5)
        ax.set_ylim(-0.5, len(ks) - 0.5)
        ax.set_xticks(range(len(rs)), [f"{r:g}" for r in rs])
        ax.set_yticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlabel("r_max (m)")
        ax.set_ylabel("k")
        title = "tau frontier" if n_masks == 1 else f"tau frontier, mask: {result.masks[m]}"
        ax.set_title(
            f"{title} (tau {_pct(result.policy.tau)}, unit cap {_pct(result.policy.unit_cap)})",
            fontsize=9,
        )
    handles = [Patch(facecolor=COLOURS[s], label=LEGEND[s]) for s in COLOURS]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig


def _svg_text(fig: Figure) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "geokanon", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def _inline_svg(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
tr.pass td { background: #e7f6f0; }
.rec { background: #f6f6f6; border-left: 4px solid #009E73; padding: 0.5em 1em;
       white-space: pre-wrap; font-family: ui-monospace, monospace; }
"""


def sweep_html(result: SweepResult, svg: str) -> str:
    """One self-contained HTML page: recommendation, inline plot, full table.

    Parameters
    ----------
    result
        A finished sweep.
    svg
        The frontier figure as SVG text (embedded inline).

    Returns
    -------
    str
        The page; it references no external file, script or style.
    """
    pol = result.policy
    full = any(c.mean_displacement_m is not None for c in result.cells)
    head = [
        "mask", "k", "r_max (m)", "ok", "merge", "generalise", "suppress",
        "suppressed (subjects)", "worst unit", "worst share", "units over cap", "passes",
        "subjects over caps", "mask mean shift (m)",
    ]  # fmt: skip
    if full:
        head.append("mean displacement (m)")
    rows = []
    for c in result.cells:
        n = sum(c.counts.values()) or 1
        cells = [
            f'<td class="l">{html.escape(c.mask)}</td>',
            f"<td>{c.k}</td>",
            f"<td>{c.r_max_m:g}</td>",
            *(f"<td>{_pct(v / n)}</td>" for v in c.counts.values()),
            f"<td>{_pct(c.suppressed_share)}</td>",
            f'<td class="l">{html.escape(str(c.worst_unit))}</td>',
            f"<td>{_pct(c.worst_unit_share)}</td>",
            f"<td>{c.units_over_cap}</td>",
            f"<td>{'yes' if c.passes else 'no'}</td>",
            f"<td>{'-' if c.subjects_over_caps is None else f'{c.subjects_over_caps:,}'}</td>",
            f"<td>{c.mask_mean_m:.1f}</td>",
        ]
        if full:
            d = c.mean_displacement_m
            text = "-" if d is None or d != d else f"{d:.1f}"
            cells.append(f"<td>{'no fixed point' if c.fixed_point is False else text}</td>")
        cls = ' class="pass"' if c.passes else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>geokanon parameter sweep</title>",
            f"<style>{_CSS}</style></head><body>",
            "<h1>Parameter sweep</h1>",
            "<p><strong>For the data custodian, not for publication</strong>: shares of "
            "small units can reveal small counts.</p>",
            f"<p>{result.n_records:,} records, {result.n_subjects:,} subjects. First-pass "
            f"labels for every combination; caps: suppressed share &le; {_pct(pol.tau)} "
            f"globally and &le; {_pct(pol.unit_cap)} in every unit. Ratios: merge "
            f"{pol.merge_ratio:g}, generalise {pol.generalise_ratio:g}.</p>",
            f'<div class="rec">{html.escape(result.recommendation())}</div>',
            "<h2>Which cells pass both caps</h2>",
            _inline_svg(svg),
            "<p>When the cap is breached, lowering k and adding noise usually serves better "
            "than raising r_max: noise degrades everything slightly, generalisation degrades "
            "the rural map enormously. Masked rows are classified on the masked "
            "coordinates.</p>",
            "<h2>All cells</h2>",
            f"<table><thead><tr>{th}</tr></thead><tbody>",
            *rows,
            "</tbody></table>",
            f"<p><small>geokanon {html.escape(__version__)}</small></p>",
            "</body></html>",
            "",
        ]
    )


def write_sweep_outputs(result: SweepResult, out_dir: str | Path) -> dict[str, Path]:
    """Write ``sweep.csv``, ``tau_frontier.svg``/``.png`` and ``sweep.html`` into a directory.

    Parameters
    ----------
    result
        A finished sweep.
    out_dir
        Directory (created if needed; other files in it are left alone).

    Returns
    -------
    dict
        Kind (``csv``, ``svg``, ``png``, ``html``) -> path written.
    """
    from geokanon._outdir import claim

    fig = frontier_figure(result)
    svg = _svg_text(fig)
    page = sweep_html(result, svg)
    # The directory may hold other files: the four are written whole (through the private
    # build area beside it) and renamed into place together, under the directory's lock.
    names = {
        "csv": "sweep.csv",
        "svg": "tau_frontier.svg",
        "png": "tau_frontier.png",
        "html": "sweep.html",
    }
    writers: dict[str, Callable[[Path], Any]] = {
        names["csv"]: lambda p: result.to_frame().to_csv(p, index=False, lineterminator="\n"),
        names["svg"]: lambda p: p.write_text(svg, encoding="utf-8"),
        names["png"]: lambda p: fig.savefig(p, format="png", dpi=120, metadata={"Software": None}),
        names["html"]: lambda p: p.write_text(page, encoding="utf-8"),
    }
    with claim(out_dir, force=True, what="sweep") as held:
        held.out.mkdir(exist_ok=True)
        held.replace_files(writers)
    out = Path(out_dir)
    return {kind: out / name for kind, name in names.items()}

"""``RELEASE_NOTES.md``: what was done, what is missing and where, in plain words.

The notes are written for consumers of the data. Every figure about suppressed
or generalised records rests on 0 or at least k subjects; smaller figures read
``<k``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from geokanon.policy import OutlierPolicy

__all__ = ["release_notes"]


def _fmt_count(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def release_notes(
    manifest: dict[str, Any],
    units: pd.DataFrame,
    policy: OutlierPolicy,
    bias: list[str] | None = None,
) -> str:
    """Render the release notes.

    Parameters
    ----------
    manifest
        The release manifest (policy, counts, passes).
    units
        The published per-unit table (``unit``, ``released``, ``suppressed``), already masked.
    policy
        The policy.
    bias
        Plain sentences from the bias check (suppressed vs retained records).

    Returns
    -------
    str
        Markdown text.
    """
    k = policy.k
    c = manifest["counts"]
    lines = [
        "# Release notes",
        "",
        "## What was done",
        "",
        f"Every published location stands for a group of at least {k} distinct people, and "
        f"no record is shown farther than {policy.r_max_m:g} m from where it really is. "
        "Records that could not join such a group without moving farther were published "
        "only as counts for their area (generalised), or removed (suppressed).",
        "",
        f"- published at group level: {_fmt_count(c['grouped'] + c['merged'])} records in "
        f"{manifest['groups']:,} groups ({_fmt_count(c['merged'])} of them joined a group from "
        "the edge of a settlement)",
        "- generalised to an administrative unit or the whole area: "
        f"{_fmt_count(c['generalised'])}",
        f"- suppressed: {_fmt_count(c['suppressed'])} "
        f"(figures below {k} read `<k`; `withheld` means the figure would reveal a smaller one)",
        f"- group representatives are the centres of {policy.snap_step_m:g} m grid cells, "
        "never a member's own location",
    ]
    if policy.t_max_s is not None:
        clock = (
            " (times of day, on the 24-hour clock)"
            if str(policy.time_mode) == "time_of_day"
            else ""
        )
        lines.append(
            f"- times were judged together with places: a record had company only where at "
            f"least {k - 1} other people were within {policy.r_max_m:g} m *and* "
            f"{policy.t_max_s:g} s of it at once{clock}, so a record alone at its place at "
            "its time (the only one in the district at 4 a.m.) was treated as an outlier; "
            "published times are bins that each hold at least "
            f"{k} people per group or class"
        )
    syn = manifest.get("synthetic") or {}
    if syn.get("allowed"):
        lines += [
            f"- **synthetic records: {_fmt_count(syn.get('total', 0))}.** Each stands in for "
            "one suppressed person in their own unit (in that unit's generalised class, or "
            "else its nearest group), so the unit's count has no hole where they were. They "
            "look like every other record and are included in `released`; subtract the "
            "`synthetic` column of `units.csv` to get real counts. They never count towards "
            f"the {k} people behind a group or class, and the people they stand for are still "
            "counted as suppressed.",
        ]
    lines += [
        "",
        "## What is missing, and where",
        "",
    ]
    lt = units[units["suppressed"].astype(str) != "0"]
    if lt.empty:
        lines.append("No administrative unit lost any record to suppression.")
    else:
        lines.append(
            "These units lost records to suppression. Read low counts there as suppressed "
            "records, not as absent people or absent demand:"
        )
        lines.append("")
        has_syn = "synthetic" in lt.columns
        lines.append("| unit | released | suppressed |" + (" synthetic |" if has_syn else ""))
        lines.append("| --- | ---: | ---: |" + (" ---: |" if has_syn else ""))
        for row in lt.itertuples(index=False):
            extra = f" {row.synthetic} |" if has_syn else ""
            lines.append(f"| {row.unit} | {row.released:,} | {row.suppressed} |{extra}")
    lines += [
        "",
        "## Who is missing",
        "",
    ]
    if bias:
        lines += [f"- {s}" for s in bias]
    else:
        lines.append(
            "No comparison of suppressed and retained records was made for this release "
            "(no attribute columns were kept, or too few records were suppressed to compare)."
        )
    lines += [
        "",
        "## What this release does not protect against",
        "",
        "- Someone who knows that a person is in the data and where they live can still "
        "learn which group or area they were published in; the group hides which of its "
        f"at least {k} members they are, not that they are a member.",
        "- Attributes published with each record are not generalised: a rare attribute "
        "value inside a group can single a person out.",
        "- A person who knows they live alone in a remote place can infer from a missing "
        "dot that their record was suppressed, and hence that they are in the data, unless "
        "the release was made with membership-sensitive mode.",
        "- Combining this release with other releases of the same records is not covered.",
        "",
        f"Policy: k={k}, r_max={policy.r_max_m:g} m, tau={policy.tau:.2%}, "
        f"unit cap={policy.unit_cap:.0%}, seed={policy.seed}; geokanon {manifest['version']}.",
        "",
        "`report.html` in this folder shows the checks, a map of the published groups, the "
        "suppressed share per unit and the distributions behind these figures; it opens "
        "offline in any browser.",
        "",
    ]
    return "\n".join(lines)

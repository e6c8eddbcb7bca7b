"""``RELEASE_NOTES.md``: what was done, what is missing and where, in plain words.

The notes are written for consumers of the data. Every figure about suppressed
or generalised records rests on 0 or at least k subjects; smaller figures read
``<k``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from geokanon.policy import OutlierPolicy
from geokanon.published import GPKG_SIZED_LAYERS

__all__ = ["release_notes"]


def _fmt_count(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def input_filter_lines(entry: Any) -> list[str]:
    """Bullet lines on the units left out, the records clipped and the units merged."""
    if not isinstance(entry, dict):
        return []
    lines = []
    if entry.get("excluded_units"):
        lines.append(
            f"- units left out (--exclude-units): {', '.join(entry['excluded_units'])}; their "
            f"{_fmt_count(entry.get('excluded_records'))} records were dropped before anything "
            "else and are in no figure here: read these units as not covered, not as empty"
        )
    clipped = entry.get("clipped_records")
    if clipped not in (None, 0):
        lines.append(
            f"- records outside the study area dropped (--clip): {_fmt_count(clipped)}; they "
            "are in no figure here"
        )
    merges = entry.get("unit_merges") or {}
    if merges:
        into: dict[str, list[str]] = {}
        for src, dst in merges.items():
            into.setdefault(str(dst), []).append(str(src))
        listed = "; ".join(f"{dst} = {' + '.join(sorted(v))}" for dst, v in sorted(into.items()))
        lines.append(
            f"- small units merged (--merge-small-units {entry.get('merge_small_units')}): a "
            f"unit with fewer than {entry.get('merge_small_units')} people joined its "
            f"neighbour, and every figure is for the merged unit: {listed}"
        )
    if entry.get("units_left_small"):
        lines.append(
            "- units still below the merge threshold, with no neighbour to join: "
            + ", ".join(entry["units_left_small"])
        )
    return lines


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
        "- group representatives are grid points: the one nearest the group's centroid "
        "within r_max of every member, on a grid whose step follows the group's own spread "
        f"(at most {policy.snap_step_m:g} m, at least {min(1.0, policy.snap_step_m):g} m; "
        "docs/release-format.md), never a "
        "member's own location",
        "- the number of input records is not published, and the per-pass label counts in "
        "`manifest.json` count only the records published at group level: with the released "
        "counts, either would give the number of suppressed records and so the `<k` figures "
        "below. Every number in these files is part of one system that the `holes` check "
        "bounds (docs/release-format.md)",
    ]
    if policy.scale_factor_min < 1.0:
        lines.append(
            f"- the {policy.r_max_m:g} m hold on the ground (the Earth's ellipsoid), not only "
            "on the map: the map projection used to measure distances shortens them by up to "
            f"{100 * (1 - policy.scale_factor_min):.3f}% over this area, so groups were held "
            f"to {policy.r_work_m:.2f} m on the map"
        )
    if manifest.get("local_metres"):
        lines.append(
            "- **coordinates: local metres, no CRS.** x and y are metres in a local frame "
            "the custodian did not name: distances between published points are in metres, "
            "but the points cannot be placed on a map or joined with other data without that "
            "frame's definition (`crs` is null and `local_metres` true in `manifest.json`)"
        )
    lines += _file_crs_lines(manifest)
    lines += _gpkg_layer_lines(manifest)
    if manifest.get("mask"):
        lines.append(
            "- every record was first displaced by a geomask (its kind and distances are "
            "`mask` in `manifest.json`), and grouping and every check used the displaced "
            "locations. The mask's key is secret and kept by the custodian, never published: "
            "the seed below only breaks ties and cannot redraw or undo the mask"
        )
    dup = manifest.get("duplicates") or {}
    copies = int(dup.get("copies") or 0)
    if copies and dup.get("removed"):
        lines.append(
            f"- exact copies removed first: {copies:,} records of the input repeated another "
            "record in every column and were removed before anything else; every figure "
            "here is over the records that remain"
        )
    elif copies:
        lines.append(
            f"- exact copies kept: {copies:,} records of the input repeat another record in "
            "every column; each is published as a record of its own"
            + (
                ""
                if dup.get("subject_column")
                else " and counted as a person of its own (see below)"
            )
        )
    merged = manifest.get("subject_ids_merged") or 0
    if merged:
        lines.append(
            f"- people were told apart by their subject id, compared regardless of case, "
            f"surrounding spaces and Unicode form: {_fmt_count(merged)} ids were spellings of "
            "another id and were taken as the same person (this only makes groups stricter)"
        )
    if policy.t_max_s is not None:
        clock = (
            " (times of day: the clock wraps round at midnight)"
            if str(policy.time_mode) == "time_of_day"
            else ""
        )
        lines.append(
            f"- times were judged together with places: a record had company only where at "
            f"least {k - 1} other people were within {policy.r_max_m:g} m *and* "
            f"{_seconds(policy.t_max_s)} s of it at once{clock}, so a record alone at its place "
            "at its time (the only one in the district in the middle of the night) was treated "
            "as an outlier; "
            "published times are bins that each hold at least "
            f"{k} people per group or class"
        )
    lines += input_filter_lines(manifest.get("input_filter"))
    syn = manifest.get("synthetic") or {}
    if syn.get("allowed"):
        lines += [
            f"- **synthetic records: {_fmt_count(syn.get('total', 0))}.** Each stands in for "
            "a suppressed person in their own unit (in that unit's generalised class, or "
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
    if "source_total" in units.columns:
        lines += ["", *_source_total_lines(units, k)]
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
    ]
    if copies and not dup.get("removed") and not dup.get("subject_column"):
        lines.append(
            f"- The input held {copies:,} exact copies of records and no person ids: each "
            f"copy counted as a person of its own, so a group or class of {k} may stand for "
            f"fewer than {k} people where copies met."
        )
    lines += [
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


def _source_total_lines(units: pd.DataFrame, k: int) -> list[str]:
    """What ``units.csv``'s ``source_total`` column says (``--totals complementary``).

    No count of its own: every number in the notes must be a figure of the release.
    """
    shown = units["source_total"].astype(str)
    own = units["suppressed"].astype(str).eq("<k")
    secondary = bool((shown.eq("withheld") & ~own).any())
    more = (
        ", and for the other units whose total reads `withheld`: those are withheld only so "
        "that no `<k` figure elsewhere can be worked out from the others (complementary "
        "suppression, as statistics offices do for tables)"
        if secondary
        else ""
    )
    return [
        "`units.csv` also gives each unit's source total, the records it held in the input, "
        f"except where it would give a small figure away: it reads `<k` for a unit of fewer "
        f"than {k} people, and `withheld` for a unit whose suppressed count reads `<k`{more}. "
        "A `withheld` total is not a zero.",
    ]


def _seconds(value: float) -> str:
    """A duration in seconds as the notes print it: every digit, never an exponent.

    ``holes`` reads every number of the notes; ``3.1536e+08`` would read as two
    numbers that are no figure of the release, ``315,360,000`` as ``t_max_s`` itself.

    Examples
    --------
    >>> _seconds(315360000.0), _seconds(3600.0), _seconds(1.5)
    ('315,360,000', '3,600', '1.5')
    """
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def _gpkg_layer_lines(manifest: Mapping[str, Any]) -> list[str]:
    """Which layers ``release.gpkg`` has (the manifest's ``gpkg_layers``) and, when the
    per-record or per-group layers were left out, how to get them."""
    layers = manifest.get("gpkg_layers")
    if not isinstance(layers, list):
        return []
    names = ", ".join(f"`{name}`" for name in layers)
    left = [name for name in GPKG_SIZED_LAYERS if name not in layers]
    line = f"- `release.gpkg` holds the layers {names} (`gpkg_layers` in `manifest.json`)"
    if left:
        line += (
            f"; {', '.join(f'`{name}`' for name in left)} are left out of a release this "
            "large by default (the Parquet files hold the same rows; `--gpkg-records yes` "
            "and `--gpkg-groups yes` write them)"
        )
    return [line]


def _file_crs_lines(manifest: Mapping[str, Any]) -> list[str]:
    """Which files hold coordinates, and in which CRS (the manifest's ``file_crs``)."""
    files = manifest.get("file_crs")
    if not isinstance(files, Mapping) or not files:
        return []
    names = ", ".join(f"`{f}`" for f in files)
    crs = set(files.values())
    if crs == {None}:
        where = "in the local metres above"
    elif len(crs) == 1:
        where = f"in {next(iter(crs))}"
    else:
        where = "each in the CRS `file_crs` names for it"
    return [
        f"- coordinates: {names} are {where} (`file_crs` in `manifest.json`; the Parquet "
        "files are GeoParquet and name it in their own metadata too, as `release.gpkg` "
        "does for each layer); `units.csv` and these notes hold no coordinates"
    ]

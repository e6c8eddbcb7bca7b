"""The ``no_leak`` check: no source value is published.

The rule, exactly as implemented
--------------------------------
``no_leak``
    Every file in ``release/`` is scanned (text files as text and, for CSV, as
    a table too; Parquet column by column, plus its key-value metadata):

    * source coordinate pairs: two consecutive numbers in text, or two numeric
      columns of one table row (WKB geometry decoded; id and count columns
      left out), equal as float64 to a source ``(x, y)`` pair in the output
      CRS with >= 4 significant digits between them. Source pairs are the
      file's own values (``source`` or ``source_file`` a path) or the input
      values a table kept (``PointTable.input_xy``, lon/lat input), else the
      table's or the audit's coordinates when no CRS change happened; when the
      CRS changed, also the audit's coordinates carried to the output CRS (one
      pyproj transformation, as the writer carries a representative); when it
      changed and the source's own values are unknown (no source, or an
      ``--output-crs`` other than the input's), those carried coordinates
      matched within the transformation's own round-off instead: 4 times the
      largest round trip of a carried coordinate to the working CRS and back,
      at least 1e-12 of the largest absolute ordinate;
    * single values, judged by the source's own values whatever their form (a
      whole-number coordinate, an id of one or two characters): a number equal to
      any source coordinate, or a number or text equal to a subject id (every raw
      id of the source's subject column, stripped, whatever its length; only when
      the source file is given), is a leak wherever it appears outside the
      columns that legitimately hold it. What a column legitimately holds
      (``_Legit``; by column name, in every table: ``records.parquet``,
      ``records.csv``, ``groups.parquet``, ``classes.parquet``, ``units.csv``):

      - ``x``, ``y``, ``geometry``: the representatives, judged as pairs only;
      - ``group_id``: the integers ``0..G-1`` (G groups in ``groups.parquet``:
        the writer numbers them so), ``class_id``: ``0..C-1``;
      - ``n_records``, ``released``, ``suppressed``, ``source_total``,
        ``generalised_up``, ``synthetic``: counts, the integers ``0..N`` (N the
        audit's records plus the synthetic ones) and ``<k``, ``withheld``
        (``counts`` checks that each is the right count);
      - ``radius_m``: the manifest's ``r_max_m``; ``level``: ``group``, ``unit``,
        ``parent``, ``area``; ``unit``: the audit's unit ids (merged names and
        parents included); ``time_bin``: published bins (``...Z/PT3600S``);
      - a column named like a source column (a kept attribute): that source
        column's own values (a consumption of 155000 is no coordinate when the
        source's consumption holds it), unless the source column repeats its own
        record's coordinate or subject id on at least half its rows (a copy of a
        secret: then nothing);
      - any other column: nothing. Without the source the kept columns' values
        are unknown: a column not listed above is then judged by non-integral
        coordinates with >= 4 significant digits only.

      And any non-structural numeric column in which at least half of >= k
      distinct values (>= 4 significant digits) are source coordinates fails as
      a column of coordinates. In prose (``RELEASE_NOTES.md``, the text a reader
      sees in ``report.html`` and its content attributes such as ``alt`` and
      ``data-*``, ``manifest.json``, other text files, Parquet key-value
      metadata), numbers are read as ``holes`` reads them
      (:func:`geokanon.published.prose_numbers`: number words in digits, ``6,000``
      one number, declared phrases left out); one equal to a source coordinate
      or a numeric subject id is a leak unless the release publishes that number
      (a figure or parameter ``holes`` holds, the numbers of groups, classes,
      units and records, a representative's ``x`` or ``y``, a unit id): a count
      of 155000 records is that count. The phrase "a deterministic sample of N
      records" (``report.html``, ``RELEASE_NOTES.md``) fails unless N is exactly the
      manifest's ``report_sample.records`` (none declared: no such phrase; ``manifest``
      recomputes that figure from the audit). Any other token of prose equal to a
      subject id is a leak (``a7``, ``(a7).`` and ```a7``` alike). The GeoParquet
      ``geo`` metadata's CRS definition is left out when it defines the
      manifest's ``crs`` (RD New's false easting 155000 is the CRS's). HTML markup
      (tags, classes, element ids, styles, scripts, sizes, path data) is the
      page's machinery: there, pairs, non-integral coordinates with >= 4
      significant digits, epoch times, timestamps, the mask key and subject ids of
      at least 4 characters are looked for (a shorter id could be a tag name:
      ``h1``); so are the style documents of ``release.gpkg``'s ``layer_styles``
      (``styleQML``, ``styleSLD``); embedded ``data:`` images are searched for the
      mask key only;
    * a column named like the subject column;
    * raw timestamps: a date-time in text or a string cell (ISO 8601 or
      ``YYYY/MM/DD hh:mm[:ss]``) equal, as wall-clock or UTC, to a source
      time; a timestamp column value or a number equal to a source time in
      epoch seconds (>= 4 significant digits); a column named like the time
      column;
    * the mask's secret key (``audit/mask_key``; fails when a mask was applied
      and the audit holds no key): its bytes as text, hex, base64 or decimal,
      and the same of the SipHash key derived from it and of that key's two
      64-bit words (also as values of a 64-bit integer column), in free text,
      in any text cell or column name, and in the bytes of any other file;
    * source row numbers: a column named ``source_row``, ``row``, ``row_id``,
      ``row_number``, ``rownum``, ``record_id``, ``point_id``, ``fid``,
      ``index``, ``level_0`` or ``__index_level_0__``, a column named like a
      source column that is an id (unique per record, and named like an id or
      a run of consecutive integers), or a stored pandas index that is not a
      range.

    "Significant digits" are the digits of a number's text with leading and
    trailing zeros and the decimal point removed (``149700`` has 4,
    ``2000.0`` has 1). A struct column (GeoParquet's ``bbox``) is read as its fields
    (``bbox.xmin``, ...: coordinates, judged as pairs like ``x``, ``y``).
    ``release.gpkg``: every layer as a table (points decoded) and its text
    (:mod:`.gpkg`); polygons are fixed by published values or are unit geography.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from geokanon.verify._arrays import sorted_finite
from geokanon.verify._derived import audit_holds
from geokanon.verify._once import once
from geokanon.verify._reader import ReleaseReader
from geokanon.verify._results import CheckResult
from geokanon.verify.leak_rules import (
    FORMAT_NAMES,
    ROW_NAMES,
    Secrets,
    column_rules,
    mask_key_forms,
    published_values,
    sample_phrase_findings,
    scan_file,
    strict_secrets,
)

#: The tolerance of carried pairs, in multiples of the largest round trip of the
#: records' carried coordinates (output CRS to working and back).
ROUND_TRIPS = 4.0
#: Its floor, relative to the largest absolute ordinate (a round trip of 0 still
#: blurs in the last bits: 1e-12 of 53 degrees is 6 micrometres).
ROUND_OFF_FLOOR = 1e-12


def _round_off(rel: ReleaseReader, ox: NDArray[np.float64], oy: NDArray[np.float64]) -> float:
    """How far a record's own output-CRS value can lie from its working coordinate carried
    to the output CRS: ``ROUND_TRIPS`` times the largest difference, on either axis,
    between a carried coordinate and itself sent to the working CRS and back, and at least
    ``ROUND_OFF_FLOOR`` of the largest absolute ordinate.

    A record's working coordinate is its own value sent to the working CRS, so the carried
    one is its own value after such a round trip, measured here at (within that round
    trip of) the same place. Within a UTM zone a round trip is ~1e-15 relative; across a
    datum shift without grids (RD to UTM) ~1e-9; a fixed tolerance had to take the
    largest, and then refused a representative that merely lay 5 mm from a record.
    """
    scale = max(1.0, float(np.abs(ox).max()), float(np.abs(oy).max()))
    back = rel.to_working
    forward = rel.to_output
    if back is None or forward is None:  # one CRS: nothing carried, nothing blurred
        return ROUND_OFF_FLOOR * scale
    bx, by = forward(*back(ox, oy))
    trip = np.maximum(np.abs(bx - ox), np.abs(by - oy))
    trip = trip[np.isfinite(trip)]
    largest = float(trip.max()) if trip.size else 0.0
    return max(ROUND_TRIPS * largest, ROUND_OFF_FLOOR * scale)


def _secrets(rel: ReleaseReader) -> tuple[Secrets, list[str]]:
    src = rel.source
    scanned: list[str] = []
    xs_list: list[NDArray[np.float64]] = []
    ys_list: list[NDArray[np.float64]] = []

    def add(x: NDArray[np.float64], y: NDArray[np.float64]) -> None:
        # the same values twice add nothing to look for
        for ox, oy in zip(xs_list, ys_list, strict=True):
            if ox is x and oy is y:
                return
            if ox.shape == x.shape and np.array_equal(ox, x) and np.array_equal(oy, y):
                return
        xs_list.append(np.asarray(x, dtype=np.float64))
        ys_list.append(np.asarray(y, dtype=np.float64))

    if src.x is not None and src.y is not None:
        add(src.x, src.y)
        scanned.append("source coordinates")
    if src.left_out_x is not None and src.left_out_y is not None:
        add(src.left_out_x, src.left_out_y)  # records left out must not appear either
        scanned.append("coordinates of the records left out")
    if src.x_work is not None and src.y_work is not None and src.x_work is not src.x:
        add(src.x_work, src.y_work)
        scanned.append("working coordinates")
    near = None
    near_tol = 0.0
    if rel.to_output is None:
        # the audit's coordinates, unless they are source coordinates row by row (then
        # they are those pairs already, each in its source row)
        if not any(audit_holds(rel, x, y) for x, y in zip(xs_list, ys_list, strict=True)):
            add(*rel.xy_m)
        if not scanned:
            scanned.append("audit coordinates")
    else:
        # the output CRS differs: the audit's coordinates carried to it as a
        # representative is carried (one pyproj transformation, so a working coordinate
        # published that way is one of these pairs to the last bit)
        ox, oy = rel.to_output(*rel.xy_m)
        if src.x is not None:
            # the source's own values (the file's, or the ones a PointTable kept) are
            # compared exactly above; so are these
            add(np.asarray(ox, dtype=np.float64), np.asarray(oy, dtype=np.float64))
            scanned.append("transformed coordinates")
        else:
            # the source's own values are unknown (no source, or an --output-crs other
            # than the input's): within what the transformation itself blurs
            from scipy.spatial import cKDTree

            ok_o = np.isfinite(ox) & np.isfinite(oy)
            if ok_o.any():
                near = cKDTree(np.column_stack([ox[ok_o], oy[ok_o]]))
                near_tol = _round_off(rel, ox[ok_o], oy[ok_o])
                scanned.append("transformed coordinates")
    epoch = sorted_finite(src.epoch_s) if src.epoch_s is not None else None
    if epoch is not None:
        scanned.append("times")
    wall = sorted_finite(src.wall_s) if src.wall_s is not None else None
    if src.subject_ids:
        scanned.append("subject ids")
    bad_names = set(ROW_NAMES) | set(src.id_columns)
    for col in (src.subject_column, src.time_column):
        if col:
            bad_names.add(col)
    bad_names = {n.lower() for n in bad_names} - FORMAT_NAMES
    scanned.append("row-number columns")
    key: tuple[tuple[str, ...], tuple[int, ...], tuple[bytes, ...]] = ((), (), ())
    key_missing = None
    key_file = rel.aud / "mask_key"
    if key_file.is_file():
        key = mask_key_forms(key_file.read_bytes())
        scanned.append("the mask key")
    elif rel.audit.get("mask") not in (None, "", "none"):
        key_missing = (
            "a mask was applied but audit/mask_key is missing, so the release cannot be "
            "searched for the mask's secret key"
        )
    published, published_texts = published_values(rel)
    sec = strict_secrets(
        tuple(zip(xs_list, ys_list, strict=True)), src.subject_ids, k=rel.k,
        bad_names=frozenset(bad_names), published=published, published_texts=published_texts,
        legit=column_rules(rel, src, published_texts),
        know_columns=rel._source_arg is not None or rel._source_file is not None,
        crs=rel.output_crs, epoch=epoch, wall=wall, near=near, near_tol=near_tol, key=key,
        key_missing=key_missing,
    )  # fmt: skip
    return sec, scanned


def leak_secrets(rel: ReleaseReader) -> tuple[Secrets, list[str]]:
    """(what ``no_leak`` looks for in ``rel``, what that is, said in words): worked out once
    per audit and source (a later run over the same release re-uses it), for the
    manifest's k and CRS it was made for."""
    made_for = (rel.k, rel.output_crs, rel.working_crs)
    held = rel.__dict__.get("_no_leak_secrets")
    if held is not None and held[0] != made_for:
        del rel.__dict__["_no_leak_secrets"]
    _, sec, scanned = once(rel, "_no_leak_secrets", lambda: (made_for, *_secrets(rel)))
    return sec, scanned


def check_no_leak(rel: ReleaseReader) -> CheckResult:
    sec, scanned = leak_secrets(rel)
    all_files = rel.release_files()
    # files a previous full run scanned, unchanged since (their sha256 is checked by
    # ``manifest``): not scanned again
    files = [p for p in all_files if p.relative_to(rel.rel).as_posix() not in rel.unchanged]
    leaks: list[str] = [sec.key_missing] if sec.key_missing else []
    leaks += sample_phrase_findings(rel, (p.relative_to(rel.rel).as_posix() for p in files))
    for path in files:
        rel_name = path.relative_to(rel.rel).as_posix()
        found = scan_file(path, sec, rel)
        if found:
            leaks.append(f"{rel_name}: " + ", ".join(dict.fromkeys(found)))
    if leaks:
        return CheckResult("no_leak", False, "; ".join(leaks))
    again = (
        f" ({len(all_files) - len(files)} unchanged since the previous run)"
        if (len(files) != len(all_files))
        else ""
    )
    return CheckResult(
        "no_leak",
        True,
        f"{len(files)} files scanned for {', '.join(scanned) or 'nothing'}{again}",
    )

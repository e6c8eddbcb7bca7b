"""The ``k_subjects`` check: every group and class holds >= k distinct subjects.

The rule, exactly as implemented
--------------------------------
``k_subjects``
    Every group in ``groups.parquet`` and every class in ``classes.parquet``
    (and every group or class id an audit row or a published record names)
    holds >= k distinct subjects among the real records of the audit.
    Synthetic records never count. Subjects are taken from the source when it
    is given (so a wrong subject code in the audit cannot inflate a group),
    else from the audit's ``subject`` column. Source ids are compared normalised
    (:func:`subject_id_text`: NFKC, case folded, stripped), by the verifier's own
    copy of the rule: five spellings of one id are one subject, never five.
    Every (group or class, time bin) the audit assigns holds >= k distinct
    subjects too. And every cell of the *published* records (a group or class of
    ``records.parquet`` with one time bin; without times, the group or class)
    holds >= k rows, and the audit's records of that group or class and time bin
    hold >= k distinct subjects (a cell the audit never assigns holds none), so a
    time bin or id changed in the records files alone fails; so does a row in no
    published group or class.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from geokanon.verify._arrays import (
    dense_codes,
    distinct_counts,
    factorize_arrow,
    int_ids,
    positions_in,
)
from geokanon.verify._reader import ReleaseReader
from geokanon.verify._records import audit_keys, audit_time_bins, record_rows
from geokanon.verify._results import CheckResult


def distinct_per(ids: NDArray[np.int64], subjects: NDArray[np.int64]) -> dict[int, int]:
    """Distinct subjects per id (ids < 0 ignored), as a dict (for :mod:`geokanon.testing`)."""
    ok = ids >= 0
    code, m = dense_codes(ids[ok])
    full = np.full(ids.size, -1, dtype=np.int64)
    full[ok] = code
    counts = distinct_counts(full, subjects, m)
    uniq = np.zeros(m, dtype=np.int64)
    uniq[code] = ids[ok]
    return dict(zip(uniq.tolist(), counts.tolist(), strict=True))


def _distinct_per_id(
    ids: NDArray[np.int64],
    pub: NDArray[np.int64],
    subjects: NDArray[np.int64],
    dense: tuple[NDArray[np.int64], int],
) -> tuple[NDArray[np.int64], int]:
    """(distinct subjects of every id the audit names (``ids`` >= 0, one per audit row) or
    the table publishes (``pub``), in id order; the ids with audit rows). ``dense``: the
    subjects' dense codes."""
    hi = max(int(ids.max(initial=-1)), int(pub.max(initial=-1)))
    if hi < 4 * (ids.size + pub.size) + 1024:  # ids in a short range: counted by id
        per = distinct_counts(ids, subjects, hi + 1, dense)
        present = per > 0  # an id with audit rows has a subject
        present[pub] = True
        return per[present], int(np.count_nonzero(per))
    # every published id and every id the audit names, numbered densely
    sel = ids >= 0
    code, m = dense_codes(np.concatenate([ids[sel], pub]))
    member_code = np.full(ids.size, -1, dtype=np.int64)
    member_code[sel] = code[: int(np.count_nonzero(sel))]
    distinct = distinct_counts(member_code, subjects, m, dense)
    return distinct, int(np.count_nonzero(distinct))


def check_k_subjects(rel: ReleaseReader) -> CheckResult:
    k = rel.k
    subj = rel.subjects
    bad: list[str] = []
    worst: int | None = None
    n_ids: dict[str, int] = {}
    for what, ids, published in (
        ("groups", rel.gid, rel.groups["group_id"]),
        ("classes", rel.cid, rel.classes["class_id"]),
    ):
        pub = int_ids(published, f"{what} id")
        distinct, n_ids[what] = _distinct_per_id(ids, pub[pub >= 0], subj, rel.subject_codes)
        m = distinct.size
        small = distinct < k
        if small.any():
            mn = int(distinct[small].min())
            worst = mn if worst is None else min(worst, mn)
            bad.append(f"{int(small.sum())} of {m} {what} have < k={k} distinct subjects")
    time_bins = rel.time_bins
    if time_bins is not None:
        tb_codes, _ = factorize_arrow(time_bins.cast(pa.string()).fill_null(""))
        n_tb = int(tb_codes.max()) + 1 if tb_codes.size else 1
        for what, ids in (
            ("group x time bin classes", rel.gid),
            ("class x time bin classes", rel.cid),
        ):
            sel = ids >= 0
            code, m = dense_codes(ids[sel] * np.int64(n_tb) + tb_codes[sel])
            cell = np.full(ids.size, -1, dtype=np.int64)
            cell[sel] = code
            distinct_tb = distinct_counts(cell, subj, m, rel.subject_codes)
            small_tb = distinct_tb[distinct_tb < k]
            if small_tb.size:
                m_tb = int(small_tb.min())
                worst = m_tb if worst is None else min(worst, m_tb)
                bad.append(f"{small_tb.size} of {m} {what} have < k={k} subjects")
    in_records = _published_cell_problems(rel, subj)
    if bad or in_records:
        said = ["; ".join(bad) + f" (smallest {worst})"] if bad else []
        return CheckResult("k_subjects", False, "; ".join([*said, *in_records]))
    ng, nc = n_ids["groups"], n_ids["classes"]
    cells = record_rows(rel, csv=False)
    in_cells = (
        f"; the published records' {cells.cells.size} (group or class, time bin) cells too"
        if cells.stride > 1
        else ""
    )
    return CheckResult(
        "k_subjects",
        True,
        f"{ng} groups and {nc} classes, each with >= {k} distinct subjects{in_cells}",
    )


def _published_cell_problems(rel: ReleaseReader, subj: NDArray[np.int64]) -> list[str]:
    """``k_subjects`` over the published records: each (group or class, time bin) cell of
    the records files holds >= k rows, and the audit's records of that group or class
    and time bin hold >= k distinct subjects."""
    k = rel.k
    rr = record_rows(rel, csv=False)
    if not rr.read:
        return []
    if rr.unreadable is not None:
        return [f"the published records cannot be read ({rr.unreadable})"]
    problems: list[str] = []
    if rr.orphans:
        problems.append(f"{rr.orphans} published records are in no published group or class")
    if rr.cells.size == 0:
        return problems
    keys = audit_keys(rel)
    bins = audit_time_bins(rel)
    codes = bins[0] if bins is not None and rr.stride > 1 else np.zeros(keys.size, np.int64)
    if rr.stride == 1:
        # no time bins: a cell is a key, and keys number the published groups and classes
        # densely (-1: none), so they count as they are
        n_keys = int(max(int(keys.max(initial=-1)), int(rr.cells.max(initial=-1)))) + 1
        distinct = distinct_counts(keys, subj, n_keys, rel.subject_codes)
        held = np.where(rr.cells >= 0, distinct[np.maximum(rr.cells, 0)], 0)
    else:
        sel = keys >= 0
        cell_a = keys[sel] * np.int64(rr.stride) + codes[sel]
        code, m = dense_codes(cell_a)
        full = np.full(keys.size, -1, dtype=np.int64)
        full[sel] = code
        distinct = distinct_counts(full, subj, m, rel.subject_codes)
        table = np.zeros(m, dtype=np.int64)
        table[code] = cell_a
        at = positions_in(table, rr.cells)
        held = np.where(at >= 0, distinct[np.maximum(at, 0)], 0)
    what = "(group or class, time bin) cells" if rr.stride > 1 else "groups and classes"
    few = held < k
    if few.any():
        problems.append(
            f"{int(np.count_nonzero(few))} of {rr.cells.size} {what} of the published records "
            f"have < k={k} distinct subjects among the audit's records of that cell "
            f"(smallest {int(held[few].min())})"
        )
    short = rr.cell_rows < k
    if short.any():
        problems.append(
            f"{int(np.count_nonzero(short))} of {rr.cells.size} {what} of the published "
            f"records hold < k={k} rows (smallest {int(rr.cell_rows[short].min())})"
        )
    return problems

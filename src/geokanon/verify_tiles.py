"""Independent verification of a partitioned release, in tasks, reduced on the driver.

:func:`verify_partitioned` checks a release written by
:func:`geokanon.distributed.release_partitions` (``release/records/part-NNNNN.parquet``,
``audit/assignment/part-NNNNN.parquet``; see "Partitioned layout" in
``docs/release-format.md``). Like :mod:`geokanon.verify` it imports no algorithm
module (only :mod:`geokanon.errors`, :mod:`geokanon.policy`,
:mod:`geokanon.neighbours` and :mod:`geokanon.verify`; Dask lazily, through
the client it is given): every figure is recomputed from the written files and
from the source rows, re-read from the source partitions (never from the
core's arrays).

Two rounds of tasks:

*Source round* (one task per source partition ``i``): re-read partition ``i`` and
``audit/assignment/part-i``; check the audit against the source (row count,
``source_row``, unit, coordinates, a group id exactly for grouped and merged
rows, a class id exactly for generalised rows); count records per disposal and
per unit; collect the distinct ``(unit, subject, suppressed)`` triples (with a
subject column; subjects are the ids as :func:`geokanon.verify.subject_id_text`
compares them, so the spellings of one id are one subject) and the distinct raw
ids' hashes (their number less the subjects must be the manifest's
``subject_ids_merged``); scan the small release files (manifest, notes, report,
``units.csv``, ``classes.parquet``, ``groups.parquet``'s metadata) for this
partition's coordinates (pairs and non-integral values), subject ids and row
columns with :mod:`geokanon.verify`'s own scanners; and route, to scratch
pieces, every group member's and class member's source coordinates, subject and
unit to the release part that publishes its group or class (by the id ranges
in ``audit.json``), and every record's coordinates to the group part whose
tiles hold it (so a representative equal to any source point meets that point).

*Part round* (one task per release part): from the part file, the part's rows
of ``groups.parquet``/``classes.parquet`` and the routed source rows:
``k_subjects`` (distinct subjects per group and class), ``extent`` (every member
within ``min(r_max_m, radius_m)`` of the published representative, inclusive, on
the map and, for a named CRS, on its ellipsoid),
``representation`` (no representative equals a member's coordinate or the
exact mean of its members), ``counts`` (group and class sizes, rows per group
and class in the part, the part's representatives, each group's majority unit,
every group and class of the id range present once) and ``no_leak`` (the part
file and its ``groups.parquet`` rows against the coordinates routed to it and
its members' subject ids).

*Driver*: ``tau`` and ``unit_cap`` from the distinct triples, ``holes`` with
:func:`geokanon.verify.holes_check` (the same system over every figure of every
release file as the single-machine verifier), the manifest's and ``units.csv``'s
figures against the reduced counts (``counts``), ``fixed_point``,
``report_safety``, and ``manifest`` (every file under ``release/`` listed with a
matching sha256, and the input checksum).

What is narrower than :func:`geokanon.verify.verify_release` is stated in
:data:`SCOPE` and written into the manifest (``verification_scope``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from geokanon.errors import InputError
from geokanon.policy import MAX_PASSES
from geokanon.verify import (
    CHECKS,
    LESS_THAN_K,
    WITHHELD,
    CheckResult,
    VerificationReport,
    holes_check,
    subject_id_text,
)
from geokanon.verify._reader import _cell_value, _decimal_fraction, _text_file
from geokanon.verify._results import _Unreadable
from geokanon.verify.caps import _share_text
from geokanon.verify.extent import _Ground
from geokanon.verify.no_leak import (
    _ROW_NAMES,
    _STRUCTURAL,
    _TOKEN_SPLIT,
    _scan_csv,
    _scan_csv_raw,
    _scan_frame,
    _scan_parquet,
    _scan_text,
    _Secrets,
)
from geokanon.verify.report_safety import (
    _markdown_tables,
    _phrase_problems,
    _small_int,
    _table_problems,
    _TableParser,
)

__all__ = ["SCOPE", "verify_partitioned"]

#: Where a partitioned check covers less than the single-machine check, and why.
SCOPE: dict[str, str] = {
    "no_leak": "release parts are scanned against the source records routed to them (their "
    "members, and every source record in the part's tiles, so a representative equal to any "
    "source point is found); the small files are scanned against every source partition. A "
    "kept attribute value equal to the coordinate of a source record outside the part, and "
    "the rule 'half of a column's values are source coordinates' across partitions, are not "
    "checked. Times are not published by the partitioned release.",
    "counts": "the audit is compared with the source partition by partition; the per-record "
    "subject codes of the audit are not compared with the source (subjects are always taken "
    "from the source).",
}

_DISPOSALS = ("grouped", "merged", "generalised", "suppressed")
_BIAS = 1 << 30
_MAX_NOTES = 5


def _tile_key(
    x: NDArray[np.float64], y: NDArray[np.float64], tiling: Mapping[str, float]
) -> NDArray[np.int64]:
    """The writer's tile key of every point (the same floor and packing, recomputed here)."""
    ix = np.floor((x - float(tiling["origin_x"])) / float(tiling["tile_m"])).astype(np.int64)
    iy = np.floor((y - float(tiling["origin_y"])) / float(tiling["tile_m"])).astype(np.int64)
    return ((ix + _BIAS) << 31) | (iy + _BIAS)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _secrets(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subject_ids: NDArray[np.object_] | None,
    k: int,
    bad_names: frozenset[str],
) -> Any:
    """What to look for in published files: these coordinates and subject ids."""
    ok = np.isfinite(x) & np.isfinite(y)
    xs, ys = np.asarray(x[ok], dtype=np.float64), np.asarray(y[ok], dtype=np.float64)
    coords = np.unique(np.concatenate([xs, ys])) if xs.size else np.empty(0)  # sorted
    frac = coords[coords != np.floor(coords)]
    ids: frozenset[str] = frozenset()
    if subject_ids is not None and subject_ids.size:
        ids = frozenset(s.strip() for s in pd.unique(subject_ids) if len(str(s).strip()) >= 4)
    spaced = tuple(s for s in ids if _TOKEN_SPLIT.search(s))
    return _Secrets(
        px=xs, py=ys, coords=coords, frac_coords=frac, subject_ids=ids, spaced_ids=spaced,
        epoch=np.empty(0), wall=np.empty(0), bad_names=bad_names, n_k=k,
    )  # fmt: skip


def _scan_file(path: Path, sec: Any, label: str) -> list[str]:
    suffix = path.suffix.lower()
    found: list[str] = []
    if label.endswith("(metadata)"):
        found = _scan_text(path.read_text(encoding="utf-8", errors="replace"), sec)
    elif suffix in (".parquet", ".pq"):
        found = _scan_parquet(path, sec)
    else:
        if suffix == ".csv":
            # as the single-machine verifier: the parsed table, else the raw text
            parsed = _scan_csv(path, sec)
            found = parsed if parsed is not None else _scan_csv_raw(path, sec)
        else:
            found = _scan_text(path.read_text(encoding="utf-8", errors="replace"), sec)
    return found


# ----------------------------------------------------------------------------
# Source round
# ----------------------------------------------------------------------------


def _ids(series: pd.Series) -> NDArray[np.int64]:
    return pd.to_numeric(series, errors="coerce").fillna(-1).to_numpy(dtype=np.int64)


def _text_codes(values: pd.Series) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """Code of every value and the text of every code (``str`` of the distinct values only:
    the same texts as ``values.astype(str)``, far cheaper on millions of rows)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    texts = [np.nan if pd.isna(u) else str(u) for u in uniques]  # missing stays missing
    return codes.astype(np.int64), np.asarray(texts, dtype=object)


def _texts(values: pd.Series) -> NDArray[np.object_]:
    """``values`` as an object array of texts (each distinct text one shared object)."""
    codes, texts = _text_codes(values)
    return texts[codes] if codes.size else np.zeros(0, dtype=object)


def _source_task(
    source: Any,
    i: int,
    offset: int,
    audit_path: str,
    route: dict[str, Any] | None,
    scratch: str,
    leak_files: list[tuple[str, str]],
    k: int,
    bad_names: frozenset[str],
) -> dict[str, Any]:
    """Check audit part ``i`` against source partition ``i``; count, route and scan."""
    f = source.load(i)
    n = len(f)
    x = f["x"].to_numpy(dtype=np.float64)
    y = f["y"].to_numpy(dtype=np.float64)
    has_subject = "subject" in f.columns
    subj = None  # the raw ids (what no_leak looks for)
    skey = None  # the ids as subjects are compared (subject_id_text): spellings are one
    out: dict[str, Any] = {"n": n, "problems": [], "leaks": [], "has_subject": has_subject}
    if has_subject:
        scode, stexts = _text_codes(f["subject"])
        subj = stexts[scode] if scode.size else np.zeros(0, dtype=object)
        norm = np.asarray(
            [subject_id_text(t) if isinstance(t, str) else t for t in stexts], dtype=object
        )
        skey = norm[scode] if scode.size else np.zeros(0, dtype=object)
        # hashes of the distinct raw ids: their global number, less the subjects, is the
        # number of ids merged
        out["raw_ids"] = np.unique(pd.util.hash_array(stexts.astype(str)))
    unit = _texts(f["unit"]) if "unit" in f.columns else np.full(n, "all", dtype=object)
    sha = source.file_sha256(i) if hasattr(source, "file_sha256") else None
    out["sha256"] = sha
    sec = _secrets(x, y, subj, k, bad_names)
    for rel_name, path in leak_files:
        found = _scan_file(Path(path), sec, rel_name)
        if found:
            out["leaks"].append(f"{rel_name}: " + ", ".join(dict.fromkeys(found)))
    try:
        a = pd.read_parquet(audit_path)
    except (OSError, ValueError) as exc:
        out["problems"].append(f"audit part {i} is unreadable ({type(exc).__name__})")
        return out
    need = {"source_row", "disposal", "group_id", "class_id", "unit", "x_m", "y_m"}
    if not need <= set(a.columns) or len(a) != n:
        out["problems"].append(
            f"audit part {i} has {len(a)} rows for {n} source rows, or misses columns"
        )
        return out
    problems = out["problems"]
    if not np.array_equal(a["source_row"].to_numpy(dtype=np.int64), offset + np.arange(n)):
        problems.append(f"audit part {i}: source_row is not the source order")
    if not np.array_equal(_texts(a["unit"]), unit):
        problems.append(f"audit part {i}: units differ from the source")
    xm = a["x_m"].to_numpy(dtype=np.float64)
    ym = a["y_m"].to_numpy(dtype=np.float64)
    if not (np.array_equal(xm, x) and np.array_equal(ym, y)):
        problems.append(f"audit part {i}: x_m/y_m differ from the source coordinates")
    dcode, dnames = _text_codes(a["disposal"])
    bad = ~np.isin(dnames, _DISPOSALS)[dcode] if dcode.size else np.zeros(0, dtype=bool)
    if bad.any():
        problems.append(f"audit part {i}: {int(bad.sum())} rows with an unknown disposal")
    gid, cid = _ids(a["group_id"]), _ids(a["class_id"])

    def is_disposal(*names: str) -> NDArray[np.bool_]:
        return np.isin(dnames, names)[dcode] if dcode.size else np.zeros(0, dtype=bool)

    at_group = is_disposal("grouped", "merged")
    generalised = is_disposal("generalised")
    if ((gid >= 0) != at_group).any() or ((cid >= 0) != generalised).any():
        problems.append(
            f"audit part {i}: a group id must be set exactly for grouped/merged rows and a "
            "class id exactly for generalised rows"
        )
    sup = is_disposal("suppressed")
    per_code = np.bincount(dcode, minlength=dnames.size)
    out["disposals"] = {d: int(per_code[dnames == d].sum()) for d in _DISPOSALS}
    ucode, unames = pd.factorize(unit)
    unames = np.asarray(unames, dtype=object)
    out["unit_records"] = pd.Series(np.bincount(ucode, minlength=unames.size), index=unames)
    sup_u = np.bincount(ucode[sup], minlength=unames.size)
    out["unit_suppressed_records"] = pd.Series(sup_u[sup_u > 0], index=unames[sup_u > 0])
    if has_subject:
        out["triples"] = pd.DataFrame({"unit": unit, "subject": skey, "sup": sup}).drop_duplicates()
    if route is None:
        return out
    # route members and coordinates to the release parts
    # without a subject column every record is its own subject: its row number stands for it
    own = skey if skey is not None else offset + np.arange(n, dtype=np.int64)
    raw_own = subj if subj is not None else own
    for kind, ids_, mask in (("group", gid, at_group), ("class", cid, generalised)):
        sel = np.flatnonzero(mask & (ids_ >= 0))
        first = np.asarray(route[kind]["first"], dtype=np.int64)
        end = np.asarray(route[kind]["end"], dtype=np.int64)
        index = np.asarray(route[kind]["index"], dtype=np.int64)
        p = np.searchsorted(first, ids_[sel], side="right") - 1
        okp = (p >= 0) & (ids_[sel] < end[np.maximum(p, 0)]) if first.size else p < -1
        if (~okp).any():
            problems.append(f"audit part {i}: {int((~okp).sum())} {kind} ids outside every part")
        sel, p = sel[okp], p[okp]
        _write_pieces(
            scratch, index[p], f"m{i:06d}",
            pd.DataFrame({"id": ids_[sel], "x": x[sel], "y": y[sel], "subject": own[sel],
                          "raw_subject": raw_own[sel], "unit": unit[sel]}),
        )  # fmt: skip
    lo = np.asarray(route["group"]["tile_lo"], dtype=np.int64)
    hi = np.asarray(route["group"]["tile_hi"], dtype=np.int64)
    if lo.size:
        key = _tile_key(x, y, route["tiling"])
        p = np.searchsorted(lo, key, side="right") - 1
        okp = (p >= 0) & (key <= hi[np.maximum(p, 0)])
        sel = np.flatnonzero(okp)
        index = np.asarray(route["group"]["index"], dtype=np.int64)
        _write_pieces(scratch, index[p[sel]], f"c{i:06d}", pd.DataFrame({"x": x[sel], "y": y[sel]}))
    return out


def _write_pieces(scratch: str, part: NDArray[np.int64], name: str, frame: pd.DataFrame) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    if not part.size:
        return
    table = pa.Table.from_pandas(frame, preserve_index=False)
    order = np.argsort(part, kind="stable")
    up, start = np.unique(part[order], return_index=True)
    bounds = np.r_[start, order.size]
    for t, p in enumerate(up):
        d = Path(scratch) / f"v{int(p):05d}"
        d.mkdir(parents=True, exist_ok=True)
        rows = table.take(order[bounds[t] : bounds[t + 1]])
        feather.write_feather(rows, d / f"{name}.arrow", compression="uncompressed")


# ----------------------------------------------------------------------------
# Part round
# ----------------------------------------------------------------------------


def _read_pieces(d: Path, prefix: str, columns: Sequence[str]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.feather as feather

    files = sorted(d.glob(f"{prefix}*.arrow")) if d.is_dir() else []
    if not files:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return pa.concat_tables([feather.read_table(p) for p in files]).to_pandas()


def _majority_unit(members: pd.DataFrame) -> pd.Series:
    """Unit holding most members of every id; ties to the first unit id in sort order."""
    codes, uniques = pd.factorize(members["unit"].astype(str))
    texts = np.asarray(uniques, dtype=object).astype(str)
    by_text = np.argsort(texts, kind="stable")
    rank = np.empty(texts.size, dtype=np.int64)
    rank[by_text] = np.arange(texts.size)  # a unit's place in text order
    nu = max(1, texts.size)
    ids = members["id"].to_numpy(dtype=np.int64)
    pairs, n = np.unique(ids * nu + rank[codes], return_counts=True)
    pid, prank = pairs // nu, pairs % nu
    order = np.lexsort((prank, -n, pid))  # per id: most members, then first in text order
    first = order[np.r_[True, pid[order][1:] != pid[order][:-1]]] if order.size else order
    return pd.Series(texts[by_text][prank[first]], index=pd.Index(pid[first], name="id"))


def _part_task(
    root: str,
    j: int,
    part: dict[str, Any],
    scratch: str,
    k: int,
    r_max: float,
    tolerance_m: float,
    tiling: Mapping[str, float],
    has_subject: bool,
    bad_names: frozenset[str],
    scan: bool,
    crs: str | None = None,
) -> dict[str, Any]:
    """Every per-group (or per-class) check of one release part.

    ``crs`` is the release's CRS (working and published): when it is named, a member
    within r_max on the map is measured again on its ellipsoid, as in
    :func:`geokanon.verify.verify_release` (``extent``).
    """
    import pyarrow.parquet as pq

    rel = Path(root) / "release"
    d = Path(scratch) / f"v{j:05d}"
    probs: dict[str, list[str]] = {
        "k_subjects": [], "extent": [], "representation": [], "counts": [], "no_leak": []
    }  # fmt: skip
    out: dict[str, Any] = {"problems": probs, "released": pd.Series(dtype=np.int64), "rows": 0}
    path = rel / str(part["file"])
    name = str(part["file"])
    try:
        records = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        probs["counts"].append(f"{name} is unreadable ({type(exc).__name__})")
        return out
    members = _read_pieces(d, "m", ["id", "x", "y", "subject", "raw_subject", "unit"])
    mid = members["id"].to_numpy(dtype=np.int64)
    mx = members["x"].to_numpy(dtype=np.float64)
    my = members["y"].to_numpy(dtype=np.float64)
    first, end = int(part["first"]), int(part["end"])
    kind = part["kind"]
    table = "groups.parquet" if kind == "group" else "classes.parquet"
    id_col = "group_id" if kind == "group" else "class_id"
    try:
        rows = pq.read_table(
            rel / table, filters=[(id_col, ">=", first), (id_col, "<", end)]
        ).to_pandas()
    except (OSError, ValueError) as exc:
        probs["counts"].append(f"{table} is unreadable ({type(exc).__name__})")
        return out
    out["rows"] = len(rows)
    ids = rows[id_col].to_numpy(dtype=np.int64)
    if len(np.unique(ids)) != len(ids) or not np.array_equal(np.sort(ids), np.arange(first, end)):
        probs["counts"].append(f"{table}: ids {first}..{end - 1} are not each present once")
    rows = rows.drop_duplicates(id_col).set_index(id_col)
    uid, per_id = np.unique(mid, return_counts=True)
    members_per_id = pd.Series(per_id, index=uid)
    n_mem = members_per_id.reindex(rows.index, fill_value=0)
    if not np.isin(uid, rows.index.to_numpy()).all():
        probs["counts"].append(f"{name}: audit members of ids not in {table}")
    if has_subject:
        distinct = members.groupby("id")["subject"].nunique()
    else:
        distinct = members_per_id
    distinct = distinct.reindex(rows.index, fill_value=0)
    small = int((distinct < k).sum())
    if small:
        probs["k_subjects"].append(f"{small} of {len(rows)} {kind}s in {name} hold < k subjects")
    size = pd.to_numeric(rows["n_records"]).to_numpy(dtype=np.int64)
    if not np.array_equal(size, n_mem.to_numpy()):
        bad = int((size != n_mem.to_numpy()).sum())
        probs["counts"].append(f"{bad} {kind} sizes in {table} differ from the audit ({name})")
    rid = pd.to_numeric(records[id_col], errors="coerce") if id_col in records else None
    if rid is None:
        probs["counts"].append(f"{name} has no {id_col} column")
    else:
        per = rid.dropna().astype(np.int64).value_counts().reindex(rows.index, fill_value=0)
        if rid.isna().any() or not np.array_equal(per.to_numpy(), n_mem.to_numpy()):
            probs["counts"].append(f"rows per {kind} in {name} differ from the audit")
        if len(records) != len(members):
            probs["counts"].append(f"{name} has {len(records)} rows for {len(members)} members")
    out["records"] = len(records)
    if kind == "group":
        rx = pd.to_numeric(rows["x"]).to_numpy(dtype=np.float64)
        ry = pd.to_numeric(rows["y"]).to_numpy(dtype=np.float64)
        radius = pd.to_numeric(rows.get("radius_m", pd.Series(r_max, index=rows.index)))
        radius = radius.to_numpy(dtype=np.float64)
        if (radius > r_max).any():
            probs["extent"].append(f"{int((radius > r_max).sum())} groups publish radius_m > r_max")
        pos = rows.index.get_indexer(mid)
        okm = pos >= 0
        limit = np.minimum(r_max, radius) + tolerance_m
        dx = mx[okm] - rx[pos[okm]]
        dy = my[okm] - ry[pos[okm]]
        dist = np.sqrt(dx * dx + dy * dy)
        far = dist > limit[pos[okm]]
        ground = _Ground.of(crs, crs)
        if ground is not None:
            on_ground, _ = ground.beyond(
                mx, my, np.flatnonzero(okm), rx, ry, pos[okm], dist, limit[pos[okm]]
            )
            if on_ground.any():
                n_g = int(np.unique(mid[okm][on_ground]).size)
                probs["extent"].append(
                    f"{n_g} groups in {name} have members beyond r_max on the ellipsoid"
                )
        if far.any() or not np.isfinite(dist).all():
            n_far = int(np.unique(mid[okm][far | ~np.isfinite(dist)]).size)
            probs["extent"].append(f"{n_far} groups in {name} have members beyond r_max")
        same = dist <= tolerance_m if tolerance_m > 0 else (dx == 0) & (dy == 0)
        if same.any():
            probs["representation"].append(
                f"{int(np.unique(mid[okm][same]).size)} representatives in {name} equal a "
                "member's coordinate"
            )
        mean = members.groupby("id")[["x", "y"]].mean().reindex(rows.index)
        centroid = (mean["x"].to_numpy() == rx) & (mean["y"].to_numpy() == ry)
        if centroid.any():
            probs["representation"].append(
                f"{int(centroid.sum())} representatives in {name} are their members' mean"
            )
        if "unit" in rows.columns and len(members):
            maj = _majority_unit(members).reindex(rows.index)
            wrong = int((maj.astype(str) != rows["unit"].astype(str)).sum())
            if wrong:
                probs["counts"].append(f"{wrong} group units in {name} are not the majority unit")
            out["released"] = pd.Series(size, index=rows["unit"].astype(str)).groupby(level=0).sum()
        if rid is not None and {"x", "y"} <= set(records.columns):
            rpos = rows.index.get_indexer(rid.fillna(-1).astype(np.int64))
            okr = rpos >= 0
            same_rep = np.array_equal(
                records["x"].to_numpy(dtype=np.float64)[okr], rx[rpos[okr]]
            ) and np.array_equal(records["y"].to_numpy(dtype=np.float64)[okr], ry[rpos[okr]])
            if not same_rep:
                probs["counts"].append(f"{name}: published x, y differ from the representative")
        key = _tile_key(rx, ry, tiling)
        if ((key < int(part["tile_lo"])) | (key > int(part["tile_hi"]))).any():
            probs["no_leak"].append(
                f"{name}: representatives outside the part's tiles (not every source point "
                "near them was compared)"
            )
    else:
        if {"level", "unit"} <= set(records.columns) and rid is not None:
            rec = records.assign(_id=rid)
            want = rows.loc[rows.index.intersection(rid.dropna().astype(np.int64))]
            got = rec.drop_duplicates(["_id", "level", "unit"])
            if len(got) != len(want) or not all(
                str(want.at[int(r["_id"]), "level"]) == str(r["level"])
                and str(want.at[int(r["_id"]), "unit"]) == str(r["unit"])
                for _, r in got.iterrows()
            ):
                probs["counts"].append(f"{name}: level/unit of records differ from classes")
    if scan:
        coords = _read_pieces(d, "c", ["x", "y"])
        sx = np.concatenate([mx, coords["x"].to_numpy(dtype=np.float64)])
        sy = np.concatenate([my, coords["y"].to_numpy(dtype=np.float64)])
        ids_ = members["raw_subject"].to_numpy(dtype=object) if has_subject else None
        sec = _secrets(sx, sy, ids_, k, bad_names)
        found = _scan_parquet(path, sec)
        if kind == "group":
            found += [f"groups.parquet rows: {f}" for f in _scan_frame(rows.reset_index(), sec)]
        if found:
            probs["no_leak"].append(f"{name}: " + ", ".join(dict.fromkeys(found)))
    return out


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------


def _run_tasks(client: Any, func: Callable[..., Any], payloads: list[tuple[Any, ...]]) -> list[Any]:
    if client is None:
        return [func(*p) for p in payloads]
    futures = [client.submit(func, *p, pure=False) for p in payloads]
    try:
        return list(client.gather(futures))
    finally:
        for fut in futures:
            fut.release()


def _result(name: str, problems: Sequence[str], ok_detail: str) -> CheckResult:
    if problems:
        more = f" (and {len(problems) - _MAX_NOTES} more)" if len(problems) > _MAX_NOTES else ""
        return CheckResult(name, False, "; ".join(problems[:_MAX_NOTES]) + more)
    return CheckResult(name, True, ok_detail)


def _json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path.name} is missing or unreadable ({type(exc).__name__})") from None


def verify_partitioned(
    directory: str | Path,
    *,
    source: Any,
    client: Any = None,
    scratch_dir: str | Path | None = None,
    tolerance_m: float = 0.0,
    checks: Sequence[str] | None = None,
    leak_files: Sequence[str] | None = None,
) -> VerificationReport:
    """Run every check of :data:`geokanon.verify.CHECKS` on a partitioned release.

    Parameters
    ----------
    directory
        The directory holding ``release/`` and ``audit/`` (final or being built).
    source
        The source partitions the release was made from (a
        :class:`geokanon.distributed.ParquetPartitions` or any object with
        ``__len__`` and ``load(i)``), re-read here.
    client
        A ``distributed.Client`` (tasks on the cluster), or ``None`` (here, one
        after the other).
    scratch_dir
        Where the routed pieces go (every worker must read and write it);
        removed afterwards.
    tolerance_m
        Slack added to ``r_max_m`` in ``extent`` (and the distance at which a
        representative counts as a member's coordinate).
    checks
        Run only these checks (default: all).
    leak_files
        Scan only these small files (relative to ``release/``) in ``no_leak``,
        and skip the part round's scan (used by the writer to re-check the report
        once it is in place; the other files are covered by ``manifest``).

    Returns
    -------
    geokanon.verify.VerificationReport
    """
    root = Path(directory)
    rel, aud = root / "release", root / "audit"
    if not rel.is_dir() or not aud.is_dir():
        raise InputError(
            f"{str(root)!r} is not a release directory: it must hold release/ and audit/"
        )
    names = tuple(CHECKS if checks is None else checks)
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        raise InputError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    manifest = _json(rel / "manifest.json")
    audit = _json(aud / "audit.json")
    info = audit.get("partitioned")
    if not isinstance(info, Mapping):
        raise InputError(
            f"{str(root)!r} is not a partitioned release (no audit.json 'partitioned'); "
            "verify it with geokanon.verify.verify_release"
        )
    k = int(manifest.get("k", 0) or 0)
    r_max = float(manifest.get("r_max_m", 0.0) or 0.0)
    working = audit.get("working_crs") or manifest.get("crs") or None
    working = None if working is None else str(working)
    sizes = [int(s) for s in info.get("rows_per_source_part", [])]
    if len(source) != len(sizes):
        raise InputError(
            f"the source has {len(source)} partitions; the release was made from {len(sizes)}"
        )
    parts: list[dict[str, Any]] = [dict(p) for p in info.get("parts", [])]
    tiling = dict(info.get("tiling", {}))
    roles = dict(audit.get("read_options", {}))
    bad = set(_ROW_NAMES) | {str(roles[c]) for c in ("subject", "time") if roles.get(c)}
    bad_names = frozenset({b.lower() for b in bad} - _STRUCTURAL)
    leak_all = leak_files is None
    need_parts = leak_all and any(
        c in names for c in ("k_subjects", "extent", "representation", "counts", "no_leak")
    )
    route: dict[str, Any] | None = None
    if need_parts:
        route = {"tiling": tiling}
        for kind in ("group", "class"):
            sel = [(j, p) for j, p in enumerate(parts) if p.get("kind") == kind]
            route[kind] = {
                "index": [j for j, _ in sel],
                "first": [int(p["first"]) for _, p in sel],
                "end": [int(p["end"]) for _, p in sel],
                "tile_lo": [int(p.get("tile_lo", 0)) for _, p in sel],
                "tile_hi": [int(p.get("tile_hi", 0)) for _, p in sel],
            }
    small = ["manifest.json", "units.csv", "RELEASE_NOTES.md", "report.html", "classes.parquet"]
    scan_names = list(leak_files) if leak_files is not None else small
    scan = [(s, str(rel / s)) for s in scan_names if (rel / s).is_file()]
    meta_file: Path | None = None
    base = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
    scratch = base / f"geokanon-verify-{uuid.uuid4().hex[:12]}"
    scratch.mkdir(parents=True)
    try:
        if leak_all and (rel / "groups.parquet").is_file():
            import pyarrow.parquet as pq

            meta = pq.read_schema(rel / "groups.parquet").metadata or {}
            meta_file = scratch / "groups-metadata.txt"
            meta_file.write_text(
                "\n".join(v.decode("utf-8", errors="replace") for v in meta.values())
            )
            scan.append(("groups.parquet (metadata)", str(meta_file)))
        offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        r1 = _run_tasks(
            client, _source_task,
            [(source, i, int(offsets[i]), str(aud / "assignment" / f"part-{i:05d}.parquet"),
              route, str(scratch), scan, k, bad_names) for i in range(len(sizes))],
        )  # fmt: skip
        has_subject = bool(r1[0]["has_subject"]) if r1 else False
        r2: list[dict[str, Any]] = []
        if need_parts:
            r2 = _run_tasks(
                client, _part_task,
                [(str(root), j, p, str(scratch), k, r_max, tolerance_m, tiling, has_subject,
                  bad_names, "no_leak" in names, working) for j, p in enumerate(parts)],
            )  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reduced = _Reduced(root, manifest, audit, parts, r1, r2, has_subject, k, leak_all)
    results = []
    for name in CHECKS:
        if name not in names:
            continue
        try:
            results.append(getattr(reduced, f"check_{name}")())
        except (_Unreadable, KeyError, ValueError, TypeError) as exc:
            results.append(CheckResult(name, False, f"cannot check: {exc}"))
    return VerificationReport(tuple(results))


class _Reduced:
    """The driver's checks over the tasks' results."""

    def __init__(
        self,
        root: Path,
        manifest: dict[str, Any],
        audit: dict[str, Any],
        parts: list[dict[str, Any]],
        r1: list[dict[str, Any]],
        r2: list[dict[str, Any]],
        has_subject: bool,
        k: int,
        leak_all: bool,
    ) -> None:
        self.root, self.rel = root, root / "release"
        self.manifest, self.audit, self.parts = manifest, audit, parts
        self.r1, self.r2, self.has_subject, self.k, self.leak_all = r1, r2, has_subject, k, leak_all
        self.n = int(sum(r["n"] for r in r1))
        self.units_table = pd.read_csv(self.rel / "units.csv", dtype=str, keep_default_na=False)
        self.classes = pd.read_parquet(self.rel / "classes.parquet")
        full = [r for r in r1 if "disposals" in r]
        self.complete = len(full) == len(r1)
        self.unit_records = (
            pd.concat([r["unit_records"] for r in full]).groupby(level=0).sum()
            if full
            else pd.Series(dtype=np.int64)
        )
        if has_subject and full:
            t = pd.concat([r["triples"] for r in full], ignore_index=True)
            per = t.groupby(["unit", "subject"], sort=True)["sup"].any().reset_index()
            self.unit_subjects = per.groupby("unit")["sup"].size()
            self.unit_sup = per.groupby("unit")["sup"].sum()
            subj = t.groupby("subject")["sup"].any()
            self.subjects, self.sup_subjects = int(subj.size), int(subj.sum())
            raw_ids = np.unique(np.concatenate([r["raw_ids"] for r in full]))
            self.subject_ids_merged = int(raw_ids.size) - self.subjects
        else:
            sup = (
                pd.concat([r["unit_suppressed_records"] for r in full]).groupby(level=0).sum()
                if full
                else pd.Series(dtype=np.int64)
            )
            self.unit_subjects = self.unit_records
            self.unit_sup = sup.reindex(self.unit_records.index, fill_value=0)
            self.subjects = self.n
            self.sup_subjects = int(self.unit_sup.sum())
            self.subject_ids_merged = 0
        self.disposals = {d: int(sum(r["disposals"][d] for r in full)) for d in _DISPOSALS}

    def _part_problems(self, name: str) -> list[str]:
        return [p for r in self.r2 for p in r["problems"][name]]

    def _scope(self) -> str:
        return f"{len(self.parts)} parts, {len(self.r1)} source partitions"

    def check_k_subjects(self) -> CheckResult:
        n_groups = int(self.manifest.get("groups", 0) or 0)
        return _result(
            "k_subjects", self._part_problems("k_subjects"),
            f"{n_groups} groups and {len(self.classes)} classes hold >= {self.k} distinct "
            f"subjects ({self._scope()})",
        )  # fmt: skip

    def check_extent(self) -> CheckResult:
        return _result(
            "extent", self._part_problems("extent"),
            f"every member within r_max of its representative ({self._scope()})",
        )  # fmt: skip

    def check_representation(self) -> CheckResult:
        return _result(
            "representation", self._part_problems("representation"),
            "no representative equals a member's coordinate or its members' mean",
        )  # fmt: skip

    def _share_ok(self, s: int, n: int, cap: Fraction) -> bool:
        return n > 0 and Fraction(s, n) <= cap

    def check_tau(self) -> CheckResult:
        tau = _decimal_fraction(self.manifest.get("tau"), "tau")
        s, n = self.sup_subjects, self.subjects
        if n == 0:
            return CheckResult("tau", False, "the source holds no subjects")
        return CheckResult(
            "tau", Fraction(s, n) <= tau, f"{_share_text(s, n, self.k)} suppressed "
            f"(tau {float(tau):g})"
        )  # fmt: skip

    def check_unit_cap(self) -> CheckResult:
        cap = _decimal_fraction(self.manifest.get("unit_cap"), "unit_cap")
        sup = self.unit_sup.reindex(self.unit_subjects.index, fill_value=0)
        breaches = [
            str(u)
            for u, s, n in zip(
                sup.index, sup.to_numpy(), self.unit_subjects.to_numpy(), strict=True
            )
            if n and Fraction(int(s), int(n)) > cap
        ]
        if breaches:
            return CheckResult(
                "unit_cap", False, f"{len(breaches)} of {len(sup)} units above the unit cap "
                f"{float(cap):g}: " + ", ".join(breaches[:10]),
            )  # fmt: skip
        return CheckResult("unit_cap", True, f"{len(sup)} units within the unit cap {float(cap):g}")

    def _unit_rows(self) -> list[dict[str, Any]]:
        t = self.units_table
        classes = self.classes
        unit_level = classes[classes["level"].astype(str) == "unit"]
        class_records: dict[str, int] = {}
        for u, size in zip(unit_level["unit"].astype(str), unit_level["n_records"], strict=True):
            class_records[u] = class_records.get(u, 0) + int(size)
        rows = []
        for _, r in t.iterrows():
            released = _cell_value(r["released"])
            if not isinstance(released, int):
                raise _Unreadable("units.csv released must be an integer in every row")
            sup = _cell_value(r["suppressed"])
            if sup is None:
                raise _Unreadable("units.csv suppressed is empty in some row")
            total = _cell_value(r["source_total"]) if "source_total" in t.columns else None
            rows.append({
                "unit": str(r["unit"]), "released": released, "suppressed": sup,
                "generalised_up": None, "source_total": total, "synthetic": 0,
                "class_records": class_records.get(str(r["unit"]), 0),
            })  # fmt: skip
        return rows

    def check_holes(self) -> CheckResult:
        # the same system as the single-machine verifier: every figure of every release file
        # (the groups are in the parts: their sizes enter through the manifest's counts)
        return holes_check(
            k=self.k, manifest=self.manifest, rows=self._unit_rows(),
            units_table=self.units_table, groups=None, classes=self.classes,
            own_subjects=not self.has_subject, record_bound=self.n,
            groups_by_majority_unit=True, records_rows=None,
            notes=_text_file(self.rel / "RELEASE_NOTES.md"),
            report=_text_file(self.rel / "report.html"),
        )  # fmt: skip

    def check_no_leak(self) -> CheckResult:
        problems = [leak for r in self.r1 for leak in r["leaks"]]
        # the same finding from several partitions once
        problems = list(dict.fromkeys(problems))
        problems += self._part_problems("no_leak")
        if self.leak_all:
            listed = {str(p["file"]) for p in self.parts}
            scanned_small = {"manifest.json", "units.csv", "RELEASE_NOTES.md", "report.html",
                             "classes.parquet", "groups.parquet"}  # fmt: skip
            for p in sorted(self.rel.rglob("*")):
                name = p.relative_to(self.rel).as_posix()
                if p.is_file() and name not in listed and name not in scanned_small:
                    problems.append(f"{name}: a file no check scans")
        return _result(
            "no_leak", problems,
            f"{len(self.parts)} parts and the small files scanned for source coordinates, "
            "subject ids and row numbers (scope: see the manifest's verification_scope)",
        )  # fmt: skip

    def check_counts(self) -> CheckResult:
        problems = [p for r in self.r1 for p in r["problems"]] + self._part_problems("counts")
        m = self.manifest
        k = self.k
        if not self.complete:
            return _result("counts", problems or ["the audit could not be read"], "")
        counts = m.get("counts") or {}
        for d in ("grouped", "merged", "generalised"):
            if counts.get(d) != self.disposals[d]:
                problems.append(f"manifest counts.{d} differs from the audit")
        sup_shown = counts.get("suppressed")
        s_subj = self.sup_subjects
        if sup_shown == LESS_THAN_K:
            if not 0 < s_subj < k:
                problems.append("manifest counts.suppressed reads <k but is not 1..k-1 subjects")
        elif sup_shown != WITHHELD and sup_shown != self.disposals["suppressed"]:
            problems.append("manifest counts.suppressed differs from the audit")
        share = m.get("suppressed_share")
        if isinstance(share, int | float) and not isinstance(share, bool):
            target = s_subj / self.subjects if self.subjects else 0.0
            if abs(float(share) - target) > 5e-7:
                problems.append("manifest suppressed_share differs from the audit")
        merged = m.get("subject_ids_merged")
        if merged is not None and merged != self.subject_ids_merged:
            problems.append(
                f"manifest subject_ids_merged is {merged!r}; the source's ids merge "
                f"{self.subject_ids_merged}"
            )
        rows_total = int(sum(r.get("records", 0) for r in self.r2))
        if m.get("records_published") != rows_total:
            problems.append("manifest records_published differs from the parts' rows")
        n_groups = sum(r["rows"] for j, r in enumerate(self.r2) if self.parts[j]["kind"] == "group")
        group_rows = len(pd.read_parquet(self.rel / "groups.parquet", columns=["group_id"]))
        if n_groups != group_rows or m.get("groups") != group_rows:
            problems.append("groups.parquet rows are not all covered by the parts")
        class_rows = sum(
            r["rows"] for j, r in enumerate(self.r2) if self.parts[j]["kind"] == "class"
        )
        if class_rows != len(self.classes) or m.get("classes") != len(self.classes):
            problems.append("classes.parquet rows are not all covered by the parts")
        # units.csv
        released = (
            pd.concat([r["released"] for r in self.r2 if len(r["released"])]).groupby(level=0).sum()
            if any(len(r["released"]) for r in self.r2)
            else pd.Series(dtype=np.int64)
        )
        unit_level = self.classes[self.classes["level"].astype(str) == "unit"]
        for u, size in zip(unit_level["unit"].astype(str), unit_level["n_records"], strict=True):
            released.loc[u] = int(released.get(u, 0)) + int(size)
        t = self.units_table
        if set(t["unit"].astype(str)) != {str(u) for u in self.unit_records.index}:
            problems.append("units.csv units differ from the source's units")
        wrong = 0
        for _, r in t.iterrows():
            u = str(r["unit"])
            if _cell_value(r["released"]) != int(released.get(u, 0)):
                wrong += 1
            shown = _cell_value(r["suppressed"])
            true = int(self.unit_sup.get(u, 0))
            if shown == LESS_THAN_K:
                wrong += not 0 < true < k
            elif shown == WITHHELD:
                wrong += 0 < true < k  # a sensitive figure reads '<k'
            elif shown != true:
                wrong += 1
            if "source_total" in t.columns:
                tot = _cell_value(r["source_total"])
                if tot not in (WITHHELD, LESS_THAN_K) and tot != int(self.unit_records.get(u, 0)):
                    wrong += 1
        if wrong:
            problems.append(f"{wrong} figures in units.csv differ from the audit")
        return _result(
            "counts", problems,
            f"{rows_total} published records, {group_rows} groups, {len(self.classes)} classes "
            f"and {len(t)} unit rows equal what the audit assigns",
        )  # fmt: skip

    def check_fixed_point(self) -> CheckResult:
        passes = self.manifest.get("passes")
        if not isinstance(passes, list) or not passes:
            return CheckResult("fixed_point", False, "manifest passes is missing or empty")
        if len(passes) > MAX_PASSES:
            return CheckResult("fixed_point", False, f"{len(passes)} passes exceed {MAX_PASSES}")
        last = passes[-1]
        changed = last.get("changed") if isinstance(last, Mapping) else None
        if isinstance(changed, bool) or not isinstance(changed, int) or changed != 0:
            return CheckResult("fixed_point", False, "the last pass changed labels")
        if self.audit.get("passes") is not None and self.audit.get("passes") != passes:
            return CheckResult("fixed_point", False, "manifest passes differ from the audit's")
        return CheckResult(
            "fixed_point", True, f"fixed point after {len(passes)} passes (last changed 0)"
        )

    def check_report_safety(self) -> CheckResult:
        k = self.k
        problems: list[str] = []
        notes = self.rel / "RELEASE_NOTES.md"
        if notes.is_file():
            text = notes.read_text(encoding="utf-8", errors="replace")
            n = sum(_table_problems(b, h, k) for h, b in _markdown_tables(text))
            n += _phrase_problems(text, k)
            if n:
                problems.append(f"RELEASE_NOTES.md: {n} suppressed figures of 1..k-1")
        else:
            problems.append("release/RELEASE_NOTES.md is missing")
        for page in sorted(self.rel.glob("*.htm*")):
            text = page.read_text(encoding="utf-8", errors="replace")
            parser = _TableParser()
            parser.feed(text)
            parser.close()
            n = 0
            for table in parser.tables:
                if not table:
                    continue
                head_i = next((i for i, r in enumerate(table) if r and all(h for _, h in r)), None)
                header = [t for t, _ in table[head_i]] if head_i is not None else []
                if not header:
                    header, head_i = [t for t, _ in table[0]], 0
                body = [[t for t, _ in r] for i, r in enumerate(table) if i != head_i]
                n += _table_problems(body, header, k)
            n += _phrase_problems(re.sub(r"<[^>]+>", " ", text), k)
            if n:
                problems.append(f"{page.name}: {n} suppressed figures of 1..k-1")
        units = self.units_table
        n_units = int(sum(_small_int(str(v), k) for v in units["suppressed"]))
        if n_units:
            problems.append(f"units.csv: {n_units} units publish 1..k-1 suppressed subjects")
        if "source_total" in units.columns:
            smallu = {str(u) for u, n in self.unit_subjects.items() if 0 < int(n) < k}
            shown = [
                (u, _cell_value(t))
                for u, t in zip(units["unit"].astype(str), units["source_total"], strict=True)
            ]
            n_small = sum(1 for u, t in shown if u in smallu and t != LESS_THAN_K)
            if n_small:
                problems.append(
                    f"units.csv: {n_small} source totals rest on 1..k-1 subjects and do not read <k"
                )
            n_false = sum(1 for u, t in shown if u not in smallu and t == LESS_THAN_K)
            if n_false:
                problems.append(
                    f"units.csv: {n_false} source totals read <k for 0 or >= k subjects"
                )
        passes = self.manifest.get("passes")
        if isinstance(passes, list) and any(
            isinstance(p, Mapping) and isinstance(p.get("labels"), Mapping)
            and _small_int(str(p["labels"].get("suppress", "")), k)
            for p in passes
        ):  # fmt: skip
            problems.append("manifest passes: 'suppress' label counts of 1..k-1")
        if 0 < self.sup_subjects < k:
            counts = self.manifest.get("counts") or {}
            if counts.get("suppressed") not in (LESS_THAN_K, WITHHELD):
                problems.append("manifest counts.suppressed should read '<k'")
            if self.manifest.get("suppressed_share", LESS_THAN_K) not in (
                LESS_THAN_K, WITHHELD,
            ):  # fmt: skip
                problems.append("manifest suppressed_share should read '<k'")
        return _result(
            "report_safety", problems,
            "no suppressed figure of 1..k-1 in RELEASE_NOTES.md, report.html, units.csv or "
            "the manifest",
        )  # fmt: skip

    def check_manifest(self) -> CheckResult:
        files = self.manifest.get("files")
        if not isinstance(files, Mapping):
            return CheckResult("manifest", False, "manifest files is missing")
        on_disk = {
            p.relative_to(self.rel).as_posix(): p
            for p in sorted(self.rel.rglob("*"))
            if p.is_file() and p.relative_to(self.rel).as_posix() != "manifest.json"
        }
        problems = []
        unlisted = sorted(set(on_disk) - set(files))
        missing = sorted(set(files) - set(on_disk))
        wrong = sorted(n for n in set(on_disk) & set(files) if str(files[n]) != _sha256(on_disk[n]))
        if unlisted:
            problems.append(f"{len(unlisted)} files not listed: {', '.join(unlisted[:5])}")
        if missing:
            problems.append(f"{len(missing)} listed files missing: {', '.join(missing[:5])}")
        if wrong:
            problems.append(f"{len(wrong)} sha256 mismatches: {', '.join(wrong[:5])}")
        shas = [r.get("sha256") for r in self.r1]
        checked_input = bool(shas) and all(shas)
        if checked_input:
            combined = hashlib.sha256("\n".join(str(s) for s in shas).encode()).hexdigest()
            if self.manifest.get("input_sha256") != combined:
                problems.append("input_sha256 differs from the source partitions' checksums")
        extra = " and the input checksum" if checked_input else ""
        return _result("manifest", problems, f"{len(on_disk)} files match their sha256{extra}")

"""The ``manifest`` check: every release file is listed with its checksum.

The rule, exactly as implemented
--------------------------------
``manifest``
    Every file under ``release/`` except ``manifest.json`` is listed in
    ``files`` with its sha256, no listed file is missing, and the manifest's
    ``input_sha256`` matches the source when the source is given. Every file the
    layout promises (:data:`PROMISED_FILES`; partitioned: at least one
    ``records/part-*.parquet``, as many as ``record_parts``) is there, ``report.html``
    too unless the writer's first run says it is not written yet (``before_report``;
    left unsaid, a manifest that records no verification results is the writer's
    draft; ``geokanon verify`` always requires it).
    The manifest's parameters agree with the other files: ``k``, ``r_max_m``,
    ``tau``, ``unit_cap`` and ``seed`` equal ``policy``'s; no ``radius_m`` is below
    ``r_max_m`` (above fails ``extent``); the audit's ``r_work_m`` is ``r_max_m x
    min(1, policy.scale_factor_min)`` (within 1e-9 relative); ``crs`` is the audit's
    ``output_crs`` and every records file's GeoParquet CRS (compared with pyproj;
    null agrees only with null). A ``report_sample`` (the partitioned report's sample)
    is ``records``, ``every``, ``divisor`` as integers, drawn only above ``divisor`` audit
    records with ``every = max(2, records // divisor)``, and ``records`` is exactly what
    the rule draws from the audit (:func:`_report_sample_problems`). The results the
    manifest records (``verification``) name every check, each ``true``
    (:func:`_recorded_results_problems`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from geokanon.verify._arrays import first_other_line
from geokanon.verify._reader import ReleaseReader
from geokanon.verify._records import record_paths
from geokanon.verify._results import CHECKS, NOT_CHECKED_HERE, CheckResult
from geokanon.verify.containers import geo_crs_problems


def _manifest_writing_problems(path: Path) -> list[str]:
    """``manifest.json`` byte for byte as the format writes what it holds: JSON with the
    keys sorted, two-space indents, non-ASCII text escaped, one final line break
    (``json.dumps(..., indent=2, sort_keys=True) + "\\n"``). Spaces, key order or a key
    given twice read as the same manifest, and could each carry bits past the checks of
    its values."""
    have = path.read_bytes()
    try:
        want = (json.dumps(json.loads(have), indent=2, sort_keys=True) + "\n").encode()
    except ValueError:  # unreadable: the reader has said so
        return []
    line = first_other_line(have, want)
    if line is None:
        return []
    return [
        "manifest.json holds its values but not as the format writes them (keys sorted, "
        f"two-space indents, one final line break); the first other byte is on line {line}"
    ]


def check_manifest(rel: ReleaseReader) -> CheckResult:
    files = rel.manifest.get("files")
    if not isinstance(files, Mapping):
        return CheckResult("manifest", False, "manifest files is missing")
    on_disk = {
        p.relative_to(rel.rel).as_posix(): p
        for p in rel.release_files()
        if p.relative_to(rel.rel).as_posix() != "manifest.json"
    }
    unlisted = sorted(set(on_disk) - set(files))
    missing = sorted(set(files) - set(on_disk))
    digests = {
        name: rel.unchanged[name]
        if name in rel.unchanged
        else rel.read_digests.get(path) or _sha256(path)
        for name, path in sorted(on_disk.items())
    }
    rel.digests.update(digests)
    wrong = sorted(
        name for name in set(on_disk) & set(files) if str(files[name]).lower() != digests[name]
    )
    problems: list[str] = []
    if unlisted:
        problems.append(f"{len(unlisted)} files not listed: {', '.join(unlisted[:5])}")
    if missing:
        problems.append(f"{len(missing)} listed files missing: {', '.join(missing[:5])}")
    if wrong:
        problems.append(f"{len(wrong)} sha256 mismatches: {', '.join(wrong[:5])}")
    src_sha = rel.source.sha256
    if src_sha and rel.manifest.get("input_sha256") != src_sha:
        problems.append("input_sha256 differs from the source's checksum")
    problems += _manifest_writing_problems(rel.rel / "manifest.json")
    problems += _promised_file_problems(rel, set(on_disk))
    problems += _parameter_problems(rel)
    problems += _report_sample_problems(rel)
    problems += _recorded_results_problems(rel)
    if problems:
        return CheckResult("manifest", False, "; ".join(problems))
    extra = " and the input checksum" if src_sha else ""
    n_same = len(set(on_disk) & set(rel.unchanged))
    same = f" ({n_same} unchanged since the previous run)" if n_same else ""
    return CheckResult("manifest", True, f"{len(on_disk)} files match their sha256{extra}{same}")


#: The files every release holds (paths in ``release/``, ``manifest.json`` aside), by layout.
PROMISED_FILES: dict[str, tuple[str, ...]] = {
    "single": ("records.parquet", "records.csv", "groups.parquet", "classes.parquet",
               "units.csv", "RELEASE_NOTES.md", "report.html"),
    "partitioned": ("groups.parquet", "classes.parquet", "units.csv", "RELEASE_NOTES.md",
                    "report.html"),
}  # fmt: skip


def _promised_file_problems(rel: ReleaseReader, present: set[str]) -> list[str]:
    """Every file the format promises is in ``release/`` (``report.html`` only once the
    report is written: the writer's first run, ``before_report``, comes before it)."""
    layout = "partitioned" if rel.manifest.get("layout") == "partitioned" else "single"
    draft = rel.before_report
    if draft is None:  # a release whose manifest records no results is the writer's draft
        draft = not rel.manifest.get("verification")
    want = [f for f in PROMISED_FILES[layout] if not (draft and f == "report.html")]
    if rel.manifest.get("gpkg_layers"):  # a writer that writes the GeoPackage says so
        want.append("release.gpkg")
    missing = [f for f in want if f not in present]
    problems = []
    if layout == "partitioned":
        parts = sorted(f for f in present if f.startswith("records/part-"))
        promised = rel.manifest.get("record_parts")
        if not parts:
            missing.append("records/part-*.parquet")
        elif (
            isinstance(promised, int) and not isinstance(promised, bool) and promised != len(parts)
        ):
            problems.append(f"the manifest promises {promised} record parts, release/ holds "
                            f"{len(parts)}")  # fmt: skip
    if missing:
        problems.insert(0, f"{len(missing)} files the format promises are missing: "
                           f"{', '.join(missing)}")  # fmt: skip
    return problems


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _parameter_problems(rel: ReleaseReader) -> list[str]:
    """The manifest's parameters agree with its ``policy``, ``groups.parquet``, the audit and
    the records' GeoParquet metadata: ``k``, ``r_max_m``, ``tau``, ``unit_cap`` and ``seed``
    equal the policy's; no ``radius_m`` is below ``r_max_m`` (above it fails ``extent``;
    the format has them equal); the audit's ``r_work_m`` is
    ``r_max_m * min(1, policy.scale_factor_min)``; ``crs`` is the audit's ``output_crs``
    and the CRS of every records file's geometry (null for null)."""
    m = rel.manifest
    problems: list[str] = []
    policy = m.get("policy")
    policy = policy if isinstance(policy, Mapping) else {}
    for name in ("k", "r_max_m", "tau", "unit_cap", "seed"):
        if name in policy and name in m and policy[name] != m[name]:
            problems.append(f"manifest {name} is {m[name]!r}, its policy's {policy[name]!r}")
    r_max = _number(m.get("r_max_m"))
    off = 0
    # a batch of rows at a time: the partitioned driver never reads all of groups.parquet
    for column in rel.groups_column("radius_m"):
        if r_max is not None:
            radius = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            # above r_max_m fails extent; the format has them equal
            off += int(np.count_nonzero(~(radius >= r_max)))
    if off:
        problems.append(f"{off} groups publish a radius_m below r_max_m (it equals r_max_m)")
    r_work = _number(rel.audit.get("r_work_m"))
    scale = _number(policy.get("scale_factor_min"))
    if r_max is not None and r_work is not None:
        expected = r_max * min(1.0, scale) if scale is not None else None
        if r_work > r_max or (
            expected is not None and abs(r_work - expected) > 1e-9 * max(1.0, r_max)
        ):
            problems.append("the audit's r_work_m does not follow from the manifest's r_max_m")
    if "crs" in m:
        crs = m.get("crs")
        crs = None if crs in (None, "") else str(crs)
        out = rel.audit.get("output_crs")
        if "output_crs" in rel.audit and not _crs_agree(crs, None if out in (None, "") else out):
            problems.append("manifest crs is not the audit's output_crs")
        for path in record_paths(rel):
            if not path.is_file():
                continue
            try:
                meta = pq.read_schema(path).metadata or {}
            except (OSError, pa.ArrowException):
                continue  # counts says the file is unreadable
            if b"geo" not in meta:
                continue
            try:
                geo = json.loads(meta[b"geo"])
                column = geo["columns"][geo["primary_column"]]
            except (ValueError, KeyError, TypeError):
                problems.append(f"{path.name} has unreadable GeoParquet metadata")
                continue
            # GeoParquet: a missing crs is OGC:CRS84, a null one is "undefined"
            if not _crs_agree(crs, column.get("crs", "OGC:CRS84")):
                problems.append(f"manifest crs is not {path.name}'s GeoParquet CRS")
                break
        # every GeoParquet file's crs, as PROJJSON (free text in it would hold anything)
        for path in sorted(rel.rel.rglob("*.parquet")):
            found = geo_crs_problems(path, crs)
            if found:
                problems.append(f"{path.relative_to(rel.rel).as_posix()}: {found[0]}")
                break
    return problems


def _recorded_results_problems(rel: ReleaseReader) -> list[str]:
    """The results the manifest records (``verification``, which ``report.html`` shows)
    are a publishable release's: every check of :data:`CHECKS` named and ``true``, and
    ``deterministic``, where recorded, ``true`` too (the writer records them before its
    one verification run and refuses a release whose results differ). None or ``{}``:
    a draft that records no results (then ``report.html`` is not required either)."""
    rec = rel.manifest.get("verification")
    if rec is None or rec == {}:
        return []
    if not isinstance(rec, Mapping):
        return ["manifest verification is not a mapping of check names to results"]
    known = set(CHECKS) | set(NOT_CHECKED_HERE)
    problems = []
    missing = [c for c in CHECKS if c not in rec]
    if missing:
        problems.append(f"manifest verification does not record {', '.join(missing)}")
    unknown = sorted(str(n) for n in rec if n not in known)
    if unknown:
        problems.append(f"manifest verification records unknown checks {', '.join(unknown)}")
    failed = [str(n) for n, v in rec.items() if n in known and v is not True]
    if failed:
        problems.append(
            f"manifest verification records {', '.join(failed)} as not passed (a published "
            "release records every check as passed)"
        )
    return problems


def _report_sample_problems(rel: ReleaseReader) -> list[str]:
    """The manifest's ``report_sample`` (``records``, ``every``, ``divisor``: the report
    is drawn from a sample) follows the writer's rule: a sample is drawn only from more
    than ``divisor`` records, 1 in ``every = max(2, records // divisor)``, and holds
    exactly the audit records that rule draws (the members of the groups whose id is a
    multiple of ``every``, and the records in no group whose coordinates' hash is:
    :func:`~geokanon.verify._arrays.sample_records`). Absent or null: no sample."""
    entry = rel.manifest.get("report_sample")
    if entry is None:
        return []
    fields = ("records", "every", "divisor")
    if (
        not isinstance(entry, Mapping)
        or set(entry) != set(fields)
        or not all(isinstance(entry[f], int) and not isinstance(entry[f], bool) for f in fields)
    ):
        return ["manifest report_sample is not {records, every, divisor} as integers"]
    records, every, divisor = (int(entry[f]) for f in fields)
    if every < 2 or divisor < 1 or records < 0:
        return ["manifest report_sample's every is below 2, its divisor below 1 or its "
                "records negative"]  # fmt: skip
    n, drawn = rel.report_sample_basis(every)
    problems = []
    if n <= divisor or every != max(2, n // divisor):
        problems.append(
            "manifest report_sample's every does not follow from the audit's records and "
            "its divisor (a sample is drawn only above divisor records, 1 in "
            "max(2, records // divisor))"
        )
    if records != drawn:
        problems.append(
            "manifest report_sample's records is not the number of audit records its rule "
            "draws (the members of the groups whose id is a multiple of every, and the "
            "records in no group whose coordinates' hash is)"
        )
    return problems


def _crs_agree(a: str | None, b: object) -> bool:
    """Whether two CRSs (a string, PROJJSON or None) are the same; None only equals None."""
    if a is None or b is None:
        return a is None and b is None
    from pyproj import CRS

    try:
        other = CRS.from_json_dict(dict(b)) if isinstance(b, Mapping) else CRS.from_user_input(b)
        return bool(CRS.from_user_input(a) == other)
    except Exception:  # pyproj's CRSError: an unreadable CRS agrees with nothing
        return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

"""The ``manifest`` check: every release file is listed with its checksum.

The rule, exactly as implemented
--------------------------------
``manifest``
    Every file under ``release/`` except ``manifest.json`` is listed in
    ``files`` with its sha256, no listed file is missing, and the manifest's
    ``input_sha256`` matches the source when the source is given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from geokanon.verify._reader import _Release
from geokanon.verify._results import CheckResult


def check_manifest(rel: _Release) -> CheckResult:
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
    if problems:
        return CheckResult("manifest", False, "; ".join(problems))
    extra = " and the input checksum" if src_sha else ""
    n_same = len(set(on_disk) & set(rel.unchanged))
    same = f" ({n_same} unchanged since the previous run)" if n_same else ""
    return CheckResult("manifest", True, f"{len(on_disk)} files match their sha256{extra}{same}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

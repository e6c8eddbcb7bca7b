"""Hand-made release directories for the verifier's tests.

:func:`write_release` writes a complete, self-consistent release (``release/`` and
``audit/``, layout of ``docs/release-format.md``) from plain arrays, computing every
published figure with the publication rules (``<k`` for 1..k-1 suppressed subjects),
and the source CSV next to it. It uses no algorithm module, so a test can build
exactly the release it needs, valid or broken on purpose. :func:`minimal_scene` is
the canonical valid case: 12 points, 2 groups of 5 subjects and 2 suppressed, k = 5.

Helpers to break a written release in one place: :func:`edit_manifest`,
:func:`edit_units`, :func:`edit_parquet`, :func:`edit_csv` (each refreshes the
manifest's checksums unless told not to).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import shapely

from geokanon.encoding import write_parquet

LESS = "<k"
#: ``passes[].scope`` of per-pass counts over the records published at group level.
GROUP_LEVEL = "records published at group level"


@dataclass(frozen=True)
class Scene:
    """Everything a release is computed from, one entry per source record.

    ``disposal`` is ``grouped``/``merged``/``generalised``/``suppressed``; ``group_id``
    and ``class_id`` are ``None`` where they do not apply. ``reps`` maps group id to
    the published representative; ``classes`` maps class id to ``(level, unit)``.
    """

    x: tuple[float, ...]
    y: tuple[float, ...]
    subjects: tuple[str, ...] | None
    units: tuple[str, ...]
    disposal: tuple[str, ...]
    group_id: tuple[int | None, ...]
    class_id: tuple[int | None, ...]
    reps: dict[int, tuple[float, float]]
    classes: dict[int, tuple[str, str]] = field(default_factory=dict)
    k: int = 5
    r_max_m: float = 100.0
    tau: float = 0.2
    unit_cap: float = 0.2
    #: None: as the writer publishes them, counted over the records published at group
    #: level (two passes, the second changing nothing); see :func:`group_level_passes`.
    passes: tuple[dict[str, Any], ...] | None = None
    times: tuple[str, ...] | None = None

    def with_(self, **changes: Any) -> Scene:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def set(self, name: str, index: int, value: Any) -> Scene:
        """A copy with one record's entry of a per-record field changed."""
        values = list(getattr(self, name))
        values[index] = value
        return replace(self, **{name: tuple(values)})


def minimal_scene() -> Scene:
    """12 records, k = 5: group 0 (5 subjects, unit north), group 1 (5, south), 2 suppressed.

    Coordinates are non-integral (like a real source at centimetre precision);
    representatives are where the writer puts them (:func:`rule_reps`): on no member
    and on no member centroid.
    """
    gx = [1003.25, 1011.5, 1027.75, 1034.5, 1019.25]
    gy = [1001.75, 1038.25, 1012.5, 1029.75, 1021.5]
    hx = [2004.5, 2031.25, 2012.75, 2026.5, 2017.25]
    hy = [3003.5, 3009.75, 3036.25, 3021.5, 3027.75]
    x = (*gx, *hx, 5003.75, 7001.5)
    y = (*gy, *hy, 5007.25, 903.5)
    units = ("north",) * 5 + ("south",) * 5 + ("north", "south")
    disposal = ("grouped",) * 10 + ("suppressed",) * 2
    gid = (0,) * 5 + (1,) * 5 + (None, None)
    return Scene(
        x=x,
        y=y,
        subjects=tuple(f"subj-{i:04d}" for i in range(12)),
        units=units,
        disposal=disposal,
        group_id=gid,
        class_id=(None,) * 12,
        reps=rule_reps(x, y, tuple(f"subj-{i:04d}" for i in range(12)), gid, 100.0),
    )


def rule_reps(
    x: tuple[float, ...],
    y: tuple[float, ...],
    subjects: tuple[str, ...] | None,
    group_id: tuple[int | None, ...],
    r_max_m: float,
) -> dict[int, tuple[float, float]]:
    """Each group's representative where the release format's rule puts it
    (``docs/release-format.md``, snap step ``S = r_max / 20``), by brute force.

    W records, centroid c, RMS radius sigma, largest subject w records: the step s is
    the coarsest ``S / 2**m`` (m <= 16) still >= max(sigma * w / W, 1 m) (S when that
    is larger); of the lattice points ``(0.5 + 0.0381966011250105) S + s (i, j)`` in a
    window around c, the one nearest c (ties: smaller y, then x) within r_max of every
    member, on none of them and not c.
    """
    step = r_max_m / 20.0
    o = (0.5 + 0.0381966011250105) * step
    out: dict[int, tuple[float, float]] = {}
    for g in sorted({v for v in group_id if v is not None}):
        idx = [i for i, v in enumerate(group_id) if v == g]
        px = np.asarray([x[i] for i in idx])
        py = np.asarray([y[i] for i in idx])
        cx, cy = float(px.mean()), float(py.mean())
        sigma = float(np.sqrt(((px - cx) ** 2 + (py - cy) ** 2).mean()))
        subj = [idx[t] if subjects is None else subjects[i] for t, i in enumerate(idx)]
        w = max(subj.count(v) for v in subj)
        need = max(sigma * w / len(idx), 1.0)
        s = step
        for _ in range(16):
            if s / 2 >= need:
                s /= 2
        i0, j0 = round((cx - o) / s), round((cy - o) / s)
        best: tuple[float, float, float] | None = None
        span = 2
        while best is None or best[0] > ((span - 1) * s) ** 2:  # a nearer one may lie outside
            if span * s > 4 * r_max_m:
                break
            span *= 2
            qx = o + (i0 + np.arange(-span, span + 1)) * s
            qy = o + (j0 + np.arange(-span, span + 1)) * s
            gx, gy = (a.ravel() for a in np.meshgrid(qx, qy))
            far = np.sqrt((px[None, :] - gx[:, None]) ** 2 + (py[None, :] - gy[:, None]) ** 2)
            on = ((px[None, :] == gx[:, None]) & (py[None, :] == gy[:, None])).any(axis=1)
            ok = (far <= r_max_m).all(axis=1) & ~on & ~((gx == cx) & (gy == cy))
            if ok.any():
                d = (gx[ok] - cx) ** 2 + (gy[ok] - cy) ** 2
                t = np.lexsort((gx[ok], gy[ok], d))[0]
                best = (float(d[t]), float(gy[ok][t]), float(gx[ok][t]))
        assert best is not None
        out[g] = (best[2], best[1])
    return out


def group_level_passes(scene: Scene) -> list[dict[str, Any]]:
    """The scene's passes as published: counted over its group-level records."""
    if scene.passes is not None:
        return [dict(p) for p in scene.passes]
    ok = sum(d == "grouped" for d in scene.disposal)
    merged = sum(d == "merged" for d in scene.disposal)
    labels = {"ok": ok, "merge": merged, "generalise": 0, "suppress": 0}
    return [
        {"pass": 1, "scope": GROUP_LEVEL, "labels": dict(labels), "changed": ok + merged},
        {"pass": 2, "scope": GROUP_LEVEL, "labels": dict(labels), "changed": 0},
    ]


@dataclass(frozen=True)
class Written:
    """A written release: ``root`` holds ``release/`` and ``audit/``; ``source`` is the CSV."""

    root: Path
    source: Path
    scene: Scene


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _int_col(values: list[int | None]) -> pa.Array:
    return pa.array(values, type=pa.int64())


def _published_suppressed(n: int, k: int) -> int | str:
    return LESS if 0 < n < k else n


def write_release(
    root: Path,
    scene: Scene,
    *,
    source: Path | None = None,
    notes: str | None = None,
    totals: str = "released",
    report_html: str | None = None,
    working_crs: str | None = None,
    output_crs: str | None = None,
) -> Written:
    """Write ``root/release``, ``root/audit`` and the source CSV for ``scene``.

    Parameters
    ----------
    root
        Directory to create (it must not exist).
    scene
        The records and their fate.
    source
        Where to write the source CSV (default: ``root.parent / "source.csv"``).
    notes
        RELEASE_NOTES.md text (default: a per-unit table with ``<k`` cells).
    totals
        ``"released"`` or ``"complementary"`` (adds ``source_total`` to units.csv).
    report_html
        report.html text (default: a page with a heading only; every release has one).
    working_crs, output_crs
        CRSs of the scene's coordinates and of the published ones (representatives
        are transformed with pyproj when they differ; the source stays in the
        working CRS).
    """
    n = len(scene.x)
    k = scene.k
    rel = root / "release"
    aud = root / "audit"
    rel.mkdir(parents=True)
    aud.mkdir()
    source = source if source is not None else root.parent / "source.csv"
    src = pd.DataFrame({"x": scene.x, "y": scene.y, "unit": scene.units})
    if scene.subjects is not None:
        src.insert(2, "subject", scene.subjects)
    if scene.times is not None:
        src["t"] = scene.times
    src.to_csv(source, index=False)
    if scene.subjects is not None:
        codes, _ = pd.factorize(pd.Series(scene.subjects), sort=True)
        subj = codes.astype(np.int64)
    else:
        subj = np.arange(n, dtype=np.int64)
    disp = np.array(scene.disposal, dtype=object)
    units = np.array(scene.units, dtype=object)

    # audit
    assignment = pa.table(
        {
            "source_row": pa.array(np.arange(n), type=pa.int64()),
            "label": pa.array(["ok" if d != "suppressed" else "suppress" for d in disp]),
            "disposal": pa.array(list(disp), type=pa.string()),
            "group_id": _int_col(list(scene.group_id)),
            "class_id": _int_col(list(scene.class_id)),
            "unit": pa.array(list(units), type=pa.string()),
            "subject": pa.array(subj, type=pa.int64()),
            "x_m": pa.array(scene.x, type=pa.float64()),
            "y_m": pa.array(scene.y, type=pa.float64()),
        }
    )
    pq.write_table(assignment, aud / "assignment.parquet")
    sup = disp == "suppressed"
    unit_names = sorted(set(scene.units))
    per_unit = []
    for u in unit_names:
        in_u = units == u
        per_unit.append(
            {
                "unit": u,
                "records": int(in_u.sum()),
                "subjects": int(np.unique(subj[in_u]).size),
                "suppressed": int(np.unique(subj[in_u & sup]).size),
            }
        )
    audit = {
        "working_crs": working_crs,
        "output_crs": output_crs,
        "subject_column": "subject" if scene.subjects is not None else None,
        "unit_column": "unit",
        "read_options": {
            "x": "x",
            "y": "y",
            "subject": "subject" if scene.subjects is not None else None,
            "unit": "unit",
            "time": "t" if scene.times is not None else None,
            "crs": working_crs,
        },
        "mask": None,
        "per_unit": per_unit,
        "passes": group_level_passes(scene),
    }
    (aud / "audit.json").write_text(json.dumps(audit, indent=2), encoding="utf-8")

    # groups and classes; a group counts whole in the unit holding most of its members
    gids = sorted({g for g in scene.group_id if g is not None})
    sizes = {g: sum(1 for v in scene.group_id if v == g) for g in gids}
    published = dict(scene.reps)
    if working_crs != output_crs:
        from pyproj import Transformer

        tr = Transformer.from_crs(working_crs, output_crs, always_xy=True)
        published = {g: tuple(map(float, tr.transform(*xy))) for g, xy in scene.reps.items()}
    majority = {}
    for g in gids:
        members = sorted(scene.units[i] for i in range(n) if scene.group_id[i] == g)
        majority[g] = max(sorted(set(members)), key=members.count)
    write_parquet(
        pa.table(
            {
                "group_id": _int_col(list(gids)),
                "n_records": _int_col([sizes[g] for g in gids]),
                "x": pa.array([published[g][0] for g in gids], type=pa.float64()),
                "y": pa.array([published[g][1] for g in gids], type=pa.float64()),
                "radius_m": pa.array([scene.r_max_m] * len(gids), type=pa.float64()),
                "unit": pa.array([majority[g] for g in gids], type=pa.string()),
            }
        ),
        rel / "groups.parquet",
    )
    cids = sorted({c for c in scene.class_id if c is not None})
    csizes = {c: sum(1 for v in scene.class_id if v == c) for c in cids}
    write_parquet(
        pa.table(
            {
                "class_id": _int_col(list(cids)),
                "level": pa.array([scene.classes[c][0] for c in cids], type=pa.string()),
                "unit": pa.array([scene.classes[c][1] for c in cids], type=pa.string()),
                "n_records": _int_col([csizes[c] for c in cids]),
            }
        ),
        rel / "classes.parquet",
    )

    # records
    rows = []
    for i in range(n):
        if disp[i] == "suppressed":
            continue
        g, c = scene.group_id[i], scene.class_id[i]
        if g is not None:
            rows.append(("group", g, None, None, *published[g]))
        else:
            assert c is not None
            level, unit = scene.classes[c]
            rows.append((level, None, c, unit, None, None))
    rows.sort(key=lambda r: (r[0], -1 if r[1] is None else r[1], -1 if r[2] is None else r[2]))
    xs = [r[4] for r in rows]
    ys = [r[5] for r in rows]
    geom = [
        None if px is None else shapely.to_wkb(shapely.Point(px, py))
        for px, py in zip(xs, ys, strict=True)
    ]
    records = pa.table(
        {
            "group_id": _int_col([r[1] for r in rows]),
            "class_id": _int_col([r[2] for r in rows]),
            "level": pa.array([r[0] for r in rows], type=pa.string()),
            "unit": pa.array([r[3] for r in rows], type=pa.string()),
            "x": pa.array(xs, type=pa.float64()),
            "y": pa.array(ys, type=pa.float64()),
            "geometry": pa.array(geom, type=pa.binary()),
        }
    )
    write_parquet(records, rel / "records.parquet")
    # as the format writes it (pyarrow: text quoted, numbers in shortest form)
    pacsv.write_csv(
        records.drop_columns(["geometry"]),
        rel / "records.csv",
        pacsv.WriteOptions(quoting_style="needed"),
    )

    # units
    unit_class = {u: c for c, (lvl, u) in scene.classes.items() if lvl == "unit"}
    unit_rows = []
    for row in per_unit:
        u = row["unit"]
        released = sum(sizes[g] for g in gids if majority[g] == u)
        if u in unit_class:
            released += sum(1 for c in scene.class_id if c == unit_class[u])
        up = {
            scene.subjects[i] if scene.subjects is not None else str(i)
            for i in range(n)
            if scene.units[i] == u
            and scene.class_id[i] is not None
            and scene.classes[scene.class_id[i]][0] != "unit"
        }
        out: dict[str, Any] = {
            "unit": u,
            "released": released,
            "generalised_up": _published_suppressed(len(up), k),
            "suppressed": _published_suppressed(row["suppressed"], k),
        }
        if totals == "complementary":
            out["source_total"] = row["records"]
        unit_rows.append(out)
    pd.DataFrame(unit_rows).to_csv(rel / "units.csv", index=False)

    # notes and report
    if notes is None:
        lines = ["# Release notes", "", "| unit | released | suppressed |", "| --- | --- | --- |"]
        lines += [f"| {r['unit']} | {r['released']} | {r['suppressed']} |" for r in unit_rows]
        notes = "\n".join(lines) + "\n"
    (rel / "RELEASE_NOTES.md").write_text(notes, encoding="utf-8")
    if report_html is None:
        report_html = "<!doctype html>\n<html><body><h1>Release report</h1></body></html>\n"
    (rel / "report.html").write_text(report_html, encoding="utf-8")

    # manifest
    n_sup_subj = int(np.unique(subj[sup]).size)
    n_subj = int(np.unique(subj).size)
    counts = {d: int((disp == d).sum()) for d in ("grouped", "merged", "generalised")}
    counts["suppressed"] = int(sup.sum()) if not 0 < n_sup_subj < k else LESS
    counts["synthetic"] = 0
    manifest = {
        "format": "geokanon-release/1",
        "version": "0.1.0",
        "k": k,
        "r_max_m": scene.r_max_m,
        "tau": scene.tau,
        "unit_cap": scene.unit_cap,
        "policy": {"k": k, "r_max_m": scene.r_max_m, "tau": scene.tau},
        "seed": 0,
        "crs": output_crs,
        "input_sha256": _sha(source),
        "totals": totals,
        "counts": counts,
        "suppressed_share": LESS if 0 < n_sup_subj < k else n_sup_subj / n_subj,
        "synthetic": {"total": 0, "per_unit": {}},
        "passes": group_level_passes(scene),
        "verification": {},
        "files": {},
    }
    write_manifest(rel / "manifest.json", manifest)
    refresh_manifest(root)
    return Written(root=root, source=source, scene=scene)


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """``manifest.json`` as the writer writes it (keys sorted, two-space indents, a final
    line break): the verifier requires that writing (``manifest``)."""
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def refresh_manifest(root: Path) -> None:
    """Recompute the manifest's ``files`` checksums from what is on disk."""
    rel = root / "release"
    path = rel / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["files"] = {
        p.relative_to(rel).as_posix(): _sha(p)
        for p in sorted(rel.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    write_manifest(path, manifest)


def edit_manifest(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change manifest.json in place (its ``files`` are not touched)."""
    path = root / "release" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    write_manifest(path, manifest)


def edit_audit(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change audit/audit.json in place."""
    path = root / "audit" / "audit.json"
    audit = json.loads(path.read_text(encoding="utf-8"))
    change(audit)
    path.write_text(json.dumps(audit, indent=2), encoding="utf-8")


def edit_csv(
    root: Path, name: str, change: Callable[[pd.DataFrame], pd.DataFrame], *, refresh: bool = True
) -> None:
    """Rewrite ``release/<name>`` (read as text) through ``change``."""
    path = root / "release" / name
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    changed = change(frame.copy())
    changed.to_csv(path, index=False)
    if name == "units.csv":
        _mirror_units_layer(root, changed)
    if refresh:
        refresh_manifest(root)


def _mirror_units_layer(root: Path, units: pd.DataFrame) -> None:
    """Give release.gpkg's units layer (when there is one) the edited units.csv cells, so a
    tampered figure is tampered wherever the release publishes it (same units, same columns;
    anything else is left for ``counts`` to find)."""
    import sqlite3

    gpkg = root / "release" / "release.gpkg"
    if not gpkg.is_file():
        return
    con = sqlite3.connect(gpkg)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(units)").fetchall()]
        shared = [c for c in units.columns if c in cols and c != "unit"]
        if "unit" not in cols or set(units.columns) - {"unit", *shared}:
            return
        for name in [
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        ]:
            con.execute(f'DROP TRIGGER "{name}"')  # the R-tree triggers need GDAL's SQL
        for _, row in units.iterrows():
            for c in shared:
                value: object = int(row[c]) if c == "released" and str(row[c]).isdigit() else row[c]
                con.execute(f'UPDATE units SET "{c}" = ? WHERE unit = ?', (value, row["unit"]))
        con.commit()
    finally:
        con.close()


def edit_parquet(
    root: Path, name: str, change: Callable[[pd.DataFrame], pd.DataFrame], *, refresh: bool = True
) -> None:
    """Rewrite ``release/<name>`` or ``audit/<name>`` (a Parquet file) through ``change``."""
    path = root / "release" / name
    if not path.exists():
        path = root / "audit" / name
    frame = pq.read_table(path).to_pandas()
    # in the release's encoding (geokanon.encoding): only the change differs
    write_parquet(pa.Table.from_pandas(change(copy.deepcopy(frame)), preserve_index=False), path)
    if refresh:
        refresh_manifest(root)

"""The partitioned release on a local Dask cluster: written in parts, verified in parts."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from geokanon.distributed import (  # noqa: E402
    ParquetPartitions,
    Tiling,
    release_partitions,
    run_core_distributed,
)
from geokanon.encoding import write_parquet  # noqa: E402
from geokanon.errors import InputError, VerificationFailed  # noqa: E402
from geokanon.policy import OutlierPolicy  # noqa: E402
from geokanon.release import ReleaseOptions, finish_manifest  # noqa: E402
from geokanon.verify import format_report  # noqa: E402
from geokanon.verify.partitioned import verify_partitioned  # noqa: E402

#: Documented tolerance (docs/dask.md): per final disposal, the partitioned release and
#: the driver-held Dask release core differ by at most this share of the records.
TOLERANCE = 0.005


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit="2GiB",
        dashboard_address=None,
    )  # fmt: skip
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _split(frame: pd.DataFrame, d: Path, parts: int, seed: int = 1) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    for i, idx in enumerate(np.array_split(np.arange(len(shuffled)), parts)):
        shuffled.iloc[idx].to_parquet(d / f"part-{i}.parquet", index=False)
    return d


@pytest.fixture(scope="module")
def dwellings_dir(tmp_path_factory):
    from tests.conftest import data_file

    frame = pd.read_csv(data_file("sdcspatial_dwellings", "dwellings.csv"))
    return _split(frame, tmp_path_factory.mktemp("dwellings"), 3)


def towns(n: int, tile_m: float, seed: int = 3) -> pd.DataFrame:
    """Dense towns centred on tile corners and edges, rural scatter, repeat visitors; a
    score to keep, some of it missing or minus infinity."""
    rng = np.random.default_rng(seed)
    centres = np.array(
        [[tile_m, tile_m], [2 * tile_m, tile_m], [tile_m, 2 * tile_m], [1.5 * tile_m, 2 * tile_m]]
    )
    n_rural = n // 10
    which = rng.integers(0, len(centres), n - n_rural)
    x = np.r_[centres[which, 0] + rng.normal(0, 0.15 * tile_m, which.size),
              rng.uniform(0, 3 * tile_m, n_rural)]  # fmt: skip
    y = np.r_[centres[which, 1] + rng.normal(0, 0.15 * tile_m, which.size),
              rng.uniform(0, 3 * tile_m, n_rural)]  # fmt: skip
    subject = np.char.add("person-", rng.integers(0, int(n * 0.7), n).astype(str))
    unit = (np.floor(x / (0.7 * tile_m)) * 10 + np.floor(y / (0.7 * tile_m))).astype(int)
    score = rng.normal(50, 10, n).round(1)
    # missing and minus-infinite scores: a group's rows go missing first, then -inf
    score[rng.random(n) < 0.03] = np.nan
    score[rng.random(n) < 0.03] = -np.inf
    return pd.DataFrame({"x": x.round(1), "y": y.round(1), "subject": subject,
                         "unit": unit.astype(str), "score": score})  # fmt: skip


TILE = 2000.0
TOWNS_POLICY = OutlierPolicy(k=4, r_max_m=TILE / 8, tau=0.05, unit_cap=0.5)


@pytest.fixture(scope="module")
def towns_dir(tmp_path_factory):
    return _split(towns(12_000, TILE, seed=11), tmp_path_factory.mktemp("towns"), 2)


@pytest.fixture(scope="module")
def towns_release(client, towns_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("towns-out") / "out"
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    result = release_partitions(
        src, TOWNS_POLICY, out, ReleaseOptions(keep=("score",)),
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        records_per_part=3_000,
    )  # fmt: skip
    return src, result


def _driver_counts(src: ParquetPartitions, policy: OutlierPolicy, tiling: Tiling, client) -> dict:
    """Counts per disposal of the driver-held Dask release core on the same records."""
    frame = pd.concat([src.load(i) for i in range(len(src))], ignore_index=True)
    units, codes = np.unique(frame["unit"].astype(str), return_inverse=True)
    core = run_core_distributed(
        frame["x"], frame["y"], policy,
        subjects=frame["subject"] if "subject" in frame else None,
        unit_codes=codes, unit_names=units, tiling=tiling, client=client,
    )  # fmt: skip
    return core.counts()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_towns_release_verifies_in_parts(client, towns_release):
    src, result = towns_release
    m = result.manifest
    assert m["layout"] == "partitioned"
    assert all(m["verification"].values()) and len(m["verification"]) == 12
    assert m["verification"]["deterministic"] is True
    assert "no_leak" in m["verification_scope"]
    out = result.out
    parts = sorted((out / "release" / "records").glob("part-*.parquet"))
    assert len(parts) == m["record_parts"] >= 3
    assert len(list((out / "audit" / "assignment").glob("part-*.parquet"))) == 2
    assert not (out / "release" / "records.parquet").exists()
    assert set(m["files"]) >= {p.relative_to(out / "release").as_posix() for p in parts}
    rows = pd.concat([pd.read_parquet(p) for p in parts])
    assert len(rows) == m["records_published"]
    assert list(rows.columns) == ["group_id", "class_id", "level", "unit", "x", "y", "score",
                                  "geometry", "bbox"]  # fmt: skip
    # every group whole in one part, groups numbered along the parts
    per = rows.dropna(subset=["group_id"]).groupby("group_id").size()
    groups = pd.read_parquet(out / "release" / "groups.parquet")
    assert per.reindex(groups["group_id"]).to_numpy().tolist() == groups["n_records"].tolist()
    # a second, independent run of the partitioned verifier agrees
    report = verify_partitioned(out, source=src, client=client)
    assert report.passed, [(c.name, c.detail) for c in report.checks if not c.passed]
    report_html = (out / "release" / "report.html").read_text()
    assert 'id="partitioned-note"' in report_html
    counts = _driver_counts(src, TOWNS_POLICY, Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client)
    n = sum(counts.values())
    for d, v in result.counts.items():
        assert abs(v - counts[d]) <= TOLERANCE * n, (d, v, counts[d])


def test_dwellings_release_matches_driver_path_and_is_byte_identical(
    client, dwellings_dir, tmp_path
):
    pol = OutlierPolicy(k=5, r_max_m=300.0)
    tiling = Tiling.for_policy(pol, tile_m=5000.0)
    src = ParquetPartitions.from_path(dwellings_dir, unit="gm_code")
    first = release_partitions(
        src, pol, tmp_path / "a", tiling=tiling, client=client, crs="EPSG:28992",
        records_per_part=30_000,
    )  # fmt: skip
    assert all(first.manifest["verification"].values())
    counts = _driver_counts(src, pol, tiling, client)
    n = sum(counts.values())
    assert n == 90_603
    for d, v in first.counts.items():
        assert abs(v - counts[d]) <= TOLERANCE * n, (d, v, counts[d])
    again = release_partitions(
        src, pol, tmp_path / "b", tiling=tiling, client=client, crs="EPSG:28992",
        records_per_part=30_000, check_determinism=False,
    )  # fmt: skip
    assert again.manifest["verification_not_run"]
    a = _files(tmp_path / "a" / "release")
    b = _files(tmp_path / "b" / "release")
    # identical but for the manifest, which records that the determinism check was not rerun
    assert a.keys() == b.keys()
    assert [f for f in a if a[f] != b[f]] == ["manifest.json"] or all(
        a[f] == b[f] for f in a if f not in ("manifest.json", "report.html")
    )
    assert _files(tmp_path / "a" / "audit") == _files(tmp_path / "b" / "audit")
    for f in a:
        if f.startswith("records/") or f in ("groups.parquet", "classes.parquet", "units.csv"):
            assert a[f] == b[f], f


def test_partition_order_does_not_change_the_published_records(client, towns_dir, tmp_path):
    # The same files under other names: the partitions come in the reverse order.
    files = sorted(towns_dir.glob("*.parquet"))
    d = tmp_path / "reversed"
    d.mkdir()
    for i, f in enumerate(reversed(files)):
        shutil.copyfile(f, d / f"part-{i}.parquet")
    outs = []
    for name, src_dir in (("fwd", towns_dir), ("rev", d)):
        src = ParquetPartitions.from_path(src_dir, subject="subject", unit="unit")
        release_partitions(
            src, TOWNS_POLICY, tmp_path / name, tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE),
            client=client, crs="EPSG:28992", records_per_part=3_000, check_determinism=False,
        )  # fmt: skip
        outs.append(_files(tmp_path / name / "release"))
    fwd, rev = outs
    assert fwd.keys() == rev.keys()
    for f in fwd:
        if f.startswith("records/") or f in ("groups.parquet", "classes.parquet", "units.csv"):
            assert fwd[f] == rev[f], f


def _mutable_copy(towns_release, tmp_path: Path) -> tuple[ParquetPartitions, Path]:
    src, result = towns_release
    out = tmp_path / "copy"
    shutil.copytree(result.out, out)
    return src, out


def _refresh(out: Path) -> None:
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    finish_manifest(out, manifest)


def test_small_files_written_beside_the_source_tasks_are_scanned_as_written(
    client, towns_release, tmp_path
):
    """``before_scan`` (the writer's report) runs while the source tasks check and route
    their partitions; they read and scan the small files only once it has returned: a
    coordinate it writes into the report is found, and one it removes is not."""
    src, out = _mutable_copy(towns_release, tmp_path)
    x = src.load(1)["x"]
    counts = x.value_counts()
    leaked = float(counts.index[counts == 1][0])
    page = out / "release" / "report.html"
    clean = page.read_text()
    page.write_text(clean.replace("</body>", f"<p>at {leaked!r}</p></body>"))
    _refresh(out)
    seen: list[list[str]] = []

    def write(text: str) -> None:
        # the source tasks are on the cluster while this runs (they wait for it)
        for _ in range(200):
            running = [k for keys in client.processing().values() for k in keys]
            if any("_source_task" in str(k) for k in running):
                break
            time.sleep(0.05)
        seen.append(running)
        page.write_text(text)
        _refresh(out)

    report = verify_partitioned(out, source=src, client=client, before_scan=lambda: write(clean))
    assert report.passed, format_report(report)
    assert seen and any("_source_task" in str(k) for k in seen[0])
    leaky = clean.replace("</body>", f"<p>at {leaked!r}</p></body>")
    report = verify_partitioned(out, source=src, client=client, before_scan=lambda: write(leaky))
    # (a number in the prose that is no figure of the release: holes says so too)
    assert report.failed == ("holes", "no_leak"), format_report(report)
    assert "report.html" in report["no_leak"].detail
    assert repr(leaked) not in report["no_leak"].detail
    # without a client it is called first, and the same holds
    order: list[str] = []
    report = verify_partitioned(
        out, source=src, before_scan=lambda: (order.append("written"), write(clean))
    )
    assert order == ["written"] and report.passed


def test_a_failing_before_scan_releases_the_waiting_source_tasks(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def fail() -> None:
        raise RuntimeError("the report could not be written")

    with pytest.raises(RuntimeError, match="could not be written"):
        verify_partitioned(out, source=src, client=client, scratch_dir=scratch, before_scan=fail)
    # every task has returned (none waits on the cluster) and the scratch is gone
    assert not any(client.processing().values())
    assert list(scratch.iterdir()) == []
    assert verify_partitioned(out, source=src, client=client).passed


@pytest.mark.parametrize("change", ["duplicate", "drop"])
def test_a_group_row_twice_or_missing_fails_counts(client, towns_release, tmp_path, change):
    src, out = _mutable_copy(towns_release, tmp_path)
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    at = len(groups) // 2
    if change == "duplicate":  # one id twice: as many distinct ids, one row more
        groups = pd.concat([groups.iloc[: at + 1], groups.iloc[at:]], ignore_index=True)
    else:
        groups = groups.drop(index=at).reset_index(drop=True)
    groups.to_parquet(gpath, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed, format_report(report)
    assert re.search(r"groups\.parquet: ids \d+\.\.\d+ are not each present once",
                     report["counts"].detail), report["counts"].detail  # fmt: skip


def test_moved_representative_fails_extent(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    g0 = int(groups["group_id"].iloc[0])
    groups.loc[groups["group_id"] == g0, "x"] += 3 * TOWNS_POLICY.r_max_m
    groups.to_parquet(gpath, index=False)
    # the record part publishes the moved representative too, so only the geometry is wrong
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    rows.loc[rows["group_id"] == g0, "x"] += 3 * TOWNS_POLICY.r_max_m
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "extent" in report.failed
    # the single-file extent check on the part's reader, named by the part
    assert re.search(
        r"records/part-00000\.parquet: \d+ members in 1 groups beyond r_max",
        report["extent"].detail,
    ), report["extent"].detail
    assert {"k_subjects", "tau", "unit_cap", "fixed_point", "manifest"}.isdisjoint(report.failed)


def test_records_part_geometry_moved_fails_counts(client, towns_release, tmp_path):
    # One group's points moved 400 m in its part (geometry and bbox), x, y and
    # groups.parquet left: the part's rows are read against its groups row by row.
    import shapely

    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    g0 = int(rows["group_id"].dropna().iloc[0])
    at = rows["group_id"] == g0
    x = rows.loc[at, "x"].to_numpy() + 400.0
    y = rows.loc[at, "y"].to_numpy()
    moved = list(shapely.to_wkb(shapely.points(x, y)))
    rows.loc[at, "geometry"] = pd.Series(moved, index=rows.index[at])
    if "bbox" in rows:
        boxes = [{"xmin": a, "ymin": b, "xmax": a, "ymax": b} for a, b in zip(x, y, strict=True)]
        rows.loc[at, "bbox"] = pd.Series(boxes, index=rows.index[at])
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed, format_report(report)
    detail = report["counts"].detail
    assert "records/part-00000.parquet: " in detail
    assert "rows publish a geometry other than their group's representative point" in detail


def test_a_groups_rows_reversed_in_a_part_fail_counts(client, towns_release, tmp_path):
    # One group's rows in a part listed with their kept values going down (the same
    # rows, another order): the order could tell which source record a row is.
    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00000.parquet"
    table = pq.read_table(part)
    gid = table.column("group_id").to_numpy(zero_copy_only=False)
    score = table.column("score").to_numpy(zero_copy_only=False)
    # the first group whose rows hold two scores
    g0 = next(g for g in pd.unique(gid[~np.isnan(gid)]) if np.unique(score[gid == g]).size > 1)
    at = np.flatnonzero(gid == g0)
    order = np.arange(table.num_rows)
    order[at[0] : at[-1] + 1] = at[::-1]
    write_parquet(table.take(order), part)  # in the release's encoding: only the order differs
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert tuple(report.failed) == ("counts",), format_report(report)
    detail = report["counts"].detail
    assert "records/part-00000.parquet: " in detail
    assert "rows after a row of their group or class with a larger (score)" in detail


def test_manifest_streams_groups_same_verdicts(client, towns_release, tmp_path, monkeypatch):
    """The driver's ``manifest`` reads groups.parquet a batch at a time: on tampered
    manifests (r_max_m raised, one group's radius_m lowered) its verdict and message are
    the same with 7 rows per batch as with the default."""
    from geokanon.verify import _reader

    src, out = _mutable_copy(towns_release, tmp_path)
    path = out / "release" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["r_max_m"] = 3000.0
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    groups.loc[groups.index[-1], "radius_m"] = 1.0
    groups.to_parquet(gpath, index=False)
    _refresh(out)
    details = []
    for rows in (7, 1 << 20):
        monkeypatch.setattr(_reader, "SCAN_ROWS", rows)
        report = verify_partitioned(out, source=src, client=client, checks=("manifest",))
        assert report.failed == ("manifest",), format_report(report)
        details.append(report["manifest"].detail)
    assert details[0] == details[1]
    assert f"{len(groups)} groups publish a radius_m below r_max_m" in details[0]


def test_representative_one_millimetre_off_fails_representation(client, towns_release, tmp_path):
    # the rule of docs/release-format.md, checked part by part: 1 mm off its lattice point
    src, out = _mutable_copy(towns_release, tmp_path)
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    g0 = int(groups["group_id"].iloc[0])
    groups.loc[groups["group_id"] == g0, "x"] += 0.001
    groups.to_parquet(gpath, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "representation" in report.failed
    assert "not where the rule puts them" in report["representation"].detail
    assert "extent" not in report.failed


def test_group_in_a_unit_other_than_its_majority_fails_counts(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    units = sorted(groups["unit"].astype(str).unique())
    assert len(units) > 1
    g0 = int(groups["group_id"].iloc[0])
    now = str(groups.loc[groups["group_id"] == g0, "unit"].iloc[0])
    groups.loc[groups["group_id"] == g0, "unit"] = next(u for u in units if u != now)
    groups.to_parquet(gpath, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed
    # the single-file rule and message (geokanon.verify.counts.group_units, unit_problems)
    assert "1 groups name a unit other than their members' majority" in report["counts"].detail


def test_group_below_k_in_an_audit_part_fails_k_subjects(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    paths = sorted((out / "audit" / "assignment").glob("part-*.parquet"))
    g = int(pd.read_parquet(paths[0])["group_id"].dropna().iloc[0])
    kept = False
    for apath in paths:
        # all but one member leave the group (suppressed, as the audit now says)
        a = pd.read_parquet(apath)
        members = a.index[a["group_id"] == g]
        drop = members if kept else members[1:]
        kept = kept or len(members) > 0
        a.loc[drop, "group_id"] = pd.NA
        a.loc[drop, "disposal"] = "suppressed"
        a.to_parquet(apath, index=False)
    report = verify_partitioned(out, source=src, client=client)
    assert {"k_subjects", "counts"} <= set(report.failed)


def test_changed_part_fails_manifest(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00001.parquet"
    rows = pd.read_parquet(part)
    rows.iloc[:-1].to_parquet(part, index=False)  # one record fewer, checksums not refreshed
    report = verify_partitioned(out, source=src, client=client)
    assert {"manifest", "counts"} <= set(report.failed)


@pytest.mark.parametrize("copy", ["geometry", "bbox"])
def test_groups_copies_of_their_points_moved_fail_counts(client, towns_release, tmp_path, copy):
    """groups.parquet's geometry and bbox repeat each group's x, y; moved within the file's
    extent they passed (only x, y were checked), and so did classes.parquet's boxes, which
    only the single-file counts compared with their geometries."""
    import shapely

    src, out = _mutable_copy(towns_release, tmp_path)
    path = out / "release" / "groups.parquet"
    t = pq.read_table(path)
    x, y = t.column("x").to_numpy().copy(), t.column("y").to_numpy()
    inner = np.flatnonzero((x > x.min()) & (x < x.max()) & (y > y.min()) & (y < y.max()))[:3]
    x[inner] += 0.25
    if copy == "geometry":
        value = pa.array(shapely.to_wkb(shapely.points(x, y)), pa.binary())
    else:
        value = pa.StructArray.from_arrays(
            [pa.array(x), pa.array(y), pa.array(x), pa.array(y)], ["xmin", "ymin", "xmax", "ymax"]
        )
    i = t.schema.get_field_index(copy)
    write_parquet(t.set_column(i, t.schema.field(i), value), path)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert list(report.failed) == ["counts"]
    assert f"3 groups.parquet rows have a {copy} other than" in format_report(report)


def test_bad_group_writes_nothing(client, towns_dir, tmp_path, monkeypatch):
    import geokanon.release_tiles as rt

    real = rt.run_core_distributed

    def bad_core(*args, **kwargs):
        core = real(*args, **kwargs)
        gx = core.group_x.copy()
        gx[0] += 5 * TOWNS_POLICY.r_max_m  # one group published far from its members
        return dataclasses.replace(core, group_x=gx)

    monkeypatch.setattr(rt, "run_core_distributed", bad_core)
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    out = tmp_path / "out"
    with pytest.raises(VerificationFailed, match="extent"):
        release_partitions(
            src, TOWNS_POLICY, out, tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE),
            client=client, crs="EPSG:28992", check_determinism=False,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []  # no release, no hidden build directory


@pytest.mark.parametrize("determinism", [False, True])
def test_the_first_group_pass_takes_the_classification_tasks_groupings(
    client, towns_dir, tmp_path, first_grouping_reuse, determinism
):
    """The partitioned release's tiles are grouped once, in the first classification's
    tasks: its first group pass takes those groupings (it sent every tile again when the
    core held the tiebreak through a different array object)."""
    reused = first_grouping_reuse
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    release_partitions(
        src, TOWNS_POLICY, tmp_path / "out", ReleaseOptions(keep=("score",)),
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        records_per_part=3_000, check_determinism=determinism,
    )  # fmt: skip
    assert reused and reused[0]


def test_audit_parts_are_stored_as_the_single_file_audit(towns_release):
    """Text in dictionary pages, numbers plain (they compress better so and are written
    about twice as fast), zstd: the single-file ``assignment.parquet``'s layout."""
    _, result = towns_release
    for path in sorted((result.out / "audit" / "assignment").glob("part-*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for j in range(meta.num_columns):
            col = meta.row_group(0).column(j)
            assert col.compression == "ZSTD", (path.name, col.path_in_schema)
            dictionary = any("DICTIONARY" in e for e in col.encodings)
            text = col.path_in_schema in ("label", "disposal", "unit")
            assert dictionary == text, (path.name, col.path_in_schema, col.encodings)


def test_refused_options(client, towns_dir, tmp_path):
    from geokanon.mask import MaskSpec

    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    with pytest.raises(InputError, match="masks"):
        release_partitions(
            src, TOWNS_POLICY, tmp_path / "m", ReleaseOptions(mask=MaskSpec.jitter(sd_m=10.0)),
            client=client,
        )  # fmt: skip
    timed = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit", time="score")
    with pytest.raises(InputError, match="times"):
        release_partitions(timed, TOWNS_POLICY, tmp_path / "t", client=client)
    with pytest.raises(InputError, match="synthesise"):
        release_partitions(
            src, dataclasses.replace(TOWNS_POLICY, allow_synthetic=True), tmp_path / "s",
            client=client,
        )  # fmt: skip
    with pytest.raises(InputError, match="not in"):
        release_partitions(
            src, TOWNS_POLICY, tmp_path / "k", ReleaseOptions(keep=("nope",)), client=client,
            crs="EPSG:28992",
        )  # fmt: skip
    with pytest.raises(InputError, match="publishes in the input's CRS"):
        release_partitions(
            src, TOWNS_POLICY, tmp_path / "c", ReleaseOptions(output_crs="EPSG:4326"),
            client=client, crs="EPSG:28992",
        )  # fmt: skip
    assert not any(tmp_path.iterdir())


def test_missing_unit_is_refused_naming_the_partition(client, tmp_path):
    frame = towns(3_000, TILE, seed=9)
    frame["unit"] = frame["unit"].astype(object)
    frame.loc[frame.index[:3], "unit"] = None
    src = ParquetPartitions.from_path(_split(frame, tmp_path / "in", 1), unit="unit")
    with pytest.raises(InputError, match="3 records of partition 0 have no unit"):
        release_partitions(src, TOWNS_POLICY, tmp_path / "out", client=client, crs="EPSG:28992")
    assert not (tmp_path / "out").exists()


def test_a_unit_holding_a_carriage_return_is_refused_naming_the_partition(client, tmp_path):
    """units.csv leaves a carriage return unquoted (lines end in \\n), so the file would
    not read back as the units it lists: refused before any work."""
    frame = towns(3_000, TILE, seed=9)
    frame["unit"] = frame["unit"].astype(str)
    frame.loc[frame.index[:4], "unit"] = "GM0308\r"
    src = ParquetPartitions.from_path(_split(frame, tmp_path / "in", 1), unit="unit")
    with pytest.raises(InputError, match=r"4 records of partition 0 have a unit holding a"):
        release_partitions(src, TOWNS_POLICY, tmp_path / "out", client=client, crs="EPSG:28992")
    assert not (tmp_path / "out").exists()


def test_partitions_pandas_wrote_from_slices_are_read_by_position(client, tmp_path):
    """A custodian splits a frame with ``iloc`` and writes each piece with ``to_parquet``:
    every piece after the first keeps its slice's index (300, 301, ...). The reader took
    the coordinates by index, so every such partition had "missing coordinates"."""
    from geokanon.cli import main

    frame = towns(3_000, TILE, seed=4)
    d = tmp_path / "in"
    d.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(frame)), 3)):
        frame.iloc[idx].to_parquet(d / f"part-{i}.parquet")  # the slice's index kept
    assert pq.read_metadata(d / "part-1.parquet").metadata[b"pandas"].find(b"start") >= 0
    out = tmp_path / "out"
    args = ["--quiet", "release", str(d), "--k", "4", "--r-max", "250", "--subject", "subject",
            "--unit", "unit", "--crs", "EPSG:28992", "--tau", "0.05", "--unit-cap", "0.5",
            "--keep", "score", "--out", str(out), "--backend", "dask",
            "--scheduler", client.scheduler.address, "--tile", "2000"]  # fmt: skip
    assert main(args) == 0
    verify = ["--quiet", "verify", str(out), "--source", str(d), "--backend", "dask",
              "--scheduler", client.scheduler.address]  # fmt: skip
    assert main(verify) == 0  # kept scores compared with each record's own, by the verifier


def test_keep_names_a_partition_column_whose_name_holds_a_comma(client, tmp_path, capsys):
    from geokanon.cli import main

    frame = towns(3_000, TILE, seed=6).rename(columns={"score": "dose, mg"})
    d = _split(frame, tmp_path / "in", 2)
    out = tmp_path / "out"
    args = ["--quiet", "release", str(d), "--k", "4", "--r-max", "250", "--subject", "subject",
            "--unit", "unit", "--crs", "EPSG:28992", "--tau", "0.05", "--unit-cap", "0.5",
            "--keep", "dose, mg", "--out", str(out), "--backend", "dask",
            "--scheduler", client.scheduler.address, "--tile", "2000"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert "dose, mg" in pq.read_schema(out / "release" / "records" / "part-00000.parquet").names


def test_dask_dataframe_source(client, tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    frame = towns(6_000, TILE, seed=5).rename(columns={"x": "east", "y": "north"})
    ddf = dd.from_pandas(frame, npartitions=3)
    result = release_partitions(
        ddf, TOWNS_POLICY, tmp_path / "out", roles={"x": "east", "y": "north",
        "subject": "subject", "unit": "unit"}, tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE),
        client=client, crs="EPSG:28992",
    )  # fmt: skip
    assert all(result.manifest["verification"].values())
    assert result.manifest["input_sha256"] is None  # no files to take a checksum of


def test_cli_release_and_verify_a_directory(client, towns_dir, tmp_path, capsys):
    from geokanon.cli import main

    out = tmp_path / "out"
    args = ["release", str(towns_dir), "--k", "4", "--r-max", "250", "--subject", "subject",
            "--unit", "unit", "--crs", "EPSG:28992", "--tau", "0.05", "--unit-cap", "0.5",
            "--keep", "score", "--out", str(out), "--backend", "dask",
            "--scheduler", client.scheduler.address, "--tile", "2000"]  # fmt: skip
    assert main(args) == 0
    assert "parts" in capsys.readouterr().out
    verify = ["verify", str(out), "--source", str(towns_dir), "--backend", "dask",
              "--scheduler", client.scheduler.address]  # fmt: skip
    assert main(verify) == 0
    text = capsys.readouterr().out
    assert "k_subjects" in text and "extent" in text
    # without --backend dask, a directory is refused with what to do
    assert main([a for a in args if a not in ("--backend", "dask")][:-2]) == 2


def test_report_and_bias_from_samples_above_their_limits(client, towns_dir, tmp_path, monkeypatch):
    import geokanon.release_tiles as rt

    monkeypatch.setattr(rt, "REPORT_SAMPLE_MAX", 3_000)
    monkeypatch.setattr(rt, "BIAS_SAMPLE_MAX", 3_000)
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    result = release_partitions(
        src, TOWNS_POLICY, tmp_path / "out", ReleaseOptions(keep=("score",)),
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        check_determinism=False,
    )  # fmt: skip
    assert all(result.manifest["verification"].values())
    assert "sample" in result.manifest["bias_sample"]
    page = (tmp_path / "out" / "release" / "report.html").read_text()
    assert "deterministic sample of" in page
    # the manifest records the sample, and the report states its size, exactly
    entry = result.manifest["report_sample"]
    assert entry["divisor"] == 3_000 and entry["every"] >= 2
    sizes = re.findall(r"a deterministic sample of ([\d,]+) records", page)
    assert sizes and {int(s.replace(",", "")) for s in sizes} == {entry["records"]}
    # a manifest figure off the rule (and the report agreeing with it) fails manifest
    out = tmp_path / "out"
    path = out / "release" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["report_sample"] = {**entry, "records": entry["records"] - 1}
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    report_path = out / "release" / "report.html"
    report_path.write_text(
        page.replace(f"sample of {entry['records']:,} records",
                     f"sample of {entry['records'] - 1:,} records")
    )  # fmt: skip
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert report.failed == ("manifest",), format_report(report)
    assert "report_sample's records" in report["manifest"].detail


def test_a_sampled_raster_map_and_many_parts_pass_holes(client, towns_dir, tmp_path, monkeypatch):
    """Above the sample limit the report's map shows the sampled groups, and a release of
    many parts names part files in the report: neither may put a number in the report that
    the holes system does not hold (it refused such releases at 3e6 records and more)."""
    import geokanon.release_tiles as rt
    import geokanon.report.html as html

    monkeypatch.setattr(rt, "REPORT_SAMPLE_MAX", 3_000)
    monkeypatch.setattr(html, "RASTER_MIN_GROUPS", 50)
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    result = release_partitions(
        src, TOWNS_POLICY, tmp_path / "out", ReleaseOptions(),
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        check_determinism=False, records_per_part=700,
    )  # fmt: skip
    assert all(result.manifest["verification"].values()), result.manifest["verification"]
    release = tmp_path / "out" / "release"
    assert len(list((release / "records").glob("part-*.parquet"))) > 7
    assert (
        "The map bins the published group representatives" in (release / "report.html").read_text()
    )


def test_worker_killed_mid_partitioned_release(towns_dir, tmp_path):
    """Kill a worker process while the partitioned release runs: all of it, or nothing."""
    from geokanon.distributed import DistributedError
    from tests.system.test_dask import kill_a_worker_when_busy

    out = tmp_path / "out"
    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit="2GiB",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):  # fmt: skip
        killer, killed = kill_a_worker_when_busy(c)
        try:
            release_partitions(
                src, TOWNS_POLICY, out, ReleaseOptions(),
                tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=c, crs="EPSG:28992",
                records_per_part=3_000,
            )  # fmt: skip
            completed = True
        except DistributedError:
            completed = False
        finally:
            killer.join()
        print(f"worker killed mid-run: release {'completed' if completed else 'refused cleanly'}")
        assert killed  # a worker really died while tasks were running
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
        if completed:
            report = verify_partitioned(out, source=src, client=c)
            assert report.passed, [(x.name, x.detail) for x in report.checks if not x.passed]
        else:
            assert not (out / "release").exists()


def test_report_sample_does_not_depend_on_chunks(monkeypatch):
    import geokanon.release_tiles as rt

    rng = np.random.default_rng(2)
    gid = np.where(rng.random(5_000) < 0.8, rng.integers(0, 900, 5_000), -1)
    x, y = rng.uniform(0, 1e5, 5_000), rng.uniform(0, 1e5, 5_000)
    whole = rt._report_sample(gid, x, y, 7)
    # the hash the verifier recomputes the sample's size with, in numpy
    with np.errstate(over="ignore"):
        a, b = x.view(np.uint64), y.view(np.uint64)
        h = a * np.uint64(0x9E3779B97F4A7C15) ^ (b + np.uint64(0x632BE59BD9B4E019))
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(29)
    assert np.array_equal(rt._mix(x, y), h)
    expect = np.flatnonzero(((gid >= 0) & (gid % 7 == 0)) | ((gid < 0) & (h % np.uint64(7) == 0)))
    assert np.array_equal(whole, expect) and 0 < whole.size < 5_000
    monkeypatch.setattr(rt, "CHUNK", 333)
    assert np.array_equal(rt._report_sample(gid, x, y, 7), whole)


def test_group_units_majority_matches_pair_counts(monkeypatch):
    import geokanon.release_tiles as rt

    rng = np.random.default_rng(4)
    n, ng = 20_000, 3_000
    gid = np.where(rng.random(n) < 0.9, rng.integers(0, ng, n), -1)
    # most groups in one unit, some spread over three
    units = (gid % 50) + np.where(rng.random(n) < 0.1, rng.integers(0, 3, n), 0)
    expect = np.zeros(ng, dtype=np.int64)
    for g in range(ng):
        u, c = np.unique(units[gid == g], return_counts=True)
        if u.size:
            expect[g] = u[c == c.max()].min()

    def chunks(size):
        return lambda: ((gid[a : a + size], units[a : a + size]) for a in range(0, n, size))

    assert np.array_equal(rt._group_units(chunks(n), ng), expect)
    assert np.array_equal(rt._group_units(chunks(1_234), ng), expect)


@pytest.mark.parametrize("totals", ["released", "withhold", "complementary"])
def test_unit_table_from_spilled_chunks_does_not_depend_on_chunks(monkeypatch, tmp_path, totals):
    import geokanon.release_tiles as rt
    from geokanon.policy import Disposal

    rng = np.random.default_rng(6)
    n, nu = 9_000, 40
    subjects = rng.integers(0, 3_000, n)
    units = rng.integers(0, nu, n).astype(np.int32)
    disposal = rng.choice(np.asarray(list(Disposal), dtype=np.uint8), n, p=[0.7, 0.1, 0.15, 0.05])
    state = rt._Spilled(tmp_path / "state", n)
    state.put("subjects", subjects)
    state.put("unit_codes", units)
    state.put("disposal", disposal)
    g = rt._Gathered(
        sizes=np.asarray([n]), x=np.zeros(0), y=np.zeros(0), subjects=None, unit_codes=units,
        unit_names=np.asarray([f"u{i:02d}" for i in range(nu)], dtype=object), tiebreak=None,
        fingerprint=None,
    )  # fmt: skip
    ng = 500
    group_unit = rng.integers(0, nu, ng)
    group_sizes = rng.integers(5, 9, ng)
    classes = pd.DataFrame(
        {"level": ["unit", "area"], "unit": ["u03", "area"], "n_records": [7, 9]}
    )
    pol = OutlierPolicy(k=5, r_max_m=100.0)
    whole = rt._units_frame(g, state, group_unit, group_sizes, classes, pol, totals)
    # the reference, from whole arrays
    sup = disposal == Disposal.SUPPRESSED
    assert whole[2] == np.unique(subjects[sup]).size
    assert whole[3] == np.unique(subjects).size
    monkeypatch.setattr(rt, "CHUNK", 777)
    chunked = rt._units_frame(g, state, group_unit, group_sizes, classes, pol, totals)
    pd.testing.assert_frame_equal(whole[0], chunked[0])
    assert whole[1:] == chunked[1:]
    if totals == "complementary":
        shown = whole[0].set_index("unit")["source_total"]
        for i in range(nu):
            if shown[f"u{i:02d}"] not in (rt.WITHHELD, rt.LT_K):
                assert shown[f"u{i:02d}"] == int((units == i).sum())


def test_audit_iota_and_labels_are_the_single_machine_classification(towns_release):
    from geokanon.classify import classify

    src, result = towns_release
    frame = pd.concat([src.load(i) for i in range(len(src))], ignore_index=True)
    cls = classify(frame["x"], frame["y"], TOWNS_POLICY, subjects=frame["subject"])
    audit = pd.concat(
        [pd.read_parquet(p) for p in sorted((result.out / "audit" / "assignment").glob("*"))],
        ignore_index=True,
    ).sort_values("source_row")
    assert np.array_equal(audit["iota"].to_numpy(), cls.iota)  # spilled, read back
    assert np.array_equal(np.asarray(result.core.iota), cls.iota)  # the returned map
    labels = np.asarray(["ok", "merge", "generalise", "suppress"], dtype=object)
    assert np.array_equal(audit["label"].to_numpy(dtype=object), labels[cls.labels])


def test_representative_beyond_r_max_only_on_the_ellipsoid_fails_extent(client, tmp_path):
    """RD New's scale is 0.99991 near Amersfoort: 249.99 RD metres are 250.01 m on the ground."""
    # clusters of four records at one place 2 km apart around Amersfoort (RD 155000, 463000)
    cx = 150_000.0 + 2000.0 * np.arange(6)
    frame = pd.DataFrame({"x": np.repeat(cx, 4), "y": np.full(24, 463_000.0)})
    src_dir = _split(frame, tmp_path / "src", 2)
    src = ParquetPartitions.from_path(src_dir)
    policy = OutlierPolicy(k=4, r_max_m=250.0, tau=0.05, unit_cap=0.5)
    result = release_partitions(
        src, policy, tmp_path / "out", tiling=Tiling.for_policy(policy, tile_m=TILE),
        client=client, crs="EPSG:28992", check_determinism=False,
    )  # fmt: skip
    out = result.out
    assert verify_partitioned(out, source=src, client=client).passed
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    g0 = int(groups["group_id"].iloc[0])
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    members = rows["group_id"] == g0
    assert members.sum() == 4
    # every member of g0 sits at one place: put the representative 249.99 RD metres east
    audit = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("*.parquet"))]
    )
    whole = pd.concat([src.load(i) for i in range(len(src))], ignore_index=True)
    place = whole.iloc[audit.loc[audit["group_id"] == g0, "source_row"].to_numpy()]
    assert place["x"].nunique() == 1
    new_x = float(place["x"].iloc[0]) + 249.99
    new_y = float(place["y"].iloc[0])
    groups.loc[groups["group_id"] == g0, ["x", "y"]] = [new_x, new_y]
    groups.to_parquet(gpath, index=False)
    rows.loc[members, ["x", "y"]] = [new_x, new_y]
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "extent" in report.failed
    assert "on the ellipsoid" in report["extent"].detail


def test_partitioned_complementary_totals_withhold_the_needed_secondary(client, tmp_path):
    from tests.release_fixtures import edit_csv
    from tests.unit.test_complementary import _scene

    # C: 3 dwellings counted in A's groups; its total reads '<k' and needs B's withheld
    # (as the single-machine writer chooses: one function for both)
    frame = _scene(small_unit=True, suppressed_unit=False)
    src = ParquetPartitions.from_path(_split(frame, tmp_path / "in", 2), unit="unit")
    policy = OutlierPolicy(k=5, r_max_m=200.0, tau=0.05, unit_cap=1.0)
    out = tmp_path / "out"
    result = release_partitions(
        src, policy, out, ReleaseOptions(totals="complementary"),
        tiling=Tiling.for_policy(policy, tile_m=2000.0), client=client, crs="EPSG:28992",
    )  # fmt: skip
    assert result.manifest["layout"] == "partitioned"
    units = pd.read_csv(out / "release" / "units.csv", dtype=str).set_index("unit")
    assert units["source_total"].to_dict() == {"A": "60", "B": "withheld", "C": "<k"}
    assert verify_partitioned(out, source=src, client=client).passed

    def publish_b(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "B", "source_total"] = "40"
        return f

    edit_csv(out, "units.csv", publish_b)
    report = verify_partitioned(out, source=src, client=client)
    holes = next(c for c in report.checks if c.name == "holes")
    assert not holes.passed and "unit C source_total: '<k' narrowed to [3, 3]" in holes.detail


@pytest.mark.parametrize("name", ["groups.parquet", "records/part-00001.parquet"])
def test_a_file_in_another_encoding_fails_no_leak(client, towns_release, tmp_path, name):
    """Every Parquet file is exactly the release's encoding of its values: written again by
    pyarrow's defaults (the same values and metadata), or with row groups cut to sizes of
    its own, it fails no_leak, naming the file. groups.parquet's container was not checked
    at all in this layout before (only its metadata as text)."""
    src, out = _mutable_copy(towns_release, tmp_path)
    path = out / "release" / name
    table = pq.read_table(path)
    pq.write_table(table, path)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert report.failed == ("no_leak",), format_report(report)
    assert f"{name}: bytes other than the release's encoding" in report["no_leak"].detail
    write_parquet(table, path)  # the release's encoding again: it passes
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client, checks=("no_leak",))
    assert not report.failed, format_report(report)


def test_each_part_reads_only_the_row_groups_of_its_groups(
    client, towns_release, tmp_path, monkeypatch
):
    # issue 17: the release files carry no column statistics, so a filtered read of
    # groups.parquet decoded the whole file in every part task (parts x groups)
    import geokanon.verify.partitioned as P

    src, out = _mutable_copy(towns_release, tmp_path)
    gpath = out / "release" / "groups.parquet"
    table = pq.read_table(gpath)
    per_group = max(1, table.num_rows // 12)
    pq.write_table(table, gpath, row_group_size=per_group, write_statistics=False)
    _refresh(out)
    assert pq.ParquetFile(gpath).metadata.num_row_groups >= 12
    read: list[tuple[str, int, int]] = []
    real = P._id_range

    def spy(path, id_col, first, end, row_groups):
        got = real(path, id_col, first, end, row_groups)
        if path.name == "groups.parquet":
            rows = sum(pq.ParquetFile(path).metadata.row_group(i).num_rows for i in row_groups)
            read.append((path.name, end - first, rows))
        return got

    monkeypatch.setattr(P, "_id_range", spy)
    report = verify_partitioned(out, source=src, checks=("k_subjects", "extent", "counts"))
    assert report.passed, [(c.name, c.detail) for c in report.checks if not c.passed]
    parts = [p for p in json.loads((out / "audit" / "audit.json").read_text())["partitioned"]
             ["parts"] if p["kind"] == "group"]  # fmt: skip
    assert len(read) == len(parts) >= 3
    # a part decodes the row groups its id range meets (at most one row group more on
    # either side), never the whole file
    assert all(rows <= n_ids + 2 * per_group for _, n_ids, rows in read), read
    assert sum(rows for *_, rows in read) < len(parts) * table.num_rows


def test_a_small_generalised_up_figure_fails_report_safety_in_both_layouts(
    client, towns_release, tmp_path
):
    # issue 17: the partitioned verifier's own copy of report_safety read units.csv's
    # 'suppressed' only; the shared check reads every hidden column, in both layouts
    src, out = _mutable_copy(towns_release, tmp_path)
    path = out / "release" / "units.csv"
    units = pd.read_csv(path, dtype=str, keep_default_na=False)
    units["generalised_up"] = "0"
    units.loc[0, "generalised_up"] = "2"  # 2 subjects generalised up: a figure of 1..k-1
    units.to_csv(path, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "report_safety" in report.failed
    assert "units.csv: 1 units publish 1..k-1 generalised_up subjects" in (
        report["report_safety"].detail
    )


def _two_rows_of_other_groups(rows: pd.DataFrame) -> tuple[int, int]:
    """Two row positions of different groups whose kept score differs."""
    g = rows["group_id"]
    a = int(np.flatnonzero(g.notna())[0])
    other = np.flatnonzero(g.notna() & (g != g.iloc[a]) & (rows["score"] != rows["score"].iloc[a]))
    return a, int(other[0])


def test_records_swapped_between_groups_in_a_part_fail_counts(client, towns_release, tmp_path):
    # Two records of one part trade groups (their kept values move; sizes, representatives
    # and every file's other figures stay): the group's kept values are not its members'.
    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    a, b = _two_rows_of_other_groups(rows)
    score = rows["score"].to_numpy().copy()
    score[[a, b]] = score[[b, a]]
    rows["score"] = score
    write_parquet(pa.Table.from_pandas(rows, preserve_index=False), part)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert report.failed == ("counts",), format_report(report)
    detail = report["counts"].detail
    assert "records/part-00000.parquet: 2 groups and 0 classes publish 'score' values" in detail


def test_kept_value_changed_in_a_part_fails_counts(client, towns_release, tmp_path):
    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00001.parquet"
    rows = pd.read_parquet(part)
    at = int(np.flatnonzero(rows["score"].notna())[0])
    rows.loc[at, "score"] = rows["score"].iloc[at] + 0.1
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed, format_report(report)
    assert "records/part-00001.parquet: " in report["counts"].detail
    assert "publish 'score' values other than their members'" in report["counts"].detail


def test_whole_metre_member_coordinate_in_a_kept_column_of_a_part_fails_no_leak(
    client, towns_release, tmp_path
):
    # A member's own source x, a whole number of metres, written into one record's kept
    # column: judged by the source's values whatever their form (the single-file rule).
    src, out = _mutable_copy(towns_release, tmp_path)
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    assign = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("*.parquet"))]
    )
    mine = assign[assign["group_id"].isin(rows["group_id"].dropna().unique())]
    value = float(mine.loc[mine["x_m"] == np.floor(mine["x_m"]), "x_m"].iloc[0])
    assert not (rows["score"] == value).any()
    at = int(np.flatnonzero(rows["group_id"].notna())[0])
    rows.loc[at, "score"] = value
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "no_leak" in report.failed, format_report(report)
    assert (
        "records/part-00000.parquet: column 'score': 1 coordinate values"
        in report["no_leak"].detail
    ), report["no_leak"].detail


@pytest.mark.parametrize("whose", ["not a member of the part", "a member of another group"])
def test_representative_on_a_source_point_of_its_part_fails_no_leak(
    client, towns_release, tmp_path, whose
):
    # A group's representative moved onto a source point in its part's tiles, in
    # groups.parquet and in the part: the point is found whether it reaches the part as
    # a member (of another group there) or only with the coordinates of the part's tiles.
    src, out = _mutable_copy(towns_release, tmp_path)
    info = json.loads((out / "audit" / "audit.json").read_text())["partitioned"]
    tiling = Tiling(**{k: float(v) for k, v in info["tiling"].items()})
    assign = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("*.parquet"))],
        ignore_index=True,
    )
    key = tiling.tile_keys(assign["x_m"].to_numpy(), assign["y_m"].to_numpy())
    part = next(p for p in info["parts"] if p["kind"] == "group")  # the first group part
    here = (key >= part["tile_lo"]) & (key <= part["tile_hi"])
    gid = assign["group_id"].to_numpy(dtype=np.float64, na_value=np.nan)
    g0 = int(part["first"])
    if whose == "a member of another group":
        pick = here & (gid >= part["first"]) & (gid < part["end"]) & (gid != g0)
    else:
        pick = here & ~((gid >= part["first"]) & (gid < part["end"]))
    assert pick.any()
    at = int(np.flatnonzero(pick)[0])
    px, py = float(assign["x_m"].iloc[at]), float(assign["y_m"].iloc[at])
    gpath = out / "release" / "groups.parquet"
    groups = pd.read_parquet(gpath)
    groups.loc[groups["group_id"] == g0, ["x", "y"]] = [px, py]
    groups.to_parquet(gpath, index=False)
    ppath = out / "release" / part["file"]
    rows = pd.read_parquet(ppath)
    rows.loc[rows["group_id"] == g0, ["x", "y"]] = [px, py]
    rows.to_parquet(ppath, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "no_leak" in report.failed, format_report(report)
    assert f"{part['file']}: " in report["no_leak"].detail, report["no_leak"].detail


@pytest.fixture(scope="module")
def integer_id_release(client, tmp_path_factory):
    """A valid partitioned release whose subject ids are the integers 1..M."""
    frame = towns(6_000, TILE, seed=5)
    codes = pd.factorize(frame["subject"])[0]
    frame["subject"] = (codes + 1).astype(np.int64)
    d = _split(frame, tmp_path_factory.mktemp("int-ids"), 2)
    out = tmp_path_factory.mktemp("int-ids-out") / "out"
    src = ParquetPartitions.from_path(d, subject="subject", unit="unit")
    release_partitions(
        src, TOWNS_POLICY, out, ReleaseOptions(keep=("score",)),
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        records_per_part=1_500,
    )  # fmt: skip
    return src, out


def test_integer_subject_ids_release_and_verify_in_parts(client, integer_id_release):
    # group ids, class ids and counts are whole numbers that are also subject ids: the
    # structural columns' own values are known, so they are no leak
    src, out = integer_id_release
    report = verify_partitioned(out, source=src, client=client)
    assert report.passed, format_report(report)


def test_short_subject_id_in_a_part_fails_no_leak(client, integer_id_release, tmp_path):
    # a member's id of 1 to 4 digits, written as text into a column of its part
    src, result = integer_id_release
    out = tmp_path / "copy"
    shutil.copytree(result, out)
    part = out / "release" / "records" / "part-00000.parquet"
    rows = pd.read_parquet(part)
    assign = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("*.parquet"))],
        ignore_index=True,
    )
    ids = pd.concat([src.load(i)["subject"] for i in range(len(src))], ignore_index=True)
    mine = assign.loc[assign["group_id"].isin(rows["group_id"].dropna().unique()), "source_row"]
    sid = str(ids.iloc[int(mine.iloc[0])])
    assert len(sid) <= 4
    rows["note"] = pd.Series(["none"] * len(rows), dtype=object)
    rows.loc[0, "note"] = sid
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "no_leak" in report.failed, format_report(report)
    assert "records/part-00000.parquet: column 'note': 1 subject ids" in report["no_leak"].detail, (
        report["no_leak"].detail
    )


def test_class_rows_unit_changed_in_a_part_fails_counts(client, towns_release, tmp_path):
    # the class part's rows read against classes.parquet by the single-file records pass
    src, out = _mutable_copy(towns_release, tmp_path)
    info = json.loads((out / "audit" / "audit.json").read_text())["partitioned"]
    name = next(p["file"] for p in info["parts"] if p["kind"] == "class")
    part = out / "release" / name
    rows = pd.read_parquet(part)
    rows["unit"] = rows["unit"].astype(str) + "-moved"
    rows.to_parquet(part, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed, format_report(report)
    assert f"{name}: " in report["counts"].detail
    assert "rows publish a unit other than their class's" in report["counts"].detail


def test_generalised_up_figures_of_a_part_release_are_checked_by_counts(
    client, towns_release, tmp_path
):
    # issue 17 item 4 (c): the partitioned counts is the single-file rule set
    # (geokanon.verify.counts.unit_problems); before, a generalised_up column of units.csv
    # was not compared with the audit in this layout
    src, out = _mutable_copy(towns_release, tmp_path)
    audit = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "audit" / "assignment").glob("part-*.parquet"))],
        ignore_index=True,
    )
    source = pd.concat([src.load(i) for i in range(len(src))], ignore_index=True)
    classes = pd.read_parquet(out / "release" / "classes.parquet")
    unit_level = set(classes.loc[classes["level"].astype(str) == "unit", "class_id"])
    up = audit["class_id"].notna() & ~audit["class_id"].isin(unit_level)
    rows = audit.loc[up, "source_row"].to_numpy(dtype=np.int64)
    pairs = pd.DataFrame(
        {"u": audit.loc[up, "unit"].astype(str).to_numpy(), "s": source["subject"].to_numpy()[rows]}
    )
    true = pairs.drop_duplicates().groupby("u").size()
    path = out / "release" / "units.csv"
    units = pd.read_csv(path, dtype=str, keep_default_na=False)
    units["generalised_up"] = [str(int(true.get(u, 0))) for u in units["unit"]]
    units.to_csv(path, index=False)
    _refresh(out)
    assert verify_partitioned(out, source=src, client=client, checks=("counts",)).passed
    units.loc[0, "generalised_up"] = str(int(units.loc[0, "generalised_up"]) + TOWNS_POLICY.k + 1)
    units.to_csv(path, index=False)
    _refresh(out)
    report = verify_partitioned(out, source=src, client=client, checks=("counts",))
    assert not report.passed
    assert "1 units publish a wrong generalised_up count" in report["counts"].detail


def test_a_group_id_that_is_no_id_in_an_audit_part_is_refused(client, towns_release, tmp_path):
    # before, a part read such an id as "no group" (-1), as though the record were not a
    # member; the single-file reader refuses it, and so does a part now
    src, out = _mutable_copy(towns_release, tmp_path)
    apath = sorted((out / "audit" / "assignment").glob("part-*.parquet"))[0]
    a = pd.read_parquet(apath)
    row = a.index[a["group_id"].notna()][0]
    ids = a["group_id"].astype("string")
    ids[row] = "seven"
    a["group_id"] = ids
    a.to_parquet(apath, index=False)
    report = verify_partitioned(out, source=src, client=client)
    assert not report.passed
    said = " ".join(r.detail for r in report.checks if not r.passed)
    assert "group_id is not an integer column" in said, said


def _audit_part_mutant(kind: str, a: pd.DataFrame) -> pd.DataFrame:
    if kind == "rows reordered":
        return a.iloc[::-1].reset_index(drop=True)
    if kind == "a coordinate moved":
        a.loc[a.index[0], "x_m"] = a.loc[a.index[0], "x_m"] + 1.0
        return a
    if kind == "a row dropped":
        return a.iloc[1:].reset_index(drop=True)
    if kind == "unknown disposal":
        a["disposal"] = a["disposal"].astype(str)
        a.loc[a.index[0], "disposal"] = "forgotten"
        return a
    if kind == "subject column dropped":
        return a.drop(columns=["subject"])
    if kind == "null source_row":
        rows = a["source_row"].astype("Int64")
        rows[a.index[0]] = pd.NA
        a["source_row"] = rows
        return a
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("rows reordered", "audit part 0: source_row is not the source order"),
        ("a coordinate moved", "audit part 0: x_m/y_m differ from the source coordinates"),
        ("a row dropped", "audit part 0 has"),
        ("unknown disposal", "unknown disposal"),
        ("subject column dropped", "audit part 0 lacks columns ['subject']"),
        ("null source_row", "audit part 0 source_row has nulls"),
    ],
)
def test_an_audit_part_read_as_a_single_file_audit_is_refused_when_changed(
    client, towns_release, tmp_path, kind, said
):
    # the source round reads each audit part with the single-file reader
    # (ReleaseReader.of_source_partition): each change fails counts, naming the part
    src, out = _mutable_copy(towns_release, tmp_path)
    apath = sorted((out / "audit" / "assignment").glob("part-*.parquet"))[0]
    _audit_part_mutant(kind, pd.read_parquet(apath)).to_parquet(apath, index=False)
    report = verify_partitioned(out, source=src, client=client)
    assert "counts" in report.failed, report.failed
    detail = next(r.detail for r in report.checks if r.name == "counts")
    assert said in detail, detail


def test_the_partitioned_writer_verifies_once_with_the_report_in_place(
    client, towns_dir, tmp_path, monkeypatch
):
    """The manifest and report state the results first; one verification reads them as
    published, so a page that leaks a source coordinate is refused by it (there is no
    re-check of the report: the stage is gone)."""
    import geokanon.report.html as html
    import geokanon.verify.partitioned as vp

    src = ParquetPartitions.from_path(towns_dir, subject="subject", unit="unit")
    x = src.load(0)["x"]
    counts = x.value_counts()
    leaked = float(counts.index[counts == 1][0])
    real_page = html.report_html
    real_verify = vp.verify_partitioned
    runs: list[object] = []

    def leaky(*args, **kwargs):
        return real_page(*args, **kwargs).replace("</body>", f"<p>at {leaked!r}</p></body>")

    def counted(*args, **kwargs):
        runs.append(kwargs.get("checks"))
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(vp, "verify_partitioned", counted)
    stages: list[str] = []

    def heard(stage, step=None, *, done=None, total=None):
        if step is None and stage not in stages:
            stages.append(stage)

    kwargs = dict(
        tiling=Tiling.for_policy(TOWNS_POLICY, tile_m=TILE), client=client, crs="EPSG:28992",
        check_determinism=False, progress=heard,
    )  # fmt: skip
    done = release_partitions(src, TOWNS_POLICY, tmp_path / "good", **kwargs)
    assert runs == [None]  # one run, every check
    assert "re-check the report" not in stages
    assert stages.index("report") < stages.index("verify the parts against the source partitions")
    stated = dict(done.manifest["verification"])
    assert stated == real_verify(tmp_path / "good", source=src, client=client).as_dict()
    monkeypatch.setattr(html, "report_html", leaky)
    with pytest.raises(VerificationFailed, match="no_leak") as err:
        release_partitions(src, TOWNS_POLICY, tmp_path / "bad", **kwargs)
    assert repr(leaked) not in str(err.value)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float64])
def test_spilled_slices_are_the_arrays_slices(tmp_path, dtype):
    """``_Spilled.get`` reads rows a:b from the .npy file as numpy slicing gives them:
    inside, at the ends, past the end, empty and reversed bounds, and a 2-d array."""
    import geokanon.release_tiles as rt

    rng = np.random.default_rng(3)
    n = 100_003
    values = rng.integers(-100, 100, n).astype(dtype)
    state = rt._Spilled(tmp_path / "state", n)
    state.put("v", values)
    for a, b in [(0, 1), (0, n), (17, 40_000), (n - 5, n), (n - 5, n + 10), (9, 9), (10, 3)]:
        got = state.get("v", a, b)
        assert got.dtype == values.dtype and np.array_equal(got, values[a:b])
        assert got.flags.writeable and got.flags.owndata
    table = rng.normal(size=(1_000, 3))
    state.put("t", table)
    assert np.array_equal(state.get("t", 10, 20), table[10:20])
    short = tmp_path / "state" / "v.npy"
    short.write_bytes(short.read_bytes()[:-8])  # a truncated file is an error, not short rows
    with pytest.raises(OSError, match="shorter"):
        state.get("v", 0, n)


def test_record_parts_without_kept_columns_are_the_routed_rows(client, towns_dir, tmp_path):
    """Without a kept column the record parts are made from the groups' and classes' sizes
    (no row is routed); they hold the rows the routed parts hold, in the same order: a
    constant kept column routes every row and sorts nothing, so dropping it must give the
    same tables."""
    const = tmp_path / "const"
    const.mkdir()
    for p in sorted(towns_dir.glob("*.parquet")):
        frame = pd.read_parquet(p)
        frame["same"] = 1
        frame.to_parquet(const / p.name, index=False)
    # a smaller disc than the towns policy's: classes at two levels (unit and area)
    policy = dataclasses.replace(TOWNS_POLICY, r_max_m=TILE / 20)
    tiling = Tiling.for_policy(policy, tile_m=TILE)
    made = {}
    for name, d, keep in (("generated", towns_dir, ()), ("routed", const, ("same",))):
        src = ParquetPartitions.from_path(d, subject="subject", unit="unit")
        made[name] = release_partitions(
            src, policy, tmp_path / name, ReleaseOptions(keep=keep), tiling=tiling,
            client=client, crs="EPSG:28992", records_per_part=2_000,
        )  # fmt: skip
    generated, routed = made["generated"].manifest, made["routed"].manifest
    assert generated["record_parts"] == routed["record_parts"] >= 4
    levels = pd.read_parquet(tmp_path / "generated" / "release" / "classes.parquet")["level"]
    assert levels.nunique() >= 2  # class parts sort their classes by level first
    for i in range(generated["record_parts"]):
        name = f"release/records/part-{i:05d}.parquet"
        a = pq.read_table(tmp_path / "generated" / name)
        b = pq.read_table(tmp_path / "routed" / name).drop_columns(["same"])
        assert a.num_rows > 0
        assert a.schema.remove_metadata() == b.schema.remove_metadata()
        assert a.equals(b.replace_schema_metadata(a.schema.metadata)), name
    assert generated["records_published"] == routed["records_published"]

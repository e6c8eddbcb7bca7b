"""The Dask backend on a local cluster: the same labels, valid groups, the same verdicts."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from geokanon.classify import classify  # noqa: E402
from geokanon.distributed import (  # noqa: E402
    DistributedError,
    ParquetPartitions,
    Tiling,
    classify_partitions,
    classify_points_distributed,
    classify_tiled,
    release_distributed,
    row_position,
    run_core_on_distributed,
)
from geokanon.errors import InputError  # noqa: E402
from geokanon.io import read_points, table_from_frame  # noqa: E402
from geokanon.pipeline import classify_points  # noqa: E402
from geokanon.policy import Label, OutlierPolicy  # noqa: E402
from geokanon.verify import verify_release  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        memory_limit="2GiB",
        dashboard_address=None,
    )
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def dwellings():
    from tests.conftest import data_file

    path = data_file("sdcspatial_dwellings", "dwellings.csv")
    return read_points(path, unit="gm_code", crs="EPSG:28992")


@pytest.fixture(scope="module")
def charleston():
    from tests.conftest import data_file

    path = data_file("aquadtree_charleston", "population_points.csv")
    return read_points(path, unit="tract_id")


def towns_on_tile_corners(n: int, tile_m: float, seed: int = 3) -> pd.DataFrame:
    """Dense towns centred on tile corners and edges, rural scatter, repeat visitors, times."""
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
    # About a third of the subjects have two records.
    subject = np.char.add("person-", rng.integers(0, int(n * 0.7), n).astype(str))
    t = rng.uniform(0, 86_400 * 3, n).round()
    unit = (np.floor(x / (0.7 * tile_m)) * 10 + np.floor(y / (0.7 * tile_m))).astype(int)
    return pd.DataFrame(
        {"x": x.round(1), "y": y.round(1), "subject": subject, "t": t, "unit": unit.astype(str)}
    )


# ---------------------------------------------------------------------------
# Exact first-pass labels
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("r_max", [100.0, 300.0])
def test_dwellings_labels_identical(client, dwellings, r_max):
    pol = OutlierPolicy(k=5, r_max_m=r_max)
    tiling = Tiling.for_policy(pol, tile_m=2500.0, origin=(149_000.0, 470_000.0))
    local = classify(dwellings.x, dwellings.y, pol)
    tiled = classify_tiled(dwellings.x, dwellings.y, pol, tiling=tiling, client=client)
    assert np.array_equal(local.labels, tiled.labels)
    assert np.array_equal(local.iota, tiled.iota)  # bit for bit, inf included
    assert (local.labels != Label.OK).sum() > 100  # the comparison is not vacuous


def test_dwellings_verdicts_identical(client, dwellings):
    pol = OutlierPolicy(k=5, r_max_m=100.0)
    local = classify_points(dwellings, pol)
    tiling = Tiling.for_policy(pol, tile_m=2500.0)
    dask_run = classify_points_distributed(dwellings, pol, tiling=tiling, client=client)
    assert dask_run.to_dict() == local.to_dict()
    assert not local.verdict.passes_unit_cap  # GM0203 and GM0313 breach the unit cap


def test_charleston_labels_identical(client, charleston):
    pol = OutlierPolicy(k=5, r_max_m=500.0)
    tiling = Tiling.for_policy(pol, tile_m=4 * pol.search_radius_m)
    local = classify_points(charleston, pol)
    dask_run = classify_points_distributed(charleston, pol, tiling=tiling, client=client)
    assert np.array_equal(local.classification.labels, dask_run.classification.labels)
    assert np.array_equal(local.classification.iota, dask_run.classification.iota)
    assert dask_run.to_dict() == local.to_dict()


def test_towns_cut_by_tiles_with_subjects_and_time(client):
    tile = 2000.0
    frame = towns_on_tile_corners(8_000, tile)
    pol = OutlierPolicy(k=4, r_max_m=tile / 8, t_max_s=3600.0)
    tiling = Tiling.for_policy(pol, tile_m=tile)  # halo = 4 r_max = tile / 2
    ix, _ = tiling.tile_index(frame["x"], frame["y"])
    assert np.unique(ix).size >= 3  # the towns straddle tile edges
    local = classify(frame["x"], frame["y"], pol, subjects=frame["subject"], times=frame["t"])
    tiled = classify_tiled(
        frame["x"], frame["y"], pol, subjects=frame["subject"], times=frame["t"],
        tiling=tiling, client=client,
    )  # fmt: skip
    assert np.array_equal(local.labels, tiled.labels)
    assert np.array_equal(local.iota, tiled.iota)
    assert np.array_equal(local.iota_space, tiled.iota_space)
    assert local.space_labels is not None and tiled.space_labels is not None
    assert np.array_equal(local.space_labels, tiled.space_labels)
    assert local.because_of_time().any()
    assert len(set(local.labels.tolist())) == 4  # every label occurs


def test_halo_narrower_than_search_radius_is_refused():
    pol = OutlierPolicy(k=5, r_max_m=100.0)
    with pytest.raises(InputError, match="halo"):
        classify_tiled([0.0] * 6, [0.0] * 6, pol, tiling=Tiling(tile_m=1000.0, halo_m=399.0))
    with pytest.raises(InputError, match="tile_m"):
        Tiling(tile_m=100.0, halo_m=400.0)


# ---------------------------------------------------------------------------
# Partitioned sources (a directory of Parquet files; a Dask DataFrame)
# ---------------------------------------------------------------------------


def test_parquet_directory_partitioned(client, tmp_path):
    tile = 2000.0
    frame = towns_on_tile_corners(30_000, tile, seed=5)
    src = tmp_path / "points"
    src.mkdir()
    sizes = [7_000, 11_000, 12_000]
    start = 0
    for i, size in enumerate(sizes):
        frame.iloc[start : start + size].to_parquet(src / f"part-{i}.parquet", index=False)
        start += size
    pol = OutlierPolicy(k=4, r_max_m=tile / 8)
    source = ParquetPartitions.from_path(src, subject="subject", unit="unit")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    res = classify_partitions(
        source, pol, tiling=Tiling.for_policy(pol, tile_m=tile), client=client,
        scratch_dir=scratch, labels_out=tmp_path / "labels", return_labels=True,
    )  # fmt: skip
    assert list(scratch.iterdir()) == []  # scratch pieces removed
    table = table_from_frame(frame, subject="subject", unit="unit", crs="EPSG:28992")
    local = classify_points(table, pol)
    assert res.rows is not None and res.labels is not None
    pos = row_position(res.rows, sizes)
    assert np.array_equal(pos, np.arange(len(frame)))
    assert np.array_equal(res.labels, local.classification.labels)
    assert np.array_equal(res.iota, local.classification.iota)
    d, want = res.to_dict(), local.to_dict()
    for key in ("counts", "per_unit", "suppressed_share", "worst_unit", "units_over_cap",
                "passes_global_cap", "passes_unit_cap", "subjects", "records"):  # fmt: skip
        assert d[key] == want[key], key
    written = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "labels").iterdir()))
    assert len(written) == len(frame)


def test_dask_dataframe_source(client):
    dd = pytest.importorskip("dask.dataframe")
    tile = 2000.0
    frame = towns_on_tile_corners(20_000, tile, seed=9)
    pol = OutlierPolicy(k=4, r_max_m=tile / 8)
    ddf = dd.from_pandas(frame.rename(columns={"x": "east", "y": "north"}), npartitions=4)
    res = classify_partitions(
        ddf, pol, tiling=Tiling.for_policy(pol, tile_m=tile), client=client,
        roles={"x": "east", "y": "north", "unit": "unit"}, return_labels=True,
    )  # fmt: skip
    local = classify(frame["x"], frame["y"], pol)
    sizes = [len(p) for p in ddf.partitions]  # from_pandas keeps the row order
    assert np.array_equal(row_position(res.rows, sizes), np.arange(len(frame)))
    assert np.array_equal(res.labels, local.labels)


# ---------------------------------------------------------------------------
# The release core and the written release
# ---------------------------------------------------------------------------


def _assert_groups_valid(core, x, y, subjects, policy):
    g = core.group_id
    m = g >= 0
    dist = np.hypot(x[m] - core.group_x[g[m]], y[m] - core.group_y[g[m]])
    assert (dist <= policy.r_max_m).all()
    pairs = np.unique(np.c_[g[m], subjects[m]], axis=0)
    per_group = np.bincount(pairs[:, 0], minlength=core.group_x.size)
    assert (per_group >= policy.k).all()
    # No representative is a member's coordinate.
    assert not ((x[m] == core.group_x[g[m]]) & (y[m] == core.group_y[g[m]])).any()


@pytest.mark.slow
def test_dwellings_release_core(client, dwellings):
    from geokanon.pipeline import run_core_on

    pol = OutlierPolicy(k=5, r_max_m=300.0)
    tiling = Tiling.for_policy(pol, tile_m=3000.0, origin=(149_000.0, 470_000.0))
    local = run_core_on(dwellings, pol)
    core = run_core_on_distributed(dwellings, pol, tiling=tiling, client=client)
    assert np.array_equal(core.first_labels, local.first_labels)
    assert np.array_equal(core.iota, local.iota)
    _assert_groups_valid(core, dwellings.x, dwellings.y, core.subjects, pol)
    assert core.verdict.passes_global_cap == local.verdict.passes_global_cap
    assert core.verdict.passes_unit_cap == local.verdict.passes_unit_cap
    # Tiles move group boundaries near their edges, not the outcome at large.
    grouped = np.isin(core.disposal, [0, 1]).mean()
    assert abs(grouped - np.isin(local.disposal, [0, 1]).mean()) < 0.005


@pytest.mark.slow
def test_charleston_release_core(client, charleston):
    from geokanon.pipeline import run_core_on

    pol = OutlierPolicy(k=5, r_max_m=500.0)
    tiling = Tiling.for_policy(pol, tile_m=2 * pol.search_radius_m)  # tiles cut tracts
    local = run_core_on(charleston, pol, enforce_caps=False)
    core = run_core_on_distributed(
        charleston, pol, tiling=tiling, client=client, enforce_caps=False
    )
    assert np.array_equal(core.first_labels, local.first_labels)
    _assert_groups_valid(core, charleston.x, charleston.y, core.subjects, pol)
    assert core.verdict.passes_global_cap == local.verdict.passes_global_cap
    assert core.verdict.passes_unit_cap == local.verdict.passes_unit_cap
    assert core.passes[-1].changed == 0


@pytest.mark.slow
def test_cli_release_backend_dask(client, tmp_path, capsys):
    from geokanon.cli import main

    frame = towns_on_tile_corners(10_000, 2000.0, seed=21)
    src = tmp_path / "points.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / "out"
    args = ["release", str(src), "--k", "4", "--r-max", "250", "--subject", "subject",
            "--unit", "unit", "--crs", "EPSG:28992", "--tau", "0.05", "--unit-cap", "0.5",
            "--out", str(out), "--backend", "dask", "--scheduler", client.scheduler.address,
            "--tile", "2000"]  # fmt: skip
    assert main(args) == 0
    assert "release written" in capsys.readouterr().out
    assert main(["verify", str(out), "--source", str(src)]) == 0
    # A directory without files to read is refused, with a message that says what to do.
    assert main([*args[:1], str(tmp_path), *args[2:]]) == 2


@pytest.mark.slow
def test_release_written_and_verified(client, tmp_path):
    from geokanon.release import ReleaseOptions

    tile = 2000.0
    frame = towns_on_tile_corners(20_000, tile, seed=11)
    frame["score"] = np.random.default_rng(1).normal(50, 10, len(frame)).round(1)
    table = table_from_frame(frame, subject="subject", unit="unit", crs="EPSG:28992")
    pol = OutlierPolicy(k=4, r_max_m=tile / 8, tau=0.05, unit_cap=0.5)
    out = tmp_path / "out"
    result = release_distributed(
        table, pol, out, ReleaseOptions(keep=("score",)),
        tiling=Tiling.for_policy(pol, tile_m=tile), client=client, check_determinism=True,
    )  # fmt: skip
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert all(manifest["verification"].values())
    assert manifest["verification"]["deterministic"] is True
    report = verify_release(out, source=table)
    assert report.passed, report.failed
    _assert_groups_valid(result.core, table.x, table.y, result.core.subjects, pol)
    local = classify(table.x, table.y, pol, subjects=table.subjects)
    assert np.array_equal(result.core.first_labels, local.labels)


@pytest.mark.slow
def kill_a_worker_when_busy(client) -> tuple[threading.Thread, list[bool]]:
    """Start a thread that SIGKILLs one worker process as soon as tasks are running.

    Returns the thread (join it) and a list that holds ``True`` once a worker died.
    """
    import signal

    pids = list(client.run(os.getpid).values())
    killed: list[bool] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until tasks are running, then kill
            if any(client.processing().values()):
                os.kill(pids[0], signal.SIGKILL)
                killed.append(True)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one)
    killer.start()
    return killer, killed


def test_worker_killed_mid_run_completes_or_fails_cleanly(tmp_path):
    """Kill a worker process while the core runs: a complete verified release, or none."""
    from geokanon.release import ReleaseOptions

    tile = 2000.0
    frame = towns_on_tile_corners(15_000, tile, seed=13)
    table = table_from_frame(frame, subject="subject", unit="unit", crs="EPSG:28992")
    pol = OutlierPolicy(k=4, r_max_m=tile / 8, tau=0.05, unit_cap=0.5)
    out = tmp_path / "out"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit="2GiB",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):  # fmt: skip
        killer, killed = kill_a_worker_when_busy(c)
        try:
            release_distributed(
                table, pol, out, ReleaseOptions(),
                tiling=Tiling.for_policy(pol, tile_m=tile / 2), client=c, check_determinism=False,
            )  # fmt: skip
            completed = True
        except DistributedError:
            completed = False
        finally:
            killer.join()
    print(f"worker killed mid-run: release {'completed' if completed else 'refused cleanly'}")
    assert killed  # a worker really died while tasks were running
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary build left behind
    if completed:
        assert verify_release(out, source=table).passed
    else:
        assert not (out / "release").exists()


def test_cli_classify_backend_dask_matches_local(client, capsys, dwellings_csv):
    from geokanon.cli import main

    args = ["classify", str(dwellings_csv), "--k", "5", "--r-max", "100", "--unit", "gm_code",
            "--crs", "EPSG:28992", "--json"]  # fmt: skip
    assert main(args) == 0
    local = json.loads(capsys.readouterr().out)
    scheduler = client.scheduler.address  # an existing cluster, named by its address
    assert main([*args, "--backend", "dask", "--scheduler", scheduler, "--tile", "2000"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert remote == local


def test_cli_classify_parquet_directory(client, tmp_path, capsys):
    from geokanon.cli import main

    frame = towns_on_tile_corners(8_000, 2000.0, seed=17)
    src = tmp_path / "dir"
    src.mkdir()
    frame.iloc[:5000].to_parquet(src / "a.parquet", index=False)
    frame.iloc[5000:].to_parquet(src / "b.parquet", index=False)
    args = ["--k", "4", "--r-max", "250", "--unit", "unit", "--crs", "EPSG:28992", "--json"]
    dask_args = ["--backend", "dask", "--scheduler", client.scheduler.address]
    assert main(["classify", str(src), *args, *dask_args]) == 0
    remote = json.loads(capsys.readouterr().out)
    frame.to_parquet(tmp_path / "all.parquet", index=False)
    assert main(["classify", str(tmp_path / "all.parquet"), *args]) == 0
    local = json.loads(capsys.readouterr().out)
    for key in ("counts", "per_unit", "suppressed_share", "passes_unit_cap", "records"):
        assert remote[key] == local[key], key
    assert remote["backend"] == "dask"


def test_docstring_examples():
    import doctest

    import geokanon.distributed

    result = doctest.testmod(
        geokanon.distributed, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 5
    assert result.failed == 0


def test_core_never_imports_dask():
    import subprocess
    import sys

    code = (
        "import sys, geokanon, geokanon.pipeline, geokanon.cli, geokanon.distributed; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'dask', 'distributed'}); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _square(v: int) -> int:
    if v == 7:
        raise InputError("seven is refused")
    return v * v


def test_windowed_runner_keeps_order_and_builds_payloads_lazily(client):
    from geokanon.distributed import _run

    built: list[int] = []

    def payloads():
        for v in range(40):
            built.append(v)
            yield (v if v != 7 else 8,)

    assert _run(client, _square, payloads(), window=3) == [
        (v if v != 7 else 8) ** 2 for v in range(40)
    ]
    assert built == list(range(40))
    # lazily: when the first result arrives, only the first window of payloads exists
    built.clear()
    seen: list[int] = []
    _run(client, _square, payloads(), window=3, consume=lambda i, r: seen.append(len(built)))
    assert seen[0] <= 3 and seen[-1] == 40
    got: dict[int, int] = {}
    assert _run(client, _square, ((v,) for v in range(10) if v != 7), consume=got.__setitem__) == []
    assert got == {i: v * v for i, v in enumerate(v for v in range(10) if v != 7)}
    # a task's own error reaches the caller unchanged
    with pytest.raises(InputError, match="seven"):
        _run(client, _square, ((v,) for v in range(20)), window=2)


def test_each_worker_warms_up_once_and_a_failing_warm_up_is_dropped(client):
    import geokanon.distributed as D

    like = (np.zeros(3, np.int64), None, None, np.zeros(3, np.uint64))
    futures = D._warm_workers(client, OutlierPolicy(k=3, r_max_m=40.0), like)
    workers = set(client.scheduler_info()["workers"])
    assert len(futures) == len(workers) == 2
    assert client.gather(futures) == [None, None]
    held = client.who_has(futures)
    assert {w for f in futures for w in held[f.key]} == workers
    # a payload the task cannot take: the warm-up says nothing and fails nothing
    assert D._warm_task(D._classify_group_task, (np.zeros(2),)) is None
    for f in futures:
        f.release()


def test_chunked_tiling_matches_whole_arrays(monkeypatch):
    import geokanon.distributed as D

    rng = np.random.default_rng(3)
    x = rng.uniform(-5_000, 25_000, 5_000)
    y = rng.uniform(-5_000, 25_000, 5_000)
    tiles = Tiling(tile_m=4_000.0, halo_m=600.0)
    whole = tiles.contexts(x, y)
    keys = tiles.tile_keys(x, y)
    monkeypatch.setattr(D, "_CHUNK", 333)
    assert np.array_equal(tiles.tile_keys(x, y), keys)
    chunked = tiles.contexts(x, y)
    assert [k for k, _, _ in chunked] == [k for k, _, _ in whole]
    for (_, o1, h1), (_, o2, h2) in zip(whole, chunked, strict=True):
        assert np.array_equal(o1, o2) and np.array_equal(h1, h2)


def test_own_clusters_switch_off_the_message_log():
    import dask

    from geokanon.distributed import dask_client

    before = dask.config.get("distributed.admin.low-level-log-length")
    with dask_client(None, n_workers=1) as c:
        assert dask.config.get("distributed.admin.low-level-log-length") == 0
        assert c.submit(_square, 3).result() == 9
    assert dask.config.get("distributed.admin.low-level-log-length") == before


def _malloc_environ() -> dict[str, str | None]:
    import os

    return {k: os.environ.get(k) for k in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")}


def test_own_clusters_start_workers_that_keep_freed_memory(monkeypatch):
    """The local cluster's workers start with geokanon._heap's malloc settings (Dask's own
    default trims their heaps at 64 KiB); keep_freed_memory=False leaves Dask's."""
    import dask

    from geokanon._heap import WORKER_ENVIRON
    from geokanon.distributed import dask_client

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # as an earlier cluster leaves it
    here = _malloc_environ()
    with dask_client(None, n_workers=1) as c:
        kept = c.submit(_malloc_environ, pure=False).result()
        assert _malloc_environ() == here  # this process's environment is left as it was
    assert kept == WORKER_ENVIRON
    dasks = dask.config.get("distributed.nanny.pre-spawn-environ")
    with dask_client(None, n_workers=1, keep_freed_memory=False) as c:
        left = c.submit(_malloc_environ, pure=False).result()
    assert left["MALLOC_MMAP_MAX_"] is None
    assert left["MALLOC_TRIM_THRESHOLD_"] == "65536"
    assert dask.config.get("distributed.nanny.pre-spawn-environ") == dasks


def test_grouping_a_subset_reads_through_and_matches_copies(monkeypatch):
    import geokanon.distributed as D
    from geokanon.distributed import group_tiled
    from geokanon.grouping import group_records

    rng = np.random.default_rng(8)
    n = 6_000
    centres = rng.uniform(0, 9_000, (30, 2))
    which = rng.integers(0, 30, n)
    x = centres[which, 0] + rng.normal(0, 120, n)
    y = centres[which, 1] + rng.normal(0, 120, n)
    subjects = rng.integers(0, 2_500, n)
    tb = rng.integers(0, 2**63, n).astype(np.uint64)
    sub = np.sort(rng.choice(n, 4_500, replace=False))
    pol = OutlierPolicy(k=4, r_max_m=150.0)
    tiles = Tiling.for_policy(pol, tile_m=2_400.0)
    monkeypatch.setattr(D, "_CHUNK", 1_000)
    a = group_tiled(x[sub], y[sub], subjects[sub], pol, tb[sub], tiling=tiles)
    b = group_tiled(x, y, subjects, pol, tb, tiling=tiles, subset=sub)
    assert a.n_groups > 100 and (a.group_id < 0).any()
    assert np.array_equal(a.group_id, b.group_id)
    assert np.array_equal(a.rep_x, b.rep_x) and np.array_equal(a.rep_y, b.rep_y)
    c = group_records(x[sub], y[sub], subjects[sub], pol, tb[sub])
    d = group_records(x, y, subjects, pol, tb, subset=sub)
    assert np.array_equal(c.group_id, d.group_id) and np.array_equal(c.rep_x, d.rep_x)

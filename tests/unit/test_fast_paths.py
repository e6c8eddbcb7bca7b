"""The fast paths of issue 18 compute what the slow ones did, without the slow steps.

Subject ids: integer ids are factorised by a table and hashed from their decimal text
in a compiled kernel (the keys are pandas' ``hash_array`` of the ids' text, bit for
bit); distinct subjects are counted by a table, not by ``np.unique``; the grouping's
member lists are built by a counting sort; the report's group diameters and
displacements are compiled. Each test blocks the slow step it replaces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from geokanon.classify import cap_verdict, unit_table
from geokanon.io import table_from_frame
from geokanon.policy import OutlierPolicy


def _pandas_text_hashes(values: np.ndarray) -> np.ndarray:
    return pd.util.hash_array(np.asarray([str(v) for v in values.tolist()], dtype=object))


def test_text_hashes_are_pandas_hash_array_of_the_text():
    from geokanon.mask import text_hashes

    rng = np.random.default_rng(0)
    ints = np.r_[
        rng.integers(-(2**63), 2**63 - 1, 2000, dtype=np.int64),
        [0, -1, 9, 10, -10, 2**63 - 1, -(2**63), 12345678, 123456789012345678],
    ]
    assert np.array_equal(text_hashes(ints), _pandas_text_hashes(ints))
    small = np.arange(-300, 300, dtype=np.int16)
    assert np.array_equal(text_hashes(small), _pandas_text_hashes(small))
    big = rng.integers(2**63, 2**64 - 1, 500, dtype=np.uint64)
    assert np.array_equal(text_hashes(big), _pandas_text_hashes(big))
    texts = np.array(
        ["", "a", "abcdefg", "abcdefgh", "abcdefghi", "p001", "ümlaut", "日本語", "x" * 70, "😀"],
        dtype=object,
    )
    assert np.array_equal(text_hashes(texts), pd.util.hash_array(texts))
    floats = np.array([1.0, 2.5, -0.0])
    assert np.array_equal(text_hashes(floats), _pandas_text_hashes(floats))


def _frame(subjects: np.ndarray) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = subjects.size
    return pd.DataFrame(
        {"x": 155_000 + rng.uniform(0, 3000, n), "y": 463_000 + rng.uniform(0, 3000, n),
         "s": subjects}
    )  # fmt: skip


def test_integer_subject_ids_are_keyed_without_pandas_hashing(monkeypatch):
    ids = np.random.default_rng(2).integers(-(10**12), 10**12, 3000)
    ids[::3] = ids[1::3][: ids[::3].size]  # repeated ids
    want_codes = np.unique(ids, return_inverse=True)[1]
    want_keys = _pandas_text_hashes(ids)

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("hashed one Python string per id")

    monkeypatch.setattr(pd.util, "hash_array", refuse)
    monkeypatch.setattr(pd, "factorize", refuse)
    t = table_from_frame(_frame(ids), subject="s", crs="EPSG:28992")
    assert np.array_equal(t.subjects, want_codes)
    assert t.subject_keys is not None and np.array_equal(t.subject_keys, want_keys)
    assert t.n_subjects == np.unique(ids).size


@pytest.mark.filterwarnings("ignore:.*differ from another only by case")
def test_text_subject_ids_keep_their_keys():
    ids = np.array([" P001", "p001", "B", "b ", "c"] * 20, dtype=object)
    t = table_from_frame(_frame(ids), subject="s", crs="EPSG:28992")
    texts = np.array(["b", "c", "p001"], dtype=object)  # normalised, sorted
    assert t.subject_keys is not None
    assert np.array_equal(t.subject_keys, pd.util.hash_array(texts)[t.subjects])
    assert t.n_subjects == 3


def test_subject_keys_are_made_on_first_use_only(monkeypatch):
    """A classification does not hash the ids; a release's first use does, once."""
    import geokanon.mask
    from geokanon.pipeline import classify_points

    calls: list[int] = []
    real = geokanon.mask.text_hashes

    def counted(values: np.ndarray) -> np.ndarray:
        calls.append(len(values))
        return real(values)

    monkeypatch.setattr(geokanon.mask, "text_hashes", counted)
    ids = np.random.default_rng(4).integers(0, 300, 2000)
    t = table_from_frame(_frame(ids), subject="s", crs="EPSG:28992")
    classify_points(t, OutlierPolicy(k=3, r_max_m=500.0))
    assert calls == []
    keys = t.subject_keys
    assert calls == [np.unique(ids).size]  # the distinct ids, not one per record
    assert keys is t.subject_keys and calls == [np.unique(ids).size]  # kept
    assert keys is not None and np.array_equal(keys, _pandas_text_hashes(ids))


@pytest.mark.filterwarnings("ignore:.*differ from another only by case")
def test_subject_keys_follow_records_dropped_and_shuffled():
    """Dropping rows (a subject leaving entirely) and shuffling rows keep each record's key:
    the hash of its own normalised id."""
    import dataclasses

    ids = np.array(["Anna", " anna", "Bo", "Cy", "cy ", "Di"] * 30, dtype=object)
    frame = _frame(ids)
    frame["u"] = np.where(ids == "Bo", "B", "A")  # Bo's unit is excluded below
    t = table_from_frame(frame, subject="s", unit="u", crs="EPSG:28992", exclude_units=["B"])
    kept = ids[ids != "Bo"]
    norm = np.array([v.strip().casefold() for v in kept], dtype=object)
    want = pd.util.hash_array(norm)
    assert t.subject_keys is not None and np.array_equal(t.subject_keys, want)
    perm = np.random.default_rng(5).permutation(len(t))
    shuffled = dataclasses.replace(t, subjects=t.subjects[perm])
    assert np.array_equal(shuffled.subject_keys, want[perm])
    with pytest.raises(ValueError, match="replace subjects and subject_ids together"):
        _ = dataclasses.replace(t, subjects=t.subjects + 10).subject_keys


def test_distinct_subjects_are_counted_without_unique(monkeypatch):
    rng = np.random.default_rng(3)
    n = 5000
    subjects = rng.integers(0, 1500, n)
    sup = rng.random(n) < 0.1
    want = (np.unique(subjects).size, np.unique(subjects[sup]).size)
    units = unit_table(sup, np.zeros(n, dtype=np.int64), np.array(["u"], dtype=object), subjects)

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("np.unique over every record")

    monkeypatch.setattr(np, "unique", refuse)
    v = cap_verdict(sup, sup, units, OutlierPolicy(k=5, r_max_m=100.0), subjects, warn=False)
    assert (v.subjects, v.suppressed_subjects) == want
    from geokanon.neighbours import count_distinct

    sparse = rng.integers(-(2**62), 2**62, 1000)
    monkeypatch.undo()
    assert count_distinct(sparse) == np.unique(sparse).size
    assert count_distinct(np.zeros(0, dtype=np.int64)) == 0


def test_integer_codes_are_unique_inverse():
    from geokanon.neighbours import integer_codes

    rng = np.random.default_rng(4)
    for arr in (
        rng.integers(0, 50, 400),
        rng.integers(-(2**62), 2**62, 400),
        rng.integers(0, 2**64 - 1, 400, dtype=np.uint64),
        np.array([2**64 - 1, 2**64 - 3, 2**64 - 1], dtype=np.uint64),
        np.array([-128, 127, 0, 127], dtype=np.int8),
        rng.integers(-(10**5), 10**5, 300_000),  # int64 in a dense range: compiled
        # every value of the range present (codes already dense): the offsets
        np.concatenate([rng.permutation(5000), rng.integers(0, 5000, 7000)]),
        np.concatenate([rng.permutation(5000), rng.integers(0, 5000, 7000)]) - 9,
        np.array([7], dtype=np.int64),
    ):
        codes, values = integer_codes(arr)
        u, inv = np.unique(arr, return_inverse=True)
        assert np.array_equal(codes, inv) and np.array_equal(values, u)
        assert values.dtype == arr.dtype
        assert not np.shares_memory(codes, arr)  # the caller's ids are never the codes


def test_members_are_listed_by_a_counting_sort(monkeypatch):
    from geokanon import grouping

    rng = np.random.default_rng(5)
    atom_group = rng.integers(-1, 40, 3000).astype(np.int64)

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("sorted the atoms by group")

    monkeypatch.setattr(grouping, "stable_argsort", refuse)
    members = grouping._Members(atom_group, 40)
    for g in range(40):
        assert members.get(g) == np.flatnonzero(atom_group == g).tolist()
    assert members.get(40) == []


@pytest.mark.parametrize("big", [False, True])
def test_report_diameters_and_displacements_are_exact(big):
    from geokanon.report.html import _displacements, _group_diameters

    rng = np.random.default_rng(6)
    n, ng = 600, 90
    gid = rng.integers(-1, ng, n).astype(np.int64)
    if big:
        gid[:200] = 0  # one group past the all-pairs size: its convex hull
    x = rng.normal(0, 500, n)
    y = rng.normal(0, 500, n)
    got = _group_diameters(gid, x, y, ng)
    for g in range(ng):
        m = np.flatnonzero(gid == g)
        d = np.hypot(x[m, None] - x[m], y[m, None] - y[m]).max() if m.size > 1 else 0.0
        assert got[g] == pytest.approx(d, rel=1e-12, abs=0)
    pub = np.arange(0, ng, 2, dtype=np.int64)
    gx, gy = rng.normal(0, 500, pub.size), rng.normal(0, 500, pub.size)
    disp = _displacements(gid, x, y, gx, gy, pub, ng)
    pos = {int(g): i for i, g in enumerate(pub)}
    for r in range(n):
        i = pos.get(int(gid[r]))
        if i is None:
            assert np.isnan(disp[r])
        else:
            dx, dy = x[r] - gx[i], y[r] - gy[i]
            assert disp[r] == np.sqrt(dx * dx + dy * dy)


def test_majority_units_without_a_sort_of_every_record(monkeypatch):
    from geokanon.disposal import group_units

    rng = np.random.default_rng(7)
    n, ng, nu = 4000, 300, 6
    g = rng.integers(-1, ng, n)
    u = rng.integers(0, nu, n)
    names = np.array(["f", "b", "e", "a", "d", "c"], dtype=object)
    want = np.zeros(ng, dtype=np.int64)
    rank = np.argsort(np.argsort(names.astype(str)))
    for grp in range(ng):
        m = u[g == grp]
        if m.size:
            counts = np.bincount(m, minlength=nu)
            top = np.flatnonzero(counts == counts.max())
            want[grp] = top[np.argmin(rank[top])]  # a tie: the first unit id in sort order

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("np.unique over every record")

    monkeypatch.setattr(np, "unique", refuse)
    assert np.array_equal(group_units(g, u, ng, names), want)


def test_decimal_hashes_of_many_chunks_are_pandas_hash_array():
    """Integer ids over several of the compiled hash's chunks (each on its own thread)."""
    from geokanon.mask import _DECIMAL_CHUNK, text_hashes

    ids = np.random.default_rng(7).integers(-(10**15), 10**15, 3 * _DECIMAL_CHUNK + 11)
    assert np.array_equal(text_hashes(ids), _pandas_text_hashes(ids))


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_distinct_subjects_per_unit_by_subject_ranges(parts):
    """Each range of subjects counted on its own sums to the distinct (unit, subject)
    pairs per unit, of all records and of the suppressed ones (np.unique oracle)."""
    from geokanon.classify import _subjects_per_unit_ranges

    rng = np.random.default_rng(parts)
    for _ in range(20):
        n, nu = int(rng.integers(1, 2000)), int(rng.integers(1, 9))
        codes = rng.integers(0, nu, n)
        subj = np.unique(rng.integers(0, int(rng.integers(1, 1500)), n), return_inverse=True)[1]
        subj = subj.astype(np.int64)
        sup = rng.random(n) < rng.random()
        m = int(subj.max()) + 1
        got, got_sup = _subjects_per_unit_ranges(codes, subj, sup, nu, m, min(parts, m))
        pairs = np.unique(codes * m + subj)
        sup_pairs = np.unique(codes[sup] * m + subj[sup])
        assert np.array_equal(got.sum(axis=0), np.bincount(pairs // m, minlength=nu))
        assert np.array_equal(got_sup.sum(axis=0), np.bincount(sup_pairs // m, minlength=nu))


def test_pair_keys_are_the_bit_mix_of_the_coordinates():
    """The exact-copy check's compiled keys: the numpy formula, -0.0 keyed as 0.0."""
    from geokanon.neighbours import pair_keys

    rng = np.random.default_rng(8)
    a, b = rng.normal(0, 1e6, 5000), rng.normal(0, 1e6, 5000)
    a[::7], b[::5], a[3], b[3] = -0.0, -0.0, 0.0, 0.0
    with np.errstate(over="ignore"):
        want = (a + 0.0).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ (b + 0.0).view(np.uint64)
    assert np.array_equal(pair_keys(a, b), want)
    assert (
        pair_keys(np.array([-0.0]), np.array([-0.0]))[0]
        == pair_keys(np.array([0.0]), np.array([0.0]))[0]
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_maybe_repeated_flags_every_repeated_key_and_few_others(threads):
    """The exact-copy check's filter (no sort of all keys): every key that occurs twice
    is flagged, on any number of threads, also for round coordinates (whose keys share
    their low bits); of distinct keys at most about 1 in 5 are flagged."""
    import numba as nb

    from geokanon.neighbours import maybe_repeated, pair_keys

    rng = np.random.default_rng(9)
    before = nb.get_num_threads()
    nb.set_num_threads(min(threads, nb.config.NUMBA_NUM_THREADS))
    try:
        for n in (2, 3, 1000, 200_000):
            a = rng.integers(0, 4000, n).astype(float) * 1000.0  # round: low key bits all 0
            b = rng.integers(0, 4000, n).astype(float) * 1000.0
            key = pair_keys(a, b)
            _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
            repeated = counts[inv] > 1
            got = maybe_repeated(key)
            assert got[repeated].all()
            distinct = np.unique(rng.normal(0, 1e6, n))
            flagged = maybe_repeated(pair_keys(distinct, distinct))
            assert flagged.mean() <= (0.3 if n > 100 else 1.0)
    finally:
        nb.set_num_threads(before)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_the_source_checksum_is_the_files_sha256(tmp_path, suffix):
    """A Parquet file is hashed on a thread while it is read, a CSV before: either way the
    table's checksum is the file's sha256, and an unreadable file is an input error."""
    import hashlib

    from geokanon.errors import InputError
    from geokanon.io import read_points

    frame = _frame(np.arange(300) % 70)
    path = tmp_path / f"points{suffix}"
    frame.to_parquet(path, index=False) if suffix == ".parquet" else frame.to_csv(path, index=False)
    table = read_points(path, x="x", y="y", subject="s", crs="EPSG:28992")
    assert table.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_bytes(b"not a table")
    with pytest.raises(InputError):
        read_points(path, x="x", y="y", crs="EPSG:28992")


def test_the_process_entry_returns_mains_code_and_freezes_the_heap(tmp_path, capsys):
    """``geokanon`` / ``python -m geokanon`` call ``run``: main's exit code, the output
    flushed, and the heap frozen out of the cyclic collector for the interpreter's exit."""
    import gc

    from geokanon.cli import main, run

    args = ["--quiet", "classify", str(tmp_path / "absent.csv"), "--crs", "EPSG:28992"]
    code = main(args)
    assert code != 0 and gc.get_freeze_count() == 0
    try:
        assert run(args) == code
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert capsys.readouterr().err.count("geokanon: error: --k is required") == 2


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_partitioned_writer_group_counts_and_renumbering_match_numpy(dtype):
    from geokanon.distributed import _remap
    from geokanon.release_tiles import _count_members

    rng = np.random.default_rng(7)
    ng = 500
    gi = rng.integers(-1, ng, 20_000).astype(dtype)
    new_of_old = rng.permutation(ng).astype(np.int64)
    sizes = np.zeros(ng, np.int64)
    _count_members(gi, new_of_old, sizes)
    assert np.array_equal(sizes, np.bincount(new_of_old[gi[gi >= 0]], minlength=ng))
    want = np.where(gi >= 0, new_of_old[np.maximum(gi, 0)], -1)
    _remap(gi, new_of_old)
    assert gi.dtype == dtype and np.array_equal(gi, want)

"""The verifier's compiled readers give what the plain computation gives.

WKB points read byte by byte (against shapely, with nulls, other geometries, big-endian
points and cut values falling back), the keyed hashes of one compiled pass (against
splitmix64 written with numpy, every NaN hashing as one), a prepared id lookup (against a
search of the table, ids repeated, absent, negative, unsigned), a point's box checked per
row (against numpy), and a no_leak scan whose ``bbox`` repeats ``x``/``y`` finding
what it finds when the box is given as its own columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import shapely

from geokanon.verify._arrays import IdLookup, RowHasher, positions_in
from geokanon.verify._records import _ROW_FAULTS, _box_fields, _check_rows
from geokanon.verify.leak_rules import wkb_xy

_A = np.uint64(0xBF58476D1CE4E5B9)
_B = np.uint64(0x94D049BB133111EB)


def _splitmix(v: np.ndarray) -> np.ndarray:
    v = v ^ (v >> np.uint64(30))
    v = v * _A
    v ^= v >> np.uint64(27)
    v = v * _B
    v ^= v >> np.uint64(31)
    return v


def _shapely_xy(values: list[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    geoms = shapely.from_wkb(np.array(values, dtype=object), on_invalid="ignore")
    xs = np.full(len(values), np.nan)
    ys = np.full(len(values), np.nan)
    ok = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    ok &= shapely.get_type_id(geoms) == 0
    xs[ok], ys[ok] = shapely.get_x(geoms[ok]), shapely.get_y(geoms[ok])
    return xs, ys


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize(
    "extra",
    [
        [],
        [None, None],
        [shapely.to_wkb(shapely.LineString([(0, 0), (1, 1)]))],  # not a point
        [shapely.to_wkb(shapely.Point(3.5, -2.25), byte_order=0)],  # big-endian
        [shapely.to_wkb(shapely.Point(1, 2, 3))],  # 3-D
    ],
)
def test_wkb_points_as_shapely_reads_them(extra: list[bytes | None], large: bool) -> None:
    rng = np.random.default_rng(len(extra))
    pts = shapely.points(rng.uniform(-1e6, 1e6, (200, 2)))
    values: list[bytes | None] = [bytes(b) for b in shapely.to_wkb(pts, byte_order=1)]
    values[5] = None
    values += extra
    rng.shuffle(values)  # type: ignore[arg-type]
    arr = pa.array(values, type=pa.large_binary() if large else pa.binary())
    gx, gy = wkb_xy(arr)
    rx, ry = _shapely_xy(values)
    np.testing.assert_array_equal(gx, rx)
    np.testing.assert_array_equal(gy, ry)
    # a slice (an offset into the buffers) reads the same rows
    gx, gy = wkb_xy(arr.slice(7, 100))
    np.testing.assert_array_equal(gx, rx[7:107])
    np.testing.assert_array_equal(gy, ry[7:107])


def test_wkb_point_cut_short_falls_back() -> None:
    good = bytes(shapely.to_wkb(shapely.Point(1.0, 2.0), byte_order=1))
    arr = pa.array([good, good[:20] + b"\x00\x00"], type=pa.binary())  # 22 bytes
    gx, gy = wkb_xy(arr)
    assert gx[0] == 1.0 and gy[0] == 2.0
    assert gx.size == 2  # the odd value read by shapely, not as a point of 21 bytes


def test_hashes_are_splitmix_of_the_salted_values() -> None:
    h = RowHasher()
    rng = np.random.default_rng(3)
    ints = rng.integers(-(2**62), 2**62, 500)
    got = h.values(pa.array(ints))
    want = _splitmix(ints.view(np.uint64) ^ h.salt[2])
    np.testing.assert_array_equal(got, want)
    f = rng.normal(size=500)
    f[::9] = np.nan
    bits = f.view(np.uint64).copy()
    bits[4] = np.uint64(0xFFF8000000000001)  # another NaN
    odd = bits.view(np.float64)
    arr = pa.array(odd, mask=np.arange(500) % 11 == 0)  # nulls as well
    got = h.values(arr)
    plain = np.where(np.arange(500) % 11 == 0, np.nan, odd)
    plain[np.isnan(plain)] = np.nan
    np.testing.assert_array_equal(got, _splitmix(plain.view(np.uint64) ^ h.salt[1]))
    # a NaN and a null hash alike, and unlike any number
    assert got[0] == got[9] == got[4]
    assert len(set(got[~np.isnan(plain)].tolist())) == int((~np.isnan(plain)).sum())
    pos = h.positions(10, 5)
    np.testing.assert_array_equal(
        pos, _splitmix(np.arange(10, 15, dtype=np.uint64) ^ h.salt[1]) | np.uint64(1)
    )


def _search(table: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(values.size, -1, dtype=np.int64)
    for i, v in enumerate(values.tolist()):
        at = np.flatnonzero(table == v)
        if at.size:
            out[i] = at[0]
    return out


@pytest.mark.parametrize(
    ("table", "values"),
    [
        (np.array([5, 3, 9, 4]), np.array([3, 4, 5, 6, 9, -1, 100])),
        (np.array([5, 3, 5, 4]), np.array([5, 4, 3, 2])),  # an id repeats: the first row
        (np.array([-2, 7, 0]), np.array([-2, 0, 7, 1])),  # negative ids
        (np.array([0, 2**40, 17]), np.array([17, 2**40, 3])),  # far apart
        (np.array([1, 2, 3], dtype=np.uint64), np.array([2, 3, 4], dtype=np.uint64)),
        (np.array([1, 2, 3]), np.array([2.0, 2.5, 3.0])),  # values not integers
        (np.array([], dtype=np.int64), np.array([1, 2])),
    ],
)
def test_prepared_lookup_finds_the_first_row_of_each_id(
    table: np.ndarray, values: np.ndarray
) -> None:
    look = IdLookup(table)
    want = _search(table, values)
    for _ in range(2):  # prepared once, asked twice
        np.testing.assert_array_equal(look(values), want)
    np.testing.assert_array_equal(positions_in(table, values), want)


def _boxes_ok(
    struct: pa.StructArray, is_g: np.ndarray, rx: np.ndarray, ry: np.ndarray
) -> np.ndarray:
    """Per row, whether the records pass's compiled row check finds its bbox right: row i
    is a member of group i (representative ``rx[i], ry[i]``) or of the one class."""
    n = is_g.size
    g = np.where(is_g, np.arange(n), -1)
    c = np.where(is_g, -1, 0)
    level = np.where(is_g, 0, 1)  # the group's level, the class's
    unit = np.where(is_g, -2, 0)  # null, the class's unit
    box = _box_fields(struct)
    assert box is not None
    none = np.zeros(0)
    ok = np.zeros(n, dtype=bool)
    for i in range(n):
        faults = np.zeros(len(_ROW_FAULTS), dtype=np.int64)
        _check_rows(
            g[i : i + 1], c[i : i + 1], g[i : i + 1], c[i : i + 1], n, level[i : i + 1],
            np.array([0, 1]), unit[i : i + 1], np.array([0]), none, none, False, rx, ry, 0,
            none, none, 1, *(a[i : i + 1] for a in box), np.empty(1, dtype=np.int64),
            np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64),
            np.zeros(n + 1, dtype=np.int64), faults,
        )  # fmt: skip
        assert faults[_ROW_FAULTS.index("level")] == faults[_ROW_FAULTS.index("unit")] == 0
        ok[i] = faults[_ROW_FAULTS.index("bbox")] == 0
    return ok


def test_point_boxes_checked_per_row() -> None:
    rng = np.random.default_rng(5)
    n = 400
    rx, ry = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    is_g = rng.random(n) < 0.7
    xmin, xmax, ymin, ymax = rx.copy(), rx.copy(), ry.copy(), ry.copy()
    nan_rows = ~is_g & (rng.random(n) < 0.5)
    for a in (xmin, xmax, ymin, ymax):
        a[nan_rows] = np.nan
    off = rng.random(n) < 0.1
    xmax[off] += 1e-9  # a box that is not the point's
    half = ~is_g & ~nan_rows & (rng.random(n) < 0.5)
    ymin[half] = np.nan  # a class row whose box is half NaN
    valid = ~(~is_g & ~nan_rows & ~half)  # the other class rows: null boxes
    valid[::37] = False  # and some group rows' boxes null
    struct = pa.StructArray.from_arrays(
        [pa.array(xmin), pa.array(ymin), pa.array(xmax), pa.array(ymax)],
        names=["xmin", "ymin", "xmax", "ymax"],
        mask=pa.array(~valid),
    )
    got = _boxes_ok(struct, is_g, rx, ry)
    point = valid & (xmin == rx) & (xmax == rx) & (ymin == ry) & (ymax == ry)
    empty = ~valid | (np.isnan(xmin) & np.isnan(ymin) & np.isnan(xmax) & np.isnan(ymax))
    np.testing.assert_array_equal(got, np.where(is_g, point, empty))
    assert not got[off & is_g & valid].any() and not got[half & valid].any()


def _point_file(path, x, y, box_x, box_y) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    bbox = pa.StructArray.from_arrays(
        [pa.array(box_x), pa.array(box_y), pa.array(box_x), pa.array(box_y)],
        names=["xmin", "ymin", "xmax", "ymax"],
    )
    pq.write_table(pa.table({"group_id": np.arange(x.size), "x": x, "y": y, "bbox": bbox}), path)


@pytest.mark.parametrize("box_differs", [False, True])
def test_a_box_that_repeats_its_point_finds_what_its_own_values_find(
    tmp_path, box_differs: bool, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from geokanon.verify import leak_rules
    from geokanon.verify.leak_rules import Secrets, scan_parquet

    rng = np.random.default_rng(8)
    sx, sy = rng.uniform(0, 1e4, 300).round(1), rng.uniform(0, 1e4, 300).round(1)
    values = np.r_[sx, sy]
    sec = Secrets(
        px=np.empty(0), py=np.empty(0), coords=np.sort(values), subject_ids=frozenset(),
        spaced_ids=(), epoch=np.empty(0), wall=np.empty(0), bad_names=frozenset(), n_k=5,
        pair_sources=((sx, sy),),
    )  # fmt: skip
    x, y = rng.uniform(2e4, 3e4, 200), rng.uniform(2e4, 3e4, 200)
    x[:3], y[:3] = sx[:3], sy[:3]  # three rows publish a source coordinate pair
    x[10] = np.nan
    box_x, box_y = x.copy(), y.copy()
    if box_differs:
        box_x[50], box_y[60] = sx[7], sy[9]  # the box alone holds source values
    path = tmp_path / "points.parquet"
    _point_file(path, x, y, box_x, box_y)
    got = scan_parquet(path, sec)
    monkeypatch.setattr(leak_rules, "_POINT_BOX", {})  # every box field on its own
    want = scan_parquet(path, sec)
    assert got == want
    assert any("pair" in f for f in got), got


def test_tied_sums_as_the_products_summed() -> None:
    from geokanon.verify._arrays import sum_u64

    h = RowHasher()
    rng = np.random.default_rng(9)
    values = h.values(pa.array(rng.integers(0, 1000, 5_000)))
    at = h.positions(123, values.size)
    assert h.tied_sum(values, at) == sum_u64(h.at(values, at))
    look = h.values(pa.array(rng.normal(size=40)))
    null = h.values(pa.array([None], type=pa.float64()))[0]
    for codes in (rng.integers(-1, 40, 5_000), np.full(5_000, -1), rng.integers(0, 41, 5_000)):
        full = np.append(look, null)
        want = sum_u64(h.at(full[np.where(codes < 0, full.size - 1, codes)], at))
        assert h.tied_sum_coded(look, codes, null, at) == want


def test_audit_ids_and_codes_read_from_their_buffers_as_arrow_reads_them() -> None:
    """The audit's id and text-code columns, read from Arrow's buffers (nulls in the
    validity bitmap, arrays sliced at any offset), are what arrow_ids and
    arrow_text_codes give."""
    from geokanon.verify._arrays import arrow_ids, arrow_text_codes, codes_into, ids_into
    from geokanon.verify._results import Unreadable

    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        a, b = sorted(rng.integers(0, n + 1, 2))
        values = rng.integers(0, 50, n).astype(object)
        values[rng.random(n) < 0.3] = None
        ids = pa.array(list(values), type=pa.int64()).slice(a, b - a)
        got = np.empty(len(ids), dtype=np.int64)
        ids_into(ids, "ids", got)
        np.testing.assert_array_equal(got, arrow_ids(pa.chunked_array([ids], pa.int64()), "ids"))
        words = np.array(["grouped", "merged", None, "suppressed"], dtype=object)
        text = pa.array(list(words[rng.integers(0, 4, n)])).dictionary_encode().slice(a, b - a)
        idx, texts = arrow_text_codes(text)
        number: dict[str, int] = {}
        local = [number.setdefault(str(v), len(number)) for v in text.dictionary.to_pylist()]
        null = number.setdefault("None", len(number)) if text.null_count else -1
        codes = np.empty(len(text), dtype=np.int64)
        codes_into(text, np.array([*local, null], dtype=np.int64), codes)
        np.testing.assert_array_equal(codes, [number[texts[i]] for i in idx.tolist()])
    with pytest.raises(Unreadable):
        ids_into(pa.array([1, -3, None]), "ids", np.empty(3, dtype=np.int64))

"""Fuzzing the CSV reader: malformed text gives a PointTable or an InputError, nothing else."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geokanon.errors import InputError
from geokanon.io import PointTable, read_points

COLUMNS = ["x", "y", "lon", "lat", "user", "t", "u", "X", "", "x y", "ünit"]
TOKENS = st.one_of(
    st.sampled_from(
        [
            "155000", "463000", "-1", "0", "5.38", "52.15", "1000,5", "nan", "NaN", "inf",
            "-inf", "", " ", "NA", "null", '"', '""', "'", "1e400", "1e-400", "0x10", "TRUE",
            "2024-03-01T10:00:00Z", "2024-03-01 10:00:00", "2024-03-31 02:30:00", "1709287200",
            "1709287200000", "2024-13-45", "+02:00", "Ann", "ann ", "\t", ";", "|", "\\",
            "€", "\u200b", "١٢٣", "9" * 40, "-0", "1_000",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.text(max_size=6),
)  # fmt: skip
SEPARATORS = st.sampled_from([",", ";", "\t", ",,", ""])


GOOD = {
    "x": st.floats(min_value=150_000, max_value=160_000).map(lambda v: f"{v:.1f}"),
    "y": st.floats(min_value=460_000, max_value=470_000).map(lambda v: f"{v:.1f}"),
    "lon": st.floats(min_value=116.0, max_value=116.5).map(lambda v: f"{v:.6f}"),
    "lat": st.floats(min_value=39.8, max_value=40.1).map(lambda v: f"{v:.6f}"),
    "user": st.sampled_from(["a", "b", "c", "A", " a", "d"]),
    "t": st.sampled_from(["2024-03-01T10:00:00Z", "2024-03-01T11:00:00+01:00", "1709287200"]),
    "u": st.sampled_from(["GM1", "GM2", "GM3"]),
}


@st.composite
def csv_text(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    """A CSV that is mostly well formed, with a few cells, separators or names broken."""
    base = draw(st.sampled_from([["x", "y"], ["lon", "lat"]]))
    extra = draw(st.lists(st.sampled_from(["user", "t", "u"]), unique=True, max_size=3))
    header = base + extra
    if draw(st.integers(0, 4)) == 0:  # break the header now and then
        header = draw(st.lists(st.sampled_from(COLUMNS), min_size=0, max_size=6))
    sep = draw(SEPARATORS) if draw(st.integers(0, 4)) == 0 else ","
    bad_rate = draw(st.sampled_from([0.0, 0.05, 0.3]))
    n_rows = draw(st.integers(min_value=0, max_value=8))
    rows = []
    for _ in range(n_rows):
        cells = []
        for col in header:
            broken = draw(st.floats(0, 1)) < bad_rate or col not in GOOD
            cells.append(draw(TOKENS if broken else GOOD[col]))
        if draw(st.integers(0, 9)) == 0:  # a ragged row
            cells = cells[:-1] if draw(st.booleans()) else [*cells, draw(TOKENS)]
        rows.append(sep.join(cells))
    text = "\n".join([sep.join(header), *rows]) + draw(st.sampled_from(["", "\n", "\r\n"]))
    options: dict[str, object] = {}
    if "user" in header and draw(st.booleans()):
        options["subject"] = "user"
    if "t" in header and draw(st.booleans()):
        options["time"] = "t"
        if draw(st.booleans()):
            options["timezone"] = "Europe/Amsterdam"
    if draw(st.integers(0, 2)) == 0:
        options["crs"] = draw(st.sampled_from(["EPSG:28992", "EPSG:4326", "EPSG:27700"]))
    if "u" in header and draw(st.booleans()):
        options["unit"] = "u"
    elif draw(st.integers(0, 3)) == 0:
        options["unit_grid_m"] = 1000.0
    if draw(st.integers(0, 4)) == 0:
        options["coord_scale"] = draw(st.sampled_from([1.0, 1000.0]))
    if draw(st.integers(0, 9)) == 0:
        options["subject"] = "missing"
    options["chunksize"] = draw(st.sampled_from([1, 2, 500_000]))
    return text, options


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(case=csv_text(), raw=st.booleans())
def test_read_points_returns_a_table_or_raises_input_error(case, raw):
    text, options = case
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fuzz.csv"
        if raw:
            f.write_bytes(text.encode("utf-8", errors="surrogatepass"))
        else:
            f.write_text(text, encoding="utf-8", errors="replace")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                table = read_points(f, **options)
            except InputError:
                return
        assert isinstance(table, PointTable)
        assert len(table) > 0
        assert table.x.dtype.kind == "f" and bool((table.x == table.x).all())

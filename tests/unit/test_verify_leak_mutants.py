"""``no_leak`` and ``report_safety`` against mutants of a real release (issue 17, item 2).

One small real release of the Amersfoort dwellings (whole-metre coordinates, short
subject ids) is built per module; every mutant is a copy with one planted value and the
manifest's checksums recomputed, so only the semantic checks can catch it. The source's
values are judged whatever their form: a whole-number coordinate, a subject id of two or
three characters, a number written as a word.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main
from geokanon.verify import verify_release
from tests.conftest import data_file
from tests.release_fixtures import edit_manifest, refresh_manifest

RELEASE_ARGS = [
    "--k", "5", "--r-max", "300", "--unit", "gm_code", "--crs", "EPSG:28992",
    "--subject", "subject", "--keep", "consumption,unemployed",
]  # fmt: skip


def _dwellings(n: int) -> pd.DataFrame:
    frame = pd.read_csv(data_file("sdcspatial_dwellings", "dwellings.csv"))
    # Barneveld's 3 dwellings would breach the unit cap on their own
    frame = frame[frame["gm_code"] != "GM0203"].iloc[:n].drop(columns=["point_id"])
    return frame.reset_index(drop=True)


def _release(tmp: Path, frame: pd.DataFrame, name: str) -> tuple[Path, Path]:
    src = tmp / f"{name}.csv"
    frame.to_csv(src, index=False)
    out = tmp / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["release", str(src), *RELEASE_ARGS, "--out", str(out)])
    assert code == 0
    return src, out


@pytest.fixture(scope="module")
def short_ids(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, pd.DataFrame]:
    """1,200 dwellings, two per subject, ids of two or three characters (``a0`` .. ``x22``)."""
    frame = _dwellings(1200)
    j = np.arange(len(frame)) // 2
    frame["subject"] = [f"{chr(97 + v % 26)}{v // 26}" for v in j.tolist()]
    assert frame["subject"].str.len().max() <= 3
    src, out = _release(tmp_path_factory.mktemp("leak"), frame, "short")
    return src, out, frame


def _verify(root: Path, src: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["verify", str(root), "--source", str(src)])
    return code, capsys.readouterr().out


def _failed(out: str) -> set[str]:
    return set(re.findall(r"^FAIL (\w+)", out, flags=re.M))


def _detail(out: str, check: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"FAIL {check} "))


def _mutant(short_ids: tuple[Path, Path, pd.DataFrame], tmp_path: Path) -> Path:
    root = tmp_path / "mutant"
    shutil.copytree(short_ids[1], root)
    return root


def _edit_records(root: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    """Apply ``change`` to both records files alike (they keep holding the same rows)."""
    rel = root / "release"
    table = pq.read_table(rel / "records.parquet")
    frame = change(table.to_pandas())
    geometry = frame.pop("geometry") if "geometry" in frame else None
    out = pa.Table.from_pandas(frame, preserve_index=False)
    if geometry is not None:
        out = out.append_column("geometry", pa.array(geometry.tolist(), type=pa.binary()))
    pq.write_table(out.replace_schema_metadata(table.schema.metadata), rel / "records.parquet")
    csv = pd.read_csv(rel / "records.csv", dtype=str, keep_default_na=False)
    change(csv).to_csv(rel / "records.csv", index=False)
    refresh_manifest(root)


def _append_text(root: Path, name: str, text: str) -> None:
    path = root / "release" / name
    body = path.read_text(encoding="utf-8")
    if name.endswith(".html"):
        body = body.replace("</body>", f"<p>{text}</p></body>")
    else:
        body += f"\n{text}\n"
    path.write_text(body, encoding="utf-8")
    refresh_manifest(root)


def _whole_coordinate(frame: pd.DataFrame) -> int:
    """A source x that is a whole number and occurs once (the dwellings use whole metres)."""
    counts = frame["x"].value_counts()
    x = int(counts.index[counts == 1][0])
    assert float(x) in set(frame["x"].astype(float))
    return x


def test_the_valid_release_verifies(short_ids, capsys) -> None:
    src, out, _ = short_ids
    code, text = _verify(out, src, capsys)
    assert code == 0, text


# ---- a whole-number source coordinate ------------------------------------------------


def _plant_whole_coordinate(root: Path, frame: pd.DataFrame) -> int:
    """A whole-number source x planted in the first row's kept ``consumption`` (both
    records files); returns it."""
    x = _whole_coordinate(frame)

    def plant(f: pd.DataFrame) -> pd.DataFrame:
        as_float = f["consumption"].dtype.kind == "f"
        f.loc[f.index[0], "consumption"] = float(x) if as_float else str(x)
        return f

    _edit_records(root, plant)
    return x


def test_whole_number_coordinate_in_a_kept_column_fails_no_leak(short_ids, tmp_path, capsys):
    src, _, frame = short_ids
    root = _mutant(short_ids, tmp_path)
    x = _plant_whole_coordinate(root, frame)
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "no_leak" in _failed(out), out
    assert "consumption" in _detail(out, "no_leak")
    assert str(x) not in out  # the message never quotes the value


def test_source_coordinates_sorted_in_two_parts_still_find_the_planted_one(
    short_ids, tmp_path, capsys, monkeypatch
):
    # the source's coordinates sorted in two parts side by side, as at 1e6 records and
    # more (``_arrays.sort_floats``): the valid release still verifies, the planted
    # coordinate is still found
    import geokanon.verify._arrays as arrays

    monkeypatch.setattr(arrays, "_SORT_SPLIT_MIN", 2)
    src, out, frame = short_ids
    code, text = _verify(out, src, capsys)
    assert code == 0, text
    root = _mutant(short_ids, tmp_path)
    _plant_whole_coordinate(root, frame)
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    assert "consumption" in _detail(text, "no_leak")


@pytest.mark.parametrize("name", ["RELEASE_NOTES.md", "report.html"])
def test_whole_number_coordinate_in_the_prose_fails_no_leak(short_ids, tmp_path, capsys, name):
    src, _, frame = short_ids
    root = _mutant(short_ids, tmp_path)
    x = _whole_coordinate(frame)
    _append_text(root, name, f"The most isolated dwelling stands at easting {x}.")
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "no_leak" in _failed(out), out
    assert name in _detail(out, "no_leak")
    assert str(x) not in out


# ---- short subject ids ---------------------------------------------------------------


def test_short_subject_id_in_another_column_fails_no_leak(short_ids, tmp_path, capsys):
    src, _, frame = short_ids
    root = _mutant(short_ids, tmp_path)
    sid = str(frame["subject"].iloc[7])
    assert len(sid) < 4

    def plant(f: pd.DataFrame) -> pd.DataFrame:
        f["ref"] = ""
        f.loc[f.index[3], "ref"] = sid
        return f

    _edit_records(root, plant)
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "no_leak" in _failed(out), out
    assert "'ref'" in _detail(out, "no_leak") and "subject ids" in _detail(out, "no_leak")


@pytest.mark.parametrize("name", ["RELEASE_NOTES.md", "report.html"])
def test_short_subject_id_in_the_prose_fails_no_leak(short_ids, tmp_path, capsys, name):
    src, _, frame = short_ids
    root = _mutant(short_ids, tmp_path)
    sid = str(frame["subject"].iloc[11])
    _append_text(root, name, f"The record of {sid} moved the farthest.")
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "no_leak" in _failed(out), out
    assert name in _detail(out, "no_leak") and "subject ids" in _detail(out, "no_leak")


# ---- numbers written as words --------------------------------------------------------


@pytest.mark.parametrize("name", ["RELEASE_NOTES.md", "report.html"])
def test_suppressed_figure_in_words_fails_report_safety(short_ids, tmp_path, capsys, name):
    src, _, _ = short_ids
    root = _mutant(short_ids, tmp_path)
    _append_text(root, name, "In the smallest town two dwellings were suppressed.")
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "report_safety" in _failed(out), out


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("RELEASE_NOTES.md", "The smallest town held 1 suppressed record."),
        ("RELEASE_NOTES.md", "We suppressed 2 dwellings in the north."),
        ("report.html", "The suppression of 3 dwellings left a hole."),
        # verbs of loss (before 2026-12-06 only "suppress..." phrases were read: these
        # passed whenever their figure was one the release publishes elsewhere)
        ("RELEASE_NOTES.md", "GM0203+GM0267 lost 1 record."),
        ("RELEASE_NOTES.md", "One record was withheld in the north."),
        ("report.html", "1 dwelling was removed from the smallest town."),
        ("report.html", "We dropped 2 dwellings in Baarn."),
        ("RELEASE_NOTES.md", "Left out of the map: 3"),
        # the article as the count (before 2026-12-07: exit 0 whatever the figure)
        ("report.html", "A household in the smallest town was left out."),
    ],
    ids=[
        "count-then-suppressed",
        "suppressed-then-count",
        "suppression-of",
        "lost",
        "withheld-in-words",
        "was-removed",
        "dropped",
        "left-out-colon",
        "a-household-was-left-out",
    ],
)
def test_a_hidden_figure_in_prose_fails_report_safety(short_ids, tmp_path, capsys, name, phrase):
    src, _, _ = short_ids
    root = _mutant(short_ids, tmp_path)
    _append_text(root, name, phrase)
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "report_safety" in _failed(out), out


def test_the_release_s_own_input_filter_sentences_are_no_hidden_figure():
    """The generator's sentences on copies removed, units left out and records clipped
    count input rows (``geokanon.published.FILTER_PHRASES``): small figures there pass;
    the same figures in a sentence of one's own do not."""
    from geokanon.report.html import _duplicates_text, _input_filter_rows
    from geokanon.report.notes import input_filter_lines
    from geokanon.verify.report_safety import _phrase_problems

    entry = {"excluded_units": ["GM0001", "GM0002"], "excluded_records": 3, "clipped_records": 2}
    notes = "\n".join(input_filter_lines(entry))
    assert "3 records were dropped" in notes and "(--clip): 2" in notes
    assert _phrase_problems(notes, 5) == 0
    assert _phrase_problems(_duplicates_text({"copies": 2, "removed": True}), 5) == 0
    page = " ".join(f"{a} {b}" for a, b in _input_filter_rows(entry))
    assert _phrase_problems(page, 5) == 0
    assert _phrase_problems(notes + "\nGM0001 lost 3 records.", 5) == 1


def test_a_number_word_in_the_prose_is_judged_like_its_digits_by_holes(short_ids, tmp_path):
    src, out, _ = short_ids
    words = {13: "Thirteen", 17: "Seventeen", 23: "Twenty-three", 37: "Thirty-seven"}
    # a figure the release does not publish: its digits fail holes
    value = None
    for v in words:
        root = tmp_path / f"digits{v}"
        shutil.copytree(out, root)
        _append_text(root, "RELEASE_NOTES.md", f"{v} dwellings stood apart from the rest.")
        if not verify_release(root, source=src, checks=["holes"]).passed:
            value = v
            break
    assert value is not None
    root = _mutant((src, out, pd.DataFrame()), tmp_path)
    _append_text(root, "RELEASE_NOTES.md", f"{words[value]} dwellings stood apart from the rest.")
    report = verify_release(root, source=src, checks=["holes"])
    assert not report.passed
    assert "RELEASE_NOTES.md" in report.checks[0].detail


# ---- the false alarm: subject ids 1..6000 --------------------------------------------


def test_a_register_whose_subject_ids_are_the_integers_releases_and_verifies(tmp_path, capsys):
    frame = _dwellings(6000)
    frame["subject"] = np.arange(1, len(frame) + 1)
    src, out = _release(tmp_path, frame, "ints")
    code, text = _verify(out, src, capsys)
    assert code == 0, text
    # and a subject id planted where no figure of the release holds it is still found
    root = tmp_path / "planted"
    shutil.copytree(out, root)
    _append_text(root, "RELEASE_NOTES.md", "The first record came from subject 4321.")
    code, text = _verify(root, src, capsys)
    assert code == 4 and "no_leak" in _failed(text), text


# ---- a kept column that copies the subject ids ---------------------------------------


def test_a_kept_column_that_copies_short_subject_ids_fails_no_leak(short_ids, tmp_path, capsys):
    """A source column holding each record's own subject id is no attribute: keeping it
    publishes the ids, however short (on d39bb7f ids under 4 characters went through).
    The writer's own run holds no raw ids (the table has subject codes only), so it is
    ``verify --source`` that sees it."""
    _, _, frame = short_ids
    frame = frame.assign(owner=frame["subject"])
    src = tmp_path / "owner.csv"
    frame.to_csv(src, index=False)
    args = [a if a != "consumption,unemployed" else "consumption,owner" for a in RELEASE_ARGS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["release", str(src), *args, "--out", str(tmp_path / "out")]) == 0
    code, out = _verify(tmp_path / "out", src, capsys)
    assert code == 4, out
    assert _failed(out) == {"no_leak"}, out
    assert "'owner'" in _detail(out, "no_leak") and "subject ids" in _detail(out, "no_leak")


# ---- the report's sample size: a declared count, never a hiding place -----------------


def test_a_source_coordinate_stated_as_a_sample_size_fails_no_leak(short_ids, tmp_path, capsys):
    """The report's "a deterministic sample of N records" is a count no_leak accepts only
    up to the records the release publishes (a sample size can coincide with a
    whole-metre coordinate); a source coordinate written into the phrase is still found."""
    src, _, frame = short_ids
    root = _mutant(short_ids, tmp_path)
    x = int(frame["x"].iloc[7])
    _append_text(root, "RELEASE_NOTES.md", f"Drawn from a deterministic sample of {x:,} records.")
    code, out = _verify(root, src, capsys)
    assert code == 4, out
    assert "no_leak" in _failed(out), out


# ---- the report sample: the manifest's figure, recomputed from the audit -------------


def test_a_sample_size_the_manifest_does_not_declare_fails_no_leak(short_ids, tmp_path, capsys):
    """Any number in "a deterministic sample of N records" was accepted up to the records
    published (fb89b06); the phrase now states the manifest's report_sample records only,
    and a release that declares no sample (a single-file one) may not state one at all."""
    src, out, _ = short_ids
    root = _mutant(short_ids, tmp_path)
    published = json.loads((out / "release" / "manifest.json").read_text())["records_published"]
    _append_text(root, "report.html", f"a deterministic sample of {published - 1:,} records")
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    assert _failed(text) == {"no_leak"}, text
    assert "declares no report_sample" in _detail(text, "no_leak")


def _audit_sample(out: Path, every: int) -> int:
    """The records the writer's sample rule draws from this release's audit, computed with
    the writer's own hash (geokanon.release_tiles), not the verifier's."""
    from geokanon.release_tiles import _mix

    a = pd.read_parquet(out / "audit" / "assignment.parquet", columns=["group_id", "x_m", "y_m"])
    gid = pd.to_numeric(a["group_id"]).fillna(-1).to_numpy(dtype=np.int64)
    h = _mix(a["x_m"].to_numpy(dtype=np.float64), a["y_m"].to_numpy(dtype=np.float64))
    chosen = ((gid >= 0) & (gid % every == 0)) | ((gid < 0) & (h % np.uint64(every) == 0))
    return int(np.count_nonzero(chosen))


def _declare_sample(root: Path, entry: dict[str, int], phrase: int | None) -> None:
    edit_manifest(root, lambda m: m.__setitem__("report_sample", entry))
    if phrase is not None:
        _append_text(root, "report.html", f"a deterministic sample of {phrase:,} records")
    refresh_manifest(root)


def test_a_declared_report_sample_verifies_and_any_other_figure_fails(short_ids, tmp_path, capsys):
    src, out, _ = short_ids
    n = len(pd.read_parquet(out / "audit" / "assignment.parquet", columns=["group_id"]))
    divisor = n // 12  # every = max(2, n // divisor) = 12
    every = max(2, n // divisor)
    drawn = _audit_sample(out, every)
    assert 0 < drawn < n
    good = {"records": drawn, "every": every, "divisor": divisor}
    # the exact figure, stated in the report: verifies
    root = _mutant(short_ids, tmp_path / "good")
    _declare_sample(root, good, drawn)
    code, text = _verify(root, src, capsys)
    assert code == 0, text
    # the report states another number than the manifest's: no_leak
    root = _mutant(short_ids, tmp_path / "phrase")
    _declare_sample(root, good, drawn + 1)
    code, text = _verify(root, src, capsys)
    assert code == 4, text
    assert _failed(text) == {"no_leak"}, text
    assert "not the manifest's report_sample records" in _detail(text, "no_leak")
    # the manifest's figure contradicts the rule (and the report agrees with it): manifest
    for name, entry in (
        ("records", {**good, "records": drawn + 1}),
        ("every", {**good, "every": every + 1}),
        ("divisor", {**good, "divisor": n}),  # no sample is drawn from n records or fewer
        ("form", {**good, "records": float(drawn)}),
    ):
        root = _mutant(short_ids, tmp_path / name)
        _declare_sample(root, entry, int(entry["records"]))
        code, text = _verify(root, src, capsys)
        assert code == 4, (name, text)
        assert "manifest" in _failed(text), (name, text)
        assert "report_sample" in _detail(text, "manifest"), (name, text)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Each stands in for one suppressed person in their own unit.", 0),  # a ratio
        ("Each stands in for a suppressed person in their own unit.", 0),
        ("Each stands in for 2 suppressed people.", 1),
        ("The north held 1 suppressed record.", 1),
        ("The legend reads 0 suppressed; suppressed share 0.42 %.", 0),
        # verbs of loss
        ("GM0203 lost 12 records.", 0),  # k or more: no hidden figure
        ("GM0003 lost 12 records.", 0),  # the unit code's digits are no count
        ("No administrative unit lost any record to suppression.", 0),
        ("These units lost records to suppression.", 0),
        ("Records that could not join were published as counts, or removed (suppressed).", 0),
        ("2 people were not published.", 1),
        ("Held back: 2 records of Baarn.", 1),
        ("We deleted only 4 rows.", 1),
        # the article as the count 1, where a past loss or suppression follows
        ("A household in GM0267 was left out.", 1),
        ("An address in Baarn has been suppressed.", 1),
        ("A single farm went missing, a dwelling got removed.", 2),
        ("Two homes in Baarn are missing from the map.", 1),
        ("The notes' caveat: from a missing dot, nothing; 0 records are missing.", 0),
        ("A record is suppressed when its isolation ratio is above 4.", 0),  # a rule
        ("A unit with fewer than 8 people was merged with its neighbour.", 0),
    ],
)
def test_phrases_read_a_count_below_k(text, found):
    from geokanon.verify.report_safety import _phrase_problems

    assert _phrase_problems(text, 5) == found

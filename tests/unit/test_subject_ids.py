"""Spellings of one subject id are one subject (SPEC, "Subjects"): never a group of their own.

The ids are compared normalised (Unicode NFKC, surrounding whitespace removed, case
folded) everywhere subjects are read: the reader, the library's arrays, the mask keys,
the verifier (its own copy of the rule) and the risk report. The count of ids merged
is reported by ``classify`` (text and ``--json``), the manifest, the release notes and
the report; never the ids themselves.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main
from geokanon.errors import InputError
from geokanon.io import read_points
from geokanon.policy import Label, OutlierPolicy

#: One person written five ways: case, a leading and a trailing space, fullwidth letters.
SPELLINGS = ["P001", " P001", "p001", "P001 ", "\uff30\uff10\uff10\uff11"]
K, R_MAX = 5, 100.0
#: 60 people in a 150 m square; one more 10 km away (a suppressed share of 1/61).
POLICY_ARGS = ["--k", str(K), "--r-max", str(R_MAX), "--tau", "0.05", "--crs", "EPSG:28992"]

#: Ids whose spellings must agree (each tuple: one subject), and the ids that stay apart.
TRICKY = [
    ("P001", " p001", "\uff30\uff10\uff10\uff11", "P001\t", "\u3000P001\u00a0"),
    ("Strasse", "STRASSE", "Stra\u00dfe"),  # case folding: sharp s
    ("caf\u00e9", "cafe\u0301", "CAF\u00c9"),  # composed and decomposed accent
    ("\ufb01le", "FILE", "file"),  # the fi ligature
    ("\u212a9", "k9"),  # the Kelvin sign is a K
    ("\u0130d", "i\u0307d"),  # dotted capital I
]
APART = ["P001", "P0O1", "P-001", "P 001", "P002"]


def register(tmp_path: Path, ids: list[str] | None = None) -> Path:
    """60 subjects close together, and one person (5 records) 10 km from everyone."""
    rng = np.random.default_rng(0)
    n = 60
    x = 155000 + rng.uniform(0, 150, n)
    y = 463000 + rng.uniform(0, 150, n)
    far = ids if ids is not None else SPELLINGS
    frame = pd.DataFrame(
        {
            "x": np.r_[x, 165000 + 3.0 * np.arange(len(far))].round(2),
            "y": np.r_[y, 463000 + 3.0 * np.arange(len(far))].round(2),
            "person": [f"S{i:03d}" for i in range(n)] + far,
        }
    )
    path = tmp_path / "register.csv"
    frame.to_csv(path, index=False)
    return path


def far_rows(path: Path) -> np.ndarray:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    return np.flatnonzero(frame["x"].astype(float).to_numpy() > 160000)


# ---- the rule ------------------------------------------------------------------------


def test_one_rule_in_the_library_and_an_independent_one_in_the_verifier():
    from geokanon.neighbours import factorize_subject_ids, normalise_subject_id
    from geokanon.verify import subject_codes_of_ids, subject_id_text

    for same in TRICKY:
        assert len({normalise_subject_id(s) for s in same}) == 1, same
        assert len({subject_id_text(s) for s in same}) == 1, same
    everything = [s for group in TRICKY for s in group] + APART
    for s in everything:
        assert normalise_subject_id(s) == subject_id_text(s)
        assert normalise_subject_id(normalise_subject_id(s)) == normalise_subject_id(s)
        assert unicodedata.is_normalized("NFKC", normalise_subject_id(s))
    assert len({normalise_subject_id(s) for s in APART}) == len(APART)
    codes, texts, merged = factorize_subject_ids(pd.Series(everything, dtype="string"))
    vcodes, vmerged = subject_codes_of_ids(pd.Series(everything))
    n_subjects = len(TRICKY) + len(APART) - 1  # "P001" is in both lists
    assert texts.size == n_subjects == int(vcodes.max()) + 1
    assert merged == vmerged == len(set(everything)) - n_subjects  # distinct ids - subjects
    # the two numberings are one to one
    assert len(set(zip(codes.tolist(), vcodes.tolist(), strict=True))) == n_subjects


def test_reader_merges_spellings_and_keys_them_alike(tmp_path):
    path = register(tmp_path)
    with pytest.warns(UserWarning, match="4 subject ids in 'person' differ from another") as w:
        t = read_points(path, subject="person", crs="EPSG:28992")
    assert not any(s.strip() in str(m.message) for m in w for s in SPELLINGS)
    rows = far_rows(path)
    assert (t.n_subjects, t.subject_ids_merged) == (61, 4)
    assert np.unique(t.subjects[rows]).size == 1
    assert t.subject_keys is not None and np.unique(t.subject_keys[rows]).size == 1
    assert np.unique(t.subject_keys).size == 61


def test_integer_ids_are_taken_as_they_are(tmp_path):
    frame = pd.read_csv(register(tmp_path))
    frame["person"] = np.r_[np.arange(60), [1001] * 5].astype(np.int64)
    for path in (tmp_path / "ints.parquet", tmp_path / "ints.csv"):
        if path.suffix == ".csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # nothing merged, nothing to say
            t = read_points(path, subject="person", crs="EPSG:28992")
        assert (t.n_subjects, t.subject_ids_merged) == (61, 0)
    from geokanon.neighbours import factorize_subject_ids, subject_codes

    assert subject_codes(np.array([7, 3, 7, 10**12]), 4).tolist() == [1, 0, 1, 2]
    codes, texts, merged = factorize_subject_ids(np.array([2.5, 1.0, 2.5]))
    assert (codes.tolist(), texts.tolist(), merged) == ([1, 0, 1], ["1.0", "2.5"], 0)


@pytest.mark.parametrize("empty", ["", "   ", "\u3000", "\u00a0"])
def test_empty_or_blank_ids_are_refused_as_before(tmp_path, empty):
    f = tmp_path / "e.csv"
    f.write_text(f"x,y,user\n155000,463000,a\n155100,463100,{empty}\n", encoding="utf-8")
    with pytest.raises(
        InputError, match=r"1 records have an empty subject id in 'user' \(rows 2\)"
    ):
        read_points(f, subject="user", crs="EPSG:28992")
    from geokanon.neighbours import subject_codes

    with pytest.raises(InputError, match="1 records have an empty subject id"):
        subject_codes(np.array(["a", None], dtype=object), 2)


# ---- classify, release, verify, risk -------------------------------------------------


def test_classify_labels_the_five_spellings_an_outlier(tmp_path, capsys):
    path = register(tmp_path)
    assert main(["classify", str(path), "--subject", "person", *POLICY_ARGS, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["subjects"] == 61 and d["subject_ids_merged"] == 4
    assert d["counts"]["suppress"] == 5 and d["counts"]["ok"] == 60
    assert main(["classify", str(path), "--subject", "person", *POLICY_ARGS]) == 0
    out = capsys.readouterr().out
    assert "61 subjects" in out and "4 subject ids merged" in out
    assert not any(s.strip() in out for s in SPELLINGS)
    # the library's arrays follow the same rule
    from geokanon.classify import classify

    frame = pd.read_csv(path, dtype={"person": str}, keep_default_na=False)
    cls = classify(
        frame["x"].to_numpy(), frame["y"].to_numpy(), OutlierPolicy(k=K, r_max_m=R_MAX),
        subjects=frame["person"].to_numpy(dtype=object),
    )  # fmt: skip
    assert (cls.labels[far_rows(path)] == Label.SUPPRESS).all()


def test_release_does_not_group_the_five_spellings(tmp_path, capsys):
    from geokanon.risk import release_risk
    from geokanon.verify import verify_release

    path = register(tmp_path)
    out = tmp_path / "out"
    code = main(["release", str(path), "--subject", "person", *POLICY_ARGS, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    a = pd.read_parquet(out / "audit" / "assignment.parquet").sort_values("source_row")
    far = a.iloc[far_rows(path)]
    assert (far["disposal"] == "suppressed").all() and far["group_id"].isna().all()
    assert a["subject"].nunique() == 61
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert manifest["subject_ids_merged"] == 4
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "4 ids were spellings of another id" in notes
    report = (out / "release" / "report.html").read_text()
    assert "subject ids merged" in report and "<code>4</code>" in report
    for f in (out / "release").rglob("*"):
        if f.is_file():
            text = f.read_bytes().decode("utf-8", errors="replace")
            assert not any(s.strip() in text for s in SPELLINGS), f.name
    v = verify_release(out, source=path)
    assert v.passed, v.failed
    assert release_risk(out, source=path).min_count >= K
    # the verifier recounts the merges from the source
    manifest["subject_ids_merged"] = 0
    (out / "release" / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    v = verify_release(out, source=path)
    assert v.failed == ("counts",)
    assert "subject_ids_merged" in dict((c.name, c.detail) for c in v.checks)["counts"]


def test_verifier_and_risk_count_spellings_as_one_subject(tmp_path):
    """A release that took the five spellings for five people fails k_subjects on the source."""
    from geokanon.pipeline import release_points
    from geokanon.release import ReleaseOptions
    from geokanon.risk import release_risk
    from geokanon.verify import verify_release

    path = register(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = read_points(path, subject="person", crs="EPSG:28992")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)["person"]
    spelt, spellings = pd.factorize(raw, sort=True)  # every spelling its own code
    wrong = dataclasses.replace(
        t, subjects=spelt.astype(np.int64), subject_ids=np.asarray(spellings, dtype=object)
    )
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release_points(
            wrong, OutlierPolicy(k=K, r_max_m=R_MAX, tau=0.05), out,
            ReleaseOptions(read_options=(("subject", "person"), ("crs", "EPSG:28992"))),
        )  # fmt: skip
    a = pd.read_parquet(out / "audit" / "assignment.parquet").sort_values("source_row")
    assert a.iloc[far_rows(path)]["group_id"].notna().all()  # the wrong release grouped them
    v = verify_release(out, source=path)
    assert "k_subjects" in v.failed
    assert "1 of" in dict((c.name, c.detail) for c in v.checks)["k_subjects"]
    assert release_risk(out, source=path).min_count == 1


def test_mask_noise_is_keyed_by_the_normalised_id():
    from geokanon.mask import MaskKey, mask_keys

    key = MaskKey(b"a fixed key for the spellings test")
    keys = mask_keys([0.0] * 5, [0.0] * 5, key=key, subjects=SPELLINGS)
    assert np.unique(keys).size == 1
    other = mask_keys([0.0], [0.0], key=key, subjects=["P002"])
    assert other[0] != keys[0]
    ints = mask_keys([0.0, 0.0], [0.0, 0.0], key=key, subjects=np.array([7, 7]))
    assert ints[0] == mask_keys([0.0], [0.0], key=key, subjects=["7"])[0]

"""The mask's key is a secret of the audit: never published, not the seed, caught if planted.

SPEC, "Secrets that never leave the audit": the key of a geomask is never written to
``release/`` and is not guessable; the published ``seed`` only fixes tie-breaking.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from geokanon.cli import main

SEED = "873104"
MASK = ["--mask", "donut", "--mask-min", "20", "--mask-max", "60"]


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> Path:
    rng = np.random.default_rng(8)
    n = 400
    frame = pd.DataFrame(
        {
            "x": (155_000 + rng.normal(0, 250, n)).round(2),
            "y": (463_000 + rng.normal(0, 250, n)).round(2),
            "person": [f"P{i % 260:04d}" for i in range(n)],
        }
    )
    path = tmp_path_factory.mktemp("mk") / "points.csv"
    frame.to_csv(path, index=False)
    return path


def _release(points: Path, out: Path, *extra: str) -> None:
    args = ["release", str(points), "--subject", "person", "--crs", "EPSG:28992"]
    args += ["--k", "5", "--r-max", "150", "--tau", "0.5", "--unit-cap", "1"]
    assert main([*args, *MASK, "--seed", SEED, "--out", str(out), *extra]) == 0


@pytest.fixture(scope="module")
def two_runs(points, tmp_path_factory) -> tuple[Path, Path]:
    """Two releases of the same input with the same seed and no key given."""
    root = tmp_path_factory.mktemp("runs")
    _release(points, root / "a")
    _release(points, root / "b")
    return root / "a", root / "b"


def _masked(root: Path) -> np.ndarray:
    a = pq.read_table(root / "audit" / "assignment.parquet").to_pandas()
    return np.column_stack([a["x_m"].to_numpy(), a["y_m"].to_numpy()])


def _key_forms(root: Path) -> tuple[list[bytes], list[int]]:
    """The audit's key as text forms (hex, decimal words, ...) and as 64-bit integers."""
    from geokanon.mask import MaskKey

    key = MaskKey.from_file(root / "audit" / "mask_key")
    forms = [key.material, key.material.upper()]
    with contextlib.suppress(ValueError):  # a drawn key: hex text of 32 random bytes
        forms.append(bytes.fromhex(key.material.decode("latin-1")))
    ints: list[int] = []
    for w in key.words:
        signed = w - (1 << 64) if w >= 1 << 63 else w
        forms += [str(w).encode(), str(signed).encode(), f"{w:016x}".encode()]
        ints += [w, signed]
    return forms, ints


def _trace(root: Path) -> list[str]:
    """Where in ``release/`` any form of the audit's key appears (bytes and Parquet cells)."""
    forms, ints = _key_forms(root)
    where = []
    for path in sorted((root / "release").rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        where += [f"{path.name}: bytes" for f in forms if f in data]
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for name, col in zip(table.column_names, table.columns, strict=True):
                if pa.types.is_integer(col.type) and col.type.bit_width == 64:
                    ok = [v for v in ints if -(1 << 63) <= v < (1 << 63)]
                    if pc.any(pc.is_in(col, value_set=pa.array(ok, pa.int64()))).as_py():
                        where.append(f"{path.name}: {name}")
                elif pa.types.is_string(col.type) or pa.types.is_dictionary(col.type):
                    text = "\n".join(str(v) for v in col.to_pylist())
                    where += [f"{path.name}: {name}" for f in forms if f.decode("latin-1") in text]
    return where


def test_the_key_stays_in_the_audit_and_the_seed_does_not_fix_the_mask(two_runs):
    a, b = two_runs
    # Same input, same published seed, no key: two different masks. Whoever reads the
    # seed in manifest.json, RELEASE_NOTES.md or report.html cannot redraw the mask.
    assert not np.allclose(_masked(a), _masked(b))
    for root in (a, b):
        manifest = json.loads((root / "release" / "manifest.json").read_text())
        assert manifest["seed"] == int(SEED)  # still published: it only breaks ties
        assert manifest["verification"]["no_leak"] is True
        assert "secret" in manifest["mask"]["key"]
    # The key is in the audit (owner-only), and no release file holds it in any form.
    for root in (a, b):
        key_file = root / "audit" / "mask_key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert len(bytes.fromhex(key_file.read_text().strip())) == 32  # 256 random bits
        assert _trace(root) == []
        audit = json.loads((root / "audit" / "audit.json").read_text())
        assert audit["mask_key"]["file"] == "mask_key"


def test_the_same_key_file_or_audit_reproduces_the_mask(points, two_runs, tmp_path):
    a, _ = two_runs
    # The key of an earlier release, given back: the very same masked coordinates, and the
    # very same release files.
    _release(points, tmp_path / "c", "--mask-key", str(a / "audit" / "mask_key"))
    np.testing.assert_array_equal(_masked(tmp_path / "c"), _masked(a))
    for path in sorted((a / "release").iterdir()):
        assert (tmp_path / "c" / "release" / path.name).read_bytes() == path.read_bytes()
    # Replacing a masked release (--force) keeps the key of its audit: no fresh noise.
    copy = tmp_path / "a"
    shutil.copytree(a, copy)
    _release(points, copy, "--force")
    np.testing.assert_array_equal(_masked(copy), _masked(a))
    # A custodian's own (binary) key file: another key, another mask; the audit keeps a
    # copy, which reproduces it as above.
    own = tmp_path / "custodian.key"
    own.write_bytes(bytes(range(7, 47)))
    _release(points, tmp_path / "d", "--mask-key", str(own))
    assert not np.allclose(_masked(tmp_path / "d"), _masked(a))
    assert (tmp_path / "d" / "audit" / "mask_key").read_bytes().strip() == own.read_bytes()
    assert _trace(tmp_path / "d") == []


def test_a_bad_key_file_is_refused_without_showing_it(points, tmp_path, capsys):
    short = tmp_path / "short.key"
    short.write_bytes(b"hunter2hunter")
    for key, message in [(tmp_path / "none.key", "does not exist"), (short, "16 bytes")]:
        args = ["release", str(points), "--crs", "EPSG:28992", "--k", "5", "--r-max", "150"]
        code = main([*args, *MASK, "--mask-key", str(key), "--out", str(tmp_path / "x")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and str(key) in err
        assert "hunter" not in err
        assert not (tmp_path / "x").exists()
    # a key without a mask is a mistake, not silently ignored
    args = ["release", str(points), "--crs", "EPSG:28992", "--k", "5", "--r-max", "150"]
    assert main([*args, "--mask-key", str(short), "--out", str(tmp_path / "y")]) == 2
    assert "needs a mask" in capsys.readouterr().err


def _rehash(root: Path) -> None:
    """Recompute every checksum of the manifest, so only ``no_leak`` can see a planted key."""
    path = root / "release" / "manifest.json"
    manifest = json.loads(path.read_text())
    files = sorted(p for p in (root / "release").rglob("*") if p.is_file())
    manifest["files"] = {
        p.relative_to(root / "release").as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if p.name != "manifest.json"
    }
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _plant_notes(root: Path, key: bytes, words: tuple[int, int]) -> None:
    notes = root / "release" / "RELEASE_NOTES.md"
    notes.write_text(notes.read_text() + f"\nMask key: {key.decode()}\n")


def _plant_manifest(root: Path, key: bytes, words: tuple[int, int]) -> None:
    path = root / "release" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["mask"]["key"] = words[0]  # the derived 64-bit word, as a JSON number
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _plant_report(root: Path, key: bytes, words: tuple[int, int]) -> None:
    path = root / "release" / "report.html"
    path.write_text(path.read_text().replace("</body>", f"<!-- {key.decode().upper()} --></body>"))


def _plant_parquet_text(root: Path, key: bytes, words: tuple[int, int]) -> None:
    path = root / "release" / "groups.parquet"
    table = pq.read_table(path)
    note = [f"{words[1]:016x}"] + [""] * (table.num_rows - 1)
    pq.write_table(table.append_column("note", pa.array(note)), path, compression="zstd")


def _plant_parquet_int(root: Path, key: bytes, words: tuple[int, int]) -> None:
    path = root / "release" / "groups.parquet"
    table = pq.read_table(path)
    w = words[0] - (1 << 64) if words[0] >= 1 << 63 else words[0]
    tag = pa.array([w] + [0] * (table.num_rows - 1), pa.int64())
    pq.write_table(table.append_column("tag", tag), path, compression="zstd")


def _plant_csv(root: Path, key: bytes, words: tuple[int, int]) -> None:
    path = root / "release" / "records.csv"
    head, *rows = path.read_text().splitlines()
    rows = [r + "," + (key.decode() if i == 2 else "") for i, r in enumerate(rows)]
    path.write_text("\n".join([head + ',"k"', *rows]) + "\n")


def _plant_other_file(root: Path, key: bytes, words: tuple[int, int]) -> None:
    (root / "release" / "extra.bin").write_bytes(b"\x00\x01" + bytes.fromhex(key.decode()))


@pytest.mark.parametrize(
    "plant",
    [
        _plant_notes,
        _plant_manifest,
        _plant_report,
        _plant_parquet_text,
        _plant_parquet_int,
        _plant_csv,
        _plant_other_file,
    ],
)
def test_no_leak_fails_a_release_holding_the_key(two_runs, points, tmp_path, plant):
    from geokanon.mask import MaskKey
    from geokanon.verify import verify_release

    a, _ = two_runs
    root = tmp_path / "planted"
    shutil.copytree(a, root)
    key = MaskKey.from_file(root / "audit" / "mask_key")
    plant(root, key.material, key.words)
    _rehash(root)
    report = verify_release(root, source=points)
    failed = {name for name, ok in report.as_dict().items() if not ok}
    # An integer column the format does not declare is also a figure outside the holes
    # system, so `holes` fails it too; every other plant is caught by `no_leak` alone.
    also = {"holes"} if plant is _plant_parquet_int else set()
    # A column added to one table file only makes the files disagree (records.csv against
    # records.parquet, a Parquet file against release.gpkg's layer): `counts` sees that.
    if plant in (_plant_parquet_text, _plant_parquet_int, _plant_csv):
        also.add("counts")
    assert failed == {"no_leak", *also}
    detail = next(c.detail for c in report.checks if c.name == "no_leak")
    assert "mask key" in detail
    assert key.material.decode() not in detail  # the finding names the key, never shows it


def test_no_leak_fails_a_masked_release_whose_audit_lost_its_key(two_runs, points, tmp_path):
    from geokanon.verify import verify_release

    root = tmp_path / "nokey"
    shutil.copytree(two_runs[0], root)
    (root / "audit" / "mask_key").unlink()
    report = verify_release(root, source=points)
    assert {n for n, ok in report.as_dict().items() if not ok} == {"no_leak"}

"""``--totals complementary``: secondary suppression of the per-unit source totals.

The choice (:func:`geokanon.complementary.choose_complementary_totals`) is checked
against an independent brute-force oracle on small tables (every integer solution of
the published figures enumerated), for protection (every ``<k`` figure keeps every
value 1..k-1) and for economy (no fewer withheld totals would do). Whole releases
with ``<k`` units are written, verified, and tampered with.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main
from geokanon.verify import verify_release
from tests.release_fixtures import edit_csv

K = 4
LT_K = "<k"
WITHHELD = "withheld"


# ---- the brute-force oracle -------------------------------------------------------------


def _safe(
    rows: list[dict], totals, pooled: int, k: int, n_input: int | None, shifts: bool = False
) -> bool:
    """Whether every ``<k`` figure attains every value 1..k-1 over the integer solutions.

    Records are their own subjects: unit u has ``released_u + d_u + s_u + p_u`` records,
    ``s_u`` suppressed (fixed, or 1..k-1 for ``<k``), ``p_u >= 0`` generalised to the
    area class (``sum p_u = pooled``), and ``d_u`` its records in groups counted in
    other units minus theirs counted in it (0 when groups are counted by their members'
    units; with ``shifts``, groups are counted whole in one unit: ``d_u >= -released_u``,
    ``sum d_u = 0``). A published total fixes the unit's records, ``<k`` bounds them to
    1..k-1, withheld says nothing; a published input size fixes their sum. Every
    solution is enumerated (a grid over the free variables).
    """
    n = len(rows)
    rel = np.array([r["released"] for r in rows])
    hidden = [i for i, r in enumerate(rows) if r["suppressed"] == LT_K]
    axes = [np.arange(1, k)] * len(hidden) + [np.arange(pooled + 1)] * (n - 1)
    if shifts:
        axes += [np.arange(-rel[i], rel.sum() + 1) for i in range(n - 1)]
    grid = [g.ravel() for g in np.meshgrid(*axes, indexing="ij")]
    m = grid[0].size
    s = np.tile([0 if r["suppressed"] == LT_K else int(r["suppressed"]) for r in rows], (m, 1))
    for j, i in enumerate(hidden):
        s[:, i] = grid[j]
    free = np.stack(grid[len(hidden) :], axis=1)
    p = np.zeros((m, n), dtype=np.int64)
    p[:, : n - 1] = free[:, : n - 1]
    p[:, n - 1] = pooled - p[:, : n - 1].sum(axis=1)
    ok = p[:, n - 1] >= 0
    d = np.zeros((m, n), dtype=np.int64)
    if shifts:
        d[:, : n - 1] = free[:, n - 1 :]
        d[:, n - 1] = -d[:, : n - 1].sum(axis=1)
        ok &= d[:, n - 1] >= -rel[n - 1]
    recs = rel + d + s + p
    if n_input is not None:
        ok &= recs.sum(axis=1) == n_input
    for i, t in enumerate(totals):
        if t == LT_K:
            ok &= (recs[:, i] >= 1) & (recs[:, i] <= k - 1)
        elif t != WITHHELD:
            ok &= recs[:, i] == t
    want = set(range(1, k))
    cells = [s[ok, i] for i in hidden] + [recs[ok, i] for i, t in enumerate(totals) if t == LT_K]
    return all(set(c.tolist()) >= want for c in cells)


def _table(rng: np.random.Generator, shifts: bool) -> tuple[list[dict], list[int], int, int | None]:
    """A small random unit table consistent with some source (records, pooled, N); with
    ``shifts`` (groups counted whole in one unit) smaller, to keep the grid small."""
    n = 3 if shifts else int(rng.integers(3, 5))
    rows, records = [], []
    pooled = 0
    for u in range(n):
        kind = rng.choice(["normal", "normal", "lt", "small"])
        if kind == "small":  # 1..k-1 records, mostly generalised to the area class
            s = int(rng.integers(0, 2))
            p = int(rng.integers(1 - s, K - s))
            released = int(rng.integers(0, K - s - p))
        else:
            s = int(rng.integers(1, K)) if kind == "lt" else int(rng.choice([0, K + 1]))
            p = int(rng.integers(0, 2 if shifts else 3))
            released = int(rng.integers(K, K + 2 if shifts else 12))
        if pooled + p > 6:
            p = 0 if kind != "small" or s else p
        pooled += p
        rows.append(
            {
                "unit": f"u{u}",
                "released": released,
                "suppressed": LT_K if 0 < s < K else s,
                "generalised_up": None,
                "synthetic": 0,
                "class_records": 0,
            }
        )
        records.append(released + s + p)
    n_input = sum(records) if rng.random() < 0.3 else None
    return rows, records, pooled, n_input


def _withhold(base: list, extra: tuple[int, ...]) -> list:
    return [WITHHELD if i in extra else b for i, b in enumerate(base)]


def _system(pooled: int, n_input: int | None, shifts: bool = False) -> dict:
    return {
        "global_suppressed": None,
        "own_subjects": True,
        "pooled_records": pooled,
        "pooled_synthetic_max": 0,
        "groups_by_majority_unit": shifts,
        "total_records": n_input,
    }


@pytest.mark.parametrize(
    ("shifts", "seed", "cases", "at_least"),
    [(False, 15, 40, (25, 4)), (True, 16, 30, (20, 3))],
    ids=["groups-by-members", "groups-counted-whole"],
)
def test_chosen_totals_protect_every_small_figure_with_the_fewest_secondaries(
    shifts, seed, cases, at_least
) -> None:
    from geokanon.complementary import choose_complementary_totals

    rng = np.random.default_rng(seed)
    needed = compared = 0
    for _ in range(cases):
        rows, records, pooled, n_input = _table(rng, shifts)
        chosen = choose_complementary_totals(
            rows, records, records, k=K, system=_system(pooled, n_input, shifts)
        )
        totals = list(chosen.totals)
        base = [
            LT_K if records[i] < K else WITHHELD if r["suppressed"] == LT_K else records[i]
            for i, r in enumerate(rows)
        ]
        # primaries as documented; a secondary only ever withholds a published total
        assert all(
            t == b or (t == WITHHELD and isinstance(b, int))
            for t, b in zip(totals, base, strict=True)
        )
        assert chosen.primary == sum(not isinstance(b, int) for b in base)
        assert chosen.secondary == sum(t != b for t, b in zip(totals, base, strict=True))
        candidates = [i for i, b in enumerate(base) if isinstance(b, int)]
        all_hidden = [WITHHELD if i in candidates else b for i, b in enumerate(base)]
        if not _safe(rows, all_hidden, pooled, K, n_input, shifts):
            # the hole is not in the totals (e.g. one '<k' unit and a published input
            # size): every total is withheld, as --totals released would publish
            assert totals == all_hidden
            continue
        assert _safe(rows, totals, pooled, K, n_input, shifts), (rows, records, pooled, totals)
        # the fewest withheld totals that protect every '<k' figure, by brute force
        fewest = next(
            size
            for size in range(len(candidates) + 1)
            if any(
                _safe(rows, _withhold(base, extra), pooled, K, n_input, shifts)
                for extra in itertools.combinations(candidates, size)
            )
        )
        assert chosen.secondary == fewest, (rows, records, pooled, n_input, totals)
        needed += fewest > 0
        compared += 1
    assert compared >= at_least[0] and needed >= at_least[1]  # secondaries are exercised


def test_a_lone_small_unit_needs_a_secondary_with_enough_room() -> None:
    from geokanon.complementary import choose_complementary_totals

    # a: 3 people, all generalised (0 released); b sent 1 record to the area class of 4,
    # c none. With b and c published a is 4 - 1 = 3; c's total cannot help (it leaves a
    # in 1..3); b's can.
    rows = [
        {"unit": u, "released": rel, "suppressed": 0, "synthetic": 0, "class_records": 0}
        for u, rel in (("a", 0), ("b", 20), ("c", 12))
    ]
    system = {**_system(4, None), "global_suppressed": 0}
    chosen = choose_complementary_totals(rows, [3, 21, 12], [3, 21, 12], k=5, system=system)
    assert chosen.totals == (LT_K, WITHHELD, 12)
    assert (chosen.primary, chosen.secondary) == (1, 1)
    assert _safe(rows, list(chosen.totals), 4, 5, None)
    assert not _safe(rows, [LT_K, 21, WITHHELD], 4, 5, None)


# ---- whole releases ---------------------------------------------------------------------


def _scene(small_unit: bool, suppressed_unit: bool) -> pd.DataFrame:
    """Towns A and B; C: 3 dwellings inside A's groups (a unit of 1..k-1 subjects, counted
    in A's groups); D: a village with 2 isolated farms, suppressed ('<k')."""
    rng = np.random.default_rng(11)
    east, north = np.array([3000.0, 0.0]), np.array([0.0, 6000.0])
    parts = [(rng.normal(0, 30, (60, 2)), "A"), (rng.normal(0, 30, (40, 2)) + east, "B")]
    c = (rng.normal(0, 30, (3, 2)), "C")
    if small_unit:
        parts.append(c)
    if suppressed_unit:
        parts.append((rng.normal(0, 30, (30, 2)) + north, "D"))
        parts.append((np.array([[0.0, 20000.0], [20000.0, 20000.0]]), "D"))
    xy = np.concatenate([p for p, _ in parts])
    unit = np.concatenate([[u] * len(p) for p, u in parts])
    return pd.DataFrame(
        {"x": (155_000 + xy[:, 0]).round(1), "y": (463_000 + xy[:, 1]).round(1), "unit": unit}
    )


def _release(tmp_path: Path, frame: pd.DataFrame) -> tuple[int, Path, Path]:
    src = tmp_path / "points.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(
            [
                "release", str(src), "--k", "5", "--r-max", "200", "--unit", "unit",
                "--crs", "EPSG:28992", "--tau", "0.05", "--unit-cap", "1.0",
                "--totals", "complementary", "--out", str(out),
            ]
        )  # fmt: skip
    return code, out, src


def _units(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "release" / "units.csv", dtype=str).set_index("unit")


def test_complementary_release_with_a_small_suppressed_unit_passes_holes(tmp_path) -> None:
    # D's suppressed reads '<k'; its withheld total owes nothing (before: exit 4, the
    # total was known to lie in 4 values)
    code, out, src = _release(tmp_path, _scene(small_unit=False, suppressed_unit=True))
    assert code == 0
    units = _units(out)
    assert units.loc["D", "suppressed"] == LT_K
    assert units.loc["D", "source_total"] == WITHHELD
    assert units.loc["A", "source_total"] == "60" and units.loc["B", "source_total"] == "40"
    report = verify_release(out, source=src)
    assert report.passed and report["holes"].passed


def test_secondary_total_of_a_small_unit_is_needed(tmp_path) -> None:
    # C (3 dwellings counted in A's groups) publishes '<k'; with A's and B's totals both
    # published the group shifts would give C exactly 3, so one of them is withheld
    code, out, src = _release(tmp_path, _scene(small_unit=True, suppressed_unit=False))
    assert code == 0
    units = _units(out)
    assert units.loc["C", "source_total"] == LT_K
    secondary = [u for u in ("A", "B") if units.loc[u, "source_total"] == WITHHELD]
    assert secondary == ["B"]  # the one with fewer records
    report = verify_release(out, source=src)
    assert report.passed, report["holes"].detail
    assert "1 withheld figures owe nothing" in report["holes"].detail
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "for the other units whose total reads `withheld`: those are withheld only" in notes

    # tampered: the needed secondary total published again (checksums recomputed)
    true_b = int((pd.read_csv(src)["unit"] == "B").sum())

    def publish_b(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "B", "source_total"] = str(true_b)
        return f

    edit_csv(out, "units.csv", publish_b)
    report = verify_release(out, source=src)
    assert not report["holes"].passed
    assert "unit C source_total: '<k' narrowed to [3, 3]" in report["holes"].detail
    assert report["manifest"].passed and report["counts"].passed


@pytest.mark.parametrize("published", ["3", WITHHELD])
def test_small_unit_total_must_read_lt_k(tmp_path, published) -> None:
    code, out, src = _release(tmp_path, _scene(small_unit=True, suppressed_unit=True))
    assert code == 0

    def show_c(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["unit"] == "C", "source_total"] = published
        return f

    edit_csv(out, "units.csv", show_c)
    report = verify_release(out, source=src)
    assert "1 source totals rest on 1..k-1 subjects and do not read <k" in (
        report["report_safety"].detail
    )


# ---- the verifier: every value, in integers -------------------------------------------


def test_every_value_of_every_lt_k_cell_is_solved_for_in_integers(monkeypatch) -> None:
    import geokanon.verify.holes as V

    rows = [
        {"unit": f"u{i}", "released": 10, "suppressed": LT_K, "source_total": WITHHELD}
        for i in range(4)
    ] + [{"unit": "v", "released": 10, "suppressed": 0, "source_total": 10}]
    # no program for single values: the aggregate ones (sums, and the cells as near
    # each of 2..k-2 as they can be together) reach every value of every cell
    monkeypatch.setattr(V, "INTEGER_CHECK_MAX", 0)
    ranges = V.hidden_ranges(rows, k=6, global_suppressed=None, own_subjects=True, exact=False)
    cells = [h for h in ranges if h.kind == LT_K]
    assert len(cells) == 4
    assert all(h.unsolved == 0 and not h.gaps and h.problem(6) is None for h in cells)
    assert "(in integers) given the 5 unit rows" in V.holes_summary(ranges, 6, len(rows))
    # a published input size: 4 cells summing to 8 in 1..5 each still let each take every
    # value; a sum of 7 lets none reach 5
    for total, safe in ((8 + 40, True), (7 + 40, False)):
        ranges = V.hidden_ranges(
            rows, k=6, global_suppressed=None, own_subjects=True, exact=False,
            total_records=total + 10,
        )  # fmt: skip
        assert all(h.problem(6) is None for h in ranges if h.kind == LT_K) is safe


def test_an_integer_gap_fails_the_cell() -> None:
    from geokanon.verify import HiddenRange

    h = HiddenRange("unit a suppressed", LT_K, 1.0, 4.0, gaps=(2,))
    assert h.problem(5) == "unit a suppressed: '<k' cannot be 2 in integers"
    assert HiddenRange("unit a source_total", WITHHELD, 3.0, 3.0).problem(5) is None


def test_a_sensitive_count_published_as_withheld_fails_counts(tmp_path) -> None:
    # 'withheld' owes nothing in `holes`, so a count of 1..k-1 must read '<k'
    from tests.release_fixtures import minimal_scene, write_release

    w = write_release(tmp_path / "out", minimal_scene())
    assert verify_release(w.root, source=w.source).passed

    def withhold(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f["suppressed"] == LT_K, "suppressed"] = WITHHELD
        return f

    edit_csv(w.root, "units.csv", withhold)
    report = verify_release(w.root, source=w.source)
    assert not report["counts"].passed
    assert "units publish a wrong suppressed count" in report["counts"].detail

"""The verifier's checks run in two lanes side by side: their results must not depend on it.

:func:`geokanon.verify.verify_release` runs :data:`geokanon.verify._results.LANES` in two
threads over one reader, whose values are computed once per object
(:mod:`geokanon.verify._once`), and the records pass feeds ``no_leak``'s scan of
``records.parquet`` as it reads the file. Here: the reader's values are computed once
and never wait for another value of another object (Python 3.11's
``functools.cached_property`` holds one lock per property for every instance, so two
threads taking values in opposite orders could wait for each other forever); the
report, its details and the progress are those of one lane, on releases with leaks and
tampering planted; and ``no_leak``'s findings in ``records.parquet`` from the records
pass's read are those of a scan of its own.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import geokanon.verify.leak_rules as leak_rules_module
from geokanon.verify import CHECKS, _results, format_report, verify_release
from geokanon.verify._once import cached, once
from tests.unit.test_verify_batches import PLANTS, _plant, _records_csv, built  # noqa: F401


def test_a_value_is_computed_once_and_a_waiter_takes_it() -> None:
    class Slow:
        def __init__(self) -> None:
            self.calls = 0

        @cached
        def value(self) -> int:
            self.calls += 1
            time.sleep(0.2)
            return 7 * self.calls

    box = Slow()
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(box.value)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got == [7, 7, 7, 7] and box.calls == 1
    assert box.__dict__["value"] == 7  # kept where functools.cached_property keeps it


def test_values_taken_in_opposite_orders_do_not_wait_for_each_other() -> None:
    """Thread 1 computes ``a`` of one object, which needs ``b`` of a second; thread 2
    computes ``b`` of a third, which needs ``a`` of a fourth. With one lock per property
    for every object, each would hold the lock the other waits for."""
    both_inside = threading.Barrier(2, timeout=5)

    class Node:
        def __init__(self, other: Node | None = None) -> None:
            self.other = other

        @cached
        def a(self) -> str:
            if self.other is not None:
                both_inside.wait()
                return "a" + self.other.b
            return "a"

        @cached
        def b(self) -> str:
            if self.other is not None:
                both_inside.wait()
                return "b" + self.other.a
            return "b"

    one, three = Node(Node()), Node(Node())
    got: dict[str, str] = {}
    t1 = threading.Thread(target=lambda: got.update(first=one.a), daemon=True)
    t2 = threading.Thread(target=lambda: got.update(second=three.b), daemon=True)
    t1.start()
    t2.start()
    t1.join(10)
    t2.join(10)
    assert not t1.is_alive() and not t2.is_alive(), "two values waited for each other"
    assert got == {"first": "ab", "second": "ba"}


def test_a_value_that_raises_leaves_nothing_and_is_computed_again() -> None:
    box = type("Box", (), {})()
    calls = []

    def fail() -> int:
        calls.append(1)
        raise ValueError("unreadable")

    for _ in range(2):
        with pytest.raises(ValueError):
            once(box, "value", fail)
    assert len(calls) == 2 and "value" not in box.__dict__
    assert once(box, "value", lambda: 3) == 3 == once(box, "value", fail)


def _planted(
    kind: str,
    built: tuple[Path, Path, pd.DataFrame],  # noqa: F811
    tmp_path: Path,
) -> tuple[Path, Path]:
    """(a copy of the built release with ``kind`` planted, its source file)."""
    root, source, src = built
    rel = tmp_path / "rel"
    shutil.copytree(root, rel)
    _plant(kind, rel, src)
    return rel, source


def _one_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_results, "LANES", None)


@pytest.mark.parametrize("kind", PLANTS)
def test_lanes_give_the_report_of_one_lane(
    kind: str,
    built: tuple[Path, Path, pd.DataFrame],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rel, source = _planted(kind, built, tmp_path)
    if kind == "none":  # and a records.csv row that is not records.parquet's
        _records_csv(rel, lambda f: pd.concat([f, f.iloc[[3]]], ignore_index=True))
    started: list[tuple[str, str]] = []

    def progress(name: str, **_: object) -> None:
        started.append((name, threading.current_thread().name))

    lanes = verify_release(rel, source=source, progress=progress)
    _one_lane(monkeypatch)
    alone = verify_release(rel, source=source)
    assert format_report(lanes) == format_report(alone)
    assert [c.name for c in lanes.checks] == list(CHECKS)
    assert not lanes.passed  # a leak planted, or a row added: some check fails
    # the progress names the source's read, then every check in order, from this thread
    here = threading.current_thread().name
    assert started == [("source", here)] + [(name, here) for name in CHECKS]


@pytest.mark.parametrize("kind", PLANTS)
def test_records_parquet_read_once_reports_as_its_own_scan(
    kind: str,
    built: tuple[Path, Path, pd.DataFrame],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rel, source = _planted(kind, built, tmp_path)
    scanned: list[str] = []
    own_scan = leak_rules_module.scan_parquet

    def counted(path: Path, sec: leak_rules_module.Secrets, *rest: object) -> list[str]:
        scanned.append(path.name)
        return own_scan(path, sec, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(leak_rules_module, "scan_parquet", counted)
    shared = verify_release(rel, source=source)["no_leak"]
    assert "records.parquet" not in scanned  # the records pass's read served no_leak
    scanned.clear()
    alone = verify_release(rel, source=source, checks=["no_leak"])["no_leak"]
    assert "records.parquet" in scanned  # no records pass: no_leak read the file itself
    assert (shared.passed, shared.detail) == (alone.passed, alone.detail)
    assert shared.passed is (kind == "none")


def test_the_audit_lane_counts_ahead_for_counts_and_a_failure_there_is_the_checks(
    built: tuple[Path, Path, pd.DataFrame],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``counts``' tallies of the audit are worked out in the lane that starts with
    ``k_subjects``, after its checks (``LANE_TAILS``); the report is the same as without,
    and a tally that raises there is left to ``counts``, which meets it itself."""
    import geokanon.verify as verify_module
    import geokanon.verify._results as results_module

    rel, source = _planted("none", built, tmp_path)
    seen: list[tuple[str, list[str]]] = []
    ran: list[tuple[str, str]] = []
    real_run_one = results_module._run_one
    real_warm = verify_module._WARMS["counts"]

    def run_one(funcs: object, reader: object, name: str) -> object:
        ran.append((name, threading.current_thread().name))
        return real_run_one(funcs, reader, name)  # type: ignore[arg-type]

    def warm(reader: object) -> None:
        here = threading.current_thread().name
        seen.append((here, [n for n, t in ran if t == here]))
        real_warm(reader)  # type: ignore[arg-type]

    monkeypatch.setattr(results_module, "_run_one", run_one)
    monkeypatch.setitem(verify_module._WARMS, "counts", warm)
    ahead = verify_release(rel, source=source)
    lane_checks = [n for n in results_module.LANES[0] if n in CHECKS]  # type: ignore[index]
    assert seen == [(seen[0][0], lane_checks)]  # once, in that lane, after its checks
    assert ahead["counts"].passed

    def broken(reader: object) -> None:
        raise RuntimeError("a tally failed")

    monkeypatch.setitem(verify_module._WARMS, "counts", broken)
    assert format_report(verify_release(rel, source=source)) == format_report(ahead)
    # without counts among the checks nothing is counted ahead
    seen.clear()
    monkeypatch.setitem(verify_module._WARMS, "counts", warm)
    verify_release(rel, source=source, checks=["k_subjects", "no_leak"])
    assert seen == []

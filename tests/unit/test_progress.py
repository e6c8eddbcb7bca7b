"""Issue 16, item 7: progress a person can follow.

Plain lines name every stage and step with its seconds when stderr is not a terminal;
on a terminal a ``rich`` live display shows a bar per stage with elapsed time and ETA;
a warning, a refusal note or the error line never lands inside a progress line;
``--quiet`` shows no progress; count updates are throttled; the core imports no ``rich``.
"""

from __future__ import annotations

import ast
import io
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geokanon.cli import main
from geokanon.verify import CHECKS
from tests.conftest import ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
SECONDS = r"\d+\.\d s"


def _points(tmp_path: Path, *, isolated: int = 0) -> Path:
    """Clusters of people 10 m apart (a release passes), plus ``isolated`` far-off ones."""
    rng = np.random.default_rng(3)
    centres = [(155_000.0 + 2_000 * i, 463_000.0) for i in range(6)]
    xs, ys = [], []
    for cx, cy in centres:
        xs.append(cx + rng.uniform(-40, 40, 30))
        ys.append(cy + rng.uniform(-40, 40, 30))
    xs.append(150_000.0 + 5_000 * np.arange(isolated))
    ys.append(np.full(isolated, 470_000.0))
    x, y = np.concatenate(xs), np.concatenate(ys)
    frame = pd.DataFrame(
        {"x": x, "y": y, "person": [f"P{i:04d}" for i in range(x.size)], "gm": "GM0001"}
    )
    path = tmp_path / "points.csv"
    frame.to_csv(path, index=False)
    return path


def _release_args(src: Path, out: Path, *extra: str) -> list[str]:
    return [
        "release", str(src), "--crs", "EPSG:28992", "--k", "3", "--r-max", "100",
        "--subject", "person", "--unit", "gm", "--out", str(out), *extra,
    ]  # fmt: skip


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (what rich sees on a real one)."""

    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """Make stderr a terminal; called in the test's body (pytest resets sys.stderr after setup)."""
    screen = _Terminal()
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys, "stderr", screen)
    return screen


def _segments(raw: str) -> list[str]:
    """What the screen shows, split where the cursor goes back to a line's start."""
    return [s for s in re.split(r"[\r\n]", ANSI.sub("", raw)) if s.strip()]


# ---- (a) plain lines when stderr is not a terminal ------------------------------------


def test_plain_lines_name_every_stage_and_step_with_seconds(tmp_path, capsys):
    src = _points(tmp_path)
    assert main(_release_args(src, tmp_path / "out")) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert all(line.startswith("geokanon: ") for line in lines), err
    for stage in ("read", "release core", "write", "report", "verify", "rename"):
        assert f"geokanon: {stage} ..." in lines, stage
        assert re.search(rf"^geokanon: {stage} done: {SECONDS} \(elapsed {SECONDS}\)$", err, re.M)
    steps = [
        "checksum", "rows", "classify pass 1", "group pass 1", "generalise and suppress",
        "records", "groups and classes", "units", "audit", "bias and release notes",
        "read release", "displacements and diameters", "units and map", "charts and page",
        *[c for c in CHECKS if c != "deterministic"],
    ]  # fmt: skip
    for step in steps:
        assert re.search(rf"^geokanon:   {re.escape(step)}( \([^)]*\))?: {SECONDS}$", err, re.M), (
            step
        )
    # the rows read are counted on their line
    assert re.search(rf"^geokanon:   rows \(180 of 180, 100 %\): {SECONDS}$", err, re.M), err


def test_plain_lines_of_verify_name_each_check(tmp_path, capsys):
    src = _points(tmp_path)
    out = tmp_path / "out"
    assert main(["--quiet", *_release_args(src, out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(out), "--source", str(src)]) == 0
    err = capsys.readouterr().err
    assert "geokanon: verify ..." in err
    for check in (c for c in CHECKS if c != "deterministic"):
        assert re.search(rf"^geokanon:   {check}: {SECONDS}$", err, re.M), check


def test_long_step_prints_a_count_line_at_most_every_10_seconds():
    from geokanon._display import LineDisplay

    now = [0.0]
    stream = io.StringIO()
    display = LineDisplay(stream, clock=lambda: now[0])
    for i in range(10_001):  # 100 s of updates, one every 10 ms
        now[0] = i / 100
        display("read", "rows", done=i, total=10_000)
    display.close()
    counts = [ln for ln in stream.getvalue().splitlines() if " after " in ln]
    assert 9 <= len(counts) <= 10
    assert counts[0] == "geokanon:   rows: 1,000 of 10,000, 10 % after 10.0 s"


# ---- (b) a live display on a terminal --------------------------------------------------


def test_terminal_shows_a_bar_per_stage_with_elapsed_and_eta(tmp_path, monkeypatch):
    src = _points(tmp_path)
    terminal = _terminal(monkeypatch)
    assert main(_release_args(src, tmp_path / "out")) == 0
    shown = _segments(terminal.getvalue())
    finals: dict[str, str] = {}
    for seg in shown:  # the last drawing of each stage's row
        m = re.match(r"^\S\s+(read|release core|write|verify|report|rename)\s", seg)
        if m:
            finals[m.group(1)] = seg
    assert set(finals) == {"read", "release core", "write", "report", "verify", "rename"}
    for row in finals.values():
        assert "━" in row and "100%" in row  # a bar, full once the stage is done
        assert re.search(r"elapsed \d+:\d\d:\d\d", row) and re.search(r"eta \d+:\d\d:\d\d", row)
        assert row.startswith("✓")
    assert not any(seg.startswith("geokanon: release core ...") for seg in shown)  # no old lines


def test_cli_under_a_real_terminal_draws_the_bars(tmp_path):
    """The command run as a person runs it: stderr a pseudo-terminal, stdout a pipe."""
    import os
    import select
    import subprocess

    src = _points(tmp_path)
    master, slave = os.openpty()
    import geokanon

    package_root = str(Path(geokanon.__file__).parents[1])  # the geokanon under test
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "140", "PYTHONPATH": package_root}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "geokanon", *_release_args(src, tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    os.close(slave)
    screen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert b"release written to" in out and b"\x1b" not in out  # results stay plain on stdout
    shown = _segments(screen.decode("utf-8", "replace"))
    rows = [s for s in shown if re.match(r"^✓\s+(read|release core|verify|rename)\s", s)]
    assert {r.split()[1] for r in rows} >= {"read", "release", "verify", "rename"}
    assert all("━" in r and re.search(r"eta \d+:\d\d:\d\d", r) for r in rows)


def test_live_display_shows_the_running_step_and_an_eta_of_a_counted_stage():
    from rich.console import Console

    from geokanon._display import LiveDisplay

    screen = io.StringIO()
    now = [0.0]  # a clock the test moves: rich estimates the speed from the counts' times
    display = LiveDisplay(
        Console(file=screen, force_terminal=True, width=140), clock=lambda: now[0]
    )
    display("verify")
    for i, check in enumerate(["k_subjects", "extent", "no_leak"]):
        now[0] += 1.0
        display("verify", check, done=i, total=4)
    display._bars.refresh()
    live = _segments(screen.getvalue())
    display.close()
    row = [s for s in live if "verify" in s][-1]
    assert "no_leak" in row and "50%" in row and re.search(r"eta \d+:\d\d:\d\d", row)


# ---- (c) messages never land inside a progress line ------------------------------------


@pytest.mark.parametrize("where", ["terminal", "plain"])
def test_refusal_and_error_lines_start_a_line_of_their_own(tmp_path, where, monkeypatch, capsys):
    screen = _terminal(monkeypatch) if where == "terminal" else None
    src = _points(tmp_path, isolated=3)  # 3 of 183 records must be suppressed: over tau
    code = main(_release_args(src, tmp_path / "out", "--tau", "0.001"))
    assert code == 3
    raw = screen.getvalue() if screen is not None else capsys.readouterr().err
    shown = _segments(raw)
    notes = [s for s in shown if "refusal report:" in s]
    errors = [s for s in shown if "error:" in s]
    assert notes and errors
    assert all(s.startswith("geokanon: refusal report:") for s in notes), notes
    assert all(s.startswith("geokanon: error:") for s in errors), errors


def test_warning_during_a_live_run_prints_above_the_bars(tmp_path, monkeypatch):
    terminal = _terminal(monkeypatch)
    src = _points(tmp_path)
    frame = pd.read_csv(src)
    pd.concat([frame, frame.iloc[:3]]).to_csv(src, index=False)  # exact copies: a warning
    assert main(_release_args(src, tmp_path / "out")) == 0
    warned = [s for s in _segments(terminal.getvalue()) if "warning:" in s]
    assert warned and all(s.startswith("geokanon: warning:") for s in warned), warned


# ---- (d) --quiet ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["terminal", "plain"])
def test_quiet_shows_no_progress(tmp_path, where, monkeypatch, capsys):
    screen = _terminal(monkeypatch) if where == "terminal" else None
    src = _points(tmp_path, isolated=3)
    assert main(["--quiet", *_release_args(src, tmp_path / "out", "--tau", "0.001")]) == 3
    err = screen.getvalue() if screen is not None else capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(
        ln.startswith(("geokanon: error:", "geokanon: warning:", "geokanon: refusal report:"))
        or ln.startswith("  geokanon ")  # the suggested command's continuation line
        for ln in lines
    ), err
    assert "━" not in err and "\x1b" not in err and " done: " not in err


# ---- overhead and layering --------------------------------------------------------------


def test_count_updates_are_throttled(monkeypatch):
    from rich.console import Console

    from geokanon._display import LiveDisplay

    display = LiveDisplay(Console(file=io.StringIO(), force_terminal=True, width=100))
    calls = []
    real = display._bars.update
    monkeypatch.setattr(display._bars, "update", lambda *a, **kw: (calls.append(1), real(*a, **kw)))
    display("write")
    for i in range(50_000):
        display("write", "records", done=i, total=50_000)
    display.close()
    assert len(calls) < 100  # a few per 0.1 s, not one per call


def test_only_the_display_imports_rich() -> None:
    users = []
    for path in (ROOT / "src" / "geokanon").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "rich" or n.startswith("rich.") for n in names):
                users.append(path.name)
    assert set(users) == {"_display.py"}

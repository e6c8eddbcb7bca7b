"""What the command line shows on stderr while it works: the edge that renders progress.

Three displays take the calls of :class:`geokanon._progress.Progress`:

- :class:`LiveDisplay` on a terminal: a ``rich`` live display, one bar per stage with
  the step running now, elapsed time and (where the stage has a count) an ETA.
  Warnings and messages are printed through its console, above the bars, never
  inside them.
- :class:`LineDisplay` when stderr is not a terminal (a log, CI): plain lines, one
  when a stage starts, one per finished step and one per finished stage, each with
  its elapsed seconds; a count line at most every 10 seconds of a long step.
- :class:`QuietDisplay` for ``--quiet``: no progress at all; warnings still show.

Only the command line imports this module (``rich`` is a dependency of the edge).
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO, cast

__all__ = ["LineDisplay", "LiveDisplay", "QuietDisplay", "open_display"]


class QuietDisplay:
    """No progress; messages (warnings) still go to ``stream``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(
        self,
        stage: str,
        step: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None:
        return None

    def message(self, text: str) -> None:
        """Print one message line (a warning, a note) where it cannot break a progress line."""
        print(text, file=self.stream, flush=True)

    def __enter__(self) -> QuietDisplay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(failed=kind is not None)

    def close(self, failed: bool = False) -> None:
        """End the display: the last stage is finished (or, ``failed``, stopped)."""


def _count(done: int, total: int | None) -> str:
    if total is None or total <= 0:
        return f"{done:,}"
    return f"{done:,} of {total:,}, {100 * done / total:.0f} %"


class LineDisplay(QuietDisplay):
    """Plain progress lines with elapsed seconds (stderr is not a terminal).

    Every line is whole (it ends with a newline), so a warning or an error printed
    between two of them never lands inside one.
    """

    COUNT_EVERY_S = 10.0

    def __init__(self, stream: TextIO | None = None, clock: Any = time.monotonic) -> None:
        super().__init__(stream)
        self._clock = clock
        self._t0 = clock()
        self._stage: str | None = None
        self._stage_t = 0.0
        self._step: str | None = None
        self._step_t = 0.0
        self._said_t = 0.0
        self._done: int | None = None
        self._total: int | None = None
        self._step_done: int | None = None  # the count when the step started

    def _line(self, text: str) -> None:
        print(f"geokanon: {text}", file=self.stream, flush=True)

    def _end_step(self, now: float) -> None:
        if self._step is not None:
            what = self._step
            if self._done is not None and self._done != self._step_done:  # counted here
                what += f" ({_count(self._done, self._total)})"
            self._line(f"  {what}: {now - self._step_t:.1f} s")
        self._step = None

    def _end_stage(self, now: float, failed: bool = False) -> None:
        self._end_step(now)
        if self._stage is not None:
            how = "stopped" if failed else "done"
            self._line(
                f"{self._stage} {how}: {now - self._stage_t:.1f} s (elapsed {now - self._t0:.1f} s)"
            )
        self._stage = None

    def __call__(
        self,
        stage: str,
        step: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None:
        now = self._clock()
        if stage != self._stage:
            self._end_stage(now)
            self._stage, self._stage_t = stage, now
            self._done = self._total = None
            self._line(f"{stage} ...")
        if step is not None and step != self._step:
            self._end_step(now)
            self._step, self._step_t, self._said_t = step, now, now
            self._step_done = done if done is not None else self._done
        if done is not None:
            self._done, self._total = done, total
            if now - self._said_t >= self.COUNT_EVERY_S:
                self._said_t = now
                label = self._step or self._stage
                self._line(f"  {label}: {_count(done, total)} after {now - self._step_t:.1f} s")

    def close(self, failed: bool = False) -> None:
        self._end_stage(self._clock(), failed)


class LiveDisplay(QuietDisplay):
    """A ``rich`` live display on a terminal: a bar per stage, its step, elapsed and ETA.

    Updates of a count are throttled (at most ten a second); the display redraws
    itself four times a second in a thread of its own.
    """

    MIN_UPDATE_S = 0.1

    def __init__(self, console: Any = None, clock: Any = time.monotonic) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console if console is not None else Console(file=sys.stderr)
        super().__init__(cast(TextIO, self.console.file))
        self._bars = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("{task.description:<20}"),
            BarColumn(bar_width=30),
            TaskProgressColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("[dim]{task.fields[step]}"),
            console=self.console,
            get_time=clock,
            refresh_per_second=4,
            # stdout is the same screen only when it is a terminal too
            redirect_stdout=sys.stdout.isatty(),
            redirect_stderr=True,
        )
        self._task: Any = None
        self._stage: str | None = None
        self._step: str | None = None
        self._clock = clock
        self._last = 0.0
        self._started = False

    def _start(self) -> None:
        if not self._started:
            self._bars.start()
            self._started = True

    def _finish_stage(self, failed: bool = False) -> None:
        if self._task is not None:
            if failed:
                self._bars.update(self._task, step="[red]stopped")
            else:
                task = next(t for t in self._bars.tasks if t.id == self._task)
                total = task.total if task.total is not None else 1
                self._bars.update(self._task, total=total, completed=total, step="")
            self._bars.stop_task(self._task)
        self._task = None

    def __call__(
        self,
        stage: str,
        step: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None:
        now = self._clock()
        if stage != self._stage:
            self._start()
            self._finish_stage()
            self._stage, self._step = stage, None
            self._task = self._bars.add_task(stage, total=None, step="")
        elif step == self._step and now - self._last < self.MIN_UPDATE_S:
            return  # a count update in a tight loop: throttled
        self._last = now
        fields: dict[str, Any] = {}
        if step is not None and step != self._step:
            self._step = step
            fields["step"] = step
        if done is not None:
            fields["completed"] = done
            if total is not None:
                fields["total"] = total
        if fields:
            self._bars.update(self._task, **fields)

    def message(self, text: str) -> None:
        """Print above the live bars (rich keeps the bars below)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self, failed: bool = False) -> None:
        if self._started:
            self._finish_stage(failed)
            self._bars.stop()
            self._started = False


def open_display(*, quiet: bool, stream: TextIO | None = None) -> QuietDisplay:
    """The display for a command: quiet, plain lines, or live bars on a terminal.

    Parameters
    ----------
    quiet
        ``--quiet``: no progress.
    stream
        Where the display writes (default ``sys.stderr``).

    Returns
    -------
    QuietDisplay
        Callable as a :class:`geokanon._progress.Progress`; use it as a context
        manager so that the last stage is closed.
    """
    stream = stream if stream is not None else sys.stderr
    if quiet:
        return QuietDisplay(stream)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        from rich.console import Console

        return LiveDisplay(Console(file=stream))
    return LineDisplay(stream)

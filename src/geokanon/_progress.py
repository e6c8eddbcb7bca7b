"""The progress protocol the library reports through (it never prints).

A long-running function takes ``progress: Progress | None`` and calls it as work
moves on::

    progress(stage)                          # a stage starts (a bar of its own)
    progress(stage, step)                    # a sub-step of the stage starts
    progress(stage, step, done=i, total=n)   # the stage is i of n units through

``done``/``total`` always measure the stage (rows read, rows written, checks run),
whatever step is named, so a display can show one bar and an ETA per stage. A
function that is itself one stage of its caller reports its own steps as stages:
the caller nests it with :func:`within`, which turns ``p(step, done=..)`` into
``progress(stage, step, done=..)``. Calls are cheap to make often; the displays
throttle (see ``geokanon._display``, the command line's renderer). This module
imports nothing heavy: the core reports, the edge renders.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Progress", "silent", "within"]


class Progress(Protocol):
    """A progress callback (see the module docstring)."""

    def __call__(
        self,
        stage: str,
        step: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None: ...


def silent(
    stage: str, step: str | None = None, *, done: int | None = None, total: int | None = None
) -> None:
    """A :class:`Progress` that reports nothing (for code that always calls one)."""


class _Within:
    """``progress`` seen from inside one of its stages: stages reported here are steps."""

    __slots__ = ("_progress", "_stage")

    def __init__(self, progress: Progress, stage: str) -> None:
        self._progress = progress
        self._stage = stage

    def __call__(
        self,
        stage: str,
        step: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None:
        name = stage if step is None else f"{stage}: {step}"
        self._progress(self._stage, name, done=done, total=total)


def within(progress: Progress | None, stage: str) -> Progress | None:
    """Start ``stage`` on ``progress`` and return the callback its steps report to.

    Parameters
    ----------
    progress
        The caller's callback, or ``None`` (then ``None`` is returned and nothing is
        reported).
    stage
        The stage the nested function's work belongs to.

    Returns
    -------
    Progress or None
        A callback whose ``p(step, done=i, total=n)`` reports
        ``progress(stage, step, done=i, total=n)``.

    Examples
    --------
    >>> seen = []
    >>> p = within(lambda *a, **kw: seen.append((a, kw)), "verify")
    >>> p("extent", done=3, total=20)
    >>> seen[-1]
    (('verify', 'extent'), {'done': 3, 'total': 20})
    """
    if progress is None:
        return None
    progress(stage)
    return _Within(progress, stage)

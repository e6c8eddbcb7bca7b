"""Exception and warning hierarchy.

One base class, :class:`GeokanonError`; each concrete error also inherits the
built-in it resembles, so callers can catch either (``except ValueError``
catches bad input as well as ``except InputError`` does).

Messages name the rule, the figures and the fix. They never contain a raw
coordinate, a subject id, a timestamp or a source row's values: only counts,
shares, parameter values and administrative unit ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class GeokanonError(Exception):
    """Base class of every error geokanon raises on purpose."""

    exit_code: int = 1


class InputError(GeokanonError, ValueError):
    """Bad data or options: the input or a parameter must change (exit code 2)."""

    exit_code = 2


class ReleaseRefused(GeokanonError, RuntimeError):
    """The release breaks a cap or cannot be made; nothing was written (exit code 3).

    Parameters
    ----------
    message
        The diagnosis in plain words: the rule, the figures, the units, the fix.
    figures
        Machine-readable figures behind the refusal (shares, unit ids, what-ifs).
    """

    exit_code = 3

    def __init__(self, message: str, figures: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.figures: dict[str, Any] = dict(figures or {})


class Unsatisfiable(ReleaseRefused):
    """The fixed point was not reached within the pass limit (exit code 3)."""


class VerificationFailed(GeokanonError, RuntimeError):
    """An independent check of a release failed (exit code 4).

    Parameters
    ----------
    message
        Which checks failed and why.
    results
        Check name -> passed.
    """

    exit_code = 4

    def __init__(self, message: str, results: Mapping[str, bool] | None = None) -> None:
        super().__init__(message)
        self.results: dict[str, bool] = dict(results or {})


class WriteError(GeokanonError, OSError):
    """The output could not be written: the filesystem refused (exit code 5).

    A read-only or full filesystem, a quota, a missing permission. The message names the
    directory and the system's error; the build was removed and an earlier release at
    that directory is unchanged.

    Parameters
    ----------
    message
        The directory, the system's error (``os.strerror``) and the fix.
    code
        The ``errno`` value, also in :attr:`errno`.
    """

    exit_code = 5

    def __init__(self, message: str, code: int | None = None) -> None:
        OSError.__init__(self, message)
        self.errno = code


class PrivacyRiskWarning(UserWarning):
    """A guarantee is weakened (for example suppression replaced or a tiny class published)."""


class ParameterWarning(UserWarning):
    """The parameters, not the points, look like the problem (many disposals)."""

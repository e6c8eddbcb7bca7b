"""The "did you mean" of every message about a column name that is not there."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest_name(name: str, names: Iterable[str]) -> str | None:
    """The name in ``names`` the user most likely meant by ``name``, or ``None``.

    A name equal but for case and surrounding spaces wins (``zip`` means ``ZIP``,
    even beside ``zipcode``); then the closest by :func:`difflib.get_close_matches`,
    compared without case.

    Examples
    --------
    >>> closest_name("zip", ["x", "y", "zipcode", "ZIP"])
    'ZIP'
    >>> closest_name("gm_cod", ["x", "GM_CODE"])
    'GM_CODE'
    >>> closest_name("age", ["x", "y"]) is None
    True
    """
    choices = [str(n) for n in names]
    folded: dict[str, str] = {}
    for c in choices:
        folded.setdefault(c.casefold().strip(), c)
    key = name.casefold().strip()
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(key, list(folded), n=1)
    return folded[close[0]] if close else None

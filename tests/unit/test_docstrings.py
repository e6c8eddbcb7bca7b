"""The runnable examples in the public docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib
import warnings

import pytest

MODULES = [
    "geokanon.policy",
    "geokanon.neighbours",
    "geokanon.classify",
    "geokanon.grouping",
    "geokanon.disposal",
    "geokanon.bias",
    "geokanon.release",
    "geokanon.pipeline",
    "geokanon.demo",
    "geokanon.io.read",
    "geokanon.projection",
    "geokanon.mask",
    "geokanon.sweep",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = doctest.testmod(
            module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        )
    assert result.failed == 0, f"{result.failed} docstring examples failed in {name}"

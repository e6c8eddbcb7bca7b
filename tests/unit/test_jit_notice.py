"""The first-run compile notice (``geokanon._jit``): said when numba's cache lacks the
kernels, not said once they are cached for this source."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from geokanon._jit import COMPILE_NOTE

_PROBE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import numba as nb
    from geokanon._jit import _cached
    import probe_kernel
    print("before", _cached(probe_kernel.f))
    if sys.argv[2] == "call":
        probe_kernel.f(1)
    print("after", _cached(probe_kernel.f))
    """
)


def _run(args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )


def test_cached_follows_the_index_and_the_source(tmp_path: Path) -> None:
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "probe_kernel.py").write_text(
        "import numba as nb\n\n@nb.njit(cache=True)\ndef f(x):\n    return x + 1\n"
    )
    cache = tmp_path / "cache"
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    first = _run([str(probe), str(mod), "call"], cache, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["before", "False", "after", "True"]
    again = _run([str(probe), str(mod), "look"], cache, tmp_path)
    assert again.stdout.split() == ["before", "True", "after", "True"]
    # new source (another version, another size): the index no longer matches it
    (mod / "probe_kernel.py").write_text(
        "import numba as nb\n\n@nb.njit(cache=True)\ndef f(x):\n    return x + 200\n"
    )
    changed = _run([str(probe), str(mod), "look"], cache, tmp_path)
    assert changed.stdout.split() == ["before", "False", "after", "False"]


def test_cli_says_it_will_compile_on_a_cold_cache(tmp_path: Path) -> None:
    # an empty cache: the notice comes first, before the input is even read
    proc = _run(
        ["-m", "geokanon", "release", str(tmp_path / "missing.csv"), "--k", "5", "--r-max",
         "100", "--out", str(tmp_path / "out")],
        tmp_path / "empty-cache", tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert COMPILE_NOTE in proc.stderr
    assert proc.stderr.index(COMPILE_NOTE) < proc.stderr.index("does not exist")
    assert not (tmp_path / "out").exists()

"""The same plan over spatial tiles on Dask, with exact halos.

Space is cut into square tiles (:class:`Tiling`). Every record is *owned* by the
tile that holds it; a tile is processed together with a *halo*: every record
within ``policy.search_radius_m`` (``generalise_ratio x r_max_m``) of the tile's
square. Everything here is a function over plain numpy arrays of one tile; the
Dask orchestration (``dask.delayed`` and ``distributed.Client``) is imported
lazily inside the functions that need it, so ``import geokanon`` never imports
Dask. Install it with ``pip install geokanon[dask]``.

Why the first-pass labels are exact (identical to the single-machine run)
--------------------------------------------------------------------------
Let ``R = search_radius_m``, ``p`` a record owned by tile ``T``, and ``C`` the
records processed with ``T`` (owned plus halo). ``C`` contains every record
``q`` with ``|q - p| <= R``: the distance from ``q`` to the square of ``T`` is
at most ``|q - p|`` because ``p`` lies in the square (a small absolute margin
covers the rounding of the tile index), and every record that close to the
square is in the halo. Because ``tile_m >= R``, those records lie in ``T`` or in
one of its 8 neighbours, which is where the halo is looked for.

The distance from ``p`` to another subject ``s`` is ``min |q - p|`` over the
records ``q`` of ``s``. For any subject, the distance computed on ``C`` is at
least the true one (``C`` holds a subset of ``s``'s records), and equal to it
whenever the true distance is ``<= R`` (the nearest record is then in ``C``).

* If the true ``d_{k-1}(p) <= R``: the ``k-1`` nearest other subjects are all
  within ``R``, so they and their exact distances appear in ``C``; no subject
  can appear nearer on ``C`` than it truly is. The ``(k-1)``-th distance on
  ``C`` is the same float (the same ``sqrt(dx*dx + dy*dy)`` on the same
  coordinates), hence the same ``iota`` and label.
* If the true ``d_{k-1}(p) > R``: fewer than ``k-1`` subjects lie within ``R``,
  on ``C`` as well, and the search (``max_distance = R``) returns ``inf`` both
  ways: ``iota = inf``, label ``suppress`` whatever lies beyond.

The temporal ratio only looks at other subjects' records within
``r_max_m < R`` of ``p``, all in ``C``, so it is exact too. A context with
fewer than ``k`` distinct subjects gives ``iota = inf`` to all its owned records,
which is what the single-machine search gives them (fewer than ``k-1`` other
subjects within ``R``). Extra records in ``C`` (the halo is taken with a
margin) never change a label: only records within ``R`` can.

Where the release differs from the single-machine run
-----------------------------------------------------
Grouping is not local in that strict sense: the single-machine grouping orders
all records along one Hilbert curve. Here each tile groups only the records it
owns (:func:`geokanon.grouping.group_records`, whose exact checks make every
group hold ``>= k`` distinct subjects and every member lie within ``r_max_m``
of the representative), and the records no tile could place (edge leftovers
and true leftovers) first try to join a nearby group (re-centred when one disc
still covers every member), then are grouped once more together, over all
tiles. Later passes keep every group that still holds ``k`` subjects and regroup
only the members of groups that fell below ``k`` (the single-machine core
regroups everything each pass; regrouping tiles from scratch would not settle
as fast, because every pass would move tile-edge leftovers again). So group
boundaries near tile edges, the number of groups, and (through the re-run
classification of later passes) the final disposal of some records can differ
from the single-machine release. What is identical: the first-pass labels and
``iota``; the rules of every later pass (re-classification of the group-level
records among themselves, exact on tiles by the argument above, with the same
fixed-point and pass limit); generalisation, suppression, the per-unit table
and the cap verdicts, computed by the same functions on the whole outcome; and
the independent verifier, which checks the written release.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numba as nb
import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from geokanon._cells import KEY_LIMIT as _KEY_LIMIT
from geokanon._cells import cell_range as _tile_range
from geokanon._cells import dense_cells as _dense_cells
from geokanon._cells import remap as _remap
from geokanon._progress import Progress
from geokanon.classify import (
    CapVerdict,
    Classification,
    UnitTable,
    classify,
)
from geokanon.disposal import (
    CoreResult,
)
from geokanon.errors import GeokanonError, InputError, ReleaseRefused
from geokanon.grouping import Grouping, group_records
from geokanon.neighbours import (
    _KEY_BIAS,
    cells_around,
    factorize_subject_ids,
    in_sorted,
    is_dense_codes,
    pack_key,
    subject_codes,
    unpack_key,
)
from geokanon.policy import Label, OutlierPolicy

if TYPE_CHECKING:
    from geokanon.io.read import PointTable
    from geokanon.pipeline import ReleaseResult
    from geokanon.release import ReleaseOptions

__all__ = [
    "ParquetPartitions",
    "PartitionedClassification",
    "Tiling",
    "classify_partitions",
    "classify_tile",
    "classify_tiled",
    "dask_client",
    "frame_source",
    "release_distributed",
    "release_partitions",
    "run_core_distributed",
]

#: A row id is ``partition << _ROW_BITS | position`` in the partitioned path.
_ROW_BITS = 40
#: Records per chunk of the driver's whole-array steps (bounds their temporaries).
_CHUNK = 1_000_000
#: Records of a partitioned release part (whole tiles of groups, or whole classes, per part).
RECORDS_PER_PART = 500_000


class DistributedError(GeokanonError, RuntimeError):
    """The cluster failed (workers lost, tasks failed); nothing was written."""

    exit_code = 1


# ----------------------------------------------------------------------------
# Tiles and halos
# ----------------------------------------------------------------------------


def _largest_abs(v: NDArray[np.float64]) -> float:
    """``max |v|`` without a temporary array."""
    return max(abs(float(v.min())), abs(float(v.max())))


@dataclass(frozen=True, kw_only=True)
class Tiling:
    """Square tiles of side ``tile_m`` with a halo of ``halo_m``, validated on construction.

    Parameters
    ----------
    tile_m
        Side of a tile in metres; at least ``halo_m`` (so a halo reaches only the
        8 neighbouring tiles). Memory per task grows with the records per tile.
    halo_m
        Width of the halo: ``policy.search_radius_m`` for exact labels.
    origin_x, origin_y
        Corner of tile ``(0, 0)``, metres.

    Examples
    --------
    >>> t = Tiling(tile_m=1000.0, halo_m=400.0)
    >>> t.tile_index([10.0, 1500.0], [10.0, -1.0])
    (array([0, 1]), array([ 0, -1]))
    """

    tile_m: float
    halo_m: float
    origin_x: float = 0.0
    origin_y: float = 0.0

    def __post_init__(self) -> None:
        for name in ("tile_m", "halo_m", "origin_x", "origin_y"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise InputError(f"{name} must be finite, got {value!r}")
        if self.halo_m < 0:
            raise InputError(f"halo_m must be >= 0, got {self.halo_m!r}")
        if not self.tile_m > 0 or self.tile_m < self.halo_m:
            raise InputError(
                f"tile_m={self.tile_m!r} must be > 0 and at least the halo {self.halo_m!r} m "
                "(generalise_ratio x r_max_m): choose larger tiles"
            )

    @classmethod
    def for_policy(
        cls,
        policy: OutlierPolicy,
        *,
        tile_m: float | None = None,
        origin: tuple[float, float] = (0.0, 0.0),
    ) -> Tiling:
        """Tiles for a policy: halo = ``policy.search_radius_m``; default side 8 halos.

        Examples
        --------
        >>> Tiling.for_policy(OutlierPolicy(k=5, r_max_m=100.0)).tile_m
        3200.0
        """
        halo = policy.search_radius_m
        side = 8.0 * halo if tile_m is None else float(tile_m)
        return cls(tile_m=side, halo_m=halo, origin_x=float(origin[0]), origin_y=float(origin[1]))

    def tile_index(self, x: ArrayLike, y: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Column and row of the tile that owns each point."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        ix = np.floor((xa - self.origin_x) / self.tile_m).astype(np.int64)
        iy = np.floor((ya - self.origin_y) / self.tile_m).astype(np.int64)
        return ix, iy

    def tile_keys(self, x: ArrayLike, y: ArrayLike) -> NDArray[np.int64]:
        """One int64 key per point: its owning tile (see :func:`unpack_key`)."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        out = np.empty(xa.size, dtype=np.int64)
        for a in range(0, xa.size, _CHUNK):  # in chunks: bounded temporaries
            ix, iy = self.tile_index(xa[a : a + _CHUNK], ya[a : a + _CHUNK])
            out[a : a + _CHUNK] = pack_key(ix, iy)
        return out

    def halo_pairs(
        self, x: ArrayLike, y: ArrayLike, *, extent: float | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(record index, tile key)`` for every neighbouring tile whose halo holds a record.

        A record is in the halo of a tile other than its own when its distance to
        that tile's square is at most ``halo_m`` (plus a margin for rounding, which
        only adds records and never changes a label). ``extent`` (default: the
        largest ``|x| + |y|`` given) scales that margin, so that chunks of one
        input get the same margin.
        """
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        ix, iy = self.tile_index(xa, ya)
        # Offsets of each point inside its own tile, metres.
        fx = xa - (self.origin_x + ix * self.tile_m)
        fy = ya - (self.origin_y + iy * self.tile_m)
        margin = 1e-6 + 1e-9 * (abs(self.origin_x) + abs(self.origin_y) + self.tile_m)
        if extent is None and xa.size:
            extent = _largest_abs(xa) + _largest_abs(ya)
        margin += 1e-9 * (extent or 0.0)
        reach = self.halo_m + margin
        gap_x = {-1: fx, 0: np.zeros_like(fx), 1: self.tile_m - fx}
        gap_y = {-1: fy, 0: np.zeros_like(fy), 1: self.tile_m - fy}
        rec: list[NDArray[np.int64]] = []
        keys: list[NDArray[np.int64]] = []
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                if dx == 0 and dy == 0:
                    continue
                gx = np.maximum(gap_x[dx], 0.0)
                gy = np.maximum(gap_y[dy], 0.0)
                hit = np.flatnonzero(np.sqrt(gx * gx + gy * gy) <= reach)
                rec.append(hit)
                keys.append(pack_key(ix[hit] + dx, iy[hit] + dy))
        if not rec:  # pragma: no cover - the loop always runs
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(rec), np.concatenate(keys)

    def _all_halo_pairs(
        self, xa: NDArray[np.float64], ya: NDArray[np.float64], extent: float
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """:meth:`halo_pairs` of every record with one ``extent`` (the same pairs, in
        another order): compiled, no per-record temporaries, when every tile column
        and row packs; else in chunks of :meth:`halo_pairs` (bounded temporaries)."""
        ok = xa.size > 0 and _owner_codes_fit(self, xa, ya)
        if ok:
            margin = 1e-6 + 1e-9 * (abs(self.origin_x) + abs(self.origin_y) + self.tile_m)
            margin += 1e-9 * extent
            reach = self.halo_m + margin
            args = (xa, ya, self.origin_x, self.origin_y, self.tile_m, reach)
            m = _halo_pairs(*args, np.zeros(0, np.int64), np.zeros(0, np.int64))
            rec = np.empty(m, dtype=np.int64)
            key = np.empty(m, dtype=np.int64)
            _halo_pairs(*args, rec, key)
            return rec, key
        recs: list[NDArray[np.int64]] = []
        hkeys: list[NDArray[np.int64]] = []
        # In chunks: the temporaries of the halo test stay bounded whatever the size.
        for a in range(0, xa.size, _CHUNK):
            b = min(a + _CHUNK, xa.size)
            r, k = self.halo_pairs(xa[a:b], ya[a:b], extent=extent)
            recs.append(r + a)
            hkeys.append(k)
        hrec = np.concatenate(recs) if recs else np.zeros(0, np.int64)
        hkey = np.concatenate(hkeys) if hkeys else np.zeros(0, np.int64)
        return hrec, hkey

    def contexts(
        self, x: ArrayLike, y: ArrayLike
    ) -> list[tuple[int, NDArray[np.int64], NDArray[np.int64]]]:
        """Per occupied tile (ascending key): its owned record indices and its halo's.

        Examples
        --------
        >>> t = Tiling(tile_m=10.0, halo_m=2.0)
        >>> [(o.tolist(), h.tolist()) for _, o, h in t.contexts([1.0, 9.0, 11.0], [5, 5, 5])]
        [([0, 1], [2]), ([2], [1])]
        """
        return list(self.iter_contexts(x, y))

    def iter_contexts(
        self, x: ArrayLike, y: ArrayLike
    ) -> Iterator[tuple[int, NDArray[np.int64], NDArray[np.int64]]]:
        """:meth:`contexts`, one tile at a time: the owned indices of only a batch of
        tiles exist at once, beside one int32 tile code per record and the halo pairs."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        keys, codes = _owner_codes(self, xa, ya)
        extent = _largest_abs(xa) + _largest_abs(ya) if xa.size else 0.0
        hrec, hkey = self._all_halo_pairs(xa, ya, extent)
        horder = np.lexsort((hrec, hkey))
        hrec, hkey = hrec[horder], hkey[horder]
        del horder
        for t, owned in _owned_by_tile(codes, keys.size):
            key = int(keys[t])
            a, b = np.searchsorted(hkey, [key, key + 1])
            yield key, owned, hrec[a:b]


def _owner_codes(
    tiling: Tiling, x: Any, y: Any, at: NDArray[np.integer] | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
    """Sorted distinct keys of the tiles owning the records (``at``: only those rows),
    and each record's index into them as int32.

    Compiled passes over the records (tile ranges, then each record's cell on the
    dense grid of the occupied range) when that grid is small; else in chunks of
    :func:`Tiling.tile_keys` (bounded temporaries). Both give the same keys and codes:
    the tile column and row are ``floor((v - origin) / tile_m)`` in either.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    n = xa.size if at is None else at.size
    if n and 0 < xa.size < 2**31:
        sel = np.zeros(0, np.int64) if at is None else np.asarray(at)
        ox, oy, side = tiling.origin_x, tiling.origin_y, tiling.tile_m
        lo_x, hi_x, lo_y, hi_y, ok = _tile_range(xa, ya, sel, at is not None, ox, oy, side)
        nx, ny = hi_x - lo_x + 1, hi_y - lo_y + 1
        if ok and nx * ny <= _DENSE_TILES:
            codes = np.empty(n, dtype=np.int32)
            occupied = _dense_cells(
                xa, ya, sel, at is not None, ox, oy, side, lo_x, lo_y, nx, ny, codes
            )
            cells = np.flatnonzero(occupied)
            rank = np.cumsum(occupied, dtype=np.int32) - 1
            _remap(codes, rank)
            keys = pack_key(lo_x + cells // ny, lo_y + cells % ny)
            return keys, codes

    def chunk(a: int) -> NDArray[np.int64]:
        if at is None:
            return tiling.tile_keys(xa[a : a + _CHUNK], ya[a : a + _CHUNK])
        i = at[a : a + _CHUNK]
        return tiling.tile_keys(xa[i], ya[i])

    distinct = [np.unique(chunk(a)) for a in range(0, n, _CHUNK)]
    keys = np.unique(np.concatenate(distinct)) if distinct else np.zeros(0, np.int64)
    codes = np.empty(n, dtype=np.int32)
    for a in range(0, n, _CHUNK):
        codes[a : a + _CHUNK] = np.searchsorted(keys, chunk(a))
    return keys, codes


#: Largest dense grid of tiles (cells of the occupied range) :func:`_owner_codes` compiles
#: over (one byte and one int32 a cell); wider ranges go through sorted keys.
_DENSE_TILES = 1 << 22


def _owner_codes_fit(tiling: Tiling, xa: NDArray[np.float64], ya: NDArray[np.float64]) -> bool:
    """Whether every record's tile column and row (and its neighbours') is finite and
    packs into a key: the condition of the compiled halo search."""
    lo_x, hi_x, lo_y, hi_y, ok = _tile_range(
        xa, ya, np.zeros(0, np.int64), False, tiling.origin_x, tiling.origin_y, tiling.tile_m
    )
    return bool(ok) and min(lo_x, lo_y) > -_KEY_LIMIT and max(hi_x, hi_y) < _KEY_LIMIT - 1


@nb.njit(cache=True)
def _halo_pairs(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    ox: float,
    oy: float,
    side: float,
    reach: float,
    rec: NDArray[np.int64],
    key: NDArray[np.int64],
) -> int:  # pragma: no cover - compiled
    """Every record within ``reach`` of a neighbouring tile's square, with that tile's key:
    the test of :meth:`Tiling.halo_pairs`, term for term (the same floating-point steps).
    Returns how many pairs there are; writes them into ``rec``, ``key`` unless these are
    empty (the counting pass, which sizes them)."""
    fill = rec.size > 0
    m = 0
    for r in range(x.size):
        ix = np.int64(np.floor((x[r] - ox) / side))
        iy = np.int64(np.floor((y[r] - oy) / side))
        fx = x[r] - (ox + ix * side)
        fy = y[r] - (oy + iy * side)
        for dx in (-1, 0, 1):
            gx = max(fx if dx == -1 else (0.0 if dx == 0 else side - fx), 0.0)
            for dy in (-1, 0, 1):
                if dx == 0 and dy == 0:
                    continue
                gy = max(fy if dy == -1 else (0.0 if dy == 0 else side - fy), 0.0)
                if np.sqrt(gx * gx + gy * gy) <= reach:
                    if fill:
                        rec[m] = r
                        key[m] = ((ix + dx + _KEY_BIAS) << 31) | (iy + dy + _KEY_BIAS)
                    m += 1
    return m


def _owned_by_tile(
    codes: NDArray[np.int32], n_tiles: int
) -> Iterator[tuple[int, NDArray[np.int64]]]:
    """``(tile, its record indices ascending)`` for every tile, in tile order.

    Tiles are taken in batches of about a sixteenth of the records (at least
    ``_CHUNK``): one compiled scan of the codes per batch places each record of the
    batch's tiles at its tile's next slot (a counting sort: indices stay ascending), and
    only the batch's indices exist at once (never a whole-array argsort).
    """
    counts = np.bincount(codes, minlength=n_tiles)
    per_batch = max(_CHUNK, codes.size // 16)
    t = 0
    while t < n_tiles:
        run = np.cumsum(counts[t:])
        u = t + max(1, int(np.searchsorted(run, per_batch, side="right")))
        bounds = np.r_[0, np.cumsum(counts[t:u])]
        sel = np.empty(int(bounds[-1]), dtype=np.int64)
        _fill_batch(codes, t, u, bounds[:-1].copy(), sel)
        for j in range(u - t):
            yield t + j, sel[bounds[j] : bounds[j + 1]]
        t = u


@nb.njit(cache=True)
def _fill_batch(
    codes: NDArray[np.int32], t: int, u: int, slot: NDArray[np.int64], out: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """Every record ``r`` with ``t <= codes[r] < u`` at ``out[slot[codes[r] - t]]``, the
    slot then moved on (records in ascending order within each tile)."""
    for r in range(codes.size):
        c = codes[r]
        if c >= t and c < u:
            out[slot[c - t]] = r
            slot[c - t] += 1


# ----------------------------------------------------------------------------
# Stage functions over the arrays of one tile
# ----------------------------------------------------------------------------


def _single_thread_numba() -> None:
    """Inside a Dask task: one numba thread per task thread (no oversubscription)."""
    with contextlib.suppress(Exception):
        from distributed import get_worker

        get_worker()
        import numba

        numba.set_num_threads(1)


def classify_tile(
    x: ArrayLike,
    y: ArrayLike,
    n_owned: int,
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
) -> Classification:
    """Labels of a tile's owned records, from the owned records followed by the halo.

    Parameters
    ----------
    x, y
        Coordinates in metres: the ``n_owned`` owned records first, then the halo.
    n_owned
        Number of owned records (the leading rows).
    policy
        The outlier policy.
    subjects
        Subject id per record (any dtype; only equality matters), or ``None``.
    times
        Times in seconds, when the policy has ``t_max_s``.

    Returns
    -------
    Classification
        Of the owned records only, identical to what the single-machine
        :func:`geokanon.classify.classify` gives them (see the module docstring).

    Examples
    --------
    >>> pol = OutlierPolicy(k=3, r_max_m=10.0)
    >>> classify_tile([0.0, 1, 2, 100], [0.0, 0, 0, 0], 1, pol).labels.tolist()
    [0]
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    subj = None if subjects is None else subject_codes(subjects, n)
    n_subjects = n if subj is None else (int(subj.max()) + 1 if n else 0)
    if n_subjects < policy.k:
        inf = np.full(n_owned, np.inf)
        suppress = np.full(n_owned, Label.SUPPRESS, dtype=np.uint8)
        return Classification(
            labels=suppress,
            iota=inf,
            iota_space=inf.copy() if policy.uses_time else inf,
            space_labels=suppress.copy() if policy.uses_time else None,
        )
    cls = classify(xa, ya, policy, subjects=subj, times=times)
    iota = cls.iota[:n_owned].copy()
    return Classification(
        labels=cls.labels[:n_owned].copy(),
        iota=iota,
        # without times one array, as on one machine (and sent back once)
        iota_space=iota if cls.iota_space is cls.iota else cls.iota_space[:n_owned].copy(),
        space_labels=None if cls.space_labels is None else cls.space_labels[:n_owned].copy(),
    )


def _classify_task(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    n_owned: int,
    policy: OutlierPolicy,
    subjects: NDArray[np.int64] | None,
    times: NDArray[np.float64] | None,
) -> Classification:
    _single_thread_numba()
    return classify_tile(x, y, n_owned, policy, subjects=subjects, times=times)


def _group_task(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subjects: NDArray[np.int64],
    policy: OutlierPolicy,
    tiebreak: NDArray[np.uint64] | None,
) -> Grouping:
    _single_thread_numba()
    return group_records(x, y, subjects, policy, tiebreak)


def _classify_group_task(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    n_owned: int,
    policy: OutlierPolicy,
    subjects: NDArray[np.int64] | None,
    times: NDArray[np.float64] | None,
    rows: NDArray[np.int64] | None,
    tiebreak: NDArray[np.uint64] | None,
) -> tuple[Classification, Grouping | None]:
    """:func:`_classify_task`, then the tile's first grouping (:func:`_group_task` on its
    owned records labelled ok or merge, in their order): what the release core's first
    group pass gives this tile, without sending the tile's records again.

    ``rows``: the owned records' subject codes to group by (``None``: the owned rows of
    ``subjects``); ``tiebreak``: the owned records'."""
    cls = _classify_task(x, y, n_owned, policy, subjects, times)
    act = np.flatnonzero(cls.labels <= Label.MERGE)
    if act.size == 0:
        return cls, None
    own = rows if rows is not None else subjects[:n_owned] if subjects is not None else None
    if own is None:
        raise ValueError("the first grouping needs the owned records' subjects")
    g = _group_task(
        x[act], y[act], own[act].astype(np.int64, copy=False), policy,
        None if tiebreak is None else tiebreak[act],
    )  # fmt: skip
    # tile-local ids (fewer than the tile's records): sent back as int32
    return cls, Grouping(g.group_id.astype(np.int32), g.rep_x, g.rep_y)


def _warm_payload(policy: OutlierPolicy, like: tuple[NDArray[Any] | None, ...]) -> tuple[Any, ...]:
    """A small made-up tile in the form of :func:`_classify_group_task`'s payload: towns
    of ``k`` subjects or more within ``r_max``, a few between them and some alone, the last
    rows its halo. ``like`` are the real payload's subjects, times, grouping subjects and
    tiebreak (``None``: absent), whose dtypes it takes, so that a task on it calls the
    compiled kernels with the signatures of the real tiles."""
    subj, ta, group_by, tb = like
    rng = np.random.default_rng(0)
    r = policy.r_work_m
    towns = rng.uniform(0.0, 60.0 * r, (30, 2))
    members = towns[np.repeat(np.arange(30), 3 * policy.k)]
    pts = np.vstack([
        members + rng.normal(0.0, r / 1.5, members.shape),
        rng.uniform(0.0, 60.0 * r, (60, 2)),
    ])  # fmt: skip
    m = pts.shape[0]
    n_owned = m - 40
    codes = np.arange(m, dtype=np.int64) % (m // 2)
    times = None
    if ta is not None:
        times = rng.uniform(0.0, 4.0 * (policy.t_max_s or 1.0), m)
    rows: NDArray[Any] | None = np.arange(n_owned, dtype=np.int64)  # as payloads() picks
    if group_by is not None:
        rows = None if group_by is subj else codes[:n_owned].astype(group_by.dtype)
    return (
        pts[:, 0].copy(), pts[:, 1].copy(), n_owned, policy,
        None if subj is None else codes.astype(subj.dtype), times, rows,
        None if tb is None else rng.integers(0, 2**63, n_owned).astype(tb.dtype),
    )  # fmt: skip


def _warm_task(func: Callable[..., Any], payload: tuple[Any, ...]) -> None:
    """Run ``func`` on a made-up payload and drop the result: a warm-up never fails."""
    with contextlib.suppress(Exception):
        func(*payload)


def _warm_workers(
    client: Any, policy: OutlierPolicy, like: tuple[NDArray[Any] | None, ...]
) -> list[Any]:
    """One warm-up task per worker (:func:`_classify_group_task` on
    :func:`_warm_payload`), behind any real task: a fresh worker loads the compiled
    kernels from numba's cache at their first call, about 0.7 s at 1e7, which the first
    tile task would otherwise wait for. Returns the futures (to release)."""
    try:
        payload = _warm_payload(policy, like)
        workers = list(client.scheduler_info().get("workers", {}))
        return [
            client.submit(_warm_task, _classify_group_task, payload, workers=[w],
                          allow_other_workers=False, pure=False, priority=-1)
            for w in workers
        ]  # fmt: skip
    except Exception:  # a warm-up never fails the release
        return []


@dataclass
class _FirstGroups:
    """The release core's first grouping, made in the first classification's tile tasks
    (:func:`_classify_group_task`) and read by :func:`group_tiled` in its place.

    ``local``: every record's group id within its tile (-1: none); ``reps``: each tile's
    representatives; ``sizes``: each tile's records grouped (labelled ok or merge), by
    tile key. ``subjects`` and ``tiebreak`` are what the tasks group by (no subjects:
    the row numbers)."""

    subjects: NDArray[np.integer[Any]] | None
    tiebreak: NDArray[np.uint64] | None
    local: NDArray[np.integer[Any]] = field(default_factory=lambda: np.zeros(0, np.int32))
    reps: dict[int, tuple[NDArray[np.float64], NDArray[np.float64]]] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)


# ----------------------------------------------------------------------------
# The cluster
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def dask_client(
    client: Any = None,
    *,
    scheduler: str | None = None,
    n_workers: int | None = None,
    memory_limit: str | int = "auto",
    keep_freed_memory: bool = True,
) -> Iterator[Any]:
    """A ``distributed.Client``: the one given, one connected to ``scheduler``, or a local cluster.

    Parameters
    ----------
    client
        An existing client, used as it is (not closed).
    scheduler
        Address of a running scheduler, e.g. ``tcp://10.0.0.5:8786``.
    n_workers
        Workers of the local cluster (default: one per core, one thread each).
    memory_limit
        Memory limit per local worker (Dask's syntax, e.g. ``"4GiB"``).
    keep_freed_memory
        Start the local cluster's workers with :data:`geokanon._heap.WORKER_ENVIRON`
        (their heaps keep freed memory for the next arrays); False leaves Dask's
        ``distributed.nanny.pre-spawn-environ`` as configured.
    """
    from geokanon._heap import freed_memory_unmapped

    with freed_memory_unmapped():  # the driver's heap: glibc's own (geokanon._heap)
        with _client(client, scheduler, n_workers, memory_limit, keep_freed_memory) as c:
            yield c


@contextlib.contextmanager
def _client(
    client: Any,
    scheduler: str | None,
    n_workers: int | None,
    memory_limit: str | int,
    keep_freed_memory: bool,
) -> Iterator[Any]:
    """:func:`dask_client`'s client (its arguments, as there)."""
    if client is not None:
        yield client
        return
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise InputError("the dask backend needs Dask: pip install 'geokanon[dask]'") from None
    # Dask keeps the last 1,000 messages of every connection for debugging, and a
    # message that submits a task holds the task's arguments (a tile's arrays): at
    # national scale that log alone would hold a large share of the input.
    quiet_log = dask.config.set({"distributed.admin.low-level-log-length": 0})
    if scheduler is not None:
        with quiet_log, Client(scheduler) as c:
            yield c
        return
    workers = n_workers or max(1, os.cpu_count() or 1)
    # The workers' statistical profiler (a stack sample of the running task every 10 ms,
    # for the dashboard, which this cluster does not start) costs them about 5 % of
    # their CPU time here. Their heaps keep freed memory for the next task's arrays
    # (geokanon._heap; Dask's default trims them at 64 KiB): 44 s -> 38 s at 1e7.
    from geokanon._heap import WORKER_ENVIRON

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", None) or {})
    if keep_freed_memory:
        environ.update(WORKER_ENVIRON)
    # Dask puts these variables in this process's environment to spawn the workers, and
    # leaves them there; a value already there wins over its configuration (one left by
    # an earlier cluster too), so ours are put there first. All are put back once the
    # workers run.
    before = {key: os.environ.get(key) for key in environ}
    config = {
        "distributed.worker.profile.enabled": False,
        "distributed.nanny.pre-spawn-environ": environ,
    }
    with quiet_log, dask.config.set(config):
        try:
            if keep_freed_memory:
                os.environ.update(WORKER_ENVIRON)
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=memory_limit,
                dashboard_address=None,
            )
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        with cluster, Client(cluster) as c:
            yield c


def _gather(client: Any, futures: list[Any]) -> list[Any]:
    """Results of the futures; a lost cluster becomes a :class:`DistributedError`."""
    try:
        return list(client.gather(futures))
    except GeokanonError:
        raise
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise DistributedError(
            f"the Dask cluster failed while running {len(futures)} tasks "
            f"({type(exc).__name__}: {exc}); nothing was written: check the workers' memory "
            "limit and logs, then run again"
        ) from exc
    except Exception as exc:
        if type(exc).__name__ in {"KilledWorker", "CancelledError", "FutureCancelledError"}:
            raise DistributedError(
                f"the Dask cluster lost tasks ({type(exc).__name__}); nothing was written: "
                "check the workers' memory limit and logs, then run again"
            ) from exc
        raise


# ----------------------------------------------------------------------------
# Arrays held by the driver: classification and grouping over tiles
# ----------------------------------------------------------------------------


def classify_tiled(
    x: ArrayLike,
    y: ArrayLike,
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
    tiling: Tiling | None = None,
    client: Any = None,
    first_groups: _FirstGroups | None = None,
) -> Classification:
    """:func:`geokanon.classify.classify`, computed tile by tile on a Dask cluster.

    Parameters
    ----------
    x, y, policy, subjects, times
        As :func:`geokanon.classify.classify`.
    tiling
        The tiles (default :meth:`Tiling.for_policy`); the halo must be at least
        ``policy.search_radius_m``.
    client
        A ``distributed.Client``; ``None`` computes the tiles here, one after the
        other (the same answer, useful for tests and small inputs).
    first_groups
        The release core's first pass (:func:`run_core_distributed`): each tile task
        also groups the tile's records labelled ok or merge, into ``first_groups``.

    Returns
    -------
    Classification
        Identical to the single-machine classification (labels and ``iota``
        bit for bit; see the module docstring for the proof).

    Examples
    --------
    >>> pol = OutlierPolicy(k=3, r_max_m=10.0)
    >>> tiles = Tiling(tile_m=40.0, halo_m=40.0)
    >>> classify_tiled([0, 1, 2, 100], [0, 0, 0, 0], pol, tiling=tiles).counts()
    {'ok': 3, 'merge': 0, 'generalise': 0, 'suppress': 1}
    """
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    n = xa.size
    if n == 0:
        raise InputError("the input has no records; nothing to classify")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        bad = int((~(np.isfinite(xa) & np.isfinite(ya))).sum())
        raise InputError(f"{bad} records have NaN or infinite coordinates; drop or fix them")
    subj = None
    if subjects is not None:  # dense codes already (the release core's): not copied
        dense = is_dense_codes(subjects, n)
        subj = np.asarray(subjects) if dense else subject_codes(subjects, n)
    n_subjects = n if subj is None else int(subj.max()) + 1
    if n_subjects < policy.k:
        raise InputError(
            f"the input holds {n_subjects} distinct subjects, fewer than k={policy.k}; "
            "no class of k subjects can exist: lower k or add records"
        )
    if policy.uses_time and times is None:
        raise InputError(
            "t_max_s is set but no times were given; pass a time column or drop t_max_s"
        )
    ta = None if times is None or not policy.uses_time else np.asarray(times, dtype=np.float64)
    tiling = tiling or Tiling.for_policy(policy)
    _check_halo(tiling, policy)
    owned_of: dict[int, tuple[int, NDArray[np.int64]]] = {}
    first = first_groups
    if first is not None:
        first.local = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)

    def payloads() -> Iterator[tuple[Any, ...]]:
        for t, (key, owned, halo) in enumerate(tiling.iter_contexts(xa, ya)):
            owned_of[t] = (key, owned)  # until its result is back
            idx = np.concatenate([owned, halo])
            payload = (
                xa[idx],
                ya[idx],
                owned.size,
                policy,
                None if subj is None else subj[idx],
                None if ta is None else ta[idx],
            )
            if first is None:
                yield payload
                continue
            # the owned records' subjects, unless the task has them (the classification's)
            group_by = first.subjects
            rows = owned if group_by is None else None if group_by is subj else group_by[owned]
            tb = first.tiebreak
            yield (*payload, rows, None if tb is None else tb[owned])

    labels = np.empty(n, dtype=np.uint8)
    iota = np.empty(n)
    # Without times iota is the spatial iota (one array, as on one machine).
    iota_space = np.empty(n) if policy.uses_time else iota
    space_labels = np.empty(n, dtype=np.uint8) if policy.uses_time else None

    def consume(t: int, result: Any) -> None:
        key, owned = owned_of.pop(t)
        cls, g = (result, None) if first is None else result
        labels[owned] = cls.labels
        iota[owned] = cls.iota
        if space_labels is not None and cls.space_labels is not None:
            iota_space[owned] = cls.iota_space
            space_labels[owned] = cls.space_labels
        if first is not None and g is not None:
            act = owned[cls.labels <= Label.MERGE]
            first.local[act] = g.group_id  # tile-local ids
            first.reps[key] = (g.rep_x, g.rep_y)
            first.sizes[key] = act.size

    task = _classify_task if first is None else _classify_group_task
    # the workers load the tasks' compiled kernels while this process sorts the records
    # into tiles (before the first payload exists), not in the first tile task
    warming = (
        []
        if client is None or first is None
        else _warm_workers(client, policy, (subj, ta, first.subjects, first.tiebreak))
    )
    try:
        _run(client, task, payloads(), consume=consume, records=_payload_records)
    finally:
        for fut in warming:
            fut.release()
    return Classification(
        labels=labels, iota=iota, iota_space=iota_space, space_labels=space_labels
    )


def _payload_records(payload: tuple[Any, ...]) -> int:
    """The records of a tile task's payload (its first array: the x coordinates)."""
    return int(payload[0].size)


def _check_halo(tiling: Tiling, policy: OutlierPolicy) -> None:
    if tiling.halo_m < policy.search_radius_m:
        raise InputError(
            f"the halo of {tiling.halo_m:g} m is narrower than the search radius "
            f"{policy.search_radius_m:g} m (generalise_ratio x r_max_m): labels near tile "
            "edges would be wrong; use Tiling.for_policy(policy)"
        )


#: Records a tile task takes at least (tiles are batched up to it): a task has a fixed
#: cost on the driver and the worker (scheduling, messages), a few milliseconds, which
#: many small tiles would pay each.
TASK_RECORDS = 150_000


def _run(
    client: Any,
    func: Callable[..., Any],
    payloads: Iterable[tuple[Any, ...]],
    window: int | None = None,
    consume: Callable[[int, Any], None] | None = None,
    records: Callable[[tuple[Any, ...]], int] | None = None,
) -> list[Any]:
    """``func(*payload)`` for every payload, results in payload order.

    With ``consume``, each result is handed to ``consume(i, result)`` as it
    arrives (in any order) and not kept: the list returned is empty.

    On a cluster, at most ``window`` tasks (default: two per worker, plus two) are
    in flight, and ``payloads`` is consumed lazily: a payload (a copy of one tile's
    arrays, say) is built only when its task is submitted and dropped once its
    result is back, so the driver never holds every tile's payload at once. With
    ``records`` (a payload's record count), consecutive payloads are sent as one
    task of at least :data:`TASK_RECORDS` records (each still ``func(*payload)``
    on its own). Without a client the tasks run here, one after the other.
    """
    results: dict[int, Any] = {}

    def take(i: int, result: Any) -> None:
        if consume is None:
            results[i] = result
        else:
            consume(i, result)

    if client is None:
        for i, p in enumerate(payloads):
            take(i, func(*p))
        return [results[i] for i in range(len(results))]
    from distributed import as_completed

    if window is None:
        window = 2 * max(1, len(client.scheduler_info().get("workers", {}))) + 2
    todo = iter(_batches(payloads, records))
    index: dict[str, int] = {}
    running = as_completed(loop=client.loop)

    def submit_next() -> None:
        nxt = next(todo, None)
        if nxt is not None:
            first, batch = nxt
            fut = client.submit(_each, func, batch, pure=False)
            index[fut.key] = first
            running.add(fut)

    for _ in range(window):
        submit_next()
    try:
        for fut in running:
            first = index.pop(fut.key)
            for j, result in enumerate(_gather(client, [fut])[0]):
                take(first + j, result)
            fut.release()
            submit_next()
    finally:
        left = list(running.futures)
        if left:
            client.cancel(left)
    return [results[i] for i in range(len(results))]


def _batches(
    payloads: Iterable[tuple[Any, ...]], records: Callable[[tuple[Any, ...]], int] | None
) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """``(index of the first payload, consecutive payloads)``: one payload each, or with
    ``records``, as many as reach :data:`TASK_RECORDS` records together."""
    batch: list[tuple[Any, ...]] = []
    first = size = 0
    for i, p in enumerate(payloads):
        if not batch:
            first = i
        batch.append(p)
        size += records(p) if records is not None else TASK_RECORDS
        if size >= TASK_RECORDS:
            yield first, batch
            batch, size = [], 0
    if batch:
        yield first, batch


def _each(func: Callable[..., Any], payloads: list[tuple[Any, ...]]) -> list[Any]:
    """``func(*payload)`` for each payload, in one task."""
    return [func(*p) for p in payloads]


def group_tiled(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subjects: NDArray[np.int64],
    policy: OutlierPolicy,
    tiebreak: NDArray[np.uint64] | None = None,
    *,
    tiling: Tiling,
    client: Any = None,
    subset: NDArray[np.int64] | None = None,
    first_groups: _FirstGroups | None = None,
) -> Grouping:
    """Group each tile's own records, then the records no tile could place, together.

    Every group comes from :func:`geokanon.grouping.group_records`, so it holds
    ``>= k`` distinct subjects and every member lies within ``r_max_m`` of its
    representative. Groups are numbered by tile key, then in each tile's
    (row-order independent) order, then the second pass's groups.

    ``subset`` (indices of the records to group, as for ``group_records``) is
    read through, never copied whole: only one tile's records at a time are.
    ``first_groups``: the tiles' groupings of these very records, made with the first
    classification (:func:`classify_tiled`); used in place of the tile tasks when
    every tile grouped exactly the subset's records it owns.

    Returns
    -------
    Grouping
        Over the given records (or ``subset``), as :func:`geokanon.grouping.group_records`.
    """
    # the arrays a tile's payload is read from, and the rows of the subset (one index
    # per payload, composed once, not once per array)
    base = (x, y, subjects, tiebreak)
    if subset is not None:
        n = subset.size
        keys, codes = _owner_codes(tiling, x, y, subset)
        x, y, subjects = _Subset(x, subset), _Subset(y, subset), _Subset(subjects, subset)  # type: ignore[assignment]
        tiebreak = None if tiebreak is None else _Subset(tiebreak, subset)  # type: ignore[assignment]
    else:
        n = x.size
        keys, codes = _owner_codes(tiling, x, y)
    # int32 ids (there are fewer groups than records): half the memory of int64
    group_id: NDArray[np.int64] = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
    if n == 0:
        return Grouping(group_id, np.zeros(0), np.zeros(0))
    n_tiles = keys.size
    owned_of: dict[int, NDArray[np.int64]] = {}

    def payloads(codes: NDArray[np.int32]) -> Iterator[tuple[Any, ...]]:
        bx, by_, bs, bt = base
        for t, i in _owned_by_tile(codes, n_tiles):
            owned_of[t] = i  # until its result is back
            j = i if subset is None else subset[i]
            # int64 subject codes in every task (the driver may hold them as int32)
            yield (
                bx[j],
                by_[j],
                bs[j].astype(np.int64, copy=False),
                policy,
                None if bt is None else bt[j],
            )

    reps: dict[int, tuple[NDArray[np.float64], NDArray[np.float64]]] = {}

    def consume(t: int, g: Grouping) -> None:
        group_id[owned_of.pop(t)] = g.group_id  # tile-local ids for now
        reps[t] = (g.rep_x, g.rep_y)

    if _made_with(first_groups, keys, codes, subset, subjects, tiebreak):
        assert first_groups is not None and subset is not None
        for a in range(0, n, _CHUNK):
            group_id[a : a + _CHUNK] = first_groups.local[subset[a : a + _CHUNK]]
        reps.update({t: first_groups.reps[int(k)] for t, k in enumerate(keys.tolist())})
    else:
        _run(client, _group_task, payloads(codes), consume=consume, records=_payload_records)
    # Tile-local ids to global ones: groups numbered by tile key, then within the tile.
    sizes = np.asarray([reps[t][0].size for t in range(n_tiles)], dtype=np.int64)
    start = np.r_[0, np.cumsum(sizes)]
    offset = int(start[-1])
    for a in range(0, n, _CHUNK):
        gi = group_id[a : a + _CHUNK]  # a view: shifted in place
        placed = gi >= 0
        gi[placed] += start[codes[a : a + _CHUNK][placed]]
    del codes
    rx = [reps[t][0] for t in range(n_tiles)]
    ry = [reps[t][1] for t in range(n_tiles)]
    reps.clear()
    reps_x = np.concatenate(rx) if rx else np.zeros(0)
    reps_y = np.concatenate(ry) if ry else np.zeros(0)
    rest = np.flatnonzero(group_id < 0)
    if rest.size and reps_x.size:
        # A canonical order: the outcome never depends on the input's row order.
        # Coordinates, then the content key, then the subject code (a row number when there
        # is no subject column): only records equal in every column stay in row order.
        by: tuple[NDArray[Any], ...] = (y[rest], x[rest])
        if tiebreak is not None:
            by = (tiebreak[rest], *by)
        rest = rest[np.lexsort((subjects[rest], *by))]
        _join_existing(rest, x, y, subjects, group_id, reps_x, reps_y, policy)
    rx, ry = [reps_x], [reps_y]
    rest = np.flatnonzero(group_id < 0)
    if rest.size >= policy.k:
        second = group_records(
            x[rest], y[rest], subjects[rest].astype(np.int64), policy,
            None if tiebreak is None else tiebreak[rest],
        )  # fmt: skip
        placed = second.group_id >= 0
        group_id[rest[placed]] = second.group_id[placed] + offset
        rx.append(second.rep_x)
        ry.append(second.rep_y)
    return Grouping(
        group_id,
        np.concatenate(rx) if rx else np.zeros(0),
        np.concatenate(ry) if ry else np.zeros(0),
    )


def _made_with(
    first: _FirstGroups | None,
    keys: NDArray[np.int64],
    codes: NDArray[np.int32],
    subset: NDArray[np.int64] | None,
    subjects: Any,
    tiebreak: Any,
) -> bool:
    """Whether ``first`` grouped, in every tile, as many records as the subset has there
    (the records the first classification labelled ok or merge: the same ones), by the
    same subjects and tiebreak."""
    if first is None or subset is None or first.local.size == 0:
        return False
    if not _same_values(
        first.tiebreak, tiebreak.base if isinstance(tiebreak, _Subset) else tiebreak
    ):
        return False
    base = subjects.base if isinstance(subjects, _Subset) else subjects
    if first.subjects is None:  # the row numbers: every record's subject is its row
        for a in range(0, base.size, _CHUNK):
            if not np.array_equal(base[a : a + _CHUNK], np.arange(a, min(a + _CHUNK, base.size))):
                return False
    elif not _same_values(first.subjects, base):
        return False
    per_tile = np.bincount(codes, minlength=keys.size)
    made = np.asarray([first.sizes.get(int(k), 0) for k in keys.tolist()], dtype=np.int64)
    return bool(np.array_equal(per_tile, made)) and sum(first.sizes.values()) == subset.size


def _same_values(a: ArrayLike | None, b: ArrayLike | None) -> bool:
    """Whether two arrays (or both ``None``) hold the same values in the same order.

    The same memory seen the same way answers at once; otherwise the values are
    compared chunk by chunk. Not object identity: the core may hand the grouping a
    different array object over the same data (``np.asarray`` of a memory-mapped file
    is a new view each time), and a copy with equal values groups the same."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if (
        a.dtype == b.dtype
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    ):
        return True
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    return all(
        np.array_equal(flat_a[c : c + _CHUNK], flat_b[c : c + _CHUNK])
        for c in range(0, flat_a.size, _CHUNK)
    )


class _Subset:
    """``base[at[i]]`` for the indices ``i`` of a subset, without copying ``base[at]``."""

    def __init__(self, base: NDArray[Any], at: NDArray[np.int64]) -> None:
        self.base, self.at = base, at

    def __getitem__(self, i: Any) -> Any:
        return self.base[self.at[i]]


def _join_existing(
    rest: NDArray[np.int64],
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subjects: NDArray[np.int64],
    group_id: NDArray[np.int64],
    rep_x: NDArray[np.float64],
    rep_y: NDArray[np.float64],
    policy: OutlierPolicy,
) -> None:
    """Records no tile placed join the nearest group whose disc covers them (in place).

    As step 1 of the single-machine leftover placement: a record within
    ``r_max_m`` of a representative joins it; otherwise the group's representative
    is moved (snapped, exact check on all members) when one disc can cover the
    members and the record. A group keeps ``>= k`` subjects (it only grows), and
    a moved representative is never a member's coordinate nor the exact centroid.
    Every group that gained records then takes the representative the rule gives
    (:func:`geokanon.grouping.settle_representatives`).
    """
    from scipy.spatial import cKDTree

    from geokanon.grouping import _covering_rep, settle_representatives

    r_max = policy.r_work_m  # r_max in working metres: r_max_m on the ground
    step = policy.snap_step_m
    # Only representatives within 2 r_max of a leftover matter: those in its cell of
    # side 2 r_max or a neighbouring one. The tree holds only them.
    side = 2.0 * r_max

    def cells(px: NDArray[np.float64], py: NDArray[np.float64]) -> NDArray[np.int64]:
        return pack_key(np.floor(px / side), np.floor(py / side))

    around = cells_around(np.unique(cells(x[rest], y[rest])), 1)
    cand = np.concatenate(
        [np.zeros(0, np.int64)]
        + [
            a
            + np.flatnonzero(in_sorted(cells(rep_x[a : a + _CHUNK], rep_y[a : a + _CHUNK]), around))
            for a in range(0, rep_x.size, _CHUNK)
        ]
    )
    nq = min(8, cand.size)
    if nq == 0:
        return
    tree = cKDTree(np.c_[rep_x[cand], rep_y[cand]])
    dist, near_idx = tree.query(np.c_[x[rest], y[rest]], k=nq)
    dist = np.asarray(dist).reshape(rest.size, nq)
    near_idx = np.asarray(near_idx).reshape(rest.size, nq)
    idx = np.where(near_idx < cand.size, cand[np.minimum(near_idx, cand.size - 1)], rep_x.size)
    # Members of the groups a record may join (within 2 r_max), in group order and,
    # within a group, ascending: one pass over the ids in chunks, then one stable sort.
    near = np.zeros(rep_x.size, dtype=bool)
    near[idx[np.isfinite(dist) & (dist <= 2 * r_max)]] = True
    sel: list[NDArray[np.int64]] = []
    for c in range(0, group_id.size, _CHUNK):
        gi = group_id[c : c + _CHUNK]
        hit = gi >= 0
        hit[hit] = near[gi[hit]]
        sel.append(c + np.flatnonzero(hit))
    order = np.concatenate(sel) if sel else np.zeros(0, np.int64)
    order = order[np.argsort(group_id[order], kind="stable")]
    owner = group_id[order]
    added: dict[int, list[int]] = {}

    def members(g: int) -> NDArray[np.int64]:
        # In coordinate order, so float sums never depend on the input's row order. The
        # bounds in the ids' own dtype: numpy would otherwise cast all of ``owner`` (int32
        # ids, millions of them) to int64 at every call (20 s of 26 at 1e8).
        lo, hi = np.searchsorted(owner, np.asarray([g, g + 1], dtype=owner.dtype))
        mem = np.r_[order[lo:hi], np.asarray(added.get(g, []), dtype=np.int64)]
        return mem[np.lexsort((y[mem], x[mem]))]

    for t, a in enumerate(rest):
        for d, g in zip(dist[t], idx[t], strict=True):
            if not math.isfinite(d) or d > 2 * r_max:
                break
            g = int(g)
            dx = x[a] - rep_x[g]
            dy = y[a] - rep_y[g]
            if math.sqrt(dx * dx + dy * dy) <= r_max and not (
                x[a] == rep_x[g] and y[a] == rep_y[g]
            ):
                added.setdefault(g, []).append(int(a))
                group_id[a] = g
                break
            mem = np.r_[members(g), a]
            mem = mem[np.lexsort((y[mem], x[mem]))]
            rep = _covering_rep(x[mem], y[mem], np.ones(mem.size), r_max, step)
            if rep is not None:
                added.setdefault(g, []).append(int(a))
                group_id[a] = g
                rep_x[g], rep_y[g] = rep
                break
    # A group that gained records takes the representative the rule gives its members
    # (it has one: its present point is on the coarsest lattice and covers them all).
    # One call for all of them: the rule settles each group on its own, from its
    # members in the order given (here each group's, as ``members`` lists them).
    gained = sorted(added)
    if not gained:
        return
    mems = [members(g) for g in gained]
    mem = np.concatenate(mems)
    of = np.repeat(np.arange(len(gained), dtype=np.int64), [m.size for m in mems])
    rx, ry, ok = settle_representatives(
        of, x[mem], y[mem], np.ones(mem.size), np.asarray(subjects[mem], dtype=np.int64),
        len(gained), r_max, step,
    )  # fmt: skip
    for j, g in enumerate(gained):
        if ok[j]:
            rep_x[g], rep_y[g] = rx[j], ry[j]


def run_core_distributed(
    x: ArrayLike,
    y: ArrayLike,
    policy: OutlierPolicy,
    *,
    subjects: ArrayLike | None = None,
    times: ArrayLike | None = None,
    unit_codes: ArrayLike | None = None,
    unit_names: ArrayLike | None = None,
    parent_codes: ArrayLike | None = None,
    parent_names: ArrayLike | None = None,
    tiebreak: ArrayLike | None = None,
    enforce_caps: bool = True,
    tiling: Tiling | None = None,
    client: Any = None,
    progress: Progress | None = None,
    spill_dir: str | Path | None = None,
    compact: bool = False,
) -> CoreResult:
    """:func:`geokanon.disposal.run_core` with classification and grouping over tiles.

    The passes, the fixed point, generalisation, suppression, the per-unit table
    and the caps follow :func:`geokanon.disposal.run_core` step for step; only the
    neighbour searches (exact, over tiles with halos) and the grouping (per tile,
    then the records no tile placed, together) run on the cluster. See the module
    docstring for what is identical to the single-machine run and what may differ.

    Parameters
    ----------
    x, y, policy, subjects, times, unit_codes, unit_names, parent_codes, parent_names,
    tiebreak, enforce_caps, progress
        As :func:`geokanon.disposal.run_core`.
    tiling
        The tiles (default :meth:`Tiling.for_policy`).
    client
        A ``distributed.Client``, or ``None`` to run the tiles here.
    spill_dir
        A scratch directory: the first pass's ``iota`` (needed only when the release
        is written) is saved there as ``iota.npy`` and the result maps that file
        instead of holding the array (8 bytes a record less on the driver).
    compact
        As :func:`geokanon.disposal.run_core` (int32 ids, dense subject codes not
        copied, the tiebreak in ``spill_dir`` from the first grouping on, when given,
        and let go before generalisation): the partitioned release passes it, handing
        over its only reference to ``tiebreak``.

    Returns
    -------
    CoreResult
    """

    tiling = tiling or Tiling.for_policy(policy)
    _check_halo(tiling, policy)
    from geokanon.disposal import run_core

    calls = [0]

    from geokanon.release import _return_free_memory

    # The first classification's tile tasks also make the first grouping (of the records
    # they label ok or merge), which the first group pass then takes as it is: the tiles'
    # records are sent once. It groups by the tiebreak, held here until then.
    first: list[_FirstGroups] = []
    held_for_first = [tiebreak]

    def classifier(x: ArrayLike, y: ArrayLike, pol: OutlierPolicy, **kw: Any) -> Classification:
        if calls[0] == 0:
            tb = held_for_first.pop()
            # as run_core holds it (the same array when it is one already)
            tb = None if tb is None else np.asarray(tb, dtype=np.uint64)
            first.append(_FirstGroups(kw.get("subjects"), tb))
            kw["first_groups"] = first[0]
            del tb
        cls = classify_tiled(x, y, pol, tiling=tiling, client=client, **kw)
        _return_free_memory()  # the tiles' results, freed: the next step starts lower
        calls[0] += 1
        if spill_dir is not None and calls[0] == 1 and cls.space_labels is None:
            path = Path(spill_dir) / "iota.npy"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, cls.iota)
            iota = np.load(path, mmap_mode="r")  # mapped, no page read
            cls = Classification(labels=cls.labels, iota=iota, iota_space=iota)
        return cls

    def grouper(*args: Any, subset: NDArray[np.int64] | None = None) -> Grouping:
        made = first.pop() if first else None  # the first group pass only
        grouping = group_tiled(
            *args, tiling=tiling, client=client, subset=subset, first_groups=made
        )  # fmt: skip
        del made
        _return_free_memory()
        return grouping

    # handed on: while run_core runs, this frame holds no reference to the tiebreak
    held = [tiebreak]
    del tiebreak
    return run_core(
        x, y, policy, subjects=subjects, times=times, unit_codes=unit_codes,
        unit_names=unit_names, parent_codes=parent_codes, parent_names=parent_names,
        tiebreak=held.pop(), enforce_caps=enforce_caps, progress=progress,
        classifier=classifier, grouper=grouper, compact=compact,
        spill_dir=spill_dir if compact else None,
    )  # fmt: skip


def run_core_on_distributed(
    table: PointTable,
    policy: OutlierPolicy,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    enforce_caps: bool = True,
    progress: Progress | None = None,
) -> CoreResult:
    """:func:`run_core_distributed` on a point table (as :func:`geokanon.pipeline.run_core_on`)."""
    from geokanon.pipeline import on_ground, record_tiebreak

    policy = on_ground(table, policy)  # r_max on the ground (geokanon.projection)
    return run_core_distributed(
        table.x, table.y, policy,
        subjects=table.subjects, times=table.times,
        unit_codes=table.unit_codes, unit_names=table.unit_names,
        tiebreak=record_tiebreak(table), enforce_caps=enforce_caps,
        tiling=tiling, client=client, progress=progress,
    )  # fmt: skip


def release_distributed(
    table: PointTable,
    policy: OutlierPolicy,
    out: str | Path,
    options: ReleaseOptions | None = None,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    check_determinism: bool | None = None,
    progress: Progress | None = None,
    on_refusal: Callable[[ReleaseRefused, PointTable], None] | None = None,
) -> ReleaseResult:
    """:func:`geokanon.pipeline.release_points` with the release core on a Dask cluster.

    The neighbour searches and the grouping run tile by tile on the cluster
    (``client``, or a cluster at ``scheduler``, or a local cluster); everything
    else is :func:`geokanon.pipeline.release_points` itself (masks, determinism
    check, refusal report): the release files are written by the driver, verified
    by :func:`geokanon.verify.verify_release` and renamed into place exactly as on
    one machine (all or nothing). A lost cluster raises :class:`DistributedError`
    before anything is written.

    Parameters
    ----------
    table, policy, out, options, check_determinism, progress
        As :func:`geokanon.pipeline.release_points`. The determinism check re-runs
        the distributed core on the rows in a shuffled order.
    tiling
        The tiles (default :meth:`Tiling.for_policy`).
    client, scheduler, n_workers
        See :func:`dask_client`.

    Returns
    -------
    geokanon.pipeline.ReleaseResult
    """
    from geokanon.pipeline import release_points

    with dask_client(client, scheduler=scheduler, n_workers=n_workers) as c:

        def runner(
            t: PointTable, p: OutlierPolicy, *, progress: Progress | None = None
        ) -> CoreResult:
            return run_core_on_distributed(t, p, tiling=tiling, client=c, progress=progress)

        return release_points(
            table, policy, out, options, check_determinism=check_determinism,
            progress=progress, core_runner=runner, on_refusal=on_refusal,
        )  # fmt: skip


def classify_points_distributed(
    table: PointTable,
    policy: OutlierPolicy,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
) -> Any:
    """:func:`geokanon.pipeline.classify_points` with the neighbour search over tiles on Dask.

    Returns
    -------
    geokanon.pipeline.ClassifyResult
        The same object, figures and verdicts as the single-machine function.
    """
    from geokanon.pipeline import on_ground, summarise_classification

    policy = on_ground(table, policy)  # r_max on the ground (geokanon.projection)
    with dask_client(client, scheduler=scheduler, n_workers=n_workers) as c:
        cls = classify_tiled(
            table.x, table.y, policy, subjects=table.subjects, times=table.times,
            tiling=tiling, client=c,
        )  # fmt: skip
    return summarise_classification(table, policy, cls)


# ----------------------------------------------------------------------------
# Partitioned sources: never materialised whole
# ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ParquetPartitions:
    """A directory of Parquet/GeoParquet files (or a list of files), one partition per file.

    ``load(i)`` returns a DataFrame with the canonical columns ``x``, ``y`` (metres
    of a projected CRS) and, when named, ``subject``, ``time`` (seconds) and
    ``unit``. A GeoParquet file without the named x/y columns gives its point
    geometry. Files are taken in sorted path order; a record's row number is its
    position in that order.

    Examples
    --------
    >>> ParquetPartitions(paths=("a.parquet",), unit="gm_code").unit
    'gm_code'
    """

    paths: tuple[str, ...]
    x: str = "x"
    y: str = "y"
    subject: str | None = None
    time: str | None = None
    unit: str | None = None

    @classmethod
    def from_path(cls, path: str | Path, **roles: Any) -> ParquetPartitions:
        """All ``*.parquet``/``*.geoparquet`` files under a directory (sorted), or one file."""
        p = Path(path)
        if p.is_dir():
            files = sorted(
                str(f) for f in p.rglob("*") if f.suffix in {".parquet", ".geoparquet", ".pq"}
            )
            if not files:
                raise InputError(f"directory {p.name!r} holds no .parquet files")
        elif p.exists():
            files = [str(p)]
        else:
            raise InputError(f"input {p.name!r} does not exist")
        clean = {k: v for k, v in roles.items() if v is not None}
        return cls(paths=tuple(files), **clean)

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, i: int) -> pd.DataFrame:
        """Partition ``i`` with canonical column names."""
        import pyarrow.parquet as pq

        path = self.paths[i]
        schema = pq.read_schema(path)
        names = set(schema.names)
        wanted = [c for c in (self.subject, self.time, self.unit) if c is not None]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise InputError(f"columns {missing} are missing from {Path(path).name!r}")
        use_geometry = not {self.x, self.y} <= names
        if use_geometry and "geometry" not in names:
            raise InputError(
                f"{Path(path).name!r} has neither the columns {self.x!r}/{self.y!r} nor a "
                "geometry column; name the coordinate columns with --x/--y"
            )
        cols = ["geometry" if use_geometry else c for c in (self.x, self.y)]
        frame = pq.read_table(path, columns=list(dict.fromkeys(cols + wanted))).to_pandas()
        out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
        if use_geometry:
            import shapely

            geom = shapely.from_wkb(frame["geometry"].to_numpy())
            out["x"] = shapely.get_x(geom)
            out["y"] = shapely.get_y(geom)
        else:
            # by position: a partition pandas wrote from a slice keeps the slice's index
            out["x"] = pd.to_numeric(frame[self.x], errors="coerce").to_numpy(dtype=np.float64)
            out["y"] = pd.to_numeric(frame[self.y], errors="coerce").to_numpy(dtype=np.float64)
        if self.subject is not None:
            out["subject"] = frame[self.subject].to_numpy()
        if self.time is not None:
            out["time"] = _seconds(frame[self.time])
        if self.unit is not None:
            out["unit"] = frame[self.unit].astype(str).to_numpy()
        return out

    def load_attributes(self, i: int, columns: Sequence[str]) -> pd.DataFrame:
        """Columns ``columns`` of partition ``i`` as they are (the ``--keep`` attributes)."""
        import pyarrow.parquet as pq

        path = self.paths[i]
        names = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise InputError(f"--keep names columns that are not in {Path(path).name!r}: {missing}")
        return pq.read_table(path, columns=list(columns)).to_pandas().reset_index(drop=True)

    def other_columns(self, i: int) -> tuple[str, ...]:
        """The attribute columns of partition ``i`` (not a coordinate, subject, time or unit)."""
        import pyarrow.parquet as pq

        roles = {self.x, self.y, self.subject, self.time, self.unit, "geometry"}
        return tuple(c for c in pq.read_schema(self.paths[i]).names if c not in roles)

    def file_sha256(self, i: int) -> str:
        """sha256 of partition ``i``'s file (the release's ``input_sha256`` combines them)."""
        from geokanon.io.read import sha256_file

        return sha256_file(self.paths[i])

    def roles(self) -> dict[str, Any]:
        """Column names and files, for the audit (``geokanon verify`` re-reads with them)."""
        return {
            "x": self.x, "y": self.y, "subject": self.subject, "time": self.time,
            "unit": self.unit, "partitions": len(self.paths),
        }  # fmt: skip


@dataclass(frozen=True)
class DaskFrameSource:
    """A Dask DataFrame seen as partitions with canonical columns (see :func:`frame_source`)."""

    frame: Any
    x: str = "x"
    y: str = "y"
    subject: str | None = None
    time: str | None = None
    unit: str | None = None

    def __len__(self) -> int:
        return int(self.frame.npartitions)

    def _part(self, i: int, columns: list[str]) -> pd.DataFrame:
        part = self.frame.get_partition(i)[columns].compute(scheduler="sync")
        return part.reset_index(drop=True)

    def load(self, i: int) -> pd.DataFrame:
        """Partition ``i`` with canonical column names."""
        roles = {"x": self.x, "y": self.y, "subject": self.subject, "time": self.time,
                 "unit": self.unit}  # fmt: skip
        cols = [c for c in roles.values() if c is not None]
        part = self._part(i, list(dict.fromkeys(cols)))
        out = pd.DataFrame(index=pd.RangeIndex(len(part)))
        out["x"] = pd.to_numeric(part[self.x], errors="coerce").to_numpy(dtype=np.float64)
        out["y"] = pd.to_numeric(part[self.y], errors="coerce").to_numpy(dtype=np.float64)
        if self.subject is not None:
            out["subject"] = part[self.subject].to_numpy()
        if self.time is not None:
            out["time"] = _seconds(part[self.time])
        if self.unit is not None:
            out["unit"] = part[self.unit].astype(str).to_numpy()
        return out

    def load_attributes(self, i: int, columns: Sequence[str]) -> pd.DataFrame:
        """Columns ``columns`` of partition ``i`` as they are."""
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise InputError(f"--keep names columns that are not in the frame: {missing}")
        return self._part(i, list(columns))

    def other_columns(self, i: int) -> tuple[str, ...]:
        """The attribute columns (not a coordinate, subject, time or unit)."""
        roles = {self.x, self.y, self.subject, self.time, self.unit}
        return tuple(str(c) for c in self.frame.columns if c not in roles)

    def roles(self) -> dict[str, Any]:
        """Column names, for the audit."""
        return {"x": self.x, "y": self.y, "subject": self.subject, "time": self.time,
                "unit": self.unit, "partitions": len(self)}  # fmt: skip


def frame_source(frame: Any, roles: dict[str, str | None]) -> DaskFrameSource:
    """A Dask DataFrame as a partitioned source; ``roles`` names x, y, subject, time, unit."""
    clean = {k: v for k, v in roles.items() if v is not None and k in
             ("x", "y", "subject", "time", "unit")}  # fmt: skip
    return DaskFrameSource(frame=frame, **clean)


def release_partitions(
    source: Any,
    policy: OutlierPolicy,
    out: str | Path,
    options: ReleaseOptions | None = None,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    roles: dict[str, str | None] | None = None,
    crs: str | None = None,
    scratch_dir: str | Path | None = None,
    records_per_part: int = RECORDS_PER_PART,
    check_determinism: bool | None = None,
    progress: Progress | None = None,
) -> Any:
    """The whole release of a partitioned source, never held in one process.

    The driver holds compact per-record arrays (coordinates, subject and unit
    codes, decisions: about 45-55 bytes a record at the peak of the core, see
    ``docs/dask.md`` "Limits"), never a frame of the records;
    reading, writing and verifying run as tasks, one per source partition or per
    release part. See :mod:`geokanon.release_tiles` for the stages and
    ``docs/release-format.md`` ("Partitioned layout") for the files.

    Parameters
    ----------
    source
        A :class:`ParquetPartitions`, a Dask DataFrame (with ``roles``), or any
        object with ``__len__``, ``load(i)`` (a DataFrame with ``x``, ``y`` and
        optionally ``subject``, ``unit``) and, with ``options.keep``,
        ``load_attributes(i, columns)``.
    policy
        The outlier policy.
    out
        Output directory ``DIR``: ``DIR/release`` (publishable), ``DIR/audit``.
    options
        :class:`geokanon.release.ReleaseOptions` (keep, totals, force); masks and
        another output CRS are refused.
    tiling
        The tiles (default :meth:`Tiling.for_policy`).
    client, scheduler, n_workers
        See :func:`dask_client`.
    roles
        For a Dask DataFrame: column names ``x``, ``y``, ``subject``, ``unit``.
    crs
        The CRS of the coordinates (recorded in the manifest; default unnamed).
    scratch_dir
        Where the routed pieces and the driver's spilled arrays go (every worker must
        read and write it); removed afterwards, also on failure. Default: the private
        build area beside ``out`` (``.geokanon-build/``, mode 0700), which the next
        geokanon run there empties if this one is killed.
    records_per_part
        About this many published records per ``records/part-NNNNN.parquet``.
    check_determinism
        Re-run the core on shuffled rows and require the same decisions
        (default: on up to 250,000 records).
    progress
        Called with a short stage name as each stage starts.

    Returns
    -------
    geokanon.release_tiles.PartitionedRelease
        ``out``, ``core`` (the decisions), ``manifest``.

    Raises
    ------
    ReleaseRefused
        A cap is breached or no fixed point; nothing is written but the refusal report.
    VerificationFailed
        A check of :func:`geokanon.verify.partitioned.verify_partitioned` failed; nothing is
        written.
    DistributedError
        The cluster failed; nothing is written.
    """
    from geokanon.release_tiles import release_partitions as run

    return run(
        source, policy, out, options, tiling=tiling, client=client, scheduler=scheduler,
        n_workers=n_workers, roles=roles, crs=crs, scratch_dir=scratch_dir,
        records_per_part=records_per_part, check_determinism=check_determinism,
        progress=progress,
    )  # fmt: skip


def _seconds(values: pd.Series) -> NDArray[np.float64]:
    if pd.api.types.is_datetime64_any_dtype(values):
        v = values.dt.tz_convert("UTC") if values.dt.tz is not None else values
        return v.astype("datetime64[ns]").astype(np.int64).to_numpy() / 1e9
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)


@dataclass(frozen=True)
class PartitionedClassification:
    """First-pass classification of a partitioned source, reduced across tiles.

    Attributes
    ----------
    policy
        The policy used.
    counts
        Records per label.
    n_records, n_subjects
        Totals over all partitions.
    subject_ids_merged
        Distinct subject ids merged into another (case, spacing, Unicode form).
    units, verdict
        Per-unit table and cap verdicts, as :func:`geokanon.pipeline.classify_points`
        computes them (reduced from per-tile pieces).
    tiles
        Number of occupied tiles.
    labels_out
        Directory of per-tile label files (``row``, ``label``, ``iota``), if written.
    rows, labels, iota
        Per record (row ids ``partition << 40 | position``, sorted), when asked for.
    """

    policy: OutlierPolicy
    counts: dict[str, int]
    n_records: int
    n_subjects: int
    units: UnitTable
    verdict: CapVerdict
    tiles: int
    subject_ids_merged: int = 0
    labels_out: str | None = None
    rows: NDArray[np.int64] | None = field(default=None, repr=False)
    labels: NDArray[np.uint8] | None = field(default=None, repr=False)
    iota: NDArray[np.float64] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The ``classify --json`` object (``iota_median`` only when labels were gathered)."""
        median = None
        if self.iota is not None:
            finite = self.iota[np.isfinite(self.iota)]
            median = float(np.median(finite)) if finite.size else None
        return {
            "k": self.policy.k,
            "r_max_m": self.policy.r_max_m,
            "tau": self.policy.tau,
            "unit_cap": self.policy.unit_cap,
            "records": self.n_records,
            "subjects": self.n_subjects,
            "subject_ids_merged": self.subject_ids_merged,
            "counts": dict(self.counts),
            "suppressed_share": self.verdict.suppressed_share,
            "disposal_share": self.verdict.disposal_share,
            "per_unit": self.units.rows(),
            "worst_unit": self.verdict.worst_unit,
            "worst_unit_share": self.verdict.worst_unit_share,
            "units_over_cap": list(self.verdict.units_over_cap),
            "passes_global_cap": self.verdict.passes_global_cap,
            "passes_unit_cap": self.verdict.passes_unit_cap,
            "many_disposals": self.verdict.many_disposals,
            "iota_median": median,
            "backend": "dask",
            "tiles": self.tiles,
        }


def _tile_name(key: int) -> str:
    ix, iy = unpack_key(np.asarray([key]))
    return f"t{int(ix[0])}_{int(iy[0])}"


def _bucket(
    frame: pd.DataFrame, part: int, tiling: Tiling, scratch: str
) -> tuple[int, list[int], int, NDArray[np.uint64] | None]:
    """Write one partition's records to the scratch pieces of their tile and of the halos.

    Subject ids are written normalised (:func:`geokanon.neighbours.factorize_subject_ids`),
    so every tile and the reduction see the spellings of one id as one subject.

    Returns the partition's record count, the keys of the tiles it owns records
    in, the number of halo copies written, and the hashes of its distinct raw
    subject ids (``None`` without a subject column).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(frame)
    if n == 0:
        return 0, [], 0, None
    raw_ids = None
    if "subject" in frame.columns:
        raw = frame["subject"]
        if not pd.api.types.is_numeric_dtype(raw.dtype):
            codes, texts, _ = factorize_subject_ids(raw)
            with_missing = np.empty(texts.size + 1, dtype=object)
            with_missing[:-1] = texts  # the last entry, None, is code -1: missing stays missing
            norm = with_missing[codes]
            frame = frame.assign(subject=norm)
        raw_ids = np.unique(
            pd.util.hash_array(np.asarray([str(u) for u in pd.unique(raw)], dtype=object))
        )
    x = frame["x"].to_numpy(dtype=np.float64)
    y = frame["y"].to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(x) & np.isfinite(y))
    if bad.any():
        raise InputError(
            f"{int(bad.sum())} records of partition {part} have missing, NaN or infinite "
            "coordinates; drop or fix them"
        )
    rows = (np.int64(part) << _ROW_BITS) | np.arange(n, dtype=np.int64)
    own = tiling.tile_keys(x, y)
    hrec, hkey = tiling.halo_pairs(x, y)
    idx = np.concatenate([np.arange(n, dtype=np.int64), hrec])
    keys = np.concatenate([own, hkey])
    owned = np.concatenate([np.ones(n, dtype=bool), np.zeros(hrec.size, dtype=bool)])
    order = np.argsort(keys, kind="stable")
    keys, idx, owned = keys[order], idx[order], owned[order]
    ukeys, start = np.unique(keys, return_index=True)
    bounds = np.r_[start, keys.size]
    extra = {c: frame[c].to_numpy() for c in ("subject", "time", "unit") if c in frame.columns}
    for t, key in enumerate(ukeys):
        sel = idx[bounds[t] : bounds[t + 1]]
        cols: dict[str, Any] = {
            "row": rows[sel],
            "x": x[sel],
            "y": y[sel],
            "own": owned[bounds[t] : bounds[t + 1]],
        }
        for c, v in extra.items():
            cols[c] = v[sel]
        d = Path(scratch) / _tile_name(int(key))
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), d / f"p{part:06d}.parquet", compression="none")
    return n, [int(k) for k in np.unique(own)], int(hrec.size), raw_ids


def _bucket_source(
    source: Any, part: int, tiling: Tiling, scratch: str
) -> tuple[int, list[int], int, NDArray[np.uint64] | None]:
    _single_thread_numba()
    return _bucket(source.load(part), part, tiling, scratch)


def _bucket_frame(
    frame: pd.DataFrame, part: int, tiling: Tiling, scratch: str, roles: dict[str, str | None]
) -> tuple[int, list[int], int, NDArray[np.uint64] | None]:
    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    out["x"] = pd.to_numeric(frame[roles["x"]], errors="coerce").to_numpy(dtype=np.float64)
    out["y"] = pd.to_numeric(frame[roles["y"]], errors="coerce").to_numpy(dtype=np.float64)
    if roles.get("subject"):
        out["subject"] = frame[roles["subject"]].to_numpy()
    if roles.get("time"):
        out["time"] = _seconds(frame[roles["time"]])
    if roles.get("unit"):
        out["unit"] = frame[roles["unit"]].astype(str).to_numpy()
    return _bucket(out, part, tiling, scratch)


@dataclass(frozen=True)
class _TileSummary:
    """What one tile sends back: small, bounded by the tile's records."""

    n: int
    counts: NDArray[np.int64]
    units: pd.DataFrame
    subject_pairs: pd.DataFrame | None
    rows: NDArray[np.int64] | None
    labels: NDArray[np.uint8] | None
    iota: NDArray[np.float64] | None


def _classify_tile_dir(
    tile_dir: str,
    policy: OutlierPolicy,
    labels_out: str | None,
    return_labels: bool,
) -> _TileSummary:
    """Classify one tile from its scratch pieces; reduce what the driver needs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _single_thread_numba()
    pieces = sorted(Path(tile_dir).glob("p*.parquet"))
    frame = pa.concat_tables([pq.read_table(p) for p in pieces]).to_pandas()
    own = frame["own"].to_numpy()
    order = np.r_[np.flatnonzero(own), np.flatnonzero(~own)]
    frame = frame.iloc[order].reset_index(drop=True)
    n_owned = int(own.sum())
    cls = classify_tile(
        frame["x"].to_numpy(),
        frame["y"].to_numpy(),
        n_owned,
        policy,
        subjects=frame["subject"].to_numpy() if "subject" in frame.columns else None,
        times=frame["time"].to_numpy() if "time" in frame.columns else None,
    )
    owned = frame.iloc[:n_owned]
    rows = owned["row"].to_numpy()
    sort = np.argsort(rows, kind="stable")
    labels = cls.labels
    unit = owned["unit"].to_numpy() if "unit" in owned.columns else np.full(n_owned, "all")
    sup = labels == Label.SUPPRESS
    units = (
        pd.DataFrame({"unit": unit, "records": 1, "suppressed": sup.astype(np.int64)})
        .groupby("unit", sort=True)
        .sum()
        .reset_index()
    )
    pairs = None
    if "subject" in owned.columns:
        pairs = pd.DataFrame(
            {"unit": unit, "subject": owned["subject"].to_numpy(), "suppressed": sup}
        ).drop_duplicates()
    if labels_out is not None:
        Path(labels_out).mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table({"row": rows[sort], "label": labels[sort], "iota": cls.iota[sort]}),
            Path(labels_out) / f"{Path(tile_dir).name}.parquet",
        )
    return _TileSummary(
        n=n_owned,
        counts=np.bincount(labels, minlength=len(Label)).astype(np.int64),
        units=units,
        subject_pairs=pairs,
        rows=rows[sort] if return_labels else None,
        labels=labels[sort] if return_labels else None,
        iota=cls.iota[sort] if return_labels else None,
    )


def _reduce_units(
    summaries: Sequence[_TileSummary], policy: OutlierPolicy
) -> tuple[UnitTable, CapVerdict, int, int]:
    """Per-unit table and cap verdicts from the tiles' pieces (same rules as one machine)."""
    units = (
        pd.concat([s.units for s in summaries], ignore_index=True)
        .groupby("unit", sort=True)[["records", "suppressed"]]
        .sum()
    )
    n = int(units["records"].sum())
    with_subjects = summaries[0].subject_pairs is not None
    if with_subjects:
        pairs = pd.concat([s.subject_pairs for s in summaries if s.subject_pairs is not None])
        all_pairs = pairs[["unit", "subject"]].drop_duplicates()
        sup_pairs = pairs.loc[pairs["suppressed"], ["unit", "subject"]].drop_duplicates()
        subj_per_unit = all_pairs.groupby("unit").size()
        sup_per_unit = sup_pairs.groupby("unit").size()
        units["subjects"] = subj_per_unit.reindex(units.index, fill_value=0)
        units["suppressed_subjects"] = sup_per_unit.reindex(units.index, fill_value=0)
        n_subjects = int(all_pairs["subject"].nunique())
        sup_subjects = int(sup_pairs["subject"].nunique())
    else:
        units["subjects"] = units["records"]
        units["suppressed_subjects"] = units["suppressed"]
        n_subjects = n
        sup_subjects = int(units["suppressed"].sum())
    names = units.index.to_numpy(dtype=object)
    sub = units["subjects"].to_numpy(dtype=np.int64)
    sup_sub = units["suppressed_subjects"].to_numpy(dtype=np.int64)
    share = np.divide(sup_sub, sub, out=np.zeros(sub.size), where=sub > 0)
    order = np.lexsort((names.astype(str), -sup_sub, -share))
    table = UnitTable(
        unit=names[order],
        records=units["records"].to_numpy(dtype=np.int64)[order],
        subjects=sub[order],
        suppressed=units["suppressed"].to_numpy(dtype=np.int64)[order],
        suppressed_subjects=sup_sub[order],
        share=share[order],
    )
    counts = np.sum([s.counts for s in summaries], axis=0)
    disposal_share = float(counts[1:].sum() / n) if n else 0.0
    glob = sup_subjects / n_subjects if n_subjects else 0.0
    over = tuple(
        str(u) for u, sh in zip(table.unit, table.share, strict=True) if sh > policy.unit_cap
    )
    many = disposal_share > policy.disposal_warning_share
    if many:
        from geokanon.errors import ParameterWarning

        warnings.warn(
            f"{disposal_share:.1%} of records need a disposal (warning above "
            f"{policy.disposal_warning_share:.0%}): the parameters, not the points, look like "
            "the problem; consider a lower k or a wider r_max_m",
            ParameterWarning,
            stacklevel=3,
        )
    verdict = CapVerdict(
        suppressed_records=int(counts[Label.SUPPRESS]),
        suppressed_subjects=sup_subjects,
        subjects=n_subjects,
        suppressed_share=glob,
        disposal_share=disposal_share,
        passes_global_cap=glob <= policy.tau,
        passes_unit_cap=not over,
        units_over_cap=over,
        worst_unit=str(table.unit[0]) if len(table) else None,
        worst_unit_share=float(table.share[0]) if len(table) else 0.0,
        many_disposals=many,
    )
    return table, verdict, n, n_subjects


def classify_partitions(
    source: Any,
    policy: OutlierPolicy,
    *,
    tiling: Tiling | None = None,
    client: Any = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    scratch_dir: str | Path | None = None,
    labels_out: str | Path | None = None,
    return_labels: bool = False,
    roles: dict[str, str | None] | None = None,
    progress: Progress | None = None,
) -> PartitionedClassification:
    """First-pass classification of data that never sits whole in one process.

    Two rounds of tasks. *Bucket*: each input partition is read and its records
    written to per-tile scratch pieces: to the tile that owns them, and as halo
    copies to every neighbouring tile within ``policy.search_radius_m``. *Tile*:
    each tile reads its pieces (owned records plus halo), classifies them
    (:func:`classify_tile`, exact), optionally writes the owned records' labels,
    and sends back label counts and per-unit pieces, which the driver reduces to
    the per-unit table and the cap verdicts. Memory per task is bounded by one
    input partition or one tile (with its halo), never by the total.

    Parameters
    ----------
    source
        A :class:`ParquetPartitions`, any object with ``__len__`` and ``load(i)``
        returning a DataFrame with columns ``x``, ``y`` and optionally ``subject``,
        ``time`` (seconds), ``unit``; or a Dask DataFrame (with ``roles``).
    policy
        The outlier policy.
    tiling
        The tiles (default :meth:`Tiling.for_policy`).
    client, scheduler, n_workers
        See :func:`dask_client`.
    scratch_dir
        Where the tile pieces go (a temporary directory by default; on a
        multi-machine cluster, a directory every worker can read and write).
        Removed afterwards, also on failure.
    labels_out
        Directory for the per-tile label files (``row``, ``label``, ``iota``).
    return_labels
        Also gather every record's row id, label and ``iota`` to the driver.
    roles
        For a Dask DataFrame: column names ``x``, ``y``, ``subject``, ``time``, ``unit``.
    progress
        Called with a short stage name as each stage starts.

    Returns
    -------
    PartitionedClassification
    """
    import dask

    say = progress or (lambda _stage: None)
    tiling = tiling or Tiling.for_policy(policy)
    _check_halo(tiling, policy)
    if policy.uses_time and not _has_time(source, roles):
        raise InputError(
            "t_max_s is set but no times were given; pass a time column or drop t_max_s"
        )
    base = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
    scratch = base / f"geokanon-tiles-{uuid.uuid4().hex[:12]}"
    scratch.mkdir(parents=True)
    try:
        with dask_client(client, scheduler=scheduler, n_workers=n_workers) as c:
            say("bucket records into tiles")
            if _is_dask_frame(source):
                r = dict(roles or {})
                r.setdefault("x", "x")
                r.setdefault("y", "y")
                parts = source.to_delayed()
                tasks = [
                    dask.delayed(_bucket_frame)(p, i, tiling, str(scratch), r)
                    for i, p in enumerate(parts)
                ]
            else:
                tasks = [
                    dask.delayed(_bucket_source)(source, i, tiling, str(scratch))
                    for i in range(len(source))
                ]
            futures = c.compute(tasks)
            bucketed = _gather(c, futures)
            n_total = sum(b[0] for b in bucketed)
            if n_total == 0:
                raise InputError("the input has no records; nothing to classify")
            keys = sorted({k for b in bucketed for k in b[1]})
            say(f"classify {len(keys)} tiles")
            out = None if labels_out is None else str(labels_out)
            payloads = [(str(scratch / _tile_name(k)), policy, out, return_labels) for k in keys]
            summaries = _run(c, _classify_tile_dir, payloads)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say("reduce per-unit tables")
    table, verdict, n, n_subjects = _reduce_units(summaries, policy)
    with_raw = [b[3] for b in bucketed if b[3] is not None]
    merged = int(np.unique(np.concatenate(with_raw)).size) - n_subjects if with_raw else 0
    if n_subjects < policy.k:
        raise InputError(
            f"the input holds {n_subjects} distinct subjects, fewer than k={policy.k}; "
            "no class of k subjects can exist: lower k or add records"
        )
    counts = np.sum([s.counts for s in summaries], axis=0)
    rows = labels = iota = None
    if return_labels:
        rows = np.concatenate([s.rows for s in summaries if s.rows is not None])
        labels = np.concatenate([s.labels for s in summaries if s.labels is not None])
        iota = np.concatenate([s.iota for s in summaries if s.iota is not None])
        order = np.argsort(rows, kind="stable")
        rows, labels, iota = rows[order], labels[order], iota[order]
    return PartitionedClassification(
        policy=policy,
        counts={lab.text: int(counts[lab]) for lab in Label},
        n_records=n,
        n_subjects=n_subjects,
        subject_ids_merged=merged,
        units=table,
        verdict=verdict,
        tiles=len(keys),
        labels_out=None if labels_out is None else str(labels_out),
        rows=rows,
        labels=labels,
        iota=iota,
    )


def _is_dask_frame(source: Any) -> bool:
    return hasattr(source, "to_delayed") and hasattr(source, "npartitions")


def _has_time(source: Any, roles: dict[str, str | None] | None) -> bool:
    if _is_dask_frame(source):
        return bool((roles or {}).get("time"))
    return getattr(source, "time", "unknown") is not None


def row_position(rows: ArrayLike, counts: Sequence[int]) -> NDArray[np.int64]:
    """Global 0-based row numbers of partitioned row ids, given the rows per partition.

    Examples
    --------
    >>> row_position([0, 1, (1 << 40) | 2], [2, 5]).tolist()
    [0, 1, 4]
    """
    r = np.asarray(rows, dtype=np.int64)
    offsets = np.r_[0, np.cumsum(np.asarray(counts, dtype=np.int64))]
    return offsets[r >> _ROW_BITS] + (r & ((1 << _ROW_BITS) - 1))

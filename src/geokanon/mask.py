"""Geomasks applied *before* classification: Gaussian jitter and donut masking.

The design note is explicit: "classify after the mask, not before, or the check
validates a dataset that was never published". Every function here is a pure
function over coordinate arrays in metres; the caller classifies what comes out.

Keyed noise
-----------
A record's displacement is not drawn from a generator that advances row by
row. It is a function of ``(key, subject, location rounded to
key_precision_m)``: SipHash-2-4 (a keyed pseudo-random function with a 128-bit
key) of the subject and the rounded location gives each record its own stream,
so:

- re-running with the same key reproduces every displacement exactly, and a
  custodian who re-publishes with it cannot hand out fresh noise for the same
  record (fresh noise could be averaged away across releases);
- permuting the input rows changes nothing;
- all records of one subject at one place share one displacement (were they
  jittered independently, their mean would sit close to the true place);
  records without a subject column are keyed by location alone, so co-located
  records share a displacement too.

The key (:class:`MaskKey`) is secret: whoever holds it can recompute the
displacement of any candidate location and so test guesses, or undo the mask.
It is drawn from the operating system's random source (:meth:`MaskKey.generate`)
or read from a file the custodian keeps (:meth:`MaskKey.from_file`), never
derived from the published ``seed``, and a release keeps it in
``audit/mask_key``, never in ``release/``.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray

from geokanon.errors import InputError, PrivacyRiskWarning
from geokanon.neighbours import factorize_subject_ids

__all__ = ["MaskKey", "MaskSpec", "apply_mask", "mask_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: Halvings of a record's first draw tried when no full-size draw stays inside its unit.
_SHRINK_STEPS = 8
#: A key (file) must hold at least this many bytes, of at least _KEY_MIN_DISTINCT values.
KEY_MIN_BYTES = 16
_KEY_MIN_DISTINCT = 8
#: BLAKE2b personalisation of the key derivation (the verifier derives the same way).
KEY_PERSON = b"geokanon-mask/1"


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(name: str, value: object, *, low: float, strict: bool) -> float:
    ok = _is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = v > low if strict else v >= low
    if not ok:
        rel = ">" if strict else ">="
        raise InputError(f"{name} must be a finite number {rel} {low:g} metres, got {value!r}")
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MaskKey:
    """The secret key of a geomask: it alone fixes every displacement.

    Parameters
    ----------
    material
        The key's bytes (surrounding ASCII whitespace is dropped, so a key file
        ending in a newline reads the same): at least 16 bytes, of at least 8
        distinct values. Its SipHash key is the 128-bit BLAKE2b digest of them.
    origin
        Where the key came from, for the audit (not part of the key).

    Raises
    ------
    InputError
        Too few bytes, or too few distinct ones, for a random key. The message
        never shows the bytes.

    Notes
    -----
    Keep the key with the audit and never publish it: with it, anyone who
    knows a candidate location can recompute its displacement. The ``repr``
    does not show it. The published ``seed`` plays no part in the mask.

    Examples
    --------
    >>> key = MaskKey.generate()
    >>> key == MaskKey(key.material), key == MaskKey.generate()
    (True, False)
    >>> repr(MaskKey(b"0123456789abcdef", origin="test"))
    "MaskKey(<secret>, origin='test')"
    >>> MaskKey(b"0000000000000000")
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: a mask key needs at least 8 distinct byte values, ...
    """

    material: bytes = field(repr=False)
    origin: str = field(default="given", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.material, bytes | bytearray):
            raise InputError(
                f"a mask key is bytes (MaskKey.generate() or MaskKey.from_file(path)), got "
                f"{type(self.material).__name__}; an integer seed is published and cannot "
                "key a mask"
            )
        m = bytes(self.material).strip()
        if len(m) < KEY_MIN_BYTES:
            raise InputError(
                f"a mask key needs at least {KEY_MIN_BYTES} bytes from a random source, got "
                f"{len(m)}; write one with `head -c 32 /dev/urandom > FILE`, or let geokanon "
                "draw one (it is kept in DIR/audit/mask_key)"
            )
        if len(set(m)) < _KEY_MIN_DISTINCT:
            raise InputError(
                f"a mask key needs at least {_KEY_MIN_DISTINCT} distinct byte values, got "
                f"{len(set(m))} in {len(m)} bytes: it is not random; write one with "
                "`head -c 32 /dev/urandom > FILE`"
            )
        object.__setattr__(self, "material", m)

    def __repr__(self) -> str:
        return f"MaskKey(<secret>, origin={self.origin!r})"

    @classmethod
    def generate(cls) -> MaskKey:
        """A fresh key of 256 bits from the operating system's random source (as hex text)."""
        return cls(
            secrets.token_hex(32).encode("ascii"),
            origin="drawn from the operating system's random source",
        )

    @classmethod
    def from_file(cls, path: str | Path, *, origin: str | None = None) -> MaskKey:
        """The key held in ``path`` (its bytes, surrounding whitespace dropped).

        Raises
        ------
        InputError
            The file is missing, unreadable, or too short or too regular for a
            random key; the message names the file, never its content.
        """
        p = Path(path)
        if not p.exists():
            raise InputError(
                f"mask key file {str(p)!r} does not exist; give a file of at least "
                f"{KEY_MIN_BYTES} random bytes (`head -c 32 /dev/urandom > FILE`), or the "
                "audit/mask_key of an earlier release, or omit --mask-key to draw a new key"
            )
        if not p.is_file():
            raise InputError(f"mask key file {str(p)!r} is not a regular file")
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise InputError(
                f"mask key file {str(p)!r} cannot be read ({type(exc).__name__})"
            ) from None
        try:
            return cls(data, origin=origin or f"key file {p}")
        except InputError as exc:
            raise InputError(f"mask key file {str(p)!r}: {exc}") from None

    def write(self, path: str | Path) -> None:
        """Write the key to a new file ``path`` readable by its owner only (mode 0600)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.material + b"\n")

    @property
    def words(self) -> tuple[int, int]:
        """The two 64-bit halves of the SipHash key (BLAKE2b-128 of the material)."""
        d = hashlib.blake2b(self.material, digest_size=16, person=KEY_PERSON).digest()
        return int.from_bytes(d[:8], "little"), int.from_bytes(d[8:], "little")


@dataclass(frozen=True, kw_only=True)
class MaskSpec:
    """What geomask to apply, validated on construction.

    Parameters
    ----------
    kind
        ``"jitter"``: a 2-D Gaussian displacement, each axis with standard
        deviation ``sd_m``. ``"donut"``: a displacement uniform over the ring
        between ``min_m`` and ``max_m`` (uniform by area), so no record stays
        closer than ``min_m`` to where it was and none moves farther than ``max_m``.
    sd_m
        Standard deviation per axis of the jitter, metres (jitter only, > 0).
    min_m
        Smallest displacement of the donut, metres (>= 0; jitter: must be 0).
    max_m
        Largest displacement, metres. Required for the donut; optional for the
        jitter, where it truncates the Gaussian (draws beyond it are redrawn).
    contain
        Keep each record inside its own administrative unit (needs unit polygons).
    max_tries
        Draws tried per record before the containment or truncation falls back.
    key_precision_m
        Locations are rounded to this step to key the noise, so a coordinate
        written with a few more or fewer decimals keeps its displacement.

    Raises
    ------
    InputError
        A parameter is missing, of the wrong kind or out of range; the message
        names it.

    Examples
    --------
    >>> MaskSpec(kind="donut", min_m=50.0, max_m=200.0).label
    'donut 50-200 m'
    >>> MaskSpec.jitter(sd_m=100.0).bounds_m
    (0.0, inf)
    >>> MaskSpec(kind="donut", min_m=300.0, max_m=200.0)
    Traceback (most recent call last):
    ...
    geokanon.errors.InputError: max_m must be greater than min_m for a donut mask, ...
    """

    kind: Literal["jitter", "donut"]
    sd_m: float | None = None
    min_m: float = 0.0
    max_m: float | None = None
    contain: bool = False
    max_tries: int = 25
    key_precision_m: float = 0.01

    def __post_init__(self) -> None:
        if self.kind not in ("jitter", "donut"):
            raise InputError(f"kind must be 'jitter' or 'donut', got {self.kind!r}")
        set_ = object.__setattr__
        if self.kind == "jitter":
            if self.sd_m is None:
                raise InputError("sd_m is required for a jitter mask (its standard deviation, m)")
            set_(self, "sd_m", _finite("sd_m", self.sd_m, low=0.0, strict=True))
            if self.min_m not in (0, 0.0):
                raise InputError(
                    f"min_m={self.min_m!r} applies to donut masks only; use kind='donut' "
                    "for a minimum displacement"
                )
            if self.max_m is not None:
                set_(self, "max_m", _finite("max_m", self.max_m, low=0.0, strict=True))
        else:
            if self.sd_m is not None:
                raise InputError(
                    f"sd_m={self.sd_m!r} applies to jitter masks only; a donut is set by "
                    "min_m and max_m"
                )
            set_(self, "min_m", _finite("min_m", self.min_m, low=0.0, strict=False))
            if self.max_m is None:
                raise InputError("max_m is required for a donut mask (its largest displacement)")
            max_m = _finite("max_m", self.max_m, low=0.0, strict=True)
            if not max_m > self.min_m:
                raise InputError(
                    f"max_m must be greater than min_m for a donut mask, got min_m={self.min_m:g}"
                    f", max_m={max_m:g}"
                )
            set_(self, "max_m", max_m)
        if not isinstance(self.contain, bool):
            raise InputError(f"contain must be true or false, got {self.contain!r}")
        t = self.max_tries
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 1000:
            raise InputError(f"max_tries must be an integer in [1, 1000], got {t!r}")
        set_(
            self,
            "key_precision_m",
            _finite("key_precision_m", self.key_precision_m, low=0.0, strict=True),
        )

    @classmethod
    def jitter(cls, *, sd_m: float, max_m: float | None = None, contain: bool = False) -> MaskSpec:
        """A Gaussian jitter of ``sd_m`` metres per axis (optionally truncated at ``max_m``)."""
        return cls(kind="jitter", sd_m=sd_m, max_m=max_m, contain=contain)

    @classmethod
    def donut(cls, *, min_m: float, max_m: float, contain: bool = False) -> MaskSpec:
        """A donut mask: every record moves between ``min_m`` and ``max_m`` metres."""
        return cls(kind="donut", min_m=min_m, max_m=max_m, contain=contain)

    @property
    def bounds_m(self) -> tuple[float, float]:
        """Smallest and largest displacement any record can receive, metres."""
        if self.kind == "donut":
            assert self.max_m is not None
            return (self.min_m, self.max_m)
        return (0.0, math.inf if self.max_m is None else self.max_m)

    @property
    def label(self) -> str:
        """Short human-readable name used in tables and plots."""
        contain = ", contained" if self.contain else ""
        if self.kind == "donut":
            return f"donut {self.min_m:g}-{self.max_m:g} m{contain}"
        cut = f" (max {self.max_m:g} m)" if self.max_m is not None else ""
        return f"jitter sd {self.sd_m:g} m{cut}{contain}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping with the spec's own names."""
        return {
            "kind": self.kind,
            "sd_m": self.sd_m,
            "min_m": self.min_m,
            "max_m": self.max_m,
            "contain": self.contain,
            "max_tries": self.max_tries,
            "key_precision_m": self.key_precision_m,
        }


# ----------------------------------------------------------------------------
# Counter-based hashing (splitmix64 finaliser), vectorised over uint64 arrays.
# ----------------------------------------------------------------------------


def _mix(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64: a bijective avalanche on uint64 (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _uniform(key: NDArray[np.uint64], counter: int) -> NDArray[np.float64]:
    """The ``counter``-th uniform in [0, 1) of every key's stream (53-bit resolution)."""
    c = _mix(np.asarray([counter], dtype=np.uint64))[0]
    bits = _mix(key ^ c)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _subject_hashes(subjects: ArrayLike | None, n: int) -> NDArray[np.uint64]:
    if subjects is None:
        return np.zeros(n, dtype=np.uint64)
    arr = np.asarray(subjects)
    if arr.shape != (n,):
        raise InputError(f"subjects must hold one id per record ({n}), got shape {arr.shape}")
    import pandas as pd

    if arr.dtype.kind in "iu":
        # The id's text, so 7 and "7" (CSV versus Parquet) key the same noise.
        return text_hashes(arr)
    if arr.dtype.kind in "fb":
        return np.asarray(pd.util.hash_array(arr.astype(str).astype(object)), dtype=np.uint64)
    # Text ids by their normalised text: the spellings of one id are one subject (one noise).
    codes, texts, _ = factorize_subject_ids(arr)
    hashes = text_hashes(np.append(texts, "None"))
    return hashes[codes]  # a missing id (code -1) keys as the text "None", as before


_SIP_V0 = np.uint64(0x736F6D6570736575)
_SIP_V1 = np.uint64(0x646F72616E646F6D)
_SIP_V2 = np.uint64(0x6C7967656E657261)
_SIP_V3 = np.uint64(0x7465646279746573)
#: SipHash's last block for a 24-byte message: the length in its top byte.
_SIP_LAST = np.uint64(24 << 56)


@nb.njit(cache=True, inline="always")
def _rotl(x: np.uint64, b: int) -> np.uint64:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@nb.njit(cache=True, inline="always")
def _sip_round(
    v0: np.uint64, v1: np.uint64, v2: np.uint64, v3: np.uint64
) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    v0 += v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16) ^ v2
    v0 += v3
    v3 = _rotl(v3, 21) ^ v0
    v2 += v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@nb.njit(cache=True)
def _siphash24_3(
    k0: np.uint64,
    k1: np.uint64,
    a: NDArray[np.uint64],
    b: NDArray[np.uint64],
    c: NDArray[np.uint64],
) -> NDArray[np.uint64]:  # pragma: no cover - compiled
    """SipHash-2-4 of the 24-byte little-endian message ``(a[i], b[i], c[i])`` per record."""
    out = np.empty(a.size, dtype=np.uint64)
    for i in range(a.size):
        v0 = k0 ^ _SIP_V0
        v1 = k1 ^ _SIP_V1
        v2 = k0 ^ _SIP_V2
        v3 = k1 ^ _SIP_V3
        for m in (a[i], b[i], c[i], _SIP_LAST):
            v3 ^= m
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
            v0 ^= m
        v2 ^= np.uint64(0xFF)
        for _ in range(4):
            v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        out[i] = v0 ^ v1 ^ v2 ^ v3
    return out


#: The key pandas hashes text with (``pandas.util.hash_array``'s default ``hash_key``).
_PANDAS_KEY = b"0123456789123456"


@nb.njit(cache=True, inline="always")
def _sip_text(
    k0: np.uint64, k1: np.uint64, data: NDArray[np.uint8], a: int, length: int
) -> np.uint64:  # pragma: no cover - compiled
    """SipHash-2-4 of ``data[a:a + length]``, then pandas' avalanche (``hash_array``)."""
    v0 = k0 ^ _SIP_V0
    v1 = k1 ^ _SIP_V1
    v2 = k0 ^ _SIP_V2
    v3 = k1 ^ _SIP_V3
    blocks = length // 8
    for blk in range(blocks + 1):
        m = np.uint64(0)
        if blk < blocks:
            for j in range(8):
                m |= np.uint64(data[a + 8 * blk + j]) << np.uint64(8 * j)
        else:  # the last block: the remaining bytes and the length in the top byte
            for j in range(length - 8 * blocks):
                m |= np.uint64(data[a + 8 * blk + j]) << np.uint64(8 * j)
            m |= np.uint64(length & 0xFF) << np.uint64(56)
        v3 ^= m
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        v0 ^= m
    v2 ^= np.uint64(0xFF)
    for _ in range(4):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    h = v0 ^ v1 ^ v2 ^ v3
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@nb.njit(cache=True, parallel=True)
def _siphash24_texts(
    k0: np.uint64, k1: np.uint64, data: NDArray[np.uint8], offsets: NDArray[np.int64]
) -> NDArray[np.uint64]:  # pragma: no cover - compiled
    """:func:`_sip_text` of every ``data[offsets[i]:offsets[i + 1]]`` (each on its own)."""
    n = offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    for i in nb.prange(n):
        out[i] = _sip_text(k0, k1, data, offsets[i], offsets[i + 1] - offsets[i])
    return out


#: Values hashed per task of :func:`_siphash24_decimal` (its buffers are the task's own).
_DECIMAL_CHUNK = 1 << 16


@nb.njit(cache=True, parallel=True)
def _siphash24_decimal(
    k0: np.uint64, k1: np.uint64, values: NDArray[np.int64]
) -> NDArray[np.uint64]:  # pragma: no cover - compiled
    """:func:`_sip_text` of the decimal text of every int64 (as ``str`` writes it); chunks
    of values on their own threads, each value on its own."""
    out = np.empty(values.size, dtype=np.uint64)
    n_chunks = (values.size + _DECIMAL_CHUNK - 1) // _DECIMAL_CHUNK
    for c in nb.prange(n_chunks):
        buf = np.empty(24, dtype=np.uint8)
        digits = np.empty(24, dtype=np.uint8)
        for i in range(c * _DECIMAL_CHUNK, min((c + 1) * _DECIMAL_CHUNK, values.size)):
            v = values[i]
            n = 0
            if v < 0:
                buf[0] = 45  # "-"
                n = 1
            # digits of |v| as an unsigned number (|-2**63| does not fit in int64)
            u = np.uint64(v) if v >= 0 else np.uint64(0) - np.uint64(v)
            d = 0
            while True:
                digits[d] = np.uint8(48 + u % np.uint64(10))
                u //= np.uint64(10)
                d += 1
                if u == 0:
                    break
            for j in range(d):
                buf[n + j] = digits[d - 1 - j]
            out[i] = _sip_text(k0, k1, buf, 0, n + d)
    return out


def _arrow_text(arr: NDArray[Any]) -> tuple[NDArray[np.int64], NDArray[np.uint8]] | None:
    """Offsets and UTF-8 bytes of the text of integers or of ``str`` values (Arrow), or None."""
    import pandas as pd

    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return None
    try:
        if arr.dtype.kind in "iu":
            text = pc.cast(pa.array(arr), pa.large_string())
        elif arr.dtype.kind in "OU" and pd.api.types.infer_dtype(arr, skipna=False) in (
            "string",
            "empty",
        ):
            text = pa.array(arr, type=pa.large_string())
        else:
            return None
    except (ValueError, TypeError, UnicodeError, pa.ArrowException):  # e.g. lone surrogates
        return None
    if text.null_count:
        return None
    bufs = text.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def text_hashes(values: ArrayLike) -> NDArray[np.uint64]:
    """``pandas.util.hash_array`` of the text of each value, without a Python string each.

    The same 64-bit keys as ``pd.util.hash_array(np.asarray([str(v) for v in values],
    dtype=object))``: SipHash-2-4 of the UTF-8 text under pandas' default key, then
    pandas' avalanche. Integers are hashed from their decimal text written in the
    kernel (as ``str`` writes them), text from Arrow's UTF-8 buffer; anything else
    (floats, whose text Arrow writes differently, or text Arrow cannot encode)
    goes through pandas.

    Examples
    --------
    >>> import pandas as pd
    >>> ids = np.array([7, -12, 0])
    >>> bool((text_hashes(ids) == pd.util.hash_array(ids.astype(str).astype(object))).all())
    True
    """
    import pandas as pd

    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError("text_hashes takes one value per element of a 1-d array")
    k0 = np.uint64(int.from_bytes(_PANDAS_KEY[:8], "little"))
    k1 = np.uint64(int.from_bytes(_PANDAS_KEY[8:], "little"))
    if arr.dtype.kind == "i" or (arr.dtype.kind == "u" and (not arr.size or arr.max() < 2**63)):
        return _siphash24_decimal(k0, k1, arr.astype(np.int64, copy=False))
    text = _arrow_text(arr)
    if text is not None:
        offsets, data = text
        return _siphash24_texts(k0, k1, data, offsets)
    texts = arr if arr.dtype.kind == "O" else np.asarray([str(v) for v in arr.tolist()], object)
    return np.asarray(pd.util.hash_array(texts, categorize=False), dtype=np.uint64)


def mask_keys(
    x: ArrayLike,
    y: ArrayLike,
    *,
    key: MaskKey,
    subjects: ArrayLike | None = None,
    key_precision_m: float = 0.01,
) -> NDArray[np.uint64]:
    """The uint64 noise key of every record: SipHash, keyed by ``key``, of (subject, location).

    Parameters
    ----------
    x, y
        Coordinates in metres.
    key
        The secret :class:`MaskKey`.
    subjects
        Subject id per record (any dtype; hashed by its text), or ``None``.
    key_precision_m
        Rounding step of the location, metres.

    Returns
    -------
    numpy.ndarray
        ``uint64`` keys; equal keys receive equal displacements.

    Examples
    --------
    >>> key = MaskKey(b"an example key, not a secret one")
    >>> k = mask_keys([0.0, 0.0, 5.0], [0.0, 0.0, 0.0], key=key, subjects=["a", "a", "a"])
    >>> bool(k[0] == k[1]), bool(k[0] == k[2])
    (True, False)
    """
    if not isinstance(key, MaskKey):
        raise InputError(
            f"key must be a MaskKey (MaskKey.generate() or MaskKey.from_file(path)), got "
            f"{type(key).__name__}; the published seed cannot key a mask"
        )
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    xi = np.round(xa / key_precision_m).astype(np.int64).view(np.uint64).ravel()
    yi = np.round(ya / key_precision_m).astype(np.int64).view(np.uint64).ravel()
    k0, k1 = key.words
    subj = _subject_hashes(subjects, xa.size)
    return _siphash24_3(np.uint64(k0), np.uint64(k1), subj, xi, yi).reshape(xa.shape)


def _draw(
    spec: MaskSpec, key: NDArray[np.uint64], attempt: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Radius and angle of draw number ``attempt`` for every key."""
    u = _uniform(key, 2 * attempt)
    v = _uniform(key, 2 * attempt + 1)
    theta = 2.0 * math.pi * v
    if spec.kind == "donut":
        lo, hi = spec.bounds_m
        radius = np.sqrt(lo * lo + u * (hi * hi - lo * lo))
    else:
        assert spec.sd_m is not None
        # Rayleigh radius of a 2-D Gaussian; 1 - u lies in (0, 1].
        radius = spec.sd_m * np.sqrt(-2.0 * np.log1p(-u))
    return radius, theta


def apply_mask(
    x: ArrayLike,
    y: ArrayLike,
    spec: MaskSpec,
    *,
    key: MaskKey,
    subjects: ArrayLike | None = None,
    unit_polygons: Sequence[Any] | None = None,
    unit_codes: ArrayLike | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Displace every record by a keyed geomask; classify the result, not the input.

    Parameters
    ----------
    x, y
        Coordinates in metres of a projected CRS.
    spec
        The mask.
    key
        The secret :class:`MaskKey` keying all the noise (see the module notes).
    subjects
        Subject id per record, or ``None`` (records keyed by location only).
    unit_polygons
        With ``spec.contain``: one shapely (multi)polygon per unit code, in the
        coordinates' CRS. Only unit *codes* cannot keep a record inside its unit,
        so containment without polygons is refused.
    unit_codes
        With ``spec.contain``: integer unit code per record, indexing ``unit_polygons``.

    Returns
    -------
    mx, my
        Masked coordinates (float64, metres).

    Raises
    ------
    InputError
        Mismatched lengths, non-finite coordinates, or containment asked
        without unit polygons.

    Warns
    -----
    PrivacyRiskWarning
        When containment had to shrink some displacements below what the mask
        would have drawn (a count, never a location).
    UserWarning
        When some records could not be kept inside their unit at all.

    Notes
    -----
    Every displacement stays within :attr:`MaskSpec.bounds_m`, containment
    included: a record that no draw keeps inside its unit is first moved by
    halving its first draw (a donut never below ``min_m``); failing that it
    keeps its first draw and is counted as not contained.

    Examples
    --------
    >>> import numpy as np
    >>> spec = MaskSpec.donut(min_m=10.0, max_m=20.0)
    >>> key = MaskKey.generate()
    >>> mx, my = apply_mask([0.0, 100.0], [0.0, 0.0], spec, key=key)
    >>> d = np.hypot(mx - [0.0, 100.0], my)
    >>> bool(((d >= 10) & (d <= 20)).all())
    True
    >>> bool((apply_mask([100.0, 0.0], [0.0, 0.0], spec, key=key)[0] == mx[::-1]).all())
    True
    """
    if not isinstance(spec, MaskSpec):
        raise InputError(f"spec must be a MaskSpec, got {type(spec).__name__}")
    xa = np.ascontiguousarray(x, dtype=np.float64)
    ya = np.ascontiguousarray(y, dtype=np.float64)
    if xa.ndim != 1 or ya.shape != xa.shape:
        raise InputError(f"x and y must be 1-D of equal length, got {xa.shape} and {ya.shape}")
    n = xa.size
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        bad = int((~(np.isfinite(xa) & np.isfinite(ya))).sum())
        raise InputError(f"{bad} records have NaN or infinite coordinates; drop or fix them")
    codes = None
    geoms = None
    if spec.contain:
        if unit_polygons is None:
            raise InputError(
                "containment in the record's own unit needs unit polygons; with only unit "
                "codes there is no boundary to test a displaced point against. Give the "
                "unit polygons (--mask-units FILE) or drop the containment (contain=False)"
            )
        if unit_codes is None:
            raise InputError("containment needs unit_codes: one unit code per record")
        codes = np.asarray(unit_codes, dtype=np.int64)
        if codes.shape != (n,):
            raise InputError(f"unit_codes must hold one code per record ({n}), got {codes.shape}")
        geoms = _polygon_array(unit_polygons, codes)
    streams = mask_keys(xa, ya, key=key, subjects=subjects, key_precision_m=spec.key_precision_m)
    if n == 0:
        return xa.copy(), ya.copy()
    _, hi = spec.bounds_m
    radius, theta = _draw(spec, streams, 0)
    first_r, first_t = radius.copy(), theta.copy()
    pending = np.ones(n, dtype=bool)
    for attempt in range(spec.max_tries):
        if attempt:
            idx = np.flatnonzero(pending)
            radius[idx], theta[idx] = (a[idx] for a in _draw(spec, streams, attempt))
        ok = pending & (radius <= hi)
        if geoms is not None and ok.any():
            idx = np.flatnonzero(ok)
            inside = _inside(
                geoms,
                codes,  # type: ignore[arg-type]
                idx,
                xa[idx] + radius[idx] * np.cos(theta[idx]),
                ya[idx] + radius[idx] * np.sin(theta[idx]),
            )
            ok[idx[~inside]] = False
        pending &= ~ok
        if not pending.any():
            break
    if pending.any():
        # Truncation or containment failed for these: fall back on the first draw.
        idx = np.flatnonzero(pending)
        radius[idx] = np.minimum(first_r[idx], hi)
        theta[idx] = first_t[idx]
        if geoms is not None:
            _shrink(spec, xa, ya, codes, geoms, idx, radius, theta)  # type: ignore[arg-type]
    mx = xa + radius * np.cos(theta)
    my = ya + radius * np.sin(theta)
    return mx, my


def _polygon_array(unit_polygons: Sequence[Any], codes: NDArray[np.int64]) -> NDArray[Any]:
    import shapely

    geoms = np.asarray(list(unit_polygons), dtype=object)
    if codes.size and (codes.min() < 0 or codes.max() >= geoms.size):
        raise InputError(
            f"unit_codes index {geoms.size} unit polygons, but some codes are outside "
            f"[0, {geoms.size}); give one polygon per unit"
        )
    used = np.unique(codes)
    missing = [int(c) for c in used if geoms[c] is None or shapely.is_empty(geoms[c])]
    if missing:
        raise InputError(
            f"{len(missing)} units that hold records have no polygon, so their records "
            "cannot be kept inside them; give a polygon for every unit or drop containment"
        )
    shapely.prepare(geoms[used])
    return geoms


def _inside(
    geoms: NDArray[Any],
    codes: NDArray[np.int64],
    idx: NDArray[np.intp],
    px: NDArray[np.float64],
    py: NDArray[np.float64],
) -> NDArray[np.bool_]:
    import shapely

    return np.asarray(shapely.contains_xy(geoms[codes[idx]], px, py), dtype=bool)


def _shrink(
    spec: MaskSpec,
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    codes: NDArray[np.int64],
    geoms: NDArray[Any],
    idx: NDArray[np.intp],
    radius: NDArray[np.float64],
    theta: NDArray[np.float64],
) -> None:
    """Halve the first draw of records no draw kept inside their unit (in place)."""
    lo, _ = spec.bounds_m
    base = radius[idx].copy()
    pending = np.ones(idx.size, dtype=bool)
    shrunk = np.zeros(idx.size, dtype=bool)
    for step in range(1, _SHRINK_STEPS + 1):
        p = np.flatnonzero(pending)
        if not p.size:
            break
        r = np.maximum(base[p] * 0.5**step, lo)
        t = theta[idx[p]]
        inside = _inside(
            geoms, codes, idx[p], xa[idx[p]] + r * np.cos(t), ya[idx[p]] + r * np.sin(t)
        )
        good = p[inside]
        radius[idx[good]] = r[inside]
        shrunk[good] = True
        pending[good] = False
        if lo > 0 and (base[p] * 0.5**step <= lo).all():
            break
    n_shrunk = int(shrunk.sum())
    n_out = int(pending.sum())
    if n_shrunk:
        warnings.warn(
            f"{n_shrunk} records could be kept inside their unit only with a smaller "
            f"displacement than the {spec.label} mask drew (their unit is small or they "
            "sit near its edge); their protection is weaker than the mask's nominal level",
            PrivacyRiskWarning,
            stacklevel=3,
        )
    if n_out:
        warnings.warn(
            f"{n_out} records could not be kept inside their unit within the mask's bounds "
            f"({spec.max_tries} draws, then {_SHRINK_STEPS} halvings); they keep their "
            "first draw and lie outside their unit",
            UserWarning,
            stacklevel=3,
        )

"""64-bit SimHash fingerprints (Charikar) over weighted word features, and Hamming distance.

A fingerprint is an unsigned ``int`` in ``[0, 2**64)``. Bit ``i`` (``0`` = least significant) is
set when the features whose hash has bit ``i`` set carry more than half of the total weight.

Features (:func:`features`): the page's tokens (:func:`crawler.content.text.tokens`), or word n-gram
shingles of them (``SIMHASH_SHINGLE`` = n), each weighted ``1 + floor(log2(count))`` so that a
word repeated 10,000 times weighs 14, no weight ever reaches the 255 at which ``simhash`` 2.1.2
overflows on numpy 2, and one frequent word cannot outvote the rest of the page.

Feature hash: XXH3-64 of the feature's UTF-8 bytes. :func:`fingerprint` gives bit-identical
results to ``simhash.Simhash(list of (feature, weight), hashfunc=feature_hash).value`` for
integer weights below 256 (proved by the tests on real pages) and is several times faster
(``bench/simhash.py``). The vote over the hashes' bits is C (``crawler/content/_majority.c``,
built by setup.py: about half the numpy path's time a page). Where it is not built: a
vectorized (numpy) vote, and until numpy is loaded (~40 ms, ~11 MiB: a small crawl may never
need it), the first :data:`PURE_PAGES` fingerprints of at most :data:`PURE_FEATURES_MAX`
features are made in pure Python (:func:`_fingerprint_pure`, bit-identical; ~0.5 ms for 64
features, ~2 ms for 1,000, ~8 ms for 3,000, 5-15 times the numpy time): a crawl of a few
pages of any usual size never loads numpy, a longer one loads it at its ninth page, and every
page after that takes the numpy path. The three answer the same (tested).

Limits: a fingerprint of few features is unstable (one edit flips many bits), so the pipeline
only compares pages with at least ``SIMHASH_MIN_TOKENS`` tokens; every page without features has
fingerprint 0. Changing the hash, the token rules or the weighting changes every fingerprint:
fingerprints stored by another version are not comparable.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

import xxhash

from crawler.content.text import normalize

__all__ = [
    "BITS",
    "content_hash",
    "feature_hash",
    "features",
    "fingerprint",
    "hamming",
    "simhash",
    "to_hex",
    "to_signed",
    "to_unsigned",
]

BITS = 64
_MASK = (1 << BITS) - 1
_UINT32_SAFE = 1 << 31
#: Fingerprints made without numpy while it is not loaded (module docstring) ...
PURE_PAGES = 8
#: ... each of at most this many features (a larger page loads numpy at once)
PURE_FEATURES_MAX = 4096
_pure_left = PURE_PAGES
_np: ModuleType | None = None  # numpy, once a fingerprint needed it (or something else loaded it)
_BIG_ENDIAN_U64: Any = None  # numpy's dtype(">u8"), made with _np

feature_hash = xxhash.xxh3_64_intdigest  # bytes -> unsigned 64-bit int

try:  # the vote in C (setup.py builds it; the numpy and pure paths below are its spec)
    from crawler.content._majority import majority as _majority
except ImportError:  # not built (the scrapyd egg, no compiler): numpy, or pure Python at first
    _majority = None  # type: ignore[assignment]


def features(tokens: Sequence[str], shingle: int = 1) -> dict[str, int]:
    """Weighted features of ``tokens``: word n-grams (n = ``shingle``) with log-scaled counts.

    With fewer tokens than ``shingle``, the single run of all tokens is the one feature.
    """
    if shingle < 1:
        raise ValueError(f"shingle must be >= 1, got {shingle!r}")
    if shingle == 1:
        counts = Counter(tokens)
    elif len(tokens) < shingle:
        counts = Counter([" ".join(tokens)] if tokens else [])
    else:
        grams = zip(*(tokens[i:] for i in range(shingle)), strict=False)
        counts = Counter(" ".join(gram) for gram in grams)
    return {feature: count.bit_length() for feature, count in counts.items()}


def fingerprint(weighted: Mapping[str, int] | Iterable[tuple[str, int]]) -> int:
    """The 64-bit SimHash of ``{feature: weight}`` (or ``(feature, weight)`` pairs).

    Weights must be non-negative integers (below 2**62 in total); no features, or a total weight
    of 0, give 0.
    """
    if not isinstance(weighted, Mapping):
        weighted = dict(weighted)
    count = len(weighted)
    if not count:
        return 0
    if _majority is not None:
        return _majority(list(map(feature_hash, _encoded(weighted, count))),
                         list(weighted.values()))  # fmt: skip
    np = _np
    if np is None:
        global _pure_left
        if _pure_left > 0 and count <= PURE_FEATURES_MAX and "numpy" not in sys.modules:
            _pure_left -= 1
            return _fingerprint_pure(weighted, count)
        np = _load_numpy()
    hashes = np.array(list(map(feature_hash, _encoded(weighted, count))), dtype=np.uint64)
    total = sum(weighted.values())
    # einsum over uint32 (no BLAS threads for a small product); int64 when a sum could overflow.
    dtype = np.uint32 if total < _UINT32_SAFE else np.int64
    weights = np.fromiter(weighted.values(), dtype=dtype, count=count)
    # Row r holds the 64 bits of hash r, most significant first (as simhash.Simhash unpacks them).
    bits = np.unpackbits(hashes.astype(_BIG_ENDIAN_U64).view(np.uint8).reshape(count, 8), axis=1)
    sums = np.einsum("i,ij->j", weights, bits)  # type: ignore[arg-type]
    # sum > total / 2  <=>  sum > total // 2 for integers: no float, no widening copy.
    return int.from_bytes(np.packbits(sums > (total >> 1)).tobytes(), "big")


def _fingerprint_pure(weighted: Mapping[str, int], count: int) -> int:
    """:func:`fingerprint` without numpy: the hashes side by side in one integer (hash ``i`` in
    bits ``64 i`` to ``64 i + 63``), and per weight a mask of its features' bit 0 (bit ``64 i``);
    the weight of the features with bit ``j`` set is then, summed over the weights, ``w *
    popcount((hashes >> j) & mask)``."""
    hashes = b"".join(h.to_bytes(8, "little")
                      for h in map(feature_hash, _encoded(weighted, count)))  # fmt: skip
    side_by_side = int.from_bytes(hashes, "little")
    masks: dict[int, int] = {}
    for i, weight in enumerate(weighted.values()):
        if weight:
            masks[weight] = masks.get(weight, 0) | 1 << (BITS * i)
    half = sum(weighted.values()) >> 1
    groups = list(masks.items())
    value = 0
    for j in range(BITS):
        shifted = side_by_side >> j
        if sum(weight * (shifted & mask).bit_count() for weight, mask in groups) > half:
            value |= 1 << j
    return value


def _load_numpy() -> ModuleType:
    """numpy, imported once, with the dtype the numpy path uses."""
    global _np, _BIG_ENDIAN_U64
    import numpy

    _BIG_ENDIAN_U64 = numpy.dtype(">u8")
    _np = numpy
    return numpy


def _encoded(weighted: Mapping[str, int], count: int) -> list[bytes]:
    """UTF-8 bytes of every feature; one encode and split when no feature holds a newline."""
    parts = "\n".join(weighted).encode("utf-8").split(b"\n")
    if len(parts) == count:
        return parts
    return [feature.encode("utf-8") for feature in weighted]


def simhash(tokens: Sequence[str], shingle: int = 1) -> int:
    """Fingerprint of a token list: ``fingerprint(features(tokens, shingle))``."""
    return fingerprint(features(tokens, shingle))


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned)."""
    return ((a ^ b) & _MASK).bit_count()


def content_hash(text: str) -> str:
    """Hex BLAKE2b-128 of :func:`crawler.content.text.normalize` (text): equal for exact copies.

    Copies differing only in case, Unicode compatibility forms or whitespace hash equal.
    """
    return hashlib.blake2b(normalize(text).encode("utf-8"), digest_size=16).hexdigest()


def to_signed(value: int) -> int:
    """Unsigned 64-bit fingerprint to the signed form a BIGINT column holds."""
    value &= _MASK
    return value - (1 << BITS) if value >> (BITS - 1) else value


def to_unsigned(value: int) -> int:
    """Signed (BIGINT) or unsigned fingerprint to the unsigned form."""
    return value & _MASK


def to_hex(value: int | str | None) -> str | None:
    """16 lower-case hex digits (the drop log's format) of a fingerprint: an int of either
    sign (signed BIGINT or unsigned) or hex text; None for None or ``""``."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = int(value, 16)
    return f"{value & _MASK:016x}"

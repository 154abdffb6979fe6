"""A Bloom layer's probes in C (``_bloomprobe.c``; :class:`crawler.backends.bloom.BloomLayer`'s
Python loops are their specification)."""

from collections.abc import Sequence

from crawler.backends.bloom import Bits

def contains_many(bits: Bits, m: int, k: int, keys: Sequence[bytes], /) -> list[bool] | None:
    """``[key in layer for key in keys]``; None when a key is shorter than 16 bytes."""

def add(bits: Bits, m: int, k: int, key: bytes, /) -> int:
    """Set the key's bits (at least 16 bytes); how many were clear before."""

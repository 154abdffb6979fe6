"""SimHash's vote in C (``_majority.c``; :func:`crawler.content.simhash.fingerprint`)."""

from collections.abc import Sequence

def majority(hashes: Sequence[int], weights: Sequence[int], /) -> int:
    """The 64-bit value whose bit j is set when the hashes with bit j set weigh more than half
    of the total weight."""

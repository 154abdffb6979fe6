"""Order-free 128-bit fingerprints of sets: two crawls compared in O(1).

A set's fingerprint is the sum, modulo 2**128, of one 128-bit fingerprint per element
(``xxhash.xxh3_128`` of the element's UTF-8 bytes), kept with the number of elements. A sum
does not depend on the order the elements came in, so it can be maintained one element at a
time: adding an element adds its fingerprint, removing it subtracts it, and a set built in any
order, or rebuilt from scratch, has the same fingerprint. Two sets with equal fingerprints and
counts are equal but with probability about 2**-128 per pair (not a security boundary: someone
who chooses the elements can make two sets collide).

A repeated element is counted again, so the same sums fingerprint multisets (the content hashes
of a crawl: two pages with the same text count twice).

What a crawl's sets hold (:class:`CrawlSets`, written by :class:`crawler.storage.Store`):

``urls``
    The canonical URL of every page the crawl stored (``canonical_url``, or ``url`` when that is
    empty), binary bodies and pages without a content hash included.
``contents``
    The content hash of every page stored with one (a multiset; a page without a content hash,
    such as a binary body sent as HTML, adds nothing to it).
``pages``
    The pairs (canonical URL, content hash or ``""``) of every stored page: equal only when the
    same URLs hold the same contents, which the two sums above cannot tell (two pages swapping
    their texts leave both unchanged).

Text form: 32 lower-case hex digits (:meth:`SetFingerprint.hex`), as stored in ``crawls``.

>>> a = SetFingerprint.of(["http://a.test/", "http://a.test/x"])
>>> a == SetFingerprint.of(["http://a.test/x", "http://a.test/"])
True
>>> (a - SetFingerprint.of(["http://a.test/x"])) == SetFingerprint.of(["http://a.test/"])
True
>>> SetFingerprint().hex()
'00000000000000000000000000000000'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import xxhash

BITS = 128
MODULUS = 1 << BITS
HEX_DIGITS = BITS // 4
ZERO_HEX = "0" * HEX_DIGITS
_HEX = re.compile(r"[0-9a-f]{32}")


def element(value: str) -> int:
    """The 128-bit fingerprint of one element: xxh3-128 of its UTF-8 bytes."""
    return xxhash.xxh3_128_intdigest(value.encode("utf-8", "surrogatepass"))


def page_element(canonical_url: str, content_hash: str | None) -> int:
    """The element of a stored page in :attr:`CrawlSets.pages`: URL and content hash together
    (NUL-separated: stored text never holds a NUL)."""
    return element(f"{canonical_url}\x00{content_hash or ''}")


@dataclass(frozen=True)
class SetFingerprint:
    """The fingerprint of a set (``value``, an int in ``[0, 2**128)``) and its size.

    ``+`` and ``-`` combine fingerprints of disjoint sets (union) and of a set and a subset
    (difference). In a *change* (a difference of two fingerprints) ``count`` may be negative.
    """

    value: int = 0
    count: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.value < MODULUS:
            object.__setattr__(self, "value", self.value % MODULUS)

    @classmethod
    def of(cls, values: Iterable[str]) -> SetFingerprint:
        """The fingerprint of ``values`` (each counted as often as it occurs)."""
        total = count = 0
        for value in values:
            total += element(value)
            count += 1
        return cls(total, count)

    @classmethod
    def from_hex(cls, text: str, count: int) -> SetFingerprint:
        """From the stored text form; ``ValueError`` for anything but 32 lower-case hex digits."""
        if not _HEX.fullmatch(text or ""):
            raise ValueError(f"set fingerprint {text!r} is not {HEX_DIGITS} lower-case hex digits")
        return cls(int(text, 16), int(count))

    def add(self, fingerprint: int) -> SetFingerprint:
        """This set with one more element whose :func:`element` fingerprint is given."""
        return SetFingerprint(self.value + fingerprint, self.count + 1)

    def remove(self, fingerprint: int) -> SetFingerprint:
        """This set less one element (which it is assumed to hold)."""
        return SetFingerprint(self.value - fingerprint, self.count - 1)

    def __add__(self, other: SetFingerprint) -> SetFingerprint:
        return SetFingerprint(self.value + other.value, self.count + other.count)

    def __sub__(self, other: SetFingerprint) -> SetFingerprint:
        return SetFingerprint(self.value - other.value, self.count - other.count)

    def __bool__(self) -> bool:
        """False for the empty set (or a change that changes nothing)."""
        return bool(self.value or self.count)

    def hex(self) -> str:
        """32 lower-case hex digits."""
        return f"{self.value:032x}"


@dataclass(frozen=True)
class CrawlSets:
    """The three fingerprints a crawl records (module docstring): ``urls``, ``contents`` and
    ``pages``; ``pages.count`` always equals ``urls.count``."""

    urls: SetFingerprint = field(default_factory=SetFingerprint)
    contents: SetFingerprint = field(default_factory=SetFingerprint)
    pages: SetFingerprint = field(default_factory=SetFingerprint)

    @classmethod
    def of(cls, pages: Iterable[tuple[str, str | None]]) -> CrawlSets:
        """From scratch, from ``(canonical_url, content_hash or None)`` pairs."""
        sets = cls()
        for canonical_url, content_hash in pages:
            sets = sets.stored(canonical_url, content_hash)
        return sets

    def stored(self, canonical_url: str, content_hash: str | None) -> CrawlSets:
        """These sets with one more stored page."""
        contents = self.contents.add(element(content_hash)) if content_hash else self.contents
        return CrawlSets(self.urls.add(element(canonical_url)), contents,
                         self.pages.add(page_element(canonical_url, content_hash)))

    def removed(self, canonical_url: str, content_hash: str | None) -> CrawlSets:
        """These sets less one stored page (inverse of :meth:`stored`)."""
        contents = (self.contents.remove(element(content_hash)) if content_hash
                    else self.contents)
        return CrawlSets(self.urls.remove(element(canonical_url)), contents,
                         self.pages.remove(page_element(canonical_url, content_hash)))

    def __add__(self, other: CrawlSets) -> CrawlSets:
        return CrawlSets(self.urls + other.urls, self.contents + other.contents,
                         self.pages + other.pages)

    def __bool__(self) -> bool:
        return bool(self.urls or self.contents or self.pages)

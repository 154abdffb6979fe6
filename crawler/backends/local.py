"""In-process content index: exact copies and near duplicates among kept pages.

Every kept page is a *row* (ids in insertion order). Three :class:`~crawler.simindex.SimIndex`
tables key the rows: the first 64 bits of the content hash (k = 0), the 64-bit xxh3 of the
canonical URL (k = 0, confirmed against the stored string), and the SimHash (k =
``SIMHASH_MAX_DISTANCE``). URLs live in one append-only byte blob with an offsets array, so a row
costs about 90 bytes plus its URL text and no Python object.

Decision rules of :meth:`LocalContentIndex.check_and_add` (the Redis backend makes the same):

1. The page's own earlier version (same canonical URL) is never its duplicate.
2. Another kept page with the same content hash: ``exact_duplicate``, distance 0.
3. Else, with a SimHash, the nearest kept page within k (ties: the earliest kept):
   ``near_duplicate``.
4. Else the page is kept: recorded, replacing its earlier version if any. A duplicate records
   nothing (the earlier version, if any, stays).

Limits: content hashes are compared on their first 64 bits (hex digests; other strings are
hashed with xxh3), so two different contents collide with probability about n**2 / 2**65
(3e-6 at 10**7 pages). Replaced rows keep their URL bytes until the process ends. Not
thread-safe.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import xxhash

from crawler.exceptions import EXACT_DUPLICATE, NEAR_DUPLICATE
from crawler.simindex import SimIndex, settings_params

logger = logging.getLogger(__name__)

Record = tuple[str, str, str, "int | None"]
LOAD_CHUNK = 100_000


@dataclass(frozen=True)
class PageSignature:
    """What the index needs of a page. ``simhash`` None: check exact copies only."""

    url: str
    canonical_url: str
    content_hash: str
    simhash: int | None


@dataclass(frozen=True)
class Match:
    """The kept page a new page duplicates: reason, its URL and SimHash, distance in bits."""

    reason: str
    url: str
    simhash: int | None
    distance: int


def hash64(text: str) -> int:
    """64 bits of a content hash: its first 16 hex digits, or xxh3-64 of a non-hex string."""
    head = text[:16]
    if len(head) == 16:
        try:
            return int(head, 16)
        except ValueError:
            pass
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


def url_hash64(url: str) -> int:
    return xxhash.xxh3_64_intdigest(url.encode("utf-8", "surrogatepass"))


class _Strings:
    """Append-only list of strings in one UTF-8 blob (8 bytes of offset per string)."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = array("Q")

    def append(self, text: str) -> None:
        self._blob += text.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._blob))

    def __getitem__(self, i: int) -> str:
        start = self._ends[i - 1] if i else 0
        return self._blob[start : self._ends[i]].decode("utf-8", "surrogatepass")

    @property
    def nbytes(self) -> int:
        return len(self._blob) + self._ends.itemsize * len(self._ends)


class LocalContentIndex:
    """Exact and near-duplicate decisions over the pages kept so far, in this process."""

    def __init__(self, k: int = 3, blocks: int | None = None) -> None:
        self.k = k
        self._near = SimIndex(k, blocks)
        self.blocks = self._near.blocks
        self._exact = SimIndex(0, 1)
        self._canon = SimIndex(0, 1)
        self._urls = _Strings()
        self._canonicals = _Strings()  # "" when equal to the URL (the common case)
        self._simhash = array("Q")
        self._has_simhash = bytearray()
        self._live = 0

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> LocalContentIndex:
        """Built from ``SIMHASH_MAX_DISTANCE`` and ``SIMHASH_BLOCKS``; ``k=``/``blocks=``
        override them; other keyword arguments of the factory (``crawler=``) are unused."""
        k, blocks = settings_params(settings)
        return cls(k=kwargs.get("k", k), blocks=kwargs.get("blocks", blocks))

    def __len__(self) -> int:
        return self._live

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables and row arrays."""
        tables = self._near.nbytes + self._exact.nbytes + self._canon.nbytes
        rows = self._urls.nbytes + self._canonicals.nbytes + len(self._has_simhash)
        return tables + rows + self._simhash.itemsize * len(self._simhash)

    def close(self) -> None:
        """Nothing to release; the index lives as long as the object."""

    # --- decisions ------------------------------------------------------------------------
    def check_and_add(self, page: PageSignature) -> Match | None:
        """The kept page ``page`` duplicates, or None after recording ``page`` as kept."""
        canonical = page.canonical_url or page.url
        old = self._row_of(canonical)
        match = self._check(page, old)
        if match is None:
            if old is not None:
                self._remove_row(old)
            self._add_row(page.url, canonical, page.content_hash, page.simhash)
        return match

    def _check(self, page: PageSignature, old: int | None) -> Match | None:
        exact = self._exact.query(hash64(page.content_hash), exclude=old)
        if exact is not None:
            return self._match(EXACT_DUPLICATE, exact[0], 0)
        if page.simhash is None:
            return None
        near = self._near.query(page.simhash, exclude=old)
        if near is not None:
            return self._match(NEAR_DUPLICATE, near[0], near[1])
        return None

    def _match(self, reason: str, row: int, distance: int) -> Match:
        simhash = self._simhash[row] if self._has_simhash[row] else None
        return Match(reason, self._urls[row], simhash, distance)

    def _row_of(self, canonical: str) -> int | None:
        """The live row whose canonical URL is ``canonical``."""
        for row, _ in self._canon.query_all(url_hash64(canonical)):
            if self._canonical(row) == canonical:
                return row
        return None

    def _canonical(self, row: int) -> str:
        return self._canonicals[row] or self._urls[row]

    # --- rows -----------------------------------------------------------------------------
    def _append(self, url: str, canonical: str, simhash: int | None) -> int:
        row = len(self._simhash)
        self._urls.append(url)
        self._canonicals.append("" if canonical == url else canonical)
        self._simhash.append(0 if simhash is None else simhash)
        self._has_simhash.append(simhash is not None)
        self._live += 1
        return row

    def _add_row(self, url: str, canonical: str, content_hash: str, simhash: int | None) -> None:
        row = self._append(url, canonical, simhash)
        self._exact.add(hash64(content_hash), row)
        self._canon.add(url_hash64(canonical), row)
        if simhash is not None:
            self._near.add(simhash, row)

    def _remove_row(self, row: int) -> None:
        self._exact.remove(row)
        self._canon.remove(row)
        if self._has_simhash[row]:
            self._near.remove(row)
        self._live -= 1

    # --- bulk load ------------------------------------------------------------------------
    def load(self, records: Iterable[Record]) -> int:
        """Record stored pages as kept, without duplicate checks; returns how many.

        ``records`` yields ``(url, canonical_url, content_hash, simhash)`` with the SimHash
        unsigned or None. A record replaces an earlier row with the same canonical URL (the
        newer version wins). Vectorized in chunks of 100,000 records.
        """
        total = 0
        for chunk in _chunks(records, LOAD_CHUNK):
            total += self._load_chunk(chunk)
        logger.debug("content index: loaded %d records, %d live rows", total, self._live)
        return total

    def _load_chunk(self, chunk: list[Record]) -> int:
        canonicals = [rec[1] or rec[0] for rec in chunk]
        latest = {canonical: i for i, canonical in enumerate(canonicals)}
        keep = sorted(latest.values())
        hashes = np.fromiter((url_hash64(canonicals[i]) for i in keep), np.uint64, len(keep))
        for j in np.flatnonzero(self._canon.contains_many(hashes)).tolist():
            old = self._row_of(canonicals[keep[j]])
            if old is not None:
                self._remove_row(old)
        first = len(self._simhash)
        for i in keep:
            url, _, _, simhash = chunk[i]
            self._append(url, canonicals[i], None if simhash is None else int(simhash))
        rows = np.arange(first, first + len(keep), dtype=np.int64)
        exact = np.fromiter((hash64(chunk[i][2]) for i in keep), np.uint64, len(keep))
        self._exact.add_many(exact, rows)
        self._canon.add_many(hashes, rows)
        with_fp = [j for j, i in enumerate(keep) if chunk[i][3] is not None]
        fps = np.array([chunk[keep[j]][3] for j in with_fp], dtype=np.uint64)
        self._near.add_many(fps, rows[with_fp])
        return len(chunk)


def _chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    it = iter(records)
    while chunk := list(islice(it, size)):
        yield chunk

"""In-process content index: exact copies and near duplicates among kept pages.

Every kept page is a *row* (ids in insertion order). Three
:class:`~crawler.content.simindex.SimIndex` tables key the rows: the 64-bit
:func:`~crawler.content.simindex.content_key` of the content hash (k = 0), the 64-bit
:func:`~crawler.content.simindex.url_key` of the canonical URL (k = 0), and the SimHash (k =
``SIMHASH_MAX_DISTANCE``). Two kinds of row:

* a row added in this process (:meth:`~LocalContentIndex.check_and_add`, :meth:`load`) keeps
  its URL and canonical URL in one append-only UTF-8 blob with an offsets array, and its
  canonical URL is confirmed against that string;
* a row bulk-loaded from storage (:meth:`~LocalContentIndex.load_arrays`) keeps the document
  id only: no string. Its URL is asked of the *resolver* (e.g.
  :meth:`crawler.storage.Store.document_urls`) when it is a match, and its canonical URL is
  known by its 64-bit key (the key equal: the same page).

A loaded row costs 116 bytes at k = 3 (57 + 21 + 21 in the tables, 17 in row arrays); an
in-process row the same plus its URL text and 16 bytes of offsets.

Decision rules of :meth:`LocalContentIndex.check_and_add` (the Redis backend makes the same):

1. The page's own earlier version (same canonical URL) is never its duplicate.
2. Another kept page with the same content hash: ``exact_duplicate``, distance 0.
3. Else, with a SimHash, the nearest kept page within k (ties: the earliest kept):
   ``near_duplicate``.
4. Else the page is kept: recorded, replacing its earlier version if any. A duplicate records
   nothing (the earlier version, if any, stays).

Limits: content hashes are compared on their first 64 bits (hex digests; other strings are
hashed with xxh3), so two different contents collide with probability about n**2 / 2**65
(3e-6 at 10**7 pages); the canonical URL of a loaded row likewise (a collision makes a page
the re-crawl of another loaded page). A loaded row whose document the resolver no longer
knows (deleted meanwhile) is dropped from the index when it would have been a match. Replaced
rows keep their URL bytes until the process ends. Not thread-safe.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections.abc import Iterable, Iterator
from itertools import islice
from queue import Full, Queue
from typing import Any, TypeVar

# PageSignature, Match, Record (crawler.vocab) and KeyChunk, Resolver (crawler.backends) are
# importable from here too, where they used to live
from crawler.backends import KeyChunk, Resolver
from crawler.content.simindex import SimIndex, content_key, settings_params, url_key
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, Match, PageSignature, Record

logger = logging.getLogger(__name__)

T = TypeVar("T")
LOAD_CHUNK = 100_000
ARRAY_BATCH = 1 << 20  # smallest batch of rows per SimIndex.add_many in load_arrays (it doubles)
# chunks read ahead while a batch is merged: the reader keeps going during the merge (at
# 2**18 rows per chunk, 16 are 4 batches, ~150 MB)
PREFETCH_DEPTH = 16
_RESOLVED_CACHE = 4096  # URLs of loaded rows matched lately (a mirror matches one page often)
_MAX_GONE = 64  # loaded rows dropped as vanished in one check before the page is just kept

# the former names of the key functions (same values)
hash64 = content_key
url_hash64 = url_key


class _Strings:
    """Append-only list of strings in one UTF-8 blob (8 bytes of offset per string)."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = array("Q")

    def append(self, text: str) -> None:
        self._blob += text.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._blob))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> str:
        start = self._ends[i - 1] if i else 0
        return self._blob[start : self._ends[i]].decode("utf-8", "surrogatepass")

    @property
    def nbytes(self) -> int:
        return len(self._blob) + self._ends.itemsize * len(self._ends)


class _Gone(Exception):
    """A loaded row's document is unknown to the resolver."""

    def __init__(self, row: int) -> None:
        self.row = row


class LocalContentIndex:
    """Exact and near-duplicate decisions over the pages kept so far, in this process."""

    def __init__(self, k: int = 3, blocks: int | None = None) -> None:
        self.k = k
        self._near = SimIndex(k, blocks)
        self.blocks = self._near.blocks
        self._exact = SimIndex(0, 1)
        self._canon = SimIndex(0, 1)
        self._urls = _Strings()  # by string slot
        self._canonicals = _Strings()  # by slot; "" when equal to the URL (the common case)
        # per row: >= 0 the document id of a loaded row, < 0 -(string slot + 1)
        self._ref = array("q")
        self._simhash = array("Q")
        self._has_simhash = bytearray()
        self._live = 0
        self.resolver: Resolver | None = None
        self._resolved: dict[int, tuple[str, str]] = {}
        self._names: dict[int, str] = {}  # row -> the page it names canonical (rows naming one)

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> LocalContentIndex:
        """Built from ``SIMHASH_MAX_DISTANCE`` and ``SIMHASH_BLOCKS``; ``k=``/``blocks=``
        override them; other keyword arguments of the factory (``crawler=``) are unused."""
        if "k" in kwargs and "blocks" in kwargs:  # read once by the caller
            return cls(k=kwargs["k"], blocks=kwargs["blocks"])
        k, blocks = settings_params(settings)
        return cls(k=kwargs.get("k", k), blocks=kwargs.get("blocks", blocks))

    def __len__(self) -> int:
        return self._live

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables and row arrays."""
        tables = self._near.nbytes + self._exact.nbytes + self._canon.nbytes
        rows = self._urls.nbytes + self._canonicals.nbytes + len(self._has_simhash)
        per_row = (self._simhash.itemsize + self._ref.itemsize) * len(self._simhash)
        return tables + rows + per_row

    def close(self) -> None:
        """Nothing to release; the index lives as long as the object."""

    @property
    def standalone(self) -> bool:
        """False: stored pages are loaded from key arrays (:meth:`load_arrays`), their URLs
        asked of the resolver when needed (the :class:`~crawler.backends.ContentIndex` flag)."""
        return False

    def commit(self, canonical_urls: Iterable[str]) -> int:
        """Nothing waits for storage here (a kept page counts at once): returns 0."""
        return 0

    # --- decisions ------------------------------------------------------------------------
    def check_and_add(self, page: PageSignature) -> Match | None:
        """The kept page ``page`` duplicates, or None after recording ``page`` as kept."""
        canonical = page.canonical_url or page.url
        old = self._row_of(canonical)
        match = self._decide(page, old)
        if match is None:
            self._keep(page, canonical, old)
        return match

    def _decide(self, page: PageSignature, old: int | None) -> Match | None:
        """:meth:`_check`, dropping rows whose stored document is gone (retried a few times)."""
        for _ in range(_MAX_GONE):
            try:
                return self._check(page, old)
            except _Gone as gone:  # deleted from storage meanwhile: nothing to duplicate
                logger.debug("content index: stored document of row %d is gone", gone.row)
                self._remove_row(gone.row)
        return None

    def _keep(self, page: PageSignature, canonical: str, old: int | None) -> None:
        if old is not None:
            self._remove_row(old)
        row = self._add_row(page.url, canonical, page.content_hash, page.simhash)
        if page.names:
            self._names[row] = page.names

    def replace(self, kept_canonical: str, page: PageSignature) -> None:
        """Keep ``page`` instead of the kept page whose canonical URL is ``kept_canonical``
        (which names ``page`` canonical): that page's row is removed, ``page`` recorded as
        :meth:`check_and_add` records a kept page."""
        self.remove(kept_canonical)
        canonical = page.canonical_url or page.url
        self._keep(page, canonical, self._row_of(canonical))

    def check(self, page: PageSignature) -> Match | None:
        """The kept page ``page`` duplicates, as :meth:`check_and_add` decides, recording
        nothing (a kept page whose fingerprint changed asks this before it is re-recorded)."""
        return self._decide(page, self._row_of(page.canonical_url or page.url))

    def remove(self, canonical: str) -> bool:
        """Forget the kept page whose canonical URL is ``canonical``; whether it was held."""
        row = self._row_of(canonical)
        if row is not None:
            self._remove_row(row)
        return row is not None

    def _check(self, page: PageSignature, old: int | None) -> Match | None:
        exact = self._exact.query(content_key(page.content_hash), exclude=old)
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
        url, canonical = self._url(row)
        # a row added here knows what it names; a loaded row's page is asked of storage
        names = self._names.get(row, "") if self._ref[row] < 0 else None
        return Match(reason, url, simhash, distance, canonical, names)

    def _url(self, row: int) -> tuple[str, str]:
        ref = self._ref[row]
        if ref < 0:
            return self._urls[-ref - 1], self._canonical(-ref - 1)
        urls = self._resolved.get(ref)
        if urls is None:
            found = self.resolver([ref]) if self.resolver is not None else {}
            if ref not in found:
                raise _Gone(row)
            if len(self._resolved) >= _RESOLVED_CACHE:
                self._resolved.clear()
            urls = self._resolved[ref] = (found[ref][0], found[ref][1])
        return urls

    def _row_of(self, canonical: str) -> int | None:
        """The live row whose canonical URL is ``canonical`` (a loaded row: by its key)."""
        for row, _ in self._canon.query_all(url_key(canonical)):
            ref = self._ref[row]
            if ref >= 0 or self._canonical(-ref - 1) == canonical:
                return row
        return None

    def _canonical(self, slot: int) -> str:
        return self._canonicals[slot] or self._urls[slot]

    # --- rows -----------------------------------------------------------------------------
    def _append(self, url: str, canonical: str, simhash: int | None) -> int:
        row = len(self._simhash)
        self._ref.append(-len(self._urls) - 1)
        self._urls.append(url)
        self._canonicals.append("" if canonical == url else canonical)
        self._simhash.append(0 if simhash is None else simhash)
        self._has_simhash.append(simhash is not None)
        self._live += 1
        return row

    def _add_row(self, url: str, canonical: str, content_hash: str, simhash: int | None) -> int:
        row = self._append(url, canonical, simhash)
        self._exact.add(content_key(content_hash), row)
        self._canon.add(url_key(canonical), row)
        if simhash is not None:
            self._near.add(simhash, row)
        return row

    def _remove_row(self, row: int) -> None:
        self._names.pop(row, None)
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
        import numpy as np  # a bulk load (once per 100,000 records): not loaded by a crawl

        canonicals = [rec[1] or rec[0] for rec in chunk]
        latest = {canonical: i for i, canonical in enumerate(canonicals)}
        keep = sorted(latest.values())
        hashes = np.fromiter((url_key(canonicals[i]) for i in keep), np.uint64, len(keep))
        names: dict[int, str] = {}  # a re-recorded page keeps what it names
        for j in np.flatnonzero(self._canon.contains_many(hashes)).tolist():
            old = self._row_of(canonicals[keep[j]])
            if old is not None:
                if old in self._names:
                    names[j] = self._names[old]
                self._remove_row(old)
        first = len(self._simhash)
        for j, name in names.items():
            self._names[first + j] = name
        for i in keep:
            url, _, _, simhash = chunk[i]
            self._append(url, canonicals[i], None if simhash is None else int(simhash))
        rows = np.arange(first, first + len(keep), dtype=np.int64)
        exact = np.fromiter((content_key(chunk[i][2]) for i in keep), np.uint64, len(keep))
        self._exact.add_many(exact, rows)
        self._canon.add_many(hashes, rows)
        with_fp = [j for j, i in enumerate(keep) if chunk[i][3] is not None]
        fps = np.array([chunk[keep[j]][3] for j in with_fp], dtype=np.uint64)
        self._near.add_many(fps, rows[with_fp])
        return len(chunk)

    def load_stored(self, records: Iterable[Record]) -> int:
        """Stored pages at the start of a crawl: :meth:`load` (the index is empty then)."""
        return self.load(records)

    def load_arrays(
        self, chunks: Iterable[KeyChunk], resolver: Resolver, *, prefetch: bool = True
    ) -> int:
        """Record stored pages as kept from key arrays, without strings; returns how many.

        The bulk twin of :meth:`load` (same rows, same order, same decisions afterwards):
        ``chunks`` in document-id order, e.g. :meth:`crawler.storage.Store.iter_key_arrays`;
        a row replaces an earlier row with the same canonical key (the newer version wins).
        ``resolver`` turns document ids into URLs when a loaded row is a match. numpy only:
        no Python work per row. With ``prefetch`` the chunks are read by a helper thread
        while the tables are built (:func:`prefetched`).
        """
        self.resolver = resolver
        total = 0
        pending: list[KeyChunk] = []
        size = 0
        for chunk in prefetched(chunks, PREFETCH_DEPTH) if prefetch else chunks:
            pending.append(chunk)
            size += len(chunk.ids)
            # batches grow with the index (at least ARRAY_BATCH, then as large as what is
            # loaded so far): each add_many merges into tables no larger than the batch, so
            # the load stays O(n log n) instead of rewriting the big tables once per batch
            if size >= max(ARRAY_BATCH, total):
                total += self._add_arrays(pending)
                pending, size = [], 0
        total += self._add_arrays(pending)
        self._drop_replaced()
        logger.debug("content index: loaded %d stored rows, %d live rows", total, self._live)
        return total

    def _add_arrays(self, chunks: list[KeyChunk]) -> int:
        if not chunks:
            return 0
        import numpy as np  # chunks of numpy arrays: loaded already

        ids = np.concatenate([c.ids for c in chunks]).astype(np.int64, copy=False)
        if len(ids) == 0:
            return 0
        if ids.min() < 0:
            raise ValueError("load_arrays: document ids must not be negative")
        has = np.concatenate([c.has_simhash for c in chunks]).astype(np.bool_, copy=False)
        fps = np.concatenate([c.simhash for c in chunks]).astype(np.uint64, copy=False)
        first = len(self._simhash)
        rows = np.arange(first, first + len(ids), dtype=np.int64)
        self._ref.frombytes(ids.tobytes())
        self._simhash.frombytes(np.where(has, fps, 0).astype(np.uint64).tobytes())
        self._has_simhash += has.astype(np.uint8).tobytes()
        self._live += len(ids)
        self._exact.add_many(np.concatenate([c.content_keys for c in chunks]), rows)
        self._canon.add_many(np.concatenate([c.canonical_keys for c in chunks]), rows)
        self._near.add_many(fps[has], rows[has])
        return len(ids)

    def _drop_replaced(self) -> None:
        """Of live rows sharing a canonical key, keep the latest (as :meth:`load` does)."""
        replaced = 0
        for rows in self._canon.repeated():
            for row in rows[:-1]:
                self._remove_row(row)
                replaced += 1
        if replaced:
            logger.debug("content index: %d loaded rows replaced by a later version", replaced)


def prefetched(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items`` produced by a reader thread up to ``depth`` ahead of the consumer.

    The reader (a database cursor, mostly driver work) overlaps the consumer's numpy work,
    which releases the GIL. An exception of the reader is raised in the consumer; a consumer
    that stops early (or fails) stops the reader and closes its iterator, in the reader thread.
    """
    queue: Queue[tuple[bool, Any]] = Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def read() -> None:
        it = iter(items)
        try:
            for item in it:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as exc:  # handed over to the consumer
            put((False, exc))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=read, name="index-load-reader", daemon=True)
    reader.start()
    try:
        while True:
            more, value = queue.get()
            if more:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()
        reader.join()


def _chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    it = iter(records)
    while chunk := list(islice(it, size)):
        yield chunk

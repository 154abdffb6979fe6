"""Loading pages into the shared content index: records one script call per batch, and the
stored pages of a crawl in bulk from storage's key arrays.

:class:`IndexLoading` is the loading part of
:class:`crawler.backends.redis.index.RedisContentIndex` (:meth:`~IndexLoading.load`,
:meth:`~IndexLoading.load_stored`, :meth:`~IndexLoading.load_arrays`). The bulk load groups
records by bucket in numpy and appends each bucket's records in one go
(:data:`~crawler.backends.redis.index_lua.APPEND_LUA`).

The stored pages are loaded once per namespace: the first worker claims the load (one script
call, :data:`~crawler.backends.redis.index_lua.CLAIM_LOAD_LUA`, the key ``{base}:loading``
holding its token for :data:`LOAD_CLAIM_SECONDS`, renewed while it loads) and sets the meta
field ``loaded`` when done; a worker started meanwhile waits until ``loaded`` is set, so it
never decides a page before the stored ones are in the index and never loads them a second
time. The wait lasts as long as the loader renews its claim: when the loader dies, its claim
expires after :data:`LOAD_CLAIM_SECONDS` and one waiting worker loads instead (pages the dead
loader had appended are then appended again: a bulk load is not idempotent).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from crawler.backends.redis.connection import batched
from crawler.backends.redis.core import LOAD_BATCH, IndexCore
from crawler.backends.redis.index_lua import APPEND_LUA, CLAIM_LOAD_LUA, LOAD_LUA
from crawler.backends.redis.keys import mix64_array, page_args
from crawler.vocab import Record

if TYPE_CHECKING:
    from crawler.backends import KeyChunk, Resolver

logger = logging.getLogger(__name__)
T = TypeVar("T")

LOAD_CLAIM_SECONDS = 60.0  # a loader's claim on the load; renewed every third of it
LOAD_POLL_SECONDS = 0.2  # how often a waiting worker asks whether the load is done
APPEND_BATCH = 2000  # buckets appended per call (a few ms of Redis time)
BULK_ROWS = 1 << 20  # stored rows grouped by bucket at once in load_arrays


class IndexLoading(IndexCore):
    """The loads of the shared content index (module docstring)."""

    #: seconds a loader's claim lasts without renewal (an attribute: tests shorten it)
    load_claim_seconds = LOAD_CLAIM_SECONDS
    _claim_token: str | None = None
    _claim_renewed = 0.0

    def _register_scripts(self) -> None:
        self._load = self.client.register_script(LOAD_LUA)
        self._append = self.client.register_script(APPEND_LUA)
        self._claim_load = self.client.register_script(CLAIM_LOAD_LUA)
        super()._register_scripts()

    def _claim(self, token: str) -> str:
        """``"done"``, ``"mine"`` or the token of the loader holding the claim."""
        state = self._run(self._claim_load, [self.base + ":meta", self.base + ":loading"],
                          [token, int(self.load_claim_seconds * 1000)])  # fmt: skip
        return state.decode() if isinstance(state, bytes) else str(state)

    def _first_worker(self, load: Callable[[], int]) -> int:
        """``load()`` in the first worker of the namespace, 0 in the others, which wait until
        it is done (module docstring)."""
        token, waiting = f"{self.owner or 'worker'}/{uuid.uuid4().hex[:12]}", False
        while (state := self._claim(token)) != "mine":
            if state == "done":
                return 0
            if not waiting:
                waiting = True
                logger.info("waiting for %s to load the stored pages into the shared content "
                            "index", state.rsplit("/", 1)[0])  # fmt: skip
            time.sleep(LOAD_POLL_SECONDS)
        self._claim_token, self._claim_renewed = token, time.monotonic()
        try:
            loaded = load()
            self._call("hset", self.base + ":meta", "loaded", 1)
            self._call("delete", self.base + ":loading")
        finally:
            self._claim_token = None
        return loaded

    def _renewing(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, the load claim renewed while they are read."""
        for item in items:
            self._renew()
            yield item

    def _renew(self) -> None:
        """Renew this loader's claim when a third of it has passed; a claim lost meanwhile
        (a stall longer than the claim: another worker loads too) is logged."""
        token = self._claim_token
        if token is None or time.monotonic() - self._claim_renewed < self.load_claim_seconds / 3:
            return
        self._claim_renewed = time.monotonic()
        if self._claim(token) != "mine":
            logger.warning("this worker stalled longer than its claim on loading the stored "
                           "pages (%gs): another worker may load them too",
                           self.load_claim_seconds)  # fmt: skip

    def _records_args(self, records: Iterable[Record], with_old: bool) -> Iterator[list[Any]]:
        for batch in batched(records, LOAD_BATCH):
            args: list[Any] = []
            for url, canonical, content_hash, simhash in batch:
                page = page_args(url, canonical or url, content_hash, simhash)
                old = b""
                if with_old and not self.standalone:
                    old = self._stored_version(page[0])
                args += [*page, old]
            yield args

    def load(self, records: Iterable[Record], replace: bool = True) -> int:
        """Record pages as kept; returns how many entries were written.

        ``replace=True`` (a kept page re-fingerprinted, or kept after a young-host check): the
        entry held for the canonical URL is replaced unless it is the same version, and the
        page keeps its URL in Redis (storage holds another fingerprint for it, or none yet).
        ``replace=False`` (stored pages loaded at start): an entry held for the canonical URL
        is newer and is kept, so a worker that joins or restarts never puts an older stored
        fingerprint back.
        """
        loaded = 0
        mode = "replace" if replace else "absent"
        for args in self._records_args(records, with_old=replace):
            loaded += int(self._run(self._load, [self.base], [
                *self._head, mode, "1" if self.standalone else "",
                self._ck_filter.shard_bits, *args]))  # fmt: skip
        return loaded

    def load_stored(self, records: Iterable[Record]) -> int:
        """Load stored pages once per namespace (the first worker; later ones wait for it,
        then skip: module docstring), never replacing an entry already held
        (``replace=False``)."""
        return self._first_worker(lambda: self.load(self._renewing(records), replace=False))

    def load_arrays(self, chunks: Iterable[KeyChunk], resolver: Resolver | None = None) -> int:
        """Stored pages from integer key arrays (:meth:`crawler.storage.Store.iter_key_arrays`),
        once per namespace (the first worker; later ones wait for it, then skip: module
        docstring). Needs no URL (storage resolves a kept page when a drop names it), so a
        standalone index refuses it.

        Bulk: records are grouped by bucket in numpy and appended one bucket at a time
        (:data:`APPEND_LUA`), the canonical-key filter's bits set in bulk. A canonical key the
        index already holds a version of (a pending page, a re-fingerprinted one) is newer and
        is skipped; within a chunk the latest stored row of a canonical key wins. ``resolver``
        is unused (the signature of :meth:`LocalContentIndex.load_arrays`)."""
        if self.standalone:
            raise ValueError("a RedisContentIndex without a resolver keeps URLs: load records")
        return self._first_worker(lambda: self._load_arrays(self._renewing(chunks)))

    def _load_arrays(self, chunks: Iterable[KeyChunk]) -> int:
        held_keys, loaded = self._held_keys(), 0
        for chunk in batched_arrays(chunks, BULK_ROWS):
            canon = chunk.canonical_keys
            keep = new_rows(canon, held_keys)
            loaded += self._bulk_add(chunk.simhash[keep], chunk.has_simhash[keep],
                                     chunk.content_keys[keep], canon[keep])
        return loaded

    def _held_keys(self) -> np.ndarray:
        """The canonical keys the index holds a version of (pending, or kept with its URL)."""
        held = [np.frombuffer(bytes(k), ">u8")[0] for name in (":pc", ":c")
                for k in self._call("hkeys", self.base + name)]
        return np.array(held, np.uint64)

    def _bulk_add(self, fps: np.ndarray, has: np.ndarray, ckeys: np.ndarray,
                  canon: np.ndarray) -> int:
        n = len(fps)
        if n == 0:
            return 0
        last = int(self._call_once("hincrby", self.base + ":meta", "seq", n))
        seqs = np.arange(last - n + 1, last + 1, dtype=np.uint64).astype(">u4")
        appends = self._table_appends(fps[has], seqs[has]) + exact_appends(ckeys)
        for batch in batched(appends, APPEND_BATCH):
            self._renew()
            self._run_once(self._append, [self.base], [b"".join(batch)])
        self._call_once("hincrby", self.base + ":meta", "count", n)
        self._ck_filter.add_keys_bulk(canon.astype(np.uint64), mix64_array(canon))
        return n

    def _table_appends(self, fps: np.ndarray, seqs: np.ndarray) -> list[bytes]:
        """The appends of fingerprints ``fps`` to the block tables (table 0 with ``seqs``)."""
        appends: list[bytes] = []
        raw = fps.astype(">u8").view(np.uint8).reshape(-1, 8)
        for t, spec in enumerate(self._specs):
            first = int(spec[0]) - 1 if spec else 0
            cols = list(range(first, first + int(spec[1]))) if spec else []
            rest = np.delete(raw, cols, axis=1) if cols else raw
            if t == 0:
                rest = np.hstack([rest, seqs.view(np.uint8).reshape(-1, 4)])
            appends += grouped(t, raw[:, cols] if cols else raw[:, :0], rest)
        return appends


def new_rows(canon: np.ndarray, held_keys: np.ndarray) -> np.ndarray:
    """Which rows of a batch to load: the latest row of each canonical key (rows come in id
    order), unless the index holds a version of that key already (it is newer)."""
    keep = np.ones(len(canon), np.bool_)
    if len(held_keys):
        keep &= ~np.isin(canon, held_keys)
    _, last = np.unique(canon[::-1], return_index=True)
    latest = np.zeros(len(canon), np.bool_)
    latest[len(canon) - 1 - last] = True
    return keep & latest


def exact_appends(ckeys: np.ndarray) -> list[bytes]:
    """The appends of content keys ``ckeys`` to the exact table (its bucket: the first byte
    and the top half of the second)."""
    cbytes = ckeys.astype(">u8").view(np.uint8).reshape(-1, 8)
    field = cbytes[:, :2].copy()
    field[:, 1] &= 0xF0
    return grouped(255, field, cbytes[:, 1:])


def grouped(table: int, fields: np.ndarray, records: np.ndarray) -> list[bytes]:
    """One packed append (:data:`APPEND_LUA`) per bucket: rows grouped by bucket field."""
    if len(records) == 0:
        return []
    width = fields.shape[1]
    key = np.zeros(len(fields), np.uint64)
    for j in range(width):
        key = (key << np.uint64(8)) | fields[:, j].astype(np.uint64)
    order = np.argsort(key, kind="stable")
    key, fields, records = key[order], fields[order], np.ascontiguousarray(records[order])
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    stride = records.shape[1]
    blob = records.tobytes()
    head = bytes([table, width])
    return [head + fields[a].tobytes() + ((b - a) * stride).to_bytes(4, "big")
            + blob[a * stride : b * stride]
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def batched_arrays(chunks: Iterable[Any], rows: int) -> Iterator[Any]:
    """Key-array chunks concatenated into batches of at least ``rows`` rows (the last smaller):
    bigger batches append more records per bucket per call."""
    parts: list[Any] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk.ids)
        if size >= rows:
            yield joined_arrays(parts)
            parts, size = [], 0
    if parts:
        yield joined_arrays(parts)


def joined_arrays(parts: list[Any]) -> Any:
    """The key arrays of ``parts`` concatenated, in the dtypes the bulk load works on."""
    from types import SimpleNamespace

    dtypes = {"simhash": np.uint64, "has_simhash": np.bool_, "content_keys": np.uint64,
              "canonical_keys": np.uint64}  # fmt: skip
    cat: dict[str, np.ndarray] = {}
    for name, dtype in dtypes.items():
        joined = np.concatenate([np.asarray(getattr(p, name)) for p in parts])
        cat[name] = joined.astype(dtype, copy=False)
    return SimpleNamespace(**cat)

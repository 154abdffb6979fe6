"""Backends behind one factory, keyed by ``DEDUP_BACKEND``.

``local`` (default): the Bloom filter (:mod:`crawler.backends.bloom`) and the content index
(:mod:`crawler.backends.local`) live in this process. ``redis``: both live in Redis
(:mod:`crawler.backends.redis`) and are shared by every crawler process on that server.

Both kinds satisfy the same two protocols, documented on :class:`SeenSet` and
:class:`ContentIndex`; the dupefilter and the near-duplicate pipeline only see those.

``redis`` needs the ``redis`` extra, imported only when chosen: :func:`check_extras` (run with
the other settings checks before a crawl) stops a crawl whose settings need a missing extra
with one line. What the Redis components share and their error type live in
:mod:`crawler.backends.common`, importable without that extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from crawler import config, defaults, extras

if TYPE_CHECKING:
    import numpy as np

    from crawler.config import SettingsLike
    from crawler.vocab import Match, PageSignature, Record

#: ``ids -> {id: (url, canonical_url)}`` of stored documents; ids it does not know are absent
#: (e.g. :meth:`crawler.storage.Store.document_urls`).
Resolver = Callable[[Sequence[int]], Mapping[int, tuple[str, str]]]


class SeenSet(Protocol):
    """A set of request fingerprints (``bytes``) that may answer "seen" for a new key: every
    capability the dupefilter (:mod:`crawler.dupefilter`) asks of one. Both seen sets
    (:class:`crawler.backends.bloom.LocalSeenSet`, :class:`crawler.backends.redis.RedisSeenSet`)
    implement all of it; a capability that does not apply to one answers the neutral value
    given here.

    Questions:

    * ``add(key)``: an atomic test-and-set; True when the key was (probably) present already,
      False when it was certainly new, and then records it.
    * ``key in s``: the same question, read-only; ``contains_many(keys)`` asks it of each of
      ``keys`` in order, in one round trip for a shared set.
    * ``len(s)``: the keys recorded (every process's, for a shared set).
    * ``clear()``: forget every key. A no-op for the local set (it lives and dies with its
      process; a ``JOBDIR`` snapshot is the journal's to replace).
    * ``close()``: release the files or the connection.

    Description:

    * ``capacity``, ``error_rate``: the sizing (``BLOOM_CAPACITY``, ``BLOOM_ERROR_RATE``);
      ``on_full``: ``"grow"`` or ``"stop"`` (``BLOOM_ON_FULL``); ``full``: the ``"stop"``
      policy reached capacity (the dupefilter then closes the crawl, ``bloom_full``).
    * ``shared``: the set lives outside this process and every worker of the crawl adds to it
      (Redis). A key once answered "seen" stays seen (a Bloom filter never forgets), so a
      client may remember it instead of asking again. False for the local set.
    * ``url``: the server, for error messages; ``""`` for the local set.
    * ``describe()``: the sizing in words, for the start log line.
    * ``figures()``: the values of the ``dedup/bloom/*`` stats, in this order: ``capacity``,
      ``urls``, ``bits``, ``hashes``, ``fill_ratio`` (6 decimals),
      ``false_positives_avoided`` (0 without ``BLOOM_VERIFY``),
      ``expected_false_positives`` (3 decimals), and ``layers`` where the set keeps its layers
      in this process (the local set only).

    A shared set raises :func:`crawler.backends.common.redis_errors` when its server fails.
    """

    capacity: int
    error_rate: float
    on_full: str
    full: bool
    shared: bool
    url: str

    def add(self, key: bytes) -> bool: ...
    def __contains__(self, key: bytes) -> bool: ...
    def contains_many(self, keys: Sequence[bytes]) -> list[bool]: ...
    def __len__(self) -> int: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...
    def describe(self) -> str: ...
    def figures(self) -> dict[str, float]: ...


class KeyChunk(Protocol):
    """Stored pages as integer key arrays, one chunk of :meth:`ContentIndex.load_arrays`
    (e.g. ``crawler.storage.KeyArrays``)."""

    @property
    def ids(self) -> np.ndarray: ...  # int64 document ids, ascending (the kept order)
    @property
    def simhash(self) -> np.ndarray: ...  # uint64
    @property
    def has_simhash(self) -> np.ndarray: ...  # bool
    @property
    def content_keys(self) -> np.ndarray: ...  # uint64, content_key(content_hash)
    @property
    def canonical_keys(self) -> np.ndarray: ...  # uint64, url_key(canonical_url)


class ContentIndex(Protocol):
    """Exact-copy and near-duplicate decisions over kept pages: everything the near-duplicate
    pipeline asks of an index (:class:`crawler.backends.local.LocalContentIndex`,
    :class:`crawler.backends.redis.RedisContentIndex`). The decision rules are documented in
    :mod:`crawler.backends.local`; the types are those of :mod:`crawler.vocab`.

    * ``check_and_add(page)``: the kept page ``page`` duplicates, or None after recording
      ``page`` as kept (atomically); a shared index may answer ``Match(PENDING, ...)``: the
      match is kept by another worker and not stored yet, nothing was recorded, ask again.
    * ``check(page)``: the same question, recording nothing.
    * ``replace(kept_canonical, page)``: keep ``page`` instead of the kept page whose
      canonical URL is ``kept_canonical`` (the canonical copy).
    * ``remove(canonical)``: forget a kept page; whether it was held.
    * ``load(records)``: record already-decided pages as kept, without checks (a page kept
      after all, a re-fingerprinted page); returns how many.
    * ``standalone``: the index keeps the URLs of the pages it loads. Stored pages are then
      loaded with ``load_stored(records)`` (URL records); else with ``load_arrays(chunks,
      resolver)`` (integer keys; a match's URL asked of ``resolver`` or of the storage the
      index was built with).
    * ``commit(canonical_urls)``: storage committed these kept pages (a shared index lets
      other workers match them from now on); returns how many were waiting.
    * ``close()``: release the connection, if any.

    A Redis index raises :func:`crawler.backends.common.redis_errors` when the server fails.
    """

    @property
    def standalone(self) -> bool: ...

    def check_and_add(self, page: PageSignature) -> Match | None: ...
    def check(self, page: PageSignature) -> Match | None: ...
    def replace(self, kept_canonical: str, page: PageSignature) -> None: ...
    def remove(self, canonical: str) -> bool: ...
    def load(self, records: Iterable[Record]) -> int: ...
    def load_stored(self, records: Iterable[Record]) -> int: ...
    def load_arrays(self, chunks: Iterable[KeyChunk], resolver: Resolver) -> int: ...
    def commit(self, canonical_urls: Iterable[str]) -> int: ...
    def close(self) -> None: ...


def backend_name(settings: SettingsLike) -> str:
    """``DEDUP_BACKEND``, checked: the one reader of the setting."""
    return config.get_choice(
        settings, "DEDUP_BACKEND", defaults.DEDUP_BACKEND, defaults.DEDUP_BACKEND_CHOICES
    )


@dataclass(frozen=True)
class BackendSettings:
    """The crawl's backend (``DEDUP_BACKEND``), the extras it and ``STORAGE_URL`` need checked
    installed (:func:`check_extras`: :class:`crawler.extras.MissingExtraError`, one line)."""

    name: str = defaults.DEDUP_BACKEND

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> BackendSettings:
        name = backend_name(settings)
        check_extras(settings)
        return cls(name)


def make_seen_set(settings: SettingsLike, **kwargs: Any) -> SeenSet:
    """The seen set for ``DEDUP_BACKEND``; ``kwargs`` go to the backend's ``from_settings``."""
    if backend_name(settings) == "redis":
        from crawler.backends.redis import RedisSeenSet

        return RedisSeenSet.from_settings(settings, **kwargs)
    from crawler.backends.bloom import LocalSeenSet

    return LocalSeenSet.from_settings(settings, **kwargs)


def make_content_index(settings: SettingsLike, **kwargs: Any) -> ContentIndex:
    """The content index for ``DEDUP_BACKEND``; ``kwargs`` go to ``from_settings``."""
    if backend_name(settings) == "redis":
        from crawler.backends.redis import RedisContentIndex

        return RedisContentIndex.from_settings(settings, **kwargs)
    from crawler.backends.local import LocalContentIndex

    return LocalContentIndex.from_settings(settings, **kwargs)


def check_extras(settings: SettingsLike) -> None:
    """The extras these settings need are installed: ``redis`` for ``DEDUP_BACKEND=redis`` and
    a scrapy-redis ``SCHEDULER`` (the distributed profile), ``postgres`` for a PostgreSQL
    ``STORAGE_URL``. Raises :class:`crawler.extras.MissingExtraError` (one line)."""
    needs: dict[str, str] = {}
    if backend_name(settings) == "redis":
        needs["DEDUP_BACKEND=redis"] = "redis"
    scheduler = settings.get("SCHEDULER")
    name = scheduler if isinstance(scheduler, str) else getattr(scheduler, "__module__", "")
    if name.startswith(("crawler.cluster.", "scrapy_redis.")):
        needs[f"SCHEDULER={name}"] = "redis"
    url = str(settings.get("STORAGE_URL") or defaults.STORAGE_URL)
    if url.split(":", 1)[0].split("+", 1)[0].lower() in ("postgresql", "postgres"):
        needs[f"STORAGE_URL={url.split(':', 1)[0]}://..."] = "postgres"
    extras.require(needs)


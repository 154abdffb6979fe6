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
    """A set of request fingerprints (``bytes``) that may answer "seen" for a new key.

    ``add(key)`` is an atomic test-and-set: it returns True when the key was (probably) present
    already and False when it was certainly new, and records it. ``key in s`` is read-only.
    """

    capacity: int
    error_rate: float

    def add(self, key: bytes) -> bool: ...
    def __contains__(self, key: bytes) -> bool: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...


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
    return config.get_choice(
        settings, "DEDUP_BACKEND", defaults.DEDUP_BACKEND, defaults.DEDUP_BACKEND_CHOICES
    )


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
    if name.startswith(("crawler.backends.", "scrapy_redis.")):
        needs[f"SCHEDULER={name}"] = "redis"
    url = str(settings.get("STORAGE_URL") or defaults.STORAGE_URL)
    if url.split(":", 1)[0].split("+", 1)[0].lower() in ("postgresql", "postgres"):
        needs[f"STORAGE_URL={url.split(':', 1)[0]}://..."] = "postgres"
    extras.require(needs)


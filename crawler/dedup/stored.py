"""What the content decider reads from the crawl's storage: :class:`StoredPages`.

With ``SIMHASH_PERSIST`` (default True) the content index is loaded at open from the stored
documents (:meth:`StoredPages.load_into`), so a second crawl drops pages duplicating the
first crawl's. The local index then keeps no URL per stored page and asks the store
(``document_urls``, blocking, on the reactor thread: one indexed query per duplicate of a
stored page) for the URL of a match; the Redis index asks :meth:`StoredPages.kept_page` and
:meth:`StoredPages.latest_version` (its resolver, :class:`crawler.backends.redis.KeptPages`).
The decision reads a match's stored text (a young host's check) and what a stored match names
canonical, and a worker taking a host over reads the host's stored pages (its template).

Every method blocks (database work): the decider runs them in a thread, except the index's
resolver calls. The store is opened on first use, from ``store_factory``.

**Outages.** The reads run in a thread (a match's text, its canonical link, an origin's pages)
retry a transient :class:`~crawler.storage.StorageError` as batch writes do
(``STORAGE_RETRY_TIMES`` retries, ``STORAGE_RETRY_BACKOFF`` doubling, at most 30 s: the policy
:class:`crawler.storage.retry.RetryPolicy`), sleeping in their thread; the resolver calls run
on the reactor thread and fail at once: the decider waits and asks the index again
(:class:`crawler.dedup.outage.StorageOutage`). Past the bound the error is raised.
Limit: ``documents.simhash`` keeps the fingerprint a page had when it was kept; a refreshed
fingerprint (a learned template) updates the index only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from crawler.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from crawler.backends import ContentIndex
    from crawler.storage import Store


class StoredPages:
    """Lookups in the crawl's store, opened on first use from ``store_factory``."""

    def __init__(self, store_factory: Callable[[], Store] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self.store_factory = store_factory
        self.retry = retry or RetryPolicy(0)
        self._store: Store | None = None

    @classmethod
    def from_settings(cls, settings: Any, persist: bool) -> StoredPages:
        """The crawl's ``STORAGE_URL`` when ``persist`` (``SIMHASH_PERSIST``), else none; reads
        retried by the storage retry settings."""
        if not persist:
            return cls()
        retry = RetryPolicy.from_settings(settings)

        def store_factory() -> Store:
            from crawler.storage import Store

            return Store.from_settings(settings)

        return cls(store_factory, retry)

    @property
    def enabled(self) -> bool:
        return self.store_factory is not None

    def store(self) -> Store:
        if self._store is None:
            if self.store_factory is None:
                raise RuntimeError("no store: the decider was built without store_factory")
            self._store = self.store_factory()
        return self._store

    def load_into(self, index: ContentIndex) -> int:
        """Load the stored documents into ``index``; returns how many.

        Documents without a content hash (binary pages) are left out: nothing duplicates
        them. An index that keeps no URLs itself reads integer key arrays and resolves a
        match's URL from the store when needed; a standalone one reads the URL records.
        """
        store = self.store()
        if not index.standalone:
            return index.load_arrays(store.iter_key_arrays(), store.document_urls)
        return index.load_stored((url, canonical, chash, simhash) for url, canonical, chash, simhash
                                 in store.iter_fingerprints() if chash)

    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None, str] | None:
        """For a shared index that keeps no URLs (:class:`crawler.backends.redis.KeptPages`)."""
        return self.store().kept_page(kind, key)

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None:
        return self.store().latest_version(canonical_key)

    def stored_text(self, url: str) -> str | None:
        """The stored visible text of ``url``, None when unknown."""
        if not self.enabled:
            return None
        document = self.retry.call(lambda: self.store().document_by_url(url))
        return getattr(document, "text", None) or None

    def canonical_link(self, url: str) -> str:
        """What the stored page ``url`` names canonical (``""``: nothing)."""
        return self.retry.call(lambda: self.store().canonical_link(url)) or ""

    def documents_of_origin(self, host: str, since: datetime,
                            limit: int) -> list[tuple[str, str, str | None, int | None, str]]:
        """The newest ``limit`` pages of ``host`` stored since ``since``:
        ``(url, canonical_url, content_hash, simhash, text)``."""
        return self.retry.call(lambda: self.store().documents_of_origin(host, since, limit))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

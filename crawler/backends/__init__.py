"""Backends behind one factory, keyed by ``DEDUP_BACKEND``.

``local`` (default): the Bloom filter (:mod:`crawler.bloom`) and the content index
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

from typing import TYPE_CHECKING, Any, Protocol

from crawler import config, defaults, extras

if TYPE_CHECKING:
    from crawler.config import SettingsLike


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


class ContentIndex(Protocol):
    """Exact-copy and near-duplicate decisions over kept pages (see crawler.backends.local)."""

    def check_and_add(self, page: Any) -> Any: ...
    def check(self, page: Any) -> Any: ...
    def remove(self, canonical: str) -> bool: ...
    def replace(self, kept_canonical: str, page: Any) -> None: ...
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
    from crawler.bloom import LocalSeenSet

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


config.register(backend_name)
config.register(check_extras)

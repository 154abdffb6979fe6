"""The client of the Redis backends and the chores on a namespace's keys.

:func:`connect` (a pinged client, or :class:`~crawler.backends.common.RedisBackendError`),
:func:`clear_namespace` (delete every key of one crawl), :func:`namespace_mismatch` (the
settings error of a namespace built with other settings); the small helpers :func:`batched`,
:func:`glob_escape` and :func:`text` live in :mod:`crawler.backends.common` (no Redis client
needed to import them) and are re-exported here.
"""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler import config
from crawler.backends.common import RedisBackendError, batched, glob_escape
from crawler.backends.common import text as text  # re-exported: the Redis modules import it here


def connect(url: str, timeout: float = 30.0) -> redis.Redis:
    """A client for ``url``, pinged once; raises :class:`RedisBackendError`. A reply slower
    than ``timeout`` seconds fails the call. The client never retries by itself (redis-py
    retries three times by default): a retry is ours to decide, where the call is known to be
    safe to run twice (:class:`crawler.backends.common.RedisRetry`)."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=min(5.0, timeout),
                                      socket_timeout=timeout, retry=Retry(NoBackoff(), 0))
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise RedisBackendError(url, exc) from None
    return client


def namespace_mismatch(name: str, value: object, stored: object, base: str) -> Exception:
    """The error of setting ``name`` = ``value`` on a namespace built with ``stored``."""
    return config.SettingError(
        name,
        value,
        f"{stored!r}, the value {base} in Redis was built with (or set another DEDUP_NAMESPACE, "
        "or delete that namespace's keys)",
    )


def clear_namespace(client: redis.Redis, base: str) -> int:
    """Delete every key under ``base`` (SCAN, never KEYS); returns how many."""
    deleted = 0
    for batch in batched(client.scan_iter(match=f"{glob_escape(base)}:*", count=1000), 500):
        deleted += client.delete(*batch)
    return deleted

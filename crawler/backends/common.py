"""What the Redis components share, importable without the ``redis`` extra and without Scrapy.

* :class:`RedisBackendError`, the one error type of a Redis outage (masked URL, what to check),
  and :func:`redis_errors`, every error a Redis backend raises when the server fails;
* the outage policy, :func:`first_outage`: the first failed Redis call of a crawl, in
  whichever component (dupefilter, scheduler, near-duplicate pipeline, cluster membership),
  logs one error line and closes the spider with finish reason :data:`REDIS_ERROR` (the
  closing itself is :func:`crawler.closing.stop_on_redis_error`, a component);
* :func:`namespace` (the key prefix of one crawl) and :class:`RedisBacked` (client plumbing).

They are here so that the crawl command, the settings checks and :mod:`crawler.backends.cluster`
can be imported by a default install; the Redis client itself is imported on first use.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING, Any

from crawler import config, defaults
from crawler.formats import mask_url as mask_url  # re-exported: this module's name for it

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

REDIS_ERROR = "redis_error"  # finish reason and stat name of a Redis outage


class RedisBackendError(ConnectionError):
    """Redis cannot be reached or failed a command; names the (masked) URL and what to check."""

    def __init__(self, url: str, error: Exception) -> None:
        self.url = mask_url(url)
        super().__init__(
            f"Redis at {self.url} is unavailable ({type(error).__name__}: {error}); check that "
            "redis-server is running and reachable from this host, and the REDIS_URL setting "
            "(or the DEDUP_REDIS_URL environment variable of settings.distributed)"
        )


def namespace(settings: config.SettingsLike) -> str:
    """``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE or BOT_NAME}``."""
    prefix = str(settings.get("REDIS_KEY_PREFIX") or defaults.REDIS_KEY_PREFIX)
    ns = (
        settings.get("DEDUP_NAMESPACE", defaults.DEDUP_NAMESPACE)
        or settings.get("BOT_NAME")
        or defaults.BOT_NAME
    )
    return f"{prefix}:{ns}"


@cache
def connection_errors() -> tuple[type[Exception], ...]:
    """The errors of a lost or slow server (the Redis client imported on first use)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError, OSError)


@cache
def redis_errors() -> tuple[type[Exception], ...]:
    """What a Redis backend raises when the server fails (the Redis client imported on first
    use): :class:`RedisBackendError` and any ``redis.RedisError``."""
    import redis

    return (RedisBackendError, redis.RedisError)


# --- the outage policy --------------------------------------------------------------------------
def first_outage(stats: Any, exc: Exception, url: str) -> bool:
    """The Redis-outage policy: True for the first failed Redis call of a crawl (whichever
    component made it), which then closes the crawl with finish reason ``redis_error``
    (:func:`crawler.closing.stop_on_redis_error`); False for the later ones.

    The first call logs one ERROR line (the masked ``url`` and what to check) and sets the stat
    ``dedup/redis_error`` to 1. ``stats`` is any stats collector (``get_value``/``set_value``).
    """
    if stats.get_value(f"dedup/{REDIS_ERROR}"):
        return False
    stats.set_value(f"dedup/{REDIS_ERROR}", 1)
    error = exc if isinstance(exc, RedisBackendError) else RedisBackendError(url, exc)
    logger.error("%s. Closing the spider (%s): pages already stored are kept, pages not yet "
                 "checked for duplicates are not stored", " ".join(str(error).split()),
                 REDIS_ERROR)  # fmt: skip
    return True


class RedisBacked:
    """Shared plumbing of the Redis components: the client, the base of their keys, the URL
    for errors, and script and command calls that turn a lost server into
    :class:`RedisBackendError`."""

    def __init__(self, client: redis.Redis, base: str, url: str) -> None:
        self.client = client
        self.base = base
        self.url = url

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return script(keys=keys, args=args)
        except connection_errors() as exc:
            raise RedisBackendError(self.url, exc) from None

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, name)(*args, **kwargs)
        except connection_errors() as exc:
            raise RedisBackendError(self.url, exc) from None

    def close(self) -> None:
        self.client.close()

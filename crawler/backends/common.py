"""What the Redis components share, importable without the ``redis`` extra.

:class:`RedisBackendError` (the one error type of a Redis outage: masked URL, what to check),
:func:`namespace` (the key prefix of one crawl) and :class:`_RedisBacked` (client plumbing) are
here so that the crawl command, the settings checks and :mod:`crawler.backends.cluster` can be
imported by a default install; the Redis client itself is imported on first use.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from crawler import config, defaults

if TYPE_CHECKING:
    import redis


class RedisBackendError(ConnectionError):
    """Redis cannot be reached or failed a command; names the (masked) URL and what to check."""

    def __init__(self, url: str, error: Exception) -> None:
        self.url = mask_url(url)
        super().__init__(
            f"Redis at {self.url} is unavailable ({type(error).__name__}: {error}); check that "
            "redis-server is running and reachable from this host, and the REDIS_URL setting "
            "(or the DEDUP_REDIS_URL environment variable of settings.distributed)"
        )


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unparsable REDIS_URL>"


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


class _RedisBacked:
    """Shared plumbing: the client, its URL for errors, and wrapped script calls."""

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

"""What the Redis components share, importable without the ``redis`` extra and without Scrapy.

* :class:`RedisBackendError`, the one error type of a Redis outage (masked URL, what to check),
  and :func:`redis_errors`, every error a Redis backend raises when the server fails;
* the outage policy, :func:`first_outage`: the first failed Redis call of a crawl, in
  whichever component (dupefilter, scheduler, near-duplicate pipeline, cluster membership),
  logs one error line and closes the spider with finish reason :data:`REDIS_ERROR` (the
  closing itself is :func:`crawler.closing.stop_on_redis_error`, a component);
* the retry policy, :class:`RedisRetry`: a failed call (refused, reset, or no reply within
  ``REDIS_TIMEOUT_SECONDS``) is tried again with backoff for up to ``REDIS_RETRY_SECONDS``;
  only once that bound has passed is it an outage (:func:`first_outage`). One policy per crawl
  (:func:`retry_policy`), shared by every Redis component, so a given-up server is not waited
  for again by the next component while the crawl closes;
* the settings: :class:`RedisSettings` (the server, the retry bound; :func:`redis_url`, the one
  reader of ``REDIS_URL``) and :class:`NamespaceSettings`; :func:`namespace` (the key prefix
  of one crawl), :func:`queue_key` (the frontier's key in it) and :class:`RedisBacked`
  (client plumbing).

Retries run where the call runs, on the reactor thread (the content index's check-and-add is
awaited on the event loop's own connection, :mod:`crawler.backends.redis.aio`, and goes on
with redis-py, retries and all, when that connection fails): the worker pauses while Redis
is away (it can neither queue, pop nor decide a page without it). Every call
retried is safe to run twice, in case the first ran and only its reply was lost: Bloom adds,
index decisions (a page decided again is a new version of itself), commits, acks, requeues,
releases and the membership renewal are idempotent; the frontier's push and pop carry a token
(:mod:`crawler.cluster.frontier`) whose replay returns the first run's reply. The bulk load at
start (``hincrby`` of counters, raw appends) is not retried (:meth:`RedisBacked._call_once`).

They are here so that the crawl command, the settings checks and :mod:`crawler.cluster.worker`
can be imported by a default install; the Redis client itself is imported on first use.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache, cached_property
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar

from crawler import config, defaults
from crawler.outputs.formats import mask_url as mask_url  # re-exported: this module's name for it

if TYPE_CHECKING:
    import redis

    from crawler.backends.redis.aio import LoopConnection

logger = logging.getLogger(__name__)

REDIS_ERROR = "redis_error"  # finish reason and stat name of a Redis outage
RETRIES = "dedup/redis_retries"  # stat: Redis calls tried again after a failure
RECOVERED = "dedup/redis_recovered"  # stat: Redis failures that ended within the bound
FIRST_DELAY, MAX_DELAY = 0.1, 2.0  # seconds between tries: doubling from the first, capped

T = TypeVar("T")


class RedisBackendError(ConnectionError):
    """Redis cannot be reached or failed a command; names the (masked) URL and what to check."""

    def __init__(self, url: str, error: Exception) -> None:
        self.url = mask_url(url)
        super().__init__(
            f"Redis at {self.url} is unavailable ({type(error).__name__}: {error}); check that "
            "redis-server is running and reachable from this host, and the REDIS_URL setting "
            "(or the DEDUP_REDIS_URL environment variable of crawler.settings.distributed)"
        )


def keys_lost(url: str) -> RedisBackendError:
    """The error of a server that answers without the crawl's keys: restarted without
    persistence, or flushed. Going on would read an empty frontier as a finished crawl."""
    return RedisBackendError(url, ConnectionError(
        "it answers, but this crawl's keys are gone: restarted without persistence, or flushed"))


#: What a namespace may be: it is one segment of every key (``{prefix}:{namespace}:...``), so a
#: ``:`` in it would make one crawl's keys another's (``a:web`` and ``a``'s ``web:requests``).
NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def redis_url(settings: config.SettingsLike) -> str:
    """``REDIS_URL`` (its default when unset or empty): the one reader of the setting."""
    return str(settings.get("REDIS_URL") or defaults.REDIS_URL)


def key_prefix(settings: config.SettingsLike) -> str:
    """``REDIS_KEY_PREFIX`` (its default when unset or empty): the one reader of the setting."""
    return str(settings.get("REDIS_KEY_PREFIX") or defaults.REDIS_KEY_PREFIX)


@dataclass(frozen=True)
class RedisSettings:
    """How the Redis components reach the server: ``REDIS_URL`` (:func:`redis_url`),
    ``REDIS_RETRY_SECONDS`` (how long a failed call is tried again, :class:`RedisRetry`) and
    ``REDIS_TIMEOUT_SECONDS`` (how long a reply may take)."""

    url: str = defaults.REDIS_URL
    retry_seconds: float = defaults.REDIS_RETRY_SECONDS
    timeout_seconds: float = defaults.REDIS_TIMEOUT_SECONDS

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> RedisSettings:
        """Read and check them (retry 0-3600 s, timeout 0.1-3600 s; SettingError)."""
        return cls(
            redis_url(settings),
            config.get_float(settings, "REDIS_RETRY_SECONDS", defaults.REDIS_RETRY_SECONDS,
                             lo=0.0, hi=3600.0),
            config.get_float(settings, "REDIS_TIMEOUT_SECONDS", defaults.REDIS_TIMEOUT_SECONDS,
                             lo=0.1, hi=3600.0),
        )  # fmt: skip


@dataclass(frozen=True)
class NamespaceSettings:
    """The namespace of one crawl's keys: ``REDIS_KEY_PREFIX`` (``prefix``) and
    ``DEDUP_NAMESPACE`` (``name``, default ``BOT_NAME``); :attr:`base` is
    ``{prefix}:{name}``, the start of every key."""

    prefix: str = defaults.REDIS_KEY_PREFIX
    name: str = defaults.BOT_NAME

    @property
    def base(self) -> str:
        return f"{self.prefix}:{self.name}"

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> NamespaceSettings:
        """Read them; the namespace checked: letters, digits, ``.``, ``_`` and ``-``, 1-100
        characters, no ``:`` (:data:`NAMESPACE_RE`); :class:`SettingError` else."""
        explicit = settings.get("DEDUP_NAMESPACE", defaults.DEDUP_NAMESPACE)
        ns = str(explicit or settings.get("BOT_NAME") or defaults.BOT_NAME)
        if not NAMESPACE_RE.fullmatch(ns):
            raise config.SettingError(
                "DEDUP_NAMESPACE" if explicit else "BOT_NAME", ns,
                "a namespace of letters, digits, '.', '_' and '-' (1-100 characters, no ':'; "
                "set DEDUP_NAMESPACE)")
        return cls(key_prefix(settings), ns)


def settings_of_namespace(settings: Any, value: str) -> Any | None:
    """A copy of Scrapy ``settings`` whose ``DEDUP_NAMESPACE`` is the namespace a command was
    given: ``value`` bare (``crawl42``) or as keys and ``scrapy crawlstatus --list`` show it
    (``dedup:crawl42``); None when it is no namespace (:data:`NAMESPACE_RE`). Its
    :func:`namespace`, :func:`queue_key` and start list are that crawl's, as its workers
    compute them."""
    name = value.strip().removeprefix(key_prefix(settings) + ":")
    if not NAMESPACE_RE.fullmatch(name):
        return None
    copy = settings.copy()
    copy.set("DEDUP_NAMESPACE", name, priority="cmdline")
    return copy


def namespace(settings: config.SettingsLike) -> str:
    """``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE or BOT_NAME}`` (:class:`NamespaceSettings`)."""
    return NamespaceSettings.from_settings(settings).base


def queue_key(settings: config.SettingsLike, spider: str) -> str:
    """The frontier's key for ``spider``: ``SCHEDULER_QUEUE_KEY`` with ``%(spider)s`` and
    ``%(namespace)s`` (:func:`namespace`) filled in (scrapy-redis's default when unset). The
    distributed profile's ``%(namespace)s:%(spider)s:requests`` follows the ``DEDUP_NAMESPACE``
    setting, whether the environment or ``-s`` set it."""
    pattern = str(settings.get("SCHEDULER_QUEUE_KEY") or "%(spider)s:requests")
    base = namespace(settings)  # its own SettingError
    try:
        return pattern % {"spider": spider, "namespace": base}
    except (KeyError, ValueError, TypeError):
        raise config.SettingError("SCHEDULER_QUEUE_KEY", pattern, "a key in which only "
                                  "%(spider)s and %(namespace)s are filled in") from None


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


# --- the retry policy ---------------------------------------------------------------------------
class RedisRetry:
    """Try a failed Redis call again, with backoff, for up to ``seconds`` (module docstring).

    ``timeout``: seconds a reply may take before the call counts as failed (the clients'
    socket timeout). ``stats``: a stats collector, attached by the first component that has
    one. After one failure outlasted the bound (:attr:`given_up`) calls fail at once.
    """

    def __init__(self, seconds: float, timeout: float, stats: Any = None) -> None:
        self.seconds, self.timeout, self.stats = seconds, timeout, stats
        self.given_up = False
        self.recovered_at = -1e9  # time.monotonic() when a failure last ended
        self._warned = False

    def call(self, func: Callable[[], T], url: str) -> T:
        """``func()``; a connection error is retried until the bound, then raised as
        :class:`RedisBackendError`."""
        deadline, delay, tries = time.monotonic() + self.seconds, FIRST_DELAY, 0
        while True:
            try:
                result = func()
            except connection_errors() as exc:
                remaining = deadline - time.monotonic()
                if self.given_up or remaining <= 0:
                    self.given_up = True
                    raise RedisBackendError(url, exc) from None
                self._retrying(exc, url, tries)
                time.sleep(min(delay, remaining))  # the last try at the deadline
                delay, tries = min(delay * 2, MAX_DELAY), tries + 1
                continue
            if tries:
                self._recovered(tries)
            return result

    def _retrying(self, exc: Exception, url: str, tries: int) -> None:
        self._inc(RETRIES)
        if not self._warned:
            self._warned = True
            logger.warning("Redis at %s failed a call (%s: %s); retrying for up to %gs "
                           "(REDIS_RETRY_SECONDS), the crawl waits", mask_url(url),
                           type(exc).__name__, exc, self.seconds)  # fmt: skip
        elif tries == 0:
            logger.info("Redis failed a call again (%s); retrying", type(exc).__name__)

    def _recovered(self, tries: int) -> None:
        self.recovered_at = time.monotonic()
        self._inc(RECOVERED)
        logger.info("Redis answered again after %d retr%s; the crawl goes on",
                    tries, "y" if tries == 1 else "ies")  # fmt: skip

    def recovered_within(self, seconds: float) -> bool:
        """Whether a failure ended less than ``seconds`` ago."""
        return time.monotonic() - self.recovered_at < seconds

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)


#: id(settings) -> (a weak reference to those settings, their policy). Scrapy's settings are
#: mappings, unhashable, so they cannot key a WeakKeyDictionary.
_policies: dict[int, tuple[weakref.ref[Any], RedisRetry]] = {}


def retry_policy(settings: config.SettingsLike, stats: Any = None) -> RedisRetry:
    """The one :class:`RedisRetry` of the crawl these settings belong to (``stats`` attached
    when given); a settings object that cannot be weakly referenced (a dict) gets a new one."""
    key = id(settings)
    ref, policy = _policies.get(key, (None, None))
    if policy is None or ref is None or ref() is not settings:
        options = RedisSettings.from_settings(settings)
        policy = RedisRetry(options.retry_seconds, options.timeout_seconds)
        with contextlib.suppress(TypeError):  # a dict: not weakly referenced
            ref = weakref.ref(settings, lambda _: _policies.pop(key, None))
            _policies[key] = (ref, policy)
    if stats is not None:
        policy.stats = stats
    return policy


class RedisBacked:
    """Shared plumbing of the Redis components: the client, the base of their keys, the URL
    for errors, and script and command calls that turn a lost server into
    :class:`RedisBackendError`: retried under :attr:`retry` (a :class:`RedisRetry`; None, as
    built by hand: never retried). Every call through :meth:`_run` and :meth:`_call` must be
    safe to run twice (module docstring); :meth:`_call_once` is for those that are not."""

    retry: RedisRetry | None = None

    def __init__(self, client: redis.Redis, base: str, url: str) -> None:
        self.client = client
        self.base = base
        self.url = url

    def retrying(self, policy: RedisRetry) -> RedisBacked:
        """Retry this component's calls under ``policy`` from now on; returns ``self``."""
        self.retry = policy
        return self

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        return self._retried(lambda: script(keys=keys, args=args))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._retried(lambda: getattr(self.client, name)(*args, **kwargs))

    def _call_once(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """:meth:`_call` never retried: a command not safe to run twice (``hincrby``)."""
        return self._once(lambda: getattr(self.client, name)(*args, **kwargs))

    def _run_once(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """:meth:`_run` never retried: a script not safe to run twice (a raw append)."""
        return self._once(lambda: script(keys=keys, args=args))

    def _once(self, func: Callable[[], T]) -> T:
        try:
            return func()
        except connection_errors() as exc:
            raise RedisBackendError(self.url, exc) from None

    def _retried(self, func: Callable[[], T]) -> T:
        if self.retry is not None:
            return self.retry.call(func, self.url)
        return self._once(func)

    @cached_property
    def _loop(self) -> LoopConnection:
        """The event loop's connection beside :attr:`client`, for calls awaited with the
        reactor not held (:meth:`_run_on_loop`); made on first use."""
        from crawler.backends.redis.aio import LoopConnection

        return LoopConnection(self.client)

    async def _run_on_loop(self, script: Any, keys: list[Any], args: list[Any],
                           log: logging.Logger, who: str, what: str) -> Any:  # fmt: skip
        """``script``'s reply, the call sent on the event loop's connection and awaited;
        :data:`NOT_ON_LOOP` when there is none (no running asyncio loop, a server redis-py
        reaches otherwise than by plain TCP) or it failed (said once on ``log``: ``who``'s
        ``what`` goes through redis-py), for the caller to make the call through redis-py."""
        loop_redis = self._loop.get()
        if loop_redis is None:
            return NOT_ON_LOOP
        from crawler.backends.redis.aio import LoopConnection, LoopRedisError

        try:
            return await loop_redis.run_script(script, keys, args)
        except LoopRedisError as exc:
            LoopConnection.failed(loop_redis, log, who, what, exc)
            return NOT_ON_LOOP

    def close(self) -> None:
        made = self.__dict__.get("_loop")  # the loop's connection, if one was made
        if made is not None:
            made.close()
        self.client.close()


#: :meth:`RedisBacked._run_on_loop`'s answer when the call must go through redis-py.
NOT_ON_LOOP = object()


# --- small helpers of the Redis modules (no Redis client needed) -----------------------------


def glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis glob pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def text(value: Any) -> str:
    """A Redis reply (bytes, kept byte for byte) as ``str``."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def server_ms(reply: Any) -> int:
    """Redis ``TIME`` (seconds, microseconds) as milliseconds: the crawl's one clock."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000

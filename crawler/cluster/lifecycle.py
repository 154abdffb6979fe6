"""The lifecycle of a distributed crawl's Redis state: running, finished, expired, cleared.

A crawl's state is every key of its namespace, ``{base}`` =
``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}`` (:func:`crawler.backends.common.namespace`): the key
``{base}`` itself if any, and every key under ``{base}:`` — membership (``:meta``,
``:workers``, ``:workers:fenced:*``), the seen set (``:bloom``, ``:bloom:*``: layer shards and
each adder's memo), the content index (``:ci:*``, with its canonical-key filter
``:ci:ck:bloom*``), robots.txt (``:robots``) and the frontier (``SCHEDULER_QUEUE_KEY``, in the
distributed profile ``{base}:{spider}:requests`` and its ``:*`` keys). A queue key set outside
``{base}:`` (``-s SCHEDULER_QUEUE_KEY=...``) is recorded in ``{base}:meta`` (field ``queue``) by
the worker that finds the crawl done, so that it is covered as well (:meth:`CrawlState.record`),
and so is the start list (``REDIS_START_URLS_KEY``, :mod:`crawler.cluster.startlist`:
``NS:web:start_urls`` by default, outside ``{base}:``; field ``start``): seeds pushed to a
finished namespace are never read, and a cleared one starts from a fresh list.

* **Started** by the first worker (``{base}:meta`` field ``started``); **resumed** by any worker
  started on the namespace while it is not finished (workers killed, ``redis_error``...): the
  queue, leases and seen set carry on.
* **Finished**: a worker that finds the shared crawl done (nothing queued, nothing leased,
  :class:`crawler.cluster.worker.ClusterWorker`) marks it (:meth:`CrawlState.finish`): field
  ``finished`` = the Redis clock in ms, set once (``HSETNX``), and every key of the crawl gets
  the same deadline ``finished + DISTRIBUTED_FINISHED_TTL_SECONDS`` (``PEXPIREAT``; 0: none).
  Every worker leaving a finished crawl sets that deadline again on the keys it wrote while
  closing, so the last one out leaves no key without it. One deadline for all keys: Redis never
  returns a key past its deadline, so a reader sees the whole state or none of it.
* **Refused again**: a worker started on a finished namespace is stopped at pre-flight
  (:func:`check_not_finished`, exit 2) with when it finished, the pages it stored, and the two
  ways on: another ``DEDUP_NAMESPACE``, or ``scrapy crawlclear NS`` and run again.
* **Cleared** by ``scrapy crawlclear`` (:meth:`CrawlState.clear`): ``SCAN`` and ``UNLINK`` in
  bounded batches, refused while a member is live (its lease in the future on the Redis clock).

A namespace is one key segment (no ``:``, :class:`crawler.backends.common.NamespaceSettings`),
so no other namespace's keys lie under ``{base}:``; one named so by an older version (``a``
and ``a:b``) is told apart by its own ``{base}:b:meta`` (a hash with ``started``) and left
alone. The stored pages are in storage (``STORAGE_URL``), never in Redis:
expiring or clearing a crawl's state leaves them there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from crawler import config, defaults
from crawler.backends.common import (
    RedisBacked,
    batched,
    glob_escape,
    namespace,
    server_ms,
    text,
)

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

FINISHED = "finished"  # {base}:meta field: ms (Redis clock) when the crawl was found done
QUEUE = "queue"  # {base}:meta field: the queue key, when it lives outside {base}:
START = "start"  # {base}:meta field: the start list's key, when it lives outside {base}:
BATCH = 500  # keys per SCAN batch, per pipeline of PEXPIREAT, MEMORY USAGE or UNLINK
TTL_MAX = 10 * 365 * 86400.0  # seconds: ten years


def finished_ttl(settings: config.SettingsLike) -> float:
    """``DISTRIBUTED_FINISHED_TTL_SECONDS``, checked (0 = a finished crawl never expires)."""
    name = "DISTRIBUTED_FINISHED_TTL_SECONDS"
    return config.get_float(settings, name, defaults.DISTRIBUTED_FINISHED_TTL_SECONDS,
                            lo=0.0, hi=TTL_MAX)  # fmt: skip


class CrawlFinished(Exception):
    """A worker started on a finished namespace (pre-flight: exit 2, one line)."""

    exit_code = 2


# KEYS: meta. Returns the finished time (ms), set now unless it was set before.
_FINISH = """
local t = redis.call('TIME')
redis.call('HSETNX', KEYS[1], 'finished', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return redis.call('HGET', KEYS[1], 'finished')
"""


class CrawlState(RedisBacked):
    """Every key of one crawl's namespace (module docstring): find, expire, clear."""

    def __init__(self, client: redis.Redis, base: str, url: str = "",
                 start_key: str = "") -> None:
        super().__init__(client, base, url)
        self.meta_key = f"{base}:meta"
        self.workers_key = f"{base}:workers"
        self.start_key = start_key  # the start list, covered when it lives outside {base}:

    @classmethod
    def of(cls, settings: config.SettingsLike) -> CrawlState:
        from crawler.backends.common import redis_url, retry_policy
        from crawler.backends.redis import connect

        url = redis_url(settings)
        policy = retry_policy(settings)
        state = cls(connect(url, policy.timeout), namespace(settings), url)
        state.retrying(policy)
        return state

    # --- what the namespace holds -------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {text(k): text(v) for k, v in self._call("hgetall", self.meta_key).items()}

    def finished_at(self) -> int | None:
        """When the crawl was found done (ms, Redis clock), None while it is not."""
        raw = self._call("hget", self.meta_key, FINISHED)
        return int(raw) if raw else None

    def record(self, queue_key: str, start_key: str) -> None:
        """Remember the queue key and the start list's key when they live outside ``{base}:``
        (module docstring)."""
        for field, key in ((QUEUE, queue_key), (START, start_key)):
            if not self._mine(key):
                self._call("hsetnx", self.meta_key, field, key)

    def _mine(self, key: str) -> bool:
        return key == self.base or key.startswith(self.base + ":")

    def now_ms(self) -> int:
        return server_ms(self._call("time"))

    def live_members(self) -> list[str]:
        """Members whose lease runs past now on the Redis clock."""
        return [text(w) for w in self._call("zrangebyscore", self.workers_key,
                                            self.now_ms(), "+inf")]  # fmt: skip

    def nested(self) -> set[str]:
        """The bases of namespaces named ``{this}:...`` (their meta has ``started``)."""
        found = set()
        for key in self._scan(f"{glob_escape(self.base)}:*:meta"):
            if key != self.meta_key and self._call("hexists", key, "started"):
                found.add(key[: -len(":meta")])
        return found

    def keys(self) -> Iterator[list[str]]:
        """Every key of the crawl, in batches of at most :data:`BATCH` (SCAN, never KEYS)."""
        queue, start = self._call("hmget", self.meta_key, [QUEUE, START])
        roots = [self.base, *([text(queue)] if queue else [])]
        exact = {text(k) for k in (start, self.start_key) if k and not self._mine(text(k))}
        for key in sorted(exact):
            if self._call("exists", key):
                yield [key]
        nested = tuple(sorted(self.nested()))
        for root in roots:
            if self._call("exists", root):
                yield [root]
            mine = (k for k in self._scan(f"{glob_escape(root)}:*")
                    if not any(k == n or k.startswith(n + ":") for n in nested))  # fmt: skip
            yield from batched(mine, BATCH)

    def _scan(self, pattern: str) -> Iterator[str]:
        cursor = 0
        while True:
            cursor, found = self._call("scan", cursor, match=pattern, count=1000)
            yield from (text(k) for k in found)
            if int(cursor) == 0:
                return

    # --- finished and expiring ----------------------------------------------------------------
    def finish(self, ttl_seconds: float) -> int:
        """Mark the crawl finished (once) and give every key its deadline (module docstring);
        returns how many keys got it. Safe to run again: the deadline stays the same."""
        finished = int(self._run(self.client.register_script(_FINISH), [self.meta_key], []))
        return self.expire(finished + round(ttl_seconds * 1000)) if ttl_seconds > 0 else 0

    def expire(self, deadline_ms: int) -> int:
        """``PEXPIREAT deadline_ms`` on every key of the crawl; returns how many."""
        count = 0
        for batch in self.keys():
            pipe = self.client.pipeline(transaction=False)
            for key in batch:
                pipe.pexpireat(key, deadline_ms)
            count += sum(1 for done in self._retried(pipe.execute) if done)
        return count

    def expires_at(self) -> int | None:
        """The meta key's deadline (ms since the epoch), None when it has none."""
        ttl = int(self._call("pttl", self.meta_key))
        return self.now_ms() + ttl if ttl >= 0 else None

    # --- clearing -----------------------------------------------------------------------------
    def size(self) -> tuple[int, int]:
        """``(keys, bytes)``: the bytes as ``MEMORY USAGE`` estimates them (sampled)."""
        keys = size = 0
        for batch in self.keys():
            keys += len(batch)
            size += self._usage(batch)
        return keys, size

    def clear(self) -> tuple[int, int]:
        """Delete every key of the crawl (``UNLINK``, in batches); returns ``(keys, bytes)``
        deleted, the bytes estimated as :meth:`size` does."""
        keys = size = 0
        for batch in self.keys():
            size += self._usage(batch)
            keys += int(self._call("unlink", *batch))
        return keys, size

    def _usage(self, batch: list[str]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key)
        return sum(int(n or 0) for n in self._retried(pipe.execute))


def finish_crawl(member: RedisBacked, settings: config.SettingsLike, queue_key: str,
                 start_key: str, log: bool = True) -> int:
    """The hook of a worker that finds the shared crawl done (and again as it leaves):
    ``member`` (its membership: client, base, retry policy) marks the crawl finished and sets
    the deadline of its keys, its queue and start list among them; returns how many keys
    got it."""
    ttl = finished_ttl(settings)
    state = CrawlState(member.client, member.base, member.url)
    if member.retry is not None:
        state.retrying(member.retry)
    state.record(queue_key, start_key)
    count = state.finish(ttl)
    if not log:
        pass
    elif ttl > 0:
        logger.info("The shared crawl is done: marked finished in Redis, its %d key(s) expire in "
                    "%s (DISTRIBUTED_FINISHED_TTL_SECONDS)", count, _duration(ttl))  # fmt: skip
    else:
        logger.info("The shared crawl is done: marked finished in Redis, kept until `scrapy "
                    "crawlclear` (DISTRIBUTED_FINISHED_TTL_SECONDS=0)")  # fmt: skip
    return count


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:g} day(s)"
    return f"{seconds / 3600:g} hour(s)" if seconds >= 3600 else f"{seconds:g} s"


# --- pre-flight -----------------------------------------------------------------------------------
def check_not_finished(settings: config.SettingsLike) -> None:
    """Raise :class:`CrawlFinished` when the namespace of ``settings`` holds a finished crawl
    (module docstring); a running or stopped one passes (it is resumed)."""
    state = CrawlState.of(settings)
    try:
        finished = state.finished_at()
        if finished is None:
            return
        meta, expires = state.meta(), state.expires_at()
    finally:
        state.close()
    ns = state.base.split(":", 1)[1] if ":" in state.base else state.base
    pages = stored_pages(settings, meta.get("crawl", ""))
    stored = f", {pages} page(s) stored" if pages is not None else ""
    expiry = f"; its Redis keys expire at {_utc(expires)}" if expires is not None else ""
    raise CrawlFinished(
        f"the crawl in namespace {ns!r} finished at {_utc(finished)}{stored}; a finished crawl "
        f"is not resumed: re-crawl under a new DEDUP_NAMESPACE, or run `scrapy crawlclear {ns}` "
        f"and start again (its pages stay in storage){expiry}"
    )


def stored_pages(settings: config.SettingsLike, crawl: str) -> int | None:
    """Pages the workers of crawl id ``crawl`` stored (``crawls.job``), None when unknown."""
    if not crawl:
        return None
    try:
        from crawler.storage.crawltotals import crawl_totals

        url = str(settings.get("STORAGE_URL") or defaults.STORAGE_URL)
        return crawl_totals(url, crawl).documents
    except Exception:  # a figure for the message only: never the reason it is not printed
        return None


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))

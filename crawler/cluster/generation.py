"""A shared Redis that comes back older than storage is noticed: :class:`GenerationFence`.

Redis keeps a distributed crawl's frontier, seen set, leases and content index; storage keeps
what was decided. A Redis restored from an older snapshot (an RDB file, a replica that lagged,
an append-only file synced every second) has forgotten what happened since: requests popped,
links pushed, pages kept. Before this fence the crawl went on as if nothing happened and lost
pages, fetched others twice and stored duplicate groups twice.

**The counter.** Every committed storage batch of the crawl (but the row-by-row writes that
isolate a row the database refuses) increments a counter in Redis
(``{base}:meta`` field ``generation``, ``HINCRBY``) inside the batch's transaction and records
the highest value in storage (table ``redis_generations``, one row per crawl: the namespace and
the moment its first worker joined, so a namespace reused for a new crawl starts at 0). Since
the counter only grows, a healthy Redis always holds at least every value storage recorded:

* **at every commit** the new value must exceed what storage recorded (read in the same
  transaction, before the increment); else the transaction is rolled back and nothing of the
  batch is acknowledged;
* **at every membership renewal** (every third of ``DISTRIBUTED_LEASE_SECONDS``: so also right
  after a reconnect, and for an idle worker) the counter must be at least what storage
  recorded (read first, then the counter: no race with other workers' commits).

A Redis that comes back *empty* (or flushed) is the outage policy's ``redis_error`` (its keys
are gone), not this. A Redis that comes back older than storage fails one of them within one
renewal: the worker
logs one ERROR line saying so and closes with finish reason ``redis_rolled_back`` (exit 1);
its leases and pending index entries go back to the (older) Redis as at any close. What that
Redis lost cannot be rebuilt from storage (it alone knew the links pushed since), so the crawl
is not continued on it: restore a Redis at least as new, or run the crawl again under a new
``DEDUP_NAMESPACE`` (the stored pages stay; pages fetched again update their rows, and the
content index is loaded from storage, so nothing is stored twice).

Limit: a snapshot taken after the last commit (no batch committed between the snapshot and the
crash) is not told apart from the Redis as it was; what it lost is then only work not yet
committed, whose requests are still leased or queued in it and are fetched again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crawler.backends.common import (
    REDIS_ERROR,
    RedisBacked,
    RedisBackendError,
    keys_lost,
    namespace,
)
from crawler.closing import close_crawl
from crawler.outputs.formats import mask_url

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# KEYS: the namespace meta hash. ARGV: the generation storage recorded. The counter advances
# only while it is at least that (a healthy Redis): an older one answers -(counter + 1) and
# stays as it is, so failed attempts never carry it past what storage recorded.
# A namespace whose meta hash is gone (Redis restarted empty, or flushed) answers 'gone': the
# outage policy's error (keys lost, redis_error), as the membership reports it.
_BUMP = """
if redis.call('HEXISTS', KEYS[1], 'started') == 0 then return 'gone' end
local v = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if v < tonumber(ARGV[1]) then return -v - 1 end
return redis.call('HINCRBY', KEYS[1], 'generation', 1)
"""

#: The finish reason of a worker that found its Redis older than storage.
REDIS_ROLLED_BACK = "redis_rolled_back"
#: The stat set to 1 when this worker found it (also the once-only flag of its ERROR line).
ROLLED_BACK_STAT = "dedup/shared/redis_rolled_back"


def report_rolled_back(crawler: Crawler | None, exc: RedisRolledBack) -> None:
    """The first time a component of the crawl finds Redis older than storage (a batch's
    commit, a renewal's check): one ERROR line, the stat, and the crawl closes
    ``redis_rolled_back``; later finds say nothing."""
    stats = crawler.stats if crawler is not None else None
    if stats is not None:  # once; and a Redis already reported down or emptied says enough
        if stats.get_value(ROLLED_BACK_STAT) or stats.get_value(f"dedup/{REDIS_ERROR}"):
            return
        stats.set_value(ROLLED_BACK_STAT, 1)
    logger.error("%s", exc)
    close_crawl(crawler, REDIS_ROLLED_BACK)


class RedisRolledBack(RuntimeError):
    """The shared Redis holds an older state than storage recorded; the message is one line."""


class GenerationFence(RedisBacked):
    """The commit counter of one distributed crawl (module docstring), in the hash
    ``{base}:meta`` of the crawl's namespace ``base`` (the cluster's own meta hash)."""

    def __init__(self, client: redis.Redis, base: str, crawl_name: str, url: str = "") -> None:
        super().__init__(client, base, url)
        self.meta_key = f"{base}:meta"
        started = self._call("hget", self.meta_key, "started")
        started = started.decode() if isinstance(started, bytes) else str(started or "0")
        #: the ``redis_generations`` row of this crawl: namespace and first join (ms)
        self.key = f"{crawl_name}@{started}"
        self._bump = client.register_script(_BUMP)

    @classmethod
    def of(cls, crawler: Crawler | None) -> GenerationFence | None:
        """The fence of a distributed worker (Redis backend, shared scheduler), else None;
        on the worker's membership connection, after it joined (the crawl's start is known)."""
        if crawler is None:
            return None
        from crawler.backends import backend_name
        from crawler.cluster.worker import member, shared_scheduler

        if backend_name(crawler.settings) != "redis" or not shared_scheduler(crawler.settings):
            return None
        me = member(crawler)
        fence = cls(me.client, me.base, namespace(crawler.settings), me.url)
        if me.retry is not None:
            fence.retrying(me.retry)
        return fence

    def bump(self, recorded: int) -> int:
        """The next counter value, inside a batch's transaction; raises
        :class:`RedisRolledBack` (the counter unchanged) when the counter is below the
        ``recorded`` one."""
        try:
            answer = self._run(self._bump, [self.meta_key], [recorded])
        except RedisBackendError:
            raise
        except Exception as exc:  # any other failure of the server: the outage policy's error
            raise RedisBackendError(self.url, exc) from exc
        if answer in (b"gone", "gone"):
            raise keys_lost(self.url)
        value = int(answer)
        if value < 0:
            raise self.rolled_back(-value - 1, recorded)
        return value

    def check(self, recorded: int) -> None:
        """Raise :class:`RedisRolledBack` when the counter is below ``recorded`` (read from
        storage *before* this call)."""
        started, raw = self._call("hmget", self.meta_key, ["started", "generation"])
        if started is None:
            raise keys_lost(self.url)
        value = int(raw or 0)
        if value < recorded:
            raise self.rolled_back(value, recorded)

    def rolled_back(self, value: int, recorded: int) -> RedisRolledBack:
        return RedisRolledBack(
            f"Redis at {mask_url(self.url)} came back older than the crawl database: "
            f"its commit counter for crawl {self.key} is {value}, storage recorded {recorded} "
            "(restored from an older snapshot?). What it forgot cannot be trusted, so this "
            "worker stops: restore a Redis at least as new, or run the crawl again under a "
            "new DEDUP_NAMESPACE (stored pages are kept)")

"""Each distributed worker's live numbers in Redis, the whole crawl's figures back, and the
final summary of the crawl.

At each membership renewal (:class:`crawler.cluster.worker.ClusterWorker`, every
``DISTRIBUTED_HEARTBEAT_SECONDS``) :func:`renewed` runs ONE Lua script (:data:`_PUBLISH`) that

* writes this worker's record in ``{base}:workers:stats`` (field: its member id; value: compact
  JSON of ``pages`` = ``response_received_count``, ``stored`` = ``storage/documents`` -
  ``storage/demoted``, ``dropped`` = ``storage/dropped`` - ``dedup/settle/promoted`` (so that the
  sums over the workers are the crawl's rows in ``documents`` and ``dropped``), ``rate`` =
  pages/s since the previous record, ``hosts`` = the hosts it owns in the frontier now (``SCARD
  F:owned:{w}``), ``started`` (ms, the worker's clock), ``updated`` (ms, the Redis clock));
  records of other workers are never touched;
* and answers the whole crawl's ``queued`` and ``leased`` (the frontier's counters), the live
  members and the sum of every record's ``pages``: :func:`totals` keeps them for the progress
  line (:mod:`crawler.extensions.progress`), so that line costs no Redis call of its own. Summing
  reads every record: O(workers) per renewal, inside Redis.

When the engine has stopped (``engine_stopped``: the worker has handed its leases back and left
the membership, its pipelines have written everything) the record is written once more with
``closed`` = the finish reason, and the worker that then finds no live member and nothing queued
or leased claims ``{base}:workers:summary`` (``SET NX``, in the same script; a worker's first
record deletes it, so a namespace crawled again is summed again; when the crawl's keys expire,
:mod:`crawler.cluster.lifecycle`, these two take the deadline of ``{base}:meta``) and logs one
INFO block, ``Crawl <id> finished: N workers, ... pages fetched, ... stored, ... dropped ...``
with a line per worker (:func:`crawler.backends.redis.status.format_summary`).
Two workers closing at the same instant: the one that sums may read the other's record of
its last renewal rather than its closing one; ``scrapy crawlstatus`` afterwards reads both
closing records. A killed worker counts with its last renewal's numbers.

A failed write is logged at DEBUG and skipped: the membership renewal that just ran owns the
Redis-outage policy; these numbers are only reports.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals

from crawler.backends.common import RedisBacked, redis_errors

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from crawler.cluster.worker import ClusterWorker

logger = logging.getLogger(__name__)

# KEYS: stats hash, frontier meta, this worker's owned hosts, workers, summary claim, meta.
# ARGV: worker, record JSON (without hosts and updated), first record (0/1), closing (0/1).
# Returns {queued, leased, live members, pages of every record, records, claimed summary (0/1)}.
_PUBLISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = cjson.decode(ARGV[2])
rec['hosts'] = redis.call('SCARD', KEYS[3])
rec['updated'] = now
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
if ARGV[3] == '1' then redis.call('DEL', KEYS[5]) end
local m = redis.call('HMGET', KEYS[2], 'queued', 'leased')
local queued, leased = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local live = redis.call('ZCOUNT', KEYS[4], now, '+inf')
local pages, all = 0, redis.call('HVALS', KEYS[1])
for _, v in ipairs(all) do
  local ok, r = pcall(cjson.decode, v)
  if ok and type(r) == 'table' then pages = pages + (tonumber(r['pages']) or 0) end
end
local claimed = 0
if ARGV[4] == '1' and live == 0 and queued == 0 and leased == 0 then
  if redis.call('SET', KEYS[5], now, 'NX') then claimed = 1 end
end
local left = redis.call('PTTL', KEYS[6])
if left > 0 then  -- a finished crawl expiring (crawler.cluster.lifecycle): these keys with it
  redis.call('PEXPIRE', KEYS[1], left)
  if claimed == 1 then redis.call('PEXPIRE', KEYS[5], left) end
end
return {queued, leased, live, pages, #all, claimed}
"""


@dataclass(frozen=True)
class CrawlTotals:
    """The whole crawl, as the last record written saw it."""

    queued: int
    leased: int
    live: int  # members whose lease has not expired
    pages: int  # response_received_count summed over every worker's record
    workers: int  # records (every worker that ever published, dead ones too)
    claimed: bool = False  # this closing worker logs the final summary


def worker_numbers(stats: StatsCollector) -> dict[str, int]:
    """``pages``, ``stored`` and ``dropped`` of this worker (module docstring)."""

    def get(key: str) -> int:
        return int(stats.get_value(key) or 0)

    return {"pages": get("response_received_count"),
            "stored": get("storage/documents") - get("storage/demoted"),
            "dropped": get("storage/dropped") - get("dedup/settle/promoted")}  # fmt: skip


class StatsPublisher(RedisBacked):
    """Writes one worker's record and reads the crawl's totals back (module docstring)."""

    def __init__(self, client: Any, base: str, worker: str, queue_key: Callable[[], str],
                 numbers: Callable[[], dict[str, int]], url: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        from crawler.backends.redis.status import stats_key, summary_key

        super().__init__(client, base, url)
        self.worker, self.queue_key, self.numbers, self.clock = worker, queue_key, numbers, clock
        self.keys = (stats_key(base), summary_key(base))
        self.started_ms = int(time.time() * 1000)
        self.totals: CrawlTotals | None = None
        self._last: tuple[float, int] | None = None  # (clock, pages) of the previous record
        self._script = client.register_script(_PUBLISH)

    def publish(self, closed: str | None = None) -> CrawlTotals:
        """Write this worker's record (``closed``: its finish reason, at close) and return the
        crawl's totals; raises the Redis errors."""
        numbers, now = self.numbers(), self.clock()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (numbers["pages"] - self._last[1]) / (now - self._last[0])
        record: dict[str, Any] = {**numbers, "rate": round(rate, 2), "started": self.started_ms}
        if closed is not None:
            record["closed"] = closed
        queue = self.queue_key()
        keys = [self.keys[0], f"{queue}:meta", f"{queue}:owned:{self.worker}",
                f"{self.base}:workers", self.keys[1], f"{self.base}:meta"]  # fmt: skip
        out = self._run(self._script, keys, [self.worker, json.dumps(record),
                                             int(self._last is None), int(closed is not None)])
        self._last = (now, numbers["pages"])
        queued, leased, live, pages, workers, claimed = (int(v) for v in out)
        self.totals = CrawlTotals(queued, leased, live, pages, workers, bool(claimed))
        return self.totals


_publishers: weakref.WeakKeyDictionary[Any, StatsPublisher] = weakref.WeakKeyDictionary()


def attach(crawler: Crawler, worker: ClusterWorker) -> None:
    """Publish ``worker``'s numbers at its renewals (:func:`renewed`) and once the engine has
    stopped (``engine_stopped``: after every ``spider_closed`` handler, ``ClusterWorker``'s
    leaving the membership included)."""
    stats = crawler.stats
    assert stats is not None
    me = worker.member
    publisher = StatsPublisher(me.client, me.base, me.id, lambda: worker.frontier().key,
                               lambda: worker_numbers(stats), url=me.url)  # fmt: skip
    if me.retry is not None:
        publisher.retrying(me.retry)
    _publishers[crawler] = publisher

    def closed() -> None:
        _closed(crawler, publisher, str(stats.get_value("finish_reason") or "finished"))

    crawler.signals.connect(closed, signal=signals.engine_stopped, weak=False)


def renewed(crawler: Crawler) -> None:
    """The membership was just renewed: write this worker's record (module docstring)."""
    publisher = _publishers.get(crawler)
    if publisher is None:
        return
    try:
        publisher.publish()
    except redis_errors() as exc:
        logger.debug("could not publish this worker's numbers (%s)", exc)


def totals(crawler: Crawler) -> CrawlTotals | None:
    """The whole crawl's figures as this worker's last record saw them; None before it."""
    publisher = _publishers.get(crawler)
    return publisher.totals if publisher is not None else None


def _closed(crawler: Crawler, publisher: StatsPublisher, reason: str) -> None:
    from crawler.backends.redis.status import crawl_status, format_summary

    try:
        found = publisher.publish(closed=reason)
        if not found.claimed:
            return
        view = crawl_status(publisher.client, publisher.base, publisher.queue_key())
    except redis_errors() as exc:
        logger.debug("could not publish this worker's final numbers (%s)", exc)
        return
    if view is not None:
        logger.info("%s", format_summary(view), extra={"spider": crawler.spider})


def shared_bloom(crawler: Crawler) -> dict[str, Any] | None:
    """``urls``, ``capacity`` and ``fill_ratio`` of the crawl's shared Bloom filter in Redis
    (:func:`crawler.backends.redis.status.bloom_figures`), read now; None when Redis cannot be
    asked (logged at DEBUG)."""
    from crawler.backends.common import RedisSettings, namespace
    from crawler.backends.redis import connect
    from crawler.backends.redis.status import bloom_figures

    settings = crawler.settings
    options = RedisSettings.from_settings(settings)
    try:
        client = connect(options.url, options.timeout_seconds)
        try:
            return bloom_figures(client, namespace(settings))
        finally:
            client.close()
    except redis_errors() as exc:
        logger.debug("could not read the shared Bloom filter (%s)", exc)
        return None

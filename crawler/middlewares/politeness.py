"""Politeness as the server sees it: the download delay on the wire, robots.txt once per crawl.

``PoliteDownloadHandler`` (``DOWNLOAD_HANDLERS`` for http and https, every profile): Scrapy
starts a host's ``DOWNLOAD_DELAY`` clock when it *dispatches* a request from the host's download
slot; the bytes leave later, when the reactor gets round to writing them (and a first request
must open its connection). Under load a request reached the server up to 80 ms late, so the
next one, dispatched on time, arrived less than the delay after it (measured with
``DOWNLOAD_DELAY=0.1``, one request at a time per host, in one process and in N workers alike).
This subclass of Scrapy's HTTP/1.1 handler restarts the slot's delay clock when the download
starts and again when its response has arrived (by then the request was certainly on the wire),
as Heritrix counts its politeness delay from the end of the previous fetch: two requests to one
host are at least the delay apart at the server. The cost is the response time added to each
gap; nothing changes when the delay is 0.

``SharedRobotsTxtMiddleware`` (distributed profile): in the distributed profile every worker
that comes to own a host (the first one, or the one that takes it over from a dead or busy
worker) would fetch its robots.txt again. This subclass keeps each fetched robots.txt body in
the namespace's Redis hash ``{base}:robots`` (``scheme://host[:port]`` -> body, at most
:data:`MAX_BODY` bytes, the 500 KiB RFC 9309 asks a crawler to parse): a worker reads it there
before fetching. Only an answered fetch is shared (a 4xx as an empty body: allow all); a 5xx, a
429 or a download error is not, so the next owner tries again. A host given up because it is
not there (connection refused, DNS, TLS: see :func:`crawler.middlewares.robots.down_reason`)
is recorded in the same hash (field ``!down <scheme://host[:port]>`` -> ``reason|unix time``):
a worker that reads it gives the host up too, without fetching (stat
``robotstxt/host_down_shared``, one WARNING), for ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` after
the record; an older record is ignored (the host is asked again, it may be back) and a shared
body wins over it (a worker had an answer). A worker finishes the requests of a host given
up (:class:`crawler.exceptions.HostGivenUp` with ``owed`` False: a lease put back would come
round again at once).
Everything else (holding a host while its robots.txt is
unavailable, parsing, ``robotstxt/*`` stats) is the behaviour of
:class:`crawler.middlewares.robots.StrictRobotsTxtMiddleware`, which this subclasses. Stat
``robotstxt/shared``: robots.txt files read from Redis instead of fetched. Enabled by
``settings.distributed`` in place of the strict middleware; needs ``DEDUP_BACKEND=redis``.

``PoliteDownloader`` (``DOWNLOADER``, every profile): Scrapy 2.19's downloader, holding a host
to ``CONCURRENT_REQUESTS_PER_DOMAIN`` (or ``_PER_IP``) requests in flight with
``DOWNLOAD_DELAY=0`` too. Scrapy's ``Downloader._process_queue`` takes requests off a slot's
queue while the slot has free transfer places, but a request counts as transferring only once
its download task runs, and under the asyncio reactor that task starts on a later turn of the
loop: the whole queue left at once. Measured on 127.0.0.1 with ``CONCURRENT_REQUESTS=16`` and a
host answering in 20 ms: ``CONCURRENT_REQUESTS_PER_DOMAIN=1`` gave up to 11 requests in flight
to the host and 184 TCP connections for 203 requests (the connection pool keeps as many idle
connections as the per-host limit, so the extra ones were closed and opened again). With a
delay Scrapy dispatches one request per call and the limit held. Here a request counts as
transferring when it leaves the queue: 1 in flight, 1 connection.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.downloader import Downloader
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler
from twisted.web.client import HTTPConnectionPool

from crawler.backends import backend_name
from crawler.backends.common import namespace, redis_url
from crawler.middlewares.robots import (
    DOWN_REASONS,
    StrictRobotsTxtMiddleware,
    accepted_body,
    robots_key,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.robotstxt import RobotParser

    from crawler.cluster.worker import DownloadFence
    from crawler.dedup.gate import DecisionGate

logger = logging.getLogger(__name__)

MAX_BODY = 500 * 1024
IDLE_CLOSED_STAT = "downloader/idle_connections_closed"
DOWN_FIELD = "!down "  # + robots_key: a host given up as not there (no origin starts with "!")


def restart_delay(crawler: Crawler, request: Request) -> None:
    """Count the download delay of ``request``'s slot from now (if it has one)."""
    try:  # Crawler.engine raises until the crawl starts
        downloader = crawler.engine.downloader
    except (RuntimeError, AttributeError):
        return
    slot = downloader.slots.get(downloader.get_slot_key(request))
    if slot is not None and slot.delay:
        slot.lastseen = max(slot.lastseen, time.monotonic())


#: Pages waiting for their turn at the content decider's gate past which no download starts.
DECISIONS_WAITING_MAX = 4


class PoliteDownloader(Downloader):
    """Scrapy's downloader; a request counts against its slot's concurrency from the moment it
    leaves the slot's queue (module docstring). It also backs out (no new download starts)
    while :data:`DECISIONS_WAITING_MAX` pages wait for the content decider's gate."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._gate: DecisionGate | None = None
        crawler.signals.connect(self._find_gate, signal=signals.spider_opened)

    def _find_gate(self, spider: Any = None) -> None:
        from crawler.dedup.verdict import content_decider

        decider = content_decider(self.crawler)
        if decider is not None and decider.gate.enabled:
            self._gate = decider.gate

    def needs_backout(self) -> bool:
        # The decisions of a distributed worker are awaited one at a time (crawler.dedup.gate):
        # without this the downloads run ahead, and the pages queued at the gate (up to
        # Scrapy's 5 MB of responses) cost CPU and drain only after the last response.
        gate = self._gate
        return super().needs_backout() or (gate is not None
                                           and gate.waiting >= DECISIONS_WAITING_MAX)

    def _wait_for_download(self, slot: Any, request: Request, queue_dfd: Any) -> Any:
        # Called by _process_queue's loop to build the download's coroutine, which only starts
        # on a later turn of the asyncio loop; counted now, the loop's next free_transfer_slots()
        # sees it. Scrapy's _download adds it again (a set) and removes it when it is done.
        slot.transferring.add(request)
        return super()._wait_for_download(slot, request, queue_dfd)


def idle_connections_max() -> int:
    """Idle connections kept open across all hosts: a quarter of the process's open-file limit
    (the rest for connections in use, storage, WARC files, Redis and PostgreSQL); 0, no cap,
    when the limit is unlimited or cannot be read."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    return 0 if soft == resource.RLIM_INFINITY else max(8, soft // 4)


class IdleCappedPool(HTTPConnectionPool):
    """Twisted's connection pool, with at most ``max_idle`` idle connections across all hosts
    (0: no cap): past it, the connection idle longest is closed. Twisted keeps up to the
    per-host limit of idle connections for *every* host for 240 s, so a crawl of many hosts
    held one file descriptor per host it had finished with (measured: 250 hosts of 8 pages, a
    peak of 270 descriptors; under a limit of 200, 562 connections failed with "Too many open
    files"; capped, a peak of 83 and none). A host's entry goes with its last idle connection
    (Twisted kept an empty list per host ever crawled)."""

    max_idle = 0
    closed = 0  # idle connections closed by the cap
    stats: Any = None  # a StatsCollector: IDLE_CLOSED_STAT counts them too

    def _putConnection(self, key: Any, connection: Any) -> None:
        super()._putConnection(key, connection)
        connection.dedup_pool_key = key
        # _timeouts holds the idle connections in the order they became idle
        while self.max_idle and len(self._timeouts) > self.max_idle:
            oldest = next(iter(self._timeouts))
            self._timeouts[oldest].cancel()
            self._removeConnection(oldest.dedup_pool_key, oldest)
            if not self.closed:
                logger.info("Idle connections kept at most %d across all hosts (a quarter of the "
                            "open-file limit; raise it with ulimit -n): the one idle longest is "
                            "closed (counted in %s)", self.max_idle, IDLE_CLOSED_STAT)
            self.closed += 1
            if self.stats is not None:
                self.stats.inc_value(IDLE_CLOSED_STAT)

    def _removeConnection(self, key: Any, connection: Any) -> None:
        super()._removeConnection(key, connection)
        if not self._connections.get(key, True):
            del self._connections[key]


class PoliteDownloadHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler; the slot's delay restarts when a download starts and ends.
    A distributed worker first checks that it still holds its lease
    (:class:`crawler.cluster.worker.DownloadFence`): a paused worker sends nothing to a host
    another worker took over. Its connection pool is an :class:`IdleCappedPool` capped by
    :func:`idle_connections_max`."""

    _fence: DownloadFence | None = None
    _fence_known = False  # looked up on the first download (the crawl has started by then)

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.__class__ = IdleCappedPool  # Scrapy's pool, its settings kept
        assert isinstance(self._pool, IdleCappedPool)
        self._pool.max_idle = idle_connections_max()
        self._pool.stats = crawler.stats

    async def download_request(self, request: Request) -> Response:
        if not self._fence_known:
            from crawler.cluster.worker import DownloadFence

            self._fence, self._fence_known = DownloadFence.of(self._crawler), True
            if self._fence is not None:
                self._fence_connections(self._fence)
        if self._fence is not None:
            self._fence.check(request)
        restart_delay(self._crawler, request)
        try:
            return await super().download_request(request)
        finally:
            restart_delay(self._crawler, request)


    def _fence_connections(self, fence: DownloadFence) -> None:
        """Ask the fence again when a download's connection is ready, just before the request
        is written on it: a worker paused (SIGSTOP) while its connection was being set up
        would otherwise write the request on waking, to a host another worker owns by then
        (seen: two workers' requests 7 ms apart). A connection refused so is closed unused."""
        pool = self._pool
        get = pool.getConnection

        def get_connection(key: Any, endpoint: Any) -> Any:
            def checked(protocol: Any) -> Any:
                try:
                    fence.check_url(f"{key[1]}:{key[2]}" if len(key) > 2 else str(key))
                except Exception:
                    protocol.transport.loseConnection()
                    raise
                return protocol

            return get(key, endpoint).addCallback(checked)

        pool.getConnection = get_connection  # type: ignore[method-assign]


class SharedRobotsTxtMiddleware(StrictRobotsTxtMiddleware):
    """robots.txt fetched once per host per crawl, shared through Redis (module docstring)."""

    #: a distributed worker finishes the requests of a host given up (HostGivenUp)
    OWED = False

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        if backend_name(crawler.settings) != "redis":
            raise NotConfigured("SharedRobotsTxtMiddleware needs DEDUP_BACKEND=redis")
        from crawler.backends.redis import connect

        self._client = connect(redis_url(crawler.settings))
        self._key = namespace(crawler.settings) + ":robots"

    async def robot_parser(self, request: Request) -> RobotParser | None:
        key = robots_key(urlparse_cached(request))
        if key not in self._parsers:
            body, down = self._shared(key)
            if down is not None:
                self._down_elsewhere(key, down)
                return None
            if body is not None:
                parser = build_from_crawler(self._parserimpl, self.crawler, body)
                self._parsers[key] = parser
                self._stats.inc_value("robotstxt/shared")
                return parser
        return await super().robot_parser(request)

    def _host_down(self, key: str, reason: str, attempts: int, exc: BaseException) -> None:
        import redis

        try:
            self._client.hset(self._key, DOWN_FIELD + key, f"{reason}|{time.time():.0f}")
        except (redis.RedisError, OSError) as exc_redis:
            logger.debug("%s given up, not shared: %s", key, exc_redis)
        super()._host_down(key, reason, attempts, exc)

    def _down_elsewhere(self, key: str, reason: str) -> None:
        """Give up a host another worker found not there; one WARNING."""
        self._stats.inc_value("robotstxt/host_down_shared")
        why = DOWN_REASONS.get(reason, reason)
        ended = self._stop(key, why)
        logger.warning("%s was given up by another worker (%s): %d request(s) to it not fetched "
                       "here, later ones too. Check the host name, the port, and http vs https",
                       key, why, ended)  # fmt: skip

    async def _parse_robots(self, response: Response, netloc: str, request: Request) -> None:
        import redis

        body = accepted_body(response)
        try:
            if body is not None:
                self._client.hsetnx(self._key, netloc, body[:MAX_BODY])
        except (redis.RedisError, OSError) as exc:
            logger.debug("robots.txt of %s not shared: %s", netloc, exc)
        await super()._parse_robots(response, netloc, request)

    def _shared(self, key: str) -> tuple[bytes | None, str | None]:
        """The robots.txt another worker fetched for ``key``, and why it was given up (each
        None if not; both None when Redis does not answer: the host is fetched here)."""
        import redis

        try:
            body, down = self._client.hmget(self._key, [key, DOWN_FIELD + key])
        except (redis.RedisError, OSError) as exc:
            logger.debug("shared robots.txt of %s not read: %s", key, exc)
            return None, None
        if body is not None:  # a worker had an answer: the host is there
            return (body if isinstance(body, bytes) else str(body).encode("utf-8")), None
        if down is None:
            return None, None
        return None, self._fresh_down(down.decode() if isinstance(down, bytes) else str(down))

    def _fresh_down(self, record: str) -> str | None:
        """The reason of a ``reason|unix seconds`` down record, None once it is older than
        ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` (the host is asked again: it may be back)."""
        reason, _, stamp = record.partition("|")
        try:
            age = time.time() - float(stamp)
        except ValueError:
            return reason
        return reason if age < self.options.max_seconds else None

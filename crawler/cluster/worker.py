"""Worker membership of the distributed profile: leases, reclaim of dead workers, shared close.

Every worker of a namespace is a member of the sorted set ``{base}:workers`` (worker id ->
expiry, milliseconds on the Redis server's clock). :class:`ClusterWorker` (an extension,
``EXTENSIONS``) renews this worker's membership every ``DISTRIBUTED_HEARTBEAT_SECONDS`` (at
most a third of ``DISTRIBUTED_LEASE_SECONDS``; from a thread while the reactor is held up:
:mod:`crawler.cluster.heartbeat`), and a worker silent for a lease is dead;
everything the worker holds — leased requests and owned hosts in the frontier
(:mod:`crawler.cluster.frontier`), pending entries in the content index
(:class:`crawler.backends.redis.RedisContentIndex`) — lives exactly as long as that membership.

* **A dead worker** (killed, cut off, or paused past its lease) is reclaimed by the first live
  worker whose renewal sees it expired: the reclaimer asks storage which of the dead worker's
  leased pages and pending index entries were committed (its last batch may have committed just
  before the kill), commits those, removes its other pending entries (pages waiting on them are
  decided again), acknowledges the leases already done and puts the rest back in the queue,
  and frees its hosts, held for the handover delay so that no host is reached twice too soon.
  The renewal that reports a worker dead also fences it (``{base}:workers:fenced:{w}``, in
  the same atomic step). A worker whose renewal finds its membership expired but not fenced
  (it could not renew: a Redis outage, or a pause, and nobody noticed) renews it and keeps
  everything it held (stat ``dedup/shared/leases_revived``): nobody had touched its requests.
  A fenced or removed member is never revived: a worker that finds its membership so (stat
  ``dedup/shared/lease_lost``) closes with finish reason ``lease_lost`` instead of working on
  requests another worker now owns.
* **Fencing downloads.** A paused worker (SIGSTOP, a stalled VM) does not know it was paused:
  when it runs again its download slots send what they held, to hosts another worker took
  over meanwhile. So every download asks :meth:`Member.may_download` first (the download
  handler, :class:`crawler.middlewares.politeness.PoliteDownloadHandler`): a membership renewed
  less than half a lease ago answers at once; an older one is renewed first, in that call, and a
  worker that finds its membership fenced or gone sends nothing more (the download fails
  with ``IgnoreRequest``, stat ``dedup/shared/downloads_fenced``) and closes ``lease_lost``.
  So no two workers are in flight on one host, paused or not.
* **A Redis outage** stops every worker's renewals alike (calls are retried for up to
  ``REDIS_RETRY_SECONDS``, :class:`crawler.backends.common.RedisRetry`), so when Redis answers
  again every membership may look expired: a worker that itself just waited for Redis reports
  (fences) and reclaims nobody for one lease, the time the others need to renew theirs.
* **Closing**: the shared crawl is done when the frontier holds no queued and no leased request;
  an idle worker then closes at once, and marks the crawl finished in Redis (its keys expire
  after ``DISTRIBUTED_FINISHED_TTL_SECONDS``, :mod:`crawler.cluster.lifecycle`). While the
  crawl is not done an idle worker stays open (``DontCloseSpider``) and looks for work every
  :data:`POLL_SECONDS`. An idle worker whose storage pipeline still holds pages writes them at
  once (``dedup/shared/idle_flushes``) instead of waiting up to ``STORAGE_BATCH_SECONDS`` with
  its leases out, and every committed batch wakes the engine, so the worker holding the crawl's
  last leases closes as soon as they are acknowledged and the others within
  :data:`POLL_SECONDS`. A lease this worker still holds while idle, with its storage pipeline
  idle too, for longer than ``DISTRIBUTED_LEASE_SECONDS`` plus two storage flushes has lost its
  acknowledgement (a bug, not an expected path): it is queued again, counted in
  ``dedup/shared/leases_orphaned`` and logged.
* **Leaving** (``spider_closed``): pending index entries that were never committed are removed,
  leases not acknowledged go back to the queue, hosts are freed, the membership is deleted.
  Once the engine has stopped, the objects alive then are frozen out of the cyclic garbage
  collector (``gc.freeze``): a worker process runs one crawl and then exits, and the
  interpreter's exit would spend most of a second in garbage collections over the ~170,000
  objects of the imported libraries (measured: exit 0.72 s after the crawl, 0.12 s frozen).
  Objects are still freed when their last reference goes; only reference cycles among the
  frozen objects would outlive a later crawl in the same process.

Stats ``dedup/shared/*``: ``workers_reclaimed``, ``leases_reclaimed`` (queued again from dead
workers), ``leases_done_at_reclaim`` (found committed), ``index_reclaimed`` (pending entries
removed), ``leases_released`` (queued again at close), ``leases_orphaned``, ``idle_waits``,
``idle_flushes``, ``hosts_stolen``, ``leases_revived`` (renewed late, not reported dead),
``downloads_fenced`` (requests not sent: the lease was lost), ``redis_rolled_back`` (Redis
found older than storage: :mod:`crawler.cluster.generation`).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.asyncio import run_in_thread
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import CallLaterOnce

from crawler import config, defaults
from crawler import signals as dedup_signals
from crawler.backends import backend_name
from crawler.backends.common import (
    RedisBacked,
    RedisBackendError,
    keys_lost,
    namespace,
    queue_key,
    redis_url,
    retry_policy,
    text,
)
from crawler.closing import close_crawl, stop_on_redis_error
from crawler.cluster import joincheck, startlist
from crawler.cluster import stats as clusterstats
from crawler.cluster.generation import RedisRolledBack, report_rolled_back
from crawler.cluster.lifecycle import finish_crawl, finished_ttl

if TYPE_CHECKING:
    import redis
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

    from crawler.backends.redis import RedisContentIndex
    from crawler.cluster.frontier import LeasedFrontier
    from crawler.cluster.generation import GenerationFence

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25  # an idle worker looks at the shared frontier this often
LEASE_LOST = "lease_lost"  # finish reason of a worker whose membership expired
GENERATION_SECONDS = 10.0  # Redis's commit counter is compared with storage's this often

# KEYS: workers, namespace meta. ARGV: worker, lease ms, register (0/1), report the dead (0/1),
# crawl id (the namespace's ``crawl`` field when it has none: the first worker names the crawl).
# Returns {1, dead worker, ...}; {2, dead worker, ...} when the membership had expired but no
# worker had reported it dead (renewed late: revived); {-1} when it is gone or was reported
# dead (fenced: {workers}:fenced:{w}, set by the report, kept while reported); {-2} when the
# namespace itself is gone (Redis restarted empty, or flushed).
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
local status = 1
if exp then
  if tonumber(exp) < now then
    if redis.call('EXISTS', KEYS[1] .. ':fenced:' .. ARGV[1]) == 1 then return {-1} end
    status = 2
  end
elseif ARGV[3] ~= '1' then
  if redis.call('EXISTS', KEYS[2]) == 0 then return {-2} end
  return {-1}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSETNX', KEYS[2], 'started', now)
if ARGV[5] ~= '' then redis.call('HSETNX', KEYS[2], 'crawl', ARGV[5]) end
local out = {status}
for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 1, 'LIMIT', 0, 8)) do
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[1] .. ':fenced:' .. w, ARGV[1], 'PX', 4 * tonumber(ARGV[2]))
  end
  out[#out + 1] = w
end
return out
"""


class Member(RedisBacked):
    """One worker's membership: its id and its lease (see the module docstring)."""

    def __init__(self, client: redis.Redis, base: str, lease_seconds: float, url: str = "") -> None:
        super().__init__(client, base, url)
        self.lease_ms = max(1, round(lease_seconds * 1000))
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.workers_key = f"{base}:workers"
        self.meta_key = f"{base}:meta"
        self.lost = False
        self.revived = False  # a renewal found the membership expired, not reclaimed (until
        # ClusterWorker reports it: a download's check may renew first)
        self.renewed_at = float("-inf")  # time.monotonic() of the last renewal that held
        self._registered = False
        self._crawl_key: str | None = None
        self._beat = client.register_script(_BEAT)
        self._beating = threading.Lock()

    def beat(self, report: bool = True) -> list[str]:
        """Renew the membership (registering it the first time); returns expired members,
        fenced (never revived) when ``report``: only those may be reclaimed. Sets :attr:`lost`
        when this membership is gone or fenced, :attr:`revived` when it had expired (no renewal
        for a lease: a Redis outage, a paused process) and no worker had reported it: it holds
        all it held. Raises :class:`RedisBackendError` when the namespace is gone (Redis lost
        its data)."""
        with self._beating:  # the reactor and the heartbeat thread (one renewal at a time)
            return self._beat_locked(report)

    def _beat_locked(self, report: bool) -> list[str]:
        if self.lost:
            return []
        now = time.monotonic()  # before the call: the lease runs from when it was asked for
        register = not self._registered
        out = self._run(self._beat, [self.workers_key, self.meta_key],
                        [self.id, self.lease_ms, int(register), int(report),
                         new_crawl_key() if register else ""])
        if int(out[0]) == -2:
            raise keys_lost(self.url)
        if int(out[0]) < 0:
            self.lost = True
            return []
        self._registered = True
        self.revived = self.revived or int(out[0]) == 2  # kept until the renewal reports it
        self.renewed_at = now
        return [text(w) for w in out[1:]]

    def may_download(self) -> bool:
        """Whether this worker may send a request now (module docstring, Fencing): its
        membership renewed less than half a lease ago, else renewed now. False once it is
        fenced or gone. Raises :class:`RedisBackendError` when Redis cannot be asked."""
        if self.lost:
            return False
        if time.monotonic() - self.renewed_at < self.lease_ms / 2000:
            return True
        self.beat(report=False)
        return not self.lost

    def crawl_key(self) -> str:
        """The distributed crawl's id (``{base}:meta`` field ``crawl``), named by the first
        worker's first renewal: every worker of the namespace records its ``crawls`` row under
        it (``crawls.job``), and the review commands report the crawl as one by it."""
        if self._crawl_key is None:
            raw = self._call("hget", self.meta_key, "crawl")
            if not raw:  # a namespace created before crawl ids: name it now, once
                self._call("hsetnx", self.meta_key, "crawl", new_crawl_key())
                raw = self._call("hget", self.meta_key, "crawl")
            self._crawl_key = text(raw)
        return self._crawl_key

    def started(self) -> float:
        """When the namespace's first worker joined (Unix seconds)."""
        raw = self._call("hget", self.meta_key, "started")
        return int(raw) / 1000 if raw else time.time()


def new_crawl_key() -> str:
    """A fresh distributed crawl id: ``c`` + the UTC date and time + 6 hex digits
    (``c20261204T173012-3f9a2c``; 24 characters, under ``crawls.job``'s 64)."""
    return f"c{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


_members: weakref.WeakKeyDictionary[Any, Member] = weakref.WeakKeyDictionary()


def member(crawler: Crawler) -> Member:
    """This crawler's membership (one per crawler, shared by the scheduler, the pipeline and
    the extension), registered on first use, once the worker's settings are found to be its
    crawl's (:func:`crawler.cluster.joincheck.join_crawler`: else a ``SettingError``, each
    time, and nothing is written)."""
    from crawler.backends.redis import connect

    found = _members.get(crawler)
    if found is None:
        settings = crawler.settings
        url = redis_url(settings)
        policy = retry_policy(settings, crawler.stats)
        client = connect(url, policy.timeout)
        joincheck.join_crawler(crawler, client, url, policy)  # settings as the crawl's, or refused
        found = Member(client, namespace(settings), lease_seconds(settings), url=url)
        found.retrying(policy)
        found.beat()
        _members[crawler] = found
    return found


def distributed_member(crawler: Crawler | None) -> Member | None:
    """The membership of a distributed worker (the Redis backend and a shared scheduler),
    None in any other profile."""
    if crawler is None or backend_name(crawler.settings) != "redis" \
            or not shared_scheduler(crawler.settings):  # fmt: skip
        return None
    return member(crawler)


def crawl_is_done(crawler: Crawler) -> bool:
    """Whether this distributed worker leaves the shared crawl done: nothing queued or leased
    (blocking: Redis). Every worker that closes so closes the crawl's own row again, after its
    own: the last of them to do it has seen every row that closed before it."""
    ext = next((m for m in getattr(crawler.extensions, "middlewares", ())
                if isinstance(m, ClusterWorker)), None)  # fmt: skip
    if ext is None or ext.member.lost:
        return False
    queued, leased = ext.frontier().counts()
    return queued == 0 and leased == 0


def report_lease_lost(crawler: Crawler, me: Member) -> None:
    """The first time a component finds this worker's membership fenced or gone (a renewal, a
    download's check): one ERROR line, stat ``dedup/shared/lease_lost``, and the crawl closes
    ``lease_lost``; later finds say nothing."""
    stats = crawler.stats
    if stats is not None:
        if stats.get_value("dedup/shared/lease_lost"):
            return
        stats.set_value("dedup/shared/lease_lost", 1)
    logger.error("This worker's lease expired (no renewal for DISTRIBUTED_LEASE_SECONDS=%.1f: "
                 "it was paused or cut off); other workers own its requests and hosts now, so "
                 "it sends nothing more. Closing (%s).", me.lease_ms / 1000, LEASE_LOST)
    close_crawl(crawler, LEASE_LOST)


class DownloadFence:
    """What the download handler asks before each request of a distributed worker (module
    docstring, Fencing): :meth:`check` raises ``IgnoreRequest`` once the worker's membership is
    fenced or gone, and closes the crawl ``lease_lost`` the first time."""

    def __init__(self, crawler: Crawler, me: Member) -> None:
        self.crawler, self.member = crawler, me
        self.fenced = 0

    @classmethod
    def of(cls, crawler: Crawler | None) -> DownloadFence | None:
        """The fence of a distributed worker, None in any other profile."""
        me = distributed_member(crawler)
        return None if me is None or crawler is None else cls(crawler, me)

    def check(self, request: Request) -> None:
        self.check_url(request.url)

    def check_url(self, url: str) -> None:
        """:meth:`check` of a download to ``url``: asked when the download starts and again
        when its connection is ready, just before its bytes are written (a worker paused while
        connecting would otherwise send the request on waking, to a host another worker took
        over meanwhile: :class:`crawler.middlewares.politeness.PoliteDownloadHandler`)."""
        from scrapy.exceptions import IgnoreRequest

        try:
            allowed = self.member.may_download()
        except RedisBackendError as exc:
            stop_on_redis_error(self.crawler, exc, self.member.url)
            raise IgnoreRequest(f"not sent (Redis unavailable): {url}") from exc
        if allowed:
            return
        self.fenced += 1
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("dedup/shared/downloads_fenced")
        report_lease_lost(self.crawler, self.member)
        raise IgnoreRequest(f"not sent (this worker's lease expired): {url}")


def lease_seconds(settings: config.SettingsLike) -> float:
    return config.get_float(settings, "DISTRIBUTED_LEASE_SECONDS",
                            defaults.DISTRIBUTED_LEASE_SECONDS, lo=0.5, hi=86400.0)  # fmt: skip


@dataclass(frozen=True)
class WorkerSettings:
    """A distributed worker's own settings: ``DISTRIBUTED_LEASE_SECONDS``, the renewal period
    (``DISTRIBUTED_HEARTBEAT_SECONDS``, at most a third of the lease:
    :func:`crawler.cluster.heartbeat.interval`), ``DISTRIBUTED_FINISHED_TTL_SECONDS``
    (:func:`~crawler.cluster.lifecycle.finished_ttl`) and ``DISTRIBUTED_PREFETCH``. With the
    shared scheduler (``shared``), :class:`ClusterWorker` must be enabled: it renews the
    leases the scheduler takes."""

    lease_seconds: float = defaults.DISTRIBUTED_LEASE_SECONDS
    heartbeat_seconds: float = defaults.DISTRIBUTED_HEARTBEAT_SECONDS
    finished_ttl_seconds: float = defaults.DISTRIBUTED_FINISHED_TTL_SECONDS
    prefetch: int = defaults.DISTRIBUTED_PREFETCH
    shared: bool = False

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> WorkerSettings:
        """Read and check them (SettingError)."""
        from crawler.cluster.heartbeat import interval

        lease = lease_seconds(settings)
        return cls(lease, interval(settings, lease), finished_ttl(settings),
                   prefetch(settings), _checked_shared(settings))  # fmt: skip


def prefetch(settings: config.SettingsLike) -> int:
    """``DISTRIBUTED_PREFETCH``, checked: the one reader (the scheduler reads it alone)."""
    return config.get_int(settings, "DISTRIBUTED_PREFETCH", defaults.DISTRIBUTED_PREFETCH,
                          lo=1, hi=1000)


def _checked_shared(settings: config.SettingsLike) -> bool:
    """Whether ``SCHEDULER`` is the shared one (Scrapy's settings only: a mapping has no
    ``EXTENSIONS`` with its base); SettingError when it is and :class:`ClusterWorker` is off."""
    getwithbase = getattr(settings, "getwithbase", None)
    if getwithbase is None or not shared_scheduler(settings):
        return False
    name = f"{__name__}.ClusterWorker"
    enabled = {load_object(k) if isinstance(k, str) else k: v
               for k, v in getwithbase("EXTENSIONS").items()}  # fmt: skip
    if enabled.get(ClusterWorker) is None:
        raise config.SettingError(
            "EXTENSIONS", f"without {name}",
            f"{name} enabled with the shared SCHEDULER: it renews the leases the scheduler takes",
        )  # fmt: skip
    return True


def shared_scheduler(settings: Any) -> bool:
    """Whether ``SCHEDULER`` is scrapy-redis's (or a subclass, such as ours).

    scrapy-redis (the ``redis`` extra) is not imported for the question: a scheduler class
    that subclasses it has imported it already."""
    scheduler = settings["SCHEDULER"]
    if isinstance(scheduler, str):
        try:
            scheduler = load_object(scheduler)
        except (ImportError, NameError, ValueError):
            return False
    module = sys.modules.get("scrapy_redis.scheduler")
    base = getattr(module, "Scheduler", None)
    return isinstance(scheduler, type) and base is not None and issubclass(scheduler, base)


class ClusterWorker:
    """Membership renewal, reclaim of dead workers, and the shared close (module docstring)."""

    def __init__(self, crawler: Crawler, me: Member) -> None:
        from crawler.storage import write_options

        self.crawler, self.member = crawler, me
        self.stats = crawler.stats
        settings = crawler.settings
        batch = write_options(settings)["batch_seconds"]  # the storage pipeline's reader
        self.orphan_after = me.lease_ms / 1000 + 2 * batch + 1
        self._loop: Any = None
        self._reclaiming: set[str] = set()
        self._finished = False  # this worker found the shared crawl done (lifecycle)
        self._said_waiting = False  # the INFO line of a worker idle by design (_say_waiting)
        self._idle: dict[str, float] = {}
        self._last_idle = 0.0
        self._waker: CallLaterOnce[None] | None = None
        self._frontier: LeasedFrontier | None = None
        self._index: RedisContentIndex | None = None
        self._left = False
        self._fence: GenerationFence | None = None
        self._store: Any = None  # opened by the first generation check
        self._seeds: Any = False  # the start list's feeder (None: seeds given), built when idle
        self._checking = False
        self._generation_at = float("-inf")  # the last comparison of Redis with storage

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ClusterWorker:
        settings = crawler.settings
        if backend_name(settings) != "redis" or not shared_scheduler(settings):
            raise NotConfigured
        WorkerSettings.from_settings(settings)
        with joincheck.off_when_refused(crawler):
            me = member(crawler)
        ext = cls(crawler, me)
        clusterstats.attach(crawler, ext)  # this worker's numbers, at each renewal
        ext.start()  # now: opening the pipelines (loading the index) may take a while
        crawler.signals.connect(ext.on_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.batch_committed, signal=dedup_signals.batch_committed)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    # --- the pieces this extension works on ---------------------------------------------------
    def frontier(self) -> LeasedFrontier:
        if self._frontier is None:
            from crawler.cluster.frontier import LeasedFrontier, handover_ms

            settings = self.crawler.settings
            name = self.crawler.spider.name if self.crawler.spider else "web"
            self._frontier = LeasedFrontier(self.member.client, None, queue_key(settings, name),
                                            workers_key=self.member.workers_key,
                                            url=self.member.url)  # fmt: skip
            if self.member.retry is not None:
                self._frontier.retrying(self.member.retry)
            self._frontier.worker = self.member.id
            self._frontier.handover_ms = handover_ms(settings)
        return self._frontier

    def index(self) -> RedisContentIndex:
        if self._index is None:
            from crawler.backends.redis import RedisContentIndex

            self._index = RedisContentIndex.from_settings(self.crawler.settings,
                                                          owner=self.member.id)
        return self._index

    # --- renewal ------------------------------------------------------------------------------
    def start(self) -> None:
        """Renew the membership every ``DISTRIBUTED_HEARTBEAT_SECONDS`` (at most a third of the
        lease), from now until the spider closes; while the reactor is held up, from a thread
        (:mod:`crawler.cluster.heartbeat`)."""
        from twisted.internet import task

        from crawler.cluster.heartbeat import Heartbeat, interval

        every = interval(self.crawler.settings, self.member.lease_ms / 1000)
        self._loop = task.LoopingCall(self.renew)
        self._loop.start(every, now=False)
        self.heartbeat = Heartbeat(self.member, every, lambda: bool(self._loop.running))
        self.heartbeat.start()

    def renew(self) -> None:
        try:  # just back from waiting for Redis (maybe in this very call): the others were
            # cut off too, give them a lease to renew before reporting (fencing) and reclaiming
            expired = self.member.beat(report=False)
            dead = self.member.beat() if expired and not self._recovered_lately() else []
        except RedisBackendError as exc:
            self._loop.stop()
            if not self._finished:  # a finished crawl's keys may expire while it closes
                stop_on_redis_error(self.crawler, exc, self.member.url)
            return
        if self.member.lost:
            self._lost()
            return
        if self.member.revived:
            self.member.revived = False
            self._revived()
        self._check_generation()
        clusterstats.renewed(self.crawler)
        for worker in dead:
            if worker not in self._reclaiming:
                self._reclaiming.add(worker)
                deferred_from_coro(self._reclaim(worker))

    # --- a Redis older than storage (crawler.cluster.generation) -------------------------------
    def _check_generation(self) -> None:
        """Compare Redis's commit counter with storage's, in a thread (one at a time, every
        :data:`GENERATION_SECONDS` at most: renewals come every heartbeat)."""
        if self._checking or time.monotonic() - self._generation_at < GENERATION_SECONDS:
            return
        self._generation_at = time.monotonic()
        self._checking = True
        deferred_from_coro(self._generation())

    async def _generation(self) -> None:
        try:
            await run_in_thread(self._generation_blocking)
        except RedisRolledBack as exc:
            self._rolled_back(exc)
        except Exception as exc:  # storage or Redis away: their own policies apply; next renewal
            logger.debug("could not compare Redis with storage (%s: %s)", type(exc).__name__, exc)
        finally:
            self._checking = False

    def _generation_blocking(self) -> None:
        from crawler.cluster.generation import GenerationFence

        if self._fence is None:
            self._fence = GenerationFence.of(self.crawler)
        if self._fence is not None:
            recorded = self._storage_store().redis_generation(self._fence.key)  # then Redis
            self._fence.check(recorded)

    def _rolled_back(self, exc: RedisRolledBack) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        report_rolled_back(self.crawler, exc)

    def _lost(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        report_lease_lost(self.crawler, self.member)

    def _recovered_lately(self) -> bool:
        retry = self.member.retry
        return retry is not None and retry.recovered_within(self.member.lease_ms / 1000)

    def _revived(self) -> None:
        self._inc("dedup/shared/leases_revived")
        logger.info("This worker's lease had expired (no renewal for DISTRIBUTED_LEASE_SECONDS="
                    "%.1f, e.g. Redis away) and no worker had reclaimed it: renewed, it keeps "
                    "its requests", self.member.lease_ms / 1000)  # fmt: skip

    # --- reclaim --------------------------------------------------------------------------------
    async def _reclaim(self, dead: str) -> None:
        """Give a dead worker's requests, hosts and pending entries back (module docstring)."""
        client, frontier = self.member.client, self.frontier()
        try:
            lock = f"{frontier.key}:reclaim:{dead}"
            if not client.set(lock, self.member.id, nx=True, px=self.member.lease_ms * 4):
                return
            canon = frontier.leases_of(dead)
            pending = self.index().pending_of(dead)
            wanted = set(canon.values()) | set(pending)
            stored = await run_in_thread(self._stored, wanted) if wanted else set()
            removed = self.index().reclaim(dead, sorted(stored & set(pending)))
            done = [i for i, url in canon.items() if url in stored]
            requeued = frontier.release(dead, done)
        except Exception as exc:  # never lost: the next renewal tries again
            logger.warning("could not reclaim worker %s yet (%s: %s); trying again at the next "
                           "renewal", dead, type(exc).__name__, exc)  # fmt: skip
            return
        finally:
            self._reclaiming.discard(dead)
        await self._close_row(dead)
        self._inc("dedup/shared/workers_reclaimed")
        self._inc("dedup/shared/leases_reclaimed", requeued)
        self._inc("dedup/shared/leases_done_at_reclaim", len(done))
        self._inc("dedup/shared/index_reclaimed", removed)
        logger.info("Reclaimed worker %s (lease expired): %d request(s) queued again, %d found "
                    "committed; %d pending index entr(ies) removed, %d found stored",
                    dead, requeued, len(done), removed, len(stored & set(pending)))  # fmt: skip

    async def _close_row(self, dead: str) -> None:
        """Close the dead worker's ``crawls`` row (finish reason ``reclaimed``): it cannot."""
        from crawler.storage import StorageError
        from crawler.vocab import RECLAIMED_REASON

        try:
            key = self.member.crawl_key()
            await run_in_thread(lambda: self._storage_store().close_worker_crawl(
                key, dead, RECLAIMED_REASON))
        except (StorageError, RedisBackendError) as exc:  # the row stays open; nothing lost
            logger.warning("could not close the crawls row of reclaimed worker %s (%s)",
                           dead, exc)  # fmt: skip

    def _storage_store(self) -> Any:
        from crawler.storage import Store

        if self._store is None:
            self._store = Store.from_settings(self.crawler.settings)
        return self._store

    def _stored(self, canonical_urls: set[str]) -> set[str]:
        from crawler.state.jobstate import stored_canonical_urls

        return stored_canonical_urls(self.crawler.settings, canonical_urls, self.member.started(),
                                     self._storage_store())  # the worker's open store

    # --- idle and close -------------------------------------------------------------------------
    def on_idle(self, spider: Spider) -> None:
        if self.member.lost:
            return
        try:
            queued, leased = self.frontier().counts()
            if self._seeds is False:  # a seedless worker's start list (crawler.cluster.startlist)
                self._seeds = startlist.StartListFeeder.of(self.crawler, self.frontier().key)
            if self._seeds is None and queued == 0 and leased == 0:  # fed by it? then feed too
                self._seeds = startlist.StartListFeeder.joining(self.crawler,
                                                                self.frontier().key)
            held = bool(self._seeds) and self._seeds.holds(queued + leased)
            if queued == 0 and leased == 0 and not held:
                self._done()
                return
            self._flush_storage()
            self._check_orphans()
            self._say_waiting(queued)
        except RedisBackendError as exc:
            stop_on_redis_error(self.crawler, exc, self.member.url)
            return
        self._inc("dedup/shared/idle_waits")
        logger.debug("idle, but the shared crawl is not done: %d queued, %d leased",
                     queued, leased, extra={"spider": spider})  # fmt: skip
        self._wake_later()
        raise DontCloseSpider

    def _say_waiting(self, queued: int) -> None:
        """Once per crawl, at INFO: idle while requests are queued and holding none, this
        worker waits by design (every such host is another worker's)."""
        if self._said_waiting or queued == 0 or self.frontier().held_by(self.member.id):
            return
        self._said_waiting = True
        logger.info("Waiting for work: the %d queued request(s) are on hosts other workers "
                    "own (one worker per host, for politeness); a host is taken over from a "
                    "worker that owns two or more with queued requests, or from a dead one",
                    queued)  # fmt: skip

    def _done(self) -> None:
        """The shared crawl reads as done: renewed once more first, since a Redis restarted
        empty reads as done too (the renewal raises then; a reclaimed worker closes
        ``lease_lost``). Otherwise the engine closes the spider, ``finished``."""
        self.member.beat(report=False)
        if self.member.lost:
            self._lost()
        elif not self._finished:  # marked finished, its keys' expiry set (lifecycle)
            self._finished = True
            finish_crawl(self.member, self.crawler.settings, *self._crawl_keys())

    def batch_committed(self, **_: Any) -> None:
        """A batch committed (the scheduler acknowledges its leases on the same signal): let
        the engine look again, so an idle worker holding the crawl's last leases closes at
        once. The look is scheduled for the next reactor turn, after every handler of the
        signal, so the order Scrapy calls them in does not matter."""
        self._wake()

    def _storage(self) -> list[Any]:
        """The crawl's storage pipeline, as a list (empty: none, or no engine yet), found with
        Scrapy's ``crawler.get_item_pipeline``."""
        from crawler.pipelines.storage import StoragePipeline

        if self._engine() is None:
            return []
        pipeline = self.crawler.get_item_pipeline(StoragePipeline)
        return [pipeline] if pipeline is not None else []

    def _storage_idle(self) -> bool:
        """Whether the storage pipeline has committed everything it was given (a storage outage
        being retried holds leases legitimately)."""
        return all(c.idle() for c in self._storage())

    def _flush_storage(self) -> None:
        """Idle while pages wait in the storage batch: write them now (their leases keep the
        whole crawl open until they are committed)."""
        for pipeline in self._storage():
            if not pipeline.idle():
                pipeline.flush()
                self._inc("dedup/shared/idle_flushes")

    def _check_orphans(self) -> None:
        now = time.monotonic()
        if now - self._last_idle > 4 * POLL_SECONDS or not self._storage_idle():
            self._idle.clear()  # busy in between, or storage still writing: start over
        self._last_idle = now
        held = self.frontier().held_by(self.member.id)
        self._idle = {i: self._idle.get(i, now) for i in held}
        orphans = [i for i, since in self._idle.items() if now - since > self.orphan_after]
        if orphans:
            count = self.frontier().requeue(orphans)
            self._inc("dedup/shared/leases_orphaned", count)
            logger.warning("%d leased request(s) were never acknowledged while this worker was "
                           "idle; queued again", count)  # fmt: skip
            for lease in orphans:
                self._idle.pop(lease, None)

    def _wake_later(self) -> None:
        if self._waker is None:
            self._waker = CallLaterOnce(self._wake)
        self._waker.schedule(POLL_SECONDS)

    def _wake(self) -> None:
        """Run the engine's next-request loop now instead of at its 5-second heartbeat."""
        nextcall = getattr(getattr(self._engine(), "_slot", None), "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._store is not None:
            self._store.close()
        if self._left or self.member.lost:
            return
        self._left = True
        try:
            removed = self.index().reclaim(self.member.id, [])
            released = self.frontier().release()
        except RedisBackendError as exc:
            logger.warning("could not hand this worker's leases back (%s); another worker "
                           "reclaims them once its lease expires", exc)  # fmt: skip
            return
        self._inc("dedup/shared/leases_released", released)
        if released or removed:
            logger.info("Left the shared crawl: %d leased request(s) queued again, %d "
                        "uncommitted index entr(ies) removed", released, removed)  # fmt: skip

    def engine_stopped(self) -> None:
        """The crawl is over and the process about to exit (module docstring, Leaving)."""
        if self._finished:  # the keys this worker wrote while closing get the deadline too
            try:
                finish_crawl(self.member, self.crawler.settings, *self._crawl_keys(),
                             log=False)
            except RedisBackendError as exc:
                logger.warning("could not set the expiry of the finished crawl's keys (%s)", exc)
        gc.freeze()

    def _crawl_keys(self) -> tuple[str, str]:
        """The queue key and the start list's key (they may live outside the namespace)."""
        from crawler.cluster.startlist import start_key

        name = self.crawler.spider.name if self.crawler.spider else "web"
        return self.frontier().key, start_key(self.crawler.settings, name)

    def _engine(self) -> Any:
        try:  # Crawler.engine raises until the crawl starts
            return self.crawler.engine
        except RuntimeError:
            return None

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)

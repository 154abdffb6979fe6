"""``SharedScheduler``: the scrapy-redis scheduler on our leased frontier (``SCHEDULER``).

scrapy-redis 0.9.1 builds the Redis client, the serializer and the dupefilter from settings; this
subclass keeps that and replaces the rest:

* the queue is :class:`crawler.cluster.frontier.LeasedFrontier` (``SCHEDULER_QUEUE_CLASS`` is
  not read): host-partitioned, and a popped request is leased, not removed;
* ``enqueue_request`` records the URL in the shared Bloom seen set and queues the request in one
  Lua call, the frontier's push, which it hands the dupefilter as the request's test-and-set
  (:meth:`crawler.dupefilter.BloomDupeFilter.record`: the dupefilter still fingerprints, counts
  and logs); a request that carries a lease (a redirect or a retry of a popped request)
  acknowledges it in the same call. With a local seen set (no shared one to fold in) the seen
  check and the push are two steps;
* with the shared seen set those pushes are held and written together, in one Lua call
  (:meth:`~crawler.cluster.frontier.LeasedFrontier.push_many`: each request's test-and-set,
  queueing and lease acknowledgement, in order, as one push each would): a page's new links
  in one round trip instead of one each. ``enqueue_request`` answers True for a held request
  (False at once for one whose URL this worker knows to be seen, or already holds); the held
  pushes are written before the next pop, before any lease is acknowledged or requeued,
  before the storage pipeline writes a batch (``crawler.signals.batch_writing``: a page is
  never committed before the links it promised are in Redis), at close, once
  :data:`PUSH_BATCH_MAX` are held, and :data:`PUSH_HOLD_SECONDS` after the first was held
  (other workers see the work soon even while this one's downloader is full). One the batch
  finds seen after all (another worker queued it meanwhile) is dropped then: the dupefilter
  counts and logs it and Scrapy's ``request_dropped`` signal is sent, as the engine sends it
  for a refused request. A worker killed while holding pushes loses none: the page that made
  them is not acknowledged, so it is fetched again, by whichever worker takes its lease;
* the push goes on the event loop's own Redis connection and is awaited (one on its way at a
  time; what is held meanwhile goes when it is back): an acknowledgement or requeue asked
  meanwhile is sent once the push carrying what was held when it was asked is back, and the
  storage writer's ``batch_writing`` returns only then, so both orders above still hold. A
  failure of that connection sends the same push (same token) through redis-py: if it ran,
  its first answers come back and nothing is queued twice or dropped as seen. ``close``
  returns a Deferred the engine awaits while a push is on its way;
* ``next_request`` takes ``DISTRIBUTED_PREFETCH`` leased requests per Redis call and hands them
  out one by one; ``has_pending_requests`` is about those, the held pushes and a pop on its
  way (whether the *shared* crawl is done is :class:`crawler.cluster.worker.ClusterWorker`'s
  question); the same call reports the leases whose download ended since
  (``request_left_downloader``), so a host another worker takes over waits only for the
  requests still on the wire;
* a pop goes on the event loop's own Redis connection
  (:class:`~crawler.backends.redis.aio.LoopRedis`) and is awaited, not waited for: the
  engine's ask that finds the buffer empty sends it and gets nothing yet; the reply fills the
  buffer and wakes the engine. The reactor never holds for it (redis-py's pop held it for a
  round trip plus the script's run, ~0.4 ms a pop on loopback). One pop is on its way at a
  time, only when the buffer is empty (:meth:`SharedScheduler._refill` says why not sooner). A
  failure of that connection sends the same pop (same token) through redis-py, which gets
  the first run's leases back if it ran. Without a running asyncio loop, or a server reached
  by TLS or a Unix socket, pops go through redis-py as they did;
* leases are acknowledged when their outcome is durable: ``crawler.signals.batch_committed``
  (the page stored or its drop committed), ``crawler.signals.request_finished`` (no page: an
  error status, a failure, a non-HTML body), ``spider_error`` and ``item_error`` (the page is
  lost to a bug: counted as ``dedup/shared/leases_failed``, never retried forever);
* a page the dedup pipeline left :class:`~crawler.exceptions.Undecided` (its storage was
  unavailable) is not done: its lease goes back to the queue at once
  (``dedup/shared/leases_requeued``), for any worker to fetch again;
* it never deletes the shared state: ``flush`` does nothing, so neither
  ``SCHEDULER_PERSIST=False`` (at close) nor ``SCHEDULER_FLUSH_ON_START`` (at open) empties the
  queue or the seen set other workers use (both are refused at join anyway,
  :mod:`crawler.cluster.joincheck`); the queue key follows ``DEDUP_NAMESPACE``
  (:func:`crawler.backends.common.queue_key`);
* it avoids the two APIs of scrapy-redis that Scrapy 2.19 deprecates (``spider=`` on stats,
  ``Spider.log``).

Its Redis client is its own (:func:`crawler.backends.redis.connect`, not scrapy-redis's, whose
``REDIS_PARAMS`` retry a timed-out call by themselves): calls are retried for up to
``REDIS_RETRY_SECONDS`` by :class:`crawler.backends.common.RedisRetry`, each one safe to run
twice (:mod:`crawler.cluster.frontier`). A call that still fails is the Redis outage of the
crawl: every frontier call goes through the dupefilter's
:class:`~crawler.dupefilter.guard.GuardedSeenSet` (:attr:`SharedScheduler.guard`), which closes
the crawl with ``redis_error`` once and answers without Redis from then on.

Stats: ``scheduler/enqueued/redis``, ``scheduler/dequeued/redis``, ``dedup/shared/leases_acked``,
``dedup/shared/leases_failed``, ``dedup/shared/hosts_stolen``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import load_object
from scrapy_redis.scheduler import Scheduler

from crawler import defaults, meta
from crawler import signals as dedup_signals
from crawler.backends.common import queue_key, redis_url, retry_policy
from crawler.backends.redis import RedisSeenSet, connect
from crawler.backends.redis.aio import LoopConnection, LoopRedis, LoopRedisError
from crawler.cluster import joincheck
from crawler.cluster import worker as cluster
from crawler.cluster.frontier import LeasedFrontier, LeaseLost, handover_ms
from crawler.exceptions import Undecided
from crawler.storage.engine import StorageError

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred
    from twisted.internet.interfaces import IDelayedCall

    from crawler.dupefilter import BloomDupeFilter, GuardedSeenSet

logger = logging.getLogger(__name__)

#: Pushes held at most before they are written, and for at most this long (module docstring).
PUSH_BATCH_MAX = 256
PUSH_HOLD_SECONDS = 0.1
#: After a pop that brought nothing, pops wait this long unless this worker queued requests
#: meanwhile: an engine asking for work on every reactor turn would otherwise ask Redis each
#: time (measured: 1,380 pops for 2,000 pages once the reactor no longer waited for Redis
#: on the content index's question, 283 before).
EMPTY_POP_PAUSE_SECONDS = 0.02


class SharedScheduler(Scheduler):
    """scrapy-redis's ``Scheduler`` on the leased frontier (see the module docstring)."""

    df: BloomDupeFilter  # built by scrapy-redis (from_spider) or by open()
    queue: LeasedFrontier
    crawler: Crawler | None = None
    _refused: joincheck.CrawlRefused | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedScheduler:
        scheduler: SharedScheduler = super().from_crawler(crawler)
        scheduler.crawler = crawler
        scheduler.prefetch = cluster.prefetch(crawler.settings)
        for signal in (dedup_signals.batch_committed, dedup_signals.request_finished):
            crawler.signals.connect(scheduler.finished, signal=signal)
        crawler.signals.connect(scheduler.pushes_written, signal=dedup_signals.batch_writing)
        crawler.signals.connect(scheduler.spider_error, signal=signals.spider_error)
        crawler.signals.connect(scheduler.left_downloader, signal=signals.request_left_downloader)
        crawler.signals.connect(scheduler.item_error, signal=signals.item_error)
        crawler.signals.connect(scheduler.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(scheduler.spider_opened, signal=signals.spider_opened)
        return scheduler

    def open(self, spider: Spider) -> None:
        self.spider = spider
        self._buffer: deque[Request] = deque()
        self._pushes: list[tuple[Request, bytes | None]] = []  # held (module docstring)
        self._flush_call: IDelayedCall | None = None
        if not hasattr(self, "clock"):
            from twisted.internet import reactor

            self.clock: Any = reactor  # IReactorTime (a test's Clock)
        self._fetched: list[str] = []  # leases whose download ended, for the next pop
        self._pop_after = 0.0  # clock time before which no pop is tried (an empty one was)
        # a pop on the event loop's connection (_refill): one at a time, when the buffer is empty
        self._popping = self._closed = False
        self._pop_task: asyncio.Task[None] | None = None
        # pushes on the loop's connection (flush_pushes): one on its way at a time; numbered,
        # so an acknowledgement or a storage commit waits for the push carrying what was held
        # when it was asked (_after_pushes_written), not for every later one
        self._pushing = False
        self._push_task: asyncio.Task[None] | None = None
        self._push_seq = self._pushed_seq = 0
        self._waiting_pushes: list[tuple[int, Any]] = []
        self.prefetch = getattr(self, "prefetch", defaults.DISTRIBUTED_PREFETCH)
        url = redis_url(spider.settings)
        policy = retry_policy(spider.settings, self.stats)
        self.server = connect(url, policy.timeout)  # not scrapy-redis's: no hidden retries
        self._loop = LoopConnection(self.server)  # pops and pushes on the event loop
        try:
            me = cluster.member(self.crawler) if self.crawler is not None else None
        except joincheck.CrawlRefused as exc:  # nothing written; the crawl ends once open
            self._refused = exc
            return
        self.queue = LeasedFrontier(
            self.server, spider, queue_key(spider.settings, spider.name), self.serializer,
            workers_key=me.workers_key if me else "", url=url,
        )  # fmt: skip
        self.queue.retrying(policy)
        if me is not None:
            self.queue.worker = me.id
        self.queue.handover_ms = handover_ms(spider.settings)
        if not self.df:
            self.df = load_object(self.dupefilter_cls).from_spider(spider)
        queued, leased = self.queue.counts()
        if queued or leased:
            logger.info("Joining a shared crawl: %d request(s) queued, %d leased in %s",
                        queued, leased, self.queue.key, extra={"spider": spider})  # fmt: skip

    @property
    def guard(self) -> GuardedSeenSet:
        """The Redis-outage guard of the crawl (the dupefilter's): ask its ``down``."""
        return self.df.guard

    # --- scheduling ---------------------------------------------------------------------------
    def enqueue_request(self, request: Request) -> bool:
        if isinstance(self.df.seen, RedisSeenSet) and not self.guard.down:
            return self._hold(request)
        queued = self._push(request) if request.dont_filter else self._push_if_new(request)
        if not queued:
            if not request.dont_filter:
                self.df.log(request, self.spider)
            return False
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        return True

    def _push_if_new(self, request: Request) -> bool:
        """Record the URL as seen and queue ``request`` in one atomic step (a kill between
        the two would leave a URL seen but never queued): the frontier's push is the
        dupefilter's test-and-set. True when it was queued, False when already seen (or Redis
        is down). A local seen set: two steps, no atomicity."""
        seen = self.df.seen
        if not isinstance(seen, RedisSeenSet):
            return not self.df.request_seen(request) and self._push(request)
        queue = self.queue
        return not self.df.record(
            request, lambda fp: not queue.push_new(request, fp, seen)
        )  # fmt: skip

    def _push(self, request: Request) -> bool:
        return self.guard.attempt(lambda: self.queue.push_new(request), False)

    def _hold(self, request: Request) -> bool:
        """Hold ``request``'s push for the next batch (module docstring); False at once when
        its URL is known to be seen here (a request replacing a lease is always pushed: the
        push acknowledges the lease)."""
        fp = None
        if not request.dont_filter:
            fp = self.df.fingerprinter.fingerprint(request)
            if self.df.known_seen(fp) and not request.meta.get(meta.LEASE):
                self.df.settled(fp, request, True)
                self.df.log(request, self.spider)
                return False
            self.df.promise(fp)
        self._pushes.append((request, fp))
        if len(self._pushes) >= PUSH_BATCH_MAX:
            self.flush_pushes()
        elif self._flush_call is None:
            self._flush_call = self.clock.callLater(PUSH_HOLD_SECONDS, self._flush_due)
        return True

    def _flush_due(self) -> None:
        self._flush_call = None
        self.flush_pushes()

    def flush_pushes(self, **_: Any) -> None:
        """Write the held pushes in one call; a request found seen after all is dropped when
        the answer comes (counted, logged, ``request_dropped``), as the engine drops one
        refused at once. On the event loop's connection the call is sent and awaited
        (:meth:`_push_on_loop`): one at a time, so pushes held while one is on its way go
        when it is back. Otherwise (no running loop, a TLS or Unix-socket server, after
        :meth:`close`) through redis-py, answered now."""
        pushes, self._pushes = getattr(self, "_pushes", []), []
        call, self._flush_call = getattr(self, "_flush_call", None), None
        if call is not None and call.active():
            call.cancel()
        if not pushes:
            return
        seen = self.df.seen if isinstance(self.df.seen, RedisSeenSet) else None
        loop_redis = None if self._closed or self.guard.down else self._loop.get()
        if loop_redis is None:
            answers = self.guard.attempt(lambda: self.queue.push_many(pushes, seen), None)
            self._pushes_answered(pushes, answers)
            return
        if self._pushing:
            self._pushes[:0] = pushes  # still held: written once the push on its way is back
            return
        keys, args = self.queue.push_call(pushes, seen)
        self._pushing = True
        self._push_seq += 1
        self._push_task = asyncio.get_running_loop().create_task(
            self._push_on_loop(loop_redis, pushes, seen, keys, args, self._push_seq))

    async def _push_on_loop(self, loop_redis: LoopRedis, pushes: list[tuple[Request, bytes | None]],
                            seen: RedisSeenSet | None, keys: list[str], args: list[Any],
                            seq: int) -> None:  # fmt: skip
        """One push sent on the event loop's connection and awaited. A failure of that
        connection sends the same push (same token: if it ran, its first answers come back
        and nothing is queued twice) through redis-py, under the crawl's outage policy. Then
        what waited for it runs: the acknowledgements and requeues asked meanwhile, the
        storage batch waiting to commit, and the pushes held meanwhile are sent."""
        try:
            answers = None
            try:
                out: Any = await loop_redis.run_script(self.queue.push_script, keys, args)
            except LoopRedisError as exc:
                LoopConnection.failed(loop_redis, logger, "frontier", "the push", exc)
                out = self.guard.attempt(lambda: self.queue.run_push(keys, args), None)
            if out is not None:
                answers = self.queue.pushed(pushes, seen, out)
            self._pushes_answered(pushes, answers)
        except Exception:  # a reply not read: if the push ran, its requests are queued
            logger.exception("frontier: a push's reply could not be read")
        finally:
            self._pushing = False
            self._push_task = None
            self._pushed_seq = seq
            self._after_push()
            if not self._closed:
                self._wake_engine()  # it may have found the worker busy with this push

    def _after_push(self) -> None:
        """What waited for pushes up to :attr:`_pushed_seq` runs, in the order it was asked;
        the pushes held meanwhile are sent."""
        done = [(need, step) for need, step in self._waiting_pushes if need <= self._pushed_seq]
        self._waiting_pushes = [(need, step) for need, step in self._waiting_pushes
                                if need > self._pushed_seq]  # fmt: skip
        for _, step in done:
            step()
        if self._pushes and not self._pushing:
            self.flush_pushes()

    def _after_pushes_written(self, step: Any) -> None:
        """Run ``step`` once every push held or on its way now is written: at once when there
        are none (or no push is ever on the loop), else when the push that carries the last
        of them is back (:meth:`_after_push`)."""
        self.flush_pushes()
        if not self._pushing:
            step()
            return
        need = self._push_seq + (1 if self._pushes else 0)
        self._waiting_pushes.append((need, step))

    async def pushes_written(self, **_: Any) -> None:
        """``crawl.signals.batch_writing`` (awaited by the storage writer): return once every
        push held or on its way is written, so a page is never committed before the links it
        promised are in Redis."""
        if not self._pushing and not self._pushes:
            return
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not written.done():
                written.set_result(None)

        self._after_pushes_written(done)
        await written

    def _pushes_answered(self, pushes: list[tuple[Request, bytes | None]],
                         answers: list[bool] | None) -> None:  # fmt: skip
        """The held ``pushes`` written (``answers``: whether each was queued; None: Redis
        failed, the crawl closes with ``redis_error``, each one counted as dropped)."""
        if answers is None:
            answers = [not self.guard.recorded(lambda: True) for _ in pushes]
        queued = 0
        for (request, fp), new in zip(pushes, answers, strict=True):
            if fp is not None:
                new = not self.df.settled(fp, request, not new)
            if new:
                queued += 1
                continue
            if not request.dont_filter:
                self.df.log(request, self.spider)
            if self.crawler is not None:
                self.crawler.signals.send_catch_log(signals.request_dropped, request=request,
                                                    spider=self.spider)  # fmt: skip
        self._inc("scheduler/enqueued/redis", queued)
        if queued:
            self._pop_after = 0.0  # work of this worker's own: worth a pop at once

    def next_request(self) -> Request | None:
        self.flush_pushes()
        if not self._buffer and not self._refill():
            return None
        request = self._buffer.popleft()
        if self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def _refill(self) -> bool:
        """Whether a pop brought requests into the buffer now (the buffer is empty). On the
        event loop's connection the pop is sent and False returned: its requests come with
        the reply (:meth:`_pop_on_loop`), which wakes the engine.

        Not sent ahead, while the buffer still holds requests: measured, a pop sent once half
        the buffer was handed out left two workers splitting the hosts 3 to 1 in three runs of
        five (balanced in five of five before): the more leased requests a worker holds, the
        fewer moments one of its hosts has none in flight, which is when an idle worker may
        take it over (:mod:`crawler.cluster.frontier`)."""
        if self._popping or self.guard.down or self.queue.worker == "" or self._closed:
            return False
        now = self.clock.seconds()
        if now < self._pop_after:
            return False
        loop_redis = self._loop.get()
        if loop_redis is not None:
            keys, args = self.queue.pop_call(self.prefetch, fetched=self._fetched)
            self._fetched = []
            self._popping = True
            self._pop_task = asyncio.get_running_loop().create_task(
                self._pop_on_loop(loop_redis, keys, args))
            return False
        try:
            popped = self.guard.attempt(
                lambda: self.queue.pop_many(self.prefetch, fetched=self._fetched), None
            )  # fmt: skip
        except LeaseLost:
            return False  # ClusterWorker closes the spider (lease_lost)
        if popped is None:
            return False
        self._fetched = []
        return self._took(*popped, now)

    def _took(self, requests: list[Request], stolen: str | None, now: float) -> bool:
        """A pop's requests into the buffer; whether there were any."""
        if stolen:
            self._inc("dedup/shared/hosts_stolen")
            logger.info("Took host %s from a worker owning several with queued requests (this "
                        "one had none)", stolen)
        self._buffer.extend(requests)
        if not requests:
            self._pop_after = now + EMPTY_POP_PAUSE_SECONDS
        return bool(requests)

    async def _pop_on_loop(self, loop_redis: LoopRedis, keys: list[str],
                           args: list[Any]) -> None:  # fmt: skip
        """One pop sent on the event loop's connection and awaited: the reactor downloads and
        parses meanwhile. A failure of that connection sends the same pop (same token: the
        first run's leases, if it ran, come back, never more) through redis-py, under the
        crawl's Redis outage policy. The requests go into the buffer and the engine is woken
        to take them; a reply that comes after :meth:`close` is left (its leases, if it took
        any, go back to the queue with this worker's release, or the pop found the worker
        gone and took none)."""
        try:
            try:
                out = await loop_redis.run_script(self.queue.pop_script, keys, args)
            except LoopRedisError as exc:
                if self._closed:
                    return
                LoopConnection.failed(loop_redis, logger, "frontier", "the pop", exc)
                out = self.guard.attempt(lambda: self.queue.run_pop(keys, args), None)
                if out is None:
                    return
            if self._closed:
                return
            try:
                popped = self.queue.popped(out)
            except LeaseLost:
                return  # ClusterWorker closes the spider (lease_lost)
            except Exception:  # a reply not read: its leases come back as orphans at idle
                logger.exception("frontier: a pop's reply could not be read")
                return
            self._took(*popped, self.clock.seconds())
        finally:
            self._popping = False
            self._pop_task = None
            if not self._closed:
                self._wake_engine()

    def _wake_engine(self) -> None:
        """Run the engine's next-request loop now: it asked while the pop was on its way and
        would otherwise ask again only when a download ends (or at its 5 s heartbeat). After
        a pop that brought nothing too: the engine found the scheduler busy (a pop on its
        way) and only now, the pop done and the next one paused, can it find the worker idle
        (:class:`~crawler.cluster.worker.ClusterWorker` then asks whether the shared crawl is
        done). Without this wake the heartbeat's own ask sent a pop each time and the worker
        never read as idle: it never closed."""
        engine = getattr(self.crawler, "engine", None)
        nextcall = getattr(getattr(engine, "_slot", None), "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def has_pending_requests(self) -> bool:
        return bool(self._buffer) or bool(self._pushes) or self._popping or self._pushing

    def __len__(self) -> int:
        return len(self._buffer)

    def spider_opened(self, spider: Spider | None = None) -> None:
        """A worker refused at join (:mod:`crawler.cluster.joincheck`: its membership, taken
        in :meth:`open`, was refused) closes as soon as it is open, finish reason
        ``settings_refused``: Scrapy honours a ``CloseSpider`` raised here, whereas one raised
        by ``open`` leaves the scraper unopened (an error at close)."""
        if self._refused is not None:
            raise self._refused

    def close(self, reason: str) -> Deferred[None] | None:
        """``ClusterWorker`` hands the leases back once the pipelines have committed what they
        hold (``spider_closed``). The queue and the seen set are never emptied, whatever
        ``SCHEDULER_PERSIST`` says (:meth:`flush`). Held pushes are written first; with a
        push on its way on the loop's connection, once it is back (the engine awaits the
        Deferred returned then)."""
        if self._pushing:
            return deferred_from_coro(self._close_after_pushes())
        self._close_now()
        return None

    async def _close_after_pushes(self) -> None:
        await self.pushes_written()
        self._close_now()

    def _close_now(self) -> None:
        self._closed = True  # from now on pushes go through redis-py, answered at once
        self.flush_pushes()
        self._buffer.clear()
        self._loop.close()

    def flush(self) -> None:
        """Nothing: in scrapy-redis ``SCHEDULER_PERSIST=False`` (at close) and
        ``SCHEDULER_FLUSH_ON_START`` delete the queue and the seen set, which here every worker
        of the crawl shares. Both settings are refused when a worker joins
        (:func:`crawler.cluster.joincheck.validate`); a crawl's state is cleared with
        ``scrapy crawlclear`` once it is over."""

    def left_downloader(self, request: Request, **_: Any) -> None:
        lease = request.meta.get(meta.LEASE)
        if lease:
            self._fetched.append(lease)

    # --- acknowledgements ---------------------------------------------------------------------
    def finished(self, leases: list[str] | None = None, **_: Any) -> None:
        """A batch committed, or requests ended without a page: their leases are done."""
        self._ack([lease for lease in leases or () if lease])

    def spider_error(self, failure: Any, response: Any, spider: Any = None) -> None:
        self._failed(getattr(response, "meta", {}).get(meta.LEASE))

    def item_error(self, item: Any, response: Any, spider: Any = None, failure: Any = None) -> None:
        """A pipeline failed on the page: a bug is counted and acknowledged (never retried
        forever); a storage outage that reached here is not the page's fault: its lease goes
        back to the queue, as an Undecided page's."""
        lease = getattr(response, "meta", {}).get(meta.LEASE) if response else None
        if isinstance(getattr(failure, "value", None), StorageError):
            self._requeue(lease)
        else:
            self._failed(lease)

    def item_dropped(self, item: Any, response: Any, exception: BaseException,
                     spider: Any = None) -> None:
        """An Undecided page's request is not done: its lease goes back to the queue."""
        if isinstance(exception, Undecided):
            self._requeue(getattr(response, "meta", {}).get(meta.LEASE) if response else None)

    def _requeue(self, lease: str | None) -> None:
        if lease:
            self._after_pushes_written(lambda: self._inc(
                "dedup/shared/leases_requeued",
                self.guard.attempt(lambda: self.queue.requeue([lease]), 0)))
        else:
            self.flush_pushes()

    def _failed(self, lease: str | None) -> None:
        if lease:
            self._inc("dedup/shared/leases_failed")
            self._ack([lease])

    def _ack(self, leases: list[str]) -> None:
        """Acknowledge ``leases`` once what their pages promised is queued (the pushes held
        or on their way now are written first)."""
        if leases:
            self._after_pushes_written(lambda: self._inc(
                "dedup/shared/leases_acked",
                self.guard.attempt(lambda: self.queue.ack(leases), 0)))
        else:
            self.flush_pushes()

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats and count:
            self.stats.inc_value(key, count)

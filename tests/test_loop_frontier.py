"""A distributed worker's pops and pushes on the event loop's own Redis connection
(``SharedScheduler._refill`` and ``flush_pushes``, ``LoopRedis``), against the real Redis.

Pops: sent when the buffer runs dry, awaited so the reactor never waits for one, the same
leases redis-py's pop would give, none lost or taken twice when the loop's connection fails
after the pop ran or the crawl closes meanwhile. Pushes: one on its way at a time, an
acknowledgement sent only once the push carrying its page's links is back, nothing queued
twice or dropped when the reply is lost, and close waiting for the push on its way."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future

from crawler.backends.redis import clear_namespace, connect
from crawler.backends.redis.aio import LoopRedis
from crawler.cluster.frontier import LeasedFrontier
from crawler.meta import LEASE
from tests.test_batched_pushes import _scheduler

pytestmark = pytest.mark.redis

QUEUED = 20


@pytest.fixture
def scheduler(redis_url) -> Iterator[Any]:
    """A shared scheduler (prefetch 8) whose frontier holds QUEUED requests another worker
    queued; ``urls``: theirs."""
    made = _scheduler(redis_url, DISTRIBUTED_PREFETCH=8)
    other = LeasedFrontier(made.queue.server, made.spider, made.queue.key,
                           workers_key=made.queue.workers_key)  # fmt: skip
    other.worker = "another"
    made.urls = [f"http://h.test/{i}" for i in range(QUEUED)]
    for url in made.urls:
        request = Request(url)
        assert other.push_new(request, made.df.fingerprinter.fingerprint(request), made.df.seen)
    yield made
    clear_namespace(connect(redis_url), made.namespace)


async def _until(condition: Any, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not within {seconds:.0f} s")


def test_pops_go_on_the_loop_when_the_buffer_runs_dry_and_no_redis_py_pop_is_made(scheduler):
    """The ask that finds the buffer empty sends a pop and gets nothing yet (the engine is
    woken when the reply comes); no pop is sent while the buffer holds requests (a worker
    holding more leases than it needs keeps its hosts from an idle worker). Every request
    comes once, leased."""
    got: list[Request] = []

    async def crawl() -> list[int]:
        assert scheduler.next_request() is None  # sent, not awaited: the reactor goes on
        assert scheduler._popping and scheduler.has_pending_requests()
        held = []
        while True:
            await _until(lambda: not scheduler._popping)
            held.append(len(scheduler._buffer))
            while scheduler._buffer:
                got.append(scheduler.next_request())
                assert not scheduler._popping or not scheduler._buffer
            if scheduler.next_request() is not None:  # pragma: no cover - the buffer is empty
                raise AssertionError("a request without a pop")
            if not scheduler._popping:  # paused: the last pop brought nothing
                return held

    held = asyncio.run(crawl())
    assert held == [8, 8, 4, 0]
    assert sorted(r.url for r in got) == sorted(scheduler.urls)
    assert scheduler.calls["pop_many"] == 0  # never through redis-py
    assert isinstance(scheduler._loop.made, LoopRedis)
    assert scheduler._loop.made.failures == 0 and scheduler._loop.made.calls >= 4
    assert scheduler.queue.counts() == (0, QUEUED)  # all leased to this worker, once
    assert scheduler.stats.get_value("scheduler/dequeued/redis") == QUEUED


async def _reply_dropping_proxy(port: int) -> tuple[asyncio.Server, int, list[int]]:
    """A TCP proxy to Redis that forwards each command and, once Redis has answered, closes
    the client's connection instead of passing the answer on: the call ran, its reply lost.
    Returns the server, its port and a list counting the replies dropped."""
    dropped: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        data = await reader.read(1 << 16)
        up_writer.write(data)
        await up_writer.drain()
        if await up_reader.read(1 << 16):
            dropped.append(1)
        up_writer.close()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], dropped


def test_a_pop_whose_reply_was_lost_is_sent_again_by_redis_py_and_leases_nothing_twice(
        scheduler, redis_url, caplog):  # fmt: skip
    """The pop ran in Redis (8 leased) but the loop's connection died before its reply: the
    same pop (same token) through redis-py gets the first run's requests back, so 8 are
    leased, not 16, and each comes once; said once in the log."""
    caplog.set_level(logging.INFO, logger="crawler.cluster.scheduler")
    script = scheduler.queue.pop_script
    connect(redis_url).script_load(script.script)  # the proxy's one reply is the pop's
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])

    async def crawl() -> tuple[list[Request], int]:
        server, proxy_port, dropped = await _reply_dropping_proxy(port)
        scheduler._loop.made = LoopRedis("127.0.0.1", proxy_port)
        try:
            assert scheduler.next_request() is None
            await _until(lambda: not scheduler._popping)
            first = list(scheduler._buffer)
            return first, len(dropped)
        finally:
            server.close()

    first, dropped = asyncio.run(crawl())
    assert dropped == 1
    assert len(first) == 8 and len({r.url for r in first}) == 8
    assert scheduler.calls["pop_many"] == 0  # the retry is run_pop with the first pop's args
    assert scheduler.queue.counts() == (QUEUED - 8, 8)
    said = [r.getMessage() for r in caplog.records if "loop's Redis connection" in r.getMessage()]
    assert len(said) == 1 and "lost" in said[0]


def test_a_pop_on_its_way_at_close_puts_nothing_in_the_buffer_and_loses_nothing(scheduler):
    """The crawl closes while a pop is on its way: its reply is left, and whatever it leased
    goes back to the queue with the worker's release (the pop found the worker gone and took
    nothing, or ran first and its leases are released)."""

    async def close_meanwhile() -> None:
        assert scheduler.next_request() is None and scheduler._popping
        scheduler.close("shutdown")
        await _until(lambda: not scheduler._popping)

    asyncio.run(close_meanwhile())
    assert not scheduler._buffer and not scheduler.has_pending_requests()
    queued, leased = scheduler.queue.counts()
    assert queued + leased == QUEUED and leased in (0, 8)
    scheduler.queue.release()
    assert scheduler.queue.counts() == (QUEUED, 0)


def test_an_empty_pop_leaves_the_worker_idle_until_its_pause_ends(redis_url):
    """Nothing queued: while the pop is on its way the scheduler has pending work (the engine
    must not read the worker idle yet); once it came back empty it has none, and an ask
    within EMPTY_POP_PAUSE_SECONDS sends no other pop (the engine, woken by the reply, then
    finds the worker idle; a pop sent by that very ask kept it busy forever)."""
    made = _scheduler(redis_url, DISTRIBUTED_PREFETCH=8)

    async def ask() -> tuple[bool, bool, bool]:
        assert made.next_request() is None
        busy = made.has_pending_requests()
        await _until(lambda: not made._popping)
        after = made.has_pending_requests()
        assert made.next_request() is None  # within the pause
        return busy, after, made._popping

    try:
        busy, after, popping_again = asyncio.run(ask())
        calls = made._loop.made.calls
    finally:
        clear_namespace(connect(redis_url), made.namespace)
    assert (busy, after, popping_again) == (True, False, False)
    assert calls in (1, 3)  # the pop (3: EVALSHA, SCRIPT LOAD, EVALSHA on a fresh server)
    assert made.calls["pop_many"] == 0


# --- pushes -------------------------------------------------------------------------------------

async def _a_page(made: Any) -> Request:
    """The one request queued (by another worker), popped on the loop."""
    assert made.next_request() is None
    await _until(lambda: not made._popping)
    page = made.next_request()
    assert page is not None
    return page


def _one_queued(made: Any) -> None:
    other = LeasedFrontier(made.queue.server, made.spider, made.queue.key,
                           workers_key=made.queue.workers_key)  # fmt: skip
    other.worker = "another"
    seed = Request("http://h.test/seed")
    assert other.push_new(seed, made.df.fingerprinter.fingerprint(seed), made.df.seen)


def test_pushes_go_on_the_loop_one_at_a_time_and_an_ack_waits_for_its_links(redis_url):
    """A page's links are pushed on the loop; its acknowledgement, asked while that push is
    on its way, is sent once it is back (a kill in between would otherwise lose the links:
    the page acknowledged, its links never queued). Links held while a push is on its way
    go when it is back, in one more push; redis-py pushes nothing."""
    made = _scheduler(redis_url, DISTRIBUTED_PREFETCH=8)
    _one_queued(made)
    seen: list[tuple[int, int]] = []

    async def crawl() -> None:
        page = await _a_page(made)
        for i in range(3):
            assert made.enqueue_request(Request(f"http://h.test/link{i}"))
        made.flush_pushes()
        assert made._pushing and made.has_pending_requests()
        for i in range(3, 5):  # while the first push is on its way: held
            assert made.enqueue_request(Request(f"http://h.test/link{i}"))
        made.flush_pushes()
        assert len(made._pushes) == 2
        made.finished(leases=[page.meta[LEASE]])
        seen.append(made.queue.counts())  # the ack waits: the page still leased
        await _until(lambda: not made._pushing and not made._pushes)
        seen.append(made.queue.counts())

    try:
        asyncio.run(crawl())
        loop_calls = made._loop.made.calls
    finally:
        clear_namespace(connect(redis_url), made.namespace)
    assert seen[0][1] == 1  # leased until the push carrying the page's links is back
    assert seen[1] == (5, 0)  # every link queued, then the page acknowledged
    assert made.calls["push_many"] == 0 and made.calls["push_new"] == 0
    assert loop_calls >= 3  # the pop, two pushes
    assert made.stats.get_value("scheduler/enqueued/redis") == 5
    assert made.stats.get_value("dedup/shared/leases_acked") == 1
    assert made.dropped == []


def test_a_push_whose_reply_was_lost_is_sent_again_by_redis_py_and_queues_nothing_twice(
        redis_url, caplog):  # fmt: skip
    """The push ran in Redis (the links recorded seen and queued), its reply lost: the same
    push (same token) through redis-py gets the first run's answers, so every link reads as
    queued by this worker, none dropped as a duplicate, none queued twice."""
    caplog.set_level(logging.INFO, logger="crawler.cluster.scheduler")
    made = _scheduler(redis_url, DISTRIBUTED_PREFETCH=8)
    connect(redis_url).script_load(made.queue.push_script.script)
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])

    async def push() -> int:
        server, proxy_port, dropped = await _reply_dropping_proxy(port)
        made._loop.made = LoopRedis("127.0.0.1", proxy_port)
        try:
            for i in range(4):
                assert made.enqueue_request(Request(f"http://h.test/link{i}"))
            made.flush_pushes()
            await _until(lambda: not made._pushing)
            return len(dropped)
        finally:
            server.close()

    try:
        dropped = asyncio.run(push())
        counts = made.queue.counts()
    finally:
        clear_namespace(connect(redis_url), made.namespace)
    assert dropped == 1
    assert counts == (4, 0)
    assert made.dropped == [] and not made.stats.get_value("dupefilter/filtered")
    assert made.stats.get_value("scheduler/enqueued/redis") == 4
    assert made.calls["push_many"] == 0  # run_push with the first push's args
    said = [r.getMessage() for r in caplog.records if "loop's Redis connection" in r.getMessage()]
    assert len(said) == 1 and "the push goes through redis-py" in said[0]


def test_close_waits_for_the_push_on_its_way_then_writes_what_is_held(redis_url):
    made = _scheduler(redis_url, DISTRIBUTED_PREFETCH=8)

    async def close() -> object:
        for i in range(3):
            assert made.enqueue_request(Request(f"http://h.test/link{i}"))
        made.flush_pushes()
        assert made.enqueue_request(Request("http://h.test/late"))  # held: one on its way
        closing = made.close("finished")
        assert closing is not None and made._pushing  # the engine awaits it
        await maybe_deferred_to_future(closing)
        return made.queue.counts()

    try:
        counts = asyncio.run(close())
    finally:
        clear_namespace(connect(redis_url), made.namespace)
    assert counts == (4, 0)
    assert made._closed and not made.has_pending_requests()
    assert made.calls["push_many"] == 0  # the late one went on the loop too, then close ended

"""A distributed worker's pushes held and written together (``LeasedFrontier.push_many``,
``SharedScheduler`` holding them), against the real Redis: the same queue, seen set and leases
as one push each, in fewer round trips, and nothing a page promised left behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.utils.test import get_crawler
from twisted.internet.task import Clock

from crawler import signals as dedup_signals
from crawler.backends.redis import RedisSeenSet, clear_namespace, connect
from crawler.cluster.frontier import LeasedFrontier
from crawler.cluster.scheduler import (
    EMPTY_POP_PAUSE_SECONDS,
    PUSH_BATCH_MAX,
    PUSH_HOLD_SECONDS,
    SharedScheduler,
)
from crawler.cluster.worker import Member
from crawler.meta import LEASE as LEASE_META

pytestmark = pytest.mark.redis


class _Spider(Spider):
    name = "web"

    def parse(self, response):  # pragma: no cover - never called here
        return None


def _fp(i: int) -> bytes:
    return i.to_bytes(2, "big") * 8


def _batch() -> list[tuple[Request, bytes | None]]:
    """Requests of three hosts, two priorities, a URL twice, one without a seen check."""
    items: list[tuple[Request, bytes | None]] = []
    for i in range(12):
        items.append((Request(f"http://h{i % 3}.test/{i}", priority=5 * (i % 2)), _fp(i)))
    items.append((Request("http://h0.test/4", priority=9), _fp(4)))  # seen in this very batch
    items.append((Request("http://h1.test/again", dont_filter=True), None))
    return items


@pytest.fixture
def frontiers(redis_url) -> Iterator[Any]:
    """``make()`` -> (frontier, seen set) of one worker of a fresh namespace."""
    client = connect(redis_url)
    bases: list[str] = []

    def make() -> tuple[LeasedFrontier, RedisSeenSet]:
        base = f"dedup:test-{uuid.uuid4().hex[:10]}"
        bases.append(base)
        member = Member(connect(redis_url), base, 30.0)
        member.beat()
        frontier = LeasedFrontier(member.client, _Spider(), f"{base}:web:requests",
                                  workers_key=member.workers_key)  # fmt: skip
        frontier.worker = member.id
        return frontier, RedisSeenSet(connect(redis_url), base, capacity=10_000)

    yield make
    for base in bases:
        clear_namespace(client, base)


def _drain(frontier: LeasedFrontier) -> list[tuple[str, int]]:
    out = []
    while True:
        popped, _ = frontier.pop_many(4)
        if not popped:
            return out
        out += [(r.url, r.priority) for r in popped]


def test_push_many_queues_what_one_push_each_would(frontiers):
    one, one_seen = frontiers()
    many, many_seen = frontiers()
    items = _batch()
    assert len(items) == 14
    each = [one.push_new(r, fp, one_seen if fp is not None else None) for r, fp in items]
    together = many.push_many(items, many_seen)
    assert together == each
    assert together.count(False) == 1  # the URL met twice
    assert many.counts() == one.counts() == (13, 0)
    assert len(many_seen) == len(one_seen) == 12
    assert all(fp in many_seen for _, fp in items if fp is not None)
    assert _drain(many) == _drain(one)  # same hosts, same priority and FIFO order
    # the same URLs in new requests, as another page links them (an object popped carries its
    # lease, and pushed again it would stand for a redirect of that lease)
    again = many.push_many(_batch()[:3], many_seen)
    assert again == [False, False, False] and many.counts() == (0, 13)


def test_push_many_sent_again_with_its_token_queues_nothing_twice(frontiers):
    """A call whose reply was lost is sent again with the same token (RedisRetry): the first
    run's answers come back, nothing is queued or recorded twice."""
    frontier, seen = frontiers()
    frontier._token = lambda: "retried-token"  # type: ignore[method-assign]
    items = _batch()[:5]
    first = frontier.push_many(items, seen)
    assert first == [True] * 5
    assert frontier.push_many(items, seen) == first  # the memo's reply, not "seen" five times
    assert frontier.counts() == (5, 0)
    assert len(seen) == 5


def test_push_many_acknowledges_the_leases_its_requests_replace(frontiers):
    frontier, seen = frontiers()
    assert frontier.push_many([(Request("http://h.test/old"), _fp(1))], seen) == [True]
    (popped,), _ = frontier.pop_many(1)
    assert frontier.counts() == (0, 1)
    redirected = popped.replace(url="http://h.test/new")  # the lease travels in meta
    assert redirected.meta[LEASE_META]
    assert frontier.push_many([(redirected, _fp(2))], seen) == [True]
    assert frontier.counts() == (1, 0)  # the old lease acknowledged in the same call


# --- the scheduler holding pushes ------------------------------------------------------------

def _scheduler(redis_url: str, **settings: Any) -> SharedScheduler:
    """A shared scheduler open on a fresh namespace of ``redis_url``; ``calls`` counts its
    frontier's pushes (the real ones, counted on the way), ``dropped`` the URLs of
    ``request_dropped``."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    crawler = get_crawler(_Spider, {
        "DEDUP_BACKEND": "redis", "REDIS_URL": redis_url, "DEDUP_NAMESPACE": name,
        "SCHEDULER": "crawler.cluster.scheduler.SharedScheduler",
        "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter",
        "SCHEDULER_QUEUE_KEY": f"dedup:{name}:%(spider)s:requests", **settings})  # fmt: skip
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    crawler.stats.open_spider()
    made = SharedScheduler.from_crawler(crawler)
    made.open(spider)
    made.namespace = f"dedup:{name}"
    calls = {"push_many": 0, "push_new": 0, "pop_many": 0}
    frontier = made.queue
    for method in calls:
        real = getattr(frontier, method)

        def counted(*args: Any, _real: Any = real, _name: str = method, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        setattr(frontier, method, counted)
    made.calls = calls
    dropped: list[str] = []
    crawler.signals.connect(lambda request, spider: dropped.append(request.url),
                            signal=signals.request_dropped, weak=False)  # fmt: skip
    made.dropped = dropped
    return made


@pytest.fixture
def scheduler(redis_url) -> Iterator[Any]:
    made = _scheduler(redis_url)
    yield made
    clear_namespace(connect(redis_url), made.namespace)


def test_held_pushes_are_written_in_one_call_before_the_next_pop(scheduler):
    urls = [f"http://h.test/{i}" for i in range(5)]
    for url in urls:
        assert scheduler.enqueue_request(Request(url)) is True
    assert scheduler.queue.counts() == (0, 0)  # held
    assert scheduler.has_pending_requests()  # so the engine asks for the next request
    first = scheduler.next_request()
    assert first is not None
    assert scheduler.calls == {"push_many": 1, "push_new": 0, "pop_many": 1}
    rest = [scheduler.next_request() for _ in range(4)]
    assert sorted(r.url for r in [first, *rest] if r is not None) == sorted(urls)
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 5
    assert scheduler.next_request() is None and not scheduler.has_pending_requests()


def test_a_url_queued_elsewhere_meanwhile_is_dropped_when_the_batch_is_written(scheduler):
    """Another worker queues one of the held URLs first: the batch finds it seen, and the
    request is dropped then as the engine drops a refused one (counted, request_dropped)."""
    other = LeasedFrontier(scheduler.queue.server, scheduler.spider, scheduler.queue.key,
                           workers_key=scheduler.queue.workers_key)  # fmt: skip
    other.worker = "another"
    held = [Request(f"http://h.test/{i}") for i in range(3)]
    for request in held:
        assert scheduler.enqueue_request(request)
    fp = scheduler.df.fingerprinter.fingerprint(held[1])
    assert other.push_new(Request(held[1].url), fp, scheduler.df.seen) is True
    scheduler.flush_pushes()
    assert scheduler.dropped == [held[1].url]
    assert scheduler.stats.get_value("dupefilter/filtered") == 1
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 2
    assert scheduler.queue.counts() == (3, 0)  # two held ones and the other worker's


def test_a_url_known_seen_or_already_held_is_refused_at_once(scheduler):
    assert scheduler.enqueue_request(Request("http://h.test/a")) is True
    assert scheduler.enqueue_request(Request("http://h.test/a")) is False  # held already
    scheduler.flush_pushes()
    assert scheduler.enqueue_request(Request("http://h.test/a")) is False  # known seen
    assert scheduler.calls["push_many"] == 1
    assert scheduler.stats.get_value("dupefilter/filtered") == 2
    assert scheduler.queue.counts() == (1, 0)


def test_a_redirect_replacing_a_lease_is_pushed_even_when_its_url_is_known(scheduler):
    """The push acknowledges the lease it replaces: it is never refused locally."""
    assert scheduler.enqueue_request(Request("http://h.test/a"))
    assert scheduler.enqueue_request(Request("http://h.test/b"))
    popped = scheduler.next_request()
    assert popped is not None and scheduler.queue.counts() == (0, 2)  # both prefetched
    other = "http://h.test/b" if popped.url.endswith("/a") else "http://h.test/a"
    redirected = popped.replace(url=other)  # to a URL queued already: a duplicate
    assert scheduler.enqueue_request(redirected) is True
    scheduler.flush_pushes()
    assert scheduler.queue.counts() == (0, 1)  # lease acknowledged, nothing queued twice
    assert scheduler.dropped == [other]


def test_held_pushes_are_written_before_an_ack_and_before_storage_writes(scheduler):
    """The storage writer awaits ``batch_writing`` (the scheduler's ``pushes_written``): the
    page's links are in Redis before its batch is written (here on the event loop's
    connection); an acknowledgement writes what is held first (here through redis-py: no
    loop running)."""
    assert scheduler.enqueue_request(Request("http://h.test/seed"))
    page = scheduler.next_request()
    assert page is not None and scheduler.queue.counts() == (0, 1)
    lease = page.meta[LEASE_META]
    for i in range(3):  # the page's links
        assert scheduler.enqueue_request(Request(f"http://h.test/link{i}"))
    asyncio.run(scheduler.crawler.signals.send_catch_log_async(dedup_signals.batch_writing))
    assert scheduler.queue.counts() == (3, 1)  # queued before the page's batch is written
    assert scheduler.enqueue_request(Request("http://h.test/late"))
    scheduler.finished(leases=[lease])
    assert scheduler.queue.counts() == (4, 0)  # written, then the page acknowledged
    assert scheduler.calls["push_many"] == 2  # the seed's, the late one's; the links: on the loop
    assert scheduler._loop.made.calls >= 1


def test_held_pushes_are_written_soon_even_when_nothing_asks_for_the_next_request(scheduler):
    """A worker whose downloader is full asks for no request: its held pushes are written
    PUSH_HOLD_SECONDS after the first was held, so other workers see the work."""
    clock = Clock()
    scheduler.clock = clock
    for i in range(3):
        assert scheduler.enqueue_request(Request(f"http://h.test/{i}"))
    clock.advance(PUSH_HOLD_SECONDS * 0.9)
    assert scheduler.queue.counts() == (0, 0)
    clock.advance(PUSH_HOLD_SECONDS * 0.2)
    assert scheduler.queue.counts() == (3, 0) and scheduler.calls["push_many"] == 1
    assert scheduler.enqueue_request(Request("http://h.test/3"))
    scheduler.flush_pushes()  # written early: its timer goes
    assert not clock.getDelayedCalls()
    assert scheduler.calls["push_many"] == 2


def test_after_an_empty_pop_the_next_waits_unless_this_worker_queued_work(scheduler):
    """An engine asks for a request on every reactor turn; once a pop brought nothing, Redis
    is asked again only after EMPTY_POP_PAUSE_SECONDS (work another worker queued is then
    found), or at once when this worker queued requests of its own."""
    clock = Clock()
    scheduler.clock = clock
    other = LeasedFrontier(scheduler.queue.server, scheduler.spider, scheduler.queue.key,
                           workers_key=scheduler.queue.workers_key)  # fmt: skip
    other.worker = "another"
    assert scheduler.next_request() is None
    assert scheduler.next_request() is None and scheduler.next_request() is None
    assert scheduler.calls["pop_many"] == 1  # one pop: the others within the pause
    theirs = Request("http://h.test/theirs")
    assert other.push_new(theirs, scheduler.df.fingerprinter.fingerprint(theirs),
                          scheduler.df.seen) is True  # fmt: skip
    clock.advance(EMPTY_POP_PAUSE_SECONDS * 0.9)
    assert scheduler.next_request() is None and scheduler.calls["pop_many"] == 1
    clock.advance(EMPTY_POP_PAUSE_SECONDS * 0.2)
    found = scheduler.next_request()
    assert found is not None and found.url == theirs.url
    assert scheduler.calls["pop_many"] == 2
    assert scheduler.next_request() is None and scheduler.calls["pop_many"] == 3  # empty again
    assert scheduler.enqueue_request(Request("http://h.test/mine"))
    mine = scheduler.next_request()  # queued by this worker: popped without waiting
    assert mine is not None and mine.url == "http://h.test/mine"
    assert scheduler.calls["pop_many"] == 4


def test_a_full_batch_is_written_at_once_and_close_writes_the_rest(scheduler):
    for i in range(PUSH_BATCH_MAX + 3):
        assert scheduler.enqueue_request(Request(f"http://h.test/{i}"))
    assert scheduler.queue.counts() == (PUSH_BATCH_MAX, 0)
    scheduler.close("finished")
    assert scheduler.queue.counts() == (PUSH_BATCH_MAX + 3, 0)
    assert scheduler.calls["push_many"] == 2


def test_a_redis_failure_while_writing_drops_the_batch_and_closes_the_crawl(private_redis):
    """The batch is dropped as one failed push each would be (counted apart from duplicates,
    never as filtered) and the crawl closes with redis_error (the guard's policy). Nothing is
    lost: the pages that made those links are not acknowledged either (Redis is down)."""
    url, server = private_redis
    held = _scheduler(url, REDIS_RETRY_SECONDS=0, REDIS_TIMEOUT_SECONDS=1)
    for i in range(3):
        assert held.enqueue_request(Request(f"http://h.test/{i}"))
    server.kill()
    server.wait(10)
    held.flush_pushes()
    assert held.guard.down
    assert held.stats.get_value("dedup/redis_error") == 1
    assert held.calls["push_many"] == 1
    assert len(held.dropped) == 3
    assert held.stats.get_value("dedup/redis_error/requests_dropped") == 3
    assert held.stats.get_value("dupefilter/filtered") is None
    assert held.enqueue_request(Request("http://h.test/after")) is False  # not held any more
    assert held.calls["push_many"] == 1

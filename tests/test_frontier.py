"""The leased, host-partitioned frontier and worker membership, against the real Redis."""

from __future__ import annotations

import time
import uuid

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.request import request_from_dict

from crawler.backends.redis import RedisSeenSet, clear_namespace, connect
from crawler.cluster.frontier import LeasedFrontier, LeaseLost, host_key
from crawler.cluster.worker import Member
from crawler.meta import LEASE as LEASE_META

pytestmark = pytest.mark.redis


class _Spider(Spider):
    name = "web"

    def parse(self, response):  # pragma: no cover - never called here
        return None


@pytest.fixture
def cluster(redis_url):
    """``make(lease_seconds)`` -> (member, frontier) of one worker of a fresh namespace."""
    base = f"dedup:test-{uuid.uuid4().hex[:10]}"
    client = connect(redis_url)
    spider = _Spider()

    def make(lease_seconds: float = 30.0, handover_ms: int = 0) -> tuple[Member, LeasedFrontier]:
        member = Member(connect(redis_url), base, lease_seconds)
        member.beat()
        frontier = LeasedFrontier(member.client, spider, f"{base}:web:requests",
                                  workers_key=member.workers_key)  # fmt: skip
        frontier.worker = member.id
        frontier.handover_ms = handover_ms
        return member, frontier

    yield make
    clear_namespace(client, base)


def urls(requests: list[Request]) -> list[str]:
    return [r.url for r in requests]


def test_host_key_is_the_download_slot_or_host_name():
    assert host_key(Request("http://Example.COM:8080/a")) == "example.com"
    assert host_key(Request("http://a.test/", meta={"download_slot": "Pool"})) == "pool"


def test_pop_leases_by_priority_then_fifo_and_ack_ends_them(cluster):
    _, frontier = cluster()
    for i, prio in enumerate([0, 5, 0, 5]):
        frontier.push(Request(f"http://h.test/{i}", priority=prio))
    assert frontier.counts() == (4, 0)
    popped, _ = frontier.pop_many(3)
    assert urls(popped) == ["http://h.test/1", "http://h.test/3", "http://h.test/0"]
    leases = [r.meta[LEASE_META] for r in popped]
    assert len(set(leases)) == 3
    assert frontier.counts() == (1, 3)
    assert frontier.ack(leases[:2]) == 2
    assert frontier.ack(leases[:2]) == 0  # an unknown lease is ignored
    assert frontier.counts() == (1, 1)


def test_push_records_seen_and_queues_in_one_step(cluster, redis_url):
    member, frontier = cluster()
    seen = RedisSeenSet(connect(redis_url), member.base, capacity=1000)
    request = Request("http://h.test/a")
    assert frontier.push_new(request, b"\x01" * 16, seen) is True
    assert frontier.push_new(request, b"\x01" * 16, seen) is False  # seen: not queued again
    assert b"\x01" * 16 in seen
    assert frontier.counts() == (1, 0)


def test_a_redirect_of_a_leased_request_replaces_its_lease(cluster):
    _, frontier = cluster()
    frontier.push(Request("http://h.test/old"))
    (popped,), _ = frontier.pop_many(1)
    redirected = popped.replace(url="http://h.test/new")  # meta (the lease) travels along
    frontier.push_new(redirected)
    assert frontier.counts() == (1, 0)  # the old lease acknowledged, the new request queued
    (again,), _ = frontier.pop_many(1)
    assert again.url == "http://h.test/new"
    assert again.meta[LEASE_META] != popped.meta[LEASE_META]


def test_a_second_frontier_of_one_worker_never_gets_the_first_ones_last_reply(cluster):
    """A push or pop whose token is the worker's last one is answered from its memo (a retry
    of a call whose reply was lost): tokens are unique across frontiers too, so another frontier
    of the same worker id (a scheduler built again) queues and leases for itself."""
    member, first = cluster()
    second = LeasedFrontier(first.server, first.spider, first.key, workers_key=member.workers_key)
    second.worker = member.id
    for i, frontier in enumerate([first, second, first, second]):
        assert frontier.push_new(Request(f"http://h.test/{i}")) is True
    assert first.counts() == (4, 0)
    (a,), _ = first.pop_many(1)
    (b,), _ = second.pop_many(1)
    assert a.url != b.url and a.meta[LEASE_META] != b.meta[LEASE_META]
    assert first.counts() == (2, 2)


def test_each_host_belongs_to_one_worker(cluster):
    _, one = cluster()
    _, two = cluster()
    for host in ("a", "b"):
        for i in range(3):
            one.push(Request(f"http://{host}.test/{i}"))
    first, _ = one.pop_many(1)
    second, _ = two.pop_many(10)
    assert first and second
    host_one, host_two = {host_key(r) for r in first}, {host_key(r) for r in second}
    assert host_one.isdisjoint(host_two)
    more, _ = one.pop_many(10)  # the rest of its own host only
    assert {host_key(r) for r in more} == host_one and len(more) == 2
    assert two.pop_many(10)[0] == []  # its host is drained; no free host; nothing to steal


def test_clean_release_requeues_leases_and_frees_hosts(cluster):
    _, one = cluster()
    _, two = cluster()
    for i in range(4):
        one.push(Request(f"http://a.test/{i}"))
    popped, _ = one.pop_many(2)
    one.ack([popped[0].meta[LEASE_META]])
    assert one.release() == 1
    assert one.counts() == (3, 0)
    rest, _ = two.pop_many(10)
    assert sorted(urls(rest)) == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]


def test_an_expired_worker_is_fenced_and_reclaimed(cluster):
    dead, frontier = cluster(lease_seconds=0.5)
    live, other = cluster(lease_seconds=30)
    for i in range(3):
        frontier.push(Request(f"http://a.test/{i}"))
    popped, _ = frontier.pop_many(2)
    time.sleep(0.7)
    assert live.beat() == [dead.id]
    dead.beat()
    assert dead.lost  # an expired membership is never renewed
    with pytest.raises(LeaseLost):
        frontier.pop_many(1)
    done = [popped[0].meta[LEASE_META]]  # its outcome was committed before the kill
    assert other.release(dead.id, done) == 1
    assert live.beat() == []
    rest, _ = other.pop_many(10)
    assert sorted(urls(rest)) == ["http://a.test/1", "http://a.test/2"]


def test_a_stolen_host_waits_for_the_old_owners_requests_and_the_delay(cluster):
    _, busy = cluster(handover_ms=300)
    _, idle = cluster(handover_ms=300)
    busy.push(Request("http://a.test/0"))
    busy.push(Request("http://a.test/1"))
    held, _ = busy.pop_many(2)  # claims a.test
    busy.push(Request("http://b.test/0"))
    busy.push(Request("http://b.test/1"))
    got, _ = busy.pop_many(1)  # a.test has nothing queued: claims b.test too
    held += got
    busy.push(Request("http://a.test/2"))  # busy now has two hosts with work, both in flight
    assert sorted(host_key(r) for r in held) == ["a.test", "a.test", "b.test"]
    requests, stolen = idle.pop_many(4)
    assert requests == [] and stolen == "b.test"  # the host with fewest requests in flight
    assert idle.pop_many(4)[0] == []  # the old owner still fetches that host
    busy.ack([r.meta[LEASE_META] for r in held if host_key(r) == stolen])
    assert idle.pop_many(4)[0] == []  # then the handover delay
    time.sleep(0.35)
    got, _ = idle.pop_many(4)
    assert urls(got) == ["http://b.test/1"]
    assert urls(busy.pop_many(4)[0]) == ["http://a.test/2"]  # b.test is no longer its host


def test_a_stolen_host_waits_for_the_old_owners_requests_on_the_wire_only(cluster):
    """A lease whose download ended (reported with the next pop) no longer holds the host: the
    thief need not wait for the old owner's storage to commit and acknowledge it. The lease
    itself lives on until acknowledged, once, without counting the host busy twice."""
    _, busy = cluster()
    _, idle = cluster()
    for host in ("a", "b"):
        for i in range(3):
            busy.push(Request(f"http://{host}.test/{i}"))
    held, _ = busy.pop_many(4)  # claims both hosts: a.test 0-2, b.test 0
    busy.push(Request("http://a.test/3"))  # both hosts have work queued again
    requests, stolen = idle.pop_many(4)
    assert requests == [] and stolen == "b.test"  # the host with fewest requests in flight
    assert idle.pop_many(4)[0] == []  # b.test/0 is still on the wire
    answered = [r.meta[LEASE_META] for r in held if host_key(r) == "b.test"]
    assert busy.pop_many(0, fetched=answered)[0] == []  # its download ended: reported
    got, _ = idle.pop_many(4)
    assert urls(got) == ["http://b.test/1", "http://b.test/2"]
    assert busy.counts() == (1, 6)  # still leased until acknowledged: nothing is lost
    assert busy.ack(answered) == 1 and busy.ack(answered) == 0
    assert busy.release() == 3  # a.test 0-2 queued again
    assert busy.counts() == (4, 2)


def test_request_survives_the_json_round_trip_with_its_callback(cluster):
    _, frontier = cluster()
    spider = frontier.spider
    frontier.push(Request("http://h.test/x", callback=spider.parse, meta={"depth": 2},
                          priority=3))  # fmt: skip
    (popped,), _ = frontier.pop_many(1)
    assert popped.callback == spider.parse and popped.meta["depth"] == 2
    assert popped.priority == 3


def _decoded_from_redis(frontier: LeasedFrontier, lease: str) -> Request:
    """The request as any worker popping ``lease`` would decode it from its stored record."""
    from crawler.cluster import serializer

    record = frontier.server.hget(f"{frontier.key}:req", lease).decode()
    return request_from_dict(serializer.loads(record.split("\n", 2)[2]), spider=frontier.spider)


def test_a_worker_takes_back_a_request_it_queued_and_it_equals_the_decoded_one(cluster):
    """The worker that queued a plain request pops the same object back (no JSON parsing, no
    second ``Request()``), equal in every field to what a worker decoding it gets."""
    from crawler.requestqueue import request_dict

    _, frontier = cluster()
    spider = frontier.spider
    pushed = [Request(f"http://h.test/{i}", callback=spider.parse, priority=-i,
                      headers={"Referer": "http://h.test/"},
                      meta={"canonical_url": f"http://h.test/{i}", "depth": i, "w": 0.5})
              for i in range(3)]  # fmt: skip
    for request in pushed:
        frontier.push(request)
    popped, _ = frontier.pop_many(3)
    assert len(popped) == 3
    assert [id(r) for r in popped] == [id(r) for r in pushed]
    for request in popped:
        decoded = _decoded_from_redis(frontier, request.meta[LEASE_META])
        assert decoded is not request
        assert request_dict(request, spider) == {**request_dict(decoded, spider),
                                                 "meta": request.meta}  # fmt: skip
        assert {**decoded.meta, LEASE_META: request.meta[LEASE_META]} == request.meta


@pytest.mark.parametrize("meta, cookies, flags", [
    ({"path": ("a", "b")}, {}, []),  # JSON gives back a list
    ({"seen": {"x": 1}}, {}, []),  # a copy
    ({}, {"session": "1"}, []),
    ({}, {}, ["cached"]),
])  # fmt: skip
def test_a_request_that_json_would_change_is_decoded_by_its_own_worker_too(
        cluster, meta, cookies, flags):  # fmt: skip
    """Whoever pops it gets the same request: one JSON would not give back equal is not taken
    back but decoded, as another worker would."""
    _, frontier = cluster()
    pushed = Request("http://h.test/t", meta=meta, cookies=cookies, flags=flags)
    frontier.push(pushed)
    (popped,), _ = frontier.pop_many(1)
    assert popped is not pushed
    decoded = _decoded_from_redis(frontier, popped.meta[LEASE_META])
    assert popped.meta == {**decoded.meta, LEASE_META: popped.meta[LEASE_META]}
    assert (popped.cookies, popped.flags) == (decoded.cookies, decoded.flags)
    if "path" in meta:
        assert popped.meta["path"] == ["a", "b"]


def test_the_requests_a_worker_keeps_to_take_back_are_bounded(cluster, monkeypatch):
    """Past ``KEPT_MAX`` the kept requests are forgotten (a request queued here and popped by
    another worker would otherwise be held for ever); those are decoded when popped."""
    from crawler.cluster import frontier as frontier_module

    monkeypatch.setattr(frontier_module, "KEPT_MAX", 2)
    _, frontier = cluster()
    pushed = [Request(f"http://h.test/{i}") for i in range(3)]
    for request in pushed:
        frontier.push(request)
    assert len(frontier._kept) == 1  # emptied when the third came
    popped, _ = frontier.pop_many(3)
    assert urls(popped) == urls(pushed)
    assert [r is p for r, p in zip(popped, pushed, strict=True)] == [False, False, True]
    assert not frontier._kept


def test_requests_are_queued_as_scrapy_serializes_them_without_scanning_the_spider():
    """``request_dict`` is ``Request.to_dict(spider=...)`` (names of the spider's methods,
    Request subclasses, the errors for a callback that is not one of them), minus the
    ``inspect.getmembers`` scan of the spider for every request."""
    from scrapy.http import FormRequest

    from crawler.requestqueue import request_dict

    class Other:
        def parse(self, response):  # pragma: no cover - never called
            return None

    spider = _Spider()
    requests = [
        Request("http://h.test/a", callback=spider.parse, errback=spider.parse,
                meta={"canonical_url": "http://h.test/a", "depth": 3}, priority=2),
        Request("http://h.test/b"),
        FormRequest("http://h.test/f", formdata={"q": "1"}, callback=spider.parse),
    ]  # fmt: skip
    for request in requests:
        assert request_dict(request, spider) == request.to_dict(spider=spider)
    for callback in (Other().parse, lambda response: None):
        request = Request("http://h.test/d", callback=callback)
        with pytest.raises(ValueError, match="is not an instance method"):
            request.to_dict(spider=spider)
        with pytest.raises(ValueError, match="is not an instance method"):
            request_dict(request, spider)
    spider.handle = spider.parse  # one method under two names: either names it
    request = Request("http://h.test/c", callback=spider.handle)
    again = request_from_dict(request_dict(request, spider), spider=spider)
    assert again.callback.__func__ is request.callback.__func__


def test_settings_of_the_lease(redis_url):
    from crawler.cluster.worker import WorkerSettings
    from crawler.config import SettingError

    read = WorkerSettings.from_settings(
        Settings({"DISTRIBUTED_LEASE_SECONDS": 5, "DISTRIBUTED_PREFETCH": 4}))
    assert (read.lease_seconds, read.prefetch) == (5, 4)
    with pytest.raises(SettingError, match="DISTRIBUTED_LEASE_SECONDS"):
        WorkerSettings.from_settings(Settings({"DISTRIBUTED_LEASE_SECONDS": 0}))
    with pytest.raises(SettingError, match="DISTRIBUTED_PREFETCH"):
        WorkerSettings.from_settings(Settings({"DISTRIBUTED_PREFETCH": 0}))


def test_an_idle_worker_requeues_a_lease_nobody_will_acknowledge(redis_url):
    """The safety net: a lease still held once the worker and its storage are idle past the
    orphan time is queued again (counted and logged), never left to block the crawl's end."""
    from scrapy.utils.test import get_crawler

    from crawler.cluster.worker import ClusterWorker, member

    name = f"test-{uuid.uuid4().hex[:10]}"
    crawler = get_crawler(_Spider, {
        "DEDUP_BACKEND": "redis", "REDIS_URL": redis_url, "DEDUP_NAMESPACE": name,
        "SCHEDULER_QUEUE_KEY": f"dedup:{name}:%(spider)s:requests"})  # fmt: skip
    crawler.spider = _Spider()
    crawler.stats.open_spider()
    worker = ClusterWorker(crawler, member(crawler))
    try:
        frontier = worker.frontier()
        frontier.push(Request("http://h.test/a"))
        assert len(frontier.pop_many(1)[0]) == 1
        worker.orphan_after = 0.0
        worker._check_orphans()  # first seen idle
        time.sleep(0.01)
        worker._check_orphans()
        assert frontier.counts() == (1, 0)
        assert crawler.stats.get_value("dedup/shared/leases_orphaned") == 1
    finally:
        clear_namespace(connect(redis_url), f"dedup:{name}")


def test_a_worker_exits_without_collecting_the_garbage_of_its_libraries(redis_url):
    """Once the engine stopped the worker freezes the objects alive for the cyclic GC: the
    process exits next, and the interpreter's collections at exit were most of its close lag."""
    import gc

    from scrapy import signals
    from scrapy.utils.test import get_crawler

    from crawler.cluster.worker import ClusterWorker

    name = f"test-{uuid.uuid4().hex[:10]}"
    crawler = get_crawler(_Spider, {
        "DEDUP_BACKEND": "redis", "REDIS_URL": redis_url, "DEDUP_NAMESPACE": name,
        "SCHEDULER": "crawler.cluster.scheduler.SharedScheduler",
        "EXTENSIONS": {"crawler.cluster.worker.ClusterWorker": 600},
        "SCHEDULER_QUEUE_KEY": f"dedup:{name}:%(spider)s:requests"})  # fmt: skip
    worker = ClusterWorker.from_crawler(crawler)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        crawler.signals.send_catch_log(signals.engine_stopped)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        worker._loop.stop()
        clear_namespace(connect(redis_url), f"dedup:{name}")


def test_the_shared_scheduler_without_the_cluster_extension_is_refused():
    from crawler.cluster.worker import WorkerSettings
    from crawler.config import SettingError

    shared = {"SCHEDULER": "crawler.cluster.scheduler.SharedScheduler"}
    extension = "crawler.cluster.worker.ClusterWorker"
    WorkerSettings.from_settings(Settings({**shared, "EXTENSIONS": {extension: 600}}))
    with pytest.raises(SettingError, match=r"EXTENSIONS.*ClusterWorker enabled"):
        WorkerSettings.from_settings(Settings({**shared, "EXTENSIONS": {extension: None}}))
    with pytest.raises(SettingError, match="ClusterWorker"):
        WorkerSettings.from_settings(Settings(shared))


def test_a_lost_server_is_the_one_named_error_for_membership_and_frontier():
    """redis-py's ConnectionError is not an OSError: membership renewal and the frontier's
    counters used to let it through as a traceback instead of RedisBackendError."""
    import socket

    import redis

    from crawler.backends.redis import RedisBackendError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1,
                         retry=Retry(NoBackoff(), 0))  # fmt: skip
    url = f"redis://:secret@127.0.0.1:{port}/0"
    member = Member(client, "dedup:gone", 30.0, url=url)
    frontier = LeasedFrontier(client, None, "dedup:gone:web:requests", url=url)
    for call in (member.beat, frontier.counts, lambda: frontier.held_by("w")):
        with pytest.raises(RedisBackendError, match=r"Redis at redis://:\*\*\*@127\.0\.0\.1"):
            call()


def test_a_page_lost_to_a_storage_outage_goes_back_to_the_queue_and_a_bug_does_not(redis_url):
    """An item that failed for want of storage (an Undecided page, or a StorageError that
    reached Scrapy) is never acknowledged as done: its lease is queued again at once. A page
    lost to a bug is acknowledged and counted, never retried forever."""
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler
    from twisted.python.failure import Failure

    from crawler.cluster.scheduler import SharedScheduler
    from crawler.exceptions import Undecided
    from crawler.storage import StorageError

    name = f"test-{uuid.uuid4().hex[:10]}"
    crawler = get_crawler(_Spider, {
        "DEDUP_BACKEND": "redis", "REDIS_URL": redis_url, "DEDUP_NAMESPACE": name,
        "SCHEDULER": "crawler.cluster.scheduler.SharedScheduler",
        "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter",
        "SCHEDULER_QUEUE_KEY": f"dedup:{name}:%(spider)s:requests"})  # fmt: skip
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    crawler.stats.open_spider()
    scheduler = SharedScheduler.from_crawler(crawler)
    scheduler.open(spider)
    try:
        for path in ("a", "b", "c"):
            assert scheduler.enqueue_request(Request(f"http://h.test/{path}"))
        popped = [scheduler.next_request() for _ in range(3)]
        assert all(r is not None for r in popped)
        assert scheduler.queue.counts() == (0, 3)

        def response(request: Request) -> HtmlResponse:
            return HtmlResponse(request.url, body=b"<html></html>", request=request)

        outage = Failure(StorageError("reading a kept page failed", transient=True))
        scheduler.item_error({}, response(popped[0]), spider, outage)
        assert scheduler.queue.counts() == (1, 2)  # back in the queue
        scheduler.item_dropped({}, response(popped[1]), Undecided(popped[1].url, "down"))
        assert scheduler.queue.counts() == (2, 1)
        scheduler.item_error({}, response(popped[2]), spider, Failure(RuntimeError("a bug")))
        assert scheduler.queue.counts() == (2, 0)  # acknowledged
        assert crawler.stats.get_value("dedup/shared/leases_requeued") == 2
        assert crawler.stats.get_value("dedup/shared/leases_failed") == 1
        again = sorted(r.url for r in scheduler.queue.pop_many(5)[0])
        assert again == sorted(r.url for r in popped[:2])
    finally:
        clear_namespace(connect(redis_url), f"dedup:{name}")

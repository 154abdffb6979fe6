"""BloomDupeFilter with a real crawler, Scrapy's real Scheduler (and our ResumingScheduler on it)
and real Requests; its Redis-outage guard."""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from crawler import meta
from crawler import signals as dedup_signals
from crawler.backends.bloom import LocalSeenSet
from crawler.dupefilter import BloomDupeFilter, GuardedSeenSet
from crawler.scheduler import ResumingScheduler
from crawler.sitegen import Page, Site
from crawler.sitegen.server import SiteServer
from crawler.sitegen.text import TextMaker, load_words
from tests.conftest import run_crawl

BASE = {
    "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter",
    "BLOOM_CAPACITY": 1000,
    "BLOOM_ERROR_RATE": 0.001,
    "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",  # no engine needed
}


def open_scheduler(settings: dict | None = None, scheduler_cls: type[Scheduler] = Scheduler,
                   ) -> tuple[Scheduler, BloomDupeFilter, object]:
    crawler = get_crawler(Spider, {**BASE, **(settings or {})})
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = scheduler_cls.from_crawler(crawler)
    scheduler.open(crawler.spider)
    assert isinstance(scheduler.df, BloomDupeFilter)
    return scheduler, scheduler.df, crawler


def drain(scheduler: Scheduler) -> list[str]:
    urls = []
    while (request := scheduler.next_request()) is not None:
        urls.append(request.url)
    return urls


def test_duplicates_are_filtered_and_counted(caplog) -> None:
    scheduler, _, crawler = open_scheduler()
    with caplog.at_level(logging.DEBUG, logger="crawler.dupefilter"):
        for url in ["http://a/1", "http://a/2", "http://a/1", "http://a/1", "http://a/2"]:
            scheduler.enqueue_request(Request(url))
        assert scheduler.enqueue_request(Request("http://a/1", dont_filter=True))
    assert sorted(drain(scheduler)) == ["http://a/1", "http://a/1", "http://a/2"]
    assert crawler.stats.get_value("dupefilter/filtered") == 3
    messages = [r.getMessage() for r in caplog.records if "Filtered duplicate" in r.getMessage()]
    assert len(messages) == 1 and "no more duplicates will be shown" in messages[0]
    scheduler.close("finished")


def test_debug_logs_every_duplicate_with_its_referer(caplog) -> None:
    scheduler, _, _ = open_scheduler({"DUPEFILTER_DEBUG": True})
    with caplog.at_level(logging.DEBUG, logger="crawler.dupefilter"):
        for _ in range(4):
            scheduler.enqueue_request(Request("http://a/x", headers={"Referer": "http://a/"}))
    messages = [r.getMessage() for r in caplog.records if "Filtered duplicate" in r.getMessage()]
    assert len(messages) == 3 and all("(referer: http://a/)" in m for m in messages)


def test_stats_describe_the_filter_and_the_start_line_says_its_size(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        scheduler, df, crawler = open_scheduler()
    assert "Bloom filter for 1,000 URLs at p=0.001: 1.8 KiB, 10 hashes" in caplog.text
    for i in range(500):
        scheduler.enqueue_request(Request(f"http://a/{i}"))
    scheduler.close("finished")
    stats = crawler.stats.get_stats()
    assert stats["dedup/bloom/capacity"] == 1000
    assert stats["dedup/bloom/hashes"] == 10
    assert stats["dedup/bloom/bits"] == df.seen.bits
    assert 0.2 < stats["dedup/bloom/fill_ratio"] < 0.5
    assert 0 <= stats["dedup/bloom/expected_false_positives"] < 1
    assert stats["dedup/bloom/urls"] == 500


def test_seen_fingerprint_is_read_only() -> None:
    scheduler, df, crawler = open_scheduler()
    request = Request("http://a/page")
    fp = crawler.request_fingerprinter.fingerprint(request)
    assert not df.seen_fingerprint(fp)
    assert not df.seen_fingerprint(fp)  # asking twice records nothing
    assert len(df.seen) == 0
    assert scheduler.enqueue_request(request)
    assert df.seen_fingerprint(fp)


def test_seen_fingerprints_answer_each_in_page_order() -> None:
    scheduler, df, crawler = open_scheduler()
    requests = [Request(f"http://a/{i}") for i in range(4)]
    fps = [crawler.request_fingerprinter.fingerprint(r) for r in requests]
    for request in requests[1::2]:
        assert scheduler.enqueue_request(request)
    assert df.seen_fingerprints(fps + fps[:1]) == [False, True, False, True, False]
    assert len(df.seen) == 2  # read-only


@pytest.mark.redis
def test_a_shared_seen_set_is_asked_once_per_batch_and_never_about_known_seen(redis_url):
    """Each call asks Redis once, about the fingerprints this worker does not know to be seen;
    what it learnt was seen (answers, its own enqueues) is not asked again: a Bloom filter never
    forgets a key, so the skip stays exact."""
    import uuid

    from crawler.backends.redis import RedisSeenSet, clear_namespace, connect
    from crawler.cluster.frontier import LeasedFrontier

    base = f"dedup:test-{uuid.uuid4().hex[:12]}"
    seen = RedisSeenSet(connect(redis_url), base, capacity=1000)
    asked: list[list[bytes]] = []
    many = seen.contains_many
    seen.contains_many = lambda fps: asked.append(list(fps)) or many(fps)  # type: ignore[method-assign]
    df = BloomDupeFilter(seen)
    a, b, c = (bytes([i]) * 16 for i in range(1, 4))
    try:
        assert df.seen_fingerprints([a, b, a]) == [False, False, False]
        assert asked == [[a, b]]
        RedisSeenSet(connect(redis_url), base, capacity=1000).add(a)  # another worker
        assert df.seen_fingerprints([a, b]) == [True, False]
        assert df.seen_fingerprints([a]) == [True] and len(asked) == 2  # known: not asked
        frontier = LeasedFrontier(seen.client, None, f"{base}:web:requests")
        request = Request("http://h.test/c")
        fp = df.fingerprinter.fingerprint(request)  # the shared frontier's push as test-and-set
        assert not df.record(request, lambda fp: not frontier.push_new(request, fp, seen))
        assert df.seen_fingerprints([fp, a]) == [True, True] and len(asked) == 2
        assert df.seen_fingerprint(c) is False and asked[-1] == [c]
    finally:
        clear_namespace(connect(redis_url), base)


@pytest.mark.redis
@pytest.mark.parametrize("loop_works", [True, False], ids=["on the loop", "loop refused"])
def test_a_shared_seen_sets_question_is_awaited_on_the_event_loop(redis_url, loop_works):
    """``seen_fingerprints_soon``: the answers at once when no question is needed (every
    fingerprint known to be seen), else an awaitable of them whose question goes on the
    event loop's own connection (redis-py not called: the reactor is not held), or through
    redis-py when that connection is refused; the answers are ``seen_fingerprints``'."""
    import asyncio
    import uuid

    from crawler.backends.redis import RedisSeenSet, clear_namespace, connect
    from crawler.backends.redis.aio import LoopRedis
    from tests.conftest import free_port

    base = f"dedup:test-{uuid.uuid4().hex[:12]}"
    seen = RedisSeenSet(connect(redis_url), base, capacity=1000)
    if not loop_works:
        seen._loop.made = LoopRedis("127.0.0.1", free_port())
    asked: list[list[bytes]] = []  # questions through redis-py
    many = seen.contains_many
    seen.contains_many = lambda fps: asked.append(list(fps)) or many(fps)  # type: ignore[method-assign]
    df = BloomDupeFilter(seen)
    a, b, c = (bytes([i]) * 16 for i in range(1, 4))
    RedisSeenSet(connect(redis_url), base, capacity=1000).add(a)  # another worker's

    async def run() -> tuple[object, list[bool], object]:
        pending = df.seen_fingerprints_soon([a, b, a, c])
        answers = await pending  # type: ignore[misc]
        known = df.seen_fingerprints_soon([a, a])  # learnt: no question
        return pending, answers, known

    try:
        pending, answers, known = asyncio.run(run())
        loop_client = seen._loop.made
        again = BloomDupeFilter(RedisSeenSet(connect(redis_url), base, capacity=1000))
        assert again.seen_fingerprints([a, b, a, c]) == answers  # what redis-py answers
    finally:
        seen.close()
        clear_namespace(connect(redis_url), base)
    assert not isinstance(pending, list)  # a question: awaited
    assert answers == [True, False, True, False]
    assert known == [True, True]
    assert isinstance(loop_client, LoopRedis)
    if loop_works:
        assert asked == [] and (loop_client.calls, loop_client.failures) == (1, 0)
    else:
        assert asked == [[a, b, c]] and loop_client.failures == 1


def test_a_local_seen_set_answers_soon_at_once() -> None:
    """A local seen set never makes the spider await: ``seen_fingerprints_soon`` answers
    with the list ``seen_fingerprints`` answers."""
    df = BloomDupeFilter(LocalSeenSet(capacity=1000))
    fps = [bytes([i]) * 16 for i in range(1, 4)]
    df.seen.add(fps[1])
    assert df.seen_fingerprints_soon(fps) == df.seen_fingerprints(fps) == [False, True, False]


def test_stop_policy_stops_once_at_capacity() -> None:
    scheduler, df, crawler = open_scheduler({"BLOOM_CAPACITY": 50, "BLOOM_ON_FULL": "stop"})
    for i in range(49):
        scheduler.enqueue_request(Request(f"http://a/{i}"))
    assert not df.stopping
    for i in range(49, 80):
        scheduler.enqueue_request(Request(f"http://a/{i}"))  # never raises past capacity
    assert df.stopping
    assert crawler.stats.get_value("dedup/bloom/full") == 1
    assert len(drain(scheduler)) == 80  # it stops the crawl, it does not drop requests


def test_grow_policy_keeps_filtering_past_capacity() -> None:
    scheduler, df, crawler = open_scheduler({"BLOOM_CAPACITY": 50})
    for i in range(400):
        scheduler.enqueue_request(Request(f"http://a/{i}"))
    for i in range(400):
        scheduler.enqueue_request(Request(f"http://a/{i}"))
    assert not df.stopping and len(df.seen.layers) > 1
    assert crawler.stats.get_value("dupefilter/filtered") >= 400


def test_verify_setting_builds_an_exact_set() -> None:
    scheduler, _, crawler = open_scheduler({"BLOOM_CAPACITY": 10, "BLOOM_ERROR_RATE": 0.3,
                                            "BLOOM_VERIFY": True, "BLOOM_ON_FULL": "stop"})
    urls = [f"http://a/{i}" for i in range(300)]
    assert all(scheduler.enqueue_request(Request(u)) for u in urls)  # no new URL dropped
    scheduler.close("finished")
    assert crawler.stats.get_value("dedup/bloom/false_positives_avoided") > 0


def test_jobdir_resume_through_the_scheduler(tmp_path) -> None:
    settings = {"JOBDIR": str(tmp_path), "STORAGE_URL": f"sqlite:///{tmp_path}/crawl.db"}
    scheduler, _, crawler = open_scheduler(settings, ResumingScheduler)
    requests = [Request(f"http://a/{i}", meta={"canonical_url": f"http://a/{i}", "depth": 2})
                for i in range(10)]
    for request in requests:
        scheduler.enqueue_request(request)
    done = [crawler.request_fingerprinter.fingerprint(r).hex() for r in requests[:6]]
    crawler.signals.send_catch_log(dedup_signals.batch_committed, fingerprints=done[:4])
    crawler.signals.send_catch_log(dedup_signals.request_finished, fingerprints=done[4:])
    drain(scheduler)
    scheduler.close("shutdown")
    assert (tmp_path / "requests.queue").exists()

    scheduler, _, crawler = open_scheduler(settings, ResumingScheduler)
    assert not (tmp_path / "requests.queue" / "active.json").exists()  # Scrapy's queue dropped
    assert (tmp_path / "requests.queue").is_dir()  # a fresh one for this run
    resumed: list[Request] = []
    queued: list[bool] = []

    def crawl(request: Request) -> None:  # the engine's crawl: into the scheduler
        resumed.append(request)
        queued.append(scheduler.enqueue_request(request))

    crawler.engine = SimpleNamespace(crawl=crawl)
    crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert sorted(r.url for r in resumed) == sorted(r.url for r in requests[6:])
    assert all(r.meta[meta.RESUMED] and r.meta["depth"] == 2
               and r.meta[meta.CANONICAL_URL] == r.url for r in resumed)
    assert all(queued) and len(queued) == 4  # let through once
    assert crawler.stats.get_value("dedup/jobdir/resumed") == 4
    assert not any(scheduler.enqueue_request(r.replace()) for r in resumed)  # then filtered
    assert not scheduler.enqueue_request(requests[0])  # finished pages stay seen
    assert sorted(drain(scheduler)) == sorted(r.url for r in requests[6:])


def test_scrapy_stock_scheduler_with_a_journal_owing_requests_refuses_to_lose_them(
    tmp_path, caplog
) -> None:
    """A project that keeps Scrapy's scheduler with our dupefilter: nothing would re-schedule
    the journal's unfinished requests (they stay seen, never fetched), so the crawl stops as
    it opens (one ERROR line naming the setting, ``jobdir_error``) and the journal keeps them:
    the next run with ResumingScheduler fetches them all."""
    settings = {"JOBDIR": str(tmp_path)}
    scheduler, _, _ = open_scheduler(settings)
    for i in range(3):
        assert scheduler.enqueue_request(Request(f"http://a/{i}"))
    scheduler.close("shutdown")  # a kill would lose Scrapy's queue; the journal has them
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        scheduler, _, crawler = open_scheduler(settings)
        closed: list[str] = []  # the engine's close_spider_async, called with the reason
        crawler.engine = SimpleNamespace(close_spider_async=lambda reason: closed.append(reason))
        crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR and r.name == "crawler.dupefilter"]
    assert len(errors) == 1 and "3 requests seen but not finished" in errors[0]
    assert 'SCHEDULER = "crawler.scheduler.ResumingScheduler"' in errors[0]
    assert closed == ["jobdir_error"]
    assert crawler.stats.get_value("dedup/close_reason") == "jobdir_error"
    scheduler.close("jobdir_error")

    again, _, crawler = open_scheduler(settings, ResumingScheduler)  # kept: signals hold it weakly
    resumed: list[Request] = []
    crawler.engine = SimpleNamespace(crawl=resumed.append)
    crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert sorted(r.url for r in resumed) == [f"http://a/{i}" for i in range(3)]
    again.close("finished")


def test_a_fresh_jobdir_with_scrapys_scheduler_runs(tmp_path, caplog) -> None:
    """Nothing owed: Scrapy's scheduler with our dupefilter crawls (no refusal)."""
    scheduler, _, crawler = open_scheduler({"JOBDIR": str(tmp_path)})
    crawler.engine = SimpleNamespace()
    with caplog.at_level(logging.WARNING):
        crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert not [r for r in caplog.records
                if r.levelno >= logging.WARNING and r.name.startswith("crawler")]
    assert crawler.stats.get_value("dedup/close_reason") is None
    assert scheduler.enqueue_request(Request("http://a/1"))


def test_resume_when_storage_holds_every_pending_page_says_so(tmp_path, caplog) -> None:
    """A kill between the storage commit and ``batch_committed``: storage holds every page the
    journal owes. None is fetched again, and the resume still says how many it re-scheduled
    (0) and sets ``dedup/jobdir/resumed`` (found by the review: the early return lost both)."""
    from crawler.items import PageItem
    from crawler.pipelines.storage import document_row
    from crawler.storage import Store

    db = f"sqlite:///{tmp_path}/crawl.db"
    settings = {"JOBDIR": str(tmp_path / "job"), "STORAGE_URL": db}
    scheduler, _, _ = open_scheduler(settings, ResumingScheduler)
    urls = [f"http://a/{i}" for i in range(3)]
    for url in urls:
        assert scheduler.enqueue_request(Request(url, meta={meta.CANONICAL_URL: url}))
    scheduler.close("shutdown")
    pages = [PageItem(url=u, status=200, content_type="text/html", title="", text=f"page {u}",
                      html="", depth=0, referer=None, fetched_at="", canonical_url=u)
             for u in urls]  # fmt: skip
    with Store(db) as store:
        store.upsert_documents([document_row(page, None) for page in pages])

    scheduler, _, crawler = open_scheduler(settings, ResumingScheduler)
    crawled: list[Request] = []
    crawler.engine = SimpleNamespace(crawl=crawled.append)
    with caplog.at_level(logging.INFO):
        crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert crawled == []
    assert crawler.stats.get_value("dedup/jobdir/already_stored") == 3
    assert any("re-scheduled 0 requests" in r.getMessage() for r in caplog.records)
    assert crawler.stats.get_value("dedup/jobdir/resumed") == 0


def test_resuming_scheduler_without_our_journal_is_scrapys(tmp_path) -> None:
    """Scrapy's own dupefilter (no journal): Scrapy's requests.queue is kept and resumed."""
    settings = {"JOBDIR": str(tmp_path), "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter"}
    crawler = get_crawler(Spider, {**BASE, **settings})
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = ResumingScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    assert scheduler.enqueue_request(Request("http://a/1"))
    scheduler.close("shutdown")
    again = ResumingScheduler.from_crawler(crawler)
    again.open(crawler.spider)
    again.resume(crawler.spider)  # nothing to resume from a journal: no engine call
    assert drain(again) == ["http://a/1"]


def test_plain_constructor_without_a_crawler() -> None:
    from scrapy.utils.request import RequestFingerprinter

    df = BloomDupeFilter(LocalSeenSet(100, 0.01), RequestFingerprinter())
    assert not df.request_seen(Request("http://a/"))
    assert df.request_seen(Request("http://a/"))
    df.open()
    df.close("finished")


@pytest.mark.parametrize("name, value", [("JOBDIR_SNAPSHOT_RECORDS", 0),
                                         ("BLOOM_ON_FULL", "sometimes")])
def test_bad_settings_stop_the_build(tmp_path, name, value) -> None:
    from crawler.config import SettingError

    with pytest.raises(SettingError, match=name):
        open_scheduler({"JOBDIR": str(tmp_path), name: value})


@pytest.mark.redis
def test_scrapy_redis_scheduler_builds_it_with_from_spider(redis_url, caplog) -> None:
    import uuid
    import warnings

    from crawler.cluster.scheduler import SharedScheduler as RedisScheduler

    key = f"test-dupefilter-{uuid.uuid4().hex}"
    crawler = get_crawler(Spider, {
        **BASE, "REDIS_URL": redis_url, "SCHEDULER_SERIALIZER": "crawler.cluster.serializer",
        "SCHEDULER_QUEUE_KEY": key + ":%(spider)s:requests",
    })
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        scheduler.open(crawler.spider)
    assert isinstance(scheduler.df, BloomDupeFilter)
    assert "Bloom filter for 1,000 URLs" in caplog.text  # open() ran although scrapy-redis skips it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # scrapy-redis's own passes the deprecated spider=
            assert scheduler.enqueue_request(Request("http://a/1"))
            assert not scheduler.enqueue_request(Request("http://a/1"))
            joining = RedisScheduler.from_crawler(crawler)  # a second worker, same queue
            with caplog.at_level(logging.INFO, logger="crawler.cluster.scheduler"):
                joining.open(crawler.spider)  # scrapy-redis's own calls Spider.log() here
            assert "Joining a shared crawl: 1 request(s) queued, 0 leased" in caplog.text
            assert scheduler.next_request().url == "http://a/1"
        assert crawler.stats.get_value("dupefilter/filtered") == 1
        assert crawler.stats.get_value("scheduler/enqueued/redis") == 1
        assert crawler.stats.get_value("scheduler/dequeued/redis") == 1
    finally:
        scheduler.close("finished")  # the shared queue is never flushed by a worker
        from crawler.backends.redis import clear_namespace, connect, namespace

        clear_namespace(connect(redis_url), namespace(crawler.settings))  # the membership
        clear_namespace(connect(redis_url), key)  # the queue


def test_project_fingerprinter_makes_spellings_one_request() -> None:
    scheduler, _, crawler = open_scheduler(
        {"REQUEST_FINGERPRINTER_CLASS": "crawler.urls.fingerprint.CanonicalRequestFingerprinter"})
    spellings = ["http://Example.com:80/a/./b?y=2&x=1", "http://example.com/a/b?x=1&y=2#top",
                 "http://EXAMPLE.com/a/%62?x=1&y=2&utm_source=mail", "http://example.com/a/b?y=2&x=1"]
    results = [scheduler.enqueue_request(Request(url)) for url in spellings]
    assert results == [True, False, False, False]
    assert crawler.stats.get_value("dupefilter/filtered") == 3
    assert scheduler.enqueue_request(Request("http://example.com/a/b?x=1&y=3"))


# --- a Redis outage in a real crawl -----------------------------------------------------------

def _gated_site(gate_links: bool) -> tuple[Site, threading.Event, threading.Event]:
    """``/`` links to 12 distinct pages and ``/gate``, whose answer waits for ``release``."""
    topics = load_words().topics
    pages: dict[str, Page] = {}

    def body(title: str, seed: int, links: list[str]) -> bytes:
        maker = TextMaker(random.Random(seed))
        text = " ".join(maker.paragraph(topics[seed % len(topics)], 5) for _ in range(2))
        anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
        return (f"<html><head><title>{title}</title></head><body><p>{text}</p>{anchors}"
                "</body></html>").encode()

    pages["/"] = Page(body("home", 100, [f"/p/{i}" for i in range(12)] + ["/gate"]))
    for i in range(12):
        pages[f"/p/{i}"] = Page(body(f"page {i}", i, []))
    gate = Page(body("gate", 50, [f"/q/{i}" for i in range(4)] if gate_links else []))
    asked, release = threading.Event(), threading.Event()

    def fallback(key: str) -> Page | None:
        if key != "/gate":
            return None
        asked.set()
        release.wait(60)
        return gate

    return Site(name="gated", pages=pages, fallback=fallback), asked, release


def _stored(db: Path) -> dict[str, tuple]:
    if not db.exists():
        return {}
    try:
        with closing(sqlite3.connect(db)) as conn:
            return {row[0]: row[1:] for row in conn.execute(
                "SELECT url, title, text, content_hash, simhash FROM documents")}
    except sqlite3.Error:  # not created yet
        return {}


@pytest.mark.redis
@pytest.mark.parametrize("gate_links", [True, False], ids=["links-hit-dupefilter", "no-links"])
def test_a_redis_outage_mid_crawl_stops_it_cleanly(private_redis, tmp_path, gate_links) -> None:
    # The crawl stores 13 pages, then Redis dies while /gate is being answered: its links meet
    # the dupefilter (or, without links, its duplicate check meets the content index).
    url, redis_proc = private_redis
    site, asked, release = _gated_site(gate_links)
    workdir = tmp_path / "run"
    settings = {"DEDUP_BACKEND": "redis", "REDIS_URL": url, "ROBOTSTXT_OBEY": False,
                "STORAGE_BATCH_SECONDS": 0.2, "REDIS_RETRY_SECONDS": 1}  # then the outage
    with SiteServer(site) as server, ThreadPoolExecutor(1) as pool:
        future = pool.submit(run_crawl, workdir, urls=[server.url("/")], settings=settings)
        try:
            for _ in range(600):  # up to ~60 s: /gate asked and the 13 other pages stored
                if asked.is_set() and len(_stored(workdir / "crawl.db")) == 13:
                    break
                time.sleep(0.1)
            before = _stored(workdir / "crawl.db")
            redis_proc.kill()
            redis_proc.wait(10)
        finally:
            release.set()
        run = future.result(timeout=120)
    assert set(before) == {server.url("/")} | {server.url(f"/p/{i}") for i in range(12)}
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "redis_error"
    assert run.stats["dedup/redis_error"] == 1
    assert "Traceback" not in run.stderr, run.stderr[-5000:]
    errors = [line for line in run.stderr.splitlines() if "] ERROR: " in line]
    assert len(errors) == 1, errors
    assert f"Redis at {url} is unavailable" in errors[0] and "check that redis-server" in errors[0]
    assert "crawl stopped early: redis_error" in run.stderr
    after = _stored(run.db_path)
    assert after == before  # every stored page intact; /gate was not checked, so not stored
    assert all(title and text and content_hash for title, text, content_hash, _ in after.values())
    assert run.stats["dedup/redis_error/unchecked"] == 1
    assert not any(hit.startswith("/q/") for hit in server.hits)  # nothing fetched after


def _one_request_then_redis_dies(private_redis) -> tuple[str, Scheduler, BloomDupeFilter, object]:
    """A scheduler on the private Redis that took one request; then the server is killed."""
    url, redis_proc = private_redis
    scheduler, df, crawler = open_scheduler({"DEDUP_BACKEND": "redis", "REDIS_URL": url,
                                             "REDIS_RETRY_SECONDS": 0})  # no retry: at once
    assert scheduler.enqueue_request(Request("http://a.test/1"))
    redis_proc.kill()
    redis_proc.wait(10)
    return url, scheduler, df, crawler


@pytest.mark.redis
def test_after_a_redis_failure_requests_are_dropped_without_asking_again(private_redis,
                                                                         caplog) -> None:
    url, scheduler, df, crawler = _one_request_then_redis_dies(private_redis)
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        for i in range(2, 5):
            assert not scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        assert df.seen_fingerprint(b"\x00" * 16)  # the spider skips every link from now on
        df.update_stats()
        df.close("redis_error")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and f"Redis at {url} is unavailable" in errors[0].getMessage()
    assert df.guard.down
    stats = crawler.stats
    assert stats.get_value("dedup/redis_error") == 1
    assert stats.get_value("dedup/redis_error/requests_dropped") == 3
    assert stats.get_value("dupefilter/filtered") is None  # not duplicates
    assert drain(scheduler) == ["http://a.test/1"]


@pytest.mark.redis
def test_redis_gone_only_at_close_is_a_warning(private_redis, caplog) -> None:
    _, _, df, crawler = _one_request_then_redis_dies(private_redis)
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        df.close("finished")
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]
    assert "final dedup/bloom stats" in caplog.text
    assert crawler.stats.get_value("dedup/redis_error") is None


# --- the Redis-outage guard -------------------------------------------------------------------

def _gone_seen_set() -> LocalSeenSet:
    """A seen set whose server went away: each call raises what a Redis seen set raises."""
    seen = LocalSeenSet(capacity=10)

    def fail(*_: object) -> None:
        raise redis.ConnectionError("Connection refused")

    seen.add = seen.contains_many = seen.figures = seen.close = fail  # type: ignore[method-assign]
    seen.url = "redis://:secret@gone.test:6379/0"  # type: ignore[misc]
    return seen


def test_the_guard_turns_the_first_redis_failure_into_the_outage_policy(caplog) -> None:
    crawler = get_crawler(Spider)
    crawler.stats.open_spider()
    guard = GuardedSeenSet(_gone_seen_set(), crawler)
    never = lambda: pytest.fail("Redis asked again after it failed")  # noqa: E731
    with caplog.at_level(logging.DEBUG):
        assert guard.add(b"k" * 16)  # "seen": the request is dropped
        assert guard.down
        assert guard.add(b"j" * 16) and guard.recorded(never)  # not asked again, dropped
        assert guard.contains_many([b"a" * 16, b"b" * 16]) == [True, True]
        assert guard.figures() == {}
        assert guard.attempt(never, "fallback") == "fallback"
        guard.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "gone.test" in errors[0] and "secret" not in errors[0]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert crawler.stats.get_value("dedup/redis_error") == 1
    assert crawler.stats.get_value("dedup/redis_error/requests_dropped") == 3


def test_a_frontier_failure_after_the_dupefilter_closed_only_warns(caplog) -> None:
    """A last frontier call (an ack at close) failing once the dupefilter closed: the crawl
    ended for its own reason; no redis_error (as before the guard existed; found by the
    review)."""
    crawler = get_crawler(Spider)
    crawler.stats.open_spider()
    guard = GuardedSeenSet(_gone_seen_set(), crawler)
    guard.close()

    def ack() -> int:
        raise redis.ConnectionError("gone")

    with caplog.at_level(logging.INFO):
        assert guard.attempt(ack, 0) == 0
    assert guard.down
    assert crawler.stats.get_value("dedup/redis_error") is None
    assert crawler.stats.get_value("dedup/close_reason") is None
    assert [r.levelname for r in caplog.records if r.name.startswith("crawler")] == ["WARNING"]


def test_the_guard_without_a_crawler_raises_and_a_failure_at_close_only_warns(caplog) -> None:
    with pytest.raises(redis.ConnectionError):
        GuardedSeenSet(_gone_seen_set()).add(b"k" * 16)
    crawler = get_crawler(Spider)
    crawler.stats.open_spider()
    guard = GuardedSeenSet(_gone_seen_set(), crawler)
    with caplog.at_level(logging.INFO):
        assert guard.figures(final=True) == {}
    assert guard.down
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]
    assert "final dedup/bloom stats" in caplog.text
    assert crawler.stats.get_value("dedup/redis_error") is None


"""BloomDupeFilter with a real crawler, Scrapy's real Scheduler and real Requests."""

from __future__ import annotations

import logging

import pytest
from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from crawler import signals as dedup_signals
from crawler.bloom import LocalSeenSet
from crawler.dupefilter import RESUME_META, BloomDupeFilter

BASE = {
    "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter",
    "BLOOM_CAPACITY": 1000,
    "BLOOM_ERROR_RATE": 0.001,
    "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",  # no engine needed
}


def open_scheduler(settings: dict | None = None) -> tuple[Scheduler, BloomDupeFilter, object]:
    crawler = get_crawler(Spider, {**BASE, **(settings or {})})
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = Scheduler.from_crawler(crawler)
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
    settings = {"JOBDIR": str(tmp_path)}
    scheduler, df, crawler = open_scheduler(settings)
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

    scheduler, df, crawler = open_scheduler(settings)
    assert not (tmp_path / "requests.queue" / "active.json").exists()  # Scrapy's queue dropped
    assert sorted(df._resume) == sorted(
        crawler.request_fingerprinter.fingerprint(r) for r in requests[6:])
    resumed = [Request(rec.url, meta={"canonical_url": rec.canonical_url, "depth": rec.depth,
                                      RESUME_META: True}) for rec in df._resume.values()]
    assert all(scheduler.enqueue_request(r) for r in resumed)  # let through once
    assert not any(scheduler.enqueue_request(r.replace()) for r in resumed)  # then filtered
    assert not scheduler.enqueue_request(requests[0])  # finished pages stay seen
    assert sorted(drain(scheduler)) == sorted(r.url for r in requests[6:])


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

    from scrapy_redis.scheduler import Scheduler as RedisScheduler

    key = f"test-dupefilter-{uuid.uuid4().hex}"
    crawler = get_crawler(Spider, {
        **BASE, "REDIS_URL": redis_url, "SCHEDULER_SERIALIZER": "crawler.backends.serializer",
        "SCHEDULER_QUEUE_KEY": key + ":%(spider)s:requests", "SCHEDULER_PERSIST": False,
    })
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    with caplog.at_level(logging.INFO, logger="crawler.dupefilter"):
        scheduler.open(crawler.spider)
    assert isinstance(scheduler.df, BloomDupeFilter)
    assert "Bloom filter for 1,000 URLs" in caplog.text  # open() ran although scrapy-redis skips it
    try:
        assert scheduler.enqueue_request(Request("http://a/1"))
        assert not scheduler.enqueue_request(Request("http://a/1"))
        assert crawler.stats.get_value("dupefilter/filtered") == 1
    finally:
        scheduler.close("finished")  # not persisted: the queue key is flushed


def test_project_fingerprinter_makes_spellings_one_request() -> None:
    scheduler, _, crawler = open_scheduler(
        {"REQUEST_FINGERPRINTER_CLASS": "crawler.fingerprint.CanonicalRequestFingerprinter"})
    spellings = ["http://Example.com:80/a/./b?y=2&x=1", "http://example.com/a/b?x=1&y=2#top",
                 "http://EXAMPLE.com/a/%62?x=1&y=2&utm_source=mail", "http://example.com/a/b?y=2&x=1"]
    results = [scheduler.enqueue_request(Request(url)) for url in spellings]
    assert results == [True, False, False, False]
    assert crawler.stats.get_value("dupefilter/filtered") == 3
    assert scheduler.enqueue_request(Request("http://example.com/a/b?x=1&y=3"))

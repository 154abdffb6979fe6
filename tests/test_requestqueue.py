"""The ``JOBDIR`` disk queues of the local profile (:mod:`crawler.requestqueue`): the files
Scrapy's own queues write, without scanning the spider for every request."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from scrapy import Request, Spider, squeues
from scrapy.http import FormRequest
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.requestqueue import PickleFifoDiskQueue, PickleLifoDiskQueue

PAIRS = [(PickleLifoDiskQueue, squeues.PickleLifoDiskQueue),
         (PickleFifoDiskQueue, squeues.PickleFifoDiskQueue)]  # fmt: skip


class _Spider(Spider):
    name = "q"

    def parse(self, response):  # pragma: no cover - never called
        return None

    def on_error(self, failure):  # pragma: no cover - never called
        return None


def _requests(spider: Spider) -> list[Request]:
    return [
        Request("http://h.test/a", callback=spider.parse, errback=spider.on_error,
                meta={"canonical_url": "http://h.test/a", "depth": 3}, priority=2),
        Request("http://h.test/b"),
        FormRequest("http://h.test/f", formdata={"q": "1"}, callback=spider.parse),
        Request("http://h.test/c", callback=spider.parse, headers={"Referer": "http://h.test/"},
                cb_kwargs={"n": 1}, dont_filter=True),
    ]  # fmt: skip


def _crawler():
    crawler = get_crawler(_Spider)
    crawler.spider = _Spider()
    return crawler


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("ours", "scrapys"), PAIRS)
def test_the_queue_writes_the_files_scrapys_writes_and_pops_the_same_requests(tmp_path, ours,
                                                                              scrapys):  # fmt: skip
    crawler = _crawler()
    queues = {"ours": ours.from_crawler(crawler, str(tmp_path / "ours" / "q")),
              "scrapy": scrapys.from_crawler(crawler, str(tmp_path / "scrapy" / "q"))}  # fmt: skip
    requests = _requests(crawler.spider)
    for queue in queues.values():
        for request in requests:
            queue.push(request)
        queue.close()
    ours_files, scrapy_files = _files(tmp_path / "ours"), _files(tmp_path / "scrapy")
    assert ours_files and ours_files == scrapy_files
    reopened = ours.from_crawler(crawler, str(tmp_path / "ours" / "q"))
    popped = [reopened.pop() for _ in requests]
    assert reopened.pop() is None
    if ours is PickleLifoDiskQueue:
        popped.reverse()
    assert [r.url for r in popped] == [r.url for r in requests]
    assert [type(r) for r in popped] == [type(r) for r in requests]
    for got, sent in zip(popped, requests, strict=True):
        assert (got.callback, got.errback) == (sent.callback, sent.errback)
        assert (got.meta, got.priority, got.cb_kwargs) == (sent.meta, sent.priority, sent.cb_kwargs)
        assert (got.body, got.dont_filter) == (sent.body, sent.dont_filter)
        assert got.headers == sent.headers


@pytest.mark.parametrize(("ours", "scrapys"), PAIRS)
def test_queueing_a_spider_callback_does_not_scan_the_spider(tmp_path, monkeypatch, ours,
                                                             scrapys):  # fmt: skip
    """Scrapy's queue scans the spider (``inspect.getmembers``) for every request with a
    callback; ours names the method directly (a fifth of the CPU of a large crawl's discovery
    burst)."""
    scans = []
    real = inspect.getmembers
    monkeypatch.setattr(inspect, "getmembers", lambda *a, **k: scans.append(1) or real(*a, **k))
    crawler = _crawler()
    spider = crawler.spider
    requests = [Request(f"http://h.test/{i}", callback=spider.parse, errback=spider.on_error)
                for i in range(50)]  # fmt: skip
    theirs = scrapys.from_crawler(crawler, str(tmp_path / "scrapy"))
    for request in requests:
        theirs.push(request)
    assert len(scans) == 100  # the scans this replaces: callback and errback, per request
    scans.clear()
    queue = ours.from_crawler(crawler, str(tmp_path / "ours"))
    for request in requests:
        queue.push(request)
    assert scans == [] and len(queue) == 50


def test_a_callback_that_is_not_the_spiders_is_refused_as_scrapy_refuses_it(tmp_path):
    crawler = _crawler()
    queue = PickleLifoDiskQueue.from_crawler(crawler, str(tmp_path / "q"))
    with pytest.raises(ValueError, match="is not an instance method"):
        queue.push(Request("http://h.test/x", callback=lambda response: None))
    assert len(queue) == 0


def test_the_local_profile_queues_on_disk_through_it():
    from crawler.settings import base

    settings = Settings()
    settings.setmodule(base)
    assert settings.get("SCHEDULER_DISK_QUEUE") == "crawler.requestqueue.PickleLifoDiskQueue"

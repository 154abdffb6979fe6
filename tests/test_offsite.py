"""``crawler.middlewares.scope.OffsiteMiddleware``: Scrapy's offsite rule, not asked while the
spider has no ``allowed_domains`` (the web spider's case), unchanged when it has them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.test import get_crawler

from crawler.middlewares.scope import OffsiteMiddleware
from tests.conftest import ROOT


class Counting(OffsiteMiddleware):
    """Counts Scrapy's host matches (``should_follow``): the work the fast path skips."""

    asked = 0

    def should_follow(self, request: Request, spider: Spider) -> bool:
        self.asked += 1
        return super().should_follow(request, spider)


def _middleware(allowed: list[str] | None) -> Counting:
    attrs = {"name": "t"} | ({"allowed_domains": allowed} if allowed is not None else {})
    spidercls = type("T", (Spider,), attrs)
    crawler = get_crawler(spidercls)
    crawler.spider = spidercls()
    middleware = Counting.from_crawler(crawler)
    middleware.spider_opened(crawler.spider)
    return middleware


@pytest.mark.parametrize("allowed", [None, []])
def test_a_spider_without_allowed_domains_lets_every_request_through_unasked(allowed):
    middleware = _middleware(allowed)
    urls = ["http://a.example/", "http://b.example/x", "https://127.0.0.1:8/", "http://[::1]/"]
    for url in urls:
        request = Request(url)
        middleware.request_scheduled(request, middleware.crawler.spider)
        assert middleware.process_request(request) is None
    assert middleware.asked == 0  # Scrapy's parses each URL twice to match an empty pattern
    assert middleware.stats.get_value("offsite/filtered") is None


def test_a_spider_with_allowed_domains_keeps_scrapys_rule():
    middleware = _middleware(["a.example"])
    for url in ["http://a.example/", "http://sub.a.example/p"]:
        middleware.request_scheduled(Request(url), middleware.crawler.spider)
        assert middleware.process_request(Request(url)) is None
    with pytest.raises(IgnoreRequest, match=r"b\.example"):
        middleware.process_request(Request("http://b.example/"))
    with pytest.raises(IgnoreRequest):
        middleware.request_scheduled(Request("http://aa.example/"), middleware.crawler.spider)
    assert middleware.process_request(Request("http://b.example/", dont_filter=True)) is None
    assert middleware.process_request(
        Request("http://b.example/", meta={"allow_offsite": True})) is None
    assert middleware.stats.get_value("offsite/filtered") == 2
    assert middleware.asked == 6


def test_allowed_domains_set_after_the_spider_opened_are_honoured():
    middleware = _middleware(None)
    assert middleware.process_request(Request("http://b.example/")) is None
    middleware.crawler.spider.allowed_domains = ["a.example"]
    with pytest.raises(IgnoreRequest):
        middleware.process_request(Request("http://b.example/"))
    middleware.crawler.spider.allowed_domains = []
    assert middleware.process_request(Request("http://b.example/")) is None


def test_the_project_settings_use_it_in_place_of_scrapys():
    from scrapy.settings import Settings
    from scrapy.utils.conf import build_component_list

    from crawler.settings import base

    settings = Settings()
    settings.setmodule(base)
    names = [c if isinstance(c, str) else f"{c.__module__}.{c.__qualname__}"
             for c in build_component_list(settings.getwithbase("DOWNLOADER_MIDDLEWARES"))]
    assert "crawler.middlewares.scope.OffsiteMiddleware" in names
    assert "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware" not in names


SPIDER = textwrap.dedent("""
    import scrapy

    class Scoped(scrapy.Spider):
        name = "scoped"
        def __init__(self, url=None, other=None, **kwargs):
            super().__init__(**kwargs)
            self.url, self.other = url, other
            self.allowed_domains = [url.split("/")[2].split(":")[0]]

        async def start(self):
            yield scrapy.Request(self.url)
            yield scrapy.Request(self.other)

        def parse(self, response):
            return None
""")


def test_a_crawl_with_allowed_domains_still_filters_offsite_requests(tmp_path, demo_server):
    """A real ``scrapy runspider`` with the project's settings: the request to another host
    is filtered before it is downloaded, the one in ``allowed_domains`` is fetched."""
    spider = tmp_path / "scoped.py"
    spider.write_text(SPIDER)
    stats = tmp_path / "stats.json"
    port = demo_server.base_url.rsplit(":", 1)[1].rstrip("/")
    assert "127.0.0.2" not in demo_server.base_url
    settings = {"STORAGE_URL": f"sqlite:///{tmp_path / 'c.db'}", "STATS_FILE": str(stats),
                "DROPPED_LOG": str(tmp_path / "d.jsonl"), "LOG_LEVEL": "INFO",
                "DEDUP_PROGRESS_INTERVAL": 0, "ROBOTSTXT_OBEY": False}  # fmt: skip
    args = [sys.executable, "-m", "scrapy", "runspider", str(spider),
            "-a", f"url={demo_server.base_url}/", "-a", f"other=http://127.0.0.2:{port}/"]
    for key, value in settings.items():
        args += ["-s", f"{key}={value}"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(stats.read_text())
    assert figures.get("offsite/filtered") == 1, figures
    assert figures.get("downloader/response_count") == 1
    assert figures.get("offsite/domains") == 1

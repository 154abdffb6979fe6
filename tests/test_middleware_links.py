"""crawler.middlewares.links: scheme filter, canonical key, trap guards (real crawler objects)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.core.spidermw import SpiderMiddlewareManager
from scrapy.http import HtmlResponse
from scrapy.spidermiddlewares.urllength import UrlLengthMiddleware
from scrapy.utils.test import get_crawler

from crawler.commands.preflight import check_settings
from crawler.config import SettingError
from crawler.middlewares.links import TrapLimits, UrlNormalizationMiddleware
from crawler.sitegen import Page, Site
from crawler.sitegen.server import SiteServer
from crawler.urls.traps import TrapSettings
from settings import base as project_settings


class _Spider(Spider):
    name = "links"


def _middleware(**settings: Any) -> tuple[UrlNormalizationMiddleware, Any]:
    crawler = get_crawler(_Spider, settings)
    crawler.spider = crawler._create_spider()
    return UrlNormalizationMiddleware.from_crawler(crawler), crawler


def _run(middleware: UrlNormalizationMiddleware, outputs: list[Any]) -> list[Any]:
    response = HtmlResponse("http://example.com/page", body=b"<html></html>")
    return list(middleware.process_spider_output(response, outputs))


def _stats(crawler: Any) -> dict[str, int]:
    return {k: v for k, v in crawler.stats.get_stats().items()
            if k.startswith(("urlnorm/", "dedup/links_"))}


def test_non_http_schemes_are_dropped_and_counted() -> None:
    middleware, crawler = _middleware()
    urls = [
        "ftp://example.com/file",
        "file:///etc/passwd",
        "data:text/plain,hi",
        "about:blank",
        "FTP://example.com/other",
        "http://example.com/ok",
    ]
    kept = _run(middleware, [Request(url) for url in urls])
    assert [r.url for r in kept] == ["http://example.com/ok"]
    assert _stats(crawler) == {"dedup/links_not_http": 5}  # the spider's key for the same


def test_scrapy_refuses_links_without_authority() -> None:
    # Why the middleware never sees mailto:/javascript:/tel: (the spider must skip them).
    for url in ("mailto:a@example.com", "javascript:void(0)", "tel:+123"):
        with pytest.raises(ValueError, match="Missing scheme"):
            Request(url)


def test_canonical_url_is_set_when_absent_and_kept_when_present() -> None:
    middleware, _ = _middleware()
    fresh = Request("HTTP://Example.COM:80/a/./b?utm_source=x&z=1&a=2#frag")
    marked = Request("http://example.com/x", meta={"canonical_url": "http://example.com/key"})
    kept = _run(middleware, [fresh, marked, {"item": 1}])
    assert kept[0].meta["canonical_url"] == "http://example.com/a/b?a=2&z=1"
    assert kept[1].meta["canonical_url"] == "http://example.com/key"
    assert kept[2] == {"item": 1}


def test_policy_settings_shape_the_canonical_url() -> None:
    middleware, _ = _middleware(URLNORM_STRIP_PARAMS=["sid"], URLNORM_SORT_QUERY=False)
    (kept,) = _run(middleware, [Request("http://e.com/?z=1&sid=2&utm_source=3")])
    assert kept.meta["canonical_url"] == "http://e.com/?z=1&utm_source=3"


def test_invalid_urls_are_dropped() -> None:
    middleware, crawler = _middleware()
    kept = _run(middleware, [Request("http://a..b/"), Request("http://xn--a.com/")])
    assert kept == []
    assert _stats(crawler) == {"dedup/links_not_http": 2}


@pytest.mark.parametrize(
    ("url", "trap"),
    [
        ("http://e.com/a/b/a/b/a/b/a/b", "segment_repeat"),
        ("http://e.com/cal/2024/cal/2024/cal/2024/cal/x", "segment_repeat"),
        ("http://e.com/a/a/a/", None),
        ("http://e.com/a//a//a//", None),
        ("http://e.com/" + "/".join(f"s{i}" for i in range(17)), "path_depth"),
        ("http://e.com/" + "/".join(f"s{i}" for i in range(16)) + "/", None),
        ("http://e.com/?" + "&".join(f"p{i}=1" for i in range(17)), "query_params"),
        ("http://e.com/?" + "&".join(f"p{i}=1" for i in range(16)), None),
        ("http://e.com/?" + "&".join(f"p{i}=1" for i in range(16)) + "&utm_source=x", None),
        ("http://e.com/" + "x" * 2100, "url_length"),
    ],
)
def test_trap_guards(url: str, trap: str | None) -> None:
    middleware, crawler = _middleware()
    kept = _run(middleware, [Request(url)])
    if trap is None:
        assert len(kept) == 1 and _stats(crawler) == {}
    else:
        assert kept == [] and _stats(crawler) == {f"urlnorm/trap/{trap}": 1}


def test_trap_limits_come_from_settings() -> None:
    middleware, crawler = _middleware(
        TRAP_MAX_SEGMENT_REPEAT=1,
        TRAP_MAX_PATH_DEPTH=2,
        TRAP_MAX_QUERY_PARAMS=1,
        URLLENGTH_LIMIT=40,
    )
    urls = [
        "http://e.com/a/a",
        "http://e.com/a/b/c",
        "http://e.com/?a=1&b=2",
        "http://e.com/" + "x" * 40,
        "http://e.com/a/b?c=1",
    ]
    kept = _run(middleware, [Request(url) for url in urls])
    assert [r.url for r in kept] == ["http://e.com/a/b?c=1"]
    assert sorted(_stats(crawler)) == [
        "urlnorm/trap/path_depth",
        "urlnorm/trap/query_params",
        "urlnorm/trap/segment_repeat",
        "urlnorm/trap/url_length",
    ]
    unlimited = TrapLimits.of(TrapSettings.from_settings({"URLLENGTH_LIMIT": 0}))
    assert unlimited.trap("http://e.com/" + "x" * 9999) is None


def test_start_requests_are_processed() -> None:
    middleware, crawler = _middleware()

    async def start():
        yield Request("ftp://example.com/seed")
        yield Request("https://Example.com/seed", dont_filter=True)

    async def collect():
        return [r async for r in middleware.process_start(start())]

    (kept,) = asyncio.run(collect())
    assert kept.meta["canonical_url"] == "https://example.com/seed"
    assert _stats(crawler) == {"dedup/links_not_http": 1}


def test_first_drop_of_each_kind_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    middleware, _ = _middleware()
    caplog.set_level(logging.DEBUG, logger="crawler.urls.linkrules")
    trap = "http://e.com/" + "a/" * 40
    _run(middleware, [Request(f"ftp://e.com/{i}") for i in range(3)] + [Request("http://a..b/"),
                                                                          Request(trap)])
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == [logging.INFO, logging.INFO]
    assert "dedup/links_not_http" in messages[0][1] and "ftp://e.com/0" in messages[0][1]
    assert "URLNORM_DEBUG" in messages[0][1]
    assert "urlnorm/trap/segment_repeat" in messages[1][1]


def test_debug_setting_logs_every_drop(caplog: pytest.LogCaptureFixture) -> None:
    middleware, _ = _middleware(URLNORM_DEBUG=True)
    caplog.set_level(logging.DEBUG, logger="crawler.urls.linkrules")
    _run(middleware, [Request(f"ftp://e.com/{i}") for i in range(3)])
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert "referer: http://example.com/page" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TRAP_MAX_SEGMENT_REPEAT", 0),
        ("TRAP_MAX_PATH_DEPTH", -1),
        ("TRAP_MAX_QUERY_PARAMS", "many"),
        ("URLLENGTH_LIMIT", -5),
        ("URLNORM_DEBUG", "perhaps"),
    ],
)
def test_bad_settings_are_refused(name: str, value: object) -> None:
    with pytest.raises(SettingError) as info:
        check_settings({name: value})
    assert info.value.name == name
    if name != "URLNORM_DEBUG":
        with pytest.raises(SettingError):
            _middleware(**{name: value})


def test_project_settings_replace_scrapy_url_length_middleware() -> None:
    names = {k: getattr(project_settings, k) for k in ("SPIDER_MIDDLEWARES", "URLLENGTH_LIMIT")}
    crawler = get_crawler(_Spider, names)
    manager = SpiderMiddlewareManager.from_crawler(crawler)
    kinds = [type(m) for m in manager.middlewares]
    assert UrlNormalizationMiddleware in kinds
    assert UrlLengthMiddleware not in kinds


# --- end to end: a real crawl of a trap site ------------------------------------------------------
def _trap_page(key: str) -> Page | None:
    """Endless link chains, one per guard; each page links one step further."""
    path, _, query = key.partition("?")
    if path.startswith("/loop/"):
        link = "a/"  # /loop/a/a/a/... : the segment repeat guard
    elif path.startswith("/d/"):
        link = f"x{path.count('/')}/"  # /d/x2/x3/... : the depth guard
    elif path == "/q":
        pairs = query.count("=") + 1  # /q?p0=1&p1=1... : the query pairs guard
        link = "/q?" + "&".join(f"p{i}=1" for i in range(pairs))
    else:
        return None
    return Page(f'<html><body><a href="{link}">next</a></body></html>'.encode())


def _trap_site() -> Site:
    links = [
        "mailto:a@example.com",
        "javascript:void(0)",
        "tel:+123",
        "ftp://localhost/file",
        "data:text/html,hi",
        "file:///etc/passwd",
        "/loop/",
        "/d/",
        "/q",
        "/long/" + "x" * 3000,
    ]
    anchors = "".join(f'<a href="{link}">link</a>' for link in links)
    home = Page(f"<html><body>{anchors}</body></html>".encode())
    return Site(name="traps", pages={"/": home}, fallback=_trap_page)


@pytest.mark.slow
def test_crawl_of_trap_site_stops_within_budget(crawl: Any) -> None:
    with SiteServer(_trap_site()) as server:
        run = crawl(
            urls=[server.url("/")],
            settings={
                "ROBOTSTXT_OBEY": False,
                "TRAP_MAX_PATH_DEPTH": 6,
                "TRAP_MAX_QUERY_PARAMS": 5,
                # the URL-shape limits alone: the trap pages are copies of each other, whose
                # links the content guards would not follow (tests/test_hostile_traps.py)
                "TRAP_FOLLOW_LINKS_OF": "all",
                "TRAP_SOFT404_PROBE": False,
            },
        )
        hits = dict(server.hits)
    assert run.returncode == 0, run.stderr[-3000:]
    by_chain = {
        prefix: sum(n for target, n in hits.items() if target.startswith(prefix))
        for prefix in ("/loop/", "/d/", "/q", "/long/")
    }
    # /loop/ + 3 x "a/"; /d/ .. 6 segments; /q with 0..5 pairs; the long URL never.
    assert by_chain == {"/loop/": 4, "/d/": 6, "/q": 6, "/long/": 0}
    assert sum(hits.values()) == 1 + 4 + 6 + 6
    for kind in ("segment_repeat", "path_depth", "query_params", "url_length"):
        assert run.stats.get(f"urlnorm/trap/{kind}") == 1, kind
    assert "Dropped link (urlnorm/trap/segment_repeat)" in run.stderr

"""``Retry-After`` on 429 and 503 (issue 15, item 4): the host is paused for the given time
(capped by ``RETRY_AFTER_MAX_SECONDS``) and the request retried after the pause, within
``RETRY_TIMES``; other hosts keep going meanwhile. Real ``scrapy crawl web`` runs against sites
of the scripted web (:mod:`crawler.sitegen.scripted`) on 127.0.0.1, which log when each request
arrives."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from crawler.middlewares.retryafter import retry_after_seconds
from crawler.sitegen.scripted import Answer, ScriptedSite, ScriptedWeb
from tests.conftest import CrawlRun, run_crawl

TEXT = {
    "/": "home of the busy site about birds that sing at dawn in the forest",
    "/page": "a page about owls hunting mice at night in the fields and barns",
    "/b1": "other host page one about rivers and the fish living in them",
    "/b2": "other host page two about mountains and the goats climbing them",
}


def _page(path: str, links: list[str]) -> Answer:
    anchors = "".join(f'<a href="{p}">{p}</a> ' for p in links)
    body = f"<h1>{path}</h1><p>{TEXT.get(path, path)}</p>{anchors}"
    return Answer(body=f"<html><body>{body}</body></html>", content_type="text/html")


@pytest.fixture
def serve(scripted: ScriptedWeb) -> Callable[[Callable[[str, int], Answer]], ScriptedSite]:
    """``serve(answer)``: the next site of the web, answering the n-th request (from 1) of a
    path with ``answer(path, n)``."""
    sites = iter(scripted.sites)

    def start(answer: Callable[[str, int], Answer]) -> ScriptedSite:
        return next(sites).script(lambda request: answer(request.target, request.nth))

    return start


NOT_FOUND = Answer(404, "", content_type="text/html")


def _other_host(path: str, n: int) -> Answer:
    return NOT_FOUND if path == "/robots.txt" else _page(path, ["/b1", "/b2"])


def _crawl(tmp_path: Path, seeds: list[str], **settings: Any) -> CrawlRun:
    run = run_crawl(tmp_path / "run", urls=seeds, timeout=120, settings={
        "CLOSESPIDER_TIMEOUT": 90, "TRAP_SOFT404_PROBE": False, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    return run


def test_429_with_retry_after_is_retried_after_the_pause(serve, tmp_path) -> None:
    """429 + ``Retry-After: 2``, then 200: the retry reaches the server at least 2 s after the
    429; with one request in flight overall, the other host is crawled during the pause."""

    def busy(path: str, n: int) -> Answer:
        if path == "/page" and n == 1:
            return Answer(429, "slow down", "text/html", {"Retry-After": "2"})
        return NOT_FOUND if path == "/robots.txt" else _page(path, [])

    site, other = serve(busy), serve(_other_host)
    run = _crawl(tmp_path, [site.url + "/page", other.url + "/"], CONCURRENT_REQUESTS=1)
    first, retry = site.times("/page")
    assert retry - first >= 2.0
    assert any(first < r.at < retry for r in other.log() if r.target != "/robots.txt")
    assert run.stats["retry/retry_after"] == 1
    assert site.url + "/page" in run.stored_urls()
    assert run.stderr.count("Retry-After") == 1  # the first pause, at INFO


def test_the_cap_bounds_a_long_retry_after_and_retry_times_holds(serve, tmp_path) -> None:
    """A 503 that always asks for an hour (as an HTTP date): paused only the cap, retried
    ``RETRY_TIMES`` times, then given up; the crawl ends by itself."""
    later = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)

    def down(path: str, n: int) -> Answer:
        if path == "/page":
            return Answer(503, "maintenance", "text/html", {"Retry-After": later})
        return NOT_FOUND if path == "/robots.txt" else _page(path, [])

    site = serve(down)
    started = time.monotonic()
    run = _crawl(tmp_path, [site.url + "/page"], RETRY_AFTER_MAX_SECONDS=1, RETRY_TIMES=1)
    assert time.monotonic() - started < 60
    first, retry = site.times("/page")
    assert 1.0 <= retry - first < 30
    assert run.stats["retry/retry_after"] == 1
    assert run.stats["retry/max_reached"] == 1


@pytest.mark.parametrize(("value", "seconds"), [
    ("2", 2.0), (" 0 ", 0.0), ("3600", 3600.0), ("-5", None), ("soon", None), ("", None),
    ("1.5", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
])  # fmt: skip
def test_retry_after_values(value: str, seconds: float | None) -> None:
    """delta-seconds or an HTTP date (a past date is 0); anything else is no pause."""
    assert retry_after_seconds(value.encode()) == seconds


def test_retry_after_as_a_future_http_date() -> None:
    later = datetime.now(UTC) + timedelta(seconds=100)
    assert 95 <= (retry_after_seconds(format_datetime(later, usegmt=True).encode()) or 0) <= 100

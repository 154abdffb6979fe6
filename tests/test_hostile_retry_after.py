"""``Retry-After`` on 429 and 503 (issue 15, item 4): the host is paused for the given time
(capped by ``RETRY_AFTER_MAX_SECONDS``) and the request retried after the pause, within
``RETRY_TIMES``; other hosts keep going meanwhile. Real ``scrapy crawl web`` runs against small
servers of their own on 127.0.0.1 that log when each request arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from crawler.middlewares.retryafter import retry_after_seconds
from tests.conftest import CrawlRun, run_crawl

Answer = tuple[int, dict[str, str], str]  # status, headers, body
TEXT = {
    "/": "home of the busy site about birds that sing at dawn in the forest",
    "/page": "a page about owls hunting mice at night in the fields and barns",
    "/b1": "other host page one about rivers and the fish living in them",
    "/b2": "other host page two about mountains and the goats climbing them",
}


class Server:
    """``answer(path, n)`` answers the n-th request (from 1) of a path; arrivals are logged."""

    def __init__(self, answer: Callable[[str, int], Answer]) -> None:
        self.log: list[tuple[float, str]] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    server.log.append((time.monotonic(), self.path))
                    count = server.times(self.path)
                status, headers, body = answer(self.path, len(count))
                data = body.encode()
                self.send_response(status)
                for name, value in {"Content-Type": "text/html", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def times(self, path: str) -> list[float]:
        return [t for t, p in self.log if p == path]


def _page(path: str, links: list[str]) -> Answer:
    anchors = "".join(f'<a href="{p}">{p}</a> ' for p in links)
    body = f"<h1>{path}</h1><p>{TEXT.get(path, path)}</p>{anchors}"
    return 200, {}, f"<html><body>{body}</body></html>"


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[str, int], Answer]], Server]]:
    servers: list[Server] = []

    def start(answer: Callable[[str, int], Answer]) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.httpd.shutdown()
        server.httpd.server_close()


def _other_host(path: str, n: int) -> Answer:
    return (404, {}, "") if path == "/robots.txt" else _page(path, ["/b1", "/b2"])


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
            return 429, {"Retry-After": "2"}, "slow down"
        return (404, {}, "") if path == "/robots.txt" else _page(path, [])

    site, other = serve(busy), serve(_other_host)
    run = _crawl(tmp_path, [site.url + "/page", other.url + "/"], CONCURRENT_REQUESTS=1)
    first, retry = site.times("/page")
    assert retry - first >= 2.0
    assert any(first < t < retry for t, p in other.log if p != "/robots.txt")
    assert run.stats["retry/retry_after"] == 1
    assert site.url + "/page" in run.stored_urls()
    assert run.stderr.count("Retry-After") == 1  # the first pause, at INFO


def test_the_cap_bounds_a_long_retry_after_and_retry_times_holds(serve, tmp_path) -> None:
    """A 503 that always asks for an hour (as an HTTP date): paused only the cap, retried
    ``RETRY_TIMES`` times, then given up; the crawl ends by itself."""
    later = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)

    def down(path: str, n: int) -> Answer:
        if path == "/page":
            return 503, {"Retry-After": later}, "maintenance"
        return (404, {}, "") if path == "/robots.txt" else _page(path, [])

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

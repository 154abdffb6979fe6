"""robots.txt on a hostile server (issue 15, item 4): a robots.txt answering 5xx, or not at all,
means "disallow everything" for that host until a later fetch answers (RFC 9309 2.3.1.4); a
4xx means "allow everything" whatever its body. Each case is a real ``scrapy crawl web``
against sites of the scripted web (:mod:`crawler.sitegen.scripted`) on 127.0.0.1, which record
every request they receive."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawler.sitegen.scripted import Answer, ScriptedSite, ScriptedWeb
from tests.conftest import CrawlRun, run_crawl

Reply = tuple[int, str]  # status, body
ROBOTS = "User-agent: *\nDisallow: /private\n"
PAGES = {
    "/": "home page of the robots test site about gardening and tomatoes",
    "/a": "page a tells how to sow carrots in sandy soil during early spring",
    "/b": "page b explains pruning apple trees in winter with sharp clean tools",
    "/private": "the private page nobody may fetch according to the robots file",
}


def _page(path: str) -> Reply:
    if path not in PAGES:
        return 404, "not here"
    links = "".join(f'<a href="{p}">{p}</a> ' for p in PAGES)
    return 200, f"<html><body><h1>{path}</h1><p>{PAGES[path]}</p>{links}</body></html>"


@pytest.fixture
def serve(scripted: ScriptedWeb) -> Callable[[Callable[[int], Reply]], ScriptedSite]:
    """``serve(robots)``: the next site of the web; ``robots(n)`` answers its n-th robots.txt
    request (from 1), the pages of :data:`PAGES` link each other."""
    sites = iter(scripted.sites)

    def start(robots: Callable[[int], Reply]) -> ScriptedSite:
        site = next(sites).route("/robots.txt", lambda request: Answer(*robots(request.nth)))
        return site.script(lambda request: Answer(*_page(request.target)))

    return start


def _crawl(tmp_path: Path, seeds: list[str], **settings: Any) -> CrawlRun:
    run = run_crawl(tmp_path / "run", urls=seeds, timeout=120, settings={
        "CLOSESPIDER_TIMEOUT": 90, "ROBOTSTXT_RETRY_BACKOFF": 0.3,
        "TRAP_SOFT404_PROBE": False, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    return run


def _refused_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_robots_503_then_200_holds_the_host_then_obeys(serve, tmp_path) -> None:
    """Four 503s (more than RETRY_TIMES absorbs), then the real robots.txt: nothing but
    robots.txt is fetched before it answers, and ``/private`` never."""
    site = serve(lambda n: (503, "busy") if n <= 4 else (200, ROBOTS))
    run = _crawl(tmp_path, [site.url + "/"])
    assert site.hits["/private"] == 0
    assert {"/", "/a", "/b"} <= site.paths()
    answered = site.times("/robots.txt")[4]
    assert min(site.times("/")) >= answered
    assert run.stats["robotstxt/unavailable"] >= 1
    assert run.stats["robotstxt/held"] >= 1
    assert "robotstxt/given_up" not in run.stats
    assert run.stats["robotstxt/forbidden"] >= 1


def test_robots_always_failing_gives_up_after_the_bound(serve, tmp_path) -> None:
    """A robots.txt that always answers 503 and a host that refuses connections: nothing but
    robots.txt is asked of them, their seeds are given up (the refused one at once, after its
    retries: tests/test_dead_host.py; the 503 one after the bound), one WARNING per
    host, while a third, healthy host is crawled whole; the crawl ends by itself."""
    failing = serve(lambda n: (503, "down"))
    healthy = serve(lambda n: (200, ROBOTS))
    refused = f"http://127.0.0.1:{_refused_port()}"
    started = time.monotonic()
    run = _crawl(tmp_path, [failing.url + "/", refused + "/", healthy.url + "/"],
                 ROBOTSTXT_UNAVAILABLE_MAX_SECONDS=2, CONCURRENT_REQUESTS=2)
    assert time.monotonic() - started < 60
    assert failing.paths() == {"/robots.txt"}
    assert failing.hits["/robots.txt"] >= 2  # retried with backoff
    assert {"/", "/a", "/b"} <= healthy.paths()
    assert run.stats["robotstxt/given_up"] == 2
    assert run.stats["robotstxt/unavailable"] >= 2
    assert run.stored_urls() >= {healthy.url + "/", healthy.url + "/a"}
    assert not any(url.startswith((failing.url, refused)) for url in run.stored_urls())
    assert run.stderr.count("robots.txt of http://127.0.0.1:") >= 2  # per scheme+host+port
    assert run.stderr.count("given up") == 2


def test_robots_404_allows_everything_whatever_its_body(serve, tmp_path) -> None:
    """A 404 robots.txt whose body happens to read ``Disallow: /`` allows every page."""
    site = serve(lambda n: (404, "User-agent: *\nDisallow: /\n"))
    run = _crawl(tmp_path, [site.url + "/"])
    assert {"/", "/a", "/b", "/private"} <= site.paths()
    assert run.stats["robotstxt/allow_4xx"] == 1
    assert "robotstxt/forbidden" not in run.stats


@pytest.mark.redis
@pytest.mark.postgres
def test_the_distributed_profile_shares_only_an_answered_robots_txt(serve, tmp_path, redis_url,
                                                                    pg_url) -> None:
    """``SharedRobotsTxtMiddleware`` holds the host the same way, and what it puts in Redis is
    the robots.txt that answered, never a 503 page."""
    from crawler.backends.redis import clear_namespace, connect
    from tests.conftest import fresh_pg_schema

    site = serve(lambda n: (503, "busy page") if n <= 4 else (200, ROBOTS))
    namespace = f"robots-{uuid.uuid4().hex[:8]}"
    env = {"SCRAPY_SETTINGS_MODULE": "settings.distributed", "DEDUP_REDIS_URL": redis_url,
           "DEDUP_NAMESPACE": namespace}  # fmt: skip
    client = connect(redis_url)
    try:
        with fresh_pg_schema(pg_url, "robots") as store_url:
            run = run_crawl(tmp_path / "run", urls=[site.url + "/"], env=env, timeout=120,
                            settings={"STORAGE_URL": store_url, "ROBOTSTXT_RETRY_BACKOFF": 0.3,
                                      "TRAP_SOFT404_PROBE": False})  # fmt: skip
        shared = client.hgetall(f"dedup:{namespace}:robots")
    finally:
        clear_namespace(client, f"dedup:{namespace}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stats.get("finish_reason") == "finished"
    assert list(shared.values()) == [ROBOTS.encode()]
    assert site.hits["/private"] == 0
    assert {"/", "/a", "/b"} <= site.paths()
    assert run.stats["robotstxt/unavailable"] == 4

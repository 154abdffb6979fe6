"""A host that is not there ends at once (issue 28, item 2): robots.txt of a host that refuses
every connection, whose name does not resolve or whose TLS handshake fails is tried
``RETRY_TIMES`` more times, as Scrapy's RetryMiddleware would, then the host is given up with
one WARNING naming what to check; ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` (600 s) is not waited
for. A host that answered and is then refused, or whose robots.txt is cut mid-answer, keeps the
ordinary behaviour. robots.txt state is per scheme, host and port (RFC 9309 2.3). Every case is
a real ``scrapy crawl web`` subprocess against the scripted web on 127.0.0.1."""

from __future__ import annotations

import re
import socket
import sqlite3
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawler.middlewares.robots import robots_key
from crawler.sitegen.scripted import Answer, ScriptedSite, ScriptedWeb, html
from tests.conftest import CrawlRun, run_crawl

ROBOTS = "User-agent: *\nDisallow: /private\n"
DEAD_DNS = "http://no-such-host.invalid"  # RFC 6761: .invalid never resolves, no network asked
BOUND = 60  # seconds: a 600 s hold (ROBOTSTXT_UNAVAILABLE_MAX_SECONDS) would time out


def _refused_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _live(site: ScriptedSite) -> ScriptedSite:
    site.route("/robots.txt", Answer(200, ROBOTS, content_type="text/plain"))
    site.route("/", html("home", "the live host home page about beekeeping", ["/a", "/b"]))
    site.route("/a", html("a", "page a tells how to build a hive from pine boards", ["/"]))
    return site.route("/b", html("b", "page b explains how bees find their way home", ["/"]))


def _crawl(tmp_path: Path, seeds: list[str], timeout: float = BOUND, **settings: Any) -> CrawlRun:
    """A crawl that must end by itself well inside ``timeout`` (the hold is 600 s)."""
    run = run_crawl(tmp_path / f"run-{uuid.uuid4().hex[:6]}", urls=seeds, timeout=timeout,
                    settings={"ROBOTSTXT_UNAVAILABLE_MAX_SECONDS": 600, "RETRY_TIMES": 2,
                              "CLOSESPIDER_TIMEOUT": 120, "TRAP_SOFT404_PROBE": False,
                              **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return run


def _warnings(run: CrawlRun, origin: str) -> list[str]:
    return [line for line in run.stderr.splitlines()
            if "WARNING" in line and line.split("WARNING: ", 1)[-1].startswith(origin)]


@pytest.mark.parametrize("order", ["dead first", "live first"])
def test_two_dead_hosts_end_at_once_and_the_live_host_is_crawled(scripted, tmp_path,
                                                                 order) -> None:
    """Connection refused and a name that does not resolve, beside a live host: the dead
    ones are given up after the downloader's retries (3 attempts at robots.txt each), one
    WARNING each saying what to check, their pages never fetched; the live host is crawled and
    stored whole; the crawl finishes by itself in seconds, not after the 600 s hold."""
    live = _live(scripted.sites[0])
    refused = f"http://127.0.0.1:{_refused_port()}"
    dead = [refused + "/", refused + "/other", DEAD_DNS + "/"]
    seeds = [*dead, live.url + "/"] if order == "dead first" else [live.url + "/", *dead]
    started = time.monotonic()
    run = _crawl(tmp_path, seeds)
    assert time.monotonic() - started < BOUND
    assert {"/robots.txt", "/", "/a", "/b"} <= live.paths()
    assert run.stored_urls() == {live.url + "/", live.url + "/a", live.url + "/b"}
    assert run.stats["robotstxt/host_down/connection_refused"] == 1
    assert run.stats["robotstxt/host_down/dns_lookup_failed"] == 1
    assert run.stats["robotstxt/given_up"] == 3  # the three dead seeds, none fetched
    refusals = "robotstxt/exception_count/<class 'scrapy.exceptions.DownloadConnection"
    assert run.stats[refusals + "RefusedError'>"] == 3  # 1 + RETRY_TIMES, no more
    assert "robotstxt/unavailable" not in run.stats  # no RFC 9309 hold for a missing host
    for origin, reason in ((refused, "connection refused"), (DEAD_DNS, "DNS lookup failed")):
        lines = _warnings(run, origin)
        assert len(lines) == 1, run.stderr[-3000:]
        assert reason in lines[0] and "host given up" in lines[0]
        assert "Check the host name, the port, and http vs https" in lines[0]
    assert run.stats.get("log_count/WARNING", 0) == 2
    assert run.stats.get("log_count/ERROR", 0) == 0


def test_only_dead_hosts_end_in_seconds(tmp_path) -> None:
    """A crawl whose every seed host is down ends by itself, finished, exit 0."""
    refused = f"http://127.0.0.1:{_refused_port()}"
    started = time.monotonic()
    run = _crawl(tmp_path, [DEAD_DNS + "/", refused + "/"])
    assert time.monotonic() - started < BOUND
    assert run.stats["robotstxt/given_up"] == 2
    assert len(_warnings(run, refused)) == len(_warnings(run, DEAD_DNS)) == 1


def test_a_host_down_at_first_is_fetched_when_the_crawl_resumes(tmp_path) -> None:
    """JOBDIR: the requests of a host given up as not there stay owed in the journal (the
    WARNING says so); run again once the host is up, the resumed crawl fetches and stores them.
    Before, they were reported finished: the host's pages were lost for good."""
    port = _refused_port()
    origin = f"http://127.0.0.1:{port}"
    store = {"JOBDIR": str(tmp_path / "job"), "STORAGE_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    first = _crawl(tmp_path, [origin + "/"], **store)
    assert first.stats["robotstxt/host_down/connection_refused"] == 1
    assert first.stats["robotstxt/given_up"] == 1
    [line] = _warnings(first, origin)
    assert "they stay owed in JOBDIR: a resumed run asks again" in line

    class Up(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            robots = self.path == "/robots.txt"
            body = (ROBOTS if robots else "<html><head><title>back</title></head><body><p>"
                    "the host is back and answers with a page about mountain rivers</p>"
                    "</body></html>").encode()
            self.send_response(200 if robots or self.path == "/" else 404)
            self.send_header("Content-Type", "text/plain" if robots else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Up)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        second = _crawl(tmp_path, [origin + "/"], **store)
    finally:
        server.shutdown()
        server.server_close()
    assert second.stats["dedup/jobdir/resumed"] == 1
    with sqlite3.connect(tmp_path / "c.db") as conn:
        stored = {url for (url,) in conn.execute("SELECT url FROM documents")}
    assert stored == {origin + "/"}
    assert "robotstxt/given_up" not in second.stats


def test_http_and_https_of_one_host_have_their_own_robots_txt(scripted, tmp_path) -> None:
    """https:// to a port that speaks plain HTTP fails its TLS handshake: that origin is given
    up (the user typed the wrong scheme), while http:// of the same host and port, another
    robots.txt, is crawled and its robots.txt obeyed. Keyed by host:port, the https seed
    shared the http robots.txt and was fetched (and failed) as a page."""
    live = _live(scripted.sites[0])
    port = urlsplit(live.url).port
    https = f"https://127.0.0.1:{port}"
    run = _crawl(tmp_path, [https + "/", https + "/a", live.url + "/", live.url + "/private"])
    assert run.stats["robotstxt/host_down/tls_handshake_failed"] == 1
    lines = _warnings(run, https)
    assert len(lines) == 1 and "TLS handshake failed" in lines[0], run.stderr[-3000:]
    assert live.hits["/robots.txt"] == 1  # http's own, fetched once
    assert live.hits["/private"] == 0
    assert run.stored_urls() == {live.url + "/", live.url + "/a", live.url + "/b"}
    assert run.stats["robotstxt/given_up"] == 2  # both https seeds, never fetched as pages


def test_robots_key_is_scheme_host_and_port() -> None:
    def key(url: str) -> str:
        return robots_key(urlsplit(url))

    assert key("http://example.com/a") == key("http://example.com:80/b") == "http://example.com"
    assert key("https://example.com/") == key("https://example.com:443/") == "https://example.com"
    assert key("http://example.com:8080/") == "http://example.com:8080"
    assert len({key("http://example.com/"), key("https://example.com/"),
                key("http://example.com:443/")}) == 3  # fmt: skip


def test_a_robots_txt_cut_mid_answer_is_held_not_given_up(scripted, tmp_path) -> None:
    """A connection lost mid-answer is a host that is there: RFC 9309's hold, as for a 5xx,
    then its pages once robots.txt answers."""
    live = _live(scripted.sites[0])
    cut = Answer(200, ROBOTS + "# " + "x" * 4000, content_type="text/plain", cut=10)
    live.route("/robots.txt", lambda request: cut if request.nth <= 2 else Answer(
        200, ROBOTS, content_type="text/plain"))
    run = _crawl(tmp_path, [live.url + "/"], ROBOTSTXT_RETRY_BACKOFF=0.3)
    assert run.stats["robotstxt/unavailable"] >= 1
    assert not any(key.startswith("robotstxt/host_down") for key in run.stats)
    assert "robotstxt/given_up" not in run.stats
    assert run.stored_urls() == {live.url + "/", live.url + "/a", live.url + "/b"}


def test_a_page_refused_after_robots_txt_answered_is_retried_not_given_up(tmp_path) -> None:
    """The host answers robots.txt and its home page, then stops listening: its other pages
    get the ordinary retries and are counted as download errors; the host is not given up
    (only a robots.txt fetch of a host that never answered gives a host up)."""
    with ScriptedWeb(sites=1) as web:
        site = _live(web.sites[0])
        home = html("home", "the live host home page about beekeeping", ["/a", "/b"])

        def home_then_stop(request: Any) -> Answer:
            web.stop()  # the listening socket closes; this connection still answers
            return Answer(home.status, home.body, headers={"Connection": "close"})

        site.route("/", home_then_stop)
        run = _crawl(tmp_path, [site.url + "/"])
    assert run.stored_urls() == {site.url + "/"}
    refusals = "downloader/exception_type_count/scrapy.exceptions.DownloadConnectionRefusedError"
    assert run.stats[refusals] == 6  # /a and /b, each tried 1 + RETRY_TIMES times
    assert run.stats["retry/max_reached"] == 2
    assert not any(key.startswith("robotstxt/host_down") for key in run.stats)
    assert "robotstxt/given_up" not in run.stats
    assert not re.search(r"WARNING: \S+ is not there", run.stderr)


@pytest.mark.redis
@pytest.mark.postgres
def test_a_host_given_up_by_one_worker_is_given_up_by_the_next(tmp_path, redis_url,
                                                               pg_url) -> None:
    """Distributed profile: the worker that finds a host refused records it in the
    namespace's robots hash; a worker that reads that record gives the host up without asking
    it. (A finished crawl is not resumed, so the second worker runs in a second namespace
    holding the record exactly as the first worker wrote it.)"""
    from crawler.backends.redis import clear_namespace, connect
    from tests.conftest import fresh_pg_schema

    refused = f"http://127.0.0.1:{_refused_port()}"
    namespaces = [f"dead-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    client = connect(redis_url)
    runs: list[CrawlRun] = []
    shared: dict[Any, Any] = {}
    try:
        with fresh_pg_schema(pg_url, "deadhost") as store_url:
            for namespace in namespaces:
                if shared:
                    client.hset(f"dedup:{namespace}:robots", mapping=shared)
                env = {"SCRAPY_SETTINGS_MODULE": "settings.distributed",
                       "DEDUP_REDIS_URL": redis_url, "DEDUP_NAMESPACE": namespace}
                run = run_crawl(tmp_path / namespace, urls=[refused + "/"], env=env,
                                timeout=BOUND, settings={
                                    "STORAGE_URL": store_url, "TRAP_SOFT404_PROBE": False,
                                    "ROBOTSTXT_UNAVAILABLE_MAX_SECONDS": 600})  # fmt: skip
                assert run.returncode == 0, run.stderr[-3000:]
                runs.append(run)
                shared = client.hgetall(f"dedup:{namespace}:robots")
                [(field, record)] = shared.items()
                assert field == f"!down {refused}".encode()
                reason, stamp = record.decode().split("|")
                assert reason == "connection_refused" and abs(time.time() - int(stamp)) < BOUND
    finally:
        for namespace in namespaces:
            clear_namespace(client, f"dedup:{namespace}")
    first, second = (run.stats for run in runs)
    assert first["robotstxt/host_down/connection_refused"] == 1
    assert first["robotstxt/given_up"] == 1
    assert second["robotstxt/host_down_shared"] == 1
    assert second["robotstxt/given_up"] == 1
    assert "robotstxt/request_count" not in second  # not asked again
    lines = _warnings(runs[1], refused)
    assert len(lines) == 1 and "given up by another worker" in lines[0]


def test_a_shared_down_record_is_ignored_once_old_or_beside_an_answer(redis_url) -> None:
    """A ``!down`` record is believed for ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` after it was
    written (then the host is asked again: it may be back), and never over a robots.txt body
    another worker stored (that worker had an answer: the host is there)."""
    from scrapy.utils.test import get_crawler

    from crawler.backends.redis import clear_namespace, connect
    from crawler.middlewares.politeness import DOWN_FIELD, SharedRobotsTxtMiddleware

    namespace = f"dead-{uuid.uuid4().hex[:8]}"
    crawler = get_crawler(settings_dict={
        "DEDUP_BACKEND": "redis", "REDIS_URL": redis_url, "DEDUP_NAMESPACE": namespace,
        "ROBOTSTXT_OBEY": True, "ROBOTSTXT_UNAVAILABLE_MAX_SECONDS": 600})  # fmt: skip
    middleware = SharedRobotsTxtMiddleware(crawler)
    client = connect(redis_url)
    hash_key = middleware._key
    fresh, old = f"refused|{time.time():.0f}", f"refused|{time.time() - 601:.0f}"
    try:
        client.hset(hash_key, DOWN_FIELD + "http://a", fresh)
        client.hset(hash_key, DOWN_FIELD + "http://b", old)
        client.hset(hash_key, mapping={DOWN_FIELD + "http://c": fresh, "http://c": b"Allow: /"})
        assert middleware._shared("http://a") == (None, "refused")
        assert middleware._shared("http://b") == (None, None)  # too old: ask the host
        assert middleware._shared("http://c") == (b"Allow: /", None)  # it answered someone
        assert middleware._shared("http://d") == (None, None)
    finally:
        clear_namespace(client, f"dedup:{namespace}")

"""A hostile Redis under the distributed profile: blips, outages and lost replies.

Each test starts its own ``redis-server`` (no persistence) on a free port, never the shared one:
a SIGSTOP/SIGCONT of that process is a real hang (calls time out after
``REDIS_TIMEOUT_SECONDS``), killing it a real refusal. A blip shorter than
``REDIS_RETRY_SECONDS`` is waited out (every page stored once, nothing lost); a longer outage
ends the crawl with ``redis_error``, one ERROR line and no traceback. A small TCP proxy that
drops one reply and cuts the connection makes the ambiguous case real: the call ran, its reply
was lost, and the retry must not apply it twice.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import scrapy

from bench.cluster import Cluster, cluster_on, outcome, stat_sum, wait_for_hits
from bench.ownservers import OwnRedis
from crawler.backends.common import RedisBackendError, RedisRetry
from crawler.backends.redis import RedisContentIndex, RedisSeenSet, connect
from crawler.cluster.frontier import LeasedFrontier
from crawler.cluster.worker import Member
from crawler.meta import LEASE as LEASE_META
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web
from crawler.vocab import PageSignature

REDIS_SERVER = "/usr/bin/redis-server"
SETTINGS = {"REDIS_TIMEOUT_SECONDS": 1, "DOWNLOAD_DELAY": 0.05}


@pytest.fixture(params=[None], ids=["memory"])
def own_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OwnRedis]:
    """This test's ``redis-server``; indirect parameter ``"aof"``: with persistence."""
    server = OwnRedis(tmp_path / "aof" if request.param == "aof" else None)
    if request.param == "aof":
        (tmp_path / "aof").mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- end to end -----------------------------------------------------------------------------


@contextmanager
def two_workers(own: OwnRedis, pg_url: str, tmp: Path, **settings: Any) -> Iterator[
        tuple[Cluster, list[SiteServer]]]:  # fmt: skip
    """Two distributed workers crawling one small site through ``own``, mid-crawl."""
    with serve_web([template_site(60, seed=1)]) as servers, \
            cluster_on(servers, tmp, redis_url=own.url, pg_url=pg_url) as cluster:
        cluster.delay = SETTINGS["DOWNLOAD_DELAY"]
        for _ in range(2):
            cluster.start(**SETTINGS, **settings)
        wait_for_hits(servers, 0.3, timeout=60)
        yield cluster, servers


def logs(cluster: Cluster) -> list[str]:
    """Each worker's log file and stderr (read once it has exited)."""
    return [w.log + (w.proc.stderr.read() if w.proc.stderr else "") for w in cluster.workers]


def blip(own: OwnRedis, kind: str) -> None:
    """4 s without Redis: a hang (SIGSTOP: calls time out after 1 s), or a restart (refused
    connections; the append-only file keeps the data)."""
    if kind == "hang":
        own.signal(signal.SIGSTOP)
        time.sleep(4)
        own.signal(signal.SIGCONT)
    else:
        own.stop()
        time.sleep(4)
        own.start()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize(("own_redis", "kind"), [(None, "hang"), ("aof", "restart")],
                         ids=["hang", "restart"], indirect=["own_redis"])  # fmt: skip
def test_a_redis_blip_shorter_than_the_bound_is_waited_out(own_redis, kind, pg_url, tmp_path):
    with two_workers(own_redis, pg_url, tmp_path, REDIS_RETRY_SECONDS=20) as (cluster, servers):
        blip(own_redis, kind)
        cluster.wait(120)
        figures = outcome(cluster, servers)
        texts = logs(cluster)
        assert [w.proc.returncode for w in cluster.workers] == [0, 0], texts
        assert [w.stats.get("finish_reason") for w in cluster.workers] == ["finished"] * 2
        assert stat_sum(cluster, "dedup/redis_retries") > 0
        assert stat_sum(cluster, "dedup/redis_recovered") > 0
        assert stat_sum(cluster, "dedup/redis_error") == 0
    assert figures["pages_unfetched"] == 0 and figures["pages_undecided"] == 0, figures
    assert figures["stored"] > 0 and figures["stored_twice"] == 0, figures
    assert figures["stored_and_dropped"] == 0 and figures["duplicate_fetches"] == 0, figures
    assert figures["settled"], figures  # nothing queued or leased, no pending entry left
    for text in texts:
        assert "Traceback" not in text and " ERROR: " not in text, text[-3000:]
        assert text.count("retrying for up to 20s (REDIS_RETRY_SECONDS)") == 1


@pytest.mark.slow
@pytest.mark.redis
def cause_errors(text: str) -> int:
    """ERROR lines of a worker's log file but the two the ``crawl`` command adds at the end
    (``crawl stopped early: …``, ``exit status 1: …``: scrapyd keeps no exit status)."""
    lines = [line for line in text.splitlines() if " ERROR: " in line]
    closing = [line for line in lines if "[crawler.commands.crawl]" in line]
    assert len(closing) == 2 and "crawl stopped early: redis_error" in closing[0]
    return len(lines) - len(closing)


@pytest.mark.postgres
def test_an_outage_longer_than_the_bound_ends_with_one_error_line(own_redis, pg_url, tmp_path):
    with two_workers(own_redis, pg_url, tmp_path, REDIS_RETRY_SECONDS=2) as (cluster, servers):
        own_redis.stop()  # refused from now on, for longer than the bound
        cluster.wait(60)
        texts = logs(cluster)
        own_redis.start()  # empty again (no persistence): for the cleanup only
        stored = outcome(cluster, servers)["stored_twice"]
    assert [w.proc.returncode for w in cluster.workers] == [1, 1], texts
    assert [w.stats.get("finish_reason") for w in cluster.workers] == ["redis_error"] * 2
    assert stat_sum(cluster, "dedup/redis_retries") > 0
    assert stored == 0
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
        assert cause_errors(text) == 1, text[-3000:]
        assert "Closing the spider (redis_error)" in text


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_redis_back_without_its_data_ends_the_crawl_not_finished(own_redis, pg_url, tmp_path):
    """Restarted within the bound but empty (no persistence): the frontier reads empty, which
    must not pass for a finished crawl."""
    with two_workers(own_redis, pg_url, tmp_path, REDIS_RETRY_SECONDS=20) as (cluster, servers):
        own_redis.stop()
        time.sleep(1)
        own_redis.start()
        cluster.wait(60)
        texts = logs(cluster)
        stored_twice = outcome(cluster, servers)["stored_twice"]
    assert [w.proc.returncode for w in cluster.workers] == [1, 1], texts
    assert [w.stats.get("finish_reason") for w in cluster.workers] == ["redis_error"] * 2
    assert stored_twice == 0
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
        assert cause_errors(text) == 1, text[-3000:]
        assert "KEYSGONE" in text or "keys are gone" in text


# --- a reply lost after the call ran ---------------------------------------------------------


class ReplyDropper:
    """A TCP proxy to Redis that, once :meth:`arm` ed, swallows the next reply and closes both
    connections: the command ran, the client sees a connection error."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.armed = threading.Event()
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.armed.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def dropper(own_redis) -> Iterator[ReplyDropper]:
    proxy = ReplyDropper(own_redis.port)
    yield proxy
    proxy.close()


def frontier_on(url: str) -> LeasedFrontier:
    client = connect(url, timeout=2)
    frontier = LeasedFrontier(client, None, "t:web:requests", url=url)
    frontier.retrying(RedisRetry(5.0, 2.0))
    frontier.worker = "w1"
    client.zadd(f"{frontier.workers_key}", {"w1": 2**50})  # a member for a long while
    return frontier


def meta(url: str) -> list[int]:
    values = connect(url).hmget("t:web:requests:meta", ["queued", "leased"])
    return [int(v or 0) for v in values]


def test_a_push_whose_reply_was_lost_is_queued_once(own_redis, dropper):
    frontier = frontier_on(dropper.url)
    frontier.push_new(scrapy.Request("http://a.test/warm", dont_filter=True))
    dropper.arm()
    assert frontier.push_new(scrapy.Request("http://a.test/x", dont_filter=True))
    assert dropper.dropped == 1
    assert meta(own_redis.url) == [2, 0]  # not 3: the replay queued nothing


def test_a_pop_whose_reply_was_lost_leases_the_same_requests(own_redis, dropper):
    frontier = frontier_on(dropper.url)
    for i in range(6):
        frontier.push_new(scrapy.Request(f"http://a.test/{i}", dont_filter=True))
    dropper.arm()
    requests, _ = frontier.pop_many(2)
    assert dropper.dropped == 1
    assert [r.url for r in requests] == ["http://a.test/0", "http://a.test/1"]
    assert meta(own_redis.url) == [4, 2]  # not [2, 4]: no lease nobody knows of
    assert sorted(frontier.held_by("w1")) == sorted(r.meta[LEASE_META] for r in requests)
    again, _ = frontier.pop_many(2)  # a new pop takes the next ones
    assert [r.url for r in again] == ["http://a.test/2", "http://a.test/3"]


def test_a_decision_whose_reply_was_lost_keeps_the_page(own_redis, dropper):
    index = RedisContentIndex(connect(dropper.url, timeout=2), "t", url=dropper.url,
                              owner="w1").retrying(RedisRetry(5.0, 2.0))  # fmt: skip
    page = PageSignature("http://a.test/p", "http://a.test/p", "c7", 0xABCDEF)
    dropper.arm()
    assert index.check_and_add(page) is None  # the replay is the page itself, not a duplicate
    assert dropper.dropped == 1
    other = PageSignature("http://a.test/q", "http://a.test/q", "c7", 0xABCDEF)
    match = index.check_and_add(other)
    assert match is not None and match.url == "http://a.test/p"


def test_a_bloom_add_whose_reply_was_lost_still_says_new(own_redis, dropper):
    """Replayed, the add would answer "present": a new URL dropped as a duplicate."""
    seen = RedisSeenSet(connect(dropper.url, timeout=2), "t:seen", capacity=1000,
                        url=dropper.url)  # fmt: skip
    seen.retrying(RedisRetry(5.0, 2.0))
    assert seen.add(b"k" * 16) is False
    dropper.arm()
    assert seen.add(b"j" * 16) is False  # new, though the first run had recorded it
    assert dropper.dropped == 1
    assert len(seen) == 2 and seen.add(b"j" * 16) is True


def test_retries_stop_at_the_bound_and_then_fail_at_once(own_redis):
    seen = RedisSeenSet(connect(own_redis.url, timeout=1), "t:seen", capacity=1000,
                        url=own_redis.url)  # fmt: skip
    policy = RedisRetry(1.0, 1.0)
    seen.retrying(policy)
    own_redis.stop()
    started = time.monotonic()
    with pytest.raises(RedisBackendError, match="is unavailable"):
        seen.add(b"k" * 16)
    assert 0.9 <= time.monotonic() - started < 5
    assert policy.given_up
    started = time.monotonic()
    with pytest.raises(RedisBackendError):
        seen.add(b"j" * 16)
    assert time.monotonic() - started < 0.5  # the crawl is closing: no second wait


def test_a_lease_expired_in_an_outage_is_renewed_unless_reported_dead(own_redis):
    """Redis away longer than the lease: nobody could reclaim, so the late renewal keeps it;
    once another worker's renewal has reported it dead, it is fenced and lost for good."""
    late, reported, live = (Member(connect(own_redis.url), "t", 0.3, url=own_redis.url)
                            for _ in range(3))  # fmt: skip
    late.beat()
    reported.beat()
    time.sleep(0.5)  # both expired, as after an outage longer than the lease
    late.beat()
    assert late.revived and not late.lost
    live.beat(report=False)  # just back from an outage itself: reports nobody
    assert reported.id in live.beat()  # now reported, and fenced
    reported.beat()
    assert reported.lost and not reported.revived

"""The scale-out profile end to end: three crawler processes on a web of four hosts, sharing the
real Redis and PostgreSQL, with workers SIGKILLed, replaced and joining mid-crawl.

The harness is :mod:`bench.cluster` (which reports the same figures as a benchmark). Every
scenario ends with the same checks (:func:`check`): every page of the web fetched, every HTML
page stored once or dropped against a stored page (in the table and in every drop log, the
killed workers' included), no page fetched twice beyond the requests the killed workers held,
robots.txt fetched once per host, no two requests of two workers to one host closer than
``DOWNLOAD_DELAY``, and the shared state settled (nothing queued or leased, no pending entry).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from typing import Any

import pytest
import scrapy
from scrapy.utils.request import request_from_dict

from bench.cluster import (
    DELAY,
    Cluster,
    close_requests,
    cluster_on,
    four_sites,
    kept_twice,
    local_crawl,
    outcome,
    polite_sites,
    stat_sum,
    stored_canonical,
    wait_for_hits,
)
from crawler.backends.redis import connect
from crawler.cluster import serializer
from crawler.sitegen.server import SiteServer, serve_web
from tests.conftest import ROOT


def test_request_round_trips_through_json():
    request = scrapy.Request(
        "http://example.com/a?b=1",
        headers={"Accept": "text/html", b"X-Raw": b"\xff\x00"},
        body=b"\x00\x01binary",
        meta={"canonical_url": "http://example.com/a?b=1", "depth": 2, "$b": "not bytes"},
        priority=-3,
        flags=["x"],
    )
    data = serializer.dumps(request.to_dict())
    json.loads(data)  # plain JSON, nothing executable
    again = request_from_dict(serializer.loads(data.encode()))
    assert again.to_dict() == request.to_dict()
    assert again.body == b"\x00\x01binary"
    assert again.headers[b"X-Raw"] == b"\xff\x00"


def test_non_json_meta_is_refused_with_its_place():
    request = scrapy.Request("http://example.com/", meta={"handle": object()})
    with pytest.raises(TypeError, match=r"request\['meta'\]\['handle'\].*never pickles"):
        serializer.dumps(request.to_dict())


def test_profile_settings(monkeypatch):
    monkeypatch.setenv("DEDUP_NAMESPACE", "crawl-42")
    monkeypatch.setenv("DEDUP_REDIS_URL", "redis://10.0.0.1:6379/3")
    code = (
        "import json, settings.distributed as d; print(json.dumps({k: getattr(d, k) for k in "
        "['SCHEDULER', 'SCHEDULER_SERIALIZER', 'SCHEDULER_PERSIST', 'DUPEFILTER_CLASS', "
        "'DEDUP_BACKEND', 'REDIS_URL', 'STORAGE_URL', 'SCHEDULER_QUEUE_KEY', "
        "'TELNETCONSOLE_ENABLED', 'ITEM_PIPELINES', 'EXTENSIONS', 'DOWNLOADER_MIDDLEWARES']}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    values = json.loads(out.stdout)
    assert values["SCHEDULER"] == "crawler.cluster.scheduler.SharedScheduler"
    assert values["SCHEDULER_SERIALIZER"] == "crawler.cluster.serializer"
    assert values["SCHEDULER_PERSIST"] is True
    assert values["DUPEFILTER_CLASS"] == "crawler.dupefilter.BloomDupeFilter"
    assert values["DEDUP_BACKEND"] == "redis"
    assert values["REDIS_URL"] == "redis://10.0.0.1:6379/3"
    assert values["STORAGE_URL"].startswith("postgresql+psycopg://")
    assert values["SCHEDULER_QUEUE_KEY"] == "%(namespace)s:%(spider)s:requests"  # queue_key()
    assert values["TELNETCONSOLE_ENABLED"] is False
    assert "crawler.pipelines.neardup.NearDuplicatePipeline" in values["ITEM_PIPELINES"]
    assert "crawler.cluster.worker.ClusterWorker" in values["EXTENSIONS"]
    middlewares = values["DOWNLOADER_MIDDLEWARES"]
    assert middlewares["scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"] is None
    assert "crawler.middlewares.politeness.SharedRobotsTxtMiddleware" in middlewares


# --- the web: four hosts on loopback addresses --------------------------------------------------


def check(figures: dict[str, Any], killed: int = 0) -> None:
    """The guarantees of the distributed profile (module docstring), on :func:`outcome`."""
    assert figures["killed"] == killed
    assert figures["failed_workers"] == 0 and figures["log_problems"] == 0, figures
    assert figures["orphaned"] == 0
    assert figures["pages_unfetched"] == 0 and figures["pages_undecided"] == 0, figures
    assert figures["duplicate_fetches"] <= figures["killed_inflight"], figures
    assert figures["robots_fetches_max"] == 1  # once per host per crawl
    assert figures["stored_twice"] == 0 and figures["stored_and_dropped"] == 0, figures
    # the drop log holds committed drops only; a kill between a commit and the log write (one
    # reactor turn) can leave a committed drop out of the killed worker's log, never the reverse
    assert figures["drops"] > 0 and figures["log_drops_not_in_table"] == 0, figures
    assert figures["log_drops"] <= figures["drops"], figures
    if not killed:  # the logs, read start to end, give the table
        assert figures["log_drops"] == figures["drops"], figures
        assert figures["log_disagrees"] == 0, figures
    assert figures["drops_against_unstored"] == 0, figures
    assert figures["log_drops_against_unstored"] == 0, figures
    assert figures["close_across_workers"] == 0, (  # a host changes hands politely
        figures["close_across_examples"], figures["min_gap"])
    assert figures["settled"], figures  # nothing queued or leased, no pending entry left
    assert figures["members_left"] <= killed  # every worker that left cleanly is gone


def run(cluster: Cluster, servers: list[SiteServer]) -> dict[str, Any]:
    cluster.wait()
    for worker in cluster.workers:
        if not worker.killed and worker.proc.returncode != 0:
            raise AssertionError(worker.proc.stderr.read()[-2000:] + worker.log[-3000:])
        assert "Traceback" not in worker.log, worker.log[-3000:]
    return outcome(cluster, servers)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_three_workers_decide_like_one_process(services, tmp_path):
    with serve_web(four_sites()) as servers:
        stored = local_crawl(servers, tmp_path / "one", DOWNLOAD_DELAY=DELAY,
                             CONCURRENT_REQUESTS_PER_DOMAIN=2)  # fmt: skip
        groups, one_process = kept_twice(servers, stored)
        for server in servers:
            server.reset_hits()
        with cluster_on(servers, tmp_path / "three", **services) as cluster:
            for _ in range(3):
                cluster.start()
            figures = run(cluster, servers)
            three = stored_canonical(cluster.storage_url)
    check(figures)
    assert three == stored  # the same pages stored, whatever the number of workers
    assert figures["duplicate_fetches"] == 0
    assert all(n > 0 for n in figures["responses"]), figures["responses"]  # every worker worked
    assert groups == figures["groups"] > 40
    assert figures["kept_twice"] <= one_process, (figures, one_process)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_three_workers_are_as_polite_as_one_crawler(services, tmp_path):
    """DOWNLOAD_DELAY d holds for the whole crawl: with one request at a time per host, the
    server sees no two requests to one host closer than d (stamped by the server), in one process
    and with three workers, not d per worker. (With several requests per host in flight, Scrapy
    dispatches one a delay after the previous one was dispatched; one that opens a connection
    reaches the server a connection setup later: the same in one process.)"""
    with serve_web(polite_sites()) as servers:
        local_crawl(servers, tmp_path / "one", DOWNLOAD_DELAY=0.1,
                    CONCURRENT_REQUESTS_PER_DOMAIN=1)  # fmt: skip
        for server in servers:
            assert close_requests(server, 0.1) == [], server.base_url
            server.reset_hits()
        with cluster_on(servers, tmp_path / "three", **services) as cluster:
            cluster.delay = 0.1
            for _ in range(3):
                cluster.start(CONCURRENT_REQUESTS_PER_DOMAIN=1)
            figures = run(cluster, servers)
        check(figures)
        for server in servers:
            low = close_requests(server, 0.1)
            assert low == [], (server.base_url, low)
    assert sum(1 for n in figures["responses"] if n > 0) >= 2


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("replace", [True, False], ids=["replaced", "not_replaced"])
def test_a_worker_killed_at_a_random_moment(services, tmp_path, replace):
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        for _ in range(3):
            cluster.start()
        wait_for_hits(servers, random.uniform(0.2, 0.6))
        cluster.kill(cluster.busiest())
        if replace:
            cluster.start()
        figures = run(cluster, servers)
    check(figures, killed=1)
    assert figures["killed_inflight"] > 0
    assert stat_sum(cluster, "dedup/shared/workers_reclaimed") == 1


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_two_workers_killed_in_a_row(services, tmp_path):
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        for _ in range(3):
            cluster.start()
        wait_for_hits(servers, 0.25)
        cluster.kill(cluster.busiest())
        wait_for_hits(servers, 0.5)
        cluster.kill(cluster.busiest())
        figures = run(cluster, servers)
    check(figures, killed=2)  # "settled": what both dead held was reclaimed
    # (a reclaimer may be the second victim, whose stats die with it)
    assert stat_sum(cluster, "dedup/shared/workers_reclaimed") >= 1


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_every_worker_killed_then_one_started_finishes_the_crawl(services, tmp_path):
    """A crash of the whole cluster: the namespace in Redis is the crawl's journal. A worker
    started later reclaims the dead ones and finishes the crawl with nothing lost."""
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        cluster.start()
        cluster.start()
        wait_for_hits(servers, 0.4)
        for worker in list(cluster.workers):
            cluster.kill(worker)
        late = cluster.start()
        figures = run(cluster, servers)
    check(figures, killed=2)
    assert late.stats["dedup/shared/workers_reclaimed"] >= 1  # both, unless one held nothing
    assert late.stats["downloader/response_count"] > 10


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_worker_killed_holding_leases_and_pending_index_entries(services, tmp_path):
    """The victim never commits (a 60 s storage batch): when it dies, the pages it kept are in
    the index only as pending entries. They must leave the index, their duplicates elsewhere
    must be decided again, and the victim's pages fetched again."""
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        victim = cluster.start(STORAGE_BATCH_SECONDS=60, STORAGE_BATCH_SIZE=100_000)
        client = connect(cluster.redis_url)
        pending = f"{cluster.base}:ci:pw:{cluster.member_id(victim)}"
        cluster.start()
        cluster.start()
        deadline = time.monotonic() + 120
        while client.hlen(pending) < 20:
            assert time.monotonic() < deadline and victim.proc.poll() is None
            time.sleep(0.02)
        held = cluster.held(victim)
        cluster.kill(victim)
        figures = run(cluster, servers)
    check(figures, killed=1)
    assert held > 0
    assert stat_sum(cluster, "dedup/shared/index_reclaimed") >= 20
    assert client.exists(pending) == 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_worker_joining_mid_crawl_takes_a_share(services, tmp_path):
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        # a crawl long enough that 70% of it outlasts a worker's start-up (a few seconds on a
        # busy machine; at DELAY the two first workers finish the web about then)
        cluster.delay = 0.1
        cluster.start()
        cluster.start()
        wait_for_hits(servers, 0.3)
        joiner = cluster.start()
        figures = run(cluster, servers)
    check(figures)
    assert joiner.stats["downloader/response_count"] > 10


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_an_idle_worker_writes_its_storage_batch_at_once(services, tmp_path):
    """A worker that is idle while pages wait in its storage batch writes them at once: their
    leases keep the whole crawl open until committed. With a batch interval far longer than the
    crawl the worker still finishes, with every guarantee (it would otherwise wait an hour: the
    pipeline is not idle, so the leases are not orphans either). One worker: two could each
    hold a page waiting on the other's pending entry, and neither would be idle. A lease of
    30 s: the harness's 3 s is lost to a stall of the shared machine (one worker: nobody would
    take over)."""
    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        cluster.delay = 0.0
        worker = cluster.start(STORAGE_BATCH_SECONDS=3600, STORAGE_BATCH_SIZE=100_000,
                               DISTRIBUTED_LEASE_SECONDS=30)  # fmt: skip
        cluster.wait(timeout=180)
        figures = run(cluster, servers)
    assert worker.stats["finish_reason"] == "finished"
    check(figures)
    assert stat_sum(cluster, "dedup/shared/idle_flushes") >= 1

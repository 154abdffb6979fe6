"""Dedup that is not a race (issue 22): one generated web (:mod:`crawler.sitegen.orderweb`:
same-origin and cross-site mirrors at 1-3 bits, byte copies, canonical copies, a duplicate
listing hiding distinct notes) crawled by real ``scrapy crawl web`` processes in several fetch
orders (seed order, requests in flight, random priorities) and by three workers with one
SIGKILLed: every crawl stores the same pages, every distinct page (the notes behind the dropped
listing included), one page per duplicate group, and its drop log replays to its table."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.cluster import cluster_on, stored_canonical, wait_for_hits
from crawler.outputs.droplog import read_drop_log, replay_drop_log
from crawler.sitegen.orderweb import Member, OrderWeb, order_web
from crawler.sitegen.server import SiteServer, serve_web
from crawler.urls.urlnorm import normalize_url
from tests.conftest import CrawlRun, run_crawl

ORDERS: dict[str, tuple[tuple[str, ...], dict[str, Any], str]] = {
    # name: (seed order, settings, ORDER_PRIORITY_SEED or "")
    "seeds-a-b-c": (("a", "b", "c"), {}, ""),
    "seeds-c-b-a-one-at-a-time-fifo": (("c", "b", "a"), {
        "CONCURRENT_REQUESTS": 1, "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"},
        ""),
    "random-priorities-32": (("a", "b", "c"), {"CONCURRENT_REQUESTS": 32,
                                          "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
                                          "SPIDER_MIDDLEWARES": json.dumps(
                                              {"tests.orderhelpers.RandomPriority": 950})}, "7"),
    "random-priorities-2": (("b", "c", "a"), {"CONCURRENT_REQUESTS": 2,
                                         "SPIDER_MIDDLEWARES": json.dumps(
                                             {"tests.orderhelpers.RandomPriority": 950})}, "11"),
}


@pytest.fixture(scope="module")
def web() -> OrderWeb:
    return order_web()


@pytest.fixture(scope="module")
def servers(web: OrderWeb) -> Iterator[dict[str, SiteServer]]:
    with serve_web([web.a, web.b, web.c]) as (a, b, c):  # three hosts (download slots)
        yield {"a": a, "b": b, "c": c}


def members(urls: set[str], servers: dict[str, SiteServer]) -> set[Member]:
    """Stored canonical URLs as ``(site, path)``."""
    sites = {urlsplit(normalize_url(s.base_url + "/")).netloc: name
             for name, s in servers.items()}
    return {(sites[urlsplit(u).netloc], urlsplit(u).path) for u in urls}


def agents_seen(servers: dict[str, SiteServer]) -> set[str]:
    """The User-Agents (one per worker) the sites have answered."""
    return {agent for s in servers.values() for _, _, agent in list(s.requests)}


def crawl_in(order: str, tmp: Path, servers: dict[str, SiteServer]) -> tuple[CrawlRun, set[Member]]:
    seeds, settings, priority_seed = ORDERS[order]
    env = {"ORDER_PRIORITY_SEED": priority_seed} if priority_seed else None
    run = run_crawl(tmp / order, urls=[servers[s].url("/") for s in seeds],
                    settings={"ROBOTSTXT_OBEY": False, **settings}, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    stored = members({c for (c,) in run.rows("SELECT canonical_url FROM documents")}, servers)
    return run, stored


def check_store(web: OrderWeb, stored: set[Member]) -> None:
    """Every distinct page stored; exactly one page of each duplicate group; nothing else."""
    assert web.singles and web.groups
    missing = web.singles - stored
    assert not missing, sorted(missing)
    for group in web.groups:
        assert len(group & stored) == 1, (sorted(group), sorted(group & stored))
    assert stored <= web.singles | web.grouped()


def check_replay(run: CrawlRun) -> None:
    """The drop log, read start to end, gives the table's final state."""
    table = {(c, u): (r, o, d) for c, u, r, o, d in run.rows(
        "SELECT crawl_id, url, reason, duplicate_of, distance FROM dropped")}
    log = {key: (r["reason"], r["duplicate_of"], r["distance"])
           for key, r in replay_drop_log(read_drop_log(run.dropped_log)).items()}
    assert table and log == table


@pytest.mark.slow
def test_every_fetch_order_stores_the_same_pages(web, servers, tmp_path) -> None:
    outcomes: dict[str, set[Member]] = {}
    followed = 0
    for order in ORDERS:
        run, stored = crawl_in(order, tmp_path, servers)
        check_store(web, stored)
        check_replay(run)
        assert run.stats["dedup/summary/pages_stored"] == len(stored)  # the summary agrees
        notes = {m for m in stored if m[1].startswith(("/notes-a/", "/notes-b/"))
                 and m[1].rstrip("/").rsplit("/", 1)[1].isdigit()}
        assert len(notes) == 24  # the notes behind the dropped listing too
        followed += run.stats.get("dedup/links_followed_from/exact_duplicate", 0)
        outcomes[order] = stored
    # the FIFO order meets /notes-b/ after /notes-a/: dropped, its notes fetched all the same
    assert followed >= 1
    for (a, sa), (b, sb) in itertools.combinations(outcomes.items(), 2):
        assert sa == sb, (a, b, sorted(sa ^ sb))


@pytest.mark.slow
def test_without_duplicate_hops_the_notes_behind_a_duplicate_listing_are_lost(
        web, servers, tmp_path) -> None:
    """What TRAP_DUPLICATE_HOPS = 1 fixes: with 0 (only kept pages' links followed) the notes
    of the listing met second are never fetched (one request at a time, first in first out:
    ``/notes-a/`` comes first and is the preferred copy, ``/notes-b/`` is dropped)."""
    run = run_crawl(tmp_path / "hops0", urls=[s.url("/") for s in servers.values()],
                    settings={"ROBOTSTXT_OBEY": False, "TRAP_DUPLICATE_HOPS": 0,
                              "CONCURRENT_REQUESTS": 1,
                              "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"})
    assert run.returncode == 0, run.stderr[-3000:]
    stored = members({c for (c,) in run.rows("SELECT canonical_url FROM documents")}, servers)
    lost = web.singles - stored
    assert lost == {("a", f"/notes-b/{n}") for n in range(1, 13)}
    assert run.stats["dedup/links_not_followed/exact_duplicate"] >= 1


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_three_workers_with_a_kill_store_what_one_process_stores(web, servers, tmp_path,
                                                                 redis_url, pg_url) -> None:
    _, one = crawl_in("seeds-a-b-c", tmp_path, servers)
    for server in servers.values():
        server.reset_hits()
    with cluster_on(list(servers.values()), tmp_path / "cluster", redis_url, pg_url) as cluster:
        for _ in range(3):
            cluster.start(TRAP_FOLLOW_LINKS_OF="kept", ROBOTSTXT_OBEY=False,
                          DOWNLOAD_DELAY=0.25)  # hosts b and c last ~6 s: time to steal
        wait_for_hits(list(servers.values()), 0.25)
        every = {f"worker-{n}" for n in range(3)}
        deadline = time.monotonic() + 60  # the third worker steals a host once it has joined
        while not every <= agents_seen(servers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert every <= agents_seen(servers), agents_seen(servers)  # every worker works
        cluster.kill(cluster.busiest())
        cluster.wait()
        for worker in cluster.workers:
            assert worker.killed or worker.proc.returncode == 0, worker.log[-3000:]
        three = members(stored_canonical(cluster.storage_url), servers)
    assert sum(1 for w in cluster.workers if w.killed) == 1
    check_store(web, three)
    assert three == one, sorted(three ^ one)

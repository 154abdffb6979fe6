"""Idle keep-alive connections are capped across all hosts
(:class:`crawler.middlewares.politeness.IdleCappedPool`).

Twisted's pool keeps up to the per-host limit of idle connections for every host for 240 s,
so a crawl of many hosts held a file descriptor for each host it had finished with; under an
open-file limit the crawl's later connections failed ("Too many open files", Twisted's
``ConnectBindError``). The pool now keeps at most a quarter of the limit idle, closing the
connection idle longest. A real crawl of many hosts (one per loopback address) under a low
limit, and the pool itself on real Twisted protocols and transports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web._newclient import HTTP11ClientProtocol

from bench.crawl import multi_host_sites
from crawler.middlewares.politeness import IDLE_CLOSED_STAT, IdleCappedPool, idle_connections_max
from crawler.sitegen.server import serve_web
from tests.conftest import run_crawl

HOSTS = 100
PAGES_PER_HOST = 4
OPEN_FILES = 96  # idle cap 24: what the crawl needs besides idle connections fits, 100 idle not


def _crawl(tmp_path: Path, servers: list[Any], open_files: int | None) -> Any:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(s.base_url + "/\n" for s in servers))
    run = run_crawl(tmp_path / "run", seeds=seeds, timeout=240, open_files=open_files,
                    settings={"CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                              "TRAP_SOFT404_PROBE": False})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    return run


@pytest.mark.parametrize("open_files", [OPEN_FILES, None])
def test_a_crawl_of_many_hosts_fits_its_open_file_limit(tmp_path: Path,
                                                        open_files: int | None) -> None:
    """100 hosts of a home page and 4 pages, each left idle once crawled: under a limit of 96
    open files every page is fetched without a connection error (before: idle connections to
    finished hosts used up the descriptors and the crawl failed), the cap closing idle ones
    (counted, logged once); under the machine's own limit nothing is closed."""
    with serve_web(multi_host_sites(HOSTS * PAGES_PER_HOST, 3, HOSTS)) as servers:
        run = _crawl(tmp_path, servers, open_files)
        fetched = {(s.base_url, path) for s in servers for path in s.hits if path != "/robots.txt"}
    assert len(fetched) == HOSTS * (PAGES_PER_HOST + 1)  # and each home page
    assert run.stats["response_received_count"] == HOSTS * (PAGES_PER_HOST + 2)  # + robots.txt
    assert not {k: v for k, v in run.stats.items() if k.startswith("downloader/exception")}
    if open_files is None:
        assert IDLE_CLOSED_STAT not in run.stats
    else:
        assert run.stats[IDLE_CLOSED_STAT] >= HOSTS - OPEN_FILES // 4
        assert run.stderr.count("Idle connections kept at most 24 across all hosts") == 1


def _pool(max_idle: int) -> tuple[IdleCappedPool, Clock]:
    clock = Clock()
    pool = IdleCappedPool(clock, persistent=True)
    pool.maxPersistentPerHost = 2
    pool.max_idle = max_idle
    return pool, clock


def _idle_connection() -> HTTP11ClientProtocol:
    protocol = HTTP11ClientProtocol()
    protocol.makeConnection(StringTransport())
    assert protocol.state == "QUIESCENT"
    return protocol


def test_the_pool_closes_the_connection_idle_longest_past_its_cap() -> None:
    """Cap 3: a fourth idle connection closes the one idle longest, whatever its host; a host
    whose last idle connection is closed leaves the pool (no entry per host ever crawled)."""
    pool, _ = _pool(max_idle=3)
    conns = {name: _idle_connection() for name in ("a1", "b1", "a2", "c1")}
    for name, conn in conns.items():
        pool._putConnection(("http", name[0], 80), conn)
    assert conns["a1"].transport.disconnecting  # idle longest
    assert not any(conns[n].transport.disconnecting for n in ("b1", "a2", "c1"))
    assert len(pool._timeouts) == 3 and pool.closed == 1
    pool._putConnection(("http", "d", 80), _idle_connection())
    assert conns["b1"].transport.disconnecting
    assert ("http", "b", 80) not in pool._connections  # its only idle connection went
    assert sorted(key[1] for key in pool._connections) == ["a", "c", "d"]


def test_a_connection_taken_again_is_not_closed_and_timeouts_still_expire() -> None:
    """A connection taken for a request leaves the idle set (the cap counts idle ones only);
    Twisted's own idle timeout still closes the rest, and their hosts leave the pool."""
    pool, clock = _pool(max_idle=2)
    first, second = _idle_connection(), _idle_connection()
    pool._putConnection(("http", "a", 80), first)
    pool._putConnection(("http", "b", 80), second)
    taken = []
    pool.getConnection(("http", "a", 80), None).addCallback(taken.append)
    assert taken and taken[0]._clientProtocol is first  # wrapped to retry a stale connection
    pool._putConnection(("http", "c", 80), _idle_connection())
    assert not first.transport.disconnecting and not second.transport.disconnecting
    assert pool.closed == 0
    clock.advance(pool.cachedConnectionTimeout + 1)
    assert second.transport.disconnecting
    assert pool._connections == {("http", "a", 80): []}  # emptied by getConnection, not removed


def test_no_cap_without_an_open_file_limit_to_keep() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = 0 if soft == resource.RLIM_INFINITY else max(8, soft // 4)
    assert idle_connections_max() == expected
    pool, _ = _pool(max_idle=0)
    conns = [_idle_connection() for _ in range(40)]
    for i, conn in enumerate(conns):
        pool._putConnection(("http", f"h{i}", 80), conn)
    assert not any(c.transport.disconnecting for c in conns) and len(pool._timeouts) == 40

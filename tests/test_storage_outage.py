"""The crawl database goes away under two distributed workers (issue 23, fault 1).

Each test runs its own PostgreSQL (:mod:`bench.ownservers`: ``initdb``, a free port) and stops it
mid-crawl with ``pg_ctl -m immediate`` (a crash: connections cut, new ones refused), then starts
it again. Shorter than the retry bound, the outage costs nothing: both workers finish (exit 0),
every page of the web is fetched and decided, no drop names a page storage does not hold, no
lease or pending entry is left. Longer than the bound, both workers stop with ``storage_error``
(exit 1, no traceback) instead of hanging on each other's pending pages, and a second pair of
workers finishes the crawl with nothing lost: the pages left undecided went back to the queue.
The web: a site and its mirror on two hosts (cross-host duplicates, so a worker reads the other
worker's kept pages from storage) and a third site.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.cluster import Cluster, cluster_on, outcome, stat_sum, wait_for_hits
from bench.ownservers import NoServer, OwnPostgres
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web

pytestmark = [pytest.mark.slow, pytest.mark.redis]

DELAY = 0.05
COMMON = {"DOWNLOAD_DELAY": DELAY, "STORAGE_BATCH_SECONDS": 0.3}


@pytest.fixture
def own_pg() -> Iterator[OwnPostgres]:
    try:
        server = OwnPostgres()
    except NoServer as exc:
        pytest.skip(str(exc))
    try:
        server.start()
        yield server
    finally:
        server.remove()


def outage_web() -> list[Any]:
    return [template_site(60, seed=11), template_site(60, seed=11), template_site(40, seed=12)]


def texts(cluster: Cluster) -> list[str]:
    return [w.log + (w.proc.stderr.read() if w.proc.stderr else "") for w in cluster.workers]


def cut(own_pg: OwnPostgres, servers: list[SiteServer], seconds: float) -> None:
    """Mid-crawl (a third of the web answered), the database crashes for ``seconds``."""
    wait_for_hits(servers, 0.3, timeout=90)
    own_pg.stop("immediate")
    time.sleep(seconds)
    own_pg.start()


def assert_nothing_lost(figures: dict[str, Any]) -> None:
    assert figures["pages_unfetched"] == 0, figures
    assert figures["pages_undecided"] == 0, figures
    assert figures["drops_against_unstored"] == 0, figures
    assert figures["log_drops_against_unstored"] == 0, figures
    assert figures["stored_and_dropped"] == 0, figures
    assert figures["orphaned"] == 0, figures
    assert figures["settled"], figures


def test_an_outage_within_the_retry_bound_is_waited_out(own_pg, tmp_path):
    with serve_web(outage_web()) as servers, \
            cluster_on(servers, tmp_path, pg_url=own_pg.url) as cluster:
        cluster.delay = DELAY
        for _ in range(2):
            cluster.start(**COMMON, STORAGE_RETRY_TIMES=6, STORAGE_RETRY_BACKOFF=0.5)
        cut(own_pg, servers, 6)
        cluster.wait(240)
        logs = texts(cluster)
        figures = outcome(cluster, servers)
        assert [w.proc.returncode for w in cluster.workers] == [0, 0], logs
        assert all(r > 0 for r in figures["responses"]), figures  # both workers crawled
        # the outage was met: writes or reads failed and were retried
        assert stat_sum(cluster, "storage/errors") + stat_sum(
            cluster, "dedup/storage_error/read_retries") > 0, logs
        assert not any("Traceback" in t for t in logs), logs
        assert stat_sum(cluster, "dedup/storage_error/undecided") == 0
        assert_nothing_lost(figures)


def test_an_outage_past_the_bound_stops_both_workers_and_loses_nothing(own_pg, tmp_path):
    with serve_web(outage_web()) as servers, \
            cluster_on(servers, tmp_path, pg_url=own_pg.url) as cluster:
        cluster.delay = DELAY
        for _ in range(2):
            cluster.start(**COMMON, STORAGE_RETRY_TIMES=1, STORAGE_RETRY_BACKOFF=0.5)
        wait_for_hits(servers, 0.3, timeout=90)
        own_pg.stop("immediate")
        try:  # never a hang: both stop on their own while the database is still down
            cluster.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail("a worker hung while its database was down:\n" + "\n".join(
                w.log[-3000:] for w in cluster.workers))
        first = texts(cluster)
        assert [w.proc.returncode for w in cluster.workers] == [1, 1], first
        for log in first:
            assert "storage_error" in log
            assert "Traceback" not in log, log
        own_pg.start()
        for _ in range(2):  # the same crawl, once the database is back
            cluster.start(**COMMON)
        cluster.wait(240)
        logs = texts(cluster)
        assert [w.proc.returncode for w in cluster.workers[2:]] == [0, 0], logs[2:]
        assert_nothing_lost(outcome(cluster, servers))

"""The cluster view end to end: three distributed workers on a web of four hosts (the harness of
:mod:`bench.cluster`, real Redis and PostgreSQL), looked at with ``scrapy crawlstatus`` (a
subprocess, as an operator runs it) while they crawl and once they are done.

* mid-crawl the view shows a running crawl with work queued or leased and live workers;
* at the end its totals (summed from the records every worker publishes in Redis) equal the
  database's rows for the crawl, every worker is listed with pages > 0, the state is
  ``finished``, and ``--list`` shows the namespace;
* one worker (the last out) logs the whole crawl's summary; the progress lines count the whole
  crawl; every worker's own summary names the shared Bloom filter's count (it said
  ``0 URLs`` when the filter was read only at start: issue 24);
* all workers paused (SIGSTOP) past their lease: a ``stopped`` crawl whose members are dead;
* bad input: an unknown namespace is one line, exit 2; an unreachable Redis one line, exit 1.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from bench.cluster import LEASE, Cluster, cluster_on, four_sites, polite_sites, wait_for_hits
from crawler.backends.redis import clear_namespace, connect
from crawler.sitegen.server import serve_web
from crawler.storage import Store
from tests.conftest import ROOT


def crawlstatus(cluster: Cluster, *args: str, env: dict[str, str] | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([sys.executable, "-m", "scrapy", "crawlstatus", *args], cwd=ROOT,
                          env=env or cluster.env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def status_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    out = crawlstatus(cluster, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@dataclass
class Crawled:
    cluster: Cluster
    live: dict[str, Any]  # crawlstatus --json mid-crawl
    final: dict[str, Any]  # after every worker exited
    text: str  # the same, as text
    listing: dict[str, Any]  # --list --json
    documents: int  # rows in the crawl's schema (this crawl only)
    dropped: int
    bloom_count: int  # the shared filter's count in Redis at the end
    logs: list[str]
    stats: list[dict[str, Any]]


@pytest.fixture(scope="module")
def crawled(redis_url, pg_url, tmp_path_factory) -> Any:
    tmp = tmp_path_factory.mktemp("crawlstatus")
    with serve_web(four_sites()) as servers, \
            cluster_on(servers, tmp, redis_url, pg_url) as cluster:  # fmt: skip
        for _ in range(3):
            cluster.start(DEDUP_PROGRESS_INTERVAL=1)
        wait_for_hits(servers, 0.3)
        live = status_json(cluster)
        cluster.wait(240)
        for worker in cluster.workers:
            assert worker.proc.returncode == 0, worker.log[-3000:]
            assert "Traceback" not in worker.log, worker.log[-3000:]
        final = status_json(cluster)
        text = crawlstatus(cluster).stdout
        listing = status_json(cluster, "--list")
        with Store(cluster.storage_url, create=False) as store:
            documents, dropped = store.count_documents(), store.count_dropped()
        count = int(connect(redis_url).hget(f"{cluster.base}:bloom", "count") or 0)
        yield Crawled(cluster, live, final, text, listing, documents, dropped, count,
                      [w.log for w in cluster.workers], [w.stats for w in cluster.workers])


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_mid_crawl_the_view_shows_work_and_live_workers(crawled):
    live = crawled.live
    assert live["state"] == "running"
    assert live["queued"] + live["leased"] > 0, live
    assert live["live_workers"] >= 1
    assert live["crawl"] and live["urls_seen"] > 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_at_the_end_the_totals_equal_the_database(crawled):
    final = crawled.final
    assert final["state"] == "finished"
    assert final["queued"] == final["leased"] == 0
    assert crawled.documents > 0 and crawled.dropped > 0
    assert final["totals"]["stored"] == crawled.documents, final
    assert final["totals"]["dropped"] == crawled.dropped, final
    assert final["storage"] == {"crawls": final["storage"]["crawls"],
                                "documents": crawled.documents, "dropped": crawled.dropped}
    assert final["storage"]["crawls"] >= 3  # the three workers' rows (and the crawl's own)
    pages = sum(int(s.get("response_received_count", 0)) for s in crawled.stats)
    assert final["totals"]["pages"] == pages
    assert final["urls_seen"] == crawled.bloom_count > 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_every_worker_is_listed_with_its_pages(crawled):
    workers = crawled.final["workers"]
    assert len(workers) == 3
    for worker in workers:
        assert worker["state"] == "left" and worker["closed"] == "finished", worker
        assert worker["pages"] > 0, worker
        assert worker["updated"] and worker["started"]
    assert sum(w["stored"] for w in workers) == crawled.documents
    text = crawled.text
    assert "state     finished" in text
    assert f"storage   {crawled.documents} documents, {crawled.dropped} dropped" in text
    for worker in workers:
        assert worker["id"] in text


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_list_shows_the_namespace(crawled):
    rows = [c for c in crawled.listing["crawls"] if c["namespace"] == crawled.cluster.namespace]
    assert rows and rows[0]["base"] == crawled.cluster.base  # the bare name, as crawlclear takes
    assert len(rows) == 1, crawled.listing
    row = rows[0]
    assert row["crawl"] == crawled.final["crawl"] and row["state"] == "finished"
    assert row["queued"] == row["leased"] == row["live_workers"] == 0
    assert row["keys"] > 5 and row["memory_bytes"] > 0
    text = crawlstatus(crawled.cluster, "--list").stdout
    assert crawled.cluster.namespace in text and "finished" in text


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_the_last_worker_out_logs_the_crawl_summary(crawled):
    summaries = [log for log in crawled.logs if f"Crawl {crawled.final['crawl']} finished: 3 "
                 "workers" in log]  # fmt: skip
    assert len(summaries) == 1, [log[-1500:] for log in crawled.logs]
    line = re.search(r"Crawl \S+ finished: 3 workers, (\d+) pages fetched, (\d+) stored",
                     summaries[0])  # fmt: skip
    assert line and int(line[1]) > 0 and int(line[2]) > 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_progress_lines_count_the_whole_crawl(crawled):
    pattern = re.compile(r"whole crawl: (\d+) queued, (\d+) leased, (\d+) live workers, "
                         r"(\d+) pages fetched")  # fmt: skip
    found = [m for log in crawled.logs for m in pattern.finditer(log)]
    assert found, [log[-1500:] for log in crawled.logs]
    assert max(int(m[3]) for m in found) >= 2  # the other workers counted too
    assert max(int(m[4]) for m in found) > 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_each_worker_summary_reads_the_shared_bloom_filter(crawled):
    """Issue 24: one worker's summary said 'Bloom filter 0.0000% of bits set (0 URLs)' while
    its stats file said 342: the figures were those read when the worker opened."""
    assert crawled.bloom_count > 0
    for log, stats in zip(crawled.logs, crawled.stats, strict=True):
        found = re.search(r"Bloom filter\s+(\d+\.\d+)% of bits set \((\d+) URLs", log)
        assert found, log[-2000:]
        assert int(found[2]) == crawled.bloom_count, found[0]
        assert float(found[1]) > 0
        assert stats["dedup/bloom/urls"] == crawled.bloom_count


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_paused_workers_make_a_stopped_crawl_with_dead_members(redis_url, pg_url, tmp_path):
    with serve_web(polite_sites()) as servers, \
            cluster_on(servers, tmp_path, redis_url, pg_url) as cluster:  # fmt: skip
        cluster.delay = 0.1
        workers = [cluster.start(), cluster.start()]
        for worker in workers:
            cluster.member_id(worker)
        wait_for_hits(servers, 0.2)
        for worker in workers:
            worker.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(LEASE + 0.5)
            view = status_json(cluster)
        finally:
            for worker in workers:
                worker.proc.send_signal(signal.SIGKILL)
                worker.proc.send_signal(signal.SIGCONT)
    assert view["state"] == "stopped", view
    assert view["live_workers"] == 0
    assert view["queued"] + view["leased"] > 0
    assert [w["state"] for w in view["workers"]] == ["dead", "dead"], view["workers"]
    assert sum(w["pages"] for w in view["workers"]) > 0


@pytest.mark.redis
def test_an_unknown_namespace_is_one_line_exit_2(redis_url):
    ns = f"t-status-{uuid.uuid4().hex[:8]}"
    cluster = Cluster("", "sqlite:///nowhere.db", redis_url, ns, ROOT)
    out = crawlstatus(cluster)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and f"dedup:{ns}" in out.stderr, out.stderr
    assert "--list" in out.stderr
    client = connect(redis_url)
    assert not list(client.scan_iter(match=f"dedup:{ns}*"))  # read-only
    clear_namespace(client, f"dedup:{ns}")


@pytest.mark.redis
def test_an_unreachable_redis_is_one_line_exit_1(redis_url):
    cluster = Cluster("", "sqlite:///nowhere.db", "redis://127.0.0.1:1/0", "t-status", ROOT)
    for args in ((), ("--list",)):
        out = crawlstatus(cluster, *args)
        assert out.returncode == 1, out.stderr
        assert out.stderr.count("\n") == 1 and "127.0.0.1:1" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr

"""A Redis that comes back older than storage (issue 23, fault 2).

The test runs its own ``redis-server`` with a data directory, snapshots it mid-crawl (``SAVE``),
lets the two workers commit for a while, kills it (SIGKILL) and starts it again from that
older ``dump.rdb``. Before the generation fence both workers went on and ended ``finished``
with pages never fetched, duplicate groups stored twice, URLs both stored and dropped and
leases "orphaned". Now each notices within a renewal or a commit, stops with one ERROR line
(finish reason ``redis_rolled_back``, exit 1), and the crawl run again under a new namespace
(what the line says to do) ends with every page fetched and decided once.
"""

from __future__ import annotations

import itertools
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import Cluster, cluster_on, outcome, stored_canonical, wait_for_hits
from bench.ownservers import OwnRedis, wait_until
from crawler.backends.redis import connect
from crawler.cluster.generation import GenerationFence, RedisRolledBack
from crawler.content.simhash import hamming
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web, web_duplicate_groups
from crawler.storage import Store


@pytest.fixture
def snapshot_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    data = tmp_path / "redis"
    data.mkdir()
    server = OwnRedis(rdb_dir=data)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.postgres
def test_a_redis_restored_from_an_older_snapshot_stops_the_crawl(snapshot_redis, pg_url,
                                                                 tmp_path):
    web = [template_site(60, seed=31), template_site(60, seed=31), template_site(40, seed=32)]
    settings = {"DOWNLOAD_DELAY": 0.05, "STORAGE_BATCH_SECONDS": 0.3}
    with serve_web(web) as servers, \
            cluster_on(servers, tmp_path, snapshot_redis.url, pg_url) as cluster:
        cluster.delay = 0.05
        for _ in range(2):
            cluster.start(**settings)
        wait_for_hits(servers, 0.25, timeout=90)
        connect(snapshot_redis.url).save()  # the snapshot the restart will come back to
        before = sum(sum(s.hits.values()) for s in servers)
        assert wait_until(lambda: sum(sum(s.hits.values()) for s in servers) > before + 20, 60)
        time.sleep(1.0)  # batches commit after the snapshot
        snapshot_redis.stop()
        snapshot_redis.start()  # from the older dump.rdb
        try:
            cluster.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail("a worker went on with the older Redis")
        logs = [w.log + (w.proc.stderr.read() if w.proc.stderr else "") for w in cluster.workers]
        assert [w.proc.returncode for w in cluster.workers] == [1, 1], logs
        for log in logs:
            assert "came back older than the crawl database" in log, log[-3000:]
            assert "Traceback" not in log
            assert "Spider closed (redis_rolled_back)" in log

        # what the line says: the crawl again under a new namespace, on the same storage
        again = Cluster(cluster.seeds, cluster.storage_url, snapshot_redis.url,
                        f"test-{uuid.uuid4().hex[:10]}", tmp_path / "again")
        again.delay = 0.05
        try:
            for _ in range(2):
                again.start(**settings)
            again.wait(240)
            logs = [w.log for w in again.workers]
            assert [w.proc.returncode for w in again.workers] == [0, 0], logs
            figures = outcome(again, servers)
            twins = stored_twins(again.storage_url, servers)
        finally:
            again.stop()
        assert figures["pages_unfetched"] == 0, figures
        assert figures["pages_undecided"] == 0, figures
        assert figures["stored_twice"] == 0, figures
        # a group stored twice holds pages the fingerprints cannot join (an /amp/ copy with
        # a template of its own): as in any crawl of this web, never two pages within k bits
        assert all(distance > 3 for _, distance in twins), twins
        assert figures["drops_against_unstored"] == 0, figures
        assert figures["orphaned"] == 0, figures
        assert figures["settled"], figures


def stored_twins(storage_url: str, servers: list[SiteServer]) -> list[tuple[list[str], int]]:
    """Duplicate groups of the web with more than one stored page: their stored canonical
    URLs and the smallest SimHash distance between two of them."""
    stored = stored_canonical(storage_url)
    out = []
    with Store(storage_url, create=False) as store:
        for group in web_duplicate_groups(servers):
            urls = sorted(group & stored)
            if len(urls) < 2:
                continue
            hashes = [store.document_by_url(u).simhash for u in urls]
            out.append((urls, min(hamming(a, b) for a, b in itertools.combinations(hashes, 2)
                                  if a is not None and b is not None)))
    return out


@pytest.mark.redis
def test_the_counter_must_exceed_what_storage_recorded(redis_url, tmp_path):
    base = f"dedup:test-gen-{uuid.uuid4().hex[:8]}"
    client = connect(redis_url)
    client.hset(f"{base}:meta", "started", "1234")
    try:
        fence = GenerationFence(client, base, "ns", redis_url)
        assert fence.key == "ns@1234"
        with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
            store.write_batch([], [], fence=fence)
            store.write_batch([], [], fence=fence)
            assert store.redis_generation(fence.key) == 2
            fence.check(store.redis_generation(fence.key))  # healthy: the counter is as new
            client.hset(f"{base}:meta", "generation", 1)  # Redis went back in time
            with pytest.raises(RedisRolledBack, match="is 1, storage recorded 2"):
                fence.check(store.redis_generation(fence.key))
            for _ in range(3):  # the batch's transaction is rolled back, the counter kept
                with pytest.raises(RedisRolledBack):
                    store.write_batch([{"url": "http://a.test/", "text": "x"}], [], fence=fence)
            assert store.count_documents() == 0
            assert store.redis_generation(fence.key) == 2
            assert client.hget(f"{base}:meta", "generation") == b"1"
    finally:
        client.delete(f"{base}:meta")


def test_a_redis_gone_at_commit_is_the_outage_error_and_writes_nothing(snapshot_redis,
                                                                       tmp_path):
    """The commit counter's Redis fails inside a batch's transaction: the outage policy's
    error (RedisBackendError: redis_error, one line), never a crash of the storage writer;
    the batch is rolled back."""
    from crawler.backends.common import RedisBackendError

    client = connect(snapshot_redis.url)
    client.hset("dedup:gone:meta", "started", "1")
    fence = GenerationFence(client, "dedup:gone", "gone", snapshot_redis.url)
    snapshot_redis.stop()
    with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        with pytest.raises(RedisBackendError, match="is unavailable"):
            store.write_batch([{"url": "http://a.test/", "text": "x"}], [], fence=fence)
        assert store.count_documents() == 0

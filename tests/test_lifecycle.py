"""The lifecycle of a distributed crawl's Redis state (:mod:`crawler.cluster.lifecycle`, ``scrapy
crawlclear``), with real ``scrapy crawl`` workers on the real Redis and PostgreSQL.

A crawl that ends is marked finished and every key of its namespace gets one deadline
(``DISTRIBUTED_FINISHED_TTL_SECONDS``, 0: none), short ones really remove the keys; a worker
started on a finished namespace is refused in one line naming ``crawlclear``; ``crawlclear``
deletes exactly the namespace's keys (not a sibling's, not those of a namespace named
``NS:...``), refuses live members, a missing terminal and an unknown namespace; a crawl whose
workers were all SIGKILLed is not finished, and a worker started on it resumes and finishes it.
"""

from __future__ import annotations

import hashlib
import os
import pty
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import Cluster, fresh_schema, outcome, wait_for_hits
from crawler.backends.redis import clear_namespace, connect
from crawler.cluster.lifecycle import CrawlState
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web
from crawler.storage import Store
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres]

HOUR = 3600


def sites() -> list[Any]:
    return [template_site(24, seed=11), template_site(24, seed=12)]


@contextmanager
def cluster(servers: list[SiteServer], tmp: Path, redis_url: str, storage_url: str,
            namespace: str = "") -> Iterator[Cluster]:  # fmt: skip
    """Workers of a namespace of this module's own; its keys deleted afterwards."""
    ns = namespace or f"t-lifecycle-{uuid.uuid4().hex[:10]}"
    seeds = ",".join(s.url("/") for s in servers)
    crawl = Cluster(seeds, storage_url, redis_url, ns, tmp / ns.replace(":", "_"), delay=0.01)
    try:
        yield crawl
    finally:
        crawl.stop()
        clear_namespace(connect(redis_url), crawl.base)
        connect(redis_url).delete(f"{ns}:web:start_urls")


@pytest.fixture
def storage(pg_url) -> Iterator[str]:
    with fresh_schema(pg_url, "t_lifecycle") as url:
        yield url


def finish(crawl: Cluster, timeout: float = 120, skip: int = 0) -> None:
    """Wait for the workers; each (after the first ``skip``) exited 0 with no traceback."""
    crawl.wait(timeout)
    for worker in crawl.workers[skip:]:
        assert worker.proc.returncode == 0, worker.proc.stderr.read()[-2000:] + worker.log[-3000:]
        assert "Traceback" not in worker.log, worker.log[-3000:]


def keys_of(crawl: Cluster) -> list[str]:
    """Every key of the namespace, as a plain SCAN sees it (nothing of lifecycle's)."""
    client = connect(crawl.redis_url)
    found = [k.decode() for k in client.scan_iter(match=f"{crawl.base}:*", count=1000)]
    return found + ([crawl.base] if client.exists(crawl.base) else [])


def dumps(redis_url: str, keys: list[str]) -> dict[str, str]:
    client = connect(redis_url)
    return {k: hashlib.sha256(client.dump(k) or b"").hexdigest() for k in keys}


def scrapy(*args: str, env: dict[str, str], stdin: Any = subprocess.DEVNULL,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=ROOT, env=env,
                          stdin=stdin, capture_output=True, text=True, timeout=timeout)  # fmt: skip


def stored_pages(storage_url: str) -> int:
    with Store(storage_url, create=False) as store:
        return store.count_documents()


def crawl_ids(storage_url: str) -> list[int]:
    with Store(storage_url, create=False) as store:
        return [c.id for c in store.crawls()]


def test_a_finished_crawl_expires_is_refused_and_cleared_then_crawled_again(
        redis_url, storage, tmp_path):  # fmt: skip
    with serve_web(sites()) as servers, cluster(servers, tmp_path, redis_url, storage) as crawl:
        client = connect(redis_url)
        start_list = f"{crawl.namespace}:web:start_urls"  # outside dedup:NS:, read by no worker
        client.lpush(start_list, servers[0].url("/"))  # started with seeds
        # long enough (~31 pages a host, one at a time) that the second worker joins a crawl
        # still running when the machine is loaded: at 0.01 s the first finished everything
        # before the second started once in a clean-clone run on one busy core
        crawl.delay = 0.2
        for _ in range(2):
            crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=HOUR)
        finish(crawl)
        crawl.delay = 0.01
        responses = [int(w.stats.get("downloader/response_count", 0)) for w in crawl.workers]
        assert all(n > 0 for n in responses), responses  # both workers crawled
        finished = int(client.hget(f"{crawl.base}:meta", "finished"))
        assert abs(finished / 1000 - time.time()) < 120
        keys = [*keys_of(crawl), start_list]
        assert len(keys) > 5  # meta, workers' records, seen set, index, robots, frontier
        ttls = {k: client.pttl(k) for k in keys}
        assert all(0 < ttl <= HOUR * 1000 for ttl in ttls.values()), ttls
        assert max(ttls.values()) - min(ttls.values()) < 1000  # one deadline for every key
        pages, first = stored_pages(crawl.storage_url), set(crawl_ids(crawl.storage_url))
        assert pages > 30

        again = crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=HOUR)
        again.proc.wait(60)
        lines = again.proc.stderr.read().strip().splitlines()
        assert again.proc.returncode == 2 and len(lines) == 1, lines
        assert "finished at" in lines[0] and f"scrapy crawlclear {crawl.namespace}" in lines[0]
        assert "DEDUP_NAMESPACE" in lines[0]
        assert set(crawl_ids(crawl.storage_url)) == first  # refused before it started a crawl
        assert f"{pages} page(s) stored" in lines[0], lines[0]

        cleared = scrapy("crawlclear", crawl.namespace, "--yes", env=crawl.env)
        assert cleared.returncode == 0, cleared.stderr
        assert f"{len(keys)} key(s) deleted" in cleared.stdout and "MiB" in cleared.stdout
        assert keys_of(crawl) == [] and not client.exists(start_list)
        assert stored_pages(crawl.storage_url) == pages  # the pages stay in storage

        for server in servers:
            server.reset_hits()
        crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=HOUR)
        finish(crawl, skip=3)
        assert int(crawl.workers[-1].stats.get("downloader/response_count", 0)) > 30
        assert stored_pages(crawl.storage_url) == pages
        rerun = set(crawl_ids(crawl.storage_url)) - first
        with Store(crawl.storage_url, create=False) as store:  # the re-crawl stored them again
            assert sum(store.count_documents(i) for i in rerun) == pages
        assert client.hget(f"{crawl.base}:meta", "finished")


def test_ttl_zero_leaves_a_finished_crawl_for_ever(redis_url, storage, tmp_path):
    with serve_web(sites()[:1]) as servers, cluster(servers, tmp_path, redis_url, storage) as crawl:
        crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=0)
        finish(crawl)
        client = connect(redis_url)
        assert client.hget(f"{crawl.base}:meta", "finished")
        keys = keys_of(crawl)
        assert len(keys) > 5
        assert {k: client.pttl(k) for k in keys} == dict.fromkeys(keys, -1)


def test_a_short_ttl_removes_every_key(redis_url, storage, tmp_path):
    with serve_web(sites()[:1]) as servers, cluster(servers, tmp_path, redis_url, storage) as crawl:
        crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=2)
        finish(crawl)  # exit 0: the keys may expire while it closes, it is no Redis outage
        deadline = time.monotonic() + 20
        while keys_of(crawl) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert keys_of(crawl) == []
        assert stored_pages(crawl.storage_url) > 10


def test_a_killed_crawl_is_not_finished_and_resumes(redis_url, storage, tmp_path):
    """Every worker SIGKILLed mid-crawl: no ``finished``, no expiry; ``crawlclear`` refuses
    while they were live; a worker started later resumes (reclaims them) and ends the crawl."""
    with serve_web(sites()) as servers, cluster(servers, tmp_path, redis_url, storage) as crawl:
        crawl.delay = 0.15
        for _ in range(2):
            crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=HOUR)
        wait_for_hits(servers, 0.3)
        refused = scrapy("crawlclear", crawl.namespace, "--yes", env=crawl.env)
        assert refused.returncode == 2, refused.stderr
        assert "live worker(s)" in refused.stderr and "--force" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        for worker in list(crawl.workers):
            crawl.kill(worker)
        client = connect(redis_url)
        assert client.hget(f"{crawl.base}:meta", "finished") is None
        keys = keys_of(crawl)
        assert keys and all(client.pttl(k) == -1 for k in keys)
        crawl.delay = 0.01
        crawl.start(DISTRIBUTED_FINISHED_TTL_SECONDS=HOUR)
        crawl.wait(120)
        resumed = crawl.workers[-1]
        assert resumed.proc.returncode == 0, resumed.log[-3000:]
        assert int(resumed.stats.get("dedup/shared/workers_reclaimed", 0)) == 2
        assert client.hget(f"{crawl.base}:meta", "finished")
        figures = outcome(crawl, servers)
        assert figures["pages_unfetched"] == 0 and figures["pages_undecided"] == 0, figures
        assert figures["stored_twice"] == 0, figures


def test_crawlclear_touches_no_other_namespace(redis_url, storage, tmp_path):
    """Namespace A is cleared; B (a sibling) and ``Ab`` (a namespace whose name extends A's)
    keep every key, byte for byte, and A's finish gave neither of them a deadline. A name with
    a ``:`` (``A:web``, whose keys would be A's frontier) is no namespace: refused."""
    base_ns = f"t-lifecycle-{uuid.uuid4().hex[:10]}"
    names = [f"{base_ns}b", f"{base_ns}-sibling", base_ns]  # A last: its finish runs last
    with serve_web(sites()[:1]) as servers:
        crawls = []
        with cluster(servers, tmp_path, redis_url, storage, names[0]) as nested, \
                cluster(servers, tmp_path, redis_url, storage, names[1]) as sibling, \
                cluster(servers, tmp_path, redis_url, storage, names[2]) as crawl:  # fmt: skip
            crawls = [nested, sibling, crawl]
            for other in crawls:
                other.start(DISTRIBUTED_FINISHED_TTL_SECONDS=0 if other is not crawl else HOUR)
                finish(other)
            others = [k for other in crawls[:2] for k in keys_of(other)]
            assert len(others) > 10
            before = dumps(redis_url, others)
            client = connect(redis_url)
            assert all(client.pttl(k) == -1 for k in others)  # A's deadline reached none
            mine = set(keys_of(crawl)) - set(others)
            assert len(mine) > 5
            assert CrawlState(client, crawl.base).size()[0] == len(mine)

            no_tty = scrapy("crawlclear", crawl.namespace, env=crawl.env)
            assert no_tty.returncode == 2 and "--yes" in no_tty.stderr, no_tty.stderr
            assert len(no_tty.stderr.strip().splitlines()) == 1
            colon = scrapy("crawlclear", f"{base_ns}:web", "--yes", "--force", env=crawl.env)
            assert colon.returncode == 2 and "is not a namespace" in colon.stderr, colon.stderr
            assert len(colon.stderr.strip().splitlines()) == 1
            assert CrawlState(client, crawl.base).size()[0] == len(mine)  # A's frontier kept
            unknown = scrapy("crawlclear", f"{base_ns}-none", "--yes", env=crawl.env)
            assert unknown.returncode == 2 and "no crawl in namespace" in unknown.stderr
            assert len(unknown.stderr.strip().splitlines()) == 1

            answered = clear_on_a_terminal(crawl)
            assert "key(s) deleted" in answered, answered
            assert not any(client.exists(k) for k in mine)
            assert dumps(redis_url, others) == before


def clear_on_a_terminal(crawl: Cluster) -> str:
    """``scrapy crawlclear NS`` on a pseudo-terminal, answering its question with NS."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "scrapy", "crawlclear", crawl.namespace],
                            cwd=ROOT, env=crawl.env, stdin=child, stdout=child, stderr=child)
    os.close(child)
    output, deadline, answered = b"", time.monotonic() + 60, False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            output += chunk
            if not answered and b"to delete it:" in output:
                os.write(main, crawl.namespace.encode() + b"\n")
                answered = True
        elif proc.poll() is not None:
            break
    proc.wait(30)
    os.close(main)
    assert answered and proc.returncode == 0, output.decode(errors="replace")
    return output.decode(errors="replace")


@pytest.mark.parametrize("value", ["-1", "soon", "1e12"])
def test_a_bad_ttl_is_refused_in_one_line(value):
    env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "settings.distributed"}
    out = scrapy("crawl", "web", "-a", "urls=http://127.0.0.1:9/", "-s",
                 f"DISTRIBUTED_FINISHED_TTL_SECONDS={value}", env=env)  # fmt: skip
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "DISTRIBUTED_FINISHED_TTL_SECONDS" in lines[0] and "allowed a number in [0, " in lines[0]

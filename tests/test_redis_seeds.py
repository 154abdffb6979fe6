"""Seeds from a Redis key, the scrapy-redis way (:mod:`crawler.cluster.startlist`), and
``scrapy demo --serve``: on the real Redis and PostgreSQL, with real worker processes.

* two distributed workers started with no seeds wait (still running, the INFO line naming the
  ``redis-cli lpush`` command logged), then seeds pushed with redis-py reach the crawl: both
  close by themselves, every page of the two sites is stored once, each worker fetched pages
  (the worker that did not take a site's seed follows its links: the scope is shared), a
  malformed entry is skipped with one WARNING line, a seed pushed twice is fetched once; in two
  orders: pushed after the workers start, and before (then one seed waits in the taken list of
  a worker that died right after taking it, and is queued by a live one);
* a bounded wait (``DISTRIBUTED_SEED_WAIT_SECONDS``) closes a seedless worker ``no_seeds``;
* the key's name, the entries' checks and the take/done/recovery steps on Redis itself;
* ``scrapy demo --serve`` serves the demo site until SIGINT, then exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import pytest

from bench.cluster import Cluster, Worker, cluster_on, outcome
from crawler.backends.redis import clear_namespace, connect
from crawler.cluster.startlist import StartList, entry_seed, redis_cli, start_key
from crawler.sitegen import template_site
from crawler.sitegen.server import serve_web
from tests.conftest import ROOT, free_port

WAIT_LINE = "waiting for seeds: "


class SeedlessCluster(Cluster):
    """A :class:`Cluster` whose workers start with no seeds (``-a urls=`` empty: none)."""

    def start(self, cli: Any = (), **settings: Any) -> Worker:
        self.seeds, saved = "", self.seeds
        try:
            worker = super().start(cli, **settings)
        finally:
            self.seeds = saved
        return worker


def _seedless(cluster: Cluster) -> SeedlessCluster:
    seedless = SeedlessCluster(cluster.seeds, cluster.storage_url, cluster.redis_url,
                               cluster.namespace, cluster.tmp)  # fmt: skip
    seedless.workers = cluster.workers  # cluster_on stops these on the way out
    return seedless


def _wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _warnings(cluster: Cluster, text: str) -> list[str]:
    lines = [line for w in cluster.workers for line in w.log.splitlines()]
    assert lines
    return [line for line in lines if "WARNING" in line and text in line]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["pushed_after_start", "pushed_before_start"])
def test_seedless_workers_take_seeds_from_redis(tmp_path, order):
    sites = [template_site(24, seed=3), template_site(24, seed=4)]
    with serve_web(sites) as servers, cluster_on(servers, tmp_path) as plain:
        cluster = _seedless(plain)
        client = connect(cluster.redis_url)
        key = f"{cluster.namespace}:web:start_urls"
        first, second = servers[0].url("/"), servers[1].url("/")
        entries = [first, "ftp://not-a-web-seed.example/", json.dumps({"url": second}), first]
        if order == "pushed_before_start":
            # the second site's seed was taken by a worker that died before queueing it
            dead = f"{cluster.base}:start_urls:taken:deadhost:1:abc"
            client.rpush(dead, second)
            client.sadd(f"{cluster.base}:start_urls:holders", "deadhost:1:abc")
            client.lpush(key, first, "ftp://not-a-web-seed.example/", first)
        workers = [cluster.start(), cluster.start()]
        if order == "pushed_after_start":
            _wait_for(lambda: all(WAIT_LINE in w.log for w in workers), what="the INFO line")
            time.sleep(3)
            assert all(w.proc.poll() is None for w in workers), "a seedless worker closed"
            for worker in workers:
                line = next(x for x in worker.log.splitlines() if WAIT_LINE in x)
                assert "INFO" in line
                assert line.endswith(f"redis-cli -n 15 lpush {key} URL")
            client.lpush(key, *entries)
        cluster.reap(timeout=240)
        figures = outcome(cluster, servers)
        assert [w.proc.returncode for w in workers] == [0, 0], [w.proc.stderr.read()
                                                               for w in workers]  # fmt: skip
        assert figures["pages_unfetched"] == 0, figures
        assert figures["pages_undecided"] == 0, figures
        assert figures["stored_twice"] == 0, figures
        assert figures["duplicate_fetches"] == 0, figures
        assert figures["settled"], figures
        assert all(n > 0 for n in figures["responses"]), figures  # both workers crawled
        assert [s.hits["/"] for s in servers] == [1, 1]  # the seed pushed twice: fetched once
        skipped = _warnings(cluster, "not-a-web-seed")
        assert len(skipped) == 1, skipped
        assert "Skipped a seed from Redis key" in skipped[0]
        assert not client.exists(f"{cluster.base}:start_urls:holders")
        assert client.llen(key) == 0
        if order == "pushed_before_start":
            assert sum(int(w.stats.get("dedup/start_urls/recovered", 0)) for w in workers) == 1
        client.delete(key)


@pytest.mark.slow
def test_a_seeded_worker_takes_what_the_start_list_holds_before_the_crawl_is_done(tmp_path):
    """A crawl fed by its start list (a seedless worker joined it) is not done while seeds
    wait in the list: a worker started with seeds that finds the frontier empty takes them,
    as the seedless worker would, instead of marking the crawl finished. The seedless worker
    is paused (SIGSTOP) while the seeds wait, so only the seeded one can take them."""
    sites = [template_site(12, seed=5), template_site(12, seed=6)]
    with serve_web(sites) as servers, cluster_on(servers[:1], tmp_path) as plain:
        cluster = _seedless(plain)
        client = connect(cluster.redis_url)
        key = f"{cluster.namespace}:web:start_urls"
        waiting = cluster.start()
        _wait_for(lambda: WAIT_LINE in waiting.log, what="the INFO line")
        assert client.hget(f"{cluster.base}:meta", "start_list")  # the crawl is list-fed
        waiting.proc.send_signal(signal.SIGSTOP)
        try:
            client.lpush(key, servers[1].url("/"))  # waits in the list: the reader is paused
            seeded = plain.start()  # seeds: the first site only
            seeded.proc.wait(120)
        finally:
            waiting.proc.send_signal(signal.SIGCONT)
        cluster.reap(timeout=120)
        assert seeded.proc.returncode == 0, seeded.log[-3000:]
        assert servers[1].hits["/"] == 1  # the seeded worker took the list's seed and crawled
        assert int(seeded.stats.get("dedup/start_urls/taken", 0)) == 1
        figures = outcome(cluster, servers)
        assert figures["pages_unfetched"] == figures["pages_undecided"] == 0, figures
        assert client.llen(key) == 0
        client.delete(key)


def test_seedless_worker_wait_is_bounded(tmp_path):
    with serve_web([template_site(6, seed=1)]) as servers, \
            cluster_on(servers, tmp_path) as plain:  # fmt: skip
        cluster = _seedless(plain)
        worker = cluster.start(DISTRIBUTED_SEED_WAIT_SECONDS=1)
        cluster.reap(timeout=60)
        assert worker.proc.returncode == 0
        assert worker.stats.get("finish_reason") == "no_seeds"
        assert sum(1 for line in worker.log.splitlines() if WAIT_LINE in line) == 1


# --- the key, the entries, and the Redis steps ----------------------------------------------


def test_start_key_names():
    assert start_key({"BOT_NAME": "dedup-crawler", "DEDUP_NAMESPACE": "dedup-crawler"},
                     "web") == "web:start_urls"  # fmt: skip
    assert start_key({"BOT_NAME": "dedup-crawler"}, "web") == "web:start_urls"
    assert start_key({"BOT_NAME": "b", "DEDUP_NAMESPACE": "crawl42"}, "web") == \
        "crawl42:web:start_urls"  # fmt: skip
    assert start_key({"DEDUP_NAMESPACE": "n", "REDIS_START_URLS_KEY": "%(name)s:urls"},
                     "web") == "web:urls"  # fmt: skip
    assert start_key({"DEDUP_NAMESPACE": "n", "REDIS_START_URLS_KEY": "q:%(namespace)s"},
                     "web") == "q:n"  # fmt: skip


def test_redis_cli_names_server_and_database():
    assert redis_cli("redis://127.0.0.1:6379/0") == "redis-cli"
    assert redis_cli("redis://:secret@db.example:6380/3") == \
        "redis-cli -h db.example -p 6380 -n 3 --askpass"  # fmt: skip


@pytest.mark.parametrize(("entry", "problem"), [
    (b"ftp://x.example/", "'ftp://x.example/'"),
    (b"http://user:pw@x.example/", "credentials"),
    (b"   ", "empty entry"),
    (b'{"link": "http://x.example/"}', "{"),
    (b"http://x.example/" + b"a" * 70_000, "bytes in all"),
])
def test_bad_entries_are_named_in_one_line(entry, problem):
    found = entry_seed(entry, max_length=2083)
    assert isinstance(found, str)
    assert problem in found
    assert "\n" not in found and len(found) < 600


def test_good_entries():
    for entry in (b"http://x.example/a", b"x.example/a", b'{"url": "http://x.example/a"}',
                  "http://x.example/a", " http://x.example/a\n"):
        found = entry_seed(entry)
        assert not isinstance(found, str)
        assert found.canonical and found.canonical[0].startswith(("http://x.example/a",
                                                                  "https://x.example/a"))


@pytest.fixture
def redis_base():
    from bench.cluster import REDIS_URL

    client = connect(REDIS_URL)
    base = f"dedup:t-start-{uuid.uuid4().hex[:8]}"
    yield client, base
    clear_namespace(client, base)
    client.delete(f"{base}-list")


def test_take_done_and_recover_on_redis(redis_base):
    client, base = redis_base
    workers = f"{base}:workers"
    now_ms = int(time.time() * 1000)
    client.zadd(workers, {"alive": now_ms + 60_000, "dead": now_ms - 1})
    key = f"{base}-list"
    client.rpush(key, *[f"http://x.example/{i}" for i in range(5)])
    dead = StartList(client, base, key, "dead", workers)
    taken, recovered = dead.take(2)
    assert (taken, recovered) == ([b"http://x.example/0", b"http://x.example/1"], 0)
    assert client.llen(key) == 3
    alive = StartList(client, base, key, "alive", workers)
    taken, recovered = alive.take(3)  # the dead holder's two, then one from the key
    assert recovered == 2
    assert taken == [b"http://x.example/0", b"http://x.example/1", b"http://x.example/2"]
    assert alive.pending()
    alive.done(taken)
    assert not alive.pending()
    assert alive.take(10) == ([b"http://x.example/3", b"http://x.example/4"], 0)
    client.delete(key)
    client.sadd(key, "http://y.example/")  # a set is read as a set
    alive.done([b"http://x.example/3", b"http://x.example/4"])
    assert alive.take(10) == ([b"http://y.example/"], 0)
    alive.done([b"http://y.example/"])
    client.delete(key)
    client.hset(key, "a", "b")
    with pytest.raises(ValueError, match="is a hash"):
        alive.take(1)


def test_shared_seeds_log(redis_base):
    client, base = redis_base
    one = StartList(client, base, f"{base}-list", "a", f"{base}:workers")
    two = StartList(client, base, f"{base}-list", "b", f"{base}:workers")
    one.publish(["http://x.example/", "http://y.example/"])
    two.publish(["http://y.example/", "http://z.example/"])
    assert two.new_seeds() == ["http://x.example/", "http://y.example/", "http://z.example/"]
    assert two.new_seeds() == []
    one.publish(["http://w.example/"])
    assert two.new_seeds() == ["http://w.example/"]


# --- scrapy demo --serve ---------------------------------------------------------------------


def test_demo_serve_until_sigint(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "demo", "--serve", "--port", str(port),
         "--out", str(tmp_path / "demo")],
        cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://localhost:{port}/"
        lines = []
        assert proc.stdout is not None
        while not any("Ctrl-C" in line for line in lines):
            line = proc.stdout.readline()
            assert line, f"demo --serve ended early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line)
        printed = "".join(lines)
        assert url in printed
        seeds = tmp_path / "demo" / "seeds.txt"
        assert seeds.read_text() == url + "\n"
        assert f"scrapy crawl web -a seeds={seeds}" in printed  # one process, or:
        assert "SCRAPY_SETTINGS_MODULE=crawler.settings.distributed" in printed
        assert "lpush" in printed
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert b"<html" in response.read().lower()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert len(out.strip().splitlines()) == 1  # one line after Ctrl-C


def test_demo_serve_stops_cleanly_on_a_ctrl_c_during_its_banner(tmp_path, monkeypatch) -> None:
    """The Ctrl-C can come while the banner is still being written (the SIGINT test above sends
    it as soon as it reads the banner's last line; under load the demo was still inside that
    print): it used to escape as a traceback with exit status -2. The first write is made to
    raise KeyboardInterrupt, as a SIGINT arriving there does."""
    import argparse
    import io

    from crawler.commands.demo import serve
    from crawler.sitegen import demo_site

    class InterruptedOnce(io.StringIO):
        interrupted = False

        def write(self, text: str) -> int:
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            return super().write(text)

    stream = InterruptedOnce()
    monkeypatch.setattr(sys, "stdout", stream)
    opts = argparse.Namespace(port=0)
    assert serve(demo_site(), tmp_path / "demo", opts) == 0
    assert stream.interrupted
    assert "Stopped serving the demo site" in stream.getvalue()

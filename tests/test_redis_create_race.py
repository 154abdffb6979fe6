"""Workers of one new namespace started at the same instant (issue 29): what the first worker
creates in Redis is created and checked in one atomic step, so every worker joins or is refused
with one line, never a traceback.

The races, and how each test provokes it:

* the content index's parameters (``{base}:ci:meta``): the old code set ``k``, then in another
  call ``blocks``; a worker reading in between crashed on ``int(None)``. The tests pre-seed the
  record as the old code left it between its two calls, and start many threads at once;
* the seen set's filter (``{base}:bloom``): the old code set ``config``, then the layers; a
  process in between found a filter without layers. Same provocations;
* the load of the stored pages (``{base}:ci:meta`` field ``loaded``): the old code checked the
  flag, loaded, then set it, so two workers started together both loaded the stored pages (a
  bulk load appends: every page twice). The test starts the second load while the first is
  half done, and a load whose loader died (its claim left to expire);
* end to end (marked slow): four worker processes of a new namespace forked at the same instant,
  twenty rounds, on a storage already holding pages (the load race: before the fix two workers
  load them in the second round already), every fourth round on index parameters half created
  (before the fix every worker dies with the issue's TypeError). A round with nothing pre-seeded
  rarely hits the two-step window (a Redis round trip wide) end to end: the threads above do.

Cluster membership (one script per renewal, ``HSETNX started`` inside it), the reclaim lock
(``SET NX``) and the frontier (counters incremented inside its scripts) create nothing in two
steps and need no fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import FOLLOW_LINKS_OF, LEASE, fresh_schema
from crawler import defaults
from crawler.backends.redis import RedisContentIndex, RedisSeenSet, clear_namespace, connect
from crawler.backends.redis.keys import LAYOUT
from crawler.config import SettingError
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web
from tests.conftest import ROOT
from tests.test_backends_local import chash, key_chunks, page

pytestmark = pytest.mark.redis


@pytest.fixture
def base(redis_url):
    """A fresh namespace's key prefix on the real Redis; its keys are deleted afterwards."""
    name = f"dedup:test-race-{uuid.uuid4().hex[:12]}"
    yield name
    clear_namespace(connect(redis_url), name)


class NoPages:
    """A resolver of a storage that holds nothing (a non-standalone index loads arrays)."""

    def kept_page(self, kind: str, key: int) -> None:
        return None

    def latest_version(self, canonical_key: int) -> None:
        return None


def at_once(n: int, make: Any) -> list[Any]:
    """``make(i)`` in ``n`` threads released together; each result or the exception raised."""
    barrier, results = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = make(i)
        except Exception as exc:  # the test inspects what each thread raised
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


# --- the content index's parameters ---------------------------------------------------------------


def test_index_completes_parameters_half_created_by_the_two_step_code(redis_url, base):
    client = connect(redis_url)
    client.hset(f"{base}:ci:meta", "k", 3)  # the old code, between its HSETNX k and HSET blocks
    index = RedisContentIndex(client, base, k=3)
    meta = client.hgetall(f"{base}:ci:meta")
    assert meta == {b"k": b"3", b"blocks": b"4", b"seq": b"0", b"count": b"0",
                    b"layout": LAYOUT.encode()}  # fmt: skip
    assert index.check_and_add(page("http://a/1", 1, 2**40)) is None
    assert index.check_and_add(page("http://a/2", 1, 2**40 + 1)).url == "http://a/1"


def test_index_half_created_with_another_k_is_refused_in_one_line(redis_url, base):
    client = connect(redis_url)
    client.hset(f"{base}:ci:meta", "k", 5)
    with pytest.raises(SettingError, match="SIMHASH_MAX_DISTANCE") as refused:
        RedisContentIndex(client, base, k=3)
    assert "\n" not in str(refused.value)


def test_index_keeps_the_parameters_of_a_namespace_created_before_layouts(redis_url, base):
    client = connect(redis_url)
    client.hset(f"{base}:ci:meta", mapping={"k": 3, "blocks": 4, "seq": 0, "count": 0})
    with pytest.raises(SettingError, match="layout 1"):
        RedisContentIndex(client, base, k=3)
    assert client.hget(f"{base}:ci:meta", "layout") is None  # not completed: it is complete


def test_many_indexes_of_a_new_namespace_created_at_once_all_join(redis_url, base):
    for round_ in range(20):
        ns = f"{base}:{round_}"
        results = at_once(8, lambda i, ns=ns: RedisContentIndex(connect(redis_url), ns, k=3))
        assert all(isinstance(r, RedisContentIndex) for r in results), results
        assert connect(redis_url).hmget(f"{ns}:ci:meta", ["k", "blocks"]) == [b"3", b"4"]


def test_indexes_of_other_k_created_at_once_join_or_are_refused(redis_url, base):
    for round_ in range(10):
        ns = f"{base}:{round_}"
        results = at_once(8, lambda i, ns=ns: RedisContentIndex(connect(redis_url), ns,
                                                                k=3 + 2 * (i % 2)))  # fmt: skip
        stored = int(connect(redis_url).hget(f"{ns}:ci:meta", "k"))
        for i, result in enumerate(results):
            if 3 + 2 * (i % 2) == stored:
                assert isinstance(result, RedisContentIndex), result
            else:
                assert isinstance(result, SettingError), result
                assert "SIMHASH_MAX_DISTANCE" in str(result)


# --- the seen set's filter ------------------------------------------------------------------------


def half_created_filter(client: Any, base: str, seen: RedisSeenSet) -> None:
    """The filter as the old code left it between its HSETNX config and HSET of the layers."""
    wanted = {field: getattr(seen, field) for field in sorted(RedisSeenSet.CONFIG_NAMES)}
    client.delete(f"{base}:bloom")
    client.hset(f"{base}:bloom", "config", json.dumps(wanted, sort_keys=True))


def test_seen_set_completes_a_filter_half_created_by_the_two_step_code(redis_url, base):
    client = connect(redis_url)
    half_created_filter(client, base, RedisSeenSet(client, base, capacity=1000))
    seen = RedisSeenSet(client, base, capacity=1000)
    assert client.hget(f"{base}:bloom", "active") == b"1"
    assert seen.bits > 0
    assert seen.add(b"k" * 16) is False
    assert seen.add(b"k" * 16) is True
    assert len(seen) == 1


def test_seen_set_half_created_with_other_settings_is_refused_untouched(redis_url, base):
    client = connect(redis_url)
    half_created_filter(client, base, RedisSeenSet(client, base, capacity=1000))
    with pytest.raises(SettingError, match="BLOOM_CAPACITY") as refused:
        RedisSeenSet(client, base, capacity=2000)
    assert "\n" not in str(refused.value)
    assert client.hkeys(f"{base}:bloom") == [b"config"]  # no layers of other settings written


def test_many_seen_sets_of_a_new_namespace_created_at_once_all_join(redis_url, base):
    for round_ in range(20):
        ns = f"{base}:{round_}"
        def made(i: int, ns: str = ns) -> RedisSeenSet:
            seen = RedisSeenSet(connect(redis_url), ns, capacity=1000)
            assert seen.hashes > 0  # the layers are there as soon as the filter is
            return seen

        results = at_once(8, made)
        assert all(isinstance(r, RedisSeenSet) for r in results), results
        key = uuid.uuid4().bytes
        assert [r.add(key) for r in results] == [False] + [True] * 7


# --- the load of the stored pages -----------------------------------------------------------------

STORED = [(f"http://old/{i}", "", chash(i), (2**63 + i * 2**20) if i % 3 else None)
          for i in range(40)]  # fmt: skip


def test_a_worker_started_during_the_load_waits_and_loads_nothing(redis_url, base):
    first = RedisContentIndex(connect(redis_url), base, k=3, resolver=NoPages(), owner="w1")
    second = RedisContentIndex(connect(redis_url), base, k=3, resolver=NoPages(), owner="w2")
    polled, second_loaded = threading.Event(), []
    claim = getattr(second, "_claim", None)  # absent before the fix: the second loads at once

    def second_claim(token: str) -> str:  # the second worker asks while the first loads
        state = claim(token)
        if state.startswith("w1/"):
            polled.set()
        return state

    if claim is not None:
        second._claim = second_claim  # type: ignore[method-assign]

    def chunks():
        chunks = key_chunks(STORED, [10, 10, 10])
        yield chunks[0]
        again = key_chunks(STORED, [40])  # the second worker reads the same stored pages
        thread = threading.Thread(target=lambda: second_loaded.append(second.load_arrays(again)))
        thread.start()
        polled.wait(10)  # the second worker found the first one loading (or loaded itself)
        yield from chunks[1:]
        chunks_done.append(thread)

    chunks_done: list[threading.Thread] = []
    assert first.load_arrays(chunks()) == len(STORED)
    chunks_done[0].join(30)
    assert second_loaded == [0]
    assert len(first) == len(second) == len(STORED)  # loaded once, not twice
    assert int(connect(redis_url).hget(f"{base}:ci:meta", "seq")) == len(STORED)
    assert connect(redis_url).exists(f"{base}:ci:loading") == 0


def test_many_workers_loading_at_once_load_the_stored_pages_once(redis_url, base):
    for round_ in range(10):
        ns = f"{base}:{round_}"
        indexes = [RedisContentIndex(connect(redis_url), ns, k=3, resolver=NoPages())
                   for _ in range(4)]  # fmt: skip
        loaded = at_once(4, lambda i, xs=indexes: xs[i].load_arrays(key_chunks(STORED, [7, 13])))
        assert sorted(loaded) == [0, 0, 0, len(STORED)], loaded
        assert len(indexes[0]) == len(STORED)


def test_records_are_loaded_once_by_workers_loading_at_once(redis_url, base):
    indexes = [RedisContentIndex(connect(redis_url), base, k=3) for _ in range(4)]
    loaded = at_once(4, lambda i: indexes[i].load_stored(iter(STORED)))
    assert sorted(loaded) == [0, 0, 0, len(STORED)], loaded


def test_the_load_of_a_dead_loader_is_taken_over_when_its_claim_expires(redis_url, base):
    client = connect(redis_url)
    client.set(f"{base}:ci:loading", "w-dead/0123456789ab", px=300)  # a loader killed mid-load
    index = RedisContentIndex(client, base, k=3, resolver=NoPages())
    assert index.load_arrays(key_chunks(STORED, [40])) == len(STORED)
    assert index.load_arrays(key_chunks(STORED, [40])) == 0
    assert client.hget(f"{base}:ci:meta", "loaded") == b"1"


def test_a_long_load_keeps_its_claim(redis_url, base):
    index = RedisContentIndex(connect(redis_url), base, k=3, resolver=NoPages())
    index.load_claim_seconds = 0.3
    other = RedisContentIndex(connect(redis_url), base, k=3, resolver=NoPages())
    states = []

    def slow_chunks():
        for chunk in key_chunks(STORED, [5] * 7):
            threading.Event().wait(0.15)  # a slow storage read: longer than a third of the claim
            states.append(other._claim("w-other/0"))
            yield chunk

    assert index.load_arrays(slow_chunks()) == len(STORED)
    assert states and all(s.startswith("worker/") for s in states), states
    assert len(index) == len(STORED)


# --- end to end: four workers of a new namespace started together -------------------------------

#: A Python process that imports the crawler once, then per line of stdin (the environment and
#: the ``scrapy`` command lines of one round, JSON) forks one worker per command line at the same
#: instant and prints their pids, then their exit codes. Forked from warm imports, the workers
#: start within milliseconds of each other (racing harder than processes importing for seconds
#: on a loaded machine) and a round costs the crawl, not four interpreter starts.
ZYGOTE = r"""
import json, os, sys, traceback
import numpy, redis, scrapy.cmdline, sqlalchemy  # noqa: F401 - warm imports
import crawler.cluster.worker, crawler.cluster.scheduler, crawler.pipelines, crawler.spiders
assert "twisted.internet.reactor" not in sys.modules, "the reactor must be installed per worker"
for line in sys.stdin:
    env, commands = json.loads(line)
    pids = []
    for argv, stderr in commands:
        pid = os.fork()
        if pid == 0:
            os.environ.update(env)
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            code = 1
            try:
                scrapy.cmdline.execute(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    print(json.dumps(pids), flush=True)
    print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]), flush=True)
"""


def worker_command(seeds: str, workdir: Path) -> list[str]:
    """``scrapy crawl web`` of one worker (the settings of :meth:`bench.cluster.Cluster.start`,
    no download delay)."""
    overrides = {"DROPPED_LOG": workdir / "dropped.jsonl", "STATS_FILE": workdir / "stats.json",
                 "LOG_FILE": workdir / "crawl.log", "DOWNLOAD_DELAY": 0,
                 "DOWNLOAD_DELAY_JITTER": 0, "DEDUP_PROGRESS_INTERVAL": 0,
                 "STORAGE_BATCH_SECONDS": 0.5, "DISTRIBUTED_LEASE_SECONDS": LEASE,
                 "TRAP_FOLLOW_LINKS_OF": FOLLOW_LINKS_OF}  # fmt: skip
    argv = ["scrapy", "crawl", "web", "-a", f"urls={seeds}"]
    for key, value in overrides.items():
        argv += ["-s", f"{key}={value}"]
    return argv


def members_until(client: Any, base: str, done: threading.Event) -> set[bytes]:
    """Every member of the crawl's membership seen until ``done`` (polled)."""
    seen: set[bytes] = set()
    while not done.wait(0.01):
        seen.update(client.zrange(f"{base}:workers", 0, -1))
    return seen


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_four_workers_of_a_new_namespace_started_together_all_join_and_finish(
        redis_url, pg_url, tmp_path):  # fmt: skip
    """20 rounds, each a new namespace on one storage: from the second round on, storage holds
    the site's pages, which the four workers would all load at once but for the load claim;
    every fourth round starts on the index parameters half created (only ``k``), which the
    two-step code read as ``blocks`` None (the TypeError of the issue, in every worker)."""
    client = connect(redis_url)
    with serve_web([template_site(12, seed=1)]) as servers, fresh_schema(pg_url) as storage:
        env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "settings.distributed",
               "DEDUP_REDIS_URL": redis_url, "DEDUP_STORAGE_URL": storage}  # fmt: skip
        zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=ROOT, env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        try:
            for round_ in range(20):
                run_round(zygote, client, servers[0], tmp_path / f"r{round_}", round_)
        finally:
            zygote.kill()
            zygote.wait(10)


def run_round(zygote: Any, client: Any, server: SiteServer, tmp: Path, round_: int) -> None:
    """Four workers of a new namespace forked together; every one joins and finishes, the crawl
    completes (every page fetched, nothing left queued or leased) and no traceback is logged."""
    server.reset_hits()
    namespace = f"test-race-{uuid.uuid4().hex[:10]}"
    base = f"dedup:{namespace}"
    dirs = [tmp / f"w{i}" for i in range(4)]
    commands = []
    for workdir in dirs:
        workdir.mkdir(parents=True)
        commands.append([worker_command(server.url("/"), workdir), str(workdir / "stderr.txt")])
    if round_ % 4 == 3:  # as a first worker of the two-step code left it, killed between steps
        client.hset(f"{base}:ci:meta", "k", defaults.SIMHASH_MAX_DISTANCE)
    done, members = threading.Event(), []
    watcher = threading.Thread(target=lambda: members.append(members_until(client, base, done)))
    watcher.start()
    try:
        zygote.stdin.write(json.dumps([{"DEDUP_NAMESPACE": namespace}, commands]) + "\n")
        zygote.stdin.flush()
        json.loads(zygote.stdout.readline())  # the pids: forked
        codes = json.loads(zygote.stdout.readline())  # bounded by the crawl (pytest-timeout)
        left = client.hmget(f"{base}:web:requests:meta", ["queued", "leased"])
    finally:
        done.set()
        watcher.join(10)
        clear_namespace(client, base)
    errors = [(d / "stderr.txt").read_text() + (d / "crawl.log").read_text() for d in dirs]
    assert not [e for e in errors if "Traceback" in e], f"round {round_}: {tracebacks(errors)}"
    assert codes == [0] * 4, f"round {round_}: {codes}"
    assert len(members[0]) == 4, f"round {round_}: {members[0]}"
    stats = [json.loads((d / "stats.json").read_text()) for d in dirs]
    assert [s["finish_reason"] for s in stats] == ["finished"] * 4, f"round {round_}"
    site = server.site
    assert site.canonical_pages - site.disallowed <= set(server.canonical_hits()), round_
    assert left == [b"0", b"0"], f"round {round_}: queued, leased {left}"
    loaded = sorted(s.get("dedup/loaded", 0) for s in stats)
    if round_:  # one worker loaded the stored pages, the three others waited for it
        assert loaded[:3] == [0, 0, 0] and loaded[3] > 0, f"round {round_}: {loaded}"


def tracebacks(texts: list[str]) -> list[str]:
    """The tracebacks in ``texts``, each to its exception line."""
    found = []
    for text in texts:
        lines = text[text.find("Traceback"):].splitlines() if "Traceback" in text else []
        end = next((i for i, line in enumerate(lines[1:], 1) if not line.startswith(" ")), 0)
        if lines:
            found.append("\n".join(lines[: end + 1]))
    return found

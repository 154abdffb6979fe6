"""Settings that decide pages are one per crawl (issue 24, item 3): the join check.

On the real Redis and PostgreSQL, with real ``scrapy crawl web`` worker processes of the
distributed profile (:mod:`bench.cluster`'s harness) crawling a site served on 127.0.0.1:

* a worker whose settings differ from its crawl's is refused in one line naming each setting
  and both values, exit 2, and writes nothing to Redis (every key and the ``meta`` hash are
  as before: SCAN);
* ``SIMHASH_MAX_DISTANCE=6`` on a namespace built with 3 (the issue's 25-line traceback, exit 1)
  is one line, exit 2 — by the join check, and by the content index's own check on a namespace
  recorded before the join check existed;
* two workers started at the same instant with different settings: exactly one runs;
* ``SCHEDULER_PERSIST=False`` / ``SCHEDULER_FLUSH_ON_START=True`` are refused at pre-flight,
  and the shared scheduler never deletes the queue or the seen set, whatever its settings;
* a worker started from a script (``CrawlerProcess``, no pre-flight) is refused with one ERROR
  line, finish reason ``settings_refused``, no traceback and nothing written;
* ``-s DEDUP_NAMESPACE`` alone puts the queue under that namespace (the environment's is not
  touched); a storage error names ``DEDUP_STORAGE_URL`` when that is what the user set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import scrapy
from scrapy.settings import Settings

from bench.cluster import Cluster, cluster_on
from crawler.backends.redis import RedisContentIndex, clear_namespace, connect
from crawler.cluster import joincheck
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer
from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

#: Settings on which a joining worker differs from the crawl, and how a refusal shows them.
MISMATCHES = [
    ({"SIMHASH_MAX_DISTANCE": 6}, ["SIMHASH_MAX_DISTANCE=6 (crawl: 3)"]),
    ({"SIMHASH_SHINGLE": 2, "SIMHASH_MIN_TOKENS": 5},
     ["SIMHASH_SHINGLE=2 (crawl: 1)", "SIMHASH_MIN_TOKENS=5 (crawl: 20)"]),
    ({"SCOPE": "domain"}, ["SCOPE=domain (crawl: host)"]),
    ({"TRAP_MAX_PATH_DEPTH": 5}, ["TRAP_MAX_PATH_DEPTH=5 (crawl: 16)"]),
    ({"URLNORM_STRIP_PARAMS": "sid"}, ["URLNORM_STRIP_PARAMS=sid (crawl: _hsenc,"]),
    ({"BLOOM_CAPACITY": 5000}, ["BLOOM_CAPACITY=5000 (crawl: 10000000)"]),
    ({"SCHEDULER_QUEUE_KEY": "elsewhere:%(spider)s"},
     ["SCHEDULER_QUEUE_KEY=elsewhere:web (crawl: dedup:"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer(template_site(8, seed=3)) as server:
        yield server


@pytest.fixture
def crawl(site, tmp_path, redis_url, pg_url) -> Iterator[Cluster]:
    """A namespace of its own, storage in a schema of its own (both gone afterwards)."""
    with cluster_on([site], tmp_path, redis_url, pg_url) as cluster:
        yield cluster


def state(cluster: Cluster) -> dict[str, Any]:
    """Every key of the crawl's namespace with its type, and the ``meta`` hash (SCAN)."""
    client = connect(cluster.redis_url)
    keys = {k.decode(): client.type(k).decode() for k in client.scan_iter(f"{cluster.base}*")}
    return {"keys": keys, "meta": client.hgetall(f"{cluster.base}:meta")}


def finish(worker: Any, timeout: float = 120) -> tuple[int, str]:
    worker.proc.wait(timeout)
    return worker.proc.returncode, worker.proc.stderr.read()


@contextmanager
def paused_first_worker(cluster: Cluster) -> Iterator[None]:
    """The crawl's first worker (it records the crawl's settings), stopped (SIGSTOP) once it
    holds work, so that the crawl is running and its Redis state still while the body runs;
    then let go, and it must finish the crawl."""
    worker = cluster.start(DOWNLOAD_DELAY=0.3)
    member = cluster.member_id(worker)
    client = connect(cluster.redis_url)
    deadline = time.monotonic() + 60
    while not client.hlen(f"{cluster.base}:web:requests:lease:{member}"):
        assert time.monotonic() < deadline and worker.proc.poll() is None, "it never got work"
        time.sleep(0.02)
    worker.proc.send_signal(signal.SIGSTOP)
    recorded = json.loads(client.hget(f"{cluster.base}:meta", "settings"))
    assert recorded["SIMHASH_SHINGLE"] == 1 and recorded["SCOPE"] == "host"
    try:
        yield
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    code, err = finish(worker)
    assert code == 0, err[-2000:]
    assert worker.stats["finish_reason"] == "finished"


def assert_one_line(err: str, *parts: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


# --- workers refused at pre-flight ----------------------------------------------------------------


@pytest.mark.slow
def test_each_mismatched_setting_is_refused_in_one_line_and_writes_nothing(crawl):
    with paused_first_worker(crawl):
        before = state(crawl)
        assert MISMATCHES and before["keys"]
        refused = [crawl.start(**settings) for settings, _ in MISMATCHES]
        for worker, (settings, shown) in zip(refused, MISMATCHES, strict=True):
            code, err = finish(worker)
            assert code == 2, err[-2000:]
            line = assert_one_line(err, f"differ from crawl {crawl.base}'s", *shown,
                                   "run it with the crawl's settings or under another "
                                   "DEDUP_NAMESPACE")  # fmt: skip
            assert line.count("(crawl: ") == len(settings), line  # the differing ones only
        assert state(crawl) == before  # no key, no field added or changed by a refused worker


@pytest.mark.slow
def test_another_storage_url_is_refused_without_its_password(crawl, pg_url):
    other = pg_url.replace("postgres@", "postgres:hunter2@").rsplit("/", 1)[0] + "/postgres"
    with paused_first_worker(crawl):
        before = state(crawl)
        code, err = finish(crawl.start(STORAGE_URL=other + "?application_name=x"))
        assert state(crawl) == before
    assert code == 2
    assert_one_line(err, "STORAGE_URL=postgresql://postgres@", "/postgres (crawl: ")
    assert "hunter2" not in err


@pytest.mark.slow
def test_a_different_k_is_one_line_exit_2_not_a_traceback(crawl):
    """The issue's SIMHASH_MAX_DISTANCE=6 against 3 (a 25-line traceback, exit 1, before)."""
    with paused_first_worker(crawl):
        code, err = finish(crawl.start(SIMHASH_MAX_DISTANCE=6))
    assert code == 2
    assert_one_line(err, "SIMHASH_MAX_DISTANCE=6 (crawl: 3)")


def test_the_index_of_a_namespace_recorded_before_join_checks_refuses_in_one_line(crawl):
    """A namespace without a settings record (built by an older version): the content index's
    own check refuses another k, one line, exit 2 (it raised a SettingError traceback)."""
    client = connect(crawl.redis_url)
    RedisContentIndex(client, crawl.base, k=5).close()
    code, err = finish(crawl.start())
    assert code == 2
    assert_one_line(err, "SIMHASH_MAX_DISTANCE=3", "5")


@pytest.mark.parametrize("setting", [{"SCHEDULER_PERSIST": False},
                                     {"SCHEDULER_FLUSH_ON_START": True}])  # fmt: skip
def test_a_worker_that_would_delete_the_shared_state_is_refused(crawl, setting):
    code, err = finish(crawl.start(**setting))
    assert code == 2
    name = next(iter(setting))
    assert_one_line(err, f"setting {name}=", "share the queue and the seen set")
    assert state(crawl)["keys"] == {}  # refused before it touched Redis


# --- the first-worker race ------------------------------------------------------------------------


@pytest.mark.slow
def test_two_workers_started_at_once_with_different_settings_one_runs(crawl):
    workers = [crawl.start(), crawl.start(SIMHASH_SHINGLE=2)]
    results = [finish(worker) for worker in workers]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert_one_line(loser, "SIMHASH_SHINGLE=")
    recorded = json.loads(connect(crawl.redis_url).hget(f"{crawl.base}:meta", "settings"))
    winner = 0 if results[0][0] == 0 else 1
    assert recorded["SIMHASH_SHINGLE"] == (1, 2)[winner]  # the record is the runner's
    assert workers[winner].stats["finish_reason"] == "finished"


def claims_at_once(redis_url: str, ns: str, shingles: list[int]) -> list[str]:
    """One claim per thread, released together; "joined" or the refusal of each."""
    barrier, results = threading.Barrier(len(shingles)), [""] * len(shingles)

    def claim(i: int) -> None:
        record = joincheck.JoinRecord(connect(redis_url), ns)
        barrier.wait()
        try:
            record.check(Settings({"SIMHASH_SHINGLE": shingles[i]}))
            results[i] = "joined"
        except joincheck.JoinRefused as exc:
            results[i] = str(exc)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(shingles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_record_claims_are_atomic_under_threads(redis_url):
    """Sixteen claims at once on a new namespace, two settings: the first record stands and
    exactly the claims with its settings pass."""
    base = f"dedup:t-join-{uuid.uuid4().hex[:10]}"
    shingles = [1 + i % 2 for i in range(16)]
    try:
        for round_ in range(10):
            ns = f"{base}:{round_}"
            results = claims_at_once(redis_url, ns, shingles)
            won = json.loads(connect(redis_url).hget(f"{ns}:meta", "settings"))
            assert results and len(results) == len(shingles)
            for shingle, result in zip(shingles, results, strict=True):
                expected = "joined" if shingle == won["SIMHASH_SHINGLE"] else "SIMHASH_SHINGLE="
                assert expected in result, (shingle, result)
    finally:
        clear_namespace(connect(redis_url), base)


# --- the shared scheduler never deletes the shared state -----------------------------------------


def test_the_shared_scheduler_never_flushes_whatever_its_settings(redis_url):
    """Settings given directly (no pre-flight, no join check: no crawler), persistence off and
    a flush at start: opening and closing delete nothing (scrapy-redis's would empty both)."""
    from scrapy.utils.test import get_crawler

    from crawler.cluster.scheduler import SharedScheduler

    name = f"t-join-{uuid.uuid4().hex[:10]}"
    crawler = get_crawler(scrapy.Spider, {
        "REDIS_URL": redis_url, "DEDUP_BACKEND": "redis", "DEDUP_NAMESPACE": name,
        "SCHEDULER_QUEUE_KEY": "%(namespace)s:%(spider)s:requests",
        "SCHEDULER_SERIALIZER": "crawler.cluster.serializer",
        "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter", "BLOOM_CAPACITY": 1000,
        "REQUEST_FINGERPRINTER_CLASS": "crawler.urls.fingerprint.CanonicalRequestFingerprinter",
        "SCHEDULER_PERSIST": False, "SCHEDULER_FLUSH_ON_START": False,
    })  # fmt: skip
    spider = crawler.spider = crawler._create_spider("web")
    crawler.stats.open_spider()
    settings = crawler.settings
    client = connect(redis_url)
    try:
        first = SharedScheduler.from_settings(settings)
        assert first.persist is False
        first.open(spider)
        assert first.enqueue_request(scrapy.Request("http://a.test/1"))
        first.flush_pushes()  # held until the next pop otherwise (crawler.cluster.scheduler)
        keys = sorted(client.scan_iter(f"dedup:{name}:*"))
        assert any(b":web:requests" in k for k in keys) and any(b":bloom" in k for k in keys)
        first.close("finished")
        first.flush()  # scrapy-redis's flush, called directly
        again = SharedScheduler.from_settings(settings)
        again.flush_on_start = True
        again.open(spider)
        again.close("shutdown")
        assert sorted(client.scan_iter(f"dedup:{name}:*")) == keys
        again.enqueue_request(scrapy.Request("http://a.test/1"))
        again.flush_pushes()
        assert again.queue.counts() == (1, 0)  # still seen: not queued twice
    finally:
        clear_namespace(client, f"dedup:{name}")


# --- a worker started without the crawl command ------------------------------------------------

SCRIPT = """
import json, sys
from scrapy.crawler import CrawlerProcess
from scrapy.utils.project import get_project_settings
settings = get_project_settings()
settings.setdict(json.loads(sys.argv[2]), priority="cmdline")
process = CrawlerProcess(settings)
process.crawl("web", urls=sys.argv[1])
process.start()
"""


@pytest.mark.slow
@pytest.mark.parametrize("setting", [{"SIMHASH_SHINGLE": 2}, {"SCHEDULER_PERSIST": False}])
def test_a_script_worker_is_refused_with_one_error_line(crawl, site, tmp_path, setting):
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    stats = tmp_path / "stats.json"
    overrides = {"STATS_FILE": str(stats), "DROPPED_LOG": str(tmp_path / "d.jsonl"),
                 "DEDUP_PROGRESS_INTERVAL": 0, "TRAP_FOLLOW_LINKS_OF": "all", **setting}
    with paused_first_worker(crawl):
        before = state(crawl)
        proc = subprocess.run([sys.executable, str(script), site.url("/"),
                               json.dumps(overrides)], cwd=ROOT, env=crawl.env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert state(crawl) == before
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line or "CRITICAL" in line]
    assert len(errors) == 1, proc.stderr[-4000:]
    assert "Closing the spider (settings_refused)" in errors[0]
    assert next(iter(setting)) in errors[0]
    assert "Traceback" not in proc.stderr
    assert json.loads(stats.read_text())["finish_reason"] == "settings_refused"


# --- the namespace and the storage variable -------------------------------------------------------


def test_dedup_namespace_given_with_s_alone_holds_the_queue(crawl, redis_url):
    """The environment says one namespace, ``-s`` another: every key, the queue's included,
    lands under the ``-s`` one (the queue went under the environment's before)."""
    other = f"{crawl.namespace}-s"
    try:
        code, err = finish(crawl.start(DEDUP_NAMESPACE=other))
        assert code == 0, err[-2000:]
        client = connect(redis_url)
        assert not list(client.scan_iter(f"{crawl.base}:*"))  # the environment's: untouched
        queue = sorted(k.decode() for k in client.scan_iter(f"dedup:{other}:web:requests*"))
        assert f"dedup:{other}:web:requests:meta" in queue, queue
    finally:
        clear_namespace(connect(redis_url), f"dedup:{other}")


@pytest.mark.parametrize("given", ["env", "-s"])
def test_a_storage_error_names_the_variable_the_user_set(crawl, pg_url, given):
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    if given == "env":
        crawl.storage_url = unreachable
        worker = crawl.start()
    else:
        worker = crawl.start(STORAGE_URL=unreachable)
    code, err = finish(worker)
    assert code == 1
    line = assert_one_line(err, "127.0.0.1:1")
    if given == "env":
        assert "check DEDUP_STORAGE_URL" in line and " STORAGE_URL" not in line
    else:
        assert "check STORAGE_URL" in line and "DEDUP_STORAGE_URL" not in line


def test_every_recorded_setting_is_a_known_setting_read_as_its_component_reads_it():
    from crawler.commands.preflight import known_setting_names

    names = [s.name for s in joincheck.JOIN_SETTINGS]
    assert names and len(set(names)) == len(names)
    assert set(names) <= known_setting_names()
    given = Settings({"SIMHASH_SHINGLE": "4", "URLNORM_STRIP_PARAMS": "b, A",
                      "STORAGE_URL": "postgres://u:secret@db/crawl", "DEDUP_NAMESPACE": "n"})
    same = Settings({"SIMHASH_SHINGLE": 4, "URLNORM_STRIP_PARAMS": ["a", "b"],
                     "STORAGE_URL": "postgresql+psycopg://u:other@db/crawl",
                     "DEDUP_NAMESPACE": "n"})  # fmt: skip
    assert joincheck.differences(joincheck.record(given), joincheck.record(same)) == []
    record = joincheck.record(given)
    assert record["STORAGE_URL"] == "postgresql://u@db:5432/crawl"  # no password, ever
    assert record["SIMHASH_BLOCKS"] == 4  # unset: k + 1, as the index uses it
    # the same database reached another way: no password (PGPASSWORD), the port spelled out,
    # driver options; and the block count given as the default it is
    also_same = Settings({"SIMHASH_SHINGLE": 4, "URLNORM_STRIP_PARAMS": ["a", "b"],
                          "STORAGE_URL": "postgresql://u@DB:5432/crawl?sslmode=require",
                          "SIMHASH_BLOCKS": 4, "DEDUP_NAMESPACE": "n"})  # fmt: skip
    assert joincheck.differences(record, joincheck.record(also_same)) == []
    others = [Settings({**given.copy_to_dict(), "STORAGE_URL": url}) for url in (
        "postgresql://u@db/other", "postgresql://v@db/crawl", "postgresql://u@db:5433/crawl")]
    assert all(joincheck.differences(record, joincheck.record(o)) for o in others)
    relative = joincheck.record(Settings({"STORAGE_URL": "sqlite:///crawl.db"}))
    assert relative["STORAGE_URL"] == f"sqlite:///{Path.cwd() / 'crawl.db'}"


def test_a_refused_worker_prints_one_line_before_scrapys_start_up_lines(site, redis_url, tmp_path):
    """Without a LOG_FILE Scrapy prints a dozen start-up lines on stderr once logging is set
    up; a worker its crawl refuses is told before them, as any usage error: stderr is the
    one line. (The crawl's settings are recorded as its first worker records them.)"""
    ns = f"t-join-{uuid.uuid4().hex[:10]}"
    settings = Settings({"DEDUP_NAMESPACE": ns, "REDIS_URL": redis_url})
    client = connect(redis_url)
    try:
        joincheck.JoinRecord(client, f"dedup:{ns}", redis_url).check(settings, True)
        env = {**os.environ, "SCRAPY_SETTINGS_MODULE": "settings.distributed",
               "DEDUP_NAMESPACE": ns, "DEDUP_REDIS_URL": redis_url,
               "DEDUP_STORAGE_URL": f"sqlite:///{tmp_path / 'crawl.db'}"}
        out = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "web", "-a",
                              f"urls={site.url('/')}", "-s", "SIMHASH_MAX_DISTANCE=6"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2
        assert_one_line(out.stderr, "SIMHASH_MAX_DISTANCE=6 (crawl: 3)")
        assert not (tmp_path / "crawl.db").exists()  # refused before storage was touched
    finally:
        clear_namespace(client, f"dedup:{ns}")

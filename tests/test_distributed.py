"""The scale-out profile: JSON request queue, and two crawlers sharing one Redis and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
import scrapy
import sqlalchemy as sa
from scrapy.utils.request import request_from_dict

from crawler.backends import serializer
from crawler.backends.redis import clear_namespace, connect
from crawler.sitegen import demo_site, template_site
from crawler.siteserver import SiteServer
from crawler.urlnorm import normalize_url
from tests.conftest import ROOT, fresh_pg_schema


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
        "'TELNETCONSOLE_ENABLED', 'ITEM_PIPELINES']}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    values = json.loads(out.stdout)
    assert values["SCHEDULER"] == "crawler.backends.scheduler.SharedScheduler"
    assert values["SCHEDULER_SERIALIZER"] == "crawler.backends.serializer"
    assert values["SCHEDULER_PERSIST"] is True
    assert values["DUPEFILTER_CLASS"] == "crawler.dupefilter.BloomDupeFilter"
    assert values["DEDUP_BACKEND"] == "redis"
    assert values["REDIS_URL"] == "redis://10.0.0.1:6379/3"
    assert values["STORAGE_URL"].startswith("postgresql+psycopg://")
    assert values["SCHEDULER_QUEUE_KEY"] == "dedup:crawl-42:%(spider)s:requests"
    assert values["TELNETCONSOLE_ENABLED"] is False
    assert "crawler.pipelines.neardup.NearDuplicatePipeline" in values["ITEM_PIPELINES"]


# --- two workers end to end ---------------------------------------------------------------------


@pytest.fixture
def pg_schema(pg_url):
    """A STORAGE_URL bound to a fresh PostgreSQL schema, dropped afterwards."""
    with fresh_pg_schema(pg_url, "test_distributed") as url:
        yield url


def big_template_site():
    """240 distinct short posts in one large shared template, and their mirrors: a worker that
    learned the template fingerprints differently from one that has not yet."""
    return template_site(240, seed=5)


def start_worker(seed: str, workdir, env: dict[str, str]) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    overrides = {
        "DROPPED_LOG": workdir / "dropped.jsonl",
        "DOWNLOAD_DELAY": 0,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "DEDUP_PROGRESS_INTERVAL": 0,
        "STORAGE_BATCH_SECONDS": 0.5,
        "LOG_FILE": workdir / "crawl.log",
        "DISTRIBUTED_IDLE_SECONDS": 1,
    }
    args = [sys.executable, "-m", "scrapy", "crawl", "web", "-a", f"urls={seed}"]
    for key, value in overrides.items():
        args += ["-s", f"{key}={value}"]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("make_site", [demo_site, big_template_site], ids=["demo", "template"])
def test_two_workers_fetch_each_page_once_and_keep_one_per_duplicate_group(
    tmp_path, redis_url, pg_schema, make_site
):
    pytest.importorskip("crawler.middlewares.links")  # the project's link middleware
    namespace = f"test-{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "SCRAPY_SETTINGS_MODULE": "settings.distributed",
        "DEDUP_NAMESPACE": namespace,
        "DEDUP_REDIS_URL": redis_url,
        "DEDUP_STORAGE_URL": pg_schema,
    }
    site = make_site()
    try:
        with SiteServer(site) as server:
            seed = server.url("/")
            workers = [start_worker(seed, tmp_path / f"w{i}", env) for i in range(2)]
            deadline = time.monotonic() + 240
            outputs = []
            for proc in workers:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                outputs.append(out)
            hits = server.canonical_hits()
            base = server.base_url
        for i, proc in enumerate(workers):
            log = (tmp_path / f"w{i}" / "crawl.log").read_text()
            assert proc.returncode == 0, outputs[i][-2000:] + log[-3000:]
            assert "Traceback" not in log, log[-3000:]
            assert "Warning:" not in log, log[-3000:]  # e.g. a DeprecationWarning of a package
        logs = [(tmp_path / f"w{i}" / "crawl.log").read_text() for i in range(2)]

        # every page fetched exactly once between the two workers
        fetched = {path for path in hits if path in site.canonical_pages}
        assert fetched == site.canonical_pages - site.disallowed
        repeated = {p: n for p, n in hits.items() if n > 1 and p != "/robots.txt"}
        assert repeated == {}
        split = [re.findall(r"'downloader/response_count': (\d+)", log) for log in logs]
        assert sum(int(n[0]) for n in split if n) >= len(fetched), split

        # one kept page per duplicate group, whichever worker saw it
        engine = sa.create_engine(pg_schema)
        with engine.connect() as conn:
            stored_rows = conn.execute(sa.text("SELECT canonical_url FROM documents")).all()
        engine.dispose()
        stored = [row[0] for row in stored_rows]
        assert len(stored) == len(set(stored))
        for members in site.duplicate_groups().values():
            kept = set(stored) & {normalize_url(base + path) for path in members}
            assert len(kept) == 1, (members, kept, split)
        grouped = set().union(*site.duplicate_groups().values())
        singles = {normalize_url(base + path) for path in site.distinct_pages - grouped}
        assert singles <= set(stored)
    finally:
        clear_namespace(connect(redis_url), f"dedup:{namespace}")


@pytest.mark.redis
def test_shared_idle_keeps_a_worker_open_while_the_crawl_has_work(redis_url):
    from scrapy import Spider
    from scrapy.exceptions import DontCloseSpider

    from crawler.backends.sharedidle import SharedIdle

    base = f"dedup:test-{uuid.uuid4().hex[:10]}"
    client = connect(redis_url)
    spider = Spider(name="web")
    queue = f"{base}:%(spider)s:requests"
    mine = SharedIdle(connect(redis_url), base, queue, idle_seconds=0.0)
    other = SharedIdle(connect(redis_url), base, queue, idle_seconds=0.0)
    try:
        mine.on_idle(spider)  # nothing queued, nobody busy: may close
        client.zadd(queue % {"spider": "web"}, {"request": 0})
        with pytest.raises(DontCloseSpider):
            mine.on_idle(spider)
        client.delete(queue % {"spider": "web"})
        other.beat()
        with pytest.raises(DontCloseSpider):
            mine.on_idle(spider)
        other.on_closed(spider)  # its heartbeat goes with it
        mine.on_idle(spider)
    finally:
        clear_namespace(client, base)

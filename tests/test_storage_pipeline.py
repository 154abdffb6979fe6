"""StoragePipeline driven by a real Scrapy crawler (``scrapy.utils.test.get_crawler``).

Each crawl runs in a fresh interpreter (:func:`run_child`): a Twisted reactor runs once per
process, and the suite's other modules may have installed one already. The child runs a
scripted spider whose async ``start()`` yields page items (no network), sleeps, or cuts the
database connection through a TCP proxy (:class:`TcpProxy`) to simulate an outage; it prints
one JSON line with what it saw.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import scrapy
import sqlalchemy as sa
from scrapy.exceptions import DropItem

from crawler.config import SettingError
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.pipelines.storage import StoragePipeline, document_row, dropped_row
from crawler.vocab import Drop
from tests.conftest import fresh_pg_schema

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = "crawler.pipelines.storage.StoragePipeline"


# --- what runs in the child -------------------------------------------------------------------

def page(i: int, kind: str = "page") -> PageItem:
    url = f"http://site.test/{i}"
    return PageItem(
        url=url, status=200, content_type="text/html", title=f"{kind} {i}",
        text=f"words of page {i} " * 20, html="", depth=1, referer="http://site.test/",
        fetched_at="2026-01-02T03:04:05+00:00", canonical_url=url,
        fingerprints=[f"{i:04x}a", f"{i:04x}b"], content_hash=f"h{i}", simhash=2**63 + i,
    )


class MarkDuplicates:
    """Stands in for the dedup pipeline: raises the real DuplicatePage by item title."""

    async def process_item(self, item: PageItem) -> PageItem:
        if item.title.startswith("dup"):
            raise DuplicatePage(Drop(item.url, "near_duplicate", "http://site.test/0", 2,
                                     simhash=item.simhash, duplicate_simhash=2**64 - 1))
        if item.title.startswith("junk"):
            raise DropItem("not wanted")
        return item


class TcpProxy:
    """127.0.0.1 forwarder to a database server; ``down()`` cuts every connection."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.alive = True
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.server.accept()
            if not self.alive:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        self.alive = False
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.sockets.clear()

    def up(self) -> None:
        self.alive = True


class ScriptedSpider(scrapy.Spider):
    name = "scripted"
    start_urls = ["http://site.test/"]

    def __init__(self, script: list, proxy: TcpProxy | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script
        self.proxy = proxy
        self.produced = 0

    async def start(self):
        import asyncio

        for step, arg in self.script:
            if step in ("page", "dup", "junk", "bad"):
                self.produced += 1
                item = page(arg, step)
                if step == "bad":
                    item.simhash = -5  # not a 64-bit fingerprint: the database layer refuses it
                yield item
            elif step == "sleep":
                await asyncio.sleep(arg)
            elif step == "down":
                self.proxy.down()
            elif step == "up":
                self.proxy.up()


def _present(url: str, fingerprints: list[str]) -> dict[str, bool]:
    """For each fingerprint: is its page in the database right now (own connection)?"""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        stored = {row[0] for row in conn.execute(
            sa.text("SELECT url FROM documents UNION SELECT url FROM dropped"))}
    engine.dispose()
    return {fp: f"http://site.test/{int(fp[:4], 16)}" in stored for fp in fingerprints}


def _rows_now(url: str) -> int:
    """Pages in the database right now, stored or dropped (own connection)."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        try:
            count = conn.execute(sa.text("SELECT (SELECT count(*) FROM documents) + "
                                         "(SELECT count(*) FROM dropped)")).scalar()
        except sa.exc.OperationalError:  # no table yet
            count = 0
    engine.dispose()
    return int(count or 0)


def child_main(arg: str) -> None:
    spec = json.loads(arg)
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    from scrapy.utils.test import get_crawler
    from twisted.internet import reactor

    from crawler import signals as dedup_signals

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if spec.get("text_max_chars"):  # a small cap, for a test to reach it with small pages
        import crawler.pipelines.storage as storage_module

        storage_module.BATCH_TEXT_MAX_CHARS = spec["text_max_chars"]
    url, proxy = spec["url"], None
    if spec.get("proxy"):
        parsed = sa.make_url(url)
        proxy = TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
        url = parsed.set(port=proxy.port).render_as_string(hide_password=False)
    direct = spec["url"]
    settings = {"ITEM_PIPELINES": {f"{__name__}.MarkDuplicates": 300, PIPELINE: 800},
                "STORAGE_URL": url, **spec.get("settings", {})}
    crawler = get_crawler(ScriptedSpider, settings)
    commits: list[dict] = []

    def on_commit(fingerprints: list[str]) -> None:
        commits.append({"fingerprints": fingerprints, "produced": crawler.spider.produced,
                        "present": _present(direct, fingerprints), "rows": _rows_now(direct)})

    crawler.signals.connect(on_commit, signal=dedup_signals.batch_committed)
    writings: list[int] = []  # rows in the database when a batch is about to be written

    def on_writing() -> None:
        writings.append(_rows_now(direct))

    crawler.signals.connect(on_writing, signal=dedup_signals.batch_writing)
    out: dict[str, Any] = {"commits": commits, "writings": writings}

    def done(result: Any) -> None:
        out["stats"] = crawler.stats.get_stats()
        out["crawl_id"] = crawler.stats.get_value(dedup_signals.CRAWL_ID_STAT)
        if result is not None:
            out["error"] = repr(result)
        reactor.stop()

    crawler.crawl(script=spec["script"], proxy=proxy).addBoth(done)
    reactor.run()
    print(json.dumps(out, default=str))


def run_child(url: str, script: list, settings: dict | None = None, proxy: bool = False,
              text_max_chars: int = 0) -> dict:  # fmt: skip
    spec = json.dumps({"url": url, "script": script, "settings": settings or {}, "proxy": proxy,
                       "text_max_chars": text_max_chars})  # fmt: skip
    code = "import sys, tests.test_storage_pipeline as t; t.child_main(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, spec], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, result["error"]
    result["log"] = proc.stderr
    return result


def rows(url: str, sql: str) -> list[tuple]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        result = [tuple(r) for r in conn.execute(sa.text(sql))]
    engine.dispose()
    return result


def assert_committed_only_after_commit(result: dict, not_stored: frozenset = frozenset()) -> None:
    """Every page of a committed batch was in the database when the signal arrived."""
    for commit in result["commits"]:
        present = {fp: ok for fp, ok in commit["present"].items() if fp[:4] not in not_stored}
        assert present and all(present.values()), commit


@pytest.fixture
def pg_schema_url(pg_url: str):
    # trust auth ignores the password: it is here to prove it never reaches the log
    with fresh_pg_schema(pg_url, "test_pipe", password="hunter2") as url:
        yield url


# --- tests ------------------------------------------------------------------------------------

def test_batches_flush_on_close_and_signal_after_commit(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    script = [("page", i) for i in range(7)] + [("dup", 7), ("junk", 8)]
    result = run_child(url, script, {"STORAGE_BATCH_SIZE": 3, "STORAGE_BATCH_SECONDS": 60,
                                     "DROPPED_TEXT_MAX_CHARS": 10})
    stats = result["stats"]
    assert (stats["storage/documents"], stats["storage/dropped"]) == (7, 1)
    assert stats["storage/batches"] == len(result["commits"]) >= 3
    assert_committed_only_after_commit(result, not_stored=frozenset({"0008"}))  # junk: no row
    sent = [fp for c in result["commits"] for fp in c["fingerprints"]]
    assert sorted(sent) == sorted(fp for i in range(9) for fp in page(i).fingerprints)
    # batch_writing comes before each batch is written (the shared scheduler writes what its
    # pages promised then): the rows of the batches before it, none of its own
    before = [0] + [c["rows"] for c in result["commits"][:-1]]
    assert result["writings"] == before, (result["writings"], before)
    assert all(c["rows"] > w for c, w in zip(result["commits"], before, strict=True))
    assert rows(url, "SELECT count(*), min(simhash) FROM documents") == [(7, -(2**63))]
    assert rows(url, "SELECT url, reason, duplicate_of, distance, text, title, crawl_id "
                     "FROM dropped") == [("http://site.test/7", "near_duplicate",
                                          "http://site.test/0", 2, "words of p", "dup 7",
                                          result["crawl_id"])]
    crawl_id, reason, spider, stored, shaping = rows(
        url, "SELECT id, finish_reason, spider, stats, settings FROM crawls")[0]
    assert (crawl_id, reason, spider) == (stats["dedup/crawl_id"], "finished", "scripted")
    assert json.loads(shaping)["STORAGE_BATCH_SIZE"] == 3
    assert json.loads(stored)["storage/documents"] == 7  # final stats, after the last flush


def test_a_partial_batch_is_written_after_batch_seconds(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    script = [("page", 0), ("page", 1), ("sleep", 1.0), ("page", 2)]
    result = run_child(url, script, {"STORAGE_BATCH_SIZE": 1000, "STORAGE_BATCH_SECONDS": 0.05})
    first = result["commits"][0]
    assert first["produced"] == 2  # committed while the spider still waited for page 2
    assert sorted(first["fingerprints"]) == ["0000a", "0000b", "0001a", "0001b"]
    assert result["stats"]["storage/documents"] == 3
    assert_committed_only_after_commit(result)


def test_a_batch_of_long_pages_is_written_before_it_has_its_rows(tmp_path) -> None:
    """A batch is written once its rows hold BATCH_TEXT_MAX_CHARS characters of text, however
    few they are (long pages would otherwise hold STORAGE_BATCH_SIZE pages' text each, ten
    batches queued); a drop's text counts too. Pages 0-9 have 320 characters of text each,
    the drop's is cut to 100."""
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    script = [("page", 0), ("page", 1), ("dup", 2), ("page", 3), ("page", 4), ("page", 5)]
    result = run_child(url, script, {"STORAGE_BATCH_SIZE": 1000, "STORAGE_BATCH_SECONDS": 60,
                                     "DROPPED_TEXT_MAX_CHARS": 100}, text_max_chars=1000)
    batches = [sorted({fp[:4] for fp in c["fingerprints"]}) for c in result["commits"]]
    # 320 + 320 + 100 + 320 = 1060 characters: the fourth row closes the first batch
    assert batches == [["0000", "0001", "0002", "0003"], ["0004", "0005"]], batches
    assert result["stats"]["storage/batches"] == 2
    assert (result["stats"]["storage/documents"], result["stats"]["storage/dropped"]) == (5, 1)
    assert_committed_only_after_commit(result)


def test_a_refused_row_is_isolated_and_the_rest_stored(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    script = [("page", 0), ("bad", 1), ("page", 2), ("page", 3)]
    result = run_child(url, script, {"STORAGE_BATCH_SIZE": 4, "STORAGE_RETRY_BACKOFF": 30})
    stats = result["stats"]
    assert (stats["storage/rejected"], stats["storage/documents"]) == (1, 3)
    assert stats["finish_reason"] == "finished" and "retrying" not in result["log"]
    assert "Storage refused the row for http://site.test/1" in result["log"]
    assert rows(url, "SELECT url FROM documents ORDER BY url") == [
        ("http://site.test/0",), ("http://site.test/2",), ("http://site.test/3",)]
    assert_committed_only_after_commit(result, not_stored=frozenset({"0001"}))


@pytest.mark.postgres
def test_outage_is_retried_and_nothing_is_lost(pg_schema_url: str) -> None:
    script = [("page", 0), ("page", 1), ("sleep", 0.5), ("down", 0), ("page", 2), ("page", 3),
              ("sleep", 0.5), ("up", 0), ("page", 4)]
    result = run_child(pg_schema_url, script, {"STORAGE_BATCH_SIZE": 2,
                                               "STORAGE_RETRY_BACKOFF": 0.1,
                                               "STORAGE_RETRY_TIMES": 6}, proxy=True)
    stats = result["stats"]
    assert stats["storage/errors"] >= 1 and stats["finish_reason"] == "finished"
    assert stats["storage/documents"] == 5
    assert rows(pg_schema_url, "SELECT count(*) FROM documents") == [(5,)]
    assert_committed_only_after_commit(result)
    assert "hunter2" not in result["log"] and "retrying" in result["log"]


@pytest.mark.postgres
def test_lasting_outage_closes_the_spider_with_storage_error(pg_schema_url: str) -> None:
    script = [("page", 0), ("page", 1), ("sleep", 0.5), ("down", 0), ("page", 2), ("page", 3),
              ("sleep", 5)]
    result = run_child(pg_schema_url, script, {"STORAGE_BATCH_SIZE": 2,
                                               "STORAGE_RETRY_BACKOFF": 0.05,
                                               "STORAGE_RETRY_TIMES": 2}, proxy=True)
    stats = result["stats"]
    assert stats["finish_reason"] == "storage_error"
    assert stats["storage/unsaved"] == 2 and stats["storage/documents"] == 2
    assert rows(pg_schema_url, "SELECT url FROM documents ORDER BY url") == [
        ("http://site.test/0",), ("http://site.test/1",)]
    assert_committed_only_after_commit(result)
    sent = {fp for c in result["commits"] for fp in c["fingerprints"]}
    assert sent == {"0000a", "0000b", "0001a", "0001b"}  # never for the unsaved pages
    log = result["log"]
    assert "hunter2" not in log and "postgresql+psycopg://postgres:***@127.0.0.1:" in log
    assert "were NOT stored" in log


def test_a_real_crawl_stores_the_content_hash_of_every_dropped_page(demo_crawl) -> None:
    run = demo_crawl  # the session's crawl of the demo site
    found = run.rows("SELECT d.reason, d.content_hash, k.content_hash FROM dropped d "
                     "JOIN documents k ON k.url = d.duplicate_of")
    assert len(found) == run.rows("SELECT COUNT(*) FROM dropped")[0][0] > 0
    assert {reason for reason, *_ in found} == {"exact_duplicate", "near_duplicate"}
    for reason, own, kept in found:
        assert own and len(own) == len(kept)
        assert (own == kept) == (reason == "exact_duplicate")  # an exact copy: the same hash


# --- in process: settings and row building ----------------------------------------------------

def test_bad_batch_settings_stop_the_pipeline() -> None:
    from scrapy.utils.test import get_crawler

    for name, value in (("STORAGE_BATCH_SIZE", 0), ("STORAGE_BATCH_SECONDS", -1)):
        crawler = get_crawler(settings_dict={name: value, "STORAGE_URL": "sqlite://"})
        with pytest.raises(SettingError, match=name):
            StoragePipeline.from_crawler(crawler)


def test_rows_from_items() -> None:
    binary = page(1)
    binary.text, binary.title = "", ""
    row = document_row(binary, 5)
    assert (row["text"], row["title"], row["crawl_id"], row["simhash"]) == (None, None, 5,
                                                                            2**63 + 1)
    drop = Drop("http://site.test/2", "exact_duplicate", "http://site.test/0", 0)
    record = dropped_row(page(2), drop, 5, 0)
    assert record["text"] is None and record["simhash"] == 2**63 + 2
    assert (record["reason"], record["distance"]) == ("exact_duplicate", 0)
    assert record["content_hash"] == "h2"  # the item's, when the drop carries none
    drop = Drop("http://site.test/2", "exact_duplicate", "http://site.test/0", 0,
                content_hash="c0ffee")
    assert dropped_row(page(2), drop, 5, 0)["content_hash"] == "c0ffee"

"""The canonical copy: of two duplicates, the page the other names canonical is stored.

A small site served on 127.0.0.1 whose copies are fetched *before* their originals (the
originals are reached only through the copies' canonical links), crawled for real: locally
(SQLite) and by one worker of the distributed profile (Redis and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import html as htmllib
import json
import random
import subprocess
import sys
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from scrapy.http import HtmlResponse, Request

from crawler import report
from crawler.backends.local import LocalContentIndex
from crawler.content.template import TemplateFilter
from crawler.dedup.decider import ContentDecider
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.pipelines.neardup import NearDuplicatePipeline
from crawler.review import CrawlDB
from crawler.sitegen.server import SiteServer
from crawler.sitegen.site import Page, Site
from crawler.sitegen.text import TextMaker, load_words
from crawler.spiders.web import canonical_href, html_tree
from crawler.storage import Document, Store
from tests.conftest import ROOT, fresh_pg_schema, run_crawl


def decide(decider: ContentDecider, item: PageItem) -> Any:
    """``item`` through a pipeline on ``decider``, run to its end: the kept item, or
    DuplicatePage raised."""
    return asyncio.run(NearDuplicatePipeline(decider).process_item(item))


# --- canonical_href ---------------------------------------------------------------------------
def _response(body: str, headers: dict[str, str] | None = None) -> HtmlResponse:
    url = "http://site.test/dir/page"
    return HtmlResponse(url, body=body.encode(), headers=headers or {}, encoding="utf-8",
                        request=Request(url))  # fmt: skip


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        ('<head><link rel="canonical" href="/orig"></head>', None, "/orig"),
        ('<head><link rel="Alternate CANONICAL" href=" a.html "></head>', None, "a.html"),
        ('<head><link rel="stylesheet" href="s.css"><link rel="canonical" href="/x"></head>'
         '<link rel="canonical" href="/second">', None, "/x"),
        ('<head><link rel="canonical"></head>', None, None),  # no href: names nothing
        ("<head><title>t</title></head>", None, None),
        ("<head></head>", {"Link": '</style.css>; rel=preload, <http://site.test/o>; '
                                   'rel="canonical"'}, "http://site.test/o"),
        ('<head><link rel="canonical" href="/html"></head>',
         {"Link": "</header>; rel=canonical"}, "/header"),  # the header wins
        ("<head></head>", {"Link": '</n>; rel="next"'}, None),
    ],
)
def test_canonical_href_reads_the_header_then_the_html(body, headers, expected):
    response = _response(f"<html>{body}<body><p>text</p></body></html>", headers)
    assert canonical_href(response, html_tree(response)) == expected


# --- a site whose copies come first -----------------------------------------------------------
def _article(rng: random.Random, topic: str) -> list[str]:
    maker = TextMaker(rng)
    maker.set_focus(topic)
    return maker.paragraphs(topic, 7, 4, 6)


def _html(title: str, paras: list[str], canonical: str = "", links: list[str] = ()) -> bytes:
    head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    body = "".join(f"<p>{htmllib.escape(p)}</p>" for p in paras)
    nav = "".join(f'<a href="{h}">{h}</a> ' for h in links)
    return (f"<!DOCTYPE html><html><head><title>{htmllib.escape(title)}</title>{head}</head>"
            f"<body><article><h1>{htmllib.escape(title)}</h1>{body}</article>"
            f"<footer>{nav}</footer></body></html>").encode()  # fmt: skip


def _distance(first: bytes, second: bytes) -> int | None:
    """The distance at which the crawl's pipeline drops ``second`` after keeping ``first``
    (on one host, young as in the crawl), None when it keeps both."""
    pipe = ContentDecider(LocalContentIndex(3), templates=TemplateFilter())

    def item(path: str, body: bytes) -> PageItem:
        url = f"http://probe.test{path}"
        return PageItem(url=url, status=200, content_type="text/html", title="", text="",
                        html=body.decode(), depth=0, referer=None, fetched_at="",
                        canonical_url=url)  # fmt: skip

    decide(pipe, item("/a", first))
    try:
        decide(pipe, item("/b", second))
    except DuplicatePage as exc:
        return exc.drop.distance
    return None


def _near_copy(paras: list[str], rng: random.Random) -> list[str]:
    """``paras`` with one word changed where the pipeline then finds 1..3 bits apart."""
    original = _html("t", paras)
    for _ in range(200):
        edited = [p.split(" ") for p in paras]
        row = rng.randrange(len(edited))
        edited[row][rng.randrange(len(edited[row]))] = rng.choice(["lantern", "harbour", "velvet"])
        candidate = [" ".join(words) for words in edited]
        if 1 <= (_distance(original, _html("t", candidate)) or 0) <= 3:
            return candidate
    raise AssertionError("no one-word edit lands 1..3 bits away")


def canonical_site() -> Site:
    rng = random.Random(11)
    topics = [t for t in load_words().topics][:8]
    texts = {name: _article(rng, topic) for name, topic in zip(
        ["a", "b", "loop", "off", "missing", "c", "other"], topics, strict=False)}
    near_a = _near_copy(texts["a"], rng)
    pages = {
        # a near copy (1..3 bits) naming its original in the HTML
        "/copy-a": Page(_html("A", near_a, "/orig-a")),
        "/orig-a": Page(_html("A", texts["a"])),
        # an exact copy naming its original in a Link header (relative, resolved)
        "/copy-b": Page(_html("B", texts["b"]), headers={"Link": '<orig-b>; rel="canonical"'}),
        "/orig-b": Page(_html("B", texts["b"])),
        # each names the other: ignored, the first fetched stays
        "/loop-1": Page(_html("L", texts["loop"], "/loop-2")),
        "/loop-2": Page(_html("L", texts["loop"], "/loop-1")),
        # off the crawl's hosts, and a missing page: ignored, the copy stays
        "/copy-off": Page(_html("O", texts["off"], "http://elsewhere.invalid/o")),
        "/copy-missing": Page(_html("M", texts["missing"], "/gone")),
        # the original first: its copy is dropped as usual (and names it)
        "/orig-c": Page(_html("C", texts["c"], links=["/copy-c"])),
        "/copy-c": Page(_html("C", texts["c"], "/orig-c")),
        "/other": Page(_html("X", texts["other"])),
    }
    return Site(name="canonical", pages=pages, canonical_pages=set(pages))


SEEDS = ["/copy-a", "/copy-b", "/loop-1", "/copy-off", "/copy-missing", "/orig-c", "/other"]


def _outcome(store_url: str, base: str) -> tuple[set[str], dict[str, dict[str, Any]]]:
    with Store(store_url, create=False) as store:
        stored = {d.url[len(base):] for d in store._all(sa.select(Document), "test")}
        dropped = {r.url[len(base):]: {"of": (r.duplicate_of or "")[len(base):],
                                       "reason": r.reason, "distance": r.distance,
                                       "rule": r.rule} for r in store.dropped()}  # fmt: skip
    return stored, dropped


def _check(run: Any, stored: set[str], dropped: dict[str, dict[str, Any]]) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    loop = stored & {"/loop-1", "/loop-2"}
    assert stored - loop == {"/orig-a", "/orig-b", "/copy-off", "/copy-missing", "/orig-c",
                             "/other"}, dropped  # fmt: skip
    assert len(loop) == 1
    assert dropped["/copy-a"] == {"of": "/orig-a", "reason": "near_duplicate",
                                  "distance": dropped["/copy-a"]["distance"], "rule": "canonical"}
    assert 1 <= dropped["/copy-a"]["distance"] <= 3  # a real near duplicate, not a 0-bit one
    assert dropped["/copy-b"] == {"of": "/orig-b", "reason": "exact_duplicate", "distance": 0,
                                  "rule": "canonical"}  # fmt: skip
    assert dropped["/copy-c"]["of"] == "/orig-c" and dropped["/copy-c"]["rule"] is None
    stats = run.stats
    assert stats["dedup/canonical/swapped"] == 2
    assert stats["storage/demoted"] == 2
    assert stats["dedup/canonical/loop"] == 1
    assert stats["dedup/canonical/offsite"] == 1
    assert stats["dedup/canonical/missing"] == 1
    assert stats["dedup/canonical/confirmed"] == 1
    # the summary counts a demoted page as a drop, not as a stored page
    assert stats["dedup/summary/pages_stored"] == len(stored)
    assert stats["dedup/summary/dropped"] == len(dropped)
    log = [json.loads(line) for line in run.dropped_log.read_text().splitlines()]
    rules = {r["url"].rsplit("/", 1)[-1]: r.get("rule") for r in log}
    assert rules["copy-a"] == rules["copy-b"] == "canonical"
    assert rules["copy-c"] is None


def test_the_page_named_canonical_is_stored_whatever_the_fetch_order(tmp_path):
    site = canonical_site()
    with SiteServer(site) as server:
        run = run_crawl(tmp_path / "run", urls=[server.url(p) for p in SEEDS],
                        settings={"ROBOTSTXT_OBEY": False})  # fmt: skip
        stored, dropped = _outcome(f"sqlite:///{run.db_path}", server.base_url)
        copy_a = server.url("/copy-a")
    _check(run, stored, dropped)
    # the review says which rule decided, and the report counts the swaps
    explained = subprocess.run([sys.executable, "-m", "scrapy", "dropped", "--db",
                                str(run.db_path), "--explain", copy_a],
                               capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert explained.returncode == 0, explained.stderr
    assert "canonical copy: this page was stored first" in explained.stdout
    assert "orig-a" in explained.stdout
    with CrawlDB.open(str(run.db_path)) as db:
        assert report.build_report(db)["totals"]["canonical_swaps"] == 2


def test_turned_off_the_first_fetched_copy_stays_and_originals_are_not_requested(tmp_path):
    site = canonical_site()
    with SiteServer(site) as server:
        run = run_crawl(tmp_path / "run", urls=[server.url(p) for p in SEEDS],
                        settings={"ROBOTSTXT_OBEY": False, "DEDUP_CANONICAL": False})
        stored, dropped = _outcome(f"sqlite:///{run.db_path}", server.base_url)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {"/copy-a", "/copy-b", "/loop-1"} <= stored
    assert not {"/orig-a", "/orig-b", "/loop-2"} & (stored | set(dropped))  # never fetched
    # the hint is not read: no page is kept for what it is named (the rest of the preference
    # order, crawler.dedup.preference, still decides, whatever the order)
    assert all(d["rule"] != "canonical" for d in dropped.values())
    assert "dedup/canonical/swapped" not in run.stats


@pytest.mark.redis
@pytest.mark.postgres
def test_a_distributed_worker_stores_the_canonical_copy_too(tmp_path, redis_url, pg_url):
    site = canonical_site()
    namespace = f"canon-{uuid.uuid4().hex[:8]}"
    with fresh_pg_schema(pg_url, "canonical") as store_url, SiteServer(site) as server:
        env = {"SCRAPY_SETTINGS_MODULE": "settings.distributed", "DEDUP_REDIS_URL": redis_url,
               "DEDUP_NAMESPACE": namespace}  # fmt: skip
        run = run_crawl(tmp_path / "run", urls=[server.url(p) for p in SEEDS], env=env,
                        settings={"ROBOTSTXT_OBEY": False, "STORAGE_URL": store_url})
        stored, dropped = _outcome(store_url, server.base_url)
    from crawler.backends.redis import clear_namespace, connect

    clear_namespace(connect(redis_url), f"dedup:{namespace}")
    _check(run, stored, dropped)


# --- storage: a demoted page's earlier drops follow it ---------------------------------------
def test_drops_naming_a_demoted_page_name_the_page_kept_instead(tmp_path):
    """A copy kept first had duplicates dropped against it; once the original replaces it,
    those drop rows name the original, with the distance to it, in the same transaction."""
    with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        store.write_batch([{"url": "http://s/copy", "text": "copy text", "title": "Copy",
                            "content_hash": "c" * 40, "simhash": 0b0111}], [])
        store.write_batch([], [
            {"url": "http://s/m1", "reason": "near_duplicate", "duplicate_of": "http://s/copy",
             "distance": 1, "simhash": 0b0011, "content_hash": "d" * 40},
            {"url": "http://s/m2", "reason": "exact_duplicate", "duplicate_of": "http://s/copy",
             "distance": 0, "simhash": 0b0111, "content_hash": "c" * 40},
        ])  # fmt: skip
        demotion = {"url": "http://s/copy", "duplicate_of": "http://s/orig", "reason":
                    "near_duplicate", "distance": 2, "duplicate_simhash": 0b0001,
                    "duplicate_content_hash": "d" * 40, "rule": "canonical", "crawl_id": None,
                    "max_chars": 4}  # fmt: skip
        store.write_batch([{"url": "http://s/orig", "content_hash": "e" * 40,
                            "simhash": 0b0001}], [], [demotion])  # fmt: skip
        assert {d.url for d in store._all(sa.select(Document), "t")} == {"http://s/orig"}
        rows = {r.url: r for r in store.dropped()}
    assert demotion["row"]["url"] == "http://s/copy"
    copy = rows["http://s/copy"]
    assert (copy.duplicate_of, copy.reason, copy.distance, copy.rule, copy.text,
            copy.simhash) == ("http://s/orig", "near_duplicate", 2, "canonical", "copy", 0b0111)
    # m1: same content hash as the original -> exact; m2: simhash 0111 vs 0001 -> 2 bits
    assert (rows["http://s/m1"].duplicate_of, rows["http://s/m1"].reason,
            rows["http://s/m1"].distance, rows["http://s/m1"].rule) == (
        "http://s/orig", "exact_duplicate", 0, "repointed")
    assert (rows["http://s/m2"].duplicate_of, rows["http://s/m2"].reason,
            rows["http://s/m2"].distance, rows["http://s/m2"].duplicate_simhash) == (
        "http://s/orig", "near_duplicate", 2, 0b0001)


def test_a_demotion_of_a_page_not_stored_writes_nothing(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        demotion = {"url": "http://s/never", "duplicate_of": "http://s/o", "reason":
                    "exact_duplicate", "distance": 0}  # fmt: skip
        store.write_batch([], [], [demotion])
        assert demotion["row"] is None and store.dropped() == []


def test_pipeline_without_storage_logs_the_demotion(tmp_path):
    """No storage pipeline: the index swaps at once and the drop log names the demoted copy."""
    from crawler.outputs.droplog import DropLog, read_drop_log

    log = tmp_path / "d.jsonl"
    pipe = ContentDecider(LocalContentIndex(3), templates=TemplateFilter(),
                                 droplog=DropLog(log))  # fmt: skip
    body = _html("T", _article(random.Random(3), load_words().topics[0]))

    def item(path: str, names: str | None) -> PageItem:
        url = f"http://s.test{path}"
        return PageItem(url=url, status=200, content_type="text/html", title="", text="",
                        html=body.decode(), depth=0, referer=None, fetched_at="",
                        canonical_url=url, canonical_link=names)  # fmt: skip

    decide(pipe, item("/copy", "http://s.test/orig"))
    kept = decide(pipe, item("/orig", None))  # kept instead of /copy
    assert kept.simhash is not None
    with pytest.raises(DuplicatePage) as dropped:  # a third copy is dropped against /orig
        decide(pipe, item("/third", None))
    assert dropped.value.drop.duplicate_of == "http://s.test/orig"
    asyncio.run(pipe.close())
    pipe.drops.log.close()
    records = list(read_drop_log(log))
    assert [(r["url"], r["duplicate_of"], r.get("rule")) for r in records] == [
        ("http://s.test/copy", "http://s.test/orig", "canonical"),
        ("http://s.test/third", "http://s.test/orig", None)]


def test_demo_keeps_the_originals_its_partner_copies_name(demo_crawl, demo_server):
    """On the demo, partner copies name their article canonical: whatever the fetch order,
    the article is stored and the copy dropped against it."""
    from crawler.sitegen import demo_site

    site = demo_site()
    partners = {p: o for p, o in site.near_duplicates.items() if p.startswith("/partners/")}
    assert len(partners) == 15
    base = demo_server.base_url
    stored = {u[len(base):] for u in demo_crawl.stored_urls()}
    drops = {u[len(base):]: (of[len(base):], rule) for u, of, rule in demo_crawl.rows(
        "SELECT url, duplicate_of, rule FROM dropped")}  # fmt: skip
    for copy, original in partners.items():
        assert original in stored and copy not in stored
        assert drops[copy][0] == original
    swapped = [u for u, (_, rule) in drops.items() if rule == "canonical"]
    assert set(swapped) <= set(partners)
    assert len(swapped) == demo_crawl.stats.get("dedup/canonical/swapped", 0)


def test_a_copy_stored_by_an_earlier_crawl_gives_way_to_the_page_it_names(tmp_path):
    """Crawl 1 stored a copy naming its original; crawl 2 meets the original: the index
    (loaded from storage, without canonical links) asks storage what the copy names, and
    keeps the original instead."""
    from scrapy.utils.test import get_crawler

    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    body = _html("T", _article(random.Random(8), load_words().topics[2]))
    copy = PageItem(url="http://s.test/copy", status=200, content_type="text/html",
                    title="", text="", html=body.decode(), depth=0, referer=None,
                    fetched_at="", canonical_url="http://s.test/copy",
                    canonical_link="http://s.test/orig")  # fmt: skip
    first = ContentDecider(LocalContentIndex(3), templates=TemplateFilter())
    decide(first, copy)
    from crawler.pipelines.storage import document_row

    with Store(url) as store:
        store.write_batch([document_row(copy, None)], [])
    log = tmp_path / "d.jsonl"
    crawler = get_crawler(settings_dict={"STORAGE_URL": url, "DROPPED_LOG": str(log)})
    pipe = NearDuplicatePipeline.from_crawler(crawler)
    pipe.decider.drops.deferred = False  # no storage pipeline runs here: the drop log hears at once
    asyncio.run(pipe.open_spider())
    original = PageItem(url="http://s.test/orig", status=200, content_type="text/html",
                        title="", text="", html=body.decode(), depth=0, referer=None,
                        fetched_at="", canonical_url="http://s.test/orig")  # fmt: skip
    kept = asyncio.run(pipe.process_item(original))
    assert kept.url == "http://s.test/orig"
    assert crawler.stats.get_value("dedup/canonical/swapped") == 1
    asyncio.run(pipe.close_spider())
    pipe.decider.spider_closed()
    from crawler.outputs.droplog import read_drop_log

    assert [(r["url"], r["duplicate_of"], r.get("rule")) for r in read_drop_log(log)] == [
        ("http://s.test/copy", "http://s.test/orig", "canonical")]

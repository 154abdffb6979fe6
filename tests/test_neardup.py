"""NearDuplicatePipeline with the real LocalContentIndex, real generated sites, real SQLite."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.exceptions import DropItem
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.backends.local import LocalContentIndex
from crawler.commands.preflight import check_settings
from crawler.config import SettingError
from crawler.content.simhash import hamming
from crawler.content.template import TemplateFilter
from crawler.content.text import is_binary, main_tokens, visible_text
from crawler.dedup.decider import ContentDecider
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.logformatter import DedupLogFormatter
from crawler.outputs.droplog import DropLog, read_drop_log
from crawler.pipelines.neardup import NearDuplicatePipeline
from crawler.pipelines.storage import document_row
from crawler.sitegen import demo_site, template_site
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, Drop

BASE = "http://site.test"


class Stats(Counter):
    """The two StatsCollector methods the pipeline calls."""

    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] += count

    def get_value(self, key: str) -> Any:
        return self.get(key)


def make_item(url: str, body: bytes, content_type: str = "text/html; charset=utf-8") -> PageItem:
    """A PageItem built from a real HtmlResponse the way the web spider builds it."""
    response = HtmlResponse(url, body=body, headers={"Content-Type": content_type})
    binary = is_binary(body)
    html = "" if binary else response.text
    return PageItem(
        url=url, status=200, content_type=content_type, title="",
        text="" if binary else visible_text(html), html=html, depth=0, referer=None,
        fetched_at="2026-12-02T00:00:00+00:00", canonical_url=url,
        encoding=None if binary else response.encoding, binary=binary,
    )  # fmt: skip


def pipeline(**kwargs: Any) -> ContentDecider:
    kwargs.setdefault("templates", TemplateFilter())
    return ContentDecider(LocalContentIndex(k=kwargs.pop("k", 3)), stats=Stats(), **kwargs)


def decide(decider: ContentDecider, item: PageItem) -> Any:
    """``item`` through a pipeline on ``decider``, run to its end: the kept item, or
    DuplicatePage raised."""
    return asyncio.run(NearDuplicatePipeline(decider).process_item(item))


class Demoted:
    """A page kept on arrival and demoted later (a preferred twin came): its ``drop``."""

    def __init__(self, drop: Drop) -> None:
        self.drop = drop

    def __str__(self) -> str:
        return f"demoted: {self.drop}"


def run_site(pipe: ContentDecider, site: Any, paths: list[str]) -> dict[str, Any]:
    """Feed pages in ``paths`` order; path -> "kept", the DuplicatePage, or :class:`Demoted`
    (a page kept first that a preferred twin replaced). Drops that named a demoted page name
    its replacement, as storage repoints them."""
    outcome: dict[str, Any] = {}
    demote = pipe.drops.demoted

    def demoted(drop: Drop, kept_content_hash: str | None = None) -> None:
        outcome[drop.url.removeprefix(BASE)] = Demoted(drop)
        for other in outcome.values():
            if not isinstance(other, str) and other.drop.duplicate_of == drop.url:
                other.drop = replace(other.drop, duplicate_of=drop.duplicate_of)
        demote(drop, kept_content_hash)

    pipe.drops.demoted = demoted  # type: ignore[method-assign]
    for path in paths:
        body = site.render(site.pages[path], BASE)
        try:
            decide(pipe, make_item(BASE + path, body))
            outcome[path] = "kept"
        except DuplicatePage as exc:
            outcome[path] = exc
    return outcome


def html_paths(site: Any) -> list[str]:
    return sorted(p for p, page in site.pages.items() if page.content_type.startswith("text/html"))


def assert_groups(site: Any, outcome: dict[str, Any]) -> None:
    """Every distinct page kept; each duplicate group keeps exactly one page."""
    groups = site.duplicate_groups()
    grouped = set().union(*groups.values())
    for path in site.distinct_pages - grouped:
        if path in outcome:
            assert outcome[path] == "kept", (path, outcome[path])
    for original, members in groups.items():
        kept = [p for p in members if outcome.get(p) == "kept"]
        assert len(kept) == 1, (original, {p: str(outcome.get(p)) for p in members})
        for member in members - set(kept):
            exc = outcome[member]
            assert exc.drop.duplicate_of == BASE + kept[0]
            want = EXACT_DUPLICATE if member in site.exact_duplicates or (
                kept[0] in site.exact_duplicates) else NEAR_DUPLICATE  # fmt: skip
            assert exc.drop.reason == want or exc.drop.reason == EXACT_DUPLICATE


# --- the template-heavy site ------------------------------------------------------------------


def _template_orders(site: Any) -> list[list[str]]:
    paths = html_paths(site)
    mirrors = list(site.near_duplicates.items())
    orders = [paths, list(reversed(paths))]
    orders += [random.Random(seed).sample(paths, len(paths)) for seed in range(3)]
    # Adversarial: the host's first pages are an original and its mirror, then distinct pages.
    mirror, original = mirrors[0]
    rest = [p for p in paths if p not in (mirror, original)]
    orders.append([original, mirror, *rest])
    orders.append([rest[0], original, mirror, *rest[1:]])
    orders.append([mirror, original, *rest])
    return orders


def test_template_site_fixture_is_what_the_test_needs() -> None:
    site = template_site()
    posts = [p for p in site.distinct_pages if p.startswith("/posts/")]
    assert len(posts) >= 50 and len(site.near_duplicates) >= 6
    for path in posts[:10]:
        words = len(site.main_text[path].split())
        total = len(visible_text(site.pages[path].body.decode()).split())
        assert 40 <= words <= 130 and words <= 0.1 * total


@pytest.mark.parametrize("order", range(8))
def test_template_site_distinct_pages_kept_mirrors_dropped_in_any_order(order: int) -> None:
    site = template_site()
    paths = _template_orders(site)[order]
    pipe = pipeline()
    outcome = run_site(pipe, site, paths)
    assert_groups(site, outcome)
    dropped = [o for o in outcome.values() if o != "kept"]
    assert len(dropped) == len(site.near_duplicates)
    assert all(o.drop.reason == NEAR_DUPLICATE for o in dropped)
    on_arrival = [o for o in dropped if isinstance(o, DuplicatePage)]
    assert pipe.stats["dedup/kept"] + len(on_arrival) == len(paths)
    assert pipe.stats.get("dedup/demoted", 0) == len(dropped) - len(on_arrival)


def test_without_template_learning_the_template_site_collapses() -> None:
    """The reason TemplateFilter exists: full-text fingerprints drop distinct posts."""
    site = template_site()
    outcome = run_site(pipeline(templates=None), site, html_paths(site))
    wrongly = [p for p in site.distinct_pages if outcome.get(p, "kept") != "kept"]
    assert len(wrongly) > len(site.distinct_pages) // 2


# --- the demo site ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 5])
def test_demo_site_exact_and_near_duplicates(seed: int | None) -> None:
    site = demo_site()
    paths = html_paths(site)
    if seed is not None:
        random.Random(seed).shuffle(paths)
    pipe = pipeline()
    outcome = run_site(pipe, site, paths)
    assert_groups(site, outcome)
    reasons = Counter(o.drop.reason for o in outcome.values() if o != "kept")
    assert reasons[EXACT_DUPLICATE] >= len(site.exact_duplicates)
    assert reasons[NEAR_DUPLICATE] >= 1
    distances = sum(v for k, v in pipe.stats.items() if k.startswith("dedup/distance/"))
    assert distances == sum(reasons.values())
    for path in site.mislabelled & set(paths):
        assert outcome[path] == "kept"


# --- short, empty, binary, odd pages ----------------------------------------------------------


def _page(body: str, head: str = "") -> bytes:
    return f"<html><head><title>t</title>{head}</head><body>{body}</body></html>".encode()


def test_empty_script_only_and_near_empty_pages_are_not_duplicates_of_each_other() -> None:
    pipe = pipeline()
    pages = {}
    for i in range(30):
        pages[f"/empty{i}"] = _page("", head=f"<meta name='id' content='{i}'>")
        pages[f"/script{i}"] = _page(f"<div id='app'></div><script>start({i})</script>")
        pages[f"/tiny{i}"] = _page(f"<p>Gallery image {i}</p>")
    outcome = {}
    for path, body in pages.items():
        item = make_item(BASE + path, body)
        decide(pipe, item)
        outcome[path] = item
    assert all(item.simhash is None for item in outcome.values())  # too short to compare
    assert pipe.stats["dedup/kept"] == 90
    assert pipe.stats["dedup/too_short"] == 90
    assert pipe.stats["dedup/empty"] == 60
    # A byte copy of a script-only page is still an exact copy.
    with pytest.raises(DuplicatePage) as info:
        decide(pipe, make_item(BASE + "/script3-copy", pages["/script3"]))
    assert info.value.drop.reason == EXACT_DUPLICATE
    assert info.value.drop.duplicate_of == BASE + "/script3"


def test_binary_body_labelled_html_is_not_fingerprinted_nor_stored_as_text() -> None:
    pipe = pipeline()
    body = b"%PDF-1.7\n" + bytes(range(256)) * 20
    item = make_item(BASE + "/report", body, "text/html")
    assert item.binary
    item.text = "garbage that must not be stored"
    assert decide(pipe, item) is item
    assert item.text == "" and item.simhash is None and item.content_hash is None
    assert pipe.stats["dedup/binary"] == 1 and "dedup/kept" not in pipe.stats
    decide(pipe, make_item(BASE + "/report-again", body, "text/html"))  # never a duplicate
    assert pipe.stats["dedup/binary"] == 2


def test_one_word_repeated_ten_thousand_times() -> None:
    pipe = pipeline()
    item = make_item(BASE + "/spam", _page("<p>" + "buy " * 10_000 + "</p>"))
    decide(pipe, item)
    assert item.simhash is not None and item.content_hash
    with pytest.raises(DuplicatePage):
        decide(pipe, make_item(BASE + "/spam2", _page("<p>" + "buy " * 9_000 + "</p>")))


ARTICLE = (
    " ".join(
        f"Sentence {i} walks past the {w} mill, the {w}{i} bridge and the quiet orchard."
        for i, w in enumerate(("north", "south", "east", "west", "upper", "lower") * 5)
    )
    + " The café is open."
)
CYRILLIC = " ".join(f"Предложение {i} про мельницу и мост." for i in range(20))


def test_undeclared_charset_is_detected_as_utf8() -> None:
    body = _page(f"<p>{ARTICLE}</p>")
    item = make_item(BASE + "/a", body, "text/html")  # no charset anywhere
    assert item.encoding == "utf-8"
    assert "The café is open." in item.text


def test_misdeclared_charset_follows_the_declaration() -> None:
    """Documented outcome: the declared charset wins (as in browsers), so the text is mojibake.
    It is never an exact copy of the correctly decoded page; with a few non-ASCII words it is
    its near duplicate, in a non-Latin script it is a different page (every word changes)."""
    pipe = pipeline()
    for path, text in (("/latin", ARTICLE), ("/cyrillic", CYRILLIC)):
        decide(pipe, make_item(BASE + path, _page(f"<p>{text}</p>")))
    latin = make_item(BASE + "/latin-bad", _page(f"<p>{ARTICLE}</p>"), "text/html; charset=latin-1")
    assert latin.encoding == "cp1252" and "cafÃ©" in latin.text
    with pytest.raises(DuplicatePage) as info:
        decide(pipe, latin)
    drop = info.value.drop
    assert drop.reason == NEAR_DUPLICATE and drop.duplicate_of == BASE + "/latin"
    cyrillic = make_item(
        BASE + "/cyr-bad", _page(f"<p>{CYRILLIC}</p>"), "text/html; charset=latin-1"
    )
    decide(pipe, cyrillic)
    assert "Предложение" not in cyrillic.text


def test_own_earlier_version_is_never_a_duplicate() -> None:
    pipe = pipeline()
    body = _page(f"<p>{ARTICLE}</p>")
    first, again = make_item(BASE + "/a", body), make_item(BASE + "/a", body)
    decide(pipe, first)
    decide(pipe, again)
    assert pipe.stats["dedup/kept"] == 2


def test_main_tokens_leaves_short_blocks_out_only_when_long_ones_dominate() -> None:
    long_block = [f"w{i}" for i in range(40)]
    assert main_tokens([["posted", "3", "may"], long_block], 30) == long_block
    shorts = [["a", "b"]] * 50  # long blocks hold less than a third
    assert main_tokens([*shorts, long_block], 30) == [t for b in [*shorts, long_block] for t in b]
    assert main_tokens([["x"]], 30) == ["x"]


# --- drop log, stats, persistence, settings, wiring --------------------------------------------


def test_drop_is_logged_as_json_line_with_fields(tmp_path: Any) -> None:
    log = DropLog(tmp_path / "dropped.jsonl")
    pipe = pipeline(droplog=log)
    body = _page(f"<p>{ARTICLE}</p>")
    decide(pipe, make_item(BASE + "/a", body))
    with pytest.raises(DuplicatePage) as info:
        decide(pipe, make_item(BASE + "/b", body))
    log.close()
    (record,) = list(read_drop_log(tmp_path / "dropped.jsonl"))
    assert record["url"] == BASE + "/b" and record["duplicate_of"] == BASE + "/a"
    assert record["reason"] == EXACT_DUPLICATE and record["distance"] == 0
    assert record["time"].endswith("Z")
    exc = info.value
    assert exc.drop.simhash is not None and record["simhash"] == f"{exc.drop.simhash:016x}"
    assert pipe.stats["dedup/exact_duplicate"] == 1 and pipe.stats["dedup/distance/0"] == 1


def test_with_storage_a_drop_is_logged_once_its_row_is_committed(tmp_path: Any) -> None:
    """A drop the storage has not committed is not in the log: a worker killed before its
    batch commits must leave no line naming a page that was never stored."""
    from crawler.pipelines.storage import dropped_row

    log = DropLog(tmp_path / "dropped.jsonl")
    pipe = pipeline(droplog=log, defer_droplog=True)
    body = _page(f"<p>{ARTICLE}</p>")
    decide(pipe, make_item(BASE + "/a", body))
    item = make_item(BASE + "/b", body)
    with pytest.raises(DuplicatePage) as info:
        decide(pipe, item)
    assert log.written == 0
    row = dropped_row(item, info.value.drop, 7, 0)
    asyncio.run(pipe.batch_committed(documents=[BASE + "/a"]))
    assert log.written == 0  # the index heard of the commit; the drop writer has not yet
    asyncio.run(pipe.drops.batch_committed(dropped=[row]))  # the drop writer's own subscription
    log.close()
    (record,) = list(read_drop_log(tmp_path / "dropped.jsonl"))
    assert (record["url"], record["duplicate_of"], record["crawl_id"]) == (
        BASE + "/b", BASE + "/a", 7)  # fmt: skip
    assert record["simhash"] == f"{info.value.drop.simhash:016x}" and record["time"].endswith("Z")


def _store_pages(url: str, pages: list[tuple[str, bytes]]) -> None:
    from crawler.storage import Store

    pipe = pipeline()
    rows = []
    for page_url, body in pages:
        item = make_item(page_url, body)
        decide(pipe, item)
        rows.append(document_row(item, None))
    with Store(url) as store:
        store.upsert_documents(rows)


def test_second_crawl_dedups_against_stored_documents(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    site = demo_site()
    originals = sorted(set(site.near_duplicates.values()))[:5]
    _store_pages(url, [(BASE + p, site.render(site.pages[p], BASE)) for p in originals])
    crawler = get_crawler(settings_dict={"STORAGE_URL": url, "DROPPED_LOG": ""})
    pipe = NearDuplicatePipeline.from_crawler(crawler)
    asyncio.run(pipe.open_spider())
    assert crawler.stats.get_value("dedup/loaded") == 5
    mirrors = [m for m, o in site.near_duplicates.items() if o in originals]
    for mirror in mirrors:
        item = make_item(BASE + mirror, site.render(site.pages[mirror], BASE))
        with pytest.raises(DuplicatePage) as info:
            asyncio.run(pipe.process_item(item))
        assert info.value.drop.duplicate_of == BASE + site.near_duplicates[mirror]
        assert hamming(info.value.drop.simhash or 0, info.value.drop.duplicate_simhash or 0) <= 3
    asyncio.run(pipe.close_spider())


def test_from_crawler_reads_settings_and_logs_crawl_id(tmp_path: Any) -> None:
    path = tmp_path / "d.jsonl"
    crawler = get_crawler(settings_dict={
        "SIMHASH_PERSIST": False, "DROPPED_LOG": str(path), "SIMHASH_MIN_TOKENS": 5,
        "SIMHASH_SHINGLE": 2,
    })  # fmt: skip
    crawler.stats.set_value("dedup/crawl_id", 42)
    pipe = NearDuplicatePipeline.from_crawler(crawler)
    assert (pipe.decider.fingerprinter.min_tokens, pipe.decider.fingerprinter.shingle,
            pipe.decider.stored.store_factory) == (5, 2, None)
    asyncio.run(pipe.open_spider())
    body = _page(f"<p>{ARTICLE}</p>")
    asyncio.run(pipe.process_item(make_item(BASE + "/a", body)))
    with pytest.raises(DuplicatePage):
        asyncio.run(pipe.process_item(make_item(BASE + "/b", body)))
    asyncio.run(pipe.close_spider())
    assert json.loads(path.read_text())["crawl_id"] == 42
    assert crawler.stats.get_value("dedup/kept") == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [("SIMHASH_MIN_TOKENS", -1), ("SIMHASH_MIN_TOKENS", "many"), ("SIMHASH_SHINGLE", 0),
     ("SIMHASH_MAX_DISTANCE", 17), ("SIMHASH_PERSIST", "maybe")],
)  # fmt: skip
def test_bad_settings_name_setting_and_range(name: str, value: Any) -> None:
    with pytest.raises(SettingError) as info:
        check_settings({name: value})
    assert info.value.name == name
    with pytest.raises(SettingError):
        NearDuplicatePipeline.from_crawler(get_crawler(settings_dict={name: value}))


def test_log_formatter_one_short_info_line() -> None:
    formatter = DedupLogFormatter()
    spider = get_crawler().spidercls  # unused by our branch
    exc = DuplicatePage(Drop("http://a/2", NEAR_DUPLICATE, "http://a/1", 3, 1, 2))
    result = formatter.dropped({"html": "x" * 1000}, exc, None, spider)  # type: ignore[arg-type]
    assert result["level"] == logging.INFO
    message = result["msg"] % result["args"]
    assert message == "Dropped near_duplicate (3 bits) of http://a/1: http://a/2"
    exact = DuplicatePage(Drop("http://a/3", EXACT_DUPLICATE, "http://a/1", 0))
    result = formatter.dropped({}, exact, None, spider)  # type: ignore[arg-type]
    assert result["msg"] % result["args"] == "Dropped exact_duplicate of http://a/1: http://a/3"


def test_log_formatter_other_drops_as_stock() -> None:
    crawler = get_crawler()
    crawler.spider = crawler._create_spider("x")
    result = DedupLogFormatter().dropped({"a": 1}, DropItem("nope"), None, crawler.spider)
    assert result["level"] == logging.WARNING
    assert "nope" in result["msg"] % result["args"]


def test_second_crawl_of_template_site_in_another_order(tmp_path: Any) -> None:
    """Crawl 1 stores fingerprints (its first pages' still hold the template); crawl 2 meets
    the pages in reverse order against them: each duplicate group keeps exactly one page and
    nothing distinct is dropped. (A mirror among crawl 2's first pages on the host, before its
    template is known again, may be kept instead of its stored original: a documented limit.)"""
    from crawler.storage import Store

    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    site = template_site()
    paths = html_paths(site)
    first = pipeline()
    rows = []
    for path in paths:
        item = make_item(BASE + path, site.render(site.pages[path], BASE))
        try:
            decide(first, item)
        except DuplicatePage:
            continue
        rows.append(document_row(item, None))
    with Store(url) as store:
        store.upsert_documents(rows)
    second = pipeline(store_factory=lambda: Store(url))
    assert second.load_stored() == len(rows)
    outcome = run_site(second, site, list(reversed(paths)))
    assert_groups(site, outcome)
    kept_first = {row["url"][len(BASE) :] for row in rows}
    kept_second = {p for p, o in outcome.items() if o == "kept"}
    assert len(kept_second ^ kept_first) <= 2 * (TemplateFilter().min_pages - 1)


def test_stored_binary_documents_are_left_out_of_the_index(tmp_path: Any) -> None:
    from crawler.storage import Store

    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    with Store(url) as store:
        store.upsert_documents([
            {"url": BASE + "/file", "canonical_url": BASE + "/file", "content_hash": None,
             "simhash": None, "status": 200, "content_type": "text/html"},
        ])  # fmt: skip
    pipe = pipeline(store_factory=lambda: Store(url))
    assert pipe.load_stored() == 0
    asyncio.run(pipe.close())


@pytest.mark.slow
def test_template_site_end_to_end_crawl(crawl: Any) -> None:
    """A real crawl: distinct posts stored, mirrors dropped; table and JSON Lines agree."""
    pytest.importorskip("crawler.middlewares.links")
    from crawler.outputs.droplog import read_drop_log, replay_drop_log
    from crawler.sitegen.server import SiteServer

    site = template_site()
    with SiteServer(site) as server:
        run = crawl(urls=[server.base_url + "/"], settings={"ROBOTSTXT_OBEY": False})
    assert run.returncode == 0, run.stderr[-3000:]
    stored = {u[len(server.base_url) :] for u in run.stored_urls()}
    groups = site.duplicate_groups()
    grouped = set().union(*groups.values())
    assert site.distinct_pages - grouped <= stored
    for members in groups.values():
        assert len(members & stored) == 1
    table = run.rows("SELECT url, reason, duplicate_of, distance FROM dropped ORDER BY id")
    log = replay_drop_log(read_drop_log(run.dropped_log))  # the log read start to end
    assert {url: (reason, of, distance) for url, reason, of, distance in table} == {
        r["url"]: (r["reason"], r["duplicate_of"], r["distance"]) for r in log.values()}
    assert len(table) == len(site.near_duplicates)
    stats = run.stats
    assert stats["dedup/kept"] + stats.get("dedup/near_duplicate", 0) == (
        len(stored) + len(table) + stats.get("dedup/demoted", 0))
    # every drop is in the log, a page dropped on arrival or demoted when its preferred twin came
    assert run.stderr.count("Dropped near_duplicate (") == len(table)


def test_stored_index_holds_keys_not_urls_and_names_stored_matches(tmp_path: Any) -> None:
    """The persisted load reads integer keys (no URL kept per stored page); a duplicate of a
    stored page still names that page's URL, and a re-crawl of it is not its own duplicate."""
    from crawler.storage import Store

    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    words = [f"word{i}" for i in range(400)]
    bodies = {p: _page("<p>" + " ".join(random.Random(p).choices(words, k=120)) + "</p>")
              for p in ("alpha", "beta", "gamma")}  # fmt: skip
    _store_pages(url, [(f"{BASE}/{p}", body) for p, body in bodies.items()])
    pipe = pipeline(store_factory=lambda: Store(url))
    assert pipe.load_stored() == 3
    with_urls = LocalContentIndex(k=3)
    with Store(url) as store:
        with_urls.load(r for r in store.iter_fingerprints() if r[2])
    url_bytes = sum(len(f"{BASE}/{p}") for p in bodies)
    assert pipe.index.nbytes <= with_urls.nbytes - url_bytes
    with pytest.raises(DuplicatePage) as info:
        decide(pipe, make_item(BASE + "/copy-of-beta", bodies["beta"]))
    drop = info.value.drop
    assert (drop.reason, drop.duplicate_of) == (EXACT_DUPLICATE, BASE + "/beta")
    assert decide(pipe, make_item(BASE + "/gamma", bodies["gamma"])).url == BASE + "/gamma"
    asyncio.run(pipe.close())


def _two_workers(redis_url: str, db: str, name: str) -> list[ContentDecider]:
    """Two pipelines on one Redis index, as two workers "A" and "B" of one crawl."""
    from crawler.backends.redis import RedisContentIndex
    from crawler.storage import Store

    settings = Settings({"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name})
    return [
        ContentDecider(RedisContentIndex.from_settings(settings, owner=owner),
                              stats=Stats(), templates=TemplateFilter(),
                              store_factory=lambda: Store(db))
        for owner in ("A", "B")
    ]  # fmt: skip


@pytest.mark.redis
@pytest.mark.parametrize("outcome", ["committed", "owner_died"])
def test_a_match_another_worker_has_not_stored_is_decided_only_once_it_is(
    tmp_path: Any, redis_url: str, outcome: str
) -> None:
    """Worker A keeps an article; its storage batch commits it a second later. Worker B meets
    the article's mirror meanwhile: B must not drop it against a page that is not stored. It
    waits; once A commits it drops the mirror (confirmed against the stored text, B being young
    on the host), and when A dies instead (reclaimed, the page never stored) B keeps it."""
    from crawler.backends.redis import clear_namespace, connect
    from crawler.storage import Store

    site = demo_site()
    mirror, original = sorted(site.near_duplicates.items())[0]
    db = f"sqlite:///{tmp_path / 'crawl.db'}"
    name = f"test-{uuid.uuid4().hex[:12]}"
    workers = _two_workers(redis_url, db, name)
    events: list[str] = []
    try:
        kept = make_item(BASE + original, site.render(site.pages[original], BASE))
        decide(workers[0], kept)

        def later() -> None:
            if outcome == "committed":
                with Store(db) as store:
                    store.upsert_documents([document_row(kept, None)])
                workers[0].index.commit([BASE + original])
            else:
                workers[0].index.reclaim("A", [])  # type: ignore[attr-defined]
            events.append(outcome)

        timer = threading.Timer(1.0, later)
        timer.start()
        item = make_item(BASE + mirror, site.render(site.pages[mirror], BASE))
        try:
            result = decide(workers[1], item)
            events.append("kept")
        except DuplicatePage as exc:
            events.append(f"dropped against {exc.drop.duplicate_of}")
        finally:
            timer.join()
        if outcome == "committed":
            assert events == ["committed", f"dropped against {BASE + original}"]
            assert workers[1].stats["dedup/template/young_unverified"] == 0
        else:
            assert events == ["owner_died", "kept"]
            assert result.url == BASE + mirror
        assert workers[1].stats["dedup/shared/pending_waits"] == 1
    finally:
        for pipe in workers:
            asyncio.run(pipe.close())
            pipe.spider_closed()
        clear_namespace(connect(redis_url), f"dedup:{name}")


def test_drop_log_waits_for_storage_only_when_storage_runs() -> None:
    with_storage = NearDuplicatePipeline.from_crawler(get_crawler(settings_dict={
        "DROPPED_LOG": "", "ITEM_PIPELINES": {
            "crawler.pipelines.neardup.NearDuplicatePipeline": 300,
            "crawler.pipelines.storage.StoragePipeline": 800}}))  # fmt: skip
    alone = NearDuplicatePipeline.from_crawler(get_crawler(settings_dict={
        "DROPPED_LOG": "", "ITEM_PIPELINES": {
            "crawler.pipelines.neardup.NearDuplicatePipeline": 300}}))  # fmt: skip
    assert with_storage.decider.drops.deferred is True
    assert alone.decider.drops.deferred is False


@pytest.mark.redis
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_hosts_new_owner_learns_its_template_from_storage(
    tmp_path: Any, redis_url: str, warm: bool
) -> None:
    """Worker A crawled part of a template-heavy host and stored it; the host then moves to
    worker B (a steal, or A died). B meets the mirror of a page A kept. Learning the host's
    template from storage first, B fingerprints the mirror as A did and drops it; starting
    young instead (the cold case, as before) it keeps the mirror: a group kept twice."""
    from crawler.backends.redis import clear_namespace, connect
    from crawler.storage import Store

    site = template_site(60, seed=0)
    mirror, original = sorted(site.near_duplicates.items())[0]
    posts = sorted(p for p in site.distinct_pages if p.startswith("/posts/") and p != original)
    db = f"sqlite:///{tmp_path / 'crawl.db'}"
    name = f"test-{uuid.uuid4().hex[:12]}"
    a, b = _two_workers(redis_url, db, name)
    b.hosts.warm_since = 0.0 if warm else None
    try:
        rows = []
        for path in [*posts[:6], original]:
            item = make_item(BASE + path, site.render(site.pages[path], BASE))
            decide(a, item)
            rows.append(document_row(item, None))
        with Store(db) as store:
            store.upsert_documents(rows)
        a.index.commit([row["canonical_url"] for row in rows])
        item = make_item(BASE + mirror, site.render(site.pages[mirror], BASE))
        # the mirror's URL is shorter: preferred (crawler.dedup.preference), so when it is known
        # for a duplicate it is kept instead of the original, which is demoted
        assert decide(b, item).url == BASE + mirror
        if warm:
            assert b.stats["dedup/preferred/swapped"] == 1
            assert b.stats["dedup/demoted"] == 1
            assert b.stats["dedup/template/warmed"] == 7
        else:
            assert "dedup/demoted" not in b.stats
    finally:
        for pipe in (a, b):
            asyncio.run(pipe.close())
            pipe.spider_closed()
        clear_namespace(connect(redis_url), f"dedup:{name}")


_URL_CHARS = "ab1.:/?#@[]%\t "


@settings(max_examples=500, deadline=None)
@given(start=st.sampled_from(["http://", "https://", "HTTP://", "//", "x://", "a b://", "ab"]),
       heads=st.lists(st.text("a1:@[]?#%", max_size=4), min_size=2, max_size=2),
       tails=st.lists(st.text(_URL_CHARS, max_size=8), min_size=2, max_size=2))
def test_a_urls_template_key_depends_only_on_the_part_warming_remembers(
    start: str, heads: list[str], tails: list[str]
) -> None:
    """Warming remembers hosts by the URL's start (``origin_part``) to skip parsing the URL
    of every page: two URLs with the same start must have the same template key (or fail
    alike). The two URLs share their scheme; their hosts are drawn from a few characters, so
    they are often the same, and differ after the ``/`` that follows (a URL without ``//`` is
    its own start)."""
    from crawler.content.template import origin_part, template_key

    def key(url: str) -> str:
        try:
            return template_key(url)
        except ValueError as exc:  # a bracket without its pair: urlsplit refuses the host
            return f"error: {exc}"

    one, two = (start + head + "/" + tail for head, tail in zip(heads, tails, strict=True))
    if origin_part(one) == origin_part(two):
        assert key(one) == key(two), (one, two)


# --- template learning per origin ----------------------------------------------------------------
def _site_page(chrome: list[str], text: list[str]) -> bytes:
    lines = "".join(f"<div>{line}</div>" for line in chrome)
    paras = "".join(f"<p>{p}</p>" for p in text)
    return f"<html><body>{lines}<div class='post'>{paras}</div></body></html>".encode()


def _short_sites() -> tuple[list[bytes], list[bytes]]:
    """Two sites: A (long posts, its own chrome) and B (two-sentence notes in a chrome of
    about 2,000 words)."""
    from crawler.sitegen.text import TextMaker, load_words

    rng = random.Random(5)
    maker = TextMaker(rng)
    topics = load_words().topics
    chrome_a = [maker.sentence(topics[0]) for _ in range(6)]
    chrome_b = [maker.sentence(topics[1]) for _ in range(200)]  # ~2,000 words of chrome
    site_a = [_site_page(chrome_a, maker.paragraphs(topics[2 + i], 5, 4, 6)) for i in range(4)]
    site_b = [_site_page(chrome_b, [maker.paragraph(topics[6 + i], 2)]) for i in range(3)]
    return site_a, site_b


def test_template_key_is_the_origin() -> None:
    from crawler.content.template import template_key

    assert template_key("http://Host.test:8001/a?b") == "http://host.test:8001"
    assert template_key("https://host.test/a") == "https://host.test"
    assert template_key("http://host.test/a") != template_key("http://host.test:8002/a")


def test_sites_on_other_ports_of_one_host_learn_their_own_template() -> None:
    """Site B's short notes share a large chrome; B is young (its template unknown) even after
    site A on another port of the same host name has taught its own template, so B's notes
    are compared by the text they add (all kept). Keyed on the host name alone, B counted as
    a known site whose chrome was not template yet, and its second note was dropped."""
    site_a, site_b = _short_sites()
    pipe = pipeline(templates=TemplateFilter())
    for i, body in enumerate(site_a):
        decide(pipe, make_item(f"http://shared.test:8001/post/{i}", body))
    for i, body in enumerate(site_b):  # every note is distinct: none is dropped
        decide(pipe, make_item(f"http://shared.test:8002/note/{i}", body))
    assert pipe.stats["dedup/kept"] == len(site_a) + len(site_b)


def test_documents_of_origin_reads_one_origin_only(tmp_path: Any) -> None:
    from datetime import UTC, datetime

    from crawler.storage import Store

    urls = ["http://h.test/a", "http://h.test:8002/b", "https://h.test/c", "http://h.test/d",
            "http://h.testx/e", "http://h.test:80021/f"]  # fmt: skip
    with Store(f"sqlite:///{tmp_path / 'o.db'}") as store:
        store.write_batch([{"url": u, "text": u, "fetched_at": "2026-12-03T00:00:00+00:00"}
                           for u in urls], [])  # fmt: skip
        since = datetime(2026, 1, 1, tzinfo=UTC)
        assert [r[0] for r in store.documents_of_origin("http://h.test", since, 10)] == [
            "http://h.test/a", "http://h.test/d"]
        assert [r[0] for r in store.documents_of_origin("http://h.test:8002", since, 10)] == [
            "http://h.test:8002/b"]
        assert [r[0] for r in store.documents_of_origin("http://h.test", since, 1)] == [
            "http://h.test/d"]  # the newest

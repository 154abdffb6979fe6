"""The shared content index awaited, the reactor not held (``ContentDecider.awaited``: the
question on the event loop's own connection, ``crawler.backends.redis.aio``): many pages
decided at once, by one worker or two, in two orders, keep exactly the pages the same pages
decided one at a time keep; a Redis failure met there is the crawl's outage; pages waiting
for their turn hold new downloads back. Real Redis, real deciders."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.backends.common import RedisBackendError
from crawler.backends.redis import RedisContentIndex, clear_namespace, connect
from crawler.content.template import TemplateFilter
from crawler.dedup.decider import ContentDecider
from crawler.items import PageItem
from tests.test_neardup import Stats

pytestmark = pytest.mark.redis

BASE = "http://site.test"
WORDS = [f"w{i}" for i in range(400)]


def item(path: str, text: str) -> PageItem:
    html = f"<html><body><p>{text}</p></body></html>"
    return PageItem(url=BASE + path, status=200, content_type="text/html", title="", text=text,
                    html=html, depth=1, referer=None, fetched_at="", canonical_url=BASE + path)


def corpus(seed: int = 7) -> list[tuple[str, str]]:
    """30 articles, each with an exact copy and two near copies (one word changed: mostly
    within the distance, not always): which pages are kept depends on the order."""
    rng = random.Random(seed)
    pages = []
    for n in range(30):
        words = rng.choices(WORDS, k=120)
        text = " ".join(words)
        pages.append((f"/a{n}", text))
        pages.append((f"/a{n}-copy", text))
        for m in range(2):
            near = list(words)
            near[10 + 40 * m] = f"changed{m}"
            pages.append((f"/a{n}-near{m}", " ".join(near)))
    return pages


@pytest.fixture
def namespaces(redis_url: str) -> Iterator[Any]:
    """Fresh namespaces on the real Redis, deleted afterwards."""
    made: list[str] = []

    def fresh() -> Settings:
        name = f"test-{uuid.uuid4().hex[:12]}"
        made.append(name)
        return Settings({"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name,
                         "DEDUP_BACKEND": "redis"})  # fmt: skip

    yield fresh
    for name in made:
        clear_namespace(connect(redis_url), f"dedup:{name}")


def decider(settings: Settings, off_reactor: bool) -> ContentDecider:
    index = RedisContentIndex.from_settings(settings)  # no owner: every entry counts at once
    return ContentDecider(index, stats=Stats(), off_reactor=off_reactor)


def kept_one_at_a_time(settings: Settings, pages: list[tuple[str, str]]) -> set[str]:
    dec = decider(settings, off_reactor=False)
    assert not dec.awaited
    kept = set()
    for path, text in pages:
        if asyncio.run(dec.decide(item(path, text))).drop is None:
            kept.add(path)
    dec.spider_closed()
    return kept


async def decide_all(deciders: list[ContentDecider],
                     pages: list[tuple[str, str]]) -> dict[str, PageItem]:
    """Every page asked at once (in one loop turn), page i by worker ``i % len(deciders)``;
    the kept pages."""
    items = [item(path, text) for path, text in pages]
    verdicts = await asyncio.gather(*(
        deciders[i % len(deciders)].decide(it) for i, it in enumerate(items)))  # fmt: skip
    return {it.url[len(BASE):]: it for it, v in zip(items, verdicts, strict=True)
            if v.drop is None}  # fmt: skip


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_one_worker_deciding_many_pages_at_once_keeps_what_one_at_a_time_keeps(
    namespaces: Any, order: str
) -> None:
    pages = corpus()
    if order == "reversed":
        pages.reverse()
    expected = kept_one_at_a_time(namespaces(), pages)
    assert len(expected) >= 30
    dec = decider(namespaces(), off_reactor=True)
    assert dec.awaited
    try:
        assert set(asyncio.run(decide_all([dec], pages))) == expected
    finally:
        dec.spider_closed()
    assert dec.stats["dedup/kept"] == len(expected)


@pytest.mark.parametrize("seed", [1, 2])
def test_two_workers_deciding_at_once_keep_one_copy_of_each_page(
    namespaces: Any, seed: int
) -> None:
    """Two deciders on one index, each awaiting its own connection, asked together in a shuffled
    order about 30 articles with three copies each: the check-and-add stays atomic across
    them, so each article ends with one page kept (kept, less those a preferred copy
    replaced since), whichever worker met it first."""
    rng = random.Random(seed)
    pages = []
    for n in range(30):
        text = " ".join(rng.choices(WORDS, k=120))
        pages += [(f"/a{n}", text), (f"/a{n}-b", text), (f"/a{n}-cc", text)]
    rng.shuffle(pages)
    settings = namespaces()
    workers = [decider(settings, off_reactor=True) for _ in range(2)]
    try:
        kept = asyncio.run(decide_all(workers, pages))
    finally:
        for dec in workers:
            dec.spider_closed()
    assert {path.split("-")[0] for path in kept} == {f"/a{n}" for n in range(30)}
    held = sum(dec.stats["dedup/kept"] - dec.stats["dedup/preferred/swapped"]
               for dec in workers)  # fmt: skip
    assert held == 30
    assert all(dec.stats["dedup/kept"] for dec in workers)  # both decided pages


def test_the_reactor_serves_other_work_while_the_index_is_asked(namespaces: Any) -> None:
    """While a page's check-and-add is on the wire, the loop runs other callbacks: it is
    not blocked for the round trip (asked where it was, it would be)."""
    pages = corpus()[:40]

    async def run(dec: ContentDecider) -> int:
        ticks = 0
        done = asyncio.Event()

        def tick() -> None:
            nonlocal ticks
            if not done.is_set():
                ticks += 1
                asyncio.get_running_loop().call_soon(tick)

        asyncio.get_running_loop().call_soon(tick)
        for path, text in pages:
            await dec.decide(item(path, text))
        done.set()
        return ticks

    awaited, inline = decider(namespaces(), True), decider(namespaces(), False)
    try:
        assert asyncio.run(run(inline)) <= 1  # one loop turn: the decisions never yield
        assert asyncio.run(run(awaited)) >= len(pages)  # at least once per page's question
    finally:
        awaited.spider_closed()
        inline.spider_closed()


def test_a_redis_failure_while_awaited_is_the_crawls_outage(namespaces: Any) -> None:
    """The server goes away: the loop's connection fails, redis-py's call (no retries here)
    fails too, the page is dropped unchecked, the guard is down, and the next page is not
    asked."""
    settings = namespaces()
    settings.set("REDIS_RETRY_SECONDS", 0)
    dec = decider(settings, off_reactor=True)
    pool = dec.index.client.connection_pool  # type: ignore[attr-defined]
    pool.connection_kwargs["port"] = 1  # the server goes away: nothing listens on port 1
    pool.disconnect()
    pool.reset()  # the connections made so far are gone with it
    try:
        first = asyncio.run(dec.decide(item("/x", " ".join(WORDS[:120]))))
        second = asyncio.run(dec.decide(item("/y", " ".join(WORDS[100:220]))))
    finally:
        dec.spider_closed()
    # a decider built by hand has no crawl to close: the error reaches its caller (a crawl's
    # guard closes it: redis_error)
    assert isinstance(first.error, RedisBackendError)
    assert isinstance(second.error, RedisBackendError)


# --- the gate: decisions one at a time, in arrival order (crawler.dedup.gate) ---------------------
def templated(path: str, own: list[str], template: list[str]) -> PageItem:
    """A page of one site: its own paragraphs between the site's template paragraphs."""
    lines = template[:3] + own + template[3:]
    html = "<html><body>" + "".join(f"<p>{line}</p>" for line in lines) + "</body></html>"
    return PageItem(url=BASE + path, status=200, content_type="text/html", title="", text="",
                    html=html, depth=1, referer=None, fetched_at="", canonical_url=BASE + path)


Pages = list[tuple[str, list[str]]]  # (path, own paragraphs)


def site(seed: int = 3) -> tuple[list[str], Pages, Pages]:
    """A template of six paragraphs, two earlier pages, and a pair of near copies (one word
    changed): the pair's first page is the host's third kept page, which teaches the template."""
    rng = random.Random(seed)

    def para(n: int) -> str:
        return " ".join(rng.choices(WORDS, k=n))

    template = [para(30) for _ in range(6)]
    earlier = [("/p1", [para(40), para(40)]), ("/p2", [para(40), para(40)])]
    own = [para(40), para(40)]
    words = own[1].split()
    words[5] = "changed"
    return template, earlier, [("/a", own), ("/b", [own[0], " ".join(words)])]


def templated_decider(settings: Settings, off_reactor: bool, owner: str = "") -> ContentDecider:
    index = RedisContentIndex.from_settings(settings, owner=owner)
    return ContentDecider(index, stats=Stats(), templates=TemplateFilter(), off_reactor=off_reactor)


async def decide_pair(dec: ContentDecider, pair_first: str) -> dict[str, Any]:
    """The earlier pages one at a time, then the pair asked together (``pair_first``
    first): each page's drop, or its kept fingerprint."""
    template, earlier, pair = site()
    for path, own in earlier:
        assert (await dec.decide(templated(path, own, template))).kept
    if pair[0][0] != pair_first:
        pair.reverse()
    items = [templated(path, own, template) for path, own in pair]
    verdicts = await asyncio.gather(*(dec.decide(it) for it in items))
    return {it.url[len(BASE):]: v.drop or (it.simhash, it.young)
            for it, v in zip(items, verdicts, strict=True)}  # fmt: skip


@pytest.mark.parametrize("first", ["/a", "/b"])
def test_the_gate_decides_two_near_copies_arriving_together_in_arrival_order(
    namespaces: Any, first: str
) -> None:
    """Two near copies asked in one loop turn, the first of them teaching its host's
    template: the second is decided against the first, fingerprinted with the template the
    first taught, exactly as asked one at a time, in both arrival orders: ``/a`` first, ``/b``
    is dropped as its near duplicate; ``/b`` first, ``/a`` is its preferred copy (the shorter
    URL; :mod:`crawler.dedup.preference`), kept instead of it. (Without the gate the second is
    fingerprinted while the first is on the wire, template and all: another distance, another
    fingerprint, a page marked young.)"""
    inline = templated_decider(namespaces(), off_reactor=False)
    awaited = templated_decider(namespaces(), off_reactor=True)
    try:
        expected = asyncio.run(decide_pair(inline, first))
        got = asyncio.run(decide_pair(awaited, first))
    finally:
        inline.spider_closed()
        awaited.spider_closed()
    assert isinstance(expected["/a"], tuple)  # kept, in both orders
    if first == "/a":
        assert expected["/b"].reason == "near_duplicate"
        assert expected["/b"].duplicate_of == BASE + "/a"
    else:  # /b was kept, then replaced by its preferred copy
        assert inline.stats["dedup/preferred/swapped"] == 1
    assert got == expected
    assert awaited.stats == inline.stats


def test_a_page_waiting_on_a_pending_match_lets_the_pages_behind_it_decide(
    namespaces: Any
) -> None:
    """Worker 2's page matches worker 1's page, kept but not committed (pending): it waits
    outside the gate, so a distinct page asked after it is decided meanwhile; once worker 1's
    storage commits, the waiting page is dropped against it."""
    settings = namespaces()
    one = templated_decider(settings, off_reactor=True, owner="w1")
    two = templated_decider(settings, off_reactor=True, owner="w2")
    text = " ".join(WORDS[:120])
    order: list[str] = []

    async def run() -> None:
        assert (await one.decide(item("/kept", text))).kept

        async def decide(path: str, body: str) -> None:
            verdict = await two.decide(item(path, body))
            order.append(path if verdict.kept else f"{path} dropped")

        waiting = asyncio.ensure_future(decide("/kept-copy", text))
        distinct = asyncio.ensure_future(decide("/other", " ".join(WORDS[200:320])))
        await distinct
        assert not waiting.done()
        await one.batch_committed(documents=[BASE + "/kept"])
        await waiting

    try:
        asyncio.run(asyncio.wait_for(run(), 10))
    finally:
        one.spider_closed()
        two.spider_closed()
    assert order == ["/other", "/kept-copy dropped"]
    assert two.stats["dedup/shared/pending_waits"] == 1


def test_the_downloader_backs_out_while_pages_wait_at_the_gate() -> None:
    """Pages queued for their decision's turn hold new downloads back: past
    DECISIONS_WAITING_MAX waiting, the downloader reports it needs to back out (the engine
    then starts none), and no longer once they have had their turn. (Without it the
    downloads ran ahead of the awaited decisions: up to Scrapy's 5 MB of responses queued,
    drained only after the last response.)"""
    from scrapy.utils.test import get_crawler

    from crawler.dedup.gate import DecisionGate
    from crawler.middlewares.politeness import DECISIONS_WAITING_MAX, PoliteDownloader

    downloader = PoliteDownloader(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 16}))
    gate = DecisionGate()
    downloader._gate = gate
    order: list[int] = []

    async def page(n: int) -> None:
        async with gate.turn():
            order.append(n)
            await asyncio.sleep(0)

    async def run() -> None:
        first = gate.turn()
        await first.__aenter__()  # a page in its decision
        queued = [asyncio.ensure_future(page(n)) for n in range(DECISIONS_WAITING_MAX)]
        await asyncio.sleep(0)
        assert gate.waiting == DECISIONS_WAITING_MAX
        assert downloader.needs_backout()
        await first.__aexit__(None, None, None)
        await queued[1]  # two have had their turn, the third has it
        assert gate.waiting == DECISIONS_WAITING_MAX - 3
        assert not downloader.needs_backout()
        await asyncio.gather(*queued)
        assert gate.waiting == 0

    asyncio.run(run())
    assert order == list(range(DECISIONS_WAITING_MAX))

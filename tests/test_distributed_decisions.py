"""The shared content index asked off the reactor thread (``ContentDecider.thread``): many
pages decided at once, by one worker or two, in two orders, keep exactly the pages the same
pages decided one at a time keep; a Redis failure met on the thread is the crawl's outage.
Real Redis, real deciders."""

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


def decider(settings: Settings, off_thread: bool) -> ContentDecider:
    index = RedisContentIndex.from_settings(settings)  # no owner: every entry counts at once
    return ContentDecider(index, stats=Stats(), off_thread=off_thread)


def kept_one_at_a_time(settings: Settings, pages: list[tuple[str, str]]) -> set[str]:
    dec = decider(settings, off_thread=False)
    assert dec.thread is None
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
    dec = decider(namespaces(), off_thread=True)
    assert dec.thread is not None
    try:
        assert set(asyncio.run(decide_all([dec], pages))) == expected
    finally:
        dec.spider_closed()
    assert dec.stats["dedup/kept"] == len(expected)


@pytest.mark.parametrize("seed", [1, 2])
def test_two_workers_deciding_at_once_keep_one_copy_of_each_page(
    namespaces: Any, seed: int
) -> None:
    """Two deciders on one index, each with its own thread, asked together in a shuffled
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
    workers = [decider(settings, off_thread=True) for _ in range(2)]
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

    threaded, inline = decider(namespaces(), True), decider(namespaces(), False)
    try:
        assert asyncio.run(run(inline)) <= 1  # one loop turn: the decisions never yield
        assert asyncio.run(run(threaded)) >= len(pages)  # at least once per page's question
    finally:
        threaded.spider_closed()
        inline.spider_closed()


def test_a_redis_failure_on_the_thread_is_the_crawls_outage(namespaces: Any) -> None:
    """The index's call fails on the thread: the page is dropped unchecked, the guard is down
    (handled on the loop's thread), and the next page is not asked."""
    settings = namespaces()
    settings.set("REDIS_RETRY_SECONDS", 0)
    dec = decider(settings, off_thread=True)
    pool = dec.index.client.connection_pool  # type: ignore[attr-defined]
    pool.connection_kwargs["port"] = 1  # the server goes away: nothing listens on port 1
    pool.disconnect()
    pool.reset()  # the connections made so far are gone with it
    try:
        first = asyncio.run(dec.decide(item("/x", " ".join(WORDS[:120]))))
        second = asyncio.run(dec.decide(item("/y", " ".join(WORDS[100:220]))))
    finally:
        dec.spider_closed()
    # a decider built by hand has no crawl to close: the error reaches its caller, raised
    # on the loop's thread from the thread's call (a crawl's guard closes it: redis_error)
    assert isinstance(first.error, RedisBackendError)
    assert isinstance(second.error, RedisBackendError)

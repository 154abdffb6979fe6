"""The garbage collector tuned for a crawl (``crawler.extensions.gctune``): the young
generation's threshold while the spider is open, the objects alive after start-up frozen
(``gc/frozen_objects``) and unfrozen at close, both off when asked; in a real crawl process."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.extensions.gctune import FREEZE_DELAY_SECONDS, FROZEN_STAT, GCTuning
from crawler.sitegen.scripted import Answer
from tests.conftest import run_crawl


class _Spider(Spider):
    name = "gc"


def _tuning(**settings: object) -> GCTuning:
    crawler = get_crawler(_Spider, settings)
    crawler.stats.open_spider()
    return GCTuning.from_crawler(crawler)


@pytest.fixture
def python_gc():
    """The process's collector as it was (a failed test must not leave it tuned)."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_open_sets_the_threshold_freeze_leaves_live_objects_out_close_restores(python_gc):
    before = gc.get_threshold()
    tuning = _tuning(GC_GEN0_THRESHOLD=12345)

    async def crawl() -> None:
        tuning.spider_opened()
        assert gc.get_threshold() == (12345, *before[1:])
        assert tuning._call is not None  # the freeze, scheduled
        kept = [[n] for n in range(1000)]  # alive when frozen
        tuning.freeze()  # as the loop would FREEZE_DELAY_SECONDS later
        frozen = tuning.crawler.stats.get_value(FROZEN_STAT)
        assert frozen == tuning.frozen >= 1000 + len(kept)
        # a frozen object that dies leaves the frozen set: the count may fall, never rise
        assert len(kept) <= gc.get_freeze_count() <= frozen
        tracked = len(gc.get_objects())  # what a full collection walks now
        assert tracked < gc.get_freeze_count()
        tuning.spider_closed()

    asyncio.run(crawl())
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_both_off_leave_the_collector_as_it_was(python_gc):
    before = gc.get_threshold()
    tuning = _tuning(GC_GEN0_THRESHOLD=0, GC_FREEZE=False)

    async def crawl() -> None:
        tuning.spider_opened()
        assert gc.get_threshold() == before
        assert tuning._call is None  # no freeze scheduled
        tuning.spider_closed()

    asyncio.run(crawl())
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def _slow_site(scripted, pages: int) -> str:
    """A site of ``pages`` distinct pages in a chain, each answering in 0.1 s."""
    site = scripted[0]
    for n in range(pages):
        nxt = f'<a href="/p{n + 1}">next</a>' if n + 1 < pages else ""
        words = " ".join(f"w{n}x{i}" for i in range(40))  # no two pages share a word
        site.route(f"/p{n}", Answer(body=f"<html><body><p>{words}</p>{nxt}</body></html>",
                                    delay=0.1))  # fmt: skip
    return site.url + "/p0"


@pytest.mark.parametrize("freeze", [True, False])
def test_a_crawl_past_the_delay_freezes_start_up_and_still_stores_every_page(
    tmp_path, scripted, freeze
):
    """A crawl running longer than FREEZE_DELAY_SECONDS: with GC_FREEZE the objects alive
    then (tens of thousands: imports, components) are frozen, and every page is still fetched
    and stored; without it nothing is."""
    pages = int(FREEZE_DELAY_SECONDS / 0.1) + 10
    url = _slow_site(scripted, pages)
    run = run_crawl(tmp_path, urls=[url], settings={"GC_FREEZE": freeze})
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["finish_reason"] == "finished"
    assert len(run.stored_urls()) == pages
    if freeze:
        assert stats[FROZEN_STAT] > 50_000
    else:
        assert FROZEN_STAT not in stats

"""The content decider's seams (crawler.dedup.decider): one decider per crawler found through one
accessor, the verdict carried on the item and acted on by the pipeline, and the drop writer
subscribed to the storage commit itself. The decisions themselves: tests/test_neardup.py."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from typing import Any

import pytest
from scrapy.core.engine import ExecutionEngine
from scrapy.utils.test import get_crawler

from crawler import signals as dedup_signals
from crawler.backends.local import LocalContentIndex
from crawler.content.template import TemplateFilter
from crawler.dedup.decider import ContentDecider
from crawler.dedup.verdict import KEPT, Verdict, content_decider
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.outputs.droplog import DropLog, read_drop_log
from crawler.pipelines.neardup import NearDuplicatePipeline
from crawler.pipelines.storage import dropped_row
from crawler.spiders.web import WebSpider

BASE = "http://site.test"
ARTICLE = " ".join(f"word{i} topic{i % 7} detail{i % 11}" for i in range(120))
OTHER = " ".join(f"other{i} theme{i % 5} point{i % 13}" for i in range(120))


class Stats(Counter):
    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        self[key] += count

    def get_value(self, key: str, default: Any = None) -> Any:
        return self.get(key, default)


def item(path: str, text: str) -> PageItem:
    html = f"<html><body><p>{text}</p></body></html>"
    return PageItem(url=BASE + path, status=200, content_type="text/html", title="", text=text,
                    html=html, depth=1, referer=None, fetched_at="", canonical_url=BASE + path)


def decider() -> ContentDecider:
    return ContentDecider(LocalContentIndex(3), templates=TemplateFilter(), stats=Stats())


def test_the_pipeline_acts_on_the_verdict_the_item_carries() -> None:
    """The spider decides, the pipeline acts: a verdict on the item is never decided again."""
    dec = decider()
    pipe = NearDuplicatePipeline(dec)
    first = item("/a", ARTICLE)
    first.verdict = asyncio.run(dec.decide(first))
    assert first.verdict is KEPT and first.simhash is not None
    assert asyncio.run(pipe.process_item(first)) is first
    assert first.verdict is None  # taken off: nothing downstream holds the decision

    copy = item("/copy", ARTICLE)
    copy.verdict = asyncio.run(dec.decide(copy))
    assert copy.verdict.drop is not None and copy.verdict.drop.duplicate_of == BASE + "/a"
    decided, verdict = dict(dec.stats), copy.verdict
    with pytest.raises(DuplicatePage) as info:
        asyncio.run(pipe.process_item(copy))
    assert info.value is verdict.error  # the exception decided, raised as it was
    assert info.value.drop.duplicate_of == BASE + "/a"
    assert dict(dec.stats) == decided  # acted on, not decided (nor counted) a second time
    assert copy.verdict is None


def test_an_item_without_a_verdict_is_decided_by_the_pipeline() -> None:
    """Another spider's items carry none: the pipeline asks the decider itself."""
    dec = decider()
    pipe = NearDuplicatePipeline(dec)
    assert asyncio.run(pipe.process_item(item("/a", ARTICLE))).url == BASE + "/a"
    with pytest.raises(DuplicatePage):
        asyncio.run(pipe.process_item(item("/b", ARTICLE)))
    kept = asyncio.run(pipe.process_item({"url": BASE + "/c", "html": f"<p>{OTHER}</p>"}))
    assert kept["url"] == BASE + "/c" and kept["simhash"] is not None  # a dict item too
    assert dec.stats["dedup/kept"] == 2 and dec.stats["dedup/exact_duplicate"] == 1


def test_a_verdict_dies_with_its_item() -> None:
    """Decided pages whose items are never yielded (a parse generator that died) leave nothing
    behind, and a later item, even at the same address, gets its own decision (the old
    ``id(item)`` cache replayed the stale verdict)."""
    dec = decider()
    pipe = NearDuplicatePipeline(dec)
    asyncio.run(pipe.process_item(item("/a", ARTICLE)))
    reused = 0
    for n in range(50):
        dead = item(f"/dead{n}", ARTICLE)
        dead.verdict = asyncio.run(dec.decide(dead))  # a duplicate, never yielded
        address = id(dead)
        del dead
        gc.collect()
        fresh = item(f"/fresh{n}", " ".join(f"page{n}word{i}" for i in range(300)))
        reused += id(fresh) == address
        assert asyncio.run(pipe.process_item(fresh)) is fresh  # kept: its own decision
    assert dec.stats["dedup/exact_duplicate"] == 50 and dec.stats["dedup/kept"] == 51
    assert not [o for o in gc.get_objects() if isinstance(o, Verdict) and not o.kept]
    print(f"{reused} of 50 fresh items took a dead item's address")


def test_the_spider_finds_the_crawls_decider_through_one_accessor() -> None:
    settings = {"DROPPED_LOG": "", "SIMHASH_PERSIST": False}
    with_dedup = get_crawler(WebSpider, settings_dict={**settings, "ITEM_PIPELINES": {
        "crawler.pipelines.neardup.NearDuplicatePipeline": 300}})  # fmt: skip
    assert content_decider(with_dedup) is None  # no engine yet
    with_dedup.engine = ExecutionEngine(with_dedup, lambda _: None)
    pipeline = with_dedup.get_item_pipeline(NearDuplicatePipeline)
    assert pipeline is not None
    assert content_decider(with_dedup) is pipeline.decider
    assert isinstance(pipeline.decider, ContentDecider)

    without = get_crawler(WebSpider, settings_dict={**settings, "ITEM_PIPELINES": {}})
    without.engine = ExecutionEngine(without, lambda _: None)
    assert content_decider(without) is None  # every page's links are followed then


@pytest.mark.parametrize("first", [True, False], ids=["writer-first", "writer-last"])
def test_the_drop_writer_logs_a_drop_on_its_own_commit_subscription(
    tmp_path: Any, first: bool
) -> None:
    """With storage, a drop's line follows the commit that holds its row; the drop writer
    subscribes to ``batch_committed`` itself, so where the other subscribers stand (the
    decider's index commit included) changes nothing."""
    log = tmp_path / "dropped.jsonl"
    crawler = get_crawler(settings_dict={"DROPPED_LOG": str(log), "SIMHASH_PERSIST": False})
    heard: list[str] = []

    def other(**_: Any) -> None:
        heard.append("other")

    if not first:
        crawler.signals.connect(other, signal=dedup_signals.batch_committed)
    dec = ContentDecider.from_crawler(crawler, stores=True)
    if first:
        crawler.signals.connect(other, signal=dedup_signals.batch_committed)
    pipe = NearDuplicatePipeline(dec)
    asyncio.run(pipe.process_item(item("/a", ARTICLE)))
    copy = item("/copy", ARTICLE)
    with pytest.raises(DuplicatePage) as info:
        asyncio.run(pipe.process_item(copy))
    assert not log.exists() or log.read_text() == ""  # not before the commit
    row = dropped_row(copy, info.value.drop, 9, 0)

    async def commit() -> None:
        await crawler.signals.send_catch_log_async(
            signal=dedup_signals.batch_committed, fingerprints=[], leases=[],
            documents=[BASE + "/a"], dropped=[row])  # fmt: skip

    asyncio.run(commit())
    dec.spider_closed()
    assert heard == ["other"]
    assert [(r["url"], r["duplicate_of"], r["crawl_id"]) for r in read_drop_log(log)] == [
        (BASE + "/copy", BASE + "/a", 9)]  # fmt: skip


def test_without_storage_a_drop_is_logged_at_once(tmp_path: Any) -> None:
    log = DropLog(tmp_path / "dropped.jsonl")
    dec = ContentDecider(LocalContentIndex(3), templates=TemplateFilter(), droplog=log)
    pipe = NearDuplicatePipeline(dec)
    asyncio.run(pipe.process_item(item("/a", ARTICLE)))
    with pytest.raises(DuplicatePage):
        asyncio.run(pipe.process_item(item("/copy", ARTICLE)))
    log.close()
    assert [r["url"] for r in read_drop_log(tmp_path / "dropped.jsonl")] == [BASE + "/copy"]

"""``NearDuplicatePipeline``: drops exact copies and near duplicates before storage.

The decision is the crawl's :class:`~crawler.dedup.decider.ContentDecider` (this pipeline
builds it and holds it: one per crawler, found by the spider through
:func:`crawler.dedup.verdict.content_decider`). The ``web`` spider decides each page before it
yields it and puts the :class:`~crawler.dedup.verdict.Verdict` on the item
(``PageItem.verdict``); this pipeline acts on that field: it returns a kept item and raises the
exception of any other (a :class:`~crawler.exceptions.DuplicatePage` goes to storage and the
drop log through Scrapy's ``item_dropped``). An item without a verdict (another spider's, or a
dict) is decided here. The field is emptied before the item goes on, so nothing downstream
holds the decision's exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.dedup.decider import ContentDecider
from crawler.dedup.verdict import Verdict
from crawler.pipelines.storage import seed_urls, storage_enabled

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["NearDuplicatePipeline"]


class NearDuplicatePipeline:
    """Acts on each page's verdict (see the module docstring); ``decider`` decides."""

    def __init__(self, decider: ContentDecider) -> None:
        self.decider = decider

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NearDuplicatePipeline:
        stores = storage_enabled(crawler.settings)
        return cls(ContentDecider.from_crawler(crawler, stores=stores))

    async def open_spider(self) -> None:
        crawler = self.decider.crawler
        spider = crawler.spider if crawler is not None else None
        await self.decider.open(seed_urls(spider) if spider is not None else [])

    async def close_spider(self) -> None:
        await self.decider.close()

    async def process_item(self, item: Any) -> Any:
        """``item`` with ``content_hash`` and ``simhash`` set (kept), or its verdict's
        exception raised (a DuplicatePage, an undecided or unchecked page)."""
        verdict = take_verdict(item)
        if verdict is None:
            verdict = await self.decider.decide(item)
        return verdict.act(item)


def take_verdict(item: Any) -> Verdict | None:
    """The verdict the spider put on ``item`` (``PageItem.verdict``; None: none, or another
    kind of item), taken off the item."""
    verdict = getattr(item, "verdict", None)
    if not isinstance(verdict, Verdict):
        return None
    item.verdict = None
    return verdict

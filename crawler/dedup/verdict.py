"""A page's fate as the spider carries it: :class:`Verdict`, and :func:`content_decider`, the one
accessor through which a component finds the crawl's
:class:`~crawler.dedup.decider.ContentDecider`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.exceptions import DuplicatePage

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.dedup.decider import ContentDecider
    from crawler.vocab import Drop


@dataclass(frozen=True)
class Verdict:
    """A page's fate, decided once by :meth:`ContentDecider.decide` and carried on its item.

    ``error`` is None when the page is kept (its item then holds ``content_hash`` and
    ``simhash``); else the exception the pipeline raises for it: a
    :class:`~crawler.exceptions.DuplicatePage` (its ``drop``), an
    :class:`~crawler.exceptions.Undecided` page (a database outage) or a page left unchecked
    (a Redis outage). Counting and logging happened when it was decided."""

    error: Exception | None = None

    @property
    def kept(self) -> bool:
        return self.error is None

    @property
    def drop(self) -> Drop | None:
        """The Drop of a duplicate (None: kept, or not decided)."""
        return self.error.drop if isinstance(self.error, DuplicatePage) else None

    def act(self, item: Any) -> Any:
        """``item`` when kept, else raise the exception decided."""
        if self.error is not None:
            raise self.error
        return item


KEPT = Verdict()


def content_decider(crawler: Crawler) -> ContentDecider | None:
    """The crawl's content decider: the one the near-duplicate pipeline of ``ITEM_PIPELINES``
    holds, found with Scrapy's documented ``crawler.get_item_pipeline``; None when no such
    pipeline runs or the engine does not exist yet (then every page's links are followed)."""
    from crawler.pipelines.neardup import NearDuplicatePipeline

    try:
        pipeline = crawler.get_item_pipeline(NearDuplicatePipeline)
    except RuntimeError:  # no engine yet
        return None
    return pipeline.decider if pipeline is not None else None

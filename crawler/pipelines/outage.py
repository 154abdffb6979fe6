"""The content index as the near-duplicate pipeline calls it, under the Redis-outage policy:
:class:`GuardedIndex`.

With ``DEDUP_BACKEND=redis`` a failed index call closes the spider with finish reason
``redis_error`` and one error line (:func:`crawler.closing.stop_on_redis_error`). A
page whose duplicate check failed, and every page after it, is dropped unchecked (plain
``DropItem`` logged at DEBUG, stat ``dedup/redis_error/unchecked``; one warning at close with
the count and the first URL): it is neither stored nor told to be a duplicate. A page already
decided (kept) whose follow-up index update fails is still stored. A pipeline built by hand
(no crawler) raises the error instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from crawler import defaults
from crawler.backends.common import REDIS_ERROR, redis_errors, retry_policy
from crawler.closing import stop_on_redis_error
from crawler.pipelines.counts import Counts
from crawler.vocab import PENDING, Match, PageSignature, Record

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.backends import ContentIndex

logger = logging.getLogger(__name__)

UNCHECKED = f"dedup/{REDIS_ERROR}/unchecked"


class GuardedIndex:
    """``index`` calls that turn a Redis failure into the outage policy (module docstring).
    ``down``: an index call failed; from then on the index is not asked again."""

    def __init__(self, index: ContentIndex, counts: Counts | None = None,
                 crawler: Crawler | None = None) -> None:
        self.index = index
        self.counts = counts or Counts()
        self.crawler = crawler
        if crawler is not None:  # the crawl's Redis retries counted in its stats
            retry_policy(crawler.settings, crawler.stats)
        self.down = False
        self.unchecked_first: str | None = None

    def check_and_add(self, signature: PageSignature) -> Match | None:
        """The index's decision; DropItem (unchecked) when Redis is or goes down."""
        if not self.down:
            try:
                return self.index.check_and_add(signature)
            except redis_errors() as exc:
                self.failed(exc)
        self.counts.inc(UNCHECKED)
        if self.unchecked_first is None:
            self.unchecked_first = signature.url
        raise DropItem(f"not checked for duplicates (Redis unavailable): {signature.url}",
                       log_level="DEBUG")

    def load(self, records: Sequence[Record]) -> None:
        """Record already-decided pages in the index; a Redis failure stops the crawl only."""
        if self.down:
            return
        try:
            self.index.load(records)
        except redis_errors() as exc:
            self.failed(exc)

    def replace(self, kept_canonical: str, signature: PageSignature) -> None:
        """:meth:`ContentIndex.replace`; a Redis failure stops the crawl only."""
        if self.down:
            return
        try:
            self.index.replace(kept_canonical, signature)
        except redis_errors() as exc:
            self.failed(exc)

    def recheck(self, record: Record) -> Match | None:
        """A kept page's new fingerprint: None when it is re-recorded (distinct, or its match
        is pending, or Redis is down), else its match (the page is then out of the index)."""
        if self.down:
            return None
        try:
            match = self.index.check(PageSignature(*record))
            if match is None or match.reason == PENDING:
                self.index.load([record])
                return None
            self.index.remove(record[1] or record[0])
        except redis_errors() as exc:
            self.failed(exc)
            return None
        return match

    def commit(self, canonical_urls: Sequence[str]) -> None:
        """Storage committed these kept pages (:meth:`ContentIndex.commit`)."""
        if not canonical_urls or self.down:
            return
        try:
            self.index.commit(canonical_urls)
        except redis_errors() as exc:
            self.failed(exc)

    def report_unchecked(self) -> None:
        """One warning when pages were dropped unchecked (at close)."""
        if self.unchecked_first is not None:
            logger.warning("%d fetched page(s) not checked for duplicates (Redis unavailable) "
                           "and not stored, first: %s", self.counts.get(UNCHECKED),
                           self.unchecked_first)  # fmt: skip

    def close(self) -> None:
        try:
            self.index.close()
        except redis_errors() as exc:
            logger.debug("closing the content index: %s", exc)

    def failed(self, exc: Exception) -> None:
        if self.crawler is None:  # built by hand: nothing to close, the caller decides
            raise exc
        self.down = True
        url = str(self.crawler.settings.get("REDIS_URL") or defaults.REDIS_URL)
        stop_on_redis_error(self.crawler, exc, url)

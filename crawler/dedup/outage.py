"""The content decider's outage policies: the content index under a Redis outage
(:class:`GuardedIndex`) and the storage reads under a database outage (:class:`StorageOutage`).

With ``DEDUP_BACKEND=redis`` a failed index call closes the spider with finish reason
``redis_error`` and one error line (:func:`crawler.closing.stop_on_redis_error`). A
page whose duplicate check failed, and every page after it, is dropped unchecked (plain
``DropItem`` logged at DEBUG, stat ``dedup/redis_error/unchecked``; one warning at close with
the count and the first URL): it is neither stored nor told to be a duplicate. A page already
decided (kept) whose follow-up index update fails is still stored. A decider built by hand
(no crawler) raises the error instead.

A database outage (:class:`StorageOutage`) is waited out first: every storage read of the
decision is retried (:class:`crawler.storage.retry.RetryPolicy`, as batch writes are) while the
page waits, so an outage within the bound costs nothing but time. Past the bound the crawl
closes with ``storage_error`` (one ERROR line, exit 1), and the page, and every page after it,
is :class:`~crawler.exceptions.Undecided`: neither stored nor dropped, its request not
finished (fetched again: by a JOBDIR resume, or by another worker of a distributed crawl, to
which its lease goes back at once). A page waiting on another worker's pending entry stops
waiting the same way once the crawl closes for a failure, so two workers whose storage went
away never wait on each other's pages forever. One ERROR line at close counts them
(``dedup/storage_error/undecided``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from crawler.backends.common import REDIS_ERROR, redis_errors, redis_url, retry_policy
from crawler.closing import CLOSE_REASON_STAT, close_crawl, stop_on_redis_error
from crawler.dedup.counts import Counts
from crawler.exceptions import Undecided
from crawler.storage.retry import RetryPolicy
from crawler.vocab import PENDING, Match, PageSignature, Record

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.backends import ContentIndex
    from crawler.storage import StorageError

logger = logging.getLogger(__name__)

UNCHECKED = f"dedup/{REDIS_ERROR}/unchecked"
STORAGE_ERROR = "storage_error"  # the finish reason, as the storage pipeline's
UNDECIDED = f"dedup/{STORAGE_ERROR}/undecided"
READ_RETRIES = f"dedup/{STORAGE_ERROR}/read_retries"


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

    async def check_and_add_awaited(self, signature: PageSignature) -> Match | None:
        """:meth:`check_and_add` through the index's ``check_and_add_async`` (its round trip
        awaited, the reactor not held); a Redis failure is handled as there."""
        if not self.down:
            try:
                return await self.index.check_and_add_async(signature)  # type: ignore[attr-defined]
            except redis_errors() as exc:
                self.failed(exc)
        return self.check_and_add(signature)  # down: dropped unchecked

    async def commit_awaited(self, canonical_urls: Sequence[str]) -> None:
        """Storage committed these kept pages (:meth:`ContentIndex.commit`), through the
        index's ``commit_async`` when it has one (its round trip awaited, the reactor not
        held); a Redis failure stops the crawl only."""
        if not canonical_urls or self.down:
            return
        commit_async = getattr(self.index, "commit_async", None)
        try:
            if commit_async is None:
                self.index.commit(canonical_urls)
            else:
                await commit_async(canonical_urls)
        except redis_errors() as exc:
            self.failed(exc)

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
        url = redis_url(self.crawler.settings)
        stop_on_redis_error(self.crawler, exc, url)


class StorageOutage:
    """The database-outage policy of the content decider (module docstring).
    ``down``: storage stayed unavailable past the retries; no page is decided from then on."""

    def __init__(self, policy: RetryPolicy | None = None, counts: Counts | None = None,
                 crawler: Crawler | None = None) -> None:
        self.policy = policy or RetryPolicy()
        self.counts = counts or Counts()
        self.crawler = crawler
        self.down = False
        self.undecided_first: str | None = None

    def closing(self) -> bool:
        """Storage is down, or the crawl closes for a failure (a page waiting on another
        worker's pending entry then waits no longer)."""
        stats = self.crawler.stats if self.crawler is not None else None
        return self.down or (stats is not None
                             and stats.get_value(CLOSE_REASON_STAT) is not None)

    def retrying(self, exc: StorageError, attempt: int) -> float | None:
        """The wait before asking again after failed attempt ``attempt`` (0-based), or None
        once the retries are spent (storage is then down: :meth:`failed`)."""
        if not exc.transient or attempt >= self.policy.times or self.down:
            self.failed(exc)
            return None
        self.counts.inc(READ_RETRIES)
        if attempt == 0:
            logger.warning("Reading the crawl database failed, retrying for up to %.0f s: %s",
                           self.policy.budget, exc)
        return self.policy.delay(attempt)

    def failed(self, exc: Exception) -> None:
        """Storage stayed unavailable: the first call closes the crawl (``storage_error``)."""
        if self.down:
            return
        self.down = True
        if self.crawler is None:  # built by hand: nothing to close, the caller decides
            raise exc
        logger.error("The crawl database stayed unavailable after %d retries (%s); closing the "
                     "spider (%s). Pages not decided are not finished: they are fetched again.",
                     self.policy.times, exc, STORAGE_ERROR)  # fmt: skip
        close_crawl(self.crawler, STORAGE_ERROR)

    def undecided(self, url: str, why: str) -> Undecided:
        """The exception for a page left undecided (counted; the first URL kept)."""
        self.counts.inc(UNDECIDED)
        if self.undecided_first is None:
            self.undecided_first = url
        return Undecided(url, why)

    def report(self) -> None:
        """One ERROR line at close when pages were left undecided."""
        if self.undecided_first is not None:
            logger.error("%d fetched page(s) not decided (the crawl database or the crawl "
                         "stopped) and not finished, first: %s; they are fetched again by a "
                         "JOBDIR resume or another worker", self.counts.get(UNDECIDED),
                         self.undecided_first)  # fmt: skip

"""``StoredFeedExporter``: Scrapy's feed exporter, fed from storage once the crawl is final.

Scrapy's ``FeedExporter`` writes each item as it is scraped. With storage on that is too early:
a page kept when it arrived may be demoted later (a canonical swap, a preferred twin, a
refreshed fingerprint, the settle step), and the settle step may store a dropped page again.
This subclass, with storage on (:func:`crawler.pipelines.storage.storage_enabled`):

* ignores ``item_scraped`` (with ``html`` among a feed's fields it keeps each page's HTML in
  a temporary file, :class:`HtmlSpool`, since storage keeps none; dropped pages too, for the
  ones the settle step stores again);
* at ``spider_closed`` streams the crawl's stored pages from storage
  (:func:`crawler.outputs.feeds.rows.stored_items`: the rows ``scrapy export`` writes, in the same
  schema) into the feed slots, then closes them as Scrapy does: every feed URI, storage
  (file, S3...), format, filter, batch and post-processing option works as before.

Order: Scrapy's engine closes the item pipelines (the storage pipeline writes its last batch,
then runs the settle step) *before* it sends ``spider_closed``, so whatever order the
``spider_closed`` handlers run in, storage is final here; the storage pipeline is still asked
(:meth:`StoragePipeline.wait_idle`) in case a batch is being written. The feed holds the pages
the crawl committed: a crawl that stopped on a storage error exports what it stored.

A distributed worker exports its own pages (its own ``crawls`` row's set): ``scrapy export``
writes the whole distributed crawl once it is over. Without storage (``ITEM_PIPELINES`` with
no storage pipeline) items go to the feeds as they are scraped, as in Scrapy. Stats:
``feeds/stored_pages`` (items handed to the feeds), ``feeds/errors`` (storage unreadable at
close: the feeds then hold the pages read so far; ``scrapy export`` writes them all later).
"""

from __future__ import annotations

import logging
import tempfile
from typing import IO, TYPE_CHECKING, Any

from scrapy import signals
from scrapy.extensions.feedexport import FeedExporter
from scrapy.utils.asyncio import run_in_thread
from twisted.internet.threads import blockingCallFromThread

from crawler import defaults
from crawler.backends.common import batched
from crawler.exceptions import DuplicatePage
from crawler.outputs.feeds.rows import BATCH, stored_items
from crawler.pipelines.storage import StoragePipeline, storage_enabled
from crawler.signals import CRAWL_ID_STAT

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from crawler.items import PageItem

logger = logging.getLogger(__name__)


class HtmlSpool:
    """The latest HTML of each URL, in an unnamed temporary file (removed when closed); an
    index of ``url -> (offset, length)`` in memory."""

    def __init__(self) -> None:
        # open for the whole crawl, closed by close(); unnamed: gone with the process
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.where: dict[str, tuple[int, int]] = {}

    def add(self, url: str, html: str) -> None:
        data = html.encode("utf-8", "surrogatepass")
        offset = self.file.seek(0, 2)
        self.file.write(data)
        self.where[url] = (offset, len(data))

    def get(self, url: str) -> str:
        offset, length = self.where.get(url, (0, 0))
        if not length:
            return ""
        self.file.seek(offset)
        return self.file.read(length).decode("utf-8", "surrogatepass")

    def close(self) -> None:
        self.file.close()


class StoredFeedExporter(FeedExporter):
    """Feeds of the crawl's stored pages (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.from_storage = storage_enabled(self.settings)
        self.db_url = self.settings.get("STORAGE_URL") or defaults.STORAGE_URL
        self.spool: HtmlSpool | None = None
        if self.from_storage and self._wanted("html"):
            self.spool = HtmlSpool()
            crawler.signals.connect(self.item_dropped, signal=signals.item_dropped)

    def _wanted(self, field: str) -> bool:
        """Whether some feed exports ``field`` (a feed without ``fields`` exports them all)."""
        return any(opts.get("fields") is None or field in opts["fields"]
                   for opts in self.feeds.values())

    def item_scraped(self, item: Any, spider: Spider) -> None:
        if not self.from_storage:
            super().item_scraped(item, spider)
        elif self.spool is not None:
            self._spool(item)

    def item_dropped(self, item: Any, response: Any = None, exception: Any = None,
                     spider: Any = None) -> None:
        if self.spool is not None and isinstance(exception, DuplicatePage):
            self._spool(item)

    def _spool(self, item: Any) -> None:
        url, html = getattr(item, "url", None), getattr(item, "html", None)
        if isinstance(url, str) and isinstance(html, str) and self.spool is not None:
            self.spool.add(url, html)

    async def close_spider(self, spider: Spider) -> None:
        if self.from_storage:
            try:
                await self._export_stored(spider)
            finally:
                if self.spool is not None:
                    self.spool.close()
        await super().close_spider(spider)

    async def _export_stored(self, spider: Spider) -> None:
        crawl_id = self.crawler.stats.get_value(CRAWL_ID_STAT) if self.crawler.stats else None
        if crawl_id is None:
            logger.warning("Feeds: the crawl stored nothing (storage never opened): the feeds "
                           "get no pages", extra={"spider": spider})
            return
        pipeline = self.crawler.get_item_pipeline(StoragePipeline)
        if pipeline is not None:
            await pipeline.wait_idle()
        self.crawler.stats.inc_value("feeds/stored_pages", 0)  # 0 when it stored nothing
        count = await run_in_thread(self._stream, int(crawl_id), spider)
        logger.info("Feeds: %d stored pages of crawl %d", count, crawl_id,
                    extra={"spider": spider})

    def _stream(self, crawl_id: int, spider: Spider) -> int:
        """Read the stored pages (this thread: blocking) and hand them to the feed slots on
        the reactor thread, :data:`BATCH` at a time; returns how many."""
        from twisted.internet import reactor

        from crawler.storage import PageReader, ReviewError

        count = 0
        try:
            with PageReader.open(self.db_url) as reader:
                html = self.spool.get if self.spool is not None else None
                items = stored_items(reader, [crawl_id], html=html,
                                     fingerprint_text=self._wanted("fingerprint_text"))
                for chunk in batched(items, BATCH):
                    count += blockingCallFromThread(reactor, self._export, chunk, spider)
        except ReviewError as exc:
            logger.error("Feeds: could not read the stored pages of crawl %d (%s); the feeds "
                         "hold %d of them: write them with `scrapy export --crawl %d`",
                         crawl_id, exc, count, crawl_id, extra={"spider": spider})
            self.crawler.stats.inc_value("feeds/errors")
        return count

    def _export(self, chunk: list[PageItem], spider: Spider) -> int:
        """Hand ``chunk`` to the slots as Scrapy hands a scraped item (filters, batches)."""
        for item in chunk:
            super().item_scraped(item, spider)
        self.crawler.stats.inc_value("feeds/stored_pages", len(chunk))
        return len(chunk)

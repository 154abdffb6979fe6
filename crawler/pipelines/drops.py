"""Where a drop goes: :class:`DropWriter`, the one place a decided :class:`~crawler.vocab.Drop`
is handed on to its two writers, the ``dropped`` table and the drop log.

The near-duplicate pipeline builds each drop once, where it decides it, and gives it here:

* **the page being decided** (:meth:`DropWriter.dropped`): counted (``dedup/<reason>``,
  ``dedup/distance/<d>``) and returned as the :class:`~crawler.exceptions.DuplicatePage` the
  pipeline raises. Scrapy's ``item_dropped`` signal takes it to the storage pipeline, which
  queues its ``dropped`` row (:func:`crawler.pipelines.storage.dropped_row`, from
  ``exc.drop`` and the item's text);
* **a page kept earlier** that turned out a duplicate (:meth:`DropWriter.demoted`: the
  canonical copy came, or its refreshed fingerprint matched): counted the same and sent to
  storage as the signal ``page_demoted`` (``drop=``), which moves the page's stored row to
  ``dropped`` in its next batch;
* **the drop log** (``DROPPED_LOG``, :mod:`crawler.droplog`): with a storage pipeline, a drop
  is logged once storage committed its row: the pipeline hands the rows of each
  ``batch_committed`` signal to :meth:`DropWriter.committed`, so the log names only drops
  storage holds (a killed worker leaves no line naming a page it never stored), with the
  crawl id of the row. Without one (:func:`storage_enabled` False) the log line is written at
  once and the page demoted there, with the crawl id published as the stat
  :data:`crawler.signals.CRAWL_ID_STAT` (None when nothing recorded the crawl).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from crawler import signals as dedup_signals
from crawler.droplog import DropLog, row_record
from crawler.exceptions import DuplicatePage
from crawler.pipelines.counts import Counts

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.vocab import Drop


def storage_enabled(settings: Any) -> bool:
    """Whether ``ITEM_PIPELINES`` stores pages (then drops are logged once committed)."""
    from scrapy.utils.conf import build_component_list
    from scrapy.utils.misc import load_object

    from crawler.pipelines.storage import StoragePipeline

    for entry in build_component_list(settings.getwithbase("ITEM_PIPELINES")):
        component = load_object(entry) if isinstance(entry, str) else entry
        if isinstance(component, type) and issubclass(component, StoragePipeline):
            return True
    return False


class DropWriter:
    """Counts each drop and hands it to storage and the drop log (see the module docstring).

    ``log``: the drop log, None without ``DROPPED_LOG``. ``deferred``: a storage pipeline
    runs, so storage writes the row first and the log follows its commit. ``crawler``: for
    the ``page_demoted`` signal and the crawl id (None: built by hand, no signals)."""

    def __init__(self, log: DropLog | None = None, *, deferred: bool = False,
                 counts: Counts | None = None, crawler: Crawler | None = None) -> None:
        self.log = log
        self.deferred = deferred
        self.counts = counts or Counts()
        self.crawler = crawler

    def dropped(self, drop: Drop) -> DuplicatePage:
        """The page being decided is ``drop``: the exception to raise (it takes the drop to
        storage); logged at once when no storage pipeline runs."""
        self._count(drop)
        if not self.deferred:
            self._log(drop)
        return DuplicatePage(drop)

    def demoted(self, drop: Drop, kept_content_hash: str | None = None) -> None:
        """A stored (or queued) page is ``drop``: storage moves it to ``dropped``
        (``kept_content_hash``: the kept page's, for the drops that named the demoted page),
        or the log hears of it at once when nothing stores pages."""
        self._count(drop)
        if self.crawler is not None and self.deferred:
            self.crawler.signals.send_catch_log(signal=dedup_signals.page_demoted, drop=drop,
                                                duplicate_content_hash=kept_content_hash)
        else:
            self._log(drop)

    def committed(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Storage committed these ``dropped`` rows: their drop log lines."""
        if self.log is not None and self.deferred:
            for row in rows:
                self.log.write(row_record(row))

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

    def _count(self, drop: Drop) -> None:
        self.counts.inc(f"dedup/{drop.reason}")
        self.counts.inc(f"dedup/distance/{drop.distance}")

    def _log(self, drop: Drop) -> None:
        if self.log is not None:
            self.log.write_drop(drop, self._crawl_id())

    def _crawl_id(self) -> int | None:
        stats = self.crawler.stats if self.crawler is not None else None
        return stats.get_value(dedup_signals.CRAWL_ID_STAT) if stats is not None else None

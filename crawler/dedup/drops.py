"""Where a drop goes: :class:`DropWriter`, the one place a decided :class:`~crawler.vocab.Drop`
is handed on to its two writers, the ``dropped`` table and the drop log.

The content decider (:mod:`crawler.dedup.decider`) builds each drop once, where it decides
it, and gives it here:

* **the page being decided** (:meth:`DropWriter.dropped`): counted (``dedup/<reason>``,
  ``dedup/distance/<d>``) and returned as the :class:`~crawler.exceptions.DuplicatePage` the
  pipeline raises. Scrapy's ``item_dropped`` signal takes it to the storage pipeline, which
  queues its ``dropped`` row (:func:`crawler.pipelines.storage.dropped_row`, from
  ``exc.drop`` and the item's text);
* **a page kept earlier** that turned out a duplicate (:meth:`DropWriter.demoted`: the
  canonical copy came, or its refreshed fingerprint matched): counted the same and sent to
  storage as the signal ``page_demoted`` (``drop=``), which moves the page's stored row to
  ``dropped`` in its next batch;
* **the drop log** (``DROPPED_LOG``, :mod:`crawler.outputs.droplog`): with a storage pipeline
  (``deferred``), a drop is logged once storage committed its row: the writer subscribes to
  the storage pipeline's ``batch_committed`` signal itself (:meth:`DropWriter.batch_committed`:
  the batch's rows' lines written, then awaited), so the log names only drops storage holds (a
  killed worker leaves no line naming a page it never stored), with the crawl id of the row.
  No other handler of that signal is involved, so the order Scrapy calls handlers in does not
  matter. Without storage the log line is written at once and the page demoted there, with
  the crawl id published as the stat :data:`crawler.signals.CRAWL_ID_STAT` (None when nothing
  recorded the crawl).

The order is the promise: **the row first, then the line**. A drop's ``dropped`` row is written
by storage like a page's (same batches, retries and ``storage_error``); its log line follows
the commit, so every line names a stored row, and a row whose line could not be written is
still in the table (``scrapy dropped --crawl ID`` lists it).

The lines are written here, in order: at once while the log works (``dedup/droplog/written``).
A failed write (a full disk, the directory gone; the file is left without a torn line) is
retried ``DROPPED_LOG_RETRY_TIMES`` times, ``DROPPED_LOG_RETRY_BACKOFF`` seconds doubling (at
most 30 s), a WARNING and ``dedup/droplog/errors`` each, later lines queued behind it. Still
failing: one ERROR line, the crawl closes with ``droplog_error`` (exit 1) and later lines are
not tried (``dedup/droplog/unwritten``). The storage pipeline awaits ``batch_committed``, and
so its batch's lines (:meth:`DropWriter.batch_committed`) before its next batch and before the
crawl's end is recorded. Without storage nothing awaits them: lines still retried when the
crawl ends are given up then (``droplog_error`` only in the exit code and ``dedup/close_reason``).

Every drop is counted at decision (``dedup/<reason>``, ``dedup/distance/<d>``, and
:data:`DEMOTED_STAT` for a kept page dropped later), whatever happens to its line: the
summary (:mod:`crawler.extensions.progress`) reads these counts.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scrapy.utils.asyncio import sleep
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred

from crawler import defaults
from crawler import signals as dedup_signals
from crawler.closing import close_crawl
from crawler.dedup.counts import Counts
from crawler.exceptions import DuplicatePage
from crawler.outputs.droplog import DropLog, DropLogOptions, drop_record, row_record

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.vocab import Drop

logger = logging.getLogger(__name__)

#: The finish reason of a crawl whose drop log could not be written.
DROPLOG_ERROR = "droplog_error"
#: Kept pages dropped later (:meth:`DropWriter.demoted`).
DEMOTED_STAT = "dedup/demoted"
MAX_BACKOFF = 30.0


class DropWriter:
    """Counts each drop and hands it to storage and the drop log (see the module docstring).

    ``log``: the drop log, None without ``DROPPED_LOG``. ``deferred``: a storage pipeline
    runs, so storage writes the row first and the log follows its commit. ``crawler``: for
    the ``page_demoted`` signal, the ``batch_committed`` subscription, the crawl id, the retry
    settings and closing the crawl (None: built by hand, no signals); ``options``: the retry
    settings (None: the defaults)."""

    def __init__(self, log: DropLog | None = None, *, deferred: bool = False,
                 counts: Counts | None = None, crawler: Crawler | None = None,
                 options: DropLogOptions | None = None) -> None:
        self.log = log
        self.deferred = deferred
        self.counts = counts or Counts()
        self.crawler = crawler
        self.retry_times = options.retry_times if options else defaults.DROPPED_LOG_RETRY_TIMES
        self.retry_backoff = (options.retry_backoff if options
                              else defaults.DROPPED_LOG_RETRY_BACKOFF)  # fmt: skip
        self.backlog: deque[dict[str, Any]] = deque()  # records waiting for a retry
        self.failed = False  # the log stayed unwritable: the crawl closes
        self._retrying = False
        self._waiters: list[Deferred[None]] = []
        if log is not None and crawler is not None and deferred:
            crawler.signals.connect(self.batch_committed, signal=dedup_signals.batch_committed)

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
        self.counts.inc(DEMOTED_STAT)
        if self.crawler is not None and self.deferred:
            self.crawler.signals.send_catch_log(signal=dedup_signals.page_demoted, drop=drop,
                                                duplicate_content_hash=kept_content_hash)
        else:
            self._log(drop)

    def refingerprinted(self, url: str, simhash: int | None) -> None:
        """A kept page's fingerprint was computed again (its site's template learned) and it
        stays kept: storage updates its row (signal ``page_refingerprinted``)."""
        if self.crawler is not None and self.deferred:
            self.crawler.signals.send_catch_log(signal=dedup_signals.page_refingerprinted,
                                                url=url, simhash=simhash)

    async def batch_committed(self, dropped: Iterable[Mapping[str, Any]] = (), **_: Any) -> None:
        """Storage committed a batch: the lines of its ``dropped`` rows, written in order; the
        storage pipeline awaits this, so a line being retried holds its next batch."""
        self.committed(dropped)
        await self.wait_idle()

    def committed(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Storage committed these ``dropped`` rows: their drop log lines."""
        if self.deferred:
            self.submit([row_record(row) for row in rows])

    def close(self) -> None:
        """The crawl ends: records still waiting for a retry are given up, the file closed."""
        if self.backlog and not self.failed:
            self._give_up("the crawl ended while retrying")
        if self.log is not None:
            self.log.close()

    def _count(self, drop: Drop) -> None:
        self.counts.inc(f"dedup/{drop.reason}")
        if drop.distance is not None:  # a person's drop rule measures no distance
            self.counts.inc(f"dedup/distance/{drop.distance}")

    def _log(self, drop: Drop) -> None:
        self.submit([drop_record(drop, self._crawl_id())])

    def _crawl_id(self) -> int | None:
        stats = self.crawler.stats if self.crawler is not None else None
        return stats.get_value(dedup_signals.CRAWL_ID_STAT) if stats is not None else None

    # --- the drop log: in order, retried ----------------------------------------------------

    def submit(self, records: list[dict[str, Any]]) -> None:
        """Write ``records`` in order: at once while the log works; behind a failed one, by the
        retrying task; counted unwritten once the log failed for good."""
        if self.log is None:
            return
        if self.failed:
            self.counts.inc("dedup/droplog/unwritten", len(records))
            return
        self.backlog.extend(records)
        if self._retrying:
            return
        error = self._write_backlog()
        if error is not None:
            self._retrying = True
            deferred_from_coro(self._retry(error))

    async def wait_idle(self) -> None:
        """Until every record submitted so far is written or given up."""
        if self._retrying:
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await maybe_deferred_to_future(waiter)

    def _write_backlog(self) -> OSError | None:
        """Write the backlog at once, up to the first record that fails (its error)."""
        while self.backlog:
            error = self._write_once(self.backlog[0])
            if error is not None:
                return error
            self.backlog.popleft()
        return None

    def _write_once(self, record: dict[str, Any]) -> OSError | None:
        """One attempt: None when written, else the error (counted)."""
        assert self.log is not None
        try:
            self.log.write(record)
        except OSError as exc:
            self.counts.inc("dedup/droplog/errors")
            return exc
        self.counts.inc("dedup/droplog/written")
        return None

    async def _retry(self, error: OSError | None) -> None:
        """Retry the backlog's first record (its write failed with ``error``) with backoff,
        then write the rest; give up when a record fails every retry."""
        try:
            while error is not None and not self.failed:
                error = await self._retry_one(self.backlog[0], error)
                if error is None:
                    self.backlog.popleft()
                    error = self._write_backlog()
                elif not self.failed:
                    self._give_up(f"{self.retry_times + 1} attempts: {error}")
        except Exception:  # never leave waiters hanging
            logger.exception("Drop log writer crashed")
            self.failed = True
        finally:
            self._retrying = False
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(None)

    async def _retry_one(self, record: dict[str, Any], error: OSError | None) -> OSError | None:
        """Up to ``retry_times`` more attempts (WARNING each) at ``record``; the last error."""
        for attempt in range(1, self.retry_times + 1):
            delay = min(self.retry_backoff * 2 ** (attempt - 1), MAX_BACKOFF)
            logger.warning("Drop log %s: write failed (attempt %d of %d: %s), retrying in %.2f s",
                           self._path, attempt, self.retry_times + 1, error, delay)
            await sleep(delay)
            if self.failed:  # the crawl ended meanwhile (close gave the records up)
                break
            error = self._write_once(record)
            if error is None:
                break
        return error

    @property
    def _path(self) -> str:
        return self.log.path if self.log is not None else ""

    def _give_up(self, cause: str) -> None:
        """One ERROR line, the records left counted unwritten, the crawl closed."""
        self.failed = True
        first = self.backlog[0]
        where = (f"each is in the dropped table (scrapy dropped --crawl {first.get('crawl_id')})"
                 if self.deferred else "no storage pipeline records them")
        logger.error("Drop log %s could not be written (%s); closing the crawl (%s). Drops from "
                     "%s on are not in the log: %s", self._path, cause, DROPLOG_ERROR,
                     first.get("url"), where)
        self.counts.inc("dedup/droplog/unwritten", len(self.backlog))
        self.backlog.clear()
        close_crawl(self.crawler, DROPLOG_ERROR)

"""``ResumingScheduler``: Scrapy's scheduler, resuming a ``JOBDIR`` crawl from the dedup journal
(``SCHEDULER`` of the local profile).

Scrapy's own resume, ``JOBDIR/requests.queue``, is not crash-safe: its state file is written
only at a clean close, so a kill loses the queue. When the dupefilter keeps the ``JOBDIR``
journal (:class:`crawler.dupefilter.BloomDupeFilter` on a local seen set:
:mod:`crawler.state.jobstate`), this scheduler resumes from the journal instead:

* when it is built, before Scrapy's scheduler opens its disk queue, it discards
  ``requests.queue`` (one INFO line); Scrapy's scheduler then makes a fresh one, the disk queue
  of this run as in Scrapy (so the ``scheduler/*`` stats are Scrapy's);
* once the spider is open (``spider_opened``: the spider, its middlewares and the crawl budgets
  are ready), it schedules the requests the journal says were seen but never finished
  (:meth:`crawler.dupefilter.BloomDupeFilter.unfinished`) through the engine, as any request
  (``request_scheduled``: the scope check, the budgets), with the meta flags ``depth``,
  :data:`crawler.meta.CANONICAL_URL` and :data:`crawler.meta.RESUMED` (the dupefilter lets it
  through once, without a second journal record) and the spider's ``on_error`` errback when it
  has one; one INFO line and the stat ``dedup/jobdir/resumed`` say how many. They go in
  :data:`RESUME_BATCH` at a time, the next batch when the queue holds fewer than that
  (:meth:`~ResumingScheduler.next_request`), so the crawl fetches at once however many the
  journal owes (scheduled one by one, 500,000 owed requests took 139 s before the first fetch;
  ``python -m bench.scale --resume-probe``);
  :meth:`~ResumingScheduler.has_pending_requests` and ``len()`` count those not yet scheduled,
  so the crawl does not end idle before them and the progress line's queue includes them.
  Until scheduled they stay pending in the journal: a kill meanwhile loses none. All of them
  count against the spider's crawl budgets at open (:func:`count_owed`), as when they were
  scheduled at once: the first batch's links are judged against the whole debt.

Without ``JOBDIR``, with the Redis seen set (durable in Redis) or with another dupefilter it is
exactly Scrapy's :class:`~scrapy.core.scheduler.Scheduler`.

A project that keeps Scrapy's stock scheduler with our dupefilter keeps the journal (the seen
set survives a restart) but nothing takes its unfinished requests: a run that finds some stops
as it opens (``jobdir_error``, one ERROR line saying to set ``SCHEDULER`` to this class), the
journal untouched, rather than leave them seen and never fetched
(:meth:`crawler.dupefilter.journal.SeenJournal.refuse_unless_rescheduled`).
"""

from __future__ import annotations

__floor__ = "component"

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.core.scheduler import Scheduler
from scrapy.utils.misc import load_object

from crawler import meta
from crawler.dupefilter import BloomDupeFilter
from crawler.urls.traps import CrawlBudget

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

    from crawler.state.jobstate import PendingRequest

logger = logging.getLogger(__name__)

#: Scrapy's disk queue in ``JOBDIR``.
SCRAPY_QUEUE = "requests.queue"
#: Requests of the journal scheduled at a time on resume (module docstring).
RESUME_BATCH = 1000


class ResumingScheduler(Scheduler):
    """Scrapy's scheduler that resumes a ``JOBDIR`` crawl from the dedup journal (module
    docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the journal's unfinished requests not scheduled yet, and the spider's errback
        self._owed: list[PendingRequest] = []
        self._errback: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if journaled(crawler.settings):
            discard_scrapy_queue(crawler.settings["JOBDIR"])
        scheduler = super().from_crawler(crawler)
        if isinstance(scheduler.df, BloomDupeFilter) and scheduler.df.journal is not None:
            scheduler.df.journal.rescheduler = True  # it takes the journal's unfinished requests
        crawler.signals.connect(scheduler.resume, signal=signals.spider_opened)
        return scheduler

    def resume(self, spider: Spider) -> None:
        """Schedule the journal's unfinished requests (``spider_opened``; module docstring)."""
        if not isinstance(self.df, BloomDupeFilter) or self.crawler is None:
            return
        from crawler.state.journal import collector_paused

        with collector_paused():  # the storage check and the budgets over every owed request
            pending = self.df.unfinished()
            if pending is None:  # the journal owed nothing
                return
            self._errback = getattr(spider, "on_error", None)
            self._owed = list(pending)
            count_owed(spider, self._owed)
        self._schedule_owed()
        logger.info("JOBDIR: re-scheduled %d requests seen but not finished before the restart",
                    len(pending), extra={"spider": spider})
        if self.stats is not None:
            self.stats.set_value("dedup/jobdir/resumed", len(pending))

    def next_request(self) -> Request | None:
        """Scrapy's, after topping the queue up from the journal's unfinished requests when it
        holds fewer than :data:`RESUME_BATCH` (module docstring)."""
        while self._owed and super().__len__() < RESUME_BATCH:
            self._schedule_owed()
        return super().next_request()

    def has_pending_requests(self) -> bool:
        return bool(self._owed) or super().has_pending_requests()

    def __len__(self) -> int:
        """Scrapy's queue and the journal's requests not scheduled yet (the progress line's
        queue and time left count both)."""
        return super().__len__() + len(self._owed)

    def _schedule_owed(self) -> None:
        """Schedule the next :data:`RESUME_BATCH` of the journal's unfinished requests."""
        assert self.crawler is not None
        batch = self._owed[-RESUME_BATCH:]
        del self._owed[-RESUME_BATCH:]
        for rec in reversed(batch):
            self.crawler.engine.crawl(resumed_request(rec, self._errback))


def journaled(settings: Any) -> bool:
    """Whether the crawl's dupefilter keeps the ``JOBDIR`` journal (``DUPEFILTER_CLASS`` is a
    :class:`BloomDupeFilter` that :meth:`~BloomDupeFilter.keeps_journal` with ``settings``)."""
    dupefilter = load_object(settings["DUPEFILTER_CLASS"])
    return (isinstance(dupefilter, type) and issubclass(dupefilter, BloomDupeFilter)
            and dupefilter.keeps_journal(settings))


def discard_scrapy_queue(jobdir: str) -> None:
    """Remove Scrapy's ``requests.queue`` from ``jobdir`` (one INFO line when it was there)."""
    queue = Path(jobdir, SCRAPY_QUEUE)
    if queue.exists():
        logger.info("JOBDIR %s: discarding Scrapy's requests.queue (not crash-safe); the "
                    "dedup journal re-schedules what was not finished", jobdir)
        shutil.rmtree(queue)


def count_owed(spider: Spider, owed: list[PendingRequest]) -> None:
    """Count every request the journal owes against the spider's crawl budgets at once, as
    scheduling them all at open did (:class:`crawler.urls.traps.CrawlBudget`; the spider's
    ``request_scheduled`` skips the :data:`crawler.meta.RESUMED` ones, its
    ``request_dropped`` still gives back one the dupefilter refuses): the links of the first
    batch's pages are judged against the whole debt, not against the batches scheduled so far.
    Nothing to count when the spider keeps no budgets."""
    budget = getattr(getattr(spider, "trap_rules", None), "budget", None)
    if not isinstance(budget, CrawlBudget):
        return
    for rec in owed:
        if rec.canonical_url:  # the request's meta CANONICAL_URL, as request_scheduled reads it
            budget.count(rec.canonical_url)


def resumed_request(rec: PendingRequest, errback: Any = None) -> Request:
    """The request of a journal record, flagged :data:`crawler.meta.RESUMED`."""
    request_meta = {meta.CANONICAL_URL: rec.canonical_url, "depth": rec.depth,
                    meta.RESUMED: True}
    return Request(rec.url, meta=request_meta, errback=errback)

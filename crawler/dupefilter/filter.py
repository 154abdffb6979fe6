"""``BloomDupeFilter``: Scrapy's ``DUPEFILTER_CLASS`` on a Bloom-filter seen set.

Behaviour:

* ``request_seen`` asks the seen set of ``DEDUP_BACKEND`` (:func:`crawler.backends.make_seen_set`,
  behind its :class:`~crawler.dupefilter.guard.GuardedSeenSet`) to test-and-set the request's
  fingerprint (``crawler.request_fingerprinter``, which keys on the canonical URL).
  ``dont_filter`` is honoured by the scheduler, as in Scrapy. :meth:`BloomDupeFilter.record`
  is the same answer with a test-and-set made elsewhere: the shared frontier's push, which
  records the URL and queues the request in one step (:mod:`crawler.cluster.scheduler`).
* ``dupefilter/filtered`` counts filtered requests; the first one is logged, ``DUPEFILTER_DEBUG``
  logs every one with its referer. Stats ``dedup/bloom/*`` describe the filter
  (:meth:`crawler.backends.SeenSet.figures`) and are refreshed at start, every minute, at each
  JOBDIR snapshot and at close.
* ``seen_fingerprints(fps)`` is the read-only check the spider uses to skip links before
  building a ``Request`` (all the links of a page at once; ``seen_fingerprint(fp)`` for one); it
  never records anything. On a shared seen set (Redis) it is one round trip per call at most:
  fingerprints this worker already knows to be seen (answered "seen" before, or recorded by its
  own test-and-sets; at most :data:`KNOWN_SEEN_MAX`, then forgotten and learnt again) are
  answered without asking, which is exact because a Bloom filter never forgets a key.
  ``seen_fingerprints_soon(fps)`` is the same check with that round trip sent on the event
  loop's own connection and awaited (the reactor serves other pages meanwhile): the spider's.
  The contract the spider relies on is written once, in :class:`~crawler.dupefilter.EarlySkip`.
* Saturation: with ``BLOOM_ON_FULL=stop`` the first new URL past ``BLOOM_CAPACITY`` closes the
  spider with finish reason ``bloom_full`` (stat ``dedup/bloom/full`` = 1); the ``crawl`` command
  exits 1 for it.
* Redis outage (``DEDUP_BACKEND=redis``): the guard's policy
  (:mod:`crawler.dupefilter.guard`): the crawl closes with ``redis_error``, every request from
  then on is dropped (``dedup/redis_error/requests_dropped``, not counted as filtered) and
  every link reads as seen.
* ``JOBDIR`` (local backend): the seen set's durability, a snapshot and a journal of what this
  filter lets through (:class:`~crawler.dupefilter.journal.SeenJournal`). What it says was seen
  but never finished before a restart is :meth:`BloomDupeFilter.unfinished`, for the scheduler
  to re-schedule (:class:`crawler.scheduler.ResumingScheduler`) with the meta flag
  :data:`crawler.meta.RESUMED`, which this filter lets through once.

Built by ``from_crawler`` (Scrapy's scheduler), ``from_spider`` (scrapy-redis) or
``from_settings`` (scrapy-redis without a spider; no stats, signals or JOBDIR then).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.job import job_dir
from scrapy.utils.misc import load_object
from scrapy.utils.request import referer_str

from crawler import signals as dedup_signals
from crawler.backends import backend_name, make_seen_set
from crawler.closing import close_crawl
from crawler.dupefilter.guard import GuardedSeenSet
from crawler.dupefilter.journal import SeenJournal

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.backends import SeenSet
    from crawler.state.jobstate import PendingRequest

#: The package's logger: the log lines keep the name they had before the package was split.
logger = logging.getLogger("crawler.dupefilter")

STATS_SECONDS = 60.0
#: Fingerprints a worker of a shared crawl remembers as seen (~100 bytes each), then forgets.
KNOWN_SEEN_MAX = 1 << 17


class BloomDupeFilter(BaseDupeFilter):
    """Dupefilter on a :class:`crawler.backends.SeenSet`, optionally made durable by a
    :class:`SeenJournal` (``journal``).

    ``seen`` is the seen set; ``guard`` the :class:`GuardedSeenSet` every question goes
    through (its ``down`` says Redis failed and the crawl is closing).
    """

    def __init__(self, seen: SeenSet, fingerprinter: RequestFingerprinterProtocol | None = None,
                 debug: bool = False, stats: StatsCollector | None = None,
                 journal: SeenJournal | None = None, crawler: Crawler | None = None) -> None:
        if fingerprinter is None:
            from crawler.urls.fingerprint import CanonicalRequestFingerprinter

            fingerprinter = CanonicalRequestFingerprinter()
        self.seen, self.fingerprinter, self.debug, self.stats = seen, fingerprinter, debug, stats
        self.guard = GuardedSeenSet(seen, crawler)
        self.journal = journal
        self.crawler = crawler
        self.logdupes = True
        self.stopping = False
        self._known: set[bytes] = set()  # seen for sure in a shared seen set (module docstring)
        self._closed = False
        self._stats_due = time.monotonic() + STATS_SECONDS

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDupeFilter:
        settings = crawler.settings
        jobdir = job_dir(settings)
        journal = cls.keeps_journal(settings)
        seen = make_seen_set(settings, **cls._seen_kwargs(jobdir if journal else None))
        kept = (SeenJournal.from_settings(settings, jobdir, seen, crawler)
                if jobdir and journal else None)  # fmt: skip
        if jobdir and not journal:
            logger.info("JOBDIR %s: the seen set lives in Redis; no local snapshot or journal",
                        jobdir)
        dupefilter = cls(seen, crawler.request_fingerprinter,
                         debug=settings.getbool("DUPEFILTER_DEBUG"), stats=crawler.stats,
                         journal=kept, crawler=crawler)
        crawler.signals.connect(dupefilter._spider_closed, signal=signals.spider_closed)
        if kept is not None:
            for signal in (dedup_signals.batch_committed, dedup_signals.request_finished):
                crawler.signals.connect(kept.finished, signal=signal)
            crawler.signals.connect(kept.refuse_unless_rescheduled, signal=signals.spider_opened)
        return dupefilter

    @classmethod
    def from_spider(cls, spider: Spider) -> BloomDupeFilter:
        """scrapy-redis builds custom dupefilters this way, in its ``open``, which never calls
        the dupefilter's ``open``/``close`` — so this does (close on ``spider_closed``)."""
        dupefilter = cls.from_crawler(spider.crawler)
        dupefilter.open()
        return dupefilter

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BloomDupeFilter:
        """Without a crawler: no stats, no signals, no JOBDIR; a Redis failure raises."""
        fingerprinter_cls = load_object(settings["REQUEST_FINGERPRINTER_CLASS"])
        fingerprinter = (fingerprinter_cls.from_settings(settings)
                         if hasattr(fingerprinter_cls, "from_settings") else fingerprinter_cls())
        return cls(make_seen_set(settings), fingerprinter,
                   debug=settings.getbool("DUPEFILTER_DEBUG"))

    @staticmethod
    def keeps_journal(settings: BaseSettings) -> bool:
        """Whether a filter built from ``settings`` keeps the ``JOBDIR`` journal: ``JOBDIR`` set
        and the seen set local (a Redis seen set is durable in Redis)."""
        return bool(settings.get("JOBDIR")) and backend_name(settings) == "local"

    @staticmethod
    def _seen_kwargs(jobdir: str | None) -> dict[str, Any]:
        if not jobdir:
            return {}
        from crawler.state.jobstate import state_dir

        return {"verify_dir": state_dir(jobdir)}

    # --- the dupefilter API ------------------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        return self.record(request)

    def record(self, request: Request,
               test_and_set: Callable[[bytes], bool] | None = None) -> bool:
        """:meth:`request_seen` with the test-and-set ``test_and_set(fp)`` (True: it was seen)
        in place of the seen set's ``add``: the shared frontier's push, which records the URL
        and queues the request in one atomic step. True when the request was seen (or Redis
        is down); the bookkeeping of a new URL (journal, saturation, stats) is done here."""
        fp = self.fingerprinter.fingerprint(request)
        journal = self.journal
        if journal is not None and journal.resumed(fp, request):
            return False  # already recorded and journaled before the restart
        guard = self.guard
        seen = guard.add(fp) if test_and_set is None else guard.recorded(lambda: test_and_set(fp))
        return self.settled(fp, request, seen)

    def settled(self, fp: bytes, request: Request, seen: bool) -> bool:
        """The bookkeeping of a test-and-set of ``fp`` that answered ``seen``, made by
        :meth:`record` or later by the caller (the shared scheduler's batched pushes:
        :mod:`crawler.cluster.scheduler`); returns ``seen``."""
        if self.seen.shared and not self.guard.down:
            self._remember(fp)  # in the shared set now, whoever put it there
        if seen:
            return True
        journal = self.journal
        if journal is not None and journal.scheduled(fp, request):
            self.update_stats()  # a snapshot was written
        if not self.stopping and self.seen.full:
            self._stop_full()
        if time.monotonic() >= self._stats_due:
            self.update_stats()
        return False

    def known_seen(self, fp: bytes) -> bool:
        """Whether this filter knows ``fp`` to be in its shared seen set already (answered
        seen, or recorded by a test-and-set, made or promised: module docstring); never asks."""
        return fp in self._known

    def promise(self, fp: bytes) -> None:
        """``fp`` will be test-and-set in the shared seen set shortly (a push held for a
        batch): from now on it reads as seen here, as it will there."""
        self._remember(fp)

    def seen_fingerprint(self, fp: bytes) -> bool:
        """Read-only: True when ``fp`` is (probably) in the seen set. Records nothing.

        True as well once Redis has failed (nothing more is fetched while the crawl closes).
        """
        return self.seen_fingerprints([fp])[0]

    def seen_fingerprints(self, fps: Sequence[bytes]) -> list[bool]:
        """:meth:`seen_fingerprint` of each of ``fps``; a shared seen set is asked once, about
        those this worker does not know to be seen (module docstring)."""
        if not self.seen.shared or self.guard.down:
            return self.guard.contains_many(fps)
        ask = self._to_ask(fps)
        if not ask:  # the usual page: every link known to be seen, no question for Redis
            return [True] * len(fps)
        return self._answered(fps, ask, self.guard.contains_many(ask))

    def seen_fingerprints_soon(self, fps: Sequence[bytes]) -> list[bool] | Awaitable[list[bool]]:
        """:meth:`seen_fingerprints`, a shared seen set's question sent on the event loop's
        connection: the answers at once when no question is needed (a local seen set, every
        link known to be seen, Redis down), else an awaitable of them (the reactor serves other
        pages during the round trip)."""
        if not self.seen.shared or self.guard.down:
            return self.guard.contains_many(fps)
        ask = self._to_ask(fps)
        if not ask:
            return [True] * len(fps)
        return self._seen_awaited(fps, ask)

    async def _seen_awaited(self, fps: Sequence[bytes], ask: list[bytes]) -> list[bool]:
        return self._answered(fps, ask, await self.guard.contains_many_awaited(ask))

    def _to_ask(self, fps: Sequence[bytes]) -> list[bytes]:
        """The fingerprints of ``fps`` this worker does not know to be seen, once each."""
        known = self._known
        return list(dict.fromkeys(fp for fp in fps if fp not in known))

    def _answered(self, fps: Sequence[bytes], ask: list[bytes], answers: list[bool]) -> list[bool]:
        """The answers for ``fps`` given those for ``ask``; the seen ones are remembered."""
        found = {fp for fp, yes in zip(ask, answers, strict=True) if yes}
        for fp in found:
            self._remember(fp)
        known = self._known
        return [fp in found or fp in known for fp in fps]

    def _remember(self, fp: bytes) -> None:
        if len(self._known) >= KNOWN_SEEN_MAX:
            self._known.clear()
        self._known.add(fp)

    def note_skipped(self, url: str, referer: str | None = None) -> None:
        """Log a link the spider skipped as already seen (only with ``DUPEFILTER_DEBUG``).

        The spider counts ``dedup/links_skipped_seen`` itself, in bulk.
        """
        if self.debug:
            logger.debug("Skipped already-seen link: %(url)s (referer: %(referer)s)",
                         {"url": url, "referer": referer})

    def log(self, request: Request, spider: Spider) -> None:
        if self.guard.down:  # dropped for the outage, not a duplicate: counted apart
            return
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s (referer: %(referer)s)",
                         {"request": request, "referer": referer_str(request)},
                         extra={"spider": spider})
        elif self.logdupes:
            logger.info("Filtered duplicate request: %(request)s - no more duplicates will be "
                        "shown (see DUPEFILTER_DEBUG to show all duplicates)",
                        {"request": request}, extra={"spider": spider})
            self.logdupes = False
        stats = self.stats or getattr(getattr(spider, "crawler", None), "stats", None)
        if stats is not None:
            stats.inc_value("dupefilter/filtered")

    def open(self) -> None:
        logger.info("%s; BLOOM_ON_FULL=%s", self.seen.describe(), self.seen.on_full)
        self.update_stats()

    def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        if self.journal is not None:
            self.journal.close()
        self.update_stats(final=True)
        self.guard.close()

    def clear(self) -> None:
        """scrapy-redis ``flush``: empty the seen set (the local one has nothing to clear)."""
        self._known.clear()
        self.seen.clear()

    # --- stats -------------------------------------------------------------------------------

    def update_stats(self, final: bool = False) -> None:
        """Refresh the ``dedup/bloom/*`` and ``dedup/jobdir/*`` stats; ``final``: at close (a
        Redis failure then is a warning only: :meth:`GuardedSeenSet.figures`)."""
        self._stats_due = time.monotonic() + STATS_SECONDS
        if self.stats is None or self.guard.down:  # a Redis seen set's figures live in Redis
            return
        figures = self.guard.figures(final)
        if self.guard.down:
            return
        for name, value in figures.items():
            self.stats.set_value(f"dedup/bloom/{name}", value)
        for name, count in (self.journal.figures() if self.journal is not None else {}).items():
            self.stats.set_value(f"dedup/jobdir/{name}", count)

    # --- JOBDIR ------------------------------------------------------------------------------

    def unfinished(self) -> list[PendingRequest] | None:
        """The requests the journal says were seen but not finished before the restart, less
        those storage already holds (:meth:`SeenJournal.unfinished`); None when the journal owed
        nothing or there is none. Each is let through once by :meth:`request_seen` when it
        carries the meta flag :data:`crawler.meta.RESUMED` (no second journal record)."""
        return self.journal.unfinished() if self.journal is not None else None

    def _stop_full(self) -> None:
        self.stopping = True
        logger.error("Bloom filter full (BLOOM_ON_FULL=stop, BLOOM_CAPACITY=%d): closing the "
                     "spider; resume the same JOBDIR with BLOOM_ON_FULL=grow, or start over with "
                     "a larger BLOOM_CAPACITY", self.seen.capacity)
        if self.stats is not None:
            self.stats.set_value("dedup/bloom/full", 1)
        close_crawl(self.crawler, "bloom_full")

    def _spider_closed(self, spider: Spider, reason: str) -> None:
        self.close(reason)  # scrapy-redis's scheduler never calls close()

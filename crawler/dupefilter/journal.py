"""``SeenJournal``: the seen set's durability in ``JOBDIR``, for the dupefilter (local backend).

The dedup state in ``JOBDIR/dedup`` (:mod:`crawler.state.jobstate`, which documents the files):
the local seen set's snapshot, and a journal of every request the dupefilter lets through as new
(:meth:`SeenJournal.scheduled`) and of every request finished (``crawler.signals.batch_committed``
after a durable storage commit, ``crawler.signals.request_finished`` for failures and non-HTML:
:meth:`SeenJournal.finished`). On start the snapshot is loaded and the journal replayed into
the seen set.

What the journal says was seen but never finished before the restart is
:meth:`SeenJournal.unfinished`, for a scheduler to re-schedule
(:class:`crawler.scheduler.ResumingScheduler`) with the meta flag :data:`crawler.meta.RESUMED`:
such a request is let through once (:meth:`SeenJournal.resumed`), without a second record.
Another scheduler (Scrapy's own) re-schedules nothing from it, so when the journal holds such
requests and no scheduler said it takes them (:attr:`SeenJournal.rescheduler`), the crawl stops
as it opens (:meth:`SeenJournal.refuse_unless_rescheduled`: one ERROR line naming the setting to
change, finish reason ``jobdir_error``) with the journal untouched: nothing it owes is lost, and
the next run with :class:`crawler.scheduler.ResumingScheduler` fetches them.

A write failure closes the spider with finish reason ``jobdir_error`` (one ERROR line); the
journal is given up for the rest of the crawl.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from crawler import meta
from crawler.closing import close_crawl

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.backends import SeenSet
    from crawler.state.jobstate import JobState, PendingRequest

#: The package's logger: the log lines keep the name they had before the package was split.
logger = logging.getLogger("crawler.dupefilter")


class SeenJournal:
    """The ``JOBDIR`` journal of a dupefilter (module docstring). ``jobstate`` is None once a
    write failed."""

    def __init__(self, jobstate: JobState, crawler: Crawler | None = None) -> None:
        self.jobstate: JobState | None = jobstate
        self.crawler = crawler
        self._resume: dict[bytes, PendingRequest] = {rec.fp: rec for rec in jobstate.open()}
        #: a scheduler takes :meth:`unfinished` (crawler.scheduler.ResumingScheduler sets it)
        self.rescheduler = False

    @classmethod
    def from_settings(cls, settings: BaseSettings, jobdir: str, seen: SeenSet,
                      crawler: Crawler | None = None) -> SeenJournal:
        """The journal of ``jobdir`` for ``seen``, its settings checked; ``seen`` must be a
        :class:`~crawler.backends.bloom.LocalSeenSet` (its snapshot is in the journal)."""
        from crawler.backends.bloom import LocalSeenSet
        from crawler.state.jobstate import JobState

        if not isinstance(seen, LocalSeenSet):
            raise TypeError(f"JOBDIR keeps the snapshot of a local seen set, not {seen!r}")
        return cls(JobState.from_settings(settings, jobdir, seen), crawler)

    @property
    def resuming(self) -> int:
        """How many requests of the previous runs are still to be let through once."""
        return len(self._resume)

    def refuse_unless_rescheduled(self, spider: Any = None) -> None:
        """At ``spider_opened``: when the journal owes requests that no scheduler takes, stop
        the crawl (``jobdir_error``, one ERROR line) before it fetches anything it could lose;
        the journal keeps them for the next run (module docstring)."""
        if not self._resume or self.rescheduler or self.crawler is None:
            return
        scheduler = self.crawler.settings.get("SCHEDULER")
        logger.error("JOBDIR: %d requests seen but not finished before the restart would never "
                     "be fetched: SCHEDULER=%s does not re-schedule the dedup journal; set "
                     "SCHEDULER = \"crawler.scheduler.ResumingScheduler\" (docs/install.md) and "
                     "run again (the journal keeps them)", len(self._resume), scheduler)
        close_crawl(self.crawler, "jobdir_error")

    def resumed(self, fp: bytes, request: Request) -> bool:
        """Whether ``request`` is a re-scheduled one (meta :data:`crawler.meta.RESUMED`) the
        journal still owes: then it is let through, this once."""
        return bool(self._resume and request.meta.get(meta.RESUMED)
                    and self._resume.pop(fp, None))  # fmt: skip

    def scheduled(self, fp: bytes, request: Request) -> bool:
        """Record ``request``, let through as new; True when that wrote a snapshot."""
        jobstate, request_meta = self.jobstate, request.meta
        if jobstate is None:
            return False
        try:
            snapshots = jobstate.snapshots
            canonical = request_meta.get(meta.CANONICAL_URL) or request.url
            jobstate.scheduled(fp, request.url, int(request_meta.get("depth", 0)), canonical)
        except OSError as exc:
            self._fail(exc)
            return False
        return jobstate.snapshots != snapshots

    def finished(self, fingerprints: list[str], **_: Any) -> None:
        """Record the requests of ``fingerprints`` (hex) finished (the signals' handler)."""
        if self.jobstate is None:
            return
        try:
            self.jobstate.finished(bytes.fromhex(fp) for fp in fingerprints)
        except OSError as exc:
            self._fail(exc)

    def unfinished(self) -> list[PendingRequest] | None:
        """The requests seen but not finished before the restart, less those storage already
        holds (:meth:`_drop_already_stored`; the list may then be empty); each is let through
        once (:meth:`resumed`). None when the journal owed nothing."""
        if not self._resume or self.jobstate is None or self.crawler is None:
            return None
        self._drop_already_stored(self.jobstate, self.crawler)
        return list(self._resume.values())

    def figures(self) -> dict[str, int]:
        """The ``dedup/jobdir/*`` stats: ``pending`` records and ``snapshots`` written."""
        if self.jobstate is None:
            return {}
        return {"pending": len(self.jobstate.pending), "snapshots": self.jobstate.snapshots}

    def close(self) -> None:
        """The final snapshot; a failure is logged (the crawl ends anyway)."""
        if self.jobstate is None:
            return
        try:
            self.jobstate.close()
        except OSError as exc:
            logger.error("JOBDIR: final snapshot failed: %s", exc)

    def _fail(self, exc: OSError) -> None:
        logger.error("JOBDIR: cannot write %s (%s); closing the spider", exc.filename, exc)
        self.jobstate = None
        close_crawl(self.crawler, "jobdir_error")

    def _drop_already_stored(self, jobstate: JobState, crawler: Crawler) -> None:
        """Mark finished the pending pages that storage already holds.

        A kill between the storage commit and the ``batch_committed`` signal leaves a stored page
        pending in the journal; the database is the authority on what was stored, so it is asked
        (rows fetched since the job began, by canonical URL) before anything is re-scheduled.
        Not after a lost journal tail (:attr:`crawler.state.jobstate.JobState.tail_lost`, a power
        cut): a stored page's links may have been lost with it, so every pending page is
        fetched again.
        """
        from crawler.state.jobstate import stored_canonical_urls

        if jobstate.tail_lost:
            logger.warning("JOBDIR: the journal lost its last records; the %d pending pages are "
                           "fetched again even where storage holds them, so the links they led "
                           "to are found again", len(self._resume))
            return
        by_url: dict[str, list[bytes]] = {}
        for rec in self._resume.values():
            by_url.setdefault(rec.canonical_url, []).append(rec.fp)
        stored = stored_canonical_urls(crawler.settings, by_url, jobstate.started)
        fps = [fp for url in stored for fp in by_url[url]]
        for fp in fps:
            self._resume.pop(fp, None)
        jobstate.finished(fps)
        if fps:
            logger.info("JOBDIR: %d pending pages were already stored; not fetched again",
                        len(fps))
        if crawler.stats is not None:
            crawler.stats.set_value("dedup/jobdir/already_stored", len(fps))



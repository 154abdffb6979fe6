"""``BloomDupeFilter``: Scrapy's ``DUPEFILTER_CLASS`` on a Bloom-filter seen set.

Behaviour:

* ``request_seen`` asks the seen set of ``DEDUP_BACKEND`` (:func:`crawler.backends.make_seen_set`)
  to test-and-set the request's fingerprint (``crawler.request_fingerprinter``, which keys on the
  canonical URL). ``dont_filter`` is honoured by the scheduler, as in Scrapy.
* ``dupefilter/filtered`` counts filtered requests; the first one is logged, ``DUPEFILTER_DEBUG``
  logs every one with its referer. Stats ``dedup/bloom/*`` describe the filter (capacity, bits,
  hashes, fill_ratio, expected_false_positives, false_positives_avoided) and are refreshed at
  start, every minute, at each JOBDIR snapshot and at close.
* ``seen_fingerprints(fps)`` is the read-only check the spider uses to skip links before
  building a ``Request`` (all the links of a page at once; ``seen_fingerprint(fp)`` for one); it
  never records anything. On a shared seen set (Redis) it is one round trip per call at most:
  fingerprints this worker already knows to be seen (answered "seen" before, or recorded by its
  own enqueues; at most :data:`KNOWN_SEEN_MAX`, then forgotten and learnt again) are answered
  without asking, which is exact because a Bloom filter never forgets a key. The contract the spider
  relies on is written once, in :class:`EarlySkip`.
* Saturation: with ``BLOOM_ON_FULL=stop`` the first new URL past ``BLOOM_CAPACITY`` closes the
  spider with finish reason ``bloom_full`` (stat ``dedup/bloom/full`` = 1); the ``crawl`` command
  exits 1 for it.
* Redis outage (``DEDUP_BACKEND=redis``): the first failed Redis call closes the spider with
  finish reason ``redis_error`` (the ``crawl`` command exits 1) and logs ONE error line naming the
  masked ``REDIS_URL`` and what to check (:func:`crawler.closing.stop_on_redis_error`, shared with
  the near-duplicate pipeline; stat ``dedup/redis_error`` = 1). From then on Redis is not asked
  again: new requests are dropped (``dedup/redis_error/requests_dropped``, not counted as
  filtered) and ``seen_fingerprint`` answers True, so nothing more is fetched while the crawl
  closes. Pages already stored are untouched; the storage pipeline writes what it holds. A failure
  only while closing (the final stats) is a warning: the crawl ended for its own reason.
* ``JOBDIR`` (local backend): state in ``JOBDIR/dedup`` (:mod:`crawler.state.jobstate`). Scrapy's
  ``requests.queue`` is discarded at start — it is not crash-safe — and every request seen but
  never finished is re-scheduled once the spider opens, through this filter with the meta flag
  ``dedup_resumed``. A journal write failure closes the spider with ``jobdir_error``.

Built by ``from_crawler`` (Scrapy's scheduler), ``from_spider`` (scrapy-redis) or
``from_settings`` (scrapy-redis without a spider; no stats, signals or JOBDIR then).
"""

from __future__ import annotations

__floor__ = "component"

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scrapy import Request, signals
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.job import job_dir
from scrapy.utils.misc import load_object
from scrapy.utils.request import referer_str

from crawler import defaults
from crawler import signals as dedup_signals
from crawler.backends import backend_name, make_seen_set
from crawler.backends.common import REDIS_ERROR, redis_errors
from crawler.closing import close_crawl, stop_on_redis_error

if TYPE_CHECKING:
    from scrapy.core.engine import ExecutionEngine
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.spiders import Spider
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol

    from crawler.backends import SeenSet
    from crawler.cluster.frontier import LeasedFrontier
    from crawler.state.jobstate import JobState, PendingRequest

logger = logging.getLogger(__name__)

RESUME_META = "dedup_resumed"
STATS_SECONDS = 60.0
#: Fingerprints a worker of a shared crawl remembers as seen (~100 bytes each), then forgets.
KNOWN_SEEN_MAX = 1 << 17


@runtime_checkable
class EarlySkip(Protocol):
    """The early-skip contract: what the spider asks of the crawl's dupefilter to skip a
    page's already-seen links before building a ``Request`` for each.

    ``seen_fingerprints(fps)`` answers, for each request fingerprint in order, True when it is
    (probably) seen; it records nothing (the dupefilter's ``request_seen`` stays the one
    authority that records a URL as seen) and asks a shared seen set once per call at most.
    ``note_skipped(url, referer)`` logs one skipped link; the spider calls it only when
    ``debug`` (``DUPEFILTER_DEBUG``) is on. :class:`BloomDupeFilter` keeps the contract; a
    crawl whose dupefilter does not (:func:`early_skip_of` answers None) skips nothing early.
    """

    debug: bool

    def seen_fingerprints(self, fps: Sequence[bytes]) -> list[bool]: ...
    def note_skipped(self, url: str, referer: str | None = None) -> None: ...


def early_skip_of(scheduler: object) -> EarlySkip | None:
    """The dupefilter of ``scheduler`` (``df``, in Scrapy's scheduler and scrapy-redis's) when
    it keeps the :class:`EarlySkip` contract, else None."""
    dupefilter = getattr(scheduler, "df", None)
    return dupefilter if isinstance(dupefilter, EarlySkip) else None


class BloomDupeFilter(BaseDupeFilter):
    """Dupefilter on a :class:`crawler.backends.SeenSet`, optionally made durable by a JobState."""

    def __init__(self, seen: SeenSet, fingerprinter: RequestFingerprinterProtocol | None = None,
                 debug: bool = False, stats: StatsCollector | None = None,
                 jobstate: JobState | None = None) -> None:
        if fingerprinter is None:
            from crawler.urls.fingerprint import CanonicalRequestFingerprinter

            fingerprinter = CanonicalRequestFingerprinter()
        self.seen, self.fingerprinter, self.debug, self.stats = seen, fingerprinter, debug, stats
        self.jobstate = jobstate
        self.crawler: Crawler | None = None
        self.logdupes = True
        self.stopping = False
        self.redis_down = False  # a Redis call failed: the crawl is closing (redis_error)
        self._resume: dict[bytes, PendingRequest] = {}
        self._known: set[bytes] = set()  # seen for sure in a shared seen set (module docstring)
        self._closed = False
        self._stats_due = time.monotonic() + STATS_SECONDS
        if jobstate is not None:
            self._resume = {rec.fp: rec for rec in jobstate.open()}

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDupeFilter:
        settings = crawler.settings
        jobdir = job_dir(settings)
        local = backend_name(settings) == "local"
        seen = make_seen_set(settings, **cls._seen_kwargs(jobdir if local else None))
        jobstate = cls._jobstate(settings, jobdir, seen) if jobdir and local else None
        if jobdir and not local:
            logger.info("JOBDIR %s: the seen set lives in Redis; no local snapshot or journal",
                        jobdir)
        dupefilter = cls(seen, crawler.request_fingerprinter,
                         debug=settings.getbool("DUPEFILTER_DEBUG"), stats=crawler.stats,
                         jobstate=jobstate)
        dupefilter.crawler = crawler
        crawler.signals.connect(dupefilter._spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(dupefilter._spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(dupefilter._finished, signal=dedup_signals.batch_committed)
        crawler.signals.connect(dupefilter._finished, signal=dedup_signals.request_finished)
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
        """Without a crawler: no stats, no signals, no JOBDIR."""
        fingerprinter_cls = load_object(settings["REQUEST_FINGERPRINTER_CLASS"])
        fingerprinter = (fingerprinter_cls.from_settings(settings)
                         if hasattr(fingerprinter_cls, "from_settings") else fingerprinter_cls())
        return cls(make_seen_set(settings), fingerprinter,
                   debug=settings.getbool("DUPEFILTER_DEBUG"))

    @staticmethod
    def _seen_kwargs(jobdir: str | None) -> dict[str, Any]:
        if not jobdir:
            return {}
        from crawler.state.jobstate import state_dir

        return {"verify_dir": state_dir(jobdir)}

    @staticmethod
    def _jobstate(settings: BaseSettings, jobdir: str, seen: Any) -> JobState:
        from crawler.state.jobstate import JobState

        queue = Path(jobdir, "requests.queue")
        if queue.exists():
            logger.info("JOBDIR %s: discarding Scrapy's requests.queue (not crash-safe); the "
                        "dedup journal re-schedules what was not finished", jobdir)
            shutil.rmtree(queue)
        return JobState.from_settings(settings, jobdir, seen)

    # --- the dupefilter API ------------------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        fp = self.fingerprinter.fingerprint(request)
        if self._resume and request.meta.get(RESUME_META) and self._resume.pop(fp, None):
            return False  # already recorded and journaled before the restart
        return self._record(fp, request, lambda: self.seen.add(fp))

    def push_if_new(self, request: Request, frontier: LeasedFrontier) -> bool:
        """The shared frontier's enqueue: record the URL as seen and queue ``request`` in one
        atomic step (a kill between the two would leave a URL seen but never queued). True
        when it was queued, False when already seen (or Redis is down)."""
        if not hasattr(self.seen, "add_args"):  # a local seen set: two steps, no atomicity
            return not self.request_seen(request) and frontier.push_new(request)
        fp = self.fingerprinter.fingerprint(request)
        queued = not self._record(
            fp, request, lambda: not frontier.push_new(request, fp, self.seen)  # type: ignore[arg-type]
        )
        if not self.redis_down:
            self._remember(fp)  # queued by us, or already seen: in the shared set either way
        return queued

    def redis_failed(self, exc: Exception) -> None:
        """Another component's Redis call failed: close the crawl as for our own."""
        if not self.redis_down:
            self._redis_failed(exc)

    def _record(self, fp: bytes, request: Request, add: Callable[[], bool]) -> bool:
        """Test-and-set ``fp`` with ``add`` (True: it was seen); the bookkeeping around it."""
        if self.redis_down:
            return self._drop_for_redis()
        try:
            seen = add()
        except redis_errors() as exc:
            self._redis_failed(exc)
            return self._drop_for_redis()
        if seen:
            return True
        if self.jobstate is not None:
            self._journal(fp, request)
        if not self.stopping and getattr(self.seen, "full", False):
            self._stop_full()
        if time.monotonic() >= self._stats_due:
            self.update_stats()
        return False

    def seen_fingerprint(self, fp: bytes) -> bool:
        """Read-only: True when ``fp`` is (probably) in the seen set. Records nothing.

        True as well once Redis has failed (nothing more is fetched while the crawl closes).
        """
        return self.seen_fingerprints([fp])[0]

    def seen_fingerprints(self, fps: Sequence[bytes]) -> list[bool]:
        """:meth:`seen_fingerprint` of each of ``fps``; a shared seen set is asked once, about
        those this worker does not know to be seen (module docstring)."""
        if self.redis_down:
            return [True] * len(fps)
        many = getattr(self.seen, "contains_many", None)
        try:
            if many is None:
                seen = self.seen
                return [fp in seen for fp in fps]
            known = self._known
            ask = list(dict.fromkeys(fp for fp in fps if fp not in known))
            found = {fp for fp, yes in zip(ask, many(ask) if ask else (), strict=True) if yes}
        except redis_errors() as exc:
            self._redis_failed(exc)
            return [True] * len(fps)
        for fp in found:
            self._remember(fp)
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
        if self.redis_down:  # dropped for the outage, not a duplicate: counted apart
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
        describe = getattr(self.seen, "describe", None)
        text = describe() if describe else f"{type(self.seen).__name__} seen set"
        logger.info("%s; BLOOM_ON_FULL=%s", text, getattr(self.seen, "on_full", "n/a"))
        self.update_stats()

    def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        if self.jobstate is not None:
            try:
                self.jobstate.close()
            except OSError as exc:
                logger.error("JOBDIR: final snapshot failed: %s", exc)
        self.update_stats()
        try:
            self.seen.close()
        except redis_errors() as exc:
            logger.debug("closing the seen set: %s", exc)

    def clear(self) -> None:
        """scrapy-redis ``flush``: empty the seen set when the backend can."""
        self._known.clear()
        clear = getattr(self.seen, "clear", None)
        if clear is not None:
            clear()

    # --- stats -------------------------------------------------------------------------------

    def update_stats(self) -> None:
        self._stats_due = time.monotonic() + STATS_SECONDS
        if self.stats is None or self.redis_down:  # a Redis seen set's figures live in Redis
            return
        try:
            values = self._seen_values()
        except redis_errors() as exc:
            self._redis_failed(exc)
            return
        for name, value in values.items():
            self.stats.set_value(f"dedup/bloom/{name}", value)
        if self.jobstate is not None:
            self.stats.set_value("dedup/jobdir/pending", len(self.jobstate.pending))
            self.stats.set_value("dedup/jobdir/snapshots", self.jobstate.snapshots)

    def _seen_values(self) -> dict[str, Any]:
        seen, values = self.seen, {"capacity": self.seen.capacity, "urls": len(self.seen)}
        for name in ("bits", "hashes", "fill_ratio", "false_positives_avoided"):
            if hasattr(seen, name):
                values[name] = getattr(seen, name)
        if hasattr(seen, "expected_false_positives"):
            values["expected_false_positives"] = round(seen.expected_false_positives(), 3)
        if hasattr(seen, "layers"):
            values["layers"] = len(seen.layers)
        if "fill_ratio" in values:
            values["fill_ratio"] = round(values["fill_ratio"], 6)
        return values

    # --- internals ---------------------------------------------------------------------------

    def _journal(self, fp: bytes, request: Request) -> None:
        jobstate, meta = self.jobstate, request.meta
        assert jobstate is not None
        try:
            snapshots = jobstate.snapshots
            canonical = meta.get("canonical_url") or request.url
            jobstate.scheduled(fp, request.url, int(meta.get("depth", 0)), canonical)
            if jobstate.snapshots != snapshots:
                self.update_stats()
        except OSError as exc:
            self._fail_jobdir(exc)

    def _finished(self, fingerprints: list[str], **_: Any) -> None:
        if self.jobstate is None:
            return
        try:
            self.jobstate.finished(bytes.fromhex(fp) for fp in fingerprints)
        except OSError as exc:
            self._fail_jobdir(exc)

    def _redis_failed(self, exc: Exception) -> None:
        if self.crawler is None:  # built by from_settings: nothing to close, the caller decides
            raise exc
        self.redis_down = True
        if self._closed:  # the crawl ended for its own reason: only the last figures are missing
            logger.warning("The final dedup/bloom stats were not read from Redis: %s", exc)
            return
        url = getattr(self.seen, "url", None) or defaults.REDIS_URL
        stop_on_redis_error(self.crawler, exc, url)

    def _drop_for_redis(self) -> bool:
        if self.stats is not None:
            self.stats.inc_value(f"dedup/{REDIS_ERROR}/requests_dropped")
        return True

    def _fail_jobdir(self, exc: OSError) -> None:
        logger.error("JOBDIR: cannot write %s (%s); closing the spider", exc.filename, exc)
        self.jobstate = None
        self._close_spider("jobdir_error")

    def _stop_full(self) -> None:
        self.stopping = True
        logger.error("Bloom filter full (BLOOM_ON_FULL=stop, BLOOM_CAPACITY=%d): closing the "
                     "spider; resume the same JOBDIR with BLOOM_ON_FULL=grow, or start over with "
                     "a larger BLOOM_CAPACITY", self.seen.capacity)
        if self.stats is not None:
            self.stats.set_value("dedup/bloom/full", 1)
        self._close_spider("bloom_full")

    def _engine(self) -> ExecutionEngine | None:
        try:  # Crawler.engine raises until the crawl starts
            return self.crawler.engine if self.crawler is not None else None
        except RuntimeError:
            return None

    def _close_spider(self, reason: str) -> None:
        close_crawl(self.crawler, reason)

    def _spider_opened(self, spider: Spider) -> None:
        engine = self._engine()
        if not self._resume or engine is None:
            return
        self._drop_already_stored()
        errback = getattr(spider, "on_error", None)
        count = len(self._resume)
        for rec in list(self._resume.values()):
            meta = {"canonical_url": rec.canonical_url, "depth": rec.depth, RESUME_META: True}
            engine.crawl(Request(rec.url, meta=meta, errback=errback))
        logger.info("JOBDIR: re-scheduled %d requests seen but not finished before the restart",
                    count, extra={"spider": spider})
        if self.stats is not None:
            self.stats.set_value("dedup/jobdir/resumed", count)

    def _drop_already_stored(self) -> None:
        """Mark finished the pending pages that storage already holds.

        A kill between the storage commit and the ``batch_committed`` signal leaves a stored page
        pending in the journal; the database is the authority on what was stored, so it is asked
        (rows fetched since the job began, by canonical URL) before anything is re-scheduled.
        Not after a lost journal tail (:attr:`crawler.state.jobstate.JobState.tail_lost`, a power
        cut): a stored page's links may have been lost with it, so every pending page is
        fetched again.
        """
        assert self.crawler is not None and self.jobstate is not None
        from crawler.state.jobstate import stored_canonical_urls

        if self.jobstate.tail_lost:
            logger.warning("JOBDIR: the journal lost its last records; the %d pending pages are "
                           "fetched again even where storage holds them, so the links they led "
                           "to are found again", len(self._resume))
            return

        by_url: dict[str, list[bytes]] = {}
        for rec in self._resume.values():
            by_url.setdefault(rec.canonical_url, []).append(rec.fp)
        stored = stored_canonical_urls(self.crawler.settings, by_url, self.jobstate.started)
        fps = [fp for url in stored for fp in by_url[url]]
        for fp in fps:
            self._resume.pop(fp, None)
        self.jobstate.finished(fps)
        if fps:
            logger.info("JOBDIR: %d pending pages were already stored; not fetched again",
                        len(fps))
        if self.stats is not None:
            self.stats.set_value("dedup/jobdir/already_stored", len(fps))

    def _spider_closed(self, spider: Spider, reason: str) -> None:
        self.close(reason)  # scrapy-redis's scheduler never calls close()

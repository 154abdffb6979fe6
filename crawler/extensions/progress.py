"""``DedupProgress``: a live progress line during a crawl and a dedup summary at its end.

Every ``DEDUP_PROGRESS_INTERVAL`` seconds (default 30; 0 turns the line off, not the summary)
one INFO line::

    Dedup progress: 1200 fetched, 1010 stored, dropped 61 exact + 93 near, 4120 duplicate URLs
    filtered, Bloom 0.04% full, 38.5 pages/s, 412 requests queued, ~11 s left at this rate
    (estimate)

The queue is the scheduler's size (``len()`` of Scrapy's scheduler: its memory and disk
queues); what is left is an estimate, the queue over the pages/s since the previous line: no
estimate while that rate is 0 or the queue unknown (a scheduler without ``len()``), and none
of the requests the pages still to come will add. In the distributed profile the whole
crawl's figures come after it instead, as this worker's last membership renewal read them
(:func:`crawler.cluster.stats.totals`: no Redis call of its own), the estimate taking
every live worker to fetch at this one's rate::

    ...; whole crawl: 412 queued, 24 leased, 3 live workers, 3650 pages fetched, ~4 s left at
    this rate (estimate)

Scrapy's ``LogStats`` ("Crawled N pages (at N pages/min)") says less than this line and is
turned off in ``EXTENSIONS`` (settings/base.py).

When the spider closes, a summary block goes to the log and its numbers to the stats as
``dedup/summary/<name>`` (``pages_fetched``, ``pages_kept``, ``pages_stored``,
``exact_duplicate``, ``near_duplicate``, ``dropped``, ``duplicate_rate``, ``urls_filtered``,
``bloom_fill_ratio``, ``elapsed_seconds``, ``pages_per_second``). Extensions connect their
``spider_closed`` handlers before the item pipelines, so the storage pipeline's final stats
(the ``crawls`` row) and ``STATS_FILE`` include them.

Every number is read from the stats, so the summary agrees with them whatever happened to a
drop afterwards (a drop log that could not be written, a crawl without storage): drops from
the counts :class:`crawler.dedup.drops.DropWriter` keeps for each drop it decides
(``dedup/exact_duplicate``, ``dedup/near_duplicate``; ``dropped`` is every drop, any reason:
the sum of ``dedup/distance/<d>``; ``dedup/demoted``: kept pages dropped later), and
``response_received_count``, ``item_scraped_count``, ``storage/documents``,
``dupefilter/filtered`` plus ``dedup/links_skipped_seen`` (links the spider skipped because the
seen set already held them), ``dedup/bloom/fill_ratio`` and ``dedup/bloom/urls``/``capacity``
(a Redis seen set, shared by the workers of a crawl, is read from Redis for the summary: the
dupefilter refreshes those stats only at open, every minute and at its own close, which comes
after the summary).

A failure found while the crawl was already closing (:data:`crawler.closing.CLOSE_REASON_STAT`,
e.g. ``droplog_error`` on the last drop log lines) becomes the ``finish_reason`` here: this
extension hears ``spider_closed`` after CoreStats set it and before ``STATS_FILE`` is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sized
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.asyncio import create_looping_call

from crawler import config, defaults
from crawler.backends import backend_name
from crawler.closing import CLOSE_REASON_STAT
from crawler.dedup.drops import DEMOTED_STAT
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from crawler.cluster.stats import CrawlTotals

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "dedup/summary/"
DISTANCE_PREFIX = "dedup/distance/"


@dataclass(frozen=True)
class ProgressSettings:
    """``DEDUP_PROGRESS_INTERVAL``: seconds between two progress lines (0: none)."""

    interval: float = defaults.DEDUP_PROGRESS_INTERVAL

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> ProgressSettings:
        """Read and check it, >= 0 (SettingError)."""
        return cls(config.get_float(settings, "DEDUP_PROGRESS_INTERVAL",
                                    defaults.DEDUP_PROGRESS_INTERVAL, lo=0))



class DedupProgress:
    """Logs progress and the final summary, from the stats."""

    def __init__(self, stats: StatsCollector, interval: float = defaults.DEDUP_PROGRESS_INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 cluster: Callable[[], CrawlTotals | None] | None = None,
                 shared_bloom: Callable[[], dict[str, Any] | None] | None = None,
                 queue: Callable[[], int | None] | None = None) -> None:
        self.stats = stats
        self.interval = interval
        self.clock = clock
        self.cluster = cluster  # the whole crawl's figures (distributed profile), or None
        self.shared_bloom = shared_bloom  # the Redis seen set's figures, read now, or None
        self.queue = queue  # the requests this crawl's scheduler holds, or None
        self.started = self.clock()
        self._last = (self.started, 0)
        self.task: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupProgress:
        assert crawler.stats is not None
        shared = None
        if backend_name(crawler.settings) == "redis":
            from crawler.cluster.stats import shared_bloom

            shared = partial(shared_bloom, crawler)
        cluster = _cluster(crawler)
        queue = None if cluster is not None else partial(scheduler_size, crawler)
        ext = cls(crawler.stats, ProgressSettings.from_settings(crawler.settings).interval,
                  cluster=cluster,
                  shared_bloom=shared, queue=queue)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    # --- signals ---------------------------------------------------------------------------

    def spider_opened(self, spider: Any) -> None:
        self.started = self.clock()
        self._last = (self.started, 0)
        if self.interval > 0:
            self.task = create_looping_call(self.log_progress, spider)
            self.task.start(self.interval, now=False)

    def spider_closed(self, spider: Any, reason: str) -> None:
        if self.task is not None and self.task.running:
            self.task.stop()
        reason = self._finish_reason(reason)
        self._read_shared_bloom()
        summary = self.summary()
        for name, value in summary.items():
            self.stats.set_value(SUMMARY_PREFIX + name, value)
        logger.info("Dedup summary (%s):\n%s", reason, self.format_summary(summary),
                    extra={"spider": spider})

    def _read_shared_bloom(self) -> None:
        """A Redis seen set is shared: its figures are read now, not taken from the stats, which
        the dupefilter refreshes only at open, every minute and after this summary (issue 24: a
        worker's summary said "0 URLs" while the stats it dumped said 342)."""
        figures = self.shared_bloom() if self.shared_bloom is not None else None
        for name, value in (figures or {}).items():
            self.stats.set_value(f"dedup/bloom/{name}", value)

    def _finish_reason(self, reason: str) -> str:
        """``reason``, or the failure a component closed the crawl for while it was already
        closing (then also the ``finish_reason`` stat: see the module docstring)."""
        failure = self.stats.get_value(CLOSE_REASON_STAT)
        if failure is None or failure == reason:
            return reason
        logger.info("Finish reason %s instead of %s: the crawl failed while closing",
                    failure, reason)
        self.stats.set_value("finish_reason", failure)
        return str(failure)

    # --- numbers ---------------------------------------------------------------------------

    def _stat(self, key: str, default: Any = 0) -> Any:
        value = self.stats.get_value(key)
        return default if value is None else value

    def progress(self) -> dict[str, Any]:
        """The numbers of one progress line; the rate is since the previous call."""
        now, fetched = self.clock(), int(self._stat("response_received_count"))
        last_time, last_fetched = self._last
        self._last = (now, fetched)
        elapsed = now - last_time
        return {"fetched": fetched, "stored": self._stored(),
                "exact": self._drops(EXACT_DUPLICATE), "near": self._drops(NEAR_DUPLICATE),
                "ruled": self._drops(OVERRIDE), "filtered": self._filtered(),
                "fill": float(self._stat("dedup/bloom/fill_ratio", 0.0)) * 100,
                "rate": (fetched - last_fetched) / elapsed if elapsed > 0 else 0.0}

    def _drops(self, reason: str) -> int:
        return int(self._stat(f"dedup/{reason}"))

    def _distances(self) -> dict[str, int]:
        """Drops by distance (any reason): ``{"3": 2, ...}``, from ``dedup/distance/<d>``."""
        return {key[len(DISTANCE_PREFIX):]: int(value)
                for key, value in self.stats.get_stats().items()
                if key.startswith(DISTANCE_PREFIX) and value}

    def _filtered(self) -> int:
        """Duplicate URLs: filtered by the dupefilter, or skipped by the spider before that."""
        return int(self._stat("dupefilter/filtered")) + int(
            self._stat("dedup/links_skipped_seen"))

    def _stored(self) -> int:
        stored = self.stats.get_value("storage/documents")
        if stored is None:
            return int(self._stat("item_scraped_count")) - int(self._stat(DEMOTED_STAT))
        return int(stored) - int(self._stat("storage/demoted"))

    def log_progress(self, spider: Any = None) -> None:
        line = ("Dedup progress: %(fetched)d fetched, %(stored)d stored, dropped %(exact)d exact "
                "+ %(near)d near, %(filtered)d duplicate URLs filtered, Bloom %(fill).2f%% full, "
                "%(rate).1f pages/s")
        values = self.progress()
        if values["ruled"]:  # pages a person's drop rule names (crawler.dedup.overrides)
            line = line.replace(" near, ", " near + %(ruled)d by a person's rule, ")
        queued, rate = self.queue() if self.queue is not None else None, values["rate"]
        if queued is not None:
            line += ", %(pending)d requests queued"
            values["pending"] = queued
        totals = self.cluster() if self.cluster is not None else None
        if totals is not None:  # as this worker's last membership renewal read them
            line += ("; whole crawl: %(queued)d queued, %(leased)d leased, %(live)d live "
                     "workers, %(pages)d pages fetched")
            values.update(queued=totals.queued, leased=totals.leased, live=totals.live,
                          pages=totals.pages)
            queued, rate = totals.queued, rate * max(totals.live, 1)
        left = time_left(queued, rate)
        if left is not None:
            line += ", ~%(left)s left at this rate (estimate)"
            values["left"] = approx_duration(left)
        logger.info(line, values, extra={"spider": spider})

    def summary(self) -> dict[str, Any]:
        """The final numbers (stored as ``dedup/summary/<name>``)."""
        kept = int(self._stat("item_scraped_count")) - int(self._stat(DEMOTED_STAT))
        exact, near = self._drops(EXACT_DUPLICATE), self._drops(NEAR_DUPLICATE)
        dropped = sum(self._distances().values())
        decided = kept + dropped
        elapsed = max(self.clock() - self.started, 0.0)
        fetched = int(self._stat("response_received_count"))
        return {
            "pages_fetched": fetched, "pages_kept": kept, "pages_stored": self._stored(),
            "exact_duplicate": exact, "near_duplicate": near, "dropped": dropped,
            "override": self._drops(OVERRIDE),
            "duplicate_rate": round(dropped / decided, 4) if decided else 0.0,
            "urls_filtered": self._filtered(),
            "bloom_fill_ratio": float(self._stat("dedup/bloom/fill_ratio", 0.0)),
            "elapsed_seconds": round(elapsed, 3),
            "pages_per_second": round(fetched / elapsed, 2) if elapsed > 0 else 0.0,
        }

    def format_summary(self, s: dict[str, Any]) -> str:
        """The summary block, one fact per line."""
        dist = " ".join(f"{d}:{n}" for d, n in sorted(self._distances().items(),
                                                      key=lambda dn: _distance_key(dn[0])))
        dist = dist or "-"
        urls = self.stats.get_value("dedup/bloom/urls")
        capacity = self.stats.get_value("dedup/bloom/capacity")
        bloom = f"{s['bloom_fill_ratio']:.4%} of bits set"
        if urls is not None and capacity:
            bloom += f" ({urls} URLs, capacity {capacity})"
        rows = [
            ("pages fetched", s["pages_fetched"]),
            ("pages kept / stored", f"{s['pages_kept']} / {s['pages_stored']}"),
            ("exact duplicates", s["exact_duplicate"]),
            ("near duplicates", s["near_duplicate"]),
            *([("dropped by a rule", f"{s['override']} (a person's drop rule: not duplicates)")]
              if s.get("override") else []),
            ("dropped by distance", dist),
            ("duplicate rate", f"{_rate(s['dropped'], s['pages_kept'])} of decided pages"),
            ("duplicate URLs filtered", s["urls_filtered"]),
            ("Bloom filter", bloom),
            ("elapsed", f"{s['elapsed_seconds']:.1f} s ({s['pages_per_second']:.1f} pages/s)"),
        ]
        return "\n".join(f"  {label:<24}{value}" for label, value in rows)


def scheduler_size(crawler: Crawler) -> int | None:
    """The requests waiting in the crawl's scheduler (Scrapy's: memory and disk queues), None
    before it opens or for a scheduler without ``len()``."""
    scheduler = crawler.engine.scheduler if crawler.engine is not None else None
    return len(scheduler) if isinstance(scheduler, Sized) else None


def time_left(queued: int | None, rate: float) -> float | None:
    """Seconds to empty a queue of ``queued`` requests at ``rate`` pages/s; None when either
    is unknown or the rate is 0."""
    if queued is None or rate <= 0:
        return None
    return queued / rate


def approx_duration(seconds: float) -> str:
    """A duration rounded for a human: seconds, minutes, hours and minutes, days and hours.

    >>> [approx_duration(s) for s in (0.4, 59.6, 125, 3 * 3600 + 1500, 2 * 86400 + 7300)]
    ['0 s', '1 min', '2 min', '3 h 25 min', '2 d 2 h']
    """
    if round(seconds) < 60:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _cluster(crawler: Crawler) -> Callable[[], CrawlTotals | None] | None:
    """The whole crawl's figures of a distributed worker (:func:`crawler.cluster.stats.
    totals`), None in any other profile."""
    from crawler.cluster.worker import shared_scheduler

    if backend_name(crawler.settings) != "redis" or not shared_scheduler(crawler.settings):
        return None
    from crawler.cluster import stats as clusterstats

    return lambda: clusterstats.totals(crawler)


def _distance_key(distance: str) -> tuple[int, str]:
    """Distances in number order ("2" before "10"; a non-number such as "None" last)."""
    return (int(distance), "") if distance.isdigit() else (1 << 16, distance)


def _rate(dropped: int, kept: int) -> str:
    """The duplicate rate from its counts, rounded once (the stat's ``round(x, 4)`` printed
    with one decimal rounds twice: 4 of 21 read 19.1%, the report's 19.0%)."""
    decided = dropped + kept
    return f"{dropped / decided:.1%}" if decided > 0 else "0.0%"

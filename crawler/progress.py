"""``DedupProgress``: a live progress line during a crawl and a dedup summary at its end.

Every ``DEDUP_PROGRESS_INTERVAL`` seconds (default 30; 0 turns the line off, not the summary)
one INFO line::

    Dedup progress: 1200 fetched, 1010 stored, dropped 61 exact + 93 near, 4120 duplicate URLs
    filtered, Bloom 0.04% full, 38.5 pages/s

When the spider closes, a summary block goes to the log and its numbers to the stats as
``dedup/summary/<name>`` (``pages_fetched``, ``pages_kept``, ``pages_stored``,
``exact_duplicate``, ``near_duplicate``, ``dropped``, ``duplicate_rate``, ``urls_filtered``,
``bloom_fill_ratio``, ``elapsed_seconds``, ``pages_per_second``). Extensions connect their
``spider_closed`` handlers before the item pipelines, so the storage pipeline's final stats
(the ``crawls`` row) and ``STATS_FILE`` include them.

Drops are counted from the ``item_dropped`` signal (a :class:`~crawler.exceptions.DuplicatePage`
carries its :class:`~crawler.vocab.Drop`: reason and distance) and the ``page_demoted`` signal
(its ``drop``), so the numbers do not depend on the pipeline's stat names.
Other numbers are read from the stats: ``response_received_count``, ``item_scraped_count``,
``storage/documents``, ``dupefilter/filtered`` plus ``dedup/links_skipped_seen`` (links the
spider skipped because the seen set already held them), ``dedup/bloom/fill_ratio`` and
``dedup/bloom/urls``/``capacity``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.asyncio import create_looping_call

from crawler import config, defaults
from crawler import signals as dedup_signals
from crawler.exceptions import DuplicatePage
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, Drop

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "dedup/summary/"


def interval_setting(settings: config.SettingsLike) -> float:
    """``DEDUP_PROGRESS_INTERVAL`` in seconds, >= 0 (0: no periodic line)."""
    return config.get_float(settings, "DEDUP_PROGRESS_INTERVAL",
                            defaults.DEDUP_PROGRESS_INTERVAL, lo=0)



class DedupProgress:
    """Counts drops by reason and distance; logs progress and the final summary."""

    def __init__(self, stats: StatsCollector, interval: float = defaults.DEDUP_PROGRESS_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats
        self.interval = interval
        self.clock = clock
        self.drops: Counter[str] = Counter()
        self.distances: Counter[int] = Counter()
        self.demoted = 0  # kept pages that became drops (the canonical copy came after them)
        self.started = self.clock()
        self._last = (self.started, 0)
        self.task: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DedupProgress:
        assert crawler.stats is not None
        ext = cls(crawler.stats, interval_setting(crawler.settings))
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(ext.page_demoted, signal=dedup_signals.page_demoted)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    # --- signals ---------------------------------------------------------------------------

    def spider_opened(self, spider: Any) -> None:
        self.started = self.clock()
        self._last = (self.started, 0)
        if self.interval > 0:
            self.task = create_looping_call(self.log_progress, spider)
            self.task.start(self.interval, now=False)

    def item_dropped(self, item: Any, response: Any, exception: BaseException,
                     spider: Any = None) -> None:
        if isinstance(exception, DuplicatePage):
            self._count_drop(exception.drop.reason, exception.drop.distance)

    def page_demoted(self, drop: Drop, **_: Any) -> None:
        """A kept page became a drop (the page it names canonical, or a refreshed fingerprint,
        found it a duplicate after all)."""
        self.demoted += 1
        self._count_drop(drop.reason, drop.distance)

    def _count_drop(self, reason: Any, distance: Any) -> None:
        if reason in (EXACT_DUPLICATE, NEAR_DUPLICATE):
            self.drops[reason] += 1
            if isinstance(distance, int):
                self.distances[distance] += 1

    def spider_closed(self, spider: Any, reason: str) -> None:
        if self.task is not None and self.task.running:
            self.task.stop()
        summary = self.summary()
        for name, value in summary.items():
            self.stats.set_value(SUMMARY_PREFIX + name, value)
        logger.info("Dedup summary (%s):\n%s", reason, self.format_summary(summary),
                    extra={"spider": spider})

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
                "exact": self.drops[EXACT_DUPLICATE], "near": self.drops[NEAR_DUPLICATE],
                "filtered": self._filtered(),
                "fill": float(self._stat("dedup/bloom/fill_ratio", 0.0)) * 100,
                "rate": (fetched - last_fetched) / elapsed if elapsed > 0 else 0.0}

    def _filtered(self) -> int:
        """Duplicate URLs: filtered by the dupefilter, or skipped by the spider before that."""
        return int(self._stat("dupefilter/filtered")) + int(
            self._stat("dedup/links_skipped_seen"))

    def _stored(self) -> int:
        stored = self.stats.get_value("storage/documents")
        if stored is None:
            return int(self._stat("item_scraped_count")) - self.demoted
        return int(stored) - int(self._stat("storage/demoted"))

    def log_progress(self, spider: Any = None) -> None:
        logger.info(
            "Dedup progress: %(fetched)d fetched, %(stored)d stored, dropped %(exact)d exact + "
            "%(near)d near, %(filtered)d duplicate URLs filtered, Bloom %(fill).2f%% full, "
            "%(rate).1f pages/s", self.progress(), extra={"spider": spider})

    def summary(self) -> dict[str, Any]:
        """The final numbers (stored as ``dedup/summary/<name>``)."""
        kept = int(self._stat("item_scraped_count")) - self.demoted
        exact, near = self.drops[EXACT_DUPLICATE], self.drops[NEAR_DUPLICATE]
        decided = kept + exact + near
        elapsed = max(self.clock() - self.started, 0.0)
        fetched = int(self._stat("response_received_count"))
        return {
            "pages_fetched": fetched, "pages_kept": kept, "pages_stored": self._stored(),
            "exact_duplicate": exact, "near_duplicate": near, "dropped": exact + near,
            "duplicate_rate": round((exact + near) / decided, 4) if decided else 0.0,
            "urls_filtered": self._filtered(),
            "bloom_fill_ratio": float(self._stat("dedup/bloom/fill_ratio", 0.0)),
            "elapsed_seconds": round(elapsed, 3),
            "pages_per_second": round(fetched / elapsed, 2) if elapsed > 0 else 0.0,
        }

    def format_summary(self, s: dict[str, Any]) -> str:
        """The summary block, one fact per line."""
        dist = " ".join(f"{d}:{n}" for d, n in sorted(self.distances.items())) or "-"
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
            ("dropped by distance", dist),
            ("duplicate rate", f"{s['duplicate_rate']:.1%} of decided pages"),
            ("duplicate URLs filtered", s["urls_filtered"]),
            ("Bloom filter", bloom),
            ("elapsed", f"{s['elapsed_seconds']:.1f} s ({s['pages_per_second']:.1f} pages/s)"),
        ]
        return "\n".join(f"  {label:<24}{value}" for label, value in rows)

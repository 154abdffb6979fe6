"""Python's cyclic garbage collector tuned for a crawl: start-up's objects frozen, young
collections rarer (``GCTuning``, in ``EXTENSIONS`` of every profile).

Why: a crawl process holds about 130,000 objects (local profile) to 190,000 (a distributed
worker) made at start by the imports and the components (Scrapy, Twisted, lxml, SQLAlchemy,
psycopg, redis-py, the settings), which live as long as the process. Every full collection
walks all of them, and a crawl allocates enough containers (requests, items, Deferreds, replies)
to run one every few hundred pages. Measured on ``bench.crawl --workers 1 --pages 2000`` (one
run each, side by side): the collector took 1.0 s of a worker's CPU (0.68 s in 6 full
collections) and 0.44 s of the local profile's; with the start-up objects frozen and a young
generation of 10,000 objects, 0.12 s and 0.09 s.

* ``GC_FREEZE`` (True): :data:`FREEZE_DELAY_SECONDS` after the spider opens (start-up done;
  a crawl shorter than that never pays), one full collection and ``gc.freeze()``: what is alive
  then is never walked again (it is still freed when its references go; only a reference
  cycle among frozen objects would outlive the crawl). Stat ``gc/frozen_objects``.
* ``GC_GEN0_THRESHOLD`` (10,000; Python's default is 700; 0 keeps Python's): allocations of
  container objects between two young collections. Fewer young collections, fewer objects
  promoted to the older generations, so fewer full collections; garbage held in cycles waits a
  little longer (a page's tree is freed by reference counting, not by the collector).

At ``spider_closed`` the objects are unfrozen and the threshold restored (a process may run
another crawl).
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.asyncio import call_later

from crawler import config, defaults

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Seconds after ``spider_opened`` at which the start-up objects are frozen.
FREEZE_DELAY_SECONDS = 2.0
FROZEN_STAT = "gc/frozen_objects"


@dataclass(frozen=True)
class GCSettings:
    """``GC_FREEZE`` and ``GC_GEN0_THRESHOLD`` (module docstring)."""

    freeze: bool = defaults.GC_FREEZE
    gen0_threshold: int = defaults.GC_GEN0_THRESHOLD

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> GCSettings:
        """Read and check them (SettingError)."""
        return cls(config.get_bool(settings, "GC_FREEZE", defaults.GC_FREEZE),
                   config.get_int(settings, "GC_GEN0_THRESHOLD", defaults.GC_GEN0_THRESHOLD,
                                  lo=0))  # fmt: skip


class GCTuning:
    """The collector's settings for the crawl (module docstring)."""

    def __init__(self, crawler: Crawler, options: GCSettings) -> None:
        self.crawler = crawler
        self.options = options
        self._threshold: tuple[int, int, int] | None = None  # Python's, while ours is set
        self._call: Any = None
        self.frozen = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GCTuning:
        tuning = cls(crawler, GCSettings.from_settings(crawler.settings))
        crawler.signals.connect(tuning.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(tuning.spider_closed, signal=signals.spider_closed)
        return tuning

    def spider_opened(self, spider: Any = None) -> None:
        if self.options.gen0_threshold:
            self._threshold = gc.get_threshold()
            gc.set_threshold(self.options.gen0_threshold, *self._threshold[1:])
        if self.options.freeze:
            self._call = call_later(FREEZE_DELAY_SECONDS, self.freeze)

    def freeze(self) -> None:
        """One full collection, then everything alive is left out of later ones."""
        self._call = None
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(FROZEN_STAT, self.frozen)
        logger.debug("Garbage collector: %d objects alive after start-up frozen", self.frozen)

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        if self._call is not None:
            self._call.cancel()  # nothing when it already ran
        self._call = None
        if self.frozen:
            gc.unfreeze()
            self.frozen = 0
        if self._threshold is not None:
            gc.set_threshold(*self._threshold)
            self._threshold = None

"""A Scrapy extension for the benchmarks: CPU and wall time of the crawl itself, in its stats.

``bench/cpu_seconds`` (user + system CPU of the whole process, all threads) and
``bench/wall_seconds`` between ``spider_opened`` and the last response (``bench/tail_seconds``
is the idle wait from then to ``spider_closed``, up to Scrapy's 5 s idle heartbeat), so process
start-up, imports and the idle tail are not charged to the crawl. The CPU is measured to
``spider_closed`` (the tail is idle). ``bench/rss_open_mib`` is the resident memory when the
spider opens (imports and components built: Bloom filter, indexes, database engine) and
``bench/rss_close_mib`` at ``spider_closed``: their difference is what the crawl itself grew.
``bench/opened_unix`` and ``bench/first_page_unix`` are the Unix times of ``spider_opened`` and
of the first response that is not a robots.txt (``bench.scale`` times a resume from the spawn).
With ``BENCH_STATS_FILE`` set it then writes all the crawl's stats there as JSON (values JSON
cannot hold as strings). Added to both crawls of ``bench.crawl`` alike.
"""

from __future__ import annotations

import json
import resource
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def _rss_mib() -> float:
    """Current resident set size in MiB (Linux ``/proc``; 0.0 where unavailable)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * resource.getpagesize() / 2**20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CrawlProbe:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.cpu0 = self.wall0 = self.last = self.rss_open = 0.0
        self.opened_unix = self.first_page_unix = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrawlProbe:
        probe = cls(crawler)
        crawler.signals.connect(probe.opened, signal=signals.spider_opened)
        crawler.signals.connect(probe.closed, signal=signals.spider_closed)
        crawler.signals.connect(probe.response, signal=signals.response_received)
        return probe

    def opened(self, spider: Any) -> None:
        self.rss_open = _rss_mib()
        self.cpu0 = _cpu()
        self.wall0 = self.last = time.perf_counter()
        self.opened_unix = time.time()

    def response(self, **kwargs: Any) -> None:
        self.last = time.perf_counter()
        if not self.first_page_unix:
            request = kwargs.get("request")
            if request is not None and not request.url.endswith("/robots.txt"):
                self.first_page_unix = time.time()

    def closed(self, spider: Any, reason: str) -> None:
        stats = self.crawler.stats
        assert stats is not None
        stats.set_value("bench/cpu_seconds", round(_cpu() - self.cpu0, 4))
        stats.set_value("bench/wall_seconds", round(self.last - self.wall0, 4))
        stats.set_value("bench/tail_seconds", round(time.perf_counter() - self.last, 4))
        stats.set_value("bench/rss_open_mib", round(self.rss_open, 1))
        stats.set_value("bench/rss_close_mib", round(_rss_mib(), 1))
        stats.set_value("bench/opened_unix", self.opened_unix)
        stats.set_value("bench/first_page_unix", self.first_page_unix)
        stats.set_value("finish_reason", reason)
        path = self.crawler.settings.get("BENCH_STATS_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(stats.get_stats(), handle, default=str, indent=1, sort_keys=True)

"""Small CPU cuts per page, before and now, side by side in one process.

``.venv/bin/python -m bench.cpucuts [--pages N] [--runs N]`` from the project root.

* **page log lines**: what the engine and the scraper do with the formatter's "Crawled" and
  "Scraped from" lines of one page, with Scrapy's root handler at ``LOG_LEVEL = "INFO"`` (to
  ``os.devnull``) and a counting handler at INFO as a crawl has them. *Before*: Scrapy's
  :class:`~scrapy.logformatter.LogFormatter` (the records built, then thrown away by the
  handlers); *now*: :class:`crawler.logformatter.DedupLogFormatter` (not built).
* **stats calls**: the stats calls of one page (19, as counted on the demo crawl: 17
  ``inc_value``, one ``max_value``, one ``set_value``). *Before*: Scrapy's
  ``MemoryStatsCollector``; *now*: :class:`crawler.extensions.stats.DedupStatsCollector`.
Both variants answer the same (checked: the stats); the order
alternates over ``--runs``.
Prints CPU µs per page (median over the runs) and writes ``bench/results/cpucuts.json``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from scrapy.http import HtmlResponse, Request
from scrapy.logformatter import LogFormatter
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.log import install_scrapy_root_handler, logformatter_adapter
from scrapy.utils.test import get_crawler

from bench.sidebyside import alternating_medians, parse_args, report
from crawler.extensions.stats import DedupStatsCollector
from crawler.logformatter import DedupLogFormatter

RESULTS = Path(__file__).resolve().parent / "results" / "cpucuts.json"
Page = Callable[[], Any]


def log_lines(formatter: LogFormatter) -> Page:
    """One page's two log lines as ``scrapy/core/engine.py`` and ``scraper.py`` send them."""
    crawler = get_crawler()
    spider = crawler._create_spider("bench")
    request = Request("http://bench.test/a/page", headers={"Referer": "http://bench.test/"})
    response = HtmlResponse(request.url, body=b"<html>" + b"x" * 20_000, request=request)
    item = {"url": request.url, "html": response.text, "text": "words " * 500}
    engine = logging.getLogger("scrapy.core.engine")
    scraper = logging.getLogger("scrapy.core.scraper")

    def page() -> None:
        logkws = formatter.crawled(request, response, spider)
        if logkws is not None:
            engine.log(*logformatter_adapter(logkws), extra={"spider": spider})
        logkws = formatter.scraped(item, response, spider)
        if logkws is not None:
            scraper.log(*logformatter_adapter(logkws), extra={"spider": spider, "item": item})

    return page


def stats_calls(cls: type[MemoryStatsCollector]) -> tuple[Page, MemoryStatsCollector]:
    stats = cls(get_crawler())
    names = [f"downloader/stat_{i}" for i in range(17)]

    def page() -> None:
        for name in names:
            stats.inc_value(name)
        stats.max_value("memusage/max", 12345)
        stats.set_value("finish_time", 1.0)

    return page, stats


def cpu_per_page(page: Page, pages: int) -> float:
    start = time.process_time()
    for _ in range(pages):
        page()
    return (time.process_time() - start) / pages * 1e6


def measure(variants: dict[str, Page], pages: int, runs: int) -> dict[str, float]:
    return alternating_medians({name: partial(cpu_per_page, page, pages)
                                for name, page in variants.items()}, runs)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args("python -m bench.cpucuts", __doc__, 5000, 7, argv)
    lines = {"before": log_lines(LogFormatter()), "now": log_lines(DedupLogFormatter())}
    (old, old_stats), (new, new_stats) = stats_calls(MemoryStatsCollector), stats_calls(
        DedupStatsCollector)
    # the handlers of a crawl at LOG_LEVEL=INFO only (building a test crawler added others)
    logging.root.handlers.clear()
    install_scrapy_root_handler(Settings({"LOG_LEVEL": "INFO", "LOG_FILE": os.devnull}))
    logging.root.addHandler(logging.NullHandler(logging.INFO))  # Scrapy's log counter's level
    rows = {"page log lines": measure(lines, args.pages, args.runs),
            "stats calls": measure({"before": old, "now": new}, args.pages, args.runs)}
    if old_stats.get_stats() != new_stats.get_stats():
        raise SystemExit("the stats collectors disagree")
    report("CPU us per page", rows, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

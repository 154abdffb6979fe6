"""The project's stats collector (:mod:`crawler.extensions.stats`) and the per-page DEBUG lines
(:class:`crawler.logformatter.DedupLogFormatter`) behave as stock Scrapy's: same stats, same
API, same warning, same dump; the page lines written at DEBUG and not built at INFO.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import ScrapyDeprecationWarning
from scrapy.logformatter import LogFormatter
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.extensions.stats import DedupStatsCollector
from crawler.logformatter import DedupLogFormatter
from tests.conftest import CrawlRun, run_crawl


def _drive(stats: MemoryStatsCollector) -> list[Any]:
    """Every public call of the stats API, with what each answered."""
    answers = [stats.get_value("a"), stats.get_value("a", 7)]
    stats.open_spider()
    stats.inc_value("a")
    stats.inc_value("a", 2)
    stats.inc_value("b", start=10)
    stats.set_value("c", "x")
    stats.max_value("m", 3)
    stats.max_value("m", 1)
    stats.min_value("n", 3)
    stats.min_value("n", 5)
    answers += [dict(stats.get_stats()), stats.get_value("a"), str(stats)]
    stats.set_stats({"z": 1})
    answers.append(dict(stats.get_stats()))
    stats.clear_stats()
    answers.append(dict(stats.get_stats()))
    stats.set_value("k", 1)
    return answers


def test_the_collector_answers_as_scrapys() -> None:
    crawler = get_crawler()
    assert _drive(DedupStatsCollector(crawler)) == _drive(MemoryStatsCollector(crawler))


def test_a_spider_argument_warns_as_scrapys() -> None:
    crawler = get_crawler()
    messages = []
    for cls in (MemoryStatsCollector, DedupStatsCollector):
        stats = cls(crawler)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats.inc_value("a", spider=None)
            stats.get_value("a", None, None)
            stats.inc_value("a")
        messages.append([(w.category, str(w.message)) for w in caught])
    assert messages[0] == messages[1]
    assert [category for category, _ in messages[1]] == [ScrapyDeprecationWarning] * 2


def test_the_dump_and_spider_stats_are_scrapys(caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(settings_dict={"STATS_DUMP": True})
    crawler.spider = crawler._create_spider("x")
    kept = []
    for cls in (MemoryStatsCollector, DedupStatsCollector):
        stats = cls(crawler)
        stats.inc_value("pages", 3)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="scrapy.statscollectors"):
            stats.close_spider(reason="finished")
        kept.append(([r.getMessage() for r in caplog.records], stats.spider_stats))
    assert kept[0] == kept[1] and kept[1][1] == {"x": {"pages": 3}}


# --- a crawl: the collector in use, the page lines at DEBUG as stock, none at INFO ------------

class StockPageLines(DedupLogFormatter):
    """The project's formatter with Scrapy's page lines: always built (the crawl before)."""

    crawled = LogFormatter.crawled
    scraped = LogFormatter.scraped


STOCK = {"STATS_CLASS": "scrapy.statscollectors.MemoryStatsCollector",
         "LOG_FORMATTER": f"{__name__}.StockPageLines"}  # fmt: skip
PAGE_LINE = re.compile(r"\] (?:scrapy\.core\.\w+: )?DEBUG: ((?:Crawled|Scraped from) .*)")


def _page_lines(run: CrawlRun) -> Counter[str]:
    return Counter(m.group(1) for m in map(PAGE_LINE.search, run.stderr.splitlines()) if m)


def _stat_names(run: CrawlRun) -> set[str]:
    """Scrapy's stat names (the dedup ones depend on the order pages came in)."""
    return {name for name in run.stats if name != "log_count/DEBUG" and "dedup/" not in name}


@pytest.fixture(scope="module")
def crawls(demo_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, CrawlRun]:
    """The demo site crawled three times: Scrapy's collector and formatter at DEBUG, the
    project's at DEBUG and at INFO."""
    url = demo_server.base_url + "/"
    runs = {}
    for name, settings in (("stock", {**STOCK, "LOG_LEVEL": "DEBUG"}),
                           ("debug", {"LOG_LEVEL": "DEBUG"}), ("info", {"LOG_LEVEL": "INFO"})):
        runs[name] = run_crawl(Path(tmp_path_factory.mktemp(name)), urls=[url], settings=settings)
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    return runs


def test_page_lines_at_debug_are_stocks_and_absent_at_info(crawls: dict[str, CrawlRun]) -> None:
    """One line per response and per item at DEBUG, as before; which referer and which copy of
    a page a line names depends on the order pages came in, so the lines are counted (their
    text is compared in test_logformatter)."""
    for run in (crawls["stock"], crawls["debug"]):
        lines = _page_lines(run)
        crawled = sum(n for line, n in lines.items() if line.startswith("Crawled ("))
        scraped = sum(n for line, n in lines.items() if line.startswith("Scraped from <"))
        assert crawled == run.stats["response_received_count"] > 100
        assert scraped == run.stats["item_scraped_count"] > 100
        assert run.stats["log_count/DEBUG"] >= crawled + scraped
    assert _page_lines(crawls["info"]) == Counter()
    assert "log_count/DEBUG" not in crawls["info"].stats


def test_a_crawl_counts_the_same_stats_as_with_scrapys_collector(
        crawls: dict[str, CrawlRun]) -> None:
    stock, debug, info = crawls["stock"], crawls["debug"], crawls["info"]
    assert _stat_names(debug) == _stat_names(stock) == _stat_names(info)
    for name in ("response_received_count", "downloader/request_count",
                 "downloader/response_bytes"):
        assert debug.stats[name] == stock.stats[name] == info.stats[name], name
    assert len({run.stats["item_scraped_count"] + run.stats["item_dropped_count"]
                for run in crawls.values()}) == 1  # an item per page, whichever copy is kept
    assert "Dumping Scrapy stats" in info.stderr


def test_the_project_settings_select_the_collector() -> None:
    from crawler.settings import base

    crawler = get_crawler(settings_dict={"STATS_CLASS": base.STATS_CLASS})
    assert type(crawler.stats) is DedupStatsCollector


def test_attribute_reads_take_no_python_detour() -> None:
    """The point of the class: Scrapy's per-read ``__getattribute__`` (a failed lookup raised
    and caught on every ``self._stats``) is not in the way."""
    assert DedupStatsCollector.__getattribute__ is object.__getattribute__
    stats = DedupStatsCollector(get_crawler())
    stats.inc_value("a")
    assert not [name for name in vars(stats) if name.startswith("_cached_")]

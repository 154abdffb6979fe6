"""crawler.extensions.progress.DedupProgress: progress numbers, the summary in stats and log,
settings.

Unit tests drive the extension through a real Scrapy crawler's stats collector and signals
(``scrapy.utils.test.get_crawler``) with a hand-advanced clock, drops counted in the stats as
the pipeline's :class:`~crawler.dedup.drops.DropWriter` counts them; one real crawl checks
that the summary reaches the log and the ``crawls`` row.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from scrapy import signals
from scrapy.signalmanager import SignalManager
from scrapy.utils.test import get_crawler

from crawler.closing import CLOSE_REASON_STAT
from crawler.commands.preflight import check_settings as validate_settings
from crawler.config import SettingError
from crawler.dedup.counts import Counts
from crawler.dedup.drops import DropWriter
from crawler.extensions.progress import (
    SUMMARY_PREFIX,
    DedupProgress,
    ProgressSettings,
    approx_duration,
    time_left,
)
from crawler.vocab import Drop
from tests.conftest import run_crawl


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _dup(crawler: Any, reason: str, distance: int) -> None:
    """A drop decided by the pipeline: counted by its DropWriter (no log, no storage)."""
    writer = DropWriter(counts=Counts(crawler.stats))
    writer.dropped(Drop("http://a.test/x", reason, "http://a.test/", distance))


@pytest.fixture
def wired() -> tuple[Any, DedupProgress, Clock]:
    crawler = get_crawler(settings_dict={"DEDUP_PROGRESS_INTERVAL": 0})
    crawler.signals = SignalManager(crawler)  # only this extension listens
    clock = Clock()
    ext = DedupProgress(crawler.stats, interval=0, clock=clock)
    crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
    ext.spider_opened(None)
    return crawler, ext, clock


def test_progress_counts_drops_by_reason_and_rate(wired: tuple) -> None:
    crawler, ext, clock = wired
    stats = crawler.stats
    for reason, distance in (("exact_duplicate", 0), ("near_duplicate", 2),
                             ("near_duplicate", 3)):
        _dup(crawler, reason, distance)
    stats.set_value("response_received_count", 40)
    stats.set_value("item_scraped_count", 30)
    stats.set_value("dupefilter/filtered", 2)
    stats.set_value("dedup/links_skipped_seen", 10)  # skipped by the spider: duplicates too
    stats.set_value("dedup/bloom/fill_ratio", 0.0025)
    clock.now += 10
    p = ext.progress()
    assert p == {"fetched": 40, "stored": 30, "exact": 1, "near": 2, "ruled": 0, "filtered": 12,
                 "fill": 0.25, "rate": 4.0}
    stats.set_value("response_received_count", 50)
    stats.set_value("storage/documents", 35)  # committed rows win over items scraped
    clock.now += 5
    p = ext.progress()
    assert p["rate"] == 2.0 and p["stored"] == 35


def test_progress_line_is_logged(wired: tuple, caplog: pytest.LogCaptureFixture) -> None:
    crawler, ext, clock = wired
    crawler.stats.set_value("response_received_count", 7)
    clock.now += 1
    with caplog.at_level(logging.INFO, logger="crawler.extensions.progress"):
        ext.log_progress()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "crawler.extensions.progress"]
    assert line == ("Dedup progress: 7 fetched, 0 stored, dropped 0 exact + 0 near, "
                    "0 duplicate URLs filtered, Bloom 0.00% full, 7.0 pages/s")


def test_summary_goes_to_stats_and_log(wired: tuple, caplog: pytest.LogCaptureFixture) -> None:
    crawler, _, clock = wired
    for _ in range(3):
        _dup(crawler, "near_duplicate", 1)
    _dup(crawler, "exact_duplicate", 0)
    crawler.stats.set_value("response_received_count", 20)
    crawler.stats.set_value("item_scraped_count", 16)
    crawler.stats.set_value("dedup/bloom/urls", 25)
    crawler.stats.set_value("dedup/bloom/capacity", 1000)
    clock.now += 4
    with caplog.at_level(logging.INFO, logger="crawler.extensions.progress"):
        crawler.signals.send_catch_log(signals.spider_closed, spider=None, reason="finished")
    stats = crawler.stats.get_stats()
    assert {k[len(SUMMARY_PREFIX):]: v for k, v in stats.items() if k.startswith(SUMMARY_PREFIX)
            } == {"pages_fetched": 20, "pages_kept": 16, "pages_stored": 16,
                  "exact_duplicate": 1, "near_duplicate": 3, "dropped": 4, "override": 0,
                  "duplicate_rate": 0.2, "urls_filtered": 0, "bloom_fill_ratio": 0.0,
                  "elapsed_seconds": 4.0, "pages_per_second": 5.0}
    (block,) = [r.getMessage() for r in caplog.records if r.name == "crawler.extensions.progress"]
    assert block.startswith("Dedup summary (finished):")
    assert "dropped by distance     0:1 1:3" in block
    assert "duplicate rate          20.0% of decided pages" in block
    assert "(25 URLs, capacity 1000)" in block


def test_the_summary_rate_is_rounded_once_as_the_report_rounds_it(wired: tuple,
                                                                  caplog: pytest.LogCaptureFixture,
                                                                  ) -> None:
    """4 drops of 21 decided pages: 19.0% (the stat's round(x, 4) = 0.1905 printed with one
    decimal read 19.1%, where the report, from the counts, says 19.0%)."""
    crawler, _, _ = wired
    for _ in range(4):
        _dup(crawler, "near_duplicate", 1)
    crawler.stats.set_value("item_scraped_count", 17)
    with caplog.at_level(logging.INFO, logger="crawler.extensions.progress"):
        crawler.signals.send_catch_log(signals.spider_closed, spider=None, reason="finished")
    (block,) = [r.getMessage() for r in caplog.records if r.name == "crawler.extensions.progress"]
    assert "duplicate rate          19.0% of decided pages" in block


def test_summary_counts_every_reason_and_demoted_pages(wired: tuple) -> None:
    """``dropped`` is every drop whatever its reason; a kept page dropped later leaves the kept
    count, with or without a storage pipeline (no ``page_demoted`` signal without one)."""
    crawler, ext, _ = wired
    _dup(crawler, "near_duplicate", 12)
    _dup(crawler, "soft_404", 2)
    DropWriter(counts=Counts(crawler.stats)).demoted(
        Drop("http://a.test/k", "near_duplicate", "http://a.test/", 3, rule="canonical"))
    crawler.stats.set_value("item_scraped_count", 5)
    summary = ext.summary()
    assert (summary["near_duplicate"], summary["dropped"], summary["pages_kept"]) == (2, 3, 4)
    assert "2:1 3:1 12:1" in ext.format_summary(summary)  # distances in number order


def test_a_failure_while_closing_becomes_the_finish_reason(wired: tuple) -> None:
    crawler, _, _ = wired
    crawler.stats.set_value(CLOSE_REASON_STAT, "droplog_error")
    crawler.stats.set_value("finish_reason", "finished")  # CoreStats, before us
    crawler.signals.send_catch_log(signals.spider_closed, spider=None, reason="finished")
    assert crawler.stats.get_value("finish_reason") == "droplog_error"


@pytest.mark.parametrize("value", [-1, "soon", "-0.5"])
def test_bad_interval_is_refused(value: object) -> None:
    settings = {"DEDUP_PROGRESS_INTERVAL": value}
    with pytest.raises(SettingError, match="DEDUP_PROGRESS_INTERVAL"):
        ProgressSettings.from_settings(settings)
    with pytest.raises(SettingError, match="DEDUP_PROGRESS_INTERVAL"):
        validate_settings(get_crawler(settings_dict=settings).settings)


def test_interval_default_and_off() -> None:
    assert ProgressSettings.from_settings({}).interval == 30.0
    ext = DedupProgress.from_crawler(get_crawler(settings_dict={"DEDUP_PROGRESS_INTERVAL": 0}))
    ext.spider_opened(None)
    assert ext.task is None  # no periodic line; the summary still runs at close


def test_a_real_crawl_stores_the_summary(demo_server: Any, tmp_path: Any) -> None:
    run = run_crawl(tmp_path / "run", urls=[demo_server.base_url + "/"],
                    settings={"DEDUP_PROGRESS_INTERVAL": 0.05})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Dedup summary (finished):" in run.stderr
    ((stats_text,),) = [tuple(r) for r in run.rows("SELECT stats FROM crawls")]
    stats = json.loads(stats_text)
    (stored,) = run.rows("SELECT COUNT(*) FROM documents")[0]
    (dropped,) = run.rows("SELECT COUNT(*) FROM dropped")[0]
    assert stats[SUMMARY_PREFIX + "pages_stored"] == stored > 0
    assert stats[SUMMARY_PREFIX + "dropped"] == dropped
    assert stats[SUMMARY_PREFIX + "pages_fetched"] == stats["response_received_count"]
    assert run.stats[SUMMARY_PREFIX + "dropped"] == dropped  # STATS_FILE has it too


# --- the queue and what is left (issue 26) ----------------------------------------------------


def _line(ext: DedupProgress, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="crawler.extensions.progress"):
        ext.log_progress()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "crawler.extensions.progress"]
    return line


def test_progress_line_shows_the_queue_and_an_estimate(caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(settings_dict={"DEDUP_PROGRESS_INTERVAL": 0})
    clock, queued = Clock(), [412]
    ext = DedupProgress(crawler.stats, interval=0, clock=clock, queue=lambda: queued[0])
    ext.spider_opened(None)
    crawler.stats.set_value("response_received_count", 80)
    clock.now += 20  # 4 pages/s: 412 requests take 103 s
    assert _line(ext, caplog).endswith(
        "4.0 pages/s, 412 requests queued, ~2 min left at this rate (estimate)")
    clock.now += 30  # nothing fetched since: no rate, no estimate
    assert _line(ext, caplog).endswith("0.0 pages/s, 412 requests queued")
    queued[0] = 0
    crawler.stats.set_value("response_received_count", 83)
    clock.now += 1
    assert _line(ext, caplog).endswith("3.0 pages/s, 0 requests queued, ~0 s left at this rate "
                                       "(estimate)")


def test_distributed_estimate_is_the_whole_queue_at_every_live_workers_rate(
        caplog: pytest.LogCaptureFixture) -> None:
    from crawler.cluster.stats import CrawlTotals

    crawler = get_crawler(settings_dict={"DEDUP_PROGRESS_INTERVAL": 0})
    clock = Clock()
    totals = CrawlTotals(queued=3600, leased=24, live=3, pages=900, workers=3)
    ext = DedupProgress(crawler.stats, interval=0, clock=clock, cluster=lambda: totals)
    ext.spider_opened(None)
    crawler.stats.set_value("response_received_count", 100)
    clock.now += 10  # 10 pages/s here, 30 for three workers: 120 s
    assert _line(ext, caplog).endswith(
        "10.0 pages/s; whole crawl: 3600 queued, 24 leased, 3 live workers, 900 pages fetched, "
        "~2 min left at this rate (estimate)")


@pytest.mark.parametrize(("queued", "rate", "left"), [(100, 4.0, 25.0), (0, 2.0, 0.0),
                                                      (None, 5.0, None), (10, 0.0, None)])
def test_time_left(queued: int | None, rate: float, left: float | None) -> None:
    assert time_left(queued, rate) == left


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (44.6, "45 s"), (59.5, "1 min"),
                                               (150, "2 min"), (3600, "1 h 0 min"),
                                               (90061, "1 d 1 h")])
def test_approx_duration(seconds: float, text: str) -> None:
    assert approx_duration(seconds) == text


#: Scrapy's periodic stats line, which the project's progress line replaces.
LOGSTATS = "scrapy.extensions.logstats.LogStats"


def test_a_real_crawl_logs_the_queue_and_no_logstats_line(demo_server: Any, tmp_path: Any) -> None:
    from crawler.settings import base

    assert base.EXTENSIONS[LOGSTATS] is None  # the project's settings turn it off
    run = run_crawl(tmp_path / "run", urls=[demo_server.base_url + "/"],
                    settings={"DEDUP_PROGRESS_INTERVAL": 0.05})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Crawled 0 pages (at 0 pages/min)" not in run.stderr
    assert "[scrapy.extensions.logstats]" not in run.stderr and LOGSTATS not in run.stderr
    lines = [line for line in run.stderr.splitlines() if "Dedup progress: " in line]
    assert lines and all(re.search(r" pages/s, \d+ requests queued", line) for line in lines)
    assert any(re.search(r"[1-9]\d* requests queued, ~\d+ s left at this rate \(estimate\)$",
                         line) for line in lines)


def test_pages_a_persons_rule_drops_are_said_apart_from_duplicates(
        wired: tuple, caplog: pytest.LogCaptureFixture) -> None:
    """A crawl whose rules dropped 192 pages said "dropped 0 exact + 0 near" and a duplicate
    rate of 0.0%, with nothing of the 192 but a stat."""
    crawler, ext, clock = wired
    crawler.stats.set_value("dedup/override", 5)
    _dup(crawler, "near_duplicate", 1)
    crawler.stats.set_value("response_received_count", 10)
    crawler.stats.set_value("item_scraped_count", 4)
    clock.now += 1
    with caplog.at_level(logging.INFO, logger="crawler.extensions.progress"):
        ext.log_progress()
        crawler.signals.send_catch_log(signals.spider_closed, spider=None, reason="finished")
    line, block = [r.getMessage() for r in caplog.records
                   if r.name == "crawler.extensions.progress"]
    assert "dropped 0 exact + 1 near + 5 by a person's rule, " in line
    assert "dropped by a rule       5 (a person's drop rule: not duplicates)" in block
    assert "duplicate rate          20.0% of decided pages" in block  # 1 of 5, rules apart
    assert crawler.stats.get_value(SUMMARY_PREFIX + "override") == 5

"""Log lines that name why a page was dropped read as English: "an exact duplicate", not the
reason code with a wrong article ("is a exact_duplicate", issue 26), and the
:class:`crawler.logformatter.DedupLogFormatter` line of a dropped page stays one short line.

The trap guard's line (:meth:`crawler.urls.traps.TrapRules.follows`) is the one that put a reason
code after an article; it is driven here with real drops and Python's log capture.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy.utils.test import get_crawler

from crawler.exceptions import DuplicatePage
from crawler.logformatter import DedupLogFormatter
from crawler.urls.traps import TrapRules, TrapSettings
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, SOFT_404, Drop

H = "http://a.test"


@pytest.mark.parametrize(("reason", "words"), [(EXACT_DUPLICATE, "an exact duplicate"),
                                               (NEAR_DUPLICATE, "a near duplicate"),
                                               (SOFT_404, "a soft 404")])
def test_the_trap_guard_says_what_the_page_is_in_words(reason: str, words: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    rules = TrapRules(TrapSettings(duplicate_hops=0))
    with caplog.at_level(logging.INFO, logger="crawler.urls.traps"):
        assert rules.follows(Drop(f"{H}/b", reason, f"{H}/a", 0), f"{H}/b") is None
    (line,) = [r.getMessage() for r in caplog.records if r.name == "crawler.urls.traps"]
    assert line.startswith(f"Links not followed: {H}/b is {words} of {H}/a, ")
    assert reason not in line.split(" (trap guard")[0]  # the code only in the stat's name


def test_a_dropped_page_is_one_short_info_line_without_the_item() -> None:
    formatter = DedupLogFormatter()
    spider = get_crawler().spidercls
    drop = Drop(f"{H}/2", NEAR_DUPLICATE, f"{H}/1", 1)
    result = formatter.dropped({"html": "<p>" * 10_000}, DuplicatePage(drop), None,
                               spider)  # type: ignore[arg-type]
    assert result["level"] == logging.INFO
    assert result["msg"] % result["args"] == f"Dropped near_duplicate (1 bit) of {H}/1: {H}/2"


def test_a_page_a_drop_rule_names_is_logged_without_a_kept_page_or_a_distance() -> None:
    from crawler.logformatter import duplicate_message
    from crawler.vocab import OVERRIDE

    line = duplicate_message(Drop(f"{H}/print/1", OVERRIDE, "", None))
    assert line == f"Dropped by a person's rule (scrapy dropped --overrides): {H}/print/1"
    assert "None" not in line and " of " not in line


# --- the per-page DEBUG lines: built only when a handler takes DEBUG --------------------------


def test_debug_is_written_follows_levels_handlers_and_propagation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Loggers at DEBUG as Scrapy leaves them (the levels are in the handlers), without the
    capture handlers pytest has just given them and cut off from the root's."""
    from crawler.logformatter import debug_is_written

    parent = logging.getLogger("tests.logformatter.quiet")
    child = logging.getLogger("tests.logformatter.quiet.child")
    for logger in (parent, child):
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "filters", [])
        monkeypatch.setattr(logger, "level", logger.level)  # restored after the test
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    parent.propagate = False
    parent.setLevel(logging.DEBUG)
    assert not debug_is_written(parent) and not debug_is_written(child)  # lastResort: WARNING
    monkeypatch.setattr(logging.lastResort, "level", logging.DEBUG)
    assert debug_is_written(child)
    parent.addHandler(logging.NullHandler(logging.INFO))
    assert not debug_is_written(child)  # a handler found: lastResort unused
    parent.addHandler(logging.NullHandler(logging.DEBUG))
    assert debug_is_written(parent) and debug_is_written(child)
    child.propagate = False
    assert debug_is_written(child)  # no handler of its own: lastResort, still at DEBUG
    monkeypatch.setattr(logging.lastResort, "level", logging.WARNING)
    assert not debug_is_written(child)
    child.propagate = True
    child.setLevel(logging.INFO)
    assert not debug_is_written(child)
    child.setLevel(logging.DEBUG)
    logging.disable(logging.DEBUG)
    try:
        assert not debug_is_written(child)
    finally:
        logging.disable(logging.NOTSET)
    assert debug_is_written(child)
    parent.handlers.clear()
    assert not debug_is_written(child)
    child.addFilter(lambda record: True)  # a logger's filter sees every record: keep them
    assert debug_is_written(child)


@pytest.mark.parametrize("logger_name", ["scrapy.core.engine", "scrapy.core.scraper"])
def test_page_lines_are_none_without_a_debug_handler_and_stock_with_one(
        logger_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.http import HtmlResponse, Request
    from scrapy.logformatter import LogFormatter

    request = Request(f"{H}/a", headers={"Referer": f"{H}/"}, flags=["cached"])
    response = HtmlResponse(request.url, body=b"<p>x</p>", request=request, flags=["cached"])
    crawler = get_crawler()
    spider = crawler._create_spider("x")
    item = {"url": request.url}

    def lines(formatter: LogFormatter) -> list[Any]:
        if logger_name.endswith("engine"):
            return [formatter.crawled(request, response, spider)]
        return [formatter.scraped(item, response, spider), formatter.scraped(item, None, spider)]

    logger = logging.getLogger(logger_name)
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "handlers", [])
    handler = logging.NullHandler(logging.INFO)  # Scrapy's root handler at LOG_LEVEL=INFO
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        assert lines(DedupLogFormatter()) == [None] * len(lines(LogFormatter()))
        handler.setLevel(logging.DEBUG)
        assert lines(DedupLogFormatter()) == lines(LogFormatter())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)

"""Log lines that name why a page was dropped read as English: "an exact duplicate", not the
reason code with a wrong article ("is a exact_duplicate", issue 26), and the
:class:`crawler.logformatter.DedupLogFormatter` line of a dropped page stays one short line.

The trap guard's line (:meth:`crawler.urls.traps.TrapRules.follows`) is the one that put a reason
code after an article; it is driven here with real drops and Python's log capture.
"""

from __future__ import annotations

import logging

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

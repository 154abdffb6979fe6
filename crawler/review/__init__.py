"""Read a crawl database for review: drop records, filters, the crawls to report, and the
``--explain`` comparison.

The library behind ``scrapy dropped``, ``scrapy dedupreport`` and ``scrapy crawldiff``; it
imports no Scrapy component and speaks no SQL: the database is read through
:class:`crawler.storage.PageReader` (tables reflected, nothing created, a missing SQLite file
reported, never created), every failure a one-line :class:`ReviewError`.

================  ============================================================================
``records``       :class:`DropRecord` (table row or drop-log line), :class:`DropFilter`, the log
``crawldb``       :class:`CrawlDB`: a database opened for review, read as drop records
``selection``     :func:`select_crawls`: ``--crawl ID``, ``--job [JOB]`` or the latest crawl
``explanation``   :func:`explain`, :func:`explain_pair`: one decision side by side
``render``        an explanation as text or JSON
``urls``          :func:`resolve_url`: any printed spelling of a URL back to the stored one
``actions``       what a person does: an override or a review recorded, and applied at once
``serve``         the review server of ``dedupreport --serve`` (:class:`ReviewServer`)
================  ============================================================================
"""

from __future__ import annotations

from crawler.review.crawldb import CrawlDB
from crawler.review.explanation import (
    Explanation,
    Page,
    block_ranges,
    compare,
    crawl_thresholds,
    explain,
    explain_pair,
    lines_of,
    matching_blocks,
    words_of,
)
from crawler.review.records import (
    ALL_REASONS,
    REASONS,
    DropFilter,
    DropRecord,
    apply_filter,
    host_matches,
    iso_utc,
    read_log,
)
from crawler.review.selection import LATEST_JOB, Selection, empty_crawl_message, select_crawls
from crawler.review.urls import resolve_url
from crawler.storage import ReviewError, Run, parse_time, resolve_db_url

__all__ = [
    "ALL_REASONS",
    "LATEST_JOB",
    "REASONS",
    "CrawlDB",
    "DropFilter",
    "DropRecord",
    "Explanation",
    "Page",
    "ReviewError",
    "Run",
    "Selection",
    "apply_filter",
    "block_ranges",
    "compare",
    "crawl_thresholds",
    "empty_crawl_message",
    "explain",
    "explain_pair",
    "host_matches",
    "iso_utc",
    "lines_of",
    "matching_blocks",
    "parse_time",
    "read_log",
    "resolve_db_url",
    "resolve_url",
    "select_crawls",
    "words_of",
]

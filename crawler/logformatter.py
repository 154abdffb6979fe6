"""``DedupLogFormatter``: one short INFO line per duplicate page instead of the whole item.

Scrapy's stock formatter logs a dropped item at WARNING with the item's repr (here: the full
HTML and text of the page). A :class:`~crawler.exceptions.DuplicatePage` is an expected outcome,
not a problem, so it is logged at INFO as::

    Dropped near_duplicate (3 bits) of http://kept/page: http://dropped/page
    Dropped exact_duplicate of http://kept/page: http://dropped/page

Every other drop is logged as stock Scrapy does. Enabled by ``LOG_FORMATTER =
"crawler.logformatter.DedupLogFormatter"`` (settings/base.py).

The DEBUG lines of every page ("Crawled (200) ..." and "Scraped from ...") are built only when
a handler would write them. Scrapy sets the root logger to NOTSET and filters by level in its
handler, so at ``LOG_LEVEL = "INFO"`` each page made two log records that the handler then threw
away (about 55 µs a page). When no handler takes DEBUG from the logger Scrapy sends them to,
:meth:`DedupLogFormatter.crawled` and :meth:`~DedupLogFormatter.scraped` return ``None``, which
Scrapy's API reads as "do not log". At ``LOG_LEVEL = "DEBUG"`` (or with any handler that takes
DEBUG, such as pytest's log capture) the lines are exactly Scrapy's.
"""

from __future__ import annotations

__floor__ = "component"

import logging
from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter

from crawler.exceptions import DuplicatePage
from crawler.vocab import NEAR_DUPLICATE, OVERRIDE, Drop

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.http import Request, Response
    from scrapy.logformatter import LogFormatterResult
    from twisted.python.failure import Failure

__all__ = ["DedupLogFormatter", "debug_is_written", "duplicate_message"]

# The loggers Scrapy sends the formatter's records to (scrapy/core/engine.py, scraper.py).
_CRAWLED_LOGGER = logging.getLogger("scrapy.core.engine")
_SCRAPED_LOGGER = logging.getLogger("scrapy.core.scraper")


def duplicate_message(drop: Drop) -> str:
    """The one-line description of a duplicate drop (or of a page a person's rule drops)."""
    if drop.reason == OVERRIDE:
        return f"Dropped by a person's rule (scrapy dropped --overrides): {drop.url}"
    if drop.reason == NEAR_DUPLICATE:
        unit = "bit" if drop.distance == 1 else "bits"
        return f"Dropped {drop.reason} ({drop.distance} {unit}) of {drop.duplicate_of}: {drop.url}"
    return f"Dropped {drop.reason} of {drop.duplicate_of}: {drop.url}"


def debug_is_written(logger: logging.Logger) -> bool:
    """Whether a DEBUG record sent to *logger* would reach a handler that takes it.

    Follows :meth:`logging.Logger.callHandlers`: the logger's level (and ``logging.disable``),
    then the handlers of the logger and its parents up to one with ``propagate`` off, and
    ``logging.lastResort`` when there are none. A handler's filters only see records of its
    level, so they are not consulted; a filter on *logger* itself might (a counter, say), so
    one there counts as written. Checked on every call: handlers come and go (log capture).
    """
    if not logger.isEnabledFor(logging.DEBUG):
        return False
    if logger.filters:
        return True
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if handler.level <= logging.DEBUG:
                return True
        current = current.parent if current.propagate else None
    last = logging.lastResort
    return not found and last is not None and last.level <= logging.DEBUG


class DedupLogFormatter(LogFormatter):
    """Short INFO lines for duplicate pages; stock behaviour for everything else, except that
    the per-page DEBUG lines are not built when nothing would write them."""

    def crawled(  # type: ignore[override]  # None: Scrapy skips the log call
        self, request: Request, response: Response, spider: Spider
    ) -> LogFormatterResult | None:
        if not debug_is_written(_CRAWLED_LOGGER):
            return None
        return super().crawled(request, response, spider)

    def scraped(  # type: ignore[override]  # None: Scrapy skips the log call
        self, item: Any, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult | None:
        if not debug_is_written(_SCRAPED_LOGGER):
            return None
        return super().scraped(item, response, spider)

    def dropped(
        self,
        item: Any,
        exception: BaseException,
        response: Response | Failure | None,
        spider: Spider,
    ) -> LogFormatterResult:
        if isinstance(exception, DuplicatePage):
            return {
                "level": logging.INFO,
                "msg": "%(message)s",
                "args": {"message": duplicate_message(exception.drop)},
            }
        return super().dropped(item, exception, response, spider)

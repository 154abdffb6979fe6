"""``DedupLogFormatter``: one short INFO line per duplicate page instead of the whole item.

Scrapy's stock formatter logs a dropped item at WARNING with the item's repr (here: the full
HTML and text of the page). A :class:`~crawler.exceptions.DuplicatePage` is an expected outcome,
not a problem, so it is logged at INFO as::

    Dropped near_duplicate (3 bits) of http://kept/page: http://dropped/page
    Dropped exact_duplicate of http://kept/page: http://dropped/page

Every other drop is logged as stock Scrapy does. Enabled by ``LOG_FORMATTER =
"crawler.logformatter.DedupLogFormatter"`` (settings/base.py).
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
    from scrapy.http import Response
    from scrapy.logformatter import LogFormatterResult
    from twisted.python.failure import Failure

__all__ = ["DedupLogFormatter", "duplicate_message"]


def duplicate_message(drop: Drop) -> str:
    """The one-line description of a duplicate drop (or of a page a person's rule drops)."""
    if drop.reason == OVERRIDE:
        return f"Dropped by a person's rule (scrapy dropped --overrides): {drop.url}"
    if drop.reason == NEAR_DUPLICATE:
        unit = "bit" if drop.distance == 1 else "bits"
        return f"Dropped {drop.reason} ({drop.distance} {unit}) of {drop.duplicate_of}: {drop.url}"
    return f"Dropped {drop.reason} of {drop.duplicate_of}: {drop.url}"


class DedupLogFormatter(LogFormatter):
    """Short INFO lines for duplicate pages; stock behaviour for everything else."""

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

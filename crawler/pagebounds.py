"""Bounds on the work one page can cause, whatever its size: read by the ``web`` spider.

* ``LINKS_PER_PAGE_MAX`` (default 10,000; 0 = no cap): the links of a page (``<a href>``,
  ``<area href>``, in page order) judged and followed. The rest are neither judged nor
  followed, only counted (``dedup/links_capped``: the number of links cut); the first page
  the cap cuts is logged at INFO. Every link a page yields costs the crawl about 0.2 ms of
  reactor time (Scrapy's middlewares, the scheduler) and a queued request's memory: measured,
  a page with 500,000 links held the reactor for over a minute and took 1.9 GB.
* ``PAGE_MAX_PARSE_CHARS`` (default 2,000,000; 0 = no cap): the characters of a page's
  decoded markup parsed for its links, title and canonical link (the text extraction of
  :mod:`crawler.text` reads as many, :data:`crawler.text.MAX_HTML_CHARS`). The whole page is
  still stored. An lxml tree takes about 17 bytes of memory per byte of markup (a 30 MB page:
  500 MB, 0.7 s to build); a page cut is counted (``dedup/page_truncated``), the first one
  logged at INFO.

Limits: a link after the cut (either of them) is not found on that page; a site that links
its pages only from one huge index is crawled partly (raise the caps for it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from crawler import config, defaults
from crawler.config import SettingsLike

logger = logging.getLogger(__name__)

__all__ = ["PageBounds", "validate"]


@dataclass
class PageBounds:
    """The two caps (0 = no cap) and which of their first bites were logged."""

    links_max: int = defaults.LINKS_PER_PAGE_MAX
    parse_chars: int = defaults.PAGE_MAX_PARSE_CHARS
    _logged: set[str] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> PageBounds:
        """``LINKS_PER_PAGE_MAX`` and ``PAGE_MAX_PARSE_CHARS``, checked (SettingError)."""
        return cls(config.get_int(settings, "LINKS_PER_PAGE_MAX", defaults.LINKS_PER_PAGE_MAX,
                                  lo=0),
                   config.get_int(settings, "PAGE_MAX_PARSE_CHARS",
                                  defaults.PAGE_MAX_PARSE_CHARS, lo=0))  # fmt: skip

    def cut(self, markup: str) -> str:
        """The part of ``markup`` that is parsed (all of it when it is under the cap)."""
        if self.parse_chars and len(markup) > self.parse_chars:
            return markup[: self.parse_chars]
        return markup

    def note_truncated(self, url: str, chars: int, extra: dict[str, Any] | None = None) -> None:
        """Log the first page cut by ``PAGE_MAX_PARSE_CHARS`` (the caller counts)."""
        if "parse" not in self._logged:
            self._logged.add("parse")
            logger.info("Page of %d characters parsed for links only up to "
                        "PAGE_MAX_PARSE_CHARS=%d: %s (further ones counted in "
                        "dedup/page_truncated)", chars, self.parse_chars, url, extra=extra)

    def note_capped(self, url: str, cut: int, extra: dict[str, Any] | None = None) -> None:
        """Log the first page whose links ``LINKS_PER_PAGE_MAX`` cut (the caller counts)."""
        if "links" not in self._logged:
            self._logged.add("links")
            logger.info("Page with more than LINKS_PER_PAGE_MAX=%d links: %d not followed: %s "
                        "(further ones counted in dedup/links_capped)", self.links_max, cut, url,
                        extra=extra)  # fmt: skip


def validate(settings: SettingsLike) -> PageBounds:
    """The pre-flight check of the page bounds (:meth:`PageBounds.from_settings`)."""
    return PageBounds.from_settings(settings)

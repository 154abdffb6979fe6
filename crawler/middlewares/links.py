"""Spider middleware that keeps unschedulable links and spider traps out of the frontier.

A request the spider outputs (start requests included) that carries ``meta[CANONICAL_URL]``
passes: the web spider judges every link it extracts with :class:`crawler.urls.linkrules.LinkRules`
and sets the key, and its seeds, chosen by the user, are checked by :mod:`crawler.urls.seeds`
(not by the trap limits). Any other request is judged
here by the same rules, without a host scope (Scrapy's offsite middleware keeps another
spider's scope): a scheme other than http(s) or a URL that
:func:`~crawler.urls.urlnorm.normalize_url` refuses is dropped as ``dedup/links_not_http``, a trap
as ``urlnorm/trap/<kind>``; a request kept gets ``meta[CANONICAL_URL]``.

The first drop of each kind is logged at INFO and the rest only counted; ``URLNORM_DEBUG``
logs every one at DEBUG with its referer (:class:`crawler.urls.linkrules.DropNotes`, shared with
the spider). It replaces Scrapy's ``UrlLengthMiddleware``, which ``settings/base.py``
disables (it measured the raw URL under another stat name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from crawler.meta import CANONICAL_URL
from crawler.urls.linkrules import DropNotes, LinkRules, TrapLimits

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

__all__ = ["TrapLimits", "UrlNormalizationMiddleware"]


class UrlNormalizationMiddleware(BaseSpiderMiddleware):
    """Drops non-http(s) links, invalid URLs and traps; marks ``meta[CANONICAL_URL]``."""

    crawler: Crawler

    def __init__(self, rules: LinkRules | None = None,  # pylint: disable=super-init-not-called
                 notes: DropNotes | None = None) -> None:
        self.rules = rules or LinkRules()
        self.notes = notes or DropNotes()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlNormalizationMiddleware:
        settings = crawler.settings
        middleware = cls(LinkRules.from_settings(settings), DropNotes.from_settings(settings))
        middleware.crawler = crawler
        return middleware

    def get_processed_request(self, request: Request, response: Response | None) -> Request | None:
        if CANONICAL_URL in request.meta:  # judged where it was made
            return request
        canonical, stat = self.rules.judge(request.url)
        if stat is None:
            request.meta[CANONICAL_URL] = canonical
            return request
        referer = response.url if response is not None else None
        self.notes.note(self.crawler.stats, stat, [request.url], referer=referer,
                        extra={"spider": self.crawler.spider})
        return None

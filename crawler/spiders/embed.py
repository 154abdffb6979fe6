"""Use the dedup components in an existing Scrapy project: :func:`page_item` for its spiders.

The project adds the settings of docs/install.md (the dupefilter, the
request fingerprinter, the two pipelines, the link middleware, the extensions) and its spiders
yield ``page_item(response)`` for every HTML page they want deduplicated and stored::

    from crawler.spiders.embed import page_item

    class NewsSpider(scrapy.Spider):
        name = "news"

        def parse(self, response):
            yield page_item(response, self.crawler)
            yield from response.follow_all(css="a")

The item is the :class:`~crawler.items.PageItem` the ``web`` spider yields, less what only that
spider knows: ``canonical_link`` stays None (``<link rel="canonical">`` hints need the crawl's
scope), and its ``blocks`` are filled so the pipeline does not parse the page twice. Its
``fingerprints`` (what the ``JOBDIR`` journal marks finished) are the request's and those of
the URLs it was redirected from. May change: new ``PageItem`` fields get their defaults here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from crawler.content.text import extract, is_binary, media_type
from crawler.items import PageItem
from crawler.urls.fingerprint import canonical_url_of, chain_fingerprints
from crawler.urls.urlnorm import InvalidUrl, normalize_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


def page_item(response: Response, crawler: Crawler | None = None) -> PageItem:
    """The :class:`~crawler.items.PageItem` of ``response`` for the dedup and storage pipelines.

    ``crawler`` (the spider's ``self.crawler``) gives the project's request fingerprinter for
    ``fingerprints``; without it they are computed as :mod:`crawler.urls.fingerprint` does. A body
    that is not text (:func:`crawler.content.text.is_binary`) gives an item with ``binary`` set and
    no text, stored but never fingerprinted. Non-HTML responses are the caller's to skip.
    """
    request = response.request
    canonical = (canonical_url_of(request) if request is not None else None) or _canonical(
        response.url)
    binary = is_binary(response.body)
    html = "" if binary else getattr(response, "text", "")
    page = None if binary else extract(html, response.url, tokenize=False)
    referer = request.headers.get("Referer") if request is not None else None
    return PageItem(
        url=response.url,
        status=response.status,
        content_type=media_type(response.headers.get("Content-Type")),
        title="" if page is None else page.title,
        text="" if page is None else page.text,
        html=html,
        depth=int(response.meta.get("depth", 0)) if request is not None else 0,
        referer=referer.decode("latin-1") if referer else None,
        fetched_at=datetime.now(UTC).isoformat(timespec="microseconds"),
        canonical_url=canonical,
        fingerprints=_fingerprints(response, crawler),
        encoding=None if binary else getattr(response, "encoding", None),
        binary=binary,
        blocks=None if page is None else page.blocks,
    )


def _fingerprints(response: Response, crawler: Crawler | None) -> list[str]:
    if response.request is None:
        return []
    fingerprinter = getattr(crawler, "request_fingerprinter", None)
    # the crawl's URL policy, so redirect URLs are keyed as the dupefilter keyed them
    policy = getattr(fingerprinter, "policy", None)
    return chain_fingerprints(response.request, response.meta.get("redirect_urls", ()),
                              fingerprinter, policy)


def _canonical(url: str) -> str:
    try:
        return normalize_url(url)
    except InvalidUrl:
        return url

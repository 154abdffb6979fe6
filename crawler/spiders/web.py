"""The seed-list spider: ``scrapy crawl web -a seeds=FILE`` (or ``-a urls=URL1,URL2``).

Behaviour:

* Seeds are read by :mod:`crawler.seeds` (the ``crawl`` command has already refused a bad file)
  and scheduled *through* the dupefilter, so a seed linked from its own page is fetched once.
* The crawl stays within the seeds' hosts: exact host match on the canonical URL (IDN hosts in
  punycode, any port), ``allowed_domains`` set to the same hosts for redirects.
* Links come from ``<a href>`` and ``<area href>`` of HTML responses, resolved against
  ``<base href>``. Each link is normalized once; the canonical URL travels in
  ``request.meta["canonical_url"]`` to the fingerprinter and to storage.
* Early skip (``DEDUP_EARLY_SKIP``, default on): a link whose fingerprint the dupefilter already
  holds never becomes a ``Request`` — the costly part of a crawl where most links are already
  seen. The check is read-only; the dupefilter stays the one authority that records a URL as seen.
  Skipped links are counted as ``dedup/links_skipped_seen``; in-scope links as
  ``dedup/links_extracted``; ``javascript:``/``mailto:``/... links as ``dedup/links_not_http``.
* One :class:`~crawler.items.PageItem` per HTML response; other responses (and failures) send
  :data:`crawler.signals.request_finished` so the JOBDIR journal knows they are done.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.response import get_base_url

from crawler import config, defaults
from crawler import signals as dedup_signals
from crawler.fingerprint import canonical_url_of, fingerprint_url
from crawler.items import PageItem
from crawler.seeds import canonical_host, seeds_from_args
from crawler.text import is_binary, visible_text
from crawler.urlnorm import InvalidUrl, UrlPolicy, normalize_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

_SKIP_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "file:", "ftp:", "about:", "sms:")


class WebSpider(Spider):
    name = "web"

    def __init__(self, seeds: str | None = None, urls: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seeds = seeds_from_args(seeds=seeds, urls=urls)
        self.hosts = self.seeds.hosts
        self.allowed_domains = sorted(self.hosts)
        self.policy = UrlPolicy()
        self.early_skip = True

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> WebSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.policy = UrlPolicy.from_settings(crawler.settings)
        spider.early_skip = config.get_bool(
            crawler.settings, "DEDUP_EARLY_SKIP", defaults.DEDUP_EARLY_SKIP
        )
        return spider

    async def start(self) -> AsyncIterator[Request]:
        for url, canonical in zip(self.seeds.urls, self.seeds.canonical, strict=True):
            yield self._request(fetch_url(url, canonical), canonical)

    # --- responses --------------------------------------------------------------------------

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            self._finished(response.request, response)
            return
        binary = is_binary(response.body)
        if not binary:
            yield from self._links(response)
        yield self._item(response, binary)

    def on_error(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        if request is not None:
            self._finished(request, getattr(failure.value, "response", None))

    def _item(self, response: HtmlResponse, binary: bool) -> PageItem:
        html = "" if binary else response.text
        root = None if binary else response.selector.root
        title = ""
        if root is not None and hasattr(root, "findtext"):
            title = " ".join((root.findtext(".//title") or "").split())
        referer = response.request.headers.get("Referer") if response.request else None
        return PageItem(
            url=response.url,
            status=response.status,
            content_type=_content_type(response),
            title=title,
            text="" if binary else visible_text(html),
            html=html,
            depth=int(response.meta.get("depth", 0)),
            referer=referer.decode("latin-1") if referer else None,
            fetched_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            canonical_url=canonical_url_of(response.request, self.policy) or response.url,
            fingerprints=self._chain_fingerprints(response),
            encoding=None if binary else response.encoding,
            binary=binary,
        )

    # --- links ------------------------------------------------------------------------------

    def _links(self, response: HtmlResponse) -> Iterator[Request]:
        root = response.selector.root
        if not hasattr(root, "iter"):
            return
        base = get_base_url(response)
        seen_check = self._seen_check()
        stats = self.crawler.stats
        extracted = skipped = dropped = 0
        for element in root.iter("a", "area"):
            href = element.get("href")
            if not href:
                continue
            href = href.strip()
            if href[:11].lower().startswith(_SKIP_SCHEMES):
                dropped += 1
                continue
            try:
                canonical = normalize_url(href, base=base, policy=self.policy)
            except InvalidUrl:
                dropped += 1
                continue
            if canonical_host(canonical) not in self.hosts:
                continue
            extracted += 1
            if seen_check is not None and seen_check(fingerprint_url(canonical)):
                skipped += 1
                continue
            yield self._request(fetch_url(urljoin(base, href), canonical), canonical)
        if stats is not None:
            stats.inc_value("dedup/links_extracted", extracted)
            if skipped:
                stats.inc_value("dedup/links_skipped_seen", skipped)
            if dropped:
                stats.inc_value("dedup/links_not_http", dropped)

    def _seen_check(self) -> Any:
        """The dupefilter's read-only ``seen_fingerprint``, or None when early skip is off."""
        if not self.early_skip or self.crawler.engine is None:
            return None
        scheduler = self.crawler.engine.scheduler
        dupefilter = getattr(scheduler, "df", None)
        return getattr(dupefilter, "seen_fingerprint", None)

    def _request(self, url: str, canonical: str) -> Request:
        return Request(
            url,
            callback=self.parse,
            errback=self.on_error,
            meta={"canonical_url": canonical},
        )

    # --- helpers ----------------------------------------------------------------------------

    def _canonical(self, url: str) -> str:
        try:
            return normalize_url(url, policy=self.policy)
        except InvalidUrl:
            return url

    def _chain_fingerprints(self, response: Response) -> list[str]:
        """Hex fingerprints of the final request and of every URL it was redirected from."""
        fingerprinter = self.crawler.request_fingerprinter
        prints = [fingerprinter.fingerprint(response.request).hex()] if response.request else []
        for url in response.meta.get("redirect_urls", ()):
            prints.append(fingerprint_url(self._canonical(url)).hex())
        return prints

    def _finished(self, request: Request, response: Response | None) -> None:
        fps = [self.crawler.request_fingerprinter.fingerprint(request).hex()]
        if response is not None:
            fps += [
                fingerprint_url(self._canonical(u)).hex()
                for u in response.meta.get("redirect_urls", ())
            ]
        self.crawler.signals.send_catch_log(dedup_signals.request_finished, fingerprints=fps)


def fetch_url(url: str, canonical: str) -> str:
    """The URL to fetch for a link: as found, less the fragment, with an ASCII host.

    Scrapy escapes a non-ASCII host with IDNA 2003 (``faß.de`` becomes ``fass.de``, another
    host), while the canonical key uses UTS 46 non-transitional (``xn--fa-hia.de``), as browsers
    do. A non-ASCII URL therefore gets the canonical (punycode) host; the rest stays as found.
    """
    url = url.split("#", 1)[0]
    if url.isascii():
        return url
    return urlunsplit(urlsplit(url)._replace(netloc=urlsplit(canonical).netloc))


def _content_type(response: Response) -> str:
    raw = response.headers.get("Content-Type") or b""
    return raw.decode("latin-1").split(";", 1)[0].strip().lower()

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
  seen. The links of a page are checked in one batch (``seen_fingerprints``: one Redis round
  trip at most in the distributed profile, not one per link). The check is read-only; the
  dupefilter stays the one authority that records a URL as seen. Scrapy consumes the requests
  of several pages concurrently, so a link another page requested a moment ago may not be in
  the dupefilter yet: a link requested by a page not deeper than this one whose requests are
  still being consumed counts as seen too (not deeper: ``DEPTH_LIMIT`` may drop the deeper
  page's request; ``DEPTH_LIMIT`` is the only component between the spider and the scheduler
  that drops a request for where it was found rather than for its URL).
  Skipped links are counted as ``dedup/links_skipped_seen`` (a repeat of a link this page
  already requested counts there too: the dupefilter would filter it, so
  ``dupefilter/filtered + dedup/links_skipped_seen`` is the same with the skip on or off);
  with ``DUPEFILTER_DEBUG`` each skipped link is logged by the dupefilter's ``note_skipped``;
  the links to follow as ``dedup/links_extracted``.
* Every link is judged once by :class:`crawler.linkrules.LinkRules` (the stats keys of the
  links not followed: ``dedup/links_not_http``, ``dedup/links_offsite``,
  ``urlnorm/trap/<kind>``; the first of each logged at INFO), and its verdict (fingerprint or
  stats key) is memoized across pages by :class:`crawler.linkrules.LinkMemo`, exactly: a link
  spelled as on an earlier page is not normalized again unless it becomes a request. The
  requests the spider yields carry their canonical URL, so the middleware does not judge them
  again. Seeds are the user's choice: they are checked by :mod:`crawler.seeds` (http(s), a
  host), not by the trap limits.
* Canonical links: the page a response names canonical (a ``Link: <...>; rel="canonical"`` header,
  else the first ``<link rel="canonical" href>`` of the HTML) is resolved against the base URL and
  normalized. Naming another page of the crawl, it goes to the item as ``canonical_link`` (the
  dedup pipeline then stores that page rather than this one when both are duplicates) and, with
  ``DEDUP_CANONICAL``, is requested (through the dupefilter, so at most once). Ignored and
  counted: a page naming itself (``dedup/canonical/self``), a page off the crawl's hosts
  (``dedup/canonical/offsite``), a spider trap (``dedup/canonical/trap``), an unusable URL
  (``dedup/canonical/invalid``); a named page that fails or answers with an error status is
  counted as ``dedup/canonical/missing``. Pages naming another page: ``dedup/canonical/named``.
* One :class:`~crawler.items.PageItem` per HTML response; other responses (and failures) send
  :data:`crawler.signals.request_finished` so the JOBDIR journal knows they are done.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from parsel import Selector as ParselSelector
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.response import get_base_url

from crawler import config, defaults
from crawler import signals as dedup_signals
from crawler.dupefilter import early_skip_of
from crawler.fingerprint import canonical_url_of, chain_fingerprints, fingerprint_url
from crawler.items import PageItem
from crawler.linkrules import (
    NOT_HTTP,
    OFFSITE,
    SKIP_SCHEMES,
    TRAP,
    DropNotes,
    LinkMemo,
    LinkRules,
    fetch_url,
    memo_table,
)
from crawler.seeds import seeds_from_args
from crawler.text import extract, is_binary, media_type
from crawler.urlnorm import UrlPolicy, normalize_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from crawler.config import SettingsLike

logger = logging.getLogger(__name__)


def spider_settings(settings: SettingsLike) -> tuple[bool, bool]:
    """``(DEDUP_EARLY_SKIP, DEDUP_CANONICAL)``, checked (SettingError); the spider's other
    settings are its :class:`~crawler.linkrules.LinkRules`' and ``DropNotes``'."""
    return (config.get_bool(settings, "DEDUP_EARLY_SKIP", defaults.DEDUP_EARLY_SKIP),
            config.get_bool(settings, "DEDUP_CANONICAL", defaults.DEDUP_CANONICAL))


class WebSpider(Spider):
    name = "web"
    # One item per response: parallel item processing per response buys nothing, and Scrapy
    # 2.19 starts CONCURRENT_ITEMS asyncio tasks for every response whatever it yields (100 by
    # default: the largest own-time cost of a crawl). ``-s CONCURRENT_ITEMS=N`` still wins.
    custom_settings = {"CONCURRENT_ITEMS": 1}

    def __init__(self, seeds: str | None = None, urls: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seeds = seeds_from_args(seeds=seeds, urls=urls)
        self.hosts = self.seeds.hosts
        self.allowed_domains = sorted(self.hosts)
        self.rules = LinkRules(hosts=frozenset(self.hosts))
        self.notes = DropNotes()
        self.early_skip = True
        self.prefer_canonical = defaults.DEDUP_CANONICAL
        self.link_memo = LinkMemo()
        # fingerprint -> depth of the page requesting it, while that page's output is consumed
        self._requesting: dict[bytes, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> WebSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.rules = LinkRules.from_settings(crawler.settings, hosts=spider.hosts)
        spider.seeds = spider.seeds.keyed(spider.policy)
        spider.early_skip, spider.prefer_canonical = spider_settings(crawler.settings)
        spider.notes = DropNotes.from_settings(crawler.settings)
        return spider

    @property
    def policy(self) -> UrlPolicy:
        """The crawl's URL policy (its link rules')."""
        return self.rules.policy

    async def start(self) -> AsyncIterator[Request]:
        for url, canonical in zip(self.seeds.urls, self.seeds.canonical, strict=True):
            yield self._request(fetch_url(url, canonical), canonical)

    # --- responses --------------------------------------------------------------------------

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            if response.request is not None:
                self._finished(response.request, response)
            return
        binary = is_binary(response.body)
        root = None if binary else html_tree(response)
        canonical = (canonical_url_of(response.request, self.policy) if response.request
                     else None) or response.url  # fmt: skip
        names = None
        if root is not None:
            yield from self._links(response, root)
            named = self._canonical_link(response, root, canonical)
            if named is not None:
                names, request = named
                if request is not None:
                    yield request
        yield self._item(response, binary, root, canonical, names)

    def on_error(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        if request is not None:
            if request.meta.get(CANONICAL_TARGET_META):
                self._inc("dedup/canonical/missing")
            self._finished(request, getattr(failure.value, "response", None))

    def _inc(self, key: str) -> None:
        crawler = getattr(self, "crawler", None)
        if crawler is not None and crawler.stats is not None:
            crawler.stats.inc_value(key)

    def _canonical_link(
        self, response: HtmlResponse, root: Any, own: str
    ) -> tuple[str, Request | None] | None:
        """``(the normalized page the response names canonical, a request for it or None)``
        when it names another page of the crawl's hosts; None otherwise (counted)."""
        href = canonical_href(response, root)
        if href is None:
            return None
        base = get_base_url(response)
        target, stat = self.rules.judge(href, base)  # as for a link: scope and normal form
        if stat is not None or target is None:
            self._inc(f"dedup/canonical/{_canonical_reason(stat)}")
            return None
        if target == own:
            self._inc("dedup/canonical/self")
            return None
        self._inc("dedup/canonical/named")
        request = None
        if self.prefer_canonical:
            request = self._request(fetch_url(urljoin(base, href), target), target)
            request.meta[CANONICAL_TARGET_META] = True
        return target, request

    def _item(self, response: HtmlResponse, binary: bool, root: Any, canonical: str,
              names: str | None = None) -> PageItem:
        html = "" if binary else response.text
        title = ""
        if root is not None and hasattr(root, "findtext"):
            title = " ".join((root.findtext(".//title") or "").split())
        # One parse for the visible text and the fingerprint blocks: the dedup pipeline reads
        # ``blocks`` instead of parsing the HTML again.
        page = None if binary else extract(html, response.url, tokenize=False)
        referer = response.request.headers.get("Referer") if response.request else None
        return PageItem(
            url=response.url,
            status=response.status,
            content_type=media_type(response.headers.get("Content-Type")),
            title=title,
            text="" if page is None else page.text,
            html=html,
            depth=int(response.meta.get("depth", 0)),
            referer=referer.decode("latin-1") if referer else None,
            fetched_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            canonical_url=canonical,
            canonical_link=names,
            fingerprints=self._chain_fingerprints(response),
            lease=response.meta.get(dedup_signals.LEASE_META),
            encoding=None if binary else response.encoding,
            binary=binary,
            blocks=None if page is None else page.blocks,
        )

    # --- links ------------------------------------------------------------------------------

    def _links(self, response: HtmlResponse, root: Any) -> Iterator[Request]:
        if not hasattr(root, "iter"):
            return
        base = get_base_url(response)
        links, dropped = self._extract(root, base)
        seen_check, note_skipped = self._seen_check()
        depth = int(response.meta.get("depth", 0))
        new = None if seen_check is None else self._unseen(links, seen_check, depth)
        mine = list(new or ())  # requested from this page: others skip them until it is done
        self._requesting.update(dict.fromkeys(mine, depth))
        skipped = 0
        try:
            for fp, href, canonical in links:
                if new is not None:
                    if fp not in new:  # seen, or requested already (module docstring)
                        skipped += 1
                        if note_skipped is not None:
                            note_skipped(urljoin(base, href), response.url)
                        continue
                    new.discard(fp)
                if canonical is None:  # a memo hit: normalized on an earlier page, not kept
                    canonical = normalize_url(href, base=base, policy=self.policy)
                yield self._request(fetch_url(urljoin(base, href), canonical), canonical)
        finally:
            for fp in mine:
                if self._requesting.get(fp) == depth:
                    del self._requesting[fp]
        self._count_links(len(links), skipped, dropped, base, response.url)

    def _extract(
        self, root: Any, base: str
    ) -> tuple[list[tuple[bytes, str, str | None]], dict[str, list[str]]]:
        """``([(fingerprint, href, canonical or None)], {stats key: [href]})``: the links of a
        page to follow in page order, and those not followed by :class:`LinkRules`' reason."""
        # One loop, no per-link helper calls: this runs for every link of every page.
        absolute, rooted, relative = self.link_memo.tables(base)
        links: list[tuple[bytes, str, str | None]] = []
        dropped: dict[str, list[str]] = {}
        for element in root.iter("a", "area"):
            href = element.get("href")
            if not href:
                continue
            href = href.strip()
            if href[:11].lower().startswith(SKIP_SCHEMES):
                dropped.setdefault(NOT_HTTP, []).append(href)
                continue
            table = memo_table(href, absolute, rooted, relative)
            verdict = table.get(href) if table is not None else None
            canonical = None
            if verdict is None:
                canonical, stat = self.rules.judge(href, base)
                verdict = fingerprint_url(canonical) if canonical and not stat else stat or NOT_HTTP
                if table is not None:
                    self.link_memo.remember(table, href, verdict)
            if isinstance(verdict, str):  # the stats key of a reason not to follow it
                dropped.setdefault(verdict, []).append(href)
                continue
            links.append((verdict, href, canonical))
        return links, dropped

    def _unseen(
        self, links: list[tuple[bytes, str, str | None]], seen_check: Any, depth: int
    ) -> set[bytes]:
        """Early skip: the fingerprints of ``links`` neither held by the dupefilter (asked in
        one batch: one Redis round trip at most on a shared seen set) nor being requested by
        a page at most as deep whose requests are not all scheduled yet."""
        requesting = self._requesting
        unique = [fp for fp in dict.fromkeys(fp for fp, _, _ in links)
                  if requesting.get(fp, depth + 1) > depth]  # fmt: skip
        return {fp for fp, seen in zip(unique, seen_check(unique), strict=True) if not seen}

    def _count_links(self, followed: int, skipped: int, dropped: dict[str, list[str]],
                     base: str, referer: str) -> None:
        stats = self.crawler.stats
        if stats is None:
            return
        stats.inc_value("dedup/links_extracted", followed)
        if skipped:
            stats.inc_value("dedup/links_skipped_seen", skipped)
        for stat, hrefs in dropped.items():
            self.notes.note(stats, stat, hrefs, base, referer, extra={"spider": self})

    def _seen_check(self) -> tuple[Any, Any]:
        """The dupefilter's read-only batch check ``seen_fingerprints`` (None when early skip
        is off or the dupefilter does not keep the :class:`~crawler.dupefilter.EarlySkip`
        contract) and, with ``DUPEFILTER_DEBUG``, its ``note_skipped`` logger (else None)."""
        if not self.early_skip or self.crawler.engine is None:
            return None, None
        dupefilter = early_skip_of(self.crawler.engine.scheduler)
        if dupefilter is None:
            return None, None
        return dupefilter.seen_fingerprints, dupefilter.note_skipped if dupefilter.debug else None

    def _request(self, url: str, canonical: str) -> Request:
        return Request(
            url,
            callback=self.parse,
            errback=self.on_error,
            meta={"canonical_url": canonical},
        )

    # --- helpers ----------------------------------------------------------------------------

    def _chain_fingerprints(self, response: Response) -> list[str]:
        """Hex fingerprints of the final request and of every URL it was redirected from."""
        if response.request is None:
            return []
        return chain_fingerprints(response.request, response.meta.get("redirect_urls", ()),
                                  self.crawler.request_fingerprinter, self.policy)

    def _finished(self, request: Request, response: Response | None) -> None:
        redirects = response.meta.get("redirect_urls", ()) if response is not None else ()
        fps = chain_fingerprints(request, redirects, self.crawler.request_fingerprinter,
                                 self.policy)
        lease = request.meta.get(dedup_signals.LEASE_META)
        self.crawler.signals.send_catch_log(dedup_signals.request_finished, fingerprints=fps,
                                            leases=[lease] if lease else [])  # fmt: skip



def _canonical_reason(stat: str | None) -> str:
    """``dedup/canonical/<reason>`` of a named canonical page the link rules do not follow."""
    if stat == OFFSITE:
        return "offsite"
    return "trap" if stat and stat.startswith(TRAP) else "invalid"


_LINK_HEADER = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]*)*)")
_REL_CANONICAL = re.compile(r"""(?:^|;)\s*rel\s*=\s*"?([^";]*)"?""", re.IGNORECASE)
#: ``request.meta`` key of a request for a page another page names canonical.
CANONICAL_TARGET_META = "dedup_canonical_target"


def canonical_href(response: Response, root: Any) -> str | None:
    """The href a response names canonical, as written: the ``Link`` header's
    ``rel="canonical"`` target, else the first ``<link rel="canonical" href>`` in the HTML's
    head (rel tokens compared case-insensitively); None when it names none."""
    for raw in response.headers.getlist("Link"):
        value = raw.decode("latin-1")
        for target, params in _LINK_HEADER.findall(value):
            rel = _REL_CANONICAL.search(params)
            if rel and "canonical" in rel.group(1).lower().split() and target.strip():
                return target.strip()
    if not hasattr(root, "iter"):
        return None
    for link in root.iter("link"):
        tokens = (link.get("rel") or "").lower().split()
        href = (link.get("href") or "").strip()
        if "canonical" in tokens and href:
            return href
    return None


def html_tree(response: HtmlResponse) -> Any:
    """The lxml root of ``response``, parsed exactly as ``response.selector`` parses it.

    Not cached on the response: ``response.selector`` keeps the selector on the response and
    the selector keeps the response, a reference cycle that holds each page's tree (C memory)
    until the cyclic garbage collector runs, which measured ~200 pages' trees at a time
    (+20 MiB RSS on the 5,000-page bench).
    """
    return ParselSelector(text=response.text, type="html", base_url=get_base_url(response)).root

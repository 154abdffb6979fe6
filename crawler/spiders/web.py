"""The seed-list spider: ``scrapy crawl web -a seeds=FILE`` (or ``-a urls=URL1,URL2``).

Behaviour:

* Seeds are read by :mod:`crawler.urls.seeds` (the ``crawl`` command has already refused a bad file)
  and scheduled *through* the dupefilter, so a seed linked from its own page is fetched once.
* With no seeds, in the distributed profile, the seeds come from a Redis key
  (``redis-cli lpush web:start_urls URL``, scrapy-redis's convention): the worker waits for
  them and :mod:`crawler.cluster.startlist` hands them to :meth:`WebSpider.add_seeds`, which
  widens the scope as they arrive.
* The crawl stays within its :class:`~crawler.urls.scope.Scope` (``SCOPE``: the seeds' exact hosts
  and ports by default, IDN hosts in punycode), for links here and for redirects in
  :mod:`crawler.middlewares.scope` (no ``allowed_domains``: Scrapy's rule differs).
* Links come from ``<a href>`` and ``<area href>`` of HTML responses, resolved against
  ``<base href>``. Each link is normalized once; the canonical URL travels in
  ``request.meta[CANONICAL_URL]`` (:mod:`crawler.meta`) to the fingerprinter and to storage.
* Early skip (``DEDUP_EARLY_SKIP``, default on): a link whose fingerprint the dupefilter already
  holds never becomes a ``Request`` — the costly part of a crawl where most links are already
  seen. The links of a page are checked in one batch (one Redis round trip at most in the
  distributed profile, not one per link, sent on the event loop's own connection and awaited:
  ``seen_fingerprints_soon``; the links asked about count as requested from the page while
  Redis answers, below). The check is read-only; the dupefilter stays the one authority that
  records a URL as seen. Scrapy consumes the requests of several pages concurrently, so a link
  another page requested a moment ago may not be in the dupefilter yet: a link requested by a
  page not deeper than this one whose requests are still being consumed counts as seen too
  (not deeper: ``DEPTH_LIMIT`` may drop the deeper page's request; ``DEPTH_LIMIT`` is the only
  component between the spider and the scheduler that drops a request for where it was found
  rather than for its URL).
  Skipped links are counted as ``dedup/links_skipped_seen`` (a repeat of a link this page
  already requested counts there too: the dupefilter would filter it, so
  ``dupefilter/filtered + dedup/links_skipped_seen`` is the same with the skip on or off);
  with ``DUPEFILTER_DEBUG`` each skipped link is logged by the dupefilter's ``note_skipped``;
  the links to follow as ``dedup/links_extracted``.
* Every link is judged once by :class:`crawler.urls.linkrules.LinkRules` (the stats keys of the
  links not followed: ``dedup/links_not_http``, ``dedup/links_offsite``,
  ``urlnorm/trap/<kind>``; the first of each logged at INFO), and its verdict (fingerprint or
  stats key) is memoized across pages by :class:`crawler.urls.linkrules.LinkMemo`, exactly: a link
  spelled as on an earlier page is not normalized again unless it becomes a request. The
  requests the spider yields carry their canonical URL, so the middleware does not judge them
  again. Seeds are the user's choice: they are checked by :mod:`crawler.urls.seeds` (http(s), a
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
* Decided before its links (:mod:`crawler.urls.traps`): ``parse`` asks the crawl's content
  decider (:func:`crawler.dedup.verdict.content_decider`, found once the spider opens) for the
  page's fate before it yields the page's links and puts the answer on the item
  (``PageItem.verdict``: the near-duplicate pipeline acts on it), so a duplicate's links are not
  followed (``TRAP_FOLLOW_LINKS_OF``) and a page's decision teaches the parameters its host
  ignores (folded out of its links from then on); the links are still yielded before the item,
  so they reach the scheduler before the page reaches storage and a page is never committed
  before the links it promised. Links over a spent host or path budget are not followed
  (``urlnorm/trap/host_pages``, ``.../query_variants``; the budgets count the requests the
  scheduler took, through ``request_scheduled`` and ``request_dropped``; a ``JOBDIR`` resume's
  owed requests all at once when it opens, :func:`crawler.scheduler.count_owed`). At most
  ``LINKS_PER_PAGE_MAX`` links and ``PAGE_MAX_PARSE_CHARS`` characters of a page are read
  (:mod:`crawler.urls.pagebounds`).
* Soft-404 probes (``TRAP_SOFT404_PROBE``, :mod:`crawler.spiders.probes`): the first page of
  an origin this process gets starts the download of a random path no page links (by the
  worker that holds the host, in the distributed profile); its 200 answer teaches the dedup
  pipeline the origin's soft 404, and the origin's later pages wait for the probe so that they
  are measured against it.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from inspect import isawaitable
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from scrapy import Request, Spider, signals
from scrapy.http import HtmlResponse
from scrapy.utils.response import get_base_url

from crawler import config, defaults, meta
from crawler import signals as dedup_signals
from crawler.cluster.startlist import takes_start_list
from crawler.content.text import ParsedPage, is_binary, media_type
from crawler.dedup.verdict import content_decider
from crawler.dupefilter import early_skip_of
from crawler.exceptions import HostGivenUp
from crawler.items import PageItem
from crawler.spiders.probes import Soft404Probes
from crawler.urls.fingerprint import canonical_url_of, chain_fingerprints, fingerprint_url
from crawler.urls.linkrules import (
    ABSOLUTE_HREF,
    NOT_HTTP,
    OFFSITE,
    SKIP_SCHEMES,
    TRAP,
    DropNotes,
    LinkMemo,
    LinkRules,
    MemoTable,
    fetch_url,
)
from crawler.urls.pagebounds import PageBounds
from crawler.urls.scope import Scope
from crawler.urls.seeds import Seeds, seeds_from_args
from crawler.urls.traps import TrapRules, TrapSettings
from crawler.urls.urlnorm import InvalidUrl, UrlPolicy, normalize_url, url_host

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from crawler.config import SettingsLike
    from crawler.dedup.decider import ContentDecider
    from crawler.vocab import Drop

logger = logging.getLogger(__name__)


@dataclass
class PageLinks:
    """A page's links as :meth:`WebSpider._extract` judged them (``(fingerprint, href,
    canonical or None)`` to follow, and ``dropped`` by stats key), its base URL and depth;
    ``new``: with early skip, the fingerprints neither seen nor being requested (None: early
    skip off); ``note_skipped``: the dupefilter's skipped-link logger, with its debug on."""

    base: str
    links: list[tuple[bytes, str, str | None]]
    dropped: dict[str, list[str]]
    depth: int
    note_skipped: Any
    new: set[bytes] | None = None


@dataclass(frozen=True)
class SpiderSettings:
    """The spider's own settings, checked (SettingError); its other settings are its
    :class:`~crawler.urls.linkrules.LinkRules`' and ``DropNotes``'."""

    early_skip: bool = defaults.DEDUP_EARLY_SKIP  # DEDUP_EARLY_SKIP
    prefer_canonical: bool = defaults.DEDUP_CANONICAL  # DEDUP_CANONICAL

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> SpiderSettings:
        return cls(config.get_bool(settings, "DEDUP_EARLY_SKIP", defaults.DEDUP_EARLY_SKIP),
                   config.get_bool(settings, "DEDUP_CANONICAL", defaults.DEDUP_CANONICAL))


class WebSpider(Spider):
    name = "web"
    # One item per response: parallel item processing per response buys nothing, and Scrapy
    # 2.19 starts CONCURRENT_ITEMS asyncio tasks for every response whatever it yields (100 by
    # default: the largest own-time cost of a crawl). ``-s CONCURRENT_ITEMS=N`` still wins.
    custom_settings = {"CONCURRENT_ITEMS": 1}

    def __init__(self, seeds: str | None = None, urls: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # No seeds: the distributed profile takes them from Redis (from_crawler checks).
        self.seeds = seeds_from_args(seeds=seeds, urls=urls) if seeds or urls else Seeds()
        self.reads_start_list = not self.seeds.urls
        # No allowed_domains: crawler.middlewares.scope applies this scope to redirects too.
        self.scope = Scope(self.seeds.canonical)
        self.rules = LinkRules(scope=self.scope)
        self.notes = DropNotes()
        self.early_skip = True
        self.prefer_canonical = defaults.DEDUP_CANONICAL
        self.link_memo = LinkMemo()
        self.trap_rules = TrapRules()
        self.probes: Soft404Probes | None = None
        self.bounds = PageBounds()
        self.decider: ContentDecider | None = None  # the crawl's, found when the spider opens
        # fingerprint -> depth of the page requesting it, while that page's output is consumed
        self._requesting: dict[bytes, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> WebSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if spider.reads_start_list and not takes_start_list(crawler.settings):
            seeds_from_args()  # raises SeedError: no seeds given
        spider.scope = Scope.from_settings(crawler.settings, spider.seeds.canonical)
        spider.scope.listeners.append(spider.link_memo.clear)  # a host adopted: verdicts change
        spider.rules = LinkRules.from_settings(crawler.settings, scope=spider.scope)
        spider.seeds = spider.seeds.keyed(spider.policy)
        options = SpiderSettings.from_settings(crawler.settings)
        spider.early_skip, spider.prefer_canonical = options.early_skip, options.prefer_canonical
        spider.notes = DropNotes.from_settings(crawler.settings)
        spider.bounds = PageBounds.from_settings(crawler.settings)
        spider.trap_rules = TrapRules(TrapSettings.from_settings(crawler.settings), spider._inc)
        spider.probes = Soft404Probes(crawler, spider.trap_rules, spider._teach_soft404,
                                      spider._inc)
        crawler.signals.connect(spider.request_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(spider.request_dropped, signal=signals.request_dropped)
        crawler.signals.connect(spider.spider_opened, signal=signals.spider_opened)
        return spider

    def spider_opened(self, spider: Any = None) -> None:
        """The engine exists: find the crawl's content decider (None: no dedup pipeline, every
        page's links are followed)."""
        self.decider = content_decider(self.crawler)

    @property
    def policy(self) -> UrlPolicy:
        """The crawl's URL policy (its link rules')."""
        return self.rules.policy

    async def start(self) -> AsyncIterator[Request]:
        for url, canonical in zip(self.seeds.urls, self.seeds.canonical, strict=True):
            yield self._request(fetch_url(url, canonical), canonical)

    def add_seeds(self, seeds: Seeds) -> list[Request]:
        """Seeds arriving while the crawl runs (the start list of the distributed profile,
        :mod:`crawler.cluster.startlist`): keyed by the crawl's policy, added to the seeds
        and the scope; their requests, for the engine to schedule."""
        seeds = seeds.keyed(self.policy)
        self.seeds.urls += seeds.urls
        self.seeds.canonical += seeds.canonical
        self.widen(seeds.canonical)
        return [self._request(fetch_url(url, canonical), canonical)
                for url, canonical in zip(seeds.urls, seeds.canonical, strict=True)]

    def widen(self, canonical: list[str]) -> int:
        """Bring more seeds' sites (canonical URLs) into the scope; how many were new."""
        return self.scope.add_seeds(canonical)

    # --- traps (crawler.urls.traps) ---------------------------------------------------------------

    async def _decide(self, item: PageItem) -> Drop | None:
        """Decide the page with the crawl's content decider and put the verdict on the item
        (the pipeline acts on it); its Drop, None when kept or when no decider runs."""
        if self.decider is None:
            return None
        item.verdict = await self.decider.decide(item)
        return item.verdict.drop

    def _follows(self, drop: Drop | None, canonical: str, hops: int) -> int | None:
        """The duplicate hops of the page ``canonical``, decided ``drop`` and reached through
        ``hops`` duplicates in a row, when its links are followed, else None
        (:meth:`TrapRules.follows`); the parameters its decision teaches are folded out of its
        host's URLs from now on."""
        original = None
        if drop is not None:
            with contextlib.suppress(InvalidUrl):
                original = normalize_url(drop.duplicate_of, policy=self.policy)
        for name in self.trap_rules.learn(drop, canonical, original):
            host = url_host(canonical)
            self.rules.ignore(host, name)
            self.link_memo.clear()  # verdicts of that host's links change
            ignored = ",".join(sorted(self.trap_rules.learner.learned[host]))
            self.crawler.stats.set_value(f"{IGNORED_PARAMS_STAT}{host}", ignored)
        return self.trap_rules.follows(drop, canonical, hops)

    def _teach_soft404(self, response: HtmlResponse) -> None:
        if self.decider is not None and not is_binary(response.body):
            root = html_tree(response, self.bounds)
            item = self._item(response, False, root, response.url)
            self.decider.soft404(item)

    def request_scheduled(self, request: Request, spider: Any = None) -> None:
        """Count a scheduled request against the crawl budgets (:class:`CrawlBudget`); one the
        JOBDIR journal owed (meta ``RESUMED``) was counted at open (``count_owed``)."""
        canonical = request.meta.get(meta.CANONICAL_URL)
        if canonical and not request.dont_filter and not request.meta.get(meta.RESUMED):
            self.trap_rules.budget.count(canonical)

    def request_dropped(self, request: Request, spider: Any = None) -> None:
        """A request the scheduler refused after all (a duplicate): not counted."""
        canonical = request.meta.get(meta.CANONICAL_URL)
        if canonical and not request.dont_filter:
            self.trap_rules.budget.count(canonical, -1)

    # --- responses --------------------------------------------------------------------------

    async def parse(self, response: Response, **kwargs: Any) -> AsyncIterator[Any]:
        """The page's item, after its links (module doc): the page is decided first, so the
        links of a duplicate are not followed (:mod:`crawler.urls.traps`); the links go to the
        scheduler before the item goes to storage, so a page is never committed before the
        links it promised."""
        if not isinstance(response, HtmlResponse):
            if response.request is not None:
                self._finished(response.request, response)
            return
        binary = is_binary(response.body)
        root = None if binary else html_tree(response, self.bounds)
        canonical = (canonical_url_of(response.request, self.policy) if response.request
                     else None) or response.url  # fmt: skip
        names, named_request = None, None
        if root is not None:
            names, named_request = self._canonical_link(response, root, canonical) or (None, None)
        item = self._item(response, binary, root, canonical, names)
        if self.probes is not None:  # built with the crawler (from_crawler)
            self.probes.start([canonical])
            if item.depth:  # a seed is never a soft 404
                await self.probes.answered(canonical)
        drop = await self._decide(item)
        hops = self._follows(drop, canonical, int(response.meta.get(meta.DUPLICATE_HOPS, 0)))
        if root is not None and hops is not None:
            page, answers = self._page_links(response, root, awaited=True)
            if answers is not None:  # a shared seen set asked on the event loop's connection
                page.new = await answers
            for request in self._follow(response, page):
                if hops:
                    request.meta[meta.DUPLICATE_HOPS] = hops
                yield request
        if named_request is not None:
            yield named_request
        yield item

    def on_error(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        if request is not None:
            if request.meta.get(meta.CANONICAL_TARGET):
                self._inc("dedup/canonical/missing")
            if isinstance(failure.value, HostGivenUp) and failure.value.owed:
                return  # its host was down: owed in the JOBDIR journal, a resume asks again
            self._finished(request, getattr(failure.value, "response", None))

    def _inc(self, key: str, count: int = 1) -> None:
        crawler = getattr(self, "crawler", None)
        if crawler is not None and crawler.stats is not None:
            crawler.stats.inc_value(key, count)

    def _links_capped(self, rest: Iterator[str], base: str) -> None:
        """The link just met and those left in ``rest`` (hrefs, not judged) cut by
        LINKS_PER_PAGE_MAX: counted in ``dedup/links_capped``, the first page logged."""
        cut = 1 + sum(1 for href in rest if href)
        self.bounds.note_capped(base, cut, extra={"spider": self})
        self._inc("dedup/links_capped", cut)

    def _canonical_link(
        self, response: HtmlResponse, root: ParsedPage, own: str
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
            request.meta[meta.CANONICAL_TARGET] = True
        return target, request

    def _item(self, response: HtmlResponse, binary: bool, root: ParsedPage | None,
              canonical: str, names: str | None = None) -> PageItem:  # fmt: skip
        html = "" if binary else response.text
        bounds = self.bounds
        if len(html) > bounds.parse_chars > 0:  # the links and text come from the first part
            bounds.note_truncated(response.url, len(html), extra={"spider": self})
            self._inc("dedup/page_truncated")
        # The one parse of the page (its links were read from it already) gives the title, the
        # visible text and the fingerprint blocks: the dedup pipeline reads ``blocks`` instead
        # of parsing the HTML again.
        page = None if root is None else root.extract(response.url, tokenize=False)
        title = "" if page is None else page.title
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
            lease=response.meta.get(meta.LEASE),
            encoding=None if binary else response.encoding,
            binary=binary,
            blocks=None if page is None else page.blocks,
        )

    # --- links ------------------------------------------------------------------------------

    def _links(self, response: HtmlResponse, root: ParsedPage | None) -> Iterator[Request]:
        """The requests of a page's links to follow (:meth:`parse`'s, the seen set asked on
        the caller's thread)."""
        if root is None:
            return
        page, _ = self._page_links(response, root, awaited=False)
        yield from self._follow(response, page)

    def _page_links(self, response: HtmlResponse, root: ParsedPage, awaited: bool,
                    ) -> tuple[PageLinks, Awaitable[set[bytes]] | None]:
        """A page's links and, with early skip, those not seen; when ``awaited`` and a shared
        seen set must be asked, the unseen set comes as an awaitable instead (the caller
        sets ``new`` from it before :meth:`_follow`)."""
        base = get_base_url(response)
        links, dropped = self._extract(root, base)
        seen_check, note_skipped = self._seen_check(awaited)
        depth = int(response.meta.get("depth", 0))
        page = PageLinks(base, links, dropped, depth, note_skipped)
        if seen_check is None:
            return page, None
        new = self._unseen(links, seen_check, depth)
        if isawaitable(new):
            return page, new
        page.new = new
        return page, None

    def _follow(self, response: HtmlResponse, page: PageLinks) -> Iterator[Request]:
        """The requests of ``page``'s links: those early skip did not skip, within their
        budgets (module docstring)."""
        base, new, depth, note_skipped = page.base, page.new, page.depth, page.note_skipped
        skipped = 0
        # requested from this page: others skip them until it is done
        with self._claimed(list(new or ()), depth):
            for fp, href, canonical in page.links:
                if new is not None:
                    if fp not in new:  # seen, or requested already (module docstring)
                        skipped += 1
                        if note_skipped is not None:
                            note_skipped(urljoin(base, href), response.url)
                        continue
                    new.discard(fp)
                if canonical is None:  # a memo hit: normalized on an earlier page, not kept
                    canonical = self.rules.normalize(href, base)
                over = self.trap_rules.budget.refuse(canonical)
                if over is not None:  # a budget of its host or path is spent
                    page.dropped.setdefault(over, []).append(href)
                    continue
                yield self._request(fetch_url(urljoin(base, href), canonical), canonical)
        self._count_links(len(page.links), skipped, page.dropped, base, response.url)

    def _extract(
        self, root: ParsedPage, base: str
    ) -> tuple[list[tuple[bytes, str, str | None]], dict[str, list[str]]]:
        """``([(fingerprint, href, canonical or None)], {stats key: [href]})``: the links of a
        page to follow in page order, and those not followed by :class:`LinkRules`' reason.
        Only the first ``LINKS_PER_PAGE_MAX`` links are judged (:mod:`crawler.urls.pagebounds`)."""
        # One loop, no per-link helper calls: this runs for every link of every page. The
        # hrefs were read from the page's one parse (strings).
        memo = self.link_memo
        absolute, rooted, relative = memo.tables(base)
        links: list[tuple[bytes, str, str | None]] = []
        dropped: dict[str, list[str]] = {}
        budget = self.bounds.links_max or -1  # -1: no cap
        hrefs = iter(root.hrefs)
        for href in hrefs:
            if not href:
                continue
            if not budget:
                self._links_capped(hrefs, base)
                break
            budget -= 1
            href = href.strip()
            # memo_table() inlined (a call per link costs; test_spider_links compares both)
            if href.startswith(ABSOLUTE_HREF):
                table: MemoTable | None = absolute
            elif href[:1] == "/":
                table = rooted
            elif href and href[0] > " " and href[0] not in "?#":
                table = relative
            else:
                table = None
            # A memo hit was judged on an earlier page, so it passed the scheme check then.
            verdict = table.get(href) if table is not None else None
            canonical = None
            if verdict is None:
                if href[:11].lower().startswith(SKIP_SCHEMES):
                    dropped.setdefault(NOT_HTTP, []).append(href)
                    continue
                canonical, stat = self.rules.judge(href, base)
                verdict = fingerprint_url(canonical) if canonical and not stat else stat or NOT_HTTP
                if table is not None:
                    memo.remember(table, href, verdict)
            if isinstance(verdict, str):  # the stats key of a reason not to follow it
                dropped.setdefault(verdict, []).append(href)
                continue
            links.append((verdict, href, canonical))
        return links, dropped

    def _unseen(self, links: list[tuple[bytes, str, str | None]], seen_check: Any, depth: int,
                ) -> set[bytes] | Awaitable[set[bytes]]:
        """Early skip: the fingerprints of ``links`` neither held by the dupefilter (asked in
        one batch: one Redis round trip at most on a shared seen set) nor being requested by
        a page at most as deep whose requests are not all scheduled yet; an awaitable of them
        when ``seen_check`` answers with one (a shared seen set asked on the event loop)."""
        requesting = self._requesting
        unique = [fp for fp in dict.fromkeys(fp for fp, _, _ in links)
                  if requesting.get(fp, depth + 1) > depth]  # fmt: skip
        answers = seen_check(unique)
        if isawaitable(answers):
            return self._unseen_awaited(unique, answers, depth)
        return {fp for fp, seen in zip(unique, answers, strict=True) if not seen}

    async def _unseen_awaited(self, unique: list[bytes], answers: Awaitable[list[bool]],
                              depth: int) -> set[bytes]:  # fmt: skip
        """:meth:`_unseen` while the seen set answers: the links asked about count as being
        requested from this page meanwhile, so a page as deep (or deeper) that comes in the
        round trip skips them, as it would once this page requests them (the ones Redis
        says are seen it would skip anyway)."""
        with self._claimed([fp for fp in unique if fp not in self._requesting], depth):
            seen = await answers
        return {fp for fp, yes in zip(unique, seen, strict=True) if not yes}

    @contextlib.contextmanager
    def _claimed(self, fps: list[bytes], depth: int) -> Iterator[None]:
        """``fps`` count as being requested by a page at ``depth`` (early skip: module
        docstring) until the block ends; then those still claimed at that depth are let go."""
        requesting = self._requesting
        requesting.update(dict.fromkeys(fps, depth))
        try:
            yield
        finally:
            for fp in fps:
                if requesting.get(fp) == depth:
                    del requesting[fp]

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

    def _seen_check(self, awaited: bool = False) -> tuple[Any, Any]:
        """The dupefilter's read-only batch check ``seen_fingerprints`` (None when early skip
        is off or the dupefilter does not keep the :class:`~crawler.dupefilter.EarlySkip`
        contract, or no scheduler runs yet: :func:`~crawler.dupefilter.early_skip_of`;
        ``awaited``: its ``seen_fingerprints_soon`` when it has one) and, with
        ``DUPEFILTER_DEBUG``, its ``note_skipped`` logger (else None)."""
        dupefilter = early_skip_of(self.crawler) if self.early_skip else None
        if dupefilter is None:
            return None, None
        check = getattr(dupefilter, "seen_fingerprints_soon", None) if awaited else None
        return (check or dupefilter.seen_fingerprints,
                dupefilter.note_skipped if dupefilter.debug else None)  # fmt: skip

    def _request(self, url: str, canonical: str) -> Request:
        return Request(
            url,
            callback=self.parse,
            errback=self.on_error,
            meta={meta.CANONICAL_URL: canonical},
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
        lease = request.meta.get(meta.LEASE)
        self.crawler.signals.send_catch_log(dedup_signals.request_finished, fingerprints=fps,
                                            leases=[lease] if lease else [])  # fmt: skip



def _canonical_reason(stat: str | None) -> str:
    """``dedup/canonical/<reason>`` of a named canonical page the link rules do not follow."""
    if stat == OFFSITE:
        return "offsite"
    return "trap" if stat and stat.startswith(TRAP) else "invalid"


_LINK_HEADER = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]*)*)")
_REL_CANONICAL = re.compile(r"""(?:^|;)\s*rel\s*=\s*"?([^";]*)"?""", re.IGNORECASE)
#: Stats prefix of the query parameters learned per host (``urlnorm/ignored_params/<host>``:
#: their names, comma-separated); the report lists them.
IGNORED_PARAMS_STAT = "urlnorm/ignored_params/"


def canonical_href(response: Response, root: ParsedPage | None) -> str | None:
    """The href a response names canonical, as written: the ``Link`` header's
    ``rel="canonical"`` target, else the first ``<link rel="canonical" href>`` of the page
    (rel tokens compared case-insensitively); None when it names none."""
    for raw in response.headers.getlist("Link"):
        value = raw.decode("latin-1")
        for target, params in _LINK_HEADER.findall(value):
            rel = _REL_CANONICAL.search(params)
            if rel and "canonical" in rel.group(1).lower().split() and target.strip():
                return target.strip()
    if root is None:
        return None
    for tokens, target in root.links:
        target = target.strip()
        if "canonical" in tokens.lower().split() and target:
            return target
    return None


_DEFAULT_BOUNDS = PageBounds()


def html_tree(response: HtmlResponse, bounds: PageBounds = _DEFAULT_BOUNDS) -> ParsedPage:
    """The page's one parse (:class:`~crawler.content.text.ParsedPage`: its links read, its
    text extracted on demand), of the part ``bounds`` parses (``PAGE_MAX_PARSE_CHARS``,
    :meth:`PageBounds.cut <crawler.urls.pagebounds.PageBounds.cut>`).

    Not ``response.selector`` (lxml, through parsel): a second parse of every page, and a
    response<->selector reference cycle that held ~200 pages' trees until the cyclic garbage
    collector ran (+20 MiB RSS on the 5,000-page bench)."""
    return ParsedPage(bounds.cut(response.text))



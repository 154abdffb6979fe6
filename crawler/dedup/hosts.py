"""Per-host template heuristics around the index decision: :class:`HostTemplates`.

"Host" means a page's origin (:func:`crawler.content.template.template_key`).

* **Young host** (fewer than ``TemplateFilter.min_pages`` kept pages, its template unknown): a
  near match on the same host is confirmed only if the page adds little text of its own to it
  (:func:`crawler.content.template.young_distinct`); a same-host match kept elsewhere (by an earlier
  crawl, or by another worker of a distributed crawl) is compared the same way with its
  stored text (read in a thread; the page is kept when that text is gone). A page kept after
  all is recorded in the index (``dedup/template/young_distinct``,
  ``dedup/template/young_unverified``).
* **Learning and late drops**: a kept page teaches the template filter; fingerprints of
  earlier pages whose blocks became template are recomputed (``dedup/template/refreshed``)
  and checked again (:meth:`ContentIndex.check`, recording nothing): a page now within k of
  another kept page is a *late drop* (``dedup/template/refreshed_duplicate``): it leaves the
  index and storage moves it to ``dropped`` with ``rule = 'refreshed'``
  (:meth:`crawler.dedup.drops.DropWriter.demoted`); when it is the page being decided,
  that page is dropped at once instead. The others are re-recorded.
* **Warming** (distributed profile): the first page of a host a worker knows nothing of
  (taken over from another worker, or reclaimed from a dead one) first teaches the template
  filter the host's last :data:`WARM_PAGES` pages stored in this crawl
  (``dedup/template/warmed``), so the new owner fingerprints the host as the old one did.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.utils.asyncio import run_in_thread

from crawler.content.template import (
    KeptPage,
    block_hashes,
    line_blocks,
    origin_part,
    template_key,
    young_distinct,
)
from crawler.dedup.counts import Counts
from crawler.items import PageItem
from crawler.vocab import NEAR_DUPLICATE, REFRESHED_RULE, Drop, Match

if TYPE_CHECKING:
    from collections.abc import Callable

    from crawler.dedup.drops import DropWriter
    from crawler.dedup.outage import GuardedIndex
    from crawler.dedup.pages import Candidate, Fingerprinter
    from crawler.dedup.stored import StoredPages

#: Stored pages of a host that teach a new owner its template (at most; the newest).
WARM_PAGES = 32
#: What :meth:`HostTemplates._refresh` answers for a page whose new fingerprint stays kept.
STAYS = Match("", "", None, 0)
YOUNG_DISTINCT = "dedup/template/young_distinct"
YOUNG_UNVERIFIED = "dedup/template/young_unverified"


#: URL starts :meth:`HostTemplates.warm` remembers (emptied when full: then parsed again).
WARMED_ORIGINS_MAX = 100_000


class HostTemplates:
    """The template filter's part in the decision (module docstring). ``warm_since``: the
    start (epoch seconds) of the stored pages a new host owner learns from; None: no
    warming."""

    def __init__(self, fingerprinter: Fingerprinter, index: GuardedIndex, drops: DropWriter,
                 stored: StoredPages, counts: Counts | None = None) -> None:
        self.fingerprinter = fingerprinter
        self.templates = fingerprinter.templates
        self.index = index
        self.drops = drops
        self.stored = stored
        self.counts = counts or Counts()
        self.warm_since: float | None = None
        self._warmed: set[str] = set()
        self._warmed_origins: set[str] = set()  # URLs' starts up to their path (origin_part)
        # a person's rule keeps the page (canonical URL) beside its match: never a late drop
        self.protected: Callable[[str, Match], bool] = lambda canonical, match: False

    # --- young hosts ----------------------------------------------------------------------------
    def young_verdict(self, page: Candidate) -> str | None:
        """After the index matched ``page``: the stat to keep it anyway under (distinct from
        a recent kept page of its young host), else None. A same-host match this process does
        not remember is left to :meth:`stored_verdict` (``page.verify``)."""
        if not self._young_host_match(page):
            return None
        assert page.match is not None
        kept = self._recent(page.host, page.match.url)
        if kept is None:
            page.verify = True  # kept elsewhere (stored): compare with its stored text
            return None
        return YOUNG_DISTINCT if young_distinct(page.content, kept) else None

    @staticmethod
    def stored_verdict(page: Candidate, stored_text: str | None) -> str | None:
        """For a ``page.verify`` page: the stat to keep it anyway under, given its match's
        stored text (None: gone), else None."""
        if stored_text is None:
            return YOUNG_UNVERIFIED
        kept = KeptPage("", "", "", line_blocks(stored_text))
        return YOUNG_DISTINCT if young_distinct(line_blocks(page.text), kept) else None

    def _young_host_match(self, page: Candidate) -> bool:
        """A near match on the page's own host while that host's template is unknown."""
        match = page.match
        if self.templates is None or match is None or match.reason != NEAR_DUPLICATE:
            return False
        same_host = template_key(match.canonical_url or match.url) == page.host
        return same_host and self.templates.is_young(page.host)

    def _recent(self, host: str, url: str) -> KeptPage | None:
        recent = self.templates.recent(host) if self.templates is not None else []
        return next((k for k in recent if k.url == url), None)

    # --- learning and late drops ----------------------------------------------------------------
    def learn(self, host: str, hashes: list[int], kept: KeptPage) -> Match | None:
        """Teach the template filter a kept page; re-fingerprint the host's recent pages whose
        blocks became template. A re-fingerprinted page that now duplicates another kept page
        leaves the index and is moved to ``dropped`` (rule ``refreshed``); when that page is
        ``kept`` itself, its match is returned (the caller drops it)."""
        if self.templates is None:
            return None
        late = None
        for page in self.templates.learn(host, kept, hashes):
            match = self._refresh(page)
            if match is None:
                continue
            if match is not STAYS and self.protected(page.canonical_url, match):
                self.index.load([(page.url, page.canonical_url, page.content_hash,
                                  page.simhash)])  # back in the index: a rule keeps it
                match = STAYS
            if match is STAYS:  # a new fingerprint, still kept: storage hears of it
                self.drops.refingerprinted(page.url, page.simhash)
                continue
            self.templates.forget(host, page.url)  # out of the index: never re-recorded
            if page is kept:
                late = match
            else:
                self.drops.demoted(Drop(page.url, match.reason, match.url, match.distance,
                                        page.simhash, match.simhash, rule=REFRESHED_RULE))
        return late

    def forget(self, url: str) -> None:
        """The kept page at ``url`` was demoted: its host's template filter forgets it."""
        if self.templates is not None:
            self.templates.forget(template_key(url), url)

    def _refresh(self, page: KeptPage) -> Match | None:
        """Recompute a page's fingerprint; its match when it is a late drop now, :data:`STAYS`
        when its fingerprint changed and it stays kept, None when nothing changed."""
        simhash = self.fingerprinter.simhash(page.blocks)
        if simhash == page.simhash:
            return None
        page.simhash = simhash
        self.counts.inc("dedup/template/refreshed")
        match = self.index.recheck((page.url, page.canonical_url, page.content_hash, simhash))
        if match is None:
            return STAYS
        self.counts.inc("dedup/template/refreshed_duplicate")
        return match

    # --- warming --------------------------------------------------------------------------------
    async def warm(self, item: Any) -> None:
        """Distributed profile: the first page of a host this worker knows nothing of teaches
        the template filter the host's pages stored in this crawl (since ``warm_since``), so
        the worker fingerprints the host as its former owner did: a new owner starting young
        kept mirrors of pages the old owner had fingerprinted without the template (a
        duplicate group kept twice)."""
        if self.templates is None or not self.stored.enabled:
            return
        if type(item) is PageItem:  # every page asks: 0.3 µs, 4 with ItemAdapter and urlsplit
            url = item.canonical_url or item.url or ""
        else:
            adapter = ItemAdapter(item)
            url = adapter.get("canonical_url") or adapter.get("url") or ""
        origin = origin_part(url)
        if origin in self._warmed_origins:  # the usual page: its host seen (no URL parsing)
            return
        host = template_key(url)
        if len(self._warmed_origins) >= WARMED_ORIGINS_MAX:
            self._warmed_origins.clear()
        self._warmed_origins.add(origin)
        if host in self._warmed:
            return
        self._warmed.add(host)
        if not self.templates.is_young(host):
            return
        since = datetime.fromtimestamp(self.warm_since or 0, UTC)
        pages = await run_in_thread(self.stored.documents_of_origin, host, since, WARM_PAGES)
        for url, canonical_url, chash, simhash, text in pages:
            lines = [line for line in text.splitlines() if line.strip()]
            hashes = block_hashes(lines)
            kept = KeptPage(url, canonical_url, chash or "", list(zip(hashes, lines, strict=True)),
                            simhash)  # fmt: skip
            self.templates.learn(host, kept, hashes)  # their fingerprints stay as stored
        self.counts.inc("dedup/template/warmed", len(pages))

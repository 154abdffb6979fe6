"""The stored pages of a crawl as feed items: what ``scrapy crawl -o`` (with storage) and
``scrapy export`` both write, so the two feeds of one crawl hold the same items.

:func:`stored_items` reads the ``documents`` rows of the pages crawls stored
(:meth:`crawler.storage.PageReader.stored_pages`, oldest first) and turns each into a
:class:`~crawler.items.PageItem` (:func:`stored_item`): the feed's fields and serialization
(:data:`crawler.items.EXPORT_FIELDS`; SimHash as 16 hex digits through the item's field
serializer; ``fetched_at`` ISO 8601 UTC with microseconds, as the spider writes it; a missing
title or text as ``""``).

**``fingerprint_text``** is not stored: it is computed here from the stored ``text`` of the
pages exported together (:class:`SiteTemplates`). It is ``text`` without its site's template:
the lines (blocks) found on at least 3 of those pages of the same site (origin: scheme, host
and port), the rule the crawl's template learning uses
(:class:`crawler.content.template.TemplateFilter`). It leaves out the navigation, footer and other
chrome that repeats across a site. Limits: it is rebuilt from the stored text, not saved at crawl
time, so (1) a boilerplate region found on one page only (an ``aside`` the crawl cut from the HTML)
stays in, (2) the crawl fingerprinted each page with the template known *then* (and short or
numeric blocks may be left out of the SimHash), so the SimHash of ``fingerprint_text`` need not
equal ``simhash``, and (3) it depends on the pages exported: a site with fewer than 3 of them has
no template (the whole ``text``), and one worker's pages give a worker's template. A binary page
(no text, never fingerprinted) has None. Reading it costs a second pass over the stored texts; a
feed whose fields leave it out skips that pass.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from crawler.content.template import KeptPage, TemplateFilter, block_hashes, template_key
from crawler.items import PageItem

if TYPE_CHECKING:
    from crawler.storage import PageReader

#: Rows fetched from the database at a time.
BATCH = 1000


def stored_item(row: dict[str, Any], fingerprint_text: str | None = None,
                html: str = "") -> PageItem:
    """A ``documents`` row (fingerprints unsigned, as :class:`PageReader` reads them) as the
    feed item the crawl exported for it."""
    when = row.get("fetched_at")
    if isinstance(when, datetime):  # SQLite gives it naive: stored as UTC
        aware = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        when = aware.isoformat(timespec="microseconds")
    fields: dict[str, Any] = {  # as stored: a column an old database left NULL stays None
        "url": row["url"], "status": row.get("status"), "content_type": row.get("content_type"),
        "title": row.get("title") or "", "text": row.get("text") or "", "html": html,
        "depth": row.get("depth"), "referer": row.get("referer"), "fetched_at": when,
        "canonical_url": row.get("canonical_url") or row["url"],
        "content_hash": row.get("content_hash"), "simhash": row.get("simhash"),
        "encoding": row.get("encoding"), "canonical_link": row.get("canonical_link"),
        "fingerprint_text": fingerprint_text,
    }  # fmt: skip
    return PageItem(**fields)


class SiteTemplates:
    """Each site's template as a set of stored pages shows it (see the module docstring):
    :meth:`learn` every page first, then ask :meth:`fingerprint_text`."""

    def __init__(self) -> None:
        # every site of the export is kept (no LRU); no recent pages: nothing is refreshed
        self.templates = TemplateFilter(recent_pages=0, max_hosts=sys.maxsize)

    @staticmethod
    def _page(row: dict[str, Any]) -> tuple[str, list[str], list[int]] | None:
        """Site, lines and line hashes of a fingerprinted page; None for a binary page."""
        if row.get("content_hash") is None:  # binary: stored without text, not fingerprinted
            return None
        lines = [line for line in (row.get("text") or "").splitlines() if line.strip()]
        site = template_key(row.get("canonical_url") or row["url"])
        return site, lines, block_hashes(lines)

    def learn(self, row: dict[str, Any]) -> None:
        page = self._page(row)
        if page is not None:
            site, _, hashes = page
            self.templates.learn(site, KeptPage(row["url"], "", "", []), hashes)

    def fingerprint_text(self, row: dict[str, Any]) -> str | None:
        page = self._page(row)
        if page is None:
            return None
        site, lines, hashes = page
        return "\n".join(line for _, line in self.templates.content(site, lines, hashes))


def stored_items(reader: PageReader, crawl_ids: Sequence[int], *,
                 fingerprint_text: bool = True,
                 html: Callable[[str], str] | None = None) -> Iterator[PageItem]:
    """The feed items of the pages crawls ``crawl_ids`` stored, oldest first (blocking:
    database reads). ``fingerprint_text`` False leaves that field None and reads the rows
    once; ``html(url)`` gives a page's HTML (none stored: ``""``). Raises
    :class:`crawler.storage.ReviewError` when the database cannot be read."""
    sites = SiteTemplates()
    if fingerprint_text:
        for row in reader.stored_pages(crawl_ids, BATCH):
            sites.learn(row)
    for row in reader.stored_pages(crawl_ids, BATCH):
        text = sites.fingerprint_text(row) if fingerprint_text else None
        yield stored_item(row, text, html(row["url"]) if html is not None else "")

"""The item the ``web`` spider yields: one per HTML response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawler.content.simhash import to_hex

if TYPE_CHECKING:
    from crawler.dedup.verdict import Verdict

#: The fields a feed export carries, in order (docs/storage-and-outputs.md, "Feed exports"):
#: everything a consumer of the unique documents needs, nothing internal (``blocks``, ``binary``,
#: ``fingerprints``, ``lease``). ``html`` is added by ``FEED_EXPORT_HTML = True``. ``text`` is the
#: whole visible text (navigation and footer included: the exact-copy hash is taken of it);
#: ``fingerprint_text`` the part of it the SimHash reads (:mod:`crawler.outputs.feeds.rows`).
EXPORT_FIELDS: tuple[str, ...] = (
    "url", "canonical_url", "status", "content_type", "encoding", "title", "text",
    "fingerprint_text", "depth", "referer", "fetched_at", "content_hash", "simhash",
    "canonical_link",
)  # fmt: skip


@dataclass
class PageItem:
    """A fetched HTML page.

    ``url`` is the URL fetched (after redirects), ``canonical_url`` its normalized key (see
    :func:`crawler.urls.urlnorm.normalize_url`). ``fingerprints`` holds the hex request
    fingerprints of every request that led to this response (the redirect chain included), so the
    dupefilter's journal can mark all of them finished once the page is committed. ``fetched_at``
    is ISO 8601 UTC. ``text`` is the visible text, one block per line (navigation and footer
    included); ``fingerprint_text`` is filled only in a feed written from storage
    (:mod:`crawler.outputs.feeds.rows`: the lines of ``text`` that are not its site's template); the
    dedup pipeline fills ``content_hash`` and ``simhash``
    (an unsigned 64-bit int) before storage. ``binary`` marks a body served as HTML that is
    not text (magic bytes, NUL bytes): such a page has empty ``html``/``text`` and no fingerprint.
    ``blocks`` (optional) are the fingerprint blocks of ``html``
    (:class:`crawler.content.text.PageText`) when the spider has parsed the page already; the dedup
    pipeline then uses ``text`` and ``blocks`` instead of parsing ``html`` again, and empties
    ``blocks`` (None). ``lease`` is the shared frontier's lease id of the request (distributed
    profile; acknowledged once the page's outcome is committed). ``canonical_link`` is the
    normalized URL of another page of the crawl that this page names canonical (``<link
    rel="canonical">`` or a ``Link`` header), None when it names none, itself, or a page off the
    crawl. ``verdict`` is the page's fate as the spider asked it of the content decider
    (:class:`crawler.dedup.verdict.Verdict`), for the near-duplicate pipeline to act on, which
    empties it before the item goes on (never stored, never exported).
    """

    url: str
    status: int
    content_type: str
    title: str
    text: str
    html: str
    depth: int
    referer: str | None
    fetched_at: str
    canonical_url: str = ""
    fingerprints: list[str] = field(default_factory=list)
    content_hash: str | None = None
    #: exported as 16 hex digits (an unsigned 64-bit int is rounded by jq and JavaScript)
    simhash: int | None = field(default=None, metadata={"serializer": to_hex})
    encoding: str | None = None
    binary: bool = False  # body is not text although served as HTML: no text stored
    blocks: list[str] | None = None  # fingerprint blocks from the spider's parse (not stored)
    lease: str | None = None  # the shared frontier's lease of the request (distributed profile)
    canonical_link: str | None = None  # the other page of the crawl this page names canonical
    #: fingerprinted while its site's template was unknown (chrome included): the settle step
    #: trusts such a fingerprint against a page of the same site only where the crawl did
    young: bool = False
    #: the lines of ``text`` its site's template leaves (feeds written from storage only)
    fingerprint_text: str | None = None
    #: decided by the spider, acted on by the near-duplicate pipeline (then None)
    verdict: Verdict | None = field(default=None, repr=False, compare=False)

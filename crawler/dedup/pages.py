"""A page as the content index sees it: :class:`Fingerprinter` turns a
:class:`~crawler.items.PageItem` into a :class:`Candidate` (steps 1 to 4 of
:mod:`crawler.dedup.decider`).

1. ``binary`` pages (a body that is not text although served as HTML): counted
   (``dedup/binary``), text emptied, passed through unfingerprinted (no candidate).
2. :func:`crawler.content.text.extract` gives the visible text and the fingerprint blocks
(boilerplate
   regions left out; an item whose ``blocks`` the spider filled from its own parse is not
   parsed again: its ``text`` and ``blocks`` are used, and ``blocks`` emptied);
   :class:`crawler.content.template.TemplateFilter` removes the learned template blocks of the
   page's origin (:func:`crawler.content.template.template_key`; "host" means that origin); the
   rest is tokenized.
3. The content hash (:func:`crawler.content.simhash.content_hash`) is taken of the whole visible
text,
   so exact copies match whatever the template learning knows. A page without any visible
   text (empty, script-only) is hashed by its whitespace-collapsed markup instead
   (``dedup/empty``): text-less pages are exact copies only when their markup is.
4. Fewer than ``SIMHASH_MIN_TOKENS`` tokens: exact copies only (``dedup/too_short``; no
   SimHash, so near-empty pages never match each other). Otherwise the 64-bit SimHash of the
   tokens (``SIMHASH_SHINGLE``-word shingles).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from itemadapter import ItemAdapter

from crawler import defaults
from crawler.content.simhash import content_hash, features, fingerprint
from crawler.content.template import TemplateFilter, block_hashes, template_key
from crawler.content.text import block_tokens, extract, main_tokens, normalize
from crawler.dedup.counts import Counts
from crawler.vocab import Match, PageSignature

logger = logging.getLogger(__name__)


@dataclass
class Candidate:
    """A page between the index lookup and the decision."""

    item: Any
    host: str
    text: str
    hashes: list[int]
    content: list[tuple[int, str]]
    signature: PageSignature
    match: Match | None = None
    verify: bool = False  # young host, same-host match stored by an earlier crawl
    match_names: str | None = None  # what the match names canonical, read from storage
    rule: str = ""  # the match's demotion rule when this page is preferred to it
    why: str = ""  # the rule of the preference order that decided (crawler.dedup.preference)
    stored_text: str | None = None  # the match's stored text, read for a young host's check


class Fingerprinter:
    """Fingerprints pages with the template filter's knowledge of their host (module doc)."""

    def __init__(self, templates: TemplateFilter | None = None, *,
                 min_tokens: int = defaults.SIMHASH_MIN_TOKENS,
                 shingle: int = defaults.SIMHASH_SHINGLE, counts: Counts | None = None) -> None:
        self.templates = templates
        self.min_tokens = min_tokens
        self.shingle = shingle
        self.counts = counts or Counts()
        self._binary_seen = False

    def candidate(self, item: Any) -> Candidate | None:
        """The fingerprinted page; None for a binary page (passed through)."""
        adapter = ItemAdapter(item)
        if adapter.get("binary"):
            self._binary(adapter)
            return None
        url = adapter["url"]
        canonical = adapter.get("canonical_url") or url
        host = template_key(canonical)
        html = adapter.get("html") or ""
        visible, blocks = self._text(adapter, html, url)
        hashes = block_hashes(blocks)
        content = self.content(host, blocks, hashes)
        simhash = self.simhash(content)
        adapter["young"] = self.templates is not None and self.templates.is_young(host)
        if simhash is None:
            self.counts.inc("dedup/too_short")
        names = adapter.get("canonical_link") or ""
        signature = PageSignature(url, canonical, self._content_hash(visible, html), simhash,
                                  names)  # fmt: skip
        return Candidate(item, host, visible, hashes, content, signature)

    def _binary(self, adapter: ItemAdapter) -> None:
        self.counts.inc("dedup/binary")
        if not self._binary_seen:  # the first one only; the stat counts the rest
            self._binary_seen = True
            logger.info("binary body served as HTML, stored without text: %s "
                        "(further ones counted in dedup/binary)", adapter["url"])  # fmt: skip
        adapter["text"] = ""

    @staticmethod
    def _text(adapter: ItemAdapter, html: str, url: str) -> tuple[str, list[str]]:
        """Visible text and fingerprint blocks: the spider's (``blocks`` set) or parsed here."""
        blocks = adapter.get("blocks")
        if blocks is None:
            text = extract(html, url, tokenize=False)
            return text.text, text.blocks
        adapter["blocks"] = None  # read once; not stored
        return adapter.get("text") or "", blocks

    def content(self, host: str, blocks: list[str], hashes: list[int]) -> list[tuple[int, str]]:
        """``(hash, block)`` of the blocks that are not the host's template."""
        if self.templates is None:
            return list(zip(hashes, blocks, strict=True))
        return self.templates.content(host, blocks, hashes)

    def simhash(self, content: list[tuple[int, str]]) -> int | None:
        """SimHash of the main blocks; None below ``min_tokens`` tokens."""
        per_block = block_tokens([block for _, block in content])
        toks = main_tokens(per_block, self.min_tokens)
        if len(toks) < max(self.min_tokens, 1):
            return None
        return fingerprint(features(toks, self.shingle))

    def _content_hash(self, text: str, html: str) -> str:
        if text.strip():
            return content_hash(text)
        self.counts.inc("dedup/empty")
        return content_hash("\x00markup\x00" + normalize(html))

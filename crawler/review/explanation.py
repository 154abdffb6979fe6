"""Explain one decision side by side (``scrapy dropped --explain`` and ``--pair``): the
recomputed distance, the block tables that matched, the exact verdict and the text difference.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler import defaults
from crawler.storage import ReviewError
from crawler.vocab import SOFT_404

if TYPE_CHECKING:
    from crawler.review.crawldb import CrawlDB

_WORD = re.compile(r"\w+", re.UNICODE)
_MASK64 = (1 << 64) - 1


@dataclass
class Page:
    """One side of an explanation: a kept document or a dropped page."""

    url: str
    title: str | None
    text: str
    simhash: int | None
    content_hash: str | None
    kept: bool

    @classmethod
    def from_row(cls, row: dict[str, Any], kept: bool) -> Page:
        """From a ``documents`` (``kept``) or ``dropped`` row."""
        return cls(row["url"], row.get("title"), row.get("text") or "", row.get("simhash"),
                   row.get("content_hash"), kept=kept)


@dataclass
class Explanation:
    """Why ``dropped`` was judged a duplicate of ``kept`` (or how two kept pages compare)."""

    dropped: Page
    kept: Page
    reason: str
    stored_distance: int | None
    distance: int | None
    max_distance: int
    blocks: list[tuple[int, int]]
    matched_blocks: list[int]
    exact: bool | None
    words_only_dropped: Counter[str]
    words_only_kept: Counter[str]
    lines_only_dropped: Counter[str]
    lines_only_kept: Counter[str]
    notes: list[str] = field(default_factory=list)
    rule: str | None = None  # "canonical": the canonical rule chose which page to keep
    # the rule of the preference order (crawler.dedup.preference) that puts the kept page first
    preferred_by: str = ""

    @property
    def identical_text(self) -> bool:
        return self.dropped.text == self.kept.text


def block_ranges(blocks: int) -> list[tuple[int, int]]:
    """``(start, width)`` of each block table, in bits from the most significant bit.

    The layout of :func:`crawler.content.simindex.block_layout`: 64 bits cut into ``blocks``
    contiguous blocks, the first ``64 % blocks`` one bit wider. Two fingerprints within k bits
    agree on at least one of ``k + 1`` blocks (pigeonhole), which is how the index finds the
    candidate.
    """
    from crawler.content.simindex import block_layout

    return block_layout(max(1, min(64, blocks)))


def matching_blocks(a: int, b: int, ranges: list[tuple[int, int]]) -> list[int]:
    """Indexes (0-based, most significant block first) of the blocks where ``a`` equals ``b``."""
    diff = (a ^ b) & _MASK64
    out = []
    for index, (start, width) in enumerate(ranges):
        mask = ((1 << width) - 1) << (64 - start - width)
        if not diff & mask:
            out.append(index)
    return out


def crawl_thresholds(settings: dict[str, Any]) -> tuple[int, int]:
    """``(k, blocks)`` from a crawl's stored settings (project defaults when absent)."""
    k = int_setting(settings.get("SIMHASH_MAX_DISTANCE"), defaults.SIMHASH_MAX_DISTANCE)
    blocks = int_setting(settings.get("SIMHASH_BLOCKS"), k + 1)
    return k, max(blocks, 1)


def int_setting(value: object, default: int) -> int:
    """A recorded setting as an int; ``default`` when absent or not a number."""
    try:
        return default if value in (None, "", "None") else int(str(value))
    except ValueError:
        return default


def lines_of(text: str) -> Counter[str]:
    return Counter(line.strip() for line in text.splitlines() if line.strip())


def words_of(text: str) -> Counter[str]:
    return Counter(word.casefold() for word in _WORD.findall(text))


def compare(a: Page, b: Page, reason: str, stored: int | None, k: int, blocks: int) -> Explanation:
    """Compare two pages: recomputed distance, matching blocks, exact verdict, text difference."""
    ranges = block_ranges(blocks)
    distance = matched = None
    if a.simhash is not None and b.simhash is not None:
        distance = ((a.simhash ^ b.simhash) & _MASK64).bit_count()
        matched = matching_blocks(a.simhash, b.simhash, ranges)
    exact = None
    if a.content_hash and b.content_hash:
        exact = a.content_hash == b.content_hash
    elif reason == "exact_duplicate":
        exact = True
    wa, wb, la, lb = words_of(a.text), words_of(b.text), lines_of(a.text), lines_of(b.text)
    result = Explanation(a, b, reason, stored, distance, k, ranges, matched or [], exact,
                         wa - wb, wb - wa, la - lb, lb - la)
    if distance == 0 and not result.identical_text:
        result.notes.append("same fingerprint, different text: the differing lines are not "
                            "fingerprinted (boilerplate such as nav/aside, or a host template)")
    return result


def explain(db: CrawlDB, url: str) -> Explanation:
    """Explain the drop of ``url``; :class:`ReviewError` when it was not dropped or is unknown."""
    row, kept_row = _decision_rows(db, url)
    settings = _crawl_settings(db, row.get("crawl_id"))
    k, blocks = crawl_thresholds(settings)
    dropped, kept = Page.from_row(row, kept=False), Page.from_row(kept_row, kept=True)
    limit = int_setting(settings.get("DROPPED_TEXT_MAX_CHARS"), 0)
    truncated = bool(limit) and len(dropped.text) >= limit
    notes = []
    if dropped.content_hash is None and dropped.text and not truncated:
        dropped.content_hash = _content_hash(dropped.text)
        if dropped.content_hash:
            notes.append("the dropped page's content hash is computed from its stored text")
    result = compare(dropped, kept, row["reason"], row.get("distance"), k, blocks)
    result.rule = row.get("rule")
    result.preferred_by = _preferred_by(db, row, kept_row)
    if truncated:
        notes.append(f"the dropped page's text was stored truncated to {limit} characters "
                     "(DROPPED_TEXT_MAX_CHARS): differences past that point are not shown")
    result.notes.extend(notes)
    return result


def _preferred_by(db: CrawlDB, row: dict[str, Any], kept_row: dict[str, Any]) -> str:
    """Which rule of the preference order puts the kept page before the dropped one ("" when
    none does: an older crawl's first-fetched decision)."""
    from crawler.dedup.preference import explain as first_difference
    from crawler.dedup.preference import preference_key, seed_hosts

    crawl_id = row.get("crawl_id")
    seeds = db.crawl(crawl_id).get("seeds") if crawl_id in db.crawl_ids() else None
    hosts = seed_hosts(str(s) for s in (_json_list(seeds)))
    kept = kept_row.get("canonical_url") or kept_row["url"]
    dropped = row.get("canonical_url") or row["url"]
    named = row.get("canonical_link") == kept and kept_row.get("canonical_link") != dropped
    return first_difference(preference_key(kept, named, hosts),
                            preference_key(dropped, False, hosts))


def _json_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return []
    return list(value) if isinstance(value, list) else []


def _decision_rows(db: CrawlDB, url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The drop row of ``url`` and the document it duplicates; :class:`ReviewError` if none."""
    row = db.dropped_row(url)
    if row is None:
        if db.document(url) is not None:
            raise ReviewError(f"{url} was kept, not dropped; compare it with another page "
                              "with --pair URL OTHER_URL")
        raise ReviewError(f"{url} is neither a dropped nor a kept page in {db.masked_url}")
    kept_row = db.document(row.get("duplicate_of") or "")
    if kept_row is None and row.get("reason") == SOFT_404:
        raise ReviewError(f"{url} was dropped as a soft 404: it is like the page its host "
                          f"answered for a path no page links ({row.get('duplicate_of')}, "
                          f"distance {row.get('distance')}); that probe page is not stored")
    if kept_row is None:
        raise ReviewError(f"{url} was dropped as a duplicate of {row.get('duplicate_of')}, "
                          "which is not in the documents table (deleted or another database?)")
    return row, kept_row


def _content_hash(text: str) -> str | None:
    """The pipeline's content hash of a visible text (None when that module is unavailable)."""
    try:
        from crawler.content.simhash import content_hash
    except ImportError:
        return None
    return content_hash(text)


def explain_pair(db: CrawlDB, first: str, second: str) -> Explanation:
    """Compare two stored pages (kept or dropped), e.g. a near miss from the report."""
    pages = []
    crawl_id = None
    for url in (first, second):
        doc = db.document(url)
        row = doc if doc is not None else db.dropped_row(url)
        if row is None:
            raise ReviewError(f"{url} is neither a dropped nor a kept page in {db.masked_url}")
        pages.append(Page.from_row(row, kept=doc is not None))
        crawl_id = crawl_id or row.get("crawl_id")
    k, blocks = crawl_thresholds(_crawl_settings(db, crawl_id))
    return compare(pages[0], pages[1], "pair", None, k, blocks)


def _crawl_settings(db: CrawlDB, crawl_id: int | None) -> dict[str, Any]:
    if crawl_id is None or crawl_id not in db.crawl_ids():
        return {}
    return db.crawl(crawl_id)["settings"]

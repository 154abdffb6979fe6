"""Per-site template learning: text blocks repeated across a site's kept pages are boilerplate.

A *host* here is the key the caller gives: the pipeline keys on the page's origin (scheme,
host and port, :func:`template_key`), since sites on other ports of one host name have
templates of their own.

A *block* is one line of :attr:`crawler.content.text.PageText.blocks`, compared after
:func:`crawler.content.text.normalize`. For each host the filter counts on how many *kept* pages
each block appears; a block on at least ``min_pages`` kept pages is template and stays out of the
fingerprint. Only kept pages teach it, so a run of mirrors cannot turn the text they share with
their original into template.

Order matters, and the filter is built for it:

* **Young host** (fewer than ``min_pages`` kept pages): no block can be template yet, so a new
  page's fingerprint still holds the template and is close to every other page of the host. The
  pipeline then asks :meth:`TemplateFilter.own_tokens`: a page adding fewer than a handful of
  tokens of its own to an earlier kept page of its host is that page's near duplicate; otherwise
  it is distinct, whatever the SimHash says.
* **Refresh**: when a block becomes template, the fingerprints of the host's recent kept pages
  (the last ``recent_pages``) that contain it are stale; :meth:`learn` returns those pages with
  their blocks updated, and the pipeline recomputes their fingerprints, so early pages are not
  left fingerprinted on template text: a page whose new fingerprint is within k of another
  kept page is a *late drop* (moved from storage to ``dropped``), the others are re-recorded.

Limits: the state is per process (each crawler process learns on its own) and in memory only,
so a new crawl starts young again on every host. At most ``max_hosts`` hosts are tracked (least
recently used forgotten) and about ``max_blocks`` block counts per host: past it, blocks seen once
are pruned, and the next prune waits until the counts have doubled (a host whose blocks seen
twice or more pass ``max_blocks`` keeps them all: twice that at most). A block that becomes
template late refreshes only the last ``recent_pages`` pages.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import xxhash

from crawler.content.text import block_tokens, normalize

__all__ = ["YOUNG_MAX_OVERLAP", "YOUNG_OWN_TOKENS", "KeptPage", "TemplateFilter", "block_hash",
           "block_hashes", "line_blocks", "origin_part", "template_key",
           "young_distinct"]  # fmt: skip

#: A page of a young host adding at least this many tokens of its own is distinct...
YOUNG_OWN_TOKENS = 15
#: ... unless its own tokens overlap the other page's own tokens at least this much (Jaccard).
YOUNG_MAX_OVERLAP = 0.5


def block_hash(block: str) -> int:
    """64-bit hash of a block's normalized text."""
    return xxhash.xxh3_64_intdigest(normalize(block).encode("utf-8", "surrogatepass"))


def block_hashes(blocks: list[str]) -> list[int]:
    """``[block_hash(b) for b in blocks]``, normalizing the whole page in one NFKC + case-fold
    call (a line break composes with nothing, so the lines normalize as they would alone)."""
    if not blocks:
        return []
    text = unicodedata.normalize("NFKC", "\n".join(blocks)).casefold()
    if text.count("\n") != len(blocks) - 1:  # a block held a line break: no shortcut
        return [block_hash(b) for b in blocks]
    digest = xxhash.xxh3_64_intdigest
    words = text.split()
    breaks = text.count(" ") + text.count("\n")
    if len(words) == breaks + 1 and len(text) - len("".join(words)) == breaks:
        # Spaces and line breaks the only whitespace, and one word more than them: none at
        # either end of a line nor two in a row, no empty line. Every line is its own
        # whitespace collapse (the spider's lines are; NFKC rarely adds a space): one encode
        # for the page, split at the line breaks ("\n" is one byte in UTF-8 and never part of
        # another character's bytes, surrogates included).
        return list(map(digest, text.encode("utf-8", "surrogatepass").split(b"\n")))
    return [digest(" ".join(line.split()).encode("utf-8", "surrogatepass"))
            for line in text.split("\n")]


def line_blocks(text: str) -> list[tuple[int, str]]:
    """``(block_hash, line)`` of each non-empty line of a stored page's visible text."""
    return [(block_hash(line), line) for line in text.splitlines() if line]


def template_key(url: str) -> str:
    """What template learning is keyed on: the origin (``scheme://host[:port]``) of a URL.

    Sites on other ports of one host name are other sites with other templates (measured in
    ``bench.quality``, set ``shared-host``). A URL without a usable port keys on its host."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    origin = f"{parts.scheme.lower()}://{host}"
    return f"{origin}:{port}" if port else origin


def origin_part(url: str) -> str:
    """``url`` up to the ``/`` that starts its path (all of it without one): the part its
    :func:`template_key` depends on, and a little more (a query with no path before it), so
    one part always has one key; cheaper than the key (no ``urlsplit``), for remembering the
    hosts seen (:meth:`crawler.dedup.hosts.HostTemplates.warm`)."""
    start = url.find("//")
    end = url.find("/", start + 2) if start >= 0 else -1
    return url if end < 0 else url[:end]


@dataclass
class KeptPage:
    """A kept page as the filter remembers it: its non-template blocks when last fingerprinted."""

    url: str
    canonical_url: str
    content_hash: str
    blocks: list[tuple[int, str]]
    simhash: int | None = None

    def hashes(self) -> set[int]:
        return {h for h, _ in self.blocks}


@dataclass
class _Host:
    counts: dict[int, int] = field(default_factory=dict)
    kept: int = 0
    recent: deque[KeptPage] = field(default_factory=deque)
    prune_at: int = 0  # counts held before the next prune: twice what the last one left
    prunes: int = 0


class TemplateFilter:
    """Learns each host's template from its kept pages (see the module docstring)."""

    def __init__(
        self,
        min_pages: int = 3,
        recent_pages: int = 16,
        max_hosts: int = 1000,
        max_blocks: int = 100_000,
    ) -> None:
        if min_pages < 2:
            raise ValueError(f"min_pages must be >= 2, got {min_pages!r}")
        self.min_pages = min_pages
        self.recent_pages = recent_pages
        self.max_hosts = max_hosts
        self.max_blocks = max_blocks
        self._hosts: OrderedDict[str, _Host] = OrderedDict()

    def _host(self, host: str) -> _Host:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host(recent=deque(maxlen=self.recent_pages))
            if len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
        return state

    def is_young(self, host: str) -> bool:
        """True while the host has fewer than ``min_pages`` kept pages (no template known)."""
        return self._host(host).kept < self.min_pages

    def content(
        self, host: str, blocks: Sequence[str], hashes: Sequence[int]
    ) -> list[tuple[int, str]]:
        """``(hash, text)`` of the blocks that are not template on ``host``, in page order.

        ``hashes`` are the :func:`block_hash` of ``blocks``.
        """
        counts = self._host(host).counts
        limit = self.min_pages
        return [(h, b) for h, b in zip(hashes, blocks, strict=True) if counts.get(h, 0) < limit]

    def recent(self, host: str) -> list[KeptPage]:
        """The host's most recently kept pages (at most ``recent_pages``), oldest first."""
        return list(self._host(host).recent)

    def forget(self, host: str, url: str) -> bool:
        """A recent kept page of ``host`` at ``url`` is kept no more (demoted, or a late drop):
        it leaves the recent pages, so it is never re-fingerprinted and recorded again. Its
        blocks still count towards the template (the page was on the site). Whether it was
        there."""
        state = self._hosts.get(host)
        if state is None:
            return False
        before = len(state.recent)
        state.recent = deque((k for k in state.recent if k.url != url), maxlen=self.recent_pages)
        return len(state.recent) != before

    @staticmethod
    def own_blocks(blocks: Iterable[tuple[int, str]], other: KeptPage) -> list[str]:
        """Texts of ``blocks`` that ``other`` does not hold."""
        theirs = other.hashes()
        return [text for h, text in blocks if h not in theirs]

    def learn(self, host: str, page: KeptPage, all_hashes: Iterable[int]) -> list[KeptPage]:
        """Count a kept page's blocks; return recent pages whose blocks just became template.

        ``all_hashes`` are the hashes of every block of the page (template included);
        ``page.blocks`` its non-template blocks when it was fingerprinted. The returned pages
        (``page`` itself may be one) have the new template blocks removed and need a new
        fingerprint; ``page`` is one too when blocks it holds became template since it was
        fingerprinted (other pages of the host learned meanwhile).
        """
        state = self._host(host)
        state.kept += 1
        fresh: set[int] = set()
        counts = state.counts
        for h in set(all_hashes):
            counts[h] = counts.get(h, 0) + 1
            if counts[h] == self.min_pages:
                fresh.add(h)
        if len(counts) > max(self.max_blocks, state.prune_at):
            # blocks seen once go; the next prune waits until the counts have doubled, so a
            # host whose shared blocks alone pass max_blocks is not pruned on every page
            # (O(blocks) a page: 67% of a 10^6-page crawl's CPU by 180,000 pages) and a block
            # new to it can still be seen twice before it is pruned
            state.counts = {h: c for h, c in counts.items() if c > 1}
            state.prune_at = 2 * len(state.counts)
            state.prunes += 1
        state.recent.append(page)
        changed = self._strip(state.recent, fresh) if fresh else []
        # blocks that became template after the page was fingerprinted (other pages of the
        # host learned in between, decisions interleaving): never fresh again, so stripped here
        stale = {h for h, _ in page.blocks if state.counts.get(h, 0) >= self.min_pages}
        if stale and self._strip([page], stale) and page not in changed:
            changed.append(page)
        return changed

    @staticmethod
    def _strip(pages: Iterable[KeptPage], template: set[int]) -> list[KeptPage]:
        changed = []
        for kept in pages:
            blocks = [(h, t) for h, t in kept.blocks if h not in template]
            if len(blocks) != len(kept.blocks):
                kept.blocks = blocks
                changed.append(kept)
        return changed


def young_distinct(content: list[tuple[int, str]], kept: KeptPage) -> bool:
    """Whether a page is distinct from a kept page of its young host (template unknown).

    Blocks both pages hold are set aside (they may be template). The page is distinct when
    its remaining blocks hold at least :data:`YOUNG_OWN_TOKENS` tokens and those tokens are not
    mostly the kept page's remaining tokens (multiset Jaccard below :data:`YOUNG_MAX_OVERLAP`:
    an edited paragraph is the same paragraph, a different post is not). Each page is
    tokenized as a whole (:func:`~crawler.content.text.block_tokens`), so whether its stop words go
    is decided on all its blocks, not on each remaining one.
    """
    ours = kept.hashes()
    mine = {h for h, _ in content}
    page = zip(content, block_tokens([b for _, b in content]), strict=True)
    own = Counter(t for (h, _), toks in page if h not in ours for t in toks)
    if sum(own.values()) < YOUNG_OWN_TOKENS:
        return False
    other = zip(kept.blocks, block_tokens([b for _, b in kept.blocks]), strict=True)
    theirs = Counter(t for (h, _), toks in other if h not in mine for t in toks)
    union = sum((own | theirs).values())
    return sum((own & theirs).values()) < YOUNG_MAX_OVERLAP * union

"""The canonical copy (``DEDUP_CANONICAL``): :class:`CanonicalRule`.

When the kept page a new page duplicates names the new page canonical (``canonical_link``,
from ``<link rel="canonical">`` or a ``Link`` header), the new page is kept instead: the index
swaps them (:meth:`ContentIndex.replace`) and storage moves the other to ``dropped`` with
``rule = 'canonical'`` in the batch that stores the new page (signal ``page_demoted``; drops
that named it follow, ``rule = 'repointed'``). Two pages naming each other are ignored
(``dedup/canonical/loop``); a copy naming a kept original is dropped as usual
(``dedup/canonical/confirmed``). Without a hint the first fetched page stays. A match loaded
from storage (the index does not know what it names) is asked of storage.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crawler import defaults
from crawler.pipelines.counts import Counts
from crawler.vocab import CANONICAL_RULE, Drop

if TYPE_CHECKING:
    from crawler.pipelines.drops import DropWriter
    from crawler.pipelines.outage import GuardedIndex
    from crawler.pipelines.pages import Candidate
    from crawler.pipelines.stored import StoredPages

logger = logging.getLogger(__name__)


class CanonicalRule:
    """Which of two duplicates is kept, by their canonical links (module docstring);
    ``prefer``: ``DEDUP_CANONICAL`` (False: the first fetched page always stays)."""

    def __init__(self, index: GuardedIndex, drops: DropWriter, stored: StoredPages,
                 counts: Counts | None = None, prefer: bool = defaults.DEDUP_CANONICAL) -> None:
        self.index = index
        self.drops = drops
        self.stored = stored
        self.counts = counts or Counts()
        self.prefer = prefer

    def names_unknown(self, page: Candidate) -> bool:
        """The match is a page the index knows no canonical link of (loaded from storage):
        :meth:`stored_names` tells."""
        match = page.match
        return (self.prefer and match is not None and match.names is None
                and self.stored.enabled)  # fmt: skip

    def stored_names(self, page: Candidate) -> str:
        """What the matched page names canonical, from storage (blocking)."""
        assert page.match is not None
        return self.stored.canonical_link(page.match.url)

    def wins(self, page: Candidate) -> bool:
        """Whether ``page`` is kept instead of its match: the match names it canonical."""
        match = page.match
        if not self.prefer or match is None:
            return False
        names = match.names if match.names is not None else page.match_names
        own = page.signature.canonical_url or page.signature.url
        kept = match.canonical_url or match.url
        if names and names == own:
            if page.signature.names == kept:  # each names the other: ignored
                self.counts.inc("dedup/canonical/loop")
                return False
            return True
        if page.signature.names and page.signature.names == kept:
            self.counts.inc("dedup/canonical/confirmed")  # the copy came second: dropped
        return False

    def swap(self, page: Candidate) -> None:
        """Keep ``page`` instead of its match, which names it canonical: the match leaves the
        index, and storage moves it to ``dropped`` in the batch that stores ``page``."""
        match, signature = page.match, page.signature
        assert match is not None
        page.match = None
        self.index.replace(match.canonical_url or match.url, signature)
        self.counts.inc("dedup/canonical/swapped")
        logger.debug("canonical copy kept: %s replaces %s (%s, distance %d)", signature.url,
                     match.url, match.reason, match.distance)  # fmt: skip
        self.drops.demoted(Drop(match.url, match.reason, signature.url, match.distance,
                                match.simhash, signature.simhash, rule=CANONICAL_RULE),
                           signature.content_hash)  # fmt: skip

"""Which of two duplicates is kept on arrival: :class:`PreferenceRule`, the preference order
of :mod:`crawler.dedup.preference` applied to a new page and the kept page it matches.

The new page is dropped iff its match is preferred; otherwise the new page is kept instead:
the index swaps them (:meth:`ContentIndex.replace`) and storage moves the match to ``dropped``
in the batch that stores the new page (signal ``page_demoted``; ``rule = 'canonical'`` when the
match names the new page canonical, ``'preferred'`` when a later rule of the order decided;
drops that named it follow, ``rule = 'repointed'``). Between the two pages, "named canonical"
is read pairwise: the page the other names wins, two pages naming each other fall through to
the next rules (``dedup/canonical/loop``). A match loaded from storage (the index does not know
what it names) is asked of storage.

Streaming decisions see one match at a time and can lose races; the settle step at the end of
the crawl (:mod:`crawler.dedup.settle`) re-decides whole groups by the same order.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crawler import defaults
from crawler.dedup.counts import Counts
from crawler.dedup.preference import explain, preference_key
from crawler.logformatter import duplicate_message
from crawler.vocab import CANONICAL_RULE, PREFERRED_RULE, Drop

if TYPE_CHECKING:
    from crawler.dedup.drops import DropWriter
    from crawler.dedup.outage import GuardedIndex
    from crawler.dedup.pages import Candidate
    from crawler.dedup.stored import StoredPages

logger = logging.getLogger(__name__)


class PreferenceRule:
    """Which of two duplicates is kept (module docstring); ``prefer``: ``DEDUP_CANONICAL``
    (False: what pages name canonical is not read); ``seeds``: the seeds' hosts
    (:func:`crawler.dedup.preference.seed_hosts`, set when the spider opens)."""

    def __init__(self, index: GuardedIndex, drops: DropWriter, stored: StoredPages,
                 counts: Counts | None = None, prefer: bool = defaults.DEDUP_CANONICAL) -> None:
        self.index = index
        self.drops = drops
        self.stored = stored
        self.counts = counts or Counts()
        self.prefer = prefer
        self.seeds: frozenset[str] = frozenset()

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
        """Whether ``page`` is kept instead of its match: it is preferred (module docstring).
        Sets ``page.rule``, the rule of the match's demotion."""
        match = page.match
        if match is None:
            return False
        if match.url == page.signature.url:  # itself, kept under a key learned since
            page.rule, page.why = "", "the same page"
            return True
        own = page.signature.canonical_url or page.signature.url
        kept = match.canonical_url or match.url
        names = match.names if match.names is not None else page.match_names
        new_named = bool(self.prefer and names and names == own)
        kept_named = bool(self.prefer and page.signature.names
                          and page.signature.names == kept)
        if new_named and kept_named:  # each names the other: the next rules decide
            self.counts.inc("dedup/canonical/loop")
        elif kept_named:
            self.counts.inc("dedup/canonical/confirmed")  # the copy came second: dropped
        new = preference_key(own, new_named and not kept_named, self.seeds)
        old = preference_key(kept, kept_named and not new_named, self.seeds)
        if new < old:
            page.rule = CANONICAL_RULE if new[0] < old[0] else PREFERRED_RULE
            page.why = explain(new, old)
            return True
        return False

    def swap(self, page: Candidate) -> str | None:
        """Keep ``page`` instead of its match, which it is preferred to: the match leaves the
        index, and storage moves it to ``dropped`` in the batch that stores ``page``. Returns
        the URL of the page demoted (None: the match was the page itself, met again)."""
        match, signature = page.match, page.signature
        assert match is not None
        page.match = None
        self.index.replace(match.canonical_url or match.url, signature)
        if match.url == signature.url:  # the page met again under a new canonical key (a
            self.counts.inc("dedup/rekeyed")  # parameter learned since): its new version
            return None
        self.counts.inc("dedup/canonical/swapped" if page.rule == CANONICAL_RULE
                        else "dedup/preferred/swapped")
        drop = Drop(match.url, match.reason, signature.url, match.distance, match.simhash,
                    signature.simhash, rule=page.rule)
        logger.info("%s (stored first; the other is preferred: %s)", duplicate_message(drop),
                    page.why)
        self.drops.demoted(drop, signature.content_hash)
        return match.url

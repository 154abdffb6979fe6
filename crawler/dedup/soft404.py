"""Soft 404s: a host that answers 200 with the same page for every unknown path.

The spider fetches one never-linked path of each host (``TRAP_SOFT404_PROBE``,
:func:`crawler.urls.traps.probe_path`). When that answers 200 with an HTML page, the page is
fingerprinted here (:meth:`Soft404Pages.probe`) and every later page of the host with the same
content hash, or a SimHash within ``SIMHASH_MAX_DISTANCE`` bits of it, is dropped as
``soft_404`` (duplicate of the probe URL; :meth:`Soft404Pages.match`); the spider does not
follow its links. The probe page itself is neither stored nor put in the content index, so
each soft-404 page is measured against the probe, not against the first soft 404 kept.
Stats: ``dedup/soft404/probes`` (probe pages answered 200), ``dedup/soft_404`` (pages
dropped). A probe that was redirected (to the home page, often) is not used: the redirect
target is a real page.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter

from crawler.content.simhash import hamming
from crawler.dedup.counts import Counts
from crawler.dedup.pages import Fingerprinter
from crawler.vocab import SOFT_404, Match

if TYPE_CHECKING:
    from crawler.dedup.pages import Candidate

logger = logging.getLogger(__name__)


class Soft404Pages:
    """The soft-404 probe page of each host (its template key) and the pages like it."""

    def __init__(self, fingerprinter: Fingerprinter, k: int, counts: Counts) -> None:
        # the decider's (its host templates); probes are fingerprinted whole, uncounted
        self.fingerprinter = fingerprinter
        self.whole = Fingerprinter(None, min_tokens=fingerprinter.min_tokens,
                                   shingle=fingerprinter.shingle)
        self.k = k
        self.counts = counts
        self._pages: dict[str, Candidate] = {}
        # host -> (the probe's blocks left by the host's template, their SimHash)
        self._simhashes: dict[str, tuple[int, int | None]] = {}

    def probe(self, item: Any) -> None:
        """``item`` is the answer of a host's soft-404 probe: pages like it are soft 404s."""
        page = self.whole.candidate(item)
        if page is None:
            return
        self.counts.inc("dedup/soft404/probes")
        self._pages[page.host] = page
        logger.info("soft-404 probe: %s answers 200 for a path no page links; pages like it "
                    "are dropped as soft_404", page.signature.url)  # fmt: skip

    def match(self, page: Candidate) -> Match | None:
        """The probe page ``page`` is a soft 404 like, or None. A seed (depth 0) never is: a
        site that answers unknown paths with its home page keeps its home page."""
        probe = self._pages.get(page.host)
        if probe is None or ItemAdapter(page.item).get("depth") == 0:
            return None
        own, url = page.signature, probe.signature.url
        if own.content_hash == probe.signature.content_hash:
            return Match(SOFT_404, url, probe.signature.simhash, 0)
        simhash = self._simhash(probe)
        if own.simhash is None or simhash is None:
            return None
        distance = hamming(own.simhash, simhash)
        return Match(SOFT_404, url, simhash, distance) if distance <= self.k else None

    def _simhash(self, probe: Candidate) -> int | None:
        """The probe's SimHash as the host's pages are fingerprinted now: without the blocks
        its learned template removes (recomputed only when that changed)."""
        content = self.fingerprinter.content(probe.host, [b for _, b in probe.content],
                                             probe.hashes)
        cached = self._simhashes.get(probe.host)
        if cached is not None and cached[0] == len(content):
            return cached[1]
        simhash = self.fingerprinter.simhash(content)
        self._simhashes[probe.host] = (len(content), simhash)
        return simhash

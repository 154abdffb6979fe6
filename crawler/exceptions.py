"""Exceptions shared across components."""

from __future__ import annotations

from scrapy.exceptions import DropItem

EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"
#: A shared index's answer when the matching page is kept by another worker but not yet stored.
PENDING = "pending"
#: ``dropped.rule`` of a stored page dropped once the page it names canonical was kept.
CANONICAL_RULE = "canonical"
#: ``dropped.rule`` of a stored page dropped once its host's template became known: its new
#: fingerprint (template left out) is within k of another kept page.
REFRESHED_RULE = "refreshed"


class DuplicatePage(DropItem):
    """A page dropped because it duplicates one already kept.

    ``reason`` is ``exact_duplicate`` or ``near_duplicate``; ``duplicate_of`` the URL of the kept
    page; ``distance`` the Hamming distance in bits (0 for exact copies); ``simhash`` and
    ``duplicate_simhash`` the unsigned 64-bit fingerprints of both pages (None when not computed);
    ``content_hash`` the dropped page's content hash (None when not computed); ``rule``
    ``"canonical"`` when the page was stored first and dropped once the page it names canonical
    came (None: the usual rule).
    """

    def __init__(
        self,
        url: str,
        reason: str,
        duplicate_of: str,
        distance: int,
        simhash: int | None = None,
        duplicate_simhash: int | None = None,
        content_hash: str | None = None,
        rule: str | None = None,
    ) -> None:
        self.url = url
        self.reason = reason
        self.duplicate_of = duplicate_of
        self.distance = distance
        self.simhash = simhash
        self.duplicate_simhash = duplicate_simhash
        self.content_hash = content_hash
        self.rule = rule
        super().__init__(f"{reason} of {duplicate_of} (distance {distance}): {url}")

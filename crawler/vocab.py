"""The words every floor shares: why a page was dropped, what the content index is asked and
what it answers. Plain data, no Scrapy, no database: the libraries, the components and the
commands all import it, so it imports nothing of theirs.

* the reasons (``dropped.reason``): :data:`EXACT_DUPLICATE`, :data:`NEAR_DUPLICATE`,
  :data:`SOFT_404`, :data:`OVERRIDE` (a person's ``drop`` rule), and
  :data:`PENDING`, a shared index's answer when the matching page is kept by another worker
  but not yet stored;
* the rules (``dropped.rule``) of a page stored first and dropped later:
  :data:`CANONICAL_RULE`, :data:`PREFERRED_RULE`, :data:`REFRESHED_RULE`;
* :class:`PageSignature` (a page as the index sees it), :class:`Match` (the kept page it
  duplicates), :data:`Record` (a kept page as the index stores it) and :class:`Drop` (one
  dropped page: the event the drop log and the ``dropped`` table are both written from).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"
#: A page like its host's soft-404 probe (an unknown path answered 200): :mod:`crawler.urls.traps`.
SOFT_404 = "soft_404"
#: A page a person's ``drop`` rule names (:mod:`crawler.dedup.overrides`): never stored, no
#: ``duplicate_of``, no distance.
OVERRIDE = "override"
#: A shared index's answer when the matching page is kept by another worker but not yet stored.
PENDING = "pending"
#: ``dropped.rule`` of a stored page dropped once the page it names canonical was kept.
CANONICAL_RULE = "canonical"
#: ``dropped.rule`` of a stored page dropped once a page preferred to it (crawler.dedup.preference:
#: on a seed's host, a shorter URL...) came within k.
PREFERRED_RULE = "preferred"
#: ``dropped.rule`` of a dropped page whose kept page was itself dropped later: it names the
#: page kept instead.
REPOINTED_RULE = "repointed"
#: ``dropped.rule`` of a stored page the settle step dropped (crawler.dedup.settle).
SETTLED_RULE = "settled"
#: The drop log's ``reason`` of a page the settle step stored again (it is kept now).
KEPT_REASON = "kept"
#: ``dropped.rule`` of a stored page dropped once its host's template became known: its new
#: fingerprint (template left out) is within k of another kept page.
REFRESHED_RULE = "refreshed"

#: Each reason in words, with its article ("is an exact duplicate of ...").
REASON_WORDS = {EXACT_DUPLICATE: "an exact duplicate", NEAR_DUPLICATE: "a near duplicate",
                SOFT_404: "a soft 404", OVERRIDE: "dropped by a person's rule"}


def reason_words(reason: str) -> str:
    """``reason`` as words with its article: ``an exact duplicate``, ``a near duplicate``."""
    return REASON_WORDS.get(reason, f"a {reason.replace('_', ' ')}")


#: A kept page as the index records it: (url, canonical_url, content_hash, simhash or None).
Record = tuple[str, str, str, "int | None"]


@dataclass(frozen=True)
class PageSignature:
    """What the index needs of a page. ``simhash`` None: check exact copies only. ``names``:
    the other page of the crawl the page names canonical (normalized), ``""`` none."""

    url: str
    canonical_url: str
    content_hash: str
    simhash: int | None
    names: str = ""


@dataclass(frozen=True)
class Match:
    """The kept page a new page duplicates: reason, its URL and SimHash, distance in bits;
    its canonical URL (``""``: unknown, take ``url``) and the page it names canonical
    (``""`` none, None: the index does not know, ask storage). Equality compares the decision
    only (reason, URL, SimHash, distance)."""

    reason: str
    url: str
    simhash: int | None
    distance: int
    canonical_url: str = field(default="", compare=False)
    names: str | None = field(default="", compare=False)


@dataclass(frozen=True)
class Drop:
    """One dropped page, decided once and written from this one value to the ``dropped``
    table and the drop log.

    ``reason`` is :data:`EXACT_DUPLICATE`, :data:`NEAR_DUPLICATE` or :data:`SOFT_404`;
    ``duplicate_of`` the URL of the kept page (of the soft-404 probe, not stored);
    ``distance`` the Hamming distance in bits (0 for exact copies; None, like an empty
    ``duplicate_of``, for a page a person's drop rule names: :data:`OVERRIDE`);
    ``simhash`` and ``duplicate_simhash`` the unsigned 64-bit fingerprints of both pages (None
    when not computed); ``content_hash`` the dropped page's content hash (None when not
    computed); ``rule`` :data:`CANONICAL_RULE` or :data:`REFRESHED_RULE` for a page stored
    first and dropped later (None: the usual rule).
    """

    url: str
    reason: str
    duplicate_of: str
    distance: int | None
    simhash: int | None = None
    duplicate_simhash: int | None = None
    content_hash: str | None = None
    rule: str | None = None

    def __str__(self) -> str:
        if not self.duplicate_of:
            return f"{self.reason}: {self.url}"
        return f"{self.reason} of {self.duplicate_of} (distance {self.distance}): {self.url}"
#: ``crawls.command`` of the row that stands for a whole distributed crawl (revision 0010; its
#: workers' rows say ``crawl`` and point at it by ``parent_id``).
DISTRIBUTED = "distributed"
#: ``crawls.finish_reason`` of a distributed worker's row closed by the worker that reclaimed
#: it (the worker died or was cut off past its lease).
RECLAIMED_REASON = "reclaimed"
#: ``crawls.finish_reason`` of a distributed worker's row still open when its crawl was found
#: done (a worker killed with nothing left to do, or one closing at that moment, whose own
#: close then writes its reason over it).
UNFINISHED_REASON = "unfinished"

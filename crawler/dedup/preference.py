"""Which copy of a duplicate group is kept: one total order over pages, whatever the arrival.

Of two pages within ``SIMHASH_MAX_DISTANCE`` bits (or with one content hash), the *preferred*
one is kept. The order, first difference wins:

1. the page another member of its group names canonical (``<link rel="canonical">`` or a
   ``Link`` header; only with ``DEDUP_CANONICAL``): the publisher's own word;
2. a page on a seed's host (``host:port``, as the crawl's scope compares them): the sites the
   user asked for over the mirrors and syndicators they link to;
3. the shorter canonical URL: ``/article/x`` over ``/mirror/2024/article/x?ref=feed``;
4. the smaller canonical URL (code-point order): a last resort that is total, so no tie is
   left to chance.

Two pages naming each other are both "named": the next rules decide. The order depends only on
the pages and the seed list, never on the time or process a page was fetched in, so every
crawl of the same web keeps the same copies (:mod:`crawler.dedup.settle`). Plain Python: the content
index, the content decider, the settle step and ``scrapy dropped --explain`` share it.
"""

from __future__ import annotations

__floor__ = "library"

from collections.abc import Iterable
from urllib.parse import urlsplit

#: Words of :func:`explain`, one per rule of the order.
RULES = ("named canonical", "on a seed's host", "shorter URL", "smaller URL")

PreferenceKey = tuple[int, int, int, str]


def host_of(url: str) -> str:
    """``host[:port]`` of a URL, lower-cased ("" when it has none)."""
    try:
        return (urlsplit(url).netloc.rpartition("@")[2]).lower()
    except ValueError:
        return ""


def seed_hosts(seeds: Iterable[str]) -> frozenset[str]:
    """The ``host[:port]`` of every seed URL."""
    return frozenset(h for h in (host_of(s) for s in seeds) if h)


def preference_key(canonical: str, named: bool, seeds: frozenset[str]) -> PreferenceKey:
    """The sort key of a page (smaller is preferred): ``named``, the page is named canonical
    by another member of its group; ``seeds``, the seeds' hosts (:func:`seed_hosts`)."""
    return (0 if named else 1, 0 if host_of(canonical) in seeds else 1, len(canonical), canonical)


def explain(winner: PreferenceKey, loser: PreferenceKey) -> str:
    """The rule that prefers ``winner`` to ``loser``, in words ("" when they are equal)."""
    for rule, a, b in zip(RULES, winner, loser, strict=True):
        if a != b:
            return rule
    return ""

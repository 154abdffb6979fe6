"""The settle step: re-decide duplicate groups so that what is stored depends only on the set of
fetched pages, never on their order, on the number of workers or on kills.

Streaming decisions (:mod:`crawler.dedup.decider`) are made as pages arrive and can lose
races: two workers deciding two twins at once, a host's template learned after its first pages,
a page demoted whose own duplicates are then repointed to a page further than k away. This
module decides the same pages again, all at once, by one rule:

    **Greedy by preference.** Within a group, pages are taken in preference order
    (:mod:`crawler.dedup.preference`). A page is kept iff no page already kept is its duplicate
    (the same content hash, or both have a SimHash and they are within ``k`` bits).

The outcome is a function of the set of pages alone. A page is dropped only against a kept page
within k (never a chain: a page whose twin was demoted is kept again if nothing else kept is
near it), and its ``duplicate_of`` is the nearest kept page within k (exact copies first, ties
by preference).

Two pages are duplicates, here as while crawling, when they share a content hash, or when both
have a SimHash within ``k`` bits and either they are on different sites (origins) or neither
fingerprint is *young* (computed while its site's template was unknown, chrome included: two
distinct pages of a young site can be near in bits; the crawl then compared their texts) or
the crawl recorded one as the other's duplicate within ``k``.

Groups are the connected components of that relation: a page's fate depends only on the pages
of its component, so :func:`components` collects just the components that hold a changed page
and :func:`decide_group` re-decides only those (the settle step is incremental).

A person's overrides (:mod:`crawler.dedup.overrides`) come first: a page a ``keep`` rule names is
kept wherever it falls in the order (pages before it are decided as before; pages after it may
be dropped against it, as against any kept page); a page a ``drop`` rule names takes no part
(a stored one is moved to ``dropped`` with reason ``override``, and the pages that were dropped
against it are decided again); two pages of a ``distinct`` rule are never duplicates of each
other. Each stays a function of the set of pages and the rules.

Plain Python and numpy (:class:`~crawler.content.simindex.SimIndex` finds the neighbours): the
storage side (:mod:`crawler.storage.settle`) reads the pages and applies the :class:`Plan`.
:func:`partnered` tells it, from 64-bit keys alone, which pages can be in a group at all: it
builds a :class:`SettlePage` for those only.
"""

from __future__ import annotations

__floor__ = "library"

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawler.content.simhash import hamming
from crawler.content.simindex import BITS, SimIndex, block_layout
from crawler.content.template import template_key
from crawler.dedup.overrides import DROP, KEEP
from crawler.dedup.preference import PreferenceKey, preference_key
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE

if TYPE_CHECKING:
    import numpy as np
else:
    np = None  # numpy, imported on first use (_numpy): a settle of few pages runs without it

#: A settle of at most this many pages runs without numpy (the same decisions): the index
#: of :class:`Neighbours` by single adds (its lists), :func:`partnered` by the pure-Python
#: :func:`shared_pure` and :func:`near_any_pure` (``O(n**2)`` pairs: ~3 ms at 256).
SMALL_PAGES = 256


def _numpy() -> None:
    """Import numpy into this module's ``np`` once."""
    global np
    if np is None:
        import numpy

        np = numpy


@dataclass(frozen=True, slots=True)  # slots: a settle holds one per page of the store
class SettlePage:
    """One fetched page as the settle step sees it: the latest version of one canonical URL,
    stored (``kept``) or dropped (its current ``duplicate_of`` URL, ``reason``, ``distance``)."""

    canonical: str
    url: str
    content_hash: str
    simhash: int | None
    names: str = ""
    kept: bool = True
    duplicate_of: str = ""
    reason: str = ""
    distance: int | None = None
    young: bool = False  # fingerprinted while its site's template was unknown
    override: str = ""  # "keep" or "drop": a person's rule names the page (crawler.dedup.overrides)

    @property
    def origin(self) -> str:
        return template_key(self.canonical)


@dataclass(frozen=True)
class Verdict:
    """What the rule decides for one page: kept (``duplicate_of`` None), or dropped as
    ``reason`` of the kept page ``duplicate_of`` (its index) at ``distance`` bits."""

    duplicate_of: int | None = None
    reason: str = ""
    distance: int = 0


@dataclass
class Plan:
    """The moves that bring the stored state to the rule's (indexes into the pages).

    ``demote``: stored pages to move to ``dropped``; ``promote``: dropped pages to store again;
    ``repoint``: dropped pages whose kept page, reason or distance change. Each with its
    :class:`Verdict` (a promoted page's is the kept verdict). ``exclude``: stored pages a
    ``drop`` rule names, to move to ``dropped`` with reason ``override``."""

    demote: list[tuple[int, Verdict]] = field(default_factory=list)
    exclude: list[int] = field(default_factory=list)
    promote: list[int] = field(default_factory=list)
    repoint: list[tuple[int, Verdict]] = field(default_factory=list)
    groups: int = 0  # components re-decided
    pages: int = 0  # pages in them

    def __len__(self) -> int:
        return len(self.demote) + len(self.promote) + len(self.repoint) + len(self.exclude)


class Neighbours:
    """Who duplicates whom among ``pages`` (module docstring); ``distinct`` says of two
    canonical URLs that a person's rule keeps them apart."""

    def __init__(self, pages: Sequence[SettlePage], k: int,
                 distinct: Callable[[str, str], object] | None = None) -> None:
        self.pages = pages
        self.k = k
        self.distinct = distinct
        self.excluded = {i for i, page in enumerate(pages) if page.override == DROP}
        self._near = SimIndex(k)
        self._exact: dict[str, list[int]] = {}
        self._recorded: set[tuple[int, int]] = set()  # (dropped, kept) the crawl recorded
        by_url = {page.url: i for i, page in enumerate(pages)}
        with_fp = [i for i, page in enumerate(pages) if page.simhash is not None]
        if len(with_fp) <= SMALL_PAGES:  # the index's lists (SimIndex.SMALL_MAX): no numpy
            for i, page in enumerate(pages):
                if page.simhash is not None:
                    self._near.add(page.simhash, i)
        else:
            _numpy()
            self._near.add_many(np.array([pages[i].simhash for i in with_fp], dtype=np.uint64),
                                np.array(with_fp, dtype=np.int64))  # one bulk build, not n adds
        for i, page in enumerate(pages):
            self._exact.setdefault(page.content_hash, []).append(i)
            j = by_url.get(page.duplicate_of) if not page.kept else None
            if j is not None:
                self._recorded |= {(i, j), (j, i)}

    def of(self, i: int) -> list[int]:
        page = self.pages[i]
        found = set(self._exact.get(page.content_hash, ()))
        if page.simhash is not None:
            found.update(j for j, _ in self._near.query_all(page.simhash)
                         if self.trusted(i, j))
        found.discard(i)
        return sorted(found - self.excluded)

    def trusted(self, i: int, j: int) -> bool:
        """Whether two pages within k bits are duplicates (module docstring)."""
        a, b = self.pages[i], self.pages[j]
        return (not (a.young or b.young) or a.origin != b.origin
                or (i, j) in self._recorded)

    def apart(self, i: int, j: int) -> bool:
        """A person's ``distinct`` rule names the two pages."""
        return bool(self.distinct and self.distinct(self.pages[i].canonical,
                                                    self.pages[j].canonical))


def components(near: Neighbours, start: Iterable[int] | None = None,
               orphans: frozenset[int] = frozenset()) -> list[list[int]]:
    """The groups (connected components) holding the pages ``start`` (all pages: None), each
    sorted, in the order of their smallest member. A page alone is left out, but for the
    ``orphans``: dropped pages whose reason to be dropped is gone (:func:`orphans_of`)."""
    pages = near.pages
    todo = range(len(pages)) if start is None else sorted(set(start))
    seen: set[int] = set()
    groups: list[list[int]] = []
    for first in todo:
        if first in seen or first in near.excluded:
            continue
        seen.add(first)
        group, stack = [first], [first]
        while stack:
            for j in near.of(stack.pop()):
                if j not in seen:
                    seen.add(j)
                    group.append(j)
                    stack.append(j)
        if len(group) > 1 or first in orphans:  # an orphan alone is kept again
            groups.append(sorted(group))
    return sorted(groups, key=lambda g: g[0])


def _is_duplicate(near: Neighbours, i: int, j: int) -> tuple[str, int] | None:
    """``(reason, distance)`` when page ``i`` duplicates page ``j``, else None."""
    a, b = near.pages[i], near.pages[j]
    if near.apart(i, j):
        return None
    if a.content_hash == b.content_hash:
        return EXACT_DUPLICATE, 0
    if a.simhash is not None and b.simhash is not None:
        d = hamming(a.simhash, b.simhash)
        if d <= near.k and near.trusted(i, j):
            return NEAR_DUPLICATE, d
    return None


def group_keys(pages: Sequence[SettlePage], group: Sequence[int], seeds: frozenset[str],
               prefer_canonical: bool = True) -> dict[int, PreferenceKey]:
    """The preference key of every page of ``group`` (named: by another member)."""
    named = set()
    if prefer_canonical:
        named = {pages[i].names for i in group
                 if pages[i].names and pages[i].names != pages[i].canonical}
    return {i: preference_key(pages[i].canonical, pages[i].canonical in named, seeds)
            for i in group}


def decide_group(near: Neighbours, group: Sequence[int], seeds: frozenset[str],
                 prefer_canonical: bool = True) -> dict[int, Verdict]:
    """The rule's verdict on every page of ``group`` (module docstring)."""
    pages = near.pages
    keys = group_keys(pages, group, seeds, prefer_canonical)
    kept: list[int] = []
    verdicts: dict[int, Verdict] = {}
    for i in sorted(group, key=keys.__getitem__):
        best: tuple[int, PreferenceKey, int, str] | None = None
        for j in kept:
            dup = _is_duplicate(near, i, j)
            if dup is not None and (best is None or (dup[1], keys[j]) < best[:2]):
                best = (dup[1], keys[j], j, dup[0])
        if best is None or pages[i].override == KEEP:
            kept.append(i)
            verdicts[i] = Verdict()
        else:
            verdicts[i] = Verdict(best[2], best[3], best[0])
    return verdicts


def plan(pages: Sequence[SettlePage], k: int, seeds: frozenset[str],
         start: Iterable[int] | None = None, prefer_canonical: bool = True,
         distinct: Callable[[str, str], object] | None = None) -> Plan:
    """The moves that settle the groups of ``start`` (every group: None) and of every page a
    rule names; ``distinct``: :meth:`crawler.dedup.overrides.Overrides.distinct`."""
    moves = Plan()
    near = Neighbours(pages, k, distinct)
    orphans = orphans_of(pages, near.excluded)
    if start is not None:
        start = set(start) | orphans | {i for i, page in enumerate(pages) if page.override}
    moves.exclude = sorted(i for i in near.excluded if pages[i].kept)
    for group in components(near, start, orphans):
        moves.groups += 1
        moves.pages += len(group)
        for i, verdict in decide_group(near, group, seeds, prefer_canonical).items():
            page = pages[i]
            if verdict.duplicate_of is None:
                if not page.kept:
                    moves.promote.append(i)
            elif page.kept:
                moves.demote.append((i, verdict))
            elif (pages[verdict.duplicate_of].url != page.duplicate_of
                  or verdict.reason != page.reason or verdict.distance != page.distance):
                moves.repoint.append((i, verdict))
    moves.demote.sort()
    moves.promote.sort()
    moves.repoint.sort()
    return moves


def orphans_of(pages: Sequence[SettlePage], excluded: set[int]) -> frozenset[int]:
    """Dropped pages whose reason to be dropped is gone: dropped against a page a drop rule now
    excludes, or dropped by a drop rule (reason ``override``) that no longer names them. They
    are decided again even alone (then kept). Any other drop with no neighbour within k keeps
    its recorded decision (a refreshed fingerprint is not the one stored)."""
    gone = {pages[i].url for i in excluded}
    return frozenset(i for i, page in enumerate(pages) if not page.kept and i not in excluded
                     and (page.duplicate_of in gone or page.reason == OVERRIDE))


def partnered(content: np.ndarray, fps: np.ndarray, has_fp: np.ndarray, k: int) -> np.ndarray:
    """Which pages may have a duplicate: those whose content key (``uint64``, one per page)
    another page shares (:func:`shared`), or whose SimHash (``fps``, where ``has_fp``) is
    within ``k`` bits of another page's (:func:`near_any`). A superset of the pages of every
    group (:class:`Neighbours` only adds conditions: young fingerprints, drop rules; equal keys
    of unequal hashes only add pages): every page outside it is alone in its group whatever
    the other pages are."""
    _numpy()
    return shared(content) | near_any(fps, has_fp, k)


def near_any(fps: np.ndarray, has_fp: np.ndarray, k: int) -> np.ndarray:
    """Per page, whether it has a SimHash (``fps``, ``uint64``, where ``has_fp``) within ``k``
    bits of another page's.

    Vectorized, without a Python object per page: equal values by one sort; near ones by the
    pigeonhole of :mod:`crawler.content.simindex` (two fingerprints within ``k`` bits agree on
    one of ``k + 1`` blocks), each block one sort, then the distinct fingerprints that share a
    block compared at offsets 1, 2... in that order. The work is ``O(n log n)`` plus the pairs
    that share a block: few at k <= 3 (16-bit blocks), quadratic in ``n`` from k >= 5 or so,
    as in the index's queries. About 40 bytes per page at a time beyond the inputs."""
    _numpy()
    ordered = fps[has_fp].astype(np.uint64, copy=False)
    ordered.sort()
    again = ordered[1:] == ordered[:-1]
    repeats = np.unique(ordered[1:][again])  # equal fingerprints: 0 bits apart
    distinct = ordered[np.concatenate(([True], ~again))] if len(ordered) else ordered
    del ordered, again
    near = np.zeros(len(distinct), np.bool_)
    for start, width in block_layout(k + 1):
        _mark_near(distinct, start, width, k, near)
    close = np.union1d(repeats, distinct[near])
    del distinct, near
    return _members(fps, close) & has_fp


def shared_pure(keys: Sequence[int]) -> list[bool]:
    """:func:`shared` without numpy, for few keys."""
    counts = Counter(keys)
    return [counts[key] > 1 for key in keys]


def near_any_pure(fps: Sequence[int], has_fp: Sequence[bool], k: int) -> list[bool]:
    """:func:`near_any` without numpy, for few pages: every pair of distinct fingerprints."""
    counts = Counter(fp for fp, has in zip(fps, has_fp, strict=True) if has)
    close = {fp for fp, n in counts.items() if n > 1}
    distinct = list(counts)
    for i, a in enumerate(distinct):
        for b in distinct[i + 1:]:
            if (a ^ b).bit_count() <= k:
                close.update((a, b))
    return [has and fp in close for fp, has in zip(fps, has_fp, strict=True)]


def shared(keys: np.ndarray) -> np.ndarray:
    """Per entry of ``keys`` (integers), whether another entry holds the same key."""
    _numpy()
    ordered = np.sort(keys)
    repeats = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    return _members(keys, repeats)


def _members(values: np.ndarray, among: np.ndarray, step: int = 1 << 16) -> np.ndarray:
    """Per entry of ``values``, whether it is in ``among`` (sorted, distinct); ``step``
    entries at a time, so that the lookup holds no array as long as ``values``."""
    found = np.zeros(len(values), np.bool_)
    if len(among):
        for lo in range(0, len(values), step):
            part = values[lo:lo + step]
            at = np.minimum(np.searchsorted(among, part), len(among) - 1)
            found[lo:lo + step] = among[at] == part
    return found


def _mark_near(values: np.ndarray, start: int, width: int, k: int, near: np.ndarray) -> None:
    """Mark in ``near`` the ``values`` (distinct) within ``k`` bits of another one that
    agrees with it on the block ``(start, width)``."""
    dtype = np.uint16 if width <= 16 else np.uint32 if width <= 32 else np.uint64
    block = values >> np.uint64(BITS - start - width)
    block &= np.uint64((1 << width) - 1)
    block = block.astype(dtype)
    order = np.argsort(block, kind="stable")  # a radix sort for 16-bit blocks
    block, ordered = block[order], values[order]
    offset = 1
    active = np.flatnonzero(block[1:] == block[:-1])  # entries like the next one's block
    while len(active):
        close = active[np.bitwise_count(ordered[active] ^ ordered[active + offset]) <= k]
        near[order[close]] = True
        near[order[close + offset]] = True
        offset += 1
        # sorted: an entry unlike the one ``offset`` further is unlike all those after it
        active = active[active + offset < len(ordered)]
        active = active[block[active] == block[active + offset]]

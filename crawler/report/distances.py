"""Distances between the pages of a report and the pipeline's rule replayed on them.

:func:`neighbours` finds, by an exact numpy pass (XOR + popcount, chunked), each page's nearest
distance and its earlier pages within a radius; :func:`effective_edges` corrects those stored
distances by what the crawl recorded and by a person's rules (:class:`Ruled`);
:func:`replay_matches` replays the greedy rule at any threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from crawler.dedup.overrides import DISTINCT
from crawler.review import REASONS
from crawler.urls.urlnorm import InvalidUrl, normalize_url

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from crawler.dedup.overrides import Overrides
    from crawler.report.population import Population
    from crawler.urls.urlnorm import UrlPolicy

NO_NEIGHBOUR = 255  # a nearest distance where no other page has a SimHash
_CHUNK_CELLS = 2_000_000  # pairs per numpy chunk: 16 MB of uint64 at a time
_DECIDED = ("kept", "prior")


@dataclass(frozen=True)
class Ruled:
    """What a person's rules (:mod:`crawler.dedup.overrides`) say of a report's pages, by index:
    ``kept``, the pages a keep rule names (never dropped, at any threshold); ``apart``, the
    pairs (earlier, later) a distinct rule names (never duplicates of each other). ``k``: the
    crawl's threshold, within which a keep rule is what kept a page beside its near twin."""

    k: int
    kept: frozenset[int] = frozenset()
    apart: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of(cls, pop: Population, rules: Overrides, policy: UrlPolicy, k: int) -> Ruled:
        """The rules' pages and pairs among ``pop``'s (URLs compared by their canonical key
        under the crawl's ``policy``, as the crawl compared them)."""
        if not rules:
            return cls(k)
        keys = [_canonical(url, policy) for url in pop.urls]
        at: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            at.setdefault(key, []).append(i)
        apart = {(min(i, j), max(i, j)) for rule in rules if rule.action == DISTINCT
                 for i in at.get(rule.target, ()) for j in at.get(rule.other, ())}
        return cls(k, frozenset(i for i, key in enumerate(keys) if rules.kept(key)),
                   frozenset(apart))

    def parts(self, pop: Population, j: int, i: int, distance: int) -> bool:
        """Pages ``j`` (earlier) and ``i`` are kept apart by a rule: a distinct rule names
        them, or both are kept (one may be prior) within k and a keep rule names one."""
        if (j, i) in self.apart:
            return True
        return distance <= self.k and bool({i, j} & self.kept) and _kept_pair(pop, i, j)


def _canonical(url: str, policy: UrlPolicy) -> str:
    try:
        return normalize_url(url, policy=policy)
    except InvalidUrl:
        return url


def _kept_pair(pop: Population, i: int, j: int) -> bool:
    """A kept page and a kept or prior one: two pages the crawl judged distinct."""
    return (pop.status[i] in _DECIDED and pop.status[j] in _DECIDED
            and "kept" in (pop.status[i], pop.status[j]))


@dataclass
class Neighbours:
    """Nearest distance per page and every earlier page within ``radius`` of each page."""

    nearest: np.ndarray  # uint8, NO_NEIGHBOUR where no other page has a SimHash
    earlier: list[list[tuple[int, int]]]  # per page: (earlier page index, distance)
    #: with ``status``: the smallest distance from a kept page to an earlier kept or prior
    #: page (None when there is no such pair): where a higher threshold starts to drop pages
    closest_kept: int | None = None


def neighbours(simhashes: list[int | None], radius: int,
               status: Sequence[str] | None = None, ruled: Ruled | None = None) -> Neighbours:
    """Exact nearest distances and within-``radius`` earlier neighbours (numpy, chunked).

    Each unordered pair is compared once: a chunk of rows against every later column, the
    column minimum folded into the later pages' nearest distance. Given the pages' ``status``,
    the same pass also finds :attr:`Neighbours.closest_kept`, leaving out the pairs a person's
    rule keeps apart (``ruled``: :meth:`Ruled.parts`) and the pages a keep rule names as the
    later page (never dropped).
    """
    scan = _Scan.of(simhashes, status, ruled)
    start = 0
    while start < len(scan.values):
        start = scan.chunk(start, radius)
    nearest = np.full(len(simhashes), NO_NEIGHBOUR, dtype=np.uint8)
    nearest[scan.index] = scan.nearest
    closest = None if scan.closest == NO_NEIGHBOUR else scan.closest
    return Neighbours(nearest, scan.earlier, closest)


@dataclass
class _Scan:
    """The state of one :func:`neighbours` pass over the pages that have a SimHash."""

    index: np.ndarray  # page index of each fingerprint
    values: np.ndarray  # the fingerprints (uint64)
    src: np.ndarray | None  # per fingerprint: a kept or prior page (given a status)
    dst: np.ndarray | None  # per fingerprint: a kept page (given a status)
    nearest: np.ndarray  # per fingerprint, uint8
    earlier: list[list[tuple[int, int]]]  # per page
    ruled: Ruled | None = None
    held: np.ndarray | None = None  # per fingerprint: a page a keep rule names
    apart: list[tuple[int, int]] = field(default_factory=list)  # fingerprint positions
    closest: int = field(default=NO_NEIGHBOUR)

    @classmethod
    def of(cls, simhashes: list[int | None], status: Sequence[str] | None,
           ruled: Ruled | None) -> _Scan:
        index = np.flatnonzero(np.array([s is not None for s in simhashes], dtype=bool))
        values = np.array([simhashes[i] for i in index], dtype=np.uint64)
        nearest = np.full(len(values), NO_NEIGHBOUR, dtype=np.uint8)
        scan = cls(index, values, None, None, nearest, [[] for _ in simhashes], ruled)
        if status is None:
            return scan
        # an earlier kept or prior page (row), a later kept one (column) not held by a rule
        decided = [status[i] for i in index.tolist()]
        scan.src = np.array([s in _DECIDED for s in decided], dtype=bool)
        scan.held = np.isin(index, list(ruled.kept if ruled else ()))
        scan.dst = np.array([s == "kept" for s in decided], dtype=bool) & ~scan.held
        position = {page: n for n, page in enumerate(index.tolist())}
        scan.apart = [(position[j], position[i]) for j, i in (ruled.apart if ruled else ())
                      if j in position and i in position]
        return scan

    def chunk(self, start: int, radius: int) -> int:
        """Compare the rows of one chunk from ``start`` with every later column; returns the
        first row of the next chunk."""
        rows = max(1, _CHUNK_CELLS // (len(self.values) - start))
        block = self.values[start:start + rows]
        dist = np.bitwise_count(block[:, None] ^ self.values[None, start:])
        own = np.arange(len(block))
        dist[own, own] = NO_NEIGHBOUR  # a page is not its own neighbour
        end = start + len(block)
        np.minimum(self.nearest[start:end], dist.min(axis=1), out=self.nearest[start:end])
        np.minimum(self.nearest[start:], dist.min(axis=0), out=self.nearest[start:])
        self._closest_kept(dist, start, own)
        self._within(dist, start, radius)
        return end

    def _closest_kept(self, dist: np.ndarray, start: int, own: np.ndarray) -> None:
        if self.src is None or self.dst is None:
            return
        pair = self.src[start:start + len(own), None] & self.dst[None, start:]
        pair &= np.arange(dist.shape[1])[None, :] > own[:, None]
        if self.held is not None and self.ruled is not None:  # a keep rule parts them
            pair &= ~(self.held[start:start + len(own), None] & (dist <= self.ruled.k))
        for row, column in self.apart:
            if start <= row < start + len(own):
                pair[row - start, column - start] = False
        if pair.any():
            self.closest = min(self.closest, int(dist[pair].min()))

    def _within(self, dist: np.ndarray, start: int, radius: int) -> None:
        width = dist.shape[1]
        for flat in np.flatnonzero(dist <= radius).tolist():
            i, j = divmod(flat, width)
            if j > i:  # page start+j comes after page start+i
                self.earlier[int(self.index[start + j])].append(
                    (int(self.index[start + i]), int(dist[i, j])))


@dataclass
class Edges:
    """The distances the replay uses: per page, earlier pages within the radius."""

    earlier: list[list[tuple[int, int]]]
    nearest: list[int]  # per page, NO_NEIGHBOUR when it has no fingerprint or no other page
    adjusted: int  # kept pairs within k by stored fingerprints that the crawl judged distinct
    unmatched: int  # dropped pages whose recorded match is not among the pages
    held: frozenset[int] = frozenset()  # pages a keep rule names: never dropped
    ruled: int = 0  # kept pairs within k that a person's rule kept apart


def effective_edges(pop: Population, nb: Neighbours, k: int,
                    ruled: Ruled | None = None) -> Edges:
    """Stored-fingerprint distances corrected by what the crawl recorded and a person's rules.

    The pipeline decides on fingerprints that may differ from the stored ones (template blocks
    learnt later are refreshed in the index only) and on rules beyond distance (a host's first
    pages, a person's rules). So: a pair a person's rule keeps apart (``ruled``:
    :meth:`Ruled.parts`) is no edge at all, at any threshold, and no page's nearest distance;
    a dropped page's recorded match and distance are an edge as recorded; two other kept
    pages within k by stored fingerprints were judged distinct, so their distance counts as
    k + 1 (at least that). With this the replay at the crawl's own k reproduces its decisions.
    """
    earlier = [list(found) for found in nb.earlier]
    ruled = ruled or Ruled(k)
    parted, kept_apart = _parted_pairs(pop, earlier, ruled)
    adjusted = _distinct_kept_pairs(pop, earlier, k)
    unmatched = _recorded_matches(pop, earlier)
    return Edges(earlier, _nearest(pop, nb, earlier, parted), adjusted, unmatched, ruled.kept,
                 kept_apart)


def _parted_pairs(pop: Population, earlier: list[list[tuple[int, int]]], ruled: Ruled,
                  ) -> tuple[dict[int, set[int]], int]:
    """Take out the edges of the pairs a person's rule keeps apart; returns each page's
    parted partners and how many of the pairs are two kept pages within k (those the rule,
    not the threshold, kept apart in this crawl)."""
    parted: dict[int, set[int]] = {}
    kept_apart = 0
    for i, found in enumerate(earlier):
        apart = [(j, d) for j, d in found if ruled.parts(pop, j, i, d)]
        if not apart:
            continue
        found[:] = [edge for edge in found if edge not in apart]
        for j, d in apart:
            parted.setdefault(i, set()).add(j)
            parted.setdefault(j, set()).add(i)
            kept_apart += d <= ruled.k and _kept_pair(pop, i, j)
    return parted, kept_apart


def _distinct_kept_pairs(pop: Population, earlier: list[list[tuple[int, int]]], k: int) -> int:
    """Count two kept pages within k (judged distinct) at k + 1; returns how many pairs."""
    adjusted = 0
    for i, found in enumerate(earlier):
        if pop.status[i] not in _DECIDED:
            continue
        for n, (j, d) in enumerate(found):
            if d <= k and pop.status[j] in _DECIDED and "kept" in (pop.status[i], pop.status[j]):
                found[n] = (j, k + 1)
                adjusted += 1
    return adjusted


def _recorded_matches(pop: Population, earlier: list[list[tuple[int, int]]]) -> int:
    """Make each dropped page's recorded match its edge at the recorded distance; returns how
    many recorded matches are not an earlier page of the population."""
    position = {url: i for i, url in enumerate(pop.urls) if pop.status[i] in _DECIDED}
    unmatched = 0
    for i, found in enumerate(earlier):
        url, recorded = pop.matches[i]
        if pop.status[i] not in REASONS or url is None:
            continue
        match = position.get(url)
        if match is None or match > i:
            unmatched += 1
        else:
            found[:] = [(a, d) for a, d in found if a != match] + [(match, int(recorded or 0))]
    return unmatched


def _nearest(pop: Population, nb: Neighbours, earlier: list[list[tuple[int, int]]],
             parted: dict[int, set[int]]) -> list[int]:
    """Every stored pair within the radius is an edge, so a page with an edge takes its nearest
    distance from its edges (corrected); a page without keeps the numpy pass's value, unless
    a rule parted it from a page: then its nearest page but those, found again."""
    incident: dict[int, int] = {}
    for i, found in enumerate(earlier):
        for j, d in found:
            incident[i] = min(incident.get(i, d), d)
            incident[j] = min(incident.get(j, d), d)
    nearest = [incident.get(i, int(v)) for i, v in enumerate(nb.nearest)]
    alone = [i for i in parted if i not in incident]
    for i, distance in zip(alone, _nearest_but(pop.simhashes, alone, parted), strict=True):
        nearest[i] = distance
    return nearest


def _nearest_but(simhashes: list[int | None], pages: list[int],
                 parted: dict[int, set[int]]) -> list[int]:
    """The nearest distance of each of ``pages`` (each with a SimHash) to any other page but
    its ``parted`` ones (one numpy pass per page: rules name few pages)."""
    index = np.flatnonzero(np.array([s is not None for s in simhashes], dtype=bool))
    values = np.array([simhashes[i] for i in index], dtype=np.uint64)
    out = []
    for page in pages:
        dist = np.bitwise_count(values ^ np.uint64(simhashes[page] or 0))
        dist[np.searchsorted(index, [page, *parted[page]])] = NO_NEIGHBOUR
        out.append(int(dist.min()))
    return out


def replay_matches(pop: Population, earlier: list[list[tuple[int, int]]], threshold: int,
                   held: Collection[int] = frozenset(),
                   ) -> tuple[list[str], list[tuple[int, int] | None]]:
    """The pipeline's greedy decisions at ``threshold`` (a status per page; prior stays, a
    page a keep rule names, ``held``, is kept) and each dropped page's match: (kept page
    index, distance)."""
    kept_hashes: dict[str, int] = {}
    kept = [False] * len(pop)
    out: list[str] = []
    matched: list[tuple[int, int] | None] = []
    for i in range(len(pop)):
        decision, match = ("kept", None) if i in held else _decide(
            pop, i, earlier[i], kept, kept_hashes, threshold)
        if decision in _DECIDED:
            kept[i] = True
            content = pop.content_hashes[i]
            if content:
                kept_hashes.setdefault(content, i)
        out.append(decision)
        matched.append(match)
    return out, matched


def _decide(pop: Population, i: int, found: list[tuple[int, int]], kept: list[bool],
            kept_hashes: dict[str, int], threshold: int) -> tuple[str, tuple[int, int] | None]:
    """Page ``i``'s decision: an exact copy of a kept page, else within ``threshold`` bits of
    one, else kept (a prior document stays prior)."""
    content = pop.content_hashes[i]
    if pop.status[i] == "prior":
        return "prior", None
    if content and content in kept_hashes:
        return "exact_duplicate", (kept_hashes[content], 0)
    near = [(d, j) for j, d in found if kept[j] and d <= threshold]
    if pop.simhashes[i] is not None and near:
        d, j = min(near)
        return "near_duplicate", (j, d)
    return "kept", None

"""Distances between the pages of a report and the pipeline's rule replayed on them.

:func:`neighbours` finds, by an exact numpy pass (XOR + popcount, chunked), each page's nearest
distance and its earlier pages within a radius; :func:`effective_edges` corrects those stored
distances by what the crawl recorded; :func:`replay_matches` replays the greedy rule at any
threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from crawler.review import REASONS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from crawler.report.population import Population

NO_NEIGHBOUR = 255  # a nearest distance where no other page has a SimHash
_CHUNK_CELLS = 2_000_000  # pairs per numpy chunk: 16 MB of uint64 at a time
_DECIDED = ("kept", "prior")


@dataclass
class Neighbours:
    """Nearest distance per page and every earlier page within ``radius`` of each page."""

    nearest: np.ndarray  # uint8, NO_NEIGHBOUR where no other page has a SimHash
    earlier: list[list[tuple[int, int]]]  # per page: (earlier page index, distance)
    #: with ``status``: the smallest distance from a kept page to an earlier kept or prior
    #: page (None when there is no such pair): where a higher threshold starts to drop pages
    closest_kept: int | None = None


def neighbours(simhashes: list[int | None], radius: int,
               status: Sequence[str] | None = None) -> Neighbours:
    """Exact nearest distances and within-``radius`` earlier neighbours (numpy, chunked).

    Each unordered pair is compared once: a chunk of rows against every later column, the
    column minimum folded into the later pages' nearest distance. Given the pages' ``status``,
    the same pass also finds :attr:`Neighbours.closest_kept`.
    """
    scan = _Scan.of(simhashes, status)
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
    closest: int = field(default=NO_NEIGHBOUR)

    @classmethod
    def of(cls, simhashes: list[int | None], status: Sequence[str] | None) -> _Scan:
        index = np.flatnonzero(np.array([s is not None for s in simhashes], dtype=bool))
        values = np.array([simhashes[i] for i in index], dtype=np.uint64)
        src = dst = None
        if status is not None:  # an earlier kept or prior page (row), a later kept one (column)
            decided = [status[i] for i in index.tolist()]
            src = np.array([s in _DECIDED for s in decided], dtype=bool)
            dst = np.array([s == "kept" for s in decided], dtype=bool)
        nearest = np.full(len(values), NO_NEIGHBOUR, dtype=np.uint8)
        return cls(index, values, src, dst, nearest, [[] for _ in simhashes])

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


def effective_edges(pop: Population, nb: Neighbours, k: int) -> Edges:
    """Stored-fingerprint distances corrected by what the crawl recorded.

    The pipeline decides on fingerprints that may differ from the stored ones (template blocks
    learnt later are refreshed in the index only) and on rules beyond distance (a host's first
    pages). So: a dropped page's recorded match and distance are an edge as recorded; two kept
    pages within k by stored fingerprints were judged distinct, so their distance counts as
    k + 1 (at least that). With this the replay at the crawl's own k reproduces its decisions.
    """
    earlier = [list(found) for found in nb.earlier]
    adjusted = _distinct_kept_pairs(pop, earlier, k)
    unmatched = _recorded_matches(pop, earlier)
    return Edges(earlier, _nearest(nb, earlier), adjusted, unmatched)


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


def _nearest(nb: Neighbours, earlier: list[list[tuple[int, int]]]) -> list[int]:
    """Every stored pair within the radius is an edge, so a page with an edge takes its nearest
    distance from its edges (corrected); a page without keeps the numpy pass's value."""
    incident: dict[int, int] = {}
    for i, found in enumerate(earlier):
        for j, d in found:
            incident[i] = min(incident.get(i, d), d)
            incident[j] = min(incident.get(j, d), d)
    return [incident.get(i, int(v)) for i, v in enumerate(nb.nearest)]


def replay_matches(pop: Population, earlier: list[list[tuple[int, int]]], threshold: int,
                   ) -> tuple[list[str], list[tuple[int, int] | None]]:
    """The pipeline's greedy decisions at ``threshold`` (a status per page; prior stays) and
    each dropped page's match: (kept page index, distance)."""
    kept_hashes: dict[str, int] = {}
    kept = [False] * len(pop)
    out: list[str] = []
    matched: list[tuple[int, int] | None] = []
    for i in range(len(pop)):
        decision, match = _decide(pop, i, earlier[i], kept, kept_hashes, threshold)
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

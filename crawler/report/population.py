"""The pages a report is about (:class:`Population`): every page the dedup rule decided on, in
decision order, and a uniform sample of them when there are too many to compare exactly.

A page a person's drop rule dropped (reason ``override``, :mod:`crawler.dedup.overrides`) is not one
of them: the rule dropped it before any comparison, so no page was compared with it and no
threshold would change its fate. The report counts it in its totals on a row of its own
(:func:`overridden`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.outputs.formats import host_of
from crawler.storage import ReviewError, optional_time
from crawler.vocab import OVERRIDE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from crawler.review import CrawlDB


@dataclass
class Population:
    """The pages of a crawl (plus seeded prior documents) in decision order."""

    urls: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    content_hashes: list[str | None] = field(default_factory=list)
    simhashes: list[int | None] = field(default_factory=list)
    #: kept | exact_duplicate | near_duplicate | soft_404 | prior (a document of another
    #: crawl)
    status: list[str] = field(default_factory=list)
    #: a dropped page's recorded match: (duplicate_of URL, distance); (None, None) otherwise
    matches: list[tuple[str | None, int | None]] = field(default_factory=list)
    titles: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.urls)

    def append(self, row: dict[str, Any], status: str, content_hash: str | None) -> None:
        """One more page: a ``documents`` or ``dropped`` row (fingerprints unsigned)."""
        self.urls.append(row["url"])
        self.hosts.append(host_of(row["url"]))
        self.content_hashes.append(content_hash)
        self.simhashes.append(row.get("simhash"))
        self.status.append(status)
        self.matches.append((row.get("duplicate_of"), row.get("distance")))
        self.titles.append(row.get("title"))


def crawl_id_list(crawl_id: int | Sequence[int]) -> list[int]:
    """One crawl id or the ids of one job's crawls, as a sorted list without repeats."""
    ids = sorted({int(crawl_id)} if isinstance(crawl_id, int) else {int(i) for i in crawl_id})
    if not ids:
        raise ReviewError("no crawl id given: nothing to report")
    return ids


def load_drops(db: CrawlDB, ids: list[int]) -> list[dict[str, Any]]:
    """The ``dropped`` rows of the crawls ``ids``: what the population, the decision list and
    the canonical-swap count are built from (read once)."""
    return db.crawl_drops(ids)


def overridden(drops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The drops a person's rule made (reason ``override``): never in the population."""
    return [row for row in drops if row["reason"] == OVERRIDE]


def load_population(db: CrawlDB, crawl_id: int | Sequence[int], persist: bool,
                    drops: list[dict[str, Any]] | None = None) -> Population:
    """Every page of ``crawl_id`` (one id, or a job's ids: their union) but those a person's
    rule dropped, and prior documents (stored by other crawls) when ``persist``, in decision
    order. ``drops`` are the crawls'
    :func:`load_drops` rows when the caller has read them already."""
    ids = crawl_id_list(crawl_id)
    docs = db.document_rows()
    if drops is None:
        drops = load_drops(db, ids)
    # An exact copy has its kept page's content hash by definition (older rows lack their own).
    doc_hash = {row["url"]: row["content_hash"] for row in docs}
    pop = Population()
    for row, status in _decision_order(docs, drops, ids, persist):
        content = row.get("content_hash")
        if content is None and status == "exact_duplicate":
            content = doc_hash.get(row["duplicate_of"])
        pop.append(row, status, content)
    return pop


def _decision_order(docs: list[dict[str, Any]], drops: list[dict[str, Any]], ids: list[int],
                    persist: bool) -> list[tuple[dict[str, Any], str]]:
    """``(row, status)`` of every page: prior documents first, then the crawls' pages by the
    time they were decided (``fetched_at`` of a kept page, ``dropped_at`` of a dropped one)."""
    entries = []
    for row in docs:
        status = "kept" if row["crawl_id"] in ids else "prior"
        if status == "prior" and not persist:
            continue
        rank = 0 if status == "prior" else 1
        entries.append((rank, _epoch(row["fetched_at"]), 0, row["id"], row, status))
    for row in drops:
        if row["reason"] != OVERRIDE:
            entries.append((1, _epoch(row["dropped_at"]), 1, row["id"], row, row["reason"]))
    entries.sort(key=lambda e: e[:4])
    return [(row, status) for *_, row, status in entries]


def _epoch(value: object) -> float:
    when = optional_time(value)
    return when.timestamp() if when else 0.0


def sample_population(pop: Population, limit: int, seed: int = 0) -> Population:
    """A uniform random sample of ``limit`` pages, decision order kept (``pop`` when smaller)."""
    if len(pop) <= limit:
        return pop
    keep = sorted(random.Random(seed).sample(range(len(pop)), limit))
    out = Population()
    for name in ("urls", "hosts", "content_hashes", "simhashes", "status", "matches", "titles"):
        values = getattr(pop, name)
        setattr(out, name, [values[i] for i in keep])
    return out

"""The numbers of ``scrapy dedupreport``: decisions to check, distances and a what-if.

:func:`build_report` reads one crawl, or the crawls of one JOBDIR job reported as one (a list of
ids: the union of their documents and drops, settings and threshold from the latest), from a
:class:`crawler.review.CrawlDB` and returns plain JSON-ready data (``--format json`` prints it as
is); :func:`render_html` (:mod:`crawler.report_html`) turns the same data into one
self-contained HTML page (inline CSS and SVG, no script, no external asset).

The population is every page the crawl decided on: its kept ``documents`` and its ``dropped``
rows, in decision order (``fetched_at`` of a kept page, ``dropped_at`` of a dropped one). With
``SIMHASH_PERSIST`` on, documents stored by other crawls were in the index from the start and are
seeded as kept (never counted, never dropped).

* **Nearest distance**: for each page with a SimHash, the Hamming distance to the nearest other
  page of the population (kept or dropped), by an exact numpy pass (XOR + popcount, chunked).
* **What-if**: for each threshold t in 0..max(k+8, first change above k), at most 64, the
  pipeline's greedy rule replayed in decision
  order: a page whose content hash equals a kept page's is an exact duplicate; else a page with
  a SimHash within t bits of a kept page's is a near duplicate; else it is kept. Distances are
  the stored fingerprints' corrected by the crawl's record (:func:`effective_edges`: a drop's
  recorded match counts at its recorded distance; two kept pages within k count as k + 1), so
  at the crawl's own k the replay reproduces the recorded decisions (``mismatches`` counts the
  pages where it does not, e.g. a drop whose kept page was deleted).
  Each row lists the pages whose decision differs from the row one bit closer to k (at most
  :data:`CHANGES_LISTED`). The first change above k is the smallest distance from a kept page
  to an earlier kept page (never below k + 1), found by an exact numpy pass, so the table always
  reaches it (unless past 64 bits, or the sample has over :data:`EXTEND_LIMIT` pages: then it
  stops at k + 8 and states the distance).
* **Near misses**: pairs of kept pages at distance k+1..k+3: what a looser threshold would drop.
* **Decisions to check** (:func:`decisions`): the near drops closest to k first, then every
  exact-duplicate group with its size, each with both titles, the lines only in each page and
  the ``scrapy dropped --explain`` command; at most :data:`DECISIONS_LISTED`, the rest counted.

Exact up to :data:`EXACT_LIMIT` pages; above that the distances and the what-if use a uniform
random sample (fixed seed) of that many pages in decision order, stated in ``sample`` (pairs are
then found only when both pages are sampled, so sampled counts understate). Totals and per-host
counts always cover every row. A re-crawl moves a document to the newest crawl, so a report on an
older crawl misses the pages fetched again since.
"""

from __future__ import annotations

import logging
import random
import shlex
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa

from crawler import review
from crawler.storage import chunked

if TYPE_CHECKING:
    from collections.abc import Sequence

    from crawler.review import CrawlDB

logger = logging.getLogger(__name__)

EXACT_LIMIT = 100_000
WHATIF_EXTRA = 8  # what-if rows at least up to k + 8 (and to the first change above k)
NEAR_MISS_EXTRA = 3  # near misses at k+1..k+3
NEAR_MISS_LISTED = 50
DECISIONS_LISTED = 100  # near drops listed in "decisions to check"
GROUPS_LISTED = 50  # exact-duplicate groups listed, each with up to COPIES_LISTED copies
COPIES_LISTED = 5
LARGEST_GROUPS = 10
CHANGES_LISTED = 10  # pages listed per what-if row
EXTEND_LIMIT = 20_000  # pages above which the what-if is not extended past k + 8
DIFF_CHARS = 120  # one line of a difference, cut to this many characters
_CHUNK_CELLS = 2_000_000  # pairs per numpy chunk: 16 MB of uint64 at a time
_NO_NEIGHBOUR = 255


@dataclass
class Population:
    """The pages of a crawl (plus seeded prior documents) in decision order."""

    urls: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    content_hashes: list[str | None] = field(default_factory=list)
    simhashes: list[int | None] = field(default_factory=list)
    #: kept | exact_duplicate | near_duplicate | prior (a document of another crawl)
    status: list[str] = field(default_factory=list)
    #: a dropped page's recorded match: (duplicate_of URL, distance); (None, None) otherwise
    matches: list[tuple[str | None, int | None]] = field(default_factory=list)
    titles: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.urls)


def _epoch(value: object) -> float:
    when = review.parse_time(value)
    return when.timestamp() if when else 0.0


def crawl_id_list(crawl_id: int | Sequence[int]) -> list[int]:
    """One crawl id or the ids of one job's crawls, as a sorted list without repeats."""
    ids = sorted({int(crawl_id)} if isinstance(crawl_id, int) else {int(i) for i in crawl_id})
    if not ids:
        raise review.ReviewError("no crawl id given: nothing to report")
    return ids


def _optional(table: sa.Table, *names: str) -> list[sa.Column[Any]]:
    """The columns of ``names`` the table has (older databases lack some)."""
    return [table.c[name] for name in names if name in table.c]


def load_drops(db: CrawlDB, ids: list[int]) -> list[dict[str, Any]]:
    """The ``dropped`` rows of the crawls ``ids``: what the population, the decision list and
    the canonical-swap count are built from (read once)."""
    x = db.dropped_table
    return db._rows(sa.select(x.c.url, x.c.reason, x.c.simhash, x.c.dropped_at, x.c.id,
                              x.c.duplicate_of, x.c.distance,
                              *_optional(x, "content_hash", "title", "rule"))
                    .where(x.c.crawl_id.in_(ids)))


def load_population(db: CrawlDB, crawl_id: int | Sequence[int], persist: bool,
                    drops: list[dict[str, Any]] | None = None) -> Population:
    """Every page of ``crawl_id`` (one id, or a job's ids: their union), and prior documents
    (stored by other crawls) when ``persist``, in decision order. ``drops`` are the crawls'
    :func:`load_drops` rows when the caller has read them already."""
    ids = crawl_id_list(crawl_id)
    d = db.documents
    docs = db._rows(sa.select(d.c.url, d.c.content_hash, d.c.simhash, d.c.fetched_at,
                              d.c.crawl_id, d.c.id, *_optional(d, "title")))
    if drops is None:
        drops = load_drops(db, ids)
    entries = []
    for row in docs:
        status = "kept" if row["crawl_id"] in ids else "prior"
        if status == "prior" and not persist:
            continue
        rank = 0 if status == "prior" else 1
        entries.append((rank, _epoch(row["fetched_at"]), 0, row["id"], row, status))
    for row in drops:
        entries.append((1, _epoch(row["dropped_at"]), 1, row["id"], row, row["reason"]))
    entries.sort(key=lambda e: e[:4])
    # An exact copy has its kept page's content hash by definition (older rows lack their own).
    doc_hash = {row["url"]: row["content_hash"] for row in docs}
    pop = Population()
    for *_, row, status in entries:
        pop.urls.append(row["url"])
        pop.hosts.append(review.host_of(row["url"]))
        content = row.get("content_hash")
        if content is None and status == "exact_duplicate":
            content = doc_hash.get(row["duplicate_of"])
        pop.content_hashes.append(content)
        pop.simhashes.append(review.unsigned64(row.get("simhash")))
        pop.status.append(status)
        pop.matches.append((row.get("duplicate_of"), row.get("distance")))
        pop.titles.append(row.get("title"))
    return pop


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


@dataclass
class Neighbours:
    """Nearest distance per page and every earlier page within ``radius`` of each page."""

    nearest: np.ndarray  # uint8, _NO_NEIGHBOUR where no other page has a SimHash
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
    n = len(simhashes)
    index = np.flatnonzero(np.array([s is not None for s in simhashes], dtype=bool))
    values = np.array([simhashes[i] for i in index], dtype=np.uint64)
    m = len(values)
    closest = _NO_NEIGHBOUR
    if status is not None:  # an earlier kept or prior page (row) and a later kept page (column)
        decided = [status[i] for i in index.tolist()]
        src = np.array([s in ("kept", "prior") for s in decided], dtype=bool)
        dst = np.array([s == "kept" for s in decided], dtype=bool)
    nearest_c = np.full(m, _NO_NEIGHBOUR, dtype=np.uint8)
    earlier: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    start = 0
    while start < m:
        rows = max(1, _CHUNK_CELLS // (m - start))
        block = values[start:start + rows]
        dist = np.bitwise_count(block[:, None] ^ values[None, start:])
        own = np.arange(len(block))
        dist[own, own] = _NO_NEIGHBOUR  # a page is not its own neighbour
        np.minimum(nearest_c[start:start + len(block)], dist.min(axis=1),
                   out=nearest_c[start:start + len(block)])
        np.minimum(nearest_c[start:], dist.min(axis=0), out=nearest_c[start:])
        width = m - start
        if status is not None:
            pair = src[start:start + len(block), None] & dst[None, start:]
            pair &= np.arange(width)[None, :] > own[:, None]
            if pair.any():
                closest = min(closest, int(dist[pair].min()))
        for flat in np.flatnonzero(dist <= radius).tolist():
            i, j = divmod(flat, width)
            if j > i:  # page start+j comes after page start+i
                earlier[int(index[start + j])].append((int(index[start + i]), int(dist[i, j])))
        start += len(block)
    nearest = np.full(n, _NO_NEIGHBOUR, dtype=np.uint8)
    nearest[index] = nearest_c
    return Neighbours(nearest, earlier, None if closest == _NO_NEIGHBOUR else closest)


@dataclass
class Edges:
    """The distances the replay uses: per page, earlier pages within the radius."""

    earlier: list[list[tuple[int, int]]]
    nearest: list[int]  # per page, _NO_NEIGHBOUR when it has no fingerprint or no other page
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
    position = {url: i for i, url in enumerate(pop.urls) if pop.status[i] in ("kept", "prior")}
    earlier = [list(found) for found in nb.earlier]
    adjusted = unmatched = 0
    for i, found in enumerate(earlier):
        if pop.status[i] in ("kept", "prior"):
            for n, (j, d) in enumerate(found):
                if d <= k and pop.status[j] in ("kept", "prior") and "kept" in (
                        pop.status[i], pop.status[j]):
                    found[n] = (j, k + 1)
                    adjusted += 1
        url, recorded = pop.matches[i]
        if pop.status[i] in review.REASONS and url is not None:
            match = position.get(url)
            if match is None or match > i:
                unmatched += 1
            else:
                found[:] = [(a, d) for a, d in found if a != match] + [
                    (match, int(recorded or 0))]
    # Every stored pair within the radius is an edge, so a page with an edge takes its nearest
    # distance from its edges (corrected); a page without keeps the numpy pass's value.
    incident: dict[int, int] = {}
    for i, found in enumerate(earlier):
        for j, d in found:
            incident[i] = min(incident.get(i, d), d)
            incident[j] = min(incident.get(j, d), d)
    nearest = [incident.get(i, int(v)) for i, v in enumerate(nb.nearest)]
    return Edges(earlier, nearest, adjusted, unmatched)


def replay_matches(pop: Population, earlier: list[list[tuple[int, int]]], threshold: int,
                   ) -> tuple[list[str], list[tuple[int, int] | None]]:
    """The pipeline's greedy decisions at ``threshold`` (a status per page; prior stays) and
    each dropped page's match: (kept page index, distance)."""
    kept_hashes: dict[str, int] = {}
    kept = [False] * len(pop)
    out: list[str] = []
    matched: list[tuple[int, int] | None] = []
    for i, status in enumerate(pop.status):
        content = pop.content_hashes[i]
        match = None
        if status == "prior":
            decision = "prior"
        elif content and content in kept_hashes:
            decision, match = "exact_duplicate", (kept_hashes[content], 0)
        else:
            near = [(d, j) for j, d in earlier[i] if kept[j] and d <= threshold]
            if pop.simhashes[i] is not None and near:
                d, j = min(near)
                decision, match = "near_duplicate", (j, d)
            else:
                decision = "kept"
        if decision in ("kept", "prior"):
            kept[i] = True
            if content:
                kept_hashes.setdefault(content, i)
        out.append(decision)
        matched.append(match)
    return out, matched


def _truthy(value: object, default: bool = True) -> bool:
    if value is None or value == "":
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def build_report(db: CrawlDB, crawl_id: int | Sequence[int] | None = None, *,
                 exact_limit: int = EXACT_LIMIT, seed: int = 0,
                 db_arg: str | None = None) -> dict[str, Any]:
    """Every number of the report for one crawl, or one job's crawls (a list of ids).

    ``crawl_id`` None means the latest crawl. For a list, pages and drops are the union of the
    crawls', settings and threshold the latest crawl's, URL-dedup counters summed.
    Raises :class:`crawler.review.ReviewError` for an unknown crawl or one without pages.
    ``db_arg`` is put in the ``scrapy dropped`` commands as ``--db``.
    """
    crawls = ([db.crawl(None)] if crawl_id is None
              else [db.crawl(i) for i in crawl_id_list(crawl_id)])
    ids = [c["id"] for c in crawls]
    crawl = crawls[-1]
    settings = crawl["settings"]
    k, blocks = review.crawl_thresholds(settings)
    drops = load_drops(db, ids)
    pop = load_population(db, ids, _truthy(settings.get("SIMHASH_PERSIST")), drops)
    counts = Counter(s for s in pop.status)
    own = len(pop) - counts["prior"]
    if not own:
        named = f"crawl {ids[0]}" if len(ids) == 1 else "crawls " + ", ".join(map(str, ids))
        raise review.ReviewError(f"{named} has no pages (nothing kept or dropped): "
                                 "nothing to report")
    sample = sample_population(pop, exact_limit, seed)
    radius = min(64, k + WHATIF_EXTRA)
    nb = neighbours(sample.simhashes, radius, sample.status)
    # Replaying above k changes nothing below the closest kept pair; kept pairs within k count
    # as k + 1, as in effective_edges.
    first_change = None if nb.closest_kept is None else max(nb.closest_kept, k + 1)
    if first_change is not None and first_change > radius and len(sample) <= EXTEND_LIMIT:
        radius = min(64, first_change)  # extend the what-if to the first change: one more pass
        nb = neighbours(sample.simhashes, radius)
    edges = effective_edges(sample, nb, k)
    dropped = counts["exact_duplicate"] + counts["near_duplicate"]
    what_if = _what_if(sample, edges, k, radius)
    what_if["first_change_above"] = first_change
    return {
        "crawl": _crawl_info(crawl, ids),
        "database": review.masked(db.url),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": settings,
        "threshold": k,
        "blocks": blocks,
        "totals": {"pages": own, "kept": counts["kept"], "dropped": dropped,
                   "exact_duplicate": counts["exact_duplicate"],
                   "near_duplicate": counts["near_duplicate"],
                   "duplicate_rate": round(dropped / own, 4),
                   "prior_documents": counts["prior"],
                   "canonical_swaps": sum(r.get("rule") == "canonical" for r in drops)},
        "by_reason": {r: counts[r] for r in review.REASONS},
        "by_host": _by_host(pop),
        "sample": {"exact": len(sample) == len(pop), "pages": len(pop),
                   "sample_size": len(sample), "limit": exact_limit, "seed": seed},
        "histogram": _histogram(sample, edges, k, radius),
        "what_if": what_if,
        "near_misses": _near_misses(sample, edges, k, min(64, k + NEAR_MISS_EXTRA), db_arg),
        "decisions": decisions(db, drops, k, db_arg),
        "largest_groups": largest_groups(pop),
        "url_dedup": url_dedup([c["stats"] for c in crawls], settings),
        "stats": {key: value for key, value in sorted(crawl["stats"].items())
                  if key.startswith(("dedup/", "dupefilter/", "storage/", "urlnorm/"))
                  or key in ("item_scraped_count", "item_dropped_count",
                             "response_received_count", "elapsed_time_seconds")},
    }


def _crawl_info(crawl: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    info = {key: crawl.get(key) for key in ("id", "spider", "finish_reason")}
    info["ids"] = ids
    for key in ("started_at", "finished_at"):
        info[key] = review.iso_utc(crawl.get(key))
    info["seeds"] = crawl.get("seeds") if isinstance(crawl.get("seeds"), list) else []
    return info


def _by_host(pop: Population) -> list[dict[str, Any]]:
    table: dict[str, Counter[str]] = {}
    for host, status in zip(pop.hosts, pop.status, strict=True):
        if status != "prior":
            table.setdefault(host, Counter())[status] += 1
    rows = []
    for host, c in table.items():
        pages, dropped = sum(c.values()), c["exact_duplicate"] + c["near_duplicate"]
        rows.append({"host": host, "pages": pages, "kept": c["kept"],
                     "exact_duplicate": c["exact_duplicate"],
                     "near_duplicate": c["near_duplicate"],
                     "duplicate_rate": round(dropped / pages, 4)})
    return sorted(rows, key=lambda r: (-r["pages"], r["host"]))


def _histogram(pop: Population, edges: Edges, k: int, radius: int) -> dict[str, Any]:
    kept: Counter[int] = Counter()
    dropped: Counter[int] = Counter()
    without = isolated = 0
    for i, status in enumerate(pop.status):
        if status == "prior":
            continue
        if pop.simhashes[i] is None:
            without += 1
            continue
        distance = edges.nearest[i]
        if distance == _NO_NEIGHBOUR:
            isolated += 1
        else:
            (kept if status == "kept" else dropped)[distance] += 1
    top = max([*kept, *dropped, radius])
    buckets = [{"distance": d, "kept": kept[d], "dropped": dropped[d]} for d in range(top + 1)]
    hist = {"buckets": buckets, "threshold": k,
            "pages": sum(kept.values()) + sum(dropped.values()),
            "without_fingerprint": without, "isolated": isolated,
            "zoom": [max(0, k - 3), min(top, k + WHATIF_EXTRA)]}
    hist["advice"] = advice(hist)
    return hist


def advice(hist: dict[str, Any]) -> str:
    """One sentence on the gap around the threshold, read off the histogram."""
    k = hist["threshold"]
    used = [b["distance"] for b in hist["buckets"] if b["kept"] + b["dropped"]]
    below = [d for d in used if d <= k]
    above = [d for d in used if d > k]
    if not above:
        return (f"No page is farther than {k} bits from its nearest neighbour: the crawl is "
                "mostly duplicates, or too small to judge.")
    low, high = (max(below) if below else 0), min(above)
    if high - low > 1:
        return (f"No page has its nearest neighbour at {low + 1}..{high - 1} bits: any "
                f"threshold from {low} to {high - 1} makes the same decisions on this crawl; "
                f"the closest distinct pages are {high} bits apart.")
    return (f"Pages sit on both sides of k = {k} ({low} and {high} bits) with no gap: check "
            "the near misses and the drops at the line before changing it.")


def _what_if(pop: Population, edges: Edges, k: int, radius: int) -> dict[str, Any]:
    actual = sum(s in review.REASONS for s in pop.status)
    replays = [replay_matches(pop, edges.earlier, t) for t in range(radius + 1)]
    rows, mismatches = [], 0
    for t, (decisions_t, _) in enumerate(replays):
        c = Counter(decisions_t)
        drops = c["exact_duplicate"] + c["near_duplicate"]
        rows.append({"threshold": t, "dropped": drops, "exact_duplicate": c["exact_duplicate"],
                     "near_duplicate": c["near_duplicate"], "kept": c["kept"],
                     "change": drops - actual, "actual": t == k,
                     "changes": _changes(pop, replays, t, k)})
        if t == k:
            mismatches = sum(a != b for a, b in zip(decisions_t, pop.status, strict=True))
    return {"actual_dropped": actual, "rows": rows, "mismatches": mismatches,
            "adjusted_pairs": edges.adjusted, "unmatched_drops": edges.unmatched}


def _changes(pop: Population, replays: list[tuple[list[str], list[tuple[int, int] | None]]],
             t: int, k: int) -> dict[str, Any]:
    """The pages decided differently at ``t`` than one bit closer to ``k`` (none at k)."""
    if t == k or not 0 <= (t - 1 if t > k else t + 1) < len(replays):
        return {"dropped": [], "kept": [], "dropped_count": 0, "kept_count": 0}
    here, matched = replays[t]
    there = replays[t - 1 if t > k else t + 1][0]
    newly_dropped = [i for i, (a, b) in enumerate(zip(here, there, strict=True))
                     if a in review.REASONS and b not in review.REASONS]
    newly_kept = [i for i, (a, b) in enumerate(zip(here, there, strict=True))
                  if a == "kept" and b in review.REASONS]
    listed_drops = []
    for i in newly_dropped[:CHANGES_LISTED]:
        j, distance = matched[i] or (None, None)
        listed_drops.append({"url": pop.urls[i], "title": pop.titles[i], "reason": here[i],
                             "distance": distance,
                             "duplicate_of": None if j is None else pop.urls[j],
                             "duplicate_title": None if j is None else pop.titles[j]})
    return {"dropped": listed_drops,
            "kept": [{"url": pop.urls[i], "title": pop.titles[i]}
                     for i in newly_kept[:CHANGES_LISTED]],
            "dropped_count": len(newly_dropped), "kept_count": len(newly_kept)}


def _near_misses(pop: Population, edges: Edges, k: int, radius: int,
                 db_arg: str | None) -> dict[str, Any]:
    pairs = []
    for i, found in enumerate(edges.earlier):
        for j, distance in found:
            both_kept = {pop.status[i], pop.status[j]} <= {"kept", "prior"}
            if k < distance <= radius and both_kept and "kept" in (pop.status[i], pop.status[j]):
                pairs.append((distance, j, i))
    pairs.sort(key=lambda p: (p[0], pop.urls[p[1]], pop.urls[p[2]]))
    listed = [{"distance": d, "a": pop.urls[a], "b": pop.urls[b],
               "a_title": pop.titles[a], "b_title": pop.titles[b],
               "command": _command(db_arg, "--pair", pop.urls[a], pop.urls[b])}
              for d, a, b in pairs[:NEAR_MISS_LISTED]]
    by_distance = Counter(d for d, _, _ in pairs)
    return {"count": len(pairs), "by_distance": {str(d): by_distance[d]
                                                  for d in range(k + 1, radius + 1)},
            "listed": listed}


def _command(db_arg: str | None, option: str, *urls: str) -> str:
    db_part = f" --db {shlex.quote(db_arg)}" if db_arg else ""
    return f"scrapy dropped{db_part} {option} " + " ".join(shlex.quote(u) for u in urls)


# --- decisions to check ----------------------------------------------------------------------


def decisions(db: CrawlDB, rows: list[dict[str, Any]], k: int,
              db_arg: str | None = None) -> dict[str, Any]:
    """The drops a person should check: near drops closest to ``k`` first, exact groups.

    Near drops are sorted by distance (largest first), then URL; at most
    :data:`DECISIONS_LISTED` are listed with both titles, a one-line difference (the first line
    only in each page, from :func:`crawler.review.compare`) and the ``--explain`` command.
    Exact copies are grouped by the kept page, largest group first, at most
    :data:`GROUPS_LISTED` groups of which :data:`COPIES_LISTED` copies each.
    """
    near = sorted((r for r in rows if r["reason"] == "near_duplicate"),
                  key=lambda r: (-(r["distance"] or 0), r["url"]))
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in sorted((r for r in rows if r["reason"] == "exact_duplicate"),
                      key=lambda r: r["url"]):
        groups.setdefault(row["duplicate_of"] or "", []).append(row)
    ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))[:GROUPS_LISTED]
    listed_near = near[:DECISIONS_LISTED]
    wanted = listed_near + [c for _, copies in ordered for c in copies[:COPIES_LISTED]]
    texts = _drop_texts(db, [r["id"] for r in wanted])
    kept = _kept_pages(db, {r["duplicate_of"] for r in wanted if r["duplicate_of"]})
    by_distance = Counter(r["distance"] for r in near)
    return {
        "near": [_decision(r, texts, kept, k, db_arg) for r in listed_near],
        "near_count": len(near),
        "near_by_distance": {str(d): by_distance[d] for d in sorted(by_distance, reverse=True)
                             if d is not None},
        "exact_groups": [_exact_group(url, copies, texts, kept, k, db_arg)
                         for url, copies in ordered],
        "exact_group_count": len(groups),
        "exact_count": sum(len(c) for c in groups.values()),
        "listed_limit": DECISIONS_LISTED,
    }


def _drop_texts(db: CrawlDB, ids: list[int]) -> dict[int, str]:
    x = db.dropped_table
    if "text" not in x.c:
        return {}
    out: dict[int, str] = {}
    for chunk in chunked(ids):
        for row in db._rows(sa.select(x.c.id, x.c.text).where(x.c.id.in_(chunk))):
            out[row["id"]] = row["text"] or ""
    return out


def _kept_pages(db: CrawlDB, urls: set[str]) -> dict[str, dict[str, Any]]:
    """Kept documents by URL, found on ``url`` or ``canonical_url`` (a drop names either)."""
    d = db.documents
    columns = [d.c.url, *_optional(d, "canonical_url", "title", "text", "content_hash")]
    out: dict[str, dict[str, Any]] = {}
    for name in ("url", "canonical_url"):
        missing = sorted(u for u in urls if u not in out)
        if name not in d.c or not missing:
            continue
        for chunk in chunked(missing):
            for row in db._rows(sa.select(*columns).where(d.c[name].in_(chunk))):
                out.setdefault(row[name], row)
    return out


def _decision(row: dict[str, Any], texts: dict[int, str], kept: dict[str, dict[str, Any]],
              k: int, db_arg: str | None) -> dict[str, Any]:
    match = kept.get(row["duplicate_of"] or "")
    text = texts.get(row["id"])
    return {"url": row["url"], "title": row.get("title"), "reason": row["reason"],
            "distance": row["distance"], "rule": row.get("rule"),
            "duplicate_of": row["duplicate_of"],
            "duplicate_title": match.get("title") if match else None,
            "difference": difference(text, match.get("text") if match else None, k),
            "command": _command(db_arg, "--explain", row["url"])}


def _exact_group(url: str, copies: list[dict[str, Any]], texts: dict[int, str],
                 kept: dict[str, dict[str, Any]], k: int, db_arg: str | None) -> dict[str, Any]:
    match = kept.get(url)
    return {"duplicate_of": url, "duplicate_title": match.get("title") if match else None,
            "size": 1 + len(copies), "copies": [_decision(r, texts, kept, k, db_arg)
                                                for r in copies[:COPIES_LISTED]]}


def difference(dropped: str | None, kept: str | None, k: int) -> dict[str, Any]:
    """The text lines only in each page: the first of each (cut), and how many there are.

    ``None`` on a side whose text is not stored (an older database, a deleted kept page).
    """
    if dropped is None or kept is None:
        return {"only_dropped": None, "only_kept": None, "more_dropped": 0, "more_kept": 0,
                "same_text": None, "summary": "text not stored: run the --explain command"}
    a = review.Page("", None, dropped, None, None, kept=False)
    b = review.Page("", None, kept, None, None, kept=True)
    result = review.compare(a, b, "near_duplicate", None, k, k + 1)
    only_a, only_b = list(result.lines_only_dropped), list(result.lines_only_kept)
    out = {"only_dropped": _cut(only_a[0]) if only_a else None,
           "only_kept": _cut(only_b[0]) if only_b else None,
           "more_dropped": max(0, len(only_a) - 1), "more_kept": max(0, len(only_b) - 1),
           "same_text": result.identical_text}
    out["summary"] = _summary(out)
    return out


def _cut(line: str) -> str:
    return line if len(line) <= DIFF_CHARS else line[:DIFF_CHARS - 1] + "…"


def _summary(diff: dict[str, Any]) -> str:
    if diff["same_text"]:
        return "same text"
    if not diff["only_dropped"] and not diff["only_kept"]:
        return "same lines, in another order or spacing"
    parts = []
    for side, label in (("dropped", "only in dropped"), ("kept", "only in kept")):
        line = diff[f"only_{side}"]
        if line:
            more = diff[f"more_{side}"]
            parts.append(f"{label}: “{line}”" + (f" (+{more} more)" if more else ""))
    return "; ".join(parts)


def largest_groups(pop: Population, limit: int = LARGEST_GROUPS) -> dict[str, Any]:
    """Kept pages with the most drops: size (the kept page and its drops) and reasons."""
    titles = {url: pop.titles[i] for i, url in enumerate(pop.urls)
              if pop.status[i] in ("kept", "prior")}
    groups: dict[str, Counter[str]] = {}
    for i, status in enumerate(pop.status):
        url = pop.matches[i][0]
        if status in review.REASONS and url:
            groups.setdefault(url, Counter())[status] += 1
    ordered = sorted(groups.items(), key=lambda g: (-sum(g[1].values()), g[0]))
    return {"count": len(groups),
            "listed": [{"url": url, "title": titles.get(url), "size": 1 + sum(c.values()),
                        "exact_duplicate": c["exact_duplicate"],
                        "near_duplicate": c["near_duplicate"]} for url, c in ordered[:limit]]}


def url_dedup(stats: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """The URL-dedup counters of the crawls' stats (summed over a job's crawls).

    The crawl counts no stripped tracking parameters (no stat), so the stripped names
    (``URLNORM_STRIP_PARAMS``) are given instead.
    """
    total: Counter[str] = Counter()
    for one in stats:
        for key, value in one.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] += value
    keys = ["dupefilter/filtered", "dedup/links_extracted", "dedup/links_skipped_seen",
            "dedup/links_not_http", "dedup/links_offsite", "dedup/bloom/false_positives_avoided"]
    prefixed = sorted(key for key in total if key.startswith(("urlnorm/trap/", "urlnorm/dropped/")))
    strip = settings.get("URLNORM_STRIP_PARAMS")
    return {"counters": {key: total.get(key, 0) for key in [*keys, *prefixed]},
            "traps": sum(total[key] for key in prefixed if key.startswith("urlnorm/trap/")),
            "filtered_total": total["dupefilter/filtered"] + total["dedup/links_skipped_seen"],
            "strip_params": list(strip) if isinstance(strip, (list, tuple)) else
            [p for p in str(strip or "").split(",") if p]}


def render_html(data: dict[str, Any]) -> str:
    """One self-contained HTML page of ``data`` (see :mod:`crawler.report_html`)."""
    from crawler.report_html import render_html as render

    return render(data)

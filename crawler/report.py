"""The numbers of ``scrapy dedupreport``: totals, nearest-neighbour distances and a what-if.

:func:`build_report` reads one crawl from a :class:`crawler.review.CrawlDB` and returns plain
JSON-ready data (``--format json`` prints it as is); :func:`render_html` turns the same data into
one self-contained HTML page (inline CSS and SVG, no script, no external asset).

The population is every page the crawl decided on: its kept ``documents`` and its ``dropped``
rows, in decision order (``fetched_at`` of a kept page, ``dropped_at`` of a dropped one). With
``SIMHASH_PERSIST`` on, documents stored by other crawls were in the index from the start and are
seeded as kept (never counted, never dropped).

* **Nearest distance**: for each page with a SimHash, the Hamming distance to the nearest other
  page of the population (kept or dropped), by an exact numpy pass (XOR + popcount, chunked).
* **What-if**: for each threshold t in 0..k+3 the pipeline's greedy rule replayed in decision
  order: a page whose content hash equals a kept page's is an exact duplicate; else a page with
  a SimHash within t bits of a kept page's is a near duplicate; else it is kept. Distances are
  the stored fingerprints' corrected by the crawl's record (:func:`effective_edges`: a drop's
  recorded match counts at its recorded distance; two kept pages within k count as k + 1), so
  at the crawl's own k the replay reproduces the recorded decisions (``mismatches`` counts the
  pages where it does not, e.g. a drop whose kept page was deleted).
* **Near misses**: pairs of kept pages at distance k+1..k+3: what a looser threshold would drop.

Exact up to :data:`EXACT_LIMIT` pages; above that the distances and the what-if use a uniform
random sample (fixed seed) of that many pages in decision order, stated in ``sample`` (pairs are
then found only when both pages are sampled, so sampled counts understate). Totals and per-host
counts always cover every row. A re-crawl moves a document to the newest crawl, so a report on an
older crawl misses the pages fetched again since.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa

from crawler import review

if TYPE_CHECKING:
    from crawler.review import CrawlDB

logger = logging.getLogger(__name__)

EXACT_LIMIT = 100_000
WHATIF_EXTRA = 3  # thresholds up to k + 3, near misses at k+1..k+3
NEAR_MISS_LISTED = 50
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

    def __len__(self) -> int:
        return len(self.urls)


def _epoch(value: object) -> float:
    when = review.parse_time(value)
    return when.timestamp() if when else 0.0


def load_population(db: CrawlDB, crawl_id: int, persist: bool) -> Population:
    """Every page of ``crawl_id`` (and prior documents when ``persist``), in decision order."""
    d, x = db.documents, db.dropped_table
    docs = db._rows(sa.select(d.c.url, d.c.content_hash, d.c.simhash, d.c.fetched_at,
                              d.c.crawl_id, d.c.id))
    drops = db._rows(sa.select(x.c.url, x.c.reason, x.c.simhash, x.c.dropped_at, x.c.id,
                               x.c.duplicate_of, x.c.distance,
                               *([x.c.content_hash] if "content_hash" in x.c else []))
                     .where(x.c.crawl_id == crawl_id))
    entries = []
    for row in docs:
        status = "kept" if row["crawl_id"] == crawl_id else "prior"
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
    return pop


def sample_population(pop: Population, limit: int, seed: int = 0) -> Population:
    """A uniform random sample of ``limit`` pages, decision order kept (``pop`` when smaller)."""
    if len(pop) <= limit:
        return pop
    keep = sorted(random.Random(seed).sample(range(len(pop)), limit))
    out = Population()
    for name in ("urls", "hosts", "content_hashes", "simhashes", "status", "matches"):
        values = getattr(pop, name)
        setattr(out, name, [values[i] for i in keep])
    return out


@dataclass
class Neighbours:
    """Nearest distance per page and every earlier page within ``radius`` of each page."""

    nearest: np.ndarray  # uint8, _NO_NEIGHBOUR where no other page has a SimHash
    earlier: list[list[tuple[int, int]]]  # per page: (earlier page index, distance)


def neighbours(simhashes: list[int | None], radius: int) -> Neighbours:
    """Exact nearest distances and within-``radius`` earlier neighbours (numpy, chunked).

    Each unordered pair is compared once: a chunk of rows against every later column, the
    column minimum folded into the later pages' nearest distance.
    """
    n = len(simhashes)
    index = np.flatnonzero(np.array([s is not None for s in simhashes], dtype=bool))
    values = np.array([simhashes[i] for i in index], dtype=np.uint64)
    m = len(values)
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
        for flat in np.flatnonzero(dist <= radius).tolist():
            i, j = divmod(flat, width)
            if j > i:  # page start+j comes after page start+i
                earlier[int(index[start + j])].append((int(index[start + i]), int(dist[i, j])))
        start += len(block)
    nearest = np.full(n, _NO_NEIGHBOUR, dtype=np.uint8)
    nearest[index] = nearest_c
    return Neighbours(nearest, earlier)


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


def replay(pop: Population, earlier: list[list[tuple[int, int]]], threshold: int) -> list[str]:
    """The pipeline's greedy decisions at ``threshold``: a status per page (prior stays)."""
    kept_hashes: set[str] = set()
    kept = [False] * len(pop)
    out = []
    for i, status in enumerate(pop.status):
        content = pop.content_hashes[i]
        if status == "prior":
            decision = "prior"
        elif content and content in kept_hashes:
            decision = "exact_duplicate"
        elif pop.simhashes[i] is not None and any(
                kept[j] and d <= threshold for j, d in earlier[i]):
            decision = "near_duplicate"
        else:
            decision = "kept"
        if decision in ("kept", "prior"):
            kept[i] = True
            if content:
                kept_hashes.add(content)
        out.append(decision)
    return out


def _truthy(value: object, default: bool = True) -> bool:
    if value is None or value == "":
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def build_report(db: CrawlDB, crawl_id: int | None = None, *, exact_limit: int = EXACT_LIMIT,
                 seed: int = 0, db_arg: str | None = None) -> dict[str, Any]:
    """Every number of the report for one crawl (the latest when ``crawl_id`` is None).

    Raises :class:`crawler.review.ReviewError` for an unknown crawl or one without pages.
    ``db_arg`` is put in the near misses' ``scrapy dropped --pair`` commands as ``--db``.
    """
    crawl = db.crawl(crawl_id)
    settings = crawl["settings"]
    k, blocks = review.crawl_thresholds(settings)
    pop = load_population(db, crawl["id"], _truthy(settings.get("SIMHASH_PERSIST")))
    counts = Counter(s for s in pop.status)
    own = len(pop) - counts["prior"]
    if not own:
        raise review.ReviewError(f"crawl {crawl['id']} has no pages (nothing kept or dropped): "
                                 "nothing to report")
    sample = sample_population(pop, exact_limit, seed)
    radius = min(64, k + WHATIF_EXTRA)
    edges = effective_edges(sample, neighbours(sample.simhashes, radius), k)
    dropped = counts["exact_duplicate"] + counts["near_duplicate"]
    return {
        "crawl": _crawl_info(crawl),
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
                   "canonical_swaps": db.canonical_swaps(crawl["id"])},
        "by_reason": {r: counts[r] for r in review.REASONS},
        "by_host": _by_host(pop),
        "sample": {"exact": len(sample) == len(pop), "pages": len(pop),
                   "sample_size": len(sample), "limit": exact_limit, "seed": seed},
        "histogram": _histogram(sample, edges, k),
        "what_if": _what_if(sample, edges, k, radius),
        "near_misses": _near_misses(sample, edges, k, radius, db_arg),
        "stats": {key: value for key, value in sorted(crawl["stats"].items())
                  if key.startswith(("dedup/", "dupefilter/", "storage/"))
                  or key in ("item_scraped_count", "item_dropped_count",
                             "response_received_count", "elapsed_time_seconds")},
    }


def _crawl_info(crawl: dict[str, Any]) -> dict[str, Any]:
    info = {key: crawl.get(key) for key in ("id", "spider", "finish_reason")}
    for key in ("started_at", "finished_at"):
        info[key] = review.iso_utc(crawl.get(key))
    info["seeds"] = crawl.get("seeds") if isinstance(crawl.get("seeds"), list) else []
    return info


def _by_host(pop: Population) -> list[dict[str, Any]]:
    table: dict[str, Counter[str]] = {}
    for host, status in zip(pop.hosts, pop.status, strict=True):
        if status != "prior":
            table.setdefault(host, Counter())[status] += 1
    rows = [{"host": host, "pages": sum(c.values()), "kept": c["kept"],
             "exact_duplicate": c["exact_duplicate"], "near_duplicate": c["near_duplicate"]}
            for host, c in table.items()]
    return sorted(rows, key=lambda r: (-r["pages"], r["host"]))


def _histogram(pop: Population, edges: Edges, k: int) -> dict[str, Any]:
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
    top = max([*kept, *dropped, k + WHATIF_EXTRA])
    buckets = [{"distance": d, "kept": kept[d], "dropped": dropped[d]} for d in range(top + 1)]
    return {"buckets": buckets, "threshold": k, "pages": sum(kept.values()) + sum(dropped.values()),
            "without_fingerprint": without, "isolated": isolated}


def _what_if(pop: Population, edges: Edges, k: int, radius: int) -> dict[str, Any]:
    actual = sum(s in review.REASONS for s in pop.status)
    rows, mismatches = [], 0
    for t in range(radius + 1):
        decisions = replay(pop, edges.earlier, t)
        c = Counter(decisions)
        drops = c["exact_duplicate"] + c["near_duplicate"]
        rows.append({"threshold": t, "dropped": drops, "exact_duplicate": c["exact_duplicate"],
                     "near_duplicate": c["near_duplicate"], "kept": c["kept"],
                     "change": drops - actual, "actual": t == k})
        if t == k:
            mismatches = sum(a != b for a, b in zip(decisions, pop.status, strict=True))
    return {"actual_dropped": actual, "rows": rows, "mismatches": mismatches,
            "adjusted_pairs": edges.adjusted, "unmatched_drops": edges.unmatched}


def _near_misses(pop: Population, edges: Edges, k: int, radius: int,
                 db_arg: str | None) -> dict[str, Any]:
    import shlex

    pairs = []
    for i, found in enumerate(edges.earlier):
        for j, distance in found:
            both_kept = {pop.status[i], pop.status[j]} <= {"kept", "prior"}
            if k < distance <= radius and both_kept and "kept" in (pop.status[i], pop.status[j]):
                pairs.append((distance, pop.urls[j], pop.urls[i]))
    pairs.sort()
    db_part = f" --db {shlex.quote(db_arg)}" if db_arg else ""
    listed = [{"distance": d, "a": a, "b": b,
               "command": f"scrapy dropped{db_part} --pair {shlex.quote(a)} {shlex.quote(b)}"}
              for d, a, b in pairs[:NEAR_MISS_LISTED]]
    by_distance = Counter(d for d, _, _ in pairs)
    return {"count": len(pairs), "by_distance": {str(d): by_distance[d]
                                                  for d in range(k + 1, radius + 1)},
            "listed": listed}


# --- HTML ------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
svg{max-width:100%;height:auto}table{border-collapse:collapse;margin:.5em 0}
td,th{padding:.2em .7em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.actual{background:#fff4d6;font-weight:600}code{font-size:.9em;word-break:break-all}
.note{color:#666}.kept{fill:#4c78a8}.dropped{fill:#e45756}.legend span{display:inline-block;
width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}svg text{font-size:11px;fill:#333}
"""
KEPT_COLOUR, DROPPED_COLOUR = "#4c78a8", "#e45756"


def _e(value: object) -> str:
    from html import escape

    return escape("" if value is None else str(value), quote=True)


def _table(headers: list[str], rows: list[list[object]], numeric: set[int] | None = None,
           table_id: str = "", row_attrs: list[str] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f'<th class="n">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cells = "".join(f'<td class="n">{_e(v)}</td>' if i in numeric else f"<td>{_e(v)}</td>"
                        for i, v in enumerate(row))
        attrs = row_attrs[r] if row_attrs else ""
        body.append(f"<tr{attrs}>{cells}</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def histogram_svg(hist: dict[str, Any], width: int = 900, height: int = 260) -> str:
    """Stacked bars (kept below, dropped on top), one ``<g class="bar">`` per distance."""
    buckets = hist["buckets"]
    left, bottom, top = 44, 36, 14
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max([b["kept"] + b["dropped"] for b in buckets] + [1])
    step = plot_w / len(buckets)
    parts = [f'<svg id="histogram" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             'aria-label="nearest-neighbour distance histogram">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
             'stroke="#999"/>']
    for tick in sorted({0, peak // 2, peak}):
        y = top + plot_h - plot_h * tick / peak
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    label_every = max(1, len(buckets) // 16)
    for i, b in enumerate(buckets):
        x = left + i * step
        kept_h = plot_h * b["kept"] / peak
        drop_h = plot_h * b["dropped"] / peak
        base = top + plot_h
        parts.append(
            f'<g class="bar" data-distance="{b["distance"]}" data-kept="{b["kept"]}" '
            f'data-dropped="{b["dropped"]}"><title>distance {b["distance"]}: {b["kept"]} kept, '
            f'{b["dropped"]} dropped</title>'
            f'<rect class="kept" fill="{KEPT_COLOUR}" x="{x + 1:.1f}" y="{base - kept_h:.1f}" '
            f'width="{max(step - 2, 1):.1f}" height="{kept_h:.1f}"/>'
            f'<rect class="dropped" fill="{DROPPED_COLOUR}" x="{x + 1:.1f}" '
            f'y="{base - kept_h - drop_h:.1f}" width="{max(step - 2, 1):.1f}" '
            f'height="{drop_h:.1f}"/></g>')
        if i % label_every == 0:
            parts.append(f'<text x="{x + step / 2:.1f}" y="{base + 14}" '
                         f'text-anchor="middle">{b["distance"]}</text>')
    k_x = left + (hist["threshold"] + 1) * step
    parts.append(f'<line id="threshold" x1="{k_x:.1f}" y1="{top - 4}" x2="{k_x:.1f}" '
                 f'y2="{top + plot_h}" stroke="#222" stroke-dasharray="4 3"/>'
                 f'<text x="{k_x + 4:.1f}" y="{top + 8}">k = {hist["threshold"]}</text>'
                 f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                 'bits to the nearest other page</text></svg>')
    return "".join(parts)


def render_html(data: dict[str, Any]) -> str:
    """One self-contained HTML page (inline CSS and SVG, no script) with every number."""
    crawl, totals, k = data["crawl"], data["totals"], data["threshold"]
    sections = [
        f"<h1>Dedup report — crawl {_e(crawl['id'])}</h1>",
        f'<p class="note">{_e(data["database"])}, generated {_e(data["generated_at"])}. '
        f"{_sample_note(data['sample'])}</p>",
        "<h2>Crawl and totals</h2>", _totals_table(crawl, totals),
        "<h2>Distance to the nearest other page</h2>", _histogram_section(data["histogram"]),
        "<h2>What if the threshold were different?</h2>", _what_if_section(data, k),
        "<h2>Near misses (kept pairs just above the threshold)</h2>",
        _near_miss_section(data["near_misses"], k),
        "<h2>By reason</h2>",
        _table(["reason", "pages"], [[r, n] for r, n in data["by_reason"].items()], {1},
               "by-reason", [f' data-reason="{_e(r)}"' for r in data["by_reason"]]),
        "<h2>By host</h2>", _host_table(data["by_host"]),
        "<h2>Settings that shape dedup</h2>",
        _table(["setting", "value"], [[n, v] for n, v in sorted(data["settings"].items())],
               table_id="settings"),
    ]
    if data["stats"]:
        sections += ["<h2>Crawl stats</h2>",
                     _table(["stat", "value"], [[n, v] for n, v in data["stats"].items()],
                            table_id="stats")]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>Dedup report — crawl {_e(crawl['id'])}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(sections)}</body></html>\n")


def _sample_note(sample: dict[str, Any]) -> str:
    if sample["exact"]:
        return f"Exact: all {sample['pages']} pages compared."
    return (f"Sampled: distances and what-if use a uniform random sample of "
            f"{sample['sample_size']} of {sample['pages']} pages (seed {sample['seed']}); "
            "totals cover every page.")


def _totals_table(crawl: dict[str, Any], totals: dict[str, Any]) -> str:
    rows = [("crawl", crawl["id"], "crawl-id"), ("started", crawl["started_at"], "started"),
            ("finished", crawl["finished_at"], "finished"),
            ("finish reason", crawl["finish_reason"], "finish-reason"),
            ("pages decided", totals["pages"], "total-pages"),
            ("kept", totals["kept"], "total-kept"), ("dropped", totals["dropped"], "total-dropped"),
            ("exact duplicates", totals["exact_duplicate"], "total-exact_duplicate"),
            ("near duplicates", totals["near_duplicate"], "total-near_duplicate"),
            ("duplicate rate", f"{totals['duplicate_rate']:.1%}", "duplicate-rate"),
            ("originals kept over copies stored first", totals.get("canonical_swaps", 0),
             "canonical-swaps"),
            ("documents of earlier crawls", totals["prior_documents"], "prior-documents")]
    body = "".join(f'<tr><th>{_e(label)}</th><td id="{ident}">{_e(value)}</td></tr>'
                   for label, value, ident in rows)
    return f'<table id="totals"><tbody>{body}</tbody></table>'


def _host_table(rows: list[dict[str, Any]]) -> str:
    return _table(["host", "pages", "kept", "exact", "near"],
                  [[r["host"], r["pages"], r["kept"], r["exact_duplicate"], r["near_duplicate"]]
                   for r in rows], {1, 2, 3, 4}, "by-host",
                  [f' data-host="{_e(r["host"])}"' for r in rows])


def _histogram_section(hist: dict[str, Any]) -> str:
    legend = (f'<p class="legend"><span style="background:{KEPT_COLOUR}"></span>kept'
              f'<span style="background:{DROPPED_COLOUR}"></span>dropped; dashed line: '
              f"threshold k = {hist['threshold']} (a page at or left of it has a near duplicate)."
              "</p>")
    notes = []
    if hist["isolated"]:
        notes.append(f"{hist['isolated']} page(s) had no other page to compare with.")
    if hist["without_fingerprint"]:
        notes.append(f"{hist['without_fingerprint']} page(s) have no SimHash (too few tokens: "
                     "checked for exact copies only) and are not drawn.")
    help_text = ("A clear gap between the duplicates on the left and the distinct pages on the "
                 "right means the threshold is safe anywhere inside it; kept bars close to the "
                 "line are near misses, dropped bars at the line are the decisions to check.")
    return (legend + histogram_svg(hist) + f'<p class="note">{_e(" ".join(notes))}</p>'
            f'<p id="advice">{_e(advice(hist))}</p><p>{_e(help_text)}</p>')


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


def _what_if_section(data: dict[str, Any], k: int) -> str:
    w = data["what_if"]
    rows = [[r["threshold"], r["dropped"], r["exact_duplicate"], r["near_duplicate"], r["kept"],
             f"{r['change']:+d}"] for r in w["rows"]]
    attrs = [f' data-threshold="{r["threshold"]}"' + (' class="actual"' if r["actual"] else "")
             for r in w["rows"]]
    table = _table(["threshold k", "dropped", "exact", "near", "kept", "vs actual"], rows,
                   {0, 1, 2, 3, 4, 5}, "what-if", attrs)
    note = (f"Replayed greedily in fetch order, as the pipeline decides; the highlighted row "
            f"is this crawl's k = {k} ({w['actual_dropped']} pages actually dropped).")
    if w["adjusted_pairs"]:
        note += (f" {w['adjusted_pairs']} kept pair(s) are within k by their stored fingerprints "
                 "but were judged distinct by the crawl (fingerprints refreshed after template "
                 "learning, or a host's first pages): they count as k + 1 bits.")
    if w["mismatches"]:
        note += (f" {w['mismatches']} page(s) decided differently in the replay than in the "
                 f"crawl ({w['unmatched_drops']} drop(s) whose kept page is not in this crawl's "
                 "rows: deleted, re-crawled later, or outside the sample).")
    return table + f'<p class="note">{_e(note)}</p>'


def _near_miss_section(near: dict[str, Any], k: int) -> str:
    counts = ", ".join(f"{n} at distance {d}" for d, n in near["by_distance"].items())
    head = f"<p>{near['count']} kept pair(s) within k+1..k+3 bits: {_e(counts)}.</p>"
    if not near["listed"]:
        return head
    rows = [[m["distance"], m["a"], m["b"]] for m in near["listed"]]
    table = _table(["bits", "page", "page"], rows, {0}, "near-misses")
    commands = "".join(f"<li><code>{_e(m['command'])}</code></li>" for m in near["listed"])
    more = near["count"] - len(near["listed"])
    extra = f'<p class="note">… and {more} more not listed.</p>' if more > 0 else ""
    return (head + table + extra + "<p>Compare a pair side by side:</p>"
            f'<ul id="near-miss-commands">{commands}</ul>')

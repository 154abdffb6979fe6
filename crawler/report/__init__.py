"""The numbers of ``scrapy dedupreport``: decisions to check, distances and a what-if.

:func:`build_report` reads one crawl, or the crawls of one JOBDIR job reported as one (a list of
ids: the union of their documents and drops, settings and threshold from the latest), from a
:class:`crawler.review.CrawlDB` and returns plain JSON-ready data (``--format json`` prints it as
is); :func:`crawler.report.html.render_html` turns the same data into one self-contained HTML
page (inline CSS and SVG, no script, no external asset).

The population is every page the crawl's dedup rule decided on: its kept ``documents`` and its
``dropped`` rows, in decision order (``fetched_at`` of a kept page, ``dropped_at`` of a dropped
one). With ``SIMHASH_PERSIST`` on, documents stored by other crawls were in the index from the
start and are seeded as kept (never counted, never dropped). A page a person's drop rule dropped
(reason ``override``) was never compared: it is not in the population, it is counted in the
totals on a row of its own and left out of the duplicate rate (:mod:`~crawler.report.build`).

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
* **A person's rules** (:class:`~crawler.report.distances.Ruled`; the database's, or the
  ``rules`` given to :func:`build_report`): two pages kept beside each other because a rule
  says so (a keep rule names one of them, within k; a distinct rule names the two, at any
  distance) are no evidence about the threshold: no edge of the replay, no near miss, neither
  page's nearest distance (found again without the other); a page a keep rule names is never
  dropped by the replay. ``histogram.kept_apart_by_rule`` counts the kept pairs.
* **Decisions to check** (:func:`decisions`): the near drops closest to k first, then every
  exact-duplicate group with its size, each with both titles, the lines only in each page and
  the ``scrapy dropped --explain`` command; at most :data:`DECISIONS_LISTED`, the rest counted.
  A drop with a review (``CrawlDB.latest_reviews()``, keyed ``(url, duplicate_of)``) is left
  out and counted as reviewed.
* **Reviews** (:mod:`~crawler.report.reviews`): the review history newest first (at most
  :data:`REVIEWS_LISTED`) with its verdict counts; the newest review of each pair is a label
  (duplicate or not) at the pair's distance, and every what-if row carries the precision and
  recall of its threshold on them (``reviewed``, with the counts behind each ratio), the advice
  a sentence on k and on the table's threshold with the best F1.

Exact up to :data:`EXACT_LIMIT` pages; above that the distances and the what-if use a uniform
random sample (fixed seed) of that many pages in decision order, stated in ``sample`` (pairs are
then found only when both pages are sampled, so sampled counts understate). Totals and per-host
counts always cover every row. A re-crawl moves a document to the newest crawl, so a report on an
older crawl misses the pages fetched again since.

Modules: :mod:`~crawler.report.population` (the pages, in decision order; the sample),
:mod:`~crawler.report.distances` (nearest distances, corrected edges, the replay),
:mod:`~crawler.report.whatif` (histogram, what-if, near misses),
:mod:`~crawler.report.decisions` (decisions to check, largest groups),
:mod:`~crawler.report.reviews` (the review history, labels, scores),
:mod:`~crawler.report.wording` (every percentage and every count with its noun),
:mod:`~crawler.report.build` (:func:`build_report`, totals, per host, URL dedup); the page:
:mod:`~crawler.report.html` with its pieces in :mod:`~crawler.report.markup` and
:mod:`~crawler.report.reviewing` (they import the numbers; the numbers never import them).
"""

from __future__ import annotations

from crawler.report.build import EXACT_LIMIT, EXTEND_LIMIT, build_report, url_dedup
from crawler.report.decisions import (
    COPIES_LISTED,
    DECISIONS_LISTED,
    DIFF_CHARS,
    GROUPS_LISTED,
    LARGEST_GROUPS,
    decisions,
    difference,
    largest_groups,
)
from crawler.report.distances import (
    Edges,
    Neighbours,
    Ruled,
    effective_edges,
    neighbours,
    replay_matches,
)
from crawler.report.population import (
    Population,
    crawl_id_list,
    load_drops,
    load_population,
    sample_population,
)
from crawler.report.reviews import REVIEWS_LISTED, Labels
from crawler.report.whatif import (
    CHANGES_LISTED,
    NEAR_MISS_EXTRA,
    NEAR_MISS_LISTED,
    WHATIF_EXTRA,
    advice,
    histogram,
    near_misses,
    what_if,
)

__all__ = [
    "CHANGES_LISTED",
    "COPIES_LISTED",
    "DECISIONS_LISTED",
    "DIFF_CHARS",
    "EXACT_LIMIT",
    "EXTEND_LIMIT",
    "GROUPS_LISTED",
    "LARGEST_GROUPS",
    "NEAR_MISS_EXTRA",
    "NEAR_MISS_LISTED",
    "REVIEWS_LISTED",
    "WHATIF_EXTRA",
    "Edges",
    "Labels",
    "Neighbours",
    "Population",
    "Ruled",
    "advice",
    "build_report",
    "crawl_id_list",
    "decisions",
    "difference",
    "effective_edges",
    "histogram",
    "largest_groups",
    "load_drops",
    "load_population",
    "near_misses",
    "neighbours",
    "replay_matches",
    "sample_population",
    "url_dedup",
    "what_if",
]

""":func:`build_report`: every number of ``scrapy dedupreport`` for one crawl or one job.

``totals`` counts every page decided: ``pages`` = ``kept`` + ``dropped`` (``exact_duplicate``
+ ``near_duplicate``) + ``soft_404`` + ``override``, the last the pages a person's drop rule
dropped (:mod:`crawler.dedup.overrides`; "dropped by a person's rule" on the page). Those were never
compared with any page, so they are left out of the duplicate rate, numerator and denominator:
``duplicate_rate`` = ``dropped`` / ``compared`` (``pages`` - ``override``), and out of the
distances, what-if and decisions (:mod:`crawler.report.population`). ``by_host`` rows count
them the same way (``pages`` with them, ``override``, the rate without them). ``by_reason``
keeps the reasons of the dedup rule only (exact and near duplicates).

Pages kept beside a near twin because a person's rule says so (a keep rule names one of them,
or a distinct rule parts the two: the database's rules, or the ``rules`` given) are no evidence
about the threshold either: the distances leave such pairs out
(:class:`~crawler.report.distances.Ruled`) and ``histogram.kept_apart_by_rule`` counts them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from crawler import review
from crawler.dedup.overrides import Overrides
from crawler.outputs.formats import host_of, mask_settings
from crawler.report import reviews
from crawler.report.decisions import decisions, largest_groups
from crawler.report.distances import Ruled, effective_edges, neighbours
from crawler.report.population import (
    Population,
    crawl_id_list,
    load_drops,
    load_population,
    overridden,
    sample_population,
)
from crawler.report.whatif import NEAR_MISS_EXTRA, WHATIF_EXTRA, histogram, near_misses, what_if
from crawler.urls.urlnorm import UrlPolicy
from crawler.vocab import OVERRIDE, SOFT_404

if TYPE_CHECKING:
    from collections.abc import Sequence

    from crawler.report.reviews import Labels
    from crawler.review import CrawlDB

EXACT_LIMIT = 100_000
EXTEND_LIMIT = 20_000  # pages above which the what-if is not extended past k + 8
#: Stats prefix of the parameters a crawl learned to ignore per host (the web spider's).
IGNORED_PARAMS = "urlnorm/ignored_params/"
_STATS_PREFIXES = ("dedup/", "dupefilter/", "storage/", "urlnorm/")
_STATS_NAMES = ("item_scraped_count", "item_dropped_count", "response_received_count",
                "elapsed_time_seconds")


def build_report(db: CrawlDB, crawl_id: int | Sequence[int] | None = None, *,
                 exact_limit: int = EXACT_LIMIT, seed: int = 0,
                 db_arg: str | None = None, rules: Overrides | None = None) -> dict[str, Any]:
    """Every number of the report for one crawl, or one job's crawls (a list of ids).

    ``crawl_id`` None means the latest crawl. For a list, pages and drops are the union of the
    crawls', settings and threshold the latest crawl's, URL-dedup counters summed.
    Raises :class:`crawler.review.ReviewError` for an unknown crawl or one without pages.
    ``db_arg`` is put in the ``scrapy dropped`` commands as ``--db``. ``rules``: a person's
    rules the crawl obeyed (None: the database's, ``CrawlDB.overrides()``).
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
    by_person = overridden(drops)
    if len(pop) == counts["prior"] and not by_person:
        named = f"crawl {ids[0]}" if len(ids) == 1 else "crawls " + ", ".join(map(str, ids))
        raise review.ReviewError(f"{named} has no pages (nothing kept or dropped): "
                                 "nothing to report")
    latest = db.latest_reviews()
    labels = reviews.labels(latest.values())
    rules = Overrides(db.overrides()) if rules is None else rules
    ruling = _Ruling(rules, UrlPolicy.from_settings(settings), k)
    distances = _distances(pop, ruling, exact_limit, seed, db_arg, labels)
    return {
        "crawl": _crawl_info(crawl, ids),
        "database": db.masked_url,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": mask_settings(settings),  # crawls of older versions stored secrets
        "threshold": k,
        "blocks": blocks,
        "totals": _totals(len(pop) - counts["prior"], counts, drops, len(by_person)),
        "by_reason": {r: counts[r] for r in review.REASONS},
        "by_host": _by_host(pop, by_person),
        **distances,
        "decisions": decisions(db, drops, k, db_arg, latest.keys()),
        "reviews": reviews.summary(db.reviews(), latest, labels, distances["what_if"]["rows"],
                                   k),
        "largest_groups": largest_groups(pop),
        "url_dedup": url_dedup([c["stats"] for c in crawls], settings),
        "stats": {key: value for key, value in sorted(crawl["stats"].items())
                  if key.startswith(_STATS_PREFIXES) or key in _STATS_NAMES},
    }


def _distances(pop: Population, ruling: _Ruling, exact_limit: int, seed: int,
               db_arg: str | None, labels: Labels) -> dict[str, Any]:
    """The sample, histogram, what-if (scored on the reviews' ``labels``) and near misses
    (computed on a sample when large), a person's rules applied to the sample's pages."""
    sample = sample_population(pop, exact_limit, seed)
    k = ruling.k
    ruled = Ruled.of(sample, ruling.rules, ruling.policy, k)
    radius = min(64, k + WHATIF_EXTRA)
    nb = neighbours(sample.simhashes, radius, sample.status, ruled)
    # Replaying above k changes nothing below the closest kept pair; kept pairs within k count
    # as k + 1, as in effective_edges.
    first_change = None if nb.closest_kept is None else max(nb.closest_kept, k + 1)
    if first_change is not None and first_change > radius and len(sample) <= EXTEND_LIMIT:
        radius = min(64, first_change)  # extend the what-if to the first change: one more pass
        nb = neighbours(sample.simhashes, radius)
    edges = effective_edges(sample, nb, k, ruled)
    table = what_if(sample, edges, k, radius, labels)
    table["first_change_above"] = first_change
    return {
        "sample": {"exact": len(sample) == len(pop), "pages": len(pop),
                   "sample_size": len(sample), "limit": exact_limit, "seed": seed},
        "histogram": histogram(sample, edges, k, radius),
        "what_if": table,
        "near_misses": near_misses(sample, edges, k, min(64, k + NEAR_MISS_EXTRA), db_arg),
    }


@dataclass(frozen=True)
class _Ruling:
    """A person's rules, the crawl's URL policy they compare URLs under, its threshold."""

    rules: Overrides
    policy: UrlPolicy
    k: int


def _totals(compared: int, counts: Counter[str], drops: list[dict[str, Any]],
            by_person: int) -> dict[str, Any]:
    """Every page decided (``pages`` = kept + dropped + soft_404 + override); the duplicate
    rate over the ``compared`` pages only (a person's drop rule is not a duplicate)."""
    dropped = counts["exact_duplicate"] + counts["near_duplicate"]
    return {"pages": compared + by_person, "kept": counts["kept"], "dropped": dropped,
            "exact_duplicate": counts["exact_duplicate"],
            "near_duplicate": counts["near_duplicate"],
            "soft_404": counts[SOFT_404], "override": by_person, "compared": compared,
            "duplicate_rate": round(dropped / compared, 4) if compared else 0.0,
            "prior_documents": counts["prior"],
            "canonical_swaps": sum(r.get("rule") == "canonical" for r in drops)}


def _truthy(value: object, default: bool = True) -> bool:
    if value is None or value == "":
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _crawl_info(crawl: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    info = {key: crawl.get(key) for key in ("id", "spider", "finish_reason")}
    info["ids"] = ids
    for key in ("started_at", "finished_at"):
        info[key] = review.iso_utc(crawl.get(key))
    info["seeds"] = crawl.get("seeds") if isinstance(crawl.get("seeds"), list) else []
    return info


def _by_host(pop: Population, by_person: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per host, as the totals: ``pages`` with the ``override`` drops, the rate without."""
    table: dict[str, Counter[str]] = {}
    for host, status in zip(pop.hosts, pop.status, strict=True):
        if status != "prior":
            table.setdefault(host, Counter())[status] += 1
    for row in by_person:
        table.setdefault(host_of(row["url"]), Counter())[OVERRIDE] += 1
    rows = []
    for host, c in table.items():
        pages, dropped = sum(c.values()), c["exact_duplicate"] + c["near_duplicate"]
        compared = pages - c[OVERRIDE]
        rows.append({"host": host, "pages": pages, "kept": c["kept"],
                     "exact_duplicate": c["exact_duplicate"],
                     "near_duplicate": c["near_duplicate"], "override": c[OVERRIDE],
                     "duplicate_rate": round(dropped / compared, 4) if compared else 0.0})
    return sorted(rows, key=lambda r: (-r["pages"], r["host"]))


def ignored_params(stats: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{host: [parameter]}``: the query parameters the crawls learned to ignore per host
    (stats ``urlnorm/ignored_params/<host>``, :mod:`crawler.urls.traps`)."""
    learned: dict[str, set[str]] = {}
    for one in stats:
        for key, value in one.items():
            if key.startswith(IGNORED_PARAMS) and isinstance(value, str):
                host = key[len(IGNORED_PARAMS):]
                learned.setdefault(host, set()).update(p for p in value.split(",") if p)
    return {host: sorted(names) for host, names in sorted(learned.items())}


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
    prefixed = sorted(key for key in total if key.startswith(
        ("urlnorm/trap/", "urlnorm/dropped/", "dedup/links_not_followed/")))
    strip = settings.get("URLNORM_STRIP_PARAMS")
    return {"counters": {key: total.get(key, 0) for key in [*keys, *prefixed]},
            "ignored_params": ignored_params(stats),
            "traps": sum(total[key] for key in prefixed if key.startswith("urlnorm/trap/")),
            "filtered_total": total["dupefilter/filtered"] + total["dedup/links_skipped_seen"],
            "strip_params": list(strip) if isinstance(strip, (list, tuple)) else
            [p for p in str(strip or "").split(",") if p]}

"""The drop list of ``scrapy dedupreport --serve``: every drop of the crawls under review,
filtered, sorted and paged on the server (``/api/drops``), each row with its review state and
the override that applies to it.

The rows of the selected crawls are read once (no stored text: url, title, reason, distance, the
kept page and its title, time, rule) and kept in memory as :class:`Drops`, read again after a
button here moved a page (the server says so: :meth:`Drops.invalidate`) and when the fingerprint
of those crawls' drop rows changes (:meth:`CrawlDB.drops_version`: their count, highest id and
newest ``dropped_at``; a crawl or ``scrapy dropped`` writing the database meanwhile). The count
alone is not enough: "Always drop" on a page with one duplicate moves that duplicate out and the
page in. Review marks and overrides (the database's, and the rules file's when the command has
one) are read on every request: they are small and change with every click. Tens of thousands of
drops filter and sort in tens of milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.outputs.formats import host_of
from crawler.review.records import ALL_REASONS, iso_utc
from crawler.vocab import OVERRIDE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from crawler.dedup.overrides import Override, Overrides, Review
    from crawler.review.crawldb import CrawlDB

#: The reasons the list filters on: every reason a page is dropped for, and a person's rule.
LIST_REASONS = tuple(dict.fromkeys((*ALL_REASONS, OVERRIDE)))
SORTS = ("distance", "reason", "url", "kept", "time")
MAX_LIMIT = 500  # rows per page of /api/drops
REVIEWED = ("", "yes", "no")  # the ``reviewed`` filter: any, reviewed only, unreviewed only


class QueryError(ValueError):
    """A bad ``/api/drops`` parameter (one line, answered as HTTP 400)."""


@dataclass(frozen=True)
class Drop:
    """One drop row of the list (no text)."""

    url: str
    title: str
    reason: str
    distance: int | None
    kept: str  # duplicate_of
    kept_title: str
    time: str  # ISO 8601 UTC, "" when unknown
    rule: str
    canonical: str  # the key an override rule is matched on
    haystack: str  # what the text search looks in, case-folded

    @classmethod
    def from_row(cls, row: Mapping[str, Any], titles: Mapping[str, str]) -> Drop:
        url, kept = str(row["url"]), str(row.get("duplicate_of") or "")
        title, kept_title = str(row.get("title") or ""), titles.get(kept, "")
        return cls(url, title, str(row["reason"]), row.get("distance"), kept, kept_title,
                   iso_utc(row.get("dropped_at")) or "", str(row.get("rule") or ""),
                   canonical_key(url), " ".join((url, title, kept, kept_title)).casefold())


def canonical_key(url: str) -> str:
    """The canonical URL an override names for ``url`` (``url`` itself if it does not parse)."""
    from crawler.urls.urlnorm import normalize_url

    try:
        return normalize_url(url)
    except ValueError:
        return url


@dataclass
class Query:
    """The parameters of ``/api/drops`` (see :func:`parse_query`)."""

    reason: str = ""
    host: str = ""
    min_distance: int | None = None
    max_distance: int | None = None
    reviewed: str = ""
    q: str = ""
    sort: str = "distance"
    descending: bool = True
    offset: int = 0
    limit: int = 100


def parse_query(params: Mapping[str, list[str]]) -> Query:
    """A :class:`Query` from a parsed query string; :class:`QueryError` names a bad value."""
    def one(name: str) -> str:
        return (params.get(name) or [""])[-1].strip()

    query = Query(reason=one("reason"), host=one("host").lower(), reviewed=one("reviewed"),
                  q=one("q").casefold(), sort=one("sort") or "distance",
                  descending=(one("order") or "desc") == "desc")
    _check(query.reason in ("", *LIST_REASONS), "reason", query.reason, LIST_REASONS)
    _check(query.sort in SORTS, "sort", query.sort, SORTS)
    _check(one("order") in ("", "asc", "desc"), "order", one("order"), ("asc", "desc"))
    _check(query.reviewed in REVIEWED, "reviewed", query.reviewed, ("yes", "no"))
    query.min_distance = _integer(one("min"), "min", None)
    query.max_distance = _integer(one("max"), "max", None)
    query.offset = _integer(one("offset"), "offset", 0) or 0
    query.limit = min(MAX_LIMIT, _integer(one("limit"), "limit", 100) or 100)
    return query


def _check(ok: bool, name: str, value: str, allowed: tuple[str, ...]) -> None:
    if not ok:
        raise QueryError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def _integer(text: str, name: str, default: int | None) -> int | None:
    if not text:
        return default
    if not text.isdigit():
        raise QueryError(f"{name}={text!r} is not a whole number >= 0")
    return int(text)


@dataclass
class Drops:
    """The drops of the crawls under review, read again when they may have changed."""

    crawl_ids: list[int]
    rows: list[Drop] = field(default_factory=list)
    version: tuple[object, ...] | None = None  # CrawlDB.drops_version() when the rows were read

    def refresh(self, db: CrawlDB) -> None:
        """Read the rows again when invalidated or when :meth:`CrawlDB.drops_version`
        changed."""
        version = db.drops_version(self.crawl_ids)
        if version == self.version:
            return
        titles = {str(d["url"]): str(d.get("title") or "") for d in db.document_rows()}
        self.rows = [Drop.from_row(row, titles) for row in db.crawl_drops(self.crawl_ids)]
        self.version = version

    def invalidate(self) -> None:
        """Read the rows again at the next request (an action here moved pages)."""
        self.version = None


@dataclass(frozen=True)
class Marks:
    """What a person has said and ruled: the newest review of each pair, the override rules."""

    reviews: Mapping[tuple[str, str], Review]
    rules: Overrides

    def review(self, drop: Drop) -> Review | None:
        return self.reviews.get((drop.url, drop.kept))

    def override(self, drop: Drop) -> Override | None:
        """The rule that applies to this decision: a keep/drop rule of the page, else a
        'not a duplicate' rule of the pair."""
        return self.rules.page(drop.canonical) or self.rules.distinct(drop.canonical,
                                                                      canonical_key(drop.kept))

    def rules_of(self, url: str, other: str) -> list[Override]:
        """Every rule that names the pair: each page's keep/drop rule, the pair's distinct."""
        a, b = canonical_key(url), canonical_key(other) if other else ""
        found = [self.rules.page(a), self.rules.page(b) if b else None,
                 self.rules.distinct(a, b) if b else None]
        return [rule for i, rule in enumerate(found) if rule is not None and rule not in found[:i]]


def select(drops: list[Drop], query: Query, marks: Marks) -> dict[str, Any]:
    """The page of ``/api/drops``: ``total`` matching rows, ``rows`` from ``offset``."""
    keep = _predicate(query, marks)
    matching = [d for d in drops if keep(d)]
    matching.sort(key=_sort_key(query.sort), reverse=query.descending)
    page = matching[query.offset:query.offset + query.limit]
    return {"total": len(matching), "all": len(drops), "offset": query.offset,
            "limit": query.limit, "rows": [row_json(d, marks) for d in page]}


def _predicate(query: Query, marks: Marks) -> Callable[[Drop], bool]:
    lo = query.min_distance if query.min_distance is not None else -1
    hi = query.max_distance if query.max_distance is not None else 1 << 30
    bounded = query.min_distance is not None or query.max_distance is not None

    def keep(d: Drop) -> bool:
        if query.reason and d.reason != query.reason:
            return False
        if bounded and (d.distance is None or not lo <= d.distance <= hi):
            return False
        if query.host and query.host not in host_of(d.url):
            return False
        if query.q and query.q not in d.haystack:
            return False
        return not query.reviewed or (marks.review(d) is not None) == (query.reviewed == "yes")

    return keep


def _sort_key(sort: str) -> Callable[[Drop], tuple[Any, ...]]:
    """Ties broken by URL, so a page of rows is stable; an unknown distance sorts as -1."""
    keys: dict[str, Callable[[Drop], tuple[Any, ...]]] = {
        "distance": lambda d: (-1 if d.distance is None else d.distance, d.url),
        "reason": lambda d: (d.reason, d.url),
        "url": lambda d: (d.url,),
        "kept": lambda d: (d.kept, d.url),
        "time": lambda d: (d.time, d.url),
    }
    return keys[sort]


def row_json(d: Drop, marks: Marks) -> dict[str, Any]:
    """One row as the page shows it (crawled strings as they are: the page sets them as text)."""
    review, rule = marks.review(d), marks.override(d)
    return {"url": d.url, "title": d.title, "reason": d.reason, "distance": d.distance,
            "kept": d.kept, "kept_title": d.kept_title, "time": d.time, "rule": d.rule,
            "review": review_json(review) if review else None,
            "override": rule.describe() if rule else None}


def review_json(review: Review) -> dict[str, Any]:
    return {"verdict": review.verdict, "label": review.label, "decision": review.decision,
            "note": review.note, "url": review.url, "other": review.other,
            "reviewed_at": iso_utc(review.reviewed_at) or ""}

"""What people said about the crawl's decisions: the review history, and the reviews as labels
that score every threshold of the what-if table.

A review (:class:`crawler.dedup.overrides.Review`) judges one decision on a pair of pages; its
:attr:`~crawler.dedup.overrides.Review.label` says what the pair truly is (a duplicate or not). Only
the newest review of each pair counts as its label (``CrawlDB.latest_reviews``). Every review of
the database counts, whichever crawl it judged: a label is about two pages, not about one run.

* **Labels** (:func:`labels`): each labelled pair at its distance, an exact copy at 0 bits. A
  decision without a distance is left out and counted by kind: a soft 404, a page a person's
  drop rule dropped (it was never compared), another pair whose fingerprints were not stored.
* **Scores** (:func:`score`): the rule at threshold t calls a pair a duplicate when its distance
  is at most t. Precision is the share of the pairs it calls duplicates that are labelled
  duplicates, recall the share of the labelled duplicates it calls duplicates, each with its
  counts ("3/4"); F1 = 2tp / (2tp + fp + fn). A ratio over nothing is None.
* **Advice** (:func:`advice`): one sentence on the crawl's k, and the table's threshold with
  the best F1 when it is not k (the closest to k among equals).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.dedup.overrides import CORRECT, DUPLICATE, WRONG
from crawler.report.wording import percent, plural
from crawler.review import iso_utc
from crawler.vocab import OVERRIDE, SOFT_404

if TYPE_CHECKING:
    from collections.abc import Iterable

    from crawler.dedup.overrides import Review

REVIEWS_LISTED = 100  # reviews listed in the history, newest first


#: The kinds of reviewed decisions without a distance, each with its nouns (one, several).
UNSCORED = {SOFT_404: ("soft 404", "soft 404s"),
            OVERRIDE: ("page a person's rule dropped", "pages a person's rule dropped"),
            "other": ("pair without fingerprints", "pairs without fingerprints")}


@dataclass(frozen=True)
class Labels:
    """The labelled pairs: ``(distance, is a duplicate)`` each; those without a distance, by
    kind (:data:`UNSCORED`)."""

    pairs: list[tuple[int, bool]] = field(default_factory=list)
    unscored: dict[str, int] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        return sum(dup for _, dup in self.pairs)

    @property
    def without_distance(self) -> int:
        return sum(self.unscored.values())

    def unscored_words(self) -> str:
        """``1 soft 404 and 2 pages a person's rule dropped``: the kinds left out."""
        parts = [plural(self.unscored[kind], *UNSCORED[kind]) for kind in UNSCORED
                 if self.unscored.get(kind)]
        return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def labels(latest: Iterable[Review]) -> Labels:
    """The label of each reviewed pair (its newest review) at its distance."""
    pairs: list[tuple[int, bool]] = []
    unscored: Counter[str] = Counter()
    for one in latest:
        distance = 0 if one.reason == "exact_duplicate" else one.distance
        if distance is None:
            unscored[one.reason if one.reason in UNSCORED else "other"] += 1
        else:
            pairs.append((distance, one.label == DUPLICATE))
    return Labels(pairs, dict(unscored))


def score(found: Labels, threshold: int) -> dict[str, Any] | None:
    """Precision, recall and F1 of the rule at ``threshold`` on the labels (None without)."""
    if not found.pairs:
        return None
    called = [dup for distance, dup in found.pairs if distance <= threshold]
    hits, duplicates = sum(called), found.duplicates
    wrong = len(called) - hits + duplicates - hits
    return {"precision": _ratio(hits, len(called)), "precision_of": [hits, len(called)],
            "recall": _ratio(hits, duplicates), "recall_of": [hits, duplicates],
            "f1": _ratio(2 * hits, 2 * hits + wrong)}


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def advice(found: Labels, rows: list[dict[str, Any]], k: int) -> str:
    """The sentence on k's precision and recall on what was reviewed ("" without a review).

    ``rows`` are the what-if rows, each with its :func:`score` under ``reviewed``.
    """
    if not found.pairs:
        return (f"No reviewed decision has a distance ({found.unscored_words()}): nothing "
                "to score the threshold against." if found.without_distance else "")
    left_out = (f" {plural(found.without_distance, 'reviewed decision')} without a distance "
                f"({found.unscored_words()}) left out." if found.without_distance else "")
    scored = {r["threshold"]: r["reviewed"] for r in rows if r.get("reviewed")}
    text = (f"On the {plural(len(found.pairs), 'reviewed decision')}, "
            f"k={k} has {_scores(score(found, k))}.")
    best = _best(scored, k)
    if best is not None:
        text += (f" k={best} would have {_scores(scored[best])} on what was reviewed "
                 "(the best F1 in the table).")
    return text + left_out


def _scores(s: dict[str, Any] | None) -> str:
    assert s is not None  # labels exist: every threshold has a score
    hits, called = s["precision_of"]
    _, duplicates = s["recall_of"]
    return (f"precision {percent(hits, called)} ({hits}/{called}) and "
            f"recall {percent(hits, duplicates)} ({hits}/{duplicates})")


def _best(scored: dict[int, dict[str, Any]], k: int) -> int | None:
    """The threshold with the best F1, the closest to k among equals; None when it is k."""
    f1 = {t: s["f1"] for t, s in scored.items() if s["f1"] is not None}
    if not f1:
        return None
    top = max(f1.values())
    if f1.get(k) == top:
        return None
    return min((t for t, v in f1.items() if v == top), key=lambda t: (abs(t - k), t))


def summary(reviews: list[Review], latest: dict[tuple[str, str], Review], found: Labels,
            rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """The report's ``reviews``: the history newest first (at most :data:`REVIEWS_LISTED`),
    its counts, the labels' counts and the :func:`advice`.

    ``reviews`` oldest first (``CrawlDB.reviews()``). ``correct`` and ``wrong`` count the
    newest review of each decision (``decisions`` of them); ``count`` every review.
    """
    verdicts = [one.verdict for one in latest.values()]
    newest = sorted(reviews, key=lambda r: (iso_utc(r.reviewed_at) or "", r.id or 0),
                    reverse=True)
    return {"count": len(reviews), "decisions": len(latest),
            "correct": verdicts.count(CORRECT), "wrong": verdicts.count(WRONG),
            "labelled": len(found.pairs), "duplicates": found.duplicates,
            "without_distance": found.without_distance,
            "without_distance_by_kind": dict(found.unscored), "advice": advice(found, rows, k),
            "listed_limit": REVIEWS_LISTED,
            "listed": [_listed(one) for one in newest[:REVIEWS_LISTED]]}


def _listed(one: Review) -> dict[str, Any]:
    return {"reviewed_at": iso_utc(one.reviewed_at), "url": one.url, "other": one.other,
            "decision": one.decision, "verdict": one.verdict, "label": one.label,
            "reason": one.reason, "distance": one.distance, "note": one.note,
            "crawl_id": one.crawl_id}

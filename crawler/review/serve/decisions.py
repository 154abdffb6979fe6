"""What the review server reads for one pair and does for one button: the explanation a
``/pair`` page shows (:func:`pair_explanation`), the action a POST calls
(:func:`act`, :mod:`crawler.review.actions`), the moves it appends to the drop log
and the answer the page reads (:func:`outcome_json`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.review import actions
from crawler.review.explanation import Page, compare, crawl_thresholds, explain, explain_pair
from crawler.review.serve.listing import review_json
from crawler.storage import ReviewError
from crawler.vocab import OVERRIDE, SOFT_404

if TYPE_CHECKING:
    from collections.abc import Mapping

    from crawler.review.crawldb import CrawlDB
    from crawler.review.explanation import Explanation

#: The string fields of a POST body (``remove`` is the one boolean).
FIELDS = ("url", "other", "verdict", "note", "action", "target")
UNPAIRED = {  # why a drop has no stored page to compare with
    SOFT_404: "a soft 404: like the page its host answered for a path no page links (the "
              "other page); that probe page is not stored",
    OVERRIDE: "dropped by a person's rule (an override), not as a copy of another page",
}


def pair_explanation(db: CrawlDB, url: str, other: str) -> tuple[Explanation, str]:
    """The explanation of the pair, and the other page's URL: the drop of ``url`` against
    the page it duplicates (when ``other`` is that page or not given), else the two pages
    compared."""
    row = db.dropped_row(url)
    duplicate_of = str(row.get("duplicate_of") or "") if row else ""
    if row is not None and other in ("", duplicate_of):
        if duplicate_of and db.document(duplicate_of) is not None:
            return explain(db, url), duplicate_of
        return _unpaired(db, row), duplicate_of
    if not other and db.document(url) is None:
        raise ReviewError(f"{url} is neither a dropped nor a kept page in {db.masked_url}")
    if not other:
        raise ReviewError(f"{url} was kept, not dropped: give the page to compare it with "
                          "(other=URL)")
    return explain_pair(db, url, other), other


def _unpaired(db: CrawlDB, row: dict[str, Any]) -> Explanation:
    """A drop whose other page is not stored (a soft 404's probe page, a person's drop rule,
    a kept page deleted since), compared with an empty page: its text and decision shown."""
    crawl_id = row.get("crawl_id")
    settings = db.crawl(crawl_id)["settings"] if crawl_id in db.crawl_ids() else {}
    other = str(row.get("duplicate_of") or "")
    missing = Page(other, "(not stored)", "", None, None, kept=True)
    e = compare(Page.from_row(row, kept=False), missing, str(row["reason"]),
                row.get("distance"), *crawl_thresholds(settings))
    e.rule = row.get("rule")
    e.notes.append(UNPAIRED.get(e.reason, f"{other or 'the other page'} is not stored"))
    return e


def act(path: str, fields: Mapping[str, str], remove: bool, db_url: str,
        known: list[str | None], rules_file: str | None) -> actions.Outcome:
    """The action of a POST to ``path``: ``/api/review`` records a review, ``/api/override``
    an override (or removes one when ``remove``), also in ``rules_file`` when given."""
    if path == "/api/review":
        return actions.add_review(db_url, fields["url"], fields["verdict"],
                                  fields["other"] or None, fields["note"], known=known)
    if remove:
        return actions.remove_override(db_url, fields["target"], fields["other"], rules_file,
                                       known)
    return actions.add_override(db_url, fields["action"], fields["target"], fields["other"],
                                fields["note"], rules_file, known)


def outcome_json(outcome: actions.Outcome) -> dict[str, Any]:
    """An :class:`crawler.review.actions.Outcome` as the page reads it."""
    rule, review = outcome.override, outcome.review
    return {"message": outcome.message, "override": rule.describe() if rule else None,
            "review": review_json(review) if review else None,
            "stored": list(outcome.stored), "dropped": list(outcome.dropped)}

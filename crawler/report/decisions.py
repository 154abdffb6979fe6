"""The drops a person should check (:func:`decisions`): near drops closest to k first, then
every exact-duplicate group with its size, each with both titles, the lines only in each page
and the ``scrapy dropped --explain`` command, leaving out the drops a person has reviewed; and
the largest duplicate groups."""

from __future__ import annotations

import shlex
from collections import Counter
from typing import TYPE_CHECKING, Any

from crawler import review
from crawler.outputs.formats import mask_url

if TYPE_CHECKING:
    from collections.abc import Collection

    from crawler.report.population import Population
    from crawler.review import CrawlDB

DECISIONS_LISTED = 100  # near drops listed in "decisions to check"
GROUPS_LISTED = 50  # exact-duplicate groups listed, each with up to COPIES_LISTED copies
COPIES_LISTED = 5
LARGEST_GROUPS = 10
DIFF_CHARS = 120  # one line of a difference, cut to this many characters
_CHECKED = ("near_duplicate", "exact_duplicate")  # the reasons of the decisions to check


def dropped_command(db_arg: str | None, option: str, *urls: str) -> str:
    """The ``scrapy dropped`` command line that shows ``urls`` with ``option``. ``db_arg`` is
    printed masked (a report may be mailed): the command resolves a masked ``--db`` from
    ``STORAGE_URL`` where the crawl's settings are (:func:`crawler.storage.resolve_db_url`)."""
    db_part = f" --db {shlex.quote(mask_url(db_arg))}" if db_arg else ""
    return f"scrapy dropped{db_part} {option} " + " ".join(shlex.quote(u) for u in urls)


def decisions(db: CrawlDB, rows: list[dict[str, Any]], k: int, db_arg: str | None = None,
              reviewed: Collection[tuple[str, str]] = ()) -> dict[str, Any]:
    """The drops a person should check: near drops closest to ``k`` first, exact groups.

    A drop whose ``(url, duplicate_of)`` is in ``reviewed`` (the pairs with a review,
    ``CrawlDB.latest_reviews()``) is left out, and counted in ``reviewed``; the counts and
    the groups' sizes are of the drops left to check.

    Near drops are sorted by distance (largest first), then URL; at most
    :data:`DECISIONS_LISTED` are listed with both titles, a one-line difference (the first line
    only in each page, from :func:`crawler.review.compare`) and the ``--explain`` command.
    Exact copies are grouped by the kept page, largest group first, at most
    :data:`GROUPS_LISTED` groups of which :data:`COPIES_LISTED` copies each.
    """
    checkable = [r for r in rows if r["reason"] in _CHECKED]
    to_check = [r for r in checkable if (r["url"], r["duplicate_of"] or "") not in reviewed]
    near = sorted((r for r in to_check if r["reason"] == "near_duplicate"),
                  key=lambda r: (-(r["distance"] or 0), r["url"]))
    groups = _exact_groups(to_check)
    ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))[:GROUPS_LISTED]
    listed_near = near[:DECISIONS_LISTED]
    wanted = listed_near + [c for _, copies in ordered for c in copies[:COPIES_LISTED]]
    texts = db.drop_texts([r["id"] for r in wanted])
    kept = db.kept_pages({r["duplicate_of"] for r in wanted if r["duplicate_of"]})
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
        "reviewed": len(checkable) - len(to_check),
        # the commands' --db hides a secret: they need the real URL where they run
        "db_masked": bool(db_arg) and mask_url(db_arg or "") != db_arg,
    }


def _exact_groups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The exact drops by the kept page they copy, each group sorted by URL."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in sorted((r for r in rows if r["reason"] == "exact_duplicate"),
                      key=lambda r: r["url"]):
        groups.setdefault(row["duplicate_of"] or "", []).append(row)
    return groups


def _decision(row: dict[str, Any], texts: dict[int, str], kept: dict[str, dict[str, Any]],
              k: int, db_arg: str | None) -> dict[str, Any]:
    match = kept.get(row["duplicate_of"] or "")
    text = texts.get(row["id"])
    return {"url": row["url"], "title": row.get("title"), "reason": row["reason"],
            "distance": row["distance"], "rule": row.get("rule"),
            "duplicate_of": row["duplicate_of"],
            "duplicate_title": match.get("title") if match else None,
            "difference": difference(text, match.get("text") if match else None, k),
            "command": dropped_command(db_arg, "--explain", row["url"])}


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

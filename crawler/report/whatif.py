"""The threshold view of a report: the nearest-distance histogram and its advice, the what-if
table (the pipeline's rule replayed at every threshold) and the near misses."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from crawler.report.decisions import dropped_command
from crawler.report.distances import NO_NEIGHBOUR, replay_matches
from crawler.report.reviews import score
from crawler.report.wording import plural
from crawler.review import REASONS

if TYPE_CHECKING:
    from crawler.report.distances import Edges
    from crawler.report.population import Population
    from crawler.report.reviews import Labels

WHATIF_EXTRA = 8  # what-if rows at least up to k + 8 (and to the first change above k)
NEAR_MISS_EXTRA = 3  # near misses at k+1..k+3
NEAR_MISS_LISTED = 50
CHANGES_LISTED = 10  # pages listed per what-if row

Replay = tuple[list[str], list[tuple[int, int] | None]]


def histogram(pop: Population, edges: Edges, k: int, radius: int) -> dict[str, Any]:
    """Kept and dropped pages by the distance to their nearest other page, with advice.

    A pair a person's rule keeps apart is no evidence about the threshold: neither page's
    nearest distance is the other's; ``kept_apart_by_rule`` counts the kept pairs."""
    kept, dropped, without, isolated = _nearest_counts(pop, edges)
    top = max([*kept, *dropped, radius])
    buckets = [{"distance": d, "kept": kept[d], "dropped": dropped[d]} for d in range(top + 1)]
    hist = {"buckets": buckets, "threshold": k,
            "pages": sum(kept.values()) + sum(dropped.values()),
            "without_fingerprint": without, "isolated": isolated,
            "kept_apart_by_rule": edges.ruled,
            "zoom": [max(0, k - 3), min(top, k + WHATIF_EXTRA)]}
    hist["advice"] = advice(hist)
    return hist


def _nearest_counts(pop: Population, edges: Edges,
                    ) -> tuple[Counter[int], Counter[int], int, int]:
    """Kept and dropped pages by nearest distance; pages without a fingerprint; isolated ones."""
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
        if distance == NO_NEIGHBOUR:
            isolated += 1
        else:
            (kept if status == "kept" else dropped)[distance] += 1
    return kept, dropped, without, isolated


def advice(hist: dict[str, Any]) -> str:
    """One sentence on the gap around the threshold, read off the histogram."""
    k = hist["threshold"]
    used = [b["distance"] for b in hist["buckets"] if b["kept"] + b["dropped"]]
    below = [d for d in used if d <= k]
    above = [d for d in used if d > k]
    if not above:
        return (f"No page is farther than {plural(k, 'bit')} from its nearest neighbour: the "
                "crawl is mostly duplicates, or too small to judge.")
    low, high = (max(below) if below else 0), min(above)
    if high - low > 1:
        gap = f"{low + 1}..{high - 1} bits" if high - low > 2 else plural(low + 1, "bit")
        return (f"No page has its nearest neighbour at {gap}: any "
                f"threshold from {low} to {high - 1} makes the same decisions on this crawl; "
                f"the closest distinct pages are {plural(high, 'bit')} apart.")
    return (f"Pages sit on both sides of k = {k} ({low} and {high} bits) with no "
            "gap: check the near misses and the drops at the line before changing it.")


def what_if(pop: Population, edges: Edges, k: int, radius: int,
            labels: Labels | None = None) -> dict[str, Any]:
    """The decisions at every threshold 0..``radius``, the pages each bit changes, and each
    threshold's precision and recall on the reviewed pairs (``reviewed``: None without)."""
    actual = sum(s in REASONS for s in pop.status)
    replays = [replay_matches(pop, edges.earlier, t, edges.held) for t in range(radius + 1)]
    rows, mismatches = [], 0
    for t, (decisions_t, _) in enumerate(replays):
        c = Counter(decisions_t)
        drops = c["exact_duplicate"] + c["near_duplicate"]
        rows.append({"threshold": t, "dropped": drops, "exact_duplicate": c["exact_duplicate"],
                     "near_duplicate": c["near_duplicate"], "kept": c["kept"],
                     "change": drops - actual, "actual": t == k,
                     "changes": _changes(pop, replays, t, k),
                     "reviewed": score(labels, t) if labels else None})
        if t == k:
            mismatches = sum(a != b for a, b in zip(decisions_t, pop.status, strict=True))
    return {"actual_dropped": actual, "rows": rows, "mismatches": mismatches,
            "adjusted_pairs": edges.adjusted, "unmatched_drops": edges.unmatched}


def _changes(pop: Population, replays: list[Replay], t: int, k: int) -> dict[str, Any]:
    """The pages decided differently at ``t`` than one bit closer to ``k`` (none at k)."""
    if t == k or not 0 <= (t - 1 if t > k else t + 1) < len(replays):
        return {"dropped": [], "kept": [], "dropped_count": 0, "kept_count": 0}
    here, matched = replays[t]
    there = replays[t - 1 if t > k else t + 1][0]
    newly_dropped = [i for i, (a, b) in enumerate(zip(here, there, strict=True))
                     if a in REASONS and b not in REASONS]
    newly_kept = [i for i, (a, b) in enumerate(zip(here, there, strict=True))
                  if a == "kept" and b in REASONS]
    return {"dropped": [_listed_drop(pop, here, matched, i)
                        for i in newly_dropped[:CHANGES_LISTED]],
            "kept": [{"url": pop.urls[i], "title": pop.titles[i]}
                     for i in newly_kept[:CHANGES_LISTED]],
            "dropped_count": len(newly_dropped), "kept_count": len(newly_kept)}


def _listed_drop(pop: Population, here: list[str], matched: list[tuple[int, int] | None],
                 i: int) -> dict[str, Any]:
    j, distance = matched[i] or (None, None)
    return {"url": pop.urls[i], "title": pop.titles[i], "reason": here[i],
            "distance": distance, "duplicate_of": None if j is None else pop.urls[j],
            "duplicate_title": None if j is None else pop.titles[j]}


def near_misses(pop: Population, edges: Edges, k: int, radius: int,
                db_arg: str | None) -> dict[str, Any]:
    """Pairs of kept pages at k+1..``radius`` bits: what a looser threshold would drop (not
    those a person's rule keeps apart: they are no edge)."""
    pairs = []
    for i, found in enumerate(edges.earlier):
        for j, distance in found:
            both_kept = {pop.status[i], pop.status[j]} <= {"kept", "prior"}
            if k < distance <= radius and both_kept and "kept" in (pop.status[i], pop.status[j]):
                pairs.append((distance, j, i))
    pairs.sort(key=lambda p: (p[0], pop.urls[p[1]], pop.urls[p[2]]))
    listed = [{"distance": d, "a": pop.urls[a], "b": pop.urls[b],
               "a_title": pop.titles[a], "b_title": pop.titles[b],
               "command": dropped_command(db_arg, "--pair", pop.urls[a], pop.urls[b])}
              for d, a, b in pairs[:NEAR_MISS_LISTED]]
    by_distance = Counter(d for d, _, _ in pairs)
    return {"count": len(pairs), "by_distance": {str(d): by_distance[d]
                                                  for d in range(k + 1, radius + 1)},
            "listed": listed}

"""Scores of one set's run through the pipeline (:mod:`bench.pipeline_eval`), and the report.

Scores (a *group* is an original and its planted duplicates, :mod:`bench.pages`):

* a drop is *correct* when the dropped page and its ``duplicate_of`` are in the same group;
  every other drop (a distinct page dropped, or a page dropped against another group) is wrong;
  precision = correct drops / drops;
* pairs planted = each group's members beyond one; *mirrors caught X of Y*: correct drops in
  groups holding a mirror, of their pairs; *copies* the same for groups of byte copies;
  pair recall = correct drops / pairs; group recall = groups *collapsed* (one member kept,
  every other dropped correctly) / groups; *kept twice*: groups with two or more members kept.

Diagnosis of each *missed* page (kept though a member of its group was kept before it), by
cause: ``young_veto`` (a near match on its own young host that
:func:`crawler.content.template.young_distinct` overruled: stats ``dedup/template/young_*``),
``too_short`` (no SimHash on one side: under ``SIMHASH_MIN_TOKENS`` tokens), ``far`` (the
nearest kept member of its group more than k bits away), ``other``. Distances are between the
page's SimHash and the SimHashes the index held just before the check (refreshes by template
learning included: a thin wrapper around the index records them). Also reported: the host young
at the check (under ``TemplateFilter.min_pages`` kept pages; "host" is what the pipeline keys
template learning on: its ``template_key`` where it has one) on either side, an original met
after its mirror, the median place of misses in the fetch order (0 first, 1 last), the main
tokens of grouped pages (template and short blocks out, as the pipeline fingerprints them) and
each page's closest *other* kept page (another group or a distinct page): the margin a larger k
would eat.

:func:`table` and :func:`diagnosis` print them: a row per set, a few lines per set.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crawler import defaults
from crawler.vocab import NEAR_DUPLICATE

K = defaults.SIMHASH_MAX_DISTANCE
EXAMPLES = 5  # wrong drops and kept-twice groups listed per set
MISSED_LISTED = 20  # missed pages listed per set


@dataclass
class Outcome:
    """One page's check: decision, fingerprint, and what it was near at the time."""

    url: str
    key: str  # its group, or its URL when distinct
    grouped: bool
    kind: str
    young: bool  # its host had no template yet
    follows: bool  # a member of its group was kept before it
    position: float = 0.0  # where in the fetch order (0 first, 1 last)
    kept: bool = True
    simhash: int | None = None
    tokens: int | None = None  # main tokens (grouped pages only)
    every_block: bool | None = None  # main tokens are all its tokens: short lines kept in
    reason: str | None = None
    duplicate_of: str | None = None
    distance: int | None = None
    vetoed: bool = False
    own_distance: int | None = None  # nearest kept member of its group (bits)
    other_distance: int | None = None  # nearest kept page of another group or distinct
    other_url: str | None = None


def _histogram(values: Iterable[int | None]) -> dict[str, int]:
    counts = Counter(v for v in values if v is not None)
    return {str(d): counts[d] for d in sorted(counts)}


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def cause(o: Outcome, k: int = K) -> str:
    """Why a missed page was kept (module docstring)."""
    if o.vetoed:
        return "young_veto"
    if o.simhash is None or o.own_distance is None:
        return "too_short"
    return "far" if o.own_distance > k else "other"


def score(outcomes: list[Outcome], k: int = K) -> dict[str, Any]:
    """Counts, rates and diagnosis of one run's outcomes (in fetch order)."""
    key_of = {o.url: o.key for o in outcomes}
    drops = [o for o in outcomes if not o.kept]
    correct = [o for o in drops if o.grouped and key_of.get(o.duplicate_of or "") == o.key]
    right = {o.url for o in correct}
    wrong = [o for o in drops if o.url not in right]
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.grouped:
            groups[o.key].append(o)
    kind = {g: "mirror" if any(m.kind == "mirror" for m in ms) else "copy"
            for g, ms in groups.items()}  # fmt: skip
    planted = Counter({"mirror": 0, "copy": 0})
    for g, members in groups.items():
        planted[kind[g]] += len(members) - 1
    caught = Counter(kind[o.key] for o in correct)
    collapsed = [
        g
        for g, ms in groups.items()
        if sum(m.kept for m in ms) == 1 and all(m.kept or m.url in right for m in ms)
    ]
    twice = [g for g, ms in groups.items() if sum(m.kept for m in ms) > 1]
    pairs = sum(planted.values())
    return {
        "pages": len(outcomes), "groups": len(groups),
        "mirrors": {"caught": caught["mirror"], "planted": planted["mirror"]},
        "copies": {"caught": caught["copy"], "planted": planted["copy"]},
        "drops": len(drops), "correct_drops": len(correct), "wrong_drops": len(wrong),
        "precision": len(correct) / len(drops) if drops else 1.0,
        "pair_recall": len(correct) / pairs if pairs else 1.0,
        "group_recall": len(collapsed) / len(groups) if groups else 1.0,
        "groups_collapsed": len(collapsed), "kept_twice": len(twice),
        "wrong": [{"url": o.url, "duplicate_of": o.duplicate_of, "distance": o.distance,
                   "reason": o.reason} for o in wrong[:EXAMPLES]],
        "kept_twice_groups": twice[:EXAMPLES],
        "missed": _missed(outcomes, groups, k),
        "caught_tokens_median": _median(o.tokens for o in correct),
        "caught_every_block": sum(bool(o.every_block) for o in correct),
        "distances": _distances(outcomes, correct, k),
        "by_tokens": _by_tokens(groups, set(collapsed)),
    }  # fmt: skip


#: Upper bounds (main tokens of a group's shortest member) of the page-length buckets.
TOKEN_BUCKETS = (50, 100, 200, 400, 800, 10**9)


def _by_tokens(groups: dict[str, list[Outcome]], collapsed: set[str]) -> dict[str, list[int]]:
    """Groups collapsed / groups, by the main tokens of their shortest member: how short a
    page k can still judge."""
    out: dict[str, list[int]] = {}
    low = 0
    for high in TOKEN_BUCKETS:
        label = f"{low}-{high - 1}" if high < 10**9 else f"{low}+"
        members = [g for g, ms in groups.items()
                   if low <= min((m.tokens or 0) for m in ms) < high]  # fmt: skip
        out[label] = [sum(g in collapsed for g in members), len(members)]
        low = high
    return out


def _missed(outcomes: list[Outcome], groups: dict[str, list[Outcome]], k: int) -> dict[str, Any]:
    missed = [o for o in outcomes if o.kept and o.follows]
    first = {g: next(m for m in ms if m.kept) for g, ms in groups.items()
             if any(m.kept for m in ms)}  # fmt: skip
    return {
        "pages": len(missed),
        "causes": dict(Counter(cause(o, k) for o in missed)),
        "distances": _histogram(o.own_distance for o in missed),
        "young_host": sum(o.young for o in missed),
        "young_either": sum(o.young or first[o.key].young for o in missed),
        "original_after_mirror": sum(o.kind == "page" for o in missed),
        "position_median": _median(round(o.position, 2) for o in missed),
        "tokens_median": _median(o.tokens for o in missed),
        "every_block": sum(bool(o.every_block) for o in missed),
        "examples": [{"url": o.url, "kept_first": first[o.key].url, "cause": cause(o, k),
                      "bits": o.own_distance, "tokens": o.tokens, "young": o.young}
                     for o in missed[:MISSED_LISTED]],
    }  # fmt: skip


def _distances(outcomes: list[Outcome], correct: list[Outcome], k: int) -> dict[str, Any]:
    others = [o.other_distance for o in outcomes if o.other_distance is not None]
    return {
        "correct_near": _histogram(o.distance for o in correct if o.reason == NEAR_DUPLICATE),
        "correct_exact": sum(o.reason != NEAR_DUPLICATE for o in correct),
        "closest_other": _histogram(others),
        "closest_other_min": min(others) if others else None,
        "closest_other_within_k": sum(d <= k for d in others),
    }


# --- report -------------------------------------------------------------------------------------
def _bits(hist: dict[str, int]) -> str:
    return " ".join(f"{d}:{n}" for d, n in hist.items()) or "-"


def _of(part: dict[str, int]) -> str:
    caught, planted = part["caught"], part["planted"]
    share = f" ({caught / planted:.0%})" if planted else ""
    return f"{caught}/{planted}{share}"


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    """One row per set: sizes, mirrors and copies caught, recall, precision, misses by cause
    (far / too short / young-host veto / other)."""
    head = (f"{'set':<12}{'pages':>6}{'groups':>7}  {'mirrors caught':<15}{'copies':<11}"
            f"{'group R':>7}{'pair R':>7}{'prec.':>7}{'wrong':>6}{'kept2x':>7}  "
            f"{'missed f/s/y/o':<15}{'secs':>5}")  # fmt: skip
    rows = [head]
    for name, r in results.items():
        if "skipped" in r:
            rows.append(f"{name:<12}skipped: {r['skipped']}")
            continue
        c = r["missed"]["causes"]
        causes = "/".join(str(c.get(x, 0)) for x in ("far", "too_short", "young_veto", "other"))
        rows.append(f"{name:<12}{r['pages']:>6}{r['groups']:>7}  {_of(r['mirrors']):<15}"
                    f"{_of(r['copies']):<11}{r['group_recall']:>7.3f}{r['pair_recall']:>7.3f}"
                    f"{r['precision']:>7.3f}{r['wrong_drops']:>6}{r['kept_twice']:>7}  "
                    f"{causes:<15}{r['seconds']:>5.1f}")  # fmt: skip
    return rows


def diagnosis(name: str, r: dict[str, Any]) -> list[str]:
    """A few lines on one set's misses, its margin to other pages and its wrong drops."""
    m, d = r["missed"], r["distances"]
    lines = [f"{name}: {r['built']}"]
    if m["pages"]:
        lines.append(
            f"  missed {m['pages']}: bits to own group {_bits(m['distances'])}; "
            f"{m['original_after_mirror']} originals met after their mirror; median place in "
            f"the fetch order {m['position_median']}; young host "
            f"{m['young_host']} (either side {m['young_either']}); main tokens median "
            f"{m['tokens_median']} missed / {r['caught_tokens_median']} caught; every block "
            f"fingerprinted (advert and date lines in) {m['every_block']} missed / "
            f"{r['caught_every_block']} caught"
        )
    lines.append(f"  correct near drops by bits {_bits(d['correct_near'])}, exact "
                 f"{d['correct_exact']}; closest other page min {d['closest_other_min']} bits, "
                 f"{d['closest_other_within_k']} within k")  # fmt: skip
    buckets = " ".join(f"{b}: {c}/{n}" for b, (c, n) in r.get("by_tokens", {}).items() if n)
    lines.append(f"  groups collapsed by main tokens of their shortest page: {buckets or '-'}")
    lines += [f"  wrong: {w['url']} as {w['reason']} of {w['duplicate_of']} ({w['distance']} bits)"
              for w in r["wrong"]]  # fmt: skip
    return lines

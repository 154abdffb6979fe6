"""An explanation (:class:`crawler.review.explanation.Explanation`) as text (80 columns, with
a unified diff on request) or as JSON-ready data: what ``scrapy dropped --explain`` and
``--pair`` print."""

from __future__ import annotations

import difflib
import textwrap
from typing import TYPE_CHECKING, Any

from crawler.content.simhash import to_hex

if TYPE_CHECKING:
    from crawler.review.explanation import Explanation

WIDTH = 80  # explanations, and a terminal whose width cannot be read
MAX_LISTED = 20  # lines and words listed per side in an explanation

_RULES = {
    "canonical": ("canonical copy: this page was stored first; the kept page, which this",
                  "page names canonical, came later and replaced it"),
    "preferred": ("preferred copy: this page was stored first; the kept page, preferred to",
                  "it ({why}), came later and replaced it"),
    "repointed": ("repointed: dropped against a copy stored first, which a page preferred",
                  "to it (the kept page) later replaced"),
    "refreshed": ("late drop: stored while its site's template was unknown; fingerprinted",
                  "again once it was learned, it fell within k of the kept page"),
    "settled": ("settled: the settle step re-decided this group at the end of the crawl;",
                "the kept page is preferred ({why})"),
    "": ("preference order: the kept page is preferred ({why}); named canonical, then",
         "a seed's host, then the shorter URL, then the smaller URL"),
}


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a cut keeps both halves around ``…``."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def format_explanation(e: Explanation, diff: bool = False) -> str:
    """The explanation as text (80 columns), with a unified diff when ``diff``."""
    first, second = _labels(e)
    lines = [_row(first, e.dropped.url), _row("", "title: " + (e.dropped.title or "-")),
             _row(second, e.kept.url), _row("", "title: " + (e.kept.title or "-"))]
    lines += _decision_lines(e)
    lines.append("")
    one, other = _side_names(e)
    lines += _listing("Lines only in " + one, e.lines_only_dropped)
    lines += _listing("Lines only in " + other, e.lines_only_kept)
    lines += _listing("Words only in " + one, e.words_only_dropped, words=True)
    lines += _listing("Words only in " + other, e.words_only_kept, words=True)
    for note in e.notes:
        lines += textwrap.wrap(note, WIDTH, initial_indent="Note: ", subsequent_indent="      ")
    if diff:
        lines += ["", *unified_diff(e)]
    return "\n".join(lines) + "\n"


def unified_diff(e: Explanation) -> list[str]:
    """A unified diff of the extracted text, kept page first."""
    out = list(difflib.unified_diff(e.kept.text.splitlines(), e.dropped.text.splitlines(),
                                    fromfile=e.kept.url, tofile=e.dropped.url, lineterm=""))
    return out or ["(no difference in the extracted text)"]


def explanation_dict(e: Explanation, diff: bool = False) -> dict[str, Any]:
    """The explanation as JSON-ready data (same facts as the text form)."""
    def side(p: Any) -> dict[str, Any]:
        return {"url": p.url, "title": p.title, "simhash": _fp(p.simhash),
                "content_hash": p.content_hash, "kept": p.kept}

    data = {"dropped": side(e.dropped), "kept": side(e.kept), "reason": e.reason,
            "rule": e.rule or ("preference" if e.reason != "pair" else None),
            "preferred_by": e.preferred_by or None,
            "distance": e.distance, "stored_distance": e.stored_distance,
            "max_distance": e.max_distance, "blocks": len(e.blocks),
            "matched_blocks": [i + 1 for i in e.matched_blocks], "exact": e.exact,
            "identical_text": e.identical_text,
            "lines_only_dropped": dict(e.lines_only_dropped),
            "lines_only_kept": dict(e.lines_only_kept),
            "words_only_dropped": dict(e.words_only_dropped),
            "words_only_kept": dict(e.words_only_kept), "notes": e.notes}
    if diff:
        data["diff"] = unified_diff(e)
    return data


def _fp(value: int | None) -> str:
    return to_hex(value) or "-"


def _listing(title: str, counts: Any, words: bool = False) -> list[str]:
    total = sum(counts.values())
    head = f"{title} ({len(counts)} distinct, {total} in all)"
    if not counts:
        return [head + ": none"]
    items = counts.most_common(MAX_LISTED)
    more = len(counts) - len(items)
    if words:
        body = ", ".join(f"{w} x{n}" for w, n in items) + (f", … {more} more" if more else "")
        return [head + ":", "  " + body]
    out = [head + ":"] + [f"  {n}x {cut(line, WIDTH - 8)}" for line, n in items]
    return out + ([f"  … {more} more"] if more else [])


def _row(label: str, value: str) -> str:
    return f"{label + ':' if label else '':<10}{value}"


def _labels(e: Explanation) -> tuple[str, str]:
    if e.reason == "pair":
        return "Page A", "Page B"
    return "Dropped", "Kept"


def _side_names(e: Explanation) -> tuple[str, str]:
    """The two pages in a sentence: "page A"/"page B", or "the dropped page"/"the kept page"."""
    if e.reason == "pair":
        return "page A", "page B"
    return "the dropped page", "the kept page"


def _decision_lines(e: Explanation) -> list[str]:
    verdict = e.reason if e.reason != "pair" else "both pages compared"
    lines = [_row("Reason", verdict), *_rule_lines(e), *_distance_lines(e)]
    exact = {True: "content hashes equal: an exact copy",
             False: "content hashes differ: not an exact copy",
             None: "no content hash stored"}[e.exact]
    lines.append(_row("Exact", exact))
    return lines + _text_lines(e)


def _distance_lines(e: Explanation) -> list[str]:
    dist = "unknown (no fingerprint)" if e.distance is None else f"{e.distance} bits"
    stored = "" if e.stored_distance in (None, e.distance) else f" (stored {e.stored_distance})"
    within = "" if e.distance is None else (
        " — within" if e.distance <= e.max_distance else " — beyond")
    lines = [_row("Distance", f"{dist}{stored}{within} SIMHASH_MAX_DISTANCE={e.max_distance}"),
             _row("SimHash", f"{_fp(e.dropped.simhash)} vs {_fp(e.kept.simhash)}")]
    if e.distance is not None:
        width = "/".join(sorted({str(w) for _, w in e.blocks}))
        same = ", ".join(str(i + 1) for i in e.matched_blocks) or "none"
        lines.append(_row("Blocks", f"{len(e.matched_blocks)} of {len(e.blocks)} blocks "
                                    f"({width} bits) equal: {same}"))
    return lines


def _text_lines(e: Explanation) -> list[str]:
    if e.identical_text:
        return [_row("Text", "identical")]
    one, other = _side_names(e)
    return [_row("Text", f"differs: {_n(e.lines_only_dropped, 'line')} and "
                         f"{_n(e.words_only_dropped, 'word')} only in {one},"),
            _row("", f"{_n(e.lines_only_kept, 'line')} and "
                     f"{_n(e.words_only_kept, 'word')} only in {other}")]


def _rule_lines(e: Explanation) -> list[str]:
    """Which page of the two was kept, and why."""
    if e.reason == "pair":
        return []
    if not e.preferred_by and not e.rule:  # a crawl of an older version: no order applied
        return [_row("Rule", "first fetched: the kept page was decided first")]
    first, second = _RULES.get(e.rule or "", _RULES[""])
    why = e.preferred_by or "equal by the order"
    return [_row("Rule", first.format(why=why))] + (
        [_row("", second.format(why=why))] if second else [])


def _n(counts: Any, noun: str) -> str:
    total = sum(counts.values())
    return f"{total} {noun}{'' if total == 1 else 's'}"


def standing_lines(rules: list[Any], reviews: list[Any]) -> list[str]:
    """What a person said of a page: the rules that decide it ("kept by override,
    2026-12-04: keep URL") and its reviews, newest last
    (:func:`crawler.review.actions.standing`)."""
    lines = []
    for rule in rules:
        verb = {"keep": "kept", "drop": "dropped"}.get(rule.action, "kept apart")
        when = rule.created_at.date().isoformat() if rule.created_at else rule.source
        lines.append(f"{verb} by override, {when}: {rule.describe().rsplit(' (', 1)[0]}"
                     + (f"  # {rule.note}" if rule.note else ""))
    for r in reviews:
        when = r.reviewed_at.strftime("%Y-%m-%d %H:%M") if r.reviewed_at else "-"
        what = (f"dropped as a duplicate of {r.other}" if r.decision == "dropped"
                else f"kept beside {r.other}")
        dist = "" if r.distance is None else (
            f" at {r.distance} bit{'' if r.distance == 1 else 's'}")
        lines.append(f"reviewed {when}: {r.verdict} ({what}{dist})"
                     + (f"  # {r.note}" if r.note else ""))
    return lines

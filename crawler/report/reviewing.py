"""The report's sections for a person checking decisions: the decisions to check (near drops
closest to k, exact-duplicate groups, each with both titles, links, the lines only in each page
and the ``scrapy dropped --explain`` command; the reviewed ones left out and counted) and the
reviews (verdict counts, the history newest first). Pieces of :mod:`crawler.report.html`.
"""

from __future__ import annotations

from typing import Any

from crawler.report.markup import esc, html_table, link
from crawler.report.wording import bits, noun_for, plural


def decisions_section(dec: dict[str, Any] | None) -> str:
    """The near drops closest to k first, then the exact-duplicate groups, each actionable."""
    if not dec:
        return '<p class="note">No decision list in this report.</p>'
    counts = ", ".join(f"{n} at {bits(int(d))}" for d, n in dec["near_by_distance"].items())
    out = [f'<p id="decision-summary">{plural(dec["near_count"], "near duplicate")}'
           f"{': ' + esc(counts) if counts else ''}; "
           f"{plural(dec['exact_count'], 'exact copy', 'exact copies')} in "
           f"{plural(dec['exact_group_count'], 'group')}. Closest to the threshold first: open "
           "a few with the command under each.</p>"]
    if dec.get("reviewed"):
        out.append(f'<p class="note" id="decisions-reviewed">'
                   f"{plural(dec['reviewed'], 'reviewed decision')} left out (see Reviews).</p>")
    if dec.get("db_masked"):
        out.append('<p class="note" id="masked-db">The commands name the database with its '
                   "secrets hidden (***): they run where STORAGE_URL or the DEDUP_STORAGE_URL "
                   "environment variable holds the real URL.</p>")
    if dec["near"]:
        items = "".join(_decision_item(d) for d in dec["near"])
        out.append(f'<h3>Near duplicates</h3><ol class="decisions" id="decisions">{items}</ol>')
    rest = dec["near_count"] - len(dec["near"])
    if rest > 0:
        out.append(f'<p class="note" id="decisions-rest">… and {rest} more '
                   f"{noun_for(rest, 'near duplicate')} not listed "
                   "(scrapy dropped --reason near lists them all).</p>")
    if dec["exact_groups"]:
        groups = "".join(_exact_item(g) for g in dec["exact_groups"])
        out.append(f'<h3>Exact copies, by group</h3><ol class="decisions" id="exact-groups">'
                   f"{groups}</ol>")
    rest = dec["exact_group_count"] - len(dec["exact_groups"])
    if rest > 0:
        out.append(f'<p class="note">… and {rest} more {noun_for(rest, "group")} not listed.</p>')
    return "".join(out)


def _decision_item(d: dict[str, Any]) -> str:
    rule = f" (rule: {esc(d['rule'])})" if d.get("rule") else ""
    return (f'<li class="decision" data-distance="{esc(d["distance"])}" data-url="{esc(d["url"])}">'
            f'<span class="bits">{esc(bits(d["distance"]))}</span> dropped '
            f"{link(d['url'], d['title'] or '(no title)')} as a duplicate of kept "
            f"{link(d['duplicate_of'], d['duplicate_title'] or '(no title)')}{rule}"
            f'<div class="url">{esc(d["url"])} → {esc(d["duplicate_of"])}</div>'
            f'<div class="diff">{esc(d["difference"]["summary"])}</div>'
            f"<code>{esc(d['command'])}</code></li>")


def reviews_section(rev: dict[str, Any] | None) -> str:
    """The verdict counts and the review history, newest first."""
    if not rev or not rev["count"]:
        return ('<p class="note" id="review-summary">No decision has been reviewed yet: '
                "<code>scrapy dropped --review URL correct</code> (or <code>wrong</code>) takes "
                "a decision off the list to check and scores the what-if on it.</p>")
    summary = (f'<p id="review-summary">{plural(rev["count"], "review")} of '
               f"{plural(rev['decisions'], 'decision')}: {rev['correct']} correct, "
               f"{rev['wrong']} wrong (the newest review of each decision).</p>")
    rows = [[r["reviewed_at"] or "", link(r["url"]), link(r["other"]),
             r["decision"], r["verdict"], "" if r["distance"] is None else r["distance"],
             r["note"]] for r in rev["listed"]]
    table = html_table(["reviewed", "page", "compared with", "decision", "verdict", "bits",
                        "note"], rows, {5}, "reviews",
                       [f' data-verdict="{esc(r["verdict"])}"' for r in rev["listed"]])
    more = rev["count"] - len(rev["listed"])
    extra = (f'<p class="note">… and {more} older {noun_for(more, "review")} not listed.</p>'
             if more > 0 else "")
    return summary + table + extra


def _exact_item(g: dict[str, Any]) -> str:
    copies = "".join(f"<li>{link(c['url'], c['url'])} <code>{esc(c['command'])}</code></li>"
                     for c in g["copies"])
    more = g["size"] - 1 - len(g["copies"])
    extra = f"<li>… and {more} more</li>" if more > 0 else ""
    return (f'<li class="exact-group" data-size="{g["size"]}">'
            f'<span class="bits">{plural(g["size"], "page")}</span> kept '
            f"{link(g['duplicate_of'], g['duplicate_title'] or '(no title)')}"
            f'<div class="url">{esc(g["duplicate_of"])}</div>'
            f"<ul>{copies}{extra}</ul></li>")

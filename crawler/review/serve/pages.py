"""The two HTML pages of ``scrapy dedupreport --serve``: the drop list (``/``), whose rows the
script fetches from ``/api/drops``, and one decision side by side (``/pair``).

Every crawled string (titles, URLs, text) is escaped with :func:`crawler.report.markup.esc`
and a URL is a live link only for http(s) (:func:`crawler.report.markup.link`). The CSS and
the script are inline, each marked with the response's CSP nonce; the page carries the
server's token in ``<meta name="review-token">`` for the script's POSTs. The differing lines
are those of :func:`crawler.review.explain` (``lines_only_dropped``/``lines_only_kept``):
a line of one side is highlighted when its stripped text is not a line of the other side, and
in it the words that are not words of the other side (``words_only_*``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from crawler.report.markup import esc, link
from crawler.review.render import explanation_dict
from crawler.review.serve.assets import CSS, SCRIPT
from crawler.review.serve.decisions import UNPAIRED
from crawler.review.serve.listing import LIST_REASONS

if TYPE_CHECKING:
    from collections import Counter

    from crawler.review.explanation import Explanation, Page

_WORD = re.compile(r"(\w+)", re.UNICODE)  # the words of crawler.review.words_of, kept
LIST_COLUMNS = (("distance", "Distance"), ("reason", "Reason"), ("url", "Dropped page"),
                ("kept", "Kept page"), ("time", "Time"))


def document(title: str, body: str, page: str, nonce: str, token: str) -> str:
    """A whole page: ``body`` with the inline CSS and script, both marked with ``nonce``."""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="review-token" content="{esc(token)}">'
            f"<title>{esc(title)}</title><style nonce=\"{nonce}\">{CSS}</style></head>"
            f'<body data-page="{page}">{body}'
            f'<script nonce="{nonce}">{SCRIPT}</script></body></html>\n')


def list_page(label: str, database: str, nonce: str, token: str) -> str:
    """The drop list: filters, a sortable table the script fills, a pager."""
    reasons = "".join(f'<option value="{r}">{esc(r)}</option>' for r in LIST_REASONS)
    heads = "".join(f'<th><button type="button" class="sort" data-sort="{key}">{name}'
                    '<span class="arrow"></span></button></th>' for key, name in LIST_COLUMNS)
    body = (f"<h1>Dropped pages — {esc(label)}</h1>"
            f'<p class="note">{esc(database)}. Open a row to compare both stored texts and '
            "mark or overrule the decision.</p>"
            '<form id="filters" autocomplete="off">'
            f'<label>Reason <select name="reason"><option value="">any</option>{reasons}'
            "</select></label>"
            '<label>Host <input name="host" size="14" placeholder="part of a host"></label>'
            '<label>Distance <input name="min" type="number" min="0" max="64" size="3">'
            ' to <input name="max" type="number" min="0" max="64" size="3"></label>'
            '<label>Reviewed <select name="reviewed"><option value="">any</option>'
            '<option value="yes">reviewed</option><option value="no">not reviewed</option>'
            "</select></label>"
            '<label>Search <input name="q" type="search" size="22" '
            'placeholder="URL or title"></label></form>'
            '<p id="summary" class="note" aria-live="polite">Loading…</p>'
            f'<table id="drops"><thead><tr>{heads}<th>Review</th><th>Override</th></tr></thead>'
            '<tbody></tbody></table>'
            '<p class="pager"><button type="button" id="prev">← Previous</button> '
            '<button type="button" id="next">Next →</button></p>')
    return document(f"Dropped pages — {label}", body, "list", nonce, token)


def pair_page(e: Explanation, url: str, other: str, nonce: str, token: str) -> str:
    """One decision: the facts, the actions, the history (filled by the script), both texts."""
    first, second = ("Page A", "Page B") if e.reason == "pair" else ("Dropped", "Kept")
    body = (f'<p><a href="/">← All dropped pages</a></p>'
            f"<h1>{esc(first)} and {esc(second.lower())} page compared</h1>"
            f'<main id="pair" data-url="{esc(url)}" data-other="{esc(other)}">'
            f"{_facts(e)}{_actions()}"
            '<h2>Reviews and overrides of this pair</h2><ul id="history"></ul>'
            '<h2>Stored texts <span class="note">(lines only on one side highlighted)</span></h2>'
            '<div class="sides">'
            f"{_side(first, e.dropped, e.lines_only_dropped, e.words_only_dropped)}"
            f"{_side(second, e.kept, e.lines_only_kept, e.words_only_kept)}</div></main>")
    return document(f"{first}: {e.dropped.title or e.dropped.url}", body, "pair", nonce, token)


def _facts(e: Explanation) -> str:
    data = explanation_dict(e)
    bits = e.stored_distance if e.distance is None else e.distance  # no fingerprint: stored
    distance = "unknown" if bits is None else f"{bits} bit{'s' * (bits != 1)}"
    within = "" if bits is None else (
        " (within" if bits <= e.max_distance else " (beyond") + f" k = {e.max_distance})"
    # no preference order chose between a soft 404 or a person's drop and a kept page
    rule = (e.rule or "—") if e.reason in UNPAIRED else (data["rule"] or "—")
    if data["preferred_by"]:
        rule += f" (kept page preferred: {data['preferred_by']})"
    exact = {True: "an exact copy", False: "not an exact copy", None: "no content hash"}[e.exact]
    rows = [("Reason", e.reason if e.reason != "pair" else "two stored pages compared"),
            ("Rule", rule), ("Distance", distance + within), ("Exact", exact),
            ("Text", "identical" if e.identical_text else
             f"{sum(e.lines_only_dropped.values())} line(s) only in the first, "
             f"{sum(e.lines_only_kept.values())} only in the second")]
    rows += [("Note", note) for note in e.notes]
    cells = "".join(f'<tr><th>{esc(k)}</th><td data-fact="{esc(k.lower())}">{esc(v)}</td></tr>'
                    for k, v in rows)
    return f'<table id="facts">{cells}</table>'


def _actions() -> str:
    buttons = [("review", "correct", "Correct", "the crawl decided right"),
               ("review", "wrong", "Wrong", "the crawl decided wrong"),
               ("override", "keep", "Keep this page", "store the first page whatever its "
                                                      "fingerprint, now and in every later crawl"),
               ("override", "distinct", "Not a duplicate of this page",
                "never treat the first page as a duplicate of the second"),
               ("override", "drop", "Always drop", "drop the first page in every later crawl"),
               ("remove", "", "Remove override", "remove the rule that applies to this pair")]
    html = "".join(f'<button type="button" data-kind="{kind}" data-value="{value}" '
                   f'title="{esc(hint)}">{esc(name)}</button>'
                   for kind, value, name, hint in buttons)
    return ('<div id="actions"><label>Note <input id="note" size="40" maxlength="500" '
            f'placeholder="optional, saved with the mark or rule"></label>{html}</div>'
            '<p id="status" role="status" aria-live="polite"></p>')


def _side(label: str, page: Page, only_here: Counter[str], words_here: Counter[str]) -> str:
    state = "stored: in documents" if page.kept else "a drop row: in dropped"
    rows = "".join(_line(line, only_here, words_here) for line in page.text.splitlines() or [""])
    return (f'<section class="side" data-side="{esc(label.lower())}">'
            f"<h3>{esc(label)} <span class=\"state note\">({state})</span></h3>"
            f'<p class="title">{esc(page.title or "(no title)")}</p>'
            f'<p class="url">{link(page.url)}</p><div class="text">{rows}</div></section>')


def _line(line: str, only_here: Counter[str], words_here: Counter[str]) -> str:
    """One line of text; a line only on this side is marked, and in it the words only on this
    side (:func:`crawler.review.words_of`'s words) are ``<mark>``-ed."""
    if line.strip() not in only_here:
        return f'<div class="line">{esc(line) or "&nbsp;"}</div>'
    parts = _WORD.split(line)  # odd indexes: the words
    html = "".join(f"<mark>{esc(part)}</mark>" if i % 2 and part.casefold() in words_here
                   else esc(part) for i, part in enumerate(parts))
    return f'<div class="line only">{html}</div>'

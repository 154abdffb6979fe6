"""The HTML of ``scrapy dedupreport``: one self-contained page of the data of
:func:`crawler.report.build_report` (the numbers never import the page; its pieces are
:mod:`crawler.report.markup` and :mod:`crawler.report.reviewing`).

One file, opens offline: inline CSS and SVG, no script, no font, no image, no external asset.
Everything that comes from a crawled page (titles, text, URLs) is escaped; a URL becomes a link
(``rel="noopener noreferrer nofollow"``) only when its scheme is http or https, so a
``javascript:`` URL is shown as text, never made live.

Sections: totals (with a row for the soft 404s and one for the pages a person's rule dropped
when there are any; the duplicate rate, and per host, leaves the latter out); the **threshold
view** (the nearest-distance histogram, whose axis is broken when one bar is over three times
the next so small bars stay readable, a zoom panel of k-3..k+8 with its own scale, counts
written on every bar, and the what-if table with the pages each extra bit would drop);
**decisions to check** (near drops closest to k, exact-duplicate groups, each with both titles,
links, the lines only in each page and the ``scrapy dropped --explain`` command, the reviewed
ones left out); the **reviews** (the history newest first, verdict counts; with reviews the
what-if table gains each threshold's precision and recall on them, and the advice a sentence on
k); near misses; the largest duplicate groups; per-host duplicate rates; the URL-dedup counters;
settings and stats formatted for people (rounded, with units, lists joined; every percentage by
:func:`crawler.report.wording.percent`, every count with its noun by
:func:`~crawler.report.wording.plural`). ``--format json`` keeps the raw values.
"""

from __future__ import annotations

from typing import Any

from crawler.report.markup import (
    DROPPED_COLOUR,
    KEPT_COLOUR,
    SETTING_UNITS,
    Raw,
    esc,
    histogram_svg,
    html_table,
    human,
    link,
    page_ref,
)
from crawler.report.reviewing import decisions_section, reviews_section
from crawler.report.whatif import WHATIF_EXTRA
from crawler.report.wording import bits, percent, plural

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:1.2em 0 .3em}svg{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.actual{background:#fff4d6;font-weight:600}
tr.changed td:first-child{border-left:3px solid #e45756}
code{font-size:.85em;word-break:break-all;background:#f5f5f5;padding:0 .2em}
.note{color:#666}.url{color:#666;font-size:.85em;word-break:break-all}
.kept{fill:#4c78a8}.dropped{fill:#e45756}.legend span{display:inline-block;width:.9em;
height:.9em;margin:0 .3em 0 1em;vertical-align:middle}svg text{font-size:11px;fill:#333}
ol.decisions{padding-left:2em}ol.decisions>li{margin:.2em 0 .8em}.diff{margin:.15em 0}
.bits{display:inline-block;min-width:4.5em;font-weight:600}
ul.changes{margin:.2em 0;padding-left:1.2em}
"""


# --- sections ------------------------------------------------------------------------------


def render_html(data: dict[str, Any]) -> str:
    """One self-contained HTML page (inline CSS and SVG, no script) with every number."""
    crawl, k = data["crawl"], data["threshold"]
    ids = crawl["ids"]
    name = (f"crawl {ids[0]}" if len(ids) == 1
            else "crawls " + ", ".join(map(str, ids)) + " (one job)")
    sections = [
        f"<h1>Dedup report — {esc(name)}</h1>",
        f'<p class="note">{esc(data["database"])}, generated {esc(data["generated_at"])}. '
        f"{esc(_sample_note(data['sample']))}</p>",
        "<h2>Crawl and totals</h2>", _totals_table(crawl, data["totals"]),
        "<h2>Threshold: distance to the nearest other page</h2>",
        _histogram_section(data["histogram"], data.get("reviews")),
        "<h3>What if the threshold were different?</h3>", _what_if_section(data, k),
        f"<h2>Decisions to check (k = {k})</h2>", decisions_section(data.get("decisions")),
        "<h2>Reviews</h2>", reviews_section(data.get("reviews")),
        "<h2>Near misses (kept pairs just above the threshold)</h2>",
        _near_miss_section(data["near_misses"]),
        "<h2>Largest duplicate groups</h2>", _groups_section(data.get("largest_groups")),
        "<h2>By host</h2>", _host_table(data["by_host"]),
        "<h2>By reason</h2>",
        html_table(["reason", "pages"], [[r, n] for r, n in data["by_reason"].items()], {1},
               "by-reason", [f' data-reason="{esc(r)}"' for r in data["by_reason"]]),
        "<h2>Duplicate URLs (before fetching)</h2>", _url_section(data.get("url_dedup")),
        "<h2>Settings that shape dedup</h2>", _settings_table(data["settings"]),
    ]
    if data["stats"]:
        sections += [f"<h2>Crawl stats (crawl {esc(crawl['id'])})</h2>", html_table(
            ["stat", "value"], [[n, human(v, n)] for n, v in sorted(data["stats"].items())],
            {1}, "stats")]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>Dedup report — {esc(name)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(sections)}</body></html>\n")


def _sample_note(sample: dict[str, Any]) -> str:
    if sample["exact"]:
        return f"Exact: all {plural(sample['pages'], 'page')} compared."
    return (f"Sampled: distances and what-if use a uniform random sample of "
            f"{sample['sample_size']:,} of {plural(sample['pages'], 'page')} "
            f"(seed {sample['seed']}); totals cover every page.")


def _totals_table(crawl: dict[str, Any], totals: dict[str, Any]) -> str:
    """The crawl and its totals; the soft-404 and person's-rule rows when there are such
    pages (pages decided = kept + dropped + those two)."""
    rate = percent(totals["dropped"], totals["compared"])
    if totals["override"]:
        rate += (f" of {plural(totals['compared'], 'page')} compared (the {totals['override']:,}"
                 " a person's rule dropped left out)")
    rows = [("crawl", ", ".join(map(str, crawl["ids"])), "crawl-id"),
            ("started", crawl["started_at"], "started"),
            ("finished", crawl["finished_at"], "finished"),
            ("finish reason", crawl["finish_reason"], "finish-reason"),
            ("pages decided", totals["pages"], "total-pages"),
            ("kept", totals["kept"], "total-kept"), ("dropped", totals["dropped"], "total-dropped"),
            ("exact duplicates", totals["exact_duplicate"], "total-exact_duplicate"),
            ("near duplicates", totals["near_duplicate"], "total-near_duplicate")]
    rows += [(label, totals[key], f"total-{key}") for key, label in (
        ("soft_404", "soft 404s"), ("override", "dropped by a person's rule")) if totals[key]]
    rows += [("duplicate rate", rate, "duplicate-rate"),
             ("originals kept over copies stored first", totals["canonical_swaps"],
              "canonical-swaps"),
             ("documents of earlier crawls", totals["prior_documents"], "prior-documents")]
    body = "".join(f'<tr><th>{esc(label)}</th><td id="{ident}">{esc(value)}</td></tr>'
                   for label, value, ident in rows)
    return f'<table id="totals"><tbody>{body}</tbody></table>'


def _histogram_section(hist: dict[str, Any], reviews: dict[str, Any] | None) -> str:
    legend = (f'<p class="legend"><span style="background:{KEPT_COLOUR}"></span>kept'
              f'<span style="background:{DROPPED_COLOUR}"></span>dropped; dashed line: '
              f"threshold k = {hist['threshold']} (a page at or left of it has a near duplicate)."
              "</p>")
    notes = []
    if hist["isolated"]:
        notes.append(f"{plural(hist['isolated'], 'page')} had no other page to compare with.")
    if hist["without_fingerprint"]:
        notes.append(f"{plural(hist['without_fingerprint'], 'page')} without a SimHash (too few "
                     "tokens: checked for exact copies only) not drawn.")
    if hist.get("kept_apart_by_rule"):
        notes.append(f"{plural(hist['kept_apart_by_rule'], 'kept pair')} kept apart by a "
                     "person's rule (a keep rule names one page, or a distinct rule the two): "
                     "left out of the nearest distances, the what-if and the near misses, "
                     "since the rule keeps them at any threshold.")
    lo, hi = hist["zoom"]
    zoom = (f'<h3>Around the threshold: {lo}..{hi} bits, its own scale</h3>'
            + histogram_svg(hist, 900, 200, svg_id="histogram-zoom", bar_class="zoom-bin",
                            lo=lo, hi=hi))
    help_text = ("A clear gap between the duplicates on the left and the distinct pages on the "
                 "right means the threshold is safe anywhere inside it; kept bars close to the "
                 "line are near misses, dropped bars at the line are the decisions to check.")
    return (legend + histogram_svg(hist) + zoom + f'<p class="note">{esc(" ".join(notes))}</p>'
            f'<p id="advice">{esc(hist.get("advice", ""))}</p>{_review_advice(reviews)}'
            f"<p>{esc(help_text)}</p>")


def _review_advice(reviews: dict[str, Any] | None) -> str:
    if not reviews or not reviews.get("advice"):
        return ""
    return f'<p id="review-advice">{esc(reviews["advice"])}</p>'


def _what_if_section(data: dict[str, Any], k: int) -> str:
    w = data["what_if"]
    first = w.get("first_change_above")
    scored = bool((data.get("reviews") or {}).get("labelled"))
    rows, attrs, last = [], [], None
    for r in _shown_rows(w["rows"], k, first):
        if last is not None and r["threshold"] > last["threshold"] + 1:
            rows.append([f"{last['threshold'] + 1}..{r['threshold'] - 1}", "", "", "", "",
                         "+0", "same decisions as k", *_score_cells(last, scored)])
            attrs.append(' class="gap"')
        rows.append([r["threshold"], r["dropped"], r["exact_duplicate"], r["near_duplicate"],
                     r["kept"], f"{r['change']:+d}", _changes_cell(r, k),
                     *_score_cells(r, scored)])
        changed = r.get("changes", {}).get("dropped_count") or r.get("changes", {}).get(
            "kept_count")
        cls = "actual" if r["actual"] else "changed" if changed else ""
        attrs.append(f' data-threshold="{r["threshold"]}"' + (f' class="{cls}"' if cls else ""))
        last = r
    headers = ["k", "dropped", "exact", "near", "kept", "vs actual",
               "what changes one bit away from the crawl's k"]
    if scored:
        headers += ["precision on reviews", "recall on reviews"]
    table = html_table(headers, rows, {1, 2, 3, 4, 5, 7, 8}, "what-if", attrs)
    return table + f'<p class="note">{esc(_what_if_note(w, k, first, scored))}</p>'


def _shown_rows(rows: list[dict[str, Any]], k: int, first: int | None) -> list[dict[str, Any]]:
    """Rows up to k + 8, and beyond it those that change a decision or a review's score (the
    rows left out between two shown ones decide as the one before them)."""
    shown = []
    for i, r in enumerate(rows):
        rescored = i > 0 and r.get("reviewed") != rows[i - 1].get("reviewed")
        if r["threshold"] <= k + WHATIF_EXTRA or r["change"] or r["threshold"] == first \
                or rescored:
            shown.append(r)
    return shown


def _score_cells(row: dict[str, Any], scored: bool) -> list[str]:
    """Precision and recall of a what-if row on the reviews, "75.0% (3/4)" (none unscored)."""
    s = row.get("reviewed")
    if not scored or not s:
        return []
    return [f"{percent(*s[name])} ({s[name][0]}/{s[name][1]})"
            for name in ("precision_of", "recall_of")]


def _what_if_note(w: dict[str, Any], k: int, first: int | None, scored: bool) -> str:
    note = (f"Replayed greedily in fetch order, as the pipeline decides; the highlighted row "
            f"is this crawl's k = {k} ({plural(w['actual_dropped'], 'page')} actually "
            "dropped). ")
    note += (f"The first threshold above k that changes a decision is {bits(first)}."
             if first is not None else "No threshold above k changes a decision.")
    if w["adjusted_pairs"]:
        note += (f" {plural(w['adjusted_pairs'], 'kept pair')} within k by the stored "
                 "fingerprints but judged distinct by the crawl (fingerprints refreshed after "
                 "template learning, or a host's first pages): they count as k + 1 bits.")
    if w["mismatches"]:
        note += (f" {plural(w['mismatches'], 'page')} decided differently in the replay than "
                 f"in the crawl ({plural(w['unmatched_drops'], 'drop')} whose kept page is not "
                 "in this crawl's rows: deleted, re-crawled later, or outside the sample).")
    if scored:
        note += (" Precision: of the reviewed pairs the rule at k calls duplicates (distance "
                 "at most k, exact copies at 0), the share labelled duplicates by their review; "
                 "recall: of the pairs labelled duplicates, the share the rule at k calls "
                 "duplicates.")
    return note


def _changes_cell(row: dict[str, Any], k: int) -> Raw:
    ch = row.get("changes") or {}
    items = [f"<li>would drop {link(c['url'], c['title'] or c['url'])} "
             f"(<span class=\"url\">{esc(c['url'])}</span>) as a duplicate of "
             f"{link(c['duplicate_of'], c['duplicate_title'] or c['duplicate_of'])} at "
             f"{esc(bits(c['distance']))}</li>" for c in ch.get("dropped", [])]
    items += [f"<li>would keep {link(c['url'], c['title'] or c['url'])} "
              f"(<span class=\"url\">{esc(c['url'])}</span>)</li>" for c in ch.get("kept", [])]
    more = (ch.get("dropped_count", 0) + ch.get("kept_count", 0)
            - len(ch.get("dropped", [])) - len(ch.get("kept", [])))
    if more > 0:
        items.append(f"<li>… and {more} more</li>")
    return Raw(f'<ul class="changes">{"".join(items)}</ul>' if items else "")


def _near_miss_section(near: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} at distance {d}" for d, n in near["by_distance"].items())
    span = ", ".join(near["by_distance"]) or "none"
    head = f"<p>{plural(near['count'], 'kept pair')} at {esc(span)} bits: {esc(counts)}.</p>"
    if not near["listed"]:
        return head
    rows = [[m["distance"], page_ref(m["a"], m.get("a_title")),
             page_ref(m["b"], m.get("b_title")), Raw(f"<code>{esc(m['command'])}</code>")]
            for m in near["listed"]]
    table = html_table(["bits", "page", "page", "compare side by side"], rows, {0}, "near-misses")
    more = near["count"] - len(near["listed"])
    extra = f'<p class="note">… and {more} more not listed.</p>' if more > 0 else ""
    return head + table + extra


def _groups_section(groups: dict[str, Any] | None) -> str:
    if not groups or not groups["listed"]:
        return '<p class="note">No page was dropped.</p>'
    rows = [[page_ref(g["url"], g["title"]), g["size"], g["exact_duplicate"],
             g["near_duplicate"]] for g in groups["listed"]]
    more = groups["count"] - len(groups["listed"])
    extra = f'<p class="note">… and {more} more group(s).</p>' if more > 0 else ""
    return html_table(["kept page", "pages in group", "exact copies", "near copies"], rows,
                  {1, 2, 3}, "largest-groups") + extra


def _host_table(rows: list[dict[str, Any]]) -> str:
    """Pages per host; a column of the pages a person's rule dropped when there are any (the
    rate leaves them out, as in the totals)."""
    ruled = any(r["override"] for r in rows)
    headers = ["host", "pages", "kept", "exact", "near", *(["person's rule"] * ruled),
               "duplicate rate"]
    cells = [[r["host"], r["pages"], r["kept"], r["exact_duplicate"], r["near_duplicate"],
              *([r["override"]] * ruled),
              percent(r["exact_duplicate"] + r["near_duplicate"], r["pages"] - r["override"])]
             for r in rows]
    return html_table(headers, cells, set(range(1, len(headers))), "by-host",
                      [f' data-host="{esc(r["host"])}"' for r in rows])


_URL_LABELS = {
    "dupefilter/filtered": "requests the dupefilter dropped as already seen",
    "dedup/links_extracted": "in-scope links found in pages",
    "dedup/links_skipped_seen": "links skipped before a request (already seen)",
    "dedup/links_not_http": "javascript:, mailto:, … links and unparsable hrefs",
    "dedup/links_offsite": "links to hosts outside the seeds'",
    "dedup/bloom/false_positives_avoided": "'seen' answers BLOOM_VERIFY corrected",
}


def _url_label(key: str) -> str:
    if key in _URL_LABELS:
        return _URL_LABELS[key]
    if key.startswith("dedup/links_not_followed/"):
        return "pages whose links were not followed (a duplicate: trap guard)"
    return "spider-trap guard" if "/trap/" in key else "links the middleware dropped"


def _url_section(url: dict[str, Any] | None) -> str:
    if not url:
        return '<p class="note">No URL-dedup counters in this report.</p>'
    rows = [[_url_label(key), key, f"{value:,}"] for key, value in url["counters"].items()]
    strip = human(url["strip_params"]) if url["strip_params"] else "none"
    learned = url.get("ignored_params") or {}
    ignored = (html_table(["host", "query parameters ignored (learned)"],
                          [[host, ", ".join(names)] for host, names in learned.items()],
                          table_id="ignored-params") if learned else
               '<p class="note" id="ignored-params">No query parameter was learned.</p>')
    return (f'<p id="url-summary">{plural(url["filtered_total"], "duplicate URL")} filtered, '
            f"{plural(url['traps'], 'spider-trap link')} refused.</p>"
            + html_table(["what", "stat", "count"], rows, {2}, "url-dedup")
            + f'<p class="note">Tracking parameters stripped from every URL before the seen '
            f"check (URLNORM_STRIP_PARAMS; the crawl does not count them): {esc(strip)}.</p>"
            '<p class="note">Query parameters learned per host: their values changed while '
            "the page did not, so they were folded out of that host's URLs "
            f"(TRAP_LEARN_PARAMS_AFTER).</p>{ignored}")


def _settings_table(settings: dict[str, Any]) -> str:
    rows: list[list[object]] = [[name, human(settings[name], name, SETTING_UNITS.get(name, ""))]
            for name in sorted(settings)]
    return html_table(["setting", "value"], rows, table_id="settings")

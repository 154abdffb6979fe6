"""The HTML of ``scrapy dedupreport``: one self-contained page of the data of
:func:`crawler.report.build_report` (the numbers never import the page; its pieces are
:mod:`crawler.report.markup`).

One file, opens offline: inline CSS and SVG, no script, no font, no image, no external asset.
Everything that comes from a crawled page (titles, text, URLs) is escaped; a URL becomes a link
(``rel="noopener noreferrer nofollow"``) only when its scheme is http or https, so a
``javascript:`` URL is shown as text, never made live.

Sections: totals; the **threshold view** (the nearest-distance histogram, whose axis is broken
when one bar is over three times the next so small bars stay readable, a zoom panel of
k-3..k+8 with its own scale, counts written on every bar, and the what-if table with the pages
each extra bit would drop); **decisions to check** (near drops closest to k, exact-duplicate
groups, each with both titles, links, the lines only in each page and the ``scrapy dropped
--explain`` command); near misses; the largest duplicate groups; per-host
duplicate rates; the URL-dedup counters; settings and stats formatted for people (rounded, with
units, lists joined). ``--format json`` keeps the raw values.
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
from crawler.report.whatif import WHATIF_EXTRA

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
        _histogram_section(data["histogram"]),
        "<h3>What if the threshold were different?</h3>", _what_if_section(data, k),
        f"<h2>Decisions to check (k = {k})</h2>", decisions_section(data.get("decisions")),
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
        return f"Exact: all {sample['pages']:,} pages compared."
    return (f"Sampled: distances and what-if use a uniform random sample of "
            f"{sample['sample_size']:,} of {sample['pages']:,} pages (seed {sample['seed']}); "
            "totals cover every page.")


def _totals_table(crawl: dict[str, Any], totals: dict[str, Any]) -> str:
    rows = [("crawl", ", ".join(map(str, crawl["ids"])), "crawl-id"),
            ("started", crawl["started_at"], "started"),
            ("finished", crawl["finished_at"], "finished"),
            ("finish reason", crawl["finish_reason"], "finish-reason"),
            ("pages decided", totals["pages"], "total-pages"),
            ("kept", totals["kept"], "total-kept"), ("dropped", totals["dropped"], "total-dropped"),
            ("exact duplicates", totals["exact_duplicate"], "total-exact_duplicate"),
            ("near duplicates", totals["near_duplicate"], "total-near_duplicate"),
            ("duplicate rate", f"{totals['duplicate_rate']:.1%}", "duplicate-rate"),
            ("originals kept over copies stored first", totals["canonical_swaps"],
             "canonical-swaps"),
            ("documents of earlier crawls", totals["prior_documents"], "prior-documents")]
    body = "".join(f'<tr><th>{esc(label)}</th><td id="{ident}">{esc(value)}</td></tr>'
                   for label, value, ident in rows)
    return f'<table id="totals"><tbody>{body}</tbody></table>'


def decisions_section(dec: dict[str, Any] | None) -> str:
    """The near drops closest to k first, then the exact-duplicate groups, each actionable."""
    if not dec:
        return '<p class="note">No decision list in this report.</p>'
    counts = ", ".join(f"{n} at {d} bits" for d, n in dec["near_by_distance"].items())
    out = [f'<p id="decision-summary">{dec["near_count"]} near duplicate(s)'
           f"{': ' + esc(counts) if counts else ''}; {dec['exact_count']} exact cop(ies) in "
           f"{dec['exact_group_count']} group(s). Closest to the threshold first: open a few "
           "with the command under each.</p>"]
    if dec.get("db_masked"):
        out.append('<p class="note" id="masked-db">The commands name the database with its '
                   "secrets hidden (***): they run where STORAGE_URL or the DEDUP_STORAGE_URL "
                   "environment variable holds the real URL.</p>")
    if dec["near"]:
        items = "".join(_decision_item(d) for d in dec["near"])
        out.append(f'<h3>Near duplicates</h3><ol class="decisions" id="decisions">{items}</ol>')
    rest = dec["near_count"] - len(dec["near"])
    if rest > 0:
        out.append(f'<p class="note" id="decisions-rest">… and {rest} more near duplicate(s) '
                   "not listed (scrapy dropped --reason near lists them all).</p>")
    if dec["exact_groups"]:
        groups = "".join(_exact_item(g) for g in dec["exact_groups"])
        out.append(f'<h3>Exact copies, by group</h3><ol class="decisions" id="exact-groups">'
                   f"{groups}</ol>")
    rest = dec["exact_group_count"] - len(dec["exact_groups"])
    if rest > 0:
        out.append(f'<p class="note">… and {rest} more group(s) not listed.</p>')
    return "".join(out)


def _decision_item(d: dict[str, Any]) -> str:
    rule = f" (rule: {esc(d['rule'])})" if d.get("rule") else ""
    return (f'<li class="decision" data-distance="{esc(d["distance"])}" data-url="{esc(d["url"])}">'
            f'<span class="bits">{esc(d["distance"])} bits</span> dropped '
            f"{link(d['url'], d['title'] or '(no title)')} as a duplicate of kept "
            f"{link(d['duplicate_of'], d['duplicate_title'] or '(no title)')}{rule}"
            f'<div class="url">{esc(d["url"])} → {esc(d["duplicate_of"])}</div>'
            f'<div class="diff">{esc(d["difference"]["summary"])}</div>'
            f"<code>{esc(d['command'])}</code></li>")


def _exact_item(g: dict[str, Any]) -> str:
    copies = "".join(f"<li>{link(c['url'], c['url'])} <code>{esc(c['command'])}</code></li>"
                     for c in g["copies"])
    more = g["size"] - 1 - len(g["copies"])
    extra = f"<li>… and {more} more</li>" if more > 0 else ""
    return (f'<li class="exact-group" data-size="{g["size"]}">'
            f'<span class="bits">{g["size"]} pages</span> kept '
            f"{link(g['duplicate_of'], g['duplicate_title'] or '(no title)')}"
            f'<div class="url">{esc(g["duplicate_of"])}</div>'
            f"<ul>{copies}{extra}</ul></li>")


def _histogram_section(hist: dict[str, Any]) -> str:
    legend = (f'<p class="legend"><span style="background:{KEPT_COLOUR}"></span>kept'
              f'<span style="background:{DROPPED_COLOUR}"></span>dropped; dashed line: '
              f"threshold k = {hist['threshold']} (a page at or left of it has a near duplicate)."
              "</p>")
    notes = []
    if hist["isolated"]:
        notes.append(f"{hist['isolated']} page(s) had no other page to compare with.")
    if hist["without_fingerprint"]:
        notes.append(f"{hist['without_fingerprint']} page(s) have no SimHash (too few tokens: "
                     "checked for exact copies only) and are not drawn.")
    lo, hi = hist["zoom"]
    zoom = (f'<h3>Around the threshold: {lo}..{hi} bits, its own scale</h3>'
            + histogram_svg(hist, 900, 200, svg_id="histogram-zoom", bar_class="zoom-bin",
                            lo=lo, hi=hi))
    help_text = ("A clear gap between the duplicates on the left and the distinct pages on the "
                 "right means the threshold is safe anywhere inside it; kept bars close to the "
                 "line are near misses, dropped bars at the line are the decisions to check.")
    return (legend + histogram_svg(hist) + zoom + f'<p class="note">{esc(" ".join(notes))}</p>'
            f'<p id="advice">{esc(hist.get("advice", ""))}</p><p>{esc(help_text)}</p>')


def _what_if_section(data: dict[str, Any], k: int) -> str:
    w = data["what_if"]
    first = w.get("first_change_above")
    shown = [r for r in w["rows"] if r["threshold"] <= k + WHATIF_EXTRA or r["change"]
             or r["threshold"] == first]
    rows, attrs, last = [], [], None
    for r in shown:
        if last is not None and r["threshold"] > last + 1:
            rows.append([f"{last + 1}..{r['threshold'] - 1}", "", "", "", "", "+0",
                         "same decisions as k"])
            attrs.append(' class="gap"')
        rows.append([r["threshold"], r["dropped"], r["exact_duplicate"], r["near_duplicate"],
                     r["kept"], f"{r['change']:+d}", _changes_cell(r, k)])
        changed = r.get("changes", {}).get("dropped_count") or r.get("changes", {}).get(
            "kept_count")
        cls = "actual" if r["actual"] else "changed" if changed else ""
        attrs.append(f' data-threshold="{r["threshold"]}"' + (f' class="{cls}"' if cls else ""))
        last = r["threshold"]
    table = html_table(["k", "dropped", "exact", "near", "kept", "vs actual",
                    "what changes one bit away from the crawl's k"], rows,
                   {1, 2, 3, 4, 5}, "what-if", attrs)
    return table + f'<p class="note">{esc(_what_if_note(w, k, first))}</p>'


def _what_if_note(w: dict[str, Any], k: int, first: int | None) -> str:
    note = (f"Replayed greedily in fetch order, as the pipeline decides; the highlighted row "
            f"is this crawl's k = {k} ({w['actual_dropped']} pages actually dropped). ")
    note += (f"The first threshold above k that changes a decision is {first} bits."
             if first is not None else "No threshold above k changes a decision.")
    if w["adjusted_pairs"]:
        note += (f" {w['adjusted_pairs']} kept pair(s) are within k by their stored fingerprints "
                 "but were judged distinct by the crawl (fingerprints refreshed after template "
                 "learning, or a host's first pages): they count as k + 1 bits.")
    if w["mismatches"]:
        note += (f" {w['mismatches']} page(s) decided differently in the replay than in the "
                 f"crawl ({w['unmatched_drops']} drop(s) whose kept page is not in this crawl's "
                 "rows: deleted, re-crawled later, or outside the sample).")
    return note


def _changes_cell(row: dict[str, Any], k: int) -> Raw:
    ch = row.get("changes") or {}
    items = [f"<li>would drop {link(c['url'], c['title'] or c['url'])} "
             f"(<span class=\"url\">{esc(c['url'])}</span>) as a duplicate of "
             f"{link(c['duplicate_of'], c['duplicate_title'] or c['duplicate_of'])} at "
             f"{esc(c['distance'])} bits</li>" for c in ch.get("dropped", [])]
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
    head = f"<p>{near['count']} kept pair(s) at {esc(span)} bits: {esc(counts)}.</p>"
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
    return html_table(["host", "pages", "kept", "exact", "near", "duplicate rate"],
                  [[r["host"], r["pages"], r["kept"], r["exact_duplicate"], r["near_duplicate"],
                    f"{(r['exact_duplicate'] + r['near_duplicate']) / max(r['pages'], 1):.1%}"]
                   for r in rows], {1, 2, 3, 4, 5},
                  "by-host", [f' data-host="{esc(r["host"])}"' for r in rows])


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
    return (f'<p id="url-summary">{url["filtered_total"]:,} duplicate URL(s) filtered, '
            f"{url['traps']:,} spider-trap link(s) refused.</p>"
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

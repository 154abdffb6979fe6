"""The pieces of the report's HTML page: escaped text, safe links, tables, values written for
people (:func:`human`) and the nearest-distance histogram as inline SVG (:func:`histogram_svg`).

Everything that comes from a crawled page (titles, text, URLs) is escaped; a URL becomes a link
(``rel="noopener noreferrer nofollow"``) only when its scheme is http or https, so a
``javascript:`` URL is shown as text, never made live.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import urlsplit

from crawler.outputs.formats import mask_url, terminal_safe
from crawler.report.wording import noun_for, percent, plural

KEPT_COLOUR, DROPPED_COLOUR = "#4c78a8", "#e45756"
BREAK_RATIO = 3  # a bar over 3x the next tallest is cut (broken axis)


class Raw(str):
    """Markup already escaped: a table cell that :func:`_cell` does not escape again."""


def esc(value: object) -> str:
    """``value`` as HTML text (None: empty), quotes and control characters escaped (a report
    read with ``cat`` or ``less -r`` cannot drive the terminal)."""
    return escape(terminal_safe("" if value is None else str(value)), quote=True)


def _cell(value: object) -> str:
    return value if isinstance(value, Raw) else esc(value)


def link(url: str | None, text: str | None = None) -> Raw:
    """``<a href>`` for an http(s) URL; any other URL (``javascript:``, ``data:``) is text."""
    label = esc(text if text else url)
    try:
        scheme = urlsplit(url or "").scheme.lower()
    except ValueError:
        scheme = ""
    if scheme not in ("http", "https"):
        return Raw(f'<span class="dead-link">{label}</span>')
    return Raw(f'<a href="{esc(url)}" rel="noopener noreferrer nofollow">{label}</a>')


def page_ref(url: str | None, title: str | None) -> Raw:
    """A page as its title (a link) with its URL under it."""
    return Raw(f"{link(url, title or '(no title)')}<br><span class=\"url\">{esc(url)}</span>")


def html_table(headers: list[str], rows: list[list[object]], numeric: set[int] | None = None,
               table_id: str = "", row_attrs: list[str] | None = None) -> str:
    """A ``<table>``: columns ``numeric`` right-aligned, ``row_attrs`` added to each row."""
    numeric = numeric or set()
    head = "".join(f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cells = "".join(f'<td class="n">{_cell(v)}</td>' if i in numeric
                        else f"<td>{_cell(v)}</td>" for i, v in enumerate(row))
        body.append(f"<tr{row_attrs[r] if row_attrs else ''}>{cells}</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# --- numbers for people ----------------------------------------------------------------------

#: The unit of a setting's value, singular (a count of nouns reads "1 word", "2 words").
SETTING_UNITS = {
    "SIMHASH_MAX_DISTANCE": "bit", "SIMHASH_MIN_TOKENS": "token", "BLOOM_CAPACITY": "URL",
    "DOWNLOAD_DELAY": "s", "STORAGE_BATCH_SECONDS": "s", "DEDUP_PROGRESS_INTERVAL": "s",
    "DROPPED_TEXT_MAX_CHARS": "character", "URLLENGTH_LIMIT": "character",
    "STORAGE_BATCH_SIZE": "row", "TRAP_MAX_PATH_DEPTH": "segment",
    "TRAP_MAX_QUERY_PARAMS": "query pair", "TRAP_MAX_SEGMENT_REPEAT": "repeat",
    "SIMHASH_SHINGLE": "word", "SIMHASH_BLOCKS": "block",
}
#: Units written the same for one and many (symbols, not nouns).
SYMBOLS = frozenset({"s", "pages/s", "per minute"})


def human(value: object, name: str = "", unit: str = "") -> str:
    """A value for people: on/off, 12,345, 1.57 s, 18.6% (:func:`percent`), 17.4 MiB, 1 word,
    3 words (``unit`` singular), lists joined, dicts sorted."""
    if value is None or value == "":
        return "not set"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(human(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {human(value[k])}" for k in sorted(value, key=str)) or "none"
    if isinstance(value, str):
        return mask_url(value) if "://" in value else value
    if isinstance(value, (int, float)):
        return _number(value, name.lower(), unit)
    return str(value)


def _number(value: float, name: str, unit: str) -> str:
    if name.endswith(("ratio", "rate")):
        return percent(value)
    if name.endswith("bytes") or name.startswith("memusage/"):
        return _bytes(value)
    if name.endswith(("_seconds", "seconds")):
        unit = unit or "s"
    elif name.endswith("per_second"):
        unit = unit or "pages/s"
    elif name.endswith("_per_minute"):
        unit = unit or "per minute"
    text = f"{value:,}" if isinstance(value, int) else _float(value)
    if name == "dedup/bloom/bits":
        text += f" ({_bytes(value / 8)})"
    if unit and unit not in SYMBOLS:
        unit = noun_for(value, unit)
    return f"{text} {unit}".strip()


def _float(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def _bytes(value: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return plural(round(value), "byte") if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# --- the histogram ---------------------------------------------------------------------------


def _scale(totals: list[int]) -> tuple[int, bool]:
    """The y-axis top, and whether the tallest bar is cut (over BREAK_RATIO times the next)."""
    ranked = sorted((t for t in totals if t), reverse=True)
    if not ranked:
        return 1, False
    if len(ranked) > 1 and ranked[0] > BREAK_RATIO * ranked[1]:
        return max(1, round(ranked[1] * 1.25 + 0.5)), True
    return ranked[0], False


def histogram_svg(hist: dict[str, Any], width: int = 900, height: int = 260, *,
                  svg_id: str = "histogram", bar_class: str = "bar",
                  lo: int = 0, hi: int | None = None) -> str:
    """Stacked bars (kept below, dropped on top) for distances lo..hi, one ``<g>`` per distance.

    The count is written over every non-empty bar. When the tallest bar is over
    :data:`BREAK_RATIO` times the next, the axis is broken: the scale is set by the others and
    the tall bar is cut with a white break mark.
    """
    buckets = [b for b in hist["buckets"] if lo <= b["distance"] <= (hi if hi is not None
                                                                      else 64)]
    left, bottom, top = 44, 36, 20
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak, broken = _scale([b["kept"] + b["dropped"] for b in buckets])
    step = plot_w / max(1, len(buckets))
    parts = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="nearest-neighbour distance histogram, {lo} to '
             f'{buckets[-1]["distance"] if buckets else lo} bits">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
             'stroke="#999"/>']
    for tick in sorted({0, peak // 2, peak}):
        y = top + plot_h - plot_h * tick / peak
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    label_every = max(1, len(buckets) // 24)
    for i, b in enumerate(buckets):
        parts.append(_bar(b, left + i * step, step, top, plot_h, peak, bar_class))
        if i % label_every == 0:
            parts.append(f'<text x="{left + (i + .5) * step:.1f}" y="{top + plot_h + 14}" '
                         f'text-anchor="middle">{b["distance"]}</text>')
    k = hist["threshold"]
    if lo <= k <= (buckets[-1]["distance"] if buckets else lo):
        k_x = left + (k - lo + 1) * step
        parts.append(f'<line class="threshold" x1="{k_x:.1f}" y1="{top - 8}" x2="{k_x:.1f}" '
                     f'y2="{top + plot_h}" stroke="#222" stroke-dasharray="4 3"/>'
                     f'<text x="{k_x + 4:.1f}" y="{top}">k = {k}</text>')
    axis = "bits to the nearest other page" + (" (axis broken: the tallest bar is cut)"
                                               if broken else "")
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                 f"{esc(axis)}</text></svg>")
    return "".join(parts)


def _bar(b: dict[str, Any], x: float, step: float, top: int, plot_h: int, peak: int,
         bar_class: str) -> str:
    total = b["kept"] + b["dropped"]
    cut = total > peak
    drawn = plot_h if cut else plot_h * total / peak
    kept_h = drawn * b["kept"] / total if total else 0.0
    drop_h = drawn - kept_h if total else 0.0
    if 0 < drawn < 2:  # one page among hundreds stays visible
        kept_h, drop_h = (2.0, 0.0) if b["kept"] else (0.0, 2.0)
    base, w = top + plot_h, max(step - 2, 1)
    out = [f'<g class="{bar_class}" data-distance="{b["distance"]}" data-kept="{b["kept"]}" '
           f'data-dropped="{b["dropped"]}"><title>distance {b["distance"]}: {b["kept"]} kept, '
           f'{b["dropped"]} dropped</title>'
           f'<rect class="kept" fill="{KEPT_COLOUR}" x="{x + 1:.1f}" y="{base - kept_h:.1f}" '
           f'width="{w:.1f}" height="{kept_h:.1f}"/>'
           f'<rect class="dropped" fill="{DROPPED_COLOUR}" x="{x + 1:.1f}" '
           f'y="{base - kept_h - drop_h:.1f}" width="{w:.1f}" height="{drop_h:.1f}"/>']
    if cut:
        y = top + plot_h * 0.18
        out.append(f'<path class="break" d="M{x:.1f} {y + 5:.1f} L{x + step:.1f} {y - 3:.1f} '
                   f'M{x:.1f} {y + 11:.1f} L{x + step:.1f} {y + 3:.1f}" stroke="#fff" '
                   'stroke-width="3"/>')
    if total:
        out.append(f'<text class="count" x="{x + step / 2:.1f}" '
                   f'y="{base - max(drawn, 2) - 3:.1f}" text-anchor="middle">{total}</text>')
    return "".join(out) + "</g>"

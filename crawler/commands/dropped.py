"""``scrapy dropped``: list the pages dropped as duplicates, or explain one decision.

Listing (newest first; one row per dropped page: distance, reason, URL, the kept page)::

    scrapy dropped [--db URL | --log FILE] [--reason exact|near] [--host HOST]
                   [--min-distance N] [--max-distance N] [--crawl ID] [--since ISO]
                   [--limit N] [--format table|json|csv]

``--db`` takes a SQLAlchemy URL or a plain SQLite file path (default: ``STORAGE_URL``); a missing
file is reported, never created. ``--log`` reads the JSON Lines drop log instead (a torn last line
is skipped). ``table`` fits 80 columns (cut values end in ``…``; a host shared by every URL is
printed once above the table); ``json`` is one complete record per line; ``csv`` has a header.

Explaining::

    scrapy dropped --explain URL [--diff]     # a dropped page against the page it duplicates
    scrapy dropped --pair URL OTHER [--diff]  # any two stored pages, e.g. a report's near miss

Exit status: 0 on success (also when no row matches), 1 when the database or log cannot be read,
is empty, or the crawl or URL is unknown, 2 for a bad option.
"""

from __future__ import annotations

import csv
import difflib
import json
import os
import sys
import textwrap
from typing import TYPE_CHECKING, Any, TextIO

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

if TYPE_CHECKING:
    import argparse

    from crawler import review
    from crawler.review import DropRecord, Explanation

WIDTH = 80
REASON_ALIASES = {"exact": "exact_duplicate", "near": "near_duplicate"}
REASONS = ("exact_duplicate", "near_duplicate")
SHORT_REASON = {"exact_duplicate": "exact", "near_duplicate": "near"}
MAX_LISTED = 20  # lines and words listed per side in an explanation


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[options] | --explain URL [--diff] | --pair URL OTHER [--diff]"

    def short_desc(self) -> str:
        return "List pages dropped as duplicates, or explain why one was dropped"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Dropped pages")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--log", metavar="FILE", help="read this JSON Lines drop log instead")
        group.add_argument("--reason", help="exact_duplicate|near_duplicate (or exact|near)")
        group.add_argument("--host", help="only URLs on this host (and its subdomains)")
        group.add_argument("--min-distance", type=int, metavar="N", help="at least N bits apart")
        group.add_argument("--max-distance", type=int, metavar="N", help="at most N bits apart")
        group.add_argument("--crawl", type=int, metavar="ID", help="only this crawl")
        group.add_argument("--since", metavar="ISO", help="dropped at or after (UTC if no zone)")
        group.add_argument("--limit", type=int, metavar="N", help="at most N rows")
        group.add_argument("--format", default="table", choices=("table", "json", "csv"))
        group.add_argument("--explain", metavar="URL", help="explain the drop of URL")
        group.add_argument("--pair", nargs=2, metavar=("URL", "OTHER"), help="compare two pages")
        group.add_argument("--diff", action="store_true", help="with --explain/--pair: a diff")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler import review

        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.diff and not (opts.explain or opts.pair):
            raise UsageError("--diff needs --explain URL or --pair URL OTHER", print_help=False)
        try:
            if opts.explain or opts.pair:
                self._explain(opts)
            else:
                self._list(opts, build_filter(opts))
        except review.ReviewError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1
        except BrokenPipeError:  # `scrapy dropped | head`: the reader left, not an error
            quiet_stdout()

    def _db_url(self, opts: argparse.Namespace) -> str:
        assert self.settings is not None
        return opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"

    def _list(self, opts: argparse.Namespace, flt: review.DropFilter) -> None:
        from crawler import review

        if opts.log:
            records = review.read_log(opts.log, flt)
        else:
            with review.CrawlDB.open(self._db_url(opts)) as db:
                db.require_content()
                db.check_crawl(flt.crawl_id)
                records = db.dropped(flt)
        write_records(records, opts.format, sys.stdout)

    def _explain(self, opts: argparse.Namespace) -> None:
        from crawler import review

        if opts.log:
            raise UsageError("--explain and --pair need the database (--db), not --log",
                             print_help=False)
        with review.CrawlDB.open(self._db_url(opts)) as db:
            db.require_content()
            if opts.pair:
                result = review.explain_pair(db, opts.pair[0], opts.pair[1])
            else:
                result = review.explain(db, opts.explain)
        if opts.format == "json":
            print(json.dumps(explanation_dict(result, opts.diff), ensure_ascii=False))
        else:
            sys.stdout.write(format_explanation(result, diff=opts.diff))


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def build_filter(opts: argparse.Namespace) -> review.DropFilter:
    """The filter from the options; :class:`UsageError` for a bad value."""
    from crawler import review  # lazily: Scrapy imports every command module

    reason = opts.reason
    if reason:
        reason = REASON_ALIASES.get(reason.lower(), reason.lower())
        if reason not in review.REASONS:
            raise UsageError(f"--reason {opts.reason!r}: use exact_duplicate or near_duplicate",
                             print_help=False)
    for name in ("min_distance", "max_distance", "limit"):
        if getattr(opts, name) is not None and getattr(opts, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0", print_help=False)
    if None not in (opts.min_distance, opts.max_distance) and opts.min_distance > opts.max_distance:
        raise UsageError("--min-distance is larger than --max-distance", print_help=False)
    since = None
    if opts.since:
        try:
            since = review.parse_time(opts.since)
        except ValueError:
            message = (f"--since {opts.since!r} is not an ISO 8601 date or time "
                       "(e.g. 2026-01-31 or 2026-01-31T12:00:00Z)")
            raise UsageError(message, print_help=False) from None
    return review.DropFilter(reason, opts.host, opts.min_distance, opts.max_distance,
                             opts.crawl, since, opts.limit)


# --- listing formats -------------------------------------------------------------------------


def write_records(records: list[DropRecord], fmt: str, out: TextIO) -> None:
    from crawler import review  # lazily: Scrapy imports every command module

    if fmt == "json":
        for record in records:
            out.write(json.dumps(record.as_dict(), ensure_ascii=False) + "\n")
    elif fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=review.DropRecord.field_names(),
                                lineterminator="\n")
        writer.writeheader()
        for record in records:
            writer.writerow(record.as_dict())
    else:
        out.write(format_table(records))


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a cut keeps both halves around ``…``."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _common_origin(records: list[DropRecord]) -> str:
    origins = {_origin(u) for r in records for u in (r.url, r.duplicate_of)}
    return origins.pop() if len(origins) == 1 else ""


def _origin(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.split("/", 1)[0] if sep else ""


def format_table(records: list[DropRecord]) -> str:
    """Rows of distance, reason, URL and kept page in 80 columns, then a count by reason."""
    if not records:
        return "no dropped pages match\n"
    origin = _common_origin(records)
    strip = len(origin)
    url_width = (WIDTH - 12) // 2
    lines = [f"all URLs on {origin}"] if origin else []
    lines.append(f"{'DIST':>4} {'WHY':<5} {'DROPPED URL':<{url_width}} {'KEPT (DUPLICATE OF)'}")
    for r in records:
        dist = "-" if r.distance is None else str(r.distance)
        why = SHORT_REASON.get(r.reason, r.reason[:5])
        url, kept = r.url[strip:] or "/", r.duplicate_of[strip:] or "/"
        lines.append(f"{dist:>4} {why:<5} {cut(url, url_width):<{url_width}} "
                     f"{cut(kept, WIDTH - 12 - url_width)}")
    counts = {reason: sum(r.reason == reason for r in records) for reason in REASONS}
    lines.append(f"{len(records)} dropped page(s): " +
                 ", ".join(f"{n} {reason}" for reason, n in counts.items()))
    return "\n".join(line.rstrip() for line in lines) + "\n"


# --- explanations ----------------------------------------------------------------------------


def _fp(value: int | None) -> str:
    return "-" if value is None else f"{value:016x}"


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


def format_explanation(e: Explanation, diff: bool = False) -> str:
    """The explanation as text (80 columns), with a unified diff when ``diff``."""
    first, second = _labels(e)
    lines = [_row(first, e.dropped.url), _row("", "title: " + (e.dropped.title or "-")),
             _row(second, e.kept.url), _row("", "title: " + (e.kept.title or "-"))]
    lines += _decision_lines(e)
    lines.append("")
    one, other = f"the {first.lower()} page", f"the {second.lower()} page"
    lines += _listing("Lines only in " + one, e.lines_only_dropped)
    lines += _listing("Lines only in " + other, e.lines_only_kept)
    lines += _listing("Words only in " + one, e.words_only_dropped, words=True)
    lines += _listing("Words only in " + other, e.words_only_kept, words=True)
    for note in e.notes:
        lines += textwrap.wrap(note, WIDTH, initial_indent="Note: ", subsequent_indent="      ")
    if diff:
        lines += ["", *unified_diff(e)]
    return "\n".join(lines) + "\n"


def _labels(e: Explanation) -> tuple[str, str]:
    if e.reason == "pair":
        return "Page A", "Page B"
    return "Dropped", "Kept"


def _decision_lines(e: Explanation) -> list[str]:
    first, second = _labels(e)
    verdict = e.reason if e.reason != "pair" else "both pages compared"
    dist = "unknown (no fingerprint)" if e.distance is None else f"{e.distance} bits"
    stored = "" if e.stored_distance in (None, e.distance) else f" (stored {e.stored_distance})"
    within = "" if e.distance is None else (
        " — within" if e.distance <= e.max_distance else " — beyond")
    lines = [_row("Reason", verdict), *_rule_lines(e),
             _row("Distance", f"{dist}{stored}{within} SIMHASH_MAX_DISTANCE={e.max_distance}"),
             _row("SimHash", f"{_fp(e.dropped.simhash)} vs {_fp(e.kept.simhash)}")]
    if e.distance is not None:
        width = "/".join(sorted({str(w) for _, w in e.blocks}))
        same = ", ".join(str(i + 1) for i in e.matched_blocks) or "none"
        lines.append(_row("Blocks", f"{len(e.matched_blocks)} of {len(e.blocks)} blocks "
                                    f"({width} bits) equal: {same}"))
    exact = {True: "content hashes equal: an exact copy",
             False: "content hashes differ: not an exact copy",
             None: "no content hash stored"}[e.exact]
    lines.append(_row("Exact", exact))
    if e.identical_text:
        lines.append(_row("Text", "identical"))
    else:
        lines.append(_row("Text", f"differs: {_n(e.lines_only_dropped, 'line')} and "
                                  f"{_n(e.words_only_dropped, 'word')} only in the "
                                  f"{first.lower()} page,"))
        lines.append(_row("", f"{_n(e.lines_only_kept, 'line')} and "
                              f"{_n(e.words_only_kept, 'word')} only in the "
                              f"{second.lower()} page"))
    return lines


_RULES = {
    "canonical": ("canonical copy: this page was stored first; the kept page, which this",
                  "page names canonical, came later and replaced it"),
    "repointed": ("canonical copy: dropped against a copy stored first, which the page it",
                  "names canonical (the kept page) later replaced"),
    "refreshed": ("late drop: stored while its site's template was unknown; fingerprinted",
                  "again once it was learned, it fell within k of the kept page"),
}


def _rule_lines(e: Explanation) -> list[str]:
    """Which page of the two was kept, and why."""
    if e.reason == "pair":
        return []
    first, second = _RULES.get(e.rule or "", ("first fetched: the kept page was decided "
                                                "first", ""))
    return [_row("Rule", first)] + ([_row("", second)] if second else [])


def _n(counts: Any, noun: str) -> str:
    total = sum(counts.values())
    return f"{total} {noun}{'' if total == 1 else 's'}"


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
            "rule": e.rule or ("first_fetched" if e.reason != "pair" else None),
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

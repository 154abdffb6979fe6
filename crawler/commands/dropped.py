"""``scrapy dropped``: list the pages dropped as duplicates, or explain one decision.

Listing (newest first; one row per dropped page: distance, reason, URL, the kept page)::

    scrapy dropped [--db URL | --log FILE] [--crawl ID | --all-crawls] [--reason exact|near]
                   [--host HOST] [--min-distance N] [--max-distance N] [--since ISO]
                   [--limit N] [--format table|json|csv] [--wide]

``--db`` takes a SQLAlchemy URL or a plain SQLite file path (default: ``STORAGE_URL``); a missing
file is reported, never created. ``--log`` reads the JSON Lines drop log instead (a torn last line
is skipped). Only the latest crawl is listed unless ``--crawl ID`` or ``--all-crawls`` is given;
which crawl was picked is said on stderr, and when it dropped nothing, which crawls did.

``table`` prints whole URLs when stdout is not a terminal or with ``--wide``. On a terminal it fits
the terminal's width: the most common origin is printed once above the table and its URLs as
paths; a row too wide for one line puts the kept page on a second line. A URL is never cut
(a path longer than the terminal runs past its edge), so every URL or path it prints can be
pasted into ``--explain``. ``json`` is one complete record per line; ``csv`` has a header.

Explaining::

    scrapy dropped --explain URL [--diff]     # a dropped page against the page it duplicates
    scrapy dropped --pair URL OTHER [--diff]  # any two stored pages, e.g. a report's near miss

URL may be any spelling the listing prints: a path (``/a/b?q=1``, looked up on every host; when
it matches pages on several hosts the command names them and stops), a URL with or without its
scheme or trailing slash, or the canonical form.

Exit status: 0 on success (also when no row matches), 1 when the database or log cannot be read,
is empty, or the crawl or URL is unknown or ambiguous, 2 for a bad option.
"""

from __future__ import annotations

import csv
import difflib
import json
import os
import shutil
import sys
import textwrap
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from crawler import review
    from crawler.review import CrawlDB, DropRecord, Explanation

WIDTH = 80  # explanations, and a terminal whose width cannot be read
MIN_WIDTH = 40
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
        group.add_argument("--crawl", type=int, metavar="ID", help="only this crawl "
                           "(default: the latest)")
        group.add_argument("--all-crawls", action="store_true", help="every crawl")
        group.add_argument("--since", metavar="ISO", help="dropped at or after (UTC if no zone)")
        group.add_argument("--limit", type=int, metavar="N", help="at most N rows")
        group.add_argument("--format", default="table", choices=("table", "json", "csv"))
        group.add_argument("--wide", action="store_true",
                           help="table: whole URLs, whatever the terminal's width")
        group.add_argument("--explain", metavar="URL", help="explain the drop of URL")
        group.add_argument("--pair", nargs=2, metavar=("URL", "OTHER"), help="compare two pages")
        group.add_argument("--diff", action="store_true", help="with --explain/--pair: a diff")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler import review

        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.diff and not (opts.explain is not None or opts.pair):
            raise UsageError("--diff needs --explain URL or --pair URL OTHER", print_help=False)
        if any(not url.strip() for url in (opts.explain, *(opts.pair or ())) if url is not None):
            raise UsageError("--explain and --pair need a URL or path, not ''", print_help=False)
        if opts.all_crawls and opts.crawl is not None:
            raise UsageError("--crawl ID and --all-crawls exclude each other", print_help=False)
        try:
            if opts.explain is not None or opts.pair:
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
            records = review.read_log(opts.log)
            counts = Counter(r.crawl_id for r in records if r.crawl_id is not None)
            latest = max(counts, default=None)
            if not self._pick_crawl(opts, flt, latest, lambda: counts, where="in the log"):
                return write_records([], opts.format, sys.stdout, quiet=True)
            records = review.apply_filter(records, flt)
        else:
            with review.CrawlDB.open(self._db_url(opts)) as db:
                db.require_content()
                db.check_crawl(flt.crawl_id)
                latest = db.latest_crawl()
                if not self._pick_crawl(opts, flt, latest, lambda: drop_counts(db)):
                    return write_records([], opts.format, sys.stdout, quiet=True)
                records = db.dropped(flt)
        width = None if opts.wide or not sys.stdout.isatty() else terminal_width()
        write_records(records, opts.format, sys.stdout, width)

    def _pick_crawl(self, opts: argparse.Namespace, flt: review.DropFilter, latest: int | None,
                    drop_counts: Callable[[], Mapping[int, int]], where: str = "") -> bool:
        """Narrow ``flt`` to the latest crawl unless told otherwise; False when it dropped none.

        Says on stderr which crawl was picked, or, when it dropped nothing, which crawls did.
        With no crawl recorded (an old database, a log without crawl ids) every drop is listed.
        """
        if opts.all_crawls or flt.crawl_id is not None or latest is None:
            return True
        flt.crawl_id = latest
        counts = drop_counts()
        label = f"crawl {latest} (latest{' ' + where if where else ''})"
        if counts.get(latest):
            print(f"{label}; --crawl ID or --all-crawls for others", file=sys.stderr)
            return True
        others = sorted(counts)
        if others:
            print(f"{label} dropped no pages; crawl(s) {', '.join(map(str, others))} did: "
                  "--crawl ID or --all-crawls", file=sys.stderr)
        else:
            print(f"{label} dropped no pages, nor did any other crawl", file=sys.stderr)
        return False

    def _explain(self, opts: argparse.Namespace) -> None:
        from crawler import review

        if opts.log:
            raise UsageError("--explain and --pair need the database (--db), not --log",
                             print_help=False)
        with review.CrawlDB.open(self._db_url(opts)) as db:
            db.require_content()
            if opts.pair:
                result = review.explain_pair(db, resolve_url(db, opts.pair[0]),
                                             resolve_url(db, opts.pair[1]))
            else:
                result = review.explain(db, resolve_url(db, opts.explain, dropped=True))
        if opts.format == "json":
            print(json.dumps(explanation_dict(result, opts.diff), ensure_ascii=False))
        else:
            sys.stdout.write(format_explanation(result, diff=opts.diff))


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` first, as :func:`shutil.get_terminal_size`)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


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


# --- the database: drops per crawl, and any printed spelling of a URL ------------------------
# Candidates for crawler.review (CrawlDB methods); kept here while that module has another owner.


def drop_counts(db: CrawlDB) -> dict[int, int]:
    """Dropped pages per crawl id (rows whose crawl was deleted are not counted)."""
    import sqlalchemy as sa

    t = db.dropped_table
    query = sa.select(t.c.crawl_id, sa.func.count().label("n")).where(
        t.c.crawl_id.is_not(None)).group_by(t.c.crawl_id)
    return {row["crawl_id"]: row["n"] for row in db._rows(query)}


def resolve_url(db: CrawlDB, spelling: str, dropped: bool = False) -> str:
    """The stored URL that ``spelling`` names; ``spelling`` itself when nothing matches.

    Accepts a whole URL (as stored, or in canonical form: :meth:`CrawlDB.dropped_row` also
    looks the canonical form up), a URL without its scheme, either with or without a trailing
    slash, and a path with its query, matched on every host. A dropped page is preferred when
    ``dropped``; :class:`ReviewError` when the spelling matches pages on several hosts.
    """
    from crawler import review

    text = spelling.strip()
    if text.startswith("/"):
        found = _path_matches(db, text, dropped)
    else:
        variants = _url_variants(text)
        found = [u for u in variants if dropped and db.dropped_row(u) is not None]
        found = found or [u for u in variants if db.document(u) is not None]
    origins = sorted({_origin(u) for u in found})
    if len(origins) > 1:
        what = "path" if text.startswith("/") else "URL"
        raise review.ReviewError(f"{what} {text} matches pages on {len(origins)} hosts: "
                                 f"{', '.join(origins)}; pass the whole URL")
    return found[0] if found else text


def _toggle_slash(path: str) -> str:
    """``path`` (query kept) with a trailing slash added or removed; ``/`` stays ``/``."""
    head, sep, query = path.partition("?")
    if head in ("", "/"):
        return path
    head = head[:-1] if head.endswith("/") else head + "/"
    return head + sep + query


def _url_variants(text: str) -> list[str]:
    """``text`` as given, with the other trailing slash, and with each scheme if it has none."""
    out = []
    for base in [text] if "://" in text else ["http://" + text, "https://" + text]:
        origin = _origin(base)
        rest = base[len(origin):]
        out += [base, origin + _toggle_slash(rest)] if rest.startswith("/") else [base]
    return list(dict.fromkeys(out))


def _path_matches(db: CrawlDB, path: str, dropped: bool) -> list[str]:
    """Stored URLs, on any host, whose path and query are ``path`` (else up to a trailing slash).

    In SQL: the URL ends with ``path`` and what comes before is ``scheme://host`` (no ``/``).
    """
    import sqlalchemy as sa

    tables = [db.dropped_table, db.documents] if dropped else [db.documents, db.dropped_table]
    for spelling in dict.fromkeys([path, _toggle_slash(path)]):
        for table in tables:
            url = table.c.url
            prefix = sa.func.substr(url, 1, sa.func.length(url) - len(spelling))
            query = sa.select(url).distinct().where(
                url.endswith(spelling, autoescape=True), prefix.like("%://%"),
                sa.not_(prefix.like("%://%/%")))
            # LIKE ignores case in SQLite: compare again here
            urls = sorted({r["url"] for r in db._rows(query) if _path_of(r["url"]) == spelling})
            if urls:
                return urls
    return []


def _path_of(url: str) -> str:
    """The path and query of ``url`` as printed by the table (``/`` for an empty path)."""
    origin = _origin(url)
    rest = url[len(origin):] if origin else url
    return rest if rest.startswith("/") else "/" + rest


# --- listing formats -------------------------------------------------------------------------


def write_records(records: list[DropRecord], fmt: str, out: TextIO, width: int | None = None,
                  quiet: bool = False) -> None:
    """Write ``records``; ``width`` fits a table to a terminal (None: whole URLs).

    ``quiet``: the table prints nothing for no records (the reason is already on stderr).
    """
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
    elif records or not quiet:
        out.write(format_table(records, width))


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a cut keeps both halves around ``…``."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _origin(url: str) -> str:
    """``scheme://host[:port]`` exactly as spelled in ``url`` ('' for a relative one)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "/" in scheme:
        return ""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return scheme + sep + rest[:end]


def _main_origin(records: list[DropRecord]) -> tuple[str, bool]:
    """The most common origin of the listed URLs, and whether every URL is on it."""
    counts = Counter(_origin(u) for r in records for u in (r.url, r.duplicate_of))
    counts.pop("", None)
    if not counts:
        return "", False
    origin = counts.most_common(1)[0][0]
    return origin, len(counts) == 1 and counts[origin] == 2 * len(records)


def format_table(records: list[DropRecord], width: int | None = None) -> str:
    """Distance, reason, dropped URL and kept page per row, then a count by reason.

    ``width`` None: whole URLs on one line each. Otherwise the table fits ``width`` columns:
    URLs on the most common origin become paths (the origin is named above the table), and when
    a row is still too wide every kept page moves to a second line. URLs are never cut.
    """
    if not records:
        return "no dropped pages match\n"
    origin, everywhere = _main_origin(records) if width is not None else ("", False)
    lines = []
    if origin:
        lines.append(f"all URLs on {origin}" if everywhere else
                     f"paths are on {origin}; other URLs are whole")

    def shown(url: str) -> str:
        return _path_of(url) if origin and _origin(url) == origin else url

    rows = [("-" if r.distance is None else str(r.distance),
             SHORT_REASON.get(r.reason, r.reason[:5]), shown(r.url), shown(r.duplicate_of))
            for r in records]
    lines += _table_body(rows, width)
    counts = {reason: sum(r.reason == reason for r in records) for reason in REASONS}
    lines.append(f"{len(records)} dropped page(s): " +
                 ", ".join(f"{n} {reason}" for reason, n in counts.items()))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _table_body(rows: list[tuple[str, str, str, str]], width: int | None) -> list[str]:
    """Header and rows: one line per row when all fit ``width``, else the kept page below."""
    url_width = max(len("DROPPED URL"), *(len(row[2]) for row in rows))
    kept_width = max(len(row[3]) for row in rows)
    if width is None or 12 + url_width + kept_width <= width:
        return [f"{'DIST':>4} {'WHY':<5} {'DROPPED URL':<{url_width}} KEPT (DUPLICATE OF)",
                *(f"{dist:>4} {why:<5} {url:<{url_width}} {kept}"
                  for dist, why, url, kept in rows)]
    lines = [f"{'DIST':>4} {'WHY':<5} DROPPED URL", f"{'':>4} {'KEPT':<5} DUPLICATE OF"]
    for dist, why, url, kept in rows:
        lines += [f"{dist:>4} {why:<5} {url}", f"{'':>4} {'kept':<5} {kept}"]
    return lines


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
    one, other = _side_names(e)
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
                                  f"{_n(e.words_only_dropped, 'word')} only in {one},"))
        lines.append(_row("", f"{_n(e.lines_only_kept, 'line')} and "
                              f"{_n(e.words_only_kept, 'word')} only in {other}"))
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

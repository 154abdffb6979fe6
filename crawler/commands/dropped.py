"""``scrapy dropped``: list the pages dropped as duplicates, or explain one decision.

Listing (newest first; one row per dropped page: distance, reason, URL, the kept page)::

    scrapy dropped [--db URL | --log FILE] [--crawl ID | --all-crawls] [--reason exact|near|soft404]
                   [--host HOST] [--min-distance N] [--max-distance N] [--since ISO]
                   [--limit N] [--format table|json|csv] [--wide]

``--db`` takes a SQLAlchemy URL or a plain SQLite file path (default: ``STORAGE_URL``); a missing
file is reported, never created. A masked URL (``***`` for its secrets, as the report's commands
print it) stands for the real URL in ``STORAGE_URL`` or ``DEDUP_STORAGE_URL`` that masks to it
(:func:`crawler.storage.resolve_db_url`). ``--log`` reads the JSON Lines drop log instead (a torn
last line is skipped). Only the latest crawl is listed unless ``--crawl ID`` or ``--all-crawls``
is given; which crawl was picked is said on stderr, and when it dropped nothing, which crawls did.

``table`` prints whole URLs when stdout is not a terminal or with ``--wide``. On a terminal it fits
the terminal's width: the most common origin is printed once above the table and its URLs as
paths; a row too wide for one line puts the kept page on a second line. A URL is never cut
(a path longer than the terminal runs past its edge), so every URL or path it prints can be
pasted into ``--explain``. ``json`` is one complete record per line; ``csv`` has a header, a
cell with a comma, a quote or a control character is quoted
(:func:`crawler.outputs.formats.csv_line`), and a text cell starting with ``=``, ``+``, ``-``,
``@``, tab or CR gets a leading ``'`` (a spreadsheet would run it as a formula); numeric columns
stay numbers. On a terminal every format shows the control characters of crawled text escaped
(:func:`crawler.commands.console.safe_output`); ``csv`` written to a file or a pipe keeps them as
they are, inside the quoted cell (the data is not rewritten), and ``json`` escapes them as JSON
does (``\\u001b``: decoded, the text is the page's).

Explaining::

    scrapy dropped --explain URL [--diff]     # a dropped page against the page it duplicates
    scrapy dropped --pair URL OTHER [--diff]  # any two stored pages, e.g. a report's near miss

URL may be any spelling the listing prints: a path (``/a/b?q=1``, looked up on every host; when
it matches pages on several hosts the command names them and stops), a URL with or without its
scheme or trailing slash, or the canonical form.

Overruling a decision, and reviewing one (:mod:`crawler.dedup.overrides`,
:mod:`crawler.review.actions`)::

    scrapy dropped --keep URL|PATTERN|host:NAME [--note TEXT] [--file FILE]  # never a duplicate
    scrapy dropped --drop URL|PATTERN|host:NAME [--note TEXT] [--file FILE]  # never stored
    scrapy dropped --distinct URL OTHER [--note TEXT] [--file FILE]   # never each other's copy
    scrapy dropped --unset URL|PATTERN|host:NAME [OTHER] [--file FILE]  # remove a rule
    scrapy dropped --overrides [--file FILE]                          # the rules, and where
    scrapy dropped --review URL correct|wrong [--other URL] [--note TEXT]  # mark a decision
    scrapy dropped --reviews                                          # the review history

A rule is recorded in the database (``overrides``) and in ``--file`` (default
``DEDUP_OVERRIDES_FILE``, when set), applied at once (a page a keep rule names is stored again
from its drop row, a stored page a drop rule names is moved to ``dropped``; the moves go to
``DROPPED_LOG`` when that file exists) and obeyed by every later crawl into the database.

Exit status: 0 on success (also when no row matches), 1 when the database or log cannot be read,
is empty, or the crawl or URL is unknown or ambiguous, 2 for a bad option.

This module reads the options and prints the listing; the records, filters, URL spellings and
explanations are :mod:`crawler.review`'s (text and JSON of an explanation:
:mod:`crawler.review.render`).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands.console import quiet_stdout, terminal_width, with_safe_output
from crawler.vocab import OVERRIDE

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from crawler import review
    from crawler.review import DropRecord

#: What the table shows for the kept page of a page a person's drop rule names (it has none).
NO_KEPT_PAGE = "(none: a person's drop rule)"
REASON_ALIASES = {"exact": "exact_duplicate", "near": "near_duplicate", "soft404": "soft_404"}
SHORT_REASON = {"exact_duplicate": "exact", "near_duplicate": "near", "soft_404": "s404",
                "override": "rule"}


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
        group.add_argument("--reason", help="exact_duplicate|near_duplicate|soft_404|override "
                           "(or exact|near|soft404), or a rule as --rule takes it")
        group.add_argument("--rule", help="pages stored first and dropped later, by why: "
                           "canonical|preferred|refreshed|repointed|settled")
        group.add_argument("--host", help="only URLs on this host (and its subdomains)")
        group.add_argument("--min-distance", type=int, metavar="N", help="at least N bits apart")
        group.add_argument("--max-distance", type=int, metavar="N", help="at most N bits apart")
        group.add_argument("--crawl", type=int, metavar="ID", help="only this crawl "
                           "(default: the latest)")
        group.add_argument("--all-crawls", action="store_true", help="every crawl")
        group.add_argument("--worker", metavar="ID", help="one worker of a distributed crawl "
                           "(its membership id, a unique part of it, or its crawl id)")
        group.add_argument("--since", metavar="ISO", help="dropped at or after (UTC if no zone)")
        group.add_argument("--limit", type=int, metavar="N", help="at most N rows")
        group.add_argument("--format", default="table", choices=("table", "json", "csv"))
        group.add_argument("--wide", action="store_true",
                           help="table: whole URLs, whatever the terminal's width")
        group.add_argument("--explain", metavar="URL", help="explain the drop of URL")
        group.add_argument("--pair", nargs=2, metavar=("URL", "OTHER"), help="compare two pages")
        group.add_argument("--diff", action="store_true", help="with --explain/--pair: a diff")
        acts = parser.add_argument_group("Overrides and reviews")
        acts.add_argument("--keep", metavar="TARGET", help="keep this page (URL, URL pattern "
                          "with *, or host:NAME) whatever its fingerprint, in every later crawl")
        acts.add_argument("--drop", metavar="TARGET", help="never store this page (URL, "
                          "pattern or host:NAME)")
        acts.add_argument("--distinct", nargs=2, metavar=("URL", "OTHER"),
                          help="never treat these two pages as duplicates of each other")
        acts.add_argument("--unset", nargs="+", metavar="TARGET", help="remove the rule of "
                          "TARGET (or of the pair TARGET OTHER)")
        acts.add_argument("--overrides", action="store_true", help="list the rules")
        acts.add_argument("--review", nargs=2, metavar=("URL", "VERDICT"),
                          help="mark the decision about URL correct or wrong")
        acts.add_argument("--other", metavar="URL", help="with --review: the page the decision "
                          "compared URL with (default: the page it was dropped against)")
        acts.add_argument("--reviews", action="store_true", help="list the review history")
        acts.add_argument("--note", default="", help="a note kept with the rule or review")
        acts.add_argument("--file", metavar="FILE", help="the overrides file written and read "
                          "too (default DEDUP_OVERRIDES_FILE)")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler import review
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.diff and not (opts.explain is not None or opts.pair):
            raise UsageError("--diff needs --explain URL or --pair URL OTHER", print_help=False)
        if any(not url.strip() for url in (opts.explain, *(opts.pair or ())) if url is not None):
            raise UsageError("--explain and --pair need a URL or path, not ''", print_help=False)
        if opts.all_crawls and opts.crawl is not None:
            raise UsageError("--crawl ID and --all-crawls exclude each other", print_help=False)
        action = _action(opts)
        try:
            if action:
                self._act(action, opts)
            elif opts.explain is not None or opts.pair:
                self._explain(opts)
            else:
                self._list(opts, build_filter(opts))
        except review.ReviewError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1
        except BrokenPipeError:  # `scrapy dropped | head`: the reader left, not an error
            quiet_stdout()

    def _act(self, action: str, opts: argparse.Namespace) -> None:
        """Record a rule or a review, or list them (:mod:`crawler.review.actions`)."""
        from crawler.review import actions

        db, known, file = self._db_url(opts), self._known(), self._rules_file(opts)
        if action == "overrides":
            return write_rules(actions.listed_overrides(db, file, known), opts.format)
        if action == "reviews":
            return write_reviews(actions.listed_reviews(db, known), opts.format)
        if action == "review":
            url, verdict = opts.review
            outcome = actions.add_review(db, url, verdict.lower(), opts.other, opts.note, known)
        elif action == "unset":
            if len(opts.unset) > 2:
                raise UsageError("--unset takes TARGET, or the pair URL OTHER", print_help=False)
            target, other = [*opts.unset, ""][:2]
            outcome = actions.remove_override(db, target, other, file=file, known=known)
        else:
            target, other = (opts.distinct if action == "distinct"
                             else (getattr(opts, action), ""))
            outcome = actions.add_override(db, action, target, other, opts.note, file, known)
        print(outcome.message)
        self._log_moves(outcome.records, outcome.drop_log)

    def _rules_file(self, opts: argparse.Namespace) -> str | None:
        assert self.settings is not None
        return opts.file or str(self.settings.get("DEDUP_OVERRIDES_FILE") or "") or None

    def _log_moves(self, records: list[dict[str, Any]], recorded: str) -> None:
        """The moves of a rule, appended to the drop log of the crawl that wrote the database
        (its ``DROPPED_LOG`` as recorded), or to ``-s DROPPED_LOG=FILE``; never to a log of
        the current directory that belongs to another crawl. Said on stderr."""
        from crawler.review.actions import log_moves

        said = log_moves(asked_drop_log(self.settings) or recorded, records)
        if said:
            print(said, file=sys.stderr)

    def _db_url(self, opts: argparse.Namespace) -> str:
        assert self.settings is not None
        return opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"

    def _known(self) -> list[str | None]:
        """Where the real URL of a masked ``--db`` (as a report prints it) is looked up."""
        assert self.settings is not None
        return [self.settings.get("STORAGE_URL")]

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
            with review.CrawlDB.open(self._db_url(opts), self._known()) as db:
                db.require_content()
                db.check_crawl(flt.crawl_id)
                latest = db.latest_crawl()
                self._pick_distributed(opts, flt, db)
                if flt.crawl_ids is None and not self._pick_crawl(opts, flt, latest,
                                                                  db.drop_counts):
                    return write_records([], opts.format, sys.stdout, quiet=True)
                records = db.dropped(flt)
        width = None if opts.wide or not sys.stdout.isatty() else terminal_width()
        write_records(records, opts.format, sys.stdout, width)

    def _pick_distributed(self, opts: argparse.Namespace, flt: review.DropFilter,
                          db: review.CrawlDB) -> None:
        """A distributed crawl (the latest, or ``--crawl`` of its own row) is listed whole,
        its workers' drops as one; ``--worker`` narrows to one worker. Sets
        ``flt.crawl_ids``; raises :class:`ReviewError` for an unknown worker, or a crawl
        that has no pages yet."""
        from crawler import review
        from crawler.review.selection import distributed_family, select_crawls

        if opts.all_crawls:
            if opts.worker is not None:
                raise UsageError("--worker and --all-crawls exclude each other",
                                 print_help=False)
            return
        runs = db.runs()
        run = next((r for r in runs if r.id == flt.crawl_id), runs[-1] if runs else None)
        if run is None or distributed_family(runs, run) is None:
            if opts.worker is not None:
                raise review.ReviewError("--worker narrows a distributed crawl; "
                                         f"crawl {run.id if run else '-'} is not one")
            return
        if flt.crawl_id is not None and run.parent_id is not None and opts.worker is None:
            return  # --crawl of one worker's row: that row, as asked
        picked = select_crawls(db, flt.crawl_id, None, opts.worker)  # ReviewError: one line
        flt.crawl_id, flt.crawl_ids = None, tuple(picked.crawl_ids)
        print(picked.note.replace("report of", "drops of", 1), file=sys.stderr)

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
        from crawler.review.actions import standing
        from crawler.review.render import explanation_dict, format_explanation, standing_lines

        if opts.log:
            raise UsageError("--explain and --pair need the database (--db), not --log",
                             print_help=False)
        with review.CrawlDB.open(self._db_url(opts), self._known()) as db:
            db.require_content()
            result: review.Explanation | None = None
            if opts.pair:
                url = review.resolve_url(db, opts.pair[0])
                result = review.explain_pair(db, url, review.resolve_url(db, opts.pair[1]))
                rules, reviews = standing(db, url, self._rules_file(opts))
                head = ""
            else:
                url = review.resolve_url(db, opts.explain, dropped=True)
                rules, reviews = standing(db, url, self._rules_file(opts))
                head = _fate(db, url, bool(rules or reviews))
                if not head:
                    result = review.explain(db, url)
        if opts.format == "json":
            data = explanation_dict(result, opts.diff) if result is not None else {
                "url": url, "fate": head}
            data.update(standing_dict(rules, reviews))
            print(json.dumps(data, ensure_ascii=False))
        else:
            text = format_explanation(result, diff=opts.diff) if result is not None else (
                f"{url}\n{head}\n")
            sys.stdout.write(text + "".join(line + "\n" for line in standing_lines(rules,
                                                                                 reviews)))


def _fate(db: review.CrawlDB, url: str, said: bool) -> str:
    """The page's fate when it is no comparison to explain: stored (later than any drop of
    it), or dropped by a person's rule; ``""`` when its drop is a decision to explain.
    :class:`ReviewError` for a stored page nothing was said of (``--pair`` compares it)."""
    from crawler import review

    drop, document = db.dropped_row(url), db.document(url)
    if document is not None and (drop is None or (document.get("crawl_id") or 0) > (
            drop.get("crawl_id") or 0)):
        if not said:
            raise review.ReviewError(f"{url} was kept, not dropped; compare it with another "
                                     "page with --pair URL OTHER_URL")
        return f"stored (crawl {document.get('crawl_id')})"
    if drop is not None and drop.get("reason") == OVERRIDE:
        return (f"dropped by a person's rule (crawl {drop.get('crawl_id')})" + (
            "" if said else "; the rule is not in this database: see --overrides, "
            "DEDUP_OVERRIDES_FILE or --file"))
    return ""


def standing_dict(rules: list[Any], reviews: list[Any]) -> dict[str, Any]:
    """The rules and reviews of a page as JSON data (``--explain --format json``)."""
    return {"overrides": [{
                "action": rule.action, "target": rule.target, "other": rule.other or None,
                "note": rule.note or None,
                "created_at": rule.created_at.isoformat() if rule.created_at else None,
                "source": rule.source or "database"} for rule in rules],
            "reviews": [{"verdict": r.verdict, "decision": r.decision, "other": r.other,
                         "distance": r.distance, "note": r.note or None,
                         "reviewed_at": r.reviewed_at.isoformat() if r.reviewed_at else None}
                        for r in reviews]}  # fmt: skip


ACTIONS = ("keep", "drop", "distinct", "unset", "overrides", "review", "reviews")


def asked_drop_log(settings: Any) -> str | None:
    """``-s DROPPED_LOG=FILE`` when given on the command line; else None: a rule's moves go to
    the drop log the latest crawl recorded (never to a log of the current directory that
    belongs to another crawl). ``dropped`` and ``dedupreport --serve`` share it."""
    from scrapy.settings import SETTINGS_PRIORITIES

    if (settings.getpriority("DROPPED_LOG") or 0) < SETTINGS_PRIORITIES["cmdline"]:
        return None
    return str(settings.get("DROPPED_LOG") or "") or None


def _action(opts: argparse.Namespace) -> str:
    """The one override or review action asked (``""``: none); UsageError for two, or for one
    mixed with the listing's or the explanation's options."""
    asked = [name for name in ACTIONS if getattr(opts, name) not in (None, False)]
    if len(asked) > 1:
        raise UsageError(f"--{asked[0]} and --{asked[1]} exclude each other", print_help=False)
    if not asked:
        if opts.other or opts.note or (opts.file and not (opts.explain or opts.pair)):
            raise UsageError("--other, --note and --file go with --keep, --drop, --distinct, "
                             "--unset or --review (--file with --explain too)",
                             print_help=False)
        return ""
    if opts.explain is not None or opts.pair or opts.log:
        raise UsageError(f"--{asked[0]} excludes --explain, --pair and --log", print_help=False)
    if opts.other and asked[0] != "review":
        raise UsageError("--other goes with --review", print_help=False)
    return asked[0]


def write_rules(rules: list[Any], fmt: str) -> None:
    """The rules, one per line: action, target(s), where or when written, note."""
    if fmt == "json":
        for rule in rules:
            print(json.dumps({"action": rule.action, "target": rule.target,
                              "other": rule.other or None, "note": rule.note or None,
                              "created_at": rule.created_at.isoformat()
                              if rule.created_at else None,
                              "source": rule.source or "database"}, ensure_ascii=False))
        return
    if not rules:
        print("no overrides: the dedup rule decides every page")
        return
    from crawler.dedup.overrides import rule_key

    last = {rule_key(rule): rule for rule in rules}  # a crawl obeys the last of each target
    for rule in rules:
        winner = last[rule_key(rule)]
        replaced = "" if winner is rule else f"  (replaced by {winner.source or 'the database'})"
        print(f"{rule.describe()}{'  # ' + rule.note if rule.note else ''}{replaced}")
    print(f"{len(rules)} override(s); a crawl obeys {len(last)}")


def write_reviews(reviews: list[Any], fmt: str) -> None:
    """The review history, oldest first."""
    if fmt == "json":
        for r in reviews:
            print(json.dumps({"url": r.url, "other": r.other, "decision": r.decision,
                              "verdict": r.verdict, "label": r.label, "reason": r.reason,
                              "distance": r.distance, "note": r.note or None,
                              "reviewed_at": r.reviewed_at.isoformat() if r.reviewed_at
                              else None, "crawl_id": r.crawl_id}, ensure_ascii=False))
        return
    if not reviews:
        print("no decision reviewed yet: scrapy dropped --review URL correct|wrong")
        return
    for r in reviews:
        when = r.reviewed_at.strftime("%Y-%m-%d %H:%M") if r.reviewed_at else "-"
        dist = "-" if r.distance is None else str(r.distance)
        print(f"{when} {r.verdict:<7} {r.decision:<7} {dist:>4} {r.url} "
              f"{'vs' if r.decision == 'kept' else 'of'} {r.other}"
              f"{'  # ' + r.note if r.note else ''}")
    wrong = sum(r.verdict == "wrong" for r in reviews)
    print(f"{len(reviews)} review(s): {len(reviews) - wrong} correct, {wrong} wrong")


def build_filter(opts: argparse.Namespace) -> review.DropFilter:
    """The filter from the options; :class:`UsageError` for a bad value."""
    from crawler import review  # lazily: Scrapy imports every command module
    from crawler.review.records import RULES

    reason, rule = opts.reason, (opts.rule or "").lower() or None
    if reason:
        reason = REASON_ALIASES.get(reason.lower(), reason.lower())
        if reason in RULES and rule is None:  # --reason canonical: the drops of that rule
            reason, rule = None, reason
        elif reason not in review.ALL_REASONS:
            raise UsageError(f"--reason {opts.reason!r}: use {', '.join(review.ALL_REASONS)} "
                             f"(or exact, near, soft404), or a rule: {', '.join(RULES)}",
                             print_help=False)
    if rule is not None and rule not in RULES:
        raise UsageError(f"--rule {opts.rule!r}: use {', '.join(RULES)}", print_help=False)
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
                             opts.crawl, since, opts.limit, rule=rule)


# --- listing formats -------------------------------------------------------------------------


def write_records(records: list[DropRecord], fmt: str, out: TextIO, width: int | None = None,
                  quiet: bool = False) -> None:
    """Write ``records``; ``width`` fits a table to a terminal (None: whole URLs).

    ``quiet``: the table prints nothing for no records (the reason is already on stderr).
    """
    from crawler import review  # lazily: Scrapy imports every command module
    from crawler.outputs.formats import csv_cell, csv_line

    if fmt == "json":
        for record in records:
            out.write(json.dumps(record.as_dict(), ensure_ascii=False) + "\n")
    elif fmt == "csv":  # control characters kept, in quoted cells (csv_line)
        names = review.DropRecord.field_names(records)
        data = _data_stream(out)
        data.write(csv_line(names))
        for record in records:  # text cells neutralized (OWASP), numbers stay numbers
            row = record.as_dict()
            data.write(csv_line(csv_cell(row.get(name)) for name in names))
    elif records or not quiet:
        out.write(format_table(records, width))


def _data_stream(out: TextIO) -> TextIO:
    """Where a data format is written: ``out`` on a terminal (its control characters shown
    escaped, :class:`crawler.commands.console.SafeStream`), else the stream it wraps: a file or a
    pipe
    gets the data unchanged."""
    raw = getattr(out, "stream", None)
    return out if raw is None or out.isatty() else raw


def _main_origin(records: list[DropRecord]) -> tuple[str, bool]:
    """The most common origin of the listed URLs, and whether every URL is on it."""
    from crawler.review.urls import origin_of

    urls = [u for r in records for u in (r.url, r.duplicate_of) if u]
    counts = Counter(origin_of(u) for u in urls)
    counts.pop("", None)
    if not counts:
        return "", False
    origin = counts.most_common(1)[0][0]
    return origin, len(counts) == 1 and counts[origin] == len(urls)


def format_table(records: list[DropRecord], width: int | None = None) -> str:
    """Distance, reason, dropped URL and kept page per row, then a count by reason.

    ``width`` None: whole URLs on one line each. Otherwise the table fits ``width`` columns:
    URLs on the most common origin become paths (the origin is named above the table), and when
    a row is still too wide every kept page moves to a second line. URLs are never cut.
    """
    from crawler.review import ALL_REASONS, REASONS

    if not records:
        return "no dropped pages match\n"
    origin, everywhere = _main_origin(records) if width is not None else ("", False)
    lines = []
    if origin:
        lines.append(f"all URLs on {origin}" if everywhere else
                     f"paths are on {origin}; other URLs are whole")
    lines += _table_body(_table_rows(records, origin), width)
    counts = {reason: sum(r.reason == reason for r in records) for reason in ALL_REASONS}
    lines.append(f"{len(records)} dropped page(s): " +
                 ", ".join(f"{n} {reason}" for reason, n in counts.items()
                           if n or reason in REASONS))  # fmt: skip
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _table_rows(records: list[DropRecord], origin: str) -> list[tuple[str, str, str, str]]:
    """Distance, short reason, dropped URL and kept URL (a path when on ``origin``)."""
    from crawler.review.urls import origin_of, path_of

    def shown(url: str) -> str:
        return path_of(url) if origin and origin_of(url) == origin else url

    return [("-" if r.distance is None else str(r.distance),
             SHORT_REASON.get(r.reason, r.reason[:5]), shown(r.url),
             shown(r.duplicate_of) if r.duplicate_of else NO_KEPT_PAGE)
            for r in records]


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

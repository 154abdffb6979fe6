"""``scrapy dedupreport``: one self-contained HTML page (or JSON) about a crawl's dedup.

::

    scrapy dedupreport -o report.html [--db URL] [--crawl ID | --job [JOB]] [--format html|json]
    scrapy dedupreport --serve [--port N] [--db URL] [--crawl ID | --job [JOB]]

The report (see :mod:`crawler.report` for how each number is computed) shows the crawl's dedup
settings and totals, counts by reason and by host, a histogram of the distance from each page to
its nearest other page (kept and dropped in two colours, the threshold drawn), the near misses
(kept pairs at k+1..k+3 bits with the command that compares them) and a what-if table for every
threshold 0..k+3. The HTML has inline CSS and SVG only: it opens offline and can be mailed.

Which crawl: the latest by default; ``--crawl ID`` another; ``--job`` every run of the latest
JOBDIR job (``--job JOB`` of that job) reported as one — a crawl resumed from ``JOBDIR`` records
one ``crawls`` row per run, all with the job id of ``JOBDIR/dedup/job.json``. A one-line note on
stderr says which crawls were picked and how to pick others (and, when the latest crawl is one
run of a job with several, that ``--job`` reports them all); a chosen crawl without pages (a
``scrapy parse`` run, say) is an error naming the crawls that have pages
(:func:`crawler.review.select_crawls`).

``--format json`` writes the same numbers; ``-o -`` (the default for json) writes to stdout.
The output file is written atomically (temp file, then rename). ``--db`` takes a SQLAlchemy URL
or a SQLite file path (default ``STORAGE_URL``); a missing file is reported, never created.
``--serve`` writes no file: it serves the review of the crawls picked on 127.0.0.1 (``--port``,
default 8765; 0 for any free port) until Ctrl-C or SIGTERM, printing one line with its URL: a
sortable, filterable list of every drop, each decision's two stored texts side by side, and
buttons that mark a decision correct or wrong or overrule it (:mod:`crawler.review.serve`).
Exit status 1 when the database is missing or empty, the crawl or job is unknown or has no
pages; 2 for ``--crawl`` with ``--job``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands.console import quiet_stdout, with_safe_output

if TYPE_CHECKING:
    import argparse

    from crawler.review import CrawlDB, Selection

SERVE_PORT = 8765  # --serve without --port


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return ("-o report.html [--db URL] [--crawl ID | --job [JOB]] [--format html|json]\n"
                "       scrapy dedupreport --serve [--port N] [--db URL] [--crawl ID | --job]")

    def short_desc(self) -> str:
        return "Write an HTML (or JSON) report of a crawl's duplicate detection"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Report")
        group.add_argument("-o", "--output", metavar="FILE",
                           help="output file ('-' for stdout; default report.html, or - for json)")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--crawl", type=int, metavar="ID", help="crawl id (default: latest)")
        group.add_argument("--job", nargs="?", const="", metavar="JOB",
                           help="every run of a JOBDIR job as one (default JOB: the latest)")
        group.add_argument("--worker", metavar="ID", help="one worker of a distributed crawl "
                           "(its membership id, a unique part of it, or its crawl id)")
        group.add_argument("--format", default="html", choices=("html", "json"))
        group.add_argument("--serve", action="store_true",
                           help="serve the review in a browser on 127.0.0.1 (no file written)")
        group.add_argument("--port", type=int, default=SERVE_PORT, metavar="N",
                           help=f"port of --serve (default {SERVE_PORT}; 0: any free port)")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.crawl is not None and opts.job is not None:
            raise UsageError("--crawl and --job each pick the crawls to report; give one",
                             print_help=False)
        if opts.serve and (opts.output or opts.format != "html"):
            raise UsageError("--serve shows the review in a browser; -o and --format are for a "
                             "report file", print_help=False)
        if not 0 <= opts.port <= 65535:
            raise UsageError(f"--port {opts.port}: use 0 to 65535", print_help=False)
        # Imported here: Scrapy imports every project command for every `scrapy` invocation.
        from crawler.review import ReviewError

        try:
            if opts.serve:
                self._serve(opts)
                return
            data, label = self._report(opts)
        except ReviewError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        output = opts.output or ("-" if opts.format == "json" else "report.html")
        if self._write(output, render(data, opts.format)) and output != "-":
            totals = data["totals"]
            ruled = totals.get("override") or 0
            print(f"wrote {output}: {label}, {totals['pages']} pages, "
                  f"{totals['dropped']} dropped ({totals['exact_duplicate']} exact, "
                  f"{totals['near_duplicate']} near)"
                  + (f", {ruled} dropped by a person's rule" if ruled else ""), file=sys.stderr)

    def _report(self, opts: argparse.Namespace) -> tuple[dict[str, Any], str]:
        """The report's data and the label of the crawls picked (the note on stderr)."""
        from crawler import report, review

        assert self.settings is not None
        db_url = opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"
        from crawler.review.actions import crawl_rules

        rules_file = self._rules_file()
        with review.CrawlDB.open(db_url, [self.settings.get("STORAGE_URL")]) as db:
            picked = self._pick(db, opts)
            rules = crawl_rules(db, rules_file) if rules_file else None  # None: the database's
            return (report.build_report(db, picked.report_arg, db_arg=opts.db, rules=rules),
                    picked.label)

    def _pick(self, db: CrawlDB, opts: argparse.Namespace) -> Selection:
        """The crawls ``--crawl``/``--job``/``--worker`` pick (the note printed on stderr)."""
        from crawler.review import LATEST_JOB

        db.require_content()
        job = LATEST_JOB if opts.job == "" else opts.job  # bare --job
        picked = db.select(opts.crawl, job, opts.worker)
        print(picked.note, file=sys.stderr)
        return picked

    def _serve(self, opts: argparse.Namespace) -> None:
        """Serve the review of the crawls picked until Ctrl-C or SIGTERM."""
        from crawler import review
        from crawler.commands.dropped import asked_drop_log
        from crawler.review.serve import ReviewServer, serve_until_stopped

        assert self.settings is not None
        known = [self.settings.get("STORAGE_URL")]
        db_url = opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"
        with review.CrawlDB.open(db_url, known) as db:
            picked = self._pick(db, opts)
        server = ReviewServer(db_url, picked, opts.port, known,
                              self._rules_file(),
                              asked_drop_log(self.settings))
        serve_until_stopped(server, sys.stdout)

    def _rules_file(self) -> str | None:
        assert self.settings is not None
        return str(self.settings.get("DEDUP_OVERRIDES_FILE") or "") or None

    def _write(self, output: str, text: str) -> bool:
        """Write the report; False (and the exit status set) when it could not be written."""
        try:
            write_output(output, text)
        except BrokenPipeError:  # `scrapy dedupreport --format json | head`
            quiet_stdout()
            return False
        except OSError as exc:
            print(f"error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
            self.exitcode = 1
            return False
        return True


def render(data: dict[str, Any], fmt: str) -> str:
    """The report as ``fmt``: JSON (indented) or the HTML page."""
    if fmt == "json":  # escaped also for a file: `cat report.json` must be safe
        from crawler.outputs.formats import terminal_safe

        return terminal_safe(json.dumps(data, indent=2, ensure_ascii=False)) + "\n"
    from crawler.report.html import render_html

    return render_html(data)


def write_output(output: str, text: str) -> None:
    """Write ``text`` to ``output`` atomically (temp file, fsync, rename); ``-`` is stdout."""
    if output == "-":
        sys.stdout.write(text)
        return
    from crawler.state.atomicfile import write_atomic

    write_atomic(output, text)

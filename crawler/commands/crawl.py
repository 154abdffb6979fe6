"""``scrapy crawl``, checked: nothing starts until the seeds, settings and database are usable.

Scrapy's own ``crawl`` builds the crawler first and lets a bad argument explode inside it (a
``ValueError`` in a spider's ``__init__`` prints a traceback). This command runs the checks of
:mod:`crawler.commands.preflight` first: bad input exits 2 with one line, an unreachable or
misconfigured server exits 1. It also exits 1 when the crawl ended for a reason that means it
is incomplete (``bloom_full``, ``storage_error``, ``jobdir_error``, ``redis_error``,
``droplog_error``), also when that failure came while the crawl was already closing
(:data:`crawler.closing.CLOSE_REASON_STAT`), and when a feed could not be stored (an FTP
server or a bucket that stopped answering while the crawl ran: Scrapy logs it and exits 0).

With ``LOG_FILE`` set (scrapyd sets it for every job, shows that file and keeps no exit
status), the one line it prints on failing also ends that file, with the exit status
(:func:`crawler.commands.console.echo_to_log_file`).
"""

from __future__ import annotations

import atexit
import gc
import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand

from crawler.closing import CLOSE_REASON_STAT
from crawler.commands.console import echo_to_log_file
from crawler.commands.preflight import preflight_input, preflight_servers

if TYPE_CHECKING:
    import argparse

#: Scrapy's stat prefix of feeds whose storage failed (``feedexport/failed_count/<Storage>``).
FEED_FAILED_STAT = "feedexport/failed_count/"
#: Finish reasons after which the crawl is incomplete: the command exits 1.
FAILED_FINISH_REASONS = frozenset({"bloom_full", "storage_error", "jobdir_error", "redis_error",
                                   "droplog_error", "redis_rolled_back", "settings_refused",
                                   "warc_error"})


class Command(ScrapyCrawlCommand):
    def short_desc(self) -> str:
        return "Run a spider, after checking its seeds, settings and database"

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        """Scrapy's options, then :func:`crawler.commands.preflight.preflight_input`. Scrapy calls
        this before it sets up logging and prints its start-up banner, so a bad seed or setting is
        the only output."""
        super().process_options(args, opts)
        if len(args) != 1:
            return  # Scrapy's usage error comes from run()
        assert self.settings is not None
        from crawler.outputs.feeds import apply_export_fields

        preflight_input(self.settings, opts.spargs, args[0])
        apply_export_fields(self.settings)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        """:func:`crawler.commands.preflight.preflight_servers` once logging is set up (a migration
        is
        logged), then crawl."""
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage errors
            return
        assert self.settings is not None
        preflight_servers(self.settings)
        crawler = self._create_crawler(args[0])
        assert self.crawler_process is not None
        self.crawler_process.crawl(crawler, **opts.spargs)
        self.crawler_process.start()
        skip_final_collection()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
        stats = crawler.stats.get_stats() if crawler.stats else {}
        reason = next((r for r in (stats.get("finish_reason"), stats.get(CLOSE_REASON_STAT))
                       if r in FAILED_FINISH_REASONS), None)
        if reason is not None:
            self._failed(f"crawl stopped early: {reason} (see the log above)",
                         "the crawl is incomplete")  # fmt: skip
        lost = sum(int(v) for k, v in stats.items() if k.startswith(FEED_FAILED_STAT))
        if lost:
            self._failed(f"{lost} feed(s) could not be stored (see the log above): the pages "
                         f"are in storage, `scrapy export` writes them",
                         "a feed was not stored")  # fmt: skip

    def _failed(self, line: str, why: str) -> None:
        """Exit 1 after the crawl: ``line`` on stderr, and both it and the exit status at the
        end of ``LOG_FILE`` (scrapyd keeps no exit status)."""
        print(line, file=sys.stderr)
        assert self.settings is not None
        echo_to_log_file(self.settings, __name__, line, f"exit status 1: {why}")
        self.exitcode = 1


def skip_final_collection() -> None:
    """Spare the interpreter's last garbage collections once the crawl is over: at exit,
    before the other exit handlers run (flushing logs and files), every object alive is moved
    to the collector's permanent generation (:func:`gc.freeze`).

    Why: those collections walk every object the crawl's imports and components made (about
    0.25 s of a one-page crawl's 1.3 s; stock Scrapy has fewer). Nothing is lost: by then the
    reactor has stopped and every component closed, committed and flushed its output on
    ``spider_closed``; exit handlers still run, files still close when their last reference
    goes; only cyclic garbage left at exit is not collected, as Python never promises it is.
    So a component that writes a file must flush or close it on ``spider_closed``: a buffered
    file still reachable from a reference cycle at exit is no longer flushed by its finalizer.
    """
    atexit.register(gc.freeze)

"""``scrapy settle``: re-decide the duplicate groups of a crawl database by the preference order.

::

    scrapy settle [--db URL] [--all] [--log FILE]

A crawl settles by itself when it ends (``DEDUP_SETTLE``); this command does it for a database
whose crawl did not (a worker killed, a database that was down at the end, ``DEDUP_SETTLE``
off) or, with ``--all``, for every group, after a change of ``SIMHASH_MAX_DISTANCE`` or of the
code. It reads ``SIMHASH_MAX_DISTANCE``, ``SIMHASH_PERSIST`` (off: each crawl's pages settle
among themselves), ``DEDUP_CANONICAL`` and ``DROPPED_TEXT_MAX_CHARS`` from the settings (``-s``),
as a crawl does. Idempotent: a second run moves nothing.

Each move gets a line in the drop log (``--log``, default ``DROPPED_LOG``; ``--log ''``: none),
so the log still replays to the table. Prints one summary line. Exit status 0; 2 for bad input
(a missing database, a bad setting).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler import config, defaults
from crawler.commands.console import with_safe_output

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--db URL] [--all] [--log FILE]"

    def short_desc(self) -> str:
        return "Re-decide duplicate groups so the stored set does not depend on fetch order"

    def long_desc(self) -> str:
        return ("Settles the groups of crawls that did not settle when they ended (or every "
                "group with --all) by the preference order: named canonical, a seed's host, "
                "the shorter URL, the smaller URL. Each move is appended to the drop log.")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Settle")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--all", action="store_true", dest="everything",
                           help="re-decide every group, not only those of unsettled crawls")
        group.add_argument("--log", metavar="FILE", default=None,
                           help="drop log to append the moves to (default DROPPED_LOG)")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if args:
            raise UsageError("scrapy settle takes no arguments", print_help=False)
        from crawler.dedup.overrides import OverrideError
        from crawler.outputs.droplog import DropLog, row_record
        from crawler.storage import StorageError, Store, settle_options
        from crawler.storage.overrides import rules_of
        from crawler.storage.reader import ReviewError, resolve_db_url
        from crawler.urls.urlnorm import UrlPolicy

        assert self.settings is not None
        try:
            options = settle_options({**self.settings.copy_to_dict(), "DEDUP_SETTLE": True})
            assert options is not None
            max_chars = config.get_int(self.settings, "DROPPED_TEXT_MAX_CHARS",
                                       defaults.DROPPED_TEXT_MAX_CHARS, lo=0)
            url = resolve_db_url(opts.db or str(self.settings.get("STORAGE_URL")
                                                or defaults.STORAGE_URL),
                                 [self.settings.get("STORAGE_URL")])
            with Store(url, create=False) as store:
                rules = rules_of(store, options.rules_file,  # a person's word first
                                 UrlPolicy.from_settings(self.settings))
                if not options.persist:  # each crawl among itself: one settle per crawl
                    done = [store.settle(options.k, crawl_id=crawl.id, scope=[crawl.id],
                                         everything=opts.everything,
                                         prefer_canonical=options.prefer_canonical,
                                         max_chars=max_chars, overrides=rules)
                            for crawl in store.crawls()]
                else:
                    done = [store.settle(options.k, everything=opts.everything,
                                         prefer_canonical=options.prefer_canonical,
                                         max_chars=max_chars, overrides=rules)]
        except (config.SettingError, ReviewError, StorageError, OverrideError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        rows = [row for d in done for row in d.rows]
        path = opts.log if opts.log is not None else str(
            self.settings.get("DROPPED_LOG", defaults.DROPPED_LOG) or "")
        if rows and path:
            log = DropLog(path)
            try:
                for row in rows:
                    log.write(row_record(row))
            finally:
                log.close()
        groups = sum(d.groups for d in done)
        print(f"settled {groups} groups: {sum(d.demoted for d in done)} stored pages dropped, "
              f"{sum(d.promoted for d in done)} dropped pages stored, "
              f"{sum(d.repointed for d in done)} drops repointed"
              + (f"; {len(rows)} lines appended to {path}" if rows and path else ""))

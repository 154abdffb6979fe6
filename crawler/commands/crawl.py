"""``scrapy crawl``, checked: nothing starts until the seeds, settings and database are usable.

Scrapy's own ``crawl`` builds the crawler first and lets a bad argument explode inside it (a
``ValueError`` in a spider's ``__init__`` prints a traceback). This command runs every check that
must stop a crawl *before* the crawler exists, prints one clear message and exits non-zero:

* exit 2 — an unknown spider, bad seeds (every invalid line with its number), a misspelled
  project setting ("did you mean ...?"), a setting out of range, or a feed in ``FEEDS`` that
  cannot be written (unknown scheme or format, library missing, bad URI), checked before Scrapy
  sets up logging, so the message is all the command prints;
* exit 1 — the database in ``STORAGE_URL`` (or Redis for ``DEDUP_BACKEND=redis``, or an S3
  feed's bucket) is unreachable or misconfigured, or the crawl ended for a reason that means
  it is incomplete (``bloom_full``, ``storage_error``, ``jobdir_error``, ``redis_error``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand

if TYPE_CHECKING:
    import argparse

    from crawler.config import SettingsLike

#: Finish reasons after which the crawl is incomplete: the command exits 1.
FAILED_FINISH_REASONS = frozenset({"bloom_full", "storage_error", "jobdir_error", "redis_error"})


class UnknownSpiderError(ValueError):
    """``scrapy crawl NAME`` for a spider the project does not have."""


def check_spider(settings: Any, name: str) -> None:
    """The spider exists (before the database is created or migrated for it)."""
    from scrapy.spiderloader import get_spider_loader

    available = sorted(get_spider_loader(settings).list())
    if name not in available:
        raise UnknownSpiderError(f"no spider named {name!r}; this project has: "
                                 f"{', '.join(available) or 'none'} (scrapy list)")


def check_input(settings: SettingsLike, spargs: dict[str, str], spider: str = "web") -> None:
    """The user's input: no misspelled project setting, settings in range, feeds that can be
    written and, for ``web``, the seeds. Raises :class:`SeedError`, :class:`SettingError` or
    :class:`FeedError` (one line per problem)."""
    from crawler.config import check_unknown_settings, validate_settings
    from crawler.feeds import check_feeds
    from crawler.seeds import seeds_from_args
    from crawler.warc import check_warc

    check_unknown_settings(settings)
    validate_settings(settings)
    check_feeds(settings)
    check_warc(settings)
    if spider == "web":
        seeds_from_args(seeds=spargs.get("seeds"), urls=spargs.get("urls"))


def check_servers(settings: SettingsLike) -> None:
    """The database in ``STORAGE_URL`` (migrated to the current schema, which it logs) and,
    for ``DEDUP_BACKEND=redis``, Redis. Raises the storage or backend error type."""
    from crawler.storage import check_storage

    check_storage(settings)
    from crawler.feeds import check_feed_servers

    check_feed_servers(settings)
    from crawler.backends import backend_name

    if backend_name(settings) == "redis":
        from crawler.backends.redis import check_redis

        check_redis(settings)


def preflight_input(settings: Any, spargs: dict[str, str], spider: str) -> None:
    """:func:`check_spider` and :func:`check_input`; on bad input, print its one line and exit 2
    (``crawl`` and ``parse`` call this before Scrapy sets up logging)."""
    # Imported here: Scrapy imports every project command for every `scrapy` invocation.
    from crawler.config import SettingError
    from crawler.feeds import FeedError
    from crawler.seeds import SeedError

    try:
        check_spider(settings, spider)
        check_input(settings, spargs, spider=spider)
    except (SeedError, SettingError, FeedError, UnknownSpiderError) as exc:  # usage error
        fail(exc, 2)


def preflight_servers(settings: Any) -> None:
    """:func:`check_servers`; when one fails, print its one line (password masked), exit 1."""
    from crawler.backends.common import RedisBackendError
    from crawler.feeds import FeedError
    from crawler.storage import StorageError

    try:
        check_servers(settings)
    except (StorageError, RedisBackendError, FeedError) as exc:
        fail(exc, 1)


def fail(exc: Exception, code: int) -> None:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(code)


class Command(ScrapyCrawlCommand):
    def short_desc(self) -> str:
        return "Run a spider, after checking its seeds, settings and database"

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        """Scrapy's options, then :func:`check_input`. Scrapy calls this before it sets up
        logging and prints its start-up banner, so a bad seed or setting is the only output."""
        super().process_options(args, opts)
        if len(args) != 1:
            return  # Scrapy's usage error comes from run()
        assert self.settings is not None
        from crawler.feeds import apply_export_fields

        preflight_input(self.settings, opts.spargs, args[0])
        apply_export_fields(self.settings)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        """:func:`check_servers` once logging is set up (a migration is logged), then crawl."""
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage errors
            return
        assert self.settings is not None
        preflight_servers(self.settings)
        crawler = self._create_crawler(args[0])
        assert self.crawler_process is not None
        self.crawler_process.crawl(crawler, **opts.spargs)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
        reason = crawler.stats.get_value("finish_reason") if crawler.stats else None
        if reason in FAILED_FINISH_REASONS:
            print(f"crawl stopped early: {reason} (see the log above)", file=sys.stderr)
            self.exitcode = 1

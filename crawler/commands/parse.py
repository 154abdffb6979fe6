"""``scrapy parse``, checked like ``crawl``: the URL to parse is the ``web`` spider's seed.

Scrapy's ``parse`` builds the spider with only the ``-a`` arguments, so the ``web`` spider,
which needs seeds to know its scope, stopped with a ``SeedError`` traceback. Here the URL given
to ``parse`` is the seed when no ``-a seeds=``/``-a urls=`` is given, and the same pre-flight
checks as ``crawl`` (settings, feeds, seeds, database) print one line and exit non-zero.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands.parse import Command as ScrapyParseCommand

if TYPE_CHECKING:
    import argparse


class Command(ScrapyParseCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if len(args) != 1:
            return  # Scrapy's usage error comes from run()
        assert self.settings is not None
        from crawler.commands.crawl import UnknownSpiderError, check_input, check_spider
        from crawler.config import SettingError
        from crawler.feeds import FeedError
        from crawler.seeds import SeedError

        spider = opts.spider or "web"
        if spider == "web" and not (opts.spargs.get("seeds") or opts.spargs.get("urls")):
            opts.spargs["urls"] = args[0]  # the page to parse is the crawl's one seed
        try:
            if opts.spider:
                check_spider(self.settings, opts.spider)
            check_input(self.settings, opts.spargs, spider=spider)
        except (SeedError, SettingError, FeedError, UnknownSpiderError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) == 1:
            assert self.settings is not None
            from crawler.backends.common import RedisBackendError
            from crawler.commands.crawl import check_servers
            from crawler.feeds import FeedError
            from crawler.storage import StorageError

            try:
                check_servers(self.settings)
            except (StorageError, RedisBackendError, FeedError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(1)
        super().run(args, opts)

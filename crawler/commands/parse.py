"""``scrapy parse``, checked like ``crawl``: the URL to parse is the ``web`` spider's seed.

Scrapy's ``parse`` builds the spider with only the ``-a`` arguments, so the ``web`` spider,
which needs seeds to know its scope, stopped with a ``SeedError`` traceback. Here the URL given
to ``parse`` is the seed when no ``-a seeds=``/``-a urls=`` is given, and the same pre-flight
checks as ``crawl`` (settings, feeds, seeds, database) print one line and exit non-zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.commands.parse import Command as ScrapyParseCommand

from crawler.commands.preflight import preflight_input, preflight_servers

if TYPE_CHECKING:
    import argparse


class Command(ScrapyParseCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if len(args) != 1:
            return  # Scrapy's usage error comes from run()
        assert self.settings is not None
        spider = opts.spider or "web"
        if spider == "web" and not (opts.spargs.get("seeds") or opts.spargs.get("urls")):
            opts.spargs["urls"] = args[0]  # the page to parse is the crawl's one seed
        preflight_input(self.settings, opts.spargs, spider)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) == 1:
            assert self.settings is not None
            preflight_servers(self.settings)
        super().run(args, opts)

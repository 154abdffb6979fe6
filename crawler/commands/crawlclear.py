"""``scrapy crawlclear``: delete one distributed crawl's state from Redis.

::

    scrapy crawlclear NS [--redis URL] [--yes] [--force]

``NS`` is the crawl's ``DEDUP_NAMESPACE``; its keys are every key of the namespace
(:mod:`crawler.cluster.lifecycle`: ``{REDIS_KEY_PREFIX}:NS`` and everything under
``{REDIS_KEY_PREFIX}:NS:``, the start list ``NS:web:start_urls`` (``REDIS_START_URLS_KEY``) and
a queue key recorded outside the namespace, never the keys of a namespace named ``NS:...``),
deleted with ``SCAN`` and ``UNLINK`` in batches of 500. ``--redis`` defaults
to ``REDIS_URL`` (``DEDUP_REDIS_URL`` in the distributed profile).

* A crawl with a live member (a worker whose lease runs past now, on the Redis clock) is
  refused unless ``--force``: its workers would read an empty frontier as a finished crawl.
* On a terminal the command asks the user to type the namespace; ``--yes`` skips the question,
  and without ``--yes`` a stdin that is not a terminal is refused.
* It prints how many keys it deleted and about how many bytes they held (``MEMORY USAGE``).

The pages the crawl stored stay in storage (``STORAGE_URL``); a crawl of the namespace started
afterwards starts from nothing (its seen set is empty: every page is fetched again).

Exit status: 0 cleared; 1 Redis unreachable or the confirmation not given; 2 bad input: an
unknown namespace, live members without ``--force``, no terminal without ``--yes``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.backends.common import redis_url
from crawler.commands.console import with_safe_output
from crawler.outputs.formats import mask_url

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "NS [--redis URL] [--yes] [--force]"

    def short_desc(self) -> str:
        return "Delete a distributed crawl's state (queue, seen set, index) from Redis"

    def long_desc(self) -> str:
        return ("Deletes every Redis key of the crawl in namespace NS (its DEDUP_NAMESPACE); "
                "its stored pages stay in the database. Refused while a worker of the crawl "
                "is live (unless --force); asks for the namespace on a terminal (unless --yes).")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Clear")
        group.add_argument("--redis", metavar="URL", help="Redis server (default REDIS_URL)")
        group.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        group.add_argument("--force", action="store_true",
                           help="clear even while workers of the crawl are live")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if len(args) != 1 or not args[0].strip():
            raise UsageError("expected one namespace, e.g. `scrapy crawlclear crawl42`",
                             print_help=False)  # fmt: skip
        from crawler.backends.common import RedisBackendError

        assert self.settings is not None
        url = opts.redis or redis_url(self.settings)
        try:
            self.exitcode = self._clear(args[0], url, opts)
        except RedisBackendError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1

    def _clear(self, ns: str, url: str, opts: argparse.Namespace) -> int:
        from crawler.backends.common import namespace, settings_of_namespace
        from crawler.backends.redis import connect
        from crawler.cluster.lifecycle import CrawlState
        from crawler.cluster.startlist import start_key

        assert self.settings is not None
        crawl = settings_of_namespace(self.settings, ns)
        if crawl is None:
            return _refuse(f"{ns.strip()!r} is not a namespace (letters, digits, '.', '_' and "
                           "'-', no ':'); `scrapy crawlstatus --list` lists the crawls")
        ns = str(crawl["DEDUP_NAMESPACE"])
        state = CrawlState(connect(url), namespace(crawl), url,
                           start_key=start_key(crawl, "web"))
        try:
            keys, size = state.size()
            where = f"in Redis at {mask_url(url)}"
            meta = state.meta()
            if not keys or not (meta.get("started") or meta.get("crawl")):
                return _refuse(f"no crawl in namespace {ns!r} {where} (no crawl recorded in "
                               f"{state.base}:meta); `scrapy crawlstatus --list` lists them")
            live = state.live_members()
            if live and not opts.force:
                return _refuse(f"crawl {ns!r} has {len(live)} live worker(s) ({', '.join(live)});"
                               " stop them first, or clear anyway with --force")  # fmt: skip
            if not opts.yes and not _confirmed(ns, keys, size, where):
                return 2 if not sys.stdin.isatty() else 1
            deleted, freed = state.clear()
        finally:
            state.close()
        print(f"cleared crawl {ns!r} {where}: {deleted} key(s) deleted, about {_mib(freed)} "
              "freed; its stored pages stay in the database (STORAGE_URL)")
        return 0


def _confirmed(ns: str, keys: int, size: int, where: str) -> bool:
    if not sys.stdin.isatty():
        _refuse(f"not clearing crawl {ns!r} without --yes: stdin is not a terminal to confirm on")
        return False
    print(f"Crawl {ns!r} {where}: {keys} key(s), about {_mib(size)}. Its stored pages stay in "
          "the database.", file=sys.stderr)
    try:
        answer = input(f"Type the namespace ({ns}) to delete it: ")
    except EOFError:
        answer = ""
    if answer.strip() != ns:
        print("not cleared (the answer was not the namespace)", file=sys.stderr)
        return False
    return True


def _refuse(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"

"""``scrapy crawlstatus``: one distributed crawl, or every crawl of a Redis server, at a glance.

::

    scrapy crawlstatus [--namespace NS] [--redis URL] [--db URL] [--spider NAME] [--json]
    scrapy crawlstatus --list [--redis URL] [--json]

The namespace is the current settings' (``DEDUP_NAMESPACE``, with ``REDIS_URL``: the
environment variables ``DEDUP_NAMESPACE`` and ``DEDUP_REDIS_URL`` of the distributed profile)
unless ``--namespace`` and ``--redis`` say otherwise. Printed: the crawl id, when it started,
its state (``running`` while a member is live; ``finished`` when none is and nothing is queued
or leased; ``stopped`` when none is and work is left: start a worker to resume it), queued and
leased requests, URLs in the shared seen set, one line per worker (live, dead or left; pages
fetched, pages stored and dropped, pages/s over its last renewal interval, hosts it owns, when
it last reported), the workers' totals, and the database's totals for the crawl (documents and
dropped rows of every ``crawls`` row whose ``job`` is the crawl id: ``--db``, default
``STORAGE_URL``; one line says so when the database cannot be read). What each number is and
where it comes from: :mod:`crawler.backends.redis.status` and
:mod:`crawler.cluster.stats`.

``--list``: every namespace under ``REDIS_KEY_PREFIX`` with a crawl in Redis: crawl id, start,
state, queued/leased, live workers, keys and approximate memory (``MEMORY USAGE`` summed over
at most 100,000 keys; ``>=`` when there were more). ``--json`` prints one JSON object.

Exit status: 0; 1 when Redis cannot be reached; 2 for bad input (an unknown namespace, a bad
option). Read-only: nothing is written to Redis or the database.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler import defaults
from crawler.backends.common import key_prefix, redis_url
from crawler.commands.console import quiet_stdout, with_safe_output

if TYPE_CHECKING:
    import argparse

    from crawler.backends.redis.status import CrawlView


class InputError(Exception):
    """Bad input found after parsing (exit 2), or a server that cannot be reached (exit 1)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--namespace NS] [--redis URL] [--db URL] [--json] | --list [--redis URL]"

    def short_desc(self) -> str:
        return "Show a distributed crawl: state, queue, workers, totals (--list: every crawl)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Crawl status")
        group.add_argument("--namespace", metavar="NS",
                           help="the crawl's DEDUP_NAMESPACE (default: the settings')")
        group.add_argument("--redis", metavar="URL", help="Redis server (default REDIS_URL)")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--spider", default="web", metavar="NAME",
                           help="spider of the crawl's frontier key (default web)")
        group.add_argument("--list", action="store_true", help="every crawl in this Redis")
        group.add_argument("--json", action="store_true", help="one JSON object")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.list and (opts.namespace or opts.db):
            raise UsageError("--list shows every namespace; drop --namespace/--db",
                             print_help=False)
        try:
            data = self._list(opts) if opts.list else self._status(opts)
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = exc.code
            return
        try:
            if opts.json:
                print(json.dumps(data, ensure_ascii=False))
            else:
                print(render_list(data) if opts.list else render_status(data))
        except BrokenPipeError:  # `scrapy crawlstatus | head`
            quiet_stdout()

    # --- reading ----------------------------------------------------------------------------
    def _client(self, opts: argparse.Namespace) -> tuple[Any, str]:
        from crawler.backends.common import RedisBackendError, mask_url

        assert self.settings is not None
        url = opts.redis or redis_url(self.settings)
        try:
            from crawler.backends.redis import connect
        except ImportError:
            raise InputError("the redis client is not installed: pip install "
                             "'dedup-crawler[redis]'", code=1) from None  # fmt: skip
        try:
            return connect(url, timeout=10.0), mask_url(url)
        except RedisBackendError as exc:
            raise InputError(" ".join(str(exc).split()), code=1) from None

    def _base(self, opts: argparse.Namespace) -> tuple[str, str]:
        """``(base, frontier key)`` of the namespace to show."""
        from crawler.backends.common import namespace, queue_key, settings_of_namespace
        from crawler.config import SettingError

        assert self.settings is not None
        crawl: Any = self.settings
        if opts.namespace is not None:
            crawl = settings_of_namespace(self.settings, opts.namespace)
            if crawl is None:
                raise InputError(f"--namespace {opts.namespace!r}: expected a DEDUP_NAMESPACE "
                                 "such as crawl42 (see `scrapy crawlstatus --list`)")
        base = namespace(crawl)
        try:  # %(namespace)s and %(spider)s, as the workers fill them in
            key = queue_key(crawl, opts.spider)
        except SettingError:
            key = ""
        # a key outside the namespace: the workers record it in {base}:meta (crawl_status)
        return base, key if key.startswith(base + ":") else f"{base}:{opts.spider}:requests"

    def _status(self, opts: argparse.Namespace) -> dict[str, Any]:
        from crawler.backends.redis.status import crawl_status

        client, url = self._client(opts)
        base, queue_key = self._base(opts)
        view = _redis_call(lambda: crawl_status(client, base, queue_key), url)
        if view is None:
            raise InputError(f"no crawl in namespace {base} at Redis {url}: check "
                             "DEDUP_NAMESPACE / --namespace and --redis "
                             "(`scrapy crawlstatus --list` lists the crawls there)")
        data = view.as_dict()
        data["redis"] = url
        data["storage"] = self._storage(opts, view)
        return data

    def _storage(self, opts: argparse.Namespace, view: CrawlView) -> dict[str, Any]:
        """The database's totals of the crawl, or ``{"error": one line}``."""
        from crawler.storage import ReviewError
        from crawler.storage.crawltotals import crawl_totals

        assert self.settings is not None
        configured = self.settings.get("STORAGE_URL")
        db_url = opts.db or configured or defaults.STORAGE_URL
        if not view.crawl:
            return {"error": "the crawl has no id in Redis yet (meta field 'crawl')"}
        try:
            totals = crawl_totals(db_url, view.crawl, (configured,))
        except ReviewError as exc:
            return {"error": str(exc)}
        return {"crawls": totals.crawls, "documents": totals.documents,
                "dropped": totals.dropped}  # fmt: skip

    def _list(self, opts: argparse.Namespace) -> dict[str, Any]:
        from crawler.backends.redis.status import namespaces

        assert self.settings is not None
        client, url = self._client(opts)
        prefix = key_prefix(self.settings)
        found = _redis_call(lambda: namespaces(client, prefix, opts.spider), url)
        return {"redis": url, "prefix": prefix, "crawls": found}


def _redis_call(func: Any, url: str) -> Any:
    from crawler.backends.common import connection_errors

    try:
        return func()
    except connection_errors() as exc:
        raise InputError(f"Redis at {url} stopped answering ({type(exc).__name__}: {exc})",
                         code=1) from None  # fmt: skip


# --- text -------------------------------------------------------------------------------------
def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_status(data: dict[str, Any]) -> str:
    from crawler.backends.redis.status import CrawlView, WorkerView, format_workers

    fields = {k: v for k, v in data.items() if k in CrawlView.__dataclass_fields__}
    view = CrawlView(**{**fields, "workers": [WorkerView(**w) for w in data["workers"]]})
    t = data["totals"]
    lines = [
        f"crawl {data['crawl'] or '-'}  (namespace {data['namespace']}, Redis {data['redis']})",
        f"  started   {_when(data['started'])}",
        f"  state     {data['state']}",
        f"  frontier  {data['queued']} queued, {data['leased']} leased; "
        f"{data['urls_seen']} URLs seen",
        f"  workers   {t['live_workers']} live of {t['workers']}",
        *format_workers(view),
        f"  total     {t['pages']} pages fetched, {t['stored']} stored, {t['dropped']} dropped, "
        f"{t['pages_per_second']:.1f} pages/s",
    ]  # fmt: skip
    storage = data["storage"]
    if "error" in storage:
        lines.append(f"  storage   not read: {storage['error']}")
    else:
        lines.append(f"  storage   {storage['documents']} documents, {storage['dropped']} "
                     f"dropped ({storage['crawls']} crawls rows)")  # fmt: skip
    return "\n".join(lines)


def render_list(data: dict[str, Any]) -> str:
    crawls = data["crawls"]
    if not crawls:
        return f"no crawl under {data['prefix']}: at Redis {data['redis']}"
    width = max(len("namespace"), *(len(c["namespace"]) for c in crawls))
    lines = [f"{'namespace':<{width}}  {'crawl':<20} {'started':<23} {'state':<9} "
             f"{'queued':>7} {'leased':>7} {'live':>4} {'keys':>7} {'memory':>11}"]
    for c in crawls:
        memory = f"{'' if c['memory_complete'] else '>='}{c['memory_bytes'] / 2**20:.1f} MiB"
        lines.append(f"{c['namespace']:<{width}}  {c['crawl'] or '-':<20} "
                     f"{_when(c['started']):<23} {c['state']:<9} {c['queued']:>7} "
                     f"{c['leased']:>7} {c['live_workers']:>4} {c['keys']:>7} {memory:>11}")
    return "\n".join(lines)

"""What a command checks before a crawl starts: nothing starts until the spider, the seeds,
the settings and the servers are usable (``crawl`` and ``parse`` call it).

Scrapy's own ``crawl`` builds the crawler first and lets a bad argument explode inside it.
Here every check that must stop a crawl runs *before* the crawler exists, prints one clear
line and exits non-zero:

* exit 2 — an unknown spider, bad seeds (every invalid line with its number), a misspelled
  setting, Scrapy's or the project's ("did you mean ...?", :func:`check_unknown_settings`), a
  setting out of range, or a feed in ``FEEDS`` that cannot be written, checked before Scrapy
  sets up logging, so the message is all it prints;
* exit 1 — the database in ``STORAGE_URL`` (or Redis for ``DEDUP_BACKEND=redis``, or an S3
  feed's bucket) is unreachable or misconfigured; exit 2 for a distributed worker started on
  a finished crawl's namespace (:func:`crawler.cluster.lifecycle.check_not_finished`).

With ``LOG_FILE`` set (scrapyd sets it for every job) the line also goes to that file,
followed by ``exit status N: the crawl did not start`` (:func:`fail`). A setting no component
knows that is no typo of a known one (an add-on's own) is not refused: once logging is set up,
one WARNING line names it (:func:`preflight_servers`).

The settings checks are one explicit list, :func:`settings_checks`: each is the function the
component itself calls when it is built, so the pre-flight check and the crawl read a
setting the same way. A component added to the crawl adds its check there.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from crawler.config import SettingError, SettingsLike

logger = logging.getLogger(__name__)

#: Prefixes of the project's own settings: an unknown name with one of them is a typo.
PROJECT_PREFIXES = ("SIMHASH_", "BLOOM_", "DEDUP_", "URLNORM_", "STORAGE_", "TRAP_", "DROPPED_",
                    "WARC_", "JOBDIR_SNAPSHOT_", "DISTRIBUTED_", "SCOPE", "BLOCK_PRIVATE",
                    "LINKS_PER_PAGE", "PAGE_MAX_", "ROBOTSTXT_", "RETRY_AFTER_")
#: How like a known name (:func:`difflib.get_close_matches`' ratio) an unknown one must be to be
#: refused as its typo: a letter wrong, missing, doubled or swapped in a name of 7 letters or
#: more (``DOWNLOAD_DELY``, ``CONCURRENT_REQUEST``). ``BENCH_STATS_FILE`` beside ``STATS_FILE``
#: (0.77) is an add-on's own name, not a typo. May refuse an add-on's name one letter from one of
#: Scrapy's (``USER_AGENTS``).
TYPO_CUTOFF = 0.85
#: The same for a name with one of :data:`PROJECT_PREFIXES`, refused in any case: the names it
#: may have meant.
PROJECT_CUTOFF = 0.75
#: Settings Scrapy sets itself that its ``default_settings`` do not list: from the variables
#: ``SCRAPY_CHECK``, ``SCRAPY_PROJECT`` (scrapyd sets it for every job), ``SCRAPY_PYTHON_SHELL``
#: and ``SCRAPY_SETTINGS_MODULE`` (:func:`scrapy.utils.project.get_project_settings`).
SCRAPY_RUNTIME_SETTINGS = ("CHECK", "PROJECT", "PYTHON_SHELL", "SETTINGS_MODULE")
#: What scrapy-redis (0.9) reads beyond Scrapy's settings: its connection, scheduler, start URLs
#: and item pipeline (the distributed profile builds on it; none of these is refused).
SCRAPY_REDIS_SETTINGS = (
    "REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_DB", "REDIS_ENCODING", "REDIS_PARAMS",
    "REDIS_DECODE_RESPONSES", "REDIS_ITEMS_KEY", "REDIS_ITEMS_SERIALIZER", "REDIS_START_URLS_KEY",
    "REDIS_START_URLS_AS_SET", "REDIS_START_URLS_AS_ZSET", "SCHEDULER_QUEUE_KEY",
    "SCHEDULER_QUEUE_CLASS", "SCHEDULER_DUPEFILTER_KEY", "SCHEDULER_DUPEFILTER_CLASS",
    "SCHEDULER_SERIALIZER", "SCHEDULER_PERSIST", "SCHEDULER_FLUSH_ON_START",
    "SCHEDULER_IDLE_BEFORE_CLOSE", "STATS_KEY", "MAX_IDLE_TIME_BEFORE_CLOSE",
)  # fmt: skip

#: Unknown names :func:`preflight_input` found that are no typos, for :func:`preflight_servers`
#: to warn about once Scrapy has set up logging (one command per process).
_unread: list[str] = []


class UnknownSpiderError(ValueError):
    """``scrapy crawl NAME`` for a spider the project does not have."""


class UnknownSettingError(SettingError):
    """A setting no component reads that is a typo (:func:`check_unknown_settings`); its value
    shown as :func:`crawler.outputs.formats.mask_settings` shows it (a mistyped ``..._TOKEN``)."""

    def __init__(self, name: str, value: object, suggestions: list[str]) -> None:
        from crawler.outputs.formats import mask_settings

        super().__init__(name, value, "")
        hint = (f"did you mean {' or '.join(suggestions)}?" if suggestions
                else "no setting of dedup-crawler has this name (docs/settings.md)")
        self.args = (f"unknown setting {name}={mask_settings({name: value})[name]!r}: {hint}",)

    def __str__(self) -> str:
        return str(self.args[0])


def settings_checks() -> list[Callable[[SettingsLike], object]]:
    """Every component's settings, each read and checked the way the component reads them:
    ``<Thing>Settings.from_settings``, a frozen dataclass whose fields are named, raising
    :class:`SettingError` (or :class:`~crawler.extras.MissingExtraError`) on a value the crawl
    cannot use."""
    from crawler.backends import BackendSettings
    from crawler.backends.bloom import BloomSettings
    from crawler.backends.common import NamespaceSettings, RedisSettings
    from crawler.cluster.joincheck import QueueSettings
    from crawler.cluster.startlist import StartListSettings
    from crawler.cluster.worker import WorkerSettings
    from crawler.config import ScrapySettings
    from crawler.dedup.options import DeciderSettings
    from crawler.extensions.gctune import GCSettings
    from crawler.extensions.progress import ProgressSettings
    from crawler.middlewares.headerlimit import HeaderLimitSettings
    from crawler.middlewares.retryafter import RetryAfterSettings
    from crawler.middlewares.robots import RobotsSettings
    from crawler.outputs.droplog import DropLogOptions
    from crawler.outputs.warc import WarcOptions
    from crawler.spiders.web import SpiderSettings
    from crawler.state.jobstate import JobdirSettings
    from crawler.storage import StorageSettings
    from crawler.urls.linkrules import DropNotes
    from crawler.urls.pagebounds import PageBounds
    from crawler.urls.scope import ScopeSettings
    from crawler.urls.traps import TrapSettings
    from crawler.urls.urlnorm import UrlPolicy

    return [
        ScrapySettings.from_settings,  # Scrapy's DOWNLOAD_*, CLOSESPIDER_*, ..., STATS_FILE
        BackendSettings.from_settings,  # DEDUP_BACKEND, the extras it and STORAGE_URL need
        UrlPolicy.from_settings,  # URLNORM_STRIP_PARAMS, URLNORM_SORT_QUERY
        DropNotes.from_settings,  # URLNORM_DEBUG
        TrapSettings.from_settings,  # TRAP_*, URLLENGTH_LIMIT
        ScopeSettings.from_settings,  # SCOPE, BLOCK_PRIVATE_ADDRESSES
        SpiderSettings.from_settings,  # DEDUP_EARLY_SKIP, DEDUP_CANONICAL
        PageBounds.from_settings,  # LINKS_PER_PAGE_MAX, PAGE_MAX_PARSE_CHARS
        BloomSettings.from_settings,  # BLOOM_*
        JobdirSettings.from_settings,  # JOBDIR, JOBDIR_SNAPSHOT_*
        StorageSettings.from_settings,  # STORAGE_*, DROPPED_TEXT_MAX_CHARS, the settle step
        DropLogOptions.from_settings,  # DROPPED_LOG (a writable file path), DROPPED_LOG_RETRY_*
        WorkerSettings.from_settings,  # DISTRIBUTED_*, the shared scheduler's extension
        StartListSettings.from_settings,  # REDIS_START_URLS_*, DISTRIBUTED_SEED_WAIT_SECONDS
        QueueSettings.from_settings,  # SCHEDULER_QUEUE_KEY; SCHEDULER_PERSIST, _FLUSH_ON_START
        RedisSettings.from_settings,  # REDIS_URL, REDIS_RETRY_SECONDS, REDIS_TIMEOUT_SECONDS
        NamespaceSettings.from_settings,  # DEDUP_NAMESPACE (a key segment: no ':')
        ProgressSettings.from_settings,  # DEDUP_PROGRESS_INTERVAL
        GCSettings.from_settings,  # GC_FREEZE, GC_GEN0_THRESHOLD
        DeciderSettings.from_settings,  # SIMHASH_* (k and blocks too), DEDUP_* of the decider
        WarcOptions.from_settings,  # WARC_*
        RobotsSettings.from_settings,  # ROBOTSTXT_RETRY_BACKOFF*, _UNAVAILABLE_MAX_SECONDS
        RetryAfterSettings.from_settings,  # RETRY_AFTER_MAX_SECONDS
        HeaderLimitSettings.from_settings,  # DOWNLOAD_MAX_HEADER_BYTES, _COUNT
    ]


def check_settings(settings: Any) -> list[str]:
    """No misspelled setting, and every check of :func:`settings_checks` passes. Returns the
    unknown names that are no typos (:func:`check_unknown_settings`)."""
    unread = check_unknown_settings(settings)
    for check in settings_checks():
        check(settings)
    return unread


def known_setting_names() -> set[str]:
    """Every setting name the crawler knows: Scrapy's defaults and the names it sets itself
    (:data:`SCRAPY_RUNTIME_SETTINGS`), scrapy-redis's (:data:`SCRAPY_REDIS_SETTINGS`), the
    project's defaults (:mod:`crawler.defaults`) and the names its settings profiles define."""
    from scrapy.settings import default_settings

    from crawler import defaults

    names = {n for n in dir(default_settings) if n.isupper()}
    names |= {*SCRAPY_RUNTIME_SETTINGS, *SCRAPY_REDIS_SETTINGS}
    names |= {n for n in dir(defaults) if n.isupper()}
    for module in ("crawler.settings.base", "crawler.settings.distributed"):
        names |= {n for n in dir(importlib.import_module(module)) if n.isupper()}
    return names


def check_unknown_settings(settings: Mapping[str, Any]) -> list[str]:
    """Refuse a setting no component knows (:func:`known_setting_names`) that is a typo: a name
    with one of :data:`PROJECT_PREFIXES` (``-s SIMHASH_MAX_DISTANC=2`` would otherwise crawl
    with the default k) or one within :data:`TYPO_CUTOFF` of a known name, Scrapy's included
    (``-s DOWNLOAD_DELY=2``: the default delay), naming the closest known names.

    Returns the other unknown names, sorted: an add-on reads its own settings, which no list
    here can know (:func:`preflight_input` warns about each). ``settings`` is Scrapy's settings
    object or any mapping (a spider's ``custom_settings``)."""
    known = known_setting_names()
    candidates = sorted(n for n in known if not n.endswith(("_CHOICES", "_RANGE")))
    unread = []
    for name in sorted(str(n) for n in settings):
        if name in known:
            continue
        close = typo_of(name, candidates)
        if close or name.upper().startswith(PROJECT_PREFIXES):
            raise UnknownSettingError(name, settings.get(name), close)
        unread.append(name)
    return unread


def typo_of(name: str, candidates: list[str]) -> list[str]:
    """The known names (at most two, closest first) ``name`` may be a typo of: any within
    :data:`TYPO_CUTOFF`, else, for a name with one of :data:`PROJECT_PREFIXES`, the project's
    names within :data:`PROJECT_CUTOFF`."""
    upper = name.upper()
    close = difflib.get_close_matches(upper, candidates, n=2, cutoff=TYPO_CUTOFF)
    if close or not upper.startswith(PROJECT_PREFIXES):
        return close
    ours = [n for n in candidates if n.startswith(PROJECT_PREFIXES)]
    return difflib.get_close_matches(upper, ours, n=2, cutoff=PROJECT_CUTOFF)


def spider_settings_of(settings: Any, name: str) -> Mapping[str, Any]:
    """The ``custom_settings`` of the spider ``name`` (which exists: :func:`check_spider`)."""
    from scrapy.spiderloader import get_spider_loader

    return getattr(get_spider_loader(settings).load(name), "custom_settings", None) or {}


def check_spider(settings: Any, name: str) -> None:
    """The spider exists (before the database is created or migrated for it)."""
    from scrapy.spiderloader import get_spider_loader

    available = sorted(get_spider_loader(settings).list())
    if name not in available:
        raise UnknownSpiderError(f"no spider named {name!r}; this project has: "
                                 f"{', '.join(available) or 'none'} (scrapy list)")


def check_input(settings: Any, spargs: dict[str, str], spider: str = "web") -> list[str]:
    """The user's input: the settings (:func:`check_settings`; the spider's
    ``custom_settings`` too, for misspelled names), feeds that can be written and, for ``web``,
    the seeds. Raises :class:`SeedError`, :class:`SettingError` or :class:`FeedError` (one line
    per problem). Returns the unknown setting names that are no typos, to warn about."""
    from crawler.outputs.feeds import check_feeds
    from crawler.outputs.warc import check_warc

    unread = check_settings(settings)
    unread += check_unknown_settings(spider_settings_of(settings, spider))
    check_feeds(settings)
    check_warc(settings)
    if spider == "web":
        check_seeds(settings, spargs)
    return sorted(set(unread))


def check_seeds(settings: SettingsLike, spargs: dict[str, str]) -> None:
    """The ``web`` spider's seeds (a seed over ``URLLENGTH_LIMIT`` would be dropped silently as
    a trap), unless a distributed worker takes them from Redis."""
    from crawler.cluster.startlist import takes_start_list
    from crawler.urls.seeds import seeds_from_args
    from crawler.urls.traps import TrapSettings

    if not (spargs.get("seeds") or spargs.get("urls")) and takes_start_list(settings):
        return  # distributed: the seeds come from Redis (crawler.cluster.startlist)
    seeds_from_args(seeds=spargs.get("seeds"), urls=spargs.get("urls"),
                    max_length=TrapSettings.from_settings(settings).max_length)


def check_servers(settings: SettingsLike) -> None:
    """The database in ``STORAGE_URL`` (migrated to the current schema, which it logs), the
    feeds' servers and, for ``DEDUP_BACKEND=redis``, Redis. Raises the server's error type."""
    from crawler.backends import backend_name
    from crawler.outputs.feeds import check_feed_servers
    from crawler.storage import check_storage

    shared = backend_name(settings) == "redis" and distributed(settings)
    if shared:  # settings other than the crawl's: refused before anything is touched (exit 2)
        from crawler.cluster.joincheck import check_join
        from crawler.cluster.lifecycle import check_not_finished

        check_not_finished(settings)  # a finished crawl is not resumed, whatever its settings
        check_join(settings, write=False)
    check_storage(settings)
    check_feed_servers(settings)
    if backend_name(settings) == "redis":
        from crawler.backends.redis import check_redis

        if shared:
            check_join(settings)  # the first worker records its settings (one atomic step)
        check_redis(settings)


def distributed(settings: SettingsLike) -> bool:
    """Whether ``SCHEDULER`` is the shared one (the distributed profile)."""
    from crawler.cluster.worker import shared_scheduler

    return shared_scheduler(settings)


#: The environment variable of ``settings.distributed`` that sets a setting (its docstring).
PROFILE_ENV = {"STORAGE_URL": "DEDUP_STORAGE_URL"}


def as_set(settings: Any, message: str) -> str:
    """``message`` naming each setting of :data:`PROFILE_ENV` the way the user set it: in the
    distributed profile, where no ``-s`` overrides it, by its environment variable."""
    import re

    if not hasattr(settings, "getpriority") or not distributed(settings):
        return message
    from scrapy.settings import SETTINGS_PRIORITIES

    for name, env in PROFILE_ENV.items():
        if (settings.getpriority(name) or 0) <= SETTINGS_PRIORITIES["project"]:
            message = re.sub(rf"(?<![A-Z_]){name}\b", env, message)
    return message


def preflight_input(settings: Any, spargs: dict[str, str], spider: str) -> None:
    """:func:`check_spider` and :func:`check_input`; on bad input, print its one line and exit 2
    (``crawl`` and ``parse`` call this before Scrapy sets up logging). The crawl's feed log is
    masked from here on (:func:`crawler.outputs.feeds.mask_feed_log`): Scrapy names a feed by its
    URI.
    Unknown settings that are no typos are kept for :func:`preflight_servers` to warn about."""
    # first, before numpy and SQLAlchemy: it imports Scrapy's TLS context factory, whose
    # deprecated aliases call inspect.stack(), a walk of every loaded module per frame
    importlib.import_module("crawler.middlewares.headerlimit")
    from crawler.outputs.feeds import FeedError, mask_feed_log
    from crawler.urls.seeds import SeedError

    mask_feed_log()
    try:
        check_spider(settings, spider)
        _unread[:] = check_input(settings, spargs, spider=spider)
    except (SeedError, SettingError, FeedError, UnknownSpiderError) as exc:  # usage error
        fail(exc, 2, settings)
    check_joining(settings)


def check_typos(settings: Any) -> None:
    """A review command's ``-s`` checked as a crawl's are: a typo (``-s DROPPED_LGO=...``) is
    one line and exit 2, before the command reads or writes anything
    (:func:`check_unknown_settings`); an unknown name that is no typo is let through."""
    try:
        check_unknown_settings(settings)
    except SettingError as exc:
        fail(exc, 2)


def warn_unread_settings() -> None:
    """One WARNING line for each unknown setting :func:`preflight_input` let through."""
    for name in _unread:
        logger.warning("Setting %s is not one Scrapy, scrapy-redis or dedup-crawler reads, nor a "
                       "typo of one: left to the add-on that reads it", name)
    _unread.clear()


def check_joining(settings: Any) -> None:
    """A distributed worker refused by its crawl (a finished namespace, settings other than
    the crawl's) is told so here, before Scrapy's start-up lines, as any usage error: the
    read-only part of :func:`check_servers`. A Redis that cannot be asked is left to
    :func:`preflight_servers` (exit 1, once logging is set up)."""
    from crawler.backends import backend_name
    from crawler.backends.common import RedisBackendError

    if backend_name(settings) != "redis" or not distributed(settings):
        return
    from crawler.cluster.joincheck import check_join
    from crawler.cluster.lifecycle import CrawlFinished, check_not_finished

    try:
        check_not_finished(settings)
        check_join(settings, write=False)
    except RedisBackendError:
        return
    except (SettingError, CrawlFinished) as exc:
        fail(ValueError(as_set(settings, str(exc))), 2, settings)


def preflight_servers(settings: Any) -> None:
    """:func:`check_servers`; when one fails, print its one line (password masked), exit 1
    (2 for a database that is not ours: :class:`crawler.storage.ForeignDatabaseError`, for
    a finished crawl's namespace: :class:`crawler.cluster.lifecycle.CrawlFinished`, and for
    settings other than the crawl's or its namespace's: :class:`crawler.config.SettingError`).
    In the distributed profile a storage error names ``DEDUP_STORAGE_URL`` (:func:`as_set`).
    First, logging being set up, the warnings of :func:`warn_unread_settings`."""
    from crawler.backends.common import RedisBackendError
    from crawler.cluster.lifecycle import CrawlFinished
    from crawler.outputs.feeds import FeedError
    from crawler.storage import StorageError

    warn_unread_settings()
    try:
        check_servers(settings)
    except SettingError as exc:  # settings other than the crawl's, or the namespace's (Redis)
        fail(ValueError(as_set(settings, str(exc))), 2, settings)
    except StorageError as exc:
        fail(StorageError(as_set(settings, str(exc)), exc.url), getattr(exc, "exit_code", 1),
             settings)
    except (RedisBackendError, FeedError, CrawlFinished) as exc:  # 2: see above
        fail(exc, getattr(exc, "exit_code", 1), settings)


def fail(exc: Exception, code: int, settings: Any = None) -> None:
    """Print ``exc`` (control characters escaped: it may echo a seed line; every URL in it
    masked: a driver's words may quote the URL it was given) and exit. With ``settings`` that
    set ``LOG_FILE`` (scrapyd sets it for every job) the same line and the exit status end
    that file too (:func:`crawler.commands.console.echo_to_log_file`)."""
    from crawler.commands.console import echo_to_log_file
    from crawler.outputs.formats import mask_text, terminal_safe

    line = terminal_safe(mask_text(f"error: {exc}"))
    print(line, file=sys.stderr)
    if settings is not None:
        echo_to_log_file(settings, __name__, line, f"exit status {code}: the crawl did not start")
    sys.exit(code)

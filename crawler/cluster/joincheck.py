"""Settings that decide pages are one per crawl: the join check of the distributed profile.

Every worker of a distributed crawl must decide pages the same way and send its output to the
same place, or the crawl silently keeps duplicate groups twice (two shingle sizes), splits its
pages across two databases, or loses its queue. So the first worker of a namespace records the
settings that matter, and every later worker compares its own with them before it writes
anything else to Redis.

**What is recorded** (:data:`JOIN_SETTINGS`, an explicit list): each setting read the way its
component reads it (the same checked getter), so ``-s SIMHASH_SHINGLE=4`` and ``4`` agree:

* the content decision: ``SIMHASH_MAX_DISTANCE``, ``SIMHASH_BLOCKS`` (None when unset: k + 1),
  ``SIMHASH_MIN_TOKENS``, ``SIMHASH_SHINGLE``, ``SIMHASH_PERSIST``, ``DEDUP_CANONICAL``,
  ``DEDUP_SETTLE``;
* which URLs are one and which are fetched: ``URLNORM_STRIP_PARAMS`` (as a set of lower-case
  globs), ``URLNORM_SORT_QUERY``, the trap rules (``URLLENGTH_LIMIT``, ``TRAP_MAX_*``,
  ``TRAP_FOLLOW_LINKS_OF``, ``TRAP_DUPLICATE_HOPS``, ``TRAP_LEARN_PARAMS_AFTER``,
  ``TRAP_HOST_MAX_PAGES``, ``TRAP_PATH_MAX_QUERY_VARIANTS``, ``TRAP_SOFT404_PROBE``), ``SCOPE``,
  ``BLOCK_PRIVATE_ADDRESSES``, ``LINKS_PER_PAGE_MAX``, ``PAGE_MAX_PARSE_CHARS`` and Scrapy's
  ``DEPTH_LIMIT`` and ``ROBOTSTXT_OBEY``;
* the seen set's sizing: ``BLOOM_CAPACITY``, ``BLOOM_ERROR_RATE``, ``BLOOM_ON_FULL``;
* where output goes: ``STORAGE_URL`` (the database it names, :func:`storage_url`: backend, user,
  host, port and database, a SQLite path made absolute; never the password, which is neither
  stored in Redis nor compared: a wrong one fails the storage check, a rotated one or one from
  ``PGPASSWORD`` is the same database; nor the driver or query options) and the
  queue key (``SCHEDULER_QUEUE_KEY`` resolved with the namespace, :func:`queue_key`: an env
  ``DEDUP_NAMESPACE`` and another ``-s DEDUP_NAMESPACE`` once put the queue and the index
  under two namespaces). The namespace itself is where the record lives.

Not recorded: what changes speed or one worker's own files, not decisions (concurrency, delays,
``DEDUP_EARLY_SKIP``, ``BLOOM_VERIFY``, ``DROPPED_LOG``, ``WARC_*``, feeds, ``REDIS_*`` timeouts,
``DISTRIBUTED_*``). ``SCHEDULER_PERSIST=False`` and ``SCHEDULER_FLUSH_ON_START=True`` are refused
outright (:class:`QueueSettings`): in scrapy-redis they delete the queue and the seen set, which
here every worker shares (:class:`crawler.cluster.scheduler.SharedScheduler` never does either).

**The record**: field ``settings`` of the ``{base}:meta`` hash, JSON, name -> value, written
once by one Lua script (``HSETNX`` then ``HGET``, :func:`claim`): of two workers started at the
same instant with different settings exactly one writes it, the other reads it and is refused.
A name found on one side only (a record of an older version) is not compared. The record goes
with the namespace's other keys (expiry of a finished crawl, ``crawlclear``).

**The refusal** (:class:`JoinRefused`, a usage error) is one line naming each differing setting
with both values, e.g. ``this worker's settings differ from crawl dedup:crawl42's (set by its
first worker): SIMHASH_SHINGLE=2 (crawl: 4); run it with the crawl's settings or under another
DEDUP_NAMESPACE``. The ``crawl`` command refuses at pre-flight (exit 2, :func:`check_join`);
a worker started otherwise (a script's ``CrawlerProcess``) is refused where its membership
starts, :func:`crawler.cluster.worker.member`, which runs :func:`join_crawler` first: one
ERROR line, and the crawl ends with finish reason :data:`SETTINGS_REFUSED` before it opens.
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import CloseSpider, NotConfigured

from crawler import config, defaults
from crawler.backends.common import RedisBacked, namespace, queue_key

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

FIELD = "settings"  # {base}:meta field: JSON of the crawl's JOIN_SETTINGS values
SETTINGS_REFUSED = "settings_refused"  # finish reason of a worker refused at join
#: The spider whose queue key is recorded: the project's one spider (``%(spider)s`` resolved).
SPIDER = "web"

# KEYS: meta. ARGV: this worker's record. Returns the crawl's record (this one if it was first).
_CLAIM = """
redis.call('HSETNX', KEYS[1], 'settings', ARGV[1])
return redis.call('HGET', KEYS[1], 'settings')
"""


class JoinRefused(config.SettingError):
    """A worker whose settings differ from its crawl's (one line, exit 2)."""

    exit_code = 2

    def __init__(self, base: str, diffs: list[tuple[str, Any, Any]]) -> None:
        self.base, self.diffs = base, diffs
        shown = ", ".join(f"{name}={shown_value(mine)} (crawl: {shown_value(theirs)})"
                          for name, mine, theirs in diffs)  # fmt: skip
        ValueError.__init__(self, f"this worker's settings differ from crawl {base}'s (set by "
                                  f"its first worker): {shown}; run it with the crawl's settings "
                                  "or under another DEDUP_NAMESPACE")  # fmt: skip
        self.name, self.value, self.allowed = diffs[0][0], diffs[0][1], repr(diffs[0][2])


class CrawlRefused(CloseSpider):
    """What every component asking for the membership of a refused worker gets (after one
    ERROR line): ``CloseSpider`` (finish reason :data:`SETTINGS_REFUSED`), honoured by Scrapy
    when raised from the scheduler's ``open`` or a ``spider_opened`` handler, and turned into
    ``NotConfigured`` in a component's ``from_crawler`` (:func:`off_when_refused`)."""

    def __init__(self, error: config.SettingError) -> None:
        super().__init__(SETTINGS_REFUSED)
        self.error = error

    def __str__(self) -> str:
        return str(self.error)


@dataclass(frozen=True)
class JoinSetting:
    """One recorded setting: its name and how its value is read (checked, normalized)."""

    name: str
    read: Callable[[config.SettingsLike], Any]


def _simhash(i: int) -> Callable[[config.SettingsLike], Any]:
    """k (0) or the block count (1) as the index uses them: an unset ``SIMHASH_BLOCKS`` is
    k + 1, so ``-s SIMHASH_BLOCKS=4`` with k = 3 joins a crawl that left it unset."""
    def read(settings: config.SettingsLike) -> Any:
        from crawler.content.simindex import settings_params

        return settings_params(settings)[i]
    return read


def _decider(name: str) -> Callable[[config.SettingsLike], Any]:
    def read(settings: config.SettingsLike) -> Any:
        from crawler.dedup.options import DeciderSettings

        return getattr(DeciderSettings.from_settings(settings), name)
    return read


def _field(factory: str, attr: str) -> Callable[[config.SettingsLike], Any]:
    """``getattr(factory(settings), attr)``: ``factory``, a ``module:qualified.name`` path, is
    the component's own checked reader (imported when first read)."""
    def read(settings: config.SettingsLike) -> Any:
        import importlib

        module, _, qualname = factory.partition(":")
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        return getattr(found(settings), attr)
    return read


def _flag(name: str, default: bool) -> Callable[[config.SettingsLike], Any]:
    return lambda settings: config.get_bool(settings, name, default)


def _strip_params(settings: config.SettingsLike) -> list[str]:
    from crawler.urls.urlnorm import UrlPolicy

    return sorted(set(UrlPolicy.from_settings(settings).strip_params))  # order never matters


#: The port a database URL means when it names none.
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def storage_url(settings: config.SettingsLike) -> str:
    """Which database ``STORAGE_URL`` names (module docstring): backend, user, host, port
    (its default filled in) and database, or a SQLite file's absolute path. No password (a
    rotated one, or one from ``PGPASSWORD``/``.pgpass``, is the same database), no driver and
    no query options (``?sslmode=``): the same database reached another way is the same."""
    from crawler.storage.engine import parse_url

    url = parse_url(str(settings.get("STORAGE_URL") or defaults.STORAGE_URL))
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = url.database or ""
        return f"sqlite:///{os.path.abspath(path) if path not in ('', ':memory:') else path}"
    host = (url.host or "localhost").lower()
    port: int | str = url.port or DEFAULT_PORTS.get(backend) or ""
    user = f"{url.username}@" if url.username else ""
    return f"{backend}://{user}{host}:{port}/{url.database or ''}"


def _queue(settings: config.SettingsLike) -> str:
    return queue_key(settings, SPIDER)


_TRAPS = "crawler.urls.traps:TrapSettings.from_settings"
_BOUNDS = "crawler.urls.pagebounds:PageBounds.from_settings"
_SCOPE = "crawler.urls.scope:ScopeSettings.from_settings"
_BLOOM = "crawler.backends.bloom:BloomSettings.from_settings"

#: Every setting a joining worker must share with its crawl (module docstring), in the order
#: a refusal names them.
JOIN_SETTINGS: tuple[JoinSetting, ...] = (
    JoinSetting("SIMHASH_MAX_DISTANCE", _simhash(0)),
    JoinSetting("SIMHASH_BLOCKS", _simhash(1)),
    JoinSetting("SIMHASH_SHINGLE", _decider("shingle")),
    JoinSetting("SIMHASH_MIN_TOKENS", _decider("min_tokens")),
    JoinSetting("SIMHASH_PERSIST", _decider("persist")),
    JoinSetting("DEDUP_CANONICAL", _decider("prefer_canonical")),
    JoinSetting("DEDUP_SETTLE", _flag("DEDUP_SETTLE", defaults.DEDUP_SETTLE)),
    JoinSetting("URLNORM_STRIP_PARAMS", _strip_params),
    JoinSetting("URLNORM_SORT_QUERY", _flag("URLNORM_SORT_QUERY", defaults.URLNORM_SORT_QUERY)),
    JoinSetting("URLLENGTH_LIMIT", _field(_TRAPS, "max_length")),
    JoinSetting("TRAP_MAX_SEGMENT_REPEAT", _field(_TRAPS, "max_segment_repeat")),
    JoinSetting("TRAP_MAX_PATH_DEPTH", _field(_TRAPS, "max_path_depth")),
    JoinSetting("TRAP_MAX_QUERY_PARAMS", _field(_TRAPS, "max_query_params")),
    JoinSetting("TRAP_FOLLOW_LINKS_OF", _field(_TRAPS, "follow_links_of")),
    JoinSetting("TRAP_DUPLICATE_HOPS", _field(_TRAPS, "duplicate_hops")),
    JoinSetting("TRAP_LEARN_PARAMS_AFTER", _field(_TRAPS, "learn_params_after")),
    JoinSetting("TRAP_HOST_MAX_PAGES", _field(_TRAPS, "host_max_pages")),
    JoinSetting("TRAP_PATH_MAX_QUERY_VARIANTS", _field(_TRAPS, "path_max_query_variants")),
    JoinSetting("TRAP_SOFT404_PROBE", _field(_TRAPS, "soft404_probe")),
    JoinSetting("SCOPE", _field(_SCOPE, "rule")),
    JoinSetting("BLOCK_PRIVATE_ADDRESSES", _field(_SCOPE, "block_private")),
    JoinSetting("LINKS_PER_PAGE_MAX", _field(_BOUNDS, "links_max")),
    JoinSetting("PAGE_MAX_PARSE_CHARS", _field(_BOUNDS, "parse_chars")),
    JoinSetting("DEPTH_LIMIT", lambda s: config.get_int(s, "DEPTH_LIMIT", 0, lo=0)),
    JoinSetting("ROBOTSTXT_OBEY", _flag("ROBOTSTXT_OBEY", True)),
    JoinSetting("BLOOM_CAPACITY", _field(_BLOOM, "capacity")),
    JoinSetting("BLOOM_ERROR_RATE", _field(_BLOOM, "error_rate")),
    JoinSetting("BLOOM_ON_FULL", _field(_BLOOM, "on_full")),
    JoinSetting("STORAGE_URL", storage_url),
    JoinSetting("SCHEDULER_QUEUE_KEY", _queue),
)


def record(settings: config.SettingsLike) -> dict[str, Any]:
    """This worker's values of :data:`JOIN_SETTINGS` (as JSON gives them back: lists, not
    tuples). Raises :class:`~crawler.config.SettingError` for a value no component accepts."""
    return json.loads(json.dumps({s.name: s.read(settings) for s in JOIN_SETTINGS}))


def differences(mine: dict[str, Any], crawl: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(name, this worker's value, the crawl's)`` of each setting recorded on both sides
    whose values differ, in :data:`JOIN_SETTINGS` order. A block count that is k + 1 on both
    sides (the default) is not named when k differs: only k does."""
    out = [(s.name, mine[s.name], crawl[s.name]) for s in JOIN_SETTINGS
           if s.name in mine and s.name in crawl and mine[s.name] != crawl[s.name]]
    if all(_default_blocks(side) for side in (mine, crawl)):
        out = [d for d in out if d[0] != "SIMHASH_BLOCKS"]
    return out


def _default_blocks(record: dict[str, Any]) -> bool:
    k, blocks = record.get("SIMHASH_MAX_DISTANCE"), record.get("SIMHASH_BLOCKS")
    return blocks is None or (isinstance(k, int) and blocks == k + 1)


def shown_value(value: Any) -> str:
    """A recorded value as a refusal prints it: lists comma-separated, None as ``auto``."""
    if value is None:
        return "auto"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return str(value)


@dataclass(frozen=True)
class QueueSettings:
    """The frontier's key (``SCHEDULER_QUEUE_KEY`` filled in by
    :func:`~crawler.backends.common.queue_key`) and, with a shared scheduler (the distributed
    profile), ``SCHEDULER_PERSIST`` (True only) and ``SCHEDULER_FLUSH_ON_START`` (False only):
    the workers share the queue and the seen set, and a worker never deletes them. Both are
    None (not read) without a shared scheduler."""

    queue_key: str
    persist: bool | None = None
    flush_on_start: bool | None = None

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> QueueSettings:
        """Read and check them (:class:`~crawler.config.SettingError`)."""
        from crawler.cluster.worker import shared_scheduler

        key = queue_key(settings, SPIDER)
        if not hasattr(settings, "getwithbase") or not shared_scheduler(settings):
            return cls(key)
        why = ("the distributed profile's workers share the queue and the seen set, and a "
               "worker never deletes them; clear a finished crawl with scrapy crawlclear")
        if not config.get_bool(settings, "SCHEDULER_PERSIST", True):
            raise config.SettingError("SCHEDULER_PERSIST", settings.get("SCHEDULER_PERSIST"),
                                      f"True only ({why})")
        if config.get_bool(settings, "SCHEDULER_FLUSH_ON_START", False):
            raise config.SettingError("SCHEDULER_FLUSH_ON_START",
                                      settings.get("SCHEDULER_FLUSH_ON_START"),
                                      f"False only ({why})")
        return cls(key, True, False)


class JoinRecord(RedisBacked):
    """The ``settings`` field of one namespace's ``{base}:meta`` (module docstring)."""

    def __init__(self, client: redis.Redis, base: str, url: str = "") -> None:
        super().__init__(client, base, url)
        self.meta_key = f"{base}:meta"
        self._claim = client.register_script(_CLAIM)

    def crawl(self) -> dict[str, Any] | None:
        """The crawl's record, None before its first worker wrote one (reads only)."""
        return _parse(self._call("hget", self.meta_key, FIELD))

    def claim(self, mine: dict[str, Any]) -> dict[str, Any]:
        """Write ``mine`` unless a record exists (one atomic step); the crawl's record."""
        raw = self._run(self._claim, [self.meta_key], [json.dumps(mine, sort_keys=True)])
        return _parse(raw) or mine

    def check(self, settings: config.SettingsLike, write: bool = True) -> None:
        """Raise :class:`JoinRefused` when ``settings`` differ from the crawl's record;
        ``write``: record them when the crawl has none yet (else only read)."""
        QueueSettings.from_settings(settings)
        mine = record(settings)
        crawl = self.claim(mine) if write else self.crawl()
        diffs = differences(mine, crawl) if crawl is not None else []
        if diffs:
            raise JoinRefused(self.base, diffs)


def _parse(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None  # not ours to judge: a record we cannot read compares as absent
    return value if isinstance(value, dict) else None


def check_join(settings: config.SettingsLike, write: bool = True) -> None:
    """Pre-flight: connect to ``REDIS_URL`` and :meth:`JoinRecord.check` (``write=False``
    first, before the storage check, so a refused worker touches nothing)."""
    from crawler.backends.common import redis_url, retry_policy
    from crawler.backends.redis import connect

    url = redis_url(settings)
    policy = retry_policy(settings)
    client = connect(url, policy.timeout)
    joined = JoinRecord(client, namespace(settings), url)
    joined.retrying(policy)
    try:
        joined.check(settings, write)
    finally:
        client.close()


#: crawler -> the refusal of its join, so every component that asks gets the same answer.
_refused: weakref.WeakKeyDictionary[Any, CrawlRefused] = weakref.WeakKeyDictionary()


def join_crawler(crawler: Crawler, client: redis.Redis, url: str, retry: Any = None) -> None:
    """The join check of a worker's crawler, before its membership starts (module docstring):
    the first refusal logs one ERROR line and is kept; every call raises it again, as
    :class:`CrawlRefused`."""
    refused = _refused.get(crawler)
    if refused is None:
        joined = JoinRecord(client, namespace(crawler.settings), url)
        if retry is not None:
            joined.retrying(retry)
        try:
            joined.check(crawler.settings)
            return
        except config.SettingError as exc:
            refused = _refused[crawler] = CrawlRefused(exc)
            logger.error("%s. Closing the spider (%s)", exc, SETTINGS_REFUSED)
    raise refused


def refused(crawler: Crawler | None) -> bool:
    """Whether this crawler's join was refused (:func:`join_crawler`)."""
    return crawler is not None and crawler in _refused


@contextmanager
def off_when_refused(crawler: Crawler) -> Iterator[None]:
    """Around what a component's ``from_crawler`` asks of the membership: a refused join (logged
    once already) turns the component off (``NotConfigured``, silent) instead of a traceback;
    the scheduler then ends the crawl before it opens
    (:class:`crawler.cluster.scheduler.SharedScheduler`)."""
    try:
        yield
    except CrawlRefused:
        raise NotConfigured from None

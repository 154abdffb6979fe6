"""Seeds from a Redis key, the scrapy-redis way: ``redis-cli lpush web:start_urls URL``.

In the distributed profile a ``web`` worker started with no seeds (no ``-a seeds=``, no
``-a urls=``) takes its seeds from the *start list*, as scrapy-redis's ``RedisSpider`` does:

* **The key** is ``REDIS_START_URLS_KEY`` (placeholders ``%(name)s``, the spider, and
  ``%(namespace)s``, ``DEDUP_NAMESPACE``). Unset, it is scrapy-redis's ``web:start_urls`` in
  the default namespace (``DEDUP_NAMESPACE`` unset: ``BOT_NAME``) and ``{DEDUP_NAMESPACE}:web:
  start_urls`` in any other, so two crawls on one Redis never take each other's seeds while a
  scrapy-redis user types what they always typed. A waiting worker prints the exact command.
* **Any key type**: a list (popped from its head: ``lpush`` then reads last-pushed first, as
  scrapy-redis's ``LRANGE``/``LTRIM``), a set (``SPOP``) or a sorted set (highest score first),
  read by its type, so ``REDIS_START_URLS_AS_SET`` / ``_AS_ZSET`` are not needed. An entry is
  a URL or scrapy-redis's JSON form ``{"url": ...}`` (other fields ignored). Up to
  ``REDIS_START_URLS_BATCH_SIZE`` entries are taken per idle poll of the worker.
* **Checked like a seeds-file line** (:func:`crawler.urls.seeds.parse_seeds`; an entry over
  :data:`crawler.urls.seeds.LINE_MAX_BYTES` refused unread): a bad one is skipped with one WARNING
  line naming it (``dedup/start_urls/invalid``); the crawl goes on.
* **Lossless, fetched once**: one Lua call moves a batch from the key into this worker's
  *taken* list ``{base}:start_urls:taken:{worker}`` (and the worker into
  ``{base}:start_urls:holders``); each seed then goes the way of every request, the seen set
  and the queue in one atomic step (:class:`crawler.cluster.scheduler.SharedScheduler`),
  and only then leaves the taken list. A worker killed in between leaves its taken list; the
  next poll of any live worker moves a dead holder's entries (its membership expired or gone,
  :mod:`crawler.cluster.worker`) into its own and queues them: a seed queued twice is
  found in the seen set, so however many workers take it, it is fetched once.
* **The scope is the crawl's**: an accepted seed's canonical URL joins ``{base}:seeds`` (a set,
  and the list ``{base}:seeds:log`` in arrival order) before it is queued; every worker adds
  the seeds it has not seen yet to its :class:`~crawler.urls.scope.Scope` (at each idle poll, and
  before downloading a request whose site it does not know:
  :class:`crawler.middlewares.sharedscope.SharedScopeMiddleware`), so the worker that gets a
  seed's host follows its links like the one that took the seed. Workers started with seeds
  add theirs too.
* **Waiting**: a seedless worker stays open while the namespace's crawl has never queued a
  request (the frontier's ``seq``), polling the key every idle poll (``POLL_SECONDS``), with one
  INFO line ``waiting for seeds: redis-cli lpush KEY URL`` at once and again every
  :data:`WAIT_LOG_SECONDS`; ``DISTRIBUTED_SEED_WAIT_SECONDS`` > 0 bounds the wait (then it
  closes ``no_seeds``, exit 0). A crawl that has run closes as before once nothing is queued,
  leased or taken; seeds pushed to a finished namespace need a new crawl (docs/scale-out.md).
  A worker started with seeds, in a crawl a seedless worker fed from its start list, takes
  what the list still holds before it reads the crawl as done (:meth:`StartListFeeder.joining`):
  else it could mark the crawl finished while seeds wait in the list.
  scrapy-redis's spiders idle for ever instead (``MAX_IDLE_TIME_BEFORE_CLOSE`` = 0).

Stats: ``dedup/start_urls/taken`` (entries taken from the key, recovered ones included),
``dedup/start_urls/invalid``, ``dedup/start_urls/recovered`` (taken from a dead worker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler import config, defaults
from crawler.backends.common import RedisBacked, namespace, text
from crawler.urls.seeds import LINE_MAX_BYTES, LongLine, SeedError, Seeds, parse_seeds

#: ``{base}:meta`` field set once a seedless worker fed the crawl from its start list.
IN_USE = "start_list"

if TYPE_CHECKING:
    import redis
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

WAIT_LOG_SECONDS = 600.0  # a waiting worker repeats its INFO line this often
NO_SEEDS = "no_seeds"  # finish reason: DISTRIBUTED_SEED_WAIT_SECONDS passed with no seed
SCRAPY_REDIS_KEY = "%(name)s:start_urls"  # scrapy-redis's REDIS_START_URLS_KEY
BATCH_MAX = 1000  # REDIS_START_URLS_BATCH_SIZE at most (one Lua call's arguments)

# KEYS: start key, holders, workers, my taken list. ARGV: worker, batch, taken-list prefix.
# Dead holders' entries move to mine first; then the key (list, set or zset) fills mine up to
# the batch. Returns {1, recovered, entry...} or {-1, type} for a key of another type.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, n, mine = ARGV[1], tonumber(ARGV[2]), KEYS[4]
local recovered = 0
for _, w in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local exp = redis.call('ZSCORE', KEYS[3], w)
  if w ~= me and (not exp or tonumber(exp) < now) then
    for _, e in ipairs(redis.call('LRANGE', ARGV[3] .. w, 0, -1)) do
      redis.call('RPUSH', mine, e)
      recovered = recovered + 1
    end
    redis.call('DEL', ARGV[3] .. w)
    redis.call('SREM', KEYS[2], w)
  end
end
local want = n - redis.call('LLEN', mine)
if want > 0 then
  local kind = redis.call('TYPE', KEYS[1])['ok']
  local got = {}
  if kind == 'list' then
    got = redis.call('LRANGE', KEYS[1], 0, want - 1)
    redis.call('LTRIM', KEYS[1], #got, -1)
  elseif kind == 'set' then
    got = redis.call('SPOP', KEYS[1], want)
  elseif kind == 'zset' then
    local pairs = redis.call('ZPOPMAX', KEYS[1], want)
    for i = 1, #pairs, 2 do got[#got + 1] = pairs[i] end
  elseif kind ~= 'none' then
    return {-1, kind}
  end
  if #got > 0 then redis.call('RPUSH', mine, unpack(got)) end
end
if redis.call('LLEN', mine) > 0 then redis.call('SADD', KEYS[2], me) end
local out = {1, recovered}
for _, e in ipairs(redis.call('LRANGE', mine, 0, n - 1)) do out[#out + 1] = e end
return out
"""

# KEYS: my taken list, holders. ARGV: worker, entries done (queued, found seen, or refused).
_DONE = """
for i = 2, #ARGV do redis.call('LREM', KEYS[1], 1, ARGV[i]) end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 1
"""

# KEYS: seeds set, seeds log. ARGV: canonical URLs. New ones are appended to the log.
_PUBLISH = """
for i = 1, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[i]) end
end
return redis.call('LLEN', KEYS[2])
"""


def start_key(settings: config.SettingsLike, spider: str) -> str:
    """The start list's key (module docstring): ``REDIS_START_URLS_KEY`` with ``%(name)s`` and
    ``%(namespace)s`` filled in; unset, ``web:start_urls`` in the default namespace and
    ``{namespace}:web:start_urls`` in any other."""
    bot = str(settings.get("BOT_NAME") or defaults.BOT_NAME)
    ns = str(settings.get("DEDUP_NAMESPACE") or bot)
    raw = settings.get("REDIS_START_URLS_KEY", defaults.REDIS_START_URLS_KEY)
    if not raw:
        raw = SCRAPY_REDIS_KEY if ns == bot else "%(namespace)s:" + SCRAPY_REDIS_KEY
    try:
        key = str(raw) % {"name": spider, "namespace": ns}
    except (KeyError, ValueError, TypeError):
        raise config.SettingError("REDIS_START_URLS_KEY", raw,
                                  "a key name; placeholders %(name)s and %(namespace)s") from None
    if not key.strip():
        raise config.SettingError("REDIS_START_URLS_KEY", raw, "a non-empty key name")
    return key


def takes_start_list(settings: config.SettingsLike) -> bool:
    """Whether a seedless ``web`` worker reads the start list: the distributed profile (the
    Redis backend and a shared scheduler)."""
    from crawler.backends import backend_name
    from crawler.cluster.worker import shared_scheduler

    return backend_name(settings) == "redis" and shared_scheduler(settings)


@dataclass(frozen=True)
class StartListSettings:
    """The start list of the ``web`` spider: its ``key`` (:func:`start_key`), entries taken
    per poll (``REDIS_START_URLS_BATCH_SIZE``) and how long a seedless worker waits for it
    (``DISTRIBUTED_SEED_WAIT_SECONDS``)."""

    key: str
    batch_size: int = defaults.REDIS_START_URLS_BATCH_SIZE
    wait_seconds: float = defaults.DISTRIBUTED_SEED_WAIT_SECONDS

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> StartListSettings:
        """Read and check them (SettingError)."""
        return cls(
            start_key(settings, "web"),
            config.get_int(settings, "REDIS_START_URLS_BATCH_SIZE",
                           defaults.REDIS_START_URLS_BATCH_SIZE, lo=1, hi=BATCH_MAX),
            config.get_float(settings, "DISTRIBUTED_SEED_WAIT_SECONDS",
                             defaults.DISTRIBUTED_SEED_WAIT_SECONDS, lo=0.0,
                             hi=10 * 365 * 86400.0),
        )  # fmt: skip


def entry_seed(entry: bytes | str, max_length: int = 0) -> Seeds | str:
    """The seed of one start-list entry (a URL, or scrapy-redis's JSON ``{"url": ...}``), or
    what is wrong with it, in one line naming it."""
    raw = entry if isinstance(entry, bytes) else entry.encode()
    line: str | LongLine
    if len(raw) > LINE_MAX_BYTES:
        line = LongLine(raw[:200], len(raw))
    else:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError, KeyError, TypeError):  # else: refused as a URL
                line = str(json.loads(line)["url"])
    try:
        return parse_seeds([line], source="", max_length=max_length)
    except SeedError as exc:
        problem = exc.problems[0].removeprefix("line 1: ")
        return problem if isinstance(line, LongLine) or line else f"{problem} (an empty entry)"


def redis_cli(url: str) -> str:
    """``redis-cli`` with the options that reach ``url``'s server and database (never its
    password: ``--askpass`` asks for it)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    words = ["redis-cli"]
    try:
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    except ValueError:
        return "redis-cli"
    if host not in ("127.0.0.1", "localhost"):
        words += ["-h", host]
    if port != 6379:
        words += ["-p", str(port)]
    db = parts.path.strip("/") or "0"
    if db != "0":
        words += ["-n", db]
    if parts.scheme == "rediss":
        words.append("--tls")
    if parts.password:
        words.append("--askpass")
    return " ".join(words)


class StartList(RedisBacked):
    """The start list's Redis side (module docstring): take, done, and the shared seeds."""

    def __init__(self, client: redis.Redis, base: str, key: str, worker: str,
                 workers_key: str, url: str = "") -> None:  # fmt: skip
        super().__init__(client, base, url)
        self.key, self.worker, self.workers_key = key, worker, workers_key
        self.taken_prefix = f"{base}:start_urls:taken:"
        self.holders = f"{base}:start_urls:holders"
        self.seeds_key, self.log_key = f"{base}:seeds", f"{base}:seeds:log"
        self.seen_log = 0  # entries of the seeds log already added to this worker's scope
        self._take = client.register_script(_TAKE)
        self._done = client.register_script(_DONE)
        self._publish = client.register_script(_PUBLISH)

    @property
    def mine(self) -> str:
        return self.taken_prefix + self.worker

    def take(self, n: int) -> tuple[list[bytes], int]:
        """Up to ``n`` entries this worker holds (taken from the key, or from a dead holder):
        ``(entries, how many were recovered)``. Safe to run twice: what a lost reply took is
        in the taken list, returned by the next call. Raises ValueError for a key of another
        type."""
        out = self._run(self._take, [self.key, self.holders, self.workers_key, self.mine],
                        [self.worker, n, self.taken_prefix])  # fmt: skip
        if int(out[0]) < 0:
            kind = text(out[1])
            raise ValueError(f"Redis key {self.key} is a {kind}, not a list or set of URLs")
        return list(out[2:]), int(out[1])

    def done(self, entries: list[bytes]) -> None:
        """``entries`` are queued (or seen, or refused): out of the taken list."""
        if entries:
            self._run(self._done, [self.mine, self.holders], [self.worker, *entries])

    def pending(self) -> bool:
        """Whether any worker holds taken entries not yet queued."""
        return bool(self._call("scard", self.holders))

    def publish(self, canonical: list[str]) -> None:
        """Add seeds' canonical URLs to the crawl's shared seeds."""
        for start in range(0, len(canonical), BATCH_MAX):
            chunk = canonical[start:start + BATCH_MAX]
            self._run(self._publish, [self.seeds_key, self.log_key], chunk)

    def new_seeds(self) -> list[str]:
        """The shared seeds this worker has not read yet (in arrival order)."""
        got = self._call("lrange", self.log_key, self.seen_log, -1)
        self.seen_log += len(got)
        return [text(g) for g in got]


def start_list(crawler: Crawler) -> StartList:
    """This crawler's :class:`StartList` (one per crawler), on its membership's client."""
    from crawler.cluster.worker import member

    found = getattr(crawler, "_dedup_start_list", None)
    if found is None:
        me = member(crawler)
        name = crawler.spider.name if crawler.spider is not None else "web"
        found = StartList(me.client, namespace(crawler.settings),
                          start_key(crawler.settings, name), me.id, me.workers_key, me.url)
        if me.retry is not None:
            found.retrying(me.retry)
        crawler._dedup_start_list = found  # type: ignore[attr-defined]
    return found


def share_scope(crawler: Crawler) -> int:
    """Add the crawl's shared seeds this worker has not seen to its spider's scope
    (``spider.widen``); how many were added."""
    spider = crawler.spider
    widen = getattr(spider, "widen", None)
    if widen is None:
        return 0
    new = start_list(crawler).new_seeds()
    return int(widen(new)) if new else 0


class StartListFeeder:
    """A seedless worker's side (module docstring): feeds the start list into the crawl at
    each idle poll and says whether the worker must stay open for it."""

    def __init__(self, crawler: Crawler, frontier_key: str) -> None:
        from crawler.urls.traps import TrapSettings

        settings = crawler.settings
        self.crawler = crawler
        self.list = start_list(crawler)
        self.frontier_meta = f"{frontier_key}:meta"
        options = StartListSettings.from_settings(settings)
        self.batch = options.batch_size
        self.wait = options.wait_seconds
        self.max_length = TrapSettings.from_settings(settings).max_length
        self.since = time.monotonic()
        self.logged_at: float | None = None
        self.ran = False
        self.broken = False  # the key has another type: said once, not read again

    @classmethod
    def of(cls, crawler: Crawler, frontier_key: str) -> StartListFeeder | None:
        """The feeder of a worker whose spider started with no seeds and takes them
        (``spider.reads_start_list``; it marks the crawl as one fed by its start list:
        ``{base}:meta`` field ``start_list``), else None."""
        if not getattr(crawler.spider, "reads_start_list", False):
            return None
        feeder = cls(crawler, frontier_key)
        feeder.list._call("hset", f"{feeder.list.base}:meta", IN_USE, 1)
        return feeder

    @classmethod
    def joining(cls, crawler: Crawler, frontier_key: str) -> StartListFeeder | None:
        """A feeder for a worker started with seeds whose crawl turns out to be fed by its
        start list (a seedless worker marked it): before such a worker reads the crawl as done
        it takes what the list still holds, as the seedless ones would; else None."""
        found = start_list(crawler)
        if not found._call("hget", f"{found.base}:meta", IN_USE):
            return None
        return cls(crawler, frontier_key)

    def holds(self, work: int) -> bool:
        """Feed a batch; whether the worker must stay open although the frontier holds
        ``work`` = 0 requests (seeds just queued or held by a worker, or none ever came).
        Raises RedisBackendError."""
        fed = self.feed()
        share_scope(self.crawler)
        if fed or work:
            return bool(fed)
        if self.list.pending():
            return True
        if self.ran or int(self.list.client.hget(self.frontier_meta, "seq") or 0):
            self.ran = True
            return False
        return self._waiting()

    def feed(self) -> int:
        """Take a batch and queue its seeds; how many entries were taken."""
        if self.broken:
            return 0
        try:
            entries, recovered = self.list.take(self.batch)
        except ValueError as exc:
            self.broken = True
            logger.error("%s: the start list is not read (push URLs to a list)", exc)
            return 0
        if not entries:
            return 0
        self._inc("dedup/start_urls/taken", len(entries))
        self._inc("dedup/start_urls/recovered", recovered)
        seeds = self._seeds(entries)
        if seeds.urls:
            self.list.publish(seeds.canonical)
            for request in self.crawler.spider.add_seeds(seeds):  # type: ignore[union-attr]
                self._crawl(request)
        if not self._redis_down():  # else the seeds stay taken: another worker queues them
            self.list.done(entries)
            self.ran = self.ran or bool(seeds.urls)
        return len(entries)

    def _seeds(self, entries: list[bytes]) -> Seeds:
        seeds = Seeds()
        for entry in entries:
            found = entry_seed(entry, self.max_length)
            if isinstance(found, str):
                self._inc("dedup/start_urls/invalid")
                logger.warning("Skipped a seed from Redis key %s: %s", self.list.key, found,
                               extra={"spider": self.crawler.spider})  # fmt: skip
                continue
            seeds.urls += found.urls
            seeds.canonical += found.canonical
        return seeds

    def _crawl(self, request: Request) -> None:
        engine = self.crawler.engine
        if engine is not None:
            engine.crawl(request)  # request_scheduled, then the seen set and queue: one step

    def _redis_down(self) -> bool:
        from crawler.dupefilter import seen_guard_of

        guard = seen_guard_of(self.crawler)
        return guard is not None and guard.down

    def _waiting(self) -> bool:
        now = time.monotonic()
        if self.wait and now - self.since > self.wait:
            from crawler.closing import close_crawl

            logger.info("No seed came to Redis key %s in DISTRIBUTED_SEED_WAIT_SECONDS=%g s; "
                        "closing (%s)", self.list.key, self.wait, NO_SEEDS)  # fmt: skip
            close_crawl(self.crawler, NO_SEEDS)
            return True
        if self.logged_at is None or now - self.logged_at >= WAIT_LOG_SECONDS:
            self.logged_at = now
            logger.info("waiting for seeds: %s lpush %s URL", redis_cli(self.list.url),
                        self.list.key, extra={"spider": self.crawler.spider})  # fmt: skip
        return True

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None and count:
            self.crawler.stats.inc_value(key, count)


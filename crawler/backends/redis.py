"""Redis backends of the distributed profile: a shared Bloom seen set and a shared content index.

Every key starts with ``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}`` (namespace default ``BOT_NAME``),
so crawls on one server stay apart; :func:`clear_namespace` deletes one. Each decision is one Lua
script, so N crawler processes on one server see one set and never both keep a duplicate pair.
Scripts touch keys they compute from their base name: a single Redis server (no Cluster).
Nothing is pickled: entries are JSON written by the scripts (``cjson``).

**Seen set** (:class:`RedisSeenSet`), keys under ``{base}:bloom``:

* ``{base}:bloom`` hash: the layer specs (``m{i}``, ``k{i}``, ``c{i}`` from
  :func:`crawler.bloom.bloom_size`, the same capacities and tightened rates as the local
  filter), ``active`` layers, ``n{i}`` keys per layer, ``count``, ``config`` (JSON of n, p);
* ``{base}:bloom:{layer}:{shard}`` strings of bits, 2**31 bits (256 MiB) each, under the
  512 MiB string limit.

Bit indexes come from the 16-byte fingerprint inside Lua by double hashing on two 48-bit
halves (bytes 0-5 and 6-11), ``(h1 + i * h2) mod m``: exact in Lua's doubles for any m < 2**48.

**Content index** (:class:`RedisContentIndex`), keys under ``{base}:ci``: ``:meta`` hash (k,
blocks, seq, count), ``:e`` hash id -> JSON entry ``{"u", "c", "h", "f", "b"}`` (URL, canonical
URL, content hash, SimHash as 16 hex digits or "", block keys), ``:x`` hash content hash -> id,
``:c`` hash canonical URL -> id, ``:b:{table}:{block hex}`` sets of ``"{id}:{fp hex}"``. Decisions
are those of :class:`crawler.backends.local.LocalContentIndex` (same rules, same ties: ids are
increasing), except that content hashes are compared in full. The layout may change between
versions; a namespace written with another k or block count is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from crawler import bloom, config, defaults
from crawler.backends.local import Match, PageSignature, Record
from crawler.simindex import block_layout, settings_params

logger = logging.getLogger(__name__)

SHARD_BITS = 2**31
MAX_LAYERS = 8  # 2**7 x BLOOM_CAPACITY keys; keeps every m far below the 2**48 index limit
LOAD_BATCH = 500


class RedisBackendError(ConnectionError):
    """Redis cannot be reached or failed a command; names the (masked) URL and what to check."""

    def __init__(self, url: str, error: Exception) -> None:
        self.url = mask_url(url)
        super().__init__(
            f"Redis at {self.url} is unavailable ({type(error).__name__}: {error}); check that "
            "redis-server is running and reachable from this host, and the REDIS_URL setting "
            "(or the DEDUP_REDIS_URL environment variable of settings.distributed)"
        )


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unparsable REDIS_URL>"


def connect(url: str) -> redis.Redis:
    """A client for ``url``, pinged once; raises :class:`RedisBackendError`."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise RedisBackendError(url, exc) from None
    return client


def check_redis(settings: config.SettingsLike) -> None:
    """Before a crawl: Redis reachable, and the namespace's seen set and content index built
    with these settings (creating them when new). Raises RedisBackendError or SettingError."""
    RedisSeenSet.from_settings(settings).close()
    RedisContentIndex.from_settings(settings).close()


def _namespace_mismatch(name: str, value: object, stored: object, base: str) -> Exception:
    return config.SettingError(
        name,
        value,
        f"{stored!r}, the value {base} in Redis was built with (or set another DEDUP_NAMESPACE, "
        "or delete that namespace's keys)",
    )


def namespace(settings: config.SettingsLike) -> str:
    """``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE or BOT_NAME}``."""
    prefix = str(settings.get("REDIS_KEY_PREFIX") or defaults.REDIS_KEY_PREFIX)
    ns = (
        settings.get("DEDUP_NAMESPACE", defaults.DEDUP_NAMESPACE)
        or settings.get("BOT_NAME")
        or defaults.BOT_NAME
    )
    return f"{prefix}:{ns}"


def clear_namespace(client: redis.Redis, base: str) -> int:
    """Delete every key under ``base`` (SCAN, never KEYS); returns how many."""
    deleted = 0
    for batch in _chunks(client.scan_iter(match=f"{_glob_escape(base)}:*", count=1000), 500):
        deleted += client.delete(*batch)
    return deleted


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


class _RedisBacked:
    """Shared plumbing: the client, its URL for errors, and wrapped script calls."""

    def __init__(self, client: redis.Redis, base: str, url: str) -> None:
        self.client = client
        self.base = base
        self.url = url

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return script(keys=keys, args=args)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise RedisBackendError(self.url, exc) from None

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, name)(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise RedisBackendError(self.url, exc) from None

    def close(self) -> None:
        self.client.close()


# --- the seen set -------------------------------------------------------------------------------

#: ``bloom_check(meta, fp, mode, grow, shard_bits) -> present, count``: test (``mode`` "test")
#: or test-and-set (``"add"``) one 16-byte fingerprint. A Lua function so that other scripts (the
#: frontier's push) can record a URL as seen and queue it in one atomic step.
BLOOM_FN = """
local function bloom_check(meta, fp, mode, grow, shard_bits)
  local function b48(s, off)
    local v = 0
    for j = off, off + 5 do v = v * 256 + string.byte(s, j) end
    return v
  end
  local h1, h2 = b48(fp, 1), b48(fp, 7)
  local active = tonumber(redis.call('HGET', meta, 'active'))
  for l = 0, active - 1 do
    local spec = redis.call('HMGET', meta, 'm' .. l, 'k' .. l)
    local m, k = tonumber(spec[1]), tonumber(spec[2])
    local set = (l == active - 1) and mode == 'add'
    local step, idx, all = h2 % m, h1 % m, true
    if step == 0 then step = 1 end
    for i = 1, k do
      local key = meta .. ':' .. l .. ':' .. math.floor(idx / shard_bits)
      local off = idx % shard_bits
      if set then
        if redis.call('SETBIT', key, off, 1) == 0 then all = false end
      elseif redis.call('GETBIT', key, off) == 0 then
        all = false
        break
      end
      idx = (idx + step) % m
    end
    if all then return 1, tonumber(redis.call('HGET', meta, 'count')) end
  end
  if mode ~= 'add' then return 0, tonumber(redis.call('HGET', meta, 'count')) end
  local top = active - 1
  local n = redis.call('HINCRBY', meta, 'n' .. top, 1)
  local count = redis.call('HINCRBY', meta, 'count', 1)
  if grow and n >= tonumber(redis.call('HGET', meta, 'c' .. top)) and active < MAXL then
    redis.call('HSET', meta, 'active', active + 1)
  end
  return 0, count
end
""".replace("MAXL", str(MAX_LAYERS))

_BLOOM_LUA = BLOOM_FN + """
local present, count = bloom_check(KEYS[1], ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4]))
return {present, count}
"""


class RedisSeenSet(_RedisBacked):
    """Bloom-filter seen set in Redis, shared by every process of one namespace.

    Same protocol and figures as :class:`crawler.bloom.LocalSeenSet`: ``add`` is an atomic
    test-and-set (one Lua script); ``BLOOM_ON_FULL="grow"`` adds layers in Redis (up to 8),
    ``"stop"`` sets :attr:`full`. ``BLOOM_VERIFY`` is not available here (it is a local disk
    set); the rate of the Redis filter is the configured p.
    """

    def __init__(
        self,
        client: redis.Redis,
        base: str,
        capacity: int = defaults.BLOOM_CAPACITY,
        error_rate: float = defaults.BLOOM_ERROR_RATE,
        on_full: str = "grow",
        url: str = "",
        shard_bits: int = SHARD_BITS,
    ) -> None:
        super().__init__(client, base + ":bloom", url)
        self.capacity, self.error_rate, self.on_full = capacity, error_rate, on_full
        self.shard_bits = shard_bits
        self.full = False
        self.false_positives_avoided = 0
        self._warn_at = [math.ceil(f * capacity) for f in bloom.WARN_FRACTIONS]
        self._script = client.register_script(_BLOOM_LUA)
        self._create_or_check()

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RedisSeenSet:
        """From ``REDIS_URL``, the namespace and the Bloom settings; ``capacity=``,
        ``error_rate=``, ``on_full=``, ``shard_bits=`` override; other keywords are unused."""
        options = bloom.read_settings(settings)
        if options.pop("verify"):
            logger.warning("BLOOM_VERIFY is not available with DEDUP_BACKEND=redis: ignored")
        url = str(settings.get("REDIS_URL") or defaults.REDIS_URL)
        wanted = ("capacity", "error_rate", "on_full", "shard_bits")
        options.update({k: v for k, v in kwargs.items() if k in wanted})
        return cls(connect(url), namespace(settings), url=url, **options)

    def _layer_specs(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        capacity = self.capacity
        for i in range(MAX_LAYERS):
            rate = (
                self.error_rate
                if self.on_full == "stop"
                else (self.error_rate * (1 - bloom.TIGHTEN) * bloom.TIGHTEN**i)
            )
            m, k = bloom.bloom_size(capacity, rate)
            fields.update({f"m{i}": m, f"k{i}": k, f"c{i}": capacity, f"n{i}": 0})
            capacity *= bloom.GROWTH
        return fields

    def _create_or_check(self) -> None:
        wanted = json.dumps(
            {
                "capacity": self.capacity,
                "error_rate": self.error_rate,
                "on_full": self.on_full,
                "shard_bits": self.shard_bits,
            },
            sort_keys=True,
        )
        if self._call("hsetnx", self.base, "config", wanted):
            self._call("hset", self.base, mapping={**self._layer_specs(), "active": 1, "count": 0})
            logger.info(
                "%s in Redis (%s)", bloom.describe(self.capacity, self.error_rate), self.base
            )
            return
        stored = json.loads(self._call("hget", self.base, "config"))
        names = {"capacity": "BLOOM_CAPACITY", "error_rate": "BLOOM_ERROR_RATE",
                 "on_full": "BLOOM_ON_FULL", "shard_bits": "shard_bits"}  # fmt: skip
        for field, name in names.items():
            if stored.get(field) != getattr(self, field):
                raise _namespace_mismatch(name, getattr(self, field), stored.get(field), self.base)

    # --- the SeenSet protocol -------------------------------------------------------------
    def add(self, key: bytes) -> bool:
        present, count = self._run(
            self._script,
            [self.base],
            [_fp16(key), "add", int(self.on_full == "grow"), self.shard_bits],
        )
        return self.added(present, count)

    def add_args(self, key: bytes) -> list[Any]:
        """``ARGV`` of :data:`BLOOM_FN`'s ``bloom_check`` in another script (fp, grow, shard
        bits; the meta key is :attr:`base`); pass the script's answer to :meth:`added`."""
        return [_fp16(key), int(self.on_full == "grow"), self.shard_bits]

    def added(self, present: Any, count: Any) -> bool:
        """Bookkeeping after a test-and-set done in a script: capacity warnings, ``full``."""
        if not present and self._warn_at and int(count) >= self._warn_at[0]:
            self._on_threshold(int(count))
        return bool(present)

    def __contains__(self, key: bytes) -> bool:
        present, _ = self._run(self._script, [self.base], [_fp16(key), "test", 0, self.shard_bits])
        return bool(present)

    def __len__(self) -> int:
        return int(self._call("hget", self.base, "count") or 0)

    def clear(self) -> None:
        """Empty the shared filter (scrapy-redis ``flush`` without ``SCHEDULER_PERSIST``)."""
        self._call("delete", self.base)
        clear_namespace(self.client, self.base)
        self._create_or_check()

    # --- figures --------------------------------------------------------------------------
    def _layers(self) -> list[tuple[int, int, int]]:
        """``(m, k, count)`` of each active layer."""
        active = int(self._call("hget", self.base, "active"))
        names = [f"{c}{i}" for i in range(active) for c in "mkn"]
        values = [int(v) for v in self._call("hmget", self.base, names)]
        return [tuple(values[3 * i : 3 * i + 3]) for i in range(active)]  # type: ignore[misc]

    @property
    def bits(self) -> int:
        return sum(m for m, _, _ in self._layers())

    @property
    def hashes(self) -> int:
        return self._layers()[0][1]

    @property
    def fill_ratio(self) -> float:
        """Fraction of set bits over every layer (BITCOUNT, a few ms per 100 MiB)."""
        layers, set_bits = self._layers(), 0
        for layer, (m, _, _) in enumerate(layers):
            for shard in range((m + self.shard_bits - 1) // self.shard_bits):
                set_bits += self._call("bitcount", f"{self.base}:{layer}:{shard}")
        return set_bits / sum(m for m, _, _ in layers)

    @property
    def expected_false_positive_rate(self) -> float:
        miss = 1.0
        for m, k, n in self._layers():
            miss *= 1.0 - (1.0 - math.exp(-k * n / m)) ** k
        return 1.0 - miss

    def expected_false_positives(self) -> float:
        """Estimated new keys wrongly answered "seen" so far (same estimate as local)."""
        total = 0.0
        for m, k, n in self._layers():
            width = n / 32
            total += sum(
                width * (1.0 - math.exp(-k * (s + 0.5) * width / m)) ** k for s in range(32)
            )
        return total

    def describe(self) -> str:
        return bloom.describe(self.capacity, self.error_rate) + f", shared in Redis {self.base}"

    def _on_threshold(self, count: int) -> None:
        while self._warn_at and count >= self._warn_at[0]:
            self._warn_at.pop(0)
        if count >= self.capacity and self.on_full == "stop":
            self.full = True
        logger.warning(
            "Redis Bloom filter %s holds %d URLs, %d%% of BLOOM_CAPACITY=%d%s",
            self.base,
            count,
            round(100 * count / self.capacity),
            self.capacity,
            "; the crawl stops (BLOOM_ON_FULL=stop)" if self.full else "",
        )


def _fp16(key: bytes) -> bytes:
    """At least 12 uniform bytes for the script (short keys stretched as crawler.bloom does)."""
    if len(key) >= 16:
        return bytes(key[:16])
    return hashlib.blake2b(bytes(key), digest_size=16).digest()


# --- the content index --------------------------------------------------------------------------

_CI_COMMON = """
local function pop32(x)
  x = x - bit.band(bit.rshift(x, 1), 0x55555555)
  x = bit.band(x, 0x33333333) + bit.band(bit.rshift(x, 2), 0x33333333)
  x = bit.band(x + bit.rshift(x, 4), 0x0F0F0F0F)
  x = x + bit.rshift(x, 8)
  x = x + bit.rshift(x, 16)
  return bit.band(x, 0x3F)
end
local function remove(base, id)
  local raw = redis.call('HGET', base .. ':e', id)
  if not raw then return end
  local e = cjson.decode(raw)
  if redis.call('HGET', base .. ':c', e.c) == id then redis.call('HDEL', base .. ':c', e.c) end
  if redis.call('HGET', base .. ':x', e.h) == id then redis.call('HDEL', base .. ':x', e.h) end
  for _, blk in ipairs(e.b) do redis.call('SREM', base .. ':b:' .. blk, id .. ':' .. e.f) end
  redis.call('HDEL', base .. ':e', id)
  redis.call('HINCRBY', base .. ':meta', 'count', -1)
end
local function commit(base, w, c)
  local mine = redis.call('HGET', base .. ':p', c) == w
  if mine then redis.call('HDEL', base .. ':p', c) end
  redis.call('SREM', base .. ':pw:' .. w, c)
  return mine and 1 or 0
end
local function add(base, e)
  local id = tostring(redis.call('HINCRBY', base .. ':meta', 'seq', 1))
  redis.call('HSET', base .. ':e', id, cjson.encode(e))
  redis.call('HSET', base .. ':c', e.c, id)
  redis.call('HSETNX', base .. ':x', e.h, id)
  for _, blk in ipairs(e.b) do redis.call('SADD', base .. ':b:' .. blk, id .. ':' .. e.f) end
  redis.call('HINCRBY', base .. ':meta', 'count', 1)
end
"""

_CHECK_AND_ADD_LUA = (
    _CI_COMMON
    + """
local base, k, me = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local e = {u = ARGV[3], c = ARGV[4], h = ARGV[5], f = ARGV[6], b = {}}
for i = 7, #ARGV do e.b[#e.b + 1] = ARGV[i] end
local function answer(reason, id, d)
  local kept = cjson.decode(redis.call('HGET', base .. ':e', id))
  local owner = redis.call('HGET', base .. ':p', kept.c)
  if owner and owner ~= me then return {'pending', kept.u, kept.f, d, owner} end
  return {reason, kept.u, kept.f, d}
end
local old = redis.call('HGET', base .. ':c', e.c)
local ex = redis.call('HGET', base .. ':x', e.h)
if ex and ex ~= old then return answer('exact_duplicate', ex, 0) end
if e.f ~= '' then
  local qhi, qlo = tonumber(string.sub(e.f, 1, 8), 16), tonumber(string.sub(e.f, 9, 16), 16)
  local best_d, best_id = k + 1, nil
  for _, blk in ipairs(e.b) do
    for _, m in ipairs(redis.call('SMEMBERS', base .. ':b:' .. blk)) do
      local sep = string.find(m, ':', 1, true)
      local id, fp = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
      if id ~= old then
        local d = pop32(bit.bxor(qhi, tonumber(string.sub(fp, 1, 8), 16)))
          + pop32(bit.bxor(qlo, tonumber(string.sub(fp, 9, 16), 16)))
        local n = tonumber(id)
        if d < best_d or (d == best_d and best_id and n < best_id) then
          best_d, best_id = d, n
        end
      end
    end
  end
  if best_id then return answer('near_duplicate', tostring(best_id), best_d) end
end
if old then remove(base, old) end
add(base, e)
if me ~= '' then
  redis.call('HSET', base .. ':p', e.c, me)
  redis.call('SADD', base .. ':pw:' .. me, e.c)
end
return false
"""
)

# ARGV: "replace" (a kept page re-fingerprinted by its worker) or "absent" (stored pages loaded
# at start: an entry already held for the canonical URL is newer and is never replaced).
_LOAD_LUA = (
    _CI_COMMON
    + """
local base, mode, loaded = KEYS[1], ARGV[1], 0
for i = 2, #ARGV do
  local e = cjson.decode(ARGV[i])
  local old = redis.call('HGET', base .. ':c', e.c)
  local same = false
  if old then
    if mode == 'absent' then
      same = true
    else
      local o = cjson.decode(redis.call('HGET', base .. ':e', old))
      same = o.u == e.u and o.h == e.h and o.f == e.f
      if not same then remove(base, old) end
    end
  end
  if not same then add(base, e); loaded = loaded + 1 end
end
return loaded
"""
)

# ARGV: the worker, then canonical URLs its storage batch committed: their entries count now.
_COMMIT_LUA = (
    _CI_COMMON
    + """
local base, me, done = KEYS[1], ARGV[1], 0
for i = 2, #ARGV do done = done + commit(base, me, ARGV[i]) end
return done
"""
)

# ARGV: a dead worker, then the canonical URLs of its pending entries that storage holds:
# those are committed, every other pending entry of it is removed (its page was never stored).
_RECLAIM_LUA = (
    _CI_COMMON
    + """
local base, dead, removed = KEYS[1], ARGV[1], 0
for i = 2, #ARGV do commit(base, dead, ARGV[i]) end
for _, c in ipairs(redis.call('SMEMBERS', base .. ':pw:' .. dead)) do
  if redis.call('HGET', base .. ':p', c) == dead then
    local id = redis.call('HGET', base .. ':c', c)
    if id then remove(base, id); removed = removed + 1 end
    redis.call('HDEL', base .. ':p', c)
  end
end
redis.call('DEL', base .. ':pw:' .. dead)
return removed
"""
)


class RedisContentIndex(_RedisBacked):
    """The content index of :mod:`crawler.backends.local`, shared in Redis (module docstring).

    ``check_and_add`` is one Lua script: the exact check, the near check over the block sets
    and the insert happen atomically, so two workers never both keep a near-duplicate pair.
    A query reads ``blocks`` sets of about ``n / 2**(64 / blocks)`` members each.

    **Pending entries.** A page kept by worker ``owner`` enters the index *pending*
    (``:p`` hash canonical URL -> worker, ``:pw:{worker}`` set) until that worker's storage
    batch commits it (:meth:`commit`). Another worker whose page matches a pending entry gets
    :data:`PENDING` instead of a decision and asks again later: no page is dropped against a
    page that is not stored. When the owner dies, :meth:`reclaim` commits the entries storage
    holds and removes the rest, so the pages waiting on them are decided again. Entries
    loaded from storage, and every entry of an index without an owner, count at once.
    """

    def __init__(
        self,
        client: redis.Redis,
        base: str,
        k: int = 3,
        blocks: int | None = None,
        url: str = "",
        owner: str = "",
    ) -> None:
        super().__init__(client, base + ":ci", url)
        self.k = k
        self.owner = owner
        self.blocks = k + 1 if blocks is None else blocks
        if not 0 <= k < self.blocks <= 64:
            raise ValueError(f"RedisContentIndex needs 0 <= k < blocks <= 64, got {k}, {blocks}")
        self._layout = block_layout(self.blocks)
        self._check = client.register_script(_CHECK_AND_ADD_LUA)
        self._load = client.register_script(_LOAD_LUA)
        self._commit = client.register_script(_COMMIT_LUA)
        self._reclaim = client.register_script(_RECLAIM_LUA)
        self._create_or_check()

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RedisContentIndex:
        """From ``REDIS_URL``, the namespace settings, ``SIMHASH_MAX_DISTANCE``/``_BLOCKS``;
        ``owner=`` names the worker whose kept pages stay pending until committed."""
        k, blocks = settings_params(settings)
        url = str(settings.get("REDIS_URL") or defaults.REDIS_URL)
        return cls(
            connect(url),
            namespace(settings),
            k=kwargs.get("k", k),
            blocks=kwargs.get("blocks", blocks),
            url=url,
            owner=str(kwargs.get("owner") or ""),
        )

    def _create_or_check(self) -> None:
        meta = self.base + ":meta"
        if self._call("hsetnx", meta, "k", self.k):
            self._call("hset", meta, mapping={"blocks": self.blocks, "seq": 0, "count": 0})
            return
        k, blocks = (int(v) for v in self._call("hmget", meta, ["k", "blocks"]))
        if k != self.k:
            raise _namespace_mismatch("SIMHASH_MAX_DISTANCE", self.k, k, self.base)
        if blocks != self.blocks:
            raise _namespace_mismatch("SIMHASH_BLOCKS", self.blocks, blocks, self.base)

    def block_keys(self, fp: int) -> list[str]:
        """The block-set suffixes of a fingerprint: ``"{table}:{block value hex}"``."""
        keys = []
        for t, (start, width) in enumerate(self._layout):
            value = (fp >> (64 - start - width)) & ((1 << width) - 1)
            keys.append(f"{t}:{value:x}")
        return keys

    def _entry(
        self, url: str, canonical: str, content_hash: str, simhash: int | None
    ) -> tuple[str, list[str]]:
        if simhash is None:
            return "", []
        simhash = int(simhash)
        if not 0 <= simhash < 2**64:
            raise ValueError(f"simhash {simhash!r} of {url} is not an unsigned 64-bit integer")
        return f"{simhash:016x}", self.block_keys(simhash)

    def check_and_add(self, page: PageSignature) -> Match | None:
        """Same contract as :meth:`LocalContentIndex.check_and_add`, atomic across workers;
        a match whose page another worker has not committed yet is ``Match(PENDING, ...)``
        (nothing recorded: ask again)."""
        canonical = page.canonical_url or page.url
        fp_hex, blocks = self._entry(page.url, canonical, page.content_hash, page.simhash)
        args = [self.k, self.owner, page.url, canonical, page.content_hash, fp_hex, *blocks]
        found = self._run(self._check, [self.base], args)
        if not found:
            return None
        reason, url, kept_fp, distance = (
            v.decode() if isinstance(v, bytes) else v for v in found[:4]
        )
        return Match(reason, url, int(kept_fp, 16) if kept_fp else None, int(distance))

    def load(self, records: Iterable[Record], replace: bool = True) -> int:
        """Record pages as kept; returns how many entries were written.

        ``replace=True`` (a kept page re-fingerprinted): an entry held for the canonical URL is
        replaced unless URL, content hash and SimHash are the same. ``replace=False`` (stored
        pages loaded at start): an entry held for the canonical URL is newer and is kept, so a
        worker that joins or restarts never puts an older stored fingerprint back.
        """
        loaded = 0
        mode = "replace" if replace else "absent"
        for batch in _chunks(records, LOAD_BATCH):
            entries = []
            for url, canonical, content_hash, simhash in batch:
                canonical = canonical or url
                fp_hex, blocks = self._entry(url, canonical, content_hash, simhash)
                entries.append(
                    json.dumps(
                        {"u": url, "c": canonical, "h": content_hash, "f": fp_hex, "b": blocks}
                    )
                )
            loaded += int(self._run(self._load, [self.base], [mode, *entries]))
        return loaded

    def load_stored(self, records: Iterable[Record]) -> int:
        """Load stored pages once per namespace (the first worker; later ones skip it), never
        replacing an entry already held (``replace=False``)."""
        meta = self.base + ":meta"
        if self._call("hget", meta, "loaded"):
            return 0
        loaded = self.load(records, replace=False)
        self._call("hset", meta, "loaded", 1)
        return loaded

    def commit(self, canonical_urls: Iterable[str]) -> int:
        """This worker's storage committed these pages: their entries count for everyone."""
        done = 0
        for batch in _chunks(canonical_urls, LOAD_BATCH):
            done += int(self._run(self._commit, [self.base], [self.owner, *batch]))
        return done

    def pending_of(self, worker: str) -> list[str]:
        """Canonical URLs of the entries ``worker`` kept and has not committed."""
        members = self._call("smembers", f"{self.base}:pw:{worker}")
        return sorted(m.decode() if isinstance(m, bytes) else m for m in members)

    def reclaim(self, worker: str, stored: Iterable[str]) -> int:
        """A dead worker's pending entries: the ``stored`` ones (canonical URLs storage holds)
        count from now on, the others are removed; returns how many were removed."""
        return int(self._run(self._reclaim, [self.base], [worker, *stored]))

    def __len__(self) -> int:
        return int(self._call("hget", self.base + ":meta", "count") or 0)

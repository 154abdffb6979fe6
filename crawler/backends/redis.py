"""Redis backends of the distributed profile: a shared Bloom seen set and a shared content index.

Every key starts with ``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}`` (namespace default ``BOT_NAME``),
so crawls on one server stay apart; :func:`clear_namespace` deletes one. Each decision is one Lua
script, so N crawler processes on one server see one set and never both keep a duplicate pair.
Scripts touch keys they compute from their base name: a single Redis server (no Cluster).
Nothing is pickled: entries are packed bytes written by the scripts.

**Seen set** (:class:`RedisSeenSet`), keys under ``{base}:bloom``:

* ``{base}:bloom`` hash: the layer specs (``m{i}``, ``k{i}``, ``c{i}`` from
  :func:`crawler.bloom.bloom_size`, the same capacities and tightened rates as the local
  filter), ``active`` layers, ``n{i}`` keys per layer, ``count``, ``config`` (JSON of n, p);
* ``{base}:bloom:{layer}:{shard}`` strings of bits, 2**31 bits (256 MiB) each, under the
  512 MiB string limit.

Bit indexes come from the 16-byte fingerprint inside Lua by double hashing on two 48-bit
halves (bytes 0-5 and 6-11), ``(h1 + i * h2) mod m``: exact in Lua's doubles for any m < 2**48.

**Content index** (:class:`RedisContentIndex`), keys under ``{base}:ci``: ``:meta`` hash (k,
blocks, layout, seq, count, loaded); ``:t{table}`` hashes, one field per bucket (the bucket bytes
of :func:`bucket_specs`), its value the packed records of the fingerprints in it (the bytes
outside the bucket; table 0 adds a 4-byte sequence number); ``:x`` hash, 4,096 buckets of
7-byte content-key records; ``{base}:ci:ck:bloom`` a growing Bloom filter of canonical keys;
``:p``/``:pc``/``:pw:{worker}`` the pending entries; ``:c``/``:u`` versions and URLs of the
pages storage cannot resolve. Decisions are those of
:class:`crawler.backends.local.LocalContentIndex` (same rules, same ties: sequence numbers are
increasing, content compared on the same 64-bit key). The layout may change between versions;
a namespace written with another k, block count or layout is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Protocol

import numpy as np
import redis

from crawler import bloom, config, defaults
from crawler.backends.common import RedisBackendError, _RedisBacked, namespace
from crawler.backends.local import Match, PageSignature, Record
from crawler.simindex import block_layout, content_key, settings_params, url_key

logger = logging.getLogger(__name__)

SHARD_BITS = 2**31
MAX_LAYERS = 8  # 2**7 x BLOOM_CAPACITY keys; keeps every m far below the 2**48 index limit
LOAD_BATCH = 500


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

# KEYS: meta. ARGV: shard bits, then 16-byte fingerprints. Returns 1 (present) or 0 for each:
# the bit positions of bloom_check's "test" mode, the layer specs read once for the batch.
_BLOOM_TEST_MANY_LUA = """
local meta, shard_bits = KEYS[1], tonumber(ARGV[1])
local active = tonumber(redis.call('HGET', meta, 'active'))
local ms, ks = {}, {}
for l = 0, active - 1 do
  local spec = redis.call('HMGET', meta, 'm' .. l, 'k' .. l)
  ms[l], ks[l] = tonumber(spec[1]), tonumber(spec[2])
end
local function b48(s, off)
  local v = 0
  for j = off, off + 5 do v = v * 256 + string.byte(s, j) end
  return v
end
local out = {}
for a = 2, #ARGV do
  local fp, found = ARGV[a], 0
  local h1, h2 = b48(fp, 1), b48(fp, 7)
  for l = 0, active - 1 do
    local m, all = ms[l], true
    local step, idx = h2 % m, h1 % m
    if step == 0 then step = 1 end
    for _ = 1, ks[l] do
      if redis.call('GETBIT', meta .. ':' .. l .. ':' .. math.floor(idx / shard_bits),
                    idx % shard_bits) == 0 then
        all = false
        break
      end
      idx = (idx + step) % m
    end
    if all then found = 1; break end
  end
  out[#out + 1] = found
end
return out
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

    def contains_many(self, keys: list[bytes]) -> list[bool]:
        """``key in self`` for each of ``keys``, in ONE Redis round trip (read-only): the
        spider asks about all the links of a page at once."""
        if not keys:
            return []
        script = getattr(self, "_test_many", None)
        if script is None:
            script = self._test_many = self.client.register_script(_BLOOM_TEST_MANY_LUA)
        args = [self.shard_bits, *(_fp16(key) for key in keys)]
        return [bool(v) for v in self._run(script, [self.base], args)]

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

    def add_keys_bulk(self, first: np.ndarray, second: np.ndarray) -> int:
        """Set the bits of many keys given as the two uint64 halves of their 16-byte
        fingerprints (``first``: bytes 0-7, ``second``: bytes 8-15, big-endian), with the
        indexes :data:`BLOOM_FN` computes, in bulk: numpy computes them, one Lua call sets a
        batch. Keys fill the top layer to its capacity, then new layers (``grow``); nothing is
        tested first (a key already present counts again: the filter grows a little early).
        Returns how many keys were added."""
        first = np.asarray(first, np.uint64)
        second = np.asarray(second, np.uint64)
        h1 = first >> np.uint64(16)
        h2 = ((first & np.uint64(0xFFFF)) << np.uint64(32)) | (second >> np.uint64(32))
        total, pos = len(first), 0
        while pos < total:
            layer = int(self._call("hget", self.base, "active")) - 1
            m, k, cap, n = (int(v) for v in self._call(
                "hmget", self.base, [f"m{layer}", f"k{layer}", f"c{layer}", f"n{layer}"]))
            growable = self.on_full == "grow" and layer + 1 < MAX_LAYERS
            take = min(total - pos, max(cap - n, 0) if growable else total - pos)
            if take == 0:
                self._call("hset", self.base, "active", layer + 2)
                continue
            self._set_bits(layer, m, k, h1[pos : pos + take], h2[pos : pos + take])
            n = int(self._call("hincrby", self.base, f"n{layer}", take))
            self._call("hincrby", self.base, "count", take)
            if growable and n >= cap:
                self._call("hset", self.base, "active", layer + 2)
            pos += take
        return total

    def _set_bits(self, layer: int, m: int, k: int, h1: np.ndarray, h2: np.ndarray) -> None:
        mm = np.uint64(m)
        start, step = h1 % mm, h2 % mm
        step[step == 0] = 1
        idx = np.concatenate([(start + np.uint64(i) * step) % mm for i in range(k)])
        shards = idx // np.uint64(self.shard_bits)
        offsets = idx % np.uint64(self.shard_bits)
        for shard in np.unique(shards).tolist():
            mine = offsets[shards == shard]
            key = f"{self.base}:{layer}:{shard}"
            # OR a bitmap built here into the shard: one BITOP instead of a SETBIT per bit
            bitmap = np.zeros(int(mine.max()) // 8 + 1, np.uint8)
            np.bitwise_or.at(bitmap, (mine >> np.uint64(3)).astype(np.int64),
                             (np.uint8(128) >> (mine & np.uint64(7)).astype(np.uint8)))
            temp = f"{key}:bulk"
            self._call("set", temp, bitmap.tobytes())
            self._call("bitop", "OR", key, key, temp)
            self._call("delete", temp)

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

#: popcount of a byte, as a Lua table literal (built per script call: a literal is one opcode)
_POPCOUNT = "{[0]=" + ",".join(str(bin(i).count("1")) for i in range(256)) + "}"
#: seq of a kept page in table 0's records (ties: the earliest kept wins); 2**32 pages at most
SEQ_BYTES = 4
#: records of the exact table: content-key bytes 2..8 (byte 1 and the top half of byte 2 are
#: the bucket, 4096 per index)
EXACT_REC = 7
LAYOUT = "2"
CK_BLOOM_CAPACITY = 2**20  # canonical-key filter: first layer, grows by doubling (8 layers)
CK_BLOOM_RATE = 0.01
_MAX_GONE = 64  # kept pages storage no longer knows, forgotten in one check before keeping

_CI_COMMON = (
    BLOOM_FN
    + """
local PC = POPCOUNT
local bxor, band, byte, sub, char, find = bit.bxor, bit.band, string.byte, string.sub,
  string.char, string.find
local SEP = '\\n'
local function ctx(base)
  local nb = tonumber(ARGV[1])
  local C = {base = base, specs = {}, next = nb + 2}
  for t = 1, nb do C.specs[t] = ARGV[t + 1] end
  return C
end
-- a fingerprint's bucket bytes in table t and the other bytes ('<start><width>', 1-based)
local function split(fp, spec)
  if spec == '' then return '', fp end
  local a, w = tonumber(sub(spec, 1, 1)), tonumber(sub(spec, 2, 2))
  return sub(fp, a, a + w - 1), sub(fp, 1, a - 1) .. sub(fp, a + w)
end
local function join(field, rem, spec)
  if spec == '' then return rem end
  local a = tonumber(sub(spec, 1, 1))
  return sub(rem, 1, a - 1) .. field .. sub(rem, a)
end
local function afind(s, needle, stride)
  local pos = find(s, needle, 1, true)
  while pos and (pos - 1) % stride ~= 0 do pos = find(s, needle, pos + 1, true) end
  return pos
end
local function cut(key, field, s, pos, stride)
  local rest = sub(s, 1, pos - 1) .. sub(s, pos + stride)
  if rest == '' then redis.call('HDEL', key, field) else redis.call('HSET', key, field, rest) end
end
local function append(key, field, rec)
  local s = redis.call('HGET', key, field)
  redis.call('HSET', key, field, (s or '') .. rec)
end
local function xfield(c8) return sub(c8, 1, 1) .. char(band(byte(c8, 2), 0xF0)) end
local function seqbytes(n)
  return char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end
local function head(v)
  local i = find(v, SEP, 1, true)
  return sub(v, 1, i - 1), sub(v, i + 1)
end
-- a version: 's' .. fp8 .. content8, or 'x' .. content8 (no SimHash)
local function ids(enc)
  if sub(enc, 1, 1) == 's' then return {'s' .. sub(enc, 2, 9), 'x' .. sub(enc, 10, 17)} end
  return {enc}
end
local function content_of(enc)
  if sub(enc, 1, 1) == 's' then return sub(enc, 10, 17) end
  return sub(enc, 2, 9)
end
local function remove_fp(C, fp)
  local found = false
  for t, spec in ipairs(C.specs) do
    local field, rem = split(fp, spec)
    local key = C.base .. ':t' .. (t - 1)
    local stride = #rem + (t == 1 and SEQB or 0)
    local s = redis.call('HGET', key, field)
    local pos = s and afind(s, rem, stride)
    if pos then
      cut(key, field, s, pos, stride)
      if t == 1 then found = true end
    end
  end
  return found
end
local function remove_content(C, c8)
  local key, field = C.base .. ':x', xfield(c8)
  local s = redis.call('HGET', key, field)
  local pos = s and afind(s, sub(c8, 2), XREC)
  if pos then cut(key, field, s, pos, XREC) end
  return pos ~= nil and pos ~= false
end
local function drop_version(C, enc)
  local found
  if sub(enc, 1, 1) == 's' then
    found = remove_fp(C, sub(enc, 2, 9))
    remove_content(C, content_of(enc))
  else
    found = remove_content(C, content_of(enc))
  end
  for _, id in ipairs(ids(enc)) do
    redis.call('HDEL', C.base .. ':p', id)
    redis.call('HDEL', C.base .. ':u', id)
  end
  if found then redis.call('HINCRBY', C.base .. ':meta', 'count', -1) end
end
local function add_version(C, enc)
  local seq = redis.call('HINCRBY', C.base .. ':meta', 'seq', 1)
  if sub(enc, 1, 1) == 's' then
    local fp = sub(enc, 2, 9)
    for t, spec in ipairs(C.specs) do
      local field, rem = split(fp, spec)
      append(C.base .. ':t' .. (t - 1), field, t == 1 and (rem .. seqbytes(seq)) or rem)
    end
  end
  local c8 = content_of(enc)
  append(C.base .. ':x', xfield(c8), sub(c8, 2))
  redis.call('HINCRBY', C.base .. ':meta', 'count', 1)
end
-- the version the index itself records for a canonical key: pending, or kept with its URL
local function held_version(C, ck8)
  local v = redis.call('HGET', C.base .. ':pc', ck8)
  if v then
    local _, enc = head(v)
    return enc
  end
  local c = redis.call('HGET', C.base .. ':c', ck8)
  if c then return c end
  return nil
end
local function mark(C, owner, ck8, enc, info, canonical)
  for _, id in ipairs(ids(enc)) do redis.call('HSET', C.base .. ':p', id, owner .. SEP .. info) end
  redis.call('HSET', C.base .. ':pc', ck8, owner .. SEP .. enc)
  redis.call('HSET', C.base .. ':pw:' .. owner, canonical, ck8)
end
local function remember(C, ck8, enc, info)
  redis.call('HSET', C.base .. ':c', ck8, enc)
  for _, id in ipairs(ids(enc)) do redis.call('HSET', C.base .. ':u', id, info) end
end
-- the version of a kept page: its SimHash and content key, or its content key alone
local function encode(fp, c8) return fp ~= '' and ('s' .. fp .. c8) or ('x' .. c8) end
-- record a page kept by worker ``me`` (pending until committed; remembered when standalone)
local function keep(C, me, ck8, ck16, enc, info, canonical, standalone, shard_bits)
  add_version(C, enc)
  bloom_check(C.base .. ':ck:bloom', ck16, 'add', true, shard_bits)
  if me ~= '' then mark(C, me, ck8, enc, info, canonical) end
  if standalone then remember(C, ck8, enc, info) end
end
-- forget the version held for a canonical key (else ``given``, its stored version: '' unknown,
-- 'n' none): its records and its pending and remembered entries; returns that version
local function forget(C, ck8, given)
  local v = held_version(C, ck8)
  if not v and given ~= '' and given ~= 'n' then v = given end
  if v then drop_version(C, v) end
  redis.call('HDEL', C.base .. ':pc', ck8)
  redis.call('HDEL', C.base .. ':c', ck8)
  return v
end
local function commit(C, w, c)
  local pw = C.base .. ':pw:' .. w
  local ck8 = redis.call('HGET', pw, c)
  if not ck8 then return 0 end
  redis.call('HDEL', pw, c)
  local v = redis.call('HGET', C.base .. ':pc', ck8)
  if not v then return 0 end
  local owner, enc = head(v)
  if owner ~= w then return 0 end
  for _, id in ipairs(ids(enc)) do
    local pv = redis.call('HGET', C.base .. ':p', id)
    if pv and head(pv) == w then redis.call('HDEL', C.base .. ':p', id) end
  end
  redis.call('HDEL', C.base .. ':pc', ck8)
  return 1
end
"""
).replace("POPCOUNT", _POPCOUNT).replace("SEQB", str(SEQ_BYTES)).replace("XREC", str(EXACT_REC))

# ARGV after the specs: k, me, ck8, ck16, content8, fp8 or '', info (url \n canonical \n fp hex
# \n names), canonical, standalone ('1' or ''), old ('' unknown, 'n' none, or a version), shard
# bits, query only ('1': decide, record nothing).
_CHECK_AND_ADD_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local a = C.next
local k, me, ck8, ck16, c8, fp = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
  ARGV[a + 4], ARGV[a + 5]
local info, canonical, standalone = ARGV[a + 6], ARGV[a + 7], ARGV[a + 8] == '1'
local old_arg, shard_bits = ARGV[a + 9], tonumber(ARGV[a + 10])
local query_only = ARGV[a + 11] == '1'
local ckmeta = C.base .. ':ck:bloom'
local function answer(reason, id, d)
  local pv = redis.call('HGET', C.base .. ':p', id)
  if pv then
    local owner, held = head(pv)
    if owner ~= me then return {'pending', held, id, d, owner} end
    return {reason, held, id, d}
  end
  return {reason, redis.call('HGET', C.base .. ':u', id) or '', id, d}
end
local old = held_version(C, ck8)
if not old then
  if old_arg == 'n' or standalone then
    old = nil
  elseif old_arg ~= '' then
    old = old_arg
  elseif bloom_check(ckmeta, ck16, 'test', false, shard_bits) == 1 then
    return {'need_old'}
  end
end
local old_fp = (old and sub(old, 1, 1) == 's') and sub(old, 2, 9) or nil
if not old or content_of(old) ~= c8 then  -- rule 2: another kept page with this content
  local xs = redis.call('HGET', C.base .. ':x', xfield(c8))
  if xs and afind(xs, sub(c8, 2), XREC) then return answer('exact_duplicate', 'x' .. c8, 0) end
end
if fp ~= '' then  -- rule 3: the nearest kept fingerprint within k, ties to the earliest kept
  local found, best = {}, k + 1
  for t, spec in ipairs(C.specs) do
    local field, rem = split(fp, spec)
    local s = redis.call('HGET', C.base .. ':t' .. (t - 1), field)
    if s then
      local R = #rem
      local stride = R + (t == 1 and SEQB or 0)
      local q = {byte(rem, 1, R)}
      for i = 1, #s, stride do
        local d, j = 0, 0
        while j < R do
          d = d + PC[bxor(byte(s, i + j), q[j + 1])]
          if d > k then break end
          j = j + 1
        end
        if d <= k then
          local cand = join(field, sub(s, i, i + R - 1), spec)
          if cand ~= old_fp and found[cand] == nil then
            found[cand] = d
            if d < best then best = d end
          end
        end
      end
    end
  end
  if best <= k then
    local winner, wseq = nil, nil
    local field0, spec0 = nil, C.specs[1]
    for cand, d in pairs(found) do
      if d == best then
        local f0, rem0 = split(cand, spec0)
        local s0 = redis.call('HGET', C.base .. ':t0', f0)
        local pos = afind(s0, rem0, #rem0 + SEQB)
        local seq = sub(s0, pos + #rem0, pos + #rem0 + SEQB - 1)
        if not winner or seq < wseq then winner, wseq = cand, seq end
      end
    end
    return answer('near_duplicate', 's' .. winner, best)
  end
end
if query_only then return false end
if old then drop_version(C, old) end
keep(C, me, ck8, ck16, encode(fp, c8), info, canonical, standalone, shard_bits)
return false
"""
).replace("SEQB", str(SEQ_BYTES)).replace("XREC", str(EXACT_REC))

# ARGV after the specs: mode ('replace': re-fingerprinted or kept-anyway pages, whose stored
# fingerprint is not this one; 'absent': stored pages, an entry held for the canonical key is
# newer and stays), standalone, shard bits, then 7 per record: ck8, ck16, content8, fp8 or '',
# info, canonical, old ('' unknown, 'n' none, or the stored version).
_LOAD_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local a = C.next
local mode, standalone, shard_bits = ARGV[a], ARGV[a + 1] == '1', tonumber(ARGV[a + 2])
local ckmeta = C.base .. ':ck:bloom'
local loaded = 0
for i = a + 3, #ARGV, 7 do
  local ck8, ck16, c8, fp, info, canonical, old_arg = ARGV[i], ARGV[i + 1], ARGV[i + 2],
    ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local enc = encode(fp, c8)
  local old = held_version(C, ck8)
  if mode == 'absent' then
    if not old then
      add_version(C, enc)
      bloom_check(ckmeta, ck16, 'add', true, shard_bits)
      if standalone then remember(C, ck8, enc, info) end
      loaded = loaded + 1
    end
  else
    if not old and old_arg ~= '' and old_arg ~= 'n' then old = old_arg end
    if old ~= enc then
      local pc = redis.call('HGET', C.base .. ':pc', ck8)
      if old then drop_version(C, old) end
      add_version(C, enc)
      bloom_check(ckmeta, ck16, 'add', true, shard_bits)
      if pc then mark(C, (head(pc)), ck8, enc, info, canonical) end
      remember(C, ck8, enc, info)  -- storage does not hold this fingerprint: keep its URL
      loaded = loaded + 1
    end
  end
end
return loaded
"""
)

# ARGV after the specs: the worker, then canonical URLs its storage batch committed.
_COMMIT_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local me, done = ARGV[C.next], 0
for i = C.next + 1, #ARGV do done = done + commit(C, me, ARGV[i]) end
return done
"""
)

# ARGV after the specs: a dead worker, then the canonical URLs of its pending entries that
# storage holds: those are committed, every other pending entry of it is removed.
_RECLAIM_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local dead, removed = ARGV[C.next], 0
for i = C.next + 1, #ARGV do commit(C, dead, ARGV[i]) end
local pw = C.base .. ':pw:' .. dead
local all = redis.call('HGETALL', pw)
for i = 1, #all, 2 do
  local ck8 = all[i + 1]
  local v = redis.call('HGET', C.base .. ':pc', ck8)
  if v then
    if (head(v)) == dead then
      forget(C, ck8, '')  -- the pending version its owner will never commit
      removed = removed + 1
    end
  end
end
redis.call('DEL', pw)
return removed
"""
)

# ARGV after the specs: me, the replaced page's ck8 and stored version ('' unknown, 'n' none,
# or a version), then the page kept instead: ck8, ck16, content8, fp8 or '', info, canonical,
# standalone ('1' or ''), its stored version (as before), shard bits.
_REPLACE_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local a = C.next
local me, kck8, kold = ARGV[a], ARGV[a + 1], ARGV[a + 2]
local ck8, ck16, c8, fp, info, canonical = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
  ARGV[a + 7], ARGV[a + 8]
local standalone, pold, shard_bits = ARGV[a + 9] == '1', ARGV[a + 10], tonumber(ARGV[a + 11])
local replaced = forget(C, kck8, kold)
forget(C, ck8, pold)  -- the page's own earlier version, as check-and-add replaces it
keep(C, me, ck8, ck16, encode(fp, c8), info, canonical, standalone, shard_bits)
return replaced and 1 or 0
"""
)

# ARGV after the specs: the canonical key (ck8) of a kept page to forget, its stored version
# ('' unknown, 'n' none, or a version).
_REMOVE_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
return forget(C, ARGV[C.next], ARGV[C.next + 1]) and 1 or 0
"""
)

# ARGV after the specs: an id ('s' .. fp8 or 'x' .. content8) whose page storage no longer has.
_FORGET_LUA = (
    _CI_COMMON
    + """
local C = ctx(KEYS[1])
local id = ARGV[C.next]
local found
if sub(id, 1, 1) == 's' then found = remove_fp(C, sub(id, 2, 9))
else found = remove_content(C, sub(id, 2, 9)) end
redis.call('HDEL', C.base .. ':u', id)
if found then redis.call('HINCRBY', C.base .. ':meta', 'count', -1) end
return found and 1 or 0
"""
)


# ARGV[1]: appends packed as (table byte: 255 the exact table, else the block table; field
# length byte; field; records length, 4 bytes big-endian; records), one after the other.
_APPEND_LUA = """
local base, blob, i, n = KEYS[1], ARGV[1], 1, 0
local byte, sub = string.byte, string.sub
while i <= #blob do
  local t, fl = byte(blob, i, i + 1)
  local field = sub(blob, i + 2, i + 1 + fl)
  local a, b, c, d = byte(blob, i + 2 + fl, i + 5 + fl)
  local len = ((a * 256 + b) * 256 + c) * 256 + d
  local recs = sub(blob, i + 6 + fl, i + 5 + fl + len)
  local key = base .. (t == 255 and ':x' or (':t' .. t))
  local s = redis.call('HGET', key, field)
  redis.call('HSET', key, field, (s or '') .. recs)
  i, n = i + 6 + fl + len, n + 1
end
return n
"""
APPEND_BATCH = 2000  # buckets appended per call (a few ms of Redis time)
BULK_ROWS = 1 << 20  # stored rows grouped by bucket at once in load_arrays


class KeptPages(Protocol):
    """Where the Redis index finds what it does not hold (e.g. :class:`crawler.storage.Store`).

    ``kept_page(kind, key)``: ``(url, canonical_url, simhash, canonical_link)`` of the latest
    stored page with that SimHash (``kind`` ``"s"``) or content key (``"x"``), None when none
    is stored (``canonical_link``: the page it names canonical, ``""`` none).
    ``latest_version(canonical_key)``: ``(simhash, content_key)`` of the latest stored page
    with that canonical key (either None when absent), None when no page has it."""

    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None, str] | None: ...

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None: ...


def bucket_specs(blocks: int) -> list[str]:
    """Per block table, the whole bytes of the block that key its buckets: ``"<start><width>"``
    (1-based, big-endian fingerprint bytes, the first two whole bytes inside the block), or
    ``""`` when the block holds no whole byte (one bucket: every query scans the table). Two
    fingerprints equal on a block are equal on those bytes, so the pigeonhole stays exact."""
    specs = []
    for start, width in block_layout(blocks):
        first = -(-start // 8)  # first byte starting inside the block
        whole = max(0, (start + width) // 8 - first)
        take = min(whole, 2)
        specs.append(f"{first + 1}{take}" if take else "")
    return specs


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a second, independent-looking 64 bits of a canonical key."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _U64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _U64
    return x ^ (x >> 31)


_U64 = 2**64 - 1


def _mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`_mix64` of every element (uint64 arithmetic wraps as the scalar's mask does)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _grouped(table: int, fields: np.ndarray, records: np.ndarray) -> list[bytes]:
    """One packed append (:data:`_APPEND_LUA`) per bucket: rows grouped by bucket field."""
    if len(records) == 0:
        return []
    width = fields.shape[1]
    key = np.zeros(len(fields), np.uint64)
    for j in range(width):
        key = (key << np.uint64(8)) | fields[:, j].astype(np.uint64)
    order = np.argsort(key, kind="stable")
    key, fields, records = key[order], fields[order], np.ascontiguousarray(records[order])
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    stride = records.shape[1]
    blob = records.tobytes()
    head = bytes([table, width])
    return [head + fields[a].tobytes() + ((b - a) * stride).to_bytes(4, "big")
            + blob[a * stride : b * stride]
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _batched_arrays(chunks: Iterable[Any], rows: int) -> Iterator[Any]:
    """Key-array chunks concatenated into batches of at least ``rows`` rows (the last smaller):
    bigger batches append more records per bucket per call."""
    parts: list[Any] = []
    size = 0

    def joined() -> Any:
        from types import SimpleNamespace

        cat = {name: np.concatenate([np.asarray(getattr(p, name)) for p in parts])
               for name in ("simhash", "has_simhash", "content_keys", "canonical_keys")}
        cat["simhash"] = cat["simhash"].astype(np.uint64, copy=False)
        cat["content_keys"] = cat["content_keys"].astype(np.uint64, copy=False)
        cat["canonical_keys"] = cat["canonical_keys"].astype(np.uint64, copy=False)
        cat["has_simhash"] = cat["has_simhash"].astype(np.bool_, copy=False)
        return SimpleNamespace(**cat)

    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk.ids)
        if size >= rows:
            yield joined()
            parts, size = [], 0
    if parts:
        yield joined()


def _version(simhash: int | None, ckey: int | None) -> bytes:
    """A stored page's version as the scripts encode it (``b"n"``: nothing to exclude)."""
    if ckey is None:
        return b"n"
    if simhash is None:
        return b"x" + ckey.to_bytes(8, "big")
    return b"s" + simhash.to_bytes(8, "big") + ckey.to_bytes(8, "big")


class RedisContentIndex(_RedisBacked):
    """The content index of :mod:`crawler.backends.local`, shared in Redis (module docstring).

    ``check_and_add`` is one Lua script: the exact check, the near check over the block tables
    and the insert happen atomically, so two workers never both keep a near-duplicate pair.

    **What Redis holds per kept page** (about 50 bytes at 10**6 pages, ``bench.redisindex``):
    in each of the ``blocks`` tables the fingerprint's bytes outside its bucket (6 at k = 3),
    plus a 4-byte sequence number in table 0 (ties go to the earliest kept); 7 bytes of its
    content key in the exact table; about 1.2 bytes in a Bloom filter of canonical keys.
    Buckets are fields of one hash per table (65,536 at k = 3), so the fixed cost is about
    55 bytes per bucket. The URLs of kept pages and their earlier versions are *not* in Redis:
    they come from ``resolver`` (the crawl's storage, :class:`KeptPages`) when a drop names its
    kept page, or when the canonical-key filter says a page may have an earlier version.

    Without a resolver (no storage: tests, tools) the index is *standalone*: every kept page
    also keeps its URL (``:u``) and its canonical key's version (``:c``), about 100 bytes more.
    With one, only pages whose fingerprint storage does not hold (re-fingerprinted by the
    template filter, kept after a young-host check) keep those.

    **Pending entries.** A page kept by worker ``owner`` enters the index *pending*
    (``:p`` id -> worker and URL, ``:pc`` canonical key -> version, ``:pw:{worker}`` canonical
    URL -> key) until that worker's storage batch commits it (:meth:`commit`). Another worker
    whose page matches a pending entry gets :data:`PENDING` instead of a decision and asks
    again later: no page is dropped against a page that is not stored. When the owner dies,
    :meth:`reclaim` commits the entries storage holds and removes the rest, so the pages
    waiting on them are decided again. Loaded entries, and every entry of an index without an
    owner, count at once.
    """

    def __init__(
        self,
        client: redis.Redis,
        base: str,
        k: int = 3,
        blocks: int | None = None,
        url: str = "",
        owner: str = "",
        resolver: KeptPages | None = None,
    ) -> None:
        super().__init__(client, base + ":ci", url)
        self.k = k
        self.owner = owner
        self.resolver = resolver
        self.blocks = k + 1 if blocks is None else blocks
        if not 0 <= k < self.blocks <= 64:
            raise ValueError(f"RedisContentIndex needs 0 <= k < blocks <= 64, got {k}, {blocks}")
        self._specs = bucket_specs(self.blocks)
        self._check = client.register_script(_CHECK_AND_ADD_LUA)
        self._load = client.register_script(_LOAD_LUA)
        self._commit = client.register_script(_COMMIT_LUA)
        self._reclaim = client.register_script(_RECLAIM_LUA)
        self._forget = client.register_script(_FORGET_LUA)
        self._replace = client.register_script(_REPLACE_LUA)
        self._remove = client.register_script(_REMOVE_LUA)
        self._append = client.register_script(_APPEND_LUA)
        self._create_or_check()
        # canonical keys kept so far: a page whose key is absent has no earlier version
        self._ck_filter = RedisSeenSet(client, self.base + ":ck", capacity=CK_BLOOM_CAPACITY,
                                       error_rate=CK_BLOOM_RATE, on_full="grow", url=url)
        self._head = [len(self._specs), *self._specs]

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RedisContentIndex:
        """From ``REDIS_URL``, the namespace settings, ``SIMHASH_MAX_DISTANCE``/``_BLOCKS``;
        ``owner=`` names the worker whose kept pages stay pending until committed,
        ``resolver=`` the storage that holds kept pages' URLs."""
        k, blocks = settings_params(settings)
        url = str(settings.get("REDIS_URL") or defaults.REDIS_URL)
        return cls(
            connect(url),
            namespace(settings),
            k=kwargs.get("k", k),
            blocks=kwargs.get("blocks", blocks),
            url=url,
            owner=str(kwargs.get("owner") or ""),
            resolver=kwargs.get("resolver"),
        )

    def _create_or_check(self) -> None:
        meta = self.base + ":meta"
        if self._call("hsetnx", meta, "k", self.k):
            self._call("hset", meta,
                       mapping={"blocks": self.blocks, "seq": 0, "count": 0, "layout": LAYOUT})
            return
        k, blocks, layout = self._call("hmget", meta, ["k", "blocks", "layout"])
        if int(k) != self.k:
            raise _namespace_mismatch("SIMHASH_MAX_DISTANCE", self.k, int(k), self.base)
        if int(blocks) != self.blocks:
            raise _namespace_mismatch("SIMHASH_BLOCKS", self.blocks, int(blocks), self.base)
        stored = (layout or b"1").decode()
        if stored != LAYOUT:
            raise config.SettingError(
                "DEDUP_NAMESPACE", self.base.rsplit(":", 1)[0],
                f"a namespace whose content index has layout {LAYOUT} (this one was written "
                f"with layout {stored} by an older dedup-crawler: delete its keys, e.g. "
                f"redis-cli --scan --pattern '{self.base}:*' | xargs redis-cli del, or set "
                "another DEDUP_NAMESPACE)")  # fmt: skip

    @property
    def standalone(self) -> bool:
        return self.resolver is None

    def _page_args(self, url: str, canonical: str, content_hash: str, simhash: int | None,
                   names: str = "") -> list[Any]:
        """ck8, ck16, content8, fp8, info, canonical of one page (info: URL, canonical URL,
        SimHash hex and the page it names canonical, one per line)."""
        ck = url_key(canonical)
        if simhash is not None:
            simhash = int(simhash)
            if not 0 <= simhash <= _U64:
                raise ValueError(f"simhash {simhash!r} of {url} is not an unsigned 64-bit integer")
        fp8 = simhash.to_bytes(8, "big") if simhash is not None else b""
        fp_hex = "" if simhash is None else format(simhash, "x")
        info = f"{url}\n{canonical}\n{fp_hex}\n{names}"
        return [ck.to_bytes(8, "big"), ck.to_bytes(8, "big") + _mix64(ck).to_bytes(8, "big"),
                content_key(content_hash).to_bytes(8, "big"), fp8, info, canonical]  # fmt: skip

    def check_and_add(self, page: PageSignature) -> Match | None:
        """Same contract as :meth:`LocalContentIndex.check_and_add`, atomic across workers;
        a match whose page another worker has not committed yet is ``Match(PENDING, ...)``
        (nothing recorded: ask again)."""
        return self._decide(page, query_only=False)

    def check(self, page: PageSignature) -> Match | None:
        """:meth:`check_and_add` recording nothing (:meth:`LocalContentIndex.check`)."""
        return self._decide(page, query_only=True)

    def remove(self, canonical: str) -> bool:
        """Forget the kept page whose canonical URL is ``canonical``; whether it was held."""
        ck8 = url_key(canonical).to_bytes(8, "big")
        stored = self._stored_version(ck8)  # b"n" without a resolver (standalone)
        return bool(self._run(self._remove, [self.base], [*self._head, ck8, stored]))

    def _decide(self, page: PageSignature, query_only: bool) -> Match | None:
        canonical = page.canonical_url or page.url
        args = self._page_args(page.url, canonical, page.content_hash, page.simhash, page.names)
        old: bytes = b""
        for _ in range(_MAX_GONE + 2):
            found = self._run(self._check, [self.base], [
                *self._head, self.k, self.owner, *args, "1" if self.standalone else "", old,
                self._ck_filter.shard_bits, "1" if query_only else ""])  # fmt: skip
            if not found:
                return None
            reason = _text(found[0])
            if reason == "need_old":
                old = self._stored_version(args[0])
                continue
            match = self._match(reason, found)
            if match is not None:
                return match
            # the kept page is gone from storage: forgotten, decide again
        raise RuntimeError(f"content index: too many vanished kept pages for {page.url}")

    def _stored_version(self, ck8: bytes) -> bytes:
        version = None
        if self.resolver is not None:
            version = self.resolver.latest_version(int.from_bytes(ck8, "big"))
        return _version(*version) if version else b"n"

    def _match(self, reason: str, found: list[Any]) -> Match | None:
        held, ident, distance = _text(found[1]), bytes(found[2]), int(found[3])
        kind, key = chr(ident[0]), int.from_bytes(ident[1:9], "big")
        if held:
            url, canonical, fp_hex, *rest = held.split("\n")
            simhash = int(fp_hex, 16) if fp_hex else None
            names = rest[0] if rest else ""
        else:
            resolved = self.resolver.kept_page(kind, key) if self.resolver is not None else None
            if resolved is None:
                logger.info("content index: a kept page storage no longer has (%s %016x) "
                            "is forgotten", kind, key)  # fmt: skip
                self._run(self._forget, [self.base], [*self._head, ident])
                return None
            url, canonical, simhash, names = resolved
        if kind == "s":
            simhash = key
        return Match(reason, url, simhash, distance, canonical, names)

    def replace(self, kept_canonical: str, page: PageSignature) -> None:
        """Keep ``page`` instead of the kept page whose canonical URL is ``kept_canonical``
        (it names ``page`` canonical), atomically: that page's entry is removed and ``page``
        recorded as :meth:`check_and_add` records a kept page (pending until committed).
        Kept pages are told apart by their SimHash: ``page`` must not hold another kept
        page's (it does not: that page would have been its match, at distance 0)."""
        canonical = page.canonical_url or page.url
        args = self._page_args(page.url, canonical, page.content_hash, page.simhash, page.names)
        kept_ck8 = url_key(kept_canonical).to_bytes(8, "big")
        kept_old, own_old = self._stored_version(kept_ck8), self._stored_version(args[0])
        self._run(self._replace, [self.base], [
            *self._head, self.owner, kept_ck8, kept_old, *args, "1" if self.standalone else "",
            own_old, self._ck_filter.shard_bits])  # fmt: skip

    def _records_args(self, records: Iterable[Record], with_old: bool) -> Iterator[list[Any]]:
        for batch in _chunks(records, LOAD_BATCH):
            args: list[Any] = []
            for url, canonical, content_hash, simhash in batch:
                page = self._page_args(url, canonical or url, content_hash, simhash)
                old = b""
                if with_old and not self.standalone:
                    old = self._stored_version(page[0])
                args += [*page, old]
            yield args

    def load(self, records: Iterable[Record], replace: bool = True) -> int:
        """Record pages as kept; returns how many entries were written.

        ``replace=True`` (a kept page re-fingerprinted, or kept after a young-host check): the
        entry held for the canonical URL is replaced unless it is the same version, and the
        page keeps its URL in Redis (storage holds another fingerprint for it, or none yet).
        ``replace=False`` (stored pages loaded at start): an entry held for the canonical URL
        is newer and is kept, so a worker that joins or restarts never puts an older stored
        fingerprint back.
        """
        loaded = 0
        mode = "replace" if replace else "absent"
        for args in self._records_args(records, with_old=replace):
            loaded += int(self._run(self._load, [self.base], [
                *self._head, mode, "1" if self.standalone else "",
                self._ck_filter.shard_bits, *args]))  # fmt: skip
        return loaded

    def load_arrays(self, chunks: Iterable[Any], resolver: Any = None) -> int:
        """Stored pages from integer key arrays (:meth:`crawler.storage.Store.iter_key_arrays`),
        once per namespace (the first worker; later ones skip it). Needs no URL (storage
        resolves a kept page when a drop names it), so a standalone index refuses it.

        Bulk: records are grouped by bucket in numpy and appended one bucket at a time
        (:data:`_APPEND_LUA`), the canonical-key filter's bits set in bulk. A canonical key the
        index already holds a version of (a pending page, a re-fingerprinted one) is newer and
        is skipped; within a chunk the latest stored row of a canonical key wins. ``resolver``
        is unused (the signature of :meth:`LocalContentIndex.load_arrays`)."""
        if self.standalone:
            raise ValueError("a RedisContentIndex without a resolver keeps URLs: load records")
        meta = self.base + ":meta"
        if self._call("hget", meta, "loaded"):
            return 0
        held = [np.frombuffer(bytes(k), ">u8")[0] for name in (":pc", ":c")
                for k in self._call("hkeys", self.base + name)]
        held_keys = np.array(held, np.uint64)
        loaded = 0
        for chunk in _batched_arrays(chunks, BULK_ROWS):
            canon = chunk.canonical_keys
            keep = np.ones(len(canon), np.bool_)
            if len(held_keys):
                keep &= ~np.isin(canon, held_keys)
            # the latest row of a canonical key in this batch (rows come in id order)
            _, last = np.unique(canon[::-1], return_index=True)
            latest = np.zeros(len(canon), np.bool_)
            latest[len(canon) - 1 - last] = True
            keep &= latest
            loaded += self._bulk_add(chunk.simhash[keep], chunk.has_simhash[keep],
                                     chunk.content_keys[keep], canon[keep])
        self._call("hset", meta, "loaded", 1)
        return loaded

    def _bulk_add(self, fps: np.ndarray, has: np.ndarray, ckeys: np.ndarray,
                  canon: np.ndarray) -> int:
        n = len(fps)
        if n == 0:
            return 0
        last = int(self._call("hincrby", self.base + ":meta", "seq", n))
        seqs = np.arange(last - n + 1, last + 1, dtype=np.uint64).astype(">u4")
        appends: list[bytes] = []
        raw = fps[has].astype(">u8").view(np.uint8).reshape(-1, 8)
        for t, spec in enumerate(self._specs):
            first = int(spec[0]) - 1 if spec else 0
            cols = list(range(first, first + int(spec[1]))) if spec else []
            rest = np.delete(raw, cols, axis=1) if cols else raw
            if t == 0:
                rest = np.hstack([rest, seqs[has].view(np.uint8).reshape(-1, 4)])
            appends += _grouped(t, raw[:, cols] if cols else raw[:, :0], rest)
        cbytes = ckeys.astype(">u8").view(np.uint8).reshape(-1, 8)
        field = cbytes[:, :2].copy()
        field[:, 1] &= 0xF0
        appends += _grouped(255, field, cbytes[:, 1:])
        for batch in _chunks(appends, APPEND_BATCH):
            self._run(self._append, [self.base], [b"".join(batch)])
        self._call("hincrby", self.base + ":meta", "count", n)
        self._ck_filter.add_keys_bulk(canon.astype(np.uint64), _mix64_array(canon))
        return n

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
            done += int(self._run(self._commit, [self.base], [*self._head, self.owner, *batch]))
        return done

    def pending_of(self, worker: str) -> list[str]:
        """Canonical URLs of the entries ``worker`` kept and has not committed."""
        members = self._call("hkeys", f"{self.base}:pw:{worker}")
        return sorted(_text(m) for m in members)

    def reclaim(self, worker: str, stored: Iterable[str]) -> int:
        """A dead worker's pending entries: the ``stored`` ones (canonical URLs storage holds)
        count from now on, the others are removed; returns how many were removed."""
        return int(self._run(self._reclaim, [self.base], [*self._head, worker, *stored]))

    def __len__(self) -> int:
        return int(self._call("hget", self.base + ":meta", "count") or 0)


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)

"""The Lua library of the shared content index: the functions every script of
:mod:`crawler.backends.redis.index_lua` and :mod:`crawler.backends.redis.pending` starts with.

Records and versions are laid out as :mod:`crawler.backends.redis.keys` describes. Every script
gets the block tables' bucket specs first (``ARGV[1]`` their count, then one per table:
:func:`crawler.backends.redis.keys.bucket_specs`); ``ctx(base)`` reads them, and ``C.next`` is
the index of the script's own first argument. ``ctx`` fails (``KEYSGONE``) when the index's
``:meta`` is gone, as after a Redis restart without persistence: deciding on an empty index
would keep duplicates of pages already stored. The functions:

* buckets: ``split``/``join`` (a fingerprint's bucket bytes and the rest), ``afind`` (a record
  at a record boundary), ``cut``/``append`` (remove or add a record), ``xfield`` (the bucket of
  a content key);
* versions: ``ids``, ``content_of``, ``encode``; ``add_version``/``drop_version`` (every
  record of a version), ``remove_fp``/``remove_content``;
* kept pages: ``held_version`` (the version the index records for a canonical key), ``keep``
  (record a kept page, pending for its worker), ``forget`` (drop the version held for a
  canonical key), ``remember`` (a page's URL and version, for pages storage cannot resolve);
* pending entries: ``mark`` (pending for a worker), ``commit`` (counts for everyone);
* ``bloom_check`` of :data:`crawler.backends.redis.bloom_lua.BLOOM_FN` (the canonical keys).
"""

from __future__ import annotations

from crawler.backends.redis.bloom_lua import BLOOM_FN
from crawler.backends.redis.keys import EXACT_REC, SEQ_BYTES

#: popcount of a byte, as a Lua table literal: built by ``popcounts()`` when a script first scans
#: a bucket (5 of a script call's 10 µs of set-up when built on every call, bucket or not)
POPCOUNT = "{[0]=" + ",".join(str(bin(i).count("1")) for i in range(256)) + "}"

INDEX_LIB = (
    BLOOM_FN
    + """
local function popcounts() return POPCOUNT end
local bxor, band, byte, sub, char, find = bit.bxor, bit.band, string.byte, string.sub,
  string.char, string.find
local SEP = '\\n'
local function ctx(base)
  if redis.call('EXISTS', base .. ':meta') == 0 then
    error({err = 'KEYSGONE the content index is gone: Redis restarted empty, or flushed'})
  end
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
  local pending, id = owner .. SEP .. info, ids(enc)
  if id[2] then redis.call('HSET', C.base .. ':p', id[1], pending, id[2], pending)
  else redis.call('HSET', C.base .. ':p', id[1], pending) end
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
).replace("POPCOUNT", POPCOUNT).replace("SEQB", str(SEQ_BYTES)).replace("XREC", str(EXACT_REC))

"""The Lua of the shared Bloom filter (:mod:`crawler.backends.redis.seen`; key layout in
:mod:`crawler.backends.redis.keys`).

:data:`BLOOM_FN` is a Lua function other scripts include (the content index's canonical-key
filter, the frontier's push); :data:`BLOOM_LUA` and :data:`BLOOM_TEST_MANY_LUA` are the seen
set's own scripts.
"""

from __future__ import annotations

from crawler.backends.redis.keys import MAX_LAYERS

#: The error of a script whose filter is gone (Redis restarted without persistence, or flushed).
KEYS_GONE = "KEYSGONE the seen set's keys are gone: Redis restarted without persistence, or flushed"

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
  if not active then error({err = KEYS_GONE}) end
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
""".replace("MAXL", str(MAX_LAYERS)).replace("KEYS_GONE", repr(KEYS_GONE))


# KEYS: meta, and for an "add" the adder's memo key. ARGV: 16-byte fingerprint, mode ("test" or
# "add"), grow (0/1), shard bits, and for an "add" a token. Returns {present, count}. An add
# sent again with the memo's token (its reply was lost) gets the first run's reply: replayed,
# it would answer "present" and a new URL would pass for a duplicate.
BLOOM_LUA = BLOOM_FN + """
local memo, tok = KEYS[2], ARGV[5]
if memo then
  local t, p, c = string.match(redis.call('GET', memo) or '', '^(%S+) (%S+) (%S+)$')
  if t == tok then return {tonumber(p), tonumber(c)} end
end
local present, count = bloom_check(KEYS[1], ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4]))
if memo then redis.call('SET', memo, tok .. ' ' .. present .. ' ' .. count, 'EX', 3600) end
return {present, count}
"""

# KEYS: meta. ARGV: shard bits, then 16-byte fingerprints. Returns 1 (present) or 0 for each:
# the bit positions of bloom_check's "test" mode, the layer specs read once for the batch.
BLOOM_TEST_MANY_LUA = """
local meta, shard_bits = KEYS[1], tonumber(ARGV[1])
local active = tonumber(redis.call('HGET', meta, 'active'))
if not active then return redis.error_reply(KEYS_GONE) end
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
""".replace("KEYS_GONE", repr(KEYS_GONE))

#: KEYS[1]: the filter's meta hash. ARGV: the settings (JSON), then the layer specs as field,
#: value pairs (``active`` and ``count`` among them). Creates the filter in one step, so a
#: process started at the same instant reads a complete filter or none; a filter half created
#: by a dedup-crawler that set ``config`` first, then the layers, and stopped in between is
#: completed when its settings are these (only fields still absent are set). Returns {created
#: (1/0), the stored settings}.
BLOOM_CREATE_LUA = """
local meta, created = KEYS[1], 0
if redis.call('HEXISTS', meta, 'active') == 0 then
  created = redis.call('HSETNX', meta, 'config', ARGV[1])
  if redis.call('HGET', meta, 'config') == ARGV[1] then
    for i = 2, #ARGV, 2 do redis.call('HSETNX', meta, ARGV[i], ARGV[i + 1]) end
  end
end
return {created, redis.call('HGET', meta, 'config')}
"""

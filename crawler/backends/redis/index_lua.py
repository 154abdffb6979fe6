"""The Lua scripts of the shared content index's decisions and loads
(:class:`crawler.backends.redis.index.RedisContentIndex`, :mod:`crawler.backends.redis.loading`).

Each is one atomic step over the keys :mod:`crawler.backends.redis.keys` describes: every
script but :data:`APPEND_LUA` starts with :data:`~crawler.backends.redis.index_lib_lua.INDEX_LIB`
and gets the bucket specs first; the comment above each names its own arguments. The decisions
are those of :class:`crawler.backends.local.LocalContentIndex` (same rules, same ties: sequence
numbers are increasing, content compared on the same 64-bit key).
"""

from __future__ import annotations

from crawler.backends.redis.index_lib_lua import INDEX_LIB
from crawler.backends.redis.keys import EXACT_REC, SEQ_BYTES

# ARGV after the specs: k, me, ck8, ck16, content8, fp8 or '', info (url \n canonical \n fp hex
# \n names), canonical, standalone ('1' or ''), old ('' unknown, 'n' none, or a version), shard
# bits, query only ('1': decide, record nothing).
CHECK_AND_ADD_LUA = (
    INDEX_LIB
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
  local found, best, PC = {}, k + 1, nil
  for t, spec in ipairs(C.specs) do
    local field, rem = split(fp, spec)
    local s = redis.call('HGET', C.base .. ':t' .. (t - 1), field)
    if s then
      PC = PC or popcounts()
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
LOAD_LUA = (
    INDEX_LIB
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

# ARGV after the specs: me, the replaced page's ck8 and stored version ('' unknown, 'n' none,
# or a version), then the page kept instead: ck8, ck16, content8, fp8 or '', info, canonical,
# standalone ('1' or ''), its stored version (as before), shard bits; last the replaced page's
# canonical URL (its entry in its owner's pending hash leaves with it).
REPLACE_LUA = (
    INDEX_LIB
    + """
local C = ctx(KEYS[1])
local a = C.next
local me, kck8, kold = ARGV[a], ARGV[a + 1], ARGV[a + 2]
local ck8, ck16, c8, fp, info, canonical = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
  ARGV[a + 7], ARGV[a + 8]
local standalone, pold, shard_bits = ARGV[a + 9] == '1', ARGV[a + 10], tonumber(ARGV[a + 11])
local kpc = redis.call('HGET', C.base .. ':pc', kck8)
if kpc then redis.call('HDEL', C.base .. ':pw:' .. (head(kpc)), ARGV[a + 12]) end
local replaced = forget(C, kck8, kold)
forget(C, ck8, pold)  -- the page's own earlier version, as check-and-add replaces it
keep(C, me, ck8, ck16, encode(fp, c8), info, canonical, standalone, shard_bits)
return replaced and 1 or 0
"""
)

# ARGV after the specs: the canonical key (ck8) of a kept page to forget, its stored version
# ('' unknown, 'n' none, or a version).
REMOVE_LUA = (
    INDEX_LIB
    + """
local C = ctx(KEYS[1])
return forget(C, ARGV[C.next], ARGV[C.next + 1]) and 1 or 0
"""
)

# ARGV after the specs: an id ('s' .. fp8 or 'x' .. content8) whose page storage no longer has.
FORGET_LUA = (
    INDEX_LIB
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
APPEND_LUA = """
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

# KEYS[1]: the index's meta hash. ARGV: k, blocks, layout. Creates the index's parameters in one
# step, so a worker started at the same instant reads all of them or none. A record without
# ``blocks`` (half created by a dedup-crawler that set ``k`` first, then ``blocks``, and stopped
# in between) is completed: only fields still absent are set. Returns {created (1/0), k,
# blocks, layout} as stored after the call (layout false: written before layouts existed).
CREATE_META_LUA = """
local meta, created = KEYS[1], 0
if redis.call('HEXISTS', meta, 'blocks') == 0 then
  created = redis.call('HSETNX', meta, 'k', ARGV[1])
  redis.call('HSETNX', meta, 'blocks', ARGV[2])
  redis.call('HSETNX', meta, 'seq', 0)
  redis.call('HSETNX', meta, 'count', 0)
  redis.call('HSETNX', meta, 'layout', ARGV[3])
end
local v = redis.call('HMGET', meta, 'k', 'blocks', 'layout')
return {created, v[1], v[2], v[3]}
"""

# KEYS[1]: the index's meta hash, KEYS[2]: the load claim. ARGV: this loader's token, claim ms.
# Returns 'done' when the stored pages are loaded already, 'mine' when this loader now holds
# the claim (set for ARGV[2] ms, or renewed: it held it), else the holder's token. One step:
# a loader that finishes (``loaded`` set, then the claim deleted) is never followed by another.
CLAIM_LOAD_LUA = """
if redis.call('HGET', KEYS[1], 'loaded') then return 'done' end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return holder end
redis.call('SET', KEYS[2], ARGV[1], 'PX', tonumber(ARGV[2]))
return 'mine'
"""

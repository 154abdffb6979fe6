"""The shared frontier of the distributed profile: host-partitioned queues with leases, in Redis.

A reliable queue in the manner of Mercator's and Heritrix's frontiers, built from Redis
primitives; every step is one Lua script, so it is atomic across workers:

* **push** records the URL in the shared Bloom seen set *and* queues the request in one step
  (a worker killed between the two would otherwise leave a URL seen but never queued). A
  request is queued under its host (``download_slot`` meta, else the host name: Scrapy's own
  politeness key) in a sorted set ordered by priority, then FIFO.
* **hosts are owned**: a host belongs to one worker at a time. Its requests go only to that
  worker, so Scrapy's per-host delay, concurrency and AutoThrottle, and the host's learned
  template, live in one process as in a single-process crawl. A worker claims free hosts (those
  with queued requests and no owner: new hosts, a dead worker's) when its own hosts cannot fill
  its demand, and one per pop even when they can, unless another live worker has fewer hosts
  with queued work (that one takes it): a dead worker's hosts never wait for the others'
  queues to drain.
* **a worker with no work takes a host** (a *steal*): a worker whose pop found nothing and
  that owns no host with queued requests takes one from the live worker owning the most hosts
  with queued requests, if that worker owns at least two (it cannot fetch them all at once:
  one of its hosts waits while it serves the others); of those hosts, the one with the fewest
  requests in flight, then the deepest queue. A host is never shared: a worker owning a
  single host keeps it, so with as many busy hosts as workers a joiner waits (one worker per
  host is the politeness guarantee, not a shortage of work to share). The steal starts only
  once the old owner has no request of that host in flight (leased and not yet answered: a
  worker reports the leases whose download ended with its next pop, so a host changes hands
  without waiting for the old owner's storage to commit its pages) and the handover delay
  passed.
* **pop leases**: a popped request moves to the worker's lease hash; it is not gone until
  the worker acknowledges it (:meth:`LeasedFrontier.ack`) once its outcome is durable (page
  stored or dropped and committed, or failed for good). A worker's leases live as long as its
  membership (:mod:`crawler.cluster.worker`): when a worker stops renewing it, another
  worker reclaims it (:meth:`LeasedFrontier.reclaim`): its leases go back to their queues, its
  hosts are freed and held for the handover delay.
* ``meta`` counters ``queued`` and ``leased`` say exactly when the shared crawl is done: no
  request queued and none leased.
* **safe to retry** (``REDIS_RETRY_SECONDS``, :class:`crawler.backends.common.RedisRetry`): a
  call whose reply was lost may have run. Acks, requeues and releases are idempotent (an id no
  longer leased is skipped); a push or a pop carries a fresh token, and the same call sent
  again returns the first run's reply (the last push's in ``F:memo:{w}``, the last pop's in
  ``F:popmemo:{w}``) instead of queueing the request twice or leasing more requests.

Keys under the queue key ``F`` (``SCHEDULER_QUEUE_KEY``): ``F:meta`` (seq, queued, leased),
``F:req`` (id -> ``host\\nscore\\nJSON request``), ``F:q:{host}`` (ids by score), ``F:owner``
(host -> worker), ``F:free`` (unowned hosts with work, by time), ``F:active:{w}`` (hosts of w
with queued requests), ``F:owned:{w}``, ``F:lease:{w}`` (id -> host, ``!host`` once its
download ended), ``F:busy:{w}`` (host -> w's leases on it whose download has not ended),
``F:hold`` (host -> not before, ms), ``F:prev`` (host -> the owner it was taken from, the
first one while the host is taken again before it was served). Times
are the Redis server's clock (``TIME``), one clock for every worker. Requests are JSON
(:mod:`crawler.cluster.serializer`), never pickles. The layout may change between versions.
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.request import request_from_dict

from crawler import meta
from crawler.backends.common import RedisBacked
from crawler.backends.redis import BLOOM_FN, clear_namespace
from crawler.requestqueue import request_dict

if TYPE_CHECKING:
    import redis
    from scrapy import Spider

    from crawler.backends.redis import RedisSeenSet

logger = logging.getLogger(__name__)

#: The most free hosts one pop may claim when the worker has no host with work.
MAX_CLAIMS = 4
#: Requests a frontier keeps to take back when it pops them itself (:meth:`LeasedFrontier._keep`):
#: past this many the kept ones are forgotten (decoded when popped, as any other).
KEPT_MAX = 4096
#: The types of ``meta`` and ``cb_kwargs`` values JSON gives back equal.
_PLAIN = frozenset({str, int, float, bool, type(None)})

_COMMON = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function alive(workers, w, now)
  local exp = redis.call('ZSCORE', workers, w)
  return exp and tonumber(exp) >= now
end
local function queue_host(F, h, now)
  local owner = redis.call('HGET', F .. ':owner', h)
  if owner then redis.call('SADD', F .. ':active:' .. owner, h)
  else redis.call('ZADD', F .. ':free', 'NX', now, h) end
end
local function unbusy(F, w, h)
  if redis.call('HINCRBY', F .. ':busy:' .. w, h, -1) <= 0 then
    redis.call('HDEL', F .. ':busy:' .. w, h)
  end
end
local function unlease(F, w, id)
  local h = redis.call('HGET', F .. ':lease:' .. w, id)
  if not h then return nil end
  redis.call('HDEL', F .. ':lease:' .. w, id)
  if string.sub(h, 1, 1) == '!' then h = string.sub(h, 2) else unbusy(F, w, h) end
  redis.call('HINCRBY', F .. ':meta', 'leased', -1)
  return h
end
local function fetched(F, w, id)
  local h = redis.call('HGET', F .. ':lease:' .. w, id)
  if not h or string.sub(h, 1, 1) == '!' then return end
  redis.call('HSET', F .. ':lease:' .. w, id, '!' .. h)
  unbusy(F, w, h)
end
local function ack(F, w, id)
  if not unlease(F, w, id) then return 0 end
  redis.call('HDEL', F .. ':req', id)
  return 1
end
local function requeue(F, w, id, now)
  if not unlease(F, w, id) then return 0 end
  local rec = redis.call('HGET', F .. ':req', id)
  if not rec then return 0 end
  local h, score = string.match(rec, '^([^\\n]*)\\n([^\\n]*)\\n')
  redis.call('ZADD', F .. ':q:' .. h, tonumber(score), id)
  redis.call('HINCRBY', F .. ':meta', 'queued', 1)
  queue_host(F, h, now)
  return 1
end
local function release(F, w, now, hold_ms)
  local busy = redis.call('HGETALL', F .. ':busy:' .. w)
  for i = 1, #busy, 2 do redis.call('HSET', F .. ':hold', busy[i], now + hold_ms) end
  local n = 0
  for _, id in ipairs(redis.call('HKEYS', F .. ':lease:' .. w)) do
    n = n + requeue(F, w, id, now)
  end
  for _, h in ipairs(redis.call('SMEMBERS', F .. ':owned:' .. w)) do
    if redis.call('HGET', F .. ':owner', h) == w then
      redis.call('HDEL', F .. ':owner', h)
      if redis.call('EXISTS', F .. ':q:' .. h) == 1 then
        redis.call('ZADD', F .. ':free', 'NX', now, h)
      end
    end
  end
  for _, part in ipairs({':owned:', ':active:', ':busy:', ':lease:', ':memo:', ':popmemo:'}) do
    redis.call('DEL', F .. part .. w)
  end
  return n
end
"""

# KEYS: F, bloom meta (or F when no request has a seen check). ARGV: grow, shard bits, worker,
# token ("" none), then five per request: host, priority, request JSON, fp ("" for dont_filter),
# lease id of the request it replaces ("" none). Each request in turn: the lease acknowledged,
# the URL test-and-set in the Bloom seen set, the request queued unless it was present. Returns
# {present, count} per request, in order (a URL twice in the batch: the second is present). A
# call whose token is the worker's last one already ran (its reply was lost): the first run's
# reply is returned, nothing is queued again.
_PUSH_MANY = BLOOM_FN + _COMMON + """
local F, W, token = KEYS[1], ARGV[3], ARGV[4]
local now = now_ms()
local memo = (W ~= '' and token ~= '') and (F .. ':memo:' .. W) or nil
if memo then
  local last = redis.call('HGET', memo, 'many')
  if last then
    local tok, reply = string.match(last, '^(%S+) (.*)$')
    if tok == token then return cjson.decode(reply) end
  end
end
local out, grow, bits = {}, ARGV[1] == '1', tonumber(ARGV[2])
for i = 5, #ARGV, 5 do
  local host, fp, lease = ARGV[i], ARGV[i + 3], ARGV[i + 4]
  if lease ~= '' then ack(F, W, lease) end
  local present, count = 0, -1
  if fp ~= '' then present, count = bloom_check(KEYS[2], fp, 'add', grow, bits) end
  if present ~= 1 then
    local id = redis.call('HINCRBY', F .. ':meta', 'seq', 1)
    local score = -tonumber(ARGV[i + 1]) * 4294967296 + (id % 4294967296)
    redis.call('HSET', F .. ':req', id, host .. '\\n' .. score .. '\\n' .. ARGV[i + 2])
    redis.call('ZADD', F .. ':q:' .. host, score, id)
    redis.call('HINCRBY', F .. ':meta', 'queued', 1)
    queue_host(F, host, now)
  end
  out[#out + 1] = present
  out[#out + 1] = count
end
if memo then redis.call('HSET', memo, 'many', token .. ' ' .. cjson.encode(out)) end
return out
"""

# KEYS: F, workers. ARGV: worker, how many, may steal (0/1), handover delay ms, most claims,
# token, then lease ids whose download ended. Returns {status, stolen host or '', id, record,
# id, record, ...}; status -1: lease lost. The reply is kept under the token until the next
# pop: a pop sent again with the same token (its reply was lost) gets the same leases.
_POP = _COMMON + """
local F, W = KEYS[1], ARGV[1]
local want, may_steal, hold_ms = tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local now = now_ms()
if not alive(KEYS[2], W, now) then return {-1, ''} end
local memo = F .. ':popmemo:' .. W
if redis.call('LINDEX', memo, 0) == ARGV[6] then return redis.call('LRANGE', memo, 1, -1) end
for i = 7, #ARGV do fetched(F, W, ARGV[i]) end
local out, active, meta = {1, ''}, F .. ':active:' .. W, F .. ':meta'
local got = 0
local function take(h, n)
  local prev = redis.call('HGET', F .. ':prev', h)
  if prev then
    if tonumber(redis.call('HGET', F .. ':busy:' .. prev, h) or '0') > 0 then return end
    redis.call('HDEL', F .. ':prev', h)
    redis.call('HSET', F .. ':hold', h, now + hold_ms)
  end
  local held = redis.call('HGET', F .. ':hold', h)
  if held then
    if tonumber(held) > now then return end
    redis.call('HDEL', F .. ':hold', h)
  end
  local popped = redis.call('ZPOPMIN', F .. ':q:' .. h, n)
  for i = 1, #popped, 2 do
    local id = popped[i]
    local rec = redis.call('HGET', F .. ':req', id)
    redis.call('HINCRBY', meta, 'queued', -1)
    if rec then
      redis.call('HSET', F .. ':lease:' .. W, id, h)
      redis.call('HINCRBY', F .. ':busy:' .. W, h, 1)
      redis.call('HINCRBY', meta, 'leased', 1)
      out[#out + 1] = id
      out[#out + 1] = rec
      got = got + 1
    end
  end
  if redis.call('EXISTS', F .. ':q:' .. h) == 0 then redis.call('SREM', active, h) end
end
local hosts = redis.call('SMEMBERS', active)
if #hosts > 0 then
  local per = math.ceil(want / #hosts)
  for _, h in ipairs(hosts) do
    if got >= want then break end
    take(h, math.min(per, want - got))
  end
end
local claims = (#hosts == 0) and tonumber(ARGV[5]) or 1
-- own hosts filled the demand: a free host (a dead worker's) must not wait for their queues to
-- drain: one is claimed anyway by a worker no live worker has fewer hosts with work than
local extra = got >= want and redis.call('ZCARD', F .. ':free') > 0
if extra then
  local mine = #hosts
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')) do
    if w ~= W and redis.call('SCARD', F .. ':active:' .. w) < mine then extra = false; break end
  end
end
while claims > 0 and (got < want or extra) do
  extra = false
  local free = redis.call('ZPOPMIN', F .. ':free', 1)
  if #free == 0 then break end
  local h = free[1]
  claims = claims - 1
  if redis.call('EXISTS', F .. ':q:' .. h) == 1 then
    redis.call('HSET', F .. ':owner', h, W)
    redis.call('SADD', F .. ':owned:' .. W, h)
    redis.call('SADD', active, h)
    if got < want then take(h, want - got) end
  end
end
if got == 0 and may_steal and redis.call('SCARD', active) == 0 then
  local victim, most = nil, 1
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')) do
    if w ~= W then
      local n = redis.call('SCARD', F .. ':active:' .. w)
      if n > most then victim, most = w, n end
    end
  end
  if victim then  -- its host with the fewest requests in flight (the soonest handed over),
    -- of those the deepest queue
    local pick, pick_busy, pick_depth = nil, nil, nil
    for _, h in ipairs(redis.call('SMEMBERS', F .. ':active:' .. victim)) do
      local b = tonumber(redis.call('HGET', F .. ':busy:' .. victim, h) or '0')
      local d = redis.call('ZCARD', F .. ':q:' .. h)
      if not pick or b < pick_busy or (b == pick_busy and d > pick_depth) then
        pick, pick_busy, pick_depth = h, b, d
      end
    end
    redis.call('SREM', F .. ':active:' .. victim, pick)
    redis.call('SREM', F .. ':owned:' .. victim, pick)
    redis.call('HSET', F .. ':owner', pick, W)
    redis.call('SADD', F .. ':owned:' .. W, pick)
    redis.call('SADD', active, pick)
    -- a host stolen again before its new owner served it: the first owner may still be in
    -- flight on it (the new one is not), so the first stays the one to wait for
    redis.call('HSETNX', F .. ':prev', pick, victim)
    out[2] = pick
  end
end
redis.call('DEL', memo)
redis.call('RPUSH', memo, ARGV[6], unpack(out))
return out
"""

# KEYS: F. ARGV: worker, lease ids. Returns how many were acknowledged.
_ACK = _COMMON + """
local n = 0
for i = 2, #ARGV do n = n + ack(KEYS[1], ARGV[1], ARGV[i]) end
return n
"""

# KEYS: F. ARGV: worker, lease ids to put back in the queue.
_REQUEUE = _COMMON + """
local now, n = now_ms(), 0
for i = 2, #ARGV do n = n + requeue(KEYS[1], ARGV[1], ARGV[i], now) end
return n
"""

# KEYS: F, workers. ARGV: worker, handover delay ms, then lease ids already done (acknowledged).
# A live worker leaving (clean close), or a dead one reclaimed: its leases go back to the queue,
# its hosts are freed (those it had requests in flight on are held for the delay).
_RELEASE = _COMMON + """
local F, w = KEYS[1], ARGV[1]
local now = now_ms()
for i = 3, #ARGV do ack(F, w, ARGV[i]) end
local n = release(F, w, now, tonumber(ARGV[2]))
redis.call('ZREM', KEYS[2], w)
return n
"""


def host_key(request: Request) -> str:
    """The politeness key of a request: its ``download_slot`` meta, else its host name (the
    key of Scrapy's download slots), lower-cased."""
    slot = request.meta.get("download_slot")
    if slot:
        return str(slot).lower()
    return (urlparse_cached(request).hostname or "").lower()


class LeaseLost(RuntimeError):
    """This worker's membership expired and others reclaimed its leases (it was paused or cut
    off longer than ``DISTRIBUTED_LEASE_SECONDS``)."""


class LeasedFrontier(RedisBacked):
    """The shared, leased, host-partitioned request queue (see the module docstring).

    Built by the scheduler with scrapy-redis's queue arguments (``server``, ``spider``, ``key``,
    ``serializer``); :attr:`worker` must be set before :meth:`pop_many`.
    """

    def __init__(
        self, server: redis.Redis, spider: Spider | None, key: str, serializer: Any = None,
        workers_key: str = "", url: str = "",
    ) -> None:  # fmt: skip
        if serializer is None:
            from crawler.cluster import serializer as json_serializer

            serializer = json_serializer
        super().__init__(server, key, url)
        self.server, self.key = server, key  # scrapy-redis's names for client and base
        self.spider, self.serializer = spider, serializer
        self.workers_key = workers_key or key + ":workers"
        self.worker = ""
        self.handover_ms = 0
        self._push_many = server.register_script(_PUSH_MANY)
        self._pop = server.register_script(_POP)
        self._ack = server.register_script(_ACK)
        self._requeue = server.register_script(_REQUEUE)
        self._release = server.register_script(_RELEASE)
        # tokens of pushes and pops (the _PUSH_MANY comment): unique to this frontier, cheaper than
        # a uuid4 per call; compared only with this worker's last one
        self._token_base = uuid.uuid4().hex[:16]
        self._tokens = itertools.count(1)
        self._kept: dict[str, Request] = {}  # JSON of a request queued here -> the request

    def _token(self) -> str:
        """A token no other call of this frontier (nor another frontier) carries."""
        return f"{self._token_base}{next(self._tokens):x}"

    # --- requests as JSON ---------------------------------------------------------------------
    def _encode(self, request: Request) -> str:
        data = request_dict(request, self.spider)
        data.get("meta", {}).pop(meta.LEASE, None)
        payload = str(self.serializer.dumps(data))
        self._keep(payload, request)
        return payload

    def _decode(self, lease: str, record: bytes | str) -> Request:
        text = record.decode() if isinstance(record, bytes) else record
        payload = text.split("\n", 2)[2]
        request = self._kept.pop(payload, None)
        if request is None:
            request = request_from_dict(self.serializer.loads(payload), spider=self.spider)
        request.meta[meta.LEASE] = lease
        return request

    def _keep(self, payload: str, request: Request) -> None:
        """Keep a request this worker queues, to take it back instead of decoding its JSON
        when this worker pops it (the usual case: a host's links are queued and popped by the
        worker that owns the host). Decoding costs JSON parsing and Scrapy's ``Request()``
        with its URL escaping again: 19 µs a request measured here, and in a one-worker crawl
        of the link-heavy bench every pop took its request back. Only a request that decodes
        to an equal one is kept: Scrapy's own class, no cookies, no flags, ``meta`` and
        ``cb_kwargs`` of plain values (JSON gives a list for a tuple, a copy for a list or
        dict); the others are decoded as before. Bounded by :data:`KEPT_MAX` (a request
        queued here and popped by another worker, or refused as seen, is forgotten when the
        store is emptied)."""
        if (type(request) is not Request or request.cookies or request.flags
                or any(type(v) not in _PLAIN for v in request.meta.values())
                or any(type(v) not in _PLAIN for v in request.cb_kwargs.values())):
            return
        kept = self._kept
        if len(kept) >= KEPT_MAX:
            kept.clear()
        kept[payload] = request

    # --- pushing ----------------------------------------------------------------------------
    def push_new(
        self, request: Request, fp: bytes | None = None, seen: RedisSeenSet | None = None
    ) -> bool:
        """:meth:`push_many` of one request: True when it was queued."""
        return self.push_many([(request, fp)], seen)[0]

    def push_many(
        self, items: list[tuple[Request, bytes | None]], seen: RedisSeenSet | None = None
    ) -> list[bool]:
        """Queue each ``(request, fp)`` in turn unless ``seen`` already holds ``fp`` (recorded
        in the same step; ``fp`` None: no seen check, as for ``dont_filter``), in one Redis
        call; whether each was queued, in order. A request carrying a lease (a redirect or retry
        of a popped request) acknowledges that lease in the same step: it is replaced by this
        one. The seen set's bookkeeping (:meth:`RedisSeenSet.added`) is done per request."""
        if not items:
            return []
        keys, args = self.push_call(items, seen)
        return self.pushed(items, seen, self.run_push(keys, args))

    def push_call(self, items: list[tuple[Request, bytes | None]],
                  seen: RedisSeenSet | None = None) -> tuple[list[str], list[Any]]:  # fmt: skip
        """``(keys, args)`` of one :meth:`push_many` of ``items`` (not empty), with a fresh
        token: for :meth:`run_push`, or for :attr:`push_script` on the event loop's connection.
        Sent again, the same keys and args get the first run's reply back (``F:memo:{w}``),
        not the requests queued twice, as long as this worker made no other push meanwhile."""
        checked = seen is not None and any(fp is not None for _, fp in items)
        keys = [self.key, seen.base if checked and seen is not None else self.key]
        args: list[Any] = [0, 0, self.worker, self._token()]  # the same on a retry: run once
        for request, fp in items:
            lease = request.meta.get(meta.LEASE) or ""  # read first: _encode drops it from meta
            fp_arg: Any = ""
            if fp is not None and seen is not None:
                fp_arg, grow, bits = seen.add_args(fp)
                args[0], args[1] = grow, bits
            args += [host_key(request), int(request.priority), self._encode(request), fp_arg,
                     lease]
        return keys, args

    @property
    def push_script(self) -> Any:
        """The push's script (redis-py's ``Script``: its ``sha`` and source)."""
        return self._push_many

    def run_push(self, keys: list[str], args: list[Any]) -> Any:
        """The reply of one push made by :meth:`push_call`, through redis-py (retried)."""
        return self._run(self._push_many, keys, args)

    def pushed(self, items: list[tuple[Request, bytes | None]], seen: RedisSeenSet | None,
               out: Any) -> list[bool]:  # fmt: skip
        """Whether each of ``items`` was queued, from the reply of their push."""
        queued = []
        for (_, fp), present, count in zip(items, out[::2], out[1::2], strict=True):
            if seen is not None and fp is not None:
                queued.append(not seen.added(present, count))
            else:
                queued.append(not present)
        return queued

    def push(self, request: Request) -> None:
        """scrapy-redis's queue API: queue without a seen check."""
        self.push_new(request)

    # --- popping and leases -----------------------------------------------------------------
    def pop_many(
        self, n: int, steal: bool = True, fetched: list[str] | None = None
    ) -> tuple[list[Request], str | None]:
        """Up to ``n`` leased requests of this worker's hosts (claiming free hosts, or taking
        one from a worker owning several when it has none), and the host taken, if any. ``fetched``:
        leases whose download ended since the last pop (no longer in flight for a steal).
        Raises :class:`LeaseLost` when this worker's membership expired."""
        return self.popped(self.run_pop(*self.pop_call(n, steal, fetched)))

    def pop_call(self, n: int, steal: bool = True,
                 fetched: list[str] | None = None) -> tuple[list[str], list[Any]]:  # fmt: skip
        """``(keys, args)`` of one :meth:`pop_many`, with a fresh token: for :meth:`run_pop`,
        or for the pop script (:attr:`pop_script`) sent on the event loop's connection. Sent
        again, the same keys and args get the first run's reply back (``F:popmemo:{w}``), not
        more leases, as long as this worker made no other pop meanwhile."""
        return [self.key, self.workers_key], [
            self.worker, n, int(steal), self.handover_ms, MAX_CLAIMS, self._token(),
            *(fetched or ())]  # fmt: skip

    @property
    def pop_script(self) -> Any:
        """The pop's script (redis-py's ``Script``: its ``sha`` and source)."""
        return self._pop

    def run_pop(self, keys: list[str], args: list[Any]) -> Any:
        """The reply of one pop made by :meth:`pop_call`, through redis-py (retried)."""
        return self._run(self._pop, keys, args)

    def popped(self, out: Any) -> tuple[list[Request], str | None]:
        """``(requests, host taken or None)`` of a pop's reply; :class:`LeaseLost` when the
        reply says this worker's membership expired."""
        if int(out[0]) < 0:
            raise LeaseLost(self.worker)
        stolen = out[1].decode() if isinstance(out[1], bytes) else out[1]
        requests = []
        for i in range(2, len(out), 2):
            lease = out[i].decode() if isinstance(out[i], bytes) else str(out[i])
            requests.append(self._decode(lease, out[i + 1]))
        return requests, stolen or None

    def pop(self, timeout: int = 0) -> Request | None:
        """scrapy-redis's queue API: one leased request, or None."""
        requests, _ = self.pop_many(1, steal=False)
        return requests[0] if requests else None

    def ack(self, leases: list[str], worker: str | None = None) -> int:
        """Acknowledge leases whose outcome is durable; unknown ids are ignored."""
        if not leases:
            return 0
        return int(self._run(self._ack, [self.key], [worker or self.worker, *leases]))

    def requeue(self, leases: list[str]) -> int:
        """Put leased requests back in their queues (an orphan, found at idle)."""
        if not leases:
            return 0
        return int(self._run(self._requeue, [self.key], [self.worker, *leases]))

    def release(self, worker: str | None = None, done: list[str] | None = None) -> int:
        """Give up a worker (this one, at a clean close; or a dead one): ``done`` leases are
        acknowledged, the others queued again; its hosts freed; its membership removed."""
        worker = worker or self.worker
        return int(self._run(self._release, [self.key, self.workers_key],
                             [worker, self.handover_ms, *(done or [])]))  # fmt: skip

    def held_by(self, worker: str) -> list[str]:
        """Lease ids ``worker`` holds."""
        ids = self._call("hkeys", f"{self.key}:lease:{worker}")
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    def leases_of(self, worker: str) -> dict[str, str]:
        """Lease id -> canonical URL of every request ``worker`` holds (for a reclaim)."""
        ids = self.held_by(worker)
        if not ids:
            return {}
        urls = {}
        for lease, record in zip(ids, self._call("hmget", f"{self.key}:req", ids), strict=True):
            if record:
                text = record.decode() if isinstance(record, bytes) else record
                data = self.serializer.loads(text.split("\n", 2)[2])
                urls[lease] = (data.get("meta") or {}).get("canonical_url") or data["url"]
        return urls

    # --- figures ------------------------------------------------------------------------------
    def counts(self) -> tuple[int, int]:
        """``(queued, leased)`` over the whole crawl."""
        queued, leased = self._call("hmget", f"{self.key}:meta", ["queued", "leased"])
        return int(queued or 0), int(leased or 0)

    def __len__(self) -> int:
        return self.counts()[0]

    def clear(self) -> None:
        clear_namespace(self.server, self.key)


def handover_ms(settings: Any) -> int:
    """How long a host waits after changing owner: the download delay (AutoThrottle's start
    delay when larger), so two workers never reach one host closer than one crawler would."""
    delay = float(settings.getfloat("DOWNLOAD_DELAY", 0.0))
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        delay = max(delay, float(settings.getfloat("AUTOTHROTTLE_START_DELAY", 5.0)))
    return math.ceil(delay * 1000)

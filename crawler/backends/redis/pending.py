"""Pending entries of the shared content index: a kept page counts for other workers only once
its worker's storage committed it.

A page kept by worker ``owner`` enters the index *pending* (keys ``:p``, ``:pc`` and
``:pw:{worker}``, :mod:`crawler.backends.redis.keys`); another worker whose page matches it gets
:data:`crawler.vocab.PENDING` and asks again later. :class:`PendingEntries` is that part of
:class:`crawler.backends.redis.index.RedisContentIndex`: :meth:`~PendingEntries.commit` (the
owner's storage committed these pages), :meth:`~PendingEntries.pending_of` and
:meth:`~PendingEntries.reclaim` (a dead worker's entries, by
:mod:`crawler.cluster.worker`; a leaving worker's own at close).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from crawler.backends.common import NOT_ON_LOOP
from crawler.backends.redis.connection import batched, text
from crawler.backends.redis.core import LOAD_BATCH, IndexCore
from crawler.backends.redis.index_lib_lua import INDEX_LIB

logger = logging.getLogger(__name__)

# ARGV after the specs: the worker, then canonical URLs its storage batch committed.
COMMIT_LUA = (
    INDEX_LIB
    + """
local C = ctx(KEYS[1])
local me, done = ARGV[C.next], 0
for i = C.next + 1, #ARGV do done = done + commit(C, me, ARGV[i]) end
return done
"""
)

# ARGV after the specs: a dead worker, then the canonical URLs of its pending entries that
# storage holds: those are committed, every other pending entry of it is removed.
RECLAIM_LUA = (
    INDEX_LIB
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


class PendingEntries(IndexCore):
    """Commit and reclaim of pending entries (module docstring)."""

    def _register_scripts(self) -> None:
        self._commit = self.client.register_script(COMMIT_LUA)
        self._reclaim = self.client.register_script(RECLAIM_LUA)
        super()._register_scripts()

    def commit(self, canonical_urls: Iterable[str]) -> int:
        """This worker's storage committed these pages: their entries count for everyone."""
        done = 0
        for batch in batched(canonical_urls, LOAD_BATCH):
            done += int(self._run(self._commit, [self.base], [*self._head, self.owner, *batch]))
        return done

    async def commit_async(self, canonical_urls: Iterable[str]) -> int:
        """:meth:`commit`, each script call sent on the event loop's connection and awaited:
        the reactor serves pages while Redis runs it (redis-py held the reactor ~0.9 ms a
        storage batch on loopback). A failure of that connection sends what is left through
        redis-py, retried as :meth:`commit` is (committing twice is harmless: an entry
        committed is no longer pending, and the second run counts it 0). Without a running
        asyncio loop, or a server redis-py reaches otherwise than by plain TCP:
        :meth:`commit`."""
        batches = list(batched(canonical_urls, LOAD_BATCH))
        done = 0
        for i, batch in enumerate(batches):
            answer = await self._run_on_loop(self._commit, [self.base],
                                             [*self._head, self.owner, *batch], logger,
                                             "content index", "the commit")  # fmt: skip
            if answer is NOT_ON_LOOP:
                return done + self.commit(url for rest in batches[i:] for url in rest)
            done += int(answer)
        return done

    def pending_of(self, worker: str) -> list[str]:
        """Canonical URLs of the entries ``worker`` kept and has not committed."""
        members = self._call("hkeys", f"{self.base}:pw:{worker}")
        return sorted(text(m) for m in members)

    def reclaim(self, worker: str, stored: Iterable[str]) -> int:
        """A dead worker's pending entries: the ``stored`` ones (canonical URLs storage holds)
        count from now on, the others are removed; returns how many were removed."""
        return int(self._run(self._reclaim, [self.base], [*self._head, worker, *stored]))

"""The shared content index of the distributed profile: exact-copy and near-duplicate
decisions over the pages every worker kept, in Redis.

:class:`RedisContentIndex` satisfies :class:`crawler.backends.ContentIndex` with the decisions of
:class:`crawler.backends.local.LocalContentIndex` (same rules, same ties). Each decision is one
Lua script (:mod:`crawler.backends.redis.index_lua`), so N crawler processes on one server never
both keep a duplicate pair. This module holds the decisions (check, check-and-add, remove,
replace); the class also loads pages (:mod:`crawler.backends.redis.loading`) and keeps them
pending until their worker's storage commits them (:mod:`crawler.backends.redis.pending`). Keys
and records: :mod:`crawler.backends.redis.keys`.
"""

from __future__ import annotations

import logging
from typing import Any

from crawler.backends.common import NOT_ON_LOOP, namespace, redis_url, retry_policy
from crawler.backends.redis.connection import connect, text
from crawler.backends.redis.index_lua import (
    CHECK_AND_ADD_LUA,
    FORGET_LUA,
    REMOVE_LUA,
    REPLACE_LUA,
)
from crawler.backends.redis.keys import page_args
from crawler.backends.redis.loading import IndexLoading
from crawler.backends.redis.pending import PendingEntries
from crawler.content.simindex import settings_params, url_key
from crawler.vocab import Match, PageSignature

logger = logging.getLogger(__name__)

MAX_GONE = 64  # kept pages storage no longer knows, forgotten in one check before keeping
_UNASKED = object()  # RedisContentIndex._decide: no reply to the question yet


class RedisContentIndex(IndexLoading, PendingEntries):
    """The content index of :mod:`crawler.backends.local`, shared in Redis (module docstring).

    ``check_and_add`` is one Lua script: the exact check, the near check over the block tables
    and the insert happen atomically, so two workers never both keep a near-duplicate pair.

    **What Redis holds per kept page** (about 50 bytes at 10**6 pages, ``bench.redisindex``):
    in each of the ``blocks`` tables the fingerprint's bytes outside its bucket (6 at k = 3),
    plus a 4-byte sequence number in table 0 (ties go to the earliest kept); 7 bytes of its
    content key in the exact table; about 1.2 bytes in a Bloom filter of canonical keys.
    Buckets are fields of one hash per table (65,536 at k = 3), so the fixed cost is about
    55 bytes per bucket. The URLs of kept pages and their earlier versions are *not* in Redis:
    they come from ``resolver`` (the crawl's storage,
    :class:`~crawler.backends.redis.core.KeptPages`) when a drop names its kept page, or when
    the canonical-key filter says a page may have an earlier version.

    Without a resolver (no storage: tests, tools) the index is *standalone*: every kept page
    also keeps its URL (``:u``) and its canonical key's version (``:c``), about 100 bytes more.
    With one, only pages whose fingerprint storage does not hold (re-fingerprinted by the
    template filter, kept after a young-host check) keep those.

    **Pending entries.** A page kept by worker ``owner`` enters the index *pending*
    (``:p`` id -> worker and URL, ``:pc`` canonical key -> version, ``:pw:{worker}`` canonical
    URL -> key) until that worker's storage batch commits it (:meth:`commit`). Another worker
    whose page matches a pending entry gets :data:`~crawler.vocab.PENDING` instead of a
    decision and asks again later: no page is dropped against a page that is not stored. When
    the owner dies, :meth:`reclaim` commits the entries storage holds and removes the rest, so
    the pages waiting on them are decided again. Loaded entries, and every entry of an index
    without an owner, count at once.
    """

    #: :meth:`check_and_add` is a round trip: True, the decider awaits
    #: :meth:`check_and_add_async` (the reactor serves other pages meanwhile) and takes its
    #: decisions one at a time in arrival order (:mod:`crawler.dedup.gate`), so every page
    #: reads the template state and the index as it would asked inline
    #: (``tests/test_distributed_decisions.py``).
    off_reactor = True

    def _register_scripts(self) -> None:
        self._check = self.client.register_script(CHECK_AND_ADD_LUA)
        self._forget = self.client.register_script(FORGET_LUA)
        self._replace = self.client.register_script(REPLACE_LUA)
        self._remove = self.client.register_script(REMOVE_LUA)
        super()._register_scripts()

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RedisContentIndex:
        """From ``REDIS_URL``, the namespace settings, ``SIMHASH_MAX_DISTANCE``/``_BLOCKS``;
        ``owner=`` names the worker whose kept pages stay pending until committed,
        ``resolver=`` the storage that holds kept pages' URLs."""
        given = "k" in kwargs and "blocks" in kwargs  # read once by the caller
        k, blocks = (kwargs["k"], kwargs["blocks"]) if given else settings_params(settings)
        url = redis_url(settings)
        policy = retry_policy(settings)
        index = cls(
            connect(url, policy.timeout),
            namespace(settings),
            k=kwargs.get("k", k),
            blocks=kwargs.get("blocks", blocks),
            url=url,
            owner=str(kwargs.get("owner") or ""),
            resolver=kwargs.get("resolver"),
        )
        index.retrying(policy)
        return index

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

    async def check_and_add_async(self, page: PageSignature) -> Match | None:
        """:meth:`check_and_add`, its script call sent on the event loop's connection
        (:class:`~crawler.backends.redis.aio.LoopRedis`) and awaited, so the reactor serves
        other pages during the round trip. What needs more (the version storage holds, a
        kept page storage no longer has) and every failure of the loop's connection go on
        with redis-py, on the caller's thread, as :meth:`check_and_add` (a decision is safe to
        run twice). Without a running asyncio loop, or a server redis-py reaches otherwise than
        by plain TCP: :meth:`check_and_add`."""
        args = self._page_args(page)
        found = await self._run_on_loop(self._check, [self.base],
                                        self._check_args(args, b"", False), logger,
                                        "content index", "the question")  # fmt: skip
        if found is NOT_ON_LOOP:  # the same question through redis-py: retried, its errors
            return self._decide(page, query_only=False, args=args)
        return self._decide(page, query_only=False, args=args, found=found)

    def _page_args(self, page: PageSignature) -> list[Any]:
        canonical = page.canonical_url or page.url
        return page_args(page.url, canonical, page.content_hash, page.simhash, page.names)

    def _check_args(self, args: list[Any], old: bytes, query_only: bool) -> list[Any]:
        """ARGV of :data:`CHECK_AND_ADD_LUA` for a page's :func:`page_args`."""
        return [*self._head, self.k, self.owner, *args, "1" if self.standalone else "", old,
                self._ck_filter.shard_bits, "1" if query_only else ""]  # fmt: skip

    def _decide(self, page: PageSignature, query_only: bool, args: list[Any] | None = None,
                found: Any = _UNASKED) -> Match | None:
        """Ask the script until it decides; ``found``: its reply to the first question when
        that was asked elsewhere (:meth:`check_and_add_async`), ``args`` the page's
        :func:`page_args` when already made."""
        args = self._page_args(page) if args is None else args
        old = b""
        for _ in range(MAX_GONE + 2):
            if found is _UNASKED:
                found = self._run(self._check, [self.base],
                                  self._check_args(args, old, query_only))  # fmt: skip
            reply, found = found, _UNASKED
            if not reply:
                return None
            reason = text(reply[0])
            if reason == "need_old":
                old = self._stored_version(args[0])
                continue
            match = self._match(reason, reply)
            if match is not None:
                return match
            # the kept page is gone from storage: forgotten, decide again
        raise RuntimeError(f"content index: too many vanished kept pages for {page.url}")

    def _match(self, reason: str, found: list[Any]) -> Match | None:
        held, ident, distance = text(found[1]), bytes(found[2]), int(found[3])
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
        args = page_args(page.url, canonical, page.content_hash, page.simhash, page.names)
        kept_ck8 = url_key(kept_canonical).to_bytes(8, "big")
        kept_old, own_old = self._stored_version(kept_ck8), self._stored_version(args[0])
        self._run(self._replace, [self.base], [
            *self._head, self.owner, kept_ck8, kept_old, *args, "1" if self.standalone else "",
            own_old, self._ck_filter.shard_bits, kept_canonical])  # fmt: skip

    def __len__(self) -> int:
        return int(self._call("hget", self.base + ":meta", "count") or 0)

"""What every part of the shared content index stands on.

:class:`IndexCore` holds the index's client and parameters (k, blocks, the worker ``owner``, the
``resolver``), creates or checks the namespace's ``:meta`` hash (in one script call, so workers
started at the same instant all read it complete) and answers the version storage holds for a
canonical key. :class:`crawler.backends.redis.index.RedisContentIndex` is built on it
from three parts, each registering its own Lua scripts (:meth:`IndexCore._register_scripts`):
the decisions (:mod:`~crawler.backends.redis.index`), the loads
(:mod:`~crawler.backends.redis.loading`) and the pending entries
(:mod:`~crawler.backends.redis.pending`). :class:`KeptPages` is what the index asks storage.
"""

from __future__ import annotations

from typing import Protocol

import redis

from crawler import config
from crawler.backends.common import RedisBacked, RedisRetry
from crawler.backends.redis.connection import namespace_mismatch
from crawler.backends.redis.index_lua import CREATE_META_LUA
from crawler.backends.redis.keys import (
    CK_BLOOM_CAPACITY,
    CK_BLOOM_RATE,
    LAYOUT,
    bucket_specs,
    version,
)
from crawler.backends.redis.seen import RedisSeenSet

LOAD_BATCH = 500  # records (or canonical URLs) per script call


class KeptPages(Protocol):
    """Where the Redis index finds what it does not hold (e.g. :class:`crawler.storage.Store`).

    ``kept_page(kind, key)``: ``(url, canonical_url, simhash, canonical_link)`` of the latest
    stored page with that SimHash (``kind`` ``"s"``) or content key (``"x"``), None when none
    is stored (``canonical_link``: the page it names canonical, ``""`` none).
    ``latest_version(canonical_key)``: ``(simhash, content_key)`` of the latest stored page
    with that canonical key (either None when absent), None when no page has it."""

    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None, str] | None: ...

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None: ...


class IndexCore(RedisBacked):
    """The client, parameters and namespace check of a shared content index (module
    docstring); ``_head`` (the bucket specs, the first arguments of every index script)."""

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
        self._register_scripts()
        self._create_or_check()
        # canonical keys kept so far: a page whose key is absent has no earlier version
        self._ck_filter = RedisSeenSet(client, self.base + ":ck", capacity=CK_BLOOM_CAPACITY,
                                       error_rate=CK_BLOOM_RATE, on_full="grow", url=url)
        self._head = [len(self._specs), *self._specs]

    def retrying(self, policy: RedisRetry) -> IndexCore:
        """Retry the calls of the index and of its canonical-key filter under ``policy``."""
        self._ck_filter.retrying(policy)
        super().retrying(policy)
        return self

    def _register_scripts(self) -> None:
        """Register the Lua scripts of each part; a part adds its own, then calls ``super()``."""

    def _create_or_check(self) -> None:
        """Create the namespace's parameters, or check them, in one script call
        (:data:`CREATE_META_LUA`): workers started at the same instant all read the complete
        record, so they all join or are refused with one line."""
        script = self.client.register_script(CREATE_META_LUA)
        _, k, blocks, layout = self._run(script, [self.base + ":meta"],
                                         [self.k, self.blocks, LAYOUT])  # fmt: skip
        if int(k) != self.k:
            raise namespace_mismatch("SIMHASH_MAX_DISTANCE", self.k, int(k), self.base)
        if int(blocks) != self.blocks:
            raise namespace_mismatch("SIMHASH_BLOCKS", self.blocks, int(blocks), self.base)
        self._check_layout((layout or b"1").decode())

    def _check_layout(self, stored: str) -> None:
        if stored != LAYOUT:
            raise config.SettingError(
                "DEDUP_NAMESPACE", self.base.rsplit(":", 1)[0],
                f"a namespace whose content index has layout {LAYOUT} (this one was written "
                f"with layout {stored} by an older dedup-crawler: delete its keys, e.g. "
                f"redis-cli --scan --pattern '{self.base}:*' | xargs redis-cli del, or set "
                "another DEDUP_NAMESPACE)")  # fmt: skip

    @property
    def standalone(self) -> bool:
        """No resolver: every kept page keeps its URL and version in Redis."""
        return self.resolver is None

    def _stored_version(self, ck8: bytes) -> bytes:
        """The version storage holds for a canonical key (``b"n"``: none, or standalone)."""
        found = None
        if self.resolver is not None:
            found = self.resolver.latest_version(int.from_bytes(ck8, "big"))
        return version(*found) if found else b"n"

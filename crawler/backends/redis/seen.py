"""The shared seen set of the distributed profile: a Bloom filter in Redis.

:class:`RedisSeenSet` satisfies :class:`crawler.backends.SeenSet` with the figures of
:class:`crawler.backends.bloom.LocalSeenSet`; every process of one namespace sees one set, and each
test-and-set is one Lua script (:mod:`crawler.backends.redis.bloom_lua`). Keys:
:mod:`crawler.backends.redis.keys`.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from functools import cached_property
from typing import Any

import numpy as np
import redis

from crawler import defaults
from crawler.backends import bloom
from crawler.backends.common import (
    NOT_ON_LOOP,
    RedisBacked,
    keys_lost,
    namespace,
    redis_url,
    retry_policy,
)
from crawler.backends.redis.bloom_lua import BLOOM_CREATE_LUA, BLOOM_LUA, BLOOM_TEST_MANY_LUA
from crawler.backends.redis.connection import clear_namespace, connect, namespace_mismatch
from crawler.backends.redis.keys import MAX_LAYERS, SHARD_BITS, fp16

logger = logging.getLogger(__name__)


class RedisSeenSet(RedisBacked):
    """Bloom-filter seen set in Redis, shared by every process of one namespace.

    The whole :class:`crawler.backends.SeenSet` protocol, with the figures of
    :class:`crawler.backends.bloom.LocalSeenSet` (but ``layers``: they live in Redis) and
    :attr:`shared`: ``add`` is an atomic test-and-set (one Lua script); ``BLOOM_ON_FULL="grow"``
    adds layers in Redis (up to 8), ``"stop"`` sets :attr:`full`. ``BLOOM_VERIFY`` is not
    available here (it is a local disk set); the rate of the Redis filter is the configured p.
    The shared frontier folds the test-and-set into its own push (:meth:`add_args`,
    :meth:`added`: :mod:`crawler.cluster.frontier`).
    """

    shared = True

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
        self._script = client.register_script(BLOOM_LUA)
        self._memo = f"{self.base}:memo:{uuid.uuid4().hex}"  # this adder's last add
        self._create_or_check()

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RedisSeenSet:
        """From ``REDIS_URL``, the namespace and the Bloom settings; ``capacity=``,
        ``error_rate=``, ``on_full=``, ``shard_bits=`` override; other keywords are unused."""
        options = asdict(bloom.BloomSettings.from_settings(settings))
        if options.pop("verify"):
            logger.warning("BLOOM_VERIFY is not available with DEDUP_BACKEND=redis: ignored")
        url = redis_url(settings)
        wanted = ("capacity", "error_rate", "on_full", "shard_bits")
        options.update({k: v for k, v in kwargs.items() if k in wanted})
        policy = retry_policy(settings)
        seen = cls(connect(url, policy.timeout), namespace(settings), url=url, **options)
        seen.retrying(policy)
        return seen

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

    #: the settings a namespace's filter is built with: attribute -> setting name
    CONFIG_NAMES = {"capacity": "BLOOM_CAPACITY", "error_rate": "BLOOM_ERROR_RATE",
                    "on_full": "BLOOM_ON_FULL", "shard_bits": "shard_bits"}  # fmt: skip

    def _create_or_check(self) -> None:
        """Create the namespace's filter, or check that it was built with these settings, in
        one script call (:data:`BLOOM_CREATE_LUA`): processes started at the same instant all
        find a complete filter, or are refused with one line."""
        wanted = json.dumps({field: getattr(self, field) for field in sorted(self.CONFIG_NAMES)},
                            sort_keys=True)  # fmt: skip
        fields = {**self._layer_specs(), "active": 1, "count": 0}
        script = self.client.register_script(BLOOM_CREATE_LUA)
        created, raw = self._run(script, [self.base],
                                 [wanted, *(x for pair in fields.items() for x in pair)])
        if created:
            logger.info(
                "%s in Redis (%s)", bloom.describe(self.capacity, self.error_rate), self.base
            )
        stored = json.loads(raw)
        for field, name in self.CONFIG_NAMES.items():
            if stored.get(field) != getattr(self, field):
                raise namespace_mismatch(name, getattr(self, field), stored.get(field), self.base)

    # --- the SeenSet protocol -------------------------------------------------------------
    def add(self, key: bytes) -> bool:
        """Test-and-set; safe to retry (a token: :data:`BLOOM_LUA`)."""
        present, count = self._run(
            self._script,
            [self.base, self._memo],
            [fp16(key), "add", int(self.on_full == "grow"), self.shard_bits, uuid.uuid4().hex],
        )
        return self.added(present, count)

    def add_args(self, key: bytes) -> list[Any]:
        """``ARGV`` of :data:`BLOOM_FN`'s ``bloom_check`` in another script (fp, grow, shard
        bits; the meta key is :attr:`base`); pass the script's answer to :meth:`added`."""
        return [fp16(key), int(self.on_full == "grow"), self.shard_bits]

    def added(self, present: Any, count: Any) -> bool:
        """Bookkeeping after a test-and-set done in a script: capacity warnings, ``full``."""
        if not present and self._warn_at and int(count) >= self._warn_at[0]:
            self._on_threshold(int(count))
        return bool(present)

    def __contains__(self, key: bytes) -> bool:
        present, _ = self._run(self._script, [self.base], [fp16(key), "test", 0, self.shard_bits])
        return bool(present)

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """``key in self`` for each of ``keys``, in ONE Redis round trip (read-only): the
        spider asks about all the links of a page at once."""
        if not keys:
            return []
        args = [self.shard_bits, *(fp16(key) for key in keys)]
        return [bool(v) for v in self._run(self._test_many, [self.base], args)]

    async def contains_many_async(self, keys: Sequence[bytes]) -> list[bool]:
        """:meth:`contains_many`, its script call sent on the event loop's connection and
        awaited: the reactor serves other pages during the round trip (redis-py held it ~0.3
        ms a question on loopback). A failure of that connection asks through redis-py
        instead (a read: safe to ask twice). Without a running asyncio loop, or a server
        redis-py reaches otherwise than by plain TCP: :meth:`contains_many`."""
        if not keys:
            return []
        args = [self.shard_bits, *(fp16(key) for key in keys)]
        answers = await self._run_on_loop(self._test_many, [self.base], args, logger,
                                          "seen set", "the question")  # fmt: skip
        if answers is NOT_ON_LOOP:
            return self.contains_many(keys)
        return [bool(v) for v in answers]

    @cached_property
    def _test_many(self) -> Any:
        return self.client.register_script(BLOOM_TEST_MANY_LUA)

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
        raw = self._call("hget", self.base, "active")
        if raw is None:
            raise keys_lost(self.url)
        active = int(raw)
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

    def figures(self) -> dict[str, float]:
        """The ``dedup/bloom/*`` stats (:meth:`crawler.backends.SeenSet.figures`), read from
        Redis (a few calls: ``BITCOUNT`` of every shard for the fill ratio)."""
        return {"capacity": self.capacity, "urls": len(self), "bits": self.bits,
                "hashes": self.hashes, "fill_ratio": round(self.fill_ratio, 6),
                "false_positives_avoided": self.false_positives_avoided,
                "expected_false_positives": round(self.expected_false_positives(), 3)}

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
            pos += self._fill_top_layer(h1[pos:], h2[pos:])
        return total

    def _fill_top_layer(self, h1: np.ndarray, h2: np.ndarray) -> int:
        """Set the bits of the first keys of ``h1``/``h2`` that fit in the top layer (a new
        layer when it is full and may grow); returns how many were added (0: a layer added)."""
        layer = int(self._call("hget", self.base, "active")) - 1
        m, k, cap, n = (int(v) for v in self._call(
            "hmget", self.base, [f"m{layer}", f"k{layer}", f"c{layer}", f"n{layer}"]))
        growable = self.on_full == "grow" and layer + 1 < MAX_LAYERS
        take = min(len(h1), max(cap - n, 0) if growable else len(h1))
        if take == 0:
            self._call("hset", self.base, "active", layer + 2)
            return 0
        self._set_bits(layer, m, k, h1[:take], h2[:take])
        n = int(self._call_once("hincrby", self.base, f"n{layer}", take))
        self._call_once("hincrby", self.base, "count", take)
        if growable and n >= cap:
            self._call("hset", self.base, "active", layer + 2)
        return take

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

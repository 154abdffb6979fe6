"""Redis backends of the distributed profile: a shared Bloom seen set and a shared content index.

Every key starts with ``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}`` (namespace default ``BOT_NAME``),
so crawls on one server stay apart; :func:`clear_namespace` deletes one. Each decision is one Lua
script, so N crawler processes on one server see one set and never both keep a duplicate pair.

The modules, one idea each (this package re-exports their public names):

* :mod:`~crawler.backends.redis.connection`: :func:`connect`, :func:`clear_namespace`, the
  settings error of a namespace built with other settings; the error type and the outage
  policy live in :mod:`crawler.backends.common` (importable without the ``redis`` extra);
* :mod:`~crawler.backends.redis.keys`: the key layout of both structures and how values are
  packed into it (bucket specs, versions, a page's script arguments);
* :mod:`~crawler.backends.redis.seen`: :class:`RedisSeenSet`, the shared Bloom filter, and
  :mod:`~crawler.backends.redis.bloom_lua`, its Lua (:data:`BLOOM_FN` is shared with the
  frontier's push);
* the content index, :class:`RedisContentIndex`: :mod:`~crawler.backends.redis.core` (client,
  parameters, namespace check, :class:`KeptPages`), :mod:`~crawler.backends.redis.index` (the
  decisions), :mod:`~crawler.backends.redis.loading` (loads, the bulk load),
  :mod:`~crawler.backends.redis.pending` (pending entries: commit, reclaim); its Lua in
  :mod:`~crawler.backends.redis.index_lib_lua` (the shared functions) and
  :mod:`~crawler.backends.redis.index_lua` (the scripts).

:func:`check_redis` is the crawl command's pre-flight check of both.
"""

from __future__ import annotations

from crawler import config
from crawler.backends.common import RedisBackendError, namespace
from crawler.backends.redis.bloom_lua import BLOOM_FN
from crawler.backends.redis.connection import clear_namespace, connect
from crawler.backends.redis.core import LOAD_BATCH, KeptPages
from crawler.backends.redis.index import RedisContentIndex
from crawler.backends.redis.keys import (
    CK_BLOOM_CAPACITY,
    CK_BLOOM_RATE,
    EXACT_REC,
    LAYOUT,
    MAX_LAYERS,
    SEQ_BYTES,
    SHARD_BITS,
    bucket_specs,
)
from crawler.backends.redis.loading import APPEND_BATCH, BULK_ROWS
from crawler.backends.redis.seen import RedisSeenSet
from crawler.vocab import Match, PageSignature, Record

__all__ = [
    "APPEND_BATCH",
    "BLOOM_FN",
    "BULK_ROWS",
    "CK_BLOOM_CAPACITY",
    "CK_BLOOM_RATE",
    "EXACT_REC",
    "LAYOUT",
    "LOAD_BATCH",
    "MAX_LAYERS",
    "SEQ_BYTES",
    "SHARD_BITS",
    "KeptPages",
    "Match",
    "PageSignature",
    "Record",
    "RedisBackendError",
    "RedisContentIndex",
    "RedisSeenSet",
    "bucket_specs",
    "check_redis",
    "clear_namespace",
    "connect",
    "namespace",
]


def check_redis(settings: config.SettingsLike) -> None:
    """Before a crawl: Redis reachable, and the namespace's seen set and content index built
    with these settings (creating them when new). Raises RedisBackendError or SettingError."""
    RedisSeenSet.from_settings(settings).close()
    RedisContentIndex.from_settings(settings).close()

"""The key layout of the Redis backends and how values are packed into it.

Every key starts with ``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}`` (namespace default ``BOT_NAME``,
:func:`crawler.backends.common.namespace`), called ``{base}`` below, so crawls on one server
stay apart. Scripts touch keys they compute from their base name: a single Redis server (no
Cluster). Nothing is pickled: entries are packed bytes written by the scripts. The layout may
change between versions; a namespace written with another k, block count or layout is refused.

**Seen set** (:mod:`crawler.backends.redis.seen`), keys under ``{base}:bloom``:

* ``{base}:bloom`` hash: the layer specs (``m{i}``, ``k{i}``, ``c{i}`` from
  :func:`crawler.backends.bloom.bloom_size`, the same capacities and tightened rates as the local
  filter), ``active`` layers, ``n{i}`` keys per layer, ``count``, ``config`` (JSON of n, p);
* ``{base}:bloom:{layer}:{shard}`` strings of bits, :data:`SHARD_BITS` (256 MiB) each, under
  the 512 MiB string limit.

Bit indexes come from the 16-byte fingerprint (:func:`fp16`) inside Lua by double hashing on
two 48-bit halves (bytes 0-5 and 6-11), ``(h1 + i * h2) mod m``: exact in Lua's doubles for
any m < 2**48.

**Content index** (:mod:`crawler.backends.redis.index`), keys under ``{base}:ci``:

* ``:meta`` hash (k, blocks, layout, seq, count, loaded);
* ``:loading`` string, the token of the worker loading the stored pages (a claim that expires);
* ``:t{table}`` hashes, one field per bucket (the bucket bytes of :func:`bucket_specs`), its
  value the packed records of the fingerprints in it (the bytes outside the bucket; table 0
  adds a :data:`SEQ_BYTES`-byte sequence number);
* ``:x`` hash, 4,096 buckets of :data:`EXACT_REC`-byte content-key records;
* ``{base}:ci:ck:bloom`` a growing Bloom filter of canonical keys (a seen set);
* ``:p`` (id -> worker and page), ``:pc`` (canonical key -> worker and version) and
  ``:pw:{worker}`` (canonical URL -> canonical key): the pending entries
  (:mod:`crawler.backends.redis.pending`);
* ``:c`` (canonical key -> version) and ``:u`` (id -> page): versions and URLs of the pages
  storage cannot resolve.

A *version* is ``b"s" + fp8 + content8`` (a page with a SimHash) or ``b"x" + content8``
(:func:`version`); an *id* is ``b"s" + fp8`` or ``b"x" + content8``; a *page* (``info``) is its
URL, canonical URL, SimHash hex and the page it names canonical, one per line.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from crawler.content.simindex import block_layout, content_key, url_key

SHARD_BITS = 2**31
MAX_LAYERS = 8  # 2**7 x BLOOM_CAPACITY keys; keeps every m far below the 2**48 index limit
#: seq of a kept page in table 0's records (ties: the earliest kept wins); 2**32 pages at most
SEQ_BYTES = 4
#: records of the exact table: content-key bytes 2..8 (byte 1 and the top half of byte 2 are
#: the bucket, 4096 per index)
EXACT_REC = 7
LAYOUT = "2"
CK_BLOOM_CAPACITY = 2**20  # canonical-key filter: first layer, grows by doubling (8 layers)
CK_BLOOM_RATE = 0.01
U64 = 2**64 - 1


def fp16(key: bytes) -> bytes:
    """At least 12 uniform bytes for the script (short keys stretched as
    crawler.backends.bloom does)."""
    if len(key) >= 16:
        return bytes(key[:16])
    return hashlib.blake2b(bytes(key), digest_size=16).digest()


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


def mix64(x: int) -> int:
    """splitmix64's finalizer: a second, independent-looking 64 bits of a canonical key."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & U64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & U64
    return x ^ (x >> 31)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` of every element (uint64 arithmetic wraps as the scalar's mask does)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def version(simhash: int | None, ckey: int | None) -> bytes:
    """A stored page's version as the scripts encode it (``b"n"``: nothing to exclude)."""
    if ckey is None:
        return b"n"
    if simhash is None:
        return b"x" + ckey.to_bytes(8, "big")
    return b"s" + simhash.to_bytes(8, "big") + ckey.to_bytes(8, "big")


def page_args(url: str, canonical: str, content_hash: str, simhash: int | None,
              names: str = "") -> list[Any]:
    """ck8, ck16, content8, fp8, info, canonical of one page (info: URL, canonical URL,
    SimHash hex and the page it names canonical, one per line)."""
    ck = url_key(canonical)
    if simhash is not None:
        simhash = int(simhash)
        if not 0 <= simhash <= U64:
            raise ValueError(f"simhash {simhash!r} of {url} is not an unsigned 64-bit integer")
    fp8 = simhash.to_bytes(8, "big") if simhash is not None else b""
    fp_hex = "" if simhash is None else format(simhash, "x")
    info = f"{url}\n{canonical}\n{fp_hex}\n{names}"
    return [ck.to_bytes(8, "big"), ck.to_bytes(8, "big") + mix64(ck).to_bytes(8, "big"),
            content_key(content_hash).to_bytes(8, "big"), fp8, info, canonical]  # fmt: skip

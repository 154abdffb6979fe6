"""Redis content index benchmark: bytes per kept page, check-and-add latency, same decisions.

``.venv/bin/python -m bench.redisindex [--quick] [--sizes N,N] [--queries N] [--redis URL]``
from the project root. Sizes 10**6 (default), ``--sizes 1e6,1e7`` for the 10**7 figure
(about 3 minutes and 600 MB of Redis there); ``--quick``: 10**5.

Per size ``n``, in a throw-away namespace on the real Redis (deleted after):

* ``n`` stored pages (random 64-bit SimHashes, content and canonical keys) bulk-loaded as the
  distributed profile loads storage (:meth:`RedisContentIndex.load_arrays`); Redis
  ``used_memory`` growth per page, and each key family's ``MEMORY USAGE`` per page;
* ``check_and_add`` latency, one Lua call per page as the pipeline makes it: ``--queries``
  pages alternating between a *planted* near duplicate (a stored fingerprint with 0..k random
  bits flipped, so a match within k always exists) and a random page (usually kept, so the
  index grows as in a crawl); median, p99, max;
* decisions: a :class:`~crawler.backends.local.LocalContentIndex` loaded with the same rows
  answers the same queries; every answer (reason, kept URL, kept SimHash, distance) must be
  equal. Kept pages' URLs come from an in-memory stand-in for storage (the real storage path
  is exercised by ``tests/test_backends_redis.py``);
* at the smallest size, the same index *standalone* (no storage: it keeps every page's URL
  and version in Redis), for the cost of what the lean layout leaves to storage.

Writes ``bench/results/redisindex.json``. Latency includes the client's round trip on
loopback; the machine is shared, so compare within one run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from crawler.backends.local import LocalContentIndex, PageSignature
from crawler.backends.redis import (
    RedisBackendError,
    RedisContentIndex,
    clear_namespace,
    connect,
)

RESULTS = Path(__file__).resolve().parent / "results"
REDIS_URL = os.environ.get("DEDUP_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CHUNK = 1 << 18
FAMILIES = {"block tables": ":t*", "exact table": ":x", "canonical filter": ":ck:*",
            "meta": ":meta"}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.redisindex",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10**5 pages only")
    parser.add_argument("--sizes", help="comma-separated sizes, e.g. 1e6,1e7")
    parser.add_argument("--queries", type=int, default=4000, help="check_and_add calls (4000)")
    parser.add_argument("--k", type=int, default=3, help="SIMHASH_MAX_DISTANCE (3)")
    parser.add_argument("--redis", default=REDIS_URL, help=f"server ({REDIS_URL})")
    parser.add_argument("--seed", type=int, default=20070508)
    return parser.parse_args(argv)


class Corpus:
    """``n`` stored pages as key arrays, and the stand-in storage that names them."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n = n
        self.fps = rng.integers(0, 2**64, n, dtype=np.uint64)
        self.ckeys = rng.integers(1, 2**64, n, dtype=np.uint64)
        self.canon = rng.integers(0, 2**64, n, dtype=np.uint64)
        self._by_fp = np.argsort(self.fps)
        self.added: dict[tuple[str, int], tuple[str, str, int | None]] = {}

    def chunks(self) -> Any:
        for a in range(0, self.n, CHUNK):
            b = min(a + CHUNK, self.n)
            yield SimpleNamespace(ids=np.arange(a, b, dtype=np.int64), simhash=self.fps[a:b],
                                  has_simhash=np.ones(b - a, np.bool_),
                                  content_keys=self.ckeys[a:b], canonical_keys=self.canon[a:b])

    def url(self, i: int) -> str:
        return f"http://stored.test/{i}"

    # --- crawler.backends.redis.KeptPages -----------------------------------------------------
    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None, str] | None:
        if (kind, key) in self.added:
            return (*self.added[(kind, key)], "")
        if kind == "s":
            at = int(np.searchsorted(self.fps, np.uint64(key), sorter=self._by_fp))
            if at < self.n and int(self.fps[self._by_fp[at]]) == key:
                i = int(self._by_fp[at])
                return self.url(i), self.url(i), key, ""
        return None

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None:
        return None  # every query page has a new canonical URL

    def store(self, page: PageSignature, content_key: int) -> None:
        entry = (page.url, page.canonical_url, page.simhash)
        if page.simhash is not None:
            self.added[("s", page.simhash)] = entry
        self.added[("x", content_key)] = entry


def digest(text: str) -> str:
    """A content hash as the pipeline makes one (hex): distinct texts, distinct keys."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def local_resolver(corpus: Corpus) -> Any:
    return lambda ids: {int(i): (corpus.url(int(i)), corpus.url(int(i))) for i in ids}


def queries(corpus: Corpus, count: int, k: int, rng: np.random.Generator) -> list[PageSignature]:
    pages = []
    for q in range(count):
        if q % 2 == 0:
            fp = int(corpus.fps[int(rng.integers(corpus.n))])
            for bit in rng.choice(64, int(rng.integers(0, k + 1)), replace=False).tolist():
                fp ^= 1 << bit
        else:
            fp = int(rng.integers(0, 2**64, dtype=np.uint64))
        pages.append(PageSignature(f"http://new.test/{q}", "", digest(f"new {q}"), fp))
    return pages


def family_bytes(client: Any, base: str) -> dict[str, int]:
    out = {}
    for name, pattern in FAMILIES.items():
        total = 0
        for key in client.scan_iter(match=f"{base}:ci{pattern}", count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
        out[name] = total
    return out


def bench_size(url: str, n: int, k: int, count: int, rng: np.random.Generator,
               standalone: bool) -> dict[str, Any]:  # fmt: skip
    from crawler.content.simindex import content_key

    client = connect(url)
    base = f"dedup:bench-{uuid.uuid4().hex[:8]}"
    corpus = Corpus(n, rng)
    try:
        index = RedisContentIndex(client, base, k=k, resolver=corpus)
        before = int(client.info("memory")["used_memory"])
        t0 = time.perf_counter()
        loaded = index.load_arrays(corpus.chunks())
        load_s = time.perf_counter() - t0
        grown = int(client.info("memory")["used_memory"]) - before
        families = family_bytes(client, base)
        local = LocalContentIndex(k)
        local.load_arrays(corpus.chunks(), local_resolver(corpus))
        times, agree, planted_hits, kept = [], 0, 0, 0
        pages = queries(corpus, count, k, rng)
        for i, page in enumerate(pages):
            t0 = time.perf_counter()
            got = index.check_and_add(page)
            times.append(time.perf_counter() - t0)
            want = local.check_and_add(page)
            agree += got == want
            if got is None:
                kept += 1
                corpus.store(page, content_key(page.content_hash))
            elif i % 2 == 0:
                planted_hits += 1
        row: dict[str, Any] = {
            "n": n, "loaded": loaded, "load_s": load_s, "bytes_per_page": grown / n,
            "family_bytes_per_page": {name: b / n for name, b in families.items()},
            "check_and_add_us": percentiles(times), "queries": len(pages),
            "decisions_equal": agree, "planted_matched": planted_hits,
            "planted": (len(pages) + 1) // 2, "kept": kept,
        }  # fmt: skip
        if standalone:
            row["standalone"] = bench_standalone(client, n, k, rng)
        return row
    finally:
        clear_namespace(client, base)
        client.close()


def bench_standalone(client: Any, n: int, k: int, rng: np.random.Generator) -> dict[str, Any]:
    """The same pages with URLs, no storage: what Redis holds when it must name pages itself."""
    base = f"dedup:bench-{uuid.uuid4().hex[:8]}"
    try:
        index = RedisContentIndex(client, base, k=k)
        fps = rng.integers(0, 2**64, n, dtype=np.uint64).tolist()
        records = ((f"http://stored.test/{i}", "", digest(f"stored {i}"), fp)
                   for i, fp in enumerate(fps))
        before = int(client.info("memory")["used_memory"])
        t0 = time.perf_counter()
        index.load(records, replace=False)
        return {"n": n, "load_s": time.perf_counter() - t0,
                "bytes_per_page": (int(client.info("memory")["used_memory"]) - before) / n}
    finally:
        clear_namespace(client, base)


def percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    if not ordered:
        return {}
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6  # noqa: E731
    return {"median": pick(0.5), "p99": pick(0.99), "max": ordered[-1] * 1e6}


def print_table(results: dict[str, Any]) -> None:
    print(f"\nRedis content index (lean: URLs in storage), k={results['k']}")
    print(f"{'n':>11} {'load s':>7} {'B/page':>7} {'tables':>7} {'exact':>6} {'ck filt':>7} "
          f"{'c&a med us':>10} {'p99 us':>7} {'max us':>7} {'equal':>11} {'planted hit':>11}")
    for row in results["sizes"]:
        f, t = row["family_bytes_per_page"], row["check_and_add_us"]
        print(f"{row['n']:>11,} {row['load_s']:>7.1f} {row['bytes_per_page']:>7.1f} "
              f"{f['block tables']:>7.1f} {f['exact table']:>6.1f} {f['canonical filter']:>7.1f} "
              f"{t['median']:>10.0f} {t['p99']:>7.0f} {t['max']:>7.0f} "
              f"{row['decisions_equal']:>5}/{row['queries']:<5} "
              f"{row['planted_matched']:>5}/{row['planted']:<5}")
        if "standalone" in row:
            s = row["standalone"]
            print(f"{'':>11} standalone (URLs in Redis) at {s['n']:,}: "
                  f"{s['bytes_per_page']:.1f} B/page, load {s['load_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sizes:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
    else:
        sizes = [10**5] if args.quick else [10**6]
    try:
        connect(args.redis).close()
    except RedisBackendError as exc:
        print(f"bench.redisindex: {exc}")
        return 2
    rng = np.random.default_rng(args.seed)
    results: dict[str, Any] = {"k": args.k, "sizes": []}
    for n in sizes:
        print(f"... n={n:,}", flush=True)
        results["sizes"].append(bench_size(args.redis, n, args.k, args.queries, rng,
                                           standalone=n == min(sizes) and n <= 10**6))
    print_table(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "redisindex.json").write_text(json.dumps(results, indent=2) + "\n")
    bad = [r["n"] for r in results["sizes"] if r["decisions_equal"] != r["queries"]]
    if bad:
        print(f"decisions differ from the local index at n={bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

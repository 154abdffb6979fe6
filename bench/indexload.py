"""Content-index load benchmark: ``python -m bench.indexload [--quick]`` from the project root.

What a crawl with ``SIMHASH_PERSIST`` does at open, timed end to end (storage read + index
build), the two paths side by side in one run on the same database:

* ``records`` (before): ``Store.iter_fingerprints`` -> ``LocalContentIndex.load``: URL, canonical
  URL and content-hash strings per row, hashed in Python, URL strings kept in the index;
* ``arrays`` (after): ``Store.iter_key_arrays`` -> ``LocalContentIndex.load_arrays``: four
  integers per row (``id``, ``simhash``, ``content_key``, ``canonical_key``, read through the
  covering index), numpy only, no string kept; URLs resolved from the store on a match.

The SQLite crawl databases (10**6 and 10**7 documents by default; 10**5 with ``--quick``) are
built once through the real schema and cached as ``/tmp/dedup-bench-indexload-<n>.db`` (about
350 bytes per row on disk; the 10**7 build takes a few minutes). Rows: 1 in 100 without a
SimHash (too short), 1 in 1000 without a content hash (binary), 1 in 1000 repeating an earlier
row's canonical URL (older spellings). With ``--pg`` the 10**6 database is copied into the
PostgreSQL schema ``bench_indexload_<n>`` (kept as cache) and timed the same way.

After each pair of loads, both indexes answer the same probes with ``check_and_add`` (exact
copies, near copies at 1-3 bits, re-crawls of stored pages, new pages): the decisions must be
identical. Reported per path: seconds (``read``: time spent producing the rows, in the
reader thread for ``arrays``, which overlaps the build; ``build`` = total - read; ``total``),
bytes per page held by the index (``nbytes``) and the resident-memory growth per page (order
dependent: the second load reuses memory the first freed; the transient chunks count too).
Prints a table and writes ``bench/results/indexload.json``. The page cache is warmed first
(both paths read a hot file).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from crawler.backends.local import LocalContentIndex, PageSignature
from crawler.content.simindex import content_key, url_key
from crawler.storage import StorageError, Store, to_signed64
from crawler.storage.scratch import bulk_load_documents, ensure_schema

RESULTS = Path(__file__).resolve().parent / "results" / "indexload.json"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CACHE = "/tmp/dedup-bench-indexload-{n}.db"
PROBES = 2000
#: The ``documents`` columns of :func:`rows`, in order.
COLUMNS = ("url", "canonical_url", "title", "text", "content_hash", "simhash", "status",
           "content_type", "fetched_at", "content_key", "canonical_key")
K = 3


def rows(n: int, seed: int = 1) -> Iterator[tuple[Any, ...]]:
    """Document rows in id order (values as stored: signed fingerprints and keys)."""
    rng = random.Random(seed)
    for i in range(n):
        url = f"https://h{i % 1000}.example/p/{i}"
        canonical = f"https://h{(i - 1000) % 1000}.example/p/{i - 1000}" if (
            i % 1000 == 999 and i >= 1000) else url
        chash = None if i % 1000 == 500 else f"{rng.getrandbits(128):032x}"
        simhash = None if i % 100 == 7 else to_signed64(rng.getrandbits(64))
        yield (url, canonical, "t", "x", chash, simhash, 200, "text/html",
               "2026-01-01 00:00:00.000000", to_signed64(content_key(chash)) if chash else None,
               to_signed64(url_key(canonical)))


def build_sqlite(n: int) -> str:
    """The cached database for ``n`` documents (built through the Store's schema if absent)."""
    path = CACHE.format(n=n)
    if os.path.exists(path):
        return path
    tmp = path + ".part"
    for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)
    with Store(f"sqlite:///{tmp}") as store:
        store.check()
    print(f"building {path} ({n:,} documents, once)...", flush=True)
    start = time.perf_counter()
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-2000000")  # 2 GB: random-key index inserts stay in memory
    con.executemany(f"INSERT INTO documents ({', '.join(COLUMNS)})"
                    f" VALUES ({', '.join('?' * len(COLUMNS))})", rows(n))
    con.commit()
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    os.replace(tmp, path)
    print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)
    return path


def build_pg(n: int, pg_url: str) -> str | None:
    """A PostgreSQL copy of the ``n``-document database (schema kept as cache), or None."""
    schema = f"bench_indexload_{n}"
    try:
        url = ensure_schema(pg_url, schema)
    except StorageError as exc:
        print(f"PostgreSQL skipped: {exc}")
        return None
    with Store(url) as store:
        store.check()
        if store.count_documents() == n:
            return url
        print(f"copying {n:,} documents into PostgreSQL schema {schema} (once)...", flush=True)
        bulk_load_documents(store, COLUMNS, rows(n))  # COPY, then VACUUM ANALYZE
    return url


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(items: Iterable[Any], clock: list[float]) -> Iterator[Any]:
    """``items`` with the time spent producing them added to ``clock[0]``."""
    it = iter(items)
    while True:
        start = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            clock[0] += time.perf_counter() - start
            return
        clock[0] += time.perf_counter() - start
        yield item


def load(path_name: str, store: Store) -> tuple[LocalContentIndex, dict[str, Any]]:
    gc.collect()
    before = rss()
    index = LocalContentIndex(k=K)
    clock = [0.0]
    start = time.perf_counter()
    if path_name == "arrays":
        index.load_arrays(timed(store.iter_key_arrays(), clock), store.document_urls)
    else:
        index.load(timed((r for r in store.iter_fingerprints() if r[2]), clock))
    total = time.perf_counter() - start
    gc.collect()
    pages = len(index)
    return index, {"path": path_name, "read_s": round(clock[0], 2),
                   "build_s": round(total - clock[0], 2), "total_s": round(total, 2),
                   "pages": pages, "index_bytes_per_page": round(index.nbytes / pages, 1),
                   "rss_bytes_per_page": round((rss() - before) / pages, 1)}


def probes(n: int, seed: int = 9) -> list[PageSignature]:
    """Pages to ask both indexes: exact and near copies of stored rows, re-crawls, new pages."""
    rng = random.Random(seed)
    stored = {}
    wanted = sorted(rng.sample(range(n), min(n, PROBES)))
    for i, row in enumerate(rows(n)):  # regenerate the rows picked (same seed)
        if wanted and i == wanted[0]:
            wanted.pop(0)
            stored[i] = row
        if not wanted:
            break
    pages = []
    for j, (i, row) in enumerate(sorted(stored.items())):
        url, canonical, chash, simhash = row[0], row[1], row[4], row[5]
        fp = None if simhash is None else simhash & (2**64 - 1)
        kind = j % 4
        if kind == 0 and chash:  # an exact copy under a new URL
            pages.append(PageSignature(f"https://copy.example/{i}", "", chash, fp))
        elif kind == 1 and fp is not None:  # a near copy, 1-3 bits away
            flips = sum(1 << b for b in rng.sample(range(64), 1 + i % 3))
            pages.append(PageSignature(f"https://near.example/{i}", "", f"n{i}", fp ^ flips))
        elif kind == 2:  # a re-crawl of the stored page, same content
            pages.append(PageSignature(url, canonical, chash or f"r{i}", fp))
        else:  # a new page
            pages.append(PageSignature(f"https://new.example/{i}", "", f"new{i}",
                                       rng.getrandbits(64)))
    return pages


def same_decisions(a: LocalContentIndex, b: LocalContentIndex, pages: list[PageSignature]) -> int:
    """How many probes got identical decisions (both indexes record the kept ones)."""
    return sum(a.check_and_add(p) == b.check_and_add(p) for p in pages)


def compare(label: str, n: int, open_store: Callable[[], Store]) -> list[dict[str, Any]]:
    results = []
    with open_store() as store:
        store.check()
        new, r_new = load("arrays", store)
        old, r_old = load("records", store)
        pages = probes(n)
        agree = same_decisions(old, new, pages)
        for r in (r_old, r_new):
            r.update(backend=label, n=n, probes=len(pages), identical=agree)
            results.append(r)
        del old, new
    return results


def _opener(url: str) -> Callable[[], Store]:
    return lambda: Store(url, create=False)


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'backend':9} {'documents':>11} {'path':8} {'read s':>7} {'build s':>8} "
            f"{'total s':>8} {'idx B/pg':>9} {'RSS B/pg':>9} {'speedup':>8} {'same':>10}")
    lines = [head, "-" * len(head)]
    for r in results:
        base = next(x for x in results if x["backend"] == r["backend"] and x["n"] == r["n"]
                    and x["path"] == "records")
        lines.append(
            f"{r['backend']:9} {r['n']:>11,} {r['path']:8} {r['read_s']:>7.2f} "
            f"{r['build_s']:>8.2f} {r['total_s']:>8.2f} {r['index_bytes_per_page']:>9.0f} "
            f"{r['rss_bytes_per_page']:>9.0f} {base['total_s'] / r['total_s']:>7.1f}x "
            f"{r['identical']:>5}/{r['probes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.indexload",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10**5 documents only")
    parser.add_argument("--sizes", default=None, help="comma-separated document counts "
                        "(default 1000000,10000000)")
    parser.add_argument("--pg", action="store_true", help="also PostgreSQL (at --pg-size)")
    parser.add_argument("--pg-size", type=int, default=1_000_000)
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args(argv)
    sizes = ([100_000] if args.quick else [1_000_000, 10_000_000]) if args.sizes is None else [
        int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    for n in sizes:
        path = build_sqlite(n)
        warm(path)
        results += compare("sqlite", n, _opener(f"sqlite:///{path}"))
        print(table(results), flush=True)
    if args.pg:
        pg = build_pg(args.pg_size, args.pg_url)
        if pg is not None:
            results += compare("postgres", args.pg_size, _opener(pg))
    print()
    print(table(results))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten {RESULTS}")
    return 0 if all(r["identical"] == r["probes"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

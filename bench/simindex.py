"""SimIndex benchmark: load, query latency with inserts interleaved, memory, recall.

``.venv/bin/python -m bench.simindex [--quick] [--sizes N,N] [--queries N] [--k K]`` from the
project root. Sizes 10**5, 10**6, 10**7 (``--quick``: 10**5, 10**6).

Per size ``n``: ``n`` random 64-bit fingerprints; queries alternate between *planted* ones (a
stored fingerprint with 0..k random bits flipped, so a neighbour within k always exists) and
random ones; after every query one new fingerprint is added (inserts interleaved, buffer merges
included in the add timings). Measured side by side in one run:

* ``crawler.simindex.SimIndex``: bulk load (``add_many``), bytes per fingerprint (the arrays,
  ``nbytes``), query median and p99, add mean / p99 / max, recall against brute force (the
  answer must equal the nearest within k, ties to the earliest) on every planted query and a
  sample of the random ones;
* a numpy linear scan (XOR + popcount over every fingerprint): the brute-force reference;
* ``simhash.SimhashIndex`` (k set to ours; it returns no distance; memory by RSS growth):
  fully built up to 10**6 (about 30 s and 1 GiB there); with ``--quick`` at 10**6 it is built
  from a timed sample of 10**5 adds and extrapolated (build time, memory), its query time
  measured on that sample (a lower bound: buckets grow with n); never above 10**6;
* ``RedisContentIndex`` at the smallest size (``--redis URL``; a throw-away namespace, deleted
  after): bulk load and ``check_and_add`` latency, one Lua script per page;
* the exact content-hash check: ``SimIndex(k=0, blocks=1)`` against a Python ``dict``, memory
  and lookup time per entry (dict memory by ``tracemalloc``).

Time and memory are bounded (about 2 minutes and 3 GiB at 10**7). Writes
``bench/results/simindex.json``. Numbers are machine-dependent; compare within one run.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from crawler.simindex import SimIndex

RESULTS = Path(__file__).resolve().parent / "results"
SIMHASH_FULL_MAX = 1_000_000  # SimhashIndex built in full up to this size (--quick: 10**5)
SIMHASH_SAMPLE = 100_000  # ...and from this many adds, extrapolated, up to 10**6
SIMHASH_MAX = 1_000_000
BRUTE_SAMPLE = 600  # linear-scan checks per size (planted first)
LINEAR_QUERIES = 40


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.simindex")
    parser.add_argument("--quick", action="store_true", help="sizes 10**5 and 10**6 only")
    parser.add_argument("--sizes", help="comma-separated sizes (overrides --quick)")
    parser.add_argument("--queries", type=int, default=5000, help="queries per size")
    parser.add_argument("--k", type=int, default=3, help="SIMHASH_MAX_DISTANCE")
    parser.add_argument("--seed", type=int, default=20070508)
    parser.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/15",
        help="RedisContentIndex at the smallest size on this server ('' to skip)",
    )
    return parser.parse_args(argv)


def planted_queries(rng: np.random.Generator, fps: np.ndarray, count: int, k: int) -> list[int]:
    """Even positions planted near a stored fingerprint, odd ones random."""
    queries = []
    for i in range(count):
        if i % 2:
            queries.append(int(rng.integers(0, 2**64, dtype=np.uint64)))
            continue
        q = int(fps[rng.integers(len(fps))])
        for bit in rng.choice(64, int(rng.integers(0, k + 1)), replace=False).tolist():
            q ^= 1 << bit
        queries.append(q)
    return queries


def brute_nearest(fps: np.ndarray, q: int, k: int) -> tuple[int, int] | None:
    dist = np.bitwise_count(fps ^ np.uint64(q))
    best = int(dist.min())
    if best > k:
        return None
    return int(np.flatnonzero(dist == best)[0]), best


def percentiles(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples) * 1e6
    return {
        "median_us": float(np.median(arr)),
        "p99_us": float(np.percentile(arr, 99)),
        "mean_us": float(arr.mean()),
        "max_us": float(arr.max()),
    }


def bench_ours(n: int, k: int, rng: np.random.Generator, queries: int) -> dict[str, Any]:
    fps = np.empty(n + queries, np.uint64)
    fps[:n] = rng.integers(0, 2**64, n, dtype=np.uint64)
    fps[n:] = rng.integers(0, 2**64, queries, dtype=np.uint64)  # the interleaved inserts
    index = SimIndex(k)
    gc.collect()
    t0 = time.perf_counter()
    index.add_many(fps[:n], np.arange(n, dtype=np.int64))
    load_s = time.perf_counter() - t0
    qs = planted_queries(rng, fps[:n], queries, k)
    q_times, a_times, answers = [], [], []
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        answers.append(index.query(q))
        t1 = time.perf_counter()
        index.add(int(fps[n + i]), n + i)
        t2 = time.perf_counter()
        q_times.append(t1 - t0)
        a_times.append(t2 - t1)
    recall = check_recall(fps, n, qs, answers, k)
    return {
        "n": n,
        "load_s": load_s,
        "load_per_s": n / load_s,
        "bytes_per_fp": index.nbytes / len(index),
        "query": percentiles(q_times),
        "add": percentiles(a_times),
        **recall,
        "fps": fps,
    }


def check_recall(fps: np.ndarray, n: int, qs: list[int], answers: list, k: int) -> dict[str, Any]:
    """Compare answers with brute force over what was stored when each query ran."""
    planted = [i for i in range(len(qs)) if i % 2 == 0][: BRUTE_SAMPLE * 2 // 3]
    randoms = [i for i in range(len(qs)) if i % 2][: BRUTE_SAMPLE - len(planted)]
    found = agree = with_neighbour = 0
    for i in planted + randoms:
        expected = brute_nearest(fps[: n + i], qs[i], k)
        agree += answers[i] == expected
        if expected is not None:
            with_neighbour += 1
            found += answers[i] is not None and answers[i][1] == expected[1]
    return {
        "checked": len(planted) + len(randoms),
        "agree": agree,
        "recall": found / with_neighbour if with_neighbour else 1.0,
        "with_neighbour": with_neighbour,
    }


def bench_linear(fps: np.ndarray, n: int, k: int, rng: np.random.Generator) -> dict[str, Any]:
    qs = planted_queries(rng, fps[:n], LINEAR_QUERIES, k)
    times = []
    for q in qs:
        t0 = time.perf_counter()
        dist = np.bitwise_count(fps[:n] ^ np.uint64(q))
        hits = np.flatnonzero(dist <= k)
        if len(hits):
            int(hits[np.argmin(dist[hits])])
        times.append(time.perf_counter() - t0)
    return {"query": percentiles(times), "bytes_per_fp": 8.0}


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bench_simhash_index(
    fps: np.ndarray, n: int, k: int, rng: np.random.Generator, full_max: int
) -> dict[str, Any]:
    from simhash import Simhash, SimhashIndex

    logging.getLogger("simhash").setLevel(logging.ERROR)  # "Big bucket" warnings
    built = n if n <= full_max else min(n, SIMHASH_SAMPLE)
    values = fps[:built].tolist()
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    index = SimhashIndex([], k=k)
    for i, value in enumerate(values):
        index.add(str(i), Simhash(value))
    build_s = time.perf_counter() - t0
    mem = rss_bytes() - rss0  # tracemalloc would triple the build time
    times = []
    for q in planted_queries(rng, fps[:built], 400, k):
        sim = Simhash(q)
        t0 = time.perf_counter()
        index.get_near_dups(sim)
        times.append(time.perf_counter() - t0)
    scale = n / built
    return {
        "built": built,
        "extrapolated": built < n,
        "load_s": build_s * scale,
        "bytes_per_fp": mem / built,
        "query": percentiles(times),
    }


def bench_exact(fps: np.ndarray, n: int) -> dict[str, Any]:
    """The content-hash check: SimIndex(0, 1) vs dict, lookups of present and absent values."""
    m = min(n, 1_000_000)
    values = fps[:m]
    probes = np.concatenate([values[:2000], values[-2000:] ^ np.uint64(1)]).tolist()
    out: dict[str, Any] = {"n": m}
    exact = SimIndex(0, 1)
    t0 = time.perf_counter()
    exact.add_many(values, np.arange(m, dtype=np.int64))
    out["simindex_load_s"] = time.perf_counter() - t0
    out["simindex_bytes"] = exact.nbytes / m
    t0 = time.perf_counter()
    for p in probes:
        exact.query(p)
    out["simindex_lookup_us"] = (time.perf_counter() - t0) / len(probes) * 1e6
    del exact
    tracemalloc.start()
    t0 = time.perf_counter()
    table = dict(zip(values.tolist(), range(m), strict=True))
    out["dict_load_s"] = time.perf_counter() - t0
    out["dict_bytes"] = tracemalloc.get_traced_memory()[0] / m
    tracemalloc.stop()
    t0 = time.perf_counter()
    for p in probes:
        table.get(p)
    out["dict_lookup_us"] = (time.perf_counter() - t0) / len(probes) * 1e6
    return out


def bench_redis(url: str, n: int, k: int, rng: np.random.Generator) -> dict[str, Any]:
    """RedisContentIndex: bulk load of ``n`` records, then check_and_add latency (one Lua call)."""
    import uuid

    from crawler.backends.local import PageSignature
    from crawler.backends.redis import (
        RedisBackendError,
        RedisContentIndex,
        clear_namespace,
        connect,
    )

    try:
        client = connect(url)
    except RedisBackendError as exc:
        return {"skipped": str(exc)}
    base = f"dedup:bench-{uuid.uuid4().hex[:8]}"
    try:
        index = RedisContentIndex(client, base, k=k)
        fps = rng.integers(0, 2**64, n, dtype=np.uint64).tolist()
        records = ((f"http://h/{i}", "", f"{i:040x}", fp) for i, fp in enumerate(fps))
        before = int(client.info("memory")["used_memory"])
        t0 = time.perf_counter()
        index.load(records)
        load_s = time.perf_counter() - t0
        used = int(client.info("memory")["used_memory"]) - before  # others may write too
        times = []
        for i, q in enumerate(planted_queries(rng, np.array(fps, np.uint64), 2000, k)):
            page = PageSignature(f"http://q/{i}", "", f"q{i:039x}", q)
            t0 = time.perf_counter()
            index.check_and_add(page)
            times.append(time.perf_counter() - t0)
        return {"n": n, "load_s": load_s, "check_and_add": percentiles(times),
                "redis_bytes_per_page": used / n}  # fmt: skip
    finally:
        clear_namespace(client, base)
        client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.sizes:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")]
    else:
        sizes = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]
    rng = np.random.default_rng(args.seed)
    results: dict[str, Any] = {"k": args.k, "blocks": args.k + 1, "sizes": {}}
    for n in sizes:
        print(f"... n={n:,}", flush=True)
        ours = bench_ours(n, args.k, rng, args.queries)
        fps = ours.pop("fps")
        row = {"ours": ours, "linear": bench_linear(fps, n, args.k, rng)}
        if n <= SIMHASH_MAX:
            full_max = SIMHASH_SAMPLE if args.quick else SIMHASH_FULL_MAX
            row["simhash_index"] = bench_simhash_index(fps, n, args.k, rng, full_max)
        row["exact"] = bench_exact(fps, n)
        if n == min(sizes) and args.redis:
            row["redis"] = bench_redis(args.redis, n, args.k, rng)
        results["sizes"][str(n)] = row
        del fps
        gc.collect()
    return results


def print_table(results: dict[str, Any]) -> None:
    k = results["k"]
    print(f"\nSimIndex k={k}, {results['blocks']} tables; queries with one insert after each")
    head = f"{'n':>11} {'index':<15} {'load s':>8} {'B/fp':>6} {'q med us':>9} {'q p99 us':>9}"
    print(head + f" {'add mean/p99/max us':>22} {'recall':>7} {'agree':>9}")
    for n, row in results["sizes"].items():
        o = row["ours"]
        add = o["add"]
        adds = f"{add['mean_us']:.1f}/{add['p99_us']:.1f}/{add['max_us'] / 1000:.0f}ms"
        agree = f"{o['agree']}/{o['checked']}"
        print(
            f"{int(n):>11,} {'SimIndex':<15} {o['load_s']:>8.2f} {o['bytes_per_fp']:>6.1f} "
            f"{o['query']['median_us']:>9.1f} {o['query']['p99_us']:>9.1f} {adds:>22} "
            f"{o['recall']:>7.1%} {agree:>9}"
        )
        lin = row["linear"]
        print(
            f"{'':>11} {'numpy linear':<15} {'-':>8} {lin['bytes_per_fp']:>6.1f} "
            f"{lin['query']['median_us']:>9.1f} {lin['query']['p99_us']:>9.1f}"
        )
        if "simhash_index" in row:
            s = row["simhash_index"]
            label = "SimhashIndex*" if s["extrapolated"] else "SimhashIndex"
            print(
                f"{'':>11} {label:<15} {s['load_s']:>8.2f} {s['bytes_per_fp']:>6.0f} "
                f"{s['query']['median_us']:>9.1f} {s['query']['p99_us']:>9.1f}"
            )
    if any(row.get("simhash_index", {}).get("extrapolated") for row in results["sizes"].values()):
        print(
            "* built from a sample of 10**5 adds: load time and memory extrapolated, query time "
            "measured on the sample (a lower bound)"
        )
    for n, row in results["sizes"].items():
        r = row.get("redis")
        if r and "skipped" not in r:
            c = r["check_and_add"]
            print(
                f"{int(n):>11,} {'RedisContentIndex':<15} {r['load_s']:>8.2f} "
                f"{r['redis_bytes_per_page']:>6.0f} "
                f"{c['median_us']:>9.1f} {c['p99_us']:>9.1f}   (check_and_add: one Lua call)"
            )
    print("\nExact content-hash check (first 64 bits of the hash)")
    print(f"{'entries':>11} {'SimIndex(0,1) B':>16} {'us':>6} {'dict B':>8} {'us':>6}")
    for row in results["sizes"].values():
        e = row["exact"]
        print(
            f"{e['n']:>11,} {e['simindex_bytes']:>16.1f} {e['simindex_lookup_us']:>6.2f} "
            f"{e['dict_bytes']:>8.1f} {e['dict_lookup_us']:>6.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = run(args)
    print_table(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "simindex.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

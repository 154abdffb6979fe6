"""SimIndex benchmark: load, query latency with inserts interleaved, memory, recall.

``.venv/bin/python -m bench.simindex [--quick] [--sizes N,N] [--queries N] [--k K]
[--pause-adds N] [--baseline REV]`` from the project root. Sizes 10**5, 10**6, 10**7
(``--quick``: 10**5, 10**6; ``--sizes 1e7,5e7`` for the large ones, about 3 GiB at 5 * 10**7).

Per size ``n``: ``n`` random 64-bit fingerprints; queries alternate between *planted* ones (a
stored fingerprint with 0..k random bits flipped, so a neighbour within k always exists) and
random ones; after every query one new fingerprint is added (inserts interleaved, buffer merges
included in the add timings). Measured side by side in one run:

* ``crawler.content.simindex.SimIndex``: bulk load (``add_many``: of all ``n`` at once, and in
  batches of 2**20 as ``LocalContentIndex.load_arrays`` does; wall and CPU seconds), bytes per
  fingerprint (the arrays, ``nbytes``), query median and p99, add mean / p99 / max, recall
  against brute force (the answer must equal the nearest within k, ties to the earliest) on
  the planted queries and a sample of the random ones (fewer above 10**7: one scan each);
* add pauses: then ``--pause-adds`` more adds (default 2**20: four mid-level merges into the
  big level and 256 buffer merges), each timed (wall and thread CPU time: the machine may be
  shared): p99, p99.9, max and how many took over 50 ms. A caller's (the reactor's) longest
  pause is the max;
* ``--baseline REV``: the same rows for ``crawler/content/simindex.py`` as of a git revision (e.g.
  ``HEAD``), loaded from ``git show`` into a module of its own, side by side in one run (its
  pause window at most ``BASELINE_ADDS`` adds: its merges are periodic);
* a numpy linear scan (XOR + popcount over every fingerprint): the brute-force reference;
* ``simhash.SimhashIndex`` (k set to ours; it returns no distance; memory by RSS growth):
  fully built up to 10**6 (about 30 s and 1 GiB there); with ``--quick`` at 10**6 it is built
  from a timed sample of 10**5 adds and extrapolated (build time, memory), its query time
  measured on that sample (a lower bound: buckets grow with n); never above 10**6;
* (the shared Redis index has its own benchmark: ``python -m bench.redisindex``)
* the exact content-hash check: ``SimIndex(k=0, blocks=1)`` against a Python ``dict``, memory
  and lookup time per entry (dict memory by ``tracemalloc``).

Time and memory are bounded (about 3 minutes and 3 GiB at 10**7; 10 minutes and 8 GiB at
5 * 10**7). Writes ``bench/results/simindex.json``. Numbers are machine-dependent; compare
within one run.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import subprocess
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import numpy as np

from crawler.content.simindex import MID_CAP, SimIndex

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
SIMHASH_FULL_MAX = 1_000_000  # SimhashIndex built in full up to this size (--quick: 10**5)
SIMHASH_SAMPLE = 100_000  # ...and from this many adds, extrapolated, up to 10**6
SIMHASH_MAX = 1_000_000
BRUTE_SAMPLE = 600  # linear-scan checks per size (planted first)...
BRUTE_BUDGET = 6 * 10**9  # ...at most this many fingerprints scanned in all
LOAD_BATCH = 1 << 20  # rows per add_many in LocalContentIndex.load_arrays (ARRAY_BATCH)
PAUSE_ADDS = 4 * MID_CAP
BASELINE_ADDS = 60_000  # the baseline's window: about 15 of its merges at 4096 adds
PAUSE_LIMIT = 0.05  # seconds: adds counted as a pause the caller would feel
LINEAR_QUERIES = 40


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.simindex")
    parser.add_argument("--quick", action="store_true", help="sizes 10**5 and 10**6 only")
    parser.add_argument("--sizes", help="comma-separated sizes, e.g. 1e7,5e7 (overrides --quick)")
    parser.add_argument("--queries", type=int, default=5000, help="queries per size")
    parser.add_argument("--k", type=int, default=3, help="SIMHASH_MAX_DISTANCE")
    parser.add_argument("--seed", type=int, default=20070508)
    parser.add_argument(
        "--pause-adds", type=int, default=PAUSE_ADDS, help="adds timed one by one per size"
    )
    parser.add_argument(
        "--baseline", help="also measure crawler/content/simindex.py of this git revision "
        "(e.g. HEAD)"
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


def bench_ours(
    cls: type, fps: np.ndarray, n: int, k: int, seed: list[int], queries: int, pause_adds: int
) -> dict[str, Any]:
    """``cls`` (a SimIndex): loads, then queries with an add after each, then timed adds."""
    rng = np.random.default_rng(seed)  # the same queries and adds for every class
    load, index = timed_load(cls, k, fps[:n])
    batched, _ = timed_load(cls, k, fps[:n], LOAD_BATCH)  # then freed
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
    pause = time_adds(index, rng, n + queries, pause_adds)
    recall = check_recall(fps, n, qs, answers, k)
    return {
        "n": n,
        "load_s": load["wall_s"],
        "load_cpu_s": load["cpu_s"],
        "load_batched_s": batched["wall_s"],
        "load_batched_cpu_s": batched["cpu_s"],
        "load_per_s": n / load["wall_s"],
        "bytes_per_fp": index.nbytes / len(index),
        "query": percentiles(q_times),
        "add": percentiles(a_times),
        "pause": pause,
        **recall,
    }


def timed_load(cls: type, k: int, fps: np.ndarray, batch: int = 0) -> tuple[dict[str, float], Any]:
    """A ``cls(k)`` loaded with ``fps`` by ``add_many``, all at once or in batches."""
    index = cls(k)
    batch = batch or len(fps)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(fps), batch):
        stop = min(len(fps), start + batch)
        index.add_many(fps[start:stop], np.arange(start, stop, dtype=np.int64))
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}, index


def time_adds(index: Any, rng: np.random.Generator, first: int, count: int) -> dict[str, Any]:
    """Per-add wall and thread CPU time of ``count`` adds of random fingerprints."""
    values = rng.integers(0, 2**64, count, dtype=np.uint64).tolist()
    wall, cpu = np.empty(count), np.empty(count)
    clock, thread, add = time.perf_counter, time.thread_time, index.add
    gc.collect()
    for i, value in enumerate(values):
        c0 = thread()
        t0 = clock()
        add(value, first + i)
        t1 = clock()
        cpu[i] = thread() - c0
        wall[i] = t1 - t0
    return {
        "adds": count,
        "mean_us": float(wall.mean() * 1e6),
        "p99_us": float(np.percentile(wall, 99) * 1e6),
        "p999_us": float(np.percentile(wall, 99.9) * 1e6),
        "max_ms": float(wall.max() * 1e3),
        "over_limit": int((wall > PAUSE_LIMIT).sum()),
        "cpu_max_ms": float(cpu.max() * 1e3),
        "cpu_over_limit": int((cpu > PAUSE_LIMIT).sum()),
    }


def load_revision(rev: str) -> type:
    """``SimIndex`` of ``crawler/content/simindex.py`` as of git revision ``rev``."""
    source = subprocess.run(
        ["git", "show", f"{rev}:crawler/content/simindex.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"simindex_at_{rev}")
    exec(compile(source, f"{rev}:crawler/content/simindex.py", "exec"), module.__dict__)
    return module.SimIndex


def check_recall(fps: np.ndarray, n: int, qs: list[int], answers: list, k: int) -> dict[str, Any]:
    """Compare answers with brute force over what was stored when each query ran."""
    sample = max(20, min(BRUTE_SAMPLE, BRUTE_BUDGET // n))
    planted = [i for i in range(len(qs)) if i % 2 == 0][: sample * 2 // 3]
    randoms = [i for i in range(len(qs)) if i % 2][: sample - len(planted)]
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.sizes:
        sizes = [int(float(s.replace("_", ""))) for s in args.sizes.split(",")]
    else:
        sizes = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]
    rng = np.random.default_rng(args.seed)
    baseline = load_revision(args.baseline) if args.baseline else None
    results: dict[str, Any] = {"k": args.k, "blocks": args.k + 1, "sizes": {}}
    if baseline is not None:
        results["baseline"] = args.baseline
    for n in sizes:
        print(f"... n={n:,}", flush=True)
        fps = np.empty(n + args.queries, np.uint64)
        fps[:n] = rng.integers(0, 2**64, n, dtype=np.uint64)
        fps[n:] = rng.integers(0, 2**64, args.queries, dtype=np.uint64)  # interleaved inserts
        seed = [args.seed, n]
        row = {"ours": bench_ours(SimIndex, fps, n, args.k, seed, args.queries, args.pause_adds)}
        gc.collect()
        if baseline is not None:
            adds = min(args.pause_adds, BASELINE_ADDS)
            row["baseline"] = bench_ours(baseline, fps, n, args.k, seed, args.queries, adds)
            gc.collect()
        row["linear"] = bench_linear(fps, n, args.k, rng)
        if n <= SIMHASH_MAX:
            full_max = SIMHASH_SAMPLE if args.quick else SIMHASH_FULL_MAX
            row["simhash_index"] = bench_simhash_index(fps, n, args.k, rng, full_max)
        row["exact"] = bench_exact(fps, n)
        results["sizes"][str(n)] = row
        del fps
        gc.collect()
    return results


def print_table(results: dict[str, Any]) -> None:
    k = results["k"]
    print(f"\nSimIndex k={k}, {results['blocks']} tables; queries with one insert after each")
    head = f"{'n':>11} {'index':<15} {'load s':>8} {'B/fp':>6} {'q med us':>9} {'q p99 us':>9}"
    print(head + f" {'add mean/p99/max us':>22} {'recall':>7} {'agree':>9}")
    base = results.get("baseline")
    for n, row in results["sizes"].items():
        for i, (name, label) in enumerate([("ours", "SimIndex"), ("baseline", f"@{base}")]):
            if name in row:
                o = row[name]
                add = o["add"]
                adds = f"{add['mean_us']:.1f}/{add['p99_us']:.1f}/{add['max_us'] / 1000:.0f}ms"
                agree = f"{o['agree']}/{o['checked']}"
                size = "" if i else f"{int(n):,}"
                print(
                    f"{size:>11} {label:<15} {o['load_s']:>8.2f} {o['bytes_per_fp']:>6.1f} "
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
    print_pauses(results)
    print("\nExact content-hash check (first 64 bits of the hash)")
    print(f"{'entries':>11} {'SimIndex(0,1) B':>16} {'us':>6} {'dict B':>8} {'us':>6}")
    for row in results["sizes"].values():
        e = row["exact"]
        print(
            f"{e['n']:>11,} {e['simindex_bytes']:>16.1f} {e['simindex_lookup_us']:>6.2f} "
            f"{e['dict_bytes']:>8.1f} {e['dict_lookup_us']:>6.2f}"
        )


def print_pauses(results: dict[str, Any]) -> None:
    limit = f">{PAUSE_LIMIT * 1000:.0f}ms"
    print("\nAdd pauses (each add timed; cpu: thread CPU time) and loads by add_many")
    print(
        f"{'n':>11} {'index':<15} {'adds':>9} {'p99 us':>8} {'p99.9 us':>9} {'max ms':>7} "
        f"{'cpu max':>7} {limit:>6} {'load s (cpu)':>13} {'2**20s s (cpu)':>15}"
    )
    base = results.get("baseline")
    for n, row in results["sizes"].items():
        for i, (name, label) in enumerate([("ours", "SimIndex"), ("baseline", f"@{base}")]):
            if name not in row:
                continue
            o = row[name]
            p = o["pause"]
            size = "" if i else f"{int(n):,}"
            load = f"{o['load_s']:.2f} ({o['load_cpu_s']:.2f})"
            batched = f"{o['load_batched_s']:.2f} ({o['load_batched_cpu_s']:.2f})"
            print(
                f"{size:>11} {label:<15} {p['adds']:>9,} {p['p99_us']:>8.1f} {p['p999_us']:>9.1f} "
                f"{p['max_ms']:>7.1f} {p['cpu_max_ms']:>7.1f} {p['over_limit']:>6} "
                f"{load:>13} {batched:>15}"
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

"""Dupefilter benchmark: ``python -m bench.dupefilter [--quick]`` from the project root.

Side by side in one run, on the same generated stream of realistic URLs (10^6, ``--quick``
10^5: 300 hosts, 1-5 path segments, 0-3 query pairs, tracking parameters, fragments, case and
port spellings; about a third of the stream repeats an earlier page in another spelling):

* per-request cost of our path (``normalize_url`` as the spider middleware does it, then
  ``BloomDupeFilter.request_seen``: fingerprint + Bloom) vs Scrapy's ``RFPDupeFilter.request_seen``
  (``canonicalize_url`` + JSON + SHA-1 + a Python set), and the parts of ours, with pybloom-live
  on the same keys for comparison;
* the same with ``BLOOM_VERIFY`` (exact set in a temp dir), and with ``JOBDIR`` (journal writes,
  periodic snapshots);
* memory of the seen set at 10^6 and 10^7 URLs: Bloom measured with tracemalloc (the bit array
  does not depend on the fill); stock = its set plus the fingerprint objects it holds
  (``sys.getsizeof``), measured at 10^6 (``--quick``: 10^5) and extrapolated linearly above;
* false-positive rate measured at capacity on fresh keys vs p, with and without verification.

Prints a table and writes ``bench/results/dupefilter.json``. Timings are wall-clock on this
machine; compare the ratios, not the microseconds.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import math
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from scrapy import Request
from scrapy.dupefilters import RFPDupeFilter
from scrapy.utils.test import get_crawler

from crawler.backends.bloom import LocalSeenSet, bloom_size
from crawler.dupefilter import BloomDupeFilter
from crawler.urls.urlnorm import normalize_url

RESULTS = Path(__file__).resolve().parent / "results" / "dupefilter.json"
P = 0.001
FINGERPRINTER = "crawler.urls.fingerprint.CanonicalRequestFingerprinter"
WORDS = ("news", "blog", "post", "article", "category", "tag", "user", "page", "docs", "api",
         "2024", "2025", "about", "team", "product", "item", "search", "archive", "en", "de",
         "faq", "help", "shop", "cart", "video", "photo", "events", "jobs", "press", "legal")
TRACKERS = ("utm_source=news", "utm_medium=email", "utm_campaign=x1", "gclid=abc123",
            "fbclid=IwAR0x", "msclkid=9f8e")


def generate_urls(n: int, seed: int = 7) -> list[str]:
    """``n`` URLs: distinct pages plus re-spelled repeats of earlier ones."""
    rng = random.Random(seed)
    hosts = [f"{rng.choice(WORDS)}{i}.example{rng.choice(['.com', '.org', '.net'])}"
             for i in range(300)]
    pages: list[tuple[str, str, list[str]]] = []
    urls = []
    for _ in range(n):
        if pages and rng.random() < 0.33:
            host, path, query = rng.choice(pages)
            urls.append(_spell(rng, host, path, query, variant=True))
            continue
        host = rng.choice(hosts)
        path = "/" + "/".join(rng.choice(WORDS) + (str(rng.randrange(10**4))
                                                    if rng.random() < 0.5 else "")
                              for _ in range(rng.randint(1, 5)))
        query = [f"{rng.choice(WORDS)}={rng.randrange(1000)}" for _ in range(rng.randint(0, 3))]
        pages.append((host, path, query))
        urls.append(_spell(rng, host, path, query, variant=False))
    return urls


def _spell(rng: random.Random, host: str, path: str, query: list[str], variant: bool) -> str:
    query = list(query)
    if rng.random() < 0.2:
        query.append(rng.choice(TRACKERS))
    if variant:
        rng.shuffle(query)
        host = host.upper() if rng.random() < 0.3 else host + (":80" if rng.random() < 0.3 else "")
    url = f"http://{host}{path}" + ("?" + "&".join(query) if query else "")
    if rng.random() < 0.1:
        url += "#section" + str(rng.randrange(5))
    return url


def per_op(fn: Any, items: list[Any]) -> float:
    """Microseconds per item of ``fn(item)`` over one pass (stateful: no repeats), GC off."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for item in items:
            fn(item)
        return (time.perf_counter() - start) / len(items) * 1e6
    finally:
        gc.enable()


def ours_dupefilter(capacity: int, verify: bool = False,
                    jobdir: str | None = None) -> BloomDupeFilter:
    settings: dict[str, Any] = {
        "REQUEST_FINGERPRINTER_CLASS": FINGERPRINTER,
        "BLOOM_CAPACITY": capacity, "BLOOM_ERROR_RATE": P, "BLOOM_VERIFY": verify,
    }
    if jobdir:
        settings["JOBDIR"] = jobdir
    return BloomDupeFilter.from_crawler(get_crawler(settings_dict=settings))


def bench_speed(urls: list[str]) -> dict[str, Any]:
    n = len(urls)
    stock_df = RFPDupeFilter.from_crawler(get_crawler())
    stock_requests = [Request(u) for u in urls]
    stock = per_op(stock_df.request_seen, stock_requests)
    from w3lib.url import canonicalize_url

    stock_canon = per_op(canonicalize_url, urls)

    results: dict[str, Any] = {"urls": n, "stock_request_seen_us": stock,
                               "stock_canonicalize_url_us": stock_canon}
    for key in ("", "verify_", "jobdir_"):
        with tempfile.TemporaryDirectory(prefix="bench-jobdir-") as tmp:
            df = ours_dupefilter(n, verify=key == "verify_", jobdir=tmp if key else None)
            requests = [Request(u) for u in urls]

            def ours(request: Request, df: BloomDupeFilter = df) -> bool:
                request.meta["canonical_url"] = normalize_url(request.url)
                return df.request_seen(request)

            results[f"ours_{key}request_seen_us"] = per_op(ours, requests)
            results[f"ours_{key}unique"] = len(df.seen)
            if key == "verify_":
                results["verify_false_positives_avoided"] = getattr(
                    df.seen, "false_positives_avoided", 0)
            df.close("finished")
    results["stock_unique"] = len(stock_df._fingerprints)
    results.update(_parts(urls))
    results["ratio"] = results["ours_request_seen_us"] / stock
    results["verify_ratio"] = results["ours_verify_request_seen_us"] / stock
    results["jobdir_ratio"] = results["ours_jobdir_request_seen_us"] / stock
    return results


def _parts(urls: list[str]) -> dict[str, float]:
    from pybloom_live import BloomFilter

    df = ours_dupefilter(len(urls))
    canon = [normalize_url(u) for u in urls]
    norm = per_op(normalize_url, urls)
    requests = [Request(u, meta={"canonical_url": c}) for u, c in zip(urls, canon, strict=True)]
    fingerprint = df.fingerprinter.fingerprint
    fp_us = per_op(fingerprint, requests)
    fps = [fingerprint(r) for r in requests]
    bloom_us = per_op(LocalSeenSet(len(urls), P).add, fps)
    pybloom = BloomFilter(capacity=len(urls) + 10, error_rate=P)
    pybloom_us = per_op(pybloom.add, fps)
    return {"ours_normalize_us": norm, "ours_fingerprint_us": fp_us, "ours_bloom_add_us": bloom_us,
            "pybloom_live_add_us": pybloom_us}


def bench_memory(stock_n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"p": P}
    optimum = -math.log(P) / math.log(2) ** 2
    for n in (10**6, 10**7):
        tracemalloc.start()
        seen = LocalSeenSet(n, P)
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        out[f"bloom_{n}_bytes"] = size
        out[f"bloom_{n}_bits_per_url"] = size * 8 / n
        out[f"bloom_{n}_vs_optimum"] = size * 8 / n / optimum
        out[f"bloom_stop_{n}_bits"] = bloom_size(n, P)[0]
        del seen
    stock_df = RFPDupeFilter.from_crawler(get_crawler())
    for i in range(stock_n):
        stock_df.request_seen(Request(f"https://h{i % 97}.example.com/p/{i}?q={i}"))
    # What the filter keeps: its set plus the fingerprint bytes objects it holds alive (the
    # fingerprinter's per-request cache dies with the requests, so it is not counted).
    held = stock_df._fingerprints
    stock_bytes = sys.getsizeof(held) + sum(sys.getsizeof(fp) for fp in held)
    per_url = stock_bytes / stock_n
    out.update({"stock_measured_n": stock_n, "stock_bytes_per_url": per_url})
    for n in (10**6, 10**7):
        out[f"stock_{n}_bytes"] = per_url * n
        out[f"stock_{n}_extrapolated"] = n > stock_n
        out[f"stock_{n}_vs_bloom"] = per_url * n / out[f"bloom_{n}_bytes"]
    out["optimum_bits_per_url"] = optimum
    return out


def bench_fp_rate(n: int, fresh: int) -> dict[str, Any]:
    keys = [hashlib.blake2b(b"in%d" % i, digest_size=16).digest() for i in range(n)]
    probes = [hashlib.blake2b(b"fresh%d" % i, digest_size=16).digest() for i in range(fresh)]
    out: dict[str, Any] = {"capacity": n, "fresh_keys": fresh, "p": P}
    for policy in ("stop", "grow"):
        seen = LocalSeenSet(n, P, on_full=policy)
        for key in keys:
            seen.add(key)
        out[f"{policy}_measured_rate"] = sum(k in seen for k in probes) / fresh
        out[f"{policy}_expected_rate"] = seen.expected_false_positive_rate
    seen = LocalSeenSet(n, P, on_full="stop", verify=True)
    for key in keys:
        seen.add(key)
    out["verify_measured_rate"] = sum(k in seen for k in probes) / fresh
    seen.close()
    return out


def table(speed: dict[str, Any], memory: dict[str, Any], fp: dict[str, Any]) -> str:
    rows = [
        ("per request, stock RFPDupeFilter.request_seen",
         f"{speed['stock_request_seen_us']:.2f} us"),
        ("  of which w3lib canonicalize_url", f"{speed['stock_canonicalize_url_us']:.2f} us"),
        ("per request, ours normalize + request_seen", f"{speed['ours_request_seen_us']:.2f} us"),
        ("  normalize_url", f"{speed['ours_normalize_us']:.2f} us"),
        ("  fingerprint (canonical URL in meta)", f"{speed['ours_fingerprint_us']:.2f} us"),
        ("  Bloom add (ours, bytearray)", f"{speed['ours_bloom_add_us']:.2f} us"),
        ("  pybloom-live add, same keys", f"{speed['pybloom_live_add_us']:.2f} us"),
        ("ratio ours / stock (target <= 1.0)", f"{speed['ratio']:.2f}"),
        ("per request, ours with BLOOM_VERIFY", f"{speed['ours_verify_request_seen_us']:.2f} us"),
        ("ratio verify / stock", f"{speed['verify_ratio']:.2f}"),
        ("per request, ours with JOBDIR", f"{speed['ours_jobdir_request_seen_us']:.2f} us"),
        ("ratio JOBDIR / stock", f"{speed['jobdir_ratio']:.2f}"),
        ("unique pages: stock / ours / verify",
         f"{speed['stock_unique']} / {speed['ours_unique']} / {speed['ours_verify_unique']}"),
    ]
    for n in (10**6, 10**7):
        extra = " (extrapolated)" if memory[f"stock_{n}_extrapolated"] else ""
        rows += [
            (f"memory at {n:.0e}: Bloom", f"{memory[f'bloom_{n}_bytes'] / 2**20:.1f} MiB, "
             f"{memory[f'bloom_{n}_bits_per_url']:.2f} bits/URL, "
             f"{memory[f'bloom_{n}_vs_optimum']:.3f}x optimum"),
            (f"memory at {n:.0e}: stock{extra}", f"{memory[f'stock_{n}_bytes'] / 2**20:.1f} MiB, "
             f"{memory['stock_bytes_per_url']:.1f} B/URL, "
             f"{memory[f'stock_{n}_vs_bloom']:.0f}x Bloom"),
        ]
    rows += [
        (f"FP rate at capacity {fp['capacity']:.0e}, p={P} (stop: one layer at p)",
         f"{fp['stop_measured_rate']:.5f} (expected {fp['stop_expected_rate']:.5f})"),
        ("FP rate, grow (layer 0 at 0.9 p)", f"{fp['grow_measured_rate']:.5f}"),
        ("FP rate with BLOOM_VERIFY", f"{fp['verify_measured_rate']:.5f}"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^5 URLs instead of 10^6")
    args = parser.parse_args(argv)
    logging.getLogger("crawler").setLevel(logging.ERROR)  # the capacity warnings are expected
    n = 10**5 if args.quick else 10**6
    urls = generate_urls(n)
    speed = bench_speed(urls)
    memory = bench_memory(stock_n=n)
    fp = bench_fp_rate(n, fresh=10**5)
    result = {"quick": args.quick, "speed": speed, "memory": memory, "fp_rate": fp}
    print(table(speed, memory, fp))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {RESULTS}")
    return result


if __name__ == "__main__":
    main()

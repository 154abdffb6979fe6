"""Overrides benchmark: ``python -m bench.overrides [--quick]`` from the project root.

What a person's rules (:mod:`crawler.dedup.overrides`) cost a crawl per page: the rule lookup a page
meets before its SimHash decision (``Overrides.page``), at rule sets from none to 10^4 URL rules
with 10^3 patterns and 10^3 host rules, side by side in one run with

* ``normalize_url`` of the same URLs (what every page already pays once), as the yardstick;
* a plain scan of the same rules in specificity order (every pattern and host tried on every
  page: what the index replaces), to show what the index buys.

50 hosts, 20,000 page URLs (``--quick``: 5,000), none of which a rule names (the common case:
every rule is tried and none matches). Prints a table and writes ``bench/results/overrides.json``.
Timings are wall-clock on this machine; compare the ratios, not the microseconds.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from crawler.dedup.overrides import HOST_PREFIX, Override, Overrides, make_override
from crawler.dedup.preference import host_of
from crawler.urls.urlnorm import normalize_url

RESULTS = Path(__file__).resolve().parent / "results" / "overrides.json"
HOSTS = 50
#: (URL rules, patterns, host rules) per row.
SIZES = ((0, 0, 0), (100, 0, 0), (10_000, 0, 0), (10_000, 100, 100), (10_000, 1_000, 1_000))


def rules_of(exact: int, patterns: int, hosts: int) -> list[Override]:
    rules = [make_override("keep", f"https://site{i % HOSTS}.test/page/{i}") for i in range(exact)]
    rules += [make_override("drop", f"https://site{i % HOSTS}.test/print{i}/*")
              for i in range(patterns)]
    rules += [make_override("keep", f"host:other{i}.test") for i in range(hosts)]
    return rules


def scan(rules: list[Override]) -> Any:
    """The lookup without an index: every pattern and host rule tried, most specific first."""
    exact = {r.target: r for r in rules if "*" not in r.target and
             not r.target.startswith(HOST_PREFIX)}
    general = sorted((r for r in rules if r.target not in exact), key=lambda r: r.specificity)
    compiled = [(r, re.compile(".*".join(map(re.escape, r.target.split("*")))))
                for r in general if not r.target.startswith(HOST_PREFIX)]
    hosts = [(r, r.target[len(HOST_PREFIX):]) for r in general if r.target.startswith(HOST_PREFIX)]

    def page(url: str) -> Override | None:
        if url in exact:
            return exact[url]
        for rule, glob in compiled:
            if glob.fullmatch(url):
                return rule
        host = host_of(url).split(":")[0]
        return next((r for r, name in hosts if host == name or host.endswith("." + name)), None)

    return page


def per_page(lookup: Any, urls: list[str]) -> float:
    """Microseconds per URL, best of three passes."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for url in urls:
            lookup(url)
        best = min(best, time.perf_counter() - start)
    return best / len(urls) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overrides",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 URLs instead of 20,000")
    args = parser.parse_args(argv)
    urls = [f"https://site{i % HOSTS}.test/article/{i}?ref={i % 7}"
            for i in range(5_000 if args.quick else 20_000)]
    yardstick = per_page(normalize_url, urls)
    rows = []
    print(f"{'rules (url/pattern/host)':>26} {'indexed us':>11} {'scan us':>9} "
          f"{'x normalize_url':>16} {'scan/indexed':>13}")
    for exact, patterns, hosts in SIZES:
        rules = rules_of(exact, patterns, hosts)
        indexed = per_page(Overrides(rules).page, urls)
        scanned = per_page(scan(rules), urls)
        row = {"url_rules": exact, "patterns": patterns, "host_rules": hosts,
               "indexed_us": round(indexed, 2), "scan_us": round(scanned, 2),
               "indexed_vs_normalize_url": round(indexed / yardstick, 3),
               "scan_vs_indexed": round(scanned / indexed, 1)}
        rows.append(row)
        print(f"{f'{exact}/{patterns}/{hosts}':>26} {indexed:>11.2f} {scanned:>9.2f} "
              f"{row['indexed_vs_normalize_url']:>16.3f} {row['scan_vs_indexed']:>13.1f}")
    print(f"normalize_url: {yardstick:.2f} us per URL")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"urls": len(urls), "normalize_url_us": round(yardstick, 2),
                                   "rows": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Run every benchmark in one command: ``.venv/bin/python -m bench [--quick] [--only a,b]``.

Each benchmark runs in its own child process (so one's memory does not inflate the next), prints
its own table and writes ``bench/results/<name>.json`` (``crawl-workers`` is ``bench.crawl
--workers 2``, the scale-out comparison: ``crawl_workers.json``); this runner then writes
``bench/results/all.json`` with each one's exit status and wall time. Order: the cheap ones first;
``scale`` is last: at full size it crawls 10^6 pages (about an hour; ``--quick``: 10^3 and 10^4).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ("simhash", "overrides", "quality", "dupefilter", "pagepath", "simindex", "redisindex",
           "storage", "storagescale", "indexload", "startup", "crawl", "crawl-workers", "cluster",
           "hostile-page", "faults", "scale")
#: Benchmarks that are a mode of another module: name -> (module, arguments).
MODES = {"crawl-workers": ("crawl", ["--workers", "2"]),  # writes crawl_workers.json
         "hostile-page": ("hostile_page", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(BENCHES))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHES)
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    summary = {}
    for name in names:
        module, extra = MODES.get(name, (name, []))
        command = [sys.executable, "-m", f"bench.{module}", *extra]
        command += ["--quick"] if args.quick else []
        print(f"\n=== bench.{name}: {' '.join(command[1:])}", flush=True)
        start = time.monotonic()
        code = subprocess.call(command, cwd=ROOT)
        summary[name] = {"exit": code, "seconds": round(time.monotonic() - start, 1)}
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "all.json").write_text(json.dumps(summary, indent=2) + "\n")
    for name, result in summary.items():
        print(f"{name:12} exit {result['exit']}  {result['seconds']:8.1f} s")
    return max((int(s["exit"]) for s in summary.values()), default=0)


if __name__ == "__main__":
    raise SystemExit(main())

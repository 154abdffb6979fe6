"""One huge page: the cost of a 30 MB page with 500,000 links, old behaviour and new side by side.

``.venv/bin/python -m bench.hostile_page [--mb 30] [--links 500000] [--quick] [-s NAME=VALUE ...]``
from the project root. One process serves a generated page on 127.0.0.1 with the scripted web
(:mod:`crawler.sitegen.scripted`; ``/``: ``--links`` links to ``/p/N`` padded with text to
``--mb`` megabytes; anything else answers 404); each
configuration crawls it in a ``scrapy crawl web`` child process with the project's settings,
``CLOSESPIDER_ITEMCOUNT=1`` and ``DOWNLOAD_DELAY=5`` (the crawl ends once the page's item
is stored: its links are judged and scheduled, and at most one of them fetched) and the crawler
pinned to one CPU. Configurations:

* ``old``: the behaviour before the page bounds, reproduced by settings: no link cap
  (``LINKS_PER_PAGE_MAX=0``), the whole body parsed (``PAGE_MAX_PARSE_CHARS=0``);
* ``new``: the project defaults.

Per configuration: the page's wall time (the huge response received to its item leaving the
pipelines, measured in the child), the maximum reactor lag (a 50 ms ``LoopingCall`` heartbeat:
the longest it fired late), the crawl's peak RSS (``ru_maxrss`` of the child), the links
followed and cut (``dedup/links_extracted``, ``dedup/links_capped``). Writes
``bench/results/hostile_page.json``. Numbers are machine-dependent: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from twisted.internet import task

from bench.crawl import ROOT, command, pin_cpus, run_child
from bench.probe import CrawlProbe
from crawler.sitegen.scripted import Answer, ScriptedWeb

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

#: Settings of each configuration (the ``old`` one reproduces the unbounded behaviour).
CONFIGS: dict[str, list[str]] = {
    "old": ["LINKS_PER_PAGE_MAX=0", "PAGE_MAX_PARSE_CHARS=0"],
    "new": [],
}
HEARTBEAT = 0.05  # seconds between two reactor heartbeats
LAG_PROBE = "bench.hostile_page.LagProbe"


def huge_page(megabytes: float, links: int) -> bytes:
    """An HTML page of about ``megabytes`` MB holding ``links`` links, text between them."""
    target = int(megabytes * 1_000_000)
    per_link = max(target // max(links, 1), 40)
    filler = "lorem ipsum dolor sit amet " * (per_link // 27 + 1)
    rows = []
    for i in range(links):
        anchor = f'<li><a href="/p/{i}">Page {i}</a> '
        rows.append(anchor + filler[: max(per_link - len(anchor) - 6, 0)] + "</li>\n")
    body = "".join(rows)
    return (f"<!DOCTYPE html><html><head><title>Huge</title></head><body><ul>\n{body}"
            "</ul></body></html>\n").encode()  # fmt: skip


class LagProbe(CrawlProbe):
    """:class:`bench.probe.CrawlProbe` plus a reactor heartbeat (``bench/max_lag_seconds``: the
    longest a 50 ms ``LoopingCall`` fired late) and ``bench/page_seconds``: the first response
    of at least 1 MB received to the first item scraped or dropped."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.beat = self.max_lag = 0.0
        self.page_start = self.page_end = 0.0
        self.loop = task.LoopingCall(self._tick)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LagProbe:
        probe = super().from_crawler(crawler)
        assert isinstance(probe, LagProbe)
        crawler.signals.connect(probe.item_done, signal=signals.item_scraped)
        crawler.signals.connect(probe.item_done, signal=signals.item_dropped)
        return probe

    def opened(self, spider: Any) -> None:
        super().opened(spider)
        self.beat = time.perf_counter()
        self.loop.start(HEARTBEAT, now=False)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.max_lag = max(self.max_lag, now - self.beat - HEARTBEAT)
        self.beat = now

    def response(self, **kwargs: Any) -> None:
        super().response(**kwargs)
        response = kwargs.get("response")
        if not self.page_start and response is not None and len(response.body) >= 1_000_000:
            self.page_start = time.perf_counter()

    def item_done(self, **kwargs: Any) -> None:
        if self.page_start and not self.page_end:
            self.page_end = time.perf_counter()

    def closed(self, spider: Any, reason: str) -> None:
        if self.loop.running:
            self.loop.stop()
        stats = self.crawler.stats
        assert stats is not None
        stats.set_value("bench/max_lag_seconds", round(self.max_lag, 3))
        stats.set_value("bench/page_seconds", round(self.page_end - self.page_start, 3))
        super().closed(spider, reason)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_page",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--mb", type=float, default=30.0, help="page size, MB (default 30)")
    parser.add_argument("--links", type=int, default=500_000, help="links on the page")
    parser.add_argument("--quick", action="store_true", help="a 5 MB page with 80,000 links")
    parser.add_argument("--only", help="comma-separated configurations: " + ", ".join(CONFIGS))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per crawl")
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for every configuration (repeatable)")
    args = parser.parse_args(argv)
    if args.quick:
        args.mb, args.links = min(args.mb, 5.0), min(args.links, 80_000)
    return args


def crawl_once(name: str, url: str, cpu: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """One crawl of the page with configuration ``name``; its measurements."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-hostile-{name}-"))
    try:
        extra = ["CLOSESPIDER_ITEMCOUNT=1", "ROBOTSTXT_OBEY=False", "DOWNLOAD_DELAY=5",
                 "RANDOMIZE_DOWNLOAD_DELAY=False", *CONFIGS[name], *args.set]  # fmt: skip
        run_args = argparse.Namespace(concurrency=4, set=extra)
        cmd = command("ours", url + "/", work, run_args, None, probe=LAG_PROBE)
        result = run_child(cmd, ROOT, work, cpu, args.timeout)
        stats = result["stats"]
        if result["exit"] != 0 or not stats:
            tail = (work / "stderr.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{name} crawl failed (exit {result['exit']}):\n{tail}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"config": name, "settings": CONFIGS[name],
            "page_s": float(stats.get("bench/page_seconds", 0)),
            "max_lag_s": float(stats.get("bench/max_lag_seconds", 0)),
            "peak_rss_mib": round(result["peak_rss_mib"], 1),
            "links_followed": int(stats.get("dedup/links_extracted", 0)),
            "links_capped": int(stats.get("dedup/links_capped", 0))}  # fmt: skip


def table(title: str, runs: list[dict[str, Any]]) -> str:
    lines = [title, f"{'':22}" + "".join(f"{r['config']:>14}" for r in runs)]
    rows = (("page wall time, s", "page_s", ".2f"), ("max reactor lag, s", "max_lag_s", ".2f"),
            ("peak RSS, MiB", "peak_rss_mib", ".0f"), ("links followed", "links_followed", "d"),
            ("links capped", "links_capped", "d"))  # fmt: skip
    for label, key, fmt in rows:
        lines.append(f"{label:22}" + "".join(f"{r[key]:>14{fmt}}" for r in runs))
    by = {r["config"]: r for r in runs}
    if "old" in by and "new" in by:
        old, new = by["old"], by["new"]
        lines.append(f"old / new: page time {old['page_s'] / max(new['page_s'], 1e-3):.1f}x, "
                     f"max lag {old['max_lag_s'] / max(new['max_lag_s'], 1e-3):.1f}x, "
                     f"peak RSS {old['peak_rss_mib'] / max(new['peak_rss_mib'], 1):.1f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(CONFIGS)
    page = huge_page(args.mb, args.links)
    title = f"Hostile page: {len(page) / 1e6:.1f} MB, {args.links} links"
    print(title, flush=True)
    cpu = pin_cpus(no_pin=False)
    runs = []
    with ScriptedWeb() as web:
        site = web[0].route("/", Answer(body=page))
        for name in names:
            runs.append(crawl_once(name, site.url, cpu, args))
            print(f"{name}: {runs[-1]}", flush=True)
    print()
    print(table(title, runs))
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "hostile_page.json").write_text(json.dumps(
        {"title": title, "args": vars(args), "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

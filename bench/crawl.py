"""Crawl benchmark: our ``web`` spider vs a stock Scrapy ``CrawlSpider`` on the same local site.

``.venv/bin/python -m bench.crawl [--site linkheavy|demo] [--pages N] [--links N] [--runs N]
[--concurrency N] [--quick] [--profile] [-s NAME=VALUE ...]`` from the project root (``-s``
settings apply to our crawl only, e.g. to compare a feature on and off).

One process serves the generated site (:mod:`crawler.sitegen`) on 127.0.0.1; each crawl runs in a
child process, the two crawlers alternating (stock, ours, ours, stock, ...) so drift in the
machine hits both alike. Ours is ``scrapy crawl web`` with the full project settings (every
dedup feature on, SQLite storage in a temp directory); stock is ``scrapy runspider
bench/stock_spider.py`` from outside the project, so Scrapy's stock settings apply. Only what
must be equal is set on both: ``ROBOTSTXT_OBEY=True``, ``DOWNLOAD_DELAY=0``, AutoThrottle off,
``CONCURRENT_REQUESTS`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` (``--concurrency``), telnet off.
On a machine with two or more CPUs the server is pinned to CPU 0 and the crawler to CPU 1 (the
crawl then gets exactly one core; ``--no-pin`` turns that off).

Per crawl: pages/s (responses received / wall seconds from spider open to close, measured inside
the child by ``bench.probe``), CPU ms per page (the child's CPU in the same window), peak RSS
(``ru_maxrss`` of the child from ``wait4``; "RSS at open" is the part already resident when
the spider opens: imports and components), pages fetched, duplicate fetches (the server's hits
mapped to site pages: the same page fetched more than once). The table shows the median and range
over ``--runs`` and the ratio ours/stock; ``--profile`` adds one cProfile run of each (Scrapy's
``--profile``) and lists the top cumulative shares. Writes ``bench/results/crawl.json`` (and
``crawl_profile_{ours,stock}.txt``). Numbers are machine-dependent: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crawler.sitegen import Site, demo_site, link_heavy_site
from crawler.siteserver import SiteServer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
STOCK_SPIDER = ROOT / "bench" / "stock_spider.py"
PROBE = "bench.probe.CrawlProbe"
KINDS = ("ours", "stock")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.crawl", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--site", choices=("linkheavy", "demo"), default="linkheavy")
    parser.add_argument("--pages", type=int, default=5000, help="link-heavy site pages (5000)")
    parser.add_argument("--links", type=int, default=100, help="links per page (100)")
    parser.add_argument("--runs", type=int, default=3, help="crawls of each spider (3)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (16)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per crawl (1800)")
    parser.add_argument("--quick", action="store_true", help="500 pages x 50 links, 1 run")
    parser.add_argument("--profile", action="store_true", help="one cProfile run of each too")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server/crawler CPUs")
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for our crawl only (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    for item in args.set:
        if "=" not in item:
            parser.error(f"-s {item!r}: expected NAME=VALUE")
    if args.quick:
        args.pages, args.links, args.runs = min(args.pages, 500), min(args.links, 50), 1
    for name in ("pages", "links", "runs", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def build_site(args: argparse.Namespace) -> tuple[Site, str]:
    if args.site == "demo":
        return demo_site(), "demo site"
    return link_heavy_site(args.pages, args.links), f"link-heavy {args.pages} pages x {args.links}"


def extensions_for(kind: str) -> str:
    """EXTENSIONS for a crawl: the probe (ours keeps the project's own extensions too)."""
    exts: dict[str, int] = {PROBE: 800}
    if kind == "ours":
        from settings import base

        exts = {**getattr(base, "EXTENSIONS", {}), **exts}
    return json.dumps(exts)


def command(
    kind: str, url: str, work: Path, args: argparse.Namespace, profile: Path | None
) -> list[str]:
    concurrency = args.concurrency
    common = {
        "ROBOTSTXT_OBEY": "True",
        "DOWNLOAD_DELAY": "0",
        "AUTOTHROTTLE_ENABLED": "False",
        "CONCURRENT_REQUESTS": str(concurrency),
        "CONCURRENT_REQUESTS_PER_DOMAIN": str(concurrency),
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(work / "crawl.log"),
        "BENCH_STATS_FILE": str(work / "stats.json"),
        "EXTENSIONS": extensions_for(kind),
    }
    if kind == "ours":
        cmd = ["crawl", "web", "-a", f"urls={url}"]
        common |= {
            "STORAGE_URL": f"sqlite:///{work / 'crawl.db'}",
            "DROPPED_LOG": str(work / "dropped.jsonl"),
        }
        common |= dict(item.split("=", 1) for item in args.set)
    else:
        cmd = ["runspider", str(STOCK_SPIDER), "-a", f"url={url}"]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    for name, value in common.items():
        cmd += ["-s", f"{name}={value}"]
    return [sys.executable, "-m", "scrapy", *cmd]


def run_child(cmd: list[str], cwd: Path, work: Path, cpu: int | None, timeout: float) -> dict:
    """Run one crawl; returns exit status, rusage of the child and its stats file."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("SCRAPY_SETTINGS_MODULE", None)

    def pin() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, preexec_fn=pin)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stats_path = work / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return {
        "exit": proc.returncode,
        "child_cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "stats": stats,
    }


def crawl_once(kind: str, server: SiteServer, cpu: int | None, args: argparse.Namespace,
               profile: Path | None = None) -> dict[str, Any]:  # fmt: skip
    server.reset_hits()
    work = Path(tempfile.mkdtemp(prefix=f"bench-crawl-{kind}-"))
    try:
        cwd = ROOT if kind == "ours" else work  # stock: outside the project, stock settings
        cmd = command(kind, server.base_url + "/", work, args, profile)
        result = run_child(cmd, cwd, work, cpu, args.timeout)
        if result["exit"] != 0 or not result["stats"]:
            tail = (work / "stderr.txt").read_text(errors="replace")[-2000:]
            log = (
                (work / "crawl.log").read_text(errors="replace")[-3000:]
                if (work / "crawl.log").exists()
                else ""
            )
            raise SystemExit(f"{kind} crawl failed (exit {result['exit']}):\n{tail}\n{log}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measure(kind, result, server)


def measure(kind: str, result: dict[str, Any], server: SiteServer) -> dict[str, Any]:
    stats = result["stats"]
    fetched = int(stats.get("response_received_count", 0))
    wall = float(stats.get("bench/wall_seconds") or stats.get("elapsed_time_seconds") or 0)
    cpu = float(stats.get("bench/cpu_seconds") or result["child_cpu_s"])
    per_page = server.canonical_hits()
    return {
        "kind": kind,
        "pages_fetched": fetched,
        "unique_pages": len(per_page),
        "duplicate_fetches": sum(n - 1 for n in per_page.values() if n > 1),
        "wall_s": wall,
        "pages_per_s": fetched / wall if wall else 0.0,
        "cpu_ms_per_page": 1000 * cpu / fetched if fetched else 0.0,
        "peak_rss_mib": round(result["peak_rss_mib"], 1),
        "rss_open_mib": float(stats.get("bench/rss_open_mib") or 0),
        "items": int(stats.get("item_scraped_count", 0)),
        "dupefilter_filtered": int(stats.get("dupefilter/filtered", 0)),
        "links_skipped_seen": int(stats.get("dedup/links_skipped_seen", 0)),
        "finish_reason": stats.get("finish_reason"),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        rates = [r["pages_per_s"] for r in mine]
        out[kind] = {
            "runs": len(mine),
            "pages_per_s_median": statistics.median(rates),
            "pages_per_s_min": min(rates),
            "pages_per_s_max": max(rates),
            "cpu_ms_per_page_median": statistics.median(r["cpu_ms_per_page"] for r in mine),
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in mine),
            "rss_open_mib_median": statistics.median(r["rss_open_mib"] for r in mine),
            "pages_fetched_median": statistics.median(r["pages_fetched"] for r in mine),
            "unique_pages_median": statistics.median(r["unique_pages"] for r in mine),
            "duplicate_fetches_median": statistics.median(r["duplicate_fetches"] for r in mine),
        }
    ours, stock = out["ours"], out["stock"]
    out["ratio_ours_over_stock"] = {
        key: (ours[key] / stock[key] if stock[key] else None)
        for key in (
            "pages_per_s_median",
            "cpu_ms_per_page_median",
            "peak_rss_mib_max",
            "rss_open_mib_median",
        )
    }
    return out


#: Where the time goes, by source file (the largest cumulative share of a function in it).
COMPONENTS = {
    "link extraction (stock)": ("scrapy/linkextractors/",),
    "Request objects": ("scrapy/http/request/__init__.py",),
    "referer middleware": ("spidermiddlewares/referer.py",),
    "offsite check": ("offsite.py",),
    "request fingerprint": ("scrapy/utils/request.py", "crawler/fingerprint.py"),
    "dupefilter": ("scrapy/dupefilters.py", "crawler/dupefilter.py", "crawler/bloom.py"),
    "our spider": ("crawler/spiders/web.py",),
    "our link middleware": ("crawler/middlewares/",),
    "URL normalization": ("crawler/urlnorm.py", "w3lib/url.py"),
    "page text": ("crawler/text.py",),
    "near-dup pipeline": ("crawler/pipelines/neardup.py",),
    "storage pipeline": ("crawler/pipelines/storage.py",),
    "HTML parsing": ("parsel/selector.py",),
    "HTTP download": ("core/downloader/handlers/http11.py",),
}


def _entries(path: Path) -> tuple[list[tuple[str, int, float, float]], float]:
    import pstats

    stats = pstats.Stats(str(path))
    total = stats.total_tt or 1.0  # type: ignore[attr-defined]
    raw = stats.stats.items()  # type: ignore[attr-defined]
    rows = [
        (f"{file}:{line}({func})", nc, tt, ct) for (file, line, func), (_, nc, tt, ct, _) in raw
    ]
    return rows, total


def profile_shares(path: Path, top: int = 25) -> dict[str, Any]:
    """Shares of the whole run: by component, top functions by cumulative and by own time.

    Functions above 95% cumulative (the reactor loop and its plumbing) are left out.
    """
    rows, total = _entries(path)
    components = {
        name: max((ct for fn, _, _, ct in rows if any(m in fn for m in marks)), default=0.0) / total
        for name, marks in COMPONENTS.items()
    }

    def short(fn: str) -> str:
        file, _, rest = fn.partition(":")
        return "/".join(Path(file).parts[-2:]) + ":" + rest

    listed = [r for r in rows if r[3] / total < 0.95]
    by_cum = sorted(listed, key=lambda r: r[3], reverse=True)[:top]
    by_own = sorted(rows, key=lambda r: r[2], reverse=True)[:top]
    return {
        "components": {k: v for k, v in components.items() if v > 0},
        "cumulative": [{"function": short(f), "calls": n, "share": c / total}
                       for f, n, _, c in by_cum],
        "own": [{"function": short(f), "calls": n, "share": t / total} for f, n, t, _ in by_own],
    }  # fmt: skip


def run_profiles(server: SiteServer, cpu: int | None, args: argparse.Namespace) -> dict[str, Any]:
    result = {}
    RESULTS.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        prof = RESULTS / f"crawl_{kind}.prof"
        crawl_once(kind, server, cpu, args, profile=prof)
        shares = profile_shares(prof)
        (RESULTS / f"crawl_profile_{kind}.txt").write_text(profile_text(kind, shares))
        result[kind] = shares
    return result


def profile_text(kind: str, shares: dict[str, Any]) -> str:
    lines = [f"{kind}: share of the whole crawl process (cProfile)", "", "by component:"]
    lines += [
        f"  {v:6.1%}  {k}" for k, v in sorted(shares["components"].items(), key=lambda x: -x[1])
    ]
    for title, key in (("top cumulative", "cumulative"), ("top own time", "own")):
        lines += ["", f"{title}:"]
        lines += [f"  {r['share']:6.1%} {r['calls']:>9}  {r['function']}" for r in shares[key]]
    return "\n".join(lines) + "\n"


def table(title: str, summary: dict[str, Any]) -> str:
    ours, stock, ratio = summary["ours"], summary["stock"], summary["ratio_ours_over_stock"]

    def rng(s: dict[str, Any]) -> str:
        return f"{s['pages_per_s_min']:.1f}-{s['pages_per_s_max']:.1f}"

    def fmt(value: float | None, spec: str = ".2f") -> str:
        return "" if value is None else format(value, spec)

    rows = [
        ("pages/s (median)", fmt(ours["pages_per_s_median"], ".1f"),
         fmt(stock["pages_per_s_median"], ".1f"), fmt(ratio["pages_per_s_median"])),
        ("pages/s (range)", rng(ours), rng(stock), ""),
        ("CPU ms per page", fmt(ours["cpu_ms_per_page_median"]),
         fmt(stock["cpu_ms_per_page_median"]), fmt(ratio["cpu_ms_per_page_median"])),
        ("peak RSS MiB", fmt(ours["peak_rss_mib_max"], ".0f"),
         fmt(stock["peak_rss_mib_max"], ".0f"), fmt(ratio["peak_rss_mib_max"])),
        ("  RSS at open MiB", fmt(ours["rss_open_mib_median"], ".0f"),
         fmt(stock["rss_open_mib_median"], ".0f"), fmt(ratio["rss_open_mib_median"])),
        ("pages fetched", fmt(ours["pages_fetched_median"], ".0f"),
         fmt(stock["pages_fetched_median"], ".0f"), ""),
        ("duplicate fetches", fmt(ours["duplicate_fetches_median"], ".0f"),
         fmt(stock["duplicate_fetches_median"], ".0f"), ""),
    ]  # fmt: skip
    lines = [title, f"{'':<20}{'ours':>12}{'stock':>12}{'ours/stock':>12}"]
    lines += [f"{name:<20}{a:>12}{b:>12}{c:>12}" for name, a, b, c in rows]
    return "\n".join(lines)


def progress_line(i: int, r: dict[str, Any]) -> str:
    return (
        f"  run {i + 1} {r['kind']:<5} {r['pages_per_s']:7.1f} pages/s  "
        f"{r['cpu_ms_per_page']:6.2f} CPU ms/page  {r['pages_fetched']} pages  "
        f"{r['duplicate_fetches']} duplicate fetches"
    )


def fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def pin_cpus(no_pin: bool) -> int | None:
    """Pin this process (the server) to CPU 0; return the CPU for the crawlers, or None."""
    if no_pin or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    os.sched_setaffinity(0, {cpus[0]})
    return cpus[1]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    site, label = build_site(args)
    cpu = pin_cpus(args.no_pin)
    title = (f"crawl bench: {label}, {args.runs} run(s) each, concurrency {args.concurrency}, "
             f"crawler on {'CPU ' + str(cpu) if cpu is not None else 'any CPU'}")  # fmt: skip
    print(title, flush=True)
    runs: list[dict[str, Any]] = []
    with SiteServer(site) as server:
        for i in range(args.runs):
            for kind in KINDS if i % 2 else KINDS[::-1]:
                record = crawl_once(kind, server, cpu, args)
                record["run"] = i
                runs.append(record)
                print(progress_line(i, record), flush=True)
        profiles = run_profiles(server, cpu, args) if args.profile else None
    summary = summarize(runs)
    print()
    print(table(title, summary))
    if profiles:
        print("\nprofile shares by component (details: bench/results/crawl_profile_*.txt)")
        names = [n for n in COMPONENTS if any(n in profiles[k]["components"] for k in KINDS)]
        for name in names:
            ours, stock = (profiles[k]["components"].get(name) for k in KINDS)
            print(f"  {name:<26}{fmt_share(ours):>8}{fmt_share(stock):>8}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"title": title, "args": vars(args), "runs": runs, "summary": summary,
              "profiles": profiles}  # fmt: skip
    (RESULTS / "crawl.json").write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {RESULTS / 'crawl.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

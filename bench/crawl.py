"""Crawl benchmark: our ``web`` spider vs a stock Scrapy ``CrawlSpider`` on the same local site.

``.venv/bin/python -m bench.crawl [--site linkheavy|demo] [--pages N] [--links N] [--runs N]
[--concurrency N] [--quick] [--profile] [--floor] [-s NAME=VALUE ...] [--workers N [--hosts H]
[--variant LABEL:tree=PATH,env=NAME=VALUE ...]]`` from
the project root (``-s`` settings apply to our crawl only, e.g. to compare a feature on and
off). ``--workers`` switches to the scale-out mode described at the end.

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
over ``--runs`` and the ratio ours/stock (``--no-stock``: no stock crawl); each ``--variant
LABEL:tree=PATH`` adds a crawler ``ours LABEL``, our crawl run from another checkout (the code
before a change, with that tree's settings and extensions) and/or environment, and the ratios
ours/LABEL: a change measured side by side with the code before it, on the same machine in the
same minutes (a checkout of a tree with ``crawler/urls/_skeleton.c`` needs ``python setup.py
build_ext --inplace`` run in it, or it runs the slower regular-expression fallback), with each
round's pair as a ratio too (``run by run``); ``--floor`` adds a crawler to the alternation,
``bench/floor_spider.py`` (Scrapy fetching the same pages with stock settings and
``CONCURRENT_ITEMS = 1``, and doing nothing else), and the CPU per page each crawler spends
above it: what is ours to cut, and what Scrapy costs whatever a spider does. ``--profile``
adds one cProfile run of each (Scrapy's ``--profile``) and lists the top cumulative shares.
``--together`` runs the crawls of a round at the same time instead of one after another, each
pinned to its own CPU (the CPUs swapped each round) against its own server thread: a machine
that speeds up and slows down over minutes (seen here: one crawler's CPU per page moving 30%
within five rounds) then moves both crawls of a pair alike, so the ``run by run`` ratio holds
still where the medians do not. As many crawlers as CPUs at most (ours and one ``--variant``
on two); wall times then share the servers and are not comparable with a lone crawl's.
Writes ``bench/results/crawl.json`` (and ``crawl_profile_{ours,stock}.txt``). Numbers are
machine-dependent: compare the ratios.

**Scale-out mode** (``--workers N [--hosts H]``): the same link-heavy site spread over ``H``
hosts (default 8: :func:`multi_host_sites`, ``--pages`` in all, one site per loopback address
127.0.0.2, 127.0.0.3, ... served by :func:`crawler.sitegen.server.serve_web`; the distributed
frontier gives each host to one worker, so a one-host site could use only one), crawled side by
side by (a) the local profile (``scrapy crawl web``, SQLite, one process), (b) one distributed
worker and (c) ``N`` distributed workers started together (``settings.distributed`` on the real
Redis and PostgreSQL, a fresh namespace and schema per crawl: :mod:`bench.cluster`'s harness),
in alternating order over ``--runs``; each ``--variant`` adds a configuration ``1 worker LABEL``,
one worker run from another checkout (``tree=``: the code before a change, side by side with
the code now) and/or with more environment variables (``env=PYTHONPATH=DIR``: a package added
or hidden, e.g. ``hiredis``). No CPU pinning in this mode: N workers, the site server,
Redis and PostgreSQL share the machine's CPUs, as they would on one host (``--no-pin`` is
implied). Each crawl uses the production defaults of the profile (lease, storage batch
interval, ``TRAP_FOLLOW_LINKS_OF``: the cluster harness's own ``all`` made the workers follow
duplicates' links where the local crawl did not), the settings ``command`` sets alike, and
``-s`` settings for every process. Per
configuration:

* pages/s: responses / seconds from the first worker's ``spider_opened`` to the last one's
  ``spider_closed`` (Unix time, stamped in each process by :class:`WorkerProbe`); the *active
  span* ends at the crawl's last response instead;
* CPU ms per page: the workers' CPU between open and close (``bench/cpu_seconds``) and of the
  whole processes (``wait4``: start-up and exit included), summed over workers;
* Redis round trips per page, counted in the workers by redis-py (:func:`count_redis_round_trips`:
  a command, a pipeline or a script call is one) between open and close, by script in the JSON;
  the server's ``total_commands_processed`` delta is shown too (every client of the server:
  other jobs count there, and each command a script runs); the calls sent on the event loop's
  own connections (``LoopRedis``: awaited, the reactor not held) are counted apart, per page;
* close lag: seconds from the crawl's last response to each worker's process exit; start-up:
  spawn to ``spider_opened``; idle waits: times a worker stayed open idle (``DontCloseSpider``);
* where the reactor (main) thread's time went, in ms per page (:class:`ReactorTime`): on a
  CPU (and of it in the kernel), runnable but waiting for a CPU, idle in the event loop's
  ``select``, and the rest (waiting for the GIL, or in a blocking call); and the loop's turns
  per page;
* where the CPU went (workers, site servers, Redis, PostgreSQL, the rest of the machine).

A crawl that does not finish with ``finished`` (say ``lease_lost`` when another job stalls the
machine past the lease) is listed and left out of the medians. Writes
``bench/results/crawl_workers.json``; ``--profile`` adds one cProfile run of the local profile
and of one worker (``crawl_profile_{local,worker}.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.probe import CrawlProbe
from crawler import defaults
from crawler.sitegen import Site, demo_site, link_heavy_site
from crawler.sitegen.server import SiteServer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
STOCK_SPIDER = ROOT / "bench" / "stock_spider.py"
FLOOR_SPIDER = ROOT / "bench" / "floor_spider.py"
PROBE = "bench.probe.CrawlProbe"


def add_site_arguments(parser: argparse.ArgumentParser, pages: int, runs_of: str) -> None:
    """The site, size, runs and crawl options every crawl benchmark takes."""
    parser.add_argument("--site", choices=("linkheavy", "demo"), default="linkheavy")
    parser.add_argument("--pages", type=int, default=pages,
                        help=f"link-heavy site pages ({pages})")  # fmt: skip
    parser.add_argument("--links", type=int, default=100, help="links per page (100)")
    parser.add_argument("--runs", type=int, default=3, help=f"crawls of each {runs_of} (3)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (16)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per crawl (1800)")
    parser.add_argument("--quick", action="store_true", help="500 pages x 50 links, 1 run")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.crawl", description=__doc__.split("\n")[0]
    )
    add_site_arguments(parser, pages=5000, runs_of="spider")
    parser.add_argument("--profile", action="store_true", help="one cProfile run of each too")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server/crawler CPUs")
    parser.add_argument("--floor", action="store_true",
                        help="a third crawl: Scrapy fetching the same pages, doing nothing "
                             "else (bench/floor_spider.py): a page's cost to Scrapy")  # fmt: skip
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="scale-out mode: local vs 1 vs N distributed workers",
    )
    parser.add_argument(
        "--hosts", type=int, default=8, help="scale-out mode: hosts the site is spread over (8)"
    )
    parser.add_argument(
        "--variant", action="append", default=[], metavar="LABEL:tree=PATH,env=NAME=VALUE",
        help="one more configuration run from another checkout (tree=) and/or with "
             "environment variables set (env=, repeatable), alternating with the others "
             "(repeatable): 'ours LABEL' in one process, '1 worker LABEL' with --workers",
    )  # fmt: skip
    parser.add_argument("--no-stock", action="store_true",
                        help="one-process mode: no stock Scrapy crawl (ours, the variants "
                             "and the floor only)")  # fmt: skip
    parser.add_argument(
        "--redis-delay", type=float, default=0.0, metavar="MS",
        help="scale-out mode: the workers reach Redis through a proxy holding each request this "
             "many ms (bench.delayproxy): Redis on another machine (0: loopback)",
    )  # fmt: skip
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for our crawl only (repeatable)")  # fmt: skip
    parser.add_argument("--together", action="store_true",
                        help="one-process mode: a round's crawls at the same time, each on its "
                             "own CPU (swapped each round) and server: drift hits a pair "
                             "alike")  # fmt: skip
    args = parser.parse_args(argv)
    if args.redis_delay < 0 or (args.redis_delay and not args.workers):
        parser.error(f"--redis-delay {args.redis_delay:g}: a delay >= 0 ms, with --workers")
    for item in args.set:
        if "=" not in item:
            parser.error(f"-s {item!r}: expected NAME=VALUE")
    if args.quick:
        args.pages, args.links, args.runs = min(args.pages, 500), min(args.links, 50), 1
    if args.floor and (args.workers or args.site != "linkheavy"):
        parser.error("--floor: the link-heavy site, without --workers")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    try:
        args.variants = dict(parse_variant(item) for item in args.variant)
    except ValueError as exc:
        parser.error(f"--variant: {exc}")
    for name in ("pages", "links", "runs", "concurrency", "hosts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.together:
        crawlers, cpus = kinds_of(args), together_cpus()
        if args.workers or args.profile or args.no_pin:
            parser.error("--together: one-process mode, pinned, without --profile")
        if not 2 <= len(crawlers) <= len(cpus):
            parser.error(f"--together runs 2 to {len(cpus)} crawlers at once (one per CPU), "
                         f"got {len(crawlers)} ({', '.join(crawlers)}): drop --floor, stock "
                         f"(--no-stock) or a --variant")  # fmt: skip
    return args


def together_cpus() -> list[int]:
    """The CPUs ``--together`` pins its crawlers to (all this process may use)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``LABEL:tree=PATH,env=NAME=VALUE,...`` -> (``"1 worker LABEL"``, ``{"tree": path or
    None, "env": {NAME: VALUE}}``): a worker configuration of the scale-out mode run from
    another checkout (``git worktree add``, or a copy of the tree before a change) and/or
    with more environment variables (``env=PYTHONPATH=DIR`` to add or hide a package)."""
    label, sep, spec = text.partition(":")
    if not label or not sep:
        raise ValueError(f"{text!r}: expected LABEL:tree=PATH,env=NAME=VALUE")
    tree: str | None = None  # (a string: the options are written to the JSON report)
    env: dict[str, str] = {}
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        if key == "tree" and value:
            tree = str(Path(value).resolve())
            if not (Path(tree) / "scrapy.cfg").is_file():
                raise ValueError(f"tree={value}: no scrapy.cfg there (not a checkout)")
        elif key == "env" and "=" in value:
            name, _, val = value.partition("=")
            env[name] = val
        else:
            raise ValueError(f"{part!r}: expected tree=PATH or env=NAME=VALUE")
    return f"1 worker {label}", {"tree": tree, "env": env}


def build_site(args: argparse.Namespace) -> tuple[Site, str]:
    if args.site == "demo":
        return demo_site(), "demo site"
    return link_heavy_site(args.pages, args.links), f"link-heavy {args.pages} pages x {args.links}"


def extensions_for(kind: str, probe: str = PROBE, profile: str = "base",
                   tree: Path | None = None) -> str:  # fmt: skip
    """EXTENSIONS for a crawl: the probe (ours keeps the extensions of the settings module
    ``settings.{profile}`` too: this checkout's, or ``tree``'s, read by a child there)."""
    exts: dict[str, int] = {probe: 800}
    if kind == "ours" and tree is not None:
        code = (f"import json, settings.{profile} as m; "
                "print(json.dumps(getattr(m, 'EXTENSIONS', {})))")  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                             text=True, check=True)  # fmt: skip
        exts = {**json.loads(out.stdout), **exts}
    elif kind == "ours":
        import importlib

        module = importlib.import_module(f"settings.{profile}")
        exts = {**getattr(module, "EXTENSIONS", {}), **exts}
    return json.dumps(exts)


def command(
    kind: str,
    url: str,
    work: Path,
    args: argparse.Namespace,
    profile: Path | None,
    probe: str = PROBE,
    python: list[str] | None = None,
    tree: Path | None = None,
) -> list[str]:
    """The crawl child's command line: ``args.concurrency`` (None: Scrapy's defaults) and
    ``args.set`` (ours only); ``python`` is the interpreter and its options (this one);
    ``tree``: ours runs from that checkout (its settings' extensions)."""
    concurrency = args.concurrency
    common = {
        "ROBOTSTXT_OBEY": "True",
        "DOWNLOAD_DELAY": "0",
        "AUTOTHROTTLE_ENABLED": "False",
    }
    if concurrency is not None:
        common |= {"CONCURRENT_REQUESTS": str(concurrency),
                   "CONCURRENT_REQUESTS_PER_DOMAIN": str(concurrency)}  # fmt: skip
    common |= {
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(work / "crawl.log"),
        "BENCH_STATS_FILE": str(work / "stats.json"),
        "EXTENSIONS": extensions_for(kind, probe, tree=tree),
    }
    if kind == "ours":
        cmd = ["crawl", "web", "-a", f"urls={url}"]
        common |= {
            "STORAGE_URL": f"sqlite:///{work / 'crawl.db'}",
            "DROPPED_LOG": str(work / "dropped.jsonl"),
        }
        common |= dict(item.split("=", 1) for item in args.set)
    elif kind == "floor":
        cmd = ["runspider", str(FLOOR_SPIDER), "-a", f"url={url}", "-a", f"pages={args.pages}"]
    else:
        cmd = ["runspider", str(STOCK_SPIDER), "-a", f"url={url}"]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    for name, value in common.items():
        cmd += ["-s", f"{name}={value}"]
    return [*(python or [sys.executable]), "-m", "scrapy", *cmd]


def child_env() -> dict[str, str]:
    """The environment of a crawl child: this one with the project on ``PYTHONPATH`` and no
    ``SCRAPY_SETTINGS_MODULE`` (the child's working directory picks its settings)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return env


def spawn_child(cmd: list[str], cwd: Path, cpu: int | None, out: Any, err: Any,
                env: dict[str, str] | None = None) -> Any:  # fmt: skip
    """Start one crawl child (pinned to ``cpu`` when given, ``env`` added to
    :func:`child_env`); the ``subprocess.Popen``."""

    def pin() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return subprocess.Popen(cmd, cwd=cwd, env={**child_env(), **(env or {})}, stdout=out,
                            stderr=err,
                            preexec_fn=pin)  # fmt: skip


def run_child(cmd: list[str], cwd: Path, work: Path, cpu: int | None, timeout: float,
              poll: float = 0.05, env: dict[str, str] | None = None) -> dict:  # fmt: skip
    """Run one crawl; returns exit status, rusage of the child, its stats file and when it
    exited (Unix time, within ``poll`` seconds)."""
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        proc = spawn_child(cmd, cwd, cpu, out, err, env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(poll)
    exited_at = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stats_path = work / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return {
        "exit": proc.returncode,
        "child_cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "stats": stats,
        "exited_at": exited_at,
    }


def crawl_once(kind: str, server: SiteServer, cpu: int | None, args: argparse.Namespace,
               profile: Path | None = None) -> dict[str, Any]:  # fmt: skip
    server.reset_hits()
    work = Path(tempfile.mkdtemp(prefix=f"bench-crawl-{kind.replace(' ', '-')}-"))
    variant = local_variants(args).get(kind)
    try:
        cwd = ROOT if kind == "ours" else work  # stock, floor: outside the project, stock settings
        env: dict[str, str] = {}
        if variant is not None:  # ours, from its checkout (this one without tree=)
            cwd, env = Path(variant["tree"] or ROOT), variant["env"]
        cmd = command("ours" if variant else kind, server.base_url + "/", work, args, profile,
                      tree=cwd if variant else None)  # fmt: skip
        started_at = time.time()
        result = run_child(cmd, cwd, work, cpu, args.timeout, env=env)
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
    # where and when it ran (--together: at the same time as its pair, on another CPU)
    return {**measure(kind, result, server), "cpu": cpu, "started_at": started_at,
            "exited_at": result["exited_at"]}


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


def kinds_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The crawlers a run compares: ours, each ``--variant`` (``ours LABEL``), stock (not with
    ``--no-stock``) and the floor with ``--floor``."""
    variants = tuple(local_variants(args))
    stock = () if getattr(args, "no_stock", False) else ("stock",)
    return ("ours", *variants, *stock, *(("floor",) if getattr(args, "floor", False) else ()))


def local_variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """``{"ours LABEL": spec}``: each ``--variant`` as a crawler of the one-process mode, our
    crawl run from another checkout and/or environment (:func:`parse_variant`)."""
    variants = getattr(args, "variants", None) or {}
    return {"ours " + name.removeprefix("1 worker "): spec for name, spec in variants.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in runs):
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
    keys = ("pages_per_s_median", "cpu_ms_per_page_median", "peak_rss_mib_max",
            "rss_open_mib_median")  # fmt: skip

    def over(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
        return {key: (a[key] / b[key] if b[key] else None) for key in keys}

    crawlers = list(out)
    ours = out["ours"]
    if "stock" in out:
        out["ratio_ours_over_stock"] = over(ours, out["stock"])
    variants = [k for k in crawlers if k.startswith("ours ")]
    if variants:  # the code now over the code of each variant (say, before a change)
        out["ratio_ours_over_variant"] = {k: {**over(ours, out[k]), **paired(runs, k)}
                                          for k in variants}  # fmt: skip
    if "floor" in out:  # what a page costs beyond Scrapy's own work
        floor = out["floor"]["cpu_ms_per_page_median"]
        out["cpu_ms_per_page_above_floor"] = {
            kind: out[kind]["cpu_ms_per_page_median"] - floor for kind in crawlers
            if kind != "floor"
        }
        out["cpu_ms_per_page_over_floor"] = {
            kind: out[kind]["cpu_ms_per_page_median"] / floor if floor else None
            for kind in crawlers if kind != "floor"
        }  # fmt: skip
    return out


def paired(runs: list[dict[str, Any]], other: str) -> dict[str, Any]:
    """Ours over ``other`` in CPU per page run by run (the two crawls of one round of the
    alternation, minutes apart): ``{"cpu_ms_per_page_paired": [ratio, ...],
    "cpu_ms_per_page_paired_median": ...}``; empty without round numbers. The machine may drift
    within a run (seen: ours 3.4 -> 6.0 ms a page over five rounds); a round's pair drifts
    less than the medians of the whole run."""
    rounds: dict[int, dict[str, float]] = {}
    for r in runs:
        if "run" in r and r["kind"] in ("ours", other):
            rounds.setdefault(r["run"], {})[r["kind"]] = r["cpu_ms_per_page"]
    ratios = [pair["ours"] / pair[other] for _, pair in sorted(rounds.items())
              if len(pair) == 2 and pair[other]]  # fmt: skip
    if not ratios:
        return {}
    return {"cpu_ms_per_page_paired": [round(x, 3) for x in ratios],
            "cpu_ms_per_page_paired_median": statistics.median(ratios)}


#: Where the time goes, by source file (the largest cumulative share of a function in it).
COMPONENTS = {
    "link extraction (stock)": ("scrapy/linkextractors/",),
    "Request objects": ("scrapy/http/request/__init__.py",),
    "referer middleware": ("spidermiddlewares/referer.py",),
    "offsite check": ("offsite.py",),
    "request fingerprint": ("scrapy/utils/request.py", "crawler/urls/fingerprint.py"),
    "dupefilter": ("scrapy/dupefilters.py", "crawler/dupefilter/", "crawler/backends/bloom.py"),
    "our spider": ("crawler/spiders/web.py",),
    "our link middleware": ("crawler/middlewares/",),
    "URL normalization": ("crawler/urls/urlnorm.py", "w3lib/url.py"),
    "page text": ("crawler/content/text.py",),
    "content decider": ("crawler/dedup/", "crawler/pipelines/neardup.py"),
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
    for kind in kinds_of(args):
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
    """Each crawler (ours, the variants, stock) side by side, then ours over each of the
    others, then the floor and each crawler's CPU above it and as a multiple of it."""
    crawlers = [k for k in ("ours", *(k for k in summary if k.startswith("ours ")), "stock")
                if k in summary]  # fmt: skip
    ratios = {"stock": summary.get("ratio_ours_over_stock"),
              **summary.get("ratio_ours_over_variant", {})}  # fmt: skip
    others = [k for k in crawlers[1:] if ratios.get(k)]

    def rng(s: dict[str, Any]) -> str:
        return f"{s['pages_per_s_min']:.1f}-{s['pages_per_s_max']:.1f}"

    def fmt(value: float | None, spec: str = ".2f") -> str:
        return "" if value is None else format(value, spec)

    def row(name: str, key: str | None, spec: str = ".2f",
            cell: Any = None) -> list[str]:  # fmt: skip
        cells = [cell(summary[k]) if cell else fmt(summary[k][key], spec) for k in crawlers]
        cells += [fmt(ratios[k].get(key)) if key in ratios[k] else "" for k in others]
        return [name, *cells]

    rows = [row("pages/s (median)", "pages_per_s_median", ".1f"),
            row("pages/s (range)", None, cell=rng),
            row("CPU ms per page", "cpu_ms_per_page_median"),
            row("peak RSS MiB", "peak_rss_mib_max", ".0f"),
            row("  RSS at open MiB", "rss_open_mib_median", ".0f"),
            row("pages fetched", "pages_fetched_median", ".0f"),
            row("duplicate fetches", "duplicate_fetches_median", ".0f")]  # fmt: skip
    if any("cpu_ms_per_page_paired_median" in ratios[k] for k in others):  # the same, pairwise
        rows.insert(3, row("  run by run", "cpu_ms_per_page_paired_median", cell=lambda _: ""))
    heads = [*crawlers, *(f"ours/{k.removeprefix('ours ')}" for k in others)]
    widths = [max(12, len(h) + 2) for h in heads]
    lines = [title, f"{'':<20}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True))]
    lines += [f"{r[0]:<20}" + "".join(f"{c:>{w}}" for c, w in zip(r[1:], widths, strict=True))
              for r in rows]  # fmt: skip
    floor = summary.get("floor")
    if floor is not None:
        above, times = summary["cpu_ms_per_page_above_floor"], summary["cpu_ms_per_page_over_floor"]
        lines += ["", "floor: Scrapy fetching the same pages and doing nothing else",
                  f"{'pages/s (median)':<20}{fmt(floor['pages_per_s_median'], '.1f'):>12}",
                  f"{'CPU ms per page':<20}{fmt(floor['cpu_ms_per_page_median']):>12}"]
        lines += [f"{'  ' + k + ' above it':<20}{fmt(above[k]):>12}  ({fmt(times[k])}x the floor)"
                  for k in crawlers]  # fmt: skip
    return "\n".join(lines)


def progress_line(i: int, r: dict[str, Any]) -> str:
    return (
        f"  run {i + 1} {r['kind']:<6} {r['pages_per_s']:7.1f} pages/s  "
        f"{r['cpu_ms_per_page']:6.2f} CPU ms/page  {r['pages_fetched']} pages  "
        f"{r['duplicate_fetches']} duplicate fetches"
    )


def fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def write_report(name: str, title: str, args: argparse.Namespace, runs: list[dict[str, Any]],
                 summary: dict[str, Any], profiles: Any) -> None:
    """Write ``bench/results/<name>`` (both modes' JSON report) and say where."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"title": title, "args": vars(args), "runs": runs, "summary": summary,
              "profiles": profiles}  # fmt: skip
    (RESULTS / name).write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {RESULTS / name}")


def pin_cpus(no_pin: bool) -> int | None:
    """Pin this process (the server) to CPU 0; return the CPU for the crawlers, or None."""
    if no_pin or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    os.sched_setaffinity(0, {cpus[0]})
    return cpus[1]


# --- scale-out mode: --workers N ------------------------------------------------------------------

#: Lua scripts of the distributed profile, by the name a round trip is reported under.
SCRIPT_MODULES = ("crawler.cluster.frontier", "crawler.cluster.worker",
                  "crawler.backends.redis.bloom_lua", "crawler.backends.redis.index_lua",
                  "crawler.backends.redis.pending")  # fmt: skip
WORKER_PROBE = "bench.crawl.WorkerProbe"
_TRIPS: Counter[str] | None = None
_WAITS: dict[str, float] = {}  # seconds spent in read_response, by command
_REACTOR_WAIT = [0.0]  # of those, seconds the main (reactor) thread spent: it was blocked
_LOOP_CALLS: Counter[str] = Counter()  # calls on the event loop's connections, by command


def count_redis_round_trips() -> Counter[str]:
    """Round trips of this process's redis-py clients, by command (``EVALSHA:<sha1 prefix>`` for
    a script): every ``send_packed_command`` writes one request (one command, a pipeline, a
    script call) and its answer is awaited before the next. The seconds spent waiting for
    (and parsing) answers go to :data:`_WAITS` under the command last sent on the connection.
    Patched in once per process."""
    global _TRIPS
    if _TRIPS is None:
        from redis.connection import AbstractConnection

        trips: Counter[str] = Counter()
        send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response

        def counted(self: Any, command: Any, check_health: bool = True) -> None:
            self._bench_command = name = _command_name(command)
            trips[name] += 1
            send(self, command, check_health)

        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return read(self, *args, **kwargs)
            finally:
                name, spent = getattr(self, "_bench_command", "?"), time.perf_counter() - start
                _WAITS[name] = _WAITS.get(name, 0.0) + spent
                if threading.current_thread() is threading.main_thread():
                    _REACTOR_WAIT[0] += spent

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        AbstractConnection.read_response = timed  # type: ignore[method-assign]
        _count_loop_calls()
        _TRIPS = trips
    return _TRIPS


def _count_loop_calls() -> None:
    """Count the calls sent on the event loop's Redis connections
    (:class:`crawler.backends.redis.aio.LoopRedis`: awaited, the reactor not held) into
    :data:`_LOOP_CALLS`, by command as :func:`_command_name` names them."""
    from crawler.backends.redis.aio import LoopRedis

    reply = LoopRedis._reply

    def counted(self: Any, args: tuple[Any, ...]) -> Any:
        # named from the arguments (no packing, no coroutine of its own: the count must not
        # cost the worker it measures)
        name = str(args[0]).upper()
        _LOOP_CALLS[f"EVALSHA:{str(args[1])[:8]}" if name == "EVALSHA" else name] += 1
        return reply(self, args)

    LoopRedis._reply = counted  # type: ignore[method-assign]


def _command_name(packed: Any) -> str:
    first = packed if isinstance(packed, (bytes, str)) else packed[0]
    head = bytes(first[:160], "utf-8") if isinstance(first, str) else bytes(first[:160])
    parts = head.split(b"\r\n")
    name = parts[2].decode("ascii", "replace").upper() if len(parts) > 2 else "?"
    if name == "EVALSHA" and len(parts) > 4:
        return f"EVALSHA:{parts[4][:8].decode('ascii', 'replace')}"
    return name


def script_names() -> dict[str, str]:
    """``EVALSHA:<sha1 prefix>`` -> ``module.NAME`` of every Lua script of the profile."""
    import hashlib
    import importlib

    names = {}
    for module_name in SCRIPT_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and "redis.call" in value:
                sha = hashlib.sha1(value.encode()).hexdigest()[:8]
                names[f"EVALSHA:{sha}"] = f"{module_name.rsplit('.', 1)[1]}.{name.strip('_')}"
    return names


class WorkerProbe(CrawlProbe):
    """:class:`bench.probe.CrawlProbe` plus Unix-time stamps that compare across processes
    (``bench/open_unix``, ``bench/last_response_unix``, ``bench/close_unix``) and the Redis
    round trips made between open and close (``bench/redis_round_trips``, and per command
    ``bench/redis/<command>``; :func:`count_redis_round_trips`)."""

    def __init__(self, crawler: Any) -> None:
        super().__init__(crawler)
        self.trips = count_redis_round_trips()
        self.trips_open: Counter[str] = Counter()
        self.waits_open: dict[str, float] = {}
        self.reactor_wait_open = 0.0
        self.loop_calls_open: Counter[str] = Counter()
        self.open_unix = self.last_unix = 0.0
        self.reactor = ReactorTime()

    def opened(self, spider: Any) -> None:
        super().opened(spider)
        self.reactor.start()
        self.open_unix = self.last_unix = time.time()
        self.trips_open = self.trips.copy()
        self.waits_open = _WAITS.copy()
        self.reactor_wait_open = _REACTOR_WAIT[0]
        self.loop_calls_open = _LOOP_CALLS.copy()

    def response(self, **kwargs: Any) -> None:
        super().response(**kwargs)
        self.last_unix = time.time()

    def closed(self, spider: Any, reason: str) -> None:
        stats = self.crawler.stats
        trips = self.trips - self.trips_open
        stats.set_value("bench/open_unix", self.open_unix)
        stats.set_value("bench/last_response_unix", self.last_unix)
        stats.set_value("bench/close_unix", time.time())
        stats.set_value("bench/redis_round_trips", sum(trips.values()))
        for name, count in trips.items():
            stats.set_value(f"bench/redis/{name}", count)
        waits = {k: v - self.waits_open.get(k, 0.0) for k, v in _WAITS.items()}
        stats.set_value("bench/redis_wait_seconds", round(sum(waits.values()), 3))
        stats.set_value("bench/redis_wait_reactor_seconds",
                        round(_REACTOR_WAIT[0] - self.reactor_wait_open, 3))
        for name, seconds in waits.items():
            stats.set_value(f"bench/redis_wait/{name}", round(seconds, 3))
        for name, count in (_LOOP_CALLS - self.loop_calls_open).items():
            stats.set_value(f"bench/redis_loop/{name}", count)
        main, rest = thread_cpu()
        stats.set_value("bench/main_thread_cpu_seconds", main)
        stats.set_value("bench/other_threads_cpu_seconds", rest)
        for key, value in self.reactor.stop().items():
            stats.set_value(f"bench/reactor_{key}", value)
        super().closed(spider, reason)


class ReactorTime:
    """Where the reactor (main) thread's time went between :meth:`start` and :meth:`stop`, run
    on that thread: ``span`` seconds, of them ``cpu`` on a CPU (``system``: in the kernel, as
    system calls; clock ticks) and ``runq`` runnable but waiting for one (Linux
    ``/proc/thread-self/schedstat``), ``idle`` inside the event loop's
    ``select`` (nothing to do: every page waits on a server), and ``rest``, the span less
    those three: waiting for the GIL (other threads running Python) or in a blocking call
    (redis-py on this thread). Approximate: ``select``'s own CPU and a wait to run after it
    returns count twice, so ``rest`` may read slightly low. ``turns``: the loop's iterations.
    Empty where the schedstat file or the loop's selector is missing."""

    def __init__(self) -> None:
        self.idle, self.turns = 0.0, 0
        self._sched0: tuple[int, int, int] | None = None
        self._wall0 = 0.0
        self._selector: Any = None

    @staticmethod
    def _sched() -> tuple[int, int, int] | None:
        """CPU and run-queue ns, and kernel (system) CPU ns, of the calling thread."""
        try:
            cpu, runq = Path("/proc/thread-self/schedstat").read_text().split()[:2]
            stat = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            return None
        return int(cpu), int(runq), int(stat[12]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        import asyncio

        try:
            selector = asyncio.get_event_loop()._selector  # type: ignore[attr-defined]
        except (RuntimeError, AttributeError):
            return
        select = selector.select

        def timed(timeout: float | None = None) -> Any:
            began = time.perf_counter()
            try:
                return select(timeout)
            finally:
                self.idle += time.perf_counter() - began
                self.turns += 1

        selector.select, self._selector = timed, selector
        self._sched0, self._wall0 = self._sched(), time.perf_counter()

    def stop(self) -> dict[str, float]:
        if self._selector is None or self._sched0 is None:
            return {}
        del self._selector.select  # the selector's own method again
        sched = self._sched()
        if sched is None:
            return {}
        span = time.perf_counter() - self._wall0
        cpu, runq, system = ((b - a) / 1e9 for a, b in zip(self._sched0, sched, strict=True))
        return {"span_s": round(span, 3), "cpu_s": round(cpu, 3), "runq_s": round(runq, 3),
                "system_s": round(system, 3),
                "idle_s": round(self.idle, 3), "rest_s": round(span - cpu - runq - self.idle, 3),
                "turns": self.turns}  # fmt: skip


def thread_cpu() -> tuple[float, float]:
    """CPU seconds so far of this process's main (reactor) thread and of its other threads
    (the pools that write storage and run blocking calls), from Linux ``/proc``."""
    tick, main, rest = os.sysconf("SC_CLK_TCK"), 0.0, 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used = (int(fields[11]) + int(fields[12])) / tick
        if task.name == str(os.getpid()):
            main += used
        else:
            rest += used
    return round(main, 2), round(rest, 2)


def multi_host_sites(pages: int, links: int, hosts: int) -> list[Site]:
    """The link-heavy site split over ``hosts`` hosts: ``pages`` pages in all, each host its own
    site (seed = host number, so no two hosts share content), links within the host."""
    share, extra = divmod(pages, hosts)
    return [link_heavy_site(share + (i < extra), links, seed=i) for i in range(hosts)]


def services_cpu(client: Any) -> dict[str, float]:
    """CPU seconds so far of Redis, PostgreSQL (every ``postgres`` process, exited backends
    included through the postmaster's children time), this process (the site servers) and the
    machine (busy and total, all CPUs), and Redis's command count. Redis, PostgreSQL and the
    machine serve every user of this host: other jobs running meanwhile are counted too."""
    info = {**client.info("cpu"), **client.info("stats")}
    tick = os.sysconf("SC_CLK_TCK")
    postgres = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.find("(") + 1 : text.rfind(")")], text[text.rfind(")") + 2 :]
        if name.startswith("postgres"):
            postgres += sum(int(v) for v in fields.split()[11:15]) / tick
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "redis_cpu_s": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        "redis_commands": float(info["total_commands_processed"]),
        "postgres_cpu_s": postgres,
        "bench_cpu_s": own.ru_utime + own.ru_stime,
        "machine_busy_s": (sum(cpu[:3]) + cpu[5] + cpu[6]) / tick,
        "machine_steal_s": cpu[7] / tick,
        "machine_total_s": sum(cpu) / tick,
    }


def worker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What every crawl of the scale-out mode sets alike (as ``command`` does for ours)."""
    return {
        "ROBOTSTXT_OBEY": "True", "DOWNLOAD_DELAY": "0", "AUTOTHROTTLE_ENABLED": "False",
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "TELNETCONSOLE_ENABLED": "False", "LOG_LEVEL": "INFO",
        "DISTRIBUTED_LEASE_SECONDS": defaults.DISTRIBUTED_LEASE_SECONDS,
        "STORAGE_BATCH_SECONDS": defaults.STORAGE_BATCH_SECONDS,
        "DEDUP_PROGRESS_INTERVAL": defaults.DEDUP_PROGRESS_INTERVAL,
        # the cluster harness follows every page's links (its scenarios count duplicates'
        # links); a crawl follows the kept pages' links, as the local profile here does
        "TRAP_FOLLOW_LINKS_OF": defaults.TRAP_FOLLOW_LINKS_OF,
        "EXTENSIONS": extensions_for("ours", WORKER_PROBE, "distributed"),
        **dict(item.split("=", 1) for item in args.set),
    }  # fmt: skip


def local_run(servers: list[SiteServer], args: argparse.Namespace, work: Path,
              profile: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One process of the local profile over the web; its figures, as for a worker."""
    seeds = ",".join(s.url("/") for s in servers)
    work.mkdir(parents=True, exist_ok=True)
    spawned = time.time()
    cmd = command("ours", seeds, work, args, profile, WORKER_PROBE)
    result = run_child(cmd, ROOT, work, None, args.timeout, poll=0.01)
    if result["exit"] != 0 or not result["stats"]:
        tail = (work / "stderr.txt").read_text(errors="replace")[-2000:]
        raise SystemExit(f"local crawl failed (exit {result['exit']}):\n{tail}")
    return {"stats": result["stats"], "exited_at": result["exited_at"],
            "cpu_s": result["child_cpu_s"], "spawned": spawned}  # fmt: skip


def cluster_run(servers: list[SiteServer], args: argparse.Namespace, work: Path, n: int,
                profile: Path | None = None,
                variant: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``n`` distributed workers started together on a fresh namespace and schema (run from
    the ``variant``'s tree, with its environment: :func:`parse_variant`)."""
    from bench.cluster import cluster_on

    settings = worker_settings(args)
    with cluster_on(servers, work) as cluster:
        cluster.delay = 0.0
        if variant is not None:
            cluster.root = Path(variant["tree"]) if variant["tree"] else cluster.root
            cluster.extra_env = dict(variant["env"])
        spawned = []
        for i in range(n):
            spawned.append(time.time())
            cli = ["--profile", str(profile)] if profile is not None and i == 0 else []
            cluster.start(cli=cli, **settings)
        cluster.reap(args.timeout)
        out = []
        for worker, start in zip(cluster.workers, spawned, strict=True):
            if worker.proc.returncode != 0 or not worker.stats:
                err = worker.proc.stderr.read()[-2000:] if worker.proc.stderr else ""
                raise SystemExit(f"worker failed (exit {worker.proc.returncode}):\n{err}\n"
                                 f"{worker.log[-3000:]}")  # fmt: skip
            out.append({"stats": worker.stats, "exited_at": worker.exited_at,
                        "cpu_s": worker.cpu_s, "spawned": start})  # fmt: skip
    return out


def config_figures(
    name: str, procs: list[dict[str, Any]], servers: list[SiteServer],
    before: dict[str, float], after: dict[str, float],
) -> dict[str, Any]:  # fmt: skip
    """The figures of one configuration's crawl (module docstring, scale-out mode)."""
    stats = [p["stats"] for p in procs]
    pages = sum(int(s.get("response_received_count", 0)) for s in stats)
    opened = min(float(s["bench/open_unix"]) for s in stats)
    closed = max(float(s["bench/close_unix"]) for s in stats)
    last = max(float(s["bench/last_response_unix"]) for s in stats)
    trips: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    loop_calls: Counter[str] = Counter()
    for s in stats:
        loop_calls.update({k[len("bench/redis_loop/"):]: int(v) for k, v in s.items()
                           if k.startswith("bench/redis_loop/")})  # fmt: skip
        trips.update({k[len("bench/redis/"):]: int(v) for k, v in s.items()
                      if k.startswith("bench/redis/")})  # fmt: skip
        waits.update({k[len("bench/redis_wait/"):]: float(v) for k, v in s.items()
                      if k.startswith("bench/redis_wait/")})  # fmt: skip
    names = script_names()
    hits = [s.canonical_hits() for s in servers]
    used = {k: after[k] - before[k] for k in before}

    def per(value: float) -> float:
        return value / pages if pages else 0.0

    return {
        "config": name, "workers": len(procs), "pages_fetched": pages,
        "responses": [int(s.get("response_received_count", 0)) for s in stats],
        "unique_pages": sum(len(h) for h in hits),
        "duplicate_fetches": sum(n - 1 for h in hits for n in h.values() if n > 1),
        "span_s": closed - opened, "active_s": last - opened,
        "pages_per_s": pages / (closed - opened) if closed > opened else 0.0,
        "pages_per_s_active": pages / (last - opened) if last > opened else 0.0,
        "cpu_ms_per_page": 1000 * per(sum(float(s["bench/cpu_seconds"]) for s in stats)),
        "process_cpu_ms_per_page": 1000 * per(sum(p["cpu_s"] for p in procs)),
        "startup_s": [round(float(p["stats"]["bench/open_unix"]) - p["spawned"], 3)
                      for p in procs],
        "close_lag_s": [round(p["exited_at"] - last, 3) for p in procs],
        "closed_after_s": [round(float(s["bench/close_unix"]) - last, 3) for s in stats],
        "worker_open_last_close_s": [[round(float(s[f"bench/{k}_unix"]) - opened, 2)
                                      for k in ("open", "last_response", "close")]
                                     for s in stats],
        "redis_round_trips_per_page": per(sum(trips.values())),
        "redis_round_trips": {names.get(k, k): v for k, v in trips.most_common()},
        "redis_wait_ms_per_page": 1000 * per(sum(float(s.get("bench/redis_wait_seconds", 0))
                                                 for s in stats)),
        "redis_wait_reactor_ms_per_page": 1000 * per(sum(
            float(s.get("bench/redis_wait_reactor_seconds", 0)) for s in stats)),
        "redis_wait_s": {names.get(k, k): round(v, 3) for k, v in waits.most_common()},
        "redis_commands_per_page": per(used["redis_commands"]),
        "redis_loop_calls_per_page": per(sum(loop_calls.values())),
        "redis_loop_calls": {names.get(k, k): v for k, v in loop_calls.most_common()},
        "cpu_s": {"workers": sum(p["cpu_s"] for p in procs), "redis": used["redis_cpu_s"],
                  "postgres": used["postgres_cpu_s"], "site_servers": used["bench_cpu_s"],
                  "machine_busy": used["machine_busy_s"],
                  "machine_steal": used["machine_steal_s"],
                  "machine_capacity": used["machine_total_s"]},
        "main_thread_cpu_s": [s.get("bench/main_thread_cpu_seconds") for s in stats],
        "other_threads_cpu_s": [s.get("bench/other_threads_cpu_seconds") for s in stats],
        **{f"reactor_{key}_ms_per_page": 1000 * per(sum(float(s.get(f"bench/reactor_{key}", 0))
                                                        for s in stats))
           for key in REACTOR_KEYS},
        "reactor_turns_per_page": per(sum(int(s.get("bench/reactor_turns", 0)) for s in stats)),
        "idle_waits": sum(int(s.get("dedup/shared/idle_waits", 0)) for s in stats),
        "hosts_stolen": sum(int(s.get("dedup/shared/hosts_stolen", 0)) for s in stats),
        "finish_reasons": [s.get("finish_reason") for s in stats],
        "finished": all(s.get("finish_reason") == "finished" for s in stats),
    }  # fmt: skip


def scaleout_once(name: str, servers: list[SiteServer], args: argparse.Namespace, tmp: Path,
                  profile: Path | None = None) -> dict[str, Any]:  # fmt: skip
    from bench.cluster import REDIS_URL
    from crawler.backends.redis import connect

    client = connect(REDIS_URL)
    for server in servers:
        server.reset_hits()
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
    before = services_cpu(client)
    if name == "local":
        procs = [local_run(servers, args, work, profile)]
    else:
        n = args.workers if name == f"{args.workers} workers" and args.workers > 1 else 1
        procs = cluster_run(servers, args, work, n, profile, args.variants.get(name))
    after = services_cpu(client)
    client.close()
    return config_figures(name, procs, servers, before, after)


def scaleout_configs(args: argparse.Namespace) -> list[str]:
    many = [f"{args.workers} workers"] if args.workers > 1 else []
    return ["local", "1 worker", *args.variants, *many]


def summarize_scaleout(runs: list[dict[str, Any]], configs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in configs:
        mine = [r for r in runs if r["config"] == name and r["finished"]]
        if not mine:
            raise SystemExit(f"no {name} crawl finished: see the runs in the JSON report")

        def med(key: str, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[key] for r in rows)

        rates = [r["pages_per_s"] for r in mine]
        out[name] = {
            "runs": len(mine), "pages_per_s_median": statistics.median(rates),
            "pages_per_s_min": min(rates), "pages_per_s_max": max(rates),
            **{f"{key}_median": med(key) for key in (
                "span_s", "active_s", "pages_per_s_active", "cpu_ms_per_page",
                "process_cpu_ms_per_page", "redis_round_trips_per_page",
                "redis_commands_per_page", "redis_wait_ms_per_page",
                "redis_wait_reactor_ms_per_page", "redis_loop_calls_per_page", "pages_fetched",
                "idle_waits", "reactor_turns_per_page",
                *(f"reactor_{key}_ms_per_page" for key in REACTOR_KEYS))},
            "close_lag_max_s": max(max(r["close_lag_s"]) for r in mine),
            "close_lag_median_s": statistics.median(x for r in mine for x in r["close_lag_s"]),
            "startup_median_s": statistics.median(x for r in mine for x in r["startup_s"]),
            "duplicate_fetches_max": max(r["duplicate_fetches"] for r in mine),
            "runs_not_finished": sum(1 for r in runs if r["config"] == name
                                     and not r["finished"]),
        }  # fmt: skip
    one, local = out["1 worker"], out["local"]
    many = out[configs[-1]] if configs[-1].endswith(" workers") else None
    out["targets"] = {
        "one_worker_over_local": one["pages_per_s_median"] / local["pages_per_s_median"],
        "variants_over_local": {c: out[c]["pages_per_s_median"] / local["pages_per_s_median"]
                                for c in configs if c.startswith("1 worker ")},
        "n_workers_over_one": (many["pages_per_s_median"] / one["pages_per_s_median"]
                               if many else None),
        "close_lag_max_s": max(out[c]["close_lag_max_s"] for c in configs[1:]),
    }  # fmt: skip
    return out


#: :class:`ReactorTime`'s parts, reported in ms per page
REACTOR_KEYS = ("span_s", "cpu_s", "system_s", "runq_s", "idle_s", "rest_s")


def _ms(summary: dict[str, Any], part: str) -> str:
    return f"{summary.get(f'reactor_{part}_s_ms_per_page_median', 0.0):.3f}"


def scaleout_table(title: str, summary: dict[str, Any], configs: list[str]) -> str:
    def rng(s: dict[str, Any]) -> str:
        return f"{s['pages_per_s_min']:.0f}-{s['pages_per_s_max']:.0f}"

    rows = [
        ("pages/s (median)", lambda s: f"{s['pages_per_s_median']:.1f}"),
        ("pages/s (range)", rng),
        ("open->close span s", lambda s: f"{s['span_s_median']:.2f}"),
        ("active span s", lambda s: f"{s['active_s_median']:.2f}"),
        ("pages/s active span", lambda s: f"{s['pages_per_s_active_median']:.1f}"),
        ("CPU ms/page (crawl)", lambda s: f"{s['cpu_ms_per_page_median']:.2f}"),
        ("CPU ms/page (process)", lambda s: f"{s['process_cpu_ms_per_page_median']:.2f}"),
        ("Redis trips/page (redis-py)", lambda s: f"{s['redis_round_trips_per_page_median']:.2f}"),
        ("Redis wait ms/page", lambda s: f"{s['redis_wait_ms_per_page_median']:.2f}"),
        ("  of it, reactor blocked",
         lambda s: f"{s['redis_wait_reactor_ms_per_page_median']:.2f}"),
        ("Redis calls/page on the loop",
         lambda s: f"{s.get('redis_loop_calls_per_page_median', 0.0):.2f}"),
        ("Redis cmds/page (all)", lambda s: f"{s['redis_commands_per_page_median']:.1f}"),
        ("reactor thread ms/page: span", lambda s: _ms(s, "span")),
        ("  on a CPU", lambda s: _ms(s, "cpu")),
        ("    of it in the kernel", lambda s: _ms(s, "system")),
        ("  waiting for a CPU", lambda s: _ms(s, "runq")),
        ("  idle in select", lambda s: _ms(s, "idle")),
        ("  rest: GIL, blocking calls", lambda s: _ms(s, "rest")),
        ("loop turns/page", lambda s: f"{s.get('reactor_turns_per_page_median', 0.0):.1f}"),
        ("close lag s (max)", lambda s: f"{s['close_lag_max_s']:.2f}"),
        ("startup s (median)", lambda s: f"{s['startup_median_s']:.2f}"),
        ("idle waits", lambda s: f"{s['idle_waits_median']:.0f}"),
        ("pages fetched", lambda s: f"{s['pages_fetched_median']:.0f}"),
        ("duplicate fetches", lambda s: f"{s['duplicate_fetches_max']}"),
        ("runs (not finished)", lambda s: f"{s['runs']} ({s['runs_not_finished']})"),
    ]
    w = [max(12, len(c) + 2) for c in configs]  # a --variant's name may be long
    lw = max(len(label) for label, _ in rows) + 1
    lines = [title, f"{'':<{lw}}" + "".join(f"{c:>{n}}" for c, n in zip(configs, w, strict=True))]
    lines += [f"{label:<{lw}}" + "".join(f"{fn(summary[c]):>{n}}"
                                       for c, n in zip(configs, w, strict=True))
              for label, fn in rows]  # fmt: skip
    t = summary["targets"]
    lines.append(f"1 worker / local {t['one_worker_over_local']:.2f} (issue 28: >= 0.95)"
                 + (f"; {configs[-1]} / 1 worker {t['n_workers_over_one']:.2f} (two: >= 1.8)"
                    if t["n_workers_over_one"] is not None else "")
                 + f"; worst close lag {t['close_lag_max_s']:.2f} s (target < 2)")  # fmt: skip
    lines += [f"{name} / local {ratio:.2f}" for name, ratio in t["variants_over_local"].items()]
    return "\n".join(lines)


def cpu_table(runs: list[dict[str, Any]], configs: list[str]) -> str:
    """Where the CPU went: seconds from the first spawn to the last exit, median over the
    finished runs. Redis, PostgreSQL and the machine serve every job on the host: "other" is
    the machine's busy time less ours (other jobs, this runner, the kernel); "steal" is time
    the hypervisor gave the machine's CPUs to someone else (a virtual machine)."""
    keys = ("workers", "site_servers", "redis", "postgres", "other", "machine_busy",
            "machine_steal", "machine_capacity")  # fmt: skip
    w = [max(12, len(c) + 2) for c in configs]
    head = "".join(f"{c:>{n}}" for c, n in zip(configs, w, strict=True))
    lines = ["CPU seconds per crawl (median), first spawn to last exit:", f"{'':<23}{head}"]
    for key in keys:
        cells = [statistics.median(_cpu(r, key) for r in runs
                                   if r["config"] == c and r["finished"])
                 for c in configs]  # fmt: skip
        lines.append(f"{key:<23}" + "".join(f"{v:>{n}.2f}" for v, n in zip(cells, w, strict=True)))
    return "\n".join(lines)


def _cpu(record: dict[str, Any], key: str) -> float:
    cpu = record["cpu_s"]
    if key == "other":
        ours = ("workers", "site_servers", "redis", "postgres")
        return float(cpu["machine_busy"] - sum(cpu[k] for k in ours))
    return float(cpu[key])


def scaleout_line(i: int, r: dict[str, Any]) -> str:
    line = (f"  run {i + 1} {r['config']:<10} {r['pages_per_s']:7.1f} pages/s  "
            f"span {r['span_s']:.2f} s  active {r['active_s']:.2f} s  "
            f"{r['cpu_ms_per_page']:.2f} CPU ms/page  "
            f"{r['redis_round_trips_per_page']:.2f} Redis trips/page  "
            f"close lag {max(r['close_lag_s']):.2f} s  responses {r['responses']}")  # fmt: skip
    return line if r["finished"] else f"{line}  NOT FINISHED: {r['finish_reasons']}"


def scaleout_main(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from bench.cluster import REDIS_URL
    from bench.delayproxy import delayed, round_trip_ms
    from crawler.sitegen.server import serve_web

    sites = multi_host_sites(args.pages, args.links, args.hosts)
    configs = scaleout_configs(args)
    title = (
        f"scale-out bench: link-heavy {args.pages} pages x {args.links} over {args.hosts} "
        f"hosts, {args.runs} run(s) each, concurrency {args.concurrency}, no CPU pinning"
    )
    runs: list[dict[str, Any]] = []
    profiles = None
    with ExitStack() as stack:
        if args.redis_delay:  # the workers' Redis one round trip further away
            url = stack.enter_context(delayed(REDIS_URL, args.redis_delay / 1000))
            args.set = [*args.set, f"REDIS_URL={url}"]
            args.redis_ping_ms = {"direct": round(round_trip_ms(REDIS_URL), 3),
                                  "workers": round(round_trip_ms(url), 3)}  # fmt: skip
            title += (f", workers' Redis behind a {args.redis_delay:g} ms delay (PING "
                      f"{args.redis_ping_ms['workers']:.2f} ms, direct "
                      f"{args.redis_ping_ms['direct']:.2f})")  # fmt: skip
        print(title, flush=True)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scaleout-"))
        servers = stack.enter_context(serve_web(sites))
        for i in range(args.runs):
            for name in configs if i % 2 == 0 else configs[::-1]:
                record = scaleout_once(name, servers, args, Path(tmp))
                record["run"] = i
                runs.append(record)
                print(scaleout_line(i, record), flush=True)
        if args.profile:
            profiles = scaleout_profiles(servers, args, Path(tmp))
    summary = summarize_scaleout(runs, configs)
    print()
    print(scaleout_table(title, summary, configs))
    print()
    print(cpu_table(runs, configs))
    if profiles:
        print("\nprofile shares by component (details: bench/results/crawl_profile_*.txt)")
        for name in COMPONENTS:
            cells = [profiles[k]["components"].get(name) for k in profiles]
            if any(cells):
                print(f"  {name:<26}" + "".join(f"{fmt_share(c):>10}" for c in cells))
    write_report("crawl_workers.json", title, args, runs, summary, profiles)
    return 0


def scaleout_profiles(servers: list[SiteServer], args: argparse.Namespace,
                      tmp: Path) -> dict[str, Any]:  # fmt: skip
    """One cProfile run of the local profile and of one distributed worker (Scrapy's
    ``--profile``); shares written to ``crawl_profile_{local,worker}.txt``."""
    result = {}
    for name, kind in (("local", "local"), ("worker", "1 worker")):
        prof = RESULTS / f"crawl_{name}.prof"
        RESULTS.mkdir(parents=True, exist_ok=True)
        scaleout_once(kind, servers, args, tmp, profile=prof)
        shares = profile_shares(prof)
        (RESULTS / f"crawl_profile_{name}.txt").write_text(profile_text(name, shares))
        result[name] = shares
    return result


def together_round(i: int, kinds: tuple[str, ...], servers: list[SiteServer],
                   args: argparse.Namespace) -> list[dict[str, Any]]:  # fmt: skip
    """Round ``i`` of ``--together``: every crawler at once, crawler ``j`` on CPU ``(i + j) mod
    n`` with server ``j``; their records in ``kinds`` order."""
    cpus = together_cpus()
    records: list[dict[str, Any] | None] = [None] * len(kinds)
    failures: list[BaseException] = []

    def crawl(j: int, kind: str) -> None:
        try:
            records[j] = crawl_once(kind, servers[j], cpus[(i + j) % len(cpus)], args)
        except BaseException as exc:  # SystemExit of a failed crawl: raised after the round
            failures.append(exc)

    threads = [threading.Thread(target=crawl, args=(j, kind)) for j, kind in enumerate(kinds)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [r for r in records if r is not None]


def runs_together(args: argparse.Namespace, site: Site, label: str
                  ) -> tuple[str, list[dict[str, Any]]]:  # fmt: skip
    """The title and the runs of ``--together`` (:func:`together_round`), each run printed as
    it ends."""
    kinds = kinds_of(args)
    title = (f"crawl bench: {label}, {args.runs} run(s) each, concurrency {args.concurrency}, "
             f"together: {' + '.join(kinds)} at once, one CPU each")  # fmt: skip
    print(title, flush=True)
    runs: list[dict[str, Any]] = []
    servers = [SiteServer(site) for _ in kinds]
    for server in servers:
        server.start()
    try:
        for i in range(args.runs):
            for record in together_round(i, kinds, servers, args):
                record["run"] = i
                runs.append(record)
                print(progress_line(i, record), flush=True)
    finally:
        for server in servers:
            server.stop()
    return title, runs


def runs_alternating(args: argparse.Namespace, site: Site, label: str
                     ) -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:  # fmt: skip
    """The title, the runs (the crawlers one after another, the order reversed every other
    round) and the ``--profile`` shares; each run printed as it ends."""
    cpu = pin_cpus(args.no_pin)
    title = (f"crawl bench: {label}, {args.runs} run(s) each, concurrency {args.concurrency}, "
             f"crawler on {'CPU ' + str(cpu) if cpu is not None else 'any CPU'}")  # fmt: skip
    print(title, flush=True)
    runs: list[dict[str, Any]] = []
    with SiteServer(site) as server:
        kinds = kinds_of(args)
        for i in range(args.runs):
            for kind in kinds if i % 2 else kinds[::-1]:
                record = crawl_once(kind, server, cpu, args)
                record["run"] = i
                runs.append(record)
                print(progress_line(i, record), flush=True)
        profiles = run_profiles(server, cpu, args) if args.profile else None
    return title, runs, profiles


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workers:
        return scaleout_main(args)
    site, label = build_site(args)
    if args.together:
        title, runs = runs_together(args, site, label)
        profiles = None
    else:
        title, runs, profiles = runs_alternating(args, site, label)
    summary = summarize(runs)
    print()
    print(table(title, summary))
    if profiles:
        print("\nprofile shares by component (details: bench/results/crawl_profile_*.txt)")
        shown = [k for k in profiles if k != "floor"]
        names = [n for n in COMPONENTS if any(n in profiles[k]["components"] for k in shown)]
        print(f"  {'':<26}" + "".join(f"{k:>12}" for k in shown))
        for name in names:
            print(f"  {name:<26}" + "".join(f"{fmt_share(profiles[k]['components'].get(name)):>12}"
                                             for k in shown))  # fmt: skip
    write_report("crawl.json", title, args, runs, summary, profiles)
    return 0


if __name__ == "__main__":
    sys.exit(main())

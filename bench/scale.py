"""Scale benchmark: the link-heavy site at 10^4, 10^5, 10^6 pages, ours and stock Scrapy.

``.venv/bin/python -m bench.scale [--sizes 1e4,1e5,1e6] [--stock-up-to 1e5] [--hosts 8]
[--links 100] [--concurrency 16] [--kill-at 0.5] [--no-resume] [--no-clean] [--no-pin]
[--results DIR] [--quick]``
from the project root; run it through ``flock /tmp/heavy.lock`` (a 10^5 crawl takes minutes).

At each size the link-heavy site (:func:`bench.crawl.multi_host_sites`: ``--hosts`` hosts on
127.0.0.2, 127.0.0.3, ..., ``size`` pages in all) is served from this process by
:class:`CountingServer` (a :class:`~crawler.sitegen.server.SiteServer` that keeps one byte of
hit count per page instead of a log of every request) and crawled by:

* **ours, clean**: one process, ``scrapy crawl web`` with the full project settings, SQLite
  storage and a ``JOBDIR`` (:func:`bench.crawl.command`: the settings every crawl bench sets);
* **ours, killed and resumed**: the same crawl on a fresh database and ``JOBDIR``, SIGKILLed
  once the server has answered ``--kill-at`` of the pages, then started again on the same
  database and ``JOBDIR`` and run to the end (``--no-resume`` leaves this out);
* **stock**: ``scrapy runspider bench/stock_spider.py`` with every host as a start URL (no
  ``JOBDIR``: stock Scrapy's defaults), for sizes up to ``--stock-up-to`` (0: never).

Per crawl: pages/s (responses / seconds from spider open to the last response, from
:mod:`bench.probe`), CPU ms per page (same window), peak RSS (``wait4``), RSS at open, database
bytes per site page (``crawl.db`` with its WAL) and ``JOBDIR`` bytes per site page (every file
under it; by file in the JSON) at the end, pages missing (never fetched) and pages fetched more
than once (the server's counts), documents stored, and the site server's CPU (this process, spawn
to exit) per page and as a share of one core (above ~0.8 it may be the bottleneck). The
kill-and-resume pair adds the time to resume (spawn of the second run to its first page that is
not a robots.txt; and to ``spider_opened``), how many requests the journal owed, ``JOBDIR`` bytes
at the kill, and the check that nothing was lost: every page fetched in one run or the other,
every page stored once, and pages fetched twice no more than those fetched before the kill and not
yet stored (what the resume promises to fetch again: their storage batch had not committed).

``--mem-probe`` adds :class:`bench.memprobe.MemProbe` to our clean crawls: a memory sample every
5 s (RSS, glibc's and Python's allocators, the big structures) kept as
``RESULTS/scale_mem_PAGES_clean.jsonl``, summarized in the JSON (``memory``: MiB at open, at the
discovery burst and at the end of the crawl, bytes per page grown, the close spike) and printed
under the table; ``--tracemalloc N`` adds the top source lines of the Python heap's growth.

Writes ``bench/results/scale.json`` (every crawl's figures, the summary, and a linear
extrapolation to 10^6 from the two largest sizes measured) and ``bench/results/scale.svg``
(pages/s, CPU ms per page and peak RSS against size, log x). CPU pinning as in
:mod:`bench.crawl` (server on CPU 0, crawler on CPU 1) unless ``--no-pin``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.crawl import RESULTS, ROOT, command, multi_host_sites, pin_cpus, spawn_child
from crawler.sitegen import Site, server_key
from crawler.sitegen.server import Exchange, SiteServer

logger = logging.getLogger(__name__)

MEM_PROBE = "bench.memprobe.MemProbe"
MEM_FILE = "memprobe.jsonl"
TARGETS = {"pages_per_s_ratio": 0.9, "peak_rss_mib": 1024.0, "resume_s": 10.0,
           "cpu_ms_per_page": 2.0}  # fmt: skip


class CountingServer(SiteServer):
    """A :class:`SiteServer` that counts fetches per site page in a byte array (saturating at
    255) and keeps no request or exchange log: at 10^6 pages those lists would hold hundreds
    of MiB in the benchmark process. For the link-heavy site only (``/`` and ``/p/N``)."""

    def __init__(self, site: Site, host: str, hostname: str) -> None:
        super().__init__(site, host=host, hostname=hostname)
        self.pages = len(site.pages) - 1  # /p/0 ... /p/{pages-1}, and /
        self.counts = bytearray(self.pages + 1)
        self.total = 0

    def record(self, target: str, agent: str = "") -> None:
        index = self.page_index(target)
        with self._lock:
            self.total += 1
            if index is not None and self.counts[index] < 255:
                self.counts[index] += 1

    def answered(self, exchange: Exchange) -> None:
        """Not kept (class docstring)."""

    def page_index(self, target: str) -> int | None:
        key = server_key(target)
        if key == "/":
            return 0
        number = key[3:] if key.startswith("/p/") else ""
        if not number.isdigit() or (len(number) > 1 and number[0] == "0"):
            return None
        i = int(number)
        return i + 1 if i < self.pages else None

    def reset_hits(self) -> None:
        with self._lock:
            self.counts = bytearray(self.pages + 1)
            self.total = 0


@contextmanager
def serve_counting(sites: Sequence[Site]) -> Iterator[list[CountingServer]]:
    """:func:`crawler.sitegen.server.serve_web` with :class:`CountingServer`s."""
    with ExitStack() as stack:
        servers: list[CountingServer] = []
        for i, site in enumerate(sites):
            address = f"127.0.0.{i + 2}"
            server = CountingServer(site, address, address)
            stack.enter_context(server)
            servers.append(server)
        yield servers


def parse_size(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of pages (e.g. 1e4)") from None
    if value != int(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of pages")
    return int(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--sizes", default="1e4,1e5,1e6",
                        help="site sizes in pages, comma-separated (1e4,1e5,1e6)")  # fmt: skip
    parser.add_argument("--stock-up-to", type=parse_size, default=100_000,
                        help="crawl with stock Scrapy up to this size (1e5; 0: never)")  # fmt: skip
    parser.add_argument("--hosts", type=int, default=8, help="hosts the site is spread over (8)")
    parser.add_argument("--links", type=int, default=100, help="links per page (100)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (16)")
    parser.add_argument("--kill-at", type=float, default=0.5,
                        help="SIGKILL once this share of the pages is fetched (0.5)")  # fmt: skip
    parser.add_argument("--no-resume", action="store_true", help="no kill-and-resume pair")
    parser.add_argument("--no-clean", action="store_true",
                        help="no clean crawl of ours (the kill-and-resume pair alone)")  # fmt: skip
    parser.add_argument("--no-pin", action="store_true", help="do not pin server/crawler CPUs")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds per crawl (7200)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where scale.json and scale.svg go (bench/results)")  # fmt: skip
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for our crawls only (repeatable)")  # fmt: skip
    parser.add_argument("--resume-probe", metavar="SIZES",
                        help="only time resumes owing these many requests, e.g. 1e5,1e6, "
                             "without crawling them first (a JOBDIR as a kill leaves it)")
    parser.add_argument("--mem-probe", action="store_true",
                        help="sample our crawls' memory every 5 s (bench.memprobe) into "
                             "RESULTS/scale_mem_SIZE_KIND.jsonl")  # fmt: skip
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="with --mem-probe: trace Python allocations from spider open "
                             "(0: off; slows the crawl ~2x)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="sizes 1e3,1e4, stock at 1e3 only (a few minutes)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.stock_up_to = "1e3,1e4", min(args.stock_up_to, 1000)
    try:
        args.sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--sizes: {exc}")
    if not args.sizes or args.sizes[0] < 1:
        parser.error("--sizes: give at least one size >= 1, e.g. --sizes 1e4,1e5")
    for name in ("hosts", "links", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.resume_probe:
        try:
            args.resume_probe = sorted({parse_size(x) for x in args.resume_probe.split(",")})
        except argparse.ArgumentTypeError as exc:
            parser.error(f"--resume-probe: {exc}")
    if args.no_clean and args.no_resume:
        parser.error("--no-clean with --no-resume leaves no crawl of ours: drop one of them")
    if not 0 < args.kill_at < 1:
        parser.error(f"--kill-at must be between 0 and 1, got {args.kill_at}")
    for item in args.set:
        if "=" not in item:
            parser.error(f"-s {item!r}: expected NAME=VALUE")
    return args


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 when it is missing)."""
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_parts(path: Path) -> dict[str, int]:
    """Bytes under ``path`` by file (``dedup/journal.bin``) or top folder past the state
    (``requests.queue``, Scrapy's disk queue)."""
    parts: dict[str, int] = {}
    if path.is_dir():
        for p in path.rglob("*"):
            if p.is_file():
                rel = p.relative_to(path).parts
                name = "/".join(rel[:2]) if rel[0] == "dedup" else rel[0]
                parts[name] = parts.get(name, 0) + p.stat().st_size
    return dict(sorted(parts.items()))


def db_bytes(db: Path) -> int:
    """The SQLite database with its WAL and shared-memory files."""
    return sum(tree_bytes(Path(f"{db}{tail}")) for tail in ("", "-wal", "-shm"))


def stored_rows(db: Path) -> dict[str, Any]:
    """Documents stored (all, distinct canonical URLs, per crawl id) and dropped pages."""
    if not db.exists():
        return {"documents": 0, "distinct": 0, "by_crawl": {}, "dropped": 0}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        docs = con.execute("SELECT count(*), count(DISTINCT canonical_url) FROM documents")
        count, distinct = docs.fetchone()
        by_crawl = dict(con.execute("SELECT crawl_id, count(*) FROM documents GROUP BY crawl_id"))
        dropped = con.execute("SELECT count(*) FROM dropped").fetchone()[0]
    con.close()
    return {"documents": count, "distinct": distinct,
            "by_crawl": {str(k): v for k, v in by_crawl.items()}, "dropped": dropped}  # fmt: skip


class Child:
    """One crawl child: spawned, watched, killed or reaped, with its rusage from ``wait4``."""

    def __init__(self, cmd: list[str], cwd: Path, work: Path, cpu: int | None) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.server_cpu0 = _cpu_self()
        self.spawned = time.time()
        with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
            self.proc = spawn_child(cmd, cwd, cpu, out, err)
        self.exit: int | None = None
        self.usage: Any = None
        self.exited = 0.0
        self.server_cpu = 0.0

    def poll(self) -> bool:
        pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        if pid:
            self._done(status, usage)
        return bool(pid)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        _, status, usage = os.wait4(self.proc.pid, 0)
        self._done(status, usage)

    def _done(self, status: int, usage: Any) -> None:
        self.exited = time.time()
        self.exit = self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.usage = usage
        self.server_cpu = _cpu_self() - self.server_cpu0

    def wait(self, timeout: float, until: Any = None, poll: float = 0.05) -> bool:
        """Wait for the exit, or until ``until()`` (then True, still running), or kill it at
        ``timeout`` seconds after the spawn (then exit is -9)."""
        deadline = self.spawned + timeout
        while not self.poll():
            if until is not None and until():
                return True
            if time.time() > deadline:
                self.kill()
                break
            time.sleep(poll)
        return False

    @property
    def stats(self) -> dict[str, Any]:
        path = self.work / "stats.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def peak_rss_mib(self) -> float:
        return round(self.usage.ru_maxrss / 1024, 1) if self.usage is not None else 0.0

    @property
    def cpu_s(self) -> float:
        return self.usage.ru_utime + self.usage.ru_stime if self.usage is not None else 0.0

    def failure(self, what: str) -> str:
        tail = (self.work / "stderr.txt").read_text(errors="replace")[-2000:]
        log = self.work / "crawl.log"
        log_tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        return f"{what} failed (exit {self.exit}):\n{tail}\n{log_tail}"


def counts(servers: Sequence[CountingServer]) -> list[int]:
    return [n for s in servers for n in s.counts]


def ours_command(seeds: str, run: Path, state: Path, args: argparse.Namespace) -> list[str]:
    """``scrapy crawl web`` as :func:`bench.crawl.command` makes it, its log and stats in
    ``run``, the database, drop log and ``JOBDIR`` in ``state`` (shared by a resumed run)."""
    extra = [f"STORAGE_URL=sqlite:///{state / 'crawl.db'}",
             f"DROPPED_LOG={state / 'dropped.jsonl'}", f"JOBDIR={state / 'job'}"]  # fmt: skip
    if getattr(args, "mem_probe", False):
        extra += [f"MEMPROBE_FILE={run / MEM_FILE}", f"MEMPROBE_TRACEMALLOC={args.tracemalloc}"]
        ns = argparse.Namespace(concurrency=args.concurrency, set=[*extra, *args.set])
        return command("ours", seeds, run, ns, None, probe=MEM_PROBE)
    ns = argparse.Namespace(concurrency=args.concurrency, set=[*extra, *args.set])
    return command("ours", seeds, run, ns, None)


def keep_mem_timeline(run: Path, args: argparse.Namespace, size: int,
                      kind: str) -> dict[str, Any] | None:  # fmt: skip
    """Copy a crawl's memory timeline (``--mem-probe``) out of the temporary directory and
    summarize it (:func:`bench.memprobe.summarize`); None without one."""
    source = run / MEM_FILE
    if not source.exists():
        return None
    from bench.memprobe import read_timeline, summarize

    args.results.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, args.results / f"scale_mem_{size}_{kind}.jsonl")
    return summarize(read_timeline(source))


def crawl_figures(kind: str, child: Child, servers: Sequence[CountingServer],
                  state: Path | None) -> dict[str, Any]:  # fmt: skip
    """The figures of one crawl that ran to its end (module docstring)."""
    stats = child.stats
    if child.exit != 0 or not stats:
        raise SystemExit(child.failure(f"{kind} crawl"))
    per_page = counts(servers)
    responses = int(stats.get("response_received_count", 0))
    wall = float(stats.get("bench/wall_seconds") or 0)
    cpu = float(stats.get("bench/cpu_seconds") or child.cpu_s)
    elapsed = child.exited - child.spawned
    record: dict[str, Any] = {
        "kind": kind, "site_pages": len(per_page), "responses": responses,
        "pages_fetched": sum(per_page),
        "missing": sum(1 for n in per_page if n == 0),
        "fetched_twice": sum(1 for n in per_page if n > 1),
        "duplicate_fetches": sum(n - 1 for n in per_page if n > 1),
        "wall_s": wall, "elapsed_s": round(elapsed, 2),
        "pages_per_s": responses / wall if wall else 0.0,
        "cpu_ms_per_page": 1000 * cpu / responses if responses else 0.0,
        "process_cpu_ms_per_page": 1000 * child.cpu_s / responses if responses else 0.0,
        "peak_rss_mib": child.peak_rss_mib,
        "rss_open_mib": float(stats.get("bench/rss_open_mib") or 0),
        "rss_close_mib": float(stats.get("bench/rss_close_mib") or 0),
        "startup_s": round(float(stats.get("bench/opened_unix") or 0) - child.spawned, 3),
        "server_cpu_s": round(child.server_cpu, 2),
        "server_cpu_ms_per_page": 1000 * child.server_cpu / responses if responses else 0.0,
        "server_core_share": child.server_cpu / elapsed if elapsed else 0.0,
        "finish_reason": stats.get("finish_reason"),
    }  # fmt: skip
    if state is not None:
        db = db_bytes(state / "crawl.db")
        job = tree_bytes(state / "job")
        pages = record["site_pages"]  # a resumed run's files hold both runs' pages
        record |= {"db_bytes": db, "jobdir_bytes": job, "jobdir_files": tree_parts(state / "job"),
                   "db_bytes_per_page": db / pages if pages else 0.0,
                   "jobdir_bytes_per_page": job / pages if pages else 0.0,
                   "stored": stored_rows(state / "crawl.db"),
                   "bloom_fill": stats.get("dedup/bloom_fill_ratio")}  # fmt: skip
    return record


def crawl_ours(seeds: str, servers: Sequence[CountingServer], tmp: Path, cpu: int | None,
               args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    for server in servers:
        server.reset_hits()
    state = tmp / "clean"
    child = Child(ours_command(seeds, state / "run", state, args), ROOT, state / "run", cpu)
    child.wait(args.timeout)
    record = crawl_figures("ours", child, servers, state)
    memory = keep_mem_timeline(state / "run", args, record["site_pages"], "clean")
    if memory:
        record["memory"] = memory
    shutil.rmtree(state, ignore_errors=True)
    return record


def crawl_stock(seeds: str, servers: Sequence[CountingServer], tmp: Path, cpu: int | None,
                args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    for server in servers:
        server.reset_hits()
    work = tmp / "stock"
    work.mkdir(parents=True, exist_ok=True)
    ns = argparse.Namespace(concurrency=args.concurrency, set=[])
    child = Child(command("stock", seeds, work, ns, None), work, work, cpu)
    child.wait(args.timeout)
    record = crawl_figures("stock", child, servers, None)
    shutil.rmtree(work, ignore_errors=True)
    return record


def crawl_resumed(seeds: str, servers: Sequence[CountingServer], tmp: Path, cpu: int | None,
                  args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """The kill-and-resume pair (module docstring)."""
    for server in servers:
        server.reset_hits()
    state = tmp / "resumed"
    pages = sum(s.pages + 1 for s in servers)
    threshold = args.kill_at * pages
    first = Child(ours_command(seeds, state / "run1", state, args), ROOT, state / "run1", cpu)
    running = first.wait(args.timeout, until=lambda: sum(s.total for s in servers) >= threshold)
    if not running:
        raise SystemExit(first.failure("the crawl to kill (it ended before the kill)"))
    first.kill()
    before = counts(servers)
    killed: dict[str, Any] = {
        "pages_fetched": sum(before), "unique_pages": sum(1 for n in before if n),
        "elapsed_s": round(first.exited - first.spawned, 2), "peak_rss_mib": first.peak_rss_mib,
        "cpu_s": round(first.cpu_s, 2), "jobdir_bytes": tree_bytes(state / "job"),
        "jobdir_files": tree_parts(state / "job"),
        "db_bytes": db_bytes(state / "crawl.db"), "stored": stored_rows(state / "crawl.db"),
    }  # fmt: skip
    second = Child(ours_command(seeds, state / "run2", state, args), ROOT, state / "run2", cpu)
    second.wait(args.timeout)
    record = crawl_figures("ours resumed", second, servers, state)
    stats = second.stats
    first_page = float(stats.get("bench/first_page_unix") or 0)
    stored = record["stored"]
    # fetched before the kill and not stored by it: the resume fetches these again
    unstored = killed["unique_pages"] - killed["stored"]["documents"] - killed["stored"]["dropped"]
    record |= {
        "killed": killed,
        "resume_s": round(first_page - second.spawned, 3) if first_page else None,
        "resume_open_s": record["startup_s"],
        "owed_at_resume": int(stats.get("dedup/jobdir/resumed", 0)),
        "already_stored": int(stats.get("dedup/jobdir/already_stored", 0)),
        "refetch_allowed": max(unstored, 0),
        "stored_once": stored["documents"] == stored["distinct"],
        "all_stored": stored["documents"] + stored["dropped"] >= record["site_pages"],
    }  # fmt: skip
    record["nothing_lost"] = (record["missing"] == 0 and record["stored_once"]
                              and record["all_stored"]
                              and record["fetched_twice"] <= record["refetch_allowed"])  # fmt: skip
    shutil.rmtree(state, ignore_errors=True)
    return record


def write_owed_jobdir(servers: Sequence[CountingServer], job: Path) -> int:
    """A ``JOBDIR`` as a kill leaves it when every page of ``servers`` was seen and none was
    fetched: the journal schedules each page (its real fingerprint and canonical URL), the
    Bloom filter holds them (snapshots every ``JOBDIR_SNAPSHOT_RECORDS`` as in a crawl), each
    host's start page is seen and finished. Returns the requests owed."""
    from crawler.backends.bloom import LocalSeenSet
    from crawler.state.jobstate import JobState
    from crawler.urls.fingerprint import fingerprint_url
    from crawler.urls.urlnorm import normalize_url

    state = JobState(job, LocalSeenSet())
    state.open()
    owed = 0
    for server in servers:
        start = normalize_url(server.url("/"))
        fp = fingerprint_url(start)
        state.seen.add(fp)
        state.scheduled(fp, start, 0, start)
        state.finished([fp])
        for i in range(server.pages):
            url = normalize_url(server.url(f"/p/{i}"))
            fp = fingerprint_url(url)
            state.seen.add(fp)
            state.scheduled(fp, url, 1, url)
            owed += 1
    state.sync()  # then dropped without the closing snapshot, as by a kill
    return owed


def resume_probe(size: int, tmp: Path, cpu: int | None,
                 args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """Time a resume owing ``size`` requests without crawling them first (``--resume-probe``):
    :func:`write_owed_jobdir`, then ``scrapy crawl web`` on it, from spawn to the first page the
    server answers; then SIGKILLed. Peak RSS is the child's up to then (the replay's peak)."""
    state = tmp / "probe"
    sites = multi_host_sites(size, args.links, args.hosts)
    with serve_counting(sites) as servers:
        built = time.perf_counter()
        owed = write_owed_jobdir(servers, state / "job")
        built = time.perf_counter() - built
        seeds = ",".join(s.url("/") for s in servers)
        child = Child(ours_command(seeds, state / "run", state, args), ROOT, state / "run", cpu)
        running = child.wait(min(args.timeout, 600), until=lambda: any(
            n for s in servers for n in s.counts), poll=0.005)  # fmt: skip
        first_page = time.time()
        if not running:
            raise SystemExit(child.failure("the resume probe (it ended before its first page)"))
        child.kill()
    log = (state / "run" / "crawl.log").read_text(errors="replace")
    resumed = re.search(r"JOBDIR .*?: (\d+) URLs seen, (\d+) to resume", log)
    record = {
        "kind": "resume probe", "size": size, "owed": owed,
        "owed_logged": int(resumed.group(2)) if resumed else None,
        "resume_s": round(first_page - child.spawned, 3),
        "peak_rss_mib": child.peak_rss_mib, "jobdir_bytes": tree_bytes(state / "job"),
        "jobdir_files": tree_parts(state / "job"), "build_s": round(built, 1),
        "spawned": time.strftime("%H:%M:%S", time.localtime(child.spawned)),
        "log": [line[:200] for line in log.splitlines()
                if "JOBDIR" in line or "Spider opened" in line or "Storing pages" in line],
    }  # fmt: skip
    shutil.rmtree(state, ignore_errors=True)
    return record


def extrapolate(sizes: dict[int, dict[str, Any]], to: int = 1_000_000) -> dict[str, Any] | None:
    """Linear growth per page between the two largest sizes measured, carried to ``to``."""
    measured = sorted(sizes)
    if len(measured) < 2 or measured[-1] >= to:
        return None
    a, b = measured[-2], measured[-1]
    out: dict[str, Any] = {"from": [a, b], "to": to}
    for key in ("peak_rss_mib", "db_bytes", "jobdir_bytes", "resume_s", "jobdir_bytes_at_kill"):
        va, vb = sizes[a].get(key), sizes[b].get(key)
        if va is None or vb is None:
            continue
        slope = (vb - va) / (b - a)
        out[key] = vb + slope * (to - b)
        out[f"{key}_per_page_growth"] = slope
    return out


def size_summary(runs: list[dict[str, Any]], size: int) -> dict[str, Any]:
    mine = [r for r in runs if r["size"] == size]
    resumed = next((r for r in mine if r["kind"] == "ours resumed"), None)
    ours = next((r for r in mine if r["kind"] == "ours"), resumed)
    if ours is None:
        raise SystemExit("bench.scale: --no-clean and --no-resume leave no crawl of ours")
    stock = next((r for r in mine if r["kind"] == "stock"), None)
    out = {key: ours[key] for key in ("pages_per_s", "cpu_ms_per_page", "peak_rss_mib",
                                      "rss_open_mib", "db_bytes", "jobdir_bytes",
                                      "db_bytes_per_page", "jobdir_bytes_per_page",
                                      "server_core_share", "server_cpu_ms_per_page",
                                      "missing", "duplicate_fetches")}  # fmt: skip
    if resumed is not None:
        out |= {"resume_s": resumed["resume_s"], "owed_at_resume": resumed["owed_at_resume"],
                "resumed_peak_rss_mib": resumed["peak_rss_mib"],
                "jobdir_bytes_at_kill": resumed["killed"]["jobdir_bytes"],
                "nothing_lost": resumed["nothing_lost"]}  # fmt: skip
    if stock is not None:
        out["stock"] = {key: stock[key] for key in ("pages_per_s", "cpu_ms_per_page",
                                                    "peak_rss_mib", "duplicate_fetches")}
    return out


def targets(sizes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    smallest, largest = min(sizes), max(sizes)
    low, high = sizes[smallest], sizes[largest]
    return {
        "sizes": [smallest, largest],
        "pages_per_s_ratio": high["pages_per_s"] / low["pages_per_s"],
        "peak_rss_mib": max(high["peak_rss_mib"], high.get("resumed_peak_rss_mib", 0.0)),
        "resume_s": high.get("resume_s"),
        "cpu_ms_per_page": high["cpu_ms_per_page"],
        "wanted": TARGETS,
    }


def table(title: str, runs: list[dict[str, Any]], sizes: list[int]) -> str:
    columns: list[tuple[str, dict[str, Any]]] = []
    for size in sizes:
        for kind, label in (("ours", "ours"), ("ours resumed", "resumed"), ("stock", "stock")):
            rec = next((r for r in runs if r["size"] == size and r["kind"] == kind), None)
            if rec is not None:
                columns.append((f"{label} {size:.0e}".replace("+0", ""), rec))

    def get(key: str, spec: str) -> Any:
        def cell(r: dict[str, Any]) -> str:
            value: Any = r
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return "-" if value is None else format(value, spec)
        return cell

    rows = [
        ("pages/s", get("pages_per_s", ".1f")),
        ("CPU ms/page", get("cpu_ms_per_page", ".2f")),
        ("peak RSS MiB", get("peak_rss_mib", ".0f")),
        ("  RSS at open MiB", get("rss_open_mib", ".0f")),
        ("DB bytes/page", get("db_bytes_per_page", ".0f")),
        ("JOBDIR bytes/page", get("jobdir_bytes_per_page", ".0f")),
        ("JOBDIR MiB at kill", lambda r: (f"{r['killed']['jobdir_bytes'] / 2**20:.1f}"
                                          if "killed" in r else "-")),
        ("spawn->open s", get("startup_s", ".2f")),
        ("resume s (1st page)", get("resume_s", ".2f")),
        ("owed at resume", get("owed_at_resume", "d")),
        ("pages fetched", get("pages_fetched", "d")),
        ("missing", get("missing", "d")),
        ("fetched twice", get("fetched_twice", "d")),
        ("  allowed (unstored)", get("refetch_allowed", "d")),
        ("nothing lost", lambda r: str(r["nothing_lost"]) if "nothing_lost" in r else "-"),
        ("server CPU ms/page", get("server_cpu_ms_per_page", ".2f")),
        ("server core share", get("server_core_share", ".2f")),
    ]  # fmt: skip
    width = max(13, *(len(name) + 2 for name, _ in columns))
    lines = [title, f"{'':<22}" + "".join(f"{name:>{width}}" for name, _ in columns)]
    lines += [f"{label:<22}" + "".join(f"{fn(r):>{width}}" for _, r in columns)
              for label, fn in rows]  # fmt: skip
    return "\n".join(lines)


def svg_plot(sizes: dict[int, dict[str, Any]]) -> str:
    """Three panels (pages/s, CPU ms per page, peak RSS MiB) against size, log x; ours and
    stock where measured. Plain SVG (no plotting library in the environment)."""
    panels = (("pages/s", "pages_per_s"), ("CPU ms per page", "cpu_ms_per_page"),
              ("peak RSS MiB", "peak_rss_mib"))  # fmt: skip
    series = (("ours", "#1f77b4", lambda s: s), ("stock", "#ff7f0e", lambda s: s.get("stock")))
    w, h, left, top, pw, ph = 330, 260, 55, 35, 250, 170
    xs = sorted(sizes)
    import math

    lo, hi = math.log10(xs[0]), math.log10(xs[-1])
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * 3}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{w * 3}" height="{h}" fill="white"/>']  # fmt: skip
    for i, (title, key) in enumerate(panels):
        x0 = i * w + left
        values = [v[key] for s in xs for _, _, pick in series
                  if (v := pick(sizes[s])) is not None]  # fmt: skip
        ymax = max(values) * 1.15 if values and max(values) > 0 else 1.0

        def px(size: float, x0: int = x0) -> float:
            return x0 + (math.log10(size) - lo) / (hi - lo) * pw

        def py(value: float, ymax: float = ymax) -> float:
            return top + ph - value / ymax * ph

        out.append(f'<text x="{x0 + pw / 2}" y="18" text-anchor="middle" '
                   f'font-weight="bold">{title}</text>')  # fmt: skip
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" '
                   f'stroke="#888"/>')  # fmt: skip
        for k in range(5):
            v = ymax * k / 4
            out.append(f'<text x="{x0 - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
        for e in range(math.ceil(lo), math.floor(hi) + 1):
            out.append(f'<line x1="{px(10**e):.1f}" y1="{top}" x2="{px(10**e):.1f}" '
                       f'y2="{top + ph}" stroke="#ddd"/>')  # fmt: skip
            out.append(f'<text x="{px(10**e):.1f}" y="{top + ph + 15}" '
                       f'text-anchor="middle">10^{e}</text>')  # fmt: skip
        out.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 32}" text-anchor="middle">'
                   f'pages (log)</text>')  # fmt: skip
        for j, (name, colour, pick) in enumerate(series):
            points = [(px(s), py(v[key])) for s in xs if (v := pick(sizes[s])) is not None]
            if not points:
                continue
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       f'stroke-width="2"/>')  # fmt: skip
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
                    for x, y in points]  # fmt: skip
            out.append(f'<text x="{x0 + 8}" y="{top + 14 + 13 * j}" fill="{colour}">'
                       f'{name}</text>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out) + "\n"


def probe_main(args: argparse.Namespace, cpu: int | None) -> int:
    """``--resume-probe``: resume time and peak RSS against requests owed; ``scale_resume.json``."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-probe-") as tmp:
        for size in args.resume_probe:
            record = resume_probe(size, Path(tmp), cpu, args)
            rows.append(record)
            print(f"  owed {record['owed']:>9}: resume {record['resume_s']:6.2f} s (spawn to "
                  f"first page), peak RSS {record['peak_rss_mib']:.0f} MiB, JOBDIR "
                  f"{record['jobdir_bytes'] / 2**20:.1f} MiB (built in {record['build_s']} s)",
                  flush=True)  # fmt: skip
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / "scale_resume.json"
    path.write_text(json.dumps({"args": {**vars(args), "results": str(args.results)},
                                "runs": rows}, indent=2))  # fmt: skip
    print(f"written: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cpu = pin_cpus(args.no_pin)
    if args.resume_probe:
        return probe_main(args, cpu)
    title = (f"scale bench: link-heavy x {args.links} links over {args.hosts} hosts, "
             f"concurrency {args.concurrency}, crawler on "
             f"{'CPU ' + str(cpu) if cpu is not None else 'any CPU'}")  # fmt: skip
    print(title, flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for size in args.sizes:
            sites = multi_host_sites(size, args.links, args.hosts)
            with serve_counting(sites) as servers:
                seeds = ",".join(s.url("/") for s in servers)
                jobs = [] if args.no_clean else [crawl_ours]
                if not args.no_resume:
                    jobs.append(crawl_resumed)
                if size <= args.stock_up_to:
                    jobs.append(crawl_stock)
                for job in jobs:
                    record = job(seeds, servers, Path(tmp), cpu, args)
                    record["size"] = size
                    runs.append(record)
                    print(progress_line(record), flush=True)
    summary = {size: size_summary(runs, size) for size in args.sizes}
    report: dict[str, Any] = {"title": title, "args": {**vars(args), "results": str(args.results)},
              "runs": runs, "sizes": {str(k): v for k, v in summary.items()},
              "targets": targets(summary), "extrapolated_1e6": extrapolate(summary)}  # fmt: skip
    print()
    print(table(title, runs, args.sizes))
    for run in runs:
        if run.get("memory"):
            from bench.memprobe import summary_table

            print(summary_table(f"{run['kind']} {run['size']:.0e}", run["memory"]))
    print(targets_line(report["targets"], report["extrapolated_1e6"]))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "scale.json").write_text(json.dumps(report, indent=2))
    (args.results / "scale.svg").write_text(svg_plot(summary))
    print(f"\nwritten: {args.results / 'scale.json'}, {args.results / 'scale.svg'}")
    return 0


def targets_line(t: dict[str, Any], extra: dict[str, Any] | None) -> str:
    a, b = t["sizes"]
    line = (f"{b:.0e} vs {a:.0e}: pages/s x{t['pages_per_s_ratio']:.2f} (target >= 0.9 at 1e6); "
            f"peak RSS {t['peak_rss_mib']:.0f} MiB (< 1024); CPU {t['cpu_ms_per_page']:.2f} "
            f"ms/page (<= 2.0)")  # fmt: skip
    if t["resume_s"] is not None:
        line += f"; resume {t['resume_s']:.2f} s (< 10)"
    if extra:
        line += "\nlinear to 1e6 from " + " and ".join(f"{s:.0e}" for s in extra["from"]) + ": "
        line += ", ".join(f"{k} {extra[k]:.4g}" for k in ("peak_rss_mib", "db_bytes",
                                                          "jobdir_bytes", "resume_s")
                          if k in extra)  # fmt: skip
    return line


def progress_line(r: dict[str, Any]) -> str:
    line = (f"  {r['size']:>8} {r['kind']:<13} {r['pages_per_s']:7.1f} pages/s  "
            f"{r['cpu_ms_per_page']:5.2f} CPU ms/page  peak RSS {r['peak_rss_mib']:.0f} MiB  "
            f"{r['responses']} responses, {r['missing']} missing, {r['fetched_twice']} fetched "
            f"twice  server {r['server_core_share']:.2f} core")  # fmt: skip
    if "resume_s" in r:
        line += (f"  resume {r['resume_s']} s, owed {r['owed_at_resume']}, "
                 f"nothing lost: {r['nothing_lost']}")  # fmt: skip
    return line


if __name__ == "__main__":
    sys.exit(main())

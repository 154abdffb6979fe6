"""Scale-out guarantees, measured: ``.venv/bin/python -m bench.cluster [--runs N] [--quick]``.

Crawls a web of four hosts on loopback addresses (two demo newspapers, a full mirror of the
first on another host, a template-heavy blog; :func:`four_sites`) with the distributed profile
on the real Redis and PostgreSQL, in the scenarios of the scale-out issue, and one process of the
local profile beside them:

* ``one``: the local profile, one process (SQLite) — the reference for duplicate groups;
* ``three``: three distributed workers;
* ``kill``: three workers, the busiest SIGKILLed at a random moment (20-60% of the crawl) and
  replaced; ``kill2``: two killed in a row, no replacement; ``pending``: a worker whose storage
  never commits (a 60 s batch) killed while holding leases and pending index entries;
* ``polite-stock``, ``polite-one``, ``polite-three``: three small sites, ``DOWNLOAD_DELAY`` 0.1,
  one request at a time per host: the gaps between two requests to one host, stamped by the
  server, for one process with Scrapy's own download handler, one process with ours
  (:mod:`crawler.middlewares.politeness`) and three workers.

For each: pages lost (never fetched, or an HTML page neither stored nor dropped), duplicate
fetches against the requests the killed workers held, drops naming an unstored page (table and
drop logs), duplicate groups kept twice, and the smallest gap. Prints a table and writes
``bench/results/cluster.json``. The same harness runs the end-to-end tests
(``tests/test_distributed.py``), which assert on these figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler.backends.redis import clear_namespace, connect
from crawler.outputs.droplog import read_drop_log, replay_drop_log
from crawler.sitegen import Site, demo_site, template_site
from crawler.sitegen.server import SiteServer, item_pages, serve_web, web_duplicate_groups
from crawler.storage import Store
from crawler.storage.scratch import scratch_schema
from crawler.urls.urlnorm import normalize_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "cluster.json"
PG_URL = os.environ.get("DEDUP_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("DEDUP_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: These runs check that every page of the sites is fetched, stored or dropped, once: every
#: page's links are followed (the trap guard that skips duplicates' links, on by default,
#: would leave the pages only a duplicate links to unfetched: crawler.urls.traps).
FOLLOW_LINKS_OF = "all"
DELAY = 0.03  # DOWNLOAD_DELAY of the kill scenarios: slow enough to kill mid-crawl
LEASE = 3.0  # DISTRIBUTED_LEASE_SECONDS of every scenario
#: How late the site servers may stamp a request: their clock is read by a handler thread of
#: the (busy) measuring process, so a request can be stamped some milliseconds after it arrived.
STAMP_NOISE = 0.010


def four_sites() -> list[Site]:
    """Two demo newspapers, a full mirror of the first (cross-host duplicates: each pair lives
    on two hosts, likely owned by two workers) and a template-heavy blog with mirrors."""
    return [demo_site(0), demo_site(1), demo_site(0), template_site(120, seed=5)]


def polite_sites() -> list[Site]:
    return [template_site(50, seed=i) for i in range(3)]


# --- workers ------------------------------------------------------------------------------------


@dataclass
class Worker:
    proc: subprocess.Popen[str]
    workdir: Path
    exited_at: float | None = None  # Unix time the harness saw it exit (:meth:`Cluster.reap`)
    cpu_s: float | None = None  # user + system CPU of the whole process (:meth:`Cluster.reap`)

    @property
    def stats(self) -> dict[str, Any]:
        path = self.workdir / "stats.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def log(self) -> str:
        path = self.workdir / "crawl.log"
        return path.read_text() if path.exists() else ""

    @property
    def killed(self) -> bool:
        return self.proc.returncode == -signal.SIGKILL


@dataclass
class Cluster:
    """Distributed workers of one namespace, on one Redis database and one PostgreSQL schema."""

    seeds: str
    storage_url: str
    redis_url: str
    namespace: str
    tmp: Path
    delay: float = DELAY
    workers: list[Worker] = field(default_factory=list)
    killed_inflight: int = 0
    root: Path = ROOT  # the checkout the workers run (bench.faults --tree: an older one)
    extra_env: dict[str, str] = field(default_factory=dict)  # more environment of the workers

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SCRAPY_SETTINGS_MODULE": "settings.distributed",
                "DEDUP_NAMESPACE": self.namespace, "DEDUP_REDIS_URL": self.redis_url,
                "DEDUP_STORAGE_URL": self.storage_url, **self.extra_env}  # fmt: skip

    @property
    def base(self) -> str:
        return f"dedup:{self.namespace}"

    def start(self, cli: Sequence[str] = (), **settings: Any) -> Worker:
        """One more worker (``settings`` as ``-s`` overrides, ``cli`` more arguments of
        ``scrapy crawl`` such as ``--profile``); its User-Agent names it."""
        workdir = self.tmp / f"w{len(self.workers)}"
        workdir.mkdir(parents=True)
        overrides = {
            "DROPPED_LOG": workdir / "dropped.jsonl", "STATS_FILE": workdir / "stats.json",
            "LOG_FILE": workdir / "crawl.log", "DOWNLOAD_DELAY": self.delay,
            "DOWNLOAD_DELAY_JITTER": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
            "DEDUP_PROGRESS_INTERVAL": 0, "STORAGE_BATCH_SECONDS": 0.5,
            "DISTRIBUTED_LEASE_SECONDS": LEASE, "USER_AGENT": f"worker-{len(self.workers)}",
            "TRAP_FOLLOW_LINKS_OF": FOLLOW_LINKS_OF, **settings,
        }  # fmt: skip
        args = [sys.executable, "-m", "scrapy", "crawl", "web", "-a", f"urls={self.seeds}", *cli]
        for key, value in overrides.items():
            args += ["-s", f"{key}={value}"]
        proc = subprocess.Popen(args, cwd=self.root, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.workers.append(Worker(proc, workdir))
        return self.workers[-1]

    def member_id(self, worker: Worker, timeout: float = 30) -> str:
        client, deadline = connect(self.redis_url), time.monotonic() + timeout
        while time.monotonic() < deadline:
            for raw in client.zrange(f"{self.base}:workers", 0, -1):
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
                if f":{worker.proc.pid}:" in name:
                    return name
            time.sleep(0.05)
        raise RuntimeError(f"worker {worker.proc.pid} never joined the crawl")

    def held(self, worker: Worker) -> int:
        """Requests the worker holds leased right now."""
        key = f"{self.base}:web:requests:lease:{self.member_id(worker)}"
        return int(connect(self.redis_url).hlen(key))

    def kill(self, worker: Worker) -> None:
        """SIGKILL, then count the requests it held (the most it may cost in refetches)."""
        member = self.member_id(worker)
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(10)
        key = f"{self.base}:web:requests:lease:{member}"
        self.killed_inflight += int(connect(self.redis_url).hlen(key))

    def busiest(self) -> Worker:
        running = [w for w in self.workers if w.proc.poll() is None]
        return max(running, key=self.held)

    def wait(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.wait(max(1.0, deadline - time.monotonic()))

    def reap(self, timeout: float = 600, poll: float = 0.01) -> None:
        """Wait like :meth:`wait`, noting each worker's exit time and CPU (``wait4``); a worker
        still running at ``timeout`` is killed."""
        deadline = time.monotonic() + timeout
        running = [w for w in self.workers if w.proc.returncode is None]
        killed = False
        while running:
            for worker in list(running):
                pid, status, usage = os.wait4(worker.proc.pid, os.WNOHANG)
                if pid:
                    worker.exited_at = time.time()
                    worker.cpu_s = usage.ru_utime + usage.ru_stime
                    worker.proc.returncode = os.waitstatus_to_exitcode(status)
                    running.remove(worker)
            if running and time.monotonic() > deadline:
                if killed:
                    raise RuntimeError(f"{len(running)} worker(s) outlived SIGKILL")
                for worker in running:
                    worker.proc.kill()
                killed, deadline = True, time.monotonic() + 10
            time.sleep(poll)

    def stop(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait(10)


def fresh_schema(pg_url: str = PG_URL, prefix: str = "bench_cluster",
                 password: str | None = None) -> AbstractContextManager[str]:  # fmt: skip
    """A STORAGE_URL whose connections use a new PostgreSQL schema, dropped (CASCADE) after
    (:func:`crawler.storage.scratch.scratch_schema`).

    The database is shared by every test, benchmark and CI run on the machine, so each gets its
    own schema. ``password`` is set in the URL (trust auth ignores it: a test proves it never
    leaks)."""
    return scratch_schema(pg_url, prefix, password)


@contextmanager
def cluster_on(servers: list[SiteServer], tmp: Path, redis_url: str = REDIS_URL,
               pg_url: str = PG_URL) -> Iterator[Cluster]:  # fmt: skip
    """A :class:`Cluster` crawling ``servers``; its workers, keys and schema gone afterwards."""
    namespace = f"test-{uuid.uuid4().hex[:10]}"
    with fresh_schema(pg_url) as storage_url:
        seeds = ",".join(s.url("/") for s in servers)
        cluster = Cluster(seeds, storage_url, redis_url, namespace, tmp)
        try:
            yield cluster
        finally:
            cluster.stop()
            clear_namespace(connect(redis_url), cluster.base)


def wait_for_hits(servers: list[SiteServer], fraction: float, timeout: float = 120) -> None:
    """Until the web has answered ``fraction`` of its pages (mid-crawl, whatever the speed)."""
    total = sum(len(s.site.canonical_pages) for s in servers)
    deadline = time.monotonic() + timeout
    while sum(sum(s.hits.values()) for s in servers) < fraction * total:
        if time.monotonic() > deadline:
            raise RuntimeError("the crawl did not progress")
        time.sleep(0.02)


def local_crawl(servers: list[SiteServer], workdir: Path, **settings: Any) -> set[str]:
    """One process of the local profile over the web; the canonical URLs it stored."""
    db = workdir / "crawl.db"
    args = [sys.executable, "-m", "scrapy", "crawl", "web", "-a",
            "urls=" + ",".join(s.url("/") for s in servers)]  # fmt: skip
    merged = {"STORAGE_URL": f"sqlite:///{db}", "DROPPED_LOG": workdir / "dropped.jsonl",
              "DEDUP_PROGRESS_INTERVAL": 0, "STORAGE_BATCH_SECONDS": 0.5,
              "DOWNLOAD_DELAY_JITTER": 0, "USER_AGENT": "one-process",
              "TRAP_FOLLOW_LINKS_OF": FOLLOW_LINKS_OF, **settings}  # fmt: skip
    for key, value in merged.items():
        args += ["-s", f"{key}={value}"]
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the local crawl failed: {proc.stderr[-2000:]}")
    return stored_canonical(f"sqlite:///{db}")


def stored_canonical(storage_url: str) -> set[str]:
    """The canonical URLs of the pages a crawl database holds."""
    with Store(storage_url, create=False) as store:
        return {canonical for _, canonical, _, _ in store.iter_fingerprints()}


# --- what a crawl left ----------------------------------------------------------------------------


def close_requests(server: SiteServer, delay: float, across_workers: bool = False) -> list[Any]:
    """Successive requests to ``server`` closer than ``delay`` less :data:`STAMP_NOISE`, as
    ``(gap, (target, agent), (target, agent))``; ``across_workers``: only those two different
    workers (User-Agents) sent."""
    return [(round(b[0] - a[0], 4), a[1:], b[1:])
            for a, b in itertools.pairwise(server.requests)
            if b[0] - a[0] < delay - STAMP_NOISE
            and not (across_workers and a[2] == b[2])]  # fmt: skip


def min_gap(servers: list[SiteServer]) -> float:
    gaps = [b[0] - a[0] for s in servers for a, b in itertools.pairwise(s.requests)]
    return round(min(gaps), 4) if gaps else float("nan")


def kept_twice(servers: list[SiteServer], stored_canonical: set[str]) -> tuple[int, int]:
    """``(duplicate groups of the web, groups with more than one stored member)``."""
    groups = web_duplicate_groups(servers)
    return len(groups), sum(1 for g in groups if len(g & stored_canonical) > 1)


def outcome(cluster: Cluster, servers: list[SiteServer]) -> dict[str, Any]:
    """Every figure the guarantees are about, for a finished cluster crawl."""
    with Store(cluster.storage_url, create=False) as store:
        documents = [(url, canonical) for url, canonical, _, _ in store.iter_fingerprints()]
        dropped = [(d.url, d.canonical_url, d.duplicate_of) for d in store.dropped()]
    stored_urls = {url for url, _ in documents}
    table = {url: of for url, _, of in dropped}
    canonical = [c for _, c in documents]
    decided = set(canonical) | {c for _, c, _ in dropped}
    unfetched = undecided = repeats = 0
    robots = []
    for server in servers:
        hits, site = server.canonical_hits(), server.site
        fetched = {p for p in hits if p in site.canonical_pages}
        unfetched += len(site.canonical_pages - site.disallowed - fetched)
        pages = {normalize_url(server.base_url + p) for p in item_pages(server)}
        undecided += len(pages - decided)
        repeats += sum(n - 1 for p, n in hits.items() if n > 1 and p != "/robots.txt")
        robots.append(server.hits["/robots.txt"])
    records = [r for w in cluster.workers if (w.workdir / "dropped.jsonl").exists()
               for r in read_drop_log(w.workdir / "dropped.jsonl")]  # fmt: skip
    # the workers' logs read start to end, in time order: each URL's final state
    logged = list(replay_drop_log(sorted(records, key=lambda r: r["time"])).values())
    groups, twice = kept_twice(servers, set(canonical))
    client = connect(cluster.redis_url)
    # nothing queued or leased, no pending entry left; a worker killed while holding nothing
    # may stay listed (nobody needs to reclaim it before the crawl ends; a later worker of the
    # namespace removes it)
    settled = (
        client.hmget(f"{cluster.base}:web:requests:meta", ["queued", "leased"]) == [b"0", b"0"]
        and not list(client.scan_iter(match=f"{cluster.base}:web:requests:lease:*"))
        and not list(client.scan_iter(match=f"{cluster.base}:ci:pw:*"))
    )
    finished = [w for w in cluster.workers if not w.killed]
    return {
        "workers": len(cluster.workers),
        "killed": len(cluster.workers) - len(finished),
        "failed_workers": sum(1 for w in finished if w.proc.returncode != 0),
        "log_problems": sum(1 for w in finished if "Traceback" in w.log or "Warning:" in w.log),
        "responses": [int(w.stats.get("downloader/response_count", 0)) for w in cluster.workers],
        "orphaned": sum(int(w.stats.get("dedup/shared/leases_orphaned", 0)) for w in finished),
        "pages_unfetched": unfetched,
        "pages_undecided": undecided,
        "duplicate_fetches": repeats,
        "killed_inflight": cluster.killed_inflight,
        "robots_fetches_max": max(robots),
        "stored": len(documents),
        "stored_twice": len(canonical) - len(set(canonical)),
        "stored_and_dropped": len({u for u, _, _ in dropped} & stored_urls),
        "drops": len(dropped),
        "drops_against_unstored": sum(1 for _, _, of in dropped if of not in stored_urls),
        "log_drops": len(logged),
        "log_drops_not_in_table": len({r["url"] for r in logged} - {u for u, _, _ in dropped}),
        "log_drops_against_unstored": sum(
            1 for r in logged if r["duplicate_of"] not in stored_urls
        ),
        "log_disagrees": sum(1 for r in logged if table.get(r["url"], r["duplicate_of"])
                             != r["duplicate_of"]),
        "close_across_workers": sum(len(close_requests(s, cluster.delay, True)) for s in servers),
        # the first few, for a failure message: (gap, (target, agent), (target, agent))
        "close_across_examples": [c for s in servers
                                  for c in close_requests(s, cluster.delay, True)][:5],
        "min_gap": min_gap(servers),
        "groups": groups,
        "kept_twice": twice,
        "settled": settled,
        "members_left": int(client.zcard(f"{cluster.base}:workers")),
    }


def stat_sum(cluster: Cluster, key: str) -> int:
    return sum(int(w.stats.get(key, 0)) for w in cluster.workers)


# --- scenarios ------------------------------------------------------------------------------------


def scenario(name: str, tmp: Path, rng: random.Random) -> dict[str, Any]:
    """Run one scenario (module docstring) in ``tmp``; its figures."""
    sites = polite_sites() if name.startswith("polite") else four_sites()
    with serve_web(sites) as servers:
        if name in ("one", "polite-one", "polite-stock"):
            polite = name.startswith("polite")
            settings: dict[str, Any] = {"DOWNLOAD_DELAY": 0.1 if polite else DELAY,
                                        "CONCURRENT_REQUESTS_PER_DOMAIN": 1 if polite else 2}
            if name == "polite-stock":  # Scrapy's own handler: the delay counted at dispatch
                stock = "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"
                settings["DOWNLOAD_HANDLERS"] = json.dumps({"http": stock, "https": stock})
            stored = local_crawl(servers, tmp / "one", **settings)
            groups, twice = kept_twice(servers, stored)
            low = sum(len(close_requests(s, settings["DOWNLOAD_DELAY"])) for s in servers)
            return {"workers": 1, "stored": len(stored), "groups": groups, "kept_twice": twice,
                    "min_gap": min_gap(servers), "close_gaps": low}  # fmt: skip
        with cluster_on(servers, tmp) as cluster:
            if name == "polite-three":
                cluster.delay = 0.1
            extra: dict[str, Any] = (
                {"CONCURRENT_REQUESTS_PER_DOMAIN": 1} if name == "polite-three" else {}
            )
            if name == "pending":
                victim = cluster.start(STORAGE_BATCH_SECONDS=60, STORAGE_BATCH_SIZE=100_000)
                pending = f"{cluster.base}:ci:pw:{cluster.member_id(victim)}"
            for _ in range(3 if name != "pending" else 2):
                cluster.start(**extra)
            if name == "kill":
                wait_for_hits(servers, rng.uniform(0.2, 0.6))
                cluster.kill(cluster.busiest())
                cluster.start()
            elif name == "kill2":
                wait_for_hits(servers, 0.25)
                cluster.kill(cluster.busiest())
                wait_for_hits(servers, 0.5)
                cluster.kill(cluster.busiest())
            elif name == "pending":
                client, deadline = connect(cluster.redis_url), time.monotonic() + 120
                while client.hlen(pending) < 20 and time.monotonic() < deadline:
                    time.sleep(0.02)
                cluster.kill(victim)
            cluster.wait()
            figures = outcome(cluster, servers)
            figures["index_reclaimed"] = stat_sum(cluster, "dedup/shared/index_reclaimed")
            figures["close_gaps"] = sum(len(close_requests(s, cluster.delay)) for s in servers)
            return figures


SCENARIOS = ("one", "three", "kill", "kill2", "pending", "polite-stock", "polite-one",
             "polite-three")


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    head = (f"{'scenario':13} {'w':>2} {'lost':>4} {'undec':>5} {'dupfetch':>8} {'held':>4} "
            f"{'unstored':>8} {'kept2x/groups':>13} {'min gap':>7} {'<d':>3} {'x-w':>3}")
    lines = [head]
    for name, f in rows:
        unstored = f"{f.get('drops_against_unstored', 0)}+{f.get('log_drops_against_unstored', 0)}"
        lines.append(
            f"{name:13} {f['workers']:>2} {f.get('pages_unfetched', 0):>4} "
            f"{f.get('pages_undecided', 0):>5} {f.get('duplicate_fetches', 0):>8} "
            f"{f.get('killed_inflight', 0):>4} {unstored:>8} "
            f"{str(f['kept_twice']) + '/' + str(f['groups']):>13} {f['min_gap']:>7} "
            f"{f['close_gaps']:>3} {f.get('close_across_workers', 0):>3}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--runs", type=int, default=2, help="runs of each scenario (2)")
    parser.add_argument("--quick", action="store_true", help="one run of each scenario")
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(SCENARIOS))
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SCENARIOS)
    runs = 1 if args.quick else args.runs
    rng = random.Random()
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        for run in range(runs):
            for name in names:
                figures = scenario(name, Path(tmp) / f"{name}-{run}", rng)
                rows.append((name, figures))
                print(f"{name} run {run + 1}: {json.dumps(figures)}", flush=True)
    print()
    print(table(rows))
    print("lost: pages never fetched; undec: HTML pages neither stored nor dropped; dupfetch: "
          "pages fetched twice; held: requests the killed workers held; unstored: drops naming "
          "an unstored page (table+logs); <d: gaps under DOWNLOAD_DELAY at the server (less "
          f"{STAMP_NOISE * 1000:.0f} ms of stamp noise; with 2 connections per host the "
          "stamps of two connections can swap); x-w: such gaps between two workers")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps([{"scenario": n, **f} for n, f in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

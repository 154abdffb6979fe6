"""Faults under two distributed workers, and what they cost: ``python -m bench.faults``.

Each scenario crawls a web of three hosts (a site, its mirror on another host, a third site)
with two workers of the distributed profile, breaks something mid-crawl, runs the crawl again
when the first run did not finish it (what the error line says to do), and counts what was
lost. Servers that are stopped or restored are the run's own (:mod:`bench.ownservers`):

* ``pg-20s``: the crawl's PostgreSQL crashes (``pg_ctl -m immediate``) for 20 s (``--quick``:
  6 s), within the default retry bound (31 s);
* ``pg-past-bound``: the same outage with ``STORAGE_RETRY_TIMES=2`` (3 s): both workers stop;
  a second pair finishes the crawl once the database is back;
* ``redis-older``: the crawl's Redis is snapshotted (``SAVE``), the workers commit for a
  second, Redis is killed and started again from that older snapshot; a second pair runs the
  crawl again under a new namespace when the first stopped;
* ``paused``: the busiest worker is stopped (SIGSTOP) until the other has taken its hosts
  over, then woken (SIGCONT).

Columns: each run's exit codes; ``lost``: pages of the web never fetched plus HTML pages neither
stored nor dropped; ``dupfetch``: pages fetched more than once; ``unstored``: drops (table and
drop logs) naming a page storage does not hold; ``both``: URLs both stored and dropped;
``twice``: duplicate groups with two stored pages within k bits (the settle step's promise);
``x-w``: requests to one host by two workers closer than ``DOWNLOAD_DELAY``; ``orph``: leases
orphaned. ``--tree PATH`` runs the workers from another checkout (``git worktree add PATH
<commit>``): the same table for the code before a change. Writes
``bench/results/faults.json`` (or ``faults-<name of PATH>.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster import (
    ROOT,
    Cluster,
    close_requests,
    cluster_on,
    outcome,
    stored_canonical,
    wait_for_hits,
)
from bench.ownservers import OwnPostgres, OwnRedis, wait_until
from crawler.backends.redis import clear_namespace, connect
from crawler.content.simhash import hamming
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web, web_duplicate_groups
from crawler.storage import Store

DELAY = 0.05
SETTINGS: dict[str, Any] = {"DOWNLOAD_DELAY": DELAY, "STORAGE_BATCH_SECONDS": 0.3}
K = 3


def web() -> list[Any]:
    return [template_site(60, seed=41), template_site(60, seed=41), template_site(40, seed=42)]


def twins_within_k(storage_url: str, servers: list[SiteServer]) -> int:
    """Duplicate groups with two stored pages within k bits of each other."""
    stored = stored_canonical(storage_url)
    count = 0
    with Store(storage_url, create=False) as store:
        for group in web_duplicate_groups(servers):
            urls = sorted(group & stored)
            hashes = [getattr(store.document_by_url(u), "simhash", None) for u in urls]
            pairs = [(a, b) for a, b in itertools.combinations(hashes, 2) if a and b]
            count += any(hamming(a, b) <= K for a, b in pairs)
    return count


def run(cluster: Cluster, timeout: float = 240, **settings: Any) -> list[int | None]:
    """Two more workers of ``cluster``, waited for; their exit codes."""
    first = len(cluster.workers)
    for _ in range(2):
        cluster.start(**SETTINGS, **settings)
    try:
        cluster.wait(timeout)
    except Exception:  # a hang: what the fault table is about
        cluster.stop()
    return [w.proc.returncode for w in cluster.workers[first:]]


def figures(cluster: Cluster, servers: list[SiteServer], exits: list[Any]) -> dict[str, Any]:
    f = outcome(cluster, servers)
    return {
        "exits": exits,
        "lost": f["pages_unfetched"] + f["pages_undecided"],
        "dupfetch": f["duplicate_fetches"],
        "unstored": f["drops_against_unstored"] + f["log_drops_against_unstored"],
        "both": f["stored_and_dropped"],
        "twice": twins_within_k(cluster.storage_url, servers),
        "x-w": f["close_across_workers"],
        "orph": f["orphaned"],
    }


def pg_outage(tmp: Path, tree: Path, seconds: float, **settings: Any) -> dict[str, Any]:
    own = OwnPostgres()
    try:
        own.start()
        with serve_web(web()) as servers, cluster_on(servers, tmp, pg_url=own.url) as cluster:
            cluster.root, cluster.delay = tree, DELAY
            first = len(cluster.workers)
            for _ in range(2):
                cluster.start(**SETTINGS, **settings)
            wait_for_hits(servers, 0.3, timeout=90)
            own.stop("immediate")
            time.sleep(seconds)
            own.start()
            try:
                cluster.wait(240)
            except Exception:
                cluster.stop()
            exits = [[w.proc.returncode for w in cluster.workers[first:]]]
            if any(code != 0 for code in exits[0]):
                exits.append(run(cluster))
            return figures(cluster, servers, exits)
    finally:
        own.remove()


def redis_older(tmp: Path, tree: Path) -> dict[str, Any]:
    (tmp / "redis").mkdir(parents=True)
    own = OwnRedis(rdb_dir=tmp / "redis")
    own.start()
    try:
        with serve_web(web()) as servers, cluster_on(servers, tmp, own.url) as cluster:
            cluster.root, cluster.delay = tree, DELAY
            for _ in range(2):
                cluster.start(**SETTINGS)
            wait_for_hits(servers, 0.25, timeout=90)
            connect(own.url).save()
            before = sum(sum(s.hits.values()) for s in servers)
            wait_until(lambda: sum(sum(s.hits.values()) for s in servers) > before + 20, 60)
            time.sleep(1.0)
            own.stop()
            own.start()
            try:
                cluster.wait(240)
            except Exception:
                cluster.stop()
            exits = [[w.proc.returncode for w in cluster.workers]]
            final = cluster
            if any(code != 0 for code in exits[0]):  # what the line says: a new namespace
                final = Cluster(cluster.seeds, cluster.storage_url, own.url,
                                f"bench-{uuid.uuid4().hex[:10]}", tmp / "again", root=tree)
                final.delay = DELAY
                exits.append(run(final))
            result = figures(final, servers, exits)
            result["dupfetch"] = sum(n - 1 for s in servers for p, n in s.hits.items()
                                     if n > 1 and p != "/robots.txt")
            if final is not cluster:
                clear_namespace(connect(own.url), final.base)
            return result
    finally:
        own.stop()


def paused(tmp: Path, tree: Path) -> dict[str, Any]:
    with serve_web(web()) as servers, cluster_on(servers, tmp) as cluster:
        cluster.root, cluster.delay = tree, 0.1
        for _ in range(2):
            cluster.start(**{**SETTINGS, "DOWNLOAD_DELAY": 0.1})
        wait_for_hits(servers, 0.15, timeout=90)
        victim = cluster.busiest()
        agent = f"worker-{cluster.workers.index(victim)}"
        victim.proc.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            mine = [s for s in servers if s.requests and s.requests[-1][2] == agent]
            wait_until(lambda: any(t >= paused_at and who != agent
                                   for s in mine for t, _, who in s.requests), 60)
            time.sleep(0.3)
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        try:
            cluster.wait(240)
        except Exception:
            cluster.stop()
        result = figures(cluster, servers, [[w.proc.returncode for w in cluster.workers]])
        result["x-w"] = sum(len(close_requests(s, 0.1, True)) for s in servers)
        return result


#: Seconds the database is down in the two PostgreSQL scenarios (``--quick``: 6).
OUTAGE = {"full": 20.0, "quick": 6.0}
SCENARIOS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "pg-20s": lambda tmp, tree: pg_outage(tmp, tree, OUTAGE["full"]),
    "pg-past-bound": lambda tmp, tree: pg_outage(tmp, tree, OUTAGE["full"],
                                                 STORAGE_RETRY_TIMES=2),
    "redis-older": redis_older,
    "paused": paused,
}
COLUMNS = ("exits", "lost", "dupfetch", "unstored", "both", "twice", "x-w", "orph")


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = ["| fault | " + " | ".join(COLUMNS) + " |",
             "| --- | " + " | ".join("---" for _ in COLUMNS) + " |"]
    for name, f in rows:
        cells = [" then ".join(",".join(str(c) for c in e) for e in f["exits"])]
        cells += [str(f[c]) for c in COLUMNS[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(SCENARIOS))
    parser.add_argument("--quick", action="store_true",
                        help="6-second database outages instead of 20")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the checkout whose code the workers run (default: this one)")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SCENARIOS)
    if args.quick:
        OUTAGE["full"] = OUTAGE["quick"]
    tree = args.tree.resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        for name in names:
            result = SCENARIOS[name](Path(tmp) / name, tree)
            rows.append((name, result))
            print(f"{name}: {json.dumps(result)}", flush=True)
    print()
    print(f"workers run from {tree}")
    print(table(rows))
    suffix = "" if tree == ROOT else f"-{tree.name}"
    out = ROOT / "bench" / "results" / f"faults{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"tree": str(tree), "rows": dict(rows)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

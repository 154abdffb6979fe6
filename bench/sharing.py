"""Work for every worker, measured: ``.venv/bin/python -m bench.sharing [--runs N] [--only ...]``.

Two questions of the distributed profile (issue 24, item 5), on the real Redis and PostgreSQL
with the harness of :mod:`bench.cluster` (the site servers stamp every request with its
arrival time and the worker's User-Agent):

* ``join-H`` (``join-3``, ``join-5``): three workers crawl a web of H hosts; a fourth joins
  once 15% of the web was fetched. Figures: the joiner's responses, and the gaps under
  ``DOWNLOAD_DELAY`` between two workers on one host (politeness across a handover).
* ``takeover``: three workers crawl a web of five hosts; the busiest is SIGKILLed at a random
  moment (20-50% of the web). Figure: for each host it owned that is fetched again, the time
  from the kill to the first request another worker sends there; the worst of them is the
  time until the dead worker's hosts are served again.

``--lease`` and ``--heartbeat`` set ``DISTRIBUTED_LEASE_SECONDS`` and
``DISTRIBUTED_HEARTBEAT_SECONDS`` (unset: the defaults of :mod:`crawler.defaults`, not the
harness's 3 s lease); ``--tree PATH`` runs the workers from another checkout (``git worktree
add PATH COMMIT``: the code before a change); ``--busy N`` runs N CPU-bound
processes beside the crawl (the 2-core machine loaded) and counts the workers that closed
``lease_lost`` (false deaths). Prints one JSON line per run and a summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.cluster import ROOT, Cluster, Worker, close_requests, cluster_on, wait_for_hits
from crawler import defaults
from crawler.backends.redis import connect
from crawler.sitegen import Site, template_site
from crawler.sitegen.server import SiteServer, serve_web

DELAY = 0.1  # DOWNLOAD_DELAY: a crawl long enough to join and kill in, on a busy machine


def web(hosts: int) -> list[Site]:
    """``hosts`` template-heavy blogs of 141 pages each (about 14 s a host at :data:`DELAY`):
    hosts of one size, so that no host is left alone at the end while a joiner starts."""
    return [template_site(120, seed=40 + i) for i in range(hosts)]


def agent(cluster: Cluster, worker: Worker) -> str:
    return f"worker-{cluster.workers.index(worker)}"


def owned_hosts(cluster: Cluster, worker: Worker) -> set[str]:
    """The hosts ``worker`` owns in the shared frontier right now."""
    key = f"{cluster.base}:web:requests:owned:{cluster.member_id(worker)}"
    members = connect(cluster.redis_url).smembers(key)
    return {h.decode() if isinstance(h, bytes) else str(h) for h in members}


def served_again(servers: list[SiteServer], hosts: set[str], dead: str,
                 since: float) -> dict[str, float]:  # fmt: skip
    """Host -> seconds from ``since`` to the first request another agent sent there after it,
    for the ``hosts`` served again so far."""
    out = {}
    for server in servers:
        host = server.base_url.split("//")[1].split(":")[0]
        if host not in hosts:
            continue
        times = [t for t, _, who in list(server.requests) if t >= since and who != dead]
        if times:
            out[host] = round(min(times) - since, 3)
    return out


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"DOWNLOAD_DELAY": DELAY}
    settings["DISTRIBUTED_LEASE_SECONDS"] = (
        args.lease if args.lease is not None else defaults.DISTRIBUTED_LEASE_SECONDS)
    if args.heartbeat is not None:
        settings["DISTRIBUTED_HEARTBEAT_SECONDS"] = args.heartbeat
    return settings


def lease_lost(cluster: Cluster) -> int:
    return sum(1 for w in cluster.workers if "lease_lost" in w.log)


def join(hosts: int, tmp: Path, settings: dict[str, Any], root: Path = ROOT) -> dict[str, Any]:
    """Three workers, a fourth joining late (module docstring)."""
    with serve_web(web(hosts)) as servers, cluster_on(servers, tmp) as cluster:
        cluster.root = root
        joiner = join_late(cluster, servers, settings)
        close = [c for s in servers for c in close_requests(s, DELAY, across_workers=True)]
        return {"hosts": hosts, "close_examples": close[:3],
                "responses": [int(w.stats.get("downloader/response_count", 0))
                              for w in cluster.workers],
                "joiner": int(joiner.stats.get("downloader/response_count", 0)),
                "joiner_stole": int(joiner.stats.get("dedup/shared/hosts_stolen", 0)),
                "close_across_workers": len(close), "lease_lost": lease_lost(cluster)}  # fmt: skip


def join_late(cluster: Cluster, servers: list[SiteServer], settings: dict[str, Any],
              fraction: float = 0.15) -> Worker:  # fmt: skip
    """Three workers, a fourth started once ``fraction`` of the web was fetched; the crawl run
    to its end. The joiner."""
    cluster.delay = settings.get("DOWNLOAD_DELAY", DELAY)
    for _ in range(3):
        cluster.start(**settings)
    wait_for_hits(servers, fraction)
    joiner = cluster.start(**settings)
    cluster.wait(240)
    return joiner


def takeover(tmp: Path, settings: dict[str, Any], rng: random.Random,
             root: Path = ROOT) -> dict[str, Any]:  # fmt: skip
    """Three workers on five hosts, the busiest SIGKILLed (module docstring)."""
    with serve_web(web(5)) as servers, cluster_on(servers, tmp) as cluster:
        cluster.delay, cluster.root = DELAY, root
        for _ in range(3):
            cluster.start(**settings)
        figures = kill_and_time(cluster, servers, rng)
        cluster.wait(240)
        close = [c for s in servers for c in close_requests(s, DELAY, across_workers=True)]
        figures["close_across_workers"], figures["close_examples"] = len(close), close[:3]
        figures["lease_lost"] = lease_lost(cluster)
        return figures


def kill_and_time(cluster: Cluster, servers: list[SiteServer], rng: random.Random,
                  victim_index: int | None = None, fraction: float | None = None,
                  timeout: float = 90) -> dict[str, Any]:  # fmt: skip
    """Kill one worker mid-crawl; the seconds until each host it owned is served again by
    another worker (hosts never fetched again, their work done, are left out)."""
    wait_for_hits(servers, fraction if fraction is not None else rng.uniform(0.2, 0.5))
    victim = (cluster.workers[victim_index] if victim_index is not None
              else cluster.busiest())  # fmt: skip
    hosts = owned_hosts(cluster, victim)
    dead = agent(cluster, victim)
    victim.proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.proc.wait(10)
    deadline = killed_at + timeout
    again: dict[str, float] = {}
    while time.monotonic() < deadline:
        again = served_again(servers, hosts, dead, killed_at)
        running = [w for w in cluster.workers if w.proc.poll() is None]
        if len(again) == len(hosts) or not running:
            break
        time.sleep(0.05)
    return {"victim": dead, "hosts": sorted(hosts), "served_again": again,
            "takeover_s": max(again.values()) if again else None}  # fmt: skip


def _spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


@contextmanager
def busy(processes: int, seconds: float = 600) -> Iterator[None]:
    """``processes`` CPU-bound processes beside the crawl."""
    procs = [multiprocessing.Process(target=_spin, args=(time.monotonic() + seconds,))
             for _ in range(processes)]  # fmt: skip
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sharing",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", default="join-3,join-5,takeover")
    parser.add_argument("--lease", type=float, default=None)
    parser.add_argument("--heartbeat", type=float, default=None)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout workers run")
    args = parser.parse_args(argv)
    root = args.tree.resolve()
    settings, rng = settings_of(args), random.Random()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sharing-") as tmp, busy(args.busy):
        for run in range(args.runs):
            for name in args.only.split(","):
                where = Path(tmp) / f"{name}-{run}"
                if name.startswith("join-"):
                    figures = join(int(name.split("-")[1]), where, settings, root)
                else:
                    figures = takeover(where, settings, rng, root)
                results.setdefault(name, []).append(figures)
                print(f"{name} run {run + 1}: {json.dumps(figures)}", flush=True)
    for name, rows in results.items():
        if name == "takeover":
            times = [r["takeover_s"] for r in rows if r["takeover_s"] is not None]
            print(f"takeover: median {statistics.median(times) if times else None} s, "
                  f"range {min(times, default=None)}-{max(times, default=None)} s; "
                  f"lease_lost {sum(r['lease_lost'] for r in rows)}")
        else:
            print(f"{name}: joiner responses {[r['joiner'] for r in rows]}, close gaps across "
                  f"workers {sum(r['close_across_workers'] for r in rows)}, lease_lost "
                  f"{sum(r['lease_lost'] for r in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

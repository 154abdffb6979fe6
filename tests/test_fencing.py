"""Fencing a paused worker (issue 23, fault 7): no two workers ever in flight on one host.

A worker stopped with SIGSTOP past its lease is reclaimed by the other, which takes its hosts
over. When it runs again (SIGCONT) its download slots and its prefetched requests still hold
requests for those hosts; before the fence it sent them (16 requests in 1.5 s, 30 gaps under
``DOWNLOAD_DELAY`` between the two workers, 20 pages fetched twice). Now every download asks
:meth:`crawler.cluster.worker.Member.may_download` first: the paused worker finds its
membership fenced, sends nothing and closes ``lease_lost``.
"""

from __future__ import annotations

import signal
import time

import pytest

from bench.cluster import Cluster, close_requests, cluster_on, outcome, wait_for_hits
from crawler.backends.redis import connect
from crawler.cluster.worker import DownloadFence, Member
from crawler.sitegen import template_site
from crawler.sitegen.server import SiteServer, serve_web

DELAY = 0.1


def agent_of(cluster: Cluster, index: int) -> str:
    return f"worker-{index}"


def hosts_of(servers: list[SiteServer], agent: str) -> list[SiteServer]:
    """The servers ``agent`` sent the latest request to (the hosts it is working on)."""
    return [s for s in servers if s.requests and s.requests[-1][2] == agent]


def taken_over(servers: list[SiteServer], agent: str, since: float) -> float | None:
    """When another worker first fetched from one of ``servers`` after ``since`` (None: not
    yet)."""
    times = [t for s in servers for t, _, who in s.requests if t >= since and who != agent]
    return min(times) if times else None


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_paused_worker_sends_nothing_to_hosts_taken_over(tmp_path, redis_url, pg_url):
    web = [template_site(50, seed=21), template_site(50, seed=22), template_site(50, seed=23)]
    with serve_web(web) as servers, cluster_on(servers, tmp_path, redis_url, pg_url) as cluster:
        cluster.delay = DELAY
        for _ in range(2):
            cluster.start(DOWNLOAD_DELAY=DELAY, DISTRIBUTED_PREFETCH=8)
        wait_for_hits(servers, 0.15, timeout=90)
        victim = cluster.busiest()
        index = cluster.workers.index(victim)
        agent = agent_of(cluster, index)
        member_id = cluster.member_id(victim)
        assert cluster.held(victim) > 0  # it holds requests it would send on waking
        client = connect(cluster.redis_url)
        fenced_key = f"{cluster.base}:workers:fenced:{member_id}"
        victim.proc.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            mine = hosts_of(servers, agent)
            assert mine, "the paused worker was fetching no host"
            deadline = time.monotonic() + 60
            # the other worker reports it dead (fencing it) and takes its hosts over; a host
            # stolen before that is a legitimate handover, not what this test is about
            while not client.exists(fenced_key):
                assert time.monotonic() < deadline, "the paused worker was never fenced"
                time.sleep(0.05)
            fenced_at = time.monotonic()
            while taken_over(mine, agent, fenced_at) is None:
                assert time.monotonic() < deadline, "nobody took the paused worker's hosts"
                time.sleep(0.05)
            time.sleep(0.3)  # the other worker is now fetching those hosts
        finally:
            victim.proc.send_signal(signal.SIGCONT)
        cluster.wait(240)
        figures = outcome(cluster, servers)
        close = [c for s in servers for c in close_requests(s, DELAY, across_workers=True)]
        assert close == [], close
        # once fenced (seconds after the pause: nothing of its was still on the wire), the
        # paused worker sends nothing more to any host
        sent_after = [t for s in servers for t, _, who in s.requests
                      if who == agent and t > fenced_at]
        assert sent_after == [], f"the paused worker sent {len(sent_after)} request(s) on waking"
        assert paused_at < fenced_at
        assert "lease_lost" in victim.log
        other = cluster.workers[1 - index]
        assert other.proc.returncode == 0, other.log[-3000:]
        assert figures["pages_unfetched"] == 0, figures
        assert figures["pages_undecided"] == 0, figures
        assert figures["settled"], figures


@pytest.mark.redis
def test_a_fenced_member_may_not_download_and_a_fresh_one_asks_nobody(redis_url):
    client = connect(redis_url)
    base = f"dedup:test-fence-{time.time_ns()}"
    try:
        me = Member(client, base, lease_seconds=0.3)
        other = Member(connect(redis_url), base, lease_seconds=30)
        me.beat()
        other.beat()
        assert me.may_download()  # renewed just now
        renewed = me.renewed_at
        assert me.may_download() and me.renewed_at == renewed  # fresh: no Redis call
        time.sleep(0.5)  # me's lease expired (no renewal): the other reports it, fencing it
        assert me.id in other.beat()
        assert not me.may_download()  # the late check renews, finds itself fenced
        assert me.lost
    finally:
        for key in client.scan_iter(match=f"{base}*"):
            client.delete(key)


def test_no_fence_outside_the_distributed_profile():
    assert DownloadFence.of(None) is None

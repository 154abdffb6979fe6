"""Work for every worker (issue 24, item 5): a joiner takes a host from a worker owning several,
a dead worker's hosts are served again within seconds, and a held-up reactor does not kill.

The frontier's rules are checked on the real Redis with the frontier itself and real
memberships (:class:`crawler.cluster.worker.Member`), one step at a time; then end to end
with worker processes (:mod:`bench.sharing`, on the harness of :mod:`bench.cluster`): the
site servers stamp every request, so "served again" and "two workers on one host closer than
``DOWNLOAD_DELAY``" are read where they happen.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator

import pytest
from scrapy import Request

from bench.cluster import close_requests, cluster_on, outcome
from bench.sharing import DELAY, join_late, kill_and_time, web
from crawler import defaults
from crawler.backends.redis import clear_namespace, connect
from crawler.cluster.frontier import LeasedFrontier
from crawler.cluster.heartbeat import Heartbeat, interval
from crawler.cluster.worker import Member, WorkerSettings
from crawler.config import SettingError
from crawler.sitegen.server import serve_web

# --- the frontier's rules, one pop at a time ---------------------------------------------------


class Web:
    """A namespace on the real Redis: a frontier and workers (real memberships) sharing it."""

    def __init__(self, redis_url: str, handover_ms: int = 0) -> None:
        self.client = connect(redis_url)
        self.base = f"dedup:t-sharing-{uuid.uuid4().hex[:10]}"
        self.key = f"{self.base}:web:requests"
        self.handover_ms = handover_ms
        self.frontiers: dict[str, LeasedFrontier] = {}

    def worker(self, name: str, lease_seconds: float = 30) -> LeasedFrontier:
        member = Member(self.client, self.base, lease_seconds)
        member.beat()
        frontier = LeasedFrontier(self.client, None, self.key, workers_key=member.workers_key)
        frontier.worker, frontier.handover_ms = member.id, self.handover_ms
        self.frontiers[name] = frontier
        return frontier

    def push(self, host: str, count: int) -> None:
        pusher = next(iter(self.frontiers.values()))
        for i in range(count):
            pusher.push_new(Request(f"http://{host}/p{uuid.uuid4().hex[:8]}-{i}"))

    def owned(self, name: str) -> set[str]:
        raw = self.client.smembers(f"{self.key}:owned:{self.frontiers[name].worker}")
        return {h.decode() for h in raw}

    def clear(self) -> None:
        clear_namespace(self.client, self.base)


@pytest.fixture
def shared(redis_url) -> Iterator[Web]:
    web = Web(redis_url)
    try:
        yield web
    finally:
        web.clear()


def hosts_of(requests: list[Request]) -> set[str]:
    return {r.url.split("/")[2] for r in requests}


def own_hosts(web: Web, owners: dict[str, list[str]], depth: int = 10) -> None:
    """Each worker of ``owners`` owns its hosts, each with ``depth`` queued requests and nothing
    in flight (every lease acknowledged)."""
    for name, hosts in owners.items():
        frontier = web.frontiers[name]
        for host in hosts:
            web.push(host, 1)
        requests, _ = frontier.pop_many(len(hosts))  # a worker with no host claims free ones
        assert hosts_of(requests) == set(hosts)
        frontier.ack([r.meta["dedup_lease"] for r in requests])
        for host in hosts:
            web.push(host, depth)
        assert web.owned(name) == set(hosts)


@pytest.mark.redis
def test_with_one_busy_host_per_worker_a_joiner_takes_none(shared):
    """Three workers, three hosts with deep queues: a fourth worker could only share a host
    with its owner. It waits (one worker per host is the politeness guarantee)."""
    for name in ("a", "b", "c", "joiner"):
        shared.worker(name)
    own_hosts(shared, {"a": ["h1.test"], "b": ["h2.test"], "c": ["h3.test"]})
    for _ in range(3):
        requests, stolen = shared.frontiers["joiner"].pop_many(8)
        assert requests == [] and stolen is None
    assert shared.owned("joiner") == set()


@pytest.mark.redis
@pytest.mark.parametrize("order", ["joiner_first", "joiner_last"])
def test_a_joiner_takes_a_host_from_the_worker_owning_several(redis_url, order):
    """A owns three hosts with queued work, B one: a worker with none takes one of A's (B's
    single host stays B's), only once A has nothing of it in flight and the handover delay
    passed; A gets no request of it again."""
    web = Web(redis_url, handover_ms=300)
    try:
        names = ["joiner", "a", "b"] if order == "joiner_first" else ["a", "b", "joiner"]
        for name in names:
            web.worker(name)
        own_hosts(web, {"a": ["h1.test", "h2.test", "h3.test"], "b": ["h4.test"]})
        a, joiner = web.frontiers["a"], web.frontiers["joiner"]
        in_flight, _ = a.pop_many(3)  # one request of each of A's hosts on the wire
        assert hosts_of(in_flight) == {"h1.test", "h2.test", "h3.test"}
        requests, stolen = joiner.pop_many(8)
        assert requests == [] and stolen in {"h1.test", "h2.test", "h3.test"}
        assert web.owned("joiner") == {stolen} and stolen not in web.owned("a")
        assert web.owned("b") == {"h4.test"}
        assert joiner.pop_many(8)[0] == []  # A still has a request of it in flight
        lease = next(r.meta["dedup_lease"] for r in in_flight if stolen in r.url)
        more, _ = a.pop_many(8, fetched=[lease])  # its download ended: A says so
        assert stolen not in hosts_of(more)
        assert joiner.pop_many(8)[0] == []  # the handover delay starts now
        time.sleep(0.4)
        requests, stolen_again = joiner.pop_many(8)
        assert requests and hosts_of(requests) == {stolen} and stolen_again is None
    finally:
        web.clear()


@pytest.mark.redis
def test_a_host_stolen_twice_waits_for_its_first_owner(shared):
    """J1 takes X from A while A is on the wire on X, then claims a free host, so J1 owns two
    and J2 takes X from J1 before J1 ever served it. X must still wait for A's request. The
    second steal used to record J1 (nothing in flight) as the owner to wait for, and J2
    fetched X while A was still on it: two workers on one host closer than DOWNLOAD_DELAY."""
    for name in ("a", "j1", "j2"):
        shared.worker(name)
    own_hosts(shared, {"a": ["x.test", "h1.test"]})
    a, j1, j2 = (shared.frontiers[n] for n in ("a", "j1", "j2"))
    in_flight, _ = a.pop_many(2)
    assert hosts_of(in_flight) == {"x.test", "h1.test"}
    shared.push("x.test", 5)
    requests, stolen = j1.pop_many(8)
    assert requests == [] and stolen == "x.test"  # both in flight: the deeper queue
    shared.push("h2.test", 20)
    requests, _ = j1.pop_many(8)  # X waits for A; J1 claims the free host meanwhile
    assert hosts_of(requests) == {"h2.test"}
    requests, stolen = j2.pop_many(8)
    assert requests == [] and stolen == "x.test"  # J1 owned two: the one it never served
    assert j2.pop_many(8)[0] == []  # A is still on the wire on X
    lease = next(r.meta["dedup_lease"] for r in in_flight if "x.test" in r.url)
    a.pop_many(8, fetched=[lease])
    requests, _ = j2.pop_many(8)
    assert hosts_of(requests) == {"x.test"}


@pytest.mark.redis
def test_a_worker_whose_hosts_fill_its_demand_still_claims_a_free_host(shared):
    """A dead worker's hosts (here: a host nobody owns) were claimed only by a worker whose own
    hosts could not fill its demand: with deep queues everywhere, nobody, until some queue
    drained. Now the pop of a worker no other live worker has fewer hosts than claims one."""
    for name in ("a", "b"):
        shared.worker(name)
    own_hosts(shared, {"a": ["h1.test"], "b": ["h2.test"]}, depth=20)
    shared.push("h3.test", 5)  # free: no owner
    requests, _ = shared.frontiers["a"].pop_many(4)
    assert hosts_of(requests) == {"h1.test"}  # its own host filled the demand
    assert shared.owned("a") == {"h1.test", "h3.test"}
    requests, _ = shared.frontiers["a"].pop_many(4)
    assert hosts_of(requests) == {"h1.test", "h3.test"}  # served at once


@pytest.mark.redis
def test_a_free_host_goes_to_the_worker_with_fewer_hosts(shared):
    for name in ("a", "b"):
        shared.worker(name)
    own_hosts(shared, {"a": ["h1.test", "h2.test"], "b": ["h3.test"]}, depth=20)
    shared.push("h4.test", 5)
    shared.frontiers["a"].pop_many(4)
    assert "h4.test" not in shared.owned("a")  # b has fewer hosts with work
    shared.frontiers["b"].pop_many(4)
    assert shared.owned("b") == {"h3.test", "h4.test"}


@pytest.mark.redis
def test_a_dead_workers_hosts_are_claimed_by_busy_workers(shared):
    for name in ("a", "b", "dead"):
        shared.worker(name)
    own_hosts(shared, {"a": ["h1.test"], "b": ["h2.test"], "dead": ["h3.test", "h4.test"]},
              depth=20)  # fmt: skip
    shared.frontiers["dead"].pop_many(4)  # leases it never gives back
    shared.frontiers["a"].release(shared.frontiers["dead"].worker)  # reclaimed
    shared.frontiers["a"].pop_many(4)
    shared.frontiers["b"].pop_many(4)
    assert shared.owned("a") | shared.owned("b") == {f"h{i}.test" for i in range(1, 5)}


# --- the heartbeat ----------------------------------------------------------------------------


@pytest.mark.redis
def test_the_heartbeat_keeps_a_held_up_worker_alive(shared):
    """Nothing else renews (the reactor held up): the thread does, so another worker finds the
    member alive after several leases."""
    me = Member(shared.client, shared.base, lease_seconds=0.6)
    other = Member(shared.client, shared.base, lease_seconds=30)
    me.beat()
    other.beat()
    running = [True]
    heart = Heartbeat(me, 0.15, lambda: running[0])
    heart.start()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert me.id not in other.beat(), "a live worker was reported dead"
            time.sleep(0.1)
        assert heart.renewals >= 5 and not me.lost
    finally:
        running[0] = False
    heart_thread_ends(heart)


@pytest.mark.redis
def test_a_hung_reactor_is_not_kept_alive_for_ever(shared):
    me = Member(shared.client, shared.base, lease_seconds=0.6)
    other = Member(shared.client, shared.base, lease_seconds=30)
    me.beat()
    other.beat()
    running = [True]
    heart = Heartbeat(me, 0.1, lambda: running[0], stall=0.3)
    heart.start()
    try:
        deadline = time.monotonic() + 5
        while me.id not in other.beat():
            assert time.monotonic() < deadline, "a hung worker stayed alive"
            time.sleep(0.1)
        assert not me.may_download()  # fenced: it sends nothing more
    finally:
        running[0] = False
    heart_thread_ends(heart)


def heart_thread_ends(heart: Heartbeat) -> None:
    deadline = time.monotonic() + 3
    while heart.alive():
        assert time.monotonic() < deadline, "the heartbeat outlived its loop"
        time.sleep(0.05)


def test_the_heartbeat_is_at_most_a_third_of_the_lease():
    beat = defaults.DISTRIBUTED_HEARTBEAT_SECONDS
    assert interval({}, defaults.DISTRIBUTED_LEASE_SECONDS) == beat
    assert interval({"DISTRIBUTED_HEARTBEAT_SECONDS": 5}, 3.0) == 1.0
    with pytest.raises(SettingError, match="DISTRIBUTED_HEARTBEAT_SECONDS"):
        WorkerSettings.from_settings({"DISTRIBUTED_HEARTBEAT_SECONDS": 0})


# --- end to end: worker processes on a web of five hosts -------------------------------------


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_late_joiner_fetches_pages_politely(redis_url, pg_url, tmp_path):
    with serve_web(web(5)) as servers, cluster_on(servers, tmp_path, redis_url, pg_url) as cluster:
        joiner = join_late(cluster, servers, {"DOWNLOAD_DELAY": DELAY})
        figures = outcome(cluster, servers)
    assert joiner.stats["downloader/response_count"] > 0, joiner.log[-2000:]
    assert all(n > 0 for n in figures["responses"]), figures["responses"]
    close = [c for s in servers for c in close_requests(s, DELAY, across_workers=True)]
    assert close == [], close
    assert figures["pages_unfetched"] == 0 and figures["settled"], figures


#: Seconds within which a SIGKILLed worker's hosts must be served again (the old default lease
#: alone was 30 s): the default lease, a heartbeat, start-up of a reclaim and a claim, slack.
TAKEOVER_BOUND = defaults.DISTRIBUTED_LEASE_SECONDS + 5


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize(("victim", "fraction"), [(None, 0.15), (0, 0.45)],
                         ids=["busiest_early", "first_late"])  # fmt: skip
def test_a_killed_workers_hosts_are_served_again_within_seconds(redis_url, pg_url, tmp_path,
                                                                 victim, fraction):  # fmt: skip
    settings = {"DOWNLOAD_DELAY": DELAY,
                "DISTRIBUTED_LEASE_SECONDS": defaults.DISTRIBUTED_LEASE_SECONDS}  # fmt: skip
    with serve_web(web(5)) as servers, cluster_on(servers, tmp_path, redis_url, pg_url) as cluster:
        cluster.delay = DELAY
        for _ in range(3):
            cluster.start(**settings)
        timed = kill_and_time(cluster, servers, random.Random(), victim, fraction,
                              timeout=TAKEOVER_BOUND + 10)  # fmt: skip
        cluster.wait(120)
        figures = outcome(cluster, servers)
    assert timed["served_again"], timed  # it owned hosts with work left
    assert timed["takeover_s"] < TAKEOVER_BOUND, timed
    assert figures["pages_unfetched"] == 0 and figures["pages_undecided"] == 0, figures
    assert figures["close_across_workers"] == 0, figures["close_across_examples"]
    assert figures["settled"], figures
    assert sum(1 for w in cluster.workers if "lease_lost" in w.log) == 0


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_a_joiner_with_no_host_to_take_says_why_it_waits(tmp_path, redis_url, pg_url):
    """One host, one worker on it: a second worker may not share the host (politeness), so it
    fetches nothing; it says so once, at INFO, instead of idling in silence, and both end."""
    from crawler.sitegen import template_site

    # 60 pages 0.15 s apart: 9 s of work for the first worker, so that the joiner, started
    # after 3 fetches, opens while there is work it may not take even on a loaded machine
    # (with 30, it once opened after the first had finished, under a parallel test run).
    with serve_web([template_site(60, seed=9)]) as servers, \
            cluster_on(servers, tmp_path, redis_url, pg_url) as cluster:  # fmt: skip
        cluster.delay = 0.15
        first = cluster.start()
        deadline = time.monotonic() + 60
        while sum(servers[0].hits.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        joiner = cluster.start()
        cluster.reap(timeout=180)
        assert [first.proc.returncode, joiner.proc.returncode] == [0, 0]
        assert int(joiner.stats.get("downloader/response_count", 0)) == 0
        said = [line for line in joiner.log.splitlines() if "Waiting for work" in line]
        assert len(said) == 1 and "INFO" in said[0], said
        assert "Waiting for work" not in first.log

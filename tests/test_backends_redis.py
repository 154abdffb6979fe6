"""Redis backends against the real server: Bloom behaviour, same decisions as local, atomicity."""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler.backends import make_content_index, make_seen_set
from crawler.backends.common import mask_url
from crawler.backends.local import LocalContentIndex
from crawler.backends.redis import (
    RedisBackendError,
    RedisContentIndex,
    RedisSeenSet,
    check_redis,
    clear_namespace,
    connect,
)
from crawler.config import SettingError
from crawler.storage import Store
from crawler.vocab import Match, PageSignature
from tests.test_backends_local import BASES, chash, page, page_sequences

pytestmark = pytest.mark.redis


@pytest.fixture
def ns(redis_url):
    """Settings for a fresh namespace on the real Redis; its keys are deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    values = {"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name, "DEDUP_BACKEND": "redis"}
    yield Settings(values)
    clear_namespace(connect(redis_url), f"dedup:{name}")


def fresh_keys(n: int) -> list[bytes]:
    return [os.urandom(16) for _ in range(n)]


# --- seen set ---------------------------------------------------------------------------------


def test_seen_set_has_no_false_negatives_and_counts(ns):
    seen = RedisSeenSet.from_settings(ns, capacity=5000, error_rate=0.001)
    keys = fresh_keys(3000)
    first = [seen.add(k) for k in keys]
    assert sum(first) <= 10  # a new key reads as seen only by a false positive
    assert all(seen.add(k) for k in keys)
    assert all(k in seen for k in keys)
    assert len(seen) == 3000 - sum(first)
    assert seen.hashes == 10 and seen.bits > 3000 * 14
    assert 0 < seen.fill_ratio < 0.5
    seen.close()


@pytest.mark.slow
def test_seen_set_false_positive_rate_near_p(ns):
    p = 0.01
    seen = RedisSeenSet.from_settings(ns, capacity=4000, error_rate=p, on_full="stop")
    for k in fresh_keys(4200):  # a false positive is not a new key: fill to capacity
        seen.add(k)
        if len(seen) >= 4000:
            break
    trials = 20_000
    rate = sum(k in seen for k in fresh_keys(trials)) / trials
    assert 0.4 * p < rate < 1.5 * p
    assert seen.expected_false_positive_rate == pytest.approx(p, rel=0.3)
    assert seen.full


def test_seen_set_grows_past_capacity_and_shards(ns):
    seen = RedisSeenSet.from_settings(ns, capacity=200, error_rate=0.01, shard_bits=1024)
    keys = fresh_keys(1500)
    for k in keys:
        seen.add(k)
    assert all(k in seen for k in keys)
    layers = seen._layers()
    assert len(layers) >= 3 and all(m > 1024 for m, _, _ in layers)  # several shards each
    assert not seen.full
    client = seen.client
    assert client.exists(f"{seen.base}:0:1")  # layer 0, second shard
    assert seen.expected_false_positive_rate < 0.02


def test_contains_many_answers_as_contains_does_in_one_round_trip(ns):
    seen = RedisSeenSet.from_settings(ns, capacity=200, error_rate=0.01, shard_bits=1024)
    added = fresh_keys(700)  # past capacity: several layers of several shards
    for k in added:
        seen.add(k)
    probe = added[::3] + fresh_keys(400) + [b"short", added[0]]
    want = [k in seen for k in probe]
    assert sum(want) >= len(added[::3]) + 1
    calls = []
    run = seen._run
    seen._run = lambda *args: calls.append(args) or run(*args)
    count = len(seen)
    assert seen.contains_many(probe) == want
    assert len(calls) == 1  # one script call for the whole batch
    assert len(seen) == count  # read-only
    assert seen.contains_many([]) == []


def test_redis_seen_set_has_the_whole_protocol_and_the_local_figures(ns):
    """Every capability of :class:`crawler.backends.SeenSet`, with the same signatures; the
    figures of the local set but its layers (they live in Redis), the same sizing and count
    for the same keys (the bits differ: the shards index them their own way)."""
    from crawler.backends.bloom import LocalSeenSet
    from tests.test_bloom import protocol_gaps

    seen = make_seen_set(Settings({**ns.copy_to_dict(), "BLOOM_CAPACITY": 100}))
    assert isinstance(seen, RedisSeenSet) and protocol_gaps(seen) == []
    assert seen.shared and seen.url == ns["REDIS_URL"]
    local = LocalSeenSet(capacity=100)
    # fixed keys (the namespace is fresh): the two filters index bits their own way, so a false
    # positive of one is not the other's; these 60 keys give none in either
    keys = [random.Random(f"key{i}").randbytes(16) for i in range(60)]
    assert [seen.add(key) for key in keys] == [local.add(key) for key in keys] == [False] * 60
    figures, local_figures = seen.figures(), local.figures()
    assert local_figures.pop("layers") == 1
    assert list(figures) == list(local_figures)
    sizing = ("capacity", "urls", "bits", "hashes", "false_positives_avoided")
    assert [figures[k] for k in sizing] == [local_figures[k] for k in sizing] == [
        100, 60, local.bits, local.hashes, 0]  # fmt: skip
    assert 0 < figures["fill_ratio"] < 1 and figures["expected_false_positives"] >= 0
    seen.clear()
    assert len(seen) == 0 and seen.figures()["urls"] == 0


def test_seen_set_is_shared_and_refuses_other_sizing(ns):
    a = make_seen_set(Settings({**ns.copy_to_dict(), "BLOOM_CAPACITY": 1000}))
    b = make_seen_set(Settings({**ns.copy_to_dict(), "BLOOM_CAPACITY": 1000}))
    assert isinstance(a, RedisSeenSet)
    key = os.urandom(16)
    assert a.add(key) is False
    assert b.add(key) is True
    with pytest.raises(ValueError, match="BLOOM_CAPACITY"):
        make_seen_set(Settings({**ns.copy_to_dict(), "BLOOM_CAPACITY": 2000}))


def test_short_keys_are_stretched(ns):
    seen = RedisSeenSet.from_settings(ns, capacity=100)
    assert seen.add(b"x") is False
    assert b"x" in seen and b"y" not in seen


# --- content index ----------------------------------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=page_sequences())
def test_decisions_equal_local(ns, case):
    """Decisions, queries, the canonical swap (keep a page instead of its match) and
    removals, as the local index makes them."""
    k, pages, swaps = case
    client = connect(ns["REDIS_URL"])
    base = f"dedup:{ns['DEDUP_NAMESPACE']}"
    clear_namespace(client, base)
    remote = RedisContentIndex(client, base, k=k)
    local = LocalContentIndex(k)
    for i, (p, swap) in enumerate(zip(pages, swaps, strict=True)):
        assert remote.check(p) == local.check(p)  # the same question, nothing recorded
        got, expected = remote.check_and_add(p), local.check_and_add(p)
        assert got == expected
        if got is not None:
            assert (got.canonical_url, got.names) == (expected.canonical_url, expected.names)
            # a page replacing its match holds no other kept page's fingerprint (its match is
            # its nearest); an exact copy with another SimHash could, which pages never do
            if swap and (got.reason == "near_duplicate" or got.simhash == p.simhash):
                remote.replace(got.canonical_url, p)
                local.replace(expected.canonical_url, p)
        elif swap and i % 3 == 0:  # a kept page forgotten (a late drop)
            canonical = p.canonical_url or p.url
            assert remote.remove(canonical) == local.remove(canonical) is True
    assert len(remote) == len(local)
    clear_namespace(client, base)


def test_load_is_idempotent_and_then_dedups(ns):
    index = make_content_index(ns)
    assert isinstance(index, RedisContentIndex)
    records = [
        ("http://old/1", "", chash(1), 2**64 - 1),
        ("http://old/2", "http://old/2", chash(2), None),
        ("http://old/1b", "http://old/1", chash(3), 2**63),
    ]
    assert index.load(records) == 3
    assert index.load(records) == 2  # old/1 replaces old/1b, then old/1b replaces it back
    assert index.load(records[1:]) == 0
    assert len(index) == 2
    assert index.check_and_add(page("http://new/a", 2, None)).url == "http://old/2"
    match = index.check_and_add(page("http://new/b", 7, 2**63 + 1))
    assert (match.reason, match.url, match.simhash, match.distance) == (
        "near_duplicate",
        "http://old/1b",
        2**63,
        1,
    )


def test_index_refuses_other_k(ns):
    make_content_index(ns)
    with pytest.raises(ValueError, match="SIMHASH_MAX_DISTANCE"):
        make_content_index(Settings({**ns.copy_to_dict(), "SIMHASH_MAX_DISTANCE": 5}))


def _race(url: str, base: str, pairs: int, worker: int, barrier, results) -> None:
    index = RedisContentIndex(connect(url), base, k=3)
    kept = 0
    for i in range(pairs):
        fp = (i * 0x9E3779B97F4A7C15) % 2**64
        mine = fp ^ (1 << (worker * 20))  # the two pages are 2 bits apart: near duplicates
        barrier.wait(timeout=20)
        p = PageSignature(f"http://w{worker}/{i}", "", chash(1000 * worker + i), mine)
        kept += index.check_and_add(p) is None
    results.put(kept)


def test_two_processes_never_both_keep_a_near_duplicate_pair(ns):
    pairs = 40
    base = f"dedup:{ns['DEDUP_NAMESPACE']}"
    RedisContentIndex(connect(ns["REDIS_URL"]), base, k=3)  # create the namespace once
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(ns["REDIS_URL"], base, pairs, w, barrier, results))
        for w in (0, 1)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    kept = results.get(timeout=5) + results.get(timeout=5)
    assert kept == pairs
    assert len(RedisContentIndex(connect(ns["REDIS_URL"]), base, k=3)) == pairs


# --- errors -----------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("factory", [make_seen_set, make_content_index])
def test_unreachable_redis_is_one_named_error_with_masked_password(factory):
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    with pytest.raises(RedisBackendError) as info:
        factory(Settings({"DEDUP_BACKEND": "redis", "REDIS_URL": url}))
    text = str(info.value)
    assert "hunter2" not in text
    assert "redis://:***@127.0.0.1" in text
    assert "REDIS_URL" in text


def test_a_lost_connection_later_is_the_same_error(ns):
    # retried for 1 s, not the default 30 (the retry itself: tests/test_hostile_redis.py)
    index = make_content_index(Settings({**ns.copy_to_dict(), "REDIS_RETRY_SECONDS": 1}))
    index.client.connection_pool.connection_kwargs["port"] = _closed_port()
    index.client.connection_pool.reset()
    with pytest.raises(RedisBackendError):
        index.check_and_add(page("http://a", 1, 1))


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://user:pw@host:1/2", "redis://user:***@host:1/2"),
        ("rediss://:pw@host/0", "rediss://:***@host/0"),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


def test_seen_set_clear_empties_the_shared_filter(ns):
    seen = RedisSeenSet.from_settings(ns, capacity=100)
    key = os.urandom(16)
    seen.add(key)
    seen.clear()
    assert key not in seen and len(seen) == 0
    assert seen.add(key) is False


def test_check_redis_before_a_crawl(ns):
    check_redis(ns)  # creates the namespace
    check_redis(ns)  # and accepts it again with the same settings
    with pytest.raises(SettingError) as info:
        check_redis(Settings({**ns.copy_to_dict(), "BLOOM_ERROR_RATE": 0.01}))
    assert info.value.name == "BLOOM_ERROR_RATE"
    with pytest.raises(SettingError) as info:
        check_redis(Settings({**ns.copy_to_dict(), "SIMHASH_BLOCKS": 6}))
    assert info.value.name == "SIMHASH_BLOCKS"


def test_urls_round_trip_through_the_lua_json(ns):
    index = make_content_index(ns)
    url = 'http://例え.jp/ü?q="x"&y=\\/\x01'
    assert index.check_and_add(page(url, 1, 5)) is None
    assert index.check_and_add(page("http://b", 1, None)).url == url
    index.load([(url + "2", "", chash(2), 2**64 - 1)])
    assert index.check_and_add(page("http://c", 3, 2**64 - 2)).url == url + "2"


# --- pending entries (distributed profile) ------------------------------------------------------


def test_a_page_kept_by_another_worker_is_pending_until_committed(ns):
    a = RedisContentIndex.from_settings(ns, owner="A")
    b = RedisContentIndex.from_settings(ns, owner="B")
    assert a.check_and_add(page("http://x/1", 1, 2**40)) is None
    # B meets a near copy and an exact copy of A's page: neither is decided, nothing recorded
    for probe in (page("http://y/near", 2, 2**40 + 1), page("http://y/exact", 1, 2**50)):
        match = b.check_and_add(probe)
        assert (match.reason, match.url) == ("pending", "http://x/1")
    assert len(b) == 1
    # A's own later page is decided against its own pending page (its batch commits first)
    assert a.check_and_add(page("http://x/2", 3, 2**40 + 2)).reason == "near_duplicate"
    assert b.pending_of("A") == ["http://x/1"]
    assert a.commit(["http://x/1"]) == 1
    assert b.pending_of("A") == []
    assert b.check_and_add(page("http://y/near", 2, 2**40 + 1)).reason == "near_duplicate"


def test_a_dead_workers_unstored_pending_pages_leave_the_index(ns):
    far = 2**64 - 1 - 2**40  # 63 bits from 2**40
    a = RedisContentIndex.from_settings(ns, owner="A")
    b = RedisContentIndex.from_settings(ns, owner="B")
    assert a.check_and_add(page("http://x/stored", 1, 2**40)) is None
    assert a.check_and_add(page("http://x/lost", 2, far)) is None
    assert b.reclaim("A", ["http://x/stored"]) == 1  # the other one was never stored
    assert len(b) == 1 and b.pending_of("A") == []
    assert b.check_and_add(page("http://y/1", 9, 2**40 + 1)).url == "http://x/stored"
    assert b.check_and_add(page("http://y/2", 8, far ^ 1)) is None  # decided anew: kept


def test_a_replaced_pending_page_leaves_its_workers_pending_list(ns):
    """A page kept instead of a twin that is still pending (the preference order, on arrival):
    the twin leaves the owner's pending list with its entry, so a reclaim of a dead owner
    counts only pages it really kept (before: the twin stayed listed, a stale entry)."""
    a = RedisContentIndex.from_settings(ns, owner="A")
    assert a.check_and_add(page("http://x/long-twin", 1, 2**40)) is None
    assert a.pending_of("A") == ["http://x/long-twin"]
    a.replace("http://x/long-twin", page("http://x/t", 2, 2**40 + 1))
    assert a.pending_of("A") == ["http://x/t"]
    assert int(a.client.hlen(f"{a.base}:pw:A")) == 1
    b = RedisContentIndex.from_settings(ns, owner="B")
    assert b.reclaim("A", []) == 1 and len(b) == 0


def test_stored_pages_load_once_and_never_replace_a_newer_entry(ns):
    a = RedisContentIndex.from_settings(ns, owner="A")
    a.check_and_add(page("http://x/1", 1, 2**40))  # this crawl's newer version of x/1
    far = 2**64 - 1 - 2**40
    stored = [("http://x/1", "http://x/1", chash(5), far), ("http://x/2", "", chash(6), None)]
    joiner = RedisContentIndex.from_settings(ns, owner="B")
    assert joiner.load_stored(stored) == 1  # only x/2: x/1's entry is newer
    assert joiner.load_stored(stored) == 0  # loaded once per namespace
    assert joiner.check_and_add(page("http://y/1", 7, far)) is None  # the old x/1 is not back


# --- the lean layout: URLs and earlier versions come from storage -------------------------------


@st.composite
def crawl_sequences(draw: st.DrawFn) -> tuple[int, list[PageSignature]]:
    """Pages as a crawl meets them: each URL fetched once, several URLs sharing a canonical URL
    (rule 1), near copies of a few bases at 0..k+2 bits, repeated contents, some too short."""
    k = draw(st.integers(0, 5))
    pages = []
    for i in range(draw(st.integers(1, 40))):
        fp = draw(st.sampled_from(BASES))
        for b in draw(st.lists(st.integers(0, 63), max_size=k + 2, unique=True)):
            fp ^= 1 << b
        canonical = draw(st.sampled_from(["", "http://h/canon", "http://h/other"]))
        simhash = draw(st.one_of(st.just(fp), st.just(fp), st.none()))
        pages.append(PageSignature(f"http://h/{i}", canonical, chash(draw(st.integers(0, 9))),
                                   simhash))
    return k, pages


def _store_kept(store: Store, p: PageSignature) -> None:
    store.upsert_documents([{"url": p.url, "canonical_url": p.canonical_url or p.url,
                             "content_hash": p.content_hash, "simhash": p.simhash}])


@pytest.mark.slow
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=crawl_sequences())
def test_lean_index_with_storage_decides_as_local_and_holds_no_url(ns, tmp_path_factory, case):
    k, pages = case
    client = connect(ns["REDIS_URL"])
    base = f"dedup:{ns['DEDUP_NAMESPACE']}"
    clear_namespace(client, base)
    with Store(f"sqlite:///{tmp_path_factory.mktemp('lean')}/crawl.db") as store:
        remote = RedisContentIndex(client, base, k=k, resolver=store)
        local = LocalContentIndex(k)
        for p in pages:
            match = remote.check_and_add(p)
            assert match == local.check_and_add(p)
            if match is None:  # what the storage pipeline does with a kept page
                _store_kept(store, p)
        assert len(remote) == len(local)
    assert not client.exists(f"{base}:ci:u", f"{base}:ci:c")  # no URL, no version in Redis
    clear_namespace(client, base)


def test_a_recrawl_never_drops_a_page_as_its_own_stored_version(ns, tmp_path):
    """The earlier crawl's pages are loaded from storage; the new crawl fetches them again
    (changed a little, or not at all): each is the same page, never its own duplicate."""
    with Store(f"sqlite:///{tmp_path}/crawl.db") as store:
        first = RedisContentIndex.from_settings(ns, resolver=store)
        pages = [page(f"http://s/{i}", i, (i * 0x9E3779B97F4A7C15) % 2**64) for i in range(30)]
        for p in pages:
            assert first.check_and_add(p) is None
            _store_kept(store, p)
        clear_namespace(first.client, first.base.rsplit(":", 1)[0])  # a new crawl's namespace
        again = RedisContentIndex.from_settings(ns, resolver=store)
        assert again.load_arrays(store.iter_key_arrays()) == 30
        for p in pages[:10]:  # unchanged
            assert again.check_and_add(p) is None
        for i, p in enumerate(pages[10:20], 10):  # 2 bits changed: still itself
            changed = PageSignature(p.url, p.canonical_url, chash(1000 + i), p.simhash ^ 0b101)
            assert again.check_and_add(changed) is None
        # a mirror of a stored page is still its duplicate, named from storage
        mirror = page("http://mirror/25", 2025, pages[25].simhash ^ 0b11)
        assert again.check_and_add(mirror) == Match("near_duplicate", "http://s/25",
                                                    pages[25].simhash, 2)
        exact = page("http://mirror/26", 26, None)
        assert again.check_and_add(exact).url == "http://s/26"
        assert len(again) == 30


def test_a_kept_page_storage_lost_is_forgotten_not_named(ns, tmp_path):
    with Store(f"sqlite:///{tmp_path}/crawl.db") as store:
        index = RedisContentIndex.from_settings(ns, resolver=store)
        assert index.check_and_add(page("http://a/1", 1, 2**40)) is None  # never stored
        far = 2**64 - 1 - 2**40  # 63 bits from 2**40
        assert index.check_and_add(page("http://a/2", 2, far)) is None
        _store_kept(store, page("http://a/2", 2, far))
        # a near copy of the lost page is kept (no drop names a page storage lacks)
        assert index.check_and_add(page("http://b/1", 3, 2**40 + 1)) is None
        assert index.check_and_add(page("http://b/2", 4, far ^ 1)).url == "http://a/2"
        assert len(index) == 2  # a/1 forgotten; a/2 and b/1 kept


def _held_bytes(client, base: str) -> int:
    """What the namespace's keys hold (MEMORY USAGE, every element counted): unlike the
    server's used_memory, nothing else running on the server moves it."""
    return sum(int(client.memory_usage(key, samples=0) or 0)
               for key in client.scan_iter(match=f"{base}:*", count=1000))


@pytest.mark.slow
def test_the_lean_index_costs_under_64_bytes_per_page(ns, tmp_path):
    """Redis memory per kept page at 20,000 pages, lean (URLs in storage): the bucket hashes'
    fixed cost is spread over few pages here, so this bounds the per-page part only."""
    client = connect(ns["REDIS_URL"])
    base = f"dedup:{ns['DEDUP_NAMESPACE']}"
    with Store(f"sqlite:///{tmp_path}/crawl.db") as store:
        index = RedisContentIndex.from_settings(ns, resolver=store)
        rng = np.random.default_rng(7)
        warm = [(f"http://w/{i}", "", chash(i), int(fp)) for i, fp in
                enumerate(rng.integers(0, 2**64, 70_000, dtype=np.uint64))]
        index.load(warm[:50_000], replace=False)  # ~every bucket holds records already
        before = _held_bytes(client, base)
        index.load(warm[50_000:], replace=False)
        grown = _held_bytes(client, base) - before
    assert len(index) == 70_000
    assert 6 * 4 < grown / 20_000 < 64  # at least the 4 tables' 6-byte records
    assert not client.exists(f"{base}:ci:u", f"{base}:ci:c")

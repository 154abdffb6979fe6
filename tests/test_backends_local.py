"""LocalContentIndex: the decision rules, re-crawls, bulk load, and a reference model."""

from __future__ import annotations

import hashlib
import itertools
import threading

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler.backends import make_content_index
from crawler.backends.local import LocalContentIndex, hash64, prefetched, url_hash64
from crawler.content.simindex import content_key, url_key
from crawler.storage import KeyArrays
from crawler.vocab import Match, PageSignature

BASES = [0, 2**64 - 1, 0x0123_4567_89AB_CDEF, 2**63, 0xF0F0_F0F0_0000_FFFF]


def chash(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def page(url: str, content: int, simhash: int | None, canonical: str | None = None):
    return PageSignature(url, canonical if canonical is not None else url, chash(content), simhash)


class Model:
    """The rules of crawler.backends.local written as plainly as possible (lists, full scans)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.rows: list[dict] = []

    def check_and_add(self, p: PageSignature) -> Match | None:
        canonical = p.canonical_url or p.url
        live = [r for r in self.rows if r["alive"]]
        old = next((r for r in live if r["canonical"] == canonical), None)
        others = [r for r in live if r is not old]
        for r in others:
            if r["hash"] == p.content_hash:
                return Match("exact_duplicate", r["url"], r["fp"], 0, r["canonical"], r["names"])
        if p.simhash is not None:
            near = [
                (bin(r["fp"] ^ p.simhash).count("1"), i, r)
                for i, r in enumerate(others)
                if r["fp"] is not None and bin(r["fp"] ^ p.simhash).count("1") <= self.k
            ]
            if near:
                d, _, r = min(near, key=lambda t: (t[0], t[1]))
                return Match("near_duplicate", r["url"], r["fp"], d, r["canonical"], r["names"])
        self.keep(p)
        return None

    def check(self, p: PageSignature) -> Match | None:
        rows = [dict(r) for r in self.rows]
        match = self.check_and_add(p)
        self.rows = rows
        return match

    def keep(self, p: PageSignature) -> None:
        canonical = p.canonical_url or p.url
        for r in self.rows:
            if r["alive"] and r["canonical"] == canonical:
                r["alive"] = False
        self.rows.append({"url": p.url, "canonical": canonical, "hash": p.content_hash,
                          "fp": p.simhash, "names": p.names, "alive": True})

    def replace(self, kept_canonical: str, p: PageSignature) -> None:
        for r in self.rows:
            if r["alive"] and r["canonical"] == kept_canonical:
                r["alive"] = False
        self.keep(p)


@st.composite
def page_sequences(draw: st.DrawFn) -> tuple[int, list[PageSignature]]:
    k = draw(st.integers(0, 6))
    pages = []
    for _ in range(draw(st.integers(1, 40))):
        base = draw(st.sampled_from(BASES))
        bits = draw(st.lists(st.integers(0, 63), max_size=k + 2, unique=True))
        fp = base
        for b in bits:
            fp ^= 1 << b
        url = f"http://h/{draw(st.integers(0, 12))}"
        canonical = draw(st.sampled_from(["", url, "http://h/canon"]))
        simhash = draw(st.one_of(st.just(fp), st.just(fp), st.none()))
        names = draw(st.sampled_from(["", "", "http://h/1"]))
        pages.append(PageSignature(url, canonical, chash(draw(st.integers(0, 15))), simhash,
                                   names))
    swaps = draw(st.lists(st.booleans(), min_size=len(pages), max_size=len(pages)))
    return k, pages, swaps


@settings(max_examples=200, deadline=None)
@given(page_sequences())
def test_decisions_equal_the_reference_model(case):
    """Decisions, and the canonical swap (keep a page instead of its match), as the model."""
    k, pages, swaps = case
    index, model = LocalContentIndex(k), Model(k)
    for p, swap in zip(pages, swaps, strict=True):
        assert index.check(p) == model.check(p)  # the same decision, nothing recorded
        match, expected = index.check_and_add(p), model.check_and_add(p)
        assert match == expected
        if match is not None:
            assert (match.canonical_url, match.names) == (expected.canonical_url, expected.names)
        if match is not None and swap:
            index.replace(match.canonical_url, p)
            model.replace(match.canonical_url, p)
    assert len(index) == sum(r["alive"] for r in model.rows)
    assert len(index) == sum(r["alive"] for r in model.rows)


def test_exact_before_near_and_distance_zero():
    index = LocalContentIndex(3)
    assert index.check_and_add(page("http://a/1", 1, 0b1111)) is None
    assert index.check_and_add(page("http://a/2", 1, 0b0000)) == Match(
        "exact_duplicate", "http://a/1", 0b1111, 0
    )
    assert index.check_and_add(page("http://a/3", 2, 0b0111)) == Match(
        "near_duplicate", "http://a/1", 0b1111, 1
    )
    assert index.check_and_add(page("http://a/4", 3, 0b1111_0000_0000)) is None
    assert len(index) == 2  # duplicates record nothing


def test_nearest_wins_and_ties_go_to_the_earliest():
    index = LocalContentIndex(3)
    index.check_and_add(page("http://a/far", 1, 0b111))
    index.check_and_add(page("http://a/tie1", 2, 0b1 << 20))
    index.check_and_add(page("http://a/tie2", 3, 0b1 << 30))
    assert index.check_and_add(page("http://a/q", 4, 0)).url == "http://a/tie1"
    assert index.check_and_add(page("http://a/q2", 5, 0b11)).url == "http://a/far"


def test_a_recrawl_is_never_its_own_duplicate():
    index = LocalContentIndex(3)
    assert index.check_and_add(page("http://a/p", 1, 0xFF)) is None
    # the same page again, unchanged or slightly changed: kept, replacing the old row
    assert index.check_and_add(page("http://a/p", 1, 0xFF)) is None
    assert index.check_and_add(page("http://a/p?utm_source=x", 2, 0xFE, "http://a/p")) is None
    assert len(index) == 1
    # another page that copies the old version is not matched against it any more
    assert index.check_and_add(page("http://a/other", 1, 0x00FF_0000_0000)) is None
    match = index.check_and_add(page("http://a/mirror", 9, 0xFC))
    assert match == Match("near_duplicate", "http://a/p?utm_source=x", 0xFE, 1)


def test_a_changed_page_that_became_a_duplicate_of_another_is_dropped():
    index = LocalContentIndex(3)
    index.check_and_add(page("http://a/x", 1, 0xAAAA_0000))
    index.check_and_add(page("http://a/y", 2, 0x5555_0000_0000))
    assert index.check_and_add(page("http://a/y", 1, 0x5555_0000_0000)).url == "http://a/x"
    assert len(index) == 2  # the earlier version of /y stays


def test_simhash_none_checks_exact_copies_only():
    index = LocalContentIndex(3)
    index.check_and_add(page("http://a/1", 1, 0))
    assert index.check_and_add(page("http://a/short", 2, None)) is None
    assert index.check_and_add(page("http://a/short2", 2, None)) == Match(
        "exact_duplicate", "http://a/short", None, 0
    )
    assert index.check_and_add(page("http://a/3", 3, 0b1)).url == "http://a/1"


def test_load_then_dedup_against_the_loaded_pages():
    index = LocalContentIndex(3)
    records = [
        ("http://old/1", "", chash(1), 2**64 - 1),
        ("http://old/2", "http://old/2", chash(2), None),
        ("http://old/1b", "http://old/1", chash(3), 2**63),  # newer version of old/1
    ]
    assert index.load(records) == 3
    assert len(index) == 2
    assert index.check_and_add(page("http://new/a", 2, None)).url == "http://old/2"
    assert index.check_and_add(page("http://new/b", 7, 2**63 + 1)) == Match(
        "near_duplicate", "http://old/1b", 2**63, 1
    )
    assert index.check_and_add(page("http://new/c", 8, 2**64 - 2)) is None  # old/1 replaced
    # loading into a non-empty index replaces by canonical URL too
    index.load([("http://new/c", "", chash(8), 5)])
    assert len(index) == 3
    assert index.check_and_add(page("http://new/d", 9, 4)).url == "http://new/c"


def test_load_in_chunks(monkeypatch):
    monkeypatch.setattr("crawler.backends.local.LOAD_CHUNK", 7)
    index = LocalContentIndex(2)
    records = [(f"http://h/{i}", "", chash(i), i * 0x9E3779B97F4A7C15 % 2**64) for i in range(50)]
    records.append(("http://h/0", "", chash(100), 0xFFFF << 40))  # replaces h/0 from chunk one
    assert index.load(iter(records)) == 51
    assert len(index) == 50
    assert index.check_and_add(page("http://q", 200, 0)) is None  # h/0 had 0, replaced
    assert index.check_and_add(page("http://q2", 201, (0xFFFF << 40) | 1)).url == "http://h/0"


def test_non_ascii_urls_round_trip():
    index = LocalContentIndex(3)
    index.check_and_add(page("http://xn--fa-hia.de/caf%C3%A9", 1, 1))
    index.check_and_add(page("http://例え.jp/ü", 2, 0xFFFF << 40))
    assert index.check_and_add(page("http://z", 1, None)).url == "http://xn--fa-hia.de/caf%C3%A9"
    assert index.check_and_add(page("http://z2", 2, None)).url == "http://例え.jp/ü"


def test_from_settings_and_factory():
    index = make_content_index(Settings({"SIMHASH_MAX_DISTANCE": 5, "SIMHASH_BLOCKS": 7}))
    assert isinstance(index, LocalContentIndex)
    assert (index.k, index.blocks) == (5, 7)
    assert LocalContentIndex.from_settings(Settings({}), crawler=None).blocks == 4
    index.close()


def test_hash64_takes_hex_prefix_or_hashes_other_strings():
    assert hash64("ff" * 20) == 2**64 - 1
    assert hash64("not-hex-at-all-but-long") == hash64("not-hex-at-all-but-long")
    assert hash64("short") != hash64("shorT")


def test_nbytes_is_compact():
    index = LocalContentIndex(3)
    n = 20_000
    index.load(
        (f"http://example.com/page/{i}", "", chash(i), i * 0x9E3779B97F4A7C15 % 2**64)
        for i in range(n)
    )
    assert index.nbytes / n < 200  # ~90 bytes of tables + ~30 bytes of URL text


@pytest.mark.parametrize("k", [0, 6])
def test_extreme_k(k):
    index = LocalContentIndex(k)
    index.check_and_add(page("http://a", 1, 0))
    match = index.check_and_add(page("http://b", 2, 0b111111))
    assert (match is None) == (k < 6)


# --- bulk load from key arrays (no strings) ---------------------------------------------------

StoredRow = tuple[str, str, str, "int | None"]  # (url, canonical_url, content_hash, simhash)


def key_chunks(rows: list[StoredRow], sizes: list[int], first_id: int = 1) -> list[KeyArrays]:
    """``rows`` as Store.iter_key_arrays would give them (ids first_id...), cut at ``sizes``."""
    ids = np.arange(first_id, first_id + len(rows), dtype=np.int64)
    has = np.array([r[3] is not None for r in rows], np.bool_)
    fps = np.array([r[3] or 0 for r in rows], np.uint64)
    ck = np.array([content_key(r[2]) for r in rows], np.uint64)
    uk = np.array([url_key(r[1] or r[0]) for r in rows], np.uint64)
    cuts = np.cumsum([0, *sizes, len(rows)]).clip(0, len(rows))
    return [KeyArrays(ids[a:b], fps[a:b], has[a:b], ck[a:b], uk[a:b])
            for a, b in itertools.pairwise(cuts)]


class Resolver:
    """The store's id -> (url, canonical) lookup, counting calls."""

    def __init__(self, rows: list[StoredRow], first_id: int = 1) -> None:
        self.docs = {first_id + i: (r[0], r[1] or r[0]) for i, r in enumerate(rows)}
        self.calls = 0

    def __call__(self, ids):
        self.calls += 1
        return {i: self.docs[i] for i in ids if i in self.docs}


@st.composite
def stored_and_probes(draw: st.DrawFn) -> tuple[int, list[StoredRow], list[int], list]:
    k = draw(st.integers(0, 5))

    def signature(url_pool: int) -> StoredRow:
        base = draw(st.sampled_from(BASES))
        fp = base
        for b in draw(st.lists(st.integers(0, 63), max_size=k + 2, unique=True)):
            fp ^= 1 << b
        url = f"http://h/{draw(st.integers(0, url_pool))}"
        canonical = draw(st.sampled_from(["", url, "http://h/canon", "http://h/1"]))
        return (url, canonical, chash(draw(st.integers(0, 12))),
                draw(st.one_of(st.just(fp), st.none())))

    stored = [signature(20) for _ in range(draw(st.integers(0, 30)))]
    stored = list({r[0]: r for r in stored}.values())  # url is unique in storage
    sizes = draw(st.lists(st.integers(0, 10), max_size=4))
    probes = [PageSignature(*signature(25)) for _ in range(draw(st.integers(1, 25)))]
    return k, stored, sizes, probes


@settings(max_examples=120, deadline=None)
@given(stored_and_probes())
def test_loading_arrays_decides_exactly_as_loading_records(case):
    k, stored, sizes, probes = case
    by_records, by_arrays = LocalContentIndex(k), LocalContentIndex(k)
    assert by_records.load(stored) == by_arrays.load_arrays(key_chunks(stored, sizes),
                                                            Resolver(stored)) == len(stored)
    assert len(by_records) == len(by_arrays)
    for p in probes:
        assert by_arrays.check_and_add(p) == by_records.check_and_add(p)
    assert len(by_records) == len(by_arrays)


def test_load_arrays_in_several_batches_replaces_older_versions(monkeypatch):
    monkeypatch.setattr("crawler.backends.local.ARRAY_BATCH", 8)
    stored: list[StoredRow] = [(f"http://h/{i}", "", chash(i), i * 0x9E3779B97F4A7C15 % 2**64)
                               for i in range(40)]
    stored.append(("http://h/0b", "http://h/0", chash(100), 0xFFFF << 40))  # newer h/0
    index = LocalContentIndex(2)
    assert index.load_arrays(key_chunks(stored, [3] * 13), Resolver(stored)) == 41
    assert len(index) == 40
    assert index.check_and_add(page("http://q", 200, 0)) is None  # h/0 had 0: replaced
    match = index.check_and_add(page("http://q2", 201, (0xFFFF << 40) | 1))
    assert match == Match("near_duplicate", "http://h/0b", 0xFFFF << 40, 1)


def test_loaded_rows_hold_no_url_and_resolve_only_on_a_match():
    stored: list[StoredRow] = [(f"http://old/{i}", "", chash(i), (i * 0x9E3779B97F4A7C15) % 2**64)
                               for i in range(1000)]
    resolver = Resolver(stored)
    index = LocalContentIndex(3)
    index.load_arrays(key_chunks(stored, [256]), resolver)
    assert resolver.calls == 0 and len(index._urls) == 0  # no string kept for a loaded row
    assert index.check_and_add(page("http://new/1", 5000, 0x5555_5555_5555_5555)) is None
    assert resolver.calls == 0  # kept pages never ask
    for _ in range(3):  # the same stored page matched again: asked once, then remembered
        assert index.check_and_add(page("http://mirror", 7, None)).url == "http://old/7"
    assert resolver.calls == 1
    records = LocalContentIndex(3)
    records.load(stored)
    assert index.nbytes < records.nbytes


def test_a_recrawl_replaces_its_loaded_row_by_canonical_url():
    stored: list[StoredRow] = [("http://a/x?utm=1", "http://a/x", chash(1), 0b1111),
                               ("http://a/y", "", chash(2), 0xFFFF << 40)]
    index = LocalContentIndex(3)
    index.load_arrays(key_chunks(stored, []), Resolver(stored))
    # the re-crawl (another spelling, same canonical URL) is not its own duplicate...
    assert index.check_and_add(page("http://a/x", 3, 0b1110, canonical="http://a/x")) is None
    assert len(index) == 2
    # ...and replaced the loaded row: its old content no longer matches, the new one does
    assert index.check_and_add(page("http://b/1", 1, None)) is None
    assert index.check_and_add(page("http://b/2", 3, None)).url == "http://a/x"
    # a re-crawl that became a copy of another stored page is dropped, its row kept
    assert index.check_and_add(page("http://a/y", 1, None)).url == "http://b/1"
    assert index.check_and_add(page("http://c", 2, None)).url == "http://a/y"


def test_a_loaded_row_whose_document_is_gone_is_dropped_not_reported():
    stored: list[StoredRow] = [("http://a/1", "", chash(1), 0b1),
                               ("http://a/2", "", chash(2), 0b11)]
    resolver = Resolver(stored)
    index = LocalContentIndex(3)
    index.load_arrays(key_chunks(stored, []), resolver)
    del resolver.docs[1]  # deleted from storage since the load
    assert index.check_and_add(page("http://n", 9, 0b0)).url == "http://a/2"  # next nearest
    assert index.check_and_add(page("http://m", 1, None)) is None  # a/1 left the index
    assert len(index) == 2  # a/2 and m


def test_load_arrays_refuses_negative_ids():
    chunk = key_chunks([("http://a", "", chash(1), 1)], [], first_id=-5)
    with pytest.raises(ValueError, match="negative"):
        LocalContentIndex(3).load_arrays(chunk, Resolver([]))


def test_content_key_reads_only_plain_hex():
    assert content_key("ff" * 20) == hash64("ff" * 20) == 2**64 - 1
    for odd in ("0x" + "f" * 30, "-" + "f" * 30, "f_f" + "f" * 30, " " + "f" * 30):
        assert content_key(odd) == xxhash.xxh3_64_intdigest(odd.encode())
    assert url_key("http://a/") == url_hash64("http://a/")


def test_prefetched_keeps_order_and_hands_over_errors():
    assert list(prefetched(iter(range(100)), depth=3)) == list(range(100))

    def failing():
        yield 1
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for item in prefetched(failing()):
            got.append(item)
    assert got == [1]


def test_prefetched_consumer_stopping_early_closes_the_source():
    closed = threading.Event()

    def source():
        try:
            yield from range(10**6)
        finally:
            closed.set()

    items = prefetched(source(), depth=2)
    assert [next(items) for _ in range(5)] == [0, 1, 2, 3, 4]
    items.close()  # joins the reader, which closed the source
    assert closed.is_set()


def test_load_arrays_error_while_reading_leaves_no_reader_behind():
    stored: list[StoredRow] = [("http://a", "", chash(1), 1)]

    def chunks():
        yield from key_chunks(stored, [])
        raise RuntimeError("cursor lost")

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="cursor lost"):
        LocalContentIndex(3).load_arrays(chunks(), Resolver(stored))
    assert threading.active_count() == before

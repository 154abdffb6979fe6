"""LocalContentIndex: the decision rules, re-crawls, bulk load, and a reference model."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler.backends import make_content_index
from crawler.backends.local import LocalContentIndex, Match, PageSignature, hash64

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
                return Match("exact_duplicate", r["url"], r["fp"], 0)
        if p.simhash is not None:
            near = [
                (bin(r["fp"] ^ p.simhash).count("1"), i, r)
                for i, r in enumerate(others)
                if r["fp"] is not None and bin(r["fp"] ^ p.simhash).count("1") <= self.k
            ]
            if near:
                d, _, r = min(near, key=lambda t: (t[0], t[1]))
                return Match("near_duplicate", r["url"], r["fp"], d)
        if old is not None:
            old["alive"] = False
        self.rows.append(
            {
                "url": p.url,
                "canonical": canonical,
                "hash": p.content_hash,
                "fp": p.simhash,
                "alive": True,
            }
        )
        return None


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
        pages.append(PageSignature(url, canonical, chash(draw(st.integers(0, 15))), simhash))
    return k, pages


@settings(max_examples=200, deadline=None)
@given(page_sequences())
def test_decisions_equal_the_reference_model(case):
    k, pages = case
    index, model = LocalContentIndex(k), Model(k)
    for p in pages:
        assert index.check_and_add(p) == model.check_and_add(p)
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

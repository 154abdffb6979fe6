"""The two-origin order web (:mod:`crawler.sitegen.orderweb_ab`): deterministic, its duplicate
listing hides distinct notes, and its ground truth agrees with the project's fingerprinting
(mirrors within ``SIMHASH_MAX_DISTANCE`` bits of their original, distinct pages farther)."""

from __future__ import annotations

import itertools
import urllib.request
from collections import defaultdict

import pytest
from selectolax.lexbor import LexborHTMLParser

from crawler import defaults
from crawler.simhash import hamming
from crawler.sitegen.orderweb_ab import NOTES, Member, OrderWeb, order_web, page_signature
from crawler.text import visible_text

K = defaults.SIMHASH_MAX_DISTANCE


@pytest.fixture(scope="module")
def web() -> OrderWeb:
    return order_web(0)


def html_of(web: OrderWeb, member: Member) -> str:
    return web.sites[member[0]].pages[member[1]].body.decode()


def links_to(web: OrderWeb) -> dict[Member, set[Member]]:
    """member -> the pages linking it (same-origin links; cross-origin ones are placeholders)."""
    inbound: dict[Member, set[Member]] = defaultdict(set)
    for origin, site in web.sites.items():
        for path, pg in site.pages.items():
            for node in LexborHTMLParser(pg.body.decode()).css("a[href]"):
                href = node.attributes.get("href") or ""
                if href.startswith("/"):
                    inbound[(origin, href)].add((origin, path))
    return inbound


def test_same_seed_same_web_other_seed_other_text(web: OrderWeb) -> None:
    again = order_web(0)
    for origin in ("a", "b"):
        assert {p: pg.body for p, pg in web.sites[origin].pages.items()} == {
            p: pg.body for p, pg in again.sites[origin].pages.items()}
    assert (web.distinct, web.groups, web.distance) == (again.distinct, again.groups,
                                                        again.distance)
    other = order_web(1)
    assert other.a.pages["/notes-a/1"].body != web.a.pages["/notes-a/1"].body


def test_ground_truth_covers_every_page_once(web: OrderWeb) -> None:
    distinct, grouped = web.distinct_members(), web.grouped()
    assert not distinct & grouped
    assert distinct | grouped == web.members()
    assert sum(map(len, web.groups)) == len(grouped)  # no page in two groups
    assert 130 <= len(web.members()) <= 200
    kinds = [web.kinds[m] for m in grouped]
    for kind, least in (("mirror", 12), ("same-origin mirror", 6), ("byte copy", 4),
                        ("canonical copy", 4)):
        assert kinds.count(kind) >= least, kind


def test_the_two_listings_read_the_same_but_link_other_notes(web: OrderWeb) -> None:
    a, b = html_of(web, ("a", "/notes-a/")), html_of(web, ("a", "/notes-b/"))
    assert visible_text(a) == visible_text(b)
    assert page_signature(a).content_hash == page_signature(b).content_hash
    lines = visible_text(a).splitlines()
    start = lines.index("Note 1")
    assert lines[start:start + NOTES] == [f"Note {n}" for n in range(1, NOTES + 1)]
    assert not set(web.notes["/notes-a/"]) & set(web.notes["/notes-b/"])


def test_every_note_is_reachable_only_through_its_listing(web: OrderWeb) -> None:
    inbound = links_to(web)
    for listing, notes in web.notes.items():
        assert len(notes) == NOTES
        for note in notes:
            assert ("a", note) in web.distinct_members()
            assert inbound[("a", note)] == {("a", listing)}, note
    assert inbound[("a", "/notes-a/")] == inbound[("a", "/notes-b/")] == {("a", "/")}


def test_mirrors_within_k_bits_and_distinct_pages_farther(web: OrderWeb) -> None:
    sig = {m: page_signature(html_of(web, m)) for m in web.members()}
    for group in web.groups:
        hashes = [sig[m].simhash for m in group]
        assert None not in hashes
        for x, y in itertools.combinations(sorted(group), 2):
            assert hamming(sig[x].simhash, sig[y].simhash) <= K, (x, y)
    for member, bits in web.distance.items():
        original = next(m for m in next(g for g in web.groups if member in g)
                        if web.kinds[m] in ("original", "listing") and m != member)
        assert hamming(sig[member].simhash, sig[original].simhash) == bits
        if web.kinds[member] in ("mirror", "same-origin mirror"):
            assert 1 <= bits <= K, member  # near, not the same fingerprint
            assert sig[member].content_hash != sig[original].content_hash
    byte = [m for m in web.grouped() if web.kinds[m] == "byte copy"]
    assert byte and all(sig[m].content_hash in {sig[o].content_hash for o in web.grouped()
                                                if o != m} for m in byte)
    # one representative per group and every distinct page: pairwise more than K bits apart
    reps = sorted(web.distinct_members()) + [min(g) for g in web.groups]
    for x, y in itertools.combinations(reps, 2):
        assert hamming(sig[x].simhash, sig[y].simhash) > K + 3, (x, y)


def test_served_bound_and_expected_store(web: OrderWeb) -> None:
    with web.serve() as servers:
        bases = {o: s.base_url for o, s in servers.items()}
        home = urllib.request.urlopen(bases["a"] + "/", timeout=10).read().decode()
        assert f'href="{bases["b"]}/"' in home
        canon = next(m for m, k in web.kinds.items() if k == "canonical copy")
        body = urllib.request.urlopen(bases["b"] + canon[1], timeout=10).read().decode()
        assert f'rel="canonical" href="{bases["a"]}{web.names[canon][1]}"' in body
    expected = web.expected(bases)
    assert web.distinct_members() <= expected
    for group in web.groups:
        (kept,) = group & expected
        kind = {web.kinds[m] for m in group}
        if "canonical copy" in kind or "mirror" in kind or "same-origin mirror" in kind:
            assert web.kinds[kept] == "original"
        elif "byte copy" in kind:
            assert web.kinds[kept] == "byte copy"  # /c/<slug> is the shorter URL
        else:
            assert kept == ("a", "/notes-a/")

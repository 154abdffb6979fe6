"""TemplateFilter: per-host template learning from kept pages, refresh of stale pages."""

from __future__ import annotations

import pytest

from crawler.content.template import KeptPage, TemplateFilter, block_hash

TEMPLATE = ["Menu home about contact", "Cookie notice for everyone", "Footer links and legal"]


def _keep(f: TemplateFilter, host: str, url: str, blocks: list[str]) -> list[KeptPage]:
    hashes = [block_hash(b) for b in blocks]
    content = f.content(host, blocks, hashes)
    return f.learn(host, KeptPage(url, url, "h" + url, content), hashes)


def test_blocks_on_min_pages_kept_pages_become_template() -> None:
    f = TemplateFilter(min_pages=3)
    assert f.is_young("a.test")
    _keep(f, "a.test", "/1", [*TEMPLATE, "first post"])
    _keep(f, "a.test", "/2", [*TEMPLATE, "second post"])
    blocks = [*TEMPLATE, "third post"]
    assert [b for _, b in f.content("a.test", blocks, [block_hash(b) for b in blocks])] == blocks
    stale = _keep(f, "a.test", "/3", blocks)
    assert not f.is_young("a.test")
    # The three pages were fingerprinted with the template: all three are refreshed.
    assert sorted(p.url for p in stale) == ["/1", "/2", "/3"]
    assert [p.blocks[0][1] for p in stale] == ["first post", "second post", "third post"]
    fourth = [*TEMPLATE, "fourth post"]
    assert f.content("a.test", fourth, [block_hash(b) for b in fourth]) == [
        (block_hash("fourth post"), "fourth post")
    ]


def test_hosts_are_independent_and_case_space_insensitive() -> None:
    f = TemplateFilter(min_pages=2)
    _keep(f, "a.test", "/1", TEMPLATE)
    _keep(f, "a.test", "/2", TEMPLATE)
    blocks = ["MENU  home about contact"]
    assert f.content("a.test", blocks, [block_hash(b) for b in blocks]) == []
    assert len(f.content("b.test", blocks, [block_hash(b) for b in blocks])) == 1


def test_own_blocks_and_bounds() -> None:
    f = TemplateFilter(min_pages=2, recent_pages=2, max_hosts=2, max_blocks=10)
    for i in range(5):
        _keep(f, "a.test", f"/{i}", [f"unique {i} {j}" for j in range(6)])
    assert [p.url for p in f.recent("a.test")] == ["/3", "/4"]
    kept = f.recent("a.test")[-1]
    assert f.own_blocks([(block_hash("unique 4 0"), "unique 4 0"), (1, "new")], kept) == ["new"]
    for host in ("b.test", "c.test"):
        _keep(f, host, "/", TEMPLATE)
    assert f.recent("a.test") == []  # least recently used host forgotten
    with pytest.raises(ValueError, match="min_pages"):
        TemplateFilter(min_pages=1)


def _shared_past_the_bound(f: TemplateFilter, host: str, shared: int) -> None:
    """Kept pages in pairs, each pair sharing blocks no other page holds: ``shared`` blocks
    counted twice (not template at min_pages 3), more than ``max_blocks``."""
    for pair in range(shared // 4):
        blocks = [f"pair {pair} block {j}" for j in range(4)]
        _keep(f, host, f"/p{pair}a", blocks)
        _keep(f, host, f"/p{pair}b", blocks)


def test_a_host_past_max_blocks_still_learns_a_new_template_block() -> None:
    """Once a host's blocks seen twice passed ``max_blocks``, every kept page pruned the counts
    (the blocks seen once), so a block was always pruned on the page it was first seen on and
    nothing new could ever become template on that host."""
    f = TemplateFilter(min_pages=3, max_blocks=40)
    _shared_past_the_bound(f, "a.test", 60)
    assert len(f._hosts["a.test"].counts) > 40
    banner = "A banner added to every page from now on"
    for i in range(3):
        _keep(f, "a.test", f"/new{i}", [banner, f"new post {i}"])
    fresh = [banner, "another post"]
    assert [b for _, b in f.content("a.test", fresh, [block_hash(b) for b in fresh])] == [
        "another post"]


def test_pruning_a_large_host_is_amortized() -> None:
    """The counts are pruned when they pass ``max_blocks`` and then only once they have doubled
    what the last prune left: a few prunes over many pages, not one a page (O(blocks) each:
    67% of a 10^6-page crawl's CPU by 180,000 pages)."""
    f = TemplateFilter(min_pages=3, max_blocks=40)
    _shared_past_the_bound(f, "a.test", 60)
    state = f._hosts["a.test"]
    before = state.prunes
    for i in range(2000):  # pages whose blocks are all new: two singletons each
        _keep(f, "a.test", f"/single{i}", [f"single {i} a", f"single {i} b"])
    # ~56 blocks seen twice survive each prune, so one prune per ~56 new blocks (old: 2,000)
    assert 0 < state.prunes - before <= 2000 * 2 // 50
    assert len(state.counts) <= 2 * max(40, 60)  # still bounded: twice what a prune keeps

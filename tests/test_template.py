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

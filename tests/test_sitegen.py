"""The generated sites: determinism and ground truth that holds on the served pages."""

from __future__ import annotations

import re
import urllib.request
from collections import deque
from urllib.parse import urljoin, urlsplit

import lxml.html
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler import defaults
from crawler.sitegen import (
    demo_site,
    link_heavy_site,
    remove_dot_segments,
    server_key,
    template_site,
)
from crawler.sitegen.demo import TRAP_DEPTH
from crawler.sitegen.server import SiteServer

BASE = "http://localhost:8000"
MIRROR_BLOCKS = re.compile(
    rb'<aside class="advert">.*?</aside>|<p class="dateline">.*?</p>'
    rb'|<div class="sponsor">.*?</div>|<div class="post-meta">.*?</div>'
    rb'|<link rel="canonical" href="[^"]*">'
)


@pytest.fixture(scope="module")
def demo():
    return demo_site()


@pytest.fixture(scope="module")
def tmpl():
    return template_site()


def hrefs(site, path: str) -> list[str]:
    found = site.lookup(path)
    assert found is not None, path
    doc = lxml.html.fromstring(site.render(found[1], BASE))
    return [a.get("href") for a in doc.iter("a") if a.get("href") is not None]


def ideal_crawl(site) -> dict[str, set[str]]:
    """What a perfect polite crawler finds: follow every in-scope link once per page."""
    seen = {site.start_path}
    queue = deque([site.start_path])
    out: dict[str, set[str]] = {"html": set(), "non_html": set(), "broken": set(), "offsite": set()}
    for _ in range(5000):
        if not queue:
            break
        path = queue.popleft()
        found = site.lookup(path)
        if found is None:
            out["broken"].add(path)
            continue
        page = found[1]
        if page.status in (301, 302):
            target = server_key(page.headers["Location"])
            if target not in seen:
                seen.add(target)
                queue.append(target)
            continue
        if not page.content_type.startswith("text/html") or path in site.mislabelled:
            out["non_html"].add(path)
            continue
        out["html"].add(path)
        for href in hrefs(site, path):
            url = urljoin(BASE + path, site.expand(href, BASE))
            parts = urlsplit(url)
            if parts.scheme.lower() not in ("http", "https"):
                continue
            if (parts.hostname, parts.port) != ("localhost", 8000):
                out["offsite"].add(url)
                continue
            key = server_key(parts.path + ("?" + parts.query if parts.query else ""))
            segs = [s for s in key.split("?")[0].split("/") if s]
            if key.startswith("/private/") or any(
                segs.count(s) > defaults.TRAP_MAX_SEGMENT_REPEAT for s in segs
            ):
                continue
            if key not in seen:
                seen.add(key)
                queue.append(key)
    return out


def test_same_seed_same_bytes_other_seed_other_text():
    a, b, c = demo_site(0), demo_site(0), demo_site(1)
    assert list(a.pages) == list(b.pages)
    assert all(a.pages[k].body == b.pages[k].body for k in a.pages)
    assert a.aliases == b.aliases and a.near_duplicates == b.near_duplicates
    assert a.pages["/"].body != c.pages["/"].body
    t1, t2 = template_site(seed=3), template_site(seed=3)
    assert {k: p.body for k, p in t1.pages.items()} == {k: p.body for k, p in t2.pages.items()}
    l1, l2 = link_heavy_site(50, 10, seed=2), link_heavy_site(50, 10, seed=2)
    assert all(l1.pages[k].body == l2.pages[k].body for k in l1.pages)


def test_demo_size_and_kinds(demo):
    assert 150 <= len(demo.canonical_pages) <= 250
    assert len(demo.near_duplicates) >= 20 and len(demo.exact_duplicates) >= 10
    assert len(demo.aliases) >= 25
    assert demo.distinct_pages == (
        demo.canonical_pages - set(demo.near_duplicates) - set(demo.exact_duplicates)
    )
    assert any("?page=2" in p for p in demo.distinct_pages)
    assert demo.mislabelled <= demo.non_html and demo.broken and demo.redirects


def test_ground_truth_is_what_a_perfect_crawler_finds(demo):
    found = ideal_crawl(demo)
    assert found["html"] == demo.canonical_pages
    assert found["non_html"] == demo.non_html
    assert found["broken"] == demo.broken
    assert {u.rstrip("/") for u in found["offsite"]} >= {u.rstrip("/") for u in demo.offsite}


def test_every_page_link_kind_is_present(demo):
    links = {h for p in sorted(demo.canonical_pages) for h in hrefs(demo, p)}
    for scheme in ("mailto:", "tel:", "javascript:"):
        assert any(h.startswith(scheme) for h in links), scheme
    assert "http://example.invalid/" in links and "/private/login" in links
    assert {demo.expand(h, BASE) for h in demo.aliases} <= links
    assert any(
        not h.startswith(("/", "http", "HTTP", "{", "#", "?")) and ":" not in h for h in links
    )  # relative links too


def test_aliases_resolve_to_their_canonical_page(demo):
    for href, path in demo.aliases.items():
        url = urljoin(BASE + "/", demo.expand(href, BASE))
        parts = urlsplit(url)
        assert parts.hostname == "localhost" and parts.port == 8000, href
        assert server_key(parts.path + ("?" + parts.query if parts.query else "")) == path
        assert path in demo.distinct_pages or path in demo.canonical_pages


def test_aliases_served_200_over_http(demo):
    with SiteServer(demo) as server:
        for href, path in sorted(demo.aliases.items()):
            url = urljoin(server.base_url + "/", demo.expand(href, server.base_url))
            with urllib.request.urlopen(url, timeout=10) as resp:
                assert resp.status == 200, href
                served = resp.read()
            assert served == demo.render(demo.lookup(path)[1], server.base_url), href


def test_mirrors_differ_only_in_advert_date_or_canonical_link(demo, tmpl):
    for site in (demo, tmpl):
        for mirror, original in site.near_duplicates.items():
            a, b = site.pages[mirror].body, site.pages[original].body
            assert a != b
            assert MIRROR_BLOCKS.sub(b"", a) == MIRROR_BLOCKS.sub(b"", b), mirror
    partners = [m for m in demo.near_duplicates if m.startswith("/partners/")]
    assert partners  # syndicated copies name their original canonical
    for mirror in partners:
        link = f'<link rel="canonical" href="{demo.near_duplicates[mirror]}">'.encode()
        assert link in demo.pages[mirror].body
        for copy, original in site.exact_duplicates.items():
            assert site.pages[copy].body == site.pages[original].body


def test_trap_is_endless_but_bounded_by_the_guard(demo):
    root = demo.trap_root
    assert root and demo.trap_pages <= demo.canonical_pages
    assert len(demo.trap_pages) == defaults.TRAP_MAX_SEGMENT_REPEAT + 1
    deepest = root + "next/" * TRAP_DEPTH
    assert demo.lookup(deepest) is not None and "next/" in hrefs(demo, deepest)
    assert demo.lookup(deepest + "next/") is None
    bodies = {demo.lookup(root + "next/" * d)[1].body for d in range(5)}
    assert len(bodies) == 5  # each month is its own page


def test_robots_and_redirects(demo):
    robots = demo.pages["/robots.txt"].body.decode()
    assert all(f"Disallow: /{p.split('/')[1]}/" in robots for p in demo.disallowed)
    for path, target in demo.redirects.items():
        page = demo.pages[path]
        assert page.status == 301 and page.headers["Location"] == target
        assert target in demo.canonical_pages


def test_non_html_bodies(demo):
    types = {p: demo.pages[p].content_type for p in demo.non_html}
    assert any(t == "application/pdf" for t in types.values())
    assert any(t == "application/json" for t in types.values())
    for path in demo.mislabelled:
        assert types[path].startswith("text/html") and b"\x00" in demo.pages[path].body


def visible_words(body: bytes) -> list[str]:
    doc = lxml.html.fromstring(body)
    for bad in doc.xpath("//script|//style|//head"):
        bad.drop_tree()
    return " ".join(doc.itertext()).split()


def test_template_site_share_and_main_text(tmpl):
    posts = [p for p in tmpl.main_text if p not in tmpl.near_duplicates]
    assert len(posts) >= 50
    for path in tmpl.main_text:
        body = tmpl.pages[path].body
        main = tmpl.main_text[path].split()
        assert 40 <= len(main) - len(tmpl.main_text[path].split("\n")[0].split()) <= 130
        words = visible_words(body)
        assert 1 - len(main) / len(words) >= 0.90, path
        assert b"<nav" not in body and b"<footer" not in body and b"<aside" not in body
        assert " ".join(main[-5:]) in " ".join(words)
    assert tmpl.distinct_pages == tmpl.canonical_pages - set(tmpl.near_duplicates)
    assert len({tmpl.main_text[p] for p in posts}) == len(posts)


def test_link_heavy_site_links_and_lazy_pages():
    site = link_heavy_site(pages=300, links_per_page=40, seed=1)
    assert len(site.pages) == 301 and len(site.canonical_pages) == 301
    bodies = set()
    for i in range(0, 300, 7):
        path = f"/p/{i}"
        links = hrefs(site, path)
        assert len(links) == 40
        for href in links:
            url = urljoin(BASE + path, site.expand(href, BASE))
            parts = urlsplit(url)
            key = site.canonical_of(parts.path + ("?" + parts.query if parts.query else ""))
            assert key in site.canonical_pages, href
        bodies.add(site.pages[path].body)
    assert len(bodies) == len(range(0, 300, 7))
    assert site.lookup("/p/300") is None and site.lookup("/p/007") is None
    with pytest.raises(ValueError, match="pages"):
        link_heavy_site(pages=0)


@pytest.mark.parametrize(
    ("target", "key"),
    [
        ("/a/./b/../c", "/a/c"),
        ("/%7euser/", "/~user/"),
        ("/x%2fy", "/x%2Fy"),
        ("/p?", "/p"),
        ("/p?b=2&a=1", "/p?a=1&b=2"),
        ("/p?utm_source=x&gclid=1&FBCLID=2&page=2#frag", "/p?page=2"),
        ("", "/"),
    ],
)
def test_server_key_examples(target, key):
    assert server_key(target) == key


@given(st.text(alphabet="/.%7eEa?&=_-#", max_size=30))
def test_server_key_idempotent_never_raises(target):
    key = server_key(target)
    assert key.startswith("/")
    assert server_key(key) == key


@given(st.lists(st.sampled_from(["a", "b", ".", "..", ""]), max_size=8))
def test_remove_dot_segments_leaves_no_dots(segments):
    out = remove_dot_segments("/" + "/".join(segments))
    assert out.startswith("/") and "/./" not in out + "/" and "/../" not in out + "/"

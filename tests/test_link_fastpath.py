"""The cheap miss path of link judging gives exactly what the general path gives.

:func:`crawler.urls.urlnorm.normalize_url` resolves plain path references against a cached
base (``_fast_ref``) and takes absolute plain URLs by ``_FAST`` with or without a base;
:meth:`LinkRules.judge_canonical` remembers the userinfo and scope verdict per origin (emptied
when the scope changes); :meth:`TrapLimits.trap` skips the segment count for short paths. Each
is checked against the general path (``urlnorm._general``, ``TrapLimits.general_trap``, the
scope and userinfo checks asked afresh: :func:`bench.pagepath.judge_general`): by Hypothesis
over generated hrefs and bases, by hand on the edge cases, on every link of the demo site, and
by crawls of the demo site in two orders.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.http import HtmlResponse
from scrapy.utils.response import get_base_url

from bench.pagepath import judge_general
from crawler.urls import urlnorm
from crawler.urls.linkrules import (
    OFFSITE,
    TRAP,
    USERINFO,
    LinkRules,
    TrapLimits,
)
from crawler.urls.scope import Scope
from crawler.urls.urlnorm import InvalidUrl, UrlPolicy, normalize_url
from tests.conftest import run_crawl
from tests.test_urlnorm import PROPERTY, _often, urlish

HOSTS = ["h.localhost:8003", "H.Localhost.:8003", "h.localhost", "www.h.localhost:8003",
         "other.localhost:9", "u:p@h.localhost:8003", "127.0.0.1:80", "[::1]", "a..b"]
SEGMENTS = ["a", "B", "p", "12", ".", "..", "", "x.html", "~u", "a:b", "@", "%2E", "%2e",
            "%41", "%7e", "\u00e9", "a b", "\\", "Q.", ".x", "..."]
PREFIXES = ["", "", "", "/", "/", "./", "../", "//", "//h.localhost:8003/",
            "http://h.localhost:8003/", "HTTP://H.localhost.:80/", "https://h.localhost:443/",
            "http://u@h.localhost:8003/", "http://h.localhost:08003/", "javascript:", "a:",
            " ", "\t/"]
QUERIES = ["", "", "", "?", "?a=1&b=2", "?utm_source=feed", "?b=2&a=1&&", "?x=%20", "?q=a b",
           "?s=1&s=0&sid=9", "?a&b&c&d", "?=&a=", "?p=/x?y", "?q=a "]
FRAGMENTS = ["", "", "#", "#s", "#a b", "#x?y\\z", "#\t", "#s "]
POLICY = UrlPolicy(strip_params=("utm_*", "sid"))


@st.composite
def hrefs(draw: st.DrawFn) -> str:
    """Link targets as pages write them: mostly plain paths (the fast path's), with every
    character that sends them to the general path mixed in."""
    path = "/".join(draw(st.lists(st.sampled_from(SEGMENTS), max_size=5)))
    return (draw(st.sampled_from(PREFIXES)) + path + draw(st.sampled_from(QUERIES))
            + draw(st.sampled_from(FRAGMENTS)))


@st.composite
def plain_bases(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "ftp"]))
    path = "/".join(draw(st.lists(st.sampled_from(SEGMENTS), max_size=4)))
    return (f"{scheme}://{draw(st.sampled_from(HOSTS))}"
            + draw(st.sampled_from(["", "/"])) + path
            + draw(st.sampled_from(QUERIES)) + draw(st.sampled_from(FRAGMENTS)))


BASES = _often(plain_bases(), urlish())
HREFS = st.one_of(hrefs(), hrefs(), st.text(max_size=20))


def general(href: str, base: str | None, policy: UrlPolicy = POLICY) -> str | None:
    """The general path's canonical URL, None where it refuses."""
    try:
        return urlnorm._general(href, base, policy)
    except urlnorm._Refused:
        return None


def fast(href: str, base: str | None, policy: UrlPolicy = POLICY) -> str | None:
    try:
        return normalize_url(href, base, policy)
    except InvalidUrl:
        return None


def crawl_rules(limits: TrapLimits | None = None) -> LinkRules:
    scope = Scope([normalize_url("http://h.localhost:8003/"), normalize_url("http://[::1]/")])
    rules = LinkRules(POLICY, limits or TrapLimits(), scope)
    rules.ignore("h.localhost", "page")  # a learned parameter on the seed host
    return rules


# --- properties --------------------------------------------------------------------------------


@PROPERTY
@given(HREFS, BASES)
def test_property_fast_canonical_is_the_general_one(href: str, base: str) -> None:
    assert fast(href, base) == general(href, base)
    assert fast(href, None) == general(href, None)


@PROPERTY
@given(st.lists(st.tuples(HREFS, BASES), min_size=1, max_size=8),
       st.integers(1, 4), st.integers(1, 5), st.integers(1, 3), st.integers(0, 60))
def test_property_fast_verdict_is_the_general_one(links: list[tuple[str, str]], repeat: int,
                                                 depth: int, params: int, length: int) -> None:
    rules = crawl_rules(TrapLimits(repeat, depth, params, length))
    for href, base in links * 2:  # the second time the origins are remembered
        assert rules.judge(href, base) == judge_general(rules, href, base), (href, base)


@PROPERTY
@given(st.lists(st.sampled_from(["a", "b", "", "..", "%2F"]), max_size=8),
       st.sampled_from(["", "?", "?a", "?a&b", "?a&b&c", "?a&b&c&d", "?/x/x/x"]),
       st.integers(1, 4), st.integers(1, 5), st.integers(1, 3), st.integers(0, 40))
def test_property_trap_fast_check_is_the_general_one(segments: list[str], query: str,
                                                     repeat: int, depth: int, params: int,
                                                     length: int) -> None:
    limits = TrapLimits(repeat, depth, params, length)
    for url in ("http://h/" + "/".join(segments) + query, "http://h" + query, "http:" + query):
        assert limits.trap(url) == limits.general_trap(url), url


# --- edge cases ----------------------------------------------------------------------------------

BASE = "http://h.localhost:8003/p/q/12"


@pytest.mark.parametrize(("href", "base", "canonical"), [
    ("13", BASE, "http://h.localhost:8003/p/q/13"),
    ("../13", BASE, "http://h.localhost:8003/p/13"),
    ("../../../../13", BASE, "http://h.localhost:8003/13"),
    ("./13/.", BASE, "http://h.localhost:8003/p/q/13/"),
    ("..", BASE, "http://h.localhost:8003/p/"),
    ("a/./b/../c", BASE, "http://h.localhost:8003/p/q/a/c"),
    ("/p/.hidden/x..y", BASE, "http://h.localhost:8003/p/.hidden/x..y"),
    ("/a//b/", BASE, "http://h.localhost:8003/a//b/"),
    ("a//b", BASE, "http://h.localhost:8003/p/q/a//b"),
    ("//other.localhost:9/x", BASE, "http://other.localhost:9/x"),
    ("%2E%2E/13", BASE, "http://h.localhost:8003/p/13"),
    ("%7eu/%41", BASE, "http://h.localhost:8003/p/q/~u/A"),
    ("13", "http://h.localhost:8003/a%2e/%7E/x", "http://h.localhost:8003/a./~/13"),
    ("13", "http://h.localhost:8003/%2E%2E/x/", "http://h.localhost:8003/x/13"),
    ("13", "http://h.localhost:8003/%2E/", "http://h.localhost:8003/13"),
    ("13", "HTTP://H.Localhost.:8003", "http://h.localhost:8003/13"),
    ("13", "https://h.localhost:443/a", "https://h.localhost/13"),
    ("/13", "http://h.localhost:80?q#f", "http://h.localhost/13"),
    ("13", "http://u:p@h.localhost/", "http://u:p@h.localhost/13"),
    ("13?b=2&a=1&utm_source=x#s", BASE, "http://h.localhost:8003/p/q/13?a=1&b=2"),
    ("13?sid=9", BASE, "http://h.localhost:8003/p/q/13"),
    ("13?", BASE, "http://h.localhost:8003/p/q/13"),
    ("13#a b\t", BASE, "http://h.localhost:8003/p/q/13"),
    ("a:b/c", BASE, None),  # a scheme, not a path
    ("c/a:b", BASE, "http://h.localhost:8003/p/q/c/a:b"),
    ("HTTP://H.localhost.:0080/X", BASE, "http://h.localhost/X"),
    ("http://h.localhost.:8003/X", BASE, "http://h.localhost:8003/X"),
    ("13", "ftp://h.localhost/", None),
    ("13", "/relative/base", None),
    ("13", "http://a..b/", None),
    ("13", "http:///x", None),
])
def test_edge_cases_agree_with_the_general_path(href: str, base: str,
                                                canonical: str | None) -> None:
    assert fast(href, base) == canonical
    assert general(href, base) == canonical


def test_fast_path_is_taken_for_plain_hrefs_only() -> None:
    plain = ["13", "../p/13", "/p/13", "/p/13#s", "/p/13?utm_source=feed", "a/b:c", "."]
    general_only = ["", "?q", "#f", "//h/x", "a:b", "%41", "a b", "a\\b", "\u00e9", " 13", "13 "]
    assert all(urlnorm._PLAIN_REF.match(href) for href in plain)
    assert not any(urlnorm._PLAIN_REF.match(href) for href in general_only)


def test_learned_parameters_apply_on_the_fast_path() -> None:
    rules = crawl_rules()
    assert rules.judge("13?page=2&b=1", BASE) == ("http://h.localhost:8003/p/q/13?b=1", None)
    rules.ignore("h.localhost", "b")
    assert rules.judge("13?page=2&b=1", BASE) == ("http://h.localhost:8003/p/q/13", None)


def test_out_of_scope_and_userinfo_verdicts() -> None:
    rules = crawl_rules()
    assert rules.judge("http://other.localhost:9/x", BASE)[1] == OFFSITE
    assert rules.judge("http://h.localhost:8004/x", BASE)[1] == OFFSITE  # another port
    assert rules.judge("13", "http://u@h.localhost:8003/")[1] == USERINFO
    assert rules.judge("//u@h.localhost:8003/x", BASE)[1] == USERINFO
    assert rules.judge("13", "http://h.localhost:8003/")[1] is None
    assert rules.judge("/x", "http://[::1]:80/")[1] is None


def test_remembered_origins_are_forgotten_when_a_host_is_adopted() -> None:
    rules = crawl_rules()
    www = "http://www.h.localhost:8003/x"
    assert rules.judge(www)[1] == OFFSITE  # now remembered for the origin
    assert rules.scope is not None
    assert rules.scope.adopt("http://h.localhost:8003/", www)
    assert rules.judge(www)[1] is None


def test_remembered_origins_are_forgotten_when_seeds_arrive() -> None:
    rules = crawl_rules()
    other = "http://other.localhost:9/x"
    assert rules.judge(other)[1] == OFFSITE
    assert rules.scope is not None
    assert rules.scope.add_seeds([other]) == 1
    assert rules.judge(other)[1] is None


def test_remembered_origins_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.urls import linkrules

    monkeypatch.setattr(linkrules, "ORIGINS_SIZE", 3)
    rules = crawl_rules()
    for port in range(10):
        assert rules.judge(f"http://h.localhost:{9000 + port}/")[1] == OFFSITE
        assert len(rules._origins) <= 3


@pytest.mark.parametrize(("path", "limits", "trap"), [
    ("/a/a/a", TrapLimits(max_segment_repeat=3), None),  # at the limit
    ("/a/a/a/a", TrapLimits(max_segment_repeat=3), "segment_repeat"),  # one past it
    ("/a/a/a/", TrapLimits(max_segment_repeat=3), None),  # a trailing slash is no segment
    ("/a/b/c/d", TrapLimits(max_segment_repeat=1, max_path_depth=4), None),
    ("/a/b/c/d/e", TrapLimits(max_segment_repeat=1, max_path_depth=4), "path_depth"),
    ("/a//b", TrapLimits(max_segment_repeat=1, max_path_depth=3), None),
    ("/a//b/c", TrapLimits(max_segment_repeat=1, max_path_depth=3), "path_depth"),
    ("/x?a&b&c", TrapLimits(max_query_params=3), None),
    ("/x?a&b&c&d", TrapLimits(max_query_params=3), "query_params"),
    ("/x?a/b/c/d/e", TrapLimits(max_segment_repeat=1, max_path_depth=2), None),
    ("/" + "x" * 10, TrapLimits(max_length=19), None),  # "http://h" and 11 characters
    ("/" + "x" * 11, TrapLimits(max_length=19), "url_length"),
    ("/" + "x" * 500, TrapLimits(max_length=0), None),
])
def test_traps_at_the_limit_and_one_past_it(path: str, limits: TrapLimits,
                                            trap: str | None) -> None:
    assert limits.trap("http://h" + path) == trap
    assert limits.general_trap("http://h" + path) == trap
    rules = LinkRules(limits=limits)
    assert rules.judge(path, "http://h/")[1] == (None if trap is None else TRAP + trap)


# --- the demo site ------------------------------------------------------------------------------


def demo_links(server: Any) -> list[tuple[str, str]]:
    """``(href, base)`` of every link on every page of the demo site as served."""
    from crawler.spiders.web import html_tree

    links = []
    site = server.site
    for path, page in site.pages.items():
        url = server.base_url + path
        response = HtmlResponse(url, body=site.render(page, server.base_url), encoding="utf-8")
        base = get_base_url(response)
        links += [(href.strip(), base) for href in html_tree(response).hrefs if href]
    return links


def test_every_demo_link_is_judged_as_the_general_path_judges_it(demo_server: Any) -> None:
    links = demo_links(demo_server)
    assert len(links) > 1000
    rules = LinkRules(scope=Scope([normalize_url(demo_server.base_url + "/")]))
    for href, base in links:
        assert rules.judge(href, base) == judge_general(rules, href, base), (href, base)


@pytest.mark.slow
def test_demo_crawl_stores_the_same_canonical_urls_in_two_orders(demo_server: Any,
                                                                  tmp_path: Any) -> None:
    stored = {}
    for concurrency in (32, 4):
        run = run_crawl(tmp_path / str(concurrency), urls=[demo_server.base_url + "/"],
                        settings={"CONCURRENT_REQUESTS": concurrency,
                                  "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency})
        assert run.returncode == 0, run.stderr[-3000:]
        rows = run.rows("SELECT url, canonical_url FROM documents")
        assert len(rows) == 157  # the README's demo figures
        for url, canonical in rows:  # the key the general path gives the URL fetched
            assert general(url, None, urlnorm.DEFAULT_POLICY) == canonical, url
        stored[concurrency] = {canonical for _, canonical in rows}
    assert stored[32] == stored[4]

"""A host written with the root's trailing dot is the same host (issue 23, item 8): one key, one
robots.txt, one download slot, whichever spelling a page links or a seed uses."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from crawler.sitegen.scripted import ScriptedWeb
from crawler.urls.linkrules import fetch_url
from crawler.urls.urlnorm import normalize_url
from tests.conftest import run_crawl
from tests.test_hostile_scope import LocalhostResolver, VirtualHosts

RESOLVER = f"{__name__}.DottedLocalhostResolver"


class DottedLocalhostResolver(LocalhostResolver):
    """Also ``*.localhost.`` -> 127.0.0.1, so a crawl that still fetched the dotted spelling
    would reach the server (and the test see the second robots.txt) instead of failing DNS."""

    def getHostByName(self, name: str, timeout: Any = ()) -> Any:
        if name.endswith(".localhost."):
            return defer.succeed("127.0.0.1")
        return super().getHostByName(name, timeout)


def test_both_spellings_have_one_key_and_are_fetched_without_the_dot() -> None:
    dotted, plain = "http://g.localhost.:8080/x", "http://g.localhost:8080/x"
    assert normalize_url(dotted) == normalize_url(plain) == plain
    assert fetch_url(dotted + "#f", normalize_url(dotted)) == plain
    assert fetch_url("http://user@G.Localhost./x?q=a.", "http://user@g.localhost/x?q=a.") == (
        "http://user@g.localhost/x?q=a.")
    # dots elsewhere are kept as found
    for url in ("http://g.localhost/x.", "http://g.localhost/?u=http://h./", "http://10.0.0.1/"):
        assert fetch_url(url, normalize_url(url)) == url


labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@given(st.lists(labels, min_size=1, max_size=4), st.sampled_from(["", ":80", ":8080"]),
       st.sampled_from(["/", "/a.", "/?q=h./"]))
def test_the_dotted_spelling_is_the_same_key_and_fetch(parts, port, rest) -> None:
    host = ".".join(parts)
    dotted, plain = f"http://{host}.{port}{rest}", f"http://{host}{port}{rest}"
    assert normalize_url(dotted) == normalize_url(plain)
    fetched = fetch_url(dotted, normalize_url(dotted))
    assert normalize_url(fetched) == normalize_url(plain) and f"{host}." not in fetched.split(
        "/")[2]
    assert fetch_url(plain, normalize_url(plain)) == plain  # the plain spelling as found


@pytest.fixture
def hosts(scripted: ScriptedWeb) -> VirtualHosts:
    return VirtualHosts(scripted)


@pytest.mark.slow
def test_a_crawl_linking_both_spellings_asks_robots_and_each_page_once(hosts, tmp_path) -> None:
    """The seed is dotted, its page links ``/next`` under both spellings and itself under the
    other: before, ``g.localhost.`` had its own robots.txt and slot, and both were asked."""
    host = "g.localhost"
    hosts.links[(host, hosts.p)] = [hosts.url(host + ".", "/next"), hosts.url(host, "/next"),
                                    hosts.url(host, "/")]
    hosts.links[(host + ".", hosts.p)] = hosts.links[(host, hosts.p)]
    run = run_crawl(tmp_path / "run", urls=[hosts.url(host + ".")], timeout=120,
                    settings={"TWISTED_DNS_RESOLVER": RESOLVER, "ROBOTSTXT_OBEY": True})
    assert run.returncode == 0, run.stderr[-3000:]
    asked = Counter(hosts.seen)  # besides these, a soft-404 probe asks a random path
    assert {h for h, _, _ in asked} == {host}, asked
    assert [asked[(host, hosts.p, path)] for path in ("/robots.txt", "/", "/next")] == [
        1, 1, 1], asked
    assert run.stored_urls() == {hosts.url(host), hosts.url(host, "/next")}


@pytest.mark.slow
def test_a_redirect_to_the_dotted_spelling_is_followed_without_the_dot(hosts, tmp_path) -> None:
    """A redirect to ``b.t.localhost.``, a host no link names: before, its robots.txt and page
    were asked under the dotted name."""
    seed, other = "a.t.localhost", "b.t.localhost"
    hosts.links[(seed, hosts.p)] = ["/r"]
    hosts.redirects[(seed, hosts.p, "/r")] = hosts.url(other + ".", "/next")
    run = run_crawl(tmp_path / "run", urls=[hosts.url(seed)], timeout=120,
                    settings={"TWISTED_DNS_RESOLVER": RESOLVER, "ROBOTSTXT_OBEY": True,
                              "SCOPE": "domain"})
    assert run.returncode == 0, run.stderr[-3000:]
    asked = Counter((h, path) for h, _, path in hosts.seen)
    assert {h for h, _ in asked} == {seed, other}, asked
    assert [asked[(other, path)] for path in ("/robots.txt", "/next")] == [1, 1], asked
    assert hosts.url(other, "/next") in run.stored_urls()

"""One scope for links and redirects, userinfo links, the private-address guard (issue 15,
items 2 and 7).

The crawls are real ``scrapy crawl web`` subprocesses against virtual hosts on the scripted web
(:mod:`crawler.sitegen.scripted`): two of its sites (listening ports) on 127.0.0.1 answer every
``*.localhost`` name by its ``Host`` header. The system resolver here knows only ``localhost``;
the crawls resolve ``*.localhost`` to 127.0.0.1 as RFC 6761 (6.3) asks and browsers do, through
Scrapy's own resolver setting (``TWISTED_DNS_RESOLVER`` = :class:`LocalhostResolver`), so the
scope middleware's address check and the download ask the same resolver. Nothing leaves
127.0.0.1.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

from crawler.config import SettingError
from crawler.sitegen.scripted import Answer, Request, ScriptedWeb, redirect
from crawler.urls import scope as scope_module
from crawler.urls.scope import (
    Scope,
    ScopeSettings,
    guard_default,
    has_userinfo,
    is_private_address,
    registered_domain,
    site_key,
)
from tests.conftest import CrawlRun, fresh_pg_schema, run_crawl

RESOLVER = f"{__name__}.LocalhostResolver"


class LocalhostResolver(CachingThreadedResolver):
    """Scrapy's default resolver, plus ``*.localhost`` -> 127.0.0.1 (RFC 6761 6.3)."""

    def getHostByName(self, name: str, timeout: Any = ()) -> Any:
        if name.endswith(".localhost"):
            return defer.succeed("127.0.0.1")
        return super().getHostByName(name, timeout)


class VirtualHosts:
    """Two sites of the scripted web (ports P and Q on 127.0.0.1) serving every host by its
    ``Host`` header: ``/`` (a page linking ``/next`` and ``links[(host, port)]``) and ``/next``;
    ``redirects[(host, port, path)]`` answers 301; anything else 404. ``seen`` lists every
    ``(host, port, path)`` asked."""

    def __init__(self, web: ScriptedWeb) -> None:
        self.redirects: dict[tuple[str, int, str], str] = {}
        self.refreshes: dict[tuple[str, int, str], str] = {}  # <meta http-equiv="refresh">
        self.links: dict[tuple[str, int], list[str]] = {}
        self.sites = web.sites[:2]
        self.p, self.q = (site.port for site in self.sites)
        for site in self.sites:
            site.script(self.answer)

    @property
    def seen(self) -> list[tuple[str, int, str]]:
        requests = sorted((r for site in self.sites for r in site.log()), key=lambda r: r.at)
        return [(r.host, r.port, r.target) for r in requests]

    def answer(self, request: Request) -> Answer:
        host, port, path = request.host, request.port, request.target
        location = self.redirects.get((host, port, path))
        if location is not None:
            return redirect(location)
        if path not in ("/", "/next"):
            return Answer(404, b"no such page", "text/plain")
        links = ["/next", *self.links.get((host, port), [])] if path == "/" else []
        anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
        text = f"The page {path} of {host} on port {port}, written for this test alone."
        refresh = self.refreshes.get((host, port, path))
        head = f'<meta http-equiv="refresh" content="0; url={refresh}">' if refresh else ""
        html = f"<html><head>{head}<title>{host}:{port}{path}</title></head><body><p>{text}</p>"
        return Answer(body=(html + anchors + "</body></html>").encode())

    def url(self, host: str, path: str = "/", port: int | None = None) -> str:
        return f"http://{host}:{port or self.p}{path}"

    def asked(self, host: str, port: int | None = None) -> bool:
        return any(h == host and p == (port or self.p) for h, p, _ in self.seen)


@pytest.fixture
def site(scripted: ScriptedWeb) -> VirtualHosts:
    return VirtualHosts(scripted)


def _crawl(workdir: Path, urls: list[str], **settings: Any) -> CrawlRun:
    run = run_crawl(workdir, urls=urls, timeout=120,
                    settings={"TWISTED_DNS_RESOLVER": RESOLVER, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert " ERROR: " not in run.stderr, run.stderr[-3000:]
    return run


# --- the scope matrix: seed host x redirect target x SCOPE, by real crawls --------------------

#: name -> (seed host, redirect target: (host, port "P" or "Q"))
CASES = {
    "apex->www": ("a1.localhost", ("www.a1.localhost", "P")),
    "apex->evil.sub": ("a2.localhost", ("evil.a2.localhost", "P")),
    "apex->other host": ("a3.localhost", ("other3.localhost", "P")),
    "apex->other port": ("a4.localhost", ("a4.localhost", "Q")),
    "www->apex": ("www.w1.localhost", ("w1.localhost", "P")),
    "www->evil.sub": ("www.w2.localhost", ("evil.www.w2.localhost", "P")),
    "www->other host": ("www.w3.localhost", ("other-w3.localhost", "P")),
    "www->other port": ("www.w4.localhost", ("www.w4.localhost", "Q")),
}
FOLLOWED = {
    "host": {"apex->www", "www->apex"},
    "domain": {"apex->www", "apex->evil.sub", "www->apex", "www->evil.sub"},
    "subdomains": {"apex->www", "apex->evil.sub", "www->apex", "www->evil.sub"},
}


def scope_matrix(site: VirtualHosts, run: CrawlRun) -> dict[str, str]:
    """case -> "followed" (the target page and its link stored), "refused" (never asked),
    or what happened otherwise."""
    stored = run.stored_urls()
    result = {}
    for name, (_, (host, which)) in CASES.items():
        port = site.p if which == "P" else site.q
        target = {site.url(host, "/", port), site.url(host, "/next", port)}
        if target <= stored:
            result[name] = "followed"
        elif not site.asked(host, port):
            result[name] = "refused"
        else:
            result[name] = f"fetched, stored {sorted(target & stored)}"
    return result


@pytest.mark.parametrize("rule", ["host", "domain", "subdomains"])
def test_seed_redirects_are_judged_by_the_scope_rule(site, tmp_path, rule) -> None:
    for seed, (host, which) in CASES.values():
        port = site.p if which == "P" else site.q
        site.redirects[(seed, site.p, "/")] = site.url(host, "/", port)
    seeds = [site.url(seed) for seed, _ in CASES.values()]
    run = _crawl(tmp_path / rule, seeds, SCOPE=rule)
    expected = {name: "followed" if name in FOLLOWED[rule] else "refused" for name in CASES}
    assert scope_matrix(site, run) == expected
    refused = len(CASES) - len(FOLLOWED[rule])
    assert run.stats.get("scope/redirect_offsite") == refused
    # host: www.a1 and the apex w1 adopted; domain: both inside already; subdomains: w1 only
    assert run.stats.get("scope/hosts_added", 0) == {"host": 2, "domain": 0, "subdomains": 1}[rule]
    assert run.stderr.count("is now in scope") == run.stats.get("scope/hosts_added", 0)
    assert "Dropped link (scope/redirect_offsite)" in run.stderr  # the first, at INFO
    assert run.stats.get("finish_reason") == "finished"


def test_a_redirect_deeper_than_a_seed_brings_no_host_into_scope(site, tmp_path) -> None:
    site.links[("d.localhost", site.p)] = ["/r"]
    site.redirects[("d.localhost", site.p, "/r")] = site.url("www.d.localhost")
    run = _crawl(tmp_path / "run", [site.url("d.localhost")])
    assert not site.asked("www.d.localhost")
    assert run.stats.get("scope/redirect_offsite") == 1
    assert "scope/hosts_added" not in run.stats


@pytest.mark.redis
@pytest.mark.postgres
def test_the_distributed_profile_adopts_and_refuses_the_same_way(site, tmp_path, redis_url,
                                                                 pg_url) -> None:
    """Shared frontier and leases: the adopted www host's links are followed, and a refused
    redirect (a 3xx, and a meta refresh refused when scheduled) settles its seed's lease: the
    crawl finishes instead of waiting for it."""
    from crawler.backends.redis import clear_namespace, connect

    site.redirects[("a1.localhost", site.p, "/")] = site.url("www.a1.localhost")
    site.redirects[("a3.localhost", site.p, "/")] = site.url("other3.localhost")
    site.refreshes[("m.localhost", site.p, "/")] = site.url("other-m.localhost")
    seeds = [site.url(host) for host in ("a1.localhost", "a3.localhost", "m.localhost")]
    namespace = f"scope-{uuid.uuid4().hex[:8]}"
    env = {"SCRAPY_SETTINGS_MODULE": "settings.distributed", "DEDUP_REDIS_URL": redis_url,
           "DEDUP_NAMESPACE": namespace}  # fmt: skip
    with fresh_pg_schema(pg_url, "scope") as store_url:
        settings = {"STORAGE_URL": store_url, "TWISTED_DNS_RESOLVER": RESOLVER}
        run = run_crawl(tmp_path / "run", urls=seeds, env=env, timeout=120, settings=settings)
        engine = sa.create_engine(store_url)
        with engine.connect() as conn:
            stored = {row[0] for row in conn.execute(sa.text("SELECT url FROM documents"))}
        engine.dispose()
    clear_namespace(connect(redis_url), f"dedup:{namespace}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert stored == {site.url("www.a1.localhost"), site.url("www.a1.localhost", "/next")}
    assert not site.asked("other3.localhost") and not site.asked("other-m.localhost")
    assert run.stats.get("scope/redirect_offsite") == 2
    assert run.stats.get("finish_reason") == "finished"


# --- links: other ports, userinfo ---------------------------------------------------------------


def test_links_to_other_ports_and_with_credentials_are_refused_cleanly(site, tmp_path) -> None:
    host = "l.localhost"
    site.links[(host, site.p)] = [
        f"http://user:pw@{host}:{site.p}/next",  # credentials: refused, counted, no ERROR
        site.url(host, "/", site.q),  # another port of the seed's host: another site
        "/r",
    ]
    site.redirects[(host, site.p, "/r")] = f"http://user@{host}:{site.p}/next"
    run = _crawl(tmp_path / "run", [site.url(host)])
    assert run.stats.get("dedup/links_userinfo") == 1
    assert run.stats.get("dedup/links_offsite") == 1
    assert run.stats.get("scope/redirect_userinfo") == 1
    assert not site.asked(host, site.q)
    assert run.stored_urls() == {site.url(host), site.url(host, "/next")}
    assert [p for h, _, p in site.seen if p == "/next"] == ["/next"]  # fetched once, plainly


def test_a_seed_with_credentials_is_a_one_line_preflight_error(tmp_path) -> None:
    run = run_crawl(tmp_path / "run", urls=["http://user:secret@127.0.0.1:9/"], timeout=60)
    assert run.returncode == 2
    assert "credentials" in run.stderr and "Traceback" not in run.stderr
    assert not run.db_path.exists() or not run.rows("SELECT url FROM documents")


def test_a_bad_scope_setting_is_a_one_line_preflight_error(tmp_path) -> None:
    run = run_crawl(tmp_path / "run", urls=["http://127.0.0.1:9/"], timeout=60,
                    settings={"SCOPE": "planet", "BLOCK_PRIVATE_ADDRESSES": "yes"})
    assert run.returncode == 2
    assert "SCOPE='planet'" in run.stderr and "Traceback" not in run.stderr


# --- the private-address guard ---------------------------------------------------------------


def _guard_site(site: VirtualHosts) -> str:
    """A seed whose page links to a subdomain (in scope for SCOPE=subdomains) and redirects
    to another: both resolve to 127.0.0.1."""
    host = "g.localhost"
    site.links[(host, site.p)] = [site.url("sub.g.localhost", "/next"), "/r"]
    site.redirects[(host, site.p, "/r")] = site.url("sub2.g.localhost")
    return site.url(host)


def test_the_guard_refuses_links_and_redirects_to_private_addresses(site, tmp_path) -> None:
    seed = _guard_site(site)
    run = _crawl(tmp_path / "run", [seed], SCOPE="subdomains", BLOCK_PRIVATE_ADDRESSES=True)
    assert not site.asked("sub.g.localhost") and not site.asked("sub2.g.localhost")
    assert run.stats.get("scope/private_address") == 2
    assert run.stored_urls() == {seed, site.url("g.localhost", "/next")}  # the seed's site: exempt
    assert "private-address guard on (set by BLOCK_PRIVATE_ADDRESSES)" in run.stderr
    assert "Dropped link (scope/private_address)" in run.stderr


def test_the_guard_is_off_by_default_when_a_seed_is_private(site, tmp_path) -> None:
    seed = _guard_site(site)
    run = _crawl(tmp_path / "run", [seed], SCOPE="subdomains")
    assert site.url("sub.g.localhost", "/next") in run.stored_urls()
    assert site.url("sub2.g.localhost") in run.stored_urls()
    assert "scope/private_address" not in run.stats
    assert "private-address guard off (a seed is on a private address" in run.stderr


# --- the library -------------------------------------------------------------------------------


def test_site_keys_count_default_ports_as_one_site() -> None:
    assert site_key("http://example.com/") == site_key("https://example.com/") == (
        "example.com", "")
    assert site_key("https://u:p@example.com:8443/x") == ("example.com", "8443")
    assert site_key("http://[2001:db8::1]:8080/") == ("2001:db8::1", "8080")
    assert has_userinfo("http://u@h/") and not has_userinfo("http://h/?mail=a@b")


@pytest.mark.parametrize(("rule", "url", "inside"), [
    ("host", "https://example.com/a", True),
    ("host", "http://www.example.com/", False),
    ("host", "http://example.com:8080/", False),
    ("subdomains", "http://a.b.example.com/", True),
    ("subdomains", "http://badexample.com/", False),
    ("subdomains", "http://example.com:8080/", False),
    ("domain", "http://shop.example.com/", True),
    ("domain", "http://example.org/", False),
    ("domain", "http://www.seed.co.uk/", True),
    ("domain", "http://other.co.uk/", False),
    ("domain", "http://other.blogspot.com/", False),  # the PSL's private section counts
])
def test_scope_rules(rule, url, inside) -> None:
    seeds = ["http://example.com/", "http://seed.co.uk/", "http://mine.blogspot.com/"]
    assert Scope(seeds, rule).contains(url) is inside


def test_adopt_takes_only_the_www_host_or_apex_of_a_site_in_scope() -> None:
    scope = Scope(["http://example.com/", "http://www.other.org:8080/"])
    memo_cleared: list[int] = []
    scope.listeners.append(lambda: memo_cleared.append(1))
    assert scope.adopt("http://example.com/", "https://www.example.com/")
    assert scope.contains("http://www.example.com/x") and memo_cleared == [1]
    assert scope.adopt("http://www.other.org:8080/", "http://other.org:8080/")
    assert not scope.adopt("http://www.other.org:8080/", "http://other.org/")  # another port
    assert not scope.adopt("http://example.com/", "http://evil.example.com/")
    assert not scope.adopt("http://elsewhere.net/", "http://www.elsewhere.net/")  # not in scope
    assert memo_cleared == [1, 1]


def test_registered_domains_come_from_the_bundled_list_without_network(
    monkeypatch, tmp_path
) -> None:
    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network use: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    scope_module._extractor.cache_clear()
    registered_domain.cache_clear()
    assert registered_domain("a.b.example.co.uk") == "example.co.uk"
    assert registered_domain("x.blogspot.com") == "x.blogspot.com"
    assert registered_domain("www.site.localhost") == "site.localhost"
    assert registered_domain("10.0.0.1") == "10.0.0.1"
    assert list(tmp_path.iterdir()) == []  # no cache written


@pytest.mark.parametrize(("address", "private"), [
    ("127.0.0.1", True), ("10.1.2.3", True), ("172.16.0.1", True), ("192.168.1.1", True),
    ("169.254.169.254", True), ("0.0.0.0", True), ("100.64.0.1", True), ("::1", True),
    ("fe80::1", True), ("fd00::1", True), ("::ffff:127.0.0.1", True), ("224.0.0.1", True),
    ("93.184.216.34", False), ("2606:4700::1111", False),
])
def test_private_addresses(address, private) -> None:
    assert is_private_address(address) is private


def test_guard_setting_and_default() -> None:
    assert ScopeSettings.from_settings({}).block_private is None
    assert ScopeSettings.from_settings({"BLOCK_PRIVATE_ADDRESSES": "auto"}).block_private is None
    assert ScopeSettings.from_settings({"BLOCK_PRIVATE_ADDRESSES": "false"}).block_private is False
    assert ScopeSettings.from_settings({"BLOCK_PRIVATE_ADDRESSES": True}).block_private is True
    with pytest.raises(SettingError, match="BLOCK_PRIVATE_ADDRESSES"):
        ScopeSettings.from_settings({"BLOCK_PRIVATE_ADDRESSES": "sometimes"})
    assert guard_default(["93.184.216.34", "2606:4700::1111"]) is True
    assert guard_default(["93.184.216.34", "10.0.0.7"]) is False


@pytest.mark.parametrize(("name", "hint"), [("SCOPES", "SCOPE"),
                                            ("BLOCK_PRIVATE_ADDRESS", "BLOCK_PRIVATE_ADDRESSES")])
def test_misspelled_scope_settings_are_refused(name, hint) -> None:
    from scrapy.settings import Settings

    from crawler.commands.preflight import check_settings

    with pytest.raises(SettingError, match=f"did you mean {hint}\\?"):
        check_settings(Settings({name: "domain"}))

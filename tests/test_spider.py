"""The ``web`` spider end to end: real crawls in a subprocess against sites on 127.0.0.1."""

from __future__ import annotations

import pytest

from crawler.sitegen import Page, Site, demo_site, link_heavy_site
from crawler.siteserver import SiteServer
from crawler.urlnorm import normalize_url
from tests.conftest import run_crawl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One crawl of the demo site with the project's settings; shared by the module."""
    site = demo_site()
    with SiteServer(site) as server:
        run = run_crawl(tmp_path_factory.mktemp("demo"), urls=[server.url("/")])
        hits = server.canonical_hits()
        raw_hits = dict(server.hits)
        base = server.base_url
    return site, run, hits, raw_hits, base


def test_demo_crawl_finishes_cleanly(demo_run):
    _, run, _, _, _ = demo_run
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    assert "Traceback" not in run.stderr
    assert run.stats.get("log_count/ERROR", 0) == 0, run.stderr[-3000:]


def test_every_page_fetched_once_however_its_links_are_spelled(demo_run):
    site, run, hits, _, _ = demo_run
    fetched = {path for path in hits if path in site.canonical_pages}
    assert fetched == site.canonical_pages - site.disallowed
    repeated = {path: n for path, n in hits.items() if n > 1 and path != "/robots.txt"}
    assert repeated == {}
    assert run.stats["dupefilter/filtered"] + run.stats.get("dedup/links_skipped_seen", 0) > 0


def test_seed_linked_from_its_own_page_is_fetched_once(demo_run):
    _, _, hits, raw_hits, _ = demo_run
    assert hits["/"] == 1
    assert raw_hits.get("/") == 1


def test_stored_documents_are_the_distinct_pages(demo_run):
    site, run, _, _, base = demo_run
    stored = {row[0] for row in run.rows("SELECT canonical_url FROM documents")}
    # One kept page per duplicate group; every other distinct page kept as itself.
    grouped = set().union(*site.duplicate_groups().values())
    # A binary body served as HTML is stored (without text), never fingerprinted.
    singles = {
        normalize_url(base + path) for path in (site.distinct_pages | site.mislabelled) - grouped
    }
    assert singles <= stored
    for members in site.duplicate_groups().values():
        kept = stored & {normalize_url(base + path) for path in members}
        assert len(kept) == 1, members
    assert len(stored) == len(singles) + len(site.duplicate_groups())
    for path in (site.non_html - site.mislabelled) | site.broken:
        assert normalize_url(base + path) not in stored


def test_offsite_and_non_http_links_are_not_followed(demo_run):
    site, run, _, raw_hits, _ = demo_run
    assert site.offsite, "the demo site must link off-site"
    stored = run.stored_urls()
    assert all(url.startswith("http://localhost:") for url in stored)
    assert run.stats.get("dedup/links_not_http", 0) > 0
    assert not any(target.startswith(("mailto", "javascript")) for target in raw_hits)


def _two_host_site(other_port: int) -> Site:
    body = (
        "<html><head><title>Home</title></head><body><p>Start page of the scope test.</p>"
        f'<a href="http://127.0.0.1:{other_port}/elsewhere">same machine, other host</a>'
        '<a href="/inside">inside</a></body></html>'
    )
    inside = "<html><head><title>Inside</title></head><body><p>Inside the scope.</p></body></html>"
    return Site(
        name="scope",
        pages={
            "/": Page(body.encode()),
            "/inside": Page(inside.encode()),
            "/robots.txt": Page(b"User-agent: *\nDisallow:\n", "text/plain"),
        },
    )


def test_crawl_stays_within_the_seed_hosts(tmp_path):
    outside = Site(name="outside", pages={"/elsewhere": Page(b"<html><body>x</body></html>")})
    with SiteServer(outside, host="127.0.0.1") as other:
        with SiteServer(_two_host_site(other.port)) as server:
            seeds = tmp_path / "seeds.txt"
            seeds.write_text(f"# scope test\n\n{server.url('/')}\n")
            run = run_crawl(tmp_path / "run", seeds=seeds)
        other_hits = sum(other.hits.values())
    assert run.returncode == 0, run.stderr[-3000:]
    assert other_hits == 0
    assert run.stored_urls() == {server.url("/"), server.url("/inside")}


def test_early_skip_changes_nothing_but_the_work_done(tmp_path):
    site = link_heavy_site(pages=300, links_per_page=40)
    results = {}
    for skip in (False, True):
        with SiteServer(site) as server:
            run = run_crawl(
                tmp_path / f"skip-{skip}",
                urls=[server.url("/")],
                settings={"DEDUP_EARLY_SKIP": skip, "ROBOTSTXT_OBEY": False},
            )
            assert run.returncode == 0, run.stderr[-3000:]
            results[skip] = (run, dict(server.canonical_hits()))
    (off, off_hits), (on, on_hits) = results[False], results[True]
    assert set(on_hits) == set(off_hits)
    assert max(on_hits.values()) == 1
    paths = lambda run: {u.split("/", 3)[3] for u in run.stored_urls()}  # noqa: E731
    assert paths(on) == paths(off)
    assert off.stats.get("dedup/links_skipped_seen", 0) == 0
    assert on.stats["dedup/links_skipped_seen"] > 0
    # Every extracted link that was not fetched is accounted for, with or without the skip.
    assert off.stats["dedup/links_extracted"] == on.stats["dedup/links_extracted"]
    assert off.stats["dupefilter/filtered"] == (
        on.stats["dupefilter/filtered"] + on.stats["dedup/links_skipped_seen"]
    )


def test_fetch_url_keeps_the_link_as_found_but_gives_it_the_policy_host():
    from crawler.spiders.web import fetch_url

    assert fetch_url("http://Example.com/a?utm_source=x#f", "http://example.com/a") == (
        "http://Example.com/a?utm_source=x"
    )
    assert fetch_url("http://faß.de/straße?q=1#x", "http://xn--fa-hia.de/stra%C3%9Fe?q=1") == (
        "http://xn--fa-hia.de/straße?q=1"
    )


def test_stored_canonical_url_is_the_key_of_the_fetched_url_even_after_redirects(demo_run):
    site, run, _, _, base = demo_run
    assert site.redirects, "the demo site must redirect somewhere"
    rows = run.rows("SELECT url, canonical_url FROM documents")
    assert rows
    for url, canonical in rows:
        assert canonical == normalize_url(url), url
    stored = {url for url, _ in rows}
    for target in site.redirects.values():
        if target in site.distinct_pages:
            assert normalize_url(base + target) in {normalize_url(u) for u in stored}

"""Duplicate URLs end to end: one page linked in ten spellings is fetched once."""

from __future__ import annotations

import pytest

from crawler.sitegen import Page, Site
from crawler.sitegen.server import SiteServer
from tests.conftest import run_crawl

pytestmark = pytest.mark.slow

TEN_SPELLINGS = [
    "/docs/target?b=2&a=1",  # the first one the crawler meets
    "/docs/target?a=1&b=2",  # reordered query
    "/docs/target?b=2&a=1#section",  # fragment
    "/docs/target?utm_source=news&b=2&a=1",  # tracking parameter
    "/docs/target?a=1&gclid=xyz&b=2&fbclid=1",  # two trackers
    "http://LOCALHOST:{port}/docs/target?a=1&b=2",  # upper-case host
    "http://localhost:0{port}/docs/target?a=1&b=2",  # port with a leading zero
    "/docs/./old/../target?a=1&b=2",  # dot segments
    "/docs/%74arget?a=1&b=2",  # escaped unreserved character
    "HTTP://localhost:{port}/docs/target?b=2&a=1#!/route",  # scheme case, hash-bang
]
DISTINCT_QUERIES = ["/list?page=1", "/list?page=2", "/list?page=3", "/list?page=2&sort=new"]


def _html(title: str, links: list[str]) -> bytes:
    anchors = "".join(f'<p><a href="{h}">{title} link {i}</a></p>' for i, h in enumerate(links))
    body = f"<p>The page called {title} has its own words about {title.lower()} and more.</p>"
    return f"<html><head><title>{title}</title></head><body>{body}{anchors}</body></html>".encode()


def _site() -> Site:
    pages = {
        "/": Page(_html("Home", [*TEN_SPELLINGS, *DISTINCT_QUERIES, "/"])),
        "/docs/target?a=1&b=2": Page(_html("Target", ["/", TEN_SPELLINGS[3]])),
        "/robots.txt": Page(b"User-agent: *\nDisallow:\n", "text/plain"),
    }
    for i, target in enumerate(DISTINCT_QUERIES):
        key = "/list?" + "&".join(sorted(target.split("?", 1)[1].split("&")))
        pages[key] = Page(_html(f"Listing {i}", ["/"]))
    return Site(name="spellings", pages=pages)


@pytest.mark.parametrize("early_skip", [False, True])
def test_ten_spellings_fetched_once_and_the_rest_counted(tmp_path, early_skip):
    with SiteServer(_site()) as server:
        run = run_crawl(
            tmp_path / "run", urls=[server.url("/")], settings={"DEDUP_EARLY_SKIP": early_skip}
        )
        hits = dict(server.canonical_hits())
    assert run.returncode == 0, run.stderr[-3000:]
    assert hits["/docs/target?a=1&b=2"] == 1
    assert hits["/"] == 1  # the seed, linked from itself and from the target
    for target in DISTINCT_QUERIES:  # distinct query values are distinct pages: all fetched
        key = "/list?" + "&".join(sorted(target.split("?", 1)[1].split("&")))
        assert hits[key] == 1, target
    # Home links: 10 spellings + 4 listings + itself; target: home + 1 spelling; each listing:
    # home. New: target + 4 listings; everything else was seen and must be counted as such.
    extracted = 10 + 4 + 1 + 2 + 4
    not_fetched = run.stats.get("dupefilter/filtered", 0) + run.stats.get(
        "dedup/links_skipped_seen", 0
    )
    assert run.stats["dedup/links_extracted"] == extracted
    assert not_fetched == extracted - 5
    if not early_skip:
        assert run.stats["dupefilter/filtered"] == extracted - 5
    stored = run.rows("SELECT canonical_url FROM documents WHERE canonical_url LIKE '%target%'")
    assert stored == [(f"http://localhost:{server.port}/docs/target?a=1&b=2",)]

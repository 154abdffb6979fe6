"""The ``web`` spider end to end: real crawls in a subprocess against sites on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.sitegen import Page, Site, demo_site, link_heavy_site
from crawler.sitegen.server import SiteServer
from crawler.urls.urlnorm import InvalidUrl, normalize_url
from tests.conftest import CrawlRun, run_crawl

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


def crawl_with_and_without_skip(
    site: Site, tmp_path, settings: dict
) -> dict[bool, tuple[CrawlRun, SiteServer]]:
    """Crawl ``site`` with DEDUP_EARLY_SKIP off then on, each from a fresh server.

    The servers are stopped when returned; their ``hits`` and ``base_url`` stay readable.
    """
    results = {}
    for skip in (False, True):
        with SiteServer(site) as server:
            run = run_crawl(
                tmp_path / f"skip-{skip}",
                urls=[server.url("/")],
                settings={**settings, "DEDUP_EARLY_SKIP": skip},
            )
        assert run.returncode == 0, run.stderr[-3000:]
        results[skip] = (run, server)
    return results


def test_early_skip_changes_nothing_but_the_work_done(tmp_path):
    site = link_heavy_site(pages=300, links_per_page=40)
    results = crawl_with_and_without_skip(site, tmp_path, {"ROBOTSTXT_OBEY": False})
    (off, off_server), (on, on_server) = results[False], results[True]
    off_hits, on_hits = dict(off_server.canonical_hits()), dict(on_server.canonical_hits())
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
    from crawler.urls.linkrules import fetch_url

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


# --- the link memo: a verdict is kept under exactly the part of the base URL it reads ---------

_HREF_ALPHABET = st.sampled_from(
    ["a", "b", "/", "//", ".", "..", "?", "#", ":", "%2e", "%", "\\", " ", "\t", "\x01", "ü",
     "=", "&", "http:", "https://", "HTTP://", "h", "x.y", "@", "[", "]", "8"]
)  # fmt: skip
_hrefs = st.lists(_HREF_ALPHABET, max_size=8).map("".join)
_segments = st.lists(st.sampled_from(["a", "b", ".", "..", "c%2F", "d;p", ""]), max_size=4)
_bases = st.builds(
    lambda scheme, host, segs, last, query: f"{scheme}://{host}/" + "/".join([*segs, last]) + query,
    st.sampled_from(["http", "https", "HTTP", "ftp"]),
    st.sampled_from(["h", "H", "h:8080", "u@h", "[::1]", "x.y", ""]),
    _segments,
    st.sampled_from(["", "page", "p.html", "..", "."]),
    st.sampled_from(["", "?q=1", "?", "#f", "?a#b"]),
)


def _outcome(href: str, base: str) -> str:
    try:
        return normalize_url(href, base=base)
    except InvalidUrl as exc:
        return f"invalid: {exc}"


@given(href=_hrefs, base1=_bases, base2=_bases)
@settings(max_examples=400, deadline=None)
def test_link_memo_key_covers_what_normalize_url_reads(href, base1, base2):
    from crawler.urls.linkrules import LinkMemo
    from crawler.urls.linkrules import memo_table as _table_for

    memo = LinkMemo()
    href = href.strip()
    t1 = _table_for(href, *memo.tables(base1))
    t2 = _table_for(href, *memo.tables(base2))
    if t1 is not None and t1 is t2:  # one memo entry would serve both pages
        assert _outcome(href, base1) == _outcome(href, base2)


def test_link_memo_does_not_memoize_what_reads_the_whole_base():
    from crawler.urls.linkrules import LinkMemo
    from crawler.urls.linkrules import memo_table as _table_for

    memo = LinkMemo()
    tables = memo.tables("http://h/d/page?q=1")
    for href in ("?x", "#f", "", "\x01?x"):
        assert _table_for(href, *tables) is None, href
    assert memo.tables("http://h/d/pa ge")[1:] == (None, None)  # normalize_url would clean it
    assert memo.tables("http://h/d/p\\q")[1:] == (None, None)
    assert memo.tables("http://h/d/é")[1:] == (None, None)


def test_link_memo_is_bounded():
    from crawler.urls.linkrules import LinkMemo

    memo = LinkMemo(size=10)
    absolute = memo.tables("http://h/d/")[0]
    for i in range(25):
        memo.remember(absolute, f"http://h/{i}", b"x")
        assert memo._count <= 10
    assert len(memo.tables("http://h/d/")[0]) < 10


_TRICKY_LINKS = [
    "/a", "/a#f", "/./a", "a", "./a", "../a", "../../a", "?q=2", "#top", "", " /a ", "//h/x",
    "\\a", "\\\\h\\y", "http://h/a", "HTTP://H/a", "http:a", "https://h:443/a", "http://other/a",
    "mailto:x@h", "javascript:void(0)", "ftp://h/a", "http://[bad/", "ü/x", "%2e%2e/a",
    "a?utm_source=x",
]  # fmt: skip


def _page(url: str, links: list[str], base_href: str | None = None) -> bytes:
    from html import escape

    base = f'<base href="{escape(base_href)}">' if base_href else ""
    anchors = "".join(f'<a href="{escape(h, quote=True)}">l</a>' for h in links)
    return f"<html><head>{base}<title>t</title></head><body>{anchors}</body></html>".encode()


def test_links_are_exactly_what_normalizing_each_one_gives():
    """The memo changes nothing: every page's requests equal a plain normalize_url per link."""
    from urllib.parse import urljoin

    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.response import get_base_url
    from scrapy.utils.test import get_crawler

    from crawler.spiders.web import WebSpider, html_tree
    from crawler.urls.fingerprint import fingerprint_url
    from crawler.urls.linkrules import fetch_url
    from crawler.urls.linkrules import memo_table as _table_for

    crawler = get_crawler(WebSpider, {"DEDUP_EARLY_SKIP": False})
    spider = WebSpider.from_crawler(crawler, urls="http://h/")
    crawler.spider = spider
    crawler.stats.open_spider()
    pages = [
        ("http://h/d/p1", None), ("http://h/d/p2?x=1", None), ("http://h/e/f/p3", None),
        ("http://h", None), ("http://h/d/p4", "http://h/z/"), ("http://h/d/p5", "/y/q?r"),
        ("http://h/d/p1", None),
    ]  # fmt: skip
    for url, base_href in pages:
        body = _page(url, _TRICKY_LINKS, base_href)
        response = HtmlResponse(url, body=body, encoding="utf-8", request=Request(url))
        links = spider._links(response, html_tree(response))
        got = [(r.url, r.meta["canonical_url"]) for r in links]
        base = get_base_url(response)
        tables = spider.link_memo.tables(base)
        for href in filter(None, (h.strip() for h in _TRICKY_LINKS)):
            table = _table_for(href, *tables)  # what a later page with this base would reuse
            if table is not None and href in table:
                canonical, stat = spider.rules.judge(href, base)
                assert table[href] == (stat or fingerprint_url(canonical)), (url, href)
        want = []
        for href in filter(None, _TRICKY_LINKS):
            href = href.strip()
            if href[:11].lower().startswith(("mailto:", "javascript:", "ftp:")):
                continue
            try:
                canonical = normalize_url(href, base=base)
            except InvalidUrl:
                continue
            if canonical.split("/")[2].split(":")[0] == "h":
                fetched = Request(fetch_url(urljoin(base, href), canonical)).url
                want.append((fetched, canonical))
        assert got == want, url


def test_early_skip_asks_about_the_links_of_a_page_in_one_batch():
    """One question per page (one Redis round trip in the distributed profile), each
    fingerprint once; only the links not seen become requests, in page order, and the counts
    are those of a link-by-link check."""
    from types import SimpleNamespace

    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from crawler.backends.bloom import LocalSeenSet
    from crawler.dupefilter import BloomDupeFilter
    from crawler.spiders.web import WebSpider, html_tree
    from crawler.urls.fingerprint import fingerprint_url

    crawler = get_crawler(WebSpider)
    spider = WebSpider.from_crawler(crawler, urls="http://h/")
    crawler.spider = spider
    crawler.stats.open_spider()
    asked: list[list[bytes]] = []

    class Dupefilter(BloomDupeFilter):  # the real one, counting the questions
        def seen_fingerprints(self, fps):
            asked.append(list(fps))
            return super().seen_fingerprints(fps)

    dupefilter = Dupefilter(LocalSeenSet(capacity=1000))
    dupefilter.seen.add(fingerprint_url("http://h/seen"))
    crawler.engine = SimpleNamespace(scheduler=SimpleNamespace(df=dupefilter))
    hrefs = ["/seen", "/a", "/b#x", "/a", "seen", "mailto:x@h", "http://other/", "/b"]
    url = "http://h/"
    response = HtmlResponse(url, body=_page(url, hrefs), encoding="utf-8", request=Request(url))
    got = [r.meta["canonical_url"] for r in spider._links(response, html_tree(response))]
    assert got == ["http://h/a", "http://h/b"]
    assert len(asked) == 1 and len(asked[0]) == 3  # /seen, /a, /b: each once
    assert crawler.stats.get_value("dedup/links_extracted") == 6
    assert crawler.stats.get_value("dedup/links_skipped_seen") == 4


def test_a_link_another_page_is_still_requesting_is_skipped_unless_that_page_is_deeper():
    """Scrapy consumes several pages' requests at once: a link whose request another page has
    yielded but the scheduler has not seen yet is skipped too, unless that page is deeper
    (DEPTH_LIMIT may drop its request); once that page's requests are consumed, it is up to
    the dupefilter again."""
    from types import SimpleNamespace

    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from crawler.backends.bloom import LocalSeenSet
    from crawler.dupefilter import BloomDupeFilter
    from crawler.spiders.web import WebSpider, html_tree

    crawler = get_crawler(WebSpider)
    spider = WebSpider.from_crawler(crawler, urls="http://h/")
    crawler.spider = spider
    crawler.stats.open_spider()
    nothing_seen = BloomDupeFilter(LocalSeenSet(capacity=1000))
    crawler.engine = SimpleNamespace(scheduler=SimpleNamespace(df=nothing_seen))

    def links(url: str, hrefs: list[str], depth: int):
        request = Request(url, meta={"depth": depth})
        response = HtmlResponse(url, body=_page(url, hrefs), encoding="utf-8", request=request)
        return spider._links(response, html_tree(response))

    first = links("http://h/1", ["/a", "/b"], depth=2)
    assert next(first).url == "http://h/a"  # its requests are being consumed
    assert [r.url for r in links("http://h/2", ["/a", "/c"], depth=2)] == ["http://h/c"]
    assert [r.url for r in links("http://h/3", ["/b"], depth=1)] == ["http://h/b"]
    assert [r.url for r in first] == ["http://h/b"]
    assert spider._requesting == {}
    assert [r.url for r in links("http://h/2", ["/a", "/c"], depth=2)] == [
        "http://h/a", "http://h/c"]  # fmt: skip


def test_links_asked_about_on_the_loop_count_as_requested_while_redis_answers():
    """With a shared seen set the page's question is awaited (the reactor serves other pages
    meanwhile): while it is on its way, the links it asked about count as being requested by
    that page, so a page as deep or deeper arriving in the round trip skips them and a
    shallower one does not (as for a page whose requests are being consumed); once the
    answers are in, the page follows the links not seen, and nothing stays claimed."""
    import asyncio
    from types import SimpleNamespace

    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from crawler.backends.bloom import LocalSeenSet
    from crawler.dupefilter import BloomDupeFilter
    from crawler.spiders.web import WebSpider, html_tree
    from crawler.urls.fingerprint import fingerprint_url

    crawler = get_crawler(WebSpider)
    spider = WebSpider.from_crawler(crawler, urls="http://h/")
    crawler.spider = spider
    crawler.stats.open_spider()

    class Dupefilter(BloomDupeFilter):  # the real one, its Redis question held until released
        release: asyncio.Event

        def seen_fingerprints_soon(self, fps):
            async def answer():
                await self.release.wait()
                return self.seen_fingerprints(fps)

            return answer()

    dupefilter = Dupefilter(LocalSeenSet(capacity=1000))
    dupefilter.seen.add(fingerprint_url("http://h/seen"))
    crawler.engine = SimpleNamespace(scheduler=SimpleNamespace(df=dupefilter))

    def response(url: str, hrefs: list[str], depth: int) -> HtmlResponse:
        request = Request(url, meta={"depth": depth})
        return HtmlResponse(url, body=_page(url, hrefs), encoding="utf-8", request=request)

    def links(url: str, hrefs: list[str], depth: int) -> list[str]:
        page = response(url, hrefs, depth)
        return [r.url for r in spider._links(page, html_tree(page))]  # asked inline

    async def run() -> tuple[list[str], ...]:
        dupefilter.release = asyncio.Event()
        first = response("http://h/1", ["/a", "/seen", "/b"], depth=2)
        page, answers = spider._page_links(first, html_tree(first), awaited=True)
        assert answers is not None  # a question: awaited
        asked = asyncio.ensure_future(answers)
        await asyncio.sleep(0)  # on its way
        same = links("http://h/2", ["/a", "/c"], depth=2)
        deeper = links("http://h/3", ["/b", "/seen"], depth=3)
        shallower = links("http://h/4", ["/a"], depth=1)
        dupefilter.release.set()
        page.new = await asked
        followed = [r.url for r in spider._follow(first, page)]
        return same, deeper, shallower, followed

    same, deeper, shallower, followed = asyncio.run(run())
    assert same == ["http://h/c"] and deeper == [] and shallower == ["http://h/a"]
    assert followed == ["http://h/a", "http://h/b"]
    assert spider._requesting == {}
    assert links("http://h/2", ["/a", "/c"], depth=2) == ["http://h/a", "http://h/c"]


def _failing_site() -> Site:
    """``/fail`` always answers 500 and is linked from every page, spelled several ways."""

    def html(title: str, links: list[str]) -> Page:
        anchors = "".join(f'<a href="{h}">{h}</a>' for h in links)
        return Page(f"<html><head><title>{title}</title></head><body><p>{title} has text of its "
                    f"own.</p>{anchors}</body></html>".encode())  # fmt: skip

    return Site(
        name="failing",
        pages={
            "/": html("Home", ["/fail", "/a", "/gone"]),
            "/a": html("Page A", ["/fail#x", "{base}/./fail", "/b", "/gone", "/a"]),
            "/b": html("Page B", ["fail", "/FAIL", "/new", "/fail?utm_source=feed"]),
            "/new": html("Page New", ["/fail", "/"]),
            "/fail": Page(b"<html><body>server error</body></html>", status=500),
            "/FAIL": html("Upper-case path is another page", []),
            "/gone": Page(b"<html><body>not here</body></html>", status=404),
        },
    )


def test_a_link_to_a_failed_page_follows_the_failure_policy(tmp_path):
    """A 500 is retried RETRY_TIMES times, then recorded as failed, not stored; later links to
    it are filtered as stock Scrapy's dupefilter would (seen, early skip or not); a page linked
    only from a late page is fetched."""
    site = _failing_site()
    settings = {"ROBOTSTXT_OBEY": False, "RETRY_TIMES": 1, "DUPEFILTER_DEBUG": True,
                "LOG_LEVEL": "DEBUG"}  # fmt: skip
    runs = {
        skip: (run, dict(server.hits), server.base_url)
        for skip, (run, server) in crawl_with_and_without_skip(site, tmp_path, settings).items()
    }
    for skip, (run, hits, base) in runs.items():
        assert hits["/fail"] == 2, (skip, hits)  # the first try and RETRY_TIMES=1 retry
        assert hits["/gone"] == 1 and hits["/new"] == 1 and hits["/FAIL"] == 1, (skip, hits)
        assert run.stats["retry/max_reached"] == 1
        assert run.stored_urls() == {base + p for p in ("/", "/a", "/b", "/new", "/FAIL")}
        # Not fetched: 5 later links to /fail, 1 to /gone, the self-link of /a, /new's link to /.
        assert (
            run.stats.get("dupefilter/filtered", 0) + run.stats.get("dedup/links_skipped_seen", 0)
            == 8
        ), run.stats
        # DUPEFILTER_DEBUG shows every link not fetched, skipped early or filtered.
        assert run.stderr.count("Skipped already-seen link: ") == run.stats.get(
            "dedup/links_skipped_seen", 0
        )
        assert run.stderr.count("Filtered duplicate request: ") == run.stats.get(
            "dupefilter/filtered", 0
        )
    (off, _, _), (on, _, _) = runs[False], runs[True]
    assert on.stats["dedup/links_skipped_seen"] > 0
    assert off.stats["dedup/links_extracted"] == on.stats["dedup/links_extracted"]


def _spider_and_crawler():
    from scrapy.utils.test import get_crawler

    from crawler.spiders.web import WebSpider

    crawler = get_crawler(WebSpider, {"DEDUP_EARLY_SKIP": False})
    crawler._apply_settings()
    spider = WebSpider.from_crawler(crawler, urls="http://localhost/")
    crawler.spider = spider
    crawler.stats.open_spider()
    return spider


def test_the_one_parse_reads_what_lxml_reads(demo_server):
    """The page's one parse (lexbor, depth-bounded) finds the links, the title and the
    canonical link that ``response.selector`` (lxml, as the spider read them before) finds,
    on every HTML page of the demo site and of the link-heavy bench site."""
    from scrapy.http import HtmlResponse

    from crawler.sitegen import link_heavy_site
    from crawler.spiders.web import canonical_href, html_tree

    checked = links = canonicals = 0
    for site, base in ((demo_server.site, demo_server.base_url),
                       (link_heavy_site(40, 30), "http://127.0.0.1:8000")):  # fmt: skip
        for path, page in sorted(site.pages.items()):
            if not page.content_type.startswith("text/html") or path in site.mislabelled:
                continue
            body = site.render(page, base)
            response = HtmlResponse(base + path, body=body,
                                    headers={"Content-Type": page.content_type})  # fmt: skip
            root = response.selector.root
            parsed = html_tree(response)
            assert parsed.hrefs == [e.get("href") for e in root.iter("a", "area")
                                    if e.get("href") is not None], path  # fmt: skip
            lxml_canonical = next((e.get("href").strip() for e in root.iter("link")
                                   if "canonical" in (e.get("rel") or "").lower().split()
                                   and (e.get("href") or "").strip()), None)  # fmt: skip
            assert canonical_href(response, parsed) == lxml_canonical, path
            canonicals += lxml_canonical is not None
            title = parsed.extract(response.url, tokenize=False).title
            assert title == " ".join((root.findtext(".//title") or "").split()), path
            checked += 1
            links += len(parsed.hrefs)
    assert checked > 60 and links > 1000 and canonicals > 0


def test_a_parsed_page_is_freed_by_reference_counting_alone():
    """parse() leaves no reference cycle on the response: its tree is freed at once, not when
    the cycle collector next runs (which kept ~200 pages' trees alive)."""
    import gc
    import weakref

    from scrapy.http import HtmlResponse, Request

    spider = _spider_and_crawler()
    url = "http://localhost/d/p"
    body = _page(url, ["/a", "b", "http://localhost/c", "mailto:x@y"])
    gc.collect()
    gc.disable()
    try:
        response = HtmlResponse(url, body=body, encoding="utf-8", request=Request(url))
        out = asyncio.run(_collect(spider.parse(response)))
        assert len(out) == 4  # three links and the page item
        ref = weakref.ref(response)
        del response
        assert ref() is None
    finally:
        gc.enable()


async def _collect(outputs):
    return [output async for output in outputs]


def _self_linking_site(targets: list[str]) -> Site:
    """Pages at ``targets``, each linking to every target (the seed's own spelling first)."""
    links = "".join(f'<a href="{t}">{i}</a>' for i, t in enumerate(targets))
    pages = {
        t: Page(f"<html><head><title>P</title></head><body><p>The one page under test, "
                f"spelled {i}.</p>{links}</body></html>".encode())
        for i, t in enumerate(targets)
    }
    pages["/robots.txt"] = Page(b"User-agent: *\nDisallow:\n", "text/plain")
    return Site(name="self-linking", pages=pages)


@pytest.mark.parametrize(
    ("targets", "settings"),
    [
        # the measured case of issue 14: the seed's query kept in order by the crawl's policy
        (["/p?b=2&a=1"], {"URLNORM_SORT_QUERY": False}),
        # a custom stripped parameter: /p?sid=1 and /p?sid=2 are one page under the crawl's key
        (["/p?sid=1", "/p?sid=2"], {"URLNORM_STRIP_PARAMS": "sid,utm_*"}),
    ],
)
def test_a_seed_is_keyed_with_the_crawls_url_policy(tmp_path, targets, settings):
    with SiteServer(_self_linking_site(targets)) as server:
        run = run_crawl(tmp_path / "run", urls=[server.url(targets[0])], settings=settings)
        fetched = {t: n for t, n in server.hits.items() if t.startswith("/p")}
    assert run.returncode == 0, run.stderr[-3000:]
    assert fetched == {targets[0]: 1}, fetched
    filtered = run.stats.get("dupefilter/filtered", 0)
    assert filtered + run.stats.get("dedup/links_skipped_seen", 0) >= 1


def test_a_dupefilter_without_the_early_skip_contract_means_no_early_skip():
    """Scrapy's own RFPDupeFilter has no read-only batch check: every link becomes a request
    and the scheduler's dupefilter filters the seen ones, as in stock Scrapy."""
    from types import SimpleNamespace

    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from crawler.backends.bloom import LocalSeenSet
    from crawler.dupefilter import BloomDupeFilter, EarlySkip, early_skip_of
    from crawler.spiders.web import WebSpider, html_tree

    def running(df):  # a crawler whose engine's scheduler holds df
        return SimpleNamespace(engine=SimpleNamespace(scheduler=SimpleNamespace(df=df)))

    assert early_skip_of(running(RFPDupeFilter())) is None
    ours = BloomDupeFilter(LocalSeenSet(capacity=10))
    assert isinstance(ours, EarlySkip) and early_skip_of(running(ours)) is ours
    assert early_skip_of(get_crawler(WebSpider)) is None  # no engine yet
    crawler = get_crawler(WebSpider)
    spider = WebSpider.from_crawler(crawler, urls="http://h/")
    crawler.spider = spider
    crawler.stats.open_spider()
    crawler.engine = SimpleNamespace(scheduler=SimpleNamespace(df=RFPDupeFilter()))
    url = "http://h/"
    response = HtmlResponse(url, body=_page(url, ["/a", "/a"]), encoding="utf-8",
                            request=Request(url))
    assert [r.url for r in spider._links(response, html_tree(response))] == [
        "http://h/a", "http://h/a"]  # fmt: skip
    assert crawler.stats.get_value("dedup/links_skipped_seen") is None

"""The web spider's link extraction, quick (no crawl): the hrefs of a page read from its one
parse (:class:`~crawler.content.text.ParsedPage`), the link memo asked before the scheme check;
the same links, verdicts and drops as the extraction one element at a time of lxml's tree it
replaced, but for an inert ``<template>``'s links (HTML5 keeps its content out of the tree)."""

from __future__ import annotations

import re

import pytest

from bench.pagepath import extract_one_element_at_a_time
from crawler.sitegen import link_heavy_site

_HREF_PAGES = [
    '<a href="/a">x</a><A HREF=" /b ">y</A><a>no href</a><a href="">empty</a><a href="  ">sp</a>'
    '<map><area href="c.html"><area></map><svg><a href="/in-svg">s</a></svg>'
    '<!-- <a href="/commented"> --><template><a href="/in-template">t</a></template>'
    '<a href="mailto:x@h">m</a><a href="JavaScript:void(0)">j</a><a href="?q=1">q</a>'
    '<a href="#top">f</a><a href="http://other/">o</a><a href="//h/p">n</a><a href="/a">again</a>'
    '<a href="\x01ctl">c</a><a href="../up/x">u</a><a href="/a/../a">dots</a>',
    "<table><tr><td><a href=/t1>t</a><td><a href='/t2'>u</a></table><p><a href=/p1><a href=/p2>",
]


def _real_pages() -> list[str]:
    import glob
    from pathlib import Path

    paths = sorted(glob.glob("/usr/share/doc/python3.11/html/library/*.html"))[::20]
    paths += sorted(glob.glob("/usr/share/doc/postgresql-doc-15/html/*.html"))[::60]
    return [Path(p).read_text(encoding="utf-8", errors="replace") for p in paths]


def _hrefs_one_element_at_a_time(root) -> list[str]:
    return [href for element in root.iter("a", "area") if (href := element.get("href"))]


_TEMPLATE = re.compile(r"<template>.*?</template>", re.S | re.I)


def _lxml_root(url: str, html: str):
    """lxml's tree of the page (``response.selector``, as the spider parsed it before), less
    the content of its ``<template>`` elements: inert in HTML5, no link of the page."""
    from scrapy.http import HtmlResponse

    stripped = _TEMPLATE.sub("", html)
    return HtmlResponse(url, body=stripped.encode(), encoding="utf-8").selector.root


def test_page_hrefs_are_those_of_every_a_and_area_in_page_order():
    from scrapy.http import HtmlResponse

    from crawler.spiders.web import html_tree

    pages = _HREF_PAGES + _real_pages()
    for i, html in enumerate(pages):
        response = HtmlResponse("http://h/dir/page.html", body=html.encode(), encoding="utf-8")
        want = _hrefs_one_element_at_a_time(_lxml_root(response.url, html))
        assert [h for h in html_tree(response).hrefs if h] == want, i
        assert want, i  # every page has links to compare
    parsed = html_tree(HtmlResponse("http://h/", body=_HREF_PAGES[0].encode(), encoding="utf-8"))
    assert "/in-template" not in parsed.hrefs and "/in-svg" in parsed.hrefs


@pytest.mark.parametrize("order", ["forward", "backward"])
@pytest.mark.parametrize("links_max", [0, 7])
def test_link_extraction_gives_what_it_gave_one_element_at_a_time(order, links_max):
    """Same links, verdicts, canonical URLs and drops, page after page (the memo warm), in
    either order, with and without LINKS_PER_PAGE_MAX cutting pages."""
    from scrapy.http import HtmlResponse
    from scrapy.utils.response import get_base_url
    from scrapy.utils.test import get_crawler

    from crawler.spiders.web import WebSpider, html_tree

    def spider():
        crawler = get_crawler(WebSpider, {"LINKS_PER_PAGE_MAX": links_max})
        made = WebSpider.from_crawler(crawler, urls="http://h/,http://localhost:8000/")
        crawler.spider = made
        crawler.stats.open_spider()
        return made

    ours, reference = spider(), spider()
    site = link_heavy_site(pages=30, links_per_page=40)
    pages = [(f"http://h/dir/{i}.html", html) for i, html in enumerate(_HREF_PAGES * 2)]
    pages += [(f"http://localhost:8000{path}", site.render(page, "http://localhost:8000"))
              for path, page in sorted(site.pages.items())]
    pages += [(f"http://h/doc/{i}/x.html", html) for i, html in enumerate(_real_pages())]
    if order == "backward":
        pages.reverse()
    for url, html in pages:
        body = html if isinstance(html, bytes) else html.encode()
        response = HtmlResponse(url, body=body, encoding="utf-8")
        base = get_base_url(response)
        links, dropped = ours._extract(html_tree(response), base)
        text = html.decode() if isinstance(html, bytes) else html
        want_links, want_dropped = extract_one_element_at_a_time(reference,
                                                                 _lxml_root(url, text), base)
        capped = want_dropped.pop("capped", 0)
        assert links == want_links, url
        assert dropped == want_dropped, url
        assert (ours.crawler.stats.get_value("dedup/links_capped", 0)
                - reference.crawler.stats.get_value("dedup/links_capped", 0)) == capped
        reference.crawler.stats.inc_value("dedup/links_capped", capped)

"""The dedup components in someone else's Scrapy project (docs/install.md, "Using the dedup
components in an existing Scrapy project").

``scrapy startproject`` makes a new project in a temporary directory; its settings.py gets
exactly the settings of the block docs/install.md gives, its spider yields
:func:`crawler.spiders.embed.page_item` for each page and follows every link, and it crawls the
demo site on 127.0.0.1: duplicates are dropped into the ``dropped`` table, the rest stored in
``documents``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from scrapy.http import HtmlResponse, Request

from crawler.sitegen import demo_site
from crawler.sitegen.server import SiteServer
from crawler.spiders.embed import page_item
from crawler.urls.fingerprint import fingerprint_url
from tests.conftest import ROOT

#: The settings block of docs/install.md, appended to a new project (comments aside, the same
#: settings: :func:`test_the_manual_gives_the_settings_this_test_uses`).
PROJECT_SETTINGS = textwrap.dedent("""
    # --- dedup-crawler (pip install dedup-crawler) ---
    DUPEFILTER_CLASS = "crawler.dupefilter.BloomDupeFilter"
    SCHEDULER = "crawler.scheduler.ResumingScheduler"
    REQUEST_FINGERPRINTER_CLASS = "crawler.urls.fingerprint.CanonicalRequestFingerprinter"
    SPIDER_MIDDLEWARES = {
        "crawler.middlewares.links.UrlNormalizationMiddleware": 550,
        "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
    }
    ITEM_PIPELINES = {
        "crawler.pipelines.neardup.NearDuplicatePipeline": 300,
        "crawler.pipelines.storage.StoragePipeline": 800,
    }
    EXTENSIONS = {
        "crawler.extensions.progress.DedupProgress": 500,
        "crawler.extensions.statsfile.StatsFile": 900,
    }
    LOG_FORMATTER = "crawler.logformatter.DedupLogFormatter"
    COMMANDS_MODULE = "crawler.commands"  # checked crawl, dropped, dedupreport
    STORAGE_URL = "sqlite:///crawl.db"
""")

SPIDER = textwrap.dedent("""
    import scrapy

    from crawler.spiders.embed import page_item


    class NewsSpider(scrapy.Spider):
        name = "news"
        allowed_domains = ["localhost"]

        def __init__(self, url=None, **kwargs):
            super().__init__(**kwargs)
            self.seed = url

        async def start(self):
            yield scrapy.Request(self.seed)  # through the dupefilter (start_urls skip it)

        def parse(self, response):
            if not isinstance(response, scrapy.http.HtmlResponse):
                return
            yield page_item(response, self.crawler)
            yield from response.follow_all(css="a::attr(href)")
""")


@pytest.mark.slow
def test_an_existing_project_gets_dedup_and_storage(tmp_path):
    env = {**os.environ, "PYTHONPATH": ""}
    subprocess.run([sys.executable, "-m", "scrapy", "startproject", "news"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=120, env=env)  # fmt: skip
    project = tmp_path / "news"
    settings = project / "news" / "settings.py"
    settings.write_text(settings.read_text() + PROJECT_SETTINGS)
    (project / "news" / "spiders" / "news.py").write_text(SPIDER)
    site = demo_site()
    with SiteServer(site) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "scrapy", "crawl", "news", "-a", f"url={server.base_url}/",
             "-s", "DOWNLOAD_DELAY=0", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=8",
             "-s", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"],
            cwd=project, capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        hits = Counter(server.hits)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Dedup summary" in proc.stderr
    with sqlite3.connect(project / "crawl.db") as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM dropped GROUP BY reason"))
        stored = {row[0] for row in conn.execute("SELECT canonical_url FROM documents")}
        crawls = conn.execute("SELECT count(*) FROM crawls").fetchone()[0]
    assert reasons == {"exact_duplicate": len(site.exact_duplicates),
                       "near_duplicate": len(site.near_duplicates)}  # fmt: skip
    assert crawls == 1
    base = server.base_url
    groups = site.duplicate_groups()
    for members in groups.values():  # one page of each duplicate group, whichever came first
        assert len({base + path for path in members} & stored) == 1, members
    grouped = set().union(*groups.values())
    unique = {base + path for path in site.distinct_pages - grouped}
    assert unique <= stored, sorted(unique - stored)[:5]
    # the URL dedup: the many link spellings of a page reached the server once
    fetched = Counter(site.canonical_of(target) for target in hits.elements())
    fetched.pop(None, None)  # 404s
    assert fetched and max(fetched.values()) == 1, fetched.most_common(3)
    assert len(site.aliases) > 10



def settings_of(block: str) -> dict:
    """The settings a ``settings.py`` block assigns."""
    names: dict = {}
    exec(block, {}, names)  # our own documentation and test text
    return names


def test_the_manual_gives_the_settings_this_test_uses():
    """The block a user copies from docs/install.md is the one this test crawls with."""
    page = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
              if "DUPEFILTER_CLASS" in b]  # fmt: skip
    assert len(blocks) == 1
    assert settings_of(blocks[0]) == settings_of(PROJECT_SETTINGS)


def test_page_item_fills_what_the_pipelines_read():
    html = ("<html><head><title> Nest  boxes </title></head><body><nav>Home</nav>"
            "<p>Blue tits nest early.</p></body></html>")  # fmt: skip
    request = Request("http://Example.com:80/a/../b?utm_source=x#top",
                      headers={"Referer": "http://example.com/"})  # fmt: skip
    response = HtmlResponse(request.url, body=html.encode(), request=request,
                            headers={"Content-Type": "text/html; charset=utf-8"})  # fmt: skip
    item = page_item(response)
    assert item.canonical_url == "http://example.com/b"
    assert item.title == "Nest boxes"
    assert "Blue tits nest early." in item.text and item.blocks
    assert item.content_type == "text/html" and item.referer == "http://example.com/"
    assert item.fingerprints == [fingerprint_url("http://example.com/b").hex()]
    assert not item.binary and item.simhash is None
    binary = page_item(HtmlResponse("http://example.com/x", body=b"%PDF-1.4\x00\x01",
                                    request=Request("http://example.com/x")))  # fmt: skip
    assert binary.binary and binary.text == "" and binary.blocks is None


def test_redirect_fingerprints_follow_the_crawls_url_policy():
    """A page reached through a redirect marks the redirect's request finished under the key
    the dupefilter gave it: with URLNORM_SORT_QUERY=False the query stays in its order (the
    default policy sorted it, so the journal kept the redirect's request pending)."""
    from scrapy.utils.test import get_crawler

    from crawler.urls.urlnorm import UrlPolicy, normalize_url

    crawler = get_crawler(settings_dict={
        "REQUEST_FINGERPRINTER_CLASS": "crawler.urls.fingerprint.CanonicalRequestFingerprinter",
        "URLNORM_SORT_QUERY": False})  # fmt: skip
    policy = UrlPolicy(sort_query=False)
    first = "http://example.com/p?b=2&a=1"
    request = Request("http://example.com/final", meta={"redirect_urls": [first]})
    response = HtmlResponse(request.url, body=b"<html><p>x</p></html>", request=request)
    item = page_item(response, crawler)
    assert item.fingerprints[1] == fingerprint_url(normalize_url(first, policy=policy)).hex()
    assert item.fingerprints[1] != fingerprint_url(normalize_url(first)).hex()
    assert item.fingerprints[0] == crawler.request_fingerprinter.fingerprint(request).hex()

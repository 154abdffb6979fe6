"""crawler.urls.fingerprint: one key per canonical request, shared with every Scrapy component."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from scrapy import Request, Spider
from scrapy.dupefilters import RFPDupeFilter
from scrapy.extensions.httpcache import FilesystemCacheStorage
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.urls.fingerprint import (
    CanonicalRequestFingerprinter,
    canonical_url_of,
    fingerprint_url,
)
from crawler.urls.urlnorm import InvalidUrl, UrlPolicy, normalize_url
from tests.test_urlnorm import urlish

SPELLINGS = [
    "http://Example.COM:80/a/./b/../page?y=2&x=1#top",
    "http://example.com/a/page?x=1&y=2",
    "HTTP://example.com./a/%70age?utm_source=news&x=1&y=2",
    "http://example.com/a//../page?x=1&&y=2&fbclid=abc",
]


class _Spider(Spider):
    name = "fp"


@pytest.fixture
def crawler():
    return get_crawler(
        _Spider,
        {"REQUEST_FINGERPRINTER_CLASS": "crawler.urls.fingerprint.CanonicalRequestFingerprinter"},
    )


def test_fingerprint_url_is_16_bytes_and_deterministic() -> None:
    fp = fingerprint_url("http://example.com/")
    assert len(fp) == 16
    assert fp == fingerprint_url("http://example.com/", "get", b"")
    assert fp != fingerprint_url("http://example.com/x")


def test_method_and_body_change_the_fingerprint() -> None:
    fper = CanonicalRequestFingerprinter()
    get = fper.fingerprint(Request("http://example.com/form"))
    post = fper.fingerprint(Request("http://example.com/form", method="POST"))
    post_a = fper.fingerprint(Request("http://example.com/form", method="POST", body=b"a=1"))
    post_b = fper.fingerprint(Request("http://example.com/form", method="POST", body=b"a=2"))
    assert len({get, post, post_a, post_b}) == 4
    assert post_a == fingerprint_url("http://example.com/form", "POST", b"a=1")


def test_spellings_of_one_url_share_a_fingerprint() -> None:
    fper = CanonicalRequestFingerprinter()
    fps = {fper.fingerprint(Request(url)) for url in SPELLINGS}
    assert fps == {fingerprint_url("http://example.com/a/page?x=1&y=2")}


def test_meta_canonical_url_is_used() -> None:
    fper = CanonicalRequestFingerprinter()
    request = Request("http://example.com/raw", meta={"canonical_url": "http://example.com/key"})
    assert fper.fingerprint(request) == fingerprint_url("http://example.com/key")


def test_redirected_request_ignores_the_copied_canonical_url() -> None:
    # Scrapy's RedirectMiddleware copies meta to the target request.
    source = Request("http://example.com/old", meta={"canonical_url": "http://example.com/old"})
    target = source.replace(url="http://example.com/NEW?b=1&a=2")
    target.meta["redirect_urls"] = [source.url]
    fper = CanonicalRequestFingerprinter()
    assert fper.fingerprint(target) == fingerprint_url("http://example.com/NEW?a=2&b=1")
    assert canonical_url_of(target) == "http://example.com/NEW?a=2&b=1"


def test_refused_url_falls_back_to_the_raw_url() -> None:
    fper = CanonicalRequestFingerprinter()
    a = Request("ftp://example.com/file")
    b = Request("http://a..b/")
    assert canonical_url_of(a) is None
    assert fper.fingerprint(a) == fingerprint_url("ftp://example.com/file")
    assert fper.fingerprint(b) == fingerprint_url("http://a..b/")


def test_fingerprints_are_cached_per_request() -> None:
    fper = CanonicalRequestFingerprinter()
    request = Request("http://example.com/a")
    first = fper.fingerprint(request)
    request.meta["canonical_url"] = "http://example.com/other"
    assert fper.fingerprint(request) == first
    assert fper.fingerprint(Request("http://example.com/a", meta=request.meta)) != first


def test_policy_comes_from_settings() -> None:
    crawler = get_crawler(settings_dict={"URLNORM_STRIP_PARAMS": ["sid"]})
    fper = CanonicalRequestFingerprinter.from_crawler(crawler)
    assert fper.policy == UrlPolicy(strip_params=("sid",))
    assert fper.fingerprint(Request("http://e.com/?sid=1&utm_source=2")) == fingerprint_url(
        "http://e.com/?utm_source=2"
    )


def test_crawler_fingerprinter_is_ours_and_scrapy_dupefilter_agrees(crawler) -> None:
    assert isinstance(crawler.request_fingerprinter, CanonicalRequestFingerprinter)
    dupefilter = RFPDupeFilter.from_crawler(crawler)
    seen = [dupefilter.request_seen(Request(url)) for url in SPELLINGS]
    assert seen == [False, True, True, True]
    assert not dupefilter.request_seen(Request("http://example.com/a/page?x=1&y=3"))


def test_http_cache_serves_every_spelling(crawler, tmp_path) -> None:
    crawler.settings.frozen = False
    crawler.settings.set("HTTPCACHE_DIR", str(tmp_path))
    spider = crawler._create_spider()
    storage = FilesystemCacheStorage(crawler.settings)
    storage.open_spider(spider)
    first = Request(SPELLINGS[0])
    response = HtmlResponse(first.url, body=b"<html>cached</html>", request=first)
    storage.store_response(spider, first, response)
    for url in SPELLINGS[1:]:
        cached = storage.retrieve_response(spider, Request(url))
        assert cached is not None and cached.body == b"<html>cached</html>"
    assert storage.retrieve_response(spider, Request("http://example.com/a/other")) is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(urlish())
def test_property_url_and_canonical_form_fingerprint_the_same(url: str) -> None:
    # Scrapy's Request maps UTS 46 deviation characters (IDNA 2003): a documented urlnorm limit.
    assume(not any(char in url for char in "\u00df\u03c2\u200c\u200d"))
    # ... and punycodes a host mixing non-ASCII and %-escapes with the escapes left in.
    authority = re.match(r"[^/?#]*//([^/?#]*)", url)
    assume(authority is None or authority[1].isascii() or "%" not in authority[1])
    # ... and escapes "'" in queries and ":" in passwords (WHATWG), which the policy keeps.
    assume("'" not in url.partition("?")[2] and (authority is None or "@" not in authority[1]))
    try:
        canonical = normalize_url(url)
    except InvalidUrl:
        return
    try:
        request = Request(url)
    except ValueError:  # Scrapy refuses some strings outright (e.g. no ':' after cleaning)
        return
    # Scrapy escapes the URL it stores (safe_url_string); the key must survive that.
    fper = CanonicalRequestFingerprinter()
    assert fper.fingerprint(request) == fper.fingerprint(Request(canonical))
    assert fper.fingerprint(request) == fingerprint_url(canonical)

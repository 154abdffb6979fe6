"""The stock baseline of ``bench.crawl``: a plain Scrapy ``CrawlSpider`` that follows every link.

Run with ``scrapy runspider bench/stock_spider.py -a url=http://localhost:PORT/`` outside the
project directory (so Scrapy's stock settings apply, not ours). It stays on the start URL's host
through ``allowed_domains`` (``LinkExtractor(allow_domains=...)`` compares ``host:port`` and would
drop every link on a server with a port) and yields one small item per page; no pipelines, no
URL normalization beyond Scrapy's own ``canonicalize_url`` fingerprint. Deliberately not in
``crawler/spiders``: ``scrapy list`` must not show it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class StockSpider(CrawlSpider):
    name = "stock"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, url: str = "", *args: Any, **kwargs: Any) -> None:
        urls = url.split(",")  # several start URLs (hosts) comma-separated: bench.scale
        if not all(u.startswith(("http://", "https://")) for u in urls):
            raise ValueError(f"stock spider: -a url=... must be http(s) URLs, got {url!r}")
        self.start_urls = urls
        self.allowed_domains = [urlsplit(u).hostname or "" for u in urls]
        super().__init__(*args, **kwargs)

    def parse_start_url(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.parse_page(response)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        title = response.css("title::text").get() if isinstance(response, HtmlResponse) else None
        yield {"url": response.url, "status": response.status, "title": title}

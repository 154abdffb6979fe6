"""The floor of ``bench.crawl --floor``: Scrapy fetching the site's pages and doing nothing else.

Run with ``scrapy runspider bench/floor_spider.py -a url=http://localhost:PORT/ -a pages=N``
outside the project directory (Scrapy's stock settings). Its start URLs are the link-heavy
site's home page and its ``N`` pages (:func:`crawler.sitegen.link_heavy_site` paths ``/p/<i>``),
so it fetches what ``ours`` and ``stock`` fetch; ``parse`` reads nothing and yields nothing, so
no link is extracted, no request made from a page, no item built. ``CONCURRENT_ITEMS = 1``, as
the ``web`` spider sets it (Scrapy 2.19 starts that many asyncio tasks per response). What it
costs per page is Scrapy's own: engine, scheduler, downloader, middlewares, HTTP, robots.txt.
Deliberately not in ``crawler/spiders``: ``scrapy list`` must not show it.
"""

from __future__ import annotations

from typing import Any

import scrapy
from scrapy.http import Response


class FloorSpider(scrapy.Spider):
    name = "floor"
    custom_settings = {"CONCURRENT_ITEMS": 1}

    def __init__(self, url: str = "", pages: str = "0", *args: Any, **kwargs: Any) -> None:
        if not url.startswith(("http://", "https://")) or not pages.isdigit():
            raise ValueError(f"floor spider: -a url=http(s)://... -a pages=N, got {url!r}, "
                             f"{pages!r}")  # fmt: skip
        super().__init__(*args, **kwargs)
        base = url.rstrip("/")
        self.start_urls = [base + "/", *(f"{base}/p/{i}" for i in range(int(pages)))]

    def parse(self, response: Response, **kwargs: Any) -> None:
        return None

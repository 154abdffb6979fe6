"""Write the crawl's final stats to a JSON file (``STATS_FILE``), for scripts and the demo.

The file is written atomically (temp file, fsync, rename) when the spider closes, so a reader
never sees half a file. Values that JSON cannot hold (datetimes) are written as ISO 8601 strings
(:func:`crawler.outputs.formats.jsonable`).
Off when ``STATS_FILE`` is empty (the default).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.outputs.formats import jsonable
from crawler.state.atomicfile import write_atomic

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class StatsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.crawler: Crawler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsFile:
        path = crawler.settings.get("STATS_FILE")
        if not path:
            raise NotConfigured
        ext = cls(Path(path))
        ext.crawler = crawler
        # Handlers run in connection order: CoreStats (EXTENSIONS_BASE, order 0) sets
        # finish_reason before us, and item pipelines have closed before spider_closed is sent.
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_closed(self, spider: Any, reason: str) -> None:
        assert self.crawler is not None and self.crawler.stats is not None
        stats = {k: jsonable(v) for k, v in self.crawler.stats.get_stats().items()}
        stats.setdefault("finish_reason", reason)
        write_atomic(self.path, json.dumps(stats, indent=2, sort_keys=True))
        logger.info("Stats written to %s", self.path, extra={"spider": spider})

"""Embedded profile (the default): SQLite storage, Bloom filter and SimHash index in process.

Nothing here needs a server or an extra. ``scrapy crawl web -s STORAGE_URL=...`` or the
``SCRAPY_SETTINGS_MODULE=crawler.settings.distributed`` profile (extras ``redis`` and
``postgres``) change that. An existing Scrapy project takes the components instead
(docs/install.md). The checkout's top-level ``settings`` package re-exports these
modules, so ``SCRAPY_SETTINGS_MODULE=settings.distributed`` works from the project root.
"""

__floor__ = "component"

from crawler.settings.base import *  # noqa: F403

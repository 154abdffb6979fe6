"""Embedded profile (the default): SQLite storage, Bloom filter and SimHash index in process.

Nothing here needs a server. ``scrapy crawl web -s STORAGE_URL=...`` or the
``SCRAPY_SETTINGS_MODULE=settings.distributed`` profile change that.
"""

from settings.base import *  # noqa: F403

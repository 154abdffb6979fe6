"""Closing the crawl from inside a component, with a finish reason: one home for it.

The dupefilter (``bloom_full``, ``jobdir_error``), the near-duplicate pipeline and the cluster
worker (``redis_error``) stop a crawl the same way: the engine's ``close_spider_async`` started
in the background, nothing before the crawl starts (Scrapy's ``Crawler.engine`` raises until
then). The first reason a component closed the crawl for is also kept as the stat
:data:`CLOSE_REASON_STAT`: a failure found while the crawl already closes (the last storage
batch, the last drop log lines) cannot change the reason the engine closes with, so
:class:`crawler.extensions.progress.DedupProgress` makes it the ``finish_reason`` (``STATS_FILE``,
the ``crawls`` row) and the ``crawl`` command exits 1 on it.

:func:`stop_on_redis_error` applies the Redis-outage policy of the Redis backend
(:func:`crawler.backends.common.first_outage`) and closes the crawl the first time.
"""

from __future__ import annotations

__floor__ = "component"

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_from_coro

from crawler.backends.common import REDIS_ERROR, first_outage

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

#: The stat holding the first reason :func:`close_crawl` was called with.
CLOSE_REASON_STAT = "dedup/close_reason"


def close_crawl(crawler: Crawler | None, reason: str) -> None:
    """Start closing the crawl with finish ``reason`` (nothing before it has started)."""
    try:  # Crawler.engine raises until the crawl starts
        engine = crawler.engine if crawler is not None else None
    except RuntimeError:
        return
    if engine is None:
        return
    stats = crawler.stats if crawler is not None else None
    if stats is not None and stats.get_value(CLOSE_REASON_STAT) is None:
        stats.set_value(CLOSE_REASON_STAT, reason)
    deferred_from_coro(engine.close_spider_async(reason=reason))


def stop_on_redis_error(crawler: Crawler | None, exc: Exception, url: str) -> None:
    """After a failed Redis call: the first of the crawl closes it with ``redis_error`` (one
    ERROR line, stat ``dedup/redis_error``); later ones do nothing. Without a crawler or its
    stats (a component built ``from_settings``) ``exc`` is raised again."""
    if crawler is None or crawler.stats is None:
        raise exc
    if first_outage(crawler.stats, exc, url):
        close_crawl(crawler, REDIS_ERROR)

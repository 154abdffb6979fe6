"""Downloader middleware of the distributed profile: one scope for the whole crawl.

A worker's :class:`~crawler.urls.scope.Scope` is built from its own seeds, but a host's requests go
to whichever worker owns it (:mod:`crawler.cluster.frontier`): a worker started without seeds
(they come from Redis, :mod:`crawler.cluster.startlist`), or with other seeds than the worker
that queued a request, would judge that host's links offsite and its private address refused.
So the crawl's seeds are shared in Redis (``{base}:seeds``):

* when the spider opens, the worker's own seeds (``-a seeds=`` / ``-a urls=``) join them, and
  the seeds already there join its scope;
* before a request is downloaded (ahead of ``ScopeMiddleware``'s private-address guard and of
  the link extraction of its page), a request whose site the worker's scope does not contain
  reads the seeds added since (one ``LRANGE`` from where it stopped): a request the shared
  frontier hands out was in the crawl's scope when it was queued, so a miss means the shared
  seeds grew. A request still outside is left to ``ScopeMiddleware``.

Off (``NotConfigured``) outside the distributed profile and for spiders without a ``scope``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler.backends.common import RedisBackendError
from crawler.closing import stop_on_redis_error
from crawler.meta import CANONICAL_URL
from crawler.urls.scope import Scope
from crawler.urls.urlnorm import InvalidUrl, normalize_url

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class SharedScopeMiddleware:
    """The crawl's seeds shared across workers (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedScopeMiddleware:
        from crawler.cluster.startlist import takes_start_list

        if not takes_start_list(crawler.settings):
            raise NotConfigured
        middleware = cls(crawler)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        return middleware

    def _scope(self) -> Scope | None:
        scope = getattr(self.crawler.spider, "scope", None)
        return scope if isinstance(scope, Scope) else None

    def spider_opened(self, spider: Spider) -> None:
        from crawler.cluster.startlist import share_scope, start_list

        if self._scope() is None:
            return
        try:
            seeds = getattr(spider, "seeds", None)
            start_list(self.crawler).publish(list(getattr(seeds, "canonical", ())))
            share_scope(self.crawler)
        except RedisBackendError as exc:
            stop_on_redis_error(self.crawler, exc, exc.url)

    def process_request(self, request: Request) -> None:
        scope = self._scope()
        if scope is None:
            return
        canonical = request.meta.get(CANONICAL_URL)
        try:
            canonical = canonical or normalize_url(request.url)
        except InvalidUrl:
            return
        if scope.contains(canonical):
            return
        from crawler.cluster.startlist import share_scope

        try:
            if share_scope(self.crawler):
                logger.debug("Scope widened by the crawl's shared seeds for %s", request.url)
        except RedisBackendError as exc:
            stop_on_redis_error(self.crawler, exc, exc.url)

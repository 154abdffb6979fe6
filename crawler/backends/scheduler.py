"""``SharedScheduler``: the scrapy-redis scheduler, made current for Scrapy 2.19 (``SCHEDULER``).

scrapy-redis 0.9.1 uses two APIs Scrapy 2.19 deprecates: ``spider=`` passed to
``StatsCollector.inc_value`` on every request it enqueues and dequeues, and ``Spider.log()``
when a worker joins a crawl whose queue already holds requests. Every distributed worker's log
opened with ``ScrapyDeprecationWarning`` lines at WARNING, and a Scrapy release that removes
either API would break every worker. This subclass does the same things (build the queue and the
dupefilter, the dupefilter check, the two stats, the "joining" message, now at INFO through the
module logger) with current APIs. Everything not overridden here is scrapy-redis's own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object
from scrapy_redis.scheduler import Scheduler

if TYPE_CHECKING:
    from scrapy import Request, Spider

logger = logging.getLogger(__name__)


class SharedScheduler(Scheduler):
    """scrapy-redis's ``Scheduler`` without the APIs Scrapy 2.19 deprecates."""

    df: Any  # our BloomDupeFilter, built by scrapy-redis (from_spider) or by open()
    queue: Any  # the SCHEDULER_QUEUE_CLASS instance

    def open(self, spider: Spider) -> None:
        self.spider = spider
        key = self.queue_key % {"spider": spider.name}
        try:
            self.queue = load_object(self.queue_cls)(
                server=self.server, spider=spider, key=key, serializer=self.serializer
            )
        except TypeError as exc:
            raise ValueError(f"SCHEDULER_QUEUE_CLASS {self.queue_cls!r} cannot be built with "
                             f"scrapy-redis's arguments: {exc}") from None  # fmt: skip
        if not self.df:
            self.df = load_object(self.dupefilter_cls).from_spider(spider)
        if self.flush_on_start:
            self.flush()
        queued = len(self.queue)
        if queued:
            logger.info("Joining a shared crawl: %d request(s) already queued in %s", queued, key,
                        extra={"spider": spider})  # fmt: skip

    def enqueue_request(self, request: Request) -> bool:
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        self.queue.push(request)
        return True

    def next_request(self) -> Request | None:
        request = self.queue.pop(self.idle_before_close)
        if request and self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

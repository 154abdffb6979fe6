"""Keep a distributed worker open while the shared crawl still has work (``EXTENSIONS``).

With the scrapy-redis scheduler a plain spider closes as soon as *it* is idle: a worker that
starts a moment after another, or drains the queue while another worker is still parsing pages
that will add links, exits and leaves the rest to the others. This extension answers
``spider_idle`` with ``DontCloseSpider`` while

* the shared request queue is not empty, or
* another worker of the namespace reported activity in the last ``BUSY_TTL`` seconds (a
  heartbeat key ``{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}:workers:{id}`` with a TTL, refreshed at
  most once a second on every scheduled request, response and item), or
* less than ``DISTRIBUTED_IDLE_SECONDS`` (default 5) passed since either was last seen.

Scrapy re-checks an idle spider only every 5 seconds; while waiting, the extension wakes the
engine every ``POLL_SECONDS`` (0.5) so the worker pops newly queued requests at once (this uses
the engine's private ``_slot.nextcall``; without it the 5-second heartbeat still works). A
worker closes about ``DISTRIBUTED_IDLE_SECONDS`` after the whole crawl has ended. Enabled only with
``DEDUP_BACKEND="redis"`` and a scrapy-redis ``SCHEDULER``. Stat ``dedup/shared/idle_waits``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import CallLaterOnce

from crawler import config, defaults
from crawler.backends import backend_name
from crawler.backends.redis import _glob_escape, _RedisBacked, connect, namespace

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

logger = logging.getLogger(__name__)

BUSY_TTL = 3.0  # seconds a heartbeat stays valid
BEAT_EVERY = 1.0  # at most one heartbeat write per second
POLL_SECONDS = 0.5  # an idle worker looks at the shared queue this often


def _shared_scheduler(settings: Any) -> bool:
    """Whether ``SCHEDULER`` is scrapy-redis's (or a subclass, such as ours)."""
    from scrapy_redis.scheduler import Scheduler

    scheduler = settings["SCHEDULER"]
    if isinstance(scheduler, str):
        try:
            scheduler = load_object(scheduler)
        except (ImportError, NameError, ValueError):
            return False
    return isinstance(scheduler, type) and issubclass(scheduler, Scheduler)


class SharedIdle(_RedisBacked):
    """``spider_idle`` handler of the distributed profile (module docstring)."""

    def __init__(
        self, client: redis.Redis, base: str, queue_key: str, idle_seconds: float, url: str = ""
    ) -> None:
        super().__init__(client, base + ":workers", url)
        self.queue_key = queue_key  # "%(spider)s" filled at idle time
        self.idle_seconds = idle_seconds
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stats: Any = None
        self._next_beat = 0.0
        self._last_work = time.monotonic()
        self._crawler: Any = None
        self._waker: CallLaterOnce[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedIdle:
        settings = crawler.settings
        if backend_name(settings) != "redis" or not _shared_scheduler(settings):
            raise NotConfigured
        idle = config.get_float(
            settings, "DISTRIBUTED_IDLE_SECONDS", defaults.DISTRIBUTED_IDLE_SECONDS, lo=0.0
        )
        url = str(settings.get("REDIS_URL") or defaults.REDIS_URL)
        queue_key = str(settings.get("SCHEDULER_QUEUE_KEY") or "%(spider)s:requests")
        ext = cls(connect(url), namespace(settings), queue_key, idle, url=url)
        ext.stats = crawler.stats
        ext._crawler = crawler
        for signal in (signals.request_scheduled, signals.response_received, signals.item_scraped):
            crawler.signals.connect(ext.beat, signal=signal)
        crawler.signals.connect(ext.on_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.on_closed, signal=signals.spider_closed)
        return ext

    def beat(self, **_: Any) -> None:
        """Tell the other workers this one is busy (rate-limited)."""
        now = time.monotonic()
        if now >= self._next_beat:
            self._next_beat = now + BEAT_EVERY
            self._call("set", f"{self.base}:{self.worker}", 1, px=int(BUSY_TTL * 1000))

    def on_idle(self, spider: Spider) -> None:
        now = time.monotonic()
        queued = self._queued(spider)
        others = self._others_busy()
        if queued or others:
            self._last_work = now
        if queued or others or now - self._last_work < self.idle_seconds:
            logger.debug("idle, but the shared crawl is not: %d queued, %d workers busy",
                         queued, others, extra={"spider": spider})  # fmt: skip
            if self.stats is not None:
                self.stats.inc_value("dedup/shared/idle_waits")
            self._wake_later()
            raise DontCloseSpider

    def _wake_later(self) -> None:
        if self._crawler is None:  # no crawler: no engine to wake
            return
        if self._waker is None:
            self._waker = CallLaterOnce(self._wake)
        self._waker.schedule(POLL_SECONDS)  # once, however often the spider is idle

    def _wake(self) -> None:
        """Run the engine's next-request loop now instead of at its 5-second heartbeat."""
        engine = getattr(self._crawler, "engine", None)
        nextcall = getattr(getattr(engine, "_slot", None), "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def on_closed(self, spider: Spider) -> None:
        self._call("delete", f"{self.base}:{self.worker}")
        self.close()

    def _queued(self, spider: Spider) -> int:
        key = self.queue_key % {"spider": spider.name}
        kind = self._call("type", key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "zset":
            return int(self._call("zcard", key))
        if kind == "list":
            return int(self._call("llen", key))
        return 0

    def _others_busy(self) -> int:
        mine = f"{self.base}:{self.worker}".encode()
        pattern = f"{_glob_escape(self.base)}:*"
        return sum(1 for key in self.client.scan_iter(match=pattern, count=100) if key != mine)

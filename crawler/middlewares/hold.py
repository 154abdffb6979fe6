"""Requests held back outside the downloader, per host, and re-queued later.

A request that waits inside a downloader middleware (an ``await`` in ``process_request``) is
in ``Downloader.active`` the whole time: it holds one of ``CONCURRENT_REQUESTS``, so a few
hundred requests to one host whose robots.txt is down, or that asked for a pause with
``Retry-After``, would starve every other host. :class:`ParkingLot` takes such a request out
of the downloader instead: it keeps a copy (``dont_filter``, so the seen set does not drop it
when it comes back), ends the original silently (:class:`RequestHeld`, an ``IgnoreRequest``
with the errback taken off: the request is not finished, so neither the JOBDIR journal nor the
distributed frontier's lease counts it done), and re-queues the copies through the scheduler
(``engine.crawl``) when told to, or after a delay. While anything is held the spider is kept
open (``spider_idle`` raises ``DontCloseSpider``). Requests still held when the spider closes
for another reason (``CLOSESPIDER_TIMEOUT``, a signal) are counted and logged: a resumed JOBDIR
crawl fetches them again, as any unfinished request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.utils.asyncio import call_later

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.utils.asyncio import CallLaterResult

logger = logging.getLogger(__name__)


class RequestHeld(IgnoreRequest):
    """A request taken out of the downloader to be re-queued later: not a drop."""


class ParkingLot:
    """Requests held per key (a host), re-queued by :meth:`release` (module docstring)."""

    def __init__(self, crawler: Crawler, stat: str) -> None:
        self.crawler = crawler
        self.stat = stat  # e.g. "robotstxt/held_at_close"
        self._held: dict[str, list[Request]] = {}
        self._timers: dict[str, CallLaterResult] = {}
        crawler.signals.connect(self._idle, signal=signals.spider_idle)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    def park(self, key: str, request: Request) -> NoReturn:
        """Hold a copy of ``request`` under ``key`` and end this download (RequestHeld)."""
        self._held.setdefault(key, []).append(request.replace(dont_filter=True))
        request.errback = None  # the copy carries it; this one must end without a trace
        raise RequestHeld(f"{request.url} held back until {key} may be fetched")

    def release(self, key: str) -> int:
        """Re-queue the requests held under ``key``; how many there were."""
        self._cancel(key)
        held = self._held.pop(key, [])
        for request in held:
            self.crawler.engine.crawl(request)
        return len(held)

    def release_later(self, key: str, delay: float) -> None:
        """:meth:`release` ``key`` in ``delay`` seconds (replacing an earlier timer)."""
        self._cancel(key)
        self._timers[key] = call_later(max(delay, 0.0), self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.release(key)

    def _cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _idle(self, **_: Any) -> None:
        """Keep the spider open while requests are held: they are still to be fetched."""
        if any(self._held.values()):
            raise DontCloseSpider

    def _closed(self, **_: Any) -> None:
        for key in list(self._timers):
            self._cancel(key)
        left = sum(len(held) for held in self._held.values())
        if left:
            self.crawler.stats.set_value(self.stat, left)
            logger.warning("%d held request(s) not fetched: the spider closed first (%s)",
                           left, self.stat)  # fmt: skip

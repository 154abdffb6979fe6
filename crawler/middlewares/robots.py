"""robots.txt as RFC 9309 2.3.1 reads it: 5xx or unreachable means "disallow all" until it answers.

Scrapy 2.19's ``RobotsTxtMiddleware`` retries a robots.txt answering 5xx ``RETRY_TIMES`` times
at once, then parses the error page as robots.txt (allow-all, in practice), and a fetch that
fails (connection refused, timeout, DNS) allows everything with an ERROR traceback; a 4xx page
is parsed too (a 404 page reading ``Disallow: /`` disallows everything). Measured: a site whose
robots.txt answered 503 four times had its ``/private`` page, disallowed by the robots.txt it
answered next, fetched and stored.

:class:`StrictRobotsTxtMiddleware` (in place of Scrapy's, every profile):

* **5xx, 429, or no answer**: nothing is fetched from that host (netloc) until its robots.txt
  answers. Requests to it are held back outside the downloader (:mod:`crawler.middlewares.hold`,
  so other hosts keep every ``CONCURRENT_REQUESTS`` slot) and the spider stays open. robots.txt
  is fetched again after ``ROBOTSTXT_RETRY_BACKOFF`` seconds, the delay doubling up to
  ``ROBOTSTXT_RETRY_BACKOFF_MAX``. Once it answers, the held requests are re-queued and obey it;
  after ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` without an answer the host is given up: its held
  and later requests end as ignored (errback, counted), one WARNING per host.
* **4xx** (but 429): no robots.txt, everything is allowed, whatever the error page says.
* **2xx/3xx**: parsed by Scrapy's parser, as before.

Stats: ``robotstxt/unavailable`` (failed fetches), ``robotstxt/held`` (requests held back),
``robotstxt/released`` (held requests re-queued once robots.txt answered),
``robotstxt/given_up`` (requests ended because robots.txt never answered),
``robotstxt/allow_4xx`` (hosts allowed by a 4xx), ``robotstxt/held_at_close``; Scrapy's
``robotstxt/*`` keys stay.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.middlewares.hold import ParkingLot

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.robotstxt import RobotParser
    from scrapy.utils.asyncio import CallLaterResult

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RobotsSettings:
    """How long and how often an unavailable robots.txt is fetched again (each checked)."""

    backoff: float = defaults.ROBOTSTXT_RETRY_BACKOFF
    backoff_max: float = defaults.ROBOTSTXT_RETRY_BACKOFF_MAX
    max_seconds: float = defaults.ROBOTSTXT_UNAVAILABLE_MAX_SECONDS

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> RobotsSettings:
        """Read and check them: each > 0, the backoff's cap at least the backoff
        (SettingError)."""
        def seconds(name: str) -> float:
            return config.get_float(settings, name, getattr(defaults, name), 0,
                                    open_interval=True)

        backoff = seconds("ROBOTSTXT_RETRY_BACKOFF")
        most = seconds("ROBOTSTXT_RETRY_BACKOFF_MAX")
        if most < backoff:
            raise config.SettingError("ROBOTSTXT_RETRY_BACKOFF_MAX", most,
                                      f"at least ROBOTSTXT_RETRY_BACKOFF ({backoff})")
        return cls(backoff, most, seconds("ROBOTSTXT_UNAVAILABLE_MAX_SECONDS"))


def unavailable(status: int) -> bool:
    """A robots.txt answer that means "try again later": disallow all meanwhile."""
    return status >= 500 or status == 429


def accepted_body(response: Response) -> bytes | None:
    """The robots.txt a response stands for: None (unavailable), b"" for a 4xx (allow all)."""
    if unavailable(response.status):
        return None
    return b"" if response.status >= 400 else response.body


@dataclass
class _Outage:
    """A host whose robots.txt has not answered yet."""

    url: str
    since: float
    delay: float
    timer: CallLaterResult | None = None


class StrictRobotsTxtMiddleware(RobotsTxtMiddleware):
    """Scrapy's middleware; a host is held while its robots.txt is unavailable (module doc)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.options = RobotsSettings.from_settings(crawler.settings)
        self._down: dict[str, _Outage] = {}
        self._given_up: set[str] = set()
        self._lot = ParkingLot(crawler, "robotstxt/held_at_close")
        crawler.signals.connect(self._cancel_timers, signal=signals.spider_closed)

    async def process_request(self, request: Request) -> None:  # type: ignore[override]
        if request.meta.get("dont_obey_robotstxt") or request.url.startswith(("data:", "file:")):
            return
        parser = await self.robot_parser(request)
        self._gate(urlparse_cached(request).netloc, request)
        self.process_request_2(parser, request)

    def _gate(self, netloc: str, request: Request) -> None:
        """Hold a request to a host whose robots.txt is unavailable; end it once given up."""
        if netloc in self._given_up:
            self._stats.inc_value("robotstxt/given_up")
            raise IgnoreRequest(f"robots.txt of {netloc} unavailable: request given up")
        if netloc in self._down:
            self._stats.inc_value("robotstxt/held")
            self._lot.park(netloc, request)

    async def robot_parser(self, request: Request) -> RobotParser | None:
        url = urlparse_cached(request)
        if url.netloc not in self._parsers:
            self._parsers[url.netloc] = Deferred()
            await self._fetch(f"{url.scheme}://{url.netloc}/robots.txt", url.netloc, request)
        parser = self._parsers[url.netloc]
        if isinstance(parser, Deferred):
            return await maybe_deferred_to_future(parser)
        return parser

    async def _fetch(self, robotsurl: str, netloc: str, request: Request) -> None:
        """Fetch robots.txt once (our backoff replaces RetryMiddleware's immediate retries)."""
        robotsreq = Request(robotsurl, priority=self.DOWNLOAD_PRIORITY, callback=NO_CALLBACK,
                            meta={"dont_obey_robotstxt": True, "dont_retry": True})  # fmt: skip
        self._stats.inc_value("robotstxt/request_count")
        try:
            response = await self.crawler.engine.download_async(robotsreq)
        except IgnoreRequest as exc:  # refused by another component: Scrapy allows all
            self._pending(netloc)
            self._robots_error(exc, netloc)
            self._recovered(netloc)
        except Exception as exc:
            self._stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
            self._unavailable(netloc, robotsurl, f"{type(exc).__name__}: {exc}")
        else:
            await self._parse_robots(response, netloc, request)

    async def _parse_robots(self, response: Response, netloc: str, request: Request) -> None:
        body = accepted_body(response)
        if body is None:
            self._stats.inc_value(f"robotstxt/response_status_count/{response.status}")
            url = urlparse_cached(request)  # the page's, or the robots.txt fetched again
            self._unavailable(netloc, f"{url.scheme}://{netloc}/robots.txt",
                              f"HTTP {response.status}")  # fmt: skip
            return
        if response.status >= 400:
            self._stats.inc_value("robotstxt/allow_4xx")
            logger.info("robots.txt of %s answered %d: everything allowed", netloc,
                        response.status)  # fmt: skip
        self._pending(netloc)
        await super()._parse_robots(response.replace(body=body), netloc, request)
        self._recovered(netloc)

    def _pending(self, netloc: str) -> None:
        """Scrapy's methods resolve a Deferred; a fetch after an outage has none (the host's
        requests were held meanwhile, not waiting on it)."""
        if not isinstance(self._parsers.get(netloc), Deferred):
            self._parsers[netloc] = Deferred()

    def _resolve(self, netloc: str) -> None:
        """Requests waiting for this fetch go on (and see the host held)."""
        pending = self._parsers.get(netloc)
        self._parsers[netloc] = None
        if isinstance(pending, Deferred):
            pending.callback(None)

    def _unavailable(self, netloc: str, url: str, reason: str) -> None:
        self._stats.inc_value("robotstxt/unavailable")
        now = time.monotonic()
        outage = self._down.get(netloc)
        if outage is None:
            outage = self._down[netloc] = _Outage(url, now, self.options.backoff)
            logger.info("robots.txt of %s unavailable (%s): nothing is fetched from that host "
                        "until it answers (tried again for up to %.0f s)", netloc, reason,
                        self.options.max_seconds)  # fmt: skip
        else:
            outage.delay = min(outage.delay * 2, self.options.backoff_max)
        self._resolve(netloc)
        left = outage.since + self.options.max_seconds - now
        if left <= 0:
            self._give_up(netloc)
            return
        outage.timer = call_later(min(outage.delay, left), self._again, netloc)

    def _again(self, netloc: str) -> None:
        outage = self._down.get(netloc)
        if outage is None or self.crawler.engine is None or self.crawler.spider is None:
            return
        request = Request(outage.url, callback=NO_CALLBACK)
        deferred_from_coro(self._fetch(outage.url, netloc, request)).addErrback(
            lambda failure: logger.error("robots.txt of %s: %s", netloc, failure.value))

    def _recovered(self, netloc: str) -> None:
        outage = self._down.pop(netloc, None)
        if outage is None:
            return
        released = self._lot.release(netloc)
        self._stats.inc_value("robotstxt/released", released)
        logger.info("robots.txt of %s answered after %.1f s: %d held request(s) re-queued",
                    netloc, time.monotonic() - outage.since, released)  # fmt: skip

    def _give_up(self, netloc: str) -> None:
        outage = self._down.pop(netloc)
        self._given_up.add(netloc)
        released = self._lot.release(netloc)  # they come back and end as given up
        logger.warning("robots.txt of %s still unavailable after %.0f s: host given up, "
                       "%d held request(s) not fetched (ROBOTSTXT_UNAVAILABLE_MAX_SECONDS)",
                       netloc, time.monotonic() - outage.since, released)  # fmt: skip

    def _cancel_timers(self, **_: Any) -> None:
        for outage in self._down.values():
            if outage.timer is not None:
                outage.timer.cancel()

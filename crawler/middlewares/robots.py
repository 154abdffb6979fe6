"""robots.txt as RFC 9309 2.3.1 reads it: 5xx or unreachable means "disallow all" until it answers.

Scrapy 2.19's ``RobotsTxtMiddleware`` retries a robots.txt answering 5xx ``RETRY_TIMES`` times
at once, then parses the error page as robots.txt (allow-all, in practice), and a fetch that
fails (connection refused, timeout, DNS) allows everything with an ERROR traceback; a 4xx page
is parsed too (a 404 page reading ``Disallow: /`` disallows everything). Measured: a site whose
robots.txt answered 503 four times had its ``/private`` page, disallowed by the robots.txt it
answered next, fetched and stored.

:class:`StrictRobotsTxtMiddleware` (in place of Scrapy's, every profile):

* **5xx, 429, or no answer**: nothing is fetched from that host (scheme, host, port) until
  its robots.txt answers. Requests to it are held back outside the downloader
  (:mod:`crawler.middlewares.hold`, so other hosts keep every ``CONCURRENT_REQUESTS`` slot) and
  the spider stays open. robots.txt is fetched again after ``ROBOTSTXT_RETRY_BACKOFF`` seconds,
  the delay doubling up to
  ``ROBOTSTXT_RETRY_BACKOFF_MAX``. Once it answers, the held requests are re-queued and obey it;
  after ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS`` without an answer the host is given up: its held
  and later requests end as ignored (errback, counted), one WARNING per host.
* **A host that is not there**: robots.txt of a host that has never answered anything fails
  with connection refused, a failed DNS lookup, a failed TLS handshake or no route to the host
  (:func:`down_reason`). It is fetched again ``RETRY_TIMES`` times, as Scrapy's
  ``RetryMiddleware`` would (its ``retry/*`` stats; our request carries ``dont_retry`` so that
  a 5xx gets the backoff above instead), spaced :data:`DOWN_RETRY_SECONDS` apart, doubling (a
  server still starting, a DNS blip), then the host is given up: the requests waiting for
  it, held, or coming later end as ignored (:class:`~crawler.exceptions.HostGivenUp`), one
  WARNING per host naming the reason and what to check. In one process they stay owed in the
  ``JOBDIR`` journal (the spider does not report them finished): a resumed run asks the host
  again. The same holds for a host given up after ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS``. A
  timeout or a connection lost mid-answer may be a slow or busy server, not a missing one: it is
  "no answer" above (a timeout also costs ``DOWNLOAD_TIMEOUT`` per attempt, so giving up after
  the retries would save little). A host that answered once (even 5xx) and then refuses is held
  as above: it is there, perhaps restarting.

robots.txt belongs to one scheme, host and port (RFC 9309 2.3): ``http://h/`` and
``https://h/`` are two hosts here (:func:`robots_key`), each with its own robots.txt and state.
* **4xx** (but 429): no robots.txt, everything is allowed, whatever the error page says.
* **2xx/3xx**: parsed by Scrapy's parser, as before.
* **Parsers kept**: at most ``ROBOTSTXT_CACHE_HOSTS`` (10,000; 0 = every host) hosts' parsers
  stay in memory; past it the host asked least recently is forgotten, and a request to it
  fetches its robots.txt again, as a host never seen (``robotstxt/forgotten``). Scrapy keeps
  every host's for the whole crawl: a Protego parser measured 21 KiB for an 80-rule robots.txt
  (1.8 KB), 1.2 KiB for a two-line one, so 10^5 hosts held 0.1-2 GB. Only a parsed robots.txt
  is forgotten: a host being fetched, held or given up keeps its state.

Stats: ``robotstxt/unavailable`` (failed fetches), ``robotstxt/held`` (requests held back),
``robotstxt/released`` (held requests re-queued once robots.txt answered),
``robotstxt/given_up`` (requests ended because robots.txt never answered),
``robotstxt/host_down/<reason>`` (hosts given up at once because they are not there; reason
``connection_refused``, ``dns_lookup_failed``, ``tls_handshake_failed``, ``no_route_to_host``),
``robotstxt/allow_4xx`` (hosts allowed by a 4xx), ``robotstxt/held_at_close``,
``robotstxt/forgotten`` (parsers dropped by ``ROBOTSTXT_CACHE_HOSTS``); Scrapy's
``robotstxt/*`` keys stay.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError, IgnoreRequest
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.asyncio import call_later, sleep
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError, DNSLookupError, NoRouteError
from twisted.web._newclient import ResponseNeverReceived

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.exceptions import HostGivenUp
from crawler.middlewares.hold import ParkingLot

if TYPE_CHECKING:
    from urllib.parse import ParseResult, SplitResult

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
    cache_hosts: int = defaults.ROBOTSTXT_CACHE_HOSTS

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
        return cls(backoff, most, seconds("ROBOTSTXT_UNAVAILABLE_MAX_SECONDS"),
                   config.get_int(settings, "ROBOTSTXT_CACHE_HOSTS",
                                  defaults.ROBOTSTXT_CACHE_HOSTS, lo=0))  # fmt: skip


#: Why a host is not there (:func:`down_reason`): stat suffix -> words for the log.
DOWN_REASONS = {
    "connection_refused": "connection refused",
    "dns_lookup_failed": "DNS lookup failed",
    "tls_handshake_failed": "TLS handshake failed",
    "no_route_to_host": "no route to host",
}
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_UNKNOWN: Any = object()  # a host whose robots.txt was never asked for
#: the first wait before robots.txt of a host not there is asked again; doubles per retry
DOWN_RETRY_SECONDS = 1.0


def robots_key(url: ParseResult | SplitResult) -> str:
    """``scheme://host[:port]``: what one robots.txt covers (RFC 9309 2.3), the default port
    dropped (``http://h:80`` is ``http://h``)."""
    netloc = url.netloc
    default = _DEFAULT_PORTS.get(url.scheme)
    if default is not None and netloc.endswith(default):
        netloc = netloc[: -len(default)]
    return f"{url.scheme}://{netloc}"


def down_reason(exc: BaseException) -> str | None:
    """A :data:`DOWN_REASONS` key when a failed download says the host is not there at all
    (its cause chain, and the reasons of a response never received), else None: timeouts and
    connections lost mid-answer are not (module docstring)."""
    from OpenSSL.SSL import Error as TLSError

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, (DownloadConnectionRefusedError, ConnectionRefusedError)):
            return "connection_refused"
        if isinstance(error, (CannotResolveHostError, DNSLookupError)):
            return "dns_lookup_failed"
        if isinstance(error, NoRouteError):
            return "no_route_to_host"
        if isinstance(error, ResponseNeverReceived) and any(
                isinstance(reason.value, TLSError) for reason in error.reasons):
            return "tls_handshake_failed"
        todo.extend(e for e in (error.__cause__, error.__context__) if e is not None)
    return None


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

    #: the requests of a host given up stay owed in the journal (:class:`HostGivenUp`)
    OWED = True

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.options = RobotsSettings.from_settings(crawler.settings)
        self._down: dict[str, _Outage] = {}
        self._given_up: dict[str, str] = {}  # robots_key -> why, for the IgnoreRequest
        self._answered: set[str] = set()  # hosts that gave any HTTP answer to robots.txt
        self._waiting: dict[str, int] = {}  # requests in robot_parser, per host
        self._retries = crawler.settings.getbool("RETRY_ENABLED")
        self._lot = ParkingLot(crawler, "robotstxt/held_at_close")
        self._recent: dict[str, None] = {}  # hosts with a parser, least recently asked first
        crawler.signals.connect(self._cancel_timers, signal=signals.spider_closed)

    async def process_request(self, request: Request) -> None:  # type: ignore[override]
        if request.meta.get("dont_obey_robotstxt") or request.url.startswith(("data:", "file:")):
            return
        key = robots_key(urlparse_cached(request))
        parser = self._parsers.get(key, _UNKNOWN)
        if parser is _UNKNOWN or isinstance(parser, Deferred):  # to fetch, or being fetched
            parser = await self._wait_for_parser(key, request)
        if parser is not None:
            self._asked(key)
        self._gate(key, request)
        self.process_request_2(parser, request)

    def _asked(self, key: str) -> None:
        """``key``'s parser was just used: the most recent; forget the least recent past
        ``ROBOTSTXT_CACHE_HOSTS`` (only parsed ones: a host fetched, held or given up keeps its
        state, and requests waiting for a parser have it already)."""
        most = self.options.cache_hosts
        if not most:  # every host's parser kept: nothing to track
            return
        recent = self._recent
        recent.pop(key, None)
        recent[key] = None
        while len(recent) > most:
            old = next(iter(recent))
            del recent[old]
            parser = self._parsers.get(old)
            if parser is not None and not isinstance(parser, Deferred):
                del self._parsers[old]
                self._stats.inc_value("robotstxt/forgotten")

    async def _wait_for_parser(self, key: str, request: Request) -> RobotParser | None:
        """:meth:`robot_parser`, counted in ``_waiting`` meanwhile (a host given up says how
        many requests that ended)."""
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            return await self.robot_parser(request)
        finally:
            left = self._waiting[key] - 1
            if left:
                self._waiting[key] = left
            else:
                del self._waiting[key]

    def _gate(self, key: str, request: Request) -> None:
        """Hold a request to a host whose robots.txt is unavailable; end it once given up."""
        why = self._given_up.get(key)
        if why is not None:
            self._stats.inc_value("robotstxt/given_up")
            raise HostGivenUp(f"{key} given up ({why}): request not fetched", owed=self.OWED)
        if key in self._down:
            self._stats.inc_value("robotstxt/held")
            self._lot.park(key, request)

    async def robot_parser(self, request: Request) -> RobotParser | None:
        key = robots_key(urlparse_cached(request))
        if key not in self._parsers:
            self._parsers[key] = Deferred()
            await self._fetch(f"{key}/robots.txt", key, request)
        parser = self._parsers[key]
        if isinstance(parser, Deferred):
            return await maybe_deferred_to_future(parser)
        return parser

    async def _fetch(self, robotsurl: str, key: str, request: Request) -> None:
        """Fetch robots.txt: our backoff replaces RetryMiddleware's immediate retries, but for
        a host that is not there (module docstring)."""
        robotsreq = Request(robotsurl, priority=self.DOWNLOAD_PRIORITY, callback=NO_CALLBACK,
                            meta={"dont_obey_robotstxt": True, "dont_retry": True})  # fmt: skip
        self._stats.inc_value("robotstxt/request_count")
        attempts = 1
        while True:
            try:
                response = await self.crawler.engine.download_async(robotsreq)
            except IgnoreRequest as exc:  # refused by another component: Scrapy allows all
                self._pending(key)
                self._robots_error(exc, key)
                self._recovered(key)
            except Exception as exc:
                self._stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
                reason = None if key in self._answered else down_reason(exc)
                if reason is None:
                    self._unavailable(key, robotsurl, f"{type(exc).__name__}: {exc}")
                    return
                retry = self._retry(robotsreq, exc)
                if retry is None:
                    self._host_down(key, reason, attempts, exc)
                    return
                robotsreq, attempts = retry, attempts + 1
                # spaced (1 s, 2 s, ...): a server still starting or a DNS blip survives
                await sleep(DOWN_RETRY_SECONDS * 2 ** (attempts - 2))
                continue
            else:
                self._answered.add(key)
                await self._parse_robots(response, key, request)
            return

    def _retry(self, robotsreq: Request, exc: Exception) -> Request | None:
        """The next attempt as RetryMiddleware would make it (RETRY_TIMES, its stats), or None."""
        if not self._retries or self.crawler.spider is None:
            return None
        return get_retry_request(robotsreq, spider=self.crawler.spider, reason=exc,
                                 give_up_log_level=logging.DEBUG)  # our WARNING says it

    def _host_down(self, key: str, reason: str, attempts: int, exc: BaseException) -> None:
        """Give up a host that is not there: everything waiting for it, held or to come ends
        as ignored. One WARNING, with what to check."""
        self._stats.inc_value(f"robotstxt/host_down/{reason}")
        ended = self._stop(key, DOWN_REASONS[reason])
        logger.warning("%s is not there (%s, %d attempt(s) at robots.txt): host given up, %d "
                       "request(s) to it not fetched, later ones too%s. Check the host name, "
                       "the port, and http vs https (%s)", key, DOWN_REASONS[reason], attempts,
                       ended, self._owed_note(), exc)  # fmt: skip

    def _owed_note(self) -> str:
        """What becomes of the requests given up (:class:`~crawler.exceptions.HostGivenUp`)."""
        if self.OWED and self.crawler.settings.get("JOBDIR"):
            return " (they stay owed in JOBDIR: a resumed run asks again)"
        return ""

    def _stop(self, key: str, why: str) -> int:
        """Mark ``key`` given up; end what waits for it. How many requests that ends."""
        outage = self._down.pop(key, None)
        if outage is not None and outage.timer is not None:
            outage.timer.cancel()
        self._given_up[key] = why
        waiting = self._waiting.get(key, 0)
        self._resolve(key)  # the requests waiting for robots.txt go on and end as given up
        return waiting + self._lot.release(key)  # the held ones come back and end too

    async def _parse_robots(self, response: Response, netloc: str, request: Request) -> None:
        """``netloc`` is the :func:`robots_key` (Scrapy's name for the argument)."""
        body = accepted_body(response)
        if body is None:
            self._stats.inc_value(f"robotstxt/response_status_count/{response.status}")
            self._unavailable(netloc, f"{netloc}/robots.txt", f"HTTP {response.status}")
            return
        if response.status >= 400:
            self._stats.inc_value("robotstxt/allow_4xx")
            logger.info("robots.txt of %s answered %d: everything allowed", netloc,
                        response.status)  # fmt: skip
        self._pending(netloc)
        await super()._parse_robots(response.replace(body=body), netloc, request)
        self._recovered(netloc)

    def _pending(self, key: str) -> None:
        """Scrapy's methods resolve a Deferred; a fetch after an outage has none (the host's
        requests were held meanwhile, not waiting on it)."""
        if not isinstance(self._parsers.get(key), Deferred):
            self._parsers[key] = Deferred()

    def _resolve(self, key: str) -> None:
        """Requests waiting for this fetch go on (and see the host held)."""
        pending = self._parsers.get(key)
        self._parsers[key] = None
        if isinstance(pending, Deferred):
            pending.callback(None)

    def _unavailable(self, key: str, url: str, reason: str) -> None:
        self._stats.inc_value("robotstxt/unavailable")
        now = time.monotonic()
        outage = self._down.get(key)
        if outage is None:
            outage = self._down[key] = _Outage(url, now, self.options.backoff)
            logger.info("robots.txt of %s unavailable (%s): nothing is fetched from that host "
                        "until it answers (tried again for up to %.0f s)", key, reason,
                        self.options.max_seconds)  # fmt: skip
        else:
            outage.delay = min(outage.delay * 2, self.options.backoff_max)
        self._resolve(key)
        left = outage.since + self.options.max_seconds - now
        if left <= 0:
            self._give_up(key)
            return
        outage.timer = call_later(min(outage.delay, left), self._again, key)

    def _again(self, key: str) -> None:
        outage = self._down.get(key)
        if outage is None or self.crawler.engine is None or self.crawler.spider is None:
            return
        request = Request(outage.url, callback=NO_CALLBACK)
        deferred_from_coro(self._fetch(outage.url, key, request)).addErrback(
            lambda failure: logger.error("robots.txt of %s: %s", key, failure.value))

    def _recovered(self, key: str) -> None:
        outage = self._down.pop(key, None)
        if outage is None:
            return
        released = self._lot.release(key)
        self._stats.inc_value("robotstxt/released", released)
        logger.info("robots.txt of %s answered after %.1f s: %d held request(s) re-queued",
                    key, time.monotonic() - outage.since, released)  # fmt: skip

    def _give_up(self, key: str) -> None:
        since = self._down[key].since
        released = self._stop(key, "robots.txt unavailable")
        logger.warning("robots.txt of %s still unavailable after %.0f s: host given up, "
                       "%d held request(s) not fetched (ROBOTSTXT_UNAVAILABLE_MAX_SECONDS)",
                       key, time.monotonic() - since, released)  # fmt: skip

    def _cancel_timers(self, **_: Any) -> None:
        for outage in self._down.values():
            if outage.timer is not None:
                outage.timer.cancel()

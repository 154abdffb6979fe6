"""``Retry-After`` on 429 and 503: the host is paused, the request retried after the pause.

Scrapy 2.19's ``RetryMiddleware`` retries a 429 or a 503 at once, whatever ``Retry-After``
asks (measured: a 429 with ``Retry-After: 60`` was retried three times 0.7 s apart).
:class:`RetryAfterMiddleware` (every profile; ``process_response`` runs before
``RetryMiddleware``'s, which still handles every other retry and the give-up) reads the header
(delta-seconds or an HTTP date) of a 429 or 503 in ``RETRY_HTTP_CODES``, pauses the host (its
downloader slot key) for that long, capped by ``RETRY_AFTER_MAX_SECONDS``, and returns the
retry request (``RETRY_TIMES``, ``max_retry_times`` and ``dont_retry`` obeyed, counted as
Scrapy's ``retry/count``). Until the pause ends, requests to that host (the retry among them)
are held back outside the downloader (:mod:`crawler.middlewares.hold`), so they hold none of
``CONCURRENT_REQUESTS`` and other hosts keep going; the slot's delay clock is pushed past the
pause too, for requests already queued in the slot when ``DOWNLOAD_DELAY`` is set. A
``Retry-After`` that is missing or unreadable leaves the retry to ``RetryMiddleware`` (at once).

The pause is this process's: in the distributed profile a host is leased to one worker at a time
(:mod:`crawler.cluster.frontier`), so the worker that owns it pauses it; a worker that takes
the host over later (the owner died) does not know of the pause.

Stats: ``retry/retry_after`` (retries paused), ``retry/retry_after_capped`` (pauses cut to
the cap), ``retry/retry_after_held`` (requests held during a pause),
``retry/retry_after_held_at_close``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import NotConfigured
from scrapy.utils.response import response_status_message

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.middlewares.hold import ParkingLot

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Statuses whose ``Retry-After`` is obeyed (RFC 9110 10.2.3, RFC 6585 4).
STATUSES = (429, 503)


@dataclass(frozen=True)
class RetryAfterSettings:
    """``RETRY_AFTER_MAX_SECONDS``: the longest pause a ``Retry-After`` gets, in seconds."""

    max_seconds: float = defaults.RETRY_AFTER_MAX_SECONDS

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> RetryAfterSettings:
        """Read and check it, >= 0 (SettingError)."""
        return cls(config.get_float(settings, "RETRY_AFTER_MAX_SECONDS",
                                    defaults.RETRY_AFTER_MAX_SECONDS, 0))  # fmt: skip


def retry_after_seconds(value: bytes | str | None) -> float | None:
    """Seconds a ``Retry-After`` value asks for (a past date: 0); None if unreadable."""
    text = (value.decode("latin-1") if isinstance(value, bytes) else value or "").strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class RetryAfterMiddleware:
    """Pauses a host that answered 429/503 with ``Retry-After`` (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("RETRY_ENABLED"):
            raise NotConfigured
        self.crawler = crawler
        self.cap = RetryAfterSettings.from_settings(settings).max_seconds
        self.codes = set(STATUSES) & {int(x) for x in settings.getlist("RETRY_HTTP_CODES")}
        self.max_retry_times = settings.getint("RETRY_TIMES")
        self._paused: dict[str, float] = {}  # slot key -> monotonic end of its pause
        self._lot = ParkingLot(crawler, "retry/retry_after_held_at_close")
        self._logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RetryAfterMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        key = self._slot_key(request)
        until = self._paused.get(key)
        if until is None:
            return
        if until <= time.monotonic():
            del self._paused[key]
            return
        self._inc("retry/retry_after_held")
        self._lot.release_later(key, until - time.monotonic())  # re-armed: never left behind
        self._lot.park(key, request)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if response.status not in self.codes or request.meta.get("dont_retry"):
            return response
        seconds = retry_after_seconds(response.headers.get(b"Retry-After"))
        if seconds is None or not self._retries_left(request):
            return response  # RetryMiddleware retries at once, or gives up
        retry = get_retry_request(request, spider=self.crawler.spider,  # type: ignore[arg-type]
                                  reason=response_status_message(response.status))  # fmt: skip
        if retry is None:
            return response
        self._pause(request, response, seconds)
        return retry

    def _retries_left(self, request: Request) -> bool:
        most = request.meta.get("max_retry_times", self.max_retry_times)
        return bool(request.meta.get("retry_times", 0) < most)

    def _pause(self, request: Request, response: Response, seconds: float) -> None:
        """Hold the host's requests until the pause ends (the retry comes back as one)."""
        pause = min(seconds, self.cap)
        self._inc("retry/retry_after")
        if pause < seconds:
            self._inc("retry/retry_after_capped")
        key = self._slot_key(request)
        until = max(self._paused.get(key, 0.0), time.monotonic() + pause)
        self._paused[key] = until
        self._lot.release_later(key, until - time.monotonic())
        self._push_slot(key, until)
        if not self._logged:
            self._logged = True
            logger.info("Retry-After %.0f s on %s (HTTP %d): host %s paused %.1f s, the request "
                        "retried then (RETRY_AFTER_MAX_SECONDS=%g; further pauses not logged)",
                        seconds, request.url, response.status, key, pause, self.cap)  # fmt: skip

    def _push_slot(self, key: str, until: float) -> None:
        """Requests already queued in the host's slot wait too (when it has a delay)."""
        slot = self.crawler.engine.downloader.slots.get(key)
        if slot is not None and slot.delay:
            slot.lastseen = max(slot.lastseen, until)

    def _slot_key(self, request: Request) -> str:
        return str(self.crawler.engine.downloader.get_slot_key(request))

    def _inc(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)

"""A bound on a response's header section: its bytes and its header lines.

Scrapy's HTTP/1.1 handler reads a response's headers (twisted's ``HTTPClientParser``) with
no bound on their number: each line is at most 16 KiB, but a server sending header lines
without end is read until ``DOWNLOAD_TIMEOUT`` (measured: 1 GiB of ``X-Filler`` lines over
three tries, 1.6 GB of RSS); ``DOWNLOAD_MAXSIZE`` counts body bytes only.

:class:`HeaderLimitDownloadHandler` (the ``http``/``https`` handler of every profile; it is
:class:`crawler.middlewares.politeness.PoliteDownloadHandler` with the bound) counts the status
line and the header lines as they arrive, line endings included. Past ``DOWNLOAD_MAX_HEADER_BYTES``
(default 256 KiB, Chrome's own limit, so a page a browser loads is never refused) or
``DOWNLOAD_MAX_HEADER_COUNT`` lines (default 500; Python's ``http.client``, under ``requests``
and ``urllib``, refuses more than 100) the connection is dropped at once, before the rest is
read, and the request fails with :class:`ResponseHeadersTooLarge` (an ``IgnoreRequest``: not
retried, as the same server would send the same headers). Counted in
``downloader/headers_too_large``; the first refusal is logged at WARNING, the others at DEBUG.
0 turns a bound off.

Limits: memory stays within the bound plus one read from the socket (64 KiB); bytes the
server already sent into the kernel's buffers are not read, only dropped. Trailers of a
chunked body are not counted (Twisted ignores them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy.core.downloader.handlers.http11 import (
    _LenientHTTP11ClientFactory,
    _LenientHTTP11ClientProtocol,
    _LenientHTTPClientParser,
)
from scrapy.exceptions import DownloadFailedError, IgnoreRequest

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.middlewares.politeness import PoliteDownloadHandler

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.interfaces import IAddress
    from twisted.web._newclient import HTTP11ClientProtocol
    from twisted.web._newclient import Request as TxRequest

logger = logging.getLogger(__name__)

STAT = "downloader/headers_too_large"


@dataclass(frozen=True)
class HeaderLimitSettings:
    """``DOWNLOAD_MAX_HEADER_BYTES`` and ``DOWNLOAD_MAX_HEADER_COUNT`` (0: no bound)."""

    max_bytes: int = defaults.DOWNLOAD_MAX_HEADER_BYTES
    max_count: int = defaults.DOWNLOAD_MAX_HEADER_COUNT

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> HeaderLimitSettings:
        """Read and check both, each >= 0 (SettingError)."""
        return cls(config.get_int(settings, "DOWNLOAD_MAX_HEADER_BYTES",
                                  defaults.DOWNLOAD_MAX_HEADER_BYTES, lo=0),
                   config.get_int(settings, "DOWNLOAD_MAX_HEADER_COUNT",
                                  defaults.DOWNLOAD_MAX_HEADER_COUNT, lo=0))  # fmt: skip


class HeaderLimitExceeded(Exception):
    """Raised by the parser: the header section grew past a bound (what, and the bound)."""


class ResponseHeadersTooLarge(IgnoreRequest):
    """A response refused for its header section; the connection was dropped."""


class _BoundedParser(_LenientHTTPClientParser):
    """Scrapy's lenient response parser, counting the header section as it arrives."""

    max_bytes = 0
    max_count = 0
    header_bytes = 0
    header_count = 0

    def lineReceived(self, line: bytes) -> None:
        self.header_bytes += len(line) + 1  # + the "\n" LineReceiver took off
        if line not in (b"", b"\r"):  # the blank line that ends the headers is no header
            self.header_count += 1
        if self.max_bytes and self.header_bytes > self.max_bytes:
            raise HeaderLimitExceeded(f"more than DOWNLOAD_MAX_HEADER_BYTES={self.max_bytes}"
                                      " bytes of headers")
        if self.max_count and self.header_count > self.max_count + 1:  # + the status line
            raise HeaderLimitExceeded(f"more than DOWNLOAD_MAX_HEADER_COUNT={self.max_count}"
                                      " header lines")
        super().lineReceived(line)


class _BoundedProtocol(_LenientHTTP11ClientProtocol):
    limits: ClassVar[HeaderLimitSettings] = HeaderLimitSettings(0, 0)

    def request(self, request: TxRequest) -> Any:
        deferred = super().request(request)
        parser = self._parser
        if parser is not None:  # the parser of this request (see Scrapy's class swap)
            parser.__class__ = _BoundedParser
            assert isinstance(parser, _BoundedParser)
            parser.max_bytes = self.limits.max_bytes
            parser.max_count = self.limits.max_count
        return deferred


def _factory(limits: HeaderLimitSettings) -> type[_LenientHTTP11ClientFactory]:
    """A connection factory whose protocols bound their responses' headers by ``limits``."""
    protocol = type("BoundedProtocol", (_BoundedProtocol,), {"limits": limits})

    class BoundedFactory(_LenientHTTP11ClientFactory):
        def buildProtocol(self, addr: IAddress | None) -> HTTP11ClientProtocol:
            return protocol(self._quiescentCallback)  # type: ignore[no-any-return]

    return BoundedFactory


def _limit_exceeded(exc: BaseException) -> HeaderLimitExceeded | None:
    """The :class:`HeaderLimitExceeded` behind a failed download, if that is what failed it
    (Twisted wraps it in ``ResponseFailed``, Scrapy that in ``DownloadFailedError``)."""
    seen: list[BaseException] = [exc]
    while seen:
        current = seen.pop()
        if isinstance(current, HeaderLimitExceeded):
            return current
        seen += [f.value for f in getattr(current, "reasons", ()) if f.value is not current]
        if current.__cause__ is not None:
            seen.append(current.__cause__)
    return None


class HeaderLimitDownloadHandler(PoliteDownloadHandler):
    """The project's HTTP/1.1 handler with the header bound (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.limits = HeaderLimitSettings.from_settings(crawler.settings)
        self._pool._factory = _factory(self.limits)
        self._logged = False

    async def download_request(self, request: Request) -> Response:
        try:
            return await super().download_request(request)
        except DownloadFailedError as exc:
            cause = _limit_exceeded(exc)
            if cause is None:
                raise
            self._refused(request, cause)
            raise ResponseHeadersTooLarge(f"{request.url}: {cause}") from None

    def _refused(self, request: Request, cause: HeaderLimitExceeded) -> None:
        if self._crawler.stats is not None:
            self._crawler.stats.inc_value(STAT)
        level = logging.DEBUG if self._logged else logging.WARNING
        self._logged = True
        logger.log(level, "Response refused, connection dropped: %s: %s (further ones "
                   "counted in %s)", request.url, cause, STAT,
                   extra={"spider": self._crawler.spider})  # fmt: skip


__all__ = ["STAT", "HeaderLimitDownloadHandler", "HeaderLimitSettings", "ResponseHeadersTooLarge"]

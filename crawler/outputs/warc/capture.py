"""``RawCaptureMiddleware``: every response as the download handler returned it, for the WARC.

Scrapy calls ``process_response`` from the highest order down, so at order 950 (above
``HttpCacheMiddleware``, 900) this middleware sees every response first: before
``HttpCompressionMiddleware`` (590) decompresses the body and strips ``Content-Encoding``, before
``RedirectMiddleware`` (600) turns a 3xx into a new request, before ``RetryMiddleware`` (550)
retries a 5xx. Its ``process_request`` runs last, so the request headers it records are those
sent (cookies, proxy auth and ``Accept-Encoding`` included).

Every exchange is captured, whatever its status or type (a response served from Scrapy's
HTTP cache is not an exchange: skipped). Two paths:

* a response that may become a stored page (:func:`wants_page`: status 2xx, a ``Content-Type``
  that is HTML, or none: Scrapy sniffs the body; a request with a callback, not HEAD) waits in
  ``request.meta[WARC_CAPTURE]`` (:mod:`crawler.meta`); the WARC extension takes it out when
  the response leaves the downloader (``response_received``) and writes it once the page's
  fate is committed;
* any other (a redirect, 4xx/5xx, robots.txt, a PDF or JSON body, a HEAD request) is sent at
  once with :data:`crawler.signals.exchange_captured`: the extension writes it as it is.

A capture still in the meta when the next response of that request arrives (a meta refresh
turned a 200 into a new request, and Scrapy copies the meta) is sent as an exchange first.
A body longer than ``WARC_RECORD_MAX_BYTES`` (when set) is cut to it and the capture marked
truncated (``WARC-Truncated: length``); a response Scrapy flags ``dataloss`` (the connection
closed before the announced length) is marked ``disconnect``. Off (``NotConfigured``) when
``WARC_OUTPUT`` is empty. Stats: ``warc/captured``, ``warc/truncated``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured
from scrapy.http.request import NO_CALLBACK

from crawler import signals as dedup_signals
from crawler.content.text import media_type
from crawler.meta import WARC_CAPTURE
from crawler.outputs.warc import WarcOptions
from crawler.outputs.warc.records import Capture, HeaderList, warc_date
from crawler.urls.fingerprint import canonical_url_of
from crawler.urls.urlnorm import UrlPolicy

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Headers, Response

_HTML_TYPES = ("text/html", "application/xhtml+xml")
#: Request headers never written: the proxy's credentials were no part of the exchange with
#: the site (a request's own ``Authorization`` and ``Cookie`` were, and are kept).
UNRECORDED_HEADERS = frozenset({"proxy-authorization"})


def http_version(protocol: str | None) -> str:
    """The version of the exchange as a WARC ``application/http`` block writes it: HTTP/2
    (``h2``) and an unknown one as ``HTTP/1.1``."""
    if protocol and protocol.upper().startswith("HTTP/1."):
        return protocol.upper()
    return "HTTP/1.1"


def header_list(headers: Headers) -> HeaderList:
    """Scrapy headers as ``(name, value)`` strings (bytes read as Latin-1, as on the wire)."""
    return [(name.decode("latin-1"), value.decode("latin-1"))
            for name, values in headers.items() for value in values]  # fmt: skip


def wants_page(request: Request, response: Response) -> bool:
    """A response that may become a stored page (module docstring)."""
    if request.method == "HEAD" or request.callback is NO_CALLBACK:
        return False
    if not 200 <= response.status < 300:
        return False
    ctype = media_type(response.headers.get(b"Content-Type"))
    return not ctype or ctype in _HTML_TYPES


def capture_of(request: Request, response: Response, policy: UrlPolicy | None = None,
               now: datetime | None = None, max_bytes: int = 0) -> Capture:
    """The :class:`Capture` of an exchange, stamped ``now`` (default: the current time), its
    body cut to ``max_bytes`` when that is set (0: whole)."""
    parts = urlsplit(request.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = [(name, value) for name, value in header_list(request.headers)
            if name.lower() not in UNRECORDED_HEADERS]  # fmt: skip
    if not any(name.lower() == "host" for name, _ in sent):
        host = parts.netloc.rpartition("@")[2]  # never the URL's user:password
        sent.insert(0, ("Host", host))
    stamp = warc_date(now)
    ip = getattr(response, "ip_address", None)
    body, truncated = response.body, None
    if max_bytes and len(body) > max_bytes:
        body, truncated = body[:max_bytes], "length"
    elif "dataloss" in response.flags:
        truncated = "disconnect"
    return Capture(
        url=response.url,
        canonical_url=canonical_url_of(request, policy) or response.url,
        date=stamp,
        ip=str(ip) if ip is not None else None,
        method=request.method,
        target=target,
        request_headers=sent,
        request_body=request.body,
        protocol=http_version(getattr(response, "protocol", None)),
        status=response.status,
        headers=header_list(response.headers),
        body=body,
        truncated=truncated,
    )


class RawCaptureMiddleware:
    """Downloader middleware capturing every exchange (module docstring)."""

    def __init__(self, policy: UrlPolicy | None = None, max_bytes: int = 0) -> None:
        self.policy = policy
        self.max_bytes = max_bytes
        self.crawler: Crawler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RawCaptureMiddleware:
        options = WarcOptions.from_settings(crawler.settings)
        if not options.enabled:
            raise NotConfigured
        middleware = cls(UrlPolicy.from_settings(crawler.settings), options.record_max_bytes)
        middleware.crawler = crawler
        return middleware

    def process_response(self, request: Request, response: Response,
                         spider: Any = None) -> Response:
        earlier = request.meta.pop(WARC_CAPTURE, None)
        if earlier is not None:
            self._send(earlier)
        if "cached" in response.flags:
            return response
        capture = capture_of(request, response, self.policy, max_bytes=self.max_bytes)
        self._inc("warc/captured")
        if capture.truncated:
            self._inc("warc/truncated")
        if wants_page(request, response):
            request.meta[WARC_CAPTURE] = capture
        else:
            self._send(capture)
        return response

    def _send(self, capture: Capture) -> None:
        if self.crawler is not None:
            self.crawler.signals.send_catch_log(dedup_signals.exchange_captured,
                                                capture=capture)  # fmt: skip

    def _inc(self, key: str) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)

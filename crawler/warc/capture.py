"""``RawCaptureMiddleware``: the response as the download handler returned it, for the WARC.

Scrapy calls ``process_response`` from the highest order down, so at order 950 (above
``HttpCacheMiddleware``, 900) this middleware sees every response first: before
``HttpCompressionMiddleware`` (590) decompresses the body and strips ``Content-Encoding``, before
``RedirectMiddleware`` (600) turns a 3xx into a new request. Its ``process_request`` runs last,
so the request headers it records are those sent (cookies, proxy auth and ``Accept-Encoding``
included).

Only responses that may become a stored page are kept: status 2xx, a ``Content-Type`` that
is HTML (or none: Scrapy sniffs the body), a request with a callback (robots.txt requests have
``NO_CALLBACK``). The capture goes to ``request.meta[CAPTURE_META]``; the WARC extension takes
it out when the response leaves the downloader (``response_received``), so a redirect target
or a retry never carries an old one. HEAD requests are skipped. Off (``NotConfigured``) when
``WARC_OUTPUT`` is empty. Stat: ``warc/captured``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured
from scrapy.http.request import NO_CALLBACK

from crawler.fingerprint import canonical_url_of
from crawler.text import media_type
from crawler.urlnorm import UrlPolicy
from crawler.warc import warc_options
from crawler.warc.records import Capture, HeaderList, warc_date

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Headers, Response

#: ``request.meta`` key of the :class:`Capture` of the request's response (taken out quickly).
CAPTURE_META = "warc_capture"
_HTML_TYPES = ("text/html", "application/xhtml+xml")


def header_list(headers: Headers) -> HeaderList:
    """Scrapy headers as ``(name, value)`` strings (bytes read as Latin-1, as on the wire)."""
    return [(name.decode("latin-1"), value.decode("latin-1"))
            for name, values in headers.items() for value in values]  # fmt: skip


def wants_capture(request: Request, response: Response) -> bool:
    """A response that may become a stored page (module docstring)."""
    if request.method == "HEAD" or request.callback is NO_CALLBACK:
        return False
    if not 200 <= response.status < 300:
        return False
    ctype = media_type(response.headers.get(b"Content-Type"))
    return not ctype or ctype in _HTML_TYPES


def capture_of(request: Request, response: Response, policy: UrlPolicy | None = None,
               now: datetime | None = None) -> Capture:
    """The :class:`Capture` of an exchange, stamped ``now`` (default: the current time)."""
    parts = urlsplit(request.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = header_list(request.headers)
    if not any(name.lower() == "host" for name, _ in sent):
        sent.insert(0, ("Host", parts.netloc))
    stamp = warc_date(now)
    ip = getattr(response, "ip_address", None)
    return Capture(
        url=response.url,
        canonical_url=canonical_url_of(request, policy) or response.url,
        date=stamp,
        ip=str(ip) if ip is not None else None,
        method=request.method,
        target=target,
        request_headers=sent,
        request_body=request.body,
        protocol=getattr(response, "protocol", None) or "HTTP/1.1",
        status=response.status,
        headers=header_list(response.headers),
        body=response.body,
    )


class RawCaptureMiddleware:
    """Downloader middleware keeping the raw exchange of would-be pages (module docstring)."""

    def __init__(self, policy: UrlPolicy | None = None) -> None:
        self.policy = policy
        self.crawler: Crawler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RawCaptureMiddleware:
        if not warc_options(crawler.settings).enabled:
            raise NotConfigured
        middleware = cls(UrlPolicy.from_settings(crawler.settings))
        middleware.crawler = crawler
        return middleware

    def process_response(self, request: Request, response: Response,
                         spider: Any = None) -> Response:
        request.meta.pop(CAPTURE_META, None)
        if wants_capture(request, response):
            request.meta[CAPTURE_META] = capture_of(request, response, self.policy)
            if self.crawler is not None and self.crawler.stats is not None:
                self.crawler.stats.inc_value("warc/captured")
        return response

"""``WideEncodingMiddleware``: UTF-16 and UTF-32 pages without a byte-order mark decoded right.

Scrapy picks a text response's encoding (``TextResponse``, w3lib's ``html_to_unicode``) from a
byte-order mark, the ``Content-Type`` charset, a ``<meta charset>`` found in the raw bytes,
else the first of ASCII and UTF-8 that decodes the body, else a guess. UTF-16 or UTF-32 markup
without a BOM has none of the first three (a ``<meta>`` spelled with NUL bytes between its
letters is not found), decodes as ASCII or cp1252 with a NUL between characters, and its
markup then ends up stored as the page's text.

This downloader middleware sets the encoding of a text response that has neither a BOM nor a
charset in its ``Content-Type`` when its first bytes are ASCII characters in one of those
encodings (:func:`crawler.content.text.wide_encoding`: ``<\\0h\\0`` is UTF-16-LE, ``\\0\\0\\0<``
UTF-32-BE). Each is counted as ``dedup/encoding_detected/<encoding>``; the first is logged at
INFO. A declared charset is trusted, even a wrong one. At order 580 it runs after
``HttpCompressionMiddleware`` (590) has decompressed the body.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.http import TextResponse
from w3lib.encoding import http_content_type_encoding, read_bom

from crawler.content.text import wide_encoding

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class WideEncodingMiddleware:
    """Sets the encoding of BOM-less, undeclared UTF-16/32 text responses (module doc)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler
        self._logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WideEncodingMiddleware:
        return cls(crawler)

    def process_response(self, request: Request, response: Response,
                         spider: Any = None) -> Response:  # fmt: skip
        if not isinstance(response, TextResponse):
            return response
        encoding = undeclared_wide_encoding(response)
        if encoding is None:
            return response
        self._note(encoding, response.url)
        return response.replace(encoding=encoding)

    def _note(self, encoding: str, url: str) -> None:
        stats = self.crawler.stats if self.crawler is not None else None
        if stats is not None:
            stats.inc_value(f"dedup/encoding_detected/{encoding}")
        if not self._logged:
            self._logged = True
            logger.info("Page in %s without a byte-order mark or charset, decoded as such: %s "
                        "(further ones counted in dedup/encoding_detected/*)", encoding, url)


def undeclared_wide_encoding(response: TextResponse) -> str | None:
    """The wide encoding ``response`` starts in, when neither a BOM nor its Content-Type
    charset names one; None otherwise."""
    content_type = response.headers.get(b"Content-Type") or b""
    if http_content_type_encoding(content_type.decode("latin-1")):
        return None
    if read_bom(response.body)[0] is not None:
        return None
    return wide_encoding(response.body)

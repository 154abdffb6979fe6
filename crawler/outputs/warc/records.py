"""WARC/1.1 records of a fetched page, built with warcio, serialized one gzip member each.

A :class:`Capture` is one HTTP exchange as the download handler returned it: the request as
sent (method, target, headers, body) and the response before any downloader middleware below
order 950 changed it (status, headers, body still compressed per ``Content-Encoding``).

What "as received" cannot mean with Scrapy (Twisted parses the wire before any middleware):

* header names come in Scrapy's title case (``Content-Type``), grouped by name in arrival
  order; the reason phrase is the standard one for the status;
* Twisted removes the connection-control headers (``Transfer-Encoding``, ``Connection``,
  ``Keep-Alive``) and de-chunks the body; Scrapy puts ``Content-Length`` back first when the
  length was known. The payload is therefore the entity body (what WARC 1.1 digests anyway)
  and a chunked response has no length header;
* the request record lacks what Twisted adds on the wire except ``Host``, which is added.

Digests are warcio's: ``sha1:`` + base32 of the SHA-1, ``WARC-Payload-Digest`` over the body as
received, ``WARC-Block-Digest`` over the HTTP head and body. Header values keep their bytes
as received, non-ASCII ones included (:class:`RawHead`; warcio would %-encode them).
HTTP/2 (Scrapy's protocol ``h2``) is written as ``HTTP/1.1``, as Browsertrix does: a WARC's
``application/http`` block has the HTTP/1.x form.
"""

from __future__ import annotations

__floor__ = "library"

import base64
import hashlib
import io
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import TYPE_CHECKING

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

if TYPE_CHECKING:
    from collections.abc import Iterable

    from warcio.recordloader import ArcWarcRecord

#: zlib level of each record's gzip member (warcio uses 9: 1.71 against 1.38 ms for a 65 kB
#: page measured, for 0.4% fewer bytes).
GZIP_LEVEL = 6
WARC_VERSION = "1.1"
HeaderList = list[tuple[str, str]]


def warc_date(now: datetime | None = None) -> str:
    """A WARC-Date (ISO 8601 UTC with microseconds) of ``now`` (default: the current time)."""
    return datetime_to_iso_date((now or datetime.now(UTC)).replace(tzinfo=None), use_micros=True)


def sha1_digest(data: bytes) -> str:
    """``sha1:<base32>``, the form warcio writes and checks."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


@dataclass(slots=True)
class Capture:
    """One request and its response as exchanged (see the module docstring)."""

    url: str
    canonical_url: str
    date: str  # WARC-Date: when the response arrived, ISO 8601 UTC with microseconds
    ip: str | None
    method: str
    target: str  # request target: path and query
    request_headers: HeaderList
    request_body: bytes
    protocol: str
    status: int
    headers: HeaderList
    body: bytes
    #: ``WARC-Truncated`` reason when ``body`` is not the whole payload (``length``: cut to
    #: ``WARC_RECORD_MAX_BYTES``; ``disconnect``: the connection closed early), else None
    truncated: str | None = None
    _digest: str | None = field(default=None, repr=False)

    @property
    def payload_digest(self) -> str:
        if self._digest is None:
            self._digest = sha1_digest(self.body)
        return self._digest

    def response_head(self) -> StatusAndHeaders:
        reason = _reason(self.status)
        status = f"{self.status} {reason}" if reason else str(self.status)
        return RawHead(status, list(self.headers), protocol=self.protocol)

    def request_head(self) -> StatusAndHeaders:
        line = f"{self.method} {self.target} {self.protocol}"
        return RawHead(line, list(self.request_headers), is_http_request=True)


class RawHead(StatusAndHeaders):
    """An HTTP head serialized as the bytes it came as: the values were decoded as Latin-1
    (:func:`crawler.outputs.warc.capture.header_list`), so encoding them as Latin-1 gives the wire
    bytes back. warcio's own form %-encodes every non-ASCII value (RFC 8187), which would turn
    ``Location: /caf\xc3\xa9`` into another URL and ``Set-Cookie: k=\xe9`` into
    ``k%3D%C3%A9``."""

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        self.headers_buff = self.to_bytes(header_filter, "iso-8859-1")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class RecordBuilder:
    """warcio's record builder fixed to WARC/1.1, plus gzip-member serialization."""

    def __init__(self, gzip_level: int = GZIP_LEVEL) -> None:
        self._warc = _Serializer()
        self.gzip_level = gzip_level

    # --- records ------------------------------------------------------------------------------

    def exchange(self, capture: Capture) -> tuple[ArcWarcRecord, ArcWarcRecord]:
        """``(response, request)``: the request ``WARC-Concurrent-To`` the response."""
        response = self._warc.create_warc_record(
            capture.url, "response", payload=io.BytesIO(capture.body), length=len(capture.body),
            http_headers=capture.response_head(),
            warc_headers_dict=self._common(capture, self._payload(capture)))
        return response, self.request(capture, record_id(response))

    def request(self, capture: Capture, concurrent_to: str) -> ArcWarcRecord:
        body = capture.request_body
        return self._warc.create_warc_record(
            capture.url, "request", payload=io.BytesIO(body), length=len(body),
            http_headers=capture.request_head(),
            warc_headers_dict=self._common(capture, {"WARC-Concurrent-To": concurrent_to}))

    def revisit(self, capture: Capture, refers_to_uri: str, refers_to_date: str,
                refers_to_id: str | None) -> tuple[ArcWarcRecord, ArcWarcRecord]:
        """``(revisit, request)``: profile identical-payload-digest, HTTP head only."""
        extra = {"WARC-Refers-To": refers_to_id} if refers_to_id else {}
        revisit = self._warc.create_revisit_record(
            capture.url, capture.payload_digest, refers_to_uri, refers_to_date,
            http_headers=capture.response_head(),
            warc_headers_dict=self._common(capture, extra))
        return revisit, self.request(capture, record_id(revisit))

    def metadata(self, uri: str, date: str, fields: Iterable[tuple[str, object]],
                 refers_to: str | None = None,
                 concurrent_to: str | None = None) -> ArcWarcRecord:
        """A ``metadata`` record of ``application/warc-fields`` (``name: value`` lines; None
        values left out)."""
        body = "".join(f"{name}: {value}\r\n" for name, value in fields if value is not None)
        data = body.encode("utf-8")
        headers = {"WARC-Date": date}
        if refers_to:
            headers["WARC-Refers-To"] = refers_to
        if concurrent_to:
            headers["WARC-Concurrent-To"] = concurrent_to
        return self._warc.create_warc_record(
            uri, "metadata", payload=io.BytesIO(data), length=len(data),
            warc_content_type="application/warc-fields", warc_headers_dict=headers)

    def warcinfo(self, filename: str, info: dict[str, object]) -> ArcWarcRecord:
        return self._warc.create_warcinfo_record(filename, info)

    @staticmethod
    def _common(capture: Capture, extra: dict[str, str]) -> dict[str, str]:
        headers = {"WARC-Date": capture.date}
        if capture.ip:
            headers["WARC-IP-Address"] = capture.ip
        headers.update(extra)
        return headers

    @staticmethod
    def _payload(capture: Capture) -> dict[str, str]:
        headers = {"WARC-Payload-Digest": capture.payload_digest}
        if capture.truncated:
            headers["WARC-Truncated"] = capture.truncated
        return headers

    # --- bytes --------------------------------------------------------------------------------

    def to_bytes(self, record: ArcWarcRecord) -> bytes:
        """``record`` as one gzip member (a reader can start at its offset)."""
        compressor = zlib.compressobj(self.gzip_level, zlib.DEFLATED, zlib.MAX_WBITS + 16)
        return compressor.compress(self._warc.serialize(record)) + compressor.flush()


def record_id(record: ArcWarcRecord) -> str:
    return str(record.rec_headers.get_header("WARC-Record-ID"))


class _Serializer(WARCWriter):
    """warcio's writer, kept only for its record builder and its serialization of one record
    (uncompressed: :meth:`RecordBuilder.to_bytes` compresses at ``GZIP_LEVEL``)."""

    def __init__(self) -> None:
        super().__init__(None, gzip=False, warc_version=WARC_VERSION)

    def serialize(self, record: ArcWarcRecord) -> bytes:
        out = io.BytesIO()
        self._write_warc_record(out, record)
        return out.getvalue()

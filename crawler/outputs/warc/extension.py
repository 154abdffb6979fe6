"""``WarcWriter`` (extension): every HTTP exchange of the crawl, each page once its fate is known.

Captures come from :class:`crawler.outputs.warc.capture.RawCaptureMiddleware`. An exchange that
cannot become a stored page (a redirect with its ``Location``, a 4xx or 5xx, robots.txt, a PDF or
JSON body, a HEAD request, a soft-404 probe answered 404) arrives with
:data:`crawler.signals.exchange_captured` and is written at once: ``response`` and ``request``
(stat ``warc/exchange``), or, for a 2xx answer, a ``revisit`` when its non-empty payload is
byte-identical to a 2xx capture this process archived first (the same PDF under two URLs;
not a redirect or an error page: pywb replays a revisit of a 3xx with an empty body). A
would-be page waits here, keyed by request fingerprint, from
``response_received`` until the storage batch holding it commits (``batch_committed``,
:mod:`crawler.signals`), so its records say what the crawl database says of it. Waiting is
short (``STORAGE_BATCH_SECONDS``) and bounded by the pages in flight and in storage batches.
A would-be page that ends without a decision (``request_finished``: no text; ``spider_error``;
an item pipeline error or an outage that left it undecided; a batch that stored no row for it;
fetched again before its fate was known; turned into a new request by a meta refresh,
``request_scheduled``; still waiting when the spider closes) is written as an exchange too:
the archive holds every response the crawl received. A truncated capture
(``WARC-Truncated``) is never a revisit nor a revisit's target: its digest covers part of
the payload only.

What each fate writes (WARC/1.1, stats ``warc/<kind>``). One rule runs through all of them
(:meth:`WarcWriter._capture`): a 2xx payload byte-identical to one this process archived
first is a ``revisit`` (profile
``http://netpreserve.org/warc/1.1/revisit/identical-payload-digest``, HTTP head only, with
``WARC-Refers-To-Target-URI``, ``WARC-Refers-To-Date`` and ``WARC-Refers-To`` of that first
capture's response; a replay tool serves the original's bytes), never a second response.
Remembered: the last :data:`DIGEST_MEMORY` first captures of this process.

* **stored page**: ``response`` (headers and body as received), or a revisit when its bytes
  were archived first (its twin stored first and demoted since), and ``request``
  (``WARC-Concurrent-To`` it).
* **exact duplicate**: a revisit when its payload is byte-identical to a remembered capture
  (the kept page's, usually); else (same visible text, other bytes; or the kept page archived
  by another worker, an earlier crawl, or forgotten) as a near duplicate, with a ``note``.
* **near duplicate**: with ``WARC_NEAR_DUPLICATES = "response"`` (default) its ``response``
  (or a revisit) and ``request``, and a ``metadata`` record ``WARC-Concurrent-To`` it
  (``application/warc-fields``: ``duplicate-of``, ``reason``, ``distance``, both SimHashes,
  ``payload-digest``, and ``rule``, ``note`` when there is one): every capture replays, the
  decision beside it. With ``"metadata"`` the metadata record alone (smaller; the URL does
  not replay). The kept URL is in the content, not in ``WARC-Refers-To-Target-URI``: WARC
  1.1 keeps that field for revisits.
* **late drop** of a stored page (``page_demoted``: the page it names canonical came, rule
  ``canonical``; a page preferred to it came, ``preferred``; its fingerprint refreshed,
  ``refreshed``; or the settle step dropped it, ``settled``): its response is already in the
  archive; a ``metadata`` record with ``duplicate-of``, ``reason``, ``distance``, ``rule``
  (``WARC-Refers-To`` its response when this process wrote it) says it is no longer kept;
  its response stays a first capture (the bytes are the same). Drops later repointed to the new page
  (``dropped.rule = 'repointed'``) keep naming the demoted page in the archive: follow its
  metadata record.
* **stored again** by the settle step (a dropped page whose kept twin left, reason ``kept``,
  rule ``settled``): a ``metadata`` record with ``reason``, ``rule``, ``simhash`` and a note
  that it is kept now; its capture (a full response by default) was written when it was
  dropped.

Without a storage pipeline the records are written when the item pipelines finish with the
page (``item_scraped`` / ``item_dropped``). Files: :mod:`crawler.outputs.warc.files`; each closed
file gets its CDXJ index (``WARC_CDXJ``, :mod:`crawler.outputs.warc.index`, in a child process),
and the crawl's files a WACZ package at the end (``WARC_WACZ``, :mod:`crawler.outputs.warc.wacz`).
Writes run on the reactor thread: 0.27 ms for a 5.5 kB page, 1.4 ms for 65 kB (SHA-1 digests and
gzip).

Stats: ``warc/response`` (stored pages), ``warc/response/duplicate`` (near duplicates'
responses), ``warc/revisit``, ``warc/metadata/duplicate``,
``warc/metadata/demoted``, ``warc/metadata/kept`` (records written by fate),
``warc/exchange`` (exchanges written as they are), ``warc/bytes``, ``warc/files`` (closed at
the end), ``warc/indexes`` (CDXJ files written), ``warc/wacz`` (packages written),
``warc/write_errors`` (groups of records that could not be written: the crawl stops with
``warc_error``), ``warc/not_stored`` (a would-be page whose batch stored no row for it),
``warc/uncommitted`` (would-be pages still waiting when the spider closed: their batch never
committed);
``warc/captured`` and ``warc/truncated`` come from the middleware.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import TYPE_CHECKING, Any, NamedTuple

import scrapy
import warcio
from scrapy import signals
from scrapy.exceptions import NotConfigured

from crawler import __version__ as VERSION
from crawler import defaults
from crawler import signals as dedup_signals
from crawler.closing import close_crawl
from crawler.content.simhash import to_hex
from crawler.exceptions import DuplicatePage
from crawler.meta import WARC_CAPTURE
from crawler.outputs.warc import WarcOptions, check_warc
from crawler.outputs.warc.files import WarcFiles
from crawler.outputs.warc.index import Packaging
from crawler.outputs.warc.records import record_id, warc_date
from crawler.pipelines.storage import storage_enabled
from crawler.storage import dedup_settings
from crawler.vocab import (
    CANONICAL_RULE,
    EXACT_DUPLICATE,
    KEPT_REASON,
    PREFERRED_RULE,
    REFRESHED_RULE,
    SETTLED_RULE,
    Drop,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from warcio.recordloader import ArcWarcRecord

    from crawler.outputs.warc.records import Capture

logger = logging.getLogger(__name__)

#: Stored pages and exchanges remembered as revisit targets (about 0.5 kB each); older ones are
#: forgotten.
DIGEST_MEMORY = 100_000
LATE_RULES = (CANONICAL_RULE, PREFERRED_RULE, REFRESHED_RULE, SETTLED_RULE)
#: The finish reason of a crawl whose WARC file could not be written (a full disk).
WARC_ERROR = "warc_error"


class Archived(NamedTuple):
    """The response record of a payload's first capture: what a revisit refers to."""

    url: str
    digest: str
    date: str
    record_id: str


class WarcWriter:
    """Extension writing WARC records of decided pages (module docstring)."""

    def __init__(self, files: WarcFiles, near_duplicates: str = defaults.WARC_NEAR_DUPLICATES,
                 memory: int = DIGEST_MEMORY) -> None:
        self.files = files
        self.builder = files.builder
        self.near_duplicates = near_duplicates
        self.memory = memory
        self.crawler: Crawler | None = None
        self._pending: dict[str, Capture] = {}
        self._by_url: dict[str, Archived] = {}
        self._by_digest: dict[str, str] = {}  # payload digest -> url in _by_url
        self.packaging: Packaging | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WarcWriter:
        options = WarcOptions.from_settings(crawler.settings)
        if not options.enabled:
            raise NotConfigured
        check_warc(crawler.settings)  # the crawl command checked already; other runners may not
        ext = cls(WarcFiles(options.directory, options.prefix, options.max_size,
                            info=lambda: warcinfo_fields(crawler, options)),
                  options.near_duplicates)  # fmt: skip
        ext.crawler = crawler
        ext.packaging = Packaging(options, ext.files, software_name(),
                                  lambda: _crawl_name(crawler))
        ext.files.on_close = ext.packaging.file_closed
        connect = crawler.signals.connect
        connect(ext.exchange, signal=dedup_signals.exchange_captured)
        connect(ext.response_received, signal=signals.response_received)
        connect(ext.request_finished, signal=dedup_signals.request_finished)
        connect(ext.spider_error, signal=signals.spider_error)
        connect(ext.spider_closed, signal=signals.spider_closed)
        connect(ext.request_scheduled, signal=signals.request_scheduled)
        if storage_enabled(crawler.settings):
            connect(ext.batch_committed, signal=dedup_signals.batch_committed)
            connect(ext.item_failed, signal=signals.item_dropped)
            connect(ext.item_failed, signal=signals.item_error)
        else:
            connect(ext.item_scraped, signal=signals.item_scraped)
            connect(ext.item_dropped, signal=signals.item_dropped)
            connect(ext.page_demoted, signal=dedup_signals.page_demoted)
        logger.info("Writing WARC files to %s (prefix %s, %d bytes each at most)",
                    options.directory, options.prefix, options.max_size)
        return ext

    # --- captures in and out ----------------------------------------------------------------

    def _fingerprint(self, request: Request) -> str:
        if self.crawler is None or self.crawler.request_fingerprinter is None:
            return request.url
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    def response_received(self, response: Response, request: Request, spider: Any = None,
                          **_: Any) -> None:
        capture = request.meta.pop(WARC_CAPTURE, None)
        if capture is not None:
            fingerprint = self._fingerprint(request)
            earlier = self._pending.pop(fingerprint, None)
            if earlier is not None:  # fetched again before its fate was known (a lease
                self.exchange(earlier)  # requeued, a database outage): both are exchanges
            self._pending[fingerprint] = capture

    def request_scheduled(self, request: Request, spider: Any = None, **_: Any) -> None:
        """A would-be page a downloader middleware turned into a new request (a meta refresh
        copies the meta, capture included): its exchange is written now, before the new
        request may be filtered, queued to disk or fail."""
        capture = request.meta.pop(WARC_CAPTURE, None)
        if capture is not None:
            self.exchange(capture)

    def item_failed(self, item: Any, response: Response, exception: BaseException | None = None,
                    failure: Any = None, spider: Any = None, **_: Any) -> None:
        """Storage on: a page no batch will hold (an item pipeline error, a page left
        undecided by an outage, to be fetched again) is an exchange, written now."""
        if not isinstance(exception, DuplicatePage):  # a duplicate's row reaches batch_committed
            self._undecided(response)

    def request_finished(self, fingerprints: Sequence[str] = (), **_: Any) -> None:
        for fp in fingerprints:
            capture = self._pending.pop(fp, None)
            if capture is not None:
                self.exchange(capture)

    def spider_error(self, failure: Any, response: Response, spider: Any = None,
                     **_: Any) -> None:
        self._undecided(response)

    # --- fates --------------------------------------------------------------------------------

    def batch_committed(self, fingerprints: Sequence[str] = (), documents: Sequence[str] = (),
                        dropped: Sequence[Mapping[str, Any]] = (), **_: Any) -> None:
        """Write the records of every page the committed batch decided (stored first, then
        duplicates, then late drops: a revisit follows the response it refers to)."""
        captures = [c for c in (self._pending.pop(fp, None) for fp in fingerprints) if c]
        stored = set(documents)
        drops = {row["url"]: row for row in dropped if row.get("rule") not in LATE_RULES}
        for capture in captures:
            if capture.canonical_url in stored:
                self.stored(capture)
        for capture in captures:
            if capture.canonical_url in stored:
                continue
            row = drops.get(capture.url)
            if row is not None:
                self.dropped(capture, row)
            else:
                self._inc("warc/not_stored")
                self.exchange(capture)
        for row in dropped:
            if row.get("rule") not in LATE_RULES:
                continue
            if row.get("reason") == KEPT_REASON:  # the settle step stored the page again
                self.promoted(row)
            else:
                self.demoted(row)

    def item_scraped(self, item: Any, response: Response, spider: Any = None) -> None:
        capture = self._pop_response(response)
        if capture is not None:
            self.stored(capture)

    def item_dropped(self, item: Any, response: Response, exception: BaseException,
                     spider: Any = None) -> None:
        if not isinstance(exception, DuplicatePage):
            self._undecided(response)
            return
        capture = self._pop_response(response)
        if capture is None:
            return
        drop = exception.drop
        self.dropped(capture, {"url": drop.url, "reason": drop.reason,
                               "duplicate_of": drop.duplicate_of, "distance": drop.distance,
                               "simhash": drop.simhash,
                               "duplicate_simhash": drop.duplicate_simhash})

    def page_demoted(self, drop: Drop, **_: Any) -> None:
        self.demoted({"url": drop.url, "duplicate_of": drop.duplicate_of, "reason": drop.reason,
                      "distance": drop.distance, "rule": drop.rule or CANONICAL_RULE})

    def _pop_response(self, response: Response | None) -> Capture | None:
        if response is None or response.request is None:
            return None
        return self._pending.pop(self._fingerprint(response.request), None)

    def _undecided(self, response: Response | None) -> None:
        """The would-be page of ``response`` ended without a fate: written as an exchange."""
        capture = self._pop_response(response)
        if capture is not None:
            self.exchange(capture)

    # --- records ------------------------------------------------------------------------------

    def exchange(self, capture: Capture, **_: Any) -> None:
        """An exchange that is no page of the crawl: its response and request as they are
        (or a revisit of the first capture of its payload, :meth:`_capture`)."""
        self._capture(capture, "warc/exchange")

    def stored(self, capture: Capture) -> None:
        self._capture(capture, "warc/response")

    def dropped(self, capture: Capture, row: Mapping[str, Any]) -> None:
        if row.get("reason") == EXACT_DUPLICATE:
            if self.first_capture(capture) is not None:
                self._capture(capture, "warc/revisit")
                return
            known = self._by_url.get(str(row.get("duplicate_of") or ""))
            note = ("same text, payload differs from the kept page's" if known is not None
                    else "kept page not archived by this process: payload not compared")
            self._near(capture, row, note)
        else:
            self._near(capture, row, None)

    def first_capture(self, capture: Capture) -> Archived | None:
        """The first archived capture whose payload is byte-identical to ``capture``'s: a
        2xx response with a body, whole (a truncated capture's digest covers part of it),
        remembered (the last :data:`DIGEST_MEMORY`). None for a 3xx or an error page, which
        replay whole (pywb answers a 3xx revisit with an empty body)."""
        if not revisitable(capture):
            return None
        url = self._by_digest.get(capture.payload_digest)
        return self._by_url.get(url) if url is not None else None

    def _capture(self, capture: Capture, stat: str) -> str:
        """Write ``capture``: a ``revisit`` (profile identical-payload-digest, HTTP head only)
        of the first capture of its payload when there is one, else its ``response``
        (remembered as a first capture); its ``request`` either way. Returns the id of the
        revisit or response record."""
        first = self.first_capture(capture)
        if first is not None:
            revisit, request = self.builder.revisit(capture, first.url, first.date,
                                                    first.record_id)  # fmt: skip
            self._write([revisit, request], "warc/revisit")
            return record_id(revisit)
        response, request = self.builder.exchange(capture)
        self._write([response, request], stat)
        if revisitable(capture):
            self._remember(Archived(capture.url, capture.payload_digest, capture.date,
                                    record_id(response)))  # fmt: skip
        return record_id(response)

    def _near(self, capture: Capture, row: Mapping[str, Any], note: str | None) -> None:
        concurrent = None
        if self.near_duplicates == "response":
            concurrent = self._capture(capture, "warc/response/duplicate")
        fields = [*duplicate_fields(row), ("payload-digest", capture.payload_digest),
                  ("note", note)]  # fmt: skip
        record = self.builder.metadata(capture.url, capture.date, fields,
                                       concurrent_to=concurrent)  # fmt: skip
        self._write([record], "warc/metadata/duplicate")

    def demoted(self, row: Mapping[str, Any]) -> None:
        url = str(row["url"])
        archived = self._by_url.get(url)  # its response stays a first capture: same bytes
        note = "stored earlier, no longer kept: a duplicate of duplicate-of"
        fields = [*duplicate_fields(row), ("note", note)]
        date = warc_date()
        record = self.builder.metadata(url, date, fields,
                                       refers_to=archived.record_id if archived else None)
        self._write([record], "warc/metadata/demoted")

    def promoted(self, row: Mapping[str, Any]) -> None:
        """A page dropped earlier that the settle step stored again: a ``metadata`` record
        says it is kept now (its capture, written when it was dropped, stays as it is)."""
        fields = [("reason", row.get("reason")), ("rule", row.get("rule")),
                  ("simhash", to_hex(row.get("simhash"))),
                  ("note", "stored again by the settle step: kept, whatever an earlier "
                           "record of this URL says")]  # fmt: skip
        record = self.builder.metadata(str(row["url"]), warc_date(), fields)
        self._write([record], "warc/metadata/kept")

    # --- memory of archived pages -----------------------------------------------------------

    def _remember(self, archived: Archived) -> None:
        self._forget(archived.url)
        self._by_url[archived.url] = archived
        self._by_digest.setdefault(archived.digest, archived.url)
        while len(self._by_url) > self.memory:
            self._forget(next(iter(self._by_url)))

    def _forget(self, url: str) -> Archived | None:
        archived = self._by_url.pop(url, None)
        if archived is not None and self._by_digest.get(archived.digest) == url:
            del self._by_digest[archived.digest]
        return archived

    # --- output -------------------------------------------------------------------------------

    def _write(self, records: list[ArcWarcRecord], stat: str) -> None:
        try:
            written = self.files.write(records)
        except OSError as exc:  # a full disk: the file was cut back to its last whole record
            self._inc("warc/write_errors")
            url = records[0].rec_headers.get_header("WARC-Target-URI") if records else None
            logger.error("WARC write failed (%s) for %s in %s: the crawl stops (%s); free "
                         "space and resume it", exc.strerror or exc, url, self.files.path,
                         WARC_ERROR)  # fmt: skip
            close_crawl(self.crawler, WARC_ERROR)
            return
        self._inc(stat)
        self._inc("warc/bytes", written)

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        """Write what still waits (as exchanges), close the file, then wait for the indexes
        and write the package (:class:`crawler.outputs.warc.index.Packaging`), before ``StatsFile``
        (order 900) writes the stats."""
        if self._pending:
            self._inc("warc/uncommitted", len(self._pending))
            pending, self._pending = self._pending, {}
            for capture in pending.values():
                self.exchange(capture)
        self.files.close()
        self._inc("warc/files", len(self.files.closed_files))
        if self.packaging is None:
            return
        self.packaging.finish()
        self._inc("warc/indexes", len(self.packaging.indexes))
        self._inc("warc/wacz", len(self.packaging.packages))

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler is not None and self.crawler.stats is not None and count:
            self.crawler.stats.inc_value(key, count)


def revisitable(capture: Capture) -> bool:
    """A capture a revisit may stand for or point at: 2xx, a body, not truncated."""
    return bool(capture.body) and not capture.truncated and 200 <= capture.status < 300


def duplicate_fields(row: Mapping[str, Any]) -> list[tuple[str, object]]:
    """The warc-fields of a drop row: kept page, reason, distance, rule, fingerprints."""
    return [
        ("duplicate-of", row.get("duplicate_of") or None),  # none for a drop rule's page
        ("reason", row.get("reason")),
        ("distance", row.get("distance")),
        ("rule", row.get("rule")),
        ("simhash", to_hex(row.get("simhash"))),
        ("duplicate-simhash", to_hex(row.get("duplicate_simhash"))),
    ]


def warcinfo_fields(crawler: Crawler, options: WarcOptions) -> dict[str, object]:
    """The warcinfo record of a new file: software, format, host, crawl, settings."""
    settings = crawler.settings
    return {
        "software": software_name(),
        "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/"
                      "warc-1.1/",
        "hostname": socket.gethostname(),
        "isPartOf": _crawl_name(crawler),
        "http-header-user-agent": settings.get("USER_AGENT"),
        "robots": "obey" if settings.getbool("ROBOTSTXT_OBEY") else "ignore",
        "warc-near-duplicates": options.near_duplicates,
        "dedup-settings": json.dumps(dedup_settings(settings), sort_keys=True,
                                     separators=(",", ":")),
    }


def software_name() -> str:
    """``dedup-crawler/<version> (Scrapy/<version>; warcio/<version>)``."""
    return (f"dedup-crawler/{VERSION} (Scrapy/{scrapy.__version__}; "
            f"warcio/{_warcio_version()})")


def _crawl_name(crawler: Crawler) -> str | None:
    stats = crawler.stats
    crawl_id = stats.get_value(dedup_signals.CRAWL_ID_STAT) if stats is not None else None
    namespace = crawler.settings.get("DEDUP_NAMESPACE")
    parts = [f"crawl {crawl_id}" if crawl_id is not None else None,
             f"namespace {namespace}" if namespace else None]  # fmt: skip
    return ", ".join(p for p in parts if p) or None


def _warcio_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("warcio")
    except PackageNotFoundError:
        return getattr(warcio, "__version__", "unknown")

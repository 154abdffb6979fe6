"""Soft-404 probes of the ``web`` spider (``TRAP_SOFT404_PROBE``, :mod:`crawler.urls.traps`).

The first page of each origin (``scheme://host:port``) that this process gets starts one
download of a random path no page links (:func:`crawler.urls.traps.probe_path`): in the distributed
profile, by the worker that holds the host, so the host's politeness holds across workers (a
worker that takes the host over probes it again). The probe is downloaded through the engine, not
the scheduler (``engine.download_async``: the downloader middlewares, robots.txt and the host's
download delay apply; no dupefilter, no JOBDIR journal, no distributed lease), so the worker
that starts it is the one that gets its answer. A 200 HTML answer, not redirected, teaches the
dedup pipeline the origin's soft 404 (:mod:`crawler.dedup.soft404`). The origin's pages,
seeds aside (never soft 404s), wait for the probe before they are decided (at most
:data:`PROBE_WAIT_SECONDS`), so that each
is measured against it. A probe that fails (robots.txt, an error, a timeout) teaches nothing.
Stats: ``dedup/soft404/probes_sent``; ``dedup/soft404/probes`` (answers that teach).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred

from crawler.meta import CANONICAL_URL
from crawler.urls.traps import origin_of, probe_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from scrapy.crawler import Crawler

    from crawler.urls.traps import TrapRules

logger = logging.getLogger(__name__)

#: Longest wait of a page for its origin's soft-404 probe (then it is decided without it).
PROBE_WAIT_SECONDS = 60.0


class Soft404Probes:
    """The probes of one crawl (module doc). ``teach(response)`` hands a 200 HTML answer to
    the dedup pipeline; ``count(key)`` counts a stat."""

    def __init__(self, crawler: Crawler, rules: TrapRules,
                 teach: Callable[[HtmlResponse], None], count: Callable[[str], None]) -> None:
        self.crawler = crawler
        self.rules = rules
        self.teach = teach
        self.count = count
        self._waiting: dict[str, list[Deferred[None]]] = {}  # origin -> pages waiting

    def start(self, canonicals: Iterable[str]) -> None:
        """Start the probe of each origin of ``canonicals`` not probed yet."""
        for origin in self.rules.unprobed(canonicals):
            self._waiting[origin] = []
            self.count("dedup/soft404/probes_sent")
            deferred_from_coro(self._probe(origin))

    async def answered(self, canonical: str) -> None:
        """Wait until the probe of the page's origin is answered or failed."""
        waiting = self._waiting.get(origin_of(canonical))
        if waiting is None:
            return
        from twisted.internet import reactor  # installed by then (not at import: Scrapy picks)

        waiter: Deferred[None] = Deferred()
        waiter.addTimeout(PROBE_WAIT_SECONDS, reactor, onTimeoutCancel=lambda *_: None)
        waiting.append(waiter)
        await maybe_deferred_to_future(waiter)

    async def _probe(self, origin: str) -> None:
        url = origin + probe_path()
        request = Request(url, callback=NO_CALLBACK, dont_filter=True,
                          meta={CANONICAL_URL: url, "dont_redirect": True})
        try:
            response = await self.crawler.engine.download_async(request)
            if isinstance(response, HtmlResponse) and response.status == 200:
                self.teach(response)
        except Exception as exc:  # any failure (robots.txt, network, a bug): no probe, go on
            logger.debug("soft-404 probe of %s failed: %r", origin, exc)
        finally:
            for waiter in self._waiting.pop(origin, ()):
                if not waiter.called:
                    waiter.callback(None)

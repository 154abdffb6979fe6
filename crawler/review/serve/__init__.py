"""The review server of ``scrapy dedupreport --serve``: the drops of a crawl in a browser,
both stored texts of a decision side by side, and buttons that mark a decision reviewed or
overrule it (:mod:`crawler.review.actions`).

A library (no Scrapy): the standard library's threaded HTTP server on 127.0.0.1, the database
read through :class:`crawler.review.CrawlDB`.

=============  ================================================================================
``server``     :class:`ReviewServer`: routes, the Host/token/JSON checks, the CSP, the answers
``listing``    the drop list: rows read once, filtered, sorted and paged per request
``decisions``  one pair's explanation, one button's action and its answer
``pages``      the HTML of the list and of one pair (everything crawled escaped)
``assets``     the inline CSS and script of both pages
=============  ================================================================================
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, TextIO

from crawler.review.serve.server import ReviewServer

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["ReviewServer", "serve_until_stopped"]


def serve_until_stopped(server: ReviewServer, out: TextIO | None = None) -> None:
    """Print where the review is served (one line, flushed), then serve until Ctrl-C or
    SIGTERM; the server is closed on the way out. Call it from the main thread."""
    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    print(f"serving the review of {server.selection.label} at {server.url} (Ctrl-C to stop)",
          file=out or sys.stdout, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()

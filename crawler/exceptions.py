"""The Scrapy exceptions of the dedup pipeline: :class:`DuplicatePage` and :class:`Undecided`,
and of the robots middleware: :class:`HostGivenUp`.

What a drop *is* (its reason, the kept page, the distance...) is the plain value
:class:`crawler.vocab.Drop`, importable without Scrapy; this exception only carries one through
Scrapy's item pipeline (``process_item`` raises it, the ``item_dropped`` signal hands it on).
"""

from __future__ import annotations

__floor__ = "component"

from scrapy.exceptions import DropItem, IgnoreRequest

from crawler.vocab import Drop

__all__ = ["DuplicatePage", "HostGivenUp", "Undecided"]


class DuplicatePage(DropItem):
    """A page dropped because it duplicates one already kept: ``drop`` says why.

    Its fields are read on the drop (``exc.drop.duplicate_of``); the message is
    ``str(drop)``.
    """

    def __init__(self, drop: Drop) -> None:
        self.drop = drop
        super().__init__(str(drop))


class Undecided(DropItem):
    """A page the dedup pipeline could not decide: the crawl database stayed unavailable past
    its retries (:mod:`crawler.dedup.outage`), or the crawl closes for a failure while the
    page waits. It is neither stored nor dropped as a duplicate, and its request is *not*
    finished: the storage pipeline leaves it out of every batch (no journal ``F`` record, no
    lease acknowledged) and the shared scheduler puts its lease back in the queue, so the
    page is fetched again (by this crawl's JOBDIR resume, or by any worker of a distributed
    crawl). Logged at DEBUG; one ERROR line at close counts them (``dedup/storage_error/
    undecided``).
    """

    def __init__(self, url: str, why: str) -> None:
        self.url = url
        super().__init__(f"not decided ({why}), to be fetched again: {url}", log_level="DEBUG")


class HostGivenUp(IgnoreRequest):
    """A request not sent because its host was given up (:mod:`crawler.middlewares.robots`:
    not there, or its robots.txt unavailable past ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS``).

    ``owed`` (one process): the spider does not report the request finished, so it stays owed
    in the ``JOBDIR`` journal and a resumed run asks the host again; a host that was down for
    a moment loses nothing. A distributed worker's are finished (leases acknowledged): the
    worker that gave the host up tells the others (for ``ROBOTSTXT_UNAVAILABLE_MAX_SECONDS``),
    and a lease put back would only come round again at once.
    """

    def __init__(self, message: str, *, owed: bool) -> None:
        self.owed = owed
        super().__init__(message)

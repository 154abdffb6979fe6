"""The spider's questions to the crawl's dupefilter, through one accessor each.

* :class:`EarlySkip`: the contract the spider relies on to skip a page's already-seen links
  before building a ``Request`` for each; :func:`early_skip_of` finds it for a crawler.
* :func:`seen_guard_of`: the Redis-outage guard of the crawl's seen set, for a component that
  must not call Redis once it failed (the distributed start list).

Both find the dupefilter where Scrapy's scheduler and scrapy-redis's keep it (the engine's
``scheduler.df``) and answer None before the engine has a scheduler, or when the crawl's
dupefilter is not ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from crawler.dupefilter.filter import BloomDupeFilter

if TYPE_CHECKING:
    from crawler.dupefilter.guard import GuardedSeenSet


@runtime_checkable
class EarlySkip(Protocol):
    """The early-skip contract: what the spider asks of the crawl's dupefilter to skip a
    page's already-seen links before building a ``Request`` for each.

    ``seen_fingerprints(fps)`` answers, for each request fingerprint in order, True when it is
    (probably) seen; it records nothing (the dupefilter's ``request_seen`` stays the one
    authority that records a URL as seen) and asks a shared seen set once per call at most.
    ``seen_fingerprints_soon(fps)``, when the dupefilter has it, is the same check answered
    at once or, when a shared seen set must be asked, as an awaitable of the answers (the
    spider awaits it; the reactor is not held during the round trip).
    ``note_skipped(url, referer)`` logs one skipped link; the spider calls it only when
    ``debug`` (``DUPEFILTER_DEBUG``) is on. :class:`BloomDupeFilter` keeps the contract; a
    crawl whose dupefilter does not (:func:`early_skip_of` answers None) skips nothing early.
    """

    debug: bool

    def seen_fingerprints(self, fps: Sequence[bytes]) -> list[bool]: ...
    def note_skipped(self, url: str, referer: str | None = None) -> None: ...


def early_skip_of(crawler: object) -> EarlySkip | None:
    """The dupefilter of ``crawler``'s running scheduler when it keeps the :class:`EarlySkip`
    contract, else None (Scrapy's own ``RFPDupeFilter``, or no scheduler yet)."""
    dupefilter = _dupefilter_of(crawler)
    if type(dupefilter) is BloomDupeFilter:  # ours keeps it; a Protocol isinstance costs ~10 us
        return dupefilter
    return dupefilter if isinstance(dupefilter, EarlySkip) else None


def seen_guard_of(crawler: object) -> GuardedSeenSet | None:
    """The :class:`~crawler.dupefilter.guard.GuardedSeenSet` of ``crawler``'s dupefilter (ask
    its ``down``), or None when the dupefilter is not a :class:`BloomDupeFilter`."""
    dupefilter = _dupefilter_of(crawler)
    return dupefilter.guard if isinstance(dupefilter, BloomDupeFilter) else None


def _dupefilter_of(crawler: object) -> object | None:
    try:  # Crawler.engine raises until the crawl starts
        engine = getattr(crawler, "engine", None)
    except RuntimeError:
        return None
    return getattr(getattr(engine, "scheduler", None), "df", None)

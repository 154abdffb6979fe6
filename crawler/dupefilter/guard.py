"""``GuardedSeenSet``: the Redis-outage policy around the crawl's seen set, as
:class:`crawler.dedup.outage.GuardedIndex` is around the content index.

With ``DEDUP_BACKEND=redis`` the first failed Redis call made through the guard (a
test-and-set, a read-only check, the figures of the stats, or a call of the shared frontier the
scheduler makes through :meth:`GuardedSeenSet.attempt`) closes the spider with finish reason
``redis_error`` (the ``crawl`` command exits 1) and logs ONE error line naming the masked
``REDIS_URL`` and what to check (:func:`crawler.closing.stop_on_redis_error`, shared with the
near-duplicate pipeline; stat ``dedup/redis_error`` = 1). From then on Redis is not asked again
(:attr:`GuardedSeenSet.down`):

* a test-and-set answers "seen" and counts the request dropped
  (``dedup/redis_error/requests_dropped``; the dupefilter does not count it as filtered);
* a read-only check answers "seen", so the spider fetches nothing more while the crawl closes;
* the figures are none, and the frontier's calls answer their fallback.

Pages already stored are untouched; the storage pipeline writes what it holds. A failure only
while reading the final figures (at close) is a warning: the crawl ended for its own reason.
Built without a crawler (``from_settings``), the guard raises the error instead. A local seen
set never raises these errors, so its guard never goes down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from crawler import defaults
from crawler.backends.common import REDIS_ERROR, redis_errors
from crawler.closing import stop_on_redis_error

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.backends import SeenSet

#: The package's logger: the log lines keep the name they had before the package was split.
logger = logging.getLogger("crawler.dupefilter")

T = TypeVar("T")
DROPPED = f"dedup/{REDIS_ERROR}/requests_dropped"


class GuardedSeenSet:
    """The questions of ``seen`` under the Redis-outage policy (module docstring).

    ``down``: a Redis call failed; the crawl is closing and Redis is not asked again.
    """

    def __init__(self, seen: SeenSet, crawler: Crawler | None = None) -> None:
        self.seen = seen
        self.crawler = crawler
        self.down = False
        self.closed = False  # the dupefilter closed: a later failure only warns

    def add(self, key: bytes) -> bool:
        """``seen.add(key)``; True ("seen": the request is dropped, and counted) when Redis is
        or goes down."""
        return self.recorded(lambda: self.seen.add(key))

    def recorded(self, test_and_set: Callable[[], bool]) -> bool:
        """The answer of ``test_and_set()``, a test-and-set of this set made in another call
        (the shared frontier's push); True, counted as dropped, when Redis is or goes down."""
        answer = self.attempt(test_and_set, None)
        return self._dropped() if answer is None else answer

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """``seen.contains_many(keys)``; every key reads as seen when Redis is or goes down."""
        answers = self.attempt(lambda: self.seen.contains_many(keys), None)
        return [True] * len(keys) if answers is None else answers

    async def contains_many_awaited(self, keys: Sequence[bytes]) -> list[bool]:
        """:meth:`contains_many` through the seen set's ``contains_many_async`` when it has one
        (its round trip awaited, the reactor not held); a Redis failure as there."""
        contains_async = getattr(self.seen, "contains_many_async", None)
        if self.down or contains_async is None:
            return self.contains_many(keys)
        try:
            answers: list[bool] = await contains_async(keys)
        except redis_errors() as exc:
            self.failed(exc)
            return [True] * len(keys)
        return answers

    def figures(self, final: bool = False) -> dict[str, float]:
        """``seen.figures()``; none when Redis is or goes down. A failure reading the ``final``
        figures (at close) only logs a warning: the crawl ended for its own reason."""
        if self.down:
            return {}
        try:
            return self.seen.figures()
        except redis_errors() as exc:
            if not final or self.crawler is None:
                self.failed(exc)
                return {}
            self.down = True
            logger.warning("The final dedup/bloom stats were not read from Redis: %s", exc)
        return {}

    def attempt(self, call: Callable[[], T], fallback: T) -> T:
        """``call()``, a call of another Redis component of this crawl (the shared frontier's
        push, pop, ack, requeue), under the same policy: ``fallback`` when Redis is or goes
        down."""
        if not self.down:
            try:
                return call()
            except redis_errors() as exc:
                self.failed(exc)
        return fallback

    def close(self) -> None:
        """Close the seen set; a Redis failure then is only logged at DEBUG, and one after
        (a last frontier call) only warns: the crawl ended for its own reason."""
        self.closed = True
        try:
            self.seen.close()
        except redis_errors() as exc:
            logger.debug("closing the seen set: %s", exc)

    def failed(self, exc: Exception) -> None:
        """A Redis call failed: the first failure of the crawl closes it (``redis_error``)."""
        if self.crawler is None:  # built by from_settings: nothing to close, the caller decides
            raise exc
        self.down = True
        if self.closed:
            logger.warning("Redis failed after the dupefilter closed: %s", exc)
            return
        stop_on_redis_error(self.crawler, exc, self.seen.url or defaults.REDIS_URL)

    def _dropped(self) -> bool:
        stats = self.crawler.stats if self.crawler is not None else None
        if stats is not None:
            stats.inc_value(DROPPED)
        return True

"""How long the crawl waits out an unavailable database: :class:`RetryPolicy`.

One policy for every storage call the crawl makes while it runs, reads and writes alike:
``STORAGE_RETRY_TIMES`` retries of a *transient* :class:`~crawler.storage.engine.StorageError`
(connection refused or lost, database locked), the first after ``STORAGE_RETRY_BACKOFF``
seconds, each delay double the last and at most :data:`MAX_BACKOFF`. With the defaults (5, 1 s)
an outage of up to 31 s costs nothing but the wait; a longer one ends the crawl with
``storage_error``. An error a retry cannot fix (bad data, a schema mismatch) is raised at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from crawler import config, defaults
from crawler.storage.engine import StorageError

T = TypeVar("T")

MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """``times`` retries, ``backoff`` seconds before the first, doubling up to MAX_BACKOFF."""

    times: int = defaults.STORAGE_RETRY_TIMES
    backoff: float = defaults.STORAGE_RETRY_BACKOFF

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> RetryPolicy:
        return cls(
            config.get_int(settings, "STORAGE_RETRY_TIMES", defaults.STORAGE_RETRY_TIMES,
                           lo=0, hi=100),
            config.get_float(settings, "STORAGE_RETRY_BACKOFF", defaults.STORAGE_RETRY_BACKOFF,
                             lo=0),
        )  # fmt: skip

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based)."""
        return min(self.backoff * 2**attempt, MAX_BACKOFF)

    def delays(self) -> Iterator[float]:
        """The wait before each retry, in order (``times`` of them)."""
        return (self.delay(attempt) for attempt in range(self.times))

    @property
    def budget(self) -> float:
        """The longest outage waited out, in seconds."""
        return sum(self.delays())

    def call(self, fn: Callable[[], T], sleep: Callable[[float], Any] = time.sleep) -> T:
        """``fn()``, retried on transient storage errors (blocking: run it in a thread)."""
        for wait in self.delays():
            try:
                return fn()
            except StorageError as exc:
                if not exc.transient:
                    raise
            sleep(wait)
        return fn()

"""``DecisionGate``: the content decider takes its decisions one at a time, in the order pages
ask, while a remote index's round trip is awaited (the reactor not held:
:mod:`crawler.backends.redis.aio`).

Why: a decision reads and writes state besides the index (a young host's template, the
template a kept page teaches, a kept page's recheck: :mod:`crawler.dedup.hosts`). Asked
inline (the reactor blocked for the round trip), each decision runs from its fingerprint to
its last write in one go, so every read sees every earlier page's writes. Awaited, another
page could fingerprint with the template a page in flight is about to change, or land
its check-and-add between the two calls of a recheck. The gate gives back the inline order:
a page's decision starts once the decision before it has answered, and the reactor serves
downloads, parsing and storage while the page in the gate waits for Redis.

* **Order**: first come, first served (:class:`asyncio.Lock` wakes its waiters in the order
  they queued, and a newcomer queues behind them). A page's turn covers its whole decision:
  warming its host, fingerprint, index question, young-host check, storage reads of its
  match, preferred copy, template learning.
* **Pending waits step out**: a page whose match is pending in another worker (asked again
  every ``PENDING_POLL_SECONDS``) leaves the gate while it sleeps (:meth:`Turn.pause`), as the
  inline decider lets other pages decide meanwhile, and queues again behind those that came.
* **Backpressure**: :attr:`DecisionGate.waiting` counts the pages queued for their turn; the
  downloader starts no download while :data:`crawler.middlewares.politeness.DECISIONS_WAITING_MAX`
  wait (:class:`~crawler.middlewares.politeness.PoliteDownloader`), so the downloads do not run
  ahead of the decisions (up to Scrapy's 5 MB of responses queued, drained after the last
  response: measured 1.3-1.9 s from the last response to close on 2,000 pages).
* **Without an asyncio loop** (a reactor that is not asyncio's, where the index is asked
  inline anyway) the gate lets every page through.

The gate is per decider (per worker): two workers' decisions still interleave in Redis,
atomically per check-and-add, as before.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from scrapy.utils.asyncio import sleep

if TYPE_CHECKING:
    from types import TracebackType


class DecisionGate:
    """One decision at a time, in arrival order (module docstring). ``enabled=False``: every
    page passes at once (a decider whose index is asked inline needs no gate)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.waiting = 0  # pages queued for their turn (the downloader backs out past a few)
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def turn(self) -> Turn:
        """``async with gate.turn() as turn``: one page's decision."""
        return Turn(self._current_lock() if self.enabled else None, self)

    def _current_lock(self) -> asyncio.Lock | None:
        """The lock of the running loop (a decider built by hand may be used by one
        ``asyncio.run`` after another: a lock serves one loop); None without a loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock


class Turn:
    """One page's passage through the gate; ``held`` is this page's own (a page cancelled
    while it queues again never releases another page's turn)."""

    def __init__(self, lock: asyncio.Lock | None, gate: DecisionGate) -> None:
        self._lock = lock
        self._gate = gate
        self.held = False

    async def __aenter__(self) -> Turn:
        await self._acquire()
        return self

    async def _acquire(self) -> None:
        if self._lock is None:
            return
        self._gate.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._gate.waiting -= 1
        self.held = True

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._release()

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` outside the gate (other pages decide meanwhile), then queue
        again behind the pages that came."""
        self._release()
        await sleep(seconds)
        await self._acquire()

    def _release(self) -> None:
        if self.held and self._lock is not None:
            self.held = False
            self._lock.release()

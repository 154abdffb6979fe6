"""A distributed worker's heartbeat: its membership renewed from a thread while the reactor is busy.

A worker is alive as long as its membership in ``{base}:workers`` is renewed
(:mod:`crawler.cluster.worker`); a worker that stops renewing it for
``DISTRIBUTED_LEASE_SECONDS`` is dead, and another takes its requests and hosts over. The
reactor renews it every ``DISTRIBUTED_HEARTBEAT_SECONDS`` (:func:`interval`, at most a third
of the lease), and with the same call looks for dead workers. A lease short enough to take a
dead worker's hosts over within seconds must not expire because the reactor is held up for a
while (a long parse, a batch of Redis calls, CPU shared with other processes), so this thread
renews the membership too, whenever the reactor has not done so for one and a half heartbeats
(a healthy reactor's renewals drift a little: the thread then stays quiet):

* it **only renews** (a renewal that reports nobody): finding dead workers, fencing and
  reclaiming them stay on the reactor, so a reactor that is held up delays a takeover, never
  makes one unsafe;
* a whole-process pause (SIGSTOP, a stalled VM, swapping) stops this thread too: such a worker
  is still found dead and fenced, and its downloads' check
  (:meth:`crawler.cluster.worker.Member.may_download`) renews first and sends nothing once
  fenced;
* a reactor that has not run for :data:`REACTOR_STALL_SECONDS` is taken as hung: the thread
  stops renewing, and the worker is found dead one lease later instead of holding its hosts
  for ever;
* a membership found lost (fenced or gone), or Redis given up
  (``REDIS_RETRY_SECONDS``), ends the thread: the reactor's next renewal acts on it (closes
  the crawl ``lease_lost`` or ``redis_error``).

The thread is a daemon and never holds a worker's exit. The Redis client is redis-py's,
whose connection pool is thread-safe; a renewal holds the membership's lock, so the reactor's
and the thread's never interleave their updates of its fields.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from crawler import config, defaults

if TYPE_CHECKING:
    from crawler.cluster.worker import Member

logger = logging.getLogger(__name__)

#: A reactor that has not renewed for this long is hung: the heartbeat stops covering for it.
REACTOR_STALL_SECONDS = 60.0


def interval(settings: config.SettingsLike, lease_seconds: float) -> float:
    """Seconds between renewals: ``DISTRIBUTED_HEARTBEAT_SECONDS``, at most a third of the
    lease (three chances to renew before it expires)."""
    beat = config.get_float(settings, "DISTRIBUTED_HEARTBEAT_SECONDS",
                            defaults.DISTRIBUTED_HEARTBEAT_SECONDS, lo=0.05, hi=3600.0)  # fmt: skip
    return min(beat, lease_seconds / 3)


class Heartbeat:
    """Renews ``member`` from a thread every ``every`` seconds the reactor did not (module
    docstring), while ``running()`` (the reactor's renewal loop) says so."""

    def __init__(self, member: Member, every: float, running: Callable[[], bool],
                 stall: float = REACTOR_STALL_SECONDS) -> None:  # fmt: skip
        self.member, self.every, self.running, self.stall = member, every, running, stall
        self.renewals = 0  # renewals this thread made (the reactor was held up)
        self._thread = threading.Thread(target=self._run, name="dedup-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        mine = float("nan")  # the last renewal this thread made
        reactor = self.member.renewed_at  # the last renewal the reactor made
        while self.running():
            time.sleep(self.every)
            if not self.running():
                return
            renewed = self.member.renewed_at
            if renewed != mine:
                reactor = max(reactor, renewed)
            now = time.monotonic()
            if now - renewed < 1.5 * self.every or now - reactor > self.stall:
                continue  # renewed lately; or the reactor is hung: let the membership expire
            try:
                self.member.beat(report=False)
            except Exception as exc:  # Redis given up, the namespace gone: the reactor's turn
                logger.debug("heartbeat stopped (%s: %s)", type(exc).__name__, exc)
                return
            if self.member.lost:
                return
            mine = self.member.renewed_at
            self.renewals += 1

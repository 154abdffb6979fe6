"""The dupefilter: Scrapy's ``DUPEFILTER_CLASS``, the one component that answers "seen?".

* :mod:`crawler.dupefilter.filter`: :class:`BloomDupeFilter` on the seen set of
  ``DEDUP_BACKEND`` (:class:`crawler.backends.SeenSet`): the test-and-set of every request, the
  ``dupefilter/filtered`` and ``dedup/bloom/*`` stats and their log lines;
* :mod:`crawler.dupefilter.journal`: :class:`SeenJournal`, the seen set's durability in
  ``JOBDIR`` (a snapshot, the journal of what the filter lets through and what is finished);
* :mod:`crawler.dupefilter.guard`: :class:`GuardedSeenSet`, the Redis-outage policy around the
  seen set;
* :mod:`crawler.dupefilter.earlyskip`: the spider's read-only batched check
  (:class:`EarlySkip`, reached through :func:`early_skip_of`) and :func:`seen_guard_of`.

It queues nothing and schedules nothing: queueing, the shared frontier's atomic
seen-check-and-push and the ``JOBDIR`` resume are the schedulers'
(:class:`crawler.scheduler.ResumingScheduler`, :class:`crawler.cluster.scheduler.SharedScheduler`).
"""

from __future__ import annotations

__floor__ = "component"

from crawler.dupefilter.earlyskip import EarlySkip, early_skip_of, seen_guard_of
from crawler.dupefilter.filter import KNOWN_SEEN_MAX, BloomDupeFilter
from crawler.dupefilter.guard import GuardedSeenSet
from crawler.dupefilter.journal import SeenJournal

__all__ = ["KNOWN_SEEN_MAX", "BloomDupeFilter", "EarlySkip", "GuardedSeenSet", "SeenJournal",
           "early_skip_of", "seen_guard_of"]

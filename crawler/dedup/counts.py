"""The content decider's stats (``dedup/...``), counted through one small helper."""

from __future__ import annotations

from typing import Any


class Counts:
    """Increments and reads of ``stats`` (a Scrapy ``StatsCollector``, or anything with its
    ``inc_value`` and ``get_value``); nothing happens without one (a decider built by hand)."""

    def __init__(self, stats: Any = None) -> None:
        self.stats = stats

    def inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    def get(self, key: str) -> int:
        return int(self.stats.get_value(key, 0)) if self.stats is not None else 0

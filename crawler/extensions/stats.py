"""``DedupStatsCollector``: Scrapy's in-memory stats collector without the per-call detour.

Scrapy 2.13+ routes every attribute read of a stats collector through a Python
``__getattribute__`` (``scrapy/statscollectors.py``) that first looks for a ``_cached_<name>``
attribute, to hand out methods wrapped in a warning about the deprecated ``spider`` argument.
For every other name, ``self._stats`` inside each method included, that first look fails by
raising and catching ``AttributeError``: about 45 µs a page over the ~15 stats calls a page
makes here. This class reads attributes the plain way and wraps those methods once, on the
class, with the same warning helper, so the stats, the ``crawler.stats`` API, the stats dump and
the warning on a ``spider`` argument stay what Scrapy's ``MemoryStatsCollector`` gives.

Enabled by ``STATS_CLASS = "crawler.extensions.stats.DedupStatsCollector"`` (settings/base.py).
When a Scrapy without the helper (the argument gone) is installed, the methods are Scrapy's own.
"""

from __future__ import annotations

__floor__ = "component"

from collections.abc import Callable
from typing import Any

from scrapy.statscollectors import MemoryStatsCollector

try:
    from scrapy.utils.decorators import _warn_spider_arg
except ImportError:  # a Scrapy that no longer takes the argument has nothing to warn about

    def _warn_spider_arg(func: Callable[..., Any]) -> Callable[..., Any]:  # type: ignore[no-redef]
        return func


__all__ = ["DedupStatsCollector"]

# The methods Scrapy's StatsCollector.__getattribute__ wraps (each takes a deprecated ``spider``).
_WARNED = ("get_value", "get_stats", "set_value", "set_stats", "inc_value", "max_value",
           "min_value", "clear_stats", "open_spider", "close_spider")  # fmt: skip


class DedupStatsCollector(MemoryStatsCollector):
    """:class:`~scrapy.statscollectors.MemoryStatsCollector` with plain attribute lookup."""

    __getattribute__ = object.__getattribute__


for _name in _WARNED:
    setattr(DedupStatsCollector, _name, _warn_spider_arg(getattr(MemoryStatsCollector, _name)))
del _name

"""Scrapy extensions (``EXTENSIONS``): the progress line and dedup summary (``progress``) and
the final stats file (``statsfile``); and the stats collector (``stats``, ``STATS_CLASS``).
"""

__floor__ = "component"

"""Scrapy extensions (``EXTENSIONS``): the progress line and dedup summary (``progress``) and
the final stats file (``statsfile``).
"""

__floor__ = "component"

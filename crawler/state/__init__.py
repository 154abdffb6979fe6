"""Crawl state on disk: the JOBDIR snapshot and journal (``jobstate``, ``journal``), the
journal's in-memory pending map (``pending``) and atomic file writes (``atomicfile``).
"""

__floor__ = "library"

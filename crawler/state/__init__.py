"""Crawl state on disk: the JOBDIR snapshot and journal (``jobstate``, ``journal``) and atomic
file writes (``atomicfile``).
"""

__floor__ = "library"

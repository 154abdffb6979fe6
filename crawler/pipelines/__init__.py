"""Item pipelines (``ITEM_PIPELINES``), and only those: ``neardup`` acts on the content decision
(:mod:`crawler.dedup`) and ``storage`` writes kept pages and drop records in batches.
"""

__floor__ = "component"

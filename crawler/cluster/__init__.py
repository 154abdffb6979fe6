"""The distributed profile's Scrapy components (``settings.distributed``): worker membership and
leases (``worker``), the leased host-partitioned frontier and its scheduler (``frontier``,
``scheduler``, ``serializer``), the start list, the join check, the generation fence, the
heartbeat, the shared crawl's lifecycle and its stats.
"""

__floor__ = "component"

"""The ``web`` spider (``web``), its soft-404 probes (``probes``), and the helpers another Scrapy
project's spiders use to feed the dedup components (``embed``).
"""

__floor__ = "component"

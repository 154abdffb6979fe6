"""Content fingerprints: a page's visible text and tokens (``text``, ``tokens``), its 64-bit
SimHash (``simhash``), the pigeonhole block tables that find fingerprints within k bits
(``simindex``), per-site template learning (``template``) and order-free set fingerprints
(``setfp``). Plain functions and data: no Scrapy, no database.
"""

__floor__ = "library"

"""URLs and traps: the canonical key of a URL (``urlnorm``), whether a link is followed
(``linkrules``, ``scope``, ``traps``, ``pagebounds``), the seed list (``seeds``) and the request
fingerprint over the canonical key (``fingerprint``, Scrapy's ``REQUEST_FINGERPRINTER_CLASS``).
"""

__floor__ = "library"

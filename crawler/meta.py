"""The ``request.meta`` keys of dedup-crawler, named once (Scrapy's own keys, such as
``redirect_urls`` and ``depth``, are Scrapy's).

* :data:`CANONICAL_URL`: the request's canonical URL (:mod:`crawler.urls.urlnorm`), set where
  the request is made (the spider, the link middleware); the fingerprinter, the dupefilter and
  storage read it instead of normalizing again. Trusted: a request that carries it is not
  judged again by the link middleware.
* :data:`LEASE`: the frontier lease of a request of the distributed profile
  (:mod:`crawler.cluster.frontier`), acknowledged once the page's fate is durable.
* :data:`RESUMED`: a request re-scheduled from the JOBDIR journal at start.
* :data:`CANONICAL_TARGET`: a request for a page another page names canonical.
* :data:`DUPLICATE_HOPS`: how many duplicate pages in a row led to the request (absent: none).
* :data:`WARC_CAPTURE`: the raw exchange the WARC capture middleware kept for the request.
"""

from __future__ import annotations

CANONICAL_URL = "canonical_url"
LEASE = "dedup_lease"
RESUMED = "dedup_resumed"
CANONICAL_TARGET = "dedup_canonical_target"
DUPLICATE_HOPS = "dedup_duplicate_hops"
WARC_CAPTURE = "warc_capture"

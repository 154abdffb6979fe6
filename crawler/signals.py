"""Custom signals, sent through ``crawler.signals``, and the request meta key of a lease.

``batch_committed``: sent by the storage pipeline on the reactor thread after a batch is durably
committed. Keyword arguments: ``fingerprints`` (``list[str]``, hex request fingerprints of every
page, stored or dropped, in the batch: the dupefilter's journal marks them finished),
``leases`` (``list[str]``, the shared frontier's lease ids of those pages: acknowledged),
``documents`` (``list[str]``, canonical URLs of the stored pages: their content index entries
count from now on) and ``dropped`` (``list[dict]``, the ``dropped`` rows: the drop log is
written from them, so it names only drops that storage holds).

``page_demoted``: sent by the dedup pipeline when a kept page turns out to be the copy of the
page it names canonical, which was just kept instead. Keyword arguments: ``url`` (the page to
move from ``documents`` to ``dropped``), ``duplicate_of`` (the page kept instead),
``reason``, ``distance``, ``duplicate_simhash``, ``duplicate_content_hash``, ``rule``
(``"canonical"``). The storage pipeline applies it in the batch that stores the page kept
instead, after it; the drop row then reaches ``batch_committed`` with the others.

``request_finished``: sent by the spider when a request ends without producing a page item
(a failure, a non-HTML response, an error status). Keyword arguments ``fingerprints`` and
``leases`` as above.
"""

batch_committed = object()
request_finished = object()
page_demoted = object()

#: ``request.meta`` key holding the shared frontier's lease id of a popped request.
LEASE_META = "dedup_lease"

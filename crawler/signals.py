"""Custom signals, sent through ``crawler.signals``, and the request meta key of a lease.

``batch_committed``: sent by the storage pipeline on the reactor thread after a batch is durably
committed. Keyword arguments: ``fingerprints`` (``list[str]``, hex request fingerprints of every
page, stored or dropped, in the batch: the dupefilter's journal marks them finished),
``leases`` (``list[str]``, the shared frontier's lease ids of those pages: acknowledged),
``documents`` (``list[str]``, canonical URLs of the stored pages: their content index entries
count from now on) and ``dropped`` (``list[dict]``, the ``dropped`` rows: the drop log is
written from them, so it names only drops that storage holds).

``request_finished``: sent by the spider when a request ends without producing a page item
(a failure, a non-HTML response, an error status). Keyword arguments ``fingerprints`` and
``leases`` as above.
"""

batch_committed = object()
request_finished = object()

#: ``request.meta`` key holding the shared frontier's lease id of a popped request.
LEASE_META = "dedup_lease"

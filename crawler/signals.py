"""Custom signals, sent through ``crawler.signals``.

``batch_committed``: sent by the storage pipeline on the reactor thread after a batch is durably
committed. Keyword argument ``fingerprints``: ``list[str]``, hex request fingerprints of every
page (stored or dropped) in the batch. The dupefilter's journal marks them finished.

``request_finished``: sent by the spider when a request ends without producing a page item
(a failure, a non-HTML response, an error status). Keyword argument ``fingerprints``:
``list[str]``.
"""

batch_committed = object()
request_finished = object()

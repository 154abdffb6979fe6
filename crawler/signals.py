"""Custom signals, sent through ``crawler.signals``, and the stat of the crawl id (the request
meta keys are in :mod:`crawler.meta`).

``batch_committed``: sent by the storage pipeline on the reactor thread after a batch is durably
committed. Keyword arguments: ``fingerprints`` (``list[str]``, hex request fingerprints of every
page, stored or dropped, in the batch: the dupefilter's journal marks them finished),
``leases`` (``list[str]``, the shared frontier's lease ids of those pages: acknowledged),
``documents`` (``list[str]``, canonical URLs of the stored pages: their content index entries
count from now on) and ``dropped`` (``list[dict]``, the ``dropped`` rows: the drop log is
written from them, so it names only drops that storage holds).

``batch_writing``: sent by the storage pipeline on the reactor thread just before it writes a
batch (no arguments), and awaited: whatever a page of it promised must be durable before the
page is committed (the shared scheduler's handler returns once the pushes it holds, or has on
their way on the event loop's connection, are written: :mod:`crawler.cluster.scheduler`).

``page_demoted``: sent by the dedup pipeline (:class:`crawler.dedup.drops.DropWriter`,
only when a storage pipeline runs) when a kept page turns out a duplicate after all: the page
it names canonical was just kept instead (rule ``"canonical"``), or its fingerprint, refreshed
once its site's template was learned, matched another kept page (rule ``"refreshed"``).
Keyword arguments: ``drop`` (a :class:`crawler.vocab.Drop`: ``drop.url`` the page to move
from ``documents`` to ``dropped``, ``drop.duplicate_of`` the page it duplicates, ``reason``,
``distance``, ``duplicate_simhash``, ``rule``) and ``duplicate_content_hash`` (the content hash
of the page kept instead, None when unknown). The storage pipeline applies it in the batch
that stores the page kept instead, after it; the drop row then reaches ``batch_committed``
with the others.

``request_finished``: sent by the spider when a request ends without producing a page item
(a failure, a non-HTML response, an error status). Keyword arguments ``fingerprints`` and
``leases`` as above.

``page_refingerprinted``: sent by the dedup pipeline (with a storage pipeline) when a kept
page's fingerprint was computed again once its site's template was learned and it stays kept:
keyword arguments ``url`` and ``simhash`` (the new one). Storage updates the page's row in its
next batch (``documents.simhash``, ``young`` false), so the settle step compares fingerprints
of a known template (:mod:`crawler.dedup.settle`).

``exchange_captured``: sent by the WARC capture middleware
(:class:`crawler.outputs.warc.capture.RawCaptureMiddleware`) for an HTTP exchange that cannot become
a stored page (a redirect, an error status, robots.txt, a non-HTML body, a HEAD request): the
WARC writer archives it at once. Keyword argument ``capture`` (a
:class:`crawler.outputs.warc.records.Capture`).
"""

from __future__ import annotations

batch_committed = object()
batch_writing = object()
request_finished = object()
page_demoted = object()
page_refingerprinted = object()
exchange_captured = object()

#: The stat holding the id of this crawl's ``crawls`` row: the crawl id's one published home
#: for other components (the drop log's lines written at once, the WARC files' ``warcinfo``).
#: Set by the storage pipeline (:class:`crawler.pipelines.storage.StoragePipeline`, also its
#: attribute ``crawl_id``) once it recorded the crawl, before the first item; absent when
#: nothing records the crawl. Drop rows carry their own ``crawl_id``.
CRAWL_ID_STAT = "dedup/crawl_id"

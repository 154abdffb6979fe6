"""``StoragePipeline``: kept pages and drop records into the crawl database, in batches.

* At open: records a ``crawls`` row and publishes its id as the stat ``dedup/crawl_id``
  (:data:`crawler.signals.CRAWL_ID_STAT`, where other components read it) and as this
  pipeline's attribute ``crawl_id``. With ``JOBDIR`` the row carries the job id of
  ``JOBDIR/dedup/job.json`` (:func:`crawler.state.jobstate.job_id`, created by the first run), so
  every run of a resumed crawl names the same job; ``command`` is ``parse`` when ``scrapy
  parse`` runs the spider (it replaces the spider's ``start``), else ``crawl``.
* ``process_item`` queues a ``documents`` row; the ``item_dropped`` signal queues a
  ``dropped`` row for a :class:`~crawler.exceptions.DuplicatePage`, from its
  :class:`~crawler.vocab.Drop` and the item (text cut to ``DROPPED_TEXT_MAX_CHARS``); the
  ``page_demoted`` signal moves a stored page to ``dropped`` (its ``drop``). Both drops come
  from :class:`crawler.dedup.drops.DropWriter`, which writes the drop log from the rows
  this pipeline commits. Any dropped page's request fingerprints join the batch too, so the
  dupefilter journal hears of every finished page.
* A batch is written when it holds ``STORAGE_BATCH_SIZE`` rows (or
  :data:`BATCH_TEXT_MAX_CHARS` characters of text) or ``STORAGE_BATCH_SECONDS`` after the last
  write, in a worker thread (one writer at a time, in order), in ONE transaction.
  After the commit, on the reactor thread, ``crawler.signals.batch_committed`` is sent with
  every request fingerprint and lease of the batch, the stored pages' canonical URLs and the
  drop rows (see :mod:`crawler.signals`), and its handlers are awaited before the next batch:
  the drop log's lines of the batch are written, retried while it fails
  (:mod:`crawler.dedup.drops`). While more than 10 batches wait, ``process_item``
  waits too (back-pressure instead of unbounded memory).
* A failed write is retried ``STORAGE_RETRY_TIMES`` times (delay ``STORAGE_RETRY_BACKOFF``
  doubling, at most 30 s) with the batch kept in memory. Still failing: an error naming the URL
  and the spider closes with reason ``storage_error``; the close tries once more and logs how
  many rows were not stored (``storage/unsaved``; rows lost only then fail the crawl too:
  :func:`crawler.closing.close_crawl`, finish reason ``storage_error``, exit 1).
* In a distributed crawl each batch's transaction also advances the crawl's Redis commit
  counter (:mod:`crawler.cluster.generation`): a Redis found older than storage aborts the
  batch (nothing of it acknowledged), one ERROR line, finish reason ``redis_rolled_back``.
  A row the database refuses as bad data is isolated by writing the
  batch row by row; only that row is rejected, logged and counted.
* At close: everything queued is written, then the ``spider_closed`` handler records the finish
  time, reason and final stats in the ``crawls`` row. ``spider_closed`` (not ``close_spider``)
  because Scrapy closes the item pipelines *before* it sends ``spider_closed``, and extensions
  (CoreStats: ``finish_reason``, ``elapsed_time_seconds``) fill their stats in that signal;
  extensions are connected before pipelines, so their handlers have run when ours runs.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.utils.asyncio import create_looping_call, run_in_thread, sleep
from scrapy.utils.conf import build_component_list
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.internet.defer import Deferred

from crawler import defaults
from crawler import signals as dedup_signals
from crawler.backends.common import RedisBackendError
from crawler.closing import close_crawl, stop_on_redis_error
from crawler.cluster.generation import (
    REDIS_ROLLED_BACK,
    GenerationFence,
    RedisRolledBack,
    report_rolled_back,
)
from crawler.cluster.joincheck import off_when_refused
from crawler.dedup.overrides import OverrideError
from crawler.exceptions import DuplicatePage, Undecided
from crawler.storage import (
    SettleOptions,
    StorageError,
    Store,
    dedup_settings,
    settle_options,
    utcnow,
    write_options,
)
from crawler.storage.overrides import rules_of
from crawler.storage.retry import RetryPolicy
from crawler.urls.urlnorm import UrlPolicy

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.storage.settle import Settled
    from crawler.vocab import Drop

logger = logging.getLogger(__name__)

MAX_QUEUED_BATCHES = 10
#: A batch is written once its rows hold this many characters of text, whatever its row count:
#: a batch of ``STORAGE_BATCH_SIZE`` long pages stays a few tens of MB (and the queue at most
#: :data:`MAX_QUEUED_BATCHES` times that).
BATCH_TEXT_MAX_CHARS = 16_000_000
STORAGE_ERROR = "storage_error"


@dataclass
class Batch:
    documents: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    leases: list[str] = field(default_factory=list)
    # stored pages to move to ``dropped`` (Store._demote); each gets its drop ``row`` on write
    demotions: list[dict[str, Any]] = field(default_factory=list)
    # stored pages whose fingerprint was computed again ({"url", "simhash"}): Store._refresh
    refreshes: list[dict[str, Any]] = field(default_factory=list)
    chars: int = 0  # characters of text in the documents and dropped rows

    def add_document(self, row: dict[str, Any]) -> None:
        self.documents.append(row)
        self.chars += len(row["text"] or "")

    def add_dropped(self, row: dict[str, Any]) -> None:
        self.dropped.append(row)
        self.chars += len(row.get("text") or "")

    def full(self, rows: int) -> bool:
        """``rows`` rows or more, or :data:`BATCH_TEXT_MAX_CHARS` characters of text."""
        return len(self) >= rows or self.chars >= BATCH_TEXT_MAX_CHARS

    def add_page(self, page: ItemAdapter) -> None:
        """The request fingerprints and lease of a stored or dropped page."""
        self.fingerprints.extend(page.get("fingerprints") or [])
        if page.get("lease"):
            self.leases.append(page["lease"])

    def __len__(self) -> int:
        return (len(self.documents) + len(self.dropped) + len(self.demotions)
                + len(self.refreshes))

    def demoted(self) -> int:
        """Stored pages the batch moved to ``dropped`` (once written)."""
        return sum(1 for d in self.demotions if d.get("row") is not None)

    def drop_rows(self) -> list[dict[str, Any]]:
        """The batch's drop rows, demoted pages and the drops repointed to their kept page
        included (once written): the drop log's lines, so that it replays to the table."""
        demoted = []
        for demotion in self.demotions:
            if demotion.get("row") is not None:  # the page's own line, then its drops' moves
                demoted += [demotion["row"], *demotion.get("repointed", ())]
        return [*self.dropped, *demoted]


def document_row(item: Any, crawl_id: int | None) -> dict[str, Any]:
    """The ``documents`` row of a page item (binary pages: no text)."""
    page = ItemAdapter(item)
    return {
        "url": page["url"],
        "canonical_url": page.get("canonical_url") or page["url"],
        "title": page.get("title") or None,
        "text": page.get("text") or None,
        "content_hash": page.get("content_hash"),
        "simhash": page.get("simhash"),
        "status": page.get("status"),
        "content_type": page.get("content_type"),
        "encoding": page.get("encoding"),
        "depth": page.get("depth"),
        "referer": page.get("referer"),
        "fetched_at": page.get("fetched_at") or utcnow(),
        "crawl_id": crawl_id,
        "canonical_link": page.get("canonical_link") or None,
        "young": bool(page.get("young")),
    }


#: What a drop row keeps of the page besides its text, so the settle step can store it again.
PAGE_COLUMNS = ("status", "content_type", "encoding", "depth", "referer", "young")


def dropped_row(item: Any, drop: Drop, crawl_id: int | None, max_chars: int) -> dict[str, Any]:
    """The ``dropped`` row of a duplicate page (``drop``, and what the item adds: its canonical
    URL, title, text cut to ``max_chars`` (0: no text), hashes the drop lacks)."""
    page = ItemAdapter(item)
    text = page.get("text") or ""
    simhash = drop.simhash if drop.simhash is not None else page.get("simhash")
    return {
        "url": drop.url or page["url"],
        "canonical_url": page.get("canonical_url") or None,
        "reason": drop.reason,
        "duplicate_of": drop.duplicate_of or None,
        "distance": drop.distance,
        "simhash": simhash,
        "duplicate_simhash": drop.duplicate_simhash,
        "content_hash": drop.content_hash or page.get("content_hash"),
        "title": page.get("title") or None,
        "text": text[:max_chars] if max_chars and text else None,
        "dropped_at": utcnow(),
        "crawl_id": crawl_id,
        **{name: page.get(name) for name in PAGE_COLUMNS},
        "canonical_link": page.get("canonical_link") or None,
        "fetched_at": page.get("fetched_at") or utcnow(),
    }


def run_command(spider: Any) -> str:
    """``"parse"`` when ``scrapy parse`` runs the spider, else ``"crawl"``.

    ``scrapy parse`` sets the spider class's ``start`` to a function of its own module: the one
    trace it leaves (the command name is not in the settings). May change with Scrapy.
    """
    start = getattr(type(spider), "start", None)
    return "parse" if getattr(start, "__module__", "") == "scrapy.commands.parse" else "crawl"


def _dedup_runs(crawler: Crawler) -> bool:
    """Whether the crawl decides duplicates (the near-duplicate pipeline runs): only then
    does it settle."""
    from crawler.pipelines.neardup import NearDuplicatePipeline

    return pipeline_enabled(crawler.settings, NearDuplicatePipeline)


def storage_enabled(settings: Any) -> bool:
    """Whether ``ITEM_PIPELINES`` stores pages (this pipeline or a subclass): read at build
    time, before the engine exists (``crawler.get_item_pipeline`` answers only later)."""
    return pipeline_enabled(settings, StoragePipeline)


def pipeline_enabled(settings: Any, kind: type) -> bool:
    """Whether ``ITEM_PIPELINES`` holds ``kind`` (or a subclass of it)."""
    for entry in build_component_list(settings.getwithbase("ITEM_PIPELINES")):
        component = load_object(entry) if isinstance(entry, str) else entry
        if isinstance(component, type) and issubclass(component, kind):
            return True
    return False


def _job(crawler: Crawler | None) -> str | None:
    jobdir = crawler.settings.get("JOBDIR") if crawler is not None else None
    if not jobdir:
        return None
    from crawler.state.jobstate import job_id

    return job_id(jobdir)


def seed_urls(spider: Any) -> list[str]:
    """The crawl's seed URLs (the spider's seeds file, or its ``start_urls``)."""
    seeds = getattr(spider, "seeds", None)
    urls = getattr(seeds, "urls", None) if seeds is not None else None
    return [str(u) for u in (urls or getattr(spider, "start_urls", None) or [])]


class StoragePipeline:
    """Batched, ordered, retried writes of pages and drop records (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        batch_size: int = defaults.STORAGE_BATCH_SIZE,
        batch_seconds: float = defaults.STORAGE_BATCH_SECONDS,
        dropped_text_max_chars: int = defaults.DROPPED_TEXT_MAX_CHARS,
        retry_times: int = defaults.STORAGE_RETRY_TIMES,
        retry_backoff: float = defaults.STORAGE_RETRY_BACKOFF,
    ) -> None:
        self.store = store
        self.batch_size = batch_size
        self.batch_seconds = batch_seconds
        self.dropped_text_max_chars = dropped_text_max_chars
        self.retry_times = retry_times
        self.retry_backoff = retry_backoff
        self.crawler: Crawler | None = None
        self.crawl_id: int | None = None
        self._pending = Batch()
        self._queue: deque[Batch] = deque()
        self._writing = False
        self._failed = False
        self._closing = False
        self._opening = False
        self._close_reason: str | None = None
        self._idle_waiters: list[Deferred[None]] = []
        self._timer: Any = None
        self.settle: SettleOptions | None = None  # DEDUP_SETTLE (from_crawler)
        self.fence: Any = None  # a distributed crawl's GenerationFence (from_crawler)
        self._halted: str | None = None  # REDIS_ROLLED_BACK once Redis was found older
        self._distributed: str | None = None  # the distributed crawl's id, on a worker

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StoragePipeline:
        pipe = cls(Store.from_settings(crawler.settings), **write_options(crawler.settings))
        pipe.crawler = crawler
        pipe.settle = settle_options(crawler.settings) if _dedup_runs(crawler) else None
        with off_when_refused(crawler):  # a worker refused at join writes nothing
            pipe.fence = GenerationFence.of(crawler)
        crawler.signals.connect(pipe.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(pipe.page_demoted, signal=dedup_signals.page_demoted)
        crawler.signals.connect(pipe.page_refingerprinted,
                                signal=dedup_signals.page_refingerprinted)
        crawler.signals.connect(pipe.spider_closed, signal=signals.spider_closed)
        return pipe

    # --- stats ------------------------------------------------------------------------------

    def _inc(self, key: str, count: int = 1) -> None:
        if self.crawler is not None and self.crawler.stats is not None and count:
            self.crawler.stats.inc_value(key, count)

    # --- Scrapy hooks -----------------------------------------------------------------------

    async def open_spider(self) -> None:
        spider = self.crawler.spider if self.crawler else None
        name = getattr(spider, "name", None) or "unknown"
        settings = dedup_settings(self.crawler.settings) if self.crawler else {}
        self._opening = True
        try:
            self.crawl_id, job = await run_in_thread(self._start_crawl, spider, name, settings)
        finally:
            self._opening = False
        if self.crawler is not None:
            self.crawler.stats.set_value(dedup_signals.CRAWL_ID_STAT, self.crawl_id)
        if self._close_reason is not None:  # another component failed to open meanwhile
            await self._finish(self._close_reason)
            return
        where = (f", worker of distributed crawl {job}" if self._distributed is not None
                 else f", job {job}" if job else "")
        logger.info("Storing pages in %s (crawl %d%s)", self.store.url, self.crawl_id, where,
                    extra={"spider": spider})
        self._timer = create_looping_call(self._tick)
        self._timer.start(self.batch_seconds, now=False)

    def _start_crawl(self, spider: Any, name: str,
                     settings: dict[str, Any]) -> tuple[int, str | None]:
        """The new crawl's id and job (blocking: file and database work, in a thread)."""
        from crawler.cluster.worker import distributed_member

        job, worker = _job(self.crawler), None
        me = distributed_member(self.crawler)
        if me is not None:  # one row per worker, under the distributed crawl's own row
            job, worker = me.crawl_key(), me.id
        crawl_id = self.store.start_crawl(name, seed_urls(spider), settings, job=job,
                                          command=run_command(spider), worker=worker)
        self._distributed = job if worker is not None else None
        return crawl_id, job

    async def process_item(self, item: Any) -> Any:
        page = ItemAdapter(item)
        if not page.get("url"):
            self._inc("storage/skipped")
            return item
        self._pending.add_document(document_row(item, self.crawl_id))
        self._pending.add_page(page)
        if self._pending.full(self.batch_size):
            self.flush()
        if len(self._queue) > MAX_QUEUED_BATCHES and not self._failed:
            await self.wait_idle()
        return item

    def item_dropped(self, item: Any, response: Any, exception: BaseException,
                     spider: Any = None) -> None:
        """Queue a drop record for a duplicate; any dropped page's fingerprints join the batch,
        except an Undecided page's: its request is not finished (fetched again)."""
        page = ItemAdapter(item) if ItemAdapter.is_item(item) else None
        if page is None or isinstance(exception, Undecided):
            return
        if isinstance(exception, DuplicatePage):
            row = dropped_row(item, exception.drop, self.crawl_id, self.dropped_text_max_chars)
            self._pending.add_dropped(row)
        self._pending.add_page(page)
        if self._pending.full(self.batch_size):
            self.flush()

    def page_demoted(self, drop: Drop, duplicate_content_hash: str | None = None,
                     **_: Any) -> None:
        """A stored (or queued) page turned out a duplicate (``drop``): move it to
        ``dropped`` in the current batch, which holds or follows its own row (written after
        it)."""
        self._pending.demotions.append({
            "url": drop.url, "duplicate_of": drop.duplicate_of, "reason": drop.reason,
            "distance": drop.distance, "duplicate_simhash": drop.duplicate_simhash,
            "duplicate_content_hash": duplicate_content_hash, "rule": drop.rule,
            "crawl_id": self.crawl_id, "max_chars": self.dropped_text_max_chars,
        })  # fmt: skip

    def page_refingerprinted(self, url: str, simhash: int | None, **_: Any) -> None:
        """A kept page's fingerprint was computed again (its site's template was learned):
        its row is updated in the current batch, which holds or follows the row itself."""
        self._pending.refreshes.append({"url": url, "simhash": simhash})

    async def close_spider(self) -> None:
        self._closing = True
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self.flush()
        await self.wait_idle()
        if self._queue and not self._halted:  # the database was down: one last try
            self._failed = False
            self._start_writer()
            await self.wait_idle()
        if self._queue:
            self._report_unsaved()
        elif self.settle is not None and self.crawl_id is not None and not self._failed:
            await self._settle(self.settle)

    def _settle_now(self, options: SettleOptions) -> Settled:
        """The settle step (blocking), obeying a person's rules as they are now: the
        database's (recorded during the crawl too) and ``DEDUP_OVERRIDES_FILE``'s."""
        assert self.crawl_id is not None
        return self.store.settle(
            options.k, crawl_id=self.crawl_id, scope=None if options.persist else [self.crawl_id],
            prefer_canonical=options.prefer_canonical, max_chars=self.dropped_text_max_chars,
            overrides=rules_of(self.store, options.rules_file, self._url_policy()))

    def _url_policy(self) -> UrlPolicy | None:
        """How the rules file's URLs are made canonical: the crawl's ``URLNORM_*``."""
        return UrlPolicy.from_settings(self.crawler.settings) if self.crawler else None

    async def _settle(self, options: SettleOptions) -> None:
        """Re-decide the duplicate groups that changed (:mod:`crawler.dedup.settle`) once every
        batch is committed; the moves' drop log lines go out as a last ``batch_committed``.
        A failure leaves the crawl unsettled (``crawls.settled_at`` NULL: the next crawl or
        ``scrapy settle`` takes it in) and is logged, never lost."""
        try:
            done = await run_in_thread(self._settle_now, options)
        except (StorageError, OverrideError) as exc:
            logger.warning("The settle step failed (%s); the stored pages are as decided "
                           "while crawling. Run `scrapy settle` once the database is back.",
                           exc)
            self._inc("dedup/settle/errors")
            return
        for key, count in (("groups", done.groups), ("demoted", done.demoted),
                           ("promoted", done.promoted), ("repointed", done.repointed)):
            self._inc(f"dedup/settle/{key}", count)
        # the rows it wrote, as a batch's: pages stored = documents - demoted
        self._inc("storage/documents", done.promoted)
        self._inc("storage/dropped", done.demoted)
        self._inc("storage/demoted", done.demoted)
        if done.rows and self.crawler is not None:
            await self.crawler.signals.send_catch_log_async(
                signal=dedup_signals.batch_committed, fingerprints=[], leases=[],
                documents=[], dropped=done.rows)

    async def spider_closed(self, spider: Any, reason: str) -> None:
        self._close_reason = reason
        if not self._opening:  # else open_spider records the end once start_crawl returns
            await self._finish(reason)

    async def _finish(self, reason: str) -> None:
        """Record the end of the crawl with the final stats, then release the database."""
        try:
            if self.crawl_id is not None and self.crawler is not None:
                stats = dict(self.crawler.stats.get_stats())
                stats.setdefault("finish_reason", reason)  # a failure while closing wins
                await run_in_thread(self.store.finish_crawl, self.crawl_id,
                                    stats["finish_reason"], stats)
                if self._distributed is not None and stats["finish_reason"] == "finished":
                    await run_in_thread(self._finish_distributed, self._distributed)
        except StorageError as exc:
            logger.error("Could not record the end of crawl %s: %s", self.crawl_id, exc)
        finally:
            self.store.close()

    def _finish_distributed(self, key: str) -> None:
        """A worker leaving a done distributed crawl closes (again) the crawl's own row, after
        its own row (blocking): whichever does it last has seen every worker row closed before
        it, so two workers closing at once cannot both leave it open. Redis unreachable now:
        the row stays open, nothing else is lost."""
        from crawler.cluster.worker import crawl_is_done

        try:
            if self.crawler is None or not crawl_is_done(self.crawler):
                return
        except Exception as exc:  # Redis away (redis-py's errors, ours): nothing to lose
            logger.warning("Could not tell whether distributed crawl %s is over (%s: %s); its "
                           "row stays open", key, type(exc).__name__, exc)  # fmt: skip
            return
        parent = self.store.finish_distributed(key, "finished")
        if parent is not None:
            logger.info("Distributed crawl %s is done: its row, crawl %d, is closed (scrapy "
                        "dropped / dedupreport report it whole)", key, parent)  # fmt: skip

    def idle(self) -> bool:
        """Nothing queued or being written: every page handed over so far is committed (or was
        refused for good)."""
        pending = self._pending
        return not (self._writing or self._queue or len(pending) or pending.leases)

    # --- batching and the writer ------------------------------------------------------------

    def _tick(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Move the pending rows into the write queue and make sure the writer runs."""
        if len(self._pending) or self._pending.fingerprints or self._pending.leases:
            self._queue.append(self._pending)
            self._pending = Batch()
        self._start_writer()

    def _start_writer(self) -> None:
        if self._writing or self._failed or not self._queue:
            return
        self._writing = True
        deferred_from_coro(self._drain())

    async def wait_idle(self) -> None:
        """Wait until the writer has nothing left it can write."""
        if not self._writing:
            return
        waiter: Deferred[None] = Deferred()
        self._idle_waiters.append(waiter)
        await maybe_deferred_to_future(waiter)

    async def _drain(self) -> None:
        try:
            while self._queue and not self._failed:
                batch = self._queue[0]
                if self.crawler is not None:  # awaited: the shared frontier's pushes first
                    await self.crawler.signals.send_catch_log_async(
                        signal=dedup_signals.batch_writing)
                if not await self._write(batch):
                    self._fail()
                    break
                self._queue.popleft()
                await self._committed(batch)
        except Exception:  # never leave waiters hanging
            logger.exception("Storage writer crashed")
            self._failed = True
        finally:
            self._writing = False
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    async def _committed(self, batch: Batch) -> None:
        """Count the batch and tell ``batch_committed``; its handlers are awaited (the drop
        log's lines of the batch, retried) before the next batch is written."""
        self._inc("storage/documents", len(batch.documents))
        drops = batch.drop_rows()
        demoted = batch.demoted()
        self._inc("storage/dropped", len(batch.dropped) + demoted)
        self._inc("storage/demoted", demoted)
        self._inc("storage/repointed", len(drops) - len(batch.dropped) - demoted)
        self._inc("storage/batches")
        if self.crawler is not None:
            await self.crawler.signals.send_catch_log_async(
                signal=dedup_signals.batch_committed,
                fingerprints=list(batch.fingerprints),
                leases=list(batch.leases),
                documents=[row["canonical_url"] for row in batch.documents],
                dropped=drops,
            )

    async def _write(self, batch: Batch) -> bool:
        """Write one batch, retrying transient errors; False when the database stays down."""
        for attempt in range(self.retry_times + 1):
            try:
                await run_in_thread(self.store.write_batch, batch.documents, batch.dropped,
                                    batch.demotions, batch.refreshes, self.fence)
                return True
            except RedisRolledBack as exc:
                self._halt(exc)
                return False
            except RedisBackendError as exc:  # Redis away: store what was fetched, unfenced
                self._unfence(exc)
                continue
            except StorageError as exc:
                self._inc("storage/errors")
                if not exc.transient:
                    return await self._write_each(batch, exc)
                if attempt == self.retry_times:
                    logger.error("Storage write failed %d times, giving up: %s",
                                 attempt + 1, exc)
                    return False
                delay = RetryPolicy(self.retry_times, self.retry_backoff).delay(attempt)
                logger.warning("Storage write failed (attempt %d of %d), retrying in %.2f s: %s",
                               attempt + 1, self.retry_times + 1, delay, exc)
                await sleep(delay)
        return False

    async def _write_each(self, batch: Batch, first: StorageError) -> bool:
        """Isolate rows the database refuses by writing the batch one row at a time.

        False (fatal) when a transient error occurs or no row at all is accepted (a schema
        problem rather than bad rows); the batch is then left untouched.
        """
        logger.warning("A batch was refused (%s); writing its rows one by one", first)
        kept: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        refused: list[tuple[str, StorageError]] = []
        for kind, rows in enumerate((batch.documents, batch.dropped)):
            for row in rows:
                one = ([row], []) if kind == 0 else ([], [row])
                try:
                    await run_in_thread(self.store.write_batch, *one)
                    kept[kind].append(row)
                except StorageError as exc:
                    if exc.transient:
                        return False
                    refused.append((row["url"], exc))
        if batch.refreshes:  # fingerprints only: never refused for the data
            await run_in_thread(self.store.write_batch, [], [], [], batch.refreshes)
        for demotion in batch.demotions:  # after the pages kept instead, as in one batch
            try:
                await run_in_thread(self.store.write_batch, [], [], [demotion])
            except StorageError as exc:
                if exc.transient:
                    return False
                demotion["row"] = None
                refused.append((demotion["url"], exc))
        if refused and not (kept[0] or kept[1]):
            return False
        for url, error in refused:
            logger.error("Storage refused the row for %s: %s", url, error)
        self._inc("storage/rejected", len(refused))
        batch.documents, batch.dropped = kept
        return True

    def _halt(self, exc: RedisRolledBack) -> None:
        """Redis is older than storage: nothing more is written; the batches stay
        unacknowledged (their requests are fetched again) and the crawl closes
        ``redis_rolled_back``, one ERROR line for the crawl."""
        if self._halted is None:
            self._halted = REDIS_ROLLED_BACK
            report_rolled_back(self.crawler, exc)

    def _unfence(self, exc: RedisBackendError) -> None:
        """Redis is unavailable (or emptied) under a batch's commit: the Redis-outage policy
        closes the crawl (``redis_error``, one ERROR line), and the pages fetched so far are
        stored without the commit counter (as before it existed: storage does not need Redis;
        their requests stay leased in Redis and are fetched again, upserted)."""
        self.fence = None
        stop_on_redis_error(self.crawler, exc, exc.url)

    def _fail(self) -> None:
        self._failed = True
        # the last attempt at close (_report_unsaved says what is lost), or Redis rolled back
        if self._closing or self._halted:
            return
        logger.error("The crawl database at %s is unavailable; closing the spider "
                     "(storage_error). %d rows are kept in memory for a last attempt at close.",
                     self.store.url, sum(len(b) for b in self._queue) + len(self._pending))
        close_crawl(self.crawler, STORAGE_ERROR)

    def _report_unsaved(self) -> None:
        """At close, rows still not stored: one ERROR line, ``storage/unsaved``, and the crawl
        fails (``storage_error``) even when it was closing for another reason."""
        documents = sum(len(b.documents) for b in self._queue)
        dropped = sum(len(b.dropped) for b in self._queue)
        first = next((r["url"] for b in self._queue for r in (*b.documents, *b.dropped)), "-")
        then = ("run the crawl again as the ERROR line above says" if self._halted
                else "re-crawl them once the database is back")
        logger.error("%d pages and %d drop records were NOT stored in %s (first: %s); %s",
                     documents, dropped, self.store.url, first, then)
        self._inc("storage/unsaved", documents + dropped)
        close_crawl(self.crawler, self._halted or STORAGE_ERROR)

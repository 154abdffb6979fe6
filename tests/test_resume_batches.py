"""A resume owing many requests: ``ResumingScheduler`` re-schedules the ``JOBDIR`` journal in
batches, so the crawl fetches at once however many it owes (one by one, 500,000 of them kept
the crawl from fetching anything for 139 s), none lost or let through twice; the journal's
replay adds to the seen set only what its snapshot lacks, ending with the same filter.

Real crawler settings, Scrapy's real scheduler with its disk queue, our real dupefilter and
journal; the engine's ``crawl`` is the one stand-in (it enqueues into the scheduler, as the
engine does once the ``request_scheduled`` handlers let a request through)."""

from __future__ import annotations

from types import SimpleNamespace

from scrapy import Request, Spider, signals
from scrapy.utils.test import get_crawler

from crawler import meta
from crawler import signals as dedup_signals
from crawler.scheduler import RESUME_BATCH, ResumingScheduler

SETTINGS = {
    "DUPEFILTER_CLASS": "crawler.dupefilter.BloomDupeFilter",
    "BLOOM_CAPACITY": 10_000,
    "BLOOM_ERROR_RATE": 0.001,
    "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",  # no engine needed
}
OWED = 2 * RESUME_BATCH + 345


def open_scheduler(tmp_path) -> tuple[ResumingScheduler, object]:
    crawler = get_crawler(Spider, {**SETTINGS, "JOBDIR": str(tmp_path),
                                   "STORAGE_URL": f"sqlite:///{tmp_path}/crawl.db"})  # fmt: skip
    crawler.spider = crawler._create_spider("t")
    crawler.stats.open_spider()
    scheduler = ResumingScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler, crawler


def test_a_large_journal_is_rescheduled_in_batches_and_each_request_once(tmp_path) -> None:
    scheduler, crawler = open_scheduler(tmp_path)
    requests = [Request(f"http://a/{i}", meta={meta.CANONICAL_URL: f"http://a/{i}", "depth": 1})
                for i in range(OWED + 100)]  # fmt: skip
    for request in requests:
        assert scheduler.enqueue_request(request)
    done = [crawler.request_fingerprinter.fingerprint(r).hex() for r in requests[:100]]
    crawler.signals.send_catch_log(dedup_signals.request_finished, fingerprints=done)
    scheduler.close("shutdown")  # as a kill would leave it: the journal owes OWED requests

    scheduler, crawler = open_scheduler(tmp_path)
    handed: list[str] = []

    def crawl(request: Request) -> None:  # the engine's crawl: into the scheduler
        handed.append(request.url)
        scheduler.enqueue_request(request)

    crawler.engine = SimpleNamespace(crawl=crawl)
    crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert len(handed) == RESUME_BATCH  # not all OWED before the first fetch
    assert crawler.stats.get_value("dedup/jobdir/resumed") == OWED
    assert scheduler.has_pending_requests()
    assert len(scheduler) == OWED  # queued and still to queue: the progress line's queue

    fetched = []
    while (request := scheduler.next_request()) is not None:
        fetched.append(request.url)
        # topped up as the queue drains: never more than two batches waiting
        assert len(handed) - len(fetched) < 2 * RESUME_BATCH
    assert not scheduler.has_pending_requests()
    assert len(fetched) == len(set(fetched)) == OWED  # each owed request once, none lost
    assert sorted(fetched) == sorted(r.url for r in requests[100:])
    assert not scheduler.enqueue_request(requests[150].replace())  # then seen as any other
    scheduler.close("finished")


def test_a_kill_before_every_batch_is_scheduled_loses_none(tmp_path) -> None:
    """Requests owed but not yet handed to the engine stay pending in the journal: a second
    kill after the first batch resumes the rest (and the batch, never finished) again."""
    scheduler, crawler = open_scheduler(tmp_path)
    urls = [f"http://a/{i}" for i in range(OWED)]
    for url in urls:
        assert scheduler.enqueue_request(Request(url, meta={meta.CANONICAL_URL: url}))
    scheduler.close("shutdown")

    scheduler, crawler = open_scheduler(tmp_path)
    crawler.engine = SimpleNamespace(crawl=scheduler.enqueue_request)
    crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    first = scheduler.next_request()
    assert first is not None
    scheduler.close("shutdown")  # nothing finished: everything is still owed

    scheduler, crawler = open_scheduler(tmp_path)
    crawler.engine = SimpleNamespace(crawl=scheduler.enqueue_request)
    crawler.signals.send_catch_log(signals.spider_opened, spider=crawler.spider)
    assert crawler.stats.get_value("dedup/jobdir/resumed") == OWED
    fetched = []
    while (request := scheduler.next_request()) is not None:
        fetched.append(request.url)
    assert sorted(fetched) == sorted(urls)
    scheduler.close("finished")


def test_replay_adds_what_the_snapshot_lacks_and_ends_with_the_same_seen_set(
    tmp_path, monkeypatch
) -> None:
    """The replay asks the seen set in batches and adds only what the snapshot lacks: the
    filter it ends with is the one adding every replayed fingerprint gives (bits and count),
    across a snapshot taken mid-journal, finished records and a kill (no close)."""
    import hashlib

    from crawler.backends.bloom import LocalSeenSet
    from crawler.state import jobstate
    from crawler.state.jobstate import JobState
    from crawler.state.journal import encode_scheduled

    fps = [hashlib.sha1(str(i).encode()).digest()[:16] for i in range(3_000)]
    state = JobState(tmp_path, LocalSeenSet(capacity=5_000), snapshot_records=1_000,
                     snapshot_seconds=3600)  # fmt: skip
    state.open()
    for i, fp in enumerate(fps):
        state.seen.add(fp)
        state.scheduled(fp, f"http://a/{i}", 1, f"http://a/{i}")
        if i % 7 == 0:
            state.finished([fp])
    assert state.snapshots >= 2 and state._file is not None
    state._file.close()  # a kill: the records after the last snapshot are in the journal only
    state._file = None

    every = LocalSeenSet(capacity=5_000)
    for fp in fps:
        every.add(fp)
    monkeypatch.setattr(jobstate, "REPLAY_BATCH", 256)  # several batches
    again = JobState(tmp_path, LocalSeenSet(capacity=5_000))
    pending = again.open()
    assert len(pending) == sum(1 for i in range(3_000) if i % 7)
    # the pending map points at the records as written (compacted by the open)
    assert set(again.pending) == {rec.fp for rec in pending}
    body = (tmp_path / "dedup" / "journal.bin").read_bytes()
    assert {fp: body[off:off + len(encode_scheduled(rec))] for rec in pending
            for fp, off in [(rec.fp, again.pending[rec.fp])]} \
        == {rec.fp: encode_scheduled(rec) for rec in pending}
    assert bytes(again.seen.layers[0].bits) == bytes(every.layers[0].bits)
    assert len(again.seen) == len(every) == 3_000
    again.close()


def budget_after_resume(tmp_path, monkeypatch, batch: int) -> list[str | None]:
    """A run schedules OWED variants of one path and is killed; the resume (``RESUME_BATCH``
    = ``batch``, ``TRAP_PATH_MAX_QUERY_VARIANTS`` = OWED) answers the web spider's budget
    verdicts on a new variant: once open, once every owed request is fetched, and then with
    one variant given back."""
    from crawler import scheduler as scheduler_module
    from crawler.spiders.web import WebSpider

    monkeypatch.setattr(scheduler_module, "RESUME_BATCH", batch)
    settings = {**SETTINGS, "JOBDIR": str(tmp_path), "TRAP_PATH_MAX_QUERY_VARIANTS": OWED,
                "STORAGE_URL": f"sqlite:///{tmp_path}/crawl.db"}  # fmt: skip
    variants = [f"http://a/cal?d={i}" for i in range(OWED)]
    verdicts = []
    for run in ("killed", "resumed"):
        crawler = get_crawler(WebSpider, settings)
        spider = crawler.spider = WebSpider.from_crawler(crawler, urls="http://a/")
        crawler.stats.open_spider()
        scheduler = ResumingScheduler.from_crawler(crawler)
        scheduler.open(spider)

        def crawl(request: Request, crawler=crawler, scheduler=scheduler) -> None:
            """The engine's crawl: request_scheduled, then the scheduler, request_dropped."""
            crawler.signals.send_catch_log(signals.request_scheduled, request=request,
                                           spider=crawler.spider)  # fmt: skip
            if not scheduler.enqueue_request(request):
                crawler.signals.send_catch_log(signals.request_dropped, request=request,
                                               spider=crawler.spider)  # fmt: skip

        no_pipelines = SimpleNamespace(itemproc=SimpleNamespace(middlewares=[]))
        crawler.engine = SimpleNamespace(crawl=crawl, scraper=no_pipelines)
        if run == "killed":  # the first run schedules every variant, then is killed
            for url in variants:
                crawl(Request(url, meta={meta.CANONICAL_URL: url, "depth": 1}))
            scheduler.close("shutdown")
            continue
        crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
        budget = spider.trap_rules.budget
        verdicts.append(budget.refuse("http://a/cal?d=new"))  # a first page's new link
        fetched = []
        while (request := scheduler.next_request()) is not None:
            fetched.append(request.url)
        assert sorted(fetched) == sorted(variants)  # every owed one fetched, refused or not
        verdicts.append(budget.refuse("http://a/cal?d=new"))
        budget.count("http://a/cal?d=0", -1)  # counted once each: one less leaves room
        verdicts.append(budget.refuse("http://a/cal?d=new"))
        scheduler.close("finished")
    return verdicts


def test_owed_requests_count_against_the_budgets_at_open_as_an_all_at_once_resume(
    tmp_path, monkeypatch
) -> None:
    """A resume owing more variants of one path than a batch: the new variants a first
    page links are refused at once, as when every owed request was scheduled at open (a
    reviewer's finding: counted batch by batch, new variants got in over the budget and the
    owed ones were scheduled anyway), and each owed request counts once, not again when its
    batch is scheduled."""
    batched = budget_after_resume(tmp_path / "batched", monkeypatch, RESUME_BATCH)
    at_once = budget_after_resume(tmp_path / "at_once", monkeypatch, 10 * OWED)
    spent = "urlnorm/trap/query_variants"
    assert at_once == [spent, spent, None]
    assert batched == at_once

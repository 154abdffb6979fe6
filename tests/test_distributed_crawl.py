"""A distributed crawl recorded as one crawl (issue 24, item 1; revision 0010).

Every worker of one namespace records its own ``crawls`` row under the crawl's id (``job``)
and a ``parent_id`` pointing at one ``distributed`` row for the whole crawl, whose set
fingerprints are those of everything the crawl stored. The review commands report the crawl
whole by default; ``--worker`` narrows to one worker.

The storage tests run on SQLite and the real PostgreSQL, with the workers' batches committed
in two different orders (the parent's record must not depend on which worker writes first).
The end-to-end test runs real worker processes on the real Redis and PostgreSQL: three workers,
one SIGKILLed mid-crawl, one joining late.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from crawler.content.setfp import CrawlSets
from crawler.review import CrawlDB, ReviewError
from crawler.storage import Store
from crawler.storage.models import Crawl
from crawler.vocab import DISTRIBUTED, RECLAIMED_REASON, UNFINISHED_REASON
from tests.test_setfp import demotion, page
from tests.test_storage import db_url, drop, pg_schema_url  # noqa: F401 (fixtures)

KEY = "c20261204T120000-abc123"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:  # noqa: F811
    with Store(db_url) as s:
        yield s


def rows(store: Store) -> list[Crawl]:
    return store.crawls()


def test_workers_of_one_crawl_share_one_distributed_row(store: Store) -> None:
    a = store.start_crawl("web", ["http://s/"], {"k": 3}, job=KEY, command="crawl",
                          worker="h:1:aa")
    b = store.start_crawl("web", ["http://s/"], {"k": 3}, job=KEY, command="crawl",
                          worker="h:2:bb")
    other = store.start_crawl("web", job="c-other", command="crawl", worker="h:3:cc")
    alone = store.start_crawl("web", command="crawl")  # a single-process crawl: no parent
    by_id = {c.id: c for c in rows(store)}
    parents = [c for c in by_id.values() if c.command == DISTRIBUTED]
    assert len(parents) == 2  # one per crawl id, however many workers
    parent = next(c for c in parents if c.job == KEY)
    assert parent.worker is None and parent.parent_id is None
    assert (by_id[a].parent_id, by_id[b].parent_id) == (parent.id, parent.id)
    assert (by_id[a].worker, by_id[b].job) == ("h:1:aa", KEY)
    assert by_id[other].parent_id not in (None, parent.id)
    assert by_id[alone].parent_id is None and by_id[alone].job is None


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_the_crawls_row_records_what_every_worker_stored(store: Store, order: str) -> None:
    a = store.start_crawl("web", job=KEY, command="crawl", worker="h:1:aa")
    b = store.start_crawl("web", job=KEY, command="crawl", worker="h:2:bb")
    parent = next(c.id for c in rows(store) if c.command == DISTRIBUTED)
    batches = {
        "a": ([page("http://a/1", a, "h1"), page("http://a/2", a, "h2")], [], []),
        # b stores its own pages, then demotes a page a stored (a preferred twin came to b)
        "b": ([page("http://b/1", b, "h3"), page("http://b/2", b, "h4")], [],
              [demotion("http://a/2", b)]),
    }
    for name in (("a", "b") if order == "a_first" else ("b", "a")):
        documents, drops, demotions = batches[name]
        store.write_batch(documents, drops, demotions)
    recorded = store.crawl_sets(parent)
    if order == "a_first":  # a/2 was stored, then demoted by b: it left the crawl
        expected = [("http://a/1", "h1"), ("http://b/1", "h3"), ("http://b/2", "h4")]
    else:  # b's demotion found nothing stored yet; a stored a/2 after
        expected = [("http://a/1", "h1"), ("http://a/2", "h2"), ("http://b/1", "h3"),
                    ("http://b/2", "h4")]
    assert recorded == store.recount_sets(parent) == CrawlSets.of(expected)
    assert recorded == CrawlSets.of(sorted(_documents(store)))  # what storage holds now
    # each worker's own record is its own pages (what --worker reports)
    assert store.crawl_sets(a) == store.recount_sets(a)
    assert store.crawl_sets(b) == CrawlSets.of([("http://b/1", "h3"), ("http://b/2", "h4")])


def test_two_crawls_stored_the_same_when_their_workers_split_it_differently(store) -> None:
    pages = [(f"http://s/{i}", f"h{i}") for i in range(12)]
    totals = []
    for key, split in (("c-one", 4), ("c-two", 9)):
        w1 = store.start_crawl("web", job=key, command="crawl", worker=f"{key}:1")
        w2 = store.start_crawl("web", job=key, command="crawl", worker=f"{key}:2")
        store.write_batch([page(u, w1, h) for u, h in pages[:split]], [])
        store.write_batch([page(u, w2, h) for u, h in pages[split:]], [])
        parent = next(c.id for c in rows(store) if c.command == DISTRIBUTED and c.job == key)
        totals.append(store.crawl_sets(parent))
    assert totals[0] == totals[1] == CrawlSets.of(pages)  # crawldiff's O(1) verdict: same


def test_the_last_worker_out_closes_the_crawl_with_summed_stats(store: Store) -> None:
    a = store.start_crawl("web", job=KEY, command="crawl", worker="h:1:aa")
    b = store.start_crawl("web", job=KEY, command="crawl", worker="h:2:bb")
    c = store.start_crawl("web", job=KEY, command="crawl", worker="h:3:cc")
    store.finish_crawl(a, "finished", {"item_scraped_count": 5, "finish_reason": "finished"})
    assert store.close_worker_crawl(KEY, "h:2:bb", RECLAIMED_REASON) == 1  # it died
    assert store.close_worker_crawl(KEY, "h:2:bb", RECLAIMED_REASON) == 0  # closed once
    store.finish_crawl(c, "finished", {"item_scraped_count": 7, "elapsed": 1.5})
    parent = store.finish_distributed(KEY, "finished")
    by_id = {r.id: r for r in rows(store)}
    assert by_id[b].finish_reason == RECLAIMED_REASON and by_id[b].finished_at is not None
    assert by_id[parent].finish_reason == "finished" and by_id[parent].finished_at is not None
    assert by_id[parent].stats["item_scraped_count"] == 12
    assert by_id[parent].stats["workers"] == 3
    assert store.finish_distributed("c-unknown", "finished") is None


@pytest.mark.parametrize("order", ["a_then_b", "b_then_a", "interleaved"])
def test_workers_closing_at_once_leave_the_crawl_closed_with_every_stat(store, order) -> None:
    """Each worker that leaves the crawl done closes its row, then the crawl's row: whatever
    the interleaving, the crawl's row ends closed with both workers' stats, and each worker's
    row with its own reason (a row closed 'unfinished' by the other is overwritten)."""
    a = store.start_crawl("web", job=KEY, command="crawl", worker="h:1:aa")
    b = store.start_crawl("web", job=KEY, command="crawl", worker="h:2:bb")
    steps = {
        "a_then_b": ["fa", "pa", "fb", "pb"],
        "b_then_a": ["fb", "pb", "fa", "pa"],
        "interleaved": ["fa", "fb", "pb", "pa"],
    }[order]
    for step in steps:
        row = a if step[1] == "a" else b
        if step[0] == "f":
            store.finish_crawl(row, "finished", {"item_scraped_count": 3 if row == a else 4})
        else:
            store.finish_distributed(KEY, "finished")
    by_id = {r.id: r for r in rows(store)}
    parent = next(r for r in by_id.values() if r.command == DISTRIBUTED)
    assert parent.finish_reason == "finished" and parent.stats["item_scraped_count"] == 7
    assert by_id[a].finish_reason == by_id[b].finish_reason == "finished"


def test_a_worker_row_left_open_when_the_crawl_closes_reads_unfinished(store) -> None:
    a = store.start_crawl("web", job=KEY, command="crawl", worker="h:1:aa")
    killed = store.start_crawl("web", job=KEY, command="crawl", worker="h:2:bb")
    store.finish_crawl(a, "finished", {"item_scraped_count": 3})
    store.finish_distributed(KEY, "finished")
    row = next(r for r in rows(store) if r.id == killed)
    assert row.finish_reason == UNFINISHED_REASON and row.finished_at is not None


def test_a_crawls_totals_stay_what_it_stored_when_a_later_crawl_stores_the_pages_again(
        tmp_path) -> None:
    """crawlstatus's storage line (and the re-run refusal's count): the pages a crawl stored
    as its own row records them; a later crawl re-storing the same pages (their documents
    rows move to it) left the first crawl at 0."""
    from crawler.storage.crawltotals import crawl_totals

    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    pages = [(f"http://s/{i}", f"h{i}") for i in range(5)]
    with Store(url) as store:
        for key in ("c-one", "c-two"):
            worker = store.start_crawl("web", job=key, command="crawl", worker=f"{key}:1")
            store.write_batch([page(u, worker, h) for u, h in pages],
                              [drop(f"http://s/copy-{key}", crawl_id=worker)])
    one, two = crawl_totals(url, "c-one"), crawl_totals(url, "c-two")
    assert (one.documents, one.dropped) == (5, 1)  # was (0, 1): every row moved to c-two
    assert (two.documents, two.dropped, two.crawls) == (5, 1, 2)


def _documents(store: Store) -> list[tuple[str, str | None]]:
    with store.engine.connect() as conn:
        return [(u, h) for u, h in conn.execute(
            sa.text("SELECT canonical_url, content_hash FROM documents"))]


def _two_worker_crawl(store: Store) -> tuple[int, int, int]:
    a = store.start_crawl("web", job=KEY, command="crawl", worker="host1:11:aa")
    b = store.start_crawl("web", job=KEY, command="crawl", worker="host2:22:bb")
    store.write_batch([page("http://a/1", a, "h1")], [drop("http://a/1-copy", crawl_id=a)])
    store.write_batch([page("http://b/1", b, "h2")],
                      [drop("http://b/1-copy", crawl_id=b), drop("http://b/2-copy", crawl_id=b)])
    parent = next(c.id for c in rows(store) if c.command == DISTRIBUTED)
    return parent, a, b


def test_review_selects_the_whole_distributed_crawl_by_default(store: Store) -> None:
    parent, a, b = _two_worker_crawl(store)
    with CrawlDB.open(store.url) as db:
        whole = db.select()
        assert whole.crawl_ids == [a, b] and whole.distributed == parent
        assert KEY in whole.note and "--worker" in whole.note
        assert db.select(parent).crawl_ids == [a, b]  # --crawl of the crawl's own row
        assert db.select(b).crawl_ids == [b]  # --crawl of one worker's row: that worker
        assert db.select(worker="host2").crawl_ids == [b]  # a unique part of its id
        assert db.select(worker=str(a)).crawl_ids == [a]  # or its row's id
        assert db.select(job=KEY).crawl_ids == [a, b]  # the crawl id as a job: its workers
        with pytest.raises(ReviewError, match="matches several"):
            db.select(worker="host")
        with pytest.raises(ReviewError, match="matches none"):
            db.select(worker="nobody")
        flt_rows = db.dropped(_filter(crawl_ids=(a, b)))
        assert len(flt_rows) == 3
        assert {r.crawl_id for r in db.dropped(_filter(crawl_ids=(b,)))} == {b}
    alone = store.start_crawl("web", command="crawl")  # a later single-process crawl
    store.write_batch([page("http://x/1", alone, "h9")], [])
    with CrawlDB.open(store.url) as db:
        assert db.select().crawl_ids == [alone]
        with pytest.raises(ReviewError, match="not one"):
            db.select(worker="host1")
        assert db.select(worker="host1", crawl_id=parent).crawl_ids == [a]


def _filter(**kwargs):
    from crawler.review import DropFilter

    return DropFilter(**kwargs)


def _scrapy(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_the_commands_report_the_whole_crawl_and_narrow_to_a_worker(tmp_path) -> None:
    db = tmp_path / "crawl.db"
    with Store(f"sqlite:///{db}") as store:
        parent, a, _ = _two_worker_crawl(store)
    root = _root()
    out = _scrapy("dropped", "--db", str(db), "--format", "json", cwd=root)
    assert out.returncode == 0, out.stderr
    listed = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(listed) == 3 and f"distributed crawl {KEY}" in out.stderr
    one = _scrapy("dropped", "--db", str(db), "--format", "json", "--worker", "host2", cwd=root)
    assert one.returncode == 0, one.stderr
    assert sorted(json.loads(x)["url"] for x in one.stdout.splitlines() if x.strip()) == [
        "http://b/1-copy", "http://b/2-copy"]
    bad = _scrapy("dropped", "--db", str(db), "--worker", "nobody", cwd=root)
    assert bad.returncode == 1 and not bad.stdout.strip()
    assert bad.stderr.count("\n") == 1 and "matches none" in bad.stderr  # one line
    report = _scrapy("dedupreport", "--db", str(db), "--format", "json", "-o", "-", cwd=root)
    assert report.returncode == 0, report.stderr
    totals = json.loads(report.stdout)["totals"]
    assert (totals["pages"], totals["dropped"]) == (5, 3)  # 2 stored, 3 dropped
    diff = _scrapy("crawldiff", "latest", str(parent), "--db", str(db), cwd=root)
    assert diff.returncode == 0, diff.stdout + diff.stderr  # latest: the crawl's own row
    assert f"A: crawl {parent} " in diff.stdout
    worker_diff = _scrapy("crawldiff", str(a), str(parent), "--db", str(db), cwd=root)
    assert worker_diff.returncode == 1  # one worker stored part of the crawl


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]



# --- end to end: real workers on the real Redis and PostgreSQL ----------------------------------


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("kill", [True, False], ids=["one_killed", "none_killed"])
def test_three_workers_and_a_late_joiner_are_one_crawl(services, tmp_path, kill):
    """One ``distributed`` row for the crawl, one row per worker under it (the joiner's too),
    every row closed (a killed worker's by the worker that reclaimed it), the crawl's record
    equal to what storage holds, and the commands' defaults report the whole crawl."""
    from bench.cluster import cluster_on, four_sites, outcome, wait_for_hits
    from crawler.backends.redis import connect
    from crawler.sitegen.server import serve_web

    with serve_web(four_sites()) as servers, cluster_on(servers, tmp_path, **services) as cluster:
        cluster.delay = 0.1  # long enough that the joiner joins a crawl still running
        first = [cluster.start() for _ in range(3)]
        wait_for_hits(servers, 0.25)
        members = {cluster.member_id(w): w for w in first}
        key = connect(cluster.redis_url).hget(f"{cluster.base}:meta", "crawl").decode()
        victim = cluster.busiest() if kill else None
        if victim is not None:
            cluster.kill(victim)
        joiner = cluster.start()
        members[cluster.member_id(joiner)] = joiner
        cluster.wait()
        for worker in cluster.workers:
            assert worker.killed or worker.proc.returncode == 0, worker.log[-3000:]
        figures = outcome(cluster, servers)
        assert figures["pages_unfetched"] == figures["pages_undecided"] == 0, figures
        with Store(cluster.storage_url, create=False) as store:
            crawls = store.crawls()
            documents = _documents(store)
            with store.engine.connect() as conn:
                drops = dict(conn.execute(sa.text(
                    "SELECT crawl_id, count(*) FROM dropped GROUP BY crawl_id")).all())
        parents = [c for c in crawls if c.command == DISTRIBUTED]
        assert len(parents) == 1 and parents[0].job == key
        parent = parents[0]
        workers = [c for c in crawls if c.parent_id == parent.id]
        assert len(crawls) == 1 + len(workers)  # nothing else was recorded
        assert {c.worker for c in workers} == set(members)  # every worker, the joiner too
        assert all(c.job == key and c.finished_at is not None for c in workers)
        for row in workers:
            expected = RECLAIMED_REASON if members[row.worker] is victim else "finished"
            assert row.finish_reason == expected, (row.worker, row.finish_reason)
        assert parent.finish_reason == "finished" and parent.finished_at is not None
        assert parent.stats["workers"] == len(workers)
        assert parent.sets() == CrawlSets.of(documents)  # the crawl's record = storage
        assert parent.sets().urls.count == len(documents) > 100
        # the commands' defaults: the whole crawl
        env_db = cluster.storage_url
        out = _scrapy("dropped", "--db", env_db, "--format", "json", cwd=_root())
        assert out.returncode == 0, out.stderr
        assert len(out.stdout.splitlines()) == sum(drops.values()) > 0
        assert f"distributed crawl {key}" in out.stderr
        joiner_row = next(c for c in workers if members[c.worker] is joiner)
        one = _scrapy("dropped", "--db", env_db, "--format", "json", "--worker",
                      joiner_row.worker, cwd=_root())
        assert one.returncode == 0, one.stderr
        assert len(one.stdout.splitlines()) == drops.get(joiner_row.id, 0)
        diff = _scrapy("crawldiff", "latest", str(parent.id), "--db", env_db, cwd=_root())
        assert diff.returncode == 0, diff.stdout + diff.stderr


@pytest.mark.slow
def test_export_writes_the_whole_crawl_or_one_worker_as_a_feed(tmp_path) -> None:
    """``scrapy export``: the crawl's stored set from storage, in the feed's schema; a
    distributed crawl whole by default, one worker with --worker, JSON Lines or CSV."""
    import csv

    db = tmp_path / "crawl.db"
    with Store(f"sqlite:///{db}") as store:
        _, a, b = _two_worker_crawl(store)
        store.write_batch([page("http://a/2", a, "h5", simhash=2**63 + 5)], [])
    root = _root()
    out = tmp_path / "pages.jsonl"
    done = _scrapy("export", "--db", str(db), "-o", str(out), cwd=root)
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(i["url"] for i in items) == ["http://a/1", "http://a/2", "http://b/1"]
    assert f"distributed crawl {KEY}" in done.stderr and "3 stored pages" in done.stderr
    high = next(i for i in items if i["url"] == "http://a/2")
    assert high["simhash"] == format(2**63 + 5, "016x") and high["content_hash"] == "h5"
    from crawler.items import EXPORT_FIELDS

    assert all(list(i) == list(EXPORT_FIELDS) for i in items)
    assert not list(tmp_path.glob("*.tmp"))  # written to a temp file, renamed
    one = tmp_path / "b.csv"
    done = _scrapy("export", "--db", str(db), "-o", str(one), "--worker", "host2", cwd=root)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(one.open()))
    assert [r["url"] for r in rows] == ["http://b/1"] and b
    bad = _scrapy("export", "--db", str(tmp_path / "missing.db"), "-o", "-", cwd=root)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "missing.db" in bad.stderr

"""One job, one report: the runs of a JOBDIR crawl share a job id, and commands pick crawls.

* :func:`crawler.state.jobstate.job_id` and the ``crawls.job``/``crawls.command`` columns (revision
  0007), on SQLite and the real PostgreSQL;
* :func:`crawler.review.select_crawls` on real SQLite databases written through
  :class:`crawler.storage.Store` (hand-made rows, as in ``tests/test_review.py``);
* end to end, as subprocesses on a generated site served on 127.0.0.1: a JOBDIR crawl killed
  with SIGKILL and resumed is two ``crawls`` rows of one job, ``scrapy dedupreport --job``
  counts each of its pages once (the totals of an uninterrupted crawl), and ``scrapy parse``
  into the same database leaves the crawl report reachable with a suggestion.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command as alembic_command

from crawler import review
from crawler.review import LATEST_JOB, CrawlDB, ReviewError
from crawler.state.jobstate import (
    JOB_FILE,
    JobdirSettings,
    JobStateError,
    job_id,
    read_job_id,
    state_dir,
)
from crawler.storage import Store, migrations, parse_url
from tests.conftest import ROOT, crawl_command, run_crawl
from tests.test_review import doc, drop
from tests.test_storage import db_url, pg_schema_url  # noqa: F401 (fixtures)

# --- the job id in JOBDIR --------------------------------------------------------------------


def test_job_id_is_created_once_and_kept(tmp_path: Path) -> None:
    assert read_job_id(tmp_path) is None
    first = job_id(tmp_path)
    assert len(first) == 12 and int(first, 16) >= 0
    path = state_dir(tmp_path) / JOB_FILE
    saved = json.loads(path.read_text())
    assert saved["job"] == first and saved["created"].endswith("+00:00")
    assert job_id(tmp_path) == first == read_job_id(tmp_path)
    assert [p.name for p in path.parent.iterdir()] == [JOB_FILE]  # no temp file left
    assert job_id(tmp_path / "other") != first


@pytest.mark.parametrize("content", ["", "{not json", '{"job": 7}', '["x"]', '{"job": "a b"}'])
def test_a_damaged_job_file_is_refused_naming_it(tmp_path: Path, content: str) -> None:
    path = state_dir(tmp_path) / JOB_FILE
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(JobStateError, match=JOB_FILE):
        job_id(tmp_path)
    with pytest.raises(JobStateError, match="delete the job directory"):
        JobdirSettings.from_settings({"JOBDIR": str(tmp_path)})  # pre-flight, before a crawl


# --- schema: crawls.job and crawls.command ------------------------------------------------------


def test_start_crawl_records_job_and_command(db_url: str) -> None:  # noqa: F811
    with Store(db_url) as store:
        one = store.start_crawl("web", job="abc123", command="crawl")
        two = store.start_crawl("web", command="parse")
        rows = {c.id: (c.job, c.command) for c in store.crawls()}
    assert rows == {one: ("abc123", "crawl"), two: (None, "parse")}


def test_a_0006_database_is_read_then_upgraded_keeping_its_crawls(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = sa.create_engine(parse_url(f"sqlite:///{path}"))
    with engine.begin() as conn:
        alembic_command.upgrade(migrations.alembic_config(conn), "0006")
        conn.execute(sa.text("INSERT INTO crawls (id, started_at, spider) VALUES "
                             "(1, '2026-01-01 00:00:00', 'web')"))
        conn.execute(sa.text("INSERT INTO documents (url, canonical_url, crawl_id) "
                             "VALUES ('http://s/a', 'http://s/a', 1)"))
    engine.dispose()
    with CrawlDB.open(str(path)) as db:  # review reads it as it is, without the columns
        assert db.runs() == [review.Run(1, None, None)]
        assert db.select().crawl_ids == [1]
        with pytest.raises(ReviewError, match=r"predates jobs.*--crawl ID"):
            db.select(job=LATEST_JOB)
    with Store(f"sqlite:///{path}") as store:
        store.check()
        assert store.schema_revision() == "0011"
        crawl = store.crawl(1)
        assert crawl is not None and (crawl.spider, crawl.job, crawl.command) == ("web", None, None)


# --- selection ----------------------------------------------------------------------------------


def make_db(path: Path, crawls: list[tuple[str | None, str, int]]) -> str:
    """A database with one crawl per ``(job, command, pages)``; page i of crawl c is unique."""
    store = Store(f"sqlite:///{path}")
    for n, (job, command, pages) in enumerate(crawls):
        cid = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3}, job=job, command=command)
        docs = [doc(100 * n + i, (0x1111_1111 * (n + 1)) << i, crawl_id=cid)
                for i in range(pages)]
        drops = [drop(f"http://site.test/copy{cid}.html", docs[0], "exact_duplicate",
                      docs[0]["simhash"], 100 * n + 50, "text", crawl_id=cid)] if pages else []
        store.write_batch(docs, drops)
        store.finish_crawl(cid, "finished", {})
    store.close()
    return str(path)


def test_the_latest_crawl_by_default_and_a_parse_run_named_with_the_way_out(tmp_path) -> None:
    path = make_db(tmp_path / "c.db", [(None, "crawl", 3), (None, "parse", 0)])
    with CrawlDB.open(path) as db:
        assert db.latest_crawl() == 2 and db.latest_with_pages() == 1
        assert db.crawls_with_pages() == [1] and db.latest_with_drops() == 1
        with pytest.raises(ReviewError) as info:
            db.select()
        assert str(info.value) == ("crawl 2 has no pages (a scrapy parse run); crawls with "
                                   "pages: 1; use --crawl 1")
        picked = db.select(crawl_id=1)
    assert picked.crawl_ids == [1] and picked.report_arg == 1 and picked.label == "crawl 1"
    assert picked.note == "report of crawl 1 (as asked; the latest is 2); --crawl ID for another"


def test_a_job_of_several_runs_is_noted_and_reported_as_one(tmp_path: Path) -> None:
    path = make_db(tmp_path / "c.db", [("j1", "crawl", 2), (None, "crawl", 1),
                                       ("j2", "crawl", 2), ("j2", "crawl", 3)])
    with CrawlDB.open(path) as db:
        assert db.job_crawls("j2") == [3, 4] and db.job_crawls("nope") == []
        latest = db.select()
        assert latest.crawl_ids == [4]
        assert latest.note == ("report of crawl 4 (latest of 4); it is run 2 of 2 of JOBDIR job "
                               "j2 (crawls 3, 4): --job j2 reports them as one")
        assert "run 1 of 2" in db.select(crawl_id=3).note
        whole = db.select(job=LATEST_JOB)
        assert (whole.crawl_ids, whole.job, whole.report_arg) == ([3, 4], "j2", [3, 4])
        assert whole.note == ("report of job j2 (the latest job): crawls 3, 4 as one; "
                              "--crawl ID for one run")
        assert whole.label == "job j2 (crawls 3, 4)"
        one = db.select(job="j1")
        assert one.crawl_ids == [1] and one.note.startswith("report of job j1: crawl 1 as one")
        with pytest.raises(ReviewError, match=r"unknown job 'j9' .*jobs, newest first: j2, j1"):
            db.select(job="j9")
        with pytest.raises(ReviewError, match=r"unknown crawl 9 .*crawls: 1, 2, 3, 4"):
            db.select(crawl_id=9)
        with pytest.raises(ReviewError, match="give one"):
            db.select(crawl_id=1, job="j1")


def test_an_empty_resumed_run_points_at_its_job(tmp_path: Path) -> None:
    # killed again before its first batch committed: the latest run stored nothing
    path = make_db(tmp_path / "c.db", [(None, "crawl", 1), ("j", "crawl", 2), ("j", "crawl", 0)])
    with CrawlDB.open(path) as db:
        with pytest.raises(ReviewError) as info:
            db.select()
        assert str(info.value) == ("crawl 3 has no pages (it stored and dropped nothing); other "
                                   "runs of its JOBDIR job j have pages (crawl 2); use --job j")
        assert db.select(job=LATEST_JOB).crawl_ids == [2, 3]
    path = make_db(tmp_path / "d.db", [("j", "crawl", 1), ("j", "crawl", 2), (None, "parse", 0)])
    with CrawlDB.open(path) as db, pytest.raises(ReviewError) as info:
        db.select()
    assert str(info.value) == ("crawl 3 has no pages (a scrapy parse run); crawls with pages: "
                               "1, 2; use --crawl 2, or --job j for all runs of its JOBDIR job")


def test_no_pages_and_no_jobs(tmp_path: Path) -> None:
    path = make_db(tmp_path / "c.db", [(None, "crawl", 0), ("j", "parse", 0)])
    with CrawlDB.open(path) as db:
        with pytest.raises(ReviewError, match=r"no crawl in this database has pages$"):
            db.select()
        with pytest.raises(ReviewError, match=r"^job j has no pages: its runs \(crawl 2\)"):
            db.select(job=LATEST_JOB)
    path = make_db(tmp_path / "d.db", [(None, "crawl", 1)])
    with CrawlDB.open(path) as db:
        with pytest.raises(ReviewError, match=r"ran with JOBDIR.*use --crawl ID \(latest: 1\)$"):
            db.select(job=LATEST_JOB)
        assert db.select().note == "report of crawl 1 (the only crawl)"
    path = make_db(tmp_path / "e.db", [(None, "crawl", 1), (None, "parse", 1)])
    with CrawlDB.open(path) as db:  # scrapy parse --pipelines stores the page it parsed
        assert db.select().note == ("report of crawl 2 (latest of 2, a scrapy parse run); "
                                    "--crawl ID for another")


def test_many_crawls_with_pages_are_listed_shortly(tmp_path: Path) -> None:
    path = make_db(tmp_path / "c.db", [(None, "crawl", 1)] * 12 + [(None, "parse", 0)])
    with CrawlDB.open(path) as db, pytest.raises(ReviewError) as info:
        db.select()
    assert "crawls with pages: … 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 (12 in all); use --crawl 12" \
        in str(info.value)


def test_dedupreport_flags(cli: Any, tmp_path: Path) -> None:
    path = make_db(tmp_path / "c.db", [(None, "crawl", 2), ("j", "crawl", 2), ("j", "crawl", 0)])
    code, _, err = cli("dedupreport", "--db", path, "--crawl", "1", "--job")
    assert code == 2 and "give one" in err
    code, out, err = cli("dedupreport", "--db", path, "--crawl", "1", "--format", "json")
    assert code == 0, err
    assert err.startswith("report of crawl 1 (as asked; the latest is 3)")
    assert json.loads(out)["totals"]["pages"] == 3
    code, _, err = cli("dedupreport", "--db", path)
    assert code == 1 and err.strip() == ("error: crawl 3 has no pages (it stored and dropped "
                                         "nothing); other runs of its JOBDIR job j have pages "
                                         "(crawl 2); use --job j")


# --- end to end: kill, resume, report ----------------------------------------------------------

CRAWL_SETTINGS: dict[str, Any] = {
    "DOWNLOAD_DELAY": 0, "AUTOTHROTTLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
    "CONCURRENT_REQUESTS": 4, "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "STORAGE_BATCH_SIZE": 5,
    "STORAGE_BATCH_SECONDS": 0.2, "DEDUP_PROGRESS_INTERVAL": 0, "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
}


def _crawl_args(server: Any, settings: dict[str, Any]) -> list[str]:
    args = ["crawl", "web", "-a", f"urls={server.url('/')}"]
    for key, value in {**CRAWL_SETTINGS, **settings}.items():
        args += ["-s", f"{key}={value}"]
    return args


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def _kill_after(args: list[str], ready: Any, log: Path, timeout: float = 60) -> int:
    with open(log, "w") as out:
        proc = subprocess.Popen(crawl_command(args), cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ})
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, "crawl ended before the kill\n" + log.read_text()[-3000:]
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        return proc.wait(30)


def _report(cli: Any, db: Path, *flags: str) -> tuple[dict[str, Any], str]:
    code, out, err = cli("dedupreport", "--db", str(db), "--format", "json", *flags)
    assert code == 0, err
    return json.loads(out), err


@pytest.mark.slow
def test_a_killed_and_resumed_job_is_two_runs_and_one_report(
        demo_server: Any, tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "job" / "crawl.db"
    settings = {"STORAGE_URL": f"sqlite:///{db}", "JOBDIR": tmp_path / "job" / "state",
                "DROPPED_LOG": tmp_path / "job" / "dropped.jsonl"}
    db.parent.mkdir()
    args = _crawl_args(demo_server, settings)
    code = _kill_after(args, lambda: _stored(db) >= 20, tmp_path / "run1.log")
    assert code == -signal.SIGKILL
    killed_with = _stored(db)
    resumed = subprocess.run(crawl_command(args), cwd=ROOT, capture_output=True, text=True,
                             timeout=180, env={**os.environ})
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT id, job, command, finished_at IS NULL FROM crawls "
                            "ORDER BY id").fetchall()
        rows = conn.execute("SELECT (SELECT count(*) FROM documents), "
                            "(SELECT count(*) FROM dropped)").fetchone()
        owners = dict(conn.execute("SELECT crawl_id, count(*) FROM documents GROUP BY 1"))
    job = read_job_id(settings["JOBDIR"])
    assert runs == [(1, job, "crawl", 1), (2, job, "crawl", 0)]  # the killed run never finished
    assert owners.get(1, 0) >= killed_with - 5 and owners.get(2, 0) > 0  # both runs stored pages
    assert f"job {job}" in resumed.stderr

    whole, note = _report(cli, db, "--job")
    assert note.startswith(f"report of job {job} (the latest job): crawls 1, 2 as one")
    latest, latest_note = _report(cli, db)
    assert latest["totals"]["pages"] < whole["totals"]["pages"]  # the last run alone: a part
    assert f"run 2 of 2 of JOBDIR job {job} (crawls 1, 2): --job {job}" in latest_note
    assert _report(cli, db, "--job", job)[0]["totals"] == whole["totals"]

    plain = run_crawl(tmp_path / "plain", urls=[demo_server.url("/")], settings=CRAWL_SETTINGS)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.rows("SELECT job, command FROM crawls") == [(None, "crawl")]
    uninterrupted, _ = _report(cli, plain.db_path)
    totals, expected = whole["totals"], uninterrupted["totals"]
    print(f"job report: {totals}; uninterrupted: {expected}; stored by the killed run: "
          f"{owners.get(1, 0)}, by the resumed run: {owners.get(2, 0)}")
    assert totals["pages"] == sum(rows) == expected["pages"]  # every page counted once
    assert (totals["kept"], totals["dropped"]) == (expected["kept"], expected["dropped"])


@pytest.mark.slow
def test_scrapy_parse_into_the_crawl_database_then_report(
        demo_crawl: Any, demo_server: Any, tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "crawl.db"
    with sqlite3.connect(demo_crawl.db_path) as src, sqlite3.connect(db) as dst:
        src.backup(dst)  # the session's crawl, copied (WAL included)
    proc = subprocess.run(
        crawl_command(["parse", "--spider", "web", demo_server.url("/"), "-s", f"STORAGE_URL=sqlite:///{db}",
                       "-s", "LOG_LEVEL=INFO", "-s", f"DROPPED_LOG={tmp_path / 'd.jsonl'}"]),
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, job, command FROM crawls ORDER BY id").fetchall() == [
            (1, None, "crawl"), (2, None, "parse")]
    code, _, err = cli("dedupreport", "--db", str(db), "-o", str(tmp_path / "r.html"))
    assert code == 1 and err.strip() == ("error: crawl 2 has no pages (a scrapy parse run); "
                                         "crawls with pages: 1; use --crawl 1")
    code, _, err = cli("dedupreport", "--db", str(db), "--crawl", "1", "-o",
                       str(tmp_path / "r.html"))
    assert code == 0, err
    assert err.splitlines()[0] == "report of crawl 1 (as asked; the latest is 2); " \
                                  "--crawl ID for another"
    assert err.splitlines()[1].startswith(f"wrote {tmp_path / 'r.html'}: crawl 1, ")

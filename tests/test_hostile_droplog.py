"""Issue 15 item 3: a drop log that cannot be written loses no drop and fails the crawl.

Each test runs a real ``scrapy crawl`` against a site of the scripted web on 127.0.0.1
(:mod:`crawler.sitegen.scripted`): pairs of pages 1..4 SimHash bits apart
(``tests.test_dedupreport.near_site``: at k=3 the pairs at 1, 2 and 3 bits give one drop each)
and a chain of slow pages that keeps the crawl running. The site can act on a request (remove
or restore the drop log's directory). The disk fails for
real: ``/dev/full`` answers every write with ENOSPC, a removed directory with ENOENT.

What must hold: the pre-flight check refuses a ``DROPPED_LOG`` that cannot be a log file
(exit 2, one line); a failing drop log is retried, then the crawl ends with ``droplog_error``
and exit 1, one ERROR line and no traceback; every drop is in the ``dropped`` table whatever
happened to its log line; ``dedup/summary/*`` equals ``dedup/*``. Also: a write cut short by
the file size limit leaves no partial line, and rows the database loses only while the crawl
closes fail the crawl too.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawler.sitegen.scripted import Answer, Request, ScriptedSite, ScriptedWeb
from tests.conftest import CrawlRun, run_crawl

#: SimHash distances of the page pairs, and k: the pairs at 1..K are near duplicates.
DISTANCES, K = (1, 2, 3, 4), 3
SLOW_PAGES = 8


def _words(rng: random.Random, n: int) -> str:
    from crawler.sitegen.text import load_words

    words = [w for values in load_words().sections.values() for w in values if w.isalpha()]
    return " ".join(rng.choice(words) for _ in range(n))


def _pages() -> dict[str, bytes]:
    """The near-duplicate pairs, an index linking them and the first slow page, and the slow
    chain (distinct pages, each linking the next)."""
    from tests.test_dedupreport import near_site

    rng = random.Random(15)
    pairs = {p: page.body for p, page in near_site(DISTANCES).pages.items() if p != "/"}
    links = "".join(f'<a href="{p}">{p}</a> ' for p in sorted(pairs))
    pages = {"/": _html("Index", f"{links}<a href=\"/slow/0\">more</a>", _words(rng, 200))}
    for i in range(SLOW_PAGES):
        pages[f"/slow/{i}"] = _html(f"Slow {i}", f'<a href="/slow/{i + 1}">next</a>',
                                    _words(rng, 200))
    return {**pairs, **pages}


def _html(title: str, nav: str, text: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{title}</title></head><body><nav>{nav}</nav>"
            f"<main><p>{text}</p></main></body></html>").encode()


@pytest.fixture(scope="module")
def pages() -> dict[str, bytes]:
    return _pages()


@pytest.fixture
def serve(pages: dict[str, bytes], scripted: ScriptedWeb) -> Callable[..., ScriptedSite]:
    """``serve(slow=0, on_get=...)``: the pages on a site of the web; ``on_get(path)`` runs
    before each answer (the hostile act); ``/slow/*`` answers after ``slow`` seconds."""

    def _serve(slow: float = 0.0,
               on_get: Callable[[str], None] = lambda path: None) -> ScriptedSite:  # fmt: skip
        def answer(request: Request) -> Answer:
            on_get(request.target)
            delay = slow if request.target.startswith("/slow/") else 0.0
            body = pages.get(request.target)
            return Answer(200 if body is not None else 404, body or b"", delay=delay)

        return scripted[0].script(answer)

    return _serve


def crawl(tmp_path: Path, site: ScriptedSite, log: str | Path, **settings: Any) -> CrawlRun:
    return run_crawl(tmp_path / "run", urls=[site.url + "/"], timeout=120, settings={
        "SIMHASH_MAX_DISTANCE": K, "ROBOTSTXT_OBEY": False, "DROPPED_LOG": str(log),
        "DROPPED_LOG_RETRY_TIMES": 2, "DROPPED_LOG_RETRY_BACKOFF": 0.1, **settings})


def assert_drops_agree(run: CrawlRun, with_table: bool = True) -> None:
    """Each pair within k gave one drop; the table (when stored), ``dedup/*`` and
    ``dedup/summary/*`` all say so."""
    stats = run.stats
    distances = sorted(v for k, n in stats.items() if k.startswith("dedup/distance/")
                       for v in [int(k.rsplit("/", 1)[1])] * n)
    assert distances == [d for d in DISTANCES if d <= K], "the fixture must drop 1..k bits"
    if with_table:
        assert sorted(d for (d,) in run.rows("SELECT distance FROM dropped")) == distances
    for reason in ("near_duplicate", "exact_duplicate"):
        assert stats[f"dedup/summary/{reason}"] == stats.get(f"dedup/{reason}", 0), reason
    assert stats["dedup/summary/dropped"] == len(distances)


def log_lines(run: CrawlRun, level: str) -> list[str]:
    return [line for line in run.stderr.splitlines() if f"] {level}: " in line]


def crawls_reason(run: CrawlRun) -> str:
    ((reason,),) = run.rows("SELECT finish_reason FROM crawls")
    return str(reason)


@pytest.mark.parametrize("kind", ["directory", "fifo", "missing directory"])
def test_a_log_path_that_cannot_be_a_log_is_refused_before_the_crawl(
        tmp_path: Path, kind: str) -> None:
    path = tmp_path / "dropped.jsonl"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it to append would wait for a reader forever
    else:
        path = tmp_path / "gone" / "dropped.jsonl"
    run = run_crawl(tmp_path / "run", urls=["http://127.0.0.1:9/"],
                    settings={"DROPPED_LOG": str(path)}, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"error: setting DROPPED_LOG={str(path)!r} is invalid: allowed a file path in an "
        "existing, writable directory (not a directory, FIFO or socket)"]
    assert not run.db_path.exists(), "refused before the crawl: no database created"


def test_a_full_disk_mid_crawl_is_retried_then_stops_the_crawl(
        tmp_path: Path, serve: Callable[..., ScriptedSite]) -> None:
    """Each drop committed at once (batches of 1): the first log line fails with ENOSPC while
    the slow chain is still being crawled; 2 retries, then ``droplog_error``."""
    site = serve(slow=0.4)
    run = crawl(tmp_path, site, "/dev/full", STORAGE_BATCH_SIZE=1)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "crawl stopped early: droplog_error" in run.stderr
    assert "Closing spider (droplog_error)" in run.stderr, "closed by the failure, mid-crawl"
    assert site.hits[f"/slow/{SLOW_PAGES - 1}"] == 0, "the crawl stopped before its end"
    assert run.stats["finish_reason"] == crawls_reason(run) == "droplog_error"
    stats, drops = run.stats, run.stats["dedup/near_duplicate"]
    assert stats["dedup/droplog/errors"] == 3  # the first line: 1 attempt + 2 retries
    assert stats["dedup/droplog/unwritten"] == drops and "dedup/droplog/written" not in stats
    retries = [line for line in log_lines(run, "WARNING") if "Drop log /dev/full: write" in line]
    assert len(retries) == 2 and "Traceback" not in run.stderr
    (error,) = log_lines(run, "ERROR")
    assert "Drop log /dev/full could not be written (3 attempts: [Errno 28]" in error
    assert re.search(r"each is in the dropped table \(scrapy dropped --crawl 1\)$", error)
    assert_drops_agree(run)


def test_a_full_disk_at_the_end_still_fails_the_crawl(
        tmp_path: Path, serve: Callable[..., ScriptedSite]) -> None:
    """The only batch commits while the crawl closes (``finished``): the failure found then
    becomes the finish reason of the stats file and the ``crawls`` row, and exit 1."""
    run = crawl(tmp_path, serve(), "/dev/full", STORAGE_BATCH_SECONDS=60)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Closing spider (finished)" in run.stderr
    assert run.stats["finish_reason"] == crawls_reason(run) == "droplog_error"
    assert len(log_lines(run, "ERROR")) == 1 and "Traceback" not in run.stderr
    assert run.stats["dedup/droplog/unwritten"] == run.stats["dedup/near_duplicate"]
    assert_drops_agree(run)


def test_a_log_directory_back_within_the_retries_loses_no_line(
        tmp_path: Path, serve: Callable[..., ScriptedSite]) -> None:
    """The server removes the log's directory when the crawl starts and restores it when
    the fifth slow page is asked for (>= 2 s later): the first line fails, a retry (0.2 s
    doubling, 5 times: 6.2 s) writes it, and the crawl ends as usual."""
    logs = tmp_path / "logs"
    logs.mkdir()

    def hostile(path: str) -> None:
        if path == "/":
            shutil.rmtree(logs)
        elif path == "/slow/4":
            logs.mkdir()

    site = serve(slow=0.5, on_get=hostile)
    run = crawl(tmp_path, site, logs / "dropped.jsonl", STORAGE_BATCH_SIZE=1,
                DROPPED_LOG_RETRY_TIMES=5, DROPPED_LOG_RETRY_BACKOFF=0.2)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == crawls_reason(run) == "finished"
    assert run.stats["dedup/droplog/errors"] >= 1 and log_lines(run, "WARNING")
    assert not log_lines(run, "ERROR") and "dedup/droplog/unwritten" not in run.stats
    lines = (logs / "dropped.jsonl").read_text().splitlines()
    rows = {url for (url,) in run.rows("SELECT url FROM dropped")}
    assert len(lines) == len(rows) == run.stats["dedup/droplog/written"]
    assert {line.split('"url": "', 1)[1].split('"', 1)[0] for line in lines} == rows
    assert_drops_agree(run)


def test_without_storage_the_summary_still_counts_the_drops(
        tmp_path: Path, serve: Callable[..., ScriptedSite]) -> None:
    """No storage pipeline: the log is the drops' only record, written at once. Before: each
    drop raised inside the pipeline (an ERROR traceback), the summary read 0 drops, exit 0."""
    run = crawl(tmp_path, serve(slow=0.4), "/dev/full",
                ITEM_PIPELINES='{"crawler.pipelines.neardup.NearDuplicatePipeline": 300}')
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "droplog_error"
    (error,) = log_lines(run, "ERROR")
    assert error.endswith("no storage pipeline records them") and "Traceback" not in run.stderr
    assert_drops_agree(run, with_table=False)


@pytest.mark.postgres
def test_rows_lost_only_while_closing_still_fail_the_crawl(pg_url: str) -> None:
    """The same rule for the table: the database goes away after the last page, so the only
    batch fails while the crawl closes as ``finished``; the crawl is marked ``storage_error``
    (``dedup/close_reason``, which the crawl command exits 1 on). Before: finished, exit 0."""
    from tests.conftest import fresh_pg_schema
    from tests.test_storage_pipeline import run_child

    with fresh_pg_schema(pg_url, "test_droplog") as url:
        result = run_child(url, [("page", 0), ("page", 1), ("down", 0)], {
            "STORAGE_BATCH_SIZE": 100, "STORAGE_BATCH_SECONDS": 60,
            "STORAGE_RETRY_TIMES": 1, "STORAGE_RETRY_BACKOFF": 0.05}, proxy=True)
    stats = result["stats"]
    assert stats["storage/unsaved"] == 2 and stats["dedup/close_reason"] == "storage_error"
    assert "Closing spider (finished)" in result["log"]


TORN_LINE_CHILD = """
import json, resource, signal, sys
from crawler.outputs.droplog import DropLog, read_drop_log
from crawler.vocab import Drop
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG instead of a kill
path, limit = sys.argv[1], int(sys.argv[2])
log = DropLog(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
written = 0
try:
    for i in range(100):
        log.write_drop(Drop(f"http://a.test/{i}", "exact_duplicate", "http://a.test/", 0))
        written += 1
except OSError as exc:
    print("failed after", written, type(exc).__name__)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
log.write_drop(Drop("http://a.test/retried", "exact_duplicate", "http://a.test/", 0))
log.close()
print(json.dumps([r["url"].rsplit("/", 1)[1] for r in read_drop_log(path)]))
"""


def test_a_write_cut_by_the_file_size_limit_leaves_no_torn_line(tmp_path: Path) -> None:
    """A real partial write (RLIMIT_FSIZE: the kernel writes up to the limit, then EFBIG): the
    file is cut back to the last whole line and the failed line leaves no buffered rest, so
    a retry writes it once, whole. Before: the buffered rest was flushed by the next write,
    so a line reported failed was in the log after all (twice once retried)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    path = tmp_path / "dropped.jsonl"
    proc = subprocess.run([sys.executable, "-c", TORN_LINE_CHILD, str(path), "700"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    failed, urls = proc.stdout.splitlines()
    written = int(failed.split()[2])
    assert 0 < written < 100 and failed.endswith("OSError")
    assert json.loads(urls) == [*map(str, range(written)), "retried"]
    assert path.stat().st_size > 700 and "torn" not in proc.stderr

"""Kill a real crawl and resume it with the same JOBDIR: every page stored once, none missing.

The crawl runs as a ``scrapy crawl web`` subprocess against a generated link-heavy site served
in this process (so the test sees every fetch). Kill points: SIGKILL early and then again in the
resumed crawl (resume of a resume), SIGKILL while the Bloom snapshot is being written, and a
clean stop (one SIGINT). After the last, uninterrupted run:

* every page of the site is in ``documents`` (or ``dropped``) exactly once — nothing missing;
* a page committed to storage before a kill is never fetched again; the pages fetched again are
  exactly those whose storage batch had not committed (or were in flight), and they are counted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawler.pipelines.storage import MAX_QUEUED_BATCHES

from .conftest import ROOT, crawl_command

pytestmark = pytest.mark.slow

PAGES = 120
LINKS = 8
SETTINGS: dict[str, Any] = {
    "DOWNLOAD_DELAY": 0,
    "AUTOTHROTTLE_ENABLED": False,
    "ROBOTSTXT_OBEY": False,
    "CONCURRENT_REQUESTS": 4,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    "STORAGE_BATCH_SIZE": 5,
    "STORAGE_BATCH_SECONDS": 0.2,
    "DEDUP_PROGRESS_INTERVAL": 0,
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
}

#: At most this many pages fetched by a killed run are not committed (see ``Crawl.check``).
UNCOMMITTED_BOUND = (SETTINGS["CONCURRENT_REQUESTS"]
                     + (MAX_QUEUED_BATCHES + 2) * SETTINGS["STORAGE_BATCH_SIZE"])


@pytest.fixture(scope="module")
def site_server():
    from crawler.sitegen import link_heavy_site
    from crawler.sitegen.server import SiteServer

    with SiteServer(link_heavy_site(pages=PAGES, links_per_page=LINKS, seed=3)) as server:
        yield server


class Crawl:
    """One JOBDIR and one database, crawled by successive subprocess runs."""

    def __init__(self, server: Any, workdir: Path, **settings: Any) -> None:
        self.server, self.workdir = server, workdir
        self.db = workdir / "crawl.db"
        self.jobdir = workdir / "job"
        self.settings = {**SETTINGS, "STORAGE_URL": f"sqlite:///{self.db}",
                         "DROPPED_LOG": workdir / "dropped.jsonl", "JOBDIR": self.jobdir,
                         **settings}
        self.runs: list[dict[str, Any]] = []
        workdir.mkdir(parents=True, exist_ok=True)

    def start(self, **overrides: Any) -> subprocess.Popen:
        self.server.reset_hits()
        self.runs.append({"committed_before": self.committed()})
        args = ["crawl", "web", "-a", f"urls={self.server.url('/')}"]
        for key, value in {**self.settings, **overrides}.items():
            args += ["-s", f"{key}={value}"]
        log = open(self.workdir / f"run{len(self.runs)}.log", "w")  # noqa: SIM115
        self.runs[-1]["log"] = log.name
        return subprocess.Popen(crawl_command(args), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ})

    def finish(self, proc: subprocess.Popen, timeout: float = 90) -> int:
        code = proc.wait(timeout)
        self.runs[-1]["fetched"] = self.server.canonical_hits()
        self.runs[-1]["code"] = code
        return code

    def run_to_end(self, **overrides: Any) -> None:
        code = self.finish(self.start(**overrides))
        assert code == 0, self.log_tail()

    def kill_when(self, ready, sig: int = signal.SIGKILL, timeout: float = 60) -> None:
        proc = self.start()
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, "crawl ended before the kill point\n" + self.log_tail()
            assert time.monotonic() < deadline, "kill point never reached\n" + self.log_tail()
            time.sleep(0.002)
        proc.send_signal(sig)
        self.finish(proc)

    def hits(self) -> int:
        return sum(self.server.canonical_hits().values())

    def committed(self) -> Counter[str]:
        """Site path → rows in documents + dropped."""
        if not self.db.exists():
            return Counter()
        with sqlite3.connect(self.db) as conn:
            try:
                rows = conn.execute("SELECT canonical_url FROM documents").fetchall()
                rows += conn.execute("SELECT url FROM dropped").fetchall()
            except sqlite3.OperationalError:  # killed before the schema was created
                return Counter()
        return Counter(urlsplit(url).path or "/" for (url,) in rows)

    def log_tail(self) -> str:
        return Path(self.runs[-1]["log"]).read_text()[-3000:]

    def check(self) -> int:
        """The assertions of the module docstring; returns how many pages were fetched again."""
        final = self.committed()
        site = self.server.site.canonical_pages
        assert set(final) == site, f"missing: {sorted(site - set(final))[:10]}"
        assert max(final.values()) == 1, [p for p, n in final.items() if n > 1]
        refetched = 0
        for i, run in enumerate(self.runs):
            assert max(run["fetched"].values(), default=1) == 1  # no page twice in one run
            if i:
                again = set(run["fetched"]) & set(run["committed_before"])
                assert not again, f"run {i + 1} fetched committed pages again: {sorted(again)}"
                previous = self.runs[i - 1]
                # What a kill can lose: the pages fetched but not yet committed, which the
                # pipeline's backpressure bounds (queued batches plus the one pending and the one
                # being written, plus the downloads in flight). How many it does lose depends on
                # the machine's commit latency, so the bound is the code's, not a timing guess.
                uncommitted = set(previous["fetched"]) - set(run["committed_before"])
                assert len(uncommitted) <= UNCOMMITTED_BOUND, (i, sorted(uncommitted))
                refetched += len(set(run["fetched"]) & set(previous["fetched"]))
        return refetched


def test_sigkill_early_then_again_then_resume(site_server, tmp_path) -> None:
    crawl = Crawl(site_server, tmp_path)
    crawl.kill_when(lambda: crawl.hits() >= 15)
    assert crawl.runs[0]["code"] == -signal.SIGKILL
    crawl.kill_when(lambda: crawl.hits() >= 30)  # kill the resumed crawl too
    assert crawl.runs[1]["code"] == -signal.SIGKILL
    crawl.run_to_end()
    refetched = crawl.check()
    print(f"two kills: {refetched} pages fetched again (uncommitted or in flight at a kill)")
    assert 0 < refetched <= 2 * UNCOMMITTED_BOUND


def test_sigkill_while_the_snapshot_is_written(site_server, tmp_path) -> None:
    # A large filter (51 MiB of bits) snapshotted every 10 records: writing takes long enough to
    # be caught with the temp file on disk.
    crawl = Crawl(site_server, tmp_path, BLOOM_CAPACITY=30_000_000, JOBDIR_SNAPSHOT_RECORDS=10)
    tmp = crawl.jobdir / "dedup" / "bloom.snapshot.tmp"
    crawl.kill_when(lambda: crawl.hits() >= 10 and tmp.exists())
    assert tmp.exists()  # the kill landed mid-snapshot
    crawl.run_to_end(JOBDIR_SNAPSHOT_RECORDS=10_000)
    assert not tmp.exists()
    refetched = crawl.check()
    print(f"kill mid-snapshot: {refetched} pages fetched again")


def test_clean_stop_then_resume_fetches_nothing_twice(site_server, tmp_path) -> None:
    crawl = Crawl(site_server, tmp_path)
    crawl.kill_when(lambda: crawl.hits() >= 40, sig=signal.SIGINT)
    assert crawl.runs[0]["code"] == 0, crawl.log_tail()
    assert len(crawl.committed()) < PAGES  # it did stop early
    crawl.run_to_end()
    assert crawl.check() == 0  # a clean stop commits everything it fetched


def test_bloom_full_stops_the_crawl_with_a_failing_exit(site_server, tmp_path) -> None:
    crawl = Crawl(site_server, tmp_path, BLOOM_CAPACITY=20, BLOOM_ON_FULL="stop")
    code = crawl.finish(crawl.start())
    log = Path(crawl.runs[0]["log"]).read_text()
    assert code == 1, log[-3000:]
    assert "Closing spider (bloom_full)" in log and "'dedup/bloom/full': 1" in log
    assert "crawl stopped early: bloom_full" in log
    assert sum(crawl.runs[0]["fetched"].values()) < PAGES


def _middle_record(data: bytes) -> int:
    """The offset of the middle record of a journal (``crawler.state.journal`` format)."""
    from crawler.state.journal import HEADER_SIZE

    starts, pos = [], HEADER_SIZE
    while pos < len(data):
        starts.append(pos)
        pos += 9 + int.from_bytes(data[pos + 1:pos + 5], "little") + 4
    assert pos == len(data) and len(starts) > 10, (pos, len(data), len(starts))
    return starts[len(starts) // 2]


def _corrupt_length(journal: Path) -> str:
    data = bytearray(journal.read_bytes())
    at = _middle_record(bytes(data))
    data[at + 1:at + 5] = (10_000_000).to_bytes(4, "little")  # runs past the end of the file
    journal.write_bytes(bytes(data))
    return f"damaged journal record at byte {at} (record header checksum) inside the"


def _cut_to_half(journal: Path) -> str:
    data = journal.read_bytes()
    journal.write_bytes(data[:len(data) // 2])
    return f"{len(data) // 2} bytes, shorter than the {len(data)} bytes made durable"


def _delete(journal: Path) -> str:
    journal.unlink()
    return "missing, but bloom.snapshot exists"


def test_a_damaged_short_or_missing_journal_stops_the_resume_in_one_line(site_server,
                                                                         tmp_path) -> None:
    """The three losses users met (a corrupt length read as a torn tail, a journal cut to half,
    a deleted journal: 56-119 pages never fetched, exit 0) each stop the resume at start: exit 2,
    one line naming the file, nothing fetched, the job directory left for a backup to restore."""
    crawl = Crawl(site_server, tmp_path)
    crawl.kill_when(lambda: crawl.hits() >= 40, sig=signal.SIGINT)
    assert crawl.runs[0]["code"] == 0, crawl.log_tail()
    committed = crawl.committed()
    for damage in (_corrupt_length, _cut_to_half, _delete):
        jobdir = tmp_path / f"job-{damage.__name__.strip('_')}"
        shutil.copytree(crawl.jobdir, jobdir)
        journal = jobdir / "dedup" / "journal.bin"
        problem = damage(journal)
        code = crawl.finish(crawl.start(JOBDIR=jobdir))
        log = Path(crawl.runs[-1]["log"]).read_text()
        assert code == 2, log[-3000:]
        lines = log.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {journal}: {problem}"), log[-3000:]
        assert "delete the job directory" in log and "Traceback" not in log
        assert crawl.hits() == 0 and crawl.committed() == committed


def test_a_power_cut_loses_no_page(tmp_path) -> None:
    """What a power cut leaves, made by hand: a SIGKILLed crawl's journal cut back to its
    durable length (what the OS had not written is gone) and ``journal.sync`` naming another
    boot. Pages stored after the last fsync lost their *finished* records, and the links they
    led to their *scheduled* ones; they are fetched again rather than trusted to storage, so on
    a chain of pages (each links only the next) every page still ends stored exactly once."""
    from crawler.sitegen import link_heavy_site
    from crawler.sitegen.server import SiteServer

    with SiteServer(link_heavy_site(pages=80, links_per_page=1, seed=5)) as server:
        crawl = Crawl(server, tmp_path, STORAGE_BATCH_SIZE=1, STORAGE_BATCH_SECONDS=0.05)
        crawl.kill_when(lambda: crawl.hits() >= 40)
        state = crawl.jobdir / "dedup"
        sync = json.loads((state / "journal.sync").read_text())
        journal = state / "journal.bin"
        lost = journal.stat().st_size - sync["length"]
        journal.write_bytes(journal.read_bytes()[:sync["length"]])
        (state / "journal.sync").write_text(json.dumps({**sync, "boot": "before-the-cut"}))
        crawl.run_to_end()
    log = Path(crawl.runs[-1]["log"]).read_text()
    assert "the machine restarted while the crawl writing it ran" in log
    final = crawl.committed()
    missing = sorted(server.site.canonical_pages - set(final), key=len)
    assert not missing, f"{len(missing)} never stored ({lost} bytes cut): {missing[:5]}"
    assert max(final.values()) == 1

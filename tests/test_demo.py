"""``scrapy demo`` end to end: a real crawl of the demo site in a subprocess, then its outputs."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.sitegen import demo_site

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_demo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "demo", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


#: The files each demo run left in its --out directory, listed before any test reads them.
LEFT_BEHIND: dict[Path, list[str]] = {}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = run_demo("--out", str(out))
    LEFT_BEHIND[out] = sorted(p.name for p in out.iterdir())
    return proc, out


SITE = demo_site()


def site_key(url: str) -> str | None:
    parts = urlsplit(url)
    return SITE.canonical_of(parts.path + ("?" + parts.query if parts.query else ""))


def rows(db: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(db)) as conn:  # closed: SQLite then removes -wal and -shm
        return conn.execute(sql).fetchall()


def summary_value(stdout: str, label: str) -> int:
    match = re.search(rf"^\s+{re.escape(label)}\s+(\d+)", stdout, re.MULTILINE)
    assert match, f"{label!r} missing from the summary:\n{stdout}"
    return int(match.group(1))


def test_demo_exits_zero_and_prints_summary(demo_run):
    proc, out = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db, report = out / "crawl.db", out / "report.html"
    expected = [
        "pages fetched", "pages stored", "duplicate URLs filtered", "dropped as exact_duplicate",
        "dropped as near_duplicate", f"scrapy dropped --db {db}",
        f"scrapy dedupreport --db {db} -o {report}",
    ]  # fmt: skip
    for text in expected:
        assert text in proc.stdout
    for name in ("crawl.db", "dropped.jsonl", "crawl.log"):
        assert (out / name).exists(), name


def test_a_finished_demo_leaves_only_crawl_db(demo_run):
    # WAL mode: crawl.db-wal / crawl.db-shm stay when the last connection is read-only or open.
    proc, out = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert LEFT_BEHIND[out] == ["crawl.db", "crawl.log", "dropped.jsonl", "site.json",
                                "stats.json"]


def test_stored_pages_are_the_distinct_pages(demo_run):
    proc, out = demo_run
    site = demo_site()
    found = rows(out / "crawl.db", "SELECT canonical_url, text FROM documents")
    # The spider records a binary body sent as text/html with no text (flagged, never
    # fingerprinted); it is not content, so it is left out of the comparison below.
    binary = {site_key(u) for u, text in found if site_key(u) in site.mislabelled}
    assert all(not text for u, text in found if site_key(u) in binary)
    stored = [site_key(u) for u, _ in found if site_key(u) not in binary]
    assert None not in stored
    assert len(stored) == len(set(stored))  # no page stored twice under two spellings
    assert set(stored) <= site.canonical_pages
    assert summary_value(proc.stdout, "pages stored") == len(stored) + len(binary)
    assert len(binary) == 1  # the summary says what the one row more is
    assert (f"the site has {len(site.distinct_pages)} distinct pages, plus 1 binary body served "
            "as text/html, stored without text") in proc.stdout
    # Every distinct page is kept; of each original + mirrors + copies group exactly one.
    groups = site.duplicate_groups()
    grouped = set().union(*groups.values())
    assert site.distinct_pages - set(groups) <= set(stored)
    for original, members in groups.items():
        assert len(members & set(stored)) == 1, (original, members & set(stored))
    assert len(stored) == len(site.distinct_pages)
    assert not set(stored) & (site.non_html | site.broken | site.disallowed | site.offsite)
    assert grouped <= site.canonical_pages


def test_dropped_pages_logged_and_counted(demo_run):
    proc, out = demo_run
    site = demo_site()
    records = [json.loads(line) for line in (out / "dropped.jsonl").read_text().splitlines()]
    dropped = {site_key(r["url"]) for r in records}
    duplicates = set(site.near_duplicates) | set(site.exact_duplicates)
    originals = set(site.duplicate_groups())
    assert dropped <= duplicates | originals
    assert len(records) == len(duplicates)
    by_reason = {r: sum(1 for x in records if x["reason"] == r)
                 for r in ("exact_duplicate", "near_duplicate")}  # fmt: skip
    assert summary_value(proc.stdout, "dropped as exact_duplicate") == by_reason["exact_duplicate"]
    assert summary_value(proc.stdout, "dropped as near_duplicate") == by_reason["near_duplicate"]
    assert summary_value(proc.stdout, "duplicate URLs filtered") >= len(site.aliases)


def test_keep_adds_a_crawl_without_duplicating_documents(demo_run, tmp_path):
    _, out = demo_run
    before = rows(out / "crawl.db", "SELECT COUNT(*) FROM documents")[0][0]
    again = run_demo("--out", str(out), "--keep")
    assert again.returncode == 0, again.stdout + again.stderr
    assert not {p.name for p in out.iterdir()} & {"crawl.db-wal", "crawl.db-shm"}
    assert rows(out / "crawl.db", "SELECT COUNT(*) FROM crawls")[0][0] == 2
    assert rows(out / "crawl.db", "SELECT COUNT(*) FROM documents")[0][0] == before


def test_bad_usage_exits_non_zero_without_crawling(tmp_path):
    proc = run_demo("surplus-argument", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert "takes no arguments" in proc.stderr + proc.stdout
    assert not (tmp_path / "x" / "crawl.db").exists()


def test_summary_reads_database_drop_log_and_stats(tmp_path):
    from crawler.commands.demo import summary

    site = demo_site()
    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        conn.execute("CREATE TABLE documents (url TEXT)")
        conn.executemany("INSERT INTO documents VALUES (?)", [(f"u{i}",) for i in range(7)])
    drops = [{"url": f"u/n{i}", "reason": "near_duplicate"} for i in range(3)] + [
        {"url": "u/e", "reason": "exact_duplicate"},
        {"url": "u/n1", "reason": "near_duplicate", "rule": "repointed"},  # the same page again
        {"url": "u/s", "reason": "near_duplicate"},
        {"url": "u/s", "reason": "kept", "rule": "settled"}]  # stored again by the settle step
    lines = [json.dumps(d) for d in drops] + ['{"reason": "near_dup']  # torn last line
    (tmp_path / "dropped.jsonl").write_text("\n".join(lines))
    stats = {
        "downloader/response_count": 12, "dupefilter/filtered": 5,
        "dedup/links_skipped_seen": 40, "offsite/filtered": 2, "finish_reason": "finished",
    }  # fmt: skip
    text = summary(site, stats, tmp_path, requests=99)
    assert summary_value(text, "pages fetched") == 12
    assert summary_value(text, "pages stored") == 7
    assert summary_value(text, "duplicate URLs filtered") == 45
    assert summary_value(text, "dropped as near_duplicate") == 3
    assert summary_value(text, "dropped as exact_duplicate") == 1
    assert f"the site has {len(site.distinct_pages)} distinct pages)" in text
    assert "off-site links 2" in text and "(finished)" in text and ", 404s" not in text
    stats.update({"dedup/binary": 2, "storage/documents": 7})
    text = summary(site, stats, tmp_path, requests=99)
    assert re.search(r"pages stored\s+7\s+\(the site has \d+ distinct pages, plus 2 binary "
                     r"bodies served as text/html, stored without text\)$", text, re.MULTILINE)
    assert "binary" not in text.split("also skipped")[1]  # stored, not skipped


def test_summary_without_outputs_falls_back_to_stats(tmp_path):
    from crawler.commands.demo import summary

    stats = {"dedup/near_duplicate": 4, "dedup/exact_duplicate": 2}
    text = summary(demo_site(), stats, tmp_path, requests=30)
    assert summary_value(text, "pages fetched") == 30
    assert re.search(r"pages stored\s+\?", text)
    assert summary_value(text, "dropped as near_duplicate") == 4

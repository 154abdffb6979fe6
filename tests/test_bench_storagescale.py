"""``bench.storagescale``: its windows, its pages, and a small run end to end (real SQLite files
written by child processes through the crawl's ``Store.write_batch``)."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from bench.storagescale import MILESTONES, Pages, windows

ROOT = Path(__file__).resolve().parent.parent


def test_windows_cover_every_row_once_and_end_at_each_milestone_reached() -> None:
    spans = windows(320_000, 50_000)
    assert spans[0][0] == 0 and spans[-1][1] == 320_000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    ends = {stop for _, stop in spans}
    assert {10_000, 100_000, 300_000} <= ends and 1_000_000 not in ends
    assert set(MILESTONES) <= {stop for _, stop in windows(1_000_000, 50_000)}


def test_pages_are_the_same_in_every_child_and_each_url_is_written_once() -> None:
    one, two = Pages(5_000), Pages(5_000)
    now = object()
    assert [one.item(r, now)["url"] for r in range(50)] == \
        [two.item(r, now)["url"] for r in range(50)]
    urls = {one.item(r, now)["url"] for r in range(5_000)}
    assert len(urls) == 5_000
    assert all(u.startswith("http://127.0.0.") and "/p/" in u for u in list(urls)[:10])


def test_a_small_run_writes_every_row_for_each_variant(tmp_path: Path) -> None:
    keep = tmp_path / "dbs"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.storagescale", "--rows", "3000", "--window", "1000",
         "--variants", "before,now", "--results", str(tmp_path), "--keep", str(keep)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "storagescale.json").read_text())
    for variant in ("before", "now"):
        spans = report["windows"][variant]
        assert [w["rows"] for w in spans] == [1000, 2000, 3000]
        assert all(w["wall_us"] > 0 and w["cpu_us"] > 0 and w["rss_mib"] > 0 for w in spans)
        with sqlite3.connect(keep / variant / "crawl.db") as conn:
            assert conn.execute("SELECT count(*) FROM documents").fetchone() == (3000,)
            assert conn.execute("SELECT count(*) FROM crawl_documents").fetchone() == (3000,)
    assert "before" in proc.stdout and "now" in proc.stdout

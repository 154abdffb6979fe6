"""crawler.state.atomicfile: atomic writes that leave the mode a plain ``open(path, "w")`` would.

The umask is process-wide, so each case runs in a fresh interpreter that sets it first; the
end-to-end checks run a real crawl and a real report under a chosen umask.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crawler.state.atomicfile import write_atomic
from tests.conftest import ROOT, CrawlRun, run_crawl

# Writes FILE atomically under UMASK, and beside it a file made by open(path, "w"), and prints
# both modes: write_atomic must match what any other program writing the file would get.
PROBE = """
import os, stat, sys
from pathlib import Path
from crawler.state.atomicfile import write_atomic
umask, target = int(sys.argv[1], 8), Path(sys.argv[2])
os.umask(umask)
write_atomic(target, sys.argv[3])
plain = target.with_name(target.name + ".plain")
with open(plain, "w") as handle:
    handle.write(sys.argv[3])
modes = [stat.S_IMODE(os.stat(p).st_mode) for p in (target, plain)]
print(" ".join(f"{m:o}" for m in modes))
"""


def write_under_umask(umask: int, target: Path, text: str = "data") -> tuple[int, int]:
    """(mode of the atomic write, mode of a plain open) of ``target`` under ``umask``."""
    proc = subprocess.run([sys.executable, "-c", PROBE, f"{umask:o}", str(target), text],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    atomic, plain = (int(m, 8) for m in proc.stdout.split())
    return atomic, plain


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("umask", "expected"), [
    (0o022, 0o644), (0o077, 0o600), (0o027, 0o640), (0o002, 0o664), (0o000, 0o666),
    (0o277, 0o400),
], ids=lambda value: f"{value:03o}")
def test_new_file_gets_the_mode_of_a_plain_open(tmp_path: Path, umask: int,
                                                expected: int) -> None:
    target = tmp_path / "out" / "report.html"
    atomic, plain = write_under_umask(umask, target, "<p>hi</p>")
    assert (atomic, plain) == (expected, expected)
    assert target.read_text() == "<p>hi</p>"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html", "report.html.plain"]


@pytest.mark.parametrize("existing", [0o640, 0o600, 0o664, 0o444], ids=lambda v: f"{v:03o}")
def test_replacing_a_file_keeps_its_mode_whatever_the_umask(tmp_path: Path,
                                                             existing: int) -> None:
    target = tmp_path / "stats.json"
    target.write_text("old")
    target.chmod(existing)
    for umask in (0o022, 0o077, 0o000):
        atomic, _ = write_under_umask(umask, target, f"new {umask:o}")
        assert atomic == existing, f"umask {umask:o}"
        assert target.read_text() == f"new {umask:o}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json", "stats.json.plain"]


def test_replacing_a_file_is_a_new_inode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "stats.json"
    target.write_text("old")
    before = target.stat().st_ino
    write_atomic(target, b"\x00binary")
    assert target.read_bytes() == b"\x00binary" and target.stat().st_ino != before
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old report")
    target.chmod(0o640)
    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type]  # not str or bytes
    assert target.read_text() == "old report" and mode(target) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_a_symlink_target_takes_the_linked_files_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o604)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert not link.is_symlink() and mode(link) == 0o604 and link.read_text() == "new"


# --- end to end: files the crawler and the report write ---------------------------------------


@pytest.fixture
def umask_022():
    """Run the block under umask 022 (the usual default), whatever the test runner's is."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_crawl_stats_file_is_0644_under_umask_022(umask_022: None, demo_server: Any,
                                                  tmp_path: Path) -> None:
    run: CrawlRun = run_crawl(tmp_path / "run", urls=[demo_server.base_url + "/"],
                              settings={"CLOSESPIDER_PAGECOUNT": 20})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stats_path.read_text())["finish_reason"]
    assert mode(run.stats_path) == 0o644


def test_report_html_is_readable_by_others_and_keeps_a_chosen_mode(
        cli: Any, demo_crawl: CrawlRun, tmp_path: Path) -> None:
    report = tmp_path / "site" / "report.html"
    old = os.umask(0o022)
    try:
        code, _, err = cli("dedupreport", "--db", str(demo_crawl.db_path), "-o", str(report))
        assert code == 0, err
        assert mode(report) == 0o644
        report.chmod(0o640)  # the admin narrowed it: a new report keeps that
        code, _, err = cli("dedupreport", "--db", str(demo_crawl.db_path), "-o", str(report))
        assert code == 0, err
        assert mode(report) == 0o640
    finally:
        os.umask(old)
    assert report.read_text().lstrip().lower().startswith("<!doctype html")

"""The JSON Lines drop log: fields, flush per record, a real SIGKILL, torn last lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.outputs.droplog import (
    FIELDS,
    DropLog,
    DropLogError,
    drop_record,
    read_drop_log,
    replay_drop_log,
)
from crawler.vocab import NEAR_DUPLICATE, Drop

ROOT = Path(__file__).resolve().parent.parent


def _drop(i: int = 0) -> Drop:
    return Drop(f"http://a/{i}", NEAR_DUPLICATE, "http://a/kept", 3, 2**64 - 1, 5)


def test_record_fields_and_formats() -> None:
    moment = datetime(2026, 12, 2, 13, 0, 0, tzinfo=UTC)
    record = drop_record(_drop(), crawl_id=7, time=moment)
    assert tuple(record) == FIELDS
    assert record["simhash"] == "ffffffffffffffff"
    assert record["duplicate_simhash"] == "0000000000000005"
    assert record["time"] == "2026-12-02T13:00:00Z"
    assert record["crawl_id"] == 7 and record["distance"] == 3
    none = drop_record(Drop("u", "exact_duplicate", "v", 0))
    assert none["simhash"] is None and none["duplicate_simhash"] is None


def test_each_record_is_flushed_before_close(tmp_path: Path) -> None:
    log = DropLog(tmp_path / "d.jsonl")
    for i in range(3):
        log.write_drop(_drop(i), crawl_id=1)
        lines = (tmp_path / "d.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == i + 1 and json.loads(lines[-1])["url"] == f"http://a/{i}"
    log.close()
    assert [r["url"] for r in read_drop_log(tmp_path / "d.jsonl")] == [
        "http://a/0", "http://a/1", "http://a/2",
    ]  # fmt: skip


def test_appends_across_crawls_and_keeps_unicode(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    for crawl in (1, 2):
        log = DropLog(path)
        log.write_drop(Drop("http://a/é", "exact_duplicate", "http://a/ü", 0), crawl)
        log.close()
    records = list(read_drop_log(path))
    assert [r["crawl_id"] for r in records] == [1, 2]
    assert "é" in path.read_text(encoding="utf-8")


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    log = DropLog(tmp_path / "nope" / "d.jsonl")
    with pytest.raises(OSError, match="DROPPED_LOG"):
        log.write_drop(_drop())


def test_torn_last_line_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "d.jsonl"
    log = DropLog(path)
    log.write_drop(_drop(1))
    log.close()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"url": "http://a/2", "rea')
    assert [r["url"] for r in read_drop_log(path)] == ["http://a/1"]
    assert "torn last line 2" in caplog.text


def test_complete_last_record_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(drop_record(_drop(1))), encoding="utf-8")
    assert len(list(read_drop_log(path))) == 1


def test_damage_before_the_last_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    good = json.dumps(drop_record(_drop()))
    path.write_text(f"{good}\nnot json\n{good}\n", encoding="utf-8")
    with pytest.raises(DropLogError, match=r"d\.jsonl line 2"):
        list(read_drop_log(path))
    path.write_text(f"{good}\n[1, 2]\n{good}\n", encoding="utf-8")
    with pytest.raises(DropLogError, match="not a drop record"):
        list(read_drop_log(path))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2000))
def test_any_truncation_reads_a_prefix(cut: int) -> None:
    records = [drop_record(_drop(i), crawl_id=i) for i in range(8)]
    text = "".join(json.dumps(r) + "\n" for r in records)[:cut]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.jsonl"
        path.write_text(text, encoding="utf-8")
        got = list(read_drop_log(path))
    assert got == records[: len(got)]
    assert len(got) >= text.count("\n")


def test_sigkill_loses_nothing_already_written(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    script = (
        "import sys, time\n"
        "from crawler.outputs.droplog import DropLog\n"
        "from crawler.vocab import Drop\n"
        "log = DropLog(sys.argv[1])\n"
        "for i in range(5):\n"
        "    log.write_drop(Drop(f'http://a/{i}', 'exact_duplicate', 'http://k', 0), 9)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.05)
    assert [r["url"] for r in read_drop_log(path)] == [f"http://a/{i}" for i in range(5)]


def test_the_log_replays_to_the_final_state_per_crawl_and_url() -> None:
    """A drop, its repointing, a second crawl's drop of the same URL, and a page stored again
    by the settle step (gone from every crawl, as its rows are)."""
    lines: list[dict[str, Any]] = [
        {"url": "u/a", "reason": "near_duplicate", "duplicate_of": "u/x", "crawl_id": 1},
        {"url": "u/b", "reason": "exact_duplicate", "duplicate_of": "u/x", "crawl_id": 1},
        {"url": "u/a", "reason": "near_duplicate", "duplicate_of": "u/y", "crawl_id": 1,
         "rule": "repointed"},
        {"url": "u/a", "reason": "near_duplicate", "duplicate_of": "u/z", "crawl_id": 2},
        {"url": "u/b", "reason": "exact_duplicate", "duplicate_of": "u/x", "crawl_id": 2},
        {"url": "u/b", "reason": "kept", "duplicate_of": None, "crawl_id": 2, "rule": "settled"},
    ]
    final = replay_drop_log(lines)
    assert {key: r["duplicate_of"] for key, r in final.items()} == {
        (1, "u/a"): "u/y", (2, "u/a"): "u/z"}
    assert replay_drop_log([]) == {}

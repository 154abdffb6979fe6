"""crawler.jobstate: snapshot + journal, replay, torn records, damaged files, a real SIGKILL."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import pytest

from crawler.bloom import LocalSeenSet
from crawler.config import SettingError
from crawler.jobstate import JOURNAL, SNAPSHOT, JobState, JobStateError, read_journal, state_dir
from crawler.preflight import check_settings as validate_settings

from .conftest import ROOT


def fp(i: int) -> bytes:
    return hashlib.blake2b(str(i).encode(), digest_size=16).digest()


def new_state(jobdir, **kwargs) -> tuple[LocalSeenSet, JobState, list]:
    seen = LocalSeenSet(10_000, 0.001)
    state = JobState(jobdir, seen, **kwargs)
    return seen, state, state.open()


def schedule(seen: LocalSeenSet, state: JobState, ids) -> None:
    for i in ids:
        assert not seen.add(fp(i))
        state.scheduled(fp(i), f"http://h/{i}?x", i % 7, f"http://h/{i}")


def test_fresh_jobdir_starts_empty(tmp_path) -> None:
    _, _, pending = new_state(tmp_path)
    assert pending == []
    assert (state_dir(tmp_path) / JOURNAL).exists()
    assert read_journal(state_dir(tmp_path) / JOURNAL) == (0, [])


def test_clean_close_resumes_what_was_not_finished(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(100))
    assert state.finished([fp(i) for i in range(0, 100, 2)] + [fp(999)]) == 50
    state.close()
    seen2, _, pending = new_state(tmp_path)
    assert sorted(rec.url for rec in pending) == sorted(f"http://h/{i}?x" for i in range(1, 100, 2))
    rec = next(r for r in pending if r.fp == fp(3))
    assert (rec.depth, rec.canonical_url) == (3, "http://h/3")
    assert all(fp(i) in seen2 for i in range(100))  # finished ones stay seen
    assert len(seen2) == 100


def test_snapshots_follow_the_record_count_and_compact_the_journal(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path, snapshot_records=20)
    schedule(seen, state, range(50))
    state.finished(fp(i) for i in range(45))
    assert state.snapshots == 3  # at 20 and 40 scheduled, then after the finished batch
    _, records = read_journal(state.journal_path)
    assert len(records) < 25  # compacted: pending re-written, finished forgotten
    state._file.flush()
    _, _, pending = new_state(tmp_path)
    assert {r.fp for r in pending} == {fp(i) for i in range(45, 50)}


def test_newer_snapshot_with_older_journal_replays_to_the_same_state(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(30))
    state.finished(fp(i) for i in range(10))
    seen.save(state.snapshot_path)  # a kill between the snapshot rename and the compaction
    (state.directory / (SNAPSHOT + ".tmp")).write_bytes(b"half a snapshot")
    seen2, _, pending = new_state(tmp_path)
    assert {r.fp for r in pending} == {fp(i) for i in range(10, 30)}
    assert len(seen2) == 30
    assert not list(state.directory.glob("*.tmp"))


def test_torn_last_record_is_ignored(tmp_path, caplog) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state._file.flush()
    data = state.journal_path.read_bytes()
    state.journal_path.write_bytes(data[:-3])
    _, _, pending = new_state(tmp_path)
    assert {r.fp for r in pending} == {fp(i) for i in range(4)}
    assert "torn last record" in caplog.text


@pytest.mark.parametrize("damage, problem", [
    (lambda d: b"GARBAGE!" + d[8:], "bad magic"),
    (lambda d: d[:5], "truncated journal header"),
    (lambda d: d[:40] + bytes([d[40] ^ 0xFF]) + d[41:], "corrupt journal record"),
])
def test_damaged_journal_stops_with_the_file_name(tmp_path, damage, problem) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state._file.flush()
    state.journal_path.write_bytes(damage(state.journal_path.read_bytes()))
    with pytest.raises(JobStateError) as err:
        new_state(tmp_path)
    assert str(state.journal_path) in str(err.value) and problem in str(err.value)
    with pytest.raises(SettingError, match=problem):
        validate_settings({"JOBDIR": str(tmp_path)})


def test_damaged_snapshot_is_refused_before_the_crawl(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state.close()
    state.snapshot_path.write_bytes(state.snapshot_path.read_bytes()[:-100])
    with pytest.raises(SettingError) as err:
        validate_settings({"JOBDIR": str(tmp_path)})
    assert str(state.snapshot_path) in str(err.value) and "truncated" in str(err.value)
    state.snapshot_path.unlink()
    with pytest.raises(JobStateError, match="missing"):
        new_state(tmp_path)


KILLER = """
import hashlib, os, signal, sys, time
from crawler.bloom import LocalSeenSet
from crawler.jobstate import JobState
fp = lambda i: hashlib.blake2b(str(i).encode(), digest_size=16).digest()
seen = LocalSeenSet(10_000, 0.001)
state = JobState(sys.argv[1], seen, snapshot_records=35)
state.open()
for i in range(100):
    seen.add(fp(i))
    state.scheduled(fp(i), "http://h/%d" % i, 1, "http://h/%d" % i)
    if i % 10 == 9:
        state.finished([fp(i - 9), fp(i - 8)])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_sigkill_loses_nothing_that_was_reported_finished_or_before_it(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLER), str(tmp_path)],
                          cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    seen, _, pending = new_state(tmp_path)
    finished = {fp(i - 9) for i in range(9, 100, 10)} | {fp(i - 8) for i in range(9, 100, 10)}
    got = {r.fp for r in pending}
    # the last write was a finished record, so everything before it reached the OS
    assert got == {fp(i) for i in range(100)} - finished
    assert all(fp(i) in seen for i in range(100))

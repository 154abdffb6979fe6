"""crawler.state.jobstate: snapshot + journal, replay, torn records, damaged files, durable lengths,
a real SIGKILL."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest

from crawler.backends.bloom import LocalSeenSet
from crawler.commands.preflight import check_settings as validate_settings
from crawler.config import SettingError
from crawler.state import jobstate
from crawler.state.jobstate import (
    JOURNAL,
    SNAPSHOT,
    SYNC,
    JobState,
    JobStateError,
    read_state,
    state_dir,
)
from crawler.state.journal import (
    HEADER_SIZE,
    PendingRequest,
    encode_scheduled,
    frame,
    read_journal,
    read_record,
)

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


def test_a_canonical_url_equal_to_the_url_is_held_and_written_once(tmp_path) -> None:
    """The pending map holds each owed page's record bytes: a canonical URL that is the URL
    (most pages) is not written again, and a resume reads it back as that same URL."""
    url = "http://h/a-page-with-a-rather-long-path/that-is-its-own-canonical-url.html"
    same = encode_scheduled(PendingRequest(fp(1), url, 2, url))
    other = encode_scheduled(PendingRequest(fp(1), url, 2, "http://h/short"))
    assert len(same) == len(other) - len("http://h/short")  # no second copy of the URL
    _, state, _ = new_state(tmp_path)
    state.scheduled(fp(1), url, 2, url)
    state.scheduled(fp(2), url + "?x", 3, url)
    assert state.pending[fp(2)] - state.pending[fp(1)] == len(same)  # offsets in the journal
    state.close()
    _, _, pending = new_state(tmp_path)
    by_fp = {rec.fp: rec for rec in pending}
    assert by_fp[fp(1)] == PendingRequest(fp(1), url, 2, url)
    assert by_fp[fp(1)].canonical_url is by_fp[fp(1)].url  # one string on resume too
    assert by_fp[fp(2)] == PendingRequest(fp(2), url + "?x", 3, url)


def test_the_pending_map_holds_offsets_and_compactions_copy_the_records(tmp_path) -> None:
    """Memory per URL owed: the map holds an offset, not the record (a URL or two); records
    copied by compaction after compaction (finished, scheduled again, resumed) stay whole."""
    seen, state, _ = new_state(tmp_path, snapshot_records=300)
    schedule(seen, state, range(2_000))
    state.finished([fp(i) for i in range(2_000) if i % 3])
    for i in range(0, 60, 3):  # scheduled again: the latest record counts
        state.scheduled(fp(i), f"http://h/{i}?again", 1, f"http://h/{i}")
    state.finished([fp(i) for i in range(2_000, 2_010)])  # never scheduled: nothing pending
    assert state.snapshots >= 5
    owed = {i for i in range(2_000) if i % 3 == 0}
    assert len(state.pending) == len(owed)
    assert all(type(v) is int for v in state.pending.values())
    assert sum(sys.getsizeof(v) for v in state.pending.values()) / len(state.pending) <= 32
    state.close()
    _, again, pending = new_state(tmp_path / "none")  # another directory: still empty
    assert pending == []
    _, again, pending = new_state(tmp_path)
    urls = {rec.fp: rec.url for rec in pending}
    assert set(urls) == {fp(i) for i in owed}
    assert all(urls[fp(i)] == (f"http://h/{i}?again" if i < 60 else f"http://h/{i}?x")
               for i in owed)
    again.close()


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


def _count_compactions(monkeypatch, state: JobState) -> list[int]:
    """The pending records each compaction of ``state`` rewrites, in order."""
    rewritten: list[int] = []
    real = state._compact

    def counting(source: bytes = b"") -> None:
        rewritten.append(len(state.pending))
        real(source)

    monkeypatch.setattr(state, "_compact", counting)
    return rewritten


def test_a_journal_just_compacted_is_not_compacted_again_at_the_next_snapshot(
    tmp_path, monkeypatch
) -> None:
    """A compaction leaves the journal holding exactly the pending records; the next
    snapshot, a few records later, must not rewrite them all again (it did: every snapshot of
    a large frontier rewrote it, ~0.2 ms a page at 10^6 pages)."""
    seen, state, _ = new_state(tmp_path, snapshot_records=20)
    schedule(seen, state, range(300))
    state.snapshot(compact=True)
    rewritten = _count_compactions(monkeypatch, state)
    for i in range(5):
        state.finished([fp(i)])
        state.snapshot()
    assert state.snapshots >= 5 and rewritten == []
    state.finished(fp(i) for i in range(5, 120))  # dead 120 >= max(20, 180 // 2)
    state.snapshot()
    assert rewritten == [180]
    _, records = read_journal(state.journal_path)
    assert len(records) == 180


def test_compaction_copies_a_bounded_number_of_records_per_record_written(
    tmp_path, monkeypatch
) -> None:
    """A frontier of 2,000 requests drained one page at a time, a snapshot every 50 records:
    the compactions copy at most ~3 records per record written (they copied ~10 before), and
    the journal a resume would read never holds more than 1.5x the owed records plus two
    snapshots' worth (100): up to 50 dead ones are left, and 50 more come before the next check."""
    seen, state, _ = new_state(tmp_path, snapshot_records=50)
    rewritten = _count_compactions(monkeypatch, state)
    schedule(seen, state, range(2000))
    written, most = 2000, 0
    for i in range(2000):
        state.finished([fp(i)])
        written += 1
        most = max(most, state._journal_records - 1.5 * len(state.pending))
        if i % 3 == 0 and i < 1500:  # and the pages' new links, now and then
            schedule(seen, state, [10_000 + i])
            written += 1
    assert rewritten  # the journal was compacted
    assert sum(rewritten) <= 3 * written
    assert most <= 2 * 50


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


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize("damage, problem", [
    (lambda d: b"GARBAGE!" + d[8:], "bad magic"),
    (lambda d: d[:5], "truncated journal header"),
    (lambda d: flip(d, 20), "damaged journal header (checksum)"),
    (lambda d: d[:8] + struct.pack("<I", 1) + d[12:], "journal version 1, this crawler reads 2"),
    (lambda d: flip(d, HEADER_SIZE + 40), f"damaged journal record at byte {HEADER_SIZE}"),
])
def test_damaged_journal_stops_with_the_file_name(tmp_path, damage, problem) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state._file.flush()
    state.journal_path.write_bytes(damage(state.journal_path.read_bytes()))
    with pytest.raises(JobStateError) as err:
        new_state(tmp_path)
    assert str(state.journal_path) in str(err.value) and problem in str(err.value)
    with pytest.raises(SettingError, match=re.escape(problem)):
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
from crawler.backends.bloom import LocalSeenSet
from crawler.state.jobstate import JobState
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


# --- the durable length: cuts, flips, missing files -------------------------------------------


def record_size(i: int) -> int:
    """The bytes of the scheduled record :func:`schedule` writes for ``i``."""
    return len(encode_scheduled(PendingRequest(fp(i), f"http://h/{i}?x", i % 7, f"http://h/{i}")))


def journal_with_durable_point(tmp_path) -> tuple[JobState, list[int], int]:
    """A journal of 12 scheduled records, fsynced (durable) after the 6th: ``(state, record
    boundaries, durable length)``; the process is then 'killed' (the file is left as it is)."""
    seen, state, _ = new_state(tmp_path / "job")
    boundaries = [HEADER_SIZE]
    for i in range(12):
        schedule(seen, state, [i])
        boundaries.append(boundaries[-1] + record_size(i))
        if i == 5:
            state.sync()
    durable = boundaries[6]
    assert state._file is not None
    state._file.flush()
    assert state.journal_path.stat().st_size == boundaries[-1]
    assert json.loads(state.sync_path.read_text())["length"] == durable
    return state, boundaries, durable


def test_sync_records_the_durable_length(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jobstate, "SYNC_SECONDS", 0.0)  # every write is fsynced
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(3))
    state.finished([fp(0)])
    mark = json.loads(state.sync_path.read_text())
    assert mark["length"] == state.journal_path.stat().st_size
    assert mark["closed"] is False
    state.close()
    mark = json.loads(state.sync_path.read_text())
    assert (mark["length"], mark["closed"]) == (state.journal_path.stat().st_size, True)


def test_a_snapshot_never_holds_a_url_the_durable_journal_lacks(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path, snapshot_records=10_000)
    schedule(seen, state, range(30))
    state.snapshot()  # no compaction: the records stay in the journal after its header
    assert json.loads(state.sync_path.read_text())["length"] == state.journal_path.stat().st_size
    # what a power cut leaves: the file cut at the durable length, and not an earlier byte
    state.journal_path.write_bytes(state.journal_path.read_bytes()[:-1])
    with pytest.raises(JobStateError, match="shorter than the"):
        new_state(tmp_path)


def test_cut_at_every_record_boundary_and_mid_record(tmp_path, caplog) -> None:
    state, boundaries, durable = journal_with_durable_point(tmp_path)
    data = state.journal_path.read_bytes()
    cuts = sorted(set(boundaries) | {b + d for b in boundaries[:-1] for d in (1, 7, 20)})
    assert len(cuts) > 40
    for cut in cuts:
        copy = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "job", copy)
        (state_dir(copy) / JOURNAL).write_bytes(data[:cut])
        caplog.clear()
        if cut < durable:
            with pytest.raises(JobStateError) as err:
                new_state(copy)
            assert str(err.value).startswith(f"{state_dir(copy) / JOURNAL}: {cut} bytes, "
                                             f"shorter than the {durable} bytes made durable")
            continue
        with caplog.at_level(logging.WARNING, "crawler.state.jobstate"):
            _, again, pending = new_state(copy)
        whole = sum(1 for b in boundaries[1:] if b <= cut)
        assert {r.fp for r in pending} == {fp(i) for i in range(whole)}, cut
        torn = cut not in boundaries
        assert ("torn last record" in caplog.text) == torn, cut
        assert again.tail_lost == torn


def test_any_flipped_byte_before_the_last_record_is_refused_naming_the_byte(tmp_path) -> None:
    state, boundaries, durable = journal_with_durable_point(tmp_path)
    data = state.journal_path.read_bytes()
    for at in range(HEADER_SIZE, boundaries[-2]):
        state.journal_path.write_bytes(flip(data, at))
        start = max(b for b in boundaries if b <= at)
        with pytest.raises(JobStateError) as err:
            read_state(state.directory)
        message = str(err.value)
        assert message.startswith(f"{state.journal_path}: damaged journal record at byte {start} (")
        assert ("inside the" in message) == (start < durable), message
        assert ("followed by a valid record" in message) == (start >= durable), message
    # the last record is beyond the durable length: damage there looks like a torn write
    state.journal_path.write_bytes(flip(data, boundaries[-2] + 6))
    journal = read_state(state.directory)
    assert journal is not None and len(journal.records) == 11


def test_corrupt_length_in_the_middle_is_damage_not_a_torn_tail(tmp_path) -> None:
    """The reported case: a length made huge in the middle looked like a record running past
    the end of the file; with nothing made durable beyond the header it is refused all the same."""
    state, boundaries, _ = journal_with_durable_point(tmp_path)
    state.sync_path.unlink()  # only the header's own durable length is left
    data = bytearray(state.journal_path.read_bytes())
    at = boundaries[8]
    data[at + 1:at + 5] = struct.pack("<I", 10_000_000)
    state.journal_path.write_bytes(bytes(data))
    with pytest.raises(JobStateError, match=f"damaged journal record at byte {at} "
                       r"\(record header checksum\), followed by a valid record at byte "
                       f"{boundaries[9]}"):
        new_state(tmp_path / "job")
    with pytest.raises(SettingError, match=f"byte {at}"):
        validate_settings({"JOBDIR": str(tmp_path / "job")})


def test_finished_records_count_in_the_durable_length(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(4))
    state.finished([fp(1), fp(2)])
    state.sync()
    size = state.journal_path.stat().st_size
    assert size == HEADER_SIZE + sum(map(record_size, range(4))) + 2 * len(frame(b"F", fp(1)))
    state.journal_path.write_bytes(state.journal_path.read_bytes()[:size - 10])
    with pytest.raises(JobStateError, match="shorter than"):
        new_state(tmp_path)


@pytest.mark.parametrize("remove", [[JOURNAL], [JOURNAL, SYNC], [JOURNAL, SNAPSHOT]])
def test_missing_journal_beside_its_other_files_is_refused(tmp_path, remove) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state.close()
    for name in remove:
        (state.directory / name).unlink()
    with pytest.raises(JobStateError) as err:
        new_state(tmp_path)
    assert str(err.value).startswith(f"{state.journal_path}: missing, but ")
    assert "would lose them" in str(err.value)
    with pytest.raises(SettingError, match="missing, but"):
        validate_settings({"JOBDIR": str(tmp_path)})


def test_journal_replaced_by_an_older_copy_is_refused(tmp_path) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state.close()
    old = state.journal_path.read_bytes()
    seen, state, _ = new_state(tmp_path)  # open compacts: a newer generation
    schedule(seen, state, range(5, 10))
    state.close()
    state.journal_path.write_bytes(old)
    with pytest.raises(JobStateError, match="replaced by an old copy"):
        new_state(tmp_path)


def test_a_stale_sync_file_of_the_previous_journal_is_ignored(tmp_path) -> None:
    # a kill between a compaction's rename and the sync file's rewrite
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state.sync()
    stale = state.sync_path.read_bytes()
    state.snapshot(compact=True)
    assert state._file is not None
    state._file.close()
    state.sync_path.write_bytes(stale)
    _, _, pending = new_state(tmp_path)
    assert {r.fp for r in pending} == {fp(i) for i in range(5)}


@pytest.mark.parametrize("text", ["{not json", '{"nonce": "zz", "generation": 0, "length": 1}',
                                  '{"length": 5}'])
def test_damaged_sync_file_is_refused(tmp_path, text) -> None:
    _, state, _ = new_state(tmp_path)
    state.close()
    state.sync_path.write_text(text)
    with pytest.raises(JobStateError, match=f"{state.sync_path}: not a journal sync file"):
        new_state(tmp_path)


@pytest.mark.parametrize("closed, boot, warned", [
    (False, "another-boot", True), (True, "another-boot", False), (False, None, False)])
def test_a_restart_of_the_machine_mid_crawl_is_reported(tmp_path, caplog, closed, boot,
                                                       warned) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5))
    state.sync()
    mark = json.loads(state.sync_path.read_text())
    mark["closed"] = closed
    if boot is not None:
        mark["boot"] = boot
    state.sync_path.write_text(json.dumps(mark))
    with caplog.at_level(logging.WARNING, "crawler.state.jobstate"):
        _, again, pending = new_state(tmp_path)
    assert len(pending) == 5
    assert ("the machine restarted while the crawl writing it ran" in caplog.text) == warned
    assert again.tail_lost == warned


def test_every_record_reaches_the_os_as_it_is_written(tmp_path) -> None:
    """A page's links are journaled before the page reaches storage; a kill after its commit
    must find them in the file (a buffered record was lost with the process: 27 pages of an
    80-page chain never fetched in 1 kill of 12, the stored page hiding its lost link)."""
    seen, state, _ = new_state(tmp_path)
    size = HEADER_SIZE
    for i in range(3):
        schedule(seen, state, [i])
        size += record_size(i)
        assert state.journal_path.stat().st_size == size
    state.finished([fp(0)])
    assert state.journal_path.stat().st_size == size + len(frame(b"F", fp(0)))
    assert json.loads(state.sync_path.read_text())["length"] == HEADER_SIZE  # not fsynced


def test_the_check_before_the_crawl_does_not_warn_twice(tmp_path, caplog) -> None:
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(3))
    state.journal_path.write_bytes(state.journal_path.read_bytes()[:-2])
    mark = json.loads(state.sync_path.read_text())
    state.sync_path.write_text(json.dumps({**mark, "boot": "another-boot"}))
    with caplog.at_level(logging.WARNING, "crawler.state.jobstate"):
        validate_settings({"JOBDIR": str(tmp_path)})
        assert caplog.text == ""
        new_state(tmp_path)
    assert caplog.text.count("torn last record") == caplog.text.count("machine restarted") == 1


def test_the_crawl_reuses_the_journal_the_check_before_it_read(tmp_path, monkeypatch) -> None:
    """A resume read the whole journal twice, in the pre-flight check and at open: a third of
    the time to the first page (2x10^5 owed). The check's read is kept while the files stay as
    they were."""
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(6))
    state.finished([fp(1), fp(4)])
    state.sync()  # then killed: no close
    reads = []
    real = jobstate.read_journal_full
    monkeypatch.setattr(jobstate, "read_journal_full",
                        lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    validate_settings({"JOBDIR": str(tmp_path)})
    _, _, pending = new_state(tmp_path)
    assert [rec.fp for rec in pending] == [fp(i) for i in (0, 2, 3, 5)]
    assert len(reads) == 1


def test_a_journal_changed_after_the_check_is_read_again(tmp_path) -> None:
    """The kept read is used only for the very files it read: a record appended between the
    check and the crawl (another run of the same JOBDIR) is replayed, not lost."""
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(3))
    state.sync()
    validate_settings({"JOBDIR": str(tmp_path)})
    state.finished([fp(0)])  # the journal grows after the check
    schedule(seen, state, [7])
    state.sync()
    _, _, pending = new_state(tmp_path)
    assert [rec.fp for rec in pending] == [fp(1), fp(2), fp(7)]


@pytest.mark.parametrize("finished", [(), (0,), (1, 2), (0, 3, 5), (5,), (0, 1, 2, 3, 4, 5)])
def test_compaction_at_open_copies_the_pending_records_from_the_bytes_read(
        tmp_path, finished) -> None:
    """The compaction that opens a resume slices the pending records from the bytes it read
    (runs of adjacent records in one write); the journal it writes holds exactly them, and the
    pending map points at each, so the next compaction (from the file) and resume agree."""
    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(6))
    state.finished([fp(i) for i in finished])
    state.sync()
    owed = [fp(i) for i in range(6) if i not in finished]
    seen2, again, pending = new_state(tmp_path)
    assert [rec.fp for rec in pending] == owed
    _, records = read_journal(again.journal_path)
    assert [(f, rec.url, rec.depth) for f, rec in records] == [
        (fp(i), f"http://h/{i}?x", i % 7) for i in range(6) if i not in finished]
    with open(again.journal_path, "rb") as fh:
        for key, offset in again.pending.items():
            fh.seek(offset)
            assert read_record(again.journal_path, fh) == encode_scheduled(
                next(rec for rec in pending if rec.fp == key))
    schedule(seen2, again, [9])
    again._compact()  # from the file, through the offsets the copy recorded
    again.sync()
    _, _, pending = new_state(tmp_path)
    assert [rec.fp for rec in pending] == [*owed, fp(9)]


def test_a_record_whose_lengths_do_not_add_up_is_decoded_as_it_always_was(tmp_path) -> None:
    """The one-loop read takes a record as it is only when its body's lengths add up; one that
    passes its checksums but does not (never written by the crawler) is decoded by
    ``journal._decode`` as before, and the records after it are read too."""
    from crawler.state import journal

    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(3))
    odd = struct.pack("<BiII", 16, 2, 500, 0) + fp(99) + b"http://h/99"  # URL length past the body
    state._write(frame(b"S", odd))
    schedule(seen, state, range(3, 6))
    state._file.flush()
    data = state.journal_path.read_bytes()
    at = data.index(frame(b"S", odd))
    got = journal.read_journal_full(state.journal_path)
    assert len(got.records) == 7 and at in got.offsets
    assert got.records[got.offsets.index(at)] == journal._decode(state.journal_path, at, b"S", odd)
    assert [r.url for _, r in got.records if r is not None][-3:] == [f"http://h/{i}?x"
                                                                     for i in range(3, 6)]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_the_journal_is_read_and_restored(tmp_path, enabled) -> None:
    """Building 10^6 records ran thousands of collections over what was built so far (40% of the
    read; 5,000 records: ~30): none runs during the read, and the collector is left as it was."""
    import gc

    from crawler.state import journal

    seen, state, _ = new_state(tmp_path)
    schedule(seen, state, range(5000))
    state._file.flush()
    runs: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            runs.append(info["generation"])

    was = gc.isenabled()
    gc.callbacks.append(count)
    try:
        gc.enable() if enabled else gc.disable()
        got = journal.read_journal_full(state.journal_path)
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(count)
        gc.enable() if was else gc.disable()
    assert len(got.records) == 5000
    assert len(runs) <= 1, runs  # at most the one the first allocation after it starts

"""Durable dedup state in ``JOBDIR``: a Bloom snapshot plus an append-only journal.

The journal is the one authority on what a crawl still owes. Every request the dupefilter lets
through is written as a *scheduled* record (fingerprint, URL, depth, canonical URL); every
fingerprint reported done (``crawler.signals.batch_committed`` after a durable storage commit,
``crawler.signals.request_finished`` for failures and non-HTML) as a *finished* record. On start,
the snapshot is loaded and the journal replayed: what was scheduled and never finished —
including requests in flight when the process died — is handed back for re-scheduling. Scrapy's
own ``JOBDIR/requests.queue`` is not crash-safe (its state file is written only at a clean
close), so the dupefilter discards it and relies on this journal instead.

Files, in ``JOBDIR/dedup/``:

``bloom.snapshot``
    :meth:`crawler.bloom.LocalSeenSet.save` format (header with magic, version, n, p, m, k,
    layer count and CRC-32), written atomically.
``journal.bin``
    Header ``"<8sIQd"``: magic ``b"DDJRNL\\0\\0"``, version 1, generation (0 = based on an empty
    filter, N = on the N-th snapshot), the job's start time (Unix seconds). Then records
    ``"<cI"`` (type, body length), body, ``"<I"`` CRC-32 of type + body. Type ``S`` body:
    ``"<BiII"`` (fingerprint length, depth, URL length, canonical length), fingerprint, URL,
    canonical URL (UTF-8). Type ``F`` body: the fingerprint.
``seen.sqlite``
    The exact set of ``BLOOM_VERIFY`` (:class:`crawler.bloom.ExactSet`).

Durability: *finished* records are flushed to the OS at once, *scheduled* records at the latest
with the next finished record or after :data:`FLUSH_SECONDS`; because the file is one ordered
stream, a durable finished record implies every earlier scheduled one — so the links of a
stored page are never lost. A SIGKILL loses nothing the OS received; a power loss may lose the
journal's unsynced tail (it is fsynced only when compacted).

Snapshot (every ``JOBDIR_SNAPSHOT_RECORDS`` records or ``JOBDIR_SNAPSHOT_SECONDS``, and at
close): flush the journal, save the filter (temp, fsync, rename), then — once the journal
outgrows the pending set — compact it to the pending records (temp, fsync, rename). A newer
snapshot with an older journal (a kill between the two renames, or no compaction yet) replays
to the same state: adds are idempotent.

The storage commit and the finished record cannot be one atomic step: a kill between them leaves
a stored page pending, so before re-scheduling the dupefilter asks storage
(:func:`stored_canonical_urls`) and marks what it already holds finished. A torn last record is
ignored; a bad header, a corrupt record before the end or a missing snapshot raise
:class:`JobStateError` naming the file.

Limits: pending records live in memory (about 150-250 bytes each: the frontier, not the seen
set); a snapshot blocks the reactor while it writes the filter (about 0.1 s for the 17 MiB of
the default 10^7 capacity).
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

from crawler import config, defaults
from crawler.atomicfile import fsync_dir
from crawler.bloom import SnapshotError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from crawler.bloom import LocalSeenSet
    from crawler.config import SettingsLike

logger = logging.getLogger(__name__)

MAGIC = b"DDJRNL\x00\x00"
VERSION = 1
_HEAD = struct.Struct("<8sIQd")
_REC = struct.Struct("<cI")
_CRC = struct.Struct("<I")
_SCHED = struct.Struct("<BiII")
SUBDIR = "dedup"
SNAPSHOT = "bloom.snapshot"
JOURNAL = "journal.bin"
FLUSH_SECONDS = 0.2


class JobStateError(config.SettingError):
    """The JOBDIR state cannot be used; the message names the file and what to do."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.name, self.value, self.allowed, self.path = "JOBDIR", str(path), problem, str(path)
        ValueError.__init__(
            self, f"{path}: {problem}; delete the job directory to start the crawl over,"
            " or restore the file from a backup")


class PendingRequest(NamedTuple):
    fp: bytes
    url: str
    depth: int
    canonical_url: str


def state_dir(jobdir: str | os.PathLike[str]) -> Path:
    return Path(jobdir, SUBDIR)


def read_journal(path: Path) -> tuple[int, list[tuple[bytes, PendingRequest | None]]]:
    """``(generation, records)``: ``(fp, PendingRequest)`` scheduled, ``(fp, None)`` finished."""
    generation, _, records = read_journal_full(path)
    return generation, records


def read_journal_full(
    path: Path,
) -> tuple[int, float, list[tuple[bytes, PendingRequest | None]]]:
    """``(generation, job start time, records)``; see :func:`read_journal`."""
    data = path.read_bytes()
    if len(data) < _HEAD.size:
        raise JobStateError(path, f"truncated journal header ({len(data)} bytes)")
    magic, version, generation, started = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise JobStateError(path, "not a dedup-crawler journal (bad magic)")
    if version != VERSION:
        raise JobStateError(path, f"journal version {version}, this crawler reads {VERSION}")
    records: list[tuple[bytes, PendingRequest | None]] = []
    pos, end = _HEAD.size, len(data)
    while pos < end:
        stop = pos + _REC.size
        kind, length = _REC.unpack_from(data, pos) if stop <= end else (b"", 0)
        tail = stop + length + _CRC.size
        if stop > end or tail > end:
            logger.warning("%s: ignoring a torn last record at byte %d", path, pos)
            break
        body = data[stop:stop + length]
        if zlib.crc32(data[pos:pos + 1] + body) != _CRC.unpack_from(data, stop + length)[0]:
            if tail == end:
                logger.warning("%s: ignoring a torn last record at byte %d", path, pos)
                break
            raise JobStateError(path, f"corrupt journal record at byte {pos} (checksum)")
        records.append(_decode(path, pos, kind, body))
        pos = tail
    return generation, started, records


def _decode(path: Path, pos: int, kind: bytes, body: bytes) -> tuple[bytes, PendingRequest | None]:
    if kind == b"F":
        return body, None
    if kind != b"S":
        raise JobStateError(path, f"unknown journal record type {kind!r} at byte {pos}")
    fplen, depth, ulen, clen = _SCHED.unpack_from(body)
    off = _SCHED.size
    fp, url = body[off:off + fplen], body[off + fplen:off + fplen + ulen].decode()
    canonical = body[off + fplen + ulen:off + fplen + ulen + clen].decode()
    return fp, PendingRequest(fp, url, depth, canonical)


def _encode_scheduled(rec: PendingRequest) -> bytes:
    url, canonical = rec.url.encode(), rec.canonical_url.encode()
    body = _SCHED.pack(len(rec.fp), rec.depth, len(url), len(canonical)) + rec.fp + url + canonical
    return _frame(b"S", body)


def _frame(kind: bytes, body: bytes) -> bytes:
    return _REC.pack(kind, len(body)) + body + _CRC.pack(zlib.crc32(kind + body))


def check_jobdir(settings: SettingsLike) -> None:
    """Validator: refuse a JOBDIR whose snapshot or journal is unreadable, before the crawl."""
    jobdir = settings.get("JOBDIR")
    if not jobdir:
        return
    directory = state_dir(jobdir)
    snapshot, journal = directory / SNAPSHOT, directory / JOURNAL
    if snapshot.exists():
        from crawler.bloom import read_snapshot

        try:
            read_snapshot(snapshot)
        except SnapshotError as exc:
            raise JobStateError(snapshot, exc.problem) from None
    if journal.exists():
        generation, _ = read_journal(journal)
        if generation and not snapshot.exists():
            raise JobStateError(snapshot, f"missing, but {journal.name} is based on snapshot "
                                f"{generation}")


config.register(check_jobdir)


def stored_canonical_urls(settings: SettingsLike, urls: Iterable[str], since: float) -> set[str]:
    """Which of ``urls`` storage (``STORAGE_URL``) holds in documents or dropped rows written
    since ``since`` (Unix time, less a 2 s clock margin). Empty, with a warning, when the
    database cannot be read: the pages are then fetched again rather than lost.
    """
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa

    from crawler.storage import Document, Dropped, StorageError, Store

    wanted = list(urls)
    start = datetime.fromtimestamp(since, UTC) - timedelta(seconds=2)
    found: set[str] = set()
    store = Store.from_settings(settings)
    try:
        store.check()
        with store.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                for column, stamp in ((Document.canonical_url, Document.fetched_at),
                                      (Dropped.canonical_url, Dropped.dropped_at)):
                    stmt = sa.select(column).where(column.in_(chunk), stamp >= start)
                    found.update(conn.scalars(stmt))
    except (StorageError, sa.exc.SQLAlchemyError) as exc:
        logger.warning("JOBDIR: cannot ask storage which pending pages it holds (%s); they "
                       "are fetched again", exc)
        return set()
    finally:
        store.close()
    return found


class JobState:
    """Snapshot + journal of one crawl's dedup state (see the module docstring)."""

    def __init__(self, jobdir: str | os.PathLike[str], seen: LocalSeenSet,
                 snapshot_records: int = defaults.JOBDIR_SNAPSHOT_RECORDS,
                 snapshot_seconds: float = defaults.JOBDIR_SNAPSHOT_SECONDS) -> None:
        self.directory = state_dir(jobdir)
        self.snapshot_path = self.directory / SNAPSHOT
        self.journal_path = self.directory / JOURNAL
        self.seen = seen
        self.snapshot_records, self.snapshot_seconds = snapshot_records, snapshot_seconds
        #: fingerprint -> its framed scheduled record, ready to be re-written by a compaction
        self.pending: dict[bytes, bytes] = {}
        self.generation = 0
        self.started = time.time()  # when the job began; kept across resumes
        self.snapshots = 0
        self._file: BinaryIO | None = None
        self._since_snapshot = self._journal_records = 0
        self._last_snapshot = self._last_flush = time.monotonic()

    def open(self) -> list[PendingRequest]:
        """Load and replay existing state; return what was seen but never finished."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("*.tmp"):
            stale.unlink()  # a snapshot or compaction cut short by a kill
        if self.snapshot_path.exists():
            try:
                self.seen.load(self.snapshot_path)
            except SnapshotError as exc:
                raise JobStateError(self.snapshot_path, exc.problem) from None
        records: list[tuple[bytes, PendingRequest | None]] = []
        if self.journal_path.exists():
            self.generation, self.started, records = read_journal_full(self.journal_path)
            if self.generation and not self.snapshot_path.exists():
                raise JobStateError(self.snapshot_path, "missing, but the journal needs it")
        pending: dict[bytes, PendingRequest] = {}
        for fp, rec in records:
            if rec is None:
                pending.pop(fp, None)
            else:
                self.seen.add(fp)
                pending[fp] = rec
        self.pending = {fp: _encode_scheduled(rec) for fp, rec in pending.items()}
        if records:
            self.snapshot(compact=True)
        else:
            self._compact()
        logger.info("JOBDIR %s: %d URLs seen, %d to resume (%d journal records replayed)",
                    self.directory, len(self.seen), len(pending), len(records))
        return list(pending.values())

    def scheduled(self, fp: bytes, url: str, depth: int, canonical_url: str) -> None:
        record = _encode_scheduled(PendingRequest(fp, url, depth, canonical_url))
        self.pending[fp] = record
        self._write(record, flush=False)

    def finished(self, fps: Iterable[bytes]) -> int:
        """Mark fingerprints done; returns how many were pending."""
        done = [fp for fp in fps if self.pending.pop(fp, None) is not None]
        if done:
            self._write(b"".join(_frame(b"F", fp) for fp in done), flush=True, count=len(done))
        return len(done)

    def snapshot(self, compact: bool = False) -> None:
        """Save the filter; compact the journal when it has grown past the pending set.

        Compaction rewrites every pending record, so it runs only once the journal holds more
        records than ``max(snapshot_records, pending)``: amortized O(1) per record however
        large the frontier. A journal older than the snapshot replays correctly (adds are
        idempotent), so a snapshot without compaction is safe.
        """
        started = time.monotonic()
        if self._file is not None:
            self._file.flush()
        self.seen.save(self.snapshot_path)
        self.generation += 1
        self.snapshots += 1
        if compact or self._journal_records >= max(self.snapshot_records, len(self.pending)):
            self._compact()
        self._since_snapshot = 0
        self._last_snapshot = time.monotonic()
        logger.debug("JOBDIR snapshot %d: %d URLs seen, %d pending, %.3f s", self.generation,
                     len(self.seen), len(self.pending), time.monotonic() - started)

    def close(self) -> None:
        if self._file is None:
            return
        self.snapshot(compact=True)
        self._file.close()
        self._file = None

    def _write(self, data: bytes, flush: bool, count: int = 1) -> None:
        assert self._file is not None, "JobState.open() first"
        self._file.write(data)
        self._since_snapshot += count
        self._journal_records += count
        now = time.monotonic()
        if flush or now - self._last_flush >= FLUSH_SECONDS:
            self._file.flush()
            self._last_flush = now
        if (self._since_snapshot >= self.snapshot_records
                or now - self._last_snapshot >= self.snapshot_seconds):
            self.snapshot()

    def _compact(self) -> None:
        tmp = self.journal_path.with_name(JOURNAL + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(_HEAD.pack(MAGIC, VERSION, self.generation, self.started))
            fh.write(b"".join(self.pending.values()))
            fh.flush()
            os.fsync(fh.fileno())
        if self._file is not None:
            self._file.close()
        os.replace(tmp, self.journal_path)
        fsync_dir(self.directory)
        self._file = open(self.journal_path, "ab")  # noqa: SIM115 - held for the crawl
        self._journal_records = len(self.pending)

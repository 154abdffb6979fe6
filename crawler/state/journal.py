"""The JOBDIR journal's file format (``JOBDIR/dedup/journal.bin``; see
:mod:`crawler.state.jobstate`).

Header ``"<8sIQdQ8s"`` then its ``"<I"`` CRC-32: magic ``b"DDJRNL\\0\\0"``, version 2,
generation (0 = based on an empty filter, N = on the N-th snapshot), the job's start time (Unix
seconds), the *base length* (the bytes the compaction that wrote the file fsynced: header plus
the pending records) and a random 8-byte *nonce* naming this file. Then records: ``"<cII"``
(type, body length, CRC-32 of type + length), body, ``"<I"`` CRC-32 of everything before it in
the record. Type ``S`` (*scheduled*) body: ``"<BiII"`` (fingerprint length, depth, URL length,
canonical length), fingerprint, URL, canonical URL (UTF-8; length 0: the same as the URL). Type
``F`` (*finished*) body: the fingerprint.

``JOBDIR/dedup/journal.sync`` (JSON, written atomically after each fsync of the journal)
records the *durable length*: ``{"nonce": HEX, "generation": N, "length": BYTES, "boot":
BOOT_ID, "closed": BOOL}``. The journal must hold at least ``max(base length, that length)``
bytes of whole, valid records (the length counts only when the nonce is this file's; a sync file
of an older journal is stale, one of a newer generation means the journal was replaced by an
older file).

Reading: the header and every record inside the durable length must be valid, and the file at
least that long. After it, the first invalid record starts a *torn tail* — what a crash or a
power cut leaves — ignored with a warning, unless a valid record follows somewhere after it:
then it is damage in the middle. Anything else raises :class:`JobStateError` naming the file
and the byte. Version 1 journals (no header CRC, no durable length) are refused.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, NamedTuple

from crawler import config

logger = logging.getLogger("crawler.state.jobstate")  # its warnings are the JOBDIR state's

MAGIC = b"DDJRNL\x00\x00"
VERSION = 2
_PREFIX = struct.Struct("<8sI")
_HEAD = struct.Struct("<8sIQdQ8s")
_REC = struct.Struct("<cII")
_CRC = struct.Struct("<I")
_SCHED = struct.Struct("<BiII")
HEADER_SIZE = _HEAD.size + _CRC.size
_KINDS = (b"S", b"F")


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


class SyncMark(NamedTuple):
    """The content of ``journal.sync``: ``length`` bytes of journal ``nonce`` are durable."""

    nonce: bytes
    generation: int
    length: int
    boot: str
    closed: bool


class Journal(NamedTuple):
    """A journal as read: its header fields, records, and where its valid part ends."""

    generation: int
    started: float
    nonce: bytes
    durable: int  # bytes that had to be (and are) valid
    records: list[tuple[bytes, PendingRequest | None]]
    valid: int  # bytes of header and whole valid records
    size: int
    #: each record's byte offset in the file, by index into ``records``: the pending map holds
    #: offsets, and a compaction copies the records from there (:func:`read_record`)
    offsets: list[int]
    #: why the record at ``valid`` is not whole when the file goes on after it (a torn tail,
    #: :func:`warn_torn`); "" when the file ends with a whole record
    torn: str = ""
    #: the file's bytes as read (the compaction that opens a resumed crawl copies the pending
    #: records from them instead of reading each one back from the file)
    data: bytes = b""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a bulk build of a resume (the journal's records,
    the owed requests: tuples, strings and bytes, no reference cycles), back as it was after.
    Building 10^6 records ran ~40 collections of the young generations and several full ones
    over everything built so far: 40% of the journal's read. Nothing is collected meanwhile
    that reference counting would not free; what was garbage waits for the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def encode_header(generation: int, started: float, base: int, nonce: bytes) -> bytes:
    """The journal's header: based on snapshot ``generation``, the job started at ``started``,
    ``base`` bytes written by the compaction that creates the file, named ``nonce``."""
    head = _HEAD.pack(MAGIC, VERSION, generation, started, base, nonce)
    return head + _CRC.pack(zlib.crc32(head))


def read_journal(path: Path) -> tuple[int, list[tuple[bytes, PendingRequest | None]]]:
    """``(generation, records)``: ``(fp, PendingRequest)`` scheduled, ``(fp, None)`` finished."""
    journal = read_journal_full(path)
    warn_torn(path, journal)
    return journal.generation, journal.records


def read_journal_full(path: Path, mark: SyncMark | None = None) -> Journal:
    """The journal at ``path`` checked against its sync file's ``mark`` (module docstring). A
    torn tail is not logged here: :func:`warn_torn` does, for the read that resumes the crawl."""
    data = path.read_bytes()
    generation, started, base, nonce = _read_header(path, data)
    durable = base
    if mark is not None:
        if mark.generation > generation:
            raise JobStateError(path, f"generation {generation}, older than the generation "
                                f"{mark.generation} of its sync file: replaced by an old copy")
        if mark.nonce == nonce:
            durable = max(durable, mark.length)
    if len(data) < durable:
        raise JobStateError(path, f"{len(data)} bytes, shorter than the {durable} bytes made "
                            "durable (cut short or replaced): the URLs still to fetch are lost")
    with collector_paused():
        records, offsets, pos, torn = _read_records(path, data, durable)
    return Journal(generation, started, nonce, durable, records, pos, len(data), offsets, torn,
                   data)


def _read_records(path: Path, data: bytes, durable: int,
                  ) -> tuple[list[tuple[bytes, PendingRequest | None]], list[int], int, str]:
    """``(records, offsets, end of the valid part, torn)`` of a journal's bytes ``data``.

    The checks and the decoding of :func:`_check_record` and :func:`_decode` in one loop with
    no call per record (10^6 records: 2.0 -> 1.5 s with the collector paused); a
    record it cannot take as it is (invalid, or a body whose lengths do not add up) goes to
    those two, which say why or decode it as they always did."""
    records: list[tuple[bytes, PendingRequest | None]] = []
    offsets: list[int] = []
    add_record, add_offset = records.append, offsets.append
    rec_at, crc_at, sched_at = _REC.unpack_from, _CRC.unpack_from, _SCHED.unpack_from
    crc32 = zlib.crc32
    new_request = tuple.__new__
    head, sched = _REC.size, _SCHED.size
    size = len(data)
    pos = HEADER_SIZE
    while pos + head <= size:
        kind, length, head_crc = rec_at(data, pos)
        end = pos + head + length + 4
        if (end > size or crc32(data[pos:pos + 5]) != head_crc
                or crc32(data[pos:end - 4]) != crc_at(data, end - 4)[0]):
            break  # the slow path below says why
        body = pos + head
        if kind == b"S":
            fplen, depth, ulen, clen = sched_at(data, body)
            if sched + fplen + ulen + clen != length:
                break
            at = body + sched
            fp = data[at:at + fplen]
            at += fplen
            url = data[at:at + ulen].decode()
            canonical = data[at + ulen:at + ulen + clen].decode() if clen else url
            add_record((fp, new_request(PendingRequest, (fp, url, depth, canonical))))
        elif kind == b"F":
            add_record((data[body:end - 4], None))
        else:
            break
        add_offset(pos)
        pos = end
    torn = ""
    while pos < size:  # what the loop above did not take: checked and decoded one by one
        end, problem = _check_record(data, pos)
        if not end:
            _bad_record(path, data, pos, durable, problem)
            torn = problem
            break
        kind = data[pos:pos + 1]
        records.append(_decode(path, pos, kind, data[pos + _REC.size:end - 4]))
        offsets.append(pos)
        pos = end
    return records, offsets, pos, torn


def warn_torn(path: Path, journal: Journal) -> None:
    """Log the torn last record :func:`read_journal_full` ignored, if there was one."""
    if journal.torn:
        logger.warning("%s: ignoring a torn last record at byte %d (%s; %d bytes, after the %d "
                       "made durable)", path, journal.valid, journal.torn,
                       journal.size - journal.valid, journal.durable)


def record_end(data: bytes, pos: int) -> int:
    """Where the record at ``pos`` of a journal's checked bytes ``data`` ends."""
    return pos + _REC.size + _REC.unpack_from(data, pos)[1] + _CRC.size


def read_record(path: Path, fh: BinaryIO) -> bytes:
    """The framed scheduled record at ``fh``'s position (a file of journal ``path``), checked."""
    pos = fh.tell()
    head = fh.read(_REC.size)
    length = _REC.unpack(head)[1] if len(head) == _REC.size else 0
    data = head + fh.read(length + _CRC.size) if length else head
    end, problem = _check_record(data, 0)
    if not end or data[:1] != b"S":
        raise JobStateError(path, f"no scheduled record at byte {pos} ({problem or 'finished'}) "
                            "where the pending map holds one: changed while the crawl ran")
    return data


def _read_header(path: Path, data: bytes) -> tuple[int, float, int, bytes]:
    if len(data) < _PREFIX.size:
        raise JobStateError(path, f"truncated journal header ({len(data)} bytes)")
    magic, version = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise JobStateError(path, "not a dedup-crawler journal (bad magic)")
    if version != VERSION:
        raise JobStateError(path, f"journal version {version}, this crawler reads {VERSION} only "
                            "(finish that crawl with the version that started it)")
    if len(data) < HEADER_SIZE:
        raise JobStateError(path, f"truncated journal header ({len(data)} bytes)")
    if zlib.crc32(data[:_HEAD.size]) != _CRC.unpack_from(data, _HEAD.size)[0]:
        raise JobStateError(path, "damaged journal header (checksum)")
    _, _, generation, started, base, nonce = _HEAD.unpack_from(data)
    return generation, started, base, nonce


def _check_record(data: bytes, pos: int) -> tuple[int, str]:
    """``(end, "")`` for a valid record at ``pos``, else ``(0, why not)``."""
    if pos + _REC.size > len(data):
        return 0, "incomplete record header"
    kind, length, head_crc = _REC.unpack_from(data, pos)
    if zlib.crc32(data[pos:pos + 5]) != head_crc or kind not in _KINDS:
        return 0, "record header checksum"
    end = pos + _REC.size + length + _CRC.size
    if end > len(data):
        return 0, "record runs past the end of the file"
    if zlib.crc32(data[pos:end - 4]) != _CRC.unpack_from(data, end - 4)[0]:
        return 0, "record checksum"
    return end, ""


def _bad_record(path: Path, data: bytes, pos: int, durable: int, problem: str) -> None:
    """Refuse damage (inside the durable length, or a valid record after it); a torn tail is
    let be (:func:`warn_torn`)."""
    if pos < durable:
        raise JobStateError(path, f"damaged journal record at byte {pos} ({problem}) inside the "
                            f"{durable} bytes that were made durable")
    starts = range(pos + 1, len(data) - _REC.size + 1)
    later = next((q for q in starts if _check_record(data, q)[0]), None)
    if later is not None:
        raise JobStateError(path, f"damaged journal record at byte {pos} ({problem}), followed "
                            f"by a valid record at byte {later}: damage, not a torn last record")


def _decode(path: Path, pos: int, kind: bytes, body: bytes) -> tuple[bytes, PendingRequest | None]:
    if kind == b"F":
        return body, None
    fplen, depth, ulen, clen = _SCHED.unpack_from(body)
    off = _SCHED.size
    fp, url = body[off:off + fplen], body[off + fplen:off + fplen + ulen].decode()
    # no canonical URL written: the same as the URL (one string, as the crawl held it)
    canonical = body[off + fplen + ulen:off + fplen + ulen + clen].decode() if clen else url
    return fp, PendingRequest(fp, url, depth, canonical)


def encode_scheduled(rec: PendingRequest) -> bytes:
    """The framed *scheduled* record of ``rec``. A canonical URL equal to the URL (most of them)
    is not written (length 0): a shorter journal, and a resumed request holds one string for
    both (a canonical URL is never empty: the URL stands in)."""
    url = rec.url.encode()
    canonical = b"" if rec.canonical_url == rec.url else rec.canonical_url.encode()
    body = _SCHED.pack(len(rec.fp), rec.depth, len(url), len(canonical)) + rec.fp + url + canonical
    return frame(b"S", body)


def frame(kind: bytes, body: bytes) -> bytes:
    """One record: type, body length and their CRC-32, body, CRC-32 of all before it."""
    head = kind + struct.pack("<I", len(body))
    record = head + _CRC.pack(zlib.crc32(head)) + body
    return record + _CRC.pack(zlib.crc32(record))


def read_sync(path: Path) -> SyncMark | None:
    """The durable length recorded in ``path`` (``journal.sync``); None when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobStateError(path, f"unreadable journal sync file ({exc})") from None
    try:
        raw = json.loads(text)
        mark = SyncMark(bytes.fromhex(raw["nonce"]), int(raw["generation"]), int(raw["length"]),
                        str(raw.get("boot", "")), bool(raw.get("closed", False)))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise JobStateError(path, "not a journal sync file (expected {\"nonce\": HEX, "
                            "\"generation\": N, \"length\": BYTES, ...})") from None
    return mark


def write_sync(path: Path, mark: SyncMark) -> None:
    """Write ``mark`` to ``path`` atomically (temp file, fsync, rename)."""
    from crawler.state.atomicfile import write_atomic

    write_atomic(path, json.dumps({"nonce": mark.nonce.hex(), "generation": mark.generation,
                                   "length": mark.length, "boot": mark.boot,
                                   "closed": mark.closed}))


def restarted(mark: SyncMark | None) -> bool:
    """The machine restarted while the crawl that wrote ``mark`` ran (it never closed)."""
    return mark is not None and not mark.closed and bool(mark.boot) and mark.boot != boot_id()


def boot_id() -> str:
    """This boot of the machine (Linux ``/proc/sys/kernel/random/boot_id``; "" elsewhere)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""

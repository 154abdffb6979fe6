"""The JOBDIR journal's file format (``JOBDIR/dedup/journal.bin``; see :mod:`crawler.jobstate`).

Header ``"<8sIQd"``: magic ``b"DDJRNL\\0\\0"``, version 1, generation (0 = based on an empty
filter, N = on the N-th snapshot), the job's start time (Unix seconds). Then records ``"<cI"``
(type, body length), body, ``"<I"`` CRC-32 of type + body. Type ``S`` (*scheduled*) body:
``"<BiII"`` (fingerprint length, depth, URL length, canonical length), fingerprint, URL,
canonical URL (UTF-8). Type ``F`` (*finished*) body: the fingerprint.

A torn last record is ignored; a bad header or a corrupt record before the end raise
:class:`JobStateError` naming the file.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

from crawler import config

logger = logging.getLogger("crawler.jobstate")  # its warnings are the JOBDIR state's

MAGIC = b"DDJRNL\x00\x00"
VERSION = 1
_HEAD = struct.Struct("<8sIQd")
_REC = struct.Struct("<cI")
_CRC = struct.Struct("<I")
_SCHED = struct.Struct("<BiII")


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


def encode_header(generation: int, started: float) -> bytes:
    """The journal's header: based on snapshot ``generation``, the job started at ``started``."""
    return _HEAD.pack(MAGIC, VERSION, generation, started)


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


def encode_scheduled(rec: PendingRequest) -> bytes:
    """The framed *scheduled* record of ``rec``."""
    url, canonical = rec.url.encode(), rec.canonical_url.encode()
    body = _SCHED.pack(len(rec.fp), rec.depth, len(url), len(canonical)) + rec.fp + url + canonical
    return frame(b"S", body)


def frame(kind: bytes, body: bytes) -> bytes:
    """One record: type, body length, body and the CRC-32 of type + body."""
    return _REC.pack(kind, len(body)) + body + _CRC.pack(zlib.crc32(kind + body))

"""Rotating WARC files: unique names, a ``.open`` suffix while written, a warcinfo record first.

File name: ``{prefix}-{YYYYmmddHHMMSSfff}-{serial:05d}-{pid}~{host}.warc.gz`` (Heritrix's
pattern: prefix, time the file was opened in UTC to the millisecond, a per-process serial, the
writing process). Two workers on one host differ by pid, on two hosts by host name, a resumed
crawl by time; a file is created with ``O_EXCL`` besides, so an existing file is never written
(the serial moves on).

While written a file is named ``NAME.open``. It is closed when it holds ``max_size`` bytes or
more (so it may exceed the limit by one capture's records: a request/response pair is never
split across files) and when the crawl ends: flushed, fsynced, renamed to ``NAME``, the
directory fsynced. A crawl killed with SIGKILL leaves its current file as ``NAME.open``: every
record is one gzip member, and one page's records (with the warcinfo record in a new file's
first group) go to the kernel in one ``write`` call, so all records but possibly a torn last
group read back; a file killed between its creation and that first write is empty. A write
that fails (a full disk) is cut back to the last whole record before the error goes up, so the
file stays readable and later groups follow whole records. A power cut
can lose more: records are not fsynced one by one. Nothing renames such files later;
``warcio check`` fails on a torn tail.

The first record of each file is a ``warcinfo`` record: software, format, host, the crawl id
and the settings that shape the archive (see :class:`crawler.outputs.warc.extension.WarcWriter`).
"""

from __future__ import annotations

__floor__ = "library"

import contextlib
import logging
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from crawler.outputs.warc.records import RecordBuilder
from crawler.state.atomicfile import fsync_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from warcio.recordloader import ArcWarcRecord

logger = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
EXTENSION = ".warc.gz"


def file_name(prefix: str, opened: datetime, serial: int, pid: int, host: str) -> str:
    """The final name of a WARC file (module docstring)."""
    return f"{prefix}-{name_stamp(opened)}-{serial:05d}-{pid}~{name_host(host)}{EXTENSION}"


def name_stamp(opened: datetime) -> str:
    """``YYYYmmddHHMMSSfff`` of a file name: UTC to the millisecond."""
    return opened.strftime("%Y%m%d%H%M%S") + f"{opened.microsecond // 1000:03d}"


def name_host(host: str) -> str:
    """The host part of a file name (no ``/`` nor ``~``, never empty)."""
    return host.replace("/", "_").replace("~", "_") or "localhost"


class WarcFiles:
    """Write groups of records to rotating files in ``directory`` (module docstring).

    ``info()`` gives the warcinfo fields of a new file (called when it opens, so a crawl id
    known by then is in it). ``on_close(path, size)`` hears of every finished file.
    """

    def __init__(self, directory: Path, prefix: str, max_size: int,
                 info: Callable[[], dict[str, object]], builder: RecordBuilder | None = None,
                 on_close: Callable[[Path, int], None] | None = None) -> None:
        self.directory = directory
        self.prefix = prefix
        self.max_size = max_size
        self.info = info
        self.builder = builder or RecordBuilder()
        self.on_close = on_close
        self.serial = 0
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.path: Path | None = None  # final name of the open file
        self.size = 0
        self._fd: int | None = None
        self._head = b""
        self.closed_files: list[Path] = []

    def write(self, records: Sequence[ArcWarcRecord]) -> int:
        """Append ``records`` (one capture's) to the current file, rotating first if it is
        full; returns the bytes written. The records go in one ``write`` call each group."""
        if self._fd is not None and self.size >= self.max_size:
            self.close()
        data = b"".join(self.builder.to_bytes(r) for r in records)
        if self._fd is None:
            self._open()
        head = self._head if self.size == 0 else b""  # again after a failed first write
        self._write_all(head + data)
        return len(data)

    def close(self) -> None:
        """Finish the current file: fsync, rename ``NAME.open`` to ``NAME``, fsync the
        directory. Idempotent."""
        if self._fd is None or self.path is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self._open_path(self.path), self.path)
        fsync_dir(self.directory)
        self.closed_files.append(self.path)
        logger.info("WARC file closed: %s (%d bytes)", self.path, self.size)
        if self.on_close is not None:
            self.on_close(self.path, self.size)

    def _open(self) -> None:
        """Create the next file; its warcinfo record (``_head``) goes with the first group."""
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            name = file_name(self.prefix, datetime.now(UTC), self.serial, self.pid, self.host)
            self.serial += 1
            path = self.directory / name
            if path.exists():
                continue
            try:
                fd = os.open(self._open_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            break
        self._fd, self.path, self.size = fd, path, 0
        self._head = self.builder.to_bytes(self.builder.warcinfo(name, self.info()))

    def _write_all(self, data: bytes) -> None:
        """Append ``data``; on an OS error (a full disk) cut the file back to its last whole
        record first, so the records after a failed group still read back, then raise."""
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
                os.lseek(self._fd, self.size, os.SEEK_SET)
            raise
        self.size += len(data)

    @staticmethod
    def _open_path(path: Path) -> Path:
        return path.with_name(path.name + OPEN_SUFFIX)

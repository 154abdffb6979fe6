"""The drop log: one JSON object per dropped page, appended to ``DROPPED_LOG`` (JSON Lines).

Format (UTF-8, one object per line, ``\\n``-terminated, keys in this order)::

    {"url": ..., "reason": "exact_duplicate" | "near_duplicate", "duplicate_of": ...,
     "distance": 3, "simhash": "00ff...16 hex digits" | null,
     "duplicate_simhash": "..." | null, "time": "2026-12-02T13:20:54.123456Z", "crawl_id": 7}

A page moved to the drop log after it was stored has one more key at the end, ``"rule"``:
``"canonical"`` (the page it names canonical was kept instead) or ``"refreshed"`` (its
fingerprint, recomputed once its site's template was learned, is within k of another kept
page); see :mod:`crawler.pipelines.neardup`.

The file is opened in append mode, so successive crawls accumulate (``crawl_id`` tells them
apart). Each record is written with one ``write`` and flushed at once: a killed crawler loses at
most the line being written. :func:`read_drop_log` skips a torn last line (not JSON; a complete
object without its newline is kept) and raises :class:`DropLogError` naming the file and line
for damage anywhere else.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

from crawler.exceptions import DuplicatePage
from crawler.simhash import to_hex

__all__ = ["FIELDS", "DropLog", "DropLogError", "drop_record", "read_drop_log", "row_record"]

logger = logging.getLogger(__name__)

FIELDS = (
    "url", "reason", "duplicate_of", "distance", "simhash", "duplicate_simhash", "time",
    "crawl_id",
)  # fmt: skip


class DropLogError(ValueError):
    """A drop log line is damaged (not a torn last line)."""


def utc_iso(moment: datetime | None = None) -> str:
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def drop_record(
    exc: DuplicatePage, crawl_id: int | None = None, time: datetime | None = None
) -> dict[str, Any]:
    """The drop log object of one :class:`DuplicatePage`."""
    record = {
        "url": exc.url,
        "reason": exc.reason,
        "duplicate_of": exc.duplicate_of,
        "distance": exc.distance,
        "simhash": to_hex(exc.simhash),
        "duplicate_simhash": to_hex(exc.duplicate_simhash),
        "time": utc_iso(time),
        "crawl_id": crawl_id,
    }
    if exc.rule:
        record["rule"] = exc.rule
    return record


def row_record(row: dict[str, Any]) -> dict[str, Any]:
    """The drop log object of a ``dropped`` row (:func:`crawler.pipelines.storage.dropped_row`)."""
    moment = row.get("dropped_at")
    record = {
        "url": row["url"],
        "reason": row["reason"],
        "duplicate_of": row["duplicate_of"],
        "distance": row["distance"],
        "simhash": to_hex(row.get("simhash")),
        "duplicate_simhash": to_hex(row.get("duplicate_simhash")),
        "time": utc_iso(moment if isinstance(moment, datetime) else None),
        "crawl_id": row.get("crawl_id"),
    }
    if row.get("rule"):
        record["rule"] = row["rule"]
    return record


class DropLog:
    """Appends drop records to ``path``, one flushed line each. Opened on first write."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[str] | None = None
        self.written = 0

    def _open(self) -> IO[str]:
        if self._file is None:
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise OSError(f"DROPPED_LOG {self.path!r}: directory {parent} does not exist")
            self._file = open(self.path, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        return self._file

    def write(self, record: dict[str, Any]) -> None:
        handle = self._open()
        handle.write(json.dumps(record, ensure_ascii=False, separators=(", ", ": ")) + "\n")
        handle.flush()
        self.written += 1

    def write_drop(self, exc: DuplicatePage, crawl_id: int | None = None) -> dict[str, Any]:
        record = drop_record(exc, crawl_id)
        self.write(record)
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_drop_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every record of a drop log, in order; a torn last line is skipped with a warning."""
    name = os.fspath(path)
    with open(name, encoding="utf-8", errors="replace", newline="\n") as handle:
        pending: tuple[int, str] | None = None
        for number, line in enumerate(handle, 1):
            if pending is not None:
                yield _parse(name, *pending)
            pending = (number, line)
        if pending is None:
            return
        number, line = pending
        try:
            yield _parse(name, number, line)
        except DropLogError:
            logger.warning("%s: torn last line %d skipped (a crawl was killed?)", name, number)


def _parse(name: str, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DropLogError(f"{name} line {number}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict) or "url" not in record or "reason" not in record:
        raise DropLogError(f"{name} line {number}: not a drop record")
    return record

"""The drop log: one JSON object per dropped page, appended to ``DROPPED_LOG`` (JSON Lines).

Format (UTF-8, one object per line, ``\\n``-terminated, keys in this order)::

    {"url": ..., "reason": "exact_duplicate" | "near_duplicate", "duplicate_of": ...,
     "distance": 3, "simhash": "00ff...16 hex digits" | null,
     "duplicate_simhash": "..." | null, "time": "2026-12-02T13:20:54.123456Z", "crawl_id": 7}

A line written for a change made after the page's first line has one more key at the end,
``"rule"``: ``"canonical"`` (a stored page whose named canonical page was kept instead),
``"preferred"`` (a stored page whose preferred twin came, :mod:`crawler.dedup.preference`),
``"refreshed"`` (its fingerprint, recomputed once its site's template was learned, is within k
of another kept page), ``"repointed"`` (a dropped page whose kept page was itself dropped: it
now names the page kept instead) or ``"settled"`` (the settle step re-decided its group,
:mod:`crawler.dedup.settle`; a page it stores again has ``"reason": "kept"`` and no
``duplicate_of``). So the log replays to the table: read start to end, each URL's last line
gives its final state (:func:`replay_drop_log`).

Each record is written from one :class:`crawler.vocab.Drop` (:func:`drop_record`); a row of
the ``dropped`` table reads as one with :func:`row_drop`. Which drops reach the log, and when,
is decided by :class:`crawler.dedup.drops.DropWriter`. No Scrapy here.

The file is opened in append mode, so successive crawls accumulate (``crawl_id`` tells them
apart). Each record is written with one ``write`` and flushed at once: a killed crawler loses at
most the line being written. A write that fails (a full disk, a directory gone) raises
:class:`OSError` and leaves no torn line behind: the file is cut back to where the line began and
reopened by the next write, so a caller may retry it (:mod:`crawler.dedup.drops` does, with
``DROPPED_LOG_RETRY_*``, checked with the path by :meth:`DropLogOptions.from_settings`).
:func:`read_drop_log` skips a torn last line (not JSON; a complete
object without its newline is kept) and raises :class:`DropLogError` naming the file and line
for damage anywhere else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from crawler import config, defaults
from crawler.content.simhash import to_hex
from crawler.outputs.formats import utc_iso
from crawler.vocab import KEPT_REASON, Drop

__all__ = ["FIELDS", "DropLog", "DropLogError", "DropLogOptions", "drop_record",
           "read_drop_log", "row_drop", "row_record", "utc_iso"]  # fmt: skip

logger = logging.getLogger(__name__)

FIELDS = (
    "url", "reason", "duplicate_of", "distance", "simhash", "duplicate_simhash", "time",
    "crawl_id",
)  # fmt: skip


class DropLogError(ValueError):
    """A drop log line is damaged (not a torn last line)."""


def drop_record(
    drop: Drop, crawl_id: int | None = None, time: datetime | None = None
) -> dict[str, Any]:
    """The drop log object of one :class:`~crawler.vocab.Drop` (``time`` default: now)."""
    record = {
        "url": drop.url,
        "reason": drop.reason,
        "duplicate_of": drop.duplicate_of,
        "distance": drop.distance,
        "simhash": to_hex(drop.simhash),
        "duplicate_simhash": to_hex(drop.duplicate_simhash),
        "time": utc_iso(time),
        "crawl_id": crawl_id,
    }
    if drop.rule:
        record["rule"] = drop.rule
    return record


def row_drop(row: Mapping[str, Any]) -> Drop:
    """The :class:`~crawler.vocab.Drop` a ``dropped`` row records
    (:func:`crawler.pipelines.storage.dropped_row`, or a demoted page's row)."""
    return Drop(
        url=row["url"],
        reason=row["reason"],
        duplicate_of=row["duplicate_of"],
        distance=row["distance"],
        simhash=row.get("simhash"),
        duplicate_simhash=row.get("duplicate_simhash"),
        content_hash=row.get("content_hash"),
        rule=row.get("rule") or None,
    )


def row_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The drop log object of a ``dropped`` row: its drop, crawl and ``dropped_at`` time."""
    moment = row.get("dropped_at")
    return drop_record(row_drop(row), row.get("crawl_id"),
                       moment if isinstance(moment, datetime) else None)


@dataclass(frozen=True)
class DropLogOptions:
    """``DROPPED_LOG`` ("" = no drop log) and how a failed write of it is retried."""

    path: str = defaults.DROPPED_LOG
    retry_times: int = defaults.DROPPED_LOG_RETRY_TIMES
    retry_backoff: float = defaults.DROPPED_LOG_RETRY_BACKOFF

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> DropLogOptions:
        """``DROPPED_LOG`` and ``DROPPED_LOG_RETRY_*``, checked (the path by
        :func:`check_path`)."""
        path = str(settings.get("DROPPED_LOG", defaults.DROPPED_LOG) or "")
        if path:
            check_path(path)
        return cls(
            path,
            config.get_int(settings, "DROPPED_LOG_RETRY_TIMES",
                           defaults.DROPPED_LOG_RETRY_TIMES, lo=0, hi=100),
            config.get_float(settings, "DROPPED_LOG_RETRY_BACKOFF",
                             defaults.DROPPED_LOG_RETRY_BACKOFF, lo=0),
        )  # fmt: skip


def check_path(path: str) -> None:
    """A drop log can be appended at ``path``: not a directory, FIFO or socket (opening a FIFO
    waits for a reader forever), in an existing directory this process may write to."""
    allowed = "a file path in an existing, writable directory (not a directory, FIFO or socket)"
    parent = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError:
        raise config.SettingError("DROPPED_LOG", path, allowed) from None
    if mode is not None and (stat.S_ISDIR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise config.SettingError("DROPPED_LOG", path, allowed)
    if not os.path.isdir(parent) or not os.access(parent if mode is None else path, os.W_OK):
        raise config.SettingError("DROPPED_LOG", path, allowed)


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
        """Append one record; on :class:`OSError` no part of it stays (see the module docstring)."""
        handle = self._open()
        start = handle.tell() if handle.seekable() else None
        try:
            handle.write(json.dumps(record, ensure_ascii=False, separators=(", ", ": ")) + "\n")
            handle.flush()
        except OSError:
            self._discard(start)
            raise
        self.written += 1

    def _discard(self, start: int | None) -> None:
        """After a failed write: drop the handle (its buffer holds the failed line) and cut a
        regular file back to ``start``, so a retry does not follow a torn line."""
        handle, self._file = self._file, None
        with contextlib.suppress(OSError):
            if handle is not None:
                handle.close()
        if start is None or not os.path.isfile(self.path):
            return
        with contextlib.suppress(OSError):
            if os.path.getsize(self.path) > start:
                os.truncate(self.path, start)

    def write_drop(
        self, drop: Drop, crawl_id: int | None = None, time: datetime | None = None
    ) -> dict[str, Any]:
        """Append the record of ``drop`` (:func:`drop_record`); returns it."""
        record = drop_record(drop, crawl_id, time)
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


def replay_drop_log(records: Iterable[Mapping[str, Any]],
                    ) -> dict[tuple[int | None, str], dict[str, Any]]:
    """The final state the drop log's records give, read start to end: the last record of
    each (crawl id, URL), as the ``dropped`` table holds one row per page and crawl; a page
    stored again (a record of reason ``"kept"``) leaves in every crawl, as its rows do."""
    final: dict[tuple[int | None, str], dict[str, Any]] = {}
    crawls: dict[str, set[int | None]] = {}
    for record in records:
        url = record["url"]
        if record.get("reason") == KEPT_REASON:
            for crawl_id in crawls.pop(url, ()):
                final.pop((crawl_id, url), None)
        else:
            final[(record.get("crawl_id"), url)] = dict(record)
            crawls.setdefault(url, set()).add(record.get("crawl_id"))
    return final


def _parse(name: str, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DropLogError(f"{name} line {number}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict) or "url" not in record or "reason" not in record:
        raise DropLogError(f"{name} line {number}: not a drop record")
    return record

""":class:`Store`: the crawl database at one SQLAlchemy URL, its write side and read side."""

from __future__ import annotations

from crawler.storage.overrides import OverrideSide
from crawler.storage.read import ReadSide
from crawler.storage.settle import SettleSide


class Store(SettleSide, ReadSide, OverrideSide):
    """The crawl database at one SQLAlchemy URL.

    ``Store(url)`` does not connect; :meth:`check` (called by every other method on first use)
    connects, applies pending migrations and raises :class:`StorageError` when the database is
    unreachable or newer than this code. With ``create=False`` a missing SQLite file or a
    database without our tables is an error instead of being created (for review commands).

    The writes are :class:`crawler.storage.write.WriteSide` (with the set fingerprints of
    :class:`crawler.storage.sets.SetsSide` and the settle step of
    :class:`crawler.storage.settle.SettleSide`), the reads :class:`crawler.storage.read.ReadSide`,
    the overrides and reviews :class:`crawler.storage.overrides.OverrideSide`;
    connection, schema and errors are :class:`crawler.storage.base.StoreBase`. Methods are
    blocking: call them from a worker thread inside a crawl.
    """

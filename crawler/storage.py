"""The crawl database: SQLAlchemy models and the few queries the pipelines and commands need.

Tables (the schema is versioned by the alembic revisions in :mod:`crawler.migrations`, applied
on open; a database at a newer revision than this code is refused):

``documents``
    One row per kept page, unique on ``url`` (the URL fetched, after redirects); a re-crawl
    updates the row (``updated_at``, ``crawl_id``) instead of failing, also when it meets the
    page under another spelling: the row with the same ``canonical_url`` takes the new ``url``
    (same id) and any other row of that canonical URL is deleted, in the same transaction.
``dropped``
    One row per page dropped as a duplicate: ``reason`` (``exact_duplicate`` |
    ``near_duplicate``), ``duplicate_of`` (URL of the kept page), ``distance`` (Hamming bits),
    and the page's title and text (truncated by the pipeline, ``DROPPED_TEXT_MAX_CHARS``) so a
    decision can be explained after the crawl.
``crawls``
    One row per crawl: start, finish, finish reason, spider, seeds, the settings that shape
    dedup (JSON) and the final stats (JSON); the JOBDIR ``job`` it belongs to (every run of one
    JOBDIR shares it; NULL without JOBDIR) and its ``command`` (``crawl`` | ``parse``); and the
    order-free fingerprints of what it stored
    (:mod:`crawler.setfp`: ``url_fingerprint``/``url_count``, ``content_fingerprint``/
    ``content_count``, ``page_fingerprint``, 32 hex digits each), updated in every batch's
    transaction, so two crawls compare in O(1).
``crawl_documents``
    One row per page a crawl stored: ``(crawl_id, canonical_url)``, ``content_hash``; the
    fingerprints are its sums. A re-crawl moves ``documents`` rows to the new crawl; these rows
    keep what each crawl stored (only the crawl's own batches change them).

Fingerprints are unsigned 64-bit ints in Python and a *signed* BIGINT in the database (SQLite
refuses integers >= 2**63); :class:`Fingerprint64` converts both ways, so callers never see the
signed form. Timestamps are stored in UTC and read back timezone-aware.

Connections: one engine per process and URL, shared (reference counted) by every Store.
SQLite runs in WAL mode (readers never block the writer) with ``synchronous=FULL`` (a commit is
on disk when it returns), a 30 s busy timeout and foreign keys on; its parent directory must
exist. PostgreSQL (``postgresql+psycopg://``; ``postgresql://`` means the same) pings pooled
connections before use, so a restarted server costs one retry, and migrations take an advisory
lock, so workers starting together migrate once. (Two *processes* creating the same fresh
SQLite file at the same instant are not guarded: one fails and can simply be restarted.)

Text columns cannot hold NUL characters on PostgreSQL and unpaired surrogates on any driver:
both are removed or replaced on write; bounded columns (``content_type``...) are cut to fit.
Every driver error surfaces as :class:`StorageError` naming the URL (password masked) and what
to check. Methods are blocking: call them from a worker thread inside a crawl.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any, ClassVar

import numpy as np
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    IntegrityError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.setfp import ZERO_HEX, CrawlSets, SetFingerprint
from crawler.simhash import hamming
from crawler.simindex import content_key, url_key

logger = logging.getLogger(__name__)

_U64 = 1 << 64
_I63 = 1 << 63
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10  # a firewalled host fails in seconds, not minutes
#: Key of the PostgreSQL advisory lock held while migrating (two workers starting at once).
_MIGRATION_LOCK_KEY = 0x6465647570  # "dedup"
#: Settings recorded in ``crawls.settings``: every name with one of these prefixes, or listed.
_DEDUP_SETTING_PREFIXES = ("URLNORM_", "BLOOM_", "SIMHASH_", "TRAP_", "STORAGE_BATCH_", "DEDUP_")
_DEDUP_SETTING_NAMES = ("URLLENGTH_LIMIT", "DROPPED_TEXT_MAX_CHARS", "DEPTH_LIMIT")


def to_signed64(value: int) -> int:
    """The signed BIGINT form of an unsigned 64-bit fingerprint (``2**63`` -> ``-2**63``)."""
    if not 0 <= value < _U64:
        raise ValueError(f"fingerprint {value!r} is not an unsigned 64-bit integer")
    return value - _U64 if value >= _I63 else value


def to_unsigned64(value: int) -> int:
    """The unsigned fingerprint stored as a signed BIGINT (inverse of :func:`to_signed64`)."""
    if not -_I63 <= value < _I63:
        raise ValueError(f"stored fingerprint {value!r} is not a signed 64-bit integer")
    return value & (_U64 - 1)


class Fingerprint64(sa.types.TypeDecorator[int]):
    """Unsigned 64-bit int in Python, signed BIGINT in the database."""

    impl = sa.BigInteger
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: sa.Dialect) -> int | None:
        return None if value is None else to_signed64(int(value))

    def process_result_value(self, value: int | None, dialect: sa.Dialect) -> int | None:
        return None if value is None else to_unsigned64(int(value))


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp stored in UTC and read back timezone-aware (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | str | None, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        value = parse_time(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_time(value: datetime | str) -> datetime:
    """A UTC datetime from a datetime (naive means UTC) or an ISO 8601 string."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    def as_dict(self) -> dict[str, Any]:
        """Column values by name (fingerprints unsigned, times aware UTC datetimes)."""
        return {c.key: getattr(self, c.key) for c in sa.inspect(type(self)).column_attrs}

    def __repr__(self) -> str:
        key = getattr(self, "url", None) or getattr(self, "id", None)
        return f"<{type(self).__name__} {key!r}>"


class Crawl(Base):
    __tablename__ = "crawls"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finish_reason: Mapped[str | None] = mapped_column(sa.String(64))
    spider: Mapped[str | None] = mapped_column(sa.String(128))
    seeds: Mapped[list[str] | None] = mapped_column(sa.JSON)
    settings: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    stats: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # revision 0007: the JOBDIR job this run belongs to (crawler.jobstate.job_id; NULL without
    # JOBDIR) and the command that ran it ("crawl" | "parse"; NULL before 0007)
    job: Mapped[str | None] = mapped_column(sa.String(64))
    command: Mapped[str | None] = mapped_column(sa.String(16))
    # order-free fingerprints of what the crawl stored (crawler.setfp; revision 0005), kept
    # up to date in each batch's transaction from ``crawl_documents``
    url_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                 server_default=ZERO_HEX)
    url_count: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    content_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                     server_default=ZERO_HEX)
    content_count: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    page_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                  server_default=ZERO_HEX)

    def sets(self) -> CrawlSets:
        """The recorded fingerprints (:class:`crawler.setfp.CrawlSets`)."""
        return _crawl_sets(self.url_fingerprint, self.url_count, self.content_fingerprint,
                           self.content_count, self.page_fingerprint)


class CrawlDocument(Base):
    """One page a crawl stored (revision 0005): what its set fingerprints are sums of.

    Keyed on ``(crawl_id, canonical_url)``; ``content_hash`` as stored (NULL: none). A crawl's
    rows change only in that crawl's own batches: a later crawl that stores the page again,
    or demotes or replaces it, leaves them alone, so a finished crawl keeps what it stored.
    """

    __tablename__ = "crawl_documents"

    crawl_id: Mapped[int] = mapped_column(
        sa.BigInteger, sa.ForeignKey("crawls.id", ondelete="CASCADE"), primary_key=True)
    canonical_url: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128))


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    url: Mapped[str] = mapped_column(sa.Text, unique=True)
    canonical_url: Mapped[str] = mapped_column(sa.Text, index=True, default="")
    title: Mapped[str | None] = mapped_column(sa.Text)
    text: Mapped[str | None] = mapped_column(sa.Text)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128), index=True)
    simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    status: Mapped[int | None] = mapped_column(sa.Integer)
    content_type: Mapped[str | None] = mapped_column(sa.String(255))
    encoding: Mapped[str | None] = mapped_column(sa.String(64))
    depth: Mapped[int | None] = mapped_column(sa.Integer)
    referer: Mapped[str | None] = mapped_column(sa.Text)
    fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    crawl_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True
    )
    # derived on write (signed form of crawler.simindex.content_key / url_key): the content
    # index loads these integers instead of hashing every stored string (revision 0002)
    content_key: Mapped[int | None] = mapped_column(sa.BigInteger)
    canonical_key: Mapped[int | None] = mapped_column(sa.BigInteger)
    # the other page of the crawl this page names canonical, normalized (revision 0004)
    canonical_link: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        # covering: the index load reads these four integers without touching the page text
        sa.Index("ix_documents_keys", "id", "simhash", "content_key", "canonical_key"),
        # the shared content index finds kept pages and earlier versions here (revision 0003)
        sa.Index("ix_documents_simhash", "simhash"),
        sa.Index("ix_documents_content_key", "content_key"),
        sa.Index("ix_documents_canonical_key", "canonical_key"),
    )


class Dropped(Base):
    __tablename__ = "dropped"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    url: Mapped[str] = mapped_column(sa.Text, index=True)
    canonical_url: Mapped[str | None] = mapped_column(sa.Text)
    reason: Mapped[str] = mapped_column(sa.String(32), index=True)
    duplicate_of: Mapped[str | None] = mapped_column(sa.Text, index=True)
    distance: Mapped[int | None] = mapped_column(sa.Integer)
    simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    duplicate_simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128))
    title: Mapped[str | None] = mapped_column(sa.Text)
    text: Mapped[str | None] = mapped_column(sa.Text)
    dropped_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    crawl_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True
    )
    # a page stored first, moved here later (0004): "canonical" (the page it names came),
    # "refreshed" (its fingerprint recomputed once the template was known), "repointed"
    rule: Mapped[str | None] = mapped_column(sa.String(32))


#: Columns computed by the Store on every write (a caller's values for them are ignored).
DERIVED_COLUMNS = ("content_key", "canonical_key")
DOCUMENT_COLUMNS = tuple(c.key for c in Document.__table__.columns if c.key != "id")
DROPPED_COLUMNS = tuple(c.key for c in Dropped.__table__.columns if c.key != "id")
_TEXT_COLUMNS = frozenset(
    c.key for c in (*Document.__table__.columns, *Dropped.__table__.columns)
    if isinstance(c.type, (sa.Text, sa.String))
)
#: Bounded columns are cut to fit: PostgreSQL refuses a longer value and fails the whole batch.
_MAX_LENGTHS = {
    c.key: c.type.length
    for c in (*Document.__table__.columns, *Dropped.__table__.columns)
    if isinstance(c.type, sa.String) and not isinstance(c.type, sa.Text) and c.type.length
}


KEY_BATCH = 262_144  # rows per KeyArrays: 9 MB of arrays, about 0.2 s of fetching


@dataclass(frozen=True)
class KeyArrays:
    """A chunk of :meth:`Store.iter_key_arrays`: one entry per document, in id order.

    ``ids`` (int64), ``simhash`` (uint64, 0 where ``has_simhash`` is False), ``has_simhash``
    (bool), ``content_keys`` and ``canonical_keys`` (uint64: :func:`crawler.simindex.content_key`
    and :func:`crawler.simindex.url_key` of the stored strings).
    """

    ids: np.ndarray
    simhash: np.ndarray
    has_simhash: np.ndarray
    content_keys: np.ndarray
    canonical_keys: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[int, int, int, int]]) -> KeyArrays:
        """From ``(tagged_id, signed simhash, signed content_key, signed canonical_key)``."""
        flat = np.fromiter(chain.from_iterable(rows), np.int64, 4 * len(rows)).reshape(-1, 4)
        tagged = flat[:, 0]
        has = tagged >= 0
        return cls(
            ids=np.where(has, tagged, -tagged - 1),
            simhash=np.ascontiguousarray(flat[:, 1]).view(np.uint64),
            has_simhash=has,
            content_keys=np.ascontiguousarray(flat[:, 2]).view(np.uint64),
            canonical_keys=np.ascontiguousarray(flat[:, 3]).view(np.uint64),
        )


#: The ``crawls`` columns of the set fingerprints, in :func:`_crawl_sets`'s argument order.
SET_COLUMNS = ("url_fingerprint", "url_count", "content_fingerprint", "content_count",
               "page_fingerprint")


def _crawl_sets(url_fp: str, url_count: int, content_fp: str, content_count: int,
                page_fp: str) -> CrawlSets:
    """:class:`CrawlSets` from the five ``crawls`` columns."""
    return CrawlSets(SetFingerprint.from_hex(url_fp, url_count),
                     SetFingerprint.from_hex(content_fp, content_count),
                     SetFingerprint.from_hex(page_fp, url_count))


def _sets_columns(sets: CrawlSets) -> dict[str, Any]:
    """The five ``crawls`` columns of :class:`CrawlSets`."""
    return {"url_fingerprint": sets.urls.hex(), "url_count": sets.urls.count,
            "content_fingerprint": sets.contents.hex(), "content_count": sets.contents.count,
            "page_fingerprint": sets.pages.hex()}


class StorageError(Exception):
    """The crawl database failed; the message is one line naming the URL and what to check.

    ``transient`` is True for errors worth retrying (connection lost, server down, database
    locked) and False for errors a retry cannot fix (bad data, schema mismatch).
    """

    def __init__(self, message: str, url: str = "", transient: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.transient = transient


def mask_url(url: str | URL) -> str:
    """``url`` with its password replaced by ``***`` (also for strings that fail to parse)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def parse_url(url: str | URL) -> URL:
    """The SQLAlchemy URL; ``postgresql://`` and ``postgres://`` mean psycopg 3."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        raise StorageError(
            f"STORAGE_URL {mask_url(url)!r} is not a database URL "
            "(expected e.g. sqlite:///crawl.db or postgresql+psycopg://user@host/db)",
            mask_url(url),
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StorageError(
            f"STORAGE_URL {mask_url(parsed)!r}: only sqlite and postgresql are supported",
            mask_url(parsed),
        )
    return parsed


def _hint(url: URL) -> str:
    if url.get_backend_name() == "sqlite":
        return ("is it a SQLite file, writable and not locked by another program? "
                "check STORAGE_URL")
    return (
        f"is the server at {url.host or 'localhost'}:{url.port or 5432} running? does database "
        f"{url.database!r} exist and may user {url.username!r} use it? check STORAGE_URL"
    )


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an error (of the driver's error for a SQLAlchemy one), or
    its type's name: every one-line error message quotes its cause this way."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    return lines[0] if lines else type(orig).__name__


def wrap_error(exc: Exception, url: URL, action: str) -> StorageError:
    """A one-line :class:`StorageError` for a driver error raised while doing ``action``."""
    # A driver error is worth retrying unless the data or the schema is at fault; errors raised
    # by SQLAlchemy itself (a value its types refuse) never heal by themselves.
    transient = isinstance(exc, DBAPIError) and not isinstance(
        exc, (IntegrityError, DataError, ProgrammingError))
    hint = _hint(url) if transient else "check the data written and STORAGE_URL"
    masked = mask_url(url)
    return StorageError(f"{action} on {masked} failed: {first_line(exc)} ({hint})",
                        masked, transient)


# --- engines: one per process and URL ---------------------------------------------------------

_ENGINES: dict[str, tuple[Engine, int]] = {}
_ENGINES_LOCK = threading.Lock()
#: Pipelines open in parallel and each Store migrates on first use: on a fresh SQLite file two
#: threads would both see an empty schema and both CREATE TABLE. (PostgreSQL also takes an
#: advisory lock, for separate processes.)
_MIGRATE_LOCK = threading.Lock()


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS:d}")
        # FULL: a commit is on disk before batch_committed tells the dupefilter journal the
        # pages are done (NORMAL could lose the last commits in a power cut)
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _create_engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        memory = url.database in (None, "", ":memory:")
        engine = sa.create_engine(
            url,
            poolclass=StaticPool if memory else None,
            connect_args={"check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2,
                                connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S})
    except ModuleNotFoundError as exc:  # the driver is an extra, not installed by default
        if not (exc.name or "").startswith("psycopg"):
            raise
        from crawler.extras import install_command

        raise StorageError(f"STORAGE_URL {mask_url(url)}: PostgreSQL needs the postgres extra: "
                           f"{install_command(['postgres'])}", mask_url(url)) from None


def acquire_engine(url: URL) -> Engine:
    """The process-wide engine for ``url`` (reference counted; see :func:`release_engine`)."""
    key = url.render_as_string(hide_password=False)
    with _ENGINES_LOCK:
        engine, refs = _ENGINES.get(key) or (_create_engine(url), 0)
        _ENGINES[key] = (engine, refs + 1)
        return engine


def release_engine(url: URL) -> None:
    key = url.render_as_string(hide_password=False)
    with _ENGINES_LOCK:
        engine, refs = _ENGINES.get(key, (None, 0))
        if engine is None:
            return
        if refs <= 1:
            del _ENGINES[key]
            engine.dispose()
        else:
            _ENGINES[key] = (engine, refs - 1)


def _check_sqlite_path(url: URL, create: bool) -> None:
    database = url.database
    if database in (None, "", ":memory:") or database.startswith("file:"):
        return
    path = os.path.abspath(database)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(
            f"cannot open {mask_url(url)}: directory {parent} does not exist "
            "(create it or change STORAGE_URL)",
            mask_url(url),
        )
    if not create and not os.path.exists(path):
        raise StorageError(
            f"no crawl database at {path} (run a crawl first, or check STORAGE_URL / --db)",
            mask_url(url),
        )


def clean_text(value: Any) -> Any:
    """``value`` safe for any text column: NUL removed, unpaired surrogates replaced."""
    if not isinstance(value, str):
        return value
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (datetimes as ISO 8601, NaN and unknown types as text)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def dedup_settings(settings: SettingsLike) -> dict[str, Any]:
    """The settings that shape dedup decisions, as recorded in ``crawls.settings``."""
    names = [str(name) for name in settings]  # type: ignore[attr-defined]
    picked = {
        name: settings.get(name)
        for name in sorted(names)
        if name.startswith(_DEDUP_SETTING_PREFIXES) or name in _DEDUP_SETTING_NAMES
    }
    picked["STORAGE_URL"] = mask_url(str(settings.get("STORAGE_URL", defaults.STORAGE_URL)))
    return jsonable(picked)


def _row(row: Mapping[str, Any], columns: tuple[str, ...], kind: str) -> dict[str, Any]:
    unknown = set(row) - set(columns) - {"id"}
    if unknown:
        raise ValueError(f"unknown {kind} column(s): {', '.join(sorted(unknown))}")
    if not row.get("url"):
        raise ValueError(f"{kind} row without a url: {dict(row)!r:.200}")
    values = {c: row.get(c) for c in columns}
    for name in _TEXT_COLUMNS.intersection(values):
        value = clean_text(values[name])
        limit = _MAX_LENGTHS.get(name)
        values[name] = value[:limit] if limit and isinstance(value, str) else value
    return values


def chunked(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size`` (bounds the parameters of one ``IN`` list)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Store:
    """The crawl database at one SQLAlchemy URL.

    ``Store(url)`` does not connect; :meth:`check` (called by every other method on first use)
    connects, applies pending migrations and raises :class:`StorageError` when the database is
    unreachable or newer than this code. With ``create=False`` a missing SQLite file or a
    database without our tables is an error instead of being created (for review commands).
    """

    documents: ClassVar[sa.Table] = Document.__table__  # type: ignore[assignment]
    dropped_table: ClassVar[sa.Table] = Dropped.__table__  # type: ignore[assignment]
    crawls_table: ClassVar[sa.Table] = Crawl.__table__  # type: ignore[assignment]
    crawl_documents: ClassVar[sa.Table] = CrawlDocument.__table__  # type: ignore[assignment]

    def __init__(self, url: str | URL, *, create: bool = True) -> None:
        self.sa_url = parse_url(url)
        self.url = mask_url(self.sa_url)
        self.backend = self.sa_url.get_backend_name()
        self._create = create
        self._ready = False
        self._lock = threading.Lock()
        try:
            self.engine = acquire_engine(self.sa_url)
        except (ArgumentError, ImportError) as exc:  # e.g. an unknown +driver
            raise StorageError(f"STORAGE_URL {self.url!r}: {first_line(exc)}", self.url) from None
        self._closed = False

    @classmethod
    def from_settings(cls, settings: SettingsLike, *, create: bool = True) -> Store:
        return cls(str(settings.get("STORAGE_URL") or defaults.STORAGE_URL), create=create)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:
            raise wrap_error(exc, self.sa_url, action) from exc

    # --- schema -----------------------------------------------------------------------------

    def check(self) -> None:
        """Connect and migrate to the latest schema (once per Store; thread-safe)."""
        with self._lock:
            if self._ready:
                return
            if self.backend == "sqlite":
                _check_sqlite_path(self.sa_url, self._create)
            with _MIGRATE_LOCK, self._errors("opening the database"), \
                    self.engine.begin() as conn:
                self._migrate(conn)
            self._ready = True

    def _migrate(self, conn: sa.Connection) -> None:
        from crawler import migrations

        if self.backend == "postgresql":  # two workers starting at once migrate one at a time
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                         {"key": _MIGRATION_LOCK_KEY})
        current = migrations.current_revisions(conn)
        if not current and not self._create:
            raise StorageError(
                f"{self.url} holds no crawl database (run a crawl first, or check "
                "STORAGE_URL / --db)", self.url)
        try:
            migrations.upgrade(conn)
        except migrations.SchemaTooNewError as exc:
            raise StorageError(
                f"{self.url} has schema revision {', '.join(exc.revisions)}, newer than this "
                f"dedup-crawler (latest known: {exc.head}): upgrade dedup-crawler or use "
                "another STORAGE_URL", self.url) from None

    def schema_revision(self) -> str | None:
        """The alembic revision the database is at (None before the first migration)."""
        from crawler import migrations

        with self._errors("reading the schema version"), self.engine.connect() as conn:
            revisions = migrations.current_revisions(conn)
        return revisions[0] if revisions else None

    # --- writes -----------------------------------------------------------------------------

    def _upsert_stmt(self) -> Any:
        insert = postgresql.insert if self.backend == "postgresql" else sqlite.insert
        stmt = insert(self.documents)
        update = {c: stmt.excluded[c] for c in DOCUMENT_COLUMNS if c != "url"}
        return stmt.on_conflict_do_update(index_elements=["url"], set_=update)

    def _upsert(self, conn: sa.Connection,
                rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Upsert ``rows`` (the batch's last version of each page); returns the rows written."""
        now = utcnow()
        by_url: dict[str, dict[str, Any]] = {}
        url_of: dict[str, str] = {}  # canonical URL -> the batch's URL for it
        for row in rows:  # one statement may not touch a row twice: the last version wins
            values = _row(row, DOCUMENT_COLUMNS, "document")
            values["updated_at"] = now
            url, canonical = values["url"], values["canonical_url"] or values["url"]
            values["canonical_url"] = canonical
            chash = values["content_hash"]
            values["content_key"] = to_signed64(content_key(chash)) if chash else None
            values["canonical_key"] = to_signed64(url_key(canonical))
            earlier = by_url.get(url)
            if earlier is not None:
                url_of.pop(earlier["canonical_url"], None)
            if url_of.get(canonical, url) != url:  # a later spelling of the same page wins
                del by_url[url_of[canonical]]
            by_url[url] = values
            url_of[canonical] = url
        if by_url:  # in crawl order (ids follow it); a deadlock between workers is retried
            self._replace_spellings(conn, url_of)
            conn.execute(self._upsert_stmt(), list(by_url.values()))
        return list(by_url.values())

    def _replace_spellings(self, conn: sa.Connection, url_of: Mapping[str, str]) -> None:
        """Make each batch URL the one row of its canonical page (a re-crawl updates it).

        A page stored by an earlier crawl under another spelling (``/a?utm_source=x``, then
        ``/a``) is the same page: its row takes the new URL (keeping its id), so the upsert on
        ``url`` updates it instead of adding a second row. When the new URL has a row already,
        or several rows share the canonical URL, the surplus rows are deleted. Rows whose own
        URL is in the batch are left to the upsert. Runs inside the batch's transaction.
        """
        t = self.documents
        batch_urls = set(url_of.values())
        others: dict[str, list[int]] = {}
        for chunk in self._chunks(sorted(url_of)):
            stmt = (sa.select(t.c.id, t.c.url, t.c.canonical_url)
                    .where(self._one_of(t.c.canonical_url, chunk)).order_by(t.c.id))
            for row_id, url, canonical in conn.execute(stmt):
                if url not in batch_urls:
                    others.setdefault(canonical, []).append(row_id)
        if not others:  # the common case: one indexed query per batch
            return
        existing: set[str] = set()
        for chunk in self._chunks(sorted(url_of[c] for c in others)):
            existing.update(conn.execute(
                sa.select(t.c.url).where(self._one_of(t.c.url, chunk))).scalars())
        renames: list[dict[str, Any]] = []
        deletes: list[int] = []
        for canonical, ids in others.items():
            if url_of[canonical] in existing:
                deletes += ids
            else:
                renames.append({"row_id": ids[0], "new_url": url_of[canonical]})
                deletes += ids[1:]
        for chunk in chunked(deletes):
            conn.execute(sa.delete(t).where(t.c.id.in_(chunk)))
        if renames:
            conn.execute(sa.update(t).where(t.c.id == sa.bindparam("row_id"))
                         .values(url=sa.bindparam("new_url")), renames)
        if renames or deletes:
            logger.debug("documents: %d pages stored under another spelling renamed, %d "
                         "surplus rows deleted", len(renames), len(deletes))

    def _insert_dropped(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        now = utcnow()
        values = [_row(row, DROPPED_COLUMNS, "dropped") for row in rows]
        for value in values:
            value["dropped_at"] = value["dropped_at"] or now
        if values:
            conn.execute(sa.insert(self.dropped_table), values)
        return len(values)

    def _chunks(self, values: list[str]) -> Iterator[Sequence[str]]:
        """``values`` in one piece on PostgreSQL (one array parameter), else in slices."""
        return iter([values]) if self.backend == "postgresql" else chunked(values)

    def _one_of(self, column: sa.ColumnElement[Any], values: Sequence[str]) -> Any:
        """``column IN values``; on PostgreSQL ``= ANY(array)``, 5x faster than 100 params."""
        if self.backend == "postgresql":
            array = sa.bindparam(f"{column.key}_any", list(values),
                                 type_=postgresql.ARRAY(sa.Text))
            return column == sa.any_(array)
        return column.in_(values)

    def upsert_documents(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert or update (on ``url``) every row in one transaction; returns rows written.

        Keys are :data:`DOCUMENT_COLUMNS` (missing ones are NULL); ``simhash`` unsigned,
        ``fetched_at`` a datetime or ISO 8601 string. Within one call the last row per URL wins.
        """
        return self.write_batch(rows, [])[0]

    def insert_dropped(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Append drop records (keys :data:`DROPPED_COLUMNS`) in one transaction."""
        return self.write_batch([], rows)[1]

    def write_batch(
        self, documents: Sequence[Mapping[str, Any]], dropped: Sequence[Mapping[str, Any]],
        demotions: Sequence[dict[str, Any]] = (),
    ) -> tuple[int, int]:
        """Upsert ``documents``, append ``dropped``, apply ``demotions`` (:meth:`_demote`) and
        update the crawls' set fingerprints (:meth:`_track_sets`) in ONE transaction: all or
        nothing. Returns documents and drop rows written."""
        self.check()
        with self._errors("writing a batch"), self.engine.begin() as conn:
            stored = self._upsert(conn, documents)
            done = len(stored), self._insert_dropped(conn, dropped)
            removed = self._demote(conn, demotions)
            self._track_sets(conn, stored, removed)
            return done

    def _demote(self, conn: sa.Connection,
                demotions: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
        """Move stored pages to ``dropped``: each was kept first and turned out a duplicate
        later (the page it names canonical came, or its refreshed fingerprint matched;
        :mod:`crawler.pipelines.neardup`).

        A demotion names the stored page (``url``), the page it duplicates (``duplicate_of``,
        ``duplicate_simhash``, ``duplicate_content_hash``), ``reason``, ``distance``,
        ``crawl_id``, ``rule`` and ``max_chars`` (text kept). Its ``documents`` row is deleted
        and a ``dropped`` row written from it; drop rows that named it as their kept page now
        name ``duplicate_of`` instead (distance recomputed from the two SimHashes, ``rule``
        ``"repointed"``). Each demotion gets ``row``: the drop row written, or None when the
        page was not stored (a later batch of its own deleted or renamed it). Returns
        ``(crawl_id, canonical_url)`` of each page removed, for the demoting crawl's sets."""
        t, d = self.documents, self.dropped_table
        now = utcnow()
        removed: list[tuple[int, str]] = []
        for demotion in demotions:
            demotion["row"] = None
            found = conn.execute(sa.select(t).where(t.c.url == demotion["url"])).mappings().first()
            if found is None:
                continue
            conn.execute(sa.delete(t).where(t.c.id == found["id"]))
            text = found["text"]
            limit = int(demotion.get("max_chars") or 0)
            row = {
                "url": found["url"], "canonical_url": found["canonical_url"],
                "reason": demotion["reason"], "duplicate_of": demotion["duplicate_of"],
                "distance": demotion["distance"], "simhash": found["simhash"],
                "duplicate_simhash": demotion.get("duplicate_simhash"),
                "content_hash": found["content_hash"], "title": found["title"],
                "text": text[:limit] if limit and text else None, "dropped_at": now,
                "crawl_id": demotion.get("crawl_id"), "rule": demotion.get("rule"),
            }  # fmt: skip
            self._insert_dropped(conn, [row])
            demotion["row"] = row
            self._repoint(conn, d, found["url"], demotion)
            if demotion.get("crawl_id") is not None:
                removed.append((int(demotion["crawl_id"]),
                                found["canonical_url"] or found["url"]))
        return removed

    @staticmethod
    def _repoint(conn: sa.Connection, d: sa.Table, old: str, new: Mapping[str, Any]) -> None:
        """Drop rows naming ``old`` as their kept page name ``new["duplicate_of"]`` instead."""
        simhash = new.get("duplicate_simhash")
        chash = new.get("duplicate_content_hash")
        rows = conn.execute(sa.select(d.c.id, d.c.simhash, d.c.content_hash)
                            .where(d.c.duplicate_of == old)).all()
        updates = []
        for row_id, own, own_hash in rows:
            if chash and own_hash == chash:
                reason, distance = "exact_duplicate", 0
            elif own is not None and simhash is not None:
                reason = "near_duplicate"
                distance = hamming(int(own), int(simhash))
            else:
                reason, distance = "near_duplicate", None
            updates.append({"row_id": row_id, "new_of": new["duplicate_of"], "new_reason": reason,
                            "new_rule": "repointed", "new_distance": distance,
                            "new_simhash": simhash})  # fmt: skip
        if updates:
            conn.execute(sa.update(d).where(d.c.id == sa.bindparam("row_id")).values(
                duplicate_of=sa.bindparam("new_of"), reason=sa.bindparam("new_reason"),
                distance=sa.bindparam("new_distance"), rule=sa.bindparam("new_rule"),
                duplicate_simhash=sa.bindparam("new_simhash", type_=Fingerprint64())), updates)

    # --- set fingerprints (crawler.setfp; revision 0005) ---------------------------------------

    def _track_sets(self, conn: sa.Connection, stored: Sequence[Mapping[str, Any]],
                    removed: Sequence[tuple[int, str]]) -> None:
        """Keep ``crawl_documents`` and the crawls' set fingerprints in step with a batch.

        A stored page joins its crawl's rows; one the crawl had stored before is updated (its
        old content hash leaves the sums, the new one joins). A demoted page leaves the rows of
        the crawl that demoted it. Then each crawl's change is added to its ``crawls`` row,
        read under a row lock at the end of the transaction (``FOR NO KEY UPDATE`` on
        PostgreSQL, which does not wait for the key-share locks other workers' foreign keys
        hold on the row; SQLite's writer already holds the database), so workers writing
        batches of one crawl at once wait only for each other's last statement. A crawl's rows
        are read only by statements that lock them (insert, ``FOR UPDATE``, delete returning),
        so two transactions never both count one page.
        """
        pages: dict[int, dict[str, str | None]] = {}
        for row in stored:
            if row.get("crawl_id") is not None:
                pages.setdefault(int(row["crawl_id"]), {})[row["canonical_url"]] = \
                    row["content_hash"]
        changes = {crawl_id: self._join_crawl(conn, crawl_id, members)
                   for crawl_id, members in pages.items()}
        m = self.crawl_documents
        for crawl_id, canonical in removed:
            gone = conn.execute(
                sa.delete(m).where(m.c.crawl_id == crawl_id, m.c.canonical_url == canonical)
                .returning(m.c.content_hash)).first()
            if gone is not None:
                changes[crawl_id] = changes.get(crawl_id, CrawlSets()).removed(canonical, gone[0])
        for crawl_id in sorted(changes):  # one lock order for every writer
            if changes[crawl_id]:
                self._add_to_crawl(conn, crawl_id, changes[crawl_id])

    def _join_crawl(self, conn: sa.Connection, crawl_id: int,
                    members: Mapping[str, str | None]) -> CrawlSets:
        """Write ``canonical_url -> content_hash`` into the crawl's rows; returns the change."""
        m = self.crawl_documents
        insert = (postgresql.insert if self.backend == "postgresql" else sqlite.insert)(m)
        insert_new = insert.on_conflict_do_nothing(
            index_elements=["crawl_id", "canonical_url"]).returning(m.c.canonical_url)
        change = CrawlSets()
        todo = sorted(members)  # rows are locked in this order by every writer
        while todo:
            params = [{"crawl_id": crawl_id, "canonical_url": url, "content_hash": members[url]}
                      for url in todo]
            new = set(conn.execute(insert_new, params).scalars())
            for url in new:
                change = change.stored(url, members[url])
            old: dict[str, str | None] = {}
            for chunk in self._chunks([url for url in todo if url not in new]):
                stmt = (sa.select(m.c.canonical_url, m.c.content_hash)
                        .where(m.c.crawl_id == crawl_id, self._one_of(m.c.canonical_url, chunk))
                        .order_by(m.c.canonical_url).with_for_update())
                old.update((url, chash) for url, chash in conn.execute(stmt))
            changed = [url for url in sorted(old) if old[url] != members[url]]
            for url in changed:
                change = change.removed(url, old[url]).stored(url, members[url])
            updates = [{"k": url, "h": members[url]} for url in changed]
            if updates:
                conn.execute(sa.update(m).where(m.c.crawl_id == crawl_id,
                                                m.c.canonical_url == sa.bindparam("k"))
                             .values(content_hash=sa.bindparam("h")), updates)
            # a row that was there when inserting and gone when locked was removed meanwhile
            # by another transaction (which counted it out): insert it again
            todo = [url for url in todo if url not in new and url not in old]
        return change

    def _add_to_crawl(self, conn: sa.Connection, crawl_id: int, change: CrawlSets) -> None:
        c = self.crawls_table
        stmt = (sa.select(*(c.c[name] for name in SET_COLUMNS))
                .where(c.c.id == crawl_id).with_for_update(key_share=True))
        row = conn.execute(stmt).first()
        if row is None:  # no such crawl: the rows' foreign key has refused the batch already
            return
        sets = _crawl_sets(*row) + change
        conn.execute(sa.update(c).where(c.c.id == crawl_id).values(_sets_columns(sets)))

    def crawl_sets(self, crawl_id: int) -> CrawlSets | None:
        """The set fingerprints recorded for a crawl (one row read), None for an unknown id."""
        c = self.crawls_table
        stmt = sa.select(*(c.c[name] for name in SET_COLUMNS)).where(c.c.id == crawl_id)
        self.check()
        with self._errors("reading a crawl's fingerprints"), self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _crawl_sets(*row)

    def iter_crawl_pages(self, crawl_id: int, batch_size: int = 50_000,
                         ) -> Iterator[list[tuple[str, str | None]]]:
        """Lists of ``(canonical_url, content_hash)`` of the pages a crawl stored (its
        ``crawl_documents`` rows: what its set fingerprints sum), in no particular order."""
        m = self.crawl_documents
        stmt = sa.select(m.c.canonical_url, m.c.content_hash).where(m.c.crawl_id == crawl_id)
        self.check()
        with self._errors("reading a crawl's pages"), self.engine.connect() as conn:
            cursor = self._raw_cursor(conn, stmt)
            try:
                while part := cursor.fetchmany(batch_size):
                    yield [(url, chash) for url, chash in part]
            finally:
                cursor.close()

    def recount_sets(self, crawl_id: int) -> CrawlSets:
        """A crawl's set fingerprints computed from scratch from its rows (a full read; what
        :meth:`crawl_sets` must equal)."""
        return sum((CrawlSets.of(part) for part in self.iter_crawl_pages(crawl_id)), CrawlSets())

    def start_crawl(
        self, spider: str, seeds: list[str] | None = None,
        settings: Mapping[str, Any] | None = None, *, job: str | None = None,
        command: str | None = None,
    ) -> int:
        """Record a new crawl; returns its id. ``job``: the JOBDIR job id of the run (None
        without JOBDIR); ``command``: ``"crawl"`` or ``"parse"``."""
        self.check()
        row = {"spider": spider, "seeds": jsonable(list(seeds or [])),
               "settings": jsonable(dict(settings or {})), "started_at": utcnow(),
               "job": job, "command": command}
        with self._errors("recording the crawl start"), self.engine.begin() as conn:
            result = conn.execute(sa.insert(Crawl).returning(Crawl.id), row)
            return int(result.scalar_one())

    def finish_crawl(self, crawl_id: int, reason: str, stats: Mapping[str, Any]) -> None:
        """Record the finish time, reason and final stats (made JSON-safe) of a crawl."""
        self.check()
        values = {"finished_at": utcnow(), "finish_reason": reason, "stats": jsonable(stats)}
        with self._errors("recording the crawl finish"), self.engine.begin() as conn:
            conn.execute(sa.update(Crawl).where(Crawl.id == crawl_id).values(values))

    # --- reads ------------------------------------------------------------------------------

    def iter_fingerprint_batches(
        self, batch_size: int = 50_000, crawl_id: int | None = None
    ) -> Iterator[list[tuple[str, str, str | None, int | None]]]:
        """Lists of ``(url, canonical_url, content_hash, simhash)`` for stored documents.

        Streams in insertion order (a server-side cursor on PostgreSQL); ``simhash`` unsigned or
        None. Rows come straight from the DBAPI cursor, skipping SQLAlchemy's per-row result
        processing: about 3x faster, which is what keeps a 10**7-page index load in seconds.
        """
        self.check()
        t = self.documents
        raw = sa.type_coerce(t.c.simhash, sa.BigInteger)  # the signed form, converted below
        stmt = sa.select(t.c.url, t.c.canonical_url, t.c.content_hash, raw).order_by(t.c.id)
        if crawl_id is not None:
            stmt = stmt.where(t.c.crawl_id == crawl_id)
        mask = _U64 - 1
        with self._errors("reading fingerprints"), self.engine.connect() as conn:
            cursor = self._raw_cursor(conn, stmt)
            try:
                while part := cursor.fetchmany(batch_size):
                    yield [(u, c, h, None if s is None else s & mask) for u, c, h, s in part]
            finally:
                cursor.close()

    def _raw_cursor(self, conn: sa.Connection, stmt: Any) -> Any:
        """A DBAPI cursor executing ``stmt`` (bound parameters), server-side on PostgreSQL."""
        compiled = stmt.compile(dialect=conn.dialect)
        params: Any = compiled.construct_params()
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup or ())
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        if self.backend == "postgresql":
            cursor = dbapi.cursor(name=f"dedup_fp_{id(conn):x}")  # streams, memory bounded
        else:
            cursor = dbapi.cursor()
        cursor.execute(str(compiled), params)
        return cursor

    def iter_key_arrays(self, batch_size: int = KEY_BATCH) -> Iterator[KeyArrays]:
        """What the content index needs of every stored document, as numpy arrays in chunks.

        Rows with a content hash only (nothing can duplicate a page without one), in id order,
        at most ``batch_size`` per :class:`KeyArrays`. Four integers per row and no string: on
        SQLite they come from the covering index ``ix_documents_keys``, on PostgreSQL from a
        server-side cursor, with no per-row work in Python beyond the driver's tuple. A NULL
        SimHash travels as the id's sign (``-id - 1``; ids are never negative), so the query
        stays four columns wide.
        """
        self.check()
        t = self.documents
        raw_simhash = sa.type_coerce(t.c.simhash, sa.BigInteger)
        tagged_id = sa.case((t.c.simhash.is_(None), -t.c.id - 1), else_=t.c.id)
        stmt = (sa.select(tagged_id, sa.func.coalesce(raw_simhash, 0), t.c.content_key,
                          t.c.canonical_key)
                .where(t.c.content_key.is_not(None)).order_by(t.c.id))
        with self._errors("reading content keys"), self.engine.connect() as conn:
            cursor = self._raw_cursor(conn, stmt)
            try:
                while part := cursor.fetchmany(batch_size):
                    yield KeyArrays.from_rows(part)
            finally:
                cursor.close()

    def document_urls(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """``id -> (url, canonical_url)`` of the given documents (missing ids are absent)."""
        self.check()
        t = self.documents
        found: dict[int, tuple[str, str]] = {}
        with self._errors("reading document URLs"), self.engine.connect() as conn:
            for chunk in chunked(sorted({int(i) for i in ids})):
                stmt = sa.select(t.c.id, t.c.url, t.c.canonical_url).where(t.c.id.in_(chunk))
                for row_id, url, canonical in conn.execute(stmt):
                    found[int(row_id)] = (url, canonical or url)
        return found

    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None, str] | None:
        """``(url, canonical_url, simhash, canonical_link or "")`` of the latest stored page
        whose SimHash (``kind`` ``"s"``) or content key (``"x"``,
        :func:`crawler.simindex.content_key`) is ``key`` (unsigned), None when none is: how the
        shared content index names a kept page."""
        t = self.documents
        column = sa.type_coerce(t.c.simhash, sa.BigInteger) if kind == "s" else t.c.content_key
        stmt = (sa.select(t.c.url, t.c.canonical_url, sa.type_coerce(t.c.simhash, sa.BigInteger),
                          t.c.canonical_link)
                .where(column == to_signed64(key)).order_by(t.c.id.desc()).limit(1))
        self.check()
        with self._errors("reading a kept page"), self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        if row is None:
            return None
        url, canonical, simhash, link = row
        simhash = None if simhash is None else to_unsigned64(simhash)
        return url, canonical or url, simhash, link or ""

    def canonical_link(self, url: str) -> str | None:
        """The canonical URL the stored page fetched at ``url`` names (``""``: none), None
        when no page is stored at ``url``."""
        t = self.documents
        stmt = sa.select(t.c.canonical_link).where(t.c.url == url).limit(1)
        self.check()
        with self._errors("reading a page's canonical link"), self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else (row[0] or "")

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None:
        """``(simhash, content_key)`` (unsigned, or None) of the latest stored page whose
        canonical key (:func:`crawler.simindex.url_key`) is ``canonical_key``; None if none."""
        t = self.documents
        stmt = (sa.select(sa.type_coerce(t.c.simhash, sa.BigInteger), t.c.content_key)
                .where(t.c.canonical_key == to_signed64(canonical_key))
                .order_by(t.c.id.desc()).limit(1))
        self.check()
        with self._errors("reading a page's stored version"), self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        if row is None:
            return None
        simhash, ckey = row
        return (None if simhash is None else to_unsigned64(simhash),
                None if ckey is None else to_unsigned64(ckey))

    def iter_fingerprints(
        self, crawl_id: int | None = None
    ) -> Iterator[tuple[str, str, str | None, int | None]]:
        """Every stored document as ``(url, canonical_url, content_hash, simhash_or_None)``."""
        for batch in self.iter_fingerprint_batches(crawl_id=crawl_id):
            yield from batch

    def _session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def _scalar(self, stmt: Any, action: str) -> Any:
        self.check()
        with self._errors(action), self._session() as session:
            return session.scalar(stmt)

    def _all(self, stmt: Any, action: str) -> list[Any]:
        self.check()
        with self._errors(action), self._session() as session:
            return list(session.scalars(stmt))

    def count_documents(self, crawl_id: int | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(Document)
        if crawl_id is not None:
            stmt = stmt.where(Document.crawl_id == crawl_id)
        return int(self._scalar(stmt, "counting documents"))

    def documents_of_origin(
        self, origin: str, since: datetime, limit: int
    ) -> list[tuple[str, str, str | None, int | None, str]]:
        """The ``limit`` newest documents fetched since ``since`` whose canonical URL is on
        ``origin`` (``scheme://host[:port]``, as normalized: lower case, no default port),
        oldest first, as ``(url, canonical_url, content_hash, simhash, text)``. One range scan
        of the ``canonical_url`` index in byte order: exact on SQLite and on a PostgreSQL
        database with the C collation; under a linguistic collation (``en_US``) some documents
        may be missed."""
        self.check()
        cols = (Document.id, Document.url, Document.canonical_url, Document.content_hash,
                Document.simhash, Document.text)  # fmt: skip
        low, high = f"{origin}/", f"{origin}0"  # "/" then the path; "0" sorts after "/"
        stmt = (sa.select(*cols)
                .where(Document.canonical_url >= low, Document.canonical_url < high,
                       Document.fetched_at >= since)
                .order_by(Document.id.desc()).limit(limit))  # fmt: skip
        with self._errors("reading an origin's documents"), self._session() as session:
            rows = session.execute(stmt).all()
        return [(r.url, r.canonical_url, r.content_hash, r.simhash, r.text or "")
                for r in sorted(rows, key=lambda r: r.id)]  # fmt: skip

    def document_by_url(self, url: str) -> Document | None:
        """The stored page fetched at ``url``, else the latest one with that canonical URL."""
        stmt = (sa.select(Document).where(sa.or_(Document.url == url,
                                                 Document.canonical_url == url))
                .order_by((Document.url == url).desc(), Document.id.desc()).limit(1))
        return self._scalar(stmt, "reading a document")

    @staticmethod
    def _dropped_where(
        *, crawl_id: int | None = None, reason: str | None = None, host: str | None = None,
        min_distance: int | None = None, max_distance: int | None = None,
        since: datetime | str | None = None,
    ) -> list[Any]:
        conds: list[Any] = []
        if crawl_id is not None:
            conds.append(Dropped.crawl_id == crawl_id)
        if reason:
            conds.append(Dropped.reason == reason)
        if host:
            name = _like_escape(host.strip().lower().rstrip("."))
            conds.append(sa.or_(*(
                Dropped.url.like(f"{scheme}://{name}{end}%", escape="\\")
                for scheme in ("http", "https") for end in ("/", ":")
            )))
        if min_distance is not None:
            conds.append(Dropped.distance >= min_distance)
        if max_distance is not None:
            conds.append(Dropped.distance <= max_distance)
        if since is not None:
            conds.append(Dropped.dropped_at >= parse_time(since))
        return conds

    def dropped(
        self, crawl_id: int | None = None, *, reason: str | None = None,
        host: str | None = None, min_distance: int | None = None,
        max_distance: int | None = None, since: datetime | str | None = None,
        limit: int | None = None,
    ) -> list[Dropped]:
        """Drop records matching every given filter, newest first.

        ``host`` matches the dropped URL's host exactly (any port, http or https); ``since``
        is a datetime or ISO 8601 string (naive means UTC); ``limit`` None means all.
        """
        stmt = (sa.select(Dropped)
                .where(*self._dropped_where(crawl_id=crawl_id, reason=reason, host=host,
                                            min_distance=min_distance,
                                            max_distance=max_distance, since=since))
                .order_by(Dropped.dropped_at.desc(), Dropped.id.desc()))
        if limit is not None:
            stmt = stmt.limit(limit)
        return self._all(stmt, "reading dropped pages")

    def count_dropped(self, crawl_id: int | None = None, **filters: Any) -> int:
        """How many drop records :meth:`dropped` would return without a limit."""
        stmt = (sa.select(sa.func.count()).select_from(Dropped)
                .where(*self._dropped_where(crawl_id=crawl_id, **filters)))
        return int(self._scalar(stmt, "counting dropped pages"))

    def dropped_by_url(self, url: str) -> Dropped | None:
        """The latest drop record of ``url`` (matched on url, then canonical_url)."""
        stmt = (sa.select(Dropped).where(sa.or_(Dropped.url == url,
                                                Dropped.canonical_url == url))
                .order_by((Dropped.url == url).desc(), Dropped.id.desc()).limit(1))
        return self._scalar(stmt, "reading a dropped page")

    def crawl(self, crawl_id: int) -> Crawl | None:
        return self._scalar(sa.select(Crawl).where(Crawl.id == crawl_id), "reading a crawl")

    def latest_crawl(self) -> Crawl | None:
        return self._scalar(sa.select(Crawl).order_by(Crawl.id.desc()).limit(1),
                            "reading the latest crawl")

    def crawls(self) -> list[Crawl]:
        """Every crawl, newest first."""
        return self._all(sa.select(Crawl).order_by(Crawl.id.desc()), "reading crawls")

    def close(self) -> None:
        """Release this Store's hold on the shared engine (idempotent)."""
        if not self._closed:
            self._closed = True
            release_engine(self.sa_url)


def check_storage(settings: SettingsLike) -> None:
    """Connect to ``STORAGE_URL`` and migrate, before a crawl starts.

    Raises :class:`StorageError` with a one-line message (URL masked, what to check).
    """
    store = Store.from_settings(settings)
    try:
        store.check()
    finally:
        store.close()


def validate(settings: SettingsLike) -> None:
    """Check the storage settings (no connection; see :func:`check_storage`)."""
    config.get_int(settings, "STORAGE_BATCH_SIZE", defaults.STORAGE_BATCH_SIZE, lo=1)
    config.get_float(settings, "STORAGE_BATCH_SECONDS", defaults.STORAGE_BATCH_SECONDS, lo=0,
                     open_interval=True)
    config.get_int(settings, "DROPPED_TEXT_MAX_CHARS", defaults.DROPPED_TEXT_MAX_CHARS, lo=0)
    config.get_int(settings, "STORAGE_RETRY_TIMES", defaults.STORAGE_RETRY_TIMES, lo=0, hi=100)
    config.get_float(settings, "STORAGE_RETRY_BACKOFF", defaults.STORAGE_RETRY_BACKOFF, lo=0)
    url = str(settings.get("STORAGE_URL") or defaults.STORAGE_URL)
    try:
        parse_url(url)
    except StorageError:
        raise config.SettingError(
            "STORAGE_URL", mask_url(url),
            "a SQLAlchemy URL such as sqlite:///crawl.db or postgresql+psycopg://user@host/db",
        ) from None


config.register(validate)

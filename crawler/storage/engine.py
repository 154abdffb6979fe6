"""Engines and their errors: URL parsing and masking, one engine per process and URL.

Every driver error surfaces as :class:`StorageError`: one line naming the URL (password masked)
and what to check, and whether a retry may help. SQLite runs in WAL mode (readers never block the
writer) with ``synchronous=FULL`` (a commit is on disk when it returns), a 30 s busy timeout,
foreign keys on, a page cache of :data:`SQLITE_CACHE_KIB` per connection, temporary storage in
memory and a checkpoint every :data:`SQLITE_WAL_AUTOCHECKPOINT` WAL pages (each constant says
why); its parent directory must exist. PostgreSQL (``postgresql+psycopg://``;
``postgresql://`` means the same) pings pooled connections before use, so a restarted server
costs one retry.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DataError, DBAPIError, IntegrityError, ProgrammingError
from sqlalchemy.pool import StaticPool

from crawler.outputs import formats

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Page cache of each SQLite connection, KiB (SQLite's default: 2,000). A crawl's batch (100
#: pages when this was measured, 500 since) changes a leaf page per page in each of seven
#: random-key indexes; at 2 MiB they no longer fit by 10^4 pages and each batch spills and
#: re-reads them (``bench.storagescale``). Filled only as pages are read: a connection that
#: reads little holds little.
SQLITE_CACHE_KIB = 65_536
#: WAL pages written before a commit copies them into the database file (SQLite's default:
#: 1,000; a batch writes ~700 once the indexes are large): a page changed by several batches in
#: between is copied once. The WAL file grows to about this many 4 KiB pages (40 MiB); the last
#: connection to close copies and removes it.
SQLITE_WAL_AUTOCHECKPOINT = 10_000
PG_CONNECT_TIMEOUT_S = 10  # a firewalled host fails in seconds, not minutes


class StorageError(Exception):
    """The crawl database failed; the message is one line naming the URL and what to check.

    ``transient`` is True for errors worth retrying (connection lost, server down, database
    locked) and False for errors a retry cannot fix (bad data, schema mismatch).
    """

    #: What a command exits with when this error stops it (2: a usage error, in subclasses).
    exit_code = 1

    def __init__(self, message: str, url: str = "", transient: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.transient = transient


def mask_url(url: str | URL) -> str:
    """``url`` with its secrets replaced by ``***`` by the project's one rule,
    :func:`crawler.outputs.formats.mask_url` (the user info's password and password-like query
    parameters such as ``?password=``); also for strings that fail to parse."""
    if isinstance(url, URL):
        # SQLAlchemy's own hide_password keeps ``?password=``: render in full, then mask.
        return formats.mask_url(url.render_as_string(hide_password=False))
    return formats.mask_url(url)


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


def hint(url: URL) -> str:
    """What to check when the database at ``url`` cannot be reached."""
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
    advice = hint(url) if transient else "check the data written and STORAGE_URL"
    masked = mask_url(url)
    return StorageError(f"{action} on {masked} failed: {first_line(exc)} ({advice})",
                        masked, transient)


# --- engines: one per process and URL ---------------------------------------------------------

_ENGINES: dict[str, tuple[Engine, int]] = {}
_ENGINES_LOCK = threading.Lock()
#: Pipelines open in parallel and each Store migrates on first use: on a fresh SQLite file two
#: threads would both see an empty schema and both CREATE TABLE. (PostgreSQL also takes an
#: advisory lock, for separate processes.)
MIGRATE_LOCK = threading.Lock()


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:  # per connection; WAL mode is a property of the file (enable_wal)
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS:d}")
        # FULL: a commit is on disk before batch_committed tells the dupefilter journal the
        # pages are done (NORMAL could lose the last commits in a power cut)
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB:d}")
        # MEMORY: a statement writing many rows (a batch's crawl_documents insert) keeps its
        # statement journal in memory instead of spilling it past 64 KiB to a temporary file
        # written and deleted per batch. Temporary tables and sorts live in memory too: none of
        # our queries sorts more than a slice of the rows without an index.
        cursor.execute("PRAGMA temp_store=MEMORY")
        cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_AUTOCHECKPOINT:d}")
    finally:
        cursor.close()


def enable_wal(conn: sa.Connection) -> None:
    """Put the SQLite database in WAL mode (readers never block the writer). The mode is kept
    in the file, so this runs once per open, after the database is known to be ours: switching
    rewrites the file's header (:mod:`crawler.storage.ownership`)."""
    conn.exec_driver_sql("PRAGMA journal_mode=WAL")


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
    from crawler.storage.tables import add_postgresql_options

    add_postgresql_options()
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


def check_sqlite_path(url: URL, create: bool) -> None:
    """Refuse a SQLite file whose directory is missing, or (``create`` False) the file itself."""
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


# --- a PostgreSQL database that does not exist yet ----------------------------------------------

#: SQLSTATE of "database ... does not exist" (``invalid_catalog_name``).
MISSING_DATABASE = "3D000"


def missing_database(exc: BaseException | None) -> bool:
    """Whether ``exc`` (a :class:`StorageError`'s cause) says the PostgreSQL database in the URL
    does not exist."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    # at connect time libpq gives no SQLSTATE, only the server's words
    return (getattr(orig, "sqlstate", None) == MISSING_DATABASE
            or ('database "' in str(orig) and '" does not exist' in str(orig)))


def create_database(url: URL) -> bool:
    """``CREATE DATABASE`` for PostgreSQL URL ``url``, connected to the server's ``postgres``
    database with the same credentials, as a SQLite file is created on first use; True when
    this call created it (False: another process did meanwhile). Raises StorageError (one
    line: no right to create databases, say) naming the URL masked."""
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT",
                             poolclass=sa.pool.NullPool)
    name = str(url.database or "")
    try:
        with admin.connect() as conn:
            found = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                 {"n": name}).scalar()
            if found:
                return False
            quoted = conn.dialect.identifier_preparer.quote(name)
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
            return True
    except sa.exc.SQLAlchemyError as exc:
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == "42P04":  # created meanwhile
            return False
        raise StorageError(f"database {name!r} does not exist and could not be created on "
                           f"{mask_url(url)}: {first_line(exc)} (create it: createdb {name}; "
                           "or set STORAGE_URL)", mask_url(url)) from None
    finally:
        admin.dispose()

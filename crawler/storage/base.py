"""What every side of the Store shares: the URL and engine, schema migration, error wrapping
and the small query helpers (:class:`StoreBase`)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Self

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from crawler import defaults
from crawler.config import SettingsLike
from crawler.storage.engine import (
    MIGRATE_LOCK,
    StorageError,
    acquire_engine,
    check_sqlite_path,
    create_database,
    enable_wal,
    first_line,
    mask_url,
    missing_database,
    parse_url,
    release_engine,
    wrap_error,
)
from crawler.storage.ownership import read_only_error, refuse_foreign, refuse_read_only
from crawler.storage.rows import chunked
from crawler.storage.tables import crawl_documents, crawls, documents, dropped

#: SQLite has ``json_each`` built in from 3.38 (:meth:`StoreBase._one_of`).
SQLITE_JSON = sqlite3.sqlite_version_info >= (3, 38)
#: Values in one JSON parameter (SQLite's ``IN (SELECT value FROM json_each(?))``).
JSON_CHUNK = 20_000
#: Fewer values than this are bound one parameter each (quicker for a few: 5 values 0.7x).
JSON_FROM = 200

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

logger = logging.getLogger(__name__)

#: Key of the PostgreSQL advisory lock held while migrating (two workers starting at once).
MIGRATION_LOCK_KEY = 0x6465647570  # "dedup"


class StoreBase:
    """The crawl database at one SQLAlchemy URL: connection, schema and query helpers.

    ``StoreBase(url)`` does not connect; :meth:`check` (called by every other method on first
    use) connects, applies pending migrations and raises :class:`StorageError` when the database
    is unreachable or newer than this code. With ``create=False`` a missing SQLite file or a
    database without our tables is an error instead of being created (for review commands).
    """

    documents: ClassVar[sa.Table] = documents
    dropped_table: ClassVar[sa.Table] = dropped
    crawls_table: ClassVar[sa.Table] = crawls
    crawl_documents: ClassVar[sa.Table] = crawl_documents

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
    def from_settings(cls, settings: SettingsLike, *, create: bool = True) -> Self:
        return cls(str(settings.get("STORAGE_URL") or defaults.STORAGE_URL), create=create)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release this Store's hold on the shared engine (idempotent)."""
        if not self._closed:
            self._closed = True
            release_engine(self.sa_url)

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except SQLAlchemyError as exc:
            raise wrap_error(exc, self.sa_url, action) from exc

    # --- schema -----------------------------------------------------------------------------

    def check(self) -> None:
        """Connect and migrate to the latest schema (once per Store; thread-safe).

        Refuses another program's database before writing anything, and (``create`` True) a
        read-only one: :mod:`crawler.storage.ownership`.
        """
        with self._lock:
            if self._ready:
                return
            if self.backend == "sqlite":
                check_sqlite_path(self.sa_url, self._create)
            try:
                self._open_and_migrate()
            except StorageError as exc:  # a migration refused by a read-only database, too
                error = read_only_error(exc.__cause__ or exc, self.sa_url)
                if error is None or not self._create:
                    raise
                raise error from None
            self._ready = True

    def _open_and_migrate(self) -> None:
        """Migrate (under the process's lock); a PostgreSQL database that does not exist is
        created first when this Store creates (``create``: a crawl, as SQLite's file is)."""
        for attempt in (1, 2):
            try:
                with MIGRATE_LOCK, self._errors("opening the database"):
                    with self.engine.begin() as conn:
                        self._migrate(conn)
                    if self._create:  # a crawl must fail here, not at its first write
                        refuse_read_only(self.engine, self.sa_url)
                return
            except StorageError as exc:
                if attempt == 2 or not self._create or not missing_database(exc.__cause__):
                    raise
            if create_database(self.sa_url):
                logger.info("Created database %r on %s", self.sa_url.database,
                            mask_url(self.sa_url))

    def _migrate(self, conn: sa.Connection) -> None:
        # alembic is imported only when the schema is not at the head (one query says so)
        from crawler.storage.migrations import (
            SchemaTooNewError,
            at_head,
            create_fresh_sqlite,
            current_revisions,
            upgrade,
        )

        current_schema = at_head(conn)
        # two workers starting at once migrate one at a time; a schema already at the head
        # takes no lock: a worker paused (SIGSTOP) inside this transaction would otherwise
        # stop every other worker's storage from opening, the reclaim of the paused one too
        if self.backend == "postgresql" and not current_schema:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                         {"key": MIGRATION_LOCK_KEY})
        refuse_foreign(conn, self.sa_url)  # before the first write, WAL mode included
        if self.backend == "sqlite":
            enable_wal(conn)
        if current_schema or (self.backend == "sqlite" and self._create
                               and create_fresh_sqlite(conn)):  # fmt: skip
            return
        current = current_revisions(conn)
        if not current and not self._create:
            raise StorageError(
                f"{self.url} holds no crawl database (run a crawl first, or check "
                "STORAGE_URL / --db)", self.url)
        try:
            upgrade(conn)
        except SchemaTooNewError as exc:
            raise StorageError(
                f"{self.url} has schema revision {', '.join(exc.revisions)}, newer than this "
                f"dedup-crawler (latest known: {exc.head}): upgrade dedup-crawler or use "
                "another STORAGE_URL", self.url) from None

    def schema_revision(self) -> str | None:
        """The alembic revision the database is at (None before the first migration)."""
        from crawler.storage.migrations import recorded_revisions

        with self._errors("reading the schema version"), self.engine.connect() as conn:
            revisions = recorded_revisions(conn)
        return revisions[0] if revisions else None

    # --- query helpers ----------------------------------------------------------------------

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

    def _stream(self, stmt: Any, action: str, batch_size: int) -> Iterator[list[Any]]:
        """Lists of at most ``batch_size`` raw rows of ``stmt`` (:meth:`_raw_cursor`)."""
        self.check()
        with self._errors(action), self.engine.connect() as conn:
            cursor = self._raw_cursor(conn, stmt)
            try:
                while part := cursor.fetchmany(batch_size):
                    yield part
            finally:
                cursor.close()

    def _chunks(self, values: list[str]) -> Iterator[Sequence[str]]:
        """``values`` in one piece on PostgreSQL (one array parameter), in slices of
        :data:`JSON_CHUNK` on a SQLite with JSON (one JSON parameter each), else of 500."""
        if self.backend == "postgresql":
            return iter([values])
        return chunked(values, JSON_CHUNK if SQLITE_JSON else 500)

    def _one_of(self, column: sa.ColumnElement[Any], values: Sequence[str]) -> Any:
        """``column IN values`` with one parameter: on PostgreSQL ``= ANY(array)``, 5x faster
        than 100 params; on SQLite ``IN (SELECT value FROM json_each(?))``, which SQLAlchemy
        does not expand into a parameter per value on every execution (0.7x the time for 500
        values; more than :data:`JSON_FROM` only: a few are quicker as parameters)."""
        if self.backend == "postgresql":
            from sqlalchemy.dialects.postgresql import ARRAY

            array = sa.bindparam(f"{column.key}_any", list(values), type_=ARRAY(sa.Text))
            return column == sa.any_(array)
        if SQLITE_JSON and len(values) > JSON_FROM:
            listed: Any = sa.bindparam(f"{column.key}_json", json.dumps(list(values)))
            return column.in_(sa.select(sa.func.json_each(listed).table_valued("value").c.value))
        return column.in_(values)

    def _dialect_insert(self) -> Any:
        """The backend dialect's ``insert`` (with ``ON CONFLICT``), imported here: a SQLite
        crawl never loads SQLAlchemy's PostgreSQL dialect (:mod:`crawler.storage.tables`)."""
        if self.backend == "postgresql":
            from sqlalchemy.dialects import postgresql

            return postgresql.insert
        from sqlalchemy.dialects import sqlite

        return sqlite.insert

    def _session(self) -> Session:
        """An ORM session (imported here: a crawl's own reads and writes are Core)."""
        from sqlalchemy.orm import Session

        return Session(self.engine, expire_on_commit=False)

    def _scalar(self, stmt: Any, action: str) -> Any:
        """The first column of the first row of ``stmt``, a Core statement (no ORM)."""
        self.check()
        with self._errors(action), self.engine.connect() as conn:
            return conn.scalar(stmt)

    def _entity(self, stmt: Any, action: str) -> Any:
        """The first object of ``stmt``, an ORM select of a model (None when none)."""
        self.check()
        with self._errors(action), self._session() as session:
            return session.scalar(stmt)

    def _all(self, stmt: Any, action: str) -> list[Any]:
        """Every object of ``stmt``, an ORM select of a model."""
        self.check()
        with self._errors(action), self._session() as session:
            return list(session.scalars(stmt))

"""Whether a database may become or stay a crawl database: refuse another program's database
before anything is written to it, and a read-only one before a crawl starts.

:func:`refuse_foreign` runs first when a Store opens a database (:meth:`StoreBase.check`),
before SQLite is switched to WAL mode and before alembic creates ``alembic_version``: a
database whose schema holds tables or views but no recorded revision of ours (an
``alembic_version`` row beside our ``crawls``, ``documents`` and ``dropped``) belongs to
another program (Firefox's ``places.sqlite`` with its ``moz_places``, an application with a
``crawls`` table of its own, another alembic-managed application with its own revision) and is
refused with :class:`ForeignDatabaseError`, unchanged byte for byte. An empty database (no
tables) and one of ours at any revision migrate as before.

Limits: only tables and views of the schema the connection uses first are looked at (on
PostgreSQL the first schema of ``search_path``; sequences, functions and other schemas do not
count). A database of ours whose first migration was interrupted (tables created, no revision
recorded) reads as foreign too: it holds nothing of ours worth keeping; use a new database.

:func:`refuse_read_only` runs after migrating, for a Store that writes: an ``UPDATE`` of
``alembic_version`` that changes nothing, rolled back, shows whether the database takes
writes (a SQLite file opened read-only: ``?mode=ro``, a file the user may not write, a
read-only medium; a PostgreSQL transaction that is read-only or a user without ``UPDATE``).
:func:`read_only_error` turns the driver's error into one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from crawler.storage.engine import StorageError, first_line, mask_url

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

VERSION_TABLE = "alembic_version"
#: Tables every revision of ours has had since the first; another program's alembic-managed
#: database (its own ``alembic_version`` row) lacks them.
OUR_TABLES = ("crawls", "documents", "dropped")
#: SQLSTATEs of a write refused for good: a read-only transaction, a missing privilege.
_PG_READ_ONLY = ("25006", "42501")
#: Tables named in the refusal (the rest are counted).
_NAMED = 5


class ForeignDatabaseError(StorageError):
    """The database belongs to another program; refused before anything was written.

    A usage error (the wrong ``STORAGE_URL``): commands exit with :attr:`exit_code` 2.
    """

    exit_code = 2


def schema_names(conn: sa.Connection) -> list[str]:
    """Tables and views of the connection's first schema (SQLite's own ``sqlite_*`` left out)."""
    inspector = sa.inspect(conn)
    return sorted({*inspector.get_table_names(), *inspector.get_view_names()})


def refuse_foreign(conn: sa.Connection, url: URL) -> None:
    """Raise :class:`ForeignDatabaseError` when the database holds tables or views but no
    revision of ours (the module docstring); reads only."""
    names = schema_names(conn)
    if not names:
        return
    if VERSION_TABLE in names and set(OUR_TABLES) <= set(names) and conn.execute(
            sa.text(f"SELECT 1 FROM {VERSION_TABLE}")).first() is not None:  # fmt: skip
        return  # ours, at any revision (a newer one is refused by the migration check)
    others = [name for name in names if name != VERSION_TABLE]
    listed = ", ".join(others[:_NAMED]) + (f" and {len(others) - _NAMED} more"
                                           if len(others) > _NAMED else "")
    masked = mask_url(url)
    raise ForeignDatabaseError(
        f"{masked} is not a crawl database: it holds tables of another program ({listed}) and "
        "no dedup-crawler schema; nothing was written. Point STORAGE_URL at a new or empty "
        "database (e.g. sqlite:///crawl.db)", masked)


def read_only_error(exc: BaseException, url: URL) -> StorageError | None:
    """A one-line :class:`StorageError` when ``exc`` is the driver refusing a write because
    the database (or the user) is read-only, else None."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorname", None) or getattr(orig, "sqlstate", None) or ""
    if not (code.startswith("SQLITE_READONLY") or code in _PG_READ_ONLY):
        return None
    masked = mask_url(url)
    return StorageError(
        f"{masked} is read-only ({first_line(exc)}): a crawl writes its pages there; make it "
        "writable (file and directory permissions, no ?mode=ro, a user that may write) or "
        "change STORAGE_URL", masked)


def refuse_read_only(engine: sa.Engine, url: URL) -> None:
    """Raise the :func:`read_only_error` of a database that refuses writes (nothing is kept:
    the probe changes no value and is rolled back). Other driver errors propagate."""
    # PostgreSQL refuses the statement itself in a read-only transaction or without the
    # privilege, so no row need match (none is locked: a worker paused here holds nothing
    # another waits on); SQLite only refuses a write it attempts
    where = " WHERE false" if engine.dialect.name == "postgresql" else ""
    with engine.connect() as conn:
        try:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = version_num{where}"))
        except DBAPIError as exc:
            error = read_only_error(exc, url)
            if error is not None:
                raise error from None
            raise
        finally:
            conn.rollback()

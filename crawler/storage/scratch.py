"""Throw-away PostgreSQL schemas and bulk loads, for tests and benchmarks.

The PostgreSQL database of a machine is shared by every test, benchmark and CI run on it, so
each gets a schema of its own: a URL whose connections use that schema first (``options=
-csearch_path=<schema>``), where every table, index and ``alembic_version`` lands.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from crawler.storage.engine import parse_url, wrap_error
from crawler.storage.store import Store
from crawler.storage.tables import DOCUMENT_COLUMNS


def schema_url(pg_url: str, schema: str, password: str | None = None) -> str:
    """``pg_url`` whose connections use ``schema`` first (and ``password``, when given)."""
    url = sa.make_url(pg_url).update_query_dict({"options": f"-csearch_path={schema}"})
    if password is not None:
        url = url.set(password=password)
    return url.render_as_string(hide_password=False)


def _admin(pg_url: str, statement: str, action: str) -> None:
    """Run one DDL statement on ``pg_url``; :class:`StorageError` when it fails."""
    engine = sa.create_engine(parse_url(pg_url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    except SQLAlchemyError as exc:
        raise wrap_error(exc, parse_url(pg_url), action) from None
    finally:
        engine.dispose()


def ensure_schema(pg_url: str, schema: str) -> str:
    """Create ``schema`` if absent (kept, e.g. as a benchmark's cache); returns its URL.
    :class:`StorageError` when the server cannot be reached."""
    _admin(pg_url, f'CREATE SCHEMA IF NOT EXISTS "{_name(schema)}"', "creating a schema")
    return schema_url(pg_url, schema)


@contextmanager
def scratch_schema(pg_url: str, prefix: str, password: str | None = None) -> Iterator[str]:
    """A URL whose connections use a new schema, dropped (CASCADE) afterwards.

    ``password`` is set in the URL (trust auth ignores it: a test proves it never leaks).
    :class:`StorageError` when the server cannot be reached.
    """
    schema = _name(f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}")
    _admin(pg_url, f'CREATE SCHEMA "{schema}"', "creating a schema")
    try:
        yield schema_url(pg_url, schema, password)
    finally:
        _admin(pg_url, f'DROP SCHEMA "{schema}" CASCADE', "dropping a schema")


def bulk_load_documents(store: Store, columns: Sequence[str],
                        rows: Iterable[Sequence[Any]]) -> None:
    """Replace every ``documents`` row of a PostgreSQL store with ``rows`` (values of
    ``columns`` in their stored form: fingerprints and keys signed) by ``COPY``, then
    ``VACUUM ANALYZE`` (the visibility map makes the key load an index-only scan)."""
    unknown = set(columns) - set(DOCUMENT_COLUMNS)
    if unknown or store.backend != "postgresql":
        raise ValueError(f"bulk load needs PostgreSQL and document columns, not {unknown}")
    store.check()
    with store.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE documents"))
        raw: Any = conn.connection.dbapi_connection  # psycopg 3: COPY is the fast path
        with raw.cursor() as cur, cur.copy(
                f"COPY documents ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE documents"))


def _name(schema: str) -> str:
    if not schema.replace("_", "").isalnum():
        raise ValueError(f"schema name {schema!r}: letters, digits and _ only")
    return schema

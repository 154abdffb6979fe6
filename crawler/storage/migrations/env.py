"""alembic environment: migrate on the connection handed over by
:func:`crawler.storage.migrations.upgrade`.

Without one (developer use through ``python -m crawler.storage.migrations``) it opens
``sqlalchemy.url`` itself; for ``--autogenerate`` point that at a database already at head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import context

from crawler.storage import Base, parse_url

if TYPE_CHECKING:
    from sqlalchemy import Connection

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copy
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    cfg = context.config
    connection = cfg.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = cfg.get_main_option("sqlalchemy.url") or "sqlite:///:memory:"
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    import sqlalchemy as sa

    engine = sa.create_engine(parse_url(url))
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


_main()

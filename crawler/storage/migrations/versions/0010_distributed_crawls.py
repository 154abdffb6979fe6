"""crawls.worker and crawls.parent_id: a distributed crawl recorded as one crawl with its workers.

Every worker of a distributed crawl (one Redis namespace) records its own ``crawls`` row, as
before, and all of them now share the crawl's id in ``job`` (``{base}:meta`` field ``crawl``,
named by the crawl's first worker). One more row stands for the whole crawl: ``command`` is
``distributed``, ``worker`` NULL; its set fingerprints and ``crawl_documents`` rows are those
of everything the crawl stored, kept in each worker's batch transaction
(:meth:`crawler.storage.sets.SetsSide._track_sets`), and it is closed when the crawl is done.

``worker``
    The worker's membership id (``host:pid:hex``) on a worker's row; NULL elsewhere.
``parent_id``
    On a worker's row, the id of the crawl's ``distributed`` row; NULL elsewhere. No foreign
    key: SQLite cannot add one to an existing table without rebuilding it.

A partial unique index keeps one ``distributed`` row per crawl id, so workers starting at the
same instant all find the same row (``INSERT ... ON CONFLICT DO NOTHING``).

Revision ID: 0010
Revises: 0009
Created: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

DISTRIBUTED = sa.text("command = 'distributed'")


def upgrade() -> None:
    op.add_column("crawls", sa.Column("worker", sa.String(255), nullable=True))
    op.add_column("crawls", sa.Column("parent_id", sa.BigInteger(), nullable=True))
    op.create_index("ix_crawls_parent_id", "crawls", ["parent_id"])
    op.create_index("ux_crawls_distributed_job", "crawls", ["job"], unique=True,
                    postgresql_where=DISTRIBUTED, sqlite_where=DISTRIBUTED)


def downgrade() -> None:
    op.drop_index("ux_crawls_distributed_job", table_name="crawls")
    op.drop_index("ix_crawls_parent_id", table_name="crawls")
    with op.batch_alter_table("crawls") as batch:
        batch.drop_column("parent_id")
        batch.drop_column("worker")

"""documents.content_key and documents.canonical_key: the content index loads without hashing.

Two signed BIGINT columns computed at write time by :class:`crawler.storage.Store`:
``content_key`` = :func:`crawler.content.simindex.content_key` of ``content_hash`` (NULL without
one) and ``canonical_key`` = :func:`crawler.content.simindex.url_key` of ``canonical_url`` (or
``url`` when empty). Existing rows are backfilled here in batches of 10,000 by id (about 5 s per
10**6 rows on SQLite), in the migration's transaction. The covering index
``ix_documents_keys (id, simhash, content_key, canonical_key)`` lets the index load read those
four integers without walking the page text: on SQLite a text over ~4 KB sits in overflow
pages that a table scan must follow to reach the columns stored after it; on PostgreSQL it
allows an index-only scan.

Revision ID: 0002
Revises: 0001
Created: 2026-12-02
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from crawler.content.simindex import content_key, url_key
from crawler.storage import to_signed64

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

logger = logging.getLogger("crawler.storage.migrations")
BATCH = 10_000


def upgrade() -> None:
    op.add_column("documents", sa.Column("content_key", sa.BigInteger))
    op.add_column("documents", sa.Column("canonical_key", sa.BigInteger))
    done = _backfill(op.get_bind())
    if done:
        logger.info("documents: content_key and canonical_key computed for %d rows", done)
    op.create_index("ix_documents_keys", "documents",
                    ["id", "simhash", "content_key", "canonical_key"])


def _backfill(conn: sa.Connection) -> int:
    """Compute both keys for every row, BATCH rows at a time in id order; returns rows done."""
    docs = sa.table("documents", sa.column("id"), sa.column("url"), sa.column("canonical_url"),
                    sa.column("content_hash"), sa.column("content_key"),
                    sa.column("canonical_key"))
    select = (sa.select(docs.c.id, docs.c.url, docs.c.canonical_url, docs.c.content_hash)
              .where(docs.c.id > sa.bindparam("after")).order_by(docs.c.id).limit(BATCH))
    update = (sa.update(docs).where(docs.c.id == sa.bindparam("row_id"))
              .values(content_key=sa.bindparam("ck"), canonical_key=sa.bindparam("uk")))
    after, done = -(2**63), 0
    while rows := conn.execute(select, {"after": after}).all():
        conn.execute(update, [_keys(*row) for row in rows])
        after = rows[-1][0]
        done += len(rows)
    return done


def _keys(row_id: int, url: str, canonical: str | None, chash: str | None) -> dict[str, int | None]:
    return {
        "row_id": row_id,
        "ck": to_signed64(content_key(chash)) if chash else None,
        "uk": to_signed64(url_key(canonical or url)),
    }


def downgrade() -> None:
    op.drop_index("ix_documents_keys", "documents")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("canonical_key")
        batch.drop_column("content_key")

"""Initial schema: crawls, documents, dropped.

Revision ID: 0001
Revises:
Created: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Same types as crawler.storage: ids autoincrement on SQLite only as INTEGER PRIMARY KEY;
# fingerprints are signed BIGINT; times are timezone-aware (stored as UTC).
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "crawls",
        sa.Column("id", _Id, primary_key=True),
        sa.Column("started_at", _Time, nullable=False),
        sa.Column("finished_at", _Time),
        sa.Column("finish_reason", sa.String(64)),
        sa.Column("spider", sa.String(128)),
        sa.Column("seeds", sa.JSON),
        sa.Column("settings", sa.JSON),
        sa.Column("stats", sa.JSON),
    )
    op.create_table(
        "documents",
        sa.Column("id", _Id, primary_key=True),
        sa.Column("url", sa.Text, nullable=False, unique=True),
        sa.Column("canonical_url", sa.Text, nullable=False),
        sa.Column("title", sa.Text),
        sa.Column("text", sa.Text),
        sa.Column("content_hash", sa.String(128)),
        sa.Column("simhash", sa.BigInteger),
        sa.Column("status", sa.Integer),
        sa.Column("content_type", sa.String(255)),
        sa.Column("encoding", sa.String(64)),
        sa.Column("depth", sa.Integer),
        sa.Column("referer", sa.Text),
        sa.Column("fetched_at", _Time),
        sa.Column("updated_at", _Time),
        sa.Column("crawl_id", _Id, sa.ForeignKey("crawls.id", ondelete="SET NULL")),
    )
    op.create_index("ix_documents_canonical_url", "documents", ["canonical_url"])
    op.create_index("ix_documents_content_hash", "documents", ["content_hash"])
    op.create_index("ix_documents_crawl_id", "documents", ["crawl_id"])
    op.create_table(
        "dropped",
        sa.Column("id", _Id, primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("canonical_url", sa.Text),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("duplicate_of", sa.Text),
        sa.Column("distance", sa.Integer),
        sa.Column("simhash", sa.BigInteger),
        sa.Column("duplicate_simhash", sa.BigInteger),
        sa.Column("content_hash", sa.String(128)),
        sa.Column("title", sa.Text),
        sa.Column("text", sa.Text),
        sa.Column("dropped_at", _Time, nullable=False),
        sa.Column("crawl_id", _Id, sa.ForeignKey("crawls.id", ondelete="SET NULL")),
    )
    for column in ("url", "reason", "duplicate_of", "dropped_at", "crawl_id"):
        op.create_index(f"ix_dropped_{column}", "dropped", [column])


def downgrade() -> None:
    op.drop_table("dropped")
    op.drop_table("documents")
    op.drop_table("crawls")

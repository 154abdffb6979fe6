"""redis_generations: how far the shared Redis of a distributed crawl had got, as storage saw it.

One row per distributed crawl (``crawl``: the namespace and the moment its first worker joined,
``DEDUP_NAMESPACE@started``), holding the highest value of the crawl's Redis commit counter that
a committed storage batch recorded (:class:`crawler.cluster.generation.GenerationFence`). A
Redis restored from an older snapshot holds a smaller counter than this row: the crawl stops
instead of losing what the newer Redis knew.

Revision ID: 0009
Revises: 0008
Created: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawler.storage.types import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "redis_generations",
        sa.Column("crawl", sa.String(255), primary_key=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("redis_generations")

"""overrides and reviews: a person's word over the dedup rule, and their verdicts on decisions.

``overrides``
    One row per rule (:mod:`crawler.dedup.overrides`): ``action`` (``keep`` | ``drop`` |
    ``distinct``), ``target`` (a canonical URL, a URL pattern with ``*`` or ``host:NAME``),
    ``other`` (the second URL of a ``distinct`` pair, else ``""``), ``note``, ``created_at``.
    Every later crawl into the database, and the settle step, obey them.
``reviews``
    One row per verdict: ``url`` was ``decision`` (``dropped`` | ``kept``) against ``other``,
    with the ``reason`` and ``distance`` of the decision; ``verdict`` ``correct`` | ``wrong``,
    ``note``, ``reviewed_at``, ``crawl_id``. The newest row of a pair is its state.

Revision ID: 0011
Revises: 0010
Created: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawler.storage.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "overrides",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("other", sa.Text(), nullable=False, server_default=""),
        sa.Column("note", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_overrides_target", "overrides", ["target"])
    op.create_table(
        "reviews",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("other", sa.Text(), nullable=False, server_default=""),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False, server_default=""),
        sa.Column("distance", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False, server_default=""),
        sa.Column("reviewed_at", UTCDateTime(), nullable=False),
        sa.Column("crawl_id", _ID, sa.ForeignKey("crawls.id", ondelete="SET NULL"),
                  nullable=True),
    )
    op.create_index("ix_reviews_url", "reviews", ["url"])
    op.create_index("ix_reviews_crawl_id", "reviews", ["crawl_id"])


def downgrade() -> None:
    op.drop_table("reviews")
    op.drop_table("overrides")

"""documents.canonical_link and dropped.rule: the canonical copy is the one stored.

``documents.canonical_link`` holds the canonical URL a page names (``<link rel="canonical">``
or a ``Link: rel="canonical"`` header, resolved and normalized) when it names another page of
the crawl; NULL when it names none, names itself, or names a page off the crawl. When a stored
page turns out to be the copy of the page it names, the copy is moved to ``dropped`` with
``rule = 'canonical'``, and drop rows that named it as their kept page name the page kept
instead, with ``rule = 'repointed'``. A stored page whose fingerprint, recomputed once its
site's template is learned, duplicates another kept page is moved the same way with
``rule = 'refreshed'`` (NULL: the usual rule, the first fetched page stays).

Revision ID: 0004
Revises: 0003
Created: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN of a nullable column: no table rewrite on SQLite or PostgreSQL
    op.add_column("documents", sa.Column("canonical_link", sa.Text(), nullable=True))
    op.add_column("dropped", sa.Column("rule", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dropped") as batch:
        batch.drop_column("rule")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("canonical_link")

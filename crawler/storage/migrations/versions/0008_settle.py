"""dropped keeps what a document row needs, and crawls.settled_at: the settle step.

The settle step (:mod:`crawler.dedup.settle`, :mod:`crawler.storage.settle`) may store again a page
that was dropped (its kept twin was itself dropped later in favour of a page too far from it).
So a ``dropped`` row keeps what its ``documents`` row would hold besides title and text:
``canonical_link`` (the page it names canonical: the preference order reads it), ``status``,
``content_type``, ``encoding``, ``depth``, ``referer`` and ``fetched_at``. All nullable, added
without a default (no table rewrite; older rows read NULL).

``documents.young`` and ``dropped.young``: the page's SimHash was computed while its site's
template was unknown (its chrome in the fingerprint), so two such pages of one site may be
near in bits and distinct in text; the settle step does not take that nearness alone for a
duplicate (NULL, older rows: trusted).

``crawls.settled_at``: when the settle step last re-decided the groups of this crawl's pages
(NULL: not yet, e.g. a worker killed before its end; the next settle takes its pages in too).

Revision ID: 0008
Revises: 0007
Created: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from crawler.storage.types import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

DROPPED_COLUMNS = (
    ("canonical_link", sa.Text),
    ("status", sa.Integer),
    ("content_type", lambda: sa.String(255)),
    ("encoding", lambda: sa.String(64)),
    ("depth", sa.Integer),
    ("referer", sa.Text),
    ("fetched_at", UTCDateTime),
    ("young", sa.Boolean),
)


def upgrade() -> None:
    for name, kind in DROPPED_COLUMNS:
        op.add_column("dropped", sa.Column(name, kind(), nullable=True))
    op.add_column("crawls", sa.Column("settled_at", UTCDateTime(), nullable=True))
    op.add_column("documents", sa.Column("young", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("young")
    with op.batch_alter_table("crawls") as batch:
        batch.drop_column("settled_at")
    with op.batch_alter_table("dropped") as batch:
        for name, _ in reversed(DROPPED_COLUMNS):
            batch.drop_column(name)

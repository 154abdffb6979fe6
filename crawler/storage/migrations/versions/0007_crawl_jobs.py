"""crawls.job and crawls.command: which runs form one JOBDIR job, and which were ``scrapy parse``.

``crawls`` gains two nullable columns, added without a default (no table rewrite on PostgreSQL
or SQLite; existing rows read NULL):

``job``
    The job id kept in ``JOBDIR/dedup/job.json`` (:func:`crawler.state.jobstate.job_id`): every run
    of one JOBDIR (the first, each resume after a kill or a Ctrl-C) records the same id. NULL for a
    run without JOBDIR, and for every crawl recorded before this revision.
``command``
    ``crawl`` or ``parse`` (``scrapy parse`` opens the pipelines too and records a crawl that
    usually stores nothing); NULL before this revision.

Revision ID: 0007
Revises: 0006
Created: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("crawls", sa.Column("job", sa.String(64), nullable=True))
    op.add_column("crawls", sa.Column("command", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("crawls") as batch:
        batch.drop_column("command")
        batch.drop_column("job")

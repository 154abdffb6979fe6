"""Single-column indexes on documents.simhash, content_key and canonical_key.

The shared (Redis) content index keeps no URL per kept page: when a drop names its kept page,
the page is found in storage by its SimHash or its content key, and a page's earlier version
by its canonical key (:meth:`crawler.storage.Store.kept_page`, ``latest_version``). Each is
one index lookup with these indexes (the covering ``ix_documents_keys`` starts with ``id`` and
cannot serve them).

Revision ID: 0003
Revises: 0002
Created: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_documents_simhash": "simhash",
    "ix_documents_content_key": "content_key",
    "ix_documents_canonical_key": "canonical_key",
}


def upgrade() -> None:
    for name, column in INDEXES.items():
        op.create_index(name, "documents", [column])


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="documents")

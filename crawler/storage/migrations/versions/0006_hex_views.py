"""Views ``documents_view`` and ``dropped_view``: the SimHash as 16 hex digits.

The tables keep the 64-bit SimHash as a signed BIGINT (``Fingerprint64``); a person querying
the database sees ``-3083752073566008073`` where the drop log, the feeds and the CLI say
``d53454ec0d8c0ff7``. These views show the same rows with ``simhash`` (and, for drops,
``duplicate_simhash``) as 16 lower-case hex digits, and leave out the bulky ``html``.
Query them, never write to them.

Revision ID: 0006
Revises: 0005
Created: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

DOCUMENT_COLUMNS = ("id", "crawl_id", "url", "canonical_url", "status", "content_type",
                    "encoding", "title", "text", "depth", "referer", "fetched_at",
                    "updated_at", "content_hash", "canonical_link")  # fmt: skip
DROPPED_COLUMNS = ("id", "crawl_id", "url", "canonical_url", "reason", "rule", "duplicate_of",
                   "distance", "content_hash", "title", "text", "dropped_at")  # fmt: skip


def hex64(column: str, dialect: str) -> str:
    """SQL giving a signed 64-bit column as 16 hex digits of its unsigned value (NULL stays)."""
    if dialect == "postgresql":
        return f"lpad(to_hex({column}), 16, '0')"
    return f"CASE WHEN {column} IS NULL THEN NULL ELSE printf('%016x', {column}) END"


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    documents = {c["name"] for c in _columns(bind, "documents")}
    dropped = {c["name"] for c in _columns(bind, "dropped")}
    doc_cols = ", ".join(c for c in DOCUMENT_COLUMNS if c in documents)
    drop_cols = ", ".join(c for c in DROPPED_COLUMNS if c in dropped)
    op.execute(f"CREATE VIEW documents_view AS SELECT {doc_cols}, "
               f"{hex64('simhash', dialect)} AS simhash FROM documents")
    op.execute(f"CREATE VIEW dropped_view AS SELECT {drop_cols}, "
               f"{hex64('simhash', dialect)} AS simhash, "
               f"{hex64('duplicate_simhash', dialect)} AS duplicate_simhash FROM dropped")


def _columns(bind, table: str) -> list[dict]:
    import sqlalchemy as sa

    return list(sa.inspect(bind).get_columns(table))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dropped_view")
    op.execute("DROP VIEW IF EXISTS documents_view")

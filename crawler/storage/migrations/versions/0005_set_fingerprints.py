"""crawls set fingerprints and crawl_documents: two crawls compared in O(1).

``crawls`` gains ``url_fingerprint``, ``content_fingerprint``, ``page_fingerprint`` (32 hex
digits: order-free sums modulo 2**128 of xxh3-128 element fingerprints,
:mod:`crawler.content.setfp`), ``url_count`` and ``content_count``. ``crawl_documents (crawl_id,
canonical_url, content_hash)`` records the pages each crawl stored: a re-crawl into the same
database moves ``documents`` rows to the new crawl, and these rows keep what the earlier crawl
stored (the sums are over them).

Existing crawls are filled in here from ``documents``, in the migration's transaction: each
row with a ``crawl_id`` becomes a page of that crawl (the latest row by id when two share a
canonical URL), then every crawl's sums are computed from its rows. Pages an older crawl stored
and a later crawl stored again before this revision belong to the later crawl only: the
database no longer says that the older one had them. About 14 s per 10**6 documents on
SQLite (2.7 s for 2*10**5 measured).

Revision ID: 0005
Revises: 0004
Created: 2026-12-04
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql, sqlite

from crawler.content.setfp import ZERO_HEX, CrawlSets

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

logger = logging.getLogger("crawler.storage.migrations")
BATCH = 10_000
FINGERPRINTS = ("url_fingerprint", "content_fingerprint", "page_fingerprint")
COUNTS = ("url_count", "content_count")

_docs = sa.table("documents", sa.column("id"), sa.column("url"), sa.column("canonical_url"),
                 sa.column("content_hash"), sa.column("crawl_id"))
_members = sa.table("crawl_documents", sa.column("crawl_id"), sa.column("canonical_url"),
                    sa.column("content_hash"))
_crawls = sa.table("crawls", sa.column("id"), *(sa.column(name) for name in FINGERPRINTS),
                   *(sa.column(name) for name in COUNTS))


def upgrade() -> None:
    # constant defaults: no table rewrite on PostgreSQL 11+, a plain ADD COLUMN on SQLite
    for name in FINGERPRINTS:
        op.add_column("crawls", sa.Column(name, sa.String(32), nullable=False,
                                          server_default=ZERO_HEX))
    for name in COUNTS:
        op.add_column("crawls", sa.Column(name, sa.BigInteger, nullable=False,
                                          server_default="0"))
    op.create_table(
        "crawl_documents",
        sa.Column("crawl_id", sa.BigInteger, sa.ForeignKey("crawls.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("canonical_url", sa.Text, primary_key=True),
        sa.Column("content_hash", sa.String(128)),
    )
    conn = op.get_bind()
    pages = _copy_pages(conn)
    crawls = _sum_crawls(conn)
    if pages:
        logger.info("crawls: set fingerprints computed for %d crawls from %d stored pages",
                    crawls, pages)


def _copy_pages(conn: sa.Connection) -> int:
    """Every document with a crawl becomes a page of it, BATCH rows at a time in id order (a
    later row of the same canonical URL replaces an earlier one); returns documents read."""
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(_members)
    upsert = insert.on_conflict_do_update(
        index_elements=["crawl_id", "canonical_url"],
        set_={"content_hash": insert.excluded.content_hash})
    select = (sa.select(_docs.c.id, _docs.c.url, _docs.c.canonical_url, _docs.c.content_hash,
                        _docs.c.crawl_id)
              .where(_docs.c.id > sa.bindparam("after"), _docs.c.crawl_id.is_not(None))
              .order_by(_docs.c.id).limit(BATCH))
    after, done = -(2**63), 0
    while rows := conn.execute(select, {"after": after}).all():
        batch = {(crawl_id, canonical or url): chash
                 for _, url, canonical, chash, crawl_id in rows}  # the last row per key wins
        conn.execute(upsert, [{"crawl_id": crawl_id, "canonical_url": canonical,
                               "content_hash": chash}
                              for (crawl_id, canonical), chash in batch.items()])
        after = rows[-1][0]
        done += len(rows)
    return done


def _sum_crawls(conn: sa.Connection) -> int:
    """Each crawl's fingerprints from its ``crawl_documents`` rows; returns crawls with pages."""
    select = (sa.select(_members.c.crawl_id, _members.c.canonical_url, _members.c.content_hash)
              .order_by(_members.c.crawl_id))
    update = (sa.update(_crawls).where(_crawls.c.id == sa.bindparam("crawl"))
              .values({name: sa.bindparam(f"new_{name}") for name in (*FINGERPRINTS, *COUNTS)}))
    sums: dict[int, CrawlSets] = {}
    for crawl_id, canonical, chash in conn.execute(select.execution_options(yield_per=BATCH)):
        sums[crawl_id] = sums.get(crawl_id, CrawlSets()).stored(canonical, chash)
    if sums:
        conn.execute(update, [
            {"crawl": crawl_id, "new_url_fingerprint": sets.urls.hex(),
             "new_content_fingerprint": sets.contents.hex(),
             "new_page_fingerprint": sets.pages.hex(), "new_url_count": sets.urls.count,
             "new_content_count": sets.contents.count}
            for crawl_id, sets in sums.items()])
    return len(sums)


def downgrade() -> None:
    op.drop_table("crawl_documents")
    with op.batch_alter_table("crawls") as batch:
        for name in (*COUNTS, *FINGERPRINTS):
            batch.drop_column(name)

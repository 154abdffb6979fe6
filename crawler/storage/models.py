"""The tables as SQLAlchemy ORM classes, for the commands and reviews that read whole rows.

The tables themselves, and the column lists the Store writes, are the Core tables of
:mod:`crawler.storage.tables` (re-exported here); each class below is mapped onto its table
(``__table__``), so the schema has one definition. A crawl never imports this module (the ORM
costs about 0.1 s and several MiB at start-up): the Store's writes and the crawl's reads are Core.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped

from crawler.content.setfp import CrawlSets
from crawler.storage import tables
from crawler.storage.tables import (
    DERIVED_COLUMNS,
    DOCUMENT_COLUMNS,
    DROPPED_COLUMNS,
    MAX_LENGTHS,
    SET_COLUMNS,
    TEXT_COLUMNS,
    crawl_sets,
    sets_columns,
)

__all__ = [
    "DERIVED_COLUMNS", "DOCUMENT_COLUMNS", "DROPPED_COLUMNS", "MAX_LENGTHS", "SET_COLUMNS",
    "TEXT_COLUMNS", "Base", "Crawl", "CrawlDocument", "Document", "Dropped", "OverrideRow",
    "RedisGeneration", "ReviewRow", "crawl_sets", "sets_columns",
]  # fmt: skip


class Base(DeclarativeBase):
    metadata: ClassVar[sa.MetaData] = tables.metadata

    def as_dict(self) -> dict[str, Any]:
        """Column values by name (fingerprints unsigned, times aware UTC datetimes)."""
        return {c.key: getattr(self, c.key) for c in sa.inspect(type(self)).column_attrs}

    def __repr__(self) -> str:
        key = getattr(self, "url", None) or getattr(self, "id", None)
        return f"<{type(self).__name__} {key!r}>"


class Crawl(Base):
    __table__ = tables.crawls

    id: Mapped[int]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    finish_reason: Mapped[str | None]
    spider: Mapped[str | None]
    seeds: Mapped[list[str] | None]
    settings: Mapped[dict[str, Any] | None]
    stats: Mapped[dict[str, Any] | None]
    job: Mapped[str | None]
    command: Mapped[str | None]
    settled_at: Mapped[datetime | None]
    worker: Mapped[str | None]
    parent_id: Mapped[int | None]
    url_fingerprint: Mapped[str]
    url_count: Mapped[int]
    content_fingerprint: Mapped[str]
    content_count: Mapped[int]
    page_fingerprint: Mapped[str]

    def sets(self) -> CrawlSets:
        """The recorded fingerprints (:class:`crawler.content.setfp.CrawlSets`)."""
        return crawl_sets(self.url_fingerprint, self.url_count, self.content_fingerprint,
                          self.content_count, self.page_fingerprint)


class CrawlDocument(Base):
    """One page a crawl stored (revision 0005; :data:`crawler.storage.tables.crawl_documents`)."""

    __table__ = tables.crawl_documents

    crawl_id: Mapped[int]
    canonical_url: Mapped[str]
    content_hash: Mapped[str | None]


class Document(Base):
    __table__ = tables.documents

    id: Mapped[int]
    url: Mapped[str]
    canonical_url: Mapped[str]
    title: Mapped[str | None]
    text: Mapped[str | None]
    content_hash: Mapped[str | None]
    simhash: Mapped[int | None]
    status: Mapped[int | None]
    content_type: Mapped[str | None]
    encoding: Mapped[str | None]
    depth: Mapped[int | None]
    referer: Mapped[str | None]
    fetched_at: Mapped[datetime | None]
    updated_at: Mapped[datetime | None]
    crawl_id: Mapped[int | None]
    content_key: Mapped[int | None]
    canonical_key: Mapped[int | None]
    canonical_link: Mapped[str | None]
    young: Mapped[bool | None]


class Dropped(Base):
    __table__ = tables.dropped

    id: Mapped[int]
    url: Mapped[str]
    canonical_url: Mapped[str | None]
    reason: Mapped[str]
    duplicate_of: Mapped[str | None]
    distance: Mapped[int | None]
    simhash: Mapped[int | None]
    duplicate_simhash: Mapped[int | None]
    content_hash: Mapped[str | None]
    title: Mapped[str | None]
    text: Mapped[str | None]
    dropped_at: Mapped[datetime]
    crawl_id: Mapped[int | None]
    rule: Mapped[str | None]
    canonical_link: Mapped[str | None]
    status: Mapped[int | None]
    content_type: Mapped[str | None]
    encoding: Mapped[str | None]
    depth: Mapped[int | None]
    referer: Mapped[str | None]
    fetched_at: Mapped[datetime | None]
    young: Mapped[bool | None]


class RedisGeneration(Base):
    """The highest commit counter of a distributed crawl's Redis that storage recorded
    (revision 0009; :mod:`crawler.cluster.generation`)."""

    __table__ = tables.redis_generations

    crawl: Mapped[str]
    generation: Mapped[int]
    updated_at: Mapped[datetime]


class OverrideRow(Base):
    """A person's override of the dedup rule (revision 0011;
    :data:`crawler.storage.tables.overrides`)."""

    __table__ = tables.overrides

    id: Mapped[int]
    action: Mapped[str]
    target: Mapped[str]
    other: Mapped[str]
    note: Mapped[str]
    created_at: Mapped[datetime]


class ReviewRow(Base):
    """A person's verdict on one decision (revision 0011;
    :data:`crawler.storage.tables.reviews`)."""

    __table__ = tables.reviews

    id: Mapped[int]
    url: Mapped[str]
    other: Mapped[str]
    decision: Mapped[str]
    verdict: Mapped[str]
    reason: Mapped[str]
    distance: Mapped[int | None]
    note: Mapped[str]
    reviewed_at: Mapped[datetime]
    crawl_id: Mapped[int | None]

"""The tables as SQLAlchemy models, and the column lists the Store writes.

``documents`` (one row per kept page), ``dropped`` (one row per page dropped as a duplicate),
``crawls`` (one row per crawl, with the order-free fingerprints of what it stored),
``crawl_documents`` (the pages each crawl stored: what those fingerprints are sums of) and
``redis_generations`` (how far a distributed crawl's Redis had got, revision 0009), ``overrides``
(a person's rules over the dedup rule) and ``reviews`` (verdicts on decisions, 0011); a
distributed crawl's ``crawls`` rows are tied by ``job``, ``worker`` and ``parent_id`` (0010). The
schema itself is versioned by the alembic revisions of :mod:`crawler.storage.migrations`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from crawler.content.setfp import ZERO_HEX, CrawlSets, SetFingerprint
from crawler.storage.types import Fingerprint64, UTCDateTime, utcnow

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    def as_dict(self) -> dict[str, Any]:
        """Column values by name (fingerprints unsigned, times aware UTC datetimes)."""
        return {c.key: getattr(self, c.key) for c in sa.inspect(type(self)).column_attrs}

    def __repr__(self) -> str:
        key = getattr(self, "url", None) or getattr(self, "id", None)
        return f"<{type(self).__name__} {key!r}>"


class Crawl(Base):
    __tablename__ = "crawls"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finish_reason: Mapped[str | None] = mapped_column(sa.String(64))
    spider: Mapped[str | None] = mapped_column(sa.String(128))
    seeds: Mapped[list[str] | None] = mapped_column(sa.JSON)
    settings: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    stats: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # revision 0007: the JOBDIR job this run belongs to (crawler.state.jobstate.job_id; NULL without
    # JOBDIR) and the command that ran it ("crawl" | "parse"; NULL before 0007)
    job: Mapped[str | None] = mapped_column(sa.String(64))
    command: Mapped[str | None] = mapped_column(sa.String(16))
    # revision 0008: when the settle step last re-decided this crawl's groups (crawler.dedup.settle)
    settled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # revision 0010: a distributed crawl (``job`` = its id) has one ``distributed`` row for the
    # whole crawl and one row per worker (``worker`` = its membership id, ``parent_id`` = the
    # ``distributed`` row)
    worker: Mapped[str | None] = mapped_column(sa.String(255))
    parent_id: Mapped[int | None] = mapped_column(sa.BigInteger, index=True)
    # order-free fingerprints of what the crawl stored (crawler.content.setfp; revision 0005), kept
    # up to date in each batch's transaction from ``crawl_documents``
    url_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                 server_default=ZERO_HEX)
    url_count: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    content_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                     server_default=ZERO_HEX)
    content_count: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    page_fingerprint: Mapped[str] = mapped_column(sa.String(32), default=ZERO_HEX,
                                                  server_default=ZERO_HEX)

    __table_args__ = (
        sa.Index("ux_crawls_distributed_job", "job", unique=True,
                 postgresql_where=sa.text("command = 'distributed'"),
                 sqlite_where=sa.text("command = 'distributed'")),
    )

    def sets(self) -> CrawlSets:
        """The recorded fingerprints (:class:`crawler.content.setfp.CrawlSets`)."""
        return crawl_sets(self.url_fingerprint, self.url_count, self.content_fingerprint,
                          self.content_count, self.page_fingerprint)


class CrawlDocument(Base):
    """One page a crawl stored (revision 0005): what its set fingerprints are sums of.

    Keyed on ``(crawl_id, canonical_url)``; ``content_hash`` as stored (NULL: none). A crawl's
    rows change only in that crawl's own batches: a later crawl that stores the page again,
    or demotes or replaces it, leaves them alone, so a finished crawl keeps what it stored.
    """

    __tablename__ = "crawl_documents"

    crawl_id: Mapped[int] = mapped_column(
        sa.BigInteger, sa.ForeignKey("crawls.id", ondelete="CASCADE"), primary_key=True)
    canonical_url: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128))


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    url: Mapped[str] = mapped_column(sa.Text, unique=True)
    canonical_url: Mapped[str] = mapped_column(sa.Text, index=True, default="")
    title: Mapped[str | None] = mapped_column(sa.Text)
    text: Mapped[str | None] = mapped_column(sa.Text)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128), index=True)
    simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    status: Mapped[int | None] = mapped_column(sa.Integer)
    content_type: Mapped[str | None] = mapped_column(sa.String(255))
    encoding: Mapped[str | None] = mapped_column(sa.String(64))
    depth: Mapped[int | None] = mapped_column(sa.Integer)
    referer: Mapped[str | None] = mapped_column(sa.Text)
    fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    crawl_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True
    )
    # derived on write (signed form of crawler.content.simindex.content_key / url_key): the content
    # index loads these integers instead of hashing every stored string (revision 0002)
    content_key: Mapped[int | None] = mapped_column(sa.BigInteger)
    canonical_key: Mapped[int | None] = mapped_column(sa.BigInteger)
    # the other page of the crawl this page names canonical, normalized (revision 0004)
    canonical_link: Mapped[str | None] = mapped_column(sa.Text)
    # revision 0008: the SimHash was computed while the site's template was unknown
    young: Mapped[bool | None] = mapped_column(sa.Boolean)

    __table_args__ = (
        # covering: the index load reads these four integers without touching the page text
        sa.Index("ix_documents_keys", "id", "simhash", "content_key", "canonical_key"),
        # the shared content index finds kept pages and earlier versions here (revision 0003)
        sa.Index("ix_documents_simhash", "simhash"),
        sa.Index("ix_documents_content_key", "content_key"),
        sa.Index("ix_documents_canonical_key", "canonical_key"),
    )


class Dropped(Base):
    __tablename__ = "dropped"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    url: Mapped[str] = mapped_column(sa.Text, index=True)
    canonical_url: Mapped[str | None] = mapped_column(sa.Text)
    reason: Mapped[str] = mapped_column(sa.String(32), index=True)
    duplicate_of: Mapped[str | None] = mapped_column(sa.Text, index=True)
    distance: Mapped[int | None] = mapped_column(sa.Integer)
    simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    duplicate_simhash: Mapped[int | None] = mapped_column(Fingerprint64)
    content_hash: Mapped[str | None] = mapped_column(sa.String(128))
    title: Mapped[str | None] = mapped_column(sa.Text)
    text: Mapped[str | None] = mapped_column(sa.Text)
    dropped_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    crawl_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True
    )
    # a page stored first, moved here later (0004): "canonical" (the page it names came),
    # "refreshed" (its fingerprint recomputed once the template was known), "repointed",
    # "preferred" (a preferred twin came), "settled" (the settle step re-decided its group)
    rule: Mapped[str | None] = mapped_column(sa.String(32))
    # revision 0008: what the page's documents row would hold, so the settle step can store
    # it again (crawler.dedup.settle)
    canonical_link: Mapped[str | None] = mapped_column(sa.Text)
    status: Mapped[int | None] = mapped_column(sa.Integer)
    content_type: Mapped[str | None] = mapped_column(sa.String(255))
    encoding: Mapped[str | None] = mapped_column(sa.String(64))
    depth: Mapped[int | None] = mapped_column(sa.Integer)
    referer: Mapped[str | None] = mapped_column(sa.Text)
    fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    young: Mapped[bool | None] = mapped_column(sa.Boolean)


#: Columns computed by the Store on every write (a caller's values for them are ignored).
DERIVED_COLUMNS = ("content_key", "canonical_key")
DOCUMENT_COLUMNS = tuple(c.key for c in Document.__table__.columns if c.key != "id")
DROPPED_COLUMNS = tuple(c.key for c in Dropped.__table__.columns if c.key != "id")
#: Columns written as text, cleaned of what no driver stores (:func:`rows.clean_text`).
TEXT_COLUMNS = frozenset(
    c.key for c in (*Document.__table__.columns, *Dropped.__table__.columns)
    if isinstance(c.type, (sa.Text, sa.String))
)
#: Bounded columns are cut to fit: PostgreSQL refuses a longer value and fails the whole batch.
MAX_LENGTHS = {
    c.key: c.type.length
    for c in (*Document.__table__.columns, *Dropped.__table__.columns)
    if isinstance(c.type, sa.String) and not isinstance(c.type, sa.Text) and c.type.length
}
#: The ``crawls`` columns of the set fingerprints, in :func:`crawl_sets`'s argument order.
SET_COLUMNS = ("url_fingerprint", "url_count", "content_fingerprint", "content_count",
               "page_fingerprint")


def crawl_sets(url_fp: str, url_count: int, content_fp: str, content_count: int,
               page_fp: str) -> CrawlSets:
    """:class:`CrawlSets` from the five ``crawls`` columns."""
    return CrawlSets(SetFingerprint.from_hex(url_fp, url_count),
                     SetFingerprint.from_hex(content_fp, content_count),
                     SetFingerprint.from_hex(page_fp, url_count))


def sets_columns(sets: CrawlSets) -> dict[str, Any]:
    """The five ``crawls`` columns of :class:`CrawlSets`."""
    return {"url_fingerprint": sets.urls.hex(), "url_count": sets.urls.count,
            "content_fingerprint": sets.contents.hex(), "content_count": sets.contents.count,
            "page_fingerprint": sets.pages.hex()}


class RedisGeneration(Base):
    """The highest commit counter of a distributed crawl's Redis that storage recorded
    (revision 0009; :mod:`crawler.cluster.generation`)."""

    __tablename__ = "redis_generations"

    crawl: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    generation: Mapped[int] = mapped_column(sa.BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OverrideRow(Base):
    """A person's override of the dedup rule (revision 0011; :mod:`crawler.dedup.overrides`):
    ``keep`` or ``drop`` of ``target`` (a canonical URL, a URL pattern with ``*`` or
    ``host:NAME``), or ``distinct`` of ``target`` and ``other``. One row per target (per pair):
    a new rule replaces the row in the same transaction."""

    __tablename__ = "overrides"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    action: Mapped[str] = mapped_column(sa.String(16))
    target: Mapped[str] = mapped_column(sa.Text)
    other: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    note: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (sa.Index("ix_overrides_target", "target"),)


class ReviewRow(Base):
    """A person's verdict on one decision (revision 0011; :class:`crawler.dedup.overrides.Review`):
    ``url`` was ``decision`` (``dropped`` as a duplicate of ``other``, or ``kept`` beside it)
    and the person says ``verdict`` (``correct`` | ``wrong``). Every review is kept: the
    newest of a pair is its state, the others its history."""

    __tablename__ = "reviews"

    id: Mapped[int] = mapped_column(_Id, primary_key=True)
    url: Mapped[str] = mapped_column(sa.Text, index=True)
    other: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    decision: Mapped[str] = mapped_column(sa.String(16))
    verdict: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str] = mapped_column(sa.String(32), default="", server_default="")
    distance: Mapped[int | None] = mapped_column(sa.Integer)
    note: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    reviewed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    crawl_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True)

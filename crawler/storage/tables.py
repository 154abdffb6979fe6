"""The tables as SQLAlchemy Core :class:`~sqlalchemy.Table` objects, and the column lists the
Store writes.

``documents`` (one row per kept page), ``dropped`` (one row per page dropped as a duplicate),
``crawls`` (one row per crawl, with the order-free fingerprints of what it stored),
``crawl_documents`` (the pages each crawl stored: what those fingerprints are sums of) and
``redis_generations`` (how far a distributed crawl's Redis had got, revision 0009), ``overrides``
(a person's rules over the dedup rule) and ``reviews`` (verdicts on decisions, 0011); a
distributed crawl's ``crawls`` rows are tied by ``job``, ``worker`` and ``parent_id`` (0010). The
schema itself is versioned by the alembic revisions of :mod:`crawler.storage.migrations`.

Core only: a crawl writes and reads through these and never imports ``sqlalchemy.orm`` (about
0.1 s and several MiB at start-up). The ORM classes the commands and reviews read
(:mod:`crawler.storage.models`) are mapped onto these same tables.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from crawler.content.setfp import ZERO_HEX, CrawlSets, SetFingerprint
from crawler.storage.types import Fingerprint64, UTCDateTime, utcnow

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData()


def _col(name: str, type_: Any, *args: Any, nullable: bool = True, **kwargs: Any) -> sa.Column[Any]:
    return sa.Column(name, type_, *args, nullable=nullable, **kwargs)


#: The rows the unique index on ``crawls.job`` covers: a distributed crawl's own row (0010).
DISTRIBUTED_ONLY = "command = 'distributed'"
#: That partial index. Its ``sqlite_where`` is given here, its ``postgresql_where`` by
#: :func:`add_postgresql_options`: naming a dialect's option makes SQLAlchemy import that
#: dialect, and PostgreSQL's costs a SQLite crawl ~25 ms and 2 MiB at start-up for nothing.
distributed_job_index = sa.Index("ux_crawls_distributed_job", "job", unique=True,
                                 sqlite_where=sa.text(DISTRIBUTED_ONLY))

crawls = sa.Table(
    "crawls", metadata,
    sa.Column("id", _Id, primary_key=True),
    _col("started_at", UTCDateTime, default=utcnow, nullable=False),
    _col("finished_at", UTCDateTime),
    _col("finish_reason", sa.String(64)),
    _col("spider", sa.String(128)),
    _col("seeds", sa.JSON),
    _col("settings", sa.JSON),
    _col("stats", sa.JSON),
    # revision 0007: the JOBDIR job this run belongs to (crawler.state.jobstate.job_id; NULL without
    # JOBDIR) and the command that ran it ("crawl" | "parse"; NULL before 0007)
    _col("job", sa.String(64)),
    _col("command", sa.String(16)),
    # revision 0008: when the settle step last re-decided this crawl's groups (crawler.dedup.settle)
    _col("settled_at", UTCDateTime),
    # revision 0010: a distributed crawl (``job`` = its id) has one ``distributed`` row for the
    # whole crawl and one row per worker (``worker`` = its membership id, ``parent_id`` = the
    # ``distributed`` row)
    _col("worker", sa.String(255)),
    _col("parent_id", sa.BigInteger, index=True),
    # order-free fingerprints of what the crawl stored (crawler.content.setfp; revision 0005), kept
    # up to date in each batch's transaction from ``crawl_documents``
    _col("url_fingerprint", sa.String(32), default=ZERO_HEX, server_default=ZERO_HEX,
         nullable=False),
    _col("url_count", sa.BigInteger, default=0, server_default="0", nullable=False),
    _col("content_fingerprint", sa.String(32), default=ZERO_HEX, server_default=ZERO_HEX,
         nullable=False),
    _col("content_count", sa.BigInteger, default=0, server_default="0", nullable=False),
    _col("page_fingerprint", sa.String(32), default=ZERO_HEX, server_default=ZERO_HEX,
         nullable=False),
    distributed_job_index,
)  # fmt: skip


def add_postgresql_options() -> None:
    """Give :data:`distributed_job_index` its PostgreSQL ``WHERE`` (idempotent); called when a
    PostgreSQL engine is made (:func:`crawler.storage.engine.acquire_engine`), before anything
    compiles or compares the index for that dialect."""
    options = distributed_job_index.dialect_options["postgresql"]
    if options["where"] is None:
        options["where"] = sa.text(DISTRIBUTED_ONLY)


#: One page a crawl stored (revision 0005): what its set fingerprints are sums of. Keyed on
#: ``(crawl_id, canonical_url)``; ``content_hash`` as stored (NULL: none). A crawl's rows change
#: only in that crawl's own batches: a later crawl that stores the page again, or demotes or
#: replaces it, leaves them alone, so a finished crawl keeps what it stored.
crawl_documents = sa.Table(
    "crawl_documents", metadata,
    sa.Column("crawl_id", sa.BigInteger, sa.ForeignKey("crawls.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("canonical_url", sa.Text, primary_key=True),
    _col("content_hash", sa.String(128)),
)  # fmt: skip

documents = sa.Table(
    "documents", metadata,
    sa.Column("id", _Id, primary_key=True),
    _col("url", sa.Text, unique=True, nullable=False),
    _col("canonical_url", sa.Text, index=True, default="", nullable=False),
    _col("title", sa.Text),
    _col("text", sa.Text),
    _col("content_hash", sa.String(128), index=True),
    _col("simhash", Fingerprint64),
    _col("status", sa.Integer),
    _col("content_type", sa.String(255)),
    _col("encoding", sa.String(64)),
    _col("depth", sa.Integer),
    _col("referer", sa.Text),
    _col("fetched_at", UTCDateTime),
    _col("updated_at", UTCDateTime),
    _col("crawl_id", None, sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True),
    # derived on write (signed form of crawler.content.simindex.content_key / url_key): the content
    # index loads these integers instead of hashing every stored string (revision 0002)
    _col("content_key", sa.BigInteger),
    _col("canonical_key", sa.BigInteger),
    # the other page of the crawl this page names canonical, normalized (revision 0004)
    _col("canonical_link", sa.Text),
    # revision 0008: the SimHash was computed while the site's template was unknown
    _col("young", sa.Boolean),
    # covering: the index load reads these four integers without touching the page text
    sa.Index("ix_documents_keys", "id", "simhash", "content_key", "canonical_key"),
    # the shared content index finds kept pages and earlier versions here (revision 0003)
    sa.Index("ix_documents_simhash", "simhash"),
    sa.Index("ix_documents_content_key", "content_key"),
    sa.Index("ix_documents_canonical_key", "canonical_key"),
)  # fmt: skip

dropped = sa.Table(
    "dropped", metadata,
    sa.Column("id", _Id, primary_key=True),
    _col("url", sa.Text, index=True, nullable=False),
    _col("canonical_url", sa.Text),
    _col("reason", sa.String(32), index=True, nullable=False),
    _col("duplicate_of", sa.Text, index=True),
    _col("distance", sa.Integer),
    _col("simhash", Fingerprint64),
    _col("duplicate_simhash", Fingerprint64),
    _col("content_hash", sa.String(128)),
    _col("title", sa.Text),
    _col("text", sa.Text),
    _col("dropped_at", UTCDateTime, default=utcnow, index=True, nullable=False),
    _col("crawl_id", None, sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True),
    # a page stored first, moved here later (0004): "canonical" (the page it names came),
    # "refreshed" (its fingerprint recomputed once the template was known), "repointed",
    # "preferred" (a preferred twin came), "settled" (the settle step re-decided its group)
    _col("rule", sa.String(32)),
    # revision 0008: what the page's documents row would hold, so the settle step can store
    # it again (crawler.dedup.settle)
    _col("canonical_link", sa.Text),
    _col("status", sa.Integer),
    _col("content_type", sa.String(255)),
    _col("encoding", sa.String(64)),
    _col("depth", sa.Integer),
    _col("referer", sa.Text),
    _col("fetched_at", UTCDateTime),
    _col("young", sa.Boolean),
)  # fmt: skip

#: The highest commit counter of a distributed crawl's Redis that storage recorded (revision
#: 0009; :mod:`crawler.cluster.generation`).
redis_generations = sa.Table(
    "redis_generations", metadata,
    sa.Column("crawl", sa.String(255), primary_key=True),
    _col("generation", sa.BigInteger, nullable=False),
    _col("updated_at", UTCDateTime, default=utcnow, nullable=False),
)  # fmt: skip

#: A person's override of the dedup rule (revision 0011; :mod:`crawler.dedup.overrides`):
#: ``keep`` or ``drop`` of ``target`` (a canonical URL, a URL pattern with ``*`` or
#: ``host:NAME``), or ``distinct`` of ``target`` and ``other``. One row per target (per pair):
#: a new rule replaces the row in the same transaction.
overrides = sa.Table(
    "overrides", metadata,
    sa.Column("id", _Id, primary_key=True),
    _col("action", sa.String(16), nullable=False),
    _col("target", sa.Text, nullable=False),
    _col("other", sa.Text, default="", server_default="", nullable=False),
    _col("note", sa.Text, default="", server_default="", nullable=False),
    _col("created_at", UTCDateTime, default=utcnow, nullable=False),
    sa.Index("ix_overrides_target", "target"),
)  # fmt: skip

#: A person's verdict on one decision (revision 0011; :class:`crawler.dedup.overrides.Review`):
#: ``url`` was ``decision`` (``dropped`` as a duplicate of ``other``, or ``kept`` beside it) and
#: the person says ``verdict`` (``correct`` | ``wrong``). Every review is kept: the newest of a
#: pair is its state, the others its history.
reviews = sa.Table(
    "reviews", metadata,
    sa.Column("id", _Id, primary_key=True),
    _col("url", sa.Text, index=True, nullable=False),
    _col("other", sa.Text, default="", server_default="", nullable=False),
    _col("decision", sa.String(16), nullable=False),
    _col("verdict", sa.String(16), nullable=False),
    _col("reason", sa.String(32), default="", server_default="", nullable=False),
    _col("distance", sa.Integer),
    _col("note", sa.Text, default="", server_default="", nullable=False),
    _col("reviewed_at", UTCDateTime, default=utcnow, nullable=False),
    _col("crawl_id", None, sa.ForeignKey("crawls.id", ondelete="SET NULL"), index=True),
)  # fmt: skip


#: Columns computed by the Store on every write (a caller's values for them are ignored).
DERIVED_COLUMNS = ("content_key", "canonical_key")
DOCUMENT_COLUMNS = tuple(c.key for c in documents.columns if c.key != "id")
DROPPED_COLUMNS = tuple(c.key for c in dropped.columns if c.key != "id")
#: Columns written as text, cleaned of what no driver stores (:func:`rows.clean_text`).
TEXT_COLUMNS = frozenset(
    c.key for c in (*documents.columns, *dropped.columns)
    if isinstance(c.type, (sa.Text, sa.String))
)
#: Bounded columns are cut to fit: PostgreSQL refuses a longer value and fails the whole batch.
MAX_LENGTHS = {
    c.key: c.type.length
    for c in (*documents.columns, *dropped.columns)
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

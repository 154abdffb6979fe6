"""The crawl database: the one package that speaks SQL (SQLAlchemy models, engines, queries).

Tables (the schema is versioned by the alembic revisions in :mod:`crawler.storage.migrations`,
applied on open; a database at a newer revision than this code is refused):

``documents``
    One row per kept page, unique on ``url`` (the URL fetched, after redirects); a re-crawl
    updates the row (``updated_at``, ``crawl_id``) instead of failing, also when it meets the
    page under another spelling: the row with the same ``canonical_url`` takes the new ``url``
    (same id) and any other row of that canonical URL is deleted, in the same transaction.
``dropped``
    One row per page dropped as a duplicate: ``reason`` (``exact_duplicate`` |
    ``near_duplicate``), ``duplicate_of`` (URL of the kept page), ``distance`` (Hamming bits),
    and the page's title and text (truncated by the pipeline, ``DROPPED_TEXT_MAX_CHARS``) so a
    decision can be explained after the crawl.
``crawls``
    One row per crawl: start, finish, finish reason, spider, seeds, the settings that shape
    dedup (JSON) and the final stats (JSON); the JOBDIR ``job`` it belongs to (every run of one
    JOBDIR shares it; NULL without JOBDIR) and its ``command`` (``crawl`` | ``parse``); and the
    order-free fingerprints of what it stored
    (:mod:`crawler.content.setfp`: ``url_fingerprint``/``url_count``, ``content_fingerprint``/
    ``content_count``, ``page_fingerprint``, 32 hex digits each), updated in every batch's
    transaction, so two crawls compare in O(1).
``crawl_documents``
    One row per page a crawl stored: ``(crawl_id, canonical_url)``, ``content_hash``; the
    fingerprints are its sums. A re-crawl moves ``documents`` rows to the new crawl; these rows
    keep what each crawl stored (only the crawl's own batches change them).

Fingerprints are unsigned 64-bit ints in Python and a *signed* BIGINT in the database (SQLite
refuses integers >= 2**63); :class:`Fingerprint64` converts both ways, so callers never see the
signed form. Timestamps are stored in UTC and read back timezone-aware.

Connections: one engine per process and URL, shared (reference counted) by every Store. SQLite runs
in WAL mode (readers never block the writer) with ``synchronous=FULL`` (a commit is on disk when it
returns), a 30 s busy timeout, foreign keys on, a 64 MiB page cache, temporary storage in memory
and a checkpoint every 10,000 WAL pages (:mod:`crawler.storage.engine` says why); its parent
directory must exist. PostgreSQL (``postgresql+psycopg://``; ``postgresql://`` means the same)
pings pooled connections before use, so a restarted server costs one retry, and migrations take an
advisory lock, so workers starting together migrate once. (Two *processes* creating the same fresh
SQLite file at the same instant are not guarded: one fails and can simply be restarted.)

Text columns cannot hold NUL characters on PostgreSQL and unpaired surrogates on any driver:
both are removed or replaced on write; bounded columns (``content_type``...) are cut to fit.
Every driver error surfaces as :class:`StorageError` naming the URL (password masked) and what
to check. Methods are blocking: call them from a worker thread inside a crawl.

Modules, one idea each:

==============  ==============================================================================
``types``       column types: :class:`Fingerprint64`, :class:`UTCDateTime`, time parsing
``models``      the tables (:class:`Document`, :class:`Dropped`, :class:`Crawl`...), columns
``engine``      :class:`StorageError`, URL parsing and masking, the engine pool
``rows``        rows as written: text cleaning, :func:`dedup_settings`, :func:`chunked`
``keys``        :class:`KeyArrays`, the integer keys the content index loads
``base``        :class:`StoreBase`: connection, migration on open, error wrapping
``write``       the Store's write side (batches, demotions, crawl start and finish)
``sets``        the crawls' set fingerprints, kept with every batch and read back
``read``        the Store's read side (index loads, lookups, drops, crawls, JOBDIR resume)
``store``       :class:`Store`, both sides together
``reader``      :class:`CrawlReader`: a database reflected read-only for review (crawls, runs)
``pages``       :class:`PageReader`: its pages and drops (listing, lookups, report rows)
``check``       :class:`StorageSettings` and :func:`check_storage`, before a crawl
``ownership``   another program's database and a read-only one refused (before any write)
``scratch``     throw-away PostgreSQL schemas and bulk loads for tests and benchmarks
``migrations``  the alembic revisions, applied on open
==============  ==============================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.outputs.formats import jsonable
from crawler.storage.check import (
    SettleOptions,
    StorageSettings,
    check_storage,
    settle_options,
    write_options,
)
from crawler.storage.engine import (
    PG_CONNECT_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_MS,
    StorageError,
    acquire_engine,
    first_line,
    mask_url,
    parse_url,
    release_engine,
    wrap_error,
)
from crawler.storage.keys import KEY_BATCH, KeyArrays
from crawler.storage.ownership import ForeignDatabaseError
from crawler.storage.pages import PageReader
from crawler.storage.reader import ReviewError, Run, resolve_db_url
from crawler.storage.rows import chunked, clean_text, dedup_settings
from crawler.storage.store import Store
from crawler.storage.tables import (
    DERIVED_COLUMNS,
    DOCUMENT_COLUMNS,
    DROPPED_COLUMNS,
    SET_COLUMNS,
)
from crawler.storage.types import (
    Fingerprint64,
    UTCDateTime,
    optional_time,
    parse_time,
    to_signed64,
    to_unsigned64,
    utcnow,
)

if TYPE_CHECKING:
    from crawler.storage.models import Base, Crawl, CrawlDocument, Document, Dropped

#: The ORM classes, imported on first use (:func:`__getattr__`): a crawl reads and writes
#: through Core tables (:mod:`crawler.storage.tables`) and never pays for ``sqlalchemy.orm``.
_ORM_NAMES = frozenset({"Base", "Crawl", "CrawlDocument", "Document", "Dropped"})


def __getattr__(name: str) -> Any:
    if name in _ORM_NAMES:
        from crawler.storage import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DERIVED_COLUMNS",
    "DOCUMENT_COLUMNS",
    "DROPPED_COLUMNS",
    "KEY_BATCH",
    "PG_CONNECT_TIMEOUT_S",
    "SET_COLUMNS",
    "SQLITE_BUSY_TIMEOUT_MS",
    "Base",
    "Crawl",
    "CrawlDocument",
    "Document",
    "Dropped",
    "Fingerprint64",
    "ForeignDatabaseError",
    "KeyArrays",
    "PageReader",
    "ReviewError",
    "Run",
    "SettleOptions",
    "StorageError",
    "StorageSettings",
    "Store",
    "UTCDateTime",
    "acquire_engine",
    "check_storage",
    "chunked",
    "clean_text",
    "dedup_settings",
    "first_line",
    "jsonable",
    "mask_url",
    "optional_time",
    "parse_time",
    "parse_url",
    "release_engine",
    "resolve_db_url",
    "settle_options",
    "to_signed64",
    "to_unsigned64",
    "utcnow",
    "wrap_error",
    "write_options",
]

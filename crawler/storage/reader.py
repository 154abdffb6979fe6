"""Read-only access to a crawl database for review (:class:`CrawlReader`): what ``scrapy
dropped``, ``scrapy dedupreport`` and :mod:`crawler.review` ask of a database.

A database is opened read-only in spirit: no table is created, no row written, and a SQLite file
that does not exist is reported, never created. Tables are reflected from the database
(``documents``, ``dropped``, ``crawls``), so optional columns (``title``, ``text``, ``job``...)
may be absent in an older file. Every query is SQLAlchemy Core with bound parameters; rows come
back as dicts with fingerprints unsigned. Every failure is a :class:`ReviewError` with a
one-line message naming the database (password masked) and what to do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa

from crawler.content.simhash import to_unsigned
from crawler.outputs import formats
from crawler.storage.engine import first_line, mask_url

FINGERPRINT_COLUMNS = ("simhash", "duplicate_simhash")
#: Environment variables that may hold the real URL of a masked ``--db`` (besides the
#: ``STORAGE_URL`` setting); ``settings.distributed`` reads the same one.
REAL_URL_ENV = ("DEDUP_STORAGE_URL",)


class ReviewError(Exception):
    """A database or log cannot be reviewed; the message is one line saying what to do."""


@dataclass(frozen=True)
class Run:
    """One ``crawls`` row as the selection of crawls sees it."""

    id: int
    job: str | None  # JOBDIR job id (revision 0007) or distributed crawl id; None without
    command: str | None  # "crawl" | "parse" | "distributed"; None before revision 0007
    worker: str | None = None  # a distributed worker's membership id (revision 0010)
    parent_id: int | None = None  # a distributed worker's crawl's own row (revision 0010)


def resolve_db_url(value: str, known: Iterable[str | None] = ()) -> str:
    """A SQLAlchemy URL for ``value``; a plain file path means ``sqlite:///path``.

    A masked URL (``postgresql://u:***@db/crawl``, as reports and logs print it) stands for
    the real URL that masks to it, taken from ``known`` (the command's ``STORAGE_URL``) or
    the environment variables :data:`REAL_URL_ENV`; so a command copied from a report works
    where the crawl's settings are. Raises :class:`ReviewError` when no real URL matches, or
    when a SQLite file does not exist (opening it would create it).
    """
    value = value.strip()
    if "://" not in value:
        value = "sqlite:///" + str(Path(value).expanduser().resolve())
    if formats.is_masked(value):
        value = _unmasked(value, known)
    try:
        url = sa.engine.make_url(value)
    except sa.exc.ArgumentError:
        raise ReviewError(
            f"{mask_url(value)!r} is neither a database URL nor a file path") from None
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:"):
            raise ReviewError(f"{mask_url(value)}: an in-memory SQLite database holds no crawl")
        if not Path(database).is_file():
            raise ReviewError(
                f"database {database} does not exist; run a crawl first or pass --db URL"
            )
    return value


def _unmasked(value: str, known: Iterable[str | None]) -> str:
    """The real URL behind the masked ``value`` (:func:`resolve_db_url`)."""
    candidates = [*known, *(os.environ.get(name) for name in REAL_URL_ENV)]
    real = formats.unmask(value, candidates)
    if real is None:
        raise ReviewError(
            f"{value} hides its password (***), as reports print it: set STORAGE_URL "
            f"(-s STORAGE_URL=... or the project settings) or the {REAL_URL_ENV[0]} "
            "environment variable to the real URL, or pass the real URL with --db")
    return real


def masked(url: str) -> str:
    """``url`` as SQLAlchemy prints it with the password hidden (``<bad URL>`` if unparsable)."""
    try:
        return mask_url(sa.engine.make_url(url))
    except sa.exc.ArgumentError:
        return "<bad URL>"


def _json_value(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, bytes)) and value:
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def _driver_problem(exc: BaseException) -> str:
    """One line for a URL SQLAlchemy cannot open: a missing driver or an unknown dialect."""
    if isinstance(exc, ModuleNotFoundError):
        return f"its driver {exc.name!r} is not installed"
    return first_line(exc)


def _reflect(url: str) -> tuple[sa.Engine, dict[str, sa.Table]]:
    """The engine of ``url`` and its reflected tables; :class:`ReviewError` when it is not a
    crawl database."""
    try:
        engine = sa.create_engine(url)
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise ReviewError(f"cannot open database {masked(url)}: {_driver_problem(exc)}; "
                          "a crawl database is sqlite:///PATH or "
                          "postgresql+psycopg://USER@HOST/DB") from None
    meta = sa.MetaData()
    try:
        meta.reflect(bind=engine)
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        raise ReviewError(f"cannot read database {masked(url)}: {first_line(exc)}") from None
    missing = [name for name in ("documents", "dropped") if name not in meta.tables]
    if missing:
        engine.dispose()
        raise ReviewError(
            f"database {masked(url)} is not a crawl database (no {', '.join(missing)} "
            "table); run a crawl into it first"
        )
    return engine, dict(meta.tables)


class ReaderBase:
    """A reflected crawl database: its engine, tables and the one way rows are read."""

    TABLES = ("documents", "dropped", "crawls")

    def __init__(self, engine: sa.Engine, tables: dict[str, sa.Table], url: str) -> None:
        self.engine = engine
        self.url = url
        self.tables = tables
        self.documents = tables["documents"]
        self.dropped_table = tables["dropped"]
        self.crawls = tables.get("crawls")

    @classmethod
    def open(cls, value: str, known: Iterable[str | None] = ()) -> Self:
        """The crawl database at ``value`` (URL or SQLite path; a masked URL is resolved from
        ``known`` as :func:`resolve_db_url` says): URL, file and tables checked,
        :class:`ReviewError` (one line naming the database) when it cannot be reviewed."""
        url = resolve_db_url(value, known)
        engine, tables = _reflect(url)
        return cls(engine, tables, url)

    @property
    def masked_url(self) -> str:
        """The database's URL with the password hidden, as messages name it."""
        return masked(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, query: sa.Select) -> list[dict[str, Any]]:
        try:
            with self.engine.connect() as conn:
                rows = [dict(row._mapping) for row in conn.execute(query)]
        except sa.exc.SQLAlchemyError as exc:
            raise ReviewError(f"query on {self.masked_url} failed: {first_line(exc)}") from None
        for row in rows:  # the signed BIGINT form never leaves storage
            for name in FINGERPRINT_COLUMNS:
                if row.get(name) is not None:
                    row[name] = to_unsigned(int(row[name]))
        return rows

    def _scalar(self, query: sa.Select) -> Any:
        rows = self._rows(query)
        return next(iter(rows[0].values())) if rows else None

    def _optional(self, table: sa.Table, *names: str) -> list[sa.Column[Any]]:
        """The columns of ``names`` the table has (older databases lack some)."""
        return [table.c[name] for name in names if name in table.c]


class CrawlReader(ReaderBase):
    """Which crawls a database records, and whether they own pages."""

    def crawl_ids(self) -> list[int]:
        if self.crawls is None:
            return []
        return [row["id"] for row in self._rows(sa.select(self.crawls.c.id).order_by("id"))]

    def require_content(self) -> None:
        """Raise :class:`ReviewError` when the database holds no crawl and no page."""
        if self.crawl_ids():
            return
        pages = self._scalar(sa.select(sa.func.count()).select_from(self.documents)) or 0
        drops = self._scalar(sa.select(sa.func.count()).select_from(self.dropped_table)) or 0
        if not pages and not drops:
            raise ReviewError(f"database {self.masked_url} is empty: no crawl has run into it")

    def crawl(self, crawl_id: int | None = None) -> dict[str, Any]:
        """The ``crawls`` row (``settings`` and ``stats`` parsed); the latest when no id.

        Raises :class:`ReviewError` for an unknown id, naming the ids that exist.
        """
        ids = self.crawl_ids()
        if crawl_id is None:
            if not ids:
                raise ReviewError(f"database {self.masked_url} records no crawl")
            crawl_id = ids[-1]
        if crawl_id not in ids:
            known = ", ".join(map(str, ids[-10:])) or "none"
            raise ReviewError(f"unknown crawl {crawl_id} in {self.masked_url} (crawls: {known})")
        assert self.crawls is not None
        row = self._rows(sa.select(self.crawls).where(self.crawls.c.id == crawl_id))[0]
        row["settings"] = _json_value(row.get("settings"))
        row["stats"] = _json_value(row.get("stats"))
        return row

    def check_crawl(self, crawl_id: int | None) -> None:
        if crawl_id is not None:
            self.crawl(crawl_id)

    # --- runs and jobs (crawls.job / crawls.command: revision 0007) ------------------------

    def runs(self) -> list[Run]:
        """Every crawl as a :class:`Run`, oldest first (job and command None before 0007)."""
        if self.crawls is None:
            return []
        c = self.crawls.c
        optional = self._optional(self.crawls, "job", "command", "worker", "parent_id")
        rows = self._rows(sa.select(c.id, *optional).order_by(c.id))
        return [Run(row["id"], row.get("job"), row.get("command"), row.get("worker"),
                    row.get("parent_id")) for row in rows]

    def records_jobs(self) -> bool:
        """False when the schema predates jobs (no ``crawls.job`` column)."""
        return self.crawls is None or "job" in self.crawls.c

    def latest_crawl(self) -> int | None:
        """The id of the newest crawl; None when the database records none."""
        ids = self.crawl_ids()
        return ids[-1] if ids else None

    def job_crawls(self, job: str) -> list[int]:
        """The ids of every run of ``job``, oldest first ([] for an unknown job)."""
        return [run.id for run in self.runs() if run.job == job]

    # --- which crawls own pages -------------------------------------------------------------

    def has_pages(self, crawl_id: int) -> bool:
        """True when the crawl owns a stored page or a drop record (what a report counts)."""
        return self._owns(self.documents, crawl_id) or self.has_drops(crawl_id)

    def has_drops(self, crawl_id: int) -> bool:
        return self._owns(self.dropped_table, crawl_id)

    def crawls_with_pages(self) -> list[int]:
        """Ids of the crawls that own pages or drops, oldest first (one indexed probe each)."""
        return [crawl_id for crawl_id in self.crawl_ids() if self.has_pages(crawl_id)]

    def latest_with_pages(self) -> int | None:
        return next((i for i in reversed(self.crawl_ids()) if self.has_pages(i)), None)

    def latest_with_drops(self) -> int | None:
        return next((i for i in reversed(self.crawl_ids()) if self.has_drops(i)), None)

    def drop_counts(self) -> dict[int, int]:
        """Dropped pages per crawl id (rows whose crawl was deleted are not counted)."""
        t = self.dropped_table
        query = sa.select(t.c.crawl_id, sa.func.count().label("n")).where(
            t.c.crawl_id.is_not(None)).group_by(t.c.crawl_id)
        return {row["crawl_id"]: row["n"] for row in self._rows(query)}

    def _owns(self, table: sa.Table, crawl_id: int) -> bool:
        query = sa.select(table.c.id).where(table.c.crawl_id == crawl_id).limit(1)
        return bool(self._rows(query))

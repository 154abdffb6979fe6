"""Read a crawl database for review: drop records, filters, and the ``--explain`` comparison.

The library behind ``scrapy dropped`` and ``scrapy dedupreport``; it imports no Scrapy component.
It only reads: a database is opened read-only in spirit (no table is created, no row written) and
a SQLite file that does not exist is reported, never created.

Tables are reflected from the database (``documents``, ``dropped``, ``crawls``, as written by
:mod:`crawler.storage`), so optional columns (``title``, ``text``) may be absent in an older file.
Every query is SQLAlchemy Core with bound parameters.

Which crawls a command reports: :func:`select_crawls` (``--crawl ID``, ``--job [JOB]`` or
neither: the latest crawl) returns the ids and a one-line note for stderr; a crawl resumed from
``JOBDIR`` records one ``crawls`` row per run, tied by ``crawls.job`` (revision 0007; a database
not yet upgraded reads as having no jobs).

Records come out as :class:`DropRecord`: the JSON Lines fields of the drop log (``url``,
``reason``, ``duplicate_of``, ``distance``, ``simhash``/``duplicate_simhash`` as 16 hex digits,
``time`` ISO 8601 UTC, ``crawl_id``) plus ``canonical_url`` and ``title`` when the source has them.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from crawler import defaults
from crawler.storage import first_line

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

logger = logging.getLogger(__name__)

MASK64 = (1 << 64) - 1
REASONS = ("exact_duplicate", "near_duplicate")


class ReviewError(Exception):
    """A database or log cannot be reviewed; the message is one line saying what to do."""


# --- values ----------------------------------------------------------------------------------


def unsigned64(value: int | None) -> int | None:
    """The unsigned form of a fingerprint stored as a signed BIGINT."""
    return None if value is None else int(value) & MASK64


def hex64(value: int | str | None) -> str | None:
    """A fingerprint as 16 lower-case hex digits (ints of either sign, or hex text)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return f"{int(value, 16) & MASK64:016x}"
    return f"{int(value) & MASK64:016x}"


def iso_utc(value: object) -> str | None:
    """A stored time (datetime, naive = UTC, or ISO text) as ISO 8601 UTC."""
    when = parse_time(value)
    return None if when is None else when.isoformat()


def parse_time(value: object) -> datetime | None:
    """Parse a datetime or ISO 8601 text (``Z`` accepted); naive values are taken as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        when = value
    else:
        text = str(value).strip().replace("Z", "+00:00").replace(" ", "T", 1)
        when = datetime.fromisoformat(text)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def host_of(url: str | None) -> str:
    """The lower-case host name of a URL, without port ('' when there is none)."""
    try:
        return (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return ""


# --- records and filters -------------------------------------------------------------------


@dataclass(frozen=True)
class DropRecord:
    """One dropped page, from the ``dropped`` table or the JSON Lines log."""

    url: str
    reason: str
    duplicate_of: str
    distance: int | None
    simhash: str | None
    duplicate_simhash: str | None
    time: str | None
    crawl_id: int | None
    canonical_url: str | None = None
    title: str | None = None
    rule: str | None = None  # "canonical": stored first, dropped for the page it names

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass
class DropFilter:
    """The ``scrapy dropped`` filters; ``None`` means "any"."""

    reason: str | None = None
    host: str | None = None
    min_distance: int | None = None
    max_distance: int | None = None
    crawl_id: int | None = None
    since: datetime | None = None
    limit: int | None = None

    def matches(self, record: DropRecord) -> bool:
        """True when ``record`` passes every filter (``limit`` aside)."""
        if self.reason and record.reason != self.reason:
            return False
        if self.crawl_id is not None and record.crawl_id != self.crawl_id:
            return False
        if not self._distance_ok(record.distance):
            return False
        if self.host and not host_matches(record.url, self.host):
            return False
        when = parse_time(record.time)
        return not (self.since and (when is None or when < self.since))

    def _distance_ok(self, distance: int | None) -> bool:
        if self.min_distance is None and self.max_distance is None:
            return True
        if distance is None:
            return False
        lo_ok = self.min_distance is None or distance >= self.min_distance
        return lo_ok and (self.max_distance is None or distance <= self.max_distance)


def host_matches(url: str, host: str) -> bool:
    """``host`` matches the URL's host itself or any subdomain of it (``a.example.com``)."""
    want = host.lower().strip().rstrip(".")
    if ":" in want and not want.startswith("["):
        want = want.split(":", 1)[0]
    have = host_of(url)
    return have == want or have.endswith("." + want)


def apply_filter(records: Iterable[DropRecord], flt: DropFilter) -> list[DropRecord]:
    """Filter records already sorted newest first, stopping at ``flt.limit``."""
    out: list[DropRecord] = []
    for record in records:
        if flt.limit is not None and len(out) >= flt.limit:
            break
        if flt.matches(record):
            out.append(record)
    return out


# --- the JSON Lines log ----------------------------------------------------------------------


def read_log(path: str | Path, flt: DropFilter | None = None) -> list[DropRecord]:
    """Records of a drop log, newest first, filtered; a torn last line is skipped.

    Raises :class:`ReviewError` for a missing file or a bad line that is not the last one.
    """
    path = Path(path)
    if not path.is_file():
        raise ReviewError(f"drop log {path} does not exist; pass the DROPPED_LOG file of a crawl")
    records = [_record_from_log(obj) for obj in _log_objects(path)]
    records.sort(key=lambda r: parse_time(r.time) or datetime.min.replace(tzinfo=UTC),
                 reverse=True)
    return apply_filter(records, flt or DropFilter())


def _log_objects(path: Path) -> Iterator[dict[str, Any]]:
    from crawler.droplog import read_drop_log  # tolerant of a torn last line

    try:
        yield from read_drop_log(path)
    except ValueError as exc:  # DropLogError names the file and the line
        raise ReviewError(f"damaged drop log: {exc}") from None
    except OSError as exc:
        raise ReviewError(f"cannot read drop log {path}: {exc.strerror or exc}") from None


def _record_from_log(obj: dict[str, Any]) -> DropRecord:
    distance = obj.get("distance")
    crawl_id = obj.get("crawl_id")
    return DropRecord(
        url=str(obj.get("url", "")),
        reason=str(obj.get("reason", "")),
        duplicate_of=str(obj.get("duplicate_of", "")),
        distance=None if distance is None else int(distance),
        simhash=hex64(obj.get("simhash")),
        duplicate_simhash=hex64(obj.get("duplicate_simhash")),
        time=iso_utc(obj.get("time")),
        crawl_id=None if crawl_id is None else int(crawl_id),
        rule=obj.get("rule") or None,
    )


# --- the database ----------------------------------------------------------------------------


def resolve_db_url(value: str) -> str:
    """A SQLAlchemy URL for ``value``; a plain file path means ``sqlite:///path``.

    Raises :class:`ReviewError` when a SQLite file does not exist (opening it would create it).
    """
    value = value.strip()
    if "://" not in value:
        value = "sqlite:///" + str(Path(value).expanduser().resolve())
    try:
        url = sa.engine.make_url(value)
    except sa.exc.ArgumentError:
        raise ReviewError(f"{value!r} is neither a database URL nor a file path") from None
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:"):
            raise ReviewError(f"{value}: an in-memory SQLite database holds no crawl")
        if not Path(database).is_file():
            raise ReviewError(
                f"database {database} does not exist; run a crawl first or pass --db URL"
            )
    return value


def masked(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
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


class CrawlDB:
    """Read access to a crawl database (tables reflected, nothing created).

    Use :meth:`open`, which checks the URL, the file and the tables and raises
    :class:`ReviewError` with a one-line message naming the database (password masked).
    """

    TABLES = ("documents", "dropped", "crawls")

    def __init__(self, engine: sa.Engine, tables: dict[str, sa.Table], url: str) -> None:
        self.engine = engine
        self.url = url
        self.documents = tables["documents"]
        self.dropped_table = tables["dropped"]
        self.crawls = tables.get("crawls")

    @classmethod
    def open(cls, value: str) -> CrawlDB:
        url = resolve_db_url(value)
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
        return cls(engine, dict(meta.tables), url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> CrawlDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, query: sa.Select) -> list[dict[str, Any]]:
        try:
            with self.engine.connect() as conn:
                return [dict(row._mapping) for row in conn.execute(query)]
        except sa.exc.SQLAlchemyError as exc:
            raise ReviewError(f"query on {masked(self.url)} failed: {first_line(exc)}") from None

    def _scalar(self, query: sa.Select) -> Any:
        rows = self._rows(query)
        return next(iter(rows[0].values())) if rows else None

    # --- crawls --------------------------------------------------------------------------

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
            raise ReviewError(f"database {masked(self.url)} is empty: no crawl has run into it")

    def crawl(self, crawl_id: int | None = None) -> dict[str, Any]:
        """The ``crawls`` row (``settings`` and ``stats`` parsed); the latest when no id.

        Raises :class:`ReviewError` for an unknown id, naming the ids that exist.
        """
        ids = self.crawl_ids()
        if crawl_id is None:
            if not ids:
                raise ReviewError(f"database {masked(self.url)} records no crawl")
            crawl_id = ids[-1]
        if crawl_id not in ids:
            known = ", ".join(map(str, ids[-10:])) or "none"
            raise ReviewError(f"unknown crawl {crawl_id} in {masked(self.url)} (crawls: {known})")
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
        extra = [c[name] for name in ("job", "command") if name in c]
        rows = self._rows(sa.select(c.id, *extra).order_by(c.id))
        return [Run(row["id"], row.get("job"), row.get("command")) for row in rows]

    def latest_crawl(self) -> int | None:
        """The id of the newest crawl; None when the database records none."""
        ids = self.crawl_ids()
        return ids[-1] if ids else None

    def job_crawls(self, job: str) -> list[int]:
        """The ids of every run of ``job``, oldest first ([] for an unknown job)."""
        return [run.id for run in self.runs() if run.job == job]

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

    def _owns(self, table: sa.Table, crawl_id: int) -> bool:
        query = sa.select(table.c.id).where(table.c.crawl_id == crawl_id).limit(1)
        return bool(self._rows(query))

    def select(self, crawl_id: int | None = None, job: str | None = None) -> Selection:
        """The crawls a command reports: see :func:`select_crawls`."""
        return select_crawls(self, crawl_id, job)

    # --- dropped pages -------------------------------------------------------------------

    def dropped(self, flt: DropFilter | None = None) -> list[DropRecord]:
        """Drop records newest first, filtered (reason, crawl and distance in SQL)."""
        flt = flt or DropFilter()
        t = self.dropped_table
        query = sa.select(t)
        if flt.reason:
            query = query.where(t.c.reason == flt.reason)
        if flt.crawl_id is not None:
            query = query.where(t.c.crawl_id == flt.crawl_id)
        if flt.min_distance is not None:
            query = query.where(t.c.distance >= flt.min_distance)
        if flt.max_distance is not None:
            query = query.where(t.c.distance <= flt.max_distance)
        if flt.limit is not None and not (flt.host or flt.since):
            query = query.limit(flt.limit)
        query = query.order_by(t.c.dropped_at.desc(), t.c.id.desc())
        return apply_filter((self._record(row) for row in self._rows(query)), flt)

    def _record(self, row: dict[str, Any]) -> DropRecord:
        return DropRecord(
            url=row["url"],
            reason=row["reason"],
            duplicate_of=row["duplicate_of"],
            distance=row.get("distance"),
            simhash=hex64(row.get("simhash")),
            duplicate_simhash=hex64(row.get("duplicate_simhash")),
            time=iso_utc(row.get("dropped_at")),
            crawl_id=row.get("crawl_id"),
            canonical_url=row.get("canonical_url"),
            title=row.get("title"),
            rule=row.get("rule"),
        )

    def dropped_row(self, url: str) -> dict[str, Any] | None:
        """The newest ``dropped`` row for ``url``: on url, then canonical_url (also normalized)."""
        t = self.dropped_table
        for column, value in _lookups(url, t):
            query = sa.select(t).where(t.c[column] == value)
            rows = self._rows(query.order_by(t.c.dropped_at.desc(), t.c.id.desc()).limit(1))
            if rows:
                return rows[0]
        return None

    def document(self, url: str) -> dict[str, Any] | None:
        """The ``documents`` row for ``url``: on url, then canonical_url (also normalized)."""
        t = self.documents
        for column, value in _lookups(url, t):
            rows = self._rows(sa.select(t).where(t.c[column] == value).limit(1))
            if rows:
                return rows[0]
        return None


# --- choosing the crawls to report ------------------------------------------------------------

LATEST_JOB = "latest"  # ``--job`` without an id; generated job ids are hex, never this word


@dataclass(frozen=True)
class Run:
    """One ``crawls`` row as the selection sees it."""

    id: int
    job: str | None  # JOBDIR job id (revision 0007); None without JOBDIR or before 0007
    command: str | None  # "crawl" | "parse"; None before revision 0007


@dataclass(frozen=True)
class Selection:
    """The crawls a command reports, oldest first, and the one-line note saying why."""

    crawl_ids: list[int]
    note: str
    job: str | None = None

    @property
    def report_arg(self) -> int | list[int]:
        """What ``report.build_report`` takes: one id, or the list of a job's runs."""
        return self.crawl_ids[0] if len(self.crawl_ids) == 1 else list(self.crawl_ids)

    @property
    def label(self) -> str:
        if self.job is None:
            return f"crawl {self.crawl_ids[0]}"
        return f"job {self.job} ({_crawls_phrase(self.crawl_ids)})"


def select_crawls(db: CrawlDB, crawl_id: int | None = None,
                  job: str | None = None) -> Selection:
    """The crawls to report for ``--crawl ID``, ``--job [ID]`` or neither.

    * neither: the latest crawl; the note says so, and when that crawl is one run of a JOBDIR
      job with several runs, that ``--job`` reports them all as one;
    * ``crawl_id``: that crawl;
    * ``job``: every run of that job (:data:`LATEST_JOB`: of the newest crawl that has a job).

    Raises :class:`ReviewError` (one line) for both given, an unknown crawl or job, a job asked
    of crawls that ran without JOBDIR, and a chosen crawl or job without pages — naming the
    crawls that have pages and the option to use.
    """
    if crawl_id is not None and job is not None:
        raise ReviewError("--crawl and --job each pick the crawls to report; give one of them")
    runs = db.runs()
    if not runs:
        raise ReviewError(f"database {masked(db.url)} records no crawl")
    if job is not None:
        return _select_job(db, runs, job)
    return _select_crawl(db, runs, crawl_id)


def _select_crawl(db: CrawlDB, runs: list[Run], crawl_id: int | None) -> Selection:
    by_id = {run.id: run for run in runs}
    latest = runs[-1].id
    if crawl_id is not None and crawl_id not in by_id:
        db.crawl(crawl_id)  # raises: unknown crawl, naming those that exist
    run = by_id[latest if crawl_id is None else crawl_id]
    siblings = [r.id for r in runs if run.job is not None and r.job == run.job]
    if not db.has_pages(run.id):
        raise ReviewError(empty_crawl_message(db, runs, run, siblings))
    if crawl_id is None:
        how = "the only crawl" if len(runs) == 1 else f"latest of {len(runs)}"
    else:
        how = f"as asked; the latest is {latest}"
    parse = ", a scrapy parse run" if run.command == "parse" else ""
    note = f"report of crawl {run.id} ({how}{parse})"
    if len(siblings) > 1:
        note += (f"; it is run {siblings.index(run.id) + 1} of {len(siblings)} of JOBDIR job "
                 f"{run.job} ({_crawls_phrase(siblings)}): --job {run.job} reports them as one")
    elif len(runs) > 1:
        note += "; --crawl ID for another"
    return Selection([run.id], note)


def _select_job(db: CrawlDB, runs: list[Run], job: str) -> Selection:
    jobs = [run.job for run in runs if run.job is not None]
    how = f"job {job}"
    if job == LATEST_JOB:
        if not jobs:
            raise ReviewError(_no_jobs_message(db, runs))
        job, how = jobs[-1], f"job {jobs[-1]} (the latest job)"
    ids = [run.id for run in runs if run.job == job]
    if not ids:
        known = ", ".join(dict.fromkeys(reversed(jobs))) if jobs else "none"
        raise ReviewError(f"unknown job {job!r} in {masked(db.url)} (jobs, newest first: "
                          f"{known}); --job alone picks the latest")
    if not any(db.has_pages(crawl_id) for crawl_id in ids):
        raise ReviewError(f"job {job} has no pages: its runs ({_crawls_phrase(ids)}) stored and "
                          f"dropped nothing{_pages_hint(db, runs)}")
    note = f"report of {how}: {_crawls_phrase(ids)} as one; --crawl ID for one run"
    return Selection(ids, note, job)


def empty_crawl_message(db: CrawlDB, runs: list[Run], run: Run, siblings: list[int]) -> str:
    """``crawl 2 has no pages (a scrapy parse run); crawls with pages: 1; use --crawl 1``."""
    why = "a scrapy parse run" if run.command == "parse" else "it stored and dropped nothing"
    message = f"crawl {run.id} has no pages ({why})"
    job_pages = [i for i in siblings if i != run.id and db.has_pages(i)]
    if job_pages:
        return (f"{message}; other runs of its JOBDIR job {run.job} have pages "
                f"({_crawls_phrase(job_pages)}); use --job {run.job}")
    return message + _pages_hint(db, runs)


def _pages_hint(db: CrawlDB, runs: list[Run]) -> str:
    with_pages = db.crawls_with_pages()
    if not with_pages:
        return "; no crawl in this database has pages"
    hint = f"; crawls with pages: {_id_list(with_pages)}; use --crawl {with_pages[-1]}"
    job = next(run.job for run in runs if run.id == with_pages[-1])
    if job is not None and sum(run.job == job for run in runs) > 1:
        hint += f", or --job {job} for all runs of its JOBDIR job"
    return hint


def _no_jobs_message(db: CrawlDB, runs: list[Run]) -> str:
    message = f"no crawl in {masked(db.url)} ran with JOBDIR, so none belongs to a job"
    if db.crawls is not None and "job" not in db.crawls.c:
        message += " (its schema predates jobs: a new crawl into it adds them)"
    return message + f"; use --crawl ID (latest: {runs[-1].id})"


def _id_list(ids: list[int], shown: int = 10) -> str:
    text = ", ".join(map(str, ids[-shown:]))
    return text if len(ids) <= shown else f"… {text} ({len(ids)} in all)"


def _crawls_phrase(ids: list[int]) -> str:
    return f"crawl {ids[0]}" if len(ids) == 1 else f"crawls {_id_list(ids)}"


def _lookups(url: str, table: sa.Table) -> list[tuple[str, str]]:
    """Where to look a URL up: as given, then its canonical form (as the crawl keyed it)."""
    out = [(c, url) for c in ("url", "canonical_url") if c in table.c]
    try:
        from crawler.urlnorm import normalize_url

        canonical = normalize_url(url)
    except (ImportError, ValueError):
        return out
    if canonical != url:
        out += [(c, canonical) for c in ("canonical_url", "url") if c in table.c]
    return out


# --- explain: one decision, side by side -----------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Page:
    """One side of an explanation: a kept document or a dropped page."""

    url: str
    title: str | None
    text: str
    simhash: int | None
    content_hash: str | None
    kept: bool


@dataclass
class Explanation:
    """Why ``dropped`` was judged a duplicate of ``kept`` (or how two kept pages compare)."""

    dropped: Page
    kept: Page
    reason: str
    stored_distance: int | None
    distance: int | None
    max_distance: int
    blocks: list[tuple[int, int]]
    matched_blocks: list[int]
    exact: bool | None
    words_only_dropped: Counter[str]
    words_only_kept: Counter[str]
    lines_only_dropped: Counter[str]
    lines_only_kept: Counter[str]
    notes: list[str] = field(default_factory=list)
    rule: str | None = None  # "canonical": the canonical rule chose which page to keep

    @property
    def identical_text(self) -> bool:
        return self.dropped.text == self.kept.text


def block_ranges(blocks: int) -> list[tuple[int, int]]:
    """``(start, width)`` of each block table, in bits from the most significant bit.

    The layout of :func:`crawler.simindex.block_layout`: 64 bits cut into ``blocks`` contiguous
    blocks, the first ``64 % blocks`` one bit wider. Two fingerprints within k bits agree on at
    least one of ``k + 1`` blocks (pigeonhole), which is how the index finds the candidate.
    """
    from crawler.simindex import block_layout

    return block_layout(max(1, min(64, blocks)))


def matching_blocks(a: int, b: int, ranges: list[tuple[int, int]]) -> list[int]:
    """Indexes (0-based, most significant block first) of the blocks where ``a`` equals ``b``."""
    diff = (a ^ b) & MASK64
    out = []
    for index, (start, width) in enumerate(ranges):
        mask = ((1 << width) - 1) << (64 - start - width)
        if not diff & mask:
            out.append(index)
    return out


def crawl_thresholds(settings: dict[str, Any]) -> tuple[int, int]:
    """``(k, blocks)`` from a crawl's stored settings (project defaults when absent)."""
    k = _int_setting(settings.get("SIMHASH_MAX_DISTANCE"), defaults.SIMHASH_MAX_DISTANCE)
    blocks = _int_setting(settings.get("SIMHASH_BLOCKS"), k + 1)
    return k, max(blocks, 1)


def _int_setting(value: object, default: int) -> int:
    try:
        return default if value in (None, "", "None") else int(str(value))
    except ValueError:
        return default


def lines_of(text: str) -> Counter[str]:
    return Counter(line.strip() for line in text.splitlines() if line.strip())


def words_of(text: str) -> Counter[str]:
    return Counter(word.casefold() for word in _WORD.findall(text))


def _page_from_dropped(row: dict[str, Any]) -> Page:
    return Page(row["url"], row.get("title"), row.get("text") or "",
                unsigned64(row.get("simhash")), row.get("content_hash"), kept=False)


def _page_from_document(row: dict[str, Any]) -> Page:
    return Page(row["url"], row.get("title"), row.get("text") or "",
                unsigned64(row.get("simhash")), row.get("content_hash"), kept=True)


def compare(a: Page, b: Page, reason: str, stored: int | None, k: int, blocks: int) -> Explanation:
    """Compare two pages: recomputed distance, matching blocks, exact verdict, text difference."""
    ranges = block_ranges(blocks)
    distance = matched = None
    if a.simhash is not None and b.simhash is not None:
        distance = ((a.simhash ^ b.simhash) & MASK64).bit_count()
        matched = matching_blocks(a.simhash, b.simhash, ranges)
    exact = None
    if a.content_hash and b.content_hash:
        exact = a.content_hash == b.content_hash
    elif reason == "exact_duplicate":
        exact = True
    wa, wb, la, lb = words_of(a.text), words_of(b.text), lines_of(a.text), lines_of(b.text)
    result = Explanation(a, b, reason, stored, distance, k, ranges, matched or [], exact,
                         wa - wb, wb - wa, la - lb, lb - la)
    if distance == 0 and not result.identical_text:
        result.notes.append("same fingerprint, different text: the differing lines are not "
                            "fingerprinted (boilerplate such as nav/aside, or a host template)")
    return result


def explain(db: CrawlDB, url: str) -> Explanation:
    """Explain the drop of ``url``; :class:`ReviewError` when it was not dropped or is unknown."""
    row = db.dropped_row(url)
    if row is None:
        if db.document(url) is not None:
            raise ReviewError(f"{url} was kept, not dropped; compare it with another page "
                              "with --pair URL OTHER_URL")
        raise ReviewError(f"{url} is neither a dropped nor a kept page in {masked(db.url)}")
    kept_row = db.document(row.get("duplicate_of") or "")
    if kept_row is None:
        raise ReviewError(f"{url} was dropped as a duplicate of {row.get('duplicate_of')}, "
                          "which is not in the documents table (deleted or another database?)")
    settings = _crawl_settings(db, row.get("crawl_id"))
    k, blocks = crawl_thresholds(settings)
    dropped, kept = _page_from_dropped(row), _page_from_document(kept_row)
    limit = _int_setting(settings.get("DROPPED_TEXT_MAX_CHARS"), 0)
    truncated = bool(limit) and len(dropped.text) >= limit
    notes = []
    if dropped.content_hash is None and dropped.text and not truncated:
        dropped.content_hash = _content_hash(dropped.text)
        if dropped.content_hash:
            notes.append("the dropped page's content hash is computed from its stored text")
    result = compare(dropped, kept, row["reason"], row.get("distance"), k, blocks)
    result.rule = row.get("rule")
    if truncated:
        notes.append(f"the dropped page's text was stored truncated to {limit} characters "
                     "(DROPPED_TEXT_MAX_CHARS): differences past that point are not shown")
    result.notes.extend(notes)
    return result


def _content_hash(text: str) -> str | None:
    """The pipeline's content hash of a visible text (None when that module is unavailable)."""
    try:
        from crawler.simhash import content_hash
    except ImportError:
        return None
    return content_hash(text)


def explain_pair(db: CrawlDB, first: str, second: str) -> Explanation:
    """Compare two stored pages (kept or dropped), e.g. a near miss from the report."""
    pages = []
    crawl_id = None
    for url in (first, second):
        doc = db.document(url)
        row = doc if doc is not None else db.dropped_row(url)
        if row is None:
            raise ReviewError(f"{url} is neither a dropped nor a kept page in {masked(db.url)}")
        pages.append(_page_from_document(row) if doc is not None else _page_from_dropped(row))
        crawl_id = crawl_id or row.get("crawl_id")
    k, blocks = crawl_thresholds(_crawl_settings(db, crawl_id))
    return compare(pages[0], pages[1], "pair", None, k, blocks)


def _crawl_settings(db: CrawlDB, crawl_id: int | None) -> dict[str, Any]:
    if crawl_id is None or crawl_id not in db.crawl_ids():
        return {}
    return db.crawl(crawl_id)["settings"]

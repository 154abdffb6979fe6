"""Pages and drop records of a crawl database, read for review (:class:`PageReader`): the
rows ``scrapy dropped`` lists, one page by any of its URLs, and what a report is built from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from crawler.content.simhash import to_unsigned
from crawler.storage.engine import first_line
from crawler.storage.reader import CrawlReader, ReviewError
from crawler.storage.rows import chunked


class PageReader(CrawlReader):
    """Rows of ``documents`` and ``dropped`` as dicts (fingerprints unsigned)."""

    def drop_rows(self, *, reason: str | None = None, crawl_id: int | None = None,
                  min_distance: int | None = None, max_distance: int | None = None,
                  limit: int | None = None, crawl_ids: Sequence[int] | None = None,
                  rule: str | None = None) -> list[dict[str, Any]]:
        """``dropped`` rows matching every given filter, newest first (at most ``limit``);
        ``crawl_ids``: of any of these crawls (a distributed crawl's workers); ``rule``: of
        this ``dropped.rule`` (none match in a database older than the column)."""
        t = self.dropped_table
        query = sa.select(t)
        if reason:
            query = query.where(t.c.reason == reason)
        if rule:
            query = query.where(t.c.rule == rule if "rule" in t.c else sa.false())
        if crawl_id is not None:
            query = query.where(t.c.crawl_id == crawl_id)
        if crawl_ids is not None:
            query = query.where(t.c.crawl_id.in_(list(crawl_ids)))
        if min_distance is not None:
            query = query.where(t.c.distance >= min_distance)
        if max_distance is not None:
            query = query.where(t.c.distance <= max_distance)
        if limit is not None:
            query = query.limit(limit)
        return self._rows(query.order_by(t.c.dropped_at.desc(), t.c.id.desc()))

    def drops_version(self, crawl_ids: Sequence[int]) -> tuple[object, ...]:
        """A cheap fingerprint of the drop rows of ``crawl_ids``: their count, highest id and
        newest ``dropped_at`` (one aggregate query). A move writes a new row with a new time,
        so it changes even when one row left and one came (the count stays, SQLite may reuse
        the id): the review server reads its list again when it changes."""
        t = self.dropped_table
        newest = [sa.func.max(t.c.dropped_at)] if "dropped_at" in t.c else []
        query = sa.select(sa.func.count().label("rows"), sa.func.max(t.c.id).label("top"),
                          *newest).where(t.c.crawl_id.in_(list(crawl_ids)))
        rows = self._rows(query)
        return tuple(rows[0].values()) if rows else ()

    def stored_pages(self, crawl_ids: Sequence[int], batch: int = 1000,
                     ) -> Iterator[dict[str, Any]]:
        """The ``documents`` rows of the pages crawls ``crawl_ids`` stored (their
        ``crawl_documents`` rows; their own ``documents`` rows in a database older than
        revision 0005), oldest first, streamed ``batch`` rows at a time."""
        d = self.documents
        if sa.inspect(self.engine).has_table("crawl_documents"):
            members = sa.Table("crawl_documents", sa.MetaData(), autoload_with=self.engine)
            wanted = sa.select(members.c.canonical_url).where(
                members.c.crawl_id.in_(list(crawl_ids)))
            query = sa.select(d).where(d.c.canonical_url.in_(wanted))
        else:
            query = sa.select(d).where(d.c.crawl_id.in_(list(crawl_ids)))
        try:
            with self.engine.connect() as conn:
                result = conn.execution_options(stream_results=True, yield_per=batch).execute(
                    query.order_by(d.c.id))
                for raw in result:
                    row = dict(raw._mapping)
                    if row.get("simhash") is not None:
                        row["simhash"] = to_unsigned(int(row["simhash"]))
                    yield row
        except sa.exc.SQLAlchemyError as exc:
            raise ReviewError(f"query on {self.masked_url} failed: {first_line(exc)}") from None

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

    def urls_ending_with(self, table: str, path: str) -> list[str]:
        """The distinct URLs of ``table`` (``"documents"`` or ``"dropped"``) that are
        ``scheme://host`` followed by ``path`` (matched without regard to case on SQLite)."""
        url = (self.dropped_table if table == "dropped" else self.documents).c.url
        prefix = sa.func.substr(url, 1, sa.func.length(url) - len(path))
        query = sa.select(url).distinct().where(
            url.endswith(path, autoescape=True), prefix.like("%://%"),
            sa.not_(prefix.like("%://%/%")))
        return [row["url"] for row in self._rows(query)]

    # --- what a report is built from --------------------------------------------------------

    def crawl_drops(self, ids: list[int]) -> list[dict[str, Any]]:
        """The ``dropped`` rows of the crawls ``ids``: url, reason, simhash, dropped_at, id,
        duplicate_of, distance (and content_hash, title, rule when the table has them)."""
        x = self.dropped_table
        return self._rows(sa.select(x.c.url, x.c.reason, x.c.simhash, x.c.dropped_at, x.c.id,
                                    x.c.duplicate_of, x.c.distance,
                                    *self._optional(x, "content_hash", "title", "rule"))
                          .where(x.c.crawl_id.in_(ids)))

    def document_rows(self) -> list[dict[str, Any]]:
        """Every ``documents`` row: url, content_hash, simhash, fetched_at, crawl_id, id (and
        title when the table has it)."""
        d = self.documents
        return self._rows(sa.select(d.c.url, d.c.content_hash, d.c.simhash, d.c.fetched_at,
                                    d.c.crawl_id, d.c.id, *self._optional(d, "title")))

    def drop_texts(self, ids: list[int]) -> dict[int, str]:
        """``id -> text`` of the given drop rows (``{}`` when the table keeps no text)."""
        x = self.dropped_table
        if "text" not in x.c:
            return {}
        out: dict[int, str] = {}
        for chunk in chunked(ids):
            for row in self._rows(sa.select(x.c.id, x.c.text).where(x.c.id.in_(chunk))):
                out[row["id"]] = row["text"] or ""
        return out

    def kept_pages(self, urls: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Kept documents by URL, found on ``url`` or ``canonical_url`` (a drop names either):
        url, canonical_url, title, text and content_hash (those the table has)."""
        d = self.documents
        columns = [d.c.url, *self._optional(d, "canonical_url", "title", "text", "content_hash")]
        wanted = set(urls)
        out: dict[str, dict[str, Any]] = {}
        for name in ("url", "canonical_url"):
            missing = sorted(u for u in wanted if u not in out)
            if name not in d.c or not missing:
                continue
            for chunk in chunked(missing):
                for row in self._rows(sa.select(*columns).where(d.c[name].in_(chunk))):
                    out.setdefault(row[name], row)
        return out


def _lookups(url: str, table: sa.Table) -> list[tuple[str, str]]:
    """Where to look a URL up: as given, then its canonical form (as the crawl keyed it)."""
    out = [(c, url) for c in ("url", "canonical_url") if c in table.c]
    try:
        from crawler.urls.urlnorm import normalize_url

        canonical = normalize_url(url)
    except (ImportError, ValueError):
        return out
    if canonical != url:
        out += [(c, canonical) for c in ("canonical_url", "url") if c in table.c]
    return out

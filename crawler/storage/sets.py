"""The crawls' set fingerprints (:mod:`crawler.content.setfp`; revision 0005): kept in step with
every
batch, and read back (:class:`SetsSide`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from crawler.content.setfp import CrawlSets
from crawler.storage.base import StoreBase
from crawler.storage.tables import SET_COLUMNS, crawl_sets, sets_columns


class SetsSide(StoreBase):
    """``crawl_documents`` and the fingerprints of the ``crawls`` rows."""

    def _track_sets(self, conn: sa.Connection, stored: Sequence[Mapping[str, Any]],
                    removed: Sequence[tuple[int, str]]) -> None:
        """Keep ``crawl_documents`` and the crawls' set fingerprints in step with a batch.

        A stored page joins its crawl's rows; one the crawl had stored before is updated (its
        old content hash leaves the sums, the new one joins). A demoted page leaves the rows of
        the crawl that demoted it. Then each crawl's change is added to its ``crawls`` row,
        read under a row lock at the end of the transaction (``FOR NO KEY UPDATE`` on
        PostgreSQL, which does not wait for the key-share locks other workers' foreign keys
        hold on the row; SQLite's writer already holds the database), so workers writing
        batches of one crawl at once wait only for each other's last statement. A crawl's rows
        are read only by statements that lock them (insert, ``FOR UPDATE``, delete returning),
        so two transactions never both count one page.

        A worker's row of a distributed crawl (revision 0010) has a parent, the row of the whole
        crawl: every change to the worker's rows is made to the parent's too, in the same
        transaction, so the parent's fingerprints are those of everything the crawl stored.
        The parent's ``crawls`` row is locked before any of its ``crawl_documents`` rows: the
        workers' batches then change the parent's rows one transaction at a time (a batch
        that stores u and demotes v and another that stores v and demotes u would otherwise
        wait for each other).
        """
        ids = {int(row["crawl_id"]) for row in stored if row.get("crawl_id") is not None}
        parents = self._parents(conn, ids | {crawl_id for crawl_id, _ in removed})
        locked = {parent: self._lock_crawl(conn, parent)  # first: see the docstring
                  for parent in sorted(set(parents.values()))}
        pages: dict[int, dict[str, str | None]] = {}
        for row in stored:
            if row.get("crawl_id") is not None:
                crawl_id = int(row["crawl_id"])
                for owner in (crawl_id, parents.get(crawl_id)):  # a worker's, and its crawl's
                    if owner is not None:
                        pages.setdefault(owner, {})[row["canonical_url"]] = row["content_hash"]
        changes = {crawl_id: self._join_crawl(conn, crawl_id, members)
                   for crawl_id, members in sorted(pages.items())}
        for crawl_id, canonical in removed:
            for owner in (crawl_id, parents.get(crawl_id)):
                change = None if owner is None else self._leave_crawl(conn, owner, canonical)
                if owner is not None and change is not None:
                    changes[owner] = changes.get(owner, CrawlSets()) + change
        for crawl_id in sorted(changes):  # one lock order for every writer
            if changes[crawl_id]:
                self._add_to_crawl(conn, crawl_id, changes[crawl_id], locked.get(crawl_id))

    def _parents(self, conn: sa.Connection, crawl_ids: set[int]) -> dict[int, int]:
        """``crawl id -> parent id`` of those of ``crawl_ids`` that are a distributed
        crawl's workers (a row's parent never changes: remembered per store)."""
        known: dict[int, int | None] = self.__dict__.setdefault("_parent_of", {})
        missing = sorted(i for i in crawl_ids if i not in known)
        c = self.crawls_table
        if missing:  # a batch names a handful of crawls
            rows = conn.execute(sa.select(c.c.id, c.c.parent_id).where(c.c.id.in_(missing)))
            known.update((int(i), None if p is None else int(p)) for i, p in rows)
        return {i: p for i in crawl_ids if (p := known.get(i)) is not None}

    def _leave_crawl(self, conn: sa.Connection, crawl_id: int, canonical: str,
                     ) -> CrawlSets | None:
        """Delete a page from the crawl's rows; the change, None when it was not there."""
        m = self.crawl_documents
        gone = conn.execute(
            sa.delete(m).where(m.c.crawl_id == crawl_id, m.c.canonical_url == canonical)
            .returning(m.c.content_hash)).first()
        return None if gone is None else CrawlSets().removed(canonical, gone[0])

    def _join_crawl(self, conn: sa.Connection, crawl_id: int,
                    members: Mapping[str, str | None]) -> CrawlSets:
        """Write ``canonical_url -> content_hash`` into the crawl's rows; returns the change."""
        change = CrawlSets()
        todo = sorted(members)  # rows are locked in this order by every writer
        while todo:
            new = self._insert_members(conn, crawl_id, members, todo)
            for url in new:
                change = change.stored(url, members[url])
            old = self._locked_members(conn, crawl_id, [url for url in todo if url not in new])
            changed = [url for url in sorted(old) if old[url] != members[url]]
            for url in changed:
                change = change.removed(url, old[url]).stored(url, members[url])
            self._update_members(conn, crawl_id, {url: members[url] for url in changed})
            # a row that was there when inserting and gone when locked was removed meanwhile
            # by another transaction (which counted it out): insert it again
            todo = [url for url in todo if url not in new and url not in old]
        return change

    def _insert_members(self, conn: sa.Connection, crawl_id: int,
                        members: Mapping[str, str | None], urls: list[str]) -> set[str]:
        """Insert the rows of ``urls`` the crawl lacks, in the order of ``urls``; returns those
        inserted."""
        if self.backend == "postgresql":
            return self._insert_members_unnested(conn, crawl_id, members, urls)
        m = self.crawl_documents
        insert = self._dialect_insert()(m)
        insert_new = insert.on_conflict_do_nothing(
            index_elements=["crawl_id", "canonical_url"]).returning(m.c.canonical_url)
        params = [{"crawl_id": crawl_id, "canonical_url": url, "content_hash": members[url]}
                  for url in urls]
        return set(conn.execute(insert_new, params).scalars())

    def _insert_members_unnested(self, conn: sa.Connection, crawl_id: int,
                                 members: Mapping[str, str | None],
                                 urls: list[str]) -> set[str]:  # fmt: skip
        """:meth:`_insert_members` on PostgreSQL: the URLs and hashes as two array parameters
        unnested in their order (``WITH ORDINALITY``: rows are locked in the order every writer
        uses), one statement. SQLAlchemy's many-rows insert spent 30-34 µs of the storage
        thread's Python (holding the GIL the reactor needs) per row, this 7-9: 5.1-5.8 against
        1.2-1.5 CPU ms for a batch of 170 (a worker of a distributed crawl writes each page
        twice, its own row and its crawl's)."""
        table = self.engine.dialect.identifier_preparer.format_table(self.crawl_documents)
        stmt = sa.text(
            f"INSERT INTO {table} (crawl_id, canonical_url, content_hash) "
            "SELECT :crawl_id, u, h FROM unnest(CAST(:urls AS text[]), CAST(:hashes AS text[])) "
            "WITH ORDINALITY AS t(u, h, n) ORDER BY n "
            "ON CONFLICT (crawl_id, canonical_url) DO NOTHING RETURNING canonical_url")
        params = {"crawl_id": crawl_id, "urls": urls, "hashes": [members[u] for u in urls]}
        return set(conn.execute(stmt, params).scalars())

    def _locked_members(self, conn: sa.Connection, crawl_id: int,
                        urls: list[str]) -> dict[str, str | None]:
        """``canonical_url -> content_hash`` of the crawl's rows of ``urls``, locked."""
        m = self.crawl_documents
        old: dict[str, str | None] = {}
        if not urls:  # every page new to the crawl (the usual batch): nothing to read
            return old
        for chunk in self._chunks(urls):
            stmt = (sa.select(m.c.canonical_url, m.c.content_hash)
                    .where(m.c.crawl_id == crawl_id, self._one_of(m.c.canonical_url, chunk))
                    .order_by(m.c.canonical_url).with_for_update())
            old.update((url, chash) for url, chash in conn.execute(stmt))
        return old

    def _update_members(self, conn: sa.Connection, crawl_id: int,
                        hashes: Mapping[str, str | None]) -> None:
        m = self.crawl_documents
        updates = [{"k": url, "h": chash} for url, chash in hashes.items()]
        if updates:
            conn.execute(sa.update(m).where(m.c.crawl_id == crawl_id,
                                            m.c.canonical_url == sa.bindparam("k"))
                         .values(content_hash=sa.bindparam("h")), updates)

    def _lock_crawl(self, conn: sa.Connection, crawl_id: int) -> Any:
        """The crawl's set columns, its row locked (``FOR NO KEY UPDATE``) until commit."""
        c = self.crawls_table
        stmt = (sa.select(*(c.c[name] for name in SET_COLUMNS))
                .where(c.c.id == crawl_id).with_for_update(key_share=True))
        return conn.execute(stmt).first()

    def _add_to_crawl(self, conn: sa.Connection, crawl_id: int, change: CrawlSets,
                      row: Any = None) -> None:
        """Add ``change`` to the crawl's set columns; ``row``: its columns as this transaction
        read them under its lock already (a distributed crawl's row, locked first: nothing
        else can have changed them since), else they are read and locked now."""
        c = self.crawls_table
        if row is None:
            row = self._lock_crawl(conn, crawl_id)
        if row is None:  # no such crawl: the rows' foreign key has refused the batch already
            return
        sets = crawl_sets(*row) + change
        conn.execute(sa.update(c).where(c.c.id == crawl_id).values(sets_columns(sets)))

    # --- reads ------------------------------------------------------------------------------

    def crawl_sets(self, crawl_id: int) -> CrawlSets | None:
        """The set fingerprints recorded for a crawl (one row read), None for an unknown id."""
        c = self.crawls_table
        stmt = sa.select(*(c.c[name] for name in SET_COLUMNS)).where(c.c.id == crawl_id)
        self.check()
        with self._errors("reading a crawl's fingerprints"), self.engine.connect() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else crawl_sets(*row)

    def iter_crawl_pages(self, crawl_id: int, batch_size: int = 50_000,
                         ) -> Iterator[list[tuple[str, str | None]]]:
        """Lists of ``(canonical_url, content_hash)`` of the pages a crawl stored (its
        ``crawl_documents`` rows: what its set fingerprints sum), in no particular order."""
        m = self.crawl_documents
        stmt = sa.select(m.c.canonical_url, m.c.content_hash).where(m.c.crawl_id == crawl_id)
        for part in self._stream(stmt, "reading a crawl's pages", batch_size):
            yield [(url, chash) for url, chash in part]

    def recount_sets(self, crawl_id: int) -> CrawlSets:
        """A crawl's set fingerprints computed from scratch from its rows (a full read; what
        :meth:`crawl_sets` must equal)."""
        return sum((CrawlSets.of(part) for part in self.iter_crawl_pages(crawl_id)), CrawlSets())

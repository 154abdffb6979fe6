"""The Store's write side (:class:`WriteSide`): batches of pages and drops in one transaction,
demotions of stored pages, and the crawls' start and finish.

``documents`` is upserted on ``url`` keeping one row per canonical URL: a re-crawl updates the
row (``updated_at``, ``crawl_id``) instead of failing, also when it meets the page under another
spelling: the row with the same ``canonical_url`` takes the new ``url`` (same id) and any other
row of that canonical URL is deleted, in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from crawler.content.simhash import hamming
from crawler.content.simindex import content_key, url_key
from crawler.outputs.formats import jsonable
from crawler.storage.rows import build_row, chunked
from crawler.storage.sets import SetsSide
from crawler.storage.tables import DOCUMENT_COLUMNS, DROPPED_COLUMNS, redis_generations
from crawler.storage.tables import crawls as _crawls
from crawler.storage.types import Fingerprint64, to_signed64, utcnow
from crawler.vocab import DISTRIBUTED, REPOINTED_RULE, UNFINISHED_REASON

logger = logging.getLogger(__name__)


class Fence(Protocol):
    """What a batch's transaction asks before it commits (:meth:`WriteSide.write_batch`):
    ``bump(recorded)`` is given the generation storage recorded for ``key`` and returns the new
    one, or raises to abort the transaction (the shared Redis went back in time:
    :class:`crawler.cluster.generation.GenerationFence`)."""

    key: str

    def bump(self, recorded: int) -> int: ...


class WriteSide(SetsSide):
    """Every write of the Store; each public method is one transaction."""

    def upsert_documents(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert or update (on ``url``) every row in one transaction; returns rows written.

        Keys are :data:`DOCUMENT_COLUMNS` (missing ones are NULL); ``simhash`` unsigned,
        ``fetched_at`` a datetime or ISO 8601 string. Within one call the last row per URL wins.
        """
        return self.write_batch(rows, [])[0]

    def insert_dropped(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Append drop records (keys :data:`DROPPED_COLUMNS`) in one transaction."""
        return self.write_batch([], rows)[1]

    def write_batch(
        self, documents: Sequence[Mapping[str, Any]], dropped: Sequence[Mapping[str, Any]],
        demotions: Sequence[dict[str, Any]] = (), refreshes: Sequence[Mapping[str, Any]] = (),
        fence: Fence | None = None,
    ) -> tuple[int, int]:
        """Upsert ``documents``, append ``dropped``, apply ``refreshes`` (:meth:`_refresh`) and
        ``demotions`` (:meth:`_demote`) and update the crawls' set fingerprints
        (:meth:`_track_sets`) in ONE transaction: all or nothing. Last, ``fence`` (a
        distributed crawl's Redis generation, :meth:`_fence`) may abort it. Returns documents
        and drop rows written."""
        self.check()
        with self._errors("writing a batch"), self.engine.begin() as conn:
            stored = self._upsert(conn, documents)
            done = len(stored), self._insert_dropped(conn, dropped)
            self._refresh(conn, refreshes)
            removed = self._demote(conn, demotions)
            self._track_sets(conn, stored, removed)
            if fence is not None:
                self._fence(conn, fence)
            return done

    def _fence(self, conn: sa.Connection, fence: Fence) -> None:
        """Record ``fence.bump(recorded)`` as the generation of ``fence.key`` (the highest one
        wins: batches of several workers commit in any order). Last in the transaction, so the
        row is locked only while it commits."""
        g = redis_generations.c
        recorded = conn.execute(sa.select(g.generation).where(g.crawl == fence.key)).scalar()
        value = fence.bump(int(recorded or 0))
        insert = self._dialect_insert()(redis_generations)
        stmt = insert.values(crawl=fence.key, generation=value, updated_at=utcnow())
        highest = sa.func.greatest if self.backend == "postgresql" else sa.func.max
        conn.execute(stmt.on_conflict_do_update(index_elements=["crawl"], set_={
            "generation": highest(g.generation, stmt.excluded.generation),
            "updated_at": stmt.excluded.updated_at}))  # fmt: skip

    def redis_generation(self, key: str) -> int:
        """The generation storage recorded for ``key`` (0: none yet)."""
        self.check()
        stmt = sa.select(redis_generations.c.generation).where(redis_generations.c.crawl == key)
        with self._errors("reading the Redis generation"), self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def start_crawl(
        self, spider: str, seeds: list[str] | None = None,
        settings: Mapping[str, Any] | None = None, *, job: str | None = None,
        command: str | None = None, worker: str | None = None,
    ) -> int:
        """Record a new crawl; returns its id. ``job``: the JOBDIR job id of the run (None
        without JOBDIR), or the distributed crawl's id; ``command``: ``"crawl"`` or
        ``"parse"``; ``worker``: the membership id of a distributed worker, whose row is then
        tied to the crawl's ``distributed`` row (created by the first worker to get here,
        revision 0010)."""
        self.check()
        now = utcnow()
        row = {"spider": spider, "seeds": jsonable(list(seeds or [])),
               "settings": jsonable(dict(settings or {})), "started_at": now,
               "job": job, "command": command, "worker": worker}
        with self._errors("recording the crawl start"), self.engine.begin() as conn:
            if worker is not None and job is not None:
                row["parent_id"] = self._distributed_row(conn, job, {**row, "worker": None})
            result = conn.execute(sa.insert(_crawls).returning(_crawls.c.id), row)
            return int(result.scalar_one())

    def _distributed_row(self, conn: sa.Connection, key: str, row: Mapping[str, Any]) -> int:
        """The id of distributed crawl ``key``'s own row, inserted by the first worker to ask
        (the partial unique index makes concurrent first workers agree)."""
        insert = self._dialect_insert()(_crawls)
        where = _crawls.c.command == DISTRIBUTED
        conn.execute(insert.values({**row, "command": DISTRIBUTED})
                     .on_conflict_do_nothing(index_elements=["job"], index_where=where))
        stmt = sa.select(_crawls.c.id).where(_crawls.c.job == key, where)
        found = conn.execute(stmt).scalar_one()
        return int(found)

    def close_worker_crawl(self, key: str, worker: str, reason: str) -> int:
        """Close the row of distributed crawl ``key``'s ``worker`` if it is still open (a
        worker that died: whoever reclaims it closes its row); returns the rows closed."""
        self.check()
        stmt = (sa.update(_crawls).where(_crawls.c.job == key, _crawls.c.worker == worker,
                                         _crawls.c.finished_at.is_(None))
                .values(finished_at=utcnow(), finish_reason=reason))
        with self._errors("closing a dead worker's crawl"), self.engine.begin() as conn:
            return int(conn.execute(stmt).rowcount or 0)

    def finish_distributed(self, key: str, reason: str) -> int | None:
        """Close distributed crawl ``key``'s own row: finish time, reason, and the sum of its
        workers' numeric stats (plus ``workers``); returns its id (None: no such crawl). Called
        by every worker that leaves the crawl done, after closing its own row, under the
        row's lock: the last call sums every row closed before it. A worker row still open
        is closed ``unfinished`` (a worker killed when nothing was left, or one closing now:
        its own close writes its reason over it, then this again)."""
        self.check()
        now = utcnow()
        with self._errors("recording the crawl finish"), self.engine.begin() as conn:
            parent = conn.execute(sa.select(_crawls.c.id).where(
                _crawls.c.job == key, _crawls.c.command == DISTRIBUTED).with_for_update()).scalar()
            if parent is None:
                return None
            rows = conn.execute(sa.select(_crawls.c.stats)
                                .where(_crawls.c.parent_id == parent)).all()
            totals: dict[str, Any] = {"workers": len(rows)}
            for (stats,) in rows:
                for name, value in (stats or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        totals[name] = totals.get(name, 0) + value
            conn.execute(sa.update(_crawls).where(_crawls.c.parent_id == parent,
                                                  _crawls.c.finished_at.is_(None))
                         .values(finished_at=now, finish_reason=UNFINISHED_REASON))
            conn.execute(sa.update(_crawls).where(_crawls.c.id == parent).values(
                finished_at=now, finish_reason=reason, stats=jsonable(totals)))
            return int(parent)

    def finish_crawl(self, crawl_id: int, reason: str, stats: Mapping[str, Any]) -> None:
        """Record the finish time, reason and final stats (made JSON-safe) of a crawl."""
        self.check()
        values = {"finished_at": utcnow(), "finish_reason": reason, "stats": jsonable(stats)}
        with self._errors("recording the crawl finish"), self.engine.begin() as conn:
            conn.execute(sa.update(_crawls).where(_crawls.c.id == crawl_id).values(values))

    # --- documents ----------------------------------------------------------------------------

    def _upsert_stmt(self) -> Any:
        insert = self._dialect_insert()
        stmt = insert(self.documents)
        update = {c: stmt.excluded[c] for c in DOCUMENT_COLUMNS if c != "url"}
        return stmt.on_conflict_do_update(index_elements=["url"], set_=update)

    def _upsert(self, conn: sa.Connection,
                rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Upsert ``rows`` (the batch's last version of each page); returns the rows written."""
        now = utcnow()
        by_url: dict[str, dict[str, Any]] = {}
        url_of: dict[str, str] = {}  # canonical URL -> the batch's URL for it
        for row in rows:  # one statement may not touch a row twice: the last version wins
            values = document_values(row, now)
            url, canonical = values["url"], values["canonical_url"]
            earlier = by_url.get(url)
            if earlier is not None:
                url_of.pop(earlier["canonical_url"], None)
            if url_of.get(canonical, url) != url:  # a later spelling of the same page wins
                del by_url[url_of[canonical]]
            by_url[url] = values
            url_of[canonical] = url
        if by_url:  # in crawl order (ids follow it); a deadlock between workers is retried
            self._replace_spellings(conn, url_of)
            conn.execute(self._upsert_stmt(), list(by_url.values()))
        return list(by_url.values())

    def _replace_spellings(self, conn: sa.Connection, url_of: Mapping[str, str]) -> None:
        """Make each batch URL the one row of its canonical page (a re-crawl updates it).

        A page stored by an earlier crawl under another spelling (``/a?utm_source=x``, then
        ``/a``) is the same page: its row takes the new URL (keeping its id), so the upsert on
        ``url`` updates it instead of adding a second row. When the new URL has a row already,
        or several rows share the canonical URL, the surplus rows are deleted. Rows whose own
        URL is in the batch are left to the upsert. Runs inside the batch's transaction.
        """
        others = self._other_spellings(conn, url_of)
        if not others:  # the common case: one indexed query per batch
            return
        existing = self._existing_urls(conn, sorted(url_of[c] for c in others))
        renames: list[dict[str, Any]] = []
        deletes: list[int] = []
        for canonical, ids in others.items():
            if url_of[canonical] in existing:
                deletes += ids
            else:
                renames.append({"row_id": ids[0], "new_url": url_of[canonical]})
                deletes += ids[1:]
        self._rename_and_delete(conn, renames, deletes)

    def _other_spellings(self, conn: sa.Connection,
                         url_of: Mapping[str, str]) -> dict[str, list[int]]:
        """Ids of the rows of each batch page stored under a URL the batch does not write."""
        t = self.documents
        batch_urls = set(url_of.values())
        others: dict[str, list[int]] = {}
        for chunk in self._chunks(sorted(url_of)):
            stmt = (sa.select(t.c.id, t.c.url, t.c.canonical_url)
                    .where(self._one_of(t.c.canonical_url, chunk)).order_by(t.c.id))
            for row_id, url, canonical in conn.execute(stmt):
                if url not in batch_urls:
                    others.setdefault(canonical, []).append(row_id)
        return others

    def _existing_urls(self, conn: sa.Connection, urls: list[str]) -> set[str]:
        t = self.documents
        existing: set[str] = set()
        for chunk in self._chunks(urls):
            existing.update(conn.execute(
                sa.select(t.c.url).where(self._one_of(t.c.url, chunk))).scalars())
        return existing

    def _rename_and_delete(self, conn: sa.Connection, renames: list[dict[str, Any]],
                           deletes: list[int]) -> None:
        t = self.documents
        for chunk in chunked(deletes):
            conn.execute(sa.delete(t).where(t.c.id.in_(chunk)))
        if renames:
            conn.execute(sa.update(t).where(t.c.id == sa.bindparam("row_id"))
                         .values(url=sa.bindparam("new_url")), renames)
        if renames or deletes:
            logger.debug("documents: %d pages stored under another spelling renamed, %d "
                         "surplus rows deleted", len(renames), len(deletes))

    # --- drops and demotions ------------------------------------------------------------------

    def _insert_dropped(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        now = utcnow()
        values = [build_row(row, DROPPED_COLUMNS, "dropped") for row in rows]
        for value in values:
            value["dropped_at"] = value["dropped_at"] or now
        if values:
            conn.execute(sa.insert(self.dropped_table), values)
        return len(values)

    def _refresh(self, conn: sa.Connection, refreshes: Sequence[Mapping[str, Any]]) -> None:
        """Stored pages get the fingerprint computed once their site's template was known
        (``{"url", "simhash"}`` each): ``simhash`` set, ``young`` false."""
        t = self.documents
        if refreshes:
            conn.execute(sa.update(t).where(t.c.url == sa.bindparam("row_url")).values(
                simhash=sa.bindparam("new_simhash", type_=Fingerprint64()), young=False),
                [{"row_url": r["url"], "new_simhash": r["simhash"]} for r in refreshes])

    def _demote(self, conn: sa.Connection,
                demotions: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
        """Move stored pages to ``dropped``: each was kept first and turned out a duplicate
        later (the page it names canonical came, or its refreshed fingerprint matched;
        :mod:`crawler.dedup.decider`).

        A demotion names the stored page (``url``), the page it duplicates (``duplicate_of``,
        ``duplicate_simhash``, ``duplicate_content_hash``), ``reason``, ``distance``,
        ``crawl_id``, ``rule`` and ``max_chars`` (text kept). Its ``documents`` row is deleted
        and a ``dropped`` row written from it; drop rows that named it as their kept page now
        name ``duplicate_of`` instead (distance recomputed from the two SimHashes, ``rule``
        ``"repointed"``). Each demotion gets ``row``: the drop row written, or None when the
        page was not stored (a later batch of its own deleted or renamed it). Returns
        ``(crawl_id, canonical_url)`` of each page removed, for the demoting crawl's sets."""
        t = self.documents
        now = utcnow()
        removed: list[tuple[int, str]] = []
        for demotion in demotions:
            demotion["row"] = None
            found = conn.execute(sa.select(t).where(t.c.url == demotion["url"])).mappings().first()
            if found is None:
                continue
            conn.execute(sa.delete(t).where(t.c.id == found["id"]))
            row = demoted_row(found, demotion, now)
            self._insert_dropped(conn, [row])
            demotion["row"] = row
            # a page a drop rule removed names no kept page: its drops are decided again
            demotion["repointed"] = (self._repoint(conn, found["url"], demotion, now)
                                     if demotion["duplicate_of"] else [])
            if demotion.get("crawl_id") is not None:
                removed.append((int(demotion["crawl_id"]),
                                found["canonical_url"] or found["url"]))
        return removed

    def _repoint(self, conn: sa.Connection, old: str, new: Mapping[str, Any],
                 now: Any) -> list[dict[str, Any]]:
        """Drop rows naming ``old`` as their kept page name ``new["duplicate_of"]`` instead;
        returns them as updated (``dropped_at`` now: the drop log's line for the change)."""
        d = self.dropped_table
        rows = conn.execute(sa.select(d.c.id, d.c.url, d.c.simhash, d.c.content_hash,
                                      d.c.crawl_id)
                            .where(d.c.duplicate_of == old).order_by(d.c.id)).all()
        updates = [repointed(row_id, own, own_hash, new) for row_id, _, own, own_hash, _ in rows]
        self._update_drops(conn, updates)
        return [repointed_row(url, own, crawl_id, update, now)
                for (_, url, own, _, crawl_id), update in zip(rows, updates, strict=True)]

    def _update_drops(self, conn: sa.Connection, updates: list[dict[str, Any]]) -> None:
        """Apply :func:`repointed` updates to their drop rows."""
        d = self.dropped_table
        if updates:
            conn.execute(sa.update(d).where(d.c.id == sa.bindparam("row_id")).values(
                duplicate_of=sa.bindparam("new_of"), reason=sa.bindparam("new_reason"),
                distance=sa.bindparam("new_distance"), rule=sa.bindparam("new_rule"),
                duplicate_simhash=sa.bindparam("new_simhash", type_=Fingerprint64())), updates)


def document_values(row: Mapping[str, Any], now: Any) -> dict[str, Any]:
    """The ``documents`` row written for ``row``: cleaned, canonical URL set, keys derived."""
    values = build_row(row, DOCUMENT_COLUMNS, "document")
    values["updated_at"] = now
    canonical = values["canonical_url"] or values["url"]
    values["canonical_url"] = canonical
    chash = values["content_hash"]
    values["content_key"] = to_signed64(content_key(chash)) if chash else None
    values["canonical_key"] = to_signed64(url_key(canonical))
    return values


def demoted_row(found: Any, demotion: Mapping[str, Any], now: Any,
                ) -> dict[str, Any]:
    """The ``dropped`` row of a demoted page, from its ``documents`` row ``found``: its text
    cut to ``max_chars`` (0: none), or whole when ``max_chars`` is absent (a person's drop
    rule, which must be reversible: :mod:`crawler.dedup.overrides`)."""
    text = found["text"]
    whole = "max_chars" not in demotion
    limit = len(text or "") if whole else int(demotion.get("max_chars") or 0)
    return {
        "url": found["url"], "canonical_url": found["canonical_url"],
        "reason": demotion["reason"], "duplicate_of": demotion["duplicate_of"],
        "distance": demotion["distance"], "simhash": found["simhash"],
        "duplicate_simhash": demotion.get("duplicate_simhash"),
        "content_hash": found["content_hash"], "title": found["title"],
        "text": text[:limit] if limit and text else None, "dropped_at": now,
        "crawl_id": demotion.get("crawl_id"), "rule": demotion.get("rule"),
        **{name: found[name] for name in KEPT_COLUMNS},
    }  # fmt: skip


#: The columns of a ``documents`` row a drop row keeps, so the page can be stored again.
KEPT_COLUMNS = ("canonical_link", "status", "content_type", "encoding", "depth", "referer",
                "fetched_at", "young")


def repointed(row_id: int, own: int | None, own_hash: str | None,
              new: Mapping[str, Any]) -> dict[str, Any]:
    """The update of drop row ``row_id`` (its SimHash ``own``, content hash ``own_hash``) that
    names ``new["duplicate_of"]`` as its kept page."""
    simhash = new.get("duplicate_simhash")
    chash = new.get("duplicate_content_hash")
    if chash and own_hash == chash:
        reason, distance = "exact_duplicate", 0
    elif own is not None and simhash is not None:
        reason, distance = "near_duplicate", hamming(int(own), int(simhash))
    else:
        reason, distance = "near_duplicate", None
    return {"row_id": row_id, "new_of": new["duplicate_of"], "new_reason": reason,
            "new_rule": REPOINTED_RULE, "new_distance": distance, "new_simhash": simhash}


def repointed_row(url: str, simhash: int | None, crawl_id: int | None,
                  update: Mapping[str, Any], now: Any) -> dict[str, Any]:
    """The drop row ``url`` as :func:`repointed` leaves it (for its drop log line)."""
    return {"url": url, "reason": update["new_reason"], "duplicate_of": update["new_of"],
            "distance": update["new_distance"], "simhash": simhash,
            "duplicate_simhash": update["new_simhash"], "rule": update["new_rule"],
            "crawl_id": crawl_id, "dropped_at": now}

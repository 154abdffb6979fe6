"""The settle step's storage side (:class:`SettleSide`): read the pages of the groups that
changed, re-decide them by :mod:`crawler.dedup.settle`'s rule and apply the moves, in ONE
transaction.

Which pages: every stored document with a content hash, and for each canonical URL not stored,
its latest drop row of reason ``exact_duplicate``, ``near_duplicate`` or ``override`` (a person's
drop rule: stored again once no rule names it); a soft 404 duplicates a probe that is never
stored: it stays as it is. With ``scope`` (crawl ids; ``SIMHASH_PERSIST``
off) only the pages of those crawls take part, so one crawl's decisions never reach another's.

Which groups: those holding a page of a crawl not settled yet (``crawls.settled_at`` NULL: the
crawl that settles now, and any crawl that never settled, such as a killed worker's), so the
work done per settle is proportional to what changed, apart from one read of the fingerprints.

The moves, each in the same transaction (PostgreSQL: under an advisory lock, so two workers
settling at once take turns):

* a stored page the rule drops is moved to ``dropped`` (``rule = 'settled'``), as a demotion;
* a dropped page the rule keeps is stored again from its drop row (``rule`` of the drop log
  line: ``settled``, reason ``kept``) and its drop rows are deleted;
* a dropped page whose kept page, reason or distance change is repointed
  (``rule = 'repointed'``, as when a kept page is demoted while crawling).

Every changed drop row (and every page stored again) is returned, so the drop log gets a line
for each: read start to end, the log gives every URL's final ``duplicate_of``, as the table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa

from crawler.dedup.overrides import DROP, Overrides
from crawler.dedup.preference import seed_hosts
from crawler.dedup.settle import Plan, SettlePage, Verdict, plan
from crawler.storage.base import StoreBase
from crawler.storage.rows import chunked
from crawler.storage.types import utcnow
from crawler.storage.write import KEPT_COLUMNS, WriteSide, repointed_row
from crawler.vocab import (
    EXACT_DUPLICATE,
    KEPT_REASON,
    NEAR_DUPLICATE,
    OVERRIDE,
    REPOINTED_RULE,
    SETTLED_RULE,
)

logger = logging.getLogger(__name__)

#: Key of the PostgreSQL advisory lock held while settling (workers ending at once).
SETTLE_LOCK_KEY = 0x736574746C65  # "settle"

#: Rows read per query while settling (keyset pages by id): the settle of a million-page store
#: never holds one query's whole result, and drop rows are read without their text.
SETTLE_CHUNK = 5000

#: The drop row columns the rule needs (``text``, ``title``... are read only to store a page again).
_DROP_COLUMNS = ("id", "url", "canonical_url", "content_hash", "simhash", "canonical_link",
                 "duplicate_of", "reason", "distance", "young", "crawl_id")


@dataclass
class Settled:
    """What one settle did: the groups and pages re-decided, the moves, and the drop log's
    records for them (``rows``: drop rows as written; a page stored again is a row of reason
    ``kept`` with no ``duplicate_of``)."""

    groups: int = 0
    pages: int = 0
    demoted: int = 0
    promoted: int = 0
    repointed: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def moves(self) -> int:
        return self.demoted + self.promoted + self.repointed


@dataclass(slots=True)
class _Source:
    """Where a settle page came from: its documents row id, or the id of its latest drop row
    (read whole only if the page is stored again)."""

    doc_id: int | None = None
    drop_id: int | None = None
    crawl_id: int | None = None


class SettleSide(WriteSide, StoreBase):
    """:meth:`settle`, for :class:`crawler.storage.Store`."""

    def settle(self, k: int, seeds: frozenset[str] | None = None, *,
               crawl_id: int | None = None,
               scope: Sequence[int] | None = None, everything: bool = False,
               prefer_canonical: bool = True, max_chars: int = 0,
               overrides: Overrides | None = None,
               touched: Overrides | None = None, named_only: bool = False) -> Settled:
        """Settle the groups that changed (module docstring). ``crawl_id``: the crawl settling
        now (marked settled with the others). ``everything``: re-decide every group, not only
        changed ones. ``max_chars``: text kept in a drop row made from a stored page.
        ``seeds``: the seeds' hosts (:func:`crawler.dedup.preference.seed_hosts`); None: those of
        every crawl recorded (in ``scope``), so the crawl and ``scrapy settle`` agree.
        ``overrides``: a person's rules (:mod:`crawler.dedup.overrides`), obeyed first; the groups
        of every page they name are re-decided too, and so are those of the pages ``touched``
        names (rules just replaced or removed). ``named_only``: only those groups, and no
        crawl marked settled (a rule recorded while crawls may still run: they settle their
        own pages when they end)."""
        self.check()
        with self._errors("settling duplicate groups"), self.engine.begin() as conn:
            if self.backend == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                             {"key": SETTLE_LOCK_KEY})
            pending = set() if named_only else self._unsettled(conn, crawl_id)
            if scope is not None:  # only these crawls' pages are read: only they settle
                pending &= set(scope)
            if seeds is None:
                seeds = self._seed_hosts(conn, scope)
            pages, sources = self._settle_pages(conn, scope, overrides)
            start = None if everything else [
                i for i, src in enumerate(sources) if src.crawl_id in pending
                or (touched and _named(pages[i], touched))
                or (overrides and _named(pages[i], overrides))]
            distinct = overrides.distinct if overrides else None
            moves = (plan(pages, k, seeds, start, prefer_canonical, distinct)
                     if start != [] or overrides else Plan())
            bare = self._unfingerprinted(conn, scope, overrides) if overrides else []
            done = self._apply(conn, pages, sources, moves, max_chars, bare)
            if pending:
                c = self.crawls_table
                conn.execute(sa.update(c).where(c.c.id.in_(sorted(pending)))
                             .values(settled_at=utcnow()))
        if done.moves:
            logger.info("Settled %d duplicate groups (%d pages): %d stored pages dropped, %d "
                        "dropped pages stored, %d drops repointed", done.groups, done.pages,
                        done.demoted, done.promoted, done.repointed)  # fmt: skip
        return done

    # --- reading ------------------------------------------------------------------------------

    def _unsettled(self, conn: sa.Connection, crawl_id: int | None) -> set[int]:
        c = self.crawls_table
        ids = set(conn.execute(sa.select(c.c.id).where(c.c.settled_at.is_(None))).scalars())
        if crawl_id is not None:
            ids.add(crawl_id)
        return ids

    def _seed_hosts(self, conn: sa.Connection, scope: Sequence[int] | None) -> frozenset[str]:
        c = self.crawls_table
        stmt = sa.select(c.c.seeds)
        if scope is not None:
            stmt = stmt.where(c.c.id.in_(list(scope)))
        return seed_hosts(str(url) for seeds in conn.execute(stmt).scalars() for url in seeds or ())

    def _settle_pages(self, conn: sa.Connection, scope: Sequence[int] | None,
                      overrides: Overrides | None = None,
                      ) -> tuple[list[SettlePage], list[_Source]]:
        """The pages the rule decides: stored documents, then the latest drop of each canonical
        URL not stored; each with the action of the rule that names it. Read in keyset pages of
        :data:`SETTLE_CHUNK` rows, drop rows without their text."""
        t, d = self.documents, self.dropped_table
        pages: list[SettlePage] = []
        sources: list[_Source] = []
        stmt = (sa.select(t.c.id, t.c.url, t.c.canonical_url, t.c.content_hash, t.c.simhash,
                          t.c.canonical_link, t.c.crawl_id, t.c.young)
                .where(t.c.content_hash.is_not(None)))
        if scope is not None:
            stmt = stmt.where(t.c.crawl_id.in_(list(scope)))
        stored: set[str] = set()
        for row_id, url, canonical, chash, simhash, names, crawl, young in _keyset(
                conn, stmt, t.c.id):
            canonical = url if not canonical or canonical == url else canonical  # one string
            stored.add(canonical)
            pages.append(SettlePage(canonical, url, chash, simhash, names or "",
                                    young=bool(young)))
            sources.append(_Source(doc_id=row_id, crawl_id=crawl))
        latest: dict[str, Any] = {}  # canonical URL -> its latest drop row (ascending ids)
        stmt = (sa.select(*(d.c[name] for name in _DROP_COLUMNS))
                .where(d.c.reason.in_((EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE)),
                       d.c.content_hash.is_not(None)))
        if scope is not None:
            stmt = stmt.where(d.c.crawl_id.in_(list(scope)))
        for row in _keyset(conn, stmt, d.c.id):
            url = row.url
            canonical = url if not row.canonical_url or row.canonical_url == url \
                else row.canonical_url
            if canonical not in stored:
                latest.pop(canonical, None)  # re-inserted: the dict stays in id order
                latest[canonical] = row
        stored.clear()
        for canonical, drop in latest.items():
            pages.append(SettlePage(
                canonical, drop.url, drop.content_hash, drop.simhash,
                drop.canonical_link or "", kept=False,
                duplicate_of=drop.duplicate_of or "", reason=drop.reason,
                distance=drop.distance, young=bool(drop.young)))
            sources.append(_Source(drop_id=drop.id, crawl_id=drop.crawl_id))
        if overrides:
            pages = [_ruled(page, overrides) for page in pages]
        return pages, sources

    # --- moving -------------------------------------------------------------------------------

    def _unfingerprinted(self, conn: sa.Connection, scope: Sequence[int] | None,
                         overrides: Overrides) -> list[tuple[SettlePage, _Source]]:
        """Stored pages without a content hash (binary ones: no duplicate group) that a drop
        rule names: moved out like any page the rule names."""
        if not any(rule.action == DROP for rule in overrides):
            return []
        t = self.documents
        stmt = sa.select(t.c.id, t.c.url, t.c.canonical_url, t.c.crawl_id).where(
            t.c.content_hash.is_(None))
        if scope is not None:
            stmt = stmt.where(t.c.crawl_id.in_(list(scope)))
        return [(SettlePage(canonical or url, url, "", None), _Source(row_id, crawl_id=crawl))
                for row_id, url, canonical, crawl in conn.execute(stmt)
                if overrides.dropped(canonical or url)]

    def _apply(self, conn: sa.Connection, pages: Sequence[SettlePage],
               sources: Sequence[_Source], moves: Plan, max_chars: int,
               bare: Sequence[tuple[SettlePage, _Source]] = ()) -> Settled:
        done = Settled(moves.groups, moves.pages)
        now = utcnow()
        stored = self._promoted_rows(conn, [sources[i].drop_id for i in moves.promote], now)
        written: list[dict[str, Any]] = []
        if stored:
            written = self._upsert(conn, stored)
            urls = [pages[i].url for i in moves.promote]
            for chunk in chunked(urls):
                conn.execute(sa.delete(self.dropped_table)
                             .where(self.dropped_table.c.url.in_(chunk)))
            done.promoted = len(stored)
            done.rows += [{"url": row["url"], "reason": KEPT_REASON, "duplicate_of": None,
                           "distance": None, "simhash": row["simhash"],
                           "duplicate_simhash": None, "rule": SETTLED_RULE,
                           "crawl_id": row["crawl_id"], "dropped_at": now} for row in stored]
        demotions = [self._demotion(pages, i, verdict, sources[i], max_chars)
                     for i, verdict in moves.demote]
        demotions += [_exclusion(pages[i], sources[i]) for i in moves.exclude]
        demotions += [_exclusion(page, source) for page, source in bare]
        removed = self._demote(conn, demotions)
        # the sets last, in one call: a distributed crawl's row is locked only from here on
        self._track_sets(conn, written, removed)
        for demotion in demotions:
            if demotion["row"] is not None:
                done.demoted += 1
                done.rows += [demotion["row"], *demotion["repointed"]]
        # after the demotions (whose own repointing is only a first guess): every drop of
        # the groups names its kept page by the rule
        repoints = [(i, v) for i, v in moves.repoint] + [
            (i, v) for i, v in moves.demote if pages[i].kept]
        done.rows += self._repoint_all(conn, pages, repoints, now)
        done.repointed = len(moves.repoint)
        return done

    def _promoted_rows(self, conn: sa.Connection, drop_ids: Sequence[int | None],
                       now: Any) -> list[dict[str, Any]]:
        """The ``documents`` rows of pages stored again, from their drop rows (in the order of
        ``drop_ids``), read whole in chunks."""
        d = self.dropped_table
        found: dict[int, dict[str, Any]] = {}
        for chunk in chunked([i for i in drop_ids if i is not None]):  # bounded IN lists
            for row in conn.execute(sa.select(d).where(d.c.id.in_(list(chunk)))).mappings():
                found[row["id"]] = _promoted_row(row, now)
        return [found[i] for i in drop_ids if i is not None]

    @staticmethod
    def _demotion(pages: Sequence[SettlePage], i: int, verdict: Verdict, source: _Source,
                  max_chars: int) -> dict[str, Any]:
        assert verdict.duplicate_of is not None
        kept = pages[verdict.duplicate_of]
        return {"url": pages[i].url, "duplicate_of": kept.url, "reason": verdict.reason,
                "distance": verdict.distance, "duplicate_simhash": kept.simhash,
                "duplicate_content_hash": kept.content_hash, "crawl_id": source.crawl_id,
                "rule": SETTLED_RULE, "max_chars": max_chars}

    def _repoint_all(self, conn: sa.Connection, pages: Sequence[SettlePage],
                     moves: Iterable[tuple[int, Verdict]], now: Any) -> list[dict[str, Any]]:
        """Make the latest drop row of each page name its kept page by the rule; returns the
        rows changed (for the drop log)."""
        d = self.dropped_table
        rows: list[dict[str, Any]] = []
        for i, verdict in sorted(moves):
            assert verdict.duplicate_of is not None
            page, kept = pages[i], pages[verdict.duplicate_of]
            latest = conn.execute(sa.select(d.c.id, d.c.duplicate_of, d.c.reason, d.c.distance,
                                            d.c.duplicate_simhash, d.c.crawl_id, d.c.rule)
                                  .where(d.c.url == page.url)
                                  .order_by(d.c.id.desc()).limit(1)).first()
            if latest is None:
                continue
            same = (latest.duplicate_of == kept.url and latest.reason == verdict.reason
                    and latest.distance == verdict.distance)
            if same and latest.duplicate_simhash == kept.simhash:
                continue
            update = {"row_id": latest.id, "new_of": kept.url, "new_reason": verdict.reason,
                      "new_distance": verdict.distance,
                      "new_rule": latest.rule if same else REPOINTED_RULE,
                      "new_simhash": kept.simhash}
            self._update_drops(conn, [update])
            if not same:
                rows.append(repointed_row(page.url, page.simhash, latest.crawl_id, update, now))
        return rows


def _ruled(page: SettlePage, overrides: Overrides) -> SettlePage:
    """``page`` with the action of the keep or drop rule that names it."""
    rule = overrides.page(page.canonical)
    return replace(page, override=rule.action) if rule is not None else page


def _named(page: SettlePage, rules: Overrides) -> bool:
    return rules.page(page.canonical) is not None or page.canonical in rules.pair_urls


def _exclusion(page: SettlePage, source: _Source) -> dict[str, Any]:
    """The demotion of a stored page a drop rule names: reason ``override``, no kept page, its
    text kept whole (no ``max_chars``: the rule may be removed, the page stored again)."""
    return {"url": page.url, "duplicate_of": None, "reason": OVERRIDE, "distance": None,
            "duplicate_simhash": None, "duplicate_content_hash": None,
            "crawl_id": source.crawl_id, "rule": SETTLED_RULE}


def _promoted_row(drop: Any, now: Any) -> dict[str, Any]:
    """The ``documents`` row of a page stored again, from its drop row."""
    return {"url": drop["url"], "canonical_url": drop["canonical_url"] or drop["url"],
            "title": drop["title"], "text": drop["text"],
            "content_hash": drop["content_hash"], "simhash": drop["simhash"],
            "crawl_id": drop["crawl_id"], "updated_at": now,
            **{name: drop[name] for name in KEPT_COLUMNS}}


def _keyset(conn: sa.Connection, stmt: sa.Select[Any], key: sa.Column[int],
            ) -> Iterator[Any]:
    """The rows of ``stmt`` (which selects ``key``'s column) in ascending ``key`` order, read
    :data:`SETTLE_CHUNK` at a time: no query's result is held whole."""
    last: int | None = None
    while True:
        page = stmt.order_by(key).limit(SETTLE_CHUNK)
        if last is not None:
            page = page.where(key > last)
        rows = conn.execute(page).all()
        yield from rows
        if len(rows) < SETTLE_CHUNK:
            return
        last = getattr(rows[-1], key.name)

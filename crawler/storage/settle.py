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

The pages are read by :mod:`crawler.storage.settleread`: every row as a few integers, and as a
:class:`~crawler.dedup.settle.SettlePage` only the pages that may have a duplicate. Over 10**5
stored pages without duplicates the settle's peak RSS is ~210 bytes a page (~990 when every
page was read as one), over 10**5 with 20% drops ~490 (~1060).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from crawler.dedup.overrides import DROP, Overrides
from crawler.dedup.preference import seed_hosts
from crawler.dedup.settle import Plan, SettlePage, Verdict, plan
from crawler.storage.base import StoreBase
from crawler.storage.rows import chunked
from crawler.storage.settleread import SettleInput, SettleQuery, Source, read_settle
from crawler.storage.types import utcnow
from crawler.storage.write import KEPT_COLUMNS, WriteSide, repointed_row
from crawler.vocab import KEPT_REASON, OVERRIDE, REPOINTED_RULE, SETTLED_RULE

logger = logging.getLogger(__name__)

#: Key of the PostgreSQL advisory lock held while settling (workers ending at once).
SETTLE_LOCK_KEY = 0x736574746C65  # "settle"

#: Rows read per query while settling (keyset pages by id): the settle of a million-page store
#: never holds one query's whole result, and drop rows are read without their text.
SETTLE_CHUNK = 5000


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
            read = self._settle_input(conn, SettleQuery(
                k, scope, frozenset(pending), everything, overrides, touched))
            pages, sources = read.pages, read.sources
            distinct = overrides.distinct if overrides else None
            moves = (plan(pages, k, seeds, read.start, prefer_canonical, distinct)
                     if read.asked or overrides else Plan())
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

    def _settle_input(self, conn: sa.Connection, query: SettleQuery) -> SettleInput:
        """The pages the rule decides (:func:`crawler.storage.settleread.read_settle`), read
        :data:`SETTLE_CHUNK` rows at a time."""
        return read_settle(conn, self.documents, self.dropped_table, query, SETTLE_CHUNK)

    # --- moving -------------------------------------------------------------------------------

    def _unfingerprinted(self, conn: sa.Connection, scope: Sequence[int] | None,
                         overrides: Overrides) -> list[tuple[SettlePage, Source]]:
        """Stored pages without a content hash (binary ones: no duplicate group) that a drop
        rule names: moved out like any page the rule names."""
        if not any(rule.action == DROP for rule in overrides):
            return []
        t = self.documents
        stmt = sa.select(t.c.id, t.c.url, t.c.canonical_url, t.c.crawl_id).where(
            t.c.content_hash.is_(None))
        if scope is not None:
            stmt = stmt.where(t.c.crawl_id.in_(list(scope)))
        return [(SettlePage(canonical or url, url, "", None), Source(row_id, crawl_id=crawl))
                for row_id, url, canonical, crawl in conn.execute(stmt)
                if overrides.dropped(canonical or url)]

    def _apply(self, conn: sa.Connection, pages: Sequence[SettlePage],
               sources: Sequence[Source], moves: Plan, max_chars: int,
               bare: Sequence[tuple[SettlePage, Source]] = ()) -> Settled:
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
    def _demotion(pages: Sequence[SettlePage], i: int, verdict: Verdict, source: Source,
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


def _exclusion(page: SettlePage, source: Source) -> dict[str, Any]:
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


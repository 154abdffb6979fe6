"""The ``overrides`` and ``reviews`` tables (revision 0011): written by :class:`OverrideSide`
(the Store's), read by :class:`OverrideReader` (a review command's reflected database, where
an older database without the tables has none).

Rows become :class:`crawler.dedup.overrides.Override` and :class:`crawler.dedup.overrides.Review`;
the rules themselves (matching, the file) are :mod:`crawler.dedup.overrides`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from crawler.dedup.overrides import DISTINCT, Override, Overrides, Review, read_file
from crawler.storage import tables
from crawler.storage.base import StoreBase
from crawler.storage.reader import ReaderBase
from crawler.storage.types import optional_time, utcnow
from crawler.urls.urlnorm import UrlPolicy


def override_of(row: Mapping[Any, Any]) -> Override:
    return Override(row["action"], row["target"], row["other"] or "", row["note"] or "",
                    optional_time(row["created_at"]), row["id"])  # fmt: skip


def review_of(row: Mapping[Any, Any]) -> Review:
    return Review(row["url"], row["other"] or "", row["decision"], row["verdict"],
                  row["reason"] or "", row["distance"], row["note"] or "",
                  optional_time(row["reviewed_at"]), row["crawl_id"], row["id"])  # fmt: skip


def _same_key(table: sa.Table, rule: Override) -> sa.ColumnElement[bool]:
    """The rows a rule replaces: keep/drop of its target, or its distinct pair."""
    if rule.action == DISTINCT:
        return sa.and_(table.c.target == rule.target, table.c.other == rule.other)
    return sa.and_(table.c.target == rule.target, table.c.action != DISTINCT)


def _row_id(result: sa.CursorResult[Any]) -> int | None:
    key = result.inserted_primary_key
    return int(key[0]) if key else None


class OverrideSide(StoreBase):
    """Record rules and reviews (each in its own transaction)."""

    overrides_table: sa.Table = tables.overrides
    reviews_table: sa.Table = tables.reviews

    def add_override(self, rule: Override) -> tuple[Override, list[Override]]:
        """Record ``rule`` (replacing the rule of its target or pair); returns it as stored
        and the rules it replaced."""
        self.check()
        t = self.overrides_table
        stored = replace(rule, created_at=rule.created_at or utcnow(), source="")
        with self._errors("recording an override"), self.engine.begin() as conn:
            replaced = [override_of(r) for r in
                        conn.execute(sa.select(t).where(_same_key(t, rule))).mappings()]
            conn.execute(sa.delete(t).where(_same_key(t, rule)))
            result = conn.execute(sa.insert(t).values(
                action=stored.action, target=stored.target, other=stored.other,
                note=stored.note, created_at=stored.created_at))
        return replace(stored, id=_row_id(result)), replaced

    def remove_override(self, target: str, other: str = "") -> list[Override]:
        """Delete the rules of ``target`` (the pair ``target``, ``other``); returns them."""
        self.check()
        t = self.overrides_table
        where = sa.and_(t.c.target == target, t.c.other == other)
        with self._errors("removing an override"), self.engine.begin() as conn:
            removed = [override_of(r) for r in conn.execute(sa.select(t).where(where)).mappings()]
            conn.execute(sa.delete(t).where(where))
        return removed

    def overrides(self) -> list[Override]:
        """Every rule, oldest first."""
        self.check()
        t = self.overrides_table
        with self._errors("reading overrides"), self.engine.connect() as conn:
            return [override_of(r) for r in conn.execute(sa.select(t).order_by(t.c.id)).mappings()]

    def add_review(self, review: Review) -> Review:
        """Record ``review``; returns it as stored."""
        self.check()
        stored = replace(review, reviewed_at=review.reviewed_at or utcnow())
        values = {name: getattr(stored, name) for name in (
            "url", "other", "decision", "verdict", "reason", "distance", "note", "reviewed_at",
            "crawl_id")}  # fmt: skip
        with self._errors("recording a review"), self.engine.begin() as conn:
            result = conn.execute(sa.insert(self.reviews_table).values(**values))
        return replace(stored, id=_row_id(result))


class OverrideReader(ReaderBase):
    """The rules and reviews of a database opened for review (none in an older one)."""

    def _table(self, name: str) -> sa.Table | None:
        return self.tables.get(name)

    def overrides(self) -> list[Override]:
        """Every rule, oldest first."""
        t = self._table("overrides")
        if t is None:
            return []
        return [override_of(row) for row in self._rows(sa.select(t).order_by(t.c.id))]

    def reviews(self, url: str | None = None) -> list[Review]:
        """Every review (of ``url``, as the page reviewed or the other), oldest first."""
        t = self._table("reviews")
        if t is None:
            return []
        query = sa.select(t).order_by(t.c.id)
        if url is not None:
            query = query.where(sa.or_(t.c.url == url, t.c.other == url))
        return [review_of(row) for row in self._rows(query)]

    def latest_reviews(self) -> dict[tuple[str, str], Review]:
        """The newest review of each ``(url, other)`` pair."""
        return {(r.url, r.other): r for r in self.reviews()}


def load_overrides(url: str | None, path: str = "", policy: UrlPolicy | None = None,
                   ) -> Overrides:
    """The rules a crawl obeys: the database's at ``url`` (None: no storage) and the file's
    at ``path`` (``DEDUP_OVERRIDES_FILE``, its URLs canonical under ``policy``;
    :func:`rules_of`)."""
    from crawler.storage.store import Store

    if not url:
        return Overrides(read_file(path, policy) if path else [])
    with Store(url) as store:
        return rules_of(store, path, policy)


def rules_of(store: OverrideSide, path: str = "", policy: UrlPolicy | None = None) -> Overrides:
    """The database's rules, then the file's: a file line replaces a database rule of its
    target, the file being the word a person keeps in version control."""
    return Overrides(store.overrides() + (read_file(path, policy) if path else []))

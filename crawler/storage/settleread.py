"""The settle step's read (:meth:`crawler.storage.settle.SettleSide.settle`): the pages the rule
decides, with a :class:`~crawler.dedup.settle.SettlePage` built only for those that can be in
a group.

Which pages (as :mod:`crawler.storage.settle` says): every stored document with a content hash,
then, for each canonical URL not stored, its latest drop row of reason ``exact_duplicate``,
``near_duplicate`` or ``override``; only the crawls of ``scope`` when given. The pages come in
that order (documents by id, drops by the id of that latest row), and the rule's outcome is the
one it gives on every page: a page with no duplicate in the store is alone in its group, and
the rule leaves a page alone as it is (:func:`crawler.dedup.settle.components`).

Two passes, so that a store of a million pages is never held as Python objects:

1. **narrow**: every row in keyset pages of ``chunk`` rows, its strings dropped with the page:
   per row its id, the 64-bit keys of its content hash and URL, its SimHash, the 128-bit key
   (``xxh3_128``) of its canonical URL, which finds each canonical URL's latest drop and the
   drops of canonical URLs stored, and two flags (settles now: its crawl is pending or a rule
   names it; must be read whole). About 52 bytes per row read, in numpy arrays; then about 40
   more at a time while :func:`~crawler.dedup.settle.near_any` runs.
2. **whole**: the rows of the pages that may be in a group, by id (bounded ``IN`` lists):
   those :func:`crawler.dedup.settle.partnered` finds, plus every page the rule can move while
   alone (a drop of reason ``override``, a page a person's rule names, a drop whose kept page
   a drop rule names) and the pages sharing a URL (the rule finds a recorded drop's kept page
   by URL: all of them, so that it finds the same one).

Limits: two canonical URLs are taken as one when their 128-bit keys are equal (as two pages are
one content when their content hashes are). On PostgreSQL each query sees the rows committed
when it starts (as the keyset pages did before): a row changed by a crawl still running
between the passes is read as it is in the second, and a row gone by then is left out.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import xxhash

from crawler.content.simindex import content_key, url_key
from crawler.dedup.overrides import DROP, Overrides
from crawler.dedup.settle import (
    SMALL_PAGES,
    SettlePage,
    near_any,
    near_any_pure,
    shared,
    shared_pure,
)
from crawler.storage.rows import chunked
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE

if TYPE_CHECKING:
    import numpy as np
else:
    np = None  # numpy, imported once more than SMALL_PAGES rows are read (_numpy)


def _numpy() -> None:
    """Import numpy into this module's ``np`` once."""
    global np
    if np is None:
        import numpy

        np = numpy


#: The drop row columns the rule needs (``text``, ``title``... are read only to store a page again).
DROP_COLUMNS = ("id", "url", "canonical_url", "content_hash", "simhash", "canonical_link",
                "duplicate_of", "reason", "distance", "young", "crawl_id")
#: The documents columns the rule needs.
DOCUMENT_COLUMNS = ("id", "url", "canonical_url", "content_hash", "simhash", "canonical_link",
                    "crawl_id", "young")
#: Per row of the first pass: row id, keys of the content hash, SimHash (and whether there is
#: one), keys of the URL and canonical URL, whether the page settles now and must be read whole;
#: per drop row, with a drop rule only, the key of the URL it names.
_FIELDS = ("id", "content", "fp", "has_fp", "url", "canon", "start", "whole", "of")
#: The drop reasons of a page the settle step may store again.
SETTLED_REASONS = (EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE)


@dataclass(slots=True)
class Source:
    """Where a settle page came from: its documents row id, or the id of its latest drop row
    (read whole only if the page is stored again)."""

    doc_id: int | None = None
    drop_id: int | None = None
    crawl_id: int | None = None


@dataclass
class SettleInput:
    """The pages to give the rule (``pages``, each with its ``sources`` entry) and the indexes
    of those whose groups it re-decides (``start``; None: every group). ``asked``: some page of
    the store settles now, in a group or not (the rule then also takes in the drops whose reason
    is gone, even if no page in ``start``)."""

    pages: list[SettlePage] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    start: list[int] | None = None
    asked: bool = True


@dataclass(frozen=True)
class SettleQuery:
    """What the settle step reads: the crawls of ``scope`` (None: all), the crawls settling
    now (``pending``), a person's rules (``overrides``) and the rules just replaced or removed
    (``touched``), ``k``, and ``everything`` (every group, not only those that changed)."""

    k: int
    scope: Sequence[int] | None = None
    pending: frozenset[int] = frozenset()
    everything: bool = False
    overrides: Overrides | None = None
    touched: Overrides | None = None


def read_settle(conn: sa.Connection, documents: sa.Table, dropped: sa.Table,
                query: SettleQuery, chunk: int) -> SettleInput:
    """The pages of ``query`` for :func:`crawler.dedup.settle.plan` (module docstring)."""
    narrow = _Narrow(query)
    narrow.read(conn, documents, dropped, chunk)
    stored = narrow.stored
    ids: Any  # per page: a list (small) or an array, as start
    start: Any
    if narrow.small:  # Python lists, no numpy (the same pages)
        ids, start, wanted = narrow.wanted_pure()
        asked = any(start)
        split = bisect_left(wanted, stored)
        doc_ids, drop_ids = [ids[i] for i in wanted[:split]], [ids[i] for i in wanted[split:]]
    else:
        ids, start, at = narrow.wanted()
        asked = bool(start.any())
        split = int(np.searchsorted(at, stored))
        doc_ids, drop_ids = ids[at[:split]].tolist(), ids[at[split:]].tolist()
        wanted = at.tolist()
    found = SettleInput(start=None if query.everything else [],
                        asked=query.everything or asked)
    docs = _ById(conn, documents, DOCUMENT_COLUMNS, doc_ids)
    drops = _ById(conn, dropped, DROP_COLUMNS, drop_ids)
    for i in wanted:
        row = (docs if i < stored else drops).get(int(ids[i]))
        if row is None:  # changed by a crawl still running (module docstring)
            continue
        if found.start is not None and start[i]:
            found.start.append(len(found.pages))
        found.pages.append(_ruled(_settle_page(row, stored=i < stored), query.overrides))
        found.sources.append(Source(doc_id=row.id, crawl_id=row.crawl_id) if i < stored
                             else Source(drop_id=row.id, crawl_id=row.crawl_id))
    return found


class _Narrow:
    """The first pass: per row read, numpy arrays of its keys and flags (module docstring);
    Python lists while at most :data:`~crawler.dedup.settle.SMALL_PAGES` rows are read
    (``small``: :meth:`wanted_pure`, numpy never loaded)."""

    def __init__(self, query: SettleQuery) -> None:
        self.query = query
        self.rules = query.overrides or None
        self.touched = query.touched or None
        # only a drop rule makes a drop's kept page gone (crawler.dedup.settle.orphans_of)
        self.gone = any(rule.action == DROP for rule in self.rules or ())
        self.parts: dict[str, list[Any]] = {name: [] for name in _FIELDS}  # arrays or lists
        self.rows = 0  # rows read
        self.stored = 0  # rows of documents (read first)
        self.excluded: set[int] = set()  # URL keys of the pages a drop rule names

    def read(self, conn: sa.Connection, documents: sa.Table, dropped: sa.Table,
             chunk: int) -> None:
        """Read every row, ``chunk`` at a time: documents, then drops."""
        scope = [] if self.query.scope is None else list(self.query.scope)
        stmt = sa.select(*(documents.c[name] for name in (
            "id", "url", "canonical_url", "content_hash", "simhash", "crawl_id")))
        stmt = stmt.where(documents.c.content_hash.is_not(None))
        if self.query.scope is not None:
            stmt = stmt.where(documents.c.crawl_id.in_(scope))
        for rows in keyset(conn, stmt, documents.c.id, chunk):
            self.add(rows, stored=True)
        stmt = sa.select(*(dropped.c[name] for name in (
            "id", "url", "canonical_url", "content_hash", "simhash", "crawl_id", "reason",
            "duplicate_of")))
        stmt = stmt.where(dropped.c.reason.in_(SETTLED_REASONS),
                          dropped.c.content_hash.is_not(None))
        if self.query.scope is not None:
            stmt = stmt.where(dropped.c.crawl_id.in_(scope))
        for rows in keyset(conn, stmt, dropped.c.id, chunk):
            self.add(rows, stored=False)

    def add(self, rows: Sequence[Any], stored: bool) -> None:
        """Keys and flags of one keyset page of ``rows``."""
        columns: dict[str, list[Any]] = {name: [] for name in _FIELDS}
        for row in rows:
            url = row.url
            canonical = url if not row.canonical_url or row.canonical_url == url \
                else row.canonical_url
            start, whole = self._flags(canonical, url, row.crawl_id)
            if not stored:
                whole = whole or row.reason == OVERRIDE
                if self.gone:
                    columns["of"].append(url_key(row.duplicate_of or ""))
            columns["id"].append(row.id)
            columns["content"].append(content_key(row.content_hash))
            columns["fp"].append(row.simhash or 0)
            columns["has_fp"].append(row.simhash is not None)
            columns["url"].append(url_key(url))
            columns["canon"].append(xxhash.xxh3_128_digest(
                canonical.encode("utf-8", "surrogatepass")))
            columns["start"].append(start)
            columns["whole"].append(whole)
        if stored:
            self.stored += len(rows)
        self.rows += len(rows)
        for name, values in columns.items():
            self.parts[name].append(values)
        if not self.small:  # every part an array from here on
            _numpy()
            for name, parts in self.parts.items():
                self.parts[name] = [_array(name, p) if isinstance(p, list) else p for p in parts]

    @property
    def small(self) -> bool:
        return self.rows <= SMALL_PAGES

    def _flags(self, canonical: str, url: str, crawl: int | None) -> tuple[bool, bool]:
        """``(start, whole)``: the page settles now; it must be read whole (named by a rule)."""
        start = crawl in self.query.pending
        whole = False
        if self.rules is not None:
            rule = self.rules.page(canonical)
            whole = rule is not None
            start = start or whole or canonical in self.rules.pair_urls
            if rule is not None and rule.action == DROP:
                self.excluded.add(url_key(url))
        if self.touched is not None and not start:
            start = (self.touched.page(canonical) is not None
                     or canonical in self.touched.pair_urls)
        return start, whole

    def _take(self, name: str, keep: np.ndarray) -> np.ndarray:
        """The field ``name`` of the pages ``keep``, its parts freed."""
        return _join(self.parts.pop(name), name)[keep]

    def wanted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, start, wanted)``: per page (every document row, then the latest drop row of
        each canonical URL not stored, in id order) its row id and whether it settles now, and
        the pages read whole (module docstring), ascending. Frees the parts as it goes."""
        chosen = _latest_drops(_join(self.parts.pop("canon"), "canon"), self.stored)
        keep = np.concatenate([np.arange(self.stored), chosen])
        wanted = self._take("whole", keep)
        wanted |= shared(self._take("url", keep))  # the rule finds a kept page by URL
        of = _join(self.parts.pop("of"), "of")
        if self.excluded:
            gone = np.isin(of[chosen - self.stored],
                           np.array(sorted(self.excluded), dtype=np.uint64))
            wanted[self.stored:] |= gone
        del of
        # crawler.dedup.settle.partnered, one array at a time
        wanted |= shared(self._take("content", keep))
        fps, has_fp = self._take("fp", keep), self._take("has_fp", keep)
        wanted |= near_any(fps, has_fp, self.query.k)
        del fps, has_fp
        return self._take("id", keep), self._take("start", keep), np.flatnonzero(wanted)

    def wanted_pure(self) -> tuple[list[int], list[bool], list[int]]:
        """:meth:`wanted` of a small read, in Python lists (the same values)."""
        cols = {name: [v for part in parts for v in part] for name, parts in self.parts.items()}
        self.parts.clear()
        stored, canon = self.stored, cols["canon"]
        held = set(canon[:stored])
        latest: dict[bytes, int] = {}  # the latest drop row of each canonical URL not stored
        for i in range(stored, len(canon)):
            if canon[i] not in held:
                latest[canon[i]] = i
        chosen = sorted(latest.values())
        keep = [*range(stored), *chosen]

        def take(name: str) -> list[Any]:
            return [cols[name][i] for i in keep]

        flags = [take("whole"), shared_pure(take("url")), shared_pure(take("content")),
                 near_any_pure(take("fp"), take("has_fp"), self.query.k)]  # fmt: skip
        if self.excluded:
            of = cols["of"]
            flags.append([False] * stored + [of[i - stored] in self.excluded for i in chosen])
        wanted = [i for i, page in enumerate(zip(*flags, strict=True)) if any(page)]
        return take("id"), take("start"), wanted


class _ById:
    """Rows of one table by id, fetched :func:`~crawler.storage.rows.chunked` ids at a time as
    they are asked for (``ids`` ascending, asked in that order)."""

    def __init__(self, conn: sa.Connection, table: sa.Table, columns: Sequence[str],
                 ids: list[int]) -> None:
        self.conn = conn
        self.stmt = sa.select(*(table.c[name] for name in columns))
        self.column = table.c.id
        self.chunks = iter(chunked(ids))
        self.rows: dict[int, Any] = {}
        self.last = -1  # the highest id of the chunk in ``rows``

    def get(self, row_id: int) -> Any:
        while row_id > self.last:
            chunk = next(self.chunks, None)
            if chunk is None:
                return None
            self.last = chunk[-1]
            self.rows = {row.id: row for row in self.conn.execute(
                self.stmt.where(self.column.in_(list(chunk))))}
        return self.rows.get(row_id)


def _latest_drops(canon: np.ndarray, stored: int) -> np.ndarray:
    """Positions (ascending) of the drop rows (from ``stored`` on, ascending ids) that are the
    latest of a canonical URL no document row holds; ``canon``: 16-byte keys, one per row."""
    if len(canon) == stored:
        return np.empty(0, np.intp)
    pairs = canon.view(np.uint64).reshape(-1, 2)
    order = np.lexsort((np.arange(len(pairs)), pairs[:, 1], pairs[:, 0]))
    ordered = pairs[order]
    last = np.ones(len(order), np.bool_)  # the last row of each run of one key
    last[:-1] = (ordered[1:] != ordered[:-1]).any(axis=1)
    first = np.roll(last, 1)
    first[0] = True
    run = np.cumsum(first) - 1
    has_doc = np.zeros(int(run[-1]) + 1, np.bool_)
    has_doc[run[order < stored]] = True
    latest = order[last & (order >= stored) & ~has_doc[run]]
    return np.sort(latest)


def _array(name: str, values: list[Any]) -> np.ndarray:
    if name == "canon":
        return np.frombuffer(b"".join(values), dtype="V16")
    flags = ("has_fp", "start", "whole")
    dtype = np.int64 if name == "id" else np.bool_ if name in flags else np.uint64
    return np.array(values, dtype=dtype)


def _join(parts: list[np.ndarray], name: str) -> np.ndarray:
    if parts:
        return np.concatenate(parts)
    return _array(name, [])


def _settle_page(row: Any, stored: bool) -> SettlePage:
    url = row.url
    canonical = url if not row.canonical_url or row.canonical_url == url else row.canonical_url
    if stored:
        return SettlePage(canonical, url, row.content_hash, row.simhash,
                          row.canonical_link or "", young=bool(row.young))
    return SettlePage(canonical, url, row.content_hash, row.simhash, row.canonical_link or "",
                      kept=False, duplicate_of=row.duplicate_of or "", reason=row.reason,
                      distance=row.distance, young=bool(row.young))


def _ruled(page: SettlePage, overrides: Overrides | None) -> SettlePage:
    """``page`` with the action of the keep or drop rule that names it."""
    rule = overrides.page(page.canonical) if overrides else None
    return replace(page, override=rule.action) if rule is not None else page


def keyset(conn: sa.Connection, stmt: sa.Select[Any], key: sa.Column[int],
           chunk: int) -> Iterator[Sequence[Any]]:
    """The rows of ``stmt`` (which selects ``key``'s column) in ascending ``key`` order, in
    pages of ``chunk`` rows: no query's result is held whole."""
    last: int | None = None
    while True:
        page = stmt.order_by(key).limit(chunk)
        if last is not None:
            page = page.where(key > last)
        rows = conn.execute(page).all()
        if rows:
            yield rows
        if len(rows) < chunk:
            return
        last = getattr(rows[-1], key.name)

"""``scrapy crawldiff``: did two crawls store the same pages? Which differ?

::

    scrapy crawldiff A B [--db URL] [--db-b URL] [--limit N] [--json]

``A`` and ``B`` name crawls: an id (``3``) or ``latest`` in ``--db`` (default ``STORAGE_URL``;
``B`` in ``--db-b`` when given), or ``DB:ID`` with the database in front of the last colon
(``old/crawl.db:3``, ``postgresql://bot@db/crawl:latest``). A database is a SQLAlchemy URL or
a SQLite file path; a missing file is reported, never created. A database at an older schema is
migrated first, as a crawl would (revision 0005 computes the fingerprints of its crawls).

First the verdict in O(1), from the fingerprints each crawl records (:mod:`crawler.content.setfp`):
the URLs stored, the content hashes stored and the (URL, content) pairs, each as a count and
32 hex digits. ``same`` when all three are equal: the crawls stored the same URLs with the same
contents (but with probability about 2**-128). Otherwise the pages are read and the differences
listed, sorted by URL: URLs only in A, only in B, and URLs in both whose content hash differs
(the first 16 hex digits of each; ``-`` for a page stored without one, such as a binary body).
``--limit N`` lists at most N URLs per list (default 50; 0: counts only) and says how many more.
``--json`` prints one JSON object (full content hashes; the same limit).

Reading the differences holds A's pages in memory (about 200 bytes each).

Exit status, as diff(1): 0 the crawls are the same, 1 they differ, 2 bad input (a bad option,
an unknown crawl, a database that is missing or cannot be read).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands.console import quiet_stdout, with_safe_output

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from crawler.content.setfp import CrawlSets
    from crawler.storage import Store

DEFAULT_LIMIT = 50
HASH_DIGITS = 16  # of a content hash in the text listing
KINDS = (("urls", "URLs"), ("contents", "contents"), ("pages", "pages"))


class InputError(Exception):
    """Bad input found after parsing: a missing database, an unknown crawl (exit 2)."""


@dataclass
class Side:
    """One crawl to compare: where it is and what it recorded."""

    label: str
    db: str
    crawl_id: int
    started_at: str
    finish_reason: str
    sets: CrawlSets
    store: Store

    def pages(self) -> Iterator[tuple[str, str | None]]:
        for part in self.store.iter_crawl_pages(self.crawl_id):
            yield from part


@dataclass
class Differences:
    """Pages of A and B compared one by one (each list sorted by URL)."""

    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    changed: list[tuple[str, str | None, str | None]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.only_a or self.only_b or self.changed)


def parse_crawl(value: str, label: str) -> tuple[str | None, str]:
    """``(database or None, id or "latest")`` of a crawl argument; :class:`UsageError` else."""
    value = value.strip()
    db, colon, crawl = value.rpartition(":")
    if not colon:
        db, crawl = "", value
    if not (crawl.isdigit() or crawl == "latest") or (colon and not db):
        raise UsageError(f"crawl {label} {value!r}: expected an id, 'latest' or DB:ID "
                         "(e.g. 3, latest, crawl.db:3)", print_help=False)
    return db or None, crawl


def compare_pages(a: Iterator[tuple[str, str | None]],
                  b: Iterator[tuple[str, str | None]]) -> Differences:
    """The differences between two crawls' ``(canonical_url, content_hash)`` pages."""
    left = dict(a)
    diff = Differences()
    for url, chash in b:
        if url not in left:
            diff.only_b.append(url)
            continue
        old = left.pop(url)
        if old != chash:
            diff.changed.append((url, old, chash))
    diff.only_a = sorted(left)
    diff.only_b.sort()
    diff.changed.sort()
    return diff


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "A B [--db URL] [--db-b URL] [--limit N] [--json]"

    def short_desc(self) -> str:
        return "Compare what two crawls stored: O(1) verdict, then the differing URLs"

    def long_desc(self) -> str:
        return ("A and B are crawl ids (or 'latest') in --db, B in --db-b when given, or "
                "DB:ID. Exit status 0 when the crawls stored the same pages, 1 when they "
                "differ, 2 for bad input.")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Crawl diff")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--db-b", metavar="URL", help="database of crawl B (default --db)")
        group.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                           help=f"URLs listed per list (default {DEFAULT_LIMIT}; 0: counts only)")
        group.add_argument("--json", action="store_true", help="one JSON object")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if len(args) != 2:
            raise UsageError("expected two crawls, A and B (e.g. `scrapy crawldiff 1 2`)",
                             print_help=False)
        if opts.limit < 0:
            raise UsageError("--limit must be >= 0", print_help=False)
        from crawler.storage import StorageError

        crawls = parse_crawl(args[0], "A"), parse_crawl(args[1], "B")
        try:
            a, b, diff = self._compare(opts, crawls)
        except (InputError, StorageError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        self.exitcode = 0 if a.sets == b.sets else 1
        try:
            if opts.json:
                print(json.dumps(as_json(a, b, diff, opts.limit), ensure_ascii=False))
            else:
                sys.stdout.write(format_text(a, b, diff, opts.limit))
        except BrokenPipeError:  # `scrapy crawldiff 1 2 | head`: the reader left
            quiet_stdout()

    def _compare(self, opts: argparse.Namespace, crawls: tuple[tuple[str | None, str], ...],
                 ) -> tuple[Side, Side, Differences]:
        """Both sides, and their pages compared unless the fingerprints say they are the same."""
        assert self.settings is not None
        default_db = opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"
        (db_a, id_a), (db_b, id_b) = crawls
        stores: dict[str, Store] = {}
        try:
            known = [self.settings.get("STORAGE_URL")]  # the real URL of a masked --db
            a = _open_side("A", db_a or default_db, id_a, stores, known)
            b = _open_side("B", db_b or opts.db_b or default_db, id_b, stores, known)
            diff = Differences() if a.sets == b.sets else compare_pages(a.pages(), b.pages())
        finally:
            for store in stores.values():
                store.close()
        return a, b, diff


def _open_side(label: str, db: str, crawl: str, stores: dict[str, Store],
               real_urls: list[str | None]) -> Side:
    """Open (once per database) and read the recorded fingerprints of one crawl; a masked
    URL is resolved from ``real_urls`` (:func:`crawler.storage.resolve_db_url`)."""
    from crawler.storage import ReviewError, StorageError, Store, resolve_db_url

    try:
        url = resolve_db_url(db, real_urls)
        if url not in stores:
            stores[url] = Store(url, create=False)
        store = stores[url]
        row = store.latest_crawl() if crawl == "latest" else store.crawl(int(crawl))
        if crawl == "latest" and row is not None and row.parent_id is not None:
            row = store.crawl(row.parent_id)  # a distributed crawl's worker: the whole crawl
    except (ReviewError, StorageError) as exc:
        raise InputError(str(exc)) from None
    if row is None:
        known = ", ".join(str(c.id) for c in reversed(store.crawls()[:10])) or "none"
        raise InputError(f"crawl {label}: no crawl {crawl} in {store.url} (crawls: {known})")
    started = row.started_at.strftime("%Y-%m-%dT%H:%M:%SZ") if row.started_at else "?"
    return Side(label, store.url, row.id, started, row.finish_reason or "not finished",
                row.sets(), store)


# --- output ----------------------------------------------------------------------------------


def _verdict(a: Side, b: Side) -> str:
    if a.sets == b.sets:
        return (f"same: both crawls stored the same {a.sets.urls.count} URLs with the same "
                "contents")
    differ = [name for kind, name in KINDS[:2] if getattr(a.sets, kind) != getattr(b.sets, kind)]
    if not differ:
        return "differ: the same URLs and contents, but not on the same URLs"
    return "differ: " + " and ".join(differ) + " differ"


def _short(chash: str | None) -> str:
    return chash[:HASH_DIGITS] if chash else "-"


def _listed(title: str, lines: list[str], limit: int) -> str:
    noun = "URL" if len(lines) == 1 else "URLs"
    out = [f"{title} ({len(lines)} {noun}):\n"]
    out += [f"  {line}\n" for line in lines[:limit]]
    if len(lines) > limit:
        out.append(f"  … and {len(lines) - limit} more\n")
    return "".join(out)


def format_text(a: Side, b: Side, diff: Differences, limit: int) -> str:
    """The verdict with both crawls' fingerprints, then the differences."""
    out = [f"{side.label}: crawl {side.crawl_id} in {side.db} (started {side.started_at}, "
           f"{side.finish_reason})\n" for side in (a, b)]
    for kind, name in KINDS:
        fa, fb = getattr(a.sets, kind), getattr(b.sets, kind)
        mark = "same" if fa == fb else "differ"
        out.append(f"{name:<9} A {fa.count:>8}  {fa.hex()}\n")
        out.append(f"{'':<9} B {fb.count:>8}  {fb.hex()}  {mark}\n")
    out.append(_verdict(a, b) + "\n")
    if diff.only_a:
        out.append(_listed("only in A", diff.only_a, limit))
    if diff.only_b:
        out.append(_listed("only in B", diff.only_b, limit))
    if diff.changed:
        lines = [f"{url}  {_short(old)} -> {_short(new)}" for url, old, new in diff.changed]
        out.append(_listed("content changed", lines, limit))
    if a.sets != b.sets and not diff:
        out.append("note: the recorded fingerprints differ but the stored pages do not: a "
                   "crawl's record is damaged\n")
    return "".join(out)


def as_json(a: Side, b: Side, diff: Differences, limit: int) -> dict[str, Any]:
    """The ``--json`` object (lists cut to ``limit``; counts complete)."""

    def side(s: Side) -> dict[str, Any]:
        sets = {kind: {"count": getattr(s.sets, kind).count,
                       "fingerprint": getattr(s.sets, kind).hex()} for kind, _ in KINDS}
        return {"db": s.db, "crawl": s.crawl_id, "started_at": s.started_at,
                "finish_reason": s.finish_reason, **sets}

    return {
        "same": a.sets == b.sets,
        "same_urls": a.sets.urls == b.sets.urls,
        "same_contents": a.sets.contents == b.sets.contents,
        "a": side(a), "b": side(b),
        "only_in_a": {"count": len(diff.only_a), "urls": diff.only_a[:limit]},
        "only_in_b": {"count": len(diff.only_b), "urls": diff.only_b[:limit]},
        "content_changed": {"count": len(diff.changed), "pages": [
            {"url": url, "a": old, "b": new} for url, old, new in diff.changed[:limit]]},
    }

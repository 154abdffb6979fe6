"""The settle step's read (crawler.storage.settleread) builds a SettlePage only for the pages
that may be in a group, and decides exactly as the read of every page did: the reference here
is that earlier read (every page as a SettlePage), run on a twin of each random store, on real
SQLite files and the real PostgreSQL server, in two write orders. Also: the vectorized search
of pages with a partner (crawler.dedup.settle.partnered) against brute force, and the peak
memory of a settle over pages without duplicates."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.dedup.overrides import Overrides, make_override
from crawler.dedup.settle import SettlePage, near_any_pure, partnered, shared_pure
from crawler.storage import Store
from crawler.storage.settleread import DROP_COLUMNS, SettleInput, SettleQuery, Source
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE, SOFT_404
from tests.conftest import fresh_pg_schema

HOSTS = ("http://a.test", "http://b.test", "http://c.test:8080")
K = 3

# --- the search of pages with a partner ---------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 8), st.lists(st.tuples(st.integers(0, 4), st.lists(st.integers(0, 63),
                                                                          max_size=9),
                                             st.booleans(), st.integers(0, 12)), max_size=40))
def test_partnered_finds_exactly_the_pages_with_a_partner(
        k: int, spec: list[tuple[int, list[int], bool, int]]) -> None:
    """Fingerprints around five centres (0 and all ones among them) with 0..9 bits flipped,
    some missing, content keys from a small range: a page is found iff another page shares its
    content key or both have a fingerprint and they are within k bits."""
    centres = [0, 2**64 - 1, 0x0123_4567_89AB_CDEF, 0xF0F0_F0F0_0F0F_0F0F, 0x8000_0000_0000_0001]
    fps, has, content = [], [], []
    for centre, bits, with_fp, key in spec:
        fp = centres[centre]
        for bit in bits:
            fp ^= 1 << bit
        fps.append(fp if with_fp else 0)
        has.append(with_fp)
        content.append(2**64 - 1 - key if key % 2 else key)
    found = partnered(np.array(content, np.uint64), np.array(fps, np.uint64),
                      np.array(has, np.bool_), k)
    want = [any(j != i and (content[i] == content[j] or (
        has[i] and has[j] and bin(fps[i] ^ fps[j]).count("1") <= k)) for j in range(len(spec)))
        for i in range(len(spec))]
    assert found.tolist() == want
    pure = [a or b for a, b in zip(shared_pure(content), near_any_pure(fps, has, k), strict=True)]
    assert pure == want  # a settle of few pages: no numpy


# --- the reference: every page read as a SettlePage ---------------------------------------------


class ReferenceStore(Store):
    """A Store whose settle step reads every page as a SettlePage, as it did before
    crawler.storage.settleread: what the narrow read must decide exactly as."""

    def _settle_input(self, conn: sa.Connection, query: SettleQuery) -> SettleInput:
        pages, sources = self._every_page(conn, query.scope, query.overrides)

        def named(page: SettlePage, rules: Overrides | None) -> bool:
            return bool(rules) and (rules.page(page.canonical) is not None  # type: ignore[union-attr]
                                    or page.canonical in rules.pair_urls)  # type: ignore[union-attr]

        start = None if query.everything else [
            i for i, src in enumerate(sources) if src.crawl_id in query.pending
            or named(pages[i], query.touched) or named(pages[i], query.overrides)]
        return SettleInput(pages, sources, start, asked=start != [])

    def _every_page(self, conn: sa.Connection, scope: Any, overrides: Overrides | None,
                    ) -> tuple[list[SettlePage], list[Source]]:
        t, d = self.documents, self.dropped_table
        pages: list[SettlePage] = []
        sources: list[Source] = []
        stmt = (sa.select(t.c.id, t.c.url, t.c.canonical_url, t.c.content_hash, t.c.simhash,
                          t.c.canonical_link, t.c.crawl_id, t.c.young)
                .where(t.c.content_hash.is_not(None)).order_by(t.c.id))
        if scope is not None:
            stmt = stmt.where(t.c.crawl_id.in_(list(scope)))
        stored: set[str] = set()
        for row_id, url, canonical, chash, simhash, names, crawl, young in conn.execute(stmt):
            canonical = url if not canonical or canonical == url else canonical
            stored.add(canonical)
            pages.append(SettlePage(canonical, url, chash, simhash, names or "",
                                    young=bool(young)))
            sources.append(Source(doc_id=row_id, crawl_id=crawl))
        latest: dict[str, Any] = {}
        stmt = (sa.select(*(d.c[name] for name in DROP_COLUMNS))
                .where(d.c.reason.in_((EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE)),
                       d.c.content_hash.is_not(None)).order_by(d.c.id))
        if scope is not None:
            stmt = stmt.where(d.c.crawl_id.in_(list(scope)))
        for row in conn.execute(stmt):
            url = row.url
            canonical = url if not row.canonical_url or row.canonical_url == url \
                else row.canonical_url
            if canonical not in stored:
                latest.pop(canonical, None)
                latest[canonical] = row
        for canonical, drop in latest.items():
            pages.append(SettlePage(
                canonical, drop.url, drop.content_hash, drop.simhash,
                drop.canonical_link or "", kept=False, duplicate_of=drop.duplicate_of or "",
                reason=drop.reason, distance=drop.distance, young=bool(drop.young)))
            sources.append(Source(drop_id=drop.id, crawl_id=drop.crawl_id))
        if overrides:
            pages = [_ruled(page, overrides) for page in pages]
        return pages, sources


def _ruled(page: SettlePage, overrides: Overrides) -> SettlePage:
    rule = overrides.page(page.canonical)
    return replace(page, override=rule.action) if rule is not None else page


# --- random stores ------------------------------------------------------------------------------


class World:
    """A random web of ~60 pages around a few texts: exact copies, near copies at 1..k bits,
    pages k+1 bits away, pages without a SimHash or a content hash, young fingerprints, other
    spellings of one canonical URL, one URL under two canonical URLs, several drop rows of one
    page (and drops of pages stored since), drops of every reason, named canonicals."""

    def __init__(self, seed: int) -> None:
        self.rnd = rnd = random.Random(seed)
        self.texts = [(rnd.getrandbits(64), f"text-{n}") for n in range(7)]
        self.urls = [f"{rnd.choice(HOSTS)}/{'p' * rnd.randint(1, 3)}{n}" for n in range(60)]

    def fingerprint(self) -> tuple[int | None, str | None]:
        rnd = self.rnd
        fp, chash = rnd.choice(self.texts)
        kind = rnd.random()
        if kind < 0.25:  # an exact copy; its SimHash maybe refreshed far away, or none
            far = rnd.random()
            return (fp if far < 0.6 else None if far < 0.7 else fp ^ rnd.getrandbits(64)), chash
        flips = rnd.randint(1, K) if kind < 0.6 else K + 1 if kind < 0.75 else rnd.randint(8, 30)
        for bit in rnd.sample(range(64), flips):
            fp ^= 1 << bit
        chash = f"{chash}-{fp:x}"
        if rnd.random() < 0.05:
            return None, chash
        return fp, (None if rnd.random() < 0.03 else chash)

    def batch(self, crawl: int, size: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rnd = self.rnd
        docs, drops = [], []
        for _ in range(size):
            url = rnd.choice(self.urls)
            canonical = url
            spelling = rnd.random()
            if spelling < 0.1:
                url = url + "?utm_source=x"  # another spelling, one canonical URL
            elif spelling < 0.15:
                canonical = rnd.choice(self.urls)  # one URL, another canonical URL
            fp, chash = self.fingerprint()
            common = {"url": url, "canonical_url": canonical if rnd.random() < 0.9 else None,
                      "title": url, "text": f"text of {url}", "content_hash": chash,
                      "simhash": fp, "status": 200, "content_type": "text/html",
                      "crawl_id": crawl, "young": rnd.random() < 0.2,
                      "canonical_link": rnd.choice(self.urls) if rnd.random() < 0.2 else None}
            if rnd.random() < 0.45:
                docs.append(common)
                continue
            of = rnd.choice([*self.urls, "http://gone.test/x"])
            reason = rnd.choice([EXACT_DUPLICATE, NEAR_DUPLICATE, NEAR_DUPLICATE, OVERRIDE,
                                 SOFT_404])
            drops.append({**common, "reason": reason,
                          "duplicate_of": None if reason == OVERRIDE else of,
                          "distance": rnd.randint(0, K) if reason == NEAR_DUPLICATE else 0,
                          "duplicate_simhash": None})
        # a document row per canonical URL and batch (the upsert's own rule, tested elsewhere)
        docs = list({d["canonical_url"] or d["url"]: d for d in docs}.values())
        docs = list({d["url"]: d for d in docs}.values())
        return docs, drops

    def rules(self) -> tuple[Overrides, Overrides]:
        """A person's rules (keep, drop, a pattern, a host, a distinct pair) and those just
        removed (``touched``)."""
        rnd = self.rnd
        urls = rnd.sample(self.urls, 6)
        rules = [make_override("keep", urls[0]), make_override("drop", urls[1]),
                 make_override("drop", urls[2]), make_override("distinct", urls[3], urls[4]),
                 make_override("keep", f"{HOSTS[1]}/pp*")]
        if rnd.random() < 0.5:
            rules.append(make_override("drop", "host:c.test"))
        return Overrides(rules), Overrides([make_override("drop", urls[5])])


def _tables(store: Store) -> tuple[list[Any], list[Any]]:
    with store.engine.connect() as conn:
        docs = conn.execute(sa.select(*(c for c in store.documents.c if c.key not in (
            "updated_at", "fetched_at"))).order_by(store.documents.c.id)).all()
        drops = conn.execute(sa.select(*(c for c in store.dropped_table.c if c.key not in (
            "dropped_at", "fetched_at"))).order_by(store.dropped_table.c.id)).all()
    return [tuple(r) for r in docs], [tuple(r) for r in drops]


def _outcome(done: Any) -> tuple[Any, ...]:
    rows = [{k: v for k, v in r.items() if k != "dropped_at"} for r in done.rows]
    return done.groups, done.pages, done.demoted, done.promoted, done.repointed, rows


def _scenario(stores: tuple[Store, Store], seed: int, shuffled: bool) -> int:
    """Crawls written and settled in turn on both stores (the reference and ours), every
    settle's outcome and the tables compared after each; returns the groups decided."""
    world = World(seed)
    rnd = random.Random(seed + 1)
    crawls = [[s.start_crawl("web", [HOSTS[n % 3] + "/"]) for s in stores] for n in range(4)]
    assert all(a == b for a, b in crawls)
    ids = [a for a, _ in crawls]
    rules, touched = world.rules()
    prefer = rnd.random() < 0.8
    groups = 0

    def write(crawl: int, batches: int) -> None:
        for _ in range(batches):
            docs, drops = world.batch(crawl, 12)
            if shuffled:
                rnd.shuffle(docs)
                rnd.shuffle(drops)
            for s in stores:
                s.write_batch(docs, drops)

    def settle(**kw: Any) -> None:
        nonlocal groups
        done = [s.settle(K, prefer_canonical=prefer, max_chars=40, **kw) for s in stores]
        assert _outcome(done[1]) == _outcome(done[0]), kw
        assert _tables(stores[1]) == _tables(stores[0]), kw
        groups += done[0].groups

    write(ids[0], 3)
    settle(crawl_id=ids[0], scope=[ids[0]])  # SIMHASH_PERSIST off: its own pages only
    write(ids[1], 2)
    write(ids[2], 2)  # never settled, like a killed worker's crawl
    settle(crawl_id=ids[1])
    write(ids[3], 2)
    settle(crawl_id=ids[3], overrides=rules)  # only the groups of crawl 3 and of the rules
    settle(overrides=rules, touched=touched, named_only=True)
    settle(everything=True, overrides=Overrides(list(rules)[:2]), touched=rules)
    settle(everything=True)
    return groups


@contextmanager
def _twins(backend: str, tmp_path: Any, request: Any, name: str) -> Iterator[tuple[Store, Store]]:
    with ExitStack() as stack:
        if backend == "sqlite":
            urls = [f"sqlite:///{tmp_path / f'{name}-{side}.db'}" for side in ("ref", "new")]
        else:
            pg = request.getfixturevalue("pg_url")
            urls = [stack.enter_context(fresh_pg_schema(pg, f"settlemem_{side}"))
                    for side in ("ref", "new")]
        yield (stack.enter_context(ReferenceStore(urls[0])),
               stack.enter_context(Store(urls[1])))


@pytest.fixture(params=["lists", "numpy"])
def read(request, monkeypatch) -> str:
    """A settle of few pages reads them into Python lists (crawler.dedup.settle.SMALL_PAGES);
    "numpy": into numpy arrays whatever their number, as a large store is read."""
    if request.param == "numpy":
        from crawler.dedup import settle
        from crawler.storage import settleread

        monkeypatch.setattr(settle, "SMALL_PAGES", 0)
        monkeypatch.setattr(settleread, "SMALL_PAGES", 0)
    return str(request.param)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_the_narrow_read_decides_as_the_read_of_every_page(backend: str, read: str, tmp_path,
                                                           request) -> None:
    """Random stores (seeded), each written in two orders: every settle (scoped, with
    unsettled crawls, with rules, rules just removed, named groups only, everything) moves
    the same pages, returns the same drop log rows and leaves the same tables as the
    reference, read into lists (a small store) or numpy arrays."""
    groups = 0
    seeds = range(6) if backend == "sqlite" else range(2)
    for seed in seeds:
        for shuffled in (False, True):
            with _twins(backend, tmp_path, request, f"{seed}-{shuffled}") as stores:
                groups += _scenario(stores, seed, shuffled)
    assert groups > 20 * len(seeds)  # the scenarios decided groups, not only singletons


def _doc(url: str, fp: int | None, crawl: int, **kw: Any) -> dict[str, Any]:
    return {"url": url, "canonical_url": url, "title": url, "text": f"text of {url}",
            "content_hash": f"h-{url}", "simhash": fp, "status": 200, "crawl_id": crawl, **kw}


def _drop(url: str, fp: int | None, crawl: int, of: str | None, reason: str = NEAR_DUPLICATE,
          **kw: Any) -> dict[str, Any]:
    return {**_doc(url, fp, crawl), "reason": reason, "duplicate_of": of, "distance": 1, **kw}


def _settle_both(stores: tuple[Store, Store], **kw: Any) -> Any:
    done = [s.settle(K, **kw) for s in stores]
    assert _outcome(done[1]) == _outcome(done[0])
    assert _tables(stores[1]) == _tables(stores[0])
    return done[1]


def _write_both(stores: tuple[Store, Store], docs: list[dict[str, Any]],
                drops: list[dict[str, Any]], reverse: bool) -> None:
    for s in stores:
        s.write_batch(docs[::-1] if reverse else docs, drops[::-1] if reverse else drops)


A1, A2, A3 = (f"{HOSTS[0]}/{name}" for name in ("one", "two", "three"))
FAR = (0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 0x9999_AAAA_BBBB_CCCC, 0xDDDD_EEEE_FFFF_0000)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
@pytest.mark.parametrize("reverse", [False, True])
def test_pages_alone_the_rule_still_moves(backend: str, reverse: bool, read: str, tmp_path,
                                          request) -> None:
    """Hand-made stores where a page with no duplicate counts: a drop of reason override
    that no rule names any more, in a crawl settled already, while the crawl settling now has
    pages alone only (stored again); a drop whose kept page a drop rule now names (stored
    again); a young drop whose recorded kept page is found by a URL two pages share."""
    with _twins(backend, tmp_path, request, f"alone-{reverse}") as stores:
        old, _ = (s.start_crawl("web", [HOSTS[0] + "/"]) for s in stores)
        _settle_both(stores, crawl_id=old)
        _write_both(stores, [], [_drop(A1, FAR[0], old, None, OVERRIDE)], reverse)
        now, _ = (s.start_crawl("web", [HOSTS[0] + "/"]) for s in stores)
        _write_both(stores, [_doc(A2, FAR[1], now)], [], reverse)
        done = _settle_both(stores, crawl_id=now)
        assert done.promoted == 1  # the drop of the removed rule, alone

    with _twins(backend, tmp_path, request, f"gone-{reverse}") as stores:
        crawl, _ = (s.start_crawl("web", [HOSTS[0] + "/"]) for s in stores)
        _write_both(stores, [_doc(A1, FAR[0], crawl)],
                    [_drop(A2, FAR[1], crawl, A1), _drop(A3, FAR[2], crawl, A1 + "/x")],
                    reverse)
        _settle_both(stores, crawl_id=crawl)
        done = _settle_both(stores, overrides=Overrides([make_override("drop", A1)]),
                            named_only=True)
        assert done.promoted == 1 and done.demoted == 1  # /two stored again, /one out

    with _twins(backend, tmp_path, request, f"url-{reverse}") as stores:
        crawl, _ = (s.start_crawl("web", [HOSTS[0] + "/"]) for s in stores)
        # /one stored, and a drop row of the URL /one under another canonical URL (alone);
        # /two, young, 1 bit from /one, dropped against "/one": the crawl meant that row
        _write_both(stores, [_doc(A1, FAR[0], crawl, young=True)],
                    [_drop(A1, FAR[3], crawl, A3, canonical_url=A1 + "/canonical",
                           content_hash="h-other"),
                     _drop(A2, FAR[0] ^ 1, crawl, A1, young=True)], reverse)
        done = _settle_both(stores, crawl_id=crawl, everything=True)
        assert done.groups == 0  # young, one site, recorded against the other "/one"


# --- memory -------------------------------------------------------------------------------------


def test_a_settle_of_pages_without_duplicates_holds_no_object_per_page(tmp_path,
                                                                       monkeypatch) -> None:
    """30000 distinct pages and three small groups: the settle decides the groups, and its
    traced peak stays under 200 bytes per page (reading every page as a SettlePage took more
    than 500: its row values, the page and its source)."""
    from crawler.storage import settle as settle_module

    monkeypatch.setattr(settle_module, "SETTLE_CHUNK", 1000)  # a fixed cost, bounded
    n = 30000
    rnd = random.Random(5)
    with Store(f"sqlite:///{tmp_path / 'big.db'}") as store:
        crawl = store.start_crawl("web", [HOSTS[0] + "/"])
        for start in range(0, n, 5000):
            fps = {i: rnd.getrandbits(64) for i in range(start, min(n, start + 5000))}
            docs = [{**_doc(f"{HOSTS[i % 3]}/p/{i}", fp, crawl), "text": "x" * 100,
                     "content_hash": f"{rnd.getrandbits(128):032x}"} for i, fp in fps.items()]
            if start == 0:  # three near twins of the first pages, on a longer URL
                docs += [_doc(f"{HOSTS[i % 3]}/p/{i}/twin", fps[i] ^ 0b101, crawl)
                         for i in range(3)]
            store.write_batch(docs, [])
        store.check()
        tracemalloc.start()
        try:
            done = store.settle(K, crawl_id=crawl)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (done.groups, done.pages, done.demoted) == (3, 6, 3)
    assert peak / n < 200, f"{peak / n:.0f} bytes per page"

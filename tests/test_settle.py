"""The settle step: the preference order (crawler.dedup.preference), the rule
(crawler.dedup.settle) and its storage side on real SQLite files and the real PostgreSQL server
(crawler.storage.settle), and
``scrapy settle``. The rule's outcome must not depend on the order pages are given in."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.dedup.preference import explain, preference_key, seed_hosts
from crawler.dedup.settle import Neighbours, SettlePage, components, decide_group, plan
from crawler.outputs.droplog import read_drop_log, replay_drop_log, row_record
from crawler.storage import Store
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE
from tests.conftest import ROOT, fresh_pg_schema

A, B, M = "http://a.test", "http://b.test", "http://m.test"


def flip(fp: int, bits: int, start: int = 0) -> int:
    """``fp`` with ``bits`` bits flipped, from bit ``start`` on."""
    for bit in range(start, start + bits):
        fp ^= 1 << bit
    return fp


def page(url: str, fp: int | None, chash: str | None = None, names: str = "",
         kept: bool = True, **kw: Any) -> SettlePage:
    return SettlePage(url, url, chash or f"h{url}", fp, names, kept, **kw)


# --- the preference order -----------------------------------------------------------------------


def test_the_preference_order_rule_by_rule() -> None:
    assert seed_hosts([A + "/", "http://A.test:8080/x", "not a url"]) == {"a.test",
                                                                          "a.test:8080"}
    seeds = seed_hosts([A + "/"])
    named_far = preference_key(B + "/a/very/long/path/x", True, seeds)
    seed_long = preference_key(A + "/long/path/x", False, seeds)
    other_short = preference_key(B + "/x", False, seeds)
    assert named_far < seed_long < other_short  # named canonical, then a seed's host
    assert explain(named_far, seed_long) == "named canonical"
    assert explain(seed_long, other_short) == "on a seed's host"
    short, long_ = preference_key(A + "/x", False, seeds), preference_key(A + "/xy", False, seeds)
    assert short < long_ and explain(short, long_) == "shorter URL"
    first, second = preference_key(A + "/a", False, seeds), preference_key(A + "/b", False, seeds)
    assert first < second and explain(first, second) == "smaller URL"
    assert explain(first, first) == ""


# --- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
def test_near_duplicates_at_1_to_k_bits_drop_and_at_k_plus_1_stay(k: int) -> None:
    base = 0xF0F0_1234_5678_9ABC
    pages = [page(A + "/", base)]
    pages += [page(f"{A}/near{d}", flip(base, d)) for d in range(1, k + 1)]
    pages.append(page(A + "/far", flip(base, k + 1, start=40)))
    verdicts = decide_group(Neighbours(pages, k), range(len(pages)), frozenset())
    assert verdicts[0].duplicate_of is None
    for d in range(1, k + 1):
        assert (verdicts[d].duplicate_of, verdicts[d].reason, verdicts[d].distance) == (
            0, NEAR_DUPLICATE, d)
    assert verdicts[len(pages) - 1].duplicate_of is None  # k+1 bits from the kept page


def test_a_chain_never_loses_a_group_and_the_verdict_ignores_input_order() -> None:
    """A-B-C: B within 2 bits of each, A and C 4 bits apart (k = 3). A is preferred (shortest):
    kept; B dropped against A; C kept, since the only page near it (B) is not kept. In every
    order of the input, the same."""
    a = 0x0123_4567_89AB_CDEF
    b, c = flip(a, 2), flip(a, 4)
    urls = [A + "/a", A + "/bb", A + "/ccc"]
    outcomes = set()
    for order in itertools.permutations(range(3)):
        pages = [page(urls[i], (a, b, c)[i]) for i in order]
        verdicts = decide_group(Neighbours(pages, 3), range(3), frozenset())
        outcomes.add(tuple(sorted(
            (pages[i].url, None if v.duplicate_of is None else pages[v.duplicate_of].url)
            for i, v in verdicts.items())))
    assert outcomes == {((A + "/a", None), (A + "/bb", A + "/a"), (A + "/ccc", None))}


def test_a_page_named_canonical_wins_over_a_seed_host_page() -> None:
    text = 0xAAAA_0000_FFFF_1234
    pages = [page(A + "/x", text), page(B + "/syndicated/long/x", flip(text, 1), names=A + "/x"),
             page(M + "/x", flip(text, 2), names=B + "/syndicated/long/x")]
    # M names B, B names A: A and B are named; B is on the seed's host
    def kept(seeds: frozenset[str], prefer: bool) -> list[str]:
        verdicts = decide_group(Neighbours(pages, 3), range(3), seeds, prefer_canonical=prefer)
        return [pages[i].url for i, v in verdicts.items() if v.duplicate_of is None]

    assert kept(seed_hosts([B + "/"]), True) == [B + "/syndicated/long/x"]
    assert kept(frozenset(), True) == [A + "/x"]  # both named: the shorter
    assert kept(seed_hosts([M + "/"]), True) == [A + "/x"]  # named beats the seed's host
    assert kept(seed_hosts([M + "/"]), False) == [M + "/x"]  # names not read


def test_exact_copies_without_a_simhash_are_one_group() -> None:
    pages = [page(A + "/short", None, "same"), page(A + "/s", None, "same"),
             page(A + "/other", None, "different")]
    assert components(Neighbours(pages, 3)) == [[0, 1]]
    verdicts = decide_group(Neighbours(pages, 3), [0, 1], frozenset())
    assert verdicts[1].duplicate_of is None
    assert (verdicts[0].duplicate_of, verdicts[0].reason, verdicts[0].distance) == (
        1, EXACT_DUPLICATE, 0)


def test_young_fingerprints_of_one_site_are_not_duplicates_by_bits_alone() -> None:
    """Two distinct posts of one site fingerprinted before its template was known (chrome in
    the fingerprint) can be 2 bits apart: the crawl kept both after comparing their texts, so
    the settle step keeps both. The same bits across sites, or with a mature fingerprint, or
    with a drop the crawl recorded, are a duplicate."""
    x = 0x5555_AAAA_0F0F_F0F0
    young = [page(A + "/post-1", x, young=True), page(A + "/post-2", x ^ 0b11, young=True)]
    assert components(Neighbours(young, 3)) == []
    one_mature = [young[0], page(A + "/post-2", x ^ 0b11)]
    assert components(Neighbours(one_mature, 3)) == []
    mature = [page(A + "/post-1", x), page(A + "/post-2", x ^ 0b11)]
    assert components(Neighbours(mature, 3)) == [[0, 1]]
    across = [young[0], page(B + "/post-2", x ^ 0b11, young=True)]
    assert components(Neighbours(across, 3)) == [[0, 1]]
    recorded = [young[0], page(A + "/post-2", x ^ 0b11, young=True, kept=False,
                               duplicate_of=A + "/post-1", reason=NEAR_DUPLICATE, distance=2)]
    assert components(Neighbours(recorded, 3)) == [[0, 1]]
    exact = [young[0], page(A + "/copy", x ^ 0b11, chash=f"h{A}/post-1", young=True)]
    assert components(Neighbours(exact, 3)) == [[0, 1]]


def test_plan_moves_only_what_the_rule_changes_and_only_groups_asked_for() -> None:
    x, y = 0x1111_2222_3333_4444, 0x9999_AAAA_BBBB_CCCC
    pages = [
        page(A + "/long-original", x),  # stored, but /x (dropped) is preferred: demote
        page(A + "/x", flip(x, 1), kept=False, duplicate_of=A + "/long-original",
             reason=NEAR_DUPLICATE, distance=1),  # preferred: promote
        page(A + "/mirror", flip(x, 2), kept=False, duplicate_of=A + "/long-original",
             reason=NEAR_DUPLICATE, distance=2),  # repoint to /x (1 bit)
        page(B + "/y", y),  # another group, already right
        page(B + "/y-copy", y, chash=f"h{B}/y", kept=False, duplicate_of=B + "/y",
             reason=EXACT_DUPLICATE, distance=0),
    ]
    moves = plan(pages, 3, frozenset())
    assert [i for i, _ in moves.demote] == [0] and moves.promote == [1]
    assert [(i, v.duplicate_of, v.distance) for i, v in moves.repoint] == [(2, 1, 1)]
    assert (moves.groups, moves.pages) == (2, 5)
    only_b = plan(pages, 3, frozenset(), start=[4])
    assert len(only_b) == 0 and (only_b.groups, only_b.pages) == (1, 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 63), st.integers(0, 63)),
                min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_property_the_kept_set_is_a_function_of_the_set_of_pages(spec: list[tuple[int, int, int]],
                                                                   rnd: random.Random) -> None:
    """Random pages around a few centres (1-2 bit flips, some exact copies): shuffled, the
    kept set and every drop's kept page are the same; every drop is within k of its kept page,
    and no two kept pages are within k."""
    centres = [0x0F0F_F0F0_1234_5678 * (c + 1) & (2**64 - 1) for c in range(6)]
    pages = []
    for n, (c, b1, b2) in enumerate(spec):
        fp = centres[c] ^ (1 << b1) ^ (1 << b2)
        pages.append(page(f"{A}/{'p' * (n % 4 + 1)}{n}", fp,
                          chash=f"c{c}-{min(b1, b2)}-{max(b1, b2)}"))
    pages = list({p.url: p for p in pages}.values())

    def outcome(pp: list[SettlePage]) -> set[tuple[str, str | None]]:
        result = set()
        for group in components(Neighbours(pp, 3)):
            for i, v in decide_group(Neighbours(pp, 3), group, frozenset()).items():
                of = None if v.duplicate_of is None else pp[v.duplicate_of]
                if of is not None:  # an exact copy is at 0 bits; a near one at 0..k
                    assert v.distance <= 3 and (v.reason != EXACT_DUPLICATE or v.distance == 0)
                    assert (v.reason == EXACT_DUPLICATE) == (
                        pp[i].content_hash == of.content_hash)
                result.add((pp[i].url, None if of is None else of.url))
        return result

    first = outcome(pages)
    shuffled = pages[:]
    rnd.shuffle(shuffled)
    assert outcome(shuffled) == first
    kept = [p for p in pages if (p.url, None) in first]
    for p, q in itertools.combinations(kept, 2):
        assert p.content_hash != q.content_hash
        assert bin(p.simhash ^ q.simhash).count("1") > 3  # type: ignore[operator]


# --- the storage side ---------------------------------------------------------------------------


def _bad_stream(store: Store) -> tuple[int, dict[str, str]]:
    """A crawl whose streaming decisions kept the wrong copies (the first fetched): a long
    URL kept over a short twin, a chain repointed too far, a byte copy kept over its original."""
    crawl = store.start_crawl("web", [A + "/"])
    x, z = 0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321

    def doc(url: str, fp: int, chash: str | None = None, **kw: Any) -> dict[str, Any]:
        return {"url": url, "canonical_url": url, "title": url, "text": f"text of {url}",
                "content_hash": chash or f"h-{url}", "simhash": fp, "status": 200,
                "content_type": "text/html", "crawl_id": crawl, **kw}

    def drop(url: str, fp: int, of: str, of_fp: int, chash: str | None = None) -> dict[str, Any]:
        d = bin(fp ^ of_fp).count("1")
        return {"url": url, "canonical_url": url, "reason": NEAR_DUPLICATE if d else
                EXACT_DUPLICATE, "duplicate_of": of, "distance": d, "simhash": fp,
                "duplicate_simhash": of_fp, "content_hash": chash or f"h-{url}",
                "title": url, "text": f"text of {url}", "crawl_id": crawl, "status": 200,
                "content_type": "text/html"}

    store.write_batch(
        [doc(A + "/archive/2024/x", x), doc(B + "/z", z), doc(A + "/print/z", z, f"h-{B}/z")],
        [drop(A + "/x", x ^ 0b1, A + "/archive/2024/x", x),
         drop(A + "/mirror/x", x ^ 0b110, A + "/archive/2024/x", x),
         drop(A + "/far/x", x ^ 0b110 ^ (0b111 << 10), A + "/mirror/x", x ^ 0b110)])
    return crawl, {"x": A + "/x", "z": A + "/print/z"}


def _stored(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return {u for (u,) in conn.exec_driver_sql("SELECT url FROM documents")}


def _drops(store: Store) -> dict[str, tuple[str, str, int]]:
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT url, reason, duplicate_of, distance FROM dropped ORDER BY id").all()
    return {u: (r, o, d) for u, r, o, d in rows}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    if request.param == "sqlite":
        with Store(f"sqlite:///{tmp_path / 'crawl.db'}") as s:
            yield s
        return
    with fresh_pg_schema(request.getfixturevalue("pg_url"), "settle") as url, Store(url) as s:
        yield s


def test_settle_moves_a_database_to_the_rule_and_a_second_run_moves_nothing(store) -> None:
    crawl, want = _bad_stream(store)
    done = store.settle(3, crawl_id=crawl)
    stored = _stored(store)
    # /x (shortest) kept over /archive/2024/x (1 bit); /far/x is 6 bits from /x and was
    # dropped only against /mirror/x (3 bits from each): stored again, /mirror/x dropped
    assert stored == {want["x"], want["z"], A + "/far/x"}
    drops = _drops(store)
    assert drops[A + "/archive/2024/x"] == (NEAR_DUPLICATE, want["x"], 1)
    assert drops[A + "/mirror/x"] == (NEAR_DUPLICATE, want["x"], 3)  # tie with /far/x: /x
    assert drops[B + "/z"] == (EXACT_DUPLICATE, want["z"], 0)  # the seed's host wins
    assert A + "/far/x" not in drops and A + "/x" not in drops
    assert (done.demoted, done.promoted) == (2, 2)
    # every move has its drop log line: replayed, the lines give the table
    replayed = {url: r for (_, url), r in replay_drop_log(
        [row_record(r) for r in done.rows]).items()}
    for url, (reason, of, distance) in drops.items():
        if url in replayed:
            assert (replayed[url]["reason"], replayed[url]["duplicate_of"],
                    replayed[url]["distance"]) == (reason, of, distance)
    assert not set(replayed) & stored
    # the promoted page kept its text and metadata
    doc = store.document_by_url(A + "/far/x")
    assert doc is not None and doc.text == f"text of {A}/far/x" and doc.status == 200
    # the crawl's set fingerprints follow the moves
    assert store.crawl(crawl).url_count == len(stored)  # type: ignore[union-attr]
    assert store.crawl(crawl).settled_at is not None  # type: ignore[union-attr]
    again = store.settle(3, crawl_id=crawl, everything=True)
    assert again.moves == 0 and again.groups == 2
    assert store.settle(3).groups == 0  # nothing unsettled: nothing read into groups


def test_settle_command_on_a_database(tmp_path) -> None:
    db = tmp_path / "crawl.db"
    with Store(f"sqlite:///{db}") as s:
        _, want = _bad_stream(s)
    log = tmp_path / "dropped.jsonl"
    run = subprocess.run([sys.executable, "-m", "scrapy", "settle", "--db", str(db),
                          "--log", str(log)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "2 stored pages dropped, 2 dropped pages stored, 1 drops repointed" in run.stdout
    records = list(read_drop_log(log))
    assert {r["rule"] for r in records} >= {"settled"}
    with Store(f"sqlite:///{db}") as s:
        assert _stored(s) == {want["x"], want["z"], A + "/far/x"}
        moved = {url: row for url, row in _drops(s).items()
                 if url in {r["url"] for r in records}}
    replayed = {url: r for (_, url), r in replay_drop_log(records).items()}  # replays to the table
    assert {u: (r["reason"], r["duplicate_of"], r["distance"]) for u, r in replayed.items()} \
        == moved and len(moved) == 3
    again = subprocess.run([sys.executable, "-m", "scrapy", "settle", "--db", str(db), "--all",
                            "--log", str(log)], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert "0 stored pages dropped, 0 dropped pages stored, 0 drops repointed" in again.stdout
    assert len(list(read_drop_log(log))) == len(records)
    bad = subprocess.run([sys.executable, "-m", "scrapy", "settle", "--db",
                          str(tmp_path / "missing.db")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_scoped_settle_settles_only_its_own_crawls(tmp_path) -> None:
    """SIMHASH_PERSIST off: a crawl settles among its own pages, and marks only itself
    settled (a killed crawl's pages, not read, stay to be settled)."""
    with Store(f"sqlite:///{tmp_path / 'crawl.db'}") as s:
        killed, _ = _bad_stream(s)
        other = s.start_crawl("web", [A + "/"])
        done = s.settle(3, crawl_id=other, scope=[other])
        assert done.groups == 0 and done.moves == 0
        assert s.crawl(killed).settled_at is None  # type: ignore[union-attr]
        assert s.crawl(other).settled_at is not None  # type: ignore[union-attr]
        assert s.settle(3).moves == 5  # the next unscoped settle takes the killed crawl in


def _many_groups(store: Store, order: list[int]) -> int:
    """Twelve near-duplicate groups over three hosts, each stored copy written with a drop or
    two that the stream decided against the wrong page; written in ``order`` of the groups."""
    crawl = store.start_crawl("web", [A + "/"])
    rng = random.Random(28)
    bases = [rng.getrandbits(64) for _ in range(12)]
    docs: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    for g in order:
        fp = bases[g]
        long, short = f"{B}/archive/{g}/page", f"{A}/{g}"
        docs.append({"url": long, "canonical_url": long, "title": long, "text": f"t {long}",
                     "content_hash": f"h-{long}", "simhash": fp, "status": 200,
                     "content_type": "text/html", "crawl_id": crawl})
        for url, bits in ((short, 0b1), (f"{M}/copy/{g}", 0b110)):
            drops.append({"url": url, "canonical_url": url, "reason": NEAR_DUPLICATE,
                          "duplicate_of": long, "distance": bin(bits).count("1"),
                          "simhash": fp ^ bits, "duplicate_simhash": fp,
                          "content_hash": f"h-{url}", "title": url, "text": f"t {url}",
                          "crawl_id": crawl, "status": 200, "content_type": "text/html"})
    store.write_batch(docs, drops)
    return crawl


def test_a_settle_read_in_small_chunks_decides_as_one_read_in_one(tmp_path, monkeypatch) -> None:
    """The settle reads pages in keyset chunks (crawler.storage.settle.SETTLE_CHUNK): with a
    chunk of 2 over 36 pages, every read of the pages is bounded by a LIMIT of 2, and the
    moves, the drop log rows and the tables are the very ones of a single read, in two
    write orders."""
    import sqlalchemy as sa

    from crawler.storage import settle as settle_module

    default = settle_module.SETTLE_CHUNK
    assert default >= 1000
    orders = [list(range(12)), list(reversed(range(12)))]
    for n, order in enumerate(orders):
        outcomes = []
        for chunk in (default, 2):
            monkeypatch.setattr(settle_module, "SETTLE_CHUNK", chunk)
            with Store(f"sqlite:///{tmp_path / f'{n}-{chunk}.db'}") as s:
                crawl = _many_groups(s, order)
                reads: list[tuple[str, Any]] = []

                def seen(conn, cursor, statement, parameters, context, executemany,
                         reads=reads) -> None:
                    if statement.lstrip().upper().startswith("SELECT") \
                            and "content_hash" in statement:
                        reads.append((statement, parameters))

                sa.event.listen(s.engine, "before_cursor_execute", seen)
                done = s.settle(3, crawl_id=crawl)
                sa.event.remove(s.engine, "before_cursor_execute", seen)
                promoted = s.document_by_url(f"{A}/0")
                assert promoted is not None and promoted.text == f"t {A}/0"  # text kept whole
                outcomes.append((_stored(s), _drops(s), done.moves, done.groups,
                                 [{k: v for k, v in r.items() if k != "dropped_at"}
                                  for r in done.rows]))
            if chunk == 2:
                page_reads = [(q, p) for q, p in reads if "LIMIT" in q.upper()]
                # 12 stored + 24 drops in pages of 2: at least 18 bounded reads
                assert len(page_reads) >= 18
                assert all(2 in tuple(p) for _, p in page_reads)
                # any other read names its rows (one URL, or ids in a bounded IN list)
                unbounded = [q for q, _ in reads if "LIMIT" not in q.upper()
                             and " IN (" not in q.upper() and " = ?" not in q]
                assert unbounded == []
        assert outcomes[0] == outcomes[1]
        stored, _, moves, groups, _ = outcomes[0]
        assert groups == 12 and moves > 0
        assert {f"{A}/{g}" for g in range(12)} <= stored  # the short URL won each group

"""Set fingerprints: the sums (properties), and the sums each crawl records in storage.

Storage tests run on a real SQLite file and on the real PostgreSQL server (``postgres``
marker); every recorded fingerprint is checked against a recomputation from scratch, from the
``documents`` rows themselves where the crawl still owns them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
import xxhash
from alembic import command as alembic_command
from hypothesis import given
from hypothesis import strategies as st

from crawler.content.setfp import MODULUS, CrawlSets, SetFingerprint, element, page_element
from crawler.storage import StorageError, Store, migrations, parse_url
from tests.test_storage import db_url, doc, drop, pg_schema_url  # noqa: F401 (fixtures)

texts = st.text(max_size=40)
hashes = st.one_of(st.none(), st.text(alphabet="0123456789abcdef", min_size=1, max_size=32))
page_lists = st.lists(st.tuples(st.text(min_size=1, max_size=30), hashes), max_size=20)


# --- the sums ---------------------------------------------------------------------------------

def test_element_is_xxh3_128_of_the_utf8_bytes_and_pinned() -> None:
    # stored fingerprints stay comparable only while the definition does not change
    assert element("http://a.test/") == xxhash.xxh3_128_intdigest(b"http://a.test/")
    assert element("ß") == xxhash.xxh3_128_intdigest("ß".encode())
    assert page_element("http://a.test/", None) == element("http://a.test/\x00")
    assert SetFingerprint.of(["http://a.test/", "x"]).hex() == (
        f"{(element('http://a.test/') + element('x')) % MODULUS:032x}")
    assert SetFingerprint.of(["http://a.test/", "http://a.test/x"]).hex() == \
        "96b396b9b90e40550a3320ccdf02e5c9"


@given(st.lists(texts, max_size=30), st.randoms(use_true_random=False))
def test_the_sum_does_not_depend_on_order(values: list[str], rnd) -> None:
    shuffled = list(values)
    rnd.shuffle(shuffled)
    assert SetFingerprint.of(values) == SetFingerprint.of(shuffled)


@given(st.lists(texts, max_size=30), texts)
def test_adding_then_removing_an_element_changes_nothing(values: list[str], extra: str) -> None:
    base = SetFingerprint.of(values)
    assert base.add(element(extra)).remove(element(extra)) == base
    assert SetFingerprint.of([*values, extra]) - SetFingerprint.of([extra]) == base
    assert SetFingerprint.of(values) + SetFingerprint.of([extra]) == SetFingerprint.of(
        [extra, *values])


@given(st.lists(texts, min_size=1, max_size=30))
def test_a_repeated_element_counts_again(values: list[str]) -> None:
    doubled = SetFingerprint.of(values + values)
    assert doubled.count == 2 * len(values)
    assert doubled.value == (2 * sum(element(v) for v in values)) % MODULUS


@given(st.lists(st.integers(min_value=0, max_value=MODULUS - 1), max_size=30))
def test_sums_wrap_modulo_2_to_the_128(parts: list[int]) -> None:
    fp = SetFingerprint()
    for part in parts:
        fp = fp.add(part)
    assert fp == SetFingerprint(sum(parts) % MODULUS, len(parts))
    assert 0 <= fp.value < MODULUS and len(fp.hex()) == 32
    for part in reversed(parts):
        fp = fp.remove(part)
    assert fp == SetFingerprint() and not fp


def test_wrapping_at_the_edges() -> None:
    top = SetFingerprint.from_hex("f" * 32, 1)
    assert top.add(1) == SetFingerprint(0, 2)
    assert SetFingerprint().remove(1).hex() == "f" * 32
    assert SetFingerprint(MODULUS + 5, 0).value == 5


@given(st.integers(min_value=0, max_value=MODULUS - 1), st.integers(min_value=0, max_value=10))
def test_hex_round_trips(value: int, count: int) -> None:
    fp = SetFingerprint(value, count)
    assert SetFingerprint.from_hex(fp.hex(), count) == fp


@pytest.mark.parametrize("bad", ["", "0" * 31, "0" * 33, "G" * 32, "A" * 32, None])
def test_hex_refuses_anything_else(bad) -> None:
    with pytest.raises(ValueError, match="32 lower-case hex digits"):
        SetFingerprint.from_hex(bad, 0)


@given(page_lists, st.randoms(use_true_random=False))
def test_crawl_sets_are_order_free_and_removal_is_the_inverse(pages, rnd) -> None:
    sets = CrawlSets.of(pages)
    shuffled = list(pages)
    rnd.shuffle(shuffled)
    assert CrawlSets.of(shuffled) == sets
    assert sets.urls.count == sets.pages.count == len(pages)
    assert sets.contents.count == sum(1 for _, h in pages if h)
    for url, chash in shuffled:
        sets = sets.removed(url, chash)
    assert sets == CrawlSets() and not sets


def test_pages_see_swapped_contents_that_urls_and_contents_cannot() -> None:
    one = CrawlSets.of([("/a", "h1"), ("/b", "h2")])
    two = CrawlSets.of([("/a", "h2"), ("/b", "h1")])
    assert (one.urls, one.contents) == (two.urls, two.contents)
    assert one.pages != two.pages


# --- what storage records -----------------------------------------------------------------------

@pytest.fixture
def store(db_url: str) -> Iterator[Store]:  # noqa: F811
    with Store(db_url) as s:
        yield s


def owned_pages(store: Store, crawl_id: int) -> list[tuple[str, str | None]]:
    """The crawl's pages read from ``documents`` itself (rows the crawl still owns)."""
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT url, canonical_url, content_hash FROM documents WHERE crawl_id = :c"),
            {"c": crawl_id}).all()
    return [(canonical or url, chash) for url, canonical, chash in rows]


def assert_recorded_right(store: Store, crawl_id: int,
                          expected: list[tuple[str, str | None]] | None = None) -> CrawlSets:
    recorded = store.crawl_sets(crawl_id)
    assert recorded == store.recount_sets(crawl_id)
    truth = owned_pages(store, crawl_id) if expected is None else expected
    assert recorded == CrawlSets.of(truth)
    return recorded


def page(url: str, crawl_id: int, chash: str | None, **extra) -> dict:
    return doc(url, crawl_id=crawl_id, content_hash=chash, **extra)


def demotion(url: str, crawl_id: int) -> dict:
    return {"url": url, "duplicate_of": "http://s/orig", "reason": "near_duplicate",
            "distance": 1, "duplicate_simhash": 0, "crawl_id": crawl_id, "rule": "canonical",
            "max_chars": 100}


def test_a_new_crawl_records_empty_sets(store: Store) -> None:
    crawl = store.start_crawl("web")
    assert store.crawl_sets(crawl) == CrawlSets()
    assert store.crawl(crawl).url_fingerprint == "0" * 32
    assert store.crawl_sets(crawl + 1) is None


def test_batches_keep_the_recorded_sets_equal_to_a_recount(store: Store) -> None:
    c = store.start_crawl("web")
    store.write_batch([page("http://s/a", c, "h1"), page("http://s/b", c, "h2"),
                       page("http://s/bin", c, None),  # a binary body: a URL, no content
                       page("http://s/mirror", c, "h1")], [drop("http://s/d", crawl_id=c)])
    sets = assert_recorded_right(store, c)
    assert (sets.urls.count, sets.contents.count) == (4, 3)  # h1 counted twice (multiset)
    # the same page again, its text changed; another spelling of /b; a new page
    store.write_batch([page("http://s/a", c, "h1-new"),
                       page("http://s/b?utm_source=x", c, "h2", canonical_url="http://s/b"),
                       page("http://s/c", c, "h3")], [])
    sets = assert_recorded_right(store, c)
    assert sets.urls.count == 5
    # stored and demoted in one batch, and a demotion of a page stored earlier
    store.write_batch([page("http://s/copy", c, "h4")], [],
                      [demotion("http://s/copy", c), demotion("http://s/mirror", c)])
    sets = assert_recorded_right(store, c)
    assert (sets.urls.count, sets.contents.count) == (4, 3)
    assert sets == CrawlSets.of([("http://s/a", "h1-new"), ("http://s/b", "h2"),
                                 ("http://s/bin", None), ("http://s/c", "h3")])


def test_a_refused_batch_leaves_the_sets_alone(store: Store) -> None:
    c = store.start_crawl("web")
    store.write_batch([page("http://s/a", c, "h1")], [])
    before = store.crawl_sets(c)
    with pytest.raises(StorageError):
        store.write_batch([page("http://s/b", c, "h2")], [drop("http://s/x", reason=None)])
    assert store.crawl_sets(c) == before
    assert_recorded_right(store, c, [("http://s/a", "h1")])


def test_a_later_crawl_leaves_an_earlier_crawls_record_alone(store: Store) -> None:
    first = store.start_crawl("web")
    pages1 = [("http://s/a", "h1"), ("http://s/b", "h2"), ("http://s/copy", "h3")]
    store.write_batch([page(u, first, h) for u, h in pages1], [])
    second = store.start_crawl("web")
    # a re-crawl stores /a and /b again (their rows move to crawl 2) and demotes the copy
    # crawl 1 stored: crawl 1 still stored what it stored
    store.write_batch([page("http://s/a", second, "h1"), page("http://s/b", second, "h2-new")],
                      [], [demotion("http://s/copy", second)])
    assert_recorded_right(store, first, pages1)
    assert_recorded_right(store, second)
    assert store.count_documents(first) == 0  # documents no longer says it: crawl_documents does


def test_a_resumed_crawl_adds_up_to_an_uninterrupted_one(store: Store) -> None:
    site = [(f"http://s/{i}", f"h{i % 7}" if i % 5 else None) for i in range(40)]
    whole = store.start_crawl("web")
    for start in range(0, 40, 8):
        store.write_batch([page(u, whole, h) for u, h in site[start:start + 8]], [])
    killed = store.start_crawl("web")
    store.write_batch([page(u, killed, h) for u, h in site[:15]], [])
    with pytest.raises(StorageError):  # the batch in flight when it died never committed
        store.write_batch([page(u, killed, h) for u, h in site[15:20]],
                          [drop("http://s/x", reason=None)])
    resumed = store.start_crawl("web")  # JOBDIR: the journal reschedules 15.. (and 13, 14)
    store.write_batch([page(u, resumed, h) for u, h in site[13:]], [])
    store.write_batch([page(u, resumed, h) for u, h in site[13:16]], [])  # fetched twice
    assert_recorded_right(store, killed, site[:15])
    assert_recorded_right(store, resumed, site[13:])
    assert_recorded_right(store, whole, site)
    # the two runs together are the whole crawl: a sum of disjoint parts, in O(1)
    overlap = CrawlSets.of(site[13:15])
    assert store.crawl_sets(killed) + store.crawl_sets(resumed) == \
        store.crawl_sets(whole) + overlap


def write_pre_0005_database(url: str) -> None:
    """A crawl database written by the previous version (revision 0004) with three crawls."""
    engine = sa.create_engine(parse_url(url))
    with engine.begin() as conn:
        alembic_command.upgrade(migrations.alembic_config(conn), "0004")
        conn.execute(sa.text("INSERT INTO crawls (id, started_at, spider) VALUES "
                             "(1, '2026-01-01 00:00:00', 'web'), (2, '2026-01-02 00:00:00', "
                             "'web'), (3, '2026-01-03 00:00:00', 'web')"))
        rows = [{"url": f"http://s/{i}", "canonical": "" if i % 4 == 0 else f"http://s/{i}/",
                 "chash": None if i % 9 == 0 else f"{i % 23:032x}", "crawl": 1 + i % 2}
                for i in range(10_030)]  # over one backfill batch (10,000)
        rows.append({"url": "http://s/orphan", "canonical": "", "chash": "ab", "crawl": None})
        # two rows of one canonical URL in one crawl (a database from before the spelling
        # rule): the later row is the page
        rows.append({"url": "http://s/7?x", "canonical": "http://s/7/", "chash": "late",
                     "crawl": 2})
        conn.execute(sa.text("INSERT INTO documents (url, canonical_url, content_hash, "
                             "crawl_id) VALUES (:url, :canonical, :chash, :crawl)"), rows)
    engine.dispose()


def test_migration_computes_the_sets_of_existing_crawls(db_url: str) -> None:  # noqa: F811
    write_pre_0005_database(db_url)
    with Store(db_url) as store:
        store.check()
        assert store.schema_revision() == migrations.head()
        one = [(f"http://s/{i}" if i % 4 == 0 else f"http://s/{i}/",
                None if i % 9 == 0 else f"{i % 23:032x}") for i in range(0, 10_030, 2)]
        assert_recorded_right(store, 1, one)
        two = dict(owned_pages(store, 2))
        assert two["http://s/7/"] == "late"
        assert_recorded_right(store, 2, list(two.items()))
        assert store.crawl_sets(3) == CrawlSets()
        # a crawl begun before the upgrade and resumed after it goes on from the right sums
        store.write_batch([page("http://s/7?x", 2, "again", canonical_url="http://s/7/"),
                           page("http://s/new", 2, "n")], [], [demotion("http://s/9", 2)])
        two.update({"http://s/7/": "again", "http://s/new": "n"})
        del two["http://s/9/"]
        assert_recorded_right(store, 2, list(two.items()))


@pytest.mark.postgres
def test_concurrent_writers_of_one_crawl_on_postgres(pg_schema_url: str) -> None:  # noqa: F811
    """Two writers, each its own Store, connection and transactions, writing batches of one
    crawl at the same time, one page of each batch written by both. Without the row lock the
    recorded sums lose updates; with a plain ``FOR UPDATE`` the writers deadlock on the key-share
    locks of their foreign keys (both seen when this test was written): neither may happen."""
    with Store(pg_schema_url) as setup:
        crawl = setup.start_crawl("web")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            with Store(pg_schema_url) as store:
                barrier.wait()
                for n in range(60):
                    rows = [page(f"http://{name}/{n}/{i}", crawl, f"{name}{n}{i % 3}")
                            for i in range(10)]
                    rows.append(page(f"http://shared/{n % 20}", crawl, f"{name}-{n}"))
                    demotions = [demotion(f"http://{name}/{n - 1}/0", crawl)] if n else []
                    store.write_batch(rows, [], demotions)
        except BaseException as exc:  # a deadlock too: reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, "; ".join(map(str, errors))
    with Store(pg_schema_url) as store:
        sets = assert_recorded_right(store, crawl)
        assert sets.urls.count == 2 * 60 * 10 - 2 * 59 + 20

"""crawler.storage on real SQLite files and the real PostgreSQL server.

PostgreSQL tests run in a throw-away schema per test (:func:`pg_schema_url`): the URL carries
``options=-csearch_path=<schema>``, so every table, index and ``alembic_version`` lands there
and the shared ``test`` database is left as found.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command as alembic_command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from hypothesis import given
from hypothesis import strategies as st

from crawler import config
from crawler.backends.local import LocalContentIndex, PageSignature
from crawler.commands.preflight import check_settings
from crawler.content.simindex import content_key, url_key
from crawler.storage import (
    Base,
    StorageError,
    StorageSettings,
    Store,
    check_storage,
    dedup_settings,
    mask_url,
    migrations,
    parse_url,
    to_signed64,
    to_unsigned64,
)
from tests.conftest import fresh_pg_schema

TOP_BIT_VALUES = [0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` first (PostgreSQL ``options``)."""
    return sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"}) \
        .render_as_string(hide_password=False)


@pytest.fixture
def pg_schema_url(pg_url: str) -> Iterator[str]:
    """A PostgreSQL URL bound to a fresh schema, dropped (CASCADE) after the test."""
    with fresh_pg_schema(pg_url, "test_storage") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'crawl.db'}"
    return request.getfixturevalue("pg_schema_url")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as s:
        yield s


def doc(url: str, **extra) -> dict:
    row = {"url": url, "canonical_url": url, "title": "T", "text": "some text", "status": 200,
           "content_type": "text/html", "fetched_at": "2026-01-02T03:04:05Z"}
    row.update(extra)
    return row


def drop(url: str, **extra) -> dict:
    row = {"url": url, "reason": "near_duplicate", "duplicate_of": "http://a.test/kept",
           "distance": 2, "simhash": 2**64 - 1, "duplicate_simhash": 2**63}
    row.update(extra)
    return row


# --- fingerprints -----------------------------------------------------------------------------

@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_signed_form_round_trips_and_fits_bigint(value: int) -> None:
    signed = to_signed64(value)
    assert -(2**63) <= signed < 2**63
    assert to_unsigned64(signed) == value


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_signed_form_refuses_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        to_signed64(bad)


def test_top_bit_fingerprints_round_trip(store: Store) -> None:
    rows = [doc(f"http://a.test/{i}", simhash=v) for i, v in enumerate(TOP_BIT_VALUES)]
    rows.append(doc("http://a.test/none", simhash=None))
    store.write_batch(rows, [drop("http://a.test/d", simhash=2**64 - 1, duplicate_simhash=2**63)])
    got = {url: fp for url, _, _, fp in store.iter_fingerprints()}
    assert got == {r["url"]: r["simhash"] for r in rows}
    assert store.document_by_url("http://a.test/3").simhash == 2**63
    record = store.dropped_by_url("http://a.test/d")
    assert (record.simhash, record.duplicate_simhash) == (2**64 - 1, 2**63)
    with store.engine.connect() as conn:  # on disk: the signed form
        raw = conn.execute(sa.text("SELECT simhash FROM documents WHERE url = :u"),
                           {"u": "http://a.test/5"}).scalar_one()
    assert raw == -1


def test_views_show_fingerprints_as_16_hex_digits(store: Store) -> None:
    rows = [doc(f"http://a.test/{i}", simhash=v) for i, v in enumerate(TOP_BIT_VALUES)]
    rows.append(doc("http://a.test/none", simhash=None))
    store.write_batch(rows, [drop("http://a.test/d", simhash=2**64 - 1, duplicate_simhash=255)])
    with store.engine.connect() as conn:
        docs = dict(conn.execute(sa.text("SELECT url, simhash FROM documents_view")).all())
        dropped = conn.execute(sa.text(
            "SELECT url, simhash, duplicate_simhash FROM dropped_view")).one()
        columns = set(conn.execute(sa.text("SELECT * FROM documents_view")).keys())
    assert docs == {r["url"]: (None if r["simhash"] is None else f"{r['simhash']:016x}")
                    for r in rows}
    assert tuple(dropped) == ("http://a.test/d", "f" * 16, "00000000000000ff")
    assert {"url", "title", "text", "content_hash", "simhash"} <= columns


# --- writes -----------------------------------------------------------------------------------

def test_upsert_updates_instead_of_failing(store: Store) -> None:
    store.upsert_documents([doc("http://a.test/p", title="old", simhash=1)])
    first = store.document_by_url("http://a.test/p")
    store.upsert_documents([doc("http://a.test/p", title="new", simhash=2**63)])
    again = store.document_by_url("http://a.test/p")
    assert store.count_documents() == 1
    assert (again.id, again.title, again.simhash) == (first.id, "new", 2**63)
    assert again.updated_at >= first.updated_at


def test_one_batch_may_hold_the_same_url_twice(store: Store) -> None:
    # PostgreSQL refuses ON CONFLICT touching one row twice in a statement: the last row wins.
    written = store.upsert_documents([doc("http://a.test/x", title="1"),
                                      doc("http://a.test/x", title="2")])
    assert written == 1
    assert store.document_by_url("http://a.test/x").title == "2"


def test_recrawl_under_another_spelling_updates_the_stored_page(store: Store) -> None:
    # Crawl 1 met the page as /a?utm_source=x, crawl 2 as /a: one canonical page, one row.
    first = "http://a.test/a?utm_source=x"
    store.upsert_documents([doc(first, canonical_url="http://a.test/a", title="old")])
    kept = store.document_by_url(first)
    store.upsert_documents([doc("http://a.test/a", canonical_url="http://a.test/a", title="new")])
    rows = [r for r in store.iter_fingerprints()]
    assert [(u, c) for u, c, *_ in rows] == [("http://a.test/a", "http://a.test/a")]
    again = store.document_by_url("http://a.test/a")
    assert (again.id, again.title) == (kept.id, "new")  # the stored page, updated in place
    store.upsert_documents([doc("http://a.test/%61", canonical_url="http://a.test/a")])
    assert store.count_documents() == 1
    assert store.document_by_url("http://a.test/a").url == "http://a.test/%61"


def test_recrawl_replaces_every_row_of_the_canonical_page(store: Store) -> None:
    # Rows written before the fix (two spellings of one page) and a batch holding two spellings
    # again: one row per canonical URL remains; a row whose own URL is rewritten keeps its id.
    store.upsert_documents([doc("http://a.test/b?utm_source=1", canonical_url="http://a.test/b"),
                            doc("http://a.test/keep")])
    with store.engine.begin() as conn:  # a duplicate row as the old code left it
        conn.execute(sa.insert(store.documents), [{
            "url": "http://a.test/b?utm_source=2", "canonical_url": "http://a.test/b"}])
    store.upsert_documents([doc("http://a.test/b?fbclid=3", canonical_url="http://a.test/b"),
                            doc("http://a.test/b", canonical_url="http://a.test/b", title="b")])
    urls = sorted(u for u, *_ in store.iter_fingerprints())
    assert urls == ["http://a.test/b", "http://a.test/keep"]
    assert store.document_by_url("http://a.test/b").title == "b"
    # A URL whose canonical form changed (another URLNORM policy) takes its own row along.
    store.upsert_documents([doc("http://a.test/keep", canonical_url="http://a.test/b")])
    assert [u for u, *_ in store.iter_fingerprints()] == ["http://a.test/keep"]


def test_write_batch_is_one_transaction(store: Store) -> None:
    with pytest.raises(StorageError) as info:
        store.write_batch([doc("http://a.test/ok")], [drop("http://a.test/bad", reason=None)])
    assert not info.value.transient
    assert store.count_documents() == 0  # the document went with the refused drop record


def test_text_is_made_storable(store: Store) -> None:
    store.upsert_documents([doc("http://a.test/n", text="a\x00b\ud800c", title="t\x00",
                                content_type="text/html; " + "x" * 400)])
    page = store.document_by_url("http://a.test/n")
    assert (page.text, page.title) == ("ab?c", "t")
    assert len(page.content_type) == 255


def test_unknown_columns_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="unknown document column"):
        store.upsert_documents([doc("http://a.test/u", html="<p>")])


def test_crawl_rows(store: Store) -> None:
    crawl_id = store.start_crawl("web", ["https://a.test/"], {"SIMHASH_MAX_DISTANCE": 3})
    store.upsert_documents([doc("http://a.test/c", crawl_id=crawl_id)])
    started = datetime.now(UTC)
    store.finish_crawl(crawl_id, "finished", {"start_time": started, "item_scraped_count": 1,
                                              "ratio": float("nan")})
    row = store.crawl(crawl_id)
    assert store.latest_crawl().id == crawl_id
    assert (row.spider, row.seeds, row.finish_reason) == ("web", ["https://a.test/"], "finished")
    assert row.settings == {"SIMHASH_MAX_DISTANCE": 3}
    assert row.stats == {"start_time": started.isoformat(), "item_scraped_count": 1,
                         "ratio": "nan"}
    assert row.finished_at.tzinfo is not None and row.finished_at >= row.started_at
    assert store.count_documents(crawl_id) == 1 and store.count_documents(crawl_id + 1) == 0


# --- reads ------------------------------------------------------------------------------------

def test_iter_fingerprints_streams_in_insertion_order(store: Store) -> None:
    rows = [doc(f"http://a.test/{i}", simhash=i * 7, content_hash=f"h{i}") for i in range(25)]
    store.upsert_documents(rows)
    batches = list(store.iter_fingerprint_batches(batch_size=10))
    assert [len(b) for b in batches] == [10, 10, 5]
    assert [fp for b in batches for *_, fp in b] == [i * 7 for i in range(25)]
    assert next(iter(store.iter_fingerprints())) == ("http://a.test/0", "http://a.test/0",
                                                     "h0", 0)
    crawl_id = store.start_crawl("web")
    store.upsert_documents([doc("http://a.test/3", simhash=2**64 - 1, crawl_id=crawl_id)])
    assert list(store.iter_fingerprints(crawl_id)) == [("http://a.test/3", "http://a.test/3",
                                                        None, 2**64 - 1)]


def test_dropped_filters_and_order(store: Store) -> None:
    c1 = store.start_crawl("web")
    c2 = store.start_crawl("web")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store.insert_dropped([
        drop("http://a.test/1", distance=0, reason="exact_duplicate", crawl_id=c1, dropped_at=t0),
        drop("https://a.test:8080/2", distance=3, crawl_id=c1, dropped_at=t0 + timedelta(1)),
        drop("http://b.test/3", distance=1, crawl_id=c2, dropped_at=t0 + timedelta(2)),
        drop("http://a_test/4", distance=1, crawl_id=c2, dropped_at=t0 + timedelta(3)),
    ])
    urls = lambda rows: [r.url[-1] for r in rows]  # noqa: E731
    assert urls(store.dropped()) == ["4", "3", "2", "1"]  # newest first
    assert urls(store.dropped(c1)) == ["2", "1"]
    assert urls(store.dropped(reason="exact_duplicate")) == ["1"]
    assert urls(store.dropped(host="A.test")) == ["2", "1"]
    assert urls(store.dropped(host="a_test")) == ["4"]  # "_" is no LIKE wildcard here
    assert urls(store.dropped(min_distance=1, max_distance=2)) == ["4", "3"]
    assert urls(store.dropped(since="2026-01-02T12:00:00")) == ["4", "3"]
    assert urls(store.dropped(limit=1)) == ["4"]
    assert store.count_dropped(c2, min_distance=1) == 2
    assert store.dropped_by_url("http://nowhere.test/") is None
    assert store.dropped_by_url("http://b.test/3").as_dict()["crawl_id"] == c2


def test_document_by_url_falls_back_to_canonical(store: Store) -> None:
    store.upsert_documents([doc("http://A.test/x?utm_source=1", canonical_url="http://a.test/x")])
    assert store.document_by_url("http://a.test/x").url == "http://A.test/x?utm_source=1"
    assert store.document_by_url("http://a.test/y") is None


# --- re-crawls: a real crawl subprocess, twice, on one database -------------------------------

_TEXTS = {
    "/": "Welcome to the harbour museum with model ships, old charts, brass compasses and "
         "lighthouse lenses collected by sailors over two centuries of coastal trade.",
    "/a": "Our bakery course teaches sourdough starters, rye loaves, croissant folding and "
          "oven timing for beginners who want crusty bread every weekend at home.",
    "/b": "The cycling club rides gravel lanes past vineyards and orchards each Sunday, "
          "stopping for coffee, repairs and maps before the long climb back to town.",
}


def _linking_home(links: list[str]) -> bytes:
    anchors = "".join(f'<a href="{href}">link</a> ' for href in links)
    return (f"<html><head><title>/</title></head><body><p>{_TEXTS['/']}</p>{anchors}"
            "</body></html>").encode()


@pytest.mark.slow
def test_a_recrawl_meeting_other_spellings_updates_the_stored_pages(db_url: str, tmp_path):
    from crawler.sitegen import Page, Site
    from crawler.sitegen.server import SiteServer
    from tests.conftest import run_crawl

    pages = {path: Page(f"<html><head><title>{path}</title></head><body><p>{text}</p>"
                        "</body></html>".encode()) for path, text in _TEXTS.items()}
    pages["/"] = Page(_linking_home(["/a?utm_source=x", "/%62"]))  # crawl 1's spellings
    pages["/robots.txt"] = Page(b"User-agent: *\nDisallow:\n", "text/plain")
    with SiteServer(Site(name="respelled", pages=pages)) as server:
        stored = []
        for n in (1, 2):
            run = run_crawl(tmp_path / f"crawl{n}", urls=[server.url("/")],
                            settings={"STORAGE_URL": db_url})
            assert run.returncode == 0, run.stderr[-3000:]
            assert run.stats["storage/documents"] == 3
            with Store(db_url) as store:
                stored.append({(u, c) for u, c, *_ in store.iter_fingerprints()})
                latest, count = store.latest_crawl().id, store.count_documents()
            pages["/"] = Page(_linking_home(["/a", "/b"]))  # crawl 2's spellings
    url = server.url
    assert stored[0] == {(url("/"), url("/")), (url("/a?utm_source=x"), url("/a")),
                         (url("/%62"), url("/b"))}
    assert stored[1] == {(url(p), url(p)) for p in ("/", "/a", "/b")}
    assert count == 3
    with Store(db_url) as store:
        assert store.count_documents(latest) == 3  # every row is the re-crawl's version


# --- schema versions --------------------------------------------------------------------------

def test_migrations_create_the_schema_and_record_the_version(store: Store) -> None:
    assert store.schema_revision() is None or store.schema_revision() == migrations.head()
    store.check()
    assert store.schema_revision() == migrations.head() == "0011"
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"documents", "dropped", "crawls", "alembic_version"} <= tables
    with store.engine.connect() as conn:  # the migration builds exactly the models' schema
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    store.check()  # idempotent, on a new Store too
    with Store(store.sa_url) as again:
        again.check()
        assert again.schema_revision() == "0011"


def test_stores_opening_at_once_migrate_once(db_url: str) -> None:
    # pipelines open in parallel threads, each with its own Store on the same fresh database
    stores = [Store(db_url) for _ in range(4)]
    errors: list[BaseException] = []

    def check(s: Store) -> None:
        try:
            s.check()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=check, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert stores[0].schema_revision() == "0011"
    for s in stores:
        s.close()


def test_a_crawl_log_starts_with_our_migration_line_not_alembic_setup(tmp_path) -> None:
    from crawler.sitegen import Page, Site
    from crawler.sitegen.server import SiteServer
    from tests.conftest import run_crawl

    site = Site(name="one", pages={"/": Page(b"<html><body><p>One page.</p></body></html>")})
    with SiteServer(site) as server:
        run = run_crawl(tmp_path / "run", urls=[server.url("/")],
                        settings={"ROBOTSTXT_OBEY": False})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[crawler.storage.migrations] INFO: Migrating the crawl database from an empty schema" \
        in run.stderr
    assert "[alembic" not in run.stderr, run.stderr[:3000]


def test_a_newer_schema_is_refused(store: Store) -> None:
    store.check()
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'ffff'"))
    with Store(store.sa_url) as newer, pytest.raises(StorageError) as info:
        newer.check()
    assert "ffff" in str(info.value) and "newer than this dedup-crawler" in str(info.value)


def test_create_false_refuses_a_missing_or_empty_database(tmp_path) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    with Store(missing, create=False) as s, pytest.raises(StorageError, match="no crawl database"):
        s.check()
    assert not (tmp_path / "none.db").exists()
    (tmp_path / "empty.db").touch()
    with Store(f"sqlite:///{tmp_path / 'empty.db'}", create=False) as s, \
            pytest.raises(StorageError, match="holds no crawl database"):
        s.count_documents()


def test_sqlite_uses_wal(tmp_path) -> None:
    with Store(f"sqlite:///{tmp_path / 'w.db'}") as s:
        s.check()
        with s.engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA journal_mode")).scalar_one() == "wal"
            assert conn.execute(sa.text("PRAGMA busy_timeout")).scalar_one() > 0
            assert conn.execute(sa.text("PRAGMA synchronous")).scalar_one() == 2  # FULL
            assert conn.execute(sa.text("PRAGMA foreign_keys")).scalar_one() == 1


# --- errors -----------------------------------------------------------------------------------

def test_unreachable_postgres_is_one_line_with_the_password_masked() -> None:
    with pytest.raises(StorageError) as info:
        check_storage({"STORAGE_URL": "postgresql+psycopg://bot:s3cret@127.0.0.1:1/crawl"})
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message
    assert "postgresql+psycopg://bot:***@127.0.0.1:1/crawl" in message
    assert "is the server at 127.0.0.1:1 running?" in message and "check STORAGE_URL" in message
    assert info.value.transient


@pytest.mark.postgres
def test_missing_postgres_database_names_it(pg_url: str) -> None:
    """A database that does not exist and that the user may not create: one line naming it
    and ``createdb``, the password masked (a user who may create it gets it created: below)."""
    import uuid

    role = f"t_nocreate_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN NOCREATEDB'))
    try:
        url = sa.make_url(pg_url).set(database="no_such_db_dedup", username=role,
                                      password="pw")
        with pytest.raises(StorageError) as info:
            check_storage({"STORAGE_URL": url.render_as_string(hide_password=False)})
        message = str(info.value)
        assert "\n" not in message and ":pw@" not in message
        assert "no_such_db_dedup" in message and "createdb no_such_db_dedup" in message
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text("DROP DATABASE IF EXISTS no_such_db_dedup WITH (FORCE)"))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_sqlite_in_a_missing_directory(tmp_path) -> None:
    with pytest.raises(StorageError) as info:
        check_storage({"STORAGE_URL": f"sqlite:///{tmp_path}/nope/crawl.db"})
    assert "\n" not in str(info.value)
    assert f"directory {tmp_path}/nope does not exist" in str(info.value)


def test_a_file_that_is_not_sqlite(tmp_path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database\n")
    with pytest.raises(StorageError) as info:
        check_storage({"STORAGE_URL": f"sqlite:///{path}"})
    assert str(info.value) == (f"opening the database on sqlite:///{path} failed: file is not a "
                               "database (is it a SQLite file, writable and not locked by another "
                               "program? check STORAGE_URL)")


@pytest.mark.parametrize("url", ["not a url", "mysql://u:pw@h/db", "postgres+nodriver://h/db"])
def test_bad_urls_are_refused_by_validation(url: str) -> None:
    with pytest.raises(config.SettingError, match="STORAGE_URL") as info:
        StorageSettings.from_settings({"STORAGE_URL": url})
    assert "pw" not in str(info.value)


@pytest.mark.parametrize(("name", "value"), [("STORAGE_BATCH_SIZE", 0),
                                             ("STORAGE_BATCH_SECONDS", 0),
                                             ("DROPPED_TEXT_MAX_CHARS", -1),
                                             ("STORAGE_RETRY_TIMES", -1)])
def test_storage_settings_validated(name: str, value: object) -> None:
    with pytest.raises(config.SettingError, match=name):
        check_settings({name: value})


def test_unknown_driver_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="postgresql\\+nodriver"):
        Store("postgresql+nodriver://u:pw@h/db")


def test_mask_url_without_parsing() -> None:
    assert mask_url("postgresql://u:pa:ss@h/db") == "postgresql://u:***@h/db"


def test_dedup_settings_snapshot(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DROPPED_LOG is recorded absolute: a rule recorded later from another directory
    appends its moves to this crawl's log (crawler.review.actions), not to one of its own."""
    monkeypatch.chdir(tmp_path)
    settings = {"SIMHASH_MAX_DISTANCE": 3, "URLNORM_STRIP_PARAMS": ("utm_*",),
                "BOT_NAME": "x", "STORAGE_URL": "postgresql://u:pw@h/db",
                "DROPPED_LOG": "logs/dropped.jsonl"}
    assert dedup_settings(settings) == {"SIMHASH_MAX_DISTANCE": 3,
                                        "URLNORM_STRIP_PARAMS": ["utm_*"],
                                        "STORAGE_URL": "postgresql://u:***@h/db",
                                        "DROPPED_LOG": str(tmp_path / "logs/dropped.jsonl")}
    assert dedup_settings({"DROPPED_LOG": ""})["DROPPED_LOG"] == ""  # no log: none recorded


# --- content keys (revision 0002) -------------------------------------------------------------

def _expected_keys(url: str, canonical: str | None, chash: str | None) -> tuple[Any, int]:
    return (None if not chash else to_signed64(content_key(chash)),
            to_signed64(url_key(canonical or url)))


def _stored_keys(store: Store) -> dict[str, tuple[Any, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT url, content_key, canonical_key FROM documents"))
        return {url: (ck, uk) for url, ck, uk in rows}


def test_writes_compute_both_keys(store: Store) -> None:
    rows = [doc("http://a.test/1", content_hash="ab" * 20, simhash=2**64 - 1),
            doc("http://a.test/2?utm_source=x", canonical_url="http://a.test/2",
                content_hash="not hex, a free-form hash"),
            doc("http://a.test/bin", content_hash=None),
            doc("http://a.test/nocanon", canonical_url="", content_hash="cd" * 20,
                content_key=12345)]  # a caller's key is ignored: derived columns
    store.upsert_documents(rows)
    assert _stored_keys(store) == {
        r["url"]: _expected_keys(r["url"], r["canonical_url"], r["content_hash"]) for r in rows}
    # a re-crawl with new content recomputes; a new spelling keeps the canonical key
    store.upsert_documents([doc("http://a.test/1", content_hash="ef" * 20),
                            doc("http://a.test/2", content_hash="ff" * 20)])
    keys = _stored_keys(store)
    assert keys["http://a.test/1"] == _expected_keys("http://a.test/1", None, "ef" * 20)
    assert keys["http://a.test/2"] == _expected_keys("http://a.test/2", None, "ff" * 20)
    assert "http://a.test/2?utm_source=x" not in keys


def test_key_arrays_stream_what_the_records_hold(store: Store) -> None:
    rows = [doc(f"http://a.test/{i}", content_hash=f"{i:040x}" if i % 7 else None,
                simhash=None if i % 5 == 0 else TOP_BIT_VALUES[i % len(TOP_BIT_VALUES)])
            for i in range(30)]
    store.upsert_documents(rows)
    chunks = list(store.iter_key_arrays(batch_size=8))
    assert [len(c) for c in chunks] == [8, 8, 8, 1]  # 25 rows with a content hash
    ids = np.concatenate([c.ids for c in chunks])
    assert ids.tolist() == sorted(ids.tolist())
    urls = store.document_urls([*ids.tolist(), 10**9])  # an unknown id is just absent
    assert len(urls) == 25 and all(canonical == url for url, canonical in urls.values())
    records = [r for r in store.iter_fingerprints() if r[2]]
    assert [urls[i][0] for i in ids.tolist()] == [r[0] for r in records]
    has = np.concatenate([c.has_simhash for c in chunks])
    fps = np.concatenate([c.simhash for c in chunks])
    assert [int(f) if h else None for f, h in zip(fps, has, strict=True)] == [
        r[3] for r in records]
    assert np.concatenate([c.content_keys for c in chunks]).tolist() == [
        content_key(r[2]) for r in records]
    assert np.concatenate([c.canonical_keys for c in chunks]).tolist() == [
        url_key(r[1]) for r in records]


def test_key_arrays_come_from_the_covering_index(tmp_path) -> None:
    with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        store.upsert_documents([doc("http://a.test/1", content_hash="ab" * 20)])
        with store.engine.connect() as conn:
            plan = conn.execute(sa.text(
                "EXPLAIN QUERY PLAN SELECT CASE WHEN simhash IS NULL THEN -id - 1 ELSE id END,"
                " coalesce(simhash, 0), content_key, canonical_key FROM documents"
                " WHERE content_key IS NOT NULL ORDER BY id")).all()
        assert "COVERING INDEX ix_documents_keys" in " ".join(str(r[-1]) for r in plan)
        assert len(list(store.iter_key_arrays())) == 1


def test_migrating_a_0001_database_backfills_the_keys(db_url: str) -> None:
    n = 10_050  # over one backfill batch (10,000)
    engine = sa.create_engine(parse_url(db_url))
    with engine.begin() as conn:  # a crawl database written by the previous version
        alembic_command.upgrade(migrations.alembic_config(conn), "0001")
        conn.execute(
            sa.text("INSERT INTO documents (url, canonical_url, content_hash, simhash) "
                    "VALUES (:url, :canonical, :chash, :simhash)"),
            [{"url": f"http://a.test/{i}", "canonical": "" if i % 3 else f"http://c.test/{i}",
              "chash": None if i % 11 == 0 else ("zz" if i % 13 == 0 else f"{i:016x}{i:016x}"),
              "simhash": to_signed64(i * 0x9E3779B97F4A7C15 % 2**64)} for i in range(n)])
    engine.dispose()
    with Store(db_url) as store:
        store.check()
        assert store.schema_revision() == migrations.head()
        with store.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT url, canonical_url, content_hash, content_key, "
                                        "canonical_key FROM documents")).all()
        assert len(rows) == n
        assert all((ck, uk) == _expected_keys(url, canonical, chash)
                   for url, canonical, chash, ck, uk in rows)
        assert "ix_documents_keys" in {
            ix["name"] for ix in sa.inspect(store.engine).get_indexes("documents")}
        loaded = LocalContentIndex(3)
        loaded.load_arrays(store.iter_key_arrays(), store.document_urls)
        by_records = LocalContentIndex(3)
        by_records.load(r for r in store.iter_fingerprints() if r[2])
        assert len(loaded) == len(by_records) == n - len(range(0, n, 11))
        probe = PageSignature("http://new/1", "", f"{12:016x}{12:016x}", None)
        assert loaded.check_and_add(probe) == by_records.check_and_add(probe)
        assert loaded.check_and_add(probe).url == "http://a.test/12"


@pytest.mark.postgres
def test_a_crawl_creates_a_missing_postgresql_database_a_reader_does_not(pg_url: str) -> None:
    """As a SQLite file is created on first use, a crawl's Store creates the PostgreSQL
    database its URL names (the distributed profile's default one, for instance); a review
    command's read-only Store reports it missing instead."""
    import uuid

    name = f"t_created_{uuid.uuid4().hex[:10]}"
    url = pg_url.rsplit("/", 1)[0] + "/" + name
    admin = sa.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        with pytest.raises(StorageError, match="does not exist"):
            Store(url, create=False).check()
        with Store(url) as store:  # a crawl's
            crawl = store.start_crawl("web")
            assert store.schema_revision() == migrations.head()
        with Store(url, create=False) as again:
            assert [c.id for c in again.crawls()] == [crawl]
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_a_session_stuck_in_the_migration_lock_does_not_stop_others_opening(pg_schema_url):
    """A worker paused (SIGSTOP) while opening its storage holds the migration lock in an open
    transaction; another worker opening the same, current, database must not wait for it (it
    did, and so the paused worker's reclaim never ran: tests/test_fencing.py)."""
    from crawler.storage.base import MIGRATION_LOCK_KEY

    with Store(pg_schema_url) as first:
        first.check()  # the schema is at the head
    holder = sa.create_engine(pg_schema_url)
    try:
        with holder.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
            conn.execute(sa.text("UPDATE alembic_version SET version_num = version_num"))
            done = threading.Event()

            def open_store() -> None:
                with Store(pg_schema_url) as other:  # a crawl's: it checks it may write
                    other.check()
                    done.set()

            thread = threading.Thread(target=open_store, daemon=True)
            thread.start()
            assert done.wait(20), "opening storage waited for a session holding the lock"
            conn.rollback()
    finally:
        holder.dispose()


def test_stored_canonical_urls_across_slices_and_kinds(store: Store, monkeypatch) -> None:
    """What a JOBDIR resume asks: documents fetched and drops written since the job began, by
    canonical URL; the URLs asked in several JSON slices (one parameter each) and a last slice
    short enough for plain parameters, the drops in one pass."""
    from datetime import datetime

    from crawler.storage import base

    monkeypatch.setattr(base, "JSON_CHUNK", 250)  # 600 URLs: slices of 250, 250 and 100
    urls = [f"http://a.test/{i}" for i in range(600)]
    docs = [doc(u + "?s=1", canonical_url=u,
                fetched_at="2020-01-01T00:00:00Z" if i % 10 == 0 else "2026-01-02T03:04:05Z")
            for i, u in enumerate(urls) if i % 2 == 0]
    drops = [drop(u + "?d", canonical_url=u) for i, u in enumerate(urls) if i % 3 == 1]
    store.write_batch(docs, drops)
    since = datetime(2025, 1, 1, tzinfo=UTC)
    expected = {u for i, u in enumerate(urls) if (i % 2 == 0 and i % 10) or i % 3 == 1}
    assert len(expected) > 300
    found = store.stored_canonical_urls([*urls, "http://a.test/never"], since)
    assert found == expected
    assert store.stored_canonical_urls(urls[:150], since) == {u for u in expected
                                                               if u in urls[:150]}
    assert store.stored_canonical_urls([], since) == set()
    later = datetime(2030, 1, 1, tzinfo=UTC)  # nothing was written since then
    assert store.stored_canonical_urls(urls, later) == set()

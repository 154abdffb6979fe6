"""crawler.review: values, filters, the drop log, the database reader and explanations.

Databases are real SQLite files written through :class:`crawler.storage.Store` with hand-made
rows (``build_db``, also used by the command and report tests).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler import review
from crawler.content.simhash import to_hex, to_unsigned
from crawler.content.simindex import block_layout
from crawler.review import CrawlDB, DropFilter, ReviewError
from crawler.storage import Store, to_signed64

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ORIGIN = "http://site.test"
BODY = "Cats sleep most of the day\nDogs like long walks\nShared footer line"


def doc(i: int, simhash: int, text: str = BODY, host: str = ORIGIN, **extra: Any) -> dict:
    url = f"{host}/p{i}.html"
    row = {"url": url, "canonical_url": url, "title": f"Page {i}", "text": text,
           "content_hash": f"hash-{i}", "simhash": simhash, "status": 200,
           "content_type": "text/html", "fetched_at": T0 + timedelta(seconds=i)}
    row.update(extra)
    return row


def drop(url: str, kept: dict, reason: str, simhash: int, second: int, text: str,
         **extra: Any) -> dict:
    row = {"url": url, "canonical_url": url, "reason": reason, "duplicate_of": kept["url"],
           "distance": (simhash ^ kept["simhash"]).bit_count(), "simhash": simhash,
           "duplicate_simhash": kept["simhash"],
           "content_hash": kept["content_hash"] if reason == "exact_duplicate" else "h-" + url,
           "title": kept["title"], "text": text, "dropped_at": T0 + timedelta(seconds=second)}
    row.update(extra)
    return row


def build_db(path: Path, k: int = 3, crawls: int = 1, url: str = "") -> dict[str, Any]:
    """A crawl database with 4 kept pages, a near duplicate, an exact copy, another host."""
    store = Store(url or f"sqlite:///{path}")
    ids = [store.start_crawl("web", [ORIGIN + "/"], {"SIMHASH_MAX_DISTANCE": k,
                                                     "DROPPED_TEXT_MAX_CHARS": 20000})
           for _ in range(crawls)]
    cid = ids[-1]
    docs = [doc(0, 0x0000_0000_0000_0000), doc(1, 0xFFFF_0000_FFFF_0000),
            doc(2, 0x0F0F_0F0F_0F0F_0F0F), doc(3, 0xF000_0000_0000_00FF, host="http://b.test")]
    docs[3]["text"] = "Completely different page\nabout birds"
    for row in docs:
        row["crawl_id"] = cid
    near = drop(ORIGIN + "/mirror/p1.html", docs[1], "near_duplicate",
                docs[1]["simhash"] ^ 0b101, 10, "Advert: buy socks now\n" + BODY, crawl_id=cid)
    exact = drop(ORIGIN + "/copy/p2.html", docs[2], "exact_duplicate", docs[2]["simhash"], 11,
                 BODY, crawl_id=cid)
    far = drop("http://b.test/far.html", docs[3], "near_duplicate",
               docs[3]["simhash"] ^ 0b111, 12, "about birds", crawl_id=cid)
    store.write_batch(docs, [near, exact, far])
    store.finish_crawl(cid, "finished", {"item_scraped_count": 4})
    store.close()
    return {"crawl_id": cid, "docs": docs, "drops": [far, exact, near], "path": path}


@pytest.fixture
def db_info(tmp_path: Path) -> dict[str, Any]:
    return build_db(tmp_path / "crawl.db")


# --- values ----------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_hex64_and_unsigned_read_back_the_signed_storage_form(value: int) -> None:
    signed = to_signed64(value)
    assert to_unsigned(signed) == value
    assert to_hex(signed) == f"{value:016x}" == to_hex(f"{value:016x}")


@given(st.integers(1, 64))
def test_block_ranges_cover_64_bits_like_the_index(blocks: int) -> None:
    ranges = review.block_ranges(blocks)
    assert ranges == block_layout(blocks)
    assert sum(width for _, width in ranges) == 64


@given(st.integers(0, 2**64 - 1), st.sets(st.integers(0, 63), max_size=6), st.integers(0, 6))
def test_pigeonhole_some_block_matches_within_k(a: int, flips: set[int], k: int) -> None:
    b = a
    for bit in list(flips)[:k]:
        b ^= 1 << bit
    matched = review.matching_blocks(a, b, review.block_ranges(k + 1))
    assert matched, "two fingerprints within k bits share one of k+1 blocks"
    assert review.matching_blocks(a, a, review.block_ranges(k + 1)) == list(range(k + 1))


def test_parse_time_accepts_dates_z_and_naive_utc() -> None:
    assert review.parse_time("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC)
    assert review.parse_time("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert review.parse_time(datetime(2026, 1, 31, 12)).tzinfo is UTC
    with pytest.raises(ValueError):
        review.parse_time("yesterday")


def test_host_filter_matches_the_host_and_its_subdomains_only() -> None:
    assert review.host_matches("http://a.example.com:8080/x", "example.com")
    assert review.host_matches("http://example.com/x", "EXAMPLE.com:80")
    assert not review.host_matches("http://badexample.com/x", "example.com")


# --- database ---------------------------------------------------------------------------------


def test_missing_file_is_reported_and_not_created(tmp_path: Path) -> None:
    target = tmp_path / "nope.db"
    for value in (str(target), f"sqlite:///{target}"):
        with pytest.raises(ReviewError, match="does not exist"):
            CrawlDB.open(value)
    assert not target.exists()


def test_a_file_that_is_not_a_crawl_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ReviewError, match="not a crawl database"):
        CrawlDB.open(str(other))


def test_empty_database_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    Store(f"sqlite:///{path}").check()  # tables, no crawl
    with CrawlDB.open(str(path)) as db, pytest.raises(ReviewError, match="empty"):
        db.require_content()


def test_dropped_rows_newest_first_with_filters(db_info: dict[str, Any]) -> None:
    with CrawlDB.open(str(db_info["path"])) as db:
        rows = db.dropped()
        assert [r.url for r in rows] == [d["url"] for d in db_info["drops"]]
        assert rows[0].simhash == f"{db_info['drops'][0]['simhash']:016x}"
        assert rows[0].time == (T0 + timedelta(seconds=12)).isoformat()
        assert [r.reason for r in db.dropped(DropFilter(reason="exact_duplicate"))] == [
            "exact_duplicate"]
        assert {r.url for r in db.dropped(DropFilter(host="b.test"))} == {
            "http://b.test/far.html"}
        assert [r.distance for r in db.dropped(DropFilter(min_distance=1, max_distance=2))] == [2]
        assert len(db.dropped(DropFilter(limit=2))) == 2
        assert len(db.dropped(DropFilter(since=T0 + timedelta(seconds=11)))) == 2
        assert db.dropped(DropFilter(crawl_id=999)) == []
        with pytest.raises(ReviewError, match="unknown crawl 999"):
            db.crawl(999)


def test_explain_a_near_duplicate(db_info: dict[str, Any]) -> None:
    with CrawlDB.open(str(db_info["path"])) as db:
        e = review.explain(db, ORIGIN + "/mirror/p1.html")
    assert e.kept.url == ORIGIN + "/p1.html" and e.reason == "near_duplicate"
    assert e.distance == e.stored_distance == 2 and e.max_distance == 3
    assert e.matched_blocks == [0, 1, 2]  # the flipped bits are in the last 16-bit block
    assert e.exact is False and not e.identical_text
    assert e.lines_only_dropped == {"Advert: buy socks now": 1} and not e.lines_only_kept
    assert e.words_only_dropped == {"advert": 1, "buy": 1, "socks": 1, "now": 1}


def test_explain_an_exact_copy(db_info: dict[str, Any]) -> None:
    with CrawlDB.open(str(db_info["path"])) as db:
        e = review.explain(db, ORIGIN + "/copy/p2.html")
    assert e.distance == 0 and e.exact is True and e.identical_text
    assert not (e.lines_only_dropped or e.lines_only_kept or e.words_only_dropped)


def test_explain_unknown_and_kept_urls(db_info: dict[str, Any]) -> None:
    with CrawlDB.open(str(db_info["path"])) as db:
        with pytest.raises(ReviewError, match="neither a dropped nor a kept page"):
            review.explain(db, ORIGIN + "/missing.html")
        with pytest.raises(ReviewError, match="was kept, not dropped"):
            review.explain(db, ORIGIN + "/p0.html")
        pair = review.explain_pair(db, ORIGIN + "/p0.html", ORIGIN + "/p2.html")
    assert pair.distance == 32 and pair.identical_text


# --- drop log ---------------------------------------------------------------------------------


def _log_line(url: str, second: int, reason: str = "near_duplicate") -> str:
    return json.dumps({"url": url, "reason": reason, "duplicate_of": ORIGIN + "/", "distance": 1,
                       "simhash": "00000000000000ff", "duplicate_simhash": "00000000000000fe",
                       "time": (T0 + timedelta(seconds=second)).isoformat(), "crawl_id": 1})


def test_log_reader_tolerates_a_torn_last_line(tmp_path: Path) -> None:
    log = tmp_path / "dropped.jsonl"
    lines = [_log_line(ORIGIN + "/a", 1), _log_line(ORIGIN + "/b", 2, "exact_duplicate")]
    log.write_text("\n".join(lines) + "\n" + lines[0][:25])
    records = review.read_log(log)
    assert [r.url for r in records] == [ORIGIN + "/b", ORIGIN + "/a"]
    assert records[1].simhash == "00000000000000ff" and records[1].crawl_id == 1
    assert [r.url for r in review.read_log(log, DropFilter(reason="near_duplicate"))] == [
        ORIGIN + "/a"]


def test_log_reader_refuses_a_bad_line_in_the_middle(tmp_path: Path) -> None:
    log = tmp_path / "dropped.jsonl"
    log.write_text(_log_line(ORIGIN + "/a", 1) + "\n{oops\n" + _log_line(ORIGIN + "/b", 2) + "\n")
    with pytest.raises(ReviewError, match=r"dropped\.jsonl"):
        review.read_log(log)
    with pytest.raises(ReviewError, match="does not exist"):
        review.read_log(tmp_path / "none.jsonl")


def test_explain_finds_a_url_spelled_differently(db_info: dict[str, Any]) -> None:
    with CrawlDB.open(str(db_info["path"])) as db:
        e = review.explain(db, "HTTP://SITE.test:80/mirror/p1.html#top")
    assert e.dropped.url == ORIGIN + "/mirror/p1.html"


@pytest.mark.postgres
def test_review_reads_a_postgresql_crawl_database(pg_url: str, tmp_path: Path) -> None:
    """Same rows and explanation on PostgreSQL, in a database of its own (dropped after)."""
    import os

    import sqlalchemy as sa

    from crawler import report

    name = f"review_test_{os.getpid()}"
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    try:
        build_db(tmp_path / "unused.db", url=url)
        with CrawlDB.open(url) as db:
            assert next(r.url for r in db.dropped()) == "http://b.test/far.html"
            assert review.explain(db, ORIGIN + "/mirror/p1.html").distance == 2
            assert report.build_report(db)["what_if"]["mismatches"] == 0
            db.close()
    finally:
        from crawler.storage import release_engine

        release_engine(sa.engine.make_url(url))
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

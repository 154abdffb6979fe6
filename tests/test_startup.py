"""Start-up costs (issue 28 item 1): what a crawl allocates and imports before its first page,
and the benchmark that measures it (bench/startup.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import startup
from crawler.backends.bloom import LocalSeenSet, ZeroBits, popcount, read_snapshot
from crawler.storage import Store, migrations

ROOT = Path(__file__).resolve().parent.parent


def keys(n: int, salt: str) -> list[bytes]:
    return [hashlib.blake2b(f"{salt}{i}".encode(), digest_size=16).digest() for i in range(n)]


def run_python(code: str) -> str:
    """``code`` in a fresh interpreter (nothing imported yet); its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --- the Bloom filter is resident in proportion to its use -------------------------------------

def test_a_default_sized_filter_is_not_resident_until_used() -> None:
    """BLOOM_CAPACITY=10^7 is a 17 MiB filter; a bytearray made all of it resident at start."""
    out = run_python("""
        from crawler.backends.bloom import LocalSeenSet
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        before = rss()
        seen = LocalSeenSet()
        for i in range(50):
            seen.add(i.to_bytes(16, "little"))
        print(seen.layers[0].m // 8 / 2**20, rss() - before)
    """)
    size_mib, grown_mib = map(float, out.split())
    assert size_mib > 16
    assert grown_mib < size_mib / 4, (size_mib, grown_mib)


def test_the_set_bit_count_is_kept_exactly_through_adds_and_a_snapshot(tmp_path) -> None:
    seen = LocalSeenSet(capacity=2_000, error_rate=0.01)
    for key in keys(3_000, "a") + keys(500, "a"):  # past capacity (a second layer), repeats
        seen.add(key)
    assert len(seen.layers) == 2
    for layer in seen.layers:
        assert layer.set_bits() == popcount(layer.bits) == sum(bin(b).count("1")
                                                              for b in bytes(layer.bits))
    seen.save(tmp_path / "seen.bloom")
    _, _, _, layers = read_snapshot(tmp_path / "seen.bloom")
    assert [x.set_bits() for x in layers] == [x.set_bits() for x in seen.layers]
    assert [x.bits for x in layers] == [x.bits for x in seen.layers]
    assert seen.fill_ratio == sum(x.set_bits() for x in layers) / seen.bits


def test_zero_bits_read_as_zeros_compare_by_content_and_feed_numpy() -> None:
    import numpy as np

    a, b = ZeroBits(4096), ZeroBits(4096)
    assert a == b and a == bytes(4096) and a != ZeroBits(4095)
    a[100] = 7
    assert a != b and a[100] == 7 and popcount(a) == 3
    assert np.frombuffer(a, dtype=np.uint8)[100] == 7


# --- the schema check is one query when the database is current --------------------------------

def test_head_revision_read_without_alembic_is_alembics_head() -> None:
    assert migrations.head_revision() == migrations.head()


def test_a_current_database_opens_without_importing_alembic(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    with Store(url) as store:
        store.check()  # a fresh database: migrated by alembic
        assert store.schema_revision() == migrations.head()
    out = run_python(f"""
        import sys
        from crawler.storage import Store
        with Store({url!r}) as store:
            store.check()
            print(store.schema_revision(), "alembic" in sys.modules)
    """)
    assert out.split() == [migrations.head(), "False"]


def test_a_fresh_sqlite_database_is_the_one_alembic_builds(tmp_path) -> None:
    """The stored head schema (migrations/sqlite_schema.py) matches the revisions; after a new
    revision: ``python -m crawler.storage.migrations sqlite-schema``."""
    import sqlalchemy as sa

    from crawler.storage.migrations import sqlite_schema

    assert migrations.head() == sqlite_schema.REVISION
    by_alembic = sa.create_engine(f"sqlite:///{tmp_path / 'alembic.db'}")
    with by_alembic.begin() as conn:
        migrations.upgrade(conn)
        expected = migrations.sqlite_statements(conn), migrations.recorded_revisions(conn)
    by_alembic.dispose()
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    out = run_python(f"""
        import sys
        from crawler.storage import Store
        with Store({url!r}) as store:
            store.check()
            print("alembic" in sys.modules)
    """)
    assert out.split() == ["False"]
    fresh = sa.create_engine(url)
    with fresh.connect() as conn:
        assert (migrations.sqlite_statements(conn), migrations.recorded_revisions(conn)) == expected
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    fresh.dispose()


def test_a_crawls_store_writes_and_reads_without_the_orm(tmp_path) -> None:
    """What a SQLite crawl does with its Store (start, a batch, the counts and JOBDIR lookups
    it reads, finish) is Core: ``sqlalchemy.orm`` (~0.1 s, several MiB) stays unimported; the
    ORM classes the commands read load on first use and see the same rows."""
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    out = run_python(f"""
        import sys
        from datetime import datetime, timedelta, timezone
        from crawler.storage import Store
        def loaded():
            return ["sqlalchemy.orm" in sys.modules, "crawler.storage.models" in sys.modules]
        with Store({url!r}) as store:
            crawl_id = store.start_crawl("web", ["http://a.test/"], {{"SCOPE": "host"}})
            doc = {{"url": "http://a.test/", "canonical_url": "http://a.test/", "title": "T",
                    "text": "some text", "status": 200, "crawl_id": crawl_id,
                    "fetched_at": "2026-01-02T03:04:05Z"}}
            drop = {{"url": "http://a.test/b", "canonical_url": "http://a.test/b",
                     "reason": "near_duplicate", "duplicate_of": "http://a.test/",
                     "distance": 2, "simhash": 2**64 - 1, "crawl_id": crawl_id}}
            store.write_batch([doc], [drop])
            since = datetime(2020, 1, 1, tzinfo=timezone.utc)
            found = sorted(store.stored_canonical_urls(["http://a.test/", "http://a.test/b",
                                                        "http://a.test/c"], since))
            counts = [store.count_documents(crawl_id), store.count_dropped(crawl_id)]
            store.finish_crawl(crawl_id, "finished", {{"item_scraped_count": 1}})
            before = loaded()
            crawl = store.crawl(crawl_id)
            page = store.document_by_url("http://a.test/")
            dropped = store.dropped(crawl_id)
            print(before, found, counts, loaded(), crawl.finish_reason, crawl.seeds,
                  page.title, page.crawl_id == crawl_id, [d.simhash for d in dropped])
    """)
    assert out.split("\n")[0] == (
        "[False, False] ['http://a.test/', 'http://a.test/b'] [1, 1] [True, True] finished "
        f"['http://a.test/'] T True [{2**64 - 1}]"
    )


def test_the_orm_classes_are_mapped_on_the_core_tables() -> None:
    """One schema definition: each ORM class's table is the Core table the Store writes."""
    from crawler.storage import models, tables

    assert models.Base.metadata is tables.metadata
    for cls, table in ((models.Crawl, tables.crawls), (models.Document, tables.documents),
                       (models.Dropped, tables.dropped),
                       (models.CrawlDocument, tables.crawl_documents),
                       (models.RedisGeneration, tables.redis_generations),
                       (models.OverrideRow, tables.overrides), (models.ReviewRow, tables.reviews)):
        assert cls.__table__ is table
        assert set(cls.__annotations__) == {c.key for c in table.columns}, cls


def test_an_older_schema_is_still_migrated_and_a_newer_one_refused(tmp_path) -> None:
    import sqlalchemy as sa
    from alembic import command

    from crawler.storage import StorageError

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Store(url) as store, store.engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "0010")
        assert not migrations.at_head(conn)
    with Store(url) as store:
        store.check()
        assert store.schema_revision() == migrations.head()
        with store.engine.begin() as conn:
            assert migrations.at_head(conn)
            conn.execute(sa.text("UPDATE alembic_version SET version_num = 'ffff'"))
    with Store(url) as newer, pytest.raises(StorageError, match="newer than this"):
        newer.check()


# --- the benchmark ----------------------------------------------------------------------------

def test_import_times_lists_top_level_imports_by_cumulative_time() -> None:
    stderr = textwrap.dedent("""\
        import time: self [us] | cumulative | imported package
        import time:       100 |        100 |     numpy.core
        import time:       200 |        300 |   numpy
        import time:        50 |         50 | json
        import time:      1000 |       2000 | sqlalchemy
        some other line
    """)
    assert startup.import_times(stderr) == [("sqlalchemy", 1000, 2000), ("json", 50, 50)]


def test_summary_takes_medians_and_ratios_per_kind() -> None:
    def run(kind: str, wall: float, rss: float) -> dict:
        return {"kind": kind, "wall_s": wall, "peak_rss_mib": rss, "rss_open_mib": rss / 2,
                "to_open_s": wall / 2, "cpu_s": wall}  # fmt: skip

    runs = [run("ours", 3.0, 200), run("ours", 2.0, 180), run("ours", 9.0, 190),
            run("stock", 1.0, 100), run("stock", 1.0, 90)]  # fmt: skip
    summary = startup.summarize(runs)
    assert summary["ours"]["wall_s"] == {"median": 3.0, "min": 2.0, "max": 9.0}
    assert summary["ratio_ours_over_stock"]["wall_s"] == 3.0
    assert summary["ratio_ours_over_stock"]["peak_rss_mib"] == 190 / 95
    assert "wall s" in startup.table(summary)


def test_the_benchmark_runs_one_crawl_of_each(tmp_path, capsys) -> None:
    assert startup.main(["--runs", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "startup.json").read_text())
    kinds = sorted(r["kind"] for r in report["runs"])
    assert kinds == ["ours", "stock"]
    for r in report["runs"]:
        assert r["exit"] == 0 and r["pages"] >= 2 and r["items"] == 1
        assert 0 < r["to_open_s"] < r["wall_s"] and r["peak_rss_mib"] > 20
    assert "ours/stock" in capsys.readouterr().out


def test_the_summary_of_a_before_tree_has_its_ratios_and_column() -> None:
    def run(kind: str, wall: float) -> dict:
        return {"kind": kind, "wall_s": wall, "peak_rss_mib": 100 * wall, "rss_open_mib": 1.0,
                "to_open_s": wall / 2, "cpu_s": wall}  # fmt: skip

    runs = [run("stock", 1.0), run("before", 2.0), run("ours", 1.5)]
    summary = startup.summarize(runs)
    assert summary["ratio_before_over_stock"]["wall_s"] == 2.0
    assert summary["ratio_ours_over_before"]["wall_s"] == 0.75
    assert summary["ratio_ours_over_stock"]["peak_rss_mib"] == 1.5
    header = startup.table(summary).split("\n")[1].split()
    assert header == ["before", "ours", "stock", "ours/stock", "before/stock", "ours/before"]


def test_the_benchmark_runs_a_tree_given_as_before(tmp_path, monkeypatch) -> None:
    """``--before DIR``: ours from that tree (its working directory, first on PYTHONPATH),
    alternating with the other two; here that tree is the project under another path."""
    seen: list[tuple[str, str, str]] = []
    real = startup.run_child

    def spy(cmd, cwd, work, timeout, tree=None):
        seen.append((cmd[cmd.index("scrapy") + 1], str(cwd),
                     startup.tree_env(tree)["PYTHONPATH"].split(":")[0]))
        return real(cmd, cwd, work, timeout, tree)

    monkeypatch.setattr(startup, "run_child", spy)
    tree = tmp_path / "before"
    tree.symlink_to(ROOT, target_is_directory=True)
    assert startup.main(["--runs", "1", "--before", str(tree), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "startup.json").read_text())
    assert [r["kind"] for r in report["runs"]] == ["stock", "before", "ours"]
    assert all(r["exit"] == 0 and r["pages"] >= 2 and r["items"] == 1 for r in report["runs"])
    assert report["before_tree"] == str(tree) and "ratio_ours_over_before" in report["summary"]
    assert [s[0] for s in seen] == ["runspider", "crawl", "crawl"]
    assert seen[1][1:] == (str(tree), str(tree))  # before: its tree, first on the path
    assert seen[2][1:] == (str(ROOT), str(ROOT))


# --- a SQLite crawl never loads SQLAlchemy's PostgreSQL dialect --------------------------------

def test_a_sqlite_store_never_imports_the_postgresql_dialect(tmp_path) -> None:
    """Naming ``postgresql_where`` on the partial index imported the dialect (~25 ms, 2 MiB)
    into every SQLite crawl; its option is added when a PostgreSQL engine is made."""
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    out = run_python(f"""
        import sys
        from crawler.storage import Store
        with Store({url!r}) as store:
            crawl_id = store.start_crawl("web", ["http://a.test/"], {{}})
            doc = {{"url": "http://a.test/", "canonical_url": "http://a.test/", "title": "T",
                    "text": "x", "status": 200, "crawl_id": crawl_id,
                    "fetched_at": "2026-01-02T03:04:05Z"}}
            store.write_batch([doc], [])
            store.finish_crawl(crawl_id, "finished", {{}})
            print(store.count_documents(crawl_id),
                  any(m.startswith("sqlalchemy.dialects.postgresql") for m in sys.modules))
    """)
    assert out.split() == ["1", "False"]


def test_the_partial_index_gets_its_postgresql_where_with_a_postgresql_engine() -> None:
    out = run_python("""
        from sqlalchemy.schema import CreateIndex
        from crawler.storage import acquire_engine, parse_url, release_engine
        from crawler.storage.tables import distributed_job_index
        url = parse_url("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connected
        engine = acquire_engine(url)
        print(str(CreateIndex(distributed_job_index).compile(dialect=engine.dialect)).strip())
        release_engine(url)
    """)
    assert out.strip() == ("CREATE UNIQUE INDEX ux_crawls_distributed_job ON crawls (job) "
                           "WHERE command = 'distributed'")


def test_the_benchmark_compiles_the_projects_bytecode_first(tmp_path) -> None:
    """Stock Scrapy runs from the bytecode pip compiled; with PYTHONDONTWRITEBYTECODE ours was
    compiled from source in every child (bench.startup.compile_project)."""
    package = tmp_path / "crawler"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("X = 1\n")
    assert startup.compile_project(tmp_path)
    cached = {p.name.split(".")[0] for p in (package / "__pycache__").glob("*.pyc")}
    assert cached == {"__init__", "mod"}
    (package / "bad.py").write_text("def (:\n")
    assert not startup.compile_project(tmp_path)


# --- a one-page crawl, with a hook that runs after every other exit handler ---------------------

def crawl_one_page(tmp_path, at_exit: str, title: str) -> None:
    """``scrapy crawl web`` of a one-page site (``startup.PAGE_TEXT``) in a fresh interpreter
    that runs ``at_exit`` (Python source, indented as a function body) after every other exit
    handler; the crawl must exit 0."""
    from bench.crawl import child_env
    from crawler.sitegen.scripted import ScriptedWeb, html

    code = textwrap.dedent("""
        import atexit, gc, json, sys
        def record():  # registered first: runs after every other exit handler
        {body}
        atexit.register(record)
        from scrapy.cmdline import execute
        execute(["scrapy", *sys.argv[1:]])
    """).format(body=textwrap.indent(textwrap.dedent(at_exit).strip(), "    "))
    with ScriptedWeb() as web:
        site = web[0].serve({"/robots.txt": startup.ROBOTS, "/": html(title, startup.PAGE_TEXT)})
        done = subprocess.run(
            [sys.executable, "-c", code, "crawl", "web", "-a", f"urls={site.url}/",
             "-s", f"STORAGE_URL=sqlite:///{tmp_path / 'crawl.db'}",
             "-s", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}",
             "-s", f"LOG_FILE={tmp_path / 'crawl.log'}", "-s", "DOWNLOAD_DELAY=0"],
            cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


# --- the crawl's exit skips the interpreter's last collections --------------------------------

def test_a_crawl_exits_without_the_final_collection_and_keeps_its_data(tmp_path) -> None:
    """``scrapy crawl`` freezes the objects alive at exit (crawler.commands.crawl:
    skip_final_collection; ~0.25 s of a one-page crawl) after everything was written."""
    import sqlite3

    frozen = tmp_path / "frozen.txt"
    crawl_one_page(tmp_path, f"""
        with open({str(frozen)!r}, "w") as f:
            f.write(str(gc.get_freeze_count()))
    """, "Exit")
    assert int(frozen.read_text()) > 10_000  # the crawl's objects, not a handful
    with sqlite3.connect(tmp_path / "crawl.db") as db:
        assert db.execute("SELECT count(*) FROM documents").fetchone() == (1,)
        assert db.execute("SELECT finish_reason FROM crawls").fetchall() == [("finished",)]


# --- a small crawl never loads numpy ----------------------------------------------------------

def test_a_one_page_sqlite_crawl_imports_neither_numpy_nor_the_orm_nor_alembic(tmp_path) -> None:
    """numpy (~40 ms, ~11 MiB) is loaded by the first structure that needs it: a fingerprint
    past the first ``simhash.PURE_PAGES`` or a content index past ``simindex.SMALL_MAX``
    entries; a one-page crawl of an article-sized page (``startup.PAGE_TEXT``) needs none."""
    import sqlite3

    loaded = tmp_path / "loaded.json"
    crawl_one_page(tmp_path, f"""
        with open({str(loaded)!r}, "w") as f:
            json.dump([m for m in ("numpy", "sqlalchemy.orm", "alembic") if m in sys.modules]
                      + [m for m in sys.modules if m.startswith("numpy.")][:1], f)
    """, "Small")
    assert json.loads(loaded.read_text()) == []
    with sqlite3.connect(tmp_path / "crawl.db") as db:  # the page was stored, with its SimHash
        assert db.execute("SELECT count(*), count(simhash) FROM documents").fetchone() == (1, 1)

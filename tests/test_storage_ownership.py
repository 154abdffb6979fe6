"""crawler.storage.ownership (issue 23, item 7): another program's database is refused before
anything is written to it, a read-only one before the crawl starts; an empty database and one
of ours at an older revision still migrate. Real SQLite files, the real PostgreSQL server (a
scratch schema per test) and ``scrapy crawl`` run as a subprocess."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command as alembic_command

from crawler.storage import ForeignDatabaseError, StorageError, Store, migrations, parse_url
from tests.conftest import ROOT, crawl_command, fresh_pg_schema, run_crawl

DEAD_SEED = "http://127.0.0.1:9/"  # never fetched: the crawl must stop before it starts


def _sqlite_file(path: Path, *statements: str) -> Path:
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
    return path


def _places(tmp_path: Path) -> Path:
    """A browser history file: another program's tables and rows (rollback journal mode)."""
    return _sqlite_file(
        tmp_path / "places.sqlite",
        "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT, title TEXT)",
        "CREATE INDEX moz_places_url ON moz_places (url)",
        "INSERT INTO moz_places (url, title) VALUES ('https://example.org/', 'Example')",
    )


def _master(path: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    return rows


def _siblings(path: Path) -> set[str]:
    return {p.name for p in path.parent.iterdir()}


# --- another program's database ---------------------------------------------------------------

@pytest.mark.parametrize("create", [True, False])
def test_a_browser_history_file_is_refused_unchanged(tmp_path, create) -> None:
    path = _places(tmp_path)
    before, files = path.read_bytes(), _siblings(path)
    with Store(f"sqlite:///{path}", create=create) as store, \
            pytest.raises(ForeignDatabaseError) as info:
        store.check()
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "moz_places" in message
    assert "STORAGE_URL" in message and info.value.exit_code == 2
    assert path.read_bytes() == before  # not even the WAL switch of the header
    assert _siblings(path) == files  # no -wal, -shm or -journal left


def test_a_file_with_its_own_crawls_table_gets_no_alembic_version(tmp_path) -> None:
    path = _sqlite_file(tmp_path / "app.db",
                        "CREATE TABLE crawls (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
                        "INSERT INTO crawls (name) VALUES ('nightly')")
    master, before = _master(path), path.read_bytes()
    with Store(f"sqlite:///{path}") as store, pytest.raises(ForeignDatabaseError, match="crawls"):
        store.check()
    assert _master(path) == master  # before the fix: alembic_version was left behind
    assert path.read_bytes() == before


def test_a_stray_alembic_version_without_a_revision_is_still_foreign(tmp_path) -> None:
    # what the old code left in such a file: an empty alembic_version beside their tables
    path = _sqlite_file(tmp_path / "app.db", "CREATE TABLE crawls (id INTEGER PRIMARY KEY)",
                        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    with Store(f"sqlite:///{path}") as store, \
            pytest.raises(ForeignDatabaseError, match=r"\(crawls\)"):
        store.check()


@pytest.mark.parametrize("revision", ["abc123def", "0003"])
def test_another_alembic_managed_application_is_foreign(tmp_path, revision) -> None:
    # its own alembic_version row (a hex id, or one that looks like ours) without our tables:
    # it was taken for ours, switched to WAL and reported as "newer than dedup-crawler"
    path = _sqlite_file(tmp_path / "app.db", "CREATE TABLE users (id INTEGER PRIMARY KEY)",
                        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
                        f"INSERT INTO alembic_version VALUES ('{revision}')")
    before = path.read_bytes()
    with Store(f"sqlite:///{path}") as store, \
            pytest.raises(ForeignDatabaseError, match=r"\(users\)"):
        store.check()
    assert path.read_bytes() == before


def test_the_crawl_command_refuses_it_with_one_line_and_exit_2(tmp_path) -> None:
    path = _places(tmp_path)
    before = path.read_bytes()
    run = run_crawl(tmp_path / "run", urls=[DEAD_SEED], timeout=120,
                    settings={"STORAGE_URL": f"sqlite:///{path}"})
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert run.returncode == 2, run.stderr[-3000:]
    assert len(errors) == 1 and "not a crawl database" in errors[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert path.read_bytes() == before


@pytest.mark.postgres
def test_a_postgres_schema_of_another_program_is_refused_unchanged(pg_url) -> None:
    with fresh_pg_schema(pg_url, "test_foreign") as url:
        engine = sa.create_engine(parse_url(url))
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)"))
            conn.execute(sa.text("CREATE VIEW big_invoices AS SELECT * FROM invoices"))
        with Store(url) as store, pytest.raises(ForeignDatabaseError) as info:
            store.check()
        assert "big_invoices, invoices" in str(info.value) and "\n" not in str(info.value)
        assert sorted(sa.inspect(engine).get_table_names()) == ["invoices"]  # no alembic_version
        engine.dispose()


# --- ours: empty, or at an older revision ------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'crawl.db'}"
        return
    with fresh_pg_schema(request.getfixturevalue("pg_url"), "test_ownership") as url:
        yield url


def test_an_empty_database_migrates(db_url) -> None:
    with Store(db_url) as store:
        store.check()
        assert store.schema_revision() == migrations.head()


def test_a_database_of_ours_at_an_older_revision_migrates(db_url) -> None:
    engine = sa.create_engine(parse_url(db_url))
    with engine.begin() as conn:
        alembic_command.upgrade(migrations.alembic_config(conn), "0004")
    engine.dispose()
    with Store(db_url) as store:
        store.check()
        assert store.schema_revision() == migrations.head()


def test_an_empty_file_migrates(tmp_path) -> None:
    (tmp_path / "empty.db").touch()
    with Store(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        assert store.count_documents() == 0


# --- read-only ---------------------------------------------------------------------------------

def _ours(path: Path) -> Path:
    with Store(f"sqlite:///{path}") as store:
        store.check()
    return path


def read_only_url(path: Path) -> str:
    """A URL SQLite opens read-only for every user, root included (``chmod`` does not stop
    root; ``mode=ro`` does)."""
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def test_a_read_only_database_is_refused_for_writing_and_still_read(tmp_path) -> None:
    path = _ours(tmp_path / "crawl.db")
    with Store(read_only_url(path)) as store, pytest.raises(StorageError) as info:
        store.check()
    assert "is read-only" in str(info.value) and "\n" not in str(info.value)
    assert "readonly database" in str(info.value)
    with Store(read_only_url(path), create=False) as reader:  # review commands only read
        assert reader.count_documents() == 0


def test_a_read_only_empty_database_is_refused_with_the_same_line(tmp_path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with Store(read_only_url(path)) as store, pytest.raises(StorageError, match="is read-only"):
        store.check()
    assert path.read_bytes() == b""


def _as_a_plain_user() -> list[str]:
    """The command prefix that runs a process as a user without root's right to write anything:
    none when the tests are not root, else ``setpriv`` to ``nobody`` (skipped without it)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: chmod cannot make a file read-only")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # a checkout under a private directory (a clone in a mode-700 temporary directory) is out
    # of nobody's reach: the ?mode=ro tests cover the refusal there
    probe = subprocess.run([*prefix, sys.executable, "-c", "import scrapy, crawler"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this checkout's interpreter ({ROOT}): "
                    f"{probe.stderr.strip()[-200:]}")
    return prefix


@pytest.mark.parametrize("dir_mode", [0o777, 0o555], ids=["writable dir", "read-only dir"])
def test_a_crawl_into_a_file_its_user_may_not_write_stops_with_one_line(dir_mode) -> None:
    """The case users meet: a chmod 444 file (in a directory they may write or not), run
    through the real CLI by a user that is not root. Before: in a writable directory SQLite
    opened the file read-only and the crawl failed at its first write, with tracebacks."""
    prefix = _as_a_plain_user()
    home = Path(tempfile.mkdtemp(prefix="dedup-ro-"))  # pytest's tmp_path is root's, mode 700
    try:
        home.chmod(0o755)
        path = _ours(home / "crawl.db")
        path.chmod(0o444)
        before = path.read_bytes()
        out = home / "out"
        out.mkdir(mode=0o777)
        out.chmod(0o777)
        home.chmod(dir_mode)
        args = ["crawl", "web", "-a", f"urls={DEAD_SEED}", "-s", f"STORAGE_URL=sqlite:///{path}",
                "-s", f"DROPPED_LOG={out / 'dropped.jsonl'}", "-s",
                f"STATS_FILE={out / 'stats.json'}"]
        proc = subprocess.run([*prefix, *crawl_command(args)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "HOME": str(out)})
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert len(errors) == 1 and "is read-only" in errors[0], proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        assert path.read_bytes() == before
    finally:
        home.chmod(0o755)
        shutil.rmtree(home)


def test_the_crawl_command_stops_at_a_read_only_database_with_one_line(tmp_path) -> None:
    path = _ours(tmp_path / "crawl.db")
    run = run_crawl(tmp_path / "run", urls=[DEAD_SEED], timeout=120,
                    settings={"STORAGE_URL": read_only_url(path)})
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert run.returncode == 1, run.stderr[-3000:]
    assert len(errors) == 1 and "is read-only" in errors[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr and " ERROR: " not in run.stderr, run.stderr[-3000:]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM crawls").fetchone() == (0,)
    conn.close()


@pytest.mark.postgres
def test_a_read_only_postgres_database_is_refused(pg_url) -> None:
    with fresh_pg_schema(pg_url, "test_readonly") as url:
        with Store(url) as store:
            store.check()
        options = sa.make_url(url).query["options"]
        read_only = sa.make_url(url).update_query_dict(
            {"options": f"{options} -cdefault_transaction_read_only=on"})
        with Store(read_only) as store, pytest.raises(StorageError) as info:
            store.check()
        assert "is read-only" in str(info.value) and "read-only transaction" in str(info.value)
        with Store(read_only, create=False) as reader:
            assert reader.count_documents() == 0

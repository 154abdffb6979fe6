"""Schema migrations of the crawl database (alembic), shipped inside the package.

:func:`upgrade` is called by :meth:`crawler.storage.Store.check` on a connection inside a
transaction; no ``alembic.ini`` is needed. The version is kept in the ``alembic_version`` table.

The scripts are read from this package's resources, wherever it is installed
(:func:`script_location`): a checkout or a wheel is a real directory and is used in place; a
zipped egg (scrapyd) or any other importer is copied out once per process into a private
temporary directory (removed at exit), because alembic reads its scripts from files.

A fresh SQLite database is not migrated revision by revision: it gets the head schema from
:mod:`.sqlite_schema` (:func:`create_fresh_sqlite`), and a database already at the head is
recognized by one query (:func:`at_head`); alembic is imported only for the other cases.

For developers: ``python -m crawler.storage.migrations revision -m "why" [--autogenerate]
[--url URL]`` writes a new revision under ``crawler/storage/migrations/versions/``; then
``python -m crawler.storage.migrations sqlite-schema`` regenerates :mod:`.sqlite_schema` (until
then, fresh SQLite databases are migrated by alembic).
"""

from __future__ import annotations

import atexit
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from alembic.config import Config
    from sqlalchemy import Connection

logger = logging.getLogger(__name__)
_SKIPPED = ("__pycache__",)  # compiled files: alembic runs the .py sources
#: ``revision = "0011"`` / ``down_revision: str | None = None`` lines of a version script
_REVISION_LINE = re.compile(
    r"""^(revision|down_revision)(?:\s*:[^=\n]*)?\s*=\s*(?:["']([^"']+)["']|None)\s*$""",
    re.MULTILINE,
)
VERSION_TABLE = "alembic_version"


@cache
def _load_alembic() -> None:
    """Import alembic (once, when a database is first migrated, not with this module).

    Importing alembic registers its autogenerate plugins, each with an INFO line ("setup plugin
    alembic.autogenerate.schemas", ...): eight lines of noise at the top of every crawl log.
    They are logged once per process, at import, so the import runs with alembic's logger at
    WARNING.
    """
    with _quiet_alembic():
        import alembic.command
        import alembic.config
        import alembic.runtime.migration
        import alembic.script  # noqa: F401


# --- the cheap check: is the database at the head? (no alembic) ------------------------------


@cache
def head_revision() -> str | None:
    """The latest revision, read from the scripts' ``revision = "..."`` and ``down_revision =
    "..."`` lines without importing alembic; None (so :func:`at_head` says no and alembic
    decides) when a script is not in that simple form (a merge, two heads). Equal to
    :func:`head` (a test checks)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (Path(script_location()) / "versions").glob("*.py"):
        found = dict((m[1], m[2]) for m in _REVISION_LINE.finditer(script.read_text("utf-8")))
        if "revision" not in found:
            if script.name == "__init__.py":
                continue
            return None
        revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def recorded_revisions(connection: Connection) -> list[str]:
    """The revisions in the ``alembic_version`` table, sorted, read with one query (empty when
    the table does not exist); what :func:`current_revisions` answers, without alembic."""
    if not sa.inspect(connection).has_table(VERSION_TABLE):
        return []
    rows = connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()
    return sorted(rows)


def at_head(connection: Connection) -> bool:
    """True when the database records exactly the latest revision: nothing to migrate, and
    alembic is not imported. False for every other case (empty, older, newer, unknown), which
    :func:`upgrade` then handles."""
    latest = head_revision()
    return latest is not None and recorded_revisions(connection) == [latest]


@cache
def script_location() -> str:
    """The directory alembic reads the scripts from (see the module docstring).

    A zipped egg has no real directory: the tree is copied once per process into a
    ``dedup-crawler-migrations-*`` temporary directory that is removed when the process exits.
    """
    root = resources.files(__name__)
    if isinstance(root, Path) and (root / "env.py").is_file():
        return str(root)
    target = Path(tempfile.mkdtemp(prefix="dedup-crawler-migrations-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    _copy_tree(root, target)
    logger.debug("Migration scripts copied out of %s into %s", root, target)
    return str(target)


def _copy_tree(source: Traversable, target: Path) -> None:
    for entry in source.iterdir():
        if entry.name in _SKIPPED or entry.name.endswith((".pyc", ".pyo")):
            continue
        if entry.is_dir():
            (target / entry.name).mkdir()
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())


class SchemaTooNewError(Exception):
    """The database is at a revision this code does not know (written by a newer version)."""

    def __init__(self, revisions: list[str], head: str | None) -> None:
        self.revisions = revisions
        self.head = head
        super().__init__(f"unknown schema revision(s) {revisions}; latest known {head}")


# --- a fresh SQLite database: the head schema from one stored script (no alembic) ---------------


def sqlite_statements(connection: Connection) -> list[str]:
    """The statements that rebuild this SQLite database's schema: the SQL SQLite keeps for each
    table, index and view, in creation order (its own tables and automatic indexes left out)."""
    rows = connection.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"
        " AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY rowid")
    return [row[0] for row in rows]


def create_fresh_sqlite(connection: Connection) -> str | None:
    """Create the head schema on an empty SQLite database from :mod:`.sqlite_schema` and record
    the revision as alembic does; the revision, or None (nothing done, alembic migrates) when
    the database holds anything or the stored script is not the head's.

    What this saves: importing alembic and replaying every revision, about 0.2 s and 8 MiB of
    a one-page crawl's start-up (``python -m bench.startup``). The result is the same database
    (tests/test_startup.py compares every statement with what alembic builds).
    """
    from crawler.storage.migrations import sqlite_schema

    latest = head_revision()
    if latest is None or latest != sqlite_schema.REVISION:
        return None
    if connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar():
        return None
    logger.info("Migrating the crawl database from an empty schema to %s", latest)
    for statement in sqlite_schema.STATEMENTS:
        connection.exec_driver_sql(statement)
    connection.execute(sa.text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:rev)"),
                       {"rev": latest})  # fmt: skip
    return latest


def write_sqlite_schema(target: Path | None = None) -> Path:
    """Regenerate :mod:`.sqlite_schema` from a database alembic migrates to the head."""
    target = target or Path(__file__).with_name("sqlite_schema.py")
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        upgrade(conn)
        statements = sqlite_statements(conn)
    engine.dispose()
    body = "".join(f"    {statement!r},\n" for statement in statements)
    target.write_text(
        '"""The SQLite schema at revision ``REVISION``, as SQLite stores it: generated by\n'
        "``python -m crawler.storage.migrations sqlite-schema`` (do not edit). Read by\n"
        ":func:`crawler.storage.migrations.create_fresh_sqlite`, and only while ``REVISION`` is\n"
        'the head revision."""\n\n# ruff: noqa: E501\n\n'
        f"REVISION = {head_revision()!r}\n\nSTATEMENTS = (\n{body})\n",
        encoding="utf-8",
    )
    return target


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An alembic Config built in code; ``connection`` is used by env.py when given."""
    _load_alembic()
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", script_location().replace("%", "%%"))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str | None:
    """The latest revision this code knows (alembic's answer)."""
    _load_alembic()
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revisions(connection: Connection) -> list[str]:
    """Revisions recorded in the database (empty before the first migration)."""
    _load_alembic()
    from alembic.runtime.migration import MigrationContext

    with _quiet_alembic():
        return sorted(MigrationContext.configure(connection).get_current_heads())


def upgrade(connection: Connection) -> None:
    """Migrate to the latest revision; :class:`SchemaTooNewError` for an unknown revision."""
    _load_alembic()
    from alembic import command
    from alembic.script import ScriptDirectory

    cfg = alembic_config(connection)
    script = ScriptDirectory.from_config(cfg)
    current = set(current_revisions(connection))
    known = {rev.revision for rev in script.walk_revisions()}
    unknown = sorted(current - known)
    if unknown:
        raise SchemaTooNewError(unknown, script.get_current_head())
    if current != set(script.get_heads()):
        logger.info("Migrating the crawl database from %s to %s",
                    ", ".join(sorted(current)) or "an empty schema", script.get_current_head())
        with _quiet_alembic():
            command.upgrade(cfg, "head")


@contextmanager
def _quiet_alembic() -> Iterator[None]:
    """alembic logs its plugin setup and every step at INFO: noise in a crawl log."""
    alembic_logger = logging.getLogger("alembic")
    level = alembic_logger.level
    alembic_logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        alembic_logger.setLevel(level)


def main(argv: list[str]) -> int:
    """``python -m crawler.storage.migrations revision -m ...`` (developers)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m crawler.storage.migrations")
    sub = parser.add_subparsers(dest="cmd", required=True)
    rev = sub.add_parser("revision", help="write a new revision file")
    rev.add_argument("-m", "--message", required=True)
    rev.add_argument("--autogenerate", action="store_true")
    rev.add_argument("--url", default="sqlite:///:memory:", help="database to compare against")
    sub.add_parser("sqlite-schema", help="regenerate sqlite_schema.py (after a new revision)")
    args = parser.parse_args(argv)
    if args.cmd == "sqlite-schema":
        print(f"written: {write_sqlite_schema()}")
        return 0
    cfg = alembic_config(url=args.url)
    from alembic import command

    command.revision(cfg, message=args.message, autogenerate=args.autogenerate)
    return 0

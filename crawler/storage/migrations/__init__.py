"""Schema migrations of the crawl database (alembic), shipped inside the package.

:func:`upgrade` is called by :meth:`crawler.storage.Store.check` on a connection inside a
transaction; no ``alembic.ini`` is needed. The version is kept in the ``alembic_version`` table.

The scripts are read from this package's resources, wherever it is installed
(:func:`script_location`): a checkout or a wheel is a real directory and is used in place; a
zipped egg (scrapyd) or any other importer is copied out once per process into a private
temporary directory (removed at exit), because alembic reads its scripts from files.

For developers: ``python -m crawler.storage.migrations revision -m "why" [--autogenerate]
[--url URL]`` writes a new revision under ``crawler/storage/migrations/versions/``.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

# Importing alembic registers its autogenerate plugins, each with an INFO line ("setup plugin
# alembic.autogenerate.schemas", ...): eight lines of noise at the top of every crawl log. They
# are logged once per process, at import, so the import runs with alembic's logger at WARNING.
_ALEMBIC_LOGGER = logging.getLogger("alembic")
_ALEMBIC_LEVEL = _ALEMBIC_LOGGER.level
_ALEMBIC_LOGGER.setLevel(max(_ALEMBIC_LEVEL, logging.WARNING))
try:
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
finally:
    _ALEMBIC_LOGGER.setLevel(_ALEMBIC_LEVEL)

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from sqlalchemy import Connection

logger = logging.getLogger(__name__)
_SKIPPED = ("__pycache__",)  # compiled files: alembic runs the .py sources


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


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An alembic Config built in code; ``connection`` is used by env.py when given."""
    cfg = Config()
    cfg.set_main_option("script_location", script_location().replace("%", "%%"))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str | None:
    """The latest revision this code knows."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revisions(connection: Connection) -> list[str]:
    """Revisions recorded in the database (empty before the first migration)."""
    with _quiet_alembic():
        return sorted(MigrationContext.configure(connection).get_current_heads())


def upgrade(connection: Connection) -> None:
    """Migrate to the latest revision; :class:`SchemaTooNewError` for an unknown revision."""
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
    args = parser.parse_args(argv)
    command.revision(alembic_config(url=args.url), message=args.message,
                     autogenerate=args.autogenerate)
    return 0

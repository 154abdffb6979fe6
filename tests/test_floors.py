"""The three floors of the architecture hold (docs/architecture.md): walk every module's imports.

* **libraries** (the ground floor) import neither Scrapy nor Twisted nor any component or
  command: they are used and tested without a crawler;
* **components** wire the libraries into Scrapy and import no command;
* **commands** sit on top.

The floor of a module is declared in the tree, not kept here: its own ``__floor__``, else its
nearest package's (``crawler/__init__.py`` says how). Besides: every module has a floor, every
package's ``__init__`` says what it owns (a docstring), only
``crawler/storage/`` speaks SQL (SQLAlchemy, Alembic), and no module borrows another module's
private (underscore) name. Imports under ``if TYPE_CHECKING:`` are left out (they never run);
imports inside functions count (they do).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "crawler"
FRAMEWORK = ("scrapy", "twisted", "itemadapter", "scrapy_redis")
SQL = ("sqlalchemy", "alembic", "psycopg")

FLOORS = {"library": 0, "component": 1, "command": 2}


def _declared(path: Path) -> str | None:
    """The ``__floor__`` a module or package ``__init__`` assigns, or None."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__floor__" for target in node.targets
        ):
            assert isinstance(node.value, ast.Constant), f"{path}: __floor__ is not a literal"
            return str(node.value.value)
    return None


def _floor_of(path: Path) -> int:
    """The module's own ``__floor__``, else the nearest package's that declares one."""
    here = path
    while True:
        declared = _declared(here)
        if declared is not None:
            assert declared in FLOORS, f"{here}: __floor__ = {declared!r} is not one of {FLOORS}"
            return FLOORS[declared]
        package = here.parent if here.name != "__init__.py" else here.parent.parent
        here = package / "__init__.py"
        assert here.exists(), f"{path}: no __floor__ in it or any package above it"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _path(name: str) -> Path:
    path = PACKAGE.parent / name.replace(".", "/")
    if path.is_dir():
        return path / "__init__.py"
    source = path.with_suffix(".py")
    return source if source.exists() else path.with_suffix(".pyi")  # compiled: read its stub


def floor(name: str) -> int:
    """0 library, 1 component, 2 command: declared in the tree (module docstring)."""
    return _floor_of(_path(name))


class _Imports(ast.NodeVisitor):
    """``(module imported, names imported from it, line)`` of every import that runs."""

    def __init__(self, name: str, is_package: bool) -> None:
        self.package = name if is_package else name.rpartition(".")[0]
        self.found: list[tuple[str, list[str], int]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name, [], node.lineno) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - node.level + 1]
            module = ".".join([*base, module] if module else base)
        names = [alias.name for alias in node.names]
        self.found.append((module, names, node.lineno))
        for n in names:  # "from crawler import config": a module
            path = PACKAGE.parent / f"{module}.{n}".replace(".", "/")
            if path.is_dir() or path.with_suffix(".py").exists():
                self.found.append((f"{module}.{n}", [], node.lineno))


def _modules() -> dict[str, list[tuple[str, list[str], int]]]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "versions" in path.parts:  # migration scripts: storage's own, read by Alembic
            continue
        name = _module_name(path)
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        modules[name] = visitor.found
    return modules


MODULES = _modules()


def test_the_walk_sees_the_package() -> None:
    assert len(MODULES) > 60
    assert {floor(name) for name in MODULES} == {0, 1, 2}
    assert any(imported for imports in MODULES.values() for imported, _, _ in imports)


def _violations(rule) -> list[str]:
    found = []
    for name, imports in MODULES.items():
        for imported, names, line in imports:
            problem = rule(name, imported, names)
            if problem:
                found.append(f"{name}:{line} imports {imported} ({problem})")
    return found


def _upward(name: str, imported: str, _names: list[str]) -> str | None:
    if imported.split(".")[0] in FRAMEWORK and floor(name) == 0:
        return "a library imports the framework"
    if imported.startswith("crawler") and floor(imported) > floor(name):
        return f"floor {floor(name)} imports floor {floor(imported)}"
    return None


def _sql(name: str, imported: str, _names: list[str]) -> str | None:
    if imported.split(".")[0] in SQL and not _under(name, ("crawler.storage",)):
        return "SQL outside crawler.storage"
    return None


def _private(name: str, imported: str, names: list[str]) -> str | None:
    borrowed = [n for n in names if n.startswith("_") and not n.startswith("__")]
    if imported.startswith("crawler") and imported != name and borrowed:
        return f"private names {borrowed}"
    return None


@pytest.mark.parametrize("rule", [_upward, _sql, _private], ids=["floors", "sql", "private"])
def test_rule_holds(rule) -> None:
    assert _violations(rule) == []


def test_the_rules_catch_what_they_guard() -> None:
    """Each rule flags a made-up import that breaks it (so an empty list above means something)."""
    assert _upward("crawler.content.simhash", "scrapy.http", [])
    assert _upward("crawler.content.simhash", "crawler.pipelines.storage", [])
    assert _upward("crawler.spiders.web", "crawler.commands.crawl", [])
    assert not _upward("crawler.spiders.web", "crawler.urls.urlnorm", [])
    assert _sql("crawler.review", "sqlalchemy.orm", [])
    assert not _sql("crawler.storage.engine", "sqlalchemy", [])
    assert _private("crawler.review", "crawler.storage", ["_rows"])
    assert not _private("crawler.review", "crawler.storage", ["Store"])


def test_every_package_says_what_it_owns() -> None:
    packages = sorted(p for p in PACKAGE.rglob("__init__.py") if "versions" not in p.parts)
    assert len(packages) > 15
    silent = [str(p.relative_to(PACKAGE.parent)) for p in packages
              if not ast.get_docstring(ast.parse(p.read_text()))]  # fmt: skip
    assert silent == []


def test_floors_come_from_the_tree() -> None:
    """A module without its own ``__floor__`` takes its package's; one that declares differs."""
    assert floor("crawler.content.simhash") == 0  # the package: library
    assert floor("crawler.dedup.decider") == 1  # the package: component
    assert floor("crawler.dedup.settle") == 0  # its own: library
    assert floor("crawler.commands.preflight") == 2

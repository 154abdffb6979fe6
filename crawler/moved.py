"""Module paths that moved when the tree was grouped by concern (0.2): an old path still imports,
as the module at its new path, with one WARNING per old path naming the new one. Settings copied
from an older README (``crawler.progress.DedupProgress``, ``crawler.backends.scheduler...``) thus
keep working; the old paths go in 0.3.

:func:`install` (run by ``crawler/__init__.py``) puts a finder in ``sys.meta_path`` that answers
only for the names of :data:`MOVED` and the modules under them (``crawler.warc.capture`` is
``crawler.outputs.warc.capture``, the same module object).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from types import ModuleType

logger = logging.getLogger(__name__)

#: Old dotted path -> new dotted path (modules and packages).
MOVED: dict[str, str] = {
    "crawler.urlnorm": "crawler.urls.urlnorm",
    "crawler.linkrules": "crawler.urls.linkrules",
    "crawler.traps": "crawler.urls.traps",
    "crawler.scope": "crawler.urls.scope",
    "crawler.seeds": "crawler.urls.seeds",
    "crawler.pagebounds": "crawler.urls.pagebounds",
    "crawler.fingerprint": "crawler.urls.fingerprint",
    "crawler.text": "crawler.content.text",
    "crawler.tokens": "crawler.content.tokens",
    "crawler.simhash": "crawler.content.simhash",
    "crawler.simindex": "crawler.content.simindex",
    "crawler.template": "crawler.content.template",
    "crawler.setfp": "crawler.content.setfp",
    "crawler.preference": "crawler.dedup.preference",
    "crawler.overrides": "crawler.dedup.overrides",
    "crawler.settle": "crawler.dedup.settle",
    "crawler.pipelines.pages": "crawler.dedup.pages",
    "crawler.pipelines.hosts": "crawler.dedup.hosts",
    "crawler.pipelines.preferred": "crawler.dedup.preferred",
    "crawler.pipelines.soft404": "crawler.dedup.soft404",
    "crawler.pipelines.stored": "crawler.dedup.stored",
    "crawler.pipelines.outage": "crawler.dedup.outage",
    "crawler.pipelines.counts": "crawler.dedup.counts",
    "crawler.pipelines.drops": "crawler.dedup.drops",
    "crawler.jobstate": "crawler.state.jobstate",
    "crawler.journal": "crawler.state.journal",
    "crawler.atomicfile": "crawler.state.atomicfile",
    "crawler.droplog": "crawler.outputs.droplog",
    "crawler.formats": "crawler.outputs.formats",
    "crawler.warc": "crawler.outputs.warc",
    "crawler.feeds": "crawler.outputs.feeds",
    "crawler.statsfile": "crawler.extensions.statsfile",
    "crawler.progress": "crawler.extensions.progress",
    "crawler.politeness": "crawler.middlewares.politeness",
    "crawler.console": "crawler.commands.console",
    "crawler.preflight": "crawler.commands.preflight",
    "crawler.siteserver": "crawler.sitegen.server",
    "crawler.embed": "crawler.spiders.embed",
    "crawler.bloom": "crawler.backends.bloom",
    "crawler.backends.cluster": "crawler.cluster.worker",
    "crawler.backends.clusterstats": "crawler.cluster.stats",
    "crawler.backends.generation": "crawler.cluster.generation",
    "crawler.backends.heartbeat": "crawler.cluster.heartbeat",
    "crawler.backends.joincheck": "crawler.cluster.joincheck",
    "crawler.backends.lifecycle": "crawler.cluster.lifecycle",
    "crawler.backends.startlist": "crawler.cluster.startlist",
    "crawler.backends.frontier": "crawler.cluster.frontier",
    "crawler.backends.scheduler": "crawler.cluster.scheduler",
    "crawler.backends.serializer": "crawler.cluster.serializer",
}


def new_name(fullname: str) -> str | None:
    """The new path of ``fullname`` (a moved module, or a module under a moved package)."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at the new one."""

    def __init__(self) -> None:
        self.warned: set[str] = set()

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("crawler.") or new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        if spec.name not in self.warned:
            self.warned.add(spec.name)
            logger.warning("%s moved to %s: change the setting or import that names it (the "
                           "old path goes in 0.3; docs/architecture.md)", spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path is already executed."""


def install() -> None:
    """Add the finder once, first: a module under a moved package (``crawler.warc.capture``)
    would otherwise be found again by its parent's path and run a second time. It answers
    only for the old names, which no real module has."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())

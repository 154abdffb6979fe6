"""A CDXJ index beside each closed WARC file, and the crawl's WACZ package at the end.

:func:`write_cdxj` indexes one closed file with the ``cdxj-indexer`` library (Webrecorder's, the
indexer pywb and ``wacz`` use): ``NAME.warc.gz`` gets ``NAME.cdxj``, one line per ``response``,
``revisit`` and ``resource`` record (``warc-fields`` metadata records are left out, as pywb
does), keyed by SURT and timestamp, sorted, with ``url``, ``mime``, ``status``, ``digest``,
``length``, ``offset`` and ``filename``. The file appears whole or not at all
(:func:`crawler.state.atomicfile.write_atomic`). A file left ``NAME.warc.gz.open`` by a killed crawl
has none: ``cdxj-indexer NAME.warc.gz.open`` (it ships a command) indexes its whole records.

:class:`Packaging` runs the indexing in a child process when
:class:`crawler.outputs.warc.files.WarcFiles` closes a file (cdxj-indexer costs about 0.4 ms of CPU
per page archived, measured: not on the crawl's thread nor under its GIL), and at the end of
the crawl waits for them and, with ``WARC_WACZ``, writes the WACZ
(:func:`crawler.outputs.warc.wacz.write_wacz`). A failure is logged in one line and the crawl goes
on: the WARC file itself is complete.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from crawler.outputs.warc.files import EXTENSION
from crawler.state.atomicfile import write_atomic

if TYPE_CHECKING:
    from collections.abc import Callable

    from crawler.outputs.warc import WarcOptions
    from crawler.outputs.warc.files import WarcFiles

logger = logging.getLogger(__name__)

INDEX_EXTENSION = ".cdxj"
#: Index children running at once; a rotation beyond it waits for the oldest.
MAX_CHILDREN = 2


def index_path(warc: Path) -> Path:
    """``NAME.cdxj`` of ``NAME.warc.gz``."""
    name = warc.name.removesuffix(EXTENSION)
    return warc.with_name(name + INDEX_EXTENSION)


def cdxj_lines(warc: Path) -> str:
    """The sorted CDXJ index of ``warc`` (cdxj-indexer's default fields and records)."""
    with warnings.catch_warnings():  # its AMF parser imports pkg_resources: a UserWarning
        warnings.simplefilter("ignore", UserWarning)
        from cdxj_indexer.main import CDXJIndexer

    out = io.StringIO()
    CDXJIndexer(out, [str(warc)], sort=True).process_all()
    return out.getvalue()


def write_cdxj(warc: Path) -> Path:
    """Write ``NAME.cdxj`` beside ``warc`` (atomically); returns its path."""
    path = index_path(warc)
    write_atomic(path, cdxj_lines(warc))
    return path


class Packaging:
    """The indexes of the files ``files`` closes, and the WACZ at the end (module docstring).

    Each closed file (by rotation, and the last one when the crawl closes it) is indexed by
    a child process (``python -m crawler.outputs.warc.index FILE``: on the other core, never holding
    the crawl's GIL; at most :data:`MAX_CHILDREN` at once); :meth:`finish`, called once the
    last file is closed, waits for every child and writes the package, so the stats and the
    ``STATS_FILE`` written after it count them. ``title()`` names the crawl in the package
    (read at the end: the crawl id is known then).
    """

    def __init__(self, options: WarcOptions, files: WarcFiles, software: str,
                 title: Callable[[], str | None]) -> None:
        self.options = options
        self.files = files
        self.software = software
        self.title = title
        self.indexes: list[Path] = []
        self.packages: list[Path] = []
        self.failed: list[Path] = []
        self._children: list[tuple[Path, subprocess.Popen[bytes]]] = []

    def file_closed(self, path: Path, size: int) -> None:
        """``WarcFiles.on_close``: index the file in a child process."""
        if not self.options.cdxj:
            return
        while len(self._children) >= MAX_CHILDREN:
            self._reap(*self._children.pop(0))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        child = subprocess.Popen([sys.executable, "-m", __name__, str(path)], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)  # fmt: skip
        self._children.append((path, child))

    def finish(self) -> None:
        """Wait for every index, then write the WACZ (``WARC_WACZ``)."""
        children, self._children = self._children, []
        for path, child in children:
            self._reap(path, child)
        if self.options.wacz:
            self._package()

    def _reap(self, path: Path, child: subprocess.Popen[bytes]) -> None:
        _, err = child.communicate()
        if child.returncode == 0 and index_path(path).exists():
            self.indexes.append(index_path(path))
            return
        lines = err.decode("utf-8", "replace").strip().splitlines()
        self._failed(path, "index", RuntimeError(lines[-1] if lines else
                                                 f"exit status {child.returncode}"))

    def _package(self) -> None:
        from crawler.outputs.warc.wacz import wacz_path, write_wacz

        warcs = [p for p in self.files.closed_files if index_path(p) in self.indexes]
        if not warcs:
            return
        left_out = [p.name for p in self.files.closed_files if p not in warcs]
        if left_out:
            logger.error("The WACZ leaves out %d WARC file(s) whose index failed (%s): revisits "
                         "into them do not replay from it", len(left_out), ", ".join(left_out))
        target = wacz_path(self.options.directory, self.options.prefix, self.files.pid,
                           self.files.host)  # fmt: skip
        try:
            self.packages.append(write_wacz(target, warcs, [index_path(p) for p in warcs],
                                            self.software, self.title()))  # fmt: skip
        except Exception as exc:
            self._failed(target, "package", exc)

    def _failed(self, path: Path, what: str, exc: BaseException) -> None:
        self.failed.append(path)
        logger.error("WARC %s of %s failed (%s: %s); the WARC files are complete: run "
                     "cdxj-indexer on them", what, path, type(exc).__name__, exc)


def main(argv: list[str] | None = None) -> int:
    """``python -m crawler.outputs.warc.index FILE...``: write each file's CDXJ index (the crawl's
    child process; also a way to index files by hand). One line on stderr on failure."""
    names = sys.argv[1:] if argv is None else argv
    if not names:
        print("usage: python -m crawler.outputs.warc.index FILE.warc.gz [...]: "
              "writes FILE.cdxj beside "
              "each", file=sys.stderr)  # fmt: skip
        return 2
    for name in names:
        try:
            write_cdxj(Path(name))
        except Exception as exc:
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

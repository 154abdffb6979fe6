"""A CDXJ index beside each closed WARC file, and the crawl's WACZ package at the end.

:func:`write_cdxj` indexes one closed file with the ``cdxj-indexer`` library (Webrecorder's, the
indexer pywb and ``wacz`` use): ``NAME.warc.gz`` gets ``NAME.cdxj``, one line per ``response``,
``revisit`` and ``resource`` record (``warc-fields`` metadata records are left out, as pywb
does), keyed by SURT and timestamp, sorted, with ``url``, ``mime``, ``status``, ``digest``,
``length``, ``offset`` and ``filename``. The file appears whole or not at all
(:func:`crawler.atomicfile.write_atomic`). A file left ``NAME.warc.gz.open`` by a killed crawl
has none: ``cdxj-indexer NAME.warc.gz.open`` (it ships a command) indexes its whole records.

:class:`Packaging` runs the indexing on a thread when :class:`crawler.warc.files.WarcFiles`
closes a file by rotation (an index of a 1 GB file takes seconds: not on the reactor), and at
the end of the crawl waits for them and, with ``WARC_WACZ``, writes the WACZ
(:func:`crawler.warc.wacz.write_wacz`). A failure is logged in one line and the crawl goes on:
the WARC file itself is complete.
"""

from __future__ import annotations

import io
import logging
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from crawler.atomicfile import write_atomic
from crawler.warc.files import EXTENSION

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from crawler.warc import WarcOptions
    from crawler.warc.files import WarcFiles

logger = logging.getLogger(__name__)

INDEX_EXTENSION = ".cdxj"


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

    A file closed by rotation is indexed on a worker thread (one: indexes are written in
    order); :meth:`finish`, called once the last file is closed, waits for them and writes the
    package, so the stats and the ``STATS_FILE`` written after it count them. ``title()``
    names the crawl in the package (read at the end: the crawl id is known then).
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
        self._work: list[tuple[Path, Future[Path]]] = []
        self._threads: ThreadPoolExecutor | None = None

    def file_closed(self, path: Path, size: int) -> None:
        """``WarcFiles.on_close``: index the file on the worker thread."""
        if not self.options.cdxj:
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(1, thread_name_prefix="warc-index")
        self._work.append((path, self._threads.submit(write_cdxj, path)))

    def finish(self) -> None:
        """Wait for every index, then write the WACZ (``WARC_WACZ``)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        for path, work in self._work:
            try:
                self.indexes.append(work.result())
            except Exception as exc:
                self._failed(path, "index", exc)
        self._work = []
        if self.options.wacz:
            self._package()

    def _package(self) -> None:
        from crawler.warc.wacz import wacz_path, write_wacz

        warcs = [p for p in self.files.closed_files if index_path(p) in self.indexes]
        if not warcs:
            return
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

"""``scrapy export``: the pages a crawl stored, as a feed written from storage.

::

    scrapy export -o pages.jsonl [--db URL] [--crawl ID | --job [JOB]] [--worker ID]
                  [--format jsonlines|json|csv|xml]

A feed given to ``scrapy crawl`` (``-o``, ``FEEDS``) is written by the process that crawls,
from storage when it closes (:mod:`crawler.outputs.feeds.stored`): in a distributed crawl every
worker writes its own pages, and a page a later ``scrapy settle`` stores again is in no such feed.
This command writes the crawl's stored set, read from storage whenever it is run: the pages
the crawl stored (its ``crawl_documents`` rows, the set its fingerprints are sums of), each as
its ``documents`` row holds it now, as ``scrapy crawl -o`` writes them with storage on
(:mod:`crawler.outputs.feeds.rows`: the fields of :data:`crawler.items.EXPORT_FIELDS`,
``fingerprint_text`` computed from the exported pages' texts; SimHash as 16 hex digits, times
ISO 8601 UTC). No HTML: storage keeps none.

Which crawl, as ``dedupreport`` picks it (:func:`crawler.review.select_crawls`): the latest,
a distributed crawl whole (its own row's set), ``--worker`` one worker of it, ``--crawl ID``,
``--job`` the runs of a JOBDIR job. The format follows ``--format``, else the file's
extension (``.jsonl``/``.jl`` JSON Lines, ``.json``, ``.csv``, ``.xml``), else JSON Lines.
Rows are streamed (the file is written to a temp file, then renamed: a reader never sees half
a feed); ``-o -`` writes to stdout (on a terminal with control characters shown escaped; a
pipe gets the feed unchanged). The line on stderr says what was picked and how many
pages were written.

Exit status 1 when the database is missing or empty or the crawl has no pages; 2 for bad
options.
"""

from __future__ import annotations

import codecs
import io
import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands.console import quiet_stdout, with_safe_output

if TYPE_CHECKING:
    import argparse

    from crawler.review import CrawlDB

FORMATS = {".jsonl": "jsonlines", ".jl": "jsonlines", ".json": "json", ".csv": "csv",
           ".xml": "xml"}
EXPORTERS = {"jsonlines": "JsonLinesItemExporter", "json": "JsonItemExporter",
             "csv": "CsvItemExporter", "xml": "XmlItemExporter"}


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return ("-o FILE [--db URL] [--crawl ID | --job [JOB]] [--worker ID] "
                "[--format jsonlines|json|csv|xml]")

    def short_desc(self) -> str:
        return "Write the pages a crawl stored (a distributed crawl whole) as a feed"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Export")
        group.add_argument("-o", "--output", metavar="FILE", required=True,
                           help="the feed file ('-': stdout)")
        group.add_argument("--db", metavar="URL", help="crawl database (default STORAGE_URL)")
        group.add_argument("--crawl", type=int, metavar="ID", help="crawl id (default: latest)")
        group.add_argument("--job", nargs="?", const="", metavar="JOB",
                           help="every run of a JOBDIR job as one (default JOB: the latest)")
        group.add_argument("--worker", metavar="ID", help="one worker of a distributed crawl")
        group.add_argument("--format", choices=sorted(EXPORTERS),
                           help="default: from the file's extension, else jsonlines")

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from crawler.commands.preflight import check_typos

        check_typos(self.settings)
        if args:
            raise UsageError(f"unexpected argument {args[0]!r}", print_help=False)
        if opts.crawl is not None and opts.job is not None:
            raise UsageError("--crawl and --job each pick the crawls to export; give one",
                             print_help=False)
        from crawler import review

        assert self.settings is not None
        fmt = opts.format or FORMATS.get(Path(opts.output).suffix.lower(), "jsonlines")
        db_url = opts.db or self.settings.get("STORAGE_URL") or "sqlite:///crawl.db"
        try:
            with review.CrawlDB.open(db_url, [self.settings.get("STORAGE_URL")]) as db:
                db.require_content()
                job = review.LATEST_JOB if opts.job == "" else opts.job
                picked = db.select(opts.crawl, job, opts.worker)
                print(picked.note.replace("report of", "export of", 1), file=sys.stderr)
                owners = [picked.distributed] if picked.distributed else picked.crawl_ids
                with _target(opts.output) as out:
                    count = write_feed(db, owners, fmt, out)
        except review.ReviewError as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        except BrokenPipeError:
            quiet_stdout()
            return
        except OSError as exc:
            print(f"error: cannot write {opts.output}: {exc.strerror or exc}", file=sys.stderr)
            self.exitcode = 1
            return
        where = "stdout" if opts.output == "-" else opts.output
        print(f"wrote {where}: {count} stored pages of {picked.label} ({fmt})", file=sys.stderr)


@contextmanager
def _target(output: str) -> Iterator[IO[bytes]]:
    """A binary stream to write to: stdout (on a terminal through :class:`TerminalBytes`), or
    a temp file renamed over ``output`` once complete (removed on any error)."""
    if output == "-":
        if sys.stdout.isatty():
            yield cast("IO[bytes]", TerminalBytes(sys.stdout))
        else:
            yield sys.stdout.buffer
        sys.stdout.flush()
        return
    path = Path(output)
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class TerminalBytes(io.RawIOBase):
    """A binary stream onto a terminal: the UTF-8 feed written to it goes to ``text`` (the
    command's stdout, which shows control characters escaped: :func:`crawler.commands.console.
    safe_output`), so a feed printed on a terminal cannot drive it; a file or a pipe gets
    the feed's bytes unchanged."""

    def __init__(self, text: IO[str]) -> None:
        super().__init__()
        self.text = text
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.text.write(self.decoder.decode(bytes(data)))
        return len(data)


def write_feed(db: CrawlDB, owners: list[int], fmt: str, out: IO[bytes]) -> int:
    """Export the stored pages of crawls ``owners`` (their ``crawl_documents`` rows; the
    ``documents`` rows of those crawls in a database older than revision 0005) to ``out``, as
    ``scrapy crawl -o`` writes them (:func:`crawler.outputs.feeds.rows.stored_items`); returns how
    many."""
    from scrapy import exporters

    from crawler.items import EXPORT_FIELDS
    from crawler.outputs.feeds.rows import stored_items

    exporter = getattr(exporters, EXPORTERS[fmt])(out, fields_to_export=list(EXPORT_FIELDS))
    exporter.start_exporting()
    count = 0
    for item in stored_items(db, owners):
        exporter.export_item(item)
        count += 1
    exporter.finish_exporting()
    return count

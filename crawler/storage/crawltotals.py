"""What the database holds of one distributed crawl: ``scrapy crawlstatus``'s storage totals.

A distributed crawl's ``crawls`` rows share its id in ``job`` (the worker rows, and from
revision 0010 the one ``distributed`` row above them); its pages and drops point at the worker
rows. :func:`crawl_totals` gives the pages the crawl stored as its own row records them (its
``url_count``: its ``crawl_documents`` rows, which a later crawl never changes) and the
``dropped`` rows whose ``crawl_id`` is in ``SELECT id FROM crawls WHERE job = <crawl id>``:
read-only, tables reflected. Before revision 0010 the pages are the ``documents`` rows its
workers wrote last (a page stored again by a later crawl moves to that crawl: the count could
fall to 0 when the same web was crawled again into the database).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from crawler.storage.reader import ReaderBase
from crawler.vocab import DISTRIBUTED


@dataclass(frozen=True)
class CrawlTotals:
    crawls: int  # crawls rows with this job (the workers', and the distributed row)
    documents: int
    dropped: int


class TotalsReader(ReaderBase):
    """A crawl database opened for :func:`crawl_totals` (:meth:`ReaderBase.open`)."""

    def totals(self, job: str) -> CrawlTotals:
        if self.crawls is None or "job" not in self.crawls.c:
            return CrawlTotals(0, 0, 0)
        c = self.crawls.c
        ids = sa.select(c.id).where(c.job == job)
        crawls = self._scalar(sa.select(sa.func.count()).select_from(ids.subquery()))
        documents = None
        if "url_count" in c and "command" in c:  # the crawl's own row: what it stored
            documents = self._scalar(sa.select(c.url_count).where(
                c.job == job, c.command == DISTRIBUTED))
        if documents is None:  # before revision 0010: the rows its workers wrote last
            documents = self._scalar(sa.select(sa.func.count()).select_from(self.documents)
                                     .where(self.documents.c.crawl_id.in_(ids)))  # fmt: skip
        dropped = self._scalar(sa.select(sa.func.count()).select_from(self.dropped_table)
                               .where(self.dropped_table.c.crawl_id.in_(ids)))  # fmt: skip
        return CrawlTotals(int(crawls or 0), int(documents or 0), int(dropped or 0))


def crawl_totals(db_url: str, job: str, known: tuple[str | None, ...] = ()) -> CrawlTotals:
    """The storage totals of crawl ``job`` in the database at ``db_url`` (a URL or SQLite path;
    masked URLs resolved from ``known``); :class:`crawler.storage.ReviewError` (one line)
    when it cannot be read."""
    with TotalsReader.open(db_url, known) as reader:
        return reader.totals(job)

""":class:`CrawlDB`: a crawl database opened for review, read as drop records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.review.records import DropFilter, DropRecord, apply_filter
from crawler.storage import PageReader
from crawler.storage.overrides import OverrideReader

if TYPE_CHECKING:
    from crawler.review.selection import Selection


class CrawlDB(OverrideReader, PageReader):
    """Read access to a crawl database (tables reflected, nothing created).

    Use :meth:`open`, which checks the URL, the file and the tables and raises
    :class:`crawler.storage.ReviewError` with a one-line message naming the database (password
    masked). The queries are :class:`crawler.storage.PageReader`'s, the overrides and reviews
    :class:`crawler.storage.overrides.OverrideReader`'s.
    """

    def dropped(self, flt: DropFilter | None = None) -> list[DropRecord]:
        """Drop records newest first, filtered (reason, crawl and distance in SQL)."""
        flt = flt or DropFilter()
        rows = self.drop_rows(reason=flt.reason, crawl_id=flt.crawl_id,
                              min_distance=flt.min_distance, max_distance=flt.max_distance,
                              limit=flt.sql_limit(), crawl_ids=flt.crawl_ids, rule=flt.rule)
        return apply_filter((DropRecord.from_row(row) for row in rows), flt)

    def select(self, crawl_id: int | None = None, job: str | None = None,
               worker: str | None = None) -> Selection:
        """The crawls a command reports: see :func:`crawler.review.selection.select_crawls`."""
        from crawler.review.selection import select_crawls

        return select_crawls(self, crawl_id, job, worker)

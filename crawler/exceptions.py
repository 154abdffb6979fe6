"""The Scrapy exception of a duplicate page: :class:`DuplicatePage`.

What a drop *is* (its reason, the kept page, the distance...) is the plain value
:class:`crawler.vocab.Drop`, importable without Scrapy; this exception only carries one through
Scrapy's item pipeline (``process_item`` raises it, the ``item_dropped`` signal hands it on).
"""

from __future__ import annotations

from scrapy.exceptions import DropItem

from crawler.vocab import Drop

__all__ = ["DuplicatePage"]


class DuplicatePage(DropItem):
    """A page dropped because it duplicates one already kept: ``drop`` says why.

    Its fields are read on the drop (``exc.drop.duplicate_of``); the message is
    ``str(drop)``.
    """

    def __init__(self, drop: Drop) -> None:
        self.drop = drop
        super().__init__(str(drop))

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

    The fields of the drop read as attributes too (``exc.url``, ``exc.reason``,
    ``exc.duplicate_of``, ``exc.distance``, ``exc.simhash``, ``exc.duplicate_simhash``,
    ``exc.content_hash``, ``exc.rule``); the message is ``str(drop)``.
    """

    def __init__(self, drop: Drop) -> None:
        self.drop = drop
        super().__init__(str(drop))

    @property
    def url(self) -> str:
        return self.drop.url

    @property
    def reason(self) -> str:
        return self.drop.reason

    @property
    def duplicate_of(self) -> str:
        return self.drop.duplicate_of

    @property
    def distance(self) -> int:
        return self.drop.distance

    @property
    def simhash(self) -> int | None:
        return self.drop.simhash

    @property
    def duplicate_simhash(self) -> int | None:
        return self.drop.duplicate_simhash

    @property
    def content_hash(self) -> str | None:
        return self.drop.content_hash

    @property
    def rule(self) -> str | None:
        return self.drop.rule

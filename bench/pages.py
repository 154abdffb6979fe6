"""The page-set model of the quality bench: labelled pages and their fetch order.

A :class:`PageSet` is what :mod:`bench.corpora` builds and :mod:`bench.pipeline_eval` feeds
through the pipeline: pages with absolute URLs (``scheme://host:port/path``), their HTML and
their duplicate group. A *group* is an original and the pages planted as its duplicates; its id
is the original's URL (or any string shared by its members). A page without a group is distinct:
dropping it, or dropping anything as its duplicate, is a wrong drop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: ``SetPage.kind`` values: an original or distinct page, a near-duplicate mirror (or
#: syndicated copy), a byte-exact copy.
KINDS = ("page", "mirror", "copy")


@dataclass(frozen=True)
class SetPage:
    url: str
    html: str
    group: str | None = None
    kind: str = "page"


@dataclass
class PageSet:
    """A set's pages; ``order``: a fixed fetch order (indexes into ``pages``), else seeded
    shuffle (:func:`fetch_order`); ``built``: how the set was made, for the report."""

    name: str
    pages: list[SetPage]
    built: str
    order: list[int] | None = None

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for page in self.pages:
            if page.url in seen:
                raise ValueError(f"set {self.name}: two pages at {page.url}")
            seen.add(page.url)

    def fetch_order(self, seed: int) -> list[int]:
        return self.order if self.order is not None else fetch_order(len(self.pages), seed)


def fetch_order(n: int, seed: int) -> list[int]:
    """A seeded shuffle of ``range(n)``: mirrors may come before their original."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order

"""A fetch-order shaker for order-free tests: a spider middleware that gives every request the
spider yields a random priority (seeded by the ``ORDER_PRIORITY_SEED`` environment variable),
so the scheduler hands pages out in an order no other run shares."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from typing import Any

from scrapy import Request


class RandomPriority:
    """Spider middleware: random request priorities (``ORDER_PRIORITY_SEED``)."""

    def __init__(self) -> None:
        self.rng = random.Random(int(os.environ.get("ORDER_PRIORITY_SEED", "0")))

    async def process_spider_output(self, response: Any, result: AsyncIterator[Any],
                                    spider: Any = None) -> AsyncIterator[Any]:
        async for entry in result:
            if isinstance(entry, Request):
                entry.priority = self.rng.randint(-50, 50)
            yield entry

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for entry in start:
            if isinstance(entry, Request):
                entry.priority = self.rng.randint(-50, 50)
            yield entry

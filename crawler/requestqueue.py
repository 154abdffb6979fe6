"""Requests as the queues store them, without Scrapy's scan of the spider.

Scrapy serializes a queued request with ``Request.to_dict(spider=...)``, which names the
callback and errback by scanning the spider with ``inspect.getmembers`` for every request:
~50 µs a request, a fifth of the crawl's CPU while a large site's links are being discovered
(py-spy of the first 5,000 pages of a 10^6-page crawl: 386,000 requests queued).
:func:`request_dict` names them directly. It is used by the shared frontier
(:mod:`crawler.cluster.frontier`) and by the ``JOBDIR`` disk queues below, the local profile's
``SCHEDULER_DISK_QUEUE``.
"""

from __future__ import annotations

__floor__ = "component"

from typing import Any

from scrapy import Request, Spider, squeues


def request_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, the callback and errback named without scanning the
    spider. A callback that is not a method of ``spider`` under its own name goes Scrapy's way
    (which names it, or raises Scrapy's ``ValueError``)."""
    names: list[Any] = []
    for func in (request.callback, request.errback):
        if not callable(func):
            names.append(func)
            continue
        owner, name = getattr(func, "__self__", None), getattr(func, "__name__", "")
        bound = getattr(spider, name, None) if owner is not None and owner is spider else None
        if bound is None or getattr(bound, "__func__", None) is not getattr(func, "__func__", 0):
            return request.to_dict(spider=spider)
        names.append(name)
    data = {"url": request.url, "callback": names[0], "errback": names[1],
            "headers": dict(request.headers)}  # fmt: skip
    for attr in request.attributes:
        data.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return data


class PickleLifoDiskQueue(squeues.PickleLifoDiskQueue):  # type: ignore[misc,valid-type]
    """Scrapy's ``PickleLifoDiskQueue`` (the same files, the same pickles), each request's
    dict made by :func:`request_dict`."""

    def push(self, request: Request) -> None:
        # past Scrapy's request wrapper (which would call to_dict) to the queue that pickles
        super(squeues.PickleLifoDiskQueue, self).push(  # type: ignore[misc]
            request_dict(request, self.spider)
        )


class PickleFifoDiskQueue(squeues.PickleFifoDiskQueue):  # type: ignore[misc,valid-type]
    """Scrapy's ``PickleFifoDiskQueue`` with :func:`request_dict` (the breadth-first order
    Scrapy's documentation sets with ``DEPTH_PRIORITY = 1``)."""

    def push(self, request: Request) -> None:
        super(squeues.PickleFifoDiskQueue, self).push(  # type: ignore[misc]
            request_dict(request, self.spider)
        )

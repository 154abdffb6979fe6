"""The per-host limit on requests in flight holds with ``DOWNLOAD_DELAY=0`` too
(:class:`crawler.middlewares.politeness.PoliteDownloader`).

Scrapy 2.19's downloader counted a request against its host's ``CONCURRENT_REQUESTS_PER_DOMAIN``
only once its download task ran, so with no delay a host's whole queue left at once: up to
``CONCURRENT_REQUESTS`` requests in flight to one host, and a TCP connection opened and closed
for most of them (the pool keeps as many idle connections as the per-host limit). Real ``scrapy
crawl web`` runs against sites of the scripted web on 127.0.0.1 that answer each page after a
pause and count the requests they are answering at once and the connections they accepted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from crawler.sitegen.scripted import NOT_FOUND, Answer, Request, ScriptedSite, ScriptedWeb, html
from tests.conftest import CrawlRun, run_crawl

PAGES = 24
PAUSE = 0.03  # seconds each page takes to answer: requests sent together overlap at the site
NAMES = ("heron", "otter", "falcon")  # one per site


def _script(site: ScriptedSite, name: str) -> ScriptedSite:
    """A home page linking to ``PAGES`` pages, each answered after ``PAUSE``, its words its own
    (``name`` and path: no page duplicates another); no robots.txt."""

    def answer(request: Request) -> Answer:
        if request.target == "/robots.txt":
            return NOT_FOUND
        time.sleep(PAUSE)
        words = f"{name} {request.target.strip('/') or 'home'}"
        if request.target == "/":
            return html(words, f"the home page of {words} " * 3, [f"/p{i}" for i in range(PAGES)])
        return html(words, f"{words} tells its own story, {words} and nothing else " * 3)

    return site.script(answer)


def _crawl(tmp_path: Path, sites: list[ScriptedSite], **settings: Any) -> CrawlRun:
    run = run_crawl(tmp_path / "run", urls=[s.url + "/" for s in sites], timeout=120,
                    settings={"DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS": 16,
                              "TRAP_SOFT404_PROBE": False, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    return run


@pytest.mark.parametrize("per_host", [1, 3])
def test_a_host_never_has_more_requests_in_flight_than_its_limit(
    scripted: ScriptedWeb, tmp_path: Path, per_host: int
) -> None:
    """16 requests allowed overall, ``per_host`` to the one host: the site never answers more
    than ``per_host`` at once, does answer that many (the limit is used), and every page comes
    over the connections the limit allows (kept alive: none opened per request)."""
    site = _script(scripted[0], NAMES[0])
    run = _crawl(tmp_path, [site], CONCURRENT_REQUESTS_PER_DOMAIN=per_host)
    pages = {r.target for r in site.log()} - {"/robots.txt"}
    assert len(pages) == PAGES + 1
    assert run.stats["response_received_count"] == PAGES + 2  # and robots.txt
    assert site.peak_in_flight == per_host
    assert site.connections <= per_host + 1  # + robots.txt's, asked before the pages


def test_each_host_keeps_its_own_limit_while_the_crawl_uses_them_together(
    scripted: ScriptedWeb, tmp_path: Path
) -> None:
    """Three hosts, 2 requests each at most, 16 overall, seeded in two orders: no host ever has
    more than 2 in flight, each reaches 2, and the hosts are crawled side by side (requests to
    different hosts in flight at the same time)."""
    sites = list(scripted.sites)
    assert len(sites) == 3
    for order in (sites, sites[::-1]):
        scripted.reset()
        for site, name in zip(sites, NAMES, strict=True):
            _script(site, name)
        _crawl(tmp_path / str(order[0].port), order, CONCURRENT_REQUESTS_PER_DOMAIN=2)
        for site in sites:
            assert len({r.target for r in site.log()} - {"/robots.txt"}) == PAGES + 1
            assert site.peak_in_flight == 2, site.url
            assert site.connections <= 3, site.url
        spans = [(min(r.at for r in s.log()), max(r.at for r in s.log())) for s in sites]
        assert max(start for start, _ in spans) < min(end for _, end in spans)  # overlapping

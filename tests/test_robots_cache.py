"""robots.txt parsers kept for at most ``ROBOTSTXT_CACHE_HOSTS`` hosts, the least recently asked
forgotten first (:class:`crawler.middlewares.robots.StrictRobotsTxtMiddleware`): a forgotten host
fetches its robots.txt again when asked again, and obeys it. Real ``scrapy crawl web`` runs
against three scripted sites on 127.0.0.1 that disallow ``/private`` and link to each other, so
the crawl comes back to each host after the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawler.sitegen.scripted import Answer, Request, ScriptedSite, ScriptedWeb, html
from tests.conftest import CrawlRun, run_crawl

NAMES = ("heron", "otter", "falcon")
ROBOTS = Answer(200, "User-agent: *\nDisallow: /private\n", content_type="text/plain")


def _script(sites: list[ScriptedSite]) -> None:
    """Each site: a home page linking to its ``/a``, its ``/private`` and the other sites'
    ``/b``; ``/a`` and ``/b`` link to ``/private`` too; every page's words its own."""
    for site, name in zip(sites, NAMES, strict=True):
        others = [s.url + "/b" for s in sites if s is not site]

        def answer(request: Request, name: str = name, others: list[str] = others) -> Answer:
            if request.target == "/robots.txt":
                return ROBOTS
            words = f"{name} {request.target.strip('/') or 'home'}"
            links = ["/a", "/private", *others] if request.target == "/" else ["/private"]
            return html(words, f"{words} has a story of its own, {words} alone " * 3, links)

        site.script(answer)


def _crawl(tmp_path: Path, seeds: list[ScriptedSite], **settings: Any) -> CrawlRun:
    run = run_crawl(tmp_path / "run", urls=[s.url + "/" for s in seeds], timeout=120,
                    settings={"TRAP_SOFT404_PROBE": False, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stats["finish_reason"] == "finished"
    return run


@pytest.mark.parametrize("order", ["heron-otter-falcon", "falcon-otter-heron"])
def test_a_forgotten_host_fetches_its_robots_txt_again_and_obeys_it(
    scripted: ScriptedWeb, tmp_path: Path, order: str
) -> None:
    """One parser kept, three hosts crawled by turns, one request at a time, in two seed
    orders: hosts are forgotten and their robots.txt fetched again, and no ``/private`` is
    ever fetched; every allowed page is."""
    sites = list(scripted.sites)
    _script(sites)
    seeds = sorted(sites, key=lambda s: order.split("-").index(NAMES[sites.index(s)]))
    run = _crawl(tmp_path, seeds, ROBOTSTXT_CACHE_HOSTS=1, CONCURRENT_REQUESTS=1)
    for site in sites:
        assert {"/", "/a", "/b"} <= site.paths(), site.url
        assert "/private" not in site.paths(), site.url
    fetches = sum(site.hits["/robots.txt"] for site in sites)
    assert run.stats["robotstxt/forgotten"] >= 1
    assert fetches > len(sites)  # some host asked again after it was forgotten
    assert run.stats["robotstxt/request_count"] == fetches


@pytest.mark.parametrize("cache", [{}, {"ROBOTSTXT_CACHE_HOSTS": 0}, {"ROBOTSTXT_CACHE_HOSTS": 3}])
def test_with_room_for_every_host_each_robots_txt_is_fetched_once(
    scripted: ScriptedWeb, tmp_path: Path, cache: dict[str, int]
) -> None:
    """The default (10,000), 0 (every host) and exactly the three hosts."""
    sites = list(scripted.sites)
    _script(sites)
    run = _crawl(tmp_path, sites, CONCURRENT_REQUESTS=1, **cache)
    assert [site.hits["/robots.txt"] for site in sites] == [1, 1, 1]
    assert "robotstxt/forgotten" not in run.stats
    for site in sites:
        assert {"/", "/a", "/b"} <= site.paths() and "/private" not in site.paths()

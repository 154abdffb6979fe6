"""Traps that end by themselves (issue 15, item 1): each hostile site below is crawled by a real
``scrapy crawl web`` against a site of the scripted web (:mod:`crawler.sitegen.scripted`) on
127.0.0.1, with a safety stop far above what the crawl should need; the crawl must end by itself
(``finished``) well under it."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from crawler.sitegen.scripted import Answer, ScriptedSite, ScriptedWeb
from crawler.sitegen.text import TextMaker
from tests.conftest import ROOT, CrawlRun, run_crawl

#: Safety stop of every crawl here (requests): the traps below never end without the guards.
SAFETY_PAGES = 1500


@pytest.fixture
def serve(scripted: ScriptedWeb) -> Callable[[Callable[[str], Answer]], ScriptedSite]:
    """``serve(handler)``: a site answering ``handler(path_and_query)``, robots.txt a 404."""

    def start(handler: Callable[[str], Answer]) -> ScriptedSite:
        site = scripted[0].route("/robots.txt", Answer(404))
        return site.script(lambda request: handler(request.target))

    return start


def fetches(site: ScriptedSite) -> int:
    """Page requests the site answered (robots.txt left out)."""
    return sum(n for path, n in site.hits.items() if path != "/robots.txt")


def _texts(count: int, seed: int = 7) -> list[str]:
    """``count`` distinct article texts (far apart in SimHash terms)."""
    maker = TextMaker(random.Random(seed))
    topic = maker.words.topics[0]
    out = []
    for _ in range(count):
        maker.set_focus(topic)
        out.append(" ".join(maker.paragraphs(topic, 3)))
    return out


def _day(day: int, text: str) -> str:
    """A calendar day: the same text, three names that change with the day (day 1 is 3 bits
    from day 0: a near duplicate at k = 3, not an exact one)."""
    names = " and ".join(random.Random(day).sample(TextMaker(random.Random(1)).words["names"], 3))
    return f"Day {day}. Meeting with {names}. {text}"


def _page(title: str, text: str, links: list[str]) -> str:
    anchors = "".join(f'<a href="{href}">link</a> ' for href in links)
    return (f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{text}</p><nav>{anchors}</nav></body></html>")


def _crawl(tmp_path: Path, seed: str, **settings: Any) -> CrawlRun:
    run = run_crawl(tmp_path / "run", urls=[seed], timeout=240, settings={
        "CLOSESPIDER_PAGECOUNT": SAFETY_PAGES, "CLOSESPIDER_TIMEOUT": 120,
        "ROBOTSTXT_OBEY": False, **settings})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_a_session_id_loop_stops_after_a_handful_of_pages(serve, tmp_path) -> None:
    """Each page links its siblings with a fresh ``?sid=``: exact duplicates' links are not
    followed and ``sid`` is learned (folded out of the host's URLs)."""
    texts = dict(zip("abcd", _texts(4), strict=True))
    counter = iter(range(10**9))

    def handler(target: str) -> Answer:
        path = urlsplit(target).path.strip("/")
        if path not in texts:
            return Answer(404, "not here")
        links = [f"/{p}?sid={next(counter):08x}" for p in texts]
        return Answer(body=_page(f"Page {path}", texts[path], links))

    site = serve(handler)
    run = _crawl(tmp_path, site.url + "/a?sid=start")
    assert run.stats["finish_reason"] == "finished"
    stored = {urlsplit(u).path for u in run.stored_urls()}
    assert stored == {"/a", "/b", "/c", "/d"}
    assert run.stats["urlnorm/learned_params"] >= 1
    assert run.stats["dedup/links_not_followed/exact_duplicate"] >= 3
    assert "ignores the query parameter 'sid'" in run.stderr
    assert fetches(site) <= 40, site.hits  # unbounded before: 1,155 fetches in 40 s
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "scrapy", "dedupreport", "--db",
                    f"sqlite:///{run.db_path}", "--format", "json", "-o", str(report)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    learned = json.loads(report.read_text())["url_dedup"]["ignored_params"]
    assert learned == {"127.0.0.1": ["sid"]}


def _calendar(target: str) -> Answer:
    """``/cal?d=N``: day N, linking day N+1 (:func:`_day`); any other path is a real 404."""
    if urlsplit(target).path != "/cal":
        return Answer(404, "no such page")
    day = int(parse_qs(urlsplit(target).query).get("d", ["0"])[0])
    return Answer(body=_page("Events", _day(day, _texts(1, seed=11)[0]), [f"/cal?d={day + 1}"]))


def test_a_calendar_stops_at_its_first_near_duplicate_day(serve, tmp_path) -> None:
    """``/cal?d=`` links the next day forever; each day is a near duplicate of the last."""
    site = serve(_calendar)
    run = _crawl(tmp_path, site.url + "/cal?d=0")
    assert run.stats["finish_reason"] == "finished"
    assert run.stats["dedup/links_not_followed/near_duplicate"] >= 1
    distances = [int(d) for d, in run.rows("SELECT distance FROM dropped")]
    assert distances and all(0 < d <= 3 for d in distances)  # really near, not exact
    assert fetches(site) <= 10, site.hits  # unbounded before: 4,117 fetches in 30 s


def test_a_calendar_is_crawled_on_when_near_duplicate_links_are_followed(serve, tmp_path):
    """The setting is real: following near duplicates' links the calendar goes on (until the
    learned ``d`` or the path budget ends it)."""
    site = serve(_calendar)
    run = _crawl(tmp_path, site.url + "/cal?d=0", TRAP_FOLLOW_LINKS_OF="near_duplicates",
                 TRAP_LEARN_PARAMS_AFTER=0, TRAP_PATH_MAX_QUERY_VARIANTS=30)
    assert run.stats["finish_reason"] == "finished"
    assert run.stats["urlnorm/trap/query_variants"] >= 1
    assert 30 <= fetches(site) <= 35, site.hits  # the path budget, not the near-dup rule


def test_soft_404_pages_are_dropped_and_their_links_not_followed(serve, tmp_path) -> None:
    """Every unknown path answers 200 with a "not found" page echoing the path and linking
    to more unknown paths; the probe teaches the crawl that page."""
    texts = _texts(3, seed=5)
    real = {"/": 0, "/one": 1, "/two": 2}
    sorry = " ".join(_texts(3, seed=9))  # long: the echoed path moves its SimHash 1 bit

    def handler(target: str) -> Answer:
        path = urlsplit(target).path
        if path in real:
            links = [p for p in real if p != path] + [f"/gone{real[path]}", "/retired"]
            return Answer(body=_page(f"Real {path}", texts[real[path]], links))
        # the probe, answered late: the host's pages wait for it rather than be decided without it
        delay = 1.0 if re.fullmatch(r"/[0-9a-f]{24}", path) else 0.0
        token = re.sub(r"\W", "", path)[:12]
        return Answer(body=_page("Sorry", f"We looked for {path} everywhere. {sorry}",
                                 [f"/more{token}", f"/x{token}"]), delay=delay)

    site = serve(handler)
    run = _crawl(tmp_path, site.url + "/")
    assert run.stats["finish_reason"] == "finished"
    assert {urlsplit(u).path for u in run.stored_urls()} == set(real)
    reasons = Counter(r for r, in run.rows("SELECT reason FROM dropped"))
    assert reasons["soft_404"] >= 3 and set(reasons) == {"soft_404"}
    distances = {d for d, in run.rows("SELECT distance FROM dropped")}
    assert distances & {1, 2, 3}  # the path echoed: like the probe, not identical to it
    assert run.stats["dedup/soft404/probes"] == 1
    assert run.stats["dedup/links_not_followed/soft_404"] == reasons["soft_404"]
    assert fetches(site) <= 12, site.hits  # unbounded before: 980 fetches, never stopped
    listed = _dropped(run, "--reason", "soft404", "--format", "json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == reasons["soft_404"] and {r["reason"] for r in rows} == {"soft_404"}
    one = rows[0]["url"]
    explained = _dropped(run, "--explain", one, check=False)
    assert explained.returncode != 0 and "dropped as a soft 404" in explained.stderr
    assert "Traceback" not in explained.stderr


def _dropped(run: CrawlRun, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "dropped", "--db",
                           f"sqlite:///{run.db_path}", *args], cwd=ROOT, check=check,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_paginated_listing_is_crawled_whole(serve, tmp_path) -> None:
    """``?page=1..50``, distinct content, linked page to page and with a no-op ``ref=``:
    every page is stored; ``page`` is never learned, ``ref`` is."""
    texts = _texts(50, seed=3)

    def handler(target: str) -> Answer:
        query = parse_qs(urlsplit(target).query)
        page = int(query.get("page", ["1"])[0])
        if urlsplit(target).path != "/list" or not 1 <= page <= 50:
            return Answer(404, "no such page")
        links = [f"/list?page={p}&ref={page}" for p in (page - 1, page + 1, 1) if 1 <= p <= 50]
        return Answer(body=_page(f"Listing {page}", texts[page - 1], links))

    site = serve(handler)
    run = _crawl(tmp_path, site.url + "/list?page=1")
    assert run.stats["finish_reason"] == "finished"
    pages = {int(parse_qs(urlsplit(u).query)["page"][0]) for u in run.stored_urls()}
    assert pages == set(range(1, 51))
    assert "query parameter 'page'" not in run.stderr

"""Late drops: a kept page whose fingerprint changes once its site's template is learned.

On a young site (fewer than three kept pages) the template is unknown, so the first pages are
fingerprinted with the site's chrome in. A mirror fetched then is far from its original and
kept; once the mirror site's chrome is learned its fingerprint is recomputed, and it is then
found within k of the original: it is moved to ``dropped`` (rule ``refreshed``).
"""

from __future__ import annotations

import asyncio
import html as htmllib
import json
import random
import subprocess
import sys
import uuid
from typing import Any

import pytest

from crawler.backends.local import LocalContentIndex
from crawler.content.template import TemplateFilter
from crawler.dedup.decider import ContentDecider
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.outputs.droplog import DropLog, read_drop_log, replay_drop_log
from crawler.pipelines.neardup import NearDuplicatePipeline
from crawler.sitegen.server import SiteServer
from crawler.sitegen.site import Page, Site
from crawler.sitegen.text import TextMaker, load_words
from tests.conftest import ROOT, run_crawl

ARTICLES = 4


def decide(decider: ContentDecider, item: PageItem) -> Any:
    """``item`` through a pipeline on ``decider``, run to its end: the kept item, or
    DuplicatePage raised."""
    return asyncio.run(NearDuplicatePipeline(decider).process_item(item))


def _sites() -> tuple[Site, Site, dict[str, str]]:
    """An original site and a mirror site (another origin, a large chrome of its own)."""
    rng = random.Random(21)
    maker = TextMaker(rng)
    topics = load_words().topics
    texts = []
    for i in range(ARTICLES):
        maker.set_focus(topics[i])
        texts.append(maker.paragraphs(topics[i], 6, 4, 6))
    chrome_o = [maker.sentence(topics[5]) for _ in range(4)]
    chrome_m = [maker.paragraph(topics[6], 2) for _ in range(12)]  # long lines: fingerprinted

    def page(chrome: list[str], paras: list[str]) -> Page:
        top = "".join(f"<div>{htmllib.escape(c)}</div>" for c in chrome)
        body = "".join(f"<p>{htmllib.escape(p)}</p>" for p in paras)
        return Page(f"<html><body>{top}<div class='post'>{body}</div></body></html>".encode())

    original = {f"/a/{i}": page(chrome_o, t) for i, t in enumerate(texts)}
    mirror = {f"/m/{i}": page(chrome_m, t) for i, t in enumerate(texts)}
    groups = {f"/m/{i}": f"/a/{i}" for i in range(ARTICLES)}
    return (Site("o", original, canonical_pages=set(original)),
            Site("m", mirror, canonical_pages=set(mirror)), groups)  # fmt: skip


def _item(url: str, body: bytes) -> PageItem:
    return PageItem(url=url, status=200, content_type="text/html", title="", text="",
                    html=body.decode(), depth=0, referer=None, fetched_at="",
                    canonical_url=url)  # fmt: skip


@pytest.fixture(params=["local", "redis"])
def index(request: Any) -> Any:
    """The local content index, or the Redis one (standalone) on the real server."""
    if request.param == "local":
        yield LocalContentIndex(3)
        return
    from crawler.backends.redis import RedisContentIndex, clear_namespace, connect

    client = connect(request.getfixturevalue("redis_url"))
    base = f"dedup:late-{uuid.uuid4().hex[:8]}"
    yield RedisContentIndex(client, base, k=3)
    clear_namespace(client, base)


@pytest.mark.parametrize("mirrors_first", [False, True])
def test_mirrors_kept_while_their_site_was_young_are_dropped_once_it_is_known(
    tmp_path: Any, mirrors_first: bool, index: Any
) -> None:
    original, mirror, groups = _sites()
    log = tmp_path / "d.jsonl"
    pipe = ContentDecider(index, templates=TemplateFilter(), droplog=DropLog(log))
    order = [("http://o.test", original), ("http://m.test:8080", mirror)]
    if mirrors_first:
        order.reverse()
    dropped_now = []
    for base, site in order:
        for path, page in sorted(site.pages.items()):
            try:
                decide(pipe, _item(base + path, page.body))
            except DuplicatePage as exc:
                dropped_now.append(exc.drop.url)
    pipe.drops.log.close()
    records = list(read_drop_log(log))
    dropped = {r["url"].split("//", 1)[1].split("/", 1)[1]: r for r in records}
    # every group ends with one page kept: the other is a drop, now or later
    assert len(dropped) == ARTICLES, records
    late = [r for r in records if r.get("rule") == "refreshed"]
    if not mirrors_first:  # mirrors first: learned before the originals come, dropped at once
        assert late, "no mirror was kept while its site was young: the fixture guards nothing"
    for record in records:
        path = "/" + record["url"].split("//", 1)[1].split("/", 1)[1]
        other = "/" + record["duplicate_of"].split("//", 1)[1].split("/", 1)[1]
        assert groups.get(path, path) == groups.get(other, other)  # its own group
        assert 0 <= record["distance"] <= 3


def test_a_late_drop_of_the_page_being_decided_is_raised() -> None:
    """The page whose arrival teaches its site's template can itself turn out a duplicate:
    it is dropped at once (DuplicatePage), not stored and moved later."""
    original, mirror, _ = _sites()
    pipe = ContentDecider(LocalContentIndex(3), templates=TemplateFilter())
    for path, page in sorted(original.pages.items()):
        decide(pipe, _item("http://o.test" + path, page.body))
    raised = []
    for path, page in sorted(mirror.pages.items()):
        try:
            decide(pipe, _item("http://m.test:8080" + path, page.body))
        except DuplicatePage as exc:
            raised.append(exc.drop.url)
    assert "http://m.test:8080/m/2" in raised  # the third mirror: the template is learned


def test_a_crawl_moves_late_duplicates_from_documents_to_dropped(tmp_path: Any) -> None:
    original, mirror, _ = _sites()
    with SiteServer(original) as so, SiteServer(mirror) as sm:
        urls = [so.url(p) for p in sorted(original.pages)] + [sm.url(p) for p in
                                                                sorted(mirror.pages)]
        run = run_crawl(tmp_path / "run", urls=urls,
                        settings={"ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS": 1})
        stored = run.stored_urls()
        rows = run.rows("SELECT url, duplicate_of, rule FROM dropped")
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(stored) == ARTICLES and len(rows) == ARTICLES, (stored, rows)
    assert any(rule == "refreshed" for _, _, rule in rows), rows
    assert set(stored).isdisjoint(url for url, _, _ in rows)
    log = [json.loads(line) for line in run.dropped_log.read_text().splitlines()]
    replayed = replay_drop_log(log)  # read start to end: the table's rows
    assert sorted(r["url"] for r in replayed.values()) == sorted(url for url, _, _ in rows)
    assert run.stats["dedup/summary/pages_stored"] == ARTICLES
    assert run.stats["dedup/template/refreshed_duplicate"] >= 1
    late = next(url for url, _, rule in rows if rule == "refreshed")
    explained = subprocess.run([sys.executable, "-m", "scrapy", "dropped", "--db",
                                str(run.db_path), "--explain", late],
                               capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert explained.returncode == 0, explained.stderr
    assert "late drop: stored while its site's template was unknown" in explained.stdout

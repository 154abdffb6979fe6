"""A host taken over while young: pages decided together keep what pages decided one by one keep.

A worker that takes a host over (distributed profile) warms its template from the host's stored
pages. When it takes the host early (one page stored: the host is young), its first pages are
fingerprinted with the chrome in and matched against the stored page, which this process does
not remember: each such page awaits the stored text (a storage read, in a thread). Without the
gate (the default: the index asked inline) other pages decide meanwhile, and the host's template
can become known between a page's fingerprint and its learning. Such a page is learned with its
young fingerprint after the blocks it holds have become template: no block turns template with
it, so it is never re-fingerprinted (the refresh only strips pages when a block *becomes*
template); its fingerprint stays young in the index and in storage, its mirror (fingerprinted
with the template) is far from it and kept, and the settle step does not group two pages of one
origin by bits when one fingerprint is young and the crawl recorded no drop between them.

Seen in ``tests/test_lifecycle.py::test_a_finished_crawl_expires_...`` with a page's frontier
pushes batched (not shipped): the joiner took a host with 1 page stored and kept 12 pages young,
2 of them beside their mirrors (52 pages stored where one worker stores 50). Here the same
decision code, no Redis, no batching: one decider on real SQLite, the host's first page stored
by "another worker", the next pages arriving while their stored-text reads are under way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from itemadapter import ItemAdapter

from crawler.dedup.decider import ContentDecider
from crawler.exceptions import DuplicatePage
from crawler.pipelines.neardup import NearDuplicatePipeline
from crawler.pipelines.storage import document_row
from crawler.sitegen import template_site
from crawler.storage import Store
from tests.test_neardup import BASE, html_paths, make_item, pipeline

#: Pages that arrive while the first ones' storage reads run (the lifecycle run had 12).
TOGETHER = 8


def _site() -> Any:
    return template_site(24, seed=12)  # the lifecycle test's second host


def _taken_over(url: str) -> ContentDecider:
    """A worker's decider that takes the host over: the stored pages in its index (as the
    shared index holds them), warming on (as ``from_crawler`` sets it for a host owner)."""
    decider = pipeline(store_factory=lambda: Store(url))
    decider.load_stored()
    decider.hosts.warm_since = 0.0
    return decider


def _order(site: Any) -> list[str]:
    """Posts first, their mirrors (``/m/``, ``/amp/``) last, as the crawl met them; the posts
    that have a mirror among the first pages, behind two that have none (the first pages
    decided together teach the template: the pages learned after them are the ones left
    young)."""
    paths = [p for p in html_paths(site) if p != "/"]
    mirrors = [p for p in paths if p.startswith(("/m/", "/amp/"))]
    mirrored = ["/posts/" + m.rsplit("/", 1)[1] for m in mirrors]
    assert set(mirrored) <= set(paths)
    plain = [p for p in paths if p not in mirrors and p not in mirrored]
    return plain[:2] + mirrored + plain[2:] + mirrors


def _crawl(tmp_path: Any, name: str, together: int) -> tuple[set[str], int]:
    """The host's root stored by another worker; then this worker decides the pages, the first
    ``together`` at once (1: one at a time). The pages stored at the end (demotions and late
    drops applied) and how many kept pages hold a young fingerprint."""
    site = _site()
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    root = make_item(BASE + "/", site.render(site.pages["/"], BASE))
    other = pipeline()
    asyncio.run(NearDuplicatePipeline(other).process_item(root))
    with Store(url) as store:
        store.upsert_documents([document_row(root, None)])
    decider = _taken_over(url)
    stored: dict[str, Any] = {"/": root}
    demote = decider.drops.demoted

    def demoted(drop: Any, kept_content_hash: str | None = None) -> None:
        stored.pop(drop.url.removeprefix(BASE), None)
        demote(drop, kept_content_hash)

    decider.drops.demoted = demoted  # type: ignore[method-assign]
    paths = _order(site)

    async def one(path: str) -> None:
        item = make_item(BASE + path, site.render(site.pages[path], BASE))
        with contextlib.suppress(DuplicatePage):
            stored[path] = await NearDuplicatePipeline(decider).process_item(item)

    async def run() -> None:
        await asyncio.gather(*(one(p) for p in paths[:together]))
        for path in paths[together:]:
            await one(path)

    asyncio.run(run())
    asyncio.run(decider.close())
    young = sum(1 for p, item in stored.items() if p != "/" and ItemAdapter(item).get("young"))
    return set(stored), young


def test_pages_decided_together_on_a_young_taken_over_host_keep_one_copy_per_group(
        tmp_path: Any) -> None:  # fmt: skip
    site = _site()
    one_by_one, young_alone = _crawl(tmp_path, "alone", 1)
    together, young_together = _crawl(tmp_path, "together", TOGETHER)
    groups = site.duplicate_groups()
    for members in groups.values():  # the fixture: one copy a group, one at a time
        assert len(members & one_by_one) == 1, sorted(members & one_by_one)
    twice = {o: sorted(m & together) for o, m in groups.items() if len(m & together) != 1}
    assert not twice, (twice, young_together, young_alone)
    assert together == one_by_one

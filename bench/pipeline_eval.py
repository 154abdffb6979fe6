"""The real pipeline's decisions on a page set, scored: what ``bench.quality`` reports per set.

Each set is fed page by page in its fetch order (:meth:`bench.pages.PageSet.fetch_order`: a
seeded shuffle, so a mirror may come before its original) through a fresh
:class:`~crawler.pipelines.neardup.NearDuplicatePipeline` built as a crawl builds it, minus
storage and drop log: the ``DEDUP_BACKEND=local`` content index
(:func:`crawler.backends.make_content_index`), a :class:`~crawler.content.template.TemplateFilter`,
default ``SIMHASH_MAX_DISTANCE`` / ``SIMHASH_MIN_TOKENS`` / ``SIMHASH_SHINGLE``, called through
its blocking ``check(item)``. A page is kept, or raises
:class:`~crawler.exceptions.DuplicatePage`.

Scores and diagnosis: :mod:`bench.scores`. The numbers may change with the pipeline's
internals: they are for comparing two versions of the code on the same sets.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.pages import PageSet, SetPage
from bench.scores import Outcome, score
from crawler.backends import make_content_index
from crawler.content.template import TemplateFilter, block_hashes, template_key
from crawler.content.text import block_tokens, extract, main_tokens
from crawler.dedup.decider import ContentDecider
from crawler.dedup.options import DeciderSettings
from crawler.exceptions import DuplicatePage
from crawler.items import PageItem
from crawler.outputs.droplog import DropLog, read_drop_log
from crawler.pipelines.neardup import NearDuplicatePipeline

#: What the decider keys template learning on (the origin), so the young-host flag and main
#: tokens here are the decider's.
TEMPLATE_KEY = template_key
YOUNG_STATS = ("dedup/template/young_distinct", "dedup/template/young_unverified")


class Stats(Counter):  # type: ignore[type-arg]
    """The two StatsCollector methods the pipeline calls."""

    def inc_value(self, key: str, count: int = 1) -> None:
        self[key] += count

    def get_value(self, key: str, default: Any = 0) -> Any:
        return self.get(key, default)


class RecordingIndex:
    """A content index that remembers the SimHash it holds for each kept URL."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kept: dict[str, int | None] = {}

    def check_and_add(self, page: Any) -> Any:
        match = self.inner.check_and_add(page)
        if match is None:
            self.kept[page.url] = page.simhash
        return match

    def load(self, records: Iterable[tuple[str, str, str, int | None]]) -> int:
        records = list(records)
        for url, _canonical, _hash, simhash in records:
            self.kept[url] = simhash
        return int(self.inner.load(records))

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # whatever else the pipeline asks of an index
        return getattr(self.inner, name)


class Evaluation:
    """Feeds pages through one fresh pipeline and records each :class:`Outcome`."""

    def __init__(self, pages: list[SetPage]) -> None:
        options = DeciderSettings.from_settings({})
        self.min_tokens, shingle = options.min_tokens, options.shingle
        self.index = RecordingIndex(make_content_index({}))
        self.stats = Stats()
        self.templates = TemplateFilter()
        stats: Any = self.stats  # the two StatsCollector methods the pipeline calls
        self.decider = ContentDecider(self.index, min_tokens=self.min_tokens, shingle=shingle,
                                      templates=self.templates, stats=stats)  # fmt: skip
        self.pipe = NearDuplicatePipeline(self.decider)
        self.key = {p.url: p.group or p.url for p in pages}
        self.kept_keys: Counter[str] = Counter()

    def check(self, page: SetPage) -> Outcome:
        host = TEMPLATE_KEY(page.url)
        key = page.group or page.url
        out = Outcome(page.url, key, page.group is not None, page.kind,
                      self.templates.is_young(host), self.kept_keys[key] > 0)  # fmt: skip
        if out.grouped:
            out.tokens, out.every_block = self._main_tokens(page.html, host)
        before, vetoes = self._snapshot(), self._vetoes()
        try:
            out.simhash = asyncio.run(self.pipe.process_item(_item(page))).simhash
        except DuplicatePage as exc:
            out.kept, out.simhash, out.reason = False, exc.drop.simhash, exc.drop.reason
            out.duplicate_of, out.distance = exc.drop.duplicate_of, exc.drop.distance
        out.vetoed = self._vetoes() > vetoes
        self.kept_keys[key] += out.kept
        self._nearest(out, before)
        return out

    def _vetoes(self) -> int:
        return sum(self.stats[s] for s in YOUNG_STATS)

    def _main_tokens(self, html: str, host: str) -> tuple[int, bool]:
        """Tokens the pipeline fingerprints (template and short blocks out), and whether
        that is every token (no block left out as short: adverts and dates count)."""
        blocks = extract(html, tokenize=False).blocks
        content = self.templates.content(host, blocks, block_hashes(blocks))
        per_block = block_tokens([b for _, b in content])
        main = main_tokens(per_block, self.min_tokens)
        return len(main), len(main) == sum(map(len, per_block))

    def _snapshot(self) -> tuple[list[str], np.ndarray, list[str]]:
        urls = [u for u, fp in self.index.kept.items() if fp is not None]
        fps = np.array([self.index.kept[u] for u in urls], dtype=np.uint64)
        return urls, fps, [self.key.get(u, u) for u in urls]

    @staticmethod
    def _nearest(out: Outcome, before: tuple[list[str], np.ndarray, list[str]]) -> None:
        urls, fps, keys = before
        if out.simhash is None or not urls:
            return
        dist = np.bitwise_count(fps ^ np.uint64(out.simhash))
        same = np.array([k == out.key for k in keys])
        if same.any():
            out.own_distance = int(dist[same].min())
        if (~same).any():
            i = int(np.flatnonzero(~same)[np.argmin(dist[~same])])
            out.other_distance, out.other_url = int(dist[i]), urls[i]


def _item(page: SetPage) -> PageItem:
    return PageItem(url=page.url, status=200, content_type="text/html; charset=utf-8",
                    title="", text="", html=page.html, depth=0, referer=None,
                    fetched_at="2026-01-01T00:00:00+00:00", canonical_url=page.url)  # fmt: skip


def run(pages: list[SetPage], order: list[int]) -> tuple[list[Outcome], Stats]:
    """Every page through one fresh pipeline, in ``order``; outcomes in that order.

    A page kept first and moved to the drops later (the pipeline's drop log names it with a
    ``rule``: its fingerprint was refreshed once its host's template was known, or the page
    it names canonical came) counts as dropped."""
    evaluation = Evaluation(pages)
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "dropped.jsonl"
        evaluation.decider.drops.log = DropLog(log)
        for n, i in enumerate(order):
            outcomes.append(evaluation.check(pages[i]))
            outcomes[-1].position = n / max(len(order) - 1, 1)
        evaluation.decider.drops.log.close()
        late = {r["url"]: r for r in read_drop_log(log) if r.get("rule")} if log.exists() else {}
    for out in outcomes:
        record = late.get(out.url)
        if record is not None and out.kept:
            out.kept, out.reason = False, record["reason"]
            out.duplicate_of, out.distance = record["duplicate_of"], record["distance"]
    return outcomes, evaluation.stats


def evaluate(page_set: PageSet, seed: int) -> dict[str, Any]:
    """The scores of one set (module docstring) as a JSON-ready dict."""
    started = time.perf_counter()
    outcomes, stats = run(page_set.pages, page_set.fetch_order(seed))
    result = {"set": page_set.name, "built": page_set.built, **score(outcomes)}
    result["stats"] = {k: v for k, v in sorted(stats.items()) if k.startswith("dedup/")}
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result

"""``NearDuplicatePipeline``: drops exact copies and near duplicates before storage.

For each :class:`~crawler.items.PageItem`, in this order:

1. ``binary`` pages (a body that is not text although served as HTML): counted
   (``dedup/binary``), text emptied, passed through unfingerprinted.
2. :func:`crawler.text.extract` gives the visible text and the fingerprint blocks (boilerplate
   regions left out; an item whose ``blocks`` the spider filled from its own parse is not
   parsed again: its ``text`` and ``blocks`` are used, and ``blocks`` emptied);
   :class:`crawler.template.TemplateFilter` removes the learned template blocks of the page's
   origin (scheme, host and port: :func:`template_key`; in this module "host" means that
   origin); the rest is tokenized.
3. The content hash (:func:`crawler.simhash.content_hash`) is taken of the whole visible text,
   so exact copies match whatever the template learning knows. A page without any visible text
   (empty, script-only) is hashed by its whitespace-collapsed markup instead
   (``dedup/empty``): text-less pages are exact copies only when their markup is.
4. Fewer than ``SIMHASH_MIN_TOKENS`` tokens: exact copies only (``dedup/too_short``; no
   SimHash, so near-empty pages never match each other). Otherwise the 64-bit SimHash of the
   tokens (``SIMHASH_SHINGLE``-word shingles).
5. The content index (``DEDUP_BACKEND``: :mod:`crawler.backends.local` or Redis) decides and
   records atomically: exact copy (``exact_duplicate``, distance 0), else nearest page within
   ``SIMHASH_MAX_DISTANCE`` bits (``near_duplicate``), else kept. On a host with fewer than
   ``TemplateFilter.min_pages`` kept pages (its template unknown), a near match on the same host
   is confirmed only if the page adds little text of its own to it (:func:`young_distinct`);
   a same-host match kept elsewhere (by an earlier crawl, or by another worker of a distributed
   crawl) is compared the same way with its stored text (read in a thread; the page is kept
   when that text is gone). A shared index (``DEDUP_BACKEND=redis``) answers ``pending`` for a
   match that another worker kept but has not stored yet: the page waits
   (``PENDING_POLL_SECONDS``, off the reactor; stat ``dedup/shared/pending_waits``) and asks
   again, so it is dropped only against a stored page, or decided anew when that worker died.
   In the distributed profile the first page of a host a worker knows nothing of (taken over
   from another worker, or reclaimed from a dead one) first teaches the template filter the
   host's last ``WARM_PAGES`` pages stored in this crawl (stat ``dedup/template/warmed``), so
   the new owner fingerprints the host as the old one did.
6. A duplicate raises :class:`~crawler.exceptions.DuplicatePage`, is counted
   (``dedup/<reason>``, ``dedup/distance/<d>``) and appended to ``DROPPED_LOG`` once storage
   committed its drop row (``batch_committed``; at once when no storage pipeline runs). Kept
   pages of a shared index are committed there at the same moment. A kept page gets
   ``content_hash`` and ``simhash``, and teaches the template filter; fingerprints of earlier
   pages whose blocks became template are recomputed (``dedup/template/refreshed``) and
   checked again (:meth:`ContentIndex.check`, recording nothing): a page now within k of
   another kept page is a *late drop* (``dedup/template/refreshed_duplicate``): it leaves the
   index and storage moves it to ``dropped`` with ``rule = 'refreshed'`` (the page being
   decided is dropped at once instead); the others are re-recorded.
7. **The canonical copy** (``DEDUP_CANONICAL``): when the kept page a new page duplicates
   names the new page canonical (``canonical_link``, from ``<link rel="canonical">`` or a
   ``Link`` header), the new page is kept instead: the index swaps them
   (:meth:`ContentIndex.replace`) and storage moves the other to ``dropped`` with
   ``rule = 'canonical'`` in the batch that stores the new page (signal ``page_demoted``;
   drops that named it follow, ``rule = 'repointed'``). Two pages naming each other are
   ignored (``dedup/canonical/loop``); a copy naming a kept original is dropped as usual
   (``dedup/canonical/confirmed``). Without a hint the first fetched page stays.

Redis outage (``DEDUP_BACKEND=redis``): a failed index call closes the spider with finish reason
``redis_error`` and one error line (:func:`crawler.dupefilter.stop_on_redis_error`). A page
whose duplicate check failed, and every page after it, is dropped unchecked (plain ``DropItem``
logged at DEBUG, stat ``dedup/redis_error/unchecked``; one warning at close with the count and
the first URL): it is neither stored nor told to be a duplicate. A page already decided (kept)
whose follow-up index update fails is still stored.

With ``SIMHASH_PERSIST`` (default True) the index is loaded at open from the stored documents
(``crawler.storage.Store.iter_key_arrays``, or ``iter_fingerprints`` for Redis), so a second
crawl drops pages duplicating the first crawl's; the local index then keeps no URL per stored
page and asks the store (``document_urls``, blocking, on the reactor thread: one indexed query
per duplicate of a stored page) for the URL of a match. Limit: ``documents.simhash`` keeps
the fingerprint a page had when it was kept; the refresh of step 6 updates the index only.
"""

from __future__ import annotations

import logging
import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import xxhash
from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import DropItem
from scrapy.utils.asyncio import run_in_thread, sleep

from crawler import config, defaults
from crawler import signals as dedup_signals
from crawler.backends import backend_name, make_content_index
from crawler.backends.local import Match, PageSignature
from crawler.droplog import DropLog, row_record
from crawler.dupefilter import REDIS_ERROR, redis_errors, stop_on_redis_error
from crawler.exceptions import (
    CANONICAL_RULE,
    NEAR_DUPLICATE,
    PENDING,
    REFRESHED_RULE,
    DuplicatePage,
)
from crawler.simhash import content_hash, features, fingerprint
from crawler.template import KeptPage, TemplateFilter, block_hash, young_distinct
from crawler.text import block_tokens, extract, main_tokens, normalize

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from crawler.backends import ContentIndex

logger = logging.getLogger(__name__)

#: Stored pages of a host that teach a new owner its template (at most; the newest).
WARM_PAGES = 32
#: Seconds between two questions to a shared index while a match is pending (kept by another
#: worker whose storage batch has not committed it yet).
PENDING_POLL_SECONDS = 0.1


def validate(settings: config.SettingsLike) -> tuple[int, int, bool]:
    """``(SIMHASH_MIN_TOKENS, SIMHASH_SHINGLE, SIMHASH_PERSIST)``, checked (and
    ``DEDUP_CANONICAL``)."""
    min_tokens = config.get_int(settings, "SIMHASH_MIN_TOKENS", defaults.SIMHASH_MIN_TOKENS, 0)
    shingle = config.get_int(settings, "SIMHASH_SHINGLE", defaults.SIMHASH_SHINGLE, 1, 8)
    persist = config.get_bool(settings, "SIMHASH_PERSIST", defaults.SIMHASH_PERSIST)
    config.get_bool(settings, "DEDUP_CANONICAL", defaults.DEDUP_CANONICAL)
    return min_tokens, shingle, persist


config.register(validate)


def storage_enabled(settings: Any) -> bool:
    """Whether ``ITEM_PIPELINES`` stores pages (then drops are logged once committed)."""
    from scrapy.utils.conf import build_component_list
    from scrapy.utils.misc import load_object

    from crawler.pipelines.storage import StoragePipeline

    for entry in build_component_list(settings.getwithbase("ITEM_PIPELINES")):
        component = load_object(entry) if isinstance(entry, str) else entry
        if isinstance(component, type) and issubclass(component, StoragePipeline):
            return True
    return False


@dataclass
class _Page:
    """A page between the index lookup and the decision."""

    item: Any
    host: str
    text: str
    hashes: list[int]
    content: list[tuple[int, str]]
    signature: PageSignature
    match: Match | None = None
    verify: bool = False  # young host, same-host match stored by an earlier crawl
    match_names: str | None = None  # what the match names canonical, read from storage


def template_key(url: str) -> str:
    """What template learning is keyed on: the origin (``scheme://host[:port]``) of a URL.

    Sites on other ports of one host name are other sites with other templates (measured in
    ``bench.quality``, set ``shared-host``). A URL without a usable port keys on its host."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    origin = f"{parts.scheme.lower()}://{host}"
    return f"{origin}:{port}" if port else origin


def block_hashes(blocks: list[str]) -> list[int]:
    """``[block_hash(b) for b in blocks]``, normalizing the whole page in one NFKC + case-fold
    call (a line break composes with nothing, so the lines normalize as they would alone)."""
    if not blocks:
        return []
    folded = unicodedata.normalize("NFKC", "\n".join(blocks)).casefold().split("\n")
    if len(folded) != len(blocks):  # a block held a line break: no shortcut
        return [block_hash(b) for b in blocks]
    digest = xxhash.xxh3_64_intdigest
    return [digest(" ".join(line.split()).encode("utf-8", "surrogatepass")) for line in folded]


def _line_blocks(text: str) -> list[tuple[int, str]]:
    return [(block_hash(line), line) for line in text.splitlines() if line]


class NearDuplicatePipeline:
    """Exact and near-duplicate dropping (see the module docstring)."""

    def __init__(
        self,
        index: ContentIndex,
        *,
        min_tokens: int = defaults.SIMHASH_MIN_TOKENS,
        shingle: int = defaults.SIMHASH_SHINGLE,
        templates: TemplateFilter | None = None,
        droplog: DropLog | None = None,
        stats: StatsCollector | None = None,
        store_factory: Any = None,
        defer_droplog: bool = False,
        prefer_canonical: bool = defaults.DEDUP_CANONICAL,
    ) -> None:
        self.index = index
        self.prefer_canonical = prefer_canonical
        self.min_tokens = min_tokens
        self.shingle = shingle
        self.templates = templates
        self.droplog = droplog
        self.stats = stats
        self.store_factory = store_factory  # () -> Store, for SIMHASH_PERSIST
        # drop log lines written once storage committed the drop (batch_committed), not before
        self.defer_droplog = defer_droplog
        self._store_obj: Any = None
        self._binary_seen = False
        # distributed: learn a host's template from its stored pages before its first page here
        self.warm_since: float | None = None
        self._warmed: set[str] = set()
        self.redis_down = False
        self._unchecked_first: str | None = None
        self.crawler: Crawler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NearDuplicatePipeline:
        settings = crawler.settings
        min_tokens, shingle, persist = validate(settings)
        path = settings.get("DROPPED_LOG", defaults.DROPPED_LOG)
        store_factory = None
        if persist:
            from crawler.storage import Store

            def store_factory() -> Store:
                return Store.from_settings(settings)

        owner = {}
        if backend_name(settings) == "redis":
            from crawler.backends.cluster import member, shared_scheduler

            if shared_scheduler(settings):  # kept pages stay pending until committed
                owner = {"owner": member(crawler).id}
        defer = storage_enabled(settings)
        pipe = cls(
            make_content_index(settings, crawler=crawler, **owner),
            min_tokens=min_tokens,
            shingle=shingle,
            templates=TemplateFilter(),
            droplog=DropLog(path) if path else None,
            stats=crawler.stats,
            store_factory=store_factory,
            defer_droplog=defer,
            prefer_canonical=config.get_bool(settings, "DEDUP_CANONICAL",
                                             defaults.DEDUP_CANONICAL),
        )
        pipe.crawler = crawler
        if hasattr(pipe.index, "resolver") and store_factory is not None:
            pipe.index.resolver = pipe  # kept pages' URLs and earlier versions from storage
        if owner and store_factory is not None:
            pipe.warm_since = member(crawler).started()
        crawler.signals.connect(pipe.batch_committed, signal=dedup_signals.batch_committed)
        crawler.signals.connect(pipe.spider_closed, signal=signals.spider_closed)
        return pipe

    # --- lifecycle ----------------------------------------------------------------------------
    async def open_spider(self) -> None:
        if self.store_factory is not None:
            loaded = await run_in_thread(self.load_stored)
            logger.info("content index: %d stored fingerprints loaded", loaded)

    def _store(self) -> Any:
        if self._store_obj is None and self.store_factory is not None:
            self._store_obj = self.store_factory()
        return self._store_obj

    def load_stored(self) -> int:
        """Load stored documents into the index (blocking; run off the reactor).

        Documents without a content hash (binary pages) are left out: nothing duplicates them.
        An index with ``load_arrays`` (the local one) reads integer key arrays and resolves a
        match's URL from the store when needed; others (Redis) read the URL records.
        """
        store = self._store()
        load_arrays = getattr(self.index, "load_arrays", None)
        if getattr(self.index, "standalone", False):
            load_arrays = None  # an index that keeps URLs itself loads them too
        if load_arrays is not None:
            loaded = load_arrays(store.iter_key_arrays(), store.document_urls)
        else:
            records = (r for r in store.iter_fingerprints() if r[2])
            loaded = self.index.load_stored(records)  # type: ignore[attr-defined]
        self._inc("dedup/loaded", loaded)
        return loaded

    def kept_page(self, kind: str, key: int) -> tuple[str, str, int | None] | None:
        """For a shared index that keeps no URLs (:class:`crawler.backends.redis.KeptPages`)."""
        return self._store().kept_page(kind, key)

    def latest_version(self, canonical_key: int) -> tuple[int | None, int | None] | None:
        return self._store().latest_version(canonical_key)

    def stored_text(self, url: str) -> str | None:
        """The stored visible text of ``url`` (blocking), None when unknown."""
        return self._stored(url)[1]

    def _stored(self, url: str) -> tuple[bool, str | None]:
        """``(stored at all, its visible text or None)`` for ``url`` (blocking)."""
        store = self._store()
        document = store.document_by_url(url) if store is not None else None
        return document is not None, getattr(document, "text", None) or None

    async def close_spider(self) -> None:
        if self._unchecked_first is not None:
            logger.warning("%d fetched page(s) not checked for duplicates (Redis unavailable) "
                           "and not stored, first: %s",
                           self._stat(f"dedup/{REDIS_ERROR}/unchecked"), self._unchecked_first)
        if self._store_obj is not None:
            self._store_obj.close()
            self._store_obj = None

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        """After every pipeline closed (the last storage batch committed): release the index
        and the drop log."""
        try:
            self.index.close()
        except redis_errors() as exc:
            logger.debug("closing the content index: %s", exc)
        if self.droplog is not None:
            self.droplog.close()

    def batch_committed(self, documents: list[str] | None = None,
                        dropped: list[dict[str, Any]] | None = None, **_: Any) -> None:
        """Storage committed a batch: its kept pages count for other workers, and its drops
        go to the drop log (so the log names only drops, and kept pages, storage holds)."""
        commit = getattr(self.index, "commit", None)
        if commit is not None and documents and not self.redis_down:
            try:
                commit(documents)
            except redis_errors() as exc:
                self._redis_failed(exc)
        if self.droplog is not None and self.defer_droplog:
            for row in dropped or ():
                self.droplog.write(row_record(row))

    # --- items ----------------------------------------------------------------------------------
    async def process_item(self, item: Any) -> Any:
        if self.warm_since is not None:
            await self._warm_host(item)
        page = self._begin(item)
        if page is None:
            return item
        waited = False
        while not self._decide(page):  # a shared index's match is pending: ask again
            if not waited:
                waited = True
                self._inc("dedup/shared/pending_waits")
            await sleep(PENDING_POLL_SECONDS)
        stored = None
        if page.verify and page.match is not None:
            stored = await run_in_thread(self.stored_text, page.match.url)
        if self._names_unknown(page):
            page.match_names = await run_in_thread(self._stored_names, page)
        return self._finish(page, stored)

    def check(self, item: Any) -> Any:
        """Blocking :meth:`process_item`: ``item`` with fingerprints set, or DuplicatePage."""
        page = self._begin(item)
        if page is None:
            return item
        while not self._decide(page):
            time.sleep(PENDING_POLL_SECONDS)
        stored = None
        if page.verify and page.match is not None:
            stored = self.stored_text(page.match.url)
        if self._names_unknown(page):
            page.match_names = self._stored_names(page)
        return self._finish(page, stored)

    def _begin(self, item: Any) -> _Page | None:
        """Fingerprint the page; None for a binary page (passed through)."""
        adapter = ItemAdapter(item)
        if adapter.get("binary"):
            self._inc("dedup/binary")
            if not self._binary_seen:  # the first one only; the stat counts the rest
                self._binary_seen = True
                logger.info("binary body served as HTML, stored without text: %s "
                            "(further ones counted in dedup/binary)", adapter["url"])  # fmt: skip
            adapter["text"] = ""
            return None
        url = adapter["url"]
        canonical = adapter.get("canonical_url") or url
        host = template_key(canonical)
        html = adapter.get("html") or ""
        visible, blocks = self._text(adapter, html, url)
        hashes = block_hashes(blocks)
        content = self._content(host, blocks, hashes)
        simhash = self._simhash(content)
        if simhash is None:
            self._inc("dedup/too_short")
        names = adapter.get("canonical_link") or ""
        signature = PageSignature(url, canonical, self._content_hash(visible, html), simhash,
                                  names)
        return _Page(item, host, visible, hashes, content, signature)

    async def _warm_host(self, item: Any) -> None:
        """Distributed profile: the first page of a host this worker knows nothing of (a host
        taken over from another worker, or reclaimed from a dead one) teaches the template
        filter the host's pages stored in this crawl, so the worker fingerprints the host as
        its former owner did: a new owner starting young kept mirrors of pages the old owner
        had fingerprinted without the template (a duplicate group kept twice)."""
        adapter = ItemAdapter(item)
        canonical = adapter.get("canonical_url") or adapter.get("url") or ""
        host = template_key(canonical)
        if host in self._warmed or self.templates is None or self._store() is None:
            return
        self._warmed.add(host)
        if not self.templates.is_young(host):
            return
        since = datetime.fromtimestamp(self.warm_since or 0, UTC)
        pages = await run_in_thread(self._store().documents_of_origin, host, since,
                                   WARM_PAGES)
        for url, canonical_url, chash, simhash, text in pages:
            lines = [line for line in text.splitlines() if line.strip()]
            hashes = block_hashes(lines)
            kept = KeptPage(url, canonical_url, chash or "", list(zip(hashes, lines, strict=True)),
                            simhash)  # fmt: skip
            self.templates.learn(host, kept, hashes)  # their fingerprints stay as stored
        self._inc("dedup/template/warmed", len(pages))

    def _decide(self, page: _Page) -> bool:
        """Ask the index; False when its match is pending (kept by another worker, not yet
        stored: nothing was recorded, ask again later)."""
        page.match = self._check_and_add(page.signature)
        if page.match is not None and page.match.reason == PENDING:
            return False
        if page.match is not None and self._young_host_match(page):
            kept = self._recent(page.host, page.match.url)
            if kept is None:
                page.verify = True  # kept elsewhere (stored): compare with its stored text
            elif young_distinct(page.content, kept):
                self._keep_anyway(page, "dedup/template/young_distinct")
        return True

    def _finish(self, page: _Page, stored_text: str | None) -> Any:
        if page.verify:
            if stored_text is None:
                self._keep_anyway(page, "dedup/template/young_unverified")
            elif young_distinct(_line_blocks(page.text), KeptPage("", "", "", _line_blocks(
                    stored_text))):  # fmt: skip
                self._keep_anyway(page, "dedup/template/young_distinct")
        signature = page.signature
        if page.match is not None:
            if not self._canonical_wins(page):
                self._drop(signature, page.match)
            self._demote(page)
        adapter = ItemAdapter(page.item)
        adapter["content_hash"] = signature.content_hash
        adapter["simhash"] = signature.simhash
        self._inc("dedup/kept")
        kept = KeptPage(signature.url, signature.canonical_url, signature.content_hash,
                        page.content, signature.simhash)  # fmt: skip
        late = self._learn(page.host, page.hashes, kept)
        if late is not None:  # its host's template became known with it: a duplicate after all
            self._inc("dedup/kept", -1)
            self._drop(PageSignature(signature.url, signature.canonical_url,
                                     signature.content_hash, kept.simhash), late)
        return page.item

    # --- the canonical copy ---------------------------------------------------------------------
    def _names_unknown(self, page: _Page) -> bool:
        """The match is a page the index knows no canonical link of (loaded from storage)."""
        match = page.match
        return (self.prefer_canonical and match is not None and match.names is None
                and self.store_factory is not None)  # fmt: skip

    def _stored_names(self, page: _Page) -> str:
        """What the matched page names canonical, from storage (blocking)."""
        assert page.match is not None
        return self._store().canonical_link(page.match.url) or ""

    def _canonical_wins(self, page: _Page) -> bool:
        """Whether ``page`` is kept instead of its match: the match names it canonical."""
        match = page.match
        if not self.prefer_canonical or match is None:
            return False
        names = match.names if match.names is not None else page.match_names
        own = page.signature.canonical_url or page.signature.url
        kept = match.canonical_url or match.url
        if names and names == own:
            if page.signature.names == kept:  # each names the other: ignored
                self._inc("dedup/canonical/loop")
                return False
            return True
        if page.signature.names and page.signature.names == kept:
            self._inc("dedup/canonical/confirmed")  # the copy came second: dropped as usual
        return False

    def _demote(self, page: _Page) -> None:
        """Keep ``page`` instead of its match, which names it canonical: the match leaves the
        index, and storage moves it to ``dropped`` in the batch that stores ``page``."""
        match, signature = page.match, page.signature
        assert match is not None
        page.match = None
        if not self.redis_down:
            try:
                self.index.replace(match.canonical_url or match.url, signature)
            except redis_errors() as exc:
                self._redis_failed(exc)
        self._inc("dedup/canonical/swapped")
        logger.debug("canonical copy kept: %s replaces %s (%s, distance %d)", signature.url,
                     match.url, match.reason, match.distance)  # fmt: skip
        self._demoted(match.url, match.simhash, Match(match.reason, signature.url,
                      signature.simhash, match.distance), CANONICAL_RULE,
                      signature.content_hash)  # fmt: skip

    def _demoted(self, url: str, simhash: int | None, kept: Match, rule: str,
                 kept_content_hash: str | None = None) -> None:
        """``url``, stored (or queued for storage), is a duplicate of ``kept``: storage moves
        it to ``dropped`` (``rule``), or the drop log hears of it when nothing stores pages."""
        self._inc(f"dedup/{kept.reason}")
        self._inc(f"dedup/distance/{kept.distance}")
        if self.crawler is not None and self.defer_droplog:  # storage writes the drop row
            self.crawler.signals.send_catch_log(
                signal=dedup_signals.page_demoted, url=url, duplicate_of=kept.url,
                reason=kept.reason, distance=kept.distance, duplicate_simhash=kept.simhash,
                duplicate_content_hash=kept_content_hash, rule=rule)
        elif self.droplog is not None:
            self.droplog.write_drop(DuplicatePage(
                url=url, reason=kept.reason, duplicate_of=kept.url, distance=kept.distance,
                simhash=simhash, duplicate_simhash=kept.simhash, rule=rule), self._crawl_id())

    def _young_host_match(self, page: _Page) -> bool:
        """A near match on the page's own host while that host's template is unknown."""
        match = page.match
        if self.templates is None or match is None or match.reason != NEAR_DUPLICATE:
            return False
        same_host = template_key(match.canonical_url or match.url) == page.host
        return same_host and self.templates.is_young(page.host)

    def _recent(self, host: str, url: str) -> KeptPage | None:
        recent = self.templates.recent(host) if self.templates is not None else []
        return next((k for k in recent if k.url == url), None)

    def _keep_anyway(self, page: _Page, stat: str) -> None:
        s = page.signature
        self._load([(s.url, s.canonical_url, s.content_hash, s.simhash)])
        page.match = None
        page.verify = False
        self._inc(stat)

    @staticmethod
    def _text(adapter: ItemAdapter, html: str, url: str) -> tuple[str, list[str]]:
        """Visible text and fingerprint blocks: the spider's (``blocks`` set) or parsed here."""
        blocks = adapter.get("blocks")
        if blocks is None:
            text = extract(html, url, tokenize=False)
            return text.text, text.blocks
        adapter["blocks"] = None  # read once; not stored
        return adapter.get("text") or "", blocks

    def _content(self, host: str, blocks: list[str], hashes: list[int]) -> list[tuple[int, str]]:
        if self.templates is None:
            return list(zip(hashes, blocks, strict=True))
        return self.templates.content(host, blocks, hashes)

    def _simhash(self, content: list[tuple[int, str]]) -> int | None:
        """SimHash of the main blocks; None below ``min_tokens`` tokens."""
        per_block = block_tokens([block for _, block in content])
        toks = main_tokens(per_block, self.min_tokens)
        if len(toks) < max(self.min_tokens, 1):
            return None
        return fingerprint(features(toks, self.shingle))

    def _content_hash(self, text: str, html: str) -> str:
        if text.strip():
            return content_hash(text)
        self._inc("dedup/empty")
        return content_hash("\x00markup\x00" + normalize(html))

    def _drop(self, signature: PageSignature, match: Match) -> None:
        exc = DuplicatePage(
            url=signature.url,
            reason=match.reason,
            duplicate_of=match.url,
            distance=match.distance,
            simhash=signature.simhash,
            duplicate_simhash=match.simhash,
            content_hash=signature.content_hash,
        )
        self._inc(f"dedup/{match.reason}")
        self._inc(f"dedup/distance/{match.distance}")
        if self.droplog is not None and not self.defer_droplog:
            self.droplog.write_drop(exc, self._crawl_id())
        raise exc

    def _learn(self, host: str, hashes: list[int], kept: KeptPage) -> Match | None:
        """Teach the template filter a kept page; re-fingerprint the host's recent pages whose
        blocks became template. A re-fingerprinted page that now duplicates another kept page
        leaves the index and is moved to ``dropped`` (rule ``refreshed``); when that page is
        ``kept`` itself, its match is returned (the caller drops it)."""
        if self.templates is None:
            return None
        late = None
        for page in self.templates.learn(host, kept, hashes):
            simhash = self._simhash(page.blocks)
            if simhash == page.simhash:
                continue
            page.simhash = simhash
            self._inc("dedup/template/refreshed")
            match = self._refreshed(page)
            if match is None:
                continue
            self._inc("dedup/template/refreshed_duplicate")
            if page is kept:
                late = match
            else:
                self._demoted(page.url, simhash, match, REFRESHED_RULE)
        return late

    def _refreshed(self, page: KeptPage) -> Match | None:
        """Check a kept page's new fingerprint: None when it is re-recorded (distinct, or its
        match is pending), else its match (the page is then out of the index)."""
        record = (page.url, page.canonical_url, page.content_hash, page.simhash)
        if self.redis_down:
            return None
        signature = PageSignature(*record)
        try:
            match = self.index.check(signature)
            if match is None or match.reason == PENDING:
                self.index.load([record])  # type: ignore[attr-defined]
                return None
            self.index.remove(page.canonical_url or page.url)
        except redis_errors() as exc:
            self._redis_failed(exc)
            return None
        return match

    # --- Redis outage -------------------------------------------------------------------------
    def _check_and_add(self, signature: PageSignature) -> Match | None:
        """The index's decision; DropItem (unchecked) when Redis is or goes down."""
        if not self.redis_down:
            try:
                return self.index.check_and_add(signature)
            except redis_errors() as exc:
                self._redis_failed(exc)
        self._inc(f"dedup/{REDIS_ERROR}/unchecked")
        if self._unchecked_first is None:
            self._unchecked_first = signature.url
        raise DropItem(f"not checked for duplicates (Redis unavailable): {signature.url}",
                       log_level="DEBUG")

    def _load(self, records: list[Any]) -> None:
        """Record already-decided pages in the index; a Redis failure stops the crawl only."""
        if self.redis_down:
            return
        try:
            self.index.load(records)  # type: ignore[attr-defined]
        except redis_errors() as exc:
            self._redis_failed(exc)

    def _redis_failed(self, exc: Exception) -> None:
        if self.crawler is None:  # built by hand: nothing to close, the caller decides
            raise exc
        self.redis_down = True
        stop_on_redis_error(self.crawler, exc, getattr(self.index, "url", defaults.REDIS_URL))

    # --- helpers --------------------------------------------------------------------------------
    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    def _stat(self, key: str) -> int:
        return int(self.stats.get_value(key, 0)) if self.stats is not None else 0

    def _crawl_id(self) -> int | None:
        crawler = self.crawler
        if crawler is None:
            return None
        crawl_id = getattr(crawler, "dedup_crawl_id", None)
        if crawl_id is None and crawler.stats is not None:
            crawl_id = crawler.stats.get_value("dedup/crawl_id")
        return crawl_id

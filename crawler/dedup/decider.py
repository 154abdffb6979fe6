"""``ContentDecider``: one per crawler, it decides each page's fate once.

The spider asks it first (:func:`~crawler.dedup.verdict.content_decider`, then
:meth:`ContentDecider.decide`) so that a duplicate's links are not followed
(:mod:`crawler.urls.traps`), and puts the answer on the item (``PageItem.verdict``, a
:class:`~crawler.dedup.verdict.Verdict`); the near-duplicate pipeline
(:class:`crawler.pipelines.neardup.NearDuplicatePipeline`) acts on that field, or asks here
itself for an item that carries none (another spider's). The flow, for each page:

1. :class:`~crawler.dedup.pages.Fingerprinter` (steps 1 to 4 there): a binary page is passed
   through; any other gets its visible text, fingerprint blocks (the learned template of its
   origin left out), content hash and SimHash (None: too short, exact copies only).
2. A person's rules (:mod:`crawler.dedup.overrides`) first: a page a drop rule names is dropped
   (reason ``override``), a keep or distinct rule keeps a matched page.
3. The content index (``DEDUP_BACKEND``: :mod:`crawler.backends.local` or Redis, the
   :class:`~crawler.backends.ContentIndex` protocol) decides and records atomically: exact
   copy (``exact_duplicate``, distance 0), else nearest page within ``SIMHASH_MAX_DISTANCE``
   bits (``near_duplicate``), else kept. A shared index with ``off_reactor`` is awaited
   (its script call on the event loop's own connection, :mod:`crawler.backends.redis.aio`:
   the reactor serves other pages during the round trip), and the decisions then pass a gate
   one at a time in arrival order (:mod:`crawler.dedup.gate`), so each reads the templates
   and the index as it would asked inline. A shared index answers
   ``pending`` for a match that another worker kept but has not stored yet: the page waits
   (:data:`PENDING_POLL_SECONDS`, off the reactor and outside the gate; stat
   ``dedup/shared/pending_waits``) and asks again, so it is dropped only against a stored
   page, or decided anew when that worker died.
4. On a young host (its template unknown) a near match on the same host is confirmed only if
   the page adds little text of its own to it; in the distributed profile a host new to this
   worker first learns its template from storage (:mod:`crawler.dedup.hosts`). A page like its
   host's soft-404 probe is dropped (:mod:`crawler.dedup.soft404`).
5. The preferred copy (:mod:`crawler.dedup.preference`): when the new page is preferred to its
   match, it is kept instead and the match demoted (:mod:`crawler.dedup.preferred`). The
   settle step re-decides whole groups by the same order at the end (:mod:`crawler.dedup.settle`).
6. A duplicate's :class:`~crawler.vocab.Drop` is built here once and handed to
   :class:`~crawler.dedup.drops.DropWriter` (stats ``dedup/<reason>``, ``dedup/distance/<d>``),
   which takes it down to storage and the drop log. A kept page gets ``content_hash`` and
   ``simhash`` (``dedup/kept``) and teaches the template filter; an earlier page whose
   refreshed fingerprint now matches is a late drop, and so is the page itself when its own
   arrival taught the template.

**After a storage commit** (``batch_committed``, sent and awaited by the storage pipeline) two
subscribers act, each on its own and in no order that matters: this decider tells the content
index that the batch's kept pages are stored (a shared index's pending entries count for other
workers from then on), and the drop writer writes the batch's drop log lines
(:meth:`crawler.dedup.drops.DropWriter.batch_committed`).

The other parts: :mod:`crawler.dedup.stored` (what is read from storage: the index loaded at
open with ``SIMHASH_PERSIST``, a match's stored text and canonical link) and
:mod:`crawler.dedup.outage` (the Redis-outage policy: the crawl stops with ``redis_error``,
pages not checked are dropped unchecked; a database outage leaves a page undecided).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from inspect import isawaitable
from typing import TYPE_CHECKING, Any, TypeVar

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.utils.asyncio import run_in_thread, sleep

from crawler import defaults
from crawler import signals as dedup_signals
from crawler.backends import backend_name, make_content_index
from crawler.cluster.joincheck import off_when_refused
from crawler.content.template import KeptPage, TemplateFilter
from crawler.dedup.counts import Counts
from crawler.dedup.drops import DropWriter
from crawler.dedup.gate import DecisionGate
from crawler.dedup.hosts import HostTemplates
from crawler.dedup.options import DeciderSettings
from crawler.dedup.outage import GuardedIndex, StorageOutage
from crawler.dedup.overrides import DROP, Override, Overrides
from crawler.dedup.pages import Candidate, Fingerprinter
from crawler.dedup.preference import seed_hosts
from crawler.dedup.preferred import PreferenceRule
from crawler.dedup.soft404 import Soft404Pages
from crawler.dedup.stored import StoredPages
from crawler.dedup.verdict import KEPT, Verdict
from crawler.exceptions import DuplicatePage
from crawler.outputs.droplog import DropLog, DropLogOptions
from crawler.storage.engine import StorageError
from crawler.storage.overrides import load_overrides
from crawler.urls.urlnorm import UrlPolicy
from crawler.vocab import OVERRIDE, PENDING, Drop, Match, PageSignature

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from crawler.backends import ContentIndex
    from crawler.dedup.gate import Turn
    from crawler.storage import Store

logger = logging.getLogger(__name__)

#: Seconds between two questions to a shared index while a match is pending (kept by another
#: worker whose storage batch has not committed it yet).
PENDING_POLL_SECONDS = 0.1
#: The rules a crawl read at open; matched pages kept by a keep rule, by a distinct rule.
OVERRIDES_STAT = "dedup/override/rules"
OVERRIDE_KEPT_STAT = "dedup/override/kept"
OVERRIDE_DISTINCT_STAT = "dedup/override/distinct"
#: Pages preferred to a kept page a keep rule names: kept beside it, not instead of it.
OVERRIDE_PROTECTED_STAT = "dedup/override/protected"


class ContentDecider:
    """The decision flow of the module docstring.

    Built by hand (tests, benchmarks): ``index`` and the parts' options; ``store_factory``
    (or ``stored``) reads storage, ``droplog`` with ``defer_droplog`` (a storage pipeline runs)
    says where drops are logged, ``crawler`` wires signals and the outage policy."""

    def __init__(
        self,
        index: ContentIndex,
        *,
        min_tokens: int = defaults.SIMHASH_MIN_TOKENS,
        shingle: int = defaults.SIMHASH_SHINGLE,
        templates: TemplateFilter | None = None,
        droplog: DropLog | None = None,
        stats: StatsCollector | None = None,
        store_factory: Callable[[], Store] | None = None,
        defer_droplog: bool = False,
        prefer_canonical: bool = defaults.DEDUP_CANONICAL,
        k: int = defaults.SIMHASH_MAX_DISTANCE,
        stored: StoredPages | None = None,
        crawler: Crawler | None = None,
        droplog_options: DropLogOptions | None = None,
        off_reactor: bool | None = None,
    ) -> None:
        self.index = index
        # a remote index's check-and-add awaited, the reactor not held (None: the index says)
        if off_reactor is None:
            off_reactor = bool(getattr(index, "off_reactor", False))
        self.awaited = off_reactor and hasattr(index, "check_and_add_async")
        # awaited, decisions still run one at a time in arrival order
        self.gate = DecisionGate(enabled=self.awaited)
        self.stats = stats
        self.counts = Counts(stats)
        self.stored = stored or StoredPages(store_factory)
        self.guard = GuardedIndex(index, self.counts, crawler)
        self.outage = StorageOutage(self.stored.retry, self.counts, crawler)
        self.drops = DropWriter(droplog, deferred=defer_droplog, counts=self.counts,
                                crawler=crawler, options=droplog_options)  # fmt: skip
        self.fingerprinter = Fingerprinter(templates, min_tokens=min_tokens, shingle=shingle,
                                           counts=self.counts)  # fmt: skip
        self.hosts = HostTemplates(self.fingerprinter, self.guard, self.drops, self.stored,
                                   self.counts)  # fmt: skip
        self.preference = PreferenceRule(self.guard, self.drops, self.stored, self.counts,
                                        prefer_canonical)  # fmt: skip
        self.soft404s = Soft404Pages(self.fingerprinter, k, self.counts)
        self.crawler = crawler
        self.overrides = Overrides()  # a person's rules (crawler.dedup.overrides), read at open
        self.hosts.protected = self._protected
        # (STORAGE_URL, file, the URL policy the file's URLs are made canonical with)
        self.overrides_from: tuple[str | None, str, UrlPolicy | None] = (None, "", None)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *, stores: bool) -> ContentDecider:
        """The crawl's decider; ``stores``: a storage pipeline runs (drops are logged once
        committed, rules and stored pages are read from its database)."""
        settings = crawler.settings
        options = DeciderSettings.from_settings(settings)
        stored = StoredPages.from_settings(settings, options.persist)
        with off_when_refused(crawler):  # a worker refused at join writes nothing
            owner = _owner(crawler)
        index = make_content_index(settings, crawler=crawler, k=options.k,
                                   blocks=options.blocks, **_index_options(owner, stored))
        logged = DropLogOptions.from_settings(settings)
        decider = cls(
            index, min_tokens=options.min_tokens, shingle=options.shingle,
            templates=TemplateFilter(), droplog=DropLog(logged.path) if logged.path else None,
            stats=crawler.stats, stored=stored, defer_droplog=stores, crawler=crawler,
            prefer_canonical=options.prefer_canonical, k=options.k, droplog_options=logged,
        )  # fmt: skip
        decider.overrides_from = (
            settings.get("STORAGE_URL", defaults.STORAGE_URL) if stores else None,
            options.overrides_file, UrlPolicy.from_settings(settings))
        if owner and stored.enabled:  # a new host owner learns the host's template first
            from crawler.cluster.worker import member

            decider.hosts.warm_since = member(crawler).started()
        crawler.signals.connect(decider.batch_committed, signal=dedup_signals.batch_committed)
        crawler.signals.connect(decider.spider_closed, signal=signals.spider_closed)
        return decider

    # --- lifecycle ------------------------------------------------------------------------------
    async def open(self, seeds: list[str] | None = None) -> None:
        """At the spider's open: the seeds' hosts (the preference order), a person's rules,
        and the stored pages loaded into the index (``SIMHASH_PERSIST``)."""
        self.preference.seeds = seed_hosts(seeds or [])
        if any(self.overrides_from[:2]):
            self.overrides = await run_in_thread(load_overrides, *self.overrides_from)
            self.counts.inc(OVERRIDES_STAT, len(self.overrides))
            if self.overrides:
                logger.info("dedup overrides: %d rules obeyed before the SimHash decision",
                            len(self.overrides))
        if self.stored.enabled:
            loaded = await run_in_thread(self.load_stored)
            logger.info("content index: %d stored fingerprints loaded", loaded)

    def load_stored(self) -> int:
        """Load the stored documents into the index (blocking; run off the reactor)."""
        loaded = self.stored.load_into(self.index)
        self.counts.inc("dedup/loaded", loaded)
        return loaded

    async def close(self) -> None:
        """At the pipeline's close: what was left unchecked or undecided is reported."""
        self.guard.report_unchecked()
        self.outage.report()
        self.stored.close()

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        """After every pipeline closed (the last storage batch committed): release the index
        and the drop log."""
        self.guard.close()
        self.drops.close()

    async def batch_committed(self, documents: list[str] | None = None, **_: Any) -> None:
        """Storage committed a batch: its kept pages count for other workers (the storage
        writer awaits this before its next batch; the reactor is not held meanwhile)."""
        await self.guard.commit_awaited(documents or [])

    # --- decisions ------------------------------------------------------------------------------
    async def decide(self, item: Any) -> Verdict:
        """Decide ``item`` (once: the caller keeps the verdict, on the item): kept (its
        ``content_hash`` and ``simhash`` set) or the exception to raise for it."""
        try:
            await self._process(item)
        except Exception as exc:  # DuplicatePage, or an outage's DropItem
            return Verdict(exc)
        return KEPT

    def soft404(self, item: Any) -> None:
        """``item`` is a host's soft-404 probe page (:mod:`crawler.dedup.soft404`)."""
        self.soft404s.probe(item)

    async def _process(self, item: Any) -> Any:
        """:meth:`_decide_item`; a storage read that failed past its retries leaves the page
        :class:`~crawler.exceptions.Undecided` (:class:`StorageOutage`)."""
        url = str(ItemAdapter(item).get("url") or "")
        if self.outage.down:
            raise self.outage.undecided(url, "the crawl database is unavailable")
        try:
            return await self._decide_item(item)
        except StorageError as exc:
            self.outage.failed(exc)
            raise self.outage.undecided(url, "the crawl database is unavailable") from exc

    async def _decide_item(self, item: Any) -> Any:
        """The decision, in the page's turn of :attr:`gate` (:mod:`crawler.dedup.gate`)."""
        async with self.gate.turn() as turn:
            return await self._decide_in_turn(item, turn)

    async def _decide_in_turn(self, item: Any, turn: Turn) -> Any:
        if self.hosts.warm_since is not None:
            await self.hosts.warm(item)
        page = self.fingerprinter.candidate(item)
        rule = self._rule(item)
        if rule is not None and rule.action == DROP:
            raise self._overridden(item, page)
        if page is None:
            return item
        soft404 = self.soft404s.match(page)
        if soft404 is not None and rule is None:  # measured against the probe, not recorded
            raise self._duplicate(page.signature, soft404)
        await self._decide(page, turn)
        stored_text = None
        if page.verify and page.match is not None:
            stored_text = await run_in_thread(self.stored.stored_text, page.match.url)
        if self.preference.names_unknown(page):
            page.match_names = await run_in_thread(self.preference.stored_names, page)
        page.stored_text = stored_text
        return await self._waiting_out_storage(self._finish, page)

    async def _decide(self, page: Candidate, turn: Turn) -> None:
        """Ask the index until it decides: a shared index's pending match is waited for (ask
        again; outside the gate, as other pages decide meanwhile); the page is Undecided once
        the crawl closes for a failure meanwhile."""
        waited = False
        while not await self._waiting_out_storage(self._ask, page):
            if self.outage.closing():
                raise self.outage.undecided(page.signature.url,
                                            "its match waits on a page never committed")
            if not waited:
                waited = True
                self.counts.inc("dedup/shared/pending_waits")
            await turn.pause(PENDING_POLL_SECONDS)

    async def _waiting_out_storage(self, step: Callable[[Candidate], T | Awaitable[T]],
                                   page: Candidate) -> T:
        """``step(page)`` (awaited when it returns an awaitable: the index asked on its
        thread), a decision step whose storage reads (the index naming a kept page, the
        version a page replaces) come before anything it records: a transient storage error
        is waited out (:class:`StorageOutage`), then the step runs again; past the bound the
        error is raised."""
        attempt = 0
        while True:
            try:
                result = step(page)
                if isawaitable(result):
                    return await result
                return result  # type: ignore[return-value]
            except StorageError as exc:
                delay = self.outage.retrying(exc, attempt)
                if delay is None:
                    raise
                attempt += 1
                await sleep(delay)

    def _ask(self, page: Candidate) -> bool | Awaitable[bool]:
        """Ask the index; False when its match is pending (kept by another worker, not yet
        stored: nothing was recorded, ask again later). A remote index is awaited when
        :attr:`awaited` (the reactor serves other pages meanwhile; one decision at a time
        through :attr:`gate`, so the questions reach the index in the order they were asked
        here)."""
        if self.awaited:
            return self._ask_awaited(page)
        page.match = self.guard.check_and_add(page.signature)
        return self._answered(page)

    async def _ask_awaited(self, page: Candidate) -> bool:
        page.match = await self.guard.check_and_add_awaited(page.signature)
        return self._answered(page)

    def _answered(self, page: Candidate) -> bool:
        """The index's answer in ``page.match``: :meth:`_ask`'s return."""
        if page.match is None:
            return True
        if page.match.reason == PENDING:
            return False
        self._keep_anyway(page, self._overruled(page) or self.hosts.young_verdict(page))
        return True

    # --- a person's rules -------------------------------------------------------------------
    def _rule(self, item: Any) -> Override | None:
        """The keep or drop rule of a person that names the page, or None."""
        if not self.overrides:
            return None
        adapter = ItemAdapter(item)
        return self.overrides.page(str(adapter.get("canonical_url") or adapter.get("url")))

    def _overruled(self, page: Candidate) -> str | None:
        """The stat of a person's rule that keeps a matched page (a keep rule names it, or a
        distinct rule parts it from its match), else None: the match stands."""
        if not self.overrides or page.match is None:
            return None
        s, match = page.signature, page.match
        if self.overrides.kept(s.canonical_url):
            return OVERRIDE_KEPT_STAT
        if self.overrides.distinct(s.canonical_url, match.canonical_url or match.url):
            return OVERRIDE_DISTINCT_STAT
        return None

    def _protected(self, canonical_url: str, match: Match) -> bool:
        """A person's rule keeps the kept page ``canonical_url`` beside ``match`` (a keep rule
        names it, or a distinct rule parts the two): its refreshed fingerprint never demotes
        it (:class:`~crawler.dedup.hosts.HostTemplates`)."""
        return bool(self.overrides) and (self.overrides.kept(canonical_url) or bool(
            self.overrides.distinct(canonical_url, match.canonical_url or match.url)))

    def _overridden(self, item: Any, page: Candidate | None) -> DuplicatePage:
        """The drop of a page a person's drop rule names: reason ``override``, no kept page,
        its fingerprints kept (stored again if the rule goes: :mod:`crawler.dedup.settle`)."""
        url = str(ItemAdapter(item).get("url") or "")
        if page is None:
            return self.drops.dropped(Drop(url, OVERRIDE, "", None))
        s = page.signature
        return self.drops.dropped(Drop(url, OVERRIDE, "", None, s.simhash, None, s.content_hash))

    # --- acting on the decision -------------------------------------------------------------
    def _finish(self, page: Candidate) -> Any:
        """Act on the decision (run again after a storage error: a page kept anyway is no
        longer verified, a swap reads before it records)."""
        if page.verify:
            self._keep_anyway(page, self.hosts.stored_verdict(page, page.stored_text))
        if page.match is not None:
            if not self.preference.wins(page):
                raise self._duplicate(page.signature, page.match)
            if self.overrides.kept(page.match.canonical_url or page.match.url):
                self._keep_anyway(page, OVERRIDE_PROTECTED_STAT)  # the kept match stays kept
            else:
                demoted = self.preference.swap(page)
                if demoted is not None:
                    self.hosts.forget(demoted)
        return self._keep(page)

    def _keep(self, page: Candidate) -> Any:
        """The page is kept: its fingerprints set, the template filter taught."""
        signature = page.signature
        adapter = ItemAdapter(page.item)
        adapter["content_hash"] = signature.content_hash
        adapter["simhash"] = signature.simhash
        self.counts.inc("dedup/kept")
        kept = KeptPage(signature.url, signature.canonical_url, signature.content_hash,
                        page.content, signature.simhash)  # fmt: skip
        late = self.hosts.learn(page.host, page.hashes, kept)
        if late is not None and not self._protected(signature.canonical_url, late):
            # its host's template became known with it: a duplicate after all
            self.counts.inc("dedup/kept", -1)
            raise self._duplicate(replace(signature, simhash=kept.simhash), late)
        if kept.simhash != signature.simhash:  # fingerprinted again with the template it taught
            adapter["simhash"], adapter["young"] = kept.simhash, False
        return page.item

    def _keep_anyway(self, page: Candidate, stat: str | None) -> None:
        """Keep a matched page after all (``stat``; None: the match stands): recorded in the
        index as kept."""
        if stat is None:
            return
        s = page.signature
        self.guard.load([(s.url, s.canonical_url, s.content_hash, s.simhash)])
        page.match = None
        page.verify = False
        self.counts.inc(stat)

    def _duplicate(self, signature: PageSignature, match: Match) -> DuplicatePage:
        """The drop of the page being decided, handed to the drop writer once."""
        return self.drops.dropped(Drop(
            signature.url, match.reason, match.url, match.distance, signature.simhash,
            match.simhash, signature.content_hash))  # fmt: skip


def _owner(crawler: Crawler) -> str:
    """The worker whose kept pages stay pending in a shared index until its storage commits
    them (``DEDUP_BACKEND=redis`` with a shared scheduler), else ``""``."""
    if backend_name(crawler.settings) != "redis":
        return ""
    from crawler.cluster.worker import member, shared_scheduler

    return member(crawler).id if shared_scheduler(crawler.settings) else ""


def _index_options(owner: str, stored: StoredPages) -> dict[str, Any]:
    """:func:`make_content_index`'s options: ``owner=``, and ``resolver=`` the storage that
    knows kept pages' URLs (a Redis index keeps none; the local one takes it at load)."""
    options: dict[str, Any] = {"owner": owner} if owner else {}
    if stored.enabled:
        options["resolver"] = stored
    return options

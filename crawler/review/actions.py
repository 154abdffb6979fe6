"""What a person does about a decision: record an override or a review, and see it applied.

The library behind ``scrapy dropped --keep/--drop/--distinct/--unset/--review`` and the review
server's buttons (:mod:`crawler.review.serve`). Each action opens the crawl database, writes
one row (and the rules file when one is given) and answers an :class:`Outcome` with one line
for a person.

An override is applied **at once**: the settle step (:mod:`crawler.dedup.settle`) re-decides the
groups of the pages the rules name, with the settings the crawl recorded (``k``,
``SIMHASH_PERSIST``, ``DEDUP_CANONICAL``): a page a keep rule names is stored again from its
drop row (its text as the drop row kept it, ``DROPPED_TEXT_MAX_CHARS``), a stored page a drop
rule names moves to ``dropped``, and every later crawl into the database, or with the file,
obeys the rule before its SimHash decision. The moves are returned as drop-log records so the
caller can append them to ``DROPPED_LOG`` (read start to end, the log still replays to the
table).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from crawler import defaults
from crawler.content.simhash import hamming
from crawler.dedup.overrides import (
    CORRECT,
    DISTINCT,
    DROPPED_DECISION,
    HOST_PREFIX,
    KEPT_DECISION,
    VERDICTS,
    Override,
    OverrideError,
    Overrides,
    Review,
    make_override,
    read_file,
    write_rule,
)
from crawler.outputs.droplog import DropLog, row_record
from crawler.review.crawldb import CrawlDB
from crawler.review.explanation import crawl_thresholds, int_setting
from crawler.review.urls import resolve_url
from crawler.storage import ReviewError, StorageError, Store
from crawler.storage.overrides import load_overrides
from crawler.storage.settle import Settled
from crawler.urls.urlnorm import UrlPolicy
from crawler.vocab import KEPT_REASON, OVERRIDE

Known = Iterable[str | None] | None


@dataclass
class Outcome:
    """What an action did: the rule or review recorded, the URLs moved at once, one line for a
    person, and the drop-log records of the moves (``records``)."""

    override: Override | None = None
    review: Review | None = None
    stored: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    message: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)
    drop_log: str = ""  # the drop log the latest crawl wrote (its DROPPED_LOG, absolute)


def add_override(db_url: str, action: str, target: str, other: str = "", note: str = "",
                 file: str | None = None, known: Known = None) -> Outcome:
    """Record ``action target [other]`` (:func:`crawler.dedup.overrides.make_override`; a page URL
    may
    be any spelling ``scrapy dropped`` prints), write it to ``file`` too, and apply it."""
    with CrawlDB.open(db_url, known or ()) as db:
        crawl = _crawl_settings(db)
        rule = _checked(make_override, action, _page_key(db, target, crawl.policy, action),
                        _page_key(db, other, crawl.policy, action) if other else "", note,
                        None, crawl.policy)  # fmt: skip
        url = db.url
    if file:  # the file first: a rule the file cannot take is recorded nowhere
        _write_file(file, rule, policy=crawl.policy)
    with _store(url) as store:
        stored, replaced = store.add_override(rule)
        outcome = _apply(store, url, file, crawl, touched=[stored, *replaced])
    outcome.override, outcome.drop_log = stored, crawl.drop_log
    outcome.message = (_rule_message(stored, outcome, replaced)
                       + _text_note(url, outcome.stored, crawl.max_chars))
    return outcome


def _text_note(url: str, stored: list[str], max_chars: int) -> str:
    """A note on the pages stored again without their whole text: their drop rows kept none
    (``DROPPED_TEXT_MAX_CHARS=0``) or the first ``max_chars`` characters only."""
    with CrawlDB.open(url) as db:
        texts = [str((db.document(u) or {}).get("text") or "") for u in stored]
    bare = sum(not text for text in texts)
    cut = sum(bool(text) and max_chars > 0 and len(text) >= max_chars for text in texts)
    notes = []
    if bare:
        notes.append(f"{bare} of them without a text (their drop rows kept none: "
                     "DROPPED_TEXT_MAX_CHARS=0)")
    if cut:
        notes.append(f"{cut} of them with the first {max_chars:,} characters of their text "
                     "only (DROPPED_TEXT_MAX_CHARS)")
    return "; " + " and ".join(notes) + ": the next crawl stores them whole" if notes else ""


def remove_override(db_url: str, target: str, other: str = "", file: str | None = None,
                    known: Known = None) -> Outcome:
    """Delete the rule of ``target`` (of the pair ``target``, ``other``) from the database and
    ``file``, and settle the pages it named again by the plain rule."""
    with CrawlDB.open(db_url, known or ()) as db:
        crawl = _crawl_settings(db)
        key = _checked(make_override, DISTINCT if other else "keep",
                       _page_key(db, target, crawl.policy),
                       _page_key(db, other, crawl.policy) if other else "", "", None,
                       crawl.policy)  # fmt: skip
        url = db.url
    in_file = [r for r in (_checked(read_file, file, crawl.policy) if file else [])
               if (r.target, r.other) == (key.target, key.other)]
    with _store(url) as store:
        removed = store.remove_override(key.target, key.other)
        if not removed and not in_file:
            raise ReviewError(f"no override names {key.target}"
                              + (f" and {key.other}" if key.other else "")
                              + (f" (in the database or {file})" if file else ""))
        if in_file:
            _write_file(file or "", None, remove=key, policy=crawl.policy)
        removed += in_file
        outcome = _apply(store, url, file, crawl, touched=removed or [key])
    outcome.drop_log = crawl.drop_log
    where = " and ".join(dict.fromkeys("the database" if not r.source else
                                       r.source.rsplit(":", 1)[0] for r in removed))
    outcome.message = (f"removed the rule of {key.target} from {where}"
                       + _moves(outcome, "; the plain rule now decides"))
    return outcome


def add_review(db_url: str, url: str, verdict: str, other: str | None = None, note: str = "",
               known: Known = None) -> Outcome:
    """Record a person's ``verdict`` (correct | wrong) on the decision about ``url``: its drop
    (against its kept page, or ``other``) or, for a stored page, its being kept beside
    ``other``."""
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict {verdict!r}: use correct or wrong")
    with CrawlDB.open(db_url, known or ()) as db:
        review = _decision(db, resolve_url(db, url, dropped=True), other, note)
        review = replace(review, verdict=verdict)
        where = db.url
    with _store(where) as store:
        stored = store.add_review(review)
    what = (f"the drop of {stored.url} as a duplicate of {stored.other}"
            if stored.decision == DROPPED_DECISION else
            f"keeping {stored.url} beside {stored.other}")
    hint = ""
    if stored.verdict != CORRECT and stored.decision == DROPPED_DECISION:
        hint = f"; to store it: scrapy dropped --keep {stored.url}"
    return Outcome(review=stored, message=f"reviewed {what}: {stored.verdict}{hint}")


def listed_overrides(db_url: str, file: str | None = None, known: Known = None,
                     ) -> list[Override]:
    """The database's rules, oldest first, then the file's in file order (a file line
    replaces a database rule of its target when a crawl reads both), as :func:`crawl_rules`
    reads them."""
    with CrawlDB.open(db_url, known or ()) as db:
        return crawl_rules(db, file).rules


def listed_reviews(db_url: str, known: Known = None) -> list[Review]:
    with CrawlDB.open(db_url, known or ()) as db:
        return db.reviews()


def standing(db: CrawlDB, url: str, file: str | None = None
             ) -> tuple[list[Override], list[Review]]:
    """The rules that name the page ``url`` (the database's and the file's, as a crawl reads
    them: its keep or drop rule first, then the distinct rules of its pairs) and its reviews:
    what ``--explain`` adds to an explanation."""
    row = db.document(url) or db.dropped_row(url)
    canonical = str((row or {}).get("canonical_url") or url)
    rules = crawl_rules(db, file)
    page = rules.page(canonical)
    pairs = [r for r in rules if r.action == DISTINCT and canonical in (r.target, r.other)]
    return ([page] if page else []) + pairs, db.reviews(url)


def crawl_rules(db: CrawlDB, file: str | None = None) -> Overrides:
    """The rules a crawl into ``db`` obeys: the database's, then ``file``'s (its URLs made
    canonical by the latest crawl's ``URLNORM_*``); :class:`ReviewError` for a bad line."""
    policy = _crawl_settings(db).policy
    return Overrides(db.overrides() + (_checked(read_file, file, policy) if file else []))


def log_moves(path: str | None, records: list[dict[str, Any]]) -> str:
    """Append the moves of a rule to the drop log at ``path`` when that file exists (so it
    still replays to the table): one line for a person saying where they went, or why not."""
    if not records:
        return ""
    if not path or not os.path.isfile(path):
        return ("the moves are in the database only: " + (
            f"the crawl's drop log {path} is gone" if path else
            "the crawl recorded no drop log") + " (-s DROPPED_LOG=FILE appends them to FILE)")
    log = DropLog(path)
    try:
        for row in records:
            log.write(row_record(row))
    except OSError as exc:
        return f"the drop log {path} could not be appended: {exc.strerror or exc}"
    finally:
        log.close()
    return f"{len(records)} move(s) appended to the drop log {path}"


# --- pieces -------------------------------------------------------------------------------


def _checked(build: Any, *args: Any) -> Any:
    try:
        return build(*args)
    except OverrideError as exc:
        raise ReviewError(str(exc)) from None


def _page_key(db: CrawlDB, spelling: str, policy: UrlPolicy, action: str = "keep") -> str:
    """A page target as the rules compare it: the canonical URL of the stored or dropped page
    ``spelling`` names (any printed spelling), else ``spelling`` itself (a pattern, a host, a
    page not crawled yet)."""
    text = spelling.strip()
    if not text or "*" in text or text.lower().startswith(HOST_PREFIX):
        return text
    del policy  # a page found is keyed by its stored canonical URL; else make_override's
    url = resolve_url(db, text, dropped=True)
    row = db.dropped_row(url) or db.document(url)
    return str(row.get("canonical_url") or row["url"]) if row else text


def _decision(db: CrawlDB, url: str, other: str | None, note: str) -> Review:
    """The decision about ``url`` a review judges (its verdict left to the caller): its drop
    against its kept page (or against ``other``, the distance then between the two), or a
    stored page kept beside ``other``."""
    drop = db.dropped_row(url)
    document = db.document(url)
    if drop is not None and (document is None or other is None):
        if drop.get("reason") == OVERRIDE:
            rule = Overrides(db.overrides()).page(str(drop.get("canonical_url") or url))
            undo = (f"scrapy dropped --unset {shlex.quote(rule.target)} gives it back to the "
                    "dedup rule" if rule else "the rule is in DEDUP_OVERRIDES_FILE")
            raise ReviewError(f"{url} was dropped by a person's rule, not by a decision to "
                              f"review: {undo}")
        if other is None:
            return Review(drop["url"], str(drop.get("duplicate_of") or ""), DROPPED_DECISION,
                          CORRECT, str(drop.get("reason") or ""), drop.get("distance"), note,
                          crawl_id=drop.get("crawl_id"))  # fmt: skip
        pair = _page(db, other)
        return Review(drop["url"], pair["url"], DROPPED_DECISION, CORRECT,
                      str(drop.get("reason") or ""), _distance(drop, pair), note,
                      crawl_id=drop.get("crawl_id"))  # fmt: skip
    if document is None:
        raise ReviewError(f"{url} is neither stored nor dropped in {db.masked_url}")
    if not other:
        raise ReviewError(f"{url} is stored: name the page it was kept beside (--other URL)")
    pair = _page(db, other)
    return Review(document["url"], pair["url"], KEPT_DECISION, CORRECT, "",
                  _distance(document, pair), note, crawl_id=document.get("crawl_id"))


def _page(db: CrawlDB, spelling: str) -> dict[str, Any]:
    """The stored or dropped page ``spelling`` names; :class:`ReviewError` when none."""
    url = resolve_url(db, spelling)
    row = db.document(url) or db.dropped_row(url)
    if row is None:
        raise ReviewError(f"{spelling} is neither stored nor dropped in {db.masked_url}")
    return row


def _distance(a: dict[str, Any], b: dict[str, Any]) -> int | None:
    """The bits between two pages' SimHashes (0 for one content hash; None without)."""
    if a.get("content_hash") and a.get("content_hash") == b.get("content_hash"):
        return 0
    x, y = a.get("simhash"), b.get("simhash")
    return hamming(x, y) if x is not None and y is not None else None


@contextmanager
def _store(url: str) -> Iterator[Store]:
    """The database opened for writing; any storage error (a read-only file, a server gone)
    is one :class:`ReviewError` line."""
    try:
        with Store(url, create=False) as store:
            yield store
    except StorageError as exc:
        raise ReviewError(str(exc)) from None


def _write_file(path: str, rule: Override | None, remove: Override | None = None,
                policy: UrlPolicy | None = None) -> None:
    try:
        write_rule(path, rule, remove, policy)
    except (OverrideError, OSError) as exc:
        raise ReviewError(f"overrides file {path}: {exc}") from None


def _apply(store: Store, url: str, file: str | None, crawl: CrawlSettings,
           touched: Iterable[Override] = ()) -> Outcome:
    """Settle the groups of every page a rule (or a new, replaced or removed one) names, with
    the settings of the latest crawl; the moves as an :class:`Outcome`."""
    try:
        rules = load_overrides(url, file or "", crawl.policy)
        scopes = [None] if crawl.persist else [[c.id] for c in store.crawls()]
        done = [store.settle(crawl.k, scope=scope, prefer_canonical=crawl.prefer_canonical,
                             overrides=rules, touched=Overrides(touched), named_only=True,
                             max_chars=crawl.max_chars) for scope in scopes]
    except (StorageError, OverrideError) as exc:
        raise ReviewError(str(exc)) from None
    return _outcome(done)


class CrawlSettings(NamedTuple):
    """What applying a rule at once reads of the settings the latest crawl recorded."""

    k: int  # SIMHASH_MAX_DISTANCE
    persist: bool  # SIMHASH_PERSIST
    prefer_canonical: bool  # DEDUP_CANONICAL
    max_chars: int  # DROPPED_TEXT_MAX_CHARS: text kept by a page demoted now
    policy: UrlPolicy  # URLNORM_*: how a URL of a rule is made canonical
    drop_log: str  # DROPPED_LOG, absolute ("": none recorded)


def _crawl_settings(db: CrawlDB) -> CrawlSettings:
    """The latest crawl's recorded settings (project defaults for those it lacks)."""
    settings = db.crawl()["settings"] if db.crawl_ids() else {}
    k, _ = crawl_thresholds(settings)
    try:
        policy = UrlPolicy.from_settings(settings)
    except ValueError:  # recorded by another version: the canonical form of today's defaults
        policy = UrlPolicy()
    return CrawlSettings(
        k, bool(int_setting(_flag(settings.get("SIMHASH_PERSIST")),
                            int(defaults.SIMHASH_PERSIST))),
        bool(int_setting(_flag(settings.get("DEDUP_CANONICAL")),
                         int(defaults.DEDUP_CANONICAL))),
        int_setting(settings.get("DROPPED_TEXT_MAX_CHARS"), defaults.DROPPED_TEXT_MAX_CHARS),
        policy, str(settings.get("DROPPED_LOG") or ""))  # fmt: skip


def _flag(value: object) -> object:
    """A recorded boolean setting as 1/0 (``True``, ``"false"``...); None when absent."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return int(value.lower() == "true")
    return int(value) if isinstance(value, bool) else value


def _outcome(done: Iterable[Settled]) -> Outcome:
    outcome = Outcome()
    for settled in done:
        outcome.records += settled.rows
        for row in settled.rows:
            if row["reason"] == KEPT_REASON:
                outcome.stored.append(row["url"])
            elif row.get("rule") != "repointed":
                outcome.dropped.append(row["url"])
    return outcome


def _moves(outcome: Outcome, none: str = "") -> str:
    parts = []
    if outcome.stored:
        parts.append(f"stored again: {', '.join(outcome.stored[:5])}"
                     + (f" (+{len(outcome.stored) - 5})" if len(outcome.stored) > 5 else ""))
    if outcome.dropped:
        parts.append(f"moved to dropped: {', '.join(outcome.dropped[:5])}"
                     + (f" (+{len(outcome.dropped) - 5})" if len(outcome.dropped) > 5 else ""))
    return "; " + "; ".join(parts) if parts else none


def _rule_message(rule: Override, outcome: Outcome, replaced: list[Override]) -> str:
    was = ""
    if replaced:
        was = (f" (replacing {replaced[0].action})" if replaced[0].action != rule.action
               else " (already recorded: its note and date renewed)")
    return (f"recorded: {rule.action} {rule.target}{' ' + rule.other if rule.other else ''}"
            f"{was}" + _moves(outcome, "; nothing stored changes now") +
            "; every later crawl into this database obeys it")

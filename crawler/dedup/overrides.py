"""A person's word over the dedup rule: overrides every later crawl obeys, and review marks.

An **override** is written once (``scrapy dropped --keep URL``, the review server's buttons, or
a line of a plain file kept in version control, ``DEDUP_OVERRIDES_FILE``) and applied by every
later crawl and by the settle step, before the SimHash decision:

``keep TARGET``
    the page is kept whatever its fingerprint: never dropped as a duplicate, never demoted.
    Other pages are still dropped against it (it is a kept page like any other).
``drop TARGET``
    the page is never stored: dropped with reason ``override`` (no ``duplicate_of``).
``distinct URL OTHER``
    the two pages are never duplicates of each other, whatever their distance (each may still
    duplicate a third page).

A TARGET is a URL (compared by its canonical key), a URL with ``*`` wildcards
(``https://example.com/print/*``: ``*`` matches any characters, ``/`` included) or ``host:NAME``
(the host and its subdomains). When several keep/drop rules match a page, the most specific one
wins: a URL before a pattern (the longer pattern first) before a host (the longer name first);
for one target, the newest rule replaces the older.

A **review** is a person's verdict on one decision (``correct`` or ``wrong``), kept with the
decision it judged; :attr:`Review.label` turns it into a label (``duplicate`` or ``distinct``)
that the report scores the threshold against.

The file format, one rule per line (``#`` starts a comment line; `` # `` after a rule starts
its note)::

    keep https://example.com/a            # wrongly dropped as a copy of /b
    distinct https://example.com/x https://example.com/y
    drop https://example.com/print/*
    keep host:docs.example.com

Plain Python: the content decider, the settle step, the commands and the review server share it.
"""

from __future__ import annotations

__floor__ = "library"

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path

from crawler import defaults
from crawler.config import SettingError, SettingsLike
from crawler.dedup.preference import host_of
from crawler.state.atomicfile import write_atomic
from crawler.urls.urlnorm import InvalidUrl, UrlPolicy, normalize_url

KEEP, DROP, DISTINCT = "keep", "drop", "distinct"
ACTIONS = (KEEP, DROP, DISTINCT)
CORRECT, WRONG = "correct", "wrong"
VERDICTS = (CORRECT, WRONG)
DUPLICATE, NOT_DUPLICATE = "duplicate", "distinct"
DROPPED_DECISION, KEPT_DECISION = "dropped", "kept"
HOST_PREFIX = "host:"
NOTE_MARK = " # "


class OverrideError(ValueError):
    """A rule, target or file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Override:
    """One rule (module docstring). ``id``: its ``overrides`` row (None: from a file);
    ``source``: ``""`` (the database) or ``FILE:LINE``."""

    action: str
    target: str
    other: str = ""
    note: str = ""
    created_at: datetime | None = None
    id: int | None = None
    source: str = ""

    def describe(self) -> str:
        """``keep https://h/a (2026-12-04)``: the rule and where or when it was written."""
        rule = " ".join(part for part in (self.action, self.target, self.other) if part)
        when = self.created_at.date().isoformat() if self.created_at else self.source
        return f"{rule} ({when})" if when else rule

    def line(self) -> str:
        """The rule as a line of an overrides file."""
        rule = " ".join(part for part in (self.action, self.target, self.other) if part)
        return rule + (NOTE_MARK + self.note if self.note else "")

    @property
    def specificity(self) -> tuple[int, int]:
        """Smaller wins: a URL, then a pattern, then a host; longer first within a kind."""
        if self.target.startswith(HOST_PREFIX):
            return 2, -len(self.target)
        return (1 if "*" in self.target else 0), -len(self.target)


@dataclass(frozen=True)
class Review:
    """A person's verdict on one decision: ``url`` was ``decision`` (dropped as a duplicate
    of ``other``, or kept beside it) and the person says it was ``verdict``."""

    url: str
    other: str
    decision: str
    verdict: str
    reason: str = ""
    distance: int | None = None
    note: str = ""
    reviewed_at: datetime | None = None
    crawl_id: int | None = None
    id: int | None = None

    @property
    def label(self) -> str:
        """:data:`DUPLICATE` or :data:`NOT_DUPLICATE`: what the pair truly is, by the person."""
        dropped = self.decision == DROPPED_DECISION
        return DUPLICATE if dropped == (self.verdict == CORRECT) else NOT_DUPLICATE


def canonical_target(target: str, action: str = KEEP, policy: UrlPolicy | None = None) -> str:
    """``target`` in the form rules are compared in (a URL by its canonical key under the
    crawl's ``policy``, a pattern with its host lower-cased, ``host:name[:port]``
    lower-cased); :class:`OverrideError` when it is none of the three."""
    target = target.strip()
    if not target:
        raise OverrideError(f"{action} needs a URL, a URL pattern with * or host:NAME")
    if target.lower().startswith(HOST_PREFIX):
        name = target[len(HOST_PREFIX):].strip().lower().rstrip(".")
        if not name or any(c in name for c in "/ *?#@") or name.endswith(":"):
            raise OverrideError(f"{target!r} is not host:NAME (e.g. host:example.com, "
                                "host:localhost:8080)")
        return HOST_PREFIX + name
    if "*" in target:
        return _pattern(target)
    try:
        return normalize_url(target, policy=policy)
    except InvalidUrl as exc:
        raise OverrideError(f"{target!r} is not a URL ({exc})") from None


def _pattern(target: str) -> str:
    scheme, sep, rest = target.partition("://")
    if not sep or not scheme or not rest:
        raise OverrideError(f"{target!r}: a pattern is a URL with * (https://example.com/a/*)")
    authority, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{authority.lower()}{slash}{path}"


def make_override(action: str, target: str, other: str = "", note: str = "",
                  created_at: datetime | None = None, policy: UrlPolicy | None = None,
                  ) -> Override:
    """A checked :class:`Override` with its targets in canonical form (URLs under the crawl's
    ``policy``: ``URLNORM_*``)."""
    action = action.strip().lower()
    if action not in ACTIONS:
        raise OverrideError(f"{action!r} is not an override: use keep, drop or distinct")
    target = canonical_target(target, action, policy)
    if action == DISTINCT:
        if not other.strip():
            raise OverrideError("distinct needs two URLs: distinct URL OTHER")
        other = canonical_target(other, action, policy)
        if target.startswith(HOST_PREFIX) or "*" in target + other or \
                other.startswith(HOST_PREFIX):
            raise OverrideError("distinct takes two page URLs, not patterns or hosts")
        if other == target:
            raise OverrideError(f"distinct {target}: the two URLs are the same page")
        target, other = sorted((target, other))
    elif other:
        raise OverrideError(f"{action} takes one target, not two ({other!r})")
    return Override(action, target, other, " ".join(note.split()), created_at)


class Overrides:
    """A rule set, as a crawl and the settle step obey it (module docstring).

    Indexed so that a page costs a few dictionary lookups whatever the number of rules: URL
    rules by URL, patterns by the host they name (a pattern with ``*`` in its host is tried on
    every page), host rules by name, tried from the page's whole host to its parent domains."""

    def __init__(self, rules: Iterable[Override] = ()) -> None:
        self.rules = list(rules)
        self._exact: dict[str, Override] = {}
        self._pairs: dict[tuple[str, str], Override] = {}
        self._patterns: dict[str, Override] = {}  # target -> rule (the latest of the target)
        self._hosts: dict[str, Override] = {}  # host[:port] -> rule
        for rule in self.rules:
            self._add(rule)
        self._by_host: dict[str, list[tuple[Override, re.Pattern[str]]]] = {}
        self._wild: list[tuple[Override, re.Pattern[str]]] = []
        for rule in sorted(self._patterns.values(), key=lambda r: r.specificity):
            authority = rule.target.partition("://")[2].partition("/")[0]
            entry = (rule, _glob(rule.target))
            if "*" in authority:
                self._wild.append(entry)
            else:
                self._by_host.setdefault(authority.rpartition("@")[2], []).append(entry)

    def _add(self, rule: Override) -> None:
        """Later rules for one target replace earlier ones (rules come oldest first)."""
        if rule.action == DISTINCT:
            self._pairs[(rule.target, rule.other)] = rule
        elif rule.target.startswith(HOST_PREFIX):
            self._hosts[rule.target[len(HOST_PREFIX):]] = rule
        elif "*" in rule.target:
            self._patterns[rule.target] = rule
        else:
            self._exact[rule.target] = rule

    def __len__(self) -> int:
        return len(self._exact) + len(self._pairs) + len(self._patterns) + len(self._hosts)

    def __iter__(self) -> Iterator[Override]:
        yield from self._exact.values()
        yield from self._patterns.values()
        yield from self._hosts.values()
        yield from self._pairs.values()

    def page(self, canonical_url: str) -> Override | None:
        """The keep or drop rule that applies to the page, or None: its URL's rule, else the
        most specific pattern that matches it, else the rule of its host or the nearest
        parent domain (``host:NAME:PORT`` only on that port)."""
        rule = self._exact.get(canonical_url)
        if rule is not None or not (self._patterns or self._hosts):
            return rule
        netloc = host_of(canonical_url)
        best: Override | None = None
        for rule, glob in (*self._by_host.get(netloc, ()), *self._wild):
            if (best is None or rule.specificity < best.specificity) and glob.fullmatch(
                    canonical_url):
                best = rule
        return best or (self._host_rule(netloc) if self._hosts else None)

    def _host_rule(self, netloc: str) -> Override | None:
        host, port = netloc, ""
        if not netloc.endswith("]") and netloc.count(":") == 1:
            host, port = netloc.split(":")
        elif "]:" in netloc:
            host, port = netloc.rsplit(":", 1)
        labels = [host] if host.startswith("[") else host.split(".")
        for i in range(len(labels)):
            name = ".".join(labels[i:])
            rule = (self._hosts.get(f"{name}:{port}") if port else None) or self._hosts.get(name)
            if rule is not None:
                return rule
        return None

    def kept(self, canonical_url: str) -> bool:
        rule = self.page(canonical_url)
        return rule is not None and rule.action == KEEP

    def dropped(self, canonical_url: str) -> bool:
        rule = self.page(canonical_url)
        return rule is not None and rule.action == DROP

    def distinct(self, a: str, b: str) -> Override | None:
        """The rule saying ``a`` and ``b`` are never duplicates, or None."""
        return self._pairs.get((a, b) if a <= b else (b, a)) if self._pairs else None

    @cached_property
    def pair_urls(self) -> frozenset[str]:
        """Every URL named by a distinct rule."""
        return frozenset(u for pair in self._pairs for u in pair)


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


# --- the file ------------------------------------------------------------------------------


def overrides_file(settings: SettingsLike) -> str:
    """``DEDUP_OVERRIDES_FILE``, its rules read and checked now (a bad line stops the crawl
    before it starts, naming the file and line); ``""`` when unset."""
    path = str(settings.get("DEDUP_OVERRIDES_FILE") or defaults.DEDUP_OVERRIDES_FILE).strip()
    if path:
        try:
            read_file(path, UrlPolicy.from_settings(settings))
        except OverrideError as exc:
            raise SettingError("DEDUP_OVERRIDES_FILE", path, f"a readable rules file ({exc})"
                               ) from None
    return path


def parse_line(line: str, where: str, policy: UrlPolicy | None = None) -> Override | None:
    """The rule of one file line (None: blank or a comment); :class:`OverrideError` naming
    ``where`` (``FILE:LINE``) for a bad one."""
    rule, _, note = line.lstrip("\ufeff").partition(NOTE_MARK)
    words = rule.split()
    if not words or words[0].startswith("#"):
        return None
    try:
        if len(words) > 3 or len(words) < 2:
            raise OverrideError("a rule is: keep|drop TARGET, or distinct URL OTHER")
        override = make_override(words[0], words[1], words[2] if len(words) == 3 else "",
                                 note.strip(), None, policy)  # fmt: skip
    except OverrideError as exc:
        raise OverrideError(f"{where}: {exc}") from None
    return replace(override, source=where)


def read_file(path: str | Path, policy: UrlPolicy | None = None) -> list[Override]:
    """The rules of an overrides file, in file order (URLs made canonical under the crawl's
    ``policy``); a missing file has none."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise OverrideError(f"overrides file {path}: cannot read it ({exc})") from None
    rules = (parse_line(line, f"{path}:{n}", policy)
             for n, line in enumerate(text.splitlines(), 1))
    return [rule for rule in rules if rule is not None]


def write_rule(path: str | Path, rule: Override | None, remove: Override | None = None,
               policy: UrlPolicy | None = None) -> None:
    """Add ``rule`` to the file (after removing the lines for its target, and those of
    ``remove``), keeping every other line, comments included. Written whole, then renamed."""
    path = Path(path)
    gone = {rule_key(r) for r in (rule, remove) if r is not None}
    kept: list[str] = []
    for n, line in enumerate(_lines(path), 1):
        old = parse_line(line, f"{path}:{n}", policy)
        if old is None or rule_key(old) not in gone:
            kept.append(line)
    if rule is not None:
        kept.append(rule.line())
    write_atomic(path, "".join(line + "\n" for line in kept))


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return ["# dedup overrides: keep|drop TARGET, distinct URL OTHER (scrapy dropped --help)"]
    except (OSError, UnicodeDecodeError) as exc:
        raise OverrideError(f"overrides file {path}: cannot read it ({exc})") from None


def rule_key(rule: Override) -> tuple[str, str]:
    """Rules with one key replace each other: keep and drop of one target, one distinct pair."""
    return (rule.target, rule.other) if rule.action == DISTINCT else (rule.target, "")

"""Traps that end by themselves: what a crawl learns about a host while it crawls it.

The path-shaped traps (:class:`crawler.urls.linkrules.TrapLimits`) are caught by the shape of one
URL (their settings and this module's have one home: :class:`TrapSettings`). The traps of
the real web hide in the query string and in the content: session IDs (every page links its
siblings with a fresh ``?sid=``), calendars (a next day forever), soft 404s (every unknown
path answers 200 with the same page). The spider ends them with what the
content dedup already tells it:

* the links of a page dropped as a duplicate are not followed (``TRAP_FOLLOW_LINKS_OF``:
  ``kept`` pages only, the default; ``near_duplicates`` too; ``all``, every page's, as
  before): a session-ID loop stops after a handful of pages, a calendar at its first near
  duplicate day;
* :class:`ParamLearner`: a query parameter whose value changes while the content does not is
  learned per host and folded out of the canonical key (``TRAP_LEARN_PARAMS_AFTER``
  duplicates differing only in it); a parameter seen to matter (two kept pages that differ only
  in its value, ``?page=1`` and ``?page=2``) is never learned;
* :class:`CrawlBudget`: per-host budgets, requests scheduled per host (``TRAP_HOST_MAX_PAGES``)
  and per path with only the query changing (``TRAP_PATH_MAX_QUERY_VARIANTS``);
* :func:`probe_path`: the never-linked path of a host's soft-404 probe.

No Scrapy here; the spider wires these in (:mod:`crawler.spiders.web`).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawler import config, defaults
from crawler.urls.urlnorm import url_host
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, OVERRIDE, Drop, reason_words

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from crawler.config import SettingsLike

logger = logging.getLogger(__name__)

#: Entries a :class:`ParamLearner` or :class:`CrawlBudget` table holds before it stops
#: recording (learner) or is emptied (budget): bounded memory on a crawl of any size.
TABLE_SIZE = 1_000_000
#: The largest ``TRAP_DUPLICATE_HOPS``: past it a chain of duplicates is a trap, not a site.
MAX_DUPLICATE_HOPS = 16


@dataclass(frozen=True)
class TrapSettings:
    """Every ``TRAP_*`` setting and ``URLLENGTH_LIMIT``, read and checked here once.

    :class:`TrapRules` takes the traps that end by themselves (the first six fields),
    :class:`crawler.urls.linkrules.TrapLimits` the path-shaped ones (the last four:
    :meth:`~crawler.urls.linkrules.TrapLimits.of`)."""

    follow_links_of: str = defaults.TRAP_FOLLOW_LINKS_OF
    learn_params_after: int = defaults.TRAP_LEARN_PARAMS_AFTER
    host_max_pages: int = defaults.TRAP_HOST_MAX_PAGES
    path_max_query_variants: int = defaults.TRAP_PATH_MAX_QUERY_VARIANTS
    soft404_probe: bool = defaults.TRAP_SOFT404_PROBE
    duplicate_hops: int = defaults.TRAP_DUPLICATE_HOPS
    max_segment_repeat: int = defaults.TRAP_MAX_SEGMENT_REPEAT
    max_path_depth: int = defaults.TRAP_MAX_PATH_DEPTH
    max_query_params: int = defaults.TRAP_MAX_QUERY_PARAMS
    max_length: int = defaults.URLLENGTH_LIMIT  # 0: no length limit

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> TrapSettings:
        """Read and check the settings (SettingError on a bad value): a budget or count of 0
        turns it off; the path limits are each >= 1, ``URLLENGTH_LIMIT`` >= 0 (0: none)."""
        def count(name: str, lo: int = 0) -> int:
            return config.get_int(settings, name, getattr(defaults, name), lo=lo)

        return cls(
            follow_links_of=config.get_choice(settings, "TRAP_FOLLOW_LINKS_OF",
                                              defaults.TRAP_FOLLOW_LINKS_OF,
                                              defaults.TRAP_FOLLOW_LINKS_CHOICES),
            learn_params_after=count("TRAP_LEARN_PARAMS_AFTER"),
            host_max_pages=count("TRAP_HOST_MAX_PAGES"),
            path_max_query_variants=count("TRAP_PATH_MAX_QUERY_VARIANTS"),
            soft404_probe=config.get_bool(settings, "TRAP_SOFT404_PROBE",
                                          defaults.TRAP_SOFT404_PROBE),
            duplicate_hops=config.get_int(settings, "TRAP_DUPLICATE_HOPS",
                                          defaults.TRAP_DUPLICATE_HOPS, lo=0,
                                          hi=MAX_DUPLICATE_HOPS),
            max_segment_repeat=count("TRAP_MAX_SEGMENT_REPEAT", lo=1),
            max_path_depth=count("TRAP_MAX_PATH_DEPTH", lo=1),
            max_query_params=count("TRAP_MAX_QUERY_PARAMS", lo=1),
            max_length=count("URLLENGTH_LIMIT"),
        )  # fmt: skip


def split_query(canonical: str) -> tuple[str, dict[str, str] | None]:
    """``(URL up to the query, {name: value})`` of a canonical URL; None for a query that
    names a parameter twice (no single value to reason about)."""
    head, _, query = canonical.partition("?")
    pairs = [piece.partition("=") for piece in query.split("&") if piece]
    params = {name: value for name, _, value in pairs}
    return head, params if len(params) == len(pairs) else None


@dataclass
class ParamLearner:
    """Learns, per host, the query parameters that do not change a page (module doc).

    :meth:`duplicate` takes the evidence of a page dropped as a duplicate of another on the
    same path; :meth:`kept` the counter-evidence of kept pages. A parameter is learned when
    ``after`` duplicates differed from their kept page in it (and in at most one other), and
    it was never seen to matter.
    """

    after: int = defaults.TRAP_LEARN_PARAMS_AFTER
    size: int = TABLE_SIZE
    learned: dict[str, set[str]] = field(default_factory=dict)
    _evidence: dict[tuple[str, str], int] = field(default_factory=dict)
    _matters: set[tuple[str, str]] = field(default_factory=set)
    _kept: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def kept(self, canonical: str) -> None:
        """A page was kept: each parameter whose value alone tells it from another kept
        page matters on its host."""
        head, params = split_query(canonical)
        if not self.after or not params:
            return
        host = url_host(canonical)
        for name, value in params.items():
            rest = "&".join(f"{n}={v}" for n, v in params.items() if n != name)
            key = (head, name, rest)
            other = self._kept.get(key)
            if other is None:
                if len(self._kept) < self.size:
                    self._kept[key] = value
            elif other != value:
                self._matters.add((host, name))

    def duplicate(self, canonical: str, original: str) -> list[str]:
        """A page was dropped as a duplicate of ``original`` (both canonical): the
        parameters of its host learned by this evidence (usually none)."""
        if not self.after:
            return []
        head, params = split_query(canonical)
        other_head, other = split_query(original)
        if head != other_head or params is None or other is None:
            return []
        differ = [n for n in params.keys() | other.keys() if params.get(n) != other.get(n)]
        if not 1 <= len(differ) <= 2:
            return []
        host = url_host(canonical)
        return [name for name in sorted(differ) if self._evidence_for(host, name)]

    def _evidence_for(self, host: str, name: str) -> bool:
        """Count one duplicate differing in ``name``; True when that learns it."""
        key = (host, name)
        if key in self._matters or name in self.learned.get(host, ()):
            return False
        seen = self._evidence[key] = self._evidence.get(key, 0) + 1
        if seen < self.after:
            return False
        self.learned.setdefault(host, set()).add(name)
        return True


class CrawlBudget:
    """Requests scheduled per host and per path whose query alone changes, against the
    budgets; :meth:`refuse` answers the ``urlnorm/trap/<kind>`` key of an exhausted one."""

    def __init__(self, host_max_pages: int = defaults.TRAP_HOST_MAX_PAGES,
                 path_max_query_variants: int = defaults.TRAP_PATH_MAX_QUERY_VARIANTS,
                 size: int = TABLE_SIZE) -> None:
        self.host_max_pages = host_max_pages
        self.path_max_query_variants = path_max_query_variants
        self.size = size
        self._hosts: dict[str, int] = {}
        self._paths: dict[str, int] = {}

    def refuse(self, canonical: str) -> str | None:
        """The stats key of the budget ``canonical`` would exceed, or None."""
        if self.host_max_pages and self._hosts.get(url_host(canonical), 0) >= self.host_max_pages:
            return "urlnorm/trap/host_pages"
        if self.path_max_query_variants and "?" in canonical:
            path = canonical.partition("?")[0]
            if self._paths.get(path, 0) >= self.path_max_query_variants:
                return "urlnorm/trap/query_variants"
        return None

    def count(self, canonical: str, step: int = 1) -> None:
        """A request for ``canonical`` was scheduled (``step`` 1) or dropped after all (-1)."""
        if self.host_max_pages:
            host = url_host(canonical)
            self._hosts[host] = self._hosts.get(host, 0) + step
        if self.path_max_query_variants and "?" in canonical:
            if len(self._paths) >= self.size:
                self._paths.clear()  # bounded memory: a trap may get one more budget
            path = canonical.partition("?")[0]
            self._paths[path] = self._paths.get(path, 0) + step


def probe_path() -> str:
    """A path no site links: the soft-404 probe of a host (random, 24 hex digits)."""
    return "/" + secrets.token_hex(12)


class TrapRules:
    """The spider's side of the traps (module doc): which pages' links are followed, the
    parameters learned from decided pages, the budgets, the origins probed for soft 404s.
    ``count(key)`` counts a stat (None: nothing counted)."""

    def __init__(self, settings: TrapSettings | None = None,
                 count: Callable[[str], None] | None = None) -> None:
        self.settings = settings = settings or TrapSettings()
        self.count = count
        self.learner = ParamLearner(settings.learn_params_after)
        self.budget = CrawlBudget(settings.host_max_pages, settings.path_max_query_variants)
        self._probed: set[str] = set()
        self._logged: set[str] = set()

    def follows(self, drop: Drop | None, url: str, hops: int = 0) -> int | None:
        """The duplicate hops of the page at ``url``, decided ``drop`` (None: kept), reached
        through ``hops`` duplicates in a row; None when its links are not followed.

        A kept page (or a duplicate ``TRAP_FOLLOW_LINKS_OF`` always follows, or a page a
        person's drop rule names: not a trap, only not stored) is 0 hops; any
        other duplicate one more than the page that linked it, followed up to
        ``TRAP_DUPLICATE_HOPS``: a mirror or a session-ID loop costs that many pages deep,
        a distinct page linked only from a duplicate is still fetched. A soft 404's links
        are never followed (but with ``"all"``). Counted ``dedup/links_not_followed/<reason>``
        and, for a duplicate followed, ``dedup/links_followed_from/<reason>``."""
        follow = self.settings.follow_links_of
        if drop is None or drop.reason == OVERRIDE or follow == "all" or (
                follow == "near_duplicates" and drop.reason == NEAR_DUPLICATE):
            return 0  # a page a person's drop rule names is not stored, its links are followed
        if drop.reason in (EXACT_DUPLICATE, NEAR_DUPLICATE) and (
                hops < self.settings.duplicate_hops):
            self._count(f"dedup/links_followed_from/{drop.reason}")
            return hops + 1
        key = f"dedup/links_not_followed/{drop.reason}"
        self._count(key)
        if key not in self._logged:
            self._logged.add(key)
            logger.info("Links not followed: %s is %s of %s, %d in a row from a kept page "
                        "(trap guard, TRAP_DUPLICATE_HOPS=%d; further pages counted in %s)",
                        url, reason_words(drop.reason), drop.duplicate_of, hops + 1,
                        self.settings.duplicate_hops, key)  # fmt: skip
        return None

    def learn(self, drop: Drop | None, canonical: str, original: str | None) -> list[str]:
        """Learn from a decided page (``original``: the canonical URL of the page it
        duplicates): the parameters of its host learned now (logged, counted)."""
        if drop is None:
            self.learner.kept(canonical)
            return []
        if original is None or drop.reason not in (EXACT_DUPLICATE, NEAR_DUPLICATE):
            return []
        learned = self.learner.duplicate(canonical, original)
        host = url_host(canonical)
        for name in learned:
            self._count("urlnorm/learned_params")
            logger.info("Learned: %s ignores the query parameter %r (%d duplicate pages "
                        "differed in it); folded out of its URLs from now on (ignored on "
                        "this host: %s)", host, name, self.learner.after,
                        ", ".join(sorted(self.learner.learned[host])))  # fmt: skip
        return learned

    def unprobed(self, canonicals: Iterable[str]) -> list[str]:
        """The origins (``scheme://authority``) of ``canonicals`` to probe for a soft 404
        now (each once; none with ``TRAP_SOFT404_PROBE`` off)."""
        if not self.settings.soft404_probe:
            return []
        origins = []
        for canonical in canonicals:
            origin = origin_of(canonical)
            if origin and origin not in self._probed:
                self._probed.add(origin)
                origins.append(origin)
        return origins

    def _count(self, key: str) -> None:
        if self.count is not None:
            self.count(key)


def origin_of(canonical: str) -> str:
    """``scheme://authority`` of a canonical URL ("" if it has none)."""
    scheme, sep, rest = canonical.partition("://")
    return scheme + sep + rest.split("/", 1)[0] if sep else ""


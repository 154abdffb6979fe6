"""Whether a link is followed: decided here, once, for the spider and the middleware alike.

:meth:`LinkRules.judge` takes a link as found (``href`` and the page's base URL) and answers
its canonical URL and, when it is not followed, the stats key of the reason:

==============================  ===========================================================
``dedup/links_not_http``        not an http(s) URL: ``javascript:``, ``mailto:``, ``ftp:``,
                                ... and hrefs :func:`~crawler.urls.urlnorm.normalize_url` refuses
``dedup/links_offsite``         a site outside the crawl's :class:`~crawler.urls.scope.Scope`
                                (``SCOPE``: the seeds' hosts and ports by default)
``dedup/links_userinfo``        a URL with credentials (``http://user:pw@host/``): never sent
``urlnorm/trap/<kind>``         a spider trap (:class:`TrapLimits`): ``url_length``,
                                ``segment_repeat``, ``path_depth``, ``query_params``
==============================  ===========================================================

The web spider judges every link it extracts (memoized exactly by :class:`LinkMemo`) and the
requests it yields carry their canonical URL (``meta[crawler.meta.CANONICAL_URL]``); the URL
normalization middleware judges the requests that come without it (another spider's).
A memo miss stays cheap as a crawl grows (about 2 us per link with its fingerprint, against 6 us
on the general path: ``python -m bench.pagepath``): plain hrefs take the fast paths of
:func:`~crawler.urls.urlnorm.normalize_url`, the userinfo and scope verdict is remembered per
origin (forgotten when the scope changes), and a short path skips the segment count.
:class:`DropNotes` logs the first drop of each kind at INFO and counts the rest (every one at
DEBUG with ``URLNORM_DEBUG``).
No Scrapy here: the stats collector is any object with ``inc_value``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from crawler import config, defaults
from crawler.urls.scope import Scope, has_userinfo
from crawler.urls.traps import TrapSettings
from crawler.urls.urlnorm import DEFAULT_POLICY, InvalidUrl, UrlPolicy, normalize_url, url_host

if TYPE_CHECKING:
    from crawler.config import SettingsLike

logger = logging.getLogger(__name__)

NOT_HTTP = "dedup/links_not_http"
OFFSITE = "dedup/links_offsite"
USERINFO = "dedup/links_userinfo"
TRAP = "urlnorm/trap/"
#: Schemes refused before any parsing (the cheap path of the spider's loop over links).
SKIP_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "file:", "ftp:", "about:", "sms:")
#: Link memo entries (href -> verdict) kept before the memo is emptied; about 170 bytes each.
LINK_MEMO_SIZE = 32768

#: Origins whose userinfo and scope verdict LinkRules remembers before it forgets them all.
ORIGINS_SIZE = 4096
_UNKNOWN = "?"  # an origin not judged yet (no stats key is "?")

ABSOLUTE_HREF = ("http://", "https://")  # hrefs memoized per scheme and host
# A base URL that normalize_url parses as written (printable ASCII, no space or backslash):
# origin "scheme://authority", then the path.
_PLAIN_BASE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*)([^?#]*)")
MemoTable = dict[str, "bytes | str"]  # href -> fingerprint (followed) or stats key (not)


@dataclass(frozen=True)
class TrapLimits:
    """Spider-trap thresholds; a URL over any of them is a trap."""

    max_segment_repeat: int = defaults.TRAP_MAX_SEGMENT_REPEAT
    max_path_depth: int = defaults.TRAP_MAX_PATH_DEPTH
    max_query_params: int = defaults.TRAP_MAX_QUERY_PARAMS
    max_length: int = defaults.URLLENGTH_LIMIT  # 0: no length limit

    @classmethod
    def of(cls, traps: TrapSettings) -> TrapLimits:
        """The path-shaped part of the crawl's trap settings (read and checked there)."""
        return cls(traps.max_segment_repeat, traps.max_path_depth, traps.max_query_params,
                   traps.max_length)

    def trap(self, canonical_url: str) -> str | None:
        """The trap kind ``canonical_url`` falls into, or None if it is within every limit.

        A path of at most ``min(max_segment_repeat, max_path_depth)`` slashes has no more
        segments than that, so neither limit can be passed: only the length and the query are
        checked (the common short path; :meth:`general_trap` otherwise).
        """
        return self.trap_from(canonical_url, canonical_url.find("/", canonical_url.find("//") + 2))

    def trap_from(self, canonical_url: str, start: int) -> str | None:
        """:meth:`trap` when the caller knows where the path starts (``start``, -1 if none)."""
        if self.max_length and len(canonical_url) > self.max_length:
            return "url_length"
        mark = canonical_url.find("?", start)
        if start < 0 or canonical_url.count("/", start, None if mark < 0 else mark) > (
            self.max_segment_repeat if self.max_segment_repeat < self.max_path_depth
            else self.max_path_depth
        ):
            return self.general_trap(canonical_url)
        if 0 <= mark < len(canonical_url) - 1 and (
            canonical_url.count("&", mark) >= self.max_query_params
        ):
            return "query_params"
        return None

    def general_trap(self, canonical_url: str) -> str | None:
        """:meth:`trap` segment by segment, for any path (the reference the fast check
        agrees with)."""
        if self.max_length and len(canonical_url) > self.max_length:
            return "url_length"
        start = canonical_url.find("/", canonical_url.find("//") + 2)
        path, _, query = canonical_url[start:].partition("?") if start >= 0 else ("/", "", "")
        segments = path.split("/")[1:]
        if segments and not segments[-1]:
            segments.pop()
        if len(segments) > self.max_segment_repeat:
            counts = Counter(segment for segment in segments if segment)
            if counts and max(counts.values()) > self.max_segment_repeat:
                return "segment_repeat"
        if len(segments) > self.max_path_depth:
            return "path_depth"
        if query and query.count("&") >= self.max_query_params:
            return "query_params"
        return None


@dataclass(frozen=True)
class LinkRules:
    """The crawl's URL policy, trap limits and scope (None: any host); see the module doc.

    The scope's verdict on an origin is remembered until the scope calls its ``listeners``
    (a host adopted, seeds added): a scope changed any other way must call them too.
    """

    policy: UrlPolicy = DEFAULT_POLICY
    limits: TrapLimits = field(default_factory=TrapLimits)
    scope: Scope | None = None
    #: host -> the policy with the parameters learned for it (:meth:`ignore`); mutable
    learned: dict[str, UrlPolicy] = field(default_factory=dict, compare=False)
    #: origin (``scheme://netloc``) -> its userinfo or scope verdict, or None (within both);
    #: emptied when the scope changes (its ``listeners``) and when it holds ORIGINS_SIZE
    _origins: dict[str, str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.scope is not None:
            self.scope.listeners.append(self._origins.clear)

    @classmethod
    def from_settings(cls, settings: SettingsLike, scope: Scope | None = None) -> LinkRules:
        """Read the URLNORM_* settings (:meth:`UrlPolicy.from_settings`) and the path limits of
        :class:`~crawler.urls.traps.TrapSettings`; SettingError if bad."""
        return cls(UrlPolicy.from_settings(settings),
                   TrapLimits.of(TrapSettings.from_settings(settings)), scope)

    def judge(self, href: str, base: str | None = None) -> tuple[str | None, str | None]:
        """``(canonical URL or None, stats key of the reason not to follow it or None)``."""
        try:
            canonical = self.normalize(href, base)
        except InvalidUrl:
            return None, NOT_HTTP
        return canonical, self.judge_canonical(canonical)

    def normalize(self, href: str, base: str | None = None) -> str:
        """The canonical URL of ``href`` under the crawl's policy and the parameters learned
        for its host (:meth:`ignore`); InvalidUrl if it is not an http(s) URL."""
        canonical = normalize_url(href, base=base, policy=self.policy)
        if self.learned:
            own = self.learned.get(url_host(canonical))
            if own is not None:
                return normalize_url(canonical, policy=own)
        return canonical

    def ignore(self, host: str, name: str) -> None:
        """Fold the query parameter ``name`` out of ``host``'s canonical URLs from now on
        (learned: :class:`crawler.urls.traps.ParamLearner`)."""
        policy = self.learned.get(host, self.policy)
        glob = re.sub(r"([*?\[])", r"[\1]", name)  # the name as written, not a pattern
        self.learned[host] = replace(policy, strip_params=(*policy.strip_params, glob))

    def judge_canonical(self, canonical: str) -> str | None:
        """The stats key of the reason not to follow a canonical URL, or None.

        The userinfo and scope verdicts read the netloc alone, so they are remembered per
        origin (the text up to the path); only the trap limits look at each URL.
        """
        end = canonical.find("/", canonical.find("//") + 2)
        origin = canonical if end < 0 else canonical[:end]
        origins = self._origins
        verdict = origins.get(origin, _UNKNOWN)
        if verdict is _UNKNOWN:
            verdict = self.judge_origin(canonical)
            if len(origins) >= ORIGINS_SIZE:
                origins.clear()
            origins[origin] = verdict
        if verdict is not None:
            return verdict
        trap = self.limits.trap_from(canonical, end)
        return None if trap is None else TRAP + trap

    def judge_origin(self, canonical: str) -> str | None:
        """The stats key if a canonical URL's netloc is not followed (credentials, outside
        the scope), else None; not remembered."""
        if has_userinfo(canonical):
            return USERINFO
        if self.scope is not None and not self.scope.contains(canonical):
            return OFFSITE
        return None


@dataclass(frozen=True)
class DropNotes:
    """Counts links not followed, per stats key, in ``stats`` (anything with ``inc_value``);
    logs the first of each key at INFO (every one at DEBUG with ``debug``, i.e.
    ``URLNORM_DEBUG``). Frozen: ``debug`` is a setting; only the keys logged grow."""

    debug: bool = False
    _logged: set[str] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> DropNotes:
        """Read ``URLNORM_DEBUG``; SettingError if bad."""
        return cls(config.get_bool(settings, "URLNORM_DEBUG", defaults.URLNORM_DEBUG))

    def note(self, stats: Any, stat: str, hrefs: Sequence[str], base: str | None = None,
             referer: str | None = None, extra: dict[str, Any] | None = None) -> None:
        """Count ``hrefs`` (links as found, resolved against ``base`` only when logged) under
        ``stat``; log the first of the crawl at INFO, the others at DEBUG with ``debug``."""
        if stats is not None and hrefs:
            stats.inc_value(stat, len(hrefs))
        rest = hrefs
        if hrefs and stat not in self._logged:
            self._logged.add(stat)
            logger.info("Dropped link (%s): %s (further drops of this kind are only counted;"
                        " set URLNORM_DEBUG=True to log every one)", stat,
                        urljoin(base or "", hrefs[0]), extra=extra)
            rest = hrefs[1:]
        if self.debug:
            for href in rest:
                logger.debug("Dropped link (%s): %s (referer: %s)", stat,
                             urljoin(base or "", href), referer, extra=extra)


class LinkMemo:
    """Link verdicts remembered across pages: ``href -> fingerprint | stats key``.

    Exact, not a heuristic: ``normalize_url(href, base)`` reads only the part of ``base`` that
    the reference needs (RFC 3986 5.2.2), so a verdict is kept under that part alone: nothing
    for an absolute ``http(s)://`` href, the origin (scheme and authority) for a ``/``-rooted
    href, the directory of the base path for any other href. Hrefs that read the base's full
    path or query (``?q``, ``#f``, empty, a leading control character) and bases that
    ``normalize_url`` would clean first (not printable ASCII, spaces, backslashes) are not
    memoized. The crawl's :class:`LinkRules` judge a canonical URL alone and change only when
    a parameter is learned (the spider then empties the memo: :meth:`clear`), so the verdict
    is a function of the key. Bounded: emptied once it holds ``size`` entries (tables
    included).
    """

    def __init__(self, size: int = LINK_MEMO_SIZE) -> None:
        self.size = size
        self._tables: dict[str, MemoTable] = {}
        self._count = 0

    def tables(self, base: str) -> tuple[MemoTable, MemoTable | None, MemoTable | None]:
        """``(absolute, rooted, relative)`` tables for a page whose base URL is ``base``."""
        absolute = self._table("")
        plain = base.isascii() and base.isprintable() and " " not in base and "\\" not in base
        match = _PLAIN_BASE.match(base) if plain else None
        if match is None:
            return absolute, None, None
        origin, path = match.groups()
        directory = origin + (path[: path.rfind("/") + 1] if path else "/")
        return absolute, self._table(origin), self._table(directory)

    def clear(self) -> None:
        """Forget every verdict (the crawl's rules changed: a parameter was learned)."""
        self._tables.clear()
        self._count = 0

    def remember(self, table: MemoTable, href: str, verdict: bytes | str) -> None:
        if self._count >= self.size:
            self._tables.clear()
            self._count = 0
        table[href] = verdict
        self._count += 1

    def _table(self, key: str) -> MemoTable:
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
            self._count += 1
        return table


def memo_table(href: str, absolute: MemoTable, rooted: MemoTable | None,
               relative: MemoTable | None) -> MemoTable | None:
    """The memo table whose key covers every part of the base URL that ``href`` reads."""
    if href.startswith(ABSOLUTE_HREF):
        return absolute
    if href[:1] == "/":
        return rooted
    if href and href[0] > " " and href[0] not in "?#":
        return relative
    return None


#: An absolute URL whose host ends with the root's dot (``http://g.localhost.:8080/x``).
_DOTTED_HOST = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#\\]*@)?[^/?#\\@:\[\]]*\."
                          r"(?::[^/?#\\]*)?(?:[/?#\\]|$)")


def fetch_url(url: str, canonical: str) -> str:
    """The URL to fetch for a link: as found, less the fragment, with an ASCII host without a
    trailing dot.

    Scrapy escapes a non-ASCII host with IDNA 2003 (``faß.de`` becomes ``fass.de``, another
    host), while the canonical key uses UTS 46 non-transitional (``xn--fa-hia.de``), as browsers
    do. A host written with the root's trailing dot (``g.localhost.``) names the same host as
    without it, but Scrapy would give it a robots.txt and a download slot of its own. Either URL
    therefore gets the canonical host (punycode, no trailing dot); the rest stays as found.

    >>> fetch_url("http://G.localhost.:8080/x#top", "http://g.localhost:8080/x")
    'http://g.localhost:8080/x'
    """
    url = url.split("#", 1)[0]
    if url.isascii() and _DOTTED_HOST.match(url) is None:
        return url
    return urlunsplit(urlsplit(url)._replace(netloc=urlsplit(canonical).netloc))

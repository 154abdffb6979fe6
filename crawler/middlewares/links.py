"""Spider middleware that keeps unschedulable links and spider traps out of the frontier.

For every request the spider outputs (start requests included), in this order:

1. a scheme other than http/https (``ftp:``, ``file:``, ``data:``, ``about:``...) is dropped,
   stat ``urlnorm/dropped/scheme/<scheme>``. (Scrapy refuses to build a ``Request`` for a URL
   without ``://`` such as ``mailto:``/``javascript:``/``tel:``; the spider skips those when
   :func:`crawler.urlnorm.normalize_url` refuses them.)
2. ``meta["canonical_url"]`` is set when absent (the web spider sets it itself); a URL that
   ``normalize_url`` refuses is dropped, stat ``urlnorm/dropped/invalid``.
3. trap guards on the canonical URL, stat ``urlnorm/trap/<kind>``: ``url_length`` (longer than
   ``URLLENGTH_LIMIT``; 0 turns it off), ``segment_repeat`` (one non-empty path segment more than
   ``TRAP_MAX_SEGMENT_REPEAT`` times anywhere in the path, e.g. ``/a/b/a/b/a/b/a/b``),
   ``path_depth`` (more than ``TRAP_MAX_PATH_DEPTH`` segments, a trailing ``/`` not counted),
   ``query_params`` (more than ``TRAP_MAX_QUERY_PARAMS`` pairs after normalization).

The first drop of each kind is logged at INFO and the rest only counted; ``URLNORM_DEBUG``
logs every one at DEBUG with its referer. It replaces Scrapy's ``UrlLengthMiddleware``, which
``settings/base.py`` disables (it measured the raw URL under another stat name).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from crawler import config, defaults
from crawler.fingerprint import canonical_url_of
from crawler.urlnorm import DEFAULT_POLICY, UrlPolicy

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.config import SettingsLike

__all__ = ["TrapLimits", "UrlNormalizationMiddleware"]

logger = logging.getLogger(__name__)

_SCHEME_KEY = re.compile(r"[a-z][a-z0-9+.-]{0,31}\Z")


@dataclass(frozen=True)
class TrapLimits:
    """Spider-trap thresholds; a URL over any of them is a trap."""

    max_segment_repeat: int = defaults.TRAP_MAX_SEGMENT_REPEAT
    max_path_depth: int = defaults.TRAP_MAX_PATH_DEPTH
    max_query_params: int = defaults.TRAP_MAX_QUERY_PARAMS
    max_length: int = defaults.URLLENGTH_LIMIT  # 0: no length limit

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> TrapLimits:
        """Read the TRAP_* settings (each >= 1) and URLLENGTH_LIMIT (>= 0); SettingError if bad."""
        return cls(
            max_segment_repeat=config.get_int(
                settings, "TRAP_MAX_SEGMENT_REPEAT", defaults.TRAP_MAX_SEGMENT_REPEAT, lo=1
            ),
            max_path_depth=config.get_int(
                settings, "TRAP_MAX_PATH_DEPTH", defaults.TRAP_MAX_PATH_DEPTH, lo=1
            ),
            max_query_params=config.get_int(
                settings, "TRAP_MAX_QUERY_PARAMS", defaults.TRAP_MAX_QUERY_PARAMS, lo=1
            ),
            max_length=config.get_int(settings, "URLLENGTH_LIMIT", defaults.URLLENGTH_LIMIT, lo=0),
        )

    def trap(self, canonical_url: str) -> str | None:
        """The trap kind ``canonical_url`` falls into, or None if it is within every limit."""
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


@config.register
def _validate(settings: SettingsLike) -> None:
    TrapLimits.from_settings(settings)
    config.get_bool(settings, "URLNORM_DEBUG", defaults.URLNORM_DEBUG)


class UrlNormalizationMiddleware(BaseSpiderMiddleware):
    """Drops non-http(s) links, invalid URLs and traps; marks ``meta["canonical_url"]``."""

    crawler: Crawler

    def __init__(  # pylint: disable=super-init-not-called
        self,
        policy: UrlPolicy | None = None,
        limits: TrapLimits | None = None,
        debug: bool = False,
    ) -> None:
        self.policy = policy or DEFAULT_POLICY
        self.limits = limits or TrapLimits()
        self.debug = debug
        self._logged: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UrlNormalizationMiddleware:
        settings = crawler.settings
        middleware = cls(
            UrlPolicy.from_settings(settings),
            TrapLimits.from_settings(settings),
            config.get_bool(settings, "URLNORM_DEBUG", defaults.URLNORM_DEBUG),
        )
        middleware.crawler = crawler
        return middleware

    def get_processed_request(self, request: Request, response: Response | None) -> Request | None:
        stat = self._verdict(request)
        if stat is None:
            return request
        self._drop(stat, request, response)
        return None

    def _verdict(self, request: Request) -> str | None:
        """The stats key of the reason to drop ``request``, or None to keep it."""
        scheme = request.url.partition(":")[0].lower()
        if scheme != "http" and scheme != "https":
            return f"urlnorm/dropped/scheme/{scheme if _SCHEME_KEY.match(scheme) else 'other'}"
        canonical = canonical_url_of(request, self.policy)
        if canonical is None:
            return "urlnorm/dropped/invalid"
        request.meta["canonical_url"] = canonical
        trap = self.limits.trap(canonical)
        return None if trap is None else f"urlnorm/trap/{trap}"

    def _drop(self, stat: str, request: Request, response: Response | None) -> None:
        self.crawler.stats.inc_value(stat)
        spider = self.crawler.spider
        if stat not in self._logged:
            self._logged.add(stat)
            logger.info(
                "Dropped link (%s): %s (further drops of this kind are only counted;"
                " set URLNORM_DEBUG=True to log every one)",
                stat,
                request.url,
                extra={"spider": spider},
            )
        elif self.debug:
            referer = response.url if response is not None else None
            logger.debug(
                "Dropped link (%s): %s (referer: %s)",
                stat,
                request.url,
                referer,
                extra={"spider": spider},
            )

"""Bounds on the work one page can cause, whatever its size: read by the ``web`` spider.

* ``LINKS_PER_PAGE_MAX`` (default 10,000; 0 = no cap): the links of a page (``<a href>``,
  ``<area href>``, in page order) judged and followed. The rest are neither judged nor
  followed, only counted (``dedup/links_capped``: the number of links cut); the first page
  the cap cuts is logged at INFO. Every link a page yields costs the crawl about 0.2 ms of
  reactor time (Scrapy's middlewares, the scheduler) and a queued request's memory: measured,
  a page with 500,000 links held the reactor for over a minute and took 1.9 GB.
* ``PAGE_MAX_PARSE_CHARS`` (default 2,000,000; 0 = no cap): the characters of a page's
  decoded markup parsed for its links, title and canonical link (the text extraction of
  :mod:`crawler.text` reads as many, :data:`crawler.text.MAX_HTML_CHARS`). The whole page is
  still stored. An lxml tree takes about 17 bytes of memory per byte of markup (a 30 MB page:
  500 MB, 0.7 s to build); a page cut is counted (``dedup/page_truncated``), the first one
  logged at INFO.

* Nesting depth (:data:`MAX_DEPTH`, 512, not a setting): before text extraction parses a page,
  :func:`bound_depth` flattens elements nested deeper (an HTML5 parser's cost per tag grows
  with the depth: 40,000 unclosed ``<span><b><i>`` took 173 s, 10^5 nested ``<div>`` tens of
  seconds); their text stays, a block still ends a line.

Limits: a link after the cut (either of them) is not found on that page; a site that links
its pages only from one huge index is crawled partly (raise the caps for it).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from crawler import config, defaults
from crawler.config import SettingsLike

logger = logging.getLogger(__name__)

__all__ = ["INLINE_TAGS", "MAX_DEPTH", "PageBounds", "bound_depth", "validate"]


@dataclass
class PageBounds:
    """The two caps (0 = no cap) and which of their first bites were logged."""

    links_max: int = defaults.LINKS_PER_PAGE_MAX
    parse_chars: int = defaults.PAGE_MAX_PARSE_CHARS
    _logged: set[str] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> PageBounds:
        """``LINKS_PER_PAGE_MAX`` and ``PAGE_MAX_PARSE_CHARS``, checked (SettingError)."""
        return cls(config.get_int(settings, "LINKS_PER_PAGE_MAX", defaults.LINKS_PER_PAGE_MAX,
                                  lo=0),
                   config.get_int(settings, "PAGE_MAX_PARSE_CHARS",
                                  defaults.PAGE_MAX_PARSE_CHARS, lo=0))  # fmt: skip

    def cut(self, markup: str) -> str:
        """The part of ``markup`` that is parsed (all of it when it is under the cap)."""
        if self.parse_chars and len(markup) > self.parse_chars:
            return markup[: self.parse_chars]
        return markup

    def note_truncated(self, url: str, chars: int, extra: dict[str, Any] | None = None) -> None:
        """Log the first page cut by ``PAGE_MAX_PARSE_CHARS`` (the caller counts)."""
        if "parse" not in self._logged:
            self._logged.add("parse")
            logger.info("Page of %d characters parsed for links only up to "
                        "PAGE_MAX_PARSE_CHARS=%d: %s (further ones counted in "
                        "dedup/page_truncated)", chars, self.parse_chars, url, extra=extra)

    def note_capped(self, url: str, cut: int, extra: dict[str, Any] | None = None) -> None:
        """Log the first page whose links ``LINKS_PER_PAGE_MAX`` cut (the caller counts)."""
        if "links" not in self._logged:
            self._logged.add("links")
            logger.info("Page with more than LINKS_PER_PAGE_MAX=%d links: %d not followed: %s "
                        "(further ones counted in dedup/links_capped)", self.links_max, cut, url,
                        extra=extra)  # fmt: skip


def validate(settings: SettingsLike) -> PageBounds:
    """The pre-flight check of the page bounds (:meth:`PageBounds.from_settings`)."""
    return PageBounds.from_settings(settings)


# --- nesting depth -----------------------------------------------------------------------------

#: Elements open at once that text extraction lets the HTML parser build (as Blink caps its DOM
#: depth at 512); deeper start tags are flattened by :func:`bound_depth`.
MAX_DEPTH = 512
#: Formatting elements (``b``, ``i``, ``a``, ``font``...) left open at once: the parser re-opens
#: every one of them in each new block, so they are held lower than the depth.
MAX_FORMATTING = 16


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_VOID = _names("area base basefont bgsound br col embed frame hr image img input keygen link "
               "meta param source track wbr")  # fmt: skip
_FORMATTING = _names("a b big code em font i nobr s small strike strong tt u")
# Where "has an element in scope" stops: an end tag beyond one of these closes nothing.
_SCOPE = _names("applet caption html table td th marquee object template svg math")
#: Inline elements: text extraction unwraps them (``foo<b>bar</b>`` is ``foobar``), so
#: flattening one changes no line of its text.
INLINE_TAGS = tuple(sorted(_names(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark nobr "
    "q s samp small span strike strong sub sup time tt u var wbr")))
_INLINE = frozenset(INLINE_TAGS)
# A tag is at most 4096 characters and holds no "<": the scan stays linear on markup without
# ">" (a longer tag is missed, but 2 MB hold too few of them to nest deep).
_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"
    r"|<(script|style|textarea|title|xmp|iframe|noembed|noframes|noscript|plaintext)\b"
    r"[^<>]{0,4096}>.*?(?:</\1\s*>|\Z)"
    r"|<(/?)([A-Za-z][^\s/<>]*)[^<>]{0,4096}>",
    re.S | re.I,
)


def _flattened(tokens: list[tuple[str, str, str]], max_depth: int,
               max_formatting: int) -> dict[int, bool]:
    """Indexes of the ``tokens`` (``_TOKEN`` groups) to flatten: start tags beyond the caps and
    the end tags that match them; True for one inside ``svg`` or ``math`` (removed without a
    ``<br>``, which would end the foreign content: ``<path/>`` never closes in this count).

    The stack is the one a parser without implied end tags keeps (``<p>a<p>b`` leaves two
    ``p`` open): never shallower than an HTML5 parser's, so its cap bounds the parser's depth.
    An end tag closes the innermost open element of its name unless a scope boundary
    (``table``, ``td``...) lies between, as in HTML5; a formatting element closed by another's
    end tag stays counted until its own (the parser re-opens it in each new block)."""
    names: list[str] = []
    where: dict[str, list[int]] = {}  # stack positions of each open name
    scopes = [-1]  # positions of open scope boundaries
    formatting: dict[str, int] = {}  # formatting elements open or left open, per name
    open_formatting = 0
    dropped: dict[str, int] = {}  # start tags flattened whose end tags are not yet met
    cut: dict[int, bool] = {}
    for index, (_, slash, name) in enumerate(tokens):
        if not name:
            continue  # a comment or a raw-text element: no tags inside
        name = name.lower()
        if slash:
            if dropped and dropped.get(name):
                dropped[name] -= 1
                cut[index] = bool(where.get("svg") or where.get("math"))
                continue
            if names and names[-1] == name:  # the usual case: the innermost element closes
                names.pop()
                where[name].pop()
                if scopes[-1] == len(names):
                    scopes.pop()
            else:
                places = where.get(name)
                if places and places[-1] >= scopes[-1]:
                    depth = places[-1]
                    while len(names) > depth:
                        where[names.pop()].pop()
                        if scopes[-1] == len(names):
                            scopes.pop()
            if name in _FORMATTING and formatting.get(name):
                formatting[name] -= 1
                open_formatting -= 1
        elif name in _VOID:
            continue
        elif len(names) >= max_depth or (name in _FORMATTING
                                         and open_formatting >= max_formatting):
            dropped[name] = dropped.get(name, 0) + 1
            cut[index] = bool(where.get("svg") or where.get("math"))
        else:
            places = where.get(name)
            if places is None:
                where[name] = [len(names)]
            else:
                places.append(len(names))
            if name in _SCOPE:
                scopes.append(len(names))
            names.append(name)
            if name in _FORMATTING:
                formatting[name] = formatting.get(name, 0) + 1
                open_formatting += 1
    return cut


def bound_depth(markup: str, max_depth: int = MAX_DEPTH,
                max_formatting: int = MAX_FORMATTING) -> str:
    """``markup`` with start tags beyond ``max_depth`` open elements (or ``max_formatting``
    formatting elements) removed, and their end tags: a block element's tags become ``<br>``
    (its text still ends a line), an inline element's go, and so does any inside ``svg`` or
    ``math``. Markup that never nests so deep is
    returned unchanged (the same object).

    One linear scan (a regular expression over the tags, comments and raw-text elements, and
    a stack), so what follows, an HTML5 parser, whose cost grows with the depth for every tag
    (scope checks walk the stack of open elements), stays linear in the markup too.

    >>> bound_depth("<div>" * 3 + "x" + "</div>" * 3, max_depth=2)
    '<div><div><br>x<br></div></div>'

    Limits: the stack has no implied end tags, so a page with many unclosed elements (``<p>``,
    ``<li>``) is flattened beyond the cap too (its text is the same, but a boilerplate region
    that deep is no longer recognised); ``<`` in an attribute value (``title="a<b>"``) may count
    as a tag.
    """
    if markup.count("<") <= min(max_depth, max_formatting):
        return markup
    cut = _flattened(_TOKEN.findall(markup), max_depth, max_formatting)
    if not cut:
        return markup
    parts: list[str] = []
    done = 0
    for index, match in enumerate(_TOKEN.finditer(markup)):
        foreign = cut.get(index)
        if foreign is not None:
            inline = foreign or match.group(3).lower() in _INLINE
            parts += (markup[done:match.start()], "" if inline else "<br>")
            done = match.end()
    parts.append(markup[done:])
    return "".join(parts)

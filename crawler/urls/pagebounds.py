"""Bounds on the work one page can cause, whatever its size: read by the ``web`` spider.

* ``LINKS_PER_PAGE_MAX`` (default 10,000; 0 = no cap): the links of a page (``<a href>``,
  ``<area href>``, in page order) judged and followed. The rest are neither judged nor
  followed, only counted (``dedup/links_capped``: the number of links cut); the first page
  the cap cuts is logged at INFO. Every link a page yields costs the crawl about 0.2 ms of
  reactor time (Scrapy's middlewares, the scheduler) and a queued request's memory: measured,
  a page with 500,000 links held the reactor for over a minute and took 1.9 GB.
* ``PAGE_MAX_PARSE_CHARS`` (default 2,000,000; 0 = no cap): the characters of a page's
  decoded markup parsed for its links, title and canonical link (the text extraction of
  :mod:`crawler.content.text` reads as many, :data:`crawler.content.text.MAX_HTML_CHARS`). The
  whole page is still stored. An lxml tree takes about 17 bytes of memory per byte of markup (a 30
  MB page: 500 MB, 0.7 s to build); a page cut is counted (``dedup/page_truncated``), the first one
  logged at INFO.

* Nesting depth (:data:`MAX_DEPTH`, 512, not a setting): before text extraction parses a page,
  :func:`bound_depth` flattens elements nested deeper (an HTML5 parser's cost per tag grows
  with the depth: 40,000 unclosed ``<span><b><i>`` took 173 s, 10^5 nested ``<div>`` tens of
  seconds); their text stays, a block still ends a line. Most pages are proven shallow by
  C-level regular expressions alone; the others are scanned with HTML5's tokenizer rules,
  failing safe (every start tag counted, no end tag trusted) where only the parser knows.

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

__all__ = ["INLINE_TAGS", "MAX_DEPTH", "PageBounds", "bound_depth", "bound_depth_named"]


@dataclass(frozen=True)
class PageBounds:
    """The two caps (0 = no cap) and which of their first bites were logged (frozen: the caps
    are settings; only the set of logged bites grows)."""

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
# Void elements that are void in SVG and MathML too (there they end the foreign content).
_BREAKOUT_VOID = _names("br embed hr img meta")
_FORMATTING = _names("a b big code em font i nobr s small strike strong tt u")
# Where "has an element in scope" stops: an end tag beyond one of these closes nothing.
_SCOPE = _names("applet caption html table td th marquee object template svg math")
# Elements whose content the HTML tokenizer reads as text up to their end tag (HTML namespace
# only: inside svg or math they hold markup). noscript is not one: the parser runs without
# scripting, so it builds what noscript holds.
_RAW = _names("iframe noembed noframes plaintext script style textarea title xmp")
#: Inline elements: text extraction unwraps them (``foo<b>bar</b>`` is ``foobar``), so
#: flattening one changes no line of its text.
INLINE_TAGS = tuple(sorted(_names(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark nobr "
    "q s samp small span strike strong sub sup time tt u var wbr")))
_INLINE = frozenset(INLINE_TAGS)

# HTML5's tokenizer, as regular expressions (ASCII case-insensitive; HTML whitespace is only
# tab, LF, FF, CR and space). The rest of a tag after its name: attributes, a quoted value may
# hold ">" and "<"; the tag ends at the first ">" outside one, or with the page (group "close"
# unset: the parser then drops it and reads nothing after it).
_TAG_REST = (r"(?:[\t\n\f\r /]*+[^\t\n\f\r />][^\t\n\f\r />=]*+"
             r"(?:[\t\n\f\r ]*+=[\t\n\f\r ]*+(?:\"[^\"]*+\"?|'[^']*+'?|[^\t\n\f\r >]*+))?+)*+"
             r"[\t\n\f\r /]*+(?P<close>>)?")  # fmt: skip
_TOKEN = re.compile(
    r"<!--(?:-?>|.*?(?:--!?>|(?P<open>\Z)))"  # a comment (<!--> and <!---> are whole ones)
    r"|<(?P<slash>/?)(?P<name>[A-Za-z][^\t\n\f\r />]*+)" + _TAG_REST
    + r"|<[!?/][^>]*+(?:>|(?P<bogus>\Z))",  # doctype, bogus comment, CDATA outside svg
    re.S | re.A,
)
# Where a tokenizer's rules may not be the parser's (the page left inside an unterminated
# comment, raw text that may be markup inside svg): every "<" counts. No "<" inside a tag, so
# none is skipped (and the scan stays linear); end tags here are not trusted.
_LOOSE = re.compile(r"<(?P<slash>/?)(?P<name>[A-Za-z][^\t\n\f\r /<>]*+)[^<>]*+>?", re.A)
_SCRIPT_STEP = {  # script data states: what to look for next (the escapes of <!-- ... -->)
    "data": re.compile(r"<!--|</script[\t\n\f\r />]", re.I | re.A),
    "escaped": re.compile(r"-->|</script[\t\n\f\r />]|<script[\t\n\f\r />]", re.I | re.A),
    "double": re.compile(r"-->|</script[\t\n\f\r />]", re.I | re.A),
}


def _script_end(markup: str, pos: int) -> int | None:
    """Where the script whose content starts at ``pos`` ends (its ``</script``), following
    HTML5's script data states: inside ``<!--``, a ``<script>`` hides the next ``</script>``."""
    state = "data"
    while True:
        found = _SCRIPT_STEP[state].search(markup, pos)
        if found is None:
            return None
        what = found.group().lower()
        if what == "<!--":
            state, pos = "escaped", found.start() + 2  # "<!-->" ends the escape at once
        elif what == "-->":
            state, pos = "data", found.end()
        elif what.startswith("</"):
            if state != "double":
                return found.start()
            state, pos = "escaped", found.end()
        else:
            state, pos = "double", found.end()


def _raw_end(markup: str, name: str, pos: int) -> int | None:
    """Where the raw text of a ``name`` element starting at ``pos`` ends; None: with the page."""
    if name == "script":
        return _script_end(markup, pos)
    if name == "plaintext":
        return None
    found = re.compile(f"</{name}[\\t\\n\\f\\r />]", re.I | re.A).search(markup, pos)
    return None if found is None else found.start()


# Placeholders on the stack above a table: the tbody and tr its cells may imply (no name).
_IMPLIED_BY_TABLE = ("", "")


class _Stack:
    """The open elements as a parser without implied end tags keeps them (``<p>a<p>b`` leaves
    two ``p`` open; a ``table`` takes 3 places, for the ``tbody`` and ``tr`` its cells may
    imply): never shallower than an HTML5 parser's, so its cap bounds the parser's depth. An
    end tag closes the innermost open element of its name unless a scope boundary (``table``,
    ``td``...) lies between, as in HTML5; a formatting element closed by another's end tag
    stays counted until its own (the parser re-opens it in each new block)."""

    def __init__(self, max_depth: int, max_formatting: int) -> None:
        self.max_depth, self.max_formatting = max_depth, max_formatting
        self.names: list[str] = []
        self.where: dict[str, list[int]] = {}  # stack positions of each open name
        self.scopes = [-1]  # positions of open scope boundaries
        self.formatting: dict[str, int] = {}  # formatting elements open or left open
        self.open_formatting = 0
        self.dropped: dict[str, int] = {}  # start tags flattened whose end tags are not yet met
        self.cuts: list[tuple[int, int, str]] = []  # (start, end, replacement) in the markup

    def foreign(self) -> bool:
        return bool(self.where.get("svg") or self.where.get("math"))

    def _cut(self, name: str, start: int, end: int) -> None:
        keep_line = not self.foreign() and name not in _INLINE
        self.cuts.append((start, end, "<br>" if keep_line else ""))

    def start(self, name: str, start: int, end: int) -> None:
        if name in _VOID and (name in _BREAKOUT_VOID or not self.foreign()):
            return
        formatting = name in _FORMATTING
        if len(self.names) >= self.max_depth or (
                formatting and self.open_formatting >= self.max_formatting):
            self.dropped[name] = self.dropped.get(name, 0) + 1
            self._cut(name, start, end)
            return
        self.where.setdefault(name, []).append(len(self.names))
        if name in _SCOPE:
            self.scopes.append(len(self.names))
        self.names.append(name)
        if name == "table":  # and the tbody and tr its cells may imply, closed with it
            self.names += _IMPLIED_BY_TABLE
        if formatting:
            self.formatting[name] = self.formatting.get(name, 0) + 1
            self.open_formatting += 1

    def end(self, name: str, start: int, end: int) -> None:
        if self.dropped.get(name):
            self.dropped[name] -= 1
            self._cut(name, start, end)
            return
        places = self.where.get(name)
        if places and places[-1] >= self.scopes[-1]:
            depth = places[-1]
            while len(self.names) > depth:
                popped = self.names.pop()
                if popped not in _IMPLIED_BY_TABLE:
                    self.where[popped].pop()
                if self.scopes[-1] == len(self.names):
                    self.scopes.pop()
        if name in _FORMATTING and self.formatting.get(name):
            self.formatting[name] -= 1
            self.open_formatting -= 1


def _loose(stack: _Stack, markup: str, pos: int, stop: int) -> None:
    """Every start tag between ``pos`` and ``stop`` counted, no end tag trusted (fail safe)."""
    for tag in _LOOSE.finditer(markup, pos, stop):
        if not tag.group("slash"):
            stack.start(tag.group("name").lower(), tag.start(), tag.end())


def _scan(markup: str, max_depth: int, max_formatting: int) -> list[tuple[int, int, str]]:
    """The tags to flatten (module docstring, :func:`bound_depth`): one pass over the markup,
    HTML5's tokenizer rules, and a fail-safe wherever they depend on what only the parser
    knows: with the page left inside an unterminated comment, raw text or tag, every later
    start tag counts and no end tag is trusted; raw text inside svg or math (markup there)
    counts its start tags too, trusting none of its end tags."""
    stack = _Stack(max_depth, max_formatting)
    pos, size = 0, len(markup)
    while (token := _TOKEN.search(markup, pos)) is not None:
        pos = token.end()
        name = token.group("name")
        if name is None:  # a comment, doctype or bogus comment
            if token.group("open") is not None or token.group("bogus") is not None:
                _loose(stack, markup, token.start() + 2, size)
                break
            if stack.foreign() and markup.startswith("<![CDATA[", token.start()):
                end = markup.find("]]>", token.start())
                _loose(stack, markup, token.start() + 9, size if end < 0 else end)
                pos = size if end < 0 else end + 3
            continue
        name = name.lower()
        if token.group("close") is None:  # the page ends inside this tag: nothing follows
            if not token.group("slash"):
                stack.start(name, token.start(), size)
            break
        if token.group("slash"):
            stack.end(name, token.start(), pos)
            continue
        if name not in _RAW:
            stack.start(name, token.start(), pos)
            continue
        raw_end = _raw_end(markup, name, pos)
        if stack.foreign():  # markup inside svg or math; raw text if the parser left them
            stack.start(name, token.start(), pos)
            _loose(stack, markup, pos, size if raw_end is None else raw_end)
        elif raw_end is None:  # text to the end for the parser: fail safe all the same
            _loose(stack, markup, pos, size)
        if raw_end is None:
            break
        pos = raw_end
    return stack.cuts


# --- the fast path: a proof that a page cannot nest deep ---------------------------------------

# The page's tags as a skeleton, conservatively: a tag is recognised only where HTML5 ends it at
# the same ">" (its name ASCII, quoted values holding no "<" or ">", no quote elsewhere): "div",
# "/div"; a comment only when it holds no "<" (HTML5's own end: <!-->, <!--->, -->, --!>): "!",
# struck at once. Any other "<" that may open markup is "": it pairs with nothing and counts as
# a start tag of any name (a table, a formatting element). No "<" is ever inside a token, so
# every "<" of the page is looked at.
_SKELETON = re.compile(
    r"<((?=!--(?:-?>|[^<]*?--!?>))!"
    r"|/?[A-Za-z][A-Za-z0-9:._-]*+(?=(?:[\t\n\f\r /]++[^\t\n\f\r /<>\"'=]++"
    r"(?:[\t\n\f\r ]*+=[\t\n\f\r ]*+(?:\"[^\"<>]*+\"|'[^'<>]*+'|[^\t\n\f\r <>\"'=`]++))?+)*+"
    r"[\t\n\f\r /]*+>)"
    r"|(?=[A-Za-z!/?]))",
)  # fmt: skip
# An element whose content is struck pairs, up to 3 levels deep, at once (fewer passes).
_PAIR = re.compile(
    r" ([^ /][^ ]*+)(?: ([^ /][^ ]*+)(?: ([^ /][^ ]*+) /\3)*+ /\2)*+ /\1(?= )")
_LEVELS = 3  # pair levels a pass may strike
_SKELETON_VOID = re.compile(" (?:" + "|".join(sorted(_VOID)) + ")(?= )")
_SKELETON_BREAKOUT_VOID = re.compile(" (?:" + "|".join(sorted(_BREAKOUT_VOID)) + ")(?= )")
# Start tags that may be formatting elements; that may be a table (which may imply tbody, tr):
# those so named, and the unread ones ("").
_SKELETON_FORMATTING = re.compile(" (?:" + "|".join(sorted(_FORMATTING)) + ")?(?= )")
_SKELETON_TABLE = re.compile(" (?:table)?(?= )")
_SKELETON_PLAINTEXT = re.compile(" plaintext(?= )")  # its end tag is text: it pairs with nothing
_FOREIGN = re.compile(r"<(?:svg|math)", re.I | re.A)


def _foreign_sre(markup: str) -> bool:
    return _FOREIGN.search(markup) is not None


try:  # the same readings in C (setup.py builds them; these expressions are their spec)
    from crawler.urls._skeleton import foreign as _foreign
    from crawler.urls._skeleton import tokens as _skeleton_tokens
except ImportError:  # not built (the scrapyd egg, no compiler): the same answers, slower
    _skeleton_tokens, _foreign = _SKELETON.findall, _foreign_sre

# Elements the parser may hold open without a start tag of their own: html, head or body.
_IMPLIED = 3


def _shallow(markup: str, max_depth: int, max_formatting: int) -> bool:
    """Whether :func:`_proof` proves ``markup`` shallow."""
    return _proof(markup, max_depth, max_formatting)[0]


def _proof_by_expressions(markup: str, max_depth: int,
                          max_formatting: int) -> tuple[bool, frozenset[str] | None]:  # fmt: skip
    """``(proven, names)``: proven is True when ``markup`` provably never nests deeper than
    ``max_depth`` elements nor leaves more than ``max_formatting`` formatting elements open,
    found by C-level regular expressions only (False: not proven, the caller scans).

    The proof: the tags become a skeleton (``_SKELETON``: text, attributes and clean comments
    gone; void elements gone too, the SVG/MathML ones that are not void there only when the page
    has no svg or math); then, pass after pass, a start tag directly followed by its own end
    tag (``div /div``) is struck out, pair and all (up to 3 nested levels a pass; never
    ``plaintext``, whose end tag is text). Every other end tag is ignored: an end tag
    lowers no bound, so none that might not match (in a comment, in a script, stray) can fool
    it. A struck pair is sound: if its start tag is real (the tokenizer in its data state),
    what lies between held no "<" but struck pairs and clean comments, so the tokenizer is in
    the data state (or the element's raw text) at the end tag, which is then real too and pops
    the element, or it was popped before; if the start tag is not real, nothing was struck that
    could nest. So at any point the parser's stack holds at most: html/head/body, one element
    (itself or its re-opened copy) per start tag left in the skeleton (3 for a ``table``, which
    may imply ``tbody`` and ``tr``, and for an unread ``""``, which may be one), and 3 per
    struck pair around the point, of which there are no more than 3 a pass. Formatting
    elements the parser may re-open are those of the start tags left in the skeleton, ``""``
    included (a struck ``b`` pair's end tag removes its entry).

    This function is the proof's specification; :func:`_proof` is its C twin
    (``crawler/urls/_skeleton.c``, built by setup.py: the same skeleton, the same passes read
    the way sre reads ``_PAIR``, the same answers, tested), and this one runs where the module
    is not built (the scrapyd egg, no compiler). Cost: one pass over the page and a few
    ``subn`` over its skeleton, no Python per tag. With sre's first pass it cost about 1 ms for
    a median python3.11-doc page (54 KB, 2,200 tags), a fifth of the scan's cost, still about
    +30% on its extraction (sre's own cost per tag, about 0.4 us). On 200 link-heavy bench
    pages, side by side (``bench.pagecost``, 2026-12-06): 161 us a page with sre's first pass,
    78 with the C first pass (``_skeleton.tokens``), 23 with the whole proof in C.

    ``names``, when proven: the names of the page's start tags (:func:`_start_tag_names`), or
    None when the skeleton did not read them all.
    """
    tokens = _skeleton_tokens(markup)
    joined = " ".join(tokens)
    skeleton = f" {joined.lower()} ".replace(" !", "")
    void = _SKELETON_BREAKOUT_VOID if _foreign(markup) else _SKELETON_VOID
    skeleton = _SKELETON_PLAINTEXT.sub(" ", void.sub("", skeleton))
    passes = 0
    while True:
        skeleton, struck = _PAIR.subn("", skeleton)
        if not struck:
            break
        passes += 1
        # Each level of struck pairs costs 3; give up early (always safe) when the rest
        # cannot fit at this pace (a deep page strikes one pair a pass).
        room = max_depth - _IMPLIED - 3 * _LEVELS * passes
        starts = skeleton.count(" ") - 1 - skeleton.count(" /")
        if room < 0 or starts - 3 * struck * (room // (3 * _LEVELS)) > room:
            return False, None
    starts = skeleton.count(" ") - 1 - skeleton.count(" /")
    tables = len(_SKELETON_TABLE.findall(skeleton))
    depth = _IMPLIED + starts + 2 * tables + 3 * _LEVELS * passes
    if depth > max_depth or len(_SKELETON_FORMATTING.findall(skeleton)) > max_formatting:
        return False, None
    return True, _start_tag_names(markup, tokens, joined)


_FIRST_TOKEN = re.compile(r"<[A-Za-z!/?]")


def _start_tag_names(markup: str, tokens: list[str], joined: str) -> frozenset[str] | None:
    """The names (lower case) of every start tag of ``markup``, from its skeleton ``tokens``
    (``joined``: them joined by spaces); None when a start tag may hide behind an unread token.

    A start tag is ``<`` and an ASCII letter, its name running to whitespace, ``/`` or ``>``
    (ASCII letters lower-cased, nothing else changed): exactly what a read token holds. An
    unread token ``""`` may be one, unless it is the page's first token and starts ``<!``,
    ``</`` or ``<?`` (a doctype: the one unread token of most pages). The parser names an
    element only after a start tag, except the ``html``, ``head``, ``body`` (and table parts)
    it implies and ``img`` for ``<image>`` (added here): an element named otherwise is not in
    the tree, so a query for it can be skipped.
    """
    distinct = set(tokens)
    if "" in distinct:
        # No token holds a space: another unread one shows as two spaces or one at the end.
        if tokens[0] or "  " in joined or joined.endswith(" "):
            return None
        first = _FIRST_TOKEN.search(markup)
        if first is None or markup[first.start() + 1] not in "!/?":
            return None
    names = {token.lower() for token in distinct if token and token[0] not in "!/"}
    if "image" in names:
        names.add("img")
    return frozenset(names)


try:  # the whole proof in C: _proof_by_expressions is its specification
    from crawler.urls._skeleton import proof as _proof
except ImportError:  # not built: the same answers, slower
    _proof = _proof_by_expressions


def bound_depth(markup: str, max_depth: int = MAX_DEPTH,
                max_formatting: int = MAX_FORMATTING) -> str:
    """``markup`` with start tags beyond ``max_depth`` open elements (or ``max_formatting``
    formatting elements) removed, and their end tags: a block element's tags become ``<br>``
    (its text still ends a line), an inline element's go, and so does any inside ``svg`` or
    ``math``. Markup that never nests so deep is returned unchanged (the same object).

    Most pages are proven shallow by :func:`_proof` (C, or C-level regular expressions where
    the C is not built: no Python loop per tag). The others are scanned once (:func:`_scan`:
    HTML5's tokenizer rules as regular expressions, and a stack), so what follows, an HTML5
    parser, whose cost grows with the depth for every tag (scope checks walk the stack of open
    elements), stays linear in the markup too. Where the scan cannot know the parser's reading
    it fails safe: it counts every start tag and trusts no end tag.

    >>> bound_depth("<div>" * 3 + "x" + "</div>" * 3, max_depth=2)
    '<div><div><br>x<br></div></div>'

    Limits: the stack has no implied end tags, so a page with many unclosed elements (``<p>``,
    ``<li>``) is flattened beyond the cap too (its text is the same, but a boilerplate region
    that deep is no longer recognised); so is a page left inside an unterminated comment or
    script with many tags after it.
    """
    return bound_depth_named(markup, max_depth, max_formatting)[0]


def bound_depth_named(markup: str, max_depth: int = MAX_DEPTH,
                      max_formatting: int = MAX_FORMATTING) -> tuple[str, frozenset[str] | None]:
    """``(bound_depth(markup), names)``: ``names`` are the lower-case names of every start tag
    of the markup when the proof of :func:`bound_depth` read them all (the page is returned
    unchanged), else None. Text extraction skips its queries for elements the page cannot
    hold (:func:`_start_tag_names`)."""
    lts = markup.count("<")
    if _IMPLIED + 3 * lts <= max_depth and lts <= max_formatting:
        return markup, None
    proven, names = _proof(markup, max_depth, max_formatting)
    if proven:
        return markup, names
    cuts = _scan(markup, max_depth, max_formatting)
    if not cuts:
        return markup, None
    parts: list[str] = []
    done = 0
    for start, end, replacement in sorted(cuts):
        parts += (markup[done:start], replacement)
        done = end
    parts.append(markup[done:])
    return "".join(parts), None

"""The text of a page: visible text, fingerprint text without boilerplate, and tokens.

Behaviour (HTML parsed by selectolax/lexbor, about 1 ms for a Python-docs page):

* ``script``, ``style``, ``noscript``, ``template``, ``svg``, ``head``, ``iframe``, ``object``,
  ``embed``, ``canvas`` and comments contribute no text.
* Inline elements join as a browser renders them (``foo<b>bar</b>`` is ``foobar``); runs of
  whitespace, source newlines included, collapse to one space.
* Block elements (``p``, ``div``, ``li``, ``h1``..., table cells, ``br``) end a line: the
  text is one block per line, blank lines removed. Lines are the unit of template learning
  (:class:`TemplateFilter`).
* The *fingerprint text* also leaves out boilerplate regions: ``nav``, ``aside``, a ``header``
  or ``footer`` that is not inside ``article``/``main``/``section``, elements with ARIA
  roles navigation, banner, contentinfo, complementary or search, and advert slots: elements
  whose ``class`` or ``id`` holds a word of :data:`AD_SLOT_WORDS` (``ad``, ``ads``,
  ``advert``, ``sponsored``, ``promo``...; as ad blockers' element rules find them). A text
  advert in plain markup stays (a short block is still left out by :func:`main_tokens`).

Only the first :data:`MAX_HTML_CHARS` characters of the HTML are read (text beyond is
neither returned nor fingerprinted); the spider passes at most its ``PAGE_MAX_PARSE_CHARS``
(:mod:`crawler.urls.pagebounds`). Elements nested deeper than
:data:`crawler.urls.pagebounds.MAX_DEPTH` (512) are flattened first
(:func:`crawler.urls.pagebounds.bound_depth`: their text stays, a block still ends a line), so the
cost is linear in the page whatever its nesting: 10^5 nested elements take about as long as
10^5 siblings. A page that never nests so deep is parsed as it is.

Tokens are taken by :mod:`crawler.content.tokens` (re-exported here: ``tokens``, ``block_tokens``,
``main_tokens``, ``is_english``, ``STOP_WORDS``...).

:func:`is_binary` flags bodies that are not text whatever their Content-Type says;
:func:`wide_encoding` names the UTF-16 or UTF-32 encoding a page without a byte-order mark is
written in (:mod:`crawler.middlewares.encoding` decodes it so).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from selectolax.lexbor import LexborHTMLParser

from crawler.content import tokens as _tokens
from crawler.content.tokens import *  # noqa: F403  (re-exported: the tokenizer's public names)
from crawler.content.tokens import block_tokens
from crawler.urls.pagebounds import INLINE_TAGS, bound_depth_named

__all__ = [*_tokens.__all__, "PageText", "extract", "is_binary", "normalize", "visible_text",
           "wide_encoding"]

_DROP_TAGS = [
    "script", "style", "noscript", "template", "svg", "head", "iframe", "object", "embed",
    "canvas",
]  # fmt: skip
_BOILERPLATE_CSS = (
    "nav, aside, [role=navigation], [role=banner], [role=contentinfo], [role=complementary], "
    "[role=search]"
)
_SECTIONING = {"article", "main", "section"}


def _wordlist(text: str) -> list[str]:
    return text.split()


_SEP = "\x1e"  # text-node separator while extracting; never left in output
# Unwrapped before extraction so that, after merging text nodes, every remaining boundary between
# text nodes is a block boundary (lexbor's text() separates every text node).
_INLINE_TAGS = list(INLINE_TAGS)
_INLINE_CSS = ", ".join(_INLINE_TAGS)
_INLINE = frozenset(_INLINE_TAGS)
#: Only this much of a page's HTML is read: the cost is linear (about 0.1-0.4 ms per KiB of
#: inline-heavy markup) and runs on the reactor thread, so a huge page must stay bounded.
MAX_HTML_CHARS = 2_000_000
@dataclass
class PageText:
    """What :func:`extract` finds in a page.

    ``text`` is the visible text (one block per line); ``blocks`` the lines of the fingerprint
    text (boilerplate regions left out); ``tokens`` the tokens of ``blocks``, in order.
    """

    url: str
    title: str
    text: str
    blocks: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)

    @property
    def fingerprint_text(self) -> str:
        return "\n".join(self.blocks)


def _lines(tree: LexborHTMLParser) -> list[str]:
    """Non-empty lines of the body text, one per block, whitespace collapsed."""
    body = tree.body
    if body is None:
        return []
    lines = (" ".join(part.split()) for part in body.text(separator=_SEP).split(_SEP))
    return [line for line in lines if line]


def _parse(html: str) -> LexborHTMLParser:
    return _parse_named(html)[0]


def _parse_named(html: str) -> tuple[LexborHTMLParser, _Markup]:
    """The page's tree, and what its markup may hold (:class:`_Markup`)."""
    if len(html) > MAX_HTML_CHARS:
        html = html[:MAX_HTML_CHARS]
    if _SEP in html:
        html = html.replace(_SEP, " ")
    bounded, names = bound_depth_named(html)
    return LexborHTMLParser(bounded), _Markup(html, names)


class _Markup:
    """What a page's markup may hold, so that a tree query that cannot match is not run: the
    names of its start tags when :func:`~crawler.urls.pagebounds.bound_depth_named` read them
    all (None: any element may be there), and whether an attribute of a name with a value may
    be on an element (:meth:`may_have`). Every answer errs on "may": the tree is what the
    full queries make. ``html`` None: nothing known."""

    __slots__ = ("_lower", "html", "names")

    def __init__(self, html: str | None = None, names: frozenset[str] | None = None) -> None:
        self.html, self.names = html, names
        self._lower: str | None = None

    def may_hold(self, tags: frozenset[str]) -> bool:
        """Whether an element named one of ``tags`` may be in the tree."""
        return self.names is None or not self.names.isdisjoint(tags)

    def may_have(self, *attributes: str) -> bool:
        """Whether an attribute named one of ``attributes`` (lower case, of :data:`_VALUED`)
        with a value may be on an element: wherever the name (any case; a character
        reference never spells one) and then ``=`` follow a character an attribute name can
        start after (whitespace, ``/``, a quoted value's closing quote). An ASCII page is
        searched lower-cased for the name itself (about 1 us a 5 KB page, where a
        case-blind search costs 30)."""
        html = self.html
        if html is None:
            return True
        if not html.isascii():
            return any(_VALUED_ANY_CASE[name].search(html) for name in attributes)
        if self._lower is None:
            self._lower = html.lower()
        lower = self._lower
        return any(found.start() and lower[found.start() - 1] in _NAME_STARTS_AFTER
                   for name in attributes for found in _VALUED[name].finditer(lower))


_NAME_STARTS_AFTER = frozenset("\t\n\f\r /\"'")
_VALUED = {name: re.compile(name + r"[\t\n\f\r ]*=") for name in ("class", "id", "role")}
_VALUED_ANY_CASE = {name: re.compile(r"[\t\n\f\r /\"']" + name + r"[\t\n\f\r ]*=", re.I | re.A)
                    for name in _VALUED}  # fmt: skip


def _title(tree: LexborHTMLParser, markup: _Markup | None = None) -> str:
    if markup is not None and not markup.may_hold(_TITLE):
        return ""
    node = tree.css_first("title")
    return " ".join(node.text().split()) if node is not None else ""


_TITLE = frozenset(("title",))


def _prepare(tree: LexborHTMLParser, markup: _Markup | None = None) -> None:
    """Drop the elements that show no text and unwrap the inline ones (module docstring); a
    tag ``markup`` shows the page cannot hold is not looked for (the tree is the same)."""
    names = None if markup is None else markup.names
    if names is None:
        tree.strip_tags(_DROP_TAGS)
    else:  # the parser makes a head whatever the markup says
        tree.strip_tags([tag for tag in _DROP_TAGS if tag == "head" or tag in names])
    # ``tree.unwrap_tags(_INLINE_TAGS)`` walks the tree once per tag (35 walks); one selector
    # list walks it once. The tree is the same: an element is spliced out iff it has children
    # when unwrapped, and unwrapping others never changes whether it has, so order is moot.
    root = tree.root
    css = _INLINE_CSS if names is None else _inline_css(names & _INLINE)
    if root is not None and css:
        for node in root.css(css):
            node.unwrap()
    tree.merge_text_nodes()


@lru_cache(maxsize=1024)
def _inline_css(present: frozenset[str]) -> str:
    """The selector list of the inline tags ``present`` (in :data:`_INLINE_TAGS` order): a
    lexbor query costs about its length times the elements (35 tags: 80 us on a 400-element
    page, one tag: 10)."""
    return ", ".join(tag for tag in _INLINE_TAGS if tag in present)


def visible_text(html: str) -> str:
    """The text a reader sees, one block per line (see the module docstring)."""
    tree, markup = _parse_named(html)
    _prepare(tree, markup)
    return "\n".join(_lines(tree))


def _remove_boilerplate(tree: LexborHTMLParser, markup: _Markup | None = None) -> bool:
    """Decompose the boilerplate regions (module docstring); whether there was any. A query
    ``markup`` shows cannot match is not run."""
    body = tree.body
    if body is None:
        return False
    markup = markup or _Markup()
    removed = False
    for node in body.css("header, footer") if markup.may_hold(_HEADER_FOOTER) else ():
        parent = node.parent
        while parent is not None and parent.tag not in _SECTIONING:
            parent = parent.parent
        if parent is None:
            node.decompose()
            removed = True
    if markup.may_hold(_NAV_ASIDE) or markup.may_have("role"):
        for node in body.css(_BOILERPLATE_CSS):
            node.decompose()
            removed = True
    for node in body.css(_AD_CANDIDATES_CSS) if markup.may_have("class", "id") else ():
        if _is_ad_slot(node):
            node.decompose()
            removed = True
    return removed


_HEADER_FOOTER = frozenset(("header", "footer"))
_NAV_ASIDE = frozenset(("nav", "aside"))


#: Words that name an advert slot in a ``class`` or ``id`` (as ad blockers' element rules and
#: Readability's "unlikely candidates" do): ``ad``, ``ads``, ``advert``, ``sponsored``...
AD_SLOT_WORDS = frozenset(_wordlist(
    "ad ads adv advert adverts advertisement advertisements advertising adsbygoogle adslot "
    "adunit sponsor sponsored sponsors sponsorship promo promoted promotion promotions"))
_AD_CANDIDATES_CSS = ", ".join(f"[{attr}*={stem}]" for attr in ("class", "id")
                               for stem in ("ad", "Ad", "AD", "sponsor", "Sponsor", "promo",
                                            "Promo"))  # fmt: skip
_ATTR_WORDS = re.compile(r"[a-z0-9]+")


def _is_ad_slot(node: object) -> bool:
    """Whether an element's class or id holds a word of :data:`AD_SLOT_WORDS` (words split at
    anything but letters and digits: ``ad-slot``, ``sidebar_ad``, ``adsbygoogle``)."""
    attrs = getattr(node, "attributes", None) or {}
    for name in ("class", "id"):
        value = attrs.get(name)
        if value and not AD_SLOT_WORDS.isdisjoint(_ATTR_WORDS.findall(value.lower())):
            return True
    return False


class ParsedPage:
    """A page parsed once for everything the crawl reads of it: the hrefs of its links and
    its ``<link>`` elements, read at once (extraction then unwraps and strips them), and its
    text (:meth:`extract`, once). One lexbor tree of the depth-bounded markup, as
    :func:`extract` makes it: the crawl parsed each page twice before (lxml for the links).

    ``hrefs``: each ``<a>`` and ``<area>`` href in document order (what lxml's
    ``//a/@href | //area/@href`` gives, but for an inert ``<template>``'s content, which the
    HTML5 tree keeps apart, and for links nested past the depth bound, flattened with their
    elements); ``links``: ``(rel, href)`` of each ``<link>`` with an href.
    """

    __slots__ = ("_tree", "hrefs", "links", "markup")

    def __init__(self, html: str) -> None:
        tree, markup = _parse_named(html)
        self._tree: LexborHTMLParser | None = tree
        self.markup = markup
        self.hrefs: list[str] = [
            node.attributes.get("href") or "" for node in tree.css(_HREF_CSS)
        ] if markup.may_hold(_LINKING) else []  # fmt: skip
        self.links: list[tuple[str, str]] = [
            (node.attributes.get("rel") or "", node.attributes.get("href") or "")
            for node in tree.css("link[href]")
        ] if markup.may_hold(_LINK) else []  # fmt: skip

    def extract(self, url: str = "", *, stem: bool = False, tokenize: bool = True) -> PageText:
        """:func:`extract` of the page (once: it changes the tree)."""
        tree = self._tree
        if tree is None:
            raise RuntimeError("ParsedPage.extract: the page's text was extracted already")
        self._tree = None
        return _extract_tree(tree, self.markup, url, stem=stem, tokenize=tokenize)


_HREF_CSS = "a[href], area[href]"
_LINKING = frozenset(("a", "area"))
_LINK = frozenset(("link",))


def extract(html: str, url: str = "", *, stem: bool = False, tokenize: bool = True) -> PageText:
    """Title, visible text, fingerprint blocks and (unless not ``tokenize``) their tokens."""
    tree, markup = _parse_named(html)
    return _extract_tree(tree, markup, url, stem=stem, tokenize=tokenize)


def _extract_tree(tree: LexborHTMLParser, markup: _Markup, url: str, *, stem: bool,
                  tokenize: bool) -> PageText:  # fmt: skip
    title = _title(tree, markup)
    _prepare(tree, markup)
    lines = _lines(tree)
    text = "\n".join(lines)
    # No boilerplate region: the tree is unchanged, its lines too (not taken again).
    blocks = _lines(tree) if _remove_boilerplate(tree, markup) else lines
    toks: list[str] = []
    for words in block_tokens(blocks, stem=stem) if tokenize else ():
        toks.extend(words)
    return PageText(url=url, title=title, text=text, blocks=blocks, tokens=toks)


def normalize(text: str) -> str:
    """NFKC, case folded, whitespace collapsed: the text the content hash is taken of."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


# --- binary bodies -----------------------------------------------------------------------------

_MAGIC = (
    b"%PDF-", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"PK\x03\x04",
    b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"7z\xbc\xaf\x27\x1c", b"Rar!\x1a\x07", b"\x7fELF",
    b"OggS", b"ID3", b"fLaC", b"\x00asm", b"wOFF", b"wOF2", b"\x00\x00\x01\x00", b"II*\x00",
    b"MM\x00*", b"%!PS", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", b"SQLite format 3\x00",
)  # fmt: skip
_SAMPLE = 8192
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13, 27))


def is_binary(body: bytes) -> bool:
    """True when ``body`` is not text: a known file signature, or NUL / control bytes.

    Looks at the first 8 KiB only. UTF-16 and UTF-32 text (with a BOM, starting as
    :func:`wide_encoding` detects, or NULs all on the same byte lane as ASCII UTF-16 has) is
    text. Otherwise more than 1% NUL bytes, or more than 10% other control bytes, means binary.
    """
    head = body[:_SAMPLE]
    if not head:
        return False
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):
        return False
    if (
        head.startswith(_MAGIC)
        or head[4:12] in (b"ftypisom", b"ftypmp42")
        or (head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE", b"AVI "))
    ):
        return True
    if wide_encoding(head) is not None:
        return False
    nuls = head.count(0)
    if nuls and _utf16_lanes(head, nuls):
        return False
    if nuls > len(head) // 100:
        return True
    controls = len(head) - len(head.translate(None, _CONTROL))
    return controls > len(head) // 10


#: Where the ASCII characters of the first 8 bytes sit in each wide encoding (the other bytes
#: are NUL): XML 1.0 appendix F's detection without a byte-order mark, over two characters.
_WIDE_LANES = (("utf-32-le", (0, 4)), ("utf-32-be", (3, 7)), ("utf-16-le", (0, 2, 4, 6)),
               ("utf-16-be", (1, 3, 5, 7)))  # fmt: skip


def wide_encoding(body: bytes) -> str | None:
    """``"utf-16-le"``, ``"utf-16-be"``, ``"utf-32-le"`` or ``"utf-32-be"`` when ``body``
    starts like ASCII text (``<!DOCTYPE``, ``<html``, a newline) in that encoding without a
    byte-order mark; None otherwise. Reads the first 8 bytes: 2 to 4 characters, each a
    non-NUL ASCII byte with NUL bytes where the encoding puts them.

    >>> wide_encoding("<html>".encode("utf-16-le")), wide_encoding(b"\\0\\0\\0<\\0\\0\\0h")
    ('utf-16-le', 'utf-32-be')
    >>> wide_encoding(b"<html><body>") is None
    True

    Limits: a page that begins with a non-ASCII character (no markup first) is not detected.
    """
    head = body[:8]
    if len(head) < 8 or (head.isascii() and 0 not in head):
        return None
    for name, chars in _WIDE_LANES:
        if all((0 < byte < 0x80) if i in chars else byte == 0 for i, byte in enumerate(head)):
            return name
    return None


def _utf16_lanes(head: bytes, nuls: int) -> bool:
    """NULs only on even or only on odd offsets, about half the bytes: UTF-16 ASCII text."""
    even = head[0::2].count(0)
    return nuls >= len(head) // 4 and (even == nuls or even == 0)


def media_type(content_type: bytes | str | None) -> str:
    """The media type of a Content-Type header value, lower-cased, parameters cut
    (``b"Text/HTML; charset=utf-8"`` -> ``"text/html"``); ``""`` when there is none."""
    raw = content_type.decode("latin-1") if isinstance(content_type, bytes) else content_type
    return (raw or "").split(";", 1)[0].strip().lower()

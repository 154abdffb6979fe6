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
  or ``footer`` that is not inside ``article``/``main``/``section``, and elements with ARIA
  roles navigation, banner, contentinfo, complementary or search.

Only the first :data:`MAX_HTML_CHARS` characters of the HTML are read (text beyond is
neither returned nor fingerprinted).

Tokens: NFKC, case folding, words (``\\w+``, so digits count), a built-in English stop-word
list removed, optional light English suffix stemming. The exact token rules may change between
minor versions (fingerprints stored by an older version then differ slightly).

:func:`is_binary` flags bodies that are not text whatever their Content-Type says.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from selectolax.lexbor import LexborHTMLParser

__all__ = [
    "STOP_WORDS",
    "PageText",
    "block_tokens",
    "extract",
    "is_binary",
    "main_tokens",
    "normalize",
    "tokens",
    "visible_text",
]

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
_INLINE_TAGS = _wordlist(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark nobr "
    "q s samp small span strike strong sub sup time tt u var wbr"
)
_WORD_RE = re.compile(r"\w+")
#: Only this much of a page's HTML is read: the cost is linear (about 0.1-0.4 ms per KiB of
#: inline-heavy markup) and runs on the reactor thread, so a huge page must stay bounded.
MAX_HTML_CHARS = 2_000_000
#: Blocks shorter than this (in tokens) are "short" (see :func:`main_tokens`).
SHORT_BLOCK_TOKENS = 12

#: Built-in English stop words (function words that carry no topic).
STOP_WORDS = frozenset(
    _wordlist(
        """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    also may might must shall us via per etc"""
    )
)


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
    if len(html) > MAX_HTML_CHARS:
        html = html[:MAX_HTML_CHARS]
    if _SEP in html:
        html = html.replace(_SEP, " ")
    return LexborHTMLParser(html)


def _title(tree: LexborHTMLParser) -> str:
    node = tree.css_first("title")
    return " ".join(node.text().split()) if node is not None else ""


def _prepare(tree: LexborHTMLParser) -> None:
    tree.strip_tags(_DROP_TAGS)
    tree.unwrap_tags(_INLINE_TAGS)
    tree.merge_text_nodes()


def visible_text(html: str) -> str:
    """The text a reader sees, one block per line (see the module docstring)."""
    tree = _parse(html)
    _prepare(tree)
    return "\n".join(_lines(tree))


def _remove_boilerplate(tree: LexborHTMLParser) -> None:
    body = tree.body
    if body is None:
        return
    for node in body.css("header, footer"):
        parent = node.parent
        while parent is not None and parent.tag not in _SECTIONING:
            parent = parent.parent
        if parent is None:
            node.decompose()
    for node in body.css(_BOILERPLATE_CSS):
        node.decompose()


def extract(html: str, url: str = "", *, stem: bool = False, tokenize: bool = True) -> PageText:
    """Title, visible text, fingerprint blocks and (unless not ``tokenize``) their tokens."""
    tree = _parse(html)
    title = _title(tree)
    _prepare(tree)
    text = "\n".join(_lines(tree))
    _remove_boilerplate(tree)
    blocks = _lines(tree)
    toks: list[str] = []
    for words in block_tokens(blocks, stem=stem) if tokenize else ():
        toks.extend(words)
    return PageText(url=url, title=title, text=text, blocks=blocks, tokens=toks)


def main_tokens(per_block: list[list[str]], min_tokens: int) -> list[str]:
    """Tokens of the long blocks when they hold most of the text, else of every block.

    Blocks of fewer than :data:`SHORT_BLOCK_TOKENS` tokens (datelines, bylines, text adverts,
    captions, per-page "latest headlines" widgets) are left out when the long blocks hold at
    least ``min_tokens`` tokens and at least a third of all tokens, so a changed date or advert
    does not move a short page's fingerprint while list-like pages keep every block.
    """
    long_blocks = [toks for toks in per_block if len(toks) >= SHORT_BLOCK_TOKENS]
    long_count = sum(map(len, long_blocks))
    total = sum(map(len, per_block))
    chosen = long_blocks if long_count >= min_tokens and 3 * long_count >= total else per_block
    return [t for toks in chosen for t in toks]


def normalize(text: str) -> str:
    """NFKC, case folded, whitespace collapsed: the text the content hash is taken of."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def tokens(text: str, *, stem: bool = False) -> list[str]:
    """Words of ``text``: NFKC, case folded, stop words removed, optionally stemmed."""
    words = _WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
    kept = [w for w in words if w not in STOP_WORDS]
    return [_stem(w) for w in kept] if stem else kept


def block_tokens(blocks: list[str], *, stem: bool = False) -> list[list[str]]:
    """``[tokens(b) for b in blocks]``, normalizing the whole page in one call (faster)."""
    if not blocks:
        return []
    folded = unicodedata.normalize("NFKC", "\n".join(blocks)).casefold().split("\n")
    if len(folded) != len(blocks):  # a compatibility mapping made or ate a line break
        return [tokens(b, stem=stem) for b in blocks]
    stop, findall = STOP_WORDS, _WORD_RE.findall
    out = [[w for w in findall(line) if w not in stop] for line in folded]
    return [[_stem(w) for w in words] for words in out] if stem else out


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A light English suffix stripper (plurals, -ing, -ed, -ly); keeps 3+ letters."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("sses", "ss"), ("ies", "y"), ("ing", ""), ("edly", ""), ("ed", ""),
                         ("ly", ""), ("es", "e"), ("s", "")):  # fmt: skip
        if word.endswith(suffix) and not word.endswith(("ss", "us", "is")):
            stem = word[: -len(suffix)] + repl
            return stem if len(stem) >= 3 else word
    return word


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

    Looks at the first 8 KiB only. UTF-16 and UTF-32 text (with a BOM, or NULs all on the same
    byte lane as ASCII UTF-16 has) is text. Otherwise more than 1% NUL bytes, or more than 10%
    other control bytes, means binary.
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
    nuls = head.count(0)
    if nuls and _utf16_lanes(head, nuls):
        return False
    if nuls > len(head) // 100:
        return True
    controls = len(head) - len(head.translate(None, _CONTROL))
    return controls > len(head) // 10


def _utf16_lanes(head: bytes, nuls: int) -> bool:
    """NULs only on even or only on odd offsets, about half the bytes: UTF-16 ASCII text."""
    even = head[0::2].count(0)
    return nuls >= len(head) // 4 and (even == nuls or even == 0)

"""Real manual pages from Debian documentation packages, read for the quality bench's page sets.

Sources (a reader raises :class:`MissingSource`, naming the package to install, when its files
are absent):

* ``python``: ``python3.11-doc``, /usr/share/doc/python3.11/html/**/*.html (Sphinx pages);
* ``postgres``: ``postgresql-doc-15``, /usr/share/doc/postgresql-doc-15/html/*.html (DocBook);
* ``ja`` / ``zh-cn``: ``debian-reference-ja`` / ``debian-reference-zh-cn``,
  /usr/share/debian-reference/*.<lang>.html: one huge page per chapter, split here into its
  sections (:func:`reference_sections`).

Word counts are of the fingerprint text (:func:`crawler.content.text.extract`, boilerplate regions
out) split on white space; they mean little for Chinese and Japanese, so sections are measured in
characters. Sampling is seeded: the same ``rng`` state picks the same pages.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawler.content.text import extract

#: source name -> (documentation root, glob under it, Debian package)
SOURCES = {
    "python": (Path("/usr/share/doc/python3.11/html"), "**/*.html", "python3.11-doc"),
    "postgres": (Path("/usr/share/doc/postgresql-doc-15/html"), "*.html", "postgresql-doc-15"),
    "ja": (Path("/usr/share/debian-reference"), "*.ja.html", "debian-reference-ja"),
    "zh-cn": (Path("/usr/share/debian-reference"), "*.zh-cn.html", "debian-reference-zh-cn"),
}


_NUMBER = re.compile(r"[A-Z\d]+(\.\d+)*")
_SITE_SUFFIX = re.compile(r" [\u2014|-] Python [\d.]+ documentation$")


class MissingSource(Exception):
    """A documentation package is not installed; the message says which one to install (any
    of ``sources`` will do)."""

    def __init__(self, *sources: str) -> None:
        self.packages = [SOURCES[s][2] for s in sources]
        where = ", ".join(f"{SOURCES[s][0]}/{SOURCES[s][1]}" for s in sources)
        super().__init__(f"no {where} (apt-get install {' or '.join(self.packages)})")


@dataclass(frozen=True)
class DocPage:
    """A page of a documentation package: path relative to its root, HTML, word count."""

    path: str
    html: str
    words: int


@dataclass(frozen=True)
class Section:
    """One section of a Debian Reference chapter: ``html`` is its ``div.section``, nested
    subsections included; ``slug`` its number (``2.1.3``), ``chapter`` the chapter file's stem."""

    chapter: str
    chapter_title: str
    title: str
    slug: str
    html: str


def doc_paths(source: str) -> list[Path]:
    """The source's HTML files, sorted; :class:`MissingSource` when there are none."""
    root, pattern, _ = SOURCES[source]
    paths = sorted(root.glob(pattern))
    if not paths:
        raise MissingSource(source)
    return paths


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def long_pages(
    source: str, rng: random.Random, count: int, min_words: int = 500,
    exclude: Collection[str] = (),
) -> list[DocPage]:  # fmt: skip
    """``count`` pages (fewer if the source has fewer) of at least ``min_words`` words, drawn
    in a seeded random order; paths in ``exclude`` are skipped."""
    root = SOURCES[source][0]
    paths = doc_paths(source)
    rng.shuffle(paths)
    picked: list[DocPage] = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if rel in exclude or rel.startswith(("_", "genindex", "py-modindex", "search")):
            continue
        html = read(path)
        words = sum(len(b.split()) for b in extract(html, tokenize=False).blocks)
        if words >= min_words:
            picked.append(DocPage(rel, html, words))
            if len(picked) == count:
                break
    return picked


def title_of(html: str | LexborHTMLParser) -> str:
    """The page's ``<title>``, without a Sphinx site suffix (`` — Python 3.11.2 documentation``)."""
    tree = LexborHTMLParser(html) if isinstance(html, str) else html
    node = tree.css_first("title")
    title = " ".join(node.text().split()) if node is not None else ""
    return _SITE_SUFFIX.sub("", title)


def paragraphs(html: str, min_words: int = 8) -> list[str]:
    """Texts of the ``<p>`` elements of a page's main part (``[role=main]``, else the body),
    white space collapsed, markup dropped; paragraphs under ``min_words`` words left out."""
    tree = LexborHTMLParser(html)
    main = tree.css_first("[role=main]") or tree.body
    if main is None:
        return []
    texts = (" ".join(p.text(deep=True).split()) for p in main.css("p"))
    return [t for t in texts if len(t.split()) >= min_words]


def main_html(html: str) -> str:
    """The main part of a Sphinx or DocBook page, without the site's own navigation: the
    ``[role=main]`` element's HTML, else the body's children minus the DocBook nav bars."""
    tree = LexborHTMLParser(html)
    main = tree.css_first("[role=main]")
    if main is not None:
        return main.html or ""
    for node in tree.css("div.navheader, div.navfooter"):
        node.decompose()
    body = tree.body
    return "".join(child.html or "" for child in body.iter()) if body is not None else ""


def _heading(section: LexborNode) -> LexborNode | None:
    titlepage = section.css_first("div.titlepage")
    return titlepage.css_first("h2, h3, h4, h5") if titlepage is not None else None


def _has_h3(section: LexborNode) -> bool:
    return any((h := _heading(s)) is not None and h.tag == "h3" for s in section.css("div.section"))


def _units(chapter: LexborHTMLParser) -> list[tuple[LexborNode, LexborNode]]:
    """``(section, heading)`` of each level-3 section and each level-2 section without any."""
    units = []
    for section in chapter.css("div.section"):
        heading = _heading(section)
        if heading is None:
            continue
        if heading.tag == "h3" or (heading.tag == "h2" and not _has_h3(section)):
            units.append((section, heading))
    return units


def reference_sections(lang: str, min_chars: int = 300) -> list[Section]:
    """The sections of every Debian Reference chapter in ``lang`` (``ja``, ``zh-cn``) holding
    at least ``min_chars`` characters of text, in book order."""
    out: list[Section] = []
    for path in doc_paths(lang):
        chapter = path.name.split(".", 1)[0]
        if not chapter.startswith(("ch", "ap")):
            continue
        tree = LexborHTMLParser(read(path))
        chapter_title = title_of(tree)
        for n, (section, heading) in enumerate(_units(tree)):
            if len("".join(section.text(deep=True).split())) < min_chars:
                continue
            title = " ".join(heading.text(deep=True).split())
            number = title.split(" ", 1)[0].rstrip(".")
            slug = number if _NUMBER.fullmatch(number) else f"s{n}"
            out.append(Section(chapter, chapter_title, title, slug, section.html or ""))
    return out

"""The quality bench's page sets: real manual pages, real-looking mirrors, one builder per set.

Every set is deterministic for a given seed; ``quick`` halves it. Sizes below are full / quick.
Mirrors (:mod:`bench.mirrors`) live on ``http://mirror.test:8001`` (a host of their own: the
originals' hosts never see them); byte copies under ``/copies/`` on their original's host.

* ``english``: Debian's python3.11-doc (150 / 75 Sphinx pages) on
  ``http://docs.python.test:8000/3.11/`` and postgresql-doc-15 (120 / 60 DocBook pages) on
  ``http://www.postgresql.test:8000/docs/15/``, served as installed, each of >= 500 words; 40%
  mirrored, 3 + 3 byte copies.
* ``japanese`` / ``chinese``: the sections of debian-reference-ja / -zh-cn (level-3 sections,
  and level-2 ones without any, >= 300 characters; 200 / 100 drawn) each one page in a site
  chrome of that language (:func:`bench.chrome.cjk_chrome`); 40% mirrored, 4 copies.
* ``short``: 180 / 90 distinct excerpts of 100-360 words (consecutive paragraphs of one real
  manual page, at most three excerpts per page) inside one ~1,000+-word plain-``<div>`` chrome
  (:func:`bench.chrome.english_chrome`); 45% mirrored (a mirror adds 10-30 words: <= 400), 4
  copies. Needs python3.11-doc or postgresql-doc-15.
* ``syndicated``: :func:`bench.syndicated.corpus` (generated sites, syndicated copies; its
  redirect stubs left out: a crawl never stores them).
* ``english-same-origin``, ``japanese-same-origin``, ``chinese-same-origin``: those sets with
  every mirror on its original's own origin, at ``/mirror`` + the original's path (a site
  that serves a renamed, advertised, time-stamped copy of itself).
* ``shared-host``: the ``english`` set plus two unrelated sites on the mirrors' host name, other
  ports: ``:8002`` (60 / 30 other python3.11-doc pages) and ``:8003`` (60 / 30 other
  postgresql-doc-15 pages), each page's main part in the site's own chrome. Its fetch order is
  the ``english`` order with the extra pages inserted at seeded random places, so the english
  pages meet each other in the same order: the difference is the two sites alone.

:class:`bench.debian_docs.MissingSource` (naming the package to install) when a set's Debian
package is absent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace

from bench.chrome import Chrome, cjk_chrome, english_chrome, esc
from bench.debian_docs import (
    DocPage,
    MissingSource,
    long_pages,
    main_html,
    paragraphs,
    reference_sections,
    title_of,
)
from bench.mirrors import MirrorStyle, plant
from bench.pages import PageSet, SetPage, fetch_order

SETS = ("english", "japanese", "chinese", "short", "syndicated", "shared-host",
        "english-same-origin", "japanese-same-origin", "chinese-same-origin")
#: The suffix of a set whose mirrors live on their original's own origin, under ``/mirror``:
#: one site's template learning sees the original's chrome and the mirror's together.
SAME_ORIGIN = "-same-origin"
MIRROR = "http://mirror.test:8001"
PY_ORIGIN = "http://docs.python.test:8000/3.11/"
PG_ORIGIN = "http://www.postgresql.test:8000/docs/15/"
PY_STYLE = MirrorStyle("en", r"(Python )?3\.11\.\d+ [Dd]ocumentation", "PyDocs Mirror")
PG_STYLE = MirrorStyle("en", r"PostgreSQL 15\.\d+ Documentation", "PgDocs Mirror")
CJK_SITES = {  # set -> (source, chrome language, host, site name, mirror name)
    "japanese": ("ja", "ja", "http://debian-note.jp.test:8000", "Debian 活用ノート",
                 "デビアン資料室ミラー"),
    "chinese": ("zh-cn", "zh", "http://debian-shouce.cn.test:8000", "Debian 实用手册",
                "开源文档镜像站"),
}  # fmt: skip
SHORT_SITE = ("http://notes.test:8000", "Field Notes for Admins", "Admin Notes Mirror")
SHORT_WORDS = (100, 360)


def build(name: str, quick: bool, seed: int, *, unique_ads: bool = False) -> PageSet:
    """The set ``name`` (one of :data:`SETS`); MissingSource when its package is absent.
    ``unique_ads``: no advert block repeats (:class:`bench.mirrors.MirrorStyle`)."""
    if name.endswith(SAME_ORIGIN):
        base = name.removesuffix(SAME_ORIGIN)
        if base in CJK_SITES:
            return replace(cjk_set(base, quick, seed, unique_ads, same_origin=True), name=name)
        if base == "english":
            return replace(_english(*_english_sources(quick, seed), seed, unique_ads,
                                    same_origin=True), name=name)
    if name in CJK_SITES:
        return cjk_set(name, quick, seed, unique_ads)
    builders: dict[str, Callable[[bool, int, bool], PageSet]] = {
        "english": english_set, "short": short_set, "syndicated": syndicated_set,
        "shared-host": shared_host_set,
    }  # fmt: skip
    if name not in builders:
        raise ValueError(f"unknown set {name!r}: choose from {', '.join(SETS)}")
    return builders[name](quick, seed, unique_ads)


def _sized(quick: bool, full: int) -> int:
    return full // 2 if quick else full


def _english_sources(quick: bool, seed: int) -> tuple[list[DocPage], list[DocPage]]:
    rng = random.Random(seed)
    python = long_pages("python", rng, _sized(quick, 150))
    return python, long_pages("postgres", rng, _sized(quick, 120))


def english_set(quick: bool, seed: int, unique_ads: bool = False) -> PageSet:
    return _english(*_english_sources(quick, seed), seed, unique_ads)


def _english(py: list[DocPage], pg: list[DocPage], seed: int, unique_ads: bool,
             same_origin: bool = False) -> PageSet:
    rng = random.Random(seed + 1)
    py_style, pg_style = (replace(s, unique_ads=unique_ads) for s in (PY_STYLE, PG_STYLE))
    py_base, pg_base = ((_origin(PY_ORIGIN) + "/mirror", _origin(PG_ORIGIN) + "/mirror")
                        if same_origin else (f"{MIRROR}/python", f"{MIRROR}/postgresql"))
    pages = plant([SetPage(PY_ORIGIN + p.path, p.html) for p in py], py_style, rng, py_base)
    pages += plant([SetPage(PG_ORIGIN + p.path, p.html) for p in pg], pg_style, rng, pg_base)
    return PageSet("english", pages, f"{len(py)} python3.11-doc + {len(pg)} postgresql-doc-15 "
                   f"pages (>= 500 words), {_planted(pages)}")  # fmt: skip


def _origin(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _planted(pages: Iterable[SetPage]) -> str:
    kinds = [p.kind for p in pages]
    return f"{kinds.count('mirror')} mirrors, {kinds.count('copy')} byte copies"


def cjk_set(name: str, quick: bool, seed: int, unique_ads: bool = False,
            same_origin: bool = False) -> PageSet:
    source, lang, origin, site, mirror = CJK_SITES[name]
    rng = random.Random(seed)
    sections = reference_sections(source)
    picked = sorted(rng.sample(range(len(sections)), min(len(sections), _sized(quick, 200))))
    popular = [sections[i].title for i in rng.sample(range(len(sections)), 8)]
    chrome = cjk_chrome(lang, site, popular)
    originals = []
    for i in picked:
        s = sections[i]
        html = chrome.page(s.title, s.html, f"{s.chapter_title} » {s.title}")
        originals.append(SetPage(f"{origin}/{s.chapter}/{s.slug}.html", html))
    style = MirrorStyle(lang, site, mirror, unique_ads)
    pages = plant(originals, style, rng, f"{origin}/mirror" if same_origin else MIRROR, copies=4)
    return PageSet(name, pages, f"{len(originals)} of {len(sections)} debian-reference-{source} "
                   f"sections in a {lang} chrome, {_planted(pages)}")  # fmt: skip


def _doc_paragraphs() -> list[tuple[str, list[str]]]:
    """``(title, paragraphs)`` of every python3.11-doc and postgresql-doc-15 page installed."""
    from bench.debian_docs import doc_paths, read

    docs = []
    for source in ("python", "postgres"):
        try:
            docs += [(title_of(h := read(p)), paragraphs(h)) for p in doc_paths(source)]
        except MissingSource:
            continue
    if not docs:
        raise MissingSource("python", "postgres")
    return docs


def excerpts(
    docs: list[tuple[str, list[str]]], rng: random.Random, count: int,
    words: tuple[int, int] = SHORT_WORDS, per_doc: int = 3,
) -> list[tuple[str, list[str]]]:  # fmt: skip
    """``count`` excerpts ``(title, paragraphs)``: consecutive paragraphs of one document
    totalling ``words[0]``..``words[1]`` words (title included), each paragraph used once, at
    most ``per_doc`` per document, documents in a seeded random order."""
    out: list[tuple[str, list[str]]] = []
    for i in rng.sample(range(len(docs)), len(docs)):
        title, paras = docs[i]
        out += _doc_excerpts(title, paras, rng, words)[:per_doc]
        if len(out) >= count:
            break
    return out[:count]


def _doc_excerpts(
    title: str, paras: list[str], rng: random.Random, words: tuple[int, int]
) -> list[tuple[str, list[str]]]:
    lo, hi = words
    head = len(title.split())
    found: list[tuple[str, list[str]]] = []
    run: list[str] = []
    size, target = head, rng.randint(lo, hi)
    for para in paras:
        n = len(para.split())
        if size + n > hi:  # too long with it: keep the run if long enough, start again
            if size >= lo:
                found.append((title, run))
            run, size = [], head
            if head + n > hi:
                continue
        run.append(para)
        size += n
        if size >= target:
            found.append((title, run))
            run, size, target = [], head, rng.randint(lo, hi)
    return found


def short_pages(
    docs: list[tuple[str, list[str]]], rng: random.Random, count: int
) -> tuple[Chrome, list[SetPage]]:
    """Distinct short pages (:func:`excerpts`) in one large shared chrome."""
    chrome_src, page_src = docs[: len(docs) // 4], docs[len(docs) // 4 :]
    labels = [t for t, _ in chrome_src if t] or ["Documentation"]
    prose = [p for _, ps in chrome_src for p in ps][:10]
    origin, site, _ = SHORT_SITE
    chrome = english_chrome(site, labels, prose, rng, large=True)
    pages = []
    for n, (title, paras) in enumerate(excerpts(page_src, rng, count)):
        body = f"<h1>{esc(title)}</h1>" + "".join(f"<p>{esc(p)}</p>" for p in paras)
        pages.append(SetPage(f"{origin}/notes/{n}.html", chrome.page(title, body, title)))
    return chrome, pages


def short_set(quick: bool, seed: int, unique_ads: bool = False) -> PageSet:
    rng = random.Random(seed)
    chrome, originals = short_pages(_doc_paragraphs(), rng, _sized(quick, 180))
    style = MirrorStyle("en", SHORT_SITE[1], SHORT_SITE[2], unique_ads)
    pages = plant(originals, style, rng, MIRROR, fraction=0.45, copies=4)
    return PageSet("short", pages, f"{len(originals)} distinct excerpts of {SHORT_WORDS[0]}-"
                   f"{SHORT_WORDS[1]} words in one {chrome.words()}-word chrome, "
                   f"{_planted(pages)}")  # fmt: skip


def syndicated_set(quick: bool, seed: int, unique_ads: bool = False) -> PageSet:
    """The generated corpus as it is (its mirrors are the generators'; ``unique_ads`` unused)."""
    from bench.syndicated import corpus

    pages = []
    for doc in corpus(quick):
        if doc.status != 200:  # a redirect: a crawl follows it, the pipeline never sees it
            continue
        original = doc.group == f"{doc.host}{doc.path}"
        kind = "mirror" if doc.group and not original else "page"
        pages.append(SetPage(f"http://{doc.host}{doc.path}", doc.html, doc.group, kind))
    return PageSet(
        "syndicated",
        pages,
        f"generated demo.test + journal.test + wire.test, "
        f"{_planted(pages)} (mirrors: advert/date mirrors and syndicated copies)",
    )


def _extra_site(
    source: str, port: int, site: str, quick: bool, rng: random.Random, exclude: set[str]
) -> list[SetPage]:
    docs = long_pages(source, rng, _sized(quick, 60), exclude=exclude)
    labels = [title_of(d.html) for d in docs]
    chrome = english_chrome(site, labels, paragraphs(docs[0].html)[:4], rng, large=False)
    base = f"http://mirror.test:{port}/"
    return [SetPage(base + d.path, chrome.page(title, main_html(d.html), title))
            for d, title in zip(docs, labels, strict=True)]  # fmt: skip


def shared_host_set(quick: bool, seed: int, unique_ads: bool = False) -> PageSet:
    py, pg = _english_sources(quick, seed)
    english = _english(py, pg, seed, unique_ads)
    rng = random.Random(seed + 2)
    extra = _extra_site("python", 8002, "Snake Pit Tutorials", quick, rng, {p.path for p in py})
    extra += _extra_site("postgres", 8003, "Query Cookbook", quick, rng, {p.path for p in pg})
    order = fetch_order(len(english.pages), seed)
    for i in range(len(english.pages), len(english.pages) + len(extra)):
        order.insert(rng.randrange(len(order) + 1), i)
    return PageSet("shared-host", english.pages + extra, f"english set + {len(extra)} pages of "
                   "two other sites on mirror.test:8002 and :8003", order)  # fmt: skip

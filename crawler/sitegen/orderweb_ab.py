"""An "order test web" on two origins: every kind of duplicate the dedup meets, with ground truth,
to check that the pages a crawl stores do not depend on the order it fetches them in.

Two sites, each served by its own :class:`~crawler.siteserver.SiteServer` on 127.0.0.1 (two
ports: two origins): ``a`` (the original, "Aldgate Review") and ``b`` (a mirror and syndicator,
"Bexley Daily"). Seeds are both home pages.

Site ``a``:

- ``/`` links the section pages, the two note listings, the mirror index and ``b``'s home;
- ``/section/N/`` (``SECTIONS``) link the ``ARTICLES`` distinct articles ``/articles/<slug>``
  (about 350 words each; the home links the first few too);
- same-origin mirrors ``/mirror/articles/<slug>`` of ``SAME_ORIGIN_MIRRORS`` articles, listed
  on ``/mirror/``: another site name in the header, an advert in an ``class="ad"`` slot, a
  "Last updated <timestamp>" line and a per-page credit line (>= 12 words, so it is
  fingerprinted) chosen so the page lands 1, 2 or 3 SimHash bits from its original;
- a **duplicate listing**: ``/notes-a/`` and ``/notes-b/`` have the same visible text (same
  chrome, heading and entries "Note 1" .. "Note NOTES") but link different, distinct note pages
  ``/notes-a/N`` and ``/notes-b/N`` (about 300 words each), linked from nowhere else.

Site ``b`` (its home links all of these):

- mirrors ``/syndicated/<slug>`` of ``B_MIRRORS`` articles: the same article text in ``b``'s
  chrome, an advert slot, a "Last updated" line and a credit line (1-3 bits, as above); three of
  them mirror an article that has a same-origin mirror too (groups of three);
- byte-identical copies ``/c/<slug>`` of ``B_COPIES`` articles (the shorter URL: the preference
  order keeps the copy);
- canonical copies ``/w/<slug>`` of ``B_CANONICAL`` articles in ``b``'s chrome naming the
  original ``http://A/articles/<slug>`` canonical (``<link rel="canonical">``);
- ``B_LOCAL`` distinct pages of its own, ``/local/N``.

Cross-origin links need the other origin's base URL, known once the servers are bound: bodies
hold ``{a_base}`` / ``{b_base}``, filled by :meth:`OrderWeb.bind` (``serve()`` does it).

Ground truth (paths are site keys; a member is ``(origin, path)`` with origin ``"a"``/``"b"``):

- ``distinct``: origin -> paths of the pages that belong to no duplicate group: every crawl
  must store each of them;
- ``groups``: the duplicate groups (sets of members): a crawl stores exactly one member of each;
- ``kinds``: member -> what it is (``original``, ``same-origin mirror``, ``mirror``,
  ``byte copy``, ``canonical copy``, ``listing``);
- ``distance``: member -> SimHash bits from its group's original, as the project's
  fingerprinting computes them (:func:`page_signature`); byte copies and listings 0;
- ``notes``: listing path -> the note paths only it links;
- ``names``: member -> the member it names canonical.

:meth:`OrderWeb.expected` gives the exact stored set the preference order
(:mod:`crawler.preference`) picks for given base URLs and seeds. Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crawler.pipelines.pages import Fingerprinter
from crawler.preference import preference_key, seed_hosts
from crawler.simhash import hamming
from crawler.sitegen.site import Page, Site, escape, page, slugify
from crawler.sitegen.text import TextMaker
from crawler.vocab import PageSignature

ARTICLES = 48
SECTIONS = 6
NOTES = 20
SAME_ORIGIN_MIRRORS = 8
B_MIRRORS = 15
OVERLAP = 3  # articles mirrored both on a (same origin) and on b
B_COPIES = 5
B_CANONICAL = 5
B_LOCAL = 10
HOME_LATEST = 6  # articles linked from a's home as well as from their section

A_NAME = "Aldgate Review"
A_MIRROR_NAME = "Aldgate Review Mirror"
B_NAME = "Bexley Daily"

Member = tuple[str, str]  # (origin "a" | "b", path)

_CREDITS = (
    "This copy of {title} is republished by {site} with the kind permission of the author",
    "{site} carries {title} in full under its syndication agreement with the original publisher",
    "Originally published as {title}; reproduced here by {site} for readers of this edition",
    "Readers of {site} can find {title} in our partner archive as part of the weekly digest",
)


def page_signature(html: str, url: str = "http://localhost/") -> PageSignature:
    """The content hash and SimHash the dedup pipeline computes for ``html`` (the real
    :class:`~crawler.pipelines.pages.Fingerprinter`, no template learned: every block of these
    pages outside boilerplate regions is its own, so learning changes nothing)."""
    candidate = Fingerprinter().candidate({"url": url, "canonical_url": url, "html": html})
    assert candidate is not None
    return candidate.signature


def _chrome(site: str, title: str, body: str, *, head: str = "", advert: str = "",
            updated: str = "", nav: str = "") -> str:
    """A page in its site's chrome: header, nav and footer (boilerplate regions), the main
    content, an optional advert slot and "Last updated" line."""
    ad = f'<div class="ad">{escape(advert)}</div>' if advert else ""
    stamp = f'<p class="updated">Last updated {updated}</p>' if updated else ""
    return (
        f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{escape(title)} | "
        f"{escape(site)}</title>{head}</head><body>"
        f"<header><h1>{escape(site)}</h1><p>News and notes since 1998</p></header>"
        f'<nav><a href="/">Home</a>{nav}</nav>'
        f"<main><h2>{escape(title)}</h2>{body}{ad}{stamp}</main>"
        f"<footer><p>Copyright {escape(site)}. All rights reserved.</p></footer>"
        "</body></html>"
    )


def _paragraphs(items: list[str]) -> str:
    return "".join(f"<p>{escape(p)}</p>" for p in items)


def _links(items: list[tuple[str, str]]) -> str:
    return "<ul>" + "".join(f'<li><a href="{h}">{escape(t)}</a></li>' for h, t in items) + "</ul>"


@dataclass
class Article:
    slug: str
    title: str
    topic: str
    paragraphs: list[str]

    @property
    def path(self) -> str:
        return f"/articles/{self.slug}"


@dataclass
class OrderWeb:
    """The two sites and their ground truth (module docstring)."""

    seed: int
    a: Site
    b: Site
    distinct: dict[str, set[str]] = field(default_factory=dict)
    groups: list[set[Member]] = field(default_factory=list)
    kinds: dict[Member, str] = field(default_factory=dict)
    distance: dict[Member, int] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    names: dict[Member, Member] = field(default_factory=dict)
    _raw: dict[str, dict[str, Page]] = field(default_factory=dict, repr=False)

    @property
    def sites(self) -> dict[str, Site]:
        return {"a": self.a, "b": self.b}

    def distinct_members(self) -> set[Member]:
        return {(o, p) for o, paths in self.distinct.items() for p in paths}

    def grouped(self) -> set[Member]:
        return set().union(*self.groups) if self.groups else set()

    def members(self) -> set[Member]:
        """Every page of the web."""
        return {(o, p) for o, site in self.sites.items() for p in site.pages}

    def bind(self, a_base: str, b_base: str) -> None:
        """Fill ``{a_base}``/``{b_base}`` (``http://host:port``, no slash) into every page,
        in place, so servers already running serve the bound pages. May be called again."""
        for origin, site in self.sites.items():
            pages = site.pages
            assert isinstance(pages, dict)
            for path, raw in self._raw[origin].items():
                if b"{a_base}" in raw.body or b"{b_base}" in raw.body:
                    body = raw.body.replace(b"{a_base}", a_base.encode())
                    body = body.replace(b"{b_base}", b_base.encode())
                    pages[path] = Page(body, raw.content_type, raw.status, dict(raw.headers))

    @contextmanager
    def serve(self, host: str = "127.0.0.1", hostname: str = "localhost"
              ) -> Iterator[dict[str, object]]:
        """Both sites served (two ports of ``host``), bound to each other's base URL:
        ``{"a": SiteServer, "b": SiteServer}``."""
        from crawler.siteserver import SiteServer

        with ExitStack() as stack:
            a = stack.enter_context(SiteServer(self.a, host=host, hostname=hostname))
            b = stack.enter_context(SiteServer(self.b, host=host, hostname=hostname))
            self.bind(a.base_url, b.base_url)
            yield {"a": a, "b": b}

    def member_of(self, url: str, bases: dict[str, str]) -> Member:
        """The member a (canonical) URL is, given ``{"a": base_url, "b": base_url}``."""
        netlocs = {urlsplit(base).netloc.lower(): o for o, base in bases.items()}
        parts = urlsplit(url)
        query = f"?{parts.query}" if parts.query else ""
        return netlocs[parts.netloc.lower()], parts.path + query

    def expected(self, bases: dict[str, str], seeds: list[str] | None = None) -> set[Member]:
        """The stored set the preference order gives: every distinct page, and of each group
        the member first by :func:`crawler.preference.preference_key` (``seeds`` default: both
        home pages)."""
        from crawler.urlnorm import normalize_url

        hosts = seed_hosts(seeds or [bases["a"] + "/", bases["b"] + "/"])
        named = set(self.names.values())
        out = set(self.distinct_members())
        for group in self.groups:
            out.add(min(group, key=lambda m: preference_key(
                normalize_url(bases[m[0]] + m[1]), m in named, hosts)))
        return out


def order_web(seed: int = 0) -> OrderWeb:
    """The two-site web of the module docstring."""
    rng = random.Random(seed)
    text = TextMaker(rng)
    topics = text.words.topics
    a_pages: dict[str, Page] = {}
    b_pages: dict[str, Page] = {}
    web = OrderWeb(seed, Site(name="order-a", pages=a_pages), Site(name="order-b", pages=b_pages),
                   distinct={"a": set(), "b": set()})

    articles: list[Article] = []
    for n in range(ARTICLES):
        topic = topics[n % len(topics)]
        text.set_focus(topic)
        title = text.title(topic)
        slug = f"{slugify(title, 48)}-{n + 1}"
        articles.append(Article(slug, title, topic, text.paragraphs(topic, 6, 4, 6)))
    section_nav = '<a href="/section/1/">Sections</a>'
    for art in articles:
        a_pages[art.path] = page(_chrome(A_NAME, art.title, _paragraphs(art.paragraphs),
                                         nav=section_nav))
    originals = {art.path: page_signature(a_pages[art.path].body.decode()) for art in articles}
    groups: dict[str, set[Member]] = {art.path: {("a", art.path)} for art in articles}

    def stamp() -> str:
        return (f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}")

    def mirror(art: Article, site: str, want: int, nav: str) -> tuple[str, int]:
        """``art`` in ``site``'s chrome with an advert, a timestamp and a credit line that puts
        it ``want`` bits (else 1-3) from the original; (html, bits)."""
        tune = random.Random(f"{seed}:{site}:{art.slug}")  # tries never shift the rest
        tuner = TextMaker(tune, text.words)
        advert = f"Advertisement: {text.sentence(rng.choice(topics))}"
        updated = stamp()
        target = originals[art.path].simhash
        fallback: tuple[str, int] | None = None
        for _ in range(400):
            credit = tune.choice(_CREDITS).format(title=art.title, site=site)
            if tune.random() < 0.7:
                credit += ". " + tuner.sentence(tune.choice(topics))
            body = _paragraphs(art.paragraphs) + f'<p class="credit">{escape(credit)}</p>'
            html = _chrome(site, art.title, body, advert=advert, updated=updated, nav=nav)
            bits = hamming(page_signature(html).simhash, target)
            if bits == want:
                return html, bits
            if 1 <= bits <= 3 and fallback is None:
                fallback = html, bits
        if fallback is None:
            raise RuntimeError(f"no credit line puts a mirror of {art.slug} 1-3 bits away")
        return fallback

    same_origin = articles[:SAME_ORIGIN_MIRRORS]
    first_b = SAME_ORIGIN_MIRRORS - OVERLAP
    b_mirrored = articles[first_b:first_b + B_MIRRORS]
    rest = articles[first_b + B_MIRRORS:]
    copied, canonical = rest[:B_COPIES], rest[B_COPIES:B_COPIES + B_CANONICAL]

    # a: same-origin mirrors
    for i, art in enumerate(same_origin):
        path = f"/mirror{art.path}"
        html, bits = mirror(art, A_MIRROR_NAME, 1 + i % 3, '<a href="/mirror/">Mirror</a>')
        a_pages[path] = page(html)
        groups[art.path].add(("a", path))
        web.kinds[("a", path)] = "same-origin mirror"
        web.distance[("a", path)] = bits
    a_pages["/mirror/"] = page(_chrome(A_MIRROR_NAME, "Mirrored articles", _links(
        [(f"/mirror{art.path}", art.title) for art in same_origin])))

    # a: the duplicate listing and its notes
    for listing in ("/notes-a/", "/notes-b/"):
        a_pages[listing] = page(_chrome(A_NAME, "Reader notes", _links(
            [(f"{listing}{n}", f"Note {n}") for n in range(1, NOTES + 1)])))
        web.notes[listing] = [f"{listing}{n}" for n in range(1, NOTES + 1)]
        for n in range(1, NOTES + 1):
            topic = rng.choice(topics)
            text.set_focus(topic)
            a_pages[f"{listing}{n}"] = page(_chrome(
                A_NAME, f"{text.title(topic)} (reader note)", _paragraphs(
                    text.paragraphs(topic, 6, 4, 6))))
    web.groups.append({("a", "/notes-a/"), ("a", "/notes-b/")})
    web.kinds[("a", "/notes-a/")] = web.kinds[("a", "/notes-b/")] = "listing"
    web.distance[("a", "/notes-b/")] = 0

    # a: sections and home
    for i in range(1, SECTIONS + 1):
        arts = articles[i - 1::SECTIONS]
        a_pages[f"/section/{i}/"] = page(_chrome(
            A_NAME, f"Section {i}: {topics[(i - 1) % len(topics)]}",
            _links([(art.path, art.title) for art in arts]), nav=section_nav))
    a_pages["/"] = page(_chrome(A_NAME, "Front page", _links(
        [(f"/section/{i}/", f"Section {i}") for i in range(1, SECTIONS + 1)]
        + [(art.path, art.title) for art in articles[-HOME_LATEST:]]
        + [("/notes-a/", "Reader notes"), ("/notes-b/", "More reader notes"),
           ("/mirror/", "Mirror"), ("{b_base}/", "Our syndication partner, Bexley Daily")])))

    # b: mirrors, byte copies, canonical copies, pages of its own
    b_links: list[tuple[str, str]] = []
    for i, art in enumerate(b_mirrored):
        path = f"/syndicated/{art.slug}"
        html, bits = mirror(art, B_NAME, 1 + i % 3, "")
        b_pages[path] = page(html)
        groups[art.path].add(("b", path))
        web.kinds[("b", path)] = "mirror"
        web.distance[("b", path)] = bits
        b_links.append((path, art.title))
    for art in copied:
        path = f"/c/{art.slug}"
        b_pages[path] = a_pages[art.path]
        groups[art.path].add(("b", path))
        web.kinds[("b", path)] = "byte copy"
        web.distance[("b", path)] = 0
        b_links.append((path, art.title))
    for art in canonical:
        path = f"/w/{art.slug}"
        head = f'<link rel="canonical" href="{{a_base}}{art.path}">'
        html = _chrome(B_NAME, art.title, _paragraphs(art.paragraphs), head=head,
                       advert=f"Advertisement: {text.sentence(rng.choice(topics))}")
        b_pages[path] = page(html)
        groups[art.path].add(("b", path))
        web.kinds[("b", path)] = "canonical copy"
        web.distance[("b", path)] = hamming(page_signature(html).simhash,
                                            originals[art.path].simhash)
        web.names[("b", path)] = ("a", art.path)
        b_links.append((path, art.title))
    for n in range(1, B_LOCAL + 1):
        topic = rng.choice(topics)
        text.set_focus(topic)
        title = f"{text.title(topic)}: local report"
        b_pages[f"/local/{n}"] = page(_chrome(B_NAME, title, _paragraphs(
            text.paragraphs(topic, 6, 4, 6))))
        b_links.append((f"/local/{n}", title))
    b_pages["/"] = page(_chrome(B_NAME, "Bexley front page", _links(b_links)))

    for key, group in groups.items():
        if len(group) > 1:
            web.groups.append(group)
            web.kinds[("a", key)] = "original"
    grouped = web.grouped()
    for origin, pages in (("a", a_pages), ("b", b_pages)):
        web.distinct[origin] = {p for p in pages if (origin, p) not in grouped}
        web._raw[origin] = dict(pages)
    web.a.canonical_pages, web.b.canonical_pages = set(a_pages), set(b_pages)
    web.a.distinct_pages = web.distinct["a"] | {art.path for art in articles}
    web.b.distinct_pages = set(web.distinct["b"])
    web.a.near_duplicates = {f"/mirror{art.path}": art.path for art in same_origin}
    return web

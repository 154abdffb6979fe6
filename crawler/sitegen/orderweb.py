"""A two-site web for order-free dedup tests: every kind of duplicate group, and distinct pages
reachable only through a duplicate.

Site ``a`` (the original), ``b`` and ``c`` (mirrors and a syndicator), all three seeds:

- ``a/``, four sections ``a/s/N/`` and ``ARTICLES`` distinct articles ``a/a/<slug>``
  (300-400 words each), every section linking its articles;
- same-origin mirrors ``a/mirror/<slug>`` of some articles (one of them mirrored on ``b`` too: a
  group of three): another site name in the header, an
  advert in an ad slot, a "Last updated" timestamp line, and one to three words of the body
  changed (a near duplicate at 1-3 SimHash bits), listed on ``a/mirror/``;
- canonical copies ``a/partner/<slug>`` naming ``a/a/<slug>`` canonical, listed on
  ``a/partner/``;
- **a duplicate listing**: ``a/notes-a/`` and ``a/notes-b/`` have the same visible text (title,
  "Note 1" .. "Note N") but link different, distinct note pages ``a/notes-a/N`` and
  ``a/notes-b/N``, which nothing else links: whichever listing is dropped, its notes must still
  be fetched;
- on ``b``: mirrors ``b/m/<slug>`` (site ``b``'s chrome, an advert, a timestamp, a word or two
  changed) and byte copies ``b/c/<slug>`` (the article's exact body), listed on ``b/``;
- on ``c`` (a third site, so three workers each have a host): mirrors ``c/m/<slug>`` of other
  articles, listed on ``c/``;
- ``b`` and ``c`` have distinct pages of their own too (``/local/N``), listed on their home.

Ground truth (:class:`OrderWeb`): ``distinct`` pages, as ``(site, path)``, that every crawl must
store one page of (each alone, or its group), and ``groups``, the duplicate groups (a store keeps
exactly one member of each). Deterministic for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from crawler.content.simhash import features, fingerprint, hamming
from crawler.content.text import block_tokens, extract, main_tokens
from crawler.sitegen.site import Page, Site, escape, page, slugify
from crawler.sitegen.text import TextMaker

ARTICLES = 24
NOTES = 12
SAME_ORIGIN_MIRRORS = 6
PARTNER_COPIES = 4
B_MIRRORS = 8
B_COPIES = 3
C_MIRRORS = 3
OWN_PAGES = 30  # distinct pages of b and of c (each host has work of its own)
SECTIONS = 4

Member = tuple[str, str]  # (site "a" | "b", path)


@dataclass
class OrderWeb:
    """The two sites and what a crawl of them must store (module docstring)."""

    a: Site
    b: Site
    c: Site
    groups: list[set[Member]] = field(default_factory=list)
    singles: set[Member] = field(default_factory=set)

    @property
    def sites(self) -> dict[str, Site]:
        return {"a": self.a, "b": self.b, "c": self.c}

    def grouped(self) -> set[Member]:
        return set().union(*self.groups) if self.groups else set()


def _chrome(site: str, title: str, body: str, extra_head: str = "", advert: str = "",
            updated: str = "") -> str:
    """A page in its site's chrome: header and nav (boilerplate regions), the body, an optional
    advert slot and "Last updated" line, a footer."""
    ad = f'<div class="ad">{escape(advert)}</div>' if advert else ""
    stamp = f"<p>Last updated {updated}</p>" if updated else ""
    return (
        f"<!doctype html><html><head><title>{escape(title)} | {site}</title>{extra_head}</head>"
        f"<body><header><h1>{site}</h1></header>"
        f'<nav><a href="/">Home</a> <a href="/s/1/">Sections</a></nav>'
        f"<main><h2>{escape(title)}</h2>{body}{ad}{stamp}</main>"
        f"<footer>Copyright {site}. All rights reserved.</footer></body></html>"
    )


def _edit(paragraphs: list[str], rng: random.Random, words: int) -> list[str]:
    """``paragraphs`` with ``words`` words replaced (a near duplicate's small edits)."""
    out = list(paragraphs)
    for _ in range(words):
        i = rng.randrange(len(out))
        tokens = out[i].split()
        j = rng.randrange(len(tokens))
        tokens[j] = rng.choice(("lantern", "meadow", "copper", "harbour", "velvet", "cinder"))
        out[i] = " ".join(tokens)
    return out


def _fingerprint(title: str, paragraphs: list[str]) -> int | None:
    """The SimHash the dedup pipeline computes for an article page (its main blocks; the
    chrome is in boilerplate regions, ad slots and numeric lines, all left out)."""
    text = extract(_chrome("x", title, _body(paragraphs)), tokenize=False)
    tokens = main_tokens(block_tokens(text.blocks), 20)
    return fingerprint(features(tokens)) if tokens else None


def _body(paragraphs: list[str]) -> str:
    return "".join(f"<p>{escape(p)}</p>" for p in paragraphs)


def _links(items: list[tuple[str, str]]) -> str:
    return "<ul>" + "".join(f'<li><a href="{h}">{escape(t)}</a></li>' for h, t in items) + "</ul>"


def order_web(seed: int = 0) -> OrderWeb:
    """The two-site web of the module docstring."""
    rng = random.Random(seed)
    text = TextMaker(rng)
    topics = text.words.topics
    a_pages: dict[str, Page] = {}
    b_pages: dict[str, Page] = {}
    c_pages: dict[str, Page] = {}
    web = OrderWeb(Site(name="order-a", pages=a_pages), Site(name="order-b", pages=b_pages),
                   Site(name="order-c", pages=c_pages))
    articles: list[tuple[str, str, list[str]]] = []  # slug, title, paragraphs
    for n in range(ARTICLES):
        topic = topics[n % len(topics)]
        text.set_focus(topic)
        title = f"{text.title(topic)} {n}"
        paragraphs = text.paragraphs(topic, 5, 4, 6)
        articles.append((slugify(title), title, paragraphs))
    for slug, title, paragraphs in articles:
        a_pages[f"/a/{slug}"] = page(_chrome("Aldgate Review", title, _body(paragraphs)))
        web.singles.add(("a", f"/a/{slug}"))
    sections = [articles[i::SECTIONS] for i in range(SECTIONS)]
    for i, arts in enumerate(sections, 1):
        a_pages[f"/s/{i}/"] = page(_chrome("Aldgate Review", f"Section {i}: {topics[i]}",
                                           _links([(f"/a/{s}", t) for s, t, _ in arts])))
        web.singles.add(("a", f"/s/{i}/"))
    groups = {f"/a/{slug}": {("a", f"/a/{slug}")} for slug, _, _ in articles}

    def near(paragraphs: list[str], title: str) -> list[str]:
        """The body with one to three words changed, 1-3 bits from the original's (tried
        until so: a word of a long page may move no bit, a rare one several)."""
        want, original = rng.randint(1, 3), _fingerprint(title, paragraphs)
        for _ in range(200):
            edited = _edit(paragraphs, rng, rng.randint(1, 3))
            moved = _fingerprint(title, edited)
            if original is not None and moved is not None and hamming(moved, original) == want:
                return edited
        raise RuntimeError(f"no edit of {title!r} lands {want} bits away")  # never with seeds 0-9

    def stamp() -> str:
        return f"2026-11-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"

    # the last article is mirrored on b too: a group of three, whose middle page may be kept
    # first and demoted later (its drops then repointed)
    mirrored = [*articles[:SAME_ORIGIN_MIRRORS], articles[-1]]
    for slug, title, paragraphs in mirrored:
        a_pages[f"/mirror/{slug}"] = page(_chrome(
            "Aldgate Review Mirror", title, _body(near(paragraphs, title)),
            advert=f"Advertisement: {text.sentence(rng.choice(topics))}", updated=stamp()))
        groups[f"/a/{slug}"].add(("a", f"/mirror/{slug}"))
    a_pages["/mirror/"] = page(_chrome("Aldgate Review Mirror", "Mirror index",
                                       _links([(f"/mirror/{s}", t) for s, t, _ in mirrored])))
    partners = articles[SAME_ORIGIN_MIRRORS:SAME_ORIGIN_MIRRORS + PARTNER_COPIES]
    for slug, title, paragraphs in partners:
        head = f'<link rel="canonical" href="/a/{slug}">'
        a_pages[f"/partner/{slug}"] = page(_chrome(
            "Partner Wire", title, _body(paragraphs), extra_head=head,
            advert=f"Advertisement: {text.sentence(rng.choice(topics))}"))
        groups[f"/a/{slug}"].add(("a", f"/partner/{slug}"))
    a_pages["/partner/"] = page(_chrome("Partner Wire", "Partner index",
                                        _links([(f"/partner/{s}", t) for s, t, _ in partners])))
    web.singles |= {("a", "/mirror/"), ("a", "/partner/")}
    # the duplicate listing: same visible text, other links, distinct notes behind each
    listing = [(f"Note {n}", n) for n in range(1, NOTES + 1)]
    for name in ("notes-a", "notes-b"):
        a_pages[f"/{name}/"] = page(_chrome("Aldgate Review", "Reader notes", _links(
            [(f"/{name}/{n}", label) for label, n in listing])))
        for n in range(1, NOTES + 1):
            topic = rng.choice(topics)
            text.set_focus(topic)
            a_pages[f"/{name}/{n}"] = page(_chrome(
                "Aldgate Review", f"{name} {n}: {text.title(topic)}",
                _body(text.paragraphs(topic, 4, 4, 6))))
            web.singles.add(("a", f"/{name}/{n}"))
    web.groups.append({("a", "/notes-a/"), ("a", "/notes-b/")})
    a_pages["/"] = page(_chrome("Aldgate Review", "Front page", _links(
        [(f"/s/{i}/", f"Section {i}") for i in range(1, SECTIONS + 1)]
        + [("/notes-a/", "Reader notes"), ("/notes-b/", "More reader notes"),
           ("/mirror/", "Mirror"), ("/partner/", "Partners")])))
    web.singles.add(("a", "/"))
    # site b: mirrors and byte copies of a's articles
    b_links = []
    for slug, title, paragraphs in articles[-B_MIRRORS:]:
        b_pages[f"/m/{slug}"] = page(_chrome(
            "Bexley Daily", title, _body(near(paragraphs, title)),
            advert=f"Sponsored: {text.sentence(rng.choice(topics))}", updated=stamp()))
        groups[f"/a/{slug}"].add(("b", f"/m/{slug}"))
        b_links.append((f"/m/{slug}", title))
    for slug, title, _ in articles[-B_MIRRORS - B_COPIES:-B_MIRRORS]:
        b_pages[f"/c/{slug}"] = a_pages[f"/a/{slug}"]
        groups[f"/a/{slug}"].add(("b", f"/c/{slug}"))
        b_links.append((f"/c/{slug}", title))
    web.singles.add(("b", "/"))
    c_links = []
    first = -B_MIRRORS - B_COPIES - C_MIRRORS
    for slug, title, paragraphs in articles[first:-B_MIRRORS - B_COPIES]:
        c_pages[f"/m/{slug}"] = page(_chrome(
            "Cheam Courier", title, _body(near(paragraphs, title)),
            advert=f"Sponsored: {text.sentence(rng.choice(topics))}", updated=stamp()))
        groups[f"/a/{slug}"].add(("c", f"/m/{slug}"))
        c_links.append((f"/m/{slug}", title))
    web.singles.add(("c", "/"))
    for name, pages, links in (("b", b_pages, b_links), ("c", c_pages, c_links)):
        for n in range(1, OWN_PAGES + 1):
            topic = rng.choice(topics)
            text.set_focus(topic)
            title = f"Local {n}: {text.title(topic)}"
            pages[f"/local/{n}"] = page(_chrome(name, title,
                                                _body(text.paragraphs(topic, 4, 4, 6))))
            links.append((f"/local/{n}", title))
            web.singles.add((name, f"/local/{n}"))
    b_pages["/"] = page(_chrome("Bexley Daily", "Bexley front page", _links(b_links)))
    c_pages["/"] = page(_chrome("Cheam Courier", "Cheam front page", _links(c_links)))
    web.groups += [g for g in groups.values() if len(g) > 1]
    web.singles -= web.grouped()
    for site in (web.a, web.b, web.c):
        site.canonical_pages = set(site.pages)
    return web

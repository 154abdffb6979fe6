"""The demo site: a small local newspaper with every kind of duplicate the web has.

About 190 HTML pages: a home page, twelve sections (two listing pages each, ``?page=2``), 120
articles, a sitemap linking everything (relative links), about/contact/editor/downloads pages, a
search page with two distinct queries. The duplicates: ~25 alias spellings of article links
(tracking parameters, fragments, upper-case host and scheme, a port with a leading zero, dot
segments, percent-escapes with lower-case hex, a reordered and an empty query); 15 mirrors that
differ from their original only in the advert (partner copies naming the original canonical)
and 10 that differ only in the date line; 10
byte-identical print copies plus ``/index.html`` (a copy of ``/``). The rest of the web: a PDF, a
JSON file, a binary body labelled text/html, two broken links, two 301 redirects, a robots.txt
``Disallow``, ``mailto:``/``tel:``/``javascript:`` links, off-site links to ``example.invalid``,
and a calendar trap (``/calendar/next/next/...``, one more ``next/`` per page) that only the
crawler's ``TRAP_MAX_SEGMENT_REPEAT`` guard stops; the server answers it 50 levels deep.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from crawler import defaults
from crawler.sitegen.site import Page, Site, escape, page, slugify
from crawler.sitegen.text import TextMaker, format_date

SITE_NAME = "The Riverside Chronicle"
TRAP_DEPTH = 50
ADVERTS = (  # short, as a text ad: a mirror with another one is a near duplicate
    "Advertisement: Hartley garden furniture sale.",
    "Advertisement: Morrow Coffee, roasted locally.",
    "Advertisement: Brightside home insurance quotes.",
    "Advertisement: Grand Pavilion winter concerts.",
    "Advertisement: Swift Broadband, faster speeds.",
    "Advertisement: Oakwood Builders kitchens.",
    "Advertisement: Polyglot Evenings language classes.",
    "Advertisement: Bloom and Thistle flowers.",
)
# Link spellings: (template, what it exercises). {path} is the canonical path of an article.
ALIAS_KINDS = (
    "{path}?utm_source=newsletter&utm_medium=email&utm_campaign=spring",
    "{path}?gclid=EAIaIQobChMI8x",
    "{path}?fbclid=IwAR2xFq9Lm",
    "{path}?utm_source=twitter#top",
    "{path}#comments",
    "{path}#",
    "{path}?",
    "http://LOCALHOST:{port}{path}",
    "http://LocalHost:{port}{path}",
    "HTTP://localhost:{port}{path}",
    "http://localhost:0{port}{path}",
    "{base}{path}",
    "/articles/../articles/{slug}",
    "/section/{section}/../../articles/{slug}",
    "/articles/./{slug}",
    "{escaped}",
)
ALIAS_TARGETS_PER_KIND = 2


@dataclass
class Article:
    path: str
    slug: str
    title: str
    topic: str
    author: str
    date: tuple[int, int, int]
    paragraphs: list[str]
    advert: str
    related: list[tuple[str, str]] = field(default_factory=list)  # (href, title)

    @property
    def teaser(self) -> str:
        return self.paragraphs[0].split(". ")[0].rstrip(".") + "."


class DemoBuilder:
    """Builds the demo site; one instance per call of :func:`demo_site`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.text = TextMaker(self.rng)
        self.topics = list(self.text.words.topics)
        self.pages: dict[str, Page] = {}
        self.site = Site(name="demo", pages=self.pages)
        self.articles: list[Article] = []

    # -- page chrome ---------------------------------------------------------------------------
    def chrome(self, title: str, main: str, head: str = "") -> str:
        nav = " ".join(f'<a href="/section/{t}/">{t.title()}</a>' for t in self.topics)
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f"<title>{escape(title)} | {SITE_NAME}</title>{head}</head>\n<body>\n"
            f'<header><p class="masthead"><a href="/">{SITE_NAME}</a></p>\n'
            f'<nav><a href="/">Home</a> {nav} <a href="/sitemap.html">Sitemap</a></nav></header>\n'
            f"<main>\n{main}\n</main>\n"
            '<footer><p><a href="/about/">About us</a> <a href="/contact/">Contact</a> '
            '<a href="mailto:editor@example.invalid">Email the editor</a> '
            '<a href="tel:+441632960123">Call the newsroom</a> '
            '<a href="javascript:window.print()">Print this page</a> '
            '<a href="/private/login">Staff login</a></p>\n'
            f"<p>Copyright 2025 {SITE_NAME}. Every story here is fictional.</p></footer>\n"
            "</body>\n</html>\n"
        )

    def add(self, path: str, title: str, main: str, canonical: bool = True) -> Page:
        built = page(self.chrome(title, main))
        self.pages[path] = built
        if canonical:
            self.site.canonical_pages.add(path)
        return built

    # -- articles ------------------------------------------------------------------------------
    def make_articles(self, per_topic: int) -> None:
        titles: set[str] = set()
        for topic in self.topics:
            for _ in range(per_topic):
                self.text.set_focus(topic)
                title = self.text.title(topic)
                for _ in range(20):
                    if title not in titles:
                        break
                    title = self.text.title(topic)
                titles.add(title)
                slug = slugify(title)
                while any(a.slug == slug for a in self.articles):
                    slug += "-2"
                self.articles.append(Article(
                    path=f"/articles/{slug}", slug=slug, title=title, topic=topic,
                    author=self.rng.choice(self.text.words["names"]),
                    date=self.text.date(),
                    paragraphs=self.text.paragraphs(topic, self.rng.randint(8, 10), 4, 6),
                    advert=self.rng.choice(ADVERTS),
                ))  # fmt: skip
        self.text.set_focus(None)

    def link_related(self) -> None:
        for art in self.articles:
            others = [a for a in self.articles if a.topic == art.topic and a is not art]
            for other in self.rng.sample(others, 3):
                art.related.append((other.path, other.title))

    def article_html(self, art: Article, advert: str, date: tuple[int, int, int],
                     canonical: str | None = None) -> str:
        paras = [f"<p>{escape(p)}</p>" for p in art.paragraphs]
        paras.insert(2, f'<aside class="advert">{escape(advert)}</aside>')
        related = "".join(f'<li><a href="{h}">{escape(t)}</a></li>' for h, t in art.related)
        main = (
            f"<article>\n<h1>{escape(art.title)}</h1>\n"
            f'<p class="dateline">Published {format_date(date)} by {escape(art.author)}</p>\n'
            + "\n".join(paras)
            + f'\n<aside class="related"><h2>Related stories</h2><ul>{related}</ul></aside>\n'
            "</article>"
        )
        head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
        return self.chrome(art.title, main, head)

    def article_text(self, art: Article, advert: str, date: tuple[int, int, int]) -> str:
        paras = list(art.paragraphs)
        paras.insert(2, advert)
        dateline = f"Published {format_date(date)} by {art.author}"
        return "\n".join([art.title, dateline, *paras])

    def emit_articles(self) -> None:
        for art in self.articles:
            self.pages[art.path] = page(self.article_html(art, art.advert, art.date))
            self.site.canonical_pages.add(art.path)
            self.site.main_text[art.path] = self.article_text(art, art.advert, art.date)

    # -- duplicates ----------------------------------------------------------------------------
    def make_aliases(self) -> None:
        chosen = self.rng.sample(self.articles, len(ALIAS_KINDS) * ALIAS_TARGETS_PER_KIND)
        for i, kind in enumerate(ALIAS_KINDS):
            for j in range(ALIAS_TARGETS_PER_KIND):
                target = chosen[i * ALIAS_TARGETS_PER_KIND + j]
                href = self.alias_href(kind, target, upper=bool(j))
                host = self.rng.choice([a for a in self.articles if a is not target])
                host.related.append((href, target.title))
                self.site.aliases[href] = target.path

    @staticmethod
    def alias_href(kind: str, art: Article, upper: bool) -> str:
        if kind == "{escaped}":
            # An escaped unreserved character, lower-case hex ("%2d") or upper-case ("%2D"),
            # and an escaped first letter: a normalizer must decode both.
            dash = "%2D" if upper else "%2d"
            rest = art.slug[1:].replace("-", dash, 1)
            return f"/articles/%{ord(art.slug[0]):02x}{rest}"
        return (
            kind.replace("{path}", art.path)
            .replace("{slug}", art.slug)
            .replace("{section}", art.topic)
        )

    def emit_mirrors(self) -> None:
        picks = self.rng.sample(self.articles, 35)
        for art in picks[:15]:
            other = self.rng.choice([a for a in ADVERTS if a != art.advert])
            # syndicated: the partner's copy names the original canonical
            self.mirror(f"/partners/{art.slug}", art, other, art.date, canonical=art.path)
        for art in picks[15:25]:
            year, month, day = art.date
            self.mirror(f"/archive/{year}/{art.slug}", art, art.advert, (year, month, day % 28 + 1))
        for art in picks[25:]:
            copy = f"/print/{art.slug}"
            self.pages[copy] = Page(self.pages[art.path].body)
            self.site.canonical_pages.add(copy)
            self.site.exact_duplicates[copy] = art.path
            self.site.main_text[copy] = self.site.main_text[art.path]

    def mirror(self, path: str, art: Article, advert: str, date: tuple[int, int, int],
               canonical: str | None = None) -> None:
        self.pages[path] = page(self.article_html(art, advert, date, canonical))
        self.site.canonical_pages.add(path)
        self.site.near_duplicates[path] = art.path
        self.site.main_text[path] = self.article_text(art, advert, date)

    # -- listing and service pages -------------------------------------------------------------
    def listing(self, arts: list[Article], href_prefix: str = "/articles/") -> str:
        items = "".join(
            f'<li><a href="{href_prefix}{a.slug}">{escape(a.title)}</a> '
            f"<span>{escape(a.teaser)}</span></li>\n"
            for a in arts
        )
        return f'<ul class="stories">\n{items}</ul>'

    def emit_sections(self) -> None:
        for topic in self.topics:
            arts = [a for a in self.articles if a.topic == topic]
            half = len(arts) // 2
            intro = escape(self.text.paragraph(topic, 2))
            extra = ""
            if topic == self.topics[0]:
                extra = (
                    '<p>Search: <a href="/search?q=garden&amp;sort=date">newest first</a> '
                    '<a href="/search?sort=date&amp;q=garden">newest (again)</a> '
                    '<a href="/search?q=bike&amp;sort=date">bikes</a></p>'
                )
                self.site.aliases["/search?sort=date&q=garden"] = "/search?q=garden&sort=date"
            if topic == self.topics[1]:
                extra = f'<p><a href="/section/{topic}/?page=2#results">Jump to older</a></p>'
                self.site.aliases[f"/section/{topic}/?page=2#results"] = f"/section/{topic}/?page=2"
            first = (
                f"<h1>{topic.title()}</h1><p>{intro}</p>{extra}\n{self.listing(arts[:half])}"
                '\n<p><a href="?page=2">Older stories</a></p>'
            )
            self.add(f"/section/{topic}/", topic.title(), first)
            second = (
                f"<h1>{topic.title()}: older stories</h1>\n{self.listing(arts[half:])}"
                '\n<p><a href="./">Newer stories</a></p>'
            )
            self.add(f"/section/{topic}/?page=2", f"{topic.title()}, page 2", second)
        for topic, query in ((self.topics[0], "garden"), (self.topics[1], "bike")):
            found = sorted((a for a in self.articles if a.topic == topic), key=lambda a: a.date)
            main = f"<h1>Search results for {query}</h1>\n{self.listing(found[::-1][:6])}"
            self.add(f"/search?q={query}&sort=date", f"Search: {query}", main)

    def emit_home(self) -> None:
        latest = sorted(self.articles, key=lambda a: a.date, reverse=True)[:12]
        main = (
            f"<h1>{SITE_NAME}</h1>\n<p>{escape(self.text.paragraph(self.topics[0], 3))}</p>\n"
            f"<h2>Latest stories</h2>\n{self.listing(latest)}\n"
            '<p><a href="/calendar/">Events calendar</a> <a href="/downloads/">Downloads</a> '
            '<a href="/~editor/">From the editor</a> '
            '<a href="/search?q=garden&amp;sort=date">Garden stories</a> '
            '<a href="http://example.invalid/">Our sister paper</a></p>'
        )
        body = self.add("/", SITE_NAME, main).body
        self.pages["/index.html"] = Page(body)
        self.site.canonical_pages.add("/index.html")
        self.site.exact_duplicates["/index.html"] = "/"
        self.site.offsite.add("http://example.invalid/")

    def emit_service_pages(self) -> None:
        t, topic = self.text, self.topics[2]
        olds = self.articles[:2]
        redirects = " ".join(f'<a href="/old/{a.slug}">{escape(a.title)}</a>' for a in olds)
        self.add("/about/", "About us", (
            f"<h1>About us</h1><p>{escape(t.paragraph(topic, 4))}</p>\n"
            f"<p>Stories from our old site: {redirects}</p>\n"
            '<p><a href="/%7Eeditor/">Meet the editor</a> '
            '<a href="https://www.example.invalid/press">Press office</a></p>'
        ))  # fmt: skip
        self.add("/contact/", "Contact", (
            f"<h1>Contact</h1><p>{escape(t.paragraph(topic, 2))}</p>\n"
            '<p><a href="mailto:letters@example.invalid?subject=Letter">Write a letter</a> '
            '<a href="tel:+441632960456">Advertising</a> <a href="/%7eeditor/">The editor</a></p>'
        ))  # fmt: skip
        self.add("/~editor/", "From the editor", (
            f"<h1>From the editor</h1><p>{escape(t.paragraph(self.topics[3], 5))}</p>"
        ))  # fmt: skip
        self.site.aliases.update({"/%7Eeditor/": "/~editor/", "/%7eeditor/": "/~editor/"})
        self.site.offsite.add("https://www.example.invalid/press")
        for art in olds:
            moved = page("<html><body>Moved</body></html>", status=301, Location=art.path)
            self.pages[f"/old/{art.slug}"] = moved
            self.site.redirects[f"/old/{art.slug}"] = art.path
        self.pages["/private/login"] = page(self.chrome("Staff login", "<h1>Staff login</h1>"))
        self.site.disallowed.add("/private/login")
        self.pages["/robots.txt"] = page("User-agent: *\nDisallow: /private/\n", "text/plain")

    def emit_files(self) -> None:
        rng = self.rng
        pdf = b"%PDF-1.4\n" + bytes(rng.randrange(256) for _ in range(2048)) + b"\n%%EOF\n"
        listing = [{"title": a.title, "url": a.path} for a in self.articles[:20]]
        blob = b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(rng.randrange(128, 256) for _ in range(1024))
        self.pages["/files/annual-report-2024.pdf"] = Page(pdf, "application/pdf")
        self.pages["/api/articles.json"] = page(json.dumps(listing, indent=1), "application/json")
        self.pages["/files/export"] = Page(blob, "text/html")
        self.site.non_html.update(
            {"/files/annual-report-2024.pdf", "/api/articles.json", "/files/export"}
        )
        self.site.mislabelled.add("/files/export")
        self.site.broken.update({"/files/missing.pdf", "/articles/this-story-was-withdrawn"})
        self.add("/downloads/", "Downloads", (
            "<h1>Downloads</h1><ul>"
            '<li><a href="/files/annual-report-2024.pdf">Annual report (PDF)</a></li>'
            '<li><a href="/api/articles.json">Story index (JSON)</a></li>'
            '<li><a href="/files/export">Data export</a></li>'
            '<li><a href="/files/missing.pdf">Budget 2019 (PDF)</a></li></ul>'
        ))  # fmt: skip

    def emit_sitemap(self) -> None:
        # Relative links ("articles/x", "section/y/?page=2"): resolved against /sitemap.html.
        paths = [*sorted(self.site.canonical_pages - self.site.trap_pages), "/calendar/"]
        items = "".join(
            f'<li><a href="{escape(p[1:]) or "./"}">{escape(p)}</a></li>\n' for p in paths
        )
        self.add("/sitemap.html", "Sitemap", f"<h1>Sitemap</h1>\n<ul>\n{items}</ul>")

    # -- the calendar trap ---------------------------------------------------------------------
    def calendar(self, seed: int) -> None:
        root = "/calendar/"
        self.site.trap_root = root
        for depth in range(defaults.TRAP_MAX_SEGMENT_REPEAT + 1):
            self.site.trap_pages.add(root + "next/" * depth)
        self.site.canonical_pages |= self.site.trap_pages
        chrome = self.chrome

        def route(key: str) -> Page | None:
            rest = key[len(root) :] if key.startswith(root) else None
            depth = len(rest) // 5 if rest is not None else -1
            if rest is None or rest != "next/" * depth or depth > TRAP_DEPTH:
                return None
            rng = random.Random(f"{seed}:calendar:{depth}")
            text = TextMaker(rng)
            month = format_date((2025 + depth // 12, depth % 12 + 1, 1)).split(" ", 1)[1]
            events = "".join(
                f"<li>{escape(text.sentence(rng.choice(text.words.topics)))}</li>" for _ in range(6)
            )
            prev = '<a href="../">Previous month</a> ' if depth else ""
            nav = f'<p>{prev}<a href="next/">Next month</a></p>'
            main = f"<h1>Events in {month}</h1><ul>{events}</ul>{nav}"
            return page(chrome(f"Events in {month}", main))

        self.site.fallback = route

    def finish(self) -> Site:
        site = self.site
        site.distinct_pages = (
            site.canonical_pages - set(site.near_duplicates) - set(site.exact_duplicates)
        )
        return site


def demo_site(seed: int = 0) -> Site:
    """The demo newspaper (module docstring); deterministic for a given ``seed``."""
    b = DemoBuilder(seed)
    b.make_articles(per_topic=10)
    b.link_related()
    b.make_aliases()
    b.articles[5].related.append(("/articles/this-story-was-withdrawn", "A withdrawn story"))
    b.emit_articles()
    b.emit_mirrors()
    b.emit_sections()
    b.emit_home()
    b.emit_service_pages()
    b.emit_files()
    b.calendar(seed)
    b.emit_sitemap()
    return b.finish()

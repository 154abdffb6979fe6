"""A template-heavy site: short distinct posts inside one huge shared ``<div>`` template.

Each post page holds 50-120 words of its own (title, date line, body) inside a template of about
1,500 words that every page shares: a cookie banner, a top menu, a mega menu, "popular posts" and
tag-cloud sidebars, an about blurb, a newsletter box and a footer link farm — all plain ``<div>``
elements, no ``<nav>``/``<footer>``/``<aside>``, so only a main-content extractor that looks at
text density (not tag names) separates post from template. The template is >= 90% of each post
page's visible text. Mirrors: some posts reappear under ``/amp/`` with another advert in the
sidebar sponsor box (main text identical), others under ``/m/`` with another date in the post's
date line. ``main_text`` holds each post's own text.
"""

from __future__ import annotations

import random

from crawler.sitegen.site import Page, Site, escape, page, slugify
from crawler.sitegen.text import TextMaker, format_date

SITE_NAME = "Hollowbrook Journal"
COOKIE_TEXT = (
    "We use cookies and similar technologies to remember your preferences, measure how our "
    "pages are used, show you relevant offers and keep the site secure. Some cookies are "
    "essential and cannot be switched off; others help us understand which stories our "
    "readers enjoy. You can accept all cookies, reject the optional ones, or choose exactly "
    "which purposes you agree to. Your choice is stored for twelve months and you can change "
    "it at any time from the privacy settings link at the bottom of every page."
)
SPONSORS = (
    "Sponsored: Greenleaf Tools, spades and forks built to last a lifetime.",
    "Sponsored: Harbour Lights Hotel, two nights by the sea for the price of one.",
    "Sponsored: Pennywise Bank, a savings account that rewards patience.",
    "Sponsored: Fieldfare Outdoor, waterproof jackets for every season.",
)


class TemplateBuilder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.text = TextMaker(self.rng)
        self.topics = self.text.words.topics
        self.pages: dict[str, Page] = {}
        self.site = Site(name="template", pages=self.pages)

    def phrase(self, words: int) -> str:
        w = self.text.words
        picks = [self.rng.choice(w["adjectives"]) for _ in range(words - 1)]
        return " ".join([*picks, self.rng.choice(w["nouns"])]).title()

    def links(self, cls: str, items: list[tuple[str, str]]) -> str:
        inner = "\n".join(
            f'<div class="item"><a href="{h}">{escape(t)}</a></div>' for h, t in items
        )
        return f'<div class="{cls}">{inner}</div>'

    def make_template(self, popular: list[tuple[str, str]]) -> tuple[str, str]:
        """The page before and after the content and sponsor slots (``{content}``/``{sponsor}``)."""
        rng, t = self.rng, self.text
        menu = self.links("menu", [(f"/#c{i}", self.phrase(2)) for i in range(40)])
        mega = "".join(
            self.links("menu-group", [(f"/#g{g}-{i}", self.phrase(2)) for i in range(8)])
            for g in range(12)
        )
        tags = " ".join(
            f'<span class="tag">{rng.choice(t.words["nouns"])}</span>' for _ in range(60)
        )
        farm = self.links(
            "link-farm",
            [(f"https://partner{i}.example.invalid/", self.phrase(2)) for i in range(300)],
        )
        about = escape(t.words_text(self.topics[0], 220, 260))
        legal = escape(t.words_text(self.topics[1], 70, 90))
        before = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{{title}} - '
            f'{SITE_NAME}</title></head>\n<body><div id="wrapper">\n'
            f'<div class="cookie-banner"><div class="text">{COOKIE_TEXT}</div>'
            '<div class="buttons"><span>Accept all</span> <span>Reject optional</span>'
            "</div></div>\n"
            f'<div class="site-header"><div class="logo"><a href="/">{SITE_NAME}</a></div>'
            f"{menu}</div>\n"
            f'<div class="mega-menu">{mega}</div>\n<div class="layout">\n'
            f'<div class="sidebar-left"><div class="widget"><div class="widget-title">Popular posts'
            f"</div>{self.links('popular', popular)}</div>"
            f'<div class="widget"><div class="widget-title">Tags</div>{tags}</div></div>\n'
            '<div class="content">'
        )
        after = (
            '</div>\n<div class="sidebar-right"><div class="widget about">'
            f'<div class="widget-title">About this journal</div><p>{about}</p></div>'
            '<div class="sponsor">{sponsor}</div>'
            '<div class="newsletter"><div class="widget-title">Newsletter</div><p>Sign up for '
            "our weekly newsletter and get the best stories, events and offers from around the "
            "valley delivered to your inbox every Sunday morning. No spam, unsubscribe any time."
            "</p>"
            "</div></div>\n</div>\n"
            f'<div class="site-footer">{farm}<div class="legal">{legal}</div></div>\n'
            "</div></body></html>\n"
        )
        return before, after

    def post_html(self, title: str, dateline: str, body: str) -> str:
        return (
            f'<div class="post"><h1>{escape(title)}</h1><div class="post-meta">{escape(dateline)}'
            f'</div><div class="post-body"><p>{escape(body)}</p></div></div>'
        )


def template_site(n: int = 60, seed: int = 0) -> Site:
    """``n`` posts in one big template, ``n // 6`` advert and date mirrors (module docstring)."""
    b = TemplateBuilder(seed)
    site, text, rng = b.site, b.text, b.rng
    posts = []
    seen: set[str] = set()
    for i in range(n):
        topic = b.topics[i % len(b.topics)]
        title = f"{text.title(topic)} ({i + 1})"
        slug = slugify(title)
        while slug in seen:
            slug += "-x"
        seen.add(slug)
        author = rng.choice(text.words["names"])
        posts.append(
            (f"/posts/{slug}", title, author, text.date(), text.words_text(topic, 45, 100))
        )
    before, after = b.make_template([(p[0], p[1]) for p in rng.sample(posts, min(40, n))])
    sponsor = SPONSORS[0]

    def emit(path: str, title: str, main: str, ad: str, main_text: str | None) -> None:
        html = before.replace("{title}", escape(title)) + main + after.replace("{sponsor}", ad)
        b.pages[path] = page(html)
        site.canonical_pages.add(path)
        if main_text is not None:
            site.main_text[path] = main_text

    for path, title, author, date, body in posts:
        dateline = f"Posted on {format_date(date)} by {author}"
        emit(
            path, title, b.post_html(title, dateline, body), sponsor, f"{title}\n{dateline}\n{body}"
        )
    mirrors: list[tuple[str, str]] = []
    for k, (path, title, author, date, body) in enumerate(rng.sample(posts, n // 6)):
        if k % 2 == 0:
            mirror, ad = "/amp" + path[6:], SPONSORS[1 + k // 2 % 3]
            dateline = f"Posted on {format_date(date)} by {author}"
        else:
            mirror, ad = "/m" + path[6:], sponsor
            dateline = f"Posted on {format_date((date[0], date[1], date[2] % 28 + 1))} by {author}"
        emit(mirror, title, b.post_html(title, dateline, body), ad, f"{title}\n{dateline}\n{body}")
        site.near_duplicates[mirror] = path
        mirrors.append((mirror, title + " (mobile)"))
    index = b.links("post-list", [(p[0], p[1]) for p in posts] + mirrors)
    emit("/", SITE_NAME, f'<div class="post-index"><h1>All posts</h1>{index}</div>', sponsor, None)
    b.pages["/robots.txt"] = Page(b"User-agent: *\nDisallow:\n", "text/plain")
    site.distinct_pages = site.canonical_pages - set(site.near_duplicates)
    return site

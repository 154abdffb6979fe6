"""A link-heavy site for the speed benchmark: many pages, ~100 links each, no duplicate content.

Pages are ``/`` and ``/p/0`` … ``/p/{pages-1}``, generated lazily on first access (so building a
5,000-page site costs nothing up front) and deterministically from ``(seed, page number)``. Page
``i`` links ``/p/{i+1}`` (every page is reachable) and ``links_per_page - 1`` random others, so
after the first few percent of a crawl almost every extracted link is already seen. Spellings:
``/p/j`` (55%), relative ``j`` (20%), ``../p/j`` (10%), ``{base}/p/j`` (8%), ``/p/j#s`` (5%),
``/p/j?utm_source=feed`` (2% of the links to every 25th page: a stock crawler fetches those
pages twice).
Every page has its own ~80 words of text. ``aliases`` is left empty (there are ~500 k link
spellings); :meth:`Site.canonical_of` maps any request target to its page.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping

from crawler.sitegen.site import Page, Site, escape, page
from crawler.sitegen.text import TextMaker

_SPELLINGS = (
    (0.55, "/p/{j}"),
    (0.75, "{j}"),
    (0.85, "../p/{j}"),
    (0.93, "{{base}}/p/{j}"),
    (0.98, "/p/{j}#s"),
    (1.00, "/p/{j}?utm_source=feed"),  # only for every 25th page (see _spell)
)


class LazyPages(Mapping[str, Page]):
    """The pages of a link-heavy site, built on access (not cached: a page is cheap to rebuild)."""

    def __init__(self, pages: int, links_per_page: int, seed: int) -> None:
        self.count = pages
        self.links_per_page = links_per_page
        self.seed = seed

    def __len__(self) -> int:
        return self.count + 1

    def __iter__(self) -> Iterator[str]:
        yield "/"
        for i in range(self.count):
            yield f"/p/{i}"

    def __getitem__(self, key: str) -> Page:
        if key == "/":
            return self.index()
        number = key[3:] if key.startswith("/p/") else ""
        if not number.isdigit() or (len(number) > 1 and number[0] == "0"):
            raise KeyError(key)
        i = int(number)
        if i >= self.count:
            raise KeyError(key)
        return self.build(i)

    def index(self) -> Page:
        first = min(self.count, self.links_per_page)
        links = "".join(f'<li><a href="/p/{j}">Page {j}</a></li>' for j in range(first))
        return page(_html("Link-heavy site", "<p>Start here.</p>", links))

    def build(self, i: int) -> Page:
        rng = random.Random(self.seed * 1_000_003 + i)
        text = TextMaker(rng)
        topic = text.words.topics[i % len(text.words.topics)]
        title = f"Page {i}: {text.title(topic)}"
        body = f"<p>{escape(text.words_text(topic, 70, 90))}</p>"
        targets = [i + 1] if i + 1 < self.count else []
        targets += [rng.randrange(self.count) for _ in range(self.links_per_page - len(targets))]
        links = "".join(
            f'<li><a href="{_spell(rng.random(), j)}">Page {j}</a></li>' for j in targets
        )
        return page(_html(title, body, links))


def _spell(r: float, j: int) -> str:
    for cut, spelling in _SPELLINGS:
        if r < cut:
            if "utm_" in spelling and j % 25:
                break  # trackers on a few pages only, or a stock crawler fetches everything twice
            return spelling.format(j=j)
    return f"/p/{j}"


def _html(title: str, body: str, links: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}'
        f"</title></head>\n<body><h1>{escape(title)}</h1>\n{body}\n<ul>{links}</ul>\n</body></html>\n"
    )


def link_heavy_site(pages: int = 5000, links_per_page: int = 100, seed: int = 0) -> Site:
    """``pages`` pages of ``links_per_page`` links each (module docstring)."""
    if pages < 1 or links_per_page < 1:
        raise ValueError(
            f"link_heavy_site: pages={pages} and links_per_page={links_per_page} must both be >= 1"
        )
    lazy = LazyPages(pages, links_per_page, seed)
    keys = set(lazy)
    return Site(name="linkheavy", pages=lazy, canonical_pages=keys, distinct_pages=set(keys))

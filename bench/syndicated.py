"""The labelled corpus of generated sites with syndicated copies (``bench.quality``'s first corpus).

Ground truth from the generators, hosts kept apart for template learning:

* ``demo.test``: :func:`crawler.sitegen.demo_site` — articles in a nav/aside/footer template,
  mirrors differing only in the advert or the date line, section/search pages (byte copies left
  out: the content hash catches them whatever the fingerprint);
* ``journal.test``: :func:`crawler.sitegen.template_site` — 50-120-word posts inside a
  ~1,500-word ``<div>`` template, advert and date mirrors;
* ``wire.test``: *syndicated copies*: the main text of some demo articles and journal posts
  re-published inside a third, different template (with a per-page "headlines" widget), half
  of them also as a *revised* copy (one word changed, a correction line appended).

Redirect stubs (status 301) are in, with their status: a crawl follows them and never stores
them. A page's ``group`` is its duplicate group (``host + path`` of the original: the original, its
mirrors and its syndicated copies); None for a distinct page. Deterministic (seeded).
"""

from __future__ import annotations

import html as htmllib
import random
from dataclasses import dataclass


@dataclass
class Doc:
    host: str
    path: str
    html: str
    group: str | None  # duplicate group id (the original's key); None: distinct
    status: int = 200  # HTTP status the site answers (301 pages: "Moved" stubs)


def _wire_page(title: str, text: str, i: int, rng: random.Random) -> str:
    """A syndication template: different markup and boilerplate from both source sites."""
    menu = "".join(f'<div class="m"><a href="/s{j}">Section {j} news wire</a></div>'
                   for j in range(25))  # fmt: skip
    heads = "".join(f"<div class='h'>Wire headline number {rng.randint(1, 10**6)}</div>"
                    for _ in range(8))  # fmt: skip
    paras = "".join(f"<p>{htmllib.escape(line)}</p>" for line in text.split("\n"))
    return (
        f"<html><head><title>{htmllib.escape(title)} | Wire</title></head><body>"
        f'<div class="top">{menu}</div><div class="story"><div class="kicker">Syndicated '
        f"story {i} from our partners</div>{paras}</div><div class='more'>{heads}</div>"
        "<div class='bottom'>Wire Services Ltd. All rights reserved. Reproduction of this "
        "material without the written permission of the agency is prohibited. Contact the "
        "syndication desk for licensing terms and bulk subscriptions.</div></body></html>"
    )


def corpus(quick: bool) -> list[Doc]:
    """Every HTML page of the three sites (``quick``: a third of the originals syndicated,
    else half)."""
    from crawler.sitegen import demo_site, template_site

    docs: list[Doc] = []
    syndicate: list[tuple[str, str, str]] = []
    for host, site in (("demo.test", demo_site()), ("journal.test", template_site())):
        groups = site.duplicate_groups()
        group_of = {m: f"{host}{orig}" for orig, members in groups.items() for m in members}
        for path, page in sorted(site.pages.items()):
            if not page.content_type.startswith("text/html") or path in site.exact_duplicates:
                continue
            html = site.render(page, f"http://{host}").decode("utf-8", "replace")
            docs.append(Doc(host, path, html, group_of.get(path), page.status))
        originals = sorted(p for p in site.main_text if p in site.distinct_pages)
        for path in originals[:: 3 if quick else 2]:
            syndicate.append((group_of.get(path, f"{host}{path}"), path, site.main_text[path]))
    rng = random.Random(7)
    for i, (group, _path, text) in enumerate(syndicate):
        title = text.split("\n", 1)[0]
        docs.append(Doc("wire.test", f"/story/{i}", _wire_page(title, text, i, rng), group))
        if i % 2 == 0:  # a revised copy: one word changed, a correction note appended
            words = text.split(" ")
            words[len(words) // 2] = "reportedly"
            revised = " ".join(words) + "\nCorrection: an earlier version misspelled a name."
            html = _wire_page(title, revised, 1000 + i, rng)
            docs.append(Doc("wire.test", f"/story/{i}/updated", html, group))
        for doc in docs:  # the original joins the group
            if doc.group is None and f"{doc.host}{doc.path}" == group:
                doc.group = group
    return docs

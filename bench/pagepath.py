"""The spider's per-page link path, before and now, side by side in one process.

``.venv/bin/python -m bench.pagepath [--pages N] [--links N] [--runs N] [--quick]`` from the
project root.

What the ``web`` spider does with each page's links before any request is built, on the
link-heavy site (:func:`crawler.sitegen.link_heavy_site`, the pages of ``bench.crawl``), page
after page in crawl order with the link memo warming up as in a crawl:

* **extract**: the page's links judged (``WebSpider._extract``). *Before*: element by element
  (``root.iter("a", "area")``, an lxml proxy and ``get("href")`` per link, the scheme check
  before the memo: :func:`extract_one_element_at_a_time`); *now*: the hrefs as the page's one
  parse read them (:class:`~crawler.content.text.ParsedPage`: strings, no element proxy per
  link), the memo asked first.
* **seen check**: the early skip's batch question to the dupefilter's Bloom filter, about the
  page's unique fingerprints. *Before*: ``key in seen`` for each key (``k`` Python probes
  each); *now*: ``LocalSeenSet.contains_many`` (numpy over the batch). The filter is sized as
  in a crawl (``BLOOM_CAPACITY``, ``BLOOM_ERROR_RATE``) and holds the fingerprints of the links
  of the pages before.
* **page text**: :func:`crawler.content.text.extract` as the spider calls it (no tokens).
  *Before*: inline elements unwrapped one tag at a time (``unwrap_tags``: a walk of the tree
  per tag) and the lines read from the tree again after the boilerplate removal
  (:func:`extract_blocks_read_again`); *now*: one walk for all inline tags, and the lines not
  read again when no boilerplate was removed.
* **block hashes**: :func:`crawler.content.template.block_hashes` of the page's blocks (what
  the content decider hashes). *Before*: each line's whitespace collapsed and encoded on its
  own (:func:`block_hashes_per_line`); *now*: lines already collapsed are encoded in one call.

Apart from the page path, the **link miss**: what one link costs when the link memo does not
know it (at 10^6 pages almost every link), ``LinkRules.judge`` and ``fingerprint_url`` on every
link of every page, no memo. *Before*: the general path (:func:`judge_general`: split, resolve
and assemble, the scope and userinfo checks and the segment-by-segment trap check for each
link); *now*: ``LinkRules.judge`` (plain hrefs resolved against a cached base, the scope and
userinfo verdict remembered per origin, the short-path trap check).

Both variants run on the same parsed trees and answer the same (checked: links, verdicts,
drops, seen answers, text, blocks, block hashes, link miss verdicts and fingerprints); the
order of the two alternates over ``--runs``. Prints CPU µs per page (median over the runs) and
writes ``bench/results/pagepath.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from crawler import defaults

RESULTS = Path(__file__).resolve().parent / "results" / "pagepath.json"
Links = list[tuple[bytes, str, str | None]]
PARTS = ("extract", "seen check", "page text", "block hashes")


def extract_one_element_at_a_time(spider: Any, root: Any,
                                  base: str) -> tuple[Links, dict[str, Any]]:
    """``WebSpider._extract`` as it was (element by element, the scheme check before the memo):
    the reference of the bench and of ``tests/test_spider_links.py``. A page cut by
    ``LINKS_PER_PAGE_MAX`` has the number of links cut under the key ``"capped"``."""
    from crawler.urls.fingerprint import fingerprint_url
    from crawler.urls.linkrules import NOT_HTTP, SKIP_SCHEMES, memo_table

    absolute, rooted, relative = spider.link_memo.tables(base)
    links: Links = []
    dropped: dict[str, Any] = {}
    budget = spider.bounds.links_max or -1
    elements = root.iter("a", "area")
    for element in elements:
        href = element.get("href")
        if not href:
            continue
        if not budget:
            dropped["capped"] = 1 + sum(1 for rest in elements if rest.get("href"))
            break
        budget -= 1
        href = href.strip()
        if href[:11].lower().startswith(SKIP_SCHEMES):
            dropped.setdefault(NOT_HTTP, []).append(href)
            continue
        table = memo_table(href, absolute, rooted, relative)
        verdict = table.get(href) if table is not None else None
        canonical = None
        if verdict is None:
            canonical, stat = spider.rules.judge(href, base)
            verdict = fingerprint_url(canonical) if canonical and not stat else stat or NOT_HTTP
            if table is not None:
                spider.link_memo.remember(table, href, verdict)
        if isinstance(verdict, str):
            dropped.setdefault(verdict, []).append(href)
            continue
        links.append((verdict, href, canonical))
    return links, dropped


def judge_general(rules: Any, href: str, base: str | None = None) -> tuple[str | None, str | None]:
    """``LinkRules.judge`` by the general path alone, nothing remembered: the reference of the
    link miss and of ``tests/test_link_fastpath.py``."""
    from crawler.urls import urlnorm
    from crawler.urls.linkrules import NOT_HTTP, TRAP

    try:
        canonical = urlnorm._general(href, base, rules.policy)
    except urlnorm._Refused:
        return None, NOT_HTTP
    if rules.learned:
        own = rules.learned.get(urlnorm.url_host(canonical))
        if own is not None:
            canonical = urlnorm._general(canonical, None, own)
    stat = rules.judge_origin(canonical)
    if stat is None:
        trap = rules.limits.general_trap(canonical)
        stat = None if trap is None else TRAP + trap
    return canonical, stat


def link_miss(judge: Any, rules: Any, hrefs: list[str], base: str) -> list[Any]:
    """Every link of a page judged and fingerprinted as on a memo miss."""
    from crawler.urls.fingerprint import fingerprint_url

    verdicts = []
    for href in hrefs:
        canonical, stat = judge(rules, href, base)
        verdicts.append(fingerprint_url(canonical) if canonical and not stat else stat)
    return verdicts


def extract_blocks_read_again(html: str) -> tuple[str, list[str]]:
    """``(text, blocks)`` of :func:`crawler.content.text.extract` as it was: inline tags
    unwrapped one at a time, the lines of the tree read again after the boilerplate removal
    whether it removed anything or not."""
    from crawler.content import text

    tree = text._parse(html)
    text._title(tree)
    tree.strip_tags(text._DROP_TAGS)
    tree.unwrap_tags(text._INLINE_TAGS)  # one walk of the tree per inline tag
    tree.merge_text_nodes()
    visible = "\n".join(text._lines(tree))
    text._remove_boilerplate(tree)
    return visible, text._lines(tree)


def block_hashes_per_line(blocks: list[str]) -> list[int]:
    """:func:`crawler.content.template.block_hashes` as it was: every line's whitespace
    collapsed and encoded on its own."""
    import unicodedata

    import xxhash

    from crawler.content.template import block_hash

    if not blocks:
        return []
    folded = unicodedata.normalize("NFKC", "\n".join(blocks)).casefold().split("\n")
    if len(folded) != len(blocks):
        return [block_hash(b) for b in blocks]
    digest = xxhash.xxh3_64_intdigest
    return [digest(" ".join(line.split()).encode("utf-8", "surrogatepass")) for line in folded]


def _spider(seed: str) -> Any:
    from scrapy.utils.test import get_crawler

    from crawler.spiders.web import WebSpider

    crawler = get_crawler(WebSpider)
    spider = WebSpider.from_crawler(crawler, urls=seed)
    crawler.spider = spider
    crawler.stats.open_spider()
    return spider


def run(pages: int, links: int, runs: int) -> dict[str, Any]:
    from scrapy.http import HtmlResponse
    from scrapy.utils.response import get_base_url

    from crawler.backends.bloom import LocalSeenSet
    from crawler.content.template import block_hashes
    from crawler.content.text import extract
    from crawler.sitegen import link_heavy_site
    from crawler.spiders.web import html_tree
    from crawler.urls.linkrules import LinkRules

    origin = "http://localhost:8000"
    site = link_heavy_site(pages=pages, links_per_page=links)
    trees, htmls = [], []
    for path, page in sorted(site.pages.items()):
        response = HtmlResponse(origin + path, body=site.render(page, origin), encoding="utf-8")
        # (the page's one parse, lxml's tree as the spider read the links before it, base)
        trees.append(((html_tree(response), response.selector.root), get_base_url(response)))
        htmls.append(response.text)
    page_links = [[h.strip() for h in parsed.hrefs if h] for (parsed, _), _ in trees]

    def extract_before(spider: Any, roots: Any, base: str) -> Links:
        return extract_one_element_at_a_time(spider, roots[1], base)[0]

    def extract_now(spider: Any, roots: Any, base: str) -> Links:
        return spider._extract(roots[0], base)[0]  # type: ignore[no-any-return]

    def check_before(seen: LocalSeenSet, fps: list[bytes]) -> list[bool]:
        return [fp in seen for fp in fps]

    def check_now(seen: LocalSeenSet, fps: list[bytes]) -> list[bool]:
        return seen.contains_many(fps)

    def text_now(html: str) -> tuple[str, list[str]]:
        page = extract(html, tokenize=False)
        return page.text, page.blocks

    variants = {"before": (extract_before, check_before, extract_blocks_read_again,
                           block_hashes_per_line, judge_general),
                "now": (extract_now, check_now, text_now, block_hashes, LinkRules.judge)}
    times: dict[str, dict[str, list[float]]] = {
        name: {part: [] for part in (*PARTS, "link miss")} for name in variants}
    answers: dict[str, list[Any]] = {}
    for number in range(runs):
        order = list(variants) if number % 2 == 0 else list(reversed(variants))
        for name in order:
            links_of, check, text_of, hashes_of, judge = variants[name]
            spider = _spider(origin + "/")
            misses = []
            start = time.process_time()
            for hrefs, (_, base) in zip(page_links, trees, strict=True):
                misses.append(link_miss(judge, spider.rules, hrefs, base))
            times[name]["link miss"].append((time.process_time() - start) / len(trees) * 1e6)
            spider = _spider(origin + "/")
            seen = LocalSeenSet(defaults.BLOOM_CAPACITY, defaults.BLOOM_ERROR_RATE)
            spent = dict.fromkeys(PARTS, 0.0)
            got: list[Any] = []
            for (root, base), html in zip(trees, htmls, strict=True):
                start = time.process_time()
                found = links_of(spider, root, base)
                middle = time.process_time()
                unique = list(dict.fromkeys(fp for fp, _, _ in found))
                seen_answers = check(seen, unique)
                spent["extract"] += middle - start
                end = time.process_time()
                page_text = text_of(html)
                spent["seen check"] += end - middle
                hashed = time.process_time()
                spent["page text"] += hashed - end
                page_hashes = hashes_of(page_text[1])
                spent["block hashes"] += time.process_time() - hashed
                for fp in unique:
                    seen.add(fp)
                got.append((found, seen_answers, page_text, page_hashes))
            got.append(misses)
            for part, seconds in spent.items():
                times[name][part].append(seconds / len(trees) * 1e6)
            answers.setdefault(name, got)
    if answers["before"] != answers["now"]:
        raise SystemExit("bench.pagepath: the two variants answered differently")
    table = {name: {part: statistics.median(values) for part, values in parts.items()}
             for name, parts in times.items()}
    return {"pages": len(trees), "links_per_page": links, "runs": runs,
            "us_per_page": table, "samples_us_per_page": times}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pagepath", description=__doc__)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--links", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 pages, 1 run")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.runs = 200, 1
    if args.pages < 1 or args.links < 1 or args.runs < 1:
        parser.error("--pages, --links and --runs must be at least 1")
    result = run(args.pages, args.links, args.runs)
    table = result["us_per_page"]
    print(f"page path: link-heavy {result['pages']} pages x {result['links_per_page']} links, "
          f"{result['runs']} runs (CPU µs per page, median)")
    print(f"  {'part':<12} {'before':>9} {'now':>9} {'now/before':>11}")
    for part in PARTS:
        before, now = table["before"][part], table["now"][part]
        print(f"  {part:<12} {before:9.1f} {now:9.1f} {now / before:10.2f}x")
    before = sum(table["before"][part] for part in PARTS)
    now = sum(table["now"][part] for part in PARTS)
    print(f"  {'all':<12} {before:9.1f} {now:9.1f} {now / before:10.2f}x")
    before, now = table["before"]["link miss"], table["now"]["link miss"]
    links = result["links_per_page"]
    print(f"  link miss, no memo (judge + fingerprint): {before / links:.2f} µs per link before,"
          f" {now / links:.2f} now ({now / before:.2f}x)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a page costs besides its links, before and now, side by side in one process.

``.venv/bin/python -m bench.pagecost [--pages N] [--runs N]`` from the project root.

* **page text**: :func:`crawler.content.text.extract` as the spider calls it (no tokens).
  *Before*: every tree query run on every page (:func:`extract_every_query`: the 10 tags of no
  text stripped one by one, the 35 inline tags in one selector list, the three boilerplate
  queries, the title); *now*: a query for elements or attributes the markup shows it cannot
  hold is skipped (:class:`crawler.content.text._Markup`, the start-tag names read by the depth
  proof of :func:`crawler.urls.pagebounds.bound_depth_named`).

On the pages of ``bench.crawl`` (:func:`crawler.sitegen.link_heavy_site`, 100 links a page) and,
when installed, the python3.11-doc pages (real markup: every query has something to find).
* **depth proof**: :func:`crawler.urls.pagebounds._proof` (what guards the lexbor parse from
  deep pages), three ways: its specification ``_proof_by_expressions`` with sre's first pass
  over the page (``_SKELETON.findall``, the ``_FOREIGN`` search), the same with that pass in C
  (``_skeleton.tokens``), and the whole proof in C (``_skeleton.proof``). Two rows: *first
  pass in C* (sre's pass before, C's now), *all in C* (C's pass before, the C proof now).

Both variants answer the same (checked: title, text, blocks; the proof's answer and names);
the order alternates over
``--runs``. Prints CPU µs per page (median over the runs) and writes
``bench/results/pagecost.json``.
"""

from __future__ import annotations

import glob
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.sidebyside import alternating_medians, parse_args, report
from crawler.content import text
from crawler.urls import pagebounds

RESULTS = Path(__file__).resolve().parent / "results" / "pagecost.json"
DOCS = "/usr/share/doc/python3.11/html/**/*.html"
Answer = tuple[str, str, list[str]]


def extract_every_query(html: str) -> Answer:
    """``(title, text, blocks)`` of :func:`crawler.content.text.extract` as it was: every
    tree query run whatever the markup holds."""
    tree = text._parse(html)
    title = text._title(tree)
    text._prepare(tree)
    lines = text._lines(tree)
    blocks = text._lines(tree) if text._remove_boilerplate(tree) else lines
    return title, "\n".join(lines), blocks


def extract_now(html: str) -> Answer:
    page = text.extract(html, tokenize=False)
    return page.title, page.text, page.blocks


def corpora(pages: int) -> dict[str, list[str]]:
    from crawler.sitegen import link_heavy_site

    site = link_heavy_site(max(pages, 1), 100)
    out = {"link-heavy": [site.render(p, "http://h").decode() for p in site.pages.values()]}
    docs = sorted(glob.glob(DOCS, recursive=True))
    if docs:
        step = max(1, len(docs) // pages)
        out["python3.11-doc"] = [Path(p).read_text(encoding="utf-8", errors="replace")
                                 for p in docs[::step][:pages]]  # fmt: skip
    return out


def cpu_per_page(run: Callable[[str], Answer], pages: list[str]) -> float:
    start = time.process_time()
    for html in pages:
        run(html)
    return (time.process_time() - start) / len(pages) * 1e6


def measure(pages: list[str], runs: int) -> dict[str, float]:
    variants = {"before": extract_every_query, "now": extract_now}
    for html in pages:
        if extract_every_query(html) != extract_now(html):
            raise SystemExit(f"the variants disagree on a page: {html[:80]!r}")
    return alternating_medians({name: partial(cpu_per_page, variant, pages)
                                for name, variant in variants.items()}, runs)  # fmt: skip


def proof_with(tokens: Callable[[str], list[str]], foreign: Callable[[str], bool],
               html: str) -> tuple[bool, frozenset[str] | None]:  # fmt: skip
    """``_proof_by_expressions`` of ``html`` with the given first pass."""
    saved = pagebounds._skeleton_tokens, pagebounds._foreign
    pagebounds._skeleton_tokens, pagebounds._foreign = tokens, foreign
    try:
        return pagebounds._proof_by_expressions(html, pagebounds.MAX_DEPTH,
                                                pagebounds.MAX_FORMATTING)  # fmt: skip
    finally:
        pagebounds._skeleton_tokens, pagebounds._foreign = saved


def proof_in_c(html: str) -> tuple[bool, frozenset[str] | None]:
    from crawler.urls import _skeleton

    return _skeleton.proof(html, pagebounds.MAX_DEPTH, pagebounds.MAX_FORMATTING)


def measure_proof(pages: list[str], runs: int) -> dict[str, dict[str, float]]:
    """The depth proof with sre's first pass, with the C one, and all in C: two rows."""
    from crawler.urls import _skeleton

    variants: dict[str, Callable[[str], object]] = {
        "sre pass": partial(proof_with, pagebounds._SKELETON.findall, pagebounds._foreign_sre),
        "c pass": partial(proof_with, _skeleton.tokens, _skeleton.foreign),
        "c proof": proof_in_c,
    }
    for html in pages:
        if len({variant(html) for variant in variants.values()}) != 1:
            raise SystemExit(f"the variants disagree on a page: {html[:80]!r}")
    cost = alternating_medians({name: partial(cpu_per_page, variant, pages)  # type: ignore[arg-type]
                                for name, variant in variants.items()}, runs)  # fmt: skip
    return {"first pass in C": {"before": cost["sre pass"], "now": cost["c pass"]},
            "all in C": {"before": cost["c pass"], "now": cost["c proof"]}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args("python -m bench.pagecost", __doc__, 400, 5, argv)
    pages_of = corpora(args.pages)
    rows = {name: measure(pages, args.runs) for name, pages in pages_of.items()}
    for name, pages in pages_of.items():
        rows |= {f"depth proof, {step}: {name}": row
                 for step, row in measure_proof(pages, args.runs).items()}  # fmt: skip
    report("page text, CPU us per page", rows, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

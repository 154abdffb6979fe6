"""Near-duplicate quality: precision and recall per k and feature choice on a labelled corpus.

``.venv/bin/python -m bench.quality [--quick]`` from the project root.

Corpus (ground truth from the generators, hosts kept apart for template learning):

* ``demo.test``: :func:`crawler.sitegen.demo_site` — articles in a nav/aside/footer template,
  mirrors differing only in the advert or the date line, byte copies, section/search pages;
* ``journal.test``: :func:`crawler.sitegen.template_site` — 50-120-word posts inside a
  ~1,500-word ``<div>`` template, advert and date mirrors;
* ``wire.test``: *syndicated copies*: the main text of some demo articles and journal posts
  re-published inside a third, different template (with a per-page "headlines" widget), half
  of them also as a *revised* copy (one word changed, a correction line appended).

A pair of pages is a true duplicate when both belong to the same duplicate group (an original,
its mirrors and its syndicated copies). Byte copies are left out: the content hash catches them
at any k. A pair is predicted a duplicate when both pages have a fingerprint (at least
``--min-tokens`` tokens) within k bits. Precision and recall are over all pairs of the corpus.

Variants: features = words, word 2-shingles, 3-shingles; boilerplate removal = ``none`` (the
whole visible text), ``regions`` (nav/header/footer/aside and ARIA roles out), ``template``
(regions + the host's learned template blocks out; learned from every page of the host: the
steady state of a crawl) and ``pipeline`` (template + short blocks out when long blocks
dominate: what NearDuplicatePipeline fingerprints). k = 1..8.

Prints a table, writes ``bench/results/quality.json`` and ``bench/results/quality.svg``
(F1 against k per variant).
"""

from __future__ import annotations

import argparse
import html as htmllib
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crawler import defaults
from crawler.simhash import features, fingerprint
from crawler.template import KeptPage, TemplateFilter, block_hash
from crawler.text import extract, main_tokens, tokens

RESULTS = Path(__file__).resolve().parent / "results"
REMOVALS = ("none", "regions", "template", "pipeline")
SHINGLES = (1, 2, 3)
KS = tuple(range(1, 9))


@dataclass
class Doc:
    host: str
    path: str
    html: str
    group: str | None  # duplicate group id (the original's key); None: distinct


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
            docs.append(Doc(host, path, html, group_of.get(path)))
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


def block_lists(docs: list[Doc], removal: str) -> list[list[str]]:
    pages = [extract(d.html, tokenize=False) for d in docs]
    if removal == "none":
        return [p.text.splitlines() for p in pages]
    if removal == "regions":
        return [p.blocks for p in pages]
    learner = TemplateFilter()
    hashes = [[block_hash(b) for b in p.blocks] for p in pages]
    for doc, hs in zip(docs, hashes, strict=True):
        learner.learn(doc.host, KeptPage(doc.path, doc.path, "", []), hs)
    return [
        [b for _, b in learner.content(d.host, p.blocks, hs)]
        for d, p, hs in zip(docs, pages, hashes, strict=True)
    ]


def fingerprints(
    blocks: list[list[str]], removal: str, shingle: int, min_tokens: int
) -> list[int | None]:
    out: list[int | None] = []
    for page in blocks:
        per_block = [tokens(b) for b in page]
        if removal == "pipeline":
            toks = main_tokens(per_block, min_tokens)
        else:
            toks = [t for b in per_block for t in b]
        ok = len(toks) >= max(min_tokens, 1)
        out.append(fingerprint(features(toks, shingle)) if ok else None)
    return out


def pair_scores(docs: list[Doc], fps: list[int | None], ks: Iterable[int]) -> dict[int, Any]:
    n = len(docs)
    groups = np.array([hash(d.group) if d.group else -1 - i for i, d in enumerate(docs)])
    truth = groups[:, None] == groups[None, :]
    has = np.array([f is not None for f in fps])
    values = np.array([f or 0 for f in fps], dtype=np.uint64)
    dist = np.bitwise_count(values[:, None] ^ values[None, :]).astype(np.int64)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    both = has[:, None] & has[None, :] & upper
    positives = int((truth & upper).sum())
    scores = {}
    for k in ks:
        predicted = both & (dist <= k)
        tp = int((predicted & truth).sum())
        fp = int((predicted & ~truth).sum())
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / positives if positives else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores[k] = {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp,
                     "fn": positives - tp}  # fmt: skip
    return scores


def write_svg(results: dict[str, dict[int, Any]], path: Path) -> None:
    width, height, left, top = 720, 420, 60, 30
    plot_w, plot_h = 460, 320
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"]  # fmt: skip

    def xy(k: int, f1: float) -> str:
        x = left + (k - KS[0]) / (KS[-1] - KS[0]) * plot_w
        return f"{x:.1f},{top + (1 - f1) * plot_h:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="13">F1 of near-duplicate pairs against k '
             "(bits)</text>",
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
             'stroke="#999"/>']  # fmt: skip
    for k in KS:
        x = xy(k, 0).split(",")[0]
        parts.append(f'<text x="{x}" y="{top + plot_h + 15}" text-anchor="middle">{k}</text>')
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = xy(KS[0], tick).split(",")[1]
        parts.append(f'<text x="{left - 6}" y="{y}" text-anchor="end">{tick:.2f}</text>')
    for i, (name, scores) in enumerate(results.items()):
        color = colors[i % len(colors)]
        points = " ".join(xy(k, scores[k]["f1"]) for k in KS)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
                     f'points="{points}"/>')  # fmt: skip
        ly = top + 12 + i * 15
        parts.append(f'<line x1="{left + plot_w + 15}" y1="{ly - 4}" x2="{left + plot_w + 35}" '
                     f'y2="{ly - 4}" stroke="{color}" stroke-width="2"/>')  # fmt: skip
        parts.append(f'<text x="{left + plot_w + 40}" y="{ly}">{name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")


def run(quick: bool, min_tokens: int) -> dict[str, Any]:
    docs = corpus(quick)
    results: dict[str, dict[int, Any]] = {}
    for removal in REMOVALS:
        blocks = block_lists(docs, removal)
        for shingle in SHINGLES:
            fps = fingerprints(blocks, removal, shingle, min_tokens)
            results[f"{removal}/{shingle}-word"] = pair_scores(docs, fps, KS)
    blocks = block_lists(docs, "pipeline")
    by_min = {}
    for mt in (0, 10, 20, 30, 50):
        fps = fingerprints(blocks, "pipeline", defaults.SIMHASH_SHINGLE, mt)
        by_min[mt] = pair_scores(docs, fps, [defaults.SIMHASH_MAX_DISTANCE])
    groups = {d.group for d in docs if d.group}
    return {"pages": len(docs), "groups": len(groups), "min_tokens": min_tokens,
            "results": results, "by_min_tokens": by_min}  # fmt: skip


def print_table(out: dict[str, Any]) -> None:
    print(f"{out['pages']} pages, {out['groups']} duplicate groups, min_tokens "
          f"{out['min_tokens']}; P/R = precision/recall over page pairs")  # fmt: skip
    print(f"{'variant':<22}" + "".join(f"{'k=' + str(k):>12}" for k in KS))
    for name, scores in out["results"].items():
        cells = "".join(f"{scores[k]['precision']:>6.2f}/{scores[k]['recall']:<5.2f}" for k in KS)
        print(f"{name:<22}{cells}")
    k = defaults.SIMHASH_MAX_DISTANCE
    print(f"\npipeline/{defaults.SIMHASH_SHINGLE}-word at k={k} by SIMHASH_MIN_TOKENS:")
    for mt, scores in out["by_min_tokens"].items():
        s = scores[k]
        print(f"  min_tokens={mt:<3} precision {s['precision']:.3f} recall {s['recall']:.3f} "
              f"(tp {s['tp']}, fp {s['fp']}, fn {s['fn']})")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality")
    parser.add_argument("--quick", action="store_true", help="fewer syndicated copies")
    parser.add_argument("--min-tokens", type=int, default=defaults.SIMHASH_MIN_TOKENS)
    args = parser.parse_args(argv)
    out = run(args.quick, args.min_tokens)
    print_table(out)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "quality.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    write_svg(out["results"], RESULTS / "quality.svg")
    print(f"\nwrote {RESULTS / 'quality.json'} and {RESULTS / 'quality.svg'}")


if __name__ == "__main__":
    main()

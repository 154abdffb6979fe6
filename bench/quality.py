"""Near-duplicate quality: fingerprint pairs on a labelled corpus, and the real pipeline per set.

``.venv/bin/python -m bench.quality [--quick] [--sets pairs,english,...]`` from the project
root (default: every part; ``--quick`` halves the sets: under a minute).

**pairs**: precision and recall over page pairs per k and feature choice. Corpus:
:func:`bench.syndicated.corpus` (generated ``demo.test``, ``journal.test`` and ``wire.test``:
advert/date mirrors, syndicated and revised copies, short posts in a huge template). A pair of
pages is a true duplicate when both belong to the same duplicate group (an original, its
mirrors and its syndicated copies). Byte copies are left out: the content hash catches them at
any k. A pair is predicted a duplicate when both pages have a fingerprint (at least
``--min-tokens`` tokens) within k bits. Precision and recall are over all pairs of the corpus.
Variants: features = words, word 2-shingles, 3-shingles; boilerplate removal = ``none`` (the
whole visible text), ``regions`` (nav/header/footer/aside and ARIA roles out), ``template``
(regions + the host's learned template blocks out; learned from every page of the host: the
steady state of a crawl) and ``pipeline`` (template + short blocks out when long blocks
dominate: what NearDuplicatePipeline fingerprints). k = 1..8.

**Sets** (:mod:`bench.corpora`: ``english``, ``japanese``, ``chinese``, ``short``,
``syndicated``, ``shared-host``; real Debian manual pages with planted mirrors): each fed
through a real NearDuplicatePipeline in a seeded shuffled order (:mod:`bench.pipeline_eval`),
scored by :mod:`bench.scores` (mirrors caught, precision, group and pair recall, wrong drops,
kept-twice groups, why each missed mirror was missed). A set whose Debian package is absent is
skipped with one line naming it. Adverts come from a pool of eight per language, in a
``sponsored`` block (each soon becomes template on the mirror host, and the pipeline leaves ad
slots out anyway); ``--unique-adverts`` makes every advert a plain paragraph with a campaign
number of its own (a large ad inventory that nothing marks: the advert always counts), results
under ``sets_unique_adverts``.

Prints the tables and writes ``bench/results/quality.json``: ``{"pairs": {...}, "sets": {name:
{...}}, "sets_unique_adverts": {name: {...}}}``; a run of some parts replaces those and keeps
the others from the previous file. Each part records the ``settings`` it ran with (``code``:
digests of the deciding modules, so two results compare at a glance).
``bench/results/quality.svg``: F1 against k per pairs variant (when ``pairs`` ran).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.corpora import SETS, build
from bench.debian_docs import MissingSource
from bench.pipeline_eval import evaluate
from bench.scores import diagnosis, table
from bench.syndicated import Doc, corpus
from crawler import defaults
from crawler.content.simhash import features, fingerprint
from crawler.content.template import KeptPage, TemplateFilter, block_hash
from crawler.content.text import extract, main_tokens, tokens

RESULTS = Path(__file__).resolve().parent / "results"
REMOVALS = ("none", "regions", "template", "pipeline")
SHINGLES = (1, 2, 3)
KS = tuple(range(1, 9))
PARTS = ("pairs", *SETS)
SEED = 20240611


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


def run_pairs(quick: bool, min_tokens: int) -> dict[str, Any]:
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


def run_sets(
    names: list[str], quick: bool, seed: int, unique_ads: bool = False
) -> dict[str, dict[str, Any]]:
    """Each set built and evaluated; a set whose Debian package is absent: ``{"skipped": why}``."""
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            page_set = build(name, quick, seed, unique_ads=unique_ads)
        except MissingSource as exc:
            print(f"set {name} skipped: {exc}", flush=True)
            results[name] = {"skipped": str(exc)}
            continue
        results[name] = evaluate(page_set, seed)
        print(f"set {name}: {results[name]['pages']} pages, {results[name]['seconds']:.1f} s",
              flush=True)  # fmt: skip
    return results


def print_sets(results: dict[str, dict[str, Any]]) -> None:
    k, min_tokens = defaults.SIMHASH_MAX_DISTANCE, defaults.SIMHASH_MIN_TOKENS
    print(f"\nNearDuplicatePipeline per set (k={k}, min_tokens={min_tokens}, "
          f"shingle={defaults.SIMHASH_SHINGLE}; seeded shuffled fetch order):")  # fmt: skip
    print("\n".join(table(results)))
    print()
    for name, result in results.items():
        if "skipped" not in result:
            print("\n".join(diagnosis(name, result)))


def parse_parts(text: str | None) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown set {', '.join(unknown)}: choose from {', '.join(PARTS)}"
        )
    return names


def code_digests() -> dict[str, str]:
    """Short SHA-1 of the modules that decide (results are comparable at equal digests)."""
    root = Path(__file__).resolve().parent.parent / "crawler"
    names = ("content/text.py", "content/template.py", "content/simhash.py", "dedup/decider.py",
             "dedup/pages.py", "dedup/hosts.py", "dedup/preferred.py", "dedup/outage.py",
             "backends/local.py")
    return {n: hashlib.sha1((root / n).read_bytes()).hexdigest()[:12] for n in names}


def write_json(out: dict[str, Any]) -> Path:
    """Merge ``out`` into the previous results file (parts not run this time are kept)."""
    path = RESULTS / "quality.json"
    old: dict[str, Any] = {}
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
    merged = old if "sets" in old or "sets_unique_adverts" in old else {}
    merged.pop("settings", None)  # an older layout's: each part holds its own now
    merged.update({k: v for k, v in out.items() if not k.startswith("sets")})
    for key in ("sets", "sets_unique_adverts"):
        if key in out or key in merged:
            merged[key] = {**merged.get(key, {}), **out.get(key, {})}
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.quality")
    parser.add_argument("--quick", action="store_true", help="smaller sets and fewer copies")
    parser.add_argument(
        "--sets",
        type=parse_parts,
        default=list(PARTS),
        help=f"comma-separated parts, default all: {','.join(PARTS)}",
    )
    parser.add_argument(
        "--min-tokens",
        type=int,
        default=defaults.SIMHASH_MIN_TOKENS,
        help="SIMHASH_MIN_TOKENS of the pairs table (the sets use the default)",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--unique-adverts", action="store_true",
                        help="each advert a block of its own (never template on the mirror "
                        "host); results under sets_unique_adverts")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    settings = {"k": defaults.SIMHASH_MAX_DISTANCE, "min_tokens": defaults.SIMHASH_MIN_TOKENS,
                "shingle": defaults.SIMHASH_SHINGLE, "seed": args.seed, "quick": args.quick,
                "unique_adverts": args.unique_adverts,
                "code": code_digests()}  # fmt: skip
    out: dict[str, Any] = {}
    if "pairs" in args.sets:
        out["pairs"] = {**run_pairs(args.quick, args.min_tokens), "settings": settings}
        print_table(out["pairs"])
        RESULTS.mkdir(parents=True, exist_ok=True)
        write_svg(out["pairs"]["results"], RESULTS / "quality.svg")
    names = [n for n in args.sets if n != "pairs"]
    if names:
        key = "sets_unique_adverts" if args.unique_adverts else "sets"
        out[key] = run_sets(names, args.quick, args.seed, args.unique_adverts)
        print_sets(out[key])
        for result in out[key].values():
            result["settings"] = settings
    path = write_json(out)
    print(f"\nwrote {path} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

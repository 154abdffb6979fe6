"""Text extraction on hostile nesting: the cost curve before and after the depth bound.

``.venv/bin/python -m bench.extraction [--quick] [--timeout S]`` from the project root.

*Before* is :func:`crawler.content.text.extract` with :func:`crawler.urls.pagebounds.bound_depth`
replaced by the identity (exactly the extraction before the bound: the HTML5 parser fed the markup
as it is); *after* is :func:`crawler.content.text.extract` as it is. Both run side by side in one
run, each measurement in a child process of its own (a stalled *before* is cut at ``--timeout``
seconds and shown as ``> S``). Shapes, at 15,000 to 100,000 elements:

* ``unclosed``: ``<span><b><i>x `` repeated, never closed (the page that stalled a crawl for
  173 s at 40,000 elements);
* ``siblings``: ``<div>x</div>`` repeated;
* ``nested``: ``<div>`` n times, ``x``, ``</div>`` n times;
* ``after <!-->``, ``after </script x>``...: ``nested`` after a prefix that once made the
  bound's tag scan see one comment or raw text to the end of the page while the parser read
  every tag (:data:`BYPASS_PREFIXES`), at 30,000 elements.

Then the pages that are not hostile: every page of Debian's python3.11-doc, extracted before
and after (median and total time, and whether title, text, blocks and tokens are identical).
Prints the tables and writes ``bench/results/extraction.json``. Compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

from crawler.content import text

RESULTS = Path(__file__).resolve().parent / "results" / "extraction.json"
SHAPES = ("unclosed", "siblings", "nested")
SIZES = (15_000, 30_000, 60_000, 100_000)
QUICK_SIZES = (15_000, 30_000)
#: shape name -> what precedes the nested divs (the scanner bypasses of the first bound)
BYPASS_PREFIXES = {"after <!-->": "<!-->", "after <!--->": "<!--->",
                   "after --!>": "<!-- a --!>", "after </script x>": "<script></script x>",
                   "after <svg><title>": "<svg><title>", "after <svg><style>": "<svg><style>",
                   "after <noscript>": "<noscript>"}  # fmt: skip
BYPASS_SIZE = 30_000


def page(shape: str, elements: int) -> str:
    """A page of about ``elements`` elements of ``shape`` (module docstring)."""
    if shape == "unclosed":
        return "<html><body>" + "<span><b><i>x " * (elements // 3) + "</body></html>"
    if shape == "siblings":
        return "<html><body>" + "<div>x</div>" * elements + "</body></html>"
    prefix = BYPASS_PREFIXES.get(shape, "")
    return ("<html><body>" + prefix + "<div>" * elements + "x" + "</div>" * elements
            + "</body></html>")  # fmt: skip


def old_extract(html: str) -> text.PageText:
    """:func:`crawler.content.text.extract` before the depth bound (the markup parsed as it is)."""
    with mock.patch.object(text, "bound_depth_named", lambda markup: (markup, None)):
        return text.extract(html)


def _timed(impl: str, html: str) -> float:
    run = old_extract if impl == "before" else text.extract
    start = time.perf_counter()
    run(html)
    return time.perf_counter() - start


def measure(impl: str, shape: str, elements: int, timeout: float) -> float | None:
    """Seconds one extraction took in a child process; None when cut at ``timeout``."""
    command = [sys.executable, "-m", "bench.extraction", "--one", impl, shape, str(elements)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout.strip())


def curve(sizes: tuple[int, ...], timeout: float) -> list[dict[str, Any]]:
    rows = []
    runs = [(shape, n) for shape in SHAPES for n in sizes]
    for shape, n in runs + [(shape, BYPASS_SIZE) for shape in BYPASS_PREFIXES]:
        before = measure("before", shape, n, timeout)
        after = measure("after", shape, n, timeout)
        rows.append({"shape": shape, "elements": n, "kib": len(page(shape, n)) // 1024,
                     "before_s": before, "after_s": after,
                     "speedup": round(before / after, 1) if before and after else None})
        print(f"  {shape} {n}: before {_secs(before, timeout)}, after "
              f"{_secs(after, timeout)}", flush=True)  # fmt: skip
    return rows


def real_pages(limit: int | None) -> dict[str, Any]:
    """Before and after on python3.11-doc's pages: time per page and identical output."""
    from bench.debian_docs import doc_paths, read

    paths = doc_paths("python")[:limit]
    before: list[float] = []
    after: list[float] = []
    identical = 0
    for path in paths:
        html = read(path)
        start = time.perf_counter()
        old = old_extract(html)
        middle = time.perf_counter()
        new = text.extract(html)
        before.append(middle - start)
        after.append(time.perf_counter() - middle)
        identical += (old.title, old.text, old.blocks, old.tokens) == (
            new.title, new.text, new.blocks, new.tokens)
    return {"pages": len(paths), "identical": identical,
            "median_ms_before": round(statistics.median(before) * 1000, 2),
            "median_ms_after": round(statistics.median(after) * 1000, 2),
            "total_s_before": round(sum(before), 2), "total_s_after": round(sum(after), 2),
            "median_overhead_pct": round(100 * (statistics.median(after)
                                                / statistics.median(before) - 1), 1)}


def _secs(value: float | None, timeout: float) -> str:
    return f"> {timeout:.0f} s" if value is None else f"{value:.3f} s"


def table(rows: list[dict[str, Any]], real: dict[str, Any], timeout: float) -> str:
    lines = ["| shape | elements | KiB | before | after | before / after |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = f"{r['speedup']}x" if r["speedup"] else (
            f"> {timeout / r['after_s']:.0f}x" if r["after_s"] else "")
        lines.append(f"| {r['shape']} | {r['elements']:,} | {r['kib']:,} | "
                     f"{_secs(r['before_s'], timeout)} | {_secs(r['after_s'], timeout)} | "
                     f"{ratio} |")  # fmt: skip
    lines += ["", "| python3.11-doc pages | identical output | median before | median after | "
              "median overhead | total before | total after |",
              "| --- | --- | --- | --- | --- | --- | --- |",
              f"| {real['pages']} | {real['identical']} | {real['median_ms_before']} ms | "
              f"{real['median_ms_after']} ms | {real['median_overhead_pct']}% | "
              f"{real['total_s_before']} s | {real['total_s_after']} s |"]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.extraction",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="15k and 30k elements, 100 pages")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds before a measurement is cut (default 120; quick 30)")
    parser.add_argument("--one", nargs=3, metavar=("IMPL", "SHAPE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        impl, shape, n = args.one
        print(_timed(impl, page(shape, int(n))))
        return 0
    timeout = args.timeout or (30.0 if args.quick else 120.0)
    rows = curve(QUICK_SIZES if args.quick else SIZES, timeout)
    real = real_pages(100 if args.quick else None)
    print(table(rows, real, timeout))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"timeout_s": timeout, "curve": rows, "real_pages": real},
                                  indent=2) + "\n")  # fmt: skip
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

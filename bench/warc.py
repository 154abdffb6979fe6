"""WARC output cost: the same crawl with and without ``WARC_OUTPUT``, side by side.

``.venv/bin/python -m bench.warc [--site demo|linkheavy] [--pages N] [--links N] [--runs N]
[--quick] [-s NAME=VALUE ...]`` from the project root. Our ``web`` crawl (project settings,
SQLite storage in a temp directory) of a generated site served on 127.0.0.1, alternating
plain / WARC / WARC / plain ... so drift hits both alike; the crawler is pinned to one CPU and
the server to the other as in :mod:`bench.crawl` (whose child-process harness this reuses).
The WARC runs set ``WARC_OUTPUT`` (the project's settings list the WARC components) and write
into the temp directory.

Per configuration: pages/s and CPU ms per page (median and range), and for WARC the bytes of
all WARC files per stored page and per fetched page, and of their CDXJ indexes per stored
page. Writes ``bench/results/warc.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.crawl import ROOT, add_site_arguments, build_site, command, measure, pin_cpus, run_child
from crawler.sitegen.server import SiteServer

KINDS = ("plain", "warc")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.warc",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    add_site_arguments(parser, pages=2000, runs_of="configuration")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server/crawler CPUs")
    parser.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                        help="extra Scrapy setting for both configurations (repeatable)")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.links, args.runs = min(args.pages, 500), min(args.links, 50), 1
    return args


def warc_settings(work: Path) -> list[str]:
    """The project's settings list the WARC components; WARC_OUTPUT turns them on."""
    return [f"WARC_OUTPUT={work / 'warc'}/"]


def crawl_once(kind: str, server: SiteServer, cpu: int | None,
               args: argparse.Namespace) -> dict[str, Any]:
    server.reset_hits()
    work = Path(tempfile.mkdtemp(prefix=f"bench-warc-{kind}-"))
    try:
        extra = warc_settings(work) if kind == "warc" else []
        run_args = argparse.Namespace(**{**vars(args), "set": [*args.set, *extra]})
        result = run_child(command("ours", server.base_url + "/", work, run_args, None),
                           ROOT, work, cpu, args.timeout)  # fmt: skip
        if result["exit"] != 0 or not result["stats"]:
            tail = (work / "stderr.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{kind} crawl failed (exit {result['exit']}):\n{tail}")
        files = sorted((work / "warc").glob("*.warc.gz")) if kind == "warc" else []
        indexes = sorted((work / "warc").glob("*.cdxj")) if kind == "warc" else []
        record = measure(kind, result, server)
        record["warc_files"] = len(files)
        record["warc_bytes"] = sum(f.stat().st_size for f in files)
        record["index_bytes"] = sum(f.stat().st_size for f in indexes)
        record["stored"] = int(result["stats"].get("storage/documents", 0))
        record["warc_records"] = {k: v for k, v in result["stats"].items()
                                  if k.startswith("warc/")}  # fmt: skip
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        rates = [r["pages_per_s"] for r in mine]
        cpu = [r["cpu_ms_per_page"] for r in mine]
        out[kind] = {"pages_per_s": statistics.median(rates), "range": (min(rates), max(rates)),
                     "cpu_ms_per_page": statistics.median(cpu),
                     "pages_fetched": mine[-1]["pages_fetched"], "stored": mine[-1]["stored"]}
        if kind == "warc":
            last = mine[-1]
            out[kind]["bytes_per_stored_page"] = last["warc_bytes"] / max(last["stored"], 1)
            out[kind]["bytes_per_fetched_page"] = last["warc_bytes"] / max(
                last["pages_fetched"], 1)
            out[kind]["files"] = last["warc_files"]
            out[kind]["index_bytes_per_stored_page"] = last["index_bytes"] / max(
                last["stored"], 1)
    out["ratio"] = out["warc"]["pages_per_s"] / out["plain"]["pages_per_s"]
    return out


def table(title: str, summary: dict[str, Any]) -> str:
    plain, warc = summary["plain"], summary["warc"]
    lines = [title, f"{'':28}{'plain':>16}{'WARC_OUTPUT':>16}"]
    for label, key in (("pages/s (median)", "pages_per_s"), ("CPU ms per page", "cpu_ms_per_page"),
                       ("pages fetched", "pages_fetched"), ("pages stored", "stored")):
        lines.append(f"{label:28}{plain[key]:>16.1f}{warc[key]:>16.1f}")
    ranges = [f"{lo:.0f}-{hi:.0f}" for lo, hi in (plain["range"], warc["range"])]
    lines.append(f"{'pages/s range':28}{ranges[0]:>16}{ranges[1]:>16}")
    lines.append(f"WARC / plain pages/s: {summary['ratio']:.2f}x; WARC bytes per stored page "
                 f"{warc['bytes_per_stored_page']:.0f} (per fetched page "
                 f"{warc['bytes_per_fetched_page']:.0f}), {warc['files']} file(s); CDXJ "
                 f"index bytes per stored page {warc['index_bytes_per_stored_page']:.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    site, label = build_site(args)
    cpu = pin_cpus(args.no_pin)
    title = f"WARC bench: {label}, {args.runs} run(s) each, concurrency {args.concurrency}"
    print(title, flush=True)
    runs = []
    with SiteServer(site) as server:
        for i in range(args.runs):
            for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
                record = crawl_once(kind, server, cpu, args)
                runs.append(record)
                print(f"run {i} {kind:5} {record['pages_per_s']:7.1f} pages/s "
                      f"{record['cpu_ms_per_page']:5.2f} CPU ms/page "
                      f"{record['warc_bytes']:>10} WARC bytes", flush=True)
    summary = summarize(runs)
    print()
    print(table(title, summary))
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "warc.json").write_text(json.dumps(
        {"title": title, "args": vars(args), "runs": runs, "summary": summary}, indent=2,
        default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

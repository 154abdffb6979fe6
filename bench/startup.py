"""Start-up benchmark: a one-page crawl, ours against stock Scrapy's ``runspider``.

``.venv/bin/python -m bench.startup [--runs N] [--quick] [--importtime] [--profile]`` from the
project root.

One process serves a one-page site (:class:`crawler.sitegen.scripted.ScriptedWeb`: a
``robots.txt`` that allows everything and one HTML page without links) on 127.0.0.1. Each crawl
runs in a child process, the two alternating (stock, ours, ours, stock, ...) so drift in the
machine hits both alike:

* **ours**: ``scrapy crawl web -a urls=<page>`` from the project root with the full project
  settings (every dedup feature on, SQLite storage in a fresh temp directory);
* **stock**: ``scrapy runspider bench/stock_spider.py -a url=<page>`` from a temp directory
  outside the project, so Scrapy's stock settings apply.

Both get the same equalizing settings as :mod:`bench.crawl` (robots.txt obeyed, no delay, no
AutoThrottle, telnet off) and :mod:`bench.probe`'s extension. Per crawl: **wall** seconds from
spawn to exit (the parent blocks in ``os.wait4``), **peak RSS** (``ru_maxrss`` of the child from
``wait4``; "RSS at open" is the part resident at ``spider_opened``) and **to open**, the
seconds from spawn to ``spider_opened`` (Unix time stamped in the child by the probe). The
table shows the median and range over ``--runs`` and the ratio ours/stock of the medians;
``bench/results/startup.json`` holds every run (``--out`` another directory).

Both crawlers run from cached bytecode: stock Scrapy's modules were compiled when pip
installed them, so before measuring the project's packages (``crawler``, ``settings``,
``bench``) are compiled into their ``__pycache__`` (:func:`compile_project`), as the first run of
an installed checkout leaves them. Without that, an environment with
``PYTHONDONTWRITEBYTECODE=1`` compiles every project module from source in every child (about
0.1 s more of ours per crawl, none of stock's); ``--no-compile`` measures that case.

``--before DIR`` adds a third kind, **before**: ours run from another tree of the project
(e.g. ``git archive HEAD | tar -x -C DIR``: its working directory and first ``PYTHONPATH``
entry, its bytecode compiled too), alternating with the other two (stock, before, ours, ours,
before, stock, ...), so a change is measured side by side with what it changes.

``--importtime`` adds one run of each under ``python -X importtime`` and lists the top-level
imports by cumulative time (``bench/results/startup_importtime_{ours,stock}.txt``);
``--profile`` adds one run of ours under cProfile (the whole process, imports included:
``bench/results/startup_profile_ours.txt``). Numbers are machine-dependent: compare the ratios.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.crawl import ROOT, child_env
from bench.crawl import command as crawl_command
from crawler.sitegen.scripted import Answer, ScriptedWeb, html

RESULTS = ROOT / "bench" / "results"
KINDS = ("stock", "ours")
BEFORE = "before"  # ours from another tree (--before)
ROBOTS = Answer(body="User-agent: *\nAllow: /\n", content_type="text/plain")


def _article(words: int = 900, vocabulary: int = 1500, seed: int = 28) -> str:
    """Text the size of a usual article (900 words, 429 distinct: as many SimHash
    features with the default ``SIMHASH_SHINGLE = 1``), the same in every run: a page of a few
    words would let ours skip work a real page makes it do."""
    import random

    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "nu", "re", "sa", "ti", "vo", "pe", "da", "ge", "hu"]
    vocab = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(vocabulary)]
    return " ".join(rng.choice(vocab) for _ in range(words)) + "."


PAGE_TEXT = _article()
#: The project's packages a crawl of ours imports, compiled before measuring.
PACKAGES = ("crawler", "settings", "bench")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.startup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5, help="crawls of each (5)")
    parser.add_argument("--quick", action="store_true", help="1 run of each")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per crawl (120)")
    parser.add_argument("--importtime", action="store_true", help="one -X importtime run of each")
    parser.add_argument("--profile", action="store_true", help="one cProfile run of ours")
    parser.add_argument("--no-compile", action="store_true",
                        help="do not compile the project's bytecode first")  # fmt: skip
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run ours from this tree of the project (kind 'before')")
    parser.add_argument("--top", type=int, default=25, help="lines of the import/profile lists")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="directory of the results (bench/results)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    return args


def command(kind: str, url: str, work: Path, python: list[str]) -> list[str]:
    """The child's command line (``python`` is the interpreter and its options):
    :func:`bench.crawl.command` with Scrapy's default concurrency."""
    stock_concurrency = argparse.Namespace(concurrency=None, set=[])
    ours = "ours" if kind == BEFORE else kind  # the same command, from another tree
    return crawl_command(ours, url, work, stock_concurrency, None, python=python)


def tree_env(tree: Path | None) -> dict[str, str]:
    """:func:`bench.crawl.child_env`, with ``tree`` first on ``PYTHONPATH`` when given."""
    env = child_env()
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env["PYTHONPATH"]])
    return env


def run_child(cmd: list[str], cwd: Path, work: Path, timeout: float,
              tree: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Run one child to its exit; wall time, peak RSS, exit code and its stats file."""
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        spawned = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=tree_env(tree), stdout=out, stderr=err)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stats_path = work / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    opened = float(stats.get("bench/opened_unix") or 0)
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 3),
        "to_open_s": round(opened - spawned, 3) if opened else None,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "rss_open_mib": float(stats.get("bench/rss_open_mib") or 0),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "pages": int(stats.get("response_received_count", 0)),
        "items": int(stats.get("item_scraped_count", 0)),
        "finish_reason": stats.get("finish_reason"),
    }


def crawl_once(kind: str, url: str, timeout: float, python: list[str] | None = None,
               keep: Path | None = None, tree: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One crawl of ``kind``; raises ``SystemExit`` with the child's log tail on failure.

    ``keep``: copy the child's stderr there (the ``-X importtime`` output); ``tree``: the
    project tree of kind ``before``."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-startup-{kind}-"))
    tree = tree if kind == BEFORE else None
    try:
        # stock: outside the project, stock settings
        cwd = (tree or ROOT) if kind in ("ours", BEFORE) else work
        cmd = command(kind, url, work, python or [sys.executable])
        result = run_child(cmd, cwd, work, timeout, tree)
        if result["exit"] != 0 or result["pages"] < 2 or result["items"] < 1:
            tail = (work / "stderr.txt").read_text(errors="replace")[-2000:]
            log = work / "crawl.log"
            log_tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise SystemExit(f"{kind} start-up crawl failed ({result}):\n{tail}\n{log_tail}")
        if keep is not None:
            shutil.copyfile(work / "stderr.txt", keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"kind": kind, **result}


def kinds_of(runs: list[dict[str, Any]]) -> list[str]:
    """The kinds of ``runs``: ours and stock, and before when it ran."""
    return [*KINDS, *([BEFORE] if any(r["kind"] == BEFORE for r in runs) else [])]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range per kind of wall, peak RSS and time to open; ratios of the medians
    (ours/stock, and before/stock and ours/before when before ran)."""
    out: dict[str, Any] = {}
    kinds = kinds_of(runs)
    for kind in kinds:
        mine = [r for r in runs if r["kind"] == kind]
        out[kind] = {"runs": len(mine)}
        for key in ("wall_s", "peak_rss_mib", "rss_open_mib", "to_open_s", "cpu_s"):
            values = [r[key] for r in mine if r[key] is not None]
            out[kind][key] = {
                "median": statistics.median(values) if values else None,
                "min": min(values, default=None),
                "max": max(values, default=None),
            }
    pairs = [("ours", "stock")]
    if BEFORE in kinds:
        pairs += [(BEFORE, "stock"), ("ours", BEFORE)]
    for top, bottom in pairs:
        out[f"ratio_{top}_over_{bottom}"] = {
            key: (
                out[top][key]["median"] / out[bottom][key]["median"]
                if out[top][key]["median"] and out[bottom][key]["median"]
                else None
            )
            for key in ("wall_s", "peak_rss_mib", "rss_open_mib", "to_open_s", "cpu_s")
        }
    return out


def table(summary: dict[str, Any]) -> str:
    rows = (
        ("wall s", "wall_s", ".2f"),
        ("peak RSS MiB", "peak_rss_mib", ".0f"),
        ("  RSS at open MiB", "rss_open_mib", ".0f"),
        ("to spider_opened s", "to_open_s", ".2f"),
        ("CPU s", "cpu_s", ".2f"),
    )
    n = summary["ours"]["runs"]
    kinds = [k for k in (BEFORE, "ours", "stock") if k in summary]
    ratios = [r[len("ratio_"):].replace("_over_", "/") for r in summary if r.startswith("ratio_")]
    lines = [
        f"one-page crawl, median (range) of {n} runs each",
        f"{'':<20}" + "".join(f"{k:>20}" for k in kinds) + "".join(f"{r:>14}" for r in ratios),
    ]
    for name, key, spec in rows:
        cells = []
        for kind in kinds:
            s = summary[kind][key]
            cells.append(
                "" if s["median"] is None else
                f"{s['median']:{spec}} ({s['min']:{spec}}-{s['max']:{spec}})"
            )  # fmt: skip
        shown = []
        for r in ratios:
            ratio = summary["ratio_" + r.replace("/", "_over_")][key]
            shown.append("" if ratio is None else f"{ratio:.2f}")
        lines.append(f"{name:<20}" + "".join(f"{c:>20}" for c in cells)
                     + "".join(f"{s:>14}" for s in shown))  # fmt: skip
    return "\n".join(lines)


def import_times(stderr: str) -> list[tuple[str, int, int]]:
    """``(module, self µs, cumulative µs)`` of each import ``-X importtime`` lists at top level
    (imported by the program itself, not by another module), largest cumulative first."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header line
        name = parts[2].rstrip()
        if name.startswith("  ") or not name.strip():
            continue  # imported by another module: counted in its parent's cumulative
        rows.append((name.strip(), int(parts[0]), int(parts[1])))
    return sorted(rows, key=lambda r: r[2], reverse=True)


def importtime_report(kind: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    raw = args.out / f"startup_importtime_{kind}.raw"
    crawl_once(kind, url, args.timeout, [sys.executable, "-X", "importtime"], keep=raw)
    rows = import_times(raw.read_text(errors="replace"))
    raw.unlink()
    total = sum(r[2] for r in rows)
    lines = [f"{kind}: top-level imports by cumulative time (-X importtime), {total / 1e6:.2f} s"]
    lines += [f"  {cum / 1e3:8.1f} ms  {name}" for name, _, cum in rows[: args.top]]
    (args.out / f"startup_importtime_{kind}.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    return {"total_s": total / 1e6, "top": [{"module": n, "cumulative_ms": c / 1e3}
                                            for n, _, c in rows[: args.top]]}  # fmt: skip


def profile_report(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import pstats

    prof = args.out / "startup_ours.prof"
    crawl_once("ours", url, args.timeout, [sys.executable, "-m", "cProfile", "-o", str(prof)])
    stats = pstats.Stats(str(prof))
    total = max(ct for (_, _, _, ct, _) in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(
        (("/".join(Path(f).parts[-2:]) + f":{ln}({fn})", ct)
         for (f, ln, fn), (_, _, _, ct, _) in stats.stats.items()  # type: ignore[attr-defined]
         if "importlib" not in f),
        key=lambda r: r[1], reverse=True,
    )  # fmt: skip
    top = [{"function": name, "cumulative_s": round(ct, 3)} for name, ct in rows[: args.top * 2]]
    lines = [f"ours: cProfile of the whole process, {total:.2f} s; top cumulative"]
    lines += [f"  {r['cumulative_s']:7.3f} s  {r['function']}" for r in top]
    (args.out / "startup_profile_ours.txt").write_text("\n".join(lines) + "\n")
    prof.unlink()
    print("\n" + "\n".join(lines))
    return top


def compile_project(root: Path = ROOT) -> bool:
    """Write the bytecode of the project's :data:`PACKAGES` under ``root`` to their
    ``__pycache__`` (what a first run does unless ``PYTHONDONTWRITEBYTECODE`` is set; files
    already current are left alone). True when every module compiled."""
    return all(
        compileall.compile_dir(root / name, quiet=2, workers=1)
        for name in PACKAGES
        if (root / name).is_dir()
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = [ROOT] if args.before is None else [ROOT, args.before]
    if not args.no_compile and not all([compile_project(tree) for tree in trees]):
        print("warning: some project modules did not compile; they run from source", flush=True)
    kinds = KINDS if args.before is None else ("stock", BEFORE, "ours")
    with ScriptedWeb() as web:
        site = web[0].serve({"/robots.txt": ROBOTS, "/": html("Start-up", PAGE_TEXT)})
        url = site.url + "/"
        runs: list[dict[str, Any]] = []
        for i in range(args.runs):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                run = crawl_once(kind, url, args.timeout, tree=args.before)
                runs.append(run)
                print(f"  {kind:<6} wall {run['wall_s']:.2f} s  peak RSS {run['peak_rss_mib']:.0f}"
                      f" MiB  to open {run['to_open_s']} s", flush=True)  # fmt: skip
        summary = summarize(runs)
        print("\n" + table(summary))
        report: dict[str, Any] = {"runs": runs, "summary": summary, "argv": sys.argv[1:],
                                  "bytecode_compiled": not args.no_compile,
                                  "before_tree": str(args.before) if args.before else None}
        if args.importtime:
            report["importtime"] = {k: importtime_report(k, url, args) for k in ("ours", "stock")}
        if args.profile:
            report["profile_ours"] = profile_report(url, args)
    out = args.out / "startup.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Side by side in one process: each variant measured in turn, the order alternating run by run
(so neither always runs warm or cold), the median of each kept. Used by the benches that compare
the code before a change with the code now (``bench.cpucuts``, ``bench.pagecost``)."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path


def alternating_medians(variants: dict[str, Callable[[], float]], runs: int) -> dict[str, float]:
    """``{name: median of runs}``: each of ``variants`` (a call that measures one run and
    returns its figure) called ``runs`` times, in the given order on odd runs, reversed on even
    ones."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(runs):
        for name in list(variants)[:: 1 if i % 2 else -1]:
            times[name].append(variants[name]())
    return {name: statistics.median(values) for name, values in times.items()}


def parse_args(prog: str, doc: str | None, pages: int, runs: int,
               argv: list[str] | None = None) -> argparse.Namespace:
    """``--pages N --runs N`` (defaults ``pages``, ``runs``; each at least 1)."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n")[0])
    parser.add_argument("--pages", type=int, default=pages, help=f"pages a run ({pages})")
    parser.add_argument("--runs", type=int, default=runs, help=f"runs of each variant ({runs})")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.runs < 1:
        parser.error("--pages and --runs must be >= 1")
    return args


def report(title: str, rows: dict[str, dict[str, float]], args: argparse.Namespace,
           results: Path) -> None:
    """Print ``rows`` (``{name: {"before": x, "now": y}}``) as a table headed ``title`` with the
    ratio, and write them to ``results`` (JSON, with ``--pages`` and ``--runs``)."""
    print(f"{title:<44}{'before':>10}{'now':>10}{'now/before':>12}")
    for name, row in rows.items():
        print(f"{name:<44}{row['before']:>10.1f}{row['now']:>10.1f}"
              f"{row['now'] / row['before']:>11.2f}x")  # fmt: skip
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"pages": args.pages, "runs": args.runs, "rows": rows},
                                  indent=2) + "\n")  # fmt: skip

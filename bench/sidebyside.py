"""Side by side in one process: each variant measured in turn, the order alternating run by run
(so neither always runs warm or cold), the median of each kept. Used by the benches that compare
the code before a change with the code now (``bench.cpucuts``, ``bench.pagecost``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def alternating_medians(variants: dict[str, Callable[[], float]], runs: int) -> dict[str, float]:
    """``{name: median of runs}``: each of ``variants`` (a call that measures one run and
    returns its figure) called ``runs`` times, in the given order on odd runs, reversed on even
    ones."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(runs):
        for name in list(variants)[:: 1 if i % 2 else -1]:
            times[name].append(variants[name]())
    return {name: statistics.median(values) for name, values in times.items()}

"""A Scrapy extension for ``bench.scale --mem-probe``: where a crawl's memory goes, over time.

:class:`MemProbe` is :class:`bench.probe.CrawlProbe` (its stats unchanged) that also samples,
every ``MEMPROBE_SECONDS`` (5) and at open and close, one JSON line to ``MEMPROBE_FILE``:

* the process: ``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile`` (``/proc/self/status``);
* glibc's allocator (``mallinfo2``, every arena): ``arena`` (heap bytes from ``brk``/arenas),
  ``mmap`` (blocks mapped on their own: numpy arrays, big buffers), ``inuse`` and ``free``
  (bytes held but not in use: the allocator's high-water mark);
* Python's small-object allocator (``sys._debugmallocstats``): the bytes of its arenas and of the
  blocks in use;
* the big structures, each with its entries and estimated bytes: Scrapy's scheduler (memory and
  disk queues), the downloader's and scraper's in-flight sets, the ``JOBDIR`` pending map, the
  journal's resume map, the spider's ``_requesting`` map and link memo, the local content index
  (its ``nbytes``), the Bloom filter's bits.

With ``MEMPROBE_TRACEMALLOC`` (frames, 0: off) tracemalloc starts at ``spider_opened`` and
each sample also holds the top 25 lines (and top 15 files) of what was allocated since then and
is still held: the Python heap's growth by source line. Tracing slows the crawl about 2x; the
other samples cost a few milliseconds each. For diagnosis only: the figures name private
attributes of Scrapy and of our components and may change with either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import sys
import tempfile
import time
import tracemalloc
from typing import TYPE_CHECKING, Any

from twisted.internet import task

from bench.probe import CrawlProbe

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def malloc_info() -> dict[str, int]:
    """glibc's ``mallinfo2`` (all arenas) in bytes; {} where unavailable."""
    if _LIBC is None:
        return {}
    m = _LIBC.mallinfo2()
    return {"arena": m.arena, "mmap": m.hblkhd, "inuse": m.uordblks, "free": m.fordblks}


def proc_status() -> dict[str, int]:
    """``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile`` of this process in bytes."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


_ARENAS = re.compile(rb"# arenas allocated current\s*=\s*([\d,]+)")
_ARENA_SIZE = re.compile(rb"(\d[\d,]*) arenas \* (\d[\d,]*) bytes/arena")
_BLOCKS = re.compile(rb"# bytes in allocated blocks\s*=\s*([\d,]+)")


def pymalloc_info() -> dict[str, Any]:
    """Python's small-object allocator: bytes of its arenas and of the blocks in use (parsed
    from ``sys._debugmallocstats``, which writes to fd 2)."""
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()  # type: ignore[attr-defined]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read()
    out: dict[str, Any] = {}
    if m := _ARENA_SIZE.search(text):
        out["arenas"] = int(m.group(1).replace(b",", b"")) * int(m.group(2).replace(b",", b""))
    elif m := _ARENAS.search(text):
        out["arenas"] = int(m.group(1).replace(b",", b"")) * (1 << 20)
    if m := _BLOCKS.search(text):
        out["blocks"] = int(m.group(1).replace(b",", b""))
    if not out:
        out["unparsed"] = text[:200].decode(errors="replace")
    return out


def dict_bytes(d: Any) -> int:
    """A dict's table plus its keys and values (each counted once, shallow)."""
    if not isinstance(d, dict):
        return 0
    return sys.getsizeof(d) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in d.items())


def structures(crawler: Crawler) -> dict[str, Any]:
    """Entries and estimated bytes of the crawl's big structures (module docstring)."""
    out: dict[str, Any] = {}
    engine = crawler.engine
    scheduler = getattr(getattr(engine, "_slot", None), "scheduler", None)
    if scheduler is not None:
        mqs, dqs = getattr(scheduler, "mqs", None), getattr(scheduler, "dqs", None)
        out["scheduler_mem"] = len(mqs) if mqs is not None else 0
        out["scheduler_disk"] = len(dqs) if dqs is not None else 0
        out["scheduler_owed"] = len(getattr(scheduler, "_owed", ()))
        df = getattr(scheduler, "df", None)
        journal = getattr(df, "journal", None)
        state = getattr(journal, "jobstate", None)
        if state is not None:
            held = state.pending
            out["pending"] = [len(held), held.nbytes + dict_bytes(held._recent)
                              if hasattr(held, "nbytes") else dict_bytes(held)]
        resume = getattr(journal, "_resume", None)
        if isinstance(resume, dict):
            out["journal_resume"] = [len(resume), dict_bytes(resume)]
        bits = getattr(getattr(df, "seen", None), "bits", None)
        if isinstance(bits, int):
            out["seen_bytes"] = bits // 8
    if engine is not None:
        downloader = getattr(engine, "downloader", None)
        if downloader is not None:
            out["downloader_active"] = len(downloader.active)
            out["downloader_slots"] = len(downloader.slots)
            out["downloader_queued"] = sum(len(s.queue) for s in downloader.slots.values())
        slot = getattr(getattr(engine, "scraper", None), "slot", None)
        if slot is not None:
            out["scraper"] = [len(slot.queue), len(slot.active), slot.active_size]
    spider = getattr(engine, "spider", None)
    requesting = getattr(spider, "_requesting", None)
    if isinstance(requesting, dict):
        out["requesting"] = [len(requesting), dict_bytes(requesting)]
    decider = getattr(spider, "decider", None)
    index = getattr(decider, "index", None) or getattr(decider, "backend", None)
    size = getattr(index, "nbytes", None)
    if index is not None and size is not None:
        out["content_index"] = [len(index), size() if callable(size) else size]
    return out


def top_traced(snapshot: tracemalloc.Snapshot, key: str, n: int) -> list[list[Any]]:
    """The ``n`` largest ``key`` groups of ``snapshot``: [where, KiB, count]."""
    rows = []
    for stat in snapshot.statistics(key)[:n]:
        frame = stat.traceback[0]
        where = frame.filename if key == "filename" else f"{frame.filename}:{frame.lineno}"
        where = where.split("site-packages/")[-1].split("/work/main/")[-1]
        rows.append([where, round(stat.size / 1024), stat.count])
    return rows


class MemProbe(CrawlProbe):
    """The crawl probe plus a memory timeline (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self.path = settings.get("MEMPROBE_FILE") or ""
        self.every = settings.getfloat("MEMPROBE_SECONDS", 5.0)
        self.frames = settings.getint("MEMPROBE_TRACEMALLOC", 0)
        self.responses = 0
        self.t0 = time.monotonic()
        self._loop: task.LoopingCall | None = None

    def opened(self, spider: Any) -> None:
        super().opened(spider)
        if self.frames:
            tracemalloc.start(self.frames)
        self.sample("open")
        self._loop = task.LoopingCall(self.sample)
        self._loop.start(self.every, now=False)

    def response(self, **kwargs: Any) -> None:
        super().response(**kwargs)
        self.responses += 1

    def closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self.sample("close")
        super().closed(spider, reason)

    def sample(self, label: str = "") -> None:
        if not self.path:
            return
        record: dict[str, Any] = {
            "t": round(time.monotonic() - self.t0, 2), "label": label,
            "responses": self.responses, **proc_status(),
            "malloc": malloc_info(), "pymalloc": pymalloc_info(),
            **structures(self.crawler),
        }  # fmt: skip
        if self.frames and tracemalloc.is_tracing():
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)])
            record["traced"] = tracemalloc.get_traced_memory()[0]
            record["top_lines"] = top_traced(snap, "lineno", 25)
            record["top_files"] = top_traced(snap, "filename", 15)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def read_timeline(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The samples of a ``MEMPROBE_FILE``."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the memory went, from a timeline: the samples at open, at the discovery burst
    (the most requests owed in the journal's pending map), at the end of the crawl (the last
    sample before the last response) and the peak of the close (the settle step, the final
    snapshot), each structure in MiB, and its growth per page from open to the end of the
    crawl (bytes per page fetched)."""
    if not rows:
        return {}
    last = rows[-1]
    pages = max(int(last["responses"]), 1)
    crawling = [r for r in rows if r["responses"] < last["responses"]] or rows[:1]
    opened, end = rows[0], crawling[-1]
    burst = max(rows, key=lambda r: r.get("pending", [0])[0])

    def figures(r: dict[str, Any]) -> dict[str, float]:
        m, p = r.get("malloc", {}), r.get("pymalloc", {})
        return {
            "rss": r.get("VmRSS", 0), "anon": r.get("RssAnon", 0), "file": r.get("RssFile", 0),
            "malloc_inuse": m.get("inuse", 0), "malloc_free": m.get("free", 0),
            "malloc_mmap": m.get("mmap", 0), "pymalloc_arenas": p.get("arenas", 0),
            "pymalloc_used": p.get("blocks", 0), "seen_bits": r.get("seen_bytes", 0),
            "content_index": r.get("content_index", [0, 0])[1],
            "pending_map": r.get("pending", [0, 0])[1],
        }  # fmt: skip

    at = {"open": figures(opened), "burst": figures(burst), "end": figures(end)}
    growth = {k: (at["end"][k] - at["open"][k]) / pages for k in at["open"]}
    owed = burst.get("pending", [0, 0])[0]
    return {
        "pages": pages,
        "mib": {phase: {k: round(v / 2**20, 1) for k, v in f.items()} for phase, f in at.items()},
        "bytes_per_page": {k: round(v) for k, v in growth.items()},
        "burst_owed": owed, "burst_responses": burst["responses"],
        "pending_bytes_per_owed": round(burst["pending"][1] / owed) if owed else None,
        "content_index_bytes_per_row": round(end["content_index"][1] / end["content_index"][0])
        if end.get("content_index") and end["content_index"][0] else None,
        "close_peak_mib": round(max(last.get("VmHWM", 0), *(r.get("VmRSS", 0) for r in rows))
                                / 2**20, 1),
        "close_spike_mib": round((last.get("VmHWM", 0) - end.get("VmRSS", 0)) / 2**20, 1),
    }  # fmt: skip


def summary_table(name: str, s: dict[str, Any]) -> str:
    """``summarize``'s figures as text: MiB at open, burst, end of crawl; bytes/page grown."""
    lines = [f"memory of {name} ({s['pages']} pages; burst: {s['burst_owed']} owed at "
             f"{s['burst_responses']} pages, {s['pending_bytes_per_owed']} B per owed URL; "
             f"content index {s['content_index_bytes_per_row']} B/row)",
             f"{'':<18}{'open MiB':>10}{'burst MiB':>10}{'end MiB':>10}{'B/page':>9}"]
    for key in s["bytes_per_page"]:
        m = s["mib"]
        lines.append(f"{key:<18}{m['open'][key]:>10}{m['burst'][key]:>10}{m['end'][key]:>10}"
                     f"{s['bytes_per_page'][key]:>9}")
    lines.append(f"close: peak {s['close_peak_mib']} MiB, {s['close_spike_mib']} MiB above the "
                 "end of the crawl (the settle step and the final snapshot)")
    return "\n".join(lines)

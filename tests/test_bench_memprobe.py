"""``bench.memprobe``: the allocator figures it reads from this process, and the summary of a
memory timeline (open, discovery burst, end of the crawl, close)."""

from __future__ import annotations

from bench.memprobe import malloc_info, proc_status, pymalloc_info, summarize, summary_table


def test_reads_this_processs_allocators() -> None:
    status = proc_status()
    assert status["VmRSS"] > 0 and status["VmHWM"] >= status["VmRSS"] - 2**20
    py = pymalloc_info()
    assert py["arenas"] >= py["blocks"] > 0  # pymalloc's arenas hold its blocks
    libc = malloc_info()
    assert libc == {} or libc["inuse"] > 0


def sample(t: float, responses: int, rss_mib: int, owed: int, rows: int, hwm: int = 0,
           label: str = "") -> dict:  # fmt: skip
    mib = 2**20
    return {"t": t, "label": label, "responses": responses, "VmRSS": rss_mib * mib,
            "VmHWM": (hwm or rss_mib) * mib, "RssAnon": rss_mib * mib, "RssFile": 0,
            "malloc": {"inuse": rss_mib * mib // 2, "free": 0, "mmap": 0},
            "pymalloc": {"arenas": rss_mib * mib // 2, "blocks": rss_mib * mib // 2},
            "pending": [owed, owed * 40], "content_index": [rows, rows * 200]}  # fmt: skip


def test_summary_finds_the_burst_the_end_of_the_crawl_and_the_close_spike() -> None:
    rows = [sample(0, 0, 100, 0, 0, label="open"), sample(5, 100, 150, 9000, 100),
            sample(10, 5000, 160, 5000, 5000), sample(15, 10_000, 170, 0, 10_000),
            sample(16, 10_000, 175, 0, 10_000, hwm=220, label="close")]  # fmt: skip
    s = summarize(rows)
    assert s["burst_owed"] == 9000 and s["burst_responses"] == 100
    assert s["pending_bytes_per_owed"] == 40 and s["content_index_bytes_per_row"] == 200
    assert s["mib"]["end"]["rss"] == 160  # the last sample before the last response
    assert s["bytes_per_page"]["rss"] == round(60 * 2**20 / 10_000)
    assert s["close_peak_mib"] == 220 and s["close_spike_mib"] == 60
    assert "close: peak 220" in summary_table("test", s)

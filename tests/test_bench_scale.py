"""``bench.scale`` end to end on a small web: real site servers on loopback hosts, real crawls
(ours killed with SIGKILL at 30% and resumed on the same JOBDIR and database, owing more than
one batch of requests), the JSON and the plot it writes; the resume probe's JOBDIR."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale import CountingServer, extrapolate, parse_args, svg_plot
from crawler.scheduler import RESUME_BATCH
from crawler.sitegen import link_heavy_site

ROOT = Path(__file__).resolve().parent.parent
PAGES = 2400  # killed at 30%: the resume owes more than one batch


@pytest.mark.slow
def test_small_scale_run_kills_resumes_and_loses_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--sizes", str(PAGES), "--hosts", "2", "--links",
         "30", "--kill-at", "0.3", "--stock-up-to", "0", "--no-pin", "--results", str(tmp_path),
         # batches of 100: the killed run has committed several by 30% of the site, as this
         # scenario needs (with the default 500 it may have committed none yet)
         "-s", "STORAGE_BATCH_SIZE=100"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "scale.json").read_text())
    runs = {r["kind"]: r for r in report["runs"]}
    assert set(runs) == {"ours", "ours resumed"}
    clean, resumed = runs["ours"], runs["ours resumed"]
    site_pages = PAGES + 2  # and each host's index page
    for run in (clean, resumed):
        assert run["site_pages"] == site_pages
        assert run["missing"] == 0
        assert run["finish_reason"] == "finished"
        assert run["pages_per_s"] > 0 and run["cpu_ms_per_page"] > 0
        assert 50 < run["peak_rss_mib"] < 2048
        assert run["db_bytes_per_page"] > 500  # a document row with its text and indexes
        assert run["jobdir_bytes_per_page"] > 0
        assert run["stored"]["documents"] + run["stored"]["dropped"] == site_pages
    assert clean["fetched_twice"] == 0
    # killed about half way: some pages fetched before the kill, the rest by the resumed run
    killed = resumed["killed"]
    assert 0 < killed["unique_pages"] < site_pages
    assert resumed["owed_at_resume"] > RESUME_BATCH  # re-scheduled in several batches
    assert resumed["stored"]["documents"] == resumed["stored"]["distinct"]  # each stored once
    assert len(resumed["stored"]["by_crawl"]) == 2  # the killed run and the resume
    # refetched only what was fetched before the kill and not yet stored
    assert resumed["fetched_twice"] <= resumed["refetch_allowed"]
    assert resumed["nothing_lost"] is True
    assert 0 < resumed["resume_s"] < 60
    assert report["sizes"][str(PAGES)]["nothing_lost"] is True
    assert (tmp_path / "scale.svg").read_text().startswith("<svg")


def test_resume_probe_resumes_what_its_jobdir_owes(tmp_path: Path) -> None:
    """The probe's JOBDIR is one our crawl resumes as it would after a kill: it replays every
    owed request (the count it logs) and fetches a page."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--resume-probe", "1500", "--hosts", "2",
         "--no-pin", "--results", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = json.loads((tmp_path / "scale_resume.json").read_text())["runs"]
    assert run["owed"] == run["owed_logged"] == 1500
    assert 0 < run["resume_s"] < 60
    assert run["jobdir_files"]["dedup/bloom.snapshot"] > 0


def test_counting_server_counts_pages_by_any_spelling() -> None:
    server = CountingServer(link_heavy_site(10, 3), "127.0.0.1", "127.0.0.1")
    for target in ("/", "/p/0", "/p/0#s", "/p/0?utm_source=feed", "/p/9", "/p/10", "/p/01",
                   "/robots.txt"):  # fmt: skip
        server.record(target)
    assert server.total == 8
    assert list(server.counts) == [1, 3] + [0] * 8 + [1]
    server.reset_hits()
    assert server.total == 0 and not any(server.counts)


def test_sizes_are_parsed_and_bad_ones_named(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--sizes", "1e5,1e4,1e4", "--stock-up-to", "1e4"])
    assert args.sizes == [10_000, 100_000] and args.stock_up_to == 10_000
    with pytest.raises(SystemExit):
        parse_args(["--sizes", "1e4,lots"])
    assert "'lots' is not a number of pages" in capsys.readouterr().err


def test_extrapolation_is_linear_per_page_from_the_two_largest_sizes() -> None:
    sizes = {
        10_000: {"peak_rss_mib": 200.0, "resume_s": 2.0, "pages_per_s": 300.0,
                 "cpu_ms_per_page": 3.0},
        100_000: {"peak_rss_mib": 290.0, "resume_s": 5.0, "pages_per_s": 290.0,
                  "cpu_ms_per_page": 3.1, "stock": {"pages_per_s": 50.0,
                                                    "cpu_ms_per_page": 10.0,
                                                    "peak_rss_mib": 100.0}},
    }  # fmt: skip
    out = extrapolate(sizes)
    assert out is not None
    assert out["peak_rss_mib"] == pytest.approx(290 + 90 / 90_000 * 900_000)
    assert out["resume_s"] == pytest.approx(5 + 3 / 90_000 * 900_000)
    assert extrapolate({10_000: sizes[10_000]}) is None
    svg = svg_plot(sizes)
    assert svg.count("<polyline") == 3 + 3  # ours in each panel; stock (one point) too

"""Issue 15 items 5 and 6: hostile input to ``scrapy crawl`` stops it with one short line.

* a bad seed line is echoed to at most 200 characters, marked when cut (a 20 MB line once
  filled the terminal), its control characters escaped;
* a seed longer than ``URLLENGTH_LIMIT`` is refused before the crawl, naming its line (it was
  accepted, then dropped silently as a trap);
* Scrapy's own settings users mistype (``DOWNLOAD_MAXSIZE``, ``CLOSESPIDER_*``,
  ``CONCURRENT_REQUESTS``..., a ``JOBDIR`` or ``STATS_FILE`` that cannot be written) are checked
  with the project's: exit 2, one line, no traceback (``-s DOWNLOAD_MAXSIZE=-1`` crawled and
  stored nothing; ``-s CLOSESPIDER_TIMEOUT=abc`` gave a traceback).

The crawl-level tests run the real ``scrapy crawl web`` in a subprocess; the seeds point at
127.0.0.1:9, never reached: the pre-flight check must stop the crawl first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.commands.preflight import check_settings
from crawler.config import SettingError
from crawler.urls.seeds import SHOWN_MAX, SeedError, parse_seeds
from tests.conftest import CrawlRun, run_crawl

UNREACHED = "http://127.0.0.1:9"


def refused(run: CrawlRun) -> str:
    """The one line of a crawl refused by the pre-flight check (exit 2, no traceback)."""
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    return lines[0]


# --- seed lines --------------------------------------------------------------------------------


def test_a_huge_bad_seed_line_is_echoed_cut(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    huge = "ftp://" + "x" * 20_000_000
    seeds.write_text(f"{UNREACHED}/\n{huge}\n", encoding="utf-8")
    run = run_crawl(tmp_path / "run", seeds=seeds, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr) < 1000, len(run.stderr)
    # refused unread (64 KiB at a time), so its size is told in bytes, its line break not counted
    assert f"line 2: {huge[:SHOWN_MAX]!r}… (cut, {len(huge)} bytes in all): " in run.stderr


def test_a_seed_line_with_control_characters_is_echoed_escaped(tmp_path: Path) -> None:
    run = run_crawl(tmp_path / "run", urls=["ftp://x\x1b]0;pwned\x07\x9b2J"], timeout=120)
    assert run.returncode == 2
    assert "\x1b" not in run.stderr and "\x9b" not in run.stderr
    assert "'ftp://x\\x1b]0;pwned\\x07\\x9b2J'" in run.stderr


def test_short_lines_are_echoed_whole() -> None:
    line = "ftp://" + "y" * (SHOWN_MAX - 6)
    with pytest.raises(SeedError) as info:
        parse_seeds([line])
    assert f"line 1: {line!r}: " in str(info.value) and "cut" not in str(info.value)


# --- URLLENGTH_LIMIT -----------------------------------------------------------------------------


def test_a_seed_over_the_url_length_limit_is_refused_with_its_line(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    long_seed = f"{UNREACHED}/" + "p" * 80
    seeds.write_text(f"{UNREACHED}/\n# a comment\n{long_seed}\n", encoding="utf-8")
    run = run_crawl(tmp_path / "run", seeds=seeds, timeout=120, settings={"URLLENGTH_LIMIT": 60})
    assert run.returncode == 2, run.stderr[-2000:]
    assert (f"line 3: {long_seed!r}: {len(long_seed)} characters, over URLLENGTH_LIMIT=60; "
            "shorten it or raise the limit") in run.stderr
    assert "line 1" not in run.stderr


def test_the_fetched_form_counts_too() -> None:
    """A non-ASCII path is fetched percent-escaped: 10 characters as written, 64 as fetched."""
    seed = f"{UNREACHED}/" + "é" * 10
    assert parse_seeds([seed], max_length=0).urls == [seed]
    with pytest.raises(SeedError, match=r"line 1: .*: \d+ characters, over URLLENGTH_LIMIT=40"):
        parse_seeds([seed], max_length=40)


def test_a_seed_at_the_limit_passes() -> None:
    seed = f"{UNREACHED}/" + "a" * 30
    assert parse_seeds([seed], max_length=len(seed)).urls == [seed]


# --- Scrapy's own settings ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [("DOWNLOAD_MAXSIZE", "-1"),
                                             ("CLOSESPIDER_TIMEOUT", "abc")])
def test_a_mistyped_scrapy_setting_stops_the_crawl_with_one_line(
        tmp_path: Path, name: str, value: str) -> None:
    run = run_crawl(tmp_path / "run", urls=[UNREACHED + "/"], timeout=120,
                    settings={name: value})
    assert refused(run).startswith(f"error: setting {name}={value!r} is invalid: allowed ")


def test_a_jobdir_that_cannot_be_a_directory_stops_the_crawl(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file")
    run = run_crawl(tmp_path / "run", urls=[UNREACHED + "/"], timeout=120,
                    settings={"JOBDIR": str(blocker / "job")})
    assert refused(run).startswith(f"error: setting JOBDIR='{blocker}/job/dedup' is invalid")


def test_a_stats_file_that_is_a_directory_stops_the_crawl(tmp_path: Path) -> None:
    run = run_crawl(tmp_path / "run", urls=[UNREACHED + "/"], timeout=120,
                    settings={"STATS_FILE": str(tmp_path)})
    assert refused(run).startswith(f"error: setting STATS_FILE='{tmp_path}' is invalid")


BAD_SCRAPY = [
    ("DOWNLOAD_WARNSIZE", "lots"), ("CLOSESPIDER_ITEMCOUNT", "1.5"),
    ("CLOSESPIDER_PAGECOUNT", -1), ("CLOSESPIDER_ERRORCOUNT", "x"),
    ("CLOSESPIDER_TIMEOUT", -5), ("CONCURRENT_REQUESTS", 0),
    ("CONCURRENT_REQUESTS_PER_DOMAIN", "0"), ("DOWNLOAD_DELAY", -0.5), ("DOWNLOAD_TIMEOUT", 0),
    ("RETRY_TIMES", -1), ("DEPTH_LIMIT", "deep"), ("REDIRECT_MAX_TIMES", "-2"),
]


@pytest.mark.parametrize(("name", "value"), BAD_SCRAPY)
def test_each_scrapy_setting_is_checked(name: str, value: Any) -> None:
    with pytest.raises(SettingError) as info:
        check_settings(Settings({name: value}))
    assert info.value.name == name


@pytest.mark.parametrize(("name", "value"), [
    ("DOWNLOAD_MAXSIZE", 0), ("CLOSESPIDER_TIMEOUT", "0"), ("DOWNLOAD_DELAY", 0),
    ("DOWNLOAD_TIMEOUT", "0.5"), ("DEPTH_LIMIT", "3"), ("JOBDIR", "TMP/new/job"),
    ("STATS_FILE", "TMP/stats.json"),
])
def test_usable_values_pass(tmp_path: Path, name: str, value: Any) -> None:
    if isinstance(value, str) and value.startswith("TMP/"):
        value = str(tmp_path / value[4:])
    check_settings(Settings({name: value}))
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_a_huge_setting_value_is_echoed_cut() -> None:
    with pytest.raises(SettingError) as info:
        check_settings(Settings({"DOWNLOAD_MAXSIZE": "9" * 100_000 + "x"}))
    assert len(str(info.value)) < 400 and "(cut, 100003 characters in all)" in str(info.value)

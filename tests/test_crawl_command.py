"""The checks that must stop a crawl before it starts, run as a user runs them."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT, crawl_command


def scrapy(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        crawl_command(list(args)), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_bot_name_from_project_settings():
    result = scrapy("settings", "--get", "BOT_NAME")
    assert result.returncode == 0
    assert result.stdout.strip() == "dedup-crawler"


def test_bad_seed_lines_are_listed_and_nothing_is_crawled(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("https://ok.example/\nftp://x.example/\n# c\nhttp://\n")
    db = tmp_path / "crawl.db"
    result = scrapy("crawl", "web", "-a", f"seeds={seeds}", "-s", f"STORAGE_URL=sqlite:///{db}")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: 2 invalid seed line(s) in {seeds}:",
        "  line 2: 'ftp://x.example/': scheme 'ftp' is not http or https",
        "  line 4: 'http://': no host",
    ]  # the message alone: no start-up banner of a crawler that never starts
    assert not db.exists()


def test_missing_seed_file(tmp_path):
    result = scrapy("crawl", "web", "-a", f"seeds={tmp_path / 'nope.txt'}")
    assert result.returncode == 2
    assert result.stderr == (f"error: seeds file {tmp_path / 'nope.txt'}: file not found; "
                             "give -a seeds=PATH to an existing seed list\n")  # fmt: skip


def test_no_seeds_at_all():
    result = scrapy("crawl", "web")
    assert result.returncode == 2
    assert result.stderr == "error: no seeds given: use -a seeds=FILE or -a urls=URL1,URL2\n"


@pytest.mark.slow
def test_setting_out_of_range_names_setting_value_and_range(tmp_path):
    for name, value in [
        ("BLOOM_ERROR_RATE", "1.5"),
        ("BLOOM_CAPACITY", "0"),
        ("SIMHASH_MAX_DISTANCE", "40"),
        ("BLOOM_ON_FULL", "explode"),
        ("DEDUP_BACKEND", "mongo"),
    ]:
        result = scrapy(
            "crawl", "web", "-a", "urls=http://localhost:1/",
            "-s", f"{name}={value}", "-s", f"STORAGE_URL=sqlite:///{tmp_path}/c.db",
        )
        assert result.returncode == 2, (name, result.stderr)
        assert name in result.stderr and value in result.stderr, result.stderr
        assert "allowed" in result.stderr
        assert "Traceback" not in result.stderr


def test_unreachable_database_is_one_line_with_password_masked(tmp_path):
    url = "postgresql+psycopg://crawler:s3cret@127.0.0.1:1/crawl"
    result = scrapy("crawl", "web", "-a", "urls=http://localhost:1/", "-s", f"STORAGE_URL={url}")
    assert result.returncode == 1
    assert "s3cret" not in result.stderr
    assert "127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1


def test_sqlite_in_missing_directory(tmp_path):
    url = f"sqlite:///{tmp_path}/no/such/dir/crawl.db"
    result = scrapy("crawl", "web", "-a", "urls=http://localhost:1/", "-s", f"STORAGE_URL={url}")
    assert result.returncode == 1
    assert "no/such/dir" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_redis_stops_the_distributed_crawl_before_it_starts(tmp_path):
    result = scrapy(
        "crawl", "web", "-a", "urls=http://localhost:1/",
        "-s", "DEDUP_BACKEND=redis", "-s", "REDIS_URL=redis://:hunter2@127.0.0.1:1/0",
        "-s", f"STORAGE_URL=sqlite:///{tmp_path}/c.db",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    assert "127.0.0.1:1" in result.stderr
    assert "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr
    assert "Spider opened" not in result.stderr

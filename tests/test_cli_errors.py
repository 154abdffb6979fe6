"""Every command answers bad input with one line naming the input, never a traceback."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT, crawl_command


def scrapy(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(crawl_command(list(args)), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(("args", "code", "message"), [
    (["crawl", "webx", "-a", "urls=http://127.0.0.1:1/"], 2,
     "error: no spider named 'webx'; this project has: web (scrapy list)"),
    (["parse", "--spider=webx", "http://127.0.0.1:1/"], 2,
     "error: no spider named 'webx'; this project has: web (scrapy list)"),
    (["parse", "--spider=web", "ftp://127.0.0.1/x"], 2,
     "  line 1: 'ftp://127.0.0.1/x': scheme 'ftp' is not http or https"),
    (["parse", "--spider=web", "-s", "SIMHASH_MAX_DISTANC=2", "http://127.0.0.1:1/"], 2,
     "error: unknown setting SIMHASH_MAX_DISTANC='2': did you mean SIMHASH_MAX_DISTANCE?"),
    (["crawl", "web", "-a", "urls=http://127.0.0.1:1/", "-s", "JOBDIR_SNAPSHOT_RECORDS=0"], 2,
     "error: setting JOBDIR_SNAPSHOT_RECORDS='0' is invalid: allowed an integer >= 1"),
    (["demo", "-s", "BLOOM_ERROR_RATE=2"], 2,
     "error: setting BLOOM_ERROR_RATE='2' is invalid: allowed a number in (0, 1)"),
    (["dropped", "--db", "mysql://u@127.0.0.1/x"], 1,
     "error: cannot open database mysql://u@127.0.0.1/x: its driver 'MySQLdb' is not "
     "installed; a crawl database is sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"),
    (["dedupreport", "--db", "nosuch://x"], 1,
     "error: cannot open database nosuch://x: Can't load plugin: sqlalchemy.dialects:nosuch; "
     "a crawl database is sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"),
])  # fmt: skip
def test_bad_input_is_one_line(tmp_path, args, code, message):
    db = tmp_path / "c.db"
    if args[0] in ("crawl", "parse", "demo"):
        args = [*args, "-s", f"STORAGE_URL=sqlite:///{db}"]
    result = scrapy(*args)
    assert result.returncode == code, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.rstrip("\n").splitlines()[-1] == message
    assert not db.exists()  # nothing was created for a command that could not start


def test_parse_uses_its_url_as_the_seed(demo_server, tmp_path):
    db = tmp_path / "c.db"
    result = scrapy("parse", "--spider=web", "-s", f"STORAGE_URL=sqlite:///{db}",
                    "-s", "DROPPED_LOG=" + str(tmp_path / "d.jsonl"), demo_server.base_url + "/")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    # the page was parsed: its item and the requests for its links are printed
    assert "Scraped Items" in result.stdout
    assert demo_server.base_url + "/" in result.stdout
    assert "# Requests" in result.stdout

"""``crawler.commands.console.echo_to_log_file``: a failing command's last lines in the crawl's
``LOG_FILE`` (scrapyd shows that file and nothing else of a job). Real files, Scrapy's real
settings and root handler; ``tests/test_scrapyd.py`` runs it under a real scrapyd."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

from scrapy.settings import Settings
from scrapy.utils import log as scrapy_log
from scrapy.utils.log import get_scrapy_root_handler, install_scrapy_root_handler

from crawler.commands.console import echo_to_log_file

ROOT = Path(__file__).resolve().parent.parent
#: A record in Scrapy's default ``LOG_FORMAT`` and ``LOG_DATEFORMAT``.
RECORD = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[crawler\.commands\.preflight\] ERROR: "


def test_nothing_without_a_log_file(tmp_path, capsys) -> None:
    echo_to_log_file(Settings(), "crawler.commands.preflight", "error: x")
    assert capsys.readouterr() == ("", "")
    assert list(tmp_path.iterdir()) == []


def test_the_file_is_created_in_scrapys_format(tmp_path) -> None:
    log = tmp_path / "job.log"
    echo_to_log_file(Settings({"LOG_FILE": str(log)}), "crawler.commands.preflight", "error: a é",
                     "b")
    assert re.fullmatch(f"{RECORD}error: a é\n{RECORD}b\n", log.read_text(encoding="utf-8"))


def test_appended_or_truncated_as_scrapy_would(tmp_path) -> None:
    log = tmp_path / "job.log"
    log.write_text("an earlier run\n")
    echo_to_log_file(Settings({"LOG_FILE": str(log)}), "crawler.commands.preflight", "one")
    assert log.read_text().startswith("an earlier run\n")
    settings = Settings({"LOG_FILE": str(log), "LOG_FILE_APPEND": "False",
                         "LOG_FORMAT": "%(levelname)s %(message)s"})  # fmt: skip
    echo_to_log_file(settings, "crawler.commands.preflight", "two")
    assert log.read_text() == "ERROR two\n"


def test_a_log_file_that_cannot_be_written_costs_one_line(tmp_path, capsys) -> None:
    log = tmp_path / "missing" / "job.log"
    echo_to_log_file(Settings({"LOG_FILE": str(log)}), "crawler.commands.preflight", "error: x")
    assert capsys.readouterr().err == (f"note: cannot write the error to LOG_FILE {log}: "
                                       "No such file or directory\n")  # fmt: skip
    assert not log.parent.exists()


def test_through_scrapys_handler_whatever_the_level(tmp_path) -> None:
    """Once Scrapy has set up logging, the lines go through its handler of the file (its
    stream stays open, its level does not hide them)."""
    log = tmp_path / "job.log"
    settings = Settings({"LOG_FILE": str(log), "LOG_LEVEL": "CRITICAL"})
    root_level = logging.root.level  # Scrapy sets it to NOTSET: put back for later tests
    install_scrapy_root_handler(settings)
    handler = get_scrapy_root_handler()
    try:
        logging.getLogger("scrapy.test").error("hidden by LOG_LEVEL")
        echo_to_log_file(settings, "crawler.commands.preflight", "error: shown")
        logging.getLogger("scrapy.test").critical("after")
    finally:
        assert handler is not None
        # Scrapy's module keeps the handler too, and every later Crawler() re-installs one
        # while it is set (root level NOTSET, a stderr handler): both undone for later tests
        scrapy_log._uninstall_scrapy_root_handler()
        logging.root.setLevel(root_level)
        handler.close()
    lines = log.read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["ERROR: error: shown",
                                                          "CRITICAL: after"]  # fmt: skip


def test_scrapy_crawl_with_a_log_file(tmp_path) -> None:
    """``scrapy crawl`` with a mistyped setting and ``LOG_FILE``: stderr unchanged (one line),
    the file holds that line and the exit status."""
    log = tmp_path / "crawl.log"
    run = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "web", "-a", "urls=http://127.0.0.1:9/",
         "-s", "SIMHASH_MAX_DISTANSE=2", "-s", f"LOG_FILE={log}",
         "-s", f"STORAGE_URL=sqlite:///{tmp_path / 'crawl.db'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    error = "error: unknown setting SIMHASH_MAX_DISTANSE='2': did you mean SIMHASH_MAX_DISTANCE?"
    assert (run.returncode, run.stderr) == (2, error + "\n")
    assert re.fullmatch(f"{RECORD}{re.escape(error)}\n"
                        f"{RECORD}exit status 2: the crawl did not start\n",
                        log.read_text())  # fmt: skip

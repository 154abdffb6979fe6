"""Issue 15 item 5: crawled text never reaches the terminal raw, and CSV cells never run.

One real ``scrapy crawl`` (once per module) of a site of the scripted web on 127.0.0.1
(:mod:`crawler.sitegen.scripted`): an original page and
a near-duplicate copy whose title and extra lines hold terminal attacks (an OSC 52 clipboard
write, a screen clear, a window-title change, a C1 CSI ``\\x9b``, BEL, DEL) and a CSV formula
(``=cmd|...``). The copy is dropped, then the real commands run over what was stored:
``scrapy dropped`` in every format and with ``--explain``, ``--diff`` and ``--pair``,
``dedupreport`` (JSON and HTML), ``crawldiff``, and the errors that echo user input.

What must hold: no control character (C0 but tab and newline, DEL, C1) in any stdout or
stderr (but a CSV written to a pipe, which keeps the data: issue 25), nor in a report file;
the escaped form (``\\x1b``, ``\\u009b``) is shown instead; JSON output stays valid JSON
and decodes to the page's own text; a CSV parsed back has the formula cells prefixed with
``'``, numeric columns left numeric.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawler.commands.console import ESCAPED_NOTE
from crawler.sitegen.scripted import Answer, ScriptedSite, ScriptedWeb
from tests.conftest import ROOT, CrawlRun, run_crawl

#: What a terminal would act on: C0 but tab and newline, DEL, C1.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;pwned\x07"
CSI_C1 = "\x9b31m"
FORMULA = "=cmd|' /C calc'!A0"
HOSTILE_TITLE = f"{FORMULA} {TITLE}Copy{CSI_C1}"
HOSTILE_LINES = [f"Paste me {OSC52} now", f"Clear {CLEAR} the screen\x7f", f"Red {CSI_C1} text"]


def _paragraphs() -> list[str]:
    from crawler.sitegen.text import load_words

    rng = random.Random(15)
    words = [w for values in load_words().sections.values() for w in values
             if w.isalpha() and " " not in w]
    return [" ".join(rng.choice(words) for _ in range(30)) for _ in range(12)]


def _html(title: str, lines: list[str], nav: str = "") -> bytes:
    body = "".join(f"<p>{line}</p>" for line in lines)
    return (f"<!DOCTYPE html><html><head><title>{title}</title></head><body><nav>{nav}</nav>"
            f"<main>{body}</main></body></html>").encode()


def _pages() -> dict[str, bytes]:
    """``/a`` the original, ``/b`` its copy with the hostile title and lines, ``/`` the index;
    ``/b`` is linked from ``/a`` only, so it comes second and is the one dropped."""
    text = _paragraphs()
    return {"/": _html("Index", [" ".join(reversed(text[0].split()))], '<a href="/a">a</a>'),
            "/a": _html("Original", text, '<a href="/b">b</a>'),
            "/b": _html(HOSTILE_TITLE, [*text[:6], *HOSTILE_LINES, *text[6:]])}


@pytest.fixture(scope="module")
def site(scripted_web: ScriptedWeb) -> Iterator[ScriptedSite]:
    """The pages on a site of the session's scripted web, for this module's one crawl."""
    yield scripted_web[0].serve({path: Answer(body=body) for path, body in _pages().items()})
    scripted_web.reset()


@pytest.fixture(scope="module")
def hostile_crawl(site: ScriptedSite, tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    run = run_crawl(tmp_path_factory.mktemp("hostile-terminal"), urls=[site.url + "/"],
                    timeout=120, settings={"ROBOTSTXT_OBEY": False, "SIMHASH_MAX_DISTANCE": 12})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = run.rows("SELECT url, duplicate_of, reason FROM dropped")
    assert rows == [(site.url + "/b", site.url + "/a", "near_duplicate")], rows
    return run


def scrapy(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command line in a subprocess (stdout and stderr as the terminal gets them)."""
    return subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def assert_safe(proc: subprocess.CompletedProcess[str]) -> str:
    """No raw control character in stdout or stderr; stdout returned."""
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        found = RAW_CONTROL.findall(text)
        assert not found, f"{name} of {proc.args[3:]} holds {found!r}: {text[-2000:]!r}"
    return proc.stdout


def strings(data: Any) -> list[str]:
    """Every string in decoded JSON ``data`` (values, not keys)."""
    if isinstance(data, dict):
        return [s for value in data.values() for s in strings(value)]
    if isinstance(data, list):
        return [s for value in data for s in strings(value)]
    return [data] if isinstance(data, str) else []


def dropped(run: CrawlRun, *args: str) -> str:
    proc = scrapy("dropped", "--db", str(run.db_path), *args)
    assert proc.returncode == 0, proc.stderr
    return assert_safe(proc)


# --- scrapy dropped -----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("--wide",), ("--explain", "/b"),
                                  ("--explain", "/b", "--diff"), ("--pair", "/a", "/b", "--diff")],
                         ids=["table", "wide", "explain", "diff", "pair"])
def test_text_output_shows_the_attack_escaped(hostile_crawl: CrawlRun, args: tuple[str, ...],
                                              ) -> None:
    proc = scrapy("dropped", "--db", str(hostile_crawl.db_path), *args)
    out = assert_safe(proc)
    assert proc.returncode == 0 and "/b" in out
    if "--wide" not in args and args:  # a table lists URLs; an explanation titles and lines
        assert "\\x1b]0;pwned\\x07Copy\\u009b31m" in out
        assert proc.stderr.count(ESCAPED_NOTE) == 1  # said once, on stderr
    if "--diff" in args:  # dropped (or page A) second: its lines are "+" (or "-")
        assert "Paste me \\x1b]52;c;cm0gLXJmIH4=\\x07 now\n" in out
        assert "Clear \\x1b[2J\\x1b[H the screen\\u007f\n" in out


@pytest.mark.parametrize("args", [("--format", "json"), ("--log", "LOG", "--format", "json"),
                                  ("--explain", "/b", "--diff", "--format", "json")],
                         ids=["listing", "drop-log", "explain"])
def test_json_output_is_escaped_and_still_decodes_to_the_page(
        site: ScriptedSite, hostile_crawl: CrawlRun, args: tuple[str, ...]) -> None:
    args = tuple(str(hostile_crawl.dropped_log) if a == "LOG" else a for a in args)
    out = dropped(hostile_crawl, *args)
    data = [json.loads(line) for line in out.splitlines()]
    if "--explain" in args:
        assert data[0]["dropped"]["title"] == HOSTILE_TITLE
        assert f"+{HOSTILE_LINES[1]}" in data[0]["diff"]
    if "--log" in args:  # the drop log holds no title: URLs only
        assert [record["url"] for record in data] == [site.url + "/b"]
    else:
        assert "\\u009b" in out and "\\u001b" in out and HOSTILE_TITLE in strings(data)


def test_csv_neutralizes_formulas_and_keeps_the_data(hostile_crawl: CrawlRun) -> None:
    """Into a file or a pipe a CSV keeps the stored text (its control characters inside a
    quoted cell: issue 25); on a terminal it is escaped as every format is."""
    proc = scrapy("dropped", "--db", str(hostile_crawl.db_path), "--format", "csv")
    assert proc.returncode == 0 and not RAW_CONTROL.findall(proc.stderr), proc.stderr
    (row,) = list(csv.DictReader(io.StringIO(proc.stdout, newline="")))
    assert row["title"] == "'" + HOSTILE_TITLE  # formula neutralized, nothing else rewritten
    assert f'"\'{HOSTILE_TITLE}"' in proc.stdout  # quoted: it holds control characters
    assert row["url"].startswith("http") and row["distance"] == "0"  # numbers stay numbers


def test_errors_that_echo_input_are_escaped(hostile_crawl: CrawlRun) -> None:
    proc = scrapy("dropped", "--db", str(hostile_crawl.db_path), "--explain", f"/nope{TITLE}")
    assert proc.returncode == 1
    assert "\\x1b]0;pwned\\x07" in assert_safe(proc) + proc.stderr
    proc = scrapy("dropped", "--db", f"{hostile_crawl.workdir}/no{CLEAR}.db")
    assert proc.returncode == 1 and "\\x1b[2J" in proc.stderr
    assert_safe(proc)


# --- the other commands ---------------------------------------------------------------------


def test_dedupreport_json_and_html_are_escaped(hostile_crawl: CrawlRun, tmp_path: Path) -> None:
    proc = scrapy("dedupreport", "--db", str(hostile_crawl.db_path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert HOSTILE_TITLE in strings(json.loads(assert_safe(proc)))
    report = tmp_path / "report.html"
    proc = scrapy("dedupreport", "--db", str(hostile_crawl.db_path), "-o", str(report))
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    html = report.read_text(encoding="utf-8")
    assert not RAW_CONTROL.findall(html)
    assert "\\x1b]0;pwned\\x07Copy\\u009b31m" in html and "<title>" in html


def test_dedupreport_write_error_is_escaped(hostile_crawl: CrawlRun, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file, not a directory")
    target = tmp_path / "file" / f"report{OSC52}.html"
    proc = scrapy("dedupreport", "--db", str(hostile_crawl.db_path), "-o", str(target))
    assert proc.returncode == 1 and "\\x1b]52;c;" in proc.stderr
    assert_safe(proc)


def test_crawldiff_output_and_errors_are_escaped(hostile_crawl: CrawlRun) -> None:
    proc = scrapy("crawldiff", "--db", str(hostile_crawl.db_path), "1", "1")
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc)
    proc = scrapy("crawldiff", "--db", str(hostile_crawl.db_path), f"{CLEAR}1", "1")
    assert proc.returncode == 2 and "\\x1b[2J" in proc.stderr
    assert_safe(proc)
    proc = scrapy("crawldiff", f"{hostile_crawl.workdir}/x{TITLE}.db:1", "1")
    assert proc.returncode == 2 and "\\x1b]0;pwned" in proc.stderr
    assert_safe(proc)


def test_demo_usage_error_is_escaped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = scrapy("demo", "--out", f"{blocker}/{OSC52}")
    assert proc.returncode == 2 and "\\x1b]52;c;" in proc.stderr
    assert_safe(proc)


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_every_formula_start_is_neutralized_and_numbers_stay(start: str) -> None:
    from crawler.outputs.formats import csv_cell

    assert csv_cell(start + "SUM(A1)") == "'" + start + "SUM(A1)"
    assert csv_cell(-3) == -3 and csv_cell(None) is None and csv_cell("/a") == "/a"
